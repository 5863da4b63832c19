"""The nonlinearity registry: each builtin's finite-width function next to its symbolic form.

Every entry gives
  * ``numpy``: the coordinatewise function used by the executor at width n;
  * ``sympy``: the function used by the compiler in Z-expressions (Z^{φ(x)} = φ(Z^x));
and its derivative comes from the sympy class (``fdiff``), so ``diff`` in a program
and the Ż terms of the Master Theorem share one rule.

The non-smooth builtins are sympy ``Function`` subclasses of our own (``Relu``,
``Step``...), so the expectation engine can recognise the arc-cosine family by
its head.  ``Step' = Delta`` (the Dirac mass): E[Delta(Z)·g] is evaluated by the
expectation engine through the Gaussian density at 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy as sp
from scipy import special as sps


class Delta(sp.Function):
    """The Dirac mass at 0, δ(x) = step'(x); only ever appears inside E[·] (δ(a) = 0 for a number a ≠ 0)."""
    nargs = 1

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable and x != 0:
            return sp.Integer(0)


def positive_factor(x: sp.Expr) -> tuple[sp.Expr, sp.Expr] | None:
    """(p, y) with x = p·y and p the product of x's symbolic factors known to be > 0 (such as the
    row scale |u| of an mvt matrix), so that positively homogeneous heads can pull p out; else None."""
    if not isinstance(x, sp.Mul):
        return None
    p = [f for f in x.args if f.is_positive and not f.is_number]
    if not p:
        return None
    return sp.Mul(*p), sp.Mul(*[f for f in x.args if f not in p])


class Step(sp.Function):
    """step(x) = 1 for x > 0, else 0; the derivative of relu."""
    nargs = 1

    def fdiff(self, argindex=1):
        return Delta(self.args[0])

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return sp.Integer(1) if x > 0 else sp.Integer(0)
        if pf := positive_factor(x):         # step(p·y) = step(y) for p > 0
            return cls(pf[1])


class Relu(sp.Function):
    """relu(x) = max(x, 0) = x·step(x)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return Step(self.args[0])

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return x if x > 0 else sp.Integer(0)
        if pf := positive_factor(x):         # relu(p·y) = p·relu(y) for p > 0
            return pf[0] * cls(pf[1])


class Sign(sp.Function):
    """sign(x) ∈ {−1, 0, 1} = step(x) − step(−x)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return 2 * Delta(self.args[0])

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return sp.sign(x)
        if pf := positive_factor(x):
            return cls(pf[1])


class AbsF(sp.Function):
    """abs(x) = relu(x) + relu(−x)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return Sign(self.args[0])

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return abs(x)
        if pf := positive_factor(x):
            return pf[0] * cls(pf[1])


class LeakyRelu(sp.Function):
    """leaky_relu(x, a) = x for x > 0, a·x otherwise = relu(x) − a·relu(−x)."""
    nargs = 2

    def fdiff(self, argindex=1):
        x, a = self.args
        if argindex == 1:
            return Step(x) + a * Step(-x)
        return -Relu(-x)

    @classmethod
    def eval(cls, x, a):
        if x.is_number and x.is_comparable and a.is_number and a.is_comparable:
            return x if x > 0 else a * x
        if pf := positive_factor(x):
            return pf[0] * cls(pf[1], a)


class Sigmoid(sp.Function):
    """sigmoid(x) = 1/(1 + e^{−x})."""
    nargs = 1

    def fdiff(self, argindex=1):
        s = Sigmoid(self.args[0])
        return s * (1 - s)

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return 1 / (1 + sp.exp(-x))


class Softplus(sp.Function):
    """softplus(x) = log(1 + e^x)."""
    nargs = 1

    def fdiff(self, argindex=1):
        return Sigmoid(self.args[0])

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return sp.log(1 + sp.exp(x))


class Gelu(sp.Function):
    """gelu(x) = x·Φ(x) = x·(1 + erf(x/√2))/2 (the exact, not the tanh, form)."""
    nargs = 1

    def fdiff(self, argindex=1):
        x = self.args[0]
        return (1 + sp.erf(x / sp.sqrt(2))) / 2 + x * sp.exp(-x**2 / 2) / sp.sqrt(2 * sp.pi)

    @classmethod
    def eval(cls, x):
        if x.is_number and x.is_comparable:
            return x * (1 + sp.erf(x / sp.sqrt(2))) / 2


def _np_step(x):
    """1[x > 0] in x's float dtype (float64 for ints and Python scalars, which give 0-d arrays)."""
    x = np.asarray(x)
    return (x > 0).astype(x.dtype if x.dtype.kind == "f" else np.float64)


def _np_sign(x):
    return np.sign(x)


def _np_sigmoid(x):
    return sps.expit(x)


def _np_softplus(x):
    return np.logaddexp(0.0, x)


def _np_gelu(x):
    return x * sps.ndtr(x)


def _np_leaky(x, a):
    return np.where(x > 0, x, a * x)


@dataclass(frozen=True)
class Builtin:
    """One builtin nonlinearity: its arity, numpy function and sympy head."""
    name: str
    arity: int
    numpy: Callable
    sympy: Callable
    smooth: bool      # polynomially smooth (the non-Gaussian Master Theorem applies)


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("relu", 1, lambda x: np.maximum(x, 0), Relu, False),
    Builtin("step", 1, _np_step, Step, False),
    Builtin("abs", 1, np.abs, AbsF, False),
    Builtin("sign", 1, _np_sign, Sign, False),
    Builtin("tanh", 1, np.tanh, sp.tanh, True),
    Builtin("erf", 1, sps.erf, sp.erf, True),
    Builtin("sigmoid", 1, _np_sigmoid, Sigmoid, True),
    Builtin("exp", 1, np.exp, sp.exp, True),
    Builtin("log", 1, np.log, sp.log, True),
    Builtin("sqrt", 1, np.sqrt, sp.sqrt, True),
    Builtin("sin", 1, np.sin, sp.sin, True),
    Builtin("cos", 1, np.cos, sp.cos, True),
    Builtin("softplus", 1, _np_softplus, Softplus, True),
    Builtin("gelu", 1, _np_gelu, Gelu, True),
    Builtin("leaky_relu", 2, _np_leaky, LeakyRelu, False),
    Builtin("min", 2, np.minimum, sp.Min, False),
    Builtin("max", 2, np.maximum, sp.Max, False),
]}

NON_SMOOTH_HEADS = (Relu, Step, Sign, AbsF, LeakyRelu, Delta, sp.Min, sp.Max)

CONSTANTS: dict[str, float] = {"pi": float(np.pi), "e": float(np.e)}


def _np_delta(x):
    raise ArithmeticError("a Dirac mass (derivative of step/sign) cannot be evaluated pointwise")


#: sympy head -> numpy function, for evaluating Z-expressions numerically.
SYMPY_TO_NUMPY: dict[object, Callable] = {b.sympy: b.numpy for b in BUILTINS.values()}
SYMPY_TO_NUMPY.update({sp.Abs: np.abs, sp.sign: np.sign, Delta: _np_delta,
                       sp.Heaviside: lambda x, *h0: _np_step(np.asarray(x, float))})
