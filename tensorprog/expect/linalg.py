"""Linear algebra of centred Gaussian vectors, exact (sympy) or with Floats.

* ``affine``: a = w·z + h, the coefficients of a linear form;
* ``condition``: the law of z given w·z = −h, written as a substitution of one coordinate
  (the Gaussian conditional: mean −Σw h/s, covariance Σ − ΣwwᵀΣ/s, s = wᵀΣw);
* ``reduce_basis``: a basis B with Σ_B ≻ 0 of the span of z, the other coordinates being
  the exact linear combinations z_D = Σ_DB Σ_B⁻¹ z_B (so x ≡ y or Var(x) = 0 cost nothing).
"""
from __future__ import annotations

import mpmath
import numpy as np
import sympy as sp

Matrix = sp.ImmutableMatrix


class NoClosedForm(Exception):
    """No exact rule applies; the caller falls back to numerics."""


class ExpansionBudget(NoClosedForm):
    """A closed form was not attempted: multiplying the integrand out would exceed the
    ``Budget.max_expand_size`` bound (the caller falls back to numerics and says so)."""


def is_zero(e: sp.Expr, scale: float = 1.0) -> bool:
    """Zero test: exact for exact numbers (to 1e-40), to 1e-12·scale with Floats; an expression of
    symbols is zero when sympy simplifies it to 0, after a cheap proof of the contrary where
    there is one (:func:`rational_nonzero`)."""
    if e == 0:
        return True
    if e.is_number:
        return abs(approximate(e, 50)) < (1e-12 * scale if e.has(sp.Float) else 1e-40)
    if rational_nonzero(e):
        return False
    return sp.simplify(e) == 0


#: mpmath's functions for sympy's heads that :func:`approximate` evaluates itself
MPMATH_OF = {sp.exp: mpmath.exp, sp.log: mpmath.log, sp.erf: mpmath.erf, sp.erfc: mpmath.erfc,
             sp.sin: mpmath.sin, sp.cos: mpmath.cos, sp.tan: mpmath.tan, sp.atan: mpmath.atan,
             sp.asin: mpmath.asin, sp.acos: mpmath.acos, sp.tanh: mpmath.tanh, sp.Abs: abs}


def approximate(e: sp.Expr, digits: int = 30) -> complex:
    """The value of a number expression, computed to ``digits`` significant digits (and 10 guard
    digits) once per distinct sub-expression: sympy's ``evalf`` walks a sub-tree shared by many
    parents once per path, which on an exact covariance built over many steps (nested exp of the
    attention weights) costs millions of calls for one entry.  Heads without an mpmath rule here
    are evaluated by their own ``evalf`` (also once each)."""
    memo: dict[sp.Expr, mpmath.mpc] = {}

    def value(node: sp.Expr):
        got = memo.get(node)
        if got is None:
            got = memo[node] = evaluate(node)
        return got

    def evaluate(node: sp.Expr):
        if node.is_Rational:
            return mpmath.mpf(int(node.p)) / int(node.q)
        if node.is_Add:
            return mpmath.fsum(value(a) for a in node.args)
        if node.is_Mul:
            return mpmath.fprod(value(a) for a in node.args)
        if node.is_Pow:
            base, exp = value(node.base), node.exp
            return mpmath.power(base, int(exp) if exp.is_Integer else value(exp))
        rule = MPMATH_OF.get(node.func)
        if rule is not None and len(node.args) == 1:
            return rule(value(node.args[0]))
        return mpmath.mpmathify(complex(node.evalf(digits + 10)))
    with mpmath.workdps(digits + 10):
        return complex(value(e))


#: the points at which :func:`rational_nonzero` evaluates (fixed: the same answer every run)
PROBES = ((sp.Rational(7, 3), sp.Rational(11, 13), sp.Rational(-5, 17), sp.Rational(29, 19), sp.Rational(3, 31)),
          (sp.Rational(17, 7), sp.Rational(-13, 11), sp.Rational(23, 5), sp.Rational(2, 37), sp.Rational(41, 43)))


def rational_nonzero(e: sp.Expr) -> bool:
    """True only if ``e`` is a rational function with rational coefficients that is not
    identically 0: it is one (sums, products, integer powers of symbols and rationals) and its
    exact value at a fixed rational point (a positive one for a symbol declared positive or
    nonnegative, a negative one for negative or nonpositive) is a nonzero rational.  A rational
    function that is not 0 at one point of its domain is not the zero function, and for rational
    functions being 0 on the symbols' domain (an open set) and being 0 as a function are the same:
    so True is a proof, and False (not such a function, a pole or a root at the point) says nothing."""
    for node in sp.preorder_traversal(e):
        if not (node.is_Add or node.is_Mul or node.is_Symbol or node.is_Rational
                or (node.is_Pow and node.exp.is_Integer)):
            return False
    symbols = sorted(e.free_symbols, key=sp.default_sort_key)
    for probe in PROBES:
        point = {}
        for k, s in enumerate(symbols):
            v = probe[k % len(probe)] + k // len(probe)
            if s.is_positive or s.is_nonnegative:
                v = abs(v)
            elif s.is_negative or s.is_nonpositive:
                v = -abs(v)
            point[s] = v
        value = e.xreplace(point)
        if value.is_Rational and value != 0:
            return True
    return False


