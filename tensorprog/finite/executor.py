"""The executor: one program at one width, one trial at a time, with numpy.

Trial t draws every random object from its own stream,
``SeedSequence(seed, spawn_key=(t, var))``, so results are bit-identical for a
given seed whatever the order of execution.  MatMuls on one matrix that are ready
together run as one GEMM; arrays are freed after their last reader.  In blocked mode
(:mod:`.exec_memory`) a matrix is a :class:`~.blocked.BlockedMatrix`, whose random
numbers come from another generator (Philox, keyed by (seed, trial, var)): the same
statistics as a dense run, not the same numbers.

A float32 run draws the float64 random numbers of the same seed and rounds them
(``draw_dtype=float64`` of the samplers; blocked rows likewise), so it equals the
float64 run to float32 precision.  A non-finite value is reported at its statement
with its cause (:mod:`.fn_numpy`): overflow, division by zero or invalid operation,
found by re-evaluating only on that error path.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import BlockedMatrix, default_block_rows, matrix_key
from ..errors import TPNumericalError, TPUsageError
from .memory import available_memory, choose_mode
from .options import _UNSET, _option
from .workers import _Failure, _TrialRunner, resolve_jobs
from .evaluate import OVERFLOW, Cause, eval_fn, first_nonfinite
from .parallel import cpu_count, imap_unordered
from .progress import Progress
from .schedule import Plan, inputs, make_plan


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
        """Choose dense or blocked matrices and check that one trial fits (:mod:`.exec_memory`);
        sets ``memory_limit`` (default: 90% of the available memory) and ``peak``."""
        self.memory_limit = available_memory() * 9 // 10 if limit is None else limit
        blocked, self.peak = choose_mode(self, self.memory_limit, blocked)
        return blocked

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

