"""Executor edge cases: the cause of a non-finite value, float32 runs on the float64 draws, the
split of the distributions package.

* a non-finite value is reported at its statement with the floating-point event that made it
  (overflow, division by zero, invalid operation), not with the final NaN / inf;
* a float32 run draws the numbers of the float64 run of the same seed (dense and blocked, every
  family), so the two agree to float32 precision; the default of the samplers is unchanged;
* every public name of ``tensorprog.distributions`` is still importable from it.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import distributions as D
from tensorprog.distributions.blocked import BlockedMatrix, matrix_key

ROOT = Path(__file__).resolve().parent.parent


def numerical_error(src: str, dtype=np.float64, **kw) -> tp.TPNumericalError:
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=64, dtype=dtype, **kw)
    return err.value


def first_line(err: tp.TPError) -> str:
    return str(err).splitlines()[0]


# ---- the cause of a non-finite value ----------------------------------------------------------------------
BIG = "vector x ~ normal()\nc = mean(x * x) * 800\n"


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("expr", ["exp(1000 * x) - exp(1000 * x)", "exp(1000 * x) * 0", "x * exp(c)",
                                  "exp(1000 * x) / exp(1000 * x)", "x * tanh(exp(c)) * 0 + exp(c) * 0",
                                  "0 * exp(c) * x"])
def test_overflow_inside_an_expression_names_the_overflow(expr, dtype):
    err = numerical_error(BIG + f"out o = mean({expr})", dtype)
    text = first_line(err)
    assert (err.line, err.col) == (3, 9)
    assert text.startswith("<string>:3:9: overflow (inf) in exp"), text
    assert "nan" not in text.lower()


def test_overflow_in_a_nonlin_is_located_at_the_nonlin():
    err = numerical_error("vector x ~ normal()\ny = exp(1000 * x) - exp(1000 * x)\nout o = mean(tanh(y))")
    assert (err.line, err.col) == (2, 5) and "overflow (inf) in exp" in first_line(err)


@pytest.mark.parametrize("src, at, op", [
    ("vector x ~ normal()\nc = mean(x * 0)\nout o = 1 / c", (3, 9), "'/'"),
    ("vector x ~ normal()\nc = mean(x * 0)\nout o = mean(x / c)", (3, 9), "'/'"),
    ("vector x ~ normal()\nc = mean(x * 0)\ny = tanh(x) / c\nout o = mean(y)", (3, 5), "'/'"),
    ("vector x ~ normal()\nc = mean(x * 0)\nout o = mean((x * 0) / (x * 0))", (3, 9), "'/'"),   # 0/0
    ("vector x ~ normal()\nc = mean(x * 0)\nout o = log(c)", (3, 9), "log"),
    ("vector x ~ normal()\nc = mean(x * 0)\nout o = mean(x * c ** -1)", (3, 9), "'**'"),
])
def test_division_by_zero_is_named(src, at, op):
    err = numerical_error(src)
    assert (err.line, err.col) == at
    assert first_line(err).startswith(f"<string>:{at[0]}:{at[1]}: division by zero")
    assert f"in {op}" in first_line(err) and "overflow" not in first_line(err)


@pytest.mark.parametrize("expr, op", [("log(x)", "log"), ("sqrt(x)", "sqrt"), ("x ** 0.5", "'**'")])
def test_invalid_operation_is_a_nan(expr, op):
    err = numerical_error(f"vector x ~ normal()\nout o = mean({expr})")
    assert "NaN from an invalid operation in " + op in first_line(err)


def test_overflow_of_the_mean_of_finite_values():
    err = numerical_error("vector x ~ normal()\ny = 1e307 * (x * x + 1)\nout o = mean(y)")
    assert (err.line, err.col) == (3, 9) and "overflow (inf) in the mean" in first_line(err)


def test_overflow_of_a_matrix_product_of_finite_values():
    err = numerical_error("vector x ~ normal()\nmatrix W ~ normal(var=1e10)\ny = 1e306 * (x * x + 1)\n"
                          "z = W @ y\nout o = mean(tanh(z))")
    assert (err.line, err.col) == (4, 5) and "overflow (inf) in the matrix product" in first_line(err)


def test_overflow_of_the_conversion_to_float32():
    # tanh(c) is a float64 scalar: the sum is computed in float64 and overflows when stored as float32
    err = numerical_error("vector x ~ normal()\nc = mean(x * x) * 1e300\ny = tanh(c) * 1e300 + x\n"
                          "out o = mean(y)", np.float32)
    assert (err.line, err.col) == (3, 5) and "overflow (inf) in the conversion to float32" in first_line(err)


def test_the_cause_survives_parallel_trials():
    # trial 1 of 2 in a worker process: same message as jobs=1
    src = BIG + "out o = mean(x * exp(c))"
    one = numerical_error(src, trials=2, jobs=1)
    two = numerical_error(src, trials=2, jobs=2)
    assert str(one) == str(two)


def test_finite_programs_are_unchanged_by_the_diagnosis():
    p = tp.parse("vector x ~ normal()\nmatrix W ~ normal()\nh = W @ tanh(x)\nout o = mean(h * h)")
    assert p.execute(n=64, seed=3).outputs["o"].values == p.execute(n=64, seed=3).outputs["o"].values


# ---- float32 on the float64 draws -------------------------------------------------------------------------
PROGRAM = """vector x ~ {v}
vector y ~ {v2}
matrix W ~ {m}
matrix V ~ {m}
h = W @ tanh(x + 0.5 * y)
g = V @ sin(h)
b = W.T @ (g * h)
out a = mean(g * g)
out c = mean(tanh(b) * x)
out d = mean(exp(tanh(g)) * h)
out q = mean(b * b)
"""
LAWS = [("normal()", "normal(var=2)", "normal()"), ("uniform()", "uniform(2)", "uniform(3)"),
        ("laplace()", "laplace(2)", "laplace()"), ("student_t(5)", "student_t(7, 2)", "student_t(5)"),
        ("rademacher()", "rademacher(2)", "rademacher()"), ("normal()", "laplace()", "mvt(6)"),
        ("uniform()", "normal()", "orthogonal(2)")]


def assert_close_runs(r64, r32, rel=1e-5):
    assert r32.dtype == "float32"
    for name, o in r64.outputs.items():
        scale = max(1.0, max(abs(v) for v in o.values))
        assert r32.outputs[name].values == pytest.approx(o.values, abs=rel * scale), name


@pytest.mark.parametrize("law", LAWS, ids=lambda law: law[2])
def test_float32_runs_use_the_float64_draws(law):
    p = tp.parse(PROGRAM.format(v=law[0], v2=law[1], m=law[2]))
    assert_close_runs(p.execute(n=256, trials=2, seed=5), p.execute(n=256, trials=2, seed=5, dtype="float32"))


def test_float32_joint_vectors_use_the_float64_draws():
    p = tp.parse("vector x, y, z ~ normal(cov=[[1, 0.5, 1], [0.5, 2, 0.5], [1, 0.5, 1]], mean=[0, 1, 0])\n"
                 "matrix W ~ normal()\nh = W @ (x * y + z)\nout a = mean(h * h)\nout b = mean((x - z) * y)")
    r64, r32 = p.execute(n=300, trials=2, seed=1), p.execute(n=300, trials=2, seed=1, dtype="float32")
    assert_close_runs(r64, r32)
    assert r32.outputs["b"].values == [0.0, 0.0]                     # x = z exactly, in float32 too


@pytest.mark.parametrize("law", ["normal(var=2)", "laplace()", "student_t(5)", "mvt(6)"])
def test_float32_blocked_runs_use_the_float64_draws(law):
    p = tp.parse(PROGRAM.format(v="normal()", v2="normal()", m=law))
    kw = dict(n=128, trials=2, seed=2, blocked=True, block_rows=7)
    assert_close_runs(p.execute(**kw), p.execute(**kw, dtype="float32"))


@pytest.mark.parametrize("family", ["normal", "uniform", "rademacher", "laplace", "student_t", "mvt"])
def test_float32_blocked_matrix_is_the_float64_one_rounded(family):
    spec = D.DistSpec(family, var=1.5, df=6.0 if family in D.HEAVY_TAILED else None)
    key = matrix_key(4, 1, 2)
    w64 = BlockedMatrix(key, spec, 40, 23, np.float64, block_rows=6).dense()
    w32 = BlockedMatrix(key, spec, 40, 23, np.float32, block_rows=6, threads=2).dense()
    assert w32.dtype == np.float32 and np.array_equal(w32, w64.astype(np.float32))


@pytest.mark.parametrize("family", sorted(D.FAMILIES))
@pytest.mark.parametrize("shape", [(40, 90), (90, 40), (300, 300)])
def test_sample_matrix_float64_draws(family, shape, monkeypatch):
    monkeypatch.setattr("tensorprog.distributions.sample.DRAW_BLOCK", 1000)   # several blocks per matrix
    spec = D.DistSpec(family, var=2.0, df=6.0 if family in D.HEAVY_TAILED else None)
    a64 = D.sample_matrix(np.random.default_rng(9), spec, *shape)
    a32 = D.sample_matrix(np.random.default_rng(9), spec, *shape, np.float32, draw_dtype=np.float64)
    assert a32.dtype == np.float32 and a32.shape == shape
    scale = math.sqrt(2.0 / shape[1])
    # orthogonal: the float32 QR of the same Gaussian; its last columns move by ~cond · eps32
    tol = 1e-4 if family == "orthogonal" else 1e-5
    np.testing.assert_allclose(a32, a64, rtol=tol, atol=tol * scale)
    again = D.sample_matrix(np.random.default_rng(9), spec, *shape, np.float32, draw_dtype=np.float64)
    assert a32.tobytes() == again.tobytes()
    # draw_dtype=float64 for a float64 matrix is the default
    same = D.sample_matrix(np.random.default_rng(9), spec, *shape, draw_dtype=np.float64)
    assert a64.tobytes() == same.tobytes()


@pytest.mark.parametrize("spec", [D.make_spec("student_t", [5], {}, for_matrix=False, n_vectors=3),
                                  D.make_spec("normal", [], {"cov": [[1, 1], [1, 1]], "mean": 2},
                                              for_matrix=False, n_vectors=2)],
                         ids=["student_t", "cov"])
def test_sample_vectors_float64_draws(spec):
    k = spec.n_vectors or 3
    v64 = D.sample_vectors(np.random.default_rng(3), spec, k, 5000)
    v32 = D.sample_vectors(np.random.default_rng(3), spec, k, 5000, np.float32, draw_dtype=np.float64)
    np.testing.assert_allclose(v32, v64, rtol=1e-5, atol=1e-5)


def test_default_draws_are_unchanged():
    """Without draw_dtype a float32 sample still draws float32 numbers (the sampler's speed contract)."""
    spec = D.DistSpec("normal")
    a = D.sample_matrix(np.random.default_rng(1), spec, 30, 50, np.float32)
    b = np.random.default_rng(1).standard_normal((30, 50), dtype=np.float32)
    b *= np.float32(math.sqrt(1 / 50))
    assert np.array_equal(a, b)
    with pytest.raises(D.DistributionError, match="draw_dtype"):
        D.sample_matrix(np.random.default_rng(1), spec, 3, 3, np.float64, draw_dtype=np.float32)


def test_float64_draws_memory_is_counted():
    import tracemalloc
    spec = D.DistSpec("student_t", df=5.0)
    for rows, cols in [(400, 400), (200, 700)]:
        D.sample_matrix(np.random.default_rng(), spec, rows, cols, np.float32, draw_dtype=np.float64)
        tracemalloc.start()
        try:
            D.sample_matrix(np.random.default_rng(), spec, rows, cols, np.float32, draw_dtype=np.float64)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        need = D.matrix_bytes(rows, cols, np.float32, spec, draw_dtype=np.float64)
        assert peak <= need and need > D.matrix_bytes(rows, cols, np.float32, spec)


def test_float32_parallel_trials_are_bit_identical():
    p = tp.parse(PROGRAM.format(v="normal()", v2="normal()", m="laplace()"))
    one = p.execute(n=64, trials=3, seed=4, dtype="float32", jobs=1)
    two = p.execute(n=64, trials=3, seed=4, dtype="float32", jobs=2)
    assert one.to_dict() == two.to_dict()


# ---- the distributions package ------------------------------------------------------------------------------
def test_distributions_reexports_its_public_names():
    for name in D.__all__:
        assert getattr(D, name) is not None
    from tensorprog.distributions import (COV_TOL, DEFAULT_DF, FAMILIES, HEAVY_TAILED, MATRIX_ONLY, VECTOR_FAMILIES, DistributionError, DistSpec, make_spec, matrix_bytes, psd_factor, sample_matrix, sample_vectors, with_family)
    assert issubclass(DistributionError, ValueError)


def test_address_space_limit_is_part_of_the_memory_check():
    """Under ``ulimit -v`` the memory check counts what the process may still map, so a run that
    would need more is refused with the GiB instead of dying with MemoryError (found by the long
    fuzz run under a 3 GiB limit: one 6 GiB vector at n = 8 with a width ratio of 1e8)."""
    import subprocess
    import sys
    code = ("import resource\n"
            "resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))\n"
            "import tensorprog as tp\n"
            "src = 'dim m = 100000000\\nvector v : m ~ normal()\\nout o = mean(v * v)'\n"
            "try:\n"
            "    tp.parse(src).execute(n=8)\n"
            "except tp.TPLimitError as e:\n"
            "    print(e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<string>:3:9: executing at this width needs about 5.96 GiB"), proc.stdout
    assert "GiB available" in proc.stdout
