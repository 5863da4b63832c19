"""Dataset kernels never silently wrong, never lost (issue 28): what ``tpc kernel --out DIR/`` trusts
when it resumes (headers, sizes, digests of the finished tiles), its lock, temporary names until
complete, the disk space reserved up front, and I/O or usage problems as exit-2 errors before the
computation.  Small N (12 inputs, 9 tiles) and the ReLU template at depth 2: each test takes seconds.

Exit codes come from ``tensorprog.cli.main`` (what ``python -m tensorprog`` returns); one test runs
a real process."""
from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPLimitError, TPUsageError
from tensorprog.tools import kernel_dir, tiles

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "programs" / "kernels" / "relu_mlp.tp"
ARRAYS = ("nngp", "ntk", "nngp_error", "ntk_error")
TILE_PAIRS = "10"                            # 12 inputs: 78 pairs in 9 tiles


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> tuple[Path, np.ndarray]:
    X = np.random.default_rng(28).standard_normal((12, 3))
    path = tmp_path_factory.mktemp("inputs") / "X.npy"
    np.save(path, X)
    return path, X


@pytest.fixture(scope="module")
def reference(data) -> dict[str, np.ndarray]:
    """The in-memory kernel: what every directory must hold, bit for bit."""
    got = tp.kernel(RELU, data[1], L=2)
    return {**{n: k.mean for n, k in got.outputs.items()}, **{f"{n}_error": k.error for n, k in got.outputs.items()}}


def tpc(capsys, *args: str) -> tuple[int, str]:
    """``tpc ARGS`` in this process: (exit code, stdout + stderr)."""
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def kernel_to(capsys, data, directory: Path, *extra: str) -> tuple[int, str]:
    return tpc(capsys, "kernel", RELU, "--inputs", data[0], "--out", f"{directory}/", "-D", "L=2",
               "--tile-pairs", TILE_PAIRS, *extra)


def holds(directory: Path, reference: dict[str, np.ndarray]) -> bool:
    """The directory's final files are the in-memory kernel, bit for bit, and nothing is left partial."""
    return (all(np.array_equal(np.load(directory / f"{n}.npy"), reference[n]) for n in ARRAYS)
            and not list(directory.glob("*.partial")))


def interrupted(monkeypatch, data, directory: Path, after: int) -> None:
    """A run stopped (KeyboardInterrupt) after ``after`` tiles; ``tiles.limit_tile`` restored."""
    real, calls = tiles.limit_tile, []

    def failing(spec, rows):
        if len(calls) == after:
            raise KeyboardInterrupt
        calls.append(rows)
        return real(spec, rows)
    monkeypatch.setattr(tiles, "limit_tile", failing)
    with pytest.raises(KeyboardInterrupt):
        tp.kernel(RELU, data[1], L=2, out=f"{directory}/", tile_pairs=int(TILE_PAIRS))
    monkeypatch.setattr(tiles, "limit_tile", real)


def counting(monkeypatch) -> list[tuple[int, int]]:
    """The tiles computed from now on."""
    real, calls = tiles.limit_tile, []

    def count(spec, rows):
        calls.append(rows)
        return real(spec, rows)
    monkeypatch.setattr(tiles, "limit_tile", count)
    return calls


# ---- 1. a resume checks what it trusts ----------------------------------------------------------

def test_truncated_file_is_refused_not_zero_extended(capsys, data, reference, tmp_path):
    """Truncated ntk.npy in a complete directory: exit 2 naming the file (a real process), the file
    left as it is; once removed, it is created again and the kernel is right."""
    k = tmp_path / "k"
    assert kernel_to(capsys, data, k)[0] == 0
    size = (k / "ntk.npy").stat().st_size
    os.truncate(k / "ntk.npy", size // 2)
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "kernel", str(RELU), "--inputs", str(data[0]),
                           "--out", f"{k}/", "-D", "L=2", "--tile-pairs", TILE_PAIRS],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"{k / 'ntk.npy'} is not the file this run wrote" in proc.stderr and "remove it" in proc.stderr
    assert (k / "ntk.npy").stat().st_size == size // 2
    (k / "ntk.npy").unlink()
    code, out = kernel_to(capsys, data, k)
    assert code == 0 and "created again" in out
    assert holds(k, reference)


