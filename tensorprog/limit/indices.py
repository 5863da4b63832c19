"""Sets of estimate indices as bitsets: what each variable of a compilation rests on.

Every vector and scalar of a compiled program rests on the estimates (expectations) of the
ones before it: a variable at depth l of a chain rests on O(l) of them, so the sets together
hold O(L²) indices for a program of L layers.  As Python ``set``s (about 60 bytes an index)
that was 6.1 GB at ``tpc compile programs/relu_nngp.tp -D L=4000``.  An :class:`IndexSet` keeps
index i as bit i of one Python int: m/8 bytes for indices below m, and a union is one C-level
``|``.  Peak memory of that compile (``bench/compile_memory.py``) at L = 1000, 2000, 4000: 527 MB,
1.62 GB, 6.1 GB with sets; 166 MB, 182 MB, 217 MB with bitsets (of which ~150 MB is the
interpreter, numpy, sympy and scipy).  The bits still grow as L², but at one bit per entry:
L = 4000 has 16,000 variables resting on 6,000 of its 12,000 estimates on average, 12 MB.
"""
from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


class IndexSet:
    """A mutable set of non-negative integers (estimate indices), stored as the bits of an int.

    The ``set`` operations the compiler uses: ``add``, ``update``, ``|=``, ``|``, ``copy``,
    ``in``, ``len`` and iteration (in increasing order)."""
    __slots__ = ("bits",)

    def __init__(self, items: Iterable[int] = ()) -> None:
        self.bits = 0
        for i in items:
            self.add(i)

    @classmethod
    def from_bits(cls, bits: int) -> IndexSet:
        out = cls()
        out.bits = bits
        return out

    def add(self, index: int) -> None:
        if index < 0:
            raise ValueError(f"an IndexSet holds non-negative integers, not {index}")
        self.bits |= 1 << index

    def update(self, *others: IndexSet) -> None:
        for other in others:
            self.bits |= other.bits

    def copy(self) -> IndexSet:
        return IndexSet.from_bits(self.bits)

    def __ior__(self, other: IndexSet) -> IndexSet:
        self.bits |= other.bits
        return self

    def __or__(self, other: IndexSet) -> IndexSet:
        return IndexSet.from_bits(self.bits | other.bits)

    def __contains__(self, index: object) -> bool:
        return isinstance(index, (int, np.integer)) and index >= 0 and bool((self.bits >> int(index)) & 1)

    def __len__(self) -> int:
        return self.bits.bit_count()

    def __bool__(self) -> bool:
        return self.bits != 0

    def indices(self) -> np.ndarray:
        """The members in increasing order, as an int array (vectorised: no Python loop over bits)."""
        if not self.bits:
            return np.zeros(0, dtype=np.int64)
        raw = np.frombuffer(self.bits.to_bytes((self.bits.bit_length() + 7) // 8, "little"), np.uint8)
        return np.flatnonzero(np.unpackbits(raw, bitorder="little"))

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IndexSet):
            return self.bits == other.bits
        if isinstance(other, (set, frozenset)):
            return set(self) == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]   # mutable

    def __repr__(self) -> str:
        return f"IndexSet({list(self)})"
