"""Params as leaves (``compile --symbolic``): closed forms in a matrix variance, a bias variance, a
correlation and a dim ratio, equal to the numeric compile at random param values; the lowering
with params as leaves changes no number."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent

NNGP = """
param sw = 2
param sb = 0.1
param rho = 0.3
vector x, y ~ normal(cov=[[1 + sb, rho + sb], [rho + sb, 1 + sb]])
out kxy = sw * mean(relu(x) * relu(y)) + sb
out kxx = sw * mean(relu(x) ** 2) + sb
out sq = mean(relu(x) * relu(y)) ** 2
"""

LAYER = """
param sw = 2
param sb = 0.1
vector x ~ normal(var=1 + sb)
matrix W ~ normal(var=sw)
h = W @ relu(x)
out q = mean(h * h)
out m = mean(relu(x) * h) ** 2 + sw
"""


def exact_of(compiled, name: str) -> sp.Expr:
    out = next(o for o in compiled.program.outputs if o.name == name)
    return compiled.result(out.var).exact


def arccos_nngp(sw: float, sb: float, rho: float) -> float:
    """sw·E[relu(u) relu(v)] + sb for (u, v) ~ N(0, [[1+sb, rho+sb], [rho+sb, 1+sb]]): the degree-1
    arc-cosine kernel (Cho & Saul 2009), q/(2π)·(sin θ + (π − θ) cos θ), cos θ = (rho+sb)/(1+sb)."""
    q = 1 + sb
    theta = math.acos((rho + sb) / q)
    return sw * q / (2 * math.pi) * (math.sin(theta) + (math.pi - theta) * math.cos(theta)) + sb


def test_relu_nngp_closed_form_in_sw_sb_rho():
    compiled = tp.parse(NNGP).compile(symbolic=True)
    kxy = exact_of(compiled, "kxy")
    names = {s.name for s in kxy.free_symbols}
    assert names == {"sw", "sb", "rho"}
    rng = np.random.default_rng(1)
    for _ in range(4):
        sw, sb, rho = rng.uniform(0.5, 3), rng.uniform(0, 1), rng.uniform(-0.9, 0.9)
        at = {s: {"sw": sw, "sb": sb, "rho": rho}[s.name] for s in kxy.free_symbols}
        assert float(sp.N(kxy.subs(at), 30)) == pytest.approx(arccos_nngp(sw, sb, rho), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("source", [NNGP, LAYER])
def test_closed_forms_equal_numeric_compiles_at_random_params(source):
    compiled = tp.parse(source).compile(symbolic=True)
    rng = np.random.default_rng(7)
    for _ in range(3):
        values = {"sw": rng.uniform(0.5, 3), "sb": rng.uniform(0, 1), "rho": rng.uniform(-0.9, 0.9)}
        program = tp.parse(source, **{k: v for k, v in values.items() if f"param {k} " in source})
        numeric = program.compile()
        for out in compiled.program.outputs:
            form = exact_of(compiled, out.name)
            assert form is not None and form.free_symbols, out.name
            got = float(sp.N(form.subs({s: values[s.name] for s in form.free_symbols}), 30))
            want = numeric.result(out.var).value
            assert got == pytest.approx(want, rel=1e-12, abs=1e-12), out.name


def test_marchenko_pastur_moments_in_the_dim_ratio():
    program = tp.load(str(ROOT / "programs/marchenko_pastur.tp"))
    compiled = program.compile(symbolic=True)
    r = sp.Symbol("ratio", real=True)
    want = {"w1": r, "w2": r + r ** 2, "w3": r + 3 * r ** 2 + r ** 3}
    for name, form in want.items():
        assert sp.expand(exact_of(compiled, name) - form) == 0


def test_ntk_products_of_moments_do_not_crash_and_match_numbers():
    program = tp.load(str(ROOT / "programs/kernels/relu_mlp.tp"), L=2, b1=0.1)
    symbolic, numeric = program.compile(symbolic=True), program.compile()
    for out in numeric.program.outputs:
        a, b = symbolic.result(out.var), numeric.result(out.var)
        assert abs(a.value - b.value) <= 5 * (a.error + b.error) + 1e-12, out.name


def test_structural_params_stay_numbers():
    """L sets the loop bound: it stays a number; the variances stay symbols."""
    compiled = tp.load(str(ROOT / "programs/kernels/relu_mlp.tp"), L=1).compile(symbolic=True)
    nngp = exact_of(compiled, "nngp")
    assert nngp is not None and {s.name for s in nngp.free_symbols} == {"var1", "b1", "q11", "q12", "q22"}


def test_traced_lowering_changes_no_number():
    for path in ["programs/relu_nngp.tp", "programs/kernels/relu_mlp.tp", "programs/golikov_ntk_relu.tp"]:
        program = tp.load(str(ROOT / path))
        assert program._traced() == program.ir
        assert program._traced().leaves is not None


PROGRAMS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("programs/**/*.tp"))
#: a fast subset for the default run (a few seconds each); every shipped program runs under
#: ``-m slow`` (CI runs ``python -m pytest -m slow`` after the default suite; ``bench/symbolic_programs.py``
#: times each).  The mup_train* programs are the slowest (up to about a CPU minute each: the QMC
#: expectations of their training steps); the numeric compile after the symbolic one reuses its
#: numeric expectations (``expect.numeric.JOBS``), so each costs about one compile
FAST = {"programs/relu_nngp.tp", "programs/marchenko_pastur.tp", "programs/erf_arcsine.tp",
        "programs/golikov_wigner.tp", "programs/kernels/relu_mlp.tp", "programs/gp4a_transformer.tp"}


#: programs whose default size is a long training run, compiled at fewer steps (the same recurrence,
#: shorter).  Their expectations are integrals over O(T·P) Gaussians that no rule reduces: each is a
#: nonlinearity of a sum over the examples (tanh(ℓ₂₀ + Σ_ν c_ν ℓ_ν (1 − tanh² ℓ′_ν)) in dmft at T = 1), not a
#: sum of per-example terms, so it goes to QMC at the full budget (2^20 points; tol = 1e-10 is out of
#: QMC's reach) beyond three dimensions, and their number grows with T too.  The --symbolic compile's
#: numbers route evaluates covariances through the params (1-ulp different), so the plain compile after
#: it recomputes most of its QMC jobs instead of reusing them (expect.numeric.JOBS).  Measured (CPU s, one core
#: of a loaded 2-core machine; bench/training_programs.py; "sym + plain" is what this test costs):
#:   * mup_train_curve (T = 100 by default): plain T = 3 10.6 s, T = 4 20 s, T = 5 34 s, T = 6 70 s
#:     (3D tensor quadrature and 4-6D QMC; × ~1.7 a step, so T = 10 is ~10 min and T = 100 out of reach:
#:     use --method particles, as the program says); sym + plain at T = 3 12 + 3 s, T = 5 38 + 15 s;
#:   * mup_deep_train (T = 3 by default): T = 1 10 s plain; T = 2 156 s for --symbolic (loss5 0.12487 ±
#:     1.3e-4: at the default budget the check is meaningful) and about as much again for the plain compile
#:     (was 263 s plain), so T = 2 is over 5 CPU minutes here and T = 3 far beyond;
#:   * dmft_tanh_depth3 (T = 5 steps, P = 10 examples): T = 1 takes 228 s plain and 243 s --symbolic
#:     (loss1 0.98363 ± 0.015; 520 QMC jobs over 20-22 forms, 0.24 s each on one BLAS thread, where they
#:     took 2-4 s on two: about 35 minutes before), over 8 CPU minutes for this test, so it runs at T = 0
#:     (7 CPU s for both compiles): the forward pass (the covariances of h2, h3 over the P examples) and
#:     the loss before training, Σ target²/P = 1 since f − f0 = 0, so there the check is that --symbolic
#:     lowers and compiles the whole program (its C table, defs, nested loops, min() indices) without a
#:     crash and agrees on that loss; its training limit is taken by particles (tests/test_dmft_program.py).
SMALLER = {"programs/mup_train_curve.tp": {"T": 5}, "programs/mup_deep_train.tp": {"T": 1},
           "programs/dmft_tanh_depth3.tp": {"T": 0}}


@pytest.mark.parametrize("path", [p if p in FAST else pytest.param(p, marks=pytest.mark.slow) for p in PROGRAMS])
def test_every_shipped_program_compiles_symbolically(path):
    """--symbolic never crashes, and its values are the numeric compile's (within the errors)."""
    program = tp.load(str(ROOT / path), **SMALLER.get(path, {}))
    symbolic, numeric = program.compile(symbolic=True), program.compile()
    for out in numeric.program.outputs:
        a, b = symbolic.result(out.var), numeric.result(out.var)
        tol = 5 * (np.asarray(a.error) + np.asarray(b.error)) + 1e-12
        assert np.all(np.abs(np.asarray(a.value) - np.asarray(b.value)) <= tol), (path, out.name)


