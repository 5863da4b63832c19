"""A batch compile replayed as one numpy tape: dataset kernels at the cost of their arithmetic.

A batch compile (:mod:`.batch`) of a kernel template on a few pairs records how each number of
the recurrence was made: an initial covariance entry, or an expectation E f(ℓ) in closed form
F(C) over the covariance C of its linear forms (or by the Mehler series: F then holds its
row operations — the coefficients of one input's variance — and its cell operations, with its
stated error as a formula beside it, :mod:`..symbolic.mehler`), each Cᵢⱼ = Σ_g Σ_h a_ig a_jh Σ_gh a polynomial
in earlier numbers.  Chained, the outputs are one numeric tape (:mod:`..symbolic.tape`) of the
initial covariance entries of a pair — a = Σ₀₀ (its first input's variance), b = Σ₁₁ (the
second's), c = Σ₀₁ — each closed form walked onto it with its symbols bound to the slots of the
numbers they stand for (:class:`Builder`); :class:`Replay` holds it (and the errors: float
rounding ROUNDING·(|E| + max_i Cᵢᵢ) per expectation, summed over what each output rests on, plus
VALUE_ROUNDING·|value|, as in the compile) as one :class:`..symbolic.grid.GridTape`, where
everything that depends on a alone (or b alone) —
an input's variance chain through the layers, most of the error charges — is computed once per
input and only the rest once per pair.

The record is valid for other covariances when the compile would have made the same decisions:
the batch agreed on the numbers it took as constants, the covariance entries it tied (x ≡ y:
Cov = Var) are still equal, and every value is finite.  The tape computes those quantities
too and :meth:`Replay.__call__` checks them entry by entry (the caller compiles the entries
where one fails).
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass
from typing import Container, Iterator, Mapping, Sequence

import numpy as np
import sympy as sp

from ..symbolic.grid import GridTape, Workspace
from ..symbolic.mehler import Mean, MehlerValue
from ..symbolic.tape import Builder as TapeBuilder
from .accuracy import VALUE_ROUNDING
from .ledger import ROUNDING


@dataclass(frozen=True)
class Replay:
    """The outputs' values and errors as one :class:`..symbolic.grid.GridTape` of a pair's initial
    covariance entries — a = Σ₀₀ (a row: one number per first input), b = Σ₁₁ (a column: per
    second input), c = Σ₀₁ (a cell: per pair) — with the checks that keep the record valid
    (module doc): tape outputs are the values, the errors, then the checks."""
    tape: GridTape
    names: tuple[str, ...]
    constants: tuple[float, ...]            # check k < len(constants) must equal constants[k]
    ties: tuple[int, ...]                   # then (a, b, sign) triples: a = sign·b to 1e-12 (relative)
    method: str = "exact"                   # "series" when some expectation is the Mehler series
    #: every expectation is the series or a polynomial in its covariance: the values hold to their
    #: stated errors at singular covariances too (x ≡ y: a kernel's diagonal, :func:`smooth_form`)
    smooth: bool = False

    def __call__(self, a: np.ndarray | None, b: np.ndarray | None, c: np.ndarray,
                 work: Workspace | None = None, sides: dict | None = None) -> tuple[list, list, np.ndarray]:
        """(values, errors, valid): one array per name at rows ``a``, columns ``b`` and cells
        ``c`` (a grid: shapes (R, 1), (1, C), (R, C); or P pairs: (P,) each), and where the record
        holds, entry by entry (:meth:`valid`).  With ``work``, the arrays are views of its work
        arrays (copy them out before its next use).  ``sides``: a and b's part of the tape already
        evaluated (:meth:`.GridTape.sides`, cut to this block); a and b are then not read."""
        got = self.tape([a], [b], [c], work, sides)
        k = len(self.names)
        return got[:k], got[k:2 * k], self.valid(got[:2 * k], got[2 * k:])

    def valid(self, results: Sequence[np.ndarray], checks: Sequence[np.ndarray]) -> np.ndarray:
        """Entry by entry: every value and error finite, every constant the same, every tie
        still equal (to 1e-12, relative)."""
        ok = np.ones(np.broadcast_shapes(*(np.shape(r) for r in (*results, *checks))), dtype=bool)
        for r in results:
            ok &= np.isfinite(r)
        for c, v in zip(checks, self.constants):
            ok &= c == v
        rest = checks[len(self.constants):]
        for t in range(0, len(self.ties), 3):
            x, y, sign = rest[self.ties[t]], rest[self.ties[t + 1]], self.ties[t + 2]
            ok &= np.abs(x - sign * y) <= 1e-12 * np.abs(sign * y)
        return ok

    def to_json(self) -> dict:
        """The replay as JSON data (see :meth:`.GridTape.to_json`)."""
        return {"tape": self.tape.to_json(), "names": list(self.names), "constants": list(self.constants),
                "ties": list(self.ties), "method": self.method, "smooth": self.smooth}

    @classmethod
    def from_json(cls, data: dict) -> "Replay":
        """The replay :meth:`to_json` stored (a ValueError if it is not one)."""
        try:
            return cls(GridTape.from_json(data["tape"]), tuple(str(n) for n in data["names"]),
                       tuple(float(v) for v in data["constants"]), tuple(int(t) for t in data["ties"]),
                       "series" if data.get("method") == "series" else "exact", data.get("smooth") is True)
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a stored replay: {err}") from None


def record(compiled, names: Sequence[str]) -> Replay | None:
    """The :class:`Replay` of a batch compile (a ``Compiled`` with a ``batch``), or None if its
    ``batch_record`` (:class:`.BatchRecord`) states why it cannot be replayed (a number made
    unrecorded, an estimate without a closed form over its linear forms), or the DAG meets one."""
    batch, made = compiled.batch, compiled.batch_record
    if batch is None or made is None or made.unreplayable is not None or len(batch.covs) != 1:
        return None
    builder = Builder(compiled)
    try:
        return builder.replay(names)
    except Unreplayable:
        return None
    except ValueError:          # a series whose variance depends on the pair (not a row operation)
        return None


class Unreplayable(Exception):
    """A number of the compile that the record does not describe."""


class Scope(Mapping):
    """The slots of symbols: ``slots``'s; a batch symbol among ``values`` without one is
    :class:`Unreplayable` (a number the record does not say how it was made)."""

    def __init__(self, slots: Mapping[sp.Symbol, int], values: Container) -> None:
        self.slots, self.values = slots, values

    def __getitem__(self, symbol: sp.Symbol) -> int:
        if symbol in self.slots:
            return self.slots[symbol]
        if symbol in self.values:
            raise Unreplayable(f"symbol {symbol}")
        raise KeyError(symbol)

    def __iter__(self) -> Iterator[sp.Symbol]:
        return iter(self.slots)

    def __len__(self) -> int:
        return len(self.slots)


class Builder:
    """The tape of a recorded batch compile (see :func:`record`): its closed forms walked onto one
    :class:`..symbolic.tape.Tape` of the pair's initial covariance entries, a batch symbol read as
    the slot of the number it stands for (no expression is rebuilt).  What :meth:`sub` gives back
    is a placeholder symbol of a slot, so that the values, error charges and checks are written as
    small sympy expressions over placeholders, walked onto the same tape at the end."""

    def __init__(self, compiled) -> None:
        self.compiled, self.batch, self.made = compiled, compiled.batch, compiled.batch_record
        self.group = next(iter(self.batch.covs))
        self.inputs: dict[tuple[int, int, int], sp.Symbol] = {}
        self.tape = TapeBuilder([self.input(self.group, i, j) for i, j in ((0, 0), (1, 1), (0, 1))])
        self.resolved: dict[sp.Symbol, int] = {}                  # batch symbol -> slot
        self.scope = Scope(self.resolved, self.batch.values)
        self.placeholders: dict[int, sp.Dummy] = {}               # slot -> its placeholder
        self.slots: dict[sp.Symbol, int] = {}                     # placeholder -> slot
        self.estimate: dict[int, tuple[sp.Expr, tuple]] = {}     # k -> (value, error terms)
        self.memo: dict[int, tuple[sp.Basic, int]] = {}          # compiled expressions' nodes -> slots
        self.glue: dict[int, tuple[sp.Basic, int]] = {}          # placeholder expressions' nodes -> slots
        self.constants: list[tuple[sp.Expr, float]] = []
        self.ties: list[tuple[sp.Expr, sp.Expr, int]] = []
        self.absolute: dict[int, sp.Expr] = {}                  # k -> the stated error of a series
        self.smooth = True                                       # every form is smooth_form so far

    def replay(self, names: Sequence[str]) -> Replay:
        for sym, source in self.made.sources.items():
            self.resolved[sym] = self.slot(self.source(source))
        for source, value in self.made.constants:
            self.constants.append((self.source(source), value))
        outputs = {o.name: o.var for o in self.compiled.program.outputs}
        values, errors = [], []
        for name in names:
            var = outputs[name]
            value = self.sub(self.compiled.c[var])
            parts = [term for k in sorted(self.compiled.deps[var]) for term in self.source(("estimate", k), error=True)]
            charged = (sp.Mul(sp.Float(ROUNDING), sp.Add(*parts, evaluate=False), evaluate=False)
                       if parts else sp.Integer(0))
            values.append(value)
            stated = [self.absolute[k] for k in sorted(self.compiled.deps[var]) if k in self.absolute]
            errors.append(sp.Add(charged, sp.Float(VALUE_ROUNDING) * sp.Abs(value, evaluate=False), *stated,
                                 evaluate=False))
        varying = self.varying()
        consts = [(e, v) for e, v in self.constants if not self.settled(e, v, varying)]
        checks = [e for e, _ in consts]
        ties: list[int] = []
        for a, b, sign in self.ties:                  # indices into the checks after the constants
            ties += [len(checks) - len(consts), len(checks) - len(consts) + 1, sign]
            checks += [a, b]
        tape = GridTape.of(self.tape.build([self.slot(e) for e in values + errors + checks]), (1, 1, 1))
        return Replay(tape, tuple(names), tuple(v for _, v in consts), tuple(ties),
                      "series" if self.absolute else "exact", self.smooth and bool(self.absolute))

    def settled(self, expr: sp.Expr, value: float, varying: set[int]) -> bool:
        """A check that holds whatever the data (the expression folded to that number; ``varying``:
        the slots that depend on the inputs, :meth:`varying`)."""
        slot = self.slot(expr)
        if slot in varying:
            return False
        if slot not in self.tape.consts:            # a series' row of constants
            raise Unreplayable(f"{expr} is not a number the tape folds")
        if self.tape.consts[slot] != value:
            raise Unreplayable(f"{expr} is {self.tape.consts[slot]}, not {value}")
        return True

    def varying(self) -> set[int]:
        """The slots of the tape so far that depend on an input."""
        out = set(range(self.tape.ninputs))
        for op in self.tape.ops:
            if not out.isdisjoint(op.args):
                out.add(op.out)
        return out

    def source(self, source: tuple, error: bool = False):
        """The expression of a recorded number: an input entry, or an estimate's value (or the
        terms of its error charge)."""
        if source[0] == "input":
            _, g, i, j = source
            if g != self.group or max(i, j) > 1:
                raise Unreplayable(f"input {source}")
            return self.input(g, i, j)
        k = source[1]
        if k not in self.estimate:
            self.estimate[k] = self.expectation(k)
        return self.estimate[k][1 if error else 0]

    def input(self, g: int, i: int, j: int) -> sp.Symbol:
        """The symbol of the initial covariance entry (g, i, j) (i, j in either order)."""
        key = (g, min(i, j), max(i, j))
        if key not in self.inputs:
            self.inputs[key] = sp.Symbol(f"s_{key[0]}_{key[1]}_{key[2]}", real=True)
        return self.inputs[key]

    def expectation(self, k: int) -> tuple[sp.Expr, tuple[sp.Expr, sp.Expr]]:
        """(value, charge) of estimate k: F over its forms' covariance, and its error in units of
        ROUNDING, |F| + max_i |Cᵢᵢ|, as its two terms (the error of an output is ROUNDING·Σ charges
        + VALUE_ROUNDING·|value|; the terms of all charges are summed flat, so that the tape can add the
        terms of one input before the pairs' — :mod:`..symbolic.grid`)."""
        note = self.made.notes.get(k)
        est = self.compiled.estimates[k]
        if note is None or est.method not in ("exact", "series"):
            raise Unreplayable(f"estimate {k}")
        cov = {ij: self.sub(e) for ij, e in note.cov.items()}
        names: dict[sp.Symbol, sp.Expr] = {}
        for ij, how in note.trace.layout.items():
            if how[0] == "const":
                self.constants.append((cov[ij], how[1]))
            elif how[1] not in names:
                names[how[1]] = cov[ij]
            else:
                self.ties.append((names[how[1]], cov[ij], how[2]))
        self.smooth = self.smooth and smooth_form(note.trace.F, tuple(names))
        value = self.sub(note.trace.F, names)
        if note.trace.error != 0:                # the series' stated error, a formula of its own
            self.absolute[k] = self.sub(note.trace.error, names)
        diag = [sp.Abs(cov[(i, i)], evaluate=False) for i in range(note.size)]
        scale = self.largest(diag)
        return value, (sp.Abs(value, evaluate=False), scale)             # × ROUNDING: its error

    def sub(self, expr: sp.Expr, extra: Mapping[sp.Symbol, sp.Expr] | None = None) -> sp.Expr:
        """The placeholder of ``expr`` walked onto the tape, its batch symbols (and ``extra``
        symbols, given as placeholder expressions) read as the slots of what they stand for."""
        if extra is None:
            env, memo = self.scope, self.memo               # by identity (:mod:`..symbolic.tape`)
        else:
            bound = {s: self.slot(e) for s, e in extra.items()}
            env, memo = Scope(ChainMap(bound, self.resolved), self.batch.values), {}
        return self.placeholder(self.tape.visit(expr, env, memo))

    def placeholder(self, slot: int) -> sp.Symbol:
        """The symbol that stands for ``slot`` in placeholder expressions."""
        if slot not in self.placeholders:
            self.placeholders[slot] = symbol = sp.Dummy()
            self.slots[symbol] = slot
        return self.placeholders[slot]

    def slot(self, expr: sp.Expr) -> int:
        """The slot of a placeholder expression (placeholders, inputs, numbers), walked onto the tape."""
        return self.tape.visit(expr, self.slots, self.glue)

    def largest(self, items: Sequence[sp.Expr]) -> sp.Expr:
        """The placeholder of max(items) (0 for none, the item for one), a fold on the tape: no
        sympy Max, whose constructor sorts its arguments.  The tape evaluates it as numpy's
        maximum, as the batch compile's ``largest_variance`` does."""
        if not items:
            return sp.Integer(0)
        if len(items) == 1:
            return items[0]
        return self.placeholder(self.tape.nary("max", [(self.slot(e), 1) for e in items]))


def smooth_form(F: sp.Expr, symbols: tuple) -> bool:
    """F is a polynomial in the covariance ``symbols`` once its series heads (values of the Mehler
    series, whose stated errors hold at |ρ| = 1) are taken as numbers: no closed form whose
    replayed value loses digits at a singular covariance (ReLU's arc-cosine at ρ → 1)."""
    heads = F.atoms(MehlerValue, Mean)
    if heads:
        F = F.xreplace({h: sp.Dummy() for h in heads})
    return bool(F.is_polynomial(*symbols))

