"""Exact radial integration per independent Gaussian block (the norm of a batchnorm layer).

Let z_B be one independent block of the Gaussians (a union of connected blocks of Σ, covariance
C of rank r) and Q(z_B) = zᵀMz a quadratic form with C M C = c·C, c > 0: Q = c·ρ², ρ² = z_Bᵀ C⁺ z_B
the squared Mahalanobis norm of the block (ρ ~ χ_r, independent of the direction θ = z_B/ρ).
Batchnorm's σ² = (1/B)·Σ_b (h_b − μ)² is such a Q whenever the batch's covariance is
exchangeable (the BSB1 fixed point).  A term Q^e·A(z_B, y) with A positively homogeneous of
degree k in z_B (y: the other variables) has

    E[Q^e A] = c^e · E[ρ^{k+2e}] / E[ρ^k] · E[A],     E[ρ^p] = 2^{p/2} Γ((r + p)/2) / Γ(r/2),

so the non-polynomial Q^e (and the kinks' positive scales: step(a·Q^e) = step(a),
relu(a·Q^e) = Q^e·relu(a), δ(a·Q^e) = Q^{−e}·δ(a)) leave the integrand, and what remains
(polynomials × kinks) goes to the closed forms.  A shifted norm (Q + ε)^e, ε > 0 (batchnorm's
σ² + ε), is integrated the same way, by a one-dimensional radial integral in closed form:

    E[ρ^p (cρ² + ε)^E] / E[ρ^k] = 2^{(p−k)/2} (2c)^E Γ(a) z^{a+E} U(a, a + E + 1, z) / Γ((r + k)/2),
    a = (r + p)/2,  z = ε/(2c)

(U: Tricomi's confluent hypergeometric function, from ∫_0^∞ t^{a−1} (t + z)^E e^{−t} dt =
Γ(a) z^{a+E} U(a, a + E + 1, z); evaluated by mpmath to 30 digits, so the term is a float).

:func:`split_norms` returns that rewrite (its multiplied-out terms), or None: a Q under another
head (tanh(z/√Q)), a term not homogeneous, a symbolic covariance, or an expansion larger than the
budget.  Each block's radius is integrated separately, so an
integrand homogeneous in several independent blocks (one per layer's batch) loses all of them.
"""
from __future__ import annotations

import functools
import itertools
import math

import mpmath
import numpy as np
import sympy as sp

from .analysis import expanded_size
from .linalg import Matrix
from .multiply import multiplied_terms
from ..symbolic.dag import distinct_nodes
from ..symbolic.heads import AbsF, Delta, LeakyRelu, Relu, Sign, Step

#: C M C = c C is checked to this relative tolerance
TOLERANCE = 1e-10
#: an exact scale c that is not a rational is kept as a closed form up to this many distinct nodes
SMALL_FORM = 24
ZERO_DEGREE = (Step, Sign, sp.sign, sp.Heaviside)
ONE_DEGREE = (Relu, AbsF, sp.Abs, LeakyRelu)


@functools.lru_cache(maxsize=4096)
def radius_moment_ratio(p: sp.Expr, k: int, r: int) -> sp.Expr:
    """E[ρ^{k+p}] / E[ρ^k] for ρ ~ χ_r, exact (sympy): 2^{p/2} Γ((r+k+p)/2) / Γ((r+k)/2)."""
    if r + k + p <= 0 or r + k <= 0:
        raise ZeroDivisionError(f"E ρ^{k + p} or E ρ^{k} is infinite for ρ ~ χ_{r}")
    return sp.Integer(2) ** (p / 2) * sp.gamma(sp.Rational(r + k) / 2 + p / 2) / sp.gamma(sp.Rational(r + k, 2))


