"""``grad(f, x)`` (issue 16, item 1): n·∂f/∂x by reverse mode over the IR, lowered to ordinary equations.

* the kernel templates programs/kernels/relu_mlp.tp and tanh_mlp.tp (backward passes by grad) equal
  their hand-written versions (tests/data/*_mlp_hand.tp), in the limit to 1e-12 and bit for bit at
  finite width;
* it equals hand derivations through the chain rule on scalars, Nonlins with scalar arguments
  (centring), weight sharing and transposes, at finite width to 1e-12;
* shared paths are emitted once; the finite width agrees with the limit within 5 SE;
* bad uses are located errors (exit 2 at the CLI).
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

import tensorprog as tp
from tensorprog import ir

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "programs" / "kernels"
HAND = ROOT / "tests" / "data"


# ---- the kernel templates: grad vs the hand-written backward pass -------------------------------------------
@pytest.mark.parametrize("name", ["relu_mlp", "tanh_mlp"])
@pytest.mark.parametrize("L", [2, 3])
def test_grad_template_equals_the_hand_written_one_in_the_limit(name, L):
    hand = tp.load(HAND / f"{name}_hand.tp", L=L).compile().limit().outputs
    auto = tp.load(KERNELS / f"{name}.tp", L=L).compile().limit().outputs
    assert set(hand) == set(auto)
    for out in hand:
        assert auto[out].value == pytest.approx(hand[out].value, abs=1e-12)


@pytest.mark.parametrize("name", ["relu_mlp", "tanh_mlp"])
def test_grad_template_equals_the_hand_written_one_at_finite_width(name):
    hand = tp.load(HAND / f"{name}_hand.tp").execute(n=96, trials=2, seed=7).outputs
    auto = tp.load(KERNELS / f"{name}.tp").execute(n=96, trials=2, seed=7).outputs
    for out in hand:
        assert auto[out].values == hand[out].values          # the same operations: bit for bit


def test_grad_template_emits_the_hand_written_backward_equations():
    """The backward equations are the hand-written ones (same functions, same transposed MatMuls),
    each once although the three grads of fx share the path."""
    def backward(path) -> tuple[int, int]:
        eqns = tp.load(path).ir.eqns
        return (sum(isinstance(e, ir.MatMul) and e.transposed for e in eqns),
                sum(isinstance(e, ir.Nonlin) and "step" in ir.calls(e.fn) for e in eqns))
    assert backward(KERNELS / "relu_mlp.tp") == backward(HAND / "relu_mlp_hand.tp") == (4, 6)


# ---- hand derivations -------------------------------------------------------------------------------------
def same_at_finite_width(text: str, pairs: list[tuple[str, str]], n: int = 64) -> None:
    """Every pair of outputs (grad, hand-written) agrees to 1e-12 at width n."""
    run = tp.parse(text).execute(n=n, trials=2, seed=3).outputs
    for a, b in pairs:
        for u, v in zip(run[a].values, run[b].values):
            assert u == pytest.approx(v, abs=1e-12), (a, b)


def test_the_issue_example():
    text = """vector h, v ~ normal()
g = grad(mean(v * tanh(h)), h)
out a = mean(g * h * h)
out b = mean(v * (1 - tanh(h) ** 2) * h * h)
"""
    same_at_finite_width(text, [("a", "b")])
    lim = tp.parse(text).compile().limit().outputs
    assert lim["a"].value == pytest.approx(lim["b"].value, abs=1e-12)


def test_chain_rule_through_scalars():
    """f = (mean(v tanh(h)) − y)²: the Moment's adjoint is 2(m − y)."""
    same_at_finite_width("""param y = 0.3
vector x, v ~ normal()
matrix W ~ normal()
h = W @ x
m = mean(v * tanh(h))
g = grad((m - y) ** 2 + 3 * m, x)
out a = mean(g * sin(x))
out b = mean((2 * (m - y) + 3) * (W.T @ (v * (1 - tanh(h) ** 2))) * sin(x))
""", [("a", "b")])


def test_through_a_nonlin_with_scalar_arguments():
    """c = h − mean(h): n·∂/∂h of mean(tanh(c)) is tanh'(c) − mean(tanh'(c))."""
    same_at_finite_width("""vector x ~ normal()
matrix W ~ normal()
h = W @ x
c = h - mean(h)
s = mean(c * c)
g = grad(mean(tanh(c)) + s, x)
out a = mean(g * cos(x))
out b = mean((W.T @ (1 - tanh(c) ** 2 - mean(1 - tanh(c) ** 2) + 2 * c - 2 * mean(c))) * cos(x))
""", [("a", "b")])