@pytest.mark.parametrize("impostor", ["float32", "fortran", "shape"])
def test_file_of_another_dtype_order_or_shape_is_refused(capsys, data, reference, tmp_path, impostor):
    """A file with another header (even of the very same size: Fortran order) is never written into."""
    k = tmp_path / "k"
    assert kernel_to(capsys, data, k)[0] == 0
    other = {"float32": np.ones((12, 12), np.float32), "fortran": np.asfortranarray(np.ones((12, 12))),
             "shape": np.ones((6, 24))}[impostor]
    np.save(k / "ntk.npy", other)
    before = (k / "ntk.npy").read_bytes()
    code, out = kernel_to(capsys, data, k)
    assert code == 2 and "is not the file this run wrote" in out
    assert (k / "ntk.npy").read_bytes() == before


def test_changed_tiles_are_found_by_their_digests_and_recomputed(capsys, data, reference, tmp_path, monkeypatch):
    """Same size, same header, one value changed: in a complete directory (band digests, 3 rows a
    band here) and in an interrupted one (tile digests), the tile is computed again, and said so."""
    monkeypatch.setattr(tiles, "BAND_ELEMENTS", 36)
    k = tmp_path / "k"
    assert kernel_to(capsys, data, k)[0] == 0
    K = np.load(k / "ntk.npy", mmap_mode="r+")
    K[4, 7] += 1.0                                   # upper triangle: tile (4, 5)
    K.flush()
    del K
    calls = counting(monkeypatch)
    code, out = kernel_to(capsys, data, k)
    assert code == 0 and "1 finished tile(s)" in out and "computed again" in out
    assert calls == [(4, 5)]
    assert holds(k, reference)
    assert len(json.loads((k / "tiles.json").read_text())["bands"]["ntk"]) == 4
    K = np.load(k / "ntk.npy", mmap_mode="r+")
    K[9, 2] = -1.0                                   # lower triangle: only the mirror pass wrote it
    K.flush()
    del K
    calls.clear()
    assert kernel_to(capsys, data, k)[0] == 0
    assert calls == [] and holds(k, reference)

    j = tmp_path / "j"
    interrupted(monkeypatch, data, j, after=5)
    K = np.load(j / "nngp_error.npy.partial", mmap_mode="r+")
    K[2, 11] = 0.0                                   # tile (2, 3), finished
    K.flush()
    del K
    calls = counting(monkeypatch)
    code, out = kernel_to(capsys, data, j)
    assert code == 0 and "1 finished tile(s)" in out
    assert sorted(calls) == [(2, 3), (5, 6), (6, 7), (7, 9), (9, 12)]
    assert holds(j, reference)


# ---- 2. lock, foreign files, temporary names ----------------------------------------------------

