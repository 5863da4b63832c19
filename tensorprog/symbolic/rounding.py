"""Bounds on the rounding of a sympy expression as the numeric tape (:mod:`.tape`) evaluates it in float64.

* :func:`rounding`: the arithmetic of sums, products and powers over exact leaves (first order in
  the unit roundoff u = ε/2: each operation rounds to nearest, at most u relative to its result);
* :func:`function_rounding`: a closed form's functions (Φ₂, exp, erf, erfc, asin) — each one's own
  error (:func:`function_error`) and its rounded arguments' — and the arithmetic around them, as an
  expression of the same symbols; :func:`value_and_error` evaluates both on arrays.

They are shared by the expectation engine (a closed form evaluated at one covariance or a batch of
them: :mod:`..expect.engine`, :mod:`..expect.batch`) and the replay of a batch compile
(:mod:`..limit.replay`), so that each charges a form with Φ₂ the same error.
"""
from __future__ import annotations

import math
from typing import Mapping

import numpy as np
import sympy as sp

from .bivariate import Phi2, ScaledErfc, ScaledPhi2, ScaledPhi2Bound, phi2_error
from .evaluate import evaluate

EPS = float(np.finfo(float).eps)
#: the rounding of one operation of a polynomial of the recurrence, relative to its magnitude (module doc):
#: the unit roundoff u = ε/2 (IEEE round to nearest: |fl(x ∘ y) − x ∘ y| ≤ u·|x ∘ y|)
OP_ROUNDING = EPS / 2
#: OP_ROUNDING as the sympy number the charges are written with
OP_UNIT = sp.Float(OP_ROUNDING)


class NoRoundingRule(ValueError):
    """A function of a closed form whose floating-point error :func:`function_rounding` cannot bound."""


def rounding(expr: sp.Expr, memo: dict | None = None) -> sp.Expr:
    """A bound on the rounding of evaluating a sum/product expression from exact leaves (the leaves'
    own errors are counted apart), each rounding to nearest at most u = OP_ROUNDING relative to its
    result, first order in u: a sum of n terms adds (n − 1)·u·Σ|t|⁺ to its terms' roundings (in any
    order of summation: each partial sum is at most Σ|t|⁺), a product of k factors (k − 1)·u·|P|⁺
    plus each factor's rounding times the others' magnitude, a power x^m :func:`power_roundings`·u·|P|⁺
    plus |m|·|x|^{m−1} times x's rounding; a number that float64 does not hold (a rational whose
    denominator is not a power of 2) is rounded once where it is used.  ``memo``: the roundings and
    magnitudes |·|⁺ already made, by expression (a sum's terms meet its magnitude's again)."""
    memo = {} if memo is None else memo
    key = ("rounding", expr)
    if key not in memo:
        memo[key] = expression_rounding(expr, memo)
    return memo[key]


def expression_rounding(expr: sp.Expr, memo: dict) -> sp.Expr:
    """:func:`rounding` of one node, its parts' through ``memo``."""
    u = OP_UNIT
    if expr.is_Add:
        parts = [rounding(a, memo) for a in expr.args]
        parts.append(scaled(u * (len(expr.args) - 1), positive(expr, memo)))
        return sp.Add(*[p for p in parts if p != 0])
    if expr.is_Mul:
        count = len(expr.args) - 1 + sum(1 for a in expr.args if inexact(a))
        parts = [scaled(u * count, positive(expr, memo))]
        for i, a in enumerate(expr.args):
            r = rounding(a, memo)
            if r != 0:
                parts.append(r * positive(sp.Mul(*(expr.args[:i] + expr.args[i + 1:])), memo))
        return sp.Add(*parts)
    if expr.is_Pow and expr.exp.is_Number and expr.exp != 1:
        base, m = expr.base, expr.exp
        parts = [u * power_roundings(m) * positive(expr, memo)]
        r = rounding(base, memo)
        if r != 0:
            parts.append(abs(m) * positive(base, memo) ** (m - 1) * r)
        return sp.Add(*parts)
    if inexact(expr):
        return u * abs(expr)
    return sp.Integer(0)


def power_roundings(m: sp.Number) -> int:
    """The roundings of x^m as the tape computes it (:func:`..symbolic.tape.exponent_function`),
    relative to the result: x·x, 1/x and √x one each (correctly rounded), 1/√x two; another
    exponent numpy's power (libm's pow: within one ulp, ≤ 2u), and 1/x^k one more."""
    if m in (2, -1, sp.Rational(1, 2)):
        return 1
    if m == sp.Rational(-1, 2):
        return 2
    return 2 if m > 0 else 3


