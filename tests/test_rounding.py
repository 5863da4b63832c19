"""Stated errors bound the true error down to float rounding, at depth (issue 11, item 5).

A leaky-ReLU MLP of depth 10: its NNGP and NTK (by a backward pass) against the layer recursion
in 40-digit mpmath.  Every expectation is exact (arc-cosine closed forms), so the only error is
float rounding, which compounds over the layers: the floor charged per expectation
(``limit.ledger.ROUNDING``) must cover it, in the per-pair compile and in the batched dataset
kernel (``tp.kernel``), where the floor used to be one rounding of the final value and missed by 5x."""
from __future__ import annotations

from pathlib import Path

import mpmath as mp
import numpy as np
import pytest

import tensorprog as tp

SLOPE = mp.mpf("0.2")
DEPTH = 10
VAR = 2 / (1 + SLOPE ** 2)          # keeps the diagonal of the kernel at its input value
# the hand-written backward pass (step for relu′), so that the text edits below can name the derivative
TEMPLATE = (Path(__file__).resolve().parent / "data" / "relu_mlp_hand.tp").read_text()


def leaky_template() -> str:
    """relu_mlp.tp with leaky_relu(·, 0.2) and its derivative 0.2 + 0.8·step."""
    text = TEMPLATE.replace("relu(x[L])", "leaky_relu(x[L], 0.2)").replace("relu(y[L])", "leaky_relu(y[L], 0.2)")
    text = text.replace("relu(x[l-1])", "leaky_relu(x[l-1], 0.2)").replace("relu(y[l-1])", "leaky_relu(y[l-1], 0.2)")
    for v in ("x[L]", "y[L]", "x[l-1]", "y[l-1]"):
        text = text.replace(f"step({v})", f"(0.2 + 0.8 * step({v}))")
    assert "relu(x" not in text.replace("leaky_relu(x", "") and "step(x" in text
    return text


def moments(q1, c, q2):
    """(E φ(u)φ(v), E φ'(u)φ'(v)) for φ = leaky_relu(·, a), (u, v) ~ N(0, [[q1, c], [c, q2]])."""
    a = SLOPE
    rho = min(c / mp.sqrt(q1 * q2), mp.mpf(1))
    theta = mp.acos(rho)
    relu2 = mp.sqrt(q1 * q2) / (2 * mp.pi) * (mp.sqrt(1 - rho ** 2) + (mp.pi - theta) * rho)
    return (a ** 2 * c + a * (1 - a) * c + (1 - a) ** 2 * relu2,
            a ** 2 + a * (1 - a) + (1 - a) ** 2 * (mp.pi - theta) / (2 * mp.pi))


def reference(q11, q12, q22):
    """(nngp, ntk) by the layer recursion in 40 digits."""
    with mp.workdps(40):
        K = [tuple(mp.mpf(float(q)) for q in (q11, q12, q22))]
        for _ in range(DEPTH - 1):
            q1, c, q2 = K[-1]
            K.append((VAR * moments(q1, q1, q1)[0], VAR * moments(q1, c, q2)[0], VAR * moments(q2, q2, q2)[0]))
        theta = K[0][1]
        for layer in K[:-1]:
            e, d = moments(*layer)
            theta = VAR * e + VAR * theta * d
        e, d = moments(*K[-1])
        return e, e + theta * d


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("rounding") / "leaky_mlp.tp"
    path.write_text(leaky_template())
    return str(path)


@pytest.mark.parametrize("q", [(1.0, 1.0, 1.0), (1.0, 0.5, 1.0), (2.0, 1.9, 2.0), (0.7, -0.3, 1.3)])
def test_pairwise_errors_cover_rounding(template, q):
    limit = tp.load(template, L=DEPTH, var=float(VAR), q11=q[0], q12=q[1], q22=q[2]).compile().limit()
    for name, truth in zip(("nngp", "ntk"), reference(*q)):
        out = limit.outputs[name]
        assert out.method == "exact"
        assert abs(out.value - float(truth)) <= out.error, (name, out.value, float(truth), out.error)
        assert out.error < 1e-11 * max(1.0, abs(out.value))       # and it stays a rounding floor


def test_dataset_kernel_errors_cover_rounding(template):
    X = np.random.default_rng(0).standard_normal((6, 10))
    result = tp.kernel(template, X, L=DEPTH, var=float(VAR))
    Q = X @ X.T / X.shape[1]
    for i in range(len(X)):
        for j in range(len(X)):
            truth = reference(Q[i, i], Q[i, j], Q[j, j])
            for name, t in zip(("nngp", "ntk"), truth):
                out = result.outputs[name]
                value, error = np.asarray(out.mean)[i, j], np.asarray(out.error)[i, j]
                assert abs(value - float(t)) <= error, (name, i, j, value, float(t), error)
                assert error < 1e-11 * max(1.0, abs(value))
