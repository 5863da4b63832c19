"""Sampling matrices and vectors from a :class:`~.dist_spec.DistSpec` with a numpy Generator.

The laws and scalings are those of :mod:`.distributions`.  Every sample is generated
in the requested dtype with at most one extra full-size temporary (see
:func:`matrix_bytes`).

**Draws of a float32 sample.**  By default a float32 sample draws float32 random
numbers (``standard_normal(dtype=float32)``...), another stream than float64: the
same seed gives other numbers.  With ``draw_dtype=np.float64`` (what the executor
passes) it draws exactly the float64 numbers, DRAW_BLOCK at a time into one float64
buffer (numpy's float64 samplers consume the bit stream entry by entry, so blocks
give the numbers of one call), rounds them to float32 and applies the law's
transformation in float32: a float32 sample is then the float64 sample of the same
seed to float32 precision, and ``--dtype float32`` is a precision switch only.
"""
from __future__ import annotations

import math

import numpy as np

from .factor import cached_factor, combine
from .spec import FAMILIES, MATRIX_ONLY, DistributionError, DistSpec, unknown_family

#: float64 entries drawn at a time (a 256 KiB buffer) when a float32 sample uses float64 draws
DRAW_BLOCK = 1 << 15


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DistributionError(f"dtype must be float32 or float64 (got {dt})")
    return dt


def _draw_dtype(draw_dtype, dt: np.dtype) -> np.dtype:
    if draw_dtype is None:
        return dt
    ddt = np.dtype(draw_dtype)
    if ddt not in (dt, np.dtype(np.float64)):
        raise DistributionError(f"draw_dtype must be float64 or the dtype {dt} (got {ddt})")
    return ddt


def _draw(rng: np.random.Generator, method: str, shape: tuple[int, ...], dt: np.dtype,
          draw_dt: np.dtype, *args) -> np.ndarray:
    """``rng.<method>(*args, size=shape, dtype=dt)``; with ``draw_dt`` float64 and ``dt``
    float32, the numbers of the float64 call rounded to float32, drawn DRAW_BLOCK at a time."""
    fill = getattr(rng, method)
    if draw_dt == dt:
        return fill(*args, size=shape, dtype=dt)
    out = np.empty(shape, dtype=dt)
    flat = out.reshape(-1)
    buf = np.empty(min(DRAW_BLOCK, flat.size), dtype=draw_dt)
    for i in range(0, flat.size, DRAW_BLOCK):
        part = buf[:min(DRAW_BLOCK, flat.size - i)]
        fill(*args, out=part)
        flat[i:i + part.size] = part
    return out


