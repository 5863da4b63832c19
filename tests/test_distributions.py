"""Tests of tensorprog.distributions: laws, scaling, joint vectors, validation, reproducibility.

Every statistical check uses a fixed seed and a tolerance of 5 standard errors,
the standard error being estimated from the sample itself (e.g. the SE of a
variance estimate from the sample 4th moment), so a wrong scale, family or
dependence structure fails while a correct implementation passes deterministically.
"""
from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest
from scipy import stats

from tensorprog.distributions import (DEFAULT_DF, FAMILIES, MATRIX_ONLY, DistributionError, DistSpec, make_spec, matrix_bytes, psd_factor, sample_matrix, sample_vectors, with_family)

Z = 5.0  # tolerance in standard errors


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def mspec(family: str, *args, **kwargs) -> DistSpec:
    return make_spec(family, args, kwargs, for_matrix=True)


def vspec(family: str, *args, k: int = 1, **kwargs) -> DistSpec:
    return make_spec(family, args, kwargs, for_matrix=False, n_vectors=k)


# ----------------------------------------------------------------------------- helpers

def assert_mean_var(x: np.ndarray, var: float) -> None:
    """iid samples x: mean 0 and variance var, each within Z standard errors."""
    x = np.asarray(x, dtype=np.float64).ravel()
    n = x.size
    m = x.mean()
    assert abs(m) <= Z * math.sqrt(x.var() / n), (m, var)
    x2 = x * x
    v = x2.mean()
    se = math.sqrt(max(np.mean(x2 * x2) - v * v, 0.0) / n)  # 0 for rademacher
    assert abs(v - var) <= Z * se + 1e-6 * var, (v, var, se)  # + float32 rounding


def kurtosis_and_se(x: np.ndarray) -> tuple[float, float]:
    """m4 / m2^2 of mean-0 samples and its delta-method standard error."""
    x = np.asarray(x, dtype=np.float64).ravel()
    x2 = x * x
    m2, m4 = x2.mean(), (x2 * x2).mean()
    k = m4 / m2**2
    influence = x2 * x2 / m2**2 - 2 * k * x2 / m2
    return k, influence.std() / math.sqrt(x.size)


def assert_cdf(x: np.ndarray, dist, points) -> None:
    """Empirical CDF of iid x at `points` equals dist.cdf within Z binomial SEs."""
    x = np.asarray(x, dtype=np.float64).ravel()
    n = x.size
    for t in points:
        p = float(dist.cdf(t))
        phat = np.count_nonzero(x <= t) / n
        assert abs(phat - p) <= Z * math.sqrt(p * (1 - p) / n) + 1e-12, (t, phat, p)


def law(family: str, var: float, df: float | None = None):
    """The scipy law of one entry with variance var."""
    sd = math.sqrt(var)
    if family == "normal":
        return stats.norm(scale=sd)
    if family == "uniform":
        b = math.sqrt(3 * var)
        return stats.uniform(loc=-b, scale=2 * b)
    if family == "laplace":
        return stats.laplace(scale=math.sqrt(var / 2))
    if family == "student_t":
        return stats.t(df, scale=sd * math.sqrt((df - 2) / df))
    raise AssertionError(family)


IID_CASES = [
    ("normal", ()),
    ("uniform", ()),
    ("rademacher", ()),
    ("laplace", ()),
    ("student_t", (9,)),
    ("student_t", (3,)),
]


# ----------------------------------------------------------------------------- iid matrix families

@pytest.mark.parametrize("family,args", IID_CASES)
def test_matrix_entries_have_variance_var_over_fan_in(family, args):
    rows, cols, var = 400, 1000, 2.5  # non-square: var/cols differs from var/rows
    a = sample_matrix(rng(1), mspec(family, *args, var=var), rows, cols)
    assert a.shape == (rows, cols) and a.dtype == np.float64
    ev = var / cols
    if family == "student_t" and args[0] <= 4:  # infinite 4th moment: test the law only
        assert abs(a.mean()) <= Z * math.sqrt(ev / a.size)
    else:
        assert_mean_var(a, ev)
    if family == "rademacher":
        s = math.sqrt(ev)
        assert set(np.unique(a).tolist()) == {-s, s}
        frac = np.count_nonzero(a > 0) / a.size
        assert abs(frac - 0.5) <= Z * math.sqrt(0.25 / a.size)
    else:
        d = law(family, ev, *args)
        assert_cdf(a, d, d.ppf([0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999]))


