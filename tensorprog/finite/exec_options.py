"""Execution options: how a finite-width run is carried out, never what it computes.

:class:`ExecOptions` holds them, with their built-in defaults defined here once.
:func:`options` sets defaults for a block of code (a context variable), e.g. for code
that executes programs itself (``converge``, ``kernel``)::

    with tensorprog.finite.options(jobs=2, blocked=True):
        converge(program, widths)

An argument is resolved as: explicit argument > the innermost :func:`options` block >
the built-in default (:func:`resolve`; :data:`UNSET` marks an argument not given, since
``None`` is a meaningful value of ``blocked`` and ``progress``).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import enum
from dataclasses import dataclass
from typing import Iterator


class Unset(enum.Enum):
    """The type of :data:`UNSET`."""
    UNSET = "unset"


#: an argument the caller did not give: the :func:`options` default applies
UNSET = Unset.UNSET


@dataclass(frozen=True)
class ExecOptions:
    """``jobs``: worker processes running trials side by side (0: one per core; the values
    are bit-identical to 1).  ``blocked``: None uses blocked matrices only when the dense
    ones do not fit, True forces them, False forbids them.  ``progress``: None shows a
    progress bar on stderr when it is a terminal, True always, False never.
    ``block_rows``: rows per block of a blocked matrix (None: chosen from the width).
    ``backend``: the array library, ``numpy`` (default), ``torch``, ``jax`` or ``cupy``
    (:mod:`.backend`); ``device``: ``cpu`` (default) or ``cuda``.  ``scheduler``: None (default:
    this machine, ``jobs`` processes), a Dask scheduler address (``tcp://host:8786``), ``"local"``
    (a ``distributed.LocalCluster``) or a ``distributed.Client``: trials (and kernel tiles) run
    there, one task each, bit-identical to the local run (:mod:`.cluster`; ``jobs`` is then unused).
    ``conditional``: every matrix is a conditional one, each product drawn from its law given the
    earlier ones (exact in law for normal, mvt and orthogonal matrices, memory O(n·k) for k products:
    :mod:`tensorprog.distributions.conditional`); False (default) stores or regenerates them."""
    jobs: int = 1
    blocked: bool | None = None
    progress: bool | None = None
    block_rows: int | None = None
    backend: str = "numpy"
    device: str = "cpu"
    scheduler: object = None
    conditional: bool = False

    def given(self, **values: object) -> ExecOptions:
        """These options with the ``values`` that are not :data:`UNSET` put in."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not UNSET})


NAMES = frozenset(f.name for f in dataclasses.fields(ExecOptions))
_CURRENT: contextvars.ContextVar[ExecOptions] = contextvars.ContextVar(
    "tensorprog_execute_options", default=ExecOptions())


def current() -> ExecOptions:
    """The options in force: the built-in defaults, overridden by the enclosing :func:`options`."""
    return _CURRENT.get()


def resolve(**values: object) -> ExecOptions:
    """Explicit ``values`` (those not :data:`UNSET`) over :func:`current`."""
    return current().given(**values)


@contextlib.contextmanager
def options(**values: object) -> Iterator[ExecOptions]:
    """Defaults for ``jobs``, ``blocked``, ``progress``, ``backend``, ``device``, ``scheduler``,
    ``conditional`` (and ``block_rows``) of every execution inside the block (see the module docstring); blocks
    nest, the inner one wins."""
    unknown = set(values) - NAMES
    if unknown:
        raise TypeError(f"unknown execution option(s): {', '.join(sorted(unknown))}")
    token = _CURRENT.set(current().given(**values))
    try:
        yield current()
    finally:
        _CURRENT.reset(token)
