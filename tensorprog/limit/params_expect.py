"""Expectations with the params kept as symbols (``tpc compile --symbolic``, :mod:`.symbolic_params`).

An expectation E[f(Z; p)] over centred Gaussians Z with covariance Σ(p) is a closed form in the
params p when the engine has one as a function of the *numbers* it is given.  The covariance
entries and the param sub-expressions of f are closed forms of earlier expectations: as trees
they grow with depth (every layer repeats the previous covariances several times), and sympy's
simplification of the engine's result is exponential in that size.  So each is replaced by an
*atom* (:func:`atomize`: a fresh real symbol, positive for a variance), the engine works on the
small expression in the atoms, and the atoms' expressions go back in afterwards
(:func:`closed_form`): the cost is that of one small closed form per expectation, and the
result shares its sub-expressions with the covariances (a DAG, linear in depth).

Where there is no closed form (a param inside a nonlinearity, a numeric expectation, a closed
form whose tree exceeds :data:`MAX_TREE`), the caller takes the numbers route: the expression at
the params' values (:func:`at_values`), by the same linear-form route as a compile without
``--symbolic``; what rests on such an expectation takes the numbers route directly.
"""
from __future__ import annotations

from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from ..expect.budget import Budget
from ..expect.engine import Estimate, Law, expect
from ..expect.linalg import approximate
from ..symbolic.dag import distinct_nodes, post_order
from ..symbolic.evaluate import evaluate

#: a closed form whose tree (every shared sub-expression counted once per occurrence) is larger
#: than this is dropped for its value: printing, comparing and simplifying walk the tree
MAX_TREE = 1200
#: integrands with more distinct sub-expressions than this go straight to the numbers route
MAX_DAG = 400
#: covariances in the params with more distinct entries in the params than this, or a function
#: head over more Gaussians than MAX_GAUSSIANS_IN_HEAD (relu(Ẑ^{Wh} + Ẑ^{Ux} + b)), go to the
#: numbers route: the engine's symbolic linear algebra (conditioning, reducing a basis) takes
#: seconds to minutes beyond them
MAX_COV_ATOMS = 8
MAX_GAUSSIANS_IN_HEAD = 2
#: an exact constant larger than BIG_NUMBER nodes as a tree with MANY_HEADS distinct function heads
#: (``compile --symbolic``: built over many steps, as the sums of exp() of a transformer's attention
#: weights) goes to the engine as its value
#: (``Exact.closed_form`` in :mod:`.interpret`): the engine's exact algebra multiplies such sums out
#: (gp4a_transformer, when its data constants were read as rationals (:mod:`.values`):
#: E[relu(a + b) relu(c + d)] over covariance entries of 31-54 nodes, six to ten
#: exp() terms each, took more than 10 CPU minutes and 20 GB; simplifying a scalar of 35 nodes too)
BIG_NUMBER = 24
MANY_HEADS = 4


def tree_size(expr: sp.Basic, most: int) -> int:
    """The number of nodes of ``expr`` as a tree (a shared sub-expression once per occurrence),
    computed over its DAG; any count above ``most`` is reported as ``most + 1``."""
    sizes: dict[sp.Basic, int] = {}
    for node in post_order(expr):
        sizes[node] = min(most + 1, 1 + sum(sizes[a] for a in node.args))
    return sizes[expr]


def number_at(expr: sp.Expr, values: Mapping[sp.Symbol, float]) -> float:
    """The float value of ``expr``, an expression in the params, at their ``values`` (evaluated
    over its DAG by a numpy tape; sympy's own evaluation as a fallback)."""
    if expr.is_number:
        return float(expr)
    used = {s: values[s] for s in distinct_nodes(expr) if s in values}
    try:
        out = complex(np.asarray(evaluate(expr, {s: np.float64(v) for s, v in used.items()})))
    except (ValueError, TypeError, KeyError):
        out = complex(sp.N(expr.subs(used), 17))
    return out.real


