"""The bivariate normal distribution function Φ₂ as a sympy head (:class:`Phi2`) and its numpy rule.

    Φ₂(h, k; ρ) = P(X ≤ h, Y ≤ k),   (X, Y) standard normal with correlation ρ ∈ [−1, 1].

It is the base case of the closed forms with two kinks at offsets (ELU, SELU and their derivatives:
:mod:`tensorprog.expect.exact`).  Its facets:

* **derivatives** (``fdiff``): ∂Φ₂/∂h = φ(h)·Φ((k − ρh)/√(1 − ρ²)) (k likewise), and
  ∂Φ₂/∂ρ = φ₂(h, k; ρ) = exp(−(h² − 2ρhk + k²)/(2(1 − ρ²)))/(2π√(1 − ρ²)) (Plackett's identity);
* **limits**: Φ₂(h, k; 1) = Φ(min(h, k)), Φ₂(h, k; −1) = max(0, Φ(h) + Φ(k) − 1),
  Φ₂(h, k; 0) = Φ(h)Φ(k), Φ₂(0, 0; ρ) = ¼ + asin(ρ)/(2π) — made by ``eval`` at exact arguments;
* **high precision** (``evalf``): Φ₂ = Φ(h)Φ(k) + ∫₀^ρ φ₂(h, k; r) dr for |ρ| ≤ ½, and from the
  nearer end Φ₂(h, k; ±1) ∓ ∫_ρ^{±1} φ₂ dr beyond, by mpmath's tanh–sinh quadrature (whose endpoint
  rule takes the peak of φ₂ at r → ±1, an integrable singularity when h = ±k);
* **numpy** (:func:`phi2`, the tape's rule): Owen's T function (scipy's ``owens_t``, Patefield–Tandy),

      Φ₂(h, k; ρ) = ½Φ(h) + ½Φ(k) − T(h, a_h) − T(k, a_k) − β,
      a_h = (k − ρh)/(h√(1 − ρ²)),  a_k = (h − ρk)/(k√(1 − ρ²)),
      β = ½ if hk < 0, or hk = 0 and h + k < 0; else 0

  (Owen 1956, eq. 3.1); at h = 0 the limit h → 0⁺ gives Φ₂(0, k; ρ) = ½Φ(k) − T(k, −ρ/√(1 − ρ²))
  (k likewise; ¼ + asin(ρ)/(2π) at h = k = 0), and |ρ| = 1 the limits above.  Its error is
  absolute, not relative (the terms cancel where Φ₂ is far below Φ(h), Φ(k)): measured against
  mpmath (tests/test_elu_kernels.py) over h, k ∈ [−8, 8] and ρ ∈ [−1, 1] (ρ within 1e-14 of ±1
  included) at most 1.5e-16; :data:`PHI2_ERROR`, 8 units of roundoff, is the bound stated.
  Where h and k are far below 0 (the tilted quadrants of ELU and SELU: e^m·Φ₂ with e^m up to ~1e5)
  Φ₂ and every term are tiny, and so is the error: each term is at most M(h, k) =
  Φ(−|h|) + Φ(−|k|) + ½·([h ≥ 0] + [k ≥ 0] + [hk ≤ 0]) (:func:`phi2_magnitude`), computed to a
  few ulp of it (scipy's ndtr and owens_t, and the sum's roundings), and the rounding of a_h enters T
  through ∂T/∂a = e^{−h²(1+a²)/2}/(2π(1 + a²)), which relative to Φ(−|h|) ≈ φ(h)/|h| grows with |h|:
  :func:`phi2_error` states min(8ε, 4ε·(1 + h² + k²)·M(h, k)).  Measured against mpmath at 30 digits
  (tests/test_elu_kernels.py: h, k down to −30, values far below 1e-100, ρ within 1e-13 of ±1) the error
  is at most 0.63ε·(1 + h² + k²)·M: the factor 4 is a margin of 6 over what was seen (an empirical
  constant, as PHI2_ERROR's is).
  (k − ρh is formed as (k − h) + (1 − ρ)h for ρ ≥ 0, (k + h) − (1 + ρ)h for ρ < 0: as written it
  loses its digits at ρ → ±1 with h ≈ ±k, 3e-11 absolute at 1 + ρ = 1e-13.)
"""
from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp
from scipy import special as sps
from sympy.core.function import ArgumentIndexError

