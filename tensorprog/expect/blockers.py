"""Cheap proofs that an integrand has no closed form, before multiplying anything out.

Expanding a rewritten integrand (:mod:`.canon`) can be exponential in its nesting
depth (2^depth terms for relu(1 − relu(1 − …))).  Two linear-time scans find a factor
that no rule of :mod:`.exact` accepts and that the expansion cannot remove:
:func:`closed_form_blocker` (a function other than sign/erf/exp/δ, exp of a non-polynomial,
a non-integer power) and :func:`odd_in_a_kinked_sign` (a sign of a non-affine argument with
an odd power); :func:`expand_within` refuses an expansion above the size budget
(``analysis.expanded_size``, bounded by ``Budget.max_expand_size``) with ``ExpansionBudget``.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from .analysis import expanded_size
from .canon import looks_affine
from .linalg import ExpansionBudget
from ..symbolic.evaluate import compile_exprs
from ..symbolic.dag import distinct_nodes
from ..symbolic.heads import Delta, Sign


class Reason:
    """Why an integrand has no closed form: ``what`` and the factor ``f`` that blocks it, printed
    (:func:`brief`) only when the reason is shown: printing a factor costs far more than finding it,
    and most reasons are only tested for (the numeric rules then take the expectation)."""

    __slots__ = ("what", "f")

    def __init__(self, what: str, f: sp.Expr) -> None:
        self.what, self.f = what, f

    def __str__(self) -> str:
        return f"{self.what} {brief(self.f)}"

    def __repr__(self) -> str:
        return f"Reason({str(self)!r})"


def closed_form_blocker(e: sp.Expr, syms: tuple) -> Reason | None:
    """A factor that no rule of ``_Solver.term`` accepts and that multiplying out cannot
    remove — a function other than sign/erf/exp/δ of the symbols, exp of a non-polynomial,
    a non-integer power (e.g. a quadratic form^(−3/2)) — as a :class:`Reason`, or None.  Only the structure that
    ``sp.expand`` multiplies out (sums, products, positive integer powers) is walked,
    so the test is linear in the size of the expression; call it on canon's output
    without Dirac masses (conditioning on a δ may still make such factors constant)."""
    seen: set = set()

    def walk(f: sp.Expr) -> Reason | None:
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
            return Reason("factor", f)
        if isinstance(f, (Sign, sp.erf, Delta)):
            return None
        if isinstance(f, sp.exp):
            return None if f.args[0].is_polynomial(*syms) else Reason("exp of a non-polynomial", f.args[0])
        return Reason("factor", f)
    return walk(e)


def brief(f: sp.Expr, most: int = 60) -> str:
    """``str(f)`` when f has at most ``most`` distinct sub-expressions; else its head and that
    count (printing is linear in the *tree*, exponential for a Z that reuses a vector at every
    layer; counting distinct nodes is linear in the DAG)."""
    if len(distinct_nodes(f, most)) <= most:
        return str(f)
    return f"{f.func.__name__}(…) (more than {most} distinct sub-expressions)"


def odd_in_a_kinked_sign(e: sp.Expr, syms: tuple, points: int = 24) -> str | None:
    """A sign factor whose argument is not affine (e.g. relu(1 − relu(1 − x)) gives
    sign(1 − x(1 + sign(x − 1))/2)) and that survives multiplying out with an odd power,
    or None.  Such a term has no rule, so no closed form exists; this finds it without
    the expansion, which is exponential in the nesting depth.  Each sign with an argument
    that is not affine (checked numerically: a(p+q) − a(p) − a(q) + a(0) ≠ 0 at random
    points) becomes a free ±1 variable s_k; e is odd in s_k iff flipping s_k changes its
    value at random points.  Call it without Dirac masses (conditioning may linearize)."""
    cands = [a for a in e.atoms(Sign) if a.has(*syms) and not looks_affine(a.args[0], syms)]
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


def expand_within(e: sp.Expr, max_size: float) -> sp.Expr:
    """sp.expand(e), or ExpansionBudget when its estimated size exceeds max_size."""
    size = expanded_size(e)
    if size > max_size:
        raise ExpansionBudget(f"multiplying out the integrand would give about {size:.3g} nodes "
                              f"> max_expand_size={max_size:g}")
    return sp.expand(e)
