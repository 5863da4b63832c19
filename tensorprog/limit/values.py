"""Numbers known by value inside exact algebra (``compile(symbolic=True)``, ``--symbolic``).

A sympy ``Float`` in an exact compile is a number known only to float precision: a constant
of loaded data with no short decimal form, an estimate taken by value (:data:`.BIG_NUMBER`), a
numeric expectation.  A number holding one is therefore known by value too, and it stays a value:

* it is never read as a closed form by guessing (``sp.nsimplify`` reads E[q²] = 1.0000000029 as
  1, and e^{1.0000000029} as E); a Float becomes a rational only where the rational *is* its
  value (:func:`number`: 0.5 → 1/2, 3.0 → 3);
* it does not re-enter exact algebra: a sum such as 2.718·Ẑ + exp(r)·Ẑ' over exact exp(r) makes
  the engine's exact rules crawl (gp4a_transformer: minutes), so each maximal number holding a
  Float is replaced by its value (:func:`by_value`), which is what the numeric compile computes.
"""
from __future__ import annotations

import math

import sympy as sp

from ..expect.linalg import approximate
from ..symbolic.dag import distinct_nodes, post_order

#: a Float that is exactly a rational with a denominator at most this (a power of 2) becomes
#: that rational (0.5, 0.375, 3.0): the same number, and exact algebra on it is cheap
SMALL_DENOMINATOR = 2 ** 10


def holds_float(expr: sp.Basic) -> bool:
    """Whether a Float occurs in ``expr`` (over its DAG: a shared sub-expression once)."""
    return any(n.is_Float for n in distinct_nodes(expr))


def number(x: float) -> sp.Expr:
    """The float ``x`` as sympy, exactly: the rational it is where its denominator is at most
    :data:`SMALL_DENOMINATOR`, else a Float of its value."""
    q = sp.Rational(x)
    return q if q.q <= SMALL_DENOMINATOR else sp.Float(x)


def real_value(expr: sp.Expr) -> float | None:
    """The value of a number expression as a float (computed to 30 digits, rounded once), or None
    where it is no finite real float (nan, infinite, beyond the float range, complex): such a
    number stays as it is, for the compiler's finiteness checks to report."""
    try:
        value = approximate(expr)
        re, im = float(value.real), float(value.imag)
    except (TypeError, ValueError, ArithmeticError):
        return None
    if not math.isfinite(re) or not abs(im) <= 1e-12 * max(1.0, abs(re)):
        return None
    return re


def value_of(expr: sp.Expr) -> sp.Expr:
    """A number expression holding a Float as one number of its value (:func:`number` of
    :func:`real_value`); any other expression, or one with no finite real value, as it is."""
    if not (expr.is_number and holds_float(expr)):
        return expr
    value = real_value(expr)
    return expr if value is None else number(value)


def by_value(expr: sp.Expr) -> sp.Expr:
    """``expr`` with each maximal number sub-expression (no symbols) that holds a Float replaced
    by its value (:func:`number` of it), the number terms of a sum and the number factors of a
    product taken together (0.3·exp(1/3)·x → 0.4187·x); computed over the DAG."""
    order = post_order(expr)
    if not any(n.is_Float for n in order):
        return expr
    is_number: dict[sp.Basic, bool] = {}
    holds: dict[sp.Basic, bool] = {}
    out: dict[sp.Basic, sp.Basic] = {}

    def arg(a: sp.Basic) -> sp.Basic:
        return value_of(a) if is_number[a] and holds[a] else out[a]
    for node in order:
        is_number[node] = not node.is_Symbol and all(is_number[a] for a in node.args)
        holds[node] = node.is_Float or any(holds[a] for a in node.args)
        if is_number[node] or not holds[node]:
            out[node] = node
            continue
        if node.is_Add or node.is_Mul:       # its number terms (factors) together: one number
            numbers = [a for a in node.args if is_number[a]]
            value = real_value(node.func(*numbers)) if any(holds[a] for a in numbers) else None
            if value is not None:
                out[node] = node.func(number(value), *[out[a] for a in node.args if not is_number[a]])
                continue
        args = [arg(a) for a in node.args]
        out[node] = node if all(a is b for a, b in zip(args, node.args)) else node.func(*args)
    return arg(expr)
