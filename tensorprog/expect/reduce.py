"""The reduction of E[f] before anything is computed (used by ``expect``).

E[f] over centred jointly Gaussian symbols (covariance Σ) and independent symmetric laws:

1. linearity over sums, and factorisation of products over independent groups of base
   variables (connected blocks of Σ, each law): E[f(x) g(y)] = E f(x) · E g(y); a product
   tying several groups by a polynomial factor is expanded so that it splits;
2. a Dirac mass δ(w·z + h) is conditioned away: E[δ(w·z + h) g] = φ_s(h)·E[g | w·z = −h],
   with step(0) = 1/2 on that hyperplane (the symmetric limit, which keeps the chain rule
   d step² = 2 step δ = δ consistent); a δ of one law's variable uses its density;
3. a factor odd in one independent group of symmetric variables (or in all of its
   groups at once) has mean 0 — unless a Student-t variable makes it non-integrable;
4. closed forms: polynomials (Wick × law moments), finite sums over Rademacher values,
   the Gaussian rules of ``exact``, and Σ c uⁿ sign(u)ᵐ for one law (E uⁿ, E|u|ⁿ);
5. what remains becomes a numeric *job*, a placeholder symbol J evaluated later.
The result is a sympy expression in exact numbers and job symbols.

Symbolic work is bounded: products are multiplied out one level at a time, only when that
can separate groups, without moving factors into denominators (``distribute``), and no
expansion beyond ``max_expand_size`` (``analysis.expanded_size``) is attempted —
the expectation then becomes a job and ``Engine.expansion_refused`` is set.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

import numpy as np
import sympy as sp

from .exact import canon, closed_form_blocker, expand_within, gauss_closed_form, wick
from .laws import Law, as_number
from .linalg import ExpansionBudget, Matrix, NoClosedForm, affine, condition
from .analysis import expanded_size, growth, parity
from .blocks import kink_conditioned_monomials, kinked_moments, split_norms
from .multiply import multiply_out
from ..symbolic.heads import Delta, Relu, Sign, Step

MAX_ENUMERATION = 8           # at most 2^8 Rademacher value combinations summed exactly


@dataclass(frozen=True)
class Ctx:
    """The joint law in scope: Gaussians with covariance, and independent laws."""
    gaussians: tuple
    cov: Matrix
    laws: tuple                  # ((symbol, Law), ...)

    def group_of(self) -> dict:
        """symbol -> id of its independence group (connected blocks of Σ, each law)."""
        parent = list(range(len(self.gaussians)))

        def root(i: int) -> int:
            while parent[i] != i:
                i = parent[i]
            return i
        for i, j in itertools.combinations(range(len(self.gaussians)), 2):
            if self.cov[i, j] != 0:
                parent[root(i)] = root(j)
        out = {g: ("g", root(i)) for i, g in enumerate(self.gaussians)}
        out.update({u: ("l", u) for u, _ in self.laws})
        return out


def distribute(expr: sp.Expr, split_exp: bool = True) -> sp.Expr:
    """expr with the sums among its factors multiplied out (and, with ``split_exp``,
    e^{a+b} = e^a·e^b) — one level, like ``sp.expand(expr, deep=False)`` but leaving every
    other factor where it is.  (``sp.expand`` first splits expr into numerator and
    denominator, so x·e^{−b²}/(1 + d²) becomes x/(e^{b²} + d²e^{b²}): a form that is
    0·∞ = NaN wherever e^{b²} overflows.)"""
    if expr.is_Add:
        return sp.Add(*[distribute(t, split_exp) for t in expr.args])
    plain, sums = _factor_sums(expr, split_exp)
    return sp.Add(*[sp.Mul(*plain, *combo) for combo in itertools.product(*sums)])


def _factor_sums(expr: sp.Expr, split_exp: bool, max_terms: float = float("inf")) -> tuple[list, list]:
    """The factors of a product: (plain factors, [terms of each sum factor]); a power of a
    sum that would multiply out to more than ``max_terms`` terms stays a plain factor."""
    plain, sums = [], []
    for f in sp.Mul.make_args(expr):
        if split_exp and isinstance(f, sp.exp) and f.args[0].is_Add:
            plain += [sp.exp(a) for a in f.args[0].args]
        elif f.is_Add:
            sums.append(f.args)
        elif f.is_Pow and f.base.is_Add and f.exp.is_Integer and f.exp > 1 and \
                math.comb(len(f.base.args) + int(f.exp) - 1, int(f.exp)) <= max_terms:
            sums.append(sp.Add.make_args(sp.expand_multinomial(f, deep=False)))
        else:
            plain.append(f)
    return plain, sums


@lru_cache(maxsize=None)
def _plain_free_symbols(cls: type) -> bool:
    """Whether ``cls`` has Basic's free_symbols (the union over its args: no bound variables)."""
    owner = next(c for c in cls.__mro__ if "free_symbols" in c.__dict__)
    return owner is sp.Basic


