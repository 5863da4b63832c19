"""Numeric expectations, and the structural analyses the engine uses to reduce them.

``numeric_expect(exprs, gaussians, cov, laws)`` computes E[f] for each f over
z ~ N(0, Σ) (Σ numeric, possibly singular) and independent laws.  Σ = L Lᵀ by an
eigendecomposition keeping the modes with λ > 1e-12·λ_max, so z = Lξ with ξ standard
normal in r = rank Σ dimensions (x ≡ y, or Var = 0, cost nothing).  Rademacher values
are summed exactly (2^m combinations); the D continuous coordinates go to

* D = 1: ``piecewise_1d`` (split at the kinks);
* D = 2 with kinks whose arguments are piecewise affine: ``iterated_2d``;
* D ≤ 4 otherwise: a tensor Gauss rule;
* beyond (or if quadrature does not reach the target within its budget of
  ``QUAD_BUDGET`` points): randomized QMC, keeping whichever error is smaller.
"""
from __future__ import annotations

import itertools
import warnings
from typing import Sequence

import numpy as np
import sympy as sp

from .expect_laws import Coord, Law
from .expect_qmc import qmc
from .expect_quad import iterated_2d, piecewise_1d, tensor
from .nonlin import (AbsF, Delta, Gelu, LeakyRelu, Relu, Sigmoid, Sign, Softplus, Step)
from .numeric import compile_exprs

QUAD_BUDGET = 2_000_000
ODD = (sp.tanh, sp.erf, sp.sin, Sign, sp.sign, sp.atan, sp.asin, sp.sinh)
EVEN = (AbsF, sp.Abs, sp.cos, sp.cosh, Delta)
BOUNDED = (sp.tanh, sp.erf, Sigmoid, Step, Sign, sp.sign, sp.sin, sp.cos, sp.atan, sp.erfc)
LINEAR = (Relu, AbsF, sp.Abs, LeakyRelu, Softplus, Gelu, sp.Max, sp.Min)
KINKS = (Relu, Step, Sign, AbsF, sp.Abs, sp.sign, LeakyRelu, sp.Max, sp.Min)


def parity(expr: sp.Expr, flip: set) -> int | None:
    """+1 if expr is even, −1 if odd under s → −s for all s in flip; None if unknown."""
    memo: dict = {}

    def p(e: sp.Expr) -> int | None:
        if e in memo:
            return memo[e]
        if e.is_Symbol or not e.args:
            out = -1 if e in flip else 1
        elif e.is_Add:
            ps = {p(a) for a in e.args}
            out = ps.pop() if len(ps) == 1 else None
        elif e.is_Mul:
            ps = [p(a) for a in e.args]
            out = None if None in ps else int(np.prod(ps))
        elif e.is_Pow:
            b, x = p(e.base), p(e.exp)
            out = (1 if b == 1 else (-1) ** int(e.exp) if b == -1 and e.exp.is_Integer else None) if x == 1 else None
        else:
            ps = [p(a) for a in e.args]
            if all(q == 1 for q in ps):
                out = 1
            elif ps == [-1] and isinstance(e, ODD):
                out = -1
            elif ps == [-1] and isinstance(e, EVEN):
                out = 1
            else:
                out = None
        memo[e] = out
        return out
    return p(expr)


def growth(expr: sp.Expr, u: sp.Symbol) -> float:
    """An upper bound on the polynomial growth degree of expr in u (inf if faster)."""
    memo: dict = {}

    def g(e: sp.Expr) -> float:
        if e in memo:
            return memo[e]
        if e == u:
            out = 1.0
        elif e.is_Symbol or not e.args:
            out = 0.0
        elif e.is_Add or isinstance(e, LINEAR):
            out = max(g(a) for a in e.args)
        elif e.is_Mul:
            out = sum(g(a) for a in e.args)
        elif e.is_Pow:
            gb = g(e.base)
            out = (float(e.exp) * gb if e.exp.is_number and e.exp > 0 else 0.0) if g(e.exp) == 0 else np.inf
        elif isinstance(e, BOUNDED):
            out = 0.0
        elif isinstance(e, sp.log):
            out = 1e-9 if g(e.args[0]) > 0 else 0.0
        else:
            out = 0.0 if all(g(a) == 0 for a in e.args) else np.inf
        memo[e] = out
        return out
    return g(expr)


