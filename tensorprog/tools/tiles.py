"""Dataset kernels tile by tile: out of core (``out="DIR/"``) and on a Dask cluster (``scheduler``).

The N(N+1)/2 pairs i ≤ j are cut into tiles of whole rows of the upper triangle: tile
[r0, r1) holds the pairs (i, j) with r0 ≤ i < r1 and j ≥ i (at most ``tile_pairs`` of them,
at least one row).  Each tile goes through the vectorized limit path (the compiled recurrence
in batch mode over the tile's pairs, with the pairs of correlation exactly ±1 as their own
batches, as for the whole kernel), locally or as one Dask task.

The Gram entries q_ij = Σ_k X_ik X_jk / d are summed in one fixed order (k = 0, 1, …, one
product and one addition at a time, no BLAS), so every entry has the same bits whichever
tile or whole matrix it is computed in (:func:`gram`, :func:`gram_pairs`); with closed forms
evaluated elementwise, a tiled kernel is bit-identical to the in-memory one.

Out of core, each output is ``DIR/NAME.npy`` (and ``DIR/NAME_error.npy``), created at full size
and filled through memory maps: a tile writes its rows of the upper triangle, and a last pass
mirrors the upper triangle into the lower one, band by band.  Memory is bounded by a tile and a
band (:data:`BAND_ELEMENTS`), not by N².  ``DIR/tiles.json`` (replaced atomically after each
tile's data is flushed) lists the tiles done, so that a rerun after an interruption computes
only the others; it also holds a fingerprint of the data and the template, and a directory
holding another kernel is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from .. import ir
from ..errors import TPUsageError
from ..expect.budget import Budget
from ..finite.cluster import check_scheduler, stream_items
from ..finite.progress import ProgressBar
from ..limit.compiler import compile_program

#: pairs per tile by default (about 0.5 M: a few hundred MB of work arrays for deep templates)
TILE_PAIRS = 1 << 19
#: elements of one band of the mirror pass (128 MiB of float64)
BAND_ELEMENTS = 1 << 24
#: the manifest of an out-of-core kernel directory
MANIFEST = "tiles.json"
RANK = {"exact": 0, "quadrature": 1, "qmc": 2}


def gram(X: np.ndarray) -> np.ndarray:
    """q = X Xᵀ / d, every entry summed over k = 0, 1, … in order (bit-equal to :func:`gram_pairs`)."""
    q = np.multiply.outer(X[:, 0], X[:, 0])
    for k in range(1, X.shape[1]):
        q += np.multiply.outer(X[:, k], X[:, k])
    q /= X.shape[1]
    return q


def gram_pairs(X: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """q_ab = Σ_k X_ak X_bk / d for the pairs (a, b), with the bits of :func:`gram`."""
    q = X[a, 0] * X[b, 0]
    for k in range(1, X.shape[1]):
        q += X[a, k] * X[b, k]
    q /= X.shape[1]
    return q


def inputs_array(X: np.ndarray) -> np.ndarray:
    """X as a finite float64 (N, d) array (else a TPUsageError)."""
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 1 or not np.all(np.isfinite(X)):
        raise TPUsageError("the inputs must be a finite array of shape (N, d)")
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


def tile_pairs_of(r0: int, r1: int, N: int) -> tuple[np.ndarray, np.ndarray]:
    """The pairs (i, j) of tile [r0, r1): r0 ≤ i < r1, i ≤ j < N, row by row (np.triu_indices order)."""
    rows = np.arange(r0, r1)
    i = np.repeat(rows, N - rows)
    j = np.concatenate([np.arange(r, N) for r in rows])
    return i, j


@dataclass(frozen=True)
class LimitSpec:
    """What every tile of a limit kernel shares: the template (IR, input group g, scale s, shift b:
    the pair's covariance is s·q + b), the data, tol."""
    program: ir.Program
    group: int
    scale: float
    shift: float
    X: np.ndarray
    tol: float


@dataclass
class TileValues:
    """One tile's results: per output, values and error bounds of its pairs; methods; warnings."""
    rows: tuple[int, int]
    values: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    methods: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def limit_tile(spec: LimitSpec, rows: tuple[int, int]) -> TileValues:
    """The limit kernels of the pairs of tile ``rows``: per class (x ≡ y, x ≡ −y, the rest) one
    batch through the compiled recurrence with covariances s·[[q_ii, q_ij], [q_ij, q_jj]] + b
    (computed as ``kernel.first_layer_cov`` does, so the bits agree)."""
    N = spec.X.shape[0]
    i, j = tile_pairs_of(rows[0], rows[1], N)
    qii, qjj, qij = gram_pairs(spec.X, i, i), gram_pairs(spec.X, j, j), gram_pairs(spec.X, i, j)
    names = [o.name for o in spec.program.outputs]
    values = {name: np.empty(len(i)) for name in names}
    errors = {name: np.empty(len(i)) for name in names}
    methods: dict[str, set[str]] = {name: set() for name in names}
    warnings: list[str] = []
    for _, part in singularity_classes(qii, qjj, qij, i, j):
        s, b = spec.scale, spec.shift
        covs = np.stack([np.stack([s * qii[part] + b, s * qij[part] + b], -1),
                         np.stack([s * qij[part] + b, s * qjj[part] + b], -1)], -2)
        lim = compile_program(spec.program, budget=Budget(tol=spec.tol), batch_covs={spec.group: covs}).limit()
        for name, v in lim.outputs.items():
            values[name][part] = v.value
            errors[name][part] = v.error
            methods[name].add(v.method)
        warnings += [w for w in lim.warnings if w not in warnings]
    return TileValues(rows, values, errors, {n: max(m, key=RANK.__getitem__) for n, m in methods.items()},
                      warnings)


def singularity_classes(qii: np.ndarray, qjj: np.ndarray, qij: np.ndarray, i: np.ndarray,
                        j: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Pairs split into x ≡ y (correlation ≥ 1 − 1e-12, or i = j), x ≡ −y and the rest, as (kind,
    indices): each class is compiled as its own batch, so the exact singular structure (a
    correlation of exactly ±1) reaches the closed forms."""
    norm = np.sqrt(qii * qjj)
    r = np.divide(qij, norm, out=np.zeros_like(norm), where=norm > 0)
    same, opposite = (r >= 1 - 1e-12) | (i == j), r <= -1 + 1e-12
    rest = ~(same | opposite)
    return [(kind, np.nonzero(m)[0]) for kind, m in (("same", same), ("opposite", opposite), ("rest", rest))
            if m.any()]


def upper_block(values: np.ndarray, rows: tuple[int, int], N: int) -> np.ndarray:
    """Rows [r0, r1) of the upper triangle, columns r0…N−1, from the tile's pair values (zeros below)."""
    r0, r1 = rows
    i, j = tile_pairs_of(r0, r1, N)
    block = np.zeros((r1 - r0, N - r0))
    block[i - r0, j - r0] = values
    return block


class Sink:
    """Where tiles go: N×N float64 arrays, one per name; rows of the upper triangle, then a mirror."""

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> None:
        raise NotImplementedError

    def mirror(self, name: str) -> None:
        raise NotImplementedError


class ArraySink(Sink):
    """In memory."""

    def __init__(self, names: list[str], N: int) -> None:
        self.arrays = {name: np.zeros((N, N)) for name in names}

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> None:
        self.arrays[name][rows[0]:rows[1], rows[0]:] = block

    def mirror(self, name: str) -> None:
        K = self.arrays[name]
        lower = np.tril_indices(K.shape[0], -1)
        K[lower] = K.T[lower]


class FileSink(Sink):
    """``DIR/NAME.npy`` files of shape (N, N), written through short-lived memory maps of the rows
    a tile or a band touches (so that the pages leave this process with the map)."""

    def __init__(self, directory: Path, names: list[str], N: int, create: bool) -> None:
        self.paths = {name: directory / f"{name}.npy" for name in names}
        self.N = N
        for name, path in self.paths.items():
            if create:
                np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(N, N)).flush()
            elif not path.exists():
                raise TPUsageError(f"out: {path} is missing; remove {directory / MANIFEST} to start again")
        self.offsets = {name: self.header(path) for name, path in self.paths.items()}

    @staticmethod
    def header(path: Path) -> int:
        """Bytes before the data of a .npy file."""
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                np.lib.format.read_array_header_1_0(f)
            else:
                np.lib.format.read_array_header_2_0(f)
            return f.tell()

    def rows_map(self, name: str, r0: int, r1: int) -> np.memmap:
        """Rows [r0, r1) of the array, mapped read-write."""
        return np.memmap(self.paths[name], dtype=np.float64, mode="r+",
                         offset=self.offsets[name] + r0 * self.N * 8, shape=(r1 - r0, self.N))

    def write(self, name: str, rows: tuple[int, int], block: np.ndarray) -> None:
        m = self.rows_map(name, rows[0], rows[1])
        m[:, rows[0]:] = block
        m.flush()
        del m

    def mirror(self, name: str) -> None:
        N = self.N
        band = max(1, BAND_ELEMENTS // N)
        for c0 in range(0, N, band):
            c1 = min(N, c0 + band)
            top = self.rows_map(name, c0, c1)
            square = np.array(top[:, c0:c1])
            top[:, c0:c1] = np.triu(square) + np.triu(square, 1).T
            upper = np.array(top[:, c1:])
            top.flush()
            del top
            if c1 < N:
                below = self.rows_map(name, c1, N)
                below[:, c0:c1] = upper.T
                below.flush()
                del below


def write_tile(sink: Sink, tile: TileValues, N: int) -> None:
    """A tile's values and error bounds into the sink."""
    for name in tile.values:
        sink.write(name, tile.rows, upper_block(tile.values[name], tile.rows, N))
        sink.write(f"{name}_error", tile.rows, upper_block(tile.errors[name], tile.rows, N))


def fingerprint(spec: LimitSpec, tiles: list[tuple[int, int]]) -> str:
    """A digest of the data, the template, tol and the tiles (a directory holds one kernel)."""
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(spec.X, dtype=np.float64).tobytes())
    h.update(repr((spec.X.shape, spec.group, spec.scale, spec.shift, spec.tol, tiles)).encode())
    h.update(repr((spec.program.eqns, spec.program.groups, [o.name for o in spec.program.outputs])).encode())
    return h.hexdigest()


def write_json(path: Path, data: dict) -> None:
    """``data`` to ``path`` atomically (a temporary file, fsynced, then renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


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
    """The limit kernels tile by tile (see the module docstring): into memory, or into ``out``
    (a directory; resumed from its manifest); tiles locally or on the Dask ``scheduler``."""
    check_scheduler(scheduler)
    N = spec.X.shape[0]
    tiles = tile_rows(N, tile_pairs)
    names = [o.name for o in spec.program.outputs]
    arrays = names + [f"{n}_error" for n in names]
    state = {"version": 1, "N": N, "fingerprint": fingerprint(spec, tiles), "tiles": tiles,
             "outputs": names, "done": [], "methods": {}, "warnings": [], "complete": False}
    if out is None:
        sink: Sink = ArraySink(arrays, N)
        manifest = None
    else:
        directory = Path(out)
        directory.mkdir(parents=True, exist_ok=True)
        manifest = directory / MANIFEST
        old = json.loads(manifest.read_text()) if manifest.exists() else None
        if old is not None and old.get("fingerprint") != state["fingerprint"]:
            raise TPUsageError(f"out: {directory} holds another kernel (other data, template or tiles); "
                               f"remove it or choose another directory")
        state = old or state
        sink = FileSink(directory, arrays, N, create=old is None)
        if old is None:
            write_json(manifest, state)
    done = {tuple(r) for r in state["done"]}
    todo = [t for t in tiles if t not in done]
    if todo:
        state["complete"] = False                  # the mirror pass runs again after them
    with ProgressBar(len(tiles), progress, desc="kernel tiles", unit="tile") as bar:
        for _ in done:
            bar.advance()
        for tile in tile_results(spec, todo, scheduler):
            write_tile(sink, tile, N)
            state["done"].append(list(tile.rows))
            for name, method in tile.methods.items():
                old_method = state["methods"].get(name, "exact")
                state["methods"][name] = max(old_method, method, key=RANK.__getitem__)
            state["warnings"] += [w for w in tile.warnings if w not in state["warnings"]]
            if manifest is not None:
                write_json(manifest, state)
            bar.advance()
    if not state["complete"]:
        for name in arrays:
            sink.mirror(name)
        state["complete"] = True
        if manifest is not None:
            write_json(manifest, state)
    if isinstance(sink, ArraySink):
        got = sink.arrays
    else:
        got = {name: np.load(path, mmap_mode="r") for name, path in sink.paths.items()}
    return TiledKernel({n: got[n] for n in names}, {n: got[f"{n}_error"] for n in names},
                       {n: state["methods"].get(n, "exact") for n in names}, state["warnings"], len(todo))


def tile_results(spec: LimitSpec, todo: list[tuple[int, int]], scheduler: object) -> Iterator[TileValues]:
    """:func:`limit_tile` of every tile in ``todo``: here, in order, or on the cluster as they finish."""
    if scheduler is None:
        for rows in todo:
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
    """Finite-width kernels (computed in memory) as ``DIR/NAME.npy`` and ``DIR/NAME_std.npy``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name in means:
        for path, array in ((directory / f"{name}.npy", means[name]), (directory / f"{name}_std.npy", stds[name])):
            tmp = path.with_name(path.name + ".tmp.npy")
            np.save(tmp, array)
            os.replace(tmp, path)


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
