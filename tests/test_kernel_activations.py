"""Kernel templates of other activations against an independent layer recursion: the GELU MLP
(programs/kernels/gelu_mlp.tp, every expectation in closed form, replayed over the pairs)
against the NNGP/NTK recursion with each Gaussian expectation by 2-D Gauss–Hermite quadrature
(the integrands are entire, so 120 nodes per dimension are exact to rounding)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.polynomial.hermite_e import hermegauss
from scipy.special import erf

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent
GELU = ROOT / "programs" / "kernels" / "gelu_mlp.tp"


def gelu(x):
    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def dgelu(x):
    return 0.5 * (1 + erf(x / np.sqrt(2))) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)


NODES, WEIGHTS = hermegauss(120)
WEIGHTS = WEIGHTS / np.sqrt(2 * np.pi)


def expect(f, g, a: float, b: float, c: float) -> float:
    """E f(u) g(v), (u, v) ~ N(0, [[a, c], [c, b]]), whitened: u = √a z₁, v = (c/√a) z₁ + r z₂."""
    r = np.sqrt(max(b - c * c / a, 0.0))
    u = np.sqrt(a) * NODES[:, None]
    v = (c / np.sqrt(a)) * NODES[:, None] + r * NODES[None, :]
    return float(WEIGHTS @ (f(u) * g(v)) @ WEIGHTS)


def recursion(q11: float, q12: float, q22: float, L: int, var: float, var1: float, b1: float):
    """(nngp, ntk): Σ¹ = var1·q + b1, Θ¹ = Σ¹₁₂; per layer K = E φφ, K̇ = E φ'φ', then
    Σ ← var·K, Θ ← var·K + var·K̇·Θ; at the last layer nngp = K, ntk = K + K̇·Θ."""
    s11, s12, s22 = var1 * q11 + b1, var1 * q12 + b1, var1 * q22 + b1
    theta = s12
    for layer in range(1, L + 1):
        k12 = expect(gelu, gelu, s11, s22, s12)
        kdot = expect(dgelu, dgelu, s11, s22, s12)
        if layer == L:
            return k12, k12 + kdot * theta
        theta = var * k12 + var * kdot * theta
        s11, s22 = var * expect(gelu, gelu, s11, s11, s11), var * expect(gelu, gelu, s22, s22, s22)
        s12 = var * k12
    raise ValueError("L ≥ 1")


@pytest.mark.parametrize("L,b1", [(1, 0.0), (3, 0.0), (3, 0.2)])
def test_gelu_template_matches_quadrature_recursion(L, b1):
    X = np.random.default_rng(3).standard_normal((9, 4))
    X[4] = -X[1]                                   # a pair with correlation −1: its own class
    K = tp.kernel(GELU, X, L=L, var=1.7, var1=1.3, b1=b1)
    assert K.outputs["nngp"].method == K.outputs["ntk"].method == "exact"
    q = X @ X.T / X.shape[1]
    for i in range(len(X)):
        for j in range(i, len(X)):
            nngp, ntk = recursion(q[i, i], q[i, j], q[j, j], L, 1.7, 1.3, b1)
            assert K.outputs["nngp"].mean[i, j] == pytest.approx(nngp, rel=1e-10, abs=1e-12)
            assert K.outputs["ntk"].mean[i, j] == pytest.approx(ntk, rel=1e-10, abs=1e-12)
            assert K.outputs["ntk"].mean[j, i] == K.outputs["ntk"].mean[i, j]
    assert np.max(K.outputs["ntk"].error) < 1e-10


def test_mish_template_is_replayed_and_agrees_with_its_compile():
    """mish's product forms are replayed by the series (|F| of a Mean or MehlerValue stays Abs:
    they are real, no √(F·conjugate F) without a tape rule), and the replay agrees with a fresh
    batch compile of the pairs within the two stated errors."""
    from tensorprog.program import load
    from tensorprog.tools import pairs
    from tensorprog.tools.kernel import limit_template
    params = dict(L=3, var=1.5, var1=1.5, b1=0.1)
    prog = load(ROOT / "programs" / "kernels" / "mish_mlp.tp", **params)
    tmpl, g, s, b = limit_template(prog.ir, {**prog.ir.params, **params})
    spec = pairs.LimitSpec(tmpl, g, s, b, np.random.default_rng(5).standard_normal((8, 4)), 1e-10)
    candidates = pairs.rest_candidates(spec)
    got = pairs.record_class(spec, candidates)
    assert got is not None and got.replay.method == "series"
    assert pairs.agrees_with_compile(spec, got.replay, *candidates)
