"""The numpy evaluator of sympy expressions, and the numeric rules of the expectation engine."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special

from tensorprog.expect.laws import Coord, Law
from tensorprog.expect.qmc import qmc
from tensorprog.expect.quad import iterated_2d, piecewise_1d, tensor
from tensorprog.symbolic.heads import (HEADS, AbsF, Delta, Gelu, LeakyRelu, Relu, Sigmoid, Sign, Softplus, Step)
from tensorprog.builtins import BUILTINS
from tensorprog.symbolic.evaluate import Tape, compile_exprs, evaluate

x, y, z = sp.symbols("x y z", real=True)
RNG = np.random.default_rng(1)


def reference(expr: sp.Expr, env: dict) -> np.ndarray:
    """Point by point through sympy's own evaluation (slow, independent)."""
    n = len(next(iter(env.values())))
    return np.array([float(expr.subs({s: sp.Float(float(v[i]), 30) for s, v in env.items()}).evalf(30))
                     for i in range(n)])


@pytest.mark.parametrize("expr", [
    Relu(x) * sp.tanh(y) + x ** 3 / 7,
    Step(x - y) + Sign(x) * AbsF(y) + LeakyRelu(x, sp.Rational(1, 10)),
    sp.Max(x, y, sp.Rational(1, 3)) - sp.Min(x, 2 * y),
    Sigmoid(x) + Softplus(y) + Gelu(x * y),
    sp.erf(x) * sp.exp(-y ** 2) + sp.sin(x) * sp.cos(y),
    1 / (1 + x ** 2) + sp.sqrt(1 + y ** 2) + (2 + sp.cos(x)) ** sp.Rational(-3, 2),
    sp.log(1 + x ** 2) * sp.pi + sp.E * sp.Abs(y) + sp.sign(x - 1),
    sp.asin(sp.tanh(x)) + sp.acos(sp.tanh(y) / 2) + x ** 0.5 * 0 + (x ** 2 + 1) ** 1.3,
])
def test_evaluate_matches_sympy(expr):
    env = {x: RNG.normal(size=7) * 1.5, y: RNG.normal(size=7)}
    np.testing.assert_allclose(evaluate(expr, env), reference(expr, env), rtol=1e-12, atol=1e-13)


def test_every_builtin_head_evaluates():
    xs = np.linspace(-2.5, 2.5, 11)
    for b in BUILTINS.values():
        args = (x, sp.Rational(1, 5)) if b.arity == 2 and b.name == "leaky_relu" else (x, y)[:b.arity]
        expr = HEADS[b.name](*args)
        env = {x: xs + 3.0 if b.name in ("log", "sqrt") else xs, y: xs[::-1]}
        got = evaluate(expr, env)
        want = b.numpy(*[env[a] if a in env else float(a) for a in args])
        np.testing.assert_allclose(got, want, rtol=1e-14, err_msg=b.name)


def test_broadcasting_and_constants():
    out = evaluate(x * y + sp.pi, {x: np.arange(3.0)[:, None], y: np.arange(4.0)[None, :]})
    assert out.shape == (3, 4)
    assert out[2, 3] == pytest.approx(6 + np.pi)
    assert evaluate(sp.Integer(2) + sp.E, {x: np.zeros(5)}).shape == (5,)


def test_folds_widen_as_their_terms_broadcast():
    """A sum, product or max whose first terms are narrower than a later one (a (3, 1) column
    and a (1, 4) row): the fold does not write the wider result into the narrow one."""
    X, Y = np.arange(3.0)[:, None], np.arange(4.0)[None, :]
    env = {x: X, y: Y}
    np.testing.assert_array_equal(evaluate(sp.Add(x, x**2, y, 3, evaluate=False), env), X + X**2 + Y + 3)
    np.testing.assert_array_equal(evaluate(sp.Mul(x, x + 1, y, evaluate=False), env), X * (X + 1) * Y)
    np.testing.assert_array_equal(evaluate(sp.Max(x, x**2, y), env), np.maximum(np.maximum(X, X**2), Y))
    np.testing.assert_array_equal(evaluate(x - x**2 - y, env), X - X**2 - Y)
    assert evaluate(sp.Add(x, y, 1, evaluate=False), {x: np.float64(2.0), y: np.float64(3.0)}) == 6.0


