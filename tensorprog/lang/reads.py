"""What a program's IR depends on besides its text and params: the data files it loads.

A cache of anything made from a program (a kernel template's finding, say) is keyed by pure
inputs: the text, the params and the bytes of every file a ``load("…")`` names.  The names are
read from the syntax tree, not guessed from the text: every ``load`` call anywhere in the
program (in a branch not taken too, so the set does not depend on the params).  A ``load``
whose argument is not a string literal names a file only when run: such a program has no
digest (None), and is not cached."""
from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Iterator

from . import syntax as S
from .parser import parse_text


def nodes(tree: object) -> Iterator[S.Node]:
    """Every syntax node in ``tree`` (a node, a module, or tuples of them), parents first."""
    stack = [tree]
    while stack:
        item = stack.pop()
        if isinstance(item, tuple):
            stack.extend(reversed(item))
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            if isinstance(item, S.Node):
                yield item
            stack.extend(reversed([getattr(item, f.name) for f in dataclasses.fields(item)]))


def loaded_files(text: str, file: str = "<string>") -> tuple[str, ...] | None:
    """The names of the files the program's ``load("…")`` calls read, sorted and without repeats;
    None if a ``load`` takes anything but one string literal (a syntax error raises as in parsing)."""
    names = set()
    for node in nodes(parse_text(text, file)):
        if isinstance(node, S.Call) and node.func == "load":
            if node.kwargs or len(node.args) != 1 or not isinstance(node.args[0], S.String):
                return None
            names.add(node.args[0].value)
    return tuple(sorted(names))


def inputs_digest(text: str, file: str, base_dir: str) -> str | None:
    """SHA-256 of the program's text and of the bytes of each file it loads (from ``base_dir``;
    a file that cannot be read enters by its name alone, as lowering would fail on it); None
    when the files cannot be known (:func:`loaded_files`)."""
    names = loaded_files(text, file)
    if names is None:
        return None
    h = hashlib.sha256(text.encode())
    for name in names:
        h.update(b"\0" + name.encode() + b"\0")
        try:
            h.update(hashlib.sha256((Path(base_dir) / name).read_bytes()).digest())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()
