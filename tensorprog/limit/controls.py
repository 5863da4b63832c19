"""Control variates for ``compile(method="particles")``: scalars whose limit the recurrence gives.

Some scalars of a long program have limits the Master Theorem recurrence computes cheaply and to
quadrature accuracy: those of its first steps (``f[0]``, ``f[1]`` of ``programs/mup_train.tp``),
whose expectations are integrals in few dimensions.  Each replica observes them too, and their
fluctuations are correlated with the other outputs' (the first step's output drives the rest of
training), so they reduce the variance of the particle estimate without changing its limit.

The estimator, per replica i (the same R replicas at N and at N_s = N/r, paired by index; they
are independent, so each pair is an iid sample):

    Z_i = a·Y_i(N) − b·Y_i(N_s),               a = r/(r−1),  b = 1/(r−1)  (Richardson),
    D_ij = a·C_ij(N) − b·C_ij(N_s) − c̊_j,     c̊_j the recurrence's limit of control j.

E Z_i = Y̊ + O(1/N²) and E D_ij = O(1/N²) (the same extrapolation), so the ordinary least-squares
intercept α̂ of Z_i = α + Σ_j β_j D_ij + e_i estimates Y̊ for any β, and the fitted β removes the
part of Z's spread that the controls explain.  Its standard error is OLS's, s·√[(XᵀX)⁻¹]₀₀, with
R − 1 − p degrees of freedom for p controls (exact for Gaussian residuals: the estimation of β is
in it; no separate split is needed).  The stated error is

    error = t_ν·SE + |Δ_Y − β·Δ_C|/(r − 1) + Σ_j |β_j|·err(c̊_j) + rounding,

with Δ the difference of the replica means at N and N_s: the statistical term, the first-order
correction of the adjusted output (the bias term of :mod:`.particles`), and the controls' own
(quadrature) errors.  An output that is itself a control is reported by its recurrence value.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import ir
from ..errors import TPUsageError


@dataclass(frozen=True)
class ControlLimit:
    """A control: its name in the program, its variable, and the recurrence's limit (value, error,
    method)."""
    name: str
    var: int
    value: float
    error: float
    method: str


@dataclass(frozen=True)
class Fit:
    """The control-variate estimate of one output: ``value`` (the intercept α̂), its standard error,
    degrees of freedom, the coefficients β and the adjusted difference of the two widths' means
    (Δ_Y − β·Δ_C, whose 1/(r − 1) is the bias term)."""
    value: float
    se: float
    dof: float
    beta: tuple[float, ...]
    difference: float


def parse_names(text: str) -> tuple[str, ...]:
    """Comma-separated scalar names; commas inside brackets (``K[1, 2]``) belong to the name."""
    names, depth, current = [], 0, ""
    for ch in text:
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            names.append(current.strip())
            current = ""
        else:
            current += ch
    names.append(current.strip())
    if not all(names):
        raise TPUsageError(f"expected comma-separated scalar names, e.g. f[0],f1, got {text!r}")
    return tuple(names)


def control_names(controls: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """``controls`` as a tuple of names: a string is comma-separated (:func:`parse_names`)."""
    if isinstance(controls, str):
        return parse_names(controls)
    if not all(isinstance(c, str) for c in controls):
        raise TPUsageError(f"controls must be scalar names (strings), got {controls!r}")
    return tuple(controls)


def scalar_vars(program: ir.Program) -> dict[str, int]:
    """The program's named scalars (Moment or Scalar equations) and outputs: name -> variable."""
    named = {name: var for var, name in program.names.items()
             if isinstance(program.eqns[var], (ir.Moment, ir.Scalar))}
    named.update({o.name: o.var for o in program.outputs})
    return named


def resolve(program: ir.Program, names: tuple[str, ...]) -> dict[str, int]:
    """The variables of the control names (TPUsageError naming the scalars there are)."""
    known = scalar_vars(program)
    missing = [n for n in names if n not in known]
    if missing:
        shown = ", ".join(sorted(known)[:12]) + (", ..." if len(known) > 12 else "")
        raise TPUsageError(f"control variate {', '.join(missing)}: not a scalar of this program "
                           f"(scalars: {shown})", file=program.file)
    return {n: known[n] for n in names}


def prefix_limits(program: ir.Program, controls: dict[str, int],
                  expand: Callable[[ir.Program], ir.Program] | None = None) -> list[ControlLimit]:
    """The recurrence's limits of the controls, compiled from the program's prefix that ends at the
    last of them (the equations after it cannot change them: ``eqns[k]`` binds ``%k``); ``expand``
    expands its updated matrices (``tensorprog.lang.lower.expanded``, which the caller passes: the
    recurrence reads them expanded)."""
    from .compiler import compile_program
    pos = program.outputs[0].pos if program.outputs else ir.Pos(1, 1)
    end = max(controls.values()) + 1
    outputs = tuple(ir.Output(name, var, pos) for name, var in controls.items())
    groups = tuple(dataclasses.replace(g, members=tuple(m for m in g.members if m < end))
                   for g in program.groups)
    prefix = dataclasses.replace(program, eqns=program.eqns[:end], outputs=outputs,
                                 groups=tuple(g for g in groups if g.members))
    limit = compile_program(expand(prefix) if expand else prefix).limit().outputs
    return [ControlLimit(name, var, float(limit[name].value), float(limit[name].error), limit[name].method)
            for name, var in controls.items()]


def with_outputs(program: ir.Program, controls: list[ControlLimit]) -> ir.Program:
    """The program with the controls that are not outputs added as outputs (the replicas report them)."""
    have = {o.name for o in program.outputs}
    pos = program.outputs[0].pos if program.outputs else ir.Pos(1, 1)
    extra = tuple(ir.Output(c.name, c.var, pos) for c in controls if c.name not in have)
    return dataclasses.replace(program, outputs=program.outputs + extra)


def fit(large_y: np.ndarray, small_y: np.ndarray, large_c: np.ndarray, small_c: np.ndarray,
        exact: np.ndarray, ratio: float) -> Fit:
    """The regression of the module docstring: ``large_y``, ``small_y`` (R,) one output's replicas at N
    and N_s; ``large_c``, ``small_c`` (R, p) the controls' replicas; ``exact`` (p,) their limits."""
    a, b = ratio / (ratio - 1), 1 / (ratio - 1)
    z = a * large_y - b * small_y
    d = a * large_c - b * small_c - exact
    r = d.shape[0]
    x = np.column_stack([np.ones(r), d])
    coef, *_ = np.linalg.lstsq(x, z, rcond=None)
    resid = z - x @ coef
    dof = r - int(np.linalg.matrix_rank(x))     # R − 1 − p, less for collinear controls (f[0] and dl[0])
    s2 = float(resid @ resid) / dof
    cov = np.linalg.pinv(x.T @ x)
    se = math.sqrt(max(s2 * cov[0, 0], 0.0))
    beta = coef[1:]
    difference = float(np.mean(large_y - small_y) - beta @ np.mean(large_c - small_c, axis=0))
    return Fit(float(coef[0]), se, float(dof), tuple(float(v) for v in beta), difference)
