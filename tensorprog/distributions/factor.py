"""The factor of a (possibly singular) covariance, and the product that keeps exact structure.

Joint Gaussian vectors ``x_1..x_k ~ N(0, cov)`` are ``L z`` with ``L Lᵀ = cov``.
:func:`psd_factor` computes ``L`` by Cholesky with diagonal pivoting, so that
coordinates that are exact copies, negations or zeros of one another get identical,
negated or zero rows; :func:`combine` then computes ``L z`` one distinct row at a
time, so the sampled vectors keep those equalities exactly (``x = y``, ``x = −y``).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from .checks import COV_TOL, check_cov, numeric_array


def _pivoted_cholesky(cov: np.ndarray) -> np.ndarray:
    """L (k x r) with L L^T = cov up to COV_TOL: Cholesky with diagonal pivoting.

    Coordinates whose residual variance is <= COV_TOL times their variance are
    treated as exact linear combinations of the earlier pivots. Every column is
    computed by the same elementwise operations for every row, so equal rows of
    ``cov`` give bit-identical rows of L and opposite rows give exactly negated
    rows (x = y and x = -y come out exact when sampling).
    """
    k = cov.shape[0]
    diag = np.diag(cov).copy()
    resid = diag.copy()
    cols: list[np.ndarray] = []
    while True:
        open_ = resid > COV_TOL * diag
        if not np.any(open_):
            break
        piv = int(np.argmax(np.where(open_, resid, -np.inf)))
        s = cov[:, piv].copy()
        for col in cols:
            s -= col * col[piv]  # elementwise, same for every row: exact duplicates stay exact
        d = s[piv]
        if not d > 0:  # only reachable through rounding on (near-)singular input
            resid[piv] = 0.0
            continue
        col = s / math.sqrt(d)  # the pivot row too (not sqrt(d)): its copies must match it
        cols.append(col)
        resid = resid - col * col
        resid[piv] = 0.0
    if not cols:
        return np.zeros((k, 0))
    return np.stack(cols, axis=1)


@functools.lru_cache(maxsize=256)
def cached_factor(cov: tuple[tuple[float, ...], ...]) -> np.ndarray:
    """The pivoted-Cholesky factor (k x rank, read-only) of a spec's ``cov`` tuple."""
    lf = _pivoted_cholesky(np.array(cov, dtype=np.float64))
    lf.setflags(write=False)
    return lf


def psd_factor(cov: np.ndarray) -> np.ndarray:
    """A (k x k) with ``A @ A.T == cov`` (to ~1e-10 relative) for symmetric PSD ``cov``.

    Singular ``cov`` is allowed; the columns beyond the numerical rank are zero.
    Uses Cholesky with diagonal pivoting (not eigh) so that coordinates that are
    exact copies (or negatives, or zero) of one another get identical (negated,
    zero) rows of A, which makes the sampled vectors exactly equal.
    Raises :class:`DistributionError` if ``cov`` is not a finite symmetric PSD matrix.
    """
    c = check_cov(numeric_array("normal", "cov", cov))
    c = 0.5 * (c + c.T)
    lf = _pivoted_cholesky(c)
    out = np.zeros_like(c)
    out[:, :lf.shape[1]] = lf
    return out


def row_plan(lf: np.ndarray) -> tuple[list[int], list[tuple[int, float]]]:
    """The distinct rows of ``lf`` up to sign: (their indices, and for every row the index of its
    distinct row, −1 for a zero row, with its sign)."""
    keys: dict[bytes, tuple[int, float]] = {}
    canon: list[int] = []
    plan: list[tuple[int, float]] = []
    for i in range(lf.shape[0]):
        row = lf[i] + 0.0                                  # -0.0 -> 0.0
        if not np.any(row):
            plan.append((-1, 0.0))
        elif row.tobytes() in keys:
            plan.append(keys[row.tobytes()])
        elif (-row + 0.0).tobytes() in keys:
            j, sign = keys[(-row + 0.0).tobytes()]
            plan.append((j, -sign))
        else:
            keys[row.tobytes()] = (len(canon), 1.0)
            plan.append((len(canon), 1.0))
            canon.append(i)
    return canon, plan


def combine(lf: np.ndarray, z: np.ndarray) -> np.ndarray:
    """lf @ z, computing each distinct row of lf once (up to sign, :func:`row_plan`), so rows of lf
    that are equal / opposite / zero give bit-identical / exactly negated / zero rows."""
    k = lf.shape[0]
    canon, plan = row_plan(lf)
    out = np.empty((k, z.shape[1]), dtype=z.dtype)
    base = lf[canon] @ z if canon else None
    for i, (j, s) in enumerate(plan):
        if j < 0:
            out[i] = 0.0
        elif s > 0:
            out[i] = base[j]
        else:
            np.negative(base[j], out=out[i])
    return out

