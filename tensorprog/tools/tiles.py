"""Dataset kernels tile by tile: out of core (``out="DIR/"``) and on a Dask cluster (``scheduler``).

The N(N+1)/2 pairs i ≤ j are cut into tiles of whole rows of the upper triangle: tile
[r0, r1) holds the pairs (i, j) with r0 ≤ i < r1 and j ≥ i (at most ``tile_pairs`` of them,
at least one row).  Each tile is a band of :mod:`.pairs` (blocks replayed where the template's
forms are closed, the batch compile elsewhere), locally or as one Dask task; every entry is
computed by the same operations whichever tile it falls in, so a tiled kernel has the bits of
the in-memory one (which is one band of all rows, written in place).

Out of core, each output is ``DIR/NAME.npy`` (and ``DIR/NAME_error.npy``), created at full size
(under a temporary name until the run is complete) and filled through memory maps: a tile writes
its rows of the upper triangle, and a last pass mirrors the upper triangle into the lower one,
band by band.  Memory is bounded by a tile and a band (:data:`BAND_ELEMENTS`), not by N².  The
directory's lock, manifest, journal of finished tiles (with their digests) and the checks a rerun
makes before it trusts them are :mod:`.kernel_dir`'s; a rerun after an interruption computes only
the tiles missing.  In memory, the arrays' size is checked against the memory available first.
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from ..errors import TPLimitError, TPUsageError
from ..finite.cluster import check_scheduler, stream_items
from ..finite.memory import default_limit
from ..finite.progress import ProgressBar
from .kernel_dir import KernelDir, Manifest, TileEntry, digest, io_error, make_directory, tile_digest
from .pairs import LimitSpec, limit_band

#: pairs per tile by default (about 0.5 M: a few hundred MB of work arrays for deep templates)
TILE_PAIRS = 1 << 19
#: elements of one band of the mirror pass (128 MiB of float64)
BAND_ELEMENTS = 1 << 24
#: side of the square blocks an in-memory kernel is mirrored by
MIRROR_BLOCK = 256
RANK = {"exact": 0, "series": 0.5, "quadrature": 1, "qmc": 2}


def inputs_array(X: np.ndarray) -> np.ndarray:
    """X as a finite real float64 (N, d) array, N ≥ 1, d ≥ 1 (else a TPUsageError; complex
    inputs are refused, not cut to their real part)."""
    raw = np.asarray(X)
    if raw.dtype.kind not in "biuf":
        raise TPUsageError(f"the inputs must be a real numeric array of shape (N, d), not of dtype {raw.dtype}")
    X = raw.astype(float, copy=False)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1 or not np.all(np.isfinite(X)):
        raise TPUsageError(f"the inputs must be a finite array of shape (N, d), N ≥ 1 and d ≥ 1 (got shape {X.shape})")
    return X


def tile_rows(N: int, tile_pairs: int = TILE_PAIRS) -> list[tuple[int, int]]:
    """Row ranges [r0, r1) of the upper triangle with at most ``tile_pairs`` pairs (one row at least)."""
    if isinstance(tile_pairs, bool) or not isinstance(tile_pairs, (int, np.integer)) or tile_pairs < 1:
        raise TPUsageError(f"tile_pairs must be a positive integer, not {tile_pairs!r}")
    tiles, r0 = [], 0
    while r0 < N:
        r1, count = r0 + 1, N - r0
        while r1 < N and count + (N - r1) <= tile_pairs:
            count += N - r1
            r1 += 1
        tiles.append((r0, r1))
        r0 = r1
    return tiles


@dataclass
class TileValues:
    """One tile's results: per output, values and error bounds of its rows of the upper triangle
    (arrays (r1 − r0, N − r0), entry (i − r0, j − r0); below the diagonal unused); methods; warnings."""
    rows: tuple[int, int]
    values: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    methods: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def limit_tile(spec: LimitSpec, rows: tuple[int, int]) -> TileValues:
    """The limit kernels of the pairs of tile ``rows`` (:func:`.pairs.limit_band`)."""
    N = spec.X.shape[0]
    shape = (rows[1] - rows[0], N - rows[0])
    values = {name: np.zeros(shape) for name in spec.names}
    errors = {name: np.zeros(shape) for name in spec.names}
    band = limit_band(spec, rows, values, errors)
    return TileValues(rows, values, errors, band.methods, band.warnings)


class Sink:
    """Where tiles go: N×N float64 arrays, one per name; rows of the upper triangle, then a mirror."""

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> str | None:
        raise NotImplementedError

    def mirror(self, name: str) -> None:
        raise NotImplementedError


class ArraySink(Sink):
    """In memory."""

    def __init__(self, names: list[str], N: int) -> None:
        self.arrays = {name: np.empty((N, N)) for name in names}

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> None:
        target = self.arrays[name][rows[0]:rows[1], rows[0]:]
        if not np.shares_memory(target, block):
            target[...] = block

    def rows_view(self, name: str, rows: tuple[int, int]) -> np.ndarray:
        """Rows [r0, r1), columns r0…N−1: where a band is computed in place."""
        return self.arrays[name][rows[0]:rows[1], rows[0]:]

    def mirror(self, name: str) -> None:
        """Square blocks of the upper triangle transposed onto the lower one (cache-sized copies)."""
        K = self.arrays[name]
        N, step = K.shape[0], MIRROR_BLOCK
        for r0 in range(0, N, step):
            r1 = min(N, r0 + step)
            square = K[r0:r1, r0:r1]
            lower = np.tril_indices(r1 - r0, -1)
            square[lower] = square.T[lower]
            for c0 in range(r1, N, step):
                c1 = min(N, c0 + step)
                K[c0:c1, r0:r1] = K[r0:r1, c0:c1].T


class FileSink(Sink):
    """The arrays of a :class:`.kernel_dir.KernelDir`, written through short-lived memory maps of
    the rows a tile or a band touches (so that the pages leave this process with the map)."""

    def __init__(self, kd: KernelDir) -> None:
        self.kd = kd
        self.N = kd.manifest.N

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> str:
        """Rows [r0, r1) of the upper triangle; returns the block's digest."""
        m = self.kd.rows(name, rows[0], rows[1], "r+")
        m[:, rows[0]:] = block
        m.flush()
        del m
        return tile_digest(block)

    def mirror(self, name: str) -> list[str]:
        """The mirror pass; returns the digests of the array's bands of :func:`band_rows` rows."""
        def rows(r0: int, r1: int) -> np.memmap:
            return self.kd.rows(name, r0, r1, "r+")
        return mirror_bands(rows, self.N, flush=True)


