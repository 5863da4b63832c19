"""The minimal Gaussian basis of an expectation: linear forms as coordinates.

A Z-expression of a deep program is a nonlinear function of *linear forms* in many base
Gaussians: Z^{x_l} = Z^{x_0} + Ẑ_1 + … + Ẑ_l in a ResNet, say.  Its expectation needs only the
joint law of the forms it sees, not of every Gaussian they span:

    E f(a₁·g, …, a_k·g) = E f(u₁, …, u_k),   u ~ N(0, C),  C_ij = a_iᵀ Σ a_j,

so E[relu(u) relu(v)] costs a 2×2 covariance however many Ẑ's u and v add up.
:func:`to_forms` rewrites an integrand that way: every maximal sum of (number × Gaussian) terms
becomes one coordinate (equal sums become the same coordinate), a coordinate of variance 0 is the
number 0, and C is computed from the base covariance by bilinearity.  The coordinates are named
``ℓ0, ℓ1, …`` in the order the walk meets them, so integrands of the same shape at different
layers are the same sympy expression (the key of :mod:`.shapes`).

The walk visits each distinct sub-expression once (sympy shares equal sub-trees), so an integrand
whose tree repeats a sub-expression exponentially often costs its number of distinct nodes.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np
import sympy as sp

#: the prefix of the coordinates (no name of a program's variables contains it)
PREFIX = "ℓ"


def coordinate(k: int) -> sp.Symbol:
    """The k-th linear-form coordinate ℓk."""
    return sp.Symbol(f"{PREFIX}{k}", real=True)


@dataclass(frozen=True)
class Forms:
    """E[expr] over ``coords`` ~ N(0, ``cov``) and the independent laws left in ``expr`` (the
    coordinates of variance 0 are gone: each was replaced by 0).

    ``weights[k]`` is the linear form behind ``coords[k]`` as {base Gaussian: coefficient};
    ``cov`` is (k, k), or (P, k, k) for a batch of P covariances."""
    expr: sp.Expr
    coords: tuple[sp.Symbol, ...]
    cov: np.ndarray
    weights: tuple[Mapping[sp.Symbol, float], ...]


def linear_term(node: sp.Expr, gaussian: Callable[[sp.Basic], bool]) -> tuple[sp.Symbol, float] | None:
    """(g, c) when ``node`` is c·g for a base Gaussian g and a number c, else None."""
    if gaussian(node):
        return node, 1.0
    if node.is_Mul and len(node.args) == 2 and node.args[0].is_Number and gaussian(node.args[1]):
        return node.args[1], float(node.args[0])
    return None


def to_forms(expr: sp.Expr, gaussians: frozenset[sp.Symbol],
             cov_row: Callable[[sp.Symbol], Mapping[sp.Symbol, float | np.ndarray]],
             known: dict | None = None) -> Forms:
    """``expr`` with every maximal sum of number × Gaussian terms replaced by a coordinate
    (module doc); ``cov_row(g)`` maps each Gaussian h with Cov(g, h) ≠ 0 to that covariance
    (g itself included), so C costs the non-zero covariances the forms touch, not (size of a form)².
    ``known`` remembers C's entries across calls, by the pair of forms (a form's covariance with
    another never changes: later Gaussians are not in either)."""
    index: dict[frozenset, int] = {}
    weights: list[dict[sp.Symbol, float]] = []
    memo: dict[sp.Basic, sp.Basic] = {}
    is_gaussian = lambda node: node in gaussians

    def form(terms: list[tuple[sp.Symbol, float]]) -> sp.Expr:
        weight: dict[sp.Symbol, float] = {}
        for g, c in terms:
            weight[g] = weight.get(g, 0.0) + c
        weight = {g: c for g, c in weight.items() if c != 0}
        if not weight:
            return sp.Integer(0)
        key = frozenset(weight.items())
        if key not in index:
            index[key] = len(weights)
            weights.append(weight)
        return coordinate(index[key])

    touches: dict[sp.Basic, bool] = {}

    def has_gaussian(node: sp.Basic) -> bool:
        """Whether a base Gaussian occurs in node (memoised: sympy's free_symbols walks the tree)."""
        if node not in touches:
            touches[node] = node in gaussians or any(has_gaussian(a) for a in node.args)
        return touches[node]

    def rebuild(node: sp.Basic, args: list[sp.Basic]) -> sp.Basic:
        """node's head over new args; a function head unevaluated (its arguments are coordinates
        now: tanh's own evaluation walks the whole tree, once per shared occurrence)."""
        if isinstance(node, sp.Function):
            return node.func(*args, evaluate=False)
        return node.func(*args)

    def walk(node: sp.Basic) -> sp.Basic:
        if node in memo:
            return memo[node]
        term = linear_term(node, is_gaussian)
        if term is not None:
            out = form([term])
        elif not node.args or not has_gaussian(node):
            out = node
        elif node.is_Add:
            terms = [linear_term(a, is_gaussian) for a in node.args]
            linear = [t for t in terms if t is not None]
            rest = [walk(a) for a, t in zip(node.args, terms) if t is None]
            out = sp.Add(form(linear) if linear else sp.Integer(0), *rest)
        else:
            out = rebuild(node, [walk(a) for a in node.args])
        memo[node] = out
        return out

    reduced = walk(expr)
    C = form_covariance(weights, cov_row, list(index), known)
    live = [i for i in range(len(weights)) if not np.all(C[..., i, i] == 0)]
    if len(live) < len(weights):        # a centred coordinate of variance 0 is 0
        reduced = reduced.xreplace({coordinate(i): sp.Integer(0) for i in range(len(weights)) if i not in live})
        C = C[..., live, :][..., :, live]
    return Forms(reduced, tuple(coordinate(i) for i in live), C, tuple(weights[i] for i in live))


def form_covariance(weights: list[Mapping[sp.Symbol, float]],
                    cov_row: Callable[[sp.Symbol], Mapping[sp.Symbol, float | np.ndarray]],
                    keys: list[frozenset] | None = None, known: dict | None = None) -> np.ndarray:
    """C_ij = a_iᵀ Σ a_j = Σ_g a_ig Σ_{h: Σ_gh ≠ 0} Σ_gh a_jh, over the non-zero Σ_gh only; the
    entries already in ``known`` (by the pair of ``keys``, the forms' identities) are not redone.

    A covariance may be an array (P,) (one number per item of a batch): C is then (P, k, k)."""
    k = len(weights)
    known = {} if known is None else known
    keys = keys or [frozenset(w.items()) for w in weights]
    entries: dict[tuple[int, int], float | np.ndarray] = {}
    for i in range(k):
        missing = [j for j in range(i + 1) if (keys[i], keys[j]) not in known]
        if missing:
            reach: dict[sp.Symbol, float | np.ndarray] = {}          # (Σ a_i)_h for every h it reaches
            for g, a in weights[i].items():
                for h, value in cov_row(g).items():
                    reach[h] = accumulate(reach.get(h), a, value)
        for j in missing:
            total = None
            for h, b in weights[j].items():
                if h in reach:
                    total = accumulate(total, b, reach[h])
            known[(keys[i], keys[j])] = known[(keys[j], keys[i])] = 0.0 if total is None else total
        for j in range(i + 1):
            entries[(i, j)] = known[(keys[i], keys[j])]
    batch = np.broadcast_shapes(*(np.shape(v) for v in entries.values())) if entries else ()
    C = np.zeros(batch + (k, k))
    for (i, j), value in entries.items():
        C[..., i, j] = C[..., j, i] = value
    return C


def accumulate(total: float | np.ndarray | None, coeff: float, value: float | np.ndarray) -> float | np.ndarray:
    """total + coeff·value, without arithmetic on arrays where coeff = 1 and total is None."""
    term = value if coeff == 1.0 else coeff * value
    return term if total is None else total + term
