"""The shortcuts around sympy's evaluation in the record's symbolic work (issue 25: a template's cold
compile and record) build the very expressions sympy's evaluated forms are, argument for argument:
:func:`..symbolic.rounding.scaled` against c·x, :func:`..symbolic.rounding.positive` and
:func:`..symbolic.rounding.rounding` against their plain evaluated definitions,
:func:`..limit.replay.heads_put_back` against Add(*parts).xreplace, and a tape walk met again (the
binding's memo, a number by identity) against a fresh walk: the same slots, no new operation."""
from __future__ import annotations

import sympy as sp

from tensorprog.limit.replay import heads_put_back
from tensorprog.symbolic.mehler import Mean, MeanCurve, HermiteRow, T
from tensorprog.symbolic.rounding import OP_UNIT, inexact, positive, power_roundings, rounding, scaled
from tensorprog.symbolic.tape import Builder

x, y, z = sp.symbols("x y z", real=True)
p = sp.Symbol("p", positive=True)
d = sp.Dummy("d")
EXPRESSIONS = [1.5 * x, 1.5 * x * y, x * y * z, 1.5 * (x + y), sp.Rational(1, 3) * x * y, 0.1 * x + 2 * y * z,
               (x + 1.5 * y) * z, 1.5 * x ** 2, sp.sqrt(2) * x * 1.5, 2.0 * x * sp.Abs(y), -0.25 * x * p,
               x + y, x, sp.Float(0.3), 3 * x ** -1 * y, 1.5 * 2 ** x * y, sp.I * x * 1.5]
FACTORS = [OP_UNIT, OP_UNIT * 3, sp.Float(1.5), sp.Float(-2.0), sp.Float(1.0)]


def same(a: sp.Expr, b: sp.Expr) -> bool:
    return a == b and sp.srepr(a) == sp.srepr(b)


def plain_positive(expr: sp.Expr) -> sp.Expr:
    """|P|⁺ with every product and sum evaluated by sympy (the definition :func:`positive` keeps)."""
    if expr.is_Add or expr.is_Mul:
        return expr.func(*[plain_positive(a) for a in expr.args])
    return abs(expr) if expr.is_Number else sp.Abs(expr, evaluate=False)


def plain_rounding(expr: sp.Expr) -> sp.Expr:
    """:func:`rounding` with every product evaluated by sympy."""
    u = OP_UNIT
    if expr.is_Add:
        parts = [plain_rounding(a) for a in expr.args] + [u * (len(expr.args) - 1) * plain_positive(expr)]
        return sp.Add(*[q for q in parts if q != 0])
    if expr.is_Mul:
        count = len(expr.args) - 1 + sum(1 for a in expr.args if inexact(a))
        parts = [u * count * plain_positive(expr)]
        for i, a in enumerate(expr.args):
            r = plain_rounding(a)
            if r != 0:
                parts.append(r * plain_positive(sp.Mul(*(expr.args[:i] + expr.args[i + 1:]))))
        return sp.Add(*parts)
    if expr.is_Pow and expr.exp.is_Number and expr.exp != 1:
        parts = [u * power_roundings(expr.exp) * plain_positive(expr)]
        r = plain_rounding(expr.base)
        if r != 0:
            parts.append(abs(expr.exp) * plain_positive(expr.base) ** (expr.exp - 1) * r)
        return sp.Add(*parts)
    return u * abs(expr) if inexact(expr) else sp.Integer(0)


def test_scaled_is_sympys_product():
    for e in EXPRESSIONS:
        for c in FACTORS:
            assert same(scaled(c, e), c * e), (c, e)
            assert same(scaled(c, plain_positive(e)), c * plain_positive(e)), (c, e)


def test_scaled_writes_unevaluated_only_where_it_may():
    c = sp.Float(1.5)
    assert not isinstance(scaled(c, x + y), sp.Mul)                  # c·(x + y) distributes, as sympy's
    assert scaled(sp.Rational(1, 2), x * y) == x * y / 2               # a rational factor: sympy's product


def test_positive_and_rounding_are_the_evaluated_ones():
    for e in EXPRESSIONS:
        if e.has(sp.I):
            continue
        assert same(positive(e), plain_positive(e)), e
        assert same(rounding(e), plain_rounding(e)), e


def test_heads_put_back_is_the_xreplace_of_the_sum():
    row = HermiteRow(p, sp.Lambda(T, sp.tanh(T)), sp.Integer(8), sp.Float(0.25))
    head = Mean(row)
    back = {d: head}
    slope = MeanCurve(row) / (2 * sp.Abs(p, evaluate=False))
    cases = [[sp.Abs(d, evaluate=False), sp.Mul(sp.Abs(x, evaluate=False), slope, evaluate=False)],
             [sp.Abs(0, evaluate=False), sp.Mul(sp.Abs(1, evaluate=False), slope, evaluate=False)],
             [sp.Abs(x * d, evaluate=False), sp.Mul(sp.Abs(d * y, evaluate=False), slope, evaluate=False)],
             [sp.Abs(d, evaluate=False), sp.Mul(sp.Abs(d, evaluate=False), 0, evaluate=False)],
             [sp.Abs(d, evaluate=False), sp.Mul(sp.Abs(d, evaluate=False), slope, evaluate=False),
              sp.Mul(sp.Abs(d, evaluate=False), slope, evaluate=False)]]            # equal terms: merged first
    for parts in cases:
        outer = [q.args[0].xreplace(back) for q in parts[1:]]
        assert same(heads_put_back(parts, back, outer), sp.Add(*parts).xreplace(back)), parts


def test_a_walk_met_again_makes_nothing_new():
    builder = Builder([x, y])
    expr = 1.5 * sp.Abs(x * y, evaluate=False) + sp.Float(0.1) * x - y ** 2
    memo: dict = {}
    first = builder.visit(expr, None, memo)
    ops = list(builder.ops)
    assert builder.visit(expr, None, memo) == first              # the memo's node
    assert builder.visit(expr, None, {}) == first                # walked afresh: the same slot
    assert builder.visit(sp.Float(0.1) * x - y ** 2 + 1.5 * sp.Abs(x * y, evaluate=False), None, {}) == first
    assert builder.ops == ops
