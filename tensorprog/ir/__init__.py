"""The IR: one flat, single-assignment list of equations shared by both back ends.

* :mod:`.nodes`: the node vocabulary, function trees (``Fn``) and equations (``Eqn``);
* :mod:`.walk`: the one walker over function trees (``fold``, ``subtrees``, ``map_refs``,
  ``refs``, ``calls``) and ``ARITHMETIC``, the one table of binary operators;
* :mod:`.printer`: the IR as text (``show_fn``, ``show_eqn``, ``str(program)``);
* :mod:`.program`: ``Program``, a whole lowered program;
* :mod:`.outputs`: arrays of outputs (``out K[i, j] = ...``) as they are reported;
* :mod:`.verify`: the invariants the back ends rely on, checked after lowering (``IRError``).
"""
from .nodes import (FUNCTION_OPS, LOW_RANK_OPS, SCALAR_OPS, VECTOR_OPS, Bin, Call, Const, Eqn, Fn, Group,
                    InitVector, LowRank, MatMul, Matrix, Moment, Neg, Nonlin, Output, Pos, RankOne, Ref,
                    Scalar)
from .outputs import OutputArray, jsonable, npz_arrays, output_table
from .printer import show_eqn, show_fn
from .program import Program
from .verify import IRError, verify
from .walk import ARITHMETIC, Rules, calls, children, fold, map_refs, preorder, refs, subtrees

__all__ = ["FUNCTION_OPS", "LOW_RANK_OPS", "LowRank", "RankOne", "SCALAR_OPS", "VECTOR_OPS", "Bin", "Call", "Const", "Eqn", "Fn", "Group",
           "InitVector", "MatMul", "Matrix", "Moment", "Neg", "Nonlin", "Output", "Pos", "Program",
           "Ref", "Scalar", "OutputArray", "jsonable", "npz_arrays", "output_table", "calls", "refs", "show_eqn", "show_fn", "IRError", "verify",
           "ARITHMETIC", "Rules", "fold", "children", "map_refs", "preorder", "subtrees"]
