"""One recurrence, many covariances: the compiler's batch mode (dataset kernels).

A kernel template is compiled once per *structure*; the numbers that vary over a
batch of P input pairs (the initial covariances, and every scalar computed from
them) are sympy symbols whose values are arrays of shape (P,).  Expectations
with a varying covariance go to ``expect.batch.expect_batch`` (one closed form evaluated
for all P, or one shared quadrature grid); those whose integrand itself carries a
varying coefficient (or a non-Gaussian law) fall back to one ``expect.engine.expect`` per
pair.  Every expectation is computed within the compile's ``Budget``.
"""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

from ..expect.batch import ClosedFormTrace, FormMemo, expect_batch, method_kinds
from ..expect.budget import Budget
from ..expect.engine import expect
from .accuracy import METHOD_RANK, VALUE_ROUNDING
from .result import LimitValue
from ..symbolic.evaluate import evaluate


#: where a number of a batch compile comes from, stated when it is made: ("input", g, i, j) (entry
#: (i, j) of group g's initial covariance), ("estimate", k) (estimate k's value), or
#: ("unrecorded", reason) (made in a way a replay does not describe)
Source = tuple


def input_source(group: int, i: int, j: int) -> Source:
    """Entry (i, j) of initial group ``group``'s covariance."""
    return ("input", group, i, j)


def estimate_source(index: int) -> Source:
    """The value of estimate ``index``."""
    return ("estimate", index)


def unrecorded(reason: str) -> Source:
    """A number that the replay record does not describe, and why."""
    return ("unrecorded", reason)


@dataclass(frozen=True)
class Note:
    """How an estimate of the batch was computed, for :mod:`.replay`: the closed form ``trace``
    over the covariance of its linear forms, ``cov`` {(i, j): Cᵢⱼ as an expression of batch
    symbols} for i ≤ j."""
    trace: ClosedFormTrace
    cov: Mapping[tuple[int, int], sp.Expr]
    size: int


@dataclass(frozen=True)
class BatchEstimate:
    """An ``Estimate`` for every item: values and errors (P,), the worst method of the batch
    (by ``METHOD_RANK``), the budgets reached and the heavy-tail flag over all items."""
    value: np.ndarray
    error: np.ndarray
    method: str
    exact: None = None
    budget: tuple[str, ...] = ()       # resource limits reached (as Estimate.budget)
    heavy_tail: bool = False
    trace: ClosedFormTrace | None = None   # every value by one closed form: how (for a replay)
    note: Note | None = None               # the trace over its linear forms' covariance (for a replay)

    def noted(self, note: Note | None) -> "BatchEstimate":
        """This estimate with how it was computed (None: not in a way a replay describes)."""
        return replace(self, note=note)


@dataclass(frozen=True)
class BatchRecord:
    """The record of a batch compile, for a replay on other covariances (:mod:`.replay`),
    assembled once at the end of the compile from the numbers as they were made:
    ``sources`` {batch symbol: its :data:`Source`}, ``constants`` ((source, value): the numbers
    the batch agreed on), ``notes`` {estimate index: how it was computed}, and ``unreplayable``:
    why no replay can be made from it (None: one can)."""
    sources: Mapping[sp.Symbol, Source]
    constants: tuple[tuple[Source, float], ...]
    notes: Mapping[int, Note]
    unreplayable: str | None = None


