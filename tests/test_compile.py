"""The limit compiler against references computed independently here (closed forms, scipy)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special

import tensorprog as tp


def relu_corr_map(rho: float) -> float:
    """Correlation after a He-scaled ReLU layer: (sin θ + (π − θ) cos θ)/π, θ = acos ρ."""
    theta = math.acos(max(-1.0, min(1.0, rho)))
    return (math.sin(theta) + (math.pi - theta) * math.cos(theta)) / math.pi


@pytest.mark.parametrize("L,rho", [(2, 0.3), (3, 0.3), (5, -0.6)])
def test_deep_relu_arccosine_recursion(L, rho):
    lim = tp.load("programs/relu_nngp.tp", L=L, rho=rho).compile().limit()
    r = rho
    for _ in range(L - 1):
        r = relu_corr_map(r)
    kxy = relu_corr_map(r) / 2                      # E relu(x) relu(y) at unit variance
    assert lim.outputs["kxx"].value == pytest.approx(0.5, abs=1e-13)
    assert lim.outputs["kxy"].value == pytest.approx(kxy, abs=1e-12)
    assert lim.outputs["kxy"].method == "exact"


def test_erf_arcsine_kernel():
    rho, var = 0.5, 2.0
    lim = tp.load("programs/erf_arcsine.tp").compile().limit()
    k1 = 2 / math.pi * math.asin(2 * rho / 3)
    q = var * 2 / math.pi * math.asin(2 / 3)
    k2 = 2 / math.pi * math.asin(2 * var * k1 / (1 + 2 * q))
    assert lim.outputs["k1"].value == pytest.approx(k1, abs=1e-12)
    assert lim.outputs["k2"].value == pytest.approx(k2, abs=1e-12)
    assert lim.outputs["k1"].method == "exact"


def test_fourth_moments_and_section_3_2_example():
    lim = tp.load("programs/initial_moments.tp").compile(symbolic=True).limit()
    out = lim.outputs
    assert out["g4"].exact == 3 and out["u4"].exact == sp.Rational(9, 5)
    assert out["r4"].exact == 1 and out["l4"].exact == 6
    assert out["r_phi"].value == 0 and out["r_phi"].method == "exact"
    ref, _ = integrate.quad(lambda z: z * z * math.exp(-z * z / 2) / math.sqrt(2 * math.pi), -0.5, 0.5,
                            epsabs=1e-15)
    assert abs(out["g_phi"].value - ref) <= max(out["g_phi"].error, 1e-14)
    assert out["g_phi"].value == pytest.approx(ref, abs=1e-10)


def test_wigner_moments_are_catalan_numbers_exactly():
    lim = tp.load("programs/wigner_moments.tp").compile(symbolic=True).limit()
    got = {k: v.exact for k, v in lim.outputs.items()}
    assert got == {"m2": 1, "m3": 0, "m4": 2, "m6": 5}
    assert all(isinstance(v, sp.Integer) for v in got.values())


def narayana(k: int, j: int) -> int:
    return math.comb(k, j) * math.comb(k, j - 1) // k


@pytest.mark.parametrize("ratio", ["1/2", "1/4"])
def test_wishart_moments_are_narayana_polynomials(ratio):
    r = sp.Rational(ratio)
    lim = tp.load("programs/marchenko_pastur.tp", ratio=float(r)).compile(symbolic=True).limit()
    for k, name in ((1, "w1"), (2, "w2"), (3, "w3")):
        truth = sum(narayana(k, j) * r**j for j in range(1, k + 1))
        form = lim.outputs[name].exact            # a polynomial in the dim ratio (params are leaves)
        assert form.free_symbols == {sp.Symbol("ratio", real=True)}, name
        assert sp.expand(form.subs(sp.Symbol("ratio", real=True), r)) == truth, name


def test_transposes_get_zdot_terms():
    compiled = tp.load("programs/wigner_moments.tp").compile()
    text = str(compiled)
    # p2 = (W p1 + Wᵀ p1)/√2 has the Ż correction v/√2 from each side
    assert "Z_v" in text.split("W @ %")[1] or "Z_v" in text


def test_warnings_name_the_hypothesis():
    cases = {
        "smooth nonlinearity": "vector x ~ normal()\nmatrix W ~ uniform()\nh = W @ relu(x)\nout k = mean(relu(h))",
        "all moments": "vector x ~ normal()\nmatrix W ~ student_t(df=3)\nh = W @ x\nout k = mean(h * h)",
        "pseudo-Lipschitz": "vector x ~ normal()\nout k = mean(1 / x)",
    }
    for hypothesis, text in cases.items():
        lim = tp.parse(text).compile().limit()
        assert any(f"[{hypothesis}]" in w for w in lim.warnings), (hypothesis, lim.warnings)
    clean = tp.load("programs/relu_nngp.tp").compile().limit()
    assert clean.warnings == []


def tanh_kernel_reference(rho: float) -> float:
    """E[tanh(u) tanh(v)], unit variances, correlation rho: nested adaptive quadrature."""
    s = math.sqrt(1 - rho * rho)

    def inner(u: float) -> float:
        f = lambda w: math.tanh(rho * u + s * w) * math.exp(-w * w / 2)
        return integrate.quad(f, -12, 12, epsabs=1e-14, epsrel=1e-13, limit=200)[0] / math.sqrt(2 * math.pi)
    g = lambda u: math.tanh(u) * inner(u) * math.exp(-u * u / 2) / math.sqrt(2 * math.pi)
    return integrate.quad(g, -12, 12, epsabs=1e-14, epsrel=1e-13, limit=200)[0]


def test_numeric_error_bounds_actual_error():
    rho = 0.5
    lim = tp.parse(f"vector x, y ~ normal(cov=[[1, {rho}], [{rho}, 1]])\n"
                   "out k = mean(tanh(x) * tanh(y))").compile().limit()
    k = lim.outputs["k"]
    assert k.method in ("series", "quadrature", "qmc")        # f(x)g(y): the Mehler series
    truth = tanh_kernel_reference(rho)
    assert abs(k.value - truth) <= k.error + 1e-14
    assert k.error < 1e-8


def test_compile_cli_json_contract():
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "compile", "programs/relu_nngp.tp",
                           "--emit", "json", "-D", "L=2"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) >= {"outputs", "warnings"}
    for out in data["outputs"].values():
        assert set(out) >= {"value", "error", "method", "exact"}
    assert data["outputs"]["kxx"]["value"] == pytest.approx(0.5)


def test_compile_cli_symbolic_prints_integers():
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "compile", "programs/wigner_moments.tp",
                           "--symbolic"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    tail = proc.stdout.split("# limits")[1]
    assert "m4 = 2 (exact" in tail and "m6 = 5 (exact" in tail


def test_zdot_term_is_needed_after_a_backward_pass():
    """Without Ż (the gradient independence assumption) the SGD limit is wrong: finite width
    at n = 4096 rejects it, while it accepts the full Master Theorem limit."""
    program = tp.load("programs/sgd_two_layer.tp")
    full = program.compile().limit().outputs["f1"]
    gia = tp.load("programs/sgd_two_layer.tp").ir
    from tensorprog.limit.compiler import compile_program
    wrong = compile_program(gia, zdot=False).limit().outputs["f1"]
    run = program.execute(n=4096, trials=12, seed=5).outputs["f1"]
    se = run.std / math.sqrt(12)
    assert abs(run.mean - full.value) < 5 * se + 4 / 4096
    assert abs(run.mean - wrong.value) > 5 * se + 4 / 4096 + abs(wrong.error)


def test_symbolic_keeps_covariance_params_as_symbols():
    lim = tp.load("programs/relu_nngp.tp", L=2).compile(symbolic=True).limit()
    formula = lim.outputs["kxy"].exact
    rho = sp.Symbol("rho", real=True)
    assert formula.free_symbols == {rho}
    for r in (-0.7, 0.0, 0.3, 0.9):                    # the formula, not just its value at rho = 0.3
        assert float(formula.subs(rho, r)) == pytest.approx(relu_corr_map(relu_corr_map(r)) / 2, abs=1e-12)
    # a param that changes the structure (L) stays a number; the value is the same as numeric mode
    numeric = tp.load("programs/relu_nngp.tp", L=2).compile().limit().outputs["kxy"].value
    assert lim.outputs["kxy"].value == pytest.approx(numeric, abs=1e-13)


def test_qmc_budget_is_bounded_and_says_so():
    # a batch covariance that is not exchangeable (ar = 1): σ² is no block norm, so QMC (batchnorm_relu.tp,
    # used here before, is exact since the shifted-norm rule of expect/blocks.py)
    p = tp.load("programs/bn_fixed_point.tp", B=4, ar=1)
    lim = p.compile(max_qmc_points=4096).limit()
    k = lim.outputs["c12"]
    assert k.method == "qmc" and k.error > 1e-5           # a small budget shows in the error ...
    assert any("[budget]" in w and "--max-qmc-points" in w for w in lim.warnings)   # ... and is named
    better = p.compile(max_qmc_points=2**18).limit().outputs["c12"]
    assert better.error < k.error and abs(better.value - k.value) <= better.error + k.error
