"""The independent non-Gaussian scalar laws of the expectation engine.

Every law is centred and symmetric, parametrised by its variance ``var``:

* ``uniform``    on [−A, A], A = √(3 var):        E u^{2k} = var^k 3^k/(2k+1),  E|u|^n = A^n/(n+1);
* ``rademacher`` ±√var with probability 1/2:      E u^{2k} = var^k;
* ``laplace``    density e^{−|u|/b}/(2b), b = √(var/2): E u^{2k} = (2k)! b^{2k}, E|u|^n = n! b^n;
* ``student_t``  σ·T_ν, σ² = var(ν−2)/ν (ν = df > 2):
                 E|u|^n = σ^n ν^{n/2} Γ((n+1)/2) Γ((ν−n)/2)/(√π Γ(ν/2))
  for n < ν, and E|u|^n = ∞ for n ≥ ν;
* ``mvt_scale``  ±S with a fair random sign, S² = var(ν−2)/χ²_ν (ν = df > 2): the row scale of an
                 ``mvt`` matrix, whose rows are S·g with g iid Gaussian (E u² = var);
                 E|u|^n = (var(ν−2)/2)^{n/2} Γ((ν−n)/2)/Γ(ν/2) for n < ν, ∞ for n ≥ ν;
* ``normal``     N(0, var) (the engine turns it into one more independent Gaussian).

Besides the exact moments, this module gives what the numerics need: the density,
the points where it is not smooth, a truncation range, the inverse CDF (for QMC) and a
Gauss rule for smooth integrands.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp
from numpy.polynomial import legendre
from scipy import special as sps

FAMILIES = ("uniform", "rademacher", "laplace", "student_t", "mvt_scale", "normal")
HEAVY = ("student_t", "mvt_scale")          # finite moments of order < df only


def as_number(x: object) -> sp.Expr:
    """A sympy number from a Python int/float or a sympy expression (never a string)."""
    if isinstance(x, sp.Basic):
        return x
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise TypeError(f"expected a number or a sympy expression, got {x!r}")
    if float(x).is_integer():
        return sp.Integer(int(x))
    return sp.Float(float(x))


@dataclass(frozen=True)
class Law:
    """An independent, centred, symmetric scalar base variable with a non-Gaussian law."""
    family: str
    var: float | sp.Expr = 1
    df: float | None = None      # student_t and mvt_scale only (df > 2)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unknown law family {self.family!r} (one of {', '.join(FAMILIES)})")
        v = as_number(self.var)
        if v.is_number and not float(v) > 0:
            raise ValueError(f"law variance must be positive, got {self.var}")
        if self.family in HEAVY:
            if self.df is None or not float(self.df) > 2:
                raise ValueError(f"{self.family} needs df > 2 for a finite variance, got df={self.df}")
        elif self.df is not None:
            raise ValueError(f"df is only meaningful for student_t, not {self.family}")

    @property
    def discrete(self) -> bool:
        return self.family == "rademacher"

    @property
    def v(self) -> sp.Expr:
        return as_number(self.var)

    @property
    def nu(self) -> sp.Expr:
        return as_number(self.df)

    def abs_moment(self, n: int) -> sp.Expr:
        """E|u|^n, sp.oo if infinite."""
        v, f = self.v, self.family
        if n == 0:
            return sp.Integer(1)
        if f == "uniform":
            return sp.sqrt(3 * v) ** n / (n + 1)
        if f == "rademacher":
            return sp.sqrt(v) ** n
        if f == "laplace":
            return sp.factorial(n) * sp.sqrt(v / 2) ** n
        if f == "normal":
            return sp.sqrt(2 * v) ** n * sp.gamma(sp.Rational(n + 1, 2)) / sp.sqrt(sp.pi)
        nu = self.nu
        if n >= nu:
            return sp.oo
        if f == "mvt_scale":
            return (v * (nu - 2) / 2) ** sp.Rational(n, 2) * sp.gamma((nu - n) / 2) / sp.gamma(nu / 2)
        sigma = sp.sqrt(v * (nu - 2) / nu)
        return (sigma ** n * nu ** sp.Rational(n, 2) * sp.gamma(sp.Rational(n + 1, 2))
                * sp.gamma((nu - n) / 2) / (sp.sqrt(sp.pi) * sp.gamma(nu / 2)))

    def moment(self, n: int) -> sp.Expr:
        """E u^n: 0 for odd n (when it exists), E|u|^n for even n; ValueError if undefined."""
        if n % 2 == 0:
            return self.abs_moment(n)
        if self.abs_moment(n) is sp.oo:
            raise ValueError(f"E[u^{n}] does not exist for {self} (E|u|^{n} = ∞)")
        return sp.Integer(0)

    def density(self, t: sp.Expr) -> sp.Expr:
        """The density at t, as a sympy expression (for a Dirac mass on the variable)."""
        from ..symbolic.heads import AbsF, Step
        v, f = self.v, self.family
        if f == "uniform":
            a = sp.sqrt(3 * v)
            return Step(a - AbsF(t)) / (2 * a)
        if f == "laplace":
            b = sp.sqrt(v / 2)
            return sp.exp(-AbsF(t) / b) / (2 * b)
        if f == "normal":
            return sp.exp(-t ** 2 / (2 * v)) / sp.sqrt(2 * sp.pi * v)
        if f == "student_t":
            nu = self.nu
            s = sp.sqrt(v * (nu - 2) / nu)
            return (sp.gamma((nu + 1) / 2) / (sp.sqrt(nu * sp.pi) * sp.gamma(nu / 2) * s)
                    * (1 + (t / s) ** 2 / nu) ** (-(nu + 1) / 2))
        if f == "mvt_scale":       # ½ p_S(|t|), p_S(s) = f_χ²(c/s²)·2c/s³ with c = var(ν−2); 0 at t = 0
            nu, c = self.nu, v * (self.nu - 2)
            x = c / t ** 2
            chi2 = x ** (nu / 2 - 1) * sp.exp(-x / 2) / (2 ** (nu / 2) * sp.gamma(nu / 2))
            return sp.Piecewise((0, sp.Eq(t, 0)), (chi2 * c / AbsF(t) ** 3, True))
        raise ValueError("a Dirac mass of a Rademacher variable has no density")


# ---------------------------------------------------------------- numerics
class Coord:
    """One integration coordinate: a standard normal ξ or a law, with numeric helpers."""

    def __init__(self, law: Law | None, growth: float = 0.0):
        self.growth = growth
        self.family = "normal" if law is None else law.family
        var = 1.0 if law is None else float(law.var)
        self.df = None if law is None or law.df is None else float(law.df)
        if self.family == "uniform":
            self.scale = float(np.sqrt(3 * var))
        elif self.family == "laplace":
            self.scale = float(np.sqrt(var / 2))
        elif self.family == "student_t":
            self.scale = float(np.sqrt(var * (self.df - 2) / self.df))
        elif self.family == "mvt_scale":         # S = scale/√χ²_ν
            self.scale = float(np.sqrt(var * (self.df - 2)))
        else:
            self.scale = float(np.sqrt(var))

    @property
    def discrete(self) -> bool:
        return self.family == "rademacher"

    def kinks(self) -> np.ndarray:
        """Points where the density is not smooth (inside the support)."""
        return np.array([0.0]) if self.family == "laplace" else np.array([])

    def anchors(self, growth: float | None = None, alt: bool = False) -> np.ndarray:
        """Sorted split points, the first and last ones ending the (truncated) support.

        Gaussian tails are cut at ±13 (mass < 1e-38; ±35 for exponential growth),
        Laplace at ±80b, Student-t at
        ±σ·4^k with T^{growth−ν} ≲ 1e-16 (``growth``: the polynomial growth of the
        integrand); in between, splits where the density changes scale, so that
        Gauss–Legendre converges fast on each piece.  ``alt``: a second, interleaved set
        of splits with the same ends (an independent rule, to expose features the
        first set happens to resolve badly).
        """
        s, growth = self.scale, self.growth if growth is None else growth
        if self.family == "normal":
            far = [18.0, 25.0, 35.0] if growth == np.inf else []
            pos = np.array([1.0, 2.2, 3.6, 5.2, 7.2, 9.6, 13.0] + far) * s
        elif self.family == "uniform":
            pos = np.array([0.5, 1.0]) * s
        elif self.family == "laplace":
            pos = np.array([1.0, 2.5, 5, 9, 15, 24, 36, 52, 80]) * s
        elif self.family == "mvt_scale":     # S ≈ s/√ν; below s/(8√ν) the density is < e^{-32ν}
            kmax = int(np.ceil(16 / max(self.df - growth, 0.5) * np.log(10) / np.log(2)))
            pos = s / np.sqrt(self.df) * 2.0 ** np.arange(-3, min(max(kmax, 6), 80))
        else:
            kmax = int(np.ceil(16 / max(self.df - growth, 0.5) * np.log(10) / np.log(4)))
            pos = s * 4.0 ** np.arange(-1, min(max(kmax, 6), 40))
        mid = [0.0] if not alt or self.family == "laplace" else []
        if alt:
            pos = np.concatenate([pos[:1] / 2, np.sqrt(pos[:-2] * pos[1:-1]), pos[-1:]])
        return np.concatenate([-pos[::-1], mid, pos])

    def pdf(self, t: np.ndarray) -> np.ndarray:
        s = self.scale
        if self.family == "normal":
            return np.exp(-0.5 * (t / s) ** 2) / (s * np.sqrt(2 * np.pi))
        if self.family == "uniform":
            return np.where(np.abs(t) <= s, 0.5 / s, 0.0)
        if self.family == "laplace":
            return np.exp(-np.abs(t) / s) / (2 * s)
        if self.family == "mvt_scale":
            a = np.abs(np.asarray(t, dtype=float))
            with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
                x = (s / a) ** 2
                out = np.exp(sps.xlogy(self.df / 2 - 1, x) - x / 2 - self.df / 2 * np.log(2)
                             - sps.gammaln(self.df / 2)) * s ** 2 / a ** 3
            return np.where(a > 0, out, 0.0)
        nu = self.df
        logc = sps.gammaln((nu + 1) / 2) - sps.gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)
        return np.exp(logc - (nu + 1) / 2 * np.log1p((t / s) ** 2 / nu)) / s

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF, for uniforms u in (0, 1)."""
        s = self.scale
        if self.family == "normal":
            return s * sps.ndtri(u)
        if self.family == "uniform":
            return s * (2 * u - 1)
        if self.family == "rademacher":
            return np.where(u < 0.5, -s, s)
        if self.family == "laplace":
            d = u - 0.5
            return -s * np.sign(d) * np.log1p(-2 * np.abs(d))
        if self.family == "mvt_scale":
            d = np.asarray(u, dtype=float) - 0.5
            with np.errstate(divide="ignore"):
                return np.sign(d) * s / np.sqrt(sps.chdtri(self.df, 2 * np.abs(d)))
        return s * sps.stdtrit(self.df, u)

    def rule(self, n: int, alt: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """A rule (nodes, weights summing to 1) for smooth integrands: n Gauss–Legendre
        nodes on each piece between anchors (on a Gaussian this beats Gauss–Hermite by
        far for tanh-like integrands, whose poles lie near the real axis)."""
        if self.family == "rademacher":
            return np.array([-self.scale, self.scale]), np.array([0.5, 0.5])
        return _cached_rule(self.family, self.scale, self.df, self.growth, n, alt)


@lru_cache(maxsize=256)
def _cached_rule(family: str, scale: float, df: float | None, growth: float, n: int, alt: bool):
    c = Coord.__new__(Coord)
    c.family, c.scale, c.df, c.growth = family, scale, df, growth
    return piecewise_rule(c.anchors(alt=alt), n, c.pdf)


def piecewise_rule(points: np.ndarray, n: int, pdf) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss–Legendre (n nodes per piece) for ∫ g(t) pdf(t) dt over sorted pieces."""
    x, w = legendre.leggauss(n)
    a, b = points[:-1], points[1:]
    half = (b - a)[:, None] / 2
    nodes = (a[:, None] + half * (x + 1)).ravel()
    weights = (half * w).ravel()
    return nodes, weights * pdf(nodes)