@pytest.mark.parametrize("family,args,kurt", [
    ("normal", (), 3.0),
    ("uniform", (), 1.8),
    ("laplace", (), 6.0),
    ("student_t", (12,), 3 + 6 / (12 - 4)),
])
def test_kurtosis_distinguishes_families(family, args, kurt):
    a = sample_matrix(rng(2), mspec(family, *args, var=0.7), 500, 800)
    k, se = kurtosis_and_se(a)
    assert abs(k - kurt) <= Z * se, (k, kurt, se)


def test_rademacher_exact_values_and_uniform_bounded():
    var, cols = 3.0, 700
    r = sample_matrix(rng(3), mspec("rademacher", var=var), 300, cols)
    assert np.all(np.abs(r) == math.sqrt(var / cols))
    k, _ = kurtosis_and_se(r)
    assert k == pytest.approx(1.0)
    u = sample_matrix(rng(3), mspec("uniform", var=var), 300, cols)
    b = math.sqrt(3 * var / cols)
    assert np.all(np.abs(u) <= b)
    assert u.max() > b * (1 - 1e-3) and u.min() < -b * (1 - 1e-3)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_and_shape(family, dtype):
    spec = mspec(family, 6) if family in ("student_t", "mvt") else mspec(family)
    for rows, cols in [(50, 50), (30, 70), (70, 30), (1, 5), (5, 1)]:
        a = sample_matrix(rng(4), spec, rows, cols, dtype=dtype)
        assert a.shape == (rows, cols) and a.dtype == np.dtype(dtype)
        assert np.all(np.isfinite(a))


@pytest.mark.parametrize("family,args", [c for c in IID_CASES if c[1] != (3,)] + [("mvt", (9,))])
def test_float32_variance(family, args):
    a = sample_matrix(rng(5), mspec(family, *args, var=2.0), 300, 600, dtype=np.float32)
    assert a.dtype == np.float32
    if family == "mvt":  # rows are the iid units
        r = (a.astype(np.float64) ** 2).mean(axis=1)
        assert abs(r.mean() - 2.0 / 600) <= Z * r.std() / math.sqrt(r.size)
    else:
        assert_mean_var(a, 2.0 / 600)


def test_normal_is_the_plain_standard_normal_draw():
    """The speed contract: normal = standard_normal in the dtype, times the scale."""
    for dtype in (np.float64, np.float32):
        a = sample_matrix(rng(6), mspec("normal", var=2.0), 40, 90, dtype=dtype)
        b = rng(6).standard_normal((40, 90), dtype=dtype)
        b *= np.dtype(dtype).type(math.sqrt(2.0 / 90))
        assert np.array_equal(a, b)


# ----------------------------------------------------------------------------- orthogonal

def test_orthogonal_square_is_scaled_orthogonal():
    var, n = 2.0, 64
    q = sample_matrix(rng(7), mspec("orthogonal", var=var), n, n)
    assert np.allclose(q @ q.T, var * np.eye(n), atol=1e-12)
    assert np.allclose(q.T @ q, var * np.eye(n), atol=1e-12)
    q32 = sample_matrix(rng(7), mspec("orthogonal", var=var), n, n, dtype=np.float32)
    assert q32.dtype == np.float32
    assert np.allclose(q32.astype(np.float64) @ q32.T, var * np.eye(n), atol=1e-5)


def test_orthogonal_rectangular():
    var = 1.5
    wide = sample_matrix(rng(8), mspec("orthogonal", var=var), 30, 80)
    assert wide.shape == (30, 80)
    assert np.allclose(wide @ wide.T, var * np.eye(30), atol=1e-12)
    assert np.mean(wide**2) == pytest.approx(var / 80, rel=1e-12)
    tall = sample_matrix(rng(8), mspec("orthogonal", var=var), 80, 30)
    assert tall.shape == (80, 30)
    assert np.allclose(tall.T @ tall, var * 80 / 30 * np.eye(30), atol=1e-12)
    assert np.mean(tall**2) == pytest.approx(var / 30, rel=1e-12)


