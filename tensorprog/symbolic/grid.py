"""Expressions of row, column and cell symbols, evaluated on a grid with the per-row work done once.

A dataset kernel's entry (i, j) is an expression F(a_i, b_j, c_ij) of a few numbers of input i
alone (its variance a_i), of input j alone (b_j) and of the pair (c_ij).  Evaluated entry by
entry, every subexpression of a_i alone — the variance chain of one input through the layers,
and most of the error bound — is recomputed N times per input.  A :class:`GridTape` sorts each
operation of the expressions into a *space*: constant, row (only row symbols), column (only
column symbols) or cell (both, or a cell symbol), the join of its arguments' spaces (row ⊔
column = cell).  Row operations run on the row arrays (shape (R, 1) on a grid, or (P,) for a
list of pairs), column operations on the column arrays, and only cell operations on the cells:

    F = Σ_k t_k  with t_k constant, row, column or cell  →  (Σ_row t_k) + (Σ_col t_k) + Σ_cell t_k

Sums and products are regrouped that way (their constants folded into one, the row terms
combined in row space, the column terms in column space), so a sum of many per-input terms
costs one cell operation.  The regrouping reorders floating-point sums and products: values
change in the last bits against an entry-by-entry evaluation (relative to the largest term
of a sum, as with any other order of summation).

Cell operations write (numpy's ``out=``) into a few work arrays — registers, allocated by
liveness like a compiler's, an operation reusing a dying argument's where that is safe — kept in
a :class:`Workspace` from call to call: a pass over a block allocates nothing, and the arrays it
touches stay in cache.  Nothing is evaluated as text: the tape is built from the
expression trees, and :meth:`GridTape.to_json` / :meth:`GridTape.from_json` store it as data
(operation kinds, head names resolved through :data:`.evaluate.HEADS_BY_NAME`, numbers).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import sympy as sp

from .evaluate import HEADS_BY_NAME, as_expr, constant_value, head_function
from .heads import Delta
from .mehler import (HEAD_KINDS, HermiteRow, T, diagonal_slope, mean_curve, mean_error, mean_value, mehler_curve,
                     mehler_error, mehler_slope, mehler_value, pack)

CONST, ROW, COL, CELL = 0, 1, 2, 3          # bit flags: ROW | COL = CELL
#: the operations regrouped by space (associative and commutative), and their neutral elements
ASSOCIATIVE: dict[str, np.ufunc] = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
NEUTRAL = {"add": 0.0, "mul": 1.0}


#: the Mehler series' operations (:mod:`.mehler`): a "hermite" row op packs one function's
#: coefficients per variance (never folded into a constant: its value is an array); the others
#: read packed rows and columns
SERIES_FUNCTIONS: dict[str, Callable] = {"mehler": mehler_value, "mehler_err": mehler_error,
                                         "mean": mean_value, "mean_err": mean_error,
                                         "mehler_slope": mehler_slope, "mehler_curve": mehler_curve,
                                         "mean_curve": mean_curve, "diagonal_slope": diagonal_slope}
SERIES_ARITY = {"hermite": 1, "mehler": 4, "mehler_err": 4, "mean": 1, "mean_err": 1,
                "mehler_slope": 3, "mehler_curve": 3, "mean_curve": 1, "diagonal_slope": 1}


@dataclass(frozen=True, eq=False)
class HermiteArg:
    """The argument of a "hermite" operation: φ as a one-row-symbol tape, the order K and the
    trapezoidal step h (:func:`.mehler.pack`)."""
    tape: "GridTape"
    K: int
    h: float
    #: the last few results by their variances' bytes: a band's rows and columns are mostly the
    #: same inputs, and a tape meets the same function's row and column operation
    recent: OrderedDict = field(default_factory=OrderedDict, compare=False, repr=False)

    def __call__(self, a: np.ndarray, out=None) -> np.ndarray:
        a = np.asarray(a, dtype=float)
        ua, inv = np.unique(a.ravel(), return_inverse=True)
        key = ua.tobytes()
        if key not in self.recent:
            self.recent[key] = pack(lambda t: self.tape([t], [])[0], self.K, self.h, ua)
            while len(self.recent) > 4:
                self.recent.popitem(last=False)
        packed = self.recent[key]
        return packed[inv].reshape(a.shape + packed.shape[-1:])

    def to_json(self) -> list:
        return [self.tape.to_json(), self.K, self.h]


@dataclass(frozen=True)
class Op:
    """One operation: ``out = kind(args)``; ``arg`` is the exponent of "pow" (a Fraction or
    float) or the head name of "fn"."""
    kind: str                   # "add", "mul", "max", "min", "pow", "fn"
    arg: object                 # "add": None, or the signs (+1/−1) of its arguments
    args: tuple[int, ...]
    out: int


class GridTape:
    """A flat program of several expressions in row, column and cell symbols (module doc)."""

    def __init__(self, nslots: int, consts: dict[int, float], ops: Sequence[Op], outputs: Sequence[int],
                 nsymbols: tuple[int, int, int]) -> None:
        self.nslots, self.consts = nslots, dict(consts)
        self.spaces = derived_spaces(ops, consts, nsymbols)
        self.ops, self.outputs, self.nsymbols = tuple(ops), tuple(outputs), nsymbols
        self.row_ops = tuple(op for op in self.ops if self.spaces[op.out] == ROW)
        self.col_ops = tuple(op for op in self.ops if self.spaces[op.out] == COL)
        self.cell_ops = tuple(op for op in self.ops if self.spaces[op.out] == CELL)
        self.functions = {op.out: function(op) for op in self.ops}
        self.registers, self.nregisters = allocate(self.cell_ops, self.outputs)

    @classmethod
    def compile(cls, exprs: Sequence[sp.Basic], rows: Sequence[sp.Symbol], cols: Sequence[sp.Symbol],
                cells: Sequence[sp.Symbol] = ()) -> "GridTape":
        """The tape of ``exprs`` in the row, column and cell symbols (module doc)."""
        return Builder(rows, cols, cells).build(exprs)

    @property
    def counts(self) -> dict[str, int]:
        """Operations per space."""
        return {"row": len(self.row_ops), "col": len(self.col_ops), "cell": len(self.cell_ops)}

    def __call__(self, rows: Sequence[np.ndarray], cols: Sequence[np.ndarray],
                 cells: Sequence[np.ndarray] = (), work: "Workspace | None" = None,
                 sides: dict[int, object] | None = None) -> list[np.ndarray]:
        """The expressions' values: row arrays and column arrays broadcast against each other
        (shapes (R, 1) and (1, C) for a grid, (P,) for a list of pairs) and the cell arrays.
        ``sides``: the row and column values already computed (:meth:`sides`, cut to these rows
        and columns by :meth:`cut`; ``rows`` and ``cols`` are then not read).  Cell operations
        write into :attr:`nregisters` work arrays (``work``'s, reused from call to call, or new
        ones); the values returned may be views of them, valid until ``work``'s next use."""
        if len(cells) != self.nsymbols[2]:
            raise ValueError(f"expected {self.nsymbols} row, column and cell arrays")
        slots = dict(sides) if sides is not None else self.sides(rows, cols)
        first = sum(self.nsymbols[:2])
        slots.update({first + k: np.asarray(c, dtype=float) for k, c in enumerate(cells)})
        shape = np.broadcast_shapes(*(np.shape(slots[k]) for k in range(sum(self.nsymbols))))
        if self.cell_ops:
            buffers = (work or Workspace()).arrays(shape, self.nregisters)
            with np.errstate(all="ignore"):
                for op in self.cell_ops:
                    slots[op.out] = self.functions[op.out](*[slots[a] for a in op.args],
                                                           out=buffers[self.registers[op.out]])
        return [np.broadcast_to(slots[o], shape).astype(float, copy=False) for o in self.outputs]

    def sides(self, rows: Sequence[np.ndarray], cols: Sequence[np.ndarray]) -> dict[int, object]:
        """The constants, the row and column inputs and every row and column operation's value:
        the work done once per input (a band's rows, and its columns, computed once for all its
        blocks)."""
        if (len(rows), len(cols)) != self.nsymbols[:2]:
            raise ValueError(f"expected {self.nsymbols} row, column and cell arrays")
        slots: dict[int, object] = {k: np.asarray(a, dtype=float) for k, a in enumerate([*rows, *cols])}
        slots.update({k: np.float64(v) for k, v in self.consts.items()})
        with np.errstate(all="ignore"):
            for op in self.row_ops + self.col_ops:
                slots[op.out] = self.functions[op.out](*[slots[a] for a in op.args])
        return slots

    def cut(self, sides: dict[int, object], rows: slice, cols: slice) -> dict[int, object]:
        """``sides`` of a grid (rows (R, 1), columns (1, C)) cut to a block of rows and columns."""
        if any(np.ndim(v) == 1 for v in sides.values()):
            raise ValueError("cut: the sides of a list of pairs (1-D arrays) are not a grid")
        out = {}
        for k, v in sides.items():
            space = self.spaces.get(k, CONST)
            out[k] = v[rows] if space == ROW and np.ndim(v) else v[:, cols] if space == COL and np.ndim(v) else v
        return out

    def to_json(self) -> dict:
        """The tape as JSON data (numbers, kinds and head names; exponents as [p, q] or a float)."""
        def arg(op: Op) -> object:
            if isinstance(op.arg, HermiteArg):
                return op.arg.to_json()
            if isinstance(op.arg, Fraction):
                return [op.arg.numerator, op.arg.denominator]
            return list(op.arg) if isinstance(op.arg, tuple) else op.arg
        return {"nslots": self.nslots, "nsymbols": list(self.nsymbols),
                "consts": [[k, v] for k, v in self.consts.items()],
                "ops": [[op.kind, arg(op), list(op.args), op.out] for op in self.ops],
                "outputs": list(self.outputs)}

    @classmethod
    def from_json(cls, data: dict) -> "GridTape":
        """The tape :meth:`to_json` stored (a ValueError if it is not one)."""
        try:
            ops = []
            for kind, arg, args, out in data["ops"]:
                if kind == "pow":
                    arg = Fraction(int(arg[0]), int(arg[1])) if isinstance(arg, list) else float(arg)
                elif kind == "add":
                    arg = None if arg is None else tuple(1 if int(a) > 0 else -1 for a in arg)
                elif kind == "hermite":
                    arg = HermiteArg(GridTape.from_json(arg[0]), int(arg[1]), float(arg[2]))
                elif kind in SERIES_FUNCTIONS:
                    arg = None
                elif kind == "fn" and arg not in HEADS_BY_NAME and arg != "Pow":
                    raise ValueError(f"unknown head {arg!r}")
                elif kind not in ASSOCIATIVE and kind != "fn" and kind not in SERIES_ARITY:
                    raise ValueError(f"unknown operation {kind!r}")
                ops.append(Op(kind, arg, tuple(int(a) for a in args), int(out)))
            consts = {int(k): float(v) for k, v in data["consts"]}
            nsymbols = tuple(int(n) for n in data["nsymbols"])
            outputs = [int(o) for o in data["outputs"]]
            check_slots(ops, consts, sum(nsymbols), outputs)
            for op in ops:
                check_arity(op)
            return cls(int(data["nslots"]), consts, ops, outputs, nsymbols)
        except (KeyError, TypeError, IndexError, ZeroDivisionError) as err:
            raise ValueError(f"not a stored grid tape: {err}") from None