class Engine:
    """One evaluation: the recursive reduction, collecting numeric jobs.

    ``max_expand_size`` bounds every symbolic expansion (``analysis.expanded_size``);
    beyond it no closed form is attempted and ``expansion_refused`` is set."""

    def __init__(self, exact: bool, max_expand_size: float):
        self.exact = exact
        self.max_expand_size = max_expand_size
        self.expansion_refused = False
        self.jobs: dict[tuple, sp.Dummy] = {}
        self.groups: dict[Ctx, dict] = {}
        self.cov_blocks: dict = {}     # id Σ → (Σ, symbolic?); (id Σ, indices) → (Σ, its block as floats)
        self.free: dict[sp.Basic, frozenset] = {}     # expr → its free symbols (see symbols)

    def symbols(self, e: sp.Basic) -> frozenset:
        """``e.free_symbols``, memoised per sub-expression: sympy walks the tree, which repeats a
        shared sub-expression (a vector's Z reused at every step) once per path to it."""
        out = self.free.get(e)
        if out is None:
            if not e.args or not _plain_free_symbols(type(e)):
                out = frozenset(e.free_symbols)
            else:
                out = frozenset().union(*map(self.symbols, e.args))
            self.free[e] = out
        return out

    def E(self, expr: sp.Expr, ctx: Ctx) -> sp.Expr:
        """E[expr] as exact coefficients times job symbols."""
        groups = self.groups.get(ctx)
        if groups is None:                  # (not setdefault: group_of is O(n²))
            groups = self.groups[ctx] = ctx.group_of()
        if not self.symbols(expr) & groups.keys():
            return expr
        if expr.is_Add:
            return sp.Add(*[self.E(t, ctx) for t in expr.args])
        coeff, comps = sp.Integer(1), {}
        parent: dict = {}

        def root(g):
            while parent.setdefault(g, g) != g:
                g = parent[g]
            return g
        factors = sp.Mul.make_args(expr)
        for f in factors:
            gs = [root(groups[s]) for s in self.symbols(f) if s in groups]
            for g in gs[1:]:
                parent[root(g)] = root(gs[0])
        for f in factors:
            gs = [groups[s] for s in self.symbols(f) if s in groups]
            if gs:
                comps.setdefault(root(gs[0]), []).append(f)
            else:
                coeff *= f
        for fs in comps.values():
            coeff *= self.E_component(sp.Mul(*fs), ctx, groups)
            if coeff == 0:
                return sp.Integer(0)
        return coeff

    def E_component(self, expr: sp.Expr, ctx: Ctx, groups: dict) -> sp.Expr:
        """E over one set of base variables that the factors of expr tie together."""
        syms = self.symbols(expr) & groups.keys()
        laws = dict(ctx.laws)
        if expr.has(Delta):
            return self.dirac(expr, ctx)
        gids = {groups[s] for s in syms}
        flips = [{s for s in syms if groups[s] == g} for g in gids] + ([syms] if len(gids) > 1 else [])
        for members in flips:
            heavy = [s for s in members if s in laws and laws[s].df is not None]
            if parity(expr, members) == -1 and all(growth(expr, s) < float(laws[s].df) for s in heavy):
                return sp.Integer(0)
        if self.exact and expr.has(sp.Pow):   # a batch's norm: its radius exactly (.blocks)
            radial = split_norms(expr, ctx.gaussians, ctx.cov, groups, self.max_expand_size)
            if radial is not None:
                return self.collected(radial, ctx, groups)
        if len(gids) > 1:             # e.g. (x + u)² or e^{x+u}: expand, it may split
            expanded = self.split(expr, groups)
            if expanded is not None:
                return self.E(expanded, ctx)
        if self.exact:
            out = self.closed_form(expr, syms, ctx, laws)
            if out is not None:
                return out
        return self.job(expr, syms, ctx)

    def collected(self, terms: list, ctx: Ctx, groups: dict) -> sp.Expr:
        """E of a multiplied-out sum Σ_t c_t·O_t·P_t·S_t (``terms``: (c_t, [(factor, exponent)]) as
        ``blocks.split_norms`` gives them), with S_t the non-polynomial factors of t (all in one
        independence group g), P_t its polynomial factors in g and O_t the rest (independent of g):
        Σ_S E[S·Σ_t c_t·E[O_t]·P_t].  One closed form per distinct S instead of one per term
        (batchnorm's integrands: thousands of terms, a few S); the terms are classified factor by
        factor (memoised), and sympy products are built only for what goes back to :meth:`E`."""
        kind: dict = {}                              # factor → (kinked?, its groups)
        acc: dict[tuple, list] = {}
        outers: dict[tuple, sp.Expr] = {}            # E[O] per distinct O (many terms share one)
        total = []
        for c, fs in terms:
            number, kinked, plain = c, [], []
            for f, k in fs:
                if f not in kind:
                    syms = f.free_symbols & groups.keys()
                    kind[f] = (bool(syms) and not f.is_polynomial(*syms), {groups[s] for s in syms})
                is_kink, gids = kind[f]
                if not gids and f.is_number:
                    number *= f ** k
                else:
                    (kinked if is_kink else plain).append((f, k))
            gids = {g for f, _ in kinked for g in kind[f][1]}
            if len(gids) != 1:
                total.append(self.E(_product(c, fs), ctx))
                continue
            g = gids.pop()
            inner = tuple(fk for fk in plain if g in kind[fk[0]][1])
            outer = tuple(fk for fk in plain if g not in kind[fk[0]][1])
            if outer not in outers:
                outers[outer] = self.E(_product(sp.Integer(1), outer), ctx)
            coeff = number * outers[outer]
            if not coeff.is_number:
                total.append(self.E(_product(c, fs), ctx))
                continue
            acc.setdefault(tuple(kinked), []).append((coeff, inner))
        for kinked, polys in acc.items():
            S = _product(sp.Integer(1), kinked)
            fast = self.kinked_polynomial(S, polys, ctx, groups)
            if fast is None:
                P = multiply_out(sp.Add(*[_product(c, inner) for c, inner in polys]))
                fast = self.E(S * P, ctx)
            total.append(fast)
        return sp.Add(*total)

    def kinked_polynomial(self, S: sp.Expr, polys: list, ctx: Ctx, groups: dict) -> sp.Expr | None:
        """E[S·P] for S a product of steps and relus of at most two linear forms and P = Σ c·Π z^k a polynomial
        (``polys``: (number c, [(Gaussian z, k)])), at a numeric Σ, by conditioning on the kinks
        (``blocks.kink_conditioned``); None otherwise."""
        kinks, extra = [], []                     # relu(u)^k = u^k·step(u): u^k joins P̃
        for f in sp.Mul.make_args(S):
            b, k = f.as_base_exp()
            if not (isinstance(b, (Step, Relu)) and k.is_Integer and k > 0):
                return None
            if b.args[0] not in kinks:
                kinks.append(b.args[0])
                extra.append(0)
            if isinstance(b, Relu):
                extra[kinks.index(b.args[0])] += int(k)
        syms = S.free_symbols | {z for _, inner in polys for z, _ in inner}
        g = {groups[s] for s in syms if s in groups}
        if len(kinks) > 2 or len(g) != 1 or self.symbolic(ctx.cov):
            return None
        gid = g.pop()
        gs = tuple(s for s in ctx.gaussians if groups[s] == gid)
        idx = [ctx.gaussians.index(s) for s in gs]
        key = (id(ctx.cov), tuple(idx))
        if self.cov_blocks.get(key, (None,))[0] is not ctx.cov:
            self.cov_blocks[key] = (ctx.cov, np.array(ctx.cov.extract(idx, idx).tolist(), dtype=float))
        C = self.cov_blocks[key][1]
        index = {z: i for i, z in enumerate(gs)}
        P: dict[tuple, object] = {}
        for c, inner in polys:
            mono = [0] * len(gs)
            for z, k in inner:
                if z not in index:
                    return None
                mono[index[z]] += k
            try:
                x = Fraction(int(c.p), int(c.q)) if c.is_Rational else float(c)
            except TypeError:                      # a complex number: not for these rules
                return None
            P[tuple(mono)] = P.get(tuple(mono), 0) + x
        try:
            got = kink_conditioned_monomials(list(P.items()), kinks, gs, C)
            if got is None:
                return None
            poly = {tuple(b + e for b, e in zip(beta, extra)): c for beta, c in got[0].items()}
            return sp.Float(kinked_moments(poly, got[1]))
        except (NoClosedForm, ValueError, np.linalg.LinAlgError):
            return None

    def symbolic(self, cov: Matrix) -> bool:
        """Whether Σ has free symbols (once per Σ: the check walks every entry)."""
        if self.cov_blocks.get(id(cov), (None,))[0] is not cov:
            self.cov_blocks[id(cov)] = (cov, bool(cov.free_symbols))
        return self.cov_blocks[id(cov)][1]

    def split(self, expr: sp.Expr, groups: dict) -> sp.Expr | None:
        """``distribute(expr)`` if that can separate the independent groups, else None:
        the plain (non-sum) factors are in every term, so if they alone tie all the
        groups together, multiplying out cannot split anything (and is not done)."""
        plain, sums = _factor_sums(expr, True, self.max_expand_size)
        if any(f.is_Pow and f.base.is_Add and f.exp.is_Integer and f.exp > 1 for f in plain):
            self.expansion_refused = True             # a power of a sum too large to multiply out
            return None
        gids = {groups[s] for s in expr.free_symbols if s in groups}
        parent: dict = {}

        def root(g):
            while parent.setdefault(g, g) != g:
                g = parent[g]
            return g
        for f in plain:
            gs = [root(groups[s]) for s in f.free_symbols if s in groups]
            for g in gs[1:]:
                parent[root(g)] = root(gs[0])
        if len({root(g) for g in gids}) == 1:
            return None
        n = 1.0
        for terms in sums:
            n *= len(terms)
        size = n * (len(plain) + len(sums))          # one level: the factors are shared, not copied
        if size > self.max_expand_size:
            self.expansion_refused = True
            return None
        out = sp.Add(*[sp.Mul(*plain, *combo) for combo in itertools.product(*sums)])
        return None if out == expr else out

    def closed_form(self, expr: sp.Expr, syms: set, ctx: Ctx, laws: dict) -> sp.Expr | None:
        """The exact routes of the module docstring, or None."""
        discrete = sorted((s for s in syms if s in laws and laws[s].discrete), key=str)
        poly = expr.is_polynomial(*syms)
        if discrete and not poly and len(discrete) <= MAX_ENUMERATION:
            vals = [(-sp.sqrt(laws[s].v), sp.sqrt(laws[s].v)) for s in discrete]
            return sp.Add(*[self.E(expr.xreplace(dict(zip(discrete, combo))), ctx)
                            for combo in itertools.product(*vals)]) / 2 ** len(discrete)
        gs = tuple(g for g in ctx.gaussians if g in syms)
        idx = [ctx.gaussians.index(g) for g in gs]
        cov = Matrix(ctx.cov.extract(idx, idx))
        try:
            if poly:
                return poly_expect(expr, gs, cov, tuple(s for s in syms if s not in gs), laws,
                                   self.max_expand_size)
            if len(gs) == len(syms):
                return gauss_closed_form(expr, gs, cov, self.max_expand_size)
            if len(syms) == 1:
                return law_closed_form(expr, next(iter(syms)), laws[next(iter(syms))], self.max_expand_size)
        except ExpansionBudget:
            self.expansion_refused = True
            return None
        except NoClosedForm:
            return None
        return None

    def dirac(self, expr: sp.Expr, ctx: Ctx) -> sp.Expr:
        """E[δ(a)·g] = p_a(0)·E[g | a = 0], a linear in the Gaussians (or in one law)."""
        expr = distribute(expr, split_exp=False)
        if expr.is_Add:
            return self.E(expr, ctx)
        ds = [f for f in sp.Mul.make_args(expr) if isinstance(f, Delta)]
        if not ds:
            raise ValueError(f"a Dirac mass must appear as a factor of the integrand: {expr}")
        arg = ds[0].args[0]                    # step(0) = 1/2 under δ: the symmetric limit
        rest = (expr / ds[0]).replace(Step, lambda a: (1 + Sign(a)) / 2)
        scale = positive_scale(arg, ctx.gaussians)
        if scale is not None:                  # coarea: δ(a/s) = s·δ(a) for s > 0 a.e.
            arg, rest = sp.Mul(*[f for f in sp.Mul.make_args(arg) if f not in scale]), rest / sp.Mul(*scale)
        try:
            w, h = affine(arg, ctx.gaussians)
        except NoClosedForm:
            raise ValueError(f"Dirac mass of a non-linear argument: {ds[0]}") from None
        scaled = [x for x in w if x.free_symbols]
        if scaled and not h.has(*ctx.gaussians) and scaled[0].is_positive:
            # δ(p·a) = δ(a)/p for p > 0 built from laws (the row scale |u| of an mvt matrix)
            p = scaled[0]
            w, h, rest = [sp.cancel(x / p) for x in w], sp.cancel(h / p), rest / p
        if h.has(*ctx.gaussians) or any(x.free_symbols for x in w):
            raise ValueError(f"Dirac mass of a non-linear argument: {ds[0]}")
        if any(x != 0 for x in w):
            dens, sub, gs, cov = condition(w, h, ctx.gaussians, ctx.cov)
            return self.E(dens * rest.xreplace(sub), Ctx(gs, cov, ctx.laws))
        laws = dict(ctx.laws)
        for u in h.free_symbols & laws.keys():
            wu, hu = affine(h, (u,))
            if not laws[u].discrete and wu[0].is_number and not hu.has(u):
                t = -hu / wu[0]
                return self.E(laws[u].density(t) / abs(wu[0]) * rest.xreplace({u: t}), ctx)
        raise ValueError(f"a Dirac mass of {arg} has no density to evaluate")

    def job(self, expr: sp.Expr, syms: set, ctx: Ctx) -> sp.Expr:
        """A placeholder for E[expr] to be computed numerically."""
        gs = tuple(g for g in ctx.gaussians if g in syms)
        idx = [ctx.gaussians.index(g) for g in gs]
        cov = ctx.cov.extract(idx, idx)
        laws = tuple((u, law) for u, law in ctx.laws if u in syms)
        if cov.free_symbols or any(as_number(law.var).free_symbols for _, law in laws):
            raise FreeParameters(expr, cov.free_symbols)
        key = (expr, gs, tuple(float(x) for x in cov), laws)
        if key not in self.jobs:
            self.jobs[key] = sp.Dummy(f"J{len(self.jobs)}")
        return self.jobs[key]


