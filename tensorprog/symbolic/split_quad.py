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
down to a few levels below r/√b (:func:`grading`), then of width 1 out to T = 9.  The error estimate: the same panels with
fewer nodes (:data:`COARSE`), whose difference from the finer rule (:data:`FINE`) overestimates the
finer one's error, plus the rounding of the sums (8ε Σ|terms|).  Pairs whose estimate misses the
target are left to the caller (``ok`` False).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

EPS = np.finfo(float).eps
#: the rule's half-width (the Gaussian's mass beyond 9 is 1.1e-19: nothing beyond it counts at 1e-16)
T = 9.0
#: the outer panels on [0, T]: graded toward the kink at 0 (2⁻ʲ … 1/2, j down to a few levels below
#: the pairs' smallest smoothing scale r, at most :data:`FINEST`), then unit panels
FINEST = 16
#: panels on each side of the inner kink
INNER_PANELS = 8
#: nodes per panel of the rule and of its error estimate
FINE, COARSE = 16, 11
#: pairs within this of |ρ| = 1 are left (the inner smoothing's scale r = √(b(1 − ρ²)) below the
#: outer panels' finest, 2⁻¹⁶): the caller's other rules (the diagonal, the 1-D forms of x ≡ ±y) take them
SINGULAR = 1e-9
#: pairs evaluated at once (each a (outer × inner) grid of a few 10⁵ points)
CHUNK = 8


@lru_cache(maxsize=64)
def outer_rule(nodes: int, levels: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights·pdf of the outer rule on [−T, T]: panels [2⁻ʲ⁻¹, 2⁻ʲ] for j < ``levels``,
    [0, 2⁻ˡᵉᵛᵉˡˢ], then unit panels to T; mirrored."""
    x, w = np.polynomial.legendre.leggauss(nodes)
    breaks = np.array([0.0] + [2.0 ** -j for j in range(levels, 0, -1)] + [float(k) for k in range(1, int(T) + 1)])
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
    r = np.sqrt(np.maximum(b - c * c / a, 0.0))[:, None, None]
    z1, w1 = outer_rule(nodes, grading(float(np.min(r / np.sqrt(b)[:, None, None]))))
    t, wt = unit_panels(nodes)
    sa = np.sqrt(a)[:, None]
    m = ((c / np.sqrt(a))[:, None] * z1)[:, :, None]                         # (p, n1, 1)
    star = np.clip(-m / r, -T, T)
    total, size = 0.0, 0.0
    weights = wt / np.sqrt(2 * np.pi)
    for lo, hi in ((np.full_like(star, -T), star), (star, np.full_like(star, T))):
        span = hi - lo
        z2 = span * t                                                        # (p, n1, n2): the nodes
        z2 += lo
        g = psi(r * z2 + m)                                                  # ψ(v) there
        np.square(z2, out=z2)
        z2 *= -0.5
        np.exp(z2, out=z2)
        z2 *= weights                                                        # the weights / span
        total = total + span[..., 0] * np.einsum("ijk,ijk->ij", z2, g)
        size = size + span[..., 0] * np.einsum("ijk,ijk->ij", z2, np.abs(g))
    f = phi(sa * z1) * w1                                                    # (p, n1)
    return np.sum(f * total, axis=1), np.sum(np.abs(f) * size, axis=1)


def grading(scale: float) -> int:
    """The outer panels' levels for an inner smoothing of relative scale r/√b ≥ ``scale``: three below
    it (at least 3, at most :data:`FINEST`)."""
    return int(min(FINEST, max(3, np.ceil(-np.log2(max(scale, 1e-300))) + 3)))


def split_expect(phi: Callable, psi: Callable, a, b, c, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, errors, ok) of E φ(u)ψ(v) for pairs (a, b, c) (module doc); ``ok``: |ρ| ≤ 1 −
    :data:`SINGULAR`, finite, and the error within ``tol`` (relative above 1)."""
    a, b, c = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (a, b, c))
    values, errors = np.full(len(a), np.nan), np.full(len(a), np.inf)
    with np.errstate(all="ignore"):
        rho = np.abs(c) / np.sqrt(a * b)
    live = np.nonzero((a > 0) & (b > 0) & (rho <= 1 - SINGULAR))[0]
    live = live[np.argsort(-rho[live], kind="stable")]       # chunks of like ρ: like gradings
    with np.errstate(all="ignore"):
        for start in range(0, len(live), CHUNK):
            k = live[start:start + CHUNK]
            fine, size = pair_sums(phi, psi, a[k], b[k], c[k], FINE)
            coarse, _ = pair_sums(phi, psi, a[k], b[k], c[k], COARSE)
            values[k], errors[k] = fine, np.abs(fine - coarse) + 8 * EPS * size
    ok = np.isfinite(values) & (errors <= tol * np.maximum(1.0, np.abs(values)))
    return values, errors, ok
