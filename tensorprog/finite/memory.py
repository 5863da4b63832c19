"""Memory planning of a finite-width run: dense or blocked matrices, before anything is allocated.

The peak of one trial is estimated from the schedule (:func:`.schedule.peak_bytes`):
dense, every matrix is held (float64 draws included) from its first to its last use;
blocked, a matrix is a :class:`~.blocked.BlockedMatrix`, regenerated row block by row
block at each product and never stored, so only its workspace counts and memory is
O(n · batch) per trial.  Automatic blocked mode is refused (forcing it is not) when a
trial would draw more than ``AUTO_BLOCKED_MAX_ENTRIES`` random numbers, and families
whose rows depend on the whole matrix (:data:`~.blocked.BLOCKABLE`) are never blocked.
"""
from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import BLOCKABLE, workspace_bytes
from ..errors import TPLimitError, TPUsageError
from .schedule import generated_entries, matrix_uses, peak_bytes

if TYPE_CHECKING:
    from .executor import Executor

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


def choose_mode(ex: Executor, limit: int, blocked: bool | None) -> tuple[bool, int]:
    """``(blocked, peak)`` for the run of ``ex`` (program, plan, sizes, specs, dtype and threads
    set): dense if asked or if it fits within ``limit`` bytes, else blocked if allowed and it
    fits; otherwise a located TPUsageError / TPLimitError saying what to change."""
    used = [e for e in ex.program.eqns if isinstance(e, ir.Matrix) and e.var in ex.plan.needed]
    unblockable = [e for e in used if ex.specs[e.var].family not in BLOCKABLE]
    if blocked:
        if unblockable:
            e = unblockable[0]
            raise ex._error(TPUsageError, f"{ex.specs[e.var].family} matrices cannot be generated "
                            "block by block (every row depends on the whole matrix): run this "
                            "program dense (without blocked / --blocked)", e)
    else:
        def dense_bytes(e, rows: int, cols: int) -> int:
            return D.matrix_bytes(rows, cols, ex.dtype, ex.specs[e.var], draw_dtype=np.float64)
        peak, where = peak_bytes(ex.program, ex.plan, ex.sizes, ex.dtype.itemsize, dense_bytes)
        if peak <= limit:
            return False, peak
        message = (f"executing at this width needs about {peak / 2**30:.2f} GiB per trial, "
                   f"more than the {limit / 2**30:.2f} GiB available")
        if blocked is False:
            raise ex._error(TPLimitError, message + "; use a smaller width, --dtype float32, "
                            "or blocked matrices (--blocked)", where)
        if unblockable:
            e = unblockable[0]
            raise ex._error(TPLimitError, message + f"; {ex.specs[e.var].family} matrices "
                            f"(line {e.pos.line}) cannot be generated block by block, so use "
                            "a smaller width or --dtype float32", where)
        entries = generated_entries(ex.program, ex.plan, ex.sizes)
        if entries > AUTO_BLOCKED_MAX_ENTRIES:
            raise ex._error(TPLimitError, message + f"; with blocked matrices (regenerated block "
                            f"by block) a trial would draw {entries:.2g} random numbers, too long "
                            "to start unasked: use a smaller width, or force it with "
                            "blocked=True (--blocked)", where)
    uses = matrix_uses(ex.plan)

    def blocked_bytes(e, rows: int, cols: int) -> int:
        batch = max(uses.get(e.var, [1]))
        return workspace_bytes(rows, cols, ex.dtype, ex.threads, batch, ex._block_rows(rows, cols))
    peak, where = peak_bytes(ex.program, ex.plan, ex.sizes, ex.dtype.itemsize, blocked_bytes)
    if peak > limit:
        raise ex._error(TPLimitError, f"executing at this width needs about {peak / 2**30:.2f} GiB "
                        f"per trial even with blocked matrices (the vectors alone), more than the "
                        f"{limit / 2**30:.2f} GiB available; use a smaller width or --dtype float32",
                        where)
    return True, peak
