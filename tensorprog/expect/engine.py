"""The expectation engine: E[f] over centred jointly Gaussian symbols and independent laws.

``expect(expr, gaussians, cov, laws, *, exact=True, budget=DEFAULT)`` reduces E[expr]
(:mod:`.reduce`) before computing anything:

1. linearity over the top-level sum, and factorisation of every product into factors
   over independent groups of base variables (blocks of Σ, each non-Gaussian law):
   E[f(x) g(y)] = E f(x) · E g(y);
2. Dirac masses δ(w·z + h) are conditioned away (``linalg.condition``);
3. a factor odd in one independent symmetric group has mean 0;
4. closed forms (method ``"exact"``): polynomials by Wick and the law moments, finite
   sums over Rademacher values, the Gaussian rules of :mod:`.exact` (arc-cosine,
   arcsine, MGF, Dirac), and polynomial × sign for one continuous law;
5. whatever is left becomes a numeric *job* (:mod:`.numeric`): Gauss quadrature in
   low dimension, randomized QMC beyond; jobs over the same law share one grid.
The result is Σ (exact coefficients) × Π (jobs); its error is the first-order
propagation Σ_k |∂F/∂J_k|·err_k of the jobs' reported errors.  A closed form in free
parameters of ``cov`` is returned simplified, with ``value`` NaN.

``expect_many`` shares the numeric grids of several expressions; :func:`.batch.expect_batch`
(built on this module) evaluates one expression for a stack of covariance matrices.

Resource limits: one :class:`.budget.Budget` (fields reached are named in ``Estimate.budget``):
``tol`` is the target error of the numeric parts, ``max_expand_size`` bounds the symbolic
expansion a closed form may need (beyond it the expectation goes to numerics),
``max_quad_points`` the grid of one quadrature rule (beyond it QMC takes over),
``max_qmc_points`` the QMC sample of one job, and ``seed`` seeds the QMC rules.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

from .budget import DEFAULT, Budget
from .laws import Law, as_number
from .linalg import Matrix
from .numeric import JobResult, numeric_expect
from .reduce import Ctx, Engine
from ..symbolic.heads import AbsF, LeakyRelu, Relu, Sign, Step
from ..symbolic.bivariate import Phi2
from ..symbolic.rounding import NoRoundingRule, value_and_error

__all__ = ["Law", "Estimate", "expect", "expect_many"]


@dataclass(frozen=True)
class Estimate:
    """E[f] with an honest bound on |value − truth| and how it was obtained.

    ``budget`` names the :class:`.budget.Budget` fields whose limit this estimate reached:
    ``"max_quad_points"`` / ``"max_qmc_points"`` when a numeric part stopped at its grid /
    sample budget with its error above the target ``tol``, ``"max_expand_size"`` when a
    closed form was not attempted because the symbolic expansion would exceed its bound
    (the value is then numeric, at the stated error).  ``heavy_tail`` is True when a QMC
    part looks like an integrand of infinite variance: its error bar is then unreliable."""
    value: float
    error: float
    method: str                  # "exact" | "series" | "quadrature" | "qmc"
    exact: sp.Expr | None        # the closed form when method == "exact"
    budget: tuple[str, ...] = ()
    heavy_tail: bool = False


def _setup(exprs: Sequence, gaussians: Sequence, cov: object, laws: Mapping) -> tuple[list, Ctx]:
    """Validate the inputs; normal laws join the Gaussians (block-diagonally)."""
    gaussians = tuple(gaussians)
    if len(set(gaussians)) != len(gaussians) or not all(isinstance(g, sp.Symbol) for g in gaussians):
        raise ValueError("gaussians must be distinct sympy Symbols")
    if isinstance(cov, sp.MatrixBase):
        S = cov
    else:                                   # numbers only: never parse strings
        arr = np.asarray(cov, dtype=object)
        arr = arr.reshape(0, 0) if arr.size == 0 else arr
        if arr.ndim != 2:
            raise ValueError(f"cov must be a square matrix, got shape {arr.shape}")
        S = sp.Matrix(arr.shape[0], arr.shape[1], [as_number(v) for v in arr.ravel()])
    if S.shape != (len(gaussians), len(gaussians)):
        raise ValueError(f"cov has shape {S.shape}, expected {(len(gaussians),) * 2}")
    if any(not (S[i, j] - S[j, i]).equals(0) for i in range(S.rows) for j in range(i)):
        raise ValueError("cov must be symmetric")
    for u, law in laws.items():
        if not isinstance(law, Law) or u in gaussians or not isinstance(u, sp.Symbol):
            raise ValueError(f"bad law entry {u}: {law}")
    normal = [u for u, law in laws.items() if law.gaussian]
    if normal:
        n0 = len(gaussians)
        extra = [as_number(laws[u].var) for u in normal]
        S = sp.diag(S, *extra) if n0 else sp.diag(*extra)
        gaussians = gaussians + tuple(normal)
    others = tuple(sorted(((u, law) for u, law in laws.items() if not law.gaussian),
                          key=lambda t: str(t[0])))
    known = set(gaussians) | set(laws)
    out = []
    for e in exprs:
        e = as_number(e)
        extra = e.free_symbols - known
        if extra:
            raise ValueError(f"{e} contains {sorted(map(str, extra))}, which are neither Gaussians nor laws")
        out.append(e)
    return out, Ctx(gaussians, Matrix(S), others)


def expect_many(exprs: Sequence[sp.Expr], gaussians: Sequence[sp.Symbol], cov: sp.Matrix,
                laws: Mapping[sp.Symbol, Law] = {}, *, exact: bool = True,
                budget: Budget = DEFAULT) -> list[Estimate]:
    """E[f] for each f in exprs (same law); numeric parts share their quadrature grids.

    ``exact=False`` skips the closed forms (but still factorises, uses symmetry and
    conditions Dirac masses).  ``budget.tol`` is the target of the reported error, absolute
    (relative for values above 1); ``budget.max_qmc_points`` caps the QMC sample per job,
    ``budget.max_quad_points`` the grid of one quadrature rule, ``budget.max_expand_size``
    the symbolic expansion (``analysis.expanded_size``) tried for a closed form.
    """
    exprs, ctx = _setup(exprs, gaussians, cov, laws)
    engine = Engine(exact, budget.max_expand_size)
    forms, refused = [], []
    for e in exprs:
        engine.expansion_refused = False
        forms.append(engine.E(e, ctx))
        refused.append(engine.expansion_refused)
    values = _run_jobs(engine.jobs, budget)
    out = []
    for F, r in zip(forms, refused):
        est = _combine(F, values)
        if r and est.method != "exact":          # the refused expansion cost exactness
            est = replace(est, budget=tuple(sorted(set(est.budget) | {"max_expand_size"})))
        out.append(est)
    return out


def _run_jobs(jobs: Mapping[tuple, sp.Dummy], budget: Budget) -> dict[sp.Dummy, JobResult]:
    """The numeric value of every job symbol; jobs over the same law (Gaussians, Σ, laws)
    go to ``numeric_expect`` together and share its grids."""
    values: dict[sp.Dummy, JobResult] = {}
    batches: dict[tuple, list] = {}
    for key, J in jobs.items():
        batches.setdefault(key[1:], []).append((key[0], J))
    for (gs, covf, laws), items in batches.items():
        covn = np.array(covf, dtype=float).reshape(len(gs), len(gs))
        results = numeric_expect([e for e, _ in items], gs, covn, laws, budget)
        values.update({J: r for (_, J), r in zip(items, results)})
    return values


def expect(expr: sp.Expr, gaussians: Sequence[sp.Symbol], cov: sp.Matrix,
           laws: Mapping[sp.Symbol, Law] = {}, *, exact: bool = True,
           budget: Budget = DEFAULT) -> Estimate:
    """E[expr] for centred Gaussians with covariance ``cov`` and independent ``laws``.

    Exact (sympy closed form) where a rule applies, otherwise numeric with an error
    estimate; see the module docstring.  Raises ValueError for unknown symbols, for
    a symbolic ``cov`` when no closed form exists, and for infinite Dirac products.
    """
    return expect_many([expr], gaussians, cov, laws, exact=exact, budget=budget)[0]


def _constant_heads(F: sp.Expr) -> sp.Expr:
    """Evaluate relu/step/sign/abs/leaky_relu of symbol-free arguments like √3 − 1."""
    def value(e: sp.Expr) -> sp.Expr:
        a = e.args[0]
        pos = bool(a > 0)
        if isinstance(e, Step):
            return sp.Integer(int(pos))
        if isinstance(e, Sign):
            return sp.sign(a)
        if isinstance(e, AbsF):
            return a if pos else -a
        if isinstance(e, LeakyRelu):
            return a if pos else e.args[1] * a
        return a if pos else sp.Integer(0)
    return F.replace(lambda e: isinstance(e, (Step, Sign, Relu, AbsF, LeakyRelu)) and e.args[0].is_number
                     and not e.args[0].free_symbols, value)


def _combine(F: sp.Expr, values: Mapping[sp.Dummy, JobResult]) -> Estimate:
    """The estimate of F(J_1, ...) from the jobs' values and errors."""
    F = _constant_heads(F)
    # a fixed order, so that errors sum to the same last digit in every process (a set's order
    # follows the per-process string hash)
    jobs = sorted((J for J in F.free_symbols if J in values), key=sp.default_sort_key)
    if not jobs:
        if F.free_symbols:                  # a formula in the parameters: tidy it up
            return Estimate(float("nan"), 0.0, "exact", sp.simplify(F) if sp.count_ops(F) < 400 else F)
        if F.has(sp.nan):
            return Estimate(float("nan"), float("nan"), "exact", sp.nan)
        if F.has(Phi2):                     # float64 on the tape, with its bound (not Φ₂ by mpmath at 30 digits)
            try:
                value, error = value_and_error(F, {})
                return Estimate(float(value), float(error), "exact", F)
            except NoRoundingRule:
                pass
        v = complex(F.evalf(30))
        return Estimate(v.real, 0.0, "exact", F)
    if F.free_symbols - set(jobs):
        raise ValueError(f"no closed form, and parameters {F.free_symbols - set(jobs)} remain")
    sub = {J: sp.Float(values[J].value, 20) for J in jobs}
    value = float(F.xreplace(sub).evalf(20))
    error = sum(abs(float(sp.diff(F, J).xreplace(sub).evalf(20))) * values[J].error for J in jobs)
    error += 1e-16 * abs(value)
    kinds = {values[J].method for J in jobs}
    method = next(m for m in ("qmc", "quadrature", "series") if m in kinds or m == "series")
    budget = tuple(sorted({b for J in jobs for b in values[J].budget}))
    return Estimate(value, error, method, None, budget, any(values[J].heavy_tail for J in jobs))
