"""The compiler's ledger of expectations: the law of the base variables and every E[·] over them.

Every expectation of the recurrence goes through :meth:`Ledger.E`, which caches it, records its
Estimate (method, error, resource limits reached) and the set of estimates each scalar rests
on.  The compile's interpretation (:mod:`.interpret`) chooses the route of each E[·] (linear
forms, the general route, a batch) and what the recurrence writes for it; the ledger has no
modes.  A scalar's error is then Σ over those estimates (``Interpretation.summarize``), and a function of
scalars f(c) has Σ_a |∂f/∂c_a|·err(c_a) instead (:meth:`Ledger.propagated_error`).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import sympy as sp

from .. import ir
from ..errors import TPValueError
from ..expect.budget import Budget
from ..expect.engine import Estimate, Law
from ..expect.shapes import Shapes
from ..symbolic.heads import Delta
from .batch import BatchEstimate
from .finiteness import Finiteness
from .hypotheses import Hypotheses
from .indices import IndexSet
from .result import LimitValue

if TYPE_CHECKING:
    from .interpret import Interpretation

#: float64 rounding charged to every expectation evaluated in floating point, relative to its value
#: and to the variances it was computed from: the inputs carry their own rounding, and the errors of
#: what a scalar rests on add up, so the floor grows with depth and magnitude
ROUNDING = 4 * float(np.finfo(float).eps)


def with_rounding(est: Estimate | BatchEstimate, scale: float | np.ndarray) -> Estimate | BatchEstimate:
    """``est`` (an Estimate or a BatchEstimate) with ROUNDING·(|value| + scale) added to its error:
    ``scale`` is the largest variance of the Gaussians it was computed from."""
    return replace(est, error=est.error + ROUNDING * (np.abs(est.value) + scale))


def largest_variance(cov: np.ndarray) -> float | np.ndarray:
    """max_i |C_ii| of a (k, k) covariance, or per item of a (P, k, k) batch (an elementwise maximum
    over the k diagonals: numpy's max along a short last axis is slow for large P)."""
    out = np.zeros(cov.shape[:-2])
    for i in range(cov.shape[-1]):
        out = np.maximum(out, np.abs(cov[..., i, i]))
    return out


class Ledger:
    """The probability space of a compilation and the expectations computed in it.

    * ``add_gaussian(sym, covs)``, ``add_law(sym, law)``: a new base variable (a centred
      Gaussian with its covariances with earlier ones, or an independent law);
    * ``E(expr, where, deps)``: E[expr], cached; adds the estimate's index to ``deps``;
    * ``record(expr, where, compute)``: an interpretation's route records its estimate;
    * ``result(value, deps, propagated)``: a scalar's :class:`LimitValue`;
    * ``propagated_error(e, f, at, errors)``: the error of a function of scalars;
    * ``estimates``: every estimate, in order (``deps`` holds indices into it).

    Each estimate is checked (``finiteness.estimate``, ``hypotheses.budget``) as it is recorded.
    """

    def __init__(self, program: ir.Program, budget: Budget, interpretation: Interpretation,
                 hypotheses: Hypotheses, finiteness: Finiteness) -> None:
        """``interpretation`` (:mod:`.interpret`) decides what the numbers are: how a covariance
        becomes a number, by which route E[·] is taken, what the recurrence writes for it."""
        self.program, self.budget, self.interpretation = program, budget, interpretation
        self.hypotheses, self.finiteness = hypotheses, finiteness
        self.cov: dict[tuple[sp.Symbol, sp.Symbol], sp.Expr] = {}
        self.laws: dict[sp.Symbol, Law] = {}
        self.estimates: list[Estimate] = []
        self._cache: dict[sp.Expr, int] = {}
        #: the non-zero covariances as floats (or arrays (P,) over a batch), {g: {h: Cov(g, h)}}, while
        #: they are all numbers (then expectations may go by linear forms); None once one is not
        self.cov_number: dict[sp.Symbol, dict[sp.Symbol, float | np.ndarray]] | None = {}
        self.shapes = Shapes()
        self.form_cov: dict[tuple[frozenset, frozenset], float | np.ndarray] = {}   # Cov of two linear forms

    # ---- the law
    def add_gaussian(self, sym: sp.Symbol, covs: Mapping[sp.Symbol, sp.Expr]) -> None:
        """A centred Gaussian base variable with Cov(sym, other) = covs[other] (itself included)."""
        for other, value in covs.items():
            self.cov[(sym, other)] = self.cov[(other, sym)] = value
            number = self.covariance_number(value)
            if self.cov_number is not None and number is not None:
                if np.any(number != 0):
                    self.cov_number.setdefault(sym, {})[other] = number
                    self.cov_number.setdefault(other, {})[sym] = number
            else:
                self.cov_number = None           # a symbolic covariance: the general route

    def covariance_number(self, value: sp.Expr) -> float | np.ndarray | None:
        """A covariance as a float (or an array (P,) over a batch); None if it is not a number."""
        return self.interpretation.covariance_number(value)

    def add_law(self, sym: sp.Symbol, law: Law) -> None:
        """A base variable independent of every other, with the given law."""
        self.laws[sym] = law

    # ---- expectations
    def E(self, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> sp.Expr:
        """E[expr] over the base variables it depends on, by the interpretation's route (cached).

        Records the estimate in ``deps`` (the error budget of what uses it) and returns its value
        as the interpretation writes it (a float, a closed form, a batch symbol)."""
        if expr not in self._cache:
            self._cache[expr] = self.interpretation.expect(self, expr, where, deps)
        index = self._cache[expr]
        deps.add(index)
        return self.interpretation.value(self.estimates[index], index)

    def index(self, expr: sp.Expr) -> int:
        """The index in ``estimates`` of E[expr], already taken by :meth:`E`."""
        return self._cache[expr]

    def form_cov_exprs(self, weights) -> dict[tuple[int, int], sp.Expr]:
        """{(i, j): Cov(form i, form j)} for i ≤ j as expressions of the base covariances (batch
        symbols): Σ_g Σ_h a_ig a_jh Σ_gh, what a replay of the batch evaluates (:mod:`.replay`)."""
        def coeff(c: float) -> sp.Expr:
            return sp.Integer(int(c)) if c in (1.0, -1.0) else sp.Float(c)
        out = {}
        for i, wi in enumerate(weights):
            for j in range(i, len(weights)):
                terms = [coeff(a * b) * self.cov[(g, h)] for g, a in wi.items() for h, b in weights[j].items()
                         if (g, h) in self.cov and self.cov[(g, h)] != 0]
                out[(i, j)] = sp.Add(*terms)
        return out

    def record(self, expr: sp.Expr, where: ir.Eqn, compute: Callable[[], Estimate]) -> int:
        """Run ``compute()`` (an expectation), check it against the hypotheses and budgets, and
        append it to the ledger; its index."""
        try:
            est = compute()
        except ValueError as err:
            raise TPValueError(f"cannot evaluate E[{expr}]: {err}", where.pos.line, where.pos.col,
                               self.program.file, self.program.source) from None
        self.finiteness.estimate(where, est)
        self.hypotheses.budget(where, est, self.budget)
        self.estimates.append(est)
        return len(self.estimates) - 1

    # ---- results
    def error_sum(self, deps: IndexSet):
        """Σ_{i in deps} err_i, the errors of the estimates ``deps`` summed."""
        return sum((self.estimates[i].error for i in deps), 0.0)

    def result(self, value: sp.Expr, deps: IndexSet, propagated: float | None = None) -> LimitValue:
        """The limit of a scalar of value ``value`` resting on the estimates ``deps``."""
        return self.interpretation.summarize(value, [self.estimates[i] for i in sorted(deps)], propagated)

    def propagated_error(self, e: ir.Scalar, f: sp.Expr, at: Mapping[sp.Symbol, sp.Expr],
                         errors: Mapping[sp.Symbol, float]) -> float:
        """Σ_a |∂f/∂c_a| · err(c_a): the error of f(c), a function of the scalar symbols c_a, at
        their limits ``at`` with errors ``errors``.  Infinite (with a [continuity] warning) where
        f jumps at, or within the error of, the arguments' limits.  Limits that are closed forms in
        param symbols (``--symbolic``) are taken at the params' values."""
        total = 0.0
        at = {s: self.interpretation.point(v) for s, v in at.items()}
        for s in at:
            slope = sp.diff(f, s)
            jumps = [d.args[0] for d in slope.atoms(Delta)
                     if abs(complex(sp.N(d.args[0].subs(at)))) <= 10 * sum(errors.values())]
            if jumps:                  # f jumps at (or within the error of) the arguments' limits
                self._jump(e, jumps, sum(errors.values()))
                return float("inf")
            slope = complex(sp.N(slope.subs(at)))
            total += abs(slope) * errors[s] if slope == slope else float("inf")
        return total

    def _jump(self, e: ir.Scalar, jumps: list[sp.Expr], error: float) -> None:
        """Warn: f(c) is discontinuous where c's limit lies, so f(c_n) need not converge to f(c̊)."""
        at = ", ".join(sorted({str(a) for a in jumps}))
        self.hypotheses.warn(e, "continuity", f"this scalar function jumps where its argument's limit lies "
                             f"({at} = 0 within the error {error:.1e}): finite-width values need not converge "
                             "to the value given, whose error is unbounded")
