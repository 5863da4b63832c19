"""Closed forms of Gaussian expectations E[f(z)], z ~ N(0, Σ).

Every rule reduces to a handful of identities (Σ may hold exact numbers, Floats or
free parameters):

* **rewrite** each piecewise-linear head through sign:  relu(ℓ) = ℓ(1 + sign ℓ)/2,
  step(ℓ) = (1 + sign ℓ)/2, |ℓ| = ℓ sign ℓ, leaky_relu(ℓ, c) = ℓ((1+c) + (1−c) sign ℓ)/2,
  max(a, b) = (a+b)/2 + (a−b) sign(a−b)/2, gelu(ℓ) = ℓ(1 + erf(ℓ/√2))/2,
  step(h − k|b|) = step(h − kb)·step(h + kb);
* **Wick/Isserlis** for monomials: E[z_i z^β] = Σ_j Σ_ij β_j E[z^{β−e_j}];
* **Stein's lemma** for a polynomial times the rest: E[z_i g(z)] = Σ_j Σ_ij E[∂_j g(z)],
  with sign' = 2δ and erf'(x) = 2e^{−x²}/√π;
* **Dirac mass**: E[δ(w·z + h) g(z)] = φ_s(h)·E[g(z) | w·z = −h], s = wᵀΣw (a Gaussian
  conditional, written by solving w·z = −h for one coordinate);
* **Gaussian tilt**: E[e^{−zᵀAz/2 + bᵀz + c} g(z)] = e^{c + bᵀΣ'b/2} det(I+ΣA)^{−1/2}
  E[g(z' + Σ'b)], z' ~ N(0, Σ'), Σ' = (I+ΣA)^{−1}Σ (the moment generating function for A = 0);
* **base cases** for products of sign/erf of linear forms, writing κ = 2s for sign and
  κ = 1 + 2s for erf: E[F(ℓ + h)] = erf(h/√κ), and
  E[F₁(ℓ₁)F₂(ℓ₂)] = (2/π) asin(2c₁₂/√(κ₁κ₂))
  (Williams' arcsine kernel; sign·sign gives the orthant law (2/π) asin ρ), and at offsets
  E[F₁(ℓ₁ + h₁)F₂(ℓ₂ + h₂)] by the bivariate normal distribution function Φ₂ (:func:`offset_pair`:
  the quadrants of ELU and SELU, whose e^ℓ tilts the kinks off the origin; under a tilt, summed per
  e^m in the quadrants' basis, :mod:`.quadrants`, so that no e^m-size terms cancel); parallel
  signs merge: sign(ℓ+a) sign(ℓ+b) = 1 + sign(ℓ+a) − sign(ℓ+b) for a < b.
These give the arc-cosine kernels of every degree (Cho & Saul), the erf kernel, the
MGF, Dirac masses and their products with polynomials. Anything else raises
``NoClosedForm`` — before multiplying anything out when a cheap scan proves it
(``closed_form_blocker``: a factor no rule accepts; ``odd_in_a_kinked_sign``: the sign
of a non-affine argument, as nested kinks give), and ``ExpansionBudget`` when the
expansion would exceed ``max_size`` (``Budget.max_expand_size``, measured by
``analysis.expanded_size``).  Convention: sign(0) = 0, so step(0) = 1/2 under a Dirac mass on the
same hyperplane (the symmetric limit); an exactly degenerate ℓ ≡ 0 gives step(0) = 0.

The implementation is split by responsibility; this module holds the rules (``_Solver``) and
:func:`gauss_closed_form`, and re-exports the names of the others:

* :mod:`.wick`: :func:`wick`, the moments of monomials;
* :mod:`.canon`: :func:`canon`, the rewrite through sign and erf;
* :mod:`.blockers`: :func:`closed_form_blocker`, :func:`odd_in_a_kinked_sign`,
  :func:`expand_within`, the checks before multiplying out;
* :mod:`.quadrants`: a tilt's offset kinks in the basis of their quadrants (ELU, SELU).

An ELU/SELU integrand's covariance is reduced to a basis at its Floats' tolerance first (a form and its
negative, or the inputs x and 2x, are dependent though their rounded covariance is not exactly singular),
then made exact binary rationals, its own Floats too (e^m·λ²α² − e^m·λ²α² must be 0).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from .blockers import closed_form_blocker, expand_within, odd_in_a_kinked_sign
from .canon import canon
from .linalg import Matrix, NoClosedForm, affine, condition, reduce_basis, tidy
from .wick import wick
from .quadrants import SignPair, plain_pair_value, quadrant_form
from ..symbolic.bivariate import Phi2
from ..symbolic.heads import Delta, Elu, Relu, Selu, Sign

__all__ = ["gauss_closed_form", "wick", "canon", "closed_form_blocker", "odd_in_a_kinked_sign",
           "expand_within"]


@lru_cache(maxsize=4096)
def gauss_closed_form(expr: sp.Expr, syms: tuple, cov: Matrix, max_size: float) -> sp.Expr:
    """E[expr] over z = syms ~ N(0, cov), in closed form (NoClosedForm otherwise;
    ExpansionBudget if the rewritten integrand would multiply out beyond ``max_size``,
    measured by ``analysis.expanded_size``); a tilt's kinks in the basis of their quadrants
    (:func:`.quadrants.quadrant_form`)."""
    tilted = expr.has(Elu, Selu) or any(f.args[0].has(Relu) for f in expr.atoms(sp.exp))
    F = raw_closed_form(expr, syms, cov, max_size, tilted)
    return quadrant_form(F) if tilted else F.replace(SignPair, plain_pair_value)


@lru_cache(maxsize=4096)
def raw_closed_form(expr: sp.Expr, syms: tuple, cov: Matrix, max_size: float, tilted: bool) -> sp.Expr:
    """:func:`gauss_closed_form` with its pairs of offset kinks as :class:`.quadrants.SignPair` markers;
    ``tilted``: an integrand of ELU/SELU (e^ℓ at kinks), whose tilts leave their kinks to
    :func:`.quadrants.quadrant_form` (the others' tilts write erf as 1 − erfc, as they did before it)."""
    # the basis first, at the Floats' tolerance (linalg.is_zero): a form and its negative, or the two
    # inputs x and 2x of a kernel, are dependent although their rounded covariance is not exactly singular
    expr, syms, cov = reduce_basis(expr, syms, cov)
    if tilted:
        # exact binary rationals: sympy would evaluate e^m, erf and 1 − erfc of Floats at once, to 15 digits,
        # and the large e^m of a tilt's terms would cancel in those digits (:meth:`_Solver.tilt`); so too
        # the Float coefficients of a dependent coordinate written through the basis, and the integrand's
        # own (selu' = λ·step + λα·e^{−relu(−x)}: λ²α² e^m − λ²α² e^m must be 0, not 1e-15·e^m)
        cov = cov.applyfunc(rational)
        expr = expr.xreplace({f: rational(f) for f in expr.atoms(sp.Float)})
    if not syms:
        return expr
    return _Solver(syms, cov, max_size, tilted).E(expr)


def rational(x: sp.Expr) -> sp.Expr:
    """A Float as the exact binary rational it holds; anything else as it is."""
    return sp.Rational(x) if isinstance(x, sp.Float) else x


class _Solver:
    """The rules of the module docstring for one (basis, nonsingular covariance)."""

    def __init__(self, syms: tuple, cov: Matrix, max_size: float, tilted: bool = False):
        self.syms, self.cov, self.max_size, self.tilted = syms, cov, max_size, tilted
        self.memo: dict = {}
        self.wick_memo: dict = {}
        self.canon_memo: dict = {}

    def E(self, expr: sp.Expr) -> sp.Expr:
        if expr in self.memo:
            return self.memo[expr]
        e = canon(expr, self.syms, self.canon_memo)
        if not e.has(Delta) and ((why := closed_form_blocker(e, self.syms)) is not None or
                                 (why := odd_in_a_kinked_sign(e, self.syms)) is not None):
            raise NoClosedForm(why)
        e = expand_within(e, self.max_size)
        out = sp.Add(*[self.term(t) for t in sp.Add.make_args(e)])
        self.memo[expr] = out
        return out

    def sub_solver(self, syms: tuple, cov: Matrix, expr: sp.Expr) -> sp.Expr:
        return raw_closed_form(expr, syms, cov, self.max_size, self.tilted) if syms else expr

    def term(self, t: sp.Expr) -> sp.Expr:
        syms, n = self.syms, len(self.syms)
        coeff, alpha, signs, erfs, rest = sp.Integer(1), [0] * n, [], [], []
        expo, delta = sp.Integer(0), None
        for f in sp.Mul.make_args(t):
            if not f.has(*syms):
                coeff *= f
                continue
            if isinstance(f, sp.exp):
                expo += f.args[0]
                continue
            b, k = f.as_base_exp()
            if not (k.is_Integer and k > 0):
                raise NoClosedForm(f"factor {f}")
            if b in syms:
                alpha[syms.index(b)] += int(k)
            elif isinstance(b, Sign):           # sign^k = sign^(k mod 2) a.e., before any ∂
                signs += [b.args[0]] * (int(k) % 2)
                rest += [b] * (int(k) % 2)
                continue
            elif isinstance(b, sp.erf):
                erfs += [b.args[0]] * int(k)
            elif isinstance(b, Delta) and delta is None and k == 1:
                delta = b.args[0]
                continue
            elif isinstance(b, Delta):
                raise ValueError(f"a product of Dirac masses on one hyperplane is infinite: {t}")
            else:
                raise NoClosedForm(f"factor {f}")
            rest.append(f)
        others = sp.Mul(*rest)
        if delta is not None:
            w, h = affine(delta, syms)
            if all(x == 0 for x in w):
                if h == 0:
                    raise ValueError(f"a Dirac mass at a sure value is infinite: {t}")
                return sp.Integer(0)
            dens, sub, syms2, cov2 = condition(w, h, syms, self.cov)
            return coeff * dens * self.sub_solver(syms2, cov2, (others * sp.exp(expo)).xreplace(sub))
        if expo != 0:
            return coeff * self.tilt(expo, others)
        lin = [affine(a, syms) for a in signs + erfs]
        if all(h == 0 for _, h in lin) and (sum(alpha) + len(lin)) % 2:
            return sp.Integer(0)
        merged = self.merge_parallel(signs)
        if merged is not None:
            return coeff * self.E(others / sp.Mul(*[Sign(a) for a in signs]) * merged)
        if sum(alpha):
            if not lin:
                return coeff * wick(tuple(alpha), self.cov, self.wick_memo)
            i = next(k for k, a in enumerate(alpha) if a)
            R = others / syms[i]
            return coeff * sp.Add(*[self.cov[i, j] * self.E(sp.diff(R, syms[j]))
                                    for j in range(n) if self.cov[i, j] != 0])
        return coeff * self.base(lin, len(signs))

    def merge_parallel(self, signs: list) -> sp.Expr | None:
        """sign(ℓ+a) sign(ℓ+b) = 1 + sign(ℓ+a) − sign(ℓ+b) (a < b); None if no parallel pair."""
        groups: dict = {}
        for a in signs:
            w, h = affine(a, self.syms)
            groups.setdefault(tuple(w), []).append((h, a))
        for (h1, a1), (h2, a2), *_ in (g for g in groups.values() if len(g) > 1):
            if not (h1 - h2).is_number:
                raise NoClosedForm("parallel kinks with symbolic offsets")
            lo, hi = (a1, a2) if h1 < h2 else (a2, a1)
            other = [Sign(a) for a in signs if a not in (a1, a2)]
            return sp.Mul(*other) * (1 + Sign(lo) - Sign(hi))
        return None

    def tilt(self, q: sp.Expr, g: sp.Expr) -> sp.Expr:
        """E[e^q g] for q of degree ≤ 2 (module doc); ValueError if it diverges."""
        syms, n = self.syms, len(self.syms)
        q = sp.expand(q)
        if not q.is_polynomial(*syms):                 # e.g. exp(sin x), exp(relu x): no tilt
            raise NoClosedForm(f"exp of a non-polynomial {q}")
        P = sp.Poly(q, *syms)
        if P.total_degree() > 2:
            raise NoClosedForm(f"exp of degree {P.total_degree()}")
        A = sp.zeros(n, n)
        b = Matrix([P.coeff_monomial(s) for s in syms])
        for i in range(n):
            for j in range(n):
                A[i, j] = -P.coeff_monomial(syms[i] * syms[j]) * (2 if i == j else 1)
        M = sp.eye(n) + self.cov * A
        det = tidy(M.det())
        cov2 = self.cov
        if not A.is_zero_matrix:
            C = M.inv() * self.cov
            cov2 = Matrix(n, n, lambda i, j: tidy((C[i, j] + C[j, i]) / 2))
        if not A.is_zero_matrix and det.is_number and not cov2.free_symbols and (
                float(det) <= 0 or np.linalg.eigvalsh(np.array(cov2.evalf(), dtype=float)).min() <= 0):
            # (A = 0, the moment generating function, is finite for every Σ ⪰ 0: a nearly singular Σ's
            # rounded eigenvalue ≤ 0 says nothing)
            raise ValueError(f"E[exp({q})·…] diverges (the tilted Gaussian is not integrable)")
        m = cov2 * b
        factor = sp.exp(P.coeff_monomial(1) + tidy((b.T * m)[0, 0]) / 2) / sp.sqrt(det)
        shifted = g.xreplace({s: s + m[k] for k, s in enumerate(syms)})
        inner = self.sub_solver(syms, cov2, shifted)
        if self.tilted:
            # e^m over each term: the terms of one m from the whole integrand meet in quadrant_form (multiplied
            # out here, e^m·1 of E[e^ℓ] and e^m·erf of E[e^ℓ sign ℓ] cancel there, in the quadrants' basis)
            return sp.expand_mul(factor * inner) if inner.has(SignPair, sp.erf) else factor * inner
        inner = inner.replace(SignPair, plain_pair_value)
        if not inner.has(Phi2, sp.erf):
            return factor * inner
        return sp.expand_mul(factor * inner.replace(sp.erf, lambda x: 1 - sp.erfc(x)))

    def base(self, lin: list, nsign: int) -> sp.Expr:
        """Products of ≤ 2 sign/erf factors of linear forms (module doc)."""
        if not lin:
            return sp.Integer(1)
        W = [Matrix(w) for w, _ in lin]
        kap = [tidy(2 * (W[k].T * self.cov * W[k])[0, 0] + (0 if k < nsign else 1)) for k in range(len(lin))]
        if len(lin) == 1:
            return sp.erf(lin[0][1] / sp.sqrt(kap[0]))
        if len(lin) == 2 and lin[0][1] == 0 and lin[1][1] == 0:
            c = tidy((W[0].T * self.cov * W[1])[0, 0])
            return 2 / sp.pi * sp.asin(2 * c / sp.sqrt(kap[0] * kap[1]))
        if len(lin) == 2:
            return offset_pair(lin[0][1], lin[1][1], kap, tidy((W[0].T * self.cov * W[1])[0, 0]))
        raise NoClosedForm(f"{len(lin)} sign/erf factors")


def offset_pair(h1: sp.Expr, h2: sp.Expr, kap: list, c: sp.Expr) -> sp.Expr:
    """E[F₁(ℓ₁ + h₁)·F₂(ℓ₂ + h₂)] for F_k = sign or erf, κ_k = 2 Var ℓ_k (+1 for erf), c = Cov(ℓ₁, ℓ₂):
    erf(x) = E_w sign(x + w) with w ~ N(0, ½) apart, so F_k = sign(X_k + h_k), Var X_k = κ_k/2 and
    Cov(X₁, X₂) = c: the marker :class:`.quadrants.SignPair` (h₁/√κ₁, h₂/√κ₂; ρ = 2c/√(κ₁κ₂)), whose value
    is 4Φ₂(−h₁/σ₁, −h₂/σ₂; ρ) − erfc(h₁/√κ₁) − erfc(h₂/√κ₂) + 1 (σ_k = √(κ_k/2); Φ₂:
    :class:`..symbolic.bivariate.Phi2`; :func:`.quadrants.sign_pair_value`), and which a tilt's e^m sums
    with the single kinks' erf in the quadrants' basis (:func:`.quadrants.quadrant_form`)."""
    return SignPair(h1 / sp.sqrt(kap[0]), h2 / sp.sqrt(kap[1]), tidy(2 * c / sp.sqrt(kap[0] * kap[1])))
