"""``grad(f, x)`` in the front end: reverse-mode differentiation over the IR (NETSOR⊤).

For a scalar f and a vector x bound earlier, ``grad(f, x)`` is the *scaled* gradient
n·∂f/∂x, whose coordinates are O(1).  It is lowered to ordinary equations, so both back ends
run it unchanged.  Writing ``x̄ = n·∂f/∂x`` for a vector and ``s̄ = ∂f/∂s`` for a scalar, the
adjoints flow backwards through each equation of the path from x to f:

* ``y = φ(a, …, c, …)`` (Nonlin, vectors a, scalars c): ``ā += ȳ·∂φ/∂a`` coordinatewise,
  ``c̄ += mean(ȳ·∂φ/∂c)`` (a Moment);
* ``m = mean(φ(a, …, c, …))`` (Moment): ``ā += m̄·∂φ/∂a``, ``c̄ += m̄·mean(∂φ/∂c)``;
* ``s = ψ(c, …)`` (Scalar): ``c̄ += s̄·∂ψ/∂c`` (the chain rule);
* ``y = W a`` (MatMul): ``ā += Wᵀ ȳ`` (and ``y = Wᵀ a`` gives ``ā += W ȳ``): the same
  matrix, transposed, so weight sharing sums the contributions of every use;
* f itself (a function of scalars): ``s̄ = ∂f/∂s`` for each scalar it reads.

The partial derivatives ∂φ/∂a are sympy's, with the heads ``diff`` uses (relu' = step, …).
Each adjoint is the sum of its contributions, made a variable (a Nonlin for a vector, a Scalar
for a non-trivial scalar) once every use of its variable has contributed (the IR is in
topological order: variables are visited from the newest down to x).  The adjoint of a
variable depends on f and that variable only, so adjoints are memoised per (f, variable), and
every equation emitted here is hash-consed: ``grad``s that share a path share its backward
vectors.
"""
from __future__ import annotations

import heapq
from functools import lru_cache
from typing import TYPE_CHECKING

import sympy as sp

from ..symbolic import functions as fnsym
from .. import ir
from ..errors import TPTypeError, TPValueError
from .diff import VarSymbols
from .values import RExpr, located

if TYPE_CHECKING:
    from .builder import IRBuilder


