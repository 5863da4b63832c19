"""The Mehler (Hermite) series: E φ(u)ψ(v) for two correlated Gaussians, with a rigorous bound.

For (u, v) centred Gaussian with variances a, b and correlation ρ = c/√(ab), Mehler's formula

    E φ(u) ψ(v) = Σ_k ρ^k α_k(a) β_k(b),   α_k(a) = E[φ(√a z) h_k(z)],  β_k(b) = E[ψ(√b z) h_k(z)]

(h_k = He_k/√k!, the orthonormal probabilists' Hermite polynomials, z ~ N(0, 1)) separates the
pair into numbers of one input each — the *coefficients*, computed once per variance — and a
polynomial of degree K in ρ per pair (Horner).  Truncation after K terms errs by at most

    |Σ_{k>K} ρ^k α_k β_k| ≤ |ρ|^{K+1} √(T_α(K) T_β(K)),   T_α(K) = Σ_{k>K} α_k² = E φ(√a z)² − Σ_{k≤K} α_k²

(Cauchy–Schwarz).  The coefficients come from the trapezoidal rule on [−13, 13] (nodes z_i = ih, weights
w_i = h·pdf(z_i)), which converges geometrically in 1/h for integrands analytic in a strip (a
Gauss–Hermite rule converges only like e^{−c√M} there): with g_k(z_i) = √w_i h_k(z_i) (the
three-term recurrence, scaled by √w_i so that nothing overflows) the coefficients of all
variances are one matrix product α̃ = F Gᵀ, F_ni = √w_i φ(√a_n z_i).  The tail is
T̃_α = S̃ − Σ_{k≤K} α̃_k² (S̃ the same rule's E φ²: at the target's scale, T only needs to
be about tol, far above the rounding ε·S of the difference).  The quadrature error is
estimated, as in :mod:`.quad`, by the rule at step 2h (every other node): e_α = ‖α̃ − α̃'‖ (k ≤ K) plus a
rounding floor; it enters both the tail (T_α ≤ T̃_α + |S̃ − S̃'| + 2e_α‖α̃‖ + e_α² + rounding)
and the truncated sum (|Σ_{k≤K} ρ^k (α_kβ_k − α̃_kβ̃_k)| ≤ e_α‖β̃‖ + ‖α̃‖e_β + e_α e_β for |ρ| ≤ 1).  Horner's
rounding adds 2(K + 2)·ε·Σ_k |ρ|^k |α̃_k β̃_k|.  The stated error is the sum of the three.

The derivative's coefficients follow by an index shift (Stein's lemma, E g′(z)h_k(z) =
√(k+1) E g(z)h_{k+1}(z)): E φ′(√a z) h_k(z) = √(k+1) α_{k+1}(a)/√a (:func:`derivative`).

For analytic activations (tanh, sigmoid, softplus, erf, SiLU …) the coefficients decay like
e^{−τ√(2k)} (τ: the half-width of the strip of analyticity of φ(√a ·)), so a few hundred terms
reach 1e-12 even at |ρ| = 1; for kinked ones (relu, abs, elu) they decay like a power of k, and the
bound says so: callers use the series only where the bound meets the target and another rule
elsewhere.

:func:`series_pairs` evaluates many pairs (the batch of a dataset kernel: one coefficient row
per distinct variance); :func:`series_jobs` is the engine's rule for numeric jobs
E[f(x) g(y)] over two Gaussians whose integrand is a product of factors of one of them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import sympy as sp

from ..symbolic.evaluate import compile_exprs
from ..symbolic.hermite import AIM, Coefficients, Fn, bound, coefficients, horner
from ..symbolic.split_rule import split_step

#: the truncation orders tried, smallest first (the first whose bound meets the target is used)
ORDERS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: the orders to which coefficients are computed, one after the other until the bound holds
STAGES = (64, 256, 1024)


@dataclass(frozen=True)
class PairsResult:
    """E φ(u_p)ψ(v_p) for P pairs: values, errors, the order K used, and ``ok`` — the pairs whose
    error meets the target (the others are for another rule)."""
    values: np.ndarray
    errors: np.ndarray
    K: int
    ok: np.ndarray
    cover: int              # the order whose bound meets the target at |ρ| = 1 for these variances


def truncation_order(ca: Coefficients, cb: Coefficients, ia: np.ndarray, ib: np.ndarray,
                     rho: np.ndarray, goal: np.ndarray) -> int:
    """The smallest K of :data:`ORDERS` (≤ ca.K) whose truncation bound meets ``goal`` at every
    pair; the full order ca.K if some pair misses it even there."""
    full = np.abs(rho) ** (ca.K + 1) * np.sqrt(ca.tail[ia] * cb.tail[ib]) <= goal
    if not full.all():                  # a pair needs every term there is
        return ca.K
    for K in ORDERS:
        if K >= ca.K:
            break
        ta = ca.tail_at(K)                  # the tails of ca.truncate(K): only they are read here
        tb = ta if cb is ca else cb.tail_at(K)
        trunc = np.abs(rho) ** (K + 1) * np.sqrt(ta[ia] * tb[ib])
        if np.all(trunc <= goal):
            return K
    return ca.K


def series_pairs(phi: Fn, psi: Fn, a: np.ndarray, b: np.ndarray, c: np.ndarray, tol: float,
                 max_terms: int = 512, same: bool = False, split: tuple[bool, bool] = (False, False)) -> PairsResult:
    """E φ(u)ψ(v) for P pairs with Var u = a, Var v = b, Cov = c, each to ``tol`` (relative above
    1) where the bound allows: coefficients once per distinct variance (``same``: φ = ψ, one set),
    the order the smallest of :data:`ORDERS` up to ``max_terms`` that meets the target.  ``split``:
    whether φ, ψ have kinks at 0 alone (:func:`kinked_at_zero`): their coefficients by the split
    rule (:mod:`..symbolic.split_rule`), not the trapezoidal one."""
    a, b, c = (np.atleast_1d(np.asarray(x, dtype=float)) for x in (a, b, c))
    a, b, c = np.broadcast_arrays(a, b, c)
    ua, ia = np.unique(a, return_inverse=True)
    ub, ib = np.unique(b, return_inverse=True)
    if same:
        uall, inv = np.unique(np.concatenate([ua, ub]), return_inverse=True)
        ia, ib = inv[:len(ua)][ia], inv[len(ua):][ib]
    ab = a * b
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = np.where(ab > 0, c / np.sqrt(np.where(ab > 0, ab, 1.0)), 0.0)
    rho = np.clip(rho, -1.0, 1.0)           # |c| ≤ √(ab) to rounding for a covariance matrix
    for K in STAGES:                        # coefficients to order K, doubled until the bound holds
        K = min(K, max(max_terms, ORDERS[0]))
        if same:
            ca = cb = rule_coefficients(phi, uall, K, split[0])
        else:
            ca, cb = rule_coefficients(phi, ua, K, split[0]), rule_coefficients(psi, ub, K, split[1])
        # a first, rough magnitude (|E φψ| ≤ √(E φ² E ψ²)) for the relative target
        goal = tol * np.maximum(1.0, np.sqrt(ca.square[ia] * cb.square[ib])) * AIM
        if K >= max_terms or np.all(np.abs(rho) ** (K + 1) * np.sqrt(ca.tail[ia] * cb.tail[ib]) <= goal):
            break
    Kp = truncation_order(ca, cb, ia, ib, rho, goal)
    ta = ca.truncate(Kp)
    tb = ta if cb is ca else cb.truncate(Kp)
    values, mag = horner(ta.alpha[ia], tb.alpha[ib], rho)
    errors = bound(ta, tb, ia, ib, rho, mag)
    ok = errors <= tol * np.maximum(1.0, np.abs(values))
    return PairsResult(values, errors, Kp, ok, cover_order(phi, psi, ca, cb, ia, ib, goal, same,
                                                           (uall,) if same else (ua, ub), max_terms, split))


def rule_coefficients(fn: Fn, variances, K: int, kinked: bool) -> Coefficients:
    """:func:`..symbolic.hermite.coefficients` of ``fn`` to order K: by the split rule
    (:mod:`..symbolic.split_rule`, its step :func:`..symbolic.split_rule.split_step`) for a function
    whose kinks are at 0 alone (``kinked``), else by the trapezoidal rule."""
    return coefficients(fn, variances, K, split_step(K) if kinked else None)


def kinked_at_zero(expr: sp.Expr, symbol: sp.Symbol) -> bool:
    """Whether ``expr`` (a function of ``symbol``) has kinks or jumps, all of them at ``symbol`` = 0
    alone: every kink argument (:func:`.analysis.kink_args`) is c·t, or a kinked head of c·t."""
    from .analysis import kink_args
    args = kink_args([expr])
    if not args:
        return False
    for g in args:
        inner = g.args[0] if isinstance(g, sp.Function) and len(g.args) == 1 and kink_args([g]) else g
        if not (inner.free_symbols == {symbol} and inner.is_polynomial(symbol)
                and sp.Poly(inner, symbol).degree() == 1 and inner.xreplace({symbol: 0}) == 0):
            return False
    return True


#: the largest order a replay's coefficients are packed to (cells sum only the levels they need)
COVER_MAX = 512


def cover_order(phi: Fn, psi: Fn, ca: Coefficients, cb: Coefficients, ia: np.ndarray, ib: np.ndarray,
                goal: np.ndarray, same: bool, variances: tuple, max_terms: int,
                split: tuple[bool, bool] = (False, False)) -> int:
    """The order whose bound meets ``goal`` at |ρ| = 1 for these variances (coefficients computed
    further, up to :data:`COVER_MAX`, if need be), or the largest tried: what a replay packs."""
    top = min(COVER_MAX, max(max_terms, ORDERS[0]))
    if ca.K < top and not np.all(np.sqrt(ca.tail[ia] * cb.tail[ib]) <= goal):
        ca = cb = rule_coefficients(phi, variances[0], top, split[0])
        if not same:
            cb = rule_coefficients(psi, variances[1], top, split[1])
    one = np.ones(len(ia))
    if np.all(np.sqrt(ca.tail[ia] * cb.tail[ib]) <= goal):
        return truncation_order(ca, cb, ia, ib, one, goal)
    return ca.K


# ---------------------------------------------------------------------------------------------
# the engine's rule


def separate(expr: sp.Expr, gaussians: Sequence[sp.Symbol]) -> tuple[sp.Expr, sp.Expr] | None:
    """(f, g) with expr = f(x)·g(y) for the two Gaussians (x, y), each factor of expr a function
    of one of them; None if some factor ties both (or expr is not over exactly two)."""
    if len(gaussians) != 2:
        return None
    x, y = gaussians
    fx, fy = [], []
    for f in sp.Mul.make_args(expr):
        s = f.free_symbols
        if s <= {x}:
            fx.append(f)
        elif s <= {y}:
            fy.append(f)
        else:
            return None
    f, g = sp.Mul(*fx), sp.Mul(*fy)
    if not (f.free_symbols == {x} and g.free_symbols == {y}):
        return None
    return f, g


def numpy_function(expr: sp.Expr, symbol: sp.Symbol) -> Fn:
    """φ(t) = expr at symbol = t, for arrays (the project's tape compiler: no text evaluated)."""
    tape = compile_exprs((expr,), (symbol,))
    return lambda t: np.asarray(tape(t)[0], dtype=float)


def series_job(expr: sp.Expr, gaussians: Sequence[sp.Symbol], cov: np.ndarray, tol: float,
               max_terms: int) -> tuple[float, float] | None:
    """(value, error) of E[expr] over two Gaussians of covariance ``cov`` by the series, when expr
    separates (:func:`separate`) and the bound meets ``tol`` (relative above 1); else None."""
    parts = separate(expr, gaussians)
    if parts is None or max_terms <= 0:
        return None
    f, g = parts
    x, y = gaussians
    cov = np.asarray(cov, dtype=float).reshape(2, 2)
    same = f.xreplace({x: y}) == g and cov[0, 0] == cov[1, 1]
    phi = numpy_function(f, x)
    psi = phi if same else numpy_function(g, y)
    split = (kinked_at_zero(f, x), kinked_at_zero(g, y))      # kinks at 0: the split rule's coefficients
    with np.errstate(all="ignore"):
        res = series_pairs(phi, psi, cov[0, 0], cov[1, 1], cov[0, 1], tol, max_terms, same, split)
    if not (res.ok[0] and np.isfinite(res.values[0])):
        return None
    return float(res.values[0]), float(res.errors[0])
