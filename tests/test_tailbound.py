"""tensorprog.tools.tailbound: Theorem 4.3.1 of Golikov's thesis (ch. 4) for programs of its class.

Checked here: the constants (K, C_0), the recursion (4.41)-(4.42) against its unrolled form and
against Proposition 1.5.4 / eq. 4.44 (exact when v̊^l = (rho lambda)^{2l}), the reduction of a
program to the class (lambda, v̊^l, the limit, all independent of the compiler but equal to its
limit), the refusals with located messages, and the bound against the empirical tail.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.tools import tailbound as tb

ROOT = Path(__file__).resolve().parent.parent
TAIL = ROOT / "programs" / "golikov_tailbound.tp"


def test_constants():
    assert tb.K_43 == pytest.approx(math.sqrt(2 * (3 + 64 * math.e ** 0.5)))
    assert tb.K_43 == pytest.approx(14.7322, abs=1e-4)
    assert tb.C0_43 == pytest.approx(4.85, abs=5e-3)          # "C_0 = 8 e^{-1/2} ≈ 4.85"


@pytest.fixture(scope="module")
def program():
    return tp.load(TAIL)


@pytest.fixture(scope="module")
def relu(program):
    return tb.analyze(program, "c_relu")


@pytest.fixture(scope="module")
def tanh_chain(program):
    return tb.analyze(program, "c_tanh")


def test_relu_chain(relu, program):
    assert relu.depth == 3 and relu.lam == pytest.approx(math.sqrt(2))
    assert relu.vhat == pytest.approx([1.0, 1.0, 1.0], rel=1e-9)
    assert relu.limit == pytest.approx(0.5, rel=1e-9)
    assert relu.limit == pytest.approx(program.compile().limit().outputs["c_relu"].value, rel=1e-9)
    # C_2^3(t) = K (lambda^6 + lambda^4 + lambda^2 + 2t) = K (14 + 2t)
    for t in (0.01, 0.3, 2.0):
        assert relu.C2(t) == pytest.approx(tb.K_43 * (14 + 2 * t), rel=1e-12)
        assert relu.C2(t) == pytest.approx(relu.C2_closed(t), rel=1e-12)


def test_tanh_chain(tanh_chain, program):
    q = [1.0]
    x, w = np.polynomial.hermite_e.hermegauss(150)
    w = w / math.sqrt(2 * math.pi)
    for _ in range(3):
        q.append(float(w @ np.tanh(math.sqrt(q[-1]) * x) ** 2))
    assert tanh_chain.lam == 1.0
    assert tanh_chain.vhat == pytest.approx(q[:3], rel=1e-9)
    assert tanh_chain.limit == pytest.approx(q[3], rel=1e-9)
    assert tanh_chain.limit == pytest.approx(program.compile().limit().outputs["c_tanh"].value, rel=1e-8)
    t = 0.05
    assert tanh_chain.C2(t) == pytest.approx(tb.K_43 * (1 + q[1] + q[2] + 2 * t), rel=1e-9)


def test_proposition_1_5_4_is_the_recursion():
    """With v̊^l = (rho lambda)^{2l} and tau = t lambda^{2L}, C_2^L = K q^L(t) lambda^{2L},
    q^L(t) = (1 − rho^{2L})/(1 − rho^2) + (L − 1) t  (eq. 1.61 / 4.44)."""
    for lam, rho, L, t in [(3.0, 0.7, 5, 0.1), (1.5, 0.4, 3, 0.5), (10.0, 0.9, 8, 0.01)]:
        chain = tb.Chain("<synthetic>", "c", L, 1.0, [1.0] * (L - 1), [lam] * (L - 1), lam, lam, lam,
                         [(rho * lam) ** (2 * l) for l in range(L)], float("nan"))
        q = (1 - rho ** (2 * L)) / (1 - rho ** 2) + (L - 1) * t
        assert chain.C2(t * lam ** (2 * L)) == pytest.approx(tb.K_43 * q * lam ** (2 * L), rel=1e-12)


def test_bound_values_and_vacuity(relu):
    # the bound is decreasing in n and in t, and >= 1 (vacuous) at every width one can run
    assert relu.bound(1024, 0.1) > relu.bound(10 ** 7, 0.1) > relu.bound(10 ** 8, 0.1)
    assert relu.bound(10 ** 6, 0.1) > relu.bound(10 ** 6, 0.5)
    assert relu.bound(16384, 0.1) >= 1
    n = relu.required_width(0.1, 0.05)
    assert relu.bound(n, 0.1) <= 0.05 < relu.bound(n - 1, 0.1)
    # two-sided: 2 · L · exp(−n (t / C_2)^2) once n e^{−C_0 n} is negligible
    assert relu.bound(10 ** 7, 0.1) == pytest.approx(6 * math.exp(-1e7 * (0.1 / relu.C2(0.1)) ** 2))
    assert tb.tail_bound(relu, "c_relu", 10 ** 7, 0.1, two_sided=False) == pytest.approx(
        relu.bound(10 ** 7, 0.1) / 2)
    with pytest.raises(tp.TPUsageError):
        relu.bound(100, 0.0)


def test_bound_holds_against_the_empirical_tail(program, tanh_chain):
    """The empirical tail at n = 48 (400 trials) is below the bound (trivially: the bound is vacuous
    there), and the two-sided tail is not tiny: the bound is loose, not the program."""
    limit = program.compile().limit().outputs["c_tanh"].value
    ps, ses = tb.empirical_tail(program, "c_tanh", 48, [0.01, 0.05], 400, seed=5, limit=limit)
    assert 0.2 < ps[0] <= 1 and ps[1] < ps[0]
    for t, p in zip([0.01, 0.05], ps):
        assert p <= tb.tail_bound(tanh_chain, "c_tanh", 48, t) + 1e-12
    p, se = tb.empirical_tail(program, "c_tanh", 48, 0.05, 400, seed=5, limit=limit)
    assert p == ps[1] and se == pytest.approx(math.sqrt(p * (1 - p) / 400))


CLASS_OK = """
vector g ~ normal(var=2)
matrix A ~ normal(var=3)
matrix B ~ normal()
y = -2 * tanh(g) / 4
h = A @ y
k = B @ leaky_relu(h, 0.2)
out c = 3 * mean(erf(k) * erf(k))
"""


def test_general_member_of_the_class():
    p = tp.parse(CLASS_OK)
    chain = tb.analyze(p, "c")
    # sigma_1 Lip(phi_1) = sqrt(3)/2, sigma_2 Lip(phi_2) = 1, sqrt(3) Lip(chi) = sqrt(3)·2/sqrt(pi)
    assert chain.phi_lips == pytest.approx([0.5, 1.0])
    assert chain.lam == pytest.approx(math.sqrt(3) * 2 / math.sqrt(math.pi))
    assert chain.vhat[0] == 2.0 and any("variance 2" in x for x in chain.notes)
    assert chain.limit == pytest.approx(p.compile().limit().outputs["c"].value, rel=1e-7)


def test_output_scaled_by_a_constant():
    p = tp.parse("vector g ~ normal()\nmatrix A ~ normal(var=2)\ny = relu(g)\nh = A @ y\n"
                 "out c = mean(relu(h) * relu(h)) / 4\nout d = -mean(relu(h) ** 2)")
    chain = tb.analyze(p, "c")
    assert chain.limit == pytest.approx(0.125) and chain.chi_lip == pytest.approx(0.5)
    assert chain.lam == pytest.approx(math.sqrt(2))
    with pytest.raises(tb.TailBoundUnsupported):
        tb.analyze(p, "d")


def test_rules_are_upper_bounds():
    """relu(g) − relu(−g) = g: accepted (non-decreasing minus non-increasing), with the rules'
    Lipschitz constant 2 — an upper bound, not the exact 1 (pass lam=1 to use the exact one)."""
    p = tp.parse("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ (relu(g) - relu(-g))\n"
                 "out c = mean(relu(h)**2)")
    chain = tb.analyze(p, "c")
    assert chain.phi_lips == [2.0] and chain.lam == 2.0
    assert chain.vhat == pytest.approx([1.0, 1.0]) and chain.limit == pytest.approx(0.5)


@pytest.mark.parametrize("text,fragment", [
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ relu(g)\nk = A @ relu(h)\nout c = mean(relu(k)**2)",
     "used twice"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A.T @ relu(g)\nout c = mean(relu(h)**2)", "transposed"),
    ("vector g ~ normal()\nmatrix A ~ uniform()\nh = A @ relu(g)\nout c = mean(relu(h)**2)", "Gaussian"),
    ("vector g ~ rademacher()\nmatrix A ~ normal()\nh = A @ relu(g)\nout c = mean(relu(h)**2)", "g^1"),
    ("vector g ~ normal()\nmatrix A ~ normal()\ns = mean(g*g)\nh = A @ (s * relu(g))\nout c = mean(relu(h)**2)",
     "scalar"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ sin(g)\nout c = mean(relu(h)**2)", "sin"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ abs(g)\nout c = mean(relu(h)**2)", "abs"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ sigmoid(g)\nout c = mean(relu(h)**2)", "vanish at 0"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ (g*g)\nout c = mean(relu(h)**2)", "product"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ (relu(g) - tanh(g))\nout c = mean(relu(h)**2)",
     "monotone"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ relu(g)\nout c = mean(relu(h))", "chi(g) ** 2"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ relu(g)\nout c = mean(h**4)", "chi(g) ** 2"),
    ("vector g ~ normal()\nmatrix A ~ normal()\nh = A @ relu(g)\nout c = mean(exp(h)**2)", "exp"),
    ("vector g, f ~ normal(cov=[[1, 0], [0, 1]])\nmatrix A ~ normal()\nh = A @ relu(g + f)\nout c = mean(h**2)",
     "exactly one vector"),
])
def test_refusals_are_located(text, fragment):
    p = tp.parse(text)
    with pytest.raises(tb.TailBoundUnsupported) as err:
        tb.analyze(p, "c")
    msg = str(err.value)
    assert msg.startswith("<string>:") and "Theorem 4.3.1" in msg and fragment in msg, msg


def test_refusals_of_the_call():
    p = tp.load(TAIL)
    with pytest.raises(tb.TailBoundUnsupported, match="Gaussian matrices"):
        tb.analyze(p, "c_relu", matrix_dist="uniform")
    with pytest.raises(tp.TPUsageError, match="no output named"):
        tb.analyze(p, "nope")
    chain = tb.analyze(p, "c_relu", lam=1.0)
    assert chain.lam == 1.0 and any("below the rules" in x for x in chain.notes)


def test_cli_main(capsys):
    from tensorprog.cli import main
    assert main(["tailbound", str(TAIL), "--output", "c_tanh", "--widths", "32", "--t", "0.05", "--trials", "40"]) == 0
    out = capsys.readouterr().out
    assert "c^3 of Theorem 4.3.1's class" in out and "(vacuous)" in out
    assert main(["tailbound", str(ROOT / "programs" / "golikov_wigner.tp"), "--output", "m2", "--widths", "32"]) == 2
    assert "outside Theorem 4.3.1's class" in capsys.readouterr().err
