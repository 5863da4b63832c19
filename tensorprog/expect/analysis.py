"""Structural analyses of integrands (no numbers computed): what the engine and its
numerics need to know before integrating.

* ``parity``: even/odd under z → −z for a set of symmetric variables (odd ⇒ mean 0);
* ``growth``: an upper bound on the polynomial growth in one variable (moments of a
  Student-t law exist only below its df; exponential growth widens Gaussian ranges);
* ``kink_args`` and ``affine_pieces``: where the builtins with kinks (relu, step, abs, sign,
  max, min...: their records' ``kinks``) are not smooth, as affine lines when they are piecewise
  affine (for the 2D quadrature);
* ``linear_forms``: the linear forms w·z through which the integrands see the Gaussians.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import sympy as sp

from ..builtins import BOUNDED as BOUNDED_GROWTH, EVEN as EVEN_PARITY, LINEAR as LINEAR_GROWTH, ODD as ODD_PARITY
from ..symbolic.heads import NAMES, AbsF, Delta, Relu, Step, heads_where, record_of

# each class: the builtins' heads whose records say so, then sympy functions that closed forms and
# simplification produce beyond the builtins
ODD = heads_where(lambda b: b.parity == ODD_PARITY) + (sp.sign, sp.atan, sp.asin, sp.sinh)
EVEN = heads_where(lambda b: b.parity == EVEN_PARITY) + (sp.Abs, sp.cosh, Delta)
#: |f| ≤ 1 (atan and erfc are bounded, not by 1: the slope bound excludes them)
BOUNDED = heads_where(lambda b: b.growth == BOUNDED_GROWTH) + (sp.sign, sp.atan, sp.erfc, sp.Heaviside)
LINEAR = heads_where(lambda b: b.growth == LINEAR_GROWTH) + (sp.Abs,)
KINKS = heads_where(lambda b: b.kinks is not None) + (sp.Abs, sp.sign, sp.Heaviside)
#: the smooth pieces of the kinked sympy functions that are not builtins' heads
_SYMPY_BRANCHES = {sp.Abs: lambda a: [a, -a], sp.sign: lambda a: [sp.Integer(-1), sp.Integer(1)],
                   sp.Heaviside: lambda a: [sp.Integer(0), sp.Integer(1)]}


def parity(expr: sp.Expr, flip: set) -> int | None:
    """+1 if expr is even, −1 if odd under s → −s for all s in flip; None if unknown."""
    memo: dict = {}

    def p(e: sp.Expr) -> int | None:
        if e in memo:
            return memo[e]
        if e.is_Symbol or not e.args:
            out = -1 if e in flip else 1
        elif e.is_Add:
            ps = {p(a) for a in e.args}
            out = ps.pop() if len(ps) == 1 else None
        elif e.is_Mul:
            ps = [p(a) for a in e.args]
            out = None if None in ps else int(np.prod(ps))
        elif e.is_Pow:
            b, x = p(e.base), p(e.exp)
            int_power = b == -1 and e.exp.is_Integer
            out = None if x != 1 else 1 if b == 1 else (-1) ** int(e.exp) if int_power else None
        else:
            ps = [p(a) for a in e.args]
            if all(q == 1 for q in ps):
                out = 1
            elif ps == [-1] and isinstance(e, ODD):
                out = -1
            elif ps == [-1] and isinstance(e, EVEN):
                out = 1
            else:
                out = None
        memo[e] = out
        return out
    return p(expr)


def growth(expr: sp.Expr, u: sp.Symbol) -> float:
    """An upper bound on the polynomial growth degree of expr in u (inf if faster)."""
    memo: dict = {}

    def g(e: sp.Expr) -> float:
        if e in memo:
            return memo[e]
        if e == u:
            out = 1.0
        elif e.is_Symbol or not e.args:
            out = 0.0
        elif e.is_Add or isinstance(e, LINEAR):
            out = max(g(a) for a in e.args)
        elif e.is_Mul:
            out = sum(g(a) for a in e.args)
        elif e.is_Pow:
            gb = g(e.base)
            out = (float(e.exp) * gb if e.exp.is_number and e.exp > 0 else 0.0) if g(e.exp) == 0 else np.inf
        elif isinstance(e, BOUNDED):
            out = 0.0
        elif isinstance(e, sp.log):
            out = 1e-9 if g(e.args[0]) > 0 else 0.0
        elif isinstance(e, sp.exp) and bounded_above(e.args[0]):
            out = 0.0
        else:
            out = 0.0 if all(g(a) == 0 for a in e.args) else np.inf
        memo[e] = out
        return out
    return g(expr)


def bounded_above(e: sp.Expr) -> bool:
    """A sufficient syntactic test for e ≤ const (e.g. 1 − c·|x|, −x², −relu(x)·y²)."""
    if e.is_Add:
        return all(a.is_number or bounded_above(a) for a in e.args)
    c, rest = e.as_coeff_Mul()
    return bool(c < 0) and _nonnegative(rest) if e.is_Mul else bool(e.is_number and e <= 0)


def _nonnegative(e: sp.Expr) -> bool:
    """A sufficient syntactic test for e ≥ 0."""
    if isinstance(e, (AbsF, sp.Abs, Relu, Step, sp.exp)) or (e.is_number and e >= 0):
        return True
    if e.is_Pow:
        return (e.exp.is_Integer and e.exp % 2 == 0) or _nonnegative(e.base)
    if e.is_Add or e.is_Mul:
        return all(_nonnegative(a) for a in e.args)
    return False


def kink_args(exprs: Sequence[sp.Expr]) -> list[sp.Expr]:
    """Arguments whose zero sets are kinks or jumps of the integrands."""
    out: set = set()
    for e in exprs:
        for k in e.atoms(*KINKS):
            rec = record_of(k)
            out.update(rec.kinks.at(*k.args) if rec is not None else [k.args[0]])
    return sorted(out, key=sp.default_sort_key)


def _branches(k: sp.Expr) -> list[sp.Expr]:
    rec = record_of(k)
    return rec.kinks.branches(NAMES, *k.args) if rec is not None else _SYMPY_BRANCHES[k.func](k.args[0])


def affine_pieces(g: sp.Expr, syms: Sequence[sp.Symbol], cap: int = 64) -> list[tuple] | None:
    """The affine forms (w, c) whose zero lines cover the zero set of g; None if g is not
    piecewise affine (or has more than ``cap`` pieces)."""
    forms: list = []
    todo = [g]
    while todo:
        e = todo.pop()
        ks = e.atoms(*KINKS)
        if ks:
            k = next(iter(ks))
            todo += [e.xreplace({k: b}) for b in _branches(k)]
            if len(todo) + len(forms) > cap:
                return None
            continue
        if e.free_symbols and not e.is_polynomial(*syms):         # e.g. relu(x·tanh(y)): not affine
            return None
        P = sp.Poly(e, *syms) if e.free_symbols else None
        if P is not None and (P.total_degree() > 1 or not all(c.is_number for c in P.coeffs())):
            return None
        w = [float(P.coeff_monomial(s)) if P is not None else 0.0 for s in syms]
        forms.append((w, float(P.coeff_monomial(1)) if P is not None else float(e)))
    return forms


def linear_forms(exprs: Sequence[sp.Expr], syms: Sequence[sp.Symbol]) -> np.ndarray:
    """Coefficient vectors of the maximal linear subexpressions w·z of exprs: the
    integrands depend on z only through these forms (rows of the result)."""
    index = {s: k for k, s in enumerate(syms)}
    memo: dict = {}
    rows: list = []
    depends: dict = {}                                  # (memoised: sympy's free_symbols is not)
    visited: set = set()

    def dep(e: sp.Expr) -> bool:                        # does e involve any of syms?
        got = depends.get(e)
        if got is None:
            got = depends[e] = e in index or any(dep(a) for a in e.args)
        return got

    def linear(e: sp.Expr) -> np.ndarray | None:       # w if e = w·z + const, else None
        if e in memo:
            return memo[e]
        out = None
        if e in index:
            out = np.eye(len(syms))[index[e]]
        elif not dep(e):
            out = np.zeros(len(syms)) if e.is_number else None
        elif e.is_Add:
            parts = [linear(a) for a in e.args]
            out = None if any(p is None for p in parts) else np.sum(parts, axis=0)
        elif e.is_Mul:
            k, rest = e.as_independent(*index.keys(), as_Add=False)
            w = linear(rest) if k.is_number and rest != e else None
            out = None if w is None else float(k) * w
        memo[e] = out
        return out

    def visit(e: sp.Expr) -> None:                      # each distinct sub-expression once
        if e in visited:
            return
        visited.add(e)
        w = linear(e)
        if w is not None:
            rows.append(w)
        elif dep(e):
            for a in e.args:
                visit(a)
    for e in exprs:
        visit(e)
    return np.array(rows).reshape(-1, len(syms))


def expanded_size(expr: sp.Expr) -> float:
    """An estimate (an upper bound up to merging of like terms) of the size of
    ``sp.expand(expr)``: the number of tree nodes summed over the terms of the
    multiplied-out form, arguments of functions expanded too.  Linear in the size of
    the expression DAG, so it can guard an expansion that would take minutes (products
    of nested kinks multiply out to 2^depth terms, each as long as the whole)."""
    memo: dict = {}

    def walk(e: sp.Expr) -> tuple[float, float]:          # (terms, total size)
        if e in memo:
            return memo[e]
        if not e.args:
            out = (1.0, 1.0)
        elif e.is_Add:
            parts = [walk(a) for a in e.args]
            out = (sum(p[0] for p in parts), sum(p[1] for p in parts))
        elif e.is_Mul:
            parts = [walk(a) for a in e.args]
            n = float(np.prod([p[0] for p in parts]))
            out = (n, n * sum(p[1] / p[0] for p in parts))
        elif e.is_Pow and e.exp.is_Integer and e.exp > 1:
            nb, sb = walk(e.base)
            k = int(e.exp)
            n = float(math.comb(int(nb) + k - 1, k)) if nb < 1e6 else np.inf
            out = (n, n * min(k, nb) * (sb / nb + 1))      # a term: ≤ min(k, nb) powers of base terms
        else:                                               # a function, or a power kept whole
            out = (1.0, 1.0 + sum(walk(a)[1] for a in e.args))
        out = (min(out[0], np.inf), min(out[1], np.inf))
        memo[e] = out
        return out
    return walk(expr)[1]