def kink_args(exprs: Sequence[sp.Expr]) -> list[sp.Expr]:
    """Arguments whose zero sets are kinks or jumps of the integrands."""
    out: set = set()
    for e in exprs:
        for k in e.atoms(*KINKS):
            if isinstance(k, (sp.Max, sp.Min)):
                out.update(a - b for a, b in itertools.combinations(k.args, 2))
            else:
                out.add(k.args[0])
    return sorted(out, key=sp.default_sort_key)


def _branches(k: sp.Expr) -> list[sp.Expr]:
    a = k.args[0]
    if isinstance(k, Relu):
        return [a, sp.Integer(0)]
    if isinstance(k, Step):
        return [sp.Integer(0), sp.Integer(1)]
    if isinstance(k, (Sign, sp.sign)):
        return [sp.Integer(-1), sp.Integer(1)]
    if isinstance(k, (AbsF, sp.Abs)):
        return [a, -a]
    if isinstance(k, LeakyRelu):
        return [a, k.args[1] * a]
    return list(k.args)


def affine_pieces(g: sp.Expr, syms: Sequence[sp.Symbol], cap: int = 64) -> list[tuple] | None:
    """The affine forms (w, c) whose zero lines cover the zero set of g; None if g is not
    piecewise affine (or has more than ``cap`` pieces)."""
    forms: list = []
    todo = [g]
    while todo:
        e = todo.pop()
        ks = e.atoms(*KINKS)
        if ks:
            k = next(iter(ks))
            todo += [e.xreplace({k: b}) for b in _branches(k)]
            if len(todo) + len(forms) > cap:
                return None
            continue
        P = sp.Poly(e, *syms) if e.free_symbols else None
        if P is not None and (P.total_degree() > 1 or not all(c.is_number for c in P.coeffs())):
            return None
        w = [float(P.coeff_monomial(s)) if P is not None else 0.0 for s in syms]
        forms.append((w, float(P.coeff_monomial(1)) if P is not None else float(e)))
    return forms


