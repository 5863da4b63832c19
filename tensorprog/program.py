"""The Python API: ``load``/``parse`` a program, then ``execute`` or ``compile`` it."""
from __future__ import annotations

import dataclasses
import numbers
import os
from functools import lru_cache
from typing import Mapping

import numpy as np

from . import ir
from .arguments import usage, whole
from .errors import TPUsageError
from .expect.budget import Budget
from .finite.exec_options import UNSET
from .finite.run import ExecResult, execute
from .lang.lower import lower
from .lang.parser import parse_text
from .lang.source import MAX_SOURCE_CHARS, base_dir_of, check_limit, check_size, read_source


class Program:
    """A checked, unrolled program (its IR is ``.ir``) with both of its meanings."""

    def __init__(self, ir_program: ir.Program) -> None:
        self.ir = ir_program

    @property
    def outputs(self) -> list[str]:
        """The reported outputs' names: an array of outputs (``out K[i, j]``) once, as ``K``."""
        return [item.name for item in ir.output_table(self.ir.outputs)]

    def execute(self, n: int, trials: int = 1, seed: int = 0, matrix_dist: str | None = None,
                dtype=np.float64, memory_limit: int | None = None, *, jobs=UNSET, blocked=UNSET,
                progress=UNSET, block_rows=UNSET, backend=UNSET, device=UNSET, scheduler=UNSET,
                conditional=UNSET) -> ExecResult:
        """Finite width: run at width ``n`` over ``trials`` independent seeds.  ``jobs``,
        ``blocked``, ``progress``, ``backend`` ('numpy', 'torch', 'jax', 'cupy'), ``device``
        ('cpu', 'cuda'), ``scheduler`` (a Dask address, 'local' or a Client), ``conditional``
        (products drawn given the earlier ones, exact in law) (and ``block_rows``):
        see :func:`tensorprog.finite.run.execute`;
        those not given come from :func:`tensorprog.finite.options`.  A program with no ``out`` is a
        TPUsageError: it would report nothing."""
        if not self.ir.outputs:
            raise TPUsageError("the program has no 'out' statement: executing it would report nothing "
                               "(add one, e.g. out k = mean(x * x))", file=self.ir.file)
        return execute(self.ir, n, trials, seed, matrix_dist, dtype, memory_limit, jobs=jobs,
                       blocked=blocked, progress=progress, block_rows=block_rows, backend=backend,
                       device=device, scheduler=scheduler, conditional=conditional)

    def compile(self, symbolic: bool = False, tol: float | None = None, max_qmc_points: int | None = None,
                seed: int | None = None, max_quad_points: int | None = None,
                max_expand_size: int | None = None, matrix_dist: str | None = None, *,
                method: str = "recurrence", particles: int | None = None, replicas: int | None = None,
                series_terms: int | None = None, controls: tuple[str, ...] | None = None):
        """Infinite width: the Master Theorem recurrence (``.limit()`` gives the values).

        ``method="particles"`` estimates the limit from finite widths instead (for long programs,
        whose expectations are integrals in too many dimensions): ``particles`` (the width N) and
        ``replicas`` (R) of :class:`tensorprog.limit.particles.ParticleOptions`, ``seed`` its seed;
        it returns a :class:`~tensorprog.limit.particles.ParticlesResult` (``.limit()`` likewise),
        whose values have method ``particles`` (:mod:`tensorprog.limit.particles`); ``controls``
        names scalars whose limits the recurrence gives on the program's prefix (e.g. the first
        steps' outputs), used as control variates (:mod:`tensorprog.limit.controls`).

        ``symbolic``: closed forms where they exist, in the params wherever they enter as numbers
        (variances, covariances, dim ratios, constants; :mod:`tensorprog.symbolic.traced`).  The others are the fields of :class:`tensorprog.expect.budget.Budget`,
        whose defaults live there (``None``: the default): ``tol``, the target error of each
        numerical expectation; ``max_qmc_points``, the budget of quasi-Monte Carlo points per
        expectation; ``seed``, the seed of the randomized QMC rules; ``max_quad_points``, the
        largest tensor quadrature grid (beyond it, QMC); ``max_expand_size``, the largest
        symbolic expansion tried for a closed form (beyond it, numerics); ``series_terms``, the most
        terms of the Mehler series for E f(x)g(y) (0: off).  A [budget] warning
        names the option whenever a limit was reached; a value out of range is a TPUsageError.
        ``matrix_dist`` swaps the law of every matrix (variance kept), as execute's does."""
        given = dict(tol=tol, max_qmc_points=max_qmc_points, seed=seed, max_quad_points=max_quad_points,
                     max_expand_size=max_expand_size, series_terms=series_terms)
        limits = _budget({k: v for k, v in given.items() if v is not None}, self.ir.file)   # before sympy loads
        if method == "particles":
            return self._particles(given, symbolic, matrix_dist, particles, replicas, controls)
        if method != "recurrence":
            raise TPUsageError(f"unknown compile method {method!r}: use 'recurrence' (the default) or "
                               "'particles'", file=self.ir.file)
        if particles is not None or replicas is not None or controls:
            raise TPUsageError("--particles, --replicas and --control-variates apply to --method particles only",
                               file=self.ir.file)
        from .limit.compiler import compile_program
        from .distributions.swap import with_matrix_family
        from .lang.lower import expanded
        if not symbolic:
            program = expanded(self.ir)          # the recurrence reads updated matrices expanded
            program = with_matrix_family(program, matrix_dist) if matrix_dist else program
            return compile_program(program, budget=limits)
        from .limit.symbolic_params import symbolic_covariances, symbolic_notes
        program = self._traced()
        program = with_matrix_family(program, matrix_dist) if matrix_dist else program
        covs, values = symbolic_covariances(program)
        compiled = compile_program(program, symbolic=True, budget=limits, symbolic_covs=covs, param_values=values)
        return dataclasses.replace(compiled, warnings=compiled.warnings + symbolic_notes(compiled))

    def _traced(self) -> ir.Program:
        """The program lowered again with its params as leaves (the same numbers and equations;
        :mod:`tensorprog.symbolic.traced`); the program itself where it has no source."""
        if not self.ir.source:
            return self.ir
        from .lang.lower import expanded
        base = expanded(self.ir)                 # the recurrence reads updated matrices expanded
        values = {k: v for k, v in self.ir.params.items() if isinstance(v, float)}
        traced = lower(parse_text(self.ir.source, self.ir.file), values, file=self.ir.file,
                       source=self.ir.source, base_dir=self.ir.base_dir, max_nodes=self.ir.max_nodes, trace=True,
                       expand_terms=None)
        return traced if traced == base else base       # tracing never changes the program

    def _particles(self, given: dict, symbolic: bool, matrix_dist: str | None, particles: int | None,
                   replicas: int | None, controls: tuple[str, ...] | None = None):
        """``compile(method="particles")``: the options checked, then the two runs."""
        from .limit.controls import control_names
        from .limit.particles import ParticleOptions
        from .limit.particles import particles as run_particles
        ignored = [k for k, v in given.items() if v is not None and k != "seed"] + (["symbolic"] if symbolic else [])
        if ignored:
            raise TPUsageError(f"{', '.join(ignored)}: options of the recurrence, not of --method particles "
                               "(which takes --particles, --replicas and --seed)", file=self.ir.file)
        chosen = {k: v for k, v in dict(particles=particles, replicas=replicas, seed=given["seed"],
                                        controls=control_names(controls) if controls else None).items()
                  if v is not None}
        from .lang.lower import expanded
        return run_particles(self.ir, ParticleOptions(**chosen), matrix_dist=matrix_dist, expand=expanded)

    def sweep(self, params: Mapping[str, object], n: int | None = None, trials: int = 1, seed: int = 0, *,
              tol: float | None = None, max_qmc_points: int | None = None, max_quad_points: int | None = None,
              matrix_dist: str | None = None, dtype: str = "float64", jobs: int = 1, scheduler=None):
        """The outputs over the grid of ``params`` {name: values} (their outer product): limits, or
        with ``n`` finite-width means and standard errors over ``trials`` seeds (``jobs``
        processes or a Dask ``scheduler``, one task per block of points).  Params that change only
        variances, covariances or constants are batched in one compile per structure
        (:mod:`tensorprog.sweep.grid`).  Returns a :class:`~tensorprog.sweep.grid.SweepResult`."""
        from .sweep.grid import axes_of, sweep_finite, sweep_limit
        axes = axes_of(params, self.ir.params, self.ir.file)
        if n is not None:
            return sweep_finite(self.ir, axes, n, trials, seed, matrix_dist, dtype, jobs, scheduler)
        given = dict(tol=tol, max_qmc_points=max_qmc_points, max_quad_points=max_quad_points)
        limits = _budget({k: v for k, v in given.items() if v is not None}, self.ir.file)
        if matrix_dist:
            raise TPUsageError("sweep: matrix_dist (--matrix-dist) applies to finite-width sweeps (-n) only",
                               file=self.ir.file)
        return sweep_limit(self.ir, axes, limits)

    def limit(self, *args, **options):
        """``compile(*args, **options).limit()``."""
        return self.compile(*args, **options).limit()

    def require_output(self, name: str, option: str = "output") -> str:
        """``name`` if the program has an output of that name, else a TPUsageError listing them
        (``option``: how the caller spelled the argument, e.g. ``--output``)."""
        if name not in self.outputs:
            raise TPUsageError(f"{option}: no output named {name!r} (outputs: {', '.join(self.outputs) or 'none'})",
                               file=self.ir.file)
        return name

    def summary(self) -> dict[str, int]:
        """Number of equations of each kind."""
        counts: dict[str, int] = {}
        for e in self.ir.eqns:
            counts[type(e).__name__] = counts.get(type(e).__name__, 0) + 1
        return counts

    def __str__(self) -> str:
        return str(self.ir)


