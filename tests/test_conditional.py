"""Conditional mode: every product drawn from its law given the earlier ones (Gaussian conditioning).

Its law must equal the dense executor's: hundreds of trials at small widths, means (and second
moments) compared within 5 standard errors, on forward, backward (transposes) and training
(outer updates) programs and on mvt matrices; identities that hold for every matrix hold to
rounding; seeds reproduce, worker processes and kernels in pieces see one matrix; non-Gaussian
laws and too many products are refused."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.distributions.conditional import ConditionalMatrix
from tensorprog.errors import TPLimitError, TPUsageError
from tensorprog.finite import options

#: a backward program with an identity: (1/n) xᵀ Wᵀ (W x) = (1/n) ‖W x‖² for every W
IDENTITY = """
vector x, u ~ normal()
matrix W ~ normal(var=2)
y = W @ tanh(x)
z = W.T @ y
w = W.T @ u
out gram = mean(tanh(x) * z) - mean(y * y)
out cross = mean(tanh(x) * w) - mean(y * u)
out zz = mean(z * z)
out wz = mean(tanh(w) * z)
"""

#: mvt matrices, forward and backward
MVT = """
vector x ~ normal()
matrix W ~ mvt(5)
y = W @ x
z = W.T @ tanh(y)
out yy = mean(y * y)
out y4 = mean(y ** 4)
out zz = mean(z * z)
out zx = mean(z * x)
"""


def _agree(dense, cond, moments=(1, 2), k=5.0) -> None:
    """Every output's mean (and mean square) agrees within k combined standard errors."""
    for name in dense.outputs:
        a, b = np.asarray(dense.outputs[name].values), np.asarray(cond.outputs[name].values)
        for p in moments:
            fa, fb = a ** p, b ** p
            se = np.sqrt(fa.var(ddof=1) / len(fa) + fb.var(ddof=1) / len(fb))
            assert abs(fa.mean() - fb.mean()) <= k * se + 1e-12, (name, p, fa.mean(), fb.mean(), se)


def _both(program, n: int, trials: int, **kw):
    dense = program.execute(n=n, trials=trials, seed=1, **kw)
    cond = program.execute(n=n, trials=trials, seed=2, conditional=True, **kw)
    assert cond.conditional and not dense.conditional
    return dense, cond


def test_rule_against_exact_conditioning():
    """A product given earlier ones, against the dense matrix conditioned exactly: with G X = Y and
    Gᵀ U = V known, E[G x | ...] is the least-norm G that fits them, and the conditional
    covariance of G x is ‖P_X⊥ x‖² P_U⊥ (over many draws of the innovation, the state set from G)."""
    rng = np.random.default_rng(0)
    m, k = 7, 5
    G = rng.standard_normal((m, k))
    X, U = rng.standard_normal((k, 2)), rng.standard_normal((m, 2))
    x = rng.standard_normal(k)
    # the conditional mean of vec(G) given the linear constraints, by least squares on vec(G)
    rows = [np.kron(np.eye(m), X[:, j]) for j in range(2)]          # (G X)_j = kron(I, x_jᵀ) vec(G)
    rows += [np.kron(U[:, j], np.eye(k)) for j in range(2)]         # (Gᵀ U)_j = kron(u_jᵀ, I) vec(G)
    A = np.concatenate(rows)
    b = A @ G.reshape(-1)
    mean_G = (np.linalg.pinv(A) @ b).reshape(m, k)
    P_x = np.eye(k) - X @ np.linalg.pinv(X)
    P_u = np.eye(m) - U @ np.linalg.pinv(U)
    samples = np.array([_next_product(G, X, U, x, t) for t in range(6000)])
    se = samples.std(0, ddof=1) / np.sqrt(len(samples))
    assert np.all(np.abs(samples.mean(0) - mean_G @ x) < 5 * se + 1e-12)
    cov = np.cov(samples.T)
    expected = (x @ P_x @ x) * P_u
    assert np.abs(cov - expected).max() < 0.12 * np.abs(expected).max()


