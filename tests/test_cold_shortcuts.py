"""The cold kernel call's shortcuts give what the long way gives, exactly (a speed-up changes no
number): sympy's expressions node for node, the same covariance layouts, the same template IR."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.expect import batch as B
from tensorprog.limit.batch import partial_derivative, substituted
from tensorprog.tools import kernel as kmod

ROOT = Path(__file__).resolve().parent.parent
c = sp.symbols("c0:6", real=True)
b = sp.symbols("b0:6", real=True)


def same_tree(x: sp.Expr, y: sp.Expr) -> bool:
    return sp.srepr(x) == sp.srepr(y)


@pytest.mark.parametrize("f", [
    1.5 * c[0] * c[1] + 1.5 * c[2] * c[3] + c[4] + c[0] * c[5],      # an NTK: a sum of products
    c[0] ** 2 * c[1] + sp.Float(0.3) * c[0] * c[2] - c[3],           # a power: sympy's own rule
    sp.tanh(c[0]) * c[1] + c[0] * c[0] * c[2] + 2 * c[0],
    c[0] / c[1] + sp.sqrt(c[2]) * c[0] * c[3],
    sp.Float(2.5) * c[0],
    c[0],
    sp.exp(c[0] * c[1]),
])
def test_partial_derivative_is_sympys(f):
    for s in c:
        assert same_tree(partial_derivative(f, s), sp.diff(f, s))


def test_substituted_is_subs_of_every_symbol():
    at = {c[k]: (b[k] if k % 2 else sp.Float(0.25 * k + 0.1)) for k in range(6)}
    for f in (1.5 * c[0] * c[1] + c[2] * c[3] * sp.Float(0.7) + c[4], c[1] * c[3] * c[5] + 2, c[0] ** 2 * c[2]):
        for s in c:
            d = sp.diff(f, s)
            assert same_tree(substituted(d, at), d.subs(at))


def reference_cov(covs: np.ndarray):
    """The covariance layout as it was read before (entry by entry into sp.zeros, ties by a scan)."""
    P, d, _ = covs.shape
    S, values, layout = sp.zeros(d, d), {}, {}
    for i in range(d):
        for j in range(i, d):
            col = covs[:, i, j]
            if np.all(col == col[0]):
                S[i, j] = S[j, i] = B.as_number(float(col[0]))
                layout[(i, j)] = ("const", float(col[0]))
                continue
            tied = next(((c_, s) for c_, v in values.items() for s in (1, -1) if B._same(v, col, s)), None)
            if tied is None:
                tied = (sp.Symbol(f"c_{i}_{j}", positive=True if i == j else None, real=True), 1)
                values[tied[0]] = col
            layout[(i, j)] = ("sym",) + tied
            S[i, j] = S[j, i] = tied[1] * tied[0]
    return S, values, layout


def test_symbolic_cov_reads_as_before():
    """Constant, tied (±, to rounding and not), zero and integer entries, short and long batches."""
    rng = np.random.default_rng(1)
    for _ in range(400):
        d, P = int(rng.integers(1, 6)), int(rng.choice([1, 2, 7, 48, 300]))
        A = rng.standard_normal((P, d, d))
        C = A @ A.transpose(0, 2, 1)
        for i in range(d):
            for j in range(i, d):
                r = rng.random()
                if r < 0.2:
                    C[:, i, j] = C[:, j, i] = 0.0
                elif r < 0.35:
                    C[:, i, j] = C[:, j, i] = float(rng.integers(-3, 4))
                elif r < 0.6 and (i, j) != (0, 0):
                    near = 1 + 1e-13 * rng.standard_normal(P) if rng.random() < 0.5 else 1.0
                    C[:, i, j] = C[:, j, i] = C[:, 0, 0] * rng.choice([1, -1]) * near
                elif r < 0.7 and j > 0:
                    C[:, i, j] = C[:, j, i] = -C[:, 0, j] * (1 + 3e-12 * rng.standard_normal(P))
        S0, v0, l0 = reference_cov(C)
        S1, v1, l1 = B._symbolic_cov(C)
        assert [sp.srepr(x) for x in S0] == [sp.srepr(x) for x in S1]
        assert S0._rep.domain == S1._rep.domain
        assert l0 == l1 and list(v0) == list(v1) and all(np.array_equal(v0[k], v1[k]) for k in v0)


def test_product_error_is_the_full_formula():
    from tensorprog.symbolic.mehler import Mean, MeanError, MehlerError, MehlerValue
    A, Bh, rho, tol = sp.Symbol("A"), sp.Symbol("B"), sp.Symbol("r", real=True), sp.Float(1e-10)
    heads = [(MehlerValue(A, Bh, rho, tol), MehlerError(A, Bh, rho, tol)), (Mean(A), MeanError(A)),
             (c[0], sp.Integer(0)), (sp.Integer(3), sp.Integer(0)), (c[1] * sp.sqrt(c[2]), sp.Float(1e-16) * c[2]),
             (sp.Symbol("u"), sp.Symbol("e")), (sp.oo, sp.Integer(0)), (c[0], sp.oo)]
    for F, E in [(sp.Integer(1), sp.Integer(0)), (c[3], sp.Integer(0)), (Mean(A), MeanError(A))]:
        for Fb, Eb in heads:
            full = sp.Abs(F) * Eb + sp.Abs(Fb) * E + E * Eb
            assert same_tree(B.product_error(F, E, Fb, Eb), full), (F, E, Fb, Eb)


TEMPLATE = str(ROOT / "programs" / "kernels" / "silu_mlp.tp")


def test_limit_template_skips_the_probe_only_for_its_own_lowering(monkeypatch):
    """A template loaded at the call's params is its own probe (the traced lowering shows q enters
    only the input covariance): limit_template returns it without lowering at the probe q; a program
    lowered at other params, or changed after its lowering, still gets the probe's IR (as before)."""
    params = dict(L=3, var=1.5, var1=1.5, b1=0.1)
    prog = tp.load(TEMPLATE, **params).ir
    merged = {**prog.params, **params}
    monkeypatch.setattr(kmod, "TEMPLATES", type(kmod.TEMPLATES)())
    monkeypatch.setattr(kmod.pairs.default_cache().store, "load_data", lambda key: None)
    monkeypatch.setattr(kmod.pairs.default_cache().store, "save_data", lambda key, data: None)
    assert kmod.own_lowering(prog, merged)
    probes = []
    real = kmod.AffineFinding.lowered
    monkeypatch.setattr(kmod.AffineFinding, "lowered", lambda self: probes.append(1) or real(self))
    tmpl, g, s, b = kmod.limit_template(prog, merged)
    assert tmpl is prog and probes == []
    assert (g, s, b) == kmod.affine_template(prog, merged)[1:] and probes == [1]
    probes.clear()
    other = tp.load(TEMPLATE, **{**params, "L": 2}).ir          # lowered at L = 2, asked at L = 3
    assert not kmod.own_lowering(other, merged)
    tmpl, *_ = kmod.limit_template(other, merged)
    assert tmpl is not other and tmpl == kmod.affine_template(other, merged)[0]
    from tensorprog.distributions.swap import with_matrix_family
    swapped = with_matrix_family(prog, "rademacher")
    assert not kmod.own_lowering(swapped, merged)
    tmpl, *_ = kmod.limit_template(swapped, merged)
    assert tmpl is not swapped and tmpl == kmod.affine_template(prog, merged)[0]


