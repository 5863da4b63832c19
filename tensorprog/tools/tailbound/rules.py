"""The syntactic function rules of the tail bound (Theorem 4.3.1, Golikov's thesis, ch. 4).

The class needs phi_l and chi lambda-Lipschitz, monotone and zero at 0.  They are decided
on the expression f(x) of one variable, bottom-up: builtins (the Lipschitz constant and
direction of each builtin record's ``monotone`` rule: relu, tanh, erf, sigmoid, softplus,
selu, softsign; leaky_relu(., a) and elu(., a) with a >= 0: max(1, a)), constants, composition, +, − (directions must
agree), * and / by constants (|c| Lip f, direction times sign c).  The Lipschitz constant is an upper bound, exact for a
single builtin times a constant.  Anything else (a product of two functions of x, a power,
a second variable, ...) is outside the rules, with the reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ir
from ...builtins import BUILTINS
from ...finite.evaluate import eval_fn

@dataclass(frozen=True)
class FnInfo:
    """What the rules know of a one-variable expression f(x)."""
    const: float | None      # f is this constant (None: f depends on x)
    lip: float               # a Lipschitz constant
    direction: int           # +1 non-decreasing, −1 non-increasing, 0 constant
    why: str | None = None   # set when f is outside the rules (not Lipschitz / not monotone)


def _bad(why: str) -> FnInfo:
    return FnInfo(None, math.inf, 0, why)


def _first_bad(infos) -> FnInfo | None:
    return next((a for a in infos if a.why), None)


def _ref(node: ir.Ref, var: int) -> FnInfo:
    """x itself: Lip 1, non-decreasing (another variable is outside the rules)."""
    return FnInfo(None, 1.0, +1) if node.var == var else _bad("depends on a second variable")


def _neg(a: FnInfo) -> FnInfo:
    """−f: Lip f, the opposite direction."""
    return a if a.why else FnInfo(None if a.const is None else -a.const, a.lip, -a.direction)


def _call(node: ir.Call, args: list[FnInfo]) -> FnInfo:
    """g(f, c...): Lip g · Lip f and dir g · dir f for a builtin g whose record's ``monotone`` rule
    gives (Lip g, dir g) at the constants c (leaky_relu(f, a), a ≥ 0: max(1, a)); a builtin of
    constants: the constant."""
    bad = _first_bad(args)
    if bad:
        return bad
    if all(a.const is not None for a in args):
        value = float(BUILTINS[node.name].numpy(*(np.float64(a.const) for a in args)))
        return FnInfo(value, 0.0, 0)
    rule = BUILTINS[node.name].monotone
    if rule is not None and args[0].const is None and all(a.const is not None for a in args[1:]):
        got = rule(*(a.const for a in args[1:]))
        if isinstance(got, str):
            return _bad(got)
        lip, d = got
        return FnInfo(None, lip * args[0].lip, d * args[0].direction)
    return _bad(f"{node.name} is outside the rules (not Lipschitz, not monotone, or unknown)")


def _bin(node: ir.Bin, a: FnInfo, b: FnInfo) -> FnInfo:
    """f ± g: Lip f + Lip g (directions must agree); c·f, f/c: |c| Lip f, direction times
    sign c; f ** 1 is f; constants fold with ``ir.ARITHMETIC`` (on Python floats)."""
    bad = _first_bad((a, b))
    if bad:
        return bad
    if a.const is not None and b.const is not None:
        try:
            return FnInfo(ir.ARITHMETIC[node.op](a.const, b.const), 0.0, 0)
        except (ZeroDivisionError, OverflowError, ValueError):
            return _bad(f"a constant {node.op} is undefined")
    if node.op in "+-":
        s = 1 if node.op == "+" else -1
        db = s * b.direction
        if a.direction and db and a.direction != db:
            return _bad("a sum of a non-decreasing and a non-increasing function need not be monotone")
        return FnInfo(None, a.lip + b.lip, a.direction or db)
    if node.op == "*":
        c, f = (a.const, b) if a.const is not None else (b.const, a)
        if c is None:
            return _bad("a product of two functions of the vector need not be Lipschitz")
        return FnInfo(None, abs(c) * f.lip, 0 if c == 0 else (1 if c > 0 else -1) * f.direction)
    if node.op == "/":
        if b.const is None:
            return _bad("division by a function of the vector")
        if b.const == 0:
            return _bad("division by zero")
        return FnInfo(None, a.lip / abs(b.const), (1 if b.const > 0 else -1) * a.direction)
    if node.op == "**" and b.const == 1.0:
        return a
    return _bad("a power of the vector is not Lipschitz")


def fn_info(fn: ir.Fn, var: int) -> FnInfo:
    """The rules applied to f(x), x the variable ``var``, bottom-up (a fold over the tree)."""
    return ir.fold(fn, ir.Rules(ref=lambda node: _ref(node, var),
                                const=lambda node: FnInfo(float(node.value), 0.0, 0),
                                call=_call, bin=_bin, neg=lambda node, a: _neg(a)))


def numpy_fn(fn: ir.Fn) -> Callable[[np.ndarray], np.ndarray]:
    """f as a numpy function of its one variable (broadcast to the argument's shape)."""

    def f(x):
        x = np.asarray(x, dtype=float)
        return np.broadcast_to(np.asarray(eval_fn(fn, lambda _v: x), dtype=float), x.shape)
    return f
