"""The stated errors of dataset kernels by the Mehler series are honest and tight (issue 25).

Against an 80-bit reference (bench/series_reference.py: the layer recursion with every Gaussian
expectation by the trapezoidal rule in np.longdouble, its own error ~1e-19): every sampled pair's
stated error covers the actual error, and is at most 100× max(actual, ε·max(|value|, √(K_ii K_jj)))
(an error below one ulp of the entry's scale cannot be resolved in float64: the series sums terms of
that size, and an entry small by cancellation is computed to ulps of its terms, not of itself).
Also: one series cell's stated error (the grid tape's, :func:`packed_sum`, with ρ formed from float64
a, b, c as the tape forms it) covers E φ(u)φ(v) at those a, b, c and stays within a few ulps of the
scale √(E φ(u)² E φ(v)²); the per-cell slope bounds of the series (Price's theorem) bound the true
derivatives, and follow them to within 2× (signed in their first terms: SiLU's E φ″ψ cancels there).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.symbolic.hermite import coefficients, pack, step_for
from tensorprog.symbolic.mehler import mehler_curve, mehler_slope, packed_sum

ROOT = Path(__file__).resolve().parent.parent
EPS = np.finfo(float).eps


def reference_module():
    spec = importlib.util.spec_from_file_location("series_reference", ROOT / "bench" / "series_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def no_store(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", str(tmp_path))      # nothing recorded before


@pytest.mark.parametrize("act,depth", [("tanh", 3), ("silu", 2)])
def test_stated_error_covers_and_is_tight(act, depth):
    X = np.random.default_rng(1).standard_normal((12, 6))
    r = tp.kernel(str(ROOT / "programs" / "kernels" / f"{act}_mlp.tp"), X, L=depth, var=1.5, var1=1.5, b1=0.1,
                  tol=1e-10)
    pairs = [(0, 0), (3, 3), (0, 1), (2, 7), (4, 9), (5, 11), (6, 8), (10, 11)]
    ref, ref_err = reference_module().mlp_kernels(X, pairs, depth, 1.5, 1.5, 0.1, act)
    assert float(ref_err.max()) < 1e-17
    for n, name in enumerate(("nngp", "ntk")):
        got = np.array([r.outputs[name].mean[i, j] for i, j in pairs], dtype=np.longdouble)
        stated = np.array([r.outputs[name].error[i, j] for i, j in pairs])
        actual = np.abs(got - ref[:, n]).astype(float) + ref_err[:, n].astype(float)
        assert np.all(actual <= stated), (name, actual, stated)
        # one ulp of the entry's scale √(K_ii K_jj) (Cauchy–Schwarz: the series' terms α_kβ_k are of that
        # size, and so is the rounding of their sum): an entry small by cancellation is not resolved below it
        scale = np.array([np.sqrt(abs(r.outputs[name].mean[i, i] * r.outputs[name].mean[j, j])) for i, j in pairs])
        ratio = stated / np.maximum(actual, EPS * np.maximum(np.abs(ref[:, n].astype(float)), scale))
        assert ratio.max() <= 100, (name, ratio)


def derivative_series(phi_coef, psi_coef, rho, shift_a: int, shift_b: int, weight) -> float:
    """Σ_k ρ^k w_k α_{k+shift_a} β_{k+shift_b} with the given weights (from coefficients to high order)."""
    n = min(phi_coef.shape[0] - shift_a, psi_coef.shape[0] - shift_b)
    k = np.arange(n)
    return float(np.sum(rho ** k * weight(k) * phi_coef[shift_a:shift_a + n] * psi_coef[shift_b:shift_b + n]))


@pytest.mark.parametrize("fn", [np.tanh, lambda t: t / (1 + np.exp(-t))])
def test_slope_bounds_cover_the_derivatives(fn):
    a, b = 0.8, 1.7
    K = 128
    h = step_for(K, 2 * b)
    A, B = pack(fn, K, h, np.array([a])), pack(fn, K, h, np.array([b]))
    ca, cb = coefficients(fn, [a], K, h).alpha[0], coefficients(fn, [b], K, h).alpha[0]
    for rho in (-0.95, -0.3, 0.0, 0.05, 0.6, 0.999):
        # ∂/∂ρ Σ ρ^k α_k β_k = Σ ρ^k (k+1) α_{k+1} β_{k+1}; 2a ∂E/∂a = Σ ρ^k √((k+1)(k+2)) α_{k+2} β_k
        slope = derivative_series(ca, cb, rho, 1, 1, lambda k: k + 1.0)
        curve_a = derivative_series(ca, cb, rho, 2, 0, lambda k: np.sqrt((k + 1.0) * (k + 2.0)))
        curve_b = derivative_series(cb, ca, rho, 2, 0, lambda k: np.sqrt((k + 1.0) * (k + 2.0)))
        got = [float(mehler_slope(A, B, np.array([rho]))[0]), float(mehler_curve(A, B, np.array([rho]))[0]),
               float(mehler_curve(B, A, np.array([rho]))[0])]
        for true, bound in zip((slope, curve_a, curve_b), got):
            assert abs(true) <= bound * (1 + 1e-12) + 1e-15
            assert bound <= 2 * abs(true) + 1e-3 * max(got), (rho, true, bound)     # 4.8× before the signed form


@pytest.mark.parametrize("act", ["tanh", "silu"])
def test_cell_error_covers_the_expectation(act):
    """The stated error of single cells against the 80-bit 2-D trapezoid at the same float64 a, b, c:
    it covers every cell (the sum's roundings, ρ's own rounding, the coefficients' errors and the
    truncation), and is at most 30 ulps of √(E φ(u)² E φ(v)²) (it was 48 when the pairwise sum's
    roundings were charged on every term: up to 1.9× at |ρ| ≥ 0.9)."""
    ref = reference_module()
    phi64 = {"tanh": np.tanh, "silu": lambda t: t / (1 + np.exp(-t))}[act]
    phi = ref.ACTIVATIONS[act][0]
    rule = ref.Rule(0.1)
    rng = np.random.default_rng(3)
    P = 60
    a, b = rng.uniform(0.05, 3.0, P), rng.uniform(0.05, 3.0, P)
    c = rng.uniform(-0.98, 0.98, P) * np.sqrt(a * b)
    K = 256
    h = step_for(K, 1.5 * max(a.max(), b.max()))
    rho = c * ((1.0 / np.sqrt(a)) * (1.0 / np.sqrt(b)))          # the tape's c·a^(−1/2)·b^(−1/2)
    value, stated = packed_sum(pack(phi64, K, h, a), pack(phi64, K, h, b), rho, 1e-10)
    truth = np.array([rule.pair(phi, phi, a[p], b[p], c[p]) for p in range(P)])
    actual = np.abs((value - truth).astype(float))
    assert np.all(actual <= stated), (actual / stated).max()
    square = {x: float(rule.single(lambda t: phi(t) ** 2, x)) for x in np.concatenate([a, b])}
    scale = EPS * np.sqrt([square[x] * square[y] for x, y in zip(a, b)])
    assert (stated / scale).max() <= 30, (stated / scale).max()


def mp_coefficients(phi, a: float, K: int, h: float) -> tuple[list, object]:
    """(α_0 … α_K, S = E φ²) of φ(√a z) by the trapezoidal rule of step h on [−14, 14] in 110-bit mpmath
    (another step than the code's: geometric convergence makes both exact far below 10⁻²⁵ here)."""
    import mpmath as mp
    n = int(14 / h) + 1
    sa, hh, c = mp.sqrt(mp.mpf(a)), mp.mpf(h), 1 / mp.sqrt(2 * mp.pi)
    out, S = [mp.mpf(0)] * (K + 1), mp.mpf(0)
    for i in range(-n, n + 1):
        z = hh * i
        f = phi(sa * z)
        wf = hh * c * mp.exp(-z * z / 2) * f
        S += wf * f
        prev, cur = mp.mpf(0), mp.mpf(1)
        for k in range(K + 1):
            out[k] += wf * cur
            prev, cur = cur, (z * cur - mp.sqrt(k) * prev) / mp.sqrt(k + 1)
    return out, S


def float_and_mp_functions(act: str):
    """(numpy function, mpmath function) of the activation-like function named ``act``, for the
    coefficient tests against a 110-bit rule (``tanh64``: tanh evaluated in float64 only)."""
    import mpmath as mp

    def sig_np(t):
        return 1 / (1 + np.exp(-t))

    def sig_mp(t):
        return 1 / (1 + mp.exp(-t))
    fns = {"tanh": (np.tanh, mp.tanh), "tanh2": (lambda t: np.tanh(t) ** 2, lambda t: mp.tanh(t) ** 2),
           "silu": (lambda t: t * sig_np(t), lambda t: t * sig_mp(t)),
           "silu2": (lambda t: (t * sig_np(t)) ** 2, lambda t: (t * sig_mp(t)) ** 2),
           "dsilu2": (lambda t: (sig_np(t) * (1 + t * (1 - sig_np(t)))) ** 2,
                      lambda t: (sig_mp(t) * (1 + t * (1 - sig_mp(t)))) ** 2),
           "tanh64": (lambda t: np.tanh(np.asarray(t, dtype=float)), mp.tanh)}
    return fns[act]


@pytest.mark.parametrize("extended", [True, False])
@pytest.mark.parametrize("act", ["tanh", "silu", "silu2", "dsilu2", "tanh64"])
def test_coefficient_error_covers_mpmath_and_is_tight(act, extended, monkeypatch):
    """Each coefficient's stated error δ (``Coefficients.sup``: the two rules' difference, the values'
    floor — φ in long double on the core window, float64 outside it, charged —, the split products'
    bound and u·max_k |α̃_k|, the float64 rounding of the largest) covers the true coefficients (a
    110-bit trapezoid at another step) for every k, and is at most 0.75 ε·√S (u·max_k |α̃_k| alone is up
    to ½ε·√S, for a nearly linear φ; the float64 rule with its
    plain products stated 4–14 ε·√S: the products' accumulation then dominated the kernels' bounds);
    E φ² likewise (its error ≤ 1.5 u·S: its float64 rounding, u·S, and the two rules' difference).  A φ evaluated in float64 (``tanh64``: no long double values)
    keeps the float64 values' floor (COEFF_ROUNDING), which covers too.  silu2 grows like z² (the core
    window widens for it at a = 4).  The plain float64 rule (``hermite.EXTENDED`` off: φ and the products
    in float64) covers with its own floor (PLAIN_COEFF_ROUNDING), at most 16 ε·√S."""
    import tensorprog.symbolic.hermite as hermite
    monkeypatch.setattr(hermite, "EXTENDED", extended)
    import mpmath as mp
    mp.mp.prec = 110
    phi, phi_mp = float_and_mp_functions(act)
    a, K = np.array([0.05, 1.0, 4.0]), 24
    h = step_for(K, float(a.max()))
    c = coefficients(phi, a, K, h)
    u = EPS / 2
    for v in range(len(a)):
        ref, S = mp_coefficients(phi_mp, float(a[v]), K, 0.8 * h)
        actual = np.array([float(abs(mp.mpf(float(c.alpha[v, k])) - ref[k])) for k in range(K + 1)])
        assert np.all(actual <= c.sup[v]), (act, a[v], (actual / c.sup[v]).max())
        assert float(abs(mp.mpf(float(c.square[v])) - S)) <= c.square_err[v]
        if act != "tanh64" and extended:
            assert c.sup[v] <= 0.75 * EPS * np.sqrt(float(S)), (act, a[v], c.sup[v] / EPS / np.sqrt(float(S)))
            assert c.square_err[v] <= 1.5 * u * float(S)
        assert c.sup[v] <= 16 * EPS * np.sqrt(float(S))


@pytest.mark.parametrize("act", ["tanh", "tanh2", "silu", "silu2", "dsilu2", "tanh64"])
def test_first_orders_cover_mpmath_and_are_tight(act):
    """The packed rows' first orders k ≤ 4 (``hermite.low_orders``: the rule in long double, interpolated in
    √a from Chebyshev–Lobatto points where there are many variances, at each variance where there are few)
    and their own error δ_low (``Coefficients.sup_low``) against a 110-bit rule at another step: δ_low covers
    every first coefficient, at variances between the interpolation points too, and is at most 1.1 ε√S (it
    is mostly the rounding to float64, u·max_k |α̃_k|) and at most half the plain rule's δ.  A φ evaluated in
    float64 (``tanh64``) keeps the plain rule's first orders and their floor, which covers."""
    import mpmath as mp
    import tensorprog.symbolic.hermite as hermite
    from tensorprog.symbolic.hermite import coefficients
    mp.mp.prec = 110
    phi, phi_mp = float_and_mp_functions(act)
    K = 48
    spans = {"narrow": np.linspace(0.30, 0.312, 90), "interpolated": np.linspace(0.29, 0.36, 120),
             "wider": np.linspace(0.3, 1.0, 100),
             "direct": np.array([0.05, 1.0, 4.0])}
    for name, a in spans.items():
        h = hermite.step_for(K, float(a.max()))
        c = coefficients(phi, a, K, h, low=True)
        plain = coefficients(phi, a, K, h)
        for v in ([0, 37, 61, len(a) - 1] if len(a) > 3 else range(3)):
            ref, S = mp_coefficients(phi_mp, float(a[v]), 4, 0.8 * h)
            actual = max(float(abs(mp.mpf(float(c.alpha[v, k])) - ref[k])) for k in range(5))
            assert actual <= c.sup_low[v], (name, v, actual, c.sup_low[v])
            if act != "tanh64":
                assert c.sup_low[v] <= 1.1 * EPS * np.sqrt(float(S)), (name, v, c.sup_low[v] / EPS / np.sqrt(float(S)))
                assert c.sup_low[v] <= 0.5 * plain.sup[v], (name, v, c.sup_low[v], plain.sup[v])


def test_first_orders_long_double_rule_against_mpmath():
    """The long double rule of the first orders (``hermite.low_rules``: φ in long double at every node, the
    parity fold, blocked sums) against the same rule in 110-bit mpmath (the same nodes, so only the
    roundings differ): within LOW_VALUE_ROUNDING/4·√S for tanh, tanh², (1 − tanh²)², SiLU, SiLU² and SiLU′²
    (measured ≤ 2.4 u_ld √S; stated 16 u_ld √S), and the stated floors cover it with that room; the rule
    at 2h likewise."""
    import mpmath as mp
    import tensorprog.symbolic.hermite as hermite
    mp.mp.prec = 110
    LD = np.longdouble
    sig = {"np": lambda t: 1 / (1 + np.exp(-t)), "mp": lambda t: 1 / (1 + mp.exp(-t))}
    fns = [(np.tanh, mp.tanh), (lambda t: np.tanh(t) ** 2, lambda t: mp.tanh(t) ** 2),
           (lambda t: (1 - np.tanh(t) ** 2) ** 2, lambda t: (1 - mp.tanh(t) ** 2) ** 2),
           (lambda t: t * sig["np"](t), lambda t: t * sig["mp"](t)),
           (lambda t: (t * sig["np"](t)) ** 2, lambda t: (t * sig["mp"](t)) ** 2),
           (lambda t: (sig["np"](t) * (1 + t * (1 - sig["np"](t)))) ** 2,
            lambda t: (sig["mp"](t) * (1 + t * (1 - sig["mp"](t)))) ** 2)]
    rng = np.random.default_rng(3)
    for phi, phi_mp in fns:
        for K, top in ((8, 1.0), (48, 0.4), (256, 4.4)):
            h = hermite.step_for(K, top)
            for a in rng.uniform(0.02, top, 2):
                fine, coarse, floor_h, floor_D = hermite.low_rules(phi, np.array([np.sqrt(LD(a))]), K, h, None)
                for rule, step, floor in ((fine, h, floor_h), (coarse, 2 * h, floor_D)):
                    ref, S = mp_coefficients(phi_mp, float(a), 4, step)
                    err = max(abs(mp.mpf(float(rule[0, k])) + mp.mpf(float(rule[0, k] - LD(float(rule[0, k])))) - ref[k])
                              for k in range(5))
                    assert float(err) <= hermite.LOW_VALUE_ROUNDING / 4 * float(mp.sqrt(S)), (K, a, float(err))
                    assert float(err) <= floor[0] / 4


def test_first_orders_of_a_span_too_wide_keep_the_plain_rule():
    """A span of √a that would need more than LOW_PIECES interpolation pieces (s₁/s₀ = 20 here: 8 pieces of
    relative width 0.2) is not computed again (``low_orders`` gives None): the plain rule's first orders and
    their δ stay (δ_low = δ), and δ still covers them against a 110-bit rule; a span of LOW_PIECES pieces
    is computed again, with δ_low below the plain rule's δ."""
    import mpmath as mp
    import tensorprog.symbolic.hermite as hermite
    from tensorprog.symbolic.hermite import coefficients
    mp.mp.prec = 110
    K = 48
    wide = np.linspace(0.01, 4.0, 200)                    # s from 0.1 to 2
    h = hermite.step_for(K, float(wide.max()))
    assert hermite.low_orders(np.tanh, wide, K, h, None) is None
    c, plain = coefficients(np.tanh, wide, K, h, low=True), coefficients(np.tanh, wide, K, h)
    assert np.array_equal(c.alpha, plain.alpha) and np.array_equal(c.sup_low, c.sup)
    for v in (0, 99, 199):
        ref, _ = mp_coefficients(mp.tanh, float(wide[v]), 4, 0.8 * h)
        assert max(float(abs(mp.mpf(float(c.alpha[v, k])) - ref[k])) for k in range(5)) <= c.sup_low[v]
    ratio = ((1 + hermite.LOW_START[-1]) / (1 - hermite.LOW_START[-1])) ** hermite.LOW_PIECES
    fits = np.linspace(0.3, 0.3 * ratio ** 2 * 0.99, 200)     # s₁/s₀ just under LOW_PIECES pieces' reach
    assert hermite.low_orders(np.tanh, fits, K, h, None) is not None
    low = coefficients(np.tanh, fits, K, h, low=True)
    assert np.all(low.sup_low < low.sup)
