"""Hermite coefficients of a function with a kink at 0 (softsign, its derivative, relu-like heads):
Gauss–Legendre panels on each side of the kink, in place of the trapezoidal rule.

The trapezoidal rule of :mod:`.hermite` converges geometrically for φ analytic in a strip; where φ
(or a derivative) jumps at z = 0 it converges only like a power of h — softsign, C¹ with a jump
in φ″, gave coefficient errors of 1e-5 … 1e-3 at h = 0.25, so that no cell of a softsign kernel met
a 1e-10 target and its records failed.  Here the line is cut at the kink: [−T, 0] and [0, T]
(T = :data:`.hermite.HALF_WIDTH`) are each divided into panels of width w, with m Gauss–Legendre
nodes per panel.  On each side φ(√a z)·h_k(z)·pdf(z) is analytic (softsign's poles are at
z = ∓1/√a, beyond the side's end at 0), so each panel's rule converges geometrically.  The width
follows the highest order's oscillation: h_K(z)e^{−z²/4} ≈ cos(√(2K+1) z − Kπ/2), and an m-node rule
integrates e^{iκz} over a panel of width w to about (eκw/(4m))^{2m}: with
w = :data:`WIDTH_NUMBER`/√(2K+1) that is below 1e-19 for the coarse rule (m = :data:`COARSE_NODES`).

The error estimate, as in :mod:`.hermite`: the coarser rule (m = 20 on the same panels) against
the finer (m = 24), whose difference overestimates the finer rule's error, plus a rounding floor of
:data:`SPLIT_COEFF_ROUNDING`·√S per coefficient (the products in float64 BLAS; the basis computed in
long double and rounded).  The tails and every other number of :class:`.hermite.Coefficients` are
formed as for the plain trapezoidal rule.

A :class:`.mehler.HermiteRow` asks for this rule by a negative step: h = −w (:func:`split_step`),
so records and stored tapes need no new field; :func:`.hermite.coefficients` dispatches on the sign.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

EPS = np.finfo(float).eps
LD = np.longdouble
#: nodes per panel of the rule and of its error estimate
NODES, COARSE_NODES = 24, 20
#: w·√(2K+1): (e·11.7/(4·20))^{40} ≈ 3e-16·… at the highest order, far less at the lower ones
WIDTH_NUMBER = 11.7
#: the rule's half-width (that of :mod:`.hermite`: pdf(z)·|h_k(z)| ≤ e^{−z²/4}, below 1e-18 beyond 13)
HALF_WIDTH = 13.0
#: the rounding of one coefficient, relative to √S = ‖F‖₂, from the float64 products of ~1700 terms
#: (tests/test_softsign_replay.py measures it against long double sums of the same values: ≤ 5.3 ε√S
#: for softsign and softsign′ at K = 512, variances 0.03–10)
SPLIT_COEFF_ROUNDING = 8 * EPS


def split_step(K: int) -> float:
    """The negative step that names this rule in a :class:`.mehler.HermiteRow` of order K: −w, w the
    panels' width (:data:`WIDTH_NUMBER`/√(2K+1), at most 1), rounded down to 20 significant bits."""
    w = min(1.0, WIDTH_NUMBER / np.sqrt(2 * K + 1))
    m, e = np.frexp(w)
    return -float(np.ldexp(np.floor(np.ldexp(m, 20)), e - 20))


