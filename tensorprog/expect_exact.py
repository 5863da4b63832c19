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
  (Williams' arcsine kernel; sign·sign gives the orthant law (2/π) asin ρ); parallel
  signs merge: sign(ℓ+a) sign(ℓ+b) = 1 + sign(ℓ+a) − sign(ℓ+b) for a < b.
These give the arc-cosine kernels of every degree (Cho & Saul), the erf kernel, the
MGF, Dirac masses and their products with polynomials. Anything else raises
``NoClosedForm`` — before multiplying anything out when a cheap scan proves it
(``closed_form_blocker``: a factor no rule accepts; ``odd_in_a_kinked_sign``: the sign
of a non-affine argument, as nested kinks give), and ``ExpansionBudget`` when the
expansion would exceed ``max_size`` (``expect_analysis.expanded_size``).  Convention: sign(0) = 0, so step(0) = 1/2 under a Dirac mass on the
same hyperplane (the symmetric limit); an exactly degenerate ℓ ≡ 0 gives step(0) = 0.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
import sympy as sp

from .expect_analysis import expanded_size
from .expect_linalg import (MAX_EXPAND_SIZE, ExpansionBudget, Matrix, NoClosedForm, affine, condition,
                            reduce_basis, tidy)
from .nonlin import AbsF, Delta, Gelu, LeakyRelu, Relu, Sign, Step



def wick(alpha: tuple[int, ...], cov: Matrix, memo: dict) -> sp.Expr:
    """E[z^α] by Isserlis' recursion E[z_i z^β] = Σ_j Σ_ij β_j E[z^{β−e_j}].

    One variable is (p−1)!! σ^p directly; otherwise the recursion runs on an explicit
    stack (no Python recursion, so E[x^4000] or E[x^2000 y^2000] cannot overflow it)."""
    if sum(alpha) % 2:
        return sp.Integer(0)
    if not any(alpha):
        return sp.Integer(1)
    if alpha in memo:
        return memo[alpha]
    nz = [k for k, a in enumerate(alpha) if a]
    if len(nz) == 1:
        i, p = nz[0], alpha[nz[0]]
        memo[alpha] = out = sp.factorial2(p - 1) * cov[i, i] ** (p // 2)
        return out

    def children(a: tuple) -> list[tuple[sp.Expr, tuple]]:
        i = next(k for k, x in enumerate(a) if x)
        beta = list(a)
        beta[i] -= 1
        out = []
        for j, bj in enumerate(beta):
            if bj and cov[i, j] != 0:
                gamma = list(beta)
                gamma[j] -= 1
                out.append((cov[i, j] * bj, tuple(gamma)))
        return out

    def known(a: tuple) -> bool:
        return a in memo or not any(a) or sum(a) % 2 == 1

    stack = [alpha]
    while stack:
        a = stack[-1]
        if known(a):
            stack.pop()
            continue
        kids = children(a)
        todo = [g for _, g in kids if not known(g)]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        memo[a] = sp.expand(sp.Add(*[c * (memo[g] if g in memo else sp.Integer(1) if not any(g) else 0)
                                     for c, g in kids]))
    return memo[alpha]


def _sign(a: sp.Expr, syms: tuple[sp.Symbol, ...]) -> sp.Expr:
    """sign(a) with a canonical argument: leading coefficient 1 (so sign(−2x) = −sign(x)).

    An argument that is not affine by its structure (e.g. one holding another kink) is
    kept as it is: expanding it would multiply out every kink nested inside (2^depth
    terms for relu(1 − relu(1 − …))), and a non-affine sign has no closed form anyway."""
    if a.is_number:
        return sp.sign(a)
    if not _looks_affine(a, syms):
        return Sign(a)
    a = sp.expand(a)
    if a.is_number:
        return sp.sign(a)
    try:
        w, _ = affine(a, syms)
    except NoClosedForm:
        return Sign(a)
    lead = next((c for c in w if c != 0), None)
    if lead is None or not lead.is_number:
        return Sign(a)
    return sp.sign(lead) * Sign(sp.expand(a / lead))


def _looks_affine(e: sp.Expr, syms: tuple) -> bool:
    """A structural test (no expansion): sums and scalings of the symbols and constants."""
    if not e.has(*syms) or e in syms:
        return True
    if e.is_Add:
        return all(_looks_affine(a, syms) for a in e.args)
    if e.is_Mul:
        dep = [a for a in e.args if a.has(*syms)]
        return len(dep) == 1 and _looks_affine(dep[0], syms)
    return False


def closed_form_blocker(e: sp.Expr, syms: tuple) -> str | None:
    """A factor that no rule of ``_Solver.term`` accepts and that multiplying out cannot
    remove — a function other than sign/erf/exp/δ of the symbols, exp of a non-polynomial,
    a non-integer power (e.g. a quadratic form^(−3/2)) — or None.  Only the structure that
    ``sp.expand`` multiplies out (sums, products, positive integer powers) is walked,
    so the test is linear in the size of the expression; call it on canon's output
    without Dirac masses (conditioning on a δ may still make such factors constant)."""
    seen: set = set()

    def walk(f: sp.Expr) -> str | None:
        if f in seen or not f.has(*syms) or f in syms:
            return None
        seen.add(f)
        if f.is_Add or f.is_Mul:
            return next((r for r in map(walk, f.args) if r is not None), None)
        if f.is_Pow:
            k = f.exp
            if k.is_Integer and k > 0:
                return walk(f.base)
            if k.is_Integer and f.base.is_Symbol:          # 1/x may cancel against x·(…)
                return None
            return f"factor {f}"
        if isinstance(f, (Sign, sp.erf, Delta)):
            return None
        if isinstance(f, sp.exp):
            return None if f.args[0].is_polynomial(*syms) else f"exp of a non-polynomial {f.args[0]}"
        return f"factor {f}"
    return walk(e)


def odd_in_a_kinked_sign(e: sp.Expr, syms: tuple, points: int = 24) -> str | None:
    """A sign factor whose argument is not affine (e.g. relu(1 − relu(1 − x)) gives
    sign(1 − x(1 + sign(x − 1))/2)) and that survives multiplying out with an odd power,
    or None.  Such a term has no rule, so no closed form exists; this finds it without
    the expansion, which is exponential in the nesting depth.  Each sign with an argument
    that is not affine (checked numerically: a(p+q) − a(p) − a(q) + a(0) ≠ 0 at random
    points) becomes a free ±1 variable s_k; e is odd in s_k iff flipping s_k changes its
    value at random points.  Call it without Dirac masses (conditioning may linearize)."""
    from .numeric import compile_exprs              # a late import: numeric is a leaf module
    cands = [a for a in e.atoms(Sign) if a.has(*syms) and not _looks_affine(a.args[0], syms)]
    if not cands:
        return None
    others = tuple(sorted(e.free_symbols - set(syms), key=str))
    rng = np.random.default_rng(12345)
    scale = np.resize([0.3, 1.0, 3.0, 10.0], points)[:, None]    # kinks of a piecewise-affine
    P = scale * rng.standard_normal((points, len(syms)))       # argument can be anywhere
    Q = scale * rng.standard_normal((points, len(syms)))
    par = rng.uniform(0.5, 2.0, (points, len(others)))
    env = tuple(syms) + others
    try:
        tape = compile_exprs(tuple(a.args[0] for a in cands), env)
        A = [np.array(tape(*np.concatenate([X, par], axis=1).T)) for X in (P + Q, P, Q, 0 * P)]
        bent = np.abs(A[0] - A[1] - A[2] + A[3]) > 1e-8 * (1 + np.abs(A).max(axis=0))
        cands = [a for a, b in zip(cands, bent.any(axis=1)) if b]
        if not cands:
            return None
        s = [sp.Dummy(f"s{k}") for k in range(len(cands))]
        f = e.xreplace(dict(zip(cands, s)))
        if not f.is_polynomial(*s):
            return None
        ftape = compile_exprs((f,), env + tuple(s))
        S = rng.choice([-1.0, 1.0], (points, len(s)))
        base = np.asarray(ftape(*np.concatenate([P, par, S], axis=1).T)[0])
        for k in range(len(s)):
            T = S.copy()
            T[:, k] *= -1
            flip = np.asarray(ftape(*np.concatenate([P, par, T], axis=1).T)[0])
            ok = np.isfinite(base) & np.isfinite(flip)
            if np.any(ok & (np.abs(base - flip) > 1e-8 * (1 + np.abs(base) + np.abs(flip)))):
                return f"sign of the non-affine {cands[k].args[0]}"
    except Exception:                   # an optional shortcut: when in doubt, let the rules decide
        return None
    return None


def _split_abs(a: sp.Expr) -> tuple[sp.Expr, sp.Expr, sp.Expr] | None:
    """a = h + k|b| with a single numeric k and no other |·| in h, else None."""
    terms = sp.Add.make_args(sp.expand(a, deep=False))
    hits = [t for t in terms if any(isinstance(f, (AbsF, sp.Abs)) for f in sp.Mul.make_args(t))]
    if len(hits) != 1:
        return None
    k, ab = hits[0].as_independent(AbsF, sp.Abs, as_Add=False)
    if not isinstance(ab, (AbsF, sp.Abs)) or not k.is_number:
        return None
    h = sp.Add(*[t for t in terms if t is not hits[0]])
    if h.has(AbsF, sp.Abs):
        return None
    return h, k, ab.args[0]


def canon(e: sp.Expr, syms: tuple[sp.Symbol, ...], memo: dict | None = None) -> sp.Expr:
    """Rewrite relu/step/abs/leaky_relu/max/min/gelu through sign and erf (module doc)."""
    memo = {} if memo is None else memo
    if e.is_Atom or not e.has(*syms):
        return e
    if e in memo:
        return memo[e]
    if isinstance(e, Step) and (parts := _split_abs(e.args[0])) is not None:
        h, k, b = parts
        if k < 0:
            out = canon(Step(h + k * b) * Step(h - k * b), syms, memo)
        else:
            out = 1 - canon(Step(-h - k * b) * Step(-h + k * b), syms, memo)
        memo[e] = out
        return out
    args = [canon(x, syms, memo) for x in e.args]
    a = args[0] if args else None
    if isinstance(e, Relu):
        out = a * (1 + _sign(a, syms)) / 2
    elif isinstance(e, (Step, sp.Heaviside)):          # Heaviside(0) = 1/2 = sign's convention
        out = (1 + _sign(a, syms)) / 2
    elif isinstance(e, (AbsF, sp.Abs)):
        out = a * _sign(a, syms)
    elif isinstance(e, (Sign, sp.sign)):
        out = _sign(a, syms)
    elif isinstance(e, LeakyRelu):
        c = args[1]
        out = a * ((1 + c) + (1 - c) * _sign(a, syms)) / 2
    elif isinstance(e, (sp.Max, sp.Min)):
        out, pm = args[0], 1 if isinstance(e, sp.Max) else -1
        for b in args[1:]:
            out = (out + b) / 2 + pm * (out - b) * _sign(out - b, syms) / 2
    elif isinstance(e, Gelu):
        out = a * (1 + sp.erf(a / sp.sqrt(2))) / 2
    else:
        out = e.func(*args)
    memo[e] = out
    return out


@lru_cache(maxsize=4096)
def gauss_closed_form(expr: sp.Expr, syms: tuple, cov: Matrix,
                      max_size: float = MAX_EXPAND_SIZE) -> sp.Expr:
    """E[expr] over z = syms ~ N(0, cov), in closed form (NoClosedForm otherwise;
    ExpansionBudget if the rewritten integrand would multiply out beyond ``max_size``,
    measured by ``expect_analysis.expanded_size``)."""
    expr, syms, cov = reduce_basis(expr, syms, cov)
    if not syms:
        return expr
    return _Solver(syms, cov, max_size).E(expr)


def expand_within(e: sp.Expr, max_size: float) -> sp.Expr:
    """sp.expand(e), or ExpansionBudget when its estimated size exceeds max_size."""
    size = expanded_size(e)
    if size > max_size:
        raise ExpansionBudget(f"multiplying out the integrand would give about {size:.3g} nodes "
                              f"> max_expand_size={max_size:g}")
    return sp.expand(e)


class _Solver:
    """The rules of the module docstring for one (basis, nonsingular covariance)."""

    def __init__(self, syms: tuple, cov: Matrix, max_size: float = MAX_EXPAND_SIZE):
        self.syms, self.cov, self.max_size = syms, cov, max_size
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
        return gauss_closed_form(expr, syms, cov, self.max_size) if syms else expr

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
        if det.is_number and not cov2.free_symbols and (
                float(det) <= 0 or np.linalg.eigvalsh(np.array(cov2.evalf(), dtype=float)).min() <= 0):
            raise ValueError(f"E[exp({q})·…] diverges (the tilted Gaussian is not integrable)")
        m = cov2 * b
        factor = sp.exp(P.coeff_monomial(1) + tidy((b.T * m)[0, 0]) / 2) / sp.sqrt(det)
        shifted = g.xreplace({s: s + m[k] for k, s in enumerate(syms)})
        return factor * self.sub_solver(syms, cov2, shifted)

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
        raise NoClosedForm(f"{len(lin)} sign/erf factors")
