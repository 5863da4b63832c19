"""Dask clusters and out-of-core kernels: a LocalCluster of 2 worker processes on loopback gives
the local run's bits (execute, converge, finite and limit kernels); a scheduler that cannot be
reached is a usage error; tiled kernels written through memory maps equal the in-memory ones;
an interrupted tiled run resumes with only the missing tiles."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPUsageError
from tensorprog.finite import cluster, options
from tensorprog.tools import tiles
from tensorprog.tools.converge import converge

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parent.parent
RELU = ROOT / "programs" / "kernels" / "relu_mlp.tp"
NNGP = ROOT / "programs" / "relu_nngp.tp"


@pytest.fixture(scope="module")
def address():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as lc:
        yield lc.scheduler_address
        cluster.close_clients()


@pytest.fixture(scope="module")
def data():
    X = np.random.default_rng(4).standard_normal((23, 5))
    X[5] = X[2]                     # x ≡ y and x ≡ −y pairs: their own batches
    X[9] = -X[1]
    return X


def test_execute_on_cluster_is_bit_identical(address):
    p = tp.load(NNGP)
    local = p.execute(n=128, trials=5, seed=7)
    remote = p.execute(n=128, trials=5, seed=7, scheduler=address)
    for name, o in local.outputs.items():
        assert remote.outputs[name].values == o.values


def test_converge_on_cluster_is_bit_identical(address):
    p = tp.load(NNGP)
    local = converge(p, [32, 64], trials=3, seed=2, progress=False)
    with options(scheduler=address):
        remote = converge(p, [32, 64], trials=3, seed=2, progress=False)
    for name, o in local.outputs.items():
        assert remote.outputs[name].values == o.values


def test_finite_kernel_on_cluster_is_bit_identical(address, data):
    local = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1)
    remote = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1, scheduler=address)
    for name, k in local.outputs.items():
        assert np.array_equal(remote.outputs[name].mean, k.mean)
        assert np.array_equal(remote.outputs[name].std, k.std)


def same_kernels(got, want) -> None:
    """Equal kernels, bit for bit (every entry is computed by the same operations wherever it is)."""
    for name, k in want.outputs.items():
        assert got.outputs[name].method == k.method
        for a, b in ((got.outputs[name].mean, k.mean), (got.outputs[name].error, k.error)):
            assert np.array_equal(a, b)


def test_limit_kernel_tiles_on_cluster_are_bit_identical(address, data, tmp_path):
    whole = tp.kernel(RELU, data, L=3)
    local = tp.kernel(RELU, data, L=3, scheduler=None, tile_pairs=40, out=f"{tmp_path}/local/")
    remote = tp.kernel(RELU, data, L=3, scheduler=address, tile_pairs=40)
    ooc = tp.kernel(RELU, data, L=3, scheduler=address, tile_pairs=40, out=f"{tmp_path}/k/")
    one = tp.kernel(RELU, data, L=3, scheduler=address, tile_pairs=10 ** 6)
    same_kernels(remote, local)          # the same tiles: the same bits anywhere
    same_kernels(ooc, local)
    same_kernels(one, whole)             # one tile or many, in memory or out of core: the same bits
    same_kernels(local, whole)


def test_unreachable_scheduler_is_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT", 1.0)
    start = time.perf_counter()
    with pytest.raises(TPUsageError, match="cannot reach the Dask scheduler"):
        tp.load(NNGP).execute(n=16, scheduler="tcp://127.0.0.1:9")
    assert main(["execute", str(NNGP), "-n", "16", "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "cannot reach the Dask scheduler" in capsys.readouterr().err
    assert time.perf_counter() - start < 20
    with pytest.raises(TPUsageError, match="scheduler must be"):
        tp.load(NNGP).execute(n=16, scheduler=3)


def test_out_of_core_kernel_equals_in_memory(data, tmp_path):
    whole = tp.kernel(RELU, data, L=3)
    got = tp.kernel(RELU, data, L=3, out=f"{tmp_path}/k/", tile_pairs=50)
    same_kernels(got, whole)
    for name, k in got.outputs.items():
        assert np.array_equal(np.load(tmp_path / "k" / f"{name}.npy"), k.mean)
        assert np.array_equal(np.load(tmp_path / "k" / f"{name}_error.npy"), k.error)
        assert np.array_equal(k.mean, k.mean.T)
    for name, row in got.summary()["outputs"].items():
        want = whole.summary()["outputs"][name]
        assert row["method"] == want["method"]
        assert [row[k] for k in ("diag_mean", "offdiag_mean")] == pytest.approx(
            [want[k] for k in ("diag_mean", "offdiag_mean")], rel=1e-12)
    np.save(tmp_path / "X.npy", data)
    assert main(["kernel", str(RELU), "--inputs", str(tmp_path / "X.npy"), "--out", f"{tmp_path}/cli/",
                 "-D", "L=3", "--tile-pairs", "50"]) == 0
    assert np.array_equal(np.load(tmp_path / "cli" / "ntk.npy"), got.outputs["ntk"].mean)
    assert tiles.tile_rows(23, 50) == [tuple(t) for t in json.loads((tmp_path / "cli" / "tiles.json").read_text())["tiles"]]


def test_finite_width_out_directory(data, tmp_path):
    got = tp.kernel(RELU, data[:8], L=2, n=32, trials=2, out=f"{tmp_path}/f/")
    assert np.array_equal(np.load(tmp_path / "f" / "nngp.npy"), got.outputs["nngp"].mean)
    assert np.array_equal(np.load(tmp_path / "f" / "nngp_std.npy"), got.outputs["nngp"].std)
    with pytest.raises(TPUsageError, match="not a directory"):
        tp.kernel(RELU, data[:8], L=2, out=str(tmp_path / "k.npz"))


def journal(directory: Path) -> list[list[int]]:
    """The finished tiles of an out-of-core directory, as its journal lists them."""
    return [json.loads(line)["rows"] for line in (directory / "tiles.log").read_text().splitlines()]


def test_interrupted_tiled_run_resumes(data, tmp_path, monkeypatch):
    whole = tp.kernel(RELU, data, L=3)
    out = f"{tmp_path}/k/"
    real, calls = tiles.limit_tile, []

    def failing(spec, rows):
        if len(calls) == 3:
            raise KeyboardInterrupt
        calls.append(rows)
        return real(spec, rows)

    monkeypatch.setattr(tiles, "limit_tile", failing)
    with pytest.raises(KeyboardInterrupt):
        tp.kernel(RELU, data, L=3, out=out, tile_pairs=40)
    manifest = json.loads((tmp_path / "k" / "tiles.json").read_text())
    done = journal(tmp_path / "k")
    assert len(done) == 3 and not manifest["complete"]
    n_tiles = len(manifest["tiles"])

    def counting(spec, rows):
        calls.append(rows)
        return real(spec, rows)

    calls.clear()
    monkeypatch.setattr(tiles, "limit_tile", counting)
    got = tp.kernel(RELU, data, L=3, out=out, tile_pairs=40)
    assert len(calls) == n_tiles - 3 and set(map(tuple, done)).isdisjoint(calls)
    same_kernels(got, whole)
    full = {name: np.array(k.mean) for name, k in got.outputs.items()}

    # a tile lost after the fact (its block zeroed, its journal line removed): only it is computed again
    lines = (tmp_path / "k" / "tiles.log").read_text().splitlines(keepends=True)
    lost = json.loads(lines.pop(1))["rows"]
    (tmp_path / "k" / "tiles.log").write_text("".join(lines))
    K = np.load(tmp_path / "k" / "ntk.npy", mmap_mode="r+")
    K[lost[0]:lost[1], lost[0]:] = 0                 # the tile's rows of the upper triangle
    K[lost[0]:, lost[0]:lost[1]] = 0                 # and their mirror
    K.flush()
    del K
    calls.clear()
    got = tp.kernel(RELU, data, L=3, out=out, tile_pairs=40)
    assert calls == [tuple(lost)]
    for name, K in full.items():
        assert np.array_equal(np.load(tmp_path / "k" / f"{name}.npy"), K)
    with pytest.raises(TPUsageError, match="holds another kernel"):
        tp.kernel(RELU, data[:-1], L=3, out=out, tile_pairs=40)
