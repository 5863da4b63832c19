"""Golikov's thesis (seed 002, docs/gallery_002.md): the programs/golikov_*.tp against the thesis's formulas.

Every expected value is computed here, independently of the compiler: closed-form arc-cosine and
arcsine expectations for the NTK recursions of ch. 2 (eqs. 2.58-2.61, both the two-pass and the
layerwise form), Gauss-Hermite quadrature of the hand-derived Master Theorem limit of one SGD step
(§1.4.3), Catalan and Narayana numbers and the integrals of the semicircle and Marchenko-Pastur
densities (App. A.2.1-A.2.2), and the fourth moments of the initial laws (§1.4.4, §3.2).

Finite-width checks run at small widths with fixed seeds and accept
|mean − limit| <= 5 standard errors + ALLOW/n (ALLOW a generous O(1/n) bias allowance).
The tail bound (ch. 4) has its own file, tests/test_tailbound.py.
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import integrate

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent
PROG = ROOT / "programs"
ALLOW = 4.0


@functools.lru_cache(maxsize=None)
def load(name: str, **params):
    return tp.load(PROG / f"{name}.tp", **params)


@functools.lru_cache(maxsize=None)
def limit(name: str, **params):
    return load(name, **params).compile().limit()


def near_limit(stats, value: float, n: int, allow: float = ALLOW) -> bool:
    return abs(stats.mean - value) <= 5 * stats.sem + allow / n


# ----------------------------------------------------------------------------- ch. 2: NNGP, NTK
def relu_pair(a, b, c):
    s = math.sqrt(a * b)
    t = math.acos(max(-1.0, min(1.0, c / s)))
    return s / (2 * math.pi) * (math.sin(t) + (math.pi - t) * math.cos(t))


def step_pair(a, b, c):
    t = math.acos(max(-1.0, min(1.0, c / math.sqrt(a * b))))
    return (math.pi - t) / (2 * math.pi)


def erf_pair(a, b, c):
    return 2 / math.pi * math.asin(2 * c / math.sqrt((1 + 2 * a) * (1 + 2 * b)))


def derf_pair(a, b, c):
    return 4 / math.pi / math.sqrt((1 + 2 * a) * (1 + 2 * b) - 4 * c * c)


PAIRS = {"relu": (relu_pair, step_pair), "erf": (erf_pair, derf_pair)}


def ntk_two_pass(phi, L, var, q11, q12, q22):
    """(2.58)-(2.59): forward q_l, backward qdot_l, Theta = sum_l qdot_l q_l.  Sigma_l = (a, b, c)."""
    F, dF = PAIRS[phi]
    S = {1: (var * q11, var * q22, var * q12)}
    for l in range(2, L + 1):
        a, b, c = S[l - 1]
        S[l] = (var * F(a, a, a), var * F(b, b, b), var * F(a, b, c))
    qdot = {L: 1.0}
    for l in range(L - 1, 0, -1):
        qdot[l] = qdot[l + 1] * var * dF(*S[l])
    return {"nngp": S[L][2], "ntk": sum(qdot[l] * S[l][2] for l in range(1, L + 1)),
            "qdot1": qdot[1], "knn": S[L][0]}


def ntk_layerwise(phi, L, var, q11, q12, q22):
    """(2.60)-(2.61): Theta_{:l} = q_l + Theta_{:l-1} · var·E phi'(z) phi'(z'), one forward pass."""
    F, dF = PAIRS[phi]
    a, b, c = var * q11, var * q22, var * q12
    theta = c
    for _ in range(2, L + 1):
        na, nb, nc = var * F(a, a, a), var * F(b, b, b), var * F(a, b, c)
        theta = nc + theta * var * dF(a, b, c)
        a, b, c = na, nb, nc
    return c, theta


NTK_CASES = [("relu", dict()), ("relu", dict(L=5, var=2, q12=-0.3, q22=1.5)),
             ("erf", dict()), ("erf", dict(L=3, var=2.5, q11=0.7, q12=0.2))]


@pytest.mark.parametrize("phi,params", NTK_CASES)
def test_ntk_limit_is_the_thesis_recursion(phi, params):
    full = dict(L=4, var=1, q11=1, q12=0.5, q22=1) | params
    ref = ntk_two_pass(phi, **full)
    nngp, theta = ntk_layerwise(phi, **full)
    assert ref["nngp"] == pytest.approx(nngp, rel=1e-12) and ref["ntk"] == pytest.approx(theta, rel=1e-12)
    lim = limit(f"golikov_ntk_{phi}", **params)
    assert not lim.warnings
    for name, value in ref.items():
        assert lim.outputs[name].value == pytest.approx(value, rel=1e-9, abs=1e-12), name


@pytest.mark.parametrize("phi", ["relu", "erf"])
def test_ntk_finite_width(phi):
    n = 256
    r = load(f"golikov_ntk_{phi}").execute(n=n, trials=8, seed=2002)
    ref = ntk_two_pass(phi, 4, 1, 1, 0.5, 1)
    for name in ("nngp", "ntk", "qdot1"):
        assert near_limit(r.outputs[name], ref[name], n), (name, r.outputs[name].mean, ref[name])


def test_ntk_header_numbers():
    text = (PROG / "golikov_ntk_relu.tp").read_text()
    ref = ntk_two_pass("relu", 4, 1, 1, 0.5, 1)
    assert f"nngp = {ref['nngp']:.7f}" in text and f"ntk = {ref['ntk']:.7f}" in text
    text = (PROG / "golikov_ntk_erf.tp").read_text()
    ref = ntk_two_pass("erf", 4, 1, 1, 0.5, 1)
    assert f"nngp = {ref['nngp']:.7f}" in text and f"ntk = {ref['ntk']:.7f}" in text


# ----------------------------------------------------------------------------- ch. 3: universality
LAWS = ["normal", "uniform", "rademacher", "laplace", "student_t"]


def test_universality_five_matrix_laws_one_limit():
    """Theorem 3.3.7: the erf NTK (forward + backward with transposes) has one limit for every
    iid law; student_t(6) lacks the 'all moments' hypothesis and the compiler says so."""
    from tensorprog.tools.converge import converge
    p = load("golikov_ntk_erf")
    ref = ntk_two_pass("erf", 4, 1, 1, 0.5, 1)
    n = 192
    for k, law in enumerate(LAWS):
        res = converge(p, [n], trials=6, seed=30 + k, matrix_dist=law)
        for name in ("nngp", "ntk"):
            o = res.outputs[name]
            assert o.limit == pytest.approx(ref[name], rel=1e-9)
            assert abs(o.means[0] - ref[name]) <= 5 * o.sems[0] + ALLOW / n, (law, name, o.means[0])
        heavy = [w for w in res.warnings if "all moments" in w]
        assert bool(heavy) == (law == "student_t"), (law, res.warnings)


def gauss_quad(f, k=120):
    x, w = np.polynomial.hermite_e.hermegauss(k)
    return float(np.dot(w / math.sqrt(2 * math.pi), f(x)))


def test_initial_vectors_are_not_universal():
    lim = limit("golikov_initial_vectors").outputs
    # §3.2: f(1) = 0 for Rademacher U, E z^2 1[|z| <= 1/2] for Gaussian U
    fG = integrate.quad(lambda z: z * z * math.exp(-z * z / 2) / math.sqrt(2 * math.pi), -0.5, 0.5)[0]
    assert fG == pytest.approx(math.erf(1 / (2 * math.sqrt(2))) - math.exp(-1 / 8) / math.sqrt(2 * math.pi))
    assert lim["fG"].value == pytest.approx(fG, rel=1e-9) and fG > 0.03
    assert lim["fR"].value == 0.0
    # §1.4.4: E zeta^4 of each unit-variance law
    fourth = {"normal": 3.0, "uniform": 9 / 5, "rademacher": 1.0, "laplace": 6.0,
              "student_t": 3.0 + 6.0 / (6 - 4)}
    for law, value in fourth.items():
        assert lim[f"x4_{law}"].value == pytest.approx(value, rel=1e-9), law
    # the uniform and Laplace fourth moments from their densities (unit variance)
    a = math.sqrt(3)
    assert integrate.quad(lambda x: x ** 4 / (2 * a), -a, a)[0] == pytest.approx(9 / 5)
    b = 1 / math.sqrt(2)
    assert 2 * integrate.quad(lambda x: x ** 4 * math.exp(-x / b) / (2 * b), 0, np.inf)[0] == pytest.approx(6)
    # Principle 1: k = E tanh(s z)^2 with s^2 = E tanh(U)^2 depends on the law of U
    s2G = gauss_quad(lambda z: np.tanh(z) ** 2)
    kG = gauss_quad(lambda z: np.tanh(math.sqrt(s2G) * z) ** 2)
    kR = gauss_quad(lambda z: np.tanh(math.tanh(1.0) * z) ** 2)
    assert lim["kG"].value == pytest.approx(kG, rel=1e-8)
    assert lim["kR"].value == pytest.approx(kR, rel=1e-8)
    assert abs(kG - kR) > 0.05


def test_initial_vectors_finite_width():
    """At finite width: f(1) is exactly 0 for Rademacher U; the hidden matrix's law does not
    move kG, kR; the input law does."""
    p = load("golikov_initial_vectors")
    lim = limit("golikov_initial_vectors").outputs
    n = 512
    for k, law in enumerate(["normal", "rademacher", "uniform"]):
        r = p.execute(n=n, trials=8, seed=71 + k, matrix_dist=law)
        assert all(v == 0.0 for v in r.outputs["fR"].values)
        assert r.outputs["x4_rademacher"].mean == 1.0
        for name in ("fG", "kG", "kR", "x4_normal", "x4_uniform"):
            assert near_limit(r.outputs[name], lim[name].value, n), (law, name)


# ----------------------------------------------------------------------------- App. A.2: random matrices
def catalan(k: int) -> int:
    return math.comb(2 * k, k) // (k + 1)


def narayana_moment(k: int, rho: float) -> float:
    return sum(math.comb(k, j) * math.comb(k, j - 1) / k * rho ** (j - 1) for j in range(1, k + 1))


def semicircle_moment(r: int) -> float:
    return integrate.quad(lambda x: x ** r * math.sqrt(4 - x * x) / (2 * math.pi), -2, 2,
                          epsabs=1e-13)[0]


def mp_moment(k: int, rho: float) -> float:
    """The k-th moment of the continuous part of the density (A.12) (for k >= 1 the atom at 0
    adds nothing; for k = 0 it is the continuous part's mass)."""
    a, b = (1 - math.sqrt(rho)) ** 2, (1 + math.sqrt(rho)) ** 2
    return integrate.quad(lambda x: x ** k * math.sqrt(max((b - x) * (x - a), 0.0)) / (2 * math.pi * rho * x),
                          a, b, epsabs=1e-13, limit=200)[0]


def test_mp_density_has_mass_one():
    """(A.12) as read: the continuous part plus the atom max(0, 1 − 1/rho) at 0 is a probability."""
    for rho in (0.5, 2.0):
        assert mp_moment(0, rho) + max(0.0, 1 - 1 / rho) == pytest.approx(1.0, abs=1e-7)


def test_wigner_moments_are_catalan():
    lim = limit("golikov_wigner").outputs
    for r in range(1, 9):
        expected = catalan(r // 2) if r % 2 == 0 else 0
        assert semicircle_moment(r) == pytest.approx(expected, abs=1e-9)
        assert lim[f"m{r}"].value == pytest.approx(expected, abs=1e-9), r


def test_wigner_finite_width():
    n = 384
    r = load("golikov_wigner").execute(n=n, trials=6, seed=58)
    for name, value in [("m2", 1), ("m3", 0), ("m4", 2), ("m6", 5)]:
        assert near_limit(r.outputs[name], value, n, allow=10 * value + 4), name


@pytest.mark.parametrize("rho", [0.5, 2.0, 0.3])
def test_marchenko_pastur_moments_are_narayana(rho):
    lim = limit("golikov_marchenko_pastur", ratio=rho).outputs
    for k in range(1, 5):
        assert mp_moment(k, rho) == pytest.approx(narayana_moment(k, rho), rel=1e-7)
        assert lim[f"w{k}"].value == pytest.approx(narayana_moment(k, rho), rel=1e-9), (rho, k)


def test_marchenko_pastur_finite_width():
    n = 320
    r = load("golikov_marchenko_pastur", ratio=2.0).execute(n=n, trials=6, seed=59)
    for k in (1, 2, 3):
        value = narayana_moment(k, 2.0)
        assert near_limit(r.outputs[f"w{k}"], value, n, allow=10 * value), k


# ----------------------------------------------------------------------------- §1.4.3: one SGD step in muP
def sgd_reference(xi=1.0, y=1.0, lr=2.0, k=100):
    """The Master Theorem limit of programs/golikov_sgd_mup.tp, derived by hand (see its header):
    U, V ~ N(0, 1); H = Zhat^{W x1} ~ N(0, E x1^2); D = Zhat^{W^T g2} ~ N(0, E tanh'(H)^2) (its Ż
    vanishes: E V tanh''(H) = 0); u' = U − lr l' D tanh'(U xi) xi; Z^{W x1'} = H' + Ż with
    Ż = g2 · E[d x1'/dD] = −lr l' xi^2 V tanh'(H) E[tanh'(u' xi) tanh'(U xi)]."""
    x, w = np.polynomial.hermite_e.hermegauss(k)
    w = w / math.sqrt(2 * math.pi)
    t = np.tanh

    def dt(z):
        return 1 - np.tanh(z) ** 2
    sH2 = float(w @ t(x * xi) ** 2)
    sD2 = float(w @ dt(math.sqrt(sH2) * x) ** 2)
    f0 = 0.0
    dl = f0 - y
    U, D = np.meshgrid(x, math.sqrt(sD2) * x, indexing="ij")
    w2 = np.outer(w, w)
    u1 = U - lr * dl * D * dt(U * xi) * xi
    x1, x1n = t(U * xi), t(u1 * xi)
    c1 = float(np.sum(w2 * x1 * x1n))
    s2n = float(np.sum(w2 * x1n ** 2))
    c2 = float(np.sum(w2 * dt(u1 * xi) * dt(U * xi)))
    a = xi ** 2 * c2 + c1
    chol = np.linalg.cholesky(np.array([[sH2, c1], [c1, s2n]]))
    Z1, Z2, V = np.meshgrid(x, x, x, indexing="ij")
    w3 = w[:, None, None] * w[None, :, None] * w[None, None, :]
    H = chol[0, 0] * Z1
    Hn = chol[1, 0] * Z1 + chol[1, 1] * Z2
    x2n = t(Hn - lr * dl * V * dt(H) * a)
    f1 = float(np.sum(w3 * (V - lr * dl * t(H)) * x2n))
    dfeat = float(np.sum(w3 * (x2n - t(H)) ** 2))
    K = float(w @ t(math.sqrt(sH2) * x) ** 2) + xi ** 2 * sD2 * float(w @ dt(x * xi) ** 2) + sD2 * sH2
    return {"f0": f0, "f1": f1, "K": K, "f_lin": f0 - lr * dl * K, "dfeat": dfeat}


@pytest.mark.parametrize("lr", [2.0, 0.1])
def test_sgd_mup_limit_is_the_hand_derived_one(lr):
    ref = sgd_reference(lr=lr)
    lim = limit("golikov_sgd_mup", lr=lr).outputs
    for name, value in ref.items():
        assert lim[name].value == pytest.approx(value, rel=2e-6, abs=1e-9), name
    gap = ref["f1"] - ref["f_lin"]
    if lr == 2.0:      # feature learning: the step's effect is far from the kernel prediction
        assert abs(gap) > 0.5 and ref["dfeat"] > 0.3
    else:              # small steps: they agree up to O(lr^2)
        assert abs(gap) < 0.01 * abs(ref["f_lin"]) + 2 * lr ** 2 * 0.1 and abs(gap) > 1e-5


def test_sgd_mup_finite_width_follows_the_program_not_the_kernel():
    n = 512
    r = load("golikov_sgd_mup").execute(n=n, trials=8, seed=143)
    lim = limit("golikov_sgd_mup").outputs
    f1 = r.outputs["f1"]
    assert near_limit(f1, lim["f1"].value, n)
    assert abs(f1.mean - lim["f_lin"].value) > 20 * f1.sem + 0.5
    assert near_limit(r.outputs["dfeat"], lim["dfeat"].value, n)
    assert near_limit(r.outputs["f_lin"], lim["f_lin"].value, n)
