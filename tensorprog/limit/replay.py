"""A batch compile replayed as one numpy tape: dataset kernels at the cost of their arithmetic.

A batch compile (:mod:`.batch`) of a kernel template on a few pairs records how each number of
the recurrence was made: an initial covariance entry, or an expectation E f(ℓ) in closed form
F(C) over the covariance C of its linear forms (or by the Mehler series: F then holds its
row operations — the coefficients of one input's variance — and its cell operations, with its
stated error as a formula beside it, :mod:`..symbolic.mehler`), each Cᵢⱼ = Σ_g Σ_h a_ig a_jh Σ_gh a polynomial
in earlier numbers.  Chained, the outputs are one numeric tape (:mod:`..symbolic.tape`) of the
initial covariance entries of a pair — a = Σ₀₀ (its first input's variance), b = Σ₁₁ (the
second's), c = Σ₀₁ — each closed form walked onto it with its symbols bound to the slots of the
numbers they stand for (:class:`Builder`); :class:`Replay` holds it (and the errors, propagated to
first order: below) as one :class:`..symbolic.grid.GridTape`, where everything that depends on a
alone (or b alone) —
an input's variance chain through the layers, most of the error charges — is computed once per
input and only the rest once per pair.

The errors.  An expectation E_k = F_k(C) errs by its own error — the series' stated error (truncation,
coefficients, the rounding of its sum: :mod:`..symbolic.mehler`) plus the rounding of the products
around it, the rounding of its arithmetic for a polynomial closed form (E xy = c), or
ROUNDING·(|E| + max_i Cᵢᵢ) for another closed form — and by what the errors of its covariance
entries make of it: the entries Cᵢⱼ are polynomials in earlier expectations (and the initial entries,
rounded: INPUT_ROUNDING), so their errors enter E_k through F_k's slopes:

    err(E_k) = own_k + Σ_n |∂F_k/∂c_n| · err(C_n),   err(P) = Σ_s |∂P/∂s| · err(s) + rnd(P)

over the distinct entries c_n of its layout and the numbers s a polynomial P rests on; rnd(P) bounds
the rounding of evaluating P (:func:`rounding`: n − 1 roundings of a sum of n terms, k − 1 of a
product of k factors, each at most the unit roundoff u = ε/2 relative to the magnitude |·|⁺ of what
it adds or multiplies).  An output
is such a P: its error bounds the tape's value as written (the estimates' errors cover their values as
the tape computed them, rnd(P) the arithmetic after; no further rounding such as the compile's
VALUE_ROUNDING·|value|, which counted it twice).  The series' slopes
are bounded per cell by Price's theorem (∂/∂c E φ(u)ψ(v) = E φ′ψ′, ∂/∂a = ½ E φ″ψ, as Mehler series:
:func:`..symbolic.mehler.mehler_slope`, :func:`..symbolic.mehler.mehler_curve`, ``mean_curve``);
products and closed forms (the ReLU arc-cosine kernel: finite off ρ = ±1, whose pairs are classes
of their own) by sympy's derivative.  A form whose derivative has a Dirac mass or a step keeps unit
sensitivity to each entry: err(E_k) = own_k + Σ_n err(C_n).  This is first order: the remainder is
½ Σ |∂²F| err² — with errors ≤ 1e-10 and the second derivatives of the kernels O(1) (Stein: E φ⁗ψ
and the like), below 1e-20, and not charged.

The record is valid for other covariances when the compile would have made the same decisions:
the batch agreed on the numbers it took as constants, the covariance entries it tied (x ≡ y:
Cov = Var) are still equal, and every value is finite.  The tape computes those quantities
too and :meth:`Replay.__call__` checks them entry by entry (the caller compiles the entries
where one fails).
"""
from __future__ import annotations

from collections import ChainMap
from dataclasses import dataclass
from typing import Callable, Container, Iterator, Mapping, NamedTuple, Sequence

import numpy as np
import sympy as sp

from ..symbolic.bivariate import Phi2
from ..symbolic.grid import CONST, ROW, GridTape, Workspace
from ..symbolic.heads import Delta
from ..symbolic.mixed import MixedValue
from ..symbolic.mehler import T, DiagonalSlope, HermiteRow, Mean, MeanCurve, MehlerCurve, MehlerSlope, MehlerValue
from ..symbolic.rounding import EPS, NoRoundingRule, function_rounding, rounding
from ..symbolic.tape import Builder as TapeBuilder
from .ledger import ROUNDING

#: the rounding of an initial covariance entry s·q + b, relative to its scale √(ab) (a = s·q_ii + b,
#: b likewise): q = ξᵀξ'/d errs by at most 2.01·u·s⁻¹√(ab) whatever d (the tools' Gram entries are
#: summed in extended precision: ``tools.pairs.accurate_dot``), s·q and + b by u·(s|q| + b) ≤ u√(ab)
#: each (Cauchy–Schwarz): 4.01·u in all, u = ε/2 — charged as 4.2·u
INPUT_ROUNDING = 2.1 * EPS


