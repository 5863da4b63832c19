"""Softsign dataset kernels by the series (issue 25): the split rule's Hermite coefficients for
functions kinked at 0 (tensorprog/symbolic/split_rule.py), so that records of softsign templates
replay, checked against an independent reference.

The reference: the layer recursion of the softsign MLP (bench/series_reference.py's formulas) with
every 2-D expectation by iterated Gauss–Legendre quadrature in long double, split at both kinks —
the outer integral over z₁ at u = 0, the inner one over z₂ (given z₁) at v = 0, a point that moves
with z₁ — and the 1-D ones split at 0; its own error is the difference of two resolutions."""
from __future__ import annotations

import os

import numpy as np
import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.expect.series import kinked_at_zero
from tensorprog.symbolic.heads import Relu, Softsign
from tensorprog.symbolic.hermite import coefficients
from tensorprog.symbolic.split_rule import split_basis, split_rule, split_step

LD = np.longdouble
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, "programs", "kernels", "softsign_mlp.tp")


def softsign(x):
    return x / (1 + np.abs(x))


def dsoftsign(x):
    return 1 / (1 + np.abs(x)) ** 2


class SplitReference:
    """E f(u)g(v) and E f(u) by Gauss–Legendre panels (``nodes`` per panel, width ``width``) on
    [−T, 0] and [0, T] in z₁, and per z₁ on [−T, z*] and [z*, T] in z₂ (z*: where v = 0), in long double."""

    def __init__(self, nodes: int, width: float, T: float = 12.0) -> None:
        x, w = np.polynomial.legendre.leggauss(nodes)
        self.x, self.w = (x.astype(LD) + 1) / 2, w.astype(LD) / 2          # on [0, 1]
        self.T, self.width = LD(T), width
        self.c = 1 / np.sqrt(2 * np.arccos(LD(-1)))

    def interval(self, lo, hi):
        """Nodes and weights (last axis) of the panels on [lo, hi] (arrays of equal shape)."""
        lo, hi = np.asarray(lo, dtype=LD), np.asarray(hi, dtype=LD)
        panels = max(1, int(np.ceil(float(np.max(hi - lo)) / self.width)))
        t = ((np.arange(panels)[:, None] + self.x[None, :]) / panels).ravel()
        w = np.tile(self.w, panels) / panels
        span = (hi - lo)[..., None]
        return lo[..., None] + span * t, span * w

    def gauss(self, lo, hi):
        z, w = self.interval(lo, hi)
        return z, w * self.c * np.exp(-z * z / 2)

    def outer(self):
        """Nodes and weights·pdf on [−T, T], panels graded toward the kink at 0 (2⁻¹⁴ … 1/2, then
        unit panels): near ρ = ±1 the inner integral bends on the scale r about z₁ = 0."""
        right = np.array([0.0] + [2.0 ** -j for j in range(14, 0, -1)] + list(range(1, int(self.T) + 1)), dtype=LD)
        lo = np.concatenate([-right[1:][::-1], right[:-1]])
        hi = np.concatenate([-right[:-1][::-1], right[1:]])
        z = lo[:, None] + (hi - lo)[:, None] * self.x[None, :]
        w = (hi - lo)[:, None] * self.w[None, :]
        z, w = z.ravel(), w.ravel()
        return z, w * self.c * np.exp(-z * z / 2)

    def single(self, f, a) -> LD:
        z, w = self.outer()
        return np.sum(w * f(np.sqrt(LD(a)) * z))

    def pair(self, f, g, a, b, c) -> LD:
        a, b, c = LD(a), LD(b), LD(c)
        sa = np.sqrt(a)
        r2 = b - c * c / a
        if r2 <= 0:                                     # u ≡ λv: one Gaussian
            return self.single(lambda t: f(t) * g((c / a) * t), a)
        r = np.sqrt(r2)
        z1, w1 = self.outer()
        m = (c / sa) * z1
        star = np.clip(-m / r, -self.T, self.T)
        zl, wl = self.gauss(np.full_like(star, -self.T), star)
        zr, wr = self.gauss(star, np.full_like(star, self.T))
        inner = np.sum(wl * g(m[:, None] + r * zl), axis=1) + np.sum(wr * g(m[:, None] + r * zr), axis=1)
        return np.sum(w1 * f(sa * z1) * inner)