class FreeParameters(ValueError):
    """No closed form for E[expr], and its law has free parameters.  The message is written when it
    is shown: a batch compile meets this for every expectation it evaluates numerically (its
    covariance is symbols) and catches it, and printing the integrand each time cost more than
    the rest of the attempt."""

    def __init__(self, expr: sp.Expr, symbols: set) -> None:
        super().__init__(expr, symbols)

    def __str__(self) -> str:
        expr, symbols = self.args
        return (f"no closed form for E[{expr}], and its law has free parameters "
                f"{sorted(map(str, symbols))}: give numbers to evaluate it numerically")


def _product(c: sp.Expr, factors) -> sp.Expr:
    """c·Π f^k over (f, k) in ``factors``, as a sympy expression."""
    return sp.Mul(c, *[f ** k for f, k in factors])


def positive_scale(arg: sp.Expr, gaussians: tuple) -> list[sp.Expr] | None:
    """The factors s_i of ``arg`` = a · Π s_i that are > 0 almost everywhere, when a is affine in
    the Gaussians and each s_i is a positive number or a power of a base that is ≥ 0 and 0 only
    on a null set (a sum of squares, ‖ℓ‖); None when there are none or a is not affine.

    By the coarea formula δ(g) = δ(a)/|∂g/∂a| on {a = 0}, and there ∂g/∂a = Π s_i (the
    derivatives of the s_i are multiplied by a = 0): so δ(a·Π s_i) = δ(a)/Π s_i.  This is the
    Dirac mass of a batch-normalised argument, (h_b − μ)/σ = ℓ/‖·‖: a scale-free function
    whose zero set is the hyperplane ℓ = 0."""
    factors = sp.Mul.make_args(arg)
    scale = [f for f in factors if is_positive_ae(f, gaussians)]
    if not scale or len(scale) == len(factors):
        return None
    try:
        affine(sp.Mul(*[f for f in factors if f not in scale]), gaussians)
    except NoClosedForm:
        return None
    return scale