def _scale(cov: sp.MatrixBase) -> float:
    """The largest numeric variance (1 if none is numeric)."""
    diag = [abs(approximate(cov[i, i])) for i in range(cov.rows) if cov[i, i].is_number]
    return max(diag, default=1.0) or 1.0


def affine(a: sp.Expr, syms: tuple[sp.Symbol, ...]) -> tuple[list[sp.Expr], sp.Expr]:
    """(w, h) with a = Σ w_j z_j + h, h free of syms; NoClosedForm if a is not affine."""
    a = sp.expand(a)
    h, lin = a.as_independent(*syms, as_Add=True)
    w = [sp.Integer(0)] * len(syms)
    index = {s: k for k, s in enumerate(syms)}
    for t in sp.Add.make_args(lin):
        if t == 0:
            continue
        c, s = t.as_independent(*syms, as_Add=False)
        if s not in index:
            raise NoClosedForm(f"{a} is not affine in {syms}")
        w[index[s]] += c
    return w, h


def condition(w: list[sp.Expr], h: sp.Expr, syms: tuple, cov: Matrix):
    """Condition z ~ N(0, Σ) on w·z = −h (requires s = wᵀΣw ≠ 0).

    Returns (density of w·z at −h, substitution for the old symbols, new symbols, new
    covariance): z_j = μ_j + z'_j (j ≠ k) with μ = −Σw h/s and z' ~ N(0, Σ_{−k} − ccᵀ/s),
    and z_k = (−h − Σ_{j≠k} w_j z_j)/w_k.
    """
    W = Matrix(w)
    c = cov * W
    s = sp.expand((W.T * c)[0, 0])
    if is_zero(s, _scale(cov) * float(sum(abs(x) for x in w if x.is_number)) ** 2):
        raise ValueError("a Dirac mass of an almost surely constant linear form "
                         f"{sum(wi * z for wi, z in zip(w, syms)) + h} (zero variance) is infinite")
    nums = [abs(float(x)) if x.is_number else 0.0 for x in w]
    k = max(range(len(w)), key=lambda j: (w[j] != 0, nums[j]))
    rest = [j for j in range(len(syms)) if j != k]
    shifted = {syms[j]: syms[j] - c[j] * h / s for j in rest}
    zk = (-h - sum(w[j] * shifted[syms[j]] for j in rest)) / w[k]
    sub = dict(shifted)
    sub[syms[k]] = sp.expand(zk)
    m = len(rest)
    new_cov = Matrix(m, m, lambda a, b: tidy(cov[rest[a], rest[b]] - c[rest[a]] * c[rest[b]] / s))
    density = sp.exp(-h ** 2 / (2 * s)) / sp.sqrt(2 * sp.pi * s)
    return density, sub, tuple(syms[j] for j in rest), new_cov


def tidy(x: sp.Expr) -> sp.Expr:
    x = sp.expand(x)
    return sp.cancel(x) if x.free_symbols else x


#: :func:`clearly_definite`'s margin: λ_min(Σ) above this times the largest variance
DEFINITE_MARGIN = 1e-6


def clearly_definite(cov: sp.MatrixBase) -> bool:
    """True when Σ is a matrix of Floats and rationals whose smallest eigenvalue (in doubles) exceeds
    ``DEFINITE_MARGIN`` times its largest variance.  Then every pivot of :func:`reduce_basis`'s
    elimination — a conditional variance Var(z_i | z_B), at least λ_min(Σ) — is far above the zero
    test's 1e-12·scale (and its rounding, about n·ε·‖Σ‖), so the elimination would keep every
    coordinate: this numeric check gives its answer without the n³ sympy operations (the answer,
    not an approximation of it; anything else goes through the elimination)."""
    n = cov.rows
    if n == 0 or not all(x.is_Float or x.is_Rational for x in cov):   # (others: evalf may be costly)
        return False
    C = np.array([[float(cov[i, j]) for j in range(n)] for i in range(n)])
    if not np.all(np.isfinite(C)):
        return False
    scale = float(np.max(np.abs(np.diag(C))))
    if not scale > 0:
        return False
    least = np.linalg.eigvalsh((C + C.T) / 2)[0]
    return bool(least > DEFINITE_MARGIN * scale and least > 1e-30)     # (exact zeros: below 1e-40)


