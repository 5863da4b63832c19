"""Finite width at scale: parallel trials, blocked (never stored) matrices, float32, progress.

Statistical tolerances are 5 standard errors, from the spread over trials."""
from __future__ import annotations

import io
import math
import pickle
import sys

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import distributions as D
from tensorprog.finite import parallel
from tensorprog.distributions.blocked import BlockedMatrix, matrix_key
from tensorprog.cli import main
from tensorprog.finite import options
from tensorprog.finite import progress as progress_bars
from tensorprog.finite.executor import Executor
from tensorprog.finite.plan import plan_run
from tensorprog.finite.workers import resolve_jobs

RELU = "programs/relu_nngp.tp"
ONE_LAYER = """
vector x, y ~ normal(cov=[[1, 0.4], [0.4, 1]])
matrix W ~ normal(var=2)
h = W @ relu(x)
g = W @ relu(y)
out k = mean(h * g)
out q = mean(h * h)
"""
TRANSPOSE = """
dim m = 0.75
vector x ~ normal()
vector y : m ~ normal()
matrix W : m x n ~ {law}
a = W @ x
b = W.T @ y
out lhs = mean(a * y)
out rhs = mean(x * b)
"""


def arccos1(rho: float) -> float:
    """2 E[relu(u) relu(v)] for unit Gaussians with correlation rho (Cho & Saul, degree 1)."""
    theta = math.acos(rho)
    return (math.sin(theta) + (math.pi - theta) * math.cos(theta)) / math.pi


def outputs(r):
    return {k: o.values for k, o in r.outputs.items()}


# ---- parallel trials ------------------------------------------------------------------------------
@pytest.mark.parametrize("blocked", [False, True])
def test_jobs_bit_identical_to_one_job(blocked):
    p = tp.load(RELU)
    one = p.execute(n=96, trials=5, seed=11, blocked=blocked)
    two = p.execute(n=96, trials=5, seed=11, blocked=blocked, jobs=2)
    assert outputs(one) == outputs(two)
    assert one.blocked == two.blocked == blocked
    assert len(set(one.outputs["kxy"].values)) == 5


def test_jobs_through_options_and_cli(capsys):
    p = tp.load(RELU)
    with options(jobs=2):
        a = p.execute(n=64, trials=3, seed=2)
    assert outputs(a) == outputs(p.execute(n=64, trials=3, seed=2))
    assert main(["execute", RELU, "-n", "64", "--trials", "3", "--seed", "2", "--jobs", "2", "--json"]) == 0
    import json
    assert json.loads(capsys.readouterr().out)["outputs"]["kxy"]["values"] == a.outputs["kxy"].values


def test_error_in_a_worker_is_the_located_error_of_one_job():
    p = tp.parse("vector x ~ normal()\ny = log(x)\nout m = mean(y)")
    with pytest.raises(tp.TPNumericalError) as one:
        p.execute(n=16, trials=3)
    with pytest.raises(tp.TPNumericalError) as two:
        p.execute(n=16, trials=3, jobs=2)
    assert str(one.value) == str(two.value) and (two.value.line, two.value.col) == (2, 5)


def test_jobs_capped_by_trials_and_memory():
    assert resolve_jobs(4, 10, peak=100, limit=250) == 2           # 2 × peak fits, 3 × does not
    assert resolve_jobs(4, 3, peak=1, limit=10**9) == 3
    assert resolve_jobs(0, 64, peak=1, limit=10**9) == parallel.cpu_count()
    with pytest.raises(tp.TPUsageError):
        resolve_jobs(-1, 2, 1, 1)


def test_ir_pickles_and_spawned_workers_agree(monkeypatch):
    p = tp.load(RELU)
    assert pickle.loads(pickle.dumps(p.ir)) == p.ir
    spawn = parallel.multiprocessing.get_context("spawn")
    monkeypatch.setattr(parallel, "_context", lambda: spawn)
    assert outputs(p.execute(n=32, trials=2, seed=4, jobs=2)) == outputs(p.execute(n=32, trials=2, seed=4))


def test_blas_threads_limited_and_restored():
    before = parallel.blas_threads()
    if before is None:
        pytest.skip("no OpenBLAS found in this process")
    with parallel.limited_blas(1):
        assert parallel.blas_threads() == 1
    assert parallel.blas_threads() == before


# ---- blocked matrices -----------------------------------------------------------------------------
def test_blocked_matrix_is_the_documented_stream():
    """Row i of a blocked normal matrix is Philox(key, counter=i·2^128).standard_normal · sqrt(var/cols)."""
    spec = D.DistSpec("normal", var=2.0)
    key = matrix_key(5, 1, 3)
    assert np.array_equal(key, np.random.SeedSequence(5, spawn_key=(1, 3, 1)).generate_state(2, np.uint64))
    w = BlockedMatrix(key, spec, 9, 13).dense()
    for i in range(9):
        row = np.random.Generator(np.random.Philox(key=key, counter=[0, 0, i, 0])).standard_normal(13)
        assert np.array_equal(w[i], row * math.sqrt(2.0 / 13))


