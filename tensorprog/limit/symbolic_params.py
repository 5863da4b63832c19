"""Params kept as symbols in compiled limits (``tpc compile --symbolic``).

The program is lowered with its params as leaves (:mod:`tensorprog.symbolic.traced`): every
number the compiler reads (a matrix's σ², an initial group's covariance, a dim ratio, a constant
of a function tree) carries its expression in the params.  The compiler in symbolic mode reads
those expressions instead of the numbers, so the recurrence, and every closed form the
expectation engine finds, is a function of the params.  A param stays a number where it decides
the structure (a loop bound, an index, a comparison, a builtin of list constants, a law's df or
mean) or where the compiler's rule depends on its value (the variance of a Haar-orthogonal
matrix, of a non-Gaussian initial law): :func:`symbolic_covariances` records those as structural.
"""
from __future__ import annotations

import numpy as np
import sympy as sp

from .. import ir


def symbolic_covariances(program: ir.Program) -> tuple[dict[int, sp.Matrix], dict[sp.Symbol, float]]:
    """{group: covariance in the param symbols}, {symbol: value} of the params that stay symbols,
    for a program lowered with ``trace=True`` (empty for one lowered without)."""
    leaves = program.leaves
    if leaves is None:
        return {}, {}
    for g, group in enumerate(program.groups):
        if g in leaves.groups and not group.dist.law.gaussian:
            _fix(leaves, leaves.groups[g])
    for e in program.eqns:
        if isinstance(e, ir.Matrix) and e.var in leaves.matrices and e.dist.law.haar:
            _fix(leaves, leaves.matrices[e.var])
    covs = {g: sp.Matrix(m.shape[0], m.shape[1], lambda i, j: leaves.expr(m[i, j]))
            for g, m in leaves.groups.items() if program.groups[g].dist.law.gaussian}
    return covs, leaves.symbols()


def _fix(leaves, expr) -> None:
    """The params of ``expr`` (an expression or an object array of them) stay numbers."""
    for item in np.ravel(np.asarray(expr, dtype=object)):
        leaves.tracer.structural |= {s.name for s in getattr(item, "free_symbols", ())}


def symbolic_notes(compiled) -> tuple[str, ...]:
    """Notes of ``compile --symbolic``: the params that stay numbers (they set the structure), and
    the outputs whose value is a number only (an expectation they rest on has no closed form in
    the params, or one too large)."""
    program, notes = compiled.program, []
    leaves = program.leaves
    if leaves is not None:
        fixed = sorted(n for n in leaves.tracer.structural if n in leaves.tracer.symbols)
        if fixed:
            notes.append(f"{program.file}: note [symbolic]: param{'s' if len(fixed) > 1 else ''} "
                         f"{', '.join(fixed)} set{'' if len(fixed) > 1 else 's'} the program's structure "
                         "(a loop bound, an index, a comparison, a builtin of list constants, a law's df or mean): "
                         "kept as numbers")
    numeric = [o.name for o in program.outputs if compiled.result(o.var).exact is None]
    if numeric:
        shown = ", ".join(numeric[:8]) + (f" and {len(numeric) - 8} more" if len(numeric) > 8 else "")
        notes.append(f"{program.file}: note [symbolic]: no closed form for {shown} (an expectation has none "
                     "in the params, or it is too large): the values are numbers at the params' values")
    return tuple(notes)
