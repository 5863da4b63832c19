"""Dataset kernels: against the pairwise compiled limit, an independent ReLU closed form,
and finite-width networks."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

import tensorprog as tp

TEMPLATE = "programs/kernels/relu_mlp.tp"


def relu_nngp_ntk(q: np.ndarray, L: int, var: float, var1: float, snap: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Arc-cosine NNGP/NTK recursion (Cho & Saul; Jacot et al.; Arora et al.), written here
    independently of tensorprog: Σ¹ = var1·q; Σˡ = var·κ1(Σˡ⁻¹), Σ̇ˡ = var·κ0(Σˡ⁻¹);
    Θ¹ = Σ¹, Θˡ = Σˡ + Θˡ⁻¹ Σ̇ˡ; output NNGP κ1(Σᴸ), NTK κ1(Σᴸ) + Θᴸ κ0(Σᴸ).  ``snap``: correlations
    within 1e-12 of ±1 taken as exactly ±1 (numpy's arccos of a correlation that rounding put just
    inside ±1 is off by ~1e-8: the reference's own error at parallel inputs)."""
    def kappas(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = np.sqrt(np.outer(np.diag(S), np.diag(S)))
        with np.errstate(invalid="ignore", divide="ignore"):     # zero rows: 0/0 (not compared)
            r = np.clip(S / d, -1, 1)
        theta = np.arccos(np.where(np.abs(r) > 1 - 1e-12, np.sign(r), r) if snap else r)
        k1 = d * (np.sin(theta) + (np.pi - theta) * np.cos(theta)) / (2 * np.pi)
        k0 = (np.pi - theta) / (2 * np.pi)
        return k1, k0
    S = var1 * q
    T = S.copy()
    for _ in range(2, L + 1):
        k1, k0 = kappas(S)
        S, T = var * k1, var * k1 + T * var * k0
    k1, k0 = kappas(S)
    return k1, k1 + T * k0


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    X = np.random.default_rng(4).standard_normal((12, 7))
    X[3] = X[1]                      # a repeated input: singular pair covariance
    X[5] = -X[2]                     # an opposite one
    return X


@pytest.mark.parametrize("L,var,var1", [(3, 2.0, 1.0), (5, 1.5, 2.0)])
def test_limit_kernel_matches_independent_arccosine_recursion(data, L, var, var1):
    K = tp.kernel(TEMPLATE, data, L=L, var=var, var1=var1)
    nngp, ntk = relu_nngp_ntk(data @ data.T / data.shape[1], L, var, var1)
    assert np.max(np.abs(K.outputs["nngp"].mean - nngp)) < 1e-12
    assert np.max(np.abs(K.outputs["ntk"].mean - ntk)) < 1e-11
    assert K.outputs["ntk"].method == "exact"


def test_limit_kernel_matches_pairwise_compile(data):
    K = tp.kernel(TEMPLATE, data, L=3)
    q = data @ data.T / data.shape[1]
    for i, j in [(0, 1), (1, 3), (2, 5), (4, 4)]:
        lim = tp.load(TEMPLATE, L=3, q11=q[i, i], q12=q[i, j], q22=q[j, j]).compile().limit()
        for name in ("nngp", "ntk"):
            assert K.outputs[name].mean[i, j] == pytest.approx(lim.outputs[name].value, abs=1e-12)
            assert K.outputs[name].mean[j, i] == K.outputs[name].mean[i, j]


@pytest.mark.slow          # the tanh template's quadrature compiles, one per class and pair: a minute or more
def test_numeric_template_matches_pairwise_compile(data, tmp_path):
    """A template without closed forms (tanh) goes through batched quadrature."""
    text = open(TEMPLATE).read().replace("relu(", "tanh(").replace("step(", "dtanh(")
    text = "def dtanh(z) = 1 - tanh(z) ** 2\n" + text
    path = tmp_path / "tanh_mlp.tp"
    path.write_text(text)
    X = data[[0, 1, 3]]                 # 3 inputs (6 pairs, was 15); X[1] = X[2], a repeated input
    K = tp.kernel(path, X, L=2, var=1.5)
    q = X @ X.T / X.shape[1]
    for i, j in [(0, 1), (1, 2), (2, 2)]:     # a generic pair, the repeated input, the diagonal
        lim = tp.load(path, L=2, var=1.5, q11=q[i, i], q12=q[i, j], q22=q[j, j]).compile().limit()
        for name in ("nngp", "ntk"):
            v = lim.outputs[name]
            assert abs(K.outputs[name].mean[i, j] - v.value) <= K.outputs[name].error[i, j] + v.error + 1e-13
    assert K.outputs["nngp"].method in ("series", "quadrature", "exact")


def test_finite_width_kernel_converges(data):
    X = data[:6]
    lim = tp.kernel(TEMPLATE, X, L=3)
    trials = 10
    dist = []
    for n in (256, 2048):
        F = tp.kernel(TEMPLATE, X, L=3, n=n, trials=trials, seed=2)
        for name in ("nngp", "ntk"):
            # entries of one trial share the network, so test one summary per trial:
            # the mean deviation over the matrix, within 5 standard errors over trials
            dev = np.array([np.mean(v - lim.outputs[name].mean) for v in F.outputs[name].values])
            assert abs(dev.mean()) <= 5 * dev.std(ddof=1) / math.sqrt(trials) + 8 / n, (name, n, dev)
        dist.append(np.mean([np.linalg.norm(v - lim.outputs["ntk"].mean) / np.linalg.norm(lim.outputs["ntk"].mean)
                             for v in F.outputs["ntk"].values]))
    assert dist[1] < 0.6 * dist[0]          # relative Frobenius distance ~ n^{-1/2}: 0.35 expected


def test_finite_kernel_jobs_are_bit_identical(data, tmp_path):
    """Trials in worker processes (tp.kernel under tensorprog.finite.options(jobs=2), and tpc kernel -j 2)
    give the same matrices as one process."""
    from tensorprog.finite import options
    X = data[:5]
    one = tp.kernel(TEMPLATE, X, L=2, n=128, trials=3, seed=4)
    with options(jobs=2):
        two = tp.kernel(TEMPLATE, X, L=2, n=128, trials=3, seed=4)
    for name in ("nngp", "ntk"):
        for a, b in zip(one.outputs[name].values, two.outputs[name].values):
            assert np.array_equal(a, b), name
    np.save(tmp_path / "X.npy", X)
    runs = [subprocess.run([sys.executable, "-m", "tensorprog.cli", "kernel", TEMPLATE, "--inputs", str(tmp_path / "X.npy"),
                            "-n", "128", "--trials", "3", "--seed", "4", "-D", "L=2", "--json", *extra],
                           capture_output=True, text=True) for extra in ([], ["-j", "2"])]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert json.loads(runs[0].stdout) == json.loads(runs[1].stdout)


def test_template_must_use_q_only_in_the_covariance(tmp_path):
    bad = tmp_path / "bad.tp"
    bad.write_text("param q11 = 1\nparam q12 = 0\nparam q22 = 1\nvector x, y ~ normal(cov=[[q11, q12], [q12, q22]])\n"
                   "out k = mean(x * y) * q12\n")
    with pytest.raises(tp.TPUsageError, match="only as the covariance"):
        tp.kernel(bad, np.eye(3))
    missing = tmp_path / "missing.tp"
    missing.write_text("vector x ~ normal()\nout k = mean(x * x)\n")
    with pytest.raises(tp.TPUsageError, match="q11"):
        tp.kernel(missing, np.eye(3))


def test_kernel_cli(tmp_path, data):
    np.save(tmp_path / "X.npy", data)
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "kernel", TEMPLATE, "--inputs",
                           str(tmp_path / "X.npy"), "--out", str(tmp_path / "K.npz"), "--json", "-D", "L=2"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert set(summary["outputs"]) == {"nngp", "ntk"} and summary["width"] is None
    saved = np.load(tmp_path / "K.npz")
    nngp, _ = relu_nngp_ntk(data @ data.T / data.shape[1], 2, 2.0, 1.0)
    assert np.max(np.abs(saved["nngp"] - nngp)) < 1e-12
    bad = subprocess.run([sys.executable, "-m", "tensorprog", "kernel", TEMPLATE, "--inputs",
                          str(tmp_path / "missing.npy")], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


# ---- templates: depth 1, a first-layer bias (q entering affinely), tanh by grad ---------------------------
@pytest.mark.parametrize("L", [1, 2])
def test_depth_one_and_two_templates(data, L):
    """L = 1 (an empty hidden-layer loop) is a valid template: one activation, then the readout."""
    K = tp.kernel(TEMPLATE, data, L=L, var=2.0, var1=1.5)
    nngp, ntk = relu_nngp_ntk(data @ data.T / data.shape[1], L, 2.0, 1.5)
    assert np.max(np.abs(K.outputs["nngp"].mean - nngp)) < 1e-12
    assert np.max(np.abs(K.outputs["ntk"].mean - ntk)) < 1e-12


@pytest.mark.slow          # quadrature compiles of the tanh template: ~40 s
def test_tanh_template_of_depth_one(data):
    T = tp.kernel("programs/kernels/tanh_mlp.tp", data[1:4], L=1)       # data[3] = data[1]: a repeated input
    assert np.all(np.isfinite(T.outputs["ntk"].mean))


def test_first_layer_bias_enters_affinely(data):
    """A first-layer bias of variance b1: Σ¹ = var1·q + b1 = var1·(q + b1/var1), and Θ¹ = Σ¹."""
    from tensorprog.tools.kernel import affine_template
    _, _, s, b = affine_template(tp.load(TEMPLATE, var1=1.5, b1=0.25).ir)
    assert (s, b) == pytest.approx((1.5, 0.25), abs=1e-15)
    K = tp.kernel(TEMPLATE, data, L=3, var=2.0, var1=1.5, b1=0.25)
    nngp, ntk = relu_nngp_ntk(data @ data.T / data.shape[1] + 0.25 / 1.5, 3, 2.0, 1.5)
    assert np.max(np.abs(K.outputs["nngp"].mean - nngp)) < 1e-12
    assert np.max(np.abs(K.outputs["ntk"].mean - ntk)) < 1e-11


def test_template_q_must_enter_affinely(tmp_path):
    bad = tmp_path / "square.tp"
    bad.write_text("param q11 = 1\nparam q12 = 0\nparam q22 = 1\n"
                   "vector x, y ~ normal(cov=[[q11 * q11, q12], [q12, q22]])\nout k = mean(x * y)\n")
    with pytest.raises(tp.TPUsageError, match="only as the covariance"):
        tp.kernel(bad, np.eye(3))


# ---- the replay of a recorded batch compile (tensorprog.limit.replay) ---------------------------------------
def test_replay_agrees_with_the_batch_compile(data, monkeypatch):
    from tensorprog.limit.replay_store import ReplayStore
    from tensorprog.tools import pairs as pmod
    monkeypatch.setattr(pmod, "STORE", ReplayStore(None))
    pmod.REPLAYS.clear()
    fast = tp.kernel(TEMPLATE, data, L=4, b1=0.1)
    assert any(v is not None for v in pmod.REPLAYS.values())
    monkeypatch.setattr(pmod, "record", lambda compiled, names: None)      # the batch compile itself
    pmod.REPLAYS.clear()
    slow = tp.kernel(TEMPLATE, data, L=4, b1=0.1)
    for name in ("nngp", "ntk"):
        assert np.max(np.abs(fast.outputs[name].mean - slow.outputs[name].mean)) < 1e-13
        # the replay propagates each expectation's error through the later layers (first order,
        # limit/replay.py); the batch compile sums them with unit weight: the same order, not the same bits
        assert np.all(fast.outputs[name].error < 10 * slow.outputs[name].error)
        assert np.all(np.abs(fast.outputs[name].mean - slow.outputs[name].mean)
                      <= fast.outputs[name].error + slow.outputs[name].error)
    # and the replay's (smaller, where slopes are small) error still covers the independent recursion
    # (up to the float64 reference's own rounding, 16ε relative)
    for name, ref in zip(("nngp", "ntk"), relu_nngp_ntk(data @ data.T / data.shape[1] + 0.1, 4, 2.0, 1.0, snap=True)):
        miss = np.abs(fast.outputs[name].mean - ref) - fast.outputs[name].error
        assert np.all(miss <= 16 * np.finfo(float).eps * np.abs(ref)), miss.max()
        assert fast.outputs[name].method == slow.outputs[name].method == "exact"
    pmod.REPLAYS.clear()


def test_replay_rechecks_what_its_record_took_as_constant(data):
    """A record made on inputs of equal norms (q11 = q22 = 1: constants of the compile) does not hold
    for other inputs: it is recorded again, and the kernels stay right."""
    from tensorprog.tools import pairs as pmod
    pmod.REPLAYS.clear()
    unit = data / np.linalg.norm(data, axis=1, keepdims=True) * np.sqrt(data.shape[1])
    unit[5] = -unit[2]
    for X in (unit, data, unit):
        K = tp.kernel(TEMPLATE, X, L=4)
        nngp, ntk = relu_nngp_ntk(X @ X.T / X.shape[1], 4, 2.0, 1.0)
        assert np.max(np.abs(K.outputs["nngp"].mean - nngp)) < 1e-12
        assert np.max(np.abs(K.outputs["ntk"].mean - ntk)) < 1e-11
    pmod.REPLAYS.clear()


def test_kernel_memory_does_not_grow_across_calls():
    """The limit kernel frees what it builds: four calls hold no more than one call's outputs."""
    import gc
    import tracemalloc
    X = np.random.default_rng(1).standard_normal((150, 5))
    tp.kernel(TEMPLATE, X, L=3)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(4):
            K = tp.kernel(TEMPLATE, X, L=3)
            del K
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held < 4 * 150 * 150 * 8          # less than one call's four N×N outputs


# ---- finite width with a first-layer bias (s·q + b, b = b1) ----------------------------------------------
BIAS_TRIALS, BIAS_WIDTH = 24, 2048


@pytest.fixture(scope="module")
def biased(data) -> dict:
    """Finite-width kernels at b1 = 0.3 and b1 = 0 (same seed), and the b1 = 0.3 limit, on 6 inputs
    (a repeated and an opposite one among them)."""
    X = data[:6]
    run = dict(L=3, n=BIAS_WIDTH, trials=BIAS_TRIALS, seed=3)
    return {"limit": tp.kernel(TEMPLATE, X, L=3, b1=0.3), "b": tp.kernel(TEMPLATE, X, b1=0.3, **run),
            "zero": tp.kernel(TEMPLATE, X, **run)}


def bias_tolerance(F, name: str, limit: np.ndarray) -> np.ndarray:
    """5 standard errors of the mean over trials per entry, plus a floor 4·|K|/n: the finite-width
    mean itself differs from the limit by O(1/n) relative (of order L/n for this depth-3 NTK-
    parameterized MLP), which 5 SE ~ 5·O(1/√(n·trials)) need not cover; at n = 2048 the floor is
    ~0.2% of the kernel, far below the SE (1-3%), so it does not hide a wrong covariance."""
    se = F.outputs[name].std / math.sqrt(BIAS_TRIALS)
    return 5 * se + 4 * np.abs(limit) / BIAS_WIDTH


@pytest.mark.slow          # the biased fixture: two finite-width kernels, 24 trials at n = 2048
def test_finite_kernel_with_first_layer_bias_matches_the_limit(biased):
    """N inputs drawn with covariance s·q + b·11ᵀ: every entry of the mean over trials within its
    tolerance of the limit kernel with the same bias."""
    for name in ("nngp", "ntk"):
        lim = biased["limit"].outputs[name].mean
        dev = np.abs(biased["b"].outputs[name].mean - lim)
        assert np.all(dev <= bias_tolerance(biased["b"], name, lim)), (name, dev)


@pytest.mark.slow          # the biased fixture: two finite-width kernels, 24 trials at n = 2048
def test_first_layer_bias_changes_the_finite_kernel(biased):
    """b1 = 0.3 moves the finite kernel by many standard errors: the b1 = 0 kernel fails the check
    above at every entry, so that check would catch a dropped bias."""
    for name in ("nngp", "ntk"):
        lim = biased["limit"].outputs[name].mean
        with_b, without = biased["b"].outputs[name], biased["zero"].outputs[name]
        assert np.all(np.abs(without.mean - lim) > bias_tolerance(biased["b"], name, lim)), name
        se = np.hypot(with_b.std, without.std) / math.sqrt(BIAS_TRIALS)
        assert np.median(np.abs(with_b.mean - without.mean) / se) > 10, name


def test_finite_kernel_bias_factor_and_negative_bias(data):
    """b = 0 factors s·q itself (nothing added: existing kernels unchanged bit for bit); a negative
    b1 that the template's own probes accept but that leaves s·q + b·11ᵀ indefinite over the data
    (12 inputs in 7 dimensions: 1 is not in q's range) is a usage error, not a silent wrong kernel."""
    from tensorprog.distributions import psd_factor
    from tensorprog.tools.kernel import inputs_factor
    q = data @ data.T / data.shape[1]
    assert np.array_equal(inputs_factor(1.5, 0.0, q), psd_factor(1.5 * q))
    A = inputs_factor(1.5, 0.3, q)
    assert np.allclose(A @ A.T, 1.5 * q + 0.3, atol=1e-10)
    with pytest.raises(tp.TPUsageError, match="not positive semidefinite"):
        tp.kernel(TEMPLATE, data, L=2, n=64, b1=-0.1)


def test_limit_kernel_negative_bias_that_breaks_a_covariance_is_a_usage_error(data):
    """b < 0 can make a pair's s·q + b not a covariance (x ≡ −y: determinant −4b·s·q_ii): a clear
    TPUsageError, not a failure deep in the closed forms; a small b > 0 works."""
    with pytest.raises(tp.TPUsageError, match="not positive semidefinite"):
        tp.kernel(TEMPLATE, data, L=2, b1=-0.1)
    assert tp.kernel(TEMPLATE, data, L=2, b1=0.1).outputs["ntk"].method == "exact"


def assert_blocks_cover(blocks, r0: int, r1: int, N: int, cols: int) -> None:
    """The blocks (i0, i1, j0, j1) cover each entry (i, j), r0 ≤ i < r1, i ≤ j < N, once and nothing
    else, none over ROW_BLOCK × ``cols`` entries by more than a row."""
    from tensorprog.tools.pairs import ROW_BLOCK
    seen = np.zeros((N, N), dtype=int)
    for i0, i1, j0, j1 in blocks:
        assert r0 <= i0 < i1 <= r1 and i0 <= j0 < j1 <= N
        assert (i1 - i0 - 1) * (j1 - j0) <= ROW_BLOCK * cols
        for i in range(i0, i1):
            seen[i, max(i, j0):j1] += 1
    assert np.array_equal(seen[r0:r1], np.triu(np.ones((N, N), dtype=int))[r0:r1])
    assert not seen[:r0].any() and not seen[r1:].any()


@pytest.mark.parametrize("r0, r1, N", [(0, 1000, 1000), (0, 5, 1000), (100, 300, 1000), (0, 2500, 2500),
                                       (0, 1, 1), (990, 1000, 1000), (7, 70, 300)])
def test_band_blocks_cover_each_upper_entry_once(r0, r1, N):
    """The blocks of a band cover each entry (i, j), r0 ≤ i < r1, i ≤ j < N, once, none is over
    ROW_BLOCK × COL_BLOCK entries by more than a row, and a full band of N = 1000 takes 17 blocks."""
    from tensorprog.tools.pairs import COL_BLOCK, band_blocks
    blocks = band_blocks(r0, r1, N)
    assert_blocks_cover(blocks, r0, r1, N, COL_BLOCK)
    if (r0, r1, N) == (0, 1000, 1000):
        assert len(blocks) == 17


def test_affine_in_q_reads_the_coefficients_as_sympys_derivative():
    """affine_in_q's coefficient reading of c·q_k + r gives the floats of sympy's ∂e/∂q_k and e at q_k = 0
    (the rule for any other entry), and refuses what is not affine in its own q alone."""
    import sympy as sp
    from tensorprog.tools.kernel import affine_in_q
    q = list(sp.symbols("q11 q12 q22", real=True))
    v, b, w = sp.symbols("var1 b1 w", real=True)
    values = {v: 1.5, b: 0.1, w: 0.7}

    def derivative_reading(cov):
        at = {k: x for k, x in values.items() if k not in q}
        got = set()
        for i, j, k in ((0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 2)):
            e = sp.expand(sp.sympify(cov[i, j]).subs(at))
            got.add((float(sp.diff(e, q[k])), float(e.subs(q[k], 0))))
        return got.pop() if len(got) == 1 else None

    def matrix(f):
        return np.array([[f(q[0]), f(q[1])], [f(q[1]), f(q[2])]], dtype=object)

    affine = [lambda x: v * x + b, lambda x: 0.3 * x + b * v + b * w, lambda x: (v + 1) * (x + b) / 3,
              lambda x: x, lambda x: sp.sqrt(2) * x + sp.pi * b]
    for f in affine:
        cov = matrix(f)
        assert affine_in_q(cov, q, values) == derivative_reading(cov) is not None
    refused = [matrix(lambda x: v * x ** 2 + b), matrix(lambda x: v * x + q[0] * b),
               np.array([[v * q[0], v * q[1]], [v * q[1], 2 * v * q[2]]], dtype=object),
               matrix(lambda x: sp.Symbol("u") * x)]
    assert all(affine_in_q(cov, q, values) is None for cov in refused)