def inexact(n: sp.Expr) -> bool:
    """A rational number that float64 does not hold exactly (its denominator not a power of 2)."""
    if not (n.is_Rational and not n.is_Integer):
        return False
    q = int(n.q)
    return q & (q - 1) != 0


def positive(expr: sp.Expr, memo: dict | None = None) -> sp.Expr:
    """|P|⁺: a sum or product with each leaf replaced by its absolute value (``memo``: as :func:`rounding`'s)."""
    if expr.is_Add or expr.is_Mul:
        memo = {} if memo is None else memo
        key = ("positive", expr)
        if key not in memo:
            args = [positive(a, memo) for a in expr.args]
            two = expr.is_Mul and len(args) == 2 and args[0].is_Float      # |k|·|x|: k a Float
            memo[key] = scaled(args[0], args[1]) if two else expr.func(*args)
        return memo[key]
    if expr.is_Number:
        return abs(expr)
    return sp.Abs(expr, evaluate=False)


def scaled(c: sp.Expr, x: sp.Expr) -> sp.Expr:
    """c·x as sympy's evaluated product writes it, for a Float c ≠ 0 and x an evaluated expression:
    sympy's Mul would make its coefficient a new Float (1·c, then times x's coefficient) and ask
    whether it is zero — the assumptions of a new Float, about 0.08 ms, the larger part of a
    rounding charge.  Where the product is known without it, it is written unevaluated with the
    same arguments: x a product k·f₁⋯f_m or a single factor f₁ (k a number, or none), each f_i
    commutative and not a number nor a power of one (Mul's flatten leaves them as they are, in
    the order x has them), and not a lone sum (which c·(a + b) would distribute) — then c·x is
    Mul(c·k, f₁, …, f_m), with c·k the Float product flatten computes.  Else sympy's c·x."""
    if not (isinstance(c, sp.Float) and isinstance(x, sp.Expr)):
        return c * x
    factors = x.args if x.is_Mul else (x,)
    coeff, rest = (c * factors[0], factors[1:]) if factors[0].is_Number else (c, factors)
    plain = rest and not (len(rest) == 1 and rest[0].is_Add) and all(
        not f.is_number and not (f.is_Pow and f.base.is_Number) and f.is_commutative for f in rest)
    if not (plain and coeff.is_Float and math.isfinite(float(coeff)) and float(coeff) != 0.0):
        return c * x
    return sp.Mul(coeff, *rest, evaluate=False)


#: the relative error of an argument of a function of a closed form, computed from the entries in a few
#: operations, relative to its magnitude |x|⁺ (:func:`positive`): 8 units of roundoff
ARGUMENT_ROUNDING = 8 * EPS
#: the relative error of scipy's exp, erf and erfc, and of numpy's arcsin, at exact arguments (≤ 2 ulp)
FUNCTION_ROUNDING = 2 * EPS


def function_error(f: sp.Expr) -> sp.Expr | None:
    """A bound on the tape's error of one function f of a closed form at its (rounded) arguments:
    FUNCTION_ROUNDING·|f| (exp, erf, erfc, asin), :func:`..symbolic.bivariate.phi2_error` for Φ₂ (at most
    8ε, and far less where its h and k are far below 0); None for a function it does not know."""
    if isinstance(f, ScaledPhi2):
        return ScaledPhi2Bound(*f.args, f)
    if isinstance(f, ScaledErfc):
        m, x = f.args
        return sp.Float(EPS) * (4 + sp.Abs(m, evaluate=False) + 2 * x**2) * sp.Abs(f, evaluate=False)
    if isinstance(f, Phi2):
        return phi2_error(f.args[0], f.args[1])
    if not isinstance(f, (sp.exp, sp.erf, sp.erfc, sp.asin)):
        return None
    return sp.Float(FUNCTION_ROUNDING) * sp.Abs(f, evaluate=False)