class GradState:
    """What ``grad`` keeps across the calls of one lowering: the symbol of each variable, the
    partial derivatives of each equation's function, the adjoints per (f, variable), and the
    equations it emitted (by content, so that none is emitted twice)."""

    def __init__(self, equations: "IRBuilder") -> None:
        self.equations = equations
        self.names = VarSymbols()
        self.var_of = self.names.var_of
        self.partials: dict[tuple[int, int], sp.Expr] = {}
        self.shapes: dict[int, tuple[dict[int, int], ir.Fn, dict[sp.Symbol, sp.Symbol]]] = {}
        self.adjoints: dict[tuple[ir.Fn, int], sp.Expr] = {}
        self.emitted: dict[tuple, int] = {}
        self.trees = fnsym.TreeBuilder(self.var_of.__getitem__,
                                       is_vector=lambda var: equations.kind_of(var) == "vector")
        self.node = None

    # ---- the sweep
    def gradient(self, node, f: RExpr, x: int) -> RExpr:
        """n·∂f/∂x as a vector variable, for a scalar ``f`` and a vector variable ``x``."""
        self.node = node
        path = self.influenced(x)
        pending: dict[int, list[sp.Expr]] = {}
        fsym = fnsym.to_sympy(f.fn, self.symbol)
        for var in ir.refs(f.fn):
            if var in path:
                self.add(pending, var, sp.diff(fsym, self.symbol(var)))
        heap = [-v for v in pending]
        heapq.heapify(heap)
        while heap:
            var = -heapq.heappop(heap)
            adjoint = self.finish(f.fn, var, pending.pop(var))
            if var == x:
                return self.as_vector(adjoint, self.equations.width_of(x))
            if adjoint != 0:
                for arg, term in self.backward(var, adjoint, path):
                    if arg not in pending:
                        heapq.heappush(heap, -arg)
                    self.add(pending, arg, term)
        name = getattr(self.equations.eqn(x), "name", None) or f"%{x}"
        raise located(TPValueError, node, f"grad(f, x): x ({name}) does not influence f")

    def influenced(self, x: int) -> set[int]:
        """x and the variables computed from it (a forward scan of the equations after x)."""
        path = {x}
        for e in self.equations.eqns[x + 1:]:
            reads = (e.arg,) if isinstance(e, ir.MatMul) else getattr(e, "args", ())   # LowRank: chain too
            if any(a in path for a in reads):
                path.add(e.var)
        return path

    @staticmethod
    def add(pending: dict[int, list[sp.Expr]], var: int, term: sp.Expr) -> None:
        pending.setdefault(var, []).append(term)

    def finish(self, key: ir.Fn, var: int, terms: list[sp.Expr]) -> sp.Expr:
        """The adjoint of ``var``: the sum of its contributions, a constant or a variable's symbol
        (memoised per (f, var))."""
        got = self.adjoints.get((key, var))
        if got is None:
            total = sp.Add(*terms)
            if total.is_Symbol or total.is_number:
                got = total
            elif self.equations.kind_of(var) == "vector":
                got = self.symbol(self.emit_fn(ir.Nonlin, total, self.equations.width_of(var)))
            else:
                got = self.symbol(self.emit_fn(ir.Scalar, total, None))
            self.adjoints[(key, var)] = got
        return got

    def backward(self, var: int, adjoint: sp.Expr, path: set[int]) -> list[tuple[int, sp.Expr]]:
        """The contributions of ``var``'s equation to the adjoints of the path variables it reads."""
        e = self.equations.eqn(var)
        if isinstance(e, ir.MatMul):
            if e.arg not in path:
                return []
            width = self.equations.width_of(e.arg)
            ybar = self.equations.materialize(self.node, self.as_vector(adjoint, e.width))
            key = (ir.MatMul, e.matrix, ybar, not e.transposed)
            got = self.emitted.get(key)
            if got is None:
                got = self.emitted[key] = self.equations.emit(
                    ir.MatMul, self.node, matrix=e.matrix, arg=ybar, transposed=not e.transposed, width=width)
            return [(e.arg, self.symbol(got))]
        if isinstance(e, ir.LowRank):
            return self.low_rank_backward(e, adjoint, path)
        if not isinstance(e, ir.FUNCTION_OPS):
            return []
        out = []
        for arg in e.args:
            if arg not in path:
                continue
            d = self.partial(e, arg)
            if isinstance(e, ir.Scalar) or self.equations.kind_of(arg) == "vector":
                out.append((arg, adjoint * d))                     # ā += ȳ·∂φ/∂a, c̄ += s̄·∂ψ/∂c
            elif isinstance(e, ir.Moment):
                out.append((arg, adjoint * self.mean(d, e.width)))  # c̄ += m̄·mean(∂φ/∂c)
            else:
                out.append((arg, self.mean(adjoint * d, e.width)))  # c̄ += mean(ȳ·∂φ/∂c)
        return out

    def low_rank_backward(self, e: ir.LowRank, adjoint: sp.Expr, path: set[int]) -> list[tuple[int, sp.Expr]]:
        """``y = Σ c g (h·x)/|d|`` (a LowRank over a RankOne chain): ``x̄ += Σ c h (g·ȳ)/|d|``, the
        same chain transposed.  Through the chain itself (its vectors or coefficients on the path
        from x) the gradient is refused: those terms are a matrix's past updates."""
        if e.terms in path:
            raise located(TPTypeError, self.node, "grad(f, x): f depends on x through the rank-one updates of a "
                          "matrix (outer(g, h) terms whose g, h or coefficient depend on x), and a matrix with "
                          "many updates is kept as a low-rank chain that grad does not differentiate; "
                          "differentiate before the updates (or write the updates' products by hand)")
        if e.arg not in path:
            return []
        chain = self.equations.eqn(e.terms)
        width = chain.cols if not e.transposed else chain.rows
        ybar = self.equations.materialize(self.node, self.as_vector(adjoint, e.width))
        key = (ir.LowRank, e.terms, ybar, not e.transposed)
        got = self.emitted.get(key)
        if got is None:
            got = self.emitted[key] = self.equations.emit(ir.LowRank, self.node, terms=e.terms, arg=ybar,
                                                          transposed=not e.transposed, width=width)
        return [(e.arg, self.symbol(got))]

    def partial(self, e: ir.Eqn, arg: int) -> sp.Expr:
        """∂fn/∂arg of a function equation (sympy, memoised): the derivative of fn's shape (its
        variables as placeholders, :func:`shape_derivative`, derived once per shape) with the
        variables put back."""
        got = self.partials.get((e.var, arg))
        if got is None:
            order, shape, leaves = self.shape(e)
            template = shape_derivative(shape, order[arg])
            got = template.xreplace(leaves)
            self.partials[(e.var, arg)] = got
        return got

    def shape(self, e: ir.Eqn) -> tuple[dict[int, int], ir.Fn, dict[sp.Symbol, sp.Symbol]]:
        """({variable: its position}, the function with its variables as positions, {placeholder:
        the variable's symbol}) of a function equation, made once per equation (not per argument)."""
        got = self.shapes.get(e.var)
        if got is None:
            order = {v: k for k, v in enumerate(ir.refs(e.fn))}
            shape = ir.map_refs(e.fn, lambda ref: ir.Ref(order[ref.var]))
            got = self.shapes[e.var] = (order, shape, {placeholder(k): self.symbol(v) for v, k in order.items()})
        return got

    def mean(self, expr: sp.Expr, width: str) -> sp.Expr:
        """mean(expr) over ``width``: expr itself if it reads no vector, else a Moment's symbol."""
        if not any(self.equations.kind_of(self.var_of[s]) == "vector" for s in expr.free_symbols):
            return expr
        return self.symbol(self.emit_fn(ir.Moment, expr, width))

    # ---- emitting
    def as_vector(self, adjoint: sp.Expr, width: str | None) -> RExpr:
        """The vector ``adjoint`` (a symbol or a constant) as a runtime value."""
        built = self.build(adjoint)
        return RExpr(built.fn, "vector", width, built.depth, built.size)

    def build(self, expr: sp.Expr) -> fnsym.Built:
        """The function tree of a derivative; a Dirac mass (the derivative of step or sign) is a
        located error."""
        try:
            built = self.trees.node(expr)
        except fnsym.NotABuiltin as err:
            raise located(TPValueError, self.node, f"grad: the derivative contains {err}, which has no "
                          "value at a point (e.g. the derivative of step or sign)") from None
        self.equations.check_tree(self.node, built.depth, built.size)
        return built

    def emit_fn(self, kind: type, expr: sp.Expr, width: str | None) -> int:
        """The variable of ``kind(fn=expr's tree)`` (a Nonlin, Moment or Scalar), emitted once."""
        fn = self.build(expr).fn
        key = (kind, fn, width)
        got = self.emitted.get(key)
        if got is None:
            fields = {"fn": fn, "args": ir.refs(fn)}
            if kind is not ir.Scalar:
                fields["width"] = width
            got = self.emitted[key] = self.equations.emit(kind, self.node, **fields)
        return got

    def symbol(self, var: int) -> sp.Symbol:
        """The real sympy symbol ``v<var>`` of a variable."""
        return self.names.symbol(var)


