"""Traversal of function trees: the one walker every pass uses (back ends, ``diff``, checks).

A function tree (``Fn``) is a small expression over IR variables: leaves ``Ref(var)`` and
``Const(value)``, interior nodes ``Call(name, args)``, ``Bin(op, lhs, rhs)`` and
``Neg(operand)``.  :func:`fold` evaluates a tree bottom-up with one rule per node kind,
visiting each distinct sub-tree once (trees are frozen dataclasses, so equal sub-trees share
one result); :func:`subtrees` lists the distinct sub-trees; :func:`map_refs` rebuilds a tree
with its leaves replaced.

``ARITHMETIC`` is the one table of the language's binary operators: each maps to the Python
operator, which numpy arrays and sympy expressions both implement, so the executor and the
compiler read the same table.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

from .nodes import Bin, Call, Const, Fn, Neg, Ref

T = TypeVar("T")

#: the binary operators of function trees: ``Bin.op`` -> the operator applied to its operands
ARITHMETIC: dict[str, Callable] = {"+": operator.add, "-": operator.sub, "*": operator.mul,
                                   "/": operator.truediv, "**": operator.pow}


def children(fn: Fn) -> tuple[Fn, ...]:
    """The operands of a node, in order (none for a leaf)."""
    if isinstance(fn, Call):
        return fn.args
    if isinstance(fn, Bin):
        return (fn.lhs, fn.rhs)
    if isinstance(fn, Neg):
        return (fn.operand,)
    return ()


@dataclass(frozen=True)
class Rules(Generic[T]):
    """One rule per node kind for :func:`fold`; interior rules get the node and its folded operands.

    * ``ref(node)``, ``const(node)``: the value of a leaf;
    * ``call(node, args)``: a builtin applied to the values of its arguments;
    * ``bin(node, lhs, rhs)``: a binary operator (default: ``ARITHMETIC[node.op](lhs, rhs)``);
    * ``neg(node, operand)``: negation (default: ``-operand``).
    """
    ref: Callable[[Ref], T]
    const: Callable[[Const], T]
    call: Callable[[Call, list[T]], T]
    bin: Callable[[Bin, T, T], T] = lambda node, lhs, rhs: ARITHMETIC[node.op](lhs, rhs)
    neg: Callable[[Neg, T], T] = lambda node, operand: -operand


def fold(fn: Fn, rules: Rules[T], memo: dict | None = None) -> T:
    """The value of ``fn`` under ``rules``, bottom-up; each distinct sub-tree is folded once
    (pass ``memo`` to share results across several trees)."""
    memo = {} if memo is None else memo
    if fn in memo:
        return memo[fn]
    if isinstance(fn, Ref):
        out = rules.ref(fn)
    elif isinstance(fn, Const):
        out = rules.const(fn)
    elif isinstance(fn, Call):
        out = rules.call(fn, [fold(a, rules, memo) for a in fn.args])
    elif isinstance(fn, Bin):
        out = rules.bin(fn, fold(fn.lhs, rules, memo), fold(fn.rhs, rules, memo))
    elif isinstance(fn, Neg):
        out = rules.neg(fn, fold(fn.operand, rules, memo))
    else:
        raise TypeError(f"not a function tree node: {fn!r}")
    memo[fn] = out
    return out


def subtrees(fn: Fn) -> Iterator[Fn]:
    """Every distinct sub-tree of ``fn`` (``fn`` included), parents before their operands,
    operands left to right."""
    seen: set[Fn] = set()
    stack = [fn]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(reversed(children(node)))


def map_refs(fn: Fn, replace: Callable[[Ref], Fn]) -> Fn:
    """``fn`` with every leaf ``Ref`` replaced by ``replace(ref)`` (other nodes rebuilt as they are)."""
    return fold(fn, Rules(ref=replace, const=lambda c: c,
                          call=lambda node, args: Call(node.name, tuple(args)),
                          bin=lambda node, lhs, rhs: Bin(node.op, lhs, rhs),
                          neg=lambda node, operand: Neg(operand)))