@functools.lru_cache(maxsize=4096)
def shifted_radius_ratio(j: sp.Rational, E: sp.Rational, k: int, r: int, c: float, eps: float) -> sp.Float:
    """E[ρ^{k+j} (cρ² + ε)^E] / E[ρ^k] for ρ ~ χ_r, c, ε > 0 (module doc: Tricomi's U, by mpmath)."""
    if r + k + j <= 0 or r + k <= 0:
        raise ZeroDivisionError(f"E ρ^{k + j} or E ρ^{k} is infinite for ρ ~ χ_{r}")
    with mpmath.workdps(30):
        def mp(x: sp.Rational) -> mpmath.mpf:
            return mpmath.mpf(int(x.p)) / int(x.q)
        a, e, z = mp(sp.Rational(r + k) + j) / 2, mp(E), mpmath.mpf(eps) / (2 * mpmath.mpf(c))
        out = (mpmath.power(2, mp(j) / 2) * (2 * mpmath.mpf(c)) ** e * mpmath.gamma(a) * z ** (a + e)
               * mpmath.hyperu(a, a + e + 1, z) / mpmath.gamma(mpmath.mpf(r + k) / 2))
        return sp.Float(out, 17)


def norm_forms(expr: sp.Expr, gaussians: tuple) -> list[tuple[sp.Expr, sp.Expr, sp.Expr]]:
    """The bases b = Q + ε of powers b^e (e not a non-negative integer) with Q a quadratic form in the
    Gaussians and ε ≥ 0 a number: [(b, Q, ε)]."""
    out = set()
    gs = set(gaussians)
    for p in expr.atoms(sp.Pow):
        b, e = p.base, p.exp
        if (e.is_Integer and e >= 0) or not b.is_Add or not b.free_symbols or b.free_symbols - gs:
            continue
        eps, Q = b.as_coeff_Add()
        if eps.is_nonnegative and Q.is_Add and is_quadratic_form(Q):
            out.add((b, Q, eps))
    return sorted(out, key=lambda t: sp.default_sort_key(t[0]))


@functools.lru_cache(maxsize=4096)
def is_quadratic_form(b: sp.Expr) -> bool:
    """Whether b is a homogeneous polynomial of degree 2 in its symbols (memoised: the same σ²
    comes back in every integrand of a layer)."""
    gens = sorted(b.free_symbols, key=str)
    if not b.is_polynomial(*gens):                      # e.g. (2 + cos ℓ)^(-1): not a norm
        return False
    P = sp.Poly(b, *gens)
    return P.is_homogeneous and P.total_degree() == 2


def mahalanobis_scale(Q: sp.Expr, block: tuple, cov: np.ndarray) -> float | None:
    """c with Q = c·zᵀC⁺z on the support of z ~ N(0, C) (C M C = c C), else None."""
    k = len(block)
    M = np.zeros((k, k))
    P = sp.Poly(Q, *block)
    for mono, coeff in P.terms():
        idx = [i for i, a in enumerate(mono) for _ in range(a)]
        i, j = idx
        M[i, j] += float(coeff) / (1 if i == j else 2)
        if i != j:
            M[j, i] += float(coeff) / 2
    CMC = cov @ M @ cov
    tr = float(np.trace(cov))
    if tr <= 0:
        return None
    c = float(np.trace(CMC)) / tr
    if c <= 0 or np.max(np.abs(CMC - c * cov)) > TOLERANCE * np.max(np.abs(CMC)):
        return None
    return c


def degree(expr: sp.Expr, block: set, memo: dict | None = None) -> sp.Expr | None:
    """The degree k of positive homogeneity of expr in the block's variables (others fixed),
    or None if not recognised as homogeneous.  ``memo`` (subexpression → degree, for this block)
    may be shared between calls."""
    memo = {} if memo is None else memo

    def d(e: sp.Expr):
        if e in memo:
            return memo[e]
        if e in block:
            out = sp.Integer(1)
        elif not (e.free_symbols & block):
            out = sp.Integer(0)
        elif e.is_Add:
            ds = {d(a) for a in e.args}
            out = ds.pop() if len(ds) == 1 else None
        elif e.is_Mul:
            ds = [d(a) for a in e.args]
            out = None if None in ds else sp.Add(*ds)
        elif e.is_Pow and e.exp.is_number:
            db = d(e.base)
            out = None if db is None else (db * e.exp if db == 0 or e.exp.is_Integer else None)
        elif isinstance(e, ZERO_DEGREE):
            out = sp.Integer(0) if d(e.args[0]) is not None else None
        elif isinstance(e, ONE_DEGREE):
            out = d(e.args[0])
        elif isinstance(e, Delta):
            da = d(e.args[0])
            out = None if da is None else -da
        else:
            out = sp.Integer(0) if all(d(a) == 0 for a in e.args) else None
        memo[e] = out
        return out
    return d(expr)


