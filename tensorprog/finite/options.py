"""Execution defaults: ``jobs``, ``blocked`` and ``progress`` set for a block of code.

:func:`options` sets them in a context variable; an explicit argument of
:func:`~.execute.execute` or :class:`~.executor.Executor` always wins over it
(``_UNSET`` marks an argument the caller did not give).
"""
from __future__ import annotations

import contextlib
import contextvars

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
