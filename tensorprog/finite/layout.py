"""How a trial lays out its values: one input (narrow) or P inputs side by side (wide).

A trial of the executor (:mod:`.executor`) runs either on the program's own initial vectors
(:class:`Narrow`: every vector an array (n,), every scalar a Python float) or, for the pairs of a
dataset kernel, on P inputs at once (:class:`Wide`: every vector (n, P), every scalar a (P,)
array, the same matrices for all P).  A layout knows what differs between the two: the shape of
an initial vector, how the arguments of one GEMM are put side by side and taken apart, how a
function of scalars only becomes a vector, moments, scalars and outputs.  It builds on the run's
array operations (:mod:`.ops`), so one layout serves every backend.

**Adding a layout**: a subclass of :class:`Layout` implementing its methods, chosen in
:meth:`~.executor.Executor.run_trial`.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .ops import Ops


class Layout:
    """The shapes of one trial's values, on the array operations ``ops``.  ``keeps_matrices``:
    a trial may run in pieces (conditional matrices are kept from piece to piece);
    ``stacks_links``: RankOne links are stacked in place (:mod:`.lowrank`)."""

    keeps_matrices = False

    def __init__(self, ops: Ops) -> None:
        self.ops = ops
        self.stacks_links = False

    def initial(self, row):
        """An initial vector from its row (n,) of the group's draws."""
        raise NotImplementedError

    def vector(self, v, size: int):
        """A vector of width ``size`` from the value v of its function: v as an array of the run's
        dtype, or a function of scalars only broadcast to every coordinate."""
        raise NotImplementedError

    def batch(self, args: Sequence):
        """The arguments of one GEMM side by side: one block."""
        raise NotImplementedError

    def unbatch(self, block, args: Sequence) -> list:
        """The products of the arguments ``args`` from the product of their block."""
        raise NotImplementedError

    def moment(self, v):
        """The empirical moment (1/n) Σ_α v_α."""
        raise NotImplementedError

    def scalar(self, v):
        """A scalar equation's value from its function's value v."""
        raise NotImplementedError

    def output(self, v):
        """An output as the trial reports it."""
        raise NotImplementedError


class Narrow(Layout):
    """One input: vectors (n,), scalars Python floats; a GEMM's arguments are the columns of one
    block (n, B)."""

    def __init__(self, ops: Ops) -> None:
        super().__init__(ops)
        self.stacks_links = ops.stacks_links

    def initial(self, row):
        return row

    def vector(self, v, size):
        a = self.ops.array(v)
        return self.ops.fill(a, (size,)) if a.ndim == 0 else a

    def batch(self, args):
        return self.ops.stack(args)

    def unbatch(self, block, args):
        return self.ops.unstack(block)

    def moment(self, v):
        return self.ops.mean(v)

    def scalar(self, v):
        return float(v)

    def output(self, v):
        return float(v)


class Wide(Layout):
    """P inputs side by side: vectors (n, P), scalars (P,) arrays; a GEMM's arguments (n, P_k) are
    concatenated into one block (n, Σ P_k).  A trial may run in pieces of columns."""

    keeps_matrices = True

    def initial(self, row):
        return self.ops.column(row)

    def vector(self, v, size):
        a = self.ops.array(v)
        return self.ops.fill(a, (size, math.prod(a.shape))) if a.ndim < 2 else a

    def batch(self, args):
        return self.ops.concat(args)

    def unbatch(self, block, args):
        return self.ops.split(block, args)

    def moment(self, v):
        return self.ops.column_means(v)

    def scalar(self, v):
        return v

    def output(self, v):
        return np.ravel(self.ops.to_host(v))