def split_norms(expr: sp.Expr, gaussians: tuple, cov: Matrix, groups: dict,
                max_size: float) -> list[tuple[sp.Expr, list[tuple[sp.Expr, int]]]] | None:
    """expr with every block norm Q^e integrated out (module doc), multiplied out: terms
    (number, [(factor, exponent)]) whose sum has the E of expr and is free of those Q's (the factors
    are symbols and non-polynomial atoms, as :func:`multiply.multiplied_terms` gives them; not
    built into sympy products, which cost more than the rest); None if the rule does not apply."""
    Qs = norm_forms(expr, gaussians)
    if not Qs or cov.free_symbols:
        return None
    index = {g: i for i, g in enumerate(gaussians)}
    C = np.array(cov.tolist(), dtype=float)
    present = expr.free_symbols
    radii: dict = {}
    scales: dict = {}                          # R → c as sympy (exact where Q and Σ are)
    for base, Q, eps in Qs:
        gids = {groups[s] for s in Q.free_symbols}
        block = tuple(g for g in gaussians if groups[g] in gids and g in present)
        key = frozenset(block)
        if key in radii:                       # one norm per block
            return None
        idx = [index[g] for g in block]
        Cb = C[np.ix_(idx, idx)]
        c = mahalanobis_scale(Q, block, Cb)
        if c is None:
            return None
        rank = int(np.linalg.matrix_rank(Cb, tol=1e-10 * max(np.max(np.abs(Cb)), 1e-300)))
        R = sp.Dummy("rho", positive=True)
        radii[key] = (base, c, rank, R, set(block), eps)
        scales[R] = exact_number(c, Q, block, idx, cov) if eps == 0 else None
    # Q → cR²; Q + ε → a positive symbol T standing for cR² + ε (kept whole: sympy would expand
    # (cR² + ε)^(−3/2) into a quotient of sums)
    shifted = {R: sp.Dummy("T", positive=True) for _, _, _, R, _, eps in radii.values() if eps != 0}
    sub = {b: shifted[R] if R in shifted else scales[R] * R ** 2
           for b, c, _, R, _, eps in radii.values()}
    out = rational_exponents(expr).xreplace(sub)
    Rs = {R for _, _, _, R, _, _ in radii.values()} | set(shifted.values())
    shifted = {T: R for R, T in shifted.items()}                       # T → its radius R
    out = out.replace(lambda e: isinstance(e, Delta) and e.args[0].is_Mul and e.args[0].has(*Rs),
                      lambda e: _delta_scale(e, Rs))
    if any(a.has(*Rs) for f in out.atoms(sp.Function) for a in f.args):
        return None                            # a norm under another head: not separable
    if expanded_size(out) > max_size:
        return None
    total = []
    memos = {R: {} for _, _, _, R, _, _ in radii.values()}
    radial: dict = {}                          # factor → (R, power of R, power of cR² + ε), or None
    for coeff, fs in multiplied_terms(out):
        js = {R: [sp.Integer(0), sp.Integer(0)] for _, _, _, R, _, _ in radii.values()}
        rest = []
        for f, k in fs:
            if f not in radial:
                radial[f] = radius_power(f, Rs, shifted)
            rj = radial[f]
            if rj is False:
                return None
            if rj is None:
                rest.append((f, k))
            else:
                js[rj[0]][0] += rj[1] * k
                js[rj[0]][1] += rj[2] * k
        factor = sp.Integer(1)
        for _, c, rank, R, block, eps in radii.values():
            k = sum_degree(rest, block, memos[R])
            if k is None or not k.is_Integer:
                return None
            j, e = js[R]
            try:
                if e != 0:
                    factor *= shifted_radius_ratio(j, e, int(k), rank, c, float(eps))
                elif j != 0:
                    factor *= radius_moment_ratio(j, int(k), rank)
            except ZeroDivisionError:
                return None
        total.append((factor * coeff, rest))
    return total


