"""Trials and kernel tiles on a Dask cluster (``scheduler=`` / ``--scheduler ADDRESS``).

Dask (``pip install "tensorprog[dask]"``: ``dask`` and ``distributed``) is imported only when a
scheduler is given.  ``scheduler`` is a scheduler address (``tcp://host:8786``), ``"local"``
(a :class:`distributed.LocalCluster` on this machine, started once per process, one worker
process per core, one thread each) or a :class:`distributed.Client` already connected.

One task per item (a trial, or a tile of kernel pairs).  The work that every task shares
(a run plan, the data) is scattered once to every worker, and a worker builds its interpreter
once per run and thread.  Trial t draws only from its own streams
(``SeedSequence(seed, spawn_key=(t, var))``), so a trial computes the same bits on any worker:
results are bit-identical to the local run with the same seed.

Failures: a task whose worker dies is rescheduled by Dask's scheduler on another worker (up to
``distributed.scheduler.allowed-failures`` times, then a TPUsageError naming ``KilledWorker``);
a task that raises is retried :data:`RETRIES` times (``retries=`` of ``Client.submit``).  A
located TPError of a task is raised as such (that of the first failing item).  A scheduler that
cannot be reached within :data:`CONNECT_TIMEOUT` seconds, or that is lost during the run, is a
TPUsageError; what was computed and written before (kernel tiles) stays, and a rerun resumes.
"""
from __future__ import annotations

import atexit
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import TPUsageError
from .workers import Failure, TrialRunner

#: seconds to wait for a scheduler before giving up
CONNECT_TIMEOUT = 5.0
#: automatic retries of a task that raised (Client.submit(retries=...))
RETRIES = 2

_CLIENTS: dict[str, tuple[Any, Any]] = {}      # address -> (client, LocalCluster or None)
_LOCAL = threading.local()                      # worker side: the interpreter of the current run


def require_distributed():
    """The ``distributed`` module, or a TPUsageError saying what to install."""
    try:
        import distributed
    except ImportError:
        raise TPUsageError('a scheduler needs Dask: pip install "tensorprog[dask]" '
                           '(dask and distributed)') from None
    return distributed


def check_scheduler(scheduler: object) -> None:
    """A TPUsageError unless ``scheduler`` is None, an address, ``"local"`` or a Client."""
    if scheduler is None or hasattr(scheduler, "submit"):
        return
    if not isinstance(scheduler, str) or not scheduler.strip():
        raise TPUsageError(f"scheduler must be an address such as tcp://host:8786, 'local' or a "
                           f"distributed.Client, not {scheduler!r}")


def client_for(scheduler: object):
    """A connected :class:`distributed.Client` for ``scheduler`` (cached per address)."""
    check_scheduler(scheduler)
    if hasattr(scheduler, "submit"):
        return scheduler
    address = str(scheduler).strip()
    cached = _CLIENTS.get(address)
    if cached is not None and cached[0].status == "running":
        return cached[0]
    distributed = require_distributed()
    cluster = None
    try:
        if address == "local":
            cluster = distributed.LocalCluster(processes=True, threads_per_worker=1, host="127.0.0.1",
                                               dashboard_address=None)
            client = distributed.Client(cluster, set_as_default=False)
        else:
            client = distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as err:
        raise TPUsageError(f"scheduler: cannot reach the Dask scheduler at {address!r} within "
                           f"{CONNECT_TIMEOUT:g} s ({type(err).__name__}: {err})") from None
    if not _CLIENTS:
        atexit.register(close_clients)     # after distributed's own exit hooks: runs before them
    _CLIENTS[address] = (client, cluster)
    return client


def close_clients() -> None:
    """Close the clients (and the local cluster) this process opened (quietly: at exit, Dask's
    notes about workers leaving are noise)."""
    if _CLIENTS:
        import logging
        logging.getLogger("distributed").setLevel(logging.CRITICAL)
    while _CLIENTS:
        _, (client, cluster) = _CLIENTS.popitem()
        for thing in (client, cluster):
            if thing is not None:
                try:
                    thing.close()
                except Exception:          # already gone: nothing to release
                    pass