def test_orthogonal_is_haar():
    """Haar on O(n): E Q = 0, tr Q ≈ N(0, 1) (E tr = 0, E tr² = 1 for n >= 2).
    A QR without the sign fix of diag(R) gives Q[0,0] < 0 always and fails this."""
    n, m = 8, 2000
    spec = mspec("orthogonal")
    g = rng(9)
    qs = np.stack([sample_matrix(g, spec, n, n) for _ in range(m)])
    tr = np.trace(qs, axis1=1, axis2=2)
    assert abs(tr.mean()) <= Z * math.sqrt(1 / m)
    assert abs((tr**2).mean() - 1) <= Z * (tr**2).std() / math.sqrt(m)
    q00 = qs[:, 0, 0]
    assert abs(q00.mean()) <= Z * math.sqrt(1 / n / m)
    assert abs((q00**2).mean() - 1 / n) <= Z * (q00**2).std() / math.sqrt(m)
    tall = np.stack([sample_matrix(g, spec, 6, 3) for _ in range(m)])
    assert abs(tall[:, 0, 0].mean()) <= Z * math.sqrt(1 / 3 / m)  # entries variance 1/cols


# ----------------------------------------------------------------------------- mvt

def _exceed(a: np.ndarray, u: np.ndarray, ev: float, c: float) -> tuple[np.ndarray, float]:
    p2 = (a @ u) ** 2 / ev
    return p2, np.count_nonzero(p2 > c) / p2.size


def test_mvt_rotation_invariant_rows_and_iid_t_is_not():
    df, rows, cols, var = 5, 40000, 32, 2.0
    ev = var / cols
    e1 = np.zeros(cols)
    e1[0] = 1.0
    dense = rng(10).standard_normal(cols)
    dense /= np.linalg.norm(dense)
    # P(proj²/ev > c) = 1% for a row of mvt in any direction: proj/√ev = √((df-2)/df) T
    c = (df - 2) / df * stats.t.ppf(0.995, df) ** 2
    se_frac = math.sqrt(0.01 * 0.99 / rows)

    a = sample_matrix(rng(11), mspec("mvt", df, var=var), rows, cols)
    p_axis, f_axis = _exceed(a, e1, ev, c)
    p_dense, f_dense = _exceed(a, dense, ev, c)
    for p2, f in ((p_axis, f_axis), (p_dense, f_dense)):
        assert abs(p2.mean() - 1) <= Z * p2.std() / math.sqrt(rows)
        assert abs(f - 0.01) <= Z * se_frac
    assert abs(f_axis - f_dense) <= Z * math.sqrt(2) * se_frac

    # the same test rejects iid Student-t entries: a dense projection is nearly Gaussian
    t = sample_matrix(rng(11), mspec("student_t", df, var=var), rows, cols)
    _, g_axis = _exceed(t, e1, ev, c)
    _, g_dense = _exceed(t, dense, ev, c)
    assert abs(g_axis - 0.01) <= Z * se_frac
    assert g_axis - g_dense > Z * math.sqrt(2) * se_frac


def _squared_entry_covariance(a: np.ndarray, ev: float) -> tuple[float, float]:
    """Per row: mean over disjoint pairs (2j, 2j+1) of (x² - ev)(y² - ev)/ev²; rows are iid."""
    x2 = a.astype(np.float64) ** 2 - ev
    per_row = (x2[:, 0::2] * x2[:, 1::2]).mean(axis=1) / ev**2
    return per_row.mean(), per_row.std() / math.sqrt(per_row.size)


def test_mvt_entries_in_a_row_are_dependent():
    df, rows, cols = 10, 20000, 32
    ev = 1.0 / cols
    a = sample_matrix(rng(12), mspec("mvt", df), rows, cols)
    r = (a**2).mean(axis=1)  # row mean of squares: iid over rows
    assert abs(r.mean() - ev) <= Z * r.std() / math.sqrt(rows)
    cov, se = _squared_entry_covariance(a, ev)
    assert cov > Z * se  # significantly positive
    # Cov(x², y²)/ev² = Var((df-2)/chi2_df) = (df-2)/(df-4) - 1
    assert abs(cov - ((df - 2) / (df - 4) - 1)) <= Z * se
    # corr(x, y) itself is 0 (uncorrelated entries)
    xy = (a[:, 0::2] * a[:, 1::2]).mean(axis=1) / ev
    assert abs(xy.mean()) <= Z * xy.std() / math.sqrt(rows)

    t = sample_matrix(rng(12), mspec("student_t", df), rows, cols)
    cov_t, se_t = _squared_entry_covariance(t, ev)
    assert abs(cov_t) <= Z * se_t


