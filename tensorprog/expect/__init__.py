"""The expectation engine: E[f] over centred jointly Gaussian symbols and independent laws.

The pipeline, each module importing only the ones listed before it:

* :mod:`.budget`: the :class:`~.budget.Budget` (``tol``, ``max_qmc_points``,
  ``max_quad_points``, ``max_expand_size``, ``seed``) every expectation is computed within;
* :mod:`.laws`, :mod:`.linalg`, :mod:`.analysis`: the laws, Gaussian linear algebra and the
  structural scans (growth, parity, kinks) that everything below uses;
* closed forms: :mod:`.wick` (monomials), :mod:`.canon` (the rewrite through sign and erf),
  :mod:`.blockers` (proofs that none exists), :mod:`.exact` (the Gaussian rules);
* numerics: :mod:`.quad` in low dimension, :mod:`.qmc` in high, dispatched by :mod:`.numeric`;
* :mod:`.reduce`: linearity, factorisation, Dirac masses, symmetry, then a closed form or a
  numeric job;
* :mod:`.engine`: :func:`~.engine.expect` and :func:`~.engine.expect_many` (an
  :class:`~.engine.Estimate` each);
* :mod:`.batch`: :func:`~.batch.expect_batch`, one expression over many covariances.

Import from the modules (``from tensorprog.expect.engine import expect``): this package
re-exports nothing, so importing :mod:`.budget` alone loads neither sympy nor scipy.
"""
