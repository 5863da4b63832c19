"""The Hermite coefficients of the Mehler series, per input: its *row* operations (see
:mod:`..expect.series` for the rule and its bound, :mod:`.mehler` for the per-pair sums).

Coefficients α_k(a) = E[φ(√a z) h_k(z)] of a numpy function φ at many variances by one matrix
product (the trapezoidal rule on [−13, 13], error estimated by the rule at step 2h: every other
node), with their tail and error estimates.  The grid tape (:mod:`.grid`) packs one variance's
coefficients with their tail, error, norm and the few numbers the per-cell bounds read
(:func:`pack`, laid out as :func:`packed_columns` says), once per input; :class:`PackCache` keeps
the packs of a tape.  A pack's first orders k ≤ :data:`LOW` are computed again in long double, with
their own error δ_low (:func:`low_orders`).
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Callable, Sequence

import numpy as np

from .split_rule import split_coefficients

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
#: with :data:`PLAIN_COEFF_ROUNDING`, but the pack takes half the time: bench/series_kernels.py, tanh
#: and SiLU at N = 300 and 1000; a pack's first orders then again in long double, :func:`low_orders`)
EXTENDED = False
#: the rounding of one coefficient of the plain float64 rule (products by BLAS: their accumulation,
#: 5–12 ε√S, dominates), relative to √S: against the same rule in 80-bit floats (tanh, SiLU, their
#: squares and derivatives' squares; K = 8, 64, 256; variances 0.002–4) max_k |α̃_k − α_k| ≤ 3.1 ε√S.  It
#: was 2ε, with δ = max_k |α̃_k − α̃'_k| + this; scanning more variances against a 110-bit rule (tanh at
#: K = 48, a = 0.51 and 0.73: tests/test_series_bounds.py) found δ short by up to 1.43×, the error less
#: the two rules' difference up to 2.95 ε√S: so 4ε (the packed rows' first orders are now computed
#: again in long double, :func:`low_orders`: this floor is the rest's, and that of φ without long double)
PLAIN_COEFF_ROUNDING = 4 * EPS


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
    :func:`ld_rows` to the power of two ≥ K, at least 8: the same numbers for every K, so that a
    layer's mean and series rows share them)."""
    z, G = ld_rows(max(8, 1 << max(K - 1, 1).bit_length()), h)
    return z, G[:K + 1]


