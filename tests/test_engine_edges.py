"""Edges of the expectation engine: rules that must decline (and fall to numerics) instead of
failing, rewritings that must stay numerically evaluable, bounded symbolic work, the resource
limits (``max_quad_points``, ``max_qmc_points``, ``max_expand_size``) and how an ``Estimate``
reports them, and the heavy-tail flag of QMC.  Every value is checked against an independent
computation done here (scipy quadrature, exact formulas)."""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

import tensorprog as tp
from tensorprog.expect.batch import expect_batch
from tensorprog.expect.budget import Budget
from tensorprog.expect.engine import Estimate, Law, expect, expect_many
from tensorprog.expect.exact import closed_form_blocker, odd_in_a_kinked_sign, wick
from tensorprog.expect.linalg import Matrix
from tensorprog.expect.reduce import distribute
from tensorprog.symbolic.heads import AbsF, Relu

x, y, z, w, u = sp.symbols("x y z w u", real=True)
R = sp.Rational


def quad1(f, s=1.0, pts=None):
    """E f(Z), Z ~ N(0, s), by adaptive scipy quadrature."""
    phi = lambda t: math.exp(-t * t / (2 * s)) / math.sqrt(2 * math.pi * s)
    lim = 13 * math.sqrt(s)
    return integrate.quad(lambda t: f(t) * phi(t), -lim, lim, points=pts, epsabs=1e-14, epsrel=1e-14,
                          limit=500)[0]


def limit_of(src: str, **options):
    return tp.parse(src).compile(**options).limit().outputs["o"]


# ---- 1. exp of a non-polynomial: the tilt rule declines, quadrature computes it ------------------------
@pytest.mark.parametrize("f, g", [(sp.exp(sp.sin(x)), lambda t: math.exp(math.sin(t))),
                                  (sp.exp(sp.tanh(x)), lambda t: math.exp(math.tanh(t))),
                                  (sp.exp(sp.sin(x)) * x ** 2, lambda t: math.exp(math.sin(t)) * t * t),
                                  (sp.exp(x * AbsF(x) / 4), lambda t: math.exp(t * abs(t) / 4))])
def test_exp_of_a_non_polynomial_is_numeric_and_right(f, g):
    est = expect(f, [x], [[1]])
    assert est.method == "quadrature"
    assert abs(est.value - quad1(g, pts=[0.0])) <= max(est.error, 1e-12)


def test_exp_of_a_relu_has_its_closed_form():
    """e^{c·relu(x)} = ((1 + sign x)e^{cx} + (1 − sign x))/2 (the ELU rewrite): the tilt and the sign rule
    give E e^{relu(x)} = ½ + e^{1/2}Φ(1) exactly."""
    est = expect(sp.exp(Relu(x)), [x], [[1]])
    assert est.method == "exact"
    assert abs(est.value - quad1(lambda t: math.exp(max(t, 0.0)), pts=[0.0])) <= 1e-13
    assert abs(est.value - (0.5 + math.exp(0.5) * 0.5 * math.erfc(-1 / math.sqrt(2)))) <= 1e-15


def test_exp_of_a_polynomial_keeps_its_closed_form():
    est = expect(sp.exp(x ** 2 / 4 + x), [x], [[1]])        # E e^{x²/4 + x} = √2 e^{1}
    assert est.method == "exact" and sp.simplify(est.exact - sp.sqrt(2) * sp.E) == 0
    est = expect(sp.exp(x * y), [x, y], [[R(1, 2), 0], [0, R(1, 2)]])      # 1/√(1 − 1/4)
    assert est.method == "exact" and abs(est.value - 1 / math.sqrt(0.75)) < 1e-14


def test_exp_of_sin_in_a_program():
    lim = limit_of("vector x ~ normal(var=2)\nout o = mean(exp(sin(x)) * x)")
    truth = quad1(lambda t: math.exp(math.sin(t)) * t, s=2.0)
    assert abs(lim.value - truth) <= max(lim.error, 1e-12)


