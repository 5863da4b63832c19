"""The builtin records (:data:`BUILTINS`): one :class:`~.record.Builtin` per builtin, every facet in it.

To add a builtin, add its record here (see :class:`~.record.Builtin` for the facets), then
optionally an exact expectation rule in :mod:`tensorprog.expect`; ``docs/architecture.md`` says
which tests to extend.

This module imports numpy only (scipy's special functions are imported on first use), so the
front end and ``import tensorprog`` stay light.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .record import BOUNDED, EVEN, LINEAR, ODD, Builtin, Head, Kinks


# ================================================================================ numpy functions
def _step(x):
    """1[x > 0] in x's float dtype (float64 for ints and Python scalars, which give 0-d arrays)."""
    x = np.asarray(x)
    return (x > 0).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def _erf(x):
    from scipy import special
    return special.erf(x)


def _sigmoid(x):
    from scipy import special
    return special.expit(x)


def _softplus(x):
    return np.logaddexp(0.0, x)


def _gelu(x):
    """x·Φ(x), Φ the standard normal distribution function (the exact, not the tanh, form)."""
    from scipy import special
    return x * special.ndtr(x)


def _leaky_relu(x, a):
    return np.where(x > 0, x, a * x)


def _silu(x):
    """x·sigmoid(x) (SiLU, swish)."""
    from scipy import special
    return x * special.expit(x)


def _elu(x, a):
    """x for x > 0, a·(e^x − 1) otherwise (e^x of the negative part only: no overflow)."""
    return np.where(x > 0, x, a * np.expm1(np.minimum(x, 0)))


#: SELU's constants (Klambauer et al. 2017), as torch and jax have them
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _selu(x):
    return SELU_SCALE * _elu(x, SELU_ALPHA)


def _mish(x):
    """x·tanh(softplus(x))."""
    return x * np.tanh(np.logaddexp(0.0, x))


def _softsign(x):
    return x / (1 + np.abs(x))


# ================================================================================ array-API helpers
def device(x):
    """The device of the array ``x`` (``x.device``: the standard's attribute)."""
    return getattr(x, "device", None)


def like(xp, x, a):
    """``a`` as an array like ``x`` if it is a Python number (a second argument may be one)."""
    return a if not isinstance(a, (int, float)) else xp.full(x.shape, float(a), dtype=x.dtype, device=device(x))


def pair(xp, f: Callable) -> Callable:
    """``f(x, y)`` with a Python-number operand made an array like the other one."""
    def call(x, y):
        if isinstance(x, (int, float)):
            return f(like(xp, y, x), y)
        return f(x, like(xp, x, y))
    return call


def xp_sigmoid(xp, x):
    """1/(1 + e^{−x}) with the array API alone, from e^{−|x|} (no overflow)."""
    t = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + t), t / (1 + t))


def xp_elu(xp, x, a):
    """elu(x, a) with the array API (e^x − 1 of the negative part only)."""
    return xp.where(x > 0, x, like(xp, x, a) * xp.expm1(xp.minimum(x, xp.zeros_like(x))))


# ================================================================================ facets shared
def _first(s, x, *rest) -> float:
    """The slope of a function of linear growth in its first argument with slope 1."""
    return s(x)


def _widest(s, *xs) -> float:
    return max(s(x) for x in xs)


def _leaky_slope(s, x, a) -> float:
    return max(1.0, abs(float(a))) * s(x) if a.is_number else math.inf


def _leaky_monotone(a: float) -> tuple[float, int] | str:
    if a < 0:
        return f"leaky_relu with a negative slope ({a:g}) is not monotone"
    return max(1.0, a), +1


def _increasing(lip: float) -> Callable[[], tuple[float, int]]:
    return lambda: (lip, +1)


def _elu_slope(s, x, a) -> float:
    return s(x) if a.is_number else math.inf         # |elu(x, a)| ≤ |x| + |a|


def _elu_monotone(a: float) -> tuple[float, int] | str:
    if a < 0:
        return f"elu with a negative a ({a:g}) is not monotone"
    return max(1.0, a), +1


def _elu_value(s, x, a):
    return x if x > 0 else a * (s.exp(x) - 1)


def _elu_dx(s, x, a):
    """1 for x > 0, a·e^x otherwise, written e^{−relu(−x)}: bounded, as the growth analysis sees."""
    return s.Step(x) + a * s.Step(-x) * s.exp(-s.Relu(-x))


