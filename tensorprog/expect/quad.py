"""Quadrature rules of the expectation engine (no Python loop over points).

All rules integrate g(t) p(t) for coordinates t with independent densities p
(standard normal after whitening Σ = L Lᵀ, or a law of ``laws``), at increasing
orders n (ratio ≤ 1.5); the error estimate is d = |Q_n − Q_{n'}| for the previous
order n' (inflated when successive d's shrink slowly), which bounds the error of Q_n
whenever the rule converges geometrically (for piecewise-analytic integrands it
overestimates it by orders of magnitude):

* ``piecewise_1d``: composite Gauss–Legendre on the truncated support, split at the
  density's scale anchors and at every zero of the kink arguments (relu, step, abs,
  sign, max, min...), found by sign changes on a fine grid and bisection. A
  piecewise-analytic integrand thus converges exponentially.
* ``iterated_2d``: the same in two coordinates, where kinks are lines
  a₁t₁ + a₂t₂ + c = 0: the inner integral is split where each line crosses it, the
  outer one at vertical lines and at pairwise intersections (where the inner
  integral stops being smooth).
* ``tensor``: products of the 1D rules of ``Coord.rule`` (composite Gauss–Legendre
  with the density) for smooth integrands in a few dimensions.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from numpy.polynomial import legendre

from .laws import Coord, piecewise_rule

Fn = Callable[..., np.ndarray]          # coordinates (arrays) -> values (K, N)
EPS = np.finfo(float).eps
ORDERS = (4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)


def estimate_error(d: np.ndarray, d_prev: np.ndarray | None) -> np.ndarray:
    """Error of Q_n from d = |Q_n − Q_n'| and the previous difference d_prev: d itself
    if the differences shrink at least tenfold per order (geometric convergence, then
    Σ_{j>0} d_{n+j} ≤ d); otherwise (an unresolved singularity makes convergence slow
    and erratic) max(3d, d_prev)."""
    if d_prev is None:
        return d
    return np.where(d <= 0.1 * d_prev, d, np.maximum(3 * d, d_prev))


class QuadResult(tuple):
    """(values, errors, converged); ``budget_hit`` is True when the rule stopped because
    its next order would have exceeded the grid budget (a larger budget may converge)."""
    budget_hit: bool = False

    @classmethod
    def make(cls, values, errors, converged: bool, budget_hit: bool) -> "QuadResult":
        out = cls((values, errors, converged))
        out.budget_hit = budget_hit and not converged
        return out


def _refine(run: Callable[..., tuple[np.ndarray, np.ndarray] | None], target: Callable,
            budget: int, orders: Sequence[int] = ORDERS):
    """Run a rule at increasing orders n until the error estimate meets the target or
    the budget ends; the estimate is ``estimate_error`` and, at the last order, also
    |Q_n − Q_n^alt| for the rule on the interleaved splits (``Coord.anchors(alt=True)``).
    Returns a ``QuadResult`` (values, errors, converged), or None if not even two orders
    fit in the budget."""
    prev, d_prev, best, stopped = None, None, None, False
    for n in orders:
        out = run(n)
        if out is None:                                # the next order exceeds the budget
            stopped = True
            break
        q, floor = out
        if prev is not None:
            d = np.abs(q - prev)
            err = estimate_error(d, d_prev) + floor
            if np.all(err <= target(q)):
                err = _cross_check(run, n, q, err)
                if np.all(err <= target(q)):
                    return QuadResult.make(q, err, True, False)
            best = (n, q, err)
            d_prev = d
        prev = q
    if best is None:                                   # not even two orders fit
        return None
    n, q, err = best
    return QuadResult.make(q, _cross_check(run, n, q, err), False, stopped)


def _cross_check(run: Callable, n: int, q: np.ndarray, err: np.ndarray) -> np.ndarray:
    alt = run(n, alt=True)
    return err if alt is None else np.maximum(err, np.abs(q - alt[0]) + alt[1])


def find_roots(kink: Fn | None, grid: np.ndarray, iters: int = 60) -> np.ndarray:
    """Zeros and sign changes of each kink argument on a sorted grid, by bisection."""
    if kink is None:
        return np.array([])
    vals = np.asarray(kink(grid))
    s = np.sign(vals)
    rows, cols = np.nonzero(s[:, :-1] * s[:, 1:] < 0)
    exact = grid[np.nonzero(s == 0)[1]]
    lo, hi = grid[cols], grid[cols + 1]
    slo = s[rows, cols]
    for _ in range(iters):
        mid = (lo + hi) / 2
        sm = np.sign(np.asarray(kink(mid))[rows, np.arange(len(mid))]) if len(mid) else mid
        left = sm == slo
        lo, hi = np.where(left, mid, lo), np.where(left, hi, mid)
    return np.concatenate([exact, (lo + hi) / 2])


def _merge(points: np.ndarray, lo: float, hi: float) -> np.ndarray:
    pts = np.unique(np.clip(points[np.isfinite(points)], lo, hi))
    keep = np.concatenate([[True], np.diff(pts) > 1e-13 * np.maximum(1.0, np.abs(pts[1:]))])
    return pts[keep]


def piecewise_1d(f: Fn, coord: Coord, kink: Fn | None, target: Callable, budget: int):
    """E g(t), t ~ coord, split at the kinks (module doc)."""
    anchors = coord.anchors()
    grid = np.concatenate([np.linspace(a, b, 48, endpoint=False) for a, b in zip(anchors[:-1], anchors[1:])]
                          + [anchors[-1:]])
    roots = np.concatenate([coord.kinks(), find_roots(kink, grid)])
    pts = {alt: _merge(np.concatenate([coord.anchors(alt=alt), roots]), anchors[0], anchors[-1])
           for alt in (False, True)}

    def run(n: int, alt: bool = False):
        if (len(pts[alt]) - 1) * n > budget:
            return None
        t, w = piecewise_rule(pts[alt], n, coord.pdf)
        vals = f(t)
        return vals @ w, 8 * EPS * (np.abs(vals) @ np.abs(w))
    return _refine(run, target, budget)


def iterated_2d(f: Fn, c1: Coord, c2: Coord, lines: np.ndarray, target: Callable, budget: int):
    """E g(t₁, t₂) over independent coordinates with kinks on lines (rows a₁, a₂, c)."""
    A1, lo2, hi2 = c1.anchors(), c2.anchors()[0], c2.anchors()[-1]
    extra = [(0.0, 1.0, -k) for k in c2.kinks()] + [(1.0, 0.0, -k) for k in c1.kinks()]
    extra += [(0.0, 1.0, x) for x in c2.edges()]            # where c2's density jumps
    L = np.vstack([np.reshape(lines, (-1, 3)), np.reshape(extra, (-1, 3))])
    vert = np.abs(L[:, 1]) <= 1e-12 * (np.abs(L[:, 0]) + np.abs(L[:, 1]))
    outer = [A1, -L[vert & (L[:, 0] != 0), 2] / L[vert & (L[:, 0] != 0), 0]]
    nv = L[~vert]
    if len(nv) > 1:
        i, j = np.triu_indices(len(nv), 1)
        det = nv[i, 0] * nv[j, 1] - nv[j, 0] * nv[i, 1]
        ok = np.abs(det) > 1e-14 * (np.abs(nv[i, :2]).sum(1) * np.abs(nv[j, :2]).sum(1))
        outer.append((-nv[i, 2] * nv[j, 1] + nv[j, 2] * nv[i, 1])[ok] / det[ok])
    extra_outer = np.concatenate(outer[1:])

    def run(n: int, alt: bool = False):
        A2 = c2.anchors(alt=alt)
        pts1 = _merge(np.concatenate([c1.anchors(alt=alt), extra_outer]), A1[0], A1[-1])
        n1, n2 = (len(pts1) - 1) * n, (len(A2) - 1 + len(nv)) * n
        if n1 * n2 > budget:
            return None
        t1, w1 = piecewise_rule(pts1, n, c1.pdf)
        roots = np.clip(-(nv[:, 2] + np.outer(t1, nv[:, 0])) / nv[:, 1], lo2, hi2)
        B = np.sort(np.concatenate([np.broadcast_to(A2, (len(t1), len(A2))), roots], axis=1), axis=1)
        x, w = legendre.leggauss(n)
        half = (B[:, 1:] - B[:, :-1])[:, :, None] / 2
        t2 = B[:, :-1, None] + half * (x + 1)
        w2 = half * w * c2.pdf(t2)
        W = (w1[:, None, None] * w2).ravel()
        vals = f(np.broadcast_to(t1[:, None, None], t2.shape).ravel(), t2.ravel())
        return vals @ W, 8 * EPS * (np.abs(vals) @ np.abs(W))
    return _refine(run, target, budget)


def tensor(f: Fn, coords: Sequence[Coord], target: Callable, budget: int):
    """E g(t) by a tensor product of Gauss rules (smooth integrands)."""
    def run(n: int, alt: bool = False):
        rules = [c.rule(n, alt) for c in coords]
        if np.prod([len(r[0]) for r in rules]) > budget:
            return None
        grids = np.meshgrid(*[r[0] for r in rules], indexing="ij")
        W = np.ones(())
        for r in rules:
            W = np.multiply.outer(W, r[1])
        W = W.ravel()
        vals = f(*(g.ravel() for g in grids))
        return vals @ W, 8 * EPS * (np.abs(vals) @ np.abs(W))
    return _refine(run, target, budget)