def _random_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of fair coin flips in {0, 1} (1 byte per entry, from packed random bits)."""
    count = math.prod(shape)
    packed = rng.integers(0, 256, size=(count + 7) // 8, dtype=np.uint8)
    return np.unpackbits(packed, count=count).reshape(shape)


def _sample_iid(rng: np.random.Generator, family: str, entry_var: float, df: float | None,
                shape: tuple[int, ...], dt: np.dtype, draw_dt: np.dtype) -> np.ndarray:
    """iid entries of mean 0 and variance entry_var, of the given family."""
    if family == "normal":
        out = _draw(rng, "standard_normal", shape, dt, draw_dt)
        out *= dt.type(math.sqrt(entry_var))
    elif family == "uniform":
        b = math.sqrt(3.0 * entry_var)
        out = _draw(rng, "random", shape, dt, draw_dt)  # [0, 1)
        out *= dt.type(2.0 * b)
        out -= dt.type(b)  # [-b, b)
    elif family == "rademacher":  # random bits: the same numbers in every dtype
        a = math.sqrt(entry_var)
        out = np.empty(shape, dtype=dt)
        np.multiply(_random_bits(rng, shape), dt.type(2.0 * a), out=out)  # {0, 2a}
        out -= dt.type(a)  # {-a, a}
    elif family == "laplace":
        out = _draw(rng, "standard_exponential", shape, dt, draw_dt)
        signs = _random_bits(rng, shape).view(np.int8)
        signs *= -2
        signs += 1  # {-1, 1}
        np.multiply(out, signs, out=out)
        del signs
        out *= dt.type(math.sqrt(entry_var / 2.0))
    elif family == "student_t":
        # t_df * sqrt((df-2)/df) = z * sqrt((df-2) / chi2_df), chi2_df = 2 Gamma(df/2)
        g = _draw(rng, "standard_gamma", shape, dt, draw_dt, df / 2.0)
        g *= dt.type(2.0 / (df - 2.0))
        np.sqrt(g, out=g)
        out = _draw(rng, "standard_normal", shape, dt, draw_dt)
        out /= g
        del g
        out *= dt.type(math.sqrt(entry_var))
    else:  # pragma: no cover - guarded by callers
        raise DistributionError(f"{family}: not an iid family")
    return out


def _haar_columns(rng: np.random.Generator, big: int, small: int, dt: np.dtype,
                  draw_dt: np.dtype) -> np.ndarray:
    """big x small with orthonormal columns: the first `small` columns of a Haar
    orthogonal big x big matrix (QR of a Gaussian, signs fixed by diag(R)).

    In place via LAPACK geqrf/orgqr on a Fortran-ordered buffer: one copy of the
    matrix plus O(big * 64) workspace. Returned Fortran-ordered.
    """
    g = _draw(rng, "standard_normal", (small, big), dt, draw_dt).T  # big x small, Fortran order
    from scipy.linalg import get_lapack_funcs       # scipy only when an orthogonal matrix is drawn
    geqrf, orgqr = get_lapack_funcs(("geqrf", "orgqr"), (g,))
    lwork = max(1, int(geqrf(g, lwork=-1, overwrite_a=1)[2][0]))
    qr, tau, _, info = geqrf(g, lwork=lwork, overwrite_a=1)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"geqrf failed (info={info})")
    signs = np.where(np.diagonal(qr) < 0, dt.type(-1), dt.type(1))
    lwork = max(1, int(orgqr(qr, tau, lwork=-1, overwrite_a=1)[1][0]))
    q, _, info = orgqr(qr, tau, lwork=lwork, overwrite_a=1)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"orgqr failed (info={info})")
    q *= signs[np.newaxis, :]
    return q


def _check_shape(rows: int, cols: int) -> None:
    for name, v in (("rows", rows), ("cols", cols)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise DistributionError(f"matrix {name} must be a positive integer (got {v!r})")


def sample_matrix(rng: np.random.Generator, spec: DistSpec, rows: int, cols: int,
                  dtype=np.float64, *, draw_dtype=None) -> np.ndarray:
    """A (rows, cols) matrix with entries of mean 0 and variance ``spec.var / cols``.

    ``normal`` is exactly ``rng.standard_normal((rows, cols), dtype=dtype)`` scaled
    in place. All families are generated in ``dtype`` (float32 or float64) with at
    most one extra full-size temporary (student_t: the chi-square array;
    rademacher / laplace: 1 byte per entry of random signs). ``orthogonal`` returns a
    Fortran-ordered array when rows > cols; all others are C-ordered.
    ``draw_dtype=np.float64`` makes a float32 matrix draw the numbers of the float64
    one (see the module docstring); None draws in ``dtype``.
    """
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{spec.family}: mean and cov are only allowed for vectors, not for matrices")
    _check_shape(rows, cols)
    dt = _dtype(dtype)
    draw_dt = _draw_dtype(draw_dtype, dt)
    shape = (int(rows), int(cols))
    entry_var = spec.var / cols
    if spec.family == "orthogonal":
        if rows <= cols:  # wide: orthonormal rows, entries of variance 1/cols
            out = _haar_columns(rng, cols, rows, dt, draw_dt).T
            out *= dt.type(math.sqrt(spec.var))
        else:  # tall: orthonormal columns, entries of variance 1/rows
            out = _haar_columns(rng, rows, cols, dt, draw_dt)
            out *= dt.type(math.sqrt(spec.var * rows / cols))
        return out
    if spec.family == "mvt":
        df = spec.df
        chi2 = 2.0 * rng.standard_gamma(df / 2.0, size=rows)
        factor = np.sqrt((df - 2.0) / chi2 * entry_var).astype(dt)
        out = _draw(rng, "standard_normal", shape, dt, draw_dt)
        out *= factor[:, np.newaxis]
        return out
    return _sample_iid(rng, spec.family, entry_var, spec.df, shape, dt, draw_dt)


def sample_vectors(rng: np.random.Generator, spec: DistSpec, k: int, n: int,
                   dtype=np.float64, *, draw_dtype=None) -> np.ndarray:
    """k vectors of n coordinates, shape (k, n).

    With ``cov``: each coordinate draws its k-tuple iid from N(mean, cov), through
    the pivoted-Cholesky factor of :func:`~.dist_factor.psd_factor` (singular cov
    allowed; exact copies / negations / zero-variance coordinates come out exact).
    Without: k independent vectors with iid coordinates of variance ``var``; then
    ``mean`` (one value per vector) is added if given.  ``draw_dtype`` as for
    :func:`sample_matrix`.
    """
    if spec.family in MATRIX_ONLY:
        raise DistributionError(f"{spec.family}: only for matrices, not for vectors")
    for name, v in (("k", k), ("n", n)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise DistributionError(f"{spec.family}: number of {'vectors' if name == 'k' else 'coordinates'} "
                                    f"must be a positive integer (got {v!r})")
    if spec.n_vectors is not None and spec.n_vectors != k:
        which = "cov" if spec.cov is not None else "mean"
        raise DistributionError(f"{spec.family}: {which} is for {spec.n_vectors} vectors, asked for {k}")
    dt = _dtype(dtype)
    draw_dt = _draw_dtype(draw_dtype, dt)
    if spec.cov is not None:
        lf = cached_factor(spec.cov)
        z = _draw(rng, "standard_normal", (lf.shape[1], int(n)), dt, draw_dt)
        out = combine(lf.astype(dt), z)
    else:
        out = _sample_iid(rng, spec.family, spec.var, spec.df, (int(k), int(n)), dt, draw_dt)
    if spec.mean is not None:
        out += np.asarray(spec.mean, dtype=dt)[:, np.newaxis]
    return out


def matrix_bytes(rows: int, cols: int, dtype=np.float64, spec: DistSpec | str | None = None, *,
                 draw_dtype=None) -> int:
    """Peak bytes :func:`sample_matrix` allocates for one (rows, cols) sample, result included.

    ``spec`` (a DistSpec or a family name) selects the family; without it the
    worst case over all families is returned (student_t: two full arrays).
    ``draw_dtype`` as for :func:`sample_matrix` (float64 draws add one block buffer).
    """
    itemsize = np.dtype(dtype).itemsize
    n = int(rows) * int(cols)
    full = n * itemsize
    family = spec.family if isinstance(spec, DistSpec) else spec
    if family is None:
        return max(matrix_bytes(rows, cols, dtype, f, draw_dtype=draw_dtype) for f in FAMILIES)
    if family not in FAMILIES:
        raise DistributionError(unknown_family(family))
    slack = 1 << 18  # array headers, per-row vectors, ufunc casting buffers
    if draw_dtype is not None and np.dtype(draw_dtype) != np.dtype(dtype):
        slack += min(DRAW_BLOCK, n) * np.dtype(draw_dtype).itemsize
    if family in ("normal", "uniform"):
        return full + slack
    if family in ("rademacher", "laplace"):
        return full + n + n // 8 + slack  # result + one byte per sign + packed bits
    if family == "student_t":
        return 2 * full + slack  # result + chi-square array
    if family == "mvt":
        return full + 16 * int(rows) * 8 + slack  # result + a few per-row vectors
    # orthogonal: in-place LAPACK QR on one buffer + tau + signs + workspace (~ block size * big)
    big, small = max(int(rows), int(cols)), min(int(rows), int(cols))
    return full + (2 * small + 64 * (big + small)) * itemsize + slack
