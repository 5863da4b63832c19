"""Random distributions of initial vectors and matrices.

This module turns the distribution call of a declaration (``normal(var=2)``,
``student_t(6)``, ``normal(cov=M)``...) into a validated :class:`DistSpec`, and
samples matrices and vectors from it with a :class:`numpy.random.Generator`.

Scaling conventions (LANGUAGE.md, "Distributions"):

* a **matrix** of shape ``(rows, cols)`` maps ``cols``-vectors to ``rows``-vectors;
  its entries have mean 0 and variance ``var / cols`` (fan-in = ``cols``);
* a **vector** has coordinates of variance ``var`` (or the joint covariance
  ``cov`` of a group of ``k`` vectors), plus ``mean`` if given.

Families (all rescaled to the requested variance):

============== ===============================================================
``normal``      Gaussian
``uniform``     uniform on [-sqrt(3 v), sqrt(3 v))
``rademacher``  +-sqrt(v) with probability 1/2 each
``student_t``   Student-t with ``df > 2``, times sqrt((df-2)/df)
``laplace``     Laplace with scale sqrt(v/2)
``orthogonal``  (matrices only) Haar orthogonal matrix times sqrt(var) (square);
                rectangular: the first ``rows`` rows / ``cols`` columns of a Haar
                orthogonal N x N matrix, N = max(rows, cols), scaled so every
                entry has variance ``var / cols``:
                  * wide (rows <= cols): ``M = sqrt(var) Q[:rows, :]``, so
                    ``M M^T = var I_rows``;
                  * tall (rows > cols): ``M = sqrt(var rows / cols) Q[:, :cols]``,
                    so ``M^T M = var (rows / cols) I_cols``.
``mvt``         (matrices only) rows iid multivariate Student-t with ``df > 2``:
                ``row = z * sqrt((df-2) / chi2_df) * sqrt(var / cols)`` with one
                chi-square per row; rotation invariant, entries uncorrelated but
                not independent.
============== ===============================================================

Call syntax accepted by :func:`make_spec` (decisions not fixed by LANGUAGE.md):

* ``student_t`` and ``mvt`` take positionals ``(df, var)``: ``student_t(6)`` is
  ``df=6``, ``student_t(6, 2)`` is ``df=6, var=2``; ``df`` is required.
* every other family takes at most one positional, ``var``: ``normal(2)`` is
  ``normal(var=2)`` (a *variance*, not a mean or a standard deviation).
* ``mean`` and ``cov`` are for vectors drawn from ``normal`` only. ``mean`` may be
  a number (the same mean for every vector of the group) or a sequence of length
  ``k`` = number of vectors declared together. ``cov`` must be ``k x k``,
  symmetric and positive semidefinite (singular allowed); it excludes ``var``.
* a group of ``k > 1`` vectors without ``cov`` draws ``k`` independent vectors,
  each with variance ``var``.
* ``--matrix-dist`` (:func:`with_family`) uses ``df = DEFAULT_DF = 6`` for
  ``student_t`` / ``mvt`` unless a df is passed; it never inherits the df of the
  replaced family, so every matrix gets the same law up to its variance.

Every problem raises :class:`DistributionError` whose message names the family
and the parameter, e.g. ``student_t: df must be > 2 (got 2)``; it carries no
source position (the caller adds ``FILE:LINE:COL``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy.linalg import get_lapack_funcs

__all__ = [
    "DistributionError",
    "FAMILIES",
    "MATRIX_ONLY",
    "VECTOR_FAMILIES",
    "HEAVY_TAILED",
    "DEFAULT_DF",
    "DistSpec",
    "make_spec",
    "with_family",
    "psd_factor",
    "sample_matrix",
    "sample_vectors",
    "matrix_bytes",
]


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
            raise DistributionError(_unknown_family(self.family))
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

def _fmt(x: object) -> str:
    if isinstance(x, float) and x.is_integer() and math.isfinite(x):
        return str(int(x))
    return repr(x) if not isinstance(x, float) else f"{x:g}"


def _unknown_family(family: object) -> str:
    return f"unknown distribution {family!r} (known: {', '.join(sorted(FAMILIES))})"


def _array(family: str, name: str, value: object) -> np.ndarray:
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
    arr = _array(family, name, value)
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


def _check_cov(cov: np.ndarray, family: str = "normal") -> np.ndarray:
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
        raise DistributionError(_unknown_family(family))
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
        c = _check_cov(_array(family, "cov", params["cov"]), family)
        c = 0.5 * (c + c.T)  # exactly symmetric (keeps exact equalities of entries)
        if c.shape != (n_vectors, n_vectors):
            raise DistributionError(
                f"{family}: cov must be {n_vectors}x{n_vectors} for {n_vectors} "
                f"vector{'s' if n_vectors > 1 else ''} (got {c.shape[0]}x{c.shape[1]})")
        cov = tuple(tuple(float(v) for v in row) for row in c)
    if "mean" in params:
        m = _array(family, "mean", params["mean"])
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
        raise DistributionError(_unknown_family(family))
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{family}: cannot replace the family of a vector distribution with mean/cov")
    if family in HEAVY_TAILED:
        d = DEFAULT_DF if df is None else _check_df(family, _scalar(family, "df", df))
    elif df is not None:
        raise DistributionError(f"{family}: df is only for student_t and mvt")
    else:
        d = None
    return DistSpec(family, var=spec.var, df=d)


# ----------------------------------------------------------------------------- PSD factor

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
def _factor_cached(cov: tuple[tuple[float, ...], ...]) -> np.ndarray:
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
    c = _check_cov(_array("normal", "cov", cov))
    c = 0.5 * (c + c.T)
    lf = _pivoted_cholesky(c)
    out = np.zeros_like(c)
    out[:, :lf.shape[1]] = lf
    return out


# ----------------------------------------------------------------------------- sampling

def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DistributionError(f"dtype must be float32 or float64 (got {dt})")
    return dt


def _random_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of fair coin flips in {0, 1} (1 byte per entry, from packed random bits)."""
    count = math.prod(shape)
    packed = rng.integers(0, 256, size=(count + 7) // 8, dtype=np.uint8)
    return np.unpackbits(packed, count=count).reshape(shape)


def _sample_iid(rng: np.random.Generator, family: str, entry_var: float, df: float | None,
                shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """iid entries of mean 0 and variance entry_var, of the given family."""
    if family == "normal":
        out = rng.standard_normal(shape, dtype=dt)
        out *= dt.type(math.sqrt(entry_var))
    elif family == "uniform":
        b = math.sqrt(3.0 * entry_var)
        out = rng.random(shape, dtype=dt)  # [0, 1)
        out *= dt.type(2.0 * b)
        out -= dt.type(b)  # [-b, b)
    elif family == "rademacher":
        a = math.sqrt(entry_var)
        out = np.empty(shape, dtype=dt)
        np.multiply(_random_bits(rng, shape), dt.type(2.0 * a), out=out)  # {0, 2a}
        out -= dt.type(a)  # {-a, a}
    elif family == "laplace":
        out = rng.standard_exponential(shape, dtype=dt)
        signs = _random_bits(rng, shape).view(np.int8)
        signs *= -2
        signs += 1  # {-1, 1}
        np.multiply(out, signs, out=out)
        del signs
        out *= dt.type(math.sqrt(entry_var / 2.0))
    elif family == "student_t":
        # t_df * sqrt((df-2)/df) = z * sqrt((df-2) / chi2_df), chi2_df = 2 Gamma(df/2)
        g = rng.standard_gamma(df / 2.0, size=shape, dtype=dt)
        g *= dt.type(2.0 / (df - 2.0))
        np.sqrt(g, out=g)
        out = rng.standard_normal(shape, dtype=dt)
        out /= g
        del g
        out *= dt.type(math.sqrt(entry_var))
    else:  # pragma: no cover - guarded by callers
        raise DistributionError(f"{family}: not an iid family")
    return out


def _haar_columns(rng: np.random.Generator, big: int, small: int, dt: np.dtype) -> np.ndarray:
    """big x small with orthonormal columns: the first `small` columns of a Haar
    orthogonal big x big matrix (QR of a Gaussian, signs fixed by diag(R)).

    In place via LAPACK geqrf/orgqr on a Fortran-ordered buffer: one copy of the
    matrix plus O(big * 64) workspace. Returned Fortran-ordered.
    """
    g = rng.standard_normal((small, big), dtype=dt).T  # big x small, Fortran order
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
                  dtype=np.float64) -> np.ndarray:
    """A (rows, cols) matrix with entries of mean 0 and variance ``spec.var / cols``.

    ``normal`` is exactly ``rng.standard_normal((rows, cols), dtype=dtype)`` scaled
    in place. All families are generated in ``dtype`` (float32 or float64) with at
    most one extra full-size temporary (student_t: the chi-square array;
    rademacher / laplace: 1 byte per entry of random signs). ``orthogonal`` returns a
    Fortran-ordered array when rows > cols; all others are C-ordered.
    """
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{spec.family}: mean and cov are only allowed for vectors, not for matrices")
    _check_shape(rows, cols)
    dt = _dtype(dtype)
    shape = (int(rows), int(cols))
    entry_var = spec.var / cols
    if spec.family == "orthogonal":
        if rows <= cols:  # wide: orthonormal rows, entries of variance 1/cols
            out = _haar_columns(rng, cols, rows, dt).T
            out *= dt.type(math.sqrt(spec.var))
        else:  # tall: orthonormal columns, entries of variance 1/rows
            out = _haar_columns(rng, rows, cols, dt)
            out *= dt.type(math.sqrt(spec.var * rows / cols))
        return out
    if spec.family == "mvt":
        df = spec.df
        chi2 = 2.0 * rng.standard_gamma(df / 2.0, size=rows)
        factor = np.sqrt((df - 2.0) / chi2 * entry_var).astype(dt)
        out = rng.standard_normal(shape, dtype=dt)
        out *= factor[:, np.newaxis]
        return out
    return _sample_iid(rng, spec.family, entry_var, spec.df, shape, dt)


def _combine(lf: np.ndarray, z: np.ndarray) -> np.ndarray:
    """lf @ z, computing each distinct row of lf once (up to sign), so rows of lf
    that are equal / opposite / zero give bit-identical / exactly negated / zero rows."""
    k = lf.shape[0]
    keys: dict[bytes, tuple[int, float]] = {}
    canon: list[int] = []
    plan: list[tuple[int, float]] = []  # (index into canon or -1 for zero, sign)
    for i in range(k):
        row = lf[i] + 0.0  # -0.0 -> 0.0
        if not np.any(row):
            plan.append((-1, 0.0))
            continue
        key = row.tobytes()
        if key in keys:
            plan.append(keys[key])
            continue
        nkey = (-row + 0.0).tobytes()
        if nkey in keys:
            j, s = keys[nkey]
            plan.append((j, -s))
            continue
        keys[key] = (len(canon), 1.0)
        plan.append((len(canon), 1.0))
        canon.append(i)
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


def sample_vectors(rng: np.random.Generator, spec: DistSpec, k: int, n: int,
                   dtype=np.float64) -> np.ndarray:
    """k vectors of n coordinates, shape (k, n).

    With ``cov``: each coordinate draws its k-tuple iid from N(mean, cov), through
    the pivoted-Cholesky factor of :func:`psd_factor` (singular cov allowed; exact
    copies / negations / zero-variance coordinates come out exact). Without:
    k independent vectors with iid coordinates of variance ``var``; then ``mean``
    (one value per vector) is added if given.
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
    if spec.cov is not None:
        lf = _factor_cached(spec.cov)
        z = rng.standard_normal((lf.shape[1], int(n)), dtype=dt)
        out = _combine(lf.astype(dt), z)
    else:
        out = _sample_iid(rng, spec.family, spec.var, spec.df, (int(k), int(n)), dt)
    if spec.mean is not None:
        out += np.asarray(spec.mean, dtype=dt)[:, np.newaxis]
    return out


def matrix_bytes(rows: int, cols: int, dtype=np.float64, spec: DistSpec | str | None = None) -> int:
    """Peak bytes :func:`sample_matrix` allocates for one (rows, cols) sample, result included.

    ``spec`` (a DistSpec or a family name) selects the family; without it the
    worst case over all families is returned (student_t: two full arrays).
    """
    itemsize = np.dtype(dtype).itemsize
    n = int(rows) * int(cols)
    full = n * itemsize
    family = spec.family if isinstance(spec, DistSpec) else spec
    if family is None:
        return max(matrix_bytes(rows, cols, dtype, f) for f in FAMILIES)
    if family not in FAMILIES:
        raise DistributionError(_unknown_family(family))
    slack = 1 << 18  # array headers, per-row vectors, ufunc casting buffers
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