def radius_power(f: sp.Expr, Rs: set, shifted: dict) -> tuple[sp.Symbol, sp.Expr, sp.Expr] | None | bool:
    """(R, j, 0) when f = R^j for a radius R, (R, 0, e) when f = T^e for T = cR² + ε (``shifted``:
    T → R), j and e rationals; None when f is free of these symbols (``Rs``), False otherwise (one
    inside another expression)."""
    if not f.has(*Rs):
        return None
    b, j = f.as_base_exp()
    if not j.is_Rational:
        return False
    if b in shifted:
        return shifted[b], sp.Integer(0), j
    return (b, j, sp.Integer(0)) if b in Rs else False


def sum_degree(factors: list[tuple[sp.Expr, int]], block: set, memo: dict) -> sp.Expr | None:
    """The degree of Π f^k over (f, k) in ``factors``: Σ k·deg f (each deg f memoised)."""
    total = sp.Integer(0)
    for f, k in factors:
        d = degree(f, block, memo)
        if d is None:
            return None
        total += k * d
    return total


def exact_number(c: float, Q: sp.Expr, block: tuple, idx: list[int], cov: Matrix) -> sp.Expr:
    """The scale c of Q = c·zᵀC⁺z (:func:`mahalanobis_scale`, whose float is ``c``) exact when Q
    and Σ are: tr(C M C) / tr(C) with C = Σ[idx, idx] the block's covariance and M Q's matrix (so closed forms
    stay exact), kept where it is a rational or a small closed form; else (Floats in Q or Σ, or a
    large form) the Float ``c``.  Never a rational guessed from the float (``nsimplify`` would
    read an irrational c, or a rational of large denominator, as a nearby one)."""
    if Q.has(sp.Float) or cov.has(sp.Float):
        return sp.Float(c)
    P = sp.Poly(Q, *block)
    M = sp.zeros(len(block), len(block))
    for mono, coeff in P.terms():
        i, j = [i for i, a in enumerate(mono) for _ in range(a)]
        M[i, j] += coeff / 2
        M[j, i] += coeff / 2
    C = cov.extract(idx, idx)
    exact = (C * M * C).trace() / C.trace()
    if exact.is_Rational or (exact.is_number and len(distinct_nodes(exact, SMALL_FORM)) <= SMALL_FORM):
        return exact
    return sp.Float(c)


def rational_exponents(expr: sp.Expr) -> sp.Expr:
    """x**0.5 → x**(1/2): Float exponents (from the program's 0.5) as the rationals they are
    (:func:`rational`)."""
    floats = [e for e in expr.atoms(sp.Pow) if e.exp.is_Float]
    while floats:                     # innermost first, so that outer keys still match
        sub = {e: sp.Pow(e.base, rational(e.exp)) for e in floats}
        expr = expr.xreplace(sub)
        floats = [e for e in expr.atoms(sp.Pow) if e.exp.is_Float]
    return expr


def rational(x: sp.Float) -> sp.Rational:
    """The rational a Float exponent is: exactly its value (0.5 → 1/2; never a guess, which reads
    0.7071067811865476 as 7071067811865476/10¹⁶)."""
    return sp.Rational(x)


