"""The limit of products by a Haar-orthogonal matrix used forward and transposed: conditioning on
the products computed so far (docs/architecture.md, "MatMul by a Haar-orthogonal matrix").

Write the matrix as M = s·(a block of Q), Q Haar-orthogonal on R^N, N = max(rows, cols),
s = √(var·N/cols):  square M = s·Q;  wide (rows < cols) M = s·PQ with P the first ``rows``
coordinates;  tall (rows > cols) M = s·QPᵀ.  Every product is a product by Q:
  * forward M x = s·P(Q x̃)   with x̃ = x (square, wide) or (x, 0) (tall);
  * transposed Mᵀ y = s·P(Qᵀ ỹ) with ỹ = y (square, tall) or (y, 0) (wide),
so each side of Q (its domain and its codomain) is R^N, of which the program sees a block of
N·w coordinates (w = 1, or cols/rows, or rows/cols); the rest is a hidden block.  A vector on a
side is its Z on the seen block and its Z on the hidden block; ⟨a, b⟩ = (1/N) Σ_i a_i b_i tends to
w·E[a b]_seen + (1 − w)·E[a b]_hidden.

**The rule.**  The products so far say Q a_k = b_k (k = 1..K).  Given them, Q maps span{a} onto
span{b} as they say, and the orthogonal complements by an independent Haar-orthogonal matrix.
Gram–Schmidt the pairs into innovations u_k = a_k − Σ_{j<k} (⟨a_k, u_j⟩/‖u_j‖²) u_j with
Q u_k = v_k (v_k the same combination of the b's); then ⟨u_j, u_k⟩ = ⟨v_j, v_k⟩ = δ_jk n_k.  A new
forward product Q x splits into
    Q x = Σ_k c_k v_k + g,    c_k = ⟨x, u_k⟩ / n_k,
where g is Q applied to the residual x − Σ_k c_k u_k: uniform on a sphere of the complement of
span{b}, so in the limit its coordinates (on both blocks) are a fresh centred Gaussian,
independent of every earlier variable, of variance r = ⟨x, x⟩ − Σ_k c_k² n_k.  The pair
(x − Σ c_k u_k, g) is the next innovation (n = r), unless r = 0: then x was in span{a} and the
product is exact.  A transposed product Qᵀ y is the same with the sides exchanged (Qᵀ = Q⁻¹):
Qᵀ y = Σ_k (⟨y, v_k⟩/n_k) u_k + h.

Forward products alone give Σ_k c_k g_k + g: the Gaussian family of the iid rule, with the same
covariances (σ² E[Z^x Z^y]); so the rule is used only for matrices the program uses transposed.
Checks: Qᵀ Q x = x exactly; Mᵀ M x = s²(ρ x + h) with Var h = ρ(1 − ρ)s²E[x²] for a wide M
(a projection on a random subspace of dimension ρN).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

import numpy as np
import sympy as sp

#: a term of a vector on one side of Q: a program vector (its var) or a fresh Gaussian (its symbol)
Term = Union[int, sp.Symbol]
#: a number of the rule: a float, a batch's array (P,), or a sympy expression (symbolic compiles)
Number = Union[float, np.ndarray, sp.Expr]
#: exact coefficients are simplified while they are smaller than this (sympy operation count)
SIMPLIFY_OPS = 60


@dataclass
class SideVector:
    """A vector on one side of Q: a linear combination of terms on the seen block, and of fresh
    Gaussians on the hidden block."""
    seen: dict[Term, Number] = field(default_factory=dict)
    hidden: dict[sp.Symbol, Number] = field(default_factory=dict)

    def plus(self, other: SideVector, factor: Number) -> SideVector:
        """self + factor·other."""
        return SideVector(_combine(self.seen, other.seen, factor), _combine(self.hidden, other.hidden, factor))


def _combine(a: dict, b: dict, factor: Number) -> dict:
    out = dict(a)
    for term, coeff in b.items():
        out[term] = out.get(term, 0) + factor * coeff
    return out


@dataclass(frozen=True)
class HaarShape:
    """Q's sides for an M of ``rows`` x ``cols``: the weight of each side's seen block, and s."""
    domain_seen: float | sp.Expr
    codomain_seen: float | sp.Expr
    scale: sp.Expr

    @staticmethod
    def of(rows: float, cols: float, var: sp.Expr, num: Callable[[float], float | sp.Expr]) -> HaarShape:
        """Square: both sides seen; wide: the codomain's seen block has weight rows/cols; tall: the
        domain's has weight cols/rows.  s = √(var·N/cols)."""
        if rows < cols:
            return HaarShape(1, num(rows / cols), sp.sqrt(var))
        if rows > cols:
            return HaarShape(num(cols / rows), 1, sp.sqrt(var * num(rows / cols)))
        return HaarShape(1, 1, sp.sqrt(var))


