"""The plan of a finite-width run: everything decided before a trial runs.

:func:`plan_run` checks the arguments, sizes every dimension (``round(ratio · n)``, at
least 1), applies ``matrix_dist`` to every matrix law, schedules the equations
(:mod:`.schedule`) and chooses dense or blocked matrices within the memory limit
(:mod:`.memory`) — or conditional matrices when asked (``conditional``: every product
drawn from its law given the earlier ones, :mod:`~tensorprog.distributions.conditional`) —
on the array backend asked for (:mod:`.backend`: its library is imported
and its device checked here, and a builtin it lacks is refused at its statement).  The
result, a frozen :class:`RunPlan`, is plain data: an :class:`~.executor.Executor`
interprets it, in this process or in a worker.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import DEVICE_BLOCK_BYTES, default_block_rows
from ..arguments import usage, whole
from ..errors import TPUsageError
from .backend import NUMPY, Backend, BackendError, get_backend
from .memory import blocked_advice, choose_mode, conditional_peak, default_limit
from .parallel import cpu_count
from .schedule import Plan, make_plan


class SlowModeWarning(UserWarning):
    """An automatic choice (blocked matrices) far slower than an option the user could give."""


@dataclass(frozen=True)
class RunPlan:
    """One program at one width: sizes, matrix laws, schedule and memory mode.

    ``peak``: the bytes one trial needs at most; ``threads``: threads generating the
    stripes of a blocked matrix; ``block_rows``: rows per block (None: from the shape);
    ``backend`` and ``device``: the array library and where it runs (:func:`~.backend.get_backend`);
    ``conditional``: every matrix is a conditional one (never stored, exact in law)."""
    program: ir.Program
    seed: int
    dtype: np.dtype
    sizes: dict[str, int]
    specs: dict[int, D.DistSpec]
    schedule: Plan
    blocked: bool
    peak: int
    memory_limit: int
    threads: int
    block_rows: int | None = None
    backend: str = NUMPY
    device: str = "cpu"
    conditional: bool = False

    def rows_per_block(self, rows: int, cols: int) -> int:
        """Rows per generated block of a blocked rows × cols matrix (larger blocks on a GPU)."""
        if self.block_rows:
            return self.block_rows
        if self.device == "cuda":
            return default_block_rows(rows, cols, self.dtype, DEVICE_BLOCK_BYTES)
        return default_block_rows(rows, cols, self.dtype)


def plan_run(program: ir.Program, n: int, seed: int, dtype, matrix_dist: str | None,
             memory_limit: int | None = None, blocked: bool | None = None, threads: int | None = None,
             block_rows: int | None = None, backend: str = NUMPY, device: str = "cpu",
             conditional: bool = False) -> RunPlan:
    """The :class:`RunPlan` of ``program`` at width ``n``.  ``blocked``: None chooses (dense if
    it fits, else blocked), True forces blocked matrices, False dense ones; ``memory_limit``
    (default: 90% of the available memory) bounds one trial; ``threads`` (default: every
    core) generate a blocked matrix's stripes; ``backend`` and ``device``: see :mod:`.backend`
    (on a GPU the memory limit is the device's free memory); ``conditional``: conditional
    matrices (normal, mvt and orthogonal laws only; not with ``blocked=True``).  Errors are TPUsageError /
    TPLimitError."""
    dtype = _check(program, n, seed, dtype, blocked, conditional)
    lib = backend_of(program, backend, device)
    sizes = {w: max(1, int(round(r * n))) for w, r in program.dims.items()}
    specs = matrix_specs(program, matrix_dist)
    schedule = make_plan(program)
    threads = cpu_count() if threads is None else max(1, int(threads))
    if not lib.is_numpy:
        threads = 1                      # the library's own threads (or the device) parallelize
    free = lib.free_memory()
    limit = memory_limit if memory_limit is not None else default_limit() if free is None else free * 9 // 10
    if conditional:
        peak = conditional_peak(program, schedule, sizes, specs, dtype, limit, matrix_dist is not None,
                                copies=not lib.is_numpy)
        return RunPlan(program, seed, dtype, sizes, specs, schedule, False, peak, limit, threads, block_rows,
                       lib.name, lib.device, conditional=True)
    asked = blocked
    blocked, peak = choose_mode(program, schedule, sizes, specs, dtype, limit, blocked, threads, block_rows,
                                copies=not lib.is_numpy)
    advice = blocked_advice(program, schedule, sizes, specs) if blocked and asked is None else None
    if advice:
        warnings.warn(advice, SlowModeWarning, stacklevel=2)
    return RunPlan(program, seed, dtype, sizes, specs, schedule, blocked, peak, limit, threads, block_rows,
                   lib.name, lib.device)


def backend_of(program: ir.Program, name: str, device: str) -> Backend:
    """The backend ``name`` on ``device``, or a TPUsageError saying what is missing; a program
    calling a builtin the backend lacks is refused at the first such statement."""
    try:
        lib = get_backend(name, device)
    except BackendError as err:
        raise TPUsageError(str(err), file=program.file) from None
    for e in program.eqns:
        if isinstance(e, ir.FUNCTION_OPS):
            for name_ in sorted(ir.calls(e.fn)):
                if lib.lacks(name_):
                    raise TPUsageError(f"{name_} is not available on the {lib.name} backend (it needs "
                                       "a special function the array API does not have): use numpy, "
                                       "torch or jax", e.pos.line, e.pos.col, program.file, program.source)
    return lib


def _check(program: ir.Program, n: int, seed: int, dtype, blocked: bool | None,
           conditional: bool = False) -> np.dtype:
    """The checked arguments of :func:`plan_run`; the dtype as a numpy dtype."""
    usage(lambda: (whole(n, "the width n", 1), whole(seed, "the seed", 0)), program.file)
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise TPUsageError(f"dtype must be float64 or float32, not {dtype}", file=program.file)
    if blocked not in (None, True, False):
        raise TPUsageError(f"blocked must be True, False or None (automatic), not {blocked!r}",
                           file=program.file)
    if conditional not in (True, False):
        raise TPUsageError(f"conditional must be True or False, not {conditional!r}", file=program.file)
    if conditional and blocked:
        raise TPUsageError("conditional and blocked matrices exclude each other (a conditional matrix is "
                           "never stored either): give only one of --conditional and --blocked",
                           file=program.file)
    return dtype


def matrix_specs(program: ir.Program, family: str | None) -> dict[int, D.DistSpec]:
    """Matrix var -> its law, with the family swapped to ``family`` (variance kept) if given."""
    specs = {e.var: e.dist for e in program.eqns if isinstance(e, ir.Matrix)}
    if family is None:
        return specs
    try:
        return {v: D.with_family(s, family) for v, s in specs.items()}
    except D.DistributionError as err:
        raise TPUsageError(f"--matrix-dist: {err}", file=program.file) from None
