"""Memory planning of a finite-width run: dense, blocked or conditional matrices, before anything is allocated.

The peak of one trial is estimated from the schedule (:func:`.schedule.peak_bytes`):
dense, every matrix is held (float64 draws included) from its first to its last use;
blocked, a matrix is a :class:`~tensorprog.distributions.blocked.BlockedMatrix`, regenerated row block by row
block at each product and never stored, so only its workspace counts and memory is
O(n · batch) per trial.  Automatic blocked mode is refused (forcing it is not) when a
trial would draw more than ``AUTO_BLOCKED_MAX_ENTRIES`` random numbers, and families
whose rows depend on the whole matrix (a family whose ``blockable`` is False) are never blocked.
On an array backend other than numpy (``copies``) the samplers and products are not in place:
one more full-size temporary is counted per matrix, and per generated block.

Conditional matrices (:mod:`~tensorprog.distributions.conditional`, asked for, never chosen
automatically) hold (rows + cols) numbers per product, :func:`conditional_peak`; a program
with so many products on a matrix that this outgrows the dense matrix, or a law that cannot be
conditioned exactly (iid non-Gaussian entries), is refused.  The refusals of dense and blocked runs propose
conditional mode where every matrix allows it.
"""
from __future__ import annotations

import os
import resource

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import default_block_rows, workspace_bytes
from ..distributions.conditional import max_products, state_entries
from ..errors import TPError, TPLimitError, TPUsageError
from .schedule import Plan, generated_entries, matrix_uses, peak_bytes

#: an automatic blocked run drawing more random numbers than this per trial (about a minute)
#: warns that conditional mode would be far faster
SLOW_BLOCKED_ENTRIES = 1 << 32
#: what the refusals of dense and blocked runs add when every matrix may be conditioned
PROPOSE_CONDITIONAL = ("; or run in conditional mode (--conditional: every product drawn from its law "
                       "given the earlier ones, exact in law, memory O(n·k) for k products)")

#: automatic blocked mode is refused (forcing it is not) above this many generated
#: random entries per trial: ~2^36 is minutes to tens of minutes on 2 cores
AUTO_BLOCKED_MAX_ENTRIES = 1 << 36


def available_memory() -> int:
    """Bytes this process can still get: the machine's MemAvailable (or a conservative guess),
    capped by the address-space limit (``ulimit -v``) minus what the process already maps."""
    machine = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    machine = int(line.split()[1]) * 1024
    except OSError:
        pass
    if machine is None:
        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    return min(machine, _address_space_left())


def _address_space_left() -> int:
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft == resource.RLIM_INFINITY:
        return 1 << 62
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        mapped = 0
    return max(soft - mapped, 0)


def default_limit() -> int:
    """The memory limit of a run when none is given: 90% of :func:`available_memory`."""
    return available_memory() * 9 // 10


def _located(program: ir.Program, cls: type[TPError], message: str, where: ir.Eqn | None) -> TPError:
    line, col = (where.pos.line, where.pos.col) if where else (0, 0)
    return cls(message, line, col, program.file, program.source)


def choose_mode(program: ir.Program, schedule: Plan, sizes: dict[str, int], specs: dict[int, D.DistSpec],
                dtype: np.dtype, limit: int, blocked: bool | None, threads: int,
                block_rows: int | None, copies: bool = False) -> tuple[bool, int]:
    """``(blocked, peak)``: dense if asked or if the peak of one trial fits within ``limit``
    bytes, else blocked if allowed and it fits; otherwise a located TPUsageError /
    TPLimitError saying what to change.  ``threads`` and ``block_rows`` (None: chosen from
    the matrix) size the workspace of a blocked product; ``copies``: an array backend whose
    sampling is not in place (one more temporary per matrix or block)."""
    used = [e for e in program.eqns if isinstance(e, ir.Matrix) and e.var in schedule.needed]
    unblockable = [e for e in used if not specs[e.var].law.blockable]
    if blocked:
        if unblockable:
            e = unblockable[0]
            raise _located(program, TPUsageError, f"{specs[e.var].family} matrices cannot be generated "
                           "block by block (every row depends on the whole matrix): run this "
                           "program dense (without blocked / --blocked)", e)
    else:
        peak = _dense_peak(program, schedule, sizes, specs, dtype, limit, blocked is False, unblockable, copies)
        if peak is not None:
            return False, peak
    return True, _blocked_peak(program, schedule, sizes, dtype, limit, threads, block_rows, copies)


