"""Constant-context helpers of the front end: numbers, indices, ranges, ``load``, ``eye``.

Constants are Python floats or numpy arrays; they are folded while the program is
unrolled and never reach the IR except as ``Const`` leaves and distribution parameters.
"""
from __future__ import annotations

import operator
from pathlib import Path

import numpy as np

from ..ir.walk import ARITHMETIC
from ..symbolic import traced

#: the comparisons of the language, on constants only (1.0 where true, else 0.0)
COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
        ">": operator.gt, ">=": operator.ge}


class Rounded(np.ndarray):
    """An array constant that was stored at a lower precision (a float32 ``.npy``): ``eps`` is that
    precision's machine epsilon, kept through constant arithmetic, so that a covariance built from
    it is checked at the precision its entries have (:func:`project_psd`)."""
    eps: float = 0.0


def rounded(arr: np.ndarray, eps: float) -> np.ndarray:
    """``arr`` marked as rounded to relative precision ``eps`` (unchanged when eps is 0)."""
    if not eps or not isinstance(arr, np.ndarray):
        return arr
    out = arr.view(Rounded)
    out.eps = eps
    return out


def precision(value) -> float:
    """The machine epsilon a constant was stored at (0: float64 or exact)."""
    return float(getattr(value, "eps", 0.0) or 0.0)


class ConstError(ValueError):
    """A constant expression is ill-defined (the caller attaches the position)."""


def is_const(value: object) -> bool:
    return isinstance(value, (float, int, np.ndarray))


def fold(op: str, a, b):
    """``a op b`` on constants (scalars or arrays), refusing NaN, inf and division by zero."""
    with np.errstate(all="raise"):
        try:
            if op in COMPARISONS:
                traced.structure(a)
                traced.structure(b)
                result = COMPARISONS[op](np.asarray(a, float), np.asarray(b, float)).astype(float)
            else:
                result = ARITHMETIC[op](np.asarray(a, float), np.asarray(b, float))
        except (FloatingPointError, ZeroDivisionError, OverflowError) as err:
            raise ConstError(f"'{op}' on constants is undefined here ({err})") from None
        except ValueError as err:
            raise ConstError(f"shapes do not match for '{op}': {err}") from None
    result = rounded(as_const(result), max(precision(a), precision(b)))
    return result if op in COMPARISONS else traced.combine(ARITHMETIC[op], a, b, result)


def as_const(value) -> float | np.ndarray:
    arr = np.asarray(value, dtype=float)
    if np.any(np.isnan(arr)):
        raise ConstError("the constant is not finite (NaN: undefined)")
    if not np.all(np.isfinite(arr)):
        raise ConstError("the constant is not finite (inf: an overflow or a division by zero)")
    return float(arr) if arr.ndim == 0 else arr


#: the most bytes one constant array may take, 1 GiB (2**27 float64 numbers; eye(10000) takes 0.8 GB).
#: A list is sized from its first item times its length before the rest is built, and a loaded
#: ``.npy`` from its header before its data is read (:func:`check_bytes`).
MAX_CONST_BYTES = 2 ** 30


def check_bytes(needed: int, what: str) -> None:
    """Refuse a constant of ``needed`` bytes beyond :data:`MAX_CONST_BYTES` (``what`` describes it)."""
    if needed > MAX_CONST_BYTES:
        raise ConstError(f"{what} would take {needed:,} bytes, more than the {MAX_CONST_BYTES:,} (1 GiB) a "
                         "constant may take: make it smaller, or use random vectors and matrices instead")


def nbytes(value) -> int:
    """Bytes of a constant as float64 (a scalar: 8)."""
    return int(np.size(value)) * 8


def to_array(items: list) -> np.ndarray:
    """A list constant as an array; rows of a nested list must have equal lengths."""
    try:
        return traced.listed(items, as_const(np.array(items, dtype=float)))
    except ValueError:
        raise ConstError("the rows of a nested list must all have the same length") from None


def as_int(value, what: str) -> int:
    """An integer-valued constant (indices, range ends)."""
    if not isinstance(value, (float, int)) or isinstance(value, bool):
        raise ConstError(f"{what} must be an integer constant")
    traced.structure(value)
    if not float(value).is_integer():
        raise ConstError(f"{what} must be an integer, got {value:g}")
    return int(value)


