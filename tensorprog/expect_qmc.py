"""Randomized quasi-Monte Carlo for expectations in many dimensions.

E g(t) with t = (F₁⁻¹(U₁), …, F_D⁻¹(U_D)), U uniform on [0,1]^D, each Fₖ⁻¹ the inverse
CDF of a coordinate (``scipy.special.ndtri`` for the standard normals of the whitened
Gaussians).  R = 16 independently scrambled Sobol sequences (Owen scrambling, seeded
from one ``SeedSequence``, hence reproducible) give R unbiased estimates; the value is
their mean and the error 3 standard errors of that mean (R − 1 = 15 degrees of
freedom: |t₁₅| > 3 has probability 0.9 %).  Each replicate's sample doubles, always
a power of two (where Sobol points are balanced), until the error meets the target
or R·n would exceed ``max_points``.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy.stats import qmc as _qmc

from .expect_laws import Coord

REPLICATES = 16
SAFETY = 3.0


def qmc(f: Callable[..., np.ndarray], coords: Sequence[Coord], target: Callable,
        max_points: int, seed: int = 0):
    """(values, errors, converged) of E g(t) by scrambled Sobol replicates (module doc)."""
    D = len(coords)
    streams = np.random.SeedSequence(seed).spawn(REPLICATES)
    engines = [_qmc.Sobol(d=D, scramble=True, seed=np.random.default_rng(s)) for s in streams]
    per = max_points // REPLICATES
    batch = 2 ** int(np.clip(np.floor(np.log2(max(per, 1))), 4, 10))
    sums, n = None, 0
    tiny = np.finfo(float).tiny
    while True:
        for r, eng in enumerate(engines):
            U = np.clip(eng.random(batch), tiny, 1 - 2 ** -53)
            vals = f(*(c.ppf(U[:, k]) for k, c in enumerate(coords)))
            if sums is None:
                sums = np.zeros((REPLICATES, vals.shape[0]))
            sums[r] += vals.sum(axis=1)
        n += batch
        means = sums / n
        value = means.mean(axis=0)
        err = SAFETY * means.std(axis=0, ddof=1) / np.sqrt(REPLICATES)
        done = bool(np.all(err <= target(value)))
        if done or 2 * n * REPLICATES > max_points:
            return value, err, done
        batch = n
