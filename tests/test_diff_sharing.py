"""``diff`` through a B-argument Nonlin (batchnorm over a batch of B vectors).

Every ∂x_b/∂h_a depends on all B inputs through the batch mean and variance.  The
derivative must be the same function as before (checked against a Jacobian written by
hand in numpy, and bit for bit against the plain ``sp.diff`` + ``from_sympy`` tree),
and the IR must stay small: sub-expressions shared between (and inside) the B²
derivatives become Nonlins of their own instead of being repeated.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.symbolic import functions as fnsym
from tensorprog import ir
from tensorprog.finite.evaluate import eval_fn
from tensorprog.lang.lower import Lowerer, declared_names
from tensorprog.lang.diff import MIN_SHARED
from tensorprog.lang.parser import parse_text

GRAD = Path(__file__).resolve().parent.parent / "programs" / "bn_gradient.tp"

# the Jacobian of batchnorm as a program: J[a, b] = ∂φ(BN(h)_b)/∂h_a
JACOBIAN = """\
param B = 4
param act = 1
param eps = 0.1
vector h[1..B] ~ normal()
def phi(x) = relu(x) if act == 1 else tanh(x)
mu = sum(b in 1..B: h[b]) / B
s2 = sum(b in 1..B: (h[b] - mu) ** 2) / B
for b in 1..B { x[b] = phi((h[b] - mu) / sqrt(s2 + eps)) }
for a in 1..B { for b in 1..B { J[a, b] = diff(x[b], h[a]) } }
out o = mean(J[1, 1])
"""


def lowered(src: str, **params) -> Lowerer:
    """The lowering of a program, with its environment (the variable bound to each name)."""
    module = parse_text(src)
    low = Lowerer({k: float(v) for k, v in params.items()}, ".", 1_000_000)
    low.bound_somewhere = declared_names(module.statements)
    low.run(module.statements)
    return low


def var(low: Lowerer, name: str, *idx: int) -> int:
    return low.env[(name, idx)].fn.var


def run_ir(eqns, inputs: dict[str, np.ndarray]) -> dict[int, np.ndarray]:
    """Every variable of a program made of initial vectors and functions, at given inputs."""
    env: dict[int, np.ndarray] = {}
    with np.errstate(all="ignore"):
        for e in eqns:
            if isinstance(e, ir.InitVector):
                env[e.var] = inputs[e.name]
            elif isinstance(e, ir.Moment):
                env[e.var] = float(np.mean(eval_fn(e.fn, env.__getitem__)))
            else:
                env[e.var] = eval_fn(e.fn, env.__getitem__)
    return env


def hand_jacobian(h: np.ndarray, eps: float, act: int) -> np.ndarray:
    """J[a, b, α] = ∂φ(y_b)/∂h_a with y = (h − μ)/√(s² + ε): (δ_ab − 1/B)/σ − y_a y_b/(Bσ)."""
    B = h.shape[0]
    mu = h.mean(axis=0)
    sigma = np.sqrt(((h - mu) ** 2).mean(axis=0) + eps)
    y = (h - mu) / sigma
    dphi = (y > 0) * 1.0 if act == 1 else 1 - np.tanh(y) ** 2
    dy = (np.eye(B)[:, :, None] - 1 / B) / sigma - y[:, None, :] * y[None, :, :] / (B * sigma)
    return dy * dphi[None, :, :]


def draws(B: int, m: int = 40, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((B, m))


@pytest.mark.parametrize("B", [4, 12])
@pytest.mark.parametrize("act", [1, 2])
def test_batchnorm_jacobian_against_the_hand_derivative(B, act):
    low = lowered(JACOBIAN, B=B, act=act)
    h = draws(B)
    env = run_ir(low.eqns, {f"h[{b}]": h[b - 1] for b in range(1, B + 1)})
    want = hand_jacobian(h, 0.1, act)
    for a in range(1, B + 1):
        for b in range(1, B + 1):
            np.testing.assert_allclose(env[var(low, "J", a, b)], want[a - 1, b - 1], rtol=1e-10, atol=1e-12)


def plain_derivative_tree(eqns, e_var: int, x_var: int) -> ir.Fn:
    """The derivative as lowering computed it before sharing: the expression expanded through
    every Nonlin binding, ``sp.diff``, one tree by ``from_sympy``."""

    def leaf(var: int) -> sp.Expr:
        if var != x_var and isinstance(eqns[var], ir.Nonlin):
            return fnsym.to_sympy(eqns[var].fn, leaf)
        return sp.Symbol(f"v{var}", real=True)
    derivative = sp.diff(leaf(e_var), leaf(x_var))
    return fnsym.from_sympy(derivative, lambda s: int(s.name[1:]))


@pytest.mark.parametrize("act", [1, 2])
def test_shared_derivatives_evaluate_bit_for_bit_like_the_plain_tree(act):
    B = 4
    low = lowered(JACOBIAN, B=B, act=act)
    h = draws(B, seed=1)
    env = run_ir(low.eqns, {f"h[{b}]": h[b - 1] for b in range(1, B + 1)})
    hs = [var(low, "h", a) for a in range(1, B + 1)]
    helpers = 0
    for a in range(1, B + 1):
        for b in range(1, B + 1):
            plain = plain_derivative_tree(low.eqns, var(low, "x", b), hs[a - 1])
            assert set(ir.refs(plain)) <= set(hs)                  # expanded down to the inputs
            shared = low.eqns[var(low, "J", a, b)].fn
            helpers += len(set(ir.refs(shared)) - set(hs))
            with np.errstate(all="ignore"):
                old = eval_fn(plain, env.__getitem__)
            assert np.array_equal(env[var(low, "J", a, b)], old), (a, b)
    assert helpers > 0                                             # the test exercises sharing


def test_small_derivatives_are_one_tree_as_before():
    p = tp.parse("vector h ~ normal()\na = tanh(h)\nout o = mean(diff(a * a, h))")
    assert len(p.ir.eqns) == 3 and fnsym.shape(p.ir.eqns[2].fn)[1] < MIN_SHARED * 2


def test_shared_subexpressions_become_nonlins_at_the_diff():
    src = ("vector h ~ normal()\nu = tanh(h) * h + sin(h) / 2 + h * h / 3\n"
           "y = tanh(u) + u * u\nout o = mean(diff(y, h))")
    p = tp.parse(src)
    helpers = [e for e in p.ir.eqns if isinstance(e, ir.Nonlin) and e.pos == ir.Pos(4, 14)]
    assert helpers                                   # u's expansion, used three times
    h = draws(1, m=25, seed=2)[0]
    env = run_ir(p.ir.eqns, {"h": h})
    u = np.tanh(h) * h + np.sin(h) / 2 + h * h / 3
    du = (1 - np.tanh(h) ** 2) * h + np.tanh(h) + np.cos(h) / 2 + 2 * h / 3
    want = (1 - np.tanh(u) ** 2 + 2 * u) * du
    np.testing.assert_allclose(env[p.ir.outputs[0].var], np.mean(want), rtol=1e-12)


def test_shared_derivative_compiles_to_the_hand_derivative():
    src = ("vector h ~ normal()\nu = tanh(h) * h + sin(h) / 2 + h * h / 3\n"
           "y = tanh(u) + u * u\nout o = mean(diff(y, h))\n"
           "du = (1 - tanh(h) ** 2) * h + tanh(h) + cos(h) / 2 + 2 * h / 3\n"
           "out r = mean((1 - tanh(u) ** 2 + 2 * u) * du)")
    lim = tp.parse(src).compile().limit().outputs
    assert lim["o"].value == pytest.approx(lim["r"].value, abs=10 * (lim["o"].error + lim["r"].error) + 1e-12)


def function_ops(p: tp.Program) -> int:
    """Operations of all function trees, counted as trees (what evaluating them walks)."""
    return sum(fnsym.shape(e.fn)[1] for e in p.ir.eqns if isinstance(e, ir.FUNCTION_OPS))


def test_backward_batchnorm_ir_grows_quadratically_not_as_b4():
    """bn_gradient.tp has B² derivatives ∂x_b/∂h_a, each a function of all B inputs: the IR is
    O(B²) operations (it was O(B⁴): 292 000 at B = 12, hours of lowering at B = 32)."""
    sizes = {}
    for B in (8, 32):
        p = tp.load(GRAD, B=B, D=1, act=1)
        sizes[B] = function_ops(p)
        assert sizes[B] < 60 * B * B, (B, sizes[B])
        assert len(p.ir.eqns) < 12 * B, (B, len(p.ir.eqns))
        assert max(fnsym.shape(e.fn)[1] for e in p.ir.eqns if isinstance(e, ir.Nonlin)) < 200 * B
    assert sizes[32] < 20 * sizes[8]                     # ×16 for B², ×256 for B⁴


def test_backward_batchnorm_executes_at_b32():
    r = tp.load(GRAD, B=32, D=1, act=1).execute(n=128, trials=1, seed=0)
    assert np.isfinite(r.outputs["rate"].mean) and r.outputs["rate"].mean > 1