def stored_method(method: object) -> str:
    """A stored replay's method: "series" or "quadrature" as stored, anything else "exact"."""
    return method if method in ("series", "quadrature") else "exact"


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
    method: str = "exact"                   # "series" when some expectation is the Mehler series,
    #                                          "quadrature" when some is the mixed rule (:mod:`..symbolic.mixed`)
    #: every expectation is the series or a polynomial in its covariance: the values hold to their
    #: stated errors at singular covariances too (x ≡ y: a kernel's diagonal, :func:`smooth_form`)
    smooth: bool = False
    #: the x ≡ y cells (a kernel's diagonal: b = c = a) from the same record, or None: 2k more tape
    #: outputs after the errors (their values, then their errors, each a function of a alone: row
    #: space), and after the pair's checks their own, (constants, ties) as above (:class:`Diagonal`)
    diagonal: "Diagonal | None" = None

    def __call__(self, a: np.ndarray | None, b: np.ndarray | None, c: np.ndarray,
                 work: Workspace | None = None, sides: dict | None = None) -> tuple[list, list, np.ndarray]:
        """(values, errors, valid): one array per name at rows ``a``, columns ``b`` and cells
        ``c`` (a grid: shapes (R, 1), (1, C), (R, C); or P pairs: (P,) each), and where the record
        holds, entry by entry (:meth:`valid`).  With ``work``, the arrays are views of its work
        arrays (copy them out before its next use).  ``sides``: a and b's part of the tape already
        evaluated (:meth:`.GridTape.sides`, cut to this block); a and b are then not read."""
        got = self.tape([a], [b], [c], work, sides)
        k = len(self.names)
        first = 4 * k if self.diagonal is not None else 2 * k          # the pair's checks
        stop = first + len(self.constants) + 2 * len(self.ties) // 3
        return got[:k], got[k:2 * k], self.valid(got[:2 * k], got[first:stop])

    def diagonal_values(self, sides: dict) -> tuple[list, list, np.ndarray]:
        """(values, errors, valid) of the x ≡ y cells (:class:`Diagonal`) at the rows of ``sides``
        (:meth:`.GridTape.sides` of this tape: the rows' variances a; one entry per row), or a
        ValueError if the record has no diagonal part."""
        if self.diagonal is None:
            raise ValueError("this record has no diagonal part")
        k = len(self.names)
        outputs = self.tape.outputs
        rows = np.shape(sides[0])
        got = [np.broadcast_to(sides[o], rows).astype(float, copy=False) for o in outputs[2 * k:4 * k]]
        start = 4 * k + len(self.constants) + 2 * len(self.ties) // 3
        checks = [np.broadcast_to(sides[o], rows) for o in outputs[start:]]
        ok = check(got, checks, self.diagonal.constants, self.diagonal.ties)
        return got[:k], got[k:], ok

    def valid(self, results: Sequence[np.ndarray], checks: Sequence[np.ndarray]) -> np.ndarray:
        """Entry by entry: every value and error finite, every constant the same, every tie
        still equal (to 1e-12, relative)."""
        return check(results, checks, self.constants, self.ties)

    def to_json(self) -> dict:
        """The replay as JSON data (see :meth:`.GridTape.to_json`)."""
        diagonal = None if self.diagonal is None else {"constants": list(self.diagonal.constants),
                                                       "ties": list(self.diagonal.ties)}
        return {"tape": self.tape.to_json(), "names": list(self.names), "constants": list(self.constants),
                "ties": list(self.ties), "method": self.method, "smooth": self.smooth, "diagonal": diagonal}

    @classmethod
    def from_json(cls, data: dict) -> "Replay":
        """The replay :meth:`to_json` stored (a ValueError if it is not one)."""
        try:
            diag = data.get("diagonal")
            diagonal = None if diag is None else Diagonal(tuple(float(v) for v in diag["constants"]),
                                                          tuple(int(t) for t in diag["ties"]))
            replay = cls(GridTape.from_json(data["tape"]), tuple(str(n) for n in data["names"]),
                         tuple(float(v) for v in data["constants"]), tuple(int(t) for t in data["ties"]),
                         stored_method(data.get("method")), data.get("smooth") is True,
                         diagonal)
        except (KeyError, TypeError) as err:
            raise ValueError(f"not a stored replay: {err}") from None
        k, outputs = len(replay.names), len(replay.tape.outputs)
        checks = len(replay.constants) + 2 * len(replay.ties) // 3
        if diagonal is not None:
            checks += 2 * k + len(diagonal.constants) + 2 * len(diagonal.ties) // 3
        if outputs != 2 * k + checks:
            raise ValueError(f"not a stored replay: {outputs} tape outputs for {k} names and {checks} checks")
        if diagonal is not None and any(replay.tape.spaces.get(o, CONST) not in (CONST, ROW)
                                        for o in replay.diagonal_outputs):
            raise ValueError("not a stored replay: its diagonal part reads more than the rows")
        return replay

    @property
    def mixed(self) -> bool:
        """Whether some expectation is the mixed rule (:mod:`..symbolic.mixed`: the series, split
        quadrature in the cells where it misses its aim)."""
        return any(op.kind in ("mixed", "mixed_err") for op in self.tape.ops)

    @property
    def diagonal_outputs(self) -> tuple[int, ...]:
        """The tape outputs of the diagonal part (values, errors, then its checks)."""
        k = len(self.names)
        start = 4 * k + len(self.constants) + 2 * len(self.ties) // 3
        return self.tape.outputs[2 * k:4 * k] + self.tape.outputs[start:] if self.diagonal is not None else ()


@dataclass(frozen=True)
class Diagonal:
    """The diagonal part of a :class:`Replay`: its checks' constants and ties (as the pair's)."""
    constants: tuple[float, ...]
    ties: tuple[int, ...]


def check(results: Sequence[np.ndarray], checks: Sequence[np.ndarray], constants: Sequence[float],
          ties: Sequence[int]) -> np.ndarray:
    """Entry by entry: every result finite, the first checks equal to ``constants``, then each
    (x, y, sign) of ``ties`` (indices into the checks after the constants) equal, x = sign·y to
    1e-12 (relative)."""
    ok = np.ones(np.broadcast_shapes(*(np.shape(r) for r in (*results, *checks))), dtype=bool)
    for r in results:
        ok &= np.isfinite(r)
    for c, v in zip(checks, constants):
        ok &= c == v
    rest = checks[len(constants):]
    for t in range(0, len(ties), 3):
        x, y, sign = rest[ties[t]], rest[ties[t + 1]], ties[t + 2]
        ok &= np.abs(x - sign * y) <= 1e-12 * np.abs(sign * y)
    return ok


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


