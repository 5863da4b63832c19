"""Haar-orthogonal matrices used transposed: the conditioning rule of tensorprog/limit/haar.py.

Exact identities (QᵀQ = I, projections of rectangular partial isometries), the free-probability
moments of deep Jacobians (orthogonal and Gaussian weights, tanh and ReLU), forward-only programs
unchanged, the three compile modes (numbers, closed forms, dataset batches) agreeing, and finite
width against the limit."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorprog as tp

ISOMETRY = "programs/dynamical_isometry.tp"
RELU = {"def phi(h) = tanh(h)": "def phi(h) = relu(h)", "def dphi(h) = 1 - tanh(h) ** 2": "def dphi(h) = step(h)"}


# ---- free probability: moments of a product of free positive elements, by the S-transform
def s_transform(m1: float, m2: float, m3: float) -> tuple[float, float, float]:
    """S(z) = (1 + z)/z · χ(z) to order z², χ the compositional inverse of ψ(z) = m1 z + m2 z² + m3 z³:
    χ = z/m1 − m2 z²/m1³ + (2 m2² − m1 m3) z³/m1⁵."""
    a1, a2, a3 = 1 / m1, -m2 / m1 ** 3, (2 * m2 ** 2 - m1 * m3) / m1 ** 5
    return a1, a1 + a2, a2 + a3


def free_product_moments(factors: list[tuple[float, float, float]]) -> tuple[float, float, float]:
    """m1, m2, m3 of a product of free elements with the given moments: S multiplies, then
    χ(z) = S(z)·z/(1 + z) is inverted back to ψ (the same inversion as in s_transform)."""
    s = (1.0, 0.0, 0.0)
    for f in factors:
        t = s_transform(*f)
        s = (s[0] * t[0], s[0] * t[1] + s[1] * t[0], s[0] * t[2] + s[1] * t[1] + s[2] * t[0])
    b1, b2, b3 = s[0], s[1] - s[0], s[2] - s[1] + s[0]
    return 1 / b1, -b2 / b1 ** 3, (2 * b2 ** 2 - b1 * b3) / b1 ** 5


def test_free_probability_reference_reproduces_fuss_catalan():
    """WᵀW Marchenko–Pastur(1) has moments 1, 2, 5; the product of two free copies 1, 3, 12."""
    assert free_product_moments([(1, 2, 5)]) == pytest.approx((1, 2, 5), rel=1e-14)
    assert free_product_moments([(1, 2, 5), (1, 2, 5)]) == pytest.approx((1, 3, 12), rel=1e-14)


def derivative_moments(dphi, q: float) -> list[float]:
    """μ_k = E φ'(h)^{2k}, h ~ N(0, q), k = 1, 2, 3 (Gauss–Hermite, 200 nodes)."""
    x, w = np.polynomial.hermite_e.hermegauss(200)
    d2 = dphi(math.sqrt(q) * x) ** 2
    return [float(np.sum(w * d2 ** k) / np.sum(w)) for k in (1, 2, 3)]


def tanh_fixed_point(sw: float) -> float:
    x, w = np.polynomial.hermite_e.hermegauss(200)
    q = 1.0
    for _ in range(5000):
        q = sw * float(np.sum(w * np.tanh(math.sqrt(q) * x) ** 2) / np.sum(w))
    return q


def jacobian_moments(mu: list[float], sw: float, L: int, orthogonal: bool) -> tuple[float, float, float]:
    """JᵀJ = product of L factors D² (moments μ) and L factors WᵀW: σ²·I for orthogonal W,
    σ²·Marchenko–Pastur(1) (moments σ², 2σ⁴, 5σ⁶) for Gaussian W."""
    w = (sw, sw ** 2, sw ** 3) if orthogonal else (sw, 2 * sw ** 2, 5 * sw ** 3)
    return free_product_moments([tuple(mu)] * L + [w] * L)


