"""Function trees evaluated with numpy, and the cause of a value that is not finite.

:func:`eval_fn` is the executor's evaluation of a ``Nonlin`` / ``Moment`` / ``Scalar``
function tree, coordinatewise over arrays, under the caller's ``np.errstate``.

When a statement's value is not finite, :func:`first_nonfinite` finds why, off the hot
path: it re-evaluates the tree bottom-up and stops at the first operation whose
operands are finite but whose result is not, recording the floating-point events
that operation raised (numpy's ``errstate(call=...)``).  So ``exp(1000 x) − exp(1000 x)``
(a NaN in the end) is an overflow in ``exp``, ``1 / c`` with ``c = 0`` a division by
zero, and ``log(x)`` of a negative x an invalid operation.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .. import ir
from ..builtins import BUILTINS

OPS: dict[str, Callable] = {"+": np.add, "-": np.subtract, "*": np.multiply,
                            "/": np.divide, "**": np.power}

#: the floating-point event flags numpy passes to an ``errstate(call=...)`` handler
_DIVIDE, _OVERFLOW, _INVALID = 1, 2, 8

OVERFLOW = "overflow"
DIVISION_BY_ZERO = "division by zero"
INVALID = "invalid operation"
BAD_INPUT = "non-finite input"


def eval_fn(fn: ir.Fn, read: Callable[[int], object]):
    """The value of a function tree, coordinatewise over numpy arrays."""
    if isinstance(fn, ir.Ref):
        return read(fn.var)
    if isinstance(fn, ir.Const):
        return fn.value
    if isinstance(fn, ir.Neg):
        return -eval_fn(fn.operand, read)
    if isinstance(fn, ir.Call):
        return BUILTINS[fn.name].numpy(*(eval_fn(a, read) for a in fn.args))
    return OPS[fn.op](eval_fn(fn.lhs, read), eval_fn(fn.rhs, read))


@dataclass(frozen=True)
class Cause:
    """Why a value is not finite: the event (:data:`OVERFLOW`, :data:`DIVISION_BY_ZERO`,
    :data:`INVALID`, :data:`BAD_INPUT`), the operation that raised it (``exp``, ``/``,
    ``mean``...) and what it produced (``inf``, ``NaN`` or both)."""
    event: str
    op: str
    produced: str = "inf"

    def describe(self) -> str:
        if self.event == OVERFLOW:
            return f"overflow (inf) in {self.op}"
        if self.event == DIVISION_BY_ZERO:
            return f"division by zero ({self.produced}) in {self.op}"
        if self.event == INVALID:
            return f"NaN from an invalid operation in {self.op}"
        return f"{self.produced} from a non-finite input"


def _finite(value) -> bool:
    return bool(np.all(np.isfinite(value)))


def _produced(value) -> str:
    nan, inf = bool(np.any(np.isnan(value))), bool(np.any(np.isinf(value)))
    return "inf and NaN" if nan and inf else "NaN" if nan else "inf"


def _name(fn: ir.Fn) -> str:
    if isinstance(fn, ir.Call):
        return fn.name
    if isinstance(fn, ir.Neg):
        return "a negation"
    return f"'{fn.op}'"


def _classify(fn: ir.Fn, operands: list, flags: int, value) -> Cause:
    op, produced = _name(fn), _produced(value)
    if isinstance(fn, ir.Bin) and fn.op == "/" and np.any(np.asarray(operands[1]) == 0):
        return Cause(DIVISION_BY_ZERO, op, produced)             # x/0 (divide) and 0/0 (invalid)
    if flags & _DIVIDE:
        return Cause(DIVISION_BY_ZERO, op, produced)             # log(0), 0 ** -1
    if flags & _OVERFLOW or produced == "inf":
        return Cause(OVERFLOW, op, produced)
    return Cause(INVALID, op, produced)


def first_nonfinite(fn: ir.Fn, read: Callable[[int], object]) -> Cause | None:
    """The cause of the first non-finite value in ``fn`` (bottom-up, left to right), or
    None if every operation of the tree gives finite values.  For the error path only:
    it evaluates the tree once more."""
    found: list[Cause] = []

    def walk(f: ir.Fn):
        if isinstance(f, ir.Ref):
            value = read(f.var)
            if not _finite(value):
                found.append(Cause(BAD_INPUT, f"%{f.var}", _produced(value)))
            return value
        if isinstance(f, ir.Const):
            return f.value
        operands = []
        for a in (f.args if isinstance(f, ir.Call) else (f.operand,) if isinstance(f, ir.Neg)
                  else (f.lhs, f.rhs)):
            operands.append(walk(a))
            if found:
                return None
        flags = [0]

        def record(_kind: str, flag: int) -> None:
            flags[0] |= flag
        with np.errstate(all="call", call=record):
            if isinstance(f, ir.Call):
                value = BUILTINS[f.name].numpy(*operands)
            elif isinstance(f, ir.Neg):
                value = -operands[0]
            else:
                value = OPS[f.op](*operands)
        if not _finite(value):
            found.append(_classify(f, operands, flags[0], value))
        return value

    with np.errstate(all="ignore"):
        walk(fn)
    return found[0] if found else None