# ----------------------------------------------------------------------------- vectors

@pytest.mark.parametrize("family,args", [c for c in IID_CASES if c[1] != (3,)])
def test_vector_families_have_variance_var(family, args):
    var, k, n = 0.8, 3, 100000
    v = sample_vectors(rng(13), vspec(family, *args, var=var, k=k), k, n)
    assert v.shape == (k, n) and v.dtype == np.float64
    assert_mean_var(v, var)
    # independent vectors: E[x y] = 0
    prod = v[0] * v[1]
    assert abs(prod.mean()) <= Z * prod.std() / math.sqrt(n)
    if family != "rademacher":
        d = law(family, var, *args)
        assert_cdf(v, d, d.ppf([0.01, 0.1, 0.5, 0.9, 0.99]))
    else:
        assert np.all(np.abs(v) == math.sqrt(var))


def test_vector_mean_without_cov():
    v = sample_vectors(rng(14), vspec("normal", k=2, mean=[1.0, -3.0], var=2.0), 2, 50000)
    assert_mean_var(v[0] - 1.0, 2.0)
    assert_mean_var(v[1] + 3.0, 2.0)
    s = sample_vectors(rng(14), vspec("normal", mean=0.5), 1, 50000)  # scalar mean
    assert_mean_var(s - 0.5, 1.0)


def _assert_joint(v: np.ndarray, mean, cov) -> None:
    mean, cov = np.asarray(mean, float), np.asarray(cov, float)
    k, n = v.shape
    c = v - mean[:, None]
    for i in range(k):
        if cov[i, i] > 0:
            assert abs(c[i].mean()) <= Z * math.sqrt(cov[i, i] / n)
        for j in range(k):
            p = c[i] * c[j]
            assert abs(p.mean() - cov[i, j]) <= Z * p.std() / math.sqrt(n) + 1e-12, (i, j)


def test_joint_vectors_covariance_and_mean():
    cov = [[1.0, 0.5, -0.3], [0.5, 2.0, 0.4], [-0.3, 0.4, 1.5]]
    mean = [0.5, -1.0, 2.0]
    spec = vspec("normal", k=3, cov=cov, mean=mean)
    v = sample_vectors(rng(15), spec, 3, 200000)
    assert v.shape == (3, 200000)
    _assert_joint(v, mean, cov)
    v32 = sample_vectors(rng(15), spec, 3, 200000, dtype=np.float32)
    assert v32.dtype == np.float32
    _assert_joint(v32.astype(np.float64), mean, cov)


def test_single_vector_with_cov():
    v = sample_vectors(rng(16), vspec("normal", cov=[[2.5]]), 1, 100000)
    assert_mean_var(v, 2.5)


def test_singular_cov_exact_relations():
    n = 20000
    same = sample_vectors(rng(17), vspec("normal", k=2, cov=[[1, 1], [1, 1]]), 2, n)
    assert np.array_equal(same[0], same[1])
    assert_mean_var(same[0], 1.0)
    same2 = sample_vectors(rng(17), vspec("normal", k=2, cov=[[2, 2], [2, 2]], mean=[0.3, 0.3]), 2, n,
                           dtype=np.float32)
    assert np.array_equal(same2[0], same2[1])
    opp = sample_vectors(rng(17), vspec("normal", k=2, cov=[[1, -1], [-1, 1]]), 2, n)
    assert np.array_equal(opp[0], -opp[1])
    opp2 = sample_vectors(rng(17), vspec("normal", k=2, cov=[[3, -3], [-3, 3]], mean=[1, -1]), 2, n)
    assert np.array_equal(opp2[0], -opp2[1])
    zero = sample_vectors(rng(17), vspec("normal", k=2, cov=[[1, 0], [0, 0]]), 2, n)
    assert np.all(zero[1] == 0)
    assert_mean_var(zero[0], 1.0)
    allzero = sample_vectors(rng(17), vspec("normal", k=2, cov=[[0, 0], [0, 0]], mean=[1, 2]), 2, 10)
    assert np.array_equal(allzero, np.array([[1.0] * 10, [2.0] * 10]))


