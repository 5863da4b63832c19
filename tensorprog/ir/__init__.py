"""The IR: one flat, single-assignment list of equations shared by both back ends.

:mod:`.nodes` defines the node vocabulary: function trees (``Fn``) and equations (``Eqn``).
"""
from .nodes import (FUNCTION_OPS, SCALAR_OPS, VECTOR_OPS, Bin, Call, Const, Eqn, Fn, Group,
                    InitVector, MatMul, Matrix, Moment, Neg, Nonlin, Output, Pos, Program, Ref,
                    Scalar, calls, refs, show_eqn, show_fn)

__all__ = ["FUNCTION_OPS", "SCALAR_OPS", "VECTOR_OPS", "Bin", "Call", "Const", "Eqn", "Fn", "Group",
           "InitVector", "MatMul", "Matrix", "Moment", "Neg", "Nonlin", "Output", "Pos", "Program",
           "Ref", "Scalar", "calls", "refs", "show_eqn", "show_fn"]