# ---- exact identities
def test_two_orthogonal_layers_and_back_give_the_identity():
    """The issue's first case: J = O2 O1, JᵀJ v = v exactly (it compiled to 3, the Gaussian value)."""
    text = ("matrix O1 ~ orthogonal()\nmatrix O2 ~ orthogonal()\nvector v ~ normal()\n"
            "u = O2 @ (O1 @ v)\nw = O1.T @ (O2.T @ u)\nout m2 = mean(w ** 2)\nout back = mean(w * v)\n")
    for symbolic in (False, True):
        lim = tp.parse(text).compile(symbolic=symbolic).limit()
        assert lim.outputs["m2"].value == 1 and lim.outputs["m2"].method == "exact"
        assert lim.outputs["back"].value == 1 and lim.outputs["back"].error < 1e-13      # float rounding only
        assert not any("iid entries" in w for w in lim.warnings)
    gaussian = tp.parse(text.replace("orthogonal()", "normal()")).compile().limit()
    assert gaussian.outputs["m2"].value == pytest.approx(3, abs=1e-12)


RECTANGULAR = """
dim m = 0.5
matrix A : m x n ~ orthogonal(var=2)
matrix B : n x m ~ orthogonal(var=3)
vector x ~ normal()
vector z : m ~ normal()
p = A.T @ (A @ x)
q = A @ (A.T @ z)
r = B.T @ (B @ z)
t = B @ (B.T @ x)
out pp = mean(p * p)
out px = mean(p * x)
out qq = mean(q * q)
out rr = mean(r * r)
out tt = mean(t * t)
out tx = mean(t * x)
"""


def test_rectangular_partial_isometries():
    """A (wide, m = n/2, var 2) = √2·PQ: A Aᵀ = 2I, AᵀA = 2·(projection on a random n/2-dim subspace),
    so E p² = 4·½, E p x = 2·½.  B (tall, var 3) = √6·QPᵀ: BᵀB = 6I, B Bᵀ = 6·projection."""
    lim = tp.parse(RECTANGULAR).compile().limit().outputs
    expected = {"pp": 2, "px": 1, "qq": 4, "rr": 36, "tt": 18, "tx": 3}
    for name, value in expected.items():
        assert lim[name].value == pytest.approx(value, abs=1e-12) and lim[name].method == "exact", name


# ---- the free-probability Jacobian moments
@pytest.mark.parametrize("L", [1, 2, 4])
@pytest.mark.parametrize("law", ["orthogonal", "normal"])
def test_tanh_jacobian_moments_match_free_probability(L, law):
    sw = 1.44
    q = tanh_fixed_point(sw)
    mu = derivative_moments(lambda h: 1 - np.tanh(h) ** 2, q)
    lim = tp.load(ISOMETRY, L=L, sw=sw, q=q).compile(matrix_dist=law).limit()
    assert lim.warnings == []
    for name, expected in zip(("m1", "m2", "m3"), jacobian_moments(mu, sw, L, law == "orthogonal")):
        got = lim.outputs[name]
        assert got.error < 1e-8
        assert abs(got.value - expected) <= 10 * got.error + 1e-11 * expected, (name, got.value, expected)


def test_the_issue_tanh_case_compiles_to_the_free_probability_value():
    lim = tp.load(ISOMETRY).compile().limit().outputs
    assert lim["m2"].value == pytest.approx(1.718191, abs=1e-6)
    gaussian = tp.load(ISOMETRY).compile(matrix_dist="normal").limit().outputs
    assert gaussian["m2"].value == pytest.approx(5.374036442516, abs=1e-9)


def relu_program(L: int) -> tp.Program:
    text = open(ISOMETRY, encoding="utf-8").read()
    for old, new in RELU.items():
        text = text.replace(old, new)
    return tp.parse(text.replace("param L = 3", f"param L = {L}").replace("param sw = 1.44", "param sw = 2")
                    .replace("param q = 0.249513040237952", "param q = 1"))


@pytest.mark.parametrize("L", [1, 3])
@pytest.mark.parametrize("law", ["orthogonal", "normal"])
def test_relu_jacobian_moments_are_exact(L, law):
    """ReLU at σ² = 2: D² has every moment ½, so each layer's factor has moments 1, 2, 4; exact closed forms."""
    lim = relu_program(L).compile(symbolic=True, matrix_dist=law).limit().outputs
    expected = jacobian_moments([0.5, 0.5, 0.5], 2.0, L, law == "orthogonal")
    for name, value in zip(("m1", "m2", "m3"), expected):
        assert lim[name].method == "exact" and lim[name].value == pytest.approx(value, abs=1e-11), (name, value)