class Binding(NamedTuple):
    """An environment of :meth:`Builder.sub` (symbols to slots) and the memo of its walks."""
    env: Scope
    memo: dict


class Builder:
    """The tape of a recorded batch compile (see :func:`record`): its closed forms walked onto one
    :class:`..symbolic.tape.Tape` of the pair's initial covariance entries, a batch symbol read as
    the slot of the number it stands for (no expression is rebuilt).  What :meth:`sub` gives back
    is a placeholder symbol of a slot, so that the values, error charges and checks are written as
    small sympy expressions over placeholders, walked onto the same tape at the end."""

    def __init__(self, compiled, share: "Builder | None" = None) -> None:
        self.compiled, self.batch, self.made = compiled, compiled.batch, compiled.batch_record
        self.group = next(iter(self.batch.covs))
        if share is None:
            self.inputs: dict[tuple[int, int, int], sp.Symbol] = {}
            self.tape = TapeBuilder([self.input(self.group, i, j) for i, j in ((0, 0), (1, 1), (0, 1))])
            self.placeholders: dict[int, sp.Dummy] = {}           # slot -> its placeholder
            self.slots: dict[sp.Symbol, int] = {}                 # placeholder -> slot
            self.glue: dict[int, tuple[sp.Basic, int]] = {}      # placeholder expressions' nodes -> slots
        else:                                                     # the same tape, placeholders and glue
            self.inputs, self.tape = share.inputs, share.tape
            self.placeholders, self.slots, self.glue = share.placeholders, share.slots, share.glue
        #: forms' slopes and roundings by form (:meth:`form_slopes`): the pair pass's, shared
        self.derived: dict[tuple, object] = {} if share is None else share.derived
        #: :func:`rounding`'s memo (roundings and magnitudes by expression), shared likewise
        self.arith: dict[tuple, sp.Expr] = {} if share is None else share.arith
        self.resolved: dict[sp.Symbol, int] = {}                  # batch symbol -> slot
        self.scope = Scope(self.resolved, self.batch.values)
        self.estimate: dict[int, tuple[sp.Expr, sp.Expr]] = {}   # k -> (value, error)
        self.memo: dict[int, tuple[sp.Basic, int]] = {}          # compiled expressions' nodes -> slots
        self.constants: list[tuple[sp.Expr, float]] = []
        self.ties: list[tuple[sp.Expr, sp.Expr, int]] = []
        self.absolute: dict[int, sp.Expr] = {}                  # k -> the stated error of a series
        self.smooth = True                                       # every form is smooth_form so far
        self.errors: dict[int, sp.Expr] = {}                    # k -> err(E_k), propagated (module doc)
        self.entry_errors: dict[sp.Expr, sp.Expr] = {}          # P -> err(P) (:meth:`error_of`)
        self.symbol_errors: dict[sp.Symbol, sp.Expr] = {}

    def replay(self, names: Sequence[str]) -> Replay:
        values, errors = self.outputs(names)
        checks, consts, ties = self.checks()
        smooth = self.smooth and bool(self.absolute)
        outputs, diagonal = values + errors, None
        if smooth:                               # the x ≡ y cells from the same compile (DiagonalBuilder)
            other = DiagonalBuilder(self.compiled, self)
            try:
                d_values, d_errors = other.outputs(names)
                d_checks, d_consts, d_ties = other.checks()
            except (Unreplayable, ValueError):
                pass
            else:
                if other.smooth:
                    outputs += d_values + d_errors
                    diagonal = (d_checks, Diagonal(tuple(v for _, v in d_consts), tuple(d_ties)))
        outputs += checks + (diagonal[0] if diagonal else [])
        tape = GridTape.of(self.tape.build([self.slot(e) for e in outputs]), (1, 1, 1))
        mixed = any(op.kind in ("mixed", "mixed_err") for op in tape.ops)
        method = "quadrature" if mixed else "series" if self.absolute else "exact"
        return Replay(tape, tuple(names), tuple(v for _, v in consts), tuple(ties),
                      method, smooth, diagonal[1] if diagonal else None)

    def outputs(self, names: Sequence[str]) -> tuple[list[sp.Expr], list[sp.Expr]]:
        """The placeholders of the outputs ``names``' values and errors (every recorded number walked
        onto the tape, the constants the batch agreed on noted as checks)."""
        for sym, source in self.made.sources.items():
            self.resolved[sym] = self.slot(self.source(source))
        for source, value in self.made.constants:
            self.constants.append((self.source(source), value))
        outputs = {o.name: o.var for o in self.compiled.program.outputs}
        values, errors = [], []
        for name in names:
            var = outputs[name]
            value = self.sub(self.compiled.c[var])
            for k in sorted(self.compiled.deps[var]):
                self.source(("estimate", k))
            values.append(value)
            errors.append(self.output_error(var))      # its rounding is rnd(P): module doc
        return values, errors

    def output_error(self, var: int) -> sp.Expr:
        """An output's error: :meth:`error_of` its polynomial of batch symbols; for an output that
        folded to a number (a class recorded from one pair: every entry a constant the checks hold),
        the compile's own stated error of it, since the estimates it rests on left no symbols."""
        expr = self.compiled.c[var]
        if expr.is_number:
            return sp.Float(float(np.max(self.compiled.result(var).error)))
        return self.error_of(expr)

    def checks(self) -> tuple[list[sp.Expr], list[tuple[sp.Expr, float]], list[int]]:
        """(checks, constants, ties) of :class:`Replay`: the constants that do not fold (their
        expressions first among the checks), then each tie's two expressions."""
        varying = self.varying()
        consts = [(e, v) for e, v in self.constants if not self.settled(e, v, varying)]
        checks = [e for e, _ in consts]
        ties: list[int] = []
        for a, b, sign in self.ties:                  # indices into the checks after the constants
            ties += [len(checks) - len(consts), len(checks) - len(consts) + 1, sign]
            checks += [a, b]
        return checks, consts, ties

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
        """The expression of a recorded number: an input entry, or an estimate's value (or its
        propagated error, a placeholder)."""
        if source[0] == "input":
            _, g, i, j = source
            if g != self.group or max(i, j) > 1:
                raise Unreplayable(f"input {source}")
            return self.entry(g, i, j)
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

    def entry(self, g: int, i: int, j: int) -> sp.Symbol:
        """The symbol of the initial covariance entry (g, i, j) as this pass reads it."""
        return self.input(g, i, j)

    def tie_map(self, note) -> dict[sp.Symbol, sp.Symbol]:
        """{layout symbol: the symbol standing for it} of the entries this pass takes as equal
        beyond the compile's own ties (none here; :class:`DiagonalBuilder`)."""
        return {}

    def expectation(self, k: int) -> tuple[sp.Expr, sp.Expr]:
        """(value, error) of estimate k: F over its forms' covariance, and err(E_k) of the module
        doc (its own error and its covariance entries' errors through F's slopes), each the
        placeholder of its slot."""
        note = self.made.notes.get(k)
        est = self.compiled.estimates[k]
        mixed = est.method == "quadrature" and note is not None and note.trace.F.has(MixedValue)   # :mod:`..symbolic.mixed`
        if note is None or (est.method not in ("exact", "series") and not mixed):
            raise Unreplayable(f"estimate {k}")
        rename = self.tie_map(note)
        layout = {ij: how for ij, how in note.trace.layout.items() if how[0] == "const" or how[1] not in rename}
        F, error = (note.trace.F, note.trace.error) if not rename else \
            (note.trace.F.xreplace(rename), note.trace.error.xreplace(rename))
        cov = {ij: self.sub(note.cov[ij]) for ij in layout}
        names: dict[sp.Symbol, sp.Expr] = {}
        for ij, how in layout.items():
            if how[0] == "const":
                self.constants.append((cov[ij], how[1]))
            elif how[1] not in names:
                names[how[1]] = cov[ij]
            else:
                self.ties.append((names[how[1]], cov[ij], how[2]))
        self.smooth = self.smooth and self.form_smooth(F, tuple(names))
        bound = self.binding(names)
        value = self.sub(F, bound)
        slopes = self.form_slopes(F, tuple(names))
        if error != 0:                           # the series' stated error, a formula of its own
            # |·|: the batch's formula is a bound's, but its symbols' assumptions could let sympy write |c|
            # as −c (an off-diagonal c_i_j once declared positive=False, i.e. ≤ 0: expect/batch.py)
            self.absolute[k] = sp.Abs(self.sub(error, bound), evaluate=False)
            own = [self.absolute[k]] + ([self.sub(r, bound)] if (r := self.form_arithmetic(F)) != 0 else [])
        elif self.form_polynomial(F):             # a polynomial of the entries (E xy = c): its arithmetic
            own = [self.sub(self.entry_derived(F)[1], bound)]
        else:
            if any((i, i) not in cov for i in range(note.size)):
                raise Unreplayable(f"estimate {k}: a variance taken as another's")
            diag = [sp.Abs(cov[(i, i)], evaluate=False) for i in range(note.size)]
            magnitude = sp.Abs(value, evaluate=False)
            own = [sp.Float(ROUNDING) * sp.Add(magnitude, self.largest(diag), evaluate=False)]
            if F.has(Phi2):                       # e^m·Φ₂ forms (ELU, SELU): their terms' own errors
                own.append(self.sub(self.form_functions(F), bound))
        raw = {}
        for ij, how in layout.items():
            if how[0] != "const" and how[1] not in raw:
                raw[how[1]] = note.cov[ij]
        if slopes is None:                        # unit sensitivity to each entry (module doc)
            terms = own + [self.error_of(raw[n]) for n in names]
        else:
            terms = own + [sp.Mul(self.sub(slopes[n], bound), self.error_of(raw[n]), evaluate=False)
                           for n in names if slopes[n] != 0]
        total = sp.Add(*terms, evaluate=False) if len(terms) > 1 else terms[0]
        self.errors[k] = self.placeholder(self.slot(total))     # on the tape once: later errors name it
        return value, self.errors[k]

    def form_slopes(self, F: sp.Expr, names: tuple[sp.Symbol, ...]) -> dict[sp.Symbol, sp.Expr] | None:
        """:meth:`slopes`, once per form and layout symbols (the layers of a template repeat their
        forms: kept in :attr:`derived`, shared by the passes over one compile)."""
        key = ("slopes", F, names)
        if key not in self.derived:
            self.derived[key] = self.slopes(F, names)
        return self.derived[key]

    def form_polynomial(self, F: sp.Expr) -> bool:
        """:func:`polynomial_like`, once per expression (as :meth:`form_slopes`)."""
        key = ("polynomial", F)
        if key not in self.derived:
            self.derived[key] = polynomial_like(F)
        return self.derived[key]

    def form_smooth(self, F: sp.Expr, names: tuple[sp.Symbol, ...]) -> bool:
        """:func:`smooth_form`, once per form over its heads' symbols (:meth:`over_heads`: the same G
        at every layer, whose heads are numbers to it as they are to F)."""
        G = self.over_heads(F)[1]
        key = ("smooth", G, names)
        if key not in self.derived:
            self.derived[key] = smooth_form(G, names)
        return self.derived[key]

    def form_functions(self, F: sp.Expr) -> sp.Expr:
        """:func:`function_rounding`, once per form (as :meth:`form_slopes`)."""
        key = ("functions", F)
        if key not in self.derived:
            try:
                self.derived[key] = function_rounding(F)
            except NoRoundingRule as e:
                raise Unreplayable(str(e)) from None
        return self.derived[key]

    def form_arithmetic(self, F: sp.Expr) -> sp.Expr:
        """:meth:`form_rounding`, once per form (as :meth:`form_slopes`)."""
        key = ("rounding", F)
        if key not in self.derived:
            self.derived[key] = self.form_rounding(F)
        return self.derived[key]

    def slopes(self, F: sp.Expr, names: Sequence[sp.Symbol]) -> dict[sp.Symbol, sp.Expr] | None:
        """{c_n: a bound on |∂F/∂c_n|} for the layout symbols of a recorded form F, as expressions
        of them; None if F's derivative is not a function the tape evaluates (a kink's Dirac mass
        or step, an unknown function's derivative: module doc).
        The series heads' slopes by :func:`head_slope` (chain rule through each head: F as a function
        of its explicit symbols and of the heads' values)."""
        stand, G = self.over_heads(F)         # G: the same at every layer: its derivatives are kept
        back = {d: h for h, d in stand.items()}
        outer = {h: self.derivative(G, d) for h, d in stand.items()}     # ∂F/∂H, the same for every c_n
        outer = {h: sp.Abs(o, evaluate=False) for h, o in outer.items() if o != 0}
        with_heads = {h: o.xreplace(back) for h, o in outer.items()}     # ... over the heads, once per head
        out = {}
        for n in names:
            explicit = self.derivative(G, n)
            if explicit.has(sp.Derivative, sp.Subs, sp.DiracDelta, Delta, sp.Heaviside, sp.Piecewise):
                return None
            parts = [sp.Abs(explicit, evaluate=False)]
            for h, o in outer.items():
                parts.append(sp.Mul(o, head_slope(h, n, self.derivative), evaluate=False))
            out[n] = heads_put_back(parts, back, [with_heads[h] for h in outer])
        return out

    def head_symbol(self, i: int) -> sp.Dummy:
        """The symbol standing for a form's i-th series head in :meth:`slopes` (one per i, shared by
        the passes: a form's expression over its heads' symbols is the same at every layer)."""
        key = ("head", i)
        if key not in self.derived:
            self.derived[key] = sp.Dummy(f"h{i}")
        return self.derived[key]

    def derivative(self, G: sp.Expr, symbol: sp.Symbol) -> sp.Expr:
        """sympy's ∂G/∂symbol, once per (G, symbol)."""
        key = ("derivative", G, symbol)
        if key not in self.derived:
            self.derived[key] = sp.diff(G, symbol)
        return self.derived[key]

    def over_heads(self, F: sp.Expr) -> tuple[dict[sp.Expr, sp.Dummy], sp.Expr]:
        """({series head: :meth:`head_symbol`}, F with its heads so replaced), once per form: G is
        the same expression at every layer of a template (its derivatives and rounding kept by G)."""
        key = ("heads", F)
        if key not in self.derived:
            heads = list(dict.fromkeys(h for h in sp.preorder_traversal(F) if isinstance(h, (MehlerValue, Mean))))
            stand = {h: self.head_symbol(i) for i, h in enumerate(heads)}
            self.derived[key] = (stand, F.xreplace(stand))
        return self.derived[key]

    def form_rounding(self, F: sp.Expr) -> sp.Expr:
        """The rounding of the arithmetic around a recorded form's series heads (a product c·E φψ:
        one rounding; the heads' own in their stated errors), as an expression of its symbols
        (over the heads' symbols once per G: :meth:`over_heads`)."""
        stand, G = self.over_heads(F)
        key = ("rounding over heads", G)
        if key not in self.derived:             # other functions: the closed form's charge covers them
            self.derived[key] = rounding(G) if polynomial_like(G) else sp.Integer(0)
        return self.derived[key].xreplace({d: h for h, d in stand.items()})

    def error_of(self, expr: sp.Expr) -> sp.Expr:
        """err(P) of the module doc for a polynomial P of batch symbols (a covariance entry, an
        output): Σ_s |∂P/∂s|·err(s) + rnd(P), as an expression of the inputs (once per P: an
        entry meets several forms)."""
        if expr.is_number:
            return sp.Integer(0)
        if expr not in self.entry_errors:
            self.entry_errors[expr] = self.propagated(expr)
        return self.entry_errors[expr]

    def propagated(self, expr: sp.Expr) -> sp.Expr:
        """:meth:`error_of` without its memo."""
        if not self.form_polynomial(expr):
            raise Unreplayable(f"{expr} is not a polynomial of the recorded numbers")
        terms = []
        slopes, r = self.entry_derived(expr)
        for s in sorted(expr.free_symbols & self.made.sources.keys(), key=sp.default_sort_key):
            err = self.symbol_error(s)
            if err != 0:
                slope = slopes.get(s, sp.Integer(0)) if slopes is not None else sp.diff(expr, s)
                terms.append(sp.Mul(sp.Abs(self.sub(slope), evaluate=False), err, evaluate=False))
        if r != 0:
            terms.append(self.sub(r))
        return sp.Add(*terms, evaluate=False) if len(terms) > 1 else terms[0] if terms else sp.Integer(0)

    def entry_derived(self, expr: sp.Expr) -> tuple[dict[sp.Symbol, sp.Expr] | None, sp.Expr]:
        """(:func:`multilinear_slopes`, :func:`rounding`) of a polynomial of batch symbols, once per
        polynomial (kept in :attr:`derived`: the x ≡ y pass meets the pair pass's entries again)."""
        key = ("entry", expr)
        if key not in self.derived:
            self.derived[key] = (multilinear_slopes(expr), rounding(expr, self.arith))
        return self.derived[key]

    def symbol_error(self, sym: sp.Symbol) -> sp.Expr:
        """err of a batch symbol: an initial entry's rounding (INPUT_ROUNDING·scale), or an
        estimate's err(E_k)."""
        if sym not in self.symbol_errors:
            source = self.made.sources[sym]
            if source[0] == "input":
                _, g, i, j = source
                if i == j:
                    err = sp.Float(INPUT_ROUNDING) * sp.Abs(self.entry(g, i, i), evaluate=False)
                else:
                    err = sp.Float(INPUT_ROUNDING) * sp.sqrt(sp.Abs(self.entry(g, i, i) * self.entry(g, j, j),
                                                                     evaluate=False))
            else:
                self.source(source)
                err = self.errors[source[1]]
            self.symbol_errors[sym] = err
        return self.symbol_errors[sym]

    def sub(self, expr: sp.Expr, extra: "Mapping[sp.Symbol, sp.Expr] | Binding | None" = None) -> sp.Expr:
        """The placeholder of ``expr`` walked onto the tape, its batch symbols (and ``extra``
        symbols, given as placeholder expressions, or as a :meth:`binding` of them) read as the
        slots of what they stand for."""
        if extra is None:
            env, memo = self.scope, self.memo               # by identity (:mod:`..symbolic.tape`)
        else:
            env, memo = extra if isinstance(extra, Binding) else self.binding(extra)
        return self.placeholder(self.tape.visit(expr, env, memo))

    def binding(self, extra: Mapping[sp.Symbol, sp.Expr]) -> "Binding":
        """The environment of :meth:`sub` with ``extra``'s symbols bound, and its memo of the nodes
        walked in it: the walks of one form's value, error and slopes share their subexpressions
        (the heads' rows and ρ), each walked once — a walk is a function of the node and the
        environment (equal operations are one slot: :meth:`..symbolic.tape.Emitter.emit`), so
        the tape is the one separate walks make."""
        bound = {s: self.slot(e) for s, e in extra.items()}
        return Binding(Scope(ChainMap(bound, self.resolved), self.batch.values), {})

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