def _next_product(G, X, U, x, t):
    """G x drawn from the conditional matrix that was shown G X and Gᵀ U (its state set exactly)."""
    m, k = G.shape
    r = np.random.default_rng([7, t])
    C = ConditionalMatrix(lambda s: r.standard_normal(s), 1.0, m, k, np, np.float64, capacity=100)
    qx, _ = np.linalg.qr(X)                      # orthonormal bases and their images
    qu, _ = np.linalg.qr(U)
    C.set_state(qx, G @ qx, qu, G.T @ qu)
    return C.matmul(x)


def test_forward_law_equals_dense():
    """ReLU NNGP (forward only) at n = 32."""
    _agree(*_both(tp.load("programs/relu_nngp.tp"), 32, 400))


def test_backward_law_equals_dense():
    """NNGP/NTK with a backward pass through W.T (golikov_ntk_relu.tp) and Wigner moments
    (W and W.T on the same vectors) at n = 32."""
    _agree(*_both(tp.load("programs/golikov_ntk_relu.tp"), 32, 300))
    _agree(*_both(tp.load("programs/wigner_moments.tp", K=4), 32, 300))


@pytest.mark.parametrize("ratio", [0.5, 2.0])
def test_rectangular_law_equals_dense(ratio):
    """Marchenko–Pastur moments of a rectangular m × n matrix (Aᵀ(A p)): each side's variance
    convention (entries var/cols) in both directions."""
    _agree(*_both(tp.load("programs/marchenko_pastur.tp", ratio=ratio), 40, 300))


def test_training_law_equals_dense():
    """Two μP SGD steps with outer-product updates (mup_train.tp, T = 2) at n = 32."""
    _agree(*_both(tp.load("programs/mup_train.tp", T=2), 32, 300))


def test_mvt_law_equals_dense():
    """mvt: W = diag(S)·G, the Gaussian factor conditioned, the row scales drawn once."""
    _agree(*_both(tp.parse(MVT), 32, 600), moments=(1,))


#: an orthogonal matrix, forward and backward, arguments built from earlier products
HAAR = """
vector x, u ~ normal()
matrix W ~ orthogonal(var=2)
y = W @ tanh(x)
z = W.T @ y
w = W.T @ u
v = W @ (w * w)
out iso = mean(z * z) - 2 * mean(y * y)
out gram = mean(tanh(x) * z) - mean(y * y)
out y4 = mean(y ** 4)
out wz = mean(w * tanh(z))
out vu = mean(v * u)
out vy = mean(tanh(v) * y)
"""


def test_orthogonal_law_equals_dense():
    """Haar conditioning: known on the earlier span, a uniform isometry on its complement.  The
    isometry WᵀW = var·I holds to rounding; the law equals the dense sampler's at n = 16."""
    program = tp.parse(HAAR)
    r = program.execute(n=16, trials=5, seed=1, conditional=True)
    assert max(abs(v) for name in ("iso", "gram") for v in r.outputs[name].values) < 1e-12
    dense, cond = _both(program, 16, 600)
    for d in (dense, cond):
        d.outputs = {k: v for k, v in d.outputs.items() if k not in ("iso", "gram")}
    _agree(dense, cond)


@pytest.mark.parametrize("ratio", [0.5, 2.0])
def test_rectangular_orthogonal_law_equals_dense(ratio):
    """Wide and tall orthogonal matrices are blocks of a Haar square one (Marchenko–Pastur moments)."""
    _agree(*_both(tp.load("programs/marchenko_pastur.tp", ratio=ratio), 24, 300, matrix_dist="orthogonal"),
           moments=(1,))


def test_identities_hold_to_rounding():
    """xᵀWᵀ(Wx) = ‖Wx‖² and xᵀ(Wᵀu) = (Wx)ᵀu hold in every trial, as for a dense W."""
    r = tp.parse(IDENTITY).execute(n=48, trials=20, seed=3, conditional=True)
    for name in ("gram", "cross"):
        assert max(abs(v) for v in r.outputs[name].values) < 1e-12
    dense = tp.parse(IDENTITY).execute(n=48, trials=300, seed=4)
    cond = tp.parse(IDENTITY).execute(n=48, trials=300, seed=5, conditional=True)
    dense.outputs = {k: v for k, v in dense.outputs.items() if k in ("zz", "wz")}
    _agree(dense, cond)


