"""Sweeps: a program's outputs over a grid of param values (``tpc sweep``, ``Program.sweep``).

:mod:`.grid` sorts the points into structures and runs them (the limit batched per structure by
:mod:`tensorprog.limit.sweep`, finite widths in blocks of points); :mod:`.plot` draws the result.
The package sits beside the Python API (:mod:`tensorprog.program` calls it), above the language
and the back ends it drives.
"""
from .grid import SweepResult

__all__ = ["SweepResult"]
