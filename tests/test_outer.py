"""``outer(g, h)`` and rank-one matrix updates (tensorprog/lang/matrices.py), and the training programs
rewritten with ``grad`` and ``outer`` against their hand-written versions (tests/data/handwritten/)."""
from __future__ import annotations

import math
import re

import pytest

import tensorprog as tp

PAIRS = [("golikov_sgd_mup", {}), ("sgd_two_layer", {}), ("sgd_step_meanfield", {}), ("mup_train", {"T": 1}),
         pytest.param("mup_train", {"T": 2}, marks=pytest.mark.slow)]     # two steps: ~30 s of compiling


def ir_lines(text: str) -> list[str]:
    """The IR of a program, without the source-line comments."""
    return [re.sub(r"\s+# line \d+$", "", line) for line in str(tp.parse(text)).splitlines()]


HEAD = "param c = 0.7\nvector g, h, x, y ~ normal(cov=[[1, 0.2, 0.1, 0], [0.2, 1, 0, 0.3], [0.1, 0, 1, 0.4], [0, 0.3, 0.4, 1]])\n" \
       "matrix W ~ normal(var=2)\n"


@pytest.mark.parametrize("with_outer,by_hand", [
    ("A = W - c * outer(g, h)\nz = A @ x", "z = W @ x - c * g * mean(h * x)"),
    ("A = W - c * outer(g, h)\nz = A.T @ y", "z = W.T @ y - c * h * mean(g * y)"),
    ("A = W - c * outer(g, h) + outer(x, y)\nz = A @ tanh(x)",
     "z = W @ tanh(x) - c * g * mean(h * tanh(x)) + x * mean(y * tanh(x))"),
    ("A = 2 * outer(g, h) / c\nz = A @ x", "z = 2 / c * g * mean(h * x)"),
    ("A = -(W - outer(g, h))\nz = A @ x", "z = -(W @ x) + g * mean(h * x)"),
])
def test_products_expand_by_definition(with_outer, by_hand):
    """(W − c g hᵀ/n) x = W x − c g mean(h x), and the transpose, as the same IR (up to how the
    scalars are grouped, which the values check)."""
    a, b = tp.parse(HEAD + with_outer + "\nout q = mean(z * tanh(z))"), tp.parse(HEAD + by_hand + "\nout q = mean(z * tanh(z))")
    la, lb = a.compile().limit().outputs["q"], b.compile().limit().outputs["q"]
    assert abs(la.value - lb.value) <= 1e-12 + la.error + lb.error
    ra, rb = a.execute(n=64, trials=2, seed=1), b.execute(n=64, trials=2, seed=1)
    assert ra.outputs["q"].values == pytest.approx(rb.outputs["q"].values, abs=1e-13)


def test_the_plain_update_is_the_hand_written_equation():
    assert ir_lines(HEAD + "A = W - c * outer(g, h)\nz = A @ x\nout q = mean(z * z)") == \
        ir_lines(HEAD + "z = W @ x + (-c * g) * mean(h * x)\nout q = mean(z * z)")


def test_rectangular_outer_is_divided_by_the_columns():
    """For m x k: outer(g, h) = g hᵀ/k, so outer(g, h).T y = h (gᵀy)/k = h · mean(g y) · m/k."""
    text = ("dim m = 0.5\nvector g : m ~ normal()\nvector h, x ~ normal()\nvector y : m ~ normal()\n"
            "matrix A : m x n ~ normal()\nB = A + outer(g, h)\n")
    a = tp.parse(text + "z = B.T @ y\nw = B @ x\nout q = mean(z * h)\nout r = mean(w * g)")
    b = tp.parse(text + "z = A.T @ y + 0.5 * h * mean(g * y)\nw = A @ x + g * mean(h * x)\n"
                 "out q = mean(z * h)\nout r = mean(w * g)")
    for name in ("q", "r"):
        assert a.compile().limit().outputs[name].value == pytest.approx(b.compile().limit().outputs[name].value, abs=1e-12)
    ra, rb = a.execute(n=256, trials=1, seed=2), b.execute(n=256, trials=1, seed=2)
    assert ra.outputs["q"].values == pytest.approx(rb.outputs["q"].values, abs=1e-12)


@pytest.mark.parametrize("name,params", PAIRS, ids=[f"{n}{p}" for n, p in (getattr(c, "values", c) for c in PAIRS)])
def test_rewritten_programs_match_the_hand_written_ones(name, params):
    new, old = tp.load(f"programs/{name}.tp", **params), tp.load(f"tests/data/handwritten/{name}.tp", **params)
    ln, lo = new.compile().limit().outputs, old.compile().limit().outputs
    assert ln.keys() == lo.keys()
    for k in ln:
        exact = ln[k].method != "qmc" and lo[k].method != "qmc"
        tol = 1e-12 if exact else ln[k].error + lo[k].error     # QMC: randomized, equal within the errors
        assert abs(ln[k].value - lo[k].value) <= tol, (k, ln[k], lo[k])
    rn, ro = new.execute(n=128, trials=2, seed=3), old.execute(n=128, trials=2, seed=3)
    for k in rn.outputs:
        if params.get("T", 1) == 1:          # the same operations in the same order: bit for bit
            assert rn.outputs[k].values == ro.outputs[k].values, k
        else:                                # later steps group the rank-one sums differently
            assert rn.outputs[k].values == pytest.approx(ro.outputs[k].values, abs=1e-14), k


