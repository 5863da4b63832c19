"""The activations silu, elu, selu, mish and softsign (issue 25), and every builtin's array backends.

* values and derivatives against formulas written here with ``math`` (the derivatives checked in
  turn against central differences), through the language (constants, ``diff``) and the heads;
* every array backend installed (array_api_strict, jax, torch) against numpy, for every builtin;
* limits of a one-layer NNGP/NTK-type program against scipy quadrature of the formulas here;
* the kernel templates programs/kernels/<name>_mlp.tp at finite width against their limits
  (fixed seed, 5 standard errors plus an O(1/n) allowance and the limit's error).
"""
from __future__ import annotations

import importlib.util
import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

import tensorprog as tp
from tensorprog import ir
from tensorprog.builtins import BUILTINS
from tensorprog.finite.backend import get_backend
from tensorprog.finite.evaluate import eval_fn
from tensorprog.symbolic.evaluate import evaluate
from tensorprog.symbolic.heads import HEADS, Delta
from tensorprog.tools import tailbound as tb

ROOT = Path(__file__).resolve().parent.parent
# SELU's constants as the paper prints them (Klambauer et al. 2017, eq. 14), not the package's
ALPHA, SCALE = 1.6732632423543772848, 1.0507009873554804934


def _sig(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _softplus(x: float) -> float:
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


#: activation (as written in a program, the argument x) -> (value, derivative) as math functions
REFS = {
    "silu(x)": (lambda x: x * _sig(x), lambda x: _sig(x) * (1 + x * (1 - _sig(x)))),
    "elu(x)": (lambda x: x if x > 0 else math.expm1(x), lambda x: 1.0 if x > 0 else math.exp(x)),
    "elu(x, 0.5)": (lambda x: x if x > 0 else 0.5 * math.expm1(x), lambda x: 1.0 if x > 0 else 0.5 * math.exp(x)),
    "selu(x)": (lambda x: SCALE * (x if x > 0 else ALPHA * math.expm1(x)),
                lambda x: SCALE if x > 0 else SCALE * ALPHA * math.exp(x)),
    "mish(x)": (lambda x: x * math.tanh(_softplus(x)),
                lambda x: math.tanh(_softplus(x)) + x * _sig(x) * (1 - math.tanh(_softplus(x)) ** 2)),
    "softsign(x)": (lambda x: x / (1 + abs(x)), lambda x: 1 / (1 + abs(x)) ** 2),
}
XS = np.array([-7.0, -2.5, -1.3, -0.4, -1e-3, 2e-3, 0.3, 1.1, 2.7, 8.0])


def vec(f, xs):
    return np.array([f(float(x)) for x in xs])


def out_fn(p: tp.Program, name: str) -> ir.Fn:
    """The function tree of an output's equation (a Moment's integrand, a constant's Const)."""
    (o,) = [o for o in p.ir.outputs if o.name == name]
    return p.ir.eqns[o.var].fn


def x_var(p: tp.Program) -> int:
    return next(e.var for e in p.ir.eqns if isinstance(e, ir.InitVector))


# ---- values and derivatives ----------------------------------------------------------------------------
@pytest.mark.parametrize("act", sorted(REFS))
def test_reference_derivatives_match_central_differences(act):
    """The derivative formulas above are right (so they can judge the package's)."""
    f, df = REFS[act]
    h = 1e-6
    for x in XS[np.abs(XS) > 1e-2]:
        assert df(x) == pytest.approx((f(x + h) - f(x - h)) / (2 * h), rel=1e-7, abs=1e-9), (act, x)


@pytest.mark.parametrize("act", sorted(REFS))
def test_value_through_the_language(act):
    f, _ = REFS[act]
    c = act.replace("x", "-0.8")
    p = tp.parse(f"vector x ~ normal()\nout o = mean({act})\nout c = {c}")
    x = x_var(p)
    assert out_fn(p, "c") == ir.Const(pytest.approx(f(-0.8), rel=1e-14))
    np.testing.assert_allclose(eval_fn(out_fn(p, "o"), {x: XS}.__getitem__), vec(f, XS), rtol=1e-14, atol=1e-300)


def test_elu_default_is_one_and_arity_is_checked():
    p = tp.parse("vector x ~ normal()\nout o = mean(elu(x))")
    x = x_var(p)
    assert out_fn(p, "o") == ir.Call("elu", (ir.Ref(x), ir.Const(1.0)))
    with pytest.raises(tp.TPTypeError, match=r"elu\(\) takes 1 or 2 arguments, got 3"):
        tp.parse("vector x ~ normal()\nout o = mean(elu(x, 1, 2))")
    with pytest.raises(tp.TPTypeError, match=r"selu\(\) takes 1 argument, got 2"):
        tp.parse("vector x ~ normal()\nout o = mean(selu(x, 1))")


@pytest.mark.parametrize("act", sorted(REFS))
def test_diff_of_the_activation(act):
    """``diff`` (the head's fdiff, which ``grad`` and the Ż terms use) against the formula."""
    _, df = REFS[act]
    p = tp.parse(f"vector x ~ normal()\nout o = mean(diff({act}, x))")
    x = x_var(p)
    got = eval_fn(out_fn(p, "o"), {x: XS}.__getitem__)
    np.testing.assert_allclose(got, vec(df, XS), rtol=1e-13, atol=1e-300)


def test_elu_derivative_in_its_parameter():
    x, a = sp.symbols("x a", real=True)
    d = HEADS["elu"](x, a).diff(a)
    xs, a0, h = XS, 0.7, 1e-6
    numeric = (BUILTINS["elu"].numpy(xs, a0 + h) - BUILTINS["elu"].numpy(xs, a0 - h)) / (2 * h)
    np.testing.assert_allclose(evaluate(d, {x: xs, a: np.full(len(xs), a0)}), numeric, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("name", ["silu", "elu", "selu", "mish", "softsign"])
def test_head_and_numpy_agree_in_float64_and_float32(name):
    b = BUILTINS[name]
    act = f"{name}(x)"
    f, _ = REFS[act]
    args = (1.0,) if b.arity == 2 else ()
    np.testing.assert_allclose(b.numpy(XS, *args), vec(f, XS), rtol=1e-14)
    got32 = b.numpy(XS.astype(np.float32), *args)
    assert got32.dtype == np.float32
    np.testing.assert_allclose(got32, vec(f, XS), rtol=3e-7)
    at = sp.Float(-0.8, 30)
    assert float(HEADS[name](at, *[sp.Float(1.0)] * len(args))) == pytest.approx(f(-0.8), rel=1e-14)


def test_extreme_arguments_stay_finite():
    big = np.array([-800.0, -50.0, 50.0, 800.0])
    for name in ("silu", "elu", "selu", "mish", "softsign"):
        b = BUILTINS[name]
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            out = b.numpy(big, *(1.0,) * (b.arity - 1))
        assert np.all(np.isfinite(out)), name


# ---- array backends ----------------------------------------------------------------------------------------
def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


BACKENDS = [pytest.param(b, marks=pytest.mark.skipif(not installed(b), reason=f"{b} not installed"))
            for b in ("array_api_strict", "jax", "torch")]


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_builtin_on_every_backend_matches_numpy(backend):
    lib = get_backend(backend)
    xs = np.concatenate([XS, [0.0, -40.0, 40.0]])
    for name, b in BUILTINS.items():
        if lib.lacks(name):
            assert b.special is not None and name not in lib.builtins, name
            continue
        x = xs + 9.0 if name in ("log", "sqrt") else xs
        args = [lib.asarray(x, np.float64)] + [0.3] * (b.arity - 1)
        if name in ("min", "max"):
            args[1] = lib.asarray(x[::-1], np.float64)
        want = b.numpy(x, *([x[::-1]] if name in ("min", "max") else [0.3] * (b.arity - 1)))
        with np.errstate(all="ignore"):
            got = lib.to_numpy(lib.builtins[name](*args))
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-300, err_msg=f"{name} on {backend}")


@pytest.mark.skipif(not installed("array_api_strict"), reason="array-api-strict not installed")
def test_array_api_strict_runs_the_activations_as_numpy_does():
    src = ("vector x ~ normal()\nmatrix W ~ normal()\nh = W @ silu(x)\n"
           "out o = mean(silu(h) + elu(h) + elu(h, 0.3) + selu(h) + mish(h) + softsign(h))\n"
           "out d = mean(diff(silu(h) * elu(h, 0.3) + selu(h) * mish(h) + softsign(h), h))")
    p = tp.parse(src)
    a = p.execute(n=128, trials=2, seed=5, backend="numpy").outputs
    b = p.execute(n=128, trials=2, seed=5, backend="array_api_strict").outputs
    for name in ("o", "d"):
        np.testing.assert_allclose(b[name].values, a[name].values, rtol=1e-12)


# ---- limits against scipy quadrature ------------------------------------------------------------------------
C11, C12, C22 = 1.2, 0.6, 0.9


def expect_1d(f, var: float) -> float:
    """E f(u), u ~ N(0, var), by scipy quad (split at 0)."""
    s = math.sqrt(var)
    g = lambda a: f(s * a) * math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    return sum(integrate.quad(g, lo, hi, epsabs=1e-14, epsrel=1e-13, limit=200)[0]
               for lo, hi in ((-14, 0), (0, 14)))


def expect_2d(f, g) -> float:
    """E f(u) g(v), (u, v) ~ N(0, [[C11, C12], [C12, C22]]), by nested scipy quad: u = s1·a,
    v = (C12/s1)·a + t·b, the inner integral split where v = 0."""
    s1 = math.sqrt(C11)
    c, t = C12 / s1, math.sqrt(C22 - C12 ** 2 / C11)
    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)

    def inner(a: float) -> float:
        mid = min(max(-c * a / t, -14.0), 14.0)
        h = lambda b: g(c * a + t * b) * phi(b)
        return sum(integrate.quad(h, lo, hi, epsabs=1e-14, epsrel=1e-13, limit=200)[0]
                   for lo, hi in ((-14.0, mid), (mid, 14.0)) if hi > lo)

    return sum(integrate.quad(lambda a: f(s1 * a) * phi(a) * inner(a), lo, hi, epsabs=1e-14,
                              epsrel=1e-13, limit=200)[0] for lo, hi in ((-14, 0), (0, 14)))


