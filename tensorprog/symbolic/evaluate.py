"""Evaluate sympy expressions with numpy, by walking the expression tree.

No ``eval``, ``exec``, ``sympify`` of strings nor ``lambdify``: an expression (or a list of
expressions) is compiled once into the numeric tape of :mod:`.tape` — a flat single-assignment
list of numpy operations (Add, Mul, Pow, Max, Min, numbers and the function heads of
``tensorprog.symbolic.heads.SYMPY_TO_NUMPY``), common subexpressions shared and constant subtrees
folded — with every input in one space: running it on arrays (one per symbol, broadcasting) gives
the values at all points at once, with no Python loop over points.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping, Sequence

import sympy as sp

from .tape import Tape

__all__ = ["Tape", "compile_exprs", "evaluate"]


@lru_cache(maxsize=1024)
def _compile_cached(exprs: tuple[sp.Basic, ...], symbols: tuple[sp.Symbol, ...]) -> Tape:
    return Tape.compile(exprs, symbols)


def compile_exprs(exprs: Sequence[sp.Basic], symbols: Sequence[sp.Symbol]) -> Tape:
    """Compile expressions of ``symbols`` into a (cached) tape."""
    return _compile_cached(tuple(exprs), tuple(symbols))


def evaluate(expr: sp.Basic, env: Mapping[sp.Symbol, object]) -> np.ndarray:
    """The value of ``expr`` with each symbol replaced by the array ``env[symbol]``."""
    symbols = tuple(sorted(env, key=str))
    return compile_exprs((expr,), symbols)(*(env[s] for s in symbols))[0]
