"""The sympy heads of the builtins: each builtin record's infinite-width form, made sympy here.

The compiler writes Z^{φ(x)} = φ(Z^x) with ``HEADS[name]``, the sympy function of the builtin
``name`` of :data:`tensorprog.builtins.BUILTINS`: a sympy function (``tanh``), or a
``sympy.Function`` subclass made from the record's :class:`~tensorprog.builtins.Head` spec
(:func:`make_head`), whose derivative (``fdiff``) is the one ``diff`` and the Ż terms of the
Master Theorem use.

The non-smooth builtins are such subclasses (``Relu``, ``Step``...), so the expectation engine can
recognise the arc-cosine family by its head.  ``Step' = Delta`` (the Dirac mass): E[Delta(Z)·g]
is evaluated by the expectation engine through the Gaussian density at 0.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import sympy as sp
import sympy.assumptions.wrapper  # noqa: F401  (imported by sympy on its first Add and first is_eq: with
import sympy.tensor.tensor  # noqa: F401       sympy, not in a compile's first steps — ~0.04 s CPU)
from sympy.core.function import ArgumentIndexError

from ..builtins import BUILTINS, Builtin, Head


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


#: our own heads by class name (Delta and one per :class:`Head` spec), filled below
CLASSES: dict[str, type] = {"Delta": Delta}


class Names:
    """The namespace the records' sympy facets are written in: our heads by class name, then sympy."""

    def __getattr__(self, name: str):
        got = CLASSES.get(name)
        return got if got is not None else getattr(sp, name)


NAMES = Names()


def make_head(spec: Head, b: Builtin) -> type:
    """The ``sympy.Function`` subclass of a head spec: ``eval`` gives the value at numeric arguments
    and pulls positive factors out of a homogeneous head; ``fdiff`` the spec's derivatives."""

    def fdiff(self, argindex=1):
        if not 1 <= argindex <= len(spec.derivative):
            raise ArgumentIndexError(self, argindex)
        return spec.derivative[argindex - 1](NAMES, *self.args)

    def evaluate(cls, *args):
        if all(a.is_number and a.is_comparable for a in args):
            return spec.value(NAMES, *args)
        if spec.homogeneous is not None and (pf := positive_factor(args[0])):
            inner = cls(pf[1], *args[1:])
            return inner if spec.homogeneous == 0 else pf[0] * inner

    return type(spec.cls, (sp.Function,), {"nargs": b.arity, "fdiff": fdiff, "eval": classmethod(evaluate),
                                            "_eval_is_extended_real": real_at_real,
                                            "_eval_is_finite": finite_at_finite,
                                            "__doc__": b.doc, "__module__": __name__})


def real_at_real(self) -> bool | None:
    """A builtin maps reals to reals: sympy's is_extended_real of a head at real arguments (as sympy's
    own tanh says), so that its assumptions resolve at once instead of by a search over every fact
    (what each new layer's product of heads asked, ~1 ms apiece)."""
    if all(a.is_extended_real for a in self.args):
        return True
    return None


def finite_at_finite(self) -> bool | None:
    """A builtin is finite at finite real arguments (no poles): sympy's is_finite, likewise."""
    if all(a.is_extended_real and a.is_finite for a in self.args):
        return True
    return None


def _head(b: Builtin):
    """The builtin's sympy head; one of our own is also a module attribute under its class name
    (where ``__module__`` says it is), so that pickle finds it by reference in a worker process."""
    if isinstance(b.head, str):
        return getattr(sp, b.head)
    CLASSES[b.head.cls] = globals()[b.head.cls] = make_head(b.head, b)
    return CLASSES[b.head.cls]


#: builtin name -> sympy head (Z^{name(x)} = HEADS[name](Z^x))
HEADS: dict[str, Callable] = {name: _head(b) for name, b in BUILTINS.items()}
#: sympy head -> its builtin record
RECORDS: dict[object, Builtin] = {HEADS[name]: b for name, b in BUILTINS.items()}


def record_of(expr: sp.Basic) -> Builtin | None:
    """The builtin record of an expression's head (None: not a builtin's head)."""
    return RECORDS.get(expr.func)


def heads_where(test: Callable[[Builtin], bool]) -> tuple:
    """The heads of the builtins whose records pass ``test`` (for ``isinstance`` and ``atoms``)."""
    return tuple(HEADS[name] for name, b in BUILTINS.items() if test(b))


# our heads by name (module attributes already, by ``_head``; named here for readers and linters),
# as the exact rules of the expectation engine import them
Relu, Step, Sign, AbsF, LeakyRelu = (CLASSES[c] for c in ("Relu", "Step", "Sign", "AbsF", "LeakyRelu"))
Sigmoid, Softplus, Gelu = (CLASSES[c] for c in ("Sigmoid", "Softplus", "Gelu"))
Silu, Elu, Selu, Mish, Softsign = (CLASSES[c] for c in ("Silu", "Elu", "Selu", "Mish", "Softsign"))

#: the heads that are not smooth (kinks or jumps), as the non-Gaussian Master Theorem needs
NON_SMOOTH_HEADS = heads_where(lambda b: b.kinks is not None) + (Delta,)


def _delta(x):
    raise ArithmeticError("a Dirac mass (derivative of step/sign) cannot be evaluated pointwise")


#: sympy head -> numpy function, for evaluating Z-expressions numerically.
SYMPY_TO_NUMPY: dict[object, Callable] = {HEADS[name]: b.numpy for name, b in BUILTINS.items()}
SYMPY_TO_NUMPY.update({sp.Abs: np.abs, sp.sign: np.sign, Delta: _delta,
                       sp.Heaviside: lambda x, *h0: BUILTINS["step"].numpy(np.asarray(x, float))})
