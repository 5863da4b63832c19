"""mvt matrices in the limit: W = diag(S)·G with G iid Gaussian and S iid, S² = (ν−2)/χ²_ν.

Each row of an mvt matrix is S·g with one random scale per row, so (Wx)_i = S_i (Gx)_i and
(Wᵀy)_j = (Gᵀ(S ⊙ y))_j: the compiler writes Z^{Wx} = |u|·Z^{Gx}, Z^{Wᵀy} = Z^{Gᵀ(|u| y)}, where u is
an engine law ``mvt_scale`` (±S, a fair sign; |u| has the law of S). These tests check the law
against the chi-square it is built from, compiled values against integrals written here, and
the compiled limit against finite width (forward and backward through Wᵀ)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special, stats

import tensorprog as tp
from tensorprog.expect.laws import Coord, Law


def s_moment(n: int, nu: float) -> float:
    """E S^n = E[((ν−2)/X)^{n/2}], X ~ χ²_ν, by quadrature over the chi-square density."""
    f = lambda x: ((nu - 2) / x) ** (n / 2) * stats.chi2.pdf(x, nu)
    return integrate.quad(f, 0, np.inf, limit=400, epsabs=0, epsrel=1e-12)[0]


@pytest.mark.parametrize("nu", [3.0, 6.0, 10.5])
def test_law_moments_are_those_of_the_row_scale(nu):
    law = Law("mvt_scale", 1, nu)
    for n in range(0, 8):
        if n < nu:
            assert float(law.abs_moment(n)) == pytest.approx(s_moment(n, nu), rel=1e-9), n
        else:
            assert law.abs_moment(n) is sp.oo
    assert float(law.moment(2)) == pytest.approx(1.0, rel=1e-14)      # the entries keep their variance


def test_law_numerics_density_quantiles_and_rule():
    nu = 6.0
    c = Coord(Law("mvt_scale", 1, nu))
    # density: ½ p_S(|t|), normalised, matching the sympy density used for Dirac masses
    mass = 2 * integrate.quad(lambda t: c.pdf(np.array([t]))[0], 0, np.inf, limit=200)[0]
    assert mass == pytest.approx(1.0, abs=1e-10)
    t = sp.Symbol("t", real=True)
    dens = Law("mvt_scale", 1, nu).density(t)
    for x in (0.3, 0.9, 2.5):
        assert float(dens.subs(t, x)) == pytest.approx(c.pdf(np.array([x]))[0], rel=1e-12)
    assert c.pdf(np.array([0.0]))[0] == 0.0 and dens.subs(t, 0) == 0
    # quantiles: |u| = S = sqrt((ν−2)/X) with P(|u| <= s) = P(X >= (ν−2)/s²)
    q = np.array([0.6, 0.8, 0.99])
    s = c.ppf(q)
    assert stats.chi2.sf((nu - 2) / s ** 2, nu) == pytest.approx(2 * q - 1, rel=1e-10)
    assert np.allclose(c.ppf(1 - q), -s)
    # the piecewise rule integrates smooth moments
    x, w = c.rule(24)
    assert w.sum() == pytest.approx(1.0, abs=1e-12)
    assert (w * x ** 2).sum() == pytest.approx(1.0, rel=1e-8)


TANH = """vector x ~ normal(var = 2)
matrix W ~ mvt(6)
h = W @ x
out q = mean(tanh(h) ** 2)
out k = mean(h ** 4) / mean(h ** 2) ** 2
out r = mean(relu(h) ** 2)
"""


def test_compiled_values_match_integrals_over_the_row_scale():
    lim = tp.parse(TANH).compile().limit().outputs
    nu, var = 6.0, 2.0
    # E tanh(S·g·√var)², g ~ N(0,1): nested adaptive quadrature, outer over X ~ χ²_ν (S large
    # near X = 0 makes tanh(S g)² a narrow well at g = 0, which Gauss–Hermite would miss)
    def inner(x: float) -> float:
        s = math.sqrt((nu - 2) / x * var)
        return integrate.quad(lambda t: np.tanh(s * t) ** 2 * stats.norm.pdf(t), -40, 40,
                              points=[0], limit=400, epsabs=1e-15)[0]
    want = sum(integrate.quad(lambda x: inner(x) * stats.chi2.pdf(x, nu), a, b, limit=200, epsabs=1e-15)[0]
               for a, b in [(0, 0.1), (0.1, 1), (1, 5), (5, 20), (20, 60), (60, 200)])
    assert abs(lim["q"].value - want) <= max(lim["q"].error, 1e-12) + 1e-11
    assert lim["q"].error < 1e-8
    # kurtosis 3 E S⁴ / (E S²)² = 3 (ν−2)/(ν−4), exact
    assert lim["k"].value == pytest.approx(3 * (nu - 2) / (nu - 4), rel=1e-14)
    assert lim["k"].method == "exact"
    # positively homogeneous φ: the row scale pulls out, E relu(h)² = E S² · var/2, exact
    assert lim["r"].value == pytest.approx(var / 2, rel=1e-14)
    assert lim["r"].method == "exact"


BACKWARD = """vector x ~ normal()
vector v ~ normal()
matrix W ~ mvt(8)
h = W @ x
a = tanh(h)
b = W.T @ (v * (1 - a * a))
c = W @ b
out q = mean(a * a)
out p = mean(b * b)
out t = mean(c * h)
out s = mean(b * x * tanh(c))
"""


def test_finite_width_agrees_with_the_limit_through_transposes():
    """Forward, backward through Wᵀ (its argument carries the row scale) and forward again (a Ż
    term): the mean over trials at n = 2048 lies within 5 SE + 4/n of the limit."""
    program = tp.parse(BACKWARD)
    lim = program.compile().limit().outputs
    trials, n = 24, 2048
    run = program.execute(n=n, trials=trials, seed=5)
    for name in "qpts":
        o = run.outputs[name]
        se = o.std / math.sqrt(trials)
        assert abs(o.mean - lim[name].value) <= 5 * se + 4 / n + lim[name].error, (name, o.mean, lim[name])


def test_gaussian_surrogate_is_excluded_at_finite_width():
    """The old limit (W as iid Gaussian) gives kurtosis 3; finite width at n = 2048 gives ≈ 4."""
    src = "vector x ~ normal()\nmatrix W ~ mvt(10)\nh = W @ x\nout k = mean(h ** 4)\nout m = mean(h ** 2)"
    lim = tp.parse(src).compile().limit().outputs
    assert lim["k"].value == pytest.approx(3 * 8 / 6 * 1.0, rel=1e-14)       # 3 E S⁴ = 3 (ν−2)/(ν−4)
    run = tp.parse(src).execute(n=2048, trials=32, seed=2)
    fourth = np.array(run.outputs["k"].values)
    se = fourth.std(ddof=1) / math.sqrt(len(fourth))
    assert abs(fourth.mean() - lim["k"].value) <= 5 * se + 4 / 2048
    assert abs(fourth.mean() - 3.0) > 5 * se                               # the Gaussian value is rejected


def test_backward_moment_through_the_row_scale_and_its_infinite_case():
    """g = Wᵀ(h³), h = W x: E g² = 15 E S⁸ + 9 (E S⁴)² (Ẑ part + Ż part); E S⁸ = ∞ for ν ≤ 8 is a
    located error naming the heavy tail (found by the long fuzz run with ν = 5)."""
    src = "vector x ~ normal()\nmatrix W ~ mvt({nu})\nh = W @ x\ng = W.T @ (h ** 3)\nout o = mean(g * g)"
    nu = 40.0
    s4, s8 = s_moment(4, nu), s_moment(8, nu)
    o = tp.parse(src.format(nu=40)).compile().limit().outputs["o"]
    assert o.value == pytest.approx(15 * s8 + 9 * s4 ** 2, rel=1e-9)
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src.format(nu=5)).compile()
    assert str(err.value).startswith("<string>:4:5: an expectation in the limit is not finite")
    assert "mvt(df=5) has moments of order < 5 only" in str(err.value)


def test_dirac_mass_through_the_row_scale():
    """g = Wᵀ step(h + 1): its Ż term is E[S² δ(S·Ẑ + 1)] Z^x = E[S φ(1/S)] Z^x (found in review:
    the Dirac mass had the row scale as a coefficient)."""
    src = ("vector x ~ normal(var = 1)\nmatrix W ~ mvt(df=10, var=1)\nh = W @ x\ny = step(h + 1)\n"
           "g = W.T @ y\nout m = mean(g * x)")
    nu = 10.0
    f = lambda x: math.sqrt((nu - 2) / x) * stats.norm.pdf(math.sqrt(x / (nu - 2))) * stats.chi2.pdf(x, nu)
    want = sum(integrate.quad(f, a, b, limit=200, epsabs=1e-14)[0] for a, b in [(0, 1), (1, 10), (10, 40), (40, 200)])
    m = tp.parse(src).compile().limit().outputs["m"]
    assert abs(m.value - want) <= m.error + 1e-12
    assert m.error < 1e-3


def test_exponential_of_an_mvt_preactivation_names_the_heavy_tail():
    """E exp(t·S·Ẑ) = E exp(t²S²/2) = ∞ for every t > 0 (S² is an inverse chi-square)."""
    src = "vector x ~ normal()\nmatrix W ~ mvt(10)\nh = W @ x\nout o = mean(exp(0.05 * h))"
    with pytest.warns(RuntimeWarning):
        with pytest.raises(tp.TPNumericalError) as err:
            tp.parse(src).compile()
    assert str(err.value).startswith("<string>:4:9: an expectation in the limit is not finite")
    assert "mvt(df=10)" in str(err.value) and "exponential moment" in str(err.value)
