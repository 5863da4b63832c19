"""The limit at many param values at once: one compile per structure, its points batched.

A param sweep lowers the program at every point (the lowering is the only definition of what a
param does).  Each lowered program splits into a *structure* (its equations with the numbers
below blanked out) and its *leaves*, the numbers that may vary from point to point without
changing the recurrence:

* the variance σ² of a matrix (not of an orthogonal one, whose rule depends on the value);
* the covariance of an initial Gaussian group (a bias variance σ_b², a correlation ρ);
* the constant leaves of function trees (``sw * mean(...)``; in a Nonlin, a varying constant
  makes the integrand's coefficient vary, and those expectations are computed point by point).

Points with equal structures (equal depths, loop bounds, dims, ...) are compiled together by
:class:`SweepCompiler`, the limit compiler in batch mode (:mod:`.batch`): each leaf that varies
over the points is a batch symbol whose value is the array of its values, so the Ẑ covariances
σ² E[Z^x Z^y] are arrays and every expectation is one closed form evaluated on arrays or one
quadrature on a shared grid.  A leaf equal at every point stays the number a pointwise compile
uses, so the batched values equal pointwise ``compile()``s within the stated errors.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence

import numpy as np
import sympy as sp

from .. import ir
from ..expect.budget import DEFAULT, Budget
from ..ir.walk import Rules, fold
from .accuracy import VALUE_ROUNDING
from .batch import unrecorded
from .compiler import Compiled, CompileOptions, Compiler, Family
from .interpret import Swept
from .result import LimitValue


@dataclass(frozen=True)
class Leaves:
    """The numbers of one lowered program that a sweep may batch: ``matrices`` {Matrix var: σ²},
    ``groups`` {group: its (k, k) covariance}, ``consts`` {(eqn var, k): the k-th Const leaf of
    its function tree, in :func:`~tensorprog.ir.walk.fold` order}."""
    matrices: Mapping[int, float]
    groups: Mapping[int, np.ndarray]
    consts: Mapping[tuple[int, int], float]


def batchable_matrix(e: ir.Matrix) -> bool:
    """A matrix whose variance enters the recurrence only as the factor σ² of its Ẑ family."""
    return not e.dist.law.haar


def batchable_group(group: ir.Group) -> bool:
    """An initial group whose covariance enters only as the covariance of its Gaussian Ẑ's."""
    return bool(group.dist.law.gaussian)


def group_cov(group: ir.Group) -> np.ndarray:
    """The (k, k) covariance of an initial group (``var``·I without a ``cov``)."""
    spec, k = group.dist, len(group.members)
    return np.array(spec.cov, dtype=float) if spec.cov else np.eye(k) * spec.var


def blank_fn(fn: ir.Fn, consts: list[float]) -> ir.Fn:
    """``fn`` with every constant leaf replaced by 0 (its values appended to ``consts``, in fold order)."""
    def const(node: ir.Const) -> ir.Fn:
        consts.append(float(node.value))
        return ir.Const(0.0)
    rules = Rules(ref=lambda node: node, const=const,
                  call=lambda node, args: ir.Call(node.name, tuple(args)),
                  bin=lambda node, lhs, rhs: ir.Bin(node.op, lhs, rhs),
                  neg=lambda node, operand: ir.Neg(operand))
    return fold(fn, rules)


def split(program: ir.Program) -> tuple[Hashable, Leaves]:
    """The structure of a lowered program (hashable; equal for programs that differ only in
    their leaves) and its leaves."""
    matrices, consts, eqns = {}, {}, []
    for e in program.eqns:
        if isinstance(e, ir.Matrix) and batchable_matrix(e):
            matrices[e.var] = float(e.dist.var)
            eqns.append(("Matrix", e.name, e.dist.family, e.dist.df, e.rows, e.cols))
        elif isinstance(e, ir.FUNCTION_OPS):
            values: list[float] = []
            eqns.append((type(e).__name__, blank_fn(e.fn, values), e.args, getattr(e, "width", None)))
            consts.update({(e.var, k): v for k, v in enumerate(values)})
        else:
            eqns.append(e)
    groups, shapes = {}, []
    for g, group in enumerate(program.groups):
        if batchable_group(group):
            groups[g] = group_cov(group)
            shapes.append((group.members, group.width, group.dist.family, group.dist.mean))
        else:
            shapes.append(group)
    key = (tuple(eqns), tuple(shapes), program.outputs, tuple(sorted(program.dims.items())))
    return key, Leaves(matrices, groups, consts)


