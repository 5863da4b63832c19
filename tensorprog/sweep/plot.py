"""Plots of a sweep (the ``plot`` extra: matplotlib, imported only when a plot is drawn).

Two swept params: one heatmap per output over the (first, second) param plane, with contour
lines and the levels the user names (``--contour chi1=1``) drawn thick.  One swept param: each
output's value against it, with a band of ± its error (the error bound of a limit, the standard
error at finite width).  Axes carry the param names.  Only matplotlib's object-oriented API
with the Agg canvas is used, as in :mod:`.plot`.
"""
from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from ..errors import TPUsageError
from ..arguments import require_matplotlib

if TYPE_CHECKING:
    from .sweep import SweepResult


def plot_sweep(result: SweepResult, path: str | os.PathLike | None = None,
               contours: Mapping[str, Sequence[float]] | None = None, dpi: int = 110):
    """The figure of ``result`` (saved to ``path`` when given; the Figure is returned)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    names = list(result.values)
    params = list(result.params)
    if len(params) > 2:
        raise TPUsageError(f"--plot draws 1 or 2 swept params, not {len(params)} ({', '.join(params)})")
    contours = dict(contours or {})
    if len(params) == 1:
        fig = Figure(figsize=(6.4, 4.4))
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
        x = result.params[params[0]]
        for name in names:
            y, e = result.values[name], result.errors[name]
            line, = ax.plot(x, y, label=name)
            band = np.where(np.isfinite(e), e, 0.0)
            ax.fill_between(x, y - band, y + band, color=line.get_color(), alpha=0.25)
            for level in contours.get(name, []):
                ax.axhline(level, color=line.get_color(), ls=":", lw=1)
        ax.set_xlabel(params[0])
        ax.set_ylabel("value" if len(names) > 1 else names[0])
        ax.legend()
        ax.set_title(_title(result))
    else:
        fig = Figure(figsize=(4.6 * len(names), 4.0))
        FigureCanvasAgg(fig)
        x, y = result.params[params[0]], result.params[params[1]]
        for k, name in enumerate(names):
            ax = fig.add_subplot(1, len(names), k + 1)
            z = result.values[name]
            mesh = ax.pcolormesh(x, y, z.T, shading="nearest", cmap="viridis")
            fig.colorbar(mesh, ax=ax)
            if len(x) > 1 and len(y) > 1 and np.ptp(z[np.isfinite(z)]) > 0:
                ax.contour(x, y, z.T, levels=6, colors="white", linewidths=0.6)
                for level in contours.get(name, []):
                    if np.nanmin(z) < level < np.nanmax(z):
                        cs = ax.contour(x, y, z.T, levels=[level], colors="red", linewidths=2)
                        ax.clabel(cs, fmt=f"{name}={level:g}")
            ax.set_xlabel(params[0])
            ax.set_ylabel(params[1])
            ax.set_title(f"{name} ({_title(result)})")
    fig.tight_layout()
    if path is not None:
        try:
            fig.savefig(path, dpi=dpi)
        except (OSError, ValueError) as err:
            raise TPUsageError(f"--plot: cannot write {path}: {err}") from None
    return fig


def _title(result: SweepResult) -> str:
    return "limit" if result.width is None else f"n = {result.width}, {result.trials} trials"


def png_bytes(result: SweepResult) -> bytes | None:
    """The plot as PNG bytes (Jupyter's display), or None without matplotlib or for > 2 params."""
    try:
        fig = plot_sweep(result)
    except TPUsageError:
        return None
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)
    return buf.getvalue()