def map_tasks(scheduler: object, shared: object, func: Callable[[Any, Any], Any],
              items: Iterable, retries: int = RETRIES) -> Iterator[tuple[Any, Any]]:
    """(item, func(shared, item)) for every item, one Dask task each, in the order they finish.
    ``shared`` is sent once to every worker; ``func`` must be picklable (cloudpickle)."""
    distributed = require_distributed()
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker
    client = client_for(scheduler)
    futures: dict = {}
    remote = []
    try:
        remote = client.scatter([shared], broadcast=True, hash=False)
        futures = {client.submit(func, remote[0], item, pure=False, retries=retries): item for item in items}
        done = distributed.as_completed(list(futures), loop=client.loop)
        for fut in done:
            item = futures.pop(fut)
            value = fut.result()
            fut.release()
            yield item, value
    except KilledWorker as err:
        raise TPUsageError(f"scheduler: a task killed its workers too often (KilledWorker: {err}); "
                           "see distributed.scheduler.allowed-failures") from None
    except (CommClosedError, OSError, TimeoutError) as err:
        raise TPUsageError(f"scheduler: lost the Dask scheduler ({type(err).__name__}: {err}); "
                           "kernel tiles written so far stay, and a rerun resumes") from None
    finally:
        try:
            client.cancel(list(futures) + list(remote))
        except Exception:                  # the scheduler is gone: nothing left to cancel
            pass


@dataclass(frozen=True)
class RunSpec:
    """What every task of one run shares: the interpreter's builder and the per-item function."""
    token: str
    build: Callable[[], Any]
    func: Callable[[Any, Any], Any]


def run_item(spec: RunSpec, item: Any) -> Any:
    """Worker side: ``spec.func(interpreter, item)``, the interpreter built once per run and
    thread; a TPError comes back as a :class:`~.workers.Failure`."""
    current = getattr(_LOCAL, "runner", None)
    if current is None or current[0] != spec.token:
        _LOCAL.runner = current = (spec.token, TrialRunner(spec.func, spec.build))
    return current[1](item)


def map_items(scheduler: object, build: Callable[[], Any], func: Callable[[Any, Any], Any],
              items: list, advance: Callable[[], None] | None = None) -> list:
    """``[func(build(), item) for item in items]`` on the cluster (one task per item); the first
    failing item's TPError is raised once the earlier items are done, as a local run would."""
    spec = RunSpec(uuid.uuid4().hex, build, func)
    out: list = [None] * len(items)
    finished = [False] * len(items)
    failed: dict[int, Failure] = {}
    for k, value in map_tasks(scheduler, (spec, items), run_position, list(range(len(items)))):
        if isinstance(value, Failure):
            failed[k] = value
        else:
            out[k], finished[k] = value, True
            if advance is not None:
                advance()
        if failed and all(finished[:min(failed)]):
            raise failed[min(failed)].error()
    return out


def stream_items(scheduler: object, build: Callable[[], Any], func: Callable[[Any, Any], Any],
                 items: list) -> Iterator[tuple[int, Any]]:
    """(k, func(build(), items[k])) on the cluster, in the order the tasks finish; a task's
    TPError is raised as soon as it arrives (what arrived before is the caller's to keep)."""
    spec = RunSpec(uuid.uuid4().hex, build, func)
    for k, value in map_tasks(scheduler, (spec, items), run_position, list(range(len(items)))):
        yield k, raise_failure(value)


def run_position(shared: tuple[RunSpec, list], k: int) -> Any:
    """Worker side: item ``k`` of the shared list through :func:`run_item`."""
    spec, items = shared
    return run_item(spec, items[k])


def raise_failure(value: Any) -> Any:
    """``value``, or its TPError raised if it is a :class:`~.workers.Failure`."""
    if isinstance(value, Failure):
        raise value.error()
    return value


__all__ = ["CONNECT_TIMEOUT", "RETRIES", "client_for", "check_scheduler", "close_clients", "map_tasks",
           "map_items", "stream_items", "raise_failure", "require_distributed"]