def function_rounding(F: sp.Expr) -> sp.Expr:
    """A bound on the error of a closed form F with Φ₂ as the tape evaluates it, beyond its entries'
    errors (first order): Σ_f |∂F/∂f|·:func:`function_error`(f) over its functions f (Φ₂, exp, erfc,
    erf, asin), plus Σ_x |∂F/∂x|·:func:`argument_rounding` (x) over the distinct arguments x of those
    functions (each argument rounded once, wherever it is used: ∂F/∂x is the total derivative, in
    which the steep ∂Φ₂/∂ρ near ρ = ±1 of one term cancels against the others'), plus
    :func:`rounding` of the sums and products around them.  Its terms e^m·Φ₂ and e^m·erfc are
    large where a variance is (m = (a + b + 2c)/2): each carries its own error here, where
    ROUNDING·(|E| + max Cᵢᵢ) would not.  A function of constants is charged as any other (its value
    folded on the tape in float64), and so is an argument that is a number float64 does not hold
    (:func:`held`).  A function it does not know raises :class:`NoRoundingRule`."""
    bound, names = lifted_rounding(F)
    return bound.xreplace(names)


def lifted_rounding(F: sp.Expr) -> tuple[sp.Expr, dict[sp.Dummy, sp.Expr]]:
    """:func:`function_rounding` (F) as (B, names): B over a symbol for each distinct argument x of F's
    functions, names {symbol: x} — B with names substituted is function_rounding (F).  Evaluated with
    each symbol bound to its argument's value (:func:`value_and_error`), sympy never rebuilds the
    functions at those arguments (at a number, its radicals: sympy factors their integers)."""
    atoms = sorted(F.atoms(sp.Function), key=sp.default_sort_key)
    args = list(dict.fromkeys(x for f in atoms for x in f.args if not held(x)))
    names = {x: sp.Dummy(f"x{i}", real=True) for i, x in enumerate(args)}
    lifted = {f: f.func(*[names.get(x, x) for x in f.args]) for f in atoms}
    H = F.xreplace(lifted)                                  # F over its functions' arguments as symbols
    stand = {g: sp.Dummy(f"f{i}") for i, g in enumerate(lifted.values())}
    G = H.xreplace(stand)                                   # ... and over the functions' values
    if G.atoms(sp.Function):
        raise NoRoundingRule(f"a function inside another's argument in {F}")
    back = {d: g for g, d in stand.items()}
    terms = [rounding(G).xreplace(back)]
    for g, d in stand.items():
        err = function_error(g)
        if err is None:
            raise NoRoundingRule(f"no error rule for {g.func} in a closed form with Φ₂")
        terms.append(sp.Abs(sp.diff(G, d).xreplace(back), evaluate=False) * err)
    memo: dict = {}
    for x, d in names.items():
        slope = sp.diff(H, d)
        if slope != 0:
            terms.append(sp.Abs(slope, evaluate=False) * argument_rounding(x, memo))
    return sp.Add(*terms), {d: x for x, d in names.items()}


def argument_rounding(x: sp.Expr, memo: dict | None = None) -> sp.Expr:
    """A bound on the rounding of an argument x of a closed form's function as the tape computes it from
    exact entries: :func:`rounding` (x) (its operations, each u relative to its result) plus u·|x|⁺ (a
    leaf that float64 does not hold, such as an integer beyond 2⁵³) — a few units u where
    ARGUMENT_ROUNDING·|x|⁺ = 16u stood before."""
    return rounding(x, memo) + OP_UNIT * positive(x, memo)


def held(x: sp.Expr) -> bool:
    """x is a number that float64 holds exactly: an integer or a dyadic rational below 2⁵³ in its
    numerator (a Float likewise, by its exact binary value)."""
    if x.is_Float:
        x = sp.Rational(x)
    if not x.is_Rational:
        return False
    return not inexact(x) and abs(int(x.p)) < 2**53


def value_and_error(F: sp.Expr, env: Mapping[sp.Symbol, np.ndarray],
                    lifted: tuple[sp.Expr, dict] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """F evaluated on the tape at ``env`` (arrays, or {} for a number), and its float64 value's error
    there: :func:`lifted_rounding` (F) (or ``lifted``, made by it; NoRoundingRule where there is none)
    with each argument's symbol bound to the argument's value."""
    bound, names = lifted_rounding(F) if lifted is None else lifted
    at = dict(env)
    at.update({d: evaluate(x, env) for d, x in names.items()})
    value, error = evaluate(F, env), evaluate(bound, at)
    return np.asarray(value, dtype=float), np.abs(np.asarray(error, dtype=float))