class DiagonalBuilder(Builder):
    """The x ≡ y pass over a recorded compile of other pairs (the x ≡ y class of a kernel's
    diagonal, without a compile of its own): its forms walked onto the same tape (the rows' work
    shared) with the pair's three initial entries read as one, a = b = c, and, in each form, the
    covariance entries that are equal on the diagonal taken as one symbol, as the x ≡ y compile
    ties them (:func:`..expect.batch._symbolic_cov` finds them equal in its numbers): ρ = c/√(ab)
    becomes 1, a series head E φ(u)ψ(v) the 1-D rule's Σ α_k β_k at u ≡ v (:func:`..symbolic.mehler.diagonal`),
    its slope the signed DiagonalSlope (:func:`head_slope`) where the pair's sums three slopes in
    absolute value.  Entries are equal on the diagonal when they are the same expression of the
    recorded numbers once each number is read by its *diagonal class* (:meth:`class_of`): the
    initial entries one class, an estimate the class of its form with its entries so read, a
    Hermite row by its function and variance (not its order or step, which the compile chose
    from the pair's numbers), a series head at ρ = 1 over one variance E φ(u)ψ(u) = Mean(φψ).
    Equal classes are equal values in exact arithmetic, so a tie needs no check; each computed
    value keeps its own stated error."""

    def __init__(self, compiled, share: Builder) -> None:
        super().__init__(compiled, share)
        self.share = share
        self.classes: dict[sp.Expr, sp.Symbol] = {}         # normal form -> its class symbol
        self.estimate_classes: dict[int, sp.Symbol] = {}
        self.ties_of: dict[int, dict[sp.Symbol, sp.Symbol]] = {}
        self.keys: dict[sp.Expr, sp.Expr] = {}              # an entry -> :meth:`key` (ties and classes read it)
        self.one = sp.Symbol("diagonal_input", positive=True)
        self.reused: set[int] = set()                       # estimates the pair pass made as here

    def entry(self, g: int, i: int, j: int) -> sp.Symbol:
        """a = b = c: every initial entry is the first input's variance."""
        return self.input(g, 0, 0)

    def outputs(self, names: Sequence[str]) -> tuple[list[sp.Expr], list[sp.Expr]]:
        """As :meth:`Builder.outputs`, walking only the numbers the diagonal's values read (its ties
        leave the second input's chain unread; the checks of what it reads are made as it walks
        them), in the order they were made, and an estimate made as in the pair pass (ties of
        none of its entries, all of them made so: :meth:`same_as_pairs`) taken from it."""
        for sym in self.made.sources:                      # the classes, in the order made (no deep recursion)
            self.class_of(sym)
        needed = self.needed(names)
        for sym, source in self.made.sources.items():
            if sym in needed:
                self.resolved[sym] = self.slot(self.source(source))
        for source, value in self.made.constants:
            self.constants.append((self.source(source), value))
        outputs = {o.name: o.var for o in self.compiled.program.outputs}
        values = [self.sub(self.compiled.c[outputs[name]]) for name in names]
        errors = [self.output_error(outputs[name]) for name in names]
        return values, errors

    def needed(self, names: Sequence[str]) -> set[sp.Symbol]:
        """The recorded numbers the outputs ``names`` read on the diagonal, through the entries of
        each estimate's form that its ties leave (and the estimates the batch agreed on)."""
        outputs = {o.name: o.var for o in self.compiled.program.outputs}
        sources = self.made.sources
        out: set[sp.Symbol] = set()
        stack: list = [self.compiled.c[outputs[name]] for name in names]
        stack += [source for source, _ in self.made.constants if source[0] == "estimate"]
        done: set[int] = set()
        while stack:
            item = stack.pop()
            if isinstance(item, tuple):                 # an estimate's source: the entries its form reads
                note = self.made.notes.get(item[1])
                if item[1] in done or note is None:
                    continue
                done.add(item[1])
                rename = self.tie_map(note)
                stack += [note.cov[ij] for ij, how in note.trace.layout.items()
                          if how[0] == "const" or how[1] not in rename]
                continue
            if not isinstance(item, sp.Basic):
                continue
            for sym in item.free_symbols:
                if sym in sources and sym not in out:
                    out.add(sym)
                    if sources[sym][0] == "estimate":
                        stack.append(sources[sym])
        return out

    def same_as_pairs(self, symbol: sp.Symbol) -> bool:
        """The recorded number is made here as in the pair pass (the same slots for its value and
        error): the first input's variance, or an estimate taken from the pair pass."""
        source = self.made.sources[symbol]
        if source[0] == "input":
            return source[2] == source[3] == 0
        return source[1] in self.reused

    def expectation(self, k: int) -> tuple[sp.Expr, sp.Expr]:
        """:meth:`Builder.expectation`, or the pair pass's value and error of estimate k where it
        made them as here (no ties, every number of its entries :meth:`same_as_pairs`); its
        checks are made again (the same slots) as the diagonal's own."""
        note = self.made.notes.get(k)
        if note is None or k not in self.share.estimate or self.tie_map(note):
            return super().expectation(k)
        entries = [e for e in note.cov.values() if isinstance(e, sp.Basic)]
        if not all(self.same_as_pairs(s) for e in entries for s in e.free_symbols if s in self.made.sources):
            return super().expectation(k)
        self.reused.add(k)
        first: dict[sp.Symbol, sp.Expr] = {}
        for ij, how in note.trace.layout.items():
            entry = self.sub(note.cov[ij])
            if how[0] == "const":
                self.constants.append((entry, how[1]))
            elif how[1] not in first:
                first[how[1]] = entry
            else:
                self.ties.append((first[how[1]], entry, how[2]))
        self.errors[k] = self.share.errors[k]
        if k in self.share.absolute:
            self.absolute[k] = self.share.absolute[k]
        return self.share.estimate[k]

    def tie_map(self, note) -> dict[sp.Symbol, sp.Symbol]:
        """{layout symbol: the first layout symbol of its diagonal class} (the first of each class
        maps to nothing)."""
        key = id(note)
        if key not in self.ties_of:
            first: dict[sp.Expr, sp.Symbol] = {}
            out: dict[sp.Symbol, sp.Symbol] = {}
            seen: set = set()
            for ij, how in note.trace.layout.items():
                if how[0] == "const" or how[1] in seen:
                    continue
                seen.add(how[1])
                value = note.cov[ij] if how[2] == 1 else -note.cov[ij]       # the symbol's value
                rep = first.setdefault(self.key(value), how[1])
                if rep != how[1]:
                    out[how[1]] = rep
            self.ties_of[key] = out
        return self.ties_of[key]

    def key(self, expr: sp.Expr) -> sp.Expr:
        """``expr`` (a polynomial of recorded numbers) with each number read as its diagonal class
        (once per expression: the ties and the classes read the same entries)."""
        if expr.is_number:
            return expr
        if expr not in self.keys:
            self.keys[expr] = expr.xreplace({s: self.class_of(s) for s in expr.free_symbols if s in self.made.sources})
        return self.keys[expr]

    def class_of(self, symbol: sp.Symbol) -> sp.Symbol:
        """The diagonal class of a recorded number: one for the initial entries, else its estimate's."""
        source = self.made.sources[symbol]
        if source[0] == "input":
            return self.one
        k = source[1]
        if k not in self.estimate_classes:
            self.estimate_classes[k] = self.form_class(k)
        return self.estimate_classes[k]

    def form_class(self, k: int) -> sp.Symbol:
        """The class of estimate k: its form with its ties (:meth:`tie_map`), its entries read by
        class, Hermite rows without their order and step, and E φ(u)ψ(u) at ρ = 1 as Mean(φψ)."""
        note = self.made.notes.get(k)
        if note is None:
            raise Unreplayable(f"estimate {k}")
        rename = self.tie_map(note)
        F = note.trace.F.xreplace(rename) if rename else note.trace.F
        bound = {}
        for ij, how in note.trace.layout.items():
            if how[0] != "const" and how[1] not in rename and how[1] not in bound:
                bound[how[1]] = self.key(note.cov[ij] if how[2] == 1 else -note.cov[ij])
        F = F.xreplace(bound)
        rows = {h: HermiteRow(h.args[0], h.args[1], sp.Integer(0), sp.Integer(0)) for h in F.atoms(HermiteRow)}
        F = F.xreplace(rows) if rows else F
        means = {}
        for head in F.atoms(MehlerValue):
            A, B, rho = head.args[:3]
            if A.args[0] == B.args[0] and rho == 1:
                product = sp.Lambda(T, A.spec[0] * B.spec[0])
                means[head] = Mean(HermiteRow(A.args[0], product, sp.Integer(0), sp.Integer(0)))
        F = F.xreplace(means) if means else F
        if F not in self.classes:
            self.classes[F] = sp.Symbol(f"diagonal_{len(self.classes)}", real=True)
        return self.classes[F]


