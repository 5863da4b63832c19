"""Function trees <-> sympy: the bridge used by ``diff`` and by the compiler.

``to_sympy`` maps ``Ref(v)`` leaves through a callback (a symbol, or the Z of v);
``from_sympy`` turns a sympy expression over leaf symbols back into a function tree
(used after symbolic differentiation), refusing heads that are not builtins
(e.g. the Dirac mass that is the derivative of ``step``).

For ``diff``, which differentiates expressions expanded through every Nonlin binding
(large, and full of repeated sub-expressions: a batchnorm Jacobian repeats the batch
mean and variance), both directions work on the sympy DAG rather than on the tree:
:class:`Differentiator` is ``sp.diff`` memoised on sub-expressions, and
:class:`TreeBuilder` is ``from_sympy`` memoised, with a hook through which the caller
replaces shared sub-expressions by variables (:class:`tensorprog.lang.diff.DiffState`).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import sympy as sp
from sympy.core.function import ArgumentIndexError
from sympy.ntheory.multinomial import multinomial_coefficients_iterator

from .. import ir
from .heads import HEADS
from .heads import Delta

_HEAD_TO_NAME: dict[object, str] = {head: name for name, head in HEADS.items()}
_HEAD_TO_NAME.update({sp.Abs: "abs", sp.sign: "sign", sp.Heaviside: "step"})


def to_sympy(fn: ir.Fn, leaf: Callable[[int], sp.Expr], exact: bool = False) -> sp.Expr:
    """The sympy expression of ``fn``: ``Ref(v)`` is ``leaf(v)``, constants become sympy numbers
    (:func:`constant`: Integers, Floats, or Rationals if ``exact``) before any operator applies,
    builtins their heads (:data:`HEADS`), operators those of ``ir.ARITHMETIC`` (sympy's
    ``+ - * / **``).  A sub-tree shared by reference is converted once."""
    return ir.fold(fn, ir.Rules(ref=lambda node: leaf(node.var),
                                const=lambda node: constant(node.value, exact),
                                call=lambda node, args: HEADS[node.name](*args)))


def constant(value: float, exact: bool) -> sp.Expr:
    """A number as sympy: integers stay integers; with ``exact``, short decimals become rationals
    (by ``nsimplify``, ~0.1 s a number: remembered per value)."""
    return _constant(float(value), bool(exact))


@lru_cache(maxsize=4096)
def _constant(value: float, exact: bool) -> sp.Expr:
    if value.is_integer() and abs(value) < 2**53:
        return sp.Integer(int(value))
    if exact:
        guess = sp.nsimplify(float(value), [sp.pi], tolerance=1e-15)
        if abs(float(guess) - value) <= 2.5e-16 * max(1.0, abs(value)) and sp.count_ops(guess) <= 12:
            return guess          # 0.3 -> 3/10, 0.7071... -> sqrt(2)/2, 0.6366... -> 2/pi
    return sp.Float(value)


class NotABuiltin(ValueError):
    """A sympy expression uses a function the language cannot express."""


def from_sympy(expr: sp.Expr, var_of: Callable[[sp.Symbol], int]) -> ir.Fn:
    """The function tree of a sympy expression whose symbols are variables.

    Equal sympy sub-expressions give the same (shared) ``ir.Fn`` object."""
    return TreeBuilder(var_of).build(expr)


@dataclass(frozen=True)
class Built:
    """A converted sub-expression: its tree, the size and depth of that tree (as
    :func:`shape` counts them), and whether a vector variable occurs in it."""
    fn: ir.Fn
    size: int
    depth: int
    vector: bool


class TreeBuilder:
    """``from_sympy`` memoised on sympy sub-expressions, in linear time on the expression's
    DAG (no ``free_symbols`` per node).

    ``share(expr, built, new)`` (optional) sees every node as it is reached, ``new`` when it
    was converted just now and not found in the memo; it may return a replacement (the
    caller's CSE: a ``Ref`` to a variable holding the sub-expression).  The memo persists
    across :meth:`build` calls, so one builder can convert many expressions that share
    sub-expressions.  ``is_vector(var)`` marks the vector variables (``Built.vector``).
    """

    def __init__(self, var_of: Callable[[sp.Symbol], int],
                 share: Callable[[sp.Expr, Built, bool], Built] | None = None,
                 is_vector: Callable[[int], bool] = lambda var: False) -> None:
        self.var_of = var_of
        self.share = share
        self.is_vector = is_vector
        self.memo: dict[sp.Expr, Built] = {}
        self._const: dict[sp.Expr, bool] = {}

    def build(self, expr: sp.Expr) -> ir.Fn:
        return self.node(expr).fn

    def is_constant(self, expr: sp.Expr) -> bool:
        """No free symbol in ``expr`` (memoised: ``expr.free_symbols`` walks the whole tree)."""
        got = self._const.get(expr)
        if got is None:
            got = not expr.is_Symbol and all(self.is_constant(a) for a in expr.args)
            self._const[expr] = got
        return got

    def node(self, expr: sp.Expr) -> Built:
        got = self.memo.get(expr)
        new = got is None
        if new:
            got = self._convert(expr)
        if self.share is not None:
            got = self.share(expr, got, new)
        self.memo[expr] = got
        return got

    def _convert(self, expr: sp.Expr) -> Built:
        if self.is_constant(expr):
            if expr.has(Delta):
                raise NotABuiltin("a Dirac mass")
            value = complex(expr.evalf())
            if value.imag:
                raise NotABuiltin(f"a complex constant {expr}")
            return Built(ir.Const(value.real), 1, 0, False)
        if isinstance(expr, sp.Symbol):
            var = self.var_of(expr)
            return Built(ir.Ref(var), 1, 0, self.is_vector(var))
        if isinstance(expr, (sp.Add, sp.Mul)):
            op = "+" if isinstance(expr, sp.Add) else "*"
            parts = [self.node(a) for a in expr.args]
            while len(parts) > 1:           # pairwise: log2(len(args)) deep
                pairs = [_bin(op, a, b) for a, b in zip(parts[::2], parts[1::2])]
                parts = pairs + parts[len(pairs) * 2:]
            return parts[0]
        if isinstance(expr, sp.Pow):
            return _bin("**", self.node(expr.base), self.node(expr.exp))
        if isinstance(expr, sp.exp):
            return _call("exp", [self.node(expr.args[0])])
        head = _HEAD_TO_NAME.get(expr.func)
        if head is None:
            raise NotABuiltin("a Dirac mass" if expr.func is Delta else f"the function {expr.func}")
        return _call(head, [self.node(a) for a in expr.args])


def _bin(op: str, a: Built, b: Built) -> Built:
    return Built(ir.Bin(op, a.fn, b.fn), 1 + a.size + b.size, 1 + max(a.depth, b.depth),
                 a.vector or b.vector)


def _call(name: str, args: list[Built]) -> Built:
    return Built(ir.Call(name, tuple(a.fn for a in args)), 1 + sum(a.size for a in args),
                 1 + max(a.depth for a in args), any(a.vector for a in args))


class Differentiator:
    """∂/∂x of sympy expressions, memoised on sub-expressions.

    The result is ``sp.diff(expr, x)``'s: the same rules (those of ``Add``, ``Mul``, ``Pow``
    and ``Function``) applied in the same order, so the same expression.  But ``sp.diff``
    differentiates a sub-expression once per occurrence and recomputes ``free_symbols`` at
    every level, which is quadratic in the size of the tree; here every distinct
    sub-expression is differentiated once, and the memo persists across calls.  Other
    heads (``Min``, ``Max``, ...) are left to ``sp.diff``.
    """

    def __init__(self, x: sp.Symbol) -> None:
        self.x = x
        self._memo: dict[sp.Expr, sp.Expr] = {}
        self._dep: dict[sp.Expr, bool] = {}

    def depends(self, expr: sp.Expr) -> bool:
        got = self._dep.get(expr)
        if got is None:
            got = expr == self.x if not expr.args else any(self.depends(a) for a in expr.args)
            self._dep[expr] = got
        return got

    def __call__(self, expr: sp.Expr) -> sp.Expr:
        got = self._memo.get(expr)
        if got is None:
            got = self._derive(expr)
            self._memo[expr] = got
        return got

    def _derive(self, e: sp.Expr) -> sp.Expr:
        if not self.depends(e):            # Derivative(): x not among the free symbols
            return sp.S.Zero
        if e == self.x:
            return sp.S.One
        if e.is_Add:                       # Add._eval_derivative
            return e.func(*[self(a) for a in e.args])
        if e.is_Mul:                       # Mul._eval_derivative_n_times(x, 1)
            terms = []
            for kvals, c in multinomial_coefficients_iterator(len(e.args), sp.Integer(1)):
                terms.append(c * sp.Mul(*[self(a) if k else a for k, a in zip(kvals, e.args)]))
            return sp.Add(*terms)
        if e.is_Pow:                       # Pow._eval_derivative
            return e * (self(e.exp) * sp.log(e.base) + self(e.base) * e.exp / e.base)
        if isinstance(e, sp.Function) and type(e)._eval_derivative is sp.Function._eval_derivative:
            terms = []
            for i, a in enumerate(e.args, 1):
                da = self(a)
                if da.is_zero:
                    continue
                try:
                    df = e.fdiff(i)
                except ArgumentIndexError:
                    df = sp.Function.fdiff(e, i)
                terms.append(df * da)
            return sp.Add(*terms)
        return sp.diff(e, self.x)


def shape(fn: ir.Fn) -> tuple[int, int]:
    """(depth, number of operations) of a function tree as a tree (a sub-tree used twice counts
    twice): a leaf has depth 0 and size 1, a node 1 + the max depth and 1 + the total size of
    its operands.  Linear in the number of distinct node objects (no recursion)."""
    return ir.fold(fn, ir.Rules(ref=_leaf_shape, const=_leaf_shape, call=lambda node, args: _node_shape(args),
                                bin=lambda node, lhs, rhs: _node_shape((lhs, rhs)),
                                neg=lambda node, operand: _node_shape((operand,))))


def _leaf_shape(node: ir.Fn) -> tuple[int, int]:
    return 0, 1


def _node_shape(operands) -> tuple[int, int]:
    return 1 + max(d for d, _ in operands), 1 + sum(s for _, s in operands)