@pytest.mark.parametrize("family", ["normal", "uniform", "rademacher", "laplace", "student_t", "mvt"])
def test_blocked_entries_and_products_independent_of_block_size(family):
    spec = D.DistSpec(family, var=1.5, df=6.0 if family in D.HEAVY_TAILED else None)
    key = matrix_key(0, 2, 7)
    small = BlockedMatrix(key, spec, 50, 31, block_rows=3, threads=2)
    large = BlockedMatrix(key, spec, 50, 31, block_rows=64, threads=1)
    w = small.dense()
    assert np.array_equal(w, large.dense()) and np.array_equal(w, large.block(0, 50))
    assert np.array_equal(w[17:40], small.block(17, 40))            # any block, same numbers
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((31, 4)), rng.standard_normal(50)
    # products: the same numbers, summed in the same order per row; BLAS may pick another
    # kernel for another block height, so equal to rounding (and bit-reproducible per shape)
    np.testing.assert_allclose(small.matmul(x), large.matmul(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(small.matmul(x), w @ x, rtol=1e-13, atol=1e-14)
    assert np.array_equal(small.matmul(x), small.matmul(x))
    np.testing.assert_allclose(small.matmul(y, transposed=True), large.matmul(y, transposed=True),
                               rtol=1e-12, atol=1e-13)              # sums of blocks: to rounding
    np.testing.assert_allclose(small.matmul(y, transposed=True), w.T @ y, rtol=1e-12, atol=1e-13)
    entry_var = np.var(BlockedMatrix(key, spec, 400, 400).dense()) * 400
    assert abs(entry_var - 1.5) < 0.15                              # the law's variance


def test_blocked_transposed_sum_independent_of_threads():
    spec = D.DistSpec("normal")
    key = matrix_key(1, 0, 0)
    y = np.random.default_rng(1).standard_normal((200, 3))
    a = BlockedMatrix(key, spec, 200, 40, block_rows=7, threads=1).matmul(y, transposed=True)
    b = BlockedMatrix(key, spec, 200, 40, block_rows=7, threads=3).matmul(y, transposed=True)
    assert np.array_equal(a, b)


def test_blocked_execution_equals_dense_algebra_on_the_same_numbers():
    p = tp.parse("vector x, y ~ normal()\nmatrix W ~ normal(var=2)\na = W @ x\nb = W @ y\n"
                 "c = W.T @ a\nout s = mean(a * b + c * c)")
    n = 48
    r = p.execute(n=n, seed=3, blocked=True, block_rows=5)
    xs = D.sample_vectors(np.random.default_rng(np.random.SeedSequence(3, spawn_key=(0, 0))),
                          p.ir.groups[0].dist, 2, n)                # vectors: the dense streams
    w = BlockedMatrix(matrix_key(3, 0, 2), p.ir.eqns[2].dist, n, n).dense()
    a, b = w @ xs[0], w @ xs[1]
    c = w.T @ a
    assert r.blocked and r.outputs["s"].values[0] == pytest.approx(float(np.mean(a * b + c * c)), rel=1e-12)
    again = p.execute(n=n, seed=3, blocked=True, block_rows=16)
    assert again.outputs["s"].values[0] == pytest.approx(r.outputs["s"].values[0], rel=1e-12)
    dense = p.execute(n=n, seed=3)
    assert dense.outputs["s"].values != r.outputs["s"].values       # another generator, by design


@pytest.mark.parametrize("law", ["normal(var=2)", "laplace(var=2)", "mvt(6, 2)"])
def test_transposes_consistent(law):
    """⟨W x, y⟩ = ⟨x, Wᵀ y⟩ with the regenerated W, rectangular, both orders of use."""
    p = tp.parse(TRANSPOSE.format(law=law))
    r = p.execute(n=80, trials=3, seed=1, blocked=True, block_rows=7)
    m = 60
    for lhs, rhs in zip(r.outputs["lhs"].values, r.outputs["rhs"].values):
        # lhs averages over m coordinates, rhs over n: m·lhs = n·rhs = yᵀ W x
        assert m * lhs == pytest.approx(80 * rhs, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_blocked_statistics_match_the_limit(dtype):
    p = tp.parse(ONE_LAYER)
    n, trials = 1024, 12
    truth = {"k": arccos1(0.4), "q": 1.0}
    for blocked in (False, True):
        r = p.execute(n=n, trials=trials, seed=8, blocked=blocked, dtype=dtype)
        assert r.blocked == blocked and r.dtype == dtype
        for name, value in truth.items():
            o = r.outputs[name]
            assert abs(o.mean - value) < 5 * o.std / math.sqrt(trials) + 1 / n, (blocked, name, o.mean)


def test_float32_blocked_runs_in_float32():
    p = tp.parse("vector x ~ normal()\nmatrix W ~ student_t(6)\nh = W @ x\nout q = mean(h * h)")
    ex = Executor(plan_run(p.ir, 64, 0, "float32", None, blocked=True))
    w = ex.matrix(0, 1)
    assert isinstance(w, BlockedMatrix) and w.dense().dtype == np.float32
    x = np.ones(64, np.float32)
    assert w.matmul(x).dtype == np.float32 and w.matmul(x, transposed=True).dtype == np.float32
    r = p.execute(n=64, trials=2, dtype="float32", blocked=True)
    assert r.dtype == "float32" and r.blocked and all(np.isfinite(r.outputs["q"].values))


def test_orthogonal_cannot_be_blocked():
    p = tp.parse("vector x ~ normal()\nmatrix Q ~ orthogonal()\nh = Q @ x\nout q = mean(h * h)")
    with pytest.raises(tp.TPUsageError, match="orthogonal matrices cannot be generated block by block") as err:
        p.execute(n=32, blocked=True)
    assert err.value.line == 2
    with pytest.raises(tp.TPUsageError, match="orthogonal"):
        tp.parse(ONE_LAYER).execute(n=32, blocked=True, matrix_dist="orthogonal")
    with pytest.raises(tp.TPLimitError, match="orthogonal matrices .* cannot be generated block by block"):
        p.execute(n=1024, memory_limit=4 << 20)                     # automatic: too big, not blockable


def test_blocked_chosen_automatically_only_when_dense_does_not_fit():
    p = tp.parse(ONE_LAYER)
    assert not p.execute(n=256).blocked
    r = p.execute(n=256, memory_limit=64 << 20)                      # dense W would fit
    assert not r.blocked
    dense = plan_run(p.ir, 2048, 0, "float64", None).peak            # ~32 MiB of W + sampling
    r = p.execute(n=2048, memory_limit=dense - 1, block_rows=64)
    assert r.blocked and np.isfinite(r.outputs["q"].mean)
    with pytest.raises(tp.TPLimitError, match="--blocked"):
        p.execute(n=2048, memory_limit=dense - 1, block_rows=64, blocked=False)
    # beyond memory and absurdly long: refused, unless forced (the estimate is then tiny)
    with pytest.raises(tp.TPLimitError, match=r"GiB.*blocked=True \(--blocked\)"):
        tp.load(RELU).execute(n=10**6)
    assert plan_run(tp.load(RELU).ir, 10**6, 0, "float64", None, blocked=True).peak < 2**30
    # only vectors, and they do not fit: refused even blocked
    with pytest.raises(tp.TPLimitError, match="even with blocked matrices"):
        p.execute(n=10**6, blocked=True, memory_limit=10 << 20)


def test_blocked_kernel_through_options():
    X = np.random.default_rng(0).standard_normal((3, 5))
    with options(blocked=True):
        k = tp.kernel("programs/kernels/relu_mlp.tp", X, n=64, trials=2, seed=1)
    dense = tp.kernel("programs/kernels/relu_mlp.tp", X, n=64, trials=2, seed=1)
    for name, m in k.outputs.items():
        assert np.all(np.isfinite(m.mean)) and not np.array_equal(m.mean, dense.outputs[name].mean)


# ---- progress -------------------------------------------------------------------------------------
class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_when_not_a_terminal(capsys):
    tp.load(RELU).execute(n=32, trials=3)
    assert capsys.readouterr().err == ""
    assert main(["execute", RELU, "-n", "32", "--trials", "3"]) == 0
    assert capsys.readouterr().err == ""


def test_progress_forced_writes_lines(capsys):
    tp.load(RELU).execute(n=32, trials=3, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rtrials:") and "3/3" in err and err.endswith("\n")   # left in place
    assert main(["execute", RELU, "-n", "32", "--trials", "2", "--jobs", "2", "--progress"]) == 0
    out, err = capsys.readouterr()
    assert "2/2" in err and "kxy" in out and "trials:" not in out


def test_progress_on_a_terminal_rewrites_one_line_and_shows_blocked_steps(monkeypatch):
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    monkeypatch.setattr(progress_bars, "DELAY", 0.0)
    monkeypatch.setattr(progress_bars, "MININTERVAL", 0.0)
    p = tp.parse(ONE_LAYER)
    p.execute(n=256, trials=2, blocked=True, block_rows=8)         # progress=None: on a terminal
    text = term.getvalue()
    assert text.startswith("\r") and "\n" not in text and text.endswith("\r")   # erased at the end
    assert "2/2" in text
    assert "trial 1: step" in text and "blocked" in text and "%" in text
