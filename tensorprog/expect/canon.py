"""The canonical rewrite of an integrand: piecewise-linear heads through sign and erf.

    relu(ℓ) = ℓ(1 + sign ℓ)/2,   step(ℓ) = (1 + sign ℓ)/2,   |ℓ| = ℓ sign ℓ,
    leaky_relu(ℓ, c) = ℓ((1+c) + (1−c) sign ℓ)/2,   max(a, b) = (a+b)/2 + (a−b) sign(a−b)/2,
    gelu(ℓ) = ℓ(1 + erf(ℓ/√2))/2,   step(h − k|b|) = step(h − kb)·step(h + kb),
    elu(ℓ, α) = ℓ(1 + sign ℓ)/2 + α(e^ℓ − 1)(1 − sign ℓ)/2,   selu(ℓ) = λ·elu(ℓ, α_SELU),
    e^{c·relu(ℓ) + r} = e^r·((1 + sign ℓ)e^{cℓ} + (1 − sign ℓ))/2   (the derivatives of elu, selu),

with each sign's argument scaled to leading coefficient 1 (sign(−2x) = −sign(x)) when it
is affine; a sign of a non-affine argument is kept unexpanded (it has no closed form, and
expanding it would multiply out every kink nested inside).  Convention: sign(0) = 0, so
step(0) = Heaviside(0) = 1/2.  The rules that integrate the result: :mod:`.exact`.
"""
from __future__ import annotations

import sympy as sp

from .linalg import NoClosedForm, affine
from ..builtins.table import SELU_ALPHA, SELU_SCALE
from ..symbolic.heads import AbsF, Elu, Gelu, LeakyRelu, Relu, Selu, Sign, Step

#: SELU's constants as sympy numbers: the exact binary values of the floats its numpy function and its head
#: use (as rationals, not Floats: a tilt's terms e^m·λ²α² must cancel exactly, where Float products leave
#: 1e-15·e^m, and e^m reaches e^{2a} for a variance a: :meth:`.exact._Solver.tilt`)
SELU_ALPHA_Q, SELU_SCALE_Q = sp.Rational(SELU_ALPHA), sp.Rational(SELU_SCALE)


def _sign(a: sp.Expr, syms: tuple[sp.Symbol, ...]) -> sp.Expr:
    """sign(a) with a canonical argument: leading coefficient 1 (so sign(−2x) = −sign(x)).

    An argument that is not affine by its structure (e.g. one holding another kink) is
    kept as it is: expanding it would multiply out every kink nested inside (2^depth
    terms for relu(1 − relu(1 − …))), and a non-affine sign has no closed form anyway."""
    if a.is_number:
        return sp.sign(a)
    if not looks_affine(a, syms):
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


def looks_affine(e: sp.Expr, syms: tuple) -> bool:
    """A structural test (no expansion): sums and scalings of the symbols and constants."""
    if not e.has(*syms) or e in syms:
        return True
    if e.is_Add:
        return all(looks_affine(a, syms) for a in e.args)
    if e.is_Mul:
        dep = [a for a in e.args if a.has(*syms)]
        return len(dep) == 1 and looks_affine(dep[0], syms)
    return False


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


def relu_exponent(x: sp.Expr) -> tuple[sp.Expr, list[tuple[sp.Expr, sp.Expr]]] | None:
    """x = rest + Σ c_i·relu(ℓ_i) with numbers c_i and no relu in rest (as (rest, [(c_i, ℓ_i)])), or None
    when x holds a relu some other way (or none)."""
    rest, relus = [], []
    for t in sp.Add.make_args(x):
        c, f = t.as_coeff_Mul()
        if isinstance(f, Relu) and c.is_number:
            relus.append((c, f.args[0]))
        elif t.has(Relu):
            return None
        else:
            rest.append(t)
    return (sp.Add(*rest), relus) if relus else None


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
    if isinstance(e, sp.exp) and (parts := relu_exponent(e.args[0])) is not None:
        rest, relus = parts
        out = canon(sp.exp(rest), syms, memo)
        for c, ell in relus:                         # e^{c·relu(ℓ)} = step(ℓ)·e^{cℓ} + step(−ℓ)
            ell = canon(ell, syms, memo)
            sg = _sign(ell, syms)
            out *= ((1 + sg) * sp.exp(c * ell) + (1 - sg)) / 2
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
    elif isinstance(e, (Elu, Selu)):
        alpha, scale = (args[1], 1) if isinstance(e, Elu) else (SELU_ALPHA_Q, SELU_SCALE_Q)
        sg = _sign(a, syms)
        out = scale * (a * (1 + sg) + alpha * (sp.exp(a) - 1) * (1 - sg)) / 2
    else:
        out = e.func(*args)
    memo[e] = out
    return out
