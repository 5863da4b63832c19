"""A batch compile replayed as one numpy tape: dataset kernels at the cost of their arithmetic.

A batch compile (:mod:`.batch`) of a kernel template on a few pairs records how each number of
the recurrence was made: an initial covariance entry, or an expectation E f(ℓ) in closed form
F(C) over the covariance C of its linear forms (or by the Mehler series: F then holds its
row operations — the coefficients of one input's variance — and its cell operations, with its
stated error as a formula beside it, :mod:`..symbolic.mehler`), each Cᵢⱼ = Σ_g Σ_h a_ig a_jh Σ_gh a polynomial
in earlier numbers.  Chained, the outputs are one expression DAG in the initial covariance
entries of a pair — a = Σ₀₀ (its first input's variance), b = Σ₁₁ (the second's), c = Σ₀₁;
:class:`Replay` compiles it (and the errors: float rounding ROUNDING·(|E| + max_i Cᵢᵢ) per
expectation, summed over what each output rests on, plus VALUE_ROUNDING·|value|, as in the compile) into
one :class:`..symbolic.grid.GridTape`, where everything that depends on a alone (or b alone) —
an input's variance chain through the layers, most of the error charges — is computed once per
input and only the rest once per pair.

The record is valid for other covariances when the compile would have made the same decisions:
the batch agreed on the numbers it took as constants, the covariance entries it tied (x ≡ y:
Cov = Var) are still equal, and every value is finite.  The tape computes those quantities
too and :meth:`Replay.__call__` checks them entry by entry (the caller compiles the entries
where one fails).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import sympy as sp
from sympy.core.operations import AssocOp

from ..symbolic.grid import GridTape, Workspace
from ..symbolic.mehler import Mean, MehlerValue
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
    """The :class:`Replay` of a batch compile (a ``Compiled`` with a ``batch``), or None if some
    number of it was not made in a replayable way (numerics, laws, symbolic covariances)."""
    batch = compiled.batch
    if batch is None or not batch.replayable or len(batch.covs) != 1:
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


class Builder:
    """The expression DAG of a recorded batch compile (see :func:`record`)."""

    def __init__(self, compiled) -> None:
        self.compiled, self.batch = compiled, compiled.batch
        self.group = next(iter(self.batch.covs))
        self.inputs: dict[tuple[int, int, int], sp.Symbol] = {}
        self.resolved: dict[sp.Symbol, sp.Expr] = {}
        self.estimate: dict[int, tuple[sp.Expr, tuple]] = {}     # k -> (value, error terms)
        self.memo: dict[int, tuple[sp.Basic, sp.Basic]] = {}
        self.constants: list[tuple[sp.Expr, float]] = []
        self.ties: list[tuple[sp.Expr, sp.Expr, int]] = []
        self.absolute: dict[int, sp.Expr] = {}                  # k -> the stated error of a series
        self.smooth = True                                       # every form is smooth_form so far

    def replay(self, names: Sequence[str]) -> Replay:
        for sym, source in self.batch.sources.items():
            self.resolved[sym] = self.source(source)
        for source, value in self.batch.constants:
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
        consts = [(e, v) for e, v in self.constants if not self.settled(e, v)]
        checks = [e for e, _ in consts]
        ties: list[int] = []
        for a, b, sign in self.ties:                  # indices into the checks after the constants
            ties += [len(checks) - len(consts), len(checks) - len(consts) + 1, sign]
            checks += [a, b]
        g = self.group
        a, b, c = (self.input(g, i, j) for i, j in ((0, 0), (1, 1), (0, 1)))
        tape = GridTape.compile(tuple(values + errors + checks), [a], [b], [c])
        return Replay(tape, tuple(names), tuple(v for _, v in consts), tuple(ties),
                      "series" if self.absolute else "exact", self.smooth and bool(self.absolute))

    @staticmethod
    def settled(expr: sp.Expr, value: float) -> bool:
        """A check that holds whatever the data (the expression is that number)."""
        if expr.free_symbols:
            return False
        try:
            number = float(expr)
        except TypeError:           # complex, or a head sympy cannot evaluate (the series' rows)
            raise Unreplayable(f"{expr} is not a real number sympy can evaluate") from None
        if number != value:
            raise Unreplayable(f"{expr} is not {value}")
        return True

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
        note = self.batch.notes.get(k)
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
        scale = largest(diag)
        return value, (sp.Abs(value, evaluate=False), scale)             # × ROUNDING: its error

    def sub(self, expr: sp.Expr, extra: Mapping[sp.Symbol, sp.Expr] | None = None) -> sp.Expr:
        """expr with batch symbols (and ``extra`` symbols) replaced by their expressions, rebuilt
        without evaluation (the DAG is shared, not walked as a tree)."""
        memo = self.memo if extra is None else {}       # by identity (module doc of symbolic.grid)

        def walk(node: sp.Basic) -> sp.Basic:
            if id(node) in memo:
                return memo[id(node)][1]
            if node.is_Symbol:
                if extra is not None and node in extra:
                    out = extra[node]
                elif node in self.resolved:
                    out = self.resolved[node]
                elif node in self.batch.values:
                    raise Unreplayable(f"symbol {node}")
                else:
                    out = node
            elif not node.args:
                out = node
            else:
                args = [walk(a) for a in node.args]
                same = all(a is b for a, b in zip(args, node.args))
                out = node if same else rebuild(node, args)
            memo[id(node)] = (node, out)
            return out
        return walk(expr)



def smooth_form(F: sp.Expr, symbols: tuple) -> bool:
    """F is a polynomial in the covariance ``symbols`` once its series heads (values of the Mehler
    series, whose stated errors hold at |ρ| = 1) are taken as numbers: no closed form whose
    replayed value loses digits at a singular covariance (ReLU's arc-cosine at ρ → 1)."""
    heads = F.atoms(MehlerValue, Mean)
    if heads:
        F = F.xreplace({h: sp.Dummy() for h in heads})
    return bool(F.is_polynomial(*symbols))


def rebuild(node: sp.Basic, args: list) -> sp.Basic:
    """``node``'s head over new ``args``, unevaluated; sums and products without sympy's constructor
    cache (whose lookups compare deep expressions for equality, as costly as walking them as trees)."""
    if isinstance(node, AssocOp):
        return node.func._from_args(args)
    return node.func(*args, evaluate=False)


def largest(items: Sequence[sp.Expr]) -> sp.Expr:
    """Max(items) (0 for none, the item for one), built without sympy's constructor: that one sorts
    its arguments, and sorting counts the nodes of each as a tree, exponential in the depth of a DAG.
    The tape evaluates it as numpy's maximum, as the batch compile's ``largest_variance`` does."""
    if not items:
        return sp.Integer(0)
    if len(items) == 1:
        return items[0]
    return sp.Basic.__new__(sp.Max, *items)
