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

The grid tape is not a tape form of its own: it is the one numeric tape of :mod:`.tape` (the
same operations, constants and sharing) after a pass over it, :func:`regroup`, that knows the
inputs' spaces; :func:`derived_spaces` gives each slot's space again from the operations (it is
never stored).  Cell operations write (numpy's ``out=``) into a few work arrays — registers,
allocated by liveness (:func:`.tape.last_uses`) like a compiler's, an operation reusing a dying
argument's where that is safe — kept in a :class:`Workspace` from call to call: a pass over a
block allocates nothing, and the arrays it touches stay in cache.  :meth:`GridTape.to_json` /
:meth:`GridTape.from_json` store it as the tape's data (:meth:`.tape.Tape.to_json`) and the
numbers of row, column and cell inputs.
"""
from __future__ import annotations

from functools import cached_property
from typing import Sequence

import numpy as np
import sympy as sp

from .mehler import PRICE_KINDS, RhoParts, SumCache
from .tape import (ASSOCIATIVE, CELL, COL, CONST, ROW, SERIES_ARITY, SERIES_FUNCTIONS, Emitter, HermiteArg, Op, Tape,
                   function, last_uses, parse_tape, tape_json)

__all__ = ["GridTape", "Workspace", "regroup", "derived_spaces", "allocate", "SERIES_FUNCTIONS", "SERIES_ARITY",
           "CONST", "ROW", "COL", "CELL"]


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
        #: the Price bounds' ρ slots: their clip(ρ) and |ρ|³ formed once per call (:class:`.mehler.RhoParts`)
        self.rho_of = {op.out: op.args[2] for op in self.cell_ops if op.kind in PRICE_KINDS}
        self.rho_done = {rho: out for out, rho in self.rho_of.items()}      # (ρ's last Price bound: parts dropped)

    @classmethod
    def compile(cls, exprs: Sequence[sp.Basic], rows: Sequence[sp.Symbol], cols: Sequence[sp.Symbol],
                cells: Sequence[sp.Symbol] = ()) -> "GridTape":
        """The tape of ``exprs`` in the row, column and cell symbols (module doc)."""
        tape = Tape.compile(exprs, (*rows, *cols, *cells))
        return cls.of(tape, (len(rows), len(cols), len(cells)))

    @classmethod
    def of(cls, tape: Tape, nsymbols: tuple[int, int, int]) -> "GridTape":
        """The grid form of ``tape``, whose inputs are ``nsymbols`` = (rows, columns, cells) in that
        order: its folds regrouped by space (:func:`regroup`)."""
        if sum(nsymbols) != tape.ninputs:
            raise ValueError(f"a tape of {tape.ninputs} inputs is not one of {nsymbols} row, column and cell inputs")
        return cls(*regroup(tape, nsymbols), nsymbols)

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
            parts: dict[int, RhoParts] = {}      # by ρ's slot: its value until its last reader (allocate)
            with np.errstate(all="ignore"):
                for op in self.cell_ops:
                    rho = self.rho_of.get(op.out)
                    if rho is None:
                        slots[op.out] = self.functions[op.out](*[slots[a] for a in op.args],
                                                               out=buffers[self.registers[op.out]])
                        continue
                    if rho not in parts:
                        parts[rho] = RhoParts(slots[rho])
                    slots[op.out] = self.functions[op.out](*[slots[a] for a in op.args],
                                                           out=buffers[self.registers[op.out]], parts=parts[rho])
                    if self.rho_done[rho] == op.out:
                        del parts[rho]
        return [np.broadcast_to(slots[o], shape).astype(float, copy=False) for o in self.outputs]

    def sides(self, rows: Sequence[np.ndarray], cols: Sequence[np.ndarray]) -> dict[int, object]:
        """The constants, the row and column inputs and every row and column operation's value:
        the work done once per input (a band's rows, and its columns, computed once for all its
        blocks)."""
        if (len(rows), len(cols)) != self.nsymbols[:2]:
            raise ValueError(f"expected {self.nsymbols} row, column and cell arrays")
        slots: dict[int, object] = {k: np.asarray(a, dtype=float) for k, a in enumerate([*rows, *cols])}
        slots.update({k: np.float64(v) for k, v in self.consts.items()})
        mirror = self.mirror
        with np.errstate(all="ignore"):
            for op in self.row_ops + (self.col_ops if mirror is None else ()):
                slots[op.out] = self.functions[op.out](*[slots[a] for a in op.args])
            if mirror is not None:
                self.mirrored(slots, mirror)
        return slots

    @cached_property
    def mirror(self) -> dict[int, int] | None:
        """{column operation: the row operation it mirrors} when every column operation is a row
        operation of the column symbols in place of the row ones (up to the order of a sum's or
        product's terms, and the step of a series' rule: each side's is chosen from its own
        variances, and either states its error): a kernel template's two inputs treated alike.
        The columns' values are then the row operations' on the column inputs (the same bits for an
        input in a row and in a column, and computed once when the rows are the columns); None
        otherwise."""
        rows, cols, _ = self.nsymbols
        if rows != cols or not self.col_ops:
            return None
        ids: dict[tuple, int] = {}
        key = {k: ids.setdefault(("in", k), len(ids)) for k in range(rows)}
        key.update({rows + k: key[k] for k in range(rows)})
        key.update({k: ids.setdefault(("const", v), len(ids)) for k, v in self.consts.items()})
        row_of: dict[int, int] = {}
        for op in self.row_ops + self.col_ops:
            args = tuple(key[a] for a in op.args)
            if op.kind in ASSOCIATIVE:                  # terms in any order, with their signs
                args, arg = tuple(sorted(zip(op.arg or (1,) * len(args), args))), None
            elif isinstance(op.arg, HermiteArg):          # h: the rule's step, each side's own
                arg = (op.arg.key, op.arg.K)
            else:
                arg = None if isinstance(op.arg, SumCache) else op.arg
            key[op.out] = ids.setdefault((op.kind, arg, args), len(ids))
            if self.spaces[op.out] == ROW:
                row_of.setdefault(key[op.out], op.out)
        found = {op.out: row_of.get(key[op.out]) for op in self.col_ops}
        return None if None in found.values() else found

    def mirrored(self, slots: dict[int, object], mirror: dict[int, int]) -> None:
        """The column operations' values by their :attr:`mirror` row operations, in place: the
        rows' own values where the column inputs are the row inputs, else the row operations
        evaluated again on the column inputs."""
        rows = self.nsymbols[0]
        r_in, c_in = slots[0], slots[rows]
        if all(np.array_equal(np.ravel(slots[k]), np.ravel(slots[rows + k])) for k in range(rows)):
            def as_column(x):
                if np.ndim(x) < np.ndim(r_in) or np.shape(x)[:np.ndim(r_in)] != np.shape(r_in):
                    return x
                return np.reshape(x, np.shape(c_in) + np.shape(x)[np.ndim(r_in):])
            for c, r in mirror.items():
                slots[c] = as_column(slots[r])
            return
        other = {k: v for k, v in slots.items() if k >= 2 * rows and self.spaces.get(k, CONST) == CONST}
        other.update({k: slots[rows + k] for k in range(rows)})
        for op in self.row_ops:
            other[op.out] = self.functions[op.out](*[other[a] for a in op.args])
        for c, r in mirror.items():
            slots[c] = other[r]

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
        """The tape as JSON data (:meth:`.Tape.to_json`, with the numbers of row, column and cell inputs)."""
        return {"nsymbols": list(self.nsymbols), **tape_json(self.nslots, self.consts, self.ops, self.outputs)}

    @classmethod
    def from_json(cls, data: dict) -> "GridTape":
        """The tape :meth:`to_json` stored (a ValueError if it is not one)."""
        try:
            nsymbols = tuple(int(n) for n in data["nsymbols"])
            if len(nsymbols) != 3:
                raise ValueError(f"expected 3 numbers of inputs, got {nsymbols}")
            return cls(*parse_tape(data, sum(nsymbols)), nsymbols)
        except (KeyError, TypeError, IndexError, ZeroDivisionError) as err:
            raise ValueError(f"not a stored grid tape: {err}") from None


def regroup(tape: Tape, nsymbols: tuple[int, int, int]) -> tuple[int, dict[int, float], list[Op], list[int]]:
    """The space pass: (nslots, consts, ops, outputs) of ``tape`` with its inputs sorted into row,
    column and cell spaces (``nsymbols`` of each, in that order) and every fold regrouped by
    space (:meth:`.tape.Emitter.nary`: the row terms combined by a row operation, the column terms
    by a column operation, then one cell operation); other operations are copied over, equal
    ones shared.  With every input in one space it changes nothing but slot numbers."""
    rows, cols, cells = nsymbols
    emitter = Emitter([ROW] * rows + [COL] * cols + [CELL] * cells)
    slot = {k: k for k in range(tape.ninputs)}
    slot.update({k: emitter.constant(v) for k, v in tape.consts.items()})
    for op in tape.ops:
        args = tuple(slot[a] for a in op.args)
        if op.kind in ASSOCIATIVE and not uniform(emitter, args):
            signs = op.arg or (1,) * len(args)
            terms = [emitter.signed(a) if op.kind == "add" else (a, 1) for a in args]
            slot[op.out] = emitter.nary(op.kind, [(a, s * sign) for (a, s), sign in zip(terms, signs)])
        else:
            slot[op.out] = emitter.emit(op.kind, op.arg, args)
    return emitter.tape([slot[o] for o in tape.outputs])


def uniform(emitter: Emitter, args: tuple[int, ...]) -> bool:
    """Whether a fold of the tape is already in grid form: its terms all in one space, none a
    constant or a negation (regrouping would give the same operation back)."""
    spaces = emitter.spaces
    space = spaces[args[0]]
    return space != CONST and all(spaces[a] == space and a not in emitter.negations for a in args)


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
    last = last_uses(cell_ops)
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


