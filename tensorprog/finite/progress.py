"""Progress of long finite-width runs, on stderr.

``progress=None`` (the default) shows it only when the stream is a terminal, and
only once the run has lasted ``delay`` seconds: one line rewritten in place
(``3/16 trials done, 12.4 s`` or, inside a huge blocked product,
``trial 1/2: step 2/3, W @ 2 vector(s), blocked, 45%, 80.1 s``) and erased at the end, so
that it never mixes with the results.  ``progress=True`` forces it; on a stream
that is not a terminal it then writes whole lines: one per finished trial and, in
long blocked products, one every ``interval`` seconds.  ``progress=False`` (or a
stream that is not a terminal, unforced) writes nothing.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import TextIO


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class Progress:
    """A progress line for ``total`` trials (see the module docstring)."""

    def __init__(self, total: int, enabled: bool | None = None, stream: TextIO | None = None,
                 label: str = "trial", delay: float = 1.0, interval: float = 5.0) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.tty = is_terminal(self.stream)
        self.enabled = self.tty if enabled is None else bool(enabled)
        self.delay = delay if enabled is None else 0.0
        self.total, self.label, self.interval = int(total), label, interval
        self.done = 0
        self.start = time.perf_counter()
        self._last = -float("inf")
        self._shown = False
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _write(self, text: str, final_line: bool) -> None:
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K")
        elif final_line:
            self.stream.write(text + "\n")
        else:
            return
        self.stream.flush()
        self._shown = True

    def trial_done(self, trial: int | None = None) -> None:
        """One more trial finished (``trial``: its index, for the message)."""
        if not self.enabled:
            return
        with self._lock:
            self.done += 1
            now = self.elapsed()
            if now < self.delay:
                return
            if self.tty and now - self._last < 0.1 and self.done < self.total:
                return
            self._last = now
            self._write(f"{self.done}/{self.total} {self.label}s done, {now:.1f} s", final_line=True)

    def step(self, trial: int, index: int, steps: int, what: str, fraction: float) -> None:
        """Inside trial ``trial`` (0-based), step ``index`` of ``steps`` is ``fraction`` done."""
        if not self.enabled:
            return
        with self._lock:
            now = self.elapsed()
            if now < self.delay or now - self._last < (0.2 if self.tty else self.interval):
                return
            self._last = now
            self._write(f"{self.label} {trial + 1}/{self.total}: step {index + 1}/{steps}, {what}, "
                        f"{100 * fraction:.0f}%, {now:.1f} s", final_line=True)

    def close(self) -> None:
        if self.enabled and self.tty and self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