def test_kink_of_a_non_polynomial_argument_in_two_dimensions():
    """relu(x·tanh(y)): the 2-D quadrature asks for the kink lines, and the argument is not piecewise
    affine (affine_pieces used to call sp.Poly on it and raise PolynomialError)."""
    est = expect(Relu(x * sp.tanh(y)), [x, y], [[1, 0], [0, 1]], budget=Budget(tol=1e-8))
    # x·tanh(y) is symmetric, so E relu = E|x tanh y|/2 = E|x| E|tanh y|/2
    truth = math.sqrt(2 / math.pi) * quad1(lambda t: abs(math.tanh(t)), pts=[0.0]) / 2
    assert abs(est.value - truth) <= max(est.error, 1e-8)
    lim = limit_of("vector x1 ~ normal()\nvector x2 ~ normal()\nout o = mean(relu(x1 * tanh(x2)))")
    assert abs(lim.value - truth) <= max(lim.error, 1e-8)


# ---- 2. no factor is moved into a denominator (exp(b²) overflows there) --------------------------------
def test_distribute_keeps_denominators_and_exponentials_in_place():
    e = x * (1 + sp.exp(-u ** 2)) / (1 + x ** 2 * sp.exp(-u ** 2))
    out = distribute(e)
    assert out == x / (1 + x ** 2 * sp.exp(-u ** 2)) + x * sp.exp(-u ** 2) / (1 + x ** 2 * sp.exp(-u ** 2))
    assert not any(p.exp.is_negative and p.base.has(sp.exp(u ** 2)) for p in out.atoms(sp.Pow))
    assert distribute(sp.exp(x + u) * (x + 1)) == sp.exp(x) * sp.exp(u) * x + sp.exp(x) * sp.exp(u)


def test_job_with_exp_of_minus_square_on_a_laplace_law_is_finite():
    """E[x·(1 + e^{−u²/2})/(1 + x² e^{−u²})], x ~ N(0.5-shifted), u ~ laplace(var 2): sp.expand would
    rewrite it over e^{u²}, which overflows on the Laplace grid (|u| up to ~80)."""
    b = 1.0                                                  # laplace var 2: scale b = 1
    e = (x + R(1, 2)) * (1 + sp.exp(-u ** 2 / 2)) / (1 + (x + R(1, 2)) ** 2 * sp.exp(-u ** 2))
    est = expect(e, [x], [[1]], {u: Law("laplace", 2)})
    assert np.isfinite(est.value) and est.method == "quadrature"
    f = lambda t, s: ((t + 0.5) * (1 + math.exp(-s * s / 2)) / (1 + (t + 0.5) ** 2 * math.exp(-s * s))
                      * math.exp(-t * t / 2) / math.sqrt(2 * math.pi) * math.exp(-abs(s) / b) / (2 * b))
    truth = sum(integrate.dblquad(f, s0, s1, -12, 12, epsabs=1e-12, epsrel=1e-12)[0]
                for s0, s1 in [(-60, 0), (0, 60)])
    assert abs(est.value - truth) <= max(est.error, 1e-9)


def test_a_tied_product_is_not_multiplied_out():
    """(x + u)·tanh(x·u): the plain factor tanh(xu) ties x and u in every term, so splitting the sum
    cannot separate them: one job, not two."""
    est = expect((x + u) * sp.cosh(x * u / 2), [x], [[1]], {u: Law("uniform", 1)}, budget=Budget(tol=1e-9))
    A = math.sqrt(3)
    f = lambda t, s: (t + s) * math.cosh(t * s / 2) * math.exp(-t * t / 2) / math.sqrt(2 * math.pi) / (2 * A)
    truth = integrate.dblquad(f, -A, A, -12, 12, epsabs=1e-12)[0]
    assert abs(est.value - truth) <= max(est.error, 1e-9)


