"""Finite width against the limit: run a program at several widths and fit the rate.

For every width n the program is executed over ``trials`` independent trials and
every output is compared with its compiled limit c̊.  Two deviations are reported,
each with a least-squares slope of its logarithm against log n:

* ``rms`` — the RMS deviation of a *single trial* from the limit,
  ``sqrt(mean((values − c̊)²))``.  It is dominated by the trial-to-trial
  fluctuations, typically O(n^{-1/2}) (a Moment is an average of n weakly
  dependent terms), and it is estimated to a relative accuracy of about
  1/sqrt(2·trials) at every width, so its slope ``rate`` is well determined.
  This is the rate of the JSON contract.
* ``bias`` — ``|mean − c̊|``, the deviation of the average over the trials.  The
  systematic part is typically O(1/n), but it is resolved only where it exceeds
  the standard error of the mean (``sems``); where it does not, the slope
  ``bias_rate`` fits noise and a note says so (``bias_resolved`` per width).

Each width uses its own seed, derived from ``seed`` and the width (``width_seeds``;
``tpc execute -n W --seed S`` with that seed reproduces the row), so that the
widths are statistically independent: with one seed for all widths the random
streams share their first coordinates and neighbouring widths are correlated.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence, Union

import numpy as np

from ..arguments import usage, whole
from ..errors import TPUsageError
from ..finite.cluster import client_for
from ..finite.exec_options import UNSET, Unset, resolve
from ..finite.plan import RunSpec, run_plan
from ..finite.progress import ProgressBar

#: a bias counts as resolved where |mean − limit| > RESOLVED_SIGMAS · sem + limit error
RESOLVED_SIGMAS = 2.0

#: a bar over the widths (None: when stderr is a terminal; True, False), or a callable
#: (width, trials, seconds) told of each width instead
Progress = Union[Callable[[int, int, float], None], bool, None, Unset]


@dataclass
class OutputConvergence:
    """One output across the widths (lists are in the order of ``widths``)."""
    name: str
    limit: float
    limit_error: float
    method: str
    widths: list[int]
    means: list[float]
    stds: list[float]                 # trial-to-trial standard deviation (ddof=1)
    sems: list[float]                 # standard error of the mean, std/sqrt(trials)
    rms: list[float]                  # sqrt(mean((values − limit)²)): one trial's typical deviation
    rms_sems: list[float]             # standard error of rms (delta method)
    bias: list[float]                 # |mean − limit|
    bias_resolved: list[bool]         # bias > RESOLVED_SIGMAS·sem + limit_error
    rate: float | None                # slope of log rms against log n
    rate_error: float | None          # its statistical standard error
    bias_rate: float | None           # slope of log |mean − limit| against log n
    bias_rate_error: float | None
    values: list[list[float]] = field(repr=False, default_factory=list)   # per width, per trial
    notes: list[str] = field(default_factory=list)

    def to_dict(self, values: bool = False) -> dict:
        d = {"limit": _num(self.limit), "limit_error": _num(self.limit_error), "method": self.method,
             "widths": list(self.widths), "means": _nums(self.means), "stds": _nums(self.stds),
             "sems": _nums(self.sems), "rms": _nums(self.rms), "rms_sems": _nums(self.rms_sems),
             "bias": _nums(self.bias), "bias_resolved": list(self.bias_resolved),
             "rate": _num(self.rate), "rate_error": _num(self.rate_error),
             "bias_rate": _num(self.bias_rate), "bias_rate_error": _num(self.bias_rate_error),
             "notes": list(self.notes)}
        if values:
            d["values"] = [_nums(v) for v in self.values]
        return d


@dataclass
class ConvergeResult:
    """``converge()``'s answer; ``to_dict()`` is the JSON of ``tpc converge --json``."""
    file: str
    widths: list[int]
    trials: int
    seed: int
    width_seeds: list[int]
    matrix_dist: str | None
    dtype: str
    seconds: list[float]
    outputs: dict[str, OutputConvergence]
    warnings: list[str] = field(default_factory=list)
    conditional: bool = False           # conditional matrices (products drawn given the earlier ones)

    @property
    def label(self) -> str:
        """What distinguishes this run in a plot legend: its matrix law."""
        return self.matrix_dist or "declared laws"

    def to_dict(self, values: bool = False) -> dict:
        return {"file": self.file, "widths": list(self.widths), "trials": self.trials, "seed": self.seed,
                "width_seeds": list(self.width_seeds), "matrix_dist": self.matrix_dist,
                "dtype": self.dtype, "seconds": [round(s, 4) for s in self.seconds],
                "outputs": {k: o.to_dict(values) for k, o in self.outputs.items()},
                "warnings": list(self.warnings), "conditional": self.conditional}

    def _repr_html_(self) -> str:
        """Jupyter: the table of every output across the widths, and the plot inline."""
        from .display import converge_html
        return converge_html(self)


def _num(x) -> float | None:
    """JSON has no NaN/inf: they become null."""
    return float(x) if x is not None and math.isfinite(x) else None