def smooth_form(F: sp.Expr, symbols: tuple) -> bool:
    """F is a polynomial in the covariance ``symbols`` once its series heads (values of the Mehler
    series, whose stated errors hold at |ρ| = 1) are taken as numbers: no closed form whose
    replayed value loses digits at a singular covariance (ReLU's arc-cosine at ρ → 1)."""
    heads = F.atoms(MehlerValue, Mean)
    if heads:
        F = F.xreplace({h: sp.Dummy() for h in heads})
    return bool(F.is_polynomial(*symbols))

def multilinear_slopes(expr: sp.Expr) -> dict[sp.Symbol, sp.Expr] | None:
    """{s: ∂P/∂s} of a sum P of terms c·s₁⋯s_m (a number times distinct symbols, each to the first
    power: a covariance entry, a kernel's output), each term's derivative the product of its other
    factors — sympy's derivative, without its machinery; None for any other P."""
    out: dict[sp.Symbol, list[sp.Expr]] = {}
    for term in (expr.args if expr.is_Add else (expr,)):
        factors = term.args if term.is_Mul else (term,)
        symbols = [f for f in factors if f.is_Symbol]
        if len(symbols) + sum(1 for f in factors if f.is_Number) != len(factors) or \
                len(set(symbols)) != len(symbols):
            return None
        for s in symbols:
            out.setdefault(s, []).append(sp.Mul(*[f for f in factors if f is not s]))
    return {s: sp.Add(*parts) for s, parts in out.items()}


