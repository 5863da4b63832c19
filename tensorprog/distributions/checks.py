"""The error of a distribution call and the checks shared by every family.

Every problem is a :class:`DistributionError` whose message names the family and
the parameter, e.g. ``student_t: df must be > 2 (got 2)``; it carries no source
position (the caller adds ``FILE:LINE:COL``).
"""
from __future__ import annotations

import math

import numpy as np


class DistributionError(ValueError):
    """An invalid distribution call; the message names the offending parameter."""


#: relative tolerance of the symmetry / positive-semidefiniteness checks of ``cov``
#: and of the rank decision in :func:`~.factor.psd_factor`
COV_TOL: float = 1e-10
#: df used by :func:`~.spec.with_family` when ``student_t`` / ``mvt`` is asked for without one
DEFAULT_DF: float = 6.0


def fmt(x: object) -> str:
    """A number as it appears in messages: ``2`` for 2.0, ``2.5`` for 2.5, repr otherwise."""
    if isinstance(x, float) and x.is_integer() and math.isfinite(x):
        return str(int(x))
    return repr(x) if not isinstance(x, float) else f"{x:g}"


def numeric_array(family: str, name: str, value: object) -> np.ndarray:
    """A numeric float64 array from a number / nested list / numpy array, or an error."""
    if isinstance(value, (str, bytes)):
        raise DistributionError(f"{family}: {name} must be numeric (got a string)")
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError):
        raise DistributionError(f"{family}: {name} must be a rectangular array of numbers") from None
    if arr.dtype.kind == "b":
        raise DistributionError(f"{family}: {name} must be numeric (got a boolean)")
    if arr.dtype.kind not in "iuf":
        raise DistributionError(f"{family}: {name} must be a rectangular array of numbers")
    return arr.astype(np.float64)


def scalar(family: str, name: str, value: object) -> float:
    """The float of a numeric 0-d value, or an error naming ``family`` and ``name``."""
    arr = numeric_array(family, name, value)
    if arr.ndim != 0:
        raise DistributionError(f"{family}: {name} must be a number (got an array of shape {arr.shape})")
    return float(arr)


def check_var(family: str, var: float) -> float:
    """var, which must be finite and > 0."""
    if not math.isfinite(var) or var <= 0:
        raise DistributionError(f"{family}: var must be a finite number > 0 (got {fmt(var)})")
    return var


def check_df(family: str, df: float) -> float:
    """df, which must be finite and > 2 (the variance of a Student-t law is finite iff df > 2)."""
    if math.isnan(df) or df <= 2:
        raise DistributionError(f"{family}: df must be > 2 (got {fmt(df)})")
    if not math.isfinite(df):
        raise DistributionError(f"{family}: df must be finite (got {fmt(df)}); use normal for df = inf")
    return df


def check_cov(cov: np.ndarray, family: str = "normal") -> np.ndarray:
    """Shape, finiteness, symmetry and PSD checks; returns the float64 matrix."""
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1]:
        raise DistributionError(f"{family}: cov must be a square matrix (got shape {cov.shape})")
    if cov.shape[0] == 0:
        raise DistributionError(f"{family}: cov must not be empty")
    if not np.all(np.isfinite(cov)):
        raise DistributionError(f"{family}: cov must have finite entries")
    scale = float(np.max(np.abs(cov)))
    if scale == 0.0:
        return cov
    asym = float(np.max(np.abs(cov - cov.T)))
    if asym > COV_TOL * scale:
        i, j = np.unravel_index(np.argmax(np.abs(cov - cov.T)), cov.shape)
        raise DistributionError(
            f"{family}: cov must be symmetric (cov[{i}][{j}] = {cov[i, j]:g} but cov[{j}][{i}] = {cov[j, i]:g})")
    if np.any(np.diag(cov) < 0):
        i = int(np.argmin(np.diag(cov)))
        raise DistributionError(
            f"{family}: cov must be positive semidefinite (cov[{i}][{i}] = {cov[i, i]:g} < 0)")
    eig_min = float(np.linalg.eigvalsh(0.5 * (cov + cov.T))[0])
    if eig_min < -COV_TOL * scale * cov.shape[0]:
        raise DistributionError(
            f"{family}: cov must be positive semidefinite (smallest eigenvalue {eig_min:.6g})")
    return cov