def _nums(xs: Iterable) -> list:
    return [_num(x) for x in xs]


def parse_widths(text: str) -> list[int]:
    """``"256,512,1024"`` -> [256, 512, 1024]; a TPUsageError names the bad item."""
    items = [s.strip() for s in str(text).split(",")]
    if not any(items):
        raise TPUsageError("--widths: expected a comma-separated list of widths, e.g. 256,512,1024")
    widths = []
    for s in items:
        try:
            w = int(s)
        except ValueError:
            raise TPUsageError(f"--widths: {s!r} is not an integer width "
                               "(expected e.g. 256,512,1024)") from None
        widths.append(w)
    return check_widths(widths)


def check_widths(widths: Sequence[int]) -> list[int]:
    """Integers ≥ 1, sorted, without repeats."""
    out = set()
    for w in widths:
        if isinstance(w, bool) or not isinstance(w, (int, np.integer)) and not (
                isinstance(w, float) and w.is_integer()):
            raise TPUsageError(f"--widths: {w!r} is not an integer width")
        if int(w) < 1:
            raise TPUsageError(f"--widths: the width {int(w)} is not at least 1")
        out.add(int(w))
    if not out:
        raise TPUsageError("--widths: no widths given")
    return sorted(out)


def width_seed(seed: int, width: int) -> int:
    """The seed of one width: independent streams per width, reproducible from (seed, width)."""
    return int(np.random.SeedSequence([seed, width]).generate_state(1, np.uint32)[0])


def _slope(widths: Sequence[int], ys: Sequence[float], y_errors: Sequence[float] | None = None
           ) -> tuple[float | None, float | None]:
    """Least-squares slope of log y against log n, and its standard error propagated from
    the standard errors of log y (None where it cannot be computed)."""
    x = np.log(np.asarray(widths, float))
    y = np.asarray(ys, float)
    if len(x) < 2 or not np.all(np.isfinite(y)) or np.any(y <= 0):
        return None, None
    dx = x - x.mean()
    a = dx / np.sum(dx * dx)
    slope = float(np.sum(a * np.log(y)))
    if y_errors is None:
        return slope, None
    rel = np.asarray(y_errors, float) / y
    err = float(np.sqrt(np.sum(a * a * rel * rel)))
    return slope, err if math.isfinite(err) else None


def converge(program, widths: Sequence[int], trials: int = 8, seed: int = 0,
             matrix_dist: str | None = None, dtype="float64", progress: Progress = UNSET,
             limit=None, memory_limit: int | None = None, *, backend=UNSET, device=UNSET,
             scheduler=UNSET, tol: float | None = None, max_qmc_points: int | None = None) -> ConvergeResult:
    """Execute ``program`` (a ``tensorprog.Program``) at each width and compare with its limit.

    ``progress``: a bar over the widths on stderr (None: when it is a terminal; True: always;
    False: never; default: the ``tensorprog.finite.options`` setting), or a callable
    ``(width, trials, seconds)`` called after each width instead.  ``limit`` may be passed to
    reuse a ``Limit`` already computed (it is otherwise compiled here, with the matrix laws
    swapped to ``matrix_dist`` so that the warnings name the hypotheses left).  ``scheduler``
    (a Dask scheduler address, ``"local"`` or a ``distributed.Client``; default: the
    ``tensorprog.finite.options`` setting) runs every width's trials on that cluster, one task
    per trial, bit-identical to the local run.  ``tol`` and ``max_qmc_points`` are the limit's
    budget per expectation, as for ``Program.compile`` (None: the defaults)."""
    widths = check_widths(widths)
    file = program.ir.file
    usage(lambda: whole(trials, "trials", 1), file)
    # fail fast, before the small widths run: the seed, the law, the dtype and the memory of the largest width
    largest = RunSpec.checked(file, widths[-1], seed, dtype, matrix_dist, memory_limit)
    dtype_name = largest.dtype.name
    opts = resolve(backend=backend, device=device, scheduler=scheduler)   # as for execute
    run_plan(program.ir, largest, opts)
    if opts.scheduler is not None:
        client_for(opts.scheduler)                        # an unreachable scheduler: fail now
    if limit is None:
        limit = program.compile(tol=tol, max_qmc_points=max_qmc_points, matrix_dist=matrix_dist).limit()

    if not (progress is None or isinstance(progress, (bool, Unset)) or callable(progress)):
        raise TypeError(f"progress must be None, True, False or a callable (width, trials, seconds), "
                        f"not {type(progress).__name__}")
    report = progress if callable(progress) else None
    shown = False if report else resolve(progress=progress).progress
    seeds, seconds, runs = [], [], []
    with ProgressBar(len(widths), shown, desc="widths", unit="width") as bar:
        for w in widths:
            bar.note(f"n={w}", throttle=False)
            s = width_seed(int(seed), w)
            start = time.perf_counter()
            runs.append(program.execute(n=w, trials=int(trials), seed=s, matrix_dist=matrix_dist,
                                        dtype=dtype, memory_limit=memory_limit, backend=opts.backend,
                                        device=opts.device, scheduler=opts.scheduler))
            seconds.append(time.perf_counter() - start)
            seeds.append(s)
            bar.advance()
            if report:
                report(w, int(trials), seconds[-1])

    outputs = {}
    for name, lv in limit.entries.items():                # arrays of outputs: entry by entry
        values = [np.asarray(r.entries[name].values, float) for r in runs]
        outputs[name] = _output(name, lv, widths, values, int(trials))
    warnings = list(limit.warnings)
    warnings += [f"{name}: {note}" for name, o in outputs.items() for note in o.notes]
    return ConvergeResult(file, widths, int(trials), int(seed), seeds, matrix_dist, dtype_name,
                          seconds, outputs, warnings, conditional=opts.conditional)