#: a bound on |phi2(h, k, ρ) − Φ₂(h, k; ρ)| (module doc): 8 units of roundoff
PHI2_ERROR = 8 * float(np.finfo(float).eps)
#: the factor of :func:`phi2_error`'s bound relative to its terms' magnitude (module doc): 4ε
PHI2_RELATIVE = 4 * float(np.finfo(float).eps)


def phi2_magnitude(h, k):
    """M(h, k) = Φ(−|h|) + Φ(−|k|) + ½·([h ≥ 0] + [k ≥ 0] + [hk ≤ 0]): a bound on the magnitude of each
    term of Owen's formula — ½Φ(h) + ½Φ(−|h|) is Φ(−|h|) for h < 0 and ½ else, |T(h, a)| ≤ T(h, ∞) =
    ½Φ(−|h|), β ≤ ½ only where hk ≤ 0 — and of the limits at ρ = ±1 and the forms at h = 0 or k = 0
    (module doc); as sympy where h, k are sympy (Φ(−|x|) = erfc(|x|/√2)/2: an argument sympy does not
    rewrite as 2 − erfc(−x), which would lose the tiny values)."""
    if isinstance(h, sp.Basic) or isinstance(k, sp.Basic):
        tail = lambda x: sp.erfc(sp.Abs(x, evaluate=False) / sp.sqrt(2)) / 2      # noqa: E731  (Φ(−|x|))
        return tail(h) + tail(k) + (sp.Heaviside(h, 1) + sp.Heaviside(k, 1) + sp.Heaviside(-h * k, 1)) / 2
    h, k = np.asarray(h, dtype=float), np.asarray(k, dtype=float)
    return sps.ndtr(-np.abs(h)) + sps.ndtr(-np.abs(k)) + 0.5 * ((h >= 0) * 1.0 + (k >= 0) + (h * k <= 0))


def phi2_error(h, k):
    """A bound on |phi2(h, k, ρ) − Φ₂(h, k; ρ)| for every ρ (module doc): min(PHI2_ERROR,
    PHI2_RELATIVE·(1 + h² + k²)·M(h, k)) (:func:`phi2_magnitude`); as sympy where h, k are sympy."""
    if isinstance(h, sp.Basic) or isinstance(k, sp.Basic):
        return sp.Min(sp.Float(PHI2_ERROR), sp.Float(PHI2_RELATIVE) * (1 + h**2 + k**2) * phi2_magnitude(h, k),
                      evaluate=False)
    h, k = np.asarray(h, dtype=float), np.asarray(k, dtype=float)
    return np.minimum(PHI2_ERROR, PHI2_RELATIVE * (1 + h * h + k * k) * phi2_magnitude(h, k))


def _ndtr(x):
    """Φ(x) as sympy: (1 + erf(x/√2))/2."""
    return (1 + sp.erf(x / sp.sqrt(2))) / 2


def _density(h, k, rho):
    """φ₂(h, k; ρ), the bivariate standard normal density at (h, k), as sympy."""
    s = 1 - rho**2
    return sp.exp(-(h**2 - 2 * rho * h * k + k**2) / (2 * s)) / (2 * sp.pi * sp.sqrt(s))