def check_slots(ops: Sequence[Op], consts: dict[int, float], ninputs: int, outputs: Sequence[int]) -> None:
    """A ValueError unless every operation reads slots written before it (inputs, constants,
    earlier operations) and writes a new one, and every output is written."""
    written = set(range(ninputs)) | set(consts)
    for op in ops:
        if not written.issuperset(op.args) or op.out in written:
            raise ValueError(f"operation {op} reads an unwritten slot or overwrites one")
        written.add(op.out)
    if not written.issuperset(outputs):
        raise ValueError("an output is never written")


def check_arity(op: Op) -> None:
    """A ValueError unless the operation has as many arguments as its kind takes."""
    n = len(op.args)
    if op.kind in SERIES_ARITY:
        ok = n == SERIES_ARITY[op.kind]
    elif op.kind == "pow":
        ok = n == 1
    elif op.kind in ASSOCIATIVE:
        ok = n >= 2 and (op.arg is None or len(op.arg) == n)
    elif op.arg == "Pow":
        ok = n == 2
    else:
        fn = head_function(HEADS_BY_NAME[op.arg], n)
        ok = fn is not None and (not isinstance(fn, np.ufunc) or fn.nin == n)
    if not ok:
        raise ValueError(f"operation {op} has the wrong number of arguments")


