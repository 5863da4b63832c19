"""Multiplying out sums fast: ``sp.expand`` for polynomials in a few kink atoms.

The integrands that ``blocks.split_norms`` and ``reduce.collected`` multiply out are polynomials in
the Gaussians, the block radii and a few non-polynomial atoms (steps, Dirac masses, negative powers
of a radius).  :func:`multiply_out` treats every such atom as an opaque generator (its own
arguments expanded by ``sp.expand``) and multiplies the sums out in a dictionary of monomials
with machine coefficients (``fractions.Fraction`` while every number is rational, ``float`` once a
Float appears, as sympy's arithmetic would), then rebuilds the sum.  Equal to ``sp.expand(expr)``
term by term up to the order of floating-point additions, at a fraction of its cost: sympy
re-flattens every partial product, this only adds exponent tuples.
"""
from __future__ import annotations

from fractions import Fraction

import sympy as sp

Poly = dict          # {(exponent per generator): coefficient}


class _Gens:
    """The opaque generators met so far: expression → index."""

    def __init__(self) -> None:
        self.index: dict[sp.Expr, int] = {}
        self.exprs: list[sp.Expr] = []

    def of(self, e: sp.Expr) -> int:
        if e not in self.index:
            self.index[e] = len(self.exprs)
            self.exprs.append(e)
        return self.index[e]


def multiply_out(expr: sp.Expr) -> sp.Expr:
    """``sp.expand(expr)``: the sum of monomials (module doc)."""
    return sp.Add(*[sp.Mul(c, *[g ** k for g, k in fs]) for c, fs in multiplied_terms(expr)])


def multiplied_terms(expr: sp.Expr) -> list[tuple[sp.Number, list[tuple[sp.Expr, int]]]]:
    """The terms of ``sp.expand(expr)`` as (coefficient, [(generator, exponent)]), not multiplied
    into sympy products (for callers that take every term apart again): the generators are the
    symbols and the opaque atoms of the module doc, each term's distinct and in a fixed order."""
    gens = _Gens()
    memo: dict = {}
    poly = _poly(expr, gens, memo)
    terms = []
    for mono, c in poly.items():
        if c == 0:
            continue
        coeff = sp.Rational(c.numerator, c.denominator) if isinstance(c, Fraction) else sp.Float(c)
        terms.append((coeff, [(gens.exprs[i], k) for i, k in mono if k]))
    return terms


def _poly(e: sp.Expr, gens: _Gens, memo: dict) -> Poly:
    """e as {monomial: coefficient}; a monomial is a sorted tuple of (generator, exponent)."""
    if e in memo:
        return memo[e]
    if e.is_Rational:
        out = {(): Fraction(int(e.p), int(e.q))}
    elif e.is_Float:
        out = {(): float(e)}
    elif e.is_Add:
        out: Poly = {}
        for a in e.args:
            for m, c in _poly(a, gens, memo).items():
                out[m] = out.get(m, 0) + c
    elif e.is_Mul:
        out = {(): Fraction(1)}
        for a in e.args:
            out = _times(out, _poly(a, gens, memo))
    elif e.is_Pow and e.exp.is_Integer and e.exp > 0 and (e.base.is_Add or e.base.is_Mul):
        base = _poly(e.base, gens, memo)
        out = {(): Fraction(1)}
        for _ in range(int(e.exp)):
            out = _times(out, base)
    elif e.is_Pow and e.exp.is_Integer and e.exp > 0 and e.base.is_Symbol:
        out = {((gens.of(e.base), int(e.exp)),): Fraction(1)}
    else:
        x = sp.expand(e) if e.args else e
        if x != e and (x.is_Add or x.is_Mul or x.is_Number):
            out = _poly(x, gens, memo)
        else:
            out = {((gens.of(x), 1),): Fraction(1)}
    memo[e] = out
    return out


def _times(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ma, ca in a.items():
        for mb, cb in b.items():
            m = _merge(ma, mb)
            out[m] = out.get(m, 0) + ca * cb
    return out


def _merge(a: tuple, b: tuple) -> tuple:
    """The product of two monomials (sorted (generator, exponent) tuples)."""
    if not a:
        return b
    if not b:
        return a
    d = dict(a)
    for g, k in b:
        d[g] = d.get(g, 0) + k
    return tuple(sorted(d.items()))