def numeric_expect(exprs: Sequence[sp.Expr], gaussians: Sequence[sp.Symbol], cov: np.ndarray,
                   laws: Sequence[tuple[sp.Symbol, Law]], *, tol: float = 1e-10,
                   max_qmc_points: int = 2 ** 20, seed: int = 0) -> list[tuple[float, float, str]]:
    """[(value, error, method)] of E[f] for each f (module doc)."""
    d = len(gaussians)
    cov = np.asarray(cov, dtype=float).reshape(d, d)
    lam, V = np.linalg.eigh(cov) if d else (np.zeros(0), np.zeros((0, 0)))
    scale = max(lam.max(initial=0.0), 1e-300)
    if lam.min(initial=0.0) < -1e-9 * scale:
        raise ValueError(f"covariance is not positive semi-definite (eigenvalue {lam.min():.3g})")
    keep = np.nonzero(lam > 1e-12 * scale)[0][::-1]      # largest modes first (best for QMC)
    L = V[:, keep] * np.sqrt(lam[keep])
    cont = [(u, law) for u, law in laws if not law.discrete]
    disc = [(u, law) for u, law in laws if law.discrete]
    symbols = tuple(gaussians) + tuple(u for u, _ in cont) + tuple(u for u, _ in disc)
    gg = max([growth(e, g) for e in exprs for g in gaussians] + [0.0])
    coords = [Coord(None, gg)] * L.shape[1] + [Coord(law, max(growth(e, u) for e in exprs)) for u, law in cont]
    for (u, law), c in zip(cont, coords[L.shape[1]:]):
        if law.family == "student_t" and c.growth >= float(law.df):
            warnings.warn(f"E[...] may be infinite: the integrand grows like |{u}|^{c.growth:g} and "
                          f"{u} ~ student_t(df={law.df}) has E|{u}|^{c.growth:g} = ∞", RuntimeWarning)
    tape = compile_exprs(tuple(exprs), symbols)
    kinks = kink_args(exprs)
    ktape = compile_exprs(tuple(kinks), symbols) if kinks else None
    target = lambda q: tol * np.maximum(1.0, np.abs(q))
    K = len(exprs)
    values, errors, methods = np.zeros(K), np.zeros(K), ["quadrature"] * K
    combos = list(itertools.product(*[(-np.sqrt(float(law.var)), np.sqrt(float(law.var))) for _, law in disc]))
    for combo in combos:
        def args(*t: np.ndarray) -> list:
            n = np.shape(t[0]) if t else ()
            gz = [L[i] @ np.asarray(t[:L.shape[1]]) if L.shape[1] else np.zeros(n) for i in range(d)]
            return gz + list(t[L.shape[1]:]) + [np.full(n, v) for v in combo]

        def f(*t: np.ndarray) -> np.ndarray:
            return np.array(tape(*args(*t))).reshape(K, -1)

        def kf(*t: np.ndarray) -> np.ndarray:
            return np.array(ktape(*args(*t))).reshape(len(kinks), -1)
        v, e, m = _dispatch(f, kf if kinks else None, coords, kinks, symbols, L, combo, len(cont),
                            target, max_qmc_points, seed)
        values += v / len(combos)
        errors += e / len(combos)
        methods = [mm if mm == "qmc" else old for mm, old in zip(m, methods)]
    return [(float(v), float(e), m) for v, e, m in zip(values, errors, methods)]


def _dispatch(f, kf, coords, kinks, symbols, L, combo, ncont, target, max_qmc, seed):
    """Choose the rule for one Rademacher combination; fall back to QMC if needed."""
    D, K = len(coords), len(target(np.zeros(1)))
    if D == 0:
        return f().ravel() * np.ones(K), np.zeros(K), ["quadrature"] * K
    res = None
    if D == 1:
        res = piecewise_1d(lambda t: f(t), coords[0], kf, target, QUAD_BUDGET)
    elif D == 2 and kinks:
        lines = _lines(kinks, symbols, L, combo, ncont)
        if lines is not None:
            res = iterated_2d(f, coords[0], coords[1], lines, target, QUAD_BUDGET)
    elif D <= 4 and not kinks:
        res = tensor(f, coords, target, QUAD_BUDGET)
    if res is not None and res[2]:
        return res[0], res[1], ["quadrature"] * len(res[0])
    q = qmc(f, coords, target, max_qmc, seed)
    if res is None:
        return q[0], q[1], ["qmc"] * len(q[0])
    better = q[1] < res[1]
    return (np.where(better, q[0], res[0]), np.where(better, q[1], res[1]),
            ["qmc" if b else "quadrature" for b in better])


def _lines(kinks, symbols, L, combo, ncont) -> np.ndarray | None:
    """Kink lines in the two integration coordinates, or None if not piecewise affine."""
    d, r = L.shape
    rows = []
    for g in kinks:
        pieces = affine_pieces(g, symbols)
        if pieces is None:
            return None
        for w, c in pieces:
            w = np.asarray(w)
            a = np.concatenate([w[:d] @ L if d else np.zeros(r), w[d:d + ncont]])
            c = c + float(np.dot(w[d + ncont:], combo)) if combo else c
            if np.any(a != 0):
                rows.append([a[0], a[1], c])
    return np.array(rows).reshape(-1, 3)
