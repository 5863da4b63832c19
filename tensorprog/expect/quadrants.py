"""Two offset kinks under an exponential tilt, in the basis of their quadrants (ELU, SELU).

:meth:`.exact._Solver.base` writes E[sign(X₁ + h₁)·sign(X₂ + h₂)] (X centred Gaussian, Var X_k = κ_k/2) as the
marker :class:`SignPair` (x₁, x₂, ρ), x_k = h_k/√κ_k, ρ = Corr(X₁, X₂), and E[sign(X₁ + h₁)] as erf(x₁).  A tilt
(E[e^{b·z} g(z)] = e^m·E[g(z + Σb)]) multiplies them by e^m, which reaches e^{2a} for a variance a, while
the expectation of the whole integrand stays moderate: the terms e^m·1, e^m·erf(x_k) and e^m·SignPair of the
same m, from different terms of the integrand, cancel.  :func:`quadrant_form` sums them per m before any is
evaluated: with s_k = sign(X_k + h_k) and the quadrant events Q_q = {q₁s₁ > 0, q₂s₂ > 0},

    α + β₁s₁ + β₂s₂ + γs₁s₂ = Σ_q w_q·1{Q_q},   w_q = α + β₁q₁ + β₂q₂ + γq₁q₂,
    P(Q_q) = Φ₂(q₁√2·x₁, q₂√2·x₂; q₁q₂ρ),

and likewise α + βs = Σ_± (α ± β)·1{±s > 0}, P(±s > 0) = Φ(±√2·x) = erfc(∓x)/2.  Each e^m·P(Q_q) is one
:class:`..symbolic.bivariate.ScaledPhi2` (e^m·erfc one :class:`..symbolic.bivariate.ScaledErfc`): a
probability times e^m, evaluated to a relative accuracy however small the probability, so the form is a sum
of the quadrants' true contributions, not a difference of e^m-size terms (the tilted quadrant of ELU,
E[e^{u+v}·1{u<0, v<0}] ≤ 1, came out as e^{100}·(Φ(h) − Φ₂(h, k; ρ)) ≈ 3e22 − 3e22 at a = 1000, c = −700).

Terms that do not fit (no exponential, or several pairs of kinks under one m) keep :func:`sign_pair_value`:
the quadrant whose offsets' signs make it the small one (:func:`orientation`), e^m·erfc and e^m·Φ₂ scaled.
"""
from __future__ import annotations

import sympy as sp

from ..symbolic.bivariate import Phi2, ScaledErfc, ScaledPhi2
from .linalg import tidy


class SignPair(sp.Function):
    """E[sign(X₁ + h₁)·sign(X₂ + h₂)] as (x₁, x₂, ρ), x_k = h_k/√κ_k, κ_k = 2 Var X_k, ρ = Corr(X₁, X₂): a marker
    of the closed forms, replaced by :func:`quadrant_form` before a form leaves the engine's rules."""
    nargs = 3


def orientation(h: sp.Expr) -> int:
    """−1 where the offset h is known to be negative, else 1: the sign e with e·h = |h| (:func:`sign_pair_value`)."""
    if h.is_negative:
        return -1
    if h.is_number and h.is_real is not False and not h.has(sp.Symbol):
        return -1 if sp.sign(h) < 0 else 1
    return 1


def sign_pair_value(x1: sp.Expr, x2: sp.Expr, rho: sp.Expr) -> sp.Expr:
    """SignPair (x₁, x₂, ρ) through Φ₂: with e_k = ±1 the sign of x_k (:func:`orientation`; 1 where it is not
    known), sign(X_k + h_k) = e_k(1 − 2·1{e_kX_k < −|h_k|}) and P(e_kX_k < −|h_k|) = Φ(−√2|x_k|) = erfc(|x_k|)/2:

        E[s₁s₂] = e₁e₂(4Φ₂(−√2|x₁|, −√2|x₂|; e₁e₂ρ) − erfc(|x₁|) − erfc(|x₂|) + 1)

    (x₁ = x₂ = 0 is the arcsine kernel), the small lower orthant and erfc where the offsets are large."""
    e1, e2 = orientation(x1), orientation(x2)
    r2 = sp.sqrt(2)
    return e1 * e2 * (4 * Phi2(-e1 * r2 * x1, -e2 * r2 * x2, e1 * e2 * rho) - sp.erfc(e1 * x1) - sp.erfc(e2 * x2) + 1)


def plain_pair_value(x1: sp.Expr, x2: sp.Expr, rho: sp.Expr) -> sp.Expr:
    """SignPair (x₁, x₂, ρ) = 4Φ₂(−√2x₁, −√2x₂; ρ) − erfc(x₁) − erfc(x₂) + 1 (the lower orthant whatever the
    offsets' signs: the form of the closed forms without a tilt, as before :func:`quadrant_form`)."""
    r2 = sp.sqrt(2)
    return 4 * Phi2(-r2 * x1, -r2 * x2, rho) - sp.erfc(x1) - sp.erfc(x2) + 1


