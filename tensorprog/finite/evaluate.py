"""Function trees evaluated with numpy, and the cause of a value that is not finite.

:func:`eval_fn` is the executor's evaluation of a ``Nonlin`` / ``Moment`` / ``Scalar``
function tree, coordinatewise over arrays, under the caller's ``np.errstate``: a direct
recursion with one rule per node kind (:data:`EVAL`); compiling trees into closures was tried
and lost: creating them costs more than a trial of a large program.  Binary operators are numpy's ufuncs
(:data:`UFUNCS`), not ``ir.ARITHMETIC``'s Python operators: the executor's scalars and
constants are Python floats, on which ``1.0 / 0.0`` must give inf with a floating-point
event, not raise ``ZeroDivisionError``.

When a statement's value is not finite, :func:`first_nonfinite` finds why, off the hot
path: it re-evaluates the tree bottom-up and stops at the first operation whose
operands are finite but whose result is not, recording the floating-point events
that operation raised (numpy's ``errstate(call=...)``).  So ``exp(1000 x) − exp(1000 x)``
(a NaN in the end) is an overflow in ``exp``, ``1 / c`` with ``c = 0`` a division by
zero, and ``log(x)`` of a negative x an invalid operation.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from .. import ir
from ..builtins import BUILTINS

Read = Callable[[int], object]

#: numpy's ufunc for each operator of ``ir.ARITHMETIC`` (the same keys)
UFUNCS: dict[str, np.ufunc] = {"+": np.add, "-": np.subtract, "*": np.multiply,
                               "/": np.divide, "**": np.power}

#: the floating-point event flags numpy passes to an ``errstate(call=...)`` handler
_DIVIDE, _OVERFLOW, _INVALID = 1, 2, 8

OVERFLOW = "overflow"
DIVISION_BY_ZERO = "division by zero"
INVALID = "invalid operation"
BAD_INPUT = "non-finite input"


# ---- evaluation (the hot path): one rule per node kind ------------------------------------
def eval_fn(fn: ir.Fn, read: Read):
    """The value of a function tree, coordinatewise over numpy arrays: ``Ref(v)`` is
    ``read(v)``, ``Const(c)`` the Python float c, ``Call(f, ...)`` the builtin's numpy
    function, ``Bin(∘, a, b)`` the ufunc of ∘, ``Neg(a)`` −a."""
    return EVAL[type(fn)](fn, read)


#: the evaluation rule of each node kind (a direct recursion: no per-tree compilation, no cache)
EVAL: dict[type, Callable[[ir.Fn, Read], object]] = {
    ir.Ref: lambda node, read: read(node.var),
    ir.Const: lambda node, read: node.value,
    ir.Call: lambda node, read: BUILTINS[node.name].numpy(*[eval_fn(a, read) for a in node.args]),
    ir.Bin: lambda node, read: UFUNCS[node.op](eval_fn(node.lhs, read), eval_fn(node.rhs, read)),
    ir.Neg: lambda node, read: -eval_fn(node.operand, read),
}


# ---- evaluation on an array backend other than numpy ---------------------------------------
def eval_array(fn: ir.Fn, read: Read, builtins: Mapping[str, Callable]):
    """:func:`eval_fn` on a backend array library: arrays go through the backend's
    ``builtins`` (:func:`~.backend.array_builtins`) and Python's operators (which the
    libraries implement, with Python numbers as operands); an operation on Python floats
    only (scalars of the program) is numpy's, as in :func:`eval_fn`, and gives a Python float."""
    return EVAL_ARRAY[type(fn)](fn, read, builtins)


def _host_only(args: Sequence) -> bool:
    return all(isinstance(a, (int, float)) for a in args)


def _call_array(node: ir.Call, read: Read, builtins: Mapping[str, Callable]):
    args = [eval_array(a, read, builtins) for a in node.args]
    if _host_only(args):
        return float(BUILTINS[node.name].numpy(*args))
    return builtins[node.name](*args)


def _bin_array(node: ir.Bin, read: Read, builtins: Mapping[str, Callable]):
    lhs, rhs = eval_array(node.lhs, read, builtins), eval_array(node.rhs, read, builtins)
    if _host_only((lhs, rhs)):
        return float(UFUNCS[node.op](lhs, rhs))
    return ir.ARITHMETIC[node.op](lhs, rhs)


#: the rules of :func:`eval_array`
EVAL_ARRAY: dict[type, Callable[[ir.Fn, Read, Mapping[str, Callable]], object]] = {
    ir.Ref: lambda node, read, builtins: read(node.var),
    ir.Const: lambda node, read, builtins: node.value,
    ir.Call: _call_array,
    ir.Bin: _bin_array,
    ir.Neg: lambda node, read, builtins: -eval_array(node.operand, read, builtins),
}


# ---- the cause of a non-finite value (the error path) -----------------------------------
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


class _Found(Exception):
    """Raised by a rule of :func:`first_nonfinite` to stop the fold at the first cause."""

    def __init__(self, cause: Cause) -> None:
        super().__init__(cause.describe())
        self.cause = cause


def _classify(op: str, division: bool, operands: Sequence, flags: int, value) -> Cause:
    produced = _produced(value)
    if division and np.any(np.asarray(operands[1]) == 0):
        return Cause(DIVISION_BY_ZERO, op, produced)             # x/0 (divide) and 0/0 (invalid)
    if flags & _DIVIDE:
        return Cause(DIVISION_BY_ZERO, op, produced)             # log(0), 0 ** -1
    if flags & _OVERFLOW or produced == "inf":
        return Cause(OVERFLOW, op, produced)
    return Cause(INVALID, op, produced)


def _checked(op: str, f: Callable, operands: Sequence, division: bool = False):
    """``f(*operands)``, recording the floating-point events it raises; a non-finite result
    (the operands are finite: the fold got here) stops the fold with its cause."""
    flags = [0]

    def record(_kind: str, flag: int) -> None:
        flags[0] |= flag
    with np.errstate(all="call", call=record):
        value = f(*operands)
    if not _finite(value):
        raise _Found(_classify(op, division, operands, flags[0], value))
    return value


def _read_finite(read: Read) -> Callable[[ir.Ref], object]:
    def ref(node: ir.Ref):
        value = read(node.var)
        if not _finite(value):
            raise _Found(Cause(BAD_INPUT, f"%{node.var}", _produced(value)))
        return value
    return ref


def first_nonfinite(fn: ir.Fn, read: Read) -> Cause | None:
    """The cause of the first non-finite value in ``fn`` (bottom-up, left to right), or
    None if every operation of the tree gives finite values.  For the error path only:
    it evaluates the tree once more, operation by operation (a fold whose rules stop at
    the first operation with finite operands and a non-finite result)."""
    rules = ir.Rules(
        ref=_read_finite(read), const=lambda node: node.value,
        call=lambda node, args: _checked(node.name, BUILTINS[node.name].numpy, args),
        bin=lambda node, lhs, rhs: _checked(f"'{node.op}'", UFUNCS[node.op], (lhs, rhs), node.op == "/"),
        neg=lambda node, operand: _checked("a negation", operator.neg, (operand,)))
    with np.errstate(all="ignore"):
        try:
            ir.fold(fn, rules)
        except _Found as found:
            return found.cause
    return None
