"""ELU and SELU in closed form: the bivariate normal distribution function Φ₂ (symbolic/bivariate.py),
the engine's offset-kink rule (expect/exact.py: offset_pair, the tilt's erfc form) and the dataset
kernels of programs/kernels/elu_mlp.tp and selu_mlp.tp replayed over pairs — each against an
independent reference: mpmath (Φ₂ by another integral, the quadrant identities by 2-D quadrature) and
a layer recursion whose Gaussian expectations are composite Gauss–Legendre quadrature split at the
kinks (no closed form; accurate to ~1e-15, checked against mpmath below)."""
from __future__ import annotations

from pathlib import Path

import mpmath
import numpy as np
import pytest
import sympy as sp
from numpy.polynomial.legendre import leggauss

import tensorprog as tp
from tensorprog.builtins.table import SELU_ALPHA, SELU_SCALE
from tensorprog.expect.engine import expect as engine_expect
from tensorprog.symbolic.bivariate import (OWEN_SELECT, PHI2_ERROR, Phi2, log_phi2_tail, phi2, phi2_error, phi2_magnitude, phi2_mp,
                                          scaled_erfc, scaled_erfc_error, scaled_phi2, scaled_phi2_error)
from tensorprog.symbolic.heads import Elu, Selu

ROOT = Path(__file__).resolve().parent.parent


# ---- the reference: piecewise Gauss–Legendre, split at the kinks ---------------------------------
X24, W24 = leggauss(24)
PANELS, CUT = 24, 12.0


def elu(x, a=1.0):
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


def delu(x, a=1.0):
    return np.where(x > 0, 1.0, a * np.exp(np.minimum(x, 0)))


def selu(x):
    return SELU_SCALE * elu(x, SELU_ALPHA)


def dselu(x):
    return SELU_SCALE * delu(x, SELU_ALPHA)


def nodes(lo, hi):
    """Composite Gauss–Legendre (PANELS panels of 24 nodes) on [lo, hi], weights times φ."""
    lo, hi = np.asarray(lo, float)[..., None, None], np.asarray(hi, float)[..., None, None]
    h = (hi - lo) / PANELS
    x = lo + h * np.arange(PANELS)[:, None] + h / 2 * (X24 + 1)
    w = h / 2 * W24 * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)
    return x.reshape(x.shape[:-2] + (-1,)), w.reshape(w.shape[:-2] + (-1,))


def graded(lo, hi, width):
    """Composite Gauss–Legendre on [lo, hi] (one end 0) whose panels double in width from 0, the first
    ``width`` wide (then PANELS uniform ones beyond), weights times φ."""
    edges = [0.0]
    while edges[-1] < CUT / 4 and len(edges) < 60:
        edges.append(width * 2.0 ** (len(edges) - 1))
    edges = np.concatenate([edges, np.linspace(edges[-1], CUT, PANELS + 1)[1:]])
    edges = np.unique(np.clip(edges, 0.0, CUT))
    if lo < 0:
        edges = -edges[::-1]
    parts = [nodes(a, b) for a, b in zip(edges[:-1], edges[1:])]
    return np.concatenate([x.ravel() for x, _ in parts]), np.concatenate([w.ravel() for _, w in parts])


def reference(f, g, a, b, c):
    """E f(u) g(v), (u, v) ~ N(0, [[a, c], [c, b]]): u = √a z₁, v = (c/√a) z₁ + r z₂, split at u = 0
    and, for each z₁, at v = 0 (u ≡ (√a/c)·v when r = 0: one dimension); the z₁ panels graded towards 0,
    where E[g(v) | z₁] turns over a width r/|c/√a| (narrow near correlation ±1)."""
    r2 = b - c * c / a
    out = 0.0
    width = min(1.0, np.sqrt(max(r2, 0.0)) / max(abs(c) / np.sqrt(a), 1e-300)) / 4
    for lo, hi in ((-CUT, 0.0), (0.0, CUT)):
        z1, w1 = graded(lo, hi, width) if width < 0.02 else nodes(lo, hi)
        if r2 <= 1e-14 * b:
            out += float(np.sum(w1 * f(np.sqrt(a) * z1) * g(c / np.sqrt(a) * z1)))
            continue
        r = np.sqrt(r2)
        t = np.clip(-(c / np.sqrt(a)) * z1 / r, -CUT, CUT)
        inner = 0.0
        for l2, h2 in ((np.full_like(t, -CUT), t), (t, np.full_like(t, CUT))):
            z2, w2 = nodes(l2, h2)
            inner = inner + np.sum(w2 * g((c / np.sqrt(a)) * z1[:, None] + r * z2), axis=1)
        out += float(np.sum(w1 * f(np.sqrt(a) * z1) * inner))
    return out


