"""Kernel templates written with data inputs: the two data points of a pair come from the dataset.

A dataset kernel (``tp.kernel``, ``tpc kernel``) runs a template, the network for two inputs, on
every pair of data points.  A template written with data inputs declares its inputs as data
(``vector x[1..2] : d = load(...)``, or one declaration per input, each a vector or a sequence
``x[1..T]``), and the dataset kernel lowers it with :class:`KernelInputs` in their place: the
declarations' own values are not read, the dimension d is the data's, and

* ``U @ x`` (U the one input-layer matrix, entries N(0, s/d)) is the member of U's initial group
  for the vector x, members in the order of the inputs' vectors (first input's, then the
  second's): the group's covariance is s·Q with Q = (vectors' Gram matrix)/d, a function of the
  pair alone, so one IR serves every pair (the limit kernel batches and replays it);
* ``mean(x_a * x_b)`` (and ``mean(x_a ** 2)``) of the inputs' vectors, xₐᵀx_b/d, which varies
  over the pairs, is a Moment instead of a folded constant: in the limit (``gram="limit"``)
  ``mean(U x_a · U x_b) / s``, exactly Q_ab (its limit is the group's covariance entry); at finite
  width (``gram="finite"``) ``mean(ξ_a · ξ_b)`` of a hidden group ξ whose columns the kernel
  fills with an exact factor of Q (so the value is Q_ab to rounding, as the program computes it).

Any other use of the inputs' data (another function of the coordinates) would not be one IR for
every pair: it is a located error, as are shapes that do not fit the template.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import syntax as S
from ..errors import TPTypeError, TPValueError
from .values import located

GRAM_MODES = ("limit", "finite")


@dataclass(frozen=True)
class KernelInputs:
    """The two data points of a pair: each (d,), a vector, or (T, d), a sequence of T vectors
    (both of one shape).  ``gram``: how ``mean(x_a * x_b)`` of their vectors is lowered."""
    first: np.ndarray
    second: np.ndarray
    gram: str = "limit"

    def __post_init__(self) -> None:
        if np.shape(self.first) != np.shape(self.second) or np.ndim(self.first) not in (1, 2):
            raise ValueError("the two data points must be arrays of one shape, (d,) or (T, d)")
        if self.gram not in GRAM_MODES:
            raise ValueError(f"gram must be one of {GRAM_MODES}")

    @property
    def tokens(self) -> int:
        """T: the vectors of one data point (1 for a vector)."""
        return 1 if np.ndim(self.first) == 1 else int(np.shape(self.first)[0])

    @property
    def sequences(self) -> bool:
        return np.ndim(self.first) == 2

    def vectors(self) -> np.ndarray:
        """(2T, d): the first point's vectors, then the second's (vector k of the pair)."""
        return np.concatenate([np.atleast_2d(self.first), np.atleast_2d(self.second)]).astype(float)


@dataclass(frozen=True)
class TemplateLayout:
    """Where a lowered data template's pair enters: ``group`` the input layer's initial group
    (member k = U·(vector k of the pair); None for a template without one), ``scale`` s (U's
    variance), ``hidden`` the hidden Gram group (``gram="finite"``; member k = ξ_k; None if the
    template has no ``mean(x_a * x_b)``), ``tokens`` T."""
    group: int | None
    scale: float
    hidden: int | None
    tokens: int


@dataclass
class KernelData:
    """The lowering state of a template's inputs (see the module doc): ``declarations``, the data
    declarations the template has (one, holding the pair, or two, one per input)."""
    inputs: KernelInputs
    declarations: int
    seen: int = 0
    rows: dict[int, int] = field(default_factory=dict)      # id(bound row) -> k
    by_k: dict[int, np.ndarray] = field(default_factory=dict)
    matrix: object = None                                     # the input layer's DataMat
    scale: float = 0.0
    hidden: list[int] = field(default_factory=list)           # the hidden group's members (vars)
    hidden_group: int | None = None

    def data(self, s: S.Data, count: int | None) -> tuple[list[np.ndarray], list[int]]:
        """The rows a data declaration binds (``count`` of them; None: one vector, no range) and
        their indices k among the pair's vectors; a located error if it does not fit the data."""
        inputs, name = self.inputs, s.decl.name
        self.seen += 1
        if self.declarations == 1:
            if inputs.sequences:
                raise located(TPValueError, s, f"the data are sequences of {inputs.tokens} vectors: a sequence "
                              "template declares its two inputs apart (vector x[1..T] : d = ...; "
                              "vector y[1..T] : d = ...)")
            if count != 2:
                raise located(TPValueError, s, f"a kernel template's one data declaration holds the pair of inputs, "
                              f"{name}[1..2] (got {'one vector' if count is None else f'{count} vectors'})")
            rows = [np.asarray(inputs.first, float), np.asarray(inputs.second, float)]
            return rows, [0, 1]
        if self.declarations != 2:
            raise located(TPValueError, s, "a kernel template declares its data inputs once (the pair: "
                          "vector x[1..2] : d = ...) or twice (one per input), "
                          f"not {self.declarations} times")
        if self.seen > 2:
            raise located(TPValueError, s, "a kernel template's data declarations run once each (not in a loop)")
        point = inputs.first if self.seen == 1 else inputs.second
        which = "first" if self.seen == 1 else "second"
        if inputs.sequences:
            if count is None or count != inputs.tokens:
                have = "one vector" if count is None else f"a sequence of {count} vectors"
                stop = s.decl.range.stop if s.decl.range is not None else None
                fix = (f"set -D {stop.name}={inputs.tokens}" if isinstance(stop, S.Name)
                       else f"declare {name}[1..{inputs.tokens}]")
                raise located(TPValueError, s, f"the {which} input '{name}' is {have}, but the data's points are "
                              f"sequences of {inputs.tokens} vectors ({fix})")
            rows = [np.asarray(r, float) for r in point]
        else:
            if count not in (None, 1):
                raise located(TPValueError, s, f"the {which} input '{name}' is a sequence of {count} vectors, but "
                              "the data's points are single vectors (an (N, d) array): give sequences as "
                              "an (N, T, d) array")
            rows = [np.asarray(point, float)]
        base = (self.seen - 1) * inputs.tokens
        return rows, [base + t for t in range(len(rows))]

    def register(self, row: np.ndarray, k: int) -> None:
        """Vector k of the pair is bound as ``row`` (recognised by identity in U @ x and mean)."""
        self.rows[id(row)] = k
        self.by_k[k] = row

    def index(self, node, row: np.ndarray, what: str) -> int:
        """k of a bound input vector, else a located error."""
        k = self.rows.get(id(row))
        if k is None:
            raise located(TPTypeError, node, f"in a kernel template, {what} takes the inputs' data vectors "
                          "as declared (x[1], y[t], ...), not other constants of their dimension")
        return k

    def check_matrix(self, node) -> None:
        """A data matrix declared now must be the template's one input layer, after the data."""
        if self.matrix is not None:
            raise located(TPValueError, node, "a kernel template has one input-layer matrix on the data "
                          f"(already '{self.matrix.name}')")
        if self.seen < min(self.declarations, 2) or not self.by_k:
            raise located(TPValueError, node, "in a kernel template, declare the data inputs before the "
                          "input-layer matrix")

    def pair_operands(self, arg: S.Node, ev) -> tuple[object, object] | None:
        """The operands of ``x_a * x_b`` or ``x_a ** 2`` (evaluated by ``ev``), else None."""
        if isinstance(arg, S.BinOp) and arg.op == "*":
            return ev(arg.lhs), ev(arg.rhs)
        if isinstance(arg, S.BinOp) and arg.op == "**" and isinstance(arg.rhs, S.Number) and arg.rhs.value == 2:
            x = ev(arg.lhs)
            return x, x
        return None


def data_declarations(statements) -> int:
    """How many data declarations (``vector x : d = ...``) a program has, loop bodies included."""
    count = 0
    for s in statements:
        if isinstance(s, S.Data):
            count += 1
        elif isinstance(s, S.For):
            count += data_declarations(s.body)
    return count
