"""Params kept as symbols in compiled limits (``tpc compile --symbolic``).

A param that enters a program only through the covariance of an initial group
(``normal(cov=[[1, rho], [rho, 1]])``) changes no equation, only numbers of the
Gaussian law: the limit is then a closed-form function of it wherever each
expectation has one.  We find such params by re-unrolling the program with the
param moved (the IR must be unchanged but for that group's covariance) and check
that every entry it moves is affine in it, entry = a + b·p, with a, b found from
two moves and confirmed by a third.  Other params (loop bounds, constants inside
nonlinearities) stay numbers, written exactly where they are short decimals.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from ..symbolic import functions as fnsym
from .. import ir
from ..lang.lower import lower
from ..lang.parser import parse_text


def relower(program: ir.Program, params: dict[str, float]) -> ir.Program:
    """The same source unrolled again with other param values."""
    return lower(parse_text(program.source, program.file), params, file=program.file,
                 source=program.source, base_dir=program.base_dir)


def _cov(group: ir.Group) -> np.ndarray:
    spec = group.dist
    k = len(group.members)
    return np.array(spec.cov, dtype=float) if spec.cov else np.eye(k) * spec.var


def symbolic_covariances(program: ir.Program) -> tuple[dict[int, sp.Matrix], dict[sp.Symbol, float]]:
    """{group: covariance with param symbols}, {symbol: value} for the params that allow it."""
    base = {k: v for k, v in program.params.items() if isinstance(v, float)}
    found: dict[tuple[int, int, int], tuple[str, float, float]] = {}
    for name, value in base.items():
        moved = [_moved(program, base, name, value + step) for step in (0.125, 0.25)]
        if moved[0] is None or moved[1] is None:
            continue
        for g, group in enumerate(program.groups):
            c0, c1, c2 = _cov(group), _cov(moved[0].groups[g]), _cov(moved[1].groups[g])
            slope = (c1 - c0) / 0.125
            changed = np.abs(c1 - c0) > 1e-14
            affine = np.allclose(c2 - c0, 0.25 * slope, rtol=1e-9, atol=1e-12)
            for i, j in zip(*np.nonzero(changed)):
                key = (g, int(i), int(j))
                if not affine or key in found:          # several params in one entry: keep numbers
                    found[key] = ("", 0.0, 0.0)
                    continue
                found[key] = (name, float(c0[i, j] - slope[i, j] * value), float(slope[i, j]))
    symbols = {name: sp.Symbol(name, real=True) for name, _, _ in found.values() if name}
    covs: dict[int, sp.Matrix] = {}
    for g in sorted({key[0] for key, spec in found.items() if spec[0]}):
        c = _cov(program.groups[g])
        M = sp.Matrix(c.shape[0], c.shape[1], lambda i, j: fnsym.constant(c[i, j], True))
        for (gg, i, j), (name, a, b) in found.items():
            if gg == g and name:
                M[i, j] = fnsym.constant(a, True) + fnsym.constant(b, True) * symbols[name]
        covs[g] = M
    return covs, {symbols[k]: base[k] for k in symbols}


def _moved(program: ir.Program, base: dict[str, float], name: str, value: float) -> ir.Program | None:
    """The program with one param moved, if that changes nothing but initial covariances."""
    try:
        moved = relower(program, {**base, name: value})
    except Exception:                      # the moved value is invalid (e.g. not PSD): keep a number
        return None
    if moved.eqns != program.eqns or len(moved.groups) != len(program.groups):
        return None
    for a, b in zip(moved.groups, program.groups):
        if a.members != b.members or a.dist.family != b.dist.family or a.dist.mean != b.dist.mean:
            return None
    return moved
