"""Program text as it comes in: its size bounded, and read only from a regular file.

Parsing and checking take time and memory linear in the text, with a large constant (Lark's
LALR parser builds a tree node per reduction): a 5 MB program took 221 s and 1.25 GB to check,
and a 5 MB expression 286 s before its depth error.  Real programs are a few kB (the largest
under ``programs/`` is 4 kB), and ``for`` loops unroll inside the compiler, so a text beyond
:data:`MAX_SOURCE_CHARS` is refused before it is parsed, at the line where the cap is crossed.
``tp.parse(..., max_chars=...)`` and ``tp.load(..., max_chars=...)`` raise it.

A file is opened without blocking and checked with ``fstat`` before anything is read: a FIFO, a
device or a directory is refused (reading a FIFO would wait forever), and so is a file larger
than the cap, by its size in bytes (a UTF-8 text has at least as many bytes as characters).
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

from ..arguments import usage, whole
from ..errors import TPLimitError, TPLoadError

#: the longest program text parsed (characters; a file: bytes), 256 KiB: about 6,000 lines, 60
#: times the largest example program; checking it takes seconds (``bench/parse_size.py``)
MAX_SOURCE_CHARS = 256 * 1024

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def check_limit(max_chars: object) -> int:
    """``max_chars`` as a positive int (TPUsageError otherwise)."""
    return usage(lambda: whole(max_chars, "max_chars", 1))


def check_size(text: str, file: str, max_chars: int = MAX_SOURCE_CHARS) -> None:
    """Refuse ``text`` longer than ``max_chars`` (a TPLimitError located where the cap is crossed)."""
    if len(text) <= max_chars:
        return
    line = text.count("\n", 0, max_chars) + 1
    col = max_chars - (text.rfind("\n", 0, max_chars) + 1) + 1
    raise TPLimitError(f"the program is {len(text):,} characters long, more than the {max_chars:,} a "
                       "program may have (the cap is crossed here); use for loops instead of unrolled "
                       "text, or raise max_chars (tp.parse / tp.load)", line, col, file)   # no excerpt: the line may be MBs


def read_source(path: str | os.PathLike, max_chars: int = MAX_SOURCE_CHARS) -> str:
    """The text of the program file ``path``: a regular file of at most ``max_chars`` bytes
    (TPLoadError / TPLimitError naming the file otherwise)."""
    name = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))   # a FIFO must not block the open
    except OSError as err:
        raise TPLoadError(f"cannot read the program: {err.strerror}", file=name) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((what for test, what in _KINDS if test(info.st_mode)), "not a regular file")
            raise TPLoadError(f"cannot read the program: it is {kind}, not a regular file; give the path "
                              "of a .tp file", file=name)
        if info.st_size > max_chars:
            raise TPLimitError(f"the program file is {info.st_size:,} bytes, more than the {max_chars:,} a "
                               "program may have; use for loops instead of unrolled text, or raise "
                               "max_chars (tp.load)", file=name)
        with open(fd, closefd=False) as handle:
            text = handle.read(max_chars + 1)
    except (OSError, UnicodeDecodeError) as err:
        raise TPLoadError(f"cannot read the program: {err.strerror if isinstance(err, OSError) else err}",
                          file=name) from None
    finally:
        os.close(fd)
    check_size(text, name, max_chars)           # the file grew since fstat
    return text


def base_dir_of(path: str | os.PathLike) -> str:
    """The folder of a program file, where its ``load()`` calls look."""
    return str(Path(path).resolve().parent)
