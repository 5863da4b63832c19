"""Finiteness of the limit: every scalar's limit, and every sub-expression of scalars inside a
function, must be a finite real float.  Division by zero, log(0), sqrt or log of a negative
number, NaN and float overflow raise a TPNumericalError located at the statement, naming the
operation (:class:`Finiteness`: ``operation`` checks each operation as the compiler builds a
value; ``scalar`` and ``expression`` check a whole value; ``estimate`` each expectation).
The checker only judges values; the compiler builds them."""
from __future__ import annotations

import math
import sys
from numbers import Real
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from .. import ir
from ..ir.walk import Rules, fold
from ..errors import TPNumericalError
from ..expect.laws import as_number
from .result import defect

_FLOAT_MAX = sys.float_info.max
_SPECIAL = (sp.Number, sp.core.numbers.ImaginaryUnit, sp.core.numbers.ComplexInfinity)


def real_params(program: ir.Program) -> dict[sp.Symbol, float]:
    """The numeric params of a program as {symbol: value} (a symbolic compilation may leave them
    in closed forms; a check puts the values back)."""
    return {sp.Symbol(k, real=True): float(v) for k, v in program.params.items()
            if isinstance(v, Real) and not isinstance(v, bool)}


class Finiteness:
    """Raises a TPNumericalError, located at the statement, where a limit is not a finite real float.

    The compiler calls, for an equation ``e``:

    * ``operation(e, op, node, args, scalar, value)`` for every operation of ``e.fn`` as it
      builds the value (``args`` the values of its operands, ``scalar[i]`` whether operand i
      has no vector in it, ``value`` the result or None when computing it divided by zero);
    * ``expression(e, nodes)`` for a Z or an integrand, given its distinct sub-expressions;
    * ``scalar(e, value)`` for the limit of a scalar;
    * ``estimate(e, est)`` for each expectation.

    ``params`` (symbol -> value) are substituted before a value is judged; ``heavy_laws``
    describe the heavy-tailed laws of the program, for the message of an infinite expectation.
    """

    def __init__(self, program: ir.Program, params: Mapping[sp.Symbol, float],
                 heavy_laws: Sequence[str] = ()) -> None:
        self.program = program
        self.params = dict(params)
        self.heavy_laws = tuple(heavy_laws)

    def scalar(self, e: ir.Scalar, value: sp.Expr) -> None:
        """The limit of a scalar must be a finite real float."""
        kind = self._defect(value)
        if kind is not None:
            raise self._error(e, _whole(kind, value, e.fn))

    def operation(self, e: ir.Eqn, op: str, node: ir.Fn, args: Sequence[sp.Expr],
                  scalar: Sequence[bool], value: sp.Expr | None) -> None:
        """One operation ``op`` (a builtin's name, a binary operator, or "-" for negation) of
        ``e.fn``: a sub-expression of scalars (no vector in it) must be a finite real float,
        and no vector may be divided by a scalar whose limit is 0."""
        divides_by_zero = op == "/" and scalar[1] and self._is_zero(args[1])
        if divides_by_zero or value is None:
            raise self._error(e, _node("zoo", op, node, args, None, self._is_zero))
        if all(scalar):
            kind = self._defect(value)
            if kind is not None:
                raise self._error(e, _node(kind, op, node, args, value, self._is_zero))

    def expression(self, e: ir.Eqn, nodes: list[sp.Basic]) -> None:
        """A Z or an integrand (its distinct ``nodes``) with a non-finite or complex number in it
        (1/c, sqrt(c) with c̊ = 0, < 0)."""
        atoms = {n for n in nodes if isinstance(n, _SPECIAL)}
        kind = "nan" if sp.nan in atoms else "zoo" if sp.zoo in atoms else \
            "inf" if (sp.oo in atoms or -sp.oo in atoms) else "complex" if sp.I in atoms else None
        if kind is None:                    # exp(800.0) is a Float, exp(800) stays exact (symbolic)
            big = any(abs(a) > _FLOAT_MAX for a in atoms if a.is_Rational or a.is_Float) or \
                any(defect(f) == "overflow" for f in nodes if isinstance(f, sp.exp) and f.args[0].is_number)
            kind = "overflow" if big else None
        if kind is not None:
            raise self._error(e, _whole(kind, None, e.fn))

    def estimate(self, e: ir.Eqn, est) -> None:
        """An expectation (an ``Estimate`` or ``BatchEstimate``) must be finite and real."""
        value = np.asarray(est.value)
        if not np.all(np.isfinite(value)):
            heavy = ", ".join(self.heavy_laws)
            proven = est.exact in (sp.oo, -sp.oo)
            raise self._error(e, f"an expectation in the limit is not finite ({est.value})" + (
                _suspects(getattr(e, "fn", None)) if not heavy else f": a moment of a heavy-tailed law is infinite ({heavy})" if proven else
                f"; with heavy-tailed laws ({heavy}) a moment or an exponential moment can be infinite"))
        if np.iscomplexobj(value) and np.any(np.abs(value.imag) > 1e-12 * np.maximum(1.0, np.abs(value.real))):
            raise self._error(e, f"an expectation in the limit is complex ({est.value}): sqrt, log or a "
                              "non-integer power of a quantity that can be negative")

    def _defect(self, value: sp.Expr) -> str | None:
        """``result.defect`` of a number (params at their values); None if it is not one."""
        if not isinstance(value, sp.Basic):
            value = as_number(value)
        free = value.free_symbols
        if free:
            if free.isdisjoint(self.params):  # vectors, or batch items (checked per item): no subs to make
                return None
            value = value.subs(self.params)
            if value.free_symbols:
                return None
        return defect(value)

    def _is_zero(self, value: sp.Expr) -> bool:
        if value.free_symbols:
            value = value.subs(self.params) if self.params else value
        return bool(value.is_number and value.is_zero)

    def _error(self, e: ir.Eqn, message: str) -> TPNumericalError:
        return TPNumericalError(message, e.pos.line, e.pos.col, self.program.file, self.program.source)


