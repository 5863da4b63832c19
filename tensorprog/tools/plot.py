"""Convergence plots (the ``plot`` extra: matplotlib, imported only when a plot is drawn).

``plot_convergence(result, "out.png")`` draws, on log–log axes, the deviation from the
limit against the width: for every output the RMS deviation of one trial (solid line,
error bars: its standard error) and ``|mean − limit|`` (hollow markers, dotted, error
bars: the standard error of the mean; by default for a single result only), with an
n^{-1/2} reference line.  Several ``ConvergeResult``s (e.g. one per matrix law: the
universality plot) are overlaid, one colour per result and output.

Only matplotlib's object-oriented API with the Agg canvas is used: pyplot's global
state and the session's backend are left alone.
"""
from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Sequence

from ..errors import TPUsageError

from ..arguments import INSTALL_HINT, require_matplotlib  # noqa: F401  (re-exported)

if TYPE_CHECKING:      # converge's rich display draws with this module: no import back at run time
    from .converge import ConvergeResult



def plot_convergence(result_or_results: ConvergeResult | Sequence[ConvergeResult], path: str | os.PathLike,
                     labels: Sequence[str] | None = None, title: str | None = None,
                     outputs: Sequence[str] | None = None, bias: bool | None = None, dpi: int = 120) -> str:
    """Write a PNG (or any format matplotlib infers from ``path``) and return its path.

    ``labels`` names each result in the legend (default: its matrix law); ``outputs``
    restricts the outputs drawn (default: all); ``bias`` draws |mean − limit| too (default:
    for a single result only, to keep overlays readable)."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullLocator

    results = [result_or_results] if hasattr(result_or_results, "outputs") \
        else list(result_or_results)       # one ConvergeResult, or several
    if not results:
        raise TPUsageError("plot_convergence: no results to plot")
    if bias is None:
        bias = len(results) == 1
    if labels is None:
        labels = [r.label for r in results]
    elif len(labels) != len(results):
        raise TPUsageError(f"plot_convergence: {len(labels)} labels for {len(results)} results")
    for r in results:
        missing = [o for o in (outputs or []) if o not in r.outputs]
        if missing:
            raise TPUsageError(f"plot_convergence: no output {missing[0]!r} "
                               f"(outputs: {', '.join(r.outputs)})")

    lines = []                                   # (legend text, OutputConvergence)
    for r, lab in zip(results, labels):
        names = list(outputs or r.outputs)
        for name in names:
            o = r.outputs[name]
            text = name if len(results) == 1 else (lab if len(names) == 1 else f"{lab}: {name}")
            lines.append((text, o))

    fig = Figure(figsize=(7, 4.8))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    if len(lines) <= 10:
        palette = [f"C{i}" for i in range(10)]
    else:
        from matplotlib import colormaps
        palette = [colormaps["tab20"](i % 20) for i in range(len(lines))]
    markers = "osD^v<>ph*"

    ys = []
    for i, (text, o) in enumerate(lines):
        color, marker = palette[i], markers[i % len(markers)]
        w = [x for x, y in zip(o.widths, o.rms) if _pos(y)]
        y = [y for y in o.rms if _pos(y)]
        e = [_err(s) for s, y2 in zip(o.rms_sems, o.rms) if _pos(y2)]
        rate = "" if o.rate is None else f" (rate {o.rate:+.2f})"
        ax.errorbar(w, y, yerr=_lower_clip(y, e), color=color, marker=marker, ms=5, lw=1.6,
                    capsize=3, label=f"{text}{rate}")
        ys += y
        if bias:
            wb = [x for x, b in zip(o.widths, o.bias) if _pos(b)]
            b = [b for b in o.bias if _pos(b)]
            eb = [_err(s) for s, b2 in zip(o.sems, o.bias) if _pos(b2)]
            ax.errorbar(wb, b, yerr=_lower_clip(b, eb), color=color, marker=marker, ms=5, lw=1,
                        ls=":", mfc="none", capsize=2, alpha=0.8)
            ys += b
    if not ys:
        raise TPUsageError("plot_convergence: every deviation is zero or not finite; nothing to plot")

    # the n^{-1/2} reference through the geometric mean of the RMS points
    all_w = sorted({w for _, o in lines for w in o.widths})
    pts = [(w, y) for _, o in lines for w, y in zip(o.widths, o.rms) if _pos(y)]
    if pts and len(all_w) > 1:
        logc = sum(math.log(y) + 0.5 * math.log(w) for w, y in pts) / len(pts)
        ref = [math.exp(logc) * w ** -0.5 for w in all_w]
        ax.plot(all_w, ref, color="0.4", ls="--", lw=1.2, label=r"$\propto n^{-1/2}$")
        ys += ref
    lo, hi = min(ys), max(ys)
    ax.set_ylim(lo / 3, hi * 2)
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticks(all_w)
    ax.set_xticklabels([_width_label(w, len(all_w)) for w in all_w])
    ax.set_xlabel("width n")
    ax.set_ylabel("deviation from the limit")
    ax.grid(True, which="major", alpha=0.3)
    if title is None:
        r0 = results[0]
        title = f"{os.path.basename(r0.file)}: {r0.trials} trials per width"
    ax.set_title(title, fontsize=11)
    handles, texts = ax.get_legend_handles_labels()
    handles.append(Line2D([], [], color="0.2", marker="o", lw=1.6))
    texts.append("rms of one trial − limit")
    if bias:
        handles.append(Line2D([], [], color="0.2", marker="o", mfc="none", ls=":", lw=1))
        texts.append("|mean − limit| ± sem")
    ax.legend(handles, texts, fontsize=8, loc="best", framealpha=0.85)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=dpi)
    except (OSError, ValueError) as err:
        raise TPUsageError(f"cannot write the plot {os.fspath(path)!r}: "
                           f"{getattr(err, 'strerror', None) or err}") from None
    return os.fspath(path)


def _width_label(w: int, count: int) -> str:
    """A tick label: the width, or 2^k for a power of two when there are many ticks (they would overlap)."""
    w = int(w)
    if count > 8 and w >= 1024 and w & (w - 1) == 0:
        return f"$2^{{{w.bit_length() - 1}}}$"
    return str(w)


def _pos(y) -> bool:
    return y is not None and math.isfinite(y) and y > 0


def _err(s) -> float:
    return s if s is not None and math.isfinite(s) else 0.0


def _lower_clip(ys: list[float], errs: list[float]):
    """Asymmetric error bars that stay positive on a log axis (down to a tenth of the value
    where the error exceeds it: the point is then consistent with zero)."""
    lower = [min(e, 0.9 * y) for y, e in zip(ys, errs)]
    return [lower, list(errs)]
