"""The executor: a small interpreter of the IR at finite width, one trial at a time, on an array backend.

It interprets a :class:`~.plan.RunPlan` (built by :func:`~.plan.run_plan`: sizes, laws,
schedule, memory mode), step by step: a step is one function equation, whose value is
given by the rule of its kind (:data:`FUNCTION_RULES`), or a batch of MatMuls on one
matrix, run as one GEMM ``W [x¹ … x^B]``; arrays are freed after their last reader.

Trial t draws every random object from its own stream,
``SeedSequence(seed, spawn_key=(t, var))``, so results are bit-identical for a given
seed whatever the order of execution.  In blocked mode (:mod:`.memory`) a matrix is a
:class:`~tensorprog.distributions.blocked.BlockedMatrix`, whose random numbers come from another generator
(Philox, keyed by (seed, trial, var)): the same statistics as a dense run, not the same
numbers.  A float32 run draws the float64 random numbers of the same seed and rounds
them (``draw_dtype=float64`` of the samplers; blocked rows likewise), so it equals the
float64 run to float32 precision.  A non-finite value is reported at its statement with
its cause (:mod:`.evaluate`): overflow, division by zero or invalid operation, found by
re-evaluating only on that error path.

In conditional mode (``plan.conditional``) a matrix is a
:class:`~tensorprog.distributions.conditional.ConditionalMatrix`: never drawn, each product is
drawn from its law given the earlier products of the trial (exact in law, memory O(n·k)), from
the stream of (seed, trial, var) — the row scales of an ``mvt`` matrix first, then the Gaussian
innovations in the order of the products.  The random numbers are those of the dense stream,
used differently: the same laws, not the same numbers.  A trial run in pieces (the (n, P)
columns of a kernel, :meth:`Executor.run_trial` with ``columns``) keeps its conditional
matrices from piece to piece, so every piece sees one matrix.

The rules are written once and test no mode.  Two strategies, chosen once, carry what differs:

* the run's array operations (:mod:`.ops`, chosen per Executor by :func:`~.ops.ops_for`):
  numpy's own (:class:`~.ops.NumpyOps`, so its numbers never change) or any array-API backend's
  (:class:`~.ops.ArrayApiOps`: torch, jax, cupy, array_api_strict; matrices and initial vectors
  drawn on the device from the backend's streams, :func:`~.backend.stream_seed`: the same keys,
  the library's own generator; blocked matrices are
  :class:`~tensorprog.distributions.blocked.StreamBlockedMatrix`; scalars come back to the host
  as Python floats);
* the trial's layout (:mod:`.layout`, chosen per trial): :class:`~.layout.Narrow` (vectors
  (n,)) or :class:`~.layout.Wide` (P inputs side by side, vectors (n, P)).

A step runs by the rule of its first equation's kind (:data:`STEP_RULES`); a function equation's
value comes from its tree's value by the rule of its kind (:data:`FUNCTION_RULES`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import ir
from ..distributions.blocked import BlockedMatrix, StreamBlockedMatrix
from ..distributions.conditional import ConditionalHaar, ConditionalMatrix, ConditioningError
from ..errors import TPNumericalError, TPUsageError
from .evaluate import OVERFLOW, Cause, first_nonfinite
from .layout import Layout, Narrow, Wide
from .lowrank import products, rank_one_value
from .memory import side_products
from .ops import Ops, ops_for
from .plan import RunPlan
from .schedule import Step, inputs

#: ``(trial, step index, steps, what, fraction done)``: progress inside a blocked product
OnStep = Callable[[int, int, int, str, float], None]
Read = Callable[[int], object]


class Executor:
    """Interprets ``plan``: ``run_trial(t)`` returns the outputs of trial t.  ``on_step`` is
    told the progress of blocked products.  Building one does no work but choosing the
    strategies: the array operations of the plan's backend (``ops``), the layouts."""

    def __init__(self, plan: RunPlan, on_step: OnStep | None = None) -> None:
        self.plan = plan
        self.program, self.sizes, self.dtype, self.seed = plan.program, plan.sizes, plan.dtype, plan.seed
        self.blocked = plan.blocked
        self.on_step = on_step
        self.ops: Ops = ops_for(plan)
        self.backend, self.xp = self.ops.backend, self.ops.xp
        self.narrow, self.wide = Narrow(self.ops), Wide(self.ops)
        #: how a matrix exists (trial, var, rows, cols) -> matrix: conditional, blocked or dense
        self.draw = (self.conditional_matrix if plan.conditional else
                     self.ops.blocked if plan.blocked else self.ops.dense)
        #: the conditional matrices of the trial run in pieces (``run_trial`` with columns)
        self.kept: tuple[int, dict[int, ConditionalMatrix]] = (-1, {})
        #: (matrix, transposed) -> products on that side: the columns a conditional matrix reserves
        self.side_uses = side_products(plan.program, plan.schedule) if plan.conditional else {}

    def rng(self, trial: int, var: int) -> np.random.Generator:
        """The stream of ``var`` in ``trial``: ``SeedSequence(seed, spawn_key=(trial, var))``."""
        return self.ops.rng(trial, var)

    def matrix(self, trial: int, var: int, keep: bool = False):
        """The matrix ``var`` of ``trial``: an array, a BlockedMatrix in blocked mode, a
        ConditionalMatrix in conditional mode (``keep``: the same object for every piece of the
        trial, see :meth:`run_trial`; the other kinds are the same matrix when drawn again)."""
        e = self.program.eqns[var]
        rows, cols = self.sizes[e.rows], self.sizes[e.cols]
        if not (keep and self.plan.conditional):
            return self.draw(trial, var, rows, cols)
        if self.kept[0] != trial:
            self.kept = (trial, {})
        kept = self.kept[1]
        if var not in kept:
            kept[var] = self.draw(trial, var, rows, cols)
        return kept[var]

    def conditional_matrix(self, trial: int, var: int, rows: int, cols: int):
        """The conditional matrix ``var`` of ``trial``
        (:func:`~tensorprog.distributions.conditional.conditional_matrix`), reserving the columns
        of its products on each side."""
        reserve = (self.side_uses.get((var, False), 0), self.side_uses.get((var, True), 0))
        return self.ops.conditional(trial, var, rows, cols, reserve)

    def initial_vectors(self, trial: int, layout: Layout) -> dict[int, object]:
        """The initial vectors an output needs, group by group, laid out by ``layout``."""
        env: dict[int, object] = {}
        needed = self.plan.schedule.needed
        for g in self.program.groups:
            if any(v in needed for v in g.members):
                drawn = self.ops.vectors(trial, g, self.sizes[g.width])
                env.update((v, layout.initial(drawn[k, :])) for k, v in enumerate(g.members))
        return env

    def run_trial(self, trial: int, columns: dict[int, np.ndarray] | None = None) -> dict[str, object]:
        """One trial's outputs.  With ``columns`` {initial vector: array (n, P)} the program runs
        on P inputs at once (the :class:`~.layout.Wide` layout: every vector is an (n, P) array,
        every scalar a (P,) array): the same matrices for all P, as for the pairs of a dataset
        kernel."""
        layout = self.narrow if columns is None else self.wide
        env: dict[int, object] = self.initial_vectors(trial, layout)
        env.update({v: self.ops.from_host(a) for v, a in (columns or {}).items()})
        keep = layout.keeps_matrices

        def read(var: int):
            if var not in env:           # a matrix, drawn when first needed
                env[var] = self.matrix(trial, var, keep)
            return env[var]

        steps, last_use, rules = self.plan.schedule.steps, self.plan.schedule.last_use, STEP_RULES
        with np.errstate(all="ignore"):
            for i, step in enumerate(steps):
                if self.on_step is not None and step.is_gemm:
                    self._watch(trial, i, step, read)
                results = rules[type(step.eqns[0])](self, layout, step, read)
                for e, value in zip(step.eqns, results):
                    if not isinstance(e, ir.RankOne):         # (a link: its vectors were checked)
                        self._check_finite(e, value, trial, read)
                    env[e.var] = value
                for e in step.eqns:
                    for v in inputs(e):
                        if last_use.get(v, -1) <= i:
                            env.pop(v, None)
        return {o.name: layout.output(read(o.var)) for o in self.program.outputs}

    def _watch(self, trial: int, index: int, step: Step, read: Read) -> None:
        """Report the rows of a blocked product to ``on_step`` as they are generated."""
        w = read(step.eqns[0].matrix)
        if not isinstance(w, (BlockedMatrix, StreamBlockedMatrix)) or self.on_step is None:
            return                   # a dense product is one call: nothing to report inside it
        e, on_step, steps = step.eqns[0], self.on_step, len(self.plan.schedule.steps)
        what = (f"{self.program.eqns[e.matrix].name}{'.T' if e.transposed else ''} @ "
                f"{len(step.eqns)} vector(s), blocked")
        done = [0]

        def on_rows(k: int) -> None:
            done[0] += k
            on_step(trial, index, steps, what, done[0] / w.rows)
        w.on_rows = on_rows

    def product(self, w, e: ir.MatMul) -> Callable:
        """x -> W x (or Wᵀ x, as ``e`` says) for the matrix ``w`` of whatever kind; a conditional
        matrix's failure is a TPUsageError at ``e``."""
        if isinstance(w, (ConditionalMatrix, ConditionalHaar)):
            def conditioned(x):
                try:
                    return w.matmul(x, e.transposed)
                except ConditioningError as err:
                    raise TPUsageError(f"conditional mode: {err}; use a larger width or run without "
                                       "--conditional", e.pos.line, e.pos.col, self.program.file,
                                       self.program.source) from None
            return conditioned
        if isinstance(w, (BlockedMatrix, StreamBlockedMatrix)):
            return lambda x: w.matmul(x, e.transposed)
        if e.transposed:
            return self.backend.transposed_product(w)
        return lambda x: w @ x

    def _check_finite(self, e: ir.Eqn, value, trial: int, read: Read) -> None:
        if self.ops.finite(value):
            return
        # off the hot path: which operation, raising which floating-point event (on an array
        # backend, found on host copies of the operands, with numpy)
        cause = first_nonfinite(e.fn, self.ops.host_reader(read)) if isinstance(e, ir.FUNCTION_OPS) else None
        if cause is None:          # finite operands: the product, the mean or the cast overflowed
            cause = Cause(OVERFLOW, OVERFLOWS_IN.get(type(e), f"the conversion to {self.dtype.name}"))
        what = ir.show_eqn(e).split("    #")[0]
        raise TPNumericalError(f"{cause.describe()} first produced here (trial {trial}, {what})",
                               e.pos.line, e.pos.col, self.program.file, self.program.source)


