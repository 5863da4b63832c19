"""Finite-width execution: statistics against known expectations, reproducibility, plans, limits.

Tolerances are 5 standard errors, the SE derived from the known variance of the
estimator where possible, otherwise from the spread over trials."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.finite.schedule import make_plan


def arccos1(rho: float) -> float:
    """2 E[relu(u) relu(v)] for unit Gaussians with correlation rho (Cho & Saul, degree 1)."""
    theta = math.acos(rho)
    return (math.sin(theta) + (math.pi - theta) * math.cos(theta)) / math.pi


@pytest.mark.parametrize("var", [0.5, 2.0])
def test_second_moment_of_initial_vector(var):
    p = tp.parse(f"vector x ~ normal(var={var})\nout m = mean(x * x)")
    n, trials = 4096, 16
    r = p.execute(n=n, trials=trials, seed=1)
    se = var * math.sqrt(2 / (n * trials))          # Var(x²) = 2 var²
    assert abs(r.outputs["m"].mean - var) < 5 * se


def test_one_layer_relu_matches_arccosine():
    rho = 0.4
    p = tp.parse(f"""
vector x, y ~ normal(cov=[[1, {rho}], [{rho}, 1]])
matrix W ~ normal(var=2)
h = W @ relu(x)
g = W @ relu(y)
out k = mean(h * g)
out q = mean(h * h)
""")
    r = p.execute(n=4096, trials=12, seed=3)
    for name, truth in (("k", arccos1(rho)), ("q", 1.0)):
        o = r.outputs[name]
        assert abs(o.mean - truth) < 5 * o.std / math.sqrt(12) + 1 / 4096, (name, o.mean, truth)
    # and the estimator does move with rho: a wrong formula would be caught
    assert abs(arccos1(rho) - arccos1(0.0)) > 20 * r.outputs["k"].std / math.sqrt(12)


def test_same_seed_bit_identical_and_trials_independent_of_count():
    p = tp.load("programs/relu_nngp.tp")
    a = p.execute(n=128, trials=3, seed=7).outputs["kxy"].values
    b = p.execute(n=128, trials=3, seed=7).outputs["kxy"].values
    c = p.execute(n=128, trials=1, seed=7).outputs["kxy"].values
    d = p.execute(n=128, trials=3, seed=8).outputs["kxy"].values
    assert a == b
    assert c[0] == a[0]
    assert len(set(a)) == 3 and a != d


def test_matmuls_on_one_matrix_run_as_one_gemm():
    p = tp.parse("""
param B = 8
vector x[1..B] ~ normal()
matrix W ~ normal()
for b in 1..B { x[b] = W @ relu(x[b]) }
out k = sum(b in 1..B: mean(x[b] * x[1]))
""")
    plan = make_plan(p.ir)
    gemms = [s for s in plan.steps if s.is_gemm]
    assert len(gemms) == 1 and len(gemms[0].eqns) == 8


def test_gemm_batch_equals_separate_products():
    text = """
vector x, y ~ normal()
matrix W ~ normal()
a = W @ x
b = W @ y
c = W.T @ a
out s = mean(a * b + c * c)
"""
    p = tp.parse(text)
    r = p.execute(n=64, trials=1, seed=0).outputs["s"].values[0]
    from tensorprog import distributions as D
    # the documented streams: SeedSequence(seed, spawn_key=(trial, var of the group's first member / matrix))
    xs = D.sample_vectors(np.random.default_rng(np.random.SeedSequence(0, spawn_key=(0, 0))),
                          p.ir.groups[0].dist, 2, 64)
    w = D.sample_matrix(np.random.default_rng(np.random.SeedSequence(0, spawn_key=(0, 2))),
                        p.ir.eqns[2].dist, 64, 64)
    a, b = w @ xs[0], w @ xs[1]
    c = w.T @ a
    assert r == pytest.approx(float(np.mean(a * b + c * c)), rel=1e-12)


@pytest.mark.parametrize("family", ["normal", "uniform", "rademacher", "laplace", "student_t",
                                    "orthogonal", "mvt"])
def test_matrix_dist_keeps_variance(family):
    p = tp.parse("vector x ~ normal()\nmatrix W ~ normal(var=3)\nh = W @ x\nout q = mean(h * h)\n"
                 "out x2 = mean(x * x)")
    # orthogonal: |W x|² = 3 |x|² exactly at every width, and its Haar draws cost O(n³) (41 s at 512)
    n = 128 if family == "orthogonal" else 512
    r = p.execute(n=n, trials=24, seed=5, matrix_dist=family)
    ratio = np.array(r.outputs["q"].values) / np.array(r.outputs["x2"].values)
    se = ratio.std(ddof=1) / math.sqrt(len(ratio))
    assert abs(ratio.mean() - 3.0) < 5 * se + 3.0 / n


def test_nan_is_reported_at_its_statement():
    p = tp.parse("vector x ~ normal()\ny = log(x)\nout m = mean(y)")
    with pytest.raises(tp.TPNumericalError) as err:
        p.execute(n=64)
    assert (err.value.line, err.value.col) == (2, 5)   # the expression log(x)
    assert "NaN" in str(err.value)


def test_overflow_is_reported_as_overflow():
    p = tp.parse("vector x ~ normal()\nout m = mean(exp(1000 * x))")
    with pytest.raises(tp.TPNumericalError) as err:
        p.execute(n=64)
    assert "overflow" in str(err.value) and err.value.line == 2


def test_memory_refused_before_allocation():
    p = tp.load("programs/relu_nngp.tp")
    with pytest.raises(tp.TPLimitError) as err:
        p.execute(n=10**6)
    assert "GiB" in str(err.value)
    with pytest.raises(tp.TPLimitError):
        p.execute(n=1024, memory_limit=1024 * 1024)


def test_float32_runs_in_float32_and_agrees():
    p = tp.load("programs/universality_tanh.tp")
    r32 = p.execute(n=1024, trials=8, seed=2, dtype=np.float32)
    r64 = p.execute(n=1024, trials=8, seed=2)
    assert r32.dtype == "float32"
    for name in ("kxy", "kxx"):
        a, b = r32.outputs[name], r64.outputs[name]
        assert abs(a.mean - b.mean) < 5 * math.hypot(a.std, b.std) / math.sqrt(8)


def test_rectangular_widths():
    p = tp.parse("dim m = 0.5\nvector x ~ normal()\nmatrix A : m x n ~ normal(var=1)\n"
                 "h = A @ x\nout q = mean(h * h)\nout r = mean((A.T @ h) ** 2)")
    r = p.execute(n=1024, trials=8, seed=0)
    # E (Ax)_i² = var·E x² = 1;  Aᵀ(Ax): entries var/n, summing m = n/2 terms: ≈ (1/2)·E h² + ...
    assert abs(r.outputs["q"].mean - 1.0) < 5 * r.outputs["q"].std / math.sqrt(8) + 1e-3
    assert len(p.execute(n=10).outputs["q"].values) == 1
