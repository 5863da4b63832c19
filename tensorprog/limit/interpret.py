"""Evaluation strategies of the limit compiler: what the numbers of a compile are.

The compiler derives the recurrence (docs/architecture.md, "The limit compiler"); it never asks
a mode flag what its numbers are.  Every question whose answer depends on the evaluation
strategy goes to the compile's one :class:`Interpretation`, a small object with one rule per
kind of number the compiler and the ledger make:

==========================  ===========================================================
question                    rule
==========================  ===========================================================
a constant of the program   :meth:`~Interpretation.constant`, :meth:`~Interpretation.leaf`
a matrix's σ² and rows/cols :meth:`~Interpretation.matrix_variance`
an initial covariance Σᵢⱼ   :meth:`~Interpretation.initial_cov`
a covariance as a number    :meth:`~Interpretation.covariance_number` (the linear-forms route)
E[expr]                     :meth:`~Interpretation.expect` (the ledger's routes), then
                            :meth:`~Interpretation.value` (what the recurrence writes)
a scalar's reported limit   :meth:`~Interpretation.summarize`, :meth:`~Interpretation.scalar_value`,
                            :meth:`~Interpretation.scalar_error`, :meth:`~Interpretation.point`
Haar products               :meth:`~Interpretation.haar_number`, :meth:`~Interpretation.haar_arithmetic`,
                            :meth:`~Interpretation.haar_tolerance`: when a residual is 0 (a
                            determined product) is decided here
a Ż coefficient             :meth:`~Interpretation.zero`: whether it is 0 (no Ż term)
the replay record           :meth:`~Interpretation.record` (a batch compile's; None otherwise)
==========================  ===========================================================

The strategies:

* :class:`Numbers` (the default): floats; expectations over linear forms with shapes' closed
  forms, quadrature, QMC (:mod:`..expect.forms`, :mod:`..expect.shapes`);
* :class:`Exact` (``symbolic=True``): constants as exact rationals, sympy closed forms kept;
* :class:`Params` (``--symbolic``): :class:`Exact` with params as symbols — initial covariances
  in param symbols, closed forms in them where they exist, numbers at their values elsewhere;
* :class:`Batched` (``batch_covs``): P initial covariances at once (dataset kernels); numbers
  that vary over the items are batch symbols whose values are arrays (:mod:`.batch`);
  :class:`Swept` is its variant for param sweeps (:mod:`.sweep`), whose numbers the replay does
  not record.

A sampling engine plugs in after the compile, as an interpreter of ``Compiled.recurrence``
(:mod:`.sample`); a new strategy of the compile itself is a subclass here answering the same
questions (the ledger's routes :func:`forms_route` and :func:`general_route` are public for it).
"""
from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from .. import ir
from ..expect.engine import Estimate, expect
from ..expect.forms import to_forms
from ..expect.linalg import approximate
from ..symbolic import functions as fnsym
from ..symbolic.dag import distinct_nodes
from .accuracy import VALUE_ROUNDING
from .batch import Batch, BatchEstimate, BatchRecord, Note, estimate_source, input_source, unrecorded
from .haar import Arithmetic
from .indices import IndexSet
from .ledger import largest_variance, with_rounding
from .params_expect import BIG_NUMBER, at_values, closed_form, large_numbers, number_at
from .result import LimitValue, summarize
from .values import by_value, holds_float, value_of

if TYPE_CHECKING:
    from .ledger import Ledger


