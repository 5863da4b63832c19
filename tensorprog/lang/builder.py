"""The equation list of one lowering: emitting IR equations, typing variables, bounding trees.

One :class:`IRBuilder` is shared by the three stages that add equations: the statements
(declarations, assignments, outputs), the expressions (``W @ v``, ``mean``) and ``diff``
(shared sub-derivatives).  The IR is single-assignment: variable ``%k`` is bound by
``eqns[k]`` and never rebound.
"""
from __future__ import annotations

from .. import ir
from ..errors import TPLimitError
from .values import RExpr, located

#: the operators whose operands commute (exactly, in floating point too)
COMMUTATIVE = frozenset({"+", "*"})


def canonical(fn: ir.Fn) -> tuple:
    """A hashable form of ``fn`` equal for trees that differ only in the order of the operands of
    + and *."""
    return ir.fold(fn, ir.Rules(
        ref=lambda node: ("ref", node.var), const=lambda node: ("const", node.value),
        call=lambda node, args: ("call", node.name, *args),
        bin=lambda node, a, b: ("bin", node.op, *(sorted((a, b), key=repr) if node.op in COMMUTATIVE else (a, b))),
        neg=lambda node, a: ("neg", a)))


#: deepest function tree one expression may build: both back ends walk these trees recursively
MAX_DEPTH = 100


class IRBuilder:
    """The equations emitted so far (at most ``max_nodes``), and the types of their variables."""

    def __init__(self, max_nodes: int) -> None:
        self.max_nodes = max_nodes
        self.eqns: list[ir.Eqn] = []
        self.share_moments = False                   # on while an array of outputs is lowered
        self.moments: dict[tuple, int] = {}          # (canonical fn, width) -> its Moment, when shared

    def moment(self, node, fn: ir.Fn, width: str) -> int:
        """The Moment mean(fn) over ``width``.  While ``share_moments`` is on (the entries of an array
        of outputs, ``out K[i, j]``), a Moment equal to one already emitted there up to the order of
        the operands of + and * (exact in floating point too) is that one: K[i, j] and K[j, i] are
        computed once."""
        if not self.share_moments:
            return self.emit(ir.Moment, node, fn=fn, args=ir.refs(fn), width=width)
        key = (canonical(fn), width)
        if key not in self.moments:
            self.moments[key] = self.emit(ir.Moment, node, fn=fn, args=ir.refs(fn), width=width)
        return self.moments[key]

    def eqn(self, var: int) -> ir.Eqn:
        """The equation binding ``var``."""
        return self.eqns[var]

    def emit(self, kind: type, node, **fields) -> int:
        """Append ``kind(var=..., pos=node's position, **fields)``; return its new variable."""
        var = len(self.eqns)
        if var >= self.max_nodes:
            raise located(TPLimitError, node, f"the unrolled program exceeds {self.max_nodes} equations "
                          "(raise max_nodes to allow it)")
        self.eqns.append(kind(var=var, pos=ir.Pos(node.line, node.col), **fields))
        return var

    def kind_of(self, var: int) -> str:
        """``vector`` for InitVector/MatMul/Nonlin variables, else ``scalar``."""
        return "vector" if isinstance(self.eqns[var], ir.VECTOR_OPS) else "scalar"

    def width_of(self, var: int) -> str | None:
        """The width of a vector variable (``None`` for a scalar)."""
        return getattr(self.eqns[var], "width", None) if self.kind_of(var) == "vector" else None

    def var_expr(self, var: int) -> RExpr:
        """The runtime value that reads ``var``."""
        return RExpr(ir.Ref(var), self.kind_of(var), self.width_of(var))

    def materialize(self, node, value: RExpr) -> int:
        """The variable holding a runtime value (a new Nonlin/Scalar unless it is one already)."""
        if value.var is not None and self.kind_of(value.var) == value.kind:
            return value.var
        if value.kind == "vector":
            return self.emit(ir.Nonlin, node, fn=value.fn, args=ir.refs(value.fn), width=value.width)
        return self.emit(ir.Scalar, node, fn=value.fn, args=ir.refs(value.fn))

    def check_tree(self, node, depth: int, size: int) -> None:
        """Refuse a function tree deeper than :data:`MAX_DEPTH` or with more than ``max_nodes``
        operations (defs and sums expanded)."""
        if depth > MAX_DEPTH:
            raise located(TPLimitError, node, f"this expression nests more than {MAX_DEPTH} operations deep "
                          "(defs and sums expanded): split it into several statements")
        if size > self.max_nodes:
            raise located(TPLimitError, node, f"this expression has more than {self.max_nodes} operations "
                          "once defs and sums are expanded (raise max_nodes to allow it)")
