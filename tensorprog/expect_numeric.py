"""Numeric expectations over Gaussians (numeric Σ) and independent laws.

``numeric_expect(exprs, gaussians, cov, laws)`` computes E[f] for each f over
z ~ N(0, Σ) (Σ numeric, possibly singular) and independent laws.  Σ = L Lᵀ by an
eigendecomposition keeping the modes with λ > 1e-12·λ_max, so z = Lξ with ξ standard
normal in r = rank Σ dimensions (x ≡ y, or Var = 0, cost nothing); ξ is then cut down to
the directions the integrands see through their linear forms (``linear_forms``).
Rademacher values are summed exactly (2^m combinations, m ≤ 10; beyond, all go to
QMC); the D continuous coordinates go to

* D = 1: ``piecewise_1d`` (split at the kinks);
* D = 2 with kinks whose arguments are piecewise affine: ``iterated_2d``;
* D ≤ 3 without kinks: a tensor product of the 1D rules;
* beyond (or if quadrature does not reach the target within its budget of
  ``QUAD_BUDGET`` points): randomized QMC, keeping whichever error is smaller.
"""
from __future__ import annotations

import itertools
import warnings
from typing import Sequence

import numpy as np
import sympy as sp

from .expect_analysis import affine_pieces, growth, kink_args, linear_forms
from .expect_laws import Coord, Law
from .expect_qmc import qmc
from .expect_quad import iterated_2d, piecewise_1d, tensor
from .numeric import compile_exprs

QUAD_BUDGET = 2_000_000
MAX_SUMMED = 10                  # Rademacher variables summed exactly (2^10 combinations)


def _seen_directions(exprs, gaussians, L: np.ndarray) -> np.ndarray:
    """L·Q, Q an orthonormal basis of the directions of ξ (z = Lξ) that the integrands
    see: they depend on ξ only through A L ξ (A = ``linear_forms``), and the other
    directions of the standard normal ξ integrate to 1 (batchnorm: the batch mean)."""
    if not L.size:
        return L
    AL = linear_forms(exprs, gaussians) @ L
    if not AL.size:
        return L[:, :0]
    _, sv, Vt = np.linalg.svd(AL, full_matrices=False)
    return L @ Vt[sv > 1e-12 * max(sv.max(initial=0.0), 1e-300)].T


