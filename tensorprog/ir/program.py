"""A whole program in the IR: its equations, groups of initial vectors, outputs and widths."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .nodes import Eqn, Group, Output
from .printer import show_program


@dataclass(frozen=True)
class Program:
    """The flat single-assignment list of equations (``eqns[k]`` binds ``%k``), the jointly
    drawn groups of initial vectors, the outputs, the widths (``dims``: name -> ratio to n)
    and the params the program was lowered with, and where its source came from."""
    eqns: tuple[Eqn, ...]
    groups: tuple[Group, ...]
    outputs: tuple[Output, ...]
    dims: dict[str, float] = field(default_factory=dict)   # width name -> ratio to n
    params: dict[str, float] = field(default_factory=dict)
    file: str = "<string>"
    source: str = ""
    base_dir: str = "."
    warnings: tuple[str, ...] = ()      # "FILE:LINE:COL: warning ..." of the lowering (e.g. rounding)
    #: var -> the program's name for it, the first name bound to it (``a[2]``, ``da3``); unnamed
    #: intermediates are absent (printers show them as ``%k``)
    names: dict[int, str] = field(default_factory=dict, compare=False)
    #: a traced lowering's leaf expressions in the params (``symbolic.traced.SymbolicLeaves``),
    #: for ``compile --symbolic``; None for the usual lowering
    leaves: Any = field(default=None, compare=False, repr=False)
    #: how it was lowered (to lower it again, e.g. expanded): the params it was given (-D) and the
    #: node bound; not part of what the program is
    overrides: dict[str, float] = field(default_factory=dict, compare=False)
    max_nodes: int = field(default=1_000_000, compare=False)

    @property
    def low_rank(self) -> bool:
        """Whether products by updated matrices are RankOne chains (LowRank equations) rather than
        expanded (see :mod:`tensorprog.lang.matrices`)."""
        from .nodes import LOW_RANK_OPS
        return any(isinstance(e, LOW_RANK_OPS) for e in self.eqns)

    def eqn(self, var: int) -> Eqn:
        return self.eqns[var]

    def __str__(self) -> str:
        return show_program(self)