def recursion(s11, s12, s22, depth: int, var: float, rule: SplitReference) -> tuple[LD, LD]:
    """(nngp, ntk) of a softsign MLP from the first layer's covariance: bench/series_reference.py's
    layer recursion with this module's split rule."""
    from test_series_bounds import reference_module
    return reference_module().recursion(s11, s12, s22, depth, var, rule, softsign, dsoftsign)


def reference(X, pairs, depth, var, var1, b1):
    """(values (P, 2), own error (P, 2)) of (nngp, ntk): two resolutions' value and difference."""
    Xl = X.astype(LD)
    d = LD(X.shape[1])
    fine, coarse = SplitReference(20, 2.0), SplitReference(14, 2.5)
    vals, errs = [], []
    for i, j in pairs:
        q = [np.sum(Xl[s] * Xl[t]) / d for s, t in ((i, i), (i, j), (j, j))]
        s = [LD(var1) * x + LD(b1) for x in q]
        if i == j:
            s = [s[0]] * 3
        one = np.array(recursion(s[0], s[1], s[2], depth, var, fine))
        two = np.array(recursion(s[0], s[1], s[2], depth, var, coarse))
        vals.append(one)
        errs.append(np.abs(one - two))
    return np.array(vals, dtype=LD), np.array(errs, dtype=float)


