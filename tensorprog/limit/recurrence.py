"""The Master Theorem recurrence as data: a frozen, flat list of records (docs/recurrence.md).

The compiler (:mod:`.compiler`) appends one record per fact it derives, in program order; the
printers (:mod:`.printers`: text, LaTeX, HTML, JSON) read the records and nothing else.  Every
record names the variable it belongs to by a :class:`Source` (the IR variable ``%k``, the
program's own name for it such as ``a[2]`` or ``da3``, and its line and column).

Record kinds (``kind``):

* ``matrix`` (:class:`MatrixLaw`): a matrix W, entries of variance σ²/cols, its law; an ``mvt``
  matrix also has its rows' random scale ``u`` (a base variable).
* ``initial`` (:class:`InitialBase`): the base variable Z_x of an initial vector x, with its law
  (family, mean, its row of the group's covariance or its variance).
* ``hat`` (:class:`HatBase`): the Gaussian Ẑ^{Wx} of a product W x (or Wᵀ x), a member of the
  family of W in that direction (``haar``: the residual of a Haar-orthogonal product).
* ``covariance`` (:class:`Covariance`): Cov(a, b) of two Gaussian base variables; for a product,
  σ²·f times an expectation node (Cov(Ẑ^{Wx}, Ẑ^{Wy}) = σ² f E[Z^x Z^y]).
* ``expectation`` (:class:`Expectation`): E[integrand] over the base variables, its value and the
  index of its estimate (method, error) in ``Compiled.estimates``.
* ``zdot`` (:class:`ZdotCoefficient`): one term σ² f · E[∂Z^x/∂Ẑ^{Wᵀy}] · Z^y of Ż^{Wx}.
* ``vector`` (:class:`VectorZ`): Z of a vector, as a sympy tree over the base variables, with
  the IR step (``Fn``) it came from; for a product Z = outer·(Ẑ + Ż).
* ``scalar`` (:class:`ScalarNode`): c̊ of a Moment (E of its integrand) or of a Scalar (a
  function of scalars), with its limit (value, error, method, closed form).

Values are sympy expressions; param symbols stay as leaves where the compile kept them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Union

import sympy as sp

from .. import ir

if TYPE_CHECKING:
    from .result import LimitValue


@dataclass(frozen=True)
class Source:
    """Where a variable comes from: ``%var``, the program's name for it (``a[2]``; ``""`` when the
    program never named it) and its line and column."""
    var: int
    name: str
    line: int
    col: int

    @property
    def label(self) -> str:
        """The program's name, else ``%var``."""
        return self.name or f"%{self.var}"

    @classmethod
    def of(cls, program: ir.Program, var: int, outputs: Mapping[int, str] | None = None) -> "Source":
        """The source of ``var``: a declared name, the first name bound to it, else the first
        output it is (``outputs``: {var: output name}, :func:`output_names`, to save the search)."""
        e = program.eqns[var]
        name = e.name if isinstance(e, (ir.InitVector, ir.Matrix)) else program.names.get(var, "")
        if not name:
            name = (outputs if outputs is not None else output_names(program)).get(var, "")
        return cls(var, name, e.pos.line, e.pos.col)


def output_names(program: ir.Program) -> dict[int, str]:
    """var -> the name of the first output that is it."""
    out: dict[int, str] = {}
    for o in program.outputs:
        out.setdefault(o.var, o.name)
    return out


@dataclass(frozen=True)
class MatrixLaw:
    """A matrix: entries of variance ``variance``/cols, law ``family``, shape rows x cols (width
    names); ``row_scale``: the base variable u of an mvt matrix (W = diag(|u|)·G), else None."""
    source: Source
    family: str
    variance: float
    rows: str
    cols: str
    row_scale: sp.Symbol | None = None
    kind: str = "matrix"


@dataclass(frozen=True)
class InitialBase:
    """Z_x = mean + symbol of an initial vector x: ``symbol`` has law ``family`` with its row
    ``cov_row`` of its group's covariance (Gaussian groups) or variance ``variance``."""
    source: Source
    symbol: sp.Symbol
    family: str
    mean: sp.Expr
    group: int
    member: int
    cov_row: tuple[float, ...] | None
    variance: float | None
    kind: str = "initial"


