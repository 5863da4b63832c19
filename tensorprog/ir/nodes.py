"""The IR: one flat, single-assignment list of equations shared by both back ends.

A program is a sequence of nodes, each binding one variable ``%k``:

  ======================  ===============================================
  InitVector              an initial vector, member of a jointly drawn group
  Matrix                  a random matrix (entries variance var/fan_in)
  MatMul(W, x, T)         W x, or Wᵀ x when ``transposed``
  Nonlin(f, args)         coordinatewise f of vectors (and scalars)
  Moment(f, args)         (1/n) Σ_α f(x_α...)  — a scalar
  Scalar(f, args)         a function of scalars only
  RankOne(prev, c, g, h)  a matrix value: ``prev``'s terms plus c·g hᵀ/|d|
  LowRank(terms, x, T)    Σ_t c_t g_t (h_t·x)/|d_t| over ``terms``' chain
  ======================  ===============================================

A matrix updated many times (``W = W - lr * outer(g, h)`` in a training loop) is its random
base matrix plus a chain of ``RankOne`` terms, each naming the one before: the chain grows by
one equation per update, and a product by the updated matrix is a ``MatMul`` by the base plus
one ``LowRank`` equation (the back ends keep the chain's vectors stacked, an O(n·k) product),
so the IR stays linear in the number of updates (:mod:`tensorprog.lang.matrices`).

Functions ``f`` are small expression trees (``Fn``) whose leaves are ``Ref(var)``
or ``Const``: built from the parse tree by the front end, lowered to numpy by the
executor and to sympy by the compiler, all through :mod:`.walk`.  The whole program
(equations, groups, outputs) is :class:`.program.Program`.  This module imports nothing
of Lark, numpy or sympy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union


# ---- function trees ---------------------------------------------------------
@dataclass(frozen=True)
class Ref:
    var: int


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Call:
    name: str                 # a builtin of tensorprog.builtins.BUILTINS
    args: tuple["Fn", ...]


@dataclass(frozen=True)
class Bin:
    op: str                   # + - * / **
    lhs: "Fn"
    rhs: "Fn"


@dataclass(frozen=True)
class Neg:
    operand: "Fn"


Fn = Union[Ref, Const, Call, Bin, Neg]


# ---- equations ----------------------------------------------------------------
@dataclass(frozen=True)
class Pos:
    line: int
    col: int


@dataclass(frozen=True)
class InitVector:
    var: int
    name: str
    group: int                 # index into Program.groups
    member: int                # position inside the group
    width: str
    pos: Pos


@dataclass(frozen=True)
class Matrix:
    var: int
    name: str
    dist: Any                  # distributions.DistSpec
    rows: str                  # width names ("n" or a dim)
    cols: str
    pos: Pos


@dataclass(frozen=True)
class MatMul:
    var: int
    matrix: int
    arg: int
    transposed: bool
    width: str                 # width of the result
    pos: Pos


@dataclass(frozen=True)
class Nonlin:
    var: int
    fn: Fn
    args: tuple[int, ...]
    width: str
    pos: Pos


@dataclass(frozen=True)
class Moment:
    var: int
    fn: Fn
    args: tuple[int, ...]
    width: str                 # the width averaged over
    pos: Pos


@dataclass(frozen=True)
class Scalar:
    var: int
    fn: Fn
    args: tuple[int, ...]
    pos: Pos


@dataclass(frozen=True)
class RankOne:
    """A link of a chain of rank-one terms: the terms of ``prev`` (an earlier RankOne, or -1 for
    none) plus ``scale·c·left rightᵀ/|denom|``, with c the scalar variable ``coeff`` (or 1 when
    ``coeff`` is -1): a ``rows`` x ``cols`` matrix value, read only by LowRank equations and
    later links.  A product reads h·x/|denom| as mean(h x)·|width(h)|/|denom|, the widths' ratio
    taken from ``Program.dims`` (as the expansion by definition does)."""
    var: int
    prev: int
    coeff: int
    scale: float
    left: int
    right: int
    denom: str
    rows: str
    cols: str
    pos: Pos

    @property
    def args(self) -> tuple[int, ...]:
        """The variables the link reads (its previous link, coefficient and vectors)."""
        return tuple(v for v in (self.prev, self.coeff, self.left, self.right) if v >= 0)


@dataclass(frozen=True)
class LowRank:
    """The product of the rank-one terms of the chain ending at ``terms`` (a RankOne) with the
    vector ``arg``: Σ_t scale_t c_t left_t mean(right_t arg)·|w(right_t)|/|denom_t|, or with
    each term transposed (left and right exchanged) when ``transposed``."""
    var: int
    terms: int
    arg: int
    transposed: bool
    width: str                 # width of the result
    pos: Pos

    @property
    def args(self) -> tuple[int, ...]:
        return (self.terms, self.arg)


Eqn = Union[InitVector, Matrix, MatMul, Nonlin, Moment, Scalar, RankOne, LowRank]
VECTOR_OPS = (InitVector, MatMul, Nonlin, LowRank)
SCALAR_OPS = (Moment, Scalar)
FUNCTION_OPS = (Nonlin, Moment, Scalar)
#: the equations of products by an updated matrix's rank-one terms (:class:`RankOne` chains)
LOW_RANK_OPS = (RankOne, LowRank)


@dataclass(frozen=True)
class Group:
    """Initial vectors drawn jointly: each coordinate draws (members...) from ``dist``."""
    dist: Any                  # distributions.DistSpec (with cov for several members)
    members: tuple[int, ...]   # variables
    width: str


@dataclass(frozen=True)
class Output:
    """A scalar output: ``name`` is unique (``K[1, 2]`` for an entry of an array of outputs,
    whose ``array`` is then ``K`` and ``index`` (1, 2))."""
    name: str
    var: int
    pos: Pos
    array: str | None = None
    index: tuple[int, ...] = ()