def is_positive_ae(f: sp.Expr, gaussians: tuple) -> bool:
    """f > 0 almost everywhere under a (non-degenerate) Gaussian law: a positive number, or
    b**p with b a sum of c·q**(2k) terms (c > 0, q a non-constant polynomial in the Gaussians)
    and of numbers ≥ 0: b ≥ 0, and b = 0 only on the common zero set of the q's, a null set."""
    if f.is_number:
        return bool(f.is_positive)
    if not (f.is_Pow and f.exp.is_number) or f.base.free_symbols - set(gaussians):
        return False
    square = False
    for t in sp.Add.make_args(f.base):
        if t.is_number:
            if not t >= 0:
                return False
            continue
        c, q = t.as_coeff_Mul()
        if not (c > 0 and q.is_Pow and q.exp.is_Integer and q.exp % 2 == 0 and q.exp > 0
                and q.base.is_polynomial(*gaussians)):
            return False
        square = True
    return square


def poly_expect(expr: sp.Expr, gs: tuple, cov: Matrix, us: tuple, laws: dict, max_size: float) -> sp.Expr:
    """E of a polynomial: Wick on the Gaussian part times the law moments
    (ExpansionBudget if multiplying it out, or Wick's recursion over the monomials
    β ≤ α of a term, would exceed ``max_size``)."""
    size = expanded_size(expr)
    if size > max_size:
        raise ExpansionBudget(f"multiplying out the polynomial would give about {size:.3g} nodes "
                              f"> max_expand_size={max_size:g}")
    P = sp.Poly(expr, *gs, *us)
    memo: dict = {}
    out = sp.Integer(0)
    for mono, _ in P.terms():
        alpha = [a for a in mono[:len(gs)] if a]
        if len(alpha) > 1 and math.prod(a + 1 for a in alpha) > max_size:
            raise ExpansionBudget(f"Wick's recursion for a monomial of degrees {tuple(alpha)} "
                                  f"> max_expand_size={max_size:g}")
    for mono, c in P.terms():
        m = wick(mono[:len(gs)], cov, memo)
        for u, k in zip(us, mono[len(gs):]):
            m *= laws[u].moment(k)
        out += c * m
    return out


def law_closed_form(expr: sp.Expr, u: sp.Symbol, law: Law, max_size: float) -> sp.Expr:
    """E[Σ c u^n sign(u)^m] for one symmetric law, via E u^n and E|u|^n."""
    out = sp.Integer(0)
    e = canon(expr, (u,))
    if (why := closed_form_blocker(e, (u,))) is not None:
        raise NoClosedForm(why)
    for t in sp.Add.make_args(expand_within(e, max_size)):
        c, rest = t.as_independent(u, as_Add=False)
        n, m = 0, 0
        for f in sp.Mul.make_args(rest):
            b, k = f.as_base_exp()
            if b == u and k.is_Integer and k > 0:
                n += int(k)
            elif b == Sign(u) and k.is_Integer and k > 0:
                m += int(k)
            elif f != 1:
                raise NoClosedForm(f"{f}")
        out += c * (law.moment(n) if m % 2 == 0 else law.abs_moment(n) if n % 2 else 0)
    return out
