"""Rich display (Jupyter) of a finite-width run: :func:`exec_html` of an
:class:`~tensorprog.finite.run.ExecResult` (mean, std and SE = std/√T of every output).
Reads the result by its attributes; imports no sympy."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..display.html import box, esc, laws_text, num, table


def exec_html(result: Any) -> str:
    """Mean, standard deviation and standard error of the mean of every output over the trials."""
    rows = []
    for name, o in getattr(result, "entries", result.outputs).items():     # arrays entry by entry
        values = np.asarray(o.values, float)
        sem = float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else float("nan")
        rows.append((f"<b>{esc(name)}</b>", num(o.mean, ".10g"), num(o.std, ".4g"), num(sem, ".3g")))
    caption = (f"<b>Finite width</b> n = {int(result.width)}, {int(result.trials)} trial(s), seed "
               f"{esc(result.seed)}, {esc(result.dtype)}, {esc(laws_text(result.matrix_dist))}"
               + (", blocked" if getattr(result, "blocked", False) else "")
               + (", conditional" if getattr(result, "conditional", False) else "")
               + (f", {esc(result.backend)} on {esc(getattr(result, 'device', 'cpu'))}"
                  if getattr(result, "backend", "numpy") != "numpy" else ""))
    return box("execute", caption, table(["output", "mean", "std", "SE"], rows,
                                         numeric=[False, True, True, True]))