_KINK_AT_0 = Kinks(lambda s, x: [x, s.Integer(0)])          # relu
_PAIRWISE = Kinks(lambda s, *xs: list(xs),                    # min, max: where two arguments meet
                  where=lambda *xs: [a - b for i, a in enumerate(xs) for b in xs[i + 1:]])


# ================================================================================ the records
BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("relu", 1, lambda x: np.maximum(x, 0), lambda xp, sf: lambda x: xp.maximum(x, xp.zeros_like(x)),
            Head("Relu", lambda s, x: x if x > 0 else s.Integer(0), (lambda s, x: s.Step(x),), homogeneous=1),
            "relu(x) = max(x, 0) = x·step(x).",
            growth=LINEAR, slope=_first, kinks=_KINK_AT_0, monotone=_increasing(1.0)),
    Builtin("step", 1, _step, lambda xp, sf: lambda x: xp.astype(x > 0, x.dtype),
            Head("Step", lambda s, x: s.Integer(1) if x > 0 else s.Integer(0), (lambda s, x: s.Delta(x),),
                 homogeneous=0),
            "step(x) = 1 for x > 0, else 0; the derivative of relu.",
            growth=BOUNDED, kinks=Kinks(lambda s, x: [s.Integer(0), s.Integer(1)])),
    Builtin("abs", 1, np.abs, "abs",
            Head("AbsF", lambda s, x: abs(x), (lambda s, x: s.Sign(x),), homogeneous=1),
            "abs(x) = relu(x) + relu(−x).",
            parity=EVEN, growth=LINEAR, slope=_first, kinks=Kinks(lambda s, x: [x, -x])),
    Builtin("sign", 1, np.sign, "sign",
            Head("Sign", lambda s, x: s.sign(x), (lambda s, x: 2 * s.Delta(x),), homogeneous=0),
            "sign(x) ∈ {−1, 0, 1} = step(x) − step(−x).",
            parity=ODD, growth=BOUNDED, kinks=Kinks(lambda s, x: [s.Integer(-1), s.Integer(1)])),
    Builtin("tanh", 1, np.tanh, "tanh", "tanh", "tanh(x).",
            parity=ODD, growth=BOUNDED, monotone=_increasing(1.0)),
    Builtin("erf", 1, _erf, lambda xp, sf: sf["erf"], "erf", "erf(x) = (2/√π) ∫_0^x e^{−t²} dt.",
            special="erf", parity=ODD, growth=BOUNDED, monotone=_increasing(2.0 / math.sqrt(math.pi))),
    Builtin("sigmoid", 1, _sigmoid, lambda xp, sf: sf.get("expit") or (lambda x: xp_sigmoid(xp, x)),
            Head("Sigmoid", lambda s, x: 1 / (1 + s.exp(-x)),
                 (lambda s, x: s.Sigmoid(x) * (1 - s.Sigmoid(x)),)),
            "sigmoid(x) = 1/(1 + e^{−x}).",
            growth=BOUNDED, monotone=_increasing(0.25)),
    Builtin("exp", 1, np.exp, "exp", "exp", "exp(x)."),
    Builtin("log", 1, np.log, "log", "log", "log(x), the natural logarithm."),
    Builtin("sqrt", 1, np.sqrt, "sqrt", "sqrt", "sqrt(x)."),
    Builtin("sin", 1, np.sin, "sin", "sin", "sin(x).", parity=ODD, growth=BOUNDED),
    Builtin("cos", 1, np.cos, "cos", "cos", "cos(x).", parity=EVEN, growth=BOUNDED),
    Builtin("softplus", 1, _softplus, lambda xp, sf: lambda x: xp.logaddexp(xp.zeros_like(x), x),
            Head("Softplus", lambda s, x: s.log(1 + s.exp(x)), (lambda s, x: s.Sigmoid(x),)),
            "softplus(x) = log(1 + e^x).",
            growth=LINEAR, slope=_first, monotone=_increasing(1.0)),
    Builtin("gelu", 1, _gelu, lambda xp, sf: lambda x: x * sf["ndtr"](x),
            Head("Gelu", lambda s, x: x * (1 + s.erf(x / s.sqrt(2))) / 2,
                 (lambda s, x: (1 + s.erf(x / s.sqrt(2))) / 2 + x * s.exp(-x**2 / 2) / s.sqrt(2 * s.pi),)),
            "gelu(x) = x·Φ(x) = x·(1 + erf(x/√2))/2 (the exact, not the tanh, form).",
            special="ndtr", growth=LINEAR, slope=_first),
    Builtin("leaky_relu", 2, _leaky_relu, lambda xp, sf: lambda x, a: xp.where(x > 0, x, like(xp, x, a) * x),
            Head("LeakyRelu", lambda s, x, a: x if x > 0 else a * x,
                 (lambda s, x, a: s.Step(x) + a * s.Step(-x), lambda s, x, a: -s.Relu(-x)), homogeneous=1),
            "leaky_relu(x, a) = x for x > 0, a·x otherwise = relu(x) − a·relu(−x).",
            growth=LINEAR, slope=_leaky_slope, kinks=Kinks(lambda s, x, a: [x, a * x]),
            monotone=_leaky_monotone),
    Builtin("silu", 1, _silu, lambda xp, sf: lambda x: x * xp_sigmoid(xp, x),
            Head("Silu", lambda s, x: x / (1 + s.exp(-x)),
                 (lambda s, x: s.Sigmoid(x) * (1 + x * (1 - s.Sigmoid(x))),)),
            "silu(x) = swish(x) = x·sigmoid(x).",
            growth=LINEAR, slope=_first),
    Builtin("elu", 2, _elu, lambda xp, sf: lambda x, a: xp_elu(xp, x, a),
            Head("Elu", _elu_value, (_elu_dx, lambda s, x, a: s.exp(-s.Relu(-x)) - 1)),
            "elu(x, a) = x for x > 0, a·(e^x − 1) otherwise; a = 1 if left out.",
            growth=LINEAR, slope=_elu_slope, kinks=Kinks(lambda s, x, a: [x, a * (s.exp(x) - 1)]),
            monotone=_elu_monotone, defaults=(1.0,)),
    Builtin("selu", 1, _selu, lambda xp, sf: lambda x: SELU_SCALE * xp_elu(xp, x, SELU_ALPHA),
            Head("Selu", lambda s, x: SELU_SCALE * _elu_value(s, x, SELU_ALPHA),
                 (lambda s, x: SELU_SCALE * _elu_dx(s, x, SELU_ALPHA),)),
            f"selu(x) = λ·elu(x, α), λ = {SELU_SCALE:.10f}, α = {SELU_ALPHA:.10f}.",
            growth=LINEAR, slope=lambda s, x: SELU_SCALE * s(x),
            kinks=Kinks(lambda s, x: [SELU_SCALE * x, SELU_SCALE * SELU_ALPHA * (s.exp(x) - 1)]),
            monotone=_increasing(SELU_SCALE * SELU_ALPHA)),
    Builtin("mish", 1, _mish, lambda xp, sf: lambda x: x * xp.tanh(xp.logaddexp(xp.zeros_like(x), x)),
            Head("Mish", lambda s, x: x * s.tanh(s.log(1 + s.exp(x))),
                 (lambda s, x: s.tanh(s.Softplus(x)) + x * s.Sigmoid(x) * (1 - s.tanh(s.Softplus(x))**2),)),
            "mish(x) = x·tanh(softplus(x)).",
            growth=LINEAR, slope=_first),
    Builtin("softsign", 1, _softsign, lambda xp, sf: lambda x: x / (1 + xp.abs(x)),
            Head("Softsign", lambda s, x: x / (1 + abs(x)), (lambda s, x: (1 - s.Softsign(s.AbsF(x)))**2,)),
            "softsign(x) = x/(1 + |x|); its derivative 1/(1 + |x|)² = (1 − softsign(|x|))² has a kink at 0.",
            parity=ODD, growth=BOUNDED, kinks=Kinks(lambda s, x: [x / (1 + x), x / (1 - x)]),
            monotone=_increasing(1.0)),
    Builtin("min", 2, np.minimum, lambda xp, sf: pair(xp, xp.minimum), "Min", "min(x, y).",
            growth=LINEAR, slope=_widest, kinks=_PAIRWISE),
    Builtin("max", 2, np.maximum, lambda xp, sf: pair(xp, xp.maximum), "Max", "max(x, y).",
            growth=LINEAR, slope=_widest, kinks=_PAIRWISE),
]}

#: named constants of the language
CONSTANTS: dict[str, float] = {"pi": float(np.pi), "e": float(np.e)}