def test_batch_scaled_is_the_tapes_value():
    """σ²·b (a number times a batch symbol) and b alone read directly: the tape's bits."""
    from tensorprog.limit.batch import Batch
    from tensorprog.symbolic.evaluate import evaluate
    rng = np.random.default_rng(3)
    batch = Batch({0: np.zeros((7, 2, 2))})
    x = batch.number(rng.standard_normal(7) * 10.0 ** rng.integers(-5, 5, 7), ("input", 0, 0, 0))
    for c, direct in ((sp.Float(1.5), True), (sp.Float(0.1), True), (sp.Float(-2.7e-300), True),
                      (sp.Integer(3), True), (sp.Integer(-1), True), (sp.Float("0.1", 30), False),
                      (sp.Rational(1, 3), False)):
        expr = c * x
        got = batch.eval(expr)
        assert np.array_equal(got, np.broadcast_to(evaluate(expr, {x: batch.values[x]}), (7,)))
        assert (batch.scaled(expr) is not None) == direct
    assert np.array_equal(batch.eval(x), batch.values[x])


@pytest.mark.parametrize("r0, r1, N", [(0, 1000, 1000), (0, 300, 300), (100, 300, 1000), (0, 2500, 2500), (7, 70, 300)])
def test_series_blocks_cover_each_upper_entry_once_row_by_row(r0, r1, N):
    """The wider blocks of a series replay cover each entry (i, j), r0 ≤ i < r1, i ≤ j < N, once,
    none over ROW_BLOCK × SERIES_COL_BLOCK entries by more than a row; where N ≤ COL_BLOCK every
    block of either width spans its rows' columns, so pairs left over come row by row in both."""
    from tensorprog.tools.pairs import COL_BLOCK, SERIES_COL_BLOCK, band_blocks
    from test_kernel import assert_blocks_cover
    assert_blocks_cover(band_blocks(r0, r1, N, SERIES_COL_BLOCK), r0, r1, N, SERIES_COL_BLOCK)
    if N <= COL_BLOCK:
        for cols in (COL_BLOCK, SERIES_COL_BLOCK):
            assert all(j0 == i0 and j1 == N for i0, i1, j0, j1 in band_blocks(r0, r1, N, cols))


def test_series_kernel_has_the_same_bits_in_any_blocks(monkeypatch):
    """A series replay over blocks of either width (and the pairs left over: a repeated, a negated
    and a scaled input) gives the same bits."""
    from tensorprog.tools import pairs
    X = np.random.default_rng(5).standard_normal((150, 6))
    X[3], X[4], X[5] = X[1], -X[1], 2 * X[2]
    got = []
    for cols in (pairs.COL_BLOCK, 96):
        monkeypatch.setattr(pairs, "SERIES_COL_BLOCK", cols)
        monkeypatch.setattr(pairs, "REPLAYS", type(pairs.REPLAYS)())
        K = tp.kernel(TEMPLATE, X, L=2, var=1.5, var1=1.5, b1=0.1)
        assert K.outputs["ntk"].method == "series"
        got.append(np.stack([K.outputs[n].mean for n in ("nngp", "ntk")] + [K.outputs[n].error for n in ("nngp", "ntk")]))
    assert len(pairs.band_blocks(0, 150, 150, 96)) > len(pairs.band_blocks(0, 150, 150, pairs.COL_BLOCK))
    assert np.array_equal(got[0], got[1])