def _budget(options: Mapping[str, float], file: str) -> Budget:
    """The Budget of ``compile``'s options (TPUsageError for a value out of range)."""
    try:
        return Budget(**options)
    except ValueError as err:
        raise TPUsageError(str(err), file=file) from None


def parse(text: str, file: str = "<string>", base_dir: str | None = None,
          max_nodes: int = 1_000_000, max_chars: int = MAX_SOURCE_CHARS, **params: float) -> Program:
    """Parse and check program text; ``params`` override the program's ``param`` statements.
    A text longer than ``max_chars`` (:data:`~tensorprog.lang.source.MAX_SOURCE_CHARS`) is refused
    before it is parsed; an argument of the wrong type is a TPUsageError."""
    _check_arguments(text, file, base_dir, max_nodes, max_chars, params)
    check_size(text, file, max_chars)
    base = os.fspath(base_dir) if base_dir else os.getcwd()
    if "load" not in text:                     # reads no file: the same text lowers to the same IR
        return Program(lowered(text, file, tuple(sorted(params.items())), base, max_nodes))
    module = parse_text(text, file)
    return Program(lower(module, params, file=file, source=text, base_dir=base, max_nodes=max_nodes))


def _check_arguments(text: object, file: object, base_dir: object, max_nodes: object, max_chars: object,
                     params: Mapping[str, object]) -> None:
    """The arguments of :func:`parse`: strings, positive limits and real param values."""
    for value, what in ((text, "the program text"), (file, "file")):
        if not isinstance(value, str):
            raise TPUsageError(f"{what} must be a str, not {type(value).__name__} (tp.load reads a file)")
    if base_dir is not None and not isinstance(base_dir, (str, os.PathLike)):
        raise TPUsageError(f"base_dir must be a str or a path, not {type(base_dir).__name__}", file=file)
    usage(lambda: whole(max_nodes, "max_nodes", 1), file)
    check_limit(max_chars)
    for name, value in params.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TPUsageError(f"the value of param {name} must be a real number, not {value!r}", file=file)


@lru_cache(maxsize=64)
def lowered(text: str, file: str, params: tuple, base_dir: str, max_nodes: int) -> ir.Program:
    """The IR of a program that reads no file (kept, by its text: the IR is immutable, and a kernel
    template loaded once per ``tp.kernel`` call is lowered once)."""
    return lower(parse_text(text, file), dict(params), file=file, source=text, base_dir=base_dir,
                 max_nodes=max_nodes)


def load(path: str | os.PathLike, max_nodes: int = 1_000_000, max_chars: int = MAX_SOURCE_CHARS,
         **params: float) -> Program:
    """Read a ``.tp`` file; ``load()`` inside it reads files next to it.  Only a regular file of at
    most ``max_chars`` bytes is read (:mod:`tensorprog.lang.source`: a FIFO, a device or a
    directory is refused, never waited on)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TPUsageError(f"load expects the path of a .tp file (a str or os.PathLike), not "
                           f"{type(path).__name__} (tp.parse takes program text)")
    text = read_source(path, check_limit(max_chars))
    return parse(text, file=str(path), base_dir=base_dir_of(path), max_nodes=max_nodes, max_chars=max_chars,
                 **params)
