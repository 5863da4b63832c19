"""Replays kept on disk, so that a new process starts where the last one left off.

A kernel template's replay (:mod:`.replay`) costs a batch compile to record — seconds for a deep
template whose closed forms must be derived — and milliseconds to load.  The store also keeps
each template's finding (its input group, scale s and shift b: ``template-<digest>.json``, see
:func:`..tools.kernel.limit_template`), which spares a new process unrolling the template at the
probe values of q.  :class:`ReplayStore`
keeps each record as ``<dir>/<key>.json`` (the key a digest of the template's IR, the input
group, tol and the pairs' class; see :func:`..tools.pairs.replay_key`), written atomically.  A
record is data only — operation kinds, head names, numbers — read back through
:meth:`.Replay.from_json`: nothing in the file is executed, and a file that does not parse is
ignored (and recorded again).

The directory is ``$TENSORPROG_CACHE_DIR/replays`` if that is set, else
``$XDG_CACHE_HOME/tensorprog/replays`` (``~/.cache/tensorprog/replays``);
``TENSORPROG_CACHE_DIR=off`` keeps records in memory only.  The variable is read when the kernel
machinery is first imported (``tensorprog.tools.pairs.STORE``; set it before, or replace STORE).  A record made by other code (any
change to the compiler's source) is not used.  A store that cannot be written (a
read-only home) is skipped silently: it only ever saves time.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import lru_cache
from pathlib import Path

from .replay import Replay

#: bumped when the stored format changes
FORMAT = 1
#: the packages whose code decides what a record holds (a change to any file there starts afresh)
RECORDING_PACKAGES = ("lang", "ir", "limit", "expect", "symbolic", "distributions")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the source of :data:`RECORDING_PACKAGES` (records of other code are not used)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    files = [path for package in RECORDING_PACKAGES for path in sorted((root / package).glob("*.py"))]
    for path in files + [root / "builtins.py"]:          # the builtins' numpy functions, by name
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


class ReplayStore:
    """Records by key in one directory (None: no store)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory

    @classmethod
    def from_environment(cls) -> "ReplayStore":
        """The store the environment names (module doc)."""
        chosen = os.environ.get("TENSORPROG_CACHE_DIR")
        if chosen is not None and chosen.strip().lower() in ("off", "none", "0", ""):
            return cls(None)
        if chosen:
            return cls(Path(chosen) / "replays")
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return cls(Path(base) / "tensorprog" / "replays")

    def path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}.json"

    def load(self, key: str):
        """(Replay, warnings), None (the template is not replayable), or False (not stored)."""
        data = self.load_data(key)
        if data is None:
            return False
        try:
            if data["replay"] is None:
                return None
            return Replay.from_json(data["replay"]), [str(w) for w in data["warnings"]]
        except (ValueError, KeyError, TypeError):
            return False

    def save(self, key: str, found) -> None:
        """Keep ``found`` — (Replay, warnings) or None — under ``key`` (atomically; best effort)."""
        self.save_data(key, {"replay": None if found is None else found[0].to_json(),
                             "warnings": [] if found is None else list(found[1])})

    def load_data(self, key: str) -> dict | None:
        """The JSON object stored under ``key`` by this code (None: nothing usable there)."""
        path = self.path(key)
        if path is None or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("code") != code_digest():
            return None
        return data

    def save_data(self, key: str, payload: dict) -> None:
        """Keep the JSON object ``payload`` under ``key`` (atomically; best effort: a store that
        cannot be written, or a payload that is not JSON, is skipped)."""
        path = self.path(key)
        if path is None:
            return
        try:
            text = json.dumps({"format": FORMAT, "code": code_digest(), **payload})
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
                f.write(text)
            os.replace(f.name, path)
        except (OSError, TypeError, ValueError):
            return
