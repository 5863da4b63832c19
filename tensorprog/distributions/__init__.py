"""Random distributions of initial vectors and matrices.

This module turns the distribution call of a declaration (``normal(var=2)``,
``student_t(6)``, ``normal(cov=M)``...) into a validated :class:`DistSpec`, and
samples matrices and vectors from it with a :class:`numpy.random.Generator`.

Scaling conventions (docs/language.md, "Distributions"):

* a **matrix** of shape ``(rows, cols)`` maps ``cols``-vectors to ``rows``-vectors;
  its entries have mean 0 and variance ``var / cols`` (fan-in = ``cols``);
* a **vector** has coordinates of variance ``var`` (or the joint covariance
  ``cov`` of a group of ``k`` vectors), plus ``mean`` if given.

Families (all rescaled to the requested variance; each is one object of :mod:`.families`):

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

Call syntax accepted by :func:`make_spec` (decisions not fixed by the language's contract):

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

The implementation is split by responsibility; this module re-exports its public names:

* :mod:`.families`: one object per family (:class:`~.family.Family`), holding everything
  about its law: validation of its parameters, dense and blocked sampling, its limit law
  for the expectation engine (:class:`~.family.ScalarLaw`: moments, density, quadrature)
  and the hypotheses of the Master Theorem it breaks; the registries :data:`FAMILIES`
  (name -> Family) and :data:`LAWS` (the engine's scalar laws, with ``mvt_scale``);
* :mod:`.checks`: :class:`DistributionError` and the checks every family shares;
* :mod:`.spec`: :class:`DistSpec` (``spec.law`` is its family object), :func:`make_spec`,
  :func:`with_family`;
* :mod:`.factor`: :func:`psd_factor`, the structure-keeping factor of ``cov``;
* :mod:`.sample`: :func:`sample_matrix`, :func:`sample_vectors`, :func:`matrix_bytes`
  (``draw_dtype=np.float64``: a float32 sample draws the numbers of the float64 one, so
  float32 and float64 runs of a seed agree);
* :mod:`.blocked`: matrices regenerated row block by row block (:data:`BLOCKABLE` families).
* :mod:`.swap`: :func:`~.swap.with_matrix_family`, a program with every matrix law swapped
  (``--matrix-dist``), for both back ends.
"""
from __future__ import annotations

from .checks import COV_TOL, DEFAULT_DF, DistributionError
from .factor import psd_factor
from .families import (BLOCKABLE, FAMILIES, HEAVY_TAILED, LAWS, MATRIX_ONLY, VECTOR_FAMILIES, family_of)
from .family import Family, ScalarLaw
from .sample import DRAW_BLOCK, draw_matrix, draw_vectors, matrix_bytes, sample_matrix, sample_vectors
from .spec import DistSpec, make_spec, with_family

__all__ = [
    "DistributionError",
    "Family",
    "ScalarLaw",
    "FAMILIES",
    "LAWS",
    "family_of",
    "MATRIX_ONLY",
    "VECTOR_FAMILIES",
    "HEAVY_TAILED",
    "BLOCKABLE",
    "DEFAULT_DF",
    "COV_TOL",
    "DRAW_BLOCK",
    "DistSpec",
    "make_spec",
    "with_family",
    "psd_factor",
    "sample_matrix",
    "sample_vectors",
    "draw_matrix",
    "draw_vectors",
    "matrix_bytes",
]