@lru_cache(maxsize=64)
def ld_rows(K: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ld_basis` to order K, by the recurrence h_{k+1} = (z h_k − √k h_{k−1})/√(k+1) on the scaled
    values (bounded: |h_k(z)| e^{−z²/4} ≤ 1).  The nodes z_i = i·h are exact (a 53-bit h times an
    integer below 2¹¹ in a 64-bit significand).  Above order 8 it goes on from the (cached) rows to
    order K/2: each row is the same steps on the same two rows before it, so the bits are those of
    the recurrence from the start, and orders 8, 16, … 512 at one step cost one recurrence to 512."""
    if K > 8:
        z, first = ld_rows(K // 2, h)
        G = np.empty((K + 1, len(z)), dtype=LD)
        G[:len(first)] = first
        return z, recur(z, G, len(first) - 1)
    n = int(np.ceil(HALF_WIDTH / h))
    z = LD(h) * np.arange(-n, n + 1).astype(LD)
    sw = np.sqrt(LD(h) * np.exp(-z * z / 2) / np.sqrt(2 * np.arccos(LD(-1))))
    G = np.empty((K + 1, len(z)), dtype=LD)
    G[0] = sw
    if K:
        G[1] = z * sw
    return z, recur(z, G, 1)


def recur(z: np.ndarray, G: np.ndarray, start: int) -> np.ndarray:
    """G with its rows start + 1 … by the recurrence of :func:`ld_rows` from rows start − 1 and start
    (written in place, and returned), at the nodes z ≥ 0; at z < 0 by parity, G_k(−z) = (−1)^k G_k(z):
    the same bits as the recurrence there (z_{c−i} = −z_{c+i} exactly, and G_0, G_1 are even and odd
    bit for bit; each step's products, difference and quotient by √(k+1) > 0 round to nearest, which
    commutes with negation, so by induction G_k(−z) = (−1)^k G_k(z) bit for bit — but for the sign of an
    exact 0, which the recurrence writes +0 on both sides (h_2(±1) = 0), and so does the parity's) —
    half the work."""
    K = G.shape[0] - 1
    c = len(z) // 2                       # z[c] = 0, z[c + i] = −z[c − i]
    zp, Gp = z[c:], G[:, c:]
    roots, tmp = np.sqrt(np.arange(K + 1).astype(LD)), np.empty(len(zp), dtype=LD)
    for k in range(start, K):             # (z·G_k − √k·G_{k−1})/√(k+1), in place: the same roundings
        g = Gp[k + 1]
        np.multiply(zp, Gp[k], out=g)
        np.multiply(roots[k], G[k - 1, c:], out=tmp)
        np.subtract(g, tmp, out=g)
        np.divide(g, roots[k + 1], out=g)
    for parity in (0, 1):                 # the rows k > start of this parity at z < 0: (−1)^k G_k(−z)
        rows = slice(start + 1 + (parity - start - 1) % 2, K + 1, 2)
        mirror = G[rows, c + 1:][:, ::-1]
        if parity:                        # −G, its zeros +0 again (−0 + 0 = +0), as the recurrence writes them
            np.negative(mirror, out=G[rows, :c])
            np.add(G[rows, :c], LD(0), out=G[rows, :c])
        else:
            G[rows, :c] = mirror
    return G


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
    tape's per-cell bound uses); ``sup_low`` (V,): of max_{k≤LOW} |α_k − α̃_k| (the same for the first
    orders alone, :func:`coefficients`)."""
    alpha: np.ndarray
    tail: np.ndarray
    err: np.ndarray
    norm: np.ndarray
    square: np.ndarray
    square_err: np.ndarray
    sup: np.ndarray | None = None
    sup_low: np.ndarray | None = None

    @property
    def K(self) -> int:
        return self.alpha.shape[1] - 1

    def truncate(self, K: int) -> "Coefficients":
        """The same coefficients up to order K ≤ self.K: the dropped ones join the tail (their
        error, at most err, is counted in the tail through (√T + err)²)."""
        return Coefficients(self.alpha[:, :K + 1], self.tail_at(K), self.err,
                            np.sqrt(np.sum(self.alpha[:, :K + 1] ** 2, 1)), self.square, self.square_err, self.sup,
                            self.sup_low)

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
    orders k ≡ p (mod 2) at their nodes (node-major, (n, m)) of the long double basis ``G``, split with
    ``beta`` bits by the per-order scale 2^{f_k} > max_i |fl(G_ki)| over all the rule's nodes (``rows``: the
    orders' rows there, (m, N); :func:`half_basis`).  ``hi``: fl(G) rounded to β bits of its
    order's power of two 2^{f_k} > max_i |G_ki| (an integer of magnitude ≤ 2^β times 2^{f_k−β}, held
    exactly); ``stack``: fl(G) above fl(G − hi) (2n, m); ``top``: max_k 2^{f_k}; ``l1``: max_k ‖G_k‖₁
    (rounded up).  The split is formed on first use: the plain float64 rule (:data:`EXTENDED` off)
    reads fl(G) alone (:attr:`g64`), and its folds are built for every (K, h) a call meets."""
    G: np.ndarray
    beta: int
    rows: np.ndarray

    @cached_property
    def g64(self) -> np.ndarray:
        """fl(G), contiguous (n, m): the first n rows of :attr:`stack`."""
        return np.ascontiguousarray(self.G.astype(float))

    @cached_property
    def parts(self) -> tuple[np.ndarray, np.ndarray, float, float]:
        """(hi, stack, top, l1) of the class doc: hi from fl(G) split by columns (orders) by
        2^{f_k} > scale ≥ max_i |fl(G_ki)| over all the rule's nodes (one scale per order for every node
        set of a rule: their exact parts add exactly, :func:`_rule`), and fl(G − hi) (G − hi is exact in
        long double: hi is a multiple of ulp(fl(G)) ≥ ulp_ld(G))."""
        G, G64 = self.G, self.G.astype(float)
        if G64.size:
            scale = np.max(np.abs(self.rows.astype(float)), axis=1)
            hi, _, pow2 = split(np.ascontiguousarray(G64.T), self.beta, scale)
            hi, top = hi.T, float(pow2.max())
        else:
            hi, top = G64, 0.0
        rest = (G - hi).astype(float)
        l1 = float(np.max(np.sum(np.abs(G64), axis=0), initial=0.0)) * (1 + 1e-12)
        return np.ascontiguousarray(hi), np.ascontiguousarray(np.concatenate([G64, rest], axis=0)), top, l1

    @property
    def hi(self) -> np.ndarray:
        return self.parts[0]

    @property
    def stack(self) -> np.ndarray:
        return self.parts[1]

    @property
    def top(self) -> float:
        return self.parts[2]

    @property
    def l1(self) -> float:
        return self.parts[3]


def half_basis(G: np.ndarray, beta: int, rows: np.ndarray) -> Half:
    """The :class:`Half` of long double G (node-major (n, m)), split with β bits by the per-order scales
    of its orders' ``rows`` at all the rule's nodes when first needed."""
    return Half(G, beta, rows)


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
            n = half.G.shape[0]
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
            out[:, 0::2] = even @ self.even.g64
        if self.odd is not None:
            odd = plus - minus
            if np.any(odd):
                out[:, 1::2] = odd @ self.odd.g64
        return out


def fold(z: np.ndarray, G: np.ndarray, beta: int, rows: np.ndarray) -> Folded:
    """The parity fold of the nodes z (symmetric about 0, ascending) and their long double basis G
    (:class:`Folded`), split with β bits by the per-order scales of ``rows``, the basis at all the rule's
    nodes (:func:`half_basis`)."""
    n, odd = divmod(len(z), 2)
    first = n + odd                                  # the first node z > 0
    if not np.array_equal(z[first:], -z[n - 1::-1] if n else z[:0]) or (odd and z[n] != 0):
        raise ValueError("the parity fold needs nodes symmetric about 0")
    pos = slice(first, len(z))
    zero = np.arange(n, n + odd)
    even = np.concatenate([G[0::2][:, zero], G[0::2][:, pos]], axis=1).T
    return Folded(pos, slice(n - 1, None, -1) if n else slice(0, 0), zero, half_basis(even, beta, rows[0::2]),
                  half_basis(G[1::2][:, pos].T, beta, rows[1::2]) if G.shape[0] > 1 else None, beta)


@lru_cache(maxsize=64)
def folded_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray, Folded, Folded]:
    """(z, √w in float64, the fold of the rule's every other node z[::2] — the rule of step 2h — and
    the fold of the others z[1::2]) (:func:`ld_basis`): the rule of step h is the sum of the two.  Both
    split with one β, that of :func:`split_bits` of all the folded nodes, and one scale per order, so
    that the sum of their exact parts is exact (:func:`_rule`; the scales formed with the split, when
    first needed)."""
    z, G = ld_basis(K, h)
    beta = split_bits(len(z) // 2 + 1)
    return (z.astype(float), G[0].astype(float), fold(z[::2], G[:, ::2], beta, G),
            fold(z[1::2], G[:, 1::2], beta, G))


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
#: the error of a first coefficient (k ≤ 2) from φ's long double values at every node, relative to √S
#: (:func:`low_rules`: no float64 values, the basis' first rows from a short recurrence): against a
#: 110-bit rule at the same nodes (tests/test_series_bounds.py: tanh, tanh², (1 − tanh²)², SiLU, SiLU²,
#: SiLU′²; K = 8, 48, 256; variances 0.02–4.4) the whole long double rule, its sums included, errs by
#: ≤ 2.4 u_ld √S
LOW_VALUE_ROUNDING = 16 * UNIT_LD


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
    #: the orders 0 … LOW of the plain rule again, accurately (:func:`low_orders`), or None
    low: "LowOrders | None" = None


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


def plain_values(fn: Fn, root: np.ndarray, z: np.ndarray, memo: dict | None) -> np.ndarray:
    """φ in float64 at the points fl(√a·z_i) of the plain rule (V, n): with a ``memo`` (one per set of
    variances and h, :meth:`PackCache.memo`), the points formed once and ``fn`` handed a memo of its
    heads' float64 values there (a :meth:`.tape.HermiteArg.function`: the same numbers as without it),
    so that the functions packed at one layer's variances (SiLU, SiLU², SiLU′, SiLU′²) evaluate each head
    once; a function without ``memo=`` (TypeError) is called on the points alone."""
    if memo is None:
        return np.asarray(fn(root[:, None] * z), dtype=float)
    x = memo.get("plain points")
    if x is None:
        x = memo["plain points"] = root[:, None] * z
    try:
        return np.asarray(fn(x, memo=memo.setdefault("plain heads", {})), dtype=float)
    except TypeError:
        return np.asarray(fn(x), dtype=float)


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
        np.multiply(np.broadcast_to(plain_values(fn, root, z, memo), F.shape), sw, out=F)
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


#: the orders 0 … LOW that the plain float64 rule computes again accurately (:func:`low_orders`): a
#: cell's stated error weights the error of α_k by |β_k| r^k for k ≤ 2 apart, by r³(|β₃| + |β₄|) for
#: k = 3, 4 and that of the rest by r³‖β_{≥5}‖₁ (:func:`.mehler.error_polynomial`): the first terms carry
#: most of a smooth φ's weight (tanh's α₁ and α₃, a mean's α₀)
LOW = 4
#: whether the packed rows compute their first orders again (:func:`pack`): off, δ_low = δ (the plain
#: rule's floor, :data:`PLAIN_COEFF_ROUNDING`: honest, 1.6–2× looser kernels' bounds; the packs
#: 0.05–0.25 s faster at N = 300–1000, bench/series_kernels.py)
FIRST_ORDERS = True
#: the Chebyshev–Lobatto degrees (nested: each one's points among the next's) of the first orders'
#: interpolation in s = √a (:func:`low_orders`), and the largest interpolation estimate accepted, relative
#: to ε√S (the rows' smallest): above it the next degree, after the last the rows one by one (at most
#: :data:`LOW_DIRECT` of them; else the plain rule's own first orders)
LOW_DEGREES, LOW_ACCEPT, LOW_DIRECT = (16, 32, 64), 0.02, 160
#: the first degree tried for a span [s₀, s₁] of relative width w = (s₁ − s₀)/(s₁ + s₀): the first of
#: LOW_DEGREES whose bound here is ≥ w (measured on tanh, tanh², SiLU: the degrees their test accepts);
#: the test still decides, a lower degree only costs a second set of points.  A wider span (SiLU's deep
#: layers: s from 0.08 to 0.9, where degree 64 does not meet the test) is cut into pieces of relative
#: width at most the last
LOW_START = (0.02, 0.2)
#: the most pieces a span is cut into (:func:`low_orders`); a wider one keeps the plain rule's first orders
#: and their δ (honest, looser): tanh's spans take at most 4 (its first layer's, s from 0.56 to 2.04), SiLU's
#: deep layers 5–7 each (s₁/s₀ ≈ 5–10 at every depth), 85 % of its first orders' points (0.1 s CPU of the cold
#: call at N = 300) for little of its kernels' tightness (bench/series_kernels.py, SiLU N = 300 NNGP: 51 with
#: every span, 85 at 4; at 3, its first two layers' left out too, 128)
LOW_PIECES = 4


@dataclass(frozen=True)
class LowOrders:
    """The coefficients α_0 … α_m (m = min(K, :data:`LOW`)) by the rules at h and 2h, rounded to float64
    from long double (``alpha``, ``coarse``: (V, m+1)), and ``bound`` (V,): δ_low, a bound on each one's
    error against the exact coefficient (the rule at h's own error estimated by the two rules'
    difference in long double, as :func:`coefficients` does in float64: :func:`low_orders`)."""
    alpha: np.ndarray
    coarse: np.ndarray
    bound: np.ndarray


def blocks(X: np.ndarray) -> np.ndarray:
    """X (…, n) zero-padded to a multiple of 32 and split into 32 blocks of consecutive terms (…, 32, n/32):
    a sum of each block, then of the blocks, meets at most :func:`sum_roundings` (n) roundings per term
    (its product's included), in any order of summation within each."""
    n = X.shape[-1]
    pad = -n % 32
    if pad:
        X = np.concatenate([X, np.zeros(X.shape[:-1] + (pad,), dtype=X.dtype)], axis=-1)
    return X.reshape(X.shape[:-1] + (32, (n + pad) // 32))


def sum_roundings(n: int) -> int:
    """The roundings a product term meets in a sum of n terms by :func:`blocks`: its product, ⌈n/32⌉ − 1
    additions in its block and 31 among the blocks."""
    return -(-n // 32) + 31


@lru_cache(maxsize=32)
def low_basis(K: int, h: float) -> tuple[np.ndarray, ...]:
    """The long double basis' orders k ≤ min(K, :data:`LOW`) folded by parity (:func:`low_rules`): at the
    nodes z_j = jh, j = 1 … c (c = the middle node's index), their even and odd orders (in :func:`blocks`),
    the same at the nodes of the rule at 2h among them (j ≡ c mod 2), and the even orders at z = 0."""
    G = ld_basis(K, h)[1][:min(K, LOW) + 1]
    c = G.shape[1] // 2
    pos = G[:, c + 1:]
    half = pos[:, (c + 1) % 2::2]                    # j ≡ c (mod 2): the rule at 2h's nodes z > 0
    return blocks(pos[0::2]), blocks(pos[1::2]), blocks(half[0::2]), blocks(half[1::2]), G[0::2, c]


def low_rules(fn: Fn, root: np.ndarray, K: int, h: float,
              memo: dict | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(the rule at h, the rule at 2h: (V, m+1) in long double, the floor of the first and that of the two
    rules' difference (V,) each) of the orders k ≤ m = min(K, :data:`LOW`) at the long double s = √a
    ``root``: φ in long double at every node (:func:`evaluate`; None where it is not), folded by parity
    (h_k(−z) = (−1)^k h_k(z): the even orders from F(z) + F(−z), the odd ones from F(z) − F(−z), z > 0,
    and F(0) for the even ones), the folded values by the long double basis summed in long double
    (:func:`blocks`); a part 0 throughout (φ odd or even in long double at these nodes: then the rule of
    the long double values gives those orders exactly 0) skips its sums.  A rule's floor, against its
    exact value: the values', :data:`LOW_VALUE_ROUNDING`·√S (measured against a 110-bit rule), and the
    sum's roundings, (2 + :func:`sum_roundings` (c))·u_ld·Σ_i |F_i||G_ki| ≤ that·u_ld·C·√S (the fold's
    addition, the blocked sum of c terms, F(0)'s addition)
    (Cauchy–Schwarz: C = 1.01 ≥ ‖G_k‖₂ at h, C = 1.42 ≥ 2‖G_k,even‖₂ at 2h: 2Σ_even G_ki² ≈ 1; √S widened
    by 10⁻⁶), c the nodes z > 0.  The difference's floor counts the values' errors once (as
    :func:`coefficients` does: ±Σ_i ΔF_i G_ki over the two node sets) and both sums' roundings.
    ``memo``: one for these s and h (:func:`low_orders`), shared by the functions packed there: the long
    double points s·z_i under "points", φ's heads' values there under "heads" (:func:`evaluate`)."""
    zl, Gl = ld_basis(K, h)
    points = None if memo is None else memo.get("points")
    if points is None:
        points = root[:, None] * zl
        if memo is not None:
            memo["points"] = points
    vals, accurate = evaluate(fn, points, None if memo is None else memo.setdefault("heads", {}))
    if not accurate:
        return None
    F = vals * Gl[0]
    c = len(zl) // 2
    plus, minus = F[:, c + 1:], F[:, c - 1::-1]
    even, odd = plus + minus, plus - minus
    Ge, Go, He, Ho, G0 = low_basis(K, h)
    m = min(K, LOW) + 1
    fine, coarse = np.zeros((len(root), m), dtype=LD), np.zeros((len(root), m), dtype=LD)
    start = (c + 1) % 2
    if np.any(even) or np.any(F[:, c]):
        fine[:, 0::2] = np.einsum("ibj,kbj->ikb", blocks(even), Ge).sum(axis=-1) + F[:, c, None] * G0
        coarse[:, 0::2] = 2 * np.einsum("ibj,kbj->ikb", blocks(even[:, start::2]), He).sum(axis=-1)
        if c % 2 == 0:                                   # z = 0 is a node of the rule at 2h
            coarse[:, 0::2] += 2 * F[:, c, None] * G0
    if m > 1 and np.any(odd):
        fine[:, 1::2] = np.einsum("ibj,kbj->ikb", blocks(odd), Go).sum(axis=-1)
        coarse[:, 1::2] = 2 * np.einsum("ibj,kbj->ikb", blocks(odd[:, start::2]), Ho).sum(axis=-1)
    top = np.sqrt(np.einsum("ij,ij->i", F, F).astype(float)) * (1 + 1e-6)
    sums_h = (2 + sum_roundings(c)) * UNIT_LD * 1.01 * top
    sums_2h = (2 + sum_roundings((c + 1) // 2)) * UNIT_LD * 1.42 * top
    return fine, coarse, LOW_VALUE_ROUNDING * top + sums_h, LOW_VALUE_ROUNDING * top + sums_h + sums_2h


@lru_cache(maxsize=128)
def odd_weights(n: int, lo: float, hi: float) -> np.ndarray:
    """The weights (n/2, n/2 + 1) of the degree n/2 interpolant (:func:`barycentric`) at the odd
    Chebyshev–Lobatto points of degree n on [lo, hi] (not to be written: cached)."""
    nodes = lobatto(n, lo, hi)
    return barycentric(nodes[::2], nodes[1::2])[0]


@lru_cache(maxsize=128)
def lobatto(n: int, lo: float, hi: float) -> np.ndarray:
    """The n + 1 Chebyshev–Lobatto points of [lo, hi] in long double, from hi down to lo (not to be
    written: cached)."""
    mid, half = (LD(lo) + LD(hi)) / 2, (LD(hi) - LD(lo)) / 2
    return mid + half * np.cos(np.arange(n + 1).astype(LD) * np.arccos(LD(-1)) / n)


def barycentric(nodes: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the weights ℓ_j(x) (V, n+1), the Lebesgue function λ(x) = Σ_j |ℓ_j(x)| (V,)) of the polynomial
    interpolant at the Chebyshev–Lobatto ``nodes`` (:func:`lobatto`), by the barycentric formula of the
    second kind (weights (−1)^j, halved at the ends), in long double; a point on a node takes it alone."""
    n = len(nodes) - 1
    w = np.where(np.arange(n + 1) % 2, LD(-1), LD(1))
    w[0] /= 2
    w[-1] /= 2
    d = x[:, None] - nodes[None, :]
    hit = d == 0
    d[hit] = 1
    c = w / d
    c /= c.sum(axis=1)[:, None]
    rows, cols = np.nonzero(hit)
    c[rows] = 0
    c[rows, cols] = 1
    return c, np.sum(np.abs(c), axis=1).astype(float)


def low_orders(fn: Fn, variances: np.ndarray, K: int, h: float, memo: dict | None) -> LowOrders | None:
    """The plain rule's first orders k ≤ m = min(K, :data:`LOW`) again, accurately (:class:`LowOrders`),
    where φ evaluates in long double (else None).  The rule at h (and at 2h) is an analytic function of
    s = √a (a finite sum of φ(s z_i) times constants: tanh's, SiLU's and softplus' singularities are at
    imaginary s alone, and ELU's kink stays at z = 0): at ``variances`` (sorted, distinct) over a span
    [s₀, s₁] it is interpolated from the long double rules (:func:`low_rules`) at the Chebyshev–Lobatto
    points of the span, of degree n = 16, 32 or 64 (:data:`LOW_DEGREES`, the first by the span's width,
    :data:`LOW_START`; nested: each degree adds only its new points), until the interpolants of degrees
    n/2 and n differ by at most :data:`LOW_ACCEPT`·ε√S at every variance (S the smallest at the points).  The first orders' cost is then that of a few dozen
    variances, whatever their number.

    Per variance, with ℓ_j and λ of :func:`barycentric`: the interpolant of degree n of values v_j with
    errors e_j errs against the function by at most est + λ·max_j |e_j| + 2(3n + 4)·u_ld·λ·max_j |v_j − v_c|:
    est the two degrees' difference (geometric convergence: the coarser interpolant's error overstates
    the finer one's, as the rule at 2h does the rule at h), the points' errors through the interpolant
    (|Σ_j ℓ_j e_j| ≤ λ·max|e_j|), and the formula's roundings in long double (Higham 2004, the second
    kind's forward bound, twice), its values taken about the middle point's v_c (Σ_j ℓ_j = 1).  So for
    the rule at h (points' errors: floor_h of :func:`low_rules`), e_h; for the two rules' difference D,
    e_D (points' errors: the values' error once, as :func:`coefficients` counts it, and both sums'
    roundings); and δ_low = |D̃| + e_D + e_h + u·max_k |α̃_k| (the rule at h's error estimated by |D|, as
    :func:`coefficients` does, D̃ the interpolated difference).

    The two degrees' difference is a polynomial of degree n, 0 at the even points: est ≤ Λ_n·max over the
    odd points (Λ_n ≤ (2/π)·log(n + 1) + 1 at Chebyshev–Lobatto points, Brutman 1997; taken + 0.5), so
    that only the final interpolant meets every variance.

    A few variances (≤ 2·33), or one s, take the rules at each variance directly (est = 0, λ = 1).  A span
    wider than the last of :data:`LOW_START` is cut into the fewest pieces of at most that relative width
    (in geometric progression: s₁/s₀ the same for each), each interpolated alone; one that needs more than
    :data:`LOW_PIECES` pieces gives None (the plain rule's first orders stay).  Where an interpolant does not meet
    the test by the last degree, the rules are taken at each variance where there are at most
    :data:`LOW_DIRECT` variances, and the result is None where there are more."""
    a = np.asarray(variances, dtype=float)
    roots = np.sqrt(np.clip(a, 0.0, None).astype(LD))
    sub = (lambda key: memo.setdefault(("low",) + key, {})) if memo is not None else (lambda key: None)
    if len(a) <= 2 * (LOW_DEGREES[1] + 1) or roots[0] == roots[-1]:
        return direct_low(fn, roots, K, h, sub(("rows",)))
    lo, hi = float(roots[0]), float(roots[-1])
    widest = LOW_START[-1]
    cut = np.zeros(0, dtype=int)
    if lo > 0 and (hi - lo) / (hi + lo) > widest:          # pieces of relative width ≤ `widest`
        count = int(np.ceil(np.log(hi / lo) / np.log((1 + widest) / (1 - widest))))
        if count > LOW_PIECES:
            return None
        edges = lo * (hi / lo) ** (np.arange(count + 1) / count)     # equal pieces, s₁/s₀ = (hi/lo)^(1/count)
        cut = np.searchsorted(roots.astype(float), edges[1:-1], side="right")
    spans = [Span(rows, roots[rows]) for rows in np.split(np.arange(len(a)), cut) if len(rows)]
    per_root = LOW_VALUE_ROUNDING + (2 + sum_roundings(len(ld_basis(K, h)[0]) // 2)) * UNIT_LD * 1.01
    level, pending = 0, spans
    while pending:                          # the new points of every pending span, in one long double rule
        need = [(x, x.points()) for x in pending]
        got = low_rules(fn, np.concatenate([p for _, p in need]), K, h,
                        sub(("points", level) + tuple((x.lo, x.degree) for x, _ in need)))
        if got is None:
            return None
        start, still = 0, []
        for x, p in need:
            x.add(tuple(v[start:start + len(p)] for v in got))
            start += len(p)
            if not x.test(per_root, sub(("weights", x.lo, x.degree))):
                if not x.next():
                    return direct_low(fn, roots, K, h, sub(("rows",))) if len(a) <= LOW_DIRECT else None
                still.append(x)
        level, pending = level + 1, still
    return LowOrders(*(np.concatenate([getattr(x.result, f) for x in spans]) for f in ("alpha", "coarse", "bound")))


class Span:
    """One span of :func:`low_orders`: its rows (indices) and their s, the Chebyshev–Lobatto degree it is
    at (the first of :data:`LOW_DEGREES` its relative width allows, :data:`LOW_START`), the long double
    rules at its points so far, and its :class:`LowOrders` once a degree meets the test."""

    def __init__(self, rows: np.ndarray, roots: np.ndarray) -> None:
        self.rows, self.roots = rows, roots
        self.lo, self.hi = float(roots[0]), float(roots[-1])
        width = (self.hi - self.lo) / (self.hi + self.lo)
        self.index = min((j for j, w in enumerate(LOW_START) if width <= w), default=len(LOW_DEGREES) - 1)
        self.got: tuple | None = None
        self.result: LowOrders | None = None

    @property
    def degree(self) -> int:
        return LOW_DEGREES[self.index]

    @property
    def direct(self) -> bool:
        """Whether it takes the rules at its own rows (one s, or no more rows than its degree's points)."""
        return self.lo == self.hi or len(self.rows) <= self.degree + 1

    def nodes(self) -> np.ndarray:
        return self.roots if self.direct else lobatto(self.degree, self.lo, self.hi)

    def points(self) -> np.ndarray:
        """The points whose rules it needs next: all of its degree's at first, then the new (odd) ones."""
        return self.nodes() if self.got is None else self.nodes()[1::2]

    def add(self, new: tuple) -> None:
        self.got = new if self.got is None else tuple(interleave(x, y) for x, y in zip(self.got, new))

    def next(self) -> bool:
        """To the next degree (False after the last); one that makes it direct starts its points afresh."""
        self.index += 1
        if self.index < len(LOW_DEGREES) and self.direct:
            self.got = None
        return self.index < len(LOW_DEGREES)

    def test(self, per_root: float, weights: dict | None) -> bool:
        """Whether its interpolant meets the test of :func:`low_orders` (then ``result`` is set); a span of
        one s takes its rule at that point directly.  ``weights``: a memo of its interpolation weights at its
        rows (one per set of variances and degree: the functions packed there share them)."""
        fine, coarse, floor_h, floor_D = self.got
        if self.direct:
            self.result = finish(fine, coarse, floor_h + floor_D)
            return True
        n, nodes = self.degree, self.nodes()
        D = fine - coarse
        c_odd = odd_weights(n, self.lo, self.hi)
        leb = 2 / np.pi * np.log(n + 1) + 1.5
        est_h = leb * float(np.max(np.abs(fine[1::2] - c_odd @ fine[::2]), initial=0.0))
        if est_h > LOW_ACCEPT * EPS * float(np.min(floor_h)) / per_root:
            return False
        est_D = leb * float(np.max(np.abs(D[1::2] - c_odd @ D[::2]), initial=0.0))
        if weights is None:
            c, lam = barycentric(nodes, self.roots)
        else:
            if "c" not in weights:
                weights["c"], weights["lam"] = barycentric(nodes, self.roots)
            c, lam = weights["c"], weights["lam"]
        live = np.flatnonzero(np.any(fine != 0, axis=0))      # (a parity's zero orders stay 0)
        centre = fine[n // 2, live]
        dev = fine[:, live] - centre
        I_h = np.zeros((len(self.roots), fine.shape[1]), dtype=LD)
        I_h[:, live] = c @ dev + centre
        rounding = 2 * (3 * n + 4) * UNIT_LD * lam * float(np.max(np.abs(dev), initial=0.0))
        e_h = est_h + lam * float(np.max(floor_h)) + rounding
        bound_D = est_D + lam * float(np.max(np.abs(D)) + np.max(floor_D))       # ≥ |D| at every variance
        self.result = finish(I_h, None, bound_D + e_h)
        return True


def interleave(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The values at the Lobatto points of degree 2n from those at degree n (``old``: its even points)
    and the n new ones (``new``: the odd points)."""
    out = np.empty((len(old) + len(new),) + old.shape[1:], dtype=old.dtype)
    out[0::2], out[1::2] = old, new
    return out


def finish(fine: np.ndarray, coarse: np.ndarray | None, errors: np.ndarray) -> LowOrders:
    """:class:`LowOrders` from the long double rule at h (V, m+1), the rule at 2h (or None: then α̃' = α̃,
    the two rules' difference being in ``errors``) and the errors' part of δ_low (V,): δ_low =
    max_k |fine − coarse| (in long double) + that + u·max_k |α̃_k|, α̃ = fl(fine), widened by 4ε for its
    own roundings."""
    alpha = fine.astype(float)
    diff = 0.0 if coarse is None else np.max(np.abs(fine - coarse), axis=1).astype(float)
    return LowOrders(alpha, alpha if coarse is None else coarse.astype(float),
                     (diff + errors + (EPS / 2) * np.max(np.abs(alpha), axis=1)) * (1 + 4 * EPS))


def direct_low(fn: Fn, roots: np.ndarray, K: int, h: float, memo: dict | None) -> LowOrders | None:
    """:func:`low_rules` at each variance (s = ``roots``): δ_low = d + floor_h + floor_D + u·max_k |α̃_k|
    (:func:`low_orders` without the interpolation: est = 0, λ = 1)."""
    got = low_rules(fn, roots, K, h, memo)
    if got is None:
        return None
    fine, coarse, floor_h, floor_D = got
    return finish(fine, coarse, floor_h + floor_D)


def _rule(fn: Fn, variances: np.ndarray, K: int, h: float, memo: dict | None = None, low: bool = False) -> Rule:
    """The coefficients (V, K+1) and E φ(√a z)² (V,) for each variance by the trapezoidal rule of step
    h (geometric convergence for φ analytic in a strip), and the same by its every other node (the
    rule of step 2h, for the error estimate: no new evaluation of φ).  The weighted values
    F_i = √w_i φ(√a z_i): on the core window |z_i| ≤ :data:`CORE_Z` in long double where φ allows
    (:func:`evaluate`; √a, z_i and √w_i in long double), in float64 outside it; split once
    (:func:`split`, by 2^e > √S(1 + 10⁻⁶) ≥ max_i |F_i|) with the core's rest fl(F^ld − hi) (exact in
    long double: |F^ld − hi| ≤ 2^{e−β−1}(1 + 2⁻⁵⁰)); the products with the basis exact but for a small
    bound (:meth:`Folded.product`) by the parity fold, on one BLAS thread (:func:`one_thread`).
    ``memo``: a dict for these variances and h (:meth:`PackCache.memo`): the core's long double points
    under ("points", d), and φ's heads' values there under d (:func:`evaluate`).  ``low``: the plain rule
    computes its first orders again accurately (:func:`low_orders`; the packed rows' ``Rule.low``)."""
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
                    PLAIN_COEFF_ROUNDING * np.sqrt(square), SQUARE_ROUNDING * square, False,
                    low_orders(fn, variances, K, h, memo) if low else None)
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
                 memo: dict | None = None, low: bool = False) -> Coefficients:
    """The coefficients of φ = ``fn`` (a numpy function) up to order K at each variance, with
    the tail and error estimates of the module doc: the trapezoidal rule at step h, and at step
    2h (its every other node) for the error estimate (it converges geometrically: the coarser
    rule's difference overestimates the finer one's error).

    Per coefficient, δ = max_k |α̃_k − α̃'_k| (the two rules) + the floor of :class:`Rule` (the values'
    error: :data:`LD_COEFF_ROUNDING`·√S on the long double core and the float64 values' charge outside
    it, or :data:`COEFF_ROUNDING`·√S for a φ evaluated in float64; the products' bound; u·max_k |α̃_k|);
    in ℓ2, ‖α − α̃‖ ≤ ‖α̃ − α̃'‖ + √(K+1)·floor.  With ``low``, the plain float64 rule computes the orders
    k ≤ :data:`LOW` again accurately (:func:`low_orders`: their values replaced, their own error δ_low in
    ``Coefficients.sup_low``, δ then the larger of the rest's and δ_low); without, δ_low = δ."""
    a = np.asarray(variances, dtype=float).ravel()
    h = step_for(K, float(a.max(initial=0.0))) if h is None else h
    if h < 0:                           # −w: Gauss–Legendre panels of width w split at a kink at 0
        alpha, tail, err, norm, S, square_err, sup = split_coefficients(fn, a, K, -h)
        return Coefficients(alpha, tail, err, norm, S, square_err, sup, sup)     # δ_low = δ
    r = _rule(fn, a, K, h, memo, low)
    alpha, S, coarse, S1, floor = r.alpha, r.square, r.coarse, r.coarse_square, r.floor
    m = min(K, LOW) + 1
    parity = 0.0
    if r.low is not None:               # a parity's zeros (the fold's exact 0) stay 0, their |α̃| in δ_low
        zero = alpha[:, :m] == 0
        parity = np.max(np.where(zero, np.abs(r.low.alpha), 0.0), axis=1)
        alpha[:, :m], coarse[:, :m] = np.where(zero, 0.0, r.low.alpha), np.where(zero, 0.0, r.low.coarse)
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
    # (without the first orders again, they keep δ: the plain rule's floor is measured against its max over k)
    sup = np.max(diff[:, m:] if r.low is not None else diff, axis=1, initial=0.0) + floor
    sup_low = sup if r.low is None else r.low.bound + parity
    sup = np.maximum(sup, sup_low)
    return Coefficients(alpha, tail, err, np.sqrt(kept), S, np.abs(S - S1) + r.square_floor, sup, sup_low)


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
    order L = 0 … K (:func:`tail_ratios`), K] (:func:`coefficients` with the first orders again in
    long double, at the recorded step h; δ the error of each coefficient, ``Coefficients.sup``, and
    δ_low that of the first orders among the row numbers; the tails below K as
    :meth:`Coefficients.truncate` states them: T(L) ≤ (√T(K) + ‖α̃_{L<k≤K}‖ + ‖α − α̃‖)²)."""
    a = np.asarray(a, dtype=float)
    ua, inv = np.unique(a.ravel(), return_inverse=True)
    c = coefficients(fn, ua, K, h, memo, low=FIRST_ORDERS)
    beyond = np.cumsum((c.alpha ** 2)[:, ::-1], axis=1)[:, ::-1]      # Σ_{k ≥ j} α_k²
    tails = [(np.sqrt(c.tail) + np.sqrt(beyond[:, L + 1]) + c.err) ** 2 if L < K else c.tail for L in levels(K)]
    out = np.concatenate([c.alpha, np.stack(tails, 1), c.square[:, None], c.square_err[:, None],
                          c.sup[:, None], c.norm[:, None], compute_row_numbers(c.alpha, c.sup_low),
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
        their heads once; the plain rule's float64 points and its heads' values there too
        (:func:`plain_values`).  The most recent few kept (about ``limit`` bytes: a core of about 250
        long double values per variance and head), and no more than ``limit`` bytes of arrays held in
        them (:func:`held_bytes`; the plain rule's are V × n float64 values per head, 2 MB at V = 300
        and h = 1/32), the least recently used dropped first (never the new one)."""
        key = (variances.tobytes(), h)
        got = self.memos.get(key)
        if got is None:
            got = self.memos[key] = {}
            # (the plain rule keeps a few long double rows per set of variances: :func:`low_orders`)
            size = min(8, max(2, self.limit // (4 * 16 * 250 * max(1, len(variances))))) if EXTENDED else 16
            sizes = [held_bytes(m) for m in self.memos.values()]
            total = sum(sizes)
            for held in sizes[:-1]:
                if len(self.memos) <= size and total <= self.limit:
                    break
                self.memos.popitem(last=False)
                total -= held
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


def held_bytes(memo: object) -> int:
    """The bytes of the arrays held in a memo (:meth:`PackCache.memo`: dicts of arrays and dicts)."""
    if isinstance(memo, np.ndarray):
        return memo.nbytes
    if isinstance(memo, dict):
        return sum(held_bytes(v) for v in memo.values())
    return 0



def packed_columns(K: int) -> tuple[int, int, int, int]:
    """(first tail, S, δ, ‖α̃‖): the positions in a packed row of order K (:func:`pack`; δ the error
    of each coefficient; the :func:`row_numbers` follow ‖α̃‖)."""
    nl = len(levels(K))
    return K + 1, K + 1 + nl, K + 3 + nl, K + 4 + nl


# ---------------------------------------------------------------------------------------------
# per-cell bounds from a few numbers per row: Σ_k |ρ|^k |x_k y_k| ≤ |x₀y₀| + |ρ||x₁y₁| + ρ²‖x_{≥2}‖‖y_{≥2}‖

#: the columns of :func:`row_numbers`
R_A0, R_A1, R_N2, R_L1, R_W2, R_S0, R_S1, R_S2, R_C0, R_C1, R_C2, R_N3, R_S3, R_C3, R_DL, R_A34 = range(16)


def row_numbers(A: np.ndarray) -> np.ndarray:
    """The :func:`compute_row_numbers` of a packed row (…, W), stored in it by :func:`pack`."""
    K = int(np.ravel(A[..., -1])[0])
    start = K + 5 + len(levels(K))
    return A[..., start:start + ROW_NUMBERS]


#: how many numbers :func:`compute_row_numbers` gives per row
ROW_NUMBERS = 16


def compute_row_numbers(alpha: np.ndarray, low_error: np.ndarray) -> np.ndarray:
    """Per row of coefficients α_0 … α_K (…, K+1) the numbers of the per-cell bounds (…, 16):
    |α₀|, |α₁|, ‖α_{≥2}‖₂, ‖α_{≥2}‖₁, ‖(√k α_k)_{k≥2}‖ (the plain series x_k = α_k); then for
    x_k = √(k+1) α_{k+1} (the ρ-derivative, :func:`mehler_slope`) and x_k = √((k+1)(k+2)) α_{k+2}
    (the variance derivative, :func:`mehler_curve`) |x₀|, |x₁|, ‖x_{≥2}‖₂; then ‖x_{≥3}‖₂ of the
    three (the signed bounds of :func:`signed_weighted`); then ``low_error``, the error δ_low of α_0 …
    α_LOW (``Coefficients.sup_low``), and |α₃| + |α₄|.  Computed once per distinct variance, when the row
    is packed (:func:`pack`)."""
    al = alpha
    K = al.shape[-1] - 1
    k = np.arange(K + 1, dtype=float)
    sq = al * al
    ksq, k2sq = k * sq, (k * (k - 1)) * sq           # k α_k², k(k−1) α_k²: each sum below reads a tail of one
    out = np.empty(al.shape[:-1] + (ROW_NUMBERS,))
    out[..., R_A0], out[..., R_A1] = np.abs(al[..., 0]), np.abs(al[..., 1])
    out[..., R_N2] = np.sqrt(np.sum(sq[..., 2:], axis=-1))
    out[..., R_L1] = np.sum(np.abs(al[..., 2:]), axis=-1)
    out[..., R_W2] = np.sqrt(np.sum(ksq[..., 2:], axis=-1))
    out[..., R_S0], out[..., R_S1] = np.abs(al[..., 1]), np.sqrt(2.0) * np.abs(al[..., 2])
    out[..., R_S2] = np.sqrt(np.sum(ksq[..., 3:], axis=-1))
    out[..., R_C0], out[..., R_C1] = np.sqrt(2.0) * np.abs(al[..., 2]), np.sqrt(6.0) * np.abs(al[..., 3])
    out[..., R_C2] = np.sqrt(np.sum(k2sq[..., 4:], axis=-1))
    out[..., R_N3] = np.sqrt(np.sum(sq[..., 3:], axis=-1))
    out[..., R_S3] = np.sqrt(np.sum(ksq[..., 4:], axis=-1))
    out[..., R_C3] = np.sqrt(np.sum(k2sq[..., 5:], axis=-1))
    out[..., R_DL] = low_error
    out[..., R_A34] = np.sum(np.abs(al[..., 3:5]), axis=-1)
    return out
