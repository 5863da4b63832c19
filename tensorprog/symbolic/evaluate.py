"""Evaluate sympy expressions with numpy, by walking the expression tree.

No ``eval``, ``exec``, ``sympify`` of strings nor ``lambdify``: an expression (or a
list of expressions) is compiled once into a flat single-assignment *tape* of numpy
operations — Add, Mul, Pow, symbols, numbers and the function heads of
``tensorprog.symbolic.heads.SYMPY_TO_NUMPY`` — with common subexpressions shared and constant
subtrees folded.  Running the tape on arrays (one per symbol, broadcasting) gives
the values at all points at once: there is no Python loop over points.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp
from scipy import special as sps

from .heads import Delta, SYMPY_TO_NUMPY

#: Heads that closed forms of the expectation engine produce, beyond the builtins.
_EXTRA: dict[object, Callable] = {
    sp.asin: np.arcsin, sp.acos: np.arccos, sp.atan: np.arctan, sp.sinh: np.sinh,
    sp.cosh: np.cosh, sp.erfc: sps.erfc, sp.atan2: np.arctan2, sp.tan: np.tan,
    sp.Heaviside: np.heaviside,        # Heaviside(x, H0): d max(x, y)/dx = Heaviside(x − y, 1/2)
}


def _reduce(fn: Callable) -> Callable:
    """A binary numpy function folded over any number of arguments (for Min/Max)."""
    def call(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = fn(out, x)
        return out
    return call


def numpy_head(expr: sp.Basic) -> Callable:
    """The numpy function for a sympy function head, or a ValueError."""
    if expr.func is Delta:
        raise ValueError(f"the Dirac mass in {expr} cannot be evaluated pointwise "
                         "(it is only meaningful inside an expectation)")
    fn = head_function(expr.func, len(expr.args))
    if fn is None:
        raise ValueError(f"no numeric rule for the function {expr.func} in {expr}")
    return fn


def head_function(func: object, nargs: int) -> Callable | None:
    """The numpy function for the sympy head ``func`` applied to ``nargs`` arguments (None if none)."""
    fn = SYMPY_TO_NUMPY.get(func) or _EXTRA.get(func)
    if fn is not None and func in (sp.Min, sp.Max) and nargs > 2:
        return _reduce(fn)
    return fn


#: the sympy heads with a numpy rule, by class name (what a stored tape names them by)
HEADS_BY_NAME: dict[str, object] = {f.__name__: f for f in (*SYMPY_TO_NUMPY, *_EXTRA)}


def power(x: np.ndarray, e: sp.Basic) -> np.ndarray:
    """x**e for a numeric exponent e, with the common cases done exactly."""
    if e == 2:
        return x * x
    if e == -1:
        return 1.0 / x
    if e == sp.Rational(1, 2):
        return np.sqrt(x)
    if e == sp.Rational(-1, 2):
        return 1.0 / np.sqrt(x)
    if e.is_Integer:
        return np.power(x, int(e)) if int(e) > 0 else 1.0 / np.power(x, -int(e))
    return np.power(x, float(e))


def as_expr(x: object) -> sp.Basic:
    """A sympy expression from a sympy object or a Python number (never a string)."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, (bool, str)) or not isinstance(x, (int, float)):
        raise TypeError(f"expected a sympy expression or a number, got {type(x).__name__}")
    return sp.Integer(x) if isinstance(x, int) else sp.Float(x)


def constant_value(expr: sp.Basic) -> float:
    """A symbol-free sympy number as a float (±inf for infinities)."""
    if expr in (sp.oo, sp.zoo):
        return float("inf")
    if expr == -sp.oo:
        return float("-inf")
    value = complex(expr.evalf(20))
    if value.imag != 0.0:
        raise ValueError(f"{expr} is not real")
    return value.real