def test_shared_subexpressions_are_computed_once():
    inner = sp.tanh(x + y)
    deep = inner
    for _ in range(30):
        deep = sp.tanh(deep + inner) * inner
    tape = compile_exprs([deep], [x, y])
    assert len(tape.ops) < 4 * 31 + 5          # linear, not exponential, in the depth
    assert np.isfinite(tape(np.ones(3), np.ones(3))[0]).all()


def test_several_outputs_share_one_tape():
    tape = compile_exprs([sp.tanh(x) ** 2, sp.tanh(x) * y], [x, y])
    a, b = tape(np.array([0.5]), np.array([2.0]))
    assert a[0] == pytest.approx(np.tanh(0.5) ** 2) and b[0] == pytest.approx(2 * np.tanh(0.5))


def test_errors():
    with pytest.raises(ValueError, match="Dirac"):
        evaluate(Delta(x) * y, {x: np.ones(2), y: np.ones(2)})
    with pytest.raises(ValueError, match="unknown symbol"):
        Tape.compile([x + z], [x])
    with pytest.raises(TypeError):
        Tape.compile(["x + 1"], [x])


def test_no_code_generation_in_the_evaluator():
    src = (pathlib.Path(__file__).parents[1] / "tensorprog" / "symbolic" / "evaluate.py").read_text()
    code = src.split('"""', 2)[2]                       # past the module docstring
    for word in ("lambdify", "eval(", "exec(", "sympify(", "parse_expr"):
        assert word not in code.replace("evalf(", "")


# the evaluator's speed on 10⁶ points: bench/evaluate_speed.py (a benchmark, not a timed test)


# ------------------------------------------------------------ rules
def target(q):
    return 1e-12 * np.maximum(1.0, np.abs(q))


def test_piecewise_1d_with_offset_kinks():
    """E[z² 1{|z| < 1/2}] = erf(1/(2√2)) − φ(1/2): kinks at ±1/2 found by root finding."""
    f = lambda t: np.atleast_2d(t ** 2 * (np.abs(t) < 0.5))
    k = lambda t: np.atleast_2d(0.5 - np.abs(t))
    val, err, ok = piecewise_1d(f, Coord(None), k, target, 10 ** 6)
    truth = special.erf(0.5 / np.sqrt(2)) - np.exp(-0.125) / np.sqrt(2 * np.pi)
    assert ok and abs(val[0] - truth) < 1e-13 and abs(val[0] - truth) <= err[0] + 1e-15


@pytest.mark.parametrize("law,truth", [
    (Law("laplace", 2.0), 0.5 * np.exp(-0.3)),          # E relu(u − 0.3), b = 1
    (Law("uniform", 3.0), (3 - 0.3) ** 2 / 12),        # A = 3
])
def test_piecewise_1d_laws(law, truth):
    f = lambda t: np.atleast_2d(np.maximum(t - 0.3, 0))
    k = lambda t: np.atleast_2d(t - 0.3)
    val, err, ok = piecewise_1d(f, Coord(law), k, target, 10 ** 6)
    assert ok and abs(val[0] - truth) < 1e-12


def test_student_t_rule():
    c = Coord(Law("student_t", 1.0, 5.0), growth=2.0)
    val, err, ok = piecewise_1d(lambda t: np.vstack([t ** 2, np.tanh(t) ** 2]), c, None, target, 10 ** 6)
    assert abs(val[0] - 1.0) < 1e-10
    ref = integrate.quad(lambda t: np.tanh(t) ** 2 * c.pdf(np.array(t)), -np.inf, np.inf, epsabs=1e-14)[0]
    assert abs(val[1] - ref) < 1e-10


def test_iterated_2d_relu_kinks_reach_1e10():
    """E[relu(ξ₁) relu(ξ₁ cos a + ξ₂ sin a)] = (sin a + (π − a) cos a)/(2π) (Cho & Saul)."""
    a = 2.0
    lines = np.array([[1.0, 0.0, 0.0], [np.cos(a), np.sin(a), 0.0]])
    f = lambda s, t: np.atleast_2d(np.maximum(s, 0) * np.maximum(np.cos(a) * s + np.sin(a) * t, 0))
    val, err, ok = iterated_2d(f, Coord(None), Coord(None), lines, lambda q: 1e-11 + 0 * q, 2 * 10 ** 6)
    truth = (np.sin(a) + (np.pi - a) * np.cos(a)) / (2 * np.pi)
    assert ok and abs(val[0] - truth) < 1e-10 and abs(val[0] - truth) <= err[0] + 1e-15