def test_singular_cov_rank_deficient_gram_matrix():
    """A batch with repeated and opposite inputs (NNGP-style Gram matrix): the
    repeated vectors come out bit-identical, and z = x + y holds to rounding."""
    x = np.array([[1.0, 0.2, 0.0], [0.3, 1.0, 0.5], [1.0, 0.2, 0.0], [-0.3, -1.0, -0.5], [1.3, 1.2, 0.5]])
    cov = x @ x.T / 3
    v = sample_vectors(rng(18), vspec("normal", k=5, cov=cov), 5, 100000)
    assert np.array_equal(v[0], v[2])
    assert np.array_equal(v[1], -v[3])
    assert np.allclose(v[4], v[0] + v[1], atol=1e-12)
    _assert_joint(v, np.zeros(5), cov)


def test_psd_factor():
    g = rng(19)
    for k, r in [(1, 1), (4, 4), (6, 3), (8, 1), (5, 0)]:
        b = g.standard_normal((k, r))
        cov = b @ b.T
        a = psd_factor(cov)
        assert a.shape == (k, k)
        scale = max(1.0, np.abs(cov).max())
        assert np.allclose(a @ a.T, cov, atol=1e-10 * scale, rtol=0)
    a = psd_factor(np.array([[1.0, 1.0], [1.0, 1.0]]))
    assert np.array_equal(a[0], a[1])
    a = psd_factor(np.diag([4.0, 1e-12]))  # tiny but legitimate variances are kept
    assert np.allclose(a @ a.T, np.diag([4.0, 1e-12]), rtol=1e-9, atol=0)
    with pytest.raises(DistributionError, match="symmetric"):
        psd_factor(np.array([[1.0, 0.5], [0.0, 1.0]]))
    with pytest.raises(DistributionError, match="positive semidefinite"):
        psd_factor(np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(DistributionError, match="square"):
        psd_factor(np.ones((2, 3)))
    with pytest.raises(DistributionError, match="finite"):
        psd_factor(np.array([[np.nan]]))


# ----------------------------------------------------------------------------- specs and validation

def test_make_spec_positional_and_defaults():
    assert make_spec("normal", [], {}, for_matrix=True) == DistSpec("normal", 1.0)
    assert make_spec("normal", [2], {}, for_matrix=True) == DistSpec("normal", 2.0)
    assert make_spec("student_t", [6], {}, for_matrix=True) == DistSpec("student_t", 1.0, df=6.0)
    assert make_spec("student_t", [6, 3], {}, for_matrix=False) == DistSpec("student_t", 3.0, df=6.0)
    assert make_spec("mvt", [], {"df": 4.5, "var": 2}, for_matrix=True) == DistSpec("mvt", 2.0, df=4.5)
    s = make_spec("normal", [], {"cov": np.array([[1, 0.5], [0.5, 1]]), "mean": [0, 1]},
                  for_matrix=False, n_vectors=2)
    assert s.cov == ((1.0, 0.5), (0.5, 1.0)) and s.mean == (0.0, 1.0)
    assert hash(s) == hash(make_spec("normal", [], {"cov": [[1, 0.5], [0.5, 1]], "mean": [0, 1]},
                                     for_matrix=False, n_vectors=2))
    s = make_spec("normal", [], {"mean": 2}, for_matrix=False, n_vectors=3)
    assert s.mean == (2.0, 2.0, 2.0)
    assert make_spec("uniform", [], {"var": np.float32(0.5)}, for_matrix=True).var == 0.5


BAD_CALLS = [
    # (family, args, kwargs, for_matrix, n_vectors, message regex)
    ("gaussian", [], {}, True, 1, r"unknown distribution 'gaussian'"),
    ("normal", [], {"sigma": 1}, True, 1, r"normal: unknown keyword 'sigma'"),
    ("student_t", [6], {"scale": 1}, False, 1, r"student_t: unknown keyword 'scale'"),
    ("normal", [], {"var": 0}, True, 1, r"normal: var must be .*> 0 \(got 0\)"),
    ("uniform", [], {"var": -1}, False, 1, r"uniform: var must be .*> 0"),
    ("laplace", [], {"var": float("nan")}, True, 1, r"laplace: var must be"),
    ("normal", [], {"var": float("inf")}, True, 1, r"normal: var must be a finite"),
    ("student_t", [2], {}, True, 1, r"student_t: df must be > 2 \(got 2\)"),
    ("student_t", [], {"df": 1.5}, False, 1, r"student_t: df must be > 2"),
    ("mvt", [0], {}, True, 1, r"mvt: df must be > 2"),
    ("student_t", [float("inf")], {}, True, 1, r"student_t: df must be finite"),
    ("student_t", [], {}, True, 1, r"student_t: df is required"),
    ("mvt", [], {"var": 2}, True, 1, r"mvt: df is required"),
    ("normal", [], {"df": 5}, True, 1, r"normal: df is only for student_t and mvt"),
    ("normal", [], {"cov": [[1, 0, 0], [0, 1, 0]]}, False, 2, r"normal: cov must be a square"),
    ("normal", [], {"cov": [1, 2]}, False, 2, r"normal: cov must be a square"),
    ("normal", [], {"cov": [[1, 0], [0, 1]]}, False, 3, r"normal: cov must be 3x3 for 3 vectors \(got 2x2\)"),
    ("normal", [], {"cov": [[1, 0.5], [0.4, 1]]}, False, 2, r"normal: cov must be symmetric"),
    ("normal", [], {"cov": [[1, 2], [2, 1]]}, False, 2, r"normal: cov must be positive semidefinite"),
    ("normal", [], {"cov": [[-1]]}, False, 1, r"normal: cov must be positive semidefinite"),
    ("normal", [], {"cov": [[1, 0], [0]]}, False, 2, r"normal: cov must be a rectangular array"),
    ("normal", [], {"cov": [[1, float("nan")], [float("nan"), 1]]}, False, 2, r"normal: cov must have finite"),
    ("normal", [], {"mean": [0, 1, 2]}, False, 2, r"normal: mean must be .*length 2"),
    ("normal", [], {"mean": [[0, 1]]}, False, 2, r"normal: mean must be .*length 2"),
    ("normal", [], {"cov": [[1, 0], [0, 1]], "mean": [1]}, False, 2, r"normal: mean must be"),
    ("normal", [], {"cov": [[1]]}, True, 1, r"normal: cov is only allowed for vectors"),
    ("normal", [], {"mean": 0.0}, True, 1, r"normal: mean is only allowed for vectors"),
    ("uniform", [], {"mean": 1.0}, False, 1, r"uniform: mean is only allowed with normal"),
    ("laplace", [], {"cov": [[1]]}, False, 1, r"laplace: cov is only allowed with normal"),
    ("orthogonal", [], {}, False, 1, r"orthogonal: only for matrices"),
    ("mvt", [6], {}, False, 1, r"mvt: only for matrices"),
    ("normal", [], {"cov": [[1]], "var": 2}, False, 1, r"normal: give either cov or var"),
    ("normal", [1, 2], {}, True, 1, r"normal: takes at most 1 positional argument \(var\)"),
    ("student_t", [6, 1, 2], {}, True, 1, r"student_t: takes at most 2 positional arguments \(df and var\)"),
    ("normal", [2], {"var": 2}, True, 1, r"normal: var given twice"),
    ("student_t", [6], {"df": 6}, True, 1, r"student_t: df given twice"),
    ("normal", [], {"var": True}, True, 1, r"normal: var must be numeric"),
    ("normal", [], {"var": "2"}, True, 1, r"normal: var must be numeric"),
    ("normal", [], {"var": [1, 2]}, True, 1, r"normal: var must be a number"),
    ("student_t", [[6]], {}, True, 1, r"student_t: df must be a number"),
    ("normal", [], {}, False, 0, r"normal: the number of vectors must be >= 1"),
]


@pytest.mark.parametrize("family,args,kwargs,for_matrix,k,message", BAD_CALLS)
def test_validation_errors(family, args, kwargs, for_matrix, k, message):
    with pytest.raises(DistributionError, match=message) as info:
        make_spec(family, args, kwargs, for_matrix=for_matrix, n_vectors=k)
    assert isinstance(info.value, ValueError)
    assert ":" in str(info.value) and "line" not in str(info.value).lower()


def test_valid_edge_cases():
    make_spec("normal", [], {"cov": [[1, 1], [1, 1]]}, for_matrix=False, n_vectors=2)  # singular
    make_spec("normal", [], {"cov": [[0]]}, for_matrix=False, n_vectors=1)  # zero variance
    make_spec("normal", [], {"cov": [[1, 1 + 1e-14], [1, 1]]}, for_matrix=False, n_vectors=2)  # within tol
    make_spec("student_t", [2.0001], {}, for_matrix=True)
    make_spec("normal", [], {"var": 2}, for_matrix=False, n_vectors=4)  # iid group
    make_spec("normal", [], {}, for_matrix=True, n_vectors=7)  # n_vectors ignored for matrices


def test_distspec_guards():
    with pytest.raises(DistributionError, match="unknown distribution"):
        DistSpec("cauchy")
    with pytest.raises(DistributionError, match="df is required"):
        DistSpec("student_t")
    with pytest.raises(DistributionError, match="var must be"):
        DistSpec("normal", var=-1.0)
    with pytest.raises(DistributionError, match="mean and cov are only for normal"):
        DistSpec("uniform", mean=(1.0,))


def test_with_family():
    base = mspec("normal", var=2.0)
    assert with_family(base, "uniform") == DistSpec("uniform", 2.0)
    assert with_family(base, "student_t") == DistSpec("student_t", 2.0, df=DEFAULT_DF)
    assert DEFAULT_DF == 6.0
    assert with_family(base, "mvt", df=4) == DistSpec("mvt", 2.0, df=4.0)
    assert with_family(mspec("student_t", 3, var=5), "normal") == DistSpec("normal", 5.0)
    assert with_family(mspec("student_t", 3), "student_t") == DistSpec("student_t", 1.0, df=6.0)
    with pytest.raises(DistributionError, match=r"student_t: df must be > 2 \(got 2\)"):
        with_family(base, "student_t", df=2)
    with pytest.raises(DistributionError, match="normal: df is only for student_t and mvt"):
        with_family(base, "normal", df=5)
    with pytest.raises(DistributionError, match="unknown distribution 'cauchy'"):
        with_family(base, "cauchy")
    with pytest.raises(DistributionError, match="mean/cov"):
        with_family(vspec("normal", cov=[[1]]), "uniform")


def test_sampling_guards():
    with pytest.raises(DistributionError, match="only allowed for vectors"):
        sample_matrix(rng(), vspec("normal", mean=1.0), 3, 3)
    with pytest.raises(DistributionError, match="dtype"):
        sample_matrix(rng(), mspec("normal"), 3, 3, dtype=np.int64)
    with pytest.raises(DistributionError, match="cols"):
        sample_matrix(rng(), mspec("normal"), 3, 0)
    with pytest.raises(DistributionError, match="only for matrices"):
        sample_vectors(rng(), mspec("orthogonal"), 1, 3)
    with pytest.raises(DistributionError, match="cov is for 2 vectors"):
        sample_vectors(rng(), vspec("normal", k=2, cov=np.eye(2)), 3, 5)


# ----------------------------------------------------------------------------- reproducibility, memory

ALL_SPECS = [mspec("normal", var=2), mspec("uniform"), mspec("rademacher"), mspec("laplace"),
             mspec("student_t", 5), mspec("orthogonal", var=3), mspec("mvt", 7)]


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.family)
def test_reproducible(spec):
    for dtype in (np.float64, np.float32):
        for shape in [(40, 60), (60, 40)]:
            a = sample_matrix(rng(20), spec, *shape, dtype=dtype)
            b = sample_matrix(rng(20), spec, *shape, dtype=dtype)
            assert a.tobytes() == b.tobytes()
            c = sample_matrix(rng(21), spec, *shape, dtype=dtype)
            assert not np.array_equal(a, c)