def _output(name: str, lv, widths: list[int], values: list[np.ndarray], trials: int) -> OutputConvergence:
    c = float(lv.value)
    means, stds, sems, rms, rms_sems, bias, resolved = [], [], [], [], [], [], []
    for v in values:
        mean = float(np.mean(v))
        std = float(np.std(v, ddof=1)) if trials > 1 else float("nan")
        sem = std / math.sqrt(trials)
        d2 = (v - c) ** 2
        r = float(math.sqrt(np.mean(d2)))
        # se of mean(d²) over the trials, then d rms = d(mean d²) / (2 rms)
        r_sem = float(np.std(d2, ddof=1) / math.sqrt(trials) / (2 * r)) if trials > 1 and r > 0 \
            else float("nan")
        b = abs(mean - c)
        means.append(mean), stds.append(std), sems.append(sem)
        rms.append(r), rms_sems.append(r_sem), bias.append(b)
        resolved.append(bool(math.isfinite(sem) and b > RESOLVED_SIGMAS * sem + lv.error))
    rate, rate_error = _slope(widths, rms, rms_sems)
    bias_rate, bias_rate_error = _slope(widths, bias, sems)

    notes = []
    if len(widths) < 2:
        notes.append("one width only: no rate can be fitted")
    elif rate is None:
        notes.append("a deviation from the limit is zero or not finite at some width: no rate")
    if trials < 2:
        notes.append("one trial per width: no standard errors; the rates have no error estimate")
    if len(widths) >= 2 and rate is not None and lv.error > 0.1 * min(rms):
        notes.append(f"the limit's own error ({lv.error:.2g}, {lv.method}) is not small against the "
                     f"deviations (down to {min(rms):.2g}): the rates are unreliable")
    if len(widths) >= 2 and trials > 1 and not all(resolved):
        k = sum(not x for x in resolved)
        notes.append(f"|mean - limit| is within {RESOLVED_SIGMAS:g} standard errors at {k} of "
                     f"{len(widths)} widths: the bias is below the statistical noise there and "
                     "bias_rate fits noise, not the bias (more trials resolve it)")
    return OutputConvergence(name, c, float(lv.error), lv.method, list(widths), means, stds, sems,
                             rms, rms_sems, bias, resolved, rate, rate_error, bias_rate,
                             bias_rate_error, [list(map(float, v)) for v in values], notes)


def _fmt_rate(rate: float | None, err: float | None) -> str:
    if rate is None:
        return "—"
    return f"{rate:+.3f}" + (f" ± {err:.3f}" if err is not None else "")


def render_text(result: ConvergeResult) -> str:
    """The human-readable table of ``tpc converge``."""
    law = f"matrices: {result.matrix_dist}" if result.matrix_dist else "matrices as declared"
    lines = [f"{result.file}: {result.trials} trial(s) per width, seed {result.seed}, "
             f"{result.dtype}, {law}" + (", conditional" if result.conditional else "")]
    for name, o in result.outputs.items():
        lim = f"{o.limit:.12g}" + (" (exact)" if o.method == "exact"
                                   else f" ± {o.limit_error:.2g} ({o.method})")
        lines += ["", f"{name}: limit {lim}",
                  f"  {'width':>7} {'mean':>14} {'sem':>10} {'|mean-limit|':>13}  {'rms':>10}"]
        for i, w in enumerate(o.widths):
            mark = "" if o.bias_resolved[i] else " ~"
            lines.append(f"  {w:>7} {o.means[i]:>14.8g} {o.sems[i]:>10.3g} {o.bias[i]:>13.3g}"
                         f"{mark:<2}{o.rms[i]:>10.3g}")
        lines.append(f"  rate      {_fmt_rate(o.rate, o.rate_error):<18} slope of log rms (one trial's "
                     "deviation) against log n; -0.5 is the fluctuation rate")
        lines.append(f"  bias_rate {_fmt_rate(o.bias_rate, o.bias_rate_error):<18} slope of log "
                     "|mean - limit|" + ("; ~ marks widths where it is below noise"
                                         if not all(o.bias_resolved) else ""))
    if result.warnings:
        lines += [""] + [f"warning: {w}" if not w.startswith(result.file) else w
                         for w in result.warnings]
    return "\n".join(lines)