# ---- the rules of the steps: the values of a step's equations
Rule = Callable[[Executor, Layout, Step, Read], list]


def gemm_step(ex: Executor, layout: Layout, step: Step, read: Read) -> list:
    """The MatMuls of ``step`` (one matrix, one transposition) as one product W [x¹ … x^B], the
    arguments side by side as the layout puts them."""
    first = step.eqns[0]
    product = ex.product(read(first.matrix), first)
    if len(step.eqns) == 1:
        return [product(read(first.arg))]
    args = [read(e.arg) for e in step.eqns]
    return layout.unbatch(product(layout.batch(args)), args)


def low_rank_step(ex: Executor, layout: Layout, step: Step, read: Read) -> list:
    """LowRank products by one chain (:func:`~.lowrank.products`)."""
    first = step.eqns[0]
    return products(read(first.terms), [read(e.arg) for e in step.eqns], first.transposed, ex.xp)


def rank_one_step(ex: Executor, layout: Layout, step: Step, read: Read) -> list:
    """A RankOne link (:func:`~.lowrank.rank_one_value`), stacked where the layout allows."""
    return [rank_one_value(ex.program, ex.sizes, step.eqns[0], read, layout.stacks_links)]


def function_step(ex: Executor, layout: Layout, step: Step, read: Read) -> list:
    """A function equation: its tree evaluated, then the rule of its kind (:data:`FUNCTION_RULES`)."""
    e = step.eqns[0]
    return [FUNCTION_RULES[type(e)](ex, layout, e, ex.ops.evaluate(e.fn, read))]