def test_tensor_smooth():
    f = lambda s, t: np.atleast_2d(np.exp(0.3 * s - 0.2 * t) * np.cos(t))
    val, err, ok = tensor(f, [Coord(None), Coord(None)], target, 10 ** 6)
    truth = np.exp(0.045) * np.exp(0.02 - 0.5) * np.cos(-0.2)     # E e^{bt} cos t = e^{(b²−1)/2} cos b
    assert ok and abs(val[0] - truth) < 1e-12


def test_qmc_is_reproducible_and_honest():
    coords = [Coord(None)] * 6
    f = lambda *t: np.atleast_2d(np.maximum(sum(t), 0.0))           # E relu(N(0, 6)) = √(6/2π)
    a = qmc(f, coords, lambda q: 1e-12 + 0 * q, 2 ** 18, seed=3)
    b = qmc(f, coords, lambda q: 1e-12 + 0 * q, 2 ** 18, seed=3)
    assert a.values[0] == b.values[0] and a.errors[0] == b.errors[0]
    assert abs(a.values[0] - np.sqrt(6 / (2 * np.pi))) < 5 * a.errors[0] and a.errors[0] < 1e-3


def test_qmc_points_kept_give_the_same_numbers_as_fresh_ones():
    """The QMC points are drawn once per (seed, budget, laws) and kept: a second call, and a call
    after the cache is emptied, give the same bits; other laws or another seed get other points."""
    from tensorprog.expect.qmc import POINTS, PointCache
    coords = [Coord(None), Coord(Law("student_t", 1, 5)), Coord(None)]
    f = lambda *t: np.vstack([np.tanh(t[0] + t[1]) * t[2] ** 2, np.abs(t[1])])
    tol = lambda q: 1e-12 + 0 * q
    first = qmc(f, coords, tol, 2 ** 14, seed=5)
    assert (5, 2 ** 14, tuple((c.family, c.scale, c.df) for c in coords)) in POINTS.entries
    again = qmc(f, coords, tol, 2 ** 14, seed=5)
    POINTS.entries.clear()
    fresh = qmc(f, coords, tol, 2 ** 14, seed=5)
    for r in (again, fresh):
        assert np.array_equal(r.values, first.values) and np.array_equal(r.errors, first.errors)
    assert not np.array_equal(qmc(f, coords, tol, 2 ** 14, seed=6).values, first.values)
    assert len(POINTS.entries) == 2
    small = PointCache(max_floats=3 * 2 ** 14)          # room for one key's points only
    small.get(5, 2 ** 14, coords).columns(3, 0)
    small.get(6, 2 ** 14, coords).columns(3, 0)
    assert len(small.entries) == 1


def test_numeric_expectations_are_memoised_by_their_whole_input():
    """A repeated numeric_expect (same integrands, Σ, laws, budget) returns the kept results; a
    different Σ or seed is computed anew, and equals what a cold call gives."""
    from tensorprog.expect.budget import Budget
    from tensorprog.expect.numeric import JOBS, numeric_expect
    g = sp.symbols("g0:3", real=True)
    exprs = [sp.tanh(g[0] + g[1] * g[2]), sp.tanh(g[0]) * sp.tanh(g[2]) ** 2]
    cov = np.array([[1.0, 0.3, 0.1], [0.3, 1.2, -0.2], [0.1, -0.2, 0.9]])
    budget = Budget(max_qmc_points=2 ** 14, max_quad_points=20_000)
    first = numeric_expect(exprs, g, cov, [], budget)
    assert numeric_expect(exprs, g, cov, [], budget) == first
    key = (tuple(exprs), tuple(g), cov.tobytes(), (), budget)
    assert JOBS.entries[key] == tuple(first)
    JOBS.entries.clear()
    assert numeric_expect(exprs, g, cov, [], budget) == first           # cold: the same bits
    other = numeric_expect(exprs, g, cov * 1.01, [], budget)
    assert other != first and len(JOBS.entries) == 2


@pytest.mark.parametrize("budget", [300, 800, 3000])
def test_error_estimate_bounds_unresolved_singularities(budget):
    """Singularities the rule is not told about (a kink, |t|^3, √|t|, log|t|) converge
    slowly; the reported error must still cover the actual one."""
    gs = [(lambda t: np.maximum(t - 0.3, 0.0), 0.3), (lambda t: np.abs(t - 0.1) ** 3, 0.1),
          (lambda t: np.sqrt(np.abs(t - 0.2)), 0.2), (lambda t: np.log(np.abs(t)), 0.0)]
    truths = [integrate.quad(lambda t: g(t) * np.exp(-t * t / 2) / np.sqrt(2 * np.pi), -20, 20, points=[p],
                             epsabs=1e-15, limit=500)[0] for g, p in gs]
    val, err, ok = piecewise_1d(lambda t: np.vstack([g(t) for g, _ in gs]), Coord(None), None, target, budget)
    assert not ok
    assert np.all(np.abs(val - truths) <= err)


