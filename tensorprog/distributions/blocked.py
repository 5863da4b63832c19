"""Matrices that are never stored: regenerated block by block from a counter-based generator.

A blocked matrix of trial t and variable v has the Philox-4x64 key
``SeedSequence(seed, spawn_key=(trial, var, 1)).generate_state(2, uint64)``; its
row i is drawn from ``Philox(key, counter=i·2^128)`` (the counter's third word is the
row index), so every row has its own stream and entry (i, j) is the same number
whatever block it is generated in, on every use, transposed or not:

* ``W @ X``  is computed row block by row block, ``W[r0:r1, :] @ X``;
* ``Wᵀ @ Y`` accumulates ``W[r0:r1, :]ᵀ @ Y[r0:r1]`` over the same blocks.

Memory is O(threads · (block · cols + cols · B)), never rows × cols.  The
row blocks are grouped into at most ``STRIPES`` contiguous stripes summed in a fixed
order, so a transposed product does not depend on the number of threads (it does,
to rounding only, on the block size, a deterministic function of the shape).

Laws (entries of mean 0 and variance var/cols, as in :mod:`.families`, whose
``sample_row`` draws them), each row drawn from its own stream in this order:

============== ===================================================================
``normal``      ``standard_normal`` · sqrt(v)
``uniform``     ``random`` in [0, 1), mapped to [-sqrt(3v), sqrt(3v))
``rademacher``  packed random bits (``integers(0, 256, uint8)``), ±sqrt(v)
``laplace``     ``standard_exponential``, then packed sign bits, · sqrt(v/2)
``student_t``   ``standard_gamma(df/2)`` for the row, then ``standard_normal``:
                z / sqrt(2 Γ / (df − 2)) · sqrt(v)
``mvt``         one ``standard_gamma(df/2)`` (float64) for the row, then
                ``standard_normal``: z · sqrt((df − 2) / (2 Γ) · v)
============== ===================================================================

Rows are computed in float64; a float32 matrix is the float64 one rounded (the same
draws: float32 is a precision switch only, as for the dense sampler with
``draw_dtype=float64``).  These are the laws of the dense sampler but other random
numbers (another generator, drawn row by row): a blocked run is not bit-identical
to a dense run of the same seed, only equal in distribution.  ``orthogonal``
matrices cannot be blocked (every row depends on the whole matrix):
:data:`BLOCKABLE` lists the families whose ``blockable`` is true.

**On an array backend** (torch, jax, cupy: :mod:`tensorprog.finite.backend`) a blocked matrix is
a :class:`StreamBlockedMatrix`: row block b (rows b·block .. (b+1)·block, a function of the
shape only) is drawn on the device from its own stream, keyed by (seed, trial, var, b) — a
counter-based generator where the library has one (jax's threefry, torch's Philox on CUDA) —
by the family's ``draw_matrix`` / ``draw_entries`` (rows are iid for every blockable family, so
a block is a small matrix of the law).  Every use regenerates the same blocks: ``W`` and ``Wᵀ``
are one matrix.  The products are those above, block by block on the device.
"""
from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np

from .families import BLOCKABLE
from .sample import draw_matrix
from .spec import DistSpec

__all__ = ["BLOCKABLE", "BLOCK_BYTES", "DEVICE_BLOCK_BYTES", "STRIPES", "BlockedMatrix",
           "StreamBlockedMatrix", "default_block_rows", "matrix_key", "workspace_bytes"]

#: target bytes of one generated row block (per thread)
BLOCK_BYTES = 16 << 20
#: target bytes of one generated row block on a GPU (fewer, larger kernels)
DEVICE_BLOCK_BYTES = 256 << 20
#: row blocks are summed in at most this many fixed stripes (transposed products)
STRIPES = 8
#: the spawn-key tag separating blocked keys from the dense streams of the same (trial, var)
_TAG = 1


