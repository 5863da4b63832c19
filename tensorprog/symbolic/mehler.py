"""The numbers of the Mehler series (see :mod:`..expect.series` for the rule and its bound).

Coefficients α_k(a) = E[φ(√a z) h_k(z)] of a numpy function φ at many variances by one matrix
product (the trapezoidal rule on [−13, 13], error estimated by the rule at step 2h: every other node), their
tail and error estimates, Horner's sum Σ_k ρ^k α_k β_k, and the stated error.  Also the grid
tape's operations of the series (:mod:`.grid`): a *row* operation packs one variance's
coefficients with their tail, error and norm (:func:`pack`), computed once per input; *cell*
operations sum the series and its bound for a pair (:func:`mehler_value`, :func:`mehler_error`).
The sympy heads :class:`HermiteRow`, :class:`MehlerValue`, :class:`MehlerError`, :class:`Mean`
and :class:`MeanError` stand for them in the expressions a replay records.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, NamedTuple, Sequence

import numpy as np
import sympy as sp

EPS = np.finfo(float).eps
Fn = Callable[[np.ndarray], np.ndarray]
#: the extended precision the basis is computed in (x87's 80-bit format where numpy has it)
LD = np.longdouble
#: the error of one coefficient from φ's float64 values F_i = fl(fl(φ(fl(√a·z_i)))·√w_i) (their
#: roundings, φ's own libm error, the argument's rounding times φ's condition), relative to
#: √S = ‖F‖₂: the products with the basis are exact but for ~10⁻³u√S (:meth:`Folded.product`), so this
#: is what is left of a coefficient's rounding.  Against the same rule with φ, the basis and the sums in
#: 80-bit floats and in 110-bit mpmath (tests/test_series_bounds.py, bench/mehler_coefficients.py: tanh,
#: SiLU, their squares, their derivatives and the derivatives' squares, K = 8 … 384, variances
#: 0.002–4.4): max_k |α̃_k − α_k| ≤ 1.1 ε√S, and the stated δ = max_k |α̃_k − α̃'_k| + this (the rule at
#: 2h differs by its values' rounding too) covers it with room.  (The float64 products' own
#: accumulation, 5–12 ε√S, dominated the coefficients' error before the products were exact.)
COEFF_ROUNDING = 1.5 * EPS
#: the rounding of S̃ = Σ_i F_i² relative to S (measured as above: ≤ 3.5 ε)
SQUARE_ROUNDING = 4 * EPS
#: whether the rule runs in extended precision (φ in long double on the core window, exact products:
#: δ ≤ 0.75 ε√S, tests/test_series_bounds.py) or in plain float64 (φ and the products in float64, δ
#: with :data:`PLAIN_COEFF_ROUNDING`: 4–14 ε√S, about a third of the kernels' stated errors, but the
#: pack takes half the time: bench/series_kernels.py, tanh and SiLU at N = 300 and 1000)
EXTENDED = False
#: the rounding of one coefficient of the plain float64 rule (products by BLAS: their accumulation,
#: 5–12 ε√S, dominates), relative to √S: against the same rule in 80-bit floats (tanh, SiLU, their
#: squares and derivatives' squares; K = 8, 64, 256; variances 0.002–4) max_k |α̃_k − α_k| ≤ 3.1 ε√S, and
#: δ = max_k |α̃_k − α̃'_k| + this (the rule at 2h differs by its own rounding) ≥ 1.8× it everywhere
PLAIN_COEFF_ROUNDING = 2 * EPS


#: the rule's half-width: beyond |z| = T, pdf(z)·h_k(z)·φ is below 1e-18 (|h_k(z)| e^{−z²/4} ≤ 1)
HALF_WIDTH = 13.0
#: the largest step: the trapezoidal rule's error on a Gaussian times a polynomial of degree d is about
#: e^{−2π²/h²}·(2π/h)^d — below 10⁻²⁰ at 2h (the error estimate's rule) for the orders up to which
#: 1.8/√(4K+2) (:func:`step_for`) allows it
MAX_STEP = 0.25


def step_for(K: int, largest_variance: float) -> float:
    """The trapezoidal step for coefficients up to order K: h_k oscillates with wavenumber up to
    √(4K+2)/2, and φ(√a ·)'s strip of analyticity narrows like 1/√a (tanh's poles at ±iπ/(2√a): at
    a = 2 the rule at step 2h = 0.1 is good to ~10⁻¹⁸, and the step follows 1/√a on both sides of it,
    up to :data:`MAX_STEP`: a small variance's φ(√a z) is a low polynomial to ulps, the Gaussian's
    rule then limits)."""
    a = max(largest_variance, 1e-300)
    return ladder(min(MAX_STEP, 1.8 / np.sqrt(4 * K + 2), 0.05 * np.sqrt(2.0 / a)))


def ladder(h: float) -> float:
    """h rounded down to a rung 2^{j/8} (j an integer; 9 % apart), itself rounded down to 20 significant
    bits: the functions packed at one layer's variances (a mean's and a series' rows, of slightly
    different largest variances) meet one step, and share their long double values
    (:meth:`PackCache.memo`); the nodes i·h are exact in float64."""
    rung = 2.0 ** (np.floor(8 * np.log2(h)) / 8)
    m, e = np.frexp(rung)
    return float(np.ldexp(np.floor(np.ldexp(m, 20)), e - 20))


@lru_cache(maxsize=64)
def ld_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(z, G) of the trapezoidal rule of step h on [−T, T] in np.longdouble (Σ w_i f(z_i) ≈ E f(z),
    z ~ N(0, 1), w_i = h·pdf(z_i)): G[k, i] = √w_i h_k(z_i), k ≤ K (the first rows of
    :func:`ld_rows`, the same numbers for every K: a layer's mean and series rows share one)."""
    z, G = ld_rows(max(64, 1 << max(K, 1).bit_length()), h)
    return z, G[:K + 1]