class Phi2(sp.Function):
    """Φ₂(h, k, ρ) = P(X ≤ h, Y ≤ k) for standard normal X, Y of correlation ρ (the bivariate
    normal distribution function; module doc)."""
    nargs = 3

    @classmethod
    def eval(cls, h, k, rho):
        if rho == 1:
            return _ndtr(sp.Min(h, k)) if not (h - k).is_number else _ndtr(h if (h - k) <= 0 else k)
        if rho == -1 and (h + k).is_number:
            return sp.Max(0, _ndtr(h) - _ndtr(-k))
        if rho == 0:
            return _ndtr(h) * _ndtr(k)
        if h == 0 and k == 0:
            return sp.Rational(1, 4) + sp.asin(rho) / (2 * sp.pi)
        if h == sp.oo:
            return _ndtr(k)
        if k == sp.oo:
            return _ndtr(h)
        if h == -sp.oo or k == -sp.oo:
            return sp.Integer(0)

    def fdiff(self, argindex=1):
        h, k, rho = self.args
        if argindex == 1:
            return sp.exp(-h**2 / 2) / sp.sqrt(2 * sp.pi) * _ndtr((k - rho * h) / sp.sqrt(1 - rho**2))
        if argindex == 2:
            return sp.exp(-k**2 / 2) / sp.sqrt(2 * sp.pi) * _ndtr((h - rho * k) / sp.sqrt(1 - rho**2))
        if argindex == 3:
            return _density(h, k, rho)
        raise ArgumentIndexError(self, argindex)

    def _eval_evalf(self, prec):
        args = [a._eval_evalf(prec) if hasattr(a, "_eval_evalf") else a for a in self.args]
        if not all(a is not None and a.is_number and a.is_real for a in args):
            return None
        with mpmath.workprec(prec + 20):
            h, k, rho = (mpmath.mpf(str(a.evalf(prec // 3 + 10))) for a in args)
            value = phi2_mp(h, k, rho)
        return sp.Float(value, max(1, prec // 3))

    def _eval_is_real(self):
        return all(a.is_real for a in self.args) or None


def phi2_mp(h, k, rho):
    """Φ₂(h, k; ρ) in mpmath at its working precision: Φ(h)Φ(k) + ∫₀^ρ φ₂(h, k; r) dr."""
    ncdf = mpmath.ncdf
    if rho >= 1:
        return ncdf(min(h, k))
    if rho <= -1:
        return max(mpmath.mpf(0), ncdf(h) - ncdf(-k))

    def density(r):
        s = (1 - r) * (1 + r)
        if s <= 0:                                   # an endpoint: a null set of the integral
            return mpmath.mpf(0)
        return mpmath.exp(-(h * h - 2 * r * h * k + k * k) / (2 * s)) / (2 * mpmath.pi * mpmath.sqrt(s))
    if abs(rho) <= 0.5:
        return ncdf(h) * ncdf(k) + mpmath.quad(density, [0, rho])
    # from the end ρ = ±1, whose (integrable) peak of φ₂ the tanh–sinh rule resolves at an endpoint
    sign = 1 if rho > 0 else -1
    points = [rho] + [sign * (1 - (1 - abs(rho)) * mpmath.mpf(10) ** -j) for j in range(1, 6)] + [sign]
    tail = sum(mpmath.quad(density, [points[i], points[i + 1]]) for i in range(len(points) - 1))
    if rho > 0:
        return ncdf(min(h, k)) - tail
    return max(mpmath.mpf(0), ncdf(h) - ncdf(-k)) - tail


def phi2(h, k, rho):
    """Φ₂(h, k; ρ) for arrays (broadcast), by Owen's T function (module doc); ρ is clipped to [−1, 1]."""
    h, k, rho = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (h, k, rho)))
    rho = np.clip(rho, -1.0, 1.0)
    s = np.sqrt((1 - rho) * (1 + rho))
    inner = np.abs(rho) < 1
    safe = np.where(inner, s, 1.0)
    hz, kz = h == 0, k == 0
    hs, ks = np.where(hz, 1.0, h), np.where(kz, 1.0, k)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # k − ρh as (k − h) + (1 − ρ)h (ρ ≥ 0) or (k + h) − (1 + ρ)h (ρ < 0): exact differences of nearly
        # equal (opposite) h, k, where k − ρh would lose its digits as ρ → ±1 (|1 ∓ ρ| is exact)
        ah = np.where(rho >= 0, (k - h) + (1 - rho) * h, (k + h) - (1 + rho) * h) / (hs * safe)
        ak = np.where(rho >= 0, (h - k) + (1 - rho) * k, (h + k) - (1 + rho) * k) / (ks * safe)
        lone = -rho / safe                                           # a_k at h = 0, a_h at k = 0
        th = np.where(hz, 0.0, sps.owens_t(h, np.where(np.isfinite(ah), ah, 0.0)))
        tk = np.where(kz, 0.0, sps.owens_t(k, np.where(np.isfinite(ak), ak, 0.0)))
        beta = np.where((h * k < 0) | ((h * k == 0) & (h + k < 0)), 0.5, 0.0)
        general = 0.5 * sps.ndtr(h) + 0.5 * sps.ndtr(k) - th - tk - beta
        h0 = 0.5 * sps.ndtr(k) - sps.owens_t(k, lone)               # Φ₂(0, k; ρ)
        k0 = 0.5 * sps.ndtr(h) - sps.owens_t(h, lone)               # Φ₂(h, 0; ρ)
        origin = 0.25 + np.arcsin(rho) / (2 * np.pi)
    out = np.where(hz & kz, origin, np.where(hz, h0, np.where(kz, k0, general)))
    out = np.where(rho >= 1, sps.ndtr(np.minimum(h, k)), out)
    out = np.where(rho <= -1, np.maximum(0.0, sps.ndtr(h) - sps.ndtr(-k)), out)
    return np.clip(out, 0.0, 1.0)
