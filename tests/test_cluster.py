"""Dask clusters and out-of-core kernels: a LocalCluster of 2 worker processes on loopback gives
the local run's bits (execute, converge, finite and limit kernels), whatever order the trials
finish in; losing every worker that holds the shared data mid-run is recovered from; a
scheduler that cannot be reached, has no workers, or dies mid-run is a usage error of one line;
tiled kernels written through memory maps equal the in-memory ones; an interrupted tiled run
resumes with only the missing tiles."""
from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
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


def late_first(ex, t, *, trials, real, **kw):
    """A kernel trial that finishes later the earlier it is (trial 0 last): arrival order is not
    trial order."""
    time.sleep(0.4 * (trials - 1 - t))
    return real(ex, t, **kw)


def test_finite_kernel_on_cluster_is_bit_identical(address, data, monkeypatch):
    """Each trial's matrices, and mean and std over trials, have the local bits, though the trials
    arrive out of order (on 2 workers: 1, 2, then 0) and a worker's BLAS has one thread."""
    from tensorprog.tools import kernel as kmod
    local = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1)
    monkeypatch.setattr(kmod, "_kernel_trial", functools.partial(late_first, trials=3, real=kmod._kernel_trial))
    remote = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1, scheduler=address)
    for name, k in local.outputs.items():
        assert all(np.array_equal(a, b) for a, b in zip(remote.outputs[name].values, k.values))
        assert np.array_equal(remote.outputs[name].mean, k.mean)
        assert np.array_equal(remote.outputs[name].std, k.std)


def test_finite_kernel_in_worker_processes_is_bit_identical(data):
    """jobs=2 (one BLAS thread each) gives the bits of jobs=1 (this process's BLAS threads)."""
    one = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1)
    with options(jobs=2):
        two = tp.kernel(RELU, data[:12], L=2, n=64, trials=3, seed=1)
    for name, k in one.outputs.items():
        assert all(np.array_equal(a, b) for a, b in zip(two.outputs[name].values, k.values))


def slow_item(store: dict, k: int) -> int:
    """Worker side: item k after (3 − k) × 0.3 s (the first item finishes last)."""
    time.sleep(0.3 * (3 - k))
    return 10 * k + store["offset"]


def test_items_come_back_in_item_order(address):
    """map_items returns results by position, whatever order they arrive in (stream_items shows
    the arrival order really differs)."""
    build = functools.partial(dict, offset=1)
    arrived = [k for k, _ in cluster.stream_items(address, build, slow_item, [0, 1, 2, 3])]
    assert sorted(arrived) == [0, 1, 2, 3] and arrived != [0, 1, 2, 3]
    assert cluster.map_items(address, build, slow_item, [0, 1, 2, 3]) == [1, 11, 21, 31]


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


# ---- failures: workers lost, no workers, a wrong address, the scheduler killed -------------------

def test_losing_every_worker_that_holds_the_shared_data_is_recovered(address):
    """Both workers (each holding the scattered run data) are killed after the first trial: their
    nannies start new ones, the data is sent again, and the trials have the local bits (before:
    FutureCancelledError, exit 3)."""
    from tensorprog.finite.executor import Executor
    from tensorprog.finite.plan import plan_run
    from tensorprog.finite.run import run_one
    plan = plan_run(tp.load(NNGP).ir, 512, 3, np.float64, None)
    client = cluster.client_for(address)
    killed = []

    def kill_all_workers() -> None:
        if not killed:
            killed.extend(client.run(os.getpid).values())
            for pid in killed:
                os.kill(pid, signal.SIGKILL)
    got = cluster.map_items(address, functools.partial(Executor, plan), run_one, list(range(6)), kill_all_workers)
    assert len(killed) == 2
    assert got == [run_one(Executor(plan), t) for t in range(6)]


def test_scheduler_without_workers_is_a_usage_error(monkeypatch):
    monkeypatch.setattr(cluster, "WORKER_TIMEOUT", 1.0)
    with distributed.LocalCluster(n_workers=0, processes=True, host="127.0.0.1", dashboard_address=None) as lc:
        try:
            with pytest.raises(TPUsageError, match="has no workers"):
                tp.load(NNGP).execute(n=16, trials=2, scheduler=lc.scheduler_address)
        finally:
            cluster.close_clients()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tpc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorprog", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


def test_wrong_address_fails_at_once_with_one_line(tmp_path):
    """Nothing listening: exit 2 at once (no wait for CONNECT_TIMEOUT, no traceback of a half-made
    Client); a peer that is no Dask scheduler (it answers garbage): exit 2, no traceback."""
    port = closed_port()
    start = time.perf_counter()
    with pytest.raises(TPUsageError, match="cannot reach the Dask scheduler"):
        cluster.client_for(f"tcp://127.0.0.1:{port}")
    assert time.perf_counter() - start < 2.5              # Dask alone retries for CONNECT_TIMEOUT (5 s)
    done = tpc("execute", str(NNGP), "-n", "16", "--scheduler", f"tcp://127.0.0.1:{port}")
    assert done.returncode == 2, done.stderr
    assert "cannot reach the Dask scheduler" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer_garbage() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(b"\xff" * 64)
                    conn.recv(1024)
                except OSError:
                    pass
    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        done = tpc("execute", str(NNGP), "-n", "16", "--scheduler", f"tcp://127.0.0.1:{server.getsockname()[1]}")
    finally:
        server.close()
    assert done.returncode == 2, done.stderr
    assert "cannot reach the Dask scheduler" in done.stderr and "Traceback" not in done.stderr


def test_killed_scheduler_is_one_line_and_exit_2(tmp_path):
    """A scheduler killed mid-run: exit 2 with the message alone (before: a Dask traceback after it,
    or exit 3 for the cancelled tasks)."""
    port = closed_port()
    log = tmp_path / "scheduler.log"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(log, "w") as out:
        sched = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                                  "--port", str(port), "--no-dashboard"], stdout=out, stderr=out, env=env)
    worker = None
    try:
        deadline = time.time() + 60
        while "Scheduler at" not in log.read_text() and time.time() < deadline:
            time.sleep(0.2)
        worker = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", f"tcp://127.0.0.1:{port}",
                                   "--nthreads", "1", "--no-dashboard"], cwd=ROOT, env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run = subprocess.Popen([sys.executable, "-m", "tensorprog", "execute", str(NNGP), "-n", "1024",
                                "--trials", "400", "--scheduler", f"tcp://127.0.0.1:{port}"], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        while "Receive client connection" not in log.read_text() and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)                                   # the run's tasks are out
        sched.kill()
        _, err = run.communicate(timeout=120)
    finally:
        for proc in (sched, worker):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    assert run.returncode == 2, err
    assert "lost the Dask scheduler" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
