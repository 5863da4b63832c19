"""Sampling matrices and vectors from a :class:`~.spec.DistSpec` with a numpy Generator.

The laws, scalings and the draws of each family are those of its object in
:mod:`.families`; this module checks the request and hands the family a :class:`Draws`.
Every sample is generated in the requested dtype with at most one extra full-size
temporary (see :func:`matrix_bytes`).

**Draws of a float32 sample.**  By default a float32 sample draws float32 random
numbers (``standard_normal(dtype=float32)``...), another stream than float64: the
same seed gives other numbers.  With ``draw_dtype=np.float64`` (what the executor
passes) it draws exactly the float64 numbers, DRAW_BLOCK at a time into one float64
buffer (numpy's float64 samplers consume the bit stream entry by entry, so blocks
give the numbers of one call), rounds them to float32 and applies the law's
transformation in float32: a float32 sample is then the float64 sample of the same
seed to float32 precision, and ``--dtype float32`` is a precision switch only.

**Array backends** (torch, jax, cupy: :mod:`tensorprog.finite.backend`).  :func:`draw_matrix`
and :func:`draw_vectors` sample the same laws from a :class:`Stream` (the backend's random
numbers and its array-API namespace ``xp``), through the families' ``draw_*`` methods: the
same transformations, written with ``xp`` and the operators, on the stream's device.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from .checks import DistributionError
from .families import FAMILIES, family_of
from .spec import DistSpec

#: float64 entries drawn at a time (a 256 KiB buffer) when a float32 sample uses float64 draws
DRAW_BLOCK = 1 << 15


class Draws:
    """The random numbers of one sample: ``rng`` drawn in ``dt``, or (``draw_dt`` float64 and
    ``dt`` float32) the float64 numbers rounded to float32."""

    def __init__(self, rng: np.random.Generator, dt: np.dtype, draw_dt: np.dtype) -> None:
        self.rng, self.dt, self.draw_dt = rng, dt, draw_dt

    def fill(self, method: str, shape: tuple[int, ...], *args) -> np.ndarray:
        """``rng.<method>(*args, size=shape, dtype=dt)``; with float64 draws for a float32
        sample, the numbers of the float64 call rounded to float32, drawn DRAW_BLOCK at a time."""
        fill, dt = getattr(self.rng, method), self.dt
        if self.draw_dt == dt:
            return fill(*args, size=shape, dtype=dt)
        out = np.empty(shape, dtype=dt)
        flat = out.reshape(-1)
        buf = np.empty(min(DRAW_BLOCK, flat.size), dtype=self.draw_dt)
        for i in range(0, flat.size, DRAW_BLOCK):
            part = buf[:min(DRAW_BLOCK, flat.size - i)]
            fill(*args, out=part)
            flat[i:i + part.size] = part
        return out


class Stream(Protocol):
    """The random numbers of one variable on an array backend, in its dtype
    (:class:`tensorprog.finite.backend.Stream` implements it)."""
    xp: object
    dtype: object

    def asarray(self, a) -> object: ...
    def normal(self, shape: tuple[int, ...]) -> object: ...
    def uniform(self, shape: tuple[int, ...]) -> object: ...
    def exponential(self, shape: tuple[int, ...]) -> object: ...
    def gamma(self, alpha: float, shape: tuple[int, ...]) -> object: ...
    def signs(self, shape: tuple[int, ...]) -> object: ...


def draw_matrix(stream: Stream, spec: DistSpec, rows: int, cols: int):
    """:func:`sample_matrix` on an array backend: a (rows, cols) backend array with entries
    of mean 0 and variance ``spec.var / cols``, from ``stream``."""
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{spec.family}: mean and cov are only allowed for vectors, not for matrices")
    _check_shape(rows, cols)
    law = spec.law
    if law.iid_entries:
        return law.draw_entries(stream, spec.var / cols, spec.df, (int(rows), int(cols)))
    return law.draw_matrix(stream, spec.var, spec.df, int(rows), int(cols))


def draw_vectors(stream: Stream, spec: DistSpec, k: int, n: int):
    """:func:`sample_vectors` on an array backend: shape (k, n), from ``stream``."""
    law = spec.law
    if not law.vectors:
        raise DistributionError(f"{spec.family}: only for matrices, not for vectors")
    if spec.cov is not None:
        out = law.draw_joint(stream, spec.cov, n)
    else:
        out = law.draw_entries(stream, spec.var, spec.df, (int(k), int(n)))
    if spec.mean is not None:
        out = out + stream.xp.reshape(stream.asarray(np.asarray(spec.mean)), (int(k), 1))
    return out


def _dtype(dtype) -> np.dtype:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise DistributionError(f"dtype must be float32 or float64 (got {dt})")
    return dt


def _draws(rng: np.random.Generator, dtype, draw_dtype) -> Draws:
    """The Draws of a sample in ``dtype`` (float32/64) with ``draw_dtype`` None, float64 or dtype."""
    dt = _dtype(dtype)
    if draw_dtype is None:
        return Draws(rng, dt, dt)
    ddt = np.dtype(draw_dtype)
    if ddt not in (dt, np.dtype(np.float64)):
        raise DistributionError(f"draw_dtype must be float64 or the dtype {dt} (got {ddt})")
    return Draws(rng, dt, ddt)


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
    draws = _draws(rng, dtype, draw_dtype)
    return spec.law.sample_matrix(draws, spec.var, spec.df, rows, cols)


def sample_vectors(rng: np.random.Generator, spec: DistSpec, k: int, n: int,
                   dtype=np.float64, *, draw_dtype=None) -> np.ndarray:
    """k vectors of n coordinates, shape (k, n).

    With ``cov``: each coordinate draws its k-tuple iid from N(mean, cov), through
    the pivoted-Cholesky factor of :func:`~.factor.psd_factor` (singular cov
    allowed; exact copies / negations / zero-variance coordinates come out exact).
    Without: k independent vectors with iid coordinates of variance ``var``; then
    ``mean`` (one value per vector) is added if given.  ``draw_dtype`` as for
    :func:`sample_matrix`.
    """
    law = spec.law
    if not law.vectors:
        raise DistributionError(f"{spec.family}: only for matrices, not for vectors")
    for name, v in (("k", k), ("n", n)):
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
            raise DistributionError(f"{spec.family}: number of {'vectors' if name == 'k' else 'coordinates'} "
                                    f"must be a positive integer (got {v!r})")
    if spec.n_vectors is not None and spec.n_vectors != k:
        which = "cov" if spec.cov is not None else "mean"
        raise DistributionError(f"{spec.family}: {which} is for {spec.n_vectors} vectors, asked for {k}")
    draws = _draws(rng, dtype, draw_dtype)
    out = law.sample_vectors(draws, spec.var, spec.df, spec.cov, k, n)
    if spec.mean is not None:
        out += np.asarray(spec.mean, dtype=draws.dt)[:, np.newaxis]
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
    family = spec.family if isinstance(spec, DistSpec) else spec
    if family is None:
        return max(matrix_bytes(rows, cols, dtype, f, draw_dtype=draw_dtype) for f in FAMILIES)
    law = family_of(family)
    slack = 1 << 18  # array headers, per-row vectors, ufunc casting buffers
    if draw_dtype is not None and np.dtype(draw_dtype) != np.dtype(dtype):
        slack += min(DRAW_BLOCK, n) * np.dtype(draw_dtype).itemsize
    return n * itemsize + law.extra_bytes(rows, cols, itemsize) + slack
