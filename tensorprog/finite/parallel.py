"""Running independent trials in worker processes, with BLAS threads limited per worker.

Every trial draws from its own seeded streams, so a trial's result does not depend
on the process that ran it: ``jobs=J`` returns bit-identical values to ``jobs=1``.
Workers are forked where the platform can (Linux: no re-import of ``__main__``,
so a script without an ``if __name__ == "__main__"`` guard still works) and
spawned elsewhere; each limits its BLAS to ``threads`` threads so that
jobs × threads does not exceed the cores (``threadpoolctl`` for the libraries already
loaded, plus the usual environment variables for libraries loaded later).
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator


_ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
             "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def cpu_count() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def blas_threads() -> int | None:
    """The thread count of the (first) loaded BLAS, or None if none is found."""
    from threadpoolctl import threadpool_info          # imported when a run is planned, not at start-up
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            return int(pool["num_threads"])
    return None


def set_blas_threads(threads: int) -> None:
    """Limit the thread pools (BLAS, OpenMP) of this process to ``threads``, for good (best effort:
    a library threadpoolctl cannot drive keeps its threads, and the run goes on)."""
    for var in _ENV_VARS:
        os.environ[var] = str(threads)
    from threadpoolctl import threadpool_limits
    try:
        threadpool_limits(limits=int(threads))
    except Exception:            # an unknown library layout: the environment variables still hold
        pass


def _restore_env(saved: dict[str, str | None]) -> None:
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


@contextlib.contextmanager
def thread_env(threads: int) -> Iterator[None]:
    """Within the block, the thread-count environment variables say ``threads`` (restored afterwards)."""
    env = {v: os.environ.get(v) for v in _ENV_VARS}
    for var in _ENV_VARS:
        os.environ[var] = str(threads)
    try:
        yield
    finally:
        _restore_env(env)


@contextlib.contextmanager
def limited_blas(threads: int) -> Iterator[None]:
    """Within the block, BLAS uses at most ``threads`` threads (restored afterwards)."""
    from threadpoolctl import threadpool_limits
    with thread_env(threads), threadpool_limits(limits=int(threads)):
        yield


# ---- the worker side: one object per process, built once by the initializer
_STATE: dict = {}


def _init(factory: Callable[[], object], threads: int) -> None:
    set_blas_threads(threads)
    _STATE["runner"] = factory()


def _call(item):
    return _STATE["runner"](item)


def _context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def imap_unordered(factory: Callable[[], Callable], items: Iterable, jobs: int,
                   threads: int = 1) -> Iterator[tuple[object, object]]:
    """(item, factory()(item)) for every item, computed in ``jobs`` worker processes, in the
    order they finish.  ``factory`` (picklable for spawn) builds the per-process callable
    once; each worker's BLAS is limited to ``threads`` threads."""
    items = list(items)
    pool = None
    try:
        with thread_env(threads):           # spawned workers read them before importing numpy
            pool = ProcessPoolExecutor(max_workers=jobs, mp_context=_context(),
                                       initializer=_init, initargs=(factory, threads))
            pending = {pool.submit(_call, item): item for item in items}   # starts the workers
    finally:
        if pool is not None and sys.exc_info()[0] is not None:
            pool.shutdown(wait=False, cancel_futures=True)
    try:
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                item = pending.pop(fut)
                yield item, fut.result()
    finally:
        if pending:                          # left early (an error, an interrupt): stop the workers
            for fut in pending:
                fut.cancel()
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