@dataclass(frozen=True)
class HatBase:
    """Ẑ^{Wx}: the Gaussian of the product ``source`` = W x (``transposed``: Wᵀ x), ``arg`` = x."""
    source: Source
    symbol: sp.Symbol
    matrix: Source
    transposed: bool
    arg: Source
    haar: bool = False
    kind: str = "hat"


@dataclass(frozen=True)
class Covariance:
    """Cov(a, b) = ``value``; for a product's Ẑ, ``value`` = ``sigma2`` · the expectation node
    ``expectation`` (an index into ``Compiled.estimates``), else both are None."""
    source: Source
    a: sp.Symbol
    b: sp.Symbol
    value: sp.Expr
    sigma2: sp.Expr | None = None
    expectation: int | None = None
    kind: str = "covariance"


@dataclass(frozen=True)
class Expectation:
    """E[``integrand``] = ``value``, computed for ``source``; ``index``: its estimate in
    ``Compiled.estimates`` (method, error)."""
    source: Source
    index: int
    integrand: sp.Expr
    value: sp.Expr
    kind: str = "expectation"


@dataclass(frozen=True)
class ZdotCoefficient:
    """A term ``sigma2`` · ``coefficient`` · Z^``partner`` of Ż of the product ``source``:
    ``coefficient`` = E[∂Z^x/∂``hat``] (the expectation node ``expectation``), ``hat`` the Ẑ of
    the other direction's product of ``partner``."""
    source: Source
    hat: sp.Symbol
    partner: Source
    sigma2: sp.Expr
    coefficient: sp.Expr
    expectation: int
    kind: str = "zdot"


@dataclass(frozen=True)
class VectorZ:
    """Z of a vector. ``op``: ``initial``, ``matmul`` (Z = outer·(hat + dot)), ``haar`` (a
    Haar-orthogonal product), ``nonlin`` (Z = φ(Z of ``step``'s refs)) or ``same`` (the same
    product again: Z of ``arg``).  ``nesting``: the deepest chain of Nonlins under it."""
    source: Source
    op: str
    z: sp.Expr
    step: ir.Fn | None = None
    matrix: Source | None = None
    transposed: bool = False
    arg: Source | None = None
    hat: sp.Symbol | None = None
    dot: sp.Expr = sp.Integer(0)
    outer: sp.Expr = sp.Integer(1)
    nesting: int = 0
    kind: str = "vector"


@dataclass(frozen=True)
class ScalarNode:
    """c̊ of a scalar. ``op``: ``moment`` (c̊ = E[``integrand``], the expectation node
    ``expectation``) or ``scalar`` (c̊ = ``step`` of scalars); ``limit``: a Moment's value, error,
    method and closed form (None for a Scalar: ``Compiled.result`` gives it); ``nesting`` as for :class:`VectorZ` (of the integrand's vectors)."""
    source: Source
    op: str
    value: sp.Expr
    step: ir.Fn
    limit: LimitValue | None
    integrand: sp.Expr | None = None
    expectation: int | None = None
    nesting: int = 0
    kind: str = "scalar"


Record = Union[MatrixLaw, InitialBase, HatBase, Covariance, Expectation, ZdotCoefficient, VectorZ, ScalarNode]
#: the base variables of the probability space
BASES = (InitialBase, HatBase)


@dataclass(frozen=True)
class Recurrence:
    """The records in the order the compiler derived them (a record only refers to earlier ones)."""
    records: tuple[Record, ...]

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.kind == kind]

    def defining(self) -> dict[int, Record]:
        """var -> the record that defines it (matrix, vector or scalar)."""
        return {r.source.var: r for r in self.records if isinstance(r, (MatrixLaw, VectorZ, ScalarNode))}

    def covariances(self) -> dict[sp.Symbol, list[Covariance]]:
        """symbol -> the covariance entries recorded with it as ``a`` (its variance first)."""
        out: dict[sp.Symbol, list[Covariance]] = {}
        for r in self.records:
            if isinstance(r, Covariance):
                out.setdefault(r.a, []).append(r)
        return out

    def bases(self) -> dict[sp.Symbol, Record]:
        """symbol -> its base record (initial vectors, Ẑ's; an mvt matrix's row scale)."""
        out: dict[sp.Symbol, Record] = {r.symbol: r for r in self.records if isinstance(r, BASES)}
        out.update({r.row_scale: r for r in self.records if isinstance(r, MatrixLaw) and r.row_scale is not None})
        return out
