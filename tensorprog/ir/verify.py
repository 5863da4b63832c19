"""The IR's invariants, checked after lowering: one rule per equation kind, then the groups
and the outputs.

What the back ends rely on (a violation is a bug in tensorprog, not in the user's program,
and raises :class:`IRError` naming the equation):

* single assignment: ``eqns[k].var == k``, and every variable an equation reads is bound
  by an earlier equation (so each variable is bound exactly once, before its uses);
* ``MatMul(W, x, T)``: ``W`` is a ``Matrix``; ``x`` is a vector of W's input width (its
  cols, or its rows when transposed); the result has W's output width;
* ``RankOne``: its previous link (if any) a RankOne of its shape, its coefficient (if any) a
  scalar, its left and right vectors of its rows' and cols' widths; ``LowRank(terms, x, T)``:
  ``terms`` a RankOne, x of its input width, the result of its output width;
* ``Nonlin`` / ``Moment`` / ``Scalar``: ``args == refs(fn)`` (as the front end emits them);
  the arguments of a Nonlin or Moment are vectors of the equation's width or scalars, those
  of a Scalar scalars only; every ``Call`` names a builtin with its arity, every ``Bin`` an
  operator of ``ARITHMETIC``;
* widths are declared (``program.dims``); ``InitVector`` k is member ``member`` of group
  ``group``, whose members are exactly such initial vectors of the group's width;
* outputs refer to scalars (``Moment`` or ``Scalar``), under distinct names.
"""
from __future__ import annotations

from typing import Callable

from ..builtins import BUILTINS
from .nodes import (SCALAR_OPS, VECTOR_OPS, Bin, Call, Eqn, InitVector, LowRank, MatMul, Matrix, Moment,
                    Nonlin, RankOne, Ref, Scalar)
from .printer import show_eqn
from .program import Program
from .walk import ARITHMETIC, preorder