def test_float_elimination_of_a_singular_covariance_is_sympy_s_to_rounding(monkeypatch):
    """``linalg.reduce_basis`` of a singular Float Σ (≥ FLOAT_ELIMINATION_FROM coordinates) in
    float64: the basis and Σ_B of sympy's Float elimination, the coefficients z_D = Σ_DB Σ_B⁻¹ z_B
    equal to 1e-9, and a closed form over dependent coordinates (E relu(z_8) relu(z_9), both sums of
    the basis, plus Σ z_i²) equal to 1e-12 and to the arc-cosine kernel of their 2×2 covariance + tr Σ."""
    from tensorprog.expect import linalg
    from tensorprog.expect.exact import gauss_closed_form
    float_reduce = linalg.float_reduce_basis
    rng = np.random.default_rng(11)
    n = 10
    z = sp.symbols(f"z0:{n}", real=True)
    A = rng.standard_normal((n, 7))
    C = A @ A.T
    cov = linalg.Matrix(sp.Matrix(C).applyfunc(sp.Float))
    assert n >= linalg.FLOAT_ELIMINATION_FROM and linalg.float_numbers(cov)
    expr = Relu(z[8]) * Relu(z[9]) + sp.tanh(sum(z[:8])) * z[5]
    fast = linalg.reduce_basis(expr, z, cov)
    with monkeypatch.context() as m:
        m.setattr(linalg, "FLOAT_ELIMINATION_FROM", 10 ** 9)
        slow = linalg.reduce_basis(expr, z, cov)
    assert fast[1] == slow[1] and len(fast[1]) == 7 and fast[2] == slow[2]
    points = {zb: float(v) for zb, v in zip(fast[1], rng.standard_normal(len(fast[1])))}
    a, b = float(fast[0].xreplace(points)), float(slow[0].xreplace(points))
    assert a == pytest.approx(b, rel=1e-9) and fast[0] != expr    # the dependent z's were substituted
    whole = Relu(z[8]) * Relu(z[9]) + sum(zi ** 2 for zi in z)       # over all n: E = arc-cosine + tr Σ
    calls = []
    values = []
    for reduce in ("fast", "slow"):
        with monkeypatch.context() as m:
            m.setattr(linalg, "float_reduce_basis", lambda *a: calls.append(1) or float_reduce(*a))
            if reduce == "slow":
                m.setattr(linalg, "FLOAT_ELIMINATION_FROM", 10 ** 9)
            values.append(float(gauss_closed_form(whole, z, cov, 10 ** 5)))
    assert len(calls) == 1
    s, t, c = C[8, 8], C[9, 9], C[8, 9]
    theta = np.arccos(c / np.sqrt(s * t))
    arccos = np.sqrt(s * t) / (2 * np.pi) * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) + np.trace(C)
    assert values[0] == pytest.approx(values[1], rel=1e-12) and values[0] == pytest.approx(arccos, rel=1e-12)


def test_numeric_jobs_give_the_same_bits_on_one_and_two_blas_threads():
    """The whitened rows z_i = L_i·t run on one BLAS thread (module doc of expect.numeric): a QMC job over
    twelve Gaussians of a rank-11 Σ gives the same bits whatever the caller's BLAS thread count."""
    from threadpoolctl import threadpool_limits
    from tensorprog.expect.budget import Budget
    from tensorprog.expect.numeric import JOBS, numeric_expect
    rng = np.random.default_rng(5)
    g = sp.symbols("g0:12", real=True)
    A = rng.standard_normal((12, 11))
    cov = A @ A.T / 11
    exprs = [sp.Mul(*[sp.tanh(g[i] - g[i + 6] / 2) for i in range(6)]), sp.tanh(sum(g) / 4) ** 2]
    budget = Budget(max_qmc_points=2 ** 13)
    results = []
    for threads in (1, 2):
        JOBS.entries.clear()
        with threadpool_limits(limits=threads, user_api="blas"):
            results.append(numeric_expect(exprs, g, cov, [], budget))
    assert results[0] == results[1] and results[0][0].method == "qmc"
