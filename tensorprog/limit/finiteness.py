"""Finiteness of the limit: every scalar's limit, and every sub-expression of scalars inside a
function, must be a finite real float.  Division by zero, log(0), sqrt or log of a negative
number, NaN and float overflow raise a TPNumericalError located at the statement, naming the
operation (``evaluate`` checks node by node; ``scalar`` and ``nonlin`` check the whole value;
``estimate`` checks each expectation)."""
from __future__ import annotations

import math
import sys
from typing import Callable

import sympy as sp

from ..symbolic import functions as fnsym
from .. import ir
from ..errors import TPNumericalError
from ..expect.laws import as_number
from .result import defect

_FLOAT_MAX = sys.float_info.max
_SPECIAL = (sp.Number, sp.core.numbers.ImaginaryUnit, sp.core.numbers.ComplexInfinity)


def distinct_nodes(expr: sp.Basic) -> list[sp.Basic]:
    """Every distinct sub-expression of expr, once: linear in the size of its DAG (sympy's
    atoms/has visit a shared sub-expression once per occurrence, exponentially many times
    for a vector used twice per layer)."""
    seen, stack = {expr}, [expr]
    while stack:
        for a in stack.pop().args:
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return list(seen)


class Finiteness:
    """Checks mixed into Hypotheses; needs ``program``, ``params`` (param symbol -> value) and
    ``_heavy`` (descriptions of the heavy-tailed laws)."""
    program: ir.Program
    params: dict
    _heavy: list[str]
    def scalar(self, e: ir.Scalar, value: sp.Expr) -> None:
        """The limit of a scalar must be a finite real float."""
        kind = self._defect(value)
        if kind is not None:
            raise self._error(e, _whole(kind, value, e.fn))

    def evaluate(self, e, leaf: Callable[[int], sp.Expr], exact: bool = False) -> sp.Expr:
        """``fnsym.to_sympy(e.fn, leaf, exact)``, checked node by node: a sub-expression of
        scalars (no vector in it) must be a finite real float, and no vector may be divided
        by a scalar whose limit is 0.  Raises a TPNumericalError at ``e`` naming the operation."""
        eqns = self.program.eqns

        def walk(fn: ir.Fn) -> tuple[sp.Expr, bool]:
            if isinstance(fn, ir.Ref):
                return leaf(fn.var), isinstance(eqns[fn.var], ir.SCALAR_OPS)
            if isinstance(fn, ir.Const):
                return fnsym.to_sympy(fn, leaf, exact), True
            children = fn.args if isinstance(fn, ir.Call) else \
                (fn.operand,) if isinstance(fn, ir.Neg) else (fn.lhs, fn.rhs)
            parts = [walk(c) for c in children]
            values = [v for v, _ in parts]
            numeric = all(n for _, n in parts)
            slots = tuple(ir.Ref(-1 - i) for i in range(len(children)))
            shallow = ir.Call(fn.name, slots) if isinstance(fn, ir.Call) else \
                ir.Neg(slots[0]) if isinstance(fn, ir.Neg) else ir.Bin(fn.op, *slots)
            if isinstance(fn, ir.Bin) and fn.op == "/" and parts[1][1] and self._is_zero(values[1]):
                raise self._error(e, _node("zoo", fn, values, None, self._is_zero))
            try:
                value = fnsym.to_sympy(shallow, lambda v: values[-1 - v], exact)
            except ZeroDivisionError:
                raise self._error(e, _node("zoo", fn, values, None, self._is_zero)) from None
            if numeric:
                kind = self._defect(value)
                if kind is not None:
                    raise self._error(e, _node(kind, fn, values, value, self._is_zero))
            return value, numeric

        return walk(e.fn)[0]

    def _defect(self, value: sp.Expr) -> str | None:
        """``limit.defect`` of a number (params at their values); None if it is not one."""
        if not isinstance(value, sp.Basic):
            value = as_number(value)
        if value.free_symbols:
            value = value.subs(self.params) if self.params else value
            if value.free_symbols:           # vectors, or batch items (checked per item)
                return None
        return defect(value)

    def _is_zero(self, value: sp.Expr) -> bool:
        if value.free_symbols:
            value = value.subs(self.params) if self.params else value
        return bool(value.is_number and value.is_zero)

    def _check_expr(self, e, nodes: list[sp.Basic]) -> None:
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

    def _error(self, e, message: str) -> TPNumericalError:
        return TPNumericalError(message, e.pos.line, e.pos.col, self.program.file, self.program.source)

    def estimate(self, e, est) -> None:
        import numpy as np
        value = np.asarray(est.value)
        if not np.all(np.isfinite(value)):
            heavy = ", ".join(self._heavy)
            proven = est.exact in (sp.oo, -sp.oo)
            raise self._error(e, f"an expectation in the limit is not finite ({est.value})" + (
                "" if not heavy else f": a moment of a heavy-tailed law is infinite ({heavy})" if proven else
                f"; with heavy-tailed laws ({heavy}) a moment or an exponential moment can be infinite"))
        if np.iscomplexobj(value) and np.any(np.abs(value.imag) > 1e-12 * np.maximum(1.0, np.abs(value.real))):
            raise self._error(e, f"an expectation in the limit is complex ({est.value}): sqrt, log or a "
                              "non-integer power of a quantity that can be negative")



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


def _node(kind: str, fn: ir.Fn, args: list, value, is_zero) -> str:
    """Why one operation of a function of scalars has no finite real value."""
    op = fn.name if isinstance(fn, ir.Call) else fn.op if isinstance(fn, ir.Bin) else "-"
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


def _ops(fn: ir.Fn) -> set[str]:
    """The builtins and binary operators a function tree applies."""
    out, stack = set(), [fn]
    while stack:
        f = stack.pop()
        if isinstance(f, ir.Call):
            out.add(f.name)
            stack.extend(f.args)
        elif isinstance(f, ir.Bin):
            out.add(f.op)
            stack += [f.lhs, f.rhs]
        elif isinstance(f, ir.Neg):
            stack.append(f.operand)
    return out
