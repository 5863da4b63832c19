"""Function trees <-> sympy: the bridge used by ``diff`` and by the compiler.

``to_sympy`` maps ``Ref(v)`` leaves through a callback (a symbol, or the Z of v);
``from_sympy`` turns a sympy expression over leaf symbols back into a function tree
(used after symbolic differentiation), refusing heads that are not builtins
(e.g. the Dirac mass that is the derivative of ``step``).
"""
from __future__ import annotations

from typing import Callable

import sympy as sp

from . import ir
from .nonlin import BUILTINS, Delta

_HEAD_TO_NAME: dict[object, str] = {b.sympy: b.name for b in BUILTINS.values()}
_HEAD_TO_NAME.update({sp.Abs: "abs", sp.sign: "sign", sp.Heaviside: "step"})


def to_sympy(fn: ir.Fn, leaf: Callable[[int], sp.Expr], exact: bool = False) -> sp.Expr:
    """The sympy expression of ``fn``; constants become Floats (or Rationals if ``exact``)."""
    if isinstance(fn, ir.Ref):
        return leaf(fn.var)
    if isinstance(fn, ir.Const):
        return constant(fn.value, exact)
    if isinstance(fn, ir.Neg):
        return -to_sympy(fn.operand, leaf, exact)
    if isinstance(fn, ir.Call):
        args = [to_sympy(a, leaf, exact) for a in fn.args]
        return BUILTINS[fn.name].sympy(*args)
    lhs, rhs = to_sympy(fn.lhs, leaf, exact), to_sympy(fn.rhs, leaf, exact)
    if fn.op == "+":
        return lhs + rhs
    if fn.op == "-":
        return lhs - rhs
    if fn.op == "*":
        return lhs * rhs
    if fn.op == "/":
        return lhs / rhs
    return lhs ** rhs


def constant(value: float, exact: bool) -> sp.Expr:
    """A number as sympy: integers stay integers; with ``exact``, short decimals become rationals."""
    if float(value).is_integer() and abs(value) < 2**53:
        return sp.Integer(int(value))
    if exact:
        guess = sp.nsimplify(float(value), [sp.pi], tolerance=1e-15)
        if abs(float(guess) - value) <= 2.5e-16 * max(1.0, abs(value)) and sp.count_ops(guess) <= 12:
            return guess          # 0.3 -> 3/10, 0.7071... -> sqrt(2)/2, 0.6366... -> 2/pi
    return sp.Float(value)


class NotABuiltin(ValueError):
    """A sympy expression uses a function the language cannot express."""


def from_sympy(expr: sp.Expr, var_of: Callable[[sp.Symbol], int]) -> ir.Fn:
    """The function tree of a sympy expression whose symbols are variables."""
    if not expr.free_symbols:
        if expr.has(Delta):
            raise NotABuiltin("a Dirac mass")
        value = complex(expr.evalf())
        if value.imag:
            raise NotABuiltin(f"a complex constant {expr}")
        return ir.Const(value.real)
    if isinstance(expr, sp.Symbol):
        return ir.Ref(var_of(expr))
    if isinstance(expr, (sp.Add, sp.Mul)):
        op = "+" if isinstance(expr, sp.Add) else "*"
        parts = [from_sympy(a, var_of) for a in expr.args]
        while len(parts) > 1:           # pairwise: log2(len(args)) deep
            pairs = [ir.Bin(op, a, b) for a, b in zip(parts[::2], parts[1::2])]
            parts = pairs + parts[len(pairs) * 2:]
        return parts[0]
    if isinstance(expr, sp.Pow):
        return ir.Bin("**", from_sympy(expr.base, var_of), from_sympy(expr.exp, var_of))
    if isinstance(expr, sp.exp):
        return ir.Call("exp", (from_sympy(expr.args[0], var_of),))
    head = _HEAD_TO_NAME.get(expr.func)
    if head is None:
        raise NotABuiltin("a Dirac mass" if expr.func is Delta else f"the function {expr.func}")
    return ir.Call(head, tuple(from_sympy(a, var_of) for a in expr.args))


def shape(fn: ir.Fn) -> tuple[int, int]:
    """(depth, number of operations) of a function tree (leaves: depth 0, size 1), without recursion."""
    depth, size, stack = 0, 0, [(fn, 0)]
    while stack:
        f, d = stack.pop()
        size += 1
        depth = max(depth, d)
        if isinstance(f, ir.Call):
            stack.extend((a, d + 1) for a in f.args)
        elif isinstance(f, ir.Bin):
            stack += [(f.lhs, d + 1), (f.rhs, d + 1)]
        elif isinstance(f, ir.Neg):
            stack.append((f.operand, d + 1))
    return depth, size
