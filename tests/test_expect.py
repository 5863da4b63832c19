"""The expectation engine against independent computations (scipy quadrature, literature
closed forms checked numerically here, Monte Carlo)."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special, stats

from tensorprog.expect.budget import Budget
from tensorprog.expect.engine import Estimate, Law, expect, expect_many
from tensorprog.symbolic.heads import AbsF, Delta, Gelu, LeakyRelu, Relu, Sign, Step

x, y, z, u, w = sp.symbols("x y z u w", real=True)
R = sp.Rational
M = sp.Matrix
PI = np.pi


def cov2(su, sv, c):
    return M([[su, c], [c, sv]])


def quad2(f, su, sv, rho):
    """E f(u, v) by nested adaptive scipy quadrature, split at u = 0 and v = 0."""
    a, b = math.sqrt(su), math.sqrt(sv)
    q = math.sqrt(max(1 - rho * rho, 0.0))
    phi = lambda t: math.exp(-t * t / 2) / math.sqrt(2 * PI)

    def inner(s):
        g = lambda t: f(a * s, b * (rho * s + q * t)) * phi(t)
        cut = [-rho * s / q] if q > 0 and abs(rho * s / q) < 12 else None
        return integrate.quad(g, -12, 12, points=cut, epsabs=1e-13, epsrel=1e-13, limit=200)[0]
    return integrate.quad(lambda s: inner(s) * phi(s), -12, 12, points=[0.0], epsabs=1e-13,
                          epsrel=1e-13, limit=200)[0]


def quad1(f, s=1.0, pts=None):
    phi = lambda t: math.exp(-t * t / (2 * s)) / math.sqrt(2 * PI * s)
    lim = 13 * math.sqrt(s)
    return integrate.quad(lambda t: f(t) * phi(t), -lim, lim, points=pts, epsabs=1e-14, epsrel=1e-14,
                          limit=400)[0]


def relu_np(t):
    return max(t, 0.0)


# ---------------------------------------------------------------- literature closed forms
def arccos0(su, sv, rho):
    return (PI - math.acos(rho)) / (2 * PI)


def arccos1(su, sv, rho):
    th = math.acos(rho)
    return math.sqrt(su * sv) / (2 * PI) * (math.sin(th) + (PI - th) * math.cos(th))


def arccos2(su, sv, rho):
    th = math.acos(rho)
    return su * sv / (2 * PI) * (3 * math.sin(th) * math.cos(th) + (PI - th) * (1 + 2 * math.cos(th) ** 2))


def relu_step(su, sv, rho):           # E[relu(u) step(v)] = √s_u (1 + ρ)/(2√(2π)) (Stein + Dirac)
    return math.sqrt(su) * (1 + rho) / (2 * math.sqrt(2 * PI))


def test_literature_formulas_against_scipy():
    su, sv = 1.3, 0.7
    for rho in (-0.6, 0.35):
        assert arccos1(su, sv, rho) == pytest.approx(quad2(lambda a, b: relu_np(a) * relu_np(b), su, sv, rho), abs=1e-10)
        assert arccos0(su, sv, rho) == pytest.approx(quad2(lambda a, b: float(a > 0 and b > 0), su, sv, rho), abs=1e-10)
        assert arccos2(su, sv, rho) == pytest.approx(quad2(lambda a, b: relu_np(a) ** 2 * relu_np(b) ** 2, su, sv, rho), abs=1e-10)
        assert relu_step(su, sv, rho) == pytest.approx(quad2(lambda a, b: relu_np(a) * (b > 0), su, sv, rho), abs=1e-10)


# ---------------------------------------------------------------- exact moments
def test_wick_and_law_moments_are_exact_numbers():
    assert expect(x ** 4, [x], M([[1]])).exact == sp.Integer(3)
    assert expect(x ** 6, [x], M([[2]])).exact == 120
    assert expect(x ** 2 * y ** 2, [x, y], cov2(1, 1, R(1, 2))).exact == R(3, 2)
    assert expect(x * y ** 3, [x, y], cov2(1, 2, R(1, 3))).exact == 2
    assert expect(u ** 4, [], M([]), {u: Law("uniform")}).exact == R(9, 5)
    assert expect(u ** 4, [], M([]), {u: Law("rademacher")}).exact == 1
    assert expect(u ** 4, [], M([]), {u: Law("laplace")}).exact == 6
    assert expect(u ** 4, [], M([]), {u: Law("student_t", 1, 5)}).exact == 9
    assert expect(u ** 4, [], M([]), {u: Law("normal", 2)}).exact == 12
    est = expect((x + u) ** 4 + x * u, [x], M([[1]]), {u: Law("uniform")})
    assert est.method == "exact" and est.exact == 3 + 6 + R(9, 5)
    assert expect(sp.Integer(7), [x], M([[1]])).exact == 7


def test_infinite_and_undefined_moments():
    est = expect(u ** 4, [], M([]), {u: Law("student_t", 1, 3)})
    assert est.exact is sp.oo and est.value == math.inf and est.method == "exact"
    with pytest.raises(ValueError, match="does not exist"):
        expect(u ** 3, [], M([]), {u: Law("student_t", 1, 3)})
    assert expect(u ** 2, [], M([]), {u: Law("student_t", 2, 3)}).value == pytest.approx(2)


# ---------------------------------------------------------------- arc-cosine family
@pytest.mark.parametrize("rho", [-0.9, -R(1, 2), 0, R(1, 3), 0.8])
def test_arccos_kernels(rho):
    su, sv = R(3, 2), R(1, 2)
    c = rho * sp.sqrt(su * sv)
    S, f = cov2(su, sv, c), float(rho)
    cases = [(Relu(x) * Relu(y), arccos1), (Step(x) * Step(y), arccos0), (Relu(x) ** 2 * Relu(y) ** 2, arccos2),
             (Relu(x) * Step(y), relu_step)]
    for expr, formula in cases:
        est = expect(expr, [x, y], S)
        assert est.method == "exact" and est.error == 0.0
        assert est.value == pytest.approx(formula(1.5, 0.5, f), abs=1e-13), expr


def test_arccos_decompositions():
    su, sv, rho = 1.0, 2.0, 0.4
    S = cov2(1, 2, R(2, 5) * sp.sqrt(2))
    k1 = lambda r: arccos1(su, sv, r)
    c = R(1, 5)
    assert expect(AbsF(x) * AbsF(y), [x, y], S).value == pytest.approx(2 * k1(rho) + 2 * k1(-rho), abs=1e-13)
    assert expect(Sign(x) * Sign(y), [x, y], S).value == pytest.approx(2 / PI * math.asin(rho), abs=1e-13)
    leaky = (1 + 0.04) * k1(rho) - 2 * 0.2 * k1(-rho)       # relu(x) − c relu(−x)
    assert expect(LeakyRelu(x, c) * LeakyRelu(y, c), [x, y], S).value == pytest.approx(leaky, abs=1e-13)
    assert expect(Relu(x) ** 2, [x], M([[3]])).exact == R(3, 2)
    assert expect(Relu(x), [x], M([[3]])).value == pytest.approx(math.sqrt(3 / (2 * PI)), abs=1e-15)
    # sympy's d max(x, y)/dx = Heaviside(x − y): E[2x·1{x > y}] = 2 Cov(x, x−y)/√Var(x−y) · φ(0)
    S12 = cov2(1, 1, R(1, 2))
    for exact in (True, False):
        est = expect(sp.diff(sp.Max(x, y) ** 2, x), [x, y], S12, exact=exact)
        assert abs(est.value - 2 * 0.5 / 1.0 / math.sqrt(2 * PI)) < 1e-10
    ref = quad2(lambda a, b: max(a, b) ** 2 * (a > -0.0), su, sv, rho)
    assert expect(sp.Max(x, y) ** 2 * Step(x), [x, y], S).value == pytest.approx(ref, abs=1e-9)


@pytest.mark.parametrize("S,truth", [
    (M([[1, 1], [1, 1]]), 0.5), (M([[1, -1], [-1, 1]]), 0.0), (M([[1, 2], [2, 4]]), 1.0),
    (M([[0, 0], [0, 1]]), 0.0), (M([[1.0, 1.0], [1.0, 1.0]]), 0.5)])
def test_arccos_singular(S, truth):
    for exact in (True, False):
        est = expect(Relu(x) * Relu(y), [x, y], S, exact=exact)
        assert abs(est.value - truth) < 1e-12 and est.method == ("exact" if exact else "quadrature")
    assert expect(Step(x) * Step(y), [x, y], M([[1, 1], [1, 1]])).exact == R(1, 2)


def test_orthant_three_and_relu_products():
    S = np.array([[1, .5, .3], [.5, 1, -.25], [.3, -.25, 1]])
    Sx = M([[1, R(1, 2), R(3, 10)], [R(1, 2), 1, -R(1, 4)], [R(3, 10), -R(1, 4), 1]])
    est = expect(Step(x) * Step(y) * Step(z), [x, y, z], Sx)
    assert est.method == "exact"
    ref = stats.multivariate_normal.cdf(np.zeros(3), np.zeros(3), S, abseps=1e-10, releps=1e-10, maxpts=10 ** 7)
    assert est.value == pytest.approx(ref, abs=1e-7)
    pts = stats.qmc.Sobol(3, scramble=True, seed=5).random(2 ** 19)
    g = special.ndtri(pts) @ np.linalg.cholesky(S).T
    mc = np.mean(np.prod(np.maximum(g, 0), axis=1))
    assert expect(Relu(x) * Relu(y) * Relu(z), [x, y, z], Sx).value == pytest.approx(mc, abs=2e-4)


def test_stein_polynomial_times_kinks():
    S = cov2(1, 2, R(1, 2))
    ref = quad2(lambda a, b: a ** 3 * relu_np(b), 1, 2, 0.5 / math.sqrt(2))
    assert expect(x ** 3 * Relu(y), [x, y], S).value == pytest.approx(ref, abs=1e-10)
    ref = quad2(lambda a, b: a * b * (a > 0) * (b > 0), 1, 2, 0.5 / math.sqrt(2))
    assert expect(x * y * Step(x) * Step(y), [x, y], S).value == pytest.approx(ref, abs=1e-10)


# ---------------------------------------------------------------- erf, exp, gelu
@pytest.mark.parametrize("su,sv,c", [(1, 1, R(1, 2)), (2, R(1, 2), -R(3, 4)), (R(1, 3), 3, R(9, 10))])
def test_erf_arcsine(su, sv, c):
    est = expect(sp.erf(x) * sp.erf(y), [x, y], cov2(su, sv, c))
    williams = 2 / PI * math.asin(2 * float(c) / math.sqrt((1 + 2 * float(su)) * (1 + 2 * float(sv))))
    assert est.method == "exact" and est.value == pytest.approx(williams, abs=1e-14)
    rho = float(c) / math.sqrt(float(su * sv))
    assert williams == pytest.approx(quad2(lambda a, b: math.erf(a) * math.erf(b), float(su), float(sv), rho), abs=1e-10)


def test_erf_linear_and_stein():
    S = cov2(2, 1, R(1, 2))
    assert expect(sp.erf(x), [x], M([[2]])).exact == 0
    est = expect(sp.erf(x) * y, [x, y], S)          # Stein: Σ_xy E erf' = (1/2)(2/√π)/√(1 + 2·2)
    assert est.exact is not None and est.value == pytest.approx(1 / math.sqrt(5 * PI), abs=1e-15)
    assert expect(sp.erf(x + R(1, 2)), [x], M([[2]])).value == pytest.approx(math.erf(0.5 / math.sqrt(5)), abs=1e-15)
    ref = quad2(lambda a, b: a * (1 + math.erf(a / math.sqrt(2))) / 2 * b * (1 + math.erf(b / math.sqrt(2))) / 2,
                1, 2, 0.5 / math.sqrt(2))
    assert expect(Gelu(x) * Gelu(y), [x, y], cov2(1, 2, R(1, 2))).value == pytest.approx(ref, abs=1e-10)


def test_exp_mgf():
    S = cov2(1, 2, R(1, 2))
    # E[p(z) e^{c·z}] = e^{cΣc/2} E[p(z + Σc)], c = (1, 2): cΣc = 1 + 2 + 8 = 11, Σc = (2, 9/2)
    est = expect(x ** 2 * sp.exp(x + 2 * y), [x, y], S)
    assert est.exact == sp.exp(R(11, 2)) * (1 + 4)
    assert expect(sp.exp(x), [x], M([[1]])).exact == sp.exp(R(1, 2))
    ref = quad2(lambda a, b: math.exp(a - b) * relu_np(a), 1, 2, 0.5 / math.sqrt(2))
    assert expect(sp.exp(x - y) * Relu(x), [x, y], S).value == pytest.approx(ref, rel=1e-10)
    ref = quad1(lambda t: t * t * math.exp(-t * t))
    assert expect(x ** 2 * sp.exp(-x ** 2), [x], M([[1]])).value == pytest.approx(ref, abs=1e-14)
    with pytest.raises(ValueError, match="diverges"):
        expect(sp.exp(x ** 2), [x], M([[1]]))


# ---------------------------------------------------------------- Dirac masses
def test_delta_exact_and_numeric():
    S = cov2(1, 2, R(1, 2))               # y | x = 0 ~ N(0, 7/4)
    p0 = 1 / math.sqrt(2 * PI)
    est = expect(Delta(x) * Relu(y), [x, y], S)
    assert est.method == "exact" and est.value == pytest.approx(p0 * math.sqrt(1.75 / (2 * PI)), abs=1e-15)
    est = expect(Delta(x) * sp.tanh(y) ** 2, [x, y], S)
    ref = p0 * quad1(lambda t: math.tanh(t) ** 2, 1.75)
    assert est.method == "quadrature" and abs(est.value - ref) < 1e-10 and est.error < 1e-9
    est = expect(Delta(x - R(1, 3)) * x ** 2, [x], M([[1]]))
    assert est.value == pytest.approx(math.exp(-1 / 18) / math.sqrt(2 * PI) / 9, abs=1e-15)
    # x − y has variance 2; given x = y the common value has variance 3/4·... : check by quadrature
    est = expect(Delta(x - y) * Relu(x) * Relu(y), [x, y], S)
    var_d, cov_xd = 1 + 2 - 1, 1 - 0.5            # d = x − y
    s_c = 1 - cov_xd ** 2 / var_d                  # Var(x | d = 0)
    assert est.value == pytest.approx(s_c / 2 / math.sqrt(2 * PI * var_d), abs=1e-14)
    # the derivative of step is the Dirac mass, with step(0) = 1/2 on its own hyperplane
    assert expect(Step(x).diff(x) * Step(x), [x], M([[1]])).value == pytest.approx(p0 / 2, abs=1e-15)
    with pytest.raises(ValueError):
        expect(Delta(x) ** 2, [x], M([[1]]))


def test_delta_with_a_law():
    est = expect(Delta(x + u) * sp.tanh(x) ** 2, [x], M([[1]]), {u: Law("uniform", 3)})   # u on [−3, 3]
    ref = integrate.quad(lambda t: math.exp(-t * t / 2) / math.sqrt(2 * PI) * math.tanh(t) ** 2 / 6, -3, 3,
                         epsabs=1e-14)[0]
    assert abs(est.value - ref) < 1e-10


# ---------------------------------------------------------------- §3.2 example and symmetry
def test_section_3_2_example():
    phi = u * Step(R(1, 2) - AbsF(u))
    est = expect(u * phi, [], M([]), {u: Law("rademacher")})
    assert est.method == "exact" and est.exact == 0
    ref = integrate.quad(lambda t: t * t * math.exp(-t * t / 2) / math.sqrt(2 * PI), -0.5, 0.5, epsabs=1e-15)[0]
    for exact in (True, False):
        est = expect(u * phi, [u], M([[1]]), exact=exact)
        assert abs(est.value - ref) < 1e-12


def test_symmetry_zeros():
    S = M([[1, 0], [0, 1]])
    for expr, laws in [(Relu(x) * x * y, {}), (sp.tanh(x), {}), (sp.tanh(x) * Relu(y) * u, {u: Law("laplace")}),
                       (sp.tanh(x + u) * Relu(y), {u: Law("uniform")}), (Sign(u) * Relu(x), {u: Law("laplace")}),
                       (sp.tanh(x) ** 3 * sp.cos(y) * sp.tanh(u) ** 2, {u: Law("student_t", 1, 4)})]:
        est = expect(expr, [x, y], S, laws, exact=False)
        assert est.value == 0 and est.method == "exact" and est.exact == 0, expr
    S = cov2(1, 1, R(1, 2))                       # even integrands must not be zeroed
    for expr, truth in [(AbsF(x), math.sqrt(2 / PI)), (sp.cos(x), math.exp(-0.5)), (Sign(x) * y, 1 / math.sqrt(2 * PI)),
                        (sp.tanh(x) * y ** 3, None), (sp.cos(x) * AbsF(y) * x * y, None)]:
        est = expect(expr, [x, y], S, exact=False)
        assert est.value != 0 and est.method in ("quadrature", "series"), expr
        if truth is not None:
            assert abs(est.value - truth) < 1e-10


# ---------------------------------------------------------------- numerics
def test_tanh_quadrature_accuracy():
    # (speed is measured in bench/compile_bench.py, not here)
    su, sv, c = 1.0, 2.0, 0.6
    rho = c / math.sqrt(su * sv)
    ref = quad2(lambda a, b: math.tanh(a) * math.tanh(b), su, sv, rho)
    est = expect(sp.tanh(x) * sp.tanh(y), [x, y], cov2(su, sv, c))      # f(x)g(y): the Mehler series
    assert est.method == "series" and abs(est.value - ref) <= est.error < 1e-9
    est = expect(sp.tanh(x) * sp.tanh(y), [x, y], cov2(su, sv, c), budget=Budget(series_terms=0))
    assert est.method == "quadrature" and abs(est.value - ref) <= est.error < 1e-9


def test_kinked_numerics_are_honest():
    """With the closed forms off, relu/leaky kernels reach 1e-10 and the error bounds it."""
    for rho in (-0.7, 0.0, 0.55, 0.99):
        S = cov2(1.5, 0.5, rho * math.sqrt(0.75))
        est = expect(Relu(x) * Relu(y), [x, y], S, exact=False)
        assert abs(est.value - arccos1(1.5, 0.5, rho)) <= max(est.error, 1e-15) and est.error < 1e-9
        est = expect(Relu(x) ** 2 * Step(y) + Step(x) * Step(y), [x, y], S, exact=False)
        truth = expect(Relu(x) ** 2 * Step(y) + Step(x) * Step(y), [x, y], S).value
        assert abs(est.value - truth) <= max(est.error, 1e-15) and est.error < 1e-9


def test_laws_numeric():
    est = expect(sp.tanh(u) ** 2, [], M([]), {u: Law("uniform", 3)})          # u on [−3, 3]
    assert abs(est.value - integrate.quad(lambda t: math.tanh(t) ** 2 / 6, -3, 3, epsabs=1e-15)[0]) < 1e-12
    est = expect(sp.tanh(u) ** 2, [], M([]), {u: Law("laplace", 2)})          # b = 1
    ref = integrate.quad(lambda t: math.tanh(t) ** 2 * math.exp(-t), 0, 60, epsabs=1e-15)[0]
    assert abs(est.value - ref) < 1e-11 and est.error >= abs(est.value - ref)
    est = expect(Relu(u - R(3, 10)), [], M([]), {u: Law("laplace", 2)})
    assert abs(est.value - 0.5 * math.exp(-0.3)) < 1e-12
    est = expect(sp.tanh(x + u) ** 2, [x], M([[1]]), {u: Law("rademacher")})
    ref = (quad1(lambda t: math.tanh(t + 1) ** 2) + quad1(lambda t: math.tanh(t - 1) ** 2)) / 2
    assert abs(est.value - ref) < 1e-11
    est = expect(sp.tanh(x + u) ** 2, [x], M([[1]]), {u: Law("rademacher")}, exact=False)
    assert abs(est.value - ref) < 1e-11
    est = expect(AbsF(u + w - R(1, 2)), [], M([]), {u: Law("student_t", 1, 4), w: Law("laplace", 2)})
    pt = lambda t: stats.t.pdf(t * math.sqrt(2), 4) * math.sqrt(2)        # σ² = 1/2
    g = lambda t: abs(t - 0.5) + math.exp(-abs(t - 0.5))                   # E_w |t − 1/2 + w|, b = 1
    ref = sum(integrate.quad(lambda t: pt(t) * g(t), a, b, epsabs=1e-15, epsrel=1e-14, limit=500)[0]
              for a, b in [(-np.inf, -10), (-10, 0.5), (0.5, 10), (10, np.inf)])
    assert abs(est.value - ref) < 1e-10 and est.error < 1e-9
    est = expect(Relu(x + u), [x], M([[1]]), {u: Law("uniform", 3)})
    ref = integrate.quad(lambda s: quad1(lambda t: relu_np(t + s), pts=[-s]) / 6, -3, 3, epsabs=1e-13)[0]
    assert abs(est.value - ref) < 1e-10


def hafnian_moment(S: np.ndarray) -> float:
    """E[z_1 ⋯ z_n] = Σ over perfect matchings of Π Σ_ij (Isserlis), by brute force."""
    idx = list(range(len(S)))
    if not idx:
        return 1.0
    first, rest = idx[0], idx[1:]
    return sum(S[first, j] * hafnian_moment(np.delete(np.delete(S, [first, j], 0), [first, j], 1))
               for j in rest)


def test_qmc_six_dimensions():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(6, 6))
    S = A @ A.T / 6 + 0.2 * np.eye(6)
    g = sp.symbols("g0:6", real=True)
    signs = np.array(np.meshgrid(*[[-1, 1]] * 6)).reshape(6, -1).T
    exprs = [sp.Mul(*g), sp.Mul(*[sp.cos(t) for t in g]), Relu(g[0]) * Relu(g[1]) * g[2] ** 2]
    truths = [hafnian_moment(S), np.mean(np.exp(-0.5 * np.einsum("ki,ij,kj->k", signs, S, signs))),
              expect(exprs[2], g, M(S.tolist())).value]
    ests = expect_many(exprs, g, M(S.tolist()), exact=False, budget=Budget(tol=1e-6, max_qmc_points=2 ** 18))
    for est, truth in zip(ests, truths):
        assert est.method == "qmc" and abs(est.value - truth) < 5 * est.error, (est, truth)
        assert est.error < 5e-3 * max(1, abs(truth))
    again = expect_many(exprs, g, M(S.tolist()), exact=False, budget=Budget(tol=1e-6, max_qmc_points=2 ** 18))
    assert again == ests
    # functions of one linear form are integrated over that single direction
    s, var = sum(g), float(S.sum())
    ests = expect_many([s ** 4, Relu(s)], g, M(S.tolist()), exact=False)
    assert [e.method for e in ests] == ["quadrature"] * 2
    assert abs(ests[0].value - 3 * var ** 2) < 1e-9 * var ** 2 and abs(ests[1].value - math.sqrt(var / (2 * PI))) < 1e-10


def test_expect_many_matches_expect_and_factorizes():
    S = M([[1, R(1, 2), 0], [R(1, 2), 1, 0], [0, 0, 2]])
    exprs = [sp.tanh(x) * sp.tanh(y), sp.tanh(x) ** 2 * Relu(z) + 1, Relu(x) * Relu(y)]
    many = expect_many(exprs, [x, y, z], S)
    for e, est in zip(exprs, many):
        one = expect(e, [x, y, z], S)
        assert one.method == est.method and abs(one.value - est.value) < 1e-12
    assert many[1].value == pytest.approx(quad1(lambda t: math.tanh(t) ** 2) * math.sqrt(2 / (2 * PI)) + 1, abs=1e-10)
    assert many[2].method == "exact"


def test_symbolic_parameters():
    a, c = sp.symbols("a c", positive=True)
    est = expect(Relu(x) * Relu(y), [x, y], cov2(a, a, c))
    assert est.method == "exact" and est.exact.free_symbols == {a, c}
    val = float(est.exact.subs({a: 2, c: 1}))
    assert val == pytest.approx(arccos1(2, 2, 0.5), abs=1e-14)
    with pytest.raises(ValueError, match="free parameters"):
        expect(sp.tanh(x) * sp.tanh(y), [x, y], cov2(a, a, c))


def test_input_errors():
    with pytest.raises(ValueError, match="neither"):
        expect(x * w, [x], M([[1]]))
    with pytest.raises(ValueError):
        expect(x, [x], M([[1, 0], [0, 1]]))
    with pytest.raises(ValueError):
        Law("student_t", 1, 2)
    with pytest.raises(ValueError):
        Law("cauchy")
    assert isinstance(expect(x ** 2, [x], M([[2]])), Estimate)


def test_expect_batch_over_a_dataset():
    from tensorprog.expect.batch import expect_batch
    X = np.random.default_rng(2).normal(size=(6, 3))
    K = X @ X.T / 3
    pairs = [(i, j) for i in range(6) for j in range(6)]
    covs = np.array([[[K[i, i], K[i, j]], [K[i, j], K[j, j]]] for i, j in pairs])
    res = expect_batch(Relu(x) * Relu(y), [x, y], covs)
    vals, errs, methods = res.values, res.errors, res.methods
    assert set(methods) == {"exact"}
    for (i, j), v in zip(pairs, vals):
        rho = np.clip(K[i, j] / np.sqrt(K[i, i] * K[j, j]), -1, 1)
        assert v == pytest.approx(arccos1(K[i, i], K[j, j], rho), abs=1e-12)     # incl. ρ = 1 (i = j)
    res = expect_batch(sp.tanh(x) * sp.tanh(y), [x, y], covs)
    vals, errs, methods = res.values, res.errors, res.methods
    assert set(methods) == {"series"} and errs.max() < 1e-9        # f(x)g(y): the Mehler series
    for p in (0, 7, 20):
        i, j = pairs[p]
        rho = K[i, j] / np.sqrt(K[i, i] * K[j, j])
        ref = quad2(lambda a, b: math.tanh(a) * math.tanh(b), K[i, i], K[j, j], min(rho, 1.0))
        assert abs(vals[p] - ref) <= errs[p] + 1e-14


def test_many_rademacher_and_high_dimensional_laws():
    us = sp.symbols("r0:12", real=True)
    laws = {r: Law("rademacher") for r in us}
    est = expect(sp.tanh(sum(us) / 4) ** 2, [], M([]), laws, budget=Budget(tol=1e-5))
    n = len(us)
    truth = sum(math.comb(n, k) * math.tanh((2 * k - n) / 4) ** 2 for k in range(n + 1)) / 2 ** n
    assert est.method == "qmc" and abs(est.value - truth) < 5 * est.error
    est = expect(sp.tanh(x + u + w) ** 2, [x], M([[1]]), {u: Law("uniform"), w: Law("laplace")},
                 budget=Budget(tol=1e-9))
    assert est.method == "quadrature" and est.error < 1e-9


def test_batchnorm_near_singular_error_is_honest():
    """q = E[σ²/(σ² + ε)] for a batch of 4 equicorrelated Gaussians: σ² = (1−ρ)/B · χ²₃.  The
    integrand dips sharply where the batch is constant; the error estimate must cover it."""
    B, eps = 4, 1e-5
    g = sp.symbols(f"g0:{B}", real=True)
    mean = sum(g) / B
    var = sum((t - mean) ** 2 for t in g) / B
    q = sum(((t - mean) / sp.sqrt(var + sp.Float(eps))) ** 2 for t in g) / B
    S = np.full((B, B), 0.5) + 0.5 * np.eye(B)
    est = expect(q, g, M(S.tolist()))
    f = lambda c: stats.chi2.pdf(c, 3) * (0.125 * c) / (0.125 * c + eps)
    truth = sum(integrate.quad(f, a, b, epsabs=1e-15, epsrel=1e-14, limit=500)[0]
                for a, b in [(0, 1e-6), (1e-6, 1e-3), (1e-3, 1), (1, 10), (10, np.inf)])
    assert abs(est.value - truth) <= est.error < 1e-4


def test_is_zero_proves_rational_functions_nonzero_and_falls_back_to_simplify():
    """linalg.is_zero's cheap proof (a rational function nonzero at a rational point) answers only
    'nonzero', and only for rational functions; zeros that need simplify still come out zero."""
    from tensorprog.expect.linalg import is_zero, rational_nonzero
    a, b = sp.symbols("c_0_0 c_1_1", positive=True)
    c = sp.Symbol("c_0_1", real=True)
    schur = (a * b - c ** 2) / a
    assert rational_nonzero(schur) and not is_zero(schur)
    hidden = (a ** 2 - c ** 2) / (a - c) - a - c                 # 0 as a function, not auto-cancelled
    assert hidden != 0 and not rational_nonzero(hidden) and is_zero(hidden)
    root = sp.sqrt(a ** 2) - a                                   # 0 for a > 0 (sympy folds it)
    assert is_zero(root)
    radical = sp.sqrt(a * b) - sp.sqrt(a) * sp.sqrt(b) + c - c   # not rational: no proof, simplify says 0
    assert not rational_nonzero(sp.sqrt(a) + c) and is_zero(radical)
    assert not rational_nonzero(sp.Float(0.5) * a - c)           # Floats: the old test decides
    assert not is_zero(sp.Float(0.5) * a - c)


def test_reduce_basis_shortcut_for_clearly_definite_covariances_gives_the_elimination_s_answer(monkeypatch):
    """linalg.clearly_definite skips reduce_basis's exact elimination only where that elimination keeps
    every coordinate: on Float, rational and singular covariances the answer is the same triple."""
    from tensorprog.expect import linalg
    rng = np.random.default_rng(3)
    z = sp.symbols("z0:5", real=True)
    expr = sp.tanh(z[0] + z[1]) * sp.exp(z[2]) * z[3] * sp.erf(z[4])
    cases = []
    for _ in range(3):
        A = rng.standard_normal((5, 5))
        cases.append(sp.Matrix(A @ A.T + 0.1 * np.eye(5)).applyfunc(sp.Float))     # Floats, definite
        B = rng.integers(-3, 4, (5, 5))
        cases.append(sp.Matrix((B @ B.T + np.eye(5, dtype=int)).tolist()) / 7)      # rationals, definite
        C = rng.standard_normal((5, 3))
        cases.append(sp.Matrix(C @ C.T).applyfunc(sp.Float))                         # rank 3
    cases.append(sp.Matrix(5, 5, lambda i, j: sp.Rational(1, 10 ** 36) if i == j else 0))   # exact tiny
    shortcut = 0
    for cov in cases:
        cov = linalg.Matrix(cov)
        fast = linalg.reduce_basis(expr, z, cov)
        shortcut += linalg.clearly_definite(cov)
        with monkeypatch.context() as m:
            m.setattr(linalg, "clearly_definite", lambda c: False)
            slow = linalg.reduce_basis(expr, z, cov)
        assert fast == slow
    assert shortcut == 6
