"""Expectations over linear-form coordinates, cached by shape; covariances made PSD.

:func:`.forms.to_forms` turns an integrand into f(ℓ0, …, ℓk−1) with ℓ ~ N(0, C).  The *shape* of
the expectation is f itself, the laws in it and which entries of C are exactly 0 (independence is
structure: it lets E factorise); C's other entries are its numbers.  A deep network asks the
same shape at every layer with a new C, so :class:`Shapes` derives each shape once:

* a Gaussian closed form is derived with C's non-zero entries as symbols c_ij (the rules of
  :mod:`.exact`, which hold for every C ≻ 0) and compiled to a numpy tape
  (:mod:`..symbolic.evaluate`); each layer then costs one evaluation of the tape.  A C that is
  singular, or a value that is not finite, goes the general route instead;
* a shape without a closed form is remembered as such: the general route skips the closed-form
  attempt (and goes straight to the numeric rules) the next time.

**Covariances with numeric error.**  C's entries are limits known to an error (quadrature, QMC),
so C may be indefinite by about that error.  :func:`nearest_psd` projects it on the PSD cone
(eigenvalues clipped at 0: the nearest PSD matrix in the Frobenius norm) when its negative
eigenvalue lies within ``drift`` (what the entries' errors allow); the estimate is then taken at
the projection C₊, and |E(C₊ + δI) − E(C₊)|, δ = ‖C − C₊‖₂, joins its error.  Beyond ``drift``
it is refused (ValueError).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping

import numpy as np
import sympy as sp

from .budget import Budget
from .engine import Estimate, expect
from .laws import Law

#: eigenvalues above −NEGLIGIBLE·max variance are rounding, not drift
NEGLIGIBLE = 1e-12


def nearest_psd(cov: np.ndarray) -> tuple[np.ndarray, float]:
    """(C₊, δ): the nearest PSD matrix to the symmetric C (eigenvalues clipped at 0) and
    δ = ‖C − C₊‖₂ = −λ_min(C) (0 when C is PSD up to rounding: then C₊ = C)."""
    if not cov.size:
        return cov, 0.0
    lam, V = np.linalg.eigh(cov)
    scale = max(float(np.max(np.diag(cov))), 1e-300)
    if lam[0] >= -NEGLIGIBLE * scale:
        return cov, 0.0
    proj = (V * np.maximum(lam, 0.0)) @ V.T
    return (proj + proj.T) / 2, float(-lam[0])


class Shapes:
    """Expectations E f(ℓ), ℓ ~ N(0, C), with each shape's derivation shared (module doc)."""

    def __init__(self) -> None:
        self.no_closed_form: set[tuple] = set()

    def expect(self, expr: sp.Expr, coords: tuple[sp.Symbol, ...], cov: np.ndarray,
               laws: Mapping[sp.Symbol, Law], budget: Budget, drift: float = 0.0) -> Estimate:
        """E[expr] over ``coords`` ~ N(0, cov) and ``laws``; ``drift``: how far below PSD
        ``cov`` may be by its entries' errors (module doc)."""
        proj, delta = nearest_psd(np.asarray(cov, dtype=float))
        if delta > drift + NEGLIGIBLE * max(float(np.max(np.diag(cov), initial=0.0)), 1e-300):
            raise ValueError(f"covariance is not positive semi-definite (eigenvalue {-delta:.3g}), "
                             f"beyond the {drift:.2g} its entries' errors allow")
        est = self._at(expr, coords, proj, laws, budget)
        if delta == 0.0:
            return est
        moved = self._at(expr, coords, proj + delta * np.eye(len(coords)), laws, budget)
        return replace(est, error=est.error + moved.error + abs(moved.value - est.value), exact=None,
                       method="quadrature" if est.method == "exact" else est.method)

    def _at(self, expr: sp.Expr, coords: tuple[sp.Symbol, ...], cov: np.ndarray,
            laws: Mapping[sp.Symbol, Law], budget: Budget) -> Estimate:
        key = (expr, tuple(sorted(laws.items(), key=lambda t: t[0].name)), tuple((cov == 0).ravel()))
        exact = key not in self.no_closed_form
        est = expect(expr, coords, cov, laws, exact=exact, budget=budget)
        if exact and est.method != "exact":
            self.no_closed_form.add(key)
        return est
