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
from typing import Callable, Sequence

import numpy as np
import sympy as sp

EPS = np.finfo(float).eps
Fn = Callable[[np.ndarray], np.ndarray]
#: the rounding of one coefficient α̃_k = Σ_i F_i G_ki, relative to √S = ‖F‖ (|α̃_k| ≤ ‖F‖‖G_k‖, ‖G_k‖ ≈ 1).
#: Against the same rule in 80-bit floats (φ = tanh, SiLU, their squares and their derivatives' squares;
#: K = 8, 64, 256; variances 0.002–4): max_k |α̃_k − α_k| ≤ 3.1 ε√S, and the stated
#: δ = max_k |α̃_k − α̃'_k| + this (the rule at 2h differs by its own rounding) ≥ 1.8× it everywhere
COEFF_ROUNDING = 2 * EPS
#: the rounding of S̃ = Σ_i F_i² relative to S (measured as above: ≤ 3.5 ε)
SQUARE_ROUNDING = 4 * EPS


#: the rule's half-width: beyond |z| = T, pdf(z)·h_k(z)·φ is below 1e-18 (|h_k(z)| e^{−z²/4} ≤ 1)
HALF_WIDTH = 13.0


def step_for(K: int, largest_variance: float) -> float:
    """The trapezoidal step for coefficients up to order K: h_k oscillates with wavenumber up to
    √(4K + 2)/2, and φ(√a ·)'s strip of analyticity narrows like 1/√a."""
    return min(0.05, 1.8 / np.sqrt(4 * K + 2)) * min(1.0, np.sqrt(2.0 / max(largest_variance, 1e-300)))


@lru_cache(maxsize=16)
def hermite_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """(z, G) of the trapezoidal rule of step h on [−T, T] (Σ w_i f(z_i) ≈ E f(z), z ~ N(0, 1),
    w_i = h·pdf(z_i)): G[k, i] = √w_i h_k(z_i), k ≤ K, by the recurrence
    h_{k+1} = (z h_k − √k h_{k−1})/√(k+1) on the scaled values (bounded: |h_k(z)| e^{−z²/4} ≤ 1)."""
    n = int(np.ceil(HALF_WIDTH / h))
    z = h * np.arange(-n, n + 1)
    sw = np.sqrt(h * np.exp(-z ** 2 / 2) / np.sqrt(2 * np.pi))
    G = np.empty((K + 1, len(z)))
    G[0] = sw
    if K:
        G[1] = z * sw
    for k in range(1, K):
        G[k + 1] = (z * G[k] - np.sqrt(k) * G[k - 1]) / np.sqrt(k + 1)
    return z, G


@dataclass(frozen=True)
class Coefficients:
    """Hermite coefficients of one function at several variances, with what the bound needs.

    ``alpha`` (V, K+1): α̃_k for each variance; ``tail`` (V,): an upper estimate of
    T(K) = Σ_{k>K} α_k²; ``err`` (V,): of ‖α − α̃‖₂ (k ≤ K); ``norm`` (V,): ‖α̃‖₂ (≤ √(E φ²) + err);
    ``square`` (V,): E φ(√a z)² (the diagonal of E φψ when φ = ψ); ``square_err`` (V,): its error
    estimate (the rule at step 2h, plus rounding); ``sup`` (V,): of max_k |α_k − α̃_k| (the rule at
    step 2h, plus :data:`COEFF_ROUNDING`·√S: what the grid tape's per-cell bound uses)."""
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
        drop = self.alpha[:, K + 1:]
        extra = np.sqrt(np.sum(drop ** 2, axis=1))
        tail = (np.sqrt(self.tail) + extra + self.err) ** 2
        return Coefficients(self.alpha[:, :K + 1], tail, self.err, np.sqrt(np.sum(self.alpha[:, :K + 1] ** 2, 1)),
                            self.square, self.square_err, self.sup)