def test_directory_in_use_is_refused_and_a_stale_lock_is_not(capsys, data, reference, tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    with open(k / "tiles.lock", "a+") as held:       # another live run holds the lock
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        code, out = kernel_to(capsys, data, k)
        assert code == 2 and "in use by another run" in out
        assert not (k / "tiles.json").exists()
    (k / "tiles.lock").write_text("999999999")       # a dead run's lock file: no flock on it
    assert kernel_to(capsys, data, k)[0] == 0
    assert holds(k, reference)


def test_files_the_run_did_not_write_are_not_overwritten(capsys, data, tmp_path):
    k = tmp_path / "k"
    k.mkdir()
    mine = np.arange(9.0).reshape(3, 3)
    np.save(k / "ntk.npy", mine)
    code, out = kernel_to(capsys, data, k)
    assert code == 2 and "was not written by this run" in out
    assert np.array_equal(np.load(k / "ntk.npy"), mine)
    assert not list(k.glob("*.partial"))


def test_a_crashed_run_leaves_no_finished_looking_file(capsys, data, reference, tmp_path, monkeypatch):
    k = tmp_path / "k"
    interrupted(monkeypatch, data, k, after=3)
    assert not list(k.glob("*.npy")) and sorted(p.name for p in k.glob("*.partial")) == sorted(
        f"{n}.npy.partial" for n in ARRAYS)
    with open(k / "tiles.log", "a") as f:
        f.write('{"rows": [3, 4], "digests": {"nn')   # a line torn by the crash: that tile is redone
    calls = counting(monkeypatch)
    assert kernel_to(capsys, data, k)[0] == 0
    assert len(calls) == 9 - 3 and holds(k, reference)


# ---- 3. disk space ------------------------------------------------------------------------------

def test_disk_space_is_checked_before_files_are_made(capsys, data, tmp_path, monkeypatch):
    free = 1_000
    monkeypatch.setattr(shutil, "disk_usage", lambda path: type("U", (), {"free": free})())
    code, out = kernel_to(capsys, data, tmp_path / "k")
    need = 4 * (128 + 12 * 12 * 8)                   # four 12×12 float64 .npy files
    assert code == 2 and f"needs {need:,} bytes" in out and f"{free:,} bytes" in out
    assert not list((tmp_path / "k").glob("*.partial"))


@pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="no posix_fallocate here")
def test_files_are_not_sparse(tmp_path):
    """The space of every array is allocated when it is created (a sparse file on a full disk is a
    SIGBUS later), unless the file system cannot (then st_blocks says nothing here)."""
    N = 512
    manifest = kernel_dir.Manifest(N, "f", [(0, N)], ["a"])
    kd = kernel_dir.KernelDir.open(tmp_path / "k", manifest)
    kd.close()
    st = (tmp_path / "k" / "a.npy.partial").stat()
    assert st.st_size == kernel_dir.file_bytes(N)
    try:
        probe = tmp_path / "probe"
        with open(probe, "wb") as f:
            os.posix_fallocate(f.fileno(), 0, 1 << 20)
    except OSError:
        pytest.skip("this file system has no fallocate")
    assert st.st_blocks * 512 >= st.st_size


def test_disk_full_while_writing_is_a_resumable_usage_error(capsys, data, reference, tmp_path, monkeypatch):
    real, writes = tiles.FileSink.write, []

    def full(self, name, rows, block):
        writes.append(rows)
        if len(writes) > 9:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, name, rows, block)
    monkeypatch.setattr(tiles.FileSink, "write", full)
    k = tmp_path / "k"
    code, out = kernel_to(capsys, data, k)
    assert code == 2 and "the disk is full" in out and "resumes from the tiles already finished" in out
    monkeypatch.setattr(tiles.FileSink, "write", real)
    calls = counting(monkeypatch)
    assert kernel_to(capsys, data, k)[0] == 0
    assert len(calls) == 9 - 2                       # 2 tiles (4 arrays each) were finished
    assert holds(k, reference)

    def no_room(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_room, raising=False)
    code, out = kernel_to(capsys, data, tmp_path / "f")
    assert code == 2 and "the disk is full" in out
    assert not list((tmp_path / "f").glob("*.partial"))        # no short file left behind


# ---- 4. I/O and usage errors: exit 2, before the computation --------------------------------------

def test_bad_manifest_is_a_usage_error(capsys, data, tmp_path):
    k = tmp_path / "k"
    assert kernel_to(capsys, data, k)[0] == 0
    (k / "tiles.json").write_text('{"version": 2, "N": 12, "tiles": [[0, ')
    code, out = kernel_to(capsys, data, k)
    assert code == 2 and "not a readable kernel manifest" in out
    (k / "tiles.json").unlink()
    (k / "tiles.json").mkdir()                       # unreadable
    code, out = kernel_to(capsys, data, k)
    assert code == 2 and "not a readable kernel manifest" in out


