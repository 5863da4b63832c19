"""Array backends (issue 15): numpy, array_api_strict (the standard's minimal namespace: nothing
numpy-only in the executor's array code), and the real libraries installed (jax, torch) on the
CPU; CUDA tests are skipped without a device.

* every backend passes the statistical checks of tests/test_consistency.py against the compiled
  limits (fixed seeds, 5 standard errors plus an O(1/n) allowance and the limit's own error);
* every distribution samples its law on every backend, dense and blocked;
* the same seed reproduces on one backend (dense and blocked); array_api_strict draws numpy's
  numbers, so it reproduces the numpy backend's values to rounding;
* a library or a device that is missing is a clear error (exit code 2 on the command line).
"""
from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import distributions as D
from tensorprog.distributions.blocked import StreamBlockedMatrix
from tensorprog.finite import options
from tensorprog.finite.backend import BackendError, get_backend, stream_seed

ROOT = Path(__file__).resolve().parent.parent


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def cuda_available() -> bool:
    if installed("torch"):
        import torch
        return bool(torch.cuda.is_available())
    return False


HAS_CUDA = cuda_available()
#: the CPU backends of the suite; a library not installed is skipped (CI installs jax, not torch)
CPU = [pytest.param("numpy"), pytest.param("array_api_strict", marks=pytest.mark.skipif(
           not installed("array_api_strict"), reason="array-api-strict not installed")),
       pytest.param("jax", marks=pytest.mark.skipif(not installed("jax"), reason="jax not installed")),
       pytest.param("torch", marks=pytest.mark.skipif(not installed("torch"), reason="torch not installed"))]