@pytest.mark.parametrize("act", sorted(REFS))
def test_limit_against_scipy_quadrature(act):
    """One layer of an NNGP/NTK: E φ(u), E φ(u)², E φ(u)φ(v), E φ'(u)φ'(v) of correlated Gaussians."""
    f, df = REFS[act]
    phi = lambda v: act.replace("x", v)
    src = (f"vector u, v ~ normal(cov=[[{C11}, {C12}], [{C12}, {C22}]])\n"
           f"out m = mean({phi('u')})\nout q = mean({phi('u')} * {phi('u')})\n"
           f"out k = mean({phi('u')} * {phi('v')})\n"
           f"out d = mean(diff({phi('u')}, u) * diff({phi('v')}, v))")
    lim = tp.parse(src).compile().limit().outputs
    refs = {"m": expect_1d(f, C11), "q": expect_1d(lambda x: f(x) ** 2, C11),
            "k": expect_2d(f, f), "d": expect_2d(df, df)}
    for name, ref in refs.items():
        assert abs(lim[name].value - ref) <= 1e-9 + 2 * lim[name].error, (act, name, lim[name].value, ref)
        assert lim[name].error < 1e-8, (act, name, lim[name].error)


# ---- finite width against the limit: the kernel templates ------------------------------------------------
TRIALS = 12


