"""The Mehler (Hermite) series rule: coefficients, values and bounds against independent quadrature."""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, special

from tensorprog.expect.batch import expect_batch
from tensorprog.expect.budget import Budget
from tensorprog.expect.engine import expect
from tensorprog.expect.series import series_pairs
from tensorprog.symbolic.grid import GridTape
from tensorprog.symbolic.hermite import coefficients, derivative
from tensorprog.symbolic.mehler import MehlerError, MehlerValue, Mean, T, hermite_head

x, y = sp.symbols("x y", real=True)


def dtanh(t):
    return 1 - np.tanh(t) ** 2


def pdf(t):
    return np.exp(-t * t / 2) / math.sqrt(2 * math.pi)


def quad2(f, g, a, b, c):
    """E f(u) g(v) by scipy's adaptive 2-D quadrature in whitened coordinates."""
    sa, r = math.sqrt(a), math.sqrt(max(b - c * c / a, 0.0))
    return integrate.dblquad(lambda z2, z1: f(sa * z1) * g(c / sa * z1 + r * z2) * pdf(z1) * pdf(z2),
                             -12, 12, -12, 12, epsabs=1e-13, epsrel=1e-13)[0]


def quad1(f, a):
    return integrate.quad(lambda z: f(math.sqrt(a) * z) * pdf(z), -14, 14, epsabs=1e-15, epsrel=1e-14, limit=200)[0]


def test_coefficients_against_scipy_quad():
    c = coefficients(np.tanh, [0.7, 2.5], 40)
    for v, a in enumerate((0.7, 2.5)):
        for k in (1, 3, 9, 21):
            ref = quad1(lambda t: np.tanh(t) * special.eval_hermitenorm(k, t / math.sqrt(a)), a) / math.sqrt(
                math.factorial(k))
            assert abs(c.alpha[v, k] - ref) < 1e-13
        assert abs(c.square[v] - quad1(lambda t: np.tanh(t) ** 2, a)) < 1e-13
        assert np.all(np.abs(c.alpha[v, ::2]) < 1e-15)                 # tanh is odd


def test_derivative_by_index_shift():
    a = [0.5, 1.8]
    shifted = derivative(coefficients(np.tanh, a, 60), a)
    direct = coefficients(dtanh, a, 59).alpha
    assert np.max(np.abs(shifted - direct)) < 1e-12


@pytest.mark.parametrize("a,b,c", [(1.0, 1.0, 0.5), (1.5, 0.7, -0.9), (0.3, 3.0, 0.8), (2.0, 2.0, 1.9)])
def test_pairs_against_dblquad(a, b, c):
    for f in (np.tanh, dtanh):
        res = series_pairs(f, f, a, b, c, 1e-11)
        ref = quad2(f, f, a, b, c)
        assert res.ok[0] and abs(res.values[0] - ref) <= res.errors[0] + 1e-13
        assert res.errors[0] < 1e-11


def test_correlation_one_against_1d_quadrature():
    for a, b in ((1.2, 1.2), (0.5, 2.0)):
        c = math.sqrt(a * b)
        res = series_pairs(np.tanh, np.tanh, a, b, c, 1e-11)
        ref = quad1(lambda t: np.tanh(t) * np.tanh(math.sqrt(b / a) * t), a)
        assert res.ok[0] and abs(res.values[0] - ref) <= res.errors[0] + 1e-14


def test_erf_closed_form_and_bound_tightness():
    """E erf(u)erf(v) = (2/π) asin(2c/√((1+2a)(1+2b))): the bound covers it, and is not loose
    by more than the rounding floor."""
    a = np.array([0.5, 1.0, 2.0, 1.0])
    b = np.array([1.5, 1.0, 0.4, 1.0])
    c = np.array([0.3, -0.8, 0.85, 1.0])
    res = series_pairs(special.erf, special.erf, a, b, c, 1e-12)
    exact = 2 / np.pi * np.arcsin(2 * c / np.sqrt((1 + 2 * a) * (1 + 2 * b)))
    err = np.abs(res.values - exact)
    assert np.all(res.ok) and np.all(err <= res.errors) and np.all(res.errors < 1e-12)


