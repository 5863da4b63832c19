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

The implementation is split by responsibility; this module is the public entry
(:func:`execute`, :class:`ExecResult`) and re-exports the names of the others:

* :mod:`.executor`: :class:`Executor`, one program at one width, trial by trial (the hot loop);
* :mod:`.exec_memory`: dense or blocked, the per-trial peak (:func:`available_memory`,
  ``AUTO_BLOCKED_MAX_ENTRIES``);
* :mod:`.exec_workers`: trials in worker processes (:func:`resolve_jobs`, errors as values);
* :mod:`.exec_options`: :func:`options`, the defaults of ``jobs``, ``blocked`` and ``progress``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import ir
from ..errors import TPUsageError
from .memory import AUTO_BLOCKED_MAX_ENTRIES, available_memory
from .options import _UNSET, _option, options
from .workers import resolve_jobs
from .executor import Executor
from .evaluate import eval_fn

__all__ = ["execute", "ExecResult", "OutputStats", "Executor", "options", "run_one", "resolve_jobs",
           "available_memory", "AUTO_BLOCKED_MAX_ENTRIES", "eval_fn"]


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


def run_one(ex: "Executor", trial: int):
    """The default work of a trial: its outputs."""
    return ex.run_trial(trial)


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