def derived_spaces(ops: Sequence[Op], consts: dict[int, float], nsymbols: tuple[int, int, int]) -> dict[int, int]:
    """Each slot's space, from the symbols' and its arguments' (never stored: derived again)."""
    rows, cols, cells = nsymbols
    spaces = {k: ROW if k < rows else COL if k < rows + cols else CELL for k in range(rows + cols + cells)}
    spaces.update({k: CONST for k in consts})
    for op in ops:
        space = CONST
        for a in op.args:
            space |= spaces[a]
        spaces[op.out] = ROW if op.kind == "hermite" and space == CONST else space
    return spaces


def allocate(cell_ops: Sequence[Op], outputs: Sequence[int]) -> tuple[dict[int, int], int]:
    """Work arrays for the cell operations: {slot: register}, and how many registers.  A slot's
    register is free again after its last use (outputs are kept); an operation writes into a
    dying argument's register where that is safe (:func:`donor`), else into the register freed
    last (it is the likeliest in cache)."""
    last = {a: k for k, op in enumerate(cell_ops) for a in op.args}
    kept = set(outputs)
    register: dict[int, int] = {}
    free: list[int] = []
    count = 0
    for k, op in enumerate(cell_ops):
        dying = tuple(a for a in dict.fromkeys(op.args) if last[a] == k and a in register and a not in kept)
        given = donor(op, dying)
        if given is not None:
            register[op.out] = register[given]
        elif free:
            register[op.out] = free.pop()
        else:
            register[op.out], count = count, count + 1
        free += [register[a] for a in dying if a != given]
    return register, count


