"""Expressions of the front end: constant folding, typing and function trees.

An expression evaluates to a :data:`~.values.Value`: a constant (float / array), a string,
a matrix (``MatVal``) or a runtime value (``RExpr``: a function tree over IR variables, typed
``vector`` of a given width or ``scalar``).  A vector expression becomes a Nonlin where it is
bound; ``mean`` makes a Moment; ``W @ v`` a MatMul.

:class:`Expressions` evaluates one node with the method named after its class (``ev_Number``,
``ev_Call``, ...).  It works with two collaborators: the statement lowering, seen through the
:class:`Scope` interface (names, loop variables, defs, params, the program's folder), and the
shared :class:`~.builder.IRBuilder` (equations).  It owns the state of ``diff``
(:class:`~.diff.DiffState`), created at the first ``diff`` so that sympy is imported only by
the programs that use it.  Dependencies go one way: expressions -> diff -> values.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, ContextManager, Iterable, Iterator, Mapping, Protocol

import numpy as np

from . import consts
from ..symbolic import traced
from .. import ir
from . import syntax as S
from ..errors import TPIndexError, TPLimitError, TPLoadError, TPNameError, TPTypeError, TPValueError
from ..builtins import BUILTINS, CONSTANTS
from .builder import IRBuilder
from .matrices import MatrixAlgebra
from .values import MATRICES, DataMat, MatExpr, MatVal, RExpr, Value, located, runtime

if TYPE_CHECKING:
    from .diff import DiffState
    from .grad import GradState

#: the functions evaluated by the expression lowering itself (``call_<name>``), not builtins
SPECIAL_FUNCTIONS = ("mean", "eye", "load", "diff", "grad", "outer")

#: a def: its parameter names and its body (an expression)
DefBody = tuple[tuple[str, ...], S.Node]


class Scope(Protocol):
    """What the expression lowering needs from the statement lowering.

    * ``lookup(node, name, idx)``: the value bound to ``name[idx]`` (``idx == ()`` for a
      plain name), or a located error;
    * ``loop_var(name, value)``: a context binding the loop variable ``name`` to ``value``
      while an expression (``sum``, a list comprehension) is evaluated, restoring it after;
    * ``defs``: the defs so far, by name; ``params``: the params so far (a def reads these);
    * ``base_dir``: the folder ``load`` reads from;
    * ``dims``: the widths declared so far, by name, as sizes relative to n.
    """

    @property
    def defs(self) -> Mapping[str, DefBody]: ...

    @property
    def params(self) -> Mapping[str, float]: ...

    @property
    def base_dir(self) -> str: ...

    @property
    def dims(self) -> Mapping[str, float]: ...

    def lookup(self, node: S.Node, name: str, idx: tuple[int, ...]) -> Value: ...

    def loop_var(self, name: str, value: float) -> ContextManager[None]: ...

    def constant(self, name: str) -> np.ndarray | None:
        """The array constant bound to the plain name ``name`` (a loaded or literal list), else None."""
        ...

    def data_product(self, node: S.Node, matrix: DataMat, row: np.ndarray) -> RExpr:
        """``U @ x`` for a data matrix U and a data vector x (a constant of U's input dimension)."""
        ...

    def data_mean(self, node: S.Call, value: np.ndarray) -> Value:
        """``mean(e)`` of a data vector e (its value ``value``): the mean of its coordinates."""
        ...


class Expressions:
    """The expression lowering: ``ev(node)`` gives an expression's value, emitting the
    equations it needs (MatMul, Moment, Nonlin of a ``@`` argument) into ``equations``."""

    def __init__(self, scope: Scope, equations: IRBuilder) -> None:
        self.scope = scope
        self.equations = equations
        self.def_scope: dict[str, Value] | None = None     # the arguments, inside a def
        self.active_defs: set[str] = set()
        self.diff_state: DiffState | None = None
        self.grad_state: GradState | None = None
        self.matrices = MatrixAlgebra(equations, scope, self.combine, self.plain_matmul)

    @property
    def max_nodes(self) -> int:
        return self.equations.max_nodes

    def ev(self, node: S.Node) -> Value:
        method: Callable[[S.Node], Value] = getattr(self, "ev_" + type(node).__name__)
        return method(node)

    # ---- leaves
    def ev_Number(self, node: S.Number) -> Value:
        if not np.isfinite(node.value):
            raise located(TPValueError, node, "this number is too large for a float")
        return node.value

    def ev_String(self, node: S.String) -> Value:
        return node.value

    def ev_Name(self, node: S.Name) -> Value:
        return self.lookup(node, node.name, ())

    def ev_Index(self, node: S.Index) -> Value:
        idx = tuple(self.const_int(i, "an index") for i in node.indices)
        whole = self.constant_array(node.name)
        if whole is not None:
            try:
                return consts.index(whole, idx, node.name)
            except consts.ConstError as err:
                raise located(TPIndexError, node, str(err)) from None
        return self.lookup(node, node.name, idx)

    def constant_array(self, name: str) -> np.ndarray | None:
        """The array constant a plain name is bound to (inside a def: a param), else None."""
        if self.def_scope is None:
            return self.scope.constant(name)
        value = self.scope.params.get(name) if name not in self.def_scope else None
        return value if isinstance(value, np.ndarray) else None

    def lookup(self, node: S.Node, name: str, idx: tuple[int, ...]) -> Value:
        """``name[idx]``: inside a def, one of its arguments, a param or a constant only."""
        if self.def_scope is None:
            return self.scope.lookup(node, name, idx)
        if not idx and name in self.def_scope:
            return self.def_scope[name]
        if not idx and name in self.scope.params:
            return self.scope.params[name]
        if not idx and name in CONSTANTS:
            return CONSTANTS[name]
        raise located(TPNameError, node, f"'{name}' is not an argument of this def; a def may "
                      "use only its arguments, params and constants")

    def ev_Transpose(self, node: S.Transpose) -> Value:
        value = self.ev(node.operand)
        if not isinstance(value, MATRICES):
            raise located(TPTypeError, node, "'.T' applies to a matrix only")
        if isinstance(value, DataMat):
            raise located(TPTypeError, node, f"'{value.name}' maps data of the fixed dimension {value.cols}: "
                          "it has no transpose in the language (its part of an NTK is mean(dh * dh2) * mean(x * y))")
        return self.matrices.transpose(value)

    # ---- arithmetic
    def ev_Neg(self, node: S.Neg) -> Value:
        value = self.ev(node.operand)
        if consts.is_const(value):
            return traced.negated(value, consts.as_const(-np.asarray(value)))
        if isinstance(value, DataMat):
            raise located(TPTypeError, node, f"'{value.name}' maps data vectors: it enters only as {value.name} @ x")
        if isinstance(value, MATRICES):
            return self.matrices.scale(node, -1.0, value)
        r = runtime(node, value)
        return self.combine(node, ir.Neg(r.fn), [r])

    def ev_BinOp(self, node: S.BinOp) -> Value:
        lhs, rhs = self.ev(node.lhs), self.ev(node.rhs)
        if node.op == "@":
            return self.matmul(node, lhs, rhs)
        if isinstance(lhs, MATRICES) or isinstance(rhs, MATRICES):
            return self.matrix_op(node, lhs, rhs)
        if consts.is_const(lhs) and consts.is_const(rhs):
            return self.fold(node, node.op, lhs, rhs)
        if node.op in ("==", "!=", "<", "<=", ">", ">="):
            raise located(TPTypeError, node, f"comparison '{node.op}' needs constants "
                          "(write step(...) for an indicator of a vector)")
        a, b = runtime(node.lhs, lhs), runtime(node.rhs, rhs)
        return self.combine(node, ir.Bin(node.op, a.fn, b.fn), [a, b])

    def ev_Cond(self, node: S.Cond) -> Value:
        test = self.ev(node.test)
        if not isinstance(test, float):
            raise located(TPTypeError, node.test, "the condition of 'if' must be a scalar constant")
        return self.ev(node.then if test != 0 else node.orelse)

    def matmul(self, node: S.BinOp, lhs: Value, rhs: Value) -> RExpr:
        """``W @ v`` or ``W.T @ v``: a MatMul of the matrix and (the variable holding) v; a matrix
        with rank-one terms expands (:mod:`.matrices`)."""
        if not isinstance(lhs, MATRICES):
            raise located(TPTypeError, node, "the left side of '@' must be a matrix (W @ v or W.T @ v)")
        if isinstance(rhs, MATRICES):
            raise located(TPTypeError, node.rhs, "a matrix used as a value: '@' takes a vector on its right")
        if isinstance(lhs, DataMat):
            return self.data_matmul(node, lhs, rhs)
        if isinstance(rhs, np.ndarray):
            raise located(TPTypeError, node.rhs, "a constant vector (data) can only be multiplied by a matrix "
                          "declared on its dimension: vector x : d = load(...); matrix U : n x d ~ normal()")
        arg = runtime(node.rhs, rhs) if not consts.is_const(rhs) else None
        if arg is None or arg.kind != "vector":
            raise located(TPTypeError, node.rhs, "the right side of '@' must be a vector, not a scalar")
        if isinstance(lhs, MatExpr):
            return self.matrices.matmul(node, lhs, arg)
        return self.plain_matmul(node, lhs, arg)

    def data_matmul(self, node: S.BinOp, lhs: DataMat, rhs: Value) -> RExpr:
        """``U @ x``: U a data matrix, x a data vector (a 1-d constant of U's input dimension)."""
        if not (isinstance(rhs, np.ndarray) and rhs.ndim == 1):
            raise located(TPTypeError, node.rhs, f"'{lhs.name}' maps data of the fixed dimension {lhs.cols}: "
                          f"its argument must be a data vector (vector x : {lhs.cols} = load(...)), "
                          "not a vector of the network")
        return self.scope.data_product(node, lhs, rhs)

    def matrix_op(self, node: S.BinOp, lhs: Value, rhs: Value) -> Value:
        """``A + B``, ``A - B``, ``c * A``, ``A * c``, ``A / c`` for matrices A, B and scalars c."""
        for value, side in ((lhs, node.lhs), (rhs, node.rhs)):
            if isinstance(value, DataMat):
                raise located(TPTypeError, side, f"'{value.name}' maps data vectors: it enters only as "
                              f"{value.name} @ x")
        both = isinstance(lhs, MATRICES) and isinstance(rhs, MATRICES)
        if node.op in ("+", "-") and both:
            return self.matrices.add(node, lhs, rhs, 1.0 if node.op == "+" else -1.0)
        matrix, other = (lhs, rhs) if isinstance(lhs, MATRICES) else (rhs, lhs)
        if isinstance(other, RExpr) and other.kind == "vector":         # W + v, v * W: not a product
            raise located(TPTypeError, node.lhs if matrix is lhs else node.rhs, "a matrix used as a value (write W @ v)")
        scalar = not both and (isinstance(other, float) or isinstance(other, RExpr) and other.kind == "scalar")
        if node.op == "*" and scalar:
            return self.matrices.scale(node, other, matrix)
        if node.op == "/" and scalar and matrix is lhs:
            one = RExpr(ir.Const(1.0), "scalar", None)
            inverse = 1.0 / other if isinstance(other, float) and other != 0 else \
                self.combine(node, ir.Bin("/", one.fn, runtime(node, other).fn), [one, runtime(node, other)])
            return self.matrices.scale(node, inverse, matrix)
        raise located(TPTypeError, node, f"'{node.op}' with a matrix: matrices add and subtract, and "
                      "multiply or divide by scalars (then multiply a vector: A @ v)")

    def plain_matmul(self, node: S.Node, lhs: MatVal, arg: RExpr) -> RExpr:
        """The MatMul of a matrix variable (or its transpose) and a vector."""
        mat = self.equations.eqn(lhs.var)
        need, out = (mat.rows, mat.cols) if lhs.transposed else (mat.cols, mat.rows)
        if arg.width != need:
            raise located(TPTypeError, node, f"{mat.name}{'.T' if lhs.transposed else ''} maps "
                          f"{need}-vectors, but the argument has width {arg.width}")
        x = self.equations.materialize(node.rhs, arg)
        return self.equations.var_expr(self.equations.emit(ir.MatMul, node, matrix=lhs.var, arg=x,
                                                           transposed=lhs.transposed, width=out))

    def combine(self, node: S.Node, fn: ir.Fn, parts: list[RExpr]) -> RExpr:
        """``fn`` applied to ``parts``: a vector if any part is one (all of one width), else a
        scalar; depth 1 + the deepest part, size 1 + the parts' sizes, both bounded."""
        widths = {p.width for p in parts if p.kind == "vector"}
        if len(widths) > 1:
            raise located(TPTypeError, node, f"vectors of different widths ({', '.join(sorted(widths))})")
        depth, size = 1 + max(p.depth for p in parts), 1 + sum(p.size for p in parts)
        self.equations.check_tree(node, depth, size)
        if widths:
            return RExpr(fn, "vector", widths.pop(), depth, size)
        return RExpr(fn, "scalar", None, depth, size)

    # ---- calls
    def ev_Call(self, node: S.Call) -> Value:
        if node.func in SPECIAL_FUNCTIONS:
            special: Callable[[S.Call], Value] = getattr(self, "call_" + node.func)
            return special(node)
        if node.func in self.scope.defs:
            return self.call_def(node)
        builtin = BUILTINS.get(node.func)
        if builtin is None:
            raise located(TPNameError, node, f"unknown function '{node.func}'")
        args = self.call_args(node, builtin.arity, builtin.defaults)
        if all(isinstance(a, float) for a in args):      # a builtin of params: its sympy head of theirs
            with np.errstate(all="ignore"):
                value = self.checked_const(node, builtin.numpy(*[np.float64(a) for a in args]))
            return traced.called(builtin.name, args, value)
        if all(consts.is_const(a) for a in args):          # coordinatewise on list constants (data)
            for a in args:
                traced.structure(a)
            with np.errstate(all="ignore"):
                try:
                    value = builtin.numpy(*[np.asarray(a, float) for a in args])
                except ValueError as err:
                    raise located(TPValueError, node, f"{node.func}(): shapes do not match ({err})") from None
                return self.checked_const(node, value)
        arg_nodes = list(node.args) + [node] * (len(args) - len(node.args))      # defaults: at the call
        parts = [runtime(arg_node, a) for arg_node, a in zip(arg_nodes, args)]
        return self.combine(node, ir.Call(builtin.name, tuple(p.fn for p in parts)), parts)

    def call_args(self, node: S.Call, arity: int, defaults: tuple[float, ...] = ()) -> list[Value]:
        """The values of a call's ``arity`` positional arguments (keywords refused); the last
        ``len(defaults)`` may be left out, and are then these values."""
        if node.kwargs:
            raise located(TPTypeError, node, f"{node.func}() takes no keyword arguments")
        least = arity - len(defaults)
        if not least <= len(node.args) <= arity:
            takes = f"{least} or {arity}" if defaults else f"{arity}"
            raise located(TPTypeError, node, f"{node.func}() takes {takes} argument"
                          f"{'s' if arity > 1 else ''}, got {len(node.args)}")
        return [self.ev(a) for a in node.args] + list(defaults[len(node.args) - least:])

    def call_mean(self, node: S.Call) -> Value:
        """``mean(v)`` = (1/n) Σ_α v_α: a Moment of the vector expression."""
        if self.def_scope is not None:
            raise located(TPTypeError, node, "a def is a coordinatewise function: mean() is not allowed in it")
        (value,) = self.call_args(node, 1)
        if isinstance(value, np.ndarray) and value.ndim == 1:      # a data vector: its d coordinates
            traced.structure(value)
            return self.scope.data_mean(node, value)
        if isinstance(value, RExpr) and value.kind == "vector":
            return self.equations.var_expr(self.equations.moment(node, value.fn, value.width))
        raise located(TPTypeError, node, "mean() needs a vector expression, not a "
                      f"{'matrix' if isinstance(value, MATRICES) else 'scalar'}")

    def call_eye(self, node: S.Call) -> Value:
        """``eye(k)``: the k×k identity, a constant."""
        (k,) = self.call_args(node, 1)
        return self.guard(node, consts.eye, k)

    def call_load(self, node: S.Call) -> Value:
        """``load("x.npy")``: a numeric array from the program's folder, a constant."""
        (name,) = self.call_args(node, 1)
        if not isinstance(name, str):
            raise located(TPTypeError, node, 'load() takes a file name in quotes: load("x.npy")')
        try:
            return consts.load_array(name, self.scope.base_dir)
        except consts.ConstError as err:
            raise located(TPLoadError, node, str(err)) from None

    def call_diff(self, node: S.Call) -> Value:
        """``diff(e, x)``: ∂e/∂x coordinatewise, for a vector expression e and a vector name x."""
        if node.kwargs or len(node.args) != 2:
            raise located(TPTypeError, node, "diff() takes two arguments: diff(expression, vector)")
        expr, wrt = self.ev(node.args[0]), self.ev(node.args[1])
        if not (isinstance(wrt, RExpr) and wrt.kind == "vector" and wrt.var is not None):
            raise located(TPTypeError, node.args[1], "diff(e, x): x must be the name of a vector")
        if not (isinstance(expr, RExpr) and expr.kind == "vector"):
            raise located(TPTypeError, node.args[0], "diff(e, x): e must be a vector expression")
        if self.diff_state is None:
            from .diff import DiffState          # sympy: only for programs that use diff
            self.diff_state = DiffState(self.equations)
        return self.diff_state.derivative(node, expr, wrt.var)

    def call_grad(self, node: S.Call) -> Value:
        """``grad(f, x)``: n·∂f/∂x, for a scalar f and a vector variable x bound before, by
        reverse-mode differentiation over the IR (:mod:`.grad`)."""
        if node.kwargs or len(node.args) != 2:
            raise located(TPTypeError, node, "grad() takes two arguments: grad(scalar, vector)")
        if self.def_scope is not None:
            raise located(TPTypeError, node, "a def is a coordinatewise function: grad() is not allowed in it")
        from .grad import GradState, check_operands     # sympy: only for programs that use grad
        f, wrt = self.ev(node.args[0]), self.ev(node.args[1])
        check_operands(node, f, wrt)
        if self.grad_state is None:
            self.grad_state = GradState(self.equations)
        return self.grad_state.gradient(node, f, wrt.var)

    def call_outer(self, node: S.Call) -> Value:
        """``outer(g, h)``: the matrix g hᵀ / |width(h)| (:mod:`.matrices`)."""
        g, h = self.call_args(node, 2)
        for value, arg_node in ((g, node.args[0]), (h, node.args[1])):
            if not (isinstance(value, RExpr) and value.kind == "vector"):
                raise located(TPTypeError, arg_node, "outer(g, h) takes two vectors")
        if self.def_scope is not None:
            raise located(TPTypeError, node, "a def is a coordinatewise function: outer() is not allowed in it")
        return self.matrices.outer(node, g, h)

    def call_def(self, node: S.Call) -> Value:
        """A def applied to scalars or vectors: its body with the parameters bound to them."""
        params, body = self.scope.defs[node.func]
        args = self.call_args(node, len(params))
        for a, arg_node in zip(args, node.args):
            if isinstance(a, (MatVal, MatExpr, DataMat, str, np.ndarray)):
                raise located(TPTypeError, arg_node, f"{node.func}() takes scalars or vectors")
        if node.func in self.active_defs:
            raise located(TPLimitError, node, f"'{node.func}' calls itself: a def cannot be recursive")
        saved = self.def_scope
        self.def_scope = dict(zip(params, args))
        self.active_defs.add(node.func)
        try:
            return self.ev(body)
        finally:
            self.def_scope = saved
            self.active_defs.discard(node.func)

    # ---- constant contexts
    def ev_SumOver(self, node: S.SumOver) -> Value:
        """``sum(j in lo..hi: body)``, added pairwise: the tree is log2(terms) deep, not len(terms)."""
        lo, hi = self.const_range(node.range)
        if hi < lo:
            return 0.0
        self.charge(node, hi - lo + 1)
        terms = [self.with_loop_var(node.var, float(j), node.body) for j in range(lo, hi + 1)]
        while len(terms) > 1:
            pairs = [self.add(node, a, b) for a, b in zip(terms[::2], terms[1::2])]
            terms = pairs + terms[len(pairs) * 2:]
        return terms[0]

    def add(self, node: S.Node, a: Value, b: Value) -> Value:
        if consts.is_const(a) and consts.is_const(b):
            return self.fold(node, "+", a, b)
        x, y = runtime(node, a), runtime(node, b)
        return self.combine(node, ir.Bin("+", x.fn, y.fn), [x, y])

    def with_loop_var(self, name: str, value: float, body: S.Node) -> Value:
        """``body`` evaluated with the loop variable ``name`` bound to ``value``."""
        with self.scope.loop_var(name, value):
            return self.ev(body)

    def ev_ListLit(self, node: S.ListLit) -> Value:
        return self.const_array(node, (self.const(i, "a list element") for i in node.items), len(node.items))

    def ev_ListComp(self, node: S.ListComp) -> Value:
        lo, hi = self.const_range(node.range)
        self.charge(node, hi - lo + 1)

        def items() -> Iterator[Value]:
            for j in range(lo, hi + 1):
                item = self.with_loop_var(node.var, float(j), node.item)
                if not consts.is_const(item):
                    raise located(TPTypeError, node.item, "list elements must be constants")
                yield item
        return self.const_array(node, items(), hi - lo + 1)

    def const_array(self, node: S.Node, items: Iterable, count: int) -> np.ndarray:
        """``count`` constant ``items`` as one array, sized before it is built: after the first
        item, its size times ``count`` (and then the running total, items may differ) must stay
        within :data:`consts.MAX_CONST_BYTES` (a TPValueError at ``node`` otherwise)."""
        built, total = [], 0
        for item in items:
            size = consts.nbytes(item)
            total += size
            self.guard(node, consts.check_bytes, max(total, size * count),
                       f"this list of {count:,} items of {size:,} bytes")
            built.append(item)
        return self.guard(node, consts.to_array, built)

    def const(self, node: S.Node, what: str) -> float | np.ndarray:
        """The value of an expression that must be a constant (``what`` names it in the error)."""
        value = self.ev(node)
        if not consts.is_const(value):
            raise located(TPTypeError, node, f"{what} must be a constant (params, numbers, lists)")
        return value

    def const_int(self, node: S.Node, what: str) -> int:
        return self.guard(node, consts.as_int, self.const(node, what), what)

    def const_range(self, node: S.Range) -> tuple[int, int]:
        return self.const_int(node.start, "a range end"), self.const_int(node.stop, "a range end")

    def fold(self, node: S.Node, op: str, a, b) -> float | np.ndarray:
        return self.guard(node, consts.fold, op, a, b)

    def checked_const(self, node: S.Node, value) -> float | np.ndarray:
        return self.guard(node, consts.as_const, value)

    def guard(self, node: S.Node, func: Callable, *args):
        """``func(*args)``, its ``ConstError`` raised as a ``TPValueError`` located at ``node``."""
        try:
            return func(*args)
        except consts.ConstError as err:
            raise located(TPValueError, node, str(err)) from None

    def charge(self, node: S.Node, units: int) -> None:
        """Refuse to unroll ``units`` times beyond ``max_nodes``."""
        if units > self.max_nodes:
            raise located(TPLimitError, node, f"this would unroll {units} times, over the limit of "
                          f"{self.max_nodes} (raise max_nodes to allow it)")
