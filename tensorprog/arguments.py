"""The caller's arguments, checked: one rule per kind of value, shared by every entry point.

A width, a number of trials, a seed or a budget is checked here and nowhere else, so that
``execute``, ``converge``, ``compile`` and the ``tpc`` options refuse the same values with the
same words.  The rules raise :class:`ArgumentError` (a ``ValueError``: :class:`~tensorprog.expect.budget.Budget`
keeps its contract); :func:`usage` turns a check into a :class:`~tensorprog.errors.TPUsageError`
(exit 2 in the CLI) naming the program's file.

* :func:`whole`: an integer (Python or numpy, never a bool, never a float such as 64.5 or 64.0)
  at least ``minimum``;
* :func:`positive_finite`: a real number (never a bool) with 0 < value < ∞ (NaN refused);
* :func:`float_dtype`: a dtype of finite-width arithmetic, float64 or float32 (as numpy spells it);
* :func:`require_matplotlib`: the ``plot`` extra is installed (else the install command).
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, TypeVar

import numpy as np

from .errors import TPUsageError

T = TypeVar("T")


class ArgumentError(ValueError):
    """An argument outside its range; the message names it and says what is expected."""


def whole(value: object, what: str, minimum: int = 0) -> int:
    """``value`` as an int, if it is an integer (not a bool) at least ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        expected = "a positive integer" if minimum == 1 else \
            "a non-negative integer" if minimum == 0 else f"an integer at least {minimum}"
        raise ArgumentError(f"{what} must be {expected}, not {value!r}")
    return int(value)


def positive_finite(value: object, what: str) -> float:
    """``value`` as a float, if it is a real number (not a bool) with 0 < value < inf."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 < value < math.inf):
        raise ArgumentError(f"{what} must be a positive finite number, not {value!r}")
    return float(value)


def float_dtype(value: object, what: str = "dtype") -> np.dtype:
    """``value`` as a numpy dtype, if it is float64 or float32 (``np.dtype(value)``; None is float64)."""
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise ArgumentError(f"{what} must be float64 or float32, not {value!r}") from None
    if dtype not in (np.float64, np.float32):
        raise ArgumentError(f"{what} must be float64 or float32, not {dtype}")
    return dtype


def usage(check: Callable[[], T], file: str = "<string>") -> T:
    """``check()``, with an :class:`ArgumentError` raised as a TPUsageError in ``file``."""
    try:
        return check()
    except ArgumentError as err:
        raise TPUsageError(str(err), file=file) from None


INSTALL_HINT = "plotting needs matplotlib: pip install 'tensorprog[plot]' (or pip install matplotlib)"


def require_matplotlib() -> None:
    """Raise a TPUsageError with the install command when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: F401
    except ImportError:
        raise TPUsageError(INSTALL_HINT) from None

