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

On an array backend other than numpy (:mod:`.backend`: torch, jax, cupy, array_api_strict)
the same rules run with the backend's array-API namespace ``xp``: matrices and initial
vectors are drawn on the device from the backend's streams (:func:`~.backend.stream_seed`:
the same keys, the library's own generator), blocked matrices are
:class:`~tensorprog.distributions.blocked.StreamBlockedMatrix`, functions are evaluated by
:func:`~.evaluate.eval_array`, and scalars come back to the host as Python floats.  numpy
keeps its own code below, so its numbers never change.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import BlockedMatrix, StreamBlockedMatrix, matrix_key
from ..distributions.conditional import (ConditionalHaar, ConditionalMatrix, ConditioningError,
                                         conditional_matrix, span_tol)
from ..distributions.sample import Draws
from ..errors import TPNumericalError, TPUsageError
from .backend import Stream, all_finite, get_backend, is_array, stream_seed
from .evaluate import OVERFLOW, Cause, eval_array, eval_fn, first_nonfinite
from .lowrank import rank_one_value
from .memory import side_products
from .plan import RunPlan
from .schedule import Step, inputs

#: ``(trial, step index, steps, what, fraction done)``: progress inside a blocked product
OnStep = Callable[[int, int, int, str, float], None]
Read = Callable[[int], object]
#: the spawn-key tag of the row-block streams of a blocked matrix on an array backend
BLOCK_TAG = 1


