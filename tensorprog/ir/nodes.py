"""The IR: one flat, single-assignment list of equations shared by both back ends.

A program is a sequence of nodes, each binding one variable ``%k``:

  ======================  ===============================================
  InitVector              an initial vector, member of a jointly drawn group
  Matrix                  a random matrix (entries variance var/fan_in)
  MatMul(W, x, T)         W x, or Wᵀ x when ``transposed``
  Nonlin(f, args)         coordinatewise f of vectors (and scalars)
  Moment(f, args)         (1/n) Σ_α f(x_α...)  — a scalar
  Scalar(f, args)         a function of scalars only
  ======================  ===============================================

Functions ``f`` are small expression trees (``Fn``) whose leaves are ``Ref(var)``
or ``Const``: built from the parse tree by the front end, lowered to numpy by the
executor and to sympy by the compiler.  This module imports nothing of Lark,
numpy or sympy.
"""
from __future__ import annotations

from dataclasses import dataclass, field
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
    name: str                 # a builtin of nonlin.BUILTINS
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


def refs(fn: Fn) -> tuple[int, ...]:
    """The variables a function reads, in order of first appearance."""
    seen: dict[int, None] = {}

    def walk(f: Fn) -> None:
        if isinstance(f, Ref):
            seen.setdefault(f.var)
        elif isinstance(f, Call):
            for a in f.args:
                walk(a)
        elif isinstance(f, Bin):
            walk(f.lhs)
            walk(f.rhs)
        elif isinstance(f, Neg):
            walk(f.operand)
    walk(fn)
    return tuple(seen)


def calls(fn: Fn) -> set[str]:
    """Names of the builtins a function applies."""
    if isinstance(fn, Call):
        return {fn.name}.union(*(calls(a) for a in fn.args))
    if isinstance(fn, Bin):
        return calls(fn.lhs) | calls(fn.rhs)
    if isinstance(fn, Neg):
        return calls(fn.operand)
    return set()


def show_fn(fn: Fn) -> str:
    if isinstance(fn, Ref):
        return f"%{fn.var}"
    if isinstance(fn, Const):
        return f"{fn.value:g}"
    if isinstance(fn, Call):
        return f"{fn.name}({', '.join(show_fn(a) for a in fn.args)})"
    if isinstance(fn, Bin):
        return f"({show_fn(fn.lhs)} {fn.op} {show_fn(fn.rhs)})"
    return f"-{show_fn(fn.operand)}"


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


Eqn = Union[InitVector, Matrix, MatMul, Nonlin, Moment, Scalar]
VECTOR_OPS = (InitVector, MatMul, Nonlin)
SCALAR_OPS = (Moment, Scalar)
FUNCTION_OPS = (Nonlin, Moment, Scalar)


@dataclass(frozen=True)
class Group:
    """Initial vectors drawn jointly: each coordinate draws (members...) from ``dist``."""
    dist: Any                  # distributions.DistSpec (with cov for several members)
    members: tuple[int, ...]   # variables
    width: str


@dataclass(frozen=True)
class Output:
    name: str
    var: int
    pos: Pos


@dataclass(frozen=True)
class Program:
    eqns: tuple[Eqn, ...]
    groups: tuple[Group, ...]
    outputs: tuple[Output, ...]
    dims: dict[str, float] = field(default_factory=dict)   # width name -> ratio to n
    params: dict[str, float] = field(default_factory=dict)
    file: str = "<string>"
    source: str = ""
    base_dir: str = "."

    def eqn(self, var: int) -> Eqn:
        return self.eqns[var]

    def __str__(self) -> str:
        return "\n".join(show_eqn(e) for e in self.eqns) + "\n" + "\n".join(
            f"out {o.name} = %{o.var}" for o in self.outputs)


def show_eqn(e: Eqn) -> str:
    where = f"    # line {e.pos.line}"
    if isinstance(e, InitVector):
        return f"%{e.var} = init {e.name} (group {e.group}.{e.member}) :{e.width}{where}"
    if isinstance(e, Matrix):
        return f"%{e.var} = matrix {e.name} {e.dist.family}(var={e.dist.var:g}) {e.rows}x{e.cols}{where}"
    if isinstance(e, MatMul):
        return f"%{e.var} = matmul %{e.matrix}{'.T' if e.transposed else ''} @ %{e.arg}{where}"
    kind = type(e).__name__.lower()
    return f"%{e.var} = {kind} {show_fn(e.fn)}{where}"
