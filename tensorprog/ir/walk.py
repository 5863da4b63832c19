"""Traversal of function trees: the one walker every pass uses (back ends, ``diff``, checks).

A function tree (``Fn``) is a small expression over IR variables: leaves ``Ref(var)`` and
``Const(value)``, interior nodes ``Call(name, args)``, ``Bin(op, lhs, rhs)`` and
``Neg(operand)``.  :func:`fold` evaluates a tree bottom-up with one rule per node kind,
visiting each node object once (a sub-tree shared by reference, as ``from_sympy`` builds
them, is folded once); :func:`subtrees` lists the distinct sub-trees, :func:`preorder`
every node object (without hashing trees); :func:`map_refs` rebuilds a tree with its
leaves replaced; :func:`refs` and :func:`calls` are the variables and builtins a tree reads.

``ARITHMETIC`` is the one table of the language's binary operators: each maps to the Python
operator, which numpy arrays and sympy expressions both implement.  (On two Python floats
the operators raise where numpy's ufuncs give inf or NaN: ``1.0 / 0.0``; the executor,
whose scalars are Python floats, applies the ufunc of the same name.)
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
    kind = type(fn)
    if kind is Call:
        return fn.args
    if kind is Bin:
        return (fn.lhs, fn.rhs)
    if kind is Neg:
        return (fn.operand,)
    if kind is Ref or kind is Const:
        return ()
    raise TypeError(f"not a function tree node: {fn!r}")


def _default_bin(node: Bin, lhs, rhs):
    return ARITHMETIC[node.op](lhs, rhs)


def _default_neg(node: Neg, operand):
    return -operand


@dataclass(frozen=True)
class Rules(Generic[T]):
    """One rule per node kind for :func:`fold`; interior rules get the node and its folded operands.

    * ``ref(node)``, ``const(node)``: the value of a leaf;
    * ``call(node, args)``: a builtin applied to the values of its arguments (a list);
    * ``bin(node, lhs, rhs)``: a binary operator (default: ``ARITHMETIC[node.op](lhs, rhs)``);
    * ``neg(node, operand)``: negation (default: ``-operand``).
    """
    ref: Callable[[Ref], T]
    const: Callable[[Const], T]
    call: Callable[[Call, list[T]], T]
    bin: Callable[[Bin, T, T], T] = _default_bin
    neg: Callable[[Neg, T], T] = _default_neg

    def apply(self, node: Fn, operands: list[T]) -> T:
        """The rule of ``node``'s kind applied to ``node`` and its folded operands."""
        kind = type(node)
        if kind is Ref:
            return self.ref(node)
        if kind is Const:
            return self.const(node)
        if kind is Call:
            return self.call(node, operands)
        if kind is Bin:
            return self.bin(node, operands[0], operands[1])
        return self.neg(node, operands[0])


def fold(fn: Fn, rules: Rules[T], memo: dict | None = None) -> T:
    """The value of ``fn`` under ``rules``, bottom-up, operands left to right.

    Each node object is folded once: a sub-tree shared by reference gets one result (pass
    ``memo``, a dict owned by the caller, to share results across several trees; it maps
    ``id(node)`` to ``(node, value)``, so the nodes it names stay alive).  A rule may raise
    to stop the fold.  Iterative: the depth of the tree is not bounded by Python's stack."""
    memo = {} if memo is None else memo
    got = memo.get(id(fn))
    if got is not None:
        return got[1]
    stack: list[tuple[Fn, bool]] = [(fn, False)]
    while stack:
        node, ready = stack.pop()
        key = id(node)
        if key in memo:
            continue
        kids = children(node)
        if ready or not kids:
            memo[key] = (node, rules.apply(node, [memo[id(k)][1] for k in kids]))
            continue
        stack.append((node, True))
        stack.extend((k, False) for k in reversed(kids) if id(k) not in memo)
    return memo[id(fn)][1]


def subtrees(fn: Fn) -> Iterator[Fn]:
    """Every distinct sub-tree of ``fn`` (``fn`` included), parents before their operands,
    operands left to right (pre-order; equal sub-trees are listed once)."""
    seen: set[Fn] = set()
    stack = [fn]
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        yield node
        stack.extend(reversed(children(node)))


def preorder(fn: Fn) -> list[Fn]:
    """Every node object of ``fn`` once, parents before their operands, operands left to
    right: :func:`subtrees` by identity, without hashing trees (a sub-tree shared by
    reference is listed once, equal copies each time).  For passes indifferent to repeats
    (:func:`refs`, :func:`calls`, the verifier), in the lowering's hot path."""
    kind = type(fn)
    if kind is Ref or kind is Const:
        return [fn]
    out: list[Fn] = []
    seen: set[int] = set()
    stack = [fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        out.append(node)
        kind = type(node)                      # children(node), inlined
        if kind is Call:
            stack.extend(reversed(node.args))
        elif kind is Bin:
            stack += (node.rhs, node.lhs)
        elif kind is Neg:
            stack.append(node.operand)
        elif kind is not Ref and kind is not Const:
            raise TypeError(f"not a function tree node: {node!r}")
    return out


def map_refs(fn: Fn, replace: Callable[[Ref], Fn]) -> Fn:
    """``fn`` with every leaf ``Ref`` replaced by ``replace(ref)`` (other nodes rebuilt as they are)."""
    return fold(fn, Rules(ref=replace, const=lambda c: c,
                          call=lambda node, args: Call(node.name, tuple(args)),
                          bin=lambda node, lhs, rhs: Bin(node.op, lhs, rhs),
                          neg=lambda node, operand: Neg(operand)))


def refs(fn: Fn) -> tuple[int, ...]:
    """The variables a function reads, in order of first appearance (pre-order, left to right)."""
    read: dict[int, None] = {}
    for node in preorder(fn):
        if type(node) is Ref:
            read[node.var] = None
    return tuple(read)


def calls(fn: Fn) -> set[str]:
    """Names of the builtins a function applies."""
    return {node.name for node in preorder(fn) if type(node) is Call}
