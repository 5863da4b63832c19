"""Distribution specs: the validated :class:`DistSpec` of a declaration's distribution call.

:func:`make_spec` checks a call (``normal(var=2)``, ``student_t(6)``,
``normal(cov=M, mean=[1, 2])``...) against the rules of :mod:`.distributions`
and returns a hashable spec; :func:`with_family` swaps the family of a matrix spec
(``--matrix-dist``).  Every problem is a :class:`DistributionError` naming the
family and the parameter; the caller adds ``FILE:LINE:COL``.  Sampling lives in
:mod:`.dist_sample`, the covariance factor in :mod:`.dist_factor`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np


class DistributionError(ValueError):
    """An invalid distribution call; the message names the offending parameter."""


FAMILIES: frozenset[str] = frozenset(
    {"normal", "uniform", "rademacher", "student_t", "laplace", "orthogonal", "mvt"})
MATRIX_ONLY: frozenset[str] = frozenset({"orthogonal", "mvt"})
VECTOR_FAMILIES: frozenset[str] = FAMILIES - MATRIX_ONLY
#: families with a ``df`` parameter (only moments of order < df exist)
HEAVY_TAILED: frozenset[str] = frozenset({"student_t", "mvt"})
#: df used by :func:`with_family` when ``student_t`` / ``mvt`` is asked for without one
DEFAULT_DF: float = 6.0

#: relative tolerance of the symmetry / positive-semidefiniteness checks of ``cov``
#: and of the rank decision in :func:`psd_factor`
COV_TOL: float = 1e-10

_KEYWORDS = {name: ("df", "var") if name in HEAVY_TAILED else ("var",) for name in FAMILIES}
_KEYWORDS["normal"] = ("var", "mean", "cov")
_POSITIONAL = {name: ("df", "var") if name in HEAVY_TAILED else ("var",) for name in FAMILIES}


@dataclass(frozen=True)
class DistSpec:
    """A validated distribution: the family and its parameters (hashable).

    ``var`` is the variance of a vector coordinate, or ``fan_in`` times the
    variance of a matrix entry. ``mean`` (length k) and ``cov`` (k x k) only
    occur in vector specs of family ``normal``; with ``cov`` set, ``var`` is unused.
    """

    family: str
    var: float = 1.0
    df: float | None = None
    mean: tuple[float, ...] | None = None
    cov: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:  # cheap sanity checks; make_spec does the full job
        if self.family not in FAMILIES:
            raise DistributionError(unknown_family(self.family))
        if not (math.isfinite(self.var) and self.var > 0):
            raise DistributionError(f"{self.family}: var must be a finite number > 0 (got {self.var!r})")
        if self.family in HEAVY_TAILED:
            if self.df is None:
                raise DistributionError(f"{self.family}: df is required")
            if not (math.isfinite(self.df) and self.df > 2):
                raise DistributionError(f"{self.family}: df must be > 2 (got {_fmt(self.df)})")
        elif self.df is not None:
            raise DistributionError(f"{self.family}: df is only for student_t and mvt")
        if (self.mean is not None or self.cov is not None) and self.family != "normal":
            raise DistributionError(f"{self.family}: mean and cov are only for normal vectors")

    @property
    def n_vectors(self) -> int | None:
        """k fixed by ``cov`` or ``mean``, else None (any number of iid vectors)."""
        if self.cov is not None:
            return len(self.cov)
        if self.mean is not None:
            return len(self.mean)
        return None


# ----------------------------------------------------------------------------- validation
# (numeric_array, check_cov and unknown_family are shared with dist_factor / dist_sample)

def _fmt(x: object) -> str:
    if isinstance(x, float) and x.is_integer() and math.isfinite(x):
        return str(int(x))
    return repr(x) if not isinstance(x, float) else f"{x:g}"


def unknown_family(family: object) -> str:
    return f"unknown distribution {family!r} (known: {', '.join(sorted(FAMILIES))})"


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


def _scalar(family: str, name: str, value: object) -> float:
    arr = numeric_array(family, name, value)
    if arr.ndim != 0:
        raise DistributionError(f"{family}: {name} must be a number (got an array of shape {arr.shape})")
    return float(arr)


def _check_var(family: str, var: float) -> float:
    if not math.isfinite(var) or var <= 0:
        raise DistributionError(f"{family}: var must be a finite number > 0 (got {_fmt(var)})")
    return var


def _check_df(family: str, df: float) -> float:
    if math.isnan(df) or df <= 2:
        raise DistributionError(f"{family}: df must be > 2 (got {_fmt(df)})")
    if not math.isfinite(df):
        raise DistributionError(f"{family}: df must be finite (got {_fmt(df)}); use normal for df = inf")
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


def make_spec(family: str, args: Sequence[object], kwargs: Mapping[str, object], *,
              for_matrix: bool, n_vectors: int = 1) -> DistSpec:
    """Validate a distribution call and return its :class:`DistSpec`.

    ``args`` / ``kwargs`` are evaluated constants (numbers; nested lists or numpy
    arrays for ``cov`` and ``mean``). ``for_matrix`` says whether the call
    initialises a matrix; ``n_vectors`` is the number k of vectors declared
    together (``vector x, y ~ ...`` or an array ``x[1..k]``), ignored for matrices.
    """
    if not isinstance(family, str) or family not in FAMILIES:
        raise DistributionError(unknown_family(family))
    what = "matrices" if for_matrix else "vectors"
    if not for_matrix and family in MATRIX_ONLY:
        raise DistributionError(f"{family}: only for matrices, not for vectors")
    if not for_matrix and (not isinstance(n_vectors, int) or n_vectors < 1):
        raise DistributionError(f"{family}: the number of vectors must be >= 1 (got {n_vectors!r})")

    positional = _POSITIONAL[family]
    if len(args) > len(positional):
        names = " and ".join(positional)
        raise DistributionError(
            f"{family}: takes at most {len(positional)} positional argument"
            f"{'s' if len(positional) > 1 else ''} ({names}), got {len(args)}")
    params: dict[str, object] = dict(zip(positional, args))
    for key, value in kwargs.items():
        if key not in _KEYWORDS[family]:
            if key in ("mean", "cov"):
                raise DistributionError(f"{family}: {key} is only allowed with normal (for vectors)")
            if key == "df":
                raise DistributionError(f"{family}: df is only for student_t and mvt")
            allowed = ", ".join(_KEYWORDS[family])
            raise DistributionError(f"{family}: unknown keyword {key!r} (allowed: {allowed})")
        if key in params:
            raise DistributionError(f"{family}: {key} given twice (positionally and as a keyword)")
        params[key] = value

    if for_matrix:
        for key in ("mean", "cov"):
            if key in params:
                raise DistributionError(f"{family}: {key} is only allowed for vectors, not for {what}")

    var = _check_var(family, _scalar(family, "var", params["var"])) if "var" in params else 1.0
    df = None
    if family in HEAVY_TAILED:
        if "df" not in params:
            raise DistributionError(f"{family}: df is required, e.g. {family}(6) or {family}(df=6)")
        df = _check_df(family, _scalar(family, "df", params["df"]))

    mean = cov = None
    if "cov" in params:
        if "var" in params:
            raise DistributionError(f"{family}: give either cov or var, not both")
        c = check_cov(numeric_array(family, "cov", params["cov"]), family)
        c = 0.5 * (c + c.T)  # exactly symmetric (keeps exact equalities of entries)
        if c.shape != (n_vectors, n_vectors):
            raise DistributionError(
                f"{family}: cov must be {n_vectors}x{n_vectors} for {n_vectors} "
                f"vector{'s' if n_vectors > 1 else ''} (got {c.shape[0]}x{c.shape[1]})")
        cov = tuple(tuple(float(v) for v in row) for row in c)
    if "mean" in params:
        m = numeric_array(family, "mean", params["mean"])
        if m.ndim == 0:
            m = np.full(n_vectors, float(m))
        if m.ndim != 1 or m.shape[0] != n_vectors:
            raise DistributionError(
                f"{family}: mean must be a number or have length {n_vectors} for {n_vectors} "
                f"vector{'s' if n_vectors > 1 else ''} (got shape {m.shape})")
        if not np.all(np.isfinite(m)):
            raise DistributionError(f"{family}: mean must have finite entries")
        mean = tuple(float(v) for v in m)
    return DistSpec(family, var=var, df=df, mean=mean, cov=cov)


def with_family(spec: DistSpec, family: str, df: float | None = None) -> DistSpec:
    """The matrix spec ``spec`` with its family replaced (``--matrix-dist``), keeping ``var``.

    ``student_t`` / ``mvt`` get ``df`` if given (also as ``"student_t:8"``), else
    :data:`DEFAULT_DF` (6); ``df`` for any other family is an error.
    """
    if isinstance(family, str) and ":" in family and df is None:
        family, _, text = family.partition(":")
        try:
            df = float(text)
        except ValueError:
            raise DistributionError(f"{family}: df must be a number, not {text!r} (e.g. student_t:8)") from None
    if not isinstance(family, str) or family not in FAMILIES:
        raise DistributionError(unknown_family(family))
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{family}: cannot replace the family of a vector distribution with mean/cov")
    if family in HEAVY_TAILED:
        d = DEFAULT_DF if df is None else _check_df(family, _scalar(family, "df", df))
    elif df is not None:
        raise DistributionError(f"{family}: df is only for student_t and mvt")
    else:
        d = None
    return DistSpec(family, var=spec.var, df=d)

