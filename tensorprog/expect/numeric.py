"""Numeric expectations over Gaussians (numeric Σ) and independent laws.

``numeric_expect(exprs, gaussians, cov, laws, budget)`` computes E[f] for each f over
z ~ N(0, Σ) (Σ numeric, possibly singular) and independent laws.  Σ = L Lᵀ by an
eigendecomposition keeping the modes with λ > 1e-12·λ_max, so z = Lξ with ξ standard
normal in r = rank Σ dimensions (x ≡ y, or Var = 0, cost nothing); ξ is then cut down to
the directions the integrands see through their linear forms (``linear_forms``).
Rademacher values are summed exactly (2^m combinations, m ≤ 10; beyond, all go to
QMC); the D continuous coordinates go to

* two Gaussians and an integrand f(x)·g(y) (no laws): the Mehler series (:mod:`.series`) where
  its bound meets the target, at most ``budget.series_terms`` terms;
* D = 1: ``piecewise_1d`` (split at the kinks);
* D = 2 with kinks whose arguments are piecewise affine: ``iterated_2d``;
* D ≤ 3 without kinks: a tensor product of the 1D rules;
* D ≥ 3, Gaussian coordinates only, and an integrand positively homogeneous in them (batchnorm):
  the radius is integrated exactly (:mod:`.radial`) and the rules below see the bounded
  angular part;
* beyond (or if quadrature does not reach the target within ``budget.max_quad_points``
  grid points): randomized QMC (at most ``budget.max_qmc_points`` samples, seeded by
  ``budget.seed``), keeping whichever error is smaller.

The target error of each E[f] is ``budget.tol``, absolute (relative for |E[f]| > 1).

The rules are deterministic: :data:`JOBS` keeps recent results by their whole input (integrands,
Gaussians, Σ, laws, budget), so an expectation met again — at another training step, or in a
second compile of the same program in one process — costs nothing and gives the same bits.

**Threads.**  The rows z_i = L_i·t of the whitened coordinates are BLAS matrix-vector products
(one per Gaussian, per QMC replicate and quadrature order); they run on one BLAS thread
(``hermite.one_thread``).  Their bits do not depend on the thread count (each z_i(t) is one dot
product of length rank Σ, which OpenBLAS does not split), but on a loaded machine its idle threads
spin: the 21-dimensional QMC jobs of dmft_tanh_depth3 took 0.5–2 CPU s each on two threads and
0.23 s on one, with the same bits.  (The quadrature sums ``vals @ w`` keep the default: a single
row of length ≥ 20000 is split across threads, so one thread would move their last bits.)

Each result is a ``JobResult``: value, error, method, the budgets that stopped it above
its target error (``"max_quad_points"``, ``"max_qmc_points"``) and whether QMC saw signs
of an infinite variance (``heavy_tail``: its error bar is then not to be trusted).
"""
from __future__ import annotations

import itertools
import warnings
from collections import OrderedDict
from typing import Callable, NamedTuple, Sequence

import numpy as np
import sympy as sp

from .analysis import affine_pieces, growth, kink_args, linear_forms
from .budget import Budget
from .laws import Coord, Law
from .qmc import qmc
from .quad import iterated_2d, piecewise_1d, tensor
from .radial import on_the_sphere
from .series import series_job
from ..symbolic.evaluate import compile_exprs
from ..symbolic.hermite import one_thread

MAX_SUMMED = 10                  # Rademacher variables summed exactly (2^10 combinations)
RADIAL_FROM = 3                  # Gaussian dimensions from which homogeneous integrands go on the sphere