def numeric_expect(exprs: Sequence[sp.Expr], gaussians: Sequence[sp.Symbol], cov: np.ndarray,
                   laws: Sequence[tuple[sp.Symbol, Law]], *, tol: float = 1e-10,
                   max_qmc_points: int = 2 ** 20, seed: int = 0) -> list[tuple[float, float, str]]:
    """[(value, error, method)] of E[f] for each f (module doc)."""
    d = len(gaussians)
    cov = np.asarray(cov, dtype=float).reshape(d, d)
    lam, V = np.linalg.eigh(cov) if d else (np.zeros(0), np.zeros((0, 0)))
    scale = max(lam.max(initial=0.0), 1e-300)
    if lam.min(initial=0.0) < -1e-9 * scale:
        raise ValueError(f"covariance is not positive semi-definite (eigenvalue {lam.min():.3g})")
    keep = np.nonzero(lam > 1e-12 * scale)[0][::-1]      # largest modes first (best for QMC)
    L = _seen_directions(exprs, gaussians, V[:, keep] * np.sqrt(lam[keep]))
    many = sum(law.discrete for _, law in laws) > MAX_SUMMED      # then sample them by QMC
    cont = [(u, law) for u, law in laws if many or not law.discrete]
    disc = [(u, law) for u, law in laws if law.discrete and not many]
    symbols = tuple(gaussians) + tuple(u for u, _ in cont) + tuple(u for u, _ in disc)
    gg = max([growth(e, g) for e in exprs for g in gaussians] + [0.0])
    coords = [Coord(None, gg)] * L.shape[1] + [Coord(law, max(growth(e, u) for e in exprs))
                                                for u, law in cont]
    for (u, law), c in zip(cont, coords[L.shape[1]:]):
        if law.family == "student_t" and c.growth >= float(law.df):
            warnings.warn(f"E[...] may be infinite: the integrand grows like |{u}|^{c.growth:g} and "
                          f"{u} ~ student_t(df={law.df}) has E|{u}|^{c.growth:g} = ∞", RuntimeWarning)
    tape = compile_exprs(tuple(exprs), symbols)
    kinks = kink_args(exprs)
    ktape = compile_exprs(tuple(kinks), symbols) if kinks else None
    target = lambda q: tol * np.maximum(1.0, np.abs(q))
    K = len(exprs)
    values, errors, methods = np.zeros(K), np.zeros(K), ["quadrature"] * K
    combos = list(itertools.product(*[(-np.sqrt(float(law.var)), np.sqrt(float(law.var)))
                                      for _, law in disc]))
    for combo in combos:
        def args(*t: np.ndarray) -> list:
            n = np.shape(t[0]) if t else ()
            gz = [L[i] @ np.asarray(t[:L.shape[1]]) if L.shape[1] else np.zeros(n) for i in range(d)]
            return gz + list(t[L.shape[1]:]) + [np.full(n, v) for v in combo]

        def f(*t: np.ndarray) -> np.ndarray:
            return np.array(tape(*args(*t))).reshape(K, -1)

        def kf(*t: np.ndarray) -> np.ndarray:
            return np.array(ktape(*args(*t))).reshape(len(kinks), -1)
        v, e, m = _dispatch(f, kf if kinks else None, coords, kinks, symbols, L, combo, len(cont),
                            target, max_qmc_points, seed)
        values += v / len(combos)
        errors += e / len(combos)
        methods = [mm if mm == "qmc" else old for mm, old in zip(m, methods)]
    return [(float(v), float(e), m) for v, e, m in zip(values, errors, methods)]


def _dispatch(f, kf, coords, kinks, symbols, L, combo, ncont, target, max_qmc, seed):
    """Choose the rule for one Rademacher combination; fall back to QMC if needed."""
    D, K = len(coords), len(target(np.zeros(1)))
    if any(c.discrete for c in coords):
        q = qmc(f, coords, target, max_qmc, seed)
        return q[0], q[1], ["qmc"] * len(q[0])
    if D == 0:
        return f().ravel() * np.ones(K), np.zeros(K), ["quadrature"] * K
    res = None
    if D == 1:
        res = piecewise_1d(lambda t: f(t), coords[0], kf, target, QUAD_BUDGET)
    elif D == 2 and kinks:
        lines = _lines(kinks, symbols, L, combo, ncont)
        if lines is not None:
            res = iterated_2d(f, coords[0], coords[1], lines, target, QUAD_BUDGET)
    elif D <= 3 and not kinks:
        res = tensor(f, coords, target, QUAD_BUDGET)
    if res is not None and (res[2] or np.all(res[1] <= 1e-7 * np.maximum(1.0, np.abs(res[0])))):
        return res[0], res[1], ["quadrature"] * len(res[0])        # QMC would not do better
    q = qmc(f, coords, target, max_qmc, seed)
    if res is None:
        return q[0], q[1], ["qmc"] * len(q[0])
    better = q[1] < res[1]
    return (np.where(better, q[0], res[0]), np.where(better, q[1], res[1]),
            ["qmc" if b else "quadrature" for b in better])


def _lines(kinks, symbols, L, combo, ncont) -> np.ndarray | None:
    """Kink lines in the two integration coordinates, or None if not piecewise affine."""
    d, r = L.shape
    rows = []
    for g in kinks:
        pieces = affine_pieces(g, symbols)
        if pieces is None:
            return None
        for w, c in pieces:
            w = np.asarray(w)
            a = np.concatenate([w[:d] @ L if d else np.zeros(r), w[d:d + ncont]])
            c = c + float(np.dot(w[d + ncont:], combo)) if combo else c
            if np.any(a != 0):
                rows.append([a[0], a[1], c])
    return np.array(rows).reshape(-1, 3)