def scaled(term: sp.Expr) -> sp.Expr:
    """A term c·e^m·Φ₂(h, k; ρ) or c·e^m·erfc(x) as c·ScaledPhi2(m, h, k, ρ) or c·ScaledErfc(m, x) (evaluated as
    exp(m + log Φ₂), erfcx(x)·e^{m − x²}: neither e^m overflows nor Φ₂ or erfc underflows); others as they are."""
    factors = sp.Mul.make_args(term)
    exps = [f for f in factors if isinstance(f, sp.exp)]
    heads = [f for f in factors if type(f) in (Phi2, sp.erfc)]
    if not exps or len(heads) != 1:
        return term
    m = sp.Add(*[f.args[0] for f in exps])
    f = heads[0]
    rest = sp.Mul(*[g for g in factors if g not in exps and g is not f])
    return rest * (ScaledPhi2(m, *f.args) if isinstance(f, Phi2) else ScaledErfc(m, f.args[0]))


def fallback(term: sp.Expr) -> sp.Expr:
    """One term outside the quadrant basis: SignPair through :func:`sign_pair_value`, erf(x) under e^m as
    e(1 − erfc(e·x)) (e = :func:`orientation` (x)), each e^m·Φ₂ and e^m·erfc scaled."""
    if not term.has(sp.exp):
        return term.replace(SignPair, sign_pair_value)
    term = term.replace(SignPair, sign_pair_value).replace(
        sp.erf, lambda x: orientation(x) * (1 - sp.erfc(orientation(x) * x)))
    return sp.Add(*[scaled(t) for t in sp.Add.make_args(sp.expand_mul(term))])


def quadrant_form(F: sp.Expr) -> sp.Expr:
    """F with its terms e^m·{1, erf(x_k), SignPair} summed per m in the basis of the quadrants (module doc)."""
    if not F.has(SignPair, sp.erf) or not F.has(sp.exp):
        return F.replace(SignPair, sign_pair_value)
    groups: dict[sp.Expr, list[tuple[sp.Expr, sp.Expr | None]]] = {}
    out = []
    for t in sp.Add.make_args(sp.expand_mul(F)):
        factors = sp.Mul.make_args(t)
        exps = [f for f in factors if isinstance(f, sp.exp)]
        kinks = [f for f in factors if isinstance(f, (SignPair, sp.erf))]
        rest = sp.Mul(*[f for f in factors if f not in exps and f not in kinks])
        if not exps or len(kinks) > 1 or rest.has(SignPair, sp.erf, sp.exp):
            out.append(fallback(t))
            continue
        m = tidy(sp.Add(*[f.args[0] for f in exps]))
        groups.setdefault(m, []).append((rest, kinks[0] if kinks else None))
    for m, items in groups.items():
        out.append(quadrants(m, items))
    return sp.Add(*out)


def quadrants(m: sp.Expr, items: list[tuple[sp.Expr, sp.Expr | None]]) -> sp.Expr:
    """Σ coefficient·e^m·kink (kink 1, erf(x) or SignPair) of one m, in the quadrant basis where its kinks are
    one pair and its erf's arguments among the pair's (or one erf and no pair), else term by term."""
    alpha = sp.Add(*[c for c, k in items if k is None])
    erfs: dict[sp.Expr, sp.Expr] = {}
    pairs: dict[tuple, sp.Expr] = {}
    for c, k in items:
        if isinstance(k, sp.erf):
            erfs[k.args[0]] = erfs.get(k.args[0], 0) + c
        elif isinstance(k, SignPair):
            pairs[k.args] = pairs.get(k.args, 0) + c
    r2 = sp.sqrt(2)
    if len(pairs) == 1:
        (x1, x2, rho), gamma = next(iter(pairs.items()))
        # erf(x) of a pair's kink, as the canonical sign wrote it: erf(±x_k) = ±E s_k (erf is odd)
        slopes = {x1: (1, 0), -x1: (-1, 0), x2: (0, 1), -x2: (0, -1)}
        if x1 == x2 or x1 == -x2 or not set(erfs) <= set(slopes):
            return sp.Add(*[fallback(c * sp.exp(m) * (k if k is not None else 1)) for c, k in items])
        b1 = sp.Add(*[c * slopes[x][0] for x, c in erfs.items()])
        b2 = sp.Add(*[c * slopes[x][1] for x, c in erfs.items()])
        out = []
        for q1 in (1, -1):
            for q2 in (1, -1):
                w = tidy(alpha + b1 * q1 + b2 * q2 + gamma * q1 * q2)
                if w != 0:
                    out.append(w * ScaledPhi2(m, q1 * r2 * x1, q2 * r2 * x2, q1 * q2 * rho))
        return sp.Add(*out)
    if not pairs and len(erfs) == 1:
        (x, beta), = erfs.items()
        return sp.Add(*[tidy(alpha + s * beta) * ScaledErfc(m, -s * x) / 2 for s in (1, -1)
                        if tidy(alpha + s * beta) != 0])
    return sp.Add(*[fallback(c * sp.exp(m) * (k if k is not None else 1)) for c, k in items])
