"""What the executor needs of an array library, one strategy object per kind of backend.

The executor's rules (:mod:`.executor`) are written once; everything that differs between numpy
and the other array backends (:mod:`.backend`: torch, jax, cupy, array_api_strict) is an
operation of the run's :class:`Ops`, chosen once per :class:`~.executor.Executor` by
:func:`ops_for`:

* **drawing**: a dense, blocked or conditional matrix, and the initial vectors of a group, from
  the stream of (seed, trial, var);
* **evaluation** of a function tree (:func:`~.evaluate.eval_fn` / :func:`~.evaluate.eval_array`);
* **array primitives** the layouts (:mod:`.layout`) build on: a value as an array of the run's
  dtype, a value broadcast to a shape, arguments side by side as the columns of one block (for
  one GEMM) and back, means, the finiteness check, host transfers.

:class:`NumpyOps` keeps numpy's own code (Generators with float64 draws rounded to the run's
dtype, ``np.split``, in-place sampling): the numbers of every earlier version, bit for bit.
:class:`ArrayApiOps` uses the backend's array-API namespace ``xp`` only, its streams
(:func:`~.backend.stream_seed`: the same keys, the library's own generator) and its builtins.

**Adding a backend**: a :class:`~.backend.Backend` (its ``xp``, streams, builtins) is enough when
the array-API operations of :class:`ArrayApiOps` fit it; a library that needs other operations
(as numpy does, to keep its numbers) gets its own subclass of :class:`Ops`, returned by
:func:`ops_for`.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import distributions as D
from .. import ir
from ..distributions.blocked import BlockedMatrix, StreamBlockedMatrix, matrix_key
from ..distributions.conditional import conditional_matrix, span_tol
from ..distributions.sample import Draws
from .backend import Backend, Stream, all_finite, get_backend, is_array, stream_seed
from .evaluate import eval_array, eval_fn
from .plan import RunPlan

Read = Callable[[int], object]
#: the spawn-key tag of the row-block streams of a blocked matrix on an array backend
BLOCK_TAG = 1


class Ops:
    """The operations of one run (``plan``) on one backend.  Subclasses implement every method;
    ``stacks_links``: RankOne links may keep their terms in growable in-place stacks
    (:mod:`.lowrank`)."""

    stacks_links = False

    def __init__(self, plan: RunPlan, backend: Backend) -> None:
        self.plan, self.backend, self.xp = plan, backend, backend.xp
        self.seed, self.dtype = plan.seed, plan.dtype

    def rng(self, trial: int, var: int) -> np.random.Generator:
        """numpy's stream of ``var`` in ``trial``: ``SeedSequence(seed, spawn_key=(trial, var))``
        (on every backend: the kernel tools draw their inputs from it)."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(trial, var)))

    # ---- drawing
    def dense(self, trial: int, var: int, rows: int, cols: int):
        """The dense rows × cols matrix ``var`` of ``trial``."""
        raise NotImplementedError

    def blocked(self, trial: int, var: int, rows: int, cols: int):
        """The matrix ``var`` of ``trial``, regenerated row block by row block at each product."""
        raise NotImplementedError

    def conditional(self, trial: int, var: int, rows: int, cols: int, reserve: tuple[int, int]):
        """The conditional matrix ``var`` of ``trial`` (``reserve``: columns on each side)."""
        raise NotImplementedError

    def vectors(self, trial: int, group: ir.Group, n: int):
        """The initial vectors of ``group``, drawn together: an array (members, n)."""
        raise NotImplementedError

    # ---- evaluation and array primitives
    def evaluate(self, fn: ir.Fn, read: Read):
        """The value of a function tree, coordinatewise."""
        raise NotImplementedError

    def from_host(self, a) -> object:
        """A host array as an array of the run's dtype on the backend."""
        raise NotImplementedError

    def array(self, v) -> object:
        """``v`` (an array or a Python float) as an array of the run's dtype."""
        raise NotImplementedError

    def fill(self, a, shape: tuple[int, ...]):
        """A new array of ``shape`` whose rows are ``a`` (0-d, or the last axis of ``shape``)."""
        raise NotImplementedError

    def column(self, row):
        """A vector (n,) as one column (n, 1)."""
        raise NotImplementedError

    def stack(self, args: Sequence) -> object:
        """Vectors (n,) as the columns of one block (n, B)."""
        raise NotImplementedError

    def unstack(self, block) -> list:
        """The columns of a block (n, B), as vectors."""
        raise NotImplementedError

    def concat(self, args: Sequence) -> object:
        """Blocks (n, P_k) side by side, one block (n, Σ P_k)."""
        raise NotImplementedError

    def split(self, block, args: Sequence) -> list:
        """A block back into pieces of the widths of ``args`` (inverse of :meth:`concat`)."""
        raise NotImplementedError

    def mean(self, v) -> float:
        """(1/n) Σ_α v_α, a Python float."""
        raise NotImplementedError

    def column_means(self, v):
        """The mean of each column of v (n, P)."""
        raise NotImplementedError

    def finite(self, value) -> bool:
        """Every entry of ``value`` is finite."""
        raise NotImplementedError

    def host_reader(self, read: Read) -> Read:
        """``read`` with host (numpy) values, for the error path."""
        raise NotImplementedError

    def to_host(self, a) -> np.ndarray:
        """A value as a numpy array on the host."""
        return self.backend.to_numpy(a)


