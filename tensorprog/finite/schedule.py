"""The executor's plan: which equations run together, and when arrays die.

Levels: an equation runs one level after the last of its inputs (matrices are
ready at level 0).  Within a level, MatMuls by the same matrix (and the same
transposition) form one batch: W [x¹ … x^B] is a single GEMM.  ``last_use``
lets the executor free each array after its final reader, and ``peak_bytes``
estimates the memory a trial needs before anything is allocated (with dense
matrices, or with blocked ones that only cost a workspace while they multiply;
``matrix_uses`` gives the batch of every GEMM on a matrix, ``generated_entries``
the random numbers a blocked trial draws: each GEMM regenerates its matrix).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from .. import ir


@dataclass(frozen=True)
class Step:
    """One unit of execution: a single equation, or a batch of MatMuls on one matrix."""
    eqns: tuple[ir.Eqn, ...]

    @property
    def is_gemm(self) -> bool:
        return isinstance(self.eqns[0], ir.MatMul)


@dataclass(frozen=True)
class Plan:
    steps: tuple[Step, ...]
    last_use: dict[int, int]          # var -> index of the last step reading it
    needed: frozenset[int]            # vars whose value reaches an output


def inputs(e: ir.Eqn) -> tuple[int, ...]:
    if isinstance(e, ir.MatMul):
        return (e.matrix, e.arg)
    if isinstance(e, (*ir.FUNCTION_OPS, *ir.LOW_RANK_OPS)):
        return e.args
    return ()


def _needed(program: ir.Program) -> set[int]:
    """Variables an output depends on (dead code is not executed)."""
    live = {o.var for o in program.outputs}
    for e in reversed(program.eqns):
        if e.var in live:
            live.update(inputs(e))
    return live


def make_plan(program: ir.Program) -> Plan:
    needed = _needed(program)
    level: dict[int, int] = {}
    buckets: dict[int, list[ir.Eqn]] = defaultdict(list)
    for e in program.eqns:
        if e.var not in needed or isinstance(e, (ir.Matrix, ir.InitVector)):
            level[e.var] = 0
            continue
        level[e.var] = 1 + max((level[v] for v in inputs(e)), default=0)
        buckets[level[e.var]].append(e)
    steps: list[Step] = []
    for lv in sorted(buckets):
        gemms: dict[tuple[int, bool], list[ir.Eqn]] = defaultdict(list)
        lows: dict[tuple[int, bool], list[ir.Eqn]] = defaultdict(list)
        for e in buckets[lv]:
            if isinstance(e, ir.MatMul):
                gemms[(e.matrix, e.transposed)].append(e)
            elif isinstance(e, ir.LowRank):            # products by one chain: one pass over its stacks
                lows[(e.terms, e.transposed)].append(e)
            else:
                steps.append(Step((e,)))
        steps.extend(Step(tuple(batch)) for batch in gemms.values())
        steps.extend(Step(tuple(batch)) for batch in lows.values())
    last_use: dict[int, int] = {}
    for i, step in enumerate(steps):
        for e in step.eqns:
            for v in inputs(e):
                last_use[v] = i
    for o in program.outputs:
        last_use[o.var] = len(steps)
    return Plan(tuple(steps), last_use, frozenset(needed))


def matrix_uses(plan: Plan) -> dict[int, list[int]]:
    """matrix var -> the number of MatMuls batched in each GEMM step that reads it."""
    uses: dict[int, list[int]] = defaultdict(list)
    for step in plan.steps:
        if step.is_gemm:
            uses[step.eqns[0].matrix].append(len(step.eqns))
    return dict(uses)


def generated_entries(program: ir.Program, plan: Plan, sizes: dict[str, int]) -> int:
    """Random entries a trial generates when every matrix is regenerated at each GEMM step."""
    return sum(len(batches) * sizes[program.eqns[v].rows] * sizes[program.eqns[v].cols]
               for v, batches in matrix_uses(plan).items())


def peak_bytes(program: ir.Program, plan: Plan, sizes: dict[str, int], itemsize: int,
               matrix_bytes) -> tuple[int, ir.Eqn | None]:
    """Largest memory in use at any step of one trial, and the equation where it is reached.
    ``matrix_bytes(e, rows, cols)`` is the cost of the Matrix equation ``e`` while it is live."""
    def nbytes(e: ir.Eqn) -> int:
        if isinstance(e, ir.Matrix):
            return matrix_bytes(e, sizes[e.rows], sizes[e.cols])
        if isinstance(e, ir.VECTOR_OPS):
            return sizes[e.width] * itemsize
        if isinstance(e, ir.RankOne):        # a link holds its chain (shared stacks: twice, growing)
            return 2 * links[e.var] * (sizes[e.rows] + sizes[e.cols]) * itemsize
        return 8
    links: dict[int, int] = {}
    for e in program.eqns:
        if isinstance(e, ir.RankOne):
            links[e.var] = 1 + (links[e.prev] if e.prev >= 0 else 0)
    live: dict[int, int] = {g_var: nbytes(program.eqns[g_var])
                            for g in program.groups for g_var in g.members if g_var in plan.needed}
    peak, where = sum(live.values()), None
    for i, step in enumerate(plan.steps):
        for e in step.eqns:
            for v in inputs(e):
                if v not in live:
                    live[v] = nbytes(program.eqns[v])
            live[e.var] = nbytes(e)
        if sum(live.values()) > peak:
            peak, where = sum(live.values()), step.eqns[0]
        for v in [v for v in live if plan.last_use.get(v, -1) <= i]:
            del live[v]
    return peak, where
