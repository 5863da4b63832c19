"""The Mehler series per pair: Σ_k ρ^k α_k β_k of two packed rows (:mod:`.hermite`) and its stated
error (see :mod:`..expect.series` for the rule and its bound).

The grid tape's *cell* operations (:mod:`.grid`) sum the series and its bound for a pair
(:func:`mehler_value`, :func:`mehler_error`: Horner's sum to each cell's own order, the truncation,
coefficient and rounding terms), and bound its slopes by Price's theorem (:func:`mehler_slope`,
:func:`mehler_curve`).  The sympy heads :class:`HermiteRow`, :class:`MehlerValue`,
:class:`MehlerError`, :class:`Mean` and :class:`MeanError` stand for them in the expressions a
replay records.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, NamedTuple, Sequence

import numpy as np
import sympy as sp

from .hermite import (AIM, EPS, LOG_TIGHT, ROW_NUMBERS, R_A0, R_A1, R_A34, R_C0, R_C1, R_C2, R_C3, R_DL, R_L1,
                       R_N2, R_N3, R_S0, R_S1, R_S2, R_S3, R_W2, SHARE, levels, packed_columns)


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
    shape = joint_shape(A.shape[:-1], B.shape[:-1], np.shape(rho))
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


def weighted(x0, x1, x2, y0, y1, y2, r: np.ndarray, out=None) -> np.ndarray:
    """A bound on Σ_k |ρ|^k |x_k y_k| (r = |ρ| ≤ 1) from |x₀|, |x₁|, ‖x_{≥2}‖ and the same of y:
    |x₀y₀| + r|x₁y₁| + r²‖x_{≥2}‖‖y_{≥2}‖ (Cauchy–Schwarz on the rest).  Exact to O(ρ²) as ρ → 0,
    and at ρ = 1 within the Cauchy–Schwarz factor of the sum.  Added left to right, a term 0 throughout
    left out (a + 0 = a for a ≥ 0, bit for bit); written into ``out`` where it has the grid's shape."""
    shape = joint_shape(*(np.shape(v) for v in (x0, x1, x2, y0, y1, y2, r)))
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
        if not np.asarray(u).any() and np.isfinite(v).all():     # (the methods: no dispatch layer)
            return False
    return True