@pytest.fixture(autouse=True)
def no_store(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", "off")


def test_softsign_kernels_replay_by_the_series_and_cover_the_reference():
    """Depth 10, N = 7 with a repeated input (x ≡ y off the diagonal: the series' 1-D form) and a
    near duplicate (ρ ≈ 0.998 at every layer: the series misses its aim there, and the mixed replay's
    split quadrature takes those cells, symbolic/mixed.py): every entry within 1e-10 of the
    split-quadrature reference on sampled pairs (the diagonal included), the stated errors covering
    the actual ones, below 1e-10 and within 10⁴× of them (or near ε); the entries the near pair does
    not touch are those of the same data without it, to within the two stated errors."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((7, 10))
    X[5] = X[1]                                             # a repeated input
    X[6] = X[2] + 0.05 * rng.standard_normal(10)            # a close one (ρ ≈ 0.999 at the first layer)
    params = dict(L=10, var=1.5, var1=1.5, b1=0.1)
    r = tp.kernel(TEMPLATE, X, tol=1e-10, **params)
    # the record holds the mixed rule: its cells may be split quadrature, so that is the method stated
    assert {k: m.method for k, m in r.outputs.items()} == {"nngp": "quadrature", "ntk": "quadrature"}
    without = tp.kernel(TEMPLATE, X[:6], tol=1e-10, **params)        # the near pair left out
    pairs = [(0, 0), (0, 1), (2, 4), (1, 5), (2, 6)]
    ref, own = reference(X, pairs, 10, 1.5, 1.5, 0.1)
    assert own.max() < 1e-14                                # the reference is far below the errors checked
    for n, name in enumerate(("nngp", "ntk")):
        got = np.array([r.outputs[name].mean[i, j] for i, j in pairs])
        stated = np.array([r.outputs[name].error[i, j] for i, j in pairs])
        actual = np.abs(got - ref[:, n].astype(float))
        assert np.all(actual <= stated + own[:, n]), (name, actual, stated)
        assert np.all(actual < 1e-10) and np.all(stated < 1e-10), (name, actual, stated)
        assert np.all(stated <= np.maximum(1e4 * actual, 1e-13)), (name, stated, actual)
        same = np.array([without.outputs[name].mean[i, j] for i, j in pairs[:-1]])
        other = np.array([without.outputs[name].error[i, j] for i, j in pairs[:-1]])
        assert np.all(np.abs(same - got[:-1]) <= stated[:-1] + other)


def test_split_rule_coefficients_against_a_finer_rule_and_long_double_products():
    """The split rule's coefficients of softsign and softsign′ (K = 512): within their stated error
    (per coefficient, sup) of a rule with twice the panels and 40 nodes each, and their rounding
    (against long double products of the same values) within SPLIT_COEFF_ROUNDING; the trapezoidal
    rule's own error on them is 1e-10 … 1e-4 (why the split rule exists)."""
    from tensorprog.symbolic.split_rule import SPLIT_COEFF_ROUNDING
    K, a = 512, np.array([0.03, 0.3, 1.0, 2.7, 10.0])
    w = -split_step(K)
    for fn in (softsign, dsoftsign):
        c = coefficients(fn, a, K, split_step(K))
        fine, _, _ = split_rule(fn, a, K, w / 2, 40)
        assert np.all(np.abs(c.alpha - fine).max(axis=1) <= c.sup)
        assert np.all(c.sup < 4e-15)
        z, G = split_basis(K, w, 24)
        F = fn(np.sqrt(a)[:, None] * z) * G[0]
        exact = F.astype(LD) @ G.T.astype(LD)
        rounding = np.abs(c.alpha - exact).max(axis=1).astype(float) / np.sqrt(c.square)
        assert np.all(rounding <= SPLIT_COEFF_ROUNDING)
        trapezoid = coefficients(fn, a, K)
        assert np.abs(trapezoid.alpha - fine).max() > 1e-9


def test_kinked_at_zero():
    """Which functions take the split rule: kinks at 0 alone (softsign, softsign′, relu, |x|), not
    smooth ones nor kinks elsewhere."""
    t = sp.Symbol("t", real=True)
    assert kinked_at_zero(Softsign(t), t)
    assert kinked_at_zero(sp.diff(Softsign(t), t), t)
    assert kinked_at_zero(Relu(2 * t) ** 2, t)
    assert not kinked_at_zero(sp.tanh(t), t)
    assert not kinked_at_zero(Relu(t - 1), t)


def test_mixed_record_is_stored_and_loaded_bit_for_bit(tmp_path, monkeypatch):
    """A mixed record (a near duplicate among the inputs: split quadrature in its cells) goes to the
    replay store as data (φ and ψ of its mixed operations as tapes) and comes back: a second call with
    an empty memory loads it (no record, no warning of a disagreeing compile) and gives the same bits."""
    import warnings

    from tensorprog.limit.replay_store import ReplayStore
    from tensorprog.tools import pairs as pmod
    monkeypatch.setattr(pmod, "STORE", ReplayStore(tmp_path / "replays"))
    pmod.REPLAYS.clear()
    rng = np.random.default_rng(3)
    X = rng.standard_normal((5, 10))
    X[4] = X[2] + 0.05 * rng.standard_normal(10)
    first = tp.kernel(TEMPLATE, X, tol=1e-10, L=3, var=1.5, var1=1.5, b1=0.1)
    assert first.outputs["ntk"].method == "quadrature"        # the mixed rule's least exact method
    assert any(r is not None and r.replay.mixed for r in pmod.REPLAYS.values())
    pmod.REPLAYS.clear()
    monkeypatch.setattr(pmod, "record_class", lambda *a, **k: pytest.fail("recorded instead of loaded"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = tp.kernel(TEMPLATE, X, tol=1e-10, L=3, var=1.5, var1=1.5, b1=0.1)
    pmod.REPLAYS.clear()
    for name in ("nngp", "ntk"):
        assert np.array_equal(first.outputs[name].mean, second.outputs[name].mean)
        assert np.array_equal(first.outputs[name].error, second.outputs[name].error)


def test_split_quadrature_against_the_reference():
    """The mixed rule's quadrature (symbolic/split_quad.py) for softsign·softsign and softsign′·softsign′
    at |ρ| up to 0.9999, small and large variances: within its stated error of the long double
    reference, that error below 1e-13; pairs at |ρ| = 1 are left to other rules (ok False)."""
    from tensorprog.symbolic.split_quad import split_expect
    a = np.array([0.3, 1.5, 0.04, 3.0, 0.5, 0.7])
    b = np.array([0.31, 1.4, 0.05, 2.5, 0.5, 0.7])
    rho = np.array([0.9995, -0.99, 0.9999, 0.97, 0.3, 1.0])
    c = rho * np.sqrt(a * b)
    fine, coarse = SplitReference(24, 1.0), SplitReference(16, 1.5)
    for f in (softsign, dsoftsign):
        values, errors, ok = split_expect(f, f, a, b, c, 1e-10)
        assert list(ok) == [True] * 5 + [False]
        ref = np.array([fine.pair(f, f, *x) for x in zip(a[:5], b[:5], c[:5])])
        own = np.abs(ref - np.array([coarse.pair(f, f, *x) for x in zip(a[:5], b[:5], c[:5])])).astype(float)
        actual = np.abs(values[:5] - ref.astype(float))
        assert np.all(actual <= errors[:5] + own) and np.all(errors[:5] < 1e-13), (actual, errors, own)
