"""One recurrence, many covariances: the compiler's batch mode (dataset kernels).

A kernel template is compiled once per *structure*; the numbers that vary over a
batch of P input pairs (the initial covariances, and every scalar computed from
them) are sympy symbols whose values are arrays of shape (P,).  Expectations
with a varying covariance go to ``expect_batch`` (one closed form evaluated for
all P, or one shared quadrature grid); those whose integrand itself carries a
varying coefficient fall back to one ``expect`` per pair.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import sympy as sp

from ..expect.engine import expect
from ..expect.batch import expect_batch
from .result import LimitValue, _RANK
from ..symbolic.evaluate import evaluate


@dataclass(frozen=True)
class BatchEstimate:
    value: np.ndarray
    error: np.ndarray
    method: str
    exact: None = None
    budget: tuple[str, ...] = ()       # resource limits reached (as Estimate.budget)
    heavy_tail: bool = False


class Batch:
    def __init__(self, covs: Mapping[int, np.ndarray]) -> None:
        self.covs = {g: np.asarray(c, dtype=float) for g, c in covs.items()}
        sizes = {c.shape[0] for c in self.covs.values()}
        if len(sizes) != 1:
            raise ValueError("every batched group needs the same number of items")
        self.P = sizes.pop()
        self.values: dict[sp.Symbol, np.ndarray] = {}

    def number(self, array: np.ndarray) -> sp.Expr:
        """A constant if the batch agrees on it, else a fresh symbol carrying the array."""
        array = np.broadcast_to(np.asarray(array, dtype=float), (self.P,))
        if np.all(array == array[0]):
            return sp.Float(float(array[0]))
        sym = sp.Symbol(f"b_{len(self.values)}", real=True)
        self.values[sym] = np.array(array)
        return sym

    def eval(self, expr: sp.Expr) -> np.ndarray:
        expr = expr if isinstance(expr, sp.Basic) else sp.Float(float(expr))
        used = {s: self.values[s] for s in expr.free_symbols if s in self.values}
        value = evaluate(expr, used) if used else float(expr)
        return np.broadcast_to(np.asarray(value, dtype=float), (self.P,))

    def expect(self, expr: sp.Expr, gauss: Sequence[sp.Symbol], cov: list[list[sp.Expr]],
               laws: Mapping, options: dict) -> BatchEstimate:
        """E[expr] for every item of the batch."""
        d = len(gauss)
        covs = np.empty((self.P, d, d))
        for i in range(d):
            for j in range(i, d):
                covs[:, i, j] = covs[:, j, i] = self.eval(cov[i][j])
        coeffs = [s for s in expr.free_symbols if s in self.values]
        used_laws = {s: laws[s] for s in expr.free_symbols if s in laws}
        if coeffs or used_laws:
            return self._one_by_one(expr, gauss, covs, coeffs, used_laws, options)
        info: dict = {}
        values, errors, methods = expect_batch(expr, gauss, covs, info=info, **options)
        return BatchEstimate(np.asarray(values, float), np.asarray(errors, float),
                             max(set(methods), key=_RANK.__getitem__), None, info["budget"], info["heavy_tail"])

    def _one_by_one(self, expr, gauss, covs, coeffs, laws, options) -> BatchEstimate:
        values, errors, methods = np.empty(self.P), np.empty(self.P), set()
        budget, heavy = set(), False
        for p in range(self.P):
            item = expr.subs({s: float(self.values[s][p]) for s in coeffs})
            est = expect(item, gauss, sp.Matrix(covs[p].tolist()), laws, exact=True, **options)
            values[p], errors[p] = est.value, est.error
            methods.add(est.method)
            budget |= set(est.budget)
            heavy = heavy or est.heavy_tail
        return BatchEstimate(values, errors, max(methods, key=_RANK.__getitem__, default="exact"), None,
                             tuple(sorted(budget)), heavy)

    def summarize(self, value: sp.Expr, estimates: Sequence) -> LimitValue:
        v = np.array(self.eval(value))
        method = max((e.method for e in estimates), key=_RANK.__getitem__, default="exact")
        error = sum((np.asarray(e.error) for e in estimates), np.zeros(self.P)) + 4e-16 * np.abs(v)
        return LimitValue(v, error, method, None)