class Arithmetic:
    """The numbers of the rule: floats, batch arrays, or sympy expressions, with the ledger's values
    (sympy) converted in and out and a residual variance set to 0 when it is within a tolerance."""

    def __init__(self, to_number: Callable[[sp.Expr], Number], to_sympy: Callable[[Number], sp.Expr],
                 symbolic: bool) -> None:
        self.to_number, self.to_sympy, self.symbolic = to_number, to_sympy, symbolic

    def ratio(self, num: Number, den: Number) -> Number:
        """num/den, 0 where den is 0 (a batch item whose innovation vanished)."""
        if self.symbolic:
            return sp.simplify(num / den) if sp.count_ops(num) + sp.count_ops(den) < SIMPLIFY_OPS else num / den
        if isinstance(den, np.ndarray):
            return np.divide(num, den, out=np.zeros_like(den), where=den != 0)
        return num / den

    def residual(self, value: Number, tolerance: Number) -> Number:
        """A residual variance: 0 where it is within ``tolerance`` of 0 (it cannot be negative)."""
        if self.symbolic:
            value = sp.simplify(value) if sp.count_ops(value) < SIMPLIFY_OPS else value
            if value == 0 or (value.is_number and abs(float(value)) <= tolerance):
                return sp.Integer(0)
            return value
        if isinstance(value, np.ndarray) or isinstance(tolerance, np.ndarray):   # a batch: item by item
            return np.where(np.asarray(value) <= tolerance, 0.0, value)
        return 0.0 if value <= tolerance else float(value)

    @staticmethod
    def is_zero(value: Number) -> bool:
        if isinstance(value, np.ndarray):
            return not np.any(value)
        return value == 0



@dataclass
class Innovation:
    """Q u = v with ⟨u, u⟩ = ⟨v, v⟩ = norm2 (> 0), orthogonal to the earlier innovations; made by
    a transposed product (u the fresh part of Qᵀ y) or a forward one (v the fresh part of Q x)."""
    u: SideVector            # on the domain
    v: SideVector            # on the codomain
    norm2: Number
    transposed: bool


@dataclass
class Member:
    """A product's Ẑ (None when it has no Gaussian part), with its coefficients c_k on the
    innovations that existed when it was made."""
    hat: sp.Symbol | None
    coeffs: dict[int, Number]
    arg: int                   # the program vector it multiplied


@dataclass
class Product:
    """What a Haar product gives the compiler: Z on the seen block of Q's output (before s) as
    {term: coefficient}, and the new Ẑ (None if none) with its covariances {Ẑ': Cov} with itself
    and the earlier Ẑ's of its direction."""
    seen: dict[Term, Number]
    hat: sp.Symbol | None
    covs: dict[sp.Symbol, Number]