# ---- what does not change
FORWARD = """
vector x, y ~ normal(cov=[[1, 0.4], [0.4, 2]])
matrix W ~ orthogonal(var=1.5)
matrix V ~ orthogonal(var=2)
a = W @ tanh(x)
b = W @ tanh(y)
c = V @ relu(a + b)
out k = mean(tanh(a) * relu(c))
out s = mean(c ** 2)
"""


def test_forward_only_orthogonal_programs_keep_the_gaussian_limit():
    orth = tp.parse(FORWARD).compile()
    gauss = tp.parse(FORWARD.replace("orthogonal", "normal")).compile()
    assert str(orth).replace("orthogonal", "normal") == str(gauss)     # the same recurrence, line by line
    for name in ("k", "s"):
        assert orth.limit().outputs[name].value == gauss.limit().outputs[name].value


@pytest.mark.parametrize("path", ["programs/kernels/relu_mlp.tp", "programs/kernels/tanh_mlp.tp"])
def test_ntk_of_an_orthogonal_mlp_equals_the_gaussian_one(path):
    """In the NTK parameterization with a Gaussian readout, the backward vectors carry the independent readout
    v, so the Haar corrections vanish: the orthogonal NTK is the Gaussian one."""
    program = tp.load(path, L=3)
    orth, gauss = program.compile(matrix_dist="orthogonal").limit(), program.compile().limit()
    for name in ("nngp", "ntk"):
        assert orth.outputs[name].value == pytest.approx(gauss.outputs[name].value, abs=1e-12)


# ---- the three compile modes agree where the corrections do not vanish
TEMPLATE = """
param q11 = 1
param q12 = 0.5
param q22 = 1
vector h1, g1 ~ normal(cov=[[q11, q12], [q12, q22]])
matrix W ~ orthogonal(var=1.5)
a = W @ tanh(h1)
b = W @ tanh(g1)
da = W.T @ tanh(a)
db = W.T @ tanh(b)
ea = W @ (da * h1)
out k = mean(da * db)
out r = mean(ea * tanh(b))
"""


def test_batch_mode_agrees_with_pairwise_compiles():
    X = np.array([[1.0, 0.3, -0.5], [0.2, -1.1, 0.7], [-0.4, 0.8, 1.2]])
    res = tp.kernel(tp.parse(TEMPLATE), X)
    G = X @ X.T / X.shape[1]
    for i in range(3):
        for j in range(3):
            pair = tp.parse(TEMPLATE, q11=G[i, i], q12=G[i, j], q22=G[j, j])
            lim = pair.compile().limit().outputs
            for name in ("k", "r"):
                km = res.outputs[name]
                assert abs(km.mean[i, j] - lim[name].value) <= km.error[i, j] + lim[name].error + 1e-12, (name, i, j)


def test_symbolic_and_numeric_compiles_agree():
    num = tp.parse(TEMPLATE).compile().limit().outputs
    exact = tp.parse(TEMPLATE.replace("tanh", "relu")).compile(symbolic=True).limit().outputs
    floats = tp.parse(TEMPLATE.replace("tanh", "relu")).compile().limit().outputs
    for name in ("k", "r"):
        assert exact[name].method == "exact"
        assert exact[name].value == pytest.approx(floats[name].value, abs=1e-12 + floats[name].error)
        assert num[name].error < 1e-8


# ---- finite width
@pytest.mark.parametrize("text,names", [(RECTANGULAR, ["pp", "px", "tt", "tx"]), (TEMPLATE, ["k", "r"])],
                         ids=["rectangular", "back-and-forth"])
def test_finite_width_agrees_with_the_haar_limit(text, names):
    program, trials = tp.parse(text), 8
    lim = program.compile().limit().outputs
    run = program.execute(n=1024, trials=trials, seed=5)
    for name in names:
        o = run.outputs[name]
        se = o.std / math.sqrt(trials)
        assert abs(o.mean - lim[name].value) <= 5 * se + 4 * (1 + abs(lim[name].value)) / 1024, (name, o.mean)
