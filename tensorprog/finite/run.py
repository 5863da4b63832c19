"""Finite-width execution: run the IR at width n, over independent trials, with numpy or another array backend.

Trial t draws every random object from its own stream,
``SeedSequence(seed, spawn_key=(t, var))``, so results are bit-identical for a
given seed whatever the order of execution — and whatever the number of worker
processes (``jobs``).  MatMuls on one matrix that are ready together run as one
GEMM; arrays are freed after their last reader; memory is estimated before
anything is allocated.

Widths beyond memory: with ``blocked=True``, or automatically when the dense
matrices would not fit (and the run is not absurdly long, see
``AUTO_BLOCKED_MAX_ENTRIES``), every matrix is a :class:`~tensorprog.distributions.blocked.BlockedMatrix`,
regenerated row block by row block from a counter-based generator at each product
and never stored; memory is then O(n · batch) per trial.  Its random numbers come
from another generator (Philox, keyed by (seed, trial, var)): a blocked run has the
same statistics as a dense run, not the same numbers.

A float32 run draws the float64 random numbers of the same seed and rounds them
(``draw_dtype=float64`` of the samplers; blocked rows likewise), so it equals the
float64 run to float32 precision: ``dtype`` is a precision switch only.  A non-finite
value is reported at its statement with its cause (:mod:`.evaluate`): overflow,
division by zero or invalid operation, found by re-evaluating only on that error path.

``backend`` (numpy, torch, jax, cupy) and ``device`` (cpu, cuda) choose the array library
(:mod:`.backend`): other backends draw other random numbers from the same laws (a seed
reproduces on one backend and device), and run their trials in this process (``jobs`` is 1:
the library or the device is parallel itself).

The pipeline, one module per stage; this one is the entry (:func:`execute`,
:func:`map_trials`, :class:`ExecResult`) and re-exports the names of the others:

* :mod:`.exec_options`: :class:`ExecOptions` and :func:`options` (``jobs``, ``blocked``,
  ``progress``, ``block_rows``: explicit > ``options`` block > default);
* :mod:`.plan`: :func:`~.plan.run_plan`, the :class:`RunPlan` decided before a trial runs (with
  :mod:`.schedule` and :mod:`.memory`);
* :mod:`.executor`: :class:`Executor`, the interpreter of a plan, trial by trial (the hot loop);
* :mod:`.workers` and :mod:`.parallel`: trials in worker processes; :mod:`.cluster`: trials
  on a Dask cluster (``scheduler``); :mod:`.progress`: the bars.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, TypeVar

import numpy as np

from .. import ir
from ..arguments import usage, whole
from ..npz import save_npz
from .backend import NUMPY
from .cluster import check_scheduler, map_items
from .exec_options import UNSET, resolve
from .executor import Executor
from .parallel import cpu_count, imap_unordered
from .plan import RunPlan, RunSpec, run_plan
from .progress import ProgressBar
from .workers import Failure, TrialRunner, resolve_jobs

__all__ = ["execute", "map_trials", "run_one", "ExecResult", "OutputStats"]

T = TypeVar("T")


@dataclass
class OutputStats:
    """One output over the trials: mean, standard deviation (ddof=1) and each trial's value (for an
    array of outputs, ``out K[i, j]``: arrays, NaN where no ``out`` set an entry)."""
    mean: float | np.ndarray
    std: float | np.ndarray
    values: list

    @property
    def sem(self) -> float:
        return self.std / np.sqrt(len(self.values)) if len(self.values) > 1 else float("nan")


@dataclass
class ExecResult:
    width: int
    trials: int
    seed: int
    outputs: dict[str, OutputStats] = field(default_factory=dict)    # arrays of outputs as arrays
    dtype: str = "float64"
    matrix_dist: str | None = None
    blocked: bool = False               # matrices regenerated block by block (other random numbers)
    conditional: bool = False           # products drawn given the earlier ones (other random numbers)
    backend: str = "numpy"              # the array library (other random numbers than numpy's)
    device: str = "cpu"
    entries: dict[str, OutputStats] = field(default_factory=dict)    # every scalar output, K[1, 2] alone

    def __post_init__(self) -> None:
        if not self.entries:
            self.entries = self.outputs

    def to_dict(self) -> dict:
        return {"width": self.width, "trials": self.trials, "seed": self.seed, "dtype": self.dtype,
                "matrix_dist": self.matrix_dist, "blocked": self.blocked, "backend": self.backend,
                "device": self.device, "conditional": self.conditional,
                "outputs": {k: {"mean": ir.jsonable(o.mean), "std": ir.jsonable(o.std),
                                "values": [ir.jsonable(v) for v in o.values]}
                            for k, o in self.outputs.items()}}

    def save(self, path: str) -> None:
        """An ``.npz`` of every output's mean (arrays of outputs as arrays) and its ``NAME_std``."""
        save_npz(path, ir.npz_arrays(self.outputs, "std"))

    def _repr_html_(self) -> str:
        """Jupyter: a table of mean, std and SE per output."""
        from .display import exec_html
        return exec_html(self)


def run_one(ex: Executor, trial: int) -> dict[str, object]:
    """The default work of a trial: its outputs."""
    return ex.run_trial(trial)