class Batch:
    """The batch of one compile: the initial covariances of the batched groups (P items each)
    and the symbols standing for numbers that vary over the items."""

    def __init__(self, covs: Mapping[int, np.ndarray]) -> None:
        self.covs = {g: np.asarray(c, dtype=float) for g, c in covs.items()}
        sizes = {c.shape[0] for c in self.covs.values()}
        if len(sizes) != 1:
            raise ValueError("every batched group needs the same number of items")
        self.P = sizes.pop()
        self.values: dict[sp.Symbol, np.ndarray] = {}
        self.made: list[tuple[sp.Expr, Source, float | None]] = []   # (number, its source, constant value)
        self.forms = FormMemo()                  # the closed forms found not to exist, for this compile

    def number(self, array: np.ndarray, source: Source) -> sp.Expr:
        """A constant if the batch agrees on it, else a fresh symbol carrying the array.
        ``source``: where the array comes from, stated by the caller when it makes it
        (:func:`input_source`, :func:`estimate_source`, or :func:`unrecorded`, which makes the
        batch unreplayable); the one place where a batch number is made and its source noted."""
        array = np.broadcast_to(np.asarray(array, dtype=float), (self.P,))
        if np.all(array == array[0]):
            out = sp.Float(float(array[0]))
            self.made.append((out, source, float(array[0])))
            return out
        sym = sp.Symbol(f"b_{len(self.values)}", real=True)
        self.values[sym] = np.array(array)
        self.made.append((sym, source, None))
        return sym

    def record(self, estimates: Sequence, unreplayable: str | None = None) -> BatchRecord:
        """The frozen record of the compile whose ``estimates`` are given: the sources of the
        numbers made, the constants agreed on, every estimate's note, and the first reason a replay
        cannot be made (``unreplayable``, a number made unrecorded, an estimate without a note)."""
        reasons = [unreplayable] if unreplayable else []
        reasons += [source[1] for _, source, _ in self.made if source[0] == "unrecorded"]
        reasons += [f"estimate {k} ({est.method}) was not computed in closed form over its linear forms"
                    for k, est in enumerate(estimates) if getattr(est, "note", None) is None]
        recorded = [(number, source, value) for number, source, value in self.made if source[0] != "unrecorded"]
        return BatchRecord(MappingProxyType({n: s for n, s, v in recorded if v is None}),
                           tuple((s, v) for _, s, v in recorded if v is not None),
                           MappingProxyType({k: est.note for k, est in enumerate(estimates)
                                             if getattr(est, "note", None) is not None}),
                           reasons[0] if reasons else None)

    def array(self, expr: sp.Expr) -> float | np.ndarray | None:
        """A number (float) or the batch's array (P,) for an expression of batch symbols; None
        for anything else (e.g. a symbolic param)."""
        if expr.is_number:
            return float(expr)
        return self.eval(expr) if expr.free_symbols <= self.values.keys() else None

    def eval(self, expr: sp.Expr) -> np.ndarray:
        """expr for every item (its batch symbols replaced by their arrays), shape (P,)."""
        expr = expr if isinstance(expr, sp.Basic) else sp.Float(float(expr))
        direct = self.scaled(expr)
        if direct is not None:
            return np.broadcast_to(direct, (self.P,))
        used = {s: self.values[s] for s in expr.free_symbols if s in self.values}
        value = evaluate(expr, used) if used else float(expr)
        return np.broadcast_to(np.asarray(value, dtype=float), (self.P,))

    def scaled(self, expr: sp.Expr) -> np.ndarray | None:
        """A batch symbol's array, or c times it for a number c that float64 holds (a double-precision
        Float, an integer): what :func:`evaluate`'s tape gives (one product, commutative), without compiling
        one for each covariance σ²·E[·] of a compile; None for any other expression."""
        if expr.is_Symbol:
            return self.values.get(expr)
        if expr.is_Mul and len(expr.args) == 2:
            c, s = expr.args
            exact = (c.is_Float and sp.Float(float(c)) == c) or (c.is_Integer and abs(int(c)) < 2 ** 53)
            if exact and s.is_Symbol and s in self.values:
                return self.values[s] * float(c)
        return None

    def expect(self, expr: sp.Expr, gauss: Sequence[sp.Symbol], cov: list[list[sp.Expr]],
               laws: Mapping, budget: Budget) -> BatchEstimate:
        """E[expr] for every item of the batch, within ``budget``."""
        d = len(gauss)
        covs = np.empty((self.P, d, d))
        for i in range(d):
            for j in range(i, d):
                covs[:, i, j] = covs[:, j, i] = self.eval(cov[i][j])
        return self.expect_covs(expr, gauss, covs, laws, budget)

    def expect_covs(self, expr: sp.Expr, gauss: Sequence[sp.Symbol], covs: np.ndarray,
                    laws: Mapping, budget: Budget) -> BatchEstimate:
        """E[expr] for every item, the Gaussians having covariance covs[p] (P, d, d) for item p."""
        coeffs = [s for s in expr.free_symbols if s in self.values]
        used_laws = {s: laws[s] for s in expr.free_symbols if s in laws}
        if coeffs or used_laws:
            return self._one_by_one(expr, gauss, covs, coeffs, used_laws, budget)
        res = expect_batch(expr, gauss, covs, budget=budget, forms=self.forms)
        return BatchEstimate(np.asarray(res.values, float), np.asarray(res.errors, float),
                             max(method_kinds(res.methods), key=METHOD_RANK.__getitem__), None, res.budget,
                             res.heavy_tail, res.form)

    def _one_by_one(self, expr: sp.Expr, gauss: Sequence[sp.Symbol], covs: np.ndarray,
                    coeffs: Sequence[sp.Symbol], laws: Mapping, budget: Budget) -> BatchEstimate:
        """One ``expect`` per item, its varying coefficients replaced by the item's values."""
        values, errors, methods = np.empty(self.P), np.empty(self.P), set()
        reached, heavy = set(), False
        for p in range(self.P):
            item = expr.subs({s: float(self.values[s][p]) for s in coeffs})
            est = expect(item, gauss, sp.Matrix(covs[p].tolist()), laws, exact=True, budget=budget)
            values[p], errors[p] = est.value, est.error
            methods.add(est.method)
            reached |= set(est.budget)
            heavy = heavy or est.heavy_tail
        return BatchEstimate(values, errors, max(methods, key=METHOD_RANK.__getitem__, default="exact"), None,
                             tuple(sorted(reached)), heavy)

    def summarize(self, value: sp.Expr, estimates: Sequence) -> LimitValue:
        """The limit value of a scalar for every item; its error is the sum of the errors of
        the estimates it rests on (plus rounding)."""
        v = np.array(self.eval(value))
        method = max((e.method for e in estimates), key=METHOD_RANK.__getitem__, default="exact")
        error = np.zeros(self.P)
        for e in estimates:                     # in place: a scalar at depth rests on many estimates
            error += e.error
        error += VALUE_ROUNDING * np.abs(v)
        return LimitValue(v, error, method, None)