@dataclass(frozen=True)
class Folded:
    """A symmetric node set folded by parity: h_k(−z) = (−1)^k h_k(z), so with F the weighted
    values at the nodes, Σ_i F_i G[k, i] = Σ_{z_i>0} (F(z_i) ± F(−z_i)) G[k, i] (+ the node z = 0
    for even k): the even orders from F's even part, the odd ones from its odd part, each a
    product of half the nodes by half the orders (a quarter of the work, twice)."""
    pos: np.ndarray          # indices of the nodes z > 0, ascending
    neg: np.ndarray          # indices of their mirrors −z
    zero: np.ndarray         # the index of z = 0 (empty if not a node)
    even: np.ndarray         # G[0::2, pos].T, contiguous
    odd: np.ndarray          # G[1::2, pos].T, contiguous
    even0: np.ndarray        # G[0::2, zero] (shape (len(zero), ⌈(K+1)/2⌉))

    def product(self, F: np.ndarray, K: int) -> np.ndarray:
        """F @ G.T (shape (V, K+1)) by the parity fold."""
        plus, minus = F[:, self.pos], F[:, self.neg]
        out = np.empty((F.shape[0], K + 1))
        out[:, 0::2] = (plus + minus) @ self.even
        if len(self.zero):
            out[:, 0::2] += F[:, self.zero] @ self.even0
        if K:
            out[:, 1::2] = (plus - minus) @ self.odd
        return out


def fold(z: np.ndarray, G: np.ndarray) -> Folded:
    """The parity fold of the nodes z (symmetric about 0) and their basis G (:class:`Folded`)."""
    pos = np.nonzero(z > 0)[0]
    neg = len(z) - 1 - pos
    if not np.array_equal(z[neg], -z[pos]):
        raise ValueError("the parity fold needs nodes symmetric about 0")
    zero = np.nonzero(z == 0)[0]
    return Folded(pos, neg, zero, np.ascontiguousarray(G[0::2][:, pos].T), np.ascontiguousarray(G[1::2][:, pos].T),
                  np.ascontiguousarray(G[0::2][:, zero].T))


@lru_cache(maxsize=16)
def folded_basis(K: int, h: float) -> tuple[np.ndarray, np.ndarray, Folded, Folded]:
    """(z, √w, the fold of the rule of step h, the fold of its every other node) (:func:`hermite_basis`)."""
    z, G = hermite_basis(K, h)
    return z, G[0], fold(z, G), fold(z[::2], G[:, ::2])


def _rule(fn: Fn, variances: np.ndarray, K: int, h: float) -> tuple[np.ndarray, ...]:
    """(α̃, S̃, α̃', S̃'): the coefficients (V, K+1) and E φ(√a z)² (V,) for each variance by the
    trapezoidal rule of step h (geometric convergence for φ analytic in a strip), and the same by
    its every other node (the rule of step 2h, for the error estimate: no new evaluation of φ).
    The products with the basis go by the parity fold (:class:`Folded`), on one BLAS thread
    (:func:`one_thread`)."""
    z, sw, fine, coarse = folded_basis(K, h)
    pts = np.sqrt(np.clip(variances, 0.0, None))[:, None] * z[None, :]
    F = (np.asarray(fn(pts), dtype=float) * np.ones_like(pts)) * sw
    Fc = F[:, ::2]
    with one_thread():
        return (fine.product(F, K), np.einsum("ij,ij->i", F, F), 2 * coarse.product(Fc, K),
                2 * np.einsum("ij,ij->i", Fc, Fc))


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


def coefficients(fn: Fn, variances: Sequence[float], K: int, h: float | None = None) -> Coefficients:
    """The coefficients of φ = ``fn`` (a numpy function) up to order K at each variance, with
    the tail and error estimates of the module doc: the trapezoidal rule at step h, and at step
    2h (its every other node) for the error estimate (it converges geometrically: the coarser
    rule's difference overestimates the finer one's error)."""
    a = np.asarray(variances, dtype=float).ravel()
    h = step_for(K, float(a.max(initial=0.0))) if h is None else h
    alpha, S, coarse, S1 = _rule(fn, a, K, h)
    rounding = COEFF_ROUNDING * np.sqrt(S)
    quad = np.sqrt(np.sum((alpha - coarse) ** 2, axis=1))
    err = quad + 16 * EPS * np.sqrt(S) * np.sqrt(K + 1)     # ℓ2 over k ≤ K (the engine's Cauchy–Schwarz bound)
    kept = np.sum(alpha ** 2, axis=1)
    # T(K) = S − Σ_{k≤K} α_k²: the computed difference, S's quadrature error, the coefficients'
    # (|Σα² − Σα̃²| ≤ 2‖α̃‖e + e² for their quadrature error e) and the rounding of two sums of size S
    # (S̃ and Σα̃² are sums of the same weighted values F: S̃ − Σα̃² = ‖F − its projection‖² ≥ 0 up to
    # the rounding of F Gᵀ, a few ε·S — not 2‖α̃‖·√(K+1)·(rounding of one coefficient))
    tail = np.clip(S - kept, 0.0, None) + np.abs(S - S1) + 2 * quad * np.sqrt(kept) + quad ** 2 + 16 * EPS * S
    sup = np.max(np.abs(alpha - coarse), axis=1, initial=0.0) + rounding
    return Coefficients(alpha, tail, err, np.sqrt(kept), S, np.abs(S - S1) + SQUARE_ROUNDING * S, sup)


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
#: the truncation levels of a packed row (those below its K, and K): each cell sums the series
#: to the smallest level whose bound meets the target at its ρ (a cell's bits depend on it alone)
LEVELS = (8, 16, 32, 64, 128, 256, 512)