class Interpretation:
    """The numbers of a compile (module doc): the default rules are those of :class:`Numbers`."""

    #: constants as exact rationals and closed forms kept (what ``Compiled.symbolic`` reports)
    exact: bool = False
    #: {param symbol: value} of the params left as symbols in expressions (empty: none)
    params: Mapping[sp.Symbol, float] = MappingProxyType({})
    #: the batch of a batched compile, else None
    batch: Batch | None = None

    # ---- constants
    def constant(self, value: float) -> sp.Expr:
        """A number of the program as sympy (exact rationals where :attr:`exact`)."""
        return fnsym.constant(float(value), self.exact)

    def leaf(self, node: ir.Const, program: ir.Program) -> sp.Expr:
        """A constant leaf of a function tree."""
        return fnsym.constant(node.value, self.exact)

    def matrix_variance(self, e: ir.Matrix, program: ir.Program) -> tuple[sp.Expr, sp.Expr]:
        """(σ², rows/cols) of a matrix."""
        return self.constant(e.dist.var), self.constant(program.dims[e.rows] / program.dims[e.cols])

    def initial_cov(self, group: int, spec) -> Callable[[int, int], sp.Expr]:
        """Entry (i, j) of an initial Gaussian group's covariance."""
        return lambda i, j: self.constant(spec.cov[i][j] if spec.cov else spec.var)

    # ---- expectations
    def covariance_number(self, value: sp.Expr) -> float | np.ndarray | None:
        """A covariance as a number (for the linear-forms route), None where it is not one."""
        return float(value) if value.is_number else None

    def expect(self, ledger: Ledger, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        """E[expr] recorded in the ledger; its index.  Linear forms while every covariance is a
        number, else the general route."""
        if ledger.cov_number is not None:
            return forms_route(ledger, expr, where, deps)
        return general_route(ledger, expr, where, self.closed_form, self.params)

    def closed_form(self, ledger: Ledger, expr: sp.Expr, gauss: list[sp.Symbol], cov: sp.Matrix,
                    laws: Mapping) -> Estimate:
        """The general route's rule: the engine with closed forms where it finds them."""
        return expect(expr, gauss, cov, laws, exact=True, budget=ledger.budget)

    def value(self, est: Estimate, index: int) -> sp.Expr:
        """What the recurrence writes for E[expr], estimate ``index``."""
        return sp.Float(est.value)

    # ---- scalars
    def scalar_value(self, value: sp.Expr) -> sp.Expr:
        """c̊ of a function of scalars, as built."""
        return value

    def scalar_error(self, propagate: Callable[[], float]) -> float | None:
        """The error of a function of scalars by sensitivity (``propagate()``), or None to sum the
        estimates' errors instead."""
        return propagate()

    def point(self, value):
        """A limit at the params' values (itself where there are no params)."""
        return value

    def summarize(self, value: sp.Expr, estimates: Sequence, propagated: float | None = None) -> LimitValue:
        """The limit of a scalar of value ``value`` resting on ``estimates``: its error is Σ of
        theirs (unit sensitivity), or ``propagated`` (Σ_a |∂f/∂c_a|·err(c_a), for a function of
        scalars) plus float rounding; its method the least exact of theirs; its closed form kept
        where :attr:`exact` and :meth:`formula` allow."""
        out = summarize(value, estimates, self.exact and self.formula(value, estimates), dict(self.params))
        if propagated is None:
            return out
        return LimitValue(out.value, propagated + VALUE_ROUNDING * (abs(out.value) + 1), out.method, out.exact)

    def formula(self, value: sp.Expr, estimates: Sequence) -> bool:
        """Whether a scalar of value ``value`` resting on ``estimates`` may claim a closed form
        (where :attr:`exact`)."""
        return True

    # ---- structure decided by values
    def zero(self, coeff: sp.Expr) -> bool:
        """Whether a Ż coefficient E[∂Z^x/∂Ẑ] is 0 (then the product has no Ż term from it)."""
        return coeff == 0

    def haar_number(self, value: float) -> float | sp.Expr:
        """A number of a Haar matrix's shape (its sides' weights)."""
        return float(value)

    def haar_arithmetic(self) -> Arithmetic:
        """The numbers of the Haar rule (:mod:`.haar`)."""
        return Arithmetic(float, sp.Float, False)

    def haar_tolerance(self, scale, spread, errors: Callable[[], float]):
        """Within what a Haar residual counts as 0 (the product is then determined): rounding at
        ``scale``, plus ``errors()`` (the errors of the inner products it rests on) times the
        coefficients' ``spread``."""
        return 64 * np.finfo(float).eps * np.abs(scale) + spread * errors()

    # ---- the record
    def record(self, estimates: Sequence) -> BatchRecord | None:
        """The replay record of the compile (:mod:`.replay`): only a batch compile has one."""
        return None


class Numbers(Interpretation):
    """Floats: closed forms where the engine finds them, quadrature and QMC elsewhere (the default)."""


class Exact(Interpretation):
    """Exact constants and closed forms (``symbolic=True``); a program lowered with its params as
    leaves (``trace=True``) is read through them (σ², dims, constants in the params).  A number
    known only by value (holding a Float) stays a value, never a guessed closed form (:mod:`.values`)."""
    exact = True

    def leaf(self, node: ir.Const, program: ir.Program) -> sp.Expr:
        expr = getattr(node.value, "expr", None) if program.leaves is not None else None
        return fnsym.constant(node.value, True) if expr is None else program.leaves.expr(expr)

    def matrix_variance(self, e: ir.Matrix, program: ir.Program) -> tuple[sp.Expr, sp.Expr]:
        var, ratio = super().matrix_variance(e, program)
        leaves = program.leaves
        if leaves is None:
            return var, ratio
        dims = [leaves.dims.get(w, self.constant(program.dims[w])) for w in (e.rows, e.cols)]
        return leaves.expr(leaves.matrices.get(e.var, var)), leaves.expr(dims[0] / dims[1])

    def covariance_number(self, value: sp.Expr) -> None:
        return None

    def expect(self, ledger: Ledger, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        return general_route(ledger, expr, where, self.closed_form, self.params)

    def closed_form(self, ledger: Ledger, expr: sp.Expr, gauss: list[sp.Symbol], cov: sp.Matrix,
                    laws: Mapping) -> Estimate:
        """The engine's closed form; but where the integrand or the covariance holds an exact
        constant of more than :data:`.BIG_NUMBER` nodes as a tree (built over many steps, as the
        sums of exp() of attention weights), the engine on the values of those constants and of
        every covariance entry but a rational (Floats): a closed form would hold them, too large
        to keep, and finding it multiplies them out.  No formula is kept then (exact None): what
        rests on it is computed from its value (:meth:`value`) and claims none (:meth:`formula`)."""
        expr, cov = by_value(expr), cov.applyfunc(by_value)
        big = BIG_NUMBER
        if not any(large_numbers(e, big) for e in (expr, *cov) if isinstance(e, sp.Basic)):
            return super().closed_form(ledger, expr, gauss, cov, laws)
        cov = cov.applyfunc(lambda e: e if e.is_Rational or not e.is_number else sp.Float(approximate(e).real))
        est = expect(at_values(expr, {}, big), gauss, cov, laws, exact=True, budget=ledger.budget)
        return replace(est, exact=None)

    def formula(self, value: sp.Expr, estimates: Sequence) -> bool:
        """Not where an estimate kept none (:meth:`closed_form`), nor where ``value`` holds an exact
        constant of more than :data:`.BIG_NUMBER` nodes (simplifying it takes minutes)."""
        return not any(e.method == "exact" and e.exact is None for e in estimates) and not (
            isinstance(value, sp.Basic) and large_numbers(value, BIG_NUMBER))

    def value(self, est: Estimate, index: int) -> sp.Expr:
        """The closed form; a number holding a Float, or no closed form, by value (:mod:`.values`)."""
        known_by_value = est.exact is None or (est.exact.is_number and holds_float(est.exact))
        return sp.Float(est.value) if known_by_value else est.exact

    def scalar_value(self, value: sp.Expr) -> sp.Expr:
        """As built; a number holding a Float (resting on a value) by value (:mod:`.values`), never
        a guessed closed form."""
        return value_of(value)

    def haar_number(self, value: float) -> sp.Expr:
        return self.constant(value)

    def haar_arithmetic(self) -> Arithmetic:
        return Arithmetic(lambda v: v, lambda v: v, True)

    def haar_tolerance(self, scale, spread, errors: Callable[[], float]):
        return 1e-13 * abs(float(scale)) if scale.is_number else 0


class Params(Exact):
    """:class:`Exact` with params kept as symbols (``--symbolic``): ``covs`` {group: its covariance
    in param symbols}, ``values`` {symbol: value}.  E[expr] is a closed form in the params where
    there is one (:func:`.params_expect.closed_form`: the integrand's covariance entries and param
    sub-expressions as atoms), else (none, too large, or resting on an expectation without one) a
    number at their values by the linear-form route, with no closed form claimed; a scalar resting
    on such a number claims none either."""

    def __init__(self, covs: Mapping[int, sp.Matrix], values: Mapping[sp.Symbol, float]) -> None:
        self.covs = dict(covs)
        self.params = dict(values)
        #: the estimates with no closed form in the params (what rests on them takes the numbers route)
        self.numbers = IndexSet()

    def initial_cov(self, group: int, spec) -> Callable[[int, int], sp.Expr]:
        if group in self.covs:
            return lambda i, j: self.covs[group][i, j]
        return super().initial_cov(group, spec)

    def covariance_number(self, value: sp.Expr) -> float | None:
        """A covariance at the params' values (the linear-form route of the numbers)."""
        return number_at(value, self.params) if self.params else None

    def expect(self, ledger: Ledger, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        if not self.params:
            return super().expect(ledger, expr, where, deps)
        if not deps.bits & self.numbers.bits:
            gauss = [s for s in sorted({n for n in distinct_nodes(expr) if n.is_Symbol}, key=sp.default_sort_key)
                     if s not in ledger.laws and s not in self.params]
            est = closed_form(expr, gauss, lambda a, b: ledger.cov.get((a, b), 0), ledger.laws, self.params,
                              ledger.budget)
            if est is not None:
                index = ledger.record(expr, where, lambda: est)
                if est.exact is None:
                    self.numbers.add(index)
                return index
        index = forms_route(ledger, at_values(expr, self.params), where, deps)
        ledger.estimates[index] = replace(ledger.estimates[index], exact=None)
        self.numbers.add(index)
        return index

    def point(self, value):
        return value.subs(self.params) if self.params and isinstance(value, sp.Basic) else value

    def formula(self, value: sp.Expr, estimates: Sequence) -> bool:
        return super().formula(value, estimates) and not (self.params and any(e.exact is None for e in estimates))


class Batched(Interpretation):
    """P initial covariances at once: ``covs`` {group: array (P, k, k)} (a dataset kernel's pairs).
    Numbers that vary over the items are symbols of the :class:`.Batch` carrying their arrays, each
    made with its source, from which :meth:`record` assembles the replay record."""

    def __init__(self, covs: Mapping[int, np.ndarray]) -> None:
        self.batch = Batch(covs)

    def initial_cov(self, group: int, spec) -> Callable[[int, int], sp.Expr]:
        if group in self.batch.covs:
            covs = self.batch.covs[group]
            return lambda i, j: self.batch.number(covs[:, i, j], input_source(group, i, j))
        return super().initial_cov(group, spec)

    def covariance_number(self, value: sp.Expr) -> float | np.ndarray | None:
        return self.batch.array(value)

    def expect(self, ledger: Ledger, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> int:
        if ledger.cov_number is not None:
            return forms_route(ledger, expr, where, deps, self.batch)
        return batch_route(ledger, expr, where, self.batch)

    def value(self, est: BatchEstimate, index: int) -> sp.Expr:
        return self.batch.number(est.value, estimate_source(index))

    def scalar_error(self, propagate: Callable[[], float]) -> None:
        return None

    def summarize(self, value: sp.Expr, estimates: Sequence, propagated=None) -> LimitValue:
        out = self.batch.summarize(value, estimates)
        if propagated is None:
            return out
        return LimitValue(out.value, propagated + VALUE_ROUNDING * (np.abs(out.value) + 1), out.method, out.exact)

    def haar_arithmetic(self) -> Arithmetic:
        source = unrecorded("a Haar rule's coefficient")
        return Arithmetic(self.batch.array, lambda a: self.batch.number(a, source), False)

    def record(self, estimates: Sequence) -> BatchRecord:
        return self.batch.record(estimates)


class Swept(Batched):
    """The batch of a param sweep (:mod:`.sweep`): P points, the initial covariances of its varying
    groups (possibly none); the replay does not record a sweep."""

    def __init__(self, covs: Mapping[int, np.ndarray], size: int) -> None:
        super().__init__(covs or {-1: np.zeros((size, 1, 1))})
        self.batch.covs = {g: c for g, c in self.batch.covs.items() if g >= 0}

    def record(self, estimates: Sequence) -> BatchRecord:
        return self.batch.record(estimates, unreplayable="a param sweep")


# ---- the ledger's routes for E[expr]
def general_route(ledger: Ledger, expr: sp.Expr, where: ir.Eqn,
                  rule: Callable[[Ledger, sp.Expr, list, sp.Matrix, Mapping], Estimate],
                  params: Mapping[sp.Symbol, float]) -> int:
    """E[expr] over the Gaussians it depends on with their sympy covariance (the symbols of
    ``params`` are constants, not Gaussians), by ``rule``."""
    syms = sorted(expr.free_symbols, key=sp.default_sort_key)
    gauss = [s for s in syms if s not in ledger.laws and s not in params]
    cov = sp.Matrix(len(gauss), len(gauss), lambda i, j: ledger.cov.get((gauss[i], gauss[j]), 0))
    laws = {s: ledger.laws[s] for s in syms if s in ledger.laws}
    return ledger.record(expr, where, lambda: rule(ledger, expr, gauss, cov, laws))


def batch_route(ledger: Ledger, expr: sp.Expr, where: ir.Eqn, batch: Batch) -> int:
    """E[expr] for every item with sympy covariances evaluated on the batch's arrays (a batch
    whose covariances are not all numbers; no replay record describes it)."""
    gauss = [s for s in sorted(expr.free_symbols, key=sp.default_sort_key)
             if s not in ledger.laws and s not in batch.values]
    cov = [[ledger.cov.get((a, b), 0) for b in gauss] for a in gauss]
    variances = [np.abs(batch.eval(cov[i][i])) for i in range(len(gauss))]
    scale = np.maximum.reduce(variances) if variances else np.zeros(batch.P)
    return ledger.record(expr, where, lambda: with_rounding(
        batch.expect(expr, gauss, cov, ledger.laws, ledger.budget), scale))


def forms_route(ledger: Ledger, expr: sp.Expr, where: ir.Eqn, deps: IndexSet, batch: Batch | None = None) -> int:
    """E[expr] over the linear forms it sees (:mod:`..expect.forms`), for numeric covariances
    (arrays over a ``batch``: then the estimate carries its :class:`.Note` for a replay).

    The forms' covariance C = A Σ Aᵀ may drift below PSD by the errors of the estimates its
    entries rest on (at most Σ_{deps} err, times (Σ_g |a_g|)² for a form a·g)."""
    symbols = {node for node in distinct_nodes(expr) if node.is_Symbol}     # linear in the DAG
    skip = ledger.laws.keys() | (batch.values.keys() if batch else set())
    forms = to_forms(expr, frozenset(symbols - skip), lambda g: ledger.cov_number.get(g, {}), ledger.form_cov)
    laws = {s: ledger.laws[s] for s in symbols if s in ledger.laws}
    scale = largest_variance(forms.cov)
    if batch is not None:
        covs = np.broadcast_to(forms.cov, (batch.P,) + forms.cov.shape[-2:])

        def compute() -> BatchEstimate:
            est = with_rounding(batch.expect_covs(forms.expr, forms.coords, covs, laws, ledger.budget), scale)
            return est.noted(Note(est.trace, ledger.form_cov_exprs(forms.weights), len(forms.coords))
                             if est.trace is not None else None)
        return ledger.record(expr, where, compute)

    def drift() -> float:
        spread = max((sum(abs(c) for c in w.values()) ** 2 for w in forms.weights), default=0.0)
        return spread * ledger.error_sum(deps)
    return ledger.record(expr, where, lambda: with_rounding(ledger.shapes.expect(
        forms.expr, forms.coords, forms.cov, laws, ledger.budget, drift), float(scale)))