SCALED = """
param sw = 2
param p = 0.5
vector x ~ normal()
matrix W ~ normal()
h = sqrt(sw) * (W @ relu(x))
out q = mean(h * h)
out e = exp(p) * mean(relu(x) ** 2)
"""


def test_builtins_of_params_stay_symbolic():
    """sqrt(sw) as a weight scale, exp(p) as a factor: closed forms in sw and p (E relu(x)² = 1/2)."""
    compiled = tp.parse(SCALED).compile(symbolic=True)
    sw, p = sp.Symbol("sw", real=True), sp.Symbol("p", real=True)
    assert sp.simplify(exact_of(compiled, "q") - sw / 2) == 0
    assert sp.simplify(exact_of(compiled, "e") - sp.exp(p) / 2) == 0
    assert compiled.program.leaves.tracer.structural == set()


def test_deep_ntk_closed_form_in_every_param_equals_numeric_compiles_elsewhere():
    """golikov_ntk_relu at L = 3: the NNGP and NTK are closed forms in var, q11, q12, q22 (nested
    arc-cosine kernels, shared as a DAG); at moved params they equal the numeric compile there."""
    path = str(ROOT / "programs/golikov_ntk_relu.tp")
    compiled = tp.load(path, L=3).compile(symbolic=True)
    moved = {"var": 1.3, "q11": 0.9, "q12": 0.35, "q22": 1.2}
    numeric = tp.load(path, L=3, **moved).compile()
    for out in numeric.program.outputs:
        form = exact_of(compiled, out.name)
        assert form is not None, out.name
        at = {s: moved[s.name] for s in form.free_symbols}
        got = complex(sp.N(form.subs(at), 30)).real
        b = numeric.result(out.var)
        assert got == pytest.approx(b.value, rel=1e-10, abs=5 * b.error + 1e-12), out.name
    assert {s.name for s in exact_of(compiled, "ntk").free_symbols} == set(moved)


