"""Trials in worker processes: how many workers, what each one runs, how its errors come back.

Trial t draws from its own streams (``SeedSequence(seed, spawn_key=(t, var))``), so a
worker that interprets the same :class:`~.plan.RunPlan` computes exactly the values of a
serial run; only the number of workers changes: at most one per trial, and at most as
many as fit in memory side by side.  This module knows nothing of the interpreter: a
:class:`TrialRunner` is handed the function that builds it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, TypeVar

from ..arguments import usage, whole
from ..errors import TPError
from .parallel import cpu_count

E = TypeVar("E")


@dataclass(frozen=True)
class Failure:
    """A TPError of a worker, as a picklable value (:meth:`error` rebuilds it, position included:
    a TPError's position does not survive pickling)."""
    cls: type[TPError]
    message: str
    line: int
    col: int
    file: str
    source: str | None

    @classmethod
    def of(cls, err: TPError) -> Failure:
        return cls(type(err), err.message, err.line, err.col, err.file, err.source)

    def error(self) -> TPError:
        return self.cls(self.message, self.line, self.col, self.file, self.source)


class TrialRunner(Generic[E]):
    """The per-process callable of a parallel run: ``build()`` makes its interpreter once (in
    the worker), then each call runs ``func(interpreter, trial)``; a TPError comes back as a
    :class:`Failure`.  ``func`` and ``build`` must be picklable where workers are spawned."""

    def __init__(self, func: Callable[[E, int], object], build: Callable[[], E]) -> None:
        self.func, self.build = func, build
        self.interpreter: E | None = None

    def __call__(self, trial: int) -> object:
        try:
            if self.interpreter is None:
                self.interpreter = self.build()
            return self.func(self.interpreter, trial)
        except TPError as err:
            return Failure.of(err)

    def factory(self) -> TrialRunner[E]:
        """The per-process factory of :func:`~.parallel.imap_unordered`: this runner itself."""
        return self


def resolve_jobs(jobs, trials: int, peak: int, limit: int, file: str = "<string>") -> int:
    """Worker processes actually used: ``jobs`` (0: one per core), at most one per trial and
    at most as many as fit in memory side by side (per-trial peak × jobs ≤ the limit)."""
    jobs = usage(lambda: whole(jobs, "jobs (0: one per core)", 0), file)
    jobs = cpu_count() if jobs == 0 else jobs
    return max(1, min(jobs, trials, limit // max(peak, 1)))
