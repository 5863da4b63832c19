"""Products by updated matrices at finite width: the state of a RankOne chain, and LowRank products.

A matrix updated k times is W₀ + Σ_t c_t g_t h_tᵀ/|d_t| (:mod:`tensorprog.lang.matrices`).  The
executor keeps each RankOne link's terms stacked, G = [g_1 … g_k] and H = [h_1 … h_k] with the
coefficients a_t = c_t·|w(h)|/(|d_t|·size(w(h))) (and b_t likewise for the transpose), so that

    Σ_t c_t g_t (h_t·x)/|d_t| = G (a ⊙ Hᵀx),      Σ_t c_t h_t (g_t·y)/|d_t| = H (b ⊙ Gᵀy),

two matrix-vector products: O(n·k) work, O(n·k) memory, no n×n matrix.  (The widths' ratio
|w(h)|/|d_t| is the dims' ratio, as in the expansion by definition, which reads h·x/|d_t| as
mean(h x)·|w(h)|/|d_t|.)

A link extends its previous link's stack in place when it is the newest link of that stack (a
training run: each update extends the chain before it), else copies the first k terms: the
chain's memory is one (g, h) pair per term.  The stacks are row-major (k, n) so that appending
a term writes one contiguous row.  This fast path is numpy's, one trial at a time (the narrow
layout on :class:`~.ops.NumpyOps`: ``stacks_links``); a run on P inputs at once (vectors
(n, P)) or on another array backend keeps the terms as a list and sums them term by term,
c_t g_t mean(h_t x)·|w(h)|/|d_t| (the same value, O(n·k) too).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ir

#: the first capacity of a stack (it doubles when full)
FIRST_CAPACITY = 16


class Stack:
    """Growable (capacity, n) buffers of the left and right vectors of one chain, and the per-term
    factors ``a`` (for products by the chain) and ``b`` (by its transpose)."""

    def __init__(self, rows: int, cols: int, dtype: np.dtype, capacity: int = FIRST_CAPACITY) -> None:
        self.left = np.empty((capacity, rows), dtype)
        self.right = np.empty((capacity, cols), dtype)
        self.a = np.empty(capacity, np.float64)
        self.b = np.empty(capacity, np.float64)
        self.count = 0

    def copy(self, k: int) -> "Stack":
        """A new stack holding the first k terms."""
        new = Stack(self.left.shape[1], self.right.shape[1], self.left.dtype, max(FIRST_CAPACITY, 2 * k))
        new.left[:k], new.right[:k], new.a[:k], new.b[:k] = self.left[:k], self.right[:k], self.a[:k], self.b[:k]
        new.count = k
        return new

    def append(self, left: np.ndarray, right: np.ndarray, a: float, b: float) -> None:
        k = self.count
        if k == self.left.shape[0]:                       # full: double (the old rows are kept)
            self.left, self.right = _grow(self.left, 2 * k), _grow(self.right, 2 * k)
            self.a, self.b = _grow(self.a, 2 * k), _grow(self.b, 2 * k)
        self.left[k], self.right[k], self.a[k], self.b[k] = left, right, a, b
        self.count = k + 1


def _grow(array: np.ndarray, capacity: int) -> np.ndarray:
    """``array`` in a buffer of ``capacity`` rows (its rows copied first)."""
    new = np.empty((capacity,) + array.shape[1:], array.dtype)
    new[:array.shape[0]] = array
    return new


@dataclass(frozen=True)
class Link:
    """The value of a RankOne equation: the first ``k`` terms of ``stack`` (numpy, one trial), or
    the terms as a tuple ``terms`` of (left, right, coefficient, a, b) (other cases)."""
    k: int
    stack: Stack | None = None
    terms: tuple = ()

    def matmul(self, x, transposed: bool, xp=np):
        """Σ_t c_t g_t (h_t·x)/|d_t| (or the transpose), see the module docstring; on a stacked
        link x may be (n, B), B arguments side by side."""
        if self.stack is not None:
            s, k = self.stack, self.k
            inner, outer, factor = (s.left, s.right, s.b) if transposed else (s.right, s.left, s.a)
            scale = factor[:k] if x.ndim == 1 else factor[:k, None]       # x: (n,) or (n, B)
            weights = (scale * (inner[:k] @ x)).astype(x.dtype, copy=False)
            return outer[:k].T @ weights
        total = None
        for left, right, c, a, b in self.terms:
            inner, outer, factor = (left, right, b) if transposed else (right, left, a)
            m = xp.sum(inner * x, axis=0) * factor
            term = (c * m) * outer
            total = term if total is None else total + term
        return total


def products(link: Link, args: list, transposed: bool, xp=np) -> list:
    """The products of a chain (or its transpose) by the vectors ``args``: on a stacked link, several
    arguments side by side, one pass over its stacks; else one by one."""
    if len(args) > 1 and link.stack is not None:
        return list(link.matmul(np.stack(args, axis=1), transposed).T)
    return [link.matmul(x, transposed, xp) for x in args]


def factors(program: ir.Program, sizes: dict[str, int], e: ir.RankOne) -> tuple[float, float]:
    """(a, b) of a term without its coefficient: |w(h)|/(|d|·size(w(h))) and |w(g)|/(|d|·size(w(g)))
    (dims' ratios, as the expansion's mean(h x)·|w(h)|/|d|)."""
    dims = program.dims
    a = dims[e.cols] / dims[e.denom] / sizes[e.cols]
    b = dims[e.rows] / dims[e.denom] / sizes[e.rows]
    return a, b


def rank_one_value(program: ir.Program, sizes: dict[str, int], e: ir.RankOne, read, stacks: bool) -> Link:
    """The Link of a RankOne equation from its previous link, coefficient and vectors (``stacks``:
    the trial's layout stacks links, :attr:`~.layout.Layout.stacks_links`: stacked)."""
    prev: Link | None = read(e.prev) if e.prev >= 0 else None
    c = e.scale * (read(e.coeff) if e.coeff >= 0 else 1.0)
    left, right = read(e.left), read(e.right)
    a, b = factors(program, sizes, e)
    if stacks and np.ndim(c) == 0:
        if prev is None:
            stack = Stack(sizes[e.rows], sizes[e.cols], np.result_type(left.dtype, right.dtype))
        elif prev.stack is not None and prev.stack.count == prev.k:
            stack = prev.stack                                     # the newest link: extend in place
        else:
            stack = prev.stack.copy(prev.k) if prev.stack is not None else None
        if stack is not None:
            stack.append(left, right, float(c) * a, float(c) * b)
            return Link(stack.count, stack)
    terms = prev.terms if prev is not None and prev.stack is None else (
        unstacked(prev) if prev is not None else ())
    return Link(len(terms) + 1, None, terms + ((left, right, c, a, b),))


def unstacked(link: Link) -> tuple:
    """A stacked link's terms as a tuple (coefficient 1: it is in the factors)."""
    s = link.stack
    return tuple((s.left[t], s.right[t], 1.0, s.a[t], s.b[t]) for t in range(link.k))
