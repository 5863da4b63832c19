"""Randomized quasi-Monte Carlo for expectations in many dimensions.

E g(t) with t = (F₁⁻¹(U₁), …, F_D⁻¹(U_D)), U uniform on [0,1]^D, each Fₖ⁻¹ the inverse
CDF of a coordinate (``scipy.special.ndtri`` for the standard normals of the whitened
Gaussians).  R = 16 independently scrambled Sobol sequences (Owen scrambling, seeded
from one ``SeedSequence``, hence reproducible) give R unbiased estimates; the value is
their mean and the error 3 standard errors of that mean (R − 1 = 15 degrees of
freedom: |t₁₅| > 3 has probability 0.9 %).  Each replicate's sample doubles, always
a power of two (where Sobol points are balanced), until the error meets the target
or R·n would exceed ``max_points``.  The result is a :class:`QmcResult`.

The points depend only on (seed, max_points, the coordinates' laws): they are drawn and mapped by
the inverse CDFs once and kept in :data:`POINTS` (a bounded cache) for every later QMC rule over
the same coordinates.

That error bar presumes a finite variance of g.  The largest deviations |g − c| of all
samples give a Hill estimate of g's tail index α (``_Tails``); α < 2 (infinite variance,
e.g. x² under student_t(3), or |x|^−0.7) is reported as ``heavy_tail``: the stated error
is then not a reliable bound.  (Integrands of finite but extreme variance, such as
e^{2x}, can be flagged too: their error bars rest on a handful of samples.)
"""
from __future__ import annotations

import itertools
from collections import OrderedDict
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
    points = POINTS.get(seed, max_points, coords)
    sums, n = None, 0
    tails = _Tails()
    for rnd in itertools.count():
        batch = points.batch(rnd)
        for r in range(REPLICATES):
            vals = f(*points.columns(rnd, r))
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
    raise AssertionError("unreachable")


class _Points:
    """The sample points of :func:`qmc` for one (seed, max_points, coordinates' laws): round ``rnd``
    draws ``batch(rnd)`` points of each replicate's scrambled Sobol sequence (the first round
    2^clip(⌊log₂(max_points/R)⌋, 4, 10), then as many as drawn so far: the sample doubles), mapped
    by each coordinate's inverse CDF.  The rounds are drawn once and kept (read-only): every
    expectation over the same number of coordinates of the same laws sees the same points, and
    drawing and mapping them (ndtri) costs as much as a cheap integrand."""

    def __init__(self, seed: int, max_points: int, coords: Sequence[Coord], keep: bool = True) -> None:
        from scipy.stats import qmc as sobol        # scipy.stats takes ~0.5 s to import: only when QMC runs
        self.coords = tuple(coords)
        streams = np.random.SeedSequence(seed).spawn(REPLICATES)
        self.engines = [sobol.Sobol(d=len(coords), scramble=True, seed=np.random.default_rng(s)) for s in streams]
        per = max_points // REPLICATES
        self.first = 2 ** int(np.clip(np.floor(np.log2(max(per, 1))), 4, 10))
        self.rounds: list[list[tuple[np.ndarray, ...]] | None] = []
        self.floats = 0
        self.keep = keep                # False: only the latest round is held (for one use)

    def batch(self, rnd: int) -> int:
        """Points per replicate drawn in round ``rnd`` (the sample doubles from round 1 on)."""
        return self.first * 2 ** max(rnd - 1, 0)

    def columns(self, rnd: int, r: int) -> tuple[np.ndarray, ...]:
        """Replicate r's points of round ``rnd``, one array per coordinate."""
        while len(self.rounds) <= rnd:
            self.rounds.append([self.draw(eng, self.batch(len(self.rounds))) for eng in self.engines])
            self.floats += self.batch(len(self.rounds) - 1) * len(self.coords) * REPLICATES
            if not self.keep and len(self.rounds) > 1:
                self.rounds[-2] = None
        return self.rounds[rnd][r]

    def draw(self, engine, batch: int) -> tuple[np.ndarray, ...]:
        U = np.clip(engine.random(batch), np.finfo(float).tiny, 1 - 2 ** -53)
        cols = tuple(c.ppf(U[:, k]) for k, c in enumerate(self.coords))
        for col in cols:
            col.setflags(write=False)
        return cols


class PointCache:
    """The :class:`_Points` of recent (seed, max_points, coordinate laws), least recently used
    dropped beyond ``max_floats`` numbers in all (the points are a pure function of that key)."""

    def __init__(self, max_floats: int) -> None:
        self.max_floats = max_floats
        self.entries: OrderedDict[tuple, _Points] = OrderedDict()

    def get(self, seed: int, max_points: int, coords: Sequence[Coord]) -> _Points:
        """The points for this key: kept ones, or new ones (not kept when they could exceed
        ``max_floats`` alone)."""
        if max_points * len(coords) > self.max_floats:
            return _Points(seed, max_points, coords, keep=False)
        key = (seed, max_points, tuple((c.family, c.scale, c.df) for c in coords))
        if key in self.entries:
            self.entries.move_to_end(key)
        else:
            self.entries[key] = _Points(seed, max_points, coords)
        while len(self.entries) > 1 and sum(p.floats for p in self.entries.values()) > self.max_floats:
            self.entries.popitem(last=False)
        return self.entries[key]


#: QMC points kept for reuse: 2^25 floats (256 MB), e.g. 2^20 points in 32 dimensions
POINTS = PointCache(2 ** 25)


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
