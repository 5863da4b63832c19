"""A program with the law of every matrix swapped (``--matrix-dist``), for its limit.

The limit is the same for every iid law of the same variance, but not for Haar-orthogonal
matrices used transposed (:mod:`.haar`), and the hypotheses a program leaves (smooth φ, moments)
depend on the law: so the limit of a swapped run is compiled from the swapped program."""
from __future__ import annotations

import dataclasses

from .. import distributions as D
from .. import ir
from ..errors import TPUsageError


def with_matrix_family(program: ir.Program, family: str) -> ir.Program:
    """``program`` with every matrix's law swapped to ``family`` (its variance kept); a
    TPUsageError naming --matrix-dist for a family that cannot be a matrix law."""
    eqns = []
    for e in program.eqns:
        if isinstance(e, ir.Matrix):
            try:
                e = dataclasses.replace(e, dist=D.with_family(e.dist, family))
            except D.DistributionError as err:
                raise TPUsageError(f"--matrix-dist: {err}", file=program.file) from None
        eqns.append(e)
    return dataclasses.replace(program, eqns=tuple(eqns))