class NumpyOps(Ops):
    """numpy, bit for bit as ever: Generators of the (trial, var) keys drawing float64 numbers
    rounded to the run's dtype, Philox-blocked matrices, :func:`~.evaluate.eval_fn`."""

    stacks_links = True
    evaluate = staticmethod(eval_fn)

    def dense(self, trial, var, rows, cols):
        return D.sample_matrix(self.rng(trial, var), self.plan.specs[var], rows, cols, self.dtype,
                               draw_dtype=np.float64)

    def blocked(self, trial, var, rows, cols):
        plan = self.plan
        return BlockedMatrix(matrix_key(self.seed, trial, var), plan.specs[var], rows, cols,
                             self.dtype, plan.rows_per_block(rows, cols), plan.threads)

    def conditional(self, trial, var, rows, cols, reserve):
        """Its random numbers (mvt: the row scales' gamma draws first, then the Gaussian
        innovations, product after product) from the stream of (trial, var); a float32 run
        rounds the float64 draws."""
        rng = self.rng(trial, var)
        draws = Draws(rng, self.dtype, np.dtype(np.float64))

        def normal(shape: tuple[int, ...]) -> np.ndarray:
            return draws.fill("standard_normal", shape)

        def gamma(alpha: float, shape: tuple[int, ...]) -> np.ndarray:
            return rng.standard_gamma(alpha, size=shape)
        return conditional_matrix(self.plan.specs[var], rows, cols, normal, gamma, np, self.dtype, None,
                                  span_tol(self.dtype), reserve)

    def vectors(self, trial, group, n):
        return D.sample_vectors(self.rng(trial, group.members[0]), group.dist, len(group.members), n,
                                self.dtype, draw_dtype=np.float64)

    def from_host(self, a):
        return np.asarray(a, self.dtype)

    def array(self, v):
        return np.asarray(v, self.dtype)

    def fill(self, a, shape):
        return np.broadcast_to(a, shape).copy()

    def column(self, row):
        return row[:, None]

    def stack(self, args):
        return np.stack(args, axis=1)

    def unstack(self, block):
        return list(block.T)

    def concat(self, args):
        return np.concatenate(args, axis=1)

    def split(self, block, args):
        return np.split(block, np.cumsum([a.shape[1] for a in args])[:-1], axis=1)

    def mean(self, v):
        return float(np.mean(v))

    def column_means(self, v):
        return np.mean(v, axis=0)

    def finite(self, value):
        return bool(np.all(np.isfinite(value)))

    def host_reader(self, read):
        return read


class ArrayApiOps(Ops):
    """Any array-API backend: the backend's streams (:meth:`stream`), stream-blocked matrices,
    :func:`~.evaluate.eval_array` with the backend's builtins; scalars of the program stay
    Python floats."""

    def __init__(self, plan: RunPlan, backend: Backend) -> None:
        super().__init__(plan, backend)
        self.dt = backend.dtype(self.dtype)
        builtins = backend.builtins
        self.evaluate = lambda fn, read: eval_array(fn, read, builtins)

    def stream(self, trial: int, var: int, *more: int) -> Stream:
        """The backend stream of ``var`` in ``trial`` (``more``: a block's tag and index), keyed by
        ``SeedSequence(seed, spawn_key=(trial, var, *more))``."""
        return self.backend.stream(stream_seed(self.seed, trial, var, *more), self.dtype)

    def dense(self, trial, var, rows, cols):
        return D.draw_matrix(self.stream(trial, var), self.plan.specs[var], rows, cols)

    def blocked(self, trial, var, rows, cols):
        plan = self.plan
        return StreamBlockedMatrix(lambda b: self.stream(trial, var, BLOCK_TAG, b), plan.specs[var],
                                   rows, cols, self.xp, plan.rows_per_block(rows, cols))

    def conditional(self, trial, var, rows, cols, reserve):
        stream = self.stream(trial, var)
        return conditional_matrix(self.plan.specs[var], rows, cols, stream.normal, stream.gamma, self.xp,
                                  self.dt, self.backend.dev, span_tol(self.dtype), reserve)

    def vectors(self, trial, group, n):
        return D.draw_vectors(self.stream(trial, group.members[0]), group.dist, len(group.members), n)

    def from_host(self, a):
        return self.backend.asarray(a, self.dtype)

    def array(self, v):
        if not is_array(v):
            return self.xp.asarray(float(v), dtype=self.dt, device=self.backend.dev)
        return v if v.dtype == self.dt else self.xp.astype(v, self.dt)

    def fill(self, a, shape):
        xp = self.xp
        return xp.zeros(shape, dtype=self.dt, device=self.backend.dev) + xp.reshape(a, shape[1:])

    def column(self, row):
        return self.xp.reshape(row, (row.shape[0], 1))

    def stack(self, args):
        return self.xp.stack(args, axis=1)

    def unstack(self, block):
        return [block[:, k] for k in range(block.shape[1])]

    def concat(self, args):
        return self.xp.concat(args, axis=1)

    def split(self, block, args):
        ends = np.cumsum([a.shape[1] for a in args])
        return [block[:, int(end - a.shape[1]):int(end)] for a, end in zip(args, ends)]

    def mean(self, v):
        return float(self.xp.mean(v)) if is_array(v) else v

    def column_means(self, v):
        return self.xp.mean(v, axis=0) if is_array(v) else v

    def finite(self, value):
        return all_finite(self.backend, value)

    def host_reader(self, read):
        return lambda var: self.backend.to_numpy(read(var))


def ops_for(plan: RunPlan) -> Ops:
    """The operations of ``plan``'s backend: numpy's own, or the array-API ones."""
    backend = get_backend(plan.backend, plan.device)
    return (NumpyOps if backend.is_numpy else ArrayApiOps)(plan, backend)