def test_vectors_reproducible():
    specs = [vspec("normal", k=3, cov=[[1, 0.2, 1], [0.2, 1, 0.2], [1, 0.2, 1]], mean=[1, 2, 3]),
             vspec("laplace", var=2, k=3), vspec("student_t", 4, k=3)]
    for spec in specs:
        for dtype in (np.float64, np.float32):
            a = sample_vectors(rng(22), spec, 3, 500, dtype=dtype)
            b = sample_vectors(rng(22), spec, 3, 500, dtype=dtype)
            assert a.tobytes() == b.tobytes()
            assert not np.array_equal(a, sample_vectors(rng(23), spec, 3, 500, dtype=dtype))


@pytest.mark.parametrize("spec", ALL_SPECS, ids=lambda s: s.family)
def test_matrix_bytes_bounds_peak_allocation(spec):
    for dtype in (np.float64, np.float32):
        for rows, cols in [(400, 400), (200, 500), (500, 200)]:
            sample_matrix(rng(), spec, rows, cols, dtype=dtype)  # warm LAPACK / caches
            tracemalloc.start()
            try:
                tracemalloc.reset_peak()
                a = sample_matrix(rng(), spec, rows, cols, dtype=dtype)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            need = matrix_bytes(rows, cols, dtype, spec)
            assert a.nbytes <= peak <= need, (spec.family, rows, cols, peak, need)
            assert need <= matrix_bytes(rows, cols, dtype)  # no spec: the worst case
            assert need == matrix_bytes(rows, cols, dtype, spec.family)
    assert matrix_bytes(16384, 16384, np.float64, "normal") <= 2 * 2**30 + 2**20


