"""Seed 004: "A Deep Conditioning Treatment of Neural Networks" (Agarwal, Awasthi, Kale).

programs/cond_mu.tp     — normalized activations and their coefficient of non-linearity
                          μ = 1 − (E[X σ(X)])² (Definition 3.1, Appendix C.4; NormReLU eq. (4));
programs/cond_kernel.tp — the kernel of three inputs against depth: the off-diagonal entries
                          decay at rate 1 − μ and the condition number tends to 1 (Theorem 3.2,
                          Corollary 3.3, Lemma C.4).

The text extraction lost every formula of the paper; the expected values below are derived
here independently (Gaussian integrals in closed form, or scipy quadrature) and never read
from the programs' outputs.
"""
from __future__ import annotations

from math import acos, asin, e, exp, pi, sqrt
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import norm

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent
MU = str(ROOT / "programs" / "cond_mu.tp")
KERNEL = str(ROOT / "programs" / "cond_kernel.tp")
B_KINK = -1.6
GRAM = {"k12": 0.9, "k13": 0.5, "k23": 0.2}


# ---- independent references ---------------------------------------------------------------------
def normrelu_constants(b: float) -> tuple[float, float]:
    """μ_b = E max(X, b) and λ_b = 1/sd max(X, b), by quadrature (not the closed forms)."""
    def moment(k):
        left = integrate.quad(lambda x: b ** k * norm.pdf(x), -np.inf, b)[0]
        right = integrate.quad(lambda x: x ** k * norm.pdf(x), b, np.inf)[0]
        return left + right
    m = moment(1)
    return m, 1 / sqrt(moment(2) - m * m)


MU_B, LAM_B = normrelu_constants(B_KINK)


def dual_normrelu(rho: float) -> float:
    """E σ_b(u)σ_b(v), corr(u, v) = rho: the inner Gaussian integral in closed form, the outer by quad."""
    s = sqrt(max(1 - rho * rho, 0.0))

    def inner(u):                           # E[max(rho u + s W, b)]
        m = rho * u - B_KINK
        if s == 0:
            return max(rho * u, B_KINK)
        return B_KINK + m * norm.cdf(m / s) + s * norm.pdf(m / s)
    f = lambda u: norm.pdf(u) * max(u, B_KINK) * inner(u)
    pts = sorted({B_KINK, B_KINK / rho} if s == 0 else {B_KINK})     # where the integrand has kinks
    edges = [-np.inf] + pts + [np.inf]
    val = sum(integrate.quad(f, a, c, epsabs=1e-13, epsrel=1e-12)[0] for a, c in zip(edges, edges[1:]))
    return LAM_B ** 2 * (val - MU_B ** 2)


DUALS = {
    1: lambda r: (sqrt(1 - r * r) + (pi - acos(r)) * r - 1) / (pi - 1),      # normalized ReLU
    2: lambda r: 2 / pi * asin(r),                                          # normalized step = sign
    3: lambda r: (exp(r) - 1) / (e - 1),                                    # normalized exp
    4: dual_normrelu,                                                       # NormReLU_b, eq. (4)
}
MU_EXPECTED = {1: (pi - 2) / (2 * (pi - 1)), 2: 1 - 2 / pi, 3: (e - 2) / (e - 1),
               4: 1 - LAM_B ** 2 * norm.sf(B_KINK) ** 2}


def composed(act: int, rho: float, L: int) -> float:
    for _ in range(L):
        rho = DUALS[act](rho)
    return rho


def kernel_matrix(k: dict) -> np.ndarray:
    return np.array([[k["k11"], k["k12"], k["k13"]], [k["k12"], k["k22"], k["k23"]],
                     [k["k13"], k["k23"], k["k33"]]])


def kappa(K: np.ndarray) -> float:
    w = np.linalg.eigvalsh(K)
    return float(w[-1] / w[0])


def limit(path: str, **params) -> dict:
    return {k: v for k, v in tp.load(path, **params).compile().limit().outputs.items()}


# ---- the references themselves ------------------------------------------------------------------
def test_references_are_consistent():
    # the Appendix I closed forms agree with the quadrature
    P, p = norm.cdf(B_KINK), norm.pdf(B_KINK)
    assert MU_B == pytest.approx(B_KINK * P + p, abs=1e-10)
    assert LAM_B == pytest.approx(1 / sqrt(B_KINK ** 2 * P + B_KINK * p + 1 - P - (B_KINK * P + p) ** 2),
                                  rel=1e-9)
    assert LAM_B == pytest.approx(1.0507, abs=2e-3)         # "the same scaling factor as SeLU"
    for act, dual in DUALS.items():
        assert dual(1.0) == pytest.approx(1, abs=1e-8)       # normalized: E σ² = 1
        assert dual(0.0) == pytest.approx(0, abs=1e-8)       # centred:    (E σ)² = 0
        h = 1e-4                                             # σ̂'(0) = (E[Xσ(X)])² = 1 − μ
        assert (dual(h) - dual(-h)) / (2 * h) == pytest.approx(1 - MU_EXPECTED[act], abs=1e-6)