# ---- messages ------------------------------------------------------------------------------------
def _show(value) -> str:
    """A number for a message: 6 significant digits, any exponent (2.72e+347)."""
    if value is None:
        return "?"
    try:
        number = complex(sp.N(value, 17))
        if not number.imag and math.isfinite(number.real):
            return f"{number.real:.6g}"
        text = str(sp.N(value, 6))
    except (TypeError, ValueError, ArithmeticError):
        return str(value)
    return text.replace("*I", "i").replace("I", "i")


def _node(kind: str, op: str, fn: ir.Fn, args: Sequence, value, is_zero: Callable[[sp.Expr], bool]) -> str:
    """Why one operation ``op`` (node ``fn``) of a function of scalars has no finite real value."""
    if kind in ("zoo", "nan", "inf"):
        if op == "/" and is_zero(args[1]):
            both = is_zero(args[0])
            return "division by zero in the limit: " + ("0 / 0 (numerator and denominator tend to 0)"
                                                        if both else "the denominator tends to 0")
        if op == "**" and is_zero(args[0]) and (args[1].is_number and args[1].is_negative):
            return f"division by zero in the limit: 0 ** {_show(args[1])} (the base tends to 0)"
        if op == "log" and is_zero(args[0]):
            return "log(0) in the limit: its argument tends to 0 (the limit is -inf)"
    if kind == "complex":
        if op in ("sqrt", "log"):
            return f"{op} of a negative number in the limit: {op}({_show(args[0])}) is complex"
        if op == "**":
            return (f"a negative number to a non-integer power in the limit: ({_show(args[0])}) ** "
                    f"{_show(args[1])} is complex")
    if kind == "overflow":
        what = f"exp({_show(args[0])})" if op == "exp" else "the limit"
        return f"{what} overflows a float in the limit: ≈ {_show(value)} > 1.8e+308"
    return _whole(kind, value, fn)


def _whole(kind: str, value, fn: ir.Fn) -> str:
    """Why a whole value is not a finite real float (the operations of ``fn`` suggest the cause)."""
    ops = _ops(fn)
    if kind == "zoo":
        division = "/" in ops or "**" in ops
        if division and "log" in ops:
            return "division by zero or log(0) in the limit: the limit is infinite (zoo)"
        if "log" in ops and not division:
            return "log(0) in the limit: its argument tends to 0 (the limit is -inf)"
        return "division by zero in the limit: a denominator tends to 0 (the limit is zoo)"
    if kind == "nan":
        return "the limit is undefined (NaN: 0/0, 0·inf or inf − inf)"
    if kind == "inf":
        return "the limit is infinite"
    if kind == "complex":
        names = {"sqrt": "sqrt", "log": "log", "**": "a non-integer power"}
        causes = " or ".join(names[op] for op in sorted(ops & names.keys())) or "an operation"
        return (f"the limit is complex ({_show(value)}): {causes} of a negative number"
                if value is not None else f"a complex number in the limit: {causes} of a negative number")
    return f"the limit overflows a float: ≈ {_show(value)} > 1.8e+308"


#: what makes an integrand's expectation undefined or infinite, by operation
_UNDEFINED = {"log": "log(u) is undefined (NaN) for u < 0 and -inf at u = 0",
              "sqrt": "sqrt(u) is undefined (NaN) for u < 0",
              "**": "u ** p with a non-integer p is undefined (NaN) for u < 0",
              "/": "a division by a quantity that can be 0 is infinite there"}


def _suspects(fn: ir.Fn | None) -> str:
    """The operations of an integrand that can make its expectation undefined, named for the message."""
    if fn is None:
        return ""
    ops = set()
    for node in ir.preorder(fn):
        if isinstance(node, ir.Call) and node.name in _UNDEFINED:
            ops.add(node.name)
        elif isinstance(node, ir.Bin) and node.op == "/":
            ops.add("/")
        elif isinstance(node, ir.Bin) and node.op == "**" and not (
                isinstance(node.rhs, ir.Const) and float(node.rhs.value).is_integer() and node.rhs.value >= 0):
            ops.add("**")
    ops = sorted(ops)
    if not ops:
        return ""
    names = ", ".join(op if op.isalpha() else f"'{op}'" for op in ops)
    return f": the integrand applies {names}; " + "; ".join(_UNDEFINED[op] for op in ops)


def _ops(fn: ir.Fn) -> set[str]:
    """The builtins and binary operators a function tree applies."""
    return fold(fn, Rules(ref=lambda leaf: set(), const=lambda leaf: set(),
                          call=lambda node, args: {node.name}.union(*args),
                          bin=lambda node, lhs, rhs: {node.op} | lhs | rhs,
                          neg=lambda node, operand: operand))
