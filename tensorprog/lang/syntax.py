"""The abstract syntax tree: what the parser produces, before any meaning is given.

Every node carries ``line`` and ``col`` (1-based) of its first token.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Node:
    line: int
    col: int


# ---- expressions -------------------------------------------------------------
@dataclass(frozen=True)
class Number(Node):
    value: float


@dataclass(frozen=True)
class String(Node):
    value: str


@dataclass(frozen=True)
class Name(Node):
    name: str


@dataclass(frozen=True)
class Index(Node):
    name: str
    indices: tuple[Node, ...]


@dataclass(frozen=True)
class Call(Node):
    func: str
    args: tuple[Node, ...]
    kwargs: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class BinOp(Node):
    op: str            # + - * / @ ** == != < <= > >=
    lhs: Node
    rhs: Node


@dataclass(frozen=True)
class Neg(Node):
    operand: Node


@dataclass(frozen=True)
class Transpose(Node):
    operand: Node


@dataclass(frozen=True)
class Cond(Node):
    then: Node
    test: Node
    orelse: Node


@dataclass(frozen=True)
class Range(Node):
    start: Node
    stop: Node


@dataclass(frozen=True)
class SumOver(Node):
    var: str
    range: Range
    body: Node


@dataclass(frozen=True)
class ListLit(Node):
    items: tuple[Node, ...]


@dataclass(frozen=True)
class ListComp(Node):
    item: Node
    var: str
    range: Range


# ---- statements --------------------------------------------------------------
@dataclass(frozen=True)
class Decl(Node):
    name: str
    range: Range | None


@dataclass(frozen=True)
class Dist(Node):
    family: str
    args: tuple[Node, ...]
    kwargs: tuple[tuple[str, Node], ...]


@dataclass(frozen=True)
class Param(Node):
    name: str
    value: Node


@dataclass(frozen=True)
class Dim(Node):
    name: str
    ratio: Node


@dataclass(frozen=True)
class Data(Node):
    """``vector x[a..b] : d = EXPR``: data vectors, the rows of a constant array, of the fixed width d."""
    decl: Decl
    width: str
    value: Node
    width_at: tuple[int, int] | None = None


@dataclass(frozen=True)
class VectorDecl(Node):
    decls: tuple[Decl, ...]
    width: str | None
    dist: Dist
    width_at: tuple[int, int] | None = None       # position of the width name


@dataclass(frozen=True)
class MatrixDecl(Node):
    decl: Decl
    shape: tuple[str, str] | None       # (rows, cols) width names
    dist: Dist
    shape_at: tuple[tuple[int, int], tuple[int, int]] | None = None
    more: tuple[Decl, ...] = ()         # ``matrix A, B ~ ...``: the names after the first


@dataclass(frozen=True)
class Assign(Node):
    name: str
    indices: tuple[Node, ...]
    value: Node


@dataclass(frozen=True)
class For(Node):
    var: str
    range: Range
    body: tuple[Node, ...]


@dataclass(frozen=True)
class Def(Node):
    name: str
    params: tuple[str, ...]
    body: Node


@dataclass(frozen=True)
class Out(Node):
    name: str
    value: Node | None
    indices: tuple[Node, ...] = ()      # ``out K[i, j] = ...``: an entry of an array of outputs


@dataclass(frozen=True)
class Module:
    statements: tuple[Node, ...]