def stack(leaves: Sequence[Leaves]) -> Leaves:
    """The leaves of P points as arrays (P,) (groups (P, k, k)), keeping only those that vary."""
    def varying(arrays: np.ndarray) -> bool:
        return bool(np.any(arrays != arrays[:1]))
    first = leaves[0]
    mats = {v: np.array([l.matrices[v] for l in leaves]) for v in first.matrices}
    groups = {g: np.stack([l.groups[g] for l in leaves]) for g in first.groups}
    consts = {k: np.array([l.consts[k] for l in leaves]) for k in first.consts}
    return Leaves({v: a for v, a in mats.items() if varying(a)}, {g: a for g, a in groups.items() if varying(a)},
                  {k: a for k, a in consts.items() if varying(a)})


#: the source of a sweep's varying leaf (a sweep is not replayed)
LEAF = unrecorded("a sweep's leaf")


class SweepCompiler(Compiler):
    """The limit compiler over the P points of one structure: the base ``program`` (any point of
    it) with the varying leaves ``leaves`` (arrays over the points, from :func:`stack`) as batch
    symbols."""

    def __init__(self, program: ir.Program, leaves: Leaves, size: int, *, budget: Budget = DEFAULT) -> None:
        super().__init__(program, Swept(dict(leaves.groups), size), CompileOptions(budget))
        self.batch = self.interp.batch
        self.leaves = leaves
        self.at: tuple[int, int] = (-1, 0)          # (eqn var, constant leaves met) while building

    def build(self, e: ir.Nonlin | ir.Moment | ir.Scalar) -> sp.Expr:
        self.at = (e.var, 0)
        return super().build(e)

    def constant(self, node: ir.Const) -> sp.Expr:
        var, k = self.at
        self.at = (var, k + 1)
        values = self.leaves.consts.get((var, k))
        return super().constant(node) if values is None else self.batch.number(values, LEAF)

    def do_Matrix(self, e: ir.Matrix) -> None:
        super().do_Matrix(e)
        values = self.leaves.matrices.get(e.var)
        if values is not None:                         # σ² as a batch symbol, both directions
            var = self.batch.number(values, LEAF)
            ratio = self.num(self.program.dims[e.rows] / self.program.dims[e.cols])
            self.families[(e.var, False)] = Family(var)
            self.families[(e.var, True)] = Family(var * ratio)


def compile_points(program: ir.Program, leaves: Leaves, size: int, budget: Budget = DEFAULT) -> Compiled:
    """The recurrence of one structure over ``size`` points (``leaves`` from :func:`stack`)."""
    return SweepCompiler(program, leaves, size, budget=budget).run()


def point_values(compiled: Compiled, size: int) -> dict[str, LimitValue]:
    """Every scalar output's limit at the points: value and error arrays (size,), the method."""
    out = {}
    for o in compiled.program.outputs:
        lv = compiled.result(o.var)
        value = np.broadcast_to(np.asarray(lv.value, float), (size,)).copy()
        error = np.broadcast_to(np.asarray(lv.error, float), (size,)).copy()
        propagated = compiled.scalar_error.get(o.var)
        if propagated is not None:            # a function of scalars: its error by sensitivity
            error = np.broadcast_to(propagated, (size,)) + VALUE_ROUNDING * (np.abs(value) + 1)
        out[o.name] = LimitValue(value, error, lv.method)
    return out
