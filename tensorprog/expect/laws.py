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

Every law's maths lives in its object of :data:`tensorprog.distributions.LAWS` (a
:class:`~tensorprog.distributions.ScalarLaw`: the family object of an iid distribution
family, or ``mvt_scale``); :class:`Law` and :class:`Coord` read them from there.  Besides
the exact moments, the numerics need the density, the points where it is not smooth, a
truncation range, the inverse CDF (for QMC) and a Gauss rule for smooth integrands.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp
from numpy.polynomial import legendre

from ..distributions import LAWS, ScalarLaw


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
        if self.family not in LAWS:
            raise ValueError(f"unknown law family {self.family!r} (one of {', '.join(LAWS)})")
        v = as_number(self.var)
        if v.is_number and not float(v) > 0:
            raise ValueError(f"law variance must be positive, got {self.var}")
        if self.scalar.has_df:
            if self.df is None or not float(self.df) > 2:
                raise ValueError(f"{self.family} needs df > 2 for a finite variance, got df={self.df}")
        elif self.df is not None:
            raise ValueError(f"df is only meaningful for student_t, not {self.family}")

    @property
    def scalar(self) -> ScalarLaw:
        """The law's object (its moments, density and numerics)."""
        return LAWS[self.family]

    @property
    def discrete(self) -> bool:
        return self.scalar.discrete

    @property
    def gaussian(self) -> bool:
        """N(0, var): the engine makes it one more Gaussian."""
        return self.scalar.gaussian

    @property
    def v(self) -> sp.Expr:
        return as_number(self.var)

    @property
    def nu(self) -> sp.Expr:
        return as_number(self.df)

    def _nu(self) -> sp.Expr | None:
        return self.nu if self.scalar.has_df else None

    def abs_moment(self, n: int) -> sp.Expr:
        """E|u|^n, sp.oo if infinite."""
        if n == 0:
            return sp.Integer(1)
        return self.scalar.abs_moment(self.v, self._nu(), n)

    def moment(self, n: int) -> sp.Expr:
        """E u^n: 0 for odd n (when it exists), E|u|^n for even n; ValueError if undefined."""
        if n % 2 == 0:
            return self.abs_moment(n)
        if self.abs_moment(n) is sp.oo:
            raise ValueError(f"E[u^{n}] does not exist for {self} (E|u|^{n} = ∞)")
        return sp.Integer(0)

    def density(self, t: sp.Expr) -> sp.Expr:
        """The density at t, as a sympy expression (for a Dirac mass on the variable)."""
        return self.scalar.density(self.v, self._nu(), t)


# ---------------------------------------------------------------- numerics
class Coord:
    """One integration coordinate: a standard normal ξ or a law, with numeric helpers."""

    def __init__(self, law: Law | None, growth: float = 0.0):
        self.growth = growth
        self.family = "normal" if law is None else law.family
        self.law: ScalarLaw = LAWS[self.family]
        var = 1.0 if law is None else float(law.var)
        self.df = None if law is None or law.df is None else float(law.df)
        self.scale = self.law.scale(var, self.df)

    @property
    def discrete(self) -> bool:
        return self.law.discrete

    def kinks(self) -> np.ndarray:
        """Points where the density is not smooth (inside the support)."""
        return self.law.kinks()

    def edges(self) -> np.ndarray:
        """Points where the density jumps (±A for a uniform law)."""
        return self.law.edges(self.scale)

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
        return self.law.anchors(self.scale, self.df, self.growth if growth is None else growth, alt)

    def pdf(self, t: np.ndarray) -> np.ndarray:
        return self.law.pdf(self.scale, self.df, t)

    def ppf(self, u: np.ndarray) -> np.ndarray:
        """Inverse CDF, for uniforms u in (0, 1)."""
        return self.law.ppf(self.scale, self.df, u)

    def rule(self, n: int, alt: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """A rule (nodes, weights summing to 1) for smooth integrands: n Gauss–Legendre
        nodes on each piece between anchors (on a Gaussian this beats Gauss–Hermite by
        far for tanh-like integrands, whose poles lie near the real axis); the atoms of a
        discrete law."""
        if self.law.discrete:
            return self.law.atoms(self.scale)
        return _cached_rule(self.family, self.scale, self.df, self.growth, n, alt)


@lru_cache(maxsize=256)
def _cached_rule(family: str, scale: float, df: float | None, growth: float, n: int, alt: bool):
    law = LAWS[family]
    return piecewise_rule(law.anchors(scale, df, growth, alt), n, lambda t: law.pdf(scale, df, t))


def piecewise_rule(points: np.ndarray, n: int, pdf) -> tuple[np.ndarray, np.ndarray]:
    """Composite Gauss–Legendre (n nodes per piece) for ∫ g(t) pdf(t) dt over sorted pieces."""
    x, w = legendre.leggauss(n)
    a, b = points[:-1], points[1:]
    half = (b - a)[:, None] / 2
    nodes = (a[:, None] + half * (x + 1)).ravel()
    weights = (half * w).ravel()
    return nodes, weights * pdf(nodes)