def donor(op: Op, dying: tuple[int, ...]) -> int | None:
    """A dying argument whose buffer the operation may write its result into: for a fold (sum,
    product, max, min) one of the first two that is not also a later one (a fold writes the
    result before it reads the third), else any."""
    if op.kind in ASSOCIATIVE:
        usable = [a for a in dying if a in op.args[:2] and a not in op.args[2:]]
    else:
        usable = list(dying)
    return usable[0] if usable else None


class Workspace:
    """Work arrays of a :class:`GridTape`, kept between calls (one per thread): flat buffers of
    the largest size asked for, handed out as contiguous arrays of the shape asked for."""

    def __init__(self) -> None:
        self.flat: list[np.ndarray] = []
        self.views: dict[tuple, list[np.ndarray]] = {}

    def arrays(self, shape: tuple[int, ...], count: int) -> list[np.ndarray]:
        size = int(np.prod(shape))
        if len(self.flat) < count or (self.flat and self.flat[0].size < size):
            self.flat = [np.empty(max(size, self.flat[0].size if self.flat else 0)) for _ in range(count)]
            self.views = {}
        key = (shape, count)
        if key not in self.views:
            self.views[key] = [b[:size].reshape(shape) for b in self.flat[:count]]
        return self.views[key]


def function(op: Op) -> Callable:
    """The numpy computation of an operation, taking ``out=`` (an array of the result's shape to
    write it into, not among a fold's third and later arguments; or None)."""
    if op.kind == "hermite":
        return op.arg
    if op.kind in SERIES_FUNCTIONS:
        return SERIES_FUNCTIONS[op.kind]
    if op.kind == "add" and op.arg is not None:
        return fold_signed(op.arg)
    if op.kind in ASSOCIATIVE:
        return fold(ASSOCIATIVE[op.kind])
    if op.kind == "pow":
        return exponent_function(op.arg)
    if op.arg == "Pow":
        return np.power
    fn = head_function(HEADS_BY_NAME[op.arg], len(op.args))
    if isinstance(fn, np.ufunc) and fn.nin == len(op.args) and fn.nout == 1:
        return fn

    def into(*xs, out=None):
        got = fn(*xs)
        if out is None:
            return got
        np.copyto(out, got)
        return out
    return into