@pytest.mark.parametrize("name", ["silu", "elu", "selu", "mish", "softsign"])
def test_template_at_finite_width_is_within_5_se_of_the_limit(name):
    program = tp.load(ROOT / "programs" / "kernels" / f"{name}_mlp.tp", L=2, q12=0.3, b1=0.1)
    limit = program.compile().limit().outputs
    n, allow = 1024, 2.0
    run = program.execute(n=n, trials=TRIALS, seed=11).outputs
    for out in ("nngp", "ntk"):
        o, lim = run[out], limit[out]
        se = o.std / math.sqrt(TRIALS)
        assert se > 0 and lim.error < 1e-6
        assert abs(o.mean - lim.value) <= 5 * se + allow / n + lim.error, (name, out, o.mean, lim.value, se)


# ---- hypotheses and the tail bound read the records ----------------------------------------------------
@pytest.mark.parametrize("act,smooth", [("silu(h)", True), ("mish(h)", True), ("elu(h)", False),
                                        ("selu(h)", False), ("softsign(h)", False)])
def test_kinked_activations_are_named_with_non_gaussian_matrices(act, smooth):
    """The non-Gaussian Master Theorem needs smooth φ: elu, selu and softsign have kinks in φ'."""
    src = (f"vector x ~ normal()\nmatrix W ~ uniform()\nh = W @ x\ng = W @ {act}\n"
           f"out k = mean(g * g)\nout d = mean(diff({act}, h) ** 2)")
    lim = tp.parse(src).compile().limit()
    named = [w for w in lim.warnings if "[smooth nonlinearity]" in w]
    assert (named == []) == smooth, lim.warnings
    assert not [w for w in lim.warnings if "[polynomially bounded]" in w]   # e^{−relu(−x)} is bounded