def test_kinked_activation_bound_is_honest_and_refuses():
    """relu's coefficients decay like a power of k: near ρ = 1 the bound misses a tight target
    (another rule is used), and wherever it is stated it covers the arc-cosine value."""
    rho = np.array([0.1, 0.5, 0.9, 1.0])
    res = series_pairs(lambda t: np.maximum(t, 0), lambda t: np.maximum(t, 0), 1.0, 1.0, rho, 1e-10, 256)
    th = np.arccos(rho)
    exact = (np.sin(th) + (np.pi - th) * np.cos(th)) / (2 * np.pi)
    assert np.all(np.abs(res.values - exact) <= res.errors)
    assert not res.ok[-1]


def test_engine_uses_the_series_and_agrees_with_quadrature():
    cov = [[1.3, 0.4], [0.4, 0.6]]
    f = (1 - sp.tanh(x) ** 2) * sp.tanh(y) ** 2 * sp.exp(y / 3)
    s = expect(f, [x, y], cov)
    q = expect(f, [x, y], cov, budget=Budget(series_terms=0))
    assert s.method == "series" and q.method == "quadrature"
    assert abs(s.value - q.value) <= s.error + q.error
    ref = quad2(dtanh, lambda t: np.tanh(t) ** 2 * np.exp(t / 3), 1.3, 0.6, 0.4)
    assert abs(s.value - ref) <= s.error + 1e-13


def test_batch_factors_independent_blocks():
    """E[u·w·tanh(x)tanh(y)] with (u, w) independent of (x, y): Wick times the series."""
    u, w = sp.symbols("u w", real=True)
    covs = np.array([[[1.0, 0.3, 0, 0], [0.3, 2.0, 0, 0], [0, 0, 1.1, 0.5], [0, 0, 0.5, 0.9]],
                     [[1.0, -0.2, 0, 0], [-0.2, 1.0, 0, 0], [0, 0, 0.4, 0.1], [0, 0, 0.1, 1.7]]])
    res = expect_batch(u * w * sp.tanh(x) * sp.tanh(y), [u, w, x, y], covs)
    assert set(res.methods) == {"series"} and res.form is not None
    for p in range(2):
        ref = covs[p, 0, 1] * quad2(np.tanh, np.tanh, covs[p, 2, 2], covs[p, 3, 3], covs[p, 2, 3])
        assert abs(res.values[p] - ref) <= res.errors[p] + 1e-13


def test_grid_tape_of_the_series_round_trips_and_matches():
    a, b, c = sp.symbols("a b c", positive=True)
    H = hermite_head(sp.tanh(T), 128, 0.04)
    rho = c / sp.sqrt(a * b)
    tape = GridTape.compile([MehlerValue(H(a), H(b), rho, sp.Float(1e-10)),
                             MehlerError(H(a), H(b), rho, sp.Float(1e-10)), Mean(H(a))], [a], [b], [c])
    assert tape.counts["cell"] >= 2 and tape.counts["row"] >= 1        # coefficients once per row
    A, B = np.array([[0.8], [1.6]]), np.array([[1.0, 0.5, 2.0]])
    C = np.array([[0.3, -0.2, 0.9], [0.1, 0.85, 0.0]]) * np.sqrt(A * B)
    got = GridTape.from_json(tape.to_json())([A], [B], [C])
    for r in range(2):
        for k in range(3):
            ref = quad2(np.tanh, np.tanh, A[r, 0], B[0, k], C[r, k])
            assert abs(got[0][r, k] - ref) <= got[1][r, k] + 1e-13 and got[1][r, k] < 1e-10
    assert np.all(np.abs(got[2]) < 1e-14)                                # E tanh = 0