def recursion(phi, dphi, q11, q12, q22, L, var, var1, b1):
    """(nngp, ntk) of the template's network by the layer recursion, every expectation by :func:`reference`."""
    s11, s12, s22 = var1 * q11 + b1, var1 * q12 + b1, var1 * q22 + b1
    theta = s12
    for layer in range(1, L + 1):
        k12, kdot = reference(phi, phi, s11, s22, s12), reference(dphi, dphi, s11, s22, s12)
        if layer == L:
            return k12, k12 + kdot * theta
        theta = var * k12 + var * kdot * theta
        s11, s22 = var * reference(phi, phi, s11, s11, s11), var * reference(phi, phi, s22, s22, s22)
        s12 = var * k12
    raise ValueError("L ≥ 1")


# ---- Φ₂ ------------------------------------------------------------------------------------------
def phi2_other(h, k, rho):
    """Φ₂ by another integral than phi2_mp's: ∫_{−∞}^h φ(x) Φ((k − ρx)/√(1 − ρ²)) dx."""
    s = mpmath.sqrt(1 - rho * rho)
    return mpmath.quad(lambda x: mpmath.npdf(x) * mpmath.ncdf((k - rho * x) / s), [-mpmath.inf, min(h, 0), h]
                       if h > 0 else [-mpmath.inf, h])


POINTS = [(0.3, -0.5, 0.4), (-2.0, -1.0, -0.7), (1.0, 2.0, 0.95), (-3.0, -3.5, 0.0), (0.0, 1.2, 0.6),
          (-0.7, 0.0, -0.3), (0.0, 0.0, 0.5), (2.5, -1.5, 1 - 1e-9), (-1.0, -1.0, 1 - 1e-12),
          (1.5, -0.5, -1 + 1e-10), (-4.0, 3.0, -0.999), (6.0, -6.0, 0.2),
          (-0.6705310410859375, 0.6705310410851757, -0.9999999999998633),   # antipodal: h ≈ −k, ρ ≈ −1
          (0.8, 0.8000000000003, 0.9999999999997)]


@pytest.mark.parametrize("h,k,rho", POINTS)
def test_phi2_agrees_with_mpmath(h, k, rho):
    with mpmath.workdps(30):
        ref = phi2_mp(mpmath.mpf(h), mpmath.mpf(k), mpmath.mpf(rho))
        if abs(rho) < 0.99:                               # the other integral, away from its singular ρ
            assert abs(phi2_other(mpmath.mpf(h), mpmath.mpf(k), mpmath.mpf(rho)) - ref) < 1e-25
    assert abs(float(phi2(h, k, rho)) - float(ref)) <= PHI2_ERROR
    assert abs(float(Phi2(sp.Float(h), sp.Float(k), sp.Float(rho)).evalf(25)) - float(ref)) < 1e-15


def test_phi2_random_arguments_and_scipy():
    """phi2 over random (h, k, ρ), ρ within 1e-14 of ±1 too, within PHI2_ERROR of mpmath; and scipy's
    multivariate normal cdf (its own, looser, integration) agrees to its accuracy."""
    from scipy.stats import multivariate_normal
    rng = np.random.default_rng(0)
    h, k = rng.uniform(-8, 8, 60), rng.uniform(-8, 8, 60)
    rho = np.concatenate([rng.uniform(-1, 1, 20), 1 - 10.0 ** -rng.uniform(1, 14, 20),
                          -1 + 10.0 ** -rng.uniform(1, 14, 20)])
    with mpmath.workdps(30):
        ref = np.array([float(phi2_mp(mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(r))) for a, b, r in zip(h, k, rho)])
    assert np.max(np.abs(phi2(h, k, rho) - ref)) <= PHI2_ERROR
    for a, b, r in zip(h[:5], k[:5], rho[:5]):
        assert phi2(a, b, r) == pytest.approx(multivariate_normal(cov=[[1, r], [r, 1]]).cdf([a, b]), abs=1e-7)