def test_a_sum_that_separates_the_groups_is_still_split():
    est = expect((x + u) ** 2 * sp.exp(x), [x], [[1]], {u: Law("uniform", 1)})
    # E[x² eˣ] + 2 E[x eˣ] E[u] + E[u²] E[eˣ] = 2√e + 0 + √e, exactly: only after splitting
    assert est.method == "exact" and sp.simplify(est.exact - 3 * sp.exp(R(1, 2))) == 0


# ---- 3. Wick without recursion ------------------------------------------------------------------------
def _wick_reference(alpha, cov):
    """E[z^α] by the sum over perfect matchings of the multiset of factors (small degrees only)."""
    factors = [i for i, a in enumerate(alpha) for _ in range(a)]

    def match(fs):
        if not fs:
            return sp.Integer(1)
        i, rest = fs[0], fs[1:]
        return sp.Add(*[cov[i, rest[k]] * match(rest[:k] + rest[k + 1:]) for k in range(len(rest))])
    return sp.expand(match(factors))


@pytest.mark.parametrize("alpha", [(2, 2), (3, 1), (1, 1, 2), (2, 2, 2), (4, 0, 2), (1, 3, 1, 1), (0, 0, 6)])
def test_wick_matches_the_sum_over_matchings(alpha):
    a, b, c, d, e, f = sp.symbols("a b c d e f")
    cov = Matrix([[a, b, c, d], [b, e, f, 0], [c, f, 1, R(1, 3)], [d, 0, R(1, 3), 2]])
    alpha = alpha + (0,) * (4 - len(alpha))
    assert sp.expand(wick(alpha, cov, {}) - _wick_reference(alpha, cov)) == 0


def test_high_moments_need_no_recursion():
    cov = Matrix([[2, R(1, 2)], [R(1, 2), 1]])
    assert wick((4000, 0), cov, {}) == sp.factorial2(3999) * 2 ** 2000
    m = wick((2, 700), cov, {})                            # a chain 350 deep if done recursively
    # E[x² y^700] = Var(x|y)·E y^700 + (Σxy/Σyy)² E y^702 = (7/4)·699!! + (1/4)·701!!
    assert m == R(7, 4) * sp.factorial2(699) + R(1, 4) * sp.factorial2(701)


def test_huge_moment_is_a_located_overflow():
    with pytest.raises(tp.TPNumericalError) as err:
        limit_of("vector x ~ normal()\nout o = mean(x ** 4000)")
    assert (err.value.line, err.value.col) == (2, 9)
    assert limit_of("vector x ~ normal()\nout o = mean(x ** 300) / mean(x ** 298)").value == pytest.approx(299)


# ---- 4. bounded symbolic work: nested kinks, non-integer powers --------------------------------------
def _nested(depth: int):
    """relu(1 − relu(1 − … x)) in numpy."""
    def f(t):
        for _ in range(depth):
            t = max(1.0 - t, 0.0)
        return t
    return f


@pytest.mark.parametrize("depth", [3, 8, 11])
def test_nested_kinks_are_fast_and_right(depth):
    src = "vector x ~ normal()\nout o = mean(" + "relu(1 - " * depth + "x" + ")" * depth + ")"
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    lim = limit_of(src)
    assert time.process_time() - t0 < 20
    truth = quad1(_nested(depth), pts=[-1.0, 0.0, 1.0, 2.0])
    assert abs(lim.value - truth) <= max(lim.error, 1e-10)


def test_nested_kinks_are_recognised_as_having_no_closed_form():
    """The sign of a non-affine argument, with an odd power: no rule, said without expanding
    (so no budget was hit)."""
    e = x
    for _ in range(8):
        e = Relu(1 - e)
    est = expect(e, [x], [[1]])
    assert est.method == "quadrature" and est.budget == ()
    from tensorprog.expect.exact import canon
    assert odd_in_a_kinked_sign(canon(Relu(Relu(x) - 1), (x,)), (x,)) is not None
    assert odd_in_a_kinked_sign(canon(Relu(x - 1) * Relu(y), (x, y)), (x, y)) is None


