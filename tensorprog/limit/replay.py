"""A batch compile replayed as one numpy tape: dataset kernels at the cost of their arithmetic.

A batch compile (:mod:`.batch`) of a kernel template on a few pairs records how each number of
the recurrence was made: an initial covariance entry, or an expectation E f(ℓ) in closed form
F(C) over the covariance C of its linear forms, each Cᵢⱼ = Σ_g Σ_h a_ig a_jh Σ_gh a polynomial
in earlier numbers.  Chained, the outputs are one expression DAG in the initial covariance
entries (s11, s12, s22) of a pair; :class:`Replay` compiles it (and the errors: float rounding
ROUNDING·(|E| + max_i Cᵢᵢ) per expectation, summed over what each output rests on, plus
4e-16·|value|, as in the compile) into a single :class:`..symbolic.evaluate.Tape` and evaluates
it on any covariances, tile by tile, in threads (numpy releases the GIL).

The record is valid for other covariances when the compile would have made the same decisions:
the batch agreed on the numbers it took as constants, the covariance entries it tied (x ≡ y:
Cov = Var) are still equal, and every value is finite.  The tape computes those quantities
too and :meth:`Replay.run` checks them; it returns None when one fails (the caller then
compiles the batch itself).
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np
import sympy as sp

from ..symbolic.evaluate import Tape, compile_exprs
from .ledger import ROUNDING

#: pairs per tile of a replay (each tile is one pass of the tape over arrays of this length)
TILE = 1 << 15


@dataclass(frozen=True)
class Replay:
    """The outputs' values and errors as one tape of the initial covariance entries ``inputs``
    ((g, i, j), i ≤ j), with the checks that keep the record valid (module doc)."""
    tape: Tape
    inputs: tuple[tuple[int, int, int], ...]
    names: tuple[str, ...]
    constants: tuple[float, ...]            # tape outputs 2·len(names) + k must equal these
    ties: tuple[int, ...]                   # then (a, b, sign) triples: a = sign·b to 1e-12 (relative)

    def run(self, entries: Callable[[tuple[int, int, int], slice], np.ndarray], P: int,
            out: tuple[dict, dict, np.ndarray] | None = None, tile: int = TILE,
            threads: int | None = None) -> tuple[dict, dict] | None:
        """({name: values (P,)}, {name: errors (P,)}) for P items whose initial covariance entries
        (g, i, j), i ≤ j, are ``entries(key, slice of items)`` (made tile by tile); None when the
        record does not hold for them.  ``out`` = (values, errors, where): write item p into
        values[name][where[p]] instead (and return them)."""
        if out is None:
            values = {n: np.empty(P) for n in self.names}
            errors = {n: np.empty(P) for n in self.names}
            where = None
        else:
            values, errors, where = out
        starts = range(0, P, tile)

        def one(start: int) -> bool:
            part = slice(start, min(start + tile, P))
            got = self.tape(*[entries(key, part) for key in self.inputs])
            dest = part if where is None else where[part]
            k = len(self.names)
            for n, name in enumerate(self.names):
                values[name][dest] = got[n]
                errors[name][dest] = got[k + n]
            return self.holds(got[:2 * k], got[2 * k:])

        workers = threads or min(os.cpu_count() or 1, max(1, len(starts)))
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                ok = all(pool.map(one, starts))
        else:
            ok = all(one(s) for s in starts)
        return (values, errors) if ok else None

    def holds(self, results: Sequence[np.ndarray], checks: Sequence[np.ndarray]) -> bool:
        """Every value and error finite, every constant the same, every tie still equal."""
        if not all(np.all(np.isfinite(r)) for r in results):
            return False
        if not all(np.all(c == v) for c, v in zip(checks, self.constants)):
            return False
        rest = checks[len(self.constants):]
        for t in range(0, len(self.ties), 3):
            a, b, sign = rest[self.ties[t]], rest[self.ties[t + 1]], self.ties[t + 2]
            if not np.all(np.abs(a - sign * b) <= 1e-12 * np.abs(sign * b)):
                return False
        return True


def record(compiled, names: Sequence[str]) -> Replay | None:
    """The :class:`Replay` of a batch compile (a ``Compiled`` with a ``batch``), or None if some
    number of it was not made in a replayable way (numerics, laws, symbolic covariances)."""
    batch = compiled.batch
    if batch is None or not batch.replayable:
        return None
    builder = Builder(compiled)
    try:
        return builder.replay(names)
    except Unreplayable:
        return None


class Unreplayable(Exception):
    """A number of the compile that the record does not describe."""


class Builder:
    """The expression DAG of a recorded batch compile (see :func:`record`)."""

    def __init__(self, compiled) -> None:
        self.compiled, self.batch = compiled, compiled.batch
        self.inputs: dict[tuple[int, int, int], sp.Symbol] = {}
        self.resolved: dict[sp.Symbol, sp.Expr] = {}
        self.estimate: dict[int, tuple[sp.Expr, sp.Expr]] = {}     # k -> (value, error)
        self.memo: dict[sp.Basic, sp.Basic] = {}
        self.constants: list[tuple[sp.Expr, float]] = []
        self.ties: list[tuple[sp.Expr, sp.Expr, int]] = []

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
            parts = [self.source(("estimate", k), error=True) for k in sorted(self.compiled.deps[var])]
            charged = sp.Float(ROUNDING) * sp.Add(*parts, evaluate=False) if parts else sp.Integer(0)
            values.append(value)
            errors.append(sp.Add(charged, sp.Float(4e-16) * sp.Abs(value, evaluate=False), evaluate=False))
        consts = [(e, v) for e, v in self.constants if not self.settled(e, v)]
        checks = [e for e, _ in consts]
        ties: list[int] = []
        for a, b, sign in self.ties:                  # indices into the checks after the constants
            ties += [len(checks) - len(consts), len(checks) - len(consts) + 1, sign]
            checks += [a, b]
        symbols = tuple(self.inputs.values())
        tape = compile_exprs(tuple(values + errors + checks), symbols)
        return Replay(tape, tuple(self.inputs), tuple(names), tuple(v for _, v in consts), tuple(ties))

    @staticmethod
    def settled(expr: sp.Expr, value: float) -> bool:
        """A check that holds whatever the data (the expression is that number)."""
        if expr.free_symbols:
            return False
        if float(expr) != value:
            raise Unreplayable(f"{expr} is not {value}")
        return True

    def source(self, source: tuple, error: bool = False) -> sp.Expr:
        """The expression of a recorded number: an input entry, or an estimate's value (error)."""
        if source[0] == "input":
            _, g, i, j = source
            key = (g, min(i, j), max(i, j))
            if key not in self.inputs:
                self.inputs[key] = sp.Symbol(f"s_{key[0]}_{key[1]}_{key[2]}", real=True)
            return self.inputs[key]
        k = source[1]
        if k not in self.estimate:
            self.estimate[k] = self.expectation(k)
        return self.estimate[k][1 if error else 0]

    def expectation(self, k: int) -> tuple[sp.Expr, sp.Expr]:
        """(value, charge) of estimate k: F over its forms' covariance, and |F| + max_i |Cᵢᵢ|, its
        error in units of ROUNDING (the error of an output is ROUNDING·Σ charges + 4e-16·|value|)."""
        note = self.batch.notes.get(k)
        est = self.compiled.estimates[k]
        if note is None or est.method != "exact":
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
        value = self.sub(note.trace.F, names)
        diag = [sp.Abs(cov[(i, i)], evaluate=False) for i in range(note.size)]
        scale = largest(diag)
        return value, sp.Add(sp.Abs(value, evaluate=False), scale, evaluate=False)   # × ROUNDING: its error

    def sub(self, expr: sp.Expr, extra: Mapping[sp.Symbol, sp.Expr] | None = None) -> sp.Expr:
        """expr with batch symbols (and ``extra`` symbols) replaced by their expressions, rebuilt
        without evaluation (the DAG is shared, not walked as a tree)."""
        memo = self.memo if extra is None else {}

        def walk(node: sp.Basic) -> sp.Basic:
            if node in memo:
                return memo[node]
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
                out = node.func(*args, evaluate=False) if args != list(node.args) else node
            memo[node] = out
            return out
        return walk(expr)



def largest(items: Sequence[sp.Expr]) -> sp.Expr:
    """Max(items) (0 for none, the item for one), built without sympy's constructor: that one sorts
    its arguments, and sorting counts the nodes of each as a tree, exponential in the depth of a DAG.
    The tape evaluates it as numpy's maximum, as the batch compile's ``largest_variance`` does."""
    if not items:
        return sp.Integer(0)
    if len(items) == 1:
        return items[0]
    return sp.Basic.__new__(sp.Max, *items)