#: a one-head attention block over three tokens whose covariance is exact (rationals): the
#: attention weights exp(mean(q_s q_t)) are exact, and the covariances of y sums of them
ATTENTION = """
param T = 3
vector x[1..T] ~ normal(cov=[[1, 0.3, 0.2], [0.3, 1, 0.25], [0.2, 0.25, 1]])
matrix Wq, Wv, Wo ~ normal(var=1)
matrix W1 ~ normal(var=2)
for t in 1..T {
    q[t] = Wq @ x[t]
    v[t] = Wv @ x[t]
}
for s in 1..T {
    for t in 1..T {
        a[t] = exp(mean(q[s] * q[t]))
    }
    y[s] = x[s] + Wo @ (sum(t in 1..T: a[t] * v[t]) / sum(t in 1..T: a[t]))
    z[s] = W1 @ relu(y[s])
}
for s in 1..T {
    for t in 1..T {
        out K[s, t] = mean(relu(z[s]) * relu(z[t]))
    }
}
"""


def agree_within_errors(symbolic, numeric) -> None:
    """Every output of the two compiles equal within 5 times their stated errors."""
    for out in numeric.program.outputs:
        a, b = symbolic.result(out.var), numeric.result(out.var)
        assert a.method == "exact" and a.exact is None, out.name
        assert abs(a.value - b.value) <= 5 * (a.error + b.error), out.name


