"""The sympy heads of the builtins: each builtin's infinite-width form, next to the numpy one.

The compiler writes Z^{φ(x)} = φ(Z^x) with ``HEADS[name]``, the sympy function of the builtin
``name`` of :data:`tensorprog.builtins.BUILTINS`; its derivative comes from the sympy class
(``fdiff``), so ``diff`` in a program and the Ż terms of the Master Theorem share one rule.

The non-smooth builtins are sympy ``Function`` subclasses of our own (``Relu``,
``Step``...), so the expectation engine can recognise the arc-cosine family by
its head.  ``Step' = Delta`` (the Dirac mass): E[Delta(Z)·g] is evaluated by the
expectation engine through the Gaussian density at 0.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import sympy as sp

from ..builtins import BUILTINS


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


#: builtin name -> sympy head (Z^{name(x)} = HEADS[name](Z^x))
HEADS: dict[str, Callable] = {
    "relu": Relu, "step": Step, "abs": AbsF, "sign": Sign, "tanh": sp.tanh, "erf": sp.erf,
    "sigmoid": Sigmoid, "exp": sp.exp, "log": sp.log, "sqrt": sp.sqrt, "sin": sp.sin, "cos": sp.cos,
    "softplus": Softplus, "gelu": Gelu, "leaky_relu": LeakyRelu, "min": sp.Min, "max": sp.Max,
}
assert HEADS.keys() == BUILTINS.keys(), "every builtin needs a sympy head"

NON_SMOOTH_HEADS = (Relu, Step, Sign, AbsF, LeakyRelu, Delta, sp.Min, sp.Max)


def _delta(x):
    raise ArithmeticError("a Dirac mass (derivative of step/sign) cannot be evaluated pointwise")


#: sympy head -> numpy function, for evaluating Z-expressions numerically.
SYMPY_TO_NUMPY: dict[object, Callable] = {HEADS[name]: b.numpy for name, b in BUILTINS.items()}
SYMPY_TO_NUMPY.update({sp.Abs: np.abs, sp.sign: np.sign, Delta: _delta,
                       sp.Heaviside: lambda x, *h0: BUILTINS["step"].numpy(np.asarray(x, float))})
