"""Trials in worker processes: how many workers, what each one runs, how its errors come back.

Trial t draws from its own streams (``SeedSequence(seed, spawn_key=(t, var))``), so a
worker that builds its own :class:`~.executor.Executor` (same program, width, seed and
mode) computes exactly the values of a serial run; only the number of workers changes:
at most one per trial, and at most as many as fit in memory side by side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..errors import TPError, TPUsageError
from .parallel import cpu_count

if TYPE_CHECKING:
    from .executor import Executor


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
                from .executor import Executor  # executor imports this module
                self.ex = Executor(*self.args, **self.kwargs)
            return self.func(self.ex, trial)
        except TPError as err:
            return _Failure(type(err), err.message, err.line, err.col, err.file, err.source)

    def build(self):                         # the factory: this object itself, in the worker
        return self


@dataclass(frozen=True)
class _Failure:
    """A TPError of a worker, as a picklable value (:meth:`error` rebuilds it, position included)."""
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