def fold(ufunc: np.ufunc) -> Callable:
    """x₁ ∘ x₂ ∘ … left to right, into ``out`` when given (an array of the result's shape that is
    not among x₃, x₄, …: it is written before they are read)."""
    def call(*xs, out=None):
        acc = ufunc(xs[0], xs[1], out=out)
        for x in xs[2:]:
            ufunc(acc, x, out=acc)
        return acc
    return call


def fold_signed(signs: tuple[int, ...]) -> Callable:
    """x₁ ± x₂ ± … (``signs``, the first +1) left to right, into ``out`` as :func:`fold`."""
    steps = [np.add if sign > 0 else np.subtract for sign in signs[1:]]

    def call(*xs, out=None):
        acc = steps[0](xs[0], xs[1], out=out)
        for step, x in zip(steps[1:], xs[2:]):
            step(acc, x, out=acc)
        return acc
    return call


def exponent_function(e: object) -> Callable:
    """x**e with the common exponents done exactly (x², 1/x, √x, 1/√x), into ``out`` when given."""
    if e == 2:
        return lambda x, out=None: np.multiply(x, x, out=out)
    if e == -1:
        return lambda x, out=None: np.divide(1.0, x, out=out)
    if e == Fraction(1, 2):
        return np.sqrt
    if e == Fraction(-1, 2):
        def inv_sqrt(x, out=None):
            root = np.sqrt(x, out=out)
            return np.divide(1.0, root, out=root if out is not None else None)
        return inv_sqrt
    if isinstance(e, Fraction) and e.denominator == 1:
        k = int(e)
        if k > 0:
            return lambda x, out=None: np.power(x, float(k), out=out)
        return lambda x, out=None: np.divide(1.0, np.power(x, float(-k), out=out), out=out)
    value = float(e)
    return lambda x, out=None: np.power(x, value, out=out)