@pytest.mark.parametrize("act,lip", [("elu(g)", 1.0), ("elu(g, 2)", 2.0), ("elu(g, 0.5)", 1.0),
                                     ("selu(g)", SCALE * ALPHA), ("softsign(g)", 1.0)])
def test_tail_bound_rules_of_the_monotone_activations(act, lip):
    p = tp.parse(f"vector g ~ normal()\nmatrix A ~ normal()\nh = A @ {act}\nout c = mean(relu(h)**2)")
    chain = tb.analyze(p, "c")
    assert chain.phi_lips == [pytest.approx(lip, rel=1e-12)]
    assert chain.limit == pytest.approx(p.compile().limit().outputs["c"].value, rel=1e-7)


@pytest.mark.parametrize("act,fragment", [("silu(g)", "silu is outside the rules"),
                                          ("mish(g)", "mish is outside the rules"),
                                          ("elu(g, -0.5)", "elu with a negative a (-0.5) is not monotone")])
def test_tail_bound_refuses_the_non_monotone_activations(act, fragment):
    p = tp.parse(f"vector g ~ normal()\nmatrix A ~ normal()\nh = A @ {act}\nout c = mean(relu(h)**2)")
    with pytest.raises(tb.TailBoundUnsupported, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        tb.analyze(p, "c")


# ---- every builtin: its head's derivative against central differences of its numpy function -------------
@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_every_head_derivative_matches_central_differences(name):
    """∂/∂ each argument (the head's fdiff, what diff, grad and the Ż terms use) away from kinks;
    step and sign have a Dirac mass there and 0 elsewhere."""
    b = BUILTINS[name]
    syms = sp.symbols("x y", real=True)[:b.arity]
    xs = np.array([-2.3, -1.1, -0.35, 0.45, 1.3, 2.9])
    env = {syms[0]: xs + 3.0 if name in ("log", "sqrt") else xs}
    if b.arity == 2:
        env[syms[1]] = np.full(len(xs), 0.3) if name in ("leaky_relu", "elu") else xs[::-1] + 0.1
    head = HEADS[name](*syms)
    h = 1e-6
    for k, s in enumerate(syms):
        d = head.diff(s)
        if name in ("step", "sign"):
            assert d.has(Delta) and d.subs(Delta(s), 0) == 0, d
            continue
        up = [env[t] + h if t == s else env[t] for t in syms]
        down = [env[t] - h if t == s else env[t] for t in syms]
        numeric = (b.numpy(*up) - b.numpy(*down)) / (2 * h)
        np.testing.assert_allclose(evaluate(d, env), numeric, rtol=1e-7, atol=1e-8, err_msg=f"{name} ∂{s}")


def test_every_head_pickles_by_reference():
    """Worker processes receive sympy expressions: each head must unpickle as the same class."""
    x = sp.Symbol("x", real=True)
    for name, b in BUILTINS.items():
        e = HEADS[name](x, *[sp.Float(0.3)] * (b.arity - 1))
        back = pickle.loads(pickle.dumps(e))
        assert back == e and back.func is e.func, name


@pytest.mark.parametrize("backend", [pytest.param("numpy")] + BACKENDS)
def test_each_backend_runs_the_activations_within_5_se_of_the_limit(backend):
    """E φ(u)φ(v) and E φ'(u)φ'(v) (one layer: iid coordinates, no O(1/n) bias) on every backend."""
    acts = sorted(REFS)
    lines = [f"vector u, v ~ normal(cov=[[{C11}, {C12}], [{C12}, {C22}]])"]
    for k, act in enumerate(acts):
        phi = lambda w: act.replace("x", w)
        lines += [f"out k{k} = mean({phi('u')} * {phi('v')})",
                  f"out d{k} = mean(diff({phi('u')}, u) * diff({phi('v')}, v))"]
    p = tp.parse("\n".join(lines))
    limit = p.compile().limit().outputs
    trials = 6
    run = p.execute(n=4096, trials=trials, seed=3, backend=backend).outputs
    for name, lim in limit.items():
        o = run[name]
        se = o.std / math.sqrt(trials)
        assert 0 < se and abs(o.mean - lim.value) <= 5 * se + lim.error, (backend, name, o.mean, lim.value, se)
