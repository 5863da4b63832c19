"""The bound of Theorem 4.3.1 (Golikov's thesis, ch. 4) for one chain, once its constants are known.

    P(c^l − c̊^l > tau) <= B^l (exp(−n (tau / C_2^l(tau))^2) + n exp(−C_0 n)),   and the same for < −tau,

B^l = l, C_0 = 8 e^{−1/2} ≈ 4.85, K = sqrt(2 (3 + 64 e^{1/2})) ≈ 14.73,

    C_2^1(tau) = lambda^2 K,                         (4.41)
    C̄_2^l(tau) = lambda^2 (v̊^l + tau) K,            (4.41)
    C_2^{l+1}(tau) = lambda^2 C_2^l(tau/lambda^2) + C̄_2^l(tau/lambda^2),   (4.42, 4.70)

unrolled C_2^L(tau) = K (lambda^{2L} v̊^0 + sum_{j=1}^{L−1} lambda^{2(L−j)} v̊^j + (L − 1) tau), with
v̊^0 = s^2 the variance of g^1 (1 in the thesis).  The constants of a program (lambda, v̊^l, c̊)
come from :mod:`.recognise`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from ...errors import TPUsageError

#: the constants of Theorem 4.3.1
K_43 = math.sqrt(2.0 * (3.0 + 64.0 * math.exp(0.5)))
C0_43 = 8.0 * math.exp(-0.5)


@dataclass
class Chain:
    """An output of Theorem 4.3.1's class, reduced to the theorem's normalisation.

    Levels are numbered as in the thesis: g^1 is the initial vector, the output is c^L.
    ``vhat[l]`` is v̊^l for l = 0..L−1 (v̊^0 = s^2, v̊^l = sigma_l^2 E phi_l(g^l)^2 = Var g^{l+1})."""
    file: str
    output: str
    depth: int
    s2: float
    sigma2: list[float]                  # sigma_l^2 for l = 1..L−1
    phi_lips: list[float]                # Lip(phi_l)
    chi_lip: float                       # Lip(sqrt(c)·chi)
    lam: float                           # lambda used in the bound
    lam_rules: float                     # lambda given by the rules
    vhat: list[float]
    limit: float                         # c̊^L by 1-D quadrature (independent of the compiler)
    notes: list[str] = field(default_factory=list)
    _phis: list[Callable] = field(default_factory=list, repr=False)
    _chi: Callable | None = field(default=None, repr=False)

    def C2(self, tau: float, level: int | None = None) -> float:
        """C_2^l(tau) by the recursion (4.41)-(4.42), at l = ``level`` (default L)."""
        level = self.depth if level is None else level
        lam2 = self.lam ** 2
        if level == 1:
            return lam2 * self.vhat[0] * K_43
        prev = level - 1
        return lam2 * self.C2(tau / lam2, prev) + lam2 * (self.vhat[prev] + tau / lam2) * K_43

    def C2_closed(self, tau: float, level: int | None = None) -> float:
        """The unrolled C_2^l(tau) (same value as :meth:`C2`)."""
        L = self.depth if level is None else level
        lam2 = self.lam ** 2
        s = sum(lam2 ** (L - j) * self.vhat[j] for j in range(L))
        return K_43 * (s + (L - 1) * tau)

    def bound(self, n: float, tau: float, two_sided: bool = True, level: int | None = None) -> float:
        """The right side of (4.40) for P(c − c̊ > tau) (doubled for P(|c − c̊| > tau)); unclipped."""
        if not (tau > 0):
            raise TPUsageError(f"the deviation t must be > 0, not {tau!r}")
        if not (n >= 1):
            raise TPUsageError(f"the width n must be >= 1, not {n!r}")
        L = self.depth if level is None else level
        one = L * (math.exp(-n * (tau / self.C2(tau, L)) ** 2) + n * math.exp(-C0_43 * n))
        return 2.0 * one if two_sided else one

    def required_width(self, tau: float, delta: float, two_sided: bool = True) -> int:
        """The least width n at which the bound is <= delta."""
        if not (0 < delta):
            raise TPUsageError(f"delta must be > 0, not {delta!r}")
        lo, hi = 1, 2
        while self.bound(hi, tau, two_sided) > delta:
            lo, hi = hi, hi * 2
            if hi > 1e18:
                return -1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.bound(mid, tau, two_sided) > delta:
                lo = mid
            else:
                hi = mid
        return hi

    def describe(self) -> str:
        lines = [f"{self.file}: output {self.output!r} is c^{self.depth} of Theorem 4.3.1's class",
                 f"  g^1 ~ N(0, {self.s2:g}); sigma_l^2 = {[round(x, 6) for x in self.sigma2]}; "
                 f"Lip(phi_l) = {[round(x, 6) for x in self.phi_lips]}; Lip(chi) = {self.chi_lip:.6g}",
                 f"  lambda = {self.lam:.6g} (rules: {self.lam_rules:.6g}); "
                 f"v̊^0..v̊^{self.depth - 1} = {[round(x, 6) for x in self.vhat]}; c̊ = {self.limit:.6g}",
                 f"  K = {K_43:.6g}, C_0 = {C0_43:.6g}, B^L = {self.depth}"]
        return "\n".join(lines + [f"  note: {x}" for x in self.notes])

