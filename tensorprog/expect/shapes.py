"""Expectations over linear-form coordinates, cached by shape; covariances made PSD.

:func:`.forms.to_forms` turns an integrand into f(ℓ0, …, ℓk−1) with ℓ ~ N(0, C).  The *shape* of
the expectation is f itself, the laws in it and which entries of C are exactly 0 (independence is
structure: it lets E factorise); C's other entries are its numbers.  A deep network asks the
same shape at every layer with a new C, so :class:`Shapes` derives each shape once:

* a Gaussian closed form is derived with C's non-zero entries as symbols c_ij (the rules of
  :mod:`.exact`, which hold for every C ≻ 0) and compiled to a numpy tape
  (:mod:`..symbolic.evaluate`); each layer then costs one evaluation of the tape.  This is done
  when a shape comes back (its second occurrence: a shape met once costs nothing extra), and
  the symbolic form is kept only if it agrees with the general route at that C to 1e-12
  (relative).  A C that is singular, or a value that is not finite, goes the general route;
* a shape without a closed form is remembered as such: the general route skips the closed-form
  attempt (and goes straight to the numeric rules) the next time.

**Covariances with numeric error.**  C's entries are limits known to an error (quadrature, QMC),
so C may be indefinite by about that error.  :func:`nearest_psd` projects it on the PSD cone
(eigenvalues clipped at 0: the nearest PSD matrix in the Frobenius norm) when its negative
eigenvalue lies within ``drift`` (what the entries' errors allow); the estimate is then taken at
the projection C₊, and |E(C₊ + (C₊ − C)) − E(C₊)| (the projection's displacement once more: to
first order what it moved E by) joins its error (:func:`projection_moves`).  Beyond ``drift`` it is refused (ValueError).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import numpy as np
import sympy as sp

from .budget import Budget
from .engine import Estimate, expect
from .laws import Law
from ..symbolic.evaluate import Tape, compile_exprs

#: eigenvalues above −NEGLIGIBLE·max variance are rounding, not drift
NEGLIGIBLE = 1e-12
#: shapes over at most this many coordinates get a closed form in C (a layer's kernel entries; a
#: symbolic derivation in more dimensions can cost far more than the numeric ones it saves)
MAX_SHAPE_DIM = 3


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


def projection_moves(cov: np.ndarray, proj: np.ndarray, delta: float) -> list[np.ndarray]:
    """PSD matrices one projection away from C₊: C₊ + (C₊ − C), the same displacement again
    (V diag(max(−λ, 0)) Vᵀ ⪰ 0), which moves E by ∇E·(C₊ − C) to first order, i.e. by as much as
    the projection did.  (Not C₊ + δI: that would give variance to directions that are exactly
    null by structure, such as the mean of a batch after batchnorm, and change the integrand's
    nature, not its value within the drift.)"""
    again = 2 * proj - cov
    return [(again + again.T) / 2]


class Shapes:
    """Expectations E f(ℓ), ℓ ~ N(0, C), with each shape's derivation shared (module doc)."""

    def __init__(self) -> None:
        self.no_closed_form: set[tuple] = set()
        self.seen: dict[tuple, int] = {}                    # shape -> times met
        self.closed: dict[tuple, ClosedForm | None] = {}    # shape -> its formula in C (None: none)

    def expect(self, expr: sp.Expr, coords: tuple[sp.Symbol, ...], cov: np.ndarray,
               laws: Mapping[sp.Symbol, Law], budget: Budget,
               drift: Callable[[], float] = lambda: 0.0) -> Estimate:
        """E[expr] over ``coords`` ~ N(0, cov) and ``laws``; ``drift()``: how far below PSD
        ``cov`` may be by its entries' errors (module doc; asked only when C is not PSD)."""
        proj, delta = nearest_psd(np.asarray(cov, dtype=float))
        allowed = drift() if delta > 0 else 0.0
        if delta > allowed + NEGLIGIBLE * max(float(np.max(np.diag(cov), initial=0.0)), 1e-300):
            raise ValueError(f"covariance is not positive semi-definite (eigenvalue {-delta:.3g}), "
                             f"beyond the {allowed:.2g} its entries' errors allow")
        est = self._at(expr, coords, proj, laws, budget)
        if delta == 0.0:
            return est
        moved = [self._at(expr, coords, other, laws, budget) for other in projection_moves(cov, proj, delta)]
        shift = max(m.error + abs(m.value - est.value) for m in moved)
        return replace(est, error=est.error + shift, exact=None,
                       method="quadrature" if est.method == "exact" else est.method)

    def _at(self, expr: sp.Expr, coords: tuple[sp.Symbol, ...], cov: np.ndarray,
            laws: Mapping[sp.Symbol, Law], budget: Budget) -> Estimate:
        """E[expr] at one PSD C: the shape's tape if it has one, else the general route."""
        key = (expr, tuple(sorted(laws.items(), key=lambda t: t[0].name)), tuple((cov == 0).ravel()))
        form = self.closed.get(key)
        if form is not None and nonsingular(cov):
            value = form.value(cov)
            if np.isfinite(value):
                return Estimate(value, 0.0, "exact", None)
        exact = key not in self.no_closed_form
        est = expect(expr, coords, cov, laws, exact=exact, budget=budget)
        if exact and est.method != "exact":
            self.no_closed_form.add(key)
        self.seen[key] = self.seen.get(key, 0) + 1
        if est.method == "exact" and not laws and self.seen[key] == 2 and len(coords) <= MAX_SHAPE_DIM \
                and nonsingular(cov):
            self.closed[key] = derive(expr, coords, cov, budget, est.value)
        return est


def nonsingular(cov: np.ndarray) -> bool:
    """C ≻ 0 with room to spare: λ_min > 1e-9·λ_max."""
    lam = np.linalg.eigvalsh(cov) if cov.size else np.ones(1)
    return bool(lam[0] > 1e-9 * lam[-1])


@dataclass(frozen=True)
class ClosedForm:
    """E f(ℓ) as a formula in the entries of C: ``entries`` (i, j) stand for the ``symbols``."""
    tape: Tape
    entries: tuple[tuple[int, int], ...]

    def value(self, cov: np.ndarray) -> float:
        return float(self.tape(*[cov[i, j] for i, j in self.entries])[0])


def derive(expr: sp.Expr, coords: tuple[sp.Symbol, ...], cov: np.ndarray, budget: Budget,
           check: float) -> ClosedForm | None:
    """The closed form of E[expr] with C's non-zero entries as symbols (variances positive), if
    the rules give one and it reproduces ``check`` (the value at ``cov``) to 1e-12; else None."""
    k = len(coords)
    entries = tuple((i, j) for i in range(k) for j in range(i, k) if cov[i, j] != 0)
    symbols = {(i, j): sp.Symbol(f"c{i}_{j}", positive=True) if i == j else sp.Symbol(f"c{i}_{j}", real=True)
               for i, j in entries}
    C = sp.Matrix(k, k, lambda i, j: symbols.get((min(i, j), max(i, j)), sp.Integer(0)))
    try:
        est = expect(expr, coords, C, {}, exact=True, budget=budget)
    except (ValueError, ArithmeticError):
        return None
    if est.method != "exact" or est.exact is None or not est.exact.free_symbols <= set(symbols.values()):
        return None
    try:
        form = ClosedForm(compile_exprs((est.exact,), tuple(symbols[e] for e in entries)), entries)
    except ValueError:
        return None
    value = form.value(cov)
    return form if abs(value - check) <= 1e-12 * max(1.0, abs(check)) else None