def test_even_powers_of_a_non_affine_sign_keep_the_closed_form():
    est = expect(AbsF(x * y) ** 2, [x, y], [[1, R(1, 2)], [R(1, 2), 1]])
    assert est.method == "exact" and est.exact == R(3, 2)          # E x²y² = 1 + 2ρ²


def test_blocker_finds_factors_no_rule_accepts():
    q = (x - y) ** 2 + (x + y) ** 2 + R(1, 100)
    assert closed_form_blocker(sp.expand(x * y * q ** R(-3, 2)), (x, y)) is not None
    assert closed_form_blocker(sp.tanh(x) * y, (x, y)) is not None
    assert closed_form_blocker(sp.exp(sp.sin(x)), (x,)) is not None
    assert closed_form_blocker(x ** 3 * sp.exp(x * y) * sp.erf(x) * (1 + y) ** 2, (x, y)) is None


def test_inverse_powers_of_a_quadratic_form_go_to_numerics_quickly():
    """A batchnorm-like integrand: products with (σ² + ε)^(−3/2) used to be multiplied out for
    seconds to minutes before the numerics."""
    hs = sp.symbols("h1:5", real=True)
    m = sum(hs) / 4
    s2 = sum((h - m) ** 2 for h in hs) / 4
    e = (hs[0] - m) * (hs[1] - m) * (1 - (hs[0] - m) ** 2 / (s2 + R(1, 100))) * (s2 + R(1, 100)) ** R(-3, 2)
    cov = [[1 if i == j else R(1, 2) for j in range(4)] for i in range(4)]
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    est = expect(e, hs, cov, budget=Budget(tol=1e-4, max_qmc_points=2 ** 16))
    assert time.process_time() - t0 < 20
    assert est.method in ("quadrature", "qmc") and np.isfinite(est.value)


def test_batchnorm_gradient_compiles_without_minutes_of_expansion():
    """programs/bn_gradient.tp (B = 4): its E[Σ_a dh_a²] splits into the gradient's Gaussians
    (polynomial: exact) times batchnorm Jacobian products with (σ² + ε)^(−3/2) factors, which
    were multiplied out for ~75 s before going to QMC anyway; λ_G(4) = 3.08406 (bn_gradient.tp)."""
    from pathlib import Path
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    p = tp.load(Path(__file__).resolve().parent.parent / "programs" / "bn_gradient.tp", B=4)
    lim = p.compile(tol=1e-3, max_qmc_points=2 ** 16).limit().outputs["rate"]
    assert time.process_time() - t0 < 30
    rho = -1 / 3                      # λ_G(4) in closed form (bn_gradient.tp's header)
    j1 = (math.sqrt(1 - rho ** 2) + (math.pi - math.acos(rho)) * rho) / math.pi
    j0 = (math.pi - math.acos(rho)) / math.pi
    assert abs(lim.value - (2 + j0 + j1) / (1 - j1)) <= max(lim.error, 1e-12)


# ---- 5. resource limits --------------------------------------------------------------------------------
def test_max_expand_size_sends_a_closed_form_to_numerics_and_says_so():
    cov = [[1, R(1, 2)], [R(1, 2), 1]]
    truth = (math.sqrt(0.75) + (math.pi - math.acos(0.5)) * 0.5) / (2 * math.pi)
    exact = expect(Relu(x) * Relu(y), [x, y], cov)
    assert exact.method == "exact" and exact.budget == () and abs(exact.value - truth) < 1e-15
    est = expect(Relu(x) * Relu(y), [x, y], cov, budget=Budget(max_expand_size=5))
    assert est.method != "exact" and "max_expand_size" in est.budget
    assert abs(est.value - truth) <= max(est.error, 1e-12)
    est = expect(x ** 40 * y ** 40, [x, y], cov, budget=Budget(max_expand_size=100))    # Wick over 41² monomials
    assert est.method != "exact" and "max_expand_size" in est.budget
    with pytest.raises(ValueError, match="max_expand_size"):
        expect(x, [x], [[1]], budget=Budget(max_expand_size=0))