class HaarMatrix:
    """The products by one Haar-orthogonal matrix so far, as Gram–Schmidt innovations.

    ``inner(a, b)`` is E[a·b] for two terms on the seen block (the compiler's ledger; it returns
    a sympy value and records its estimate); ``tolerance(scale, spread)`` the absolute size below
    which a residual variance counts as 0, for ⟨x, x⟩ = scale and coefficients of total size
    √spread (the inner products' errors enter times spread); ``fresh(name)`` a new symbol."""

    def __init__(self, shape: HaarShape, arithmetic: Arithmetic, inner: Callable[[Term, Term], sp.Expr],
                 tolerance: Callable[[Number, Number], Number], fresh: Callable[[str], sp.Symbol]) -> None:
        self.shape, self.arith = shape, arithmetic
        self.inner_terms, self.tolerance, self.fresh_symbol = inner, tolerance, fresh
        self.innovations: list[Innovation] = []
        self.members: dict[bool, list[Member]] = {False: [], True: []}
        self.cov: dict[tuple[sp.Symbol, sp.Symbol], Number] = {}    # Cov of two Ẑ's of one direction
        self.direction: dict[sp.Symbol, bool] = {}                    # Ẑ -> its direction
        self.hidden_variance: dict[sp.Symbol, Number] = {}           # hidden-block Gaussians (independent)

    # ---- inner products
    def expectation(self, a: Term, b: Term) -> Number:
        """E[a·b] of two seen terms: Ẑ's of one direction by their covariance, of two directions 0
        (independent), anything else by the ledger."""
        if a in self.direction and b in self.direction:
            if self.direction[a] != self.direction[b]:
                return 0
            return self.cov[(a, b)]
        return self.arith.to_number(self.inner_terms(a, b))

    def inner(self, a: SideVector, b: SideVector, seen_weight: Number) -> Number:
        """⟨a, b⟩ = w·E[a b]_seen + (1 − w)·E[a b]_hidden (the hidden blocks are independent Gaussians)."""
        zero = self.arith.is_zero
        seen = sum((ca * cb * self.expectation(ta, tb) for ta, ca in a.seen.items() for tb, cb in b.seen.items()
                    if not (zero(ca) or zero(cb))), 0)
        if seen_weight == 1:
            return seen
        hidden = sum((ca * b.hidden[t] * self.hidden_variance[t] for t, ca in a.hidden.items() if t in b.hidden), 0)
        return seen_weight * seen + (1 - seen_weight) * hidden

    # ---- products
    def product(self, arg: int, name: str, transposed: bool) -> Product:
        """Q x̃ (or Qᵀ ỹ) for the program vector ``arg``: Ẑ + Σ_{k of the other direction} c_k·image_k,
        where Ẑ = Σ_{k of this direction} c_k·image_k + (fresh part) is Gaussian.  Its covariance with
        an earlier Ẑ' of this direction is ⟨x, x'⟩ − Σ_{k of the other direction, before x'} c_k c'_k n_k."""
        w_in, w_out = ((self.shape.codomain_seen, self.shape.domain_seen) if transposed
                       else (self.shape.domain_seen, self.shape.codomain_seen))
        x = SideVector({arg: 1})
        norm2 = self.inner(x, x, w_in)
        coeffs = self.coefficients(x, w_in, transposed)
        residual, own, other, left, spread = x, SideVector(), SideVector(), norm2, 1
        for k, c in coeffs.items():
            inn = self.innovations[k]
            given, image = (inn.v, inn.u) if transposed else (inn.u, inn.v)
            residual = residual.plus(given, -c)
            if inn.transposed == transposed:
                own = own.plus(image, c)
            else:
                other = other.plus(image, c)
            left = left - c * c * inn.norm2
            spread = spread if self.arith.symbolic else spread + np.abs(c)
        left = self.arith.residual(left, self.tolerance(norm2, spread * spread))
        if self.arith.is_zero(left):         # in the span of the earlier products: exact
            self.members[transposed].append(Member(None, coeffs, arg))
            return Product(own.plus(other, 1).seen, None, {})
        hat = self.fresh_symbol(name)
        covs = self.covariances(x, w_in, coeffs, transposed)
        covs[hat] = sum((c * c * self.innovations[k].norm2 for k, c in coeffs.items()
                         if self.innovations[k].transposed == transposed), 0) + left
        self.record(hat, covs, transposed)
        fresh = SideVector({hat: 1}).plus(own, -1)                     # the fresh part, as Ẑ − Σ own
        if w_out != 1:
            hidden = self.fresh_symbol(name + "_hidden")
            self.hidden_variance[hidden] = left
            fresh.hidden[hidden] = 1
        self.innovations.append(Innovation(fresh, residual, left, True) if transposed
                                else Innovation(residual, fresh, left, False))
        self.members[transposed].append(Member(hat, coeffs, arg))
        return Product(other.plus(SideVector({hat: 1}), 1).seen, hat, covs)

    def coefficients(self, x: SideVector, w_in: Number, transposed: bool) -> dict[int, Number]:
        """c_k = ⟨x, given_k⟩/n_k over the innovations, the zero ones left out."""
        out = {}
        for k, inn in enumerate(self.innovations):
            c = self.arith.ratio(self.inner(x, inn.v if transposed else inn.u, w_in), inn.norm2)
            if not self.arith.is_zero(c):
                out[k] = c
        return out

    def covariances(self, x: SideVector, w_in: Number, coeffs: dict[int, Number],
                    transposed: bool) -> dict[sp.Symbol, Number]:
        """Cov(Ẑ, Ẑ') for the earlier Ẑ' of this direction."""
        out = {}
        for member in self.members[transposed]:
            if member.hat is None:
                continue
            cov = self.inner(x, SideVector({member.arg: 1}), w_in) - sum(
                (c * member.coeffs[k] * self.innovations[k].norm2 for k, c in coeffs.items()
                 if k in member.coeffs and self.innovations[k].transposed != transposed), 0)
            out[member.hat] = cov
        return out

    def record(self, hat: sp.Symbol, covs: dict[sp.Symbol, Number], transposed: bool) -> None:
        self.direction[hat] = transposed
        for other, value in covs.items():
            self.cov[(hat, other)] = self.cov[(other, hat)] = value
