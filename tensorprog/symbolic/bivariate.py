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
* **scaled forms** (:class:`ScaledPhi2` = e^m·Φ₂(h, k; ρ), :class:`ScaledErfc` = e^m·erfc(x)): the tilted
  quadrants of ELU and SELU at large variances, where e^m overflows (m up to 2a for a variance a) and Φ₂
  underflows, and Owen's absolute error ~ε·Φ(−|h|) is far above Φ₂: exp(m + log Φ₂) with log Φ₂ by
  :func:`log_phi2_tail` (a positive integrand, Gauss–Kronrod on panels graded from its mode: relative
  accuracy at any depth of the tail) where Owen's bound is not within OWEN_SELECT·(4 + |log Φ₂|)·Φ₂,
  and erfcx(x)·e^{m − x²}; their stated errors :func:`scaled_phi2_error`, :func:`scaled_erfc_error`.
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



def mp_evalf(args, prec: int, formula) -> sp.Float | None:
    """``formula`` (of mpmath numbers) at the arguments' values, to ``prec`` bits (sympy's evalf
    convention), or None where an argument is not a real number."""
    args = [a._eval_evalf(prec) if hasattr(a, "_eval_evalf") else a for a in args]
    if not all(a is not None and a.is_number and a.is_real for a in args):
        return None
    with mpmath.workprec(prec + 20):
        value = formula(*(mpmath.mpf(str(a.evalf(prec // 3 + 10))) for a in args))
    return sp.Float(value, max(1, prec // 3))

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
        return mp_evalf(self.args, prec, phi2_mp)

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


# ---- scaled forms: e^m·erfc(x) and e^m·Φ₂(h, k; ρ) without overflow or cancellation -----------------
#: Gauss–Kronrod 15-point nodes and weights on [−1, 1] (QUADPACK's qk15), and which of them are the 7-point
#: Gauss rule's nodes (odd positions), with its weights
_GK_NODES = np.array([-0.991455371120812639206854697526329, -0.949107912342758524526189684047851,
                      -0.864864423359769072789712788640926, -0.741531185599394439863864773280788,
                      -0.586087235467691130294144845693013, -0.405845151377397166906606412076961,
                      -0.207784955007898467600689403773245, 0.0, 0.207784955007898467600689403773245,
                      0.405845151377397166906606412076961, 0.586087235467691130294144845693013,
                      0.741531185599394439863864773280788, 0.864864423359769072789712788640926,
                      0.949107912342758524526189684047851, 0.991455371120812639206854697526329])
_GK_WEIGHTS = np.array([0.022935322010529224963732008058970, 0.063092092629978553290700663189204,
                        0.104790010322250183839876322541518, 0.140653259715525918745189590510238,
                        0.169004726639267902826583426598550, 0.190350578064785409913256402421014,
                        0.204432940075298892414161999234649, 0.209482141084727828012999174891714,
                        0.204432940075298892414161999234649, 0.190350578064785409913256402421014,
                        0.169004726639267902826583426598550, 0.140653259715525918745189590510238,
                        0.104790010322250183839876322541518, 0.063092092629978553290700663189204,
                        0.022935322010529224963732008058970])
_G7_WEIGHTS = np.zeros(15)
_G7_WEIGHTS[1::2] = [0.129484966168869693270611432679082, 0.279705391489276667901467771423780,
                     0.381830050505118944950369775488975, 0.417959183673469387755102040816327,
                     0.381830050505118944950369775488975, 0.279705391489276667901467771423780,
                     0.129484966168869693270611432679082]
#: the log-integrand of :func:`log_phi2_tail` falls by at least (t − t*)²/2 from its mode t*: beyond
#: √(2·90) of it, below e^{−90} of its peak (negligible: the integral is at least the peak × 1e-9)
_TAIL_REACH = float(np.sqrt(180.0))
#: a bound on :func:`log_phi2_tail`'s relative error per unit of 4 + |log Φ₂| (measured against mpmath: at
#: most 3ε(4 + |log Φ₂|), tests/test_elu_kernels.py; stated with a margin of 2 in :func:`scaled_phi2_error`)
TAIL_RELATIVE = 4 * float(np.finfo(float).eps)
#: :func:`_owen_or_tail` takes Owen's formula where its bound (:func:`phi2_error`) is at most this times
#: (4 + |log Φ₂|)·Φ₂: the bulk of the arguments (Owen is ~20× cheaper: at 32ε the SELU kernel of N = 300
#: at depth 10 took 54 s, 16 s here), the quadrature in the far tails (large variances)
OWEN_SELECT = 256 * float(np.finfo(float).eps)


def _mills(z):
    """φ(z)/Φ(z) (the inverse Mills ratio of the lower tail), without overflow."""
    return np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - sps.log_ndtr(z))


def log_phi2_tail(h, k, rho, with_estimate: bool = False):
    """log Φ₂(h, k; ρ) to a relative accuracy of Φ₂ (arrays, broadcast; for min(h, k) < 0, any ρ), by

        Φ₂(h, k; ρ) = φ(h)·∫₀^∞ exp(ℓ(t)) dt,   ℓ(t) = ht − t²/2 + log Φ(z₀ + βt),
        z₀ = (k − ρh)/√(1 − ρ²),  β = ρ/√(1 − ρ²)

    (Φ₂ = ∫_{−∞}^h φ(x)Φ((k − ρx)/√(1 − ρ²)) dx with x = h − t, h ≤ k the outer variable): a positive
    integrand, so no term cancels, however far in the tail (h, k down to −1e3: Φ₂ = e^{−1e6}), and in
    logarithms (scipy's log_ndtr), so nothing underflows.  ℓ is concave with ℓ'' ≤ −1: its mode t* is
    found by bisection on ℓ' = h − t + β·φ(z)/Φ(z), and the integral is taken over [t* − R, t* + R]
    ∩ [0, ∞), R = √180 (beyond it exp(ℓ) < e^{−90}·exp(ℓ(t*))), by Gauss–Kronrod 15 on panels whose
    widths double away from t*, the first a quarter of the peak's width (1/√(−ℓ''(t*)) or
    1/|ℓ'(0)| at t* = 0; down to √(1 − ρ²)/ρ as ρ → 1).  ρ = ±1: log Φ(min(h, k)) and
    log(Φ(h) − Φ(−k))⁺.  ``with_estimate``: also |K15 − G7|/K15 summed over the panels, an estimate
    of the Gauss rule's (not the Kronrod value's) relative error (tests/test_elu_kernels.py)."""
    h, k, rho = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (h, k, rho)))
    h, k = np.minimum(h, k), np.maximum(h, k)
    rho = np.clip(rho, -1.0, 1.0)
    shape = h.shape
    h, k, rho = h.ravel(), k.ravel(), rho.ravel()
    out, est = np.empty(h.shape), np.zeros(h.shape)
    edge = np.abs(rho) >= 1
    with np.errstate(divide="ignore", invalid="ignore"):
        lo, hi = sps.log_ndtr(h[edge]), sps.log_ndtr(-k[edge])
        minus = np.where(h[edge] > -k[edge], lo + np.log(-np.expm1(np.minimum(hi - lo, 0.0))), -np.inf)
        out[edge] = np.where(rho[edge] > 0, lo, minus)
    inner = ~edge
    if np.any(inner):
        out[inner], est[inner] = _log_phi2_inner(h[inner], k[inner], rho[inner])
    out, est = out.reshape(shape), est.reshape(shape)
    return (out, est) if with_estimate else out


def _log_phi2_inner(h, k, rho):
    """:func:`log_phi2_tail` for |ρ| < 1 (1-D arrays, h ≤ k): (log Φ₂, the K15 − G7 estimate)."""
    s = np.sqrt((1 - rho) * (1 + rho))
    z0 = np.where(rho >= 0, (k - h) + (1 - rho) * h, (k + h) - (1 + rho) * h) / s     # (k − ρh)/s, as phi2
    beta = rho / s

    def slope(t):
        return h - t + beta * _mills(z0 + beta * t)
    # the mode t* ≥ 0 of the concave ℓ: ℓ'(t) < 0 once z ≥ 0 (φ/Φ ≤ 0.8 there) and t > 0.8β
    knee = np.where(beta > 0, np.maximum(-z0 / np.where(beta > 0, beta, 1.0), 0.0), 0.0)
    a, b = np.zeros_like(h), knee + np.maximum(0.8 * beta, 0.0) + 1.0
    rising = slope(a) > 0
    for _ in range(60):
        mid = 0.5 * (a + b)
        up = slope(mid) > 0
        a, b = np.where(up, mid, a), np.where(up, b, mid)
    t_star = np.where(rising, 0.5 * (a + b), 0.0)
    z = z0 + beta * t_star
    lam = _mills(z)
    curv = 1 + beta * beta * np.clip(lam * (z + lam), 0.0, 1.0)
    drop = np.maximum(-slope(t_star), 0.0)                 # −ℓ'(t*): 0 at an inner mode
    width = np.minimum(1 / np.sqrt(curv), 1 / np.maximum(drop, 1e-300))
    # ℓ(t) ≤ ℓ(t*) − drop·(t − t*) − (t − t*)²/2 (concave, ℓ'' ≤ −1): below e^{−90} of the peak beyond
    reach = _TAIL_REACH ** 2 / (np.sqrt(drop * drop + _TAIL_REACH ** 2) + drop)     # (√(d² + R²) − d, stably)
    # the knee z = 0 of Φ(z₀ + βt), a step of width 1/|β| (a cut where β < 0): panels refine there too,
    # where it lies within the range and not within the mode's first panel
    knee = -z0 / np.where(beta != 0, beta, np.inf)
    lo_end, hi_end = np.maximum(t_star - _TAIL_REACH, 0.0), t_star + reach
    near = (knee > lo_end) & (knee < hi_end) & (np.abs(knee - t_star) > width / 4)
    anchors = [(t_star, np.maximum(width / 2, 1e-300)),
               (np.where(near, knee, t_star), np.maximum(np.minimum(width, 1 / np.abs(beta)) / 2, 1e-300))]
    counts = [np.ceil(np.log2(np.maximum(hi_end - at, at - lo_end) / w0 + 1)).astype(int) for at, w0 in anchors]
    counts[1] = np.where(near, counts[1], 0)
    out, est = np.empty_like(h), np.empty_like(h)
    groups: dict[tuple[int, int], list[int]] = {}
    for i, key in enumerate(zip(counts[0].tolist(), counts[1].tolist())):
        groups.setdefault(key, []).append(i)
    base = h * t_star - 0.5 * t_star ** 2 + sps.log_ndtr(z)                     # ℓ(t*)
    for (j0, j1), rows in groups.items():                 # the rows with the same panel counts at once
        rows = np.asarray(rows)
        edges = [lo_end[rows, None], hi_end[rows, None]]
        for (at, w0), J in zip(anchors, (j0, j1)):
            if J == 0:
                continue
            steps = w0[rows, None] * (2.0 ** np.arange(J + 1)[None, :] - 1)
            edges += [np.clip(at[rows, None] + sgn * steps, lo_end[rows, None], hi_end[rows, None])
                      for sgn in (1, -1)]
        edges = np.sort(np.concatenate(edges, axis=1), axis=1)
        out[rows], est[rows] = _kronrod(edges, h[rows], z0[rows], beta[rows], base[rows])
    return out, est


def _kronrod(edges, h, z0, beta, top):
    """(log Φ₂, |K15 − G7|/K15) of :func:`_log_phi2_inner` over the panels between consecutive ``edges``
    (n, p+1), ℓ relative to ``top`` = ℓ(t*)."""
    lo, up = edges[:, :-1], edges[:, 1:]
    half, mid = (up - lo) / 2, (up + lo) / 2
    t = mid[..., None] + half[..., None] * _GK_NODES                                  # (n, p, 15)
    ell = h[:, None, None] * t - 0.5 * t * t + sps.log_ndtr(z0[:, None, None] + beta[:, None, None] * t)
    terms = np.exp(ell - top[:, None, None]) * np.abs(half)[..., None]
    kronrod = np.sum(terms * _GK_WEIGHTS, axis=(1, 2))
    gauss = np.sum(terms * _G7_WEIGHTS, axis=(1, 2))
    log_value = -0.5 * h * h - 0.5 * np.log(2 * np.pi) + top + np.log(kronrod)
    return log_value, np.abs(kronrod - gauss) / kronrod


def _owen_or_tail(h, k, rho, owen_only: bool = False):
    """(log Φ₂, whether by Owen's formula): Owen's formula (:func:`phi2`) where its bound (:func:`phi2_error`)
    is within OWEN_SELECT·(4 + |log Φ₂|) of the value, :func:`log_phi2_tail` elsewhere (the far tails)."""
    h, k, rho = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (h, k, rho)))
    p = phi2(h, k, rho)
    with np.errstate(divide="ignore"):
        logp = np.log(p)
    fine = (p > 1e-300) & (phi2_error(h, k) <= OWEN_SELECT * (4 + np.abs(np.maximum(logp, -1e300))) * p)
    fine |= np.minimum(h, k) >= 0
    out = np.array(logp, dtype=float, copy=True)
    tail = ~fine
    if np.any(tail) and not owen_only:
        out[tail] = log_phi2_tail(h[tail], k[tail], rho[tail])
    return out, fine


def scaled_phi2(m, h, k, rho):
    """e^m·Φ₂(h, k; ρ) as exp(m + log Φ₂) (arrays, broadcast): Φ₂ by Owen's formula where that is
    accurate relative to it, else by :func:`log_phi2_tail` (:func:`_owen_or_tail`), so that the tilted
    quadrants of ELU and SELU, e^m·Φ₂ with e^m up to e^{2000} and Φ₂ down to e^{−2000}, come out to a
    few units of roundoff times the logarithms summed: :func:`scaled_phi2_error`."""
    m = np.asarray(m, dtype=float)
    logp, _ = _owen_or_tail(h, k, rho)
    with np.errstate(over="ignore"):
        return np.exp(m + logp)


def scaled_phi2_error(m, h, k, rho, value):
    """A bound on |scaled_phi2 − e^m·Φ₂| at exact arguments, given the value (so that a tape evaluating both
    shares its quadrature): where :func:`_owen_or_tail` takes Owen's formula (its test redone: Owen's
    formula alone, cheap), e^m·phi2_error(h, k) plus the rounding of e^m·Φ₂ (ε·(1 + |log value|)·value);
    in the tails, with L = log(value) − m ≈ log Φ₂,

        (1.5·TAIL_RELATIVE·(4 + |L|) + ε·(1 + |m + L|))·value

    — log Φ₂ within TAIL_RELATIVE·(4 + |L|) relative with a margin of 1.5, the sum m + L rounded to
    u·|m + L| and exp to one ulp (the tilted quadrants have m ≈ −L: relative to the logarithms, not e^m)."""
    m, value = np.asarray(m, dtype=float), np.abs(np.asarray(value, dtype=float))
    eps = float(np.finfo(float).eps)
    _, owen = _owen_or_tail(h, k, rho, owen_only=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_value = np.log(np.maximum(value, 1e-300))
        rounding = eps * (1 + np.abs(log_value)) * value
        tail = 1.5 * TAIL_RELATIVE * (4 + np.abs(log_value - m)) * value
        owen_bound = np.exp(m + np.log(np.maximum(phi2_error(h, k), 1e-300)))     # (e^m alone may overflow)
        return rounding + np.where(owen, owen_bound, tail)


def scaled_erfc(m, x):
    """e^m·erfc(x) (arrays): erfcx(x)·e^{m − x²} for x ≥ 0 (no overflow of e^m, no underflow of erfc),
    e^m·erfc(x) for x < 0 (erfc ∈ (1, 2))."""
    m, x = np.broadcast_arrays(np.asarray(m, dtype=float), np.asarray(x, dtype=float))
    with np.errstate(over="ignore"):
        return np.where(x >= 0, sps.erfcx(np.maximum(x, 0.0)) * np.exp(m - np.maximum(x, 0.0) ** 2),
                        np.exp(m) * sps.erfc(np.minimum(x, 0.0)))


def scaled_erfc_error(m, x):
    """A bound on |scaled_erfc − e^m·erfc(x)| at exact arguments: (4 + |m| + 2x²)·ε·e^m·erfc(x) — erfcx,
    exp and the product a few ulp, and the exponent m − x² rounded to u·(2x² + |m|) absolute."""
    m, x = np.asarray(m, dtype=float), np.asarray(x, dtype=float)
    return (4 + np.abs(m) + 2 * x * x) * float(np.finfo(float).eps) * np.abs(scaled_erfc(m, x))


class ScaledPhi2(Phi2):
    """e^m·Φ₂(h, k; ρ) as one head (m, h, k, ρ): the tilted quadrant of ELU and SELU, evaluated without
    overflow of e^m or underflow of Φ₂ (:func:`scaled_phi2`).  A :class:`Phi2`, so that whoever asks a
    form for Φ₂ (its float64 evaluation with a stated error) finds it."""
    nargs = 4

    @classmethod
    def eval(cls, m, h, k, rho):
        return None

    def fdiff(self, argindex=1):
        m, h, k, rho = self.args
        s = sp.sqrt(1 - rho**2)
        if argindex == 1:
            return self
        if argindex in (2, 3):
            x, y = (h, k) if argindex == 2 else (k, h)
            # e^m·φ(x)·Φ((y − ρx)/s) = e^{m − x²/2}·erfc(−(y − ρx)/(s√2))/(2√(2π))
            return ScaledErfc(m - x**2 / 2, -(y - rho * x) / (s * sp.sqrt(2))) / (2 * sp.sqrt(2 * sp.pi))
        if argindex == 4:
            return sp.exp(m - (h**2 - 2 * rho * h * k + k**2) / (2 * s**2)) / (2 * sp.pi * s)
        raise ArgumentIndexError(self, argindex)

    def _eval_evalf(self, prec):
        return mp_evalf(self.args, prec, lambda m, h, k, rho: mpmath.exp(m) * phi2_mp(h, k, rho))


class ScaledErfc(Phi2):
    """e^m·erfc(x) as one head (m, x) (:func:`scaled_erfc`): 2e^m·Φ₂(−√2·x, ∞; ρ), a :class:`Phi2` as
    :class:`ScaledPhi2` is."""
    nargs = 2

    @classmethod
    def eval(cls, m, x):
        return None

    def fdiff(self, argindex=1):
        m, x = self.args
        if argindex == 1:
            return self
        if argindex == 2:
            return -2 * sp.exp(m - x**2) / sp.sqrt(sp.pi)
        raise ArgumentIndexError(self, argindex)

    def _eval_evalf(self, prec):
        return mp_evalf(self.args, prec, lambda m, x: mpmath.exp(m) * mpmath.erfc(x))


class ScaledPhi2Bound(sp.Function):
    """:func:`scaled_phi2_error` (m, h, k, ρ, value) as a head: the bound the tape states for :class:`ScaledPhi2`
    (its value an argument: the tape evaluates the quadrature once)."""
    nargs = 5
