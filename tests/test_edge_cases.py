"""Numerical edge cases and resource limits (issue 6, items 3 and 4), each at finite width and in the limit.

* singular and rank-deficient covariances: x = y, x = −y, a zero vector, a linear dependence;
* overflow (exp of large arguments) reported as an overflow, not as NaN;
* division by a quantity that is zero at finite width, reported located;
* huge widths refused before anything is allocated, naming the memory needed;
* float32 against float64 within float32 precision;
* bounds on the unrolled program: ``max_nodes``, expression depth and size, deep nesting.

Several of these tests were strict xfails pinning back-end bugs (overflow reported as NaN, 1/0 as
overflow, sympy's zoo, E[x**4000], a 300-Nonlin chain, nested kinks, float32 streams); all are fixed.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent


def limit_of(src: str, **options) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tp.parse(src).compile(**options).limit().outputs


def agree(run, lim, name: str, allow: float = 0.0, k: float = 5.0) -> None:
    o, L = run.outputs[name], lim[name]
    se = o.std / math.sqrt(len(o.values))
    assert abs(o.mean - L.value) <= k * se + allow + L.error, (name, o.mean, se, L.value, L.error)


# ---- singular and rank-deficient covariances ---------------------------------------------------------------
W = "matrix W ~ normal()\n"
SAME = "vector x, y ~ normal(cov=[[1, 1], [1, 1]])\n" + W + """h = W @ relu(x)
g = W @ relu(y)
out xy = mean(x * y)
out rr = mean(relu(x) * relu(y))
out hg = mean(h * g)
out dd = mean((h - g) ** 2)
out tt = mean(tanh(h) * tanh(g))
out ss = mean(step(x) * step(y))
"""
OPPOSITE = "vector x, y ~ normal(cov=[[1, -1], [-1, 1]])\n" + W + """h = W @ relu(x)
g = W @ relu(y)
u = W @ x
v = W @ y
out xy = mean(x * y)
out rr = mean(relu(x) * relu(y))
out ss = mean(step(x) * step(y))
out hg = mean(h * g)
out uv = mean(u + v)
out tt = mean(tanh(u) * tanh(v))
"""
ZERO = "vector x, z ~ normal(cov=[[1, 0], [0, 0]])\n" + W + """h = W @ z
g = W @ tanh(z)
out zz = mean(z * z)
out hh = mean(h * h)
out tz = mean(tanh(x + z) ** 2)
out rz = mean(relu(z))
out sz = mean(step(z))
out gg = mean(g * g)
out sh = mean(sign(h))
out eh = mean(exp(h))
"""


def test_equal_vectors_are_equal_at_finite_width_and_in_the_limit():
    p = tp.parse(SAME)
    r = p.execute(n=1024, trials=6, seed=2)
    assert r.outputs["dd"].values == [0.0] * 6                    # h ≡ g: one draw, bit-identical
    lim = limit_of(SAME)
    assert lim["xy"].value == pytest.approx(1.0, abs=1e-14)
    assert lim["rr"].value == pytest.approx(0.5, abs=1e-14)
    assert lim["hg"].value == pytest.approx(0.5, abs=1e-14)
    assert lim["ss"].value == pytest.approx(0.5, abs=1e-14)
    assert lim["dd"].value == pytest.approx(0.0, abs=1e-14)
    for name in ("xy", "rr", "hg", "tt", "ss"):
        agree(r, lim, name)


def test_opposite_vectors_at_finite_width_and_in_the_limit():
    p = tp.parse(OPPOSITE)
    r = p.execute(n=1024, trials=6, seed=2)
    for name in ("rr", "ss", "uv"):                                # relu(x) relu(−x) ≡ 0, W x + W(−x) ≡ 0
        assert r.outputs[name].values == [0.0] * 6, name
    lim = limit_of(OPPOSITE)
    assert lim["xy"].value == pytest.approx(-1.0, abs=1e-14)
    assert lim["ss"].value == pytest.approx(0.0, abs=1e-14)
    assert lim["uv"].value == pytest.approx(0.0, abs=1e-14)
    assert lim["rr"].value == pytest.approx(0.0, abs=1e-14)
    assert lim["hg"].value == pytest.approx(0.0, abs=1e-14)
    for name in ("xy", "hg", "tt"):
        agree(r, lim, name)


# fixed: limit.summarize's rounding allowance covers O(1) terms that cancel
def test_exact_value_at_correlation_minus_one_is_within_its_error():
    src = "vector x, y ~ normal(cov=[[1, -1], [-1, 1]])\n" + W + "h = W @ x\ng = W @ y\nout b = mean(relu(h) * relu(g))"
    L = limit_of(src)["b"]
    assert abs(L.value - 0.0) <= L.error


def test_zero_vector_at_finite_width_and_in_the_limit():
    p = tp.parse(ZERO)
    r = p.execute(n=512, trials=4, seed=3)
    for name in ("zz", "hh", "rz", "sz", "gg", "sh"):
        assert r.outputs[name].values == [0.0] * 4, name
    assert r.outputs["eh"].values == [1.0] * 4
    lim = limit_of(ZERO)
    for name in ("zz", "hh", "rz", "sz", "gg", "sh"):
        assert lim[name].value == pytest.approx(0.0, abs=1e-14), name
    assert lim["eh"].value == pytest.approx(1.0, abs=1e-14)
    agree(r, lim, "tz")


def test_zero_vector_made_by_a_nonlin():
    src = "vector x ~ normal()\n" + W + "z = x * 0\nh = W @ z\nout a = mean(h * h)\nout b = mean(step(h))\n" \
        "out c = mean(exp(h))"
    r = tp.parse(src).execute(n=256, trials=2)
    lim = limit_of(src)
    assert [r.outputs[k].mean for k in "abc"] == [0.0, 0.0, 1.0]
    assert [lim[k].value for k in "abc"] == pytest.approx([0.0, 0.0, 1.0], abs=1e-14)


def test_rank_deficient_covariance_of_three_vectors():
    # s = (x + y)/2 exactly: a singular 3×3 covariance; smooth functions of x + y − 2s ≡ 0
    src = """vector x, y, s ~ normal(cov=[[1, 0.5, 0.75], [0.5, 1, 0.75], [0.75, 0.75, 0.75]])
