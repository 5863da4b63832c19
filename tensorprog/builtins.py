"""The builtin table shared by both back ends: each builtin's name, arity and finite-width function.

The executor applies ``BUILTINS[name].numpy`` coordinatewise at width n; the compiler reads
the same name through its sympy head (:data:`tensorprog.symbolic.heads.HEADS`), whose
derivative (``fdiff``) is the one ``diff`` and the Ż terms of the Master Theorem use.  A test
checks each numpy function against its head at sample points (``tests/test_numeric.py``).

To add a builtin: an entry here, a head in :mod:`tensorprog.symbolic.heads` (a sympy function,
or a ``sympy.Function`` subclass with ``fdiff`` and ``eval``), and, if it has a closed-form
Gaussian expectation, a rule in the expectation engine.

This module imports numpy only (scipy's special functions are imported on first use), so the
front end and ``import tensorprog`` stay light.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np


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


@dataclass(frozen=True)
class Builtin:
    """One builtin nonlinearity: its arity and numpy function.  (Whether it is smooth, as the
    non-Gaussian Master Theorem needs, is its sympy head's: ``NON_SMOOTH_HEADS``.)"""
    name: str
    arity: int
    numpy: Callable


BUILTINS: dict[str, Builtin] = {b.name: b for b in [
    Builtin("relu", 1, lambda x: np.maximum(x, 0)),
    Builtin("step", 1, _step),
    Builtin("abs", 1, np.abs),
    Builtin("sign", 1, np.sign),
    Builtin("tanh", 1, np.tanh),
    Builtin("erf", 1, _erf),
    Builtin("sigmoid", 1, _sigmoid),
    Builtin("exp", 1, np.exp),
    Builtin("log", 1, np.log),
    Builtin("sqrt", 1, np.sqrt),
    Builtin("sin", 1, np.sin),
    Builtin("cos", 1, np.cos),
    Builtin("softplus", 1, _softplus),
    Builtin("gelu", 1, _gelu),
    Builtin("leaky_relu", 2, _leaky_relu),
    Builtin("min", 2, np.minimum),
    Builtin("max", 2, np.maximum),
]}

#: named constants of the language
CONSTANTS: dict[str, float] = {"pi": float(np.pi), "e": float(np.e)}
