"""Arrays of outputs: how the entries ``out K[i, j] = ...`` of a program form arrays.

An array spans, on each axis, the smallest to the largest index its entries use: ``K[lo..hi]``
is position ``0..hi-lo`` of the reported array (so a kernel over ``i in 1..N`` is an N×N array
whose ``[0, 0]`` is ``K[1, 1]``).  Positions no ``out`` assigned are reported as missing (NaN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .nodes import Output


@dataclass(frozen=True)
class OutputArray:
    """The entries of one array of outputs, its ``origin`` (smallest index per axis) and ``shape``."""
    name: str
    origin: tuple[int, ...]
    shape: tuple[int, ...]
    entries: tuple[Output, ...]

    def position(self, o: Output) -> tuple[int, ...]:
        """Where the entry ``o`` lies in the reported array."""
        return tuple(i - lo for i, lo in zip(o.index, self.origin))


def jsonable(value):
    """A number or an array (anything with ``tolist``) as JSON data: nested lists of floats, NaN
    (an entry no ``out`` set) as null."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    value = float(value)
    return None if value != value else value


def npz_arrays(outputs: dict, second: str) -> dict:
    """The arrays an ``.npz`` of reported outputs holds: NAME (the value, or the mean over trials) and
    NAME_<second> (``error`` of a limit, ``std`` over trials) of each output."""
    arrays = {}
    for name, o in outputs.items():
        arrays[name] = getattr(o, "value", getattr(o, "mean", None))
        arrays[f"{name}_{second}"] = getattr(o, second)
    return arrays


def output_table(outputs: Sequence[Output]) -> list[Output | OutputArray]:
    """The reported outputs in order of first appearance: a scalar output as it is, the entries
    of an array gathered into one :class:`OutputArray`."""
    table: list[Output | OutputArray] = []
    members: dict[str, list[Output]] = {}
    for o in outputs:
        if o.array is None:
            table.append(o)
        elif o.array in members:
            members[o.array].append(o)
        else:
            members[o.array] = [o]
            table.append(o)                     # a placeholder, replaced below
    result: list[Output | OutputArray] = []
    for o in table:
        if o.array is None:
            result.append(o)
            continue
        entries = members[o.array]
        rank = len(entries[0].index)
        origin = tuple(min(e.index[a] for e in entries) for a in range(rank))
        shape = tuple(max(e.index[a] for e in entries) - origin[a] + 1 for a in range(rank))
        result.append(OutputArray(o.array, origin, shape, tuple(entries)))
    return result
