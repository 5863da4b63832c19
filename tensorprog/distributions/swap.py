"""A program with the law of every matrix swapped (``--matrix-dist``): the one place both back
ends take it from.

The finite-width run draws its matrices from the swapped laws (:func:`~tensorprog.finite.plan.matrix_specs`),
and the limit of a swapped run is compiled from the swapped program: the limit is the same for
every iid law of the same variance, but not for Haar-orthogonal matrices used transposed, and
the hypotheses a program leaves (smooth φ, moments) depend on the law."""
from __future__ import annotations

import dataclasses

from .. import ir
from ..errors import TPUsageError
from .checks import DistributionError
from .spec import with_family


def with_matrix_family(program: ir.Program, family: str) -> ir.Program:
    """``program`` with every matrix's law swapped to ``family`` (its variance kept: :func:`.with_family`);
    a TPUsageError naming --matrix-dist for a family that cannot be a matrix law."""
    eqns = []
    for e in program.eqns:
        if isinstance(e, ir.Matrix):
            try:
                e = dataclasses.replace(e, dist=with_family(e.dist, family))
            except DistributionError as err:
                raise TPUsageError(f"--matrix-dist: {err}", file=program.file) from None
        eqns.append(e)
    return dataclasses.replace(program, eqns=tuple(eqns))
