"""``diff(e, x)`` in the front end: the coordinatewise derivative of a vector expression, computed
in sympy on the expression's DAG and converted back to function trees, with the sub-expressions
a derivative repeats emitted as Nonlins of their own (so a Jacobian through batchnorm stays small).

The expression lowering creates one :class:`DiffState` at its first ``diff`` (so that only the
programs that use ``diff`` import sympy) and calls :meth:`DiffState.derivative`.  This module
reads and extends the equations through the shared :class:`~.builder.IRBuilder`; it depends on
the value types (:mod:`.values`), never on the expression lowering.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import sympy as sp

from ..symbolic import functions as fnsym
from .. import ir
from ..errors import TPValueError
from ..ir.walk import children
from .values import RExpr, located

if TYPE_CHECKING:
    from .builder import IRBuilder


def is_leaf(fn: ir.Fn) -> bool:
    """A ``Ref`` or a ``Const``: a tree with no operands."""
    return not children(fn)


#: a sub-expression of a derivative used twice or more (in it, or in an earlier derivative)
#: becomes a Nonlin of its own when its tree has at least this many operations
MIN_SHARED = 8


class VarSymbols:
    """One real sympy symbol ``v<var>`` per IR variable (``symbol(var)``), and the way back
    (``var_of[symbol]``): the leaves of the expressions ``diff`` and ``grad`` differentiate."""

    def __init__(self) -> None:
        self.symbols: dict[int, sp.Symbol] = {}
        self.var_of: dict[sp.Symbol, int] = {}

    def symbol(self, var: int) -> sp.Symbol:
        got = self.symbols.get(var)
        if got is None:
            got = self.symbols[var] = sp.Symbol(f"v{var}", real=True)
            self.var_of[got] = var
        return got


class DiffState:
    """What ``diff`` keeps across the calls of one lowering (valid because the IR is
    single-assignment): the sympy symbol of each independent variable, the expansion of
    each Nonlin through its bindings, one memoised differentiator per variable of
    differentiation, and the conversion back to function trees with its memo.

    Sharing (CSE): converting a derivative, a sub-expression that mentions a vector, has at
    least :data:`MIN_SHARED` operations and occurs twice or more in it (or occurred in an
    earlier derivative) is emitted as a Nonlin at the ``diff`` call and read through its
    variable.  Smaller derivatives come out as the same single tree as ``from_sympy``'s."""

    def __init__(self, equations: "IRBuilder") -> None:
        self.equations = equations
        self.names = VarSymbols()
        self.var_of = self.names.var_of
        self.expansions: dict[tuple[int, int | None], sp.Expr] = {}
        self.differentiators: dict[sp.Symbol, fnsym.Differentiator] = {}
        self.trees = fnsym.TreeBuilder(self.var_of.__getitem__, self.share,
                                       lambda var: equations.kind_of(var) == "vector")
        self.uses: dict[sp.Expr, int] = {}
        self.node = None
        self.width: str | None = None

    def derivative(self, node, expr: RExpr, x: int) -> RExpr:
        """∂e/∂x coordinatewise, through Nonlin bindings, stopping at MatMuls and initial vectors.

        The derivative is ``sp.diff`` of e expanded through its Nonlin bindings, computed on
        the expression's DAG; its sub-expressions used more than once become Nonlins of their
        own, so that a Jacobian through a B-argument Nonlin (batchnorm) stays linear in size
        instead of repeating the batch statistics.  The result is a vector even where ∂e/∂x
        is constant."""
        stop = x if isinstance(self.equations.eqn(x), ir.Nonlin) else None
        leaf = self.leaf_rule(x, stop)
        derivative = self.differentiator(leaf(x))(fnsym.to_sympy(expr.fn, leaf))
        self.begin(derivative, node, expr.width)
        try:
            built = self.trees.node(derivative)
        except fnsym.NotABuiltin as err:
            raise located(TPValueError, node, f"diff: the derivative contains {err}, which has no "
                          "value at a point (e.g. the derivative of step or sign)") from None
        self.equations.check_tree(node, built.depth, built.size)
        return RExpr(built.fn, "vector", expr.width, built.depth, built.size)

    def leaf_rule(self, x: int, stop: int | None) -> Callable[[int], sp.Expr]:
        """The sympy value of a variable read by e: a Nonlin other than x expands through its
        binding (memoised per ``stop``, the Nonlin x where x is one); any other variable is
        its symbol."""
        equations = self.equations

        def leaf(var: int) -> sp.Expr:
            if var != x and isinstance(equations.eqn(var), ir.Nonlin):
                key = (var, stop)
                got = self.expansions.get(key)
                if got is None:
                    got = self.expansions[key] = fnsym.to_sympy(equations.eqn(var).fn, leaf)
                return got
            return self.symbol(var)
        return leaf

    def symbol(self, var: int) -> sp.Symbol:
        """The real sympy symbol ``v<var>`` of an independent variable."""
        return self.names.symbol(var)

    def differentiator(self, x: sp.Symbol) -> fnsym.Differentiator:
        """The memoised ``∂/∂x`` (one per variable of differentiation)."""
        got = self.differentiators.get(x)
        if got is None:
            got = self.differentiators[x] = fnsym.Differentiator(x)
        return got

    def begin(self, derivative: sp.Expr, node, width: str | None) -> None:
        """Count the uses of each sub-expression of ``derivative`` not converted before."""
        self.node, self.width = node, width
        memo, uses = self.trees.memo, {}
        stack = [derivative] if derivative not in memo else []
        while stack:
            e = stack.pop()
            for a in e.args:
                seen = uses.get(a, 0)
                uses[a] = seen + 1
                if not seen and a.args and a not in memo:
                    stack.append(a)
        self.uses = uses

    def share(self, expr: sp.Expr, built: fnsym.Built, new: bool) -> fnsym.Built:
        """``built`` itself, or a Nonlin emitted for it where it is a large shared vector
        sub-expression (see the class docstring); ``new``: converted for the first time."""
        if is_leaf(built.fn) or not built.vector or built.size < MIN_SHARED:
            return built
        if new and self.uses.get(expr, 0) < 2:
            return built
        self.equations.check_tree(self.node, built.depth, built.size)
        var = self.equations.emit(ir.Nonlin, self.node, fn=built.fn, args=ir.refs(built.fn),
                                  width=self.width)
        return fnsym.Built(ir.Ref(var), 1, 0, True)
