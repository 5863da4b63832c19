"""Randomized quasi-Monte Carlo for expectations in many dimensions.

E g(t) with t = (F₁⁻¹(U₁), …, F_D⁻¹(U_D)), U uniform on [0,1]^D, each Fₖ⁻¹ the inverse
CDF of a coordinate (``scipy.special.ndtri`` for the standard normals of the whitened
Gaussians).  R = 16 independently scrambled Sobol sequences (Owen scrambling, seeded
from one ``SeedSequence``, hence reproducible) give R unbiased estimates; the value is
their mean and the error 3 standard errors of that mean (R − 1 = 15 degrees of
freedom: |t₁₅| > 3 has probability 0.9 %).  Each replicate's sample doubles, always
a power of two (where Sobol points are balanced), until the error meets the target
or R·n would exceed ``max_points``.  The result is a :class:`QmcResult`.

That error bar presumes a finite variance of g.  The largest deviations |g − c| of all
samples give a Hill estimate of g's tail index α (``_Tails``); α < 2 (infinite variance,
e.g. x² under student_t(3), or |x|^−0.7) is reported as ``heavy_tail``: the stated error
is then not a reliable bound.  (Integrands of finite but extreme variance, such as
e^{2x}, can be flagged too: their error bars rest on a handful of samples.)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .laws import Coord

REPLICATES = 16
SAFETY = 3.0


@dataclass(frozen=True)
class QmcResult:
    """E g(t) for each output of g by scrambled Sobol replicates (module doc).

    ``values``, ``errors``: per output; ``converged``: every error met its target;
    ``heavy_tail``, ``tail_index``: per output, the Hill estimate α of ``_Tails`` and
    whether α < ``HEAVY_ALPHA`` (infinite variance: the error bar is not reliable);
    ``points``: the samples used (all replicates together)."""
    values: np.ndarray
    errors: np.ndarray
    converged: bool
    heavy_tail: np.ndarray
    tail_index: np.ndarray
    points: int


def qmc(f: Callable[..., np.ndarray], coords: Sequence[Coord], target: Callable,
        max_points: int, seed: int) -> QmcResult:
    """E g(t), t = (F₁⁻¹(U₁), …) over the coordinates, by R scrambled Sobol replicates seeded
    from ``seed``, doubling until ``target(values)`` is met or ``max_points`` would be
    exceeded (module doc)."""
    from scipy.stats import qmc as sobol        # scipy.stats takes ~0.5 s to import: only when QMC runs
    D = len(coords)
    streams = np.random.SeedSequence(seed).spawn(REPLICATES)
    engines = [sobol.Sobol(d=D, scramble=True, seed=np.random.default_rng(s)) for s in streams]
    per = max_points // REPLICATES
    batch = 2 ** int(np.clip(np.floor(np.log2(max(per, 1))), 4, 10))
    sums, n = None, 0
    tiny = np.finfo(float).tiny
    tails = _Tails()
    while True:
        for r, eng in enumerate(engines):
            U = np.clip(eng.random(batch), tiny, 1 - 2 ** -53)
            vals = f(*(c.ppf(U[:, k]) for k, c in enumerate(coords)))
            if sums is None:
                sums = np.zeros((REPLICATES, vals.shape[0]))
            sums[r] += vals.sum(axis=1)
            tails.add(vals)
        n += batch
        tails.close(n * REPLICATES)
        means = sums / n
        value = means.mean(axis=0)
        err = SAFETY * means.std(axis=0, ddof=1) / np.sqrt(REPLICATES)
        done = bool(np.all(err <= target(value)))
        if done or 2 * n * REPLICATES > max_points:
            return QmcResult(value, err, done, tails.heavy(), tails.alpha(), n * REPLICATES)
        batch = n


class _Tails:
    """The upper tail of |g − c| over all samples (c: the first batch's mean), for a Hill
    estimate of its tail index α (P(|g − c| > t) ~ t^−α).  The replicates' spread — hence
    the stated error — assumes a finite variance, i.e. α > 2; an estimate below 2 (e.g.
    x² under student_t(3): α = 1.5, or |x|^−0.7: α ≈ 1.4) means the error bar is not to be
    trusted.  Sobol points are stratified, so the top order statistics sit near the exact
    quantiles and the estimate is steadier than for iid samples."""

    KEEP = 1024

    def __init__(self):
        self.center = None
        self.top = None

    def add(self, vals: np.ndarray) -> None:
        with np.errstate(all="ignore"):
            if self.center is None:
                self.center = np.nanmean(vals, axis=1)
                self.top = np.zeros((vals.shape[0], 0))
            dev = np.abs(vals - self.center[:, None])
        dev = np.where(np.isfinite(dev), dev, np.inf)
        both = np.concatenate([self.top, dev], axis=1)
        if both.shape[1] > self.KEEP:
            both = np.partition(both, both.shape[1] - self.KEEP, axis=1)[:, -self.KEEP:]
        self.top = both

    def close(self, N: int) -> None:
        self.N = N

    def alpha(self) -> np.ndarray:
        """Hill's estimate of α from the k = clip(N/256, 32, KEEP − 1) largest deviations."""
        X = -np.sort(-self.top, axis=1)
        k = int(np.clip(self.N // 256, 32, X.shape[1] - 1)) if X.shape[1] > 32 else X.shape[1] - 1
        if k < 8:
            return np.full(X.shape[0], np.inf)
        with np.errstate(all="ignore"):
            gamma = np.mean(np.log(X[:, :k]), axis=1) - np.log(X[:, k])
            return np.where(np.isfinite(gamma) & (gamma > 0), 1 / gamma, np.where(np.isinf(X[:, 0]), 0.0, np.inf))

    def heavy(self) -> np.ndarray:
        """Per output: an estimated tail index α < HEAVY_ALPHA (infinite variance)."""
        if self.N < MIN_TAIL_POINTS:
            return np.zeros(self.top.shape[0], dtype=bool)
        return self.alpha() < HEAVY_ALPHA


HEAVY_ALPHA = 2.0                # see _Tails
MIN_TAIL_POINTS = 2 ** 13