class Builder:
    """Walks expression DAGs into a :class:`GridTape`: one slot per distinct subexpression,
    constants folded, sums and products regrouped by space (module doc)."""

    def __init__(self, rows: Sequence[sp.Symbol], cols: Sequence[sp.Symbol], cells: Sequence[sp.Symbol]) -> None:
        symbols = (*rows, *cols, *cells)
        if len(set(symbols)) != len(symbols):
            raise ValueError("a symbol is given twice")
        self.nsymbols = (len(rows), len(cols), len(cells))
        self.slot: dict[sp.Basic, int] = {s: k for k, s in enumerate(symbols)}
        self.by_id: dict[int, tuple[sp.Basic, int]] = {}
        self.spaces: dict[int, int] = {k: ROW if k < len(rows) else COL if k < len(rows) + len(cols) else CELL
                                       for k in range(len(symbols))}
        self.consts: dict[int, float] = {}
        self.ops: list[Op] = []
        self.seen: dict[tuple, int] = {}               # (kind, arg, args) -> slot (shared operations)
        self.negations: dict[int, int] = {}            # slot of −1·y -> slot of y
        self.hermite: dict[tuple, HermiteArg] = {}     # HermiteRow spec -> its operation's argument
        self.nslots = len(symbols)

    def build(self, exprs: Sequence[sp.Basic]) -> GridTape:
        outputs = [self.visit(as_expr(e)) for e in exprs]
        live = set(outputs)
        for op in reversed(self.ops):                 # operations no output needs are dropped
            if op.out in live:
                live.update(op.args)
        ops = [op for op in self.ops if op.out in live]
        return GridTape(self.nslots, self.consts, ops, outputs, self.nsymbols)

    def constant(self, value: float) -> int:
        key = ("const", value, ())
        if key not in self.seen:
            self.seen[key] = k = self.new(CONST)
            self.consts[k] = value
        return self.seen[key]

    def new(self, space: int) -> int:
        self.spaces[self.nslots] = space
        self.nslots += 1
        return self.nslots - 1

    def visit(self, root: sp.Basic) -> int:
        """The slot of ``root`` (children first, without recursion: DAGs can be deep).  Nodes are
        remembered by identity — comparing deep expressions for equality costs as much as walking
        them as trees — and equal subexpressions meet again as the same operation of the same
        slots (:meth:`emit`)."""
        stack: list[tuple[sp.Basic, bool]] = [(root, False)]
        while stack:
            e, done = stack.pop()
            if self.known(e):
                continue
            if e.is_Symbol:
                raise ValueError(f"unknown symbol {e}")
            if not e.args or e.is_Number or e.is_NumberSymbol:
                self.remember(e, self.constant(constant_value(e)))
                continue
            if not done:
                stack.append((e, True))
                stack.extend((a, False) for a in e.args if not self.known(a))
                continue
            self.remember(e, self.operation(e))
        return self.slot_of(root)

    def known(self, e: sp.Basic) -> bool:
        return id(e) in self.by_id or (e.is_Symbol and e in self.slot)

    def remember(self, e: sp.Basic, slot: int) -> None:
        self.by_id[id(e)] = (e, slot)            # the node is kept alive: its id stays its own

    def slot_of(self, e: sp.Basic) -> int:
        got = self.by_id.get(id(e))
        return got[1] if got is not None else self.slot[e]

    def operation(self, e: sp.Basic) -> int:
        args = [self.slot_of(a) for a in e.args]
        if e.is_Add:
            return self.nary("add", [self.signed(a) for a in args])
        if e.is_Mul:
            return self.nary("mul", [(a, 1) for a in args])
        if isinstance(e, (sp.Max, sp.Min)):
            return self.nary("max" if isinstance(e, sp.Max) else "min", [(a, 1) for a in args])
        if e.is_Pow and e.exp.is_Number:
            exp = e.exp
            arg = Fraction(int(exp.p), int(exp.q)) if exp.is_Rational else float(exp)
            return self.emit("pow", arg, (args[0],))
        if e.is_Pow:
            return self.emit("fn", "Pow", tuple(args))
        if isinstance(e, HermiteRow):
            if e.spec not in self.hermite:
                phi, K, h = e.spec
                self.hermite[e.spec] = HermiteArg(Builder([T], [], []).build([phi]), K, h)
            return self.emit("hermite", self.hermite[e.spec], tuple(args))
        if e.func in HEAD_KINDS:
            return self.emit(HEAD_KINDS[e.func], None, tuple(args))
        if isinstance(e, sp.Function):
            if e.func is Delta:
                raise ValueError(f"the Dirac mass in {e} cannot be evaluated pointwise")
            name = e.func.__name__
            if HEADS_BY_NAME.get(name) is not e.func or head_function(e.func, len(args)) is None:
                raise ValueError(f"no numeric rule for the function {e.func} in {e}")
            return self.emit("fn", name, tuple(args))
        raise ValueError(f"cannot evaluate {e!r} numerically")

    def signed(self, slot: int) -> tuple[int, int]:
        """(slot, +1), or (y, −1) for a slot that is the product −1·y (a sum subtracts y)."""
        return (self.negations[slot], -1) if slot in self.negations else (slot, 1)

    def nary(self, kind: str, terms: list[tuple[int, int]]) -> int:
        """A sum (terms with signs), product, max or min: constants folded into one, the row terms
        combined in row space and the column terms in column space (the constant joining one of
        them), then one cell operation over what is left."""
        ufunc = ASSOCIATIVE[kind]
        consts = [self.consts[a] * sign for a, sign in terms if self.spaces[a] == CONST]
        terms = [(a, sign) for a, sign in terms if self.spaces[a] != CONST]
        constant = None
        if consts:
            with np.errstate(all="ignore"):
                value = np.float64(consts[0])
                for c in consts[1:]:
                    value = ufunc(value, np.float64(c))
            if value != NEUTRAL.get(kind) or not terms:
                constant = (self.constant(float(value)), 1)
        if kind == "mul" and constant is not None and self.consts[constant[0]] == -1.0 and terms:
            positive = self.nary("mul", terms)
            slot = self.emit("mul", None, (positive, constant[0]))
            self.negations[slot] = positive
            return slot
        parts = [t for t in terms if self.spaces[t[0]] == CELL]
        for space in (ROW, COL):
            group = [t for t in terms if self.spaces[t[0]] == space]
            if constant is not None and group:
                group, constant = group + [constant], None
            parts += [self.combine(kind, group)] if len(group) > 1 else group
        if constant is not None:
            parts.append(constant)
        slot, sign = parts[0] if len(parts) == 1 else self.combine(kind, parts)
        return slot if sign > 0 else self.negate(slot)

    def negate(self, slot: int) -> int:
        """The slot of −1·y (y = ``slot``), known as a negation (a sum around it subtracts y)."""
        negative = self.emit("mul", None, (slot, self.constant(-1.0)))
        self.negations[negative] = slot
        return negative

    def combine(self, kind: str, terms: list[tuple[int, int]]) -> tuple[int, int]:
        """One operation over ``terms`` (a positive term first), as a term: (slot, +1), or
        (slot, −1) for a sum of negated terms only (computed as the sum of their negations' ys)."""
        if kind == "add" and all(sign < 0 for _, sign in terms):
            return self.combine(kind, [(a, 1) for a, _ in terms])[0], -1
        terms = sorted(terms, key=lambda t: t[1] < 0)          # stable: a positive term first
        signs = tuple(sign for _, sign in terms)
        arg = signs if kind == "add" and -1 in signs else None
        if len(terms) == 1:
            return terms[0]
        return self.emit(kind, arg, tuple(a for a, _ in terms)), 1

    def emit(self, kind: str, arg: object, args: tuple[int, ...]) -> int:
        """The slot of ``kind(args)`` (an existing one if the same operation was made before); an
        operation of constants only is folded into a constant."""
        key = (kind, arg, args)
        if key in self.seen:
            return self.seen[key]
        space = 0
        for a in args:
            space |= self.spaces[a]
        fn = function(Op(kind, arg, args, -1))
        if kind == "hermite" and space == CELL:
            raise ValueError("a variance of the series depends on the pair: not a row or column operation")
        if kind == "hermite" and space == CONST:
            space = ROW                                # an array per variance: never a constant
        if space == CONST:
            with np.errstate(all="ignore"):
                value = float(fn(*[np.float64(self.consts[a]) for a in args]))
            slot = self.constant(value)
        else:
            slot = self.new(space)
            self.ops.append(Op(kind, arg, args, slot))
        self.seen[key] = slot
        return slot
