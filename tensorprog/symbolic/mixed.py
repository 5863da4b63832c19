"""The mixed rule of a replay: per cell, the Mehler series where its stated error meets the target,
split quadrature on the rest — for functions kinked at 0 alone (softsign and its derivative).

A kinked function's Hermite coefficients decay like a power of k, so the series' bound misses the
target where |ρ| is near 1 (a near duplicate among a dataset's inputs).  A plain series head
(:class:`.mehler.MehlerValue`) gives NaN there, and the replay sends the pair to a compile of its
own; with many such pairs that is the slow path.  :class:`MixedValue` (A, B, ρ, tol, a, b) is the
same series head (a subclass: its slopes, its diagonal class and its rounding are the series'),
whose cells that miss the target are computed on the spot by :func:`.split_quad.split_expect` at
their variances a, b and covariance c = ρ√(ab), batched over those cells alone; :class:`MixedError`
states each cell's error: the series' where it holds, the quadrature's estimate elsewhere.  A cell
that neither rule gives to the target (u ≡ ±v with no series diagonal, a quadrature that does not
converge) is NaN, and the replay's check sends it to the compile as before.

On the tape (:mod:`.tape`) both heads are one operation kind each, "mixed" and "mixed_err", whose
argument :class:`MixedArg` holds φ and ψ as one-input tapes (stored with the tape as data) and a
cache: the value and the error of a block's cells are computed once.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from .hermite import AIM
from .mehler import MehlerValue, SumCache, summed
from .split_quad import split_expect


class MixedValue(MehlerValue):
    """MixedValue(A, B, ρ, tol, a, b): Σ_k ρ^k α_k β_k per cell where the series meets ``tol``, else
    E φ(u)ψ(v) by split quadrature at (a, b, ρ√(ab)) (:func:`mixed_value`).  A :class:`.mehler.MehlerValue`
    (its first three arguments the same), so that the replay's slopes and classes treat it as one."""
    nargs = 6
    is_real = True


class MixedError(sp.Function):
    """MixedError(A, B, ρ, tol, a, b): the stated error of :class:`MixedValue` per cell."""
    nargs = 6


@dataclass(frozen=True, eq=False)
class MixedArg:
    """The argument of a "mixed" / "mixed_err" operation: φ and ψ as one-input tapes (of
    :data:`.mehler.T`), the tape's :class:`.mehler.SumCache` and a cache of the last few blocks' cells."""
    phi: object
    psi: object
    sums: SumCache | None = None
    cells: OrderedDict = field(default_factory=OrderedDict, compare=False, repr=False)

    def to_json(self) -> list:
        return [self.phi.to_json(), self.psi.to_json()]

    def __call__(self, A, B, rho, tol, a, b) -> tuple[np.ndarray, np.ndarray]:
        """(values, errors) of the cells (module doc), kept for the block's other operation."""
        key = (id(A), id(B), A.shape, B.shape, np.shape(rho), float(tol))
        got = self.cells.get(key)
        if got is not None and got[0] is A and got[1] is B and np.array_equal(got[2], rho) \
                and np.array_equal(got[3], a) and np.array_equal(got[4], b):
            return got[5]
        result = mixed_cells(self, A, B, rho, float(tol), a, b)
        self.cells[key] = (A, B, np.array(rho, dtype=float), np.array(a, dtype=float), np.array(b, dtype=float),
                           result)
        while len(self.cells) > 8:
            self.cells.popitem(last=False)
        return result


def mixed_cells(arg: MixedArg, A, B, rho, tol: float, a, b) -> tuple[np.ndarray, np.ndarray]:
    """The series' sums and stated errors per cell (:func:`.mehler.summed`); where those miss the
    series' aim :data:`.hermite.AIM`·``tol`` (relative above 1), the split quadrature's value and
    error where it meets ``tol`` with a smaller error (:func:`better`); NaN where neither meets ``tol``."""
    s, err = summed(A, B, rho, tol, arg.sums)
    s, err = np.array(s, dtype=float), np.array(err, dtype=float)
    bad = ~(err <= AIM * tol * np.maximum(1.0, np.abs(s)))
    if bad.any():
        shape = s.shape
        av, bv = np.broadcast_to(a, shape)[bad], np.broadcast_to(b, shape)[bad]
        c = np.clip(np.broadcast_to(rho, shape)[bad], -1.0, 1.0) * np.sqrt(av * bv)
        values, errors, ok = split_expect(lambda t: arg.phi(t)[0], lambda t: arg.psi(t)[0], av, bv, c, tol)
        s[bad], err[bad] = better(s[bad], err[bad], values, errors, ok, tol)
    return s, err


def better(s: np.ndarray, err: np.ndarray, values: np.ndarray, errors: np.ndarray, ok: np.ndarray,
           tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Per cell, the quadrature's (value, error) where it meets ``tol`` (``ok``) with a smaller error
    than the series', else the series' where that meets ``tol`` (relative above 1), else NaN."""
    take = ok & ~(err <= errors)
    series = err <= tol * np.maximum(1.0, np.abs(s))
    value = np.where(take, values, np.where(series, s, np.nan))
    return value, np.where(take, errors, np.where(series, err, np.nan))


def mixed_value(A, B, rho, tol, a, b, out=None, arg: MixedArg | None = None) -> np.ndarray:
    """:class:`MixedValue` per cell."""
    got = arg(A, B, rho, tol, a, b)[0]
    return got if out is None else np.copyto(out, np.broadcast_to(got, out.shape)) or out


def mixed_error(A, B, rho, tol, a, b, out=None, arg: MixedArg | None = None) -> np.ndarray:
    """:class:`MixedError` per cell."""
    got = arg(A, B, rho, tol, a, b)[1]
    return got if out is None else np.copyto(out, np.broadcast_to(got, out.shape)) or out


#: the tape's operation kinds of the mixed rule, by head
MIXED_KINDS = {MixedValue: "mixed", MixedError: "mixed_err"}
MIXED_FUNCTIONS = {"mixed": mixed_value, "mixed_err": mixed_error}
