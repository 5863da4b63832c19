"""The compiler's ledger of expectations: the law of the base variables and every E[·] over them.

Every expectation of the recurrence goes through :meth:`Ledger.E`, which caches it, records its
Estimate (method, error, resource limits reached) and the set of estimates each scalar rests
on.  A scalar's error is then Σ over those estimates (:func:`scalar_limit`), and a function of
scalars f(c) has Σ_a |∂f/∂c_a|·err(c_a) instead (:meth:`Ledger.propagated_error`).
"""
from __future__ import annotations

import dataclasses

from dataclasses import replace
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from .. import ir
from ..errors import TPValueError
from ..expect.budget import Budget
from ..expect.engine import Estimate, Law, expect
from ..expect.forms import to_forms
from ..expect.shapes import Shapes
from ..symbolic.dag import distinct_nodes
from ..symbolic.heads import Delta
from .batch import Batch, BatchEstimate
from .params_expect import at_values, closed_form, number_at
from .finiteness import Finiteness
from .hypotheses import Hypotheses
from .indices import IndexSet
from .accuracy import VALUE_ROUNDING
from .result import LimitValue, summarize

def scalar_limit(value: sp.Expr, estimates: Sequence[Estimate], *, symbolic: bool,
                 params: Mapping[sp.Symbol, float], batch: Batch | None,
                 propagated: float | None = None) -> LimitValue:
    """The limit of a scalar whose value is ``value``, resting on ``estimates``: its error is
    Σ of theirs (unit sensitivity), or ``propagated`` (Σ_a |∂f/∂c_a|·err(c_a), for a function
    of scalars) plus float rounding; its method is the least exact of theirs."""
    if batch is not None:
        return batch.summarize(value, estimates)
    out = summarize(value, estimates, symbolic, dict(params))
    if params and any(e.exact is None for e in estimates):     # a number at the params: no closed form
        out = replace(out, exact=None)
    if propagated is None:
        return out
    return LimitValue(out.value, propagated + VALUE_ROUNDING * (abs(out.value) + 1), out.method, out.exact)


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
    * ``result(value, deps, propagated)``: a scalar's :class:`LimitValue`;
    * ``propagated_error(e, f, at, errors)``: the error of a function of scalars;
    * ``estimates``: every estimate, in order (``deps`` holds indices into it).

    Each estimate is checked (``finiteness.estimate``, ``hypotheses.budget``) as it is recorded.
    """

    def __init__(self, program: ir.Program, budget: Budget, symbolic: bool, hypotheses: Hypotheses,
                 finiteness: Finiteness, batch: Batch | None = None,
                 param_values: Mapping[sp.Symbol, float] | None = None) -> None:
        self.program, self.budget, self.symbolic = program, budget, symbolic
        self.hypotheses, self.finiteness = hypotheses, finiteness
        self.batch = batch
        self.param_values = dict(param_values or {})
        self.cov: dict[tuple[sp.Symbol, sp.Symbol], sp.Expr] = {}
        self.laws: dict[sp.Symbol, Law] = {}
        self.estimates: list[Estimate] = []
        self._cache: dict[sp.Expr, int] = {}
        #: the estimates with no closed form in the params (what rests on them takes the numbers route)
        self.numbers = IndexSet()
        #: the non-zero covariances as floats (or arrays (P,) over a batch), {g: {h: Cov(g, h)}}, while
        #: they are all numbers (then expectations go by linear forms)
        self.cov_number: dict[sp.Symbol, dict[sp.Symbol, float | np.ndarray]] | None = \
            None if symbolic and not self.param_values else {}
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
        """A covariance as a float, or as the batch's array (P,); None if it is symbolic."""
        if self.batch is not None:
            return self.batch.array(value)
        if self.param_values:                  # params as leaves: the number at their values
            return number_at(value, self.param_values)
        return float(value) if value.is_number else None

    def add_law(self, sym: sp.Symbol, law: Law) -> None:
        """A base variable independent of every other, with the given law."""
        self.laws[sym] = law

    # ---- expectations
    def E(self, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> sp.Expr:
        """E[expr] over the base variables it depends on (exact where possible).

        Records the estimate in ``deps`` (the error budget of what uses it) and
        returns its value as sympy (the closed form in symbolic mode)."""
        if expr not in self._cache:
            self._cache[expr] = self._expect_params(expr, where, deps) if self.param_values else \
                self._expect_forms(expr, where, deps) if self.cov_number is not None else \
                self._expect_batch(expr, where) if self.batch else self._expect(expr, where)
        index = self._cache[expr]
        deps.add(index)
        est = self.estimates[index]
        if self.batch:
            return self.batch.number(est.value, ("estimate", index))
        return est.exact if est.exact is not None and self.symbolic else sp.Float(est.value)

    def index(self, expr: sp.Expr) -> int:
        """The index in ``estimates`` of E[expr], already taken by :meth:`E`."""
        return self._cache[expr]

    def _expect_batch(self, expr: sp.Expr, where: ir.Eqn) -> int:
        self.batch.replayable = False          # symbolic covariances: no record for a replay
        gauss = [s for s in sorted(expr.free_symbols, key=sp.default_sort_key)
                 if s not in self.laws and s not in self.batch.values]
        cov = [[self.cov.get((a, b), 0) for b in gauss] for a in gauss]
        variances = [np.abs(self.batch.eval(cov[i][i])) for i in range(len(gauss))]
        scale = np.maximum.reduce(variances) if variances else np.zeros(self.batch.P)
        return self._record(expr, where, lambda: with_rounding(
            self.batch.expect(expr, gauss, cov, self.laws, self.budget), scale))

    def _expect(self, expr: sp.Expr, where: ir.Eqn) -> int:
        syms = sorted(expr.free_symbols, key=sp.default_sort_key)
        gauss = [s for s in syms if s not in self.laws]
        cov = sp.Matrix(len(gauss), len(gauss), lambda i, j: self.cov.get((gauss[i], gauss[j]), 0))
        laws = {s: self.laws[s] for s in syms if s in self.laws}
        return self._record(expr, where, lambda: expect(expr, gauss, cov, laws, exact=True, budget=self.budget))

    def _expect_forms(self, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        """E[expr] over the linear forms it sees (:mod:`..expect.forms`), for numeric covariances
        (arrays over a batch).

        The forms' covariance C = A Σ Aᵀ may drift below PSD by the errors of the estimates its
        entries rest on (at most Σ_{deps} err, times (Σ_g |a_g|)² for a form a·g)."""
        symbols = {node for node in distinct_nodes(expr) if node.is_Symbol}     # linear in the DAG
        skip = self.laws.keys() | (self.batch.values.keys() if self.batch else set())
        forms = to_forms(expr, frozenset(symbols - skip), lambda g: self.cov_number.get(g, {}), self.form_cov)
        laws = {s: self.laws[s] for s in symbols if s in self.laws}
        scale = largest_variance(forms.cov)
        if self.batch:
            covs = np.broadcast_to(forms.cov, (self.batch.P,) + forms.cov.shape[-2:])
            index = self._record(expr, where, lambda: with_rounding(
                self.batch.expect_covs(forms.expr, forms.coords, covs, laws, self.budget), scale))
            self.batch.note(index, self.estimates[index], self.form_cov_exprs(forms.weights), len(forms.coords))
            return index

        def drift() -> float:
            spread = max((sum(abs(c) for c in w.values()) ** 2 for w in forms.weights), default=0.0)
            return spread * self.error_sum(deps)
        return self._record(expr, where, lambda: with_rounding(self.shapes.expect(
            forms.expr, forms.coords, forms.cov, laws, self.budget, drift), float(scale)))

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

    def _record(self, expr: sp.Expr, where: ir.Eqn, compute: Callable[[], Estimate]) -> int:
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

    def _expect_params(self, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        """``--symbolic`` with params as leaves: a closed form in them (:mod:`.params_expect`), else
        (none, too large, or resting on an expectation without one) the numbers at the params'
        values by the linear-form route, with no closed form claimed."""
        if not deps.bits & self.numbers.bits:
            est = closed_form(expr, [s for s in sorted({n for n in distinct_nodes(expr) if n.is_Symbol},
                                                       key=sp.default_sort_key)
                                     if s not in self.laws and s not in self.param_values],
                              lambda a, b: self.cov.get((a, b), 0), self.laws, self.param_values, self.budget)
            if est is not None:
                index = self._record(expr, where, lambda: est)
                if est.exact is None:
                    self.numbers.add(index)
                return index
        index = self._expect_forms(at_values(expr, self.param_values), where, deps)
        self.estimates[index] = dataclasses.replace(self.estimates[index], exact=None)
        self.numbers.add(index)
        return index

    # ---- results
    def error_sum(self, deps: IndexSet):
        """Σ_{i in deps} err_i, the errors of the estimates ``deps`` summed."""
        return sum((self.estimates[i].error for i in deps), 0.0)

    def result(self, value: sp.Expr, deps: IndexSet, propagated: float | None = None) -> LimitValue:
        """The limit of a scalar of value ``value`` resting on the estimates ``deps``."""
        return scalar_limit(value, [self.estimates[i] for i in sorted(deps)], symbolic=self.symbolic,
                            params=self.param_values, batch=self.batch, propagated=propagated)

    def propagated_error(self, e: ir.Scalar, f: sp.Expr, at: Mapping[sp.Symbol, sp.Expr],
                         errors: Mapping[sp.Symbol, float]) -> float:
        """Σ_a |∂f/∂c_a| · err(c_a): the error of f(c), a function of the scalar symbols c_a, at
        their limits ``at`` with errors ``errors``.  Infinite (with a [continuity] warning) where
        f jumps at, or within the error of, the arguments' limits.  Limits that are closed forms in
        param symbols (``--symbolic``) are taken at the params' values."""
        total = 0.0
        if self.param_values:
            at = {s: v.subs(self.param_values) if isinstance(v, sp.Basic) else v for s, v in at.items()}
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