class JobResult(NamedTuple):
    value: float
    error: float
    method: str                  # "series" | "quadrature" | "qmc"
    budget: tuple = ()           # Budget fields whose limit stopped it above the target error
    heavy_tail: bool = False     # QMC: the integrand looks like it has infinite variance


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
                   laws: Sequence[tuple[sp.Symbol, Law]], budget: Budget) -> list[JobResult]:
    """[JobResult(value, error, method, budget, heavy_tail)] of E[f] for each f (module doc)."""
    d = len(gaussians)
    cov = np.asarray(cov, dtype=float).reshape(d, d)
    lam, V = np.linalg.eigh(cov) if d else (np.zeros(0), np.zeros((0, 0)))
    scale = max(lam.max(initial=0.0), 1e-300)
    if lam.min(initial=0.0) < -1e-9 * scale:
        raise ValueError(f"covariance is not positive semi-definite (eigenvalue {lam.min():.3g})")
    many = sum(law.discrete for _, law in laws) > MAX_SUMMED      # then sample them by QMC
    cont = [(u, law) for u, law in laws if many or not law.discrete]
    growths = [max(growth(e, u) for e in exprs) for u, _ in cont]
    for (u, law), g in zip(cont, growths):
        if law.df is not None and g >= float(law.df):
            warnings.warn(f"E[...] may be infinite: the integrand grows like |{u}|^{g:g} and "
                          f"{u} ~ {law.family}(df={law.df}) has E|{u}|^{g:g} = ∞", RuntimeWarning)
    key = (tuple(exprs), tuple(gaussians), cov.tobytes(), tuple(laws), budget)
    return JOBS.get(key, lambda: _numeric(exprs, gaussians, cov, lam, V, laws, budget, many, growths))


def _numeric(exprs, gaussians, cov: np.ndarray, lam: np.ndarray, V: np.ndarray, laws, budget: Budget,
             many: bool, growths: list[float]) -> list[JobResult]:
    """The rules of the module doc for Σ = V diag(lam) Vᵀ (``many``: sample the Rademacher laws by
    QMC; ``growths``: of the integrands in each continuous law)."""
    scale = max(lam.max(initial=0.0), 1e-300)
    keep = np.nonzero(lam > 1e-12 * scale)[0][::-1]      # largest modes first (best for QMC)
    L = _seen_directions(exprs, gaussians, V[:, keep] * np.sqrt(lam[keep]))
    cont = [(u, law) for u, law in laws if many or not law.discrete]
    disc = [(u, law) for u, law in laws if law.discrete and not many]
    symbols = tuple(gaussians) + tuple(u for u, _ in cont) + tuple(u for u, _ in disc)
    gg = max([growth(e, g) for e in exprs for g in gaussians] + [0.0])
    coords = [Coord(None, gg)] * L.shape[1] + [Coord(law, g) for (u, law), g in zip(cont, growths)]
    d = len(gaussians)
    series = [None] * len(exprs) if laws or d != 2 else \
        [series_job(e, gaussians, cov, budget.tol, budget.series_terms) for e in exprs]
    if all(s is not None for s in series):
        return [JobResult(v, e, "series") for v, e in series]
    tape = compile_exprs(tuple(exprs), symbols)
    kinks = kink_args(exprs)
    ktape = compile_exprs(tuple(kinks), symbols) if kinks else None
    target = lambda q: budget.tol * np.maximum(1.0, np.abs(q))
    K = len(exprs)
    values, errors, methods = np.zeros(K), np.zeros(K), ["quadrature"] * K
    reached: list[set] = [set() for _ in range(K)]
    heavy = np.zeros(K, dtype=bool)
    combos = list(itertools.product(*[(-np.sqrt(float(law.var)), np.sqrt(float(law.var)))
                                      for _, law in disc]))
    for combo in combos:
        def args(*t: np.ndarray) -> list:
            n = np.shape(t[0]) if t else ()
            if L.shape[1]:                  # z_i = L_i·t, row by row (one product L @ t rounds differently)
                T = np.asarray(t[:L.shape[1]])
                with one_thread():          # (module doc: Threads)
                    gz = [L[i] @ T for i in range(d)]
            else:
                gz = [np.zeros(n) for _ in range(d)]
            return gz + list(t[L.shape[1]:]) + [np.full(n, v) for v in combo]

        def f(*t: np.ndarray) -> np.ndarray:
            return np.array(tape(*args(*t))).reshape(K, -1)

        def kf(*t: np.ndarray) -> np.ndarray:
            return np.array(ktape(*args(*t))).reshape(len(kinks), -1)
        if not combo and not cont and L.shape[1] >= RADIAL_FROM:
            f = on_the_sphere(f, L.shape[1], budget.seed) or f
        v, e, m, b, h = _dispatch(f, kf if kinks else None, coords, kinks, symbols, L, combo, len(cont),
                                  target, budget)
        values += v / len(combos)
        errors += e / len(combos)
        methods = [mm if mm == "qmc" else old for mm, old in zip(m, methods)]
        for k in range(K):
            reached[k] |= b[k]
        heavy |= h
    return [JobResult(float(v), float(e), m, tuple(sorted(b)), bool(h)) if s is None else JobResult(*s, "series")
            for v, e, m, b, h, s in zip(values, errors, methods, reached, heavy, series)]