def _delta_scale(e: sp.Expr, Rs: set) -> sp.Expr:
    """δ(a·R^p·s) = δ(a)/(R^p·s) for the radius symbols R (and T = cR² + ε) and positive numbers s."""
    scale = [f for f in sp.Mul.make_args(e.args[0]) if (f.is_number and f.is_positive)
             or (f.is_Pow and f.base in Rs) or f in Rs]
    rest = sp.Mul(*[f for f in sp.Mul.make_args(e.args[0]) if f not in scale])
    return Delta(rest) / sp.Mul(*scale)


def kink_conditioned(poly: sp.Expr, kinks: list[sp.Expr], gs: tuple, cov: np.ndarray
                     ) -> tuple[dict[tuple, float], np.ndarray] | None:
    """:func:`kink_conditioned_monomials` of a multiplied-out sympy polynomial in ``gs``."""
    terms = monomials(poly, {g: i for i, g in enumerate(gs)})
    return None if terms is None else kink_conditioned_monomials(terms, kinks, gs, cov)


def kink_conditioned_monomials(terms: list[tuple[tuple, object]], kinks: list[sp.Expr], gs: tuple,
                               cov: np.ndarray) -> tuple[dict[tuple, float], np.ndarray] | None:
    """E[P(z)·S(Wz)] with S a function of k ≤ 2 linear forms u = Wz (the kinks: steps) as an
    expectation over u alone: z = A u + ε with A = C Wᵀ G⁻¹, G = W C Wᵀ, ε ~ N(0, C − A G Aᵀ)
    independent of u, so E[P(z) S(u)] = E[S(u)·P̃(u)], P̃(u) = E_ε P(Au + ε) (Isserlis, in floats).
    P = Σ c·z^α is given as ``terms`` [(α, c)] (c a number that converts to float).
    Returns (P̃ as {β: coefficient of u^β}, G), or None (a kink not linear
    through 0, G singular).  The k-dimensional rest goes to the closed forms:
    (:func:`kinked_moments`): one small integral per kink pattern instead of a symbolic Stein recursion in rank(C)
    dimensions (B − 1 for a batch of B)."""
    index = {g: i for i, g in enumerate(gs)}
    W = np.zeros((len(kinks), len(gs)))
    for r, a in enumerate(kinks):
        for t in sp.Add.make_args(sp.expand(a)):
            c, s = t.as_coeff_Mul()
            if s not in index:
                return None
            W[r, index[s]] += float(c)
    G = W @ cov @ W.T
    if np.linalg.matrix_rank(G) < len(kinks):
        return None
    A = cov @ W.T @ np.linalg.inv(G)
    E = cov - A @ G @ A.T
    k = len(kinks)
    out: dict[tuple, float] = {}
    memo: dict = {}
    for mono, c in terms:
        factors = [i for i, a in enumerate(mono) for _ in range(a)]
        # each factor z_i = Σ_j A_ij u_j + ε_i: choose a u_j (index j < k) or the ε_i (index k)
        for choice in itertools.product(range(k + 1), repeat=len(factors)):
            coeff = float(c)
            beta = [0] * k
            eps = []
            for i, j in zip(factors, choice):
                if j < k:
                    coeff *= A[i, j]
                    beta[j] += 1
                else:
                    eps.append(i)
            if coeff == 0.0 or len(eps) % 2:
                continue
            m = isserlis(tuple(sorted(eps)), E, memo)
            if m != 0.0:
                out[tuple(beta)] = out.get(tuple(beta), 0.0) + coeff * m
    return out, G


def monomials(poly: sp.Expr, index: dict) -> list[tuple[tuple, sp.Expr]] | None:
    """A multiplied-out polynomial in the variables ``index`` (symbol → position) as
    [(exponents, coefficient)] (like terms not merged: the caller sums), or None if a term is
    not a number times powers of those variables."""
    out = []
    for t in sp.Add.make_args(poly):
        c, rest = t.as_coeff_Mul()
        mono = [0] * len(index)
        for f in sp.Mul.make_args(rest):
            b, e = f.as_base_exp()
            if f.is_number:
                c *= f
            elif b in index and e.is_Integer and e > 0:
                mono[index[b]] += int(e)
            else:
                return None
        if not c.is_number:
            return None
        out.append((tuple(mono), c))
    return out


