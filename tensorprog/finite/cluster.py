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
where the workers that died held the last copies of the shared data (one worker under a nanny,
say), the data is sent again to the workers there are then and the unfinished items are
submitted again (up to :data:`RESENDS` times).  A task that raises is retried :data:`RETRIES`
times (``retries=`` of ``Client.submit``).  A located TPError of a task is raised as such (that
of the first failing item).  A scheduler that cannot be reached within :data:`CONNECT_TIMEOUT`
seconds (at once where nothing listens at its port), one that has no workers for
:data:`WORKER_TIMEOUT` seconds, and one that is lost during the run are TPUsageErrors with one
line of message (Dask's own tracebacks and log lines about them are kept off stderr); what was
computed and written before (kernel tiles) stays, and a rerun resumes.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import socket
import sys
import threading
import uuid
from concurrent.futures import CancelledError
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from ..errors import TPUsageError
from .workers import Failure, TrialRunner

#: seconds to wait for a scheduler before giving up
CONNECT_TIMEOUT = 5.0
#: automatic retries of a task that raised (Client.submit(retries=...))
RETRIES = 2
#: seconds to wait for a worker where the scheduler has none
WORKER_TIMEOUT = 30.0
#: times the shared data is sent again after the workers holding it were all lost
RESENDS = 3

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
    cluster, failure = None, None
    with quiet_dask():
        try:
            if address == "local":
                cluster = distributed.LocalCluster(processes=True, threads_per_worker=1, host="127.0.0.1",
                                                   dashboard_address=None)
                client = distributed.Client(cluster, set_as_default=False)
            else:
                check_listening(address)
                client = distributed.Client(address, timeout=CONNECT_TIMEOUT, set_as_default=False)
        except Exception as err:      # whatever the address holds (nothing, or no Dask scheduler)
            failure = f"{type(err).__name__}: {err}"
            close_half_made(err, distributed.Client)
    if failure is not None:
        raise TPUsageError(f"scheduler: cannot reach the Dask scheduler at {address!r} ({failure}); "
                           f"check the address and that a scheduler runs there (waited at most "
                           f"{CONNECT_TIMEOUT:g} s)")
    if not _CLIENTS:
        atexit.register(close_clients)     # after distributed's own exit hooks: runs before them
    _CLIENTS[address] = (client, cluster)
    return client


def close_half_made(err: BaseException, kind: type) -> None:
    """Close at once the ``kind`` (a Client) whose constructor raised ``err`` (found in its
    traceback) and mark it closed, so that its ``__del__`` has nothing left to do (it would wait
    2 × CONNECT_TIMEOUT to close it, then print a traceback)."""
    tb = err.__traceback__
    while tb is not None:
        half = tb.tb_frame.f_locals.get("self")
        if isinstance(half, kind):
            try:
                half.close(timeout=0.5)
            except Exception:          # it never connected: nothing to wait for
                pass
            half.status = "closed"     # its __del__ then has nothing to do
            return
        tb = tb.tb_next


def check_listening(address: str) -> None:
    """An OSError at once where nothing listens at a ``tcp://`` address (instead of Dask's retries
    until :data:`CONNECT_TIMEOUT`); other kinds of address are left to Dask."""
    from distributed.comm.addressing import parse_address, parse_host_port
    scheme, location = parse_address(address)
    if scheme != "tcp":
        return
    host, port = parse_host_port(location)
    with socket.create_connection((host, port), timeout=CONNECT_TIMEOUT):
        pass


@contextlib.contextmanager
def quiet_dask(prefix: str = "distributed", unraisable: bool = True):
    """Within the block, the log lines of Dask's loggers under ``prefix`` and (``unraisable``) the
    exceptions of ``__del__`` methods (a Client that failed half-way prints one) stay off stderr:
    the TPUsageError raised says what happened."""
    names = [name for name in list(logging.root.manager.loggerDict)
             if name == prefix or name.startswith(prefix + ".")]
    loggers = [logging.getLogger(name) for name in {prefix, *names}]
    levels, hook = [logger.level for logger in loggers], sys.unraisablehook
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    if unraisable:
        sys.unraisablehook = lambda info: None
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)
        if unraisable:
            sys.unraisablehook = hook


def forget(client) -> None:
    """Close ``client`` (and its local cluster) quietly if this module opened it: its scheduler is
    lost, and closing it at exit would print Dask's tracebacks about its reconnection."""
    for address, (known, cluster) in list(_CLIENTS.items()):
        if known is client:
            del _CLIENTS[address]
            with quiet_dask():
                for thing in (client, cluster):
                    if thing is not None:
                        try:
                            thing.close(timeout=2)
                        except Exception:  # already gone: nothing to release
                            pass


def wait_for_workers(client, address: object) -> None:
    """Return once the scheduler has a worker; a TPUsageError after :data:`WORKER_TIMEOUT` seconds."""
    try:
        client.wait_for_workers(1, timeout=WORKER_TIMEOUT)
    except TimeoutError:
        raise TPUsageError(f"scheduler: the Dask scheduler at {address!r} has no workers (none joined "
                           f"within {WORKER_TIMEOUT:g} s); start some with: dask worker ADDRESS") from None


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
    pending, futures, remote, resends = list(items), {}, [], 0
    lost = ("scheduler: lost the Dask scheduler ({}); kernel tiles written so far stay, and a rerun "
            "resumes")
    try:
        # the client's reconnection notes and its batched comm's "closed" trace: see `lost`
        with quiet_dask("distributed.client", unraisable=False), quiet_dask("distributed.batched", unraisable=False):
            while pending:
                wait_for_workers(client, scheduler)
                remote = client.scatter([shared], broadcast=True, hash=False)
                futures = {client.submit(func, remote[0], item, pure=False, retries=retries): item
                           for item in pending}
                try:
                    for fut in distributed.as_completed(list(futures), loop=client.loop):
                        value = fut.result()
                        item = futures.pop(fut)
                        fut.release()
                        yield item, value
                    pending = []
                except CancelledError as err:
                    if client.status != "running":          # cancelled because the scheduler is gone
                        raise CommClosedError("the connection to it was lost") from None
                    if resends == RESENDS:                 # else the workers holding the data were lost
                        raise TPUsageError(f"scheduler: the workers holding the run's shared data were lost "
                                           f"{RESENDS + 1} times; the run stopped (kernel tiles written so "
                                           "far stay, and a rerun resumes)") from None
                    resends += 1
                    client.cancel(list(futures) + list(remote))
                    pending = list(futures.values())          # the unfinished items, in their order
    except KilledWorker as err:
        raise TPUsageError(f"scheduler: a task killed its workers too often (KilledWorker: {err}); "
                           "see distributed.scheduler.allowed-failures") from None
    except (CommClosedError, OSError, TimeoutError) as err:
        futures, remote = {}, []
        forget(client)
        raise TPUsageError(lost.format(f"{type(err).__name__}: {err}")) from None
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


__all__ = ["CONNECT_TIMEOUT", "RETRIES", "RESENDS", "WORKER_TIMEOUT", "client_for", "check_scheduler",
           "close_clients", "map_tasks", "map_items", "stream_items", "raise_failure", "require_distributed"]
