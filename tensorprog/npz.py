"""Saving reported outputs (a limit's, or a finite-width run's) as one ``.npz`` of named arrays."""
from __future__ import annotations

import numpy as np

from .errors import TPUsageError


def save_npz(path: str, arrays: dict) -> None:
    """``np.savez`` of named arrays to ``path``, which must end in .npz (else a TPUsageError)."""
    if not str(path).endswith(".npz"):
        raise TPUsageError(f"--out: {path} must end in .npz (one array per output)")
    try:
        np.savez(path, **{k: np.asarray(v, dtype=float) for k, v in arrays.items()})
    except OSError as err:
        raise TPUsageError(f"--out: cannot write {path}: {err.strerror}") from None