def test_updates_agree_with_finite_width():
    """Two SGD steps of a tanh network through W and W.T, at width 1024 against the limit (5 SE + O(1/n))."""
    text = """
param lr = 0.5
vector x, v ~ normal(cov=[[1, 0], [0, 1]])
matrix W ~ normal()
W0 = W
for s in 1..2 {
    h = W @ tanh(x)
    L = (mean(v * tanh(h)) - 1) ** 2 / 2
    dh = grad(L, h)
    W = W - lr * outer(dh, tanh(x)) + 0.1 * outer(tanh(h), v)
}
b = W.T @ tanh(W @ tanh(x))
out f = mean(v * tanh(W @ tanh(x)))
out k = mean(b * tanh(x))
out d = mean((W @ tanh(x) - W0 @ tanh(x)) ** 2)
"""
    program, trials = tp.parse(text), 8
    lim = program.compile().limit().outputs
    run = program.execute(n=1024, trials=trials, seed=4)
    for name in ("f", "k", "d"):
        o = run.outputs[name]
        assert abs(o.mean - lim[name].value) <= 5 * o.std / math.sqrt(trials) + 4 * (1 + abs(lim[name].value)) / 1024 \
            + lim[name].error, (name, o.mean, lim[name].value)


@pytest.mark.parametrize("text,cls,line,col,message", [
    (HEAD + "matrix V ~ normal()\nA = W + V\n", tp.TPTypeError, 5, 5, "two different random matrices"),
    (HEAD + "A = W + W.T\n", tp.TPTypeError, 4, 5, "two different random matrices"),
    (HEAD + "dim m = 0.5\nvector z : m ~ normal()\nA = W + outer(z, h)\n", tp.TPTypeError, 6, 5, "different shapes"),
    (HEAD + "A = outer(g, mean(h))\n", tp.TPTypeError, 4, 14, "two vectors"),
    (HEAD + "A = W * W\n", tp.TPTypeError, 4, 5, "multiply or divide by scalars"),
    (HEAD + "A = W * g\n", tp.TPTypeError, 4, 5, "a matrix used as a value"),
    (HEAD + "A = W - outer(g, h)\nout q = mean(A)\n", tp.TPTypeError, 5, 9, r"mean\(\) needs a vector"),
    (HEAD + "A = W - outer(g, h)\nz = A @ mean(x)\n", tp.TPTypeError, 5, 9, "must be a vector"),
    (HEAD + "def f(a) = outer(a, a)\nz = f(g)\n", tp.TPTypeError, 4, 12, r"outer\(\) is not allowed"),
    (HEAD + "A = W - outer(g, h)\nz = A + x\n", tp.TPTypeError, 5, 5, "a matrix used as a value"),
    (HEAD + "A = W / W\n", tp.TPTypeError, 4, 5, "multiply or divide by scalars"),
])
def test_bad_uses_are_located_errors(text, cls, line, col, message):
    with pytest.raises(cls, match=message) as err:
        tp.parse(text)
    assert (err.value.line, err.value.col) == (line, col), str(err.value)


def test_the_readme_ntk_snippet_is_the_arc_cosine_ntk():
    """The README's NTK-by-grad snippet against the arc-cosine recursion, computed here: ρ = 0.5 inputs,
    a var-2 ReLU layer, a readout; Θ = K² + 2·κ0(ρ2)·K¹ + 2·κ0(ρ2)·κ0(ρ)·ρ with
    K¹ = E relu·relu at ρ, ρ2 = 2K¹, K² = E relu·relu at ρ2, κ0(r) = E step·step = (π − acos r)/(2π)."""
    readme = open("README.md", encoding="utf-8").read()
    block = re.search(r"```\n(vector x, y ~ normal\(cov=\[\[1, 0\.5\].*?)```", readme, re.S).group(1)

    def relu_relu(r: float) -> float:
        return (math.sqrt(1 - r * r) + (math.pi - math.acos(r)) * r) / (2 * math.pi)

    def step_step(r: float) -> float:
        return (math.pi - math.acos(r)) / (2 * math.pi)
    rho = 0.5
    k1 = relu_relu(rho)
    rho2 = 2 * k1
    expected = relu_relu(rho2) + 2 * step_step(rho2) * k1 + 2 * step_step(rho2) * step_step(rho) * rho
    got = tp.parse(block).compile().limit().outputs["ntk"]
    assert got.method == "exact" and got.value == pytest.approx(expected, abs=1e-12)


def test_batchnorm_backward_by_grad_has_the_paper_rate():
    """programs/bn_gradient_grad.tp (the backward pass through batchnorm by grad) at the identity
    activation: the paper's linear rate λ_G = (B − 2)/(B − 3) = 2 for B = 4, within its stated error."""
    rate = tp.load("programs/bn_gradient_grad.tp", act=0).compile().limit().outputs["rate"]
    assert rate.error < 1e-3 and abs(rate.value - 2.0) <= rate.error


def test_the_gallery_training_program_agrees_with_finite_width():
    """programs/mup_train_batch.tp after one full-batch step (P = 2 examples): width 1024 against the limit."""
    program, trials = tp.load("programs/mup_train_batch.tp", T=1), 8
    lim = program.compile().limit().outputs
    assert lim["loss0"].value == pytest.approx(0.3125, abs=1e-10)        # f starts at 0: (1 + 0.25)/4
    run = program.execute(n=1024, trials=trials, seed=2)
    for name in ("loss0", "lossT"):
        o = run.outputs[name]
        assert abs(o.mean - lim[name].value) <= 5 * o.std / math.sqrt(trials) + 4 / 1024 + lim[name].error, name
    assert lim["lossT"].value < 0.3 * lim["loss0"].value                  # the step trains