def matrix_key(seed: int, trial: int, var: int) -> np.ndarray:
    """The Philox key (2 × uint64) of the blocked matrix ``var`` in ``trial``."""
    return np.random.SeedSequence(seed, spawn_key=(trial, var, _TAG)).generate_state(2, np.uint64)


def default_block_rows(rows: int, cols: int, dtype, block_bytes: int = BLOCK_BYTES) -> int:
    """Rows per generated block: about ``block_bytes``, at least 1 (a function of the shape only)."""
    return int(max(1, min(rows, block_bytes // (cols * np.dtype(dtype).itemsize))))


def workspace_bytes(rows: int, cols: int, dtype, threads: int, batch: int = 1,
                    block_rows: int | None = None) -> int:
    """Peak bytes of one blocked product: a block buffer per thread (+ per-row temporaries)
    and one partial sum (cols × batch) per stripe."""
    item = np.dtype(dtype).itemsize
    block = block_rows or default_block_rows(rows, cols, dtype)
    per_thread = block * cols * item + 2 * cols * 8 + block * batch * item
    if item < 8:
        per_thread += cols * 8                    # the float64 row of a float32 matrix
    return threads * per_thread + (threads + 1) * cols * batch * item + (1 << 18)


class BlockedMatrix:
    """A rows × cols random matrix generated on demand, row block by row block.

    ``block(r0, r1)`` returns rows r0..r1 (the same numbers on every call);
    ``matmul(X)`` is W @ X and ``matmul(X, transposed=True)`` is Wᵀ @ X, for X of
    shape (k,) or (k, B).  ``threads`` generate stripes of blocks in parallel
    (numpy's generators release the GIL); ``on_rows(k)`` is called after each block
    with its number of rows (for progress)."""

    def __init__(self, key: np.ndarray, spec: DistSpec, rows: int, cols: int, dtype=np.float64,
                 block_rows: int | None = None, threads: int = 1) -> None:
        if not spec.law.blockable:
            raise ValueError(f"{spec.family} matrices cannot be generated block by block")
        self.law = spec.law
        self.key = np.asarray(key, dtype=np.uint64)
        self.spec, self.rows, self.cols = spec, int(rows), int(cols)
        self.dtype = np.dtype(dtype)
        self.block_rows = int(block_rows or default_block_rows(self.rows, self.cols, self.dtype))
        self.threads = max(1, int(threads))
        self.entry_var = spec.var / self.cols
        self.on_rows: Callable[[int], None] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    # ---- generation
    def _row(self, i: int, out: np.ndarray) -> None:
        """Row i into ``out`` (float64, shape (cols,)), from its own stream (the law's
        :meth:`~.family.Family.sample_row`)."""
        gen = np.random.Generator(np.random.Philox(key=self.key, counter=[0, 0, i, 0]))
        self.law.sample_row(gen, out, self.entry_var, self.spec.df)

    def block(self, r0: int, r1: int, out: np.ndarray | None = None) -> np.ndarray:
        """Rows r0..r1 of the matrix, shape (r1 − r0, cols)."""
        if out is None:
            out = np.empty((r1 - r0, self.cols), dtype=self.dtype)
        if self.dtype == np.float64:
            for k, i in enumerate(range(r0, r1)):
                self._row(i, out[k])
            return out
        row = np.empty(self.cols)                 # float32: the float64 row, rounded
        for k, i in enumerate(range(r0, r1)):
            self._row(i, row)
            out[k] = row
        return out

    def dense(self) -> np.ndarray:
        """The whole matrix (for tests and small sizes)."""
        return self.block(0, self.rows)

    # ---- products
    def _stripes(self) -> list[tuple[int, int]]:
        starts = list(range(0, self.rows, self.block_rows))
        per = -(-len(starts) // min(STRIPES, len(starts)))
        groups = [starts[k:k + per] for k in range(0, len(starts), per)]
        return [(g[0], min(g[-1] + self.block_rows, self.rows)) for g in groups]

    def matmul(self, x: np.ndarray, transposed: bool = False) -> np.ndarray:
        """W @ x, or Wᵀ @ x; x of shape (k,) or (k, B) in this matrix's dtype."""
        x = np.asarray(x)
        inner = self.rows if transposed else self.cols
        if x.shape[0] != inner:
            raise ValueError(f"shape mismatch: {'Wᵀ' if transposed else 'W'} is "
                             f"{(self.cols, self.rows) if transposed else self.shape}, x is {x.shape}")
        tail = x.shape[1:]
        if not transposed:
            out = np.empty((self.rows,) + tail, dtype=np.result_type(self.dtype, x.dtype))
        lock = threading.Lock()

        def stripe(bounds: tuple[int, int]):
            s0, s1 = bounds
            buf = np.empty((min(self.block_rows, s1 - s0), self.cols), dtype=self.dtype)
            acc = None
            for r0 in range(s0, s1, self.block_rows):
                r1 = min(r0 + self.block_rows, s1)
                w = self.block(r0, r1, buf[:r1 - r0])
                if transposed:
                    part = w.T @ x[r0:r1]
                    if acc is None:
                        acc = part
                    else:
                        acc += part
                else:
                    np.matmul(w, x, out=out[r0:r1])
                if self.on_rows is not None:
                    with lock:
                        self.on_rows(r1 - r0)
            return acc

        stripes = self._stripes()
        total = None
        threads = min(self.threads, len(stripes))
        with ThreadPoolExecutor(threads) if threads > 1 else contextlib.nullcontext() as pool:
            parts = pool.map(stripe, stripes) if threads > 1 else map(stripe, stripes)
            for part in parts:                      # in stripe order, whatever the threads
                if part is None:
                    continue
                if total is None:
                    total = part
                else:
                    total += part
        return total if transposed else out


class StreamBlockedMatrix:
    """A rows × cols random matrix on an array backend, generated on demand block by block:
    ``stream(b)`` is the random stream of row block b (see the module docstring), ``xp`` the
    backend's array-API namespace.  ``matmul`` as :meth:`BlockedMatrix.matmul`; ``on_rows``
    is told the rows of each block."""

    def __init__(self, stream: Callable[[int], object], spec: DistSpec, rows: int, cols: int, xp,
                 block_rows: int) -> None:
        if not spec.law.blockable:
            raise ValueError(f"{spec.family} matrices cannot be generated block by block")
        self.stream, self.spec, self.xp = stream, spec, xp
        self.rows, self.cols, self.block_rows = int(rows), int(cols), max(1, int(block_rows))
        self.on_rows: Callable[[int], None] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    def block(self, r0: int, r1: int):
        """Rows r0..r1 of block ``r0 // block_rows`` (r0 a block start, r1 at most its end)."""
        full = draw_matrix(self.stream(r0 // self.block_rows), self.spec,
                           min(self.block_rows, self.rows - r0), self.cols)
        return full if r1 - r0 == full.shape[0] else full[:r1 - r0, :]

    def dense(self):
        """The whole matrix (for tests and small sizes)."""
        return self.xp.concat([self.block(r0, min(r0 + self.block_rows, self.rows))
                               for r0 in range(0, self.rows, self.block_rows)], axis=0)

    def matmul(self, x, transposed: bool = False):
        """W @ x, or Wᵀ @ x; x of shape (k,) or (k, B) on the device, in the matrix's dtype."""
        inner = self.rows if transposed else self.cols
        if x.shape[0] != inner:
            raise ValueError(f"shape mismatch: {'Wᵀ' if transposed else 'W'} is "
                             f"{(self.cols, self.rows) if transposed else self.shape}, x is {tuple(x.shape)}")
        parts, total = [], None
        for r0 in range(0, self.rows, self.block_rows):
            r1 = min(r0 + self.block_rows, self.rows)
            w = self.block(r0, r1)
            if transposed:
                part = w.T @ x[r0:r1, ...]
                total = part if total is None else total + part
            else:
                parts.append(w @ x)
            if self.on_rows is not None:
                self.on_rows(r1 - r0)
        return total if transposed else self.xp.concat(parts, axis=0)
