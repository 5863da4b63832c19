"""The limit of a long program by particles: finite width, many replicas, and the 1/n bias removed.

``compile(method="particles")`` skips the Master Theorem recurrence (whose expectations become
(T + 2)-dimensional integrals after T training steps) and runs the program itself, at a large
width N with R independent replicas (seeds), and again at the smaller width N_s = N / r (r = 4
by default), with R replicas too.  Its cost is linear in the program's length, times N·R.

Why this is a limit with an honest error: an output c_n of a Tensor Program at width n has
mean E c_n = c̊ + b₁/n + O(1/n²) and fluctuations of order 1/√n.  With v_N, v_s the replica means
at N and N_s (standard errors s_N, s_s), the Richardson extrapolation to 1/n → 0 is

    E = v_N + (v_N − v_s)/(r − 1),      r = N/N_s,

which removes b₁/n; its standard error is SE² = (r/(r−1))² s_N² + (1/(r−1))² s_s².  The stated error

    error = t_ν · SE + |v_N − v_s|/(r − 1)

is a statistical term (t_ν the two-sided 99% Student quantile at the Welch–Satterthwaite degrees
of freedom ν of SE: 2.58 for many replicas, about 3 for 16, 4 for 4: honest with few replicas)
plus a bias term.
E's bias is the second-order residual −r·b₂/N² (b₂ the 1/n² coefficient); the bias term, the
whole first-order correction |E − v_N| ≈ |b₁|/N, bounds it whenever the expansion is in its
asymptotic regime at N_s (|b₂/N_s²| ≤ |b₁/N_s|, i.e. the second term at the small width is
no larger than the first).  That is why N_s must be large against the number of products by
one matrix (:func:`check_options`).  When the bias term dominates and is resolved above the
noise, a ``[particles]`` warning says so (raise N).

Allocation: with cost ∝ N·R and Var ∝ 1/(N·R), the same replica count at both widths minimises
SE for the cost (the small width then adds 1/r of the time).

The finite-width engine is the conditional one of :mod:`tensorprog.finite`
(``execute(..., conditional=True)``: Gaussian conditioning, exact in law at any width, O(n·k)
per product) when every matrix's law can be conditioned (normal, mvt, orthogonal), else the dense
one (the same law, O(n²) per product: iid non-Gaussian laws such as uniform or rademacher).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from .. import ir
from ..errors import TPUsageError
from .accuracy import VALUE_ROUNDING

#: the two-sided coverage of the statistical term (±2.58σ for a Gaussian, about ±3 standard
#: errors at the Student quantile of 16 replicas)
COVERAGE = 0.99
#: the smallest width of the small run
MIN_WIDTH = 64
#: the small width must be at least this many times the most products by one matrix
PRODUCTS_FACTOR = 4
#: the fewest replicas: the error bar rests on their spread
MIN_REPLICAS = 4


@dataclass(frozen=True)
class ParticleOptions:
    """``particles``: the large width N; ``replicas``: R independent runs at each width;
    ``ratio``: N / N_s, the small width's divisor (≥ 2); ``seed``: the seed from which both runs'
    seeds are derived (a limit is reproducible for a seed); ``conditional``: use the conditional
    engine (None: when every matrix's law can be conditioned, else the dense one)."""
    particles: int = 1 << 16
    replicas: int = 16
    ratio: int = 4
    seed: int = 0
    conditional: bool | None = None

    @property
    def small(self) -> int:
        """N_s = N // ratio."""
        return self.particles // self.ratio


@dataclass(frozen=True)
class WidthRun:
    """The replicas at one width: each output's mean and standard error over them."""
    width: int
    replicas: int
    seed: int
    means: dict[str, float]
    sems: dict[str, float]
    seconds: float


@dataclass(frozen=True)
class ParticleValue:
    """One output: the extrapolated value and its error = statistical + bias (module docstring)."""
    value: float
    error: float
    statistical: float
    bias: float
    se: float
    dof: float

    def as_limit(self):
        """The :class:`~.result.LimitValue` (method ``particles``, no closed form)."""
        from .result import LimitValue           # (sympy: not loaded by the command line's start)
        return LimitValue(self.value, self.error, "particles")


@dataclass
class ParticlesResult:
    """What ``compile(method="particles")`` returns: the two runs and every output's estimate;
    ``limit()`` is a :class:`~.result.Limit` whose values have method ``particles``."""
    program: ir.Program
    options: ParticleOptions
    engine: str
    large: WidthRun
    small: WidthRun
    outputs: dict[str, ParticleValue]
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def limit(self):
        """The :class:`~.result.Limit` of every output, with the run's warnings."""
        from .result import Limit
        return Limit({k: v.as_limit() for k, v in self.outputs.items()}, list(self.warnings))

    def describe(self) -> list[str]:
        """The run, as text lines (what ``tpc compile --method particles`` prints above the limits)."""
        o = self.options
        lines = [f"particles: width N = {self.large.width} and N/{o.ratio} = {self.small.width}, "
                 f"{o.replicas} replicas each, {self.engine} engine, seed {o.seed}, {self.seconds:.3g} s",
                 "value = Richardson extrapolation to 1/n -> 0; error = t*SE (99%) + |1/n correction|",
                 f"{'output':<12} {'mean at N':>14} {'SE':>9} {'mean at N/' + str(o.ratio):>14} {'SE':>9} "
                 f"{'statistical':>11} {'bias':>9}"]
        for name, v in self.outputs.items():
            lines.append(f"{name:<12} {self.large.means[name]:>14.8g} {self.large.sems[name]:>9.2g} "
                         f"{self.small.means[name]:>14.8g} {self.small.sems[name]:>9.2g} "
                         f"{v.statistical:>11.2g} {v.bias:>9.2g}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self.describe())

    def to_dict(self) -> dict:
        """The run's details (the ``particles`` entry of ``--emit json``)."""
        def run(r: WidthRun) -> dict:
            return {"width": r.width, "replicas": r.replicas, "seed": r.seed, "seconds": r.seconds,
                    "means": dict(r.means), "sems": dict(r.sems)}
        return {"particles": self.options.particles, "replicas": self.options.replicas,
                "ratio": self.options.ratio, "seed": self.options.seed, "engine": self.engine,
                "seconds": self.seconds, "runs": [run(self.large), run(self.small)],
                "outputs": {k: {"statistical": v.statistical, "bias": v.bias, "se": v.se, "dof": v.dof}
                            for k, v in self.outputs.items()}}

    def _repr_html_(self) -> str:
        from .printers import particles_html
        return particles_html(self)


def most_products(program: ir.Program) -> int:
    """The most MatMuls by one matrix (W and Wᵀ together): the rank k of its conditioning."""
    counts: dict[int, int] = {}
    for e in program.eqns:
        if isinstance(e, ir.MatMul):
            counts[e.matrix] = counts.get(e.matrix, 0) + 1
    return max(counts.values(), default=0)


def is_count(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_options(program: ir.Program, opts: ParticleOptions) -> None:
    """Refuse options that cannot give an honest limit (TPUsageError saying what to do)."""
    file = program.file
    if not is_count(opts.particles) or opts.particles < 1:
        raise TPUsageError(f"--particles must be a positive integer, got {opts.particles!r}", file=file)
    if not is_count(opts.replicas) or opts.replicas < MIN_REPLICAS:
        raise TPUsageError(f"--replicas must be an integer of at least {MIN_REPLICAS} (the error bar rests "
                           f"on the replicas' spread), got {opts.replicas!r}", file=file)
    if not is_count(opts.ratio) or opts.ratio < 2:
        raise TPUsageError(f"the width ratio must be an integer of at least 2, got {opts.ratio!r}", file=file)
    if not is_count(opts.seed) or opts.seed < 0:
        raise TPUsageError(f"the seed must be a non-negative integer, got {opts.seed!r}", file=file)
    k = most_products(program)
    least = max(MIN_WIDTH, PRODUCTS_FACTOR * k) * opts.ratio
    if opts.particles < least:
        why = (f"{k} products by one matrix: the small width N/{opts.ratio} must be at least "
               f"{PRODUCTS_FACTOR}x that for the 1/n expansion to hold" if PRODUCTS_FACTOR * k > MIN_WIDTH
               else f"the small width N/{opts.ratio} must be at least {MIN_WIDTH}")
        raise TPUsageError(f"--particles {opts.particles} is too small for this program ({why}); "
                           f"use --particles {least} or more", file=file)


def student_quantile(dof: float) -> float:
    """The two-sided :data:`COVERAGE` quantile of Student's t with ``dof`` degrees of freedom."""
    from scipy.stats import norm, t
    p = 0.5 + COVERAGE / 2
    return float(norm.ppf(p)) if not math.isfinite(dof) else float(t.ppf(p, dof))


def extrapolate(large: tuple[float, float, int], small: tuple[float, float, int], ratio: float) -> ParticleValue:
    """Richardson extrapolation of (mean, SE, replicas) at N and at N/ratio to 1/n → 0, with its
    error (module docstring)."""
    (v_n, s_n, r_n), (v_s, s_s, r_s) = large, small
    a, b = ratio / (ratio - 1), 1 / (ratio - 1)
    value = a * v_n - b * v_s
    se = math.hypot(a * s_n, b * s_s)
    parts = (a * s_n) ** 4 / (r_n - 1) + (b * s_s) ** 4 / (r_s - 1)
    dof = se ** 4 / parts if parts > 0 else math.inf
    statistical = student_quantile(dof) * se
    bias = abs(v_n - v_s) * b
    rounding = VALUE_ROUNDING * abs(value)          # (cancellations inside a replica are in its spread)
    return ParticleValue(value, statistical + bias + rounding, statistical, bias, se, dof)


def run_width(program: ir.Program, n: int, replicas: int, seed: int, conditional: bool,
              matrix_dist: str | None) -> WidthRun:
    """``replicas`` trials at width ``n``: each output's mean and standard error."""
    from ..finite.run import execute
    start = time.perf_counter()
    extra = {"conditional": True} if conditional else {}
    result = execute(program, n, trials=replicas, seed=seed, matrix_dist=matrix_dist, **extra)
    seconds = time.perf_counter() - start
    means = {k: float(o.mean) for k, o in result.outputs.items()}
    sems = {k: float(o.std / math.sqrt(len(o.values))) for k, o in result.outputs.items()}
    return WidthRun(n, replicas, seed, means, sems, seconds)


def conditional_available() -> bool:
    """Whether the finite executor has the conditional mode (``execute(..., conditional=True)``)."""
    import inspect
    from ..finite.run import execute
    return "conditional" in inspect.signature(execute).parameters


def choose_engine(program: ir.Program, wanted: bool | None, matrix_dist: str | None) -> bool:
    """Whether to run conditionally: ``wanted``, or (None) when the mode exists and every matrix's
    law can be conditioned exactly (normal, mvt, orthogonal; iid non-Gaussian laws run dense)."""
    if wanted is False:
        return False
    if wanted and not conditional_available():
        raise TPUsageError("the conditional engine is not available in this version", file=program.file)
    if wanted:
        return True
    if not conditional_available():
        return False
    from ..finite.plan import matrix_specs
    return all(spec.law.conditionable for spec in matrix_specs(program, matrix_dist).values())


def run_seeds(seed: int) -> tuple[int, int]:
    """Independent seeds of the large and the small run, derived from ``seed``."""
    state = np.random.SeedSequence(seed, spawn_key=(0x9A271C,)).generate_state(2, dtype=np.uint32)
    return int(state[0]), int(state[1])


def particles(program: ir.Program, opts: ParticleOptions = ParticleOptions(),
              matrix_dist: str | None = None) -> ParticlesResult:
    """The limit of every output of ``program`` by particles (module docstring)."""
    check_options(program, opts)
    conditional = choose_engine(program, opts.conditional, matrix_dist)
    start = time.perf_counter()
    seed_large, seed_small = run_seeds(opts.seed)
    large = run_width(program, opts.particles, opts.replicas, seed_large, conditional, matrix_dist)
    small = run_width(program, opts.small, opts.replicas, seed_small, conditional, matrix_dist)
    ratio = opts.particles / opts.small
    outputs, warnings = {}, []
    for name in large.means:
        v = extrapolate((large.means[name], large.sems[name], opts.replicas),
                        (small.means[name], small.sems[name], opts.replicas), ratio)
        outputs[name] = v
        resolved = v.bias * (ratio - 1) > 3 * math.hypot(large.sems[name], small.sems[name])
        if resolved and v.bias > v.statistical:
            warnings.append(f"[particles] {name}: the 1/n correction ({v.bias:.2g}) exceeds the statistical "
                            f"error ({v.statistical:.2g}) and dominates the stated error; a larger "
                            "--particles makes it smaller")
    return ParticlesResult(program, opts, "conditional" if conditional else "dense", large, small, outputs,
                           warnings, time.perf_counter() - start)