def index(arr: np.ndarray, idx: tuple[int, ...], name: str) -> float | np.ndarray:
    """``name[idx]`` of an array constant, indices counted from 1 (as ranges ``1..N`` are):
    a number when every axis is indexed, else a row (a sub-array)."""
    if len(idx) > arr.ndim:
        raise ConstError(f"'{name}' has {arr.ndim} ax{'i' if arr.ndim == 1 else 'e'}s "
                         f"(shape {'x'.join(map(str, arr.shape))}), but {len(idx)} indices are given")
    for axis, i in enumerate(idx):
        if not 1 <= i <= arr.shape[axis]:
            which = f" on axis {axis + 1}" if arr.ndim > 1 else ""
            raise ConstError(f"index {i} is out of range{which} of '{name}' (shape "
                             f"{'x'.join(map(str, arr.shape))}): constant arrays are indexed from 1 to "
                             f"{arr.shape[axis]}")
    at = tuple(i - 1 for i in idx)
    value = arr[at]
    return traced.indexed(arr, at, float(value) if np.ndim(value) == 0 else np.array(value))


def eye(k) -> np.ndarray:
    size = as_int(k, "eye(k)")
    if size < 1 or size > 10_000:
        raise ConstError(f"eye(k) needs 1 <= k <= 10000, got {size}")
    return np.eye(size)


def load_array(name: str, base_dir: str) -> np.ndarray:
    """A numeric ``.npy`` array next to the program: inside its folder, no pickles."""
    if not name.endswith(".npy"):
        raise ConstError(f"load: only .npy files can be loaded, not {name!r}")
    base = Path(base_dir).resolve()
    path = Path(name)
    if path.is_absolute():
        raise ConstError(f"load: {name!r} is absolute; paths are relative to the program's folder")
    target = (base / path).resolve()
    if base != target and base not in target.parents:
        raise ConstError(f"load: {name!r} lies outside the program's folder")
    if not target.is_file():
        raise ConstError(f"load: no file {name!r} in {base}")
    check_bytes(npy_size(target, name) * 8, f"load: {name!r} (as float64)")
    try:
        arr = np.load(target, allow_pickle=False)
    except (ValueError, OSError, EOFError) as err:
        raise ConstError(f"load: {name!r} is not a numeric .npy array ({err})") from None
    if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "biuf":
        raise ConstError(f"load: {name!r} must hold a real numeric array")
    eps = float(np.finfo(arr.dtype).eps) if arr.dtype.kind == "f" and arr.dtype.itemsize < 8 else 0.0
    return rounded(as_const(arr.astype(float)), eps)


def npy_size(path: Path, name: str) -> int:
    """The number of entries of a ``.npy`` file, from its header (the data is not read)."""
    try:
        with open(path, "rb") as handle:
            major, _ = np.lib.format.read_magic(handle)
            read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, _ = read(handle)
    except (ValueError, OSError, EOFError) as err:
        raise ConstError(f"load: {name!r} is not a numeric .npy array ({err})") from None
    return int(np.prod(shape, dtype=object))


def project_psd(cov: np.ndarray, eps: float) -> tuple[np.ndarray, float | None]:
    """A covariance whose entries were rounded to relative precision ``eps``: rounding moves each
    eigenvalue by at most ‖E‖₂ ≤ k·eps·max|cov| (k×k), so a negative eigenvalue within that is
    rounding of a PSD matrix.  Returns (the matrix with such eigenvalues set to 0, V max(Λ, 0) Vᵀ,
    and the smallest eigenvalue), or (cov, None) when nothing is to project or the negative
    eigenvalue is beyond the precision (then the PSD check refuses it as before)."""
    arr = np.asarray(cov, dtype=float)
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or not np.all(np.isfinite(arr)):
        return cov, None
    sym = 0.5 * (arr + arr.T)
    scale = float(np.max(np.abs(sym))) if sym.size else 0.0
    values, vectors = np.linalg.eigh(sym)
    lowest = float(values[0])
    if scale == 0.0 or lowest >= 0 or lowest < -arr.shape[0] * eps * scale:
        return cov, None
    fixed = (vectors * np.maximum(values, 0.0)) @ vectors.T
    return 0.5 * (fixed + fixed.T), lowest
