"""Progress of long finite-width runs: ``tqdm.auto`` bars, on stderr or in a notebook.

``progress=None`` (the default) shows a bar only when stderr is a terminal or the code runs
in a Jupyter kernel (where ``tqdm.auto`` draws an ipywidgets bar, or a text bar without
ipywidgets), and only once the run has lasted :data:`DELAY` seconds; it is erased at the end,
so that it never mixes with the results.  ``progress=True`` forces it (also on a stream that is
not a terminal) and leaves it in place; ``progress=False`` hides it.  Inside a huge
blocked product the bar notes the step, e.g. ``trial 1: step 2/3, W @ 2 vector(s),
blocked, 45%``.
"""
from __future__ import annotations

import sys
import threading
import time
import warnings
from types import TracebackType


#: an automatic bar (``progress=None``) appears only once the run has lasted this many seconds
DELAY = 1.0
#: the least seconds between two redraws of a bar
MININTERVAL = 0.1


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython is never imported here: only looked up)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and "IPKernelApp" in getattr(shell, "config", {})


def interactive() -> bool:
    """Where an automatic bar (``progress=None``) is shown: a terminal, or a notebook."""
    return bool(getattr(sys.stderr, "isatty", lambda: False)()) or in_notebook()


def auto_tqdm() -> type:
    """``tqdm.auto.tqdm``, imported when a run starts (not at start-up); in a notebook without
    ipywidgets it is the text bar, without tqdm's warning about it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*IProgress not found.*")
        from tqdm.auto import tqdm
    return tqdm


class NoBar:
    """What a bar that is not shown does: nothing (as a disabled tqdm)."""
    disable = True

    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class ProgressBar:
    """A bar over ``total`` items (trials, widths) on stderr, shown as ``progress`` says."""

    def __init__(self, total: int, progress: bool | None, desc: str = "trials", unit: str = "trial") -> None:
        forced = progress is not None
        shown = progress if forced else interactive()
        if shown:
            self.bar = auto_tqdm()(total=int(total), desc=desc, unit=unit, file=sys.stderr, leave=bool(progress),
                                   delay=0.0 if forced else DELAY, mininterval=MININTERVAL)
        else:                                   # no bar: tqdm (and the asyncio it loads) is not imported
            self.bar = NoBar()
        self.enabled = not self.bar.disable
        self._delay = 0.0 if forced else DELAY
        self._start = time.monotonic()
        self._noted = -float("inf")
        self._lock = threading.Lock()

    def advance(self) -> None:
        """One more item done."""
        self.bar.update(1)

    def note(self, text: str, throttle: bool = True) -> None:
        """Show ``text`` after the counts (at most every :data:`MININTERVAL` s if ``throttle``)."""
        if not self.enabled:
            return
        with self._lock:
            now = time.monotonic()
            if now - self._start < self._delay or (throttle and now - self._noted < MININTERVAL):
                return
            self._noted = now
            self.bar.set_postfix_str(text)

    def step(self, trial: int, index: int, steps: int, what: str, fraction: float) -> None:
        """Inside trial ``trial`` (0-based), step ``index`` of ``steps`` is ``fraction`` done."""
        self.note(f"trial {trial + 1}: step {index + 1}/{steps}, {what}, {100 * fraction:.0f}%")

    def close(self) -> None:
        self.bar.close()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