@lru_cache(maxsize=32)
def split_basis(K: int, width: float, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """(z, G): the split rule's nodes (panels of ``width`` on [−T, 0] and [0, T], ``nodes``
    Gauss–Legendre nodes each) and G[k, i] = √w_i h_k(z_i), w_i = λ_i·pdf(z_i) (λ the Gauss–Legendre
    weights), k ≤ K, by the three-term recurrence in long double, rounded to float64."""
    x, lam = np.polynomial.legendre.leggauss(nodes)
    panels = int(np.ceil(HALF_WIDTH / width))
    left = np.arange(panels) * width
    right = np.concatenate([(left[:, None] + (x[None, :] + 1) * (width / 2)).ravel()])
    z = np.concatenate([-right[::-1], right]).astype(LD)
    weights = np.tile(lam * (width / 2), panels)
    w = np.concatenate([weights[::-1], weights]).astype(LD)
    sw = np.sqrt(w * np.exp(-z * z / 2) / np.sqrt(2 * np.arccos(LD(-1))))
    G = np.empty((K + 1, len(z)), dtype=LD)
    G[0] = sw
    if K:
        G[1] = z * sw
    roots = np.sqrt(np.arange(K + 2).astype(LD))
    for k in range(1, K):
        G[k + 1] = (z * G[k] - roots[k] * G[k - 1]) / roots[k + 1]
    return z.astype(float), G.astype(float)


def split_rule(fn: Callable, variances: np.ndarray, K: int, width: float,
               nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(α̃ (V, K+1), S̃ (V,), ‖F‖ per row) of φ = ``fn`` at ``variances`` by the split rule."""
    z, G = split_basis(K, width, nodes)
    sw = G[0]
    root = np.sqrt(np.clip(variances, 0.0, None))
    with np.errstate(all="ignore"):
        F = np.broadcast_to(np.asarray(fn(root[:, None] * z), dtype=float), (len(root), len(z))) * sw
    square = np.einsum("ij,ij->i", F, F)
    half = len(z) // 2                       # the nodes are symmetric: z_{half+i} = −z_{half−1−i}
    right, left = F[:, half:], F[:, half - 1::-1]
    even, odd = folded_basis(K, width, nodes)
    alpha = np.empty((len(root), K + 1))
    with one_blas_thread():                  # h_k(−z) = (−1)^k h_k(z): even orders read F(z) + F(−z), odd F(z) − F(−z)
        alpha[:, 0::2] = (right + left) @ even
        alpha[:, 1::2] = (right - left) @ odd
    return alpha, square, np.sqrt(square)


@lru_cache(maxsize=32)
def folded_basis(K: int, width: float, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The even and odd orders' rows of :func:`split_basis` on the nodes z ≥ 0, transposed and contiguous
    ((n/2, ⌈(K+1)/2⌉) and (n/2, ⌊(K+1)/2⌋)): the parity fold's factors."""
    z, G = split_basis(K, width, nodes)
    half = len(z) // 2
    return np.ascontiguousarray(G[0::2, half:].T), np.ascontiguousarray(G[1::2, half:].T)


def one_blas_thread():
    """A context with BLAS on one thread (as :func:`.hermite.one_thread`: small products, bits that do
    not depend on the thread count)."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


def split_coefficients(fn: Callable, variances, K: int, width: float) -> tuple[np.ndarray, ...]:
    """The fields of :class:`.hermite.Coefficients` by the split rule (module doc), in order: α̃, the
    tail T(K) ≤ S̃ − Σα̃² plus the rules' differences, ‖α − α̃‖₂, ‖α̃‖, S̃ and its error,
    max_k |α_k − α̃_k| — with the coarse rule (:data:`COARSE_NODES` per panel) for the error estimate."""
    a = np.asarray(variances, dtype=float).ravel()
    alpha, S, norm_f = split_rule(fn, a, K, width, NODES)
    coarse, S1, _ = split_rule(fn, a, K, width, COARSE_NODES)
    floor = SPLIT_COEFF_ROUNDING * norm_f
    diff = alpha - coarse
    quad = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    err = quad + np.sqrt(K + 1.0) * floor
    kept = np.einsum("ij,ij->i", alpha, alpha)
    tail = np.clip(S - kept, 0.0, None) + np.abs(S - S1) + 2 * err * np.sqrt(kept) + err ** 2 + 16 * EPS * S
    sup = np.max(np.abs(diff), axis=1, initial=0.0) + floor
    return alpha, tail, err, np.sqrt(kept), S, np.abs(S - S1) + 4 * EPS * S, sup

