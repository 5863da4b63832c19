"""A compile's FormMemo (expect/batch.py) changes no result: the same expectations asked again on
other covariances ("the next layer") give, with the memo shared across the calls, exactly what
each gives alone — values, errors, methods, and the closed form with its stated error and layout."""
import numpy as np
import pytest
import sympy as sp

from tensorprog.expect.batch import FormMemo, expect_batch
from tensorprog.expect.budget import Budget
from tensorprog.expect.forms import coordinate
from tensorprog.symbolic.heads import HEADS

L0, L1, L2, L3 = (coordinate(k) for k in range(4))
SIG = HEADS["sigmoid"]
SILU = HEADS["silu"]
BUDGET = Budget(tol=1e-10)


def covs_2(seed: int, P: int = 12) -> np.ndarray:
    """P random 2×2 covariances (positive definite)."""
    rng = np.random.default_rng(seed)
    a, b = rng.uniform(0.5, 2.0, P), rng.uniform(0.5, 2.0, P)
    c = rng.uniform(-0.9, 0.9, P) * np.sqrt(a * b)
    return np.stack([np.stack([a, c], -1), np.stack([c, b], -1)], -2)


def covs_4(seed: int, P: int = 12) -> np.ndarray:
    """(ℓ0, ℓ1) independent of (ℓ2, ℓ3): two 2×2 blocks, the integrand a product over them."""
    out = np.zeros((P, 4, 4))
    out[:, :2, :2], out[:, 2:, 2:] = covs_2(seed, P), covs_2(seed + 100, P)
    return out


def covs_2_fixed_a(seed: int, P: int = 12) -> np.ndarray:
    """As covs_2, with ℓ0's variance the same over the batch (a constant of the closed form) and
    another at each seed."""
    out = covs_2(seed, P)
    a = 0.7 + 0.3 * seed
    out[:, 0, 1] = out[:, 1, 0] = out[:, 0, 1] * np.sqrt(a / out[:, 0, 0])
    out[:, 0, 0] = a
    return out


CASES = [
    (L0 * L1, (L0, L1), covs_2),                                           # a closed form (E xy = c)
    (L0 ** 2 * L1 ** 2, (L0, L1), covs_2_fixed_a),                         # one with a constant entry
    (SILU(L0) * SILU(L1), (L0, L1), covs_2),                               # the Mehler series
    (SILU(L0) ** 2, (L0,), lambda s: covs_2(s)[:, :1, :1]),                # a mean by the series
    (L0 * L1 * (L2 * (1 - SIG(L2)) + 1) * (L3 * (1 - SIG(L3)) + 1) * SIG(L2) * SIG(L3),
     (L0, L1, L2, L3), covs_4),                                            # a product over two blocks
]


def same(a, b) -> bool:
    """Two BatchResults are the same, bit for bit and form for form."""
    if not (np.array_equal(a.values, b.values) and np.array_equal(a.errors, b.errors)
            and list(a.methods) == list(b.methods) and a.budget == b.budget):
        return False
    if (a.form is None) != (b.form is None):
        return False
    return a.form is None or (a.form.F == b.form.F and a.form.error == b.form.error
                              and a.form.layout == b.form.layout)


@pytest.mark.parametrize("expr, gaussians, make", CASES)
def test_memo_changes_no_result(expr, gaussians, make):
    memo = FormMemo()
    for layer in range(3):
        covs = make(layer)
        alone = expect_batch(expr, gaussians, covs, budget=BUDGET, forms=None)
        shared = expect_batch(expr, gaussians, covs, budget=BUDGET, forms=memo)
        assert same(alone, shared), f"layer {layer}: the memo changed the result of E[{expr}]"
        assert np.all(np.isfinite(shared.values))
    assert memo.found or memo.failed                 # the later layers were answered from it