#: CUDA backends (skipped without a device)
GPU = [pytest.param("torch", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device"))]
REAL = [p for p in CPU if p.values[0] in ("jax", "torch")]

from test_consistency import CASES      # noqa: E402  the same programs, outputs and allowances
TRIALS = 12
_LIMITS: dict[str, object] = {}


def limit_of(path: str, params: dict):
    key = f"{path}{sorted(params.items())}"
    if key not in _LIMITS:
        _LIMITS[key] = tp.load(ROOT / path, **params).compile().limit()
    return _LIMITS[key]


def check_against_limit(program, limit, names, allow, widths=(1024, 4096), shrink=True, **run):
    """test_consistency's check: at each width the mean over trials is within 5 standard errors
    (plus allow/n and the limit's error) of the limit; with ``shrink`` the rms deviation shrinks
    from the first width to the last (1024 -> 4096: by 0.75 at least)."""
    rms: dict[str, list[float]] = {}
    for n in widths:
        result = program.execute(n=n, trials=TRIALS, seed=11, progress=False, **run)
        for name in names:
            o, lim = result.outputs[name], limit.outputs[name]
            se = o.std / math.sqrt(TRIALS)
            assert abs(o.mean - lim.value) <= 5 * se + allow / n + lim.error, (name, n, o.mean, lim.value)
            rms.setdefault(name, []).append(math.sqrt(np.mean((np.array(o.values) - lim.value) ** 2)))
    for name, (first, last) in rms.items() if shrink else ():
        if first > 3 * limit.outputs[name].error + 1e-12:
            assert last < 0.75 * first, (name, first, last)


# ---- statistics against the limit (slow: widths up to 4096 on each real library) ----------------
@pytest.mark.slow
@pytest.mark.parametrize("backend", REAL)         # array_api_strict: numpy's numbers (tested below)
@pytest.mark.parametrize("path,params,names,allow", CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_backend_converges_to_the_limit(backend, path, params, names, allow):
    check_against_limit(tp.load(ROOT / path, **params), limit_of(path, params), names, allow, backend=backend)


@pytest.mark.slow
@pytest.mark.parametrize("backend", REAL)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_blocked_mode_converges_on_the_backend(backend, dtype):
    path, names, allow = "programs/marchenko_pastur.tp", ["w1", "w2", "w3"], 10.0
    check_against_limit(tp.load(ROOT / path), limit_of(path, {}), names, allow, widths=(512, 2048),
                        shrink=False, backend=backend, blocked=True, block_rows=300, dtype=dtype)


@pytest.mark.slow
@pytest.mark.parametrize("backend", REAL)
@pytest.mark.parametrize("family", ["uniform", "rademacher", "laplace", "student_t"])
def test_matrix_laws_converge_on_the_backend(backend, family):
    """The Wigner moments of the iid matrix laws are the Gaussian ones (universality); orthogonal
    and mvt are checked by their samples (test_every_family_samples_its_law) and, through
    array_api_strict, against numpy's sampler (test_array_api_strict_reproduces_numpy)."""
    program = tp.load(ROOT / "programs/wigner_moments.tp")
    limit = limit_of("programs/wigner_moments.tp", {})
    names = ["m2", "m4"] if family == "student_t" else ["m2", "m4", "m6"]
    check_against_limit(program, limit, names, 20.0, widths=(512, 2048), shrink=False, backend=backend,
                        matrix_dist=family)


# ---- distributions on every backend --------------------------------------------------------------
def draw(backend: str, spec: D.DistSpec, rows: int, cols: int, dtype="float64", seed: int = 3) -> np.ndarray:
    lib = get_backend(backend)
    return lib.to_numpy(D.draw_matrix(lib.stream(stream_seed(seed, 0, 1), dtype), spec, rows, cols))


@pytest.mark.parametrize("backend", [p for p in CPU if p.values[0] != "numpy"])
@pytest.mark.parametrize("family", sorted(D.FAMILIES))
def test_every_family_samples_its_law(backend, family):
    spec = D.make_spec(family, [6] if family in D.HEAVY_TAILED else [], {"var": 2.0}, for_matrix=True)
    rows, cols = 300, 400
    w = draw(backend, spec, rows, cols)
    assert w.shape == (rows, cols) and w.dtype == np.float64
    entries = w * math.sqrt(cols / 2.0)                          # variance 1 each
    se = entries.std() / math.sqrt(entries.size)
    assert abs(entries.mean()) < 5 * se
    squares = np.mean(entries ** 2, axis=1)                      # mvt: one scale per row
    assert abs(squares.mean() - 1) < 5 * squares.std() / math.sqrt(rows) + 1e-9
    if family == "rademacher":
        assert np.allclose(np.abs(entries), 1)
    if family == "uniform":
        assert np.abs(entries).max() <= math.sqrt(3) + 1e-12
    if family == "orthogonal":                                    # wide: M Mᵀ = var I
        assert np.allclose(w @ w.T, 2.0 * np.eye(rows), atol=1e-10)
        tall = draw(backend, spec, cols, rows)
        assert np.allclose(tall.T @ tall, 2.0 * cols / rows * np.eye(rows), atol=1e-10)
    f32 = draw(backend, spec, rows, cols, "float32")
    assert f32.dtype == np.float32


@pytest.mark.parametrize("backend", [p for p in CPU if p.values[0] != "numpy"])
def test_joint_vectors_keep_exact_copies_and_negations(backend):
    spec = D.make_spec("normal", [], {"cov": [[1, 1, -1, 0], [1, 1, -1, 0], [-1, -1, 1, 0], [0, 0, 0, 0]]},
                       for_matrix=False, n_vectors=4)
    lib = get_backend(backend)
    v = lib.to_numpy(D.draw_vectors(lib.stream(stream_seed(0, 0, 0), "float64"), spec, 4, 500))
    assert np.array_equal(v[0], v[1]) and np.array_equal(v[2], -v[0]) and not v[3].any()


# ---- the same seed reproduces ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", CPU)
@pytest.mark.parametrize("blocked", [False, True])
def test_the_same_seed_reproduces(backend, blocked):
    p = tp.load(ROOT / "programs/marchenko_pastur.tp")
    run = dict(n=200, trials=3, backend=backend, blocked=blocked, block_rows=64, progress=False)
    a, b, c = p.execute(seed=4, **run), p.execute(seed=4, **run), p.execute(seed=5, **run)
    assert a.to_dict() == b.to_dict()
    assert a.outputs["w2"].values != c.outputs["w2"].values
    assert a.backend == backend and a.device == "cpu"


@pytest.mark.parametrize("backend", REAL + [p for p in CPU if p.values[0] == "array_api_strict"])
def test_a_blocked_matrix_is_one_matrix(backend):
    """Every use regenerates the same blocks: W @ x and Wᵀ @ y are products with one matrix."""
    lib = get_backend(backend)
    spec = D.make_spec("student_t", [5], {}, for_matrix=True)
    w = StreamBlockedMatrix(lambda b: lib.stream(stream_seed(1, 0, 7, 1, b), "float64"), spec, 50, 30,
                            lib.xp, block_rows=16)
    dense = lib.to_numpy(w.dense())
    assert np.array_equal(dense, lib.to_numpy(w.dense()))
    x, y = np.random.default_rng(0).standard_normal((30, 2)), np.random.default_rng(1).standard_normal(50)
    assert np.allclose(lib.to_numpy(w.matmul(lib.asarray(x, "float64"))), dense @ x)
    assert np.allclose(lib.to_numpy(w.matmul(lib.asarray(y, "float64"), transposed=True)), dense.T @ y)


@pytest.mark.skipif(not installed("array_api_strict"), reason="array-api-strict not installed")
@pytest.mark.parametrize("path,matrix_dist", [("programs/relu_nngp.tp", None), ("programs/sgd_two_layer.tp", None),
                                              ("programs/initial_moments.tp", None),
                                              ("programs/batchnorm_relu.tp", "laplace"),
                                              ("programs/marchenko_pastur.tp", "mvt"),
                                              ("programs/wigner_moments.tp", "orthogonal"),
                                              ("programs/transformer_preln.tp", "student_t")])
def test_array_api_strict_reproduces_numpy(path, matrix_dist):
    """array_api_strict draws numpy's numbers: the same values to rounding (so the executor's
    array code, run through the standard's minimal namespace, computes what numpy computes)."""
    p = tp.load(ROOT / path, **({"T": 2, "L": 1} if "transformer" in path else {}))
    run = dict(n=96, trials=2, seed=3, matrix_dist=matrix_dist, progress=False)
    ref, strict = p.execute(**run), p.execute(backend="array_api_strict", **run)
    for name, o in ref.outputs.items():
        assert np.allclose(strict.outputs[name].values, o.values, rtol=1e-9, atol=1e-12), name


def test_numpy_keeps_its_numbers():
    """The numpy backend, named or not, gives the values of a default run bit for bit."""
    p = tp.load(ROOT / "programs/relu_nngp.tp")
    a = p.execute(n=64, trials=2, seed=1, progress=False)
    with options(backend="numpy", device="cpu"):
        b = p.execute(n=64, trials=2, seed=1, progress=False)
    assert a.outputs["kxy"].values == b.outputs["kxy"].values


# ---- options, the dataset kernel and converge on a backend -------------------------------------------
@pytest.mark.parametrize("backend", REAL)
def test_options_block_kernel_and_converge(backend):
    from tensorprog.tools.converge import converge
    from tensorprog.tools.kernel import kernel
    X = np.random.default_rng(0).standard_normal((3, 4))
    with options(backend=backend):
        k = kernel(str(ROOT / "programs/kernels/relu_mlp.tp"), X, n=256, trials=2, seed=1)
    lim = kernel(str(ROOT / "programs/kernels/relu_mlp.tp"), X)
    for name, m in k.outputs.items():
        assert np.allclose(m.mean, m.mean.T) and np.allclose(m.mean, lim.outputs[name].mean, rtol=0.5, atol=0.1)
    result = converge(tp.load(ROOT / "programs/relu_nngp.tp"), [64, 128], trials=2, backend=backend,
                      progress=False)
    assert result.widths == [64, 128]


@pytest.mark.parametrize("backend", REAL)
def test_jobs_and_float32_on_a_backend(backend):
    p = tp.load(ROOT / "programs/relu_nngp.tp")
    a = p.execute(n=128, trials=3, seed=2, jobs=2, backend=backend, dtype="float32", progress=False)
    b = p.execute(n=128, trials=3, seed=2, jobs=1, backend=backend, dtype="float32", progress=False)
    assert a.outputs["kxy"].values == b.outputs["kxy"].values and a.dtype == "float32"


@pytest.mark.parametrize("backend", [p for p in CPU if p.values[0] != "numpy"])
def test_a_non_finite_value_names_its_cause(backend):
    p = tp.parse("vector x ~ normal()\ny = exp(1000 * x)\nout c = mean(y - y)\n")
    with pytest.raises(tp.TPNumericalError) as err:
        p.execute(n=64, backend=backend, progress=False)
    assert "overflow (inf) in exp" in str(err.value) and ":2:" in str(err.value)


# ---- errors ------------------------------------------------------------------------------------------
def test_unknown_backend_or_device_is_a_usage_error():
    p = tp.load(ROOT / "programs/relu_nngp.tp")
    with pytest.raises(tp.TPUsageError, match="unknown backend 'mxnet'"):
        p.execute(n=16, backend="mxnet")
    with pytest.raises(tp.TPUsageError, match="numpy runs on the CPU only"):
        p.execute(n=16, device="cuda")
    with pytest.raises(BackendError, match="unknown device"):
        get_backend("numpy", "tpu")


@pytest.mark.skipif(not installed("array_api_strict"), reason="array-api-strict not installed")
def test_a_builtin_the_backend_lacks_is_refused_at_its_statement():
    p = tp.load(ROOT / "programs/erf_arcsine.tp")
    with pytest.raises(tp.TPUsageError, match="erf is not available on the array_api_strict backend") as err:
        p.execute(n=16, backend="array_api_strict")
    assert err.value.line > 0


def tpc(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorprog", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)


def test_cli_backend_flags_and_missing_pieces():
    missing = next((b for b in ("cupy", "torch", "jax") if not installed(b)), None)
    lacking = tpc("execute", "programs/relu_nngp.tp", "-n", "16", "--backend", missing or "numpy",
                  "--device", "cuda" if missing in (None, "cupy") else "cpu")
    assert lacking.returncode == 2 and "Traceback" not in lacking.stderr, lacking.stderr
    assert (f"pip install 'tensorprog[{missing}]'" if missing else "numpy runs on the CPU only") in lacking.stderr
    if installed("jax"):
        ok = tpc("execute", "programs/relu_nngp.tp", "-n", "64", "--trials", "2", "--backend", "jax", "--json")
        assert ok.returncode == 0, ok.stderr
        assert '"backend": "jax"' in ok.stdout
    if not HAS_CUDA and installed("torch"):
        gpu = tpc("execute", "programs/relu_nngp.tp", "-n", "16", "--backend", "torch", "--device", "cuda")
        assert gpu.returncode == 2 and "no CUDA device" in gpu.stderr and "Traceback" not in gpu.stderr


# ---- CUDA (skipped without a device) -----------------------------------------------------------------
@pytest.mark.parametrize("backend", GPU)
@pytest.mark.parametrize("blocked", [False, True])
def test_cuda_converges_and_reproduces(backend, blocked):
    path, names, allow = "programs/marchenko_pastur.tp", ["w1", "w2", "w3"], 10.0
    program = tp.load(ROOT / path)
    check_against_limit(program, limit_of(path, {}), names, allow, backend=backend, device="cuda", blocked=blocked)
    run = dict(n=512, trials=2, seed=3, backend=backend, device="cuda", blocked=blocked, progress=False)
    assert program.execute(**run).to_dict() == program.execute(**run).to_dict()


@pytest.mark.parametrize("backend", [p for p in CPU if p.values[0] in ("numpy", "jax")])
def test_a_transposed_product_is_w_transposed_times_x(backend):
    """Wᵀx by the backend's transposed_product (jax: (xᵀW)ᵀ, no copy of W) against numpy's W.T @ x,
    for a vector and for a batch of columns."""
    lib = get_backend(backend, "cpu")
    rng = np.random.default_rng(3)
    w, x, xs = rng.standard_normal((7, 5)), rng.standard_normal(7), rng.standard_normal((7, 3))
    product = lib.transposed_product(lib.asarray(w, "float64"))
    for arg in (x, xs):
        got = np.asarray(lib.host(product(lib.asarray(arg, "float64"))))
        assert got.shape == (w.T @ arg).shape
        np.testing.assert_allclose(got, w.T @ arg, rtol=1e-13, atol=1e-13)


class _Cuda:
    """A stand-in for torch.cuda's memory counters (bytes)."""
    def __init__(self, free, reserved, allocated):
        self.free, self.reserved, self.allocated = free, reserved, allocated

    def mem_get_info(self, dev):
        return self.free, 80 << 30

    def memory_reserved(self, dev):
        return self.reserved

    def memory_allocated(self, dev):
        return self.allocated


def test_torch_free_memory_counts_its_cache_as_free():
    """After a trial torch's allocator keeps the freed blocks (reserved − allocated); the device's
    free count leaves them out, and the plan must not (a second trial of one size was refused)."""
    from types import SimpleNamespace
    from tensorprog.finite.backend import TorchBackend
    lib = TorchBackend.__new__(TorchBackend)
    lib.device, lib.dev = "cuda", 0
    lib.module = SimpleNamespace(cuda=_Cuda(free=13 << 30, reserved=60 << 30, allocated=2 << 30))
    assert lib.free_memory() == (13 << 30) + (58 << 30)
    lib.module = SimpleNamespace(cuda=_Cuda(free=13 << 30, reserved=0, allocated=0))
    assert lib.free_memory() == 13 << 30
