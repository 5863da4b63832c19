"""Params as leaves: numbers of the lowering that remember how they were computed from params.

``tpc compile --symbolic`` lowers the program with every number-valued param a :class:`Traced`:
a Python float (the lowering computes with its value, unchanged) that carries ``expr``, a sympy
expression in the param symbols.  Constant folding (``a op b``), negation, builtins of scalars (their sympy
heads: ``sqrt(sw)``), list constants and their indexing carry the expression along; a list constant of traced items is a
:class:`TracedArray` (its ``exprs``, an object array beside the numbers).  Where a param decides
the program's *structure* (a loop bound, an index, a comparison, a builtin of list constants) the
lowering records it as structural: it stays a number everywhere
(:func:`structural_params`).

The leaves the compiler reads (a matrix's σ², an initial group's covariance, a dim ratio, a
``Const`` of a function tree) thus keep the params as symbols, and the recurrence is a function of
them: no probing, no re-lowering at moved values.  Nothing here imports sympy at module level.
"""
from __future__ import annotations

import contextvars
import operator
from typing import Any, Callable

import numpy as np


class Traced(float):
    """A float ``value`` computed from params as ``expr`` (sympy)."""

    def __new__(cls, value: float, expr: Any) -> "Traced":
        obj = super().__new__(cls, value)
        obj.expr = expr
        return obj

    def __reduce__(self):                     # pickles (replay keys, multiprocessing) as a plain float
        return (float, (float(self),))

    __hash__ = float.__hash__


def _arith(op: Callable, swap: bool = False) -> Callable:
    def method(self: Traced, other: Any) -> Any:
        if not isinstance(other, (int, float)) or isinstance(other, bool):
            return NotImplemented
        a, b = (other, self) if swap else (self, other)
        return combine(op, a, b, op(float(a), float(b)))
    return method


def _compare(op: Callable) -> Callable:
    def method(self: Traced, other: Any) -> Any:
        structure(self)
        structure(other)
        return op(float(self), float(other) if isinstance(other, (int, float)) else other)
    return method


for _name, _op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("pow", operator.pow)):
    setattr(Traced, f"__{_name}__", _arith(_op))
    setattr(Traced, f"__r{_name}__", _arith(_op, swap=True))
for _name, _op in (("eq", operator.eq), ("ne", operator.ne), ("lt", operator.lt), ("le", operator.le),
                   ("gt", operator.gt), ("ge", operator.ge)):
    setattr(Traced, f"__{_name}__", _compare(_op))
Traced.__neg__ = lambda self: Traced(-float(self), -self.expr)


class TracedArray(np.ndarray):
    """A list constant whose entries carry expressions ``exprs`` (an object array, same shape)."""
    exprs: np.ndarray | None = None


def expr_of(value: Any) -> Any:
    """The expression of a traced scalar or array (object array), else None."""
    if isinstance(value, Traced):
        return value.expr
    if isinstance(value, TracedArray) and value.exprs is not None:
        return value.exprs
    return None


def exact(value: Any) -> Any:
    """A plain number or array as exact sympy constants (short decimals as rationals)."""
    from .functions import constant
    if np.ndim(value) == 0:
        return constant(float(value), True)
    arr = np.asarray(value, dtype=float)
    out = np.empty(arr.shape, dtype=object)
    for idx, v in np.ndenumerate(arr):
        out[idx] = constant(float(v), True)
    return out


def either(value: Any) -> Any:
    """The expression of ``value``: its trace, or the number itself exactly."""
    e = expr_of(value)
    return exact(value) if e is None else e


def wrap(result: Any, expr: Any) -> Any:
    """``result`` (a float or array, as folded) carrying ``expr``."""
    if np.ndim(result) == 0:
        return Traced(float(result), expr)
    out = np.asarray(result, dtype=float).view(TracedArray)
    out.exprs = np.broadcast_to(np.asarray(expr, dtype=object), out.shape).copy()
    return out


def combine(op: Callable, a: Any, b: Any, result: Any) -> Any:
    """The folded ``result`` of ``op(a, b)`` carrying ``op`` of the operands' expressions (when
    one of them is traced; else ``result`` as it is)."""
    if expr_of(a) is None and expr_of(b) is None:
        return result
    ea, eb = either(a), either(b)
    if isinstance(ea, np.ndarray) or isinstance(eb, np.ndarray):
        expr = np.frompyfunc(op, 2, 1)(ea, eb)
    else:
        expr = op(ea, eb)
    return wrap(result, expr)