def test_repeated_and_dependent_arguments_are_exact():
    """An argument in the span of earlier ones adds no randomness: W(2x) = 2 Wx, W(x + y) = Wx + Wy."""
    src = """
vector x, y ~ normal()
matrix W ~ normal()
a = W @ x
b = W @ y
c = W @ (2 * x + y)
out err = mean((c - 2 * a - b) ** 2)
out aa = mean(a * a)
"""
    r = tp.parse(src).execute(n=64, trials=5, seed=0, conditional=True)
    assert max(r.outputs["err"].values) < 1e-24
    assert all(v > 0.2 for v in r.outputs["aa"].values)


def test_seed_reproduces_and_jobs_are_bit_identical():
    p = tp.load("programs/mup_train.tp", T=2)
    one = p.execute(n=48, trials=4, seed=9, conditional=True)
    again = p.execute(n=48, trials=4, seed=9, conditional=True)
    assert one.to_dict() == again.to_dict()
    with options(jobs=2, conditional=True):
        two = p.execute(n=48, trials=4, seed=9)
    assert two.to_dict() == one.to_dict()
    other = p.execute(n=48, trials=4, seed=10, conditional=True)
    assert other.outputs["fT"].values != one.outputs["fT"].values


def test_float32_is_a_precision_switch():
    """float32 draws the float64 numbers of the seed, rounded: the same values to float32 precision."""
    p = tp.load("programs/relu_nngp.tp")
    a = p.execute(n=256, trials=3, seed=1, conditional=True)
    b = p.execute(n=256, trials=3, seed=1, conditional=True, dtype=np.float32)
    for name in a.outputs:
        assert np.allclose(a.outputs[name].values, b.outputs[name].values, rtol=1e-4)


def test_array_api_backend_draws_the_numpy_numbers():
    """array_api_strict (numpy's streams, the array-API code path) gives the numpy run to rounding."""
    pytest.importorskip("array_api_strict")
    p = tp.load("programs/golikov_ntk_relu.tp")
    a = p.execute(n=64, trials=2, seed=1, conditional=True)
    b = p.execute(n=64, trials=2, seed=1, conditional=True, backend="array_api_strict")
    for name in a.outputs:
        assert np.allclose(a.outputs[name].values, b.outputs[name].values, rtol=1e-10, atol=1e-13)


def test_jax_backend_runs_conditional():
    """On jax (immutable arrays, its own streams) the identities hold too."""
    pytest.importorskip("jax")
    r = tp.parse(IDENTITY).execute(n=24, trials=1, seed=3, conditional=True, backend="jax")
    assert max(abs(v) for v in r.outputs["gram"].values) < 1e-12
    assert all(v > 0 for v in r.outputs["zz"].values)


def test_kernel_pieces_share_one_matrix():
    """A finite-width kernel runs a trial in pieces of (n, P) columns: with duplicated inputs,
    K[0, 0] = K[0, 1] = K[1, 1] exactly only if every piece sees the same matrices."""
    from tensorprog.tools.kernel import finite_kernel
    X = np.random.default_rng(0).standard_normal((4, 5))
    X[1] = X[0]
    prog = tp.load("programs/kernels/relu_mlp.tp").ir
    with options(conditional=True):
        K = finite_kernel(prog, X, n=64, trials=2, seed=0, max_elements=64 * 3).outputs["nngp"]
    for v in K.values:
        assert abs(v[0, 0] - v[0, 1]) < 1e-12 and abs(v[1, 1] - v[0, 0]) < 1e-12
        assert np.allclose(v, v.T)


def test_kernel_law_equals_dense():
    from tensorprog.tools.kernel import finite_kernel
    X = np.random.default_rng(1).standard_normal((3, 4))
    prog = tp.load("programs/kernels/relu_mlp.tp").ir
    dense = finite_kernel(prog, X, n=32, trials=200, seed=0).outputs["nngp"]
    with options(conditional=True):
        cond = finite_kernel(prog, X, n=32, trials=200, seed=1, max_elements=32 * 2).outputs["nngp"]
    a, b = np.stack(dense.values), np.stack(cond.values)
    se = np.sqrt(a.var(0, ddof=1) / len(a) + b.var(0, ddof=1) / len(b))
    assert np.all(np.abs(a.mean(0) - b.mean(0)) <= 5 * se)