def test_phi2_error_is_relative_to_its_terms():
    """phi2_error (min(8ε, 4ε(1 + h² + k²)M(h, k))) covers mpmath at 30 digits where h, k are far below 0 and
    Φ₂ is tiny (down to 1e-250, ρ within 1e-13 of ±1 too), and is that small there: at h = k = −20 far
    below 8ε.  Its sympy form (what the tape charges) gives the same numbers, tiny ones included."""
    rng = np.random.default_rng(7)
    n = 40
    h = np.concatenate([rng.uniform(-30, 2, n), rng.uniform(-6, 6, n), -10.0 ** rng.uniform(-2, 1.4, n)])
    k = np.concatenate([rng.uniform(-30, 2, n), rng.uniform(-6, 6, n), rng.uniform(-25, 3, n)])
    rho = np.concatenate([rng.uniform(-1, 1, n), 1 - 10.0 ** -rng.uniform(1, 13, n // 2),
                          -1 + 10.0 ** -rng.uniform(1, 13, n - n // 2), rng.uniform(-1, 1, n)])
    with mpmath.workdps(30):
        ref = np.array([float(phi2_mp(mpmath.mpf(a), mpmath.mpf(b), mpmath.mpf(r))) for a, b, r in zip(h, k, rho)])
    bound = phi2_error(h, k)
    assert np.all(np.abs(phi2(h, k, rho) - ref) <= bound)
    assert np.sum(ref < 1e-30) >= 20 and np.all(bound <= PHI2_ERROR)
    assert phi2_error(-20.0, -20.0) < 1e-80 and phi2_magnitude(-20.0, -20.0) < 1e-80
    H, Kk = sp.symbols("H K", real=True)
    from tensorprog.symbolic.evaluate import evaluate
    np.testing.assert_allclose(evaluate(phi2_error(H, Kk), {H: h, Kk: k}), bound, rtol=1e-13, atol=0)


def test_phi2_limits_and_derivatives():
    h, k, r = sp.symbols("h k r")
    ncdf = lambda x: (1 + sp.erf(x / sp.sqrt(2))) / 2                      # noqa: E731
    assert Phi2(h, k, 1) == ncdf(sp.Min(h, k))
    assert Phi2(sp.Rational(1, 2), sp.Rational(-1, 3), 1) == ncdf(sp.Rational(-1, 3))
    assert Phi2(h, k, 0) == ncdf(h) * ncdf(k)
    assert Phi2(0, 0, r) == sp.Rational(1, 4) + sp.asin(r) / (2 * sp.pi)
    assert float(phi2(0.4, -0.2, -1.0)) == pytest.approx(float(ncdf(0.4) + ncdf(-0.2) - 1), abs=1e-16)
    assert float(phi2(-0.4, -0.2, -1.0)) == 0.0
    assert float(phi2(0.4, -0.2, 1.0)) == pytest.approx(float(ncdf(-0.2)), abs=1e-16)
    at = {h: sp.Float(0.3), k: sp.Float(-0.8), r: sp.Float(0.45)}
    with mpmath.workdps(30):
        for i, x in enumerate((h, k, r), start=1):
            args = [mpmath.mpf(str(at[s])) for s in (h, k, r)]

            def f(t, i=i):
                a = list(args)
                a[i - 1] = t
                return phi2_mp(*a)
            numeric = mpmath.diff(f, args[i - 1])
            assert abs(float(Phi2(h, k, r).diff(x).xreplace(at).evalf(25)) - float(numeric)) < 1e-14


# ---- the quadrant identities and the engine's closed forms ----------------------------------------
def test_quadrant_identity_by_mpmath():
    """E[e^{u+v} 1{u<0, v<0}] = e^{(a+b+2c)/2} Φ₂(−(a+c)/√a, −(b+c)/√b; ρ) (exponential tilting) and
    E[e^u 1{u<0}] = e^{a/2}Φ(−√a), by mpmath 2-D quadrature."""
    with mpmath.workdps(15):
        a, b, c = mpmath.mpf("1.3"), mpmath.mpf("0.8"), mpmath.mpf("0.4")
        r = mpmath.sqrt(b - c * c / a)
        quad = mpmath.quad(lambda z1: mpmath.npdf(z1) * mpmath.exp(mpmath.sqrt(a) * z1) * mpmath.quad(
            lambda z2: mpmath.npdf(z2) * mpmath.exp(c / mpmath.sqrt(a) * z1 + r * z2),
            [-mpmath.inf, -(c / mpmath.sqrt(a)) * z1 / r]), [-mpmath.inf, 0])
        closed = mpmath.exp((a + b + 2 * c) / 2) * phi2_mp(-(a + c) / mpmath.sqrt(a), -(b + c) / mpmath.sqrt(b),
                                                          c / mpmath.sqrt(a * b))
        assert abs(quad - closed) < 1e-15
        one = mpmath.quad(lambda z: mpmath.npdf(z) * mpmath.exp(mpmath.sqrt(a) * z), [-mpmath.inf, 0])
        assert abs(one - mpmath.exp(a / 2) * mpmath.ncdf(-mpmath.sqrt(a))) < 1e-15


def test_reference_quadrature_is_accurate():
    """The Gauss–Legendre reference against closed forms it does not use: E[elu'(u)²] = ½ + e^{2a}Φ(−2√a),
    E[step(u) step(v)] = ¼ + asin(ρ)/(2π)."""
    for a in (0.5, 1.6, 7.0):
        exact = 0.5 + float(mpmath.exp(2 * a) * mpmath.ncdf(-2 * mpmath.sqrt(a)))
        assert abs(reference(delu, delu, a, a, a) - exact) < 1e-15
    step = lambda x: (x > 0).astype(float)                                 # noqa: E731
    assert abs(reference(step, step, 2.0, 1.0, 0.9) - (0.25 + np.arcsin(0.9 / np.sqrt(2)) / (2 * np.pi))) < 1e-15


u, v = sp.symbols("u v")
CASES = [(Elu(u, 1) * Elu(v, 1), elu, elu), (sp.diff(Elu(u, 1), u) * sp.diff(Elu(v, 1), v), delu, delu),
         (Selu(u) * Selu(v), selu, selu), (sp.diff(Selu(u), u) * sp.diff(Selu(v), v), dselu, dselu),
         (Elu(u, sp.Rational(1, 2)) * v, lambda x: elu(x, 0.5), lambda x: x)]
COVS = [(1.6, 2.0, 0.5), (3.0, 4.0, -2.5), (7.0, 7.0, 6.9), (7.0, 7.0, 7.0), (1.0, 2.0, 0.0),
        (2.0, 1.5, 0.99 * np.sqrt(3.0)), (2.0, 1.5, -0.99 * np.sqrt(3.0)),
        (25.0, 100.0, 50.0), (100.0, 100.0, -100.0), (100.0, 100.0, -99.99)]     # rank 1 (x, 2x; x, −x) and near


@pytest.mark.parametrize("a,b,c", COVS)
def test_closed_forms_match_quadrature(a, b, c):
    """Every ELU/SELU expectation of the NNGP and NTK is exact (ρ near ±1, 0 and on the diagonal too)
    and agrees with the split quadrature to 1e-12 (relative for values above 1)."""
    cov = sp.Matrix([[a, c], [c, b]])
    for expr, f, g in CASES:
        est = engine_expect(expr, [u, v], cov)
        assert est.method == "exact"
        ref = reference(f, g, a, b, c)
        assert abs(est.value - ref) <= 1e-12 * max(1.0, abs(ref)), (expr, a, b, c, est.value, ref)


# ---- the dataset kernels ------------------------------------------------------------------------
@pytest.mark.parametrize("name,phi,dphi", [("elu", elu, delu), ("selu", selu, dselu)])
def test_kernel_templates_are_exact_and_within_their_errors(name, phi, dphi):
    """tp.kernel on the templates: every output exact, every sampled entry (the diagonal, a pair of
    correlation −1, a repeated input) within its stated error of the recursion and below 1e-10."""
    X = np.random.default_rng(5).standard_normal((24, 10))
    X[3] = -X[1]
    X[7] = X[2]
    params = dict(L=4, var=1.5, var1=1.5, b1=0.1)
    K = tp.kernel(ROOT / "programs" / "kernels" / f"{name}_mlp.tp", X, **params)
    q = X @ X.T / X.shape[1]
    assert K.outputs["nngp"].method == K.outputs["ntk"].method == "exact"
    pairs = [(0, 0), (1, 3), (2, 7), (4, 19), (5, 8), (6, 6), (0, 23), (11, 17)]
    for i, j in pairs:
        ref = recursion(phi, dphi, q[i, i], q[i, j], q[j, j], params["L"], 1.5, 1.5, 0.1)
        for out, r in zip(("nngp", "ntk"), ref):
            got, err = K.outputs[out].mean[i, j], K.outputs[out].error[i, j]
            assert abs(got - r) <= 1e-12 * max(1.0, abs(r)), (out, i, j, got, r)
            assert abs(got - r) <= err + 1e-15 * abs(r), (out, i, j, got, r, err)
            assert err <= 1e-10
            assert K.outputs[out].mean[j, i] == got


def test_opposite_pair_replay_states_an_error():
    """tp.kernel on rows x, −x (the opposite class, replayed from a record of that one pair): the stated error
    of the pair is positive and covers the recursion."""
    X = np.random.default_rng(5).standard_normal((4, 10))
    X[3] = -X[1]
    K = tp.kernel(ROOT / "programs" / "kernels" / "elu_mlp.tp", X, L=1, var=1.5, var1=1.5, b1=0.1)
    q = X @ X.T / X.shape[1]
    ref = recursion(elu, delu, q[1, 1], q[1, 3], q[3, 3], 1, 1.5, 1.5, 0.1)
    for out, r in zip(("nngp", "ntk"), ref):
        got, err = K.outputs[out].mean[1, 3], K.outputs[out].error[1, 3]
        assert 0 < err and abs(got - r) <= err, (out, got, r, err)


def test_single_pair_compile_is_exact():
    """A 2-input program with selu compiles by the closed forms (method exact) and agrees with the recursion."""
    from tensorprog.program import load
    params = dict(q11=1.3, q12=-0.4, q22=0.9, L=3, var=1.5, var1=1.5, b1=0.1)
    limit = load(ROOT / "programs" / "kernels" / "selu_mlp.tp", **params).compile().limit().outputs
    ref = recursion(selu, dselu, 1.3, -0.4, 0.9, 3, 1.5, 1.5, 0.1)
    for out, r in zip(("nngp", "ntk"), ref):
        assert limit[out].method == "exact"
        assert abs(limit[out].value - r) <= max(limit[out].error, 1e-14 * abs(r)) and abs(limit[out].value - r) < 1e-12


@pytest.mark.parametrize("name,phi,dphi", [("elu", elu, delu), ("selu", selu, dselu)])
def test_batch_compile_charges_the_forms_functions(name, phi, dphi):
    """A batch compile of many pairs (what tools/pairs.py does beyond ONE_BY_ONE leftover pairs) evaluates
    each closed form on the numpy tape for all pairs at once: its e^m·Φ₂ terms (variances up to 10 here,
    e^m up to ~e^10) err beyond the ledger's 4ε·(|E| + max variance), and the batch charges each form's
    functions as the replay does (symbolic/rounding.py).  Every entry within its stated error of the
    recursion (before: up to 1.9× beyond it), and the stated error not looser than 1e4× the actual (the
    NTK's, a function of scalars, is propagated by sensitivity, Σ_a |∂f/∂c_a|·err(c_a), as in the
    single-pair compile, which states the same: up to ~2e3× the actual here, shared estimates counted
    once per argument)."""
    from tensorprog.expect.budget import Budget
    from tensorprog.limit.compiler import compile_program
    from tensorprog.program import load
    from tensorprog.tools.pairs import first_layer_cov
    X = np.random.default_rng(3).standard_normal((5, 4)) * 1.5
    q = X @ X.T / 4
    i, j = np.triu_indices(5, 1)
    L, var, var1, b1 = 3, 1.5, 1.5, 0.1
    prog = load(ROOT / "programs" / "kernels" / f"{name}_mlp.tp", L=L, var=var, var1=var1, b1=b1).ir
    covs = first_layer_cov(var1, b1, q[i, i], q[i, j], q[j, j])
    lim = compile_program(prog, budget=Budget(tol=1e-10), batch_covs={0: covs}).limit()
    worst = 0.0
    for k in range(len(i)):
        ref = recursion(phi, dphi, q[i[k], i[k]], q[i[k], j[k]], q[j[k], j[k]], L, var, var1, b1)
        for out, r in zip(("nngp", "ntk"), ref):
            v, e = lim.outputs[out].value[k], lim.outputs[out].error[k]
            assert lim.outputs[out].method == "exact"
            assert abs(v - r) <= e, (out, k, v, r, e)
            worst = max(worst, abs(v - r))
    assert max(float(np.max(lim.outputs[o].error)) for o in ("nngp", "ntk")) <= 1e4 * max(worst, 1e-15)


def test_parallel_pair_batch_propagates_errors_by_sensitivity():
    """A parallel pair (y = 2x: correlation 1 in the data, unequal norms), compiled as tools/pairs.py does
    (a batch of one, ONE_BY_ONE), at depth 10: the NTK is a function of scalars (Σ var·⟨dx, dy⟩·⟨φ, φ⟩),
    whose error is Σ_a |∂f/∂c_a|·err(c_a), not the plain sum of its estimates' errors (the slopes are the
    other factors, up to ~6 here).  Before, the batch summed them (stated 3.7e-12, actual 5.6e-12 from
    the recursion); the single-pair compile propagated already.  Covered now, and at most 3e-12 relative
    (the value is now within ~1e-14 of the recursion, its tilted quadrants scaled: the bound is ~1e4× the
    actual error at depth 10, first-order worst-case charges of every rounding through the layers)."""
    from tensorprog.expect.budget import Budget
    from tensorprog.limit.compiler import compile_program
    from tensorprog.program import load
    from tensorprog.tools.pairs import first_layer_cov
    X = np.random.default_rng(0).standard_normal((10, 6))[:2]
    X[0] = 2 * X[1]
    q = X @ X.T / 6
    L, var, var1, b1 = 10, 1.5, 1.5, 0.1
    prog = load(ROOT / "programs" / "kernels" / "selu_mlp.tp", L=L, var=var, var1=var1, b1=b1).ir
    covs = first_layer_cov(var1, b1, q[[0], [0]], q[[0], [1]], q[[1], [1]])
    lim = compile_program(prog, budget=Budget(tol=1e-10), batch_covs={0: covs}).limit()
    ref = recursion(selu, dselu, q[0, 0], q[0, 1], q[1, 1], L, var, var1, b1)
    for out, r in zip(("nngp", "ntk"), ref):
        v, e = float(lim.outputs[out].value[0]), float(lim.outputs[out].error[0])
        assert abs(v - r) <= e <= 3e-12 * abs(r), (out, v, r, e)


# ---- degenerate pairs and large variances ---------------------------------------------------------
def log_phi2_reference(h, k, rho, dps=40):
    """log Φ₂ by mpmath: ∫_{−∞}^{min(h,k)} φ(x)Φ((max(h,k) − ρx)/√(1 − ρ²)) dx (a positive integrand, split
    around its mode and, near ρ = ±1, around the step of the inner Φ) — not the Plackett integral of
    phi2_mp, which cancels in the far tails."""
    with mpmath.workdps(dps):
        h, k, rho = mpmath.mpf(h), mpmath.mpf(k), mpmath.mpf(rho)
        h, k = min(h, k), max(h, k)
        if rho >= 1:
            return mpmath.log(mpmath.ncdf(h))
        if rho <= -1:
            d = mpmath.ncdf(h) - mpmath.ncdf(-k)
            return mpmath.log(d) if d > 0 else -mpmath.inf
        s = mpmath.sqrt((1 - rho) * (1 + rho))
        log_f = lambda x: -x * x / 2 + mpmath.log(mpmath.ncdf((k - rho * x) / s))     # noqa: E731
        lo, hi = h - 60, h
        for _ in range(200):                                  # the mode of the (log-concave) integrand
            a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
            lo, hi = (a, hi) if log_f(a) < log_f(b) else (lo, b)
        xm = (lo + hi) / 2
        pts = [xm + sgn * d for sgn in (-1, 1) for d in (20, 5, 1, 0.1, 0.01, 1e-4, 1e-6, 1e-8)] + [xm]
        if rho != 0 and s < mpmath.mpf("1e-3"):
            pts += [k / rho + d * s for d in (-10, -1, 0, 1, 10)]
        pts = sorted({p for p in pts if p < h}) + [h]
        top = log_f(xm)
        value = mpmath.quad(lambda x: mpmath.exp(log_f(x) - top), [-mpmath.inf] + pts, maxdegree=10)
        return mpmath.log(value) + top - mpmath.log(2 * mpmath.pi) / 2


def test_phi2_tail_is_relatively_accurate():
    """log_phi2_tail and scaled_phi2 (Owen where that is accurate relative to Φ₂, the tail quadrature else)
    against mpmath over h, k down to −40 (Φ₂ down to e^{−1e16} near ρ = −1), ρ within 1e-15 of ±1: log Φ₂
    within 4ε(4 + |log Φ₂|), e^m·Φ₂ within two thirds of its stated bound (scaled_phi2_error), itself at
    most 1.5·OWEN_SELECT·(5 + |log Φ₂| + |m + log Φ₂|) relative (Owen's bound where Owen is taken), ~6ε·(…)
    where the quadrature is."""
    rng = np.random.default_rng(11)
    n = 16
    h = np.concatenate([rng.uniform(-40, 0, n), -10 ** rng.uniform(-1, 1.6, n), rng.uniform(-5, 5, n)])
    k = np.concatenate([rng.uniform(-40, 5, n), rng.uniform(-30, 3, n), rng.uniform(-5, 5, n)])
    rho = np.concatenate([rng.uniform(-1, 1, n), 1 - 10.0 ** -rng.uniform(1, 15, n // 2),
                          -1 + 10.0 ** -rng.uniform(1, 15, n - n // 2), rng.uniform(-1, 1, n)])
    keep = np.minimum(h, k) < 0
    h, k, rho = h[keep], k[keep], rho[keep]
    m = rng.uniform(-800, 0, len(h))
    tail = log_phi2_tail(h, k, rho)
    value = scaled_phi2(m, h, k, rho)
    bound = scaled_phi2_error(m, h, k, rho, value)
    for i in range(len(h)):
        ref = log_phi2_reference(h[i], k[i], rho[i])
        unit = float(np.finfo(float).eps) * (4 + abs(float(ref)))
        assert abs(tail[i] - float(ref)) <= 4 * unit, (h[i], k[i], rho[i], tail[i], ref)
        if ref + m[i] > -700:                                 # e^m·Φ₂ in range: relative error, bound
            with mpmath.workdps(40):
                exact = float(mpmath.exp(ref + m[i]))
            assert abs(value[i] - exact) <= bound[i] <= 1.5 * OWEN_SELECT * (5 + abs(ref) + abs(m[i] + ref)) * exact
            assert abs(value[i] - exact) <= bound[i] / 1.5, (h[i], k[i], rho[i], m[i])
            p = float(phi2(h[i], k[i], rho[i]))
            if not (p > 1e-300 and phi2_error(h[i], k[i]) <= OWEN_SELECT * (4 + abs(np.log(p))) * p):
                assert bound[i] <= 1.4e-15 * (5 + abs(ref) + abs(m[i] + ref)) * exact    # the quadrature's


def test_scaled_erfc():
    """e^m·erfc(x) by erfcx: e^{1e3}·erfc(31) (both beyond float64) within its bound of mpmath."""
    m = np.array([1000.0, 961.5, 2.0, 50.0, 0.0, 300.0])
    x = np.array([31.0, 31.0, -1.5, 0.0, 5.0, 17.2])
    got, bound = scaled_erfc(m, x), scaled_erfc_error(m, x)
    for i in range(len(m)):
        with mpmath.workdps(40):
            ref = float(mpmath.exp(m[i]) * mpmath.erfc(x[i]))
        assert np.isfinite(got[i]) and abs(got[i] - ref) <= bound[i] <= 1e-12 * ref


LARGE = [(400.0, 1000.0, 300.0), (1000.0, 1000.0, 990.0), (1000.0, 600.0, -700.0), (300.0, 300.0, -299.9),
         (1000.0, 1000.0, 1000.0), (800.0, 50.0, 150.0), (1000.0, 1000.0, -1000.0)]


@pytest.mark.parametrize("a,b,c", LARGE)
def test_large_variances(a, b, c):
    """Variances up to 1e3 (e^m up to e^{2000}, Φ₂ far below 1e-308): every ELU/SELU expectation exact,
    within 1e-12 (relative) of the split quadrature and within its stated error, which is at most 1e-8
    relative.  Before: e^{a/2}-size terms cancelled (the NTK of programs/kernels/elu_mlp.tp at variance 100
    was stated ±3.6e14), or overflowed."""
    cov = sp.Matrix([[a, c], [c, b]])
    for expr, f, g in CASES:
        est = engine_expect(expr, [u, v], cov)
        ref = reference(f, g, a, b, c)
        scale = max(1.0, abs(ref))
        assert est.method == "exact"
        assert abs(est.value - ref) <= min(est.error + 1e-15 * scale, 1e-12 * scale), (expr, est.value, ref, est.error)
        assert est.error <= 1e-8 * scale


@pytest.mark.parametrize("name,q11,q12,q22,params", [
    ("elu", 25, 50, 100, {}), ("elu", 4, 4, 4, {}), ("selu", 4, -4, 4, {}),
    ("selu", 25, 50, 100, dict(var=1.5, var1=1.5, b1=0.1)), ("elu", 400, -300, 1000, dict(var=1.2))])
def test_degenerate_and_large_pairs_compile(name, q11, q12, q22, params):
    """The single-pair compile of the templates at depth 3 for parallel (x, 2x), identical and opposite inputs
    (a rank-1 covariance whose rounded Floats are not exactly singular: before, "E[exp(−ℓ2)·…] diverges"
    or a garbage NTK), and at input variance up to 1e3: every output exact, within its stated error of
    the recursion, the error at most 1e-9 relative."""
    from tensorprog.program import load
    phi, dphi = (elu, delu) if name == "elu" else (selu, dselu)
    p = dict(L=3, var=1.0, var1=1.0, b1=0.0) | params
    lim = load(ROOT / "programs" / "kernels" / f"{name}_mlp.tp", q11=q11, q12=q12, q22=q22, **p).compile().limit()
    ref = recursion(phi, dphi, q11, q12, q22, p["L"], p["var"], p["var1"], p["b1"])
    for out, r in zip(("nngp", "ntk"), ref):
        o = lim.outputs[out]
        assert o.method == "exact"
        assert abs(o.value - r) <= o.error + 1e-15 * abs(r) and o.error <= 1e-9 * max(1.0, abs(r)), (out, o.value, r, o.error)


def test_kernel_on_parallel_rows():
    """tp.kernel at input scale 5 with parallel (2x), opposite and repeated rows: every entry exact, within
    1e-12 of the recursion, and within its stated error."""
    X = 5 * np.random.default_rng(8).standard_normal((6, 4))
    X[1], X[2], X[3] = 2 * X[0], -X[0], X[4]
    params = dict(L=3, var=1.5, var1=1.5, b1=0.1)
    K = tp.kernel(ROOT / "programs" / "kernels" / "elu_mlp.tp", X, **params)
    q = X @ X.T / X.shape[1]
    assert K.outputs["nngp"].method == K.outputs["ntk"].method == "exact"
    for i, j in [(0, 1), (0, 2), (1, 2), (3, 4), (1, 1), (2, 5)]:
        ref = recursion(elu, delu, q[i, i], q[i, j], q[j, j], 3, 1.5, 1.5, 0.1)
        for out, r in zip(("nngp", "ntk"), ref):
            got, err = K.outputs[out].mean[i, j], K.outputs[out].error[i, j]
            assert abs(got - r) <= 1e-12 * max(1.0, abs(r)) and err <= 1e-9 * max(1.0, abs(r)), (out, i, j, got, r)
            assert abs(got - r) <= err + 1e-15 * abs(r), (out, i, j, got, r, err)
