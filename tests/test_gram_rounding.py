"""The Gram entries q = X Xᵀ/d of dataset kernels are within INPUT_ROUNDING's allowance whatever
the input dimension d (tools.pairs.accurate_dot), against exact rational sums; the kernels' stated
errors cover an 80-bit reference for inputs of MNIST's dimension."""
from __future__ import annotations

import importlib.util
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.limit.replay import INPUT_ROUNDING
from tensorprog.tools.pairs import DOT_CHUNK, accurate_dot, dot2, gram, gram_block, gram_pairs

ROOT = Path(__file__).resolve().parent.parent
U = np.finfo(float).eps / 2


def exact_gram(X: np.ndarray) -> np.ndarray:
    """X Xᵀ / d in rational arithmetic, rounded once to float64 at the end (to compare with)."""
    rows = [[Fraction(float(v)) for v in x] for x in X]
    d = X.shape[1]
    return np.array([[float(sum(a * b for a, b in zip(x, y)) / d) for y in rows] for x in rows])


def in_order_float64(X: np.ndarray) -> np.ndarray:
    """The plain float64 sum in order (what the Gram entries were before): errs by up to γ_d."""
    q = np.multiply.outer(X[:, 0], X[:, 0])
    for k in range(1, X.shape[1]):
        q += np.multiply.outer(X[:, k], X[:, k])
    return q / X.shape[1]


@pytest.mark.parametrize("d", [784, DOT_CHUNK + 977])
@pytest.mark.parametrize("how", ["extended", "dot2"])
def test_gram_within_two_units_of_its_scale(d, how):
    X = np.random.default_rng(d).standard_normal((5, d)) * np.array([1, 1e3, 1e-3, 1, 7])[:, None]
    X[4] = X[0] + 1e-9 * X[1]                              # nearly parallel to row 0: q_04 near its scale
    exact = exact_gram(X)
    scale = np.sqrt(np.outer(np.diag(exact), np.diag(exact)))
    got = gram(X) if how == "extended" else dot2(X[:, None, :], X[None, :, :])
    err = np.abs(got - exact) / scale
    assert err.max() <= 2.01 * U + 1 * U                 # 2.01u (accurate_dot) + the rounding of ``exact`` itself
    assert 2.01 * U + 2 * U <= INPUT_ROUNDING            # the replay's allowance covers it with s·q + b's roundings
    old = np.abs(in_order_float64(X) - exact) / scale
    assert old.max() > 3 * U                             # the data is one where the plain sum was worse


def test_blocks_and_pairs_have_the_same_bits():
    X = np.random.default_rng(3).standard_normal((9, 300))
    full = gram(X)
    assert np.array_equal(gram_block(X, slice(2, 7), slice(4, 9)), full[2:7, 4:9])
    a, b = np.array([0, 3, 8, 5]), np.array([1, 3, 2, 8])
    assert np.array_equal(gram_pairs(X, a, b), full[a, b])
    assert np.array_equal(accurate_dot(X[a], X[b]), full[a, b])


def test_stated_errors_cover_at_mnist_dimension(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", str(tmp_path))
    spec = importlib.util.spec_from_file_location("series_reference", ROOT / "bench" / "series_reference.py")
    ref_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref_module)
    X = np.random.default_rng(5).standard_normal((8, 784))
    X[1] = X[0] + 0.05 * X[1]
    r = tp.kernel(str(ROOT / "programs" / "kernels" / "tanh_mlp.tp"), X, L=2, var=1.5, var1=1.5, b1=0.1, tol=1e-10)
    pairs = [(0, 0), (0, 1), (2, 5), (3, 7), (6, 6)]
    ref, ref_err = ref_module.mlp_kernels(X, pairs, 2, 1.5, 1.5, 0.1, "tanh")
    for n, name in enumerate(("nngp", "ntk")):
        got = np.array([r.outputs[name].mean[i, j] for i, j in pairs], dtype=np.longdouble)
        stated = np.array([r.outputs[name].error[i, j] for i, j in pairs])
        actual = np.abs(got - ref[:, n]).astype(float) + ref_err[:, n].astype(float)
        assert np.all(actual <= stated), (name, actual, stated)
