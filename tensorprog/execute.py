"""Finite-width execution: run the IR with numpy at width n, over independent trials.

Trial t draws every random object from its own stream,
``SeedSequence(seed, spawn_key=(t, var))``, so results are bit-identical for a
given seed whatever the order of execution.  MatMuls on one matrix that are ready
together run as one GEMM; arrays are freed after their last reader; memory is
estimated before anything is allocated.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import distributions as D
from . import ir
from .errors import TPLimitError, TPNumericalError, TPUsageError
from .nonlin import BUILTINS
from .schedule import Plan, inputs, make_plan, peak_bytes

_OPS: dict[str, Callable] = {"+": np.add, "-": np.subtract, "*": np.multiply,
                             "/": np.divide, "**": np.power}


def eval_fn(fn: ir.Fn, read: Callable[[int], object]):
    """The value of a function tree, coordinatewise over numpy arrays."""
    if isinstance(fn, ir.Ref):
        return read(fn.var)
    if isinstance(fn, ir.Const):
        return fn.value
    if isinstance(fn, ir.Neg):
        return -eval_fn(fn.operand, read)
    if isinstance(fn, ir.Call):
        return BUILTINS[fn.name].numpy(*(eval_fn(a, read) for a in fn.args))
    return _OPS[fn.op](eval_fn(fn.lhs, read), eval_fn(fn.rhs, read))


@dataclass
class OutputStats:
    """One output over the trials: mean, standard deviation (ddof=1) and each trial's value."""
    mean: float
    std: float
    values: list[float]

    @property
    def sem(self) -> float:
        return self.std / np.sqrt(len(self.values)) if len(self.values) > 1 else float("nan")


@dataclass
class ExecResult:
    width: int
    trials: int
    seed: int
    outputs: dict[str, OutputStats] = field(default_factory=dict)
    dtype: str = "float64"
    matrix_dist: str | None = None

    def to_dict(self) -> dict:
        return {"width": self.width, "trials": self.trials, "seed": self.seed, "dtype": self.dtype,
                "matrix_dist": self.matrix_dist,
                "outputs": {k: {"mean": o.mean, "std": o.std, "values": o.values}
                            for k, o in self.outputs.items()}}