# ---- μ (cond_mu.tp) -----------------------------------------------------------------------------
def test_coefficient_of_nonlinearity_compiled_exactly():
    lim = limit(MU, b=B_KINK)
    for name, act in [("mu_relu", 1), ("mu_step", 2), ("mu_exp", 3), ("mu_normrelu", 4)]:
        assert lim[name].method == "exact", name
        assert lim[name].value == pytest.approx(MU_EXPECTED[act], rel=1e-10, abs=1e-12), name
        assert 0 < lim[name].value < 1
    assert lim["mu_b"].value == pytest.approx(MU_B, abs=1e-10)
    assert lim["lambda_b"].value == pytest.approx(LAM_B, rel=1e-9)


def test_coefficient_of_nonlinearity_symbolic_closed_forms():
    lim = tp.load(MU).compile(symbolic=True).limit().outputs
    import sympy as sp
    assert sp.simplify(lim["mu_relu"].exact - (sp.pi - 2) / (2 * (sp.pi - 1))) == 0
    assert sp.simplify(lim["mu_step"].exact - (1 - 2 / sp.pi)) == 0
    assert sp.simplify(lim["mu_exp"].exact - (sp.E - 2) / (sp.E - 1)) == 0


def test_coefficient_of_nonlinearity_finite_width():
    r = tp.load(MU, b=B_KINK).execute(n=4096, trials=8, seed=1).outputs
    for name, act in [("mu_relu", 1), ("mu_step", 2), ("mu_normrelu", 4)]:
        o = r[name]
        assert abs(o.mean - MU_EXPECTED[act]) < 5 * o.std / sqrt(8) + 4 / 4096, (name, o.mean, o.std)


# ---- the kernel against depth (cond_kernel.tp) --------------------------------------------------
@pytest.mark.parametrize("act", [1, 2, 3, 4], ids=["relu", "step", "exp", "normrelu"])
def test_kernel_compiled_limit(act):
    for L in (1, 4):
        lim = limit(KERNEL, act=act, L=L, b=B_KINK)
        assert abs(lim["mean_sigma"].value) < 1e-9 and lim["var_sigma"].value == pytest.approx(1, abs=1e-9)
        for d in ("k11", "k22", "k33"):
            assert lim[d].value == pytest.approx(1, abs=1e-8), (act, L, d)
        for name, rho in GRAM.items():
            want = composed(act, rho, L)
            assert abs(lim[name].value - want) < 5 * lim[name].error + 1e-8, (act, L, name, want)


@pytest.mark.parametrize("act, L, tol", [(1, 24, 3e-3), (2, 12, 1e-4), (3, 20, 5e-4)],
                         ids=["relu", "step", "exp"])
def test_off_diagonal_decays_at_rate_one_minus_mu(act, L, tol):
    lim = limit(KERNEL, act=act, L=L)
    p = composed(act, 0.9, L - 1)
    assert lim["k12_prev"].value == pytest.approx(p, rel=1e-8)
    ratio = lim["k12"].value / lim["k12_prev"].value
    assert ratio == pytest.approx(DUALS[act](p) / p, rel=1e-8)
    assert abs(ratio - (1 - MU_EXPECTED[act])) < tol


def test_condition_number_tends_to_one():
    G = kernel_matrix({"k11": 1, "k22": 1, "k33": 1, **GRAM})
    kappas = [kappa(G)]
    for L in (1, 2, 4, 8, 16):
        lim = limit(KERNEL, act=1, L=L)
        K = kernel_matrix({k: v.value for k, v in lim.items()})
        want = kernel_matrix({"k11": 1, "k22": 1, "k33": 1,
                              **{k: composed(1, r, L) for k, r in GRAM.items()}})
        assert kappa(K) == pytest.approx(kappa(want), rel=1e-8)
        kappas.append(kappa(K))
    assert all(a > b for a, b in zip(kappas, kappas[1:]))
    assert kappas[0] > 40 and kappas[-1] < 1.2


@pytest.mark.parametrize("act", [1, 2, 4], ids=["relu", "step", "normrelu"])
def test_kernel_finite_width(act):
    L, n, T = 3, 1024, 8
    r = tp.load(KERNEL, act=act, L=L, b=B_KINK).execute(n=n, trials=T, seed=2).outputs
    for name, rho in list(GRAM.items()) + [("k11", 1.0), ("k33", 1.0)]:
        want = composed(act, rho, L)
        o = r[name]
        assert abs(o.mean - want) < 5 * o.std / sqrt(T) + 4 / n, (act, name, o.mean, o.std, want)


# ---- a problem found in the tool ----------------------------------------------------------------
def test_exp_network_is_flagged_outside_the_hypotheses():
    lim = tp.load(KERNEL, act=3, L=3).compile().limit()
    assert any("exp" in w or "polynomial" in w for w in lim.warnings), lim.warnings
