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

Integrity.  The directories the store makes are private (mode 0700); one found open to other
users is made private again, and one that belongs to another user, or cannot be made private,
is not used (a :class:`StoreWarning`).  Each record carries ``digest``, the SHA-256 of its key
and its content (:func:`record_digest`): a record whose digest does not match is ignored with a
:class:`StoreWarning`, and recorded again.  The digest finds damage, not intent (anyone who can
write the file can recompute it), so the users of a record also check its meaning when they
load it: :func:`..tools.pairs.replay_for` replays a loaded record on a few pairs and compares it
with a fresh batch compile of them, and :func:`..tools.kernel.limit_template` compares a stored
finding with the template's own covariance.
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from .replay import Replay

#: bumped when the stored format changes (3: a series' function is stored as a plain tape,
#: :meth:`..symbolic.tape.Tape.to_json`, inside the grid tape)
FORMAT = 4
#: the mode of the directories the store makes and accepts (this user only)
PRIVATE = 0o700


class Recorded(NamedTuple):
    """A pair class's replay, with the warnings of the batch compile it was recorded from."""
    replay: Replay
    warnings: list[str]


class StoreWarning(UserWarning):
    """A record or the store's directory was not trusted; the work was done afresh."""


def warn(message: str) -> None:
    """A :class:`StoreWarning` (shown once per message)."""
    warnings.warn(f"tensorprog replay store: {message}", StoreWarning, stacklevel=3)


def record_digest(key: str, body: dict) -> str:
    """SHA-256 of a record's key and its content (``body``: the record without its digest, as
    JSON with sorted keys; loading and dumping JSON again gives the same text)."""
    text = json.dumps(body, sort_keys=True)
    return hashlib.sha256(f"{key}\n{text}".encode()).hexdigest()


def make_private(path: Path) -> None:
    """Make ``path`` and its missing ancestors as directories of mode 0700 (an OSError if not)."""
    missing = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, PRIVATE)
        except FileExistsError:       # made meanwhile (another process): checked below
            pass
        os.chmod(p, PRIVATE)          # exactly 0700, whatever the umask


def why_not_private(path: Path) -> str | None:
    """None if ``path`` is a directory of this user open to no one else (after making it so where
    it was open: mode 0700), else why it cannot be used."""
    info = os.stat(path)
    if not stat.S_ISDIR(info.st_mode):
        return f"{path} is not a directory"
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        return f"{path} belongs to another user (uid {info.st_uid})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        try:
            os.chmod(path, PRIVATE)
        except OSError as err:
            return f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}) and cannot be made private ({err})"
    return None
#: the packages whose code decides what a record holds (a change to any file there starts afresh)
RECORDING_PACKAGES = ("lang", "ir", "limit", "expect", "symbolic", "distributions", "builtins")


@lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of the source of :data:`RECORDING_PACKAGES` (records of other code are not used)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    files = [path for package in RECORDING_PACKAGES for path in sorted((root / package).glob("*.py"))]
    for path in files:
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


class ReplayStore:
    """Records by key in one directory (None: no store)."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.checked = False            # the directory was found private in this process

    def ready(self, create: bool) -> bool:
        """The directory is there (made now if ``create``: mode 0700), this user's and private
        (module doc); else False, with a :class:`StoreWarning` where it is not safe to use."""
        if self.directory is None:
            return False
        if self.checked:
            return True
        try:
            if not self.directory.exists():
                if not create:
                    return False
                make_private(self.directory)
            problem = why_not_private(self.directory)
        except OSError:                  # cannot be made or read: the store is skipped (module doc)
            return False
        if problem is not None:
            warn(f"not used: {problem}")
            return False
        self.checked = True
        return True

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
        """The :class:`Recorded` replay, None (the template is not replayable), or False (not stored)."""
        data = self.load_data(key)
        if data is None:
            return False
        try:
            if data["replay"] is None:
                return None
            return Recorded(Replay.from_json(data["replay"]), [str(w) for w in data["warnings"]])
        except (ValueError, KeyError, TypeError):
            return False

    def save(self, key: str, found) -> None:
        """Keep ``found`` — a :class:`Recorded` or None — under ``key`` (atomically; best effort)."""
        if self.path(key) is None:               # no store (TENSORPROG_CACHE_DIR=off): nothing to write
            return
        self.save_data(key, {"replay": None if found is None else found.replay.to_json(),
                             "warnings": [] if found is None else list(found.warnings)})

    def load_data(self, key: str) -> dict | None:
        """The JSON object stored under ``key`` by this code (None: nothing usable there)."""
        path = self.path(key)
        if path is None or not self.ready(create=False) or not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("code") != code_digest():
            return None                  # of other code: not an error, recorded afresh
        digest = data.pop("digest", None)
        if digest != record_digest(key, data):
            warn(f"{path} does not match its digest (changed after it was written): ignored, recorded again")
            return None
        return data

    def save_data(self, key: str, payload: dict) -> None:
        """Keep the JSON object ``payload`` under ``key`` (atomically; best effort: a store that
        cannot be written, or a payload that is not JSON, is skipped)."""
        path = self.path(key)
        if path is None:
            return
        try:
            body = {"format": FORMAT, "code": code_digest(), **payload}
            text = json.dumps({**body, "digest": record_digest(key, body)})
            if not self.ready(create=True):
                return
            with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as f:
                f.write(text)
            os.replace(f.name, path)
        except (OSError, TypeError, ValueError):
            return
