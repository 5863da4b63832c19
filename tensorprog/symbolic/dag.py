"""Walks of a sympy expression as the DAG it is (sympy shares equal sub-expressions).

sympy's own ``atoms``, ``has``, ``free_symbols`` and printing visit a shared sub-expression once
per occurrence: exponentially often for a Z that uses a vector twice per layer.  These visit it
once.
"""
from __future__ import annotations

import sympy as sp


def distinct_nodes(expr: sp.Basic, most: int | None = None) -> list[sp.Basic]:
    """Every distinct sub-expression of expr, once (linear in the size of its DAG); with ``most``,
    the walk stops as soon as more than ``most`` are found."""
    seen, stack = {expr}, [expr]
    while stack and (most is None or len(seen) <= most):
        for a in stack.pop().args:
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return list(seen)


def post_order(expr: sp.Basic) -> list[sp.Basic]:
    """Every distinct sub-expression of expr, once, each after its arguments (iterative: no
    recursion limit for a deep Z)."""
    order, entered, stack = [], {expr}, [(expr, iter(expr.args))]
    while stack:                  # depth first: a node entered before is finished (a DAG has no cycle)
        node, args = stack[-1]
        for a in args:
            if a not in entered:
                entered.add(a)
                stack.append((a, iter(a.args)))
                break
        else:
            stack.pop()
            order.append(node)
    return order
