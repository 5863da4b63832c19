"""E[f] for one expression and many covariance matrices at once (e.g. all pairs of a dataset).

``expect_batch(expr, gaussians, covs)`` with ``covs`` of shape (P, d, d):

1. closed form: the covariance entries that vary over the batch become symbols
   c_ij (the others keep their common value), the engine derives E[f] once as a
   function of them, and ``numeric.evaluate`` computes it for all P at once; points
   where the generic formula is singular (e.g. 0/0 at ρ = ±1) are redone one by one;
2. otherwise, for a smooth integrand of d ≤ 3 Gaussians, one tensor rule in whitened
   coordinates ξ (z = L_p ξ, L_p from each Σ_p's eigendecomposition) serves the whole
   batch, refined until every entry meets the target (error as in ``expect_quad``);
3. anything else falls back to ``expect`` for each matrix.

The resource limits of ``expect`` (``max_qmc_points``, ``max_quad_points``,
``max_expand_size``) apply; pass a dict as ``info`` to learn which were hit
(``info["budget"]``, a sorted tuple of their names) and whether a QMC part looked
heavy-tailed (``info["heavy_tail"]``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import sympy as sp

from .engine import expect
from .laws import Coord, as_number
from .linalg import MAX_EXPAND_SIZE, Matrix
from .analysis import kink_args
from .quad import ORDERS, _estimate
from .reduce import Ctx, Engine
from ..symbolic.evaluate import compile_exprs, evaluate

QUAD_BUDGET = 2_000_000          # default max_quad_points: points of one rule; points × matrices per chunk


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal to rounding over the whole batch (a cheap probe of a few entries first)."""
    probe = slice(None, None, max(1, len(a) // 16))
    if not np.allclose(a[probe], b[probe], rtol=1e-12, atol=0):
        return False
    return np.allclose(a, b, rtol=1e-12, atol=0)


def _symbolic_cov(covs: np.ndarray) -> tuple[sp.Matrix, dict]:
    """A covariance with a symbol for each entry that varies over the batch."""
    P, d, _ = covs.shape
    S, values = sp.zeros(d, d), {}
    for i in range(d):
        for j in range(i, d):
            col = covs[:, i, j]
            if np.all(col == col[0]):
                S[i, j] = S[j, i] = as_number(float(col[0]))
                continue
            # entries equal over the whole batch share a symbol, so exact relations such as
            # x ≡ y (Cov = Var) stay visible to the closed form
            tied = next((s * c for c, v in values.items() for s in (1, -1) if _same(v, s * col)), None)
            if tied is None:
                tied = sp.Symbol(f"c_{i}_{j}", positive=(i == j), real=True)
                values[tied] = col
            S[i, j] = S[j, i] = tied
    return S, values


def expect_batch(expr: sp.Expr, gaussians: Sequence[sp.Symbol], covs: np.ndarray, *,
                 exact: bool = True, tol: float = 1e-10, max_qmc_points: int = 2 ** 20, seed: int = 0,
                 max_quad_points: int = QUAD_BUDGET, max_expand_size: float = MAX_EXPAND_SIZE,
                 info: dict | None = None, _retry: bool = True) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(values, errors, methods) of E[expr] for z ~ N(0, covs[p]), p = 0..P−1 (module doc)."""
    info = {} if info is None else info
    info.setdefault("budget", ())
    info.setdefault("heavy_tail", False)
    options = dict(tol=tol, max_qmc_points=max_qmc_points, seed=seed, max_quad_points=max_quad_points,
                   max_expand_size=max_expand_size)

    def note(budget=(), heavy=False):
        info["budget"] = tuple(sorted(set(info["budget"]) | set(budget)))
        info["heavy_tail"] = bool(info["heavy_tail"] or heavy)

    def one(c: np.ndarray):
        e = expect(expr, gaussians, sp.Matrix(c.tolist()), exact=exact, **options)
        note(e.budget, e.heavy_tail)
        return e
    covs = np.asarray(covs, dtype=float)
    gaussians = tuple(gaussians)
    P, d = covs.shape[0], len(gaussians)
    if covs.shape != (P, d, d):
        raise ValueError(f"covs has shape {covs.shape}, expected (P, {d}, {d})")
    if exact:
        S, values = _symbolic_cov(covs)
        engine = Engine(True, max_expand_size)
        try:
            F = engine.E(expr, Ctx(gaussians, Matrix(S), ()))
        except ValueError:
            F = None
        if engine.expansion_refused:
            note(("max_expand_size",))
        if F is not None and not engine.jobs:
            out = np.broadcast_to(evaluate(F, values) if values else float(F.evalf(20)), (P,)).copy()
            errs, methods = np.zeros(P), ["exact"] * P
            bad = np.nonzero(~np.isfinite(out))[0]
            if _retry and len(bad) > 1:      # the singular points as a batch of their own
                v, e, m = expect_batch(expr, gaussians, covs[bad], exact=exact, info=info, _retry=False,
                                       **options)
                out[bad], errs[bad] = v, e
                for k, p in enumerate(bad):
                    methods[p] = m[k]
                return out, errs, methods
            for p in bad:
                e = one(covs[p])
                out[p], errs[p], methods[p] = e.value, e.error, e.method
            return out, errs, methods
    if d <= 3 and not kink_args([expr]) and expr.free_symbols <= set(gaussians):
        res = _tensor_batch(expr, gaussians, covs, tol, max_quad_points)
        if res is not None:
            return res
    ests = [one(c) for c in covs]
    return (np.array([e.value for e in ests]), np.array([e.error for e in ests]), [e.method for e in ests])


def _rule(d: int, n: int, alt: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The d-dimensional tensor rule (points (d, N), weights (N,)) in standard normals."""
    x, w = Coord(None).rule(n, alt)
    xi = np.stack([g.ravel() for g in np.meshgrid(*[x] * d, indexing="ij")])
    W = np.ones(())
    for _ in range(d):
        W = np.multiply.outer(W, w)
    return xi, W.ravel()


def _apply(tape, L: np.ndarray, xi: np.ndarray, W: np.ndarray, ps: np.ndarray, budget: int = QUAD_BUDGET):
    """(Q, roundoff floor) for the matrices ps, in chunks that fit the budget."""
    q, floor = np.zeros(len(ps)), np.zeros(len(ps))
    chunk = max(1, budget // xi.shape[1])
    for start in range(0, len(ps), chunk):
        vals = tape(*np.einsum("pij,jn->ipn", L[ps[start:start + chunk]], xi))[0]
        q[start:start + chunk] = vals @ W
        floor[start:start + chunk] = 8 * np.finfo(float).eps * (np.abs(vals) @ W)
    return q, floor


def _tensor_batch(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, tol: float, budget: int = QUAD_BUDGET):
    """One tensor rule in whitened coordinates for all matrices; as in ``expect_quad``,
    orders grow until |Q_n − Q_n'| meets the target, then the rule on interleaved
    splits cross-checks Q_n.  None if some matrix does not converge within the budget."""
    P, d = covs.shape[0], len(gaussians)
    lam, V = np.linalg.eigh(covs)
    L = V * np.sqrt(np.clip(lam, 0.0, None))[:, None, :]           # (P, d, d), Σ_p = L_p L_pᵀ
    tape = compile_exprs((expr,), gaussians)
    values, errors, final = np.zeros(P), np.full(P, np.inf), np.zeros(P, dtype=int)
    prev, d_prev = np.zeros(P), np.full(P, np.inf)          # d_prev = ∞: no rate known yet
    todo = np.arange(P)
    for k, n in enumerate(ORDERS):
        if len(Coord(None).rule(n)[0]) ** d > budget or not len(todo):
            break
        q, floor = _apply(tape, L, *_rule(d, n), todo, budget)
        if k:
            diff = np.abs(q - prev[todo])
            errors[todo] = _estimate(diff, d_prev[todo]) + floor
            values[todo], final[todo], d_prev[todo] = q, n, diff
        prev[todo] = q
        todo = todo[errors[todo] > tol * np.maximum(1.0, np.abs(values[todo]))]
    if len(todo):
        return None
    for n in np.unique(final):
        ps = np.nonzero(final == n)[0]
        q_alt, floor = _apply(tape, L, *_rule(d, n, alt=True), ps, budget)
        errors[ps] = np.maximum(errors[ps], np.abs(values[ps] - q_alt) + floor)
    return values, errors, ["quadrature"] * P