def _dense_peak(program: ir.Program, schedule: Plan, sizes: dict[str, int], specs: dict[int, D.DistSpec],
                dtype: np.dtype, limit: int, dense_only: bool, unblockable: list[ir.Eqn],
                copies: bool = False) -> int | None:
    """The dense peak if it fits within ``limit``; None if blocked matrices may be tried
    instead; otherwise the TPLimitError that says why neither runs."""
    def dense_bytes(e: ir.Matrix, rows: int, cols: int) -> int:
        extra = rows * cols * dtype.itemsize if copies else 0
        return D.matrix_bytes(rows, cols, dtype, specs[e.var], draw_dtype=np.float64) + extra
    peak, where = peak_bytes(program, schedule, sizes, dtype.itemsize, dense_bytes)
    if peak <= limit:
        return peak
    message = (f"executing at this width needs about {peak / 2**30:.2f} GiB per trial, "
               f"more than the {limit / 2**30:.2f} GiB available")
    propose = PROPOSE_CONDITIONAL if conditionable(program, schedule, specs) else ""
    if dense_only:
        raise _located(program, TPLimitError, message + "; use a smaller width, --dtype float32, "
                       "or blocked matrices (--blocked)" + propose, where)
    if unblockable:
        e = unblockable[0]
        raise _located(program, TPLimitError, message + f"; {specs[e.var].family} matrices "
                       f"(line {e.pos.line}) cannot be generated block by block, so use "
                       "a smaller width or --dtype float32" + propose, where)
    entries = generated_entries(program, schedule, sizes)
    if entries > AUTO_BLOCKED_MAX_ENTRIES:
        raise _located(program, TPLimitError, message + f"; with blocked matrices (regenerated block "
                       f"by block) a trial would draw {entries:.2g} random numbers, too long "
                       "to start unasked: use a smaller width, or force it with "
                       "blocked=True (--blocked)" + propose, where)
    return None


def _blocked_peak(program: ir.Program, schedule: Plan, sizes: dict[str, int], dtype: np.dtype,
                  limit: int, threads: int, block_rows: int | None, copies: bool = False) -> int:
    """The peak with blocked matrices (only their workspace counts), or a TPLimitError."""
    uses = matrix_uses(schedule)

    def blocked_bytes(e: ir.Matrix, rows: int, cols: int) -> int:
        batch = max(uses.get(e.var, [1]))
        block = block_rows or default_block_rows(rows, cols, dtype)
        extra = block * cols * dtype.itemsize if copies else 0
        return workspace_bytes(rows, cols, dtype, threads, batch, block_rows) + extra
    peak, where = peak_bytes(program, schedule, sizes, dtype.itemsize, blocked_bytes)
    if peak > limit:
        raise _located(program, TPLimitError, f"executing at this width needs about {peak / 2**30:.2f} GiB "
                       f"per trial even with blocked matrices (the vectors alone), more than the "
                       f"{limit / 2**30:.2f} GiB available; use a smaller width or --dtype float32",
                       where)
    return peak


def _used_matrices(program: ir.Program, schedule: Plan) -> list[ir.Matrix]:
    return [e for e in program.eqns if isinstance(e, ir.Matrix) and e.var in schedule.needed]