#: Float covariances of at least this many coordinates are reduced in float64 (:func:`float_reduce_basis`);
#: below, sympy's elimination costs milliseconds and keeps its last bits (a kernel's x ≡ y, 2-4 coordinates)
FLOAT_ELIMINATION_FROM = 8


def reduce_basis(expr: sp.Expr, syms: tuple, cov: Matrix) -> tuple[sp.Expr, tuple, Matrix]:
    """Drop unused symbols and express a.s.-dependent ones through a basis with Σ_B ≻ 0.

    Pivoted elimination on Schur complements finds a basis B; the others are
    z_D = Σ_DB Σ_B^{−1} z_B exactly (so x ≡ y, or Var(x) = 0, become substitutions).
    """
    used = [k for k, s in enumerate(syms) if expr.has(s)]
    syms, cov = tuple(syms[k] for k in used), Matrix(cov.extract(used, used))
    if clearly_definite(cov):               # every pivot below would be kept: B is all of z
        return expr, syms, cov
    if len(syms) >= FLOAT_ELIMINATION_FROM and float_numbers(cov):    # sympy's would be in Floats too
        return float_reduce_basis(expr, syms, cov)
    n = len(syms)
    R, basis, left, scale = sp.Matrix(cov), [], list(range(n)), _scale(cov)
    while left:
        vals = [(R[i, i], i) for i in left if not is_zero(R[i, i], scale)]
        if not vals:
            break
        p = max(vals, key=lambda t: abs(approximate(t[0])) if t[0].is_number else 0.0)[1]
        basis.append(p)
        left.remove(p)
        piv = R[p, p]
        for i in left:
            for j in left:
                R[i, j] = tidy(R[i, j] - R[i, p] * R[p, j] / piv)
    if not left:
        return expr, syms, cov
    basis.sort()
    SB = cov.extract(basis, basis)
    M = cov.extract(left, basis) * SB.inv()
    sub = {syms[d]: sp.expand(sum(tidy(M[a, b]) * syms[basis[b]] for b in range(len(basis))))
           for a, d in enumerate(left)}
    return expr.xreplace(sub), tuple(syms[k] for k in basis), Matrix(SB)


def float_numbers(cov: sp.MatrixBase) -> bool:
    """Whether Σ's entries are all numbers, Floats and rationals, with at least one Float: sympy's
    elimination of such a Σ is itself in 53-bit floating point (a Float absorbs the rationals)."""
    entries = list(cov)
    return any(x.is_Float for x in entries) and all(x.is_Float or x.is_Rational for x in entries)


def float_reduce_basis(expr: sp.Expr, syms: tuple, cov: Matrix) -> tuple[sp.Expr, tuple, Matrix]:
    """:func:`reduce_basis` for a Σ of Floats (:func:`float_numbers`), in float64: the same pivoted
    elimination on Schur complements — pivot the largest remaining conditional variance R_ii, stop
    when every one is below the zero test's 1e-12·max_i Σ_ii — and z_D = Σ_DB Σ_B⁻¹ z_B solved by
    LAPACK (Σ_B ≻ 0 by its pivots).  It replaces n³ sympy operations (each Float product expanded
    and cancelled, and the rational-function inverse of Σ_B over the reals), which took 144 of the 156
    CPU s of dmft_tanh_depth3's compile at T = 1 (max_qmc_points=1024), on its singular 20-22
    dimensional covariances of linear forms."""
    n = len(syms)
    C = np.array([[float(cov[i, j]) for j in range(n)] for i in range(n)])
    scale = float(np.max(np.abs(np.diag(C)), initial=0.0)) or 1.0
    R, basis, left = C.copy(), [], list(range(n))
    while left:
        live = [i for i in left if abs(R[i, i]) >= 1e-12 * scale]
        if not live:
            break
        p = max(live, key=lambda i: abs(R[i, i]))
        basis.append(p)
        left.remove(p)
        R[np.ix_(left, left)] -= np.outer(R[left, p], R[p, left]) / R[p, p]
    if not left:
        return expr, syms, cov
    basis.sort()
    M = np.linalg.solve(C[np.ix_(basis, basis)], C[np.ix_(basis, left)]).T
    sub = {syms[d]: sp.Add(*[sp.Float(float(M[a, b])) * syms[basis[b]] for b in range(len(basis)) if M[a, b] != 0])
           for a, d in enumerate(left)}
    return expr.xreplace(sub), tuple(syms[k] for k in basis), Matrix(cov.extract(basis, basis))