@lru_cache(maxsize=32)
def ld_rows(K: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ld_basis` to order K, by the recurrence h_{k+1} = (z h_k − √k h_{k−1})/√(k+1) on the scaled
    values (bounded: |h_k(z)| e^{−z²/4} ≤ 1).  The nodes z_i = i·h are exact (a 53-bit h times an
    integer below 2¹¹ in a 64-bit significand)."""
    n = int(np.ceil(HALF_WIDTH / h))
    z = LD(h) * np.arange(-n, n + 1).astype(LD)
    sw = np.sqrt(LD(h) * np.exp(-z * z / 2) / np.sqrt(2 * np.arccos(LD(-1))))
    G = np.empty((K + 1, len(z)), dtype=LD)
    G[0] = sw
    if K:
        G[1] = z * sw
    roots, tmp = np.sqrt(np.arange(K + 1).astype(LD)), np.empty(len(z), dtype=LD)
    for k in range(1, K):                 # (z·G_k − √k·G_{k−1})/√(k+1), in place: the same roundings
        g = G[k + 1]
        np.multiply(z, G[k], out=g)
        np.multiply(roots[k], G[k - 1], out=tmp)
        np.subtract(g, tmp, out=g)
        np.divide(g, roots[k + 1], out=g)
    return z, G


@lru_cache(maxsize=16)
def hermite_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(z, G) of :func:`ld_basis` rounded to float64 (z_i = fl(i·h), the points φ is evaluated at)."""
    z, G = ld_basis(K, h)
    return z.astype(float), G.astype(float)


@dataclass(frozen=True)
class Coefficients:
    """Hermite coefficients of one function at several variances, with what the bound needs.

    ``alpha`` (V, K+1): α̃_k for each variance; ``tail`` (V,): an upper estimate of
    T(K) = Σ_{k>K} α_k²; ``err`` (V,): of ‖α − α̃‖₂ (k ≤ K); ``norm`` (V,): ‖α̃‖₂ (≤ √(E φ²) + err);
    ``square`` (V,): E φ(√a z)² (the diagonal of E φψ when φ = ψ); ``square_err`` (V,): its error
    estimate (the rule at step 2h, plus rounding); ``sup`` (V,): of max_k |α_k − α̃_k| (the rule at
    step 2h, plus :data:`COEFF_ROUNDING`·√S, the products' bound and u·max_k |α̃_k|: what the grid
    tape's per-cell bound uses)."""
    alpha: np.ndarray
    tail: np.ndarray
    err: np.ndarray
    norm: np.ndarray
    square: np.ndarray
    square_err: np.ndarray
    sup: np.ndarray | None = None

    @property
    def K(self) -> int:
        return self.alpha.shape[1] - 1

    def truncate(self, K: int) -> "Coefficients":
        """The same coefficients up to order K ≤ self.K: the dropped ones join the tail (their
        error, at most err, is counted in the tail through (√T + err)²)."""
        return Coefficients(self.alpha[:, :K + 1], self.tail_at(K), self.err,
                            np.sqrt(np.sum(self.alpha[:, :K + 1] ** 2, 1)), self.square, self.square_err, self.sup)

    def tail_at(self, K: int) -> np.ndarray:
        """The tail of :meth:`truncate` (K): (√T + ‖α̃_{K<k}‖ + err)² (without the rest of it)."""
        extra = np.sqrt(np.sum(self.alpha[:, K + 1:] ** 2, axis=1))
        return (np.sqrt(self.tail) + extra + self.err) ** 2


def gamma(n: int) -> float:
    """γ_n = nu/(1 − nu), u = ε/2: a dot product of n terms in float64, in any order, errs by at most
    γ_n Σ|x_i y_i| (Higham, Accuracy and Stability, §3.1)."""
    return n * (EPS / 2) / (1 - n * (EPS / 2))


def split_bits(n: int) -> int:
    """The largest β with n·2^{2β+1} ≤ 2⁵³: a dot product of n terms, each a product of an integer of
    magnitude ≤ 2^{β+1} (a folded sum of two) and one ≤ 2^β (times one power of two), has every partial
    sum an integer below 2⁵³ (times that power): exact in float64, in any order of summation and
    with or without fused operations."""
    beta = 26
    while n * 2.0 ** (2 * beta + 1) > 2.0 ** 53:
        beta -= 1
    return beta


def split(X: np.ndarray, beta: int, top: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hi, rest, 2^e) of float64 rows X (V, n): 2^e > ``top`` ≥ max_i |X_i| per row (a power of two) and
    hi = 2^{e−β}·rint(X·2^{β−e}), by (X + c) − c with c = 1.5·2^{52}·2^{e−β} (X + c lies in c's binade,
    whose spacing is 2^{e−β}: rounded to nearest there, and − c is exact) — an integer of magnitude
    ≤ 2^β times 2^{e−β} — and rest = X − hi, exact (hi is a multiple of 2^{e−β}, itself a multiple of
    ulp(X) where X is not 0, and |X − hi| ≤ min(|X|, 2^{e−β−1}))."""
    _, e = np.frexp(top)
    c = np.ldexp(1.5, e - beta + 52)[:, None]
    hi = X + c
    hi -= c
    return hi, X - hi, np.ldexp(1.0, e)


@dataclass(frozen=True)
class Half:
    """One parity's half of a folded basis (:class:`Folded`), split for :meth:`Folded.product`: the
    orders k ≡ p (mod 2) at their nodes (node-major, (n, m)).  ``hi``: fl(G) rounded to β bits of its
    order's power of two 2^{f_k} > max_i |G_ki| (an integer of magnitude ≤ 2^β times 2^{f_k−β}, held
    exactly); ``stack``: fl(G) above fl(G − hi) (2n, m), G the long double basis; ``top``: max_k 2^{f_k};
    ``l1``: max_k ‖G_k‖₁ (rounded up)."""
    hi: np.ndarray
    stack: np.ndarray
    top: float
    l1: float


def half_basis(G: np.ndarray, beta: int, scale: np.ndarray) -> Half:
    """The :class:`Half` of long double G (node-major (n, m)): hi from fl(G) split by columns (orders)
    by 2^{f_k} > ``scale`` ≥ max_i |fl(G_ki)| (one scale per order for every node set of a rule: their
    exact parts add exactly, :func:`_rule`), and fl(G − hi) (G − hi is exact in long double: hi is a
    multiple of ulp(fl(G)) ≥ ulp_ld(G))."""
    G64 = G.astype(float)
    if G64.size:
        hi, _, pow2 = split(np.ascontiguousarray(G64.T), beta, scale)
        hi, top = hi.T, float(pow2.max())
    else:
        hi, top = G64, 0.0
    rest = (G - hi).astype(float)
    l1 = float(np.max(np.sum(np.abs(G64), axis=0), initial=0.0)) * (1 + 1e-12)
    return Half(np.ascontiguousarray(hi), np.ascontiguousarray(np.concatenate([G64, rest], axis=0)), top, l1)


@dataclass(frozen=True)
class Folded:
    """A symmetric node set folded by parity: h_k(−z) = (−1)^k h_k(z), so with F the weighted
    values at the nodes, Σ_i F_i G[k, i] = Σ_{z_i>0} (F(z_i) ± F(−z_i)) G[k, i] (+ the node z = 0
    for even k): the even orders from F's even part, the odd ones from its odd part, each a
    product of half the nodes by half the orders (a quarter of the work, twice).  A part that is
    0 (φ odd, or even: tanh, tanh², …) skips its product.  The even half's nodes are z = 0 (if a
    node) then the z > 0; each half split (:class:`Half`) with β = :func:`split_bits` of its nodes."""
    pos: slice               # the nodes z > 0, ascending
    neg: slice               # their mirrors −z, in the same order
    zero: np.ndarray         # the index of z = 0 (empty if not a node)
    even: Half               # G[0::2] at [z = 0,] z > 0
    odd: Half | None         # G[1::2] at z > 0 (None for K = 0)
    beta: int

    def product(self, hi: np.ndarray, rest: np.ndarray, top: np.ndarray, K: int,
                l1: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(the exact part, the rounded part (V, K+1), a bound per row on each coefficient's error against
        the long double basis G (V,)) of (hi + rest) @ Gᵀ for values split by :func:`split` (hi: integers
        of magnitude ≤ 2^β times 2^{e−β}, 2^e = ``top``; |rest| ≤ 2^{e−β−1}), an Ozaki split: with
        G = G₁ + G_r and the parts folded,

            (X₁ + X_r)·G = X₁·G₁ + X₁·G_r + X_r·G,

        the first exact — X₁ = hi(z) ± hi(−z) is an exact sum of two such integers (≤ 2^{β+1}), and
        :func:`split_bits` — the other two one float64 product [X_r X₁]·[fl(G); fl(G_r)], X_r =
        fl(rest(z) ± rest(−z)).  The second's error: the roundings of X_r (u|X_r|, |X_r| ≤ 2^{e−β}), of
        fl(G) (u|G|) and of G_r (u·2^{f−β−1}), and the product's γ_{2n}·(Σ|X_r||G| + Σ|X₁||G_r|)
        (:func:`gamma`).  Charged per row as (γ_{2n} + 3u)(1 + 10⁻⁷)·2^{−β}·(2^e max_k ‖G_k‖₁ +
        ‖X₁‖₁ max_k 2^{f_k}), ‖X₁‖₁ ≤ l1 + n·2^{e−β} (``l1`` ≥ the row's ‖hi + rest‖₁): about
        2^{−β}n^{3/2}u·√S."""
        exact, inexact = np.zeros((hi.shape[0], K + 1)), np.zeros((hi.shape[0], K + 1))
        bound = np.zeros(hi.shape[0])
        zero = len(self.zero)
        for half, sign, start in ((self.even, 1.0, 0), (self.odd, -1.0, 1)):
            if half is None:
                continue
            n = half.hi.shape[0]
            buf = np.empty((hi.shape[0], 2 * n))               # [X_r X₁]: the folded parts, side by side
            xr, x1 = buf[:, :n], buf[:, n:]
            fold_op = np.add if sign > 0 else np.subtract
            first = zero if sign > 0 else 0
            if first:
                x1[:, 0], xr[:, 0] = hi[:, self.zero[0]], rest[:, self.zero[0]]
            fold_op(hi[:, self.pos], hi[:, self.neg], out=x1[:, first:])
            fold_op(rest[:, self.pos], rest[:, self.neg], out=xr[:, first:])
            if not buf.any():                                # φ of the other parity (tanh: its even part)
                continue
            exact[:, start::2] = x1 @ half.hi
            inexact[:, start::2] = buf @ half.stack
            step = 2.0 ** -self.beta
            bound += (gamma(2 * n) + 1.5 * EPS) * (1 + 1e-7) * step * (
                top * half.l1 + (l1 + n * top * step) * half.top)
        return exact, inexact, bound


    def plain(self, F: np.ndarray, K: int) -> np.ndarray:
        """F @ fl(G)ᵀ (V, K+1) by the parity fold in plain float64 (:data:`EXTENDED` off)."""
        out = np.zeros((F.shape[0], K + 1))
        plus, minus = F[:, self.pos], F[:, self.neg]
        even = plus + minus
        if len(self.zero):
            even = np.concatenate([F[:, self.zero], even], axis=1)
        if np.any(even):
            out[:, 0::2] = even @ self.even.stack[:self.even.hi.shape[0]]
        if self.odd is not None:
            odd = plus - minus
            if np.any(odd):
                out[:, 1::2] = odd @ self.odd.stack[:self.odd.hi.shape[0]]
        return out


def fold(z: np.ndarray, G: np.ndarray, beta: int, scale: np.ndarray) -> Folded:
    """The parity fold of the nodes z (symmetric about 0, ascending) and their long double basis G
    (:class:`Folded`), split with β bits by the per-order scales ``scale`` (:func:`half_basis`)."""
    n, odd = divmod(len(z), 2)
    first = n + odd                                  # the first node z > 0
    if not np.array_equal(z[first:], -z[n - 1::-1] if n else z[:0]) or (odd and z[n] != 0):
        raise ValueError("the parity fold needs nodes symmetric about 0")
    pos = slice(first, len(z))
    zero = np.arange(n, n + odd)
    even = np.concatenate([G[0::2][:, zero], G[0::2][:, pos]], axis=1).T
    return Folded(pos, slice(n - 1, None, -1) if n else slice(0, 0), zero, half_basis(even, beta, scale[0::2]),
                  half_basis(G[1::2][:, pos].T, beta, scale[1::2]) if G.shape[0] > 1 else None, beta)


@lru_cache(maxsize=64)
def folded_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray, Folded, Folded]:
    """(z, √w in float64, the fold of the rule's every other node z[::2] — the rule of step 2h — and
    the fold of the others z[1::2]) (:func:`ld_basis`): the rule of step h is the sum of the two.  Both
    split with one β, that of :func:`split_bits` of all the folded nodes, and one scale per order, so
    that the sum of their exact parts is exact (:func:`_rule`)."""
    z, G = ld_basis(K, h)
    beta = split_bits(len(z) // 2 + 1)
    scale = np.max(np.abs(G.astype(float)), axis=1)
    return (z.astype(float), G[0].astype(float), fold(z[::2], G[:, ::2], beta, scale),
            fold(z[1::2], G[:, 1::2], beta, scale))


#: the core window, |z| ≤ CORE_Z: φ in long double there (where it can be), in float64 outside it — whose
#: values' error is charged per row (:data:`FLOAT_VALUE_ROUNDINGS`); where that charge exceeds
#: CORE_CHARGE·ε√S for some row (φ growing: SiLU² at a = 4.4), the window widens to WIDE_Z.  At 5, a
#: bounded φ's charge at 5.5 is ≤ 0.01 ε√S, SiLU's ≤ 0.1 ε√S (the Gaussian's mass beyond 5.5)
CORE_Z, WIDE_Z, CORE_CHARGE = 5.5, 7.0, 0.15
#: the error of a float64 value F_i = √w_i φ(x_i), x_i = √a z_i, relative to |F_i|, in units of u:
#: the argument's three roundings (√a, z_i and their product) times φ's condition number |xφ′(x)/φ(x)|
#: — at most 1 + |x| for the activations here (tanh, sigmoid, softplus, SiLU, Mish, ELU, softsign:
#: their values vanish at most like x·e^x, or grow at most like a power of x), charged with the call's
#: largest |x| — plus φ's own (libm's float64 functions within 4 ulp: 8) and √w's and the product's
#: roundings (2): (3(1 + |x|) + 10)·u
FLOAT_VALUE_ROUNDINGS = 10.0
#: the unit roundoff of the long double format (2⁻⁶⁴ for x87's 80 bits; ε/2 where it is float64)
UNIT_LD = float(np.finfo(LD).eps) / 2
#: the error of one coefficient from φ's long double values on the core window (libm's long double
#: functions within a few ulp, a few operations, the argument's rounding times φ's condition number,
#: the basis' recurrence: ≤ 49 u_ld·max_i |G_ki| at k = 512), relative to √S: against a 110-bit mpmath
#: rule (tests/test_series_bounds.py: tanh, SiLU, (1 − tanh²)², SiLU², SiLU′²; K up to 512; variances
#: 0.002–4) ≤ 53 u_ld √S (SiLU², whose values grow like z²; ≤ 7 u_ld √S for the others)
LD_COEFF_ROUNDING = 128 * UNIT_LD
#: the same for S = Σ_i F_i² (F's error twice, the long double sums')
LD_SQUARE_ROUNDING = 128 * UNIT_LD


@dataclass(frozen=True)
class Rule:
    """What :func:`_rule` gives: α̃ and α̃' (the rules at h and 2h, (V, K+1)), S̃ and S̃', and per row a
    floor of each coefficient's error beside the two rules' difference: the values' (long double on
    the core window, float64 outside it; or float64 throughout, :data:`COEFF_ROUNDING`), the
    products' (:meth:`Folded.product`, both rules) and u·max_k |α̃_k| (each coefficient's exact and
    rounded products added in float64); and S's."""
    alpha: np.ndarray
    square: np.ndarray
    coarse: np.ndarray
    coarse_square: np.ndarray
    floor: np.ndarray
    square_floor: np.ndarray
    exact: bool = True          # the products exact (else plain float64: :data:`EXTENDED`)


def evaluate(fn: Fn, points: np.ndarray, memo: dict | None = None) -> tuple[np.ndarray, bool]:
    """(φ at the long double ``points``, whether in long double): ``fn`` on them, or, where it gives
    float64 (a function without long double loops, or one evaluated in float64: what
    :class:`.tape.HermiteArg` hands over when its constants are not all held exactly), its values there
    (at the points' float64 roundings), or where it has no loop for them (TypeError) or np.longdouble
    is float64 itself, ``fn`` on the points' float64 roundings.  ``memo``: handed to ``fn`` (a
    :meth:`.tape.HermiteArg.function`, whose heads' values at these points it keeps) when given."""
    if np.finfo(LD).eps < EPS:
        try:
            got = np.asarray(fn(points) if memo is None else fn(points, memo=memo))
        except TypeError:
            got = None
        if got is not None and got.dtype in (LD, np.float64):
            return np.broadcast_to(got, points.shape), got.dtype == LD
    return np.broadcast_to(np.asarray(fn(points.astype(float)), dtype=float), points.shape), False


def core_values(fn: Fn, variances: np.ndarray, root: np.ndarray, z: np.ndarray, sw: np.ndarray,
                zl: np.ndarray, swl: np.ndarray, d: int, F: np.ndarray,
                memo: dict | None) -> tuple[np.ndarray, bool, np.ndarray]:
    """φ's values for :func:`_rule` with the core window of half-width d nodes about the middle one: the
    weighted float64 values F_i = fl(fl(φ(fl(√a·z_i)))·√w_i) outside it; on it √w_i·φ at the core's long
    double points (:func:`evaluate`; kept in memo[("points", d)]) in long double, or their float64
    values (all written into F, rounded); whether those are long double;
    and per row the charge of the float64 values, ‖c ∘ F_outer‖₂·u with c_i = 3(1 + |x_i|) +
    :data:`FLOAT_VALUE_ROUNDINGS` (|ΔF_i| ≤ c_i·u·|F_i|)."""
    n, c = len(z), len(z) // 2
    left, right = slice(0, c - d), slice(c + d + 1, n)
    charge = np.zeros(len(root))
    if not EXTENDED:                                        # the plain rule: φ in float64 at every node
        np.multiply(np.broadcast_to(np.asarray(fn(root[:, None] * z), dtype=float), F.shape), sw, out=F)
        return F[:, c - d:c + d + 1], False, charge
    if d < c:                                               # float64 φ outside the core
        zo = np.concatenate([z[left], z[right]])
        xo = root[:, None] * zo
        got = np.broadcast_to(np.asarray(fn(xo), dtype=float), xo.shape)
        np.multiply(got[:, :c - d], sw[left], out=F[:, left])
        np.multiply(got[:, c - d:], sw[right], out=F[:, right])
        np.abs(xo, out=xo)
        xo *= 3.0
        xo += 3.0 + FLOAT_VALUE_ROUNDINGS
        xo[:, :c - d] *= F[:, left]
        xo[:, c - d:] *= F[:, right]
        charge = np.sqrt(np.einsum("ij,ij->i", xo, xo)) * (EPS / 2)
    points = None if memo is None else memo.get(("points", d))
    if points is None:
        points = np.sqrt(np.clip(variances, 0.0, None).astype(LD))[:, None] * zl[c - d:c + d + 1]
        if memo is not None:
            memo[("points", d)] = points
    vals, accurate = evaluate(fn, points, None if memo is None else memo.setdefault(d, {}))
    core = slice(c - d, c + d + 1)
    if accurate:
        vals = vals * swl[core]
        F[:, core] = vals
    else:
        np.multiply(vals, sw[core], out=F[:, core])
    return vals, accurate, charge


def _rule(fn: Fn, variances: np.ndarray, K: int, h: float, memo: dict | None = None) -> Rule:
    """The coefficients (V, K+1) and E φ(√a z)² (V,) for each variance by the trapezoidal rule of step
    h (geometric convergence for φ analytic in a strip), and the same by its every other node (the
    rule of step 2h, for the error estimate: no new evaluation of φ).  The weighted values
    F_i = √w_i φ(√a z_i): on the core window |z_i| ≤ :data:`CORE_Z` in long double where φ allows
    (:func:`evaluate`; √a, z_i and √w_i in long double), in float64 outside it; split once
    (:func:`split`, by 2^e > √S(1 + 10⁻⁶) ≥ max_i |F_i|) with the core's rest fl(F^ld − hi) (exact in
    long double: |F^ld − hi| ≤ 2^{e−β−1}(1 + 2⁻⁵⁰)); the products with the basis exact but for a small
    bound (:meth:`Folded.product`) by the parity fold, on one BLAS thread (:func:`one_thread`).
    ``memo``: a dict for these variances and h (:meth:`PackCache.memo`): the core's long double points
    under ("points", d), and φ's heads' values there under d (:func:`evaluate`)."""
    z, sw, coarse, others = folded_basis(K, h)
    zl, Gl = ld_basis(K, h)
    n, c = len(z), len(z) // 2
    root = np.sqrt(np.clip(variances, 0.0, None))
    F = np.empty((len(root), n))
    d = min(c, int(CORE_Z / h))
    vals, accurate, charge = core_values(fn, variances, root, z, sw, zl, Gl[0], d, F, memo)
    if accurate and d < c:
        top = np.sqrt(np.einsum("ij,ij->i", F, F))
        if np.any(charge > CORE_CHARGE * EPS * top):     # φ growing: a wider window
            d = min(c, int(WIDE_Z / h))
            vals, accurate, charge = core_values(fn, variances, root, z, sw, zl, Gl[0], d, F, memo)
    core = slice(c - d, c + d + 1)
    Fl = vals
    square = np.einsum("ij,ij->i", F, F)
    if not EXTENDED:                                         # the plain float64 rule
        with one_thread():
            alpha, alpha2 = others.plain(F[:, 1::2], K), coarse.plain(F[:, ::2], K)
        alpha += alpha2
        alpha2 *= 2
        return Rule(alpha, square, alpha2, 2 * np.einsum("ij,ij->i", F[:, ::2], F[:, ::2]),
                    PLAIN_COEFF_ROUNDING * np.sqrt(square), SQUARE_ROUNDING * square, False)
    hi, rest, top = split(F, coarse.beta, np.sqrt(square) * (1 + 1e-6))
    if accurate:
        rest[:, core] = Fl - hi[:, core]
        # S = Σ (hi + rest)²: Σ hi² exact (N·2^{2β} ≤ 2⁵³ of its quanta, split_bits), the rest within
        # γ_{N+1}·(2Σ|hi||rest| + Σ rest²) ≤ 2^{−β}·N·u·S; then rounded to float64 (u·S)
        square = np.einsum("ij,ij->i", hi, hi) + (2 * np.einsum("ij,ij->i", hi, rest) + np.einsum("ij,ij->i", rest, rest))
        coarse_square = 2 * (np.einsum("ij,ij->i", hi[:, ::2], hi[:, ::2]) + (
            2 * np.einsum("ij,ij->i", hi[:, ::2], rest[:, ::2]) + np.einsum("ij,ij->i", rest[:, ::2], rest[:, ::2])))
        # |Σ_outer ΔF_i G_ki| ≤ ‖ΔF_outer‖₂·‖G_k‖₂ (‖G_k‖₂ ≤ 1.01: the rule's orthonormality)
        floor = LD_COEFF_ROUNDING * np.sqrt(square) + 1.01 * charge
        square_floor = (LD_SQUARE_ROUNDING + EPS / 2 + n * 2.0 ** -coarse.beta * EPS) * square + \
            2.1 * charge * np.sqrt(square)
    else:
        coarse_square = 2 * np.einsum("ij,ij->i", F[:, ::2], F[:, ::2])
        floor = COEFF_ROUNDING * np.sqrt(square)
        square_floor = SQUARE_ROUNDING * square
    l1 = np.sqrt(n * square) * (1 + 1e-6)                 # ≥ ‖F‖₁ (Cauchy–Schwarz)
    with one_thread():
        exact, inexact, bc = coarse.product(hi[:, ::2], rest[:, ::2], top, K, l1)
        exact2, inexact2, bo = others.product(hi[:, 1::2], rest[:, 1::2], top, K, l1)
    # the rule at 2h: 2·fl(E + I); at h: fl((E + E′) + fl(I + I′)), E + E′ exact (one β and one scale
    # per order: at most (n + n′)·2^{2β+1} quanta, split_bits), fl(I + I′) within u|I + I′|
    exact2 += exact
    inexact2 += inexact
    small = (EPS / 2) * np.max(np.abs(inexact2), axis=1, initial=0.0)
    exact2 += inexact2
    alpha = exact2
    exact += inexact
    exact *= 2
    floor = floor + bc + bo + small + 2 * bc + (EPS / 2) * np.max(np.abs(alpha), axis=1, initial=0.0)
    return Rule(alpha, square, exact, coarse_square, floor, square_floor)


@lru_cache(maxsize=1)
def _controller():
    from threadpoolctl import ThreadpoolController      # imported when coefficients are first computed
    return ThreadpoolController()


def one_thread():
    """A context with BLAS on one thread.  The products of :func:`_rule` are small (hundreds of
    variances by hundreds of nodes and orders): OpenBLAS's threads spin for them on a loaded
    machine (2× the whole kernel's CPU time, measured on N = 300 tanh), and the coefficients' bits
    then do not depend on the thread count."""
    return _controller().limit(limits=1, user_api="blas")


def coefficients(fn: Fn, variances: Sequence[float], K: int, h: float | None = None,
                 memo: dict | None = None) -> Coefficients:
    """The coefficients of φ = ``fn`` (a numpy function) up to order K at each variance, with
    the tail and error estimates of the module doc: the trapezoidal rule at step h, and at step
    2h (its every other node) for the error estimate (it converges geometrically: the coarser
    rule's difference overestimates the finer one's error).

    Per coefficient, δ = max_k |α̃_k − α̃'_k| (the two rules) + the floor of :class:`Rule` (the values'
    error: :data:`LD_COEFF_ROUNDING`·√S on the long double core and the float64 values' charge outside
    it, or :data:`COEFF_ROUNDING`·√S for a φ evaluated in float64; the products' bound; u·max_k |α̃_k|);
    in ℓ2, ‖α − α̃‖ ≤ ‖α̃ − α̃'‖ + √(K+1)·floor."""
    a = np.asarray(variances, dtype=float).ravel()
    h = step_for(K, float(a.max(initial=0.0))) if h is None else h
    r = _rule(fn, a, K, h, memo)
    alpha, S, coarse, S1, floor = r.alpha, r.square, r.coarse, r.coarse_square, r.floor
    diff = alpha - coarse
    quad = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    # ℓ2 over k ≤ K (the engine's Cauchy–Schwarz bound; the plain rule's as it always was)
    err = quad + np.sqrt(K + 1.0) * (floor if r.exact else 16 * EPS * np.sqrt(S))
    kept = np.einsum("ij,ij->i", alpha, alpha)
    # T(K) = S − Σ_{k≤K} α_k²: the computed difference, S's quadrature error, the coefficients'
    # (|Σα² − Σα̃²| ≤ 2‖α̃‖e + e² for their error e) and the rounding of two sums of size S
    # (S̃ and Σα̃² are sums of the same weighted values F: S̃ − Σα̃² = ‖F − its projection‖² ≥ 0 up to
    # the rounding of F Gᵀ, a few ε·S — not 2‖α̃‖·√(K+1)·(rounding of one coefficient))
    tail = np.clip(S - kept, 0.0, None) + np.abs(S - S1) + 2 * quad * np.sqrt(kept) + quad ** 2 + 16 * EPS * S
    np.abs(diff, out=diff)
    sup = np.max(diff, axis=1, initial=0.0) + floor
    return Coefficients(alpha, tail, err, np.sqrt(kept), S, np.abs(S - S1) + r.square_floor, sup)


def derivative(coef: Coefficients, variances: Sequence[float]) -> np.ndarray:
    """The coefficients of φ′ up to order K − 1 from φ's (index shift, module doc):
    E φ′(√a z) h_k(z) = √(k+1)·α_{k+1}(a)/√a (a > 0)."""
    a = np.asarray(variances, dtype=float).ravel()
    k = np.arange(coef.K)
    return coef.alpha[:, 1:] * np.sqrt(k + 1)[None, :] / np.sqrt(a)[:, None]


def horner(alpha: np.ndarray, beta: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_k ρ^k α_k β_k, Σ_k |ρ|^k |α_k β_k|) for rows of α and β (P, K+1) and ρ (P,) by Horner."""
    K = alpha.shape[1] - 1
    s = alpha[:, K] * beta[:, K]
    m = np.abs(s)
    r = np.abs(rho)
    for k in range(K - 1, -1, -1):
        t = alpha[:, k] * beta[:, k]
        s = s * rho + t
        m = m * r + np.abs(t)
    return s, m


def bound(ca: Coefficients, cb: Coefficients, ia: np.ndarray, ib: np.ndarray, rho: np.ndarray,
          magnitude: np.ndarray) -> np.ndarray:
    """The stated error of the module doc for pairs (rows ia of ca, rows ib of cb, correlation ρ)."""
    K = ca.K
    trunc = np.abs(rho) ** (K + 1) * np.sqrt(ca.tail[ia] * cb.tail[ib])
    coef = ca.err[ia] * cb.norm[ib] + ca.norm[ia] * cb.err[ib] + ca.err[ia] * cb.err[ib]
    return trunc + coef + 2 * (K + 2) * EPS * magnitude


# ---------------------------------------------------------------------------------------------
# the grid tape's operations: packed rows [α_0 … α_K, tail, err, norm], value and bound per cell

#: the series aims this far below the target: its terms are cheap, and the expectations of a deep
#: network's chain pass their errors on to the next layers' covariances
AIM = 1e-3
#: the truncation's share of that aim: a cell sums to the order whose truncation bound is below
#: SHARE·AIM·tol (a few terms more than the aim needs keep the stated error near the rounding floor)
SHARE = 0.1
#: a cell's truncation bound is also at most TIGHT·ε·‖α̃‖‖β̃‖ (:func:`orders`): below the rounding of
#: its sum (:func:`stated_errors`), so that the stated error stays within a small factor of the
#: actual one (tests/test_series_bounds.py) — a few terms more than the aim alone asks
TIGHT = 4.0
LOG_TIGHT = float(np.log(TIGHT * EPS))
#: the truncation levels of a packed row (those below its K, and K), at which it stores its tails:
#: a cell's order L is bounded with the tail of the largest level ≤ L (:func:`orders`)
LEVELS = (8, 16, 32, 64, 128, 256, 512)


def levels(K: int) -> list[int]:
    """The levels of a packed row of order K."""
    return [k for k in LEVELS if k < K] + [K]


def pack(fn: Fn, K: int, h: float, a: np.ndarray, memo: dict | None = None) -> np.ndarray:
    """The packed coefficients of φ = fn at the variances ``a`` (any shape; computed once per
    distinct value): shape a.shape + (W,), [α_0 … α_K, T(L) for each level L of :func:`levels`,
    S = E φ², its error, δ, ‖α̃‖, the numbers of :func:`compute_row_numbers`, √(T(L)/T(L′)) for every
    order L = 0 … K (:func:`tail_ratios`), K] (:func:`coefficients`, at the recorded step h; δ the
    error of each coefficient, ``Coefficients.sup``; the tails below K as :meth:`Coefficients.truncate`
    states them: T(L) ≤ (√T(K) + ‖α̃_{L<k≤K}‖ + ‖α − α̃‖)²)."""
    a = np.asarray(a, dtype=float)
    ua, inv = np.unique(a.ravel(), return_inverse=True)
    c = coefficients(fn, ua, K, h, memo)
    beyond = np.cumsum((c.alpha ** 2)[:, ::-1], axis=1)[:, ::-1]      # Σ_{k ≥ j} α_k²
    tails = [(np.sqrt(c.tail) + np.sqrt(beyond[:, L + 1]) + c.err) ** 2 if L < K else c.tail for L in levels(K)]
    out = np.concatenate([c.alpha, np.stack(tails, 1), c.square[:, None], c.square_err[:, None],
                          c.sup[:, None], c.norm[:, None], compute_row_numbers(c.alpha),
                          tail_ratios(c, beyond, tails), np.full((len(ua), 1), float(K))], axis=1)
    if len(ua) == a.size and np.array_equal(ua, a.ravel()):     # distinct and sorted already: no copy
        return out.reshape(a.shape + (out.shape[1],))
    return out[inv].reshape(a.shape + (out.shape[1],))


def tail_ratios(c: Coefficients, beyond: np.ndarray, tails: list[np.ndarray]) -> np.ndarray:
    """Per row and order L = 0 … K, √(T(L)/T(L′)) ≤ 1, L′ the largest level ≤ L (:func:`levels`; 1
    below the first level): T(L) ≤ (√T(K) + ‖α̃_{L<k≤K}‖ + ‖α − α̃‖)², the levels' own formula at
    every order.  A cell summed to order L whose truncation bound :func:`orders` states with the
    tails of L′ scales it by the two sides' ratios (:func:`stated_errors`)."""
    K = c.K
    ls = levels(K)
    own = np.sqrt(c.tail)[:, None] + np.concatenate([np.sqrt(beyond[:, 1:]) + c.err[:, None],
                                                     np.zeros((len(c.tail), 1))], axis=1)
    ref = np.ones_like(own)
    for n, L in enumerate(ls):
        stop = ls[n + 1] if n + 1 < len(ls) else K + 1
        ref[:, L:stop] = np.sqrt(tails[n])[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(ref > 0, np.minimum(own / ref, 1.0), 1.0)
    out[:, :ls[0]] = 1.0
    return out


class PackCache:
    """Packed coefficients (:func:`pack`) by pure keys — a function's key, K, h and the bytes of
    its distinct variances — the least recently used dropped beyond ``limit`` bytes.  One per tape
    (:class:`.grid.HermiteArg`): its row and column operations meet the same inputs' variances
    (a band's rows are among its columns)."""

    def __init__(self, limit: int = 1 << 26) -> None:
        self.limit = limit
        self.items: OrderedDict = OrderedDict()
        self.size = 0
        self.memos: OrderedDict = OrderedDict()

    def memo(self, variances: np.ndarray, h: float) -> dict:
        """A memo of function heads' long double values at the rule of step h for these (distinct,
        sorted) variances, by their bytes and h (:func:`_rule`, :meth:`.tape.Tape.__call__`): the
        functions packed at one set of variances (tanh, tanh², (1 − tanh²)² at one layer) evaluate
        their heads once.  The most recent few kept (about ``limit`` bytes: a core of about 250 long
        double values per variance and head)."""
        key = (variances.tobytes(), h)
        got = self.memos.get(key)
        if got is None:
            got = self.memos[key] = {}
            size = min(8, max(2, self.limit // (4 * 16 * 250 * max(1, len(variances)))))
            while len(self.memos) > size:
                self.memos.popitem(last=False)
        self.memos.move_to_end(key)
        return got

    def packed(self, key: tuple, fn: Fn, K: int, h: float, a: np.ndarray) -> np.ndarray:
        """pack(fn, K, h, a), from the cache when ``key`` and the same variances (in the same
        order: a band's rows are its first columns) were met before; ``fn`` takes ``memo=``
        (:meth:`.tape.HermiteArg.function`): one :meth:`memo` per set of variances and h."""
        a = np.asarray(a, dtype=float)
        full = (key, int(K), float(h), a.size, a.tobytes())
        got = self.items.get(full)
        if got is None:
            got = pack(fn, K, h, a.ravel(), self.memo(np.unique(a), float(h)))
            self.items[full] = got
            self.size += got.nbytes
            while self.size > self.limit and len(self.items) > 1:
                self.size -= self.items.popitem(last=False)[1].nbytes
        self.items.move_to_end(full)
        return got.reshape(a.shape + got.shape[-1:])


def packed_sum(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_{k≤L} ρ^k α_k β_k, its stated error) for packed rows A and columns B (broadcasting) and ρ,
    each cell to its own order L (:func:`orders`: the smallest whose truncation bound meets
    ``tol``·max(1, ‖α̃‖‖β̃‖)·:data:`AIM`·:data:`SHARE` and :data:`TIGHT`·ε·‖α̃‖‖β̃‖ at its ρ, K where
    none does), summed by Horner
    (:func:`horner_sums`).  The stated error (:func:`stated_errors`) is that truncation bound (the
    tail from the cell's own order), the coefficients' errors weighted by the other side's
    Σ|ρ|^k|β_k| and the rounding of the sum, each bounded per cell through the first terms and a
    norm of the rest (:func:`weighted`): it follows |ρ| down to 0.  A cell at ρ = 1 whose row and
    column are the same (one function at one variance: u = v) takes the 1-D rule's E φ² and its
    error instead (no truncation there: the diagonal of a kernel agrees with its own variances,
    :func:`diagonal`).  A cell's bits depend on its own ρ, row and column alone (not on the block it
    is computed in)."""
    K = int(np.ravel(A[..., -1])[0])
    shape = np.broadcast_shapes(A.shape[:-1], B.shape[:-1], np.shape(rho))
    cells = max(1, int(np.prod(shape)))
    rho = np.broadcast_to(np.clip(rho, -1.0, 1.0), shape).reshape(cells)
    A = A.reshape((1,) * (len(shape) + 1 - A.ndim) + A.shape)
    B = B.reshape((1,) * (len(shape) + 1 - B.ndim) + B.shape)
    same = diagonal_cells(A, B, rho, shape)
    if len(same) == cells:                  # every cell u ≡ v (a replay's diagonal part): no sums
        value, err = np.empty(cells), np.empty(cells)
        diagonal(A, B, rho, same, shape, value, err)
        return value.reshape(shape), err.reshape(shape)
    order, log_trunc = orders(A, B, rho, tol, K, shape, same)
    value, above = horner_sums(A, B, rho, order, shape)
    err = stated_errors(A, B, K, order, log_trunc, rho, shape, above)
    diagonal(A, B, rho, same, shape, value, err)
    return value.reshape(shape), err.reshape(shape)


def packed_columns(K: int) -> tuple[int, int, int, int]:
    """(first tail, S, δ, ‖α̃‖): the positions in a packed row of order K (:func:`pack`; δ the error
    of each coefficient; the :func:`row_numbers` follow ‖α̃‖)."""
    nl = len(levels(K))
    return K + 1, K + 1 + nl, K + 3 + nl, K + 4 + nl


# ---------------------------------------------------------------------------------------------
# per-cell bounds from a few numbers per row: Σ_k |ρ|^k |x_k y_k| ≤ |x₀y₀| + |ρ||x₁y₁| + ρ²‖x_{≥2}‖‖y_{≥2}‖

#: the columns of :func:`row_numbers`
R_A0, R_A1, R_N2, R_L1, R_W2, R_S0, R_S1, R_S2, R_C0, R_C1, R_C2, R_N3, R_S3, R_C3 = range(14)


def row_numbers(A: np.ndarray) -> np.ndarray:
    """The :func:`compute_row_numbers` of a packed row (…, W), stored in it by :func:`pack`."""
    K = int(np.ravel(A[..., -1])[0])
    start = K + 5 + len(levels(K))
    return A[..., start:start + ROW_NUMBERS]


#: how many numbers :func:`compute_row_numbers` gives per row
ROW_NUMBERS = 14


def compute_row_numbers(alpha: np.ndarray) -> np.ndarray:
    """Per row of coefficients α_0 … α_K (…, K+1) the numbers of the per-cell bounds (…, 11):
    |α₀|, |α₁|, ‖α_{≥2}‖₂, ‖α_{≥2}‖₁, ‖(√k α_k)_{k≥2}‖ (the plain series x_k = α_k); then for
    x_k = √(k+1) α_{k+1} (the ρ-derivative, :func:`mehler_slope`) and x_k = √((k+1)(k+2)) α_{k+2}
    (the variance derivative, :func:`mehler_curve`) |x₀|, |x₁|, ‖x_{≥2}‖₂; then ‖x_{≥3}‖₂ of the
    three (the signed bounds of :func:`signed_weighted`).  Computed once per distinct variance, when
    the row is packed (:func:`pack`)."""
    al = alpha
    K = al.shape[-1] - 1
    k = np.arange(K + 1, dtype=float)
    sq = al * al
    out = np.empty(al.shape[:-1] + (ROW_NUMBERS,))
    out[..., R_A0], out[..., R_A1] = np.abs(al[..., 0]), np.abs(al[..., 1])
    out[..., R_N2] = np.sqrt(np.sum(sq[..., 2:], axis=-1))
    out[..., R_L1] = np.sum(np.abs(al[..., 2:]), axis=-1)
    out[..., R_W2] = np.sqrt(np.sum(k[2:] * sq[..., 2:], axis=-1))
    out[..., R_S0], out[..., R_S1] = np.abs(al[..., 1]), np.sqrt(2.0) * np.abs(al[..., 2])
    out[..., R_S2] = np.sqrt(np.sum(k[3:] * sq[..., 3:], axis=-1))
    out[..., R_C0], out[..., R_C1] = np.sqrt(2.0) * np.abs(al[..., 2]), np.sqrt(6.0) * np.abs(al[..., 3])
    out[..., R_C2] = np.sqrt(np.sum(k[4:] * (k[4:] - 1) * sq[..., 4:], axis=-1))
    out[..., R_N3] = np.sqrt(np.sum(sq[..., 3:], axis=-1))
    out[..., R_S3] = np.sqrt(np.sum(k[4:] * sq[..., 4:], axis=-1))
    out[..., R_C3] = np.sqrt(np.sum(k[5:] * (k[5:] - 1) * sq[..., 5:], axis=-1))
    return out


def weighted(x0, x1, x2, y0, y1, y2, r: np.ndarray, out=None) -> np.ndarray:
    """A bound on Σ_k |ρ|^k |x_k y_k| (r = |ρ| ≤ 1) from |x₀|, |x₁|, ‖x_{≥2}‖ and the same of y:
    |x₀y₀| + r|x₁y₁| + r²‖x_{≥2}‖‖y_{≥2}‖ (Cauchy–Schwarz on the rest).  Exact to O(ρ²) as ρ → 0,
    and at ρ = 1 within the Cauchy–Schwarz factor of the sum.  Added left to right, a term 0 throughout
    left out (a + 0 = a for a ≥ 0, bit for bit); written into ``out`` where it has the grid's shape."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in (x0, x1, x2, y0, y1, y2, r)))
    got = out if out is not None and out.shape == shape else np.empty(shape)
    tmp, started = np.empty(shape), False
    live = [bool(nonzero(x, y)) for x, y in ((x0, y0), (x1, y1), (x2, y2))]
    live[2] = live[2] or not live[1]                # the last term never left out (a NaN of r reaches the sum)
    for k, (x, y) in enumerate(((x0, y0), (x1, y1), (x2, y2))):
        if not live[k]:
            continue
        into = tmp if started else got
        product_into(x, y, into)
        if k:
            np.multiply(r if k == 1 else r * r, into, out=into)
        if started:
            got += tmp
        started = True
    return got


def nonzero(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether x·y may be nonzero somewhere: not (x or y 0 throughout, the other finite: 0·y = 0)."""
    for u, v in ((x, y), (y, x)):
        if not np.any(u) and np.all(np.isfinite(v)):
            return False
    return True


def product_into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:func:`times` (x, y) written into ``out`` (the grid's shape: x·y broadcast to it where smaller)."""
    if out.shape == np.broadcast_shapes(np.shape(x), np.shape(y)):
        return times(x, y, out=out)
    np.copyto(out, np.broadcast_to(times(x, y), out.shape))
    return out


def nonzero_product(x: np.ndarray, y: np.ndarray, out=None) -> np.ndarray | None:
    """:func:`times` (x, y), or None where the product is 0 throughout (:func:`nonzero`: the same bits).
    ``out``: an array of the grid's shape to write it into (:func:`product_into`)."""
    if not nonzero(x, y):
        return None
    return times(x, y) if out is None else product_into(x, y, out)


def times(x, y, out=None) -> np.ndarray:
    """x·y, broadcast: by einsum where one is a column (R, 1) and the other a row (1, C) of a grid
    (numpy's broadcast multiply takes about twice as long there; one product each, the same bits —
    but for the sign of an exact zero: einsum adds the product to +0, so 0·(−y) is +0, not −0),
    else by numpy's multiply."""
    if np.ndim(x) == 2 and np.ndim(y) == 2:
        (r0, c0), (r1, c1) = np.shape(x), np.shape(y)
        if c0 == 1 and r1 == 1 and r0 > 1 and c1 > 1:
            return np.einsum("i,j->ij", x[:, 0], y[0], out=out)
        if r0 == 1 and c1 == 1 and c0 > 1 and r1 > 1:
            return np.einsum("j,i->ij", x[0], y[:, 0], out=out)
    return np.multiply(x, y, out=out)


SQRT2, SQRT3, SQRT6, SQRT12 = (float(np.sqrt(v)) for v in (2.0, 3.0, 6.0, 12.0))


def order_of(A: np.ndarray) -> int:
    """K of packed rows (their last column)."""
    return int(np.ravel(A[..., -1])[0])


def signed_weighted(x0, x1, x2, x3, y0, y1, y2, y3, rho: np.ndarray, out=None) -> np.ndarray:
    """A bound on |Σ_k ρ^k x_k y_k| (|ρ| ≤ 1) from the signed x₀, x₁, x₂ (and y's) and ‖x_{≥3}‖₂:
    |x₀y₀ + ρ(x₁y₁ + ρx₂y₂)| + |ρ|³‖x_{≥3}‖‖y_{≥3}‖ (Cauchy–Schwarz on the rest), plus
    8u·(|x₀| + |x₁| + |x₂|)(|y₀| + |y₁| + |y₂|) for the rounding of the first part (and of its factors
    √2, √3, …).  Never above :func:`weighted` but for that rounding term (|x₂y₂| + r‖x_{≥3}‖‖y_{≥3}‖ ≤
    ‖x_{≥2}‖‖y_{≥2}‖, Cauchy–Schwarz in two dimensions); where the first terms cancel (SiLU's E φ″ψ:
    √2α₂β₀ against ρ²√12α₄β₂) it is the derivative to within the rest's bound, where :func:`weighted`
    adds them in absolute value (2.9× at ρ = 0.9)."""
    shape = np.broadcast_shapes(*(np.shape(v) for v in (x0, x1, x2, x3, y0, y1, y2, y3, rho)))
    first = out if out is not None and out.shape == shape else np.empty(shape)
    tmp, r3 = np.empty(shape), np.empty(shape)
    product_into(x2, y2, first)
    first *= rho
    if nonzero_product(x1, y1, out=tmp) is not None:      # (+ 0: the same bits once |·| is taken)
        first += tmp
    first *= rho
    if nonzero_product(x0, y0, out=tmp) is not None:
        first += tmp
    np.abs(first, out=first)
    np.abs(rho, out=r3)
    np.multiply(r3, r3, out=tmp)
    tmp *= r3
    tmp *= product_into(x3, y3, r3)
    first += tmp
    # 8u·(Σ|x|)(Σ|y|) as (8u·Σ|x|)·Σ|y|: 8u = 2⁻⁵⁰ scales exactly (the same bits)
    first += product_into((8 * UNIT) * (np.abs(x0) + np.abs(x1) + np.abs(x2)), np.abs(y0) + np.abs(y1) + np.abs(y2),
                          tmp)
    return first


def may_cancel(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray]) -> bool:
    """Whether the terms x_k y_k ρ^k, k ≤ 2, of some cell can have opposite signs: two of them not 0
    somewhere, and not only k = 0 and 2 with x₀x₂ and y₀y₂ of one sign throughout (tanh's slope).  Else
    :func:`signed_weighted` gains only its finer split of the rest, and the callers take the cheaper
    :func:`weighted`."""
    live = [bool(np.any(x) and np.any(y)) for x, y in zip(xs, ys)]
    if sum(live) <= 1:
        return False
    if live == [True, False, True]:
        sx, sy = np.sign(xs[0] * xs[2]), np.sign(ys[0] * ys[2])
        if (np.all(sx >= 0) and np.all(sy >= 0)) or (np.all(sx <= 0) and np.all(sy <= 0)):
            return False
    return True


def mehler_slope(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None) -> np.ndarray:
    """A bound on |∂/∂ρ Σ_k ρ^k α_k β_k| = |Σ_k ρ^k (k+1) α_{k+1} β_{k+1}| per cell (:func:`signed_weighted`
    where the first terms can cancel, :func:`may_cancel`, else :func:`weighted`; x_k = √(k+1) α_{k+1},
    y_k = √(k+1) β_{k+1}).  With ρ = c/√(ab): |∂E/∂c| ≤ this/√(ab)
    (Price's theorem: ∂E φ(u)ψ(v)/∂c = E φ′(u)ψ′(v)).  From the packed coefficients (the part of
    the sum beyond K is below the truncation target, relative: a sensitivity only weights errors)."""
    return price_bound(A, B, rho, (1, 2, 3), (1.0, SQRT2, SQRT3), R_S3, (1, 2, 3), (1.0, SQRT2, SQRT3), R_S3,
                       (R_S0, R_S1, R_S2), (R_S0, R_S1, R_S2), out)


def mehler_curve(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None) -> np.ndarray:
    """A bound on |Σ_k ρ^k √((k+1)(k+2)) α_{k+2} β_k| per cell: 2a·|∂E/∂a| at fixed c, a the
    variance of A's function (Price: ∂E φ(u)ψ(v)/∂a = ½ E φ″(u)ψ(v), and E φ″(√a z) h_k(z) =
    √((k+1)(k+2)) α_{k+2}/a); B's variance by swapping the arguments.  :func:`signed_weighted` where the
    first terms can cancel (:func:`may_cancel`), else :func:`weighted`; x_k = √((k+1)(k+2)) α_{k+2},
    y_k = β_k."""
    return price_bound(A, B, rho, (2, 3, 4), (SQRT2, SQRT6, SQRT12), R_C3, (0, 1, 2), (1.0, 1.0, 1.0), R_N3,
                       (R_C0, R_C1, R_C2), (R_A0, R_A1, R_N2), out)


def price_bound(A: np.ndarray, B: np.ndarray, rho: np.ndarray, ka: tuple, fa: tuple, rest_a: int, kb: tuple,
                fb: tuple, rest_b: int, plain_a: tuple, plain_b: tuple, out=None) -> np.ndarray:
    """|Σ_k ρ^k x_k y_k| bounded per cell from packed rows A and B: x_k = fa[k]·α_{ka[k]} for k ≤ 2 and
    ‖x_{≥3}‖ the row number ``rest_a`` (y likewise from B), by :func:`signed_weighted` where the first
    terms can cancel (:func:`may_cancel`), else by :func:`weighted` from the row numbers ``plain_a``
    and ``plain_b`` (|x₀|, |x₁|, ‖x_{≥2}‖).  The rows' numbers are taken as contiguous rows and
    columns (:class:`Operand`: a packed row's column is strided, and a product of a row by a column
    reads it once per row); the bound is written into ``out`` where it has the grid's shape."""
    shape = np.broadcast_shapes(A.shape[:-1], B.shape[:-1], np.shape(rho))
    a, b = Operand(A, shape), Operand(B, shape)
    r0 = order_of(A) + 5 + len(levels(order_of(A)))       # the first of the row numbers
    target = out if out is not None and out.shape == shape else None
    if order_of(A) >= 4 and may_cancel([a.grid(k) for k in ka], [b.grid(k) for k in kb]):
        xs = [a.grid(k) if f == 1.0 else f * a.grid(k) for k, f in zip(ka, fa)]
        ys = [b.grid(k) if f == 1.0 else f * b.grid(k) for k, f in zip(kb, fb)]
        got = signed_weighted(*xs, a.grid(r0 + rest_a), *ys, b.grid(r0 + rest_b), np.clip(rho, -1.0, 1.0),
                              out=target)
    else:                                   # |clip(ρ, −1, 1)| = min(|ρ|, 1), bit for bit
        got = weighted(*[a.grid(r0 + k) for k in plain_a], *[b.grid(r0 + k) for k in plain_b],
                       np.minimum(np.abs(rho), 1.0), out=target)
    if out is None or got is out:
        return got
    np.copyto(out, np.broadcast_to(got, out.shape))
    return out


def diagonal_slope(A: np.ndarray, out=None) -> np.ndarray:
    """2a·|dS/da| of S(a) = E φ(√a z)² = Σ_k α_k(a)², the value of a kernel's diagonal cell, as a
    function of its one variance (u ≡ v): with dα_k/da = (√((k+1)(k+2)) α_{k+2} + k α_k)/(2a),
    2a·dS/da = 2 Σ_k (k α_k² + √((k+1)(k+2)) α_k α_{k+2}) (= a·E (φ²)″: signed, the terms cancel
    where Price's E φ′² and E φφ″ do), from the packed coefficients."""
    K = int(np.ravel(A[..., -1])[0])
    al = A[..., :K + 1]
    k = np.arange(K + 1, dtype=float)
    cross = np.sqrt((k[:-2] + 1) * (k[:-2] + 2)) * al[..., :-2] * al[..., 2:]
    got = 2 * np.abs(np.sum(k * al * al, axis=-1) + np.sum(cross, axis=-1))
    return got if out is None else np.copyto(out, got) or out


def mean_curve(A: np.ndarray, out=None) -> np.ndarray:
    """2a·|d E f(√a z)/da| = √2 |α_2| of a packed row (d/da E f = ½ E f″ = α_2/(√2 a), Stein)."""
    got = np.sqrt(2.0) * np.abs(A[..., 2])
    return got if out is None else np.copyto(out, got) or out


class Operand:
    """Packed rows A broadcast against a grid of ``shape``: their columns as flat arrays, and the
    row of A under each cell."""

    def __init__(self, A: np.ndarray, shape: tuple) -> None:
        self.lead = A.shape[:-1]
        self.rows = A.reshape(-1, A.shape[-1])
        self.shape = shape
        self.got: dict[int, np.ndarray] = {}

    def grid(self, k: int) -> np.ndarray:
        """Packed column k, shaped to broadcast against the grid (contiguous; the same array on
        every call: not to be written)."""
        got = self.got.get(k)
        if got is None:
            got = self.got[k] = np.ascontiguousarray(self.rows[:, k]).reshape(self.lead)
        return got

    def columns(self, stop: int) -> np.ndarray:
        """Packed columns 0 … stop − 1 as contiguous rows (one per column)."""
        return np.ascontiguousarray(self.rows[:, :stop].T)

    def under(self, flat: np.ndarray) -> np.ndarray:
        """The row index of A under the cells ``flat`` (flat indices of the grid; intp): the cells'
        coordinates along A's own axes (those of length > 1), raveled in A's lead shape."""
        if len(self.rows) == 1:
            return np.zeros(len(flat), dtype=np.intp)
        lead = (1,) * (len(self.shape) - len(self.lead)) + self.lead
        flat = np.asarray(flat, dtype=np.intp)
        out, inner, step = None, 1, 1
        for axis in range(len(lead) - 1, -1, -1):                   # the last axis first
            n = self.shape[axis]
            if lead[axis] > 1:                                      # (then n is its length)
                coord = flat // inner if inner > 1 else flat
                if axis:                                            # (the first axis needs no modulo)
                    coord = coord % n
                coord = coord * step if step > 1 else coord
                out = coord if out is None else out + coord
                step *= n
            inner *= n
        return flat.copy() if out is flat else out


def under_both(a: "Operand", b: "Operand", flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a.under(flat), b.under(flat)): on a 2-D grid of one side's rows (R, 1) and the other's columns
    (1, C), the quotient and remainder of one divmod by C (the same indices)."""
    shape = a.shape
    if len(shape) == 2 and shape[0] > 1 and shape[1] > 1:
        if a.lead == (shape[0], 1) and b.lead == (1, shape[1]):
            return np.divmod(np.asarray(flat, dtype=np.intp), shape[1])
        if a.lead == (1, shape[1]) and b.lead == (shape[0], 1):
            q, r = np.divmod(np.asarray(flat, dtype=np.intp), shape[1])
            return r, q
    return a.under(flat), b.under(flat)


def spread(x: np.ndarray, shape: tuple) -> np.ndarray:
    """x broadcast to the grid, flat."""
    return np.broadcast_to(x, shape).reshape(-1)


def own_spread(x: np.ndarray, shape: tuple) -> np.ndarray:
    """:func:`spread` of a fresh array x, writeable (x itself, flat, where it has the grid's shape)."""
    got = spread(x, shape)
    return got if got.flags.writeable else got.copy()


#: orders above this are summed by powers in groups of one order (:func:`horner_sums`), rounded up to
#: one of :data:`COARSE_ORDERS` (few groups); those up to it cell by cell, by Horner
HORNER_TOP = 32
#: every cell sums at least this many terms (its bound with the tails of that level): the first
#: terms run on the whole grid, without gathering the cells that need more
FLOOR = 16
COARSE_ORDERS = (48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def orders(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float, K: int, shape: tuple,
           skip: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per cell (flat), the order L of its sum and the logarithm of its truncation bound
    |ρ|^{L+1}·√(T_α(L′) T_β(L′)), L′ the largest stored level ≤ L (T is decreasing, so T(L′)
    bounds T(L)): L is the smallest order whose bound meets g = min(tol·max(1, ‖α̃‖‖β̃‖)·AIM·SHARE,
    TIGHT·ε·‖α̃‖‖β̃‖) —
    with the tails of level n, L = max(L_n, ⌈(½log T_α + ½log T_β − log g)/(−log|ρ|)⌉ − 1) if that
    is below the next level — or K where none meets it; above :data:`HORNER_TOP`, rounded up to
    one of :data:`COARSE_ORDERS` (or K).  ``skip``: cells given the first level (the diagonal's,
    whose value is the 1-D rule's)."""
    ls = levels(K)
    first = max(n for n, L in enumerate(ls) if L <= FLOOR or n == 0)     # the grid's level
    t0, _, _, n0 = packed_columns(K)
    a, b = Operand(A, shape), Operand(B, shape)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lr = np.abs(rho)
        np.log(lr, out=lr)                                    # log|ρ| ≤ −0 (−∞ at ρ = 0)
        ln_a, ln_b = np.log(a.grid(n0)), np.log(b.grid(n0))
        base = float(np.log(tol * AIM * SHARE))
        half_a = lambda n: 0.5 * np.log(a.grid(t0 + n))           # ½ log T(L_n), as needed
        half_b = lambda n: 0.5 * np.log(b.grid(t0 + n))
        h = own_spread(np.add(half_a(first), half_b(first)), shape)
        steps = own_spread(log_goals(ln_a, ln_b, base), shape)    # the goals, then the steps
        np.subtract(steps, h, out=steps)                       # L + 1 ≥ (log g − h) / log|ρ|
        steps /= lr
        np.ceil(steps, out=steps)
        np.maximum(steps, ls[first] + 1, out=steps)           # L + 1 at the grid's level (NaN kept)
        rest = ~(steps <= (ls[first + 1] if first + 1 < len(ls) else K + 1))
        rest[skip] = False
        rest = np.flatnonzero(rest)
        lr_rest = lr[rest]
        np.multiply(steps, lr, out=lr)
        log_trunc = np.add(h, lr, out=h)
    steps[skip] = ls[first] + 1
    steps[rest] = K + 1
    order = steps.astype(np.int64)
    order -= 1
    if len(rest):
        ia, ib = under_both(a, b, rest)
        got = np.full(len(rest), K, dtype=np.int64)
        todo = np.arange(len(rest))
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            goal_r = log_goals(ln_a.reshape(-1)[ia], ln_b.reshape(-1)[ib], base)     # elementwise: the grid's bits
            x = half_a(len(ls) - 1).reshape(-1)[ia] + half_b(len(ls) - 1).reshape(-1)[ib] + (K + 1) * lr_rest
            for n in range(first + 1, len(ls) - 1):
                hn = half_a(n).reshape(-1)[ia[todo]] + half_b(n).reshape(-1)[ib[todo]]
                L = np.maximum(np.ceil((goal_r[todo] - hn) / lr_rest[todo]) - 1.0, ls[n])
                hit = L < ls[n + 1]
                L = np.minimum(coarse_order(L, K), K)
                at = todo[hit]
                got[at] = L[hit]
                x[at] = hn[hit] + (L[hit] + 1) * lr_rest[at]
                todo = todo[~hit]
                if not len(todo):
                    break
        order[rest] = got
        log_trunc[rest] = x
    return order, log_trunc


def log_goals(ln_a: np.ndarray, ln_b: np.ndarray, base: float) -> np.ndarray:
    """Per cell, min(max(s, 0) + base, s + log(TIGHT·ε)), s = max(log ‖α̃‖ + log ‖β̃‖, −700) (a zero row:
    no goal below e^-700): the smaller of the aim's goal and TIGHT ulps of the scale, a stated error
    within a small factor of the sum's own rounding (:func:`stated_errors`), not of the aim.  Where
    log(TIGHT·ε) ≤ base (tol ≥ 9e-12) that is s + log(TIGHT·ε), bit for bit (rounding is monotone:
    fl(s + log(TIGHT·ε)) ≤ fl(max(s, 0) + base)); and s is the sum itself where no sum is below −700."""
    scale = ln_a + ln_b
    if not (float(np.min(ln_a, initial=np.inf)) + float(np.min(ln_b, initial=np.inf)) >= -700.0):
        np.maximum(scale, -700.0, out=scale)
    if LOG_TIGHT <= base:
        scale += LOG_TIGHT
        return scale
    return np.minimum(np.maximum(scale, 0.0) + base, scale + LOG_TIGHT)


def coarse_order(L: np.ndarray, K: int) -> np.ndarray:
    """Orders above :data:`HORNER_TOP` rounded up to the next of :data:`COARSE_ORDERS` (or K)."""
    quanta = np.array([q for q in COARSE_ORDERS if q < K] + [K], dtype=float)
    up = quanta[np.minimum(np.searchsorted(quanta, L), len(quanta) - 1)]
    return np.where(L > HORNER_TOP, up, L)


class Gathered(NamedTuple):
    """The cells (flat) whose order is above the grid's (:func:`horner_sums`), sorted by decreasing
    order, with their rows of A and of B, their ρ and their order."""
    cells: np.ndarray
    ia: np.ndarray
    ib: np.ndarray
    rho: np.ndarray
    order: np.ndarray


def horner_sums(A: np.ndarray, B: np.ndarray, rho: np.ndarray, order: np.ndarray,
                shape: tuple) -> tuple[np.ndarray, Gathered | None]:
    """(Σ_{k≤L} ρ^k α_k β_k per cell (flat), the :class:`Gathered` cells or None), L = ``order``, by
    Horner: s ← s·ρ + α_k β_k from k = L
    down (s = 0 above L, so a cell's operations are those of its own sum).  The orders above the
    smallest run on the cells that have them (sorted by order: a prefix at each k), the smallest
    order's terms on the whole grid; above :data:`HORNER_TOP`, the terms k > HORNER_TOP are
    Σ ρ^{k−TOP−1} α_k β_k by powers (one row sum per cell, in groups of one order) and Horner goes on
    from there.  A term that is 0 at every row or every column (a parity zero: tanh's even orders)
    only multiplies."""
    a, b = Operand(A, shape), Operand(B, shape)
    low, top = (min(int(order.min()), HORNER_TOP), int(order.max())) if len(order) else (0, 0)
    stop = min(top, HORNER_TOP) + 1
    ca, cb = a.columns(stop), b.columns(stop)
    live = np.any(ca != 0, axis=1) & np.any(cb != 0, axis=1)
    s, above = np.zeros(len(rho)), None
    if top > low:
        high = np.flatnonzero(order > low)
        by = high[np.argsort((top - order[high]).astype(np.int16), kind="stable")]
        (ia, ib), r, L = under_both(a, b, by), rho[by], order[by]
        above = Gathered(by, ia, ib, r, L)
        acc, term, other = np.zeros(len(by)), np.empty(len(by)), np.empty(len(by))
        start = 0
        while start < len(by) and L[start] > HORNER_TOP:          # groups of one order, highest first
            end = start + int(np.searchsorted(-L[start:], -L[start], side="right"))
            g = slice(start, end)
            acc[g] = power_sums(a.rows[ia[g], HORNER_TOP + 1:L[start] + 1],
                                b.rows[ib[g], HORNER_TOP + 1:L[start] + 1], r[g])
            start = end
        steps = np.arange(min(top, HORNER_TOP), low, -1)
        for k, n in zip(steps, len(by) - np.searchsorted(L[::-1], steps, side="left")):   # n: cells with L ≥ k
            acc[:n] *= r[:n]
            if live[k]:
                np.take(ca[k], ia[:n], out=term[:n], mode="clip")      # "raise" buffers out=: 3x slower
                np.take(cb[k], ib[:n], out=other[:n], mode="clip")
                term[:n] *= other[:n]
                acc[:n] += term[:n]
        s[by] = acc
    s = s.reshape(shape)
    rg = rho.reshape(shape)
    term = np.empty(shape)
    product = outer(a.lead, b.lead, shape)
    for k in range(low, -1, -1):
        s *= rg
        if live[k]:
            product(ca[k], cb[k], term)
            s += term
    return s.reshape(-1), above


def outer(lead_a: tuple, lead_b: tuple, shape: tuple) -> Callable:
    """f(x, y, out): the products x_i·y_j of a row operand x (flat, shaped ``lead_a``) and a column
    operand y (``lead_b``) into out (``shape``): by einsum where they are a column (R, 1) and a row
    (1, C) of a 2-D grid, in either order (numpy's broadcast multiply takes twice its time there;
    one product each, the same bits but for the sign of an exact zero: :func:`times`), else by the
    broadcast multiply."""
    if len(shape) == 2 and shape[0] > 1 and shape[1] > 1:
        if lead_a == (shape[0], 1) and lead_b == (1, shape[1]):
            return lambda x, y, out: np.einsum("i,j->ij", x, y, out=out)
        if lead_a == (1, shape[1]) and lead_b == (shape[0], 1):
            return lambda x, y, out: np.einsum("j,i->ij", x, y, out=out)
    return lambda x, y, out: np.multiply(x.reshape(lead_a), y.reshape(lead_b), out=out)


def power_sums(alpha: np.ndarray, beta: np.ndarray, rho: np.ndarray) -> np.ndarray:
    """Σ_k ρ^k α_k β_k for rows of α and β (P, n) and ρ (P,): the powers 1, ρ, ρ², … by repeated
    products, one row sum each (numpy's pairwise sum: the same for every row of n terms)."""
    powers = np.empty(alpha.shape)
    powers[:, 0] = 1.0
    powers[:, 1:] = rho[:, None]
    np.cumprod(powers, axis=1, out=powers)
    powers *= alpha
    powers *= beta
    return powers.sum(axis=1)


def pairwise_roundings(n: np.ndarray) -> np.ndarray:
    """A bound on the roundings a term meets in numpy's pairwise sum of n terms (relative to Σ|t|, first
    order): below 8 terms a loop (n − 1); up to 128, eight interleaved loops of ⌈n/8⌉ − 1 additions, the
    eight results in three levels and up to 7 leftover terms after them; above, halves one level more."""
    n = np.asarray(n, dtype=float)
    small = np.minimum(n - 1.0, np.ceil(n / 8.0) + 9.0)
    big = 26.0 + np.ceil(np.log2(np.maximum(n, 128.0) / 128.0)) + 1.0
    return np.where(n <= 128, np.maximum(small, 0.0), big)


#: the unit roundoff of float64: a rounding to nearest errs by at most this relative to its result
UNIT = EPS / 2
#: the roundings that form a cell's ρ = c·a^{−1/2}·b^{−1/2} on the tape (:func:`stated_errors`)
RHO_ROUNDINGS = 6.0


def stated_errors(A: np.ndarray, B: np.ndarray, K: int, order: np.ndarray, log_trunc: np.ndarray,
                  rho: np.ndarray, shape: tuple, above: Gathered | None = None) -> np.ndarray:
    """The stated error per cell (flat), at the cell's own order L and r = |ρ|:

    * the truncation bound exp(``log_trunc``) = r^{L+1}·√(T_α(L′) T_β(L′)) (:func:`orders`: the
      tails of the largest stored level L′ ≤ L, never those of K) scaled to the tails at the cell's
      own order, r^{L+1}·√(T_α(L) T_β(L)) (:func:`own_tails`), widened by 1e-12 for the rounding of
      its logarithms and ratios;
    * the coefficients' errors (δ per coefficient, packed column of :func:`packed_columns`):
      |Σ_{k≤L} ρ^k (α_kβ_k − α̃_kβ̃_k)| ≤ δ_α Σ|ρ|^k|β̃_k| + δ_β Σ|ρ|^k|α̃_k| + (K+1)δ_αδ_β, the sums
      by |β₀| + r|β₁| + r²|β₂| + r³c_β, c_β = ‖β_{≥3}‖₁ from the stored ‖β_{≥2}‖₁ (:func:`rest_l1`);
    * the rounding of the sum (:func:`horner_sums`), each rounding at most the unit roundoff
      u = ε/2 relative to its result (round to nearest): term k ≤ :data:`HORNER_TOP` meets one
      product (α_kβ_k), then k products by ρ and k + 1 additions in Horner's loop, 2k + 2 roundings;
      a term above it its power's k − HORNER_TOP − 2 (a cumulative product), two products, the
      pairwise sum's P (:func:`pairwise_roundings` of L − HORNER_TOP terms), then the loop's
      2(HORNER_TOP + 1): k + HORNER_TOP + 2 + P ≤ 2k + 2 + P.  First order (γ_n = nu/(1 − nu) ≤
      nu(1 + 1e-12) for n ≤ 10⁴):
      u·(2·Σ_k |ρ|^k|α_kβ_k| + 2·Σ_k k|ρ|^k|α_kβ_k| + P·Σ_{k>HORNER_TOP} |ρ|^k|α_kβ_k|), the first two
      sums by the terms k ≤ 1 and r²‖x_{≥2}‖‖y_{≥2}‖ (Cauchy–Schwarz: :func:`weighted`) or, where a
      side's α₂ is 0 throughout (one parity), r³‖x_{≥3}‖‖y_{≥3}‖ (x_k = α_k, and √k α_k for the
      second, whose ‖·_{≥3}‖ is the slope's R_S2), the last by
      r^{HORNER_TOP+1}‖α_{≥2}‖‖β_{≥2}‖ (P = 0 for L ≤ HORNER_TOP).  P counts only for the terms that meet the pairwise sum: charged on the
      whole Σ|ρ|^k|α_kβ_k| it made the bound of a cell at |ρ| ≈ 0.9 (L ≥ 48) 4× its rounding;
    * the rounding of ρ itself: the tape forms ρ = c·a^{−1/2}·b^{−1/2} (:mod:`..expect.batch`'s
      c·(ab)^{−1/2}, regrouped by space: each inverse square root a square root and a division, then
      two products), so ρ̃ = ρ(1 + θ), |θ| ≤ :data:`RHO_ROUNDINGS`·u, and ρ̃^k = ρ^k(1 + kθ) to first
      order: :data:`RHO_ROUNDINGS`·u·Σ_k k|ρ|^k|α_kβ_k| (the errors of a, b and c themselves are the
      replay's, through the slopes: :mod:`..limit.replay`).

    The coefficients' errors and the roundings but P's are one polynomial in r whose coefficients are
    sums of products of a row's numbers by a column's (:func:`error_polynomial`); P's term is added on
    the cells beyond HORNER_TOP alone (a prefix of ``above``, :func:`horner_sums`'s gathered cells, where
    given: their rows, columns and ρ already found)."""
    _, _, e0, _ = packed_columns(K)
    r0 = K + 5 + len(levels(K))                        # the first of the row numbers
    a, b = Operand(A, shape), Operand(B, shape)
    x, y = (lambda j: a.grid(r0 + j)), (lambda j: b.grid(r0 + j))
    r = np.abs(rho).reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):
        trunc = np.exp(log_trunc if np.min(log_trunc, initial=np.inf) >= -700.0 else np.maximum(log_trunc, -700.0))
        coef = error_polynomial(a, b, x, y, K, e0, r, shape)
        if above is None:                              # P = 0 at the cells up to HORNER_TOP
            high = np.flatnonzero(order > HORNER_TOP)
            (ia, ib), rh, L = under_both(a, b, high), r.reshape(-1)[high], order[high]
        else:                                          # (sorted by decreasing order)
            m = int(np.searchsorted(-above.order, -HORNER_TOP, side="left"))
            high, ia, ib, rh, L = above.cells[:m], above.ia[:m], above.ib[:m], np.abs(above.rho[:m]), above.order[:m]
        if len(high):                                  # cells summed beyond HORNER_TOP = 32: r^33 by squaring
            h = rh * rh
            for _ in range(4):
                h *= h
            h *= rh
            h *= a.rows[ia, r0 + R_N2] * b.rows[ib, r0 + R_N2]
            h *= pairwise_roundings(np.arange(K + 1) - HORNER_TOP)[L]
            h *= UNIT * (1 + 1e-12)
            coef.reshape(-1)[high] += h
    ls = levels(K)
    floor = ls[max(n for n, L in enumerate(ls) if L <= FLOOR or n == 0)]
    if above is not None and len(above.order) == np.count_nonzero(order > floor):
        between = ~is_level(K)[above.order]        # the gathered cells are those above the floor: the
        cells = above.cells[between]               # cells between levels among them, rows and columns known
        if len(cells):
            trunc[cells] *= own_tails(a, b, cells, above.order[between], K, (above.ia[between], above.ib[between]))
    else:
        cells = own_tail_cells(order, K)             # the tails at the cells' own orders
        if cells is not None:
            trunc[cells] *= own_tails(a, b, cells, order[cells], K)
    trunc *= 1 + 1e-12
    trunc += np.reshape(coef, -1)
    return trunc


def error_polynomial(a: "Operand", b: "Operand", x: Callable, y: Callable, K: int, e0: int, r: np.ndarray,
                     shape: tuple) -> np.ndarray:
    """The coefficients' errors and the sum's rounding of :func:`stated_errors` (a fresh array of the
    grid's ``shape``), as one polynomial in r = |ρ| whose coefficients are sums of products of a row's
    number by a column's (x, y: the :func:`row_numbers` of A and B; δ_α, δ_β their coefficients' error;
    U = u(1 + 1e-12)):

    * δ_β·w_α + δ_α·w_β + (K + 1)δ_αδ_β with w_α = |α₀| + r|α₁| + r²|α₂| + r³c_α ≥ Σ_k r^k|α_k|
      (c_α ≥ ‖α_{≥3}‖₁, :func:`rest_l1`; for a function of one parity α₂ or α₃ is 0, and r²‖α_{≥2}‖₁
      would overstate the sum by 1/r on its larger part), w_β likewise;
    * U·(2 m₀ + (2 + :data:`RHO_ROUNDINGS`) m₁), m₀ = |α₀β₀| + r|α₁β₁| + r^q‖α_{≥q}‖‖β_{≥q}‖,
      m₁ = r|α₁β₁| + r^q‖(√k α_k)_{≥q}‖‖(√k β_k)_{≥q}‖, q = 2, or 3 where a side's α₂ is 0 throughout.

    So C₀ + r(C₁ + r(C₂ + rC₃)) with C₀ = |α₀| ⊗ (δ_β + 2U|β₀|) + δ_α ⊗ (|β₀| + (K + 1)δ_β),
    C₁ = |α₁| ⊗ (δ_β + 10U|β₁|) + δ_α ⊗ |β₁|, C₂ = |α₂| ⊗ δ_β + δ_α ⊗ |β₂| (and C₃ = c_α ⊗ δ_β + δ_α ⊗ c_β),
    the rounding's r^q terms U·(2‖α_{≥q}‖ ⊗ ‖β_{≥q}‖ + 8‖·‖ ⊗ ‖·‖) in C_q: every term ≥ 0, the sums of
    a side's numbers formed once per row or column, each product of a row by a column one pass over
    the grid (:func:`times`; one with a factor 0 throughout left out), by Horner in r.  Every
    operation rounds to nearest on terms ≥ 0: the result is within 30u of the exact polynomial (the
    same order as the former evaluation term by term, ≤ 7e-16 relative from it on the N = 1000 tanh
    and SiLU kernels), inside the 1e-12 that the rounding's terms carry and the factor ≥ 1.8 of the
    coefficients' own error estimates (:data:`COEFF_ROUNDING`).  A cell's bits depend on its own r,
    row and column alone (tests/test_series.py)."""
    da, db = a.grid(e0), b.grid(e0)
    U = UNIT * (1 + 1e-12)
    za, zb = not np.any(a.grid(2)), not np.any(b.grid(2))
    if za or zb:
        nq = (x(R_N3), y(R_N3), x(R_S2), y(R_S2))
    else:
        nq = (x(R_N2), y(R_N2), x(R_W2), y(R_W2))
    rounding_rest = [(nq[0], (2 * U) * nq[1]), (nq[2], (8 * U) * nq[3])]

    ca, cb = rest_l1(x(R_L1), a.grid(2)), rest_l1(y(R_L1), b.grid(2))
    polynomial = [[(ca, db), (da, cb)] + (rounding_rest if za or zb else []),                          # C₃
                  [(np.abs(a.grid(2)), db), (da, np.abs(b.grid(2)))] + ([] if za or zb else rounding_rest),
                  [(x(R_A1), db + (10 * U) * y(R_A1)), (da, y(R_A1))],
                  [(x(R_A0), db + (2 * U) * y(R_A0)), (da, y(R_A0) + (K + 1.0) * db)]]              # C₀
    acc, tmp = np.zeros(shape), np.empty(shape)
    for n, terms in enumerate(polynomial):
        if n:
            acc *= r
        for p, q in terms:
            if nonzero_product(p, q, out=tmp) is not None:
                acc += tmp
    return acc


def rest_l1(l1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """max(‖x_{≥2}‖₁ − |x₂|, 0) + 1e-12‖x_{≥2}‖₁ ≥ ‖x_{≥3}‖₁ per row, from x₂ and the stored ‖x_{≥2}‖₁
    (widened by 1e-12‖x_{≥2}‖₁ for that sum's rounding, at most K·u relative)."""
    return np.maximum(l1 - np.abs(x2), 0.0) + 1e-12 * l1


@lru_cache(maxsize=64)
def is_level(K: int) -> np.ndarray:
    """Per order 0 … K, whether it is a stored level of a packed row of order K (:func:`levels`)."""
    out = np.zeros(K + 1, dtype=bool)
    out[levels(K)] = True
    return out


def own_tail_cells(order: np.ndarray, K: int) -> np.ndarray | None:
    """The cells (flat) whose order is not a stored level (:func:`levels`), or None where there are
    none: only there does :func:`own_tails` tighten the bound of :func:`orders`.  At a level L′ the
    bound is the stored tails' own, r^{L′+1}·√(T_α(L′)T_β(L′)), and the ratio :func:`tail_ratios`
    stores there is 1 but for the rounding of a square root of a square (≤ 1: leaving it out states
    that same bound, an ulp above the scaled one at most).  The cells at the grid's level (FLOOR: most
    of them) are left out first, by a comparison."""
    ls = levels(K)
    floor = ls[max(n for n, L in enumerate(ls) if L <= FLOOR or n == 0)]
    other = np.flatnonzero(order != floor)
    if len(other):
        other = other[~is_level(K)[order[other]]]
    return other if len(other) else None


def own_tails(a: Operand, b: Operand, cells: np.ndarray, L: np.ndarray, K: int,
              unders: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Per cell (flat indices ``cells``, orders L), √(T_α(L)/T_α(L′))·√(T_β(L)/T_β(L′)) (:func:`tail_ratios`; 1 where
    L is a level): the factor from the truncation bound r^{L+1}√(T_α(L′)T_β(L′)) of :func:`orders` (the
    tails of the largest level L′ ≤ L, loose: T(16) for a cell summed to order 31) to
    r^{L+1}√(T_α(L)T_β(L)) at the cell's own order.  The order is not changed: only the stated bound
    of the sum :func:`horner_sums` already took.  ``unders``: the cells' rows of A and B, where known."""
    start = K + 5 + len(levels(K)) + ROW_NUMBERS          # the ratios of orders 0 … K
    got = None
    for side, under in zip((a, b), unders if unders is not None else under_both(a, b, cells)):
        if side.rows.flags.c_contiguous:                    # one flat take (no copy of the table)
            index = under * side.rows.shape[1]
            index += L
            part = np.take(side.rows.reshape(-1), index + start)
        else:
            part = side.rows[under, start + L]
        got = part if got is None else np.multiply(got, part, out=got)
    return got


def diagonal_cells(A: np.ndarray, B: np.ndarray, rho: np.ndarray, shape: tuple) -> np.ndarray:
    """The cells (flat) whose row and column are one function at one variance and whose ρ is 1 to
    rounding (ρ ≥ 1 − 8ε): a kernel's diagonal (:func:`diagonal`).  One function at one variance:
    the same E φ² and order (bit for bit: a row sum of the same values) and coefficients equal to
    within 64ε‖α̃‖ (their products with the basis may round differently where the band's other
    variances differ: a tile's rows and columns)."""
    near = np.flatnonzero(rho >= 1.0 - 8 * EPS)
    if not len(near):
        return near
    a, b = Operand(A, shape), Operand(B, shape)
    ia, ib = a.under(near), b.under(near)
    K = order_of(A)
    _, s0, _, n0 = packed_columns(K)
    same = (a.rows[ia, s0] == b.rows[ib, s0]) & (a.rows[ia, -1] == b.rows[ib, -1])
    if not same.any():
        return near[same]
    ia, ib, near = ia[same], ib[same], near[same]
    close = np.abs(a.rows[ia, :K + 1] - b.rows[ib, :K + 1]) <= 64 * EPS * a.rows[ia, n0:n0 + 1]
    return near[np.all(close, axis=1)]


def diagonal(A: np.ndarray, B: np.ndarray, rho: np.ndarray, cells: np.ndarray, shape: tuple,
             value: np.ndarray, err: np.ndarray) -> None:
    """At the ``cells`` (flat) of :func:`diagonal_cells`, the value S = E φ(u)² (ρ = 1) and its
    error, in place.  With c_k = α_k² ≥ 0, f(ρ) = Σ ρ^k c_k is increasing and
    0 ≤ f(1) − f(ρ) = Σ (1 − ρ^k) c_k ≤ (1 − ρ)·Σ_{k≤L} k c_k + T(L) for every level L (1 − ρ^k ≤ k(1 − ρ),
    and ≤ 1): the least of these (0 at ρ = 1) joins S's own error, with the coefficients' error in
    Σ k c_k (≤ L(2‖α̃‖e + e²), e = √(K+1)·δ)."""
    if not len(cells):
        return
    a = Operand(A, shape)
    d = 1.0 - rho[cells]
    K = order_of(A)
    ls = levels(K)
    t0, s0, e0, n0 = packed_columns(K)
    a = a.rows[a.under(cells), :n0 + 1]                      # the coefficients, tails, S, its error, δ, ‖α̃‖
    moments = np.cumsum(np.arange(K + 1) * a[:, :K + 1] ** 2, axis=1)
    e, n = a[:, e0] * np.sqrt(K + 1), a[:, n0]            # ‖α − α̃‖₂ ≤ √(K+1)·δ
    L = np.asarray(ls, dtype=float)                           # every level at once (the same operations)
    gap = np.min(d[:, None] * (moments[:, ls] + L * (2 * n * e + e * e)[:, None]) + a[:, t0:t0 + len(ls)], axis=1)
    value[cells] = a[:, s0]
    err[cells] = a[:, s0 + 1] + np.where(d > 0, gap, 0.0)


class SumCache:
    """The last few :func:`packed_sum` results of one tape's series operations (it asks for a pair
    block's values, and later its errors, with the same packed rows, columns and ρ): kept by the
    identity of A and B and a copy of ρ (a work array may be overwritten in between: ρ is
    compared, not trusted).  Owned by the tape (:class:`.grid.Builder`, ``GridTape.from_json``)."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.items: OrderedDict = OrderedDict()

    def __call__(self, A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
        key = (id(A), id(B), A.shape, B.shape, np.shape(rho), tol)
        got = self.items.get(key)
        if got is not None and got[0] is A and got[1] is B and np.array_equal(got[2], rho):
            return got[3]
        result = packed_sum(A, B, rho, tol)
        self.items[key] = (A, B, np.array(rho, dtype=float), result)
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return result


def summed(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float,
           sums: SumCache | None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`packed_sum`, through the tape's ``sums`` when it has them."""
    return (sums or packed_sum)(A, B, rho, float(tol))


def mehler_value(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: np.ndarray, out=None,
                 sums: SumCache | None = None) -> np.ndarray:
    """Σ_k ρ^k α_k β_k per cell, NaN where the stated error misses ``tol`` (relative above 1):
    the replay's check then sends that pair to the compile."""
    s, err = summed(A, B, rho, tol, sums)
    s = np.where(err <= tol * np.maximum(1.0, np.abs(s)), s, np.nan)
    if out is None:
        return s
    np.copyto(out, s)
    return out


def mehler_error(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: np.ndarray, out=None,
                 sums: SumCache | None = None) -> np.ndarray:
    """The stated error of :func:`mehler_value` per cell."""
    err = summed(A, B, rho, tol, sums)[1]
    if out is None:
        return err
    np.copyto(out, err)
    return out


def mean_value(A: np.ndarray, out=None) -> np.ndarray:
    """E φ(√a z) = α_0 of a packed row."""
    return A[..., 0] if out is None else np.copyto(out, A[..., 0]) or out


def mean_error(A: np.ndarray, out=None) -> np.ndarray:
    """The error of α_0: the coefficients' error estimate δ (per coefficient)."""
    K = int(np.ravel(A[..., -1])[0])
    e = A[..., K + 3 + len(levels(K))]
    return e if out is None else np.copyto(out, e) or out


#: the symbol of every φ in a HermiteRow spec
T = sp.Symbol("t", real=True)


class HermiteRow(sp.Function):
    """HermiteRow(a, Lambda(t, φ), K, h): the packed coefficients of φ at the variance a (a row or
    column operation), to order K by the rule of step h.  The function and the rule are arguments
    (values, compared as such), so that one head serves every function: no registry of heads."""
    nargs = 4

    @property
    def spec(self) -> tuple[sp.Expr, int, float]:
        """(φ as an expression of :data:`T`, K, h)."""
        lam, K, h = self.args[1:]
        return lam.expr.xreplace({lam.variables[0]: T}), int(K), float(h)


@dataclass(frozen=True)
class HermiteSpec:
    """φ (an expression of :data:`T`), K and h: called on a variance, its :class:`HermiteRow`."""
    phi: sp.Expr
    K: int
    h: float

    def __call__(self, a: sp.Expr) -> HermiteRow:
        return HermiteRow(a, sp.Lambda(T, self.phi), sp.Integer(self.K), sp.Float(self.h))


def hermite_head(phi: sp.Expr, K: int, h: float) -> HermiteSpec:
    """The head of φ (an expression of :data:`T`), K and h: ``hermite_head(φ, K, h)(a)``."""
    return HermiteSpec(phi, int(K), float(h))


class MehlerValue(sp.Function):
    """MehlerValue(A, B, ρ, tol): Σ_k ρ^k α_k β_k (:func:`mehler_value`).  Real (as :class:`Mean`):
    sympy then writes |F| of a form F with this head as Abs, not as √(F·conjugate(F)), which has no
    numeric rule on a tape (mish's product forms met it, and were not replayed)."""
    nargs = 4
    is_real = True


class MehlerError(sp.Function):
    """MehlerError(A, B, ρ, tol): its stated error (:func:`mehler_error`)."""
    nargs = 4


class MehlerSlope(sp.Function):
    """MehlerSlope(A, B, ρ): a bound on |∂/∂ρ Σ_k ρ^k α_k β_k| (:func:`mehler_slope`)."""
    nargs = 3


class MehlerCurve(sp.Function):
    """MehlerCurve(A, B, ρ): a bound on 2a·|∂E/∂a| at fixed covariance (:func:`mehler_curve`)."""
    nargs = 3


class DiagonalSlope(sp.Function):
    """DiagonalSlope(A): 2a·|dS/da| of the diagonal value S = E φ(√a z)² (:func:`diagonal_slope`)."""
    nargs = 1


class MeanCurve(sp.Function):
    """MeanCurve(A): 2a·|d Mean(A)/da| (:func:`mean_curve`)."""
    nargs = 1


class Mean(sp.Function):
    """Mean(A): E φ(√a z) = α_0 of packed coefficients (real)."""
    nargs = 1
    is_real = True


class MeanError(sp.Function):
    """MeanError(A): the error of Mean(A)."""
    nargs = 1


#: the grid tape's operation kinds of the series, and their numpy functions (given the op's arg)
KINDS = ("hermite", "mehler", "mehler_err", "mean", "mean_err", "mehler_slope", "mehler_curve", "mean_curve",
         "diagonal_slope")
HEAD_KINDS = {MehlerValue: "mehler", MehlerError: "mehler_err", Mean: "mean", MeanError: "mean_err",
              MehlerSlope: "mehler_slope", MehlerCurve: "mehler_curve", MeanCurve: "mean_curve",
              DiagonalSlope: "diagonal_slope"}
#: the kinds whose functions take the tape's :class:`SumCache` (``sums=``)
SUMMED = frozenset({"mehler", "mehler_err"})
