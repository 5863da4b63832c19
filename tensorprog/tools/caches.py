"""Caches of the dataset kernels: explicit objects, keyed by pure inputs, handed to their users.

* :class:`Memo`: at most ``size`` values in memory, the least recently used dropped first;
* :class:`ReplayCache`: the replays of a template's pair classes (:mod:`.pairs`), keyed by
  :func:`.pairs.replay_key` (a digest of the template's IR, its input group, tol and the class),
  in a :class:`Memo` and in a :class:`~tensorprog.limit.replay_store.ReplayStore` on disk.

The process-wide defaults are :data:`.pairs.REPLAYS` with :data:`.pairs.STORE`
(:func:`.pairs.default_cache`) and :data:`.kernel.TEMPLATES`; a caller may hand its own."""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Hashable, Union

from ..limit.replay_store import Recorded, ReplayStore

#: what the replay cache holds for a key: the record, or None (the template cannot be replayed)
Found = Union[Recorded, None]
#: a key the cache does not hold
MISSING = False


@dataclass
class Memo:
    """At most ``size`` values by key in ``items`` (oldest first), the least recently used
    dropped first.  ``items`` is any OrderedDict (the caller may keep and clear it)."""
    items: OrderedDict = field(default_factory=OrderedDict)
    size: int = 32

    def get(self, key: Hashable, default: object = None) -> object:
        """The value under ``key`` (now the most recently used), else ``default``."""
        if key not in self.items:
            return default
        self.items.move_to_end(key)
        return self.items[key]

    def put(self, key: Hashable, value: object) -> None:
        """Keep ``value`` under ``key``, dropping the least recently used beyond ``size``."""
        self.items[key] = value
        self.items.move_to_end(key)
        while len(self.items) > self.size:
            self.items.popitem(last=False)


@dataclass
class ReplayCache:
    """Replays by key: the last ones used in ``memory``, every one in ``store``."""
    memory: Memo
    store: ReplayStore

    def in_memory(self, key: str) -> Found | bool:
        """The record (or None: not replayable) kept in memory, else :data:`MISSING`."""
        return self.memory.get(key, MISSING)

    def on_disk(self, key: str) -> Found | bool:
        """The record (or None) kept in the store, else :data:`MISSING`."""
        return self.store.load(key)

    def keep(self, key: str, found: Found, save: bool) -> None:
        """Keep ``found`` in memory, and in the store too if ``save``."""
        if save:
            self.store.save(key, found)
        self.memory.put(key, found)
