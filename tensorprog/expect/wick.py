"""Gaussian moments of monomials: E[z^α], z ~ N(0, Σ), by Wick/Isserlis.

    E[z_i z^β] = Σ_j Σ_ij β_j E[z^{β−e_j}],   E[x^p] = (p−1)!! σ^p (p even), 0 (p odd).

Σ may hold exact numbers, Floats or free parameters; the result is expanded.
"""
from __future__ import annotations

import sympy as sp

from .linalg import Matrix


def wick(alpha: tuple[int, ...], cov: Matrix, memo: dict) -> sp.Expr:
    """E[z^α] by Isserlis' recursion E[z_i z^β] = Σ_j Σ_ij β_j E[z^{β−e_j}].

    One variable is (p−1)!! σ^p directly; otherwise the recursion runs on an explicit
    stack (no Python recursion, so E[x^4000] or E[x^2000 y^2000] cannot overflow it)."""
    if sum(alpha) % 2:
        return sp.Integer(0)
    if not any(alpha):
        return sp.Integer(1)
    if alpha in memo:
        return memo[alpha]
    nz = [k for k, a in enumerate(alpha) if a]
    if len(nz) == 1:
        i, p = nz[0], alpha[nz[0]]
        memo[alpha] = out = sp.factorial2(p - 1) * cov[i, i] ** (p // 2)
        return out

    def children(a: tuple) -> list[tuple[sp.Expr, tuple]]:
        i = next(k for k, x in enumerate(a) if x)
        beta = list(a)
        beta[i] -= 1
        out = []
        for j, bj in enumerate(beta):
            if bj and cov[i, j] != 0:
                gamma = list(beta)
                gamma[j] -= 1
                out.append((cov[i, j] * bj, tuple(gamma)))
        return out

    def known(a: tuple) -> bool:
        return a in memo or not any(a) or sum(a) % 2 == 1

    stack = [alpha]
    while stack:
        a = stack[-1]
        if known(a):
            stack.pop()
            continue
        kids = children(a)
        todo = [g for _, g in kids if not known(g)]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[a] = sp.expand(sp.Add(*[c * (memo[g] if g in memo else sp.Integer(1) if not any(g) else 0)
                                     for c, g in kids]))
    return memo[alpha]
