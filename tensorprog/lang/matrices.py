"""Matrix expressions of the front end: ``outer(g, h)`` and rank-one updates of random matrices.

``outer(g, h)`` is the matrix g hᵀ/k for vectors g (width m) and h (width k): the columns'
size divides, as a matrix's entries are scaled by its fan-in.  Matrices combine linearly:
``A + B``, ``A - B``, ``c * A``, ``A / c``, ``-A`` and ``A.T`` for scalars c, so
``W = W - lr * outer(g, h)`` rebinds W to the :class:`~.values.MatExpr`
``1·W₀ − lr·g hᵀ/k``: the random base matrix plus a finite sum of rank-one terms.

A product expands by definition, into the equations the language already has:

    (c₀ W₀ + Σ_i c_i u_i v_iᵀ/|d_i|) x = c₀ W₀x + Σ_i c_i u_i · mean(v_i x) · |w(v_i)|/|d_i|

(a MatMul, Moments and one Nonlin; mean over the width w(v_i) of v_i, whose size |w| relative to
|d_i| is the dims' ratio).  Transposing swaps each term's vectors (keeping its divisor), so
Aᵀy expands the same way.  Both back ends therefore mean the same thing by construction; a
matrix that is only a base matrix (no terms, coefficient 1) is the plain MatMul as before.

A matrix with more than ``expand_terms`` terms (:data:`EXPAND_TERMS`; a training loop's matrix
after a few steps) is not expanded: the expansion would give every product one Moment per
term, an IR of size O(T²) after T updates.  Its terms become a chain of ``RankOne`` equations
(one per term, shared by every product with the matrix and its transpose, and by the chains of
later updates, which extend it), and the product is

    c₀ W₀x + LowRank(chain, x)        (LowRank: Σ_i c_i u_i · mean(v_i x) · |w(v_i)|/|d_i|)

— the same value, as one equation that the back ends compute from the chain's vectors stacked
(an O(n·k) product), and an IR linear in the number of updates.  The limit compiler lowers
such a program again with ``expand_terms=None`` (always expand: :func:`.lower.expanded`).
"""
from __future__ import annotations

from typing import Callable, Mapping, Protocol

from .. import ir
from ..errors import TPTypeError
from .builder import IRBuilder
from .values import MatExpr, MatVal, RankOne, RExpr, located, runtime

#: a scalar coefficient: a float or a scalar runtime value
Coeff = "float | RExpr"
#: a product by a matrix with more rank-one terms than this sums them in Nonlins of this many
#: terms (the same additions in the same order: the same numbers), so that a matrix updated at
#: every step of a long training run stays within the language's nesting depth
SUM_CHUNK = 32
#: a matrix with more rank-one terms than this is a product by a RankOne chain (LowRank), not an
#: expansion (the programs of a few updates keep their IR and their numbers)
EXPAND_TERMS = 32


class HasDims(Protocol):
    @property
    def dims(self) -> Mapping[str, float]: ...