# ----------------------------------------------------------------------------- family objects

def test_one_object_per_family_holds_the_tables():
    from tensorprog.distributions import BLOCKABLE, HEAVY_TAILED, LAWS, VECTOR_FAMILIES, Family, family_of
    assert set(FAMILIES) == {"normal", "uniform", "rademacher", "student_t", "laplace", "orthogonal", "mvt"}
    assert all(isinstance(f, Family) and f.name == name for name, f in FAMILIES.items())
    assert MATRIX_ONLY == {"orthogonal", "mvt"} and VECTOR_FAMILIES == set(FAMILIES) - MATRIX_ONLY
    assert HEAVY_TAILED == {"student_t", "mvt"} and BLOCKABLE == set(FAMILIES) - {"orthogonal"}
    assert list(LAWS) == ["uniform", "rademacher", "laplace", "student_t", "mvt_scale", "normal"]
    assert all(LAWS[name] is FAMILIES[name] for name in VECTOR_FAMILIES)      # an iid family is its entry law
    assert LAWS["mvt_scale"] is FAMILIES["mvt"].row_scale
    assert mspec("student_t", 5).law is FAMILIES["student_t"] is family_of("student_t")
    with pytest.raises(DistributionError, match="unknown distribution 'cauchy'"):
        family_of("cauchy")


