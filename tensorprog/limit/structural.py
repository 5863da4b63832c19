"""Structural zeros of Ż coefficients: E[∂Z^x/∂Ẑ] = 0 recognised by a rule, before any sympy.diff.

Let S be a set of the Gaussians in Z^x that is independent of the others (no covariance between S
and the rest: a connected block of Σ restricted to Z^x's Gaussians, or a union of such blocks),
centred, hence symmetric: S → −S keeps the joint law.  If Z^x is odd in S,
Z^x(−s, t) = −Z^x(s, t), and Ẑ is not in S, then ∂Z^x/∂Ẑ is odd in S too (differentiate the
identity in t), so E[∂Z^x/∂Ẑ] = E_t[E_s[odd in s]] = 0.

This is the backward pass: Z^{dh} is linear in the gradient's Gaussians (g and the Ẑ^{Wᵀ·}), which
are independent of the forward pass's Ẑ^{W·}, so every Ż of a backward product is exactly 0 and
neither the derivative (``sympy.diff`` of a large Z) nor its expectation is computed.  The test is
:func:`..expect.analysis.parity`, one walk over the expression's DAG.
"""
from __future__ import annotations

from typing import Iterable, Mapping

import sympy as sp

from ..expect.analysis import parity


def independent_blocks(gaussians: Iterable[sp.Symbol],
                       cov: Mapping[tuple[sp.Symbol, sp.Symbol], sp.Expr]) -> list[set[sp.Symbol]]:
    """The connected components of ``gaussians`` under Cov(a, b) ≠ 0 (from the pairs in ``cov``)."""
    gs = set(gaussians)
    parent = {g: g for g in gs}

    def root(g: sp.Symbol) -> sp.Symbol:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g
    for (a, b), value in cov.items():
        if a in gs and b in gs and a != b and value != 0:
            parent[root(a)] = root(b)
    blocks: dict[sp.Symbol, set] = {}
    for g in gs:
        blocks.setdefault(root(g), set()).add(g)
    return sorted(blocks.values(), key=lambda b: sorted(map(str, b)))


class OddBlocks:
    """For one Z^x: the independent blocks of its Gaussians in which it is odd (module doc).
    ``zero(hat)`` says whether E[∂Z^x/∂hat] = 0 by that rule."""

    def __init__(self, expr: sp.Expr, gaussians: Iterable[sp.Symbol],
                 cov: Mapping[tuple[sp.Symbol, sp.Symbol], sp.Expr]):
        blocks = independent_blocks(gaussians, cov)
        self.odd = [b for b in blocks if parity(expr, b) == -1]

    def zero(self, hat: sp.Symbol) -> bool:
        """Whether some block in which Z^x is odd leaves ``hat`` out."""
        return any(hat not in b for b in self.odd)