def levels(K: int) -> list[int]:
    return [k for k in LEVELS if k < K] + [K]


def pack(fn: Fn, K: int, h: float, a: np.ndarray) -> np.ndarray:
    """The packed coefficients of φ = fn at the variances ``a`` (any shape; computed once per
    distinct value): shape a.shape + (W,), [α_0 … α_K, T(L) for each level L of :func:`levels`,
    S = E φ², its error, δ, ‖α̃‖, the numbers of :func:`compute_row_numbers`, K] (:func:`coefficients`,
    at the recorded step h; δ the error of each coefficient, ``Coefficients.sup``)."""
    a = np.asarray(a, dtype=float)
    ua, inv = np.unique(a.ravel(), return_inverse=True)
    c = coefficients(fn, ua, K, h)
    tails = [c.truncate(L).tail if L < K else c.tail for L in levels(K)]
    out = np.concatenate([c.alpha, np.stack(tails, 1), c.square[:, None], c.square_err[:, None],
                          c.sup[:, None], c.norm[:, None], compute_row_numbers(c.alpha),
                          np.full((len(ua), 1), float(K))], axis=1)
    return out[inv].reshape(a.shape + (out.shape[1],))


def packed_sum(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """(Σ_{k≤L} ρ^k α_k β_k, its stated error) for packed rows A and columns B (broadcasting) and ρ,
    each cell to the smallest level L whose truncation bound meets ``tol``·max(1, ‖α̃‖‖β̃‖)·AIM at
    its ρ (the largest level where none does).  The stated error (:func:`cell_error`) is that
    truncation bound, the coefficients' errors weighted by the other side's Σ|ρ|^k|β_k| and the
    rounding of the sum, each bounded per cell through the first terms and a norm of the rest
    (:func:`weighted`): it follows |ρ| down to 0.  A cell at ρ = 1 whose row and column are the same
    (one function at one variance: u = v) takes the 1-D rule's E φ² and its error instead (no
    truncation there: the diagonal of a kernel agrees with its own variances, :func:`diagonal`)."""
    K = int(np.ravel(A[..., -1])[0])
    ls = levels(K)
    shape = np.broadcast_shapes(A.shape[:-1], B.shape[:-1], np.shape(rho))
    rho = np.broadcast_to(np.clip(rho, -1.0, 1.0), shape)
    r = np.abs(rho)
    s0, e0, n0 = K + 1 + len(ls), K + 3 + len(ls), K + 4 + len(ls)
    eA, nA, eB, nB = A[..., e0], A[..., n0], B[..., e0], B[..., n0]
    goal = tol * np.maximum(1.0, nA * nB) * AIM
    level = np.full(shape, len(ls) - 1)
    with np.errstate(divide="ignore"):             # in logarithms: log 0 = −∞ meets any goal
        log_r, log_goal = np.log(r), np.log(goal)
        half_a, half_b = 0.5 * np.log(A[..., K + 1:K + len(ls)]), 0.5 * np.log(B[..., K + 1:K + len(ls)])
    for n in range(len(ls) - 2, -1, -1):            # the smallest level that meets the goal
        meets = (ls[n] + 1) * log_r + half_a[..., n] + half_b[..., n] <= log_goal
        level[meets] = n
    value, err = np.empty(shape), np.empty(shape)
    Ab, Bb = np.broadcast_to(A, shape + A.shape[-1:]), np.broadcast_to(B, shape + B.shape[-1:])
    for n, L in enumerate(ls):
        idx = np.nonzero(level == n)
        if not len(idx[0]):
            continue
        value[idx] = power_sums(Ab[..., :L + 1], Bb[..., :L + 1], rho, idx)
        col = lambda M, k: M[..., k][idx]           # one packed column at the cells
        err[idx] = r[idx] ** (L + 1) * np.sqrt(col(Ab, K + 1 + n) * col(Bb, K + 1 + n))
    err += cell_error(A, B, r, np.asarray(ls, dtype=float)[level], e0)
    diagonal(Ab, Bb, rho, s0, value, err)
    return value, err


# ---------------------------------------------------------------------------------------------
# per-cell bounds from a few numbers per row: Σ_k |ρ|^k |x_k y_k| ≤ |x₀y₀| + |ρ||x₁y₁| + ρ²‖x_{≥2}‖‖y_{≥2}‖

#: the columns of :func:`row_numbers`
R_A0, R_A1, R_N2, R_L1, R_W2, R_S0, R_S1, R_S2, R_C0, R_C1, R_C2 = range(11)


def row_numbers(A: np.ndarray) -> np.ndarray:
    """The :func:`compute_row_numbers` of a packed row (…, W), stored in it by :func:`pack`."""
    K = int(np.ravel(A[..., -1])[0])
    start = K + 5 + len(levels(K))
    return A[..., start:start + ROW_NUMBERS]


#: how many numbers :func:`compute_row_numbers` gives per row
ROW_NUMBERS = 11


def compute_row_numbers(alpha: np.ndarray) -> np.ndarray:
    """Per row of coefficients α_0 … α_K (…, K+1) the numbers of the per-cell bounds (…, 11):
    |α₀|, |α₁|, ‖α_{≥2}‖₂, ‖α_{≥2}‖₁, ‖(√k α_k)_{k≥2}‖ (the plain series x_k = α_k); then for
    x_k = √(k+1) α_{k+1} (the ρ-derivative, :func:`mehler_slope`) and x_k = √((k+1)(k+2)) α_{k+2}
    (the variance derivative, :func:`mehler_curve`) |x₀|, |x₁|, ‖x_{≥2}‖₂.  Computed once per
    distinct variance, when the row is packed (:func:`pack`)."""
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
    return out


def weighted(x0, x1, x2, y0, y1, y2, r: np.ndarray) -> np.ndarray:
    """A bound on Σ_k |ρ|^k |x_k y_k| (r = |ρ| ≤ 1) from |x₀|, |x₁|, ‖x_{≥2}‖ and the same of y:
    |x₀y₀| + r|x₁y₁| + r²‖x_{≥2}‖‖y_{≥2}‖ (Cauchy–Schwarz on the rest).  Exact to O(ρ²) as ρ → 0,
    and at ρ = 1 within the Cauchy–Schwarz factor of the sum."""
    return x0 * y0 + r * (x1 * y1) + (r * r) * (x2 * y2)


def cell_error(A: np.ndarray, B: np.ndarray, r: np.ndarray, L: np.ndarray, e0: int) -> np.ndarray:
    """The non-truncation part of a cell's stated error, at level L (per cell) and r = |ρ|:

    * the coefficients' errors (δ_α per coefficient, packed column ``e0``):
      |Σ_{k≤L} ρ^k (α_kβ_k − α̃_kβ̃_k)| ≤ δ_α Σ|ρ|^k|β̃_k| + δ_β Σ|ρ|^k|α̃_k| + (L+1)δ_αδ_β, the sums by
      |β₀| + r|β₁| + r²‖β_{≥2}‖₁;
    * the rounding of the sum: ρ^k by repeated products (relative error ≤ kε), two products and
      numpy's pairwise sum (≤ (2 + log₂(L+1))ε relative to Σ|t_k|), each term rounded once more:
      ε·((6 + log₂(L+1))·Σ|ρ|^k|α_kβ_k| + Σ k|ρ|^k|α_kβ_k|), both sums by :func:`weighted`."""
    a, b = row_numbers(A), row_numbers(B)
    da, db = A[..., e0], B[..., e0]
    c = lambda M, j: M[..., j]
    wa = c(a, R_A0) + r * c(a, R_A1) + r * r * c(a, R_L1)
    wb = c(b, R_A0) + r * c(b, R_A1) + r * r * c(b, R_L1)
    coef = da * wb + db * wa + (L + 1) * da * db
    m0 = weighted(c(a, R_A0), c(a, R_A1), c(a, R_N2), c(b, R_A0), c(b, R_A1), c(b, R_N2), r)
    m1 = r * c(a, R_A1) * c(b, R_A1) + r * r * c(a, R_W2) * c(b, R_W2)
    return coef + EPS * ((6 + np.log2(L + 1)) * m0 + m1)


def mehler_slope(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None) -> np.ndarray:
    """A bound on |∂/∂ρ Σ_k ρ^k α_k β_k| = |Σ_k ρ^k (k+1) α_{k+1} β_{k+1}| per cell (:func:`weighted`
    with x_k = √(k+1) α_{k+1}, y_k = √(k+1) β_{k+1}).  With ρ = c/√(ab): |∂E/∂c| ≤ this/√(ab)
    (Price's theorem: ∂E φ(u)ψ(v)/∂c = E φ′(u)ψ′(v)).  From the packed coefficients (the part of
    the sum beyond K is below the truncation target, relative: a sensitivity only weights errors)."""
    a, b = row_numbers(A), row_numbers(B)
    r = np.abs(np.clip(rho, -1.0, 1.0))
    got = weighted(a[..., R_S0], a[..., R_S1], a[..., R_S2], b[..., R_S0], b[..., R_S1], b[..., R_S2], r)
    return got if out is None else np.copyto(out, np.broadcast_to(got, out.shape)) or out


def mehler_curve(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None) -> np.ndarray:
    """A bound on |Σ_k ρ^k √((k+1)(k+2)) α_{k+2} β_k| per cell: 2a·|∂E/∂a| at fixed c, a the
    variance of A's function (Price: ∂E φ(u)ψ(v)/∂a = ½ E φ″(u)ψ(v), and E φ″(√a z) h_k(z) =
    √((k+1)(k+2)) α_{k+2}/a); B's variance by swapping the arguments."""
    a, b = row_numbers(A), row_numbers(B)
    r = np.abs(np.clip(rho, -1.0, 1.0))
    got = weighted(a[..., R_C0], a[..., R_C1], a[..., R_C2], b[..., R_A0], b[..., R_A1], b[..., R_N2], r)
    return got if out is None else np.copyto(out, np.broadcast_to(got, out.shape)) or out


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


#: cells per block of :func:`power_sums` (its (cells, L + 1) work arrays stay in cache)
BLOCK = 4096


def power_sums(A: np.ndarray, B: np.ndarray, rho: np.ndarray, idx: tuple) -> np.ndarray:
    """Σ_k ρ^k α_k β_k at the cells ``idx`` of A, B (broadcast to the cells, (…, L+1)) and ρ: the
    powers 1, ρ, ρ², … by repeated products, block by block of :data:`BLOCK` cells."""
    out = np.empty(len(idx[0]))
    for start in range(0, len(out), BLOCK):
        cells = tuple(i[start:start + BLOCK] for i in idx)
        powers = np.empty((len(cells[0]), A.shape[-1]))
        powers[:, 0] = 1.0
        powers[:, 1:] = rho[cells][:, None]
        np.cumprod(powers, axis=1, out=powers)
        powers *= A[cells]
        powers *= B[cells]
        out[start:start + BLOCK] = powers.sum(axis=1)
    return out


def diagonal(A: np.ndarray, B: np.ndarray, rho: np.ndarray, s0: int, value: np.ndarray, err: np.ndarray) -> None:
    """Where the packed row and column are equal (one function at one variance) and ρ is 1 to
    rounding (ρ ≥ 1 − 8ε: the diagonal of a kernel), the value S = E φ(u)² (ρ = 1) and its error,
    in place.  With c_k = α_k² ≥ 0, f(ρ) = Σ ρ^k c_k is increasing and
    0 ≤ f(1) − f(ρ) = Σ (1 − ρ^k) c_k ≤ (1 − ρ)·Σ_{k≤L} k c_k + T(L) for every level L (1 − ρ^k ≤ k(1 − ρ),
    and ≤ 1): the least of these (0 at ρ = 1) joins S's own error, with the coefficients' error in
    Σ k c_k (≤ L(2‖α̃‖e + e²), e = √(K+1)·δ)."""
    idx = np.nonzero(rho >= 1.0 - 8 * EPS)
    if not len(idx[0]):
        return
    a, b = A[idx], B[idx]
    same = np.all(a == b, axis=1)
    if not np.any(same):
        return
    a, d = a[same], 1.0 - rho[idx][same]
    cells = tuple(i[same] for i in idx)
    K = int(a[0, -1])
    ls = levels(K)
    moments = np.cumsum(np.arange(K + 1) * a[:, :K + 1] ** 2, axis=1)
    e, n = a[:, s0 + 2] * np.sqrt(K + 1), a[:, s0 + 3]        # ‖α − α̃‖₂ ≤ √(K+1)·δ
    gap = np.min([d * (moments[:, L] + L * (2 * n * e + e * e)) + a[:, K + 1 + m] for m, L in enumerate(ls)], axis=0)
    value[cells] = a[:, s0]
    err[cells] = a[:, s0 + 1] + np.where(d > 0, gap, 0.0)


class LastSum:
    """The last few :func:`packed_sum` results (a tape asks for a pair block's values, and later its
    errors, with the same packed rows, columns and ρ): kept by the identity of A and B and a copy
    of ρ (a work array may be overwritten in between: ρ is compared, not trusted)."""

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


#: the one :class:`LastSum` of the tapes' series operations (value, then error, of one pair block)
LAST_SUM = LastSum()


def mehler_value(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: np.ndarray, out=None) -> np.ndarray:
    """Σ_k ρ^k α_k β_k per cell, NaN where the stated error misses ``tol`` (relative above 1):
    the replay's check then sends that pair to the compile."""
    s, err = LAST_SUM(A, B, rho, float(tol))
    s = np.where(err <= tol * np.maximum(1.0, np.abs(s)), s, np.nan)
    if out is None:
        return s
    np.copyto(out, s)
    return out


def mehler_error(A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: np.ndarray, out=None) -> np.ndarray:
    """The stated error of :func:`mehler_value` per cell."""
    err = LAST_SUM(A, B, rho, float(tol))[1]
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


class HermiteRow(sp.Function):
    """The packed coefficients of one function at a variance (a row or column operation).  A
    subclass per function (:func:`hermite_head`) carries ``spec`` = (φ as an expression of
    ``symbol``, K, h)."""
    spec: tuple = ()
    nargs = 1


class MehlerValue(sp.Function):
    """MehlerValue(A, B, ρ, tol): Σ_k ρ^k α_k β_k (:func:`mehler_value`)."""
    nargs = 4


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
    """Mean(A): E φ(√a z) = α_0 of packed coefficients."""
    nargs = 1


class MeanError(sp.Function):
    """MeanError(A): the error of Mean(A)."""
    nargs = 1


#: the symbol of every φ in a HermiteRow spec
T = sp.Symbol("t", real=True)
_HEADS: dict[tuple, type] = {}


def hermite_head(phi: sp.Expr, K: int, h: float) -> type:
    """The HermiteRow subclass of φ (an expression of :data:`T`), K and h (one per spec)."""
    key = (phi, int(K), float(h))
    if key not in _HEADS:
        _HEADS[key] = type(f"HermiteRow{len(_HEADS)}", (HermiteRow,), {"spec": key})
    return _HEADS[key]


#: the grid tape's operation kinds of the series, and their numpy functions (given the op's arg)
KINDS = ("hermite", "mehler", "mehler_err", "mean", "mean_err", "mehler_slope", "mehler_curve", "mean_curve",
         "diagonal_slope")
HEAD_KINDS = {MehlerValue: "mehler", MehlerError: "mehler_err", Mean: "mean", MeanError: "mean_err",
              MehlerSlope: "mehler_slope", MehlerCurve: "mehler_curve", MeanCurve: "mean_curve",
              DiagonalSlope: "diagonal_slope"}