def test_dataset_kernel_matches_per_pair_compiles():
    """The batched tanh kernel (a replay of the series) agrees with each pair's own compile by
    quadrature, within the two stated errors; its depth-6 grad template runs without a
    covariance failure."""
    import tensorprog as tp
    from tensorprog.limit.compiler import compile_program
    X = np.random.default_rng(3).standard_normal((5, 4))
    K = tp.kernel("programs/kernels/tanh_mlp.tp", X, L=6, var=1.5, var1=1.5, b1=0.1)
    assert K.outputs["ntk"].method == "series"
    q = X @ X.T / 4
    for i, j in ((0, 0), (0, 3), (2, 4)):
        p = tp.load("programs/kernels/tanh_mlp.tp", L=6, var=1.5, var1=1.5, b1=0.1, q11=float(q[i, i]),
                    q12=float(q[i, j]), q22=float(q[j, j]))
        ref = compile_program(p.ir, budget=Budget(series_terms=0)).limit().outputs
        for name in ("nngp", "ntk"):
            got, err = K.outputs[name].mean[i, j], K.outputs[name].error[i, j]
            assert abs(got - ref[name].value) <= err + ref[name].error


@pytest.mark.parametrize("K,h", [(0, 0.05), (7, 0.05), (64, 0.05), (65, 0.0371)])
def test_parity_fold_equals_the_plain_products(K, h):
    """The folded, split products (even orders from F's even part, odd from its odd part; on the
    rule's nodes and on its every other node, with and without z = 0 among them) equal F @ Gᵀ in
    long double (G the long double basis) to within their stated bound plus u|α̃_k| (the exact and the
    rounded parts added in float64) and the long double reference's own rounding; the bound is far
    below one float64 ulp of the coefficients' scale."""
    from tensorprog.symbolic.hermite import LD, UNIT_LD, folded_basis, ld_basis, split
    z, G = ld_basis(K, h)
    _, sw, coarse, others = folded_basis(K, h)
    F = np.random.default_rng(1).standard_normal((5, len(z))) * sw
    scale = np.sqrt(np.sum(F * F, axis=1))
    hi, rest, top = split(F, coarse.beta, scale * (1 + 1e-6))
    assert np.array_equal(hi + rest, F)
    l1 = np.sum(np.abs(F), axis=1)
    u = np.finfo(float).eps / 2
    parts = {}
    for fold, cols in ((coarse, slice(None, None, 2)), (others, slice(1, None, 2))):
        exact, inexact, bound = parts[cols.start or 0] = fold.product(hi[:, cols], rest[:, cols], top, K, l1)
        Fl = F[:, cols].astype(LD)
        ref = Fl @ G[:, cols].T
        slack = (len(z) + 2) * UNIT_LD * (np.abs(Fl) @ np.abs(G[:, cols]).T)
        got = exact + inexact
        assert np.all(np.abs(got - ref) <= bound[:, None] + u * np.abs(got) + slack)
        assert np.all(bound <= 0.02 * np.finfo(float).eps * scale)
        assert np.array_equal(exact.astype(LD), hi[:, cols].astype(LD) @ hi_basis(fold, K))
    (e0, i0, b0), (e1, i1, b1) = parts[0], parts[1]
    assert np.array_equal((e0 + e1).astype(LD), e0.astype(LD) + e1.astype(LD))     # the two exact parts add exactly
    fine = (e0 + e1) + (i0 + i1)
    ref = F.astype(LD) @ G.T
    assert np.all(np.abs(fine - ref) <= (b0 + b1)[:, None] + 2.01 * u * np.abs(fine) + len(z) * UNIT_LD * np.abs(ref).max())
    assert len(coarse.zero) == (1 if (len(z) // 2) % 2 == 0 else 0)


def hi_basis(fold, K: int) -> np.ndarray:
    """The β-bit basis of a fold unfolded to its nodes (K+1 columns), in long double: hi(z)·G₁(z) summed
    over the folded nodes is the exact part of :meth:`Folded.product`."""
    from tensorprog.symbolic.hermite import LD
    n = fold.pos.stop
    out = np.zeros((n, K + 1), dtype=LD)
    first = len(fold.zero)
    if first:
        out[fold.zero[0], 0::2] = fold.even.hi[0]
    out[fold.pos, 0::2] = fold.even.hi[first:]
    out[fold.neg, 0::2] = fold.even.hi[first:]
    if fold.odd is not None:
        out[fold.pos, 1::2] = fold.odd.hi
        out[fold.neg, 1::2] = -fold.odd.hi
    return out


def test_diagonal_cells_take_the_1d_square():
    """At ρ = 1 (and one ulp below) with the same packed row and column, the cell is E φ(u)² by the
    1-D rule (against scipy's quad), its stated error covering the difference and small; a
    different column at ρ = 1 still takes the series."""
    from tensorprog.symbolic.hermite import pack, step_for
    from tensorprog.symbolic.mehler import packed_sum

    def silu(t):
        return t / (1 + np.exp(-t))

    a = np.array([0.4, 1.3, 3.0])
    A = pack(silu, 256, step_for(256, 3.0), a)
    rho = np.array([1.0, 1.0 - 2.0 ** -53, 1.0])
    value, err = packed_sum(A, A, rho, 1e-10)
    ref = np.array([quad1(lambda t: silu(t) ** 2, v) for v in a])
    assert np.all(np.abs(value - ref) <= err + 1e-15 * ref)
    assert np.all(err <= 1e-13)
    assert value[0] == A[0, 256 + 1 + 6]                    # exactly S (ρ = 1: no truncation)
    other, _ = packed_sum(A, A[::-1], np.ones(3), 1e-10)
    assert other[0] != A[0, 256 + 1 + 6]


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_packed_sum_grid_cells_have_the_bits_of_each_cell_alone(name):
    """A block's cells (rows × columns, either side the rows; ρ from 0 to ±1, so that cells sum to the
    grid's floor, gathered orders up to HORNER_TOP and power sums beyond, and a diagonal cell) have
    the values and stated errors of each cell computed alone, bit for bit: a cell's bits depend on its
    own ρ, row and column, not on the block or on the path (grid, gathered, power sums) it took."""
    from tensorprog.symbolic.hermite import pack, step_for
    from tensorprog.symbolic.mehler import HORNER_TOP, packed_sum

    def silu(t):
        return t / (1 + np.exp(-t))

    fn = np.tanh if name == "tanh" else silu
    rng = np.random.default_rng(3)
    a, b = np.sort(rng.uniform(0.3, 3.0, 7)), np.sort(rng.uniform(0.3, 3.0, 9))
    b[2] = a[4]                                                    # one input among both sides
    K = 384
    A, B = pack(fn, K, step_for(K, 3.0), a), pack(fn, K, step_for(K, 3.0), b)
    rho = np.tanh(rng.normal(0.0, 1.6, (7, 9)))
    rho[0, :4] = [0.999999, -0.99999, 0.9995, 0.0]
    rho[4, 2] = 1.0
    for rows, cols, r in ((A[:, None, :], B[None, :, :], rho), (B[None, :, :], A[:, None, :], rho)):
        value, err = packed_sum(rows, cols, r, 1e-10)
        R, C = r.shape
        for one in (lambda x: x, lambda x: x[None]):           # a cell alone: 0-d, and an array of one
            alone = [[packed_sum(one(rows[min(i, rows.shape[0] - 1), min(j, rows.shape[1] - 1)]),
                                 one(cols[min(i, cols.shape[0] - 1), min(j, cols.shape[1] - 1)]), one(r[i, j]),
                                 1e-10) for j in range(C)] for i in range(R)]
            assert np.array_equal(value, np.reshape([[v for v, _ in row] for row in alone], (R, C)))
            # the errors too (the cells between levels scaled by their own tail ratios, :func:`own_tail_cells`;
            # the error polynomial's products one per cell, :func:`error_polynomial`)
            assert np.array_equal(err, np.reshape([[e for _, e in row] for row in alone], (R, C)))
    from tensorprog.symbolic.mehler import orders, diagonal_cells
    cells = rho.reshape(-1)
    shape = (7, 9)
    same = diagonal_cells(A[:, None, :], B[None, :, :], cells, shape)
    order, _ = orders(A[:, None, :], B[None, :, :], cells, 1e-10, K, shape, same)
    assert list(same) == [4 * 9 + 2]
    assert order.min() == 16 and 16 < order[1] and order.max() > HORNER_TOP      # every path taken


def packed_pair(name: str, K: int = 64):
    """Packed rows of tanh or SiLU at 7 and 9 variances (one shared), and ρ (7, 9) from −1 to 1, 0 included."""
    from tensorprog.symbolic.hermite import pack, step_for

    def silu(t):
        return t / (1 + np.exp(-t))

    fn = np.tanh if name == "tanh" else silu
    rng = np.random.default_rng(5)
    a, b = np.sort(rng.uniform(0.2, 3.0, 7)), np.sort(rng.uniform(0.2, 3.0, 9))
    b[3] = a[2]
    A, B = pack(fn, K, step_for(K, 3.0), a), pack(fn, K, step_for(K, 3.0), b)
    rho = np.tanh(rng.normal(0.0, 1.4, (7, 9)))
    rho[0, :5] = [1.0, -1.0, 0.0, 0.9999, -0.5]
    rho[2, 3] = 1.0
    return A, B, rho


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_price_bounds_of_a_block_have_the_bits_of_each_cell_alone(name):
    """Price's slope bounds (:func:`mehler_slope`, :func:`mehler_curve` both ways) of a block — rows ×
    columns and columns × rows, into a register (``out=``) and fresh — have each cell's bits computed
    alone (0-d, and a list of pairs): the products of a row's numbers by a column's are one per cell,
    whichever path (the signed bound where the first terms can cancel, SiLU; the plain one, tanh)."""
    from tensorprog.symbolic.mehler import mehler_curve, mehler_slope

    A, B = packed_pair(name)[:2]
    rho = packed_pair(name)[2]
    for fn in (mehler_slope, mehler_curve):
        for rows, cols, r in ((A[:, None, :], B[None, :, :], rho), (B[None, :, :], A[:, None, :], rho)):
            block = fn(rows, cols, r)
            out = np.full(r.shape, np.nan)
            assert fn(rows, cols, r, out=out) is out and np.array_equal(out, block)
            R, C = r.shape
            alone = [[float(fn(rows[min(i, rows.shape[0] - 1), min(j, rows.shape[1] - 1)],
                               cols[min(i, cols.shape[0] - 1), min(j, cols.shape[1] - 1)], r[i, j]))
                      for j in range(C)] for i in range(R)]
            assert np.array_equal(block, np.array(alone))
            i, j = np.meshgrid(np.arange(R), np.arange(C), indexing="ij")
            listed = fn(rows[np.minimum(i, rows.shape[0] - 1), np.minimum(j, rows.shape[1] - 1)].reshape(R * C, -1),
                        cols[np.minimum(i, cols.shape[0] - 1), np.minimum(j, cols.shape[1] - 1)].reshape(R * C, -1),
                        r.reshape(-1))
            assert np.array_equal(listed, block.reshape(-1))
            assert np.all(block >= 0) and np.all(np.isfinite(block))


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_price_bounds_sharing_rho_parts_have_their_own_bits(name):
    """The slope and both curves of one ρ through one RhoParts (clip(ρ) and |ρ|³ formed once, as a grid
    tape's call shares them), the last written into ρ's own buffer, have the bits of each bound alone,
    signs of zeros included (ρ with NaN, ±1 beyond, 0 and −0 cells); the parts are not written."""
    from tensorprog.symbolic.mehler import RhoParts, mehler_curve, mehler_slope

    A, B, rho = packed_pair(name)[:3]
    rho = rho.copy()
    rho[0, 0], rho[1, 1], rho[0, 1], rho[1, 0] = np.nan, 1.5, 0.0, -0.0
    rows, cols = A[:, None, :], B[None, :, :]
    want = [mehler_slope(rows, cols, rho), mehler_curve(rows, cols, rho), mehler_curve(cols, rows, rho)]
    buffer = rho.copy()
    parts = RhoParts(buffer)
    got = [mehler_slope(rows, cols, buffer, out=np.empty(rho.shape), parts=parts),
           mehler_curve(rows, cols, buffer, out=np.empty(rho.shape), parts=parts)]
    kept = parts.clipped().copy(), parts.cubed().copy()
    got.append(mehler_curve(cols, rows, buffer, out=buffer, parts=parts))       # ρ's last reader, into ρ
    for g, w in zip(got, want):
        assert np.array_equal(g.view(np.uint64), w.view(np.uint64))
    assert np.array_equal(parts.clip.view(np.uint64), kept[0].view(np.uint64))
    assert np.array_equal(parts.cube.view(np.uint64), kept[1].view(np.uint64))


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_error_polynomial_is_the_stated_bound(name):
    """The coefficients' errors and the sum's rounding of the stated error (:func:`error_polynomial`, a
    polynomial in r = |ρ| of row-by-column products) against the bound written term by term in long
    double, cell by cell: δl_β(|α₀| + r|α₁| + r²|α₂| + r³(|α₃| + |α₄|)) + δ_β r³‖α_{≥5}‖₁ + (…β…) +
    3δl_αδl_β + r³(2δl_αδl_β + (K − 4)δ_αδ_β) (δl the first orders' error, k ≤ 4, δ the rest's) and
    u(1 + 1e-12)(2m₀ + 8m₁) (m₀, m₁ with the rest from
    order 2, or 3 where a side's α₂ is 0 throughout: tanh).  Equal to 1e-14 relative, in both
    orientations."""
    from tensorprog.symbolic.hermite import R_A0, R_A1, R_DL, R_L1, R_N2, R_N3, R_S2, R_W2, levels, packed_columns
    from tensorprog.symbolic.mehler import UNIT, Operand, error_polynomial

    A, B, rho = packed_pair(name)
    K = 64
    e0, r0 = packed_columns(K)[2], K + 5 + len(levels(K))
    for rows, cols, r in ((A[:, None, :], B[None, :, :], rho), (B[None, :, :], A[:, None, :], rho)):
        a, b = Operand(rows, r.shape), Operand(cols, r.shape)
        got = error_polynomial(a, b, lambda k: a.grid(r0 + k), lambda k: b.grid(r0 + k), K, e0, np.abs(r), r.shape)
        zero2 = not np.any(rows[..., 2]) or not np.any(cols[..., 2])
        ld = np.longdouble
        for i in range(r.shape[0]):
            for j in range(r.shape[1]):
                x, y = rows[min(i, rows.shape[0] - 1), min(j, rows.shape[1] - 1)].astype(ld), \
                    cols[min(i, cols.shape[0] - 1), min(j, cols.shape[1] - 1)].astype(ld)
                t = ld(abs(r[i, j]))

                def first(v):
                    return v[r0 + R_A0] + t * v[r0 + R_A1] + t * t * abs(v[2])

                def rest(v):                                    # ≥ ‖v_{≥5}‖₁
                    return max(v[r0 + R_L1] - abs(v[2]) - abs(v[3]) - abs(v[4]), 0) + ld(1e-12) * v[r0 + R_L1]

                lx, ly = x[r0 + R_DL], y[r0 + R_DL]
                assert 0 < lx <= x[e0] and 0 < ly <= y[e0]
                mid = t ** 3 * (ly * (abs(x[3]) + abs(x[4])) + lx * (abs(y[3]) + abs(y[4])) + 2 * lx * ly)
                coef = ly * first(x) + y[e0] * t ** 3 * rest(x) + lx * first(y) + x[e0] * t ** 3 * rest(y) \
                    + 3 * lx * ly + t ** 3 * (K - 4) * x[e0] * y[e0] + mid
                q, (n, m) = (3, (R_N3, R_S2)) if zero2 else (2, (R_N2, R_W2))
                t1 = t * x[r0 + R_A1] * y[r0 + R_A1]
                m0 = x[r0 + R_A0] * y[r0 + R_A0] + t1 + t ** q * x[r0 + n] * y[r0 + n]
                m1 = t1 + t ** q * x[r0 + m] * y[r0 + m]
                want = coef + ld(UNIT) * (1 + ld(1e-12)) * (2 * m0 + 8 * m1)
                assert abs(ld(got[i, j]) - want) <= 1e-14 * want, (i, j, got[i, j], want)


def shared_memo_packs(extended: bool):
    """For tanh's family (bounded: the core window as it starts) and SiLU's (growing: a window widened
    for SiLU² at a = 4.4), K = 8 and 48: each function packed through one PackCache memo at five
    variances asserted to have the bits of its pack alone (and of its HermiteArg); yields each memo."""
    from tensorprog.symbolic.hermite import PackCache, pack, step_for
    from tensorprog.symbolic.tape import HermiteArg, Tape
    a = np.array([0.05, 0.3, 0.9, 1.7, 4.4])
    sig = 1 / (1 + sp.exp(-T))
    for family in ([sp.tanh(T) ** 2, sp.tanh(T), (1 - sp.tanh(T) ** 2) ** 2, 1 - sp.tanh(T) ** 2],
                   [(T * sig) ** 2, T * sig, sig + T * sig * (1 - sig), (sig + T * sig * (1 - sig)) ** 2]):
        for K in (8, 48):
            h = step_for(K, float(a.max()))
            cache = PackCache()
            memo = cache.memo(np.unique(a), h)
            for e in family:
                arg = HermiteArg(Tape.compile([e], [T]), K, h, cache)
                assert arg.extended or not extended       # the long double rule: φ in long double
                shared = pack(arg.function, K, h, a, memo)
                assert np.array_equal(shared, pack(arg.function, K, h, a)), (e, K)
                assert np.array_equal(shared, pack(arg.function, K, h, a, memo)), (e, K)
                assert np.array_equal(shared, arg(a)), (e, K)
            yield memo


def test_pack_with_a_shared_memo_has_the_bits_of_a_pack_alone(monkeypatch):
    """The functions packed at one set of variances share their heads' long double values
    (PackCache.memo; SiLU's Silu head through Sigmoid's expit): each pack has the bits it has computed
    alone, without a memo."""
    import tensorprog.symbolic.hermite as hermite
    monkeypatch.setattr(hermite, "EXTENDED", True)            # the long double rule (what the memo serves)
    for memo in shared_memo_packs(True):
        assert any(isinstance(k, int) for k in memo) and any(isinstance(k, tuple) for k in memo)


def test_plain_pack_with_a_shared_memo_has_the_bits_of_a_pack_alone():
    """The plain float64 rule (EXTENDED off, what the kernels run) through a shared memo (its float64
    points and heads' values there, :func:`.hermite.plain_values`; the first orders' long double values):
    each pack has the bits it has computed alone, without a memo."""
    from tensorprog.symbolic.hermite import EXTENDED
    assert not EXTENDED
    for memo in shared_memo_packs(False):
        assert "plain points" in memo


def test_pack_memos_hold_at_most_the_limit():
    """A PackCache drops its least recently used memos (never the newest) once the arrays held in them
    pass its limit: the plain rule's float64 points are V × n values per set of variances."""
    from tensorprog.symbolic.hermite import PackCache, held_bytes
    from tensorprog.symbolic.tape import HermiteArg, Tape
    cache = PackCache(limit=1 << 22)                  # (a set's points: 300 × 417 float64 values, 1 MB)
    arg = HermiteArg(Tape.compile([sp.tanh(T)], [T]), 8, 0.0625, cache)
    for k in range(12):
        arg(np.linspace(0.1, 2.0, 300) + k)
        older = list(cache.memos.values())[:-1]
        assert sum(held_bytes(m) for m in older) <= cache.limit
    assert 1 < len(cache.memos) < 12 and held_bytes(list(cache.memos.values())[-1]) > 0


def test_sum_cache_meets_a_rho_with_nan_cells_again():
    """The tape's SumCache gives a block's sums once for its value and its error operations, also where
    some cells' ρ is NaN (cells whose earlier value missed its target): the same result object again,
    NaN at those cells (value and error) and elsewhere the bits of :func:`.mehler.packed_sum` of the
    block; a ρ that differs in one cell is summed again."""
    from tensorprog.symbolic.hermite import pack, step_for
    from tensorprog.symbolic.mehler import SumCache, packed_sum
    rng = np.random.default_rng(5)
    a = np.sort(rng.uniform(0.3, 3.0, 6))
    A = pack(np.tanh, 64, step_for(64, 3.0), a)
    rho = np.tanh(rng.normal(0.0, 1.0, (6, 6)))
    rho[1, 3] = rho[4, 0] = np.nan
    sums, rows, cols = SumCache(), A[:, None, :], A[None, :, :]        # (kept by identity: the tape's arrays)
    first = sums(rows, cols, rho, 1e-10)
    assert sums(rows, cols, rho.copy(), 1e-10) is first
    want = packed_sum(rows, cols, rho, 1e-10)
    nan = np.isnan(rho)
    for got, ref in zip(first, want):
        assert np.all(np.isnan(got[nan])) and np.array_equal(got[~nan], ref[~nan])
    other = rho.copy()
    other[2, 2] = 0.5
    assert sums(rows, cols, other, 1e-10) is not first


def test_same_numbers_is_array_equal_with_equal_nan():
    """mehler.same_numbers (the SumCache's test of ρ) answers as np.array_equal(equal_nan=True): by the
    bits where they agree, by value where some differ (−0 against +0, NaNs of other payloads, a
    strided or differently shaped operand), False where a number differs."""
    from tensorprog.symbolic.mehler import same_numbers
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 7))
    x[1, 2], x[3, 3], x[0, 0] = np.nan, 0.0, -0.0
    y = x.copy()
    y[3, 3], y[0, 0] = -0.0, 0.0                                    # other signs of zero
    y.view(np.uint64)[1, 2] |= np.uint64(1)                         # another NaN payload
    z = x.copy()
    z[4, 6] = np.nextafter(z[4, 6], np.inf)
    for u, v in ((x, x.copy()), (x, y), (x, z), (x, x[:, :6]), (x, np.asfortranarray(x)), (x, x.T.copy().T),
                 (x, x.astype(np.float32))):
        assert same_numbers(u, v) == np.array_equal(u, v, equal_nan=True)
    assert same_numbers(x, y) and not same_numbers(x, z)