class MatrixAlgebra:
    """Linear combinations of a random matrix and rank-one terms, and their products with vectors.

    ``equations``: the shared IR builder; ``scope.dims``: width name -> size relative to n (read when a
    product needs it: widths are declared as the program runs); ``combine``:
    the expression lowering's typed node builder (fn, parts) -> RExpr; ``plain_matmul(node, M, x)``:
    the MatMul of a matrix variable (or its transpose) and a vector."""

    def __init__(self, equations: IRBuilder, scope: HasDims,
                 combine: Callable[..., RExpr], plain_matmul: Callable[..., RExpr]) -> None:
        self.equations, self.scope = equations, scope
        self.combine, self.plain_matmul = combine, plain_matmul
        #: the most terms a product expands (None: all), see the module docstring
        self.expand_terms: int | None = EXPAND_TERMS
        self.links: dict[tuple[int, RankOne], int] = {}      # (previous link, term) -> its RankOne
        self.coeffs: dict[RExpr, int] = {}                    # a runtime coefficient -> its Scalar

    # ---- values
    def of(self, value: MatVal | MatExpr) -> MatExpr:
        """A matrix as a MatExpr (a matrix variable: coefficient 1, no terms)."""
        if isinstance(value, MatExpr):
            return value
        mat = self.equations.eqn(value.var)
        rows, cols = (mat.cols, mat.rows) if value.transposed else (mat.rows, mat.cols)
        return MatExpr(value, 1.0, (), rows, cols)

    def outer(self, node, g: RExpr, h: RExpr) -> MatExpr:
        """g hᵀ / |width(h)|."""
        left, right = (self.equations.materialize(node, v) for v in (g, h))
        return MatExpr(None, 0.0, (RankOne(1.0, left, right, h.width),), g.width, h.width)

    def transpose(self, a: MatVal | MatExpr) -> MatVal | MatExpr:
        if isinstance(a, MatVal):
            return MatVal(a.var, not a.transposed)
        base = MatVal(a.base.var, not a.base.transposed) if a.base is not None else None
        terms = tuple(RankOne(t.coeff, t.right, t.left, t.denom) for t in a.terms)
        return MatExpr(base, a.base_coeff, terms, a.cols, a.rows)

    # ---- arithmetic
    def add(self, node, a: MatVal | MatExpr, b: MatVal | MatExpr, sign: float) -> MatExpr:
        """a + sign·b, for matrices of one shape with at most one random base matrix between them."""
        a, b = self.of(a), self.of(b)
        if (a.rows, a.cols) != (b.rows, b.cols):
            raise located(TPTypeError, node, f"matrices of different shapes ({a.rows} x {a.cols} and "
                          f"{b.rows} x {b.cols})")
        if a.base is not None and b.base is not None and a.base != b.base:
            raise located(TPTypeError, node, "a sum of two different random matrices (or of a matrix and its "
                          "transpose) is not a matrix of the language: add their products instead, W @ v + V @ v")
        b = self.scale(node, sign, b) if sign != 1 else b
        base = a.base if a.base is not None else b.base
        coeff = self.plus(node, a.base_coeff if a.base is not None else 0.0,
                          b.base_coeff if b.base is not None else 0.0)
        return MatExpr(base, coeff, a.terms + b.terms, a.rows, a.cols)

    def scale(self, node, c: Coeff, a: MatVal | MatExpr) -> MatExpr:
        """c·a for a scalar c."""
        a = self.of(a)
        terms = tuple(RankOne(self.times(node, c, t.coeff), t.left, t.right, t.denom) for t in a.terms)
        return MatExpr(a.base, self.times(node, c, a.base_coeff), terms, a.rows, a.cols)

    def times(self, node, c: Coeff, d: Coeff) -> Coeff:
        """c·d, with 1·d = d and −1·d = −d kept exact in the tree (no multiplication by a constant)."""
        if isinstance(c, float) and isinstance(d, float):
            return c * d
        if isinstance(c, float) and c in (1.0, -1.0) or isinstance(d, float) and d in (1.0, -1.0):
            one, other = (c, d) if isinstance(c, float) and c in (1.0, -1.0) else (d, c)
            return other if one == 1.0 else self.combine(node, ir.Neg(other.fn), [other])
        x, y = runtime(node, c), runtime(node, d)
        return self.combine(node, ir.Bin("*", x.fn, y.fn), [x, y])

    def plus(self, node, c: Coeff, d: Coeff) -> Coeff:
        if isinstance(c, float) and isinstance(d, float):
            return c + d
        x, y = runtime(node, c), runtime(node, d)
        return self.combine(node, ir.Bin("+", x.fn, y.fn), [x, y])

    # ---- products
    def matmul(self, node, a: MatVal | MatExpr, x: RExpr) -> RExpr:
        """a x, expanded: c₀ W₀x + Σ_i c_i u_i · mean(v_i x) · |w(v_i)|/|d_i|."""
        a = self.of(a)
        if a.cols != x.width:
            raise located(TPTypeError, node, f"this matrix maps {a.cols}-vectors, but the argument has width {x.width}")
        if self.expand_terms is not None and len(a.terms) > self.expand_terms:
            return self.low_rank_matmul(node, a, x)
        parts: list[RExpr] = []
        if a.base is not None and not (isinstance(a.base_coeff, float) and a.base_coeff == 0.0):
            product = self.plain_matmul(node, a.base, x)
            parts.append(product if a.base_coeff == 1.0 else self.term(node, a.base_coeff, product))
        for t in a.terms:
            parts.append(self.term(node, t.coeff, self.equations.var_expr(t.left), self.projection(node, t, x)))
        if not parts:                      # 0 · W: the zero vector of the output width
            return RExpr(ir.Const(0.0), "vector", a.rows)
        total = parts[0]
        for k, p in enumerate(parts[1:], start=1):
            if k % SUM_CHUNK == 0:         # a long sum: its first terms become a variable
                total = self.equations.var_expr(self.equations.materialize(node, total))
            total = self.combine(node, ir.Bin("+", total.fn, p.fn), [total, p])
        return total

    def projection(self, node, t: RankOne, x: RExpr) -> RExpr:
        """v x / |d| = mean(v x) · |w(v)|/|d|: a Moment (times the dims' ratio when it is not 1)."""
        v = self.equations.var_expr(t.right)
        prod = self.combine(node, ir.Bin("*", v.fn, x.fn), [v, x])
        moment = self.equations.var_expr(self.equations.emit(ir.Moment, node, fn=prod.fn, args=ir.refs(prod.fn),
                                                             width=v.width))
        ratio = self.scope.dims[v.width] / self.scope.dims[t.denom]
        return moment if ratio == 1.0 else self.term(node, ratio, moment)

    def term(self, node, *factors: Coeff | RExpr) -> RExpr:
        """The product of the factors (floats and runtime values), the floats equal to 1 left out."""
        parts = [runtime(node, f) for f in factors if not (isinstance(f, float) and f == 1.0)]
        total = parts[0]
        for p in parts[1:]:
            total = self.combine(node, ir.Bin("*", total.fn, p.fn), [total, p])
        return total

    # ---- products by long chains of terms (not expanded)
    def low_rank_matmul(self, node, a: MatExpr, x: RExpr) -> RExpr:
        """a x = c₀ W₀x + LowRank(chain of a's terms, x): the terms in the orientation of the base
        matrix (a product by Wᵀ reads W's chain, transposed), so W and Wᵀ share one chain."""
        transposed = a.base is not None and a.base.transposed
        terms = tuple(RankOne(t.coeff, t.right, t.left, t.denom) for t in a.terms) if transposed else a.terms
        chain = self.chain(node, terms, (a.cols, a.rows) if transposed else (a.rows, a.cols))
        arg = self.equations.var_expr(self.equations.materialize(node, x))
        low = self.equations.var_expr(self.equations.emit(ir.LowRank, node, terms=chain, arg=arg.var,
                                                          transposed=transposed, width=a.rows))
        if a.base is None or isinstance(a.base_coeff, float) and a.base_coeff == 0.0:
            return low
        product = self.plain_matmul(node, a.base, arg)
        base = product if a.base_coeff == 1.0 else self.term(node, a.base_coeff, product)
        return self.combine(node, ir.Bin("+", base.fn, low.fn), [base, low])

    def chain(self, node, terms: tuple[RankOne, ...], shape: tuple[str, str]) -> int:
        """The RankOne ending the chain of ``terms`` (rows x cols ``shape``): links already emitted
        (by an earlier product, or the chain before the latest update) are reused, so an update
        adds one link."""
        link = -1
        for t in terms:
            key = (link, t)
            got = self.links.get(key)
            if got is None:
                coeff, scale = (-1, t.coeff) if isinstance(t.coeff, float) else (self.coefficient(node, t.coeff), 1.0)
                got = self.links[key] = self.equations.emit(
                    ir.RankOne, node, prev=link, coeff=coeff, scale=scale, left=t.left, right=t.right,
                    denom=t.denom, rows=shape[0], cols=shape[1])
            link = got
        return link

    def coefficient(self, node, c: RExpr) -> int:
        """The Scalar variable holding a term's runtime coefficient (one per coefficient)."""
        got = self.coeffs.get(c)
        if got is None:
            got = self.coeffs[c] = self.equations.materialize(node, c)
        return got
