"""Dataset kernels at singular pairs (tools/pairs.py): correlation ±1 with equal norms (x ≡ ±y,
i = j among them) and with unequal norms (parallel rows, y = λx), zero rows.  A batch that mixed
i = j pairs with parallel pairs of unequal norms got the diagonal wrong far beyond its error bounds
(found in review); parallel pairs are now their own class, compiled one at a time."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.limit.replay_store import ReplayStore
from tensorprog.tools import pairs

from test_kernel import TEMPLATE, relu_nngp_ntk


def test_parallel_rows_of_different_norms_leave_the_diagonal_exact(monkeypatch, tmp_path):
    monkeypatch.setattr(pairs, "STORE", ReplayStore(tmp_path))     # (the store is read at import)
    monkeypatch.setattr(pairs, "REPLAYS", OrderedDict())
    X = np.random.default_rng(3).standard_normal((5, 4))
    X[3] = 2 * X[1]                   # parallel to row 1, twice its norm
    X[4] = 0.01 * X[0]                # parallel to row 0, a hundredth of its norm
    K = tp.kernel(TEMPLATE, X, L=3)
    nngp, ntk = relu_nngp_ntk(X @ X.T / X.shape[1], 3, 2.0, 1.0)
    for name, want in (("nngp", nngp), ("ntk", ntk)):
        got = K.outputs[name]           # the diagonal: the reference's arccos is exact there (θ = 0)
        assert np.max(np.abs(np.diag(got.mean) - np.diag(want))) < 1e-12, name
        assert np.all(np.abs(np.diag(got.mean) - np.diag(want)) <= np.diag(got.error) + 1e-15), name


def test_one_dimensional_data_every_pair_parallel(monkeypatch, tmp_path):
    """d = 1: every pair has correlation ±1 and, but for i = j, unequal norms."""
    monkeypatch.setattr(pairs, "STORE", ReplayStore(tmp_path))
    monkeypatch.setattr(pairs, "REPLAYS", OrderedDict())
    X = np.random.default_rng(5).standard_normal((12, 1))
    K = tp.kernel(TEMPLATE, X, L=3)
    nngp, ntk = relu_nngp_ntk(X @ X.T, 3, 2.0, 1.0, snap=True)
    for name, want in (("nngp", nngp), ("ntk", ntk)):
        got = K.outputs[name]
        assert got.method == "exact"
        assert np.max(np.abs(got.mean - want)) < 1e-12, name
        assert np.all(np.abs(got.mean - want) <= got.error + 1e-15), name


@pytest.mark.parametrize("tile_pairs", [1, 3, 7])
def test_zero_rows_and_scaled_copies_tile_to_the_same_bits(tmp_path, tile_pairs):
    """Pairs where the replay does not hold (a zero row: variance 0) or that are compiled alone
    (parallel rows) have the same bits in any tiling as in memory."""
    Z = np.random.default_rng(6).standard_normal((9, 3))
    Z[2] = Z[5] = 0
    Z[7] = 3 * Z[1]
    Z[8] = -Z[0]
    whole = tp.kernel(TEMPLATE, Z, L=3)
    tiled = tp.kernel(TEMPLATE, Z, L=3, out=f"{tmp_path}/k/", tile_pairs=tile_pairs)
    for name in ("nngp", "ntk"):
        assert np.array_equal(np.asarray(tiled.outputs[name].mean), whole.outputs[name].mean)
        assert np.array_equal(np.asarray(tiled.outputs[name].error), whole.outputs[name].error)
    nngp, ntk = relu_nngp_ntk(Z @ Z.T / 3, 3, 2.0, 1.0, snap=True)
    live = np.ix_([0, 1, 3, 4, 6, 7, 8], [0, 1, 3, 4, 6, 7, 8])     # the recursion divides by the variances
    assert np.max(np.abs(whole.outputs["ntk"].mean[live] - ntk[live])) < 1e-12


def test_few_pairs_are_compiled_not_recorded(monkeypatch, tmp_path):
    """N = 2: the rest class is one pair and the diagonal two; none is recorded (a record on one pair
    folds its covariance to constants; the candidates were 48 copies of that pair), each is compiled,
    and the kernel is the single-pair compiles' (ReLU: within the stated errors of the arc-cosine
    recursion)."""
    monkeypatch.setattr(pairs, "STORE", ReplayStore(tmp_path))
    monkeypatch.setattr(pairs, "REPLAYS", OrderedDict())
    X = np.random.default_rng(4).standard_normal((2, 4))
    got = pairs.rest_candidates(pairs.LimitSpec(None, 0, 1.0, 0.0, X, 1e-10))
    assert list(zip(got.i, got.j)) == [(0, 1)]

    def no_record(*args, **kwargs):
        raise AssertionError("a class of fewer than MIN_RECORD_PAIRS pairs was recorded")
    monkeypatch.setattr(pairs, "record_class", no_record)
    K = tp.kernel(TEMPLATE, X, L=3)
    nngp, ntk = relu_nngp_ntk(X @ X.T / X.shape[1], 3, 2.0, 1.0)
    for name, want in (("nngp", nngp), ("ntk", ntk)):
        m = K.outputs[name]
        assert np.all(np.abs(m.mean - want) <= m.error + 1e-13 * np.abs(want)), name


def test_rest_candidates_are_distinct():
    X = np.random.default_rng(6).standard_normal((9, 3))
    got = pairs.rest_candidates(pairs.LimitSpec(None, 0, 1.0, 0.0, X, 1e-10))
    keys = list(zip(got.i, got.j))
    assert len(keys) == len(set(keys)) > pairs.MIN_RECORD_PAIRS and all(i < j for i, j in keys)