def test_large_width_against_the_limit():
    """At n = 2^17 (cheap in conditional mode) the ReLU NNGP values are within 5 SE + O(1/n) of
    the arc-cosine recursion."""
    rho, L = 0.3, 3
    k = rho
    for _ in range(L):                   # the arc-cosine map, L times (relu_nngp.tp's header)
        k = (np.sqrt(1 - k * k) + (np.pi - np.arccos(k)) * k) / np.pi
    r = tp.load("programs/relu_nngp.tp").execute(n=1 << 17, trials=4, seed=0, conditional=True)
    for name, exact in (("kxy", k / 2), ("kxx", 0.5)):
        o = r.outputs[name]
        assert abs(o.mean - exact) < 5 * o.sem + 1e-4, (name, o.mean, exact, o.sem)


@pytest.mark.parametrize("law", ["uniform()", "rademacher()", "student_t(5)", "laplace()"])
def test_non_gaussian_laws_are_refused(law):
    src = f"vector x ~ normal()\nmatrix W ~ {law}\nout m = mean((W @ x) ** 2)\n"
    with pytest.raises(TPUsageError, match="conditional mode: .* not exact in law") as err:
        tp.parse(src).execute(n=16, conditional=True)
    assert err.value.line == 2


def test_matrix_dist_swap_is_refused():
    with pytest.raises(TPUsageError, match="from --matrix-dist"):
        tp.load("programs/relu_nngp.tp").execute(n=16, conditional=True, matrix_dist="rademacher")
    r = tp.load("programs/relu_nngp.tp").execute(n=16, conditional=True, matrix_dist="mvt")
    assert r.conditional


def test_too_many_products_and_memory_are_refused():
    with pytest.raises(TPUsageError, match="products with this 8 × 8 matrix"):
        tp.load("programs/wigner_moments.tp", K=6).execute(n=8, conditional=True)
    with pytest.raises(TPLimitError, match="conditional mode .* more than the"):
        tp.load("programs/relu_nngp.tp").execute(n=1 << 20, conditional=True, memory_limit=1 << 20)
    from tensorprog.tools.kernel import finite_kernel         # a kernel's columns, found at run time
    X = np.random.default_rng(0).standard_normal((6, 5))
    with options(conditional=True), pytest.raises(TPUsageError, match="independent products with one 8 × 8") as err:
        finite_kernel(tp.load("programs/kernels/relu_mlp.tp").ir, X, n=8, trials=1)
    assert err.value.line > 0
    with pytest.raises(TPUsageError, match="exclude each other"):
        tp.load("programs/relu_nngp.tp").execute(n=16, conditional=True, blocked=True)


def test_dense_refusal_proposes_conditional():
    with pytest.raises(TPLimitError, match="--conditional"):
        tp.load("programs/relu_nngp.tp").execute(n=1 << 16, memory_limit=1 << 24, blocked=False)


def test_cli_flag():
    out = subprocess.run([sys.executable, "-m", "tensorprog", "execute", "programs/relu_nngp.tp", "-n", "64",
                          "--trials", "3", "--conditional", "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["conditional"] is True
    api = tp.load("programs/relu_nngp.tp").execute(n=64, trials=3, conditional=True).to_dict()
    assert d["outputs"] == api["outputs"]
    bad = subprocess.run([sys.executable, "-m", "tensorprog", "execute", "programs/relu_nngp.tp", "-n", "64",
                          "--conditional", "--matrix-dist", "uniform"], capture_output=True, text=True)
    assert bad.returncode == 2 and "not exact in law" in bad.stderr and "Traceback" not in bad.stderr


def test_slow_automatic_blocked_run_proposes_conditional():
    """When dense matrices do not fit and blocked ones would draw more than 2^32 numbers per trial,
    planning warns and names --conditional (nothing is executed here)."""
    from tensorprog.finite.plan import SlowModeWarning, plan_run
    program = tp.load("programs/relu_nngp.tp").ir
    with pytest.warns(SlowModeWarning, match="--conditional"):
        plan = plan_run(program, 1 << 17, 0, np.float64, None, memory_limit=1 << 28)
    assert plan.blocked
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan_run(program, 1 << 12, 0, np.float64, None, memory_limit=1 << 28, blocked=True)
        plan_run(program, 1 << 17, 0, np.float64, None, memory_limit=1 << 28, conditional=True)
