"""Limits of a program's outputs: value, error bound, method and closed form."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import math

import numpy as np
import sympy as sp

from .. import ir
from ..expect.laws import as_number
from ..npz import save_npz
from .accuracy import METHOD_RANK, VALUE_ROUNDING
from .values import holds_float, value_of



@dataclass(frozen=True)
class LimitValue:
    """The limit c̊ of one scalar.

    ``error`` bounds |value − c̊|: the sum of the error estimates of every expectation
    the scalar rests on (its own and those of the covariances and scalars upstream),
    plus float rounding.  ``method`` is the least exact method among them.
    ``exact`` is the closed form (a sympy expression) when every step was exact and
    the compilation was symbolic."""
    value: float
    error: float
    method: str
    exact: sp.Expr | None = None

    def describe(self) -> str:
        if np.ndim(self.value):
            v, err = np.asarray(self.value), np.asarray(self.error)
            return f"[{v.size} values in {v.min():.6g}..{v.max():.6g}] ± {err.max():.2g} ({self.method})"
        if self.method == "exact":
            return f"{self.value:.12g} (exact{': ' + str(self.exact) if self.exact is not None else ''})"
        return f"{self.value:.12g} ± {self.error:.2g} ({self.method})"


def defect(value: sp.Expr) -> str | None:
    """Why a sympy number is not a finite real float: "nan", "zoo" (complex infinity, e.g. 1/0),
    "inf", "complex", "overflow" (finite, but beyond the float range, e.g. exp(800)) or None."""
    if value.has(sp.nan):
        return "nan"
    if value.has(sp.zoo):
        return "zoo"
    if value.has(sp.oo, -sp.oo):
        return "inf"
    try:
        number = complex(sp.N(value, 17))
    except (TypeError, ValueError, ArithmeticError):
        return "nan"
    if number.real != number.real or number.imag != number.imag:
        return "nan"
    if number.imag and not abs(number.imag) <= 1e-12 * max(1.0, abs(number.real)):
        return "complex"
    return None if math.isfinite(number.real) else "overflow"


def summarize(value: sp.Expr, estimates: Sequence, symbolic: bool, params: dict | None = None) -> LimitValue:
    """Combine a scalar's value with the estimates it rests on (errors add: unit sensitivity).
    ``params`` gives the values of param symbols left in a closed form.

    A value that is not a finite real float raises TPNumericalError (not located: the
    compiler's hypotheses check every scalar at its statement first, so this is a backstop)."""
    point = value.subs(params) if params and isinstance(value, sp.Basic) else value
    point = point if isinstance(point, sp.Basic) else as_number(point)
    problem = defect(point)
    if problem is not None:
        from ..errors import TPNumericalError
        raise TPNumericalError(f"the limit {value} is not a finite real number ({problem})")
    number = complex(sp.N(point, 17))
    method = max((e.method for e in estimates), key=METHOD_RANK.__getitem__, default="exact")
    # rounding: relative to the value, and to O(1) terms that may have cancelled in it
    error = sum(e.error for e in estimates) + VALUE_ROUNDING * (abs(number.real) + 1)
    exact = None
    if method == "exact" and symbolic:
        exact = closed_form(value)
    return LimitValue(number.real, float(error), method, exact)


def closed_form(value: sp.Expr) -> sp.Expr | None:
    """The closed form a scalar of exact method claims: ``value`` simplified (kept as built past
    200 operations); but a number holding a Float is known by value (:mod:`.values`): no closed
    form, unless its value is exactly a short rational (0.5 → 1/2; never a guess: ``nsimplify``
    would read 1.0000000029 as 1)."""
    if value.is_number and holds_float(value):
        exact = value_of(value)
        return exact if exact.is_Rational else None
    return sp.simplify(value) if sp.count_ops(value) < 200 else value


def exact_json(v: LimitValue) -> str | list | None:
    """The ``exact`` field of an output in JSON (see :meth:`Limit.to_dict`)."""
    if v.exact is not None:
        return sp.sstr(v.exact)
    if v.method != "exact":
        return None
    return ir.jsonable(v.value) if np.ndim(v.value) else repr(float(v.value))


def group_limits(outputs: tuple[ir.Output, ...], flat: dict[str, LimitValue]) -> dict[str, LimitValue]:
    """The reported limits: a scalar output as it is; an array of outputs (``out K[i, j]``) as one
    LimitValue whose value and error are arrays (NaN where no ``out`` set an entry) and whose
    method is the least exact of its entries (:mod:`tensorprog.ir.outputs`)."""
    result: dict[str, LimitValue] = {}
    for item in ir.output_table(outputs):
        if isinstance(item, ir.Output):
            result[item.name] = flat[item.name]
            continue
        value, error = np.full(item.shape, np.nan), np.full(item.shape, np.nan)
        for o in item.entries:
            value[item.position(o)], error[item.position(o)] = flat[o.name].value, flat[o.name].error
        method = max((flat[o.name].method for o in item.entries), key=METHOD_RANK.__getitem__)
        result[item.name] = LimitValue(value, error, method)
    return result


@dataclass
class Limit:
    """The limits of every ``out`` and the hypotheses the program leaves.  ``outputs`` reports an
    array of outputs (``out K[i, j]``) as one array-valued LimitValue; ``entries`` has every
    scalar output, each entry of an array by itself (``K[1, 2]``)."""
    outputs: dict[str, LimitValue]
    warnings: list[str] = field(default_factory=list)
    entries: dict[str, LimitValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.entries:
            self.entries = dict(self.outputs)

    def to_dict(self) -> dict:
        """``{"outputs": {NAME: {value, error, method, exact}}, "warnings": [...]}``; ``exact`` is
        the closed form (sympy text) when the compile kept one, else, for method ``exact``, the
        value itself (exact up to float rounding: ``repr`` of the float, or the array), else None."""
        return {"outputs": {k: {"value": ir.jsonable(v.value), "error": ir.jsonable(v.error), "method": v.method,
                                "exact": exact_json(v)}
                            for k, v in self.outputs.items()},
                "warnings": list(self.warnings)}

    def save(self, path: str) -> None:
        """An ``.npz`` of every output (arrays of outputs as arrays) and its ``NAME_error``."""
        save_npz(path, ir.npz_arrays(self.outputs, "error"))

    def _repr_html_(self) -> str:
        """Jupyter: a table of value, error, method and closed form, then the warnings."""
        from .printers import limit_html
        return limit_html(self)

    def _repr_latex_(self) -> str:
        from .printers import limit_latex
        return limit_latex(self)