def polynomial_like(expr: sp.Expr) -> bool:
    """Only sums, products, powers, numbers and symbols (whose derivatives the tape evaluates
    everywhere the expression is finite)."""
    for node in sp.preorder_traversal(expr):
        if not (node.is_Add or node.is_Mul or node.is_Pow or node.is_Number or node.is_Symbol):
            return False
    return True


def heads_put_back(parts: list[sp.Expr], back: Mapping[sp.Symbol, sp.Expr], outer: list[sp.Expr]) -> sp.Expr:
    """Σ parts with the heads' symbols put back, ``sp.Add(*parts).xreplace(back)``, as :meth:`Builder.slopes`
    makes it: parts[0] = |∂G/∂c_n| and parts[1 + i] = o_i·S_i (unevaluated products), o_i = |∂G/∂H_i|
    over the heads' symbols, ``outer[i]`` = o_i.xreplace(back) (o_i itself where it has no head's
    symbol, as xreplace gives it back), S_i a head's slope (over the heads themselves: no symbol of
    ``back``).  The same expression without walking the slopes S_i:
    xreplace rebuilds a sum as the sum of its terms, each replaced (a term that does not change is
    kept, one that does is rebuilt evaluated: o_i·S_i as sp.Mul(outer[i], S_i)), and a sum is the
    same whatever the order of its terms — where no two terms are equal before or after (else
    sympy's sum would merge them into a multiple first: then xreplace itself)."""
    terms = [parts[0].xreplace(back)]
    for product, o_back in zip(parts[1:], outer):
        o, slope = product.args
        terms.append(product if o_back is o else sp.Mul(o_back, slope))
    if len(set(parts)) < len(parts) or len(set(terms)) < len(terms):
        return sp.Add(*parts).xreplace(back)
    return sp.Add(*terms)