def test_large_exact_constants_go_by_value_and_claim_no_closed_form():
    """Attention over exact token covariances: the covariances of y are sums of exp() of exact
    rationals; past BIG_NUMBER nodes with MANY_HEADS function heads the engine takes their values
    (seconds, not the minutes and gigabytes of multiplying them out), and the kernel it rests on
    claims no formula."""
    symbolic, numeric = tp.parse(ATTENTION).compile(symbolic=True), tp.parse(ATTENTION).compile()
    big = [e for e in symbolic.estimates if e.method == "exact" and e.exact is None]
    assert big, "no expectation went by value"
    agree_within_errors(symbolic, numeric)
    assert any("no closed form for K" in w for w in symbolic.warnings)


def test_data_constants_go_by_value():
    """gp4a_transformer: the token covariances are loaded data (Floats, most with no short decimal
    form), so E[q_s q_t], the attention weights and everything on them are known by value: the
    symbolic compile equals the plain one within the stated errors (no closed form claimed)."""
    program = tp.load(str(ROOT / "programs/gp4a_transformer.tp"))
    symbolic, numeric = program.compile(symbolic=True), program.compile()
    agree_within_errors(symbolic, numeric)
    assert any("no closed form for K" in w for w in symbolic.warnings)


#: E[x²] = 1.0000000028913993 is a Float (no short decimal reads as it): sympy's nsimplify reads it
#: as 1, and e^{E[x²]} as E
NEAR_ONE = """
vector x ~ normal(var=1.0000000028913993)
out q = mean(x * x)
out a = exp(mean(x * x))
out b = mean(x * x) ** 2 / 3
out h = mean(x * x) / 2 + 0.25
"""


def test_values_resting_on_a_float_keep_its_value():
    """A scalar resting on a number known by value keeps that value (to its stated error, a few
    ulps) and claims no closed form, except a rational that is exactly its value."""
    compiled = tp.parse(NEAR_ONE).compile(symbolic=True)
    v = 1.0000000028913993
    want = {"q": v, "a": math.exp(v), "b": v * v / 3, "h": v / 2 + 0.25}
    for out in compiled.program.outputs:
        got = compiled.result(out.var)
        assert got.method == "exact" and got.exact is None, out.name
        assert abs(got.value - want[out.name]) <= got.error, out.name
        assert got.error <= 1e-14, out.name


def test_floats_exactly_rational_stay_exact():
    """A number holding a Float whose value is exactly a short rational (0.5 + 0.25) is that
    rational: no guess, no loss."""
    from tensorprog.limit.values import by_value, number, value_of
    assert number(0.75) == sp.Rational(3, 4) and number(3.0) == 3
    assert number(0.1) == sp.Float(0.1) and number(1.0000000028913993).is_Float
    assert value_of(sp.Float(0.5) + sp.Rational(1, 4)) == sp.Rational(3, 4)
    near = value_of(sp.exp(sp.Float(1.0000000028913993)))
    assert near.is_Float and float(near) == math.exp(1.0000000028913993)
    x = sp.Symbol("x")
    mixed = by_value(sp.Float(0.3) * sp.exp(sp.Rational(1, 3)) * x + sp.exp(sp.Rational(1, 3)) * x ** 2)
    assert mixed == sp.Float(0.3 * math.exp(1 / 3)) * x + sp.exp(sp.Rational(1, 3)) * x ** 2
    for bad in (sp.sqrt(sp.Float(-2.0)), sp.exp(sp.Float(1000.0))):   # complex; beyond the float range
        assert value_of(bad) == bad and by_value(bad * x) == bad * x