def band_rows(N: int) -> int:
    """Rows of a band of the mirror pass."""
    return max(1, BAND_ELEMENTS // N)


def mirror_bands(rows: Callable[[int, int], np.ndarray], N: int, flush: bool = False) -> list[str]:
    """Copy the upper triangle of an N×N array onto the lower one, band by band of columns:
    ``rows(r0, r1)`` gives rows [r0, r1) (a view, or a short-lived memory map).  The upper
    triangle keeps its bits.  Rows [c0, c1) are final once band [c0, c1) is done: their digests
    (:func:`.kernel_dir.digest`) are returned, one per band."""
    band, digests = band_rows(N), []
    for c0 in range(0, N, band):
        c1 = min(N, c0 + band)
        top = rows(c0, c1)
        square = np.array(top[:, c0:c1])
        lower = np.tril_indices(c1 - c0, -1)
        square[lower] = square.T[lower]
        top[:, c0:c1] = square
        upper = np.array(top[:, c1:])
        digests.append(digest(top))
        if flush:
            top.flush()
        del top
        if c1 < N:
            below = rows(c1, N)
            below[:, c0:c1] = upper.T
            if flush:
                below.flush()
            del below
    return digests


def write_tile(sink: Sink, tile: TileValues) -> dict[str, str]:
    """A tile's values and error bounds into the sink; the digests :meth:`FileSink.write` returns."""
    digests = {}
    for name in tile.values:
        digests[name] = sink.write(name, tile.rows, tile.values[name])
        digests[f"{name}_error"] = sink.write(f"{name}_error", tile.rows, tile.errors[name])
    return digests


def fingerprint(spec: LimitSpec, tiles: list[tuple[int, int]]) -> str:
    """A digest of the data, the template, tol and the tiles (a directory holds one kernel)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(spec.X, dtype=np.float64).tobytes())
    h.update(repr((spec.X.shape, spec.group, spec.scale, spec.shift, spec.tol, tiles)).encode())
    h.update(repr((spec.program.eqns, spec.program.groups, [o.name for o in spec.program.outputs])).encode())
    return h.hexdigest()


@dataclass
class TiledKernel:
    """The result of :func:`limit_tiles`: per output its values and errors (arrays or memory maps),
    methods, warnings, and the tiles computed in this call."""
    values: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    methods: dict[str, str]
    warnings: list[str]
    computed: int


def limit_tiles(spec: LimitSpec, out: str | Path | None = None, tile_pairs: int = TILE_PAIRS,
                scheduler: object = None, progress: bool | None = None) -> TiledKernel:
    """The limit kernels tile by tile (see the module docstring): into memory (after a memory
    check), or into ``out`` (a :class:`.kernel_dir.KernelDir`: locked, checked and resumed);
    tiles locally or on the Dask ``scheduler``."""
    check_scheduler(scheduler)
    N = spec.X.shape[0]
    tiles = tile_rows(N, tile_pairs)
    names = spec.names
    arrays = names + [f"{n}_error" for n in names]
    if out is None:
        check_memory(len(arrays) * N * N * 8, f"the in-memory limit kernel of N = {N} inputs "
                     f"({len(arrays)} N×N float64 arrays)", "write it out of core instead: out='DIR/' "
                     "(tpc kernel --out DIR/)")
        sink = ArraySink(arrays, N)
        methods: dict[str, str] = {}
        warnings: list[str] = []
        with ProgressBar(len(tiles), progress, desc="kernel tiles", unit="tile") as bar:
            for tile in tile_results(spec, tiles, scheduler, sink):
                write_tile(sink, tile)
                methods = merge_methods(methods, tile.methods)
                warnings += tile.warnings
                bar.advance()
        for name in arrays:
            sink.mirror(name)
        return TiledKernel({n: sink.arrays[n] for n in names}, {n: sink.arrays[f"{n}_error"] for n in names},
                           {n: methods.get(n, "exact") for n in names}, unique(warnings), len(tiles))
    kd = KernelDir.open(out, Manifest(N, fingerprint(spec, tiles), tiles, arrays))
    try:
        todo = [t for t in tiles if t not in kd.done]
        sink = FileSink(kd)
        with ProgressBar(len(tiles), progress, desc="kernel tiles", unit="tile") as bar:
            for _ in kd.done:
                bar.advance()
            for tile in tile_results(spec, todo, scheduler, sink):
                kd.record(TileEntry(tile.rows, write_tile(sink, tile), tile.methods, tile.warnings))
                bar.advance()
        if not kd.manifest.complete:
            kd.finish(band_rows(N), {name: sink.mirror(name) for name in arrays})
        got = {name: np.load(path, mmap_mode="r") for name, path in kd.paths.items()}
    except OSError as err:
        raise io_error(kd.directory, err) from None
    finally:
        kd.close()
    entries = [kd.done[t] for t in tiles]
    methods = {}
    for e in entries:
        methods = merge_methods(methods, e.methods)
    warnings = unique([w for e in entries for w in e.warnings]) + kd.notes
    return TiledKernel({n: got[n] for n in names}, {n: got[f"{n}_error"] for n in names},
                       {n: methods.get(n, "exact") for n in names}, warnings, len(todo))


def merge_methods(old: dict[str, str], new: dict[str, str]) -> dict[str, str]:
    """Per output, the least exact of two methods (exact < quadrature < qmc)."""
    return {name: max(old.get(name, "exact"), new.get(name, "exact"), key=RANK.__getitem__)
            for name in {**old, **new}}


def unique(items: list[str]) -> list[str]:
    """``items`` without repeats, in order."""
    return list(dict.fromkeys(items))


def check_memory(need: int, what: str, advice: str) -> None:
    """A TPLimitError (exit 2) when ``need`` bytes exceed the memory a run may take
    (:func:`..finite.memory.default_limit`: 90% of what is available)."""
    limit = default_limit()
    if need > limit:
        raise TPLimitError(f"{what} needs about {need / 2**30:.2f} GiB, more than the {limit / 2**30:.2f} GiB "
                           f"available; {advice}")


def tile_results(spec: LimitSpec, todo: list[tuple[int, int]], scheduler: object,
                 sink: Sink | None = None) -> Iterator[TileValues]:
    """:func:`limit_tile` of every tile in ``todo``: here, in order, or on the cluster as they
    finish.  Into an :class:`ArraySink` here, a tile is computed in place (its values are the
    sink's own rows)."""
    if scheduler is None:
        for rows in todo:
            if isinstance(sink, ArraySink):
                values = {name: sink.rows_view(name, rows) for name in spec.names}
                errors = {name: sink.rows_view(f"{name}_error", rows) for name in spec.names}
                band = limit_band(spec, rows, values, errors)
                yield TileValues(rows, values, errors, band.methods, band.warnings)
            else:
                yield limit_tile(spec, rows)
        return
    for _, tile in stream_items(scheduler, shared_spec(spec), limit_tile, todo):
        yield tile


def shared_spec(spec: LimitSpec) -> Callable[[], LimitSpec]:
    """The builder a worker calls for the spec (the spec itself, sent once to every worker)."""
    return SpecHolder(spec)


class SpecHolder:
    """A picklable ``() -> spec``."""

    def __init__(self, spec: LimitSpec) -> None:
        self.spec = spec

    def __call__(self) -> LimitSpec:
        return self.spec


def write_finite(directory: str | Path, means: dict[str, np.ndarray], stds: dict[str, np.ndarray]) -> None:
    """Finite-width kernels (computed in memory) as ``DIR/NAME.npy`` and ``DIR/NAME_std.npy``
    (each written under a temporary name, then renamed)."""
    directory = make_directory(directory)
    try:
        for name in means:
            for path, array in ((directory / f"{name}.npy", means[name]), (directory / f"{name}_std.npy", stds[name])):
                tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp.npy")    # one per process
                np.save(tmp, array)
                os.replace(tmp, path)
    except OSError as err:
        raise io_error(directory, err, resumable=False) from None


def is_directory(out: object) -> bool:
    """``out`` names a directory: a path ending in '/' (or os.sep), or an existing directory."""
    text = os.fspath(out) if isinstance(out, (str, os.PathLike)) else None
    return text is not None and (text.endswith(("/", os.sep)) or Path(text).is_dir())


def bands(K: np.ndarray, elements: int = BAND_ELEMENTS) -> Iterator[tuple[int, np.ndarray]]:
    """(r0, rows r0… of K) by bands of about ``elements`` entries; a memory-mapped K is read
    through a short-lived map per band, so its pages do not accumulate in this process."""
    N, M = K.shape
    band = max(1, elements // max(M, 1))
    mapped = isinstance(K, np.memmap) and K.filename is not None and K.flags.c_contiguous
    for r0 in range(0, N, band):
        r1 = min(N, r0 + band)
        if mapped:
            m = np.memmap(K.filename, dtype=K.dtype, mode="r", offset=K.offset + r0 * M * K.itemsize,
                          shape=(r1 - r0, M))
            yield r0, np.array(m)
            del m
        else:
            yield r0, K[r0:r1]


def large_summary(mean: np.ndarray, spread: np.ndarray) -> tuple[float, float, float]:
    """(diagonal mean, off-diagonal mean, max spread) of an N×N kernel, band by band."""
    N = mean.shape[0]
    total = trace = 0.0
    for r0, rows in bands(mean):
        total += float(rows.sum())
        trace += float(np.trace(rows, offset=r0))
    top = max(float(np.max(rows)) for _, rows in bands(spread))
    off = (total - trace) / (N * N - N) if N > 1 else float("nan")
    return trace / N, off, top