def called(name: str, args: list, result: Any) -> Any:
    """The folded ``result`` of the builtin ``name`` on scalar ``args``, carrying its sympy head of
    the arguments' expressions (``sqrt(sw)``, ``exp(p)``) when one of them is traced."""
    if all(expr_of(a) is None for a in args) or np.ndim(result) != 0:
        return result
    from .heads import HEADS
    return Traced(float(result), HEADS[name](*[either(a) for a in args]))


def negated(value: Any, result: Any) -> Any:
    """``-value`` carrying the negated expression."""
    return combine(operator.mul, -1.0, value, result) if expr_of(value) is not None else result


def listed(items: list, result: np.ndarray) -> Any:
    """A list constant (``to_array``) of items some of which are traced."""
    if not any(expr_of(i) is not None for i in items):
        return result
    exprs = [either(i) for i in items]
    arr = np.empty(len(exprs), dtype=object)
    for k, e in enumerate(exprs):
        arr[k] = e
    if result.ndim > 1:                       # rows of rows: stack the object arrays
        arr = np.array([np.asarray(e, dtype=object) for e in exprs], dtype=object).reshape(result.shape)
    return wrap(result, arr)


def indexed(arr: Any, at: tuple[int, ...], result: Any) -> Any:
    """``arr[at]`` (0-based) of a traced list constant."""
    if expr_of(arr) is None or np.ndim(arr) == 0:
        return result
    return wrap(result, arr.exprs[at])


class Tracer:
    """The params of one lowering as symbols: ``symbols`` {name: Symbol}, ``values`` {name: value},
    and ``structural``, the params that decided the program's structure somewhere."""

    def __init__(self) -> None:
        self.symbols: dict[str, Any] = {}
        self.values: dict[str, float] = {}
        self.structural: set[str] = set()

    def param(self, name: str, value: Any) -> Any:
        """A param's value as a leaf (a number-valued param only; lists stay as they are)."""
        if not isinstance(value, float) or isinstance(value, bool):
            return value
        import sympy as sp
        sym = sp.Symbol(name, real=True)
        self.symbols[name], self.values[name] = sym, float(value)
        return Traced(float(value), sym)

    def structure(self, value: Any) -> None:
        """``value`` decided the structure: its params stay numbers."""
        e = expr_of(value)
        if e is None:
            return
        for item in (e.ravel() if isinstance(e, np.ndarray) else (e,)):
            self.structural |= {s.name for s in getattr(item, "free_symbols", ())}


#: the tracer of the lowering in progress (None: numbers only, the usual lowering)
ACTIVE: contextvars.ContextVar[Tracer | None] = contextvars.ContextVar("tensorprog_tracer", default=None)


def structure(value: Any) -> None:
    """Record that ``value`` decided the structure of the lowering in progress (if it traces)."""
    tracer = ACTIVE.get()
    if tracer is not None:
        tracer.structure(value)


def plain(value: Any) -> Any:
    """A traced number or list constant as the plain number or array (its trace dropped)."""
    if isinstance(value, Traced):
        return float(value)
    if isinstance(value, TracedArray):
        return np.asarray(value, dtype=float).view(np.ndarray)
    return value


class SymbolicLeaves:
    """What a traced lowering adds to its IR (``ir.Program.leaves``): the expressions of the
    leaves the compiler reads beside the IR's numbers (``Const`` leaves carry theirs):
    ``matrices`` {Matrix var: σ²}, ``groups`` {group: its (k, k) covariance, an object array},
    ``dims`` {width: ratio to n}; and the ``tracer`` (symbols, values, structural params)."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.matrices: dict[int, Any] = {}
        self.groups: dict[int, np.ndarray] = {}
        self.dims: dict[str, Any] = {}

    def fixed(self) -> dict:
        """{Symbol: exact value} of the structural params (they stay numbers)."""
        t = self.tracer
        return {t.symbols[n]: exact(t.values[n]) for n in t.structural if n in t.symbols}

    def symbols(self) -> dict:
        """{Symbol: value} of the params that stay symbols."""
        t = self.tracer
        return {s: t.values[n] for n, s in t.symbols.items() if n not in t.structural}

    def expr(self, e: Any) -> Any:
        """An expression of the lowering with the structural params replaced by their values."""
        fixed = self.fixed()
        return e.subs(fixed) if fixed and hasattr(e, "subs") else e
