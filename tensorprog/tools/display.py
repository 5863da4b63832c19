"""Rich displays for Jupyter of the tools' results: convergence runs and dataset kernels.

Pure functions from a result to a string; the classes' ``_repr_html_`` methods delegate here:

* :func:`converge_html` — a :class:`~tensorprog.tools.converge.ConvergeResult`: per output and
  width the mean, SE, |mean − c̊| and rms, the fitted rates, and the plot inline (matplotlib);
* :func:`kernel_html` — a :class:`~tensorprog.tools.kernel.KernelResult`: a summary per output
  and each N×N kernel as a heatmap.

The displays of the other stages live beside what they print and are re-exported here:
:mod:`tensorprog.limit.printers` (the recurrence as data, typeset: :func:`compiled_html`,
:func:`compiled_latex`; limits: :func:`limit_html`, :func:`limit_latex`; :func:`particles_html`)
and :mod:`tensorprog.finite.display` (:func:`exec_html`).  The shared HTML pieces are
:mod:`tensorprog.display.html`.  Objects are read by their attributes only.
"""
from __future__ import annotations

import io
import os
import tempfile
from typing import Any, Callable

import numpy as np

from ..display.html import (box, esc, laws_text, num, png_img, table, tree_size,  # noqa: F401 (re-exported)
                            warnings_html)
from ..finite.display import exec_html  # noqa: F401 (re-exported)

#: kernels larger than this (N) are drawn from their leading MAX_HEATMAP × MAX_HEATMAP block
MAX_HEATMAP = 400


def __getattr__(name: str) -> Any:
    """The limit's displays (:mod:`tensorprog.limit.printers`), loaded on first use (they need sympy)."""
    if name in ("compiled_html", "compiled_latex", "limit_html", "limit_latex", "particles_html"):
        from ..limit import printers
        return getattr(printers, name)
    raise AttributeError(name)


# ---- convergence ------------------------------------------------------------------------------
def rate_text(rate: float | None, error: float | None) -> str:
    if rate is None:
        return "—"
    return f"{rate:+.3f}" + (f" ± {error:.3f}" if error is not None else "")


def converge_output_html(o: Any) -> str:
    """One output across the widths: mean, SE, |mean − c̊| (~ where below noise) and rms."""
    lim = f"{o.limit:.12g}" + (" (exact)" if o.method == "exact" else f" ± {o.limit_error:.2g} ({o.method})")
    rows = [(str(w), num(o.means[i], ".8g"), num(o.sems[i], ".3g"),
             num(o.bias[i], ".3g") + ("" if o.bias_resolved[i] else " ~"), num(o.rms[i], ".3g"))
            for i, w in enumerate(o.widths)]
    rates = (f"rate {esc(rate_text(o.rate, o.rate_error))} (slope of log rms against log n) · "
             f"bias_rate {esc(rate_text(o.bias_rate, o.bias_rate_error))}")
    return (f"<div><b>{esc(o.name)}</b>: limit {esc(lim)}"
            + table(["width", "mean", "SE", "|mean − limit|", "rms"], rows, numeric=[True] * 5)
            + f"<small>{rates}</small></div>")


def converge_png(result: Any) -> bytes | None:
    """The convergence plot of ``result`` as PNG bytes (None without matplotlib or when nothing
    can be drawn)."""
    from ..errors import TPUsageError
    from .plot import plot_convergence
    fd, path = tempfile.mkstemp(suffix=".png")
    os.close(fd)
    try:
        plot_convergence(result, path, dpi=80)
        with open(path, "rb") as f:
            return f.read()
    except TPUsageError:
        return None
    finally:
        os.unlink(path)


def converge_html(result: Any, png: bytes | None | Callable[[Any], bytes | None] = converge_png) -> str:
    """Per output a table over the widths and the rates, the plot (``png``: the bytes, or a
    function drawing them) and the warnings."""
    image = png(result) if callable(png) else png
    caption = (f"<b>Convergence</b> of <code>{esc(result.file)}</code>: {int(result.trials)} trial(s) "
               f"per width, seed {esc(result.seed)}, {esc(result.dtype)}, {esc(laws_text(result.matrix_dist))}"
               "<br/><small>~: |mean − limit| is below 2 standard errors there (noise)</small>")
    tables = "".join(converge_output_html(o) for o in result.outputs.values())
    side = png_img(image, "deviation from the limit against the width") if image else ""
    layout = (f'<div style="display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start">'
              f"<div>{tables}</div><div>{side}</div></div>")
    return box("converge", caption, layout, warnings_html(list(result.warnings)))


# ---- dataset kernels --------------------------------------------------------------------------
def heatmap_png(matrices: dict[str, np.ndarray], title: str) -> bytes | None:
    """The kernels side by side as heatmaps (None without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=(3.2 * len(matrices) + 0.4, 3.0))
    FigureCanvasAgg(fig)
    for k, (name, m) in enumerate(matrices.items()):
        ax = fig.add_subplot(1, len(matrices), k + 1)
        shown = np.asarray(m, float)[:MAX_HEATMAP, :MAX_HEATMAP]
        im = ax.imshow(shown, cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(name + ("" if shown.shape == np.shape(m) else f" (first {MAX_HEATMAP})"), fontsize=10)
        ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=80)
    return out.getvalue()


def kernel_html(result: Any) -> str:
    """Per output: N, the diagonal and off-diagonal means, method and largest error; the heatmaps."""
    summary = result.summary()
    rows = []
    for name, k in result.outputs.items():
        s = summary["outputs"][name]
        rows.append((f"<b>{esc(name)}</b>", str(np.shape(k.mean)[0]), num(s["diag_mean"], ".8g"),
                     num(s["offdiag_mean"], ".8g"), esc(s["method"]), num(s["max_error"], ".2g")))
    where = ("the infinite-width limit" if result.width is None
             else f"finite width n = {int(result.width)}, {int(result.trials)} trial(s)")
    spread = "error bound" if result.width is None else "SE (std/√trials)"
    caption = f"<b>Dataset kernel</b>: {esc(where)}"
    png = heatmap_png({n: k.mean for n, k in result.outputs.items()}, where)
    return box("kernel", caption,
               table(["output", "N", "diagonal mean", "off-diagonal mean", "method", f"largest {spread}"],
                     rows, numeric=[False, True, True, True, False, True]),
               png_img(png, "kernel heatmaps") if png else "", warnings_html(list(result.warnings)))