matrix W ~ normal()
h = W @ relu(x + y - 2 * s)
k = W @ tanh(s)
out a = mean((s - (x + y) / 2) ** 2)
out b = mean(relu(x + y - 2 * s))
out c = mean(h * h)
out d = mean(k * tanh(x + y))
"""
    r = tp.parse(src).execute(n=1024, trials=4, seed=5)
    lim = limit_of(src)
    for name in "abc":                       # zero up to the rounding of the sampled combination
        assert abs(r.outputs[name].mean) < 1e-12, name
        assert lim[name].value == pytest.approx(0.0, abs=1e-14), name
    agree(r, lim, "d")


# ---- overflow ---------------------------------------------------------------------------------------------
def overflow_message(err: tp.TPError) -> None:
    text = str(err).splitlines()[0].lower()
    assert "nan" not in text and ("overflow" in text or "inf" in text), text


def test_overflow_at_finite_width_is_an_overflow():
    src = "vector x ~ normal()\ny = exp(1000 * x)\nout o = mean(tanh(y))"
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=64)
    assert (err.value.line, err.value.col) == (2, 5)
    assert "overflow" in str(err.value)


def test_overflow_in_a_moment_is_an_overflow_in_both_back_ends():
    src = "vector x ~ normal()\nout o = mean(exp(1000 * x))"
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=64)
    assert (err.value.line, err.value.col) == (2, 9)
    overflow_message(err.value)
    with pytest.raises(tp.TPNumericalError) as err:
        limit_of(src)
    assert (err.value.line, err.value.col) == (2, 9)
    overflow_message(err.value)


@pytest.mark.parametrize("src, at", [("out o = exp(1000)", (1, 9)), ("param a = 1e308 * 10", (1, 11)),
                                     ("param a = 800\nvector x ~ normal()\nout o = mean(x) * exp(a)", (3, 19)),
                                     ("out o = 1e308 + 1e308", (1, 9))])
def test_overflow_of_constants_is_located(src, at):
    with pytest.raises(tp.TPValueError) as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == at
    overflow_message(err.value)


@pytest.mark.parametrize("expr", ["exp(1000 * x) - exp(1000 * x)", "exp(1000 * x) * 0", "x * exp(c)"])
def test_overflow_inside_an_expression_is_not_reported_as_nan(expr):
    src = f"vector x ~ normal()\nc = mean(x * x) * 800\nout o = mean({expr})"
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=64)
    overflow_message(err.value)


def test_overflowing_scalar_limit_is_an_error():
    src = "vector x ~ normal()\nc = mean(x * x) * 800\nout o = exp(c)"
    with pytest.raises(tp.TPNumericalError) as err:
        limit_of(src)
    assert (err.value.line, err.value.col) == (3, 9)


def test_huge_polynomial_moment_is_a_located_error():
    with pytest.raises(tp.TPError) as err:
        limit_of("vector x ~ normal()\nout o = mean(x ** 4000)")
    assert err.value.line == 2


# ---- division by zero -------------------------------------------------------------------------------------
ZERO_MOMENT = "vector x ~ normal()\nc = mean(x * 0)\n"


@pytest.mark.parametrize("out, at", [("out o = 1 / c", (3, 9)), ("out o = mean(x / c)", (3, 9)),
                                     ("y = tanh(x) / c\nout o = mean(y)", (3, 5))])
def test_division_by_a_zero_moment_at_finite_width_is_located(out, at):
    src = ZERO_MOMENT + out
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=64)
    assert (err.value.line, err.value.col) == at
    assert str(err.value).startswith(f"<string>:{at[0]}:{at[1]}: ")


def test_division_by_a_zero_moment_in_the_limit_of_a_moment_is_located():
    with pytest.raises(tp.TPNumericalError) as err:
        limit_of(ZERO_MOMENT + "out o = mean(x / c)")
    assert (err.value.line, err.value.col) == (3, 9)


@pytest.mark.parametrize("moment", ["mean(x * 0)", "mean(x)"])
def test_division_by_a_zero_limit_is_a_located_error(moment):
    with pytest.raises(tp.TPNumericalError) as err:
        limit_of(f"vector x ~ normal()\nc = {moment}\nout o = 1 / c")
    assert (err.value.line, err.value.col) == (3, 9)


def test_division_by_zero_is_not_called_an_overflow():
    with pytest.raises(tp.TPNumericalError, match="division by zero"):
        tp.parse(ZERO_MOMENT + "out o = 1 / c").execute(n=64)


@pytest.mark.parametrize("src, at", [("out o = 1 / 0", (1, 9)), ("param a = 0\nout o = 2 / a", (2, 9)),
                                     ("out o = 0 ** -1", (1, 9)), ("out o = log(0)", (1, 9))])
def test_constant_division_by_zero_is_located(src, at):
    with pytest.raises(tp.TPValueError) as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == at


# ---- huge widths ------------------------------------------------------------------------------------------
MLP = "vector x ~ normal()\nmatrix W ~ normal()\nh = W @ tanh(x)\nout o = mean(h * h)\n"


@pytest.mark.parametrize("n, src", [(10**6, MLP), (2**40, MLP), (10**11, "vector x ~ normal()\nout o = mean(x * x)"),
                                    (64, "dim m = 1e9\nvector x ~ normal()\nmatrix A : m x n ~ normal()\n"
                                         "out o = mean(A @ x)")])
def test_huge_width_is_refused_before_allocation(n, src):
    p = tp.parse(src)
    tracemalloc.start()
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    try:
        with pytest.raises(tp.TPLimitError) as err:
            p.execute(n=n)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.process_time() - t0 < 5
    assert peak < 64 << 20                                        # nothing of the size of a matrix was allocated
    assert "GiB" in str(err.value) and "needs" in str(err.value)
    assert err.value.line >= 1 and str(err.value).startswith(f"<string>:{err.value.line}:")


def test_memory_limit_names_the_memory_needed():
    with pytest.raises(tp.TPLimitError, match=r"needs about 0\.\d+ GiB"):
        tp.parse(MLP).execute(n=4096, memory_limit=1 << 20)


def test_huge_width_through_the_cli():
    path = ROOT / "programs" / "relu_nngp.tp"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "tensorprog", "execute", str(path), "-n", "10000000"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    assert "GiB" in out.stderr and "Traceback" not in out.stderr


# ---- float32 against float64 ------------------------------------------------------------------------------
F32 = """vector x ~ {v}()
vector y ~ {v}(var=2)
matrix W ~ {m}()
matrix V ~ {m}(var=2)
h = W @ tanh(x + 0.5 * y)
g = V @ sin(h)
b = W.T @ (g * h)
out a = mean(g * g)
out c = mean(tanh(b) * x)
out d = mean(exp(tanh(g)) * h)
out q = mean(b * b)
"""


def test_float32_agrees_with_float64_within_float32_precision_on_the_same_draws():
    # Rademacher draws are the same bits in both dtypes: the runs differ by rounding only
    p = tp.parse(F32.format(v="rademacher", m="rademacher"))
    r64 = p.execute(n=1024, trials=3, seed=5)
    r32 = p.execute(n=1024, trials=3, seed=5, dtype=np.float32)
    assert r32.dtype == "float32"
    for name, o in r64.outputs.items():
        scale = max(1.0, max(abs(v) for v in o.values))
        assert r32.outputs[name].values == pytest.approx(o.values, abs=1e-4 * scale), name


def test_float32_agrees_with_float64_in_distribution():
    p = tp.parse(F32.format(v="normal", m="normal"))
    r64 = p.execute(n=1024, trials=8, seed=5)
    r32 = p.execute(n=1024, trials=8, seed=6, dtype=np.float32)
    for name, o in r64.outputs.items():
        o32 = r32.outputs[name]
        se = math.hypot(o.std, o32.std) / math.sqrt(8)
        assert abs(o.mean - o32.mean) <= 5 * se + 1e-6, name


def test_float32_uses_the_same_gaussian_draws_as_float64():
    p = tp.parse(F32.format(v="normal", m="normal"))
    r64 = p.execute(n=512, trials=2, seed=5)
    r32 = p.execute(n=512, trials=2, seed=5, dtype=np.float32)
    for name, o in r64.outputs.items():
        scale = max(1.0, max(abs(v) for v in o.values))
        assert r32.outputs[name].values == pytest.approx(o.values, abs=1e-4 * scale), name


# ---- resource limits of the front end ---------------------------------------------------------------------
@pytest.mark.parametrize("src", [
    "vector x ~ normal()\nfor i in 1..100000 {\n  matrix W ~ normal()\n  x = W @ tanh(x)\n}\nout o = mean(x)",
    "vector h[1..100000] ~ normal()\nout o = mean(h[1])",
    "matrix A[1..100000] ~ normal()\nvector x ~ normal()\nout o = mean(A[1] @ x)",
    "vector x ~ normal()\nout o = mean(sum(j in 1..100000: x * j))",
    "param a = [i for i in 1..100000]",
    "vector x ~ normal()\nfor i in 1..300 {\n  for j in 1..300 {\n    x = tanh(x)\n  }\n}\nout o = mean(x)",
])
def test_unrolled_size_is_bounded_by_max_nodes(src):
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    with pytest.raises(tp.TPLimitError, match="max_nodes|too many") as err:
        tp.parse(src, max_nodes=1000)
    assert time.process_time() - t0 < 5
    assert err.value.line >= 1


def test_max_nodes_is_the_knob():
    src = "vector x ~ normal()\nfor i in 1..50 {\n  matrix W ~ normal()\n  x = W @ tanh(x)\n}\nout o = mean(x)"
    with pytest.raises(tp.TPLimitError, match=r"raise max_nodes"):
        tp.parse(src, max_nodes=100)
    assert len(tp.parse(src, max_nodes=200).ir.eqns) > 100


def test_exponential_defs_are_bounded_quickly():
    # g_k doubles the expression of g_{k-1}: g_40 would have 2^40 operations
    defs = "def g1(a) = a * a\n" + "".join(f"def g{k}(a) = g{k - 1}(a) * g{k - 1}(a)\n" for k in range(2, 41))
    t0 = time.process_time()          # CPU seconds: a bound on the work, not on the machine's load
    with pytest.raises(tp.TPLimitError, match="raise max_nodes") as err:
        tp.parse("vector x ~ normal()\n" + defs + "out o = mean(g40(x))", max_nodes=10_000)
    assert time.process_time() - t0 < 5
    assert err.value.line >= 2


@pytest.mark.parametrize("expr", ["tanh(" * 101 + "x" + ")" * 101, "x" + " + x" * 101, "-" * 101 + "x",
                                  "x * tanh(" + "sin(" * 100 + "x" + ")" * 101])
def test_expression_depth_is_bounded_with_a_located_error(expr):
    with pytest.raises(tp.TPLimitError, match="nests more than 100 operations deep") as err:
        tp.parse("vector x ~ normal()\nout o = mean(" + expr + ")")
    assert err.value.line == 2


@pytest.mark.parametrize("expr", ["(" * 5000 + "x" + ")" * 5000, "tanh(" * 5000 + "x" + ")" * 5000,
                                  "x" + " + x" * 5000, "-" * 5000 + "x", "[" * 5000 + "x" + "]" * 5000])
def test_very_deep_nesting_is_a_located_error_not_a_recursion_error(expr):
    src = "vector x ~ normal()\nout o = mean(" + expr + ")"
    try:
        tp.parse(src)
    except tp.TPError as err:
        assert isinstance(err, (tp.TPLimitError, tp.TPTypeError))
        assert err.line == 2 and str(err).startswith("<string>:2:")


@pytest.mark.slow                 # ~110 s of CPU: the compile of 300 tanh atoms at the depth bound
def test_expressions_at_the_depth_bound_run_in_both_back_ends():
    src = "vector x ~ normal()\nout o = mean(" + "tanh(" * 100 + "x" + ")" * 100 + ")\n" \
          "out p = mean(x" + " + x" * 99 + ")\nout q = mean(sum(j in 1..300: tanh(x / j)))"
    p = tp.parse(src)
    r = p.execute(n=64)
    lim = p.compile().limit().outputs
    assert set(r.outputs) == set(lim) == {"o", "p", "q"}


def test_long_chain_of_nonlins_compiles():
    src = "vector x ~ normal()\nfor i in 1..300 { x = tanh(x) }\nout o = mean(x * x)"
    try:
        limit_of(src)
    except tp.TPLimitError:
        pass


class _Budget(Exception):
    pass


def _within(seconds: float, fn):
    """fn() under a wall-clock alarm (raises _Budget when it runs over)."""
    import signal

    def ring(signum, frame):
        raise _Budget(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_nested_kinks_compile_within_a_budget():
    src = "vector x ~ normal()\nout o = mean(" + "relu(1 - " * 6 + "x" + ")" * 6 + ")"
    p = tp.parse(src)
    try:
        lim = _within(5, lambda: p.compile().limit().outputs["o"])
    except tp.TPLimitError:
        return
    # relu(1 − ·) applied twice is clip(·, 0, 1): six times too, so the limit is E clip(Z, 0, 1)
    assert lim.value == pytest.approx(0.31562680981374636, abs=1e-8)