def conditionable(program: ir.Program, schedule: Plan, specs: dict[int, D.DistSpec]) -> bool:
    """Whether every matrix the outputs need may be conditioned (normal, mvt, orthogonal)."""
    return all(specs[e.var].law.conditionable for e in _used_matrices(program, schedule))


def side_products(program: ir.Program, schedule: Plan) -> dict[tuple[int, bool], int]:
    """(matrix var, transposed) -> the number of MatMuls on that side the outputs need."""
    count: dict[tuple[int, bool], int] = {}
    for e in program.eqns:
        if isinstance(e, ir.MatMul) and e.var in schedule.needed:
            key = (e.matrix, bool(e.transposed))
            count[key] = count.get(key, 0) + 1
    return count


def products(program: ir.Program, schedule: Plan) -> dict[int, int]:
    """matrix var -> the number of MatMuls (either side) the outputs need on it."""
    count: dict[int, int] = {}
    for (var, _), k in side_products(program, schedule).items():
        count[var] = count.get(var, 0) + k
    return count


def conditional_peak(program: ir.Program, schedule: Plan, sizes: dict[str, int], specs: dict[int, D.DistSpec],
                     dtype: np.dtype, limit: int, swapped: bool = False, copies: bool = False) -> int:
    """The peak of one trial with conditional matrices: (rows + cols) numbers per product held
    (twice: the state grows by concatenation), or a located error: a law that cannot be
    conditioned exactly (``swapped``: it came from --matrix-dist), a matrix with more products
    than :func:`~tensorprog.distributions.conditional.max_products` at this width, or a peak
    beyond ``limit``."""
    uses = products(program, schedule)
    for e in _used_matrices(program, schedule):
        spec = specs[e.var]
        if not spec.law.conditionable:
            origin = " (from --matrix-dist)" if swapped else ""
            raise _located(program, TPUsageError, f"conditional mode: {spec.family} matrices{origin} are not "
                           "Gaussian, so drawing a product given the earlier ones is not exact in law "
                           "(only normal, mvt and orthogonal matrices can be conditioned); run without "
                           "--conditional",
                           e)
        rows, cols, k = sizes[e.rows], sizes[e.cols], uses.get(e.var, 0)
        if k > max_products(rows, cols, spec.law.haar):
            raise _located(program, TPUsageError, f"conditional mode: {k} products with this "
                           f"{rows} × {cols} matrix need a state of (rows + cols)·{k} numbers, more than "
                           f"the dense matrix itself; use a width of at least {2 * k} (or run without "
                           "--conditional)", e)

    def state_bytes(e: ir.Matrix, rows: int, cols: int) -> int:
        entries = state_entries(rows, cols, uses.get(e.var, 0), specs[e.var].law.haar)
        return (2 + copies) * entries * dtype.itemsize + max(rows, cols) * 8
    peak, where = peak_bytes(program, schedule, sizes, dtype.itemsize, state_bytes)
    if peak > limit:
        raise _located(program, TPLimitError, f"executing in conditional mode at this width needs about "
                       f"{peak / 2**30:.2f} GiB per trial (the vectors, and (rows + cols) numbers per "
                       f"product for each matrix), more than the {limit / 2**30:.2f} GiB available; use a "
                       "smaller width or --dtype float32", where)
    return peak


def blocked_advice(program: ir.Program, schedule: Plan, sizes: dict[str, int],
                   specs: dict[int, D.DistSpec]) -> str | None:
    """The warning of an automatic blocked run that conditional mode would make far faster (more
    than :data:`SLOW_BLOCKED_ENTRIES` random numbers per trial, every matrix conditionable), else None."""
    entries = generated_entries(program, schedule, sizes)
    if entries <= SLOW_BLOCKED_ENTRIES or not conditionable(program, schedule, specs):
        return None
    return (f"{program.file}: the matrices do not fit, so they are regenerated block by block: a trial "
            f"draws {entries:.2g} random numbers; conditional mode (--conditional, conditional=True) draws "
            "O(n·k) for k products instead, with the same law")
