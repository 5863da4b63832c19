"""E φ(u)ψ(v) over two correlated Gaussians for functions kinked at 0 alone, by iterated
Gauss–Legendre quadrature split at both kinks, batched over the pairs the Mehler series leaves.

Where |ρ| is near 1, the series of a kinked function (softsign′: coefficients decaying like a power
of k) misses the target; those pairs used to go one by one to the engine's adaptive quadrature (a
second or more each, per expectation).  Here, for all of them at once, in whitened coordinates
u = √a z₁, v = (c/√a) z₁ + r z₂ (r² = b − c²/a > 0):

    E φ(u)ψ(v) = ∫ φ(√a z₁) [∫ ψ(m + r z₂) pdf(z₂) dz₂] pdf(z₁) dz₁,   m = (c/√a) z₁.

The inner integral is split where v = 0 (z₂* = −m/r, clipped to [−T, T]) into two intervals of
:data:`INNER_PANELS` panels each; on each side ψ(m + r z₂)·pdf(z₂) is analytic.  The outer integrand
is analytic on each side of z₁ = 0 (φ's kink; the inner integral, a Gaussian smoothing of ψ's kink
of width r, also varies on the scale r about z₁ = 0): its panels are graded geometrically toward 0
(:data:`OUTER_BREAKS`), then of width 1 out to T = 13.  The error estimate: the same panels with
fewer nodes (:data:`COARSE`), whose difference from the finer rule (:data:`FINE`) overestimates the
finer one's error, plus the rounding of the sums (8ε Σ|terms|).  Pairs whose estimate misses the
target are left to the caller (``ok`` False).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

EPS = np.finfo(float).eps
#: the rule's half-width (pdf(13) ≈ 1e-37: nothing beyond it counts)
T = 13.0
#: the outer panels' breakpoints on [0, T]: graded toward the kink at 0 (2⁻¹⁶ … 1/2), then unit panels
OUTER_BREAKS = tuple([0.0] + [2.0 ** -j for j in range(16, 0, -1)] + [float(k) for k in range(1, 14)])
#: panels on each side of the inner kink
INNER_PANELS = 13
#: nodes per panel of the rule and of its error estimate
FINE, COARSE = 20, 14
#: pairs evaluated at once (each a (outer × inner) grid of a few 10⁵ points)
CHUNK = 8


@lru_cache(maxsize=8)
def outer_rule(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights·pdf of the outer rule on [−T, T] (panels :data:`OUTER_BREAKS`, mirrored)."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    breaks = np.array(OUTER_BREAKS)
    lo, hi = breaks[:-1], breaks[1:]
    z = ((lo + hi)[:, None] / 2 + (hi - lo)[:, None] / 2 * x[None, :]).ravel()
    wz = ((hi - lo)[:, None] / 2 * w[None, :]).ravel()
    z, wz = np.concatenate([-z[::-1], z]), np.concatenate([wz[::-1], wz])
    return z, wz * np.exp(-z * z / 2) / np.sqrt(2 * np.pi)


@lru_cache(maxsize=8)
def unit_panels(nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of :data:`INNER_PANELS` equal panels on [0, 1], ``nodes`` each."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    t = ((np.arange(INNER_PANELS)[:, None] + (x[None, :] + 1) / 2) / INNER_PANELS).ravel()
    return t, np.tile(w / 2, INNER_PANELS) / INNER_PANELS


def pair_sums(phi: Callable, psi: Callable, a: np.ndarray, b: np.ndarray, c: np.ndarray,
              nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(Σ terms, Σ |terms|) of the split rule with ``nodes`` per panel, for pairs (a, b, c) with r > 0."""
    z1, w1 = outer_rule(nodes)
    t, wt = unit_panels(nodes)
    sa = np.sqrt(a)[:, None]
    r = np.sqrt(np.maximum(b - c * c / a, 0.0))[:, None, None]
    m = ((c / np.sqrt(a))[:, None] * z1)[:, :, None]                         # (p, n1, 1)
    star = np.clip(-m / r, -T, T)
    total, size = 0.0, 0.0
    for lo, hi in ((np.full_like(star, -T), star), (star, np.full_like(star, T))):
        z2 = lo + (hi - lo) * t                                              # (p, n1, n2)
        w2 = (hi - lo) * wt * np.exp(-z2 * z2 / 2) / np.sqrt(2 * np.pi)
        terms = w2 * psi(m + r * z2)
        total = total + terms.sum(axis=2)
        size = size + np.abs(terms).sum(axis=2)
    f = phi(sa * z1) * w1                                                    # (p, n1)
    return np.sum(f * total, axis=1), np.sum(np.abs(f) * size, axis=1)


def split_expect(phi: Callable, psi: Callable, a, b, c, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, errors, ok) of E φ(u)ψ(v) for pairs (a, b, c) (module doc); ``ok``: r > 0, finite, and
    the error within ``tol`` (relative above 1)."""
    a, b, c = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (a, b, c))
    values, errors = np.full(len(a), np.nan), np.full(len(a), np.inf)
    live = np.nonzero((a > 0) & (b - c * c / np.where(a > 0, a, 1.0) > 0))[0]
    with np.errstate(all="ignore"):
        for start in range(0, len(live), CHUNK):
            k = live[start:start + CHUNK]
            fine, size = pair_sums(phi, psi, a[k], b[k], c[k], FINE)
            coarse, _ = pair_sums(phi, psi, a[k], b[k], c[k], COARSE)
            values[k], errors[k] = fine, np.abs(fine - coarse) + 8 * EPS * size
    ok = np.isfinite(values) & (errors <= tol * np.maximum(1.0, np.abs(values)))
    return values, errors, ok