def test_family_limit_law_and_hypothesis_facts():
    from tensorprog.expect.laws import Law
    f = FAMILIES
    assert [n for n in f if f[n].gaussian] == ["normal"]
    assert [n for n in f if f[n].row_scale is not None] == ["mvt"]
    assert sorted(n for n in f if f[n].non_gaussian_iid) == ["laplace", "rademacher", "student_t", "uniform"]
    assert [n for n in f if f[n].haar] == ["orthogonal"]
    assert f["student_t"].moment_order(5.0) == 5.0 and f["laplace"].moment_order(None) == math.inf
    assert f["mvt"].moments_warning(6.0) == ("mvt(df=6) has finite moments only of order < 6; "
                                             "the Master Theorem assumes all moments")
    assert f["laplace"].exp_moment_threshold(0.5) == 2.0 and f["student_t"].exp_moment_threshold(3.0) == 0.0
    assert f["uniform"].exp_moment_threshold(1.0) is None
    assert Law("laplace", 2).scalar is f["laplace"] and Law("mvt_scale", 1, 6).scalar is f["mvt"].row_scale


def test_orthogonal_cannot_be_blocked():
    from tensorprog.distributions import BLOCKABLE
    assert not FAMILIES["orthogonal"].blockable and "orthogonal" not in BLOCKABLE
    with pytest.raises(ValueError, match="orthogonal matrices cannot be generated block by block"):
        FAMILIES["orthogonal"].sample_row(rng(), np.empty(3), 1.0, None)