class Executor:
    """Interprets ``plan``: ``run_trial(t)`` returns the outputs of trial t.  ``on_step`` is
    told the progress of blocked products.  Building one does no work."""

    def __init__(self, plan: RunPlan, on_step: OnStep | None = None) -> None:
        self.plan = plan
        self.program, self.sizes, self.dtype, self.seed = plan.program, plan.sizes, plan.dtype, plan.seed
        self.blocked = plan.blocked
        self.on_step = on_step
        self.backend = get_backend(plan.backend, plan.device)
        self.xp, self.numpy = self.backend.xp, self.backend.is_numpy
        builtins = self.backend.builtins
        self.evaluate: Callable[[ir.Fn, Read], object] = (
            eval_fn if self.numpy else lambda fn, read: eval_array(fn, read, builtins))
        #: the conditional matrices of the trial run in pieces (``run_trial`` with columns)
        self.kept: tuple[int, dict[int, ConditionalMatrix]] = (-1, {})
        #: (matrix, transposed) -> products on that side: the columns a conditional matrix reserves
        self.side_uses = side_products(plan.program, plan.schedule) if plan.conditional else {}

    def stream(self, trial: int, var: int, *more: int) -> Stream:
        """The backend stream of ``var`` in ``trial`` (``more``: a block's tag and index), keyed by
        ``SeedSequence(seed, spawn_key=(trial, var, *more))``."""
        return self.backend.stream(stream_seed(self.seed, trial, var, *more), self.dtype)

    def rng(self, trial: int, var: int) -> np.random.Generator:
        """The stream of ``var`` in ``trial``: ``SeedSequence(seed, spawn_key=(trial, var))``."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(trial, var)))

    def matrix(self, trial: int, var: int, keep: bool = False):
        """The matrix ``var`` of ``trial``: an array, a BlockedMatrix in blocked mode, a
        ConditionalMatrix in conditional mode (``keep``: the same object for every piece of the
        trial, see :meth:`run_trial`)."""
        e, plan = self.program.eqns[var], self.plan
        rows, cols = self.sizes[e.rows], self.sizes[e.cols]
        if plan.conditional:
            if not keep:
                return self.conditional_matrix(trial, var, rows, cols)
            if self.kept[0] != trial:
                self.kept = (trial, {})
            kept = self.kept[1]
            if var not in kept:
                kept[var] = self.conditional_matrix(trial, var, rows, cols)
            return kept[var]
        if not self.numpy:
            if plan.blocked:
                return StreamBlockedMatrix(lambda b: self.stream(trial, var, BLOCK_TAG, b), plan.specs[var],
                                           rows, cols, self.xp, plan.rows_per_block(rows, cols))
            return D.draw_matrix(self.stream(trial, var), plan.specs[var], rows, cols)
        if plan.blocked:
            return BlockedMatrix(matrix_key(self.seed, trial, var), plan.specs[var], rows, cols,
                                 self.dtype, plan.rows_per_block(rows, cols), plan.threads)
        return D.sample_matrix(self.rng(trial, var), plan.specs[var], rows, cols, self.dtype,
                               draw_dtype=np.float64)

    def conditional_matrix(self, trial: int, var: int, rows: int, cols: int):
        """The conditional matrix ``var`` of ``trial`` (:func:`~tensorprog.distributions.conditional.conditional_matrix`):
        its random numbers (mvt: the row scales' gamma draws first, then the Gaussian innovations,
        product after product) from the stream of (trial, var); on numpy a float32 run rounds the
        float64 draws."""
        spec = self.plan.specs[var]
        reserve = (self.side_uses.get((var, False), 0), self.side_uses.get((var, True), 0))
        tol = span_tol(self.dtype)
        if self.numpy:
            rng = self.rng(trial, var)
            draws = Draws(rng, self.dtype, np.dtype(np.float64))

            def normal(shape: tuple[int, ...]) -> np.ndarray:
                return draws.fill("standard_normal", shape)

            def gamma(alpha: float, shape: tuple[int, ...]) -> np.ndarray:
                return rng.standard_gamma(alpha, size=shape)
            return conditional_matrix(spec, rows, cols, normal, gamma, np, self.dtype, None, tol, reserve)
        stream, backend = self.stream(trial, var), self.backend
        return conditional_matrix(spec, rows, cols, stream.normal, stream.gamma, self.xp,
                                  backend.dtype(self.dtype), backend.dev, tol, reserve)

    def initial_vectors(self, trial: int, columns: bool) -> dict[int, np.ndarray]:
        """The initial vectors an output needs, group by group (one (n, 1) column each if ``columns``)."""
        env: dict[int, np.ndarray] = {}
        for g in self.program.groups:
            if any(v in self.plan.schedule.needed for v in g.members) and not self.numpy:
                n = self.sizes[g.width]
                drawn = D.draw_vectors(self.stream(trial, g.members[0]), g.dist, len(g.members), n)
                env.update((v, self.xp.reshape(drawn[k, :], (n, 1)) if columns else drawn[k, :])
                           for k, v in enumerate(g.members))
            elif any(v in self.plan.schedule.needed for v in g.members):
                draws = D.sample_vectors(self.rng(trial, g.members[0]), g.dist, len(g.members),
                                         self.sizes[g.width], self.dtype, draw_dtype=np.float64)
                env.update(zip(g.members, draws[:, :, None] if columns else draws))
        return env

    def run_trial(self, trial: int, columns: dict[int, np.ndarray] | None = None) -> dict[str, object]:
        """One trial's outputs.  With ``columns`` {initial vector: array (n, P)} the program runs
        on P inputs at once (every vector is an (n, P) array, every scalar a (P,) array): the
        same matrices for all P, as for the pairs of a dataset kernel."""
        wide = columns is not None
        env: dict[int, object] = self.initial_vectors(trial, wide)
        if columns and self.numpy:
            env.update({v: np.asarray(a, self.dtype) for v, a in columns.items()})
        elif columns:
            env.update({v: self.backend.asarray(a, self.dtype) for v, a in columns.items()})

        def read(var: int):
            if var not in env:           # a matrix, sampled when first needed
                env[var] = self.matrix(trial, var, keep=wide)
            return env[var]

        steps, last_use, rules = self.plan.schedule.steps, self.plan.schedule.last_use, FUNCTION_RULES
        evaluate = self.evaluate
        with np.errstate(all="ignore"):
            for i, step in enumerate(steps):
                if step.is_gemm:
                    if self.on_step is not None:
                        self._watch(trial, i, step, read)
                    results = self._gemm(step, read, wide)
                elif isinstance(step.eqns[0], ir.LOW_RANK_OPS):
                    results = self._low_rank(step, read, wide)
                else:
                    e = step.eqns[0]
                    results = [rules[type(e)](self, e, evaluate(e.fn, read), wide)]
                for e, value in zip(step.eqns, results):
                    if not isinstance(e, ir.RankOne):         # (a link: its vectors were checked)
                        self._check_finite(e, value, trial, read)
                    env[e.var] = value
                for e in step.eqns:
                    for v in inputs(e):
                        if last_use.get(v, -1) <= i:
                            env.pop(v, None)
        if wide:
            return {o.name: np.ravel(self.backend.to_numpy(read(o.var))) for o in self.program.outputs}
        return {o.name: float(read(o.var)) for o in self.program.outputs}

    def _low_rank(self, step: Step, read: Read, wide: bool) -> list:
        """A RankOne link (the chain's terms, stacked), or LowRank products by one chain
        (:mod:`.lowrank`): on numpy, one trial, the step's arguments side by side, one pass."""
        first = step.eqns[0]
        if isinstance(first, ir.RankOne):
            return [rank_one_value(self.program, self.sizes, first, read, self.numpy and not wide)]
        link = read(first.terms)
        if len(step.eqns) > 1 and link.stack is not None:
            block = link.matmul(np.stack([read(e.arg) for e in step.eqns], axis=1), first.transposed)
            return list(block.T)
        return [link.matmul(read(e.arg), e.transposed, self.xp) for e in step.eqns]

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

    def _gemm(self, step: Step, read: Read, wide: bool) -> list:
        """The MatMuls of ``step`` (one matrix, one transposition) as one product W [x¹ … x^B]."""
        first = step.eqns[0]
        w = read(first.matrix)
        if isinstance(w, (ConditionalMatrix, ConditionalHaar)):
            def product(x):
                try:
                    return w.matmul(x, first.transposed)
                except ConditioningError as err:
                    raise TPUsageError(f"conditional mode: {err}; use a larger width or run without "
                                       "--conditional", first.pos.line, first.pos.col, self.program.file,
                                       self.program.source) from None
        elif isinstance(w, (BlockedMatrix, StreamBlockedMatrix)):
            def product(x):
                return w.matmul(x, first.transposed)
        else:
            w = w.T if first.transposed else w

            def product(x):
                return w @ x
        if len(step.eqns) == 1:
            return [product(read(first.arg))]
        if not self.numpy:
            return self._batched(step, product, read, wide)
        if wide:                              # (n, P_k) blocks side by side: still one GEMM
            args = [read(e.arg) for e in step.eqns]
            block = product(np.concatenate(args, axis=1))
            return np.split(block, np.cumsum([a.shape[1] for a in args])[:-1], axis=1)
        block = product(np.stack([read(e.arg) for e in step.eqns], axis=1))
        return list(block.T)

    def _batched(self, step: Step, product: Callable, read: Read, wide: bool) -> list:
        """:meth:`_gemm`'s batch on an array backend: the arguments side by side, one product."""
        xp, args = self.xp, [read(e.arg) for e in step.eqns]
        if wide:                              # (n, P_k) blocks side by side
            block = product(xp.concat(args, axis=1))
            ends = np.cumsum([a.shape[1] for a in args])
            return [block[:, int(end - a.shape[1]):int(end)] for a, end in zip(args, ends)]
        block = product(xp.stack(args, axis=1))
        return [block[:, k] for k in range(len(args))]

    def _check_finite(self, e: ir.Eqn, value, trial: int, read: Read) -> None:
        finite = np.all(np.isfinite(value)) if self.numpy else all_finite(self.backend, value)
        if finite:
            return
        # off the hot path: which operation, raising which floating-point event (on an array
        # backend, found on host copies of the operands, with numpy)
        backend = self.backend
        host = read if self.numpy else (lambda var: backend.to_numpy(read(var)))
        cause = first_nonfinite(e.fn, host) if isinstance(e, ir.FUNCTION_OPS) else None
        if cause is None:          # finite operands: the product, the mean or the cast overflowed
            cause = Cause(OVERFLOW, OVERFLOWS_IN.get(type(e), f"the conversion to {self.dtype.name}"))
        what = ir.show_eqn(e).split("    #")[0]
        raise TPNumericalError(f"{cause.describe()} first produced here (trial {trial}, {what})",
                               e.pos.line, e.pos.col, self.program.file, self.program.source)


# ---- the rules of the function equations: value of the equation from the value v of its tree
def nonlin_value(ex: Executor, e: ir.Nonlin, v, wide: bool) -> np.ndarray:
    """A vector of the equation's width: v itself, or a function of scalars only broadcast
    to every coordinate (to (n, P) if ``wide``)."""
    if not ex.numpy:
        return nonlin_array(ex, e, v, wide)
    size = ex.sizes[e.width]
    if wide and np.ndim(v) < 2:
        return np.broadcast_to(np.asarray(v, ex.dtype), (size, np.size(v))).copy()
    if np.ndim(v) == 0:
        return np.broadcast_to(np.asarray(v, ex.dtype), (size,)).copy()
    return np.asarray(v, ex.dtype)


def nonlin_array(ex: Executor, e: ir.Nonlin, v, wide: bool):
    """:func:`nonlin_value` on an array backend (v: an array, or a Python float)."""
    xp, size, backend = ex.xp, ex.sizes[e.width], ex.backend
    dt = backend.dtype(ex.dtype)
    if not is_array(v):
        v = xp.asarray(float(v), dtype=dt, device=backend.dev)
    elif v.dtype != dt:
        v = xp.astype(v, dt)
    if wide and v.ndim < 2:
        row = xp.reshape(v, (1, -1))
        return xp.zeros((size, row.shape[1]), dtype=dt, device=backend.dev) + row
    if v.ndim == 0:
        return xp.zeros((size,), dtype=dt, device=backend.dev) + v
    return v


def moment_value(ex: Executor, e: ir.Moment, v, wide: bool):
    """The empirical moment (1/n) Σ_α v_α (per column if ``wide``)."""
    if not ex.numpy:
        if not is_array(v):
            return v
        return ex.xp.mean(v, axis=0) if wide else float(ex.xp.mean(v))
    return np.mean(v, axis=0) if wide else float(np.mean(v))


def scalar_value(ex: Executor, e: ir.Scalar, v, wide: bool):
    """A scalar: v itself (per column if ``wide``)."""
    return v if wide else float(v)


#: equation kind -> its rule (MatMuls run by steps, as GEMMs; matrices and initial vectors are drawn)
FUNCTION_RULES: dict[type, Callable[[Executor, ir.Eqn, object, bool], object]] = {
    ir.Nonlin: nonlin_value, ir.Moment: moment_value, ir.Scalar: scalar_value}
#: what overflowed when a non-finite value comes from finite operands (else: the dtype conversion)
OVERFLOWS_IN: dict[type, str] = {ir.MatMul: "the matrix product", ir.Moment: "the mean",
                                 ir.LowRank: "the product by the rank-one updates"}
