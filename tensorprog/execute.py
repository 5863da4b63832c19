"""Finite-width execution: run the IR with numpy at width n, over independent trials.

Trial t draws every random object from its own stream,
``SeedSequence(seed, spawn_key=(t, var))``, so results are bit-identical for a
given seed whatever the order of execution — and whatever the number of worker
processes (``jobs``).  MatMuls on one matrix that are ready together run as one
GEMM; arrays are freed after their last reader; memory is estimated before
anything is allocated.

Widths beyond memory: with ``blocked=True``, or automatically when the dense
matrices would not fit (and the run is not absurdly long, see
``AUTO_BLOCKED_MAX_ENTRIES``), every matrix is a :class:`~.blocked.BlockedMatrix`,
regenerated row block by row block from a counter-based generator at each product
and never stored; memory is then O(n · batch) per trial.  Its random numbers come
from another generator (Philox, keyed by (seed, trial, var)): a blocked run has the
same statistics as a dense run, not the same numbers.

A float32 run draws the float64 random numbers of the same seed and rounds them
(``draw_dtype=float64`` of the samplers; blocked rows likewise), so it equals the
float64 run to float32 precision: ``dtype`` is a precision switch only.  A non-finite
value is reported at its statement with its cause (:mod:`.fn_numpy`): overflow,
division by zero or invalid operation, found by re-evaluating only on that error path.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import distributions as D
from . import ir
from .blocked import BLOCKABLE, BlockedMatrix, default_block_rows, matrix_key, workspace_bytes
from .errors import TPError, TPLimitError, TPNumericalError, TPUsageError
from .fn_numpy import OVERFLOW, Cause, eval_fn, first_nonfinite
from .parallel import cpu_count, imap_unordered
from .progress import Progress
from .schedule import Plan, generated_entries, inputs, make_plan, matrix_uses, peak_bytes

#: automatic blocked mode is refused (forcing it is not) above this many generated
#: random entries per trial: ~2^36 is minutes to tens of minutes on 2 cores
AUTO_BLOCKED_MAX_ENTRIES = 1 << 36

_OPTIONS: contextvars.ContextVar[dict] = contextvars.ContextVar("tensorprog_execute_options", default={})
_UNSET = object()


@contextlib.contextmanager
def options(**kwargs):
    """Defaults for ``jobs``, ``blocked`` and ``progress`` of every execution inside the block,
    e.g. for code that executes programs itself (``converge``, ``kernel``)::

        with tensorprog.execute.options(jobs=2, blocked=True):
            converge(program, widths)
    """
    unknown = set(kwargs) - {"jobs", "blocked", "progress"}
    if unknown:
        raise TypeError(f"unknown execution option(s): {', '.join(sorted(unknown))}")
    token = _OPTIONS.set({**_OPTIONS.get(), **kwargs})
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def _option(name: str, value, default):
    return _OPTIONS.get().get(name, default) if value is _UNSET else value


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
    blocked: bool = False               # matrices regenerated block by block (other random numbers)

    def to_dict(self) -> dict:
        return {"width": self.width, "trials": self.trials, "seed": self.seed, "dtype": self.dtype,
                "matrix_dist": self.matrix_dist, "blocked": self.blocked,
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
    """Runs one program at one width; ``run_trial(t)`` returns the outputs of trial t.

    ``blocked``: None chooses (dense if it fits, else blocked), True forces blocked
    matrices, False forces dense ones.  ``threads`` generate a blocked matrix's stripes
    in parallel (default: every core); ``block_rows`` overrides the rows per block."""

    def __init__(self, program: ir.Program, n: int, seed: int, dtype, matrix_dist: str | None,
                 memory_limit: int | None = None, blocked=_UNSET, threads: int | None = None,
                 block_rows: int | None = None) -> None:
        if n < 1:
            raise TPUsageError("the width n must be at least 1", file=program.file)
        if seed < 0:
            raise TPUsageError(f"the seed must be a non-negative integer, not {seed}", file=program.file)
        self.program, self.seed, self.dtype = program, seed, np.dtype(dtype)
        self._n, self._matrix_dist = n, matrix_dist
        if self.dtype not in (np.float64, np.float32):
            raise TPUsageError(f"dtype must be float64 or float32, not {self.dtype}", file=program.file)
        blocked = _option("blocked", blocked, None)
        if blocked not in (None, True, False):
            raise TPUsageError(f"blocked must be True, False or None (automatic), not {blocked!r}",
                               file=program.file)
        self.sizes = {w: max(1, int(round(r * n))) for w, r in program.dims.items()}
        self.specs = self._matrix_specs(matrix_dist)
        self.plan: Plan = make_plan(program)
        self.columns = False
        self.threads = cpu_count() if threads is None else max(1, int(threads))
        self.block_rows = block_rows
        self.on_step: Callable[[int, int, int, str, float], None] | None = None
        self.blocked = self._check_memory(memory_limit, blocked)

    def _matrix_specs(self, family: str | None) -> dict[int, D.DistSpec]:
        specs = {e.var: e.dist for e in self.program.eqns if isinstance(e, ir.Matrix)}
        if family is None:
            return specs
        try:
            return {v: D.with_family(s, family) for v, s in specs.items()}
        except D.DistributionError as err:
            raise TPUsageError(f"--matrix-dist: {err}", file=self.program.file) from None

    def _error(self, cls, message: str, where: ir.Eqn | None):
        line, col = (where.pos.line, where.pos.col) if where else (0, 0)
        return cls(message, line, col, self.program.file, self.program.source)

    def _check_memory(self, limit: int | None, blocked: bool | None) -> bool:
        """Choose dense or blocked matrices and check that one trial fits; sets ``peak``."""
        limit = available_memory() * 9 // 10 if limit is None else limit
        self.memory_limit = limit
        used = [e for e in self.program.eqns if isinstance(e, ir.Matrix) and e.var in self.plan.needed]
        unblockable = [e for e in used if self.specs[e.var].family not in BLOCKABLE]
        if blocked:
            if unblockable:
                e = unblockable[0]
                raise self._error(TPUsageError, f"{self.specs[e.var].family} matrices cannot be generated "
                                  "block by block (every row depends on the whole matrix): run this "
                                  "program dense (without blocked / --blocked)", e)
        else:
            def dense_bytes(e, rows: int, cols: int) -> int:
                return D.matrix_bytes(rows, cols, self.dtype, self.specs[e.var], draw_dtype=np.float64)
            peak, where = peak_bytes(self.program, self.plan, self.sizes, self.dtype.itemsize, dense_bytes)
            if peak <= limit:
                self.peak = peak
                return False
            message = (f"executing at this width needs about {peak / 2**30:.2f} GiB per trial, "
                       f"more than the {limit / 2**30:.2f} GiB available")
            if blocked is False:
                raise self._error(TPLimitError, message + "; use a smaller width, --dtype float32, "
                                  "or blocked matrices (--blocked)", where)
            if unblockable:
                e = unblockable[0]
                raise self._error(TPLimitError, message + f"; {self.specs[e.var].family} matrices "
                                  f"(line {e.pos.line}) cannot be generated block by block, so use "
                                  "a smaller width or --dtype float32", where)
            entries = generated_entries(self.program, self.plan, self.sizes)
            if entries > AUTO_BLOCKED_MAX_ENTRIES:
                raise self._error(TPLimitError, message + f"; with blocked matrices (regenerated block "
                                  f"by block) a trial would draw {entries:.2g} random numbers, too long "
                                  "to start unasked: use a smaller width, or force it with "
                                  "blocked=True (--blocked)", where)
        uses = matrix_uses(self.plan)

        def blocked_bytes(e, rows: int, cols: int) -> int:
            batch = max(uses.get(e.var, [1]))
            return workspace_bytes(rows, cols, self.dtype, self.threads, batch,
                                   self._block_rows(rows, cols))
        peak, where = peak_bytes(self.program, self.plan, self.sizes, self.dtype.itemsize, blocked_bytes)
        if peak > limit:
            raise self._error(TPLimitError, f"executing at this width needs about {peak / 2**30:.2f} GiB "
                              f"per trial even with blocked matrices (the vectors alone), more than the "
                              f"{limit / 2**30:.2f} GiB available; use a smaller width or --dtype float32",
                              where)
        self.peak = peak
        return True

    def _block_rows(self, rows: int, cols: int) -> int:
        return self.block_rows or default_block_rows(rows, cols, self.dtype)

    def matrix(self, trial: int, var: int):
        """The matrix ``var`` of ``trial``: an array, or a BlockedMatrix in blocked mode."""
        e = self.program.eqns[var]
        rows, cols = self.sizes[e.rows], self.sizes[e.cols]
        if self.blocked:
            return BlockedMatrix(matrix_key(self.seed, trial, var), self.specs[var], rows, cols,
                                 self.dtype, self._block_rows(rows, cols), self.threads)
        return D.sample_matrix(self.rng(trial, var), self.specs[var], rows, cols, self.dtype,
                               draw_dtype=np.float64)

    def map_trials(self, func, trials: int, jobs=1, progress=None) -> list:
        """``[func(self, t) for t in range(trials)]``, with ``jobs`` worker processes (0: one per
        core; capped by the trials and by memory: per-trial peak × jobs ≤ the limit).  Each
        worker builds its own Executor (same program, width, seed, mode), so values are
        bit-identical to jobs=1; ``func`` must be picklable where workers are spawned (not
        forked).  ``progress`` as for :func:`execute`."""
        jobs = resolve_jobs(jobs, trials, self.peak, self.memory_limit, self.program.file)
        self.threads = max(1, cpu_count() // jobs)
        bar = progress if isinstance(progress, Progress) else Progress(trials, enabled=progress)
        out: list = [None] * trials
        finished = [False] * trials
        try:
            if jobs == 1:
                self.on_step = bar.step if bar.enabled else None
                for t in range(trials):
                    out[t] = func(self, t)
                    bar.trial_done(t)
                return out
            runner = _TrialRunner(func, self.program, self._n, self.seed, self.dtype, self._matrix_dist,
                                  self.blocked, self.threads, self.block_rows)
            failed: dict[int, _Failure] = {}
            for t, value in imap_unordered(runner.build, range(trials), jobs, self.threads):
                if isinstance(value, _Failure):
                    failed[t] = value
                else:
                    out[t], finished[t] = value, True
                    bar.trial_done(t)
                if failed and all(finished[:min(failed)]):
                    raise failed[min(failed)].error()     # the error jobs=1 would have raised
            return out
        finally:
            self.on_step = None
            bar.close()

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
                                         self.sizes[g.width], self.dtype, draw_dtype=np.float64)
                env.update(zip(g.members, draws[:, :, None] if self.columns else draws))
        if columns:
            env.update({v: np.asarray(a, self.dtype) for v, a in columns.items()})

        def read(var: int):
            if var not in env:           # a matrix, sampled when first needed
                env[var] = self.matrix(trial, var)
            return env[var]

        steps = self.plan.steps
        with np.errstate(all="ignore"):
            for i, step in enumerate(steps):
                if step.is_gemm:
                    w = read(step.eqns[0].matrix)
                    if isinstance(w, BlockedMatrix) and self.on_step is not None:
                        w.on_rows = self._rows_reporter(trial, i, len(steps), step, w)
                    results = self._gemm(step, read)
                else:
                    results = [self._apply(step.eqns[0], read)]
                for e, value in zip(step.eqns, results):
                    self._check_finite(e, value, trial, read)
                    env[e.var] = value
                for e in step.eqns:
                    for v in inputs(e):
                        if self.plan.last_use.get(v, -1) <= i:
                            env.pop(v, None)
        if self.columns:
            return {o.name: np.ravel(read(o.var)) for o in self.program.outputs}
        return {o.name: float(read(o.var)) for o in self.program.outputs}

    def _rows_reporter(self, trial: int, index: int, steps: int, step, w: BlockedMatrix):
        e = step.eqns[0]
        name = self.program.eqns[e.matrix].name
        what = f"{name}{'.T' if e.transposed else ''} @ {len(step.eqns)} vector(s), blocked"
        total = w.rows
        done = [0]

        def on_rows(k: int) -> None:
            done[0] += k
            self.on_step(trial, index, steps, what, done[0] / total)
        return on_rows

    def _gemm(self, step, read) -> list:
        first = step.eqns[0]
        w = read(first.matrix)
        if isinstance(w, BlockedMatrix):
            def product(x):
                return w.matmul(x, first.transposed)
        else:
            w = w.T if first.transposed else w

            def product(x):
                return w @ x
        if len(step.eqns) == 1:
            return [product(read(first.arg))]
        if self.columns:                      # (n, P_k) blocks side by side: still one GEMM
            args = [read(e.arg) for e in step.eqns]
            block = product(np.concatenate(args, axis=1))
            return np.split(block, np.cumsum([a.shape[1] for a in args])[:-1], axis=1)
        block = product(np.stack([read(e.arg) for e in step.eqns], axis=1))
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

    def _check_finite(self, e: ir.Eqn, value, trial: int, read) -> None:
        if np.all(np.isfinite(value)):
            return
        # off the hot path: which operation, raising which floating-point event
        cause = None if isinstance(e, ir.MatMul) else first_nonfinite(e.fn, read)
        if cause is None:          # finite operands: the product, the mean or the cast overflowed
            if isinstance(e, ir.MatMul):
                cause = Cause(OVERFLOW, "the matrix product")
            elif isinstance(e, ir.Moment):
                cause = Cause(OVERFLOW, "the mean")
            else:
                cause = Cause(OVERFLOW, f"the conversion to {self.dtype.name}")
        what = ir.show_eqn(e).split("    #")[0]
        raise TPNumericalError(f"{cause.describe()} first produced here (trial {trial}, {what})",
                               e.pos.line, e.pos.col, self.program.file, self.program.source)


def run_one(ex: "Executor", trial: int):
    """The default work of a trial: its outputs."""
    return ex.run_trial(trial)


class _TrialRunner:
    """The per-process callable of a parallel run: builds its Executor once, then runs
    ``func(executor, trial)``.  Errors come back as values (a TPError's position does not
    survive pickling)."""

    def __init__(self, func, program, n, seed, dtype, matrix_dist, blocked, threads, block_rows) -> None:
        self.func = func
        self.args = (program, n, seed, dtype, matrix_dist)
        self.kwargs = {"memory_limit": 1 << 62, "blocked": blocked, "threads": threads,
                       "block_rows": block_rows}
        self.ex: Executor | None = None

    def __call__(self, trial: int):
        try:
            if self.ex is None:
                self.ex = Executor(*self.args, **self.kwargs)
            return self.func(self.ex, trial)
        except TPError as err:
            return _Failure(type(err), err.message, err.line, err.col, err.file, err.source)

    def build(self):                         # the factory: this object itself, in the worker
        return self


@dataclass(frozen=True)
class _Failure:
    cls: type
    message: str
    line: int
    col: int
    file: str
    source: str | None

    def error(self) -> TPError:
        return self.cls(self.message, self.line, self.col, self.file, self.source)


def resolve_jobs(jobs, trials: int, peak: int, limit: int, file: str = "<string>") -> int:
    """Worker processes actually used: ``jobs`` (0: one per core), at most one per trial and
    at most as many as fit in memory side by side (per-trial peak × jobs ≤ the limit)."""
    if isinstance(jobs, bool) or not isinstance(jobs, (int, np.integer)) or jobs < 0:
        raise TPUsageError(f"jobs must be a non-negative integer (0: one per core), not {jobs!r}", file=file)
    jobs = cpu_count() if jobs == 0 else int(jobs)
    return max(1, min(jobs, trials, limit // max(peak, 1)))


def execute(program: ir.Program, n: int, trials: int = 1, seed: int = 0,
            matrix_dist: str | None = None, dtype=np.float64,
            memory_limit: int | None = None, *, jobs=_UNSET, blocked=_UNSET, progress=_UNSET,
            block_rows: int | None = None) -> ExecResult:
    """Run ``program`` at width ``n`` for ``trials`` independent trials.

    ``jobs`` worker processes run trials side by side (0: one per core; capped by the
    trials and by memory); the values are bit-identical to ``jobs=1``.  ``blocked``:
    None (default) uses blocked matrices only when the dense ones do not fit, True forces
    them, False forbids them.  ``progress``: None shows progress on stderr when it is a
    terminal, True always, False never (or a :class:`~.progress.Progress`).  Defaults for
    the three come from :func:`options`."""
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise TPUsageError("trials must be at least 1", file=program.file)
    jobs = _option("jobs", jobs, 1)
    progress = _option("progress", progress, None)
    ex = Executor(program, n, seed, dtype, matrix_dist, memory_limit, blocked=blocked,
                  block_rows=block_rows)
    per_trial = ex.map_trials(run_one, trials, jobs, progress)
    result = ExecResult(n, trials, seed, dtype=np.dtype(dtype).name, matrix_dist=matrix_dist,
                        blocked=ex.blocked)
    for o in program.outputs:
        values = [r[o.name] for r in per_trial]
        std = float(np.std(values, ddof=1)) if trials > 1 else 0.0
        result.outputs[o.name] = OutputStats(float(np.mean(values)), std, values)
    return result