def placeholder(k: int) -> sp.Symbol:
    """The real symbol standing for a function shape's k-th variable."""
    return sp.Symbol(f"_arg{k}", real=True)


@lru_cache(maxsize=4096)
def shape_derivative(shape: ir.Fn, k: int) -> sp.Expr:
    """∂shape/∂(its k-th variable), a function tree whose Ref(j) is its j-th variable: the same
    activation at every layer is differentiated once (sympy's derivative of a head like gelu
    builds new expressions and queries assumptions: the cost of a template's first lowering)."""
    return sp.diff(shape_expression(shape), placeholder(k))


@lru_cache(maxsize=256)
def shape_expression(shape: ir.Fn) -> sp.Expr:
    """The sympy expression of a function shape, built once for all of its variables (a sum of s
    rank-one terms, as a product by an updated matrix, is differentiated by each of its s
    variables: converting it once per variable made a long training program cubic in its steps)."""
    return fnsym.to_sympy(shape, placeholder)


def check_operands(node, f, x) -> None:
    """Refuse a ``grad(f, x)`` whose f is not a scalar or whose x is not a vector variable."""
    if isinstance(f, float):
        raise located(TPValueError, node.args[1], "grad(f, x): x does not influence f (f is a constant)")
    if not (isinstance(f, RExpr) and f.kind == "scalar"):
        raise located(TPTypeError, node.args[0], "grad(f, x): f is not a scalar (write mean(...) of a vector)")
    if not (isinstance(x, RExpr) and x.kind == "vector" and x.var is not None):
        raise located(TPTypeError, node.args[1], "grad(f, x): x must be the name of a vector")