def test_joint_shape_is_numpys_broadcast_shape():
    """mehler.joint_shape (the grid operations' shapes, in Python) gives np.broadcast_shapes' answer, or its
    ValueError, on every combination of one to three small shapes (empty, zero-length and mixed lengths
    among them)."""
    import itertools
    from tensorprog.symbolic.mehler import joint_shape
    shapes = [(), (1,), (3,), (0,), (1, 3), (2, 1), (2, 3), (4, 1, 3), (1, 0), (2, 0), (0, 1), (1, 1), (4, 2, 3)]
    for count in (1, 2, 3):
        for combo in itertools.product(shapes, repeat=count):
            try:
                want = np.broadcast_shapes(*combo)
            except ValueError:
                with pytest.raises(ValueError):
                    joint_shape(*combo)
            else:
                assert joint_shape(*combo) == want, combo


def test_long_double_basis_is_the_recurrence_at_every_node():
    """ld_rows (the recurrence at the nodes z ≥ 0, the others by parity, continued from the rows to K/2)
    has the bits of the three-term recurrence run at every node from scratch, signs of exact zeros
    included (h_2(±1) = 0 at a step 2^−j), at the ladder's steps and orders across the rows' sizes."""
    from tensorprog.symbolic.hermite import LD, ladder, ld_rows
    for h in (0.25, ladder(0.2), 0.0625, ladder(0.04), 0.03125, 0.0371):
        for K in (0, 1, 2, 9, 16, 100, 512):
            z, G = ld_rows(K, h)
            sw = np.sqrt(LD(h) * np.exp(-z * z / 2) / np.sqrt(2 * np.arccos(LD(-1))))
            want = [sw, z * sw][:K + 1]
            for k in range(1, K):
                want.append((z * want[k] - np.sqrt(LD(k)) * want[k - 1]) / np.sqrt(LD(k + 1)))
            want = np.array(want)
            assert np.array_equal(G, want) and np.array_equal(np.signbit(G), np.signbit(want)), (h, K)