def execute(program: ir.Program, n: int, trials: int = 1, seed: int = 0,
            matrix_dist: str | None = None, dtype=np.float64,
            memory_limit: int | None = None, *, jobs=UNSET, blocked=UNSET, progress=UNSET,
            block_rows=UNSET, backend=UNSET, device=UNSET, scheduler=UNSET, conditional=UNSET) -> ExecResult:
    """Run ``program`` at width ``n`` for ``trials`` independent trials.

    ``jobs`` worker processes run trials side by side (0: one per core; capped by the
    trials and by memory); the values are bit-identical to ``jobs=1``.  ``blocked``:
    None (default) uses blocked matrices only when the dense ones do not fit, True forces
    them, False forbids them.  ``progress``: None shows a bar on stderr when it is a
    terminal, True always, False never.  ``backend`` ('numpy', 'torch', 'jax', 'cupy') and
    ``device`` ('cpu', 'cuda'): the array library and where it runs (:mod:`.backend`; a
    library or device missing is a TPUsageError).  ``scheduler``: a Dask scheduler address,
    ``"local"`` or a ``distributed.Client`` runs the trials there, one task each, bit-identical
    to the local run (:mod:`.cluster`).  ``conditional``: True draws every product from its law
    given the earlier ones instead of storing the matrices (exact in law for normal, mvt and
    orthogonal matrices, memory O(n·k): :mod:`tensorprog.distributions.conditional`).  Defaults come
    from :func:`options`."""
    usage(lambda: whole(trials, "trials", 1), program.file)
    opts = resolve(jobs=jobs, blocked=blocked, progress=progress, block_rows=block_rows, backend=backend,
                   device=device, scheduler=scheduler, conditional=conditional)
    plan = run_plan(program, RunSpec.checked(program.file, n, seed, dtype, matrix_dist, memory_limit), opts)
    per_trial = map_trials(plan, run_one, trials, opts.jobs, opts.progress, scheduler=opts.scheduler)
    result = ExecResult(n, trials, seed, dtype=plan.dtype.name, matrix_dist=matrix_dist,
                        blocked=plan.blocked, backend=plan.backend, device=plan.device,
                        conditional=plan.conditional)
    for o in program.outputs:
        values = [r[o.name] for r in per_trial]
        std = float(np.std(values, ddof=1)) if trials > 1 else 0.0
        result.entries[o.name] = OutputStats(float(np.mean(values)), std, values)
    result.outputs = group_stats(program.outputs, result.entries)
    return result


def group_stats(outputs: tuple[ir.Output, ...], flat: dict[str, OutputStats]) -> dict[str, OutputStats]:
    """The reported outputs: an array of outputs (``out K[i, j]``) as one OutputStats of arrays."""
    result: dict[str, OutputStats] = {}
    for item in ir.output_table(outputs):
        if isinstance(item, ir.Output):
            result[item.name] = flat[item.name]
            continue
        mean, std = np.full(item.shape, np.nan), np.full(item.shape, np.nan)
        trials = len(flat[item.entries[0].name].values)
        values = [np.full(item.shape, np.nan) for _ in range(trials)]
        for o in item.entries:
            at, stats = item.position(o), flat[o.name]
            mean[at], std[at] = stats.mean, stats.std
            for t, v in enumerate(stats.values):
                values[t][at] = v
        result[item.name] = OutputStats(mean, std, values)
    return result


def map_trials(plan: RunPlan, func: Callable[[Executor, int], T], trials: int, jobs=1,
               progress: bool | None = None, desc: str = "trials", scheduler: object = None) -> list[T]:
    """``[func(Executor(plan), t) for t in range(trials)]``, with ``jobs`` worker processes (0:
    one per core; capped by the trials and by memory: per-trial peak × jobs ≤ the limit).
    Every worker interprets the same plan, so values are bit-identical to jobs=1; ``func``
    must be picklable where workers are spawned (not forked).  ``progress`` as for
    :func:`execute` (a bar named ``desc``); the first failing trial's error is raised.  On an
    array backend other than numpy the trials run in this process (one job).  With a
    ``scheduler`` (:mod:`.cluster`) they run on that Dask cluster instead, one task per trial."""
    if scheduler is not None:
        check_scheduler(scheduler)
        with ProgressBar(trials, progress, desc) as bar:
            return map_items(scheduler, functools.partial(Executor, plan), func, list(range(trials)),
                             bar.advance)
    jobs = resolve_jobs(jobs, trials, plan.peak, plan.memory_limit, plan.program.file)
    if plan.backend != NUMPY:
        jobs = 1
    plan = dataclasses.replace(plan, threads=max(1, cpu_count() // jobs))
    with ProgressBar(trials, progress, desc) as bar:
        if jobs == 1:
            ex = Executor(plan, on_step=bar.step if bar.enabled else None)
            out = []
            for t in range(trials):
                out.append(func(ex, t))
                bar.advance()
            return out
        return _in_workers(plan, func, trials, jobs, bar)


def _in_workers(plan: RunPlan, func: Callable[[Executor, int], T], trials: int, jobs: int,
                bar: ProgressBar) -> list[T]:
    """:func:`map_trials` in ``jobs`` worker processes; the error is the one jobs=1 raises
    (that of the first failing trial, once every earlier trial is done)."""
    runner = TrialRunner(func, functools.partial(Executor, plan))
    out: list = [None] * trials
    finished = [False] * trials
    failed: dict[int, Failure] = {}
    for t, value in imap_unordered(runner.factory, range(trials), jobs, plan.threads):
        if isinstance(value, Failure):
            failed[t] = value
        else:
            out[t], finished[t] = value, True
            bar.advance()
        if failed and all(finished[:min(failed)]):
            raise failed[min(failed)].error()
    return out