def isserlis(idx: tuple, E: np.ndarray, memo: dict) -> float:
    """E[ε_{i1}···ε_{im}] for ε ~ N(0, E): the sum over pairings (indices sorted, memoised)."""
    if not idx:
        return 1.0
    if idx in memo:
        return memo[idx]
    first, rest = idx[0], idx[1:]
    total = 0.0
    for p in range(len(rest)):
        if E[first, rest[p]] != 0.0:
            total += E[first, rest[p]] * isserlis(rest[:p] + rest[p + 1:], E, memo)
    memo[idx] = total
    return total


def kinked_moments(poly: dict[tuple, float], G: np.ndarray) -> float:
    """E[P̃(u)·Π_j step(u_j)] for u ~ N(0, G) in k ≤ 2 dimensions, P̃ = Σ_β c_β u^β ({β: c_β}).

    k = 1: E[u^m step(u)] = G^{m/2}·2^{m/2}Γ((m+1)/2)/(2√π).  k = 2: u = L(r cos θ, r sin θ) with
    L Lᵀ = G; the radius integrates exactly, ∫_0^∞ r^{d+1}e^{−r²/2} dr = 2^{d/2}Γ(d/2 + 1), and the
    angle runs over the wedge where both (Lz)_j > 0, split at its two edges (the kinks' great
    circles), by Gauss–Legendre: exact to rounding for the trigonometric polynomials of degree
    ≤ 2·ANGLE_NODES − 1 that monomials give (checked: orders n and 2n agree to 1e-13, else
    ValueError)."""
    k = G.shape[0]
    if k == 1:
        g = float(G[0, 0])
        return sum(c * g ** (b[0] / 2) * 2 ** (b[0] / 2) * math.gamma((b[0] + 1) / 2) / (2 * math.sqrt(math.pi))
                   for b, c in poly.items())
    L = np.linalg.cholesky(G)
    phis = [math.atan2(L[j, 1], L[j, 0]) for j in range(2)]
    lo = max(phis[0] - math.pi / 2, _near(phis[1], phis[0]) - math.pi / 2)
    hi = min(phis[0] + math.pi / 2, _near(phis[1], phis[0]) + math.pi / 2)
    if hi <= lo:
        return 0.0
    degree = max((sum(b) for b in poly), default=0)
    values = [_wedge(poly, L, lo, hi, n) for n in (degree + 8, 2 * degree + 16)]
    if abs(values[0] - values[1]) > 1e-13 * max(1.0, abs(values[1])):
        raise ValueError("the wedge quadrature did not converge")
    return values[1]


@functools.lru_cache(maxsize=64)
def legendre_nodes(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The n-point Gauss–Legendre nodes and weights on [−1, 1] (computed once per n, read-only)."""
    x, w = np.polynomial.legendre.leggauss(n)
    x.flags.writeable = w.flags.writeable = False
    return x, w


def _near(phi: float, ref: float) -> float:
    """phi shifted by a multiple of 2π to within π of ref."""
    return phi - 2 * math.pi * round((phi - ref) / (2 * math.pi))


def _wedge(poly: dict[tuple, float], L: np.ndarray, lo: float, hi: float, n: int) -> float:
    """(1/2π) ∫_lo^hi Σ_β c_β R(|β|) (L(cos θ, sin θ))^β dθ by n-point Gauss–Legendre."""
    x, w = legendre_nodes(n)
    theta = lo + (hi - lo) * (x + 1) / 2
    u = L @ np.stack([np.cos(theta), np.sin(theta)])
    total = np.zeros_like(theta)
    for b, c in poly.items():
        d = sum(b)
        total += c * 2 ** (d / 2) * math.gamma(d / 2 + 1) * u[0] ** b[0] * u[1] ** b[1]
    return float(np.dot(w, total) * (hi - lo) / 2 / (2 * math.pi))