def absolute(expr: sp.Expr) -> sp.Expr:
    """|expr| as the tape evaluates it (never sympy's rewriting through the symbols' assumptions)."""
    return abs(expr) if expr.is_Number else sp.Abs(expr, evaluate=False)


def head_slope(head: sp.Expr, n: sp.Symbol, diff: Callable[[sp.Expr, sp.Symbol], sp.Expr] = sp.diff) -> sp.Expr:
    """A bound on |∂H/∂c_n| for a series head H of a recorded form (:mod:`..symbolic.mehler`):
    Mean(A(a)): MeanCurve(A)/(2a)·|∂a/∂c_n|; MehlerValue(A(a), B(b), ρ): with c = ρ√(ab),
    MehlerSlope/√(ab)·|∂c/∂c_n| + MehlerCurve(A, B, ρ)/(2a)·|∂a/∂c_n| + MehlerCurve(B, A, ρ)/(2b)·|∂b/∂c_n|
    (Price's theorem in the entries a, b, c of the pair's covariance); on the diagonal (the same row
    and ρ ≡ 1: u ≡ v) DiagonalSlope(A)/(2a)·|∂a/∂c_n|, the signed derivative of E φ(√a z)².
    ``diff``: sympy's derivative, or a memo of it (a, b and ρ are the same at every layer)."""
    if isinstance(head, Mean):
        A = head.args[0]
        a = A.args[0]
        da = diff(a, n)
        return 0 if da == 0 else MeanCurve(A) / (2 * absolute(a)) * absolute(da)
    A, B, rho = head.args[:3]
    if not (isinstance(A, HermiteRow) and isinstance(B, HermiteRow)):
        raise Unreplayable(f"{head} is not over packed rows")
    a, b = A.args[0], B.args[0]
    if n not in a.free_symbols and n not in b.free_symbols and n not in rho.free_symbols:
        return sp.Integer(0)                    # H does not read c_n (as below, without building c)
    if A == B and (rho == 1 or rho.doit() == 1 or sp.simplify(rho - 1) == 0):   # u ≡ v: S(a) = E φ(√a z)²
        da = diff(a, n)
        return 0 if da == 0 else DiagonalSlope(A) / (2 * absolute(a)) * absolute(da)
    c = rho * sp.sqrt(a * b)
    out = []
    dc, da, db = diff(c, n), diff(a, n), diff(b, n)
    if dc != 0:
        out.append(MehlerSlope(A, B, rho) / sp.sqrt(absolute(a * b)) * absolute(dc))
    if da != 0:
        out.append(MehlerCurve(A, B, rho) / (2 * absolute(a)) * absolute(da))
    if db != 0:
        out.append(MehlerCurve(B, A, rho) / (2 * absolute(b)) * absolute(db))
    return sp.Add(*out)