def param_nodes(expr: sp.Basic, params: Mapping[sp.Symbol, float]) -> dict[sp.Basic, bool]:
    """{node: whether a param occurs in it} over the distinct sub-expressions of ``expr``."""
    has: dict[sp.Basic, bool] = {}
    for node in post_order(expr):
        has[node] = node in params or any(has[a] for a in node.args)
    return has


def _only_params(expr: sp.Basic, params: Mapping[sp.Symbol, float]) -> dict[sp.Basic, bool]:
    """{node: whether its symbols are all params (at least one)} over the distinct sub-expressions."""
    out: dict[sp.Basic, bool] = {}
    other: dict[sp.Basic, bool] = {}
    for node in post_order(expr):
        other[node] = (node.is_Symbol and node not in params) or any(other[a] for a in node.args)
        out[node] = not other[node] and (node in params or any(out[a] for a in node.args))
    return out


class Atoms:
    """Fresh symbols standing for expressions in the params: ``expr`` {atom: expression},
    ``value`` {atom: float at the params' values}; equal expressions share an atom."""

    def __init__(self, values: Mapping[sp.Symbol, float]) -> None:
        self.values = values
        self.expr: dict[sp.Symbol, sp.Expr] = {}
        self.value: dict[sp.Symbol, float] = {}
        self._of: dict[sp.Expr, sp.Symbol] = {}

    def of(self, expr: sp.Expr, variance: bool = False) -> sp.Symbol:
        """The atom of ``expr`` (a param stands for itself); ``variance``: a covariance diagonal,
        positive where its value is (a variance is never negative)."""
        if expr in self.values:
            self.value[expr] = self.values[expr]
            return expr
        if expr not in self._of:
            value = approximate(expr).real if expr.is_number else number_at(expr, self.values)
            atom = sp.Dummy(f"a{len(self._of)}", positive=True) if variance and value > 0 else \
                sp.Dummy(f"a{len(self._of)}", real=True)
            self._of[expr], self.expr[atom], self.value[atom] = atom, expr, value
        return self._of[expr]

    def restore(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` with every atom replaced by its expression."""
        return expr.xreplace(self.expr)


def atomize(expr: sp.Expr, atoms: Atoms, big: int | None = None) -> sp.Expr:
    """``expr`` with each maximal sub-expression in the params alone replaced by its atom; with
    ``big``, each maximal number sub-expression larger than ``big`` nodes as a tree too."""
    only = _only_params(expr, atoms.values)
    large = large_numbers(expr, big) if big is not None else set()
    memo: dict[sp.Basic, sp.Basic] = {}
    for node in post_order(expr):
        if only[node]:
            memo[node] = atoms.of(node)
        elif not node.args or node in large:       # a large number: atomized where it is maximal
            memo[node] = node
        else:
            args = [atoms.of(a) if a in large else memo[a] for a in node.args]
            memo[node] = node if all(a is b for a, b in zip(args, node.args)) else node.func(*args)
    return atoms.of(expr) if expr in large else memo[expr]


def large_numbers(expr: sp.Basic, big: int) -> set[sp.Basic]:
    """The number sub-expressions of ``expr`` (no symbols) larger than ``big`` nodes as a tree and
    holding at least :data:`MANY_HEADS` distinct function heads of numbers (exp(r₁), …, exp(r₆)
    summed: a nested arc-cosine constant has one acos a layer)."""
    sizes: dict[sp.Basic, int] = {}
    number: dict[sp.Basic, bool] = {}
    heads: dict[sp.Basic, frozenset] = {}       # its distinct function heads, MANY_HEADS at most
    for node in post_order(expr):
        sizes[node] = min(big + 1, 1 + sum(sizes[a] for a in node.args))
        number[node] = not node.is_Symbol and all(number[a] for a in node.args)
        below = frozenset({node}) if isinstance(node, sp.Function) else frozenset()
        for a in node.args:
            if len(below) >= MANY_HEADS:
                break
            below |= heads[a]
        heads[node] = below
    return {node for node, size in sizes.items() if size > big and number[node] and len(heads[node]) >= MANY_HEADS}


def at_values(expr: sp.Expr, values: Mapping[sp.Symbol, float], big: int | None = None) -> sp.Expr:
    """``expr`` with each maximal sub-expression in the params alone replaced by its float value
    at ``values`` (over the DAG: sympy's ``subs`` walks the tree); with ``big``, each maximal
    number sub-expression of more than ``big`` nodes as a tree too."""
    atoms = Atoms(values)
    reduced = atomize(expr, atoms, big)
    return reduced.xreplace({a: sp.Float(v) for a, v in atoms.value.items()})


def closed_form(expr: sp.Expr, gaussians: Sequence[sp.Symbol], cov: Callable[[sp.Symbol, sp.Symbol], sp.Expr],
                laws: Mapping[sp.Symbol, Law], values: Mapping[sp.Symbol, float],
                budget: Budget) -> Estimate | None:
    """E[expr] as a closed form in the params (``values`` {param symbol: value}), or None where
    there is none (the caller then takes the numbers route, :func:`at_values`).

    ``cov(g, h)`` is Cov(g, h) of the ``gaussians``.  With the param expressions of ``expr`` and
    of the covariance as atoms a_k, expr = Σ_m a^m f_m(Z) must be a polynomial in the atoms of
    ``expr`` (None otherwise); then E[expr] = Σ_m a^m E[f_m], a closed form when each E[f_m] is
    one.  Without params anywhere it is the engine's estimate as it is (exact or numeric)."""
    if len(distinct_nodes(expr, MAX_DAG)) > MAX_DAG:
        return None
    atoms = Atoms(values)
    reduced = atomize(expr, atoms)
    in_expr = sorted(atoms.value, key=sp.default_sort_key)
    matrix = sp.Matrix(len(gaussians), len(gaussians), lambda i, j: _entry(cov(gaussians[i], gaussians[j]),
                                                                            atoms, i == j))
    in_cov = {e for e in matrix if e.is_Symbol}
    if len(in_cov) > MAX_COV_ATOMS or (in_cov and gaussians_in_a_head(reduced, gaussians) > MAX_GAUSSIANS_IN_HEAD):
        return None
    if not atoms.value:
        return expect(reduced, gaussians, matrix, laws, exact=True, budget=budget)
    try:
        terms = sp.Poly(reduced, *in_expr).terms() if in_expr else [((), reduced)]
    except sp.PolynomialError:
        return None
    total = sp.Integer(0)
    for powers, coeff in terms:
        try:
            est = expect(coeff, gaussians, matrix, laws, exact=True, budget=budget)
        except (ValueError, TypeError):     # TypeError: a numeric rule reached a covariance in atoms
            return None
        if est.exact is None or est.method != "exact":
            return None
        total += sp.Mul(*[q ** k for q, k in zip(in_expr, powers)]) * est.exact
    value = complex(sp.N(total.xreplace({a: sp.Float(v, 17) for a, v in atoms.value.items()}), 17)).real
    form = atoms.restore(total)
    return Estimate(value, 0.0, "exact", form if tree_size(form, MAX_TREE) <= MAX_TREE else None)


def gaussians_in_a_head(expr: sp.Expr, gaussians: Sequence[sp.Symbol]) -> int:
    """The most Gaussians under one function head of ``expr`` (relu(a + b) has 2)."""
    under: dict[sp.Basic, frozenset] = {}
    most, gaussian = 0, set(gaussians)
    for node in post_order(expr):
        under[node] = frozenset({node} & gaussian).union(*(under[a] for a in node.args))
        if isinstance(node, sp.Function):
            most = max(most, len(under[node]))
    return most


def _entry(value: sp.Expr, atoms: Atoms, diagonal: bool) -> sp.Expr:
    """A covariance entry: itself if a number, else its atom."""
    if not isinstance(value, sp.Basic):           # a plain number (the ledger's 0 for no covariance)
        value = sp.Integer(value) if isinstance(value, int) else sp.Float(value)
    return value if value.is_number else atoms.of(value, variance=diagonal)
