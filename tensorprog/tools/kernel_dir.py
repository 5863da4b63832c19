"""An out-of-core kernel directory (``tp.kernel(..., out="DIR/")``): what a run writes there, and
what a rerun checks before it trusts anything.

Files, N×N float64 arrays first:
  * ``DIR/NAME.npy.partial`` while the run is not complete, renamed to ``DIR/NAME.npy`` at the end
    (so a crashed run never leaves a file that looks finished); created at full size with
    ``os.posix_fallocate`` where available, so the disk space is reserved up front (a sparse file
    on a full disk kills the process with SIGBUS at the first page it cannot back);
  * ``DIR/tiles.json``: the manifest (data and template fingerprint, tiles, arrays, whether the run
    is complete, and then a CRC-32 of every band of rows of every array), replaced atomically;
  * ``DIR/tiles.log``: one JSON line per finished tile, appended and fsynced after the tile's data
    is flushed: its rows, a checksum (CRC-32) of each array's rows of the upper triangle, its
    methods and warnings.  A torn last line is ignored (that tile is computed again);
  * ``DIR/tiles.lock``: an exclusive ``flock`` held for the whole run (it dies with the process,
    so a crashed run leaves no stale lock); a second run on the directory is refused.

A rerun trusts nothing unchecked: every array's header (dtype, shape, order) and size must be the
manifest's — otherwise it is refused (exit 2) with the file to remove, never written into; a
removed array is created again and every tile computed again; a finished tile whose rows no
longer match their checksums is computed again (and said so); a complete directory is checked band by
band, and only if a band differs are the tiles checked (and the bad ones recomputed, the mirror
redone).  Files of these names that the manifest does not account for are never overwritten.
An OSError while writing (a full disk) is a usage error that says the run can be resumed.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import TPUsageError

try:                                        # POSIX; elsewhere runs are not locked
    import fcntl
except ImportError:                         # pragma: no cover
    fcntl = None

MANIFEST = "tiles.json"
JOURNAL = "tiles.log"
LOCK = "tiles.lock"
PARTIAL = ".partial"
VERSION = 2
DTYPE = np.dtype("<f8")


def digest(block: np.ndarray) -> str:
    """CRC-32 of a block's bytes in C order (a checksum against accidents — truncation, zeroed or
    changed pages, another file — not against tampering; about 3× faster than SHA-256 here)."""
    return f"{zlib.crc32(np.ascontiguousarray(block).data):08x}"


def tile_digest(block: np.ndarray) -> str:
    """The CRC-32 of a tile's rows [r0, r1), columns r0…N−1, on and above the diagonal only:
    row k from column k on (below it the mirror pass writes later), row after row, no copy."""
    crc = 0
    for k in range(block.shape[0]):
        crc = zlib.crc32(np.ascontiguousarray(block[k, k:]).data, crc)
    return f"{crc:08x}"


def header_bytes(N: int) -> bytes:
    """The .npy header (version 1.0) of an N×N C-ordered float64 array."""
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(DTYPE),
                                               "fortran_order": False, "shape": (N, N)})
    return buf.getvalue()


def file_bytes(N: int) -> int:
    """Size of one N×N float64 .npy file."""
    return len(header_bytes(N)) + N * N * DTYPE.itemsize


@dataclass
class Manifest:
    """``DIR/tiles.json``: the kernel a directory holds, and whether it is complete."""
    N: int
    fingerprint: str
    tiles: list[tuple[int, int]]
    arrays: list[str]
    complete: bool = False
    band_rows: int = 0
    bands: dict[str, list[str]] = field(default_factory=dict)   # complete: per array, per band of rows

    def to_json(self) -> dict:
        return {"version": VERSION, "N": self.N, "fingerprint": self.fingerprint,
                "tiles": [list(t) for t in self.tiles], "arrays": self.arrays, "complete": self.complete,
                "band_rows": self.band_rows, "bands": self.bands, "file_bytes": file_bytes(self.N)}

    @staticmethod
    def from_json(data: object) -> "Manifest":
        """Raises KeyError, TypeError or ValueError on anything but a version-2 manifest."""
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not a version-{VERSION} manifest")
        m = Manifest(int(data["N"]), str(data["fingerprint"]), [(int(a), int(b)) for a, b in data["tiles"]],
                     [str(a) for a in data["arrays"]], bool(data["complete"]), int(data["band_rows"]),
                     {str(k): [str(d) for d in v] for k, v in data["bands"].items()})
        if data.get("file_bytes") != file_bytes(m.N):
            raise ValueError("file_bytes does not match N")
        return m


@dataclass
class TileEntry:
    """A line of ``DIR/tiles.log``: a finished tile."""
    rows: tuple[int, int]
    digests: dict[str, str]
    methods: dict[str, str]
    warnings: list[str]

    def to_json(self) -> dict:
        return {"rows": list(self.rows), "digests": self.digests, "methods": self.methods,
                "warnings": self.warnings}

    @staticmethod
    def from_json(data: dict) -> "TileEntry":
        return TileEntry((int(data["rows"][0]), int(data["rows"][1])),
                         {str(k): str(v) for k, v in data["digests"].items()},
                         {str(k): str(v) for k, v in data["methods"].items()}, [str(w) for w in data["warnings"]])


def io_error(directory: Path, err: OSError, resumable: bool = True) -> TPUsageError:
    """An OSError while writing DIR, as a usage error (saying that a rerun resumes, where it does)."""
    what = "the disk is full" if err.errno in (errno.ENOSPC, errno.EDQUOT) else str(err)
    then = ": it resumes from the tiles already finished" if resumable else ""
    return TPUsageError(f"out: writing {directory} failed ({what}); fix that and rerun the same command{then}")


class KernelDir:
    """An open kernel directory, locked (see the module docstring).  ``done``: the trusted
    finished tiles; ``paths``: where each array is written now (its temporary name until
    complete); ``notes``: what the checks found and repaired."""

    def __init__(self, directory: Path, manifest: Manifest) -> None:
        self.directory = directory
        self.manifest = manifest
        self.done: dict[tuple[int, int], TileEntry] = {}
        self.notes: list[str] = []
        self.lock_file = None
        self.journal = None

    # ---- names --------------------------------------------------------------------------------
    def final(self, name: str) -> Path:
        return self.directory / f"{name}.npy"

    def partial(self, name: str) -> Path:
        return self.directory / f"{name}.npy{PARTIAL}"

    @property
    def paths(self) -> dict[str, Path]:
        """Where every array is now."""
        pick = self.final if self.manifest.complete else self.partial
        return {name: pick(name) for name in self.manifest.arrays}

    # ---- opening ------------------------------------------------------------------------------
    @staticmethod
    def open(directory: str | Path, manifest: Manifest) -> "KernelDir":
        """Create or resume ``directory`` for the kernel ``manifest`` describes (fresh: not
        complete, no bands); every check of the module docstring; locked until :meth:`close`."""
        kd = KernelDir(make_directory(directory), manifest)
        kd.lock()
        try:
            kd.resume()
        except OSError as err:
            kd.close()
            raise io_error(directory, err) from None
        except BaseException:
            kd.close()
            raise
        return kd

    def lock(self) -> None:
        """Take ``DIR/tiles.lock`` (exclusive, non-blocking); another live run holds it: refused."""
        path = self.directory / LOCK
        try:
            self.lock_file = open(path, "a+")
        except OSError as err:
            raise TPUsageError(f"out: cannot write in {self.directory} ({err.strerror or err}); "
                               "choose a directory you can write to") from None
        if fcntl is None:
            return
        try:
            fcntl.flock(self.lock_file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.lock_file.seek(0)
            pid = self.lock_file.read().strip() or "?"
            self.lock_file.close()
            self.lock_file = None
            raise TPUsageError(f"out: {self.directory} is in use by another run (process {pid}); wait for "
                               "it to finish, or choose another directory") from None
        self.lock_file.seek(0)
        self.lock_file.truncate()
        self.lock_file.write(str(os.getpid()))
        self.lock_file.flush()

    def close(self) -> None:
        """Release the journal and the lock."""
        if self.journal is not None:
            self.journal.close()
            self.journal = None
        if self.lock_file is not None:
            self.lock_file.close()                  # releases the flock
            self.lock_file = None

    def read_manifest(self) -> Manifest | None:
        path = self.directory / MANIFEST
        if not path.exists():
            return None
        try:
            return Manifest.from_json(json.loads(path.read_text()))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as err:
            raise TPUsageError(f"out: {path} is not a readable kernel manifest (version {VERSION}) "
                               f"({type(err).__name__}: {err}); remove {self.directory} (or its tiles.* "
                               "and *.npy* files) to compute the kernel again") from None

    def resume(self) -> None:
        """Fresh directory: create it; else check the manifest, the files and the finished tiles."""
        old = self.read_manifest()
        if old is None:
            self.start()
        else:
            self.reopen(old)
        self.open_journal()

    def start(self) -> None:
        """A directory without a manifest: no file of our names in it, room for the arrays; then
        the manifest, an empty journal and the arrays (temporary names), in that order."""
        arrays = self.manifest.arrays
        self.refuse_foreign([self.final(a) for a in arrays] + [self.partial(a) for a in arrays]
                            + [self.directory / JOURNAL])
        self.check_space(arrays)
        self.write_manifest()
        (self.directory / JOURNAL).write_bytes(b"")
        self.create(arrays)

    def reopen(self, old: Manifest) -> None:
        """A directory with a manifest: the same kernel, files as the manifest says, then the
        finished tiles that still hold (see the module docstring)."""
        want = self.manifest
        if (old.N, old.fingerprint, old.tiles, old.arrays) != (want.N, want.fingerprint, want.tiles, want.arrays):
            raise TPUsageError(f"out: {self.directory} holds another kernel (other data, template or tiles); "
                               "remove it or choose another directory")
        self.manifest = old
        if old.complete:
            for name in old.arrays:                 # a run stopped while renaming: finish
                if not self.final(name).exists() and self.partial(name).exists():
                    os.replace(self.partial(name), self.final(name))
        else:
            self.refuse_foreign([self.final(a) for a in old.arrays])
        missing = [name for name, path in self.paths.items() if not path.exists()]
        for name, path in self.paths.items():
            if name not in missing:
                check_file(path, old.N)
        entries = read_journal(self.directory / JOURNAL)
        if old.complete and not missing and self.bands_hold() and all(t in entries for t in old.tiles):
            self.done = {t: entries[t] for t in old.tiles}
            return
        if old.complete:
            self.reopen_partial()
        if missing:
            self.check_space(missing)
            self.create(missing)
            self.notes.append(f"out: {', '.join(str(self.paths[m]) for m in missing)} created again: "
                              "every tile is computed again")
            entries = {}
        tiles = set(old.tiles)
        self.done = {t: e for t, e in entries.items() if t in tiles and self.tile_holds(e)}
        bad = [t for t in entries if t in tiles and t not in self.done]
        if bad:
            self.notes.append(f"out: {len(bad)} finished tile(s) of {self.directory} no longer matched their "
                              "checksums and were computed again")

    def reopen_partial(self) -> None:
        """A complete directory to be written again: back to temporary names, then not complete."""
        for name in self.manifest.arrays:
            if self.final(name).exists():
                os.replace(self.final(name), self.partial(name))
        self.manifest.complete, self.manifest.band_rows, self.manifest.bands = False, 0, {}
        self.write_manifest()

    def refuse_foreign(self, paths: list[Path]) -> None:
        """Files of our names that the manifest does not account for: refused, not overwritten."""
        there = [p for p in paths if p.exists() or p.is_symlink()]
        if there:
            raise TPUsageError(f"out: {there[0]} exists but was not written by this run ({self.directory} "
                               f"has no manifest listing it): tpc kernel does not overwrite it; move it away "
                               "or choose another directory")

    def check_space(self, names: list[str]) -> None:
        """Refuse (with the bytes needed) when the files of ``names`` would not fit on the disk."""
        need = len(names) * file_bytes(self.manifest.N)
        free = shutil.disk_usage(self.directory).free
        if need > free:
            raise TPUsageError(f"out: the kernel needs {need:,} bytes ({human(need)}) in {self.directory} "
                               f"for {len(names)} N×N float64 arrays (N = {self.manifest.N}), and "
                               f"{free:,} bytes ({human(free)}) are free; free space or choose "
                               "another directory")

    def create(self, names: list[str]) -> None:
        """The arrays of ``names`` at their temporary names, zero, at full size with the space
        reserved (posix_fallocate; a file system without it gets a sparse file)."""
        N = self.manifest.N
        for name in names:
            path = self.paths[name]
            try:
                with open(path, "wb") as f:
                    f.write(header_bytes(N))
                    reserve(f, file_bytes(N))
            except OSError:
                path.unlink(missing_ok=True)        # no short file left behind: the rerun creates it again
                raise

    # ---- checks -------------------------------------------------------------------------------
    def rows(self, name: str, r0: int, r1: int, mode: str = "r") -> np.memmap:
        """Rows [r0, r1) of an array, memory-mapped."""
        N = self.manifest.N
        return np.memmap(self.paths[name], dtype=DTYPE, mode=mode,
                         offset=len(header_bytes(N)) + r0 * N * DTYPE.itemsize, shape=(r1 - r0, N))

    def tile_holds(self, entry: TileEntry) -> bool:
        """The tile's rows of the upper triangle still have the digests it was written with."""
        r0, r1 = entry.rows
        for name in self.manifest.arrays:
            m = self.rows(name, r0, r1)
            ok = entry.digests.get(name) == tile_digest(m[:, r0:])
            del m
            if not ok:
                return False
        return True

    def bands_hold(self) -> bool:
        """A complete directory: every band of rows of every array has its recorded digest."""
        m, N = self.manifest, self.manifest.N
        if m.band_rows < 1 or set(m.bands) != set(m.arrays):
            return False
        starts = list(range(0, N, m.band_rows))
        for name in m.arrays:
            if len(m.bands[name]) != len(starts):
                return False
            for r0, want in zip(starts, m.bands[name]):
                rows = self.rows(name, r0, min(N, r0 + m.band_rows))
                ok = digest(rows) == want
                del rows
                if not ok:
                    return False
        return True

    # ---- writing ------------------------------------------------------------------------------
    def write_manifest(self) -> None:
        write_json(self.directory / MANIFEST, self.manifest.to_json())

    def open_journal(self) -> None:
        path = self.directory / JOURNAL
        self.journal = open(path, "ab")
        if path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            self.journal.write(b"\n")               # after a torn line

    def record(self, entry: TileEntry) -> None:
        """A finished tile (its data flushed) into the journal, fsynced."""
        self.journal.write(json.dumps(entry.to_json()).encode() + b"\n")
        self.journal.flush()
        os.fsync(self.journal.fileno())
        self.done[entry.rows] = entry

    def finish(self, band_rows: int, bands: dict[str, list[str]]) -> None:
        """Complete: the bands' digests into the manifest, then the arrays to their final names."""
        for path in self.paths.values():
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        self.manifest.complete, self.manifest.band_rows, self.manifest.bands = True, band_rows, bands
        self.write_manifest()
        for name in self.manifest.arrays:
            os.replace(self.partial(name), self.final(name))
        fsync_directory(self.directory)