def test_max_quad_points_bounds_the_grid_and_says_so():
    f = sp.tanh(x + 1) ** 2
    truth = quad1(lambda t: math.tanh(t + 1) ** 2)
    ok = expect(f, [x], [[1]])
    assert ok.method == "quadrature" and ok.budget == () and abs(ok.value - truth) <= max(ok.error, 1e-13)
    est = expect(f, [x], [[1]], budget=Budget(max_quad_points=10, max_qmc_points=2 ** 12))
    assert est.method == "qmc" and set(est.budget) == {"max_quad_points", "max_qmc_points"}
    assert abs(est.value - truth) <= est.error
    loose = expect(f, [x], [[1]], budget=Budget(max_quad_points=10, max_qmc_points=2 ** 12, tol=0.1))
    assert loose.budget == ()                 # the budget stopped it, but within the target: no report
    with pytest.raises(ValueError, match="max_quad_points"):
        expect(f, [x], [[1]], budget=Budget(max_quad_points=0))


def test_budgets_through_expect_many_and_expect_batch():
    ests = expect_many([sp.tanh(x) ** 2, sp.cos(x) * sp.tanh(x) ** 2], [x], [[1]],
                       budget=Budget(max_quad_points=10, max_qmc_points=2 ** 12))
    assert all("max_quad_points" in e.budget for e in ests)
    covs = np.array([[[1.0, r], [r, 1.0]] for r in (0.1, 0.5)])
    res = expect_batch(sp.tanh(x) * sp.tanh(y) * sp.exp(-AbsF(x - y)), [x, y], covs,
                       budget=Budget(max_quad_points=10, max_qmc_points=2 ** 12))
    v, e, m = res.values, res.errors, res.methods
    assert "max_quad_points" in res.budget and np.all(np.isfinite(v))
    res = expect_batch(Relu(x) * Relu(y), [x, y], covs, budget=Budget(max_expand_size=5))
    v, e, m = res.values, res.errors, res.methods
    assert "max_expand_size" in res.budget
    truth = [(math.sqrt(1 - r * r) + (math.pi - math.acos(r)) * r) / (2 * math.pi) for r in (0.1, 0.5)]
    assert np.all(np.abs(v - truth) <= np.maximum(e, 1e-12))


def test_estimate_fields_have_defaults():
    est = Estimate(1.0, 0.0, "exact", sp.Integer(1))
    assert est.budget == () and est.heavy_tail is False


# ---- 6. heavy tails under QMC --------------------------------------------------------------------------
def test_qmc_flags_an_integrand_of_infinite_variance():
    """|x₁|^−0.7 has E|x₁|^−1.4 = ∞ (tail index 1/0.7 < 2); |x₁|^−0.4 has a finite variance.
    Four correlated Gaussians and a non-separable factor make it a 4-D QMC job."""
    xs = sp.symbols("x1:5", real=True)
    cov = [[1 if i == j else R(1, 2) for j in range(4)] for i in range(4)]
    rest = sp.cos(xs[1] * xs[2] * xs[3])
    heavy = expect(AbsF(xs[0]) ** R(-7, 10) * rest, xs, cov, budget=Budget(tol=1e-6, max_qmc_points=2 ** 18))
    light = expect(AbsF(xs[0]) ** R(-4, 10) * rest, xs, cov, budget=Budget(tol=1e-6, max_qmc_points=2 ** 18))
    assert heavy.method == light.method == "qmc"
    assert heavy.heavy_tail and not light.heavy_tail
    smooth = expect(sp.tanh(xs[0] + xs[1]) * rest, xs, cov, budget=Budget(tol=1e-6, max_qmc_points=2 ** 18))
    assert not smooth.heavy_tail