def product_into(x: np.ndarray, y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """:func:`times` (x, y) written into ``out`` (the grid's shape: x·y broadcast to it where smaller)."""
    if out.shape == joint_shape(np.shape(x), np.shape(y)):
        return times(x, y, out=out)
    np.copyto(out, np.broadcast_to(times(x, y), out.shape))
    return out


def joint_shape(*shapes: tuple) -> tuple:
    """np.broadcast_shapes(*shapes), in Python where the shapes have one length (a grid's operands: a few
    µs less per call, ~2000 calls per block): per axis the length other than 1; numpy's otherwise
    (other lengths, or shapes that do not broadcast: its error)."""
    first = shapes[0]
    n = len(first)
    out = None
    for s in shapes[1:]:
        if s == first:
            continue
        if len(s) != n:
            return np.broadcast_shapes(*shapes)
        if out is None:
            out = list(first)
        for i, d in enumerate(s):
            if d != out[i] and d != 1:
                if out[i] != 1:
                    return np.broadcast_shapes(*shapes)
                out[i] = d
    return first if out is None else tuple(out)


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


def signed_weighted(x0, x1, x2, x3, y0, y1, y2, y3, rho: np.ndarray, out=None, cube=None) -> np.ndarray:
    """A bound on |Σ_k ρ^k x_k y_k| (|ρ| ≤ 1) from the signed x₀, x₁, x₂ (and y's) and ‖x_{≥3}‖₂:
    |x₀y₀ + ρ(x₁y₁ + ρx₂y₂)| + |ρ|³‖x_{≥3}‖‖y_{≥3}‖ (Cauchy–Schwarz on the rest), plus
    8u·(|x₀| + |x₁| + |x₂|)(|y₀| + |y₁| + |y₂|) for the rounding of the first part (and of its factors
    √2, √3, …).  Never above :func:`weighted` but for that rounding term (|x₂y₂| + r‖x_{≥3}‖‖y_{≥3}‖ ≤
    ‖x_{≥2}‖‖y_{≥2}‖, Cauchy–Schwarz in two dimensions); where the first terms cancel (SiLU's E φ″ψ:
    √2α₂β₀ against ρ²√12α₄β₂) it is the derivative to within the rest's bound, where :func:`weighted`
    adds them in absolute value (2.9× at ρ = 0.9).  ``cube``: |ρ|³ of the grid's shape, formed as here
    ((|ρ|·|ρ|)·|ρ|), where the caller has it (:class:`RhoParts`)."""
    shape = joint_shape(*(np.shape(v) for v in (x0, x1, x2, x3, y0, y1, y2, y3, rho)))
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
    if cube is not None and cube.shape == shape:
        np.multiply(cube, product_into(x3, y3, r3), out=tmp)
    else:
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
    live = [bool(x.any() and y.any()) for x, y in zip(xs, ys)]
    if sum(live) <= 1:
        return False
    if live == [True, False, True]:
        sx, sy = np.sign(xs[0] * xs[2]), np.sign(ys[0] * ys[2])
        if (np.all(sx >= 0) and np.all(sy >= 0)) or (np.all(sx <= 0) and np.all(sy <= 0)):
            return False
    return True


def mehler_slope(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None, parts: "RhoParts | None" = None) -> np.ndarray:
    """A bound on |∂/∂ρ Σ_k ρ^k α_k β_k| = |Σ_k ρ^k (k+1) α_{k+1} β_{k+1}| per cell (:func:`signed_weighted`
    where the first terms can cancel, :func:`may_cancel`, else :func:`weighted`; x_k = √(k+1) α_{k+1},
    y_k = √(k+1) β_{k+1}).  With ρ = c/√(ab): |∂E/∂c| ≤ this/√(ab)
    (Price's theorem: ∂E φ(u)ψ(v)/∂c = E φ′(u)ψ′(v)).  From the packed coefficients (the part of
    the sum beyond K is below the truncation target, relative: a sensitivity only weights errors)."""
    return price_bound(A, B, rho, (1, 2, 3), (1.0, SQRT2, SQRT3), R_S3, (1, 2, 3), (1.0, SQRT2, SQRT3), R_S3,
                       (R_S0, R_S1, R_S2), (R_S0, R_S1, R_S2), out, parts)


def mehler_curve(A: np.ndarray, B: np.ndarray, rho: np.ndarray, out=None, parts: "RhoParts | None" = None) -> np.ndarray:
    """A bound on |Σ_k ρ^k √((k+1)(k+2)) α_{k+2} β_k| per cell: 2a·|∂E/∂a| at fixed c, a the
    variance of A's function (Price: ∂E φ(u)ψ(v)/∂a = ½ E φ″(u)ψ(v), and E φ″(√a z) h_k(z) =
    √((k+1)(k+2)) α_{k+2}/a); B's variance by swapping the arguments.  :func:`signed_weighted` where the
    first terms can cancel (:func:`may_cancel`), else :func:`weighted`; x_k = √((k+1)(k+2)) α_{k+2},
    y_k = β_k."""
    return price_bound(A, B, rho, (2, 3, 4), (SQRT2, SQRT6, SQRT12), R_C3, (0, 1, 2), (1.0, 1.0, 1.0), R_N3,
                       (R_C0, R_C1, R_C2), (R_A0, R_A1, R_N2), out, parts)


def price_bound(A: np.ndarray, B: np.ndarray, rho: np.ndarray, ka: tuple, fa: tuple, rest_a: int, kb: tuple,
                fb: tuple, rest_b: int, plain_a: tuple, plain_b: tuple, out=None,
                parts: "RhoParts | None" = None) -> np.ndarray:
    """|Σ_k ρ^k x_k y_k| bounded per cell from packed rows A and B: x_k = fa[k]·α_{ka[k]} for k ≤ 2 and
    ‖x_{≥3}‖ the row number ``rest_a`` (y likewise from B), by :func:`signed_weighted` where the first
    terms can cancel (:func:`may_cancel`), else by :func:`weighted` from the row numbers ``plain_a``
    and ``plain_b`` (|x₀|, |x₁|, ‖x_{≥2}‖).  The rows' numbers are taken as contiguous rows and
    columns (:class:`Operand`: a packed row's column is strided, and a product of a row by a column
    reads it once per row); the bound is written into ``out`` where it has the grid's shape.  ``parts``:
    clip(ρ, −1, 1) and its |·|³ shared with the other bounds of this ρ (:class:`RhoParts`; the same numbers)."""
    shape = joint_shape(A.shape[:-1], B.shape[:-1], np.shape(rho))
    a, b = Operand(A, shape), Operand(B, shape)
    r0 = order_of(A) + 5 + len(levels(order_of(A)))       # the first of the row numbers
    target = out if out is not None and out.shape == shape else None
    if order_of(A) >= 4 and may_cancel([a.grid(k) for k in ka], [b.grid(k) for k in kb]):
        xs = [a.grid(k) if f == 1.0 else f * a.grid(k) for k, f in zip(ka, fa)]
        ys = [b.grid(k) if f == 1.0 else f * b.grid(k) for k, f in zip(kb, fb)]
        clipped, cube = (np.clip(rho, -1.0, 1.0), None) if parts is None else (parts.clipped(), parts.cubed())
        got = signed_weighted(*xs, a.grid(r0 + rest_a), *ys, b.grid(r0 + rest_b), clipped, out=target, cube=cube)
    else:                                   # |clip(ρ, −1, 1)| = min(|ρ|, 1), bit for bit
        got = weighted(*[a.grid(r0 + k) for k in plain_a], *[b.grid(r0 + k) for k in plain_b],
                       np.minimum(np.abs(rho), 1.0), out=target)
    if out is None or got is out:
        return got
    np.copyto(out, np.broadcast_to(got, out.shape))
    return out


class RhoParts:
    """clip(ρ, −1, 1) and |clip(ρ, −1, 1)|³ of one array ρ of cells, each formed on first use (before any
    bound writes its ``out``, which may be ρ's own buffer: the last reader's), as :func:`price_bound` and
    :func:`signed_weighted` form them: shared by the Price bounds of one ρ (a grid tape's slope and two
    curves per layer, :meth:`.grid.GridTape.__call__`: one per ρ slot and call).  Never written."""

    def __init__(self, rho: np.ndarray) -> None:
        self.rho = rho
        self.clip: np.ndarray | None = None
        self.cube: np.ndarray | None = None

    def clipped(self) -> np.ndarray:
        if self.clip is None:
            self.clip = np.clip(self.rho, -1.0, 1.0)
        return self.clip

    def cubed(self) -> np.ndarray:
        if self.cube is None:
            r = np.abs(self.clipped())
            self.cube = np.multiply(r, r)
            self.cube *= r
        return self.cube


#: the operation kinds whose functions take ``parts=`` (:class:`RhoParts` of their third argument, ρ)
PRICE_KINDS = frozenset({"mehler_slope", "mehler_curve"})


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
    * the coefficients' errors (δ per coefficient, packed column of :func:`packed_columns`, and δ_low of
      the first orders k ≤ 4, row number ``R_DL``): |Σ_{k≤L} ρ^k (α_kβ_k − α̃_kβ̃_k)| ≤ Σ_k r^k(|Δα_k||β̃_k|
      + |α̃_k||Δβ_k| + |Δα_k||Δβ_k|), the first terms one by one and the rest by r³c_β, c_β = ‖β_{≥5}‖₁
      from the stored ‖β_{≥2}‖₁ (:func:`rest_l1`; :func:`error_polynomial`);
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
    number by a column's (x, y: the :func:`row_numbers` of A and B; δ_α, δ_β their coefficients' error,
    δl_α, δl_β that of their orders k ≤ 4, ``R_DL``: :func:`.hermite.low_orders`; U = u(1 + 1e-12)):

    * Σ_k r^k (|α_k||Δβ_k| + |Δα_k||β_k| + |Δα_k||Δβ_k|) ≤ δl_β·(w_α + r³(|α₃| + |α₄|)) + δ_β·r³c_α +
      (β likewise) + 3δl_αδl_β + r³(2δl_αδl_β + (K − 4)δ_αδ_β), with w_α = |α₀| + r|α₁| + r²|α₂| and
      c_α ≥ ‖α_{≥5}‖₁ (:func:`rest_l1`; r^k ≤ r³ for k ≥ 3; for a function of one parity α₂ or α₃ is 0,
      and r²‖α_{≥2}‖₁ would overstate the sum by 1/r on its larger part);
    * U·(2 m₀ + (2 + :data:`RHO_ROUNDINGS`) m₁), m₀ = |α₀β₀| + r|α₁β₁| + r^q‖α_{≥q}‖‖β_{≥q}‖,
      m₁ = r|α₁β₁| + r^q‖(√k α_k)_{≥q}‖‖(√k β_k)_{≥q}‖, q = 2, or 3 where a side's α₂ is 0 throughout.

    So C₀ + r(C₁ + r(C₂ + rC₃)) with C₀ = |α₀| ⊗ (δl_β + 2U|β₀|) + δl_α ⊗ (|β₀| + 3δl_β),
    C₁ = |α₁| ⊗ (δl_β + 10U|β₁|) + δl_α ⊗ |β₁|, C₂ = |α₂| ⊗ δl_β + δl_α ⊗ |β₂| (and
    C₃ = c_α ⊗ δ_β + δ_α ⊗ (c_β + (K − 4)δ_β) + (|α₃| + |α₄|) ⊗ δl_β + δl_α ⊗ (|β₃| + |β₄| + 2δl_β)),
    the rounding's r^q terms U·(2‖α_{≥q}‖ ⊗ ‖β_{≥q}‖ + 8‖·‖ ⊗ ‖·‖) in C_q: every term ≥ 0, the sums of
    a side's numbers formed once per row or column, each product of a row by a column one pass over
    the grid (:func:`times`; one with a factor 0 throughout left out), by Horner in r.  Every
    operation rounds to nearest on terms ≥ 0: the result is within 30u of the exact polynomial (the
    same order as the former evaluation term by term, ≤ 7e-16 relative from it on the N = 1000 tanh
    and SiLU kernels), inside the 1e-12 that the rounding's terms carry and the factor ≥ 1.8 of the
    coefficients' own error estimates (:data:`COEFF_ROUNDING`).  A cell's bits depend on its own r,
    row and column alone (tests/test_series.py)."""
    da, db = a.grid(e0), b.grid(e0)
    la, lb = x(R_DL), y(R_DL)
    U = UNIT * (1 + 1e-12)
    za, zb = not a.grid(2).any(), not b.grid(2).any()
    if za or zb:
        nq = (x(R_N3), y(R_N3), x(R_S2), y(R_S2))
    else:
        nq = (x(R_N2), y(R_N2), x(R_W2), y(R_W2))
    rounding_rest = [(nq[0], (2 * U) * nq[1]), (nq[2], (8 * U) * nq[3])]

    ca, cb = rest_l1(x(R_L1), a.grid(2), x(R_A34)), rest_l1(y(R_L1), b.grid(2), y(R_A34))
    polynomial = [[(ca, db), (da, cb + max(K - 4.0, 0.0) * db), (x(R_A34), lb), (la, y(R_A34) + 2.0 * lb)]
                  + (rounding_rest if za or zb else []),                                                 # C₃
                  [(np.abs(a.grid(2)), lb), (la, np.abs(b.grid(2)))] + ([] if za or zb else rounding_rest),
                  [(x(R_A1), lb + (10 * U) * y(R_A1)), (la, y(R_A1))],
                  [(x(R_A0), lb + (2 * U) * y(R_A0)), (la, y(R_A0) + 3.0 * lb)]]                     # C₀
    acc, tmp = np.zeros(shape), np.empty(shape)
    for n, terms in enumerate(polynomial):
        if n:
            acc *= r
        for p, q in terms:
            if nonzero_product(p, q, out=tmp) is not None:
                acc += tmp
    return acc


def rest_l1(l1: np.ndarray, x2: np.ndarray, x34: np.ndarray) -> np.ndarray:
    """max(‖x_{≥2}‖₁ − |x₂| − (|x₃| + |x₄|), 0) + 1e-12‖x_{≥2}‖₁ ≥ ‖x_{≥5}‖₁ per row, from x₂, the stored
    |x₃| + |x₄| and ‖x_{≥2}‖₁ (widened by 1e-12‖x_{≥2}‖₁ for those sums' roundings, at most K·u relative)."""
    return np.maximum(l1 - np.abs(x2) - x34, 0.0) + 1e-12 * l1


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
    compared, not trusted; NaN where ρ is NaN — a cell whose earlier value missed its target, sent
    to the compile — counts as equal: such a cell's sums are NaN either way, and the block's other
    cells were computed from the same numbers, so that the errors of a block with such cells are not
    summed again).  Owned by the tape (:class:`.grid.Builder`, ``GridTape.from_json``).  Few: a tape
    asks for a block's errors right after its values (every hit of the tanh, SiLU, GELU, Mish, softsign
    and ELU kernels was the last entry), and each entry holds three arrays of the block's cells (64
    held ~24 MB at N = 300, and the blocks ran ~5% slower for it)."""

    def __init__(self, size: int = 4) -> None:
        self.size = size
        self.items: OrderedDict = OrderedDict()

    def __call__(self, A: np.ndarray, B: np.ndarray, rho: np.ndarray, tol: float) -> tuple[np.ndarray, np.ndarray]:
        key = (id(A), id(B), A.shape, B.shape, np.shape(rho), tol)
        got = self.items.get(key)
        if got is not None and got[0] is A and got[1] is B and same_numbers(got[2], rho):
            return got[3]
        result = packed_sum(A, B, rho, tol)
        self.items[key] = (A, B, np.array(rho, dtype=float), result)
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)
        return result


def same_numbers(x: np.ndarray, y) -> bool:
    """``np.array_equal(x, y, equal_nan=True)``, first by the bits of two float64 arrays of one shape (one
    pass: the same bits are the same numbers, NaN included), then, where some bit differs, by value
    (−0 = +0, NaN = NaN whatever its payload; numpy's equal_nan masks its operands: ~30× the pass)."""
    y = np.asarray(y)
    if (x.shape == y.shape and x.dtype == y.dtype == np.float64 and x.flags.c_contiguous and y.flags.c_contiguous
            and np.array_equal(x.view(np.uint64), y.view(np.uint64))):
        return True
    return bool(np.array_equal(x, y, equal_nan=True))


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
    """The error of α_0: the first orders' error estimate δ_low (row number ``R_DL``:
    :func:`.hermite.low_orders`)."""
    K = int(np.ravel(A[..., -1])[0])
    e = A[..., K + 5 + len(levels(K)) + R_DL]
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
