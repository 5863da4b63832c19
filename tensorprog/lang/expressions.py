"""Expressions of the front end: constant folding, typing and function trees.

An expression evaluates to a constant (float / array), a string, a matrix
(``MatVal``) or a runtime value (``RExpr``: a function tree over IR variables,
typed ``vector`` of a given width or ``scalar``).  A vector expression is a
Nonlin; ``mean`` makes a Moment; ``W @ v`` a MatMul.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import consts
from .. import ir
from . import syntax as S
from ..errors import TPError, TPLimitError, TPNameError, TPTypeError, TPValueError
from ..builtins import BUILTINS


#: deepest function tree one expression may build: both back ends walk these trees recursively
MAX_DEPTH = 100


@dataclass(frozen=True)
class RExpr:
    fn: ir.Fn
    kind: str            # "vector" | "scalar"
    width: str | None    # the width of a vector
    depth: int = 0       # of ``fn`` (a leaf is 0)
    size: int = 1        # operations in ``fn``, defs and sums expanded


@dataclass(frozen=True)
class MatVal:
    var: int
    transposed: bool


def located(cls: type[TPError], node, message: str) -> TPError:
    return cls(message, node.line, node.col)


class ExprLowering:
    """Mixin of ``Lowerer``: ``ev(node)`` gives an expression's value."""

    def ev(self, node):
        method = getattr(self, "ev_" + type(node).__name__)
        return method(node)

    # ---- leaves
    def ev_Number(self, node: S.Number):
        if not np.isfinite(node.value):
            raise located(TPValueError, node, "this number is too large for a float")
        return node.value

    def ev_String(self, node: S.String):
        return node.value

    def ev_Name(self, node: S.Name):
        return self.lookup(node, node.name, ())

    def ev_Index(self, node: S.Index):
        idx = tuple(self.const_int(i, "an index") for i in node.indices)
        return self.lookup(node, node.name, idx)

    def ev_Transpose(self, node: S.Transpose):
        value = self.ev(node.operand)
        if not isinstance(value, MatVal):
            raise located(TPTypeError, node, "'.T' applies to a matrix only")
        return MatVal(value.var, not value.transposed)

    # ---- arithmetic
    def ev_Neg(self, node: S.Neg):
        value = self.ev(node.operand)
        if consts.is_const(value):
            return consts.as_const(-np.asarray(value))
        r = self.runtime(node, value)
        return self.combine(node, ir.Neg(r.fn), [r])

    def ev_BinOp(self, node: S.BinOp):
        lhs, rhs = self.ev(node.lhs), self.ev(node.rhs)
        if node.op == "@":
            return self.matmul(node, lhs, rhs)
        if consts.is_const(lhs) and consts.is_const(rhs):
            return self.fold(node, node.op, lhs, rhs)
        if node.op in ("==", "!=", "<", "<=", ">", ">="):
            raise located(TPTypeError, node, f"comparison '{node.op}' needs constants "
                          "(write step(...) for an indicator of a vector)")
        a, b = self.runtime(node.lhs, lhs), self.runtime(node.rhs, rhs)
        return self.combine(node, ir.Bin(node.op, a.fn, b.fn), [a, b])

    def ev_Cond(self, node: S.Cond):
        test = self.ev(node.test)
        if not isinstance(test, float):
            raise located(TPTypeError, node.test, "the condition of 'if' must be a scalar constant")
        return self.ev(node.then if test != 0 else node.orelse)

    def matmul(self, node: S.BinOp, lhs, rhs) -> RExpr:
        if not isinstance(lhs, MatVal):
            raise located(TPTypeError, node, "the left side of '@' must be a matrix (W @ v or W.T @ v)")
        if isinstance(rhs, MatVal):
            raise located(TPTypeError, node.rhs, "a matrix used as a value: '@' takes a vector on its right")
        arg = self.runtime(node.rhs, rhs) if not consts.is_const(rhs) else None
        if arg is None or arg.kind != "vector":
            raise located(TPTypeError, node.rhs, "the right side of '@' must be a vector, not a scalar")
        mat = self.eqns[lhs.var]
        need, out = (mat.rows, mat.cols) if lhs.transposed else (mat.cols, mat.rows)
        if arg.width != need:
            raise located(TPTypeError, node, f"{mat.name}{'.T' if lhs.transposed else ''} maps "
                          f"{need}-vectors, but the argument has width {arg.width}")
        x = self.materialize(node.rhs, arg)
        return self.var_expr(self.emit(ir.MatMul, node, matrix=lhs.var, arg=x,
                                       transposed=lhs.transposed, width=out))

    def combine(self, node, fn: ir.Fn, parts: list[RExpr]) -> RExpr:
        """``fn`` applied to ``parts``: typed, and bounded in depth and size."""
        widths = {p.width for p in parts if p.kind == "vector"}
        if len(widths) > 1:
            raise located(TPTypeError, node, f"vectors of different widths ({', '.join(sorted(widths))})")
        depth, size = 1 + max(p.depth for p in parts), 1 + sum(p.size for p in parts)
        self.check_tree(node, depth, size)
        if widths:
            return RExpr(fn, "vector", widths.pop(), depth, size)
        return RExpr(fn, "scalar", None, depth, size)

    def check_tree(self, node, depth: int, size: int) -> None:
        if depth > MAX_DEPTH:
            raise located(TPLimitError, node, f"this expression nests more than {MAX_DEPTH} operations deep "
                          "(defs and sums expanded): split it into several statements")
        if size > self.max_nodes:
            raise located(TPLimitError, node, f"this expression has more than {self.max_nodes} operations "
                          "once defs and sums are expanded (raise max_nodes to allow it)")

    def runtime(self, node, value) -> RExpr:
        """A value as a function tree (constants become ``Const`` leaves)."""
        if isinstance(value, RExpr):
            return value
        if isinstance(value, float):
            return RExpr(ir.Const(value), "scalar", None)
        if isinstance(value, MatVal):
            raise located(TPTypeError, node, "a matrix used as a value (write W @ v)")
        if isinstance(value, np.ndarray):
            raise located(TPTypeError, node, "a list constant cannot be used as a value here")
        raise located(TPTypeError, node, "a string cannot be used as a value")

    # ---- calls
    def ev_Call(self, node: S.Call):
        special = getattr(self, "call_" + node.func, None)
        if special is not None:
            return special(node)
        if node.func in self.defs:
            return self.call_def(node)
        builtin = BUILTINS.get(node.func)
        if builtin is None:
            raise located(TPNameError, node, f"unknown function '{node.func}'")
        args = self.call_args(node, builtin.arity)
        if all(isinstance(a, float) for a in args):
            with np.errstate(all="ignore"):
                return self.checked_const(node, builtin.numpy(*[np.float64(a) for a in args]))
        parts = [self.runtime(arg_node, a) for arg_node, a in zip(node.args, args)]
        return self.combine(node, ir.Call(builtin.name, tuple(p.fn for p in parts)), parts)

    def call_args(self, node: S.Call, arity: int) -> list:
        if node.kwargs:
            raise located(TPTypeError, node, f"{node.func}() takes no keyword arguments")
        if len(node.args) != arity:
            raise located(TPTypeError, node, f"{node.func}() takes {arity} argument"
                          f"{'s' if arity > 1 else ''}, got {len(node.args)}")
        return [self.ev(a) for a in node.args]

    def call_mean(self, node: S.Call):
        if self.def_scope is not None:
            raise located(TPTypeError, node, "a def is a coordinatewise function: mean() is not allowed in it")
        (value,) = self.call_args(node, 1)
        if isinstance(value, RExpr) and value.kind == "vector":
            return self.var_expr(self.emit(ir.Moment, node, fn=value.fn, args=ir.refs(value.fn),
                                           width=value.width))
        raise located(TPTypeError, node, "mean() needs a vector expression, not a "
                      f"{'matrix' if isinstance(value, MatVal) else 'scalar'}")

    def call_eye(self, node: S.Call):
        (k,) = self.call_args(node, 1)
        return self.guard(node, consts.eye, k)

    def call_load(self, node: S.Call):
        (name,) = self.call_args(node, 1)
        if not isinstance(name, str):
            raise located(TPTypeError, node, 'load() takes a file name in quotes: load("x.npy")')
        try:
            return consts.load_array(name, self.base_dir)
        except consts.ConstError as err:
            from ..errors import TPLoadError
            raise located(TPLoadError, node, str(err)) from None

    def call_diff(self, node: S.Call):
        if node.kwargs or len(node.args) != 2:
            raise located(TPTypeError, node, "diff() takes two arguments: diff(expression, vector)")
        expr, wrt = self.ev(node.args[0]), self.ev(node.args[1])
        if not (isinstance(wrt, RExpr) and wrt.kind == "vector" and isinstance(wrt.fn, ir.Ref)):
            raise located(TPTypeError, node.args[1], "diff(e, x): x must be the name of a vector")
        if not (isinstance(expr, RExpr) and expr.kind == "vector"):
            raise located(TPTypeError, node.args[0], "diff(e, x): e must be a vector expression")
        from .diff import differentiate          # sympy: only for programs that use diff
        return differentiate(self, node, expr, wrt.fn.var)

    def call_def(self, node: S.Call):
        params, body = self.defs[node.func]
        args = self.call_args(node, len(params))
        for a, arg_node in zip(args, node.args):
            if isinstance(a, (MatVal, str, np.ndarray)):
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
    def ev_SumOver(self, node: S.SumOver):
        lo, hi = self.const_range(node.range)
        if hi < lo:
            return 0.0
        self.charge(node, hi - lo + 1)
        terms = [self.with_loop_var(node.var, float(j), node.body) for j in range(lo, hi + 1)]
        while len(terms) > 1:               # pairwise: the tree is log2(terms) deep, not len(terms)
            pairs = [self.add(node, a, b) for a, b in zip(terms[::2], terms[1::2])]
            terms = pairs + terms[len(pairs) * 2:]
        return terms[0]

    def add(self, node, a, b):
        if consts.is_const(a) and consts.is_const(b):
            return self.fold(node, "+", a, b)
        x, y = self.runtime(node, a), self.runtime(node, b)
        return self.combine(node, ir.Bin("+", x.fn, y.fn), [x, y])

    def ev_ListLit(self, node: S.ListLit):
        items = [self.const(i, "a list element") for i in node.items]
        return self.guard(node, consts.to_array, items)

    def ev_ListComp(self, node: S.ListComp):
        lo, hi = self.const_range(node.range)
        self.charge(node, hi - lo + 1)
        items = [self.with_loop_var(node.var, float(j), node.item) for j in range(lo, hi + 1)]
        for item in items:
            if not consts.is_const(item):
                raise located(TPTypeError, node.item, "list elements must be constants")
        return self.guard(node, consts.to_array, items)

    def const(self, node, what: str):
        value = self.ev(node)
        if not consts.is_const(value):
            raise located(TPTypeError, node, f"{what} must be a constant (params, numbers, lists)")
        return value

    def const_int(self, node, what: str) -> int:
        return self.guard(node, consts.as_int, self.const(node, what), what)

    def const_range(self, node: S.Range) -> tuple[int, int]:
        return self.const_int(node.start, "a range end"), self.const_int(node.stop, "a range end")

    def fold(self, node, op: str, a, b):
        return self.guard(node, consts.fold, op, a, b)

    def checked_const(self, node, value):
        return self.guard(node, consts.as_const, value)

    def guard(self, node, func, *args):
        try:
            return func(*args)
        except consts.ConstError as err:
            raise located(TPValueError, node, str(err)) from None

    def charge(self, node, units: int) -> None:
        if units > self.max_nodes:
            raise located(TPLimitError, node, f"this would unroll {units} times, over the limit of "
                          f"{self.max_nodes} (raise max_nodes to allow it)")
