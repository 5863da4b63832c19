"""The syntactic function rules of the tail bound (Theorem 4.3.1, Golikov's thesis, ch. 4).

The class needs phi_l and chi lambda-Lipschitz, monotone and zero at 0.  They are decided
on the expression f(x) of one variable, bottom-up: builtins (relu, tanh, erf, sigmoid,
softplus: Lipschitz constant and direction from a table; leaky_relu(., a) with a >= 0:
max(1, a)), constants, composition, +, − (directions must agree), * and / by constants
(|c| Lip f, direction times sign c).  The Lipschitz constant is an upper bound, exact for a
single builtin times a constant.  Anything else (a product of two functions of x, a power,
a second variable, ...) is outside the rules, with the reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ... import ir
from ...finite.evaluate import eval_fn

#: builtin -> (Lipschitz constant, direction: +1 non-decreasing, value at 0)
_MONOTONE_BUILTINS = {
    "relu": (1.0, +1, 0.0),
    "tanh": (1.0, +1, 0.0),
    "erf": (2.0 / math.sqrt(math.pi), +1, 0.0),
    "sigmoid": (0.25, +1, 0.5),
    "softplus": (1.0, +1, math.log(2.0)),
}


@dataclass(frozen=True)
class _FnInfo:
    """What the rules know of a one-variable expression f(x)."""
    const: float | None      # f is this constant (None: f depends on x)
    lip: float               # a Lipschitz constant
    direction: int           # +1 non-decreasing, −1 non-increasing, 0 constant
    why: str | None = None   # set when f is outside the rules (not Lipschitz / not monotone)


def _bad(why: str) -> _FnInfo:
    return _FnInfo(None, math.inf, 0, why)


def _fn_info(fn: ir.Fn, var: int) -> _FnInfo:
    if isinstance(fn, ir.Const):
        return _FnInfo(float(fn.value), 0.0, 0)
    if isinstance(fn, ir.Ref):
        if fn.var != var:
            return _bad("depends on a second variable")
        return _FnInfo(None, 1.0, +1)
    if isinstance(fn, ir.Neg):
        a = _fn_info(fn.operand, var)
        if a.why:
            return a
        return _FnInfo(None if a.const is None else -a.const, a.lip, -a.direction)
    if isinstance(fn, ir.Call):
        args = [_fn_info(a, var) for a in fn.args]
        for a in args:
            if a.why:
                return a
        if all(a.const is not None for a in args):
            from ...builtins import BUILTINS
            value = float(BUILTINS[fn.name].numpy(*(np.float64(a.const) for a in args)))
            return _FnInfo(value, 0.0, 0)
        if fn.name in _MONOTONE_BUILTINS and len(args) == 1:
            lip, d, _ = _MONOTONE_BUILTINS[fn.name]
            return _FnInfo(None, lip * args[0].lip, d * args[0].direction)
        if fn.name == "leaky_relu" and args[1].const is not None and args[0].const is None:
            a = args[1].const
            if a < 0:
                return _bad(f"leaky_relu with a negative slope ({a:g}) is not monotone")
            return _FnInfo(None, max(1.0, a) * args[0].lip, args[0].direction)
        return _bad(f"{fn.name} is outside the rules (not Lipschitz, not monotone, or unknown)")
    # Bin
    a, b = _fn_info(fn.lhs, var), _fn_info(fn.rhs, var)
    for x in (a, b):
        if x.why:
            return x
    if a.const is not None and b.const is not None:
        ops = {"+": float.__add__, "-": float.__sub__, "*": float.__mul__,
               "/": float.__truediv__, "**": float.__pow__}
        try:
            return _FnInfo(ops[fn.op](a.const, b.const), 0.0, 0)
        except (ZeroDivisionError, OverflowError, ValueError):
            return _bad(f"a constant {fn.op} is undefined")
    if fn.op in "+-":
        s = 1 if fn.op == "+" else -1
        db = s * b.direction
        if a.direction and db and a.direction != db:
            return _bad("a sum of a non-decreasing and a non-increasing function need not be monotone")
        return _FnInfo(None, a.lip + b.lip, a.direction or db)
    if fn.op == "*":
        c, f = (a.const, b) if a.const is not None else (b.const, a)
        if c is None:
            return _bad("a product of two functions of the vector need not be Lipschitz")
        return _FnInfo(None, abs(c) * f.lip, 0 if c == 0 else (1 if c > 0 else -1) * f.direction)
    if fn.op == "/":
        if b.const is None:
            return _bad("division by a function of the vector")
        if b.const == 0:
            return _bad("division by zero")
        return _FnInfo(None, a.lip / abs(b.const), (1 if b.const > 0 else -1) * a.direction)
    if fn.op == "**" and b.const == 1.0:
        return a
    return _bad("a power of the vector is not Lipschitz")



def _numpy_fn(fn: ir.Fn) -> Callable[[np.ndarray], np.ndarray]:
    """f as a numpy function of its one variable (broadcast to the argument's shape)."""

    def f(x):
        x = np.asarray(x, dtype=float)
        return np.broadcast_to(np.asarray(eval_fn(fn, lambda _v: x), dtype=float), x.shape)
    return f