class Tape:
    """A flat program computing several expressions of the same symbols.

    Each op is ``(kind, payload, arg_slots)`` and writes one new slot; ``kind`` is
    ``"add"``, ``"mul"``, ``"pow"`` (numeric exponent in payload), ``"fn"`` (a numpy
    function in payload).  Constants and inputs are preloaded slots.
    """

    def __init__(self, exprs: Sequence[sp.Basic], symbols: Sequence[sp.Symbol]):
        self.symbols = tuple(symbols)
        self.consts: dict[int, float] = {}
        self.ops: list[tuple[str, object, tuple[int, ...], int]] = []
        index = {s: i for i, s in enumerate(self.symbols)}
        slot_of: dict[sp.Basic, int] = {}
        nslots = len(self.symbols)
        const_val: dict[int, float] = {}
        for root in exprs:
            stack: list[tuple[sp.Basic, bool]] = [(as_expr(root), False)]
            while stack:
                e, done = stack.pop()
                if e in slot_of:
                    continue
                if e.is_Symbol:
                    if e not in index:
                        raise ValueError(f"unknown symbol {e} (expected one of {self.symbols})")
                    slot_of[e] = index[e]
                    continue
                if not e.args or e.is_Number or e.is_NumberSymbol:
                    slot_of[e] = nslots
                    const_val[nslots] = constant_value(e)
                    nslots += 1
                    continue
                if not done:
                    stack.append((e, True))
                    stack.extend((a, False) for a in e.args if a not in slot_of)
                    continue
                if e.is_Pow and e.exp.is_Number:
                    kind, payload, args = "pow", e.exp, (slot_of[e.base],)
                elif e.is_Add:
                    kind, payload, args = "add", None, tuple(slot_of[a] for a in e.args)
                elif e.is_Mul:
                    kind, payload, args = "mul", None, tuple(slot_of[a] for a in e.args)
                elif e.is_Pow:
                    kind, payload, args = "fn", np.power, (slot_of[e.base], slot_of[e.exp])
                elif isinstance(e, (sp.Function, sp.Min, sp.Max)):
                    kind, payload, args = "fn", numpy_head(e), tuple(slot_of[a] for a in e.args)
                else:
                    raise ValueError(f"cannot evaluate {e!r} numerically")
                if all(a in const_val for a in args):          # constant folding
                    with np.errstate(all="ignore"):
                        value = self._apply(kind, payload, [np.float64(const_val[a]) for a in args])
                    const_val[nslots] = float(value)
                else:
                    self.ops.append((kind, payload, args, nslots))
                slot_of[e] = nslots
                nslots += 1
        self.consts = {k: v for k, v in const_val.items()}
        self.outputs = tuple(slot_of[as_expr(e)] for e in exprs)
        last: dict[int, int] = {}
        for i, (_, _, args, _) in enumerate(self.ops):
            for a in args:
                last[a] = i
        keep = set(self.outputs)
        self._free = [[a for a in dict.fromkeys(args) if last.get(a) == i and a not in keep and a >= len(self.symbols)
                       and a not in self.consts] for i, (_, _, args, _) in enumerate(self.ops)]

    @staticmethod
    def _apply(kind: str, payload: object, xs: list) -> np.ndarray:
        if kind == "add":
            out = xs[0]
            for x in xs[1:]:
                out = out + x
            return out
        if kind == "mul":
            out = xs[0]
            for x in xs[1:]:
                out = out * x
            return out
        if kind == "pow":
            return power(xs[0], payload)
        return payload(*xs)

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """The values of the expressions, given one array per symbol (broadcasting)."""
        if len(arrays) != len(self.symbols):
            raise ValueError(f"expected {len(self.symbols)} arrays, got {len(arrays)}")
        xs = [np.asarray(a, dtype=float) for a in arrays]
        shape = np.broadcast_shapes(*(x.shape for x in xs)) if xs else ()
        slots: dict[int, np.ndarray] = dict(enumerate(xs))
        slots.update({k: np.float64(v) for k, v in self.consts.items()})
        with np.errstate(all="ignore"):
            for (kind, payload, args, out), free in zip(self.ops, self._free):
                slots[out] = self._apply(kind, payload, [slots[a] for a in args])
                for a in free:
                    del slots[a]
        return [np.broadcast_to(slots[o], shape).astype(float, copy=False) for o in self.outputs]


@lru_cache(maxsize=1024)
def _compile_cached(exprs: tuple[sp.Basic, ...], symbols: tuple[sp.Symbol, ...]) -> Tape:
    return Tape(exprs, symbols)


def compile_exprs(exprs: Sequence[sp.Basic], symbols: Sequence[sp.Symbol]) -> Tape:
    """Compile expressions of ``symbols`` into a (cached) tape."""
    return _compile_cached(tuple(exprs), tuple(symbols))


def evaluate(expr: sp.Basic, env: Mapping[sp.Symbol, object]) -> np.ndarray:
    """The value of ``expr`` with each symbol replaced by the array ``env[symbol]``."""
    symbols = tuple(sorted(env, key=str))
    return compile_exprs((expr,), symbols)(*(env[s] for s in symbols))[0]