class JobMemo:
    """The results of recent :func:`numeric_expect` calls, keyed by their whole input (the
    integrands, the Gaussians, Σ's bytes, the laws, the budget; the QMC seed is the budget's): the
    rules are deterministic, so a repeated call — the same expectation met again in one compile,
    at another step, or in a second compile of the program — returns the very same numbers.  At
    most ``size`` entries, least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.entries: OrderedDict[tuple, tuple[JobResult, ...]] = OrderedDict()

    def get(self, key: tuple, compute: Callable[[], list[JobResult]]) -> list[JobResult]:
        if key in self.entries:
            self.entries.move_to_end(key)
        else:
            self.entries[key] = tuple(compute())
            if len(self.entries) > self.size:
                self.entries.popitem(last=False)
        return list(self.entries[key])


#: numeric expectations kept for reuse (a result is a few numbers; the key's integrands are shared)
JOBS = JobMemo(4096)


def _dispatch(f, kf, coords, kinks, symbols, L, combo, ncont, target, budget: Budget):
    """Choose the rule for one Rademacher combination; fall back to QMC if needed.
    Returns (values, errors, methods, [budgets hit per output], heavy-tail flags)."""
    D, K = len(coords), len(target(np.zeros(1)))
    none = [set() for _ in range(K)]
    if D == 0:
        return f().ravel() * np.ones(K), np.zeros(K), ["quadrature"] * K, none, np.zeros(K, dtype=bool)
    res, tried = None, False
    continuous = not any(c.discrete for c in coords)     # (discrete coordinates: QMC)
    if continuous and D == 1:
        res, tried = piecewise_1d(f, coords[0], kf, target, budget.max_quad_points), True
    elif continuous and D == 2 and kinks:
        lines = _lines(kinks, symbols, L, combo, ncont)
        if lines is not None:
            res, tried = iterated_2d(f, coords[0], coords[1], lines, target, budget.max_quad_points), True
    elif continuous and D <= 3 and not kinks:
        res, tried = tensor(f, coords, target, budget.max_quad_points), True
    quad_stopped = tried and (res is None or res.budget_hit)
    if res is not None and (res[2] or np.all(res[1] <= 1e-7 * np.maximum(1.0, np.abs(res[0])))):
        hit = res[1] > target(res[0])                             # QMC would not do better
        return (res[0], res[1], ["quadrature"] * len(res[0]),
                [{"max_quad_points"} if quad_stopped and h else set() for h in hit], np.zeros(K, dtype=bool))
    q = qmc(f, coords, target, budget.max_qmc_points, budget.seed)
    if res is None:
        v, e, m = q.values, q.errors, ["qmc"] * len(q.values)
    else:
        better = q.errors < res[1]
        v, e = np.where(better, q.values, res[0]), np.where(better, q.errors, res[1])
        m = ["qmc" if b else "quadrature" for b in better]
    hit = e > target(v)
    reached = [({"max_quad_points"} if quad_stopped else set()) | ({"max_qmc_points"} if not q.converged else set())
               if h else set() for h in hit]
    heavy = np.asarray(q.heavy_tail) & np.array([mm == "qmc" for mm in m])
    return v, e, m, reached, heavy


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
