"""The typed values of front-end expressions, shared by every stage of the lowering.

An expression evaluates to one of:

* a constant: a Python ``float`` or a numpy array (folded while the program is unrolled);
* a ``str`` (the file name of ``load``);
* a :class:`MatVal`: a matrix variable, possibly transposed (usable only left of ``@``);
* a :class:`MatExpr`: a matrix plus rank-one terms (``outer``, updates ``W - c * outer(g, h)``);
* an :class:`RExpr`: a runtime value, a function tree ``fn`` over IR variables, typed
  ``vector`` (of a width) or ``scalar``.

This module depends on the IR and the errors only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from .. import ir
from ..errors import TPError, TPTypeError


@dataclass(frozen=True)
class RExpr:
    """A runtime value: ``fn`` over IR variables, of kind ``vector`` (of ``width``) or ``scalar``."""
    fn: ir.Fn
    kind: str            # "vector" | "scalar"
    width: str | None    # the width of a vector
    depth: int = 0       # of ``fn`` (a leaf is 0)
    size: int = 1        # operations in ``fn``, defs and sums expanded

    @property
    def var(self) -> int | None:
        """The variable ``fn`` is, when it is a bare ``Ref`` (else ``None``)."""
        return self.fn.var if isinstance(self.fn, ir.Ref) else None


@dataclass(frozen=True)
class MatVal:
    """The matrix bound to variable ``var``, or its transpose."""
    var: int
    transposed: bool


@dataclass(frozen=True)
class RankOne:
    """``coeff · left rightᵀ / |denom|``: a rank-one term of a matrix expression (``left``, ``right``
    vector variables, ``coeff`` a scalar: a float or a scalar RExpr; ``denom`` the width whose size
    divides, the columns of the ``outer`` that made it)."""
    coeff: "float | RExpr"
    left: int
    right: int
    denom: str


@dataclass(frozen=True)
class MatExpr:
    """``base_coeff · base + Σ terms``: a random matrix (or none) plus rank-one terms, ``rows`` x ``cols``
    (the value of ``outer(g, h)`` and of updates such as ``W - lr * outer(g, h)``)."""
    base: MatVal | None
    base_coeff: "float | RExpr"
    terms: tuple[RankOne, ...]
    rows: str
    cols: str


@dataclass(frozen=True)
class DataMat:
    """A matrix ``rows`` x ``cols`` whose input width ``cols`` is a fixed data dimension: its
    products with data vectors (constants of that dimension) are the members of initial
    ``group``, drawn jointly with covariance σ² X Xᵀ/d (exactly the law of the product)."""
    name: str
    group: int           # -1 for a zero matrix (var=0): its products are 0 exactly
    rows: str
    cols: str


#: what an expression evaluates to
Value = Union[float, np.ndarray, str, MatVal, MatExpr, DataMat, RExpr]
#: the matrix values
MATRICES = (MatVal, MatExpr, DataMat)


def located(cls: type[TPError], node, message: str) -> TPError:
    """An error of class ``cls`` at the line and column of the syntax node ``node``."""
    return cls(message, node.line, node.col)


def runtime(node, value: Value) -> RExpr:
    """A value as a function tree: a scalar constant becomes a ``Const`` leaf; a matrix,
    a list constant or a string is refused, located at ``node``."""
    if isinstance(value, RExpr):
        return value
    if isinstance(value, float):
        return RExpr(ir.Const(value), "scalar", None)
    if isinstance(value, MATRICES):
        raise located(TPTypeError, node, "a matrix used as a value (write W @ v)")
    if isinstance(value, np.ndarray):
        raise located(TPTypeError, node, "a list constant cannot be used as a value here (nor a data vector): "
                      "index it (S[i, j]), take its mean, or multiply it by a data matrix (U @ x)")
    raise located(TPTypeError, node, "a string cannot be used as a value")
