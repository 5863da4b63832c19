"""The IR as text: function trees, equations and whole programs (``str(program.ir)``).

A function tree prints fully parenthesised (``(%1 * tanh(%2))``, constants with ``%g``);
an equation prints as ``%k = <kind> ...    # line L``, one rule per equation kind.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .nodes import Eqn, Fn, InitVector, LowRank, MatMul, Matrix, Moment, Nonlin, RankOne, Scalar
from .walk import Rules, fold

if TYPE_CHECKING:
    from .program import Program

#: how each node of a function tree prints, given its printed operands
FN_RULES: Rules[str] = Rules(
    ref=lambda node: f"%{node.var}",
    const=lambda node: f"{node.value:g}",
    call=lambda node, args: f"{node.name}({', '.join(args)})",
    bin=lambda node, lhs, rhs: f"({lhs} {node.op} {rhs})",
    neg=lambda node, operand: f"-{operand}")


def show_fn(fn: Fn) -> str:
    """A function tree as text, e.g. ``(%1 * tanh(%2))``."""
    return fold(fn, FN_RULES)


def _function(e) -> str:
    return f"%{e.var} = {type(e).__name__.lower()} {show_fn(e.fn)}"


#: equation kind -> its text without the position comment
EQN_RULES: dict[type, Callable[..., str]] = {
    InitVector: lambda e: f"%{e.var} = init {e.name} (group {e.group}.{e.member}) :{e.width}",
    Matrix: lambda e: f"%{e.var} = matrix {e.name} {e.dist.family}(var={e.dist.var:g}) {e.rows}x{e.cols}",
    MatMul: lambda e: f"%{e.var} = matmul %{e.matrix}{'.T' if e.transposed else ''} @ %{e.arg}",
    Nonlin: _function,
    Moment: _function,
    Scalar: _function,
    RankOne: lambda e: (f"%{e.var} = rankone {'%' + str(e.prev) + ' + ' if e.prev >= 0 else ''}"
                        f"{e.scale:g}{' * %' + str(e.coeff) if e.coeff >= 0 else ''} * outer(%{e.left}, %{e.right}) "
                        f"/ |{e.denom}| {e.rows}x{e.cols}"),
    LowRank: lambda e: f"%{e.var} = lowrank %{e.terms}{'.T' if e.transposed else ''} @ %{e.arg}",
}


def show_eqn(e: Eqn) -> str:
    """One equation as text, with its source line: ``%3 = matmul %1 @ %2    # line 4``."""
    return f"{EQN_RULES[type(e)](e)}    # line {e.pos.line}"


def show_program(program: "Program") -> str:
    """The equations, one per line, then the outputs (``out NAME = %k``)."""
    return "\n".join(show_eqn(e) for e in program.eqns) + "\n" + "\n".join(
        f"out {o.name} = %{o.var}" for o in program.outputs)
