"""The expectation engine: E[f] over centred jointly Gaussian symbols and independent laws.

:func:`.engine.expect` reduces E[f] (:mod:`.reduce`), then finds a closed form (:mod:`.exact`,
:mod:`.wick`, :mod:`.canon`) or integrates numerically (:mod:`.numeric`: :mod:`.quad` in low
dimension, :mod:`.qmc` in high); :mod:`.batch` does one expression over many covariances.
"""
