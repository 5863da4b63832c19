"""The Python API: ``load``/``parse`` a program, then ``execute`` or ``compile`` it."""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import numpy as np

from . import ir
from .errors import TPLoadError, TPUsageError
from .expect.budget import Budget
from .finite.exec_options import UNSET
from .finite.run import ExecResult, execute
from .lang.lower import lower
from .lang.parser import parse_text


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
                progress=UNSET, block_rows=UNSET, backend=UNSET, device=UNSET, scheduler=UNSET) -> ExecResult:
        """Finite width: run at width ``n`` over ``trials`` independent seeds.  ``jobs``,
        ``blocked``, ``progress``, ``backend`` ('numpy', 'torch', 'jax', 'cupy'), ``device``
        ('cpu', 'cuda'), ``scheduler`` (a Dask address, 'local' or a Client) (and ``block_rows``):
        see :func:`tensorprog.finite.run.execute`;
        those not given come from :func:`tensorprog.finite.options`.  A program with no ``out`` is a
        TPUsageError: it would report nothing."""
        if not self.ir.outputs:
            raise TPUsageError("the program has no 'out' statement: executing it would report nothing "
                               "(add one, e.g. out k = mean(x * x))", file=self.ir.file)
        return execute(self.ir, n, trials, seed, matrix_dist, dtype, memory_limit, jobs=jobs,
                       blocked=blocked, progress=progress, block_rows=block_rows, backend=backend,
                       device=device, scheduler=scheduler)

    def compile(self, symbolic: bool = False, tol: float | None = None, max_qmc_points: int | None = None,
                seed: int | None = None, max_quad_points: int | None = None,
                max_expand_size: int | None = None, matrix_dist: str | None = None):
        """Infinite width: the Master Theorem recurrence (``.limit()`` gives the values).

        ``symbolic``: closed forms where they exist (params that enter only initial covariances
        stay symbols).  The others are the fields of :class:`tensorprog.expect.budget.Budget`,
        whose defaults live there (``None``: the default): ``tol``, the target error of each
        numerical expectation; ``max_qmc_points``, the budget of quasi-Monte Carlo points per
        expectation; ``seed``, the seed of the randomized QMC rules; ``max_quad_points``, the
        largest tensor quadrature grid (beyond it, QMC); ``max_expand_size``, the largest
        symbolic expansion tried for a closed form (beyond it, numerics).  A [budget] warning
        names the option whenever a limit was reached; a value out of range is a TPUsageError.
        ``matrix_dist`` swaps the law of every matrix (variance kept), as execute's does."""
        from .limit.compiler import compile_program
        from .limit.matrix_laws import with_matrix_family
        program = with_matrix_family(self.ir, matrix_dist) if matrix_dist else self.ir
        given = dict(tol=tol, max_qmc_points=max_qmc_points, seed=seed, max_quad_points=max_quad_points,
                     max_expand_size=max_expand_size)
        limits = _budget({k: v for k, v in given.items() if v is not None}, self.ir.file)
        if not symbolic:
            return compile_program(program, budget=limits)
        from .limit.symbolic_params import symbolic_covariances
        covs, values = symbolic_covariances(program)
        return compile_program(program, symbolic=True, budget=limits, symbolic_covs=covs, param_values=values)

    def limit(self, *args, **options):
        """``compile(*args, **options).limit()``."""
        return self.compile(*args, **options).limit()

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
          max_nodes: int = 1_000_000, **params: float) -> Program:
    """Parse and check program text; ``params`` override the program's ``param`` statements."""
    base = base_dir or os.getcwd()
    if "load" not in text:                     # reads no file: the same text lowers to the same IR
        try:
            key = tuple(sorted(params.items()))
            hash(key)
        except TypeError:                      # a param value that cannot be hashed
            key = None
        if key is not None:
            return Program(lowered(text, file, key, base, max_nodes))
    module = parse_text(text, file)
    return Program(lower(module, params, file=file, source=text, base_dir=base, max_nodes=max_nodes))


@lru_cache(maxsize=64)
def lowered(text: str, file: str, params: tuple, base_dir: str, max_nodes: int) -> ir.Program:
    """The IR of a program that reads no file (kept, by its text: the IR is immutable, and a kernel
    template loaded once per ``tp.kernel`` call is lowered once)."""
    return lower(parse_text(text, file), dict(params), file=file, source=text, base_dir=base_dir,
                 max_nodes=max_nodes)


def load(path: str | os.PathLike, max_nodes: int = 1_000_000, **params: float) -> Program:
    """Read a ``.tp`` file; ``load()`` inside it reads files next to it."""
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TPLoadError(f"cannot read the program: {err.strerror if isinstance(err, OSError) else err}",
                          file=str(path)) from None
    return parse(text, file=str(path), base_dir=str(p.resolve().parent), max_nodes=max_nodes, **params)