# ---- the rules of the function equations: value of the equation from the value v of its tree
def nonlin_value(ex: Executor, layout: Layout, e: ir.Nonlin, v):
    """A vector of the equation's width: v itself, or a function of scalars only broadcast
    to every coordinate."""
    return layout.vector(v, ex.sizes[e.width])


def moment_value(ex: Executor, layout: Layout, e: ir.Moment, v):
    """The empirical moment (1/n) Σ_α v_α (per column in the wide layout)."""
    return layout.moment(v)


def scalar_value(ex: Executor, layout: Layout, e: ir.Scalar, v):
    """A scalar: v itself (per column in the wide layout)."""
    return layout.scalar(v)


#: equation kind -> the rule of its step (matrices and initial vectors are drawn, not run)
STEP_RULES: dict[type, Rule] = {
    ir.MatMul: gemm_step, ir.LowRank: low_rank_step, ir.RankOne: rank_one_step,
    ir.Nonlin: function_step, ir.Moment: function_step, ir.Scalar: function_step}
#: function equation kind -> its value from its tree's value
FUNCTION_RULES: dict[type, Callable[[Executor, Layout, ir.Eqn, object], object]] = {
    ir.Nonlin: nonlin_value, ir.Moment: moment_value, ir.Scalar: scalar_value}
#: what overflowed when a non-finite value comes from finite operands (else: the dtype conversion)
OVERFLOWS_IN: dict[type, str] = {ir.MatMul: "the matrix product", ir.Moment: "the mean",
                                 ir.LowRank: "the product by the rank-one updates"}