def human(size: int) -> str:
    """Bytes in binary units: 2.75 MiB, 1.16 TiB."""
    units = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
    k = 0
    value = float(size)
    while value >= 1024 and k < len(units) - 1:
        value /= 1024
        k += 1
    return f"{value:.2f} {units[k]}" if k else f"{size} bytes"


def reserve(f, size: int) -> None:
    """Extend the open file ``f`` to ``size`` bytes with its blocks allocated (posix_fallocate), or
    sparse where the platform or file system cannot (ENOSPC and other errors propagate)."""
    f.flush()
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(f.fileno(), 0, size)
            return
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                raise
    f.truncate(size)


def check_file(path: Path, N: int) -> None:
    """``path`` is an N×N C-ordered float64 .npy file of the full size, else a TPUsageError."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
            offset = f.tell()
        size = path.stat().st_size
    except (OSError, ValueError, SyntaxError) as err:
        raise TPUsageError(f"out: {path} is not a readable .npy file ({err}); remove it and rerun: its "
                           "tiles are computed again") from None
    want = offset + N * N * DTYPE.itemsize
    if (tuple(shape), bool(fortran), dtype) != ((N, N), False, DTYPE) or size != want:
        raise TPUsageError(f"out: {path} is not the file this run wrote (it holds {dtype} {tuple(shape)}"
                           f"{', Fortran order' if fortran else ''}, {size:,} bytes; the run writes float64 "
                           f"({N}, {N}), {want:,} bytes): remove it and rerun: its tiles are computed again")


def read_journal(path: Path) -> dict[tuple[int, int], TileEntry]:
    """The finished tiles of ``DIR/tiles.log`` (the last line of a tile wins; torn lines are skipped)."""
    entries: dict[tuple[int, int], TileEntry] = {}
    if not path.exists():
        return entries
    for line in path.read_bytes().splitlines():
        try:
            entry = TileEntry.from_json(json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError, IndexError):
            continue
        entries[entry.rows] = entry
    return entries


def write_json(path: Path, data: dict) -> None:
    """``data`` to ``path`` atomically (a temporary file, fsynced, then renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_directory(directory: Path) -> None:
    """Make renames in ``directory`` durable (where directories can be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def make_directory(directory: str | Path) -> Path:
    """``directory``, created if needed (an OSError is a TPUsageError)."""
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise TPUsageError(f"out: cannot create the directory {directory} ({err.strerror or err}); "
                           "choose a directory you can write to") from None
    return directory