class IRError(AssertionError):
    """The IR breaks one of its invariants (a bug in tensorprog): ``where`` names the
    equation (or group, or output), ``why`` the rule it breaks."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"invalid IR at {where}: {why}")
        self.where, self.why = where, why


def _name(e) -> str:
    """The equation as the printer shows it (its repr if it cannot be printed)."""
    try:
        return show_eqn(e).split("    #")[0]
    except Exception:          # a malformed equation: its fields are what went wrong
        return repr(e)


def _fail(e, why: str) -> IRError:
    return IRError(_name(e), why)


def _operand(program: Program, e, var: int) -> Eqn:
    """The equation binding ``var``, which ``e`` reads: it must be bound before ``e``."""
    if not (isinstance(var, int) and 0 <= var < e.var):
        raise _fail(e, f"reads %{var} before it is bound")
    return program.eqns[var]


def _width(program: Program, e, width: str) -> None:
    if width not in program.dims:
        raise _fail(e, f"the width {width!r} is not declared (dims: {', '.join(program.dims)})")


def _check_init(program: Program, e: InitVector) -> None:
    _width(program, e, e.width)
    if not 0 <= e.group < len(program.groups):
        raise _fail(e, f"group {e.group} does not exist ({len(program.groups)} groups)")
    group = program.groups[e.group]
    members = group.members
    if not 0 <= e.member < len(members) or members[e.member] != e.var:
        raise _fail(e, f"it is not member {e.member} of group {e.group} (members {members})")
    if group.width != e.width:
        raise _fail(e, f"its width {e.width} differs from its group's ({group.width})")


def _check_matrix(program: Program, e: Matrix) -> None:
    _width(program, e, e.rows)
    _width(program, e, e.cols)


def _check_matmul(program: Program, e: MatMul) -> None:
    w = _operand(program, e, e.matrix)
    if not isinstance(w, Matrix):
        raise _fail(e, f"%{e.matrix} is not a Matrix but {type(w).__name__}")
    x = _operand(program, e, e.arg)
    if not isinstance(x, VECTOR_OPS):
        raise _fail(e, f"its argument %{e.arg} is not a vector but {type(x).__name__}")
    need, out = (w.rows, w.cols) if e.transposed else (w.cols, w.rows)
    if x.width != need:
        raise _fail(e, f"the matrix maps {need}-vectors, but %{e.arg} has width {x.width}")
    if e.width != out:
        raise _fail(e, f"the result has width {e.width}, not the matrix's output width {out}")


def _check_rank_one(program: Program, e: RankOne) -> None:
    """A link: its previous link a RankOne of its shape, its coefficient a scalar, its vectors of
    the widths ``rows`` (left) and ``cols`` (right)."""
    for width in (e.rows, e.cols, e.denom):
        _width(program, e, width)
    if e.prev >= 0:
        prev = _operand(program, e, e.prev)
        if not isinstance(prev, RankOne) or (prev.rows, prev.cols) != (e.rows, e.cols):
            raise _fail(e, f"%{e.prev} is not a RankOne of shape {e.rows}x{e.cols}")
    if e.coeff >= 0 and not isinstance(_operand(program, e, e.coeff), SCALAR_OPS):
        raise _fail(e, f"its coefficient %{e.coeff} is not a scalar")
    for var, width in ((e.left, e.rows), (e.right, e.cols)):
        v = _operand(program, e, var)
        if not isinstance(v, VECTOR_OPS) or v.width != width:
            raise _fail(e, f"%{var} is not a vector of width {width}")


def _check_low_rank(program: Program, e: LowRank) -> None:
    terms = _operand(program, e, e.terms)
    if not isinstance(terms, RankOne):
        raise _fail(e, f"%{e.terms} is not a RankOne but {type(terms).__name__}")
    x = _operand(program, e, e.arg)
    if not isinstance(x, VECTOR_OPS):
        raise _fail(e, f"its argument %{e.arg} is not a vector but {type(x).__name__}")
    need, out = (terms.rows, terms.cols) if e.transposed else (terms.cols, terms.rows)
    if x.width != need or e.width != out:
        raise _fail(e, f"the terms map {need}-vectors to {out}-vectors, not {x.width} to {e.width}")


def _check_nodes(e, fn) -> tuple[int, ...]:
    """The variables ``fn`` reads (as ``refs``), checking its builtins (arity) and operators."""
    read: dict[int, None] = {}
    for node in preorder(fn):
        kind = type(node)
        if kind is Ref:
            read[node.var] = None
        elif kind is Call:
            builtin = BUILTINS.get(node.name)
            if builtin is None:
                raise _fail(e, f"{node.name} is not a builtin")
            if len(node.args) != builtin.arity:
                raise _fail(e, f"{node.name} takes {builtin.arity} argument(s), not {len(node.args)}")
        elif kind is Bin and node.op not in ARITHMETIC:
            raise _fail(e, f"{node.op!r} is not an arithmetic operator")
    return tuple(read)


def _check_fn(program: Program, e, vectors: bool) -> None:
    """A function equation: ``args == refs(fn)``, bound before, of the right kinds; builtins
    with their arity; operators of ``ARITHMETIC``."""
    read = _check_nodes(e, e.fn)
    if tuple(e.args) != read:
        raise _fail(e, f"args {tuple(e.args)} are not the variables its function reads {read}")
    for var in read:
        a = _operand(program, e, var)
        if isinstance(a, SCALAR_OPS):
            continue
        if not vectors or not isinstance(a, VECTOR_OPS):
            kind = type(a).__name__ if not isinstance(a, VECTOR_OPS) else "vector"
            raise _fail(e, f"its function reads %{var}, a {kind}"
                        f"{'' if vectors else ' (a Scalar reads scalars only)'}")
        if a.width != e.width:
            raise _fail(e, f"it has width {e.width} but reads %{var} of width {a.width}")


def _check_vector_fn(program: Program, e: Nonlin | Moment) -> None:
    _width(program, e, e.width)
    _check_fn(program, e, vectors=True)


def _check_scalar_fn(program: Program, e: Scalar) -> None:
    _check_fn(program, e, vectors=False)


#: equation kind -> its rule (raises :class:`IRError`)
RULES: dict[type, Callable[[Program, Eqn], None]] = {
    InitVector: _check_init,
    Matrix: _check_matrix,
    MatMul: _check_matmul,
    Nonlin: _check_vector_fn,
    Moment: _check_vector_fn,
    Scalar: _check_scalar_fn,
    RankOne: _check_rank_one,
    LowRank: _check_low_rank,
}


def _check_groups(program: Program) -> None:
    for g, group in enumerate(program.groups):
        for m, var in enumerate(group.members):
            e = program.eqns[var] if 0 <= var < len(program.eqns) else None
            if not (isinstance(e, InitVector) and e.group == g and e.member == m):
                raise IRError(f"group {g}", f"member {m} (%{var}) is not its InitVector")


def _check_outputs(program: Program) -> None:
    names: set[str] = set()
    for o in program.outputs:
        where = f"out {o.name} = %{o.var}"
        if o.name in names:
            raise IRError(where, f"the output {o.name} is defined twice")
        names.add(o.name)
        if not 0 <= o.var < len(program.eqns):
            raise IRError(where, f"%{o.var} is not bound")
        e = program.eqns[o.var]
        if not isinstance(e, SCALAR_OPS):
            raise IRError(where, f"an output must be a scalar, and %{o.var} is a {type(e).__name__}")


def verify(program: Program) -> Program:
    """Check every invariant of ``program`` (see the module's docstring); return it unchanged,
    or raise :class:`IRError` at the first violation."""
    for k, e in enumerate(program.eqns):
        rule = RULES.get(type(e))
        if rule is None:
            raise IRError(f"equation {k}", f"{type(e).__name__} is not an equation kind")
        if e.var != k:
            raise _fail(e, f"it binds %{e.var} at position {k} (each variable is bound once, "
                        "by the equation at its index)")
        rule(program, e)
    _check_groups(program)
    _check_outputs(program)
    return program