def test_unwritable_out_is_a_usage_error(capsys, data, tmp_path, monkeypatch):
    code, out = kernel_to(capsys, data, Path("/etc/hosts/k"))
    assert code == 2 and "cannot create the directory" in out
    code, out = tpc(capsys, "kernel", RELU, "--inputs", data[0], "--out", "/etc/hosts/k/", "-n", "16")
    assert code == 2 and "cannot create the directory" in out
    if os.geteuid() != 0:                            # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        code, out = kernel_to(capsys, data, ro)
        ro.chmod(0o755)
        assert code == 2 and "cannot write in" in out

    from tensorprog.tools import kernel as kernel_module

    def never(*args, **kwargs):
        raise AssertionError("computed before --out was checked")
    monkeypatch.setattr(kernel_module, "kernel", never)
    for target in (tmp_path / "missing" / "K.npz", tmp_path / "missing" / "K.npy", tmp_path):
        code, out = tpc(capsys, "kernel", RELU, "--inputs", data[0], "--out", target, "-D", "L=2")
        assert code == 2 and "--out:" in out, out


def test_bad_inputs_and_trials_are_usage_errors(capsys, data, tmp_path):
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    np.save(tmp_path / "flat.npy", np.zeros((5, 0)))
    np.save(tmp_path / "none.npy", np.zeros((0, 3)))
    for bad in (empty, tmp_path / "flat.npy", tmp_path / "none.npy"):
        code, out = tpc(capsys, "kernel", RELU, "--inputs", bad, "-D", "L=2")
        assert code == 2 and "--inputs" in out, out
    code, out = tpc(capsys, "kernel", RELU, "--inputs", data[0], "-D", "L=2", "-n", "64", "--trials", "0")
    assert code == 2 and "trials must be a positive integer" in out
    X = data[1]
    for bad in (X + 1j, X[:, :0], np.array([["a", "b"]])):
        with pytest.raises(TPUsageError, match="inputs must be"):
            tp.kernel(RELU, bad, L=2)
    with pytest.raises(TPUsageError, match="inputs must be"):
        tp.kernel(RELU, X + 1j, L=2, n=16)


def test_out_without_suffix_says_the_file_it_wrote(capsys, data, tmp_path):
    code, out = tpc(capsys, "kernel", RELU, "--inputs", data[0], "-D", "L=2", "--out", tmp_path / "noext")
    assert code == 0 and f"saved to {tmp_path / 'noext.npy'}" in out
    assert (tmp_path / "noext.npy").exists() and not (tmp_path / "noext").exists()


def test_kernels_too_large_for_memory_are_refused_before_allocating(capsys, tmp_path):
    X = np.random.default_rng(0).standard_normal((200_000, 2))
    with pytest.raises(TPLimitError, match=r"in-memory limit kernel of N = 200000 .* GiB.*out='DIR/'"):
        tp.kernel(RELU, X, L=2)
    with pytest.raises(TPLimitError, match=r"finite-width kernel of N = 200000 .* GiB"):
        tp.kernel(RELU, X, L=2, n=16)
    np.save(tmp_path / "X.npy", X)
    code, out = tpc(capsys, "kernel", RELU, "--inputs", tmp_path / "X.npy", "-D", "L=2")
    assert code == 2 and "GiB" in out


def test_finite_width_kernels_are_not_written_over_a_limit_directory(capsys, data, reference, tmp_path):
    k = tmp_path / "k"
    assert kernel_to(capsys, data, k)[0] == 0
    code, out = tpc(capsys, "kernel", RELU, "--inputs", data[0], "--out", f"{k}/", "-D", "L=2", "-n", "16")
    assert code == 2 and "holds an out-of-core limit kernel" in out
    assert holds(k, reference)