def available_memory() -> int:
    """Bytes the machine can still give (MemAvailable), or a conservative guess."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2


class Executor:
    """Runs one program at one width; ``run_trial(t)`` returns the outputs of trial t."""

    def __init__(self, program: ir.Program, n: int, seed: int, dtype, matrix_dist: str | None,
                 memory_limit: int | None = None) -> None:
        if n < 1:
            raise TPUsageError("the width n must be at least 1", file=program.file)
        if seed < 0:
            raise TPUsageError(f"the seed must be a non-negative integer, not {seed}", file=program.file)
        self.program, self.seed, self.dtype = program, seed, np.dtype(dtype)
        if self.dtype not in (np.float64, np.float32):
            raise TPUsageError(f"dtype must be float64 or float32, not {self.dtype}", file=program.file)
        self.sizes = {w: max(1, int(round(r * n))) for w, r in program.dims.items()}
        self.specs = self._matrix_specs(matrix_dist)
        self.plan: Plan = make_plan(program)
        self.columns = False
        self._check_memory(memory_limit)

    def _matrix_specs(self, family: str | None) -> dict[int, D.DistSpec]:
        specs = {e.var: e.dist for e in self.program.eqns if isinstance(e, ir.Matrix)}
        if family is None:
            return specs
        try:
            return {v: D.with_family(s, family) for v, s in specs.items()}
        except D.DistributionError as err:
            raise TPUsageError(f"--matrix-dist: {err}", file=self.program.file) from None

    def _check_memory(self, limit: int | None) -> None:
        def matrix_bytes(rows: int, cols: int, spec) -> int:
            return D.matrix_bytes(rows, cols, self.dtype, spec)
        peak, where = peak_bytes(self.program, self.plan, self.sizes, self.dtype.itemsize, matrix_bytes)
        limit = available_memory() * 9 // 10 if limit is None else limit
        if peak > limit:
            line, col = (where.pos.line, where.pos.col) if where else (0, 0)
            raise TPLimitError(f"executing at this width needs about {peak / 2**30:.2f} GiB per trial, "
                               f"more than the {limit / 2**30:.2f} GiB available; use a smaller width "
                               "or --dtype float32", line, col, self.program.file, self.program.source)
        self.peak = peak

    def rng(self, trial: int, var: int) -> np.random.Generator:
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(trial, var)))

    def run_trial(self, trial: int, columns: dict[int, np.ndarray] | None = None) -> dict[str, object]:
        """One trial's outputs.  With ``columns`` {initial vector: array (n, P)} the program runs
        on P inputs at once (every vector is an (n, P) array, every scalar a (P,) array): the
        same matrices for all P, as for the pairs of a dataset kernel."""
        env: dict[int, object] = {}
        eqns = self.program.eqns
        self.columns = columns is not None
        for g in self.program.groups:
            if any(v in self.plan.needed for v in g.members):
                draws = D.sample_vectors(self.rng(trial, g.members[0]), g.dist, len(g.members),
                                         self.sizes[g.width], self.dtype)
                env.update(zip(g.members, draws[:, :, None] if self.columns else draws))
        if columns:
            env.update({v: np.asarray(a, self.dtype) for v, a in columns.items()})

        def read(var: int):
            if var not in env:           # a matrix, sampled when first needed
                e = eqns[var]
                env[var] = D.sample_matrix(self.rng(trial, var), self.specs[var],
                                           self.sizes[e.rows], self.sizes[e.cols], self.dtype)
            return env[var]

        with np.errstate(all="ignore"):
            for i, step in enumerate(self.plan.steps):
                results = self._gemm(step, read) if step.is_gemm else [self._apply(step.eqns[0], read)]
                for e, value in zip(step.eqns, results):
                    self._check_finite(e, value, trial)
                    env[e.var] = value
                for e in step.eqns:
                    for v in inputs(e):
                        if self.plan.last_use.get(v, -1) <= i:
                            env.pop(v, None)
        if self.columns:
            return {o.name: np.ravel(read(o.var)) for o in self.program.outputs}
        return {o.name: float(read(o.var)) for o in self.program.outputs}

    def _gemm(self, step, read) -> list:
        first = step.eqns[0]
        w = read(first.matrix)
        w = w.T if first.transposed else w
        if len(step.eqns) == 1:
            return [w @ read(first.arg)]
        if self.columns:                      # (n, P_k) blocks side by side: still one GEMM
            args = [read(e.arg) for e in step.eqns]
            block = w @ np.concatenate(args, axis=1)
            return np.split(block, np.cumsum([a.shape[1] for a in args])[:-1], axis=1)
        block = w @ np.stack([read(e.arg) for e in step.eqns], axis=1)
        return list(block.T)

    def _apply(self, e: ir.Eqn, read):
        value = eval_fn(e.fn, read)
        if isinstance(e, ir.Nonlin):
            size = self.sizes[e.width]
            if self.columns and np.ndim(value) < 2:          # a function of scalars only
                return np.broadcast_to(np.asarray(value, self.dtype), (size, np.size(value))).copy()
            return np.broadcast_to(np.asarray(value, self.dtype), (size,)).copy() \
                if np.ndim(value) == 0 else np.asarray(value, self.dtype)
        if isinstance(e, ir.Moment):
            return np.mean(value, axis=0) if self.columns else float(np.mean(value))
        return value if self.columns else float(value)

    def _check_finite(self, e: ir.Eqn, value, trial: int) -> None:
        if np.all(np.isfinite(value)):
            return
        kind = "NaN" if np.any(np.isnan(value)) else "inf (overflow)"
        what = ir.show_eqn(e).split("    #")[0]
        raise TPNumericalError(f"{kind} first produced here (trial {trial}, {what})",
                               e.pos.line, e.pos.col, self.program.file, self.program.source)


def execute(program: ir.Program, n: int, trials: int = 1, seed: int = 0,
            matrix_dist: str | None = None, dtype=np.float64,
            memory_limit: int | None = None) -> ExecResult:
    """Run ``program`` at width ``n`` for ``trials`` independent trials."""
    if trials < 1:
        raise TPUsageError("trials must be at least 1", file=program.file)
    ex = Executor(program, n, seed, dtype, matrix_dist, memory_limit)
    per_trial = [ex.run_trial(t) for t in range(trials)]
    result = ExecResult(n, trials, seed, dtype=np.dtype(dtype).name, matrix_dist=matrix_dist)
    for o in program.outputs:
        values = [r[o.name] for r in per_trial]
        std = float(np.std(values, ddof=1)) if trials > 1 else 0.0
        result.outputs[o.name] = OutputStats(float(np.mean(values)), std, values)
    return result