def test_weight_sharing_and_transposes():
    """x2 = W tanh(W x) (W used twice) and z = Wᵀ x2: every use contributes."""
    same_at_finite_width("""vector x, v ~ normal()
matrix W ~ normal()
h1 = W @ x
h2 = W @ tanh(h1)
z = W.T @ sin(h2)
g = grad(mean(v * z) + mean(h2 * x), x)
gs = W @ v
d2 = cos(h2) * gs + x
out a = mean(g * g)
out b = mean(((W.T @ ((W.T @ d2) * (1 - tanh(h1) ** 2))) + h2) ** 2)
""", [("a", "b")])


def test_grads_of_one_f_share_the_path():
    """grad(f, x[1]) after grad(f, x[3]) emits only the missing steps."""
    text = """vector x0 ~ normal()
matrix W ~ normal()
x[0] = x0
for l in 1..3 { x[l] = W @ tanh(x[l - 1]) }
f = mean(tanh(x[3]))
g3 = grad(f, x[3])
g1 = grad(f, x[1])
g1b = grad(f, x[1])
out a = mean(g1 * g1b) + mean(g3)
"""
    eqns = tp.parse(text).ir.eqns
    transposed = [e for e in eqns if isinstance(e, ir.MatMul) and e.transposed]
    assert len(transposed) == 2


# ---- finite width agrees with the limit ----------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    """param y = 0.5
vector x, v ~ normal()
matrix W[1..2] ~ normal()
h1 = W[1] @ x
h2 = W[2] @ tanh(h1)
f = mean(v * tanh(h2))
l = (f - y) ** 2 / 2
gx = grad(l, x)
g1 = grad(l, h1)
out a = mean(gx * gx)
out b = mean(g1 * tanh(h1))
out c = mean(grad(f, h2) * v)
""",
    """vector x ~ normal()
matrix W ~ normal(var=2)
h = W @ sin(x)
c = h - mean(h)
g = grad(mean(tanh(c) * c), x)
out a = mean(g * x)
out b = mean(g * g)
""",
])
def test_finite_width_agrees_with_the_limit(text):
    p = tp.parse(text)
    lim = p.compile().limit().outputs
    trials, n = 8, 1024
    run = p.execute(n=n, trials=trials, seed=11).outputs
    for name, o in run.items():
        se = o.std / math.sqrt(trials)
        assert abs(o.mean - lim[name].value) <= 5 * se + 4 * (1 + abs(lim[name].value)) / n + lim[name].error, name


# ---- located errors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line, col, why", [
    ("g = grad(mean(x), y)", (3, 5), "x (y) does not influence f"),
    ("g = grad(x, x)", (3, 10), "f is not a scalar"),
    ("g = grad(mean(x), mean(x))", (3, 19), "x must be the name of a vector"),
    ("g = grad(2, x)", (3, 13), "does not influence f"),
    ("g = grad(mean(step(x)), x)", (3, 5), "Dirac"),
    ("g = grad(mean(x))", (3, 5), "two arguments"),
])
def test_bad_grads_are_located_errors(line, col, why):
    text = f"vector x ~ normal()\nvector y ~ normal()\n{line}\nout o = mean(g)\n"
    with pytest.raises(tp.TPError) as err:
        tp.parse(text)
    assert str(err.value).startswith(f"<string>:{col[0]}:{col[1]}:"), str(err.value)
    assert why in str(err.value)


def test_a_vector_computed_before_x_does_not_influence_f():
    text = "vector x ~ normal()\nh = tanh(x)\nvector y ~ normal()\nout o = mean(grad(mean(h * y), y) * grad(mean(h), x))\n"
    p = tp.parse(text)
    with pytest.raises(tp.TPError, match="does not influence"):
        tp.parse(text.replace("grad(mean(h), x)", "grad(mean(y), h)"))
    assert p.compile().limit().outputs["o"].value == pytest.approx(0.0, abs=1e-12)


def test_bad_grad_at_the_cli_exits_2(tmp_path):
    path = tmp_path / "bad.tp"
    path.write_text("vector x, y ~ normal()\nout o = mean(grad(mean(x), y))\n")
    proc = subprocess.run([sys.executable, "-m", "tensorprog.cli", "check", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert f"{path}:2:14:" in proc.stderr and "does not influence" in proc.stderr
    assert "Traceback" not in proc.stderr