def partial_derivative(f: sp.Expr, s: sp.Symbol) -> sp.Expr:
    """∂f/∂s, as ``sp.diff(f, s)`` writes it: a sum is differentiated term by term (its terms free
    of s give 0, which the sum drops), so only the terms holding s are visited — a scalar that
    sums many products (an NTK over L layers) has one symbol per factor."""
    if f.is_Add:
        return sp.Add(*[partial_derivative(t, s) for t in f.args if t.has(s)])
    if f.is_Mul:
        holding = [k for k, a in enumerate(f.args) if a.has(s)]
        if len(holding) == 1 and f.args[holding[0]] == s:     # linear in s: sympy's product rule, one term
            k = holding[0]
            return functools.reduce(operator.mul, f.args[:k] + (sp.S.One,) + f.args[k + 1:], sp.S.One)
    return sp.diff(f, s)


def substituted(expr: sp.Expr, at: Mapping[sp.Symbol, sp.Expr]) -> sp.Expr:
    """``expr.subs(at)`` with only the symbols of ``at`` that ``expr`` holds (subs visits the whole
    expression once per symbol given, in an order by the symbols alone, and one it does not hold
    changes nothing: the same expression, at a fraction of the cost)."""
    held = expr.free_symbols
    return expr.subs({s: v for s, v in at.items() if s in held})
