"""Exact radial integration of positively homogeneous integrands over standard normal coordinates.

If f(tξ) = t^p f(ξ) for every t > 0 (batchnorm makes integrands like this: (h − μ)/σ is scale-free,
and its Jacobian scales like 1/‖h‖), then with ξ ~ N(0, I_D), ρ = ‖ξ‖ ~ χ_D independent of the
direction θ = ξ/ρ (uniform on the sphere),

    E f(ξ) = E[ρ^p] · E f(ξ/‖ξ‖),    E[ρ^p] = 2^{p/2} Γ((D + p)/2) / Γ(D/2)   (D + p > 0).

The radius is integrated in closed form, and what is left is bounded wherever f is bounded on the
sphere: a degree −2 integrand has infinite variance for D ≤ 4 (QMC's error bar is then not to be
trusted), its angular part has none.  :func:`homogeneous_degrees` finds p numerically: f(tξ) =
t^p f(ξ) at random points for t = 1/2, 2, 3, with p a multiple of 1/2, to 1e-9 relative.
"""
from __future__ import annotations

from math import gamma, isfinite, log
from typing import Callable

import numpy as np

#: points, scales and relative tolerance of the homogeneity test
POINTS, SCALES, TOLERANCE = 24, (0.5, 2.0, 3.0), 1e-9


def radius_moment(p: float, D: int) -> float:
    """E ρ^p for ρ ~ χ_D (infinite when D + p ≤ 0)."""
    if D + p <= 0:
        return float("inf")
    return 2 ** (p / 2) * gamma((D + p) / 2) / gamma(D / 2)


def homogeneous_degrees(f: Callable[..., np.ndarray], D: int, seed: int = 0) -> np.ndarray | None:
    """The degree p_k of each output of f (a multiple of 1/2) if every output is positively
    homogeneous in the D coordinates (checked at POINTS random points and SCALES), else None."""
    xi = np.random.default_rng(seed).standard_normal((D, POINTS))
    base = f(*xi)
    if not np.all(np.isfinite(base)):
        return None
    scaled = {t: f(*(t * xi)) for t in SCALES}
    degrees = []
    for k in range(base.shape[0]):
        live = np.abs(base[k]) > 1e-300
        if not live.any():
            return None                       # 0 almost everywhere: nothing to gain
        ratio = scaled[2.0][k, live] / base[k, live]
        if not np.all(ratio > 0):
            return None
        p = round(2 * float(np.median(np.log(ratio))) / log(2)) / 2
        for t, values in scaled.items():
            expect = t ** p * base[k]
            if not np.all(np.abs(values[k] - expect) <= TOLERANCE * (np.abs(expect) + 1e-300)):
                return None
        degrees.append(p)
    return np.array(degrees)


def on_the_sphere(f: Callable[..., np.ndarray], D: int, seed: int = 0
                  ) -> Callable[..., np.ndarray] | None:
    """ξ ↦ E[ρ^p] · f(ξ/‖ξ‖) (one factor per output), which has the same expectation as f under
    N(0, I_D) when f is homogeneous of degree p (module doc); None if it is not, or if some
    E[ρ^p] is infinite or the integrand is constant along rays already (p = 0 everywhere)."""
    degrees = homogeneous_degrees(f, D, seed)
    if degrees is None or not np.any(degrees):
        return None
    factors = np.array([radius_moment(p, D) for p in degrees])
    if not all(isfinite(c) for c in factors):
        return None

    def angular(*xi: np.ndarray) -> np.ndarray:
        norm = np.sqrt(sum(x * x for x in xi))
        norm = np.where(norm > 0, norm, 1.0)
        return factors[:, None] * f(*(x / norm for x in xi))
    return angular
