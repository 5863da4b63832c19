"""Kernels over datasets: one template program, all N(N+1)/2 input pairs at once.

A template is written for two inputs whose first-layer preactivations are jointly
Gaussian with covariance s·[[q11, q12], [q12, q22]] (declared params q11, q12, q22;
s a constant such as the first layer's weight variance).  For data X (N × d),
q = X Xᵀ / d fills those entries for every pair i ≤ j:
  * the limit: the compiled recurrence in batch mode (each expectation once, vectorized
    over pairs: closed forms evaluated on arrays, or one shared quadrature grid);
  * finite width n: one network (the same matrices) applied to all N inputs, the pairs
    as columns of (n, P) arrays, so each layer is one GEMM per chunk of pairs.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import distributions as D
from .. import ir
from ..expect.budget import DEFAULT, Budget
from ..limit.compiler import compile_program
from ..errors import TPUsageError
from ..finite.exec_options import UNSET, resolve
from ..finite.executor import Executor
from ..finite.plan import plan_run
from ..finite.run import map_trials
from ..limit.symbolic_params import relower

Q_NAMES = ("q11", "q12", "q22")
PROBES = ((1.3, 0.37, 0.9), (0.7, -0.21, 1.6))


@dataclass
class KernelMatrix:
    """An N×N kernel: the limit (error bound, method) or the mean/std over finite-width trials."""
    mean: np.ndarray
    std: np.ndarray | None = None          # finite width: spread over trials
    error: np.ndarray | None = None        # limit: error bound per entry
    method: str = "finite width"
    values: list[np.ndarray] = field(default_factory=list)   # finite width: per trial


@dataclass
class KernelResult:
    outputs: dict[str, KernelMatrix]
    width: int | None                      # None: the infinite-width limit
    trials: int = 0
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        """Per output: diagonal and off-diagonal means, method, and the largest error
        (the limit's bound, or the largest standard error over trials at finite width)."""
        rows = {}
        for name, k in self.outputs.items():
            N = k.mean.shape[0]
            off = k.mean[~np.eye(N, dtype=bool)]
            spread = k.error if k.error is not None else (k.std / np.sqrt(max(self.trials, 1)))
            rows[name] = {"diag_mean": float(np.mean(np.diag(k.mean))),
                          "offdiag_mean": float(off.mean()) if off.size else float("nan"),
                          "method": k.method, "max_error": float(np.max(spread))}
        return {"width": self.width, "trials": self.trials, "outputs": rows, "warnings": self.warnings}

    def save(self, path: str, output: str | None = None) -> None:
        """``.npz``: every output (and ``NAME_error`` / ``NAME_std``); ``.npy``: one output."""
        if str(path).endswith(".npz"):
            arrays = {name: k.mean for name, k in self.outputs.items()}
            arrays.update({f"{name}_{'error' if k.error is not None else 'std'}":
                           (k.error if k.error is not None else k.std) for name, k in self.outputs.items()})
            np.savez(path, **arrays)
            return
        name = output or next(iter(self.outputs))
        if name not in self.outputs:
            raise TPUsageError(f"--output: no output '{name}' (outputs: {', '.join(self.outputs)})")
        np.save(path, self.outputs[name].mean)

    def _repr_html_(self) -> str:
        """Jupyter: a summary per output and the kernels as heatmaps."""
        from .display import kernel_html
        return kernel_html(self)


def load_inputs(path: str) -> np.ndarray:
    """An (N, d) numeric array from a .npy file (no pickles)."""
    try:
        X = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise TPUsageError(f"--inputs: cannot read {path}: {err}") from None
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.dtype.kind not in "biuf":
        raise TPUsageError(f"--inputs: {path} must hold a numeric (N, d) array")
    return X.astype(float)


def template(program: ir.Program, params: dict | None = None) -> tuple[ir.Program, int, float]:
    """(IR, index of the input group, scale s): where q11, q12, q22 enter the program."""
    params = {k: v for k, v in (params or program.params).items() if k not in Q_NAMES}
    missing = [q for q in Q_NAMES if q not in program.params]
    if missing:
        raise TPUsageError(f"a kernel template declares params q11, q12, q22 (missing: {', '.join(missing)})",
                           file=program.file)
    probes = [relower(program, {**params, **dict(zip(Q_NAMES, p))}) for p in PROBES]
    for g, group in enumerate(probes[0].groups):
        cov = group.dist.cov
        if cov is None or len(group.members) != 2:
            continue
        s = cov[0][0] / PROBES[0][0]
        fits = all(np.allclose(pr.groups[g].dist.cov, s * np.array([[p[0], p[1]], [p[1], p[2]]]), rtol=1e-12)
                   for pr, p in zip(probes, PROBES))
        same = probes[0].eqns == probes[1].eqns and all(
            a == b for k, (a, b) in enumerate(zip(probes[0].groups, probes[1].groups)) if k != g)
        if fits and same:
            return probes[0], g, float(s)
    raise TPUsageError("q11, q12, q22 must enter the template only as the covariance "
                       "s·[[q11, q12], [q12, q22]] of one pair of initial vectors", file=program.file)


def _pairs(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = np.asarray(X, dtype=float)
    if X.ndim != 2 or X.shape[0] < 1 or not np.all(np.isfinite(X)):
        raise TPUsageError("the inputs must be a finite array of shape (N, d)")
    q = X @ X.T / X.shape[1]
    i, j = np.triu_indices(X.shape[0])
    return q, i, j


def _symmetric(values: np.ndarray, i: np.ndarray, j: np.ndarray, N: int) -> np.ndarray:
    K = np.empty((N, N))
    K[i, j] = values
    K[j, i] = values
    return K


def limit_kernel(program: ir.Program, X: np.ndarray, tol: float = DEFAULT.tol, params: dict | None = None) -> KernelResult:
    """The infinite-width kernels, vectorized over all pairs."""
    tmpl, g, s = template(program, params)
    q, i, j = _pairs(X)
    N = q.shape[0]
    values = {o.name: np.empty(len(i)) for o in tmpl.outputs}
    errors = {o.name: np.empty(len(i)) for o in tmpl.outputs}
    methods: dict[str, set[str]] = {o.name: set() for o in tmpl.outputs}
    warnings: list[str] = []
    for part in _singularity_classes(q, i, j):
        a, b = i[part], j[part]
        covs = s * np.stack([np.stack([q[a, a], q[a, b]], -1), np.stack([q[a, b], q[b, b]], -1)], -2)
        lim = compile_program(tmpl, budget=Budget(tol=tol), batch_covs={g: covs}).limit()
        for name, v in lim.outputs.items():
            values[name][part] = v.value
            errors[name][part] = v.error
            methods[name].add(v.method)
        warnings += [w for w in lim.warnings if w not in warnings]
    rank = {"exact": 0, "quadrature": 1, "qmc": 2}
    outputs = {name: KernelMatrix(_symmetric(values[name], i, j, N), error=_symmetric(errors[name], i, j, N),
                                  method=max(methods[name], key=rank.__getitem__)) for name in values}
    return KernelResult(outputs, None, warnings=warnings)


def _singularity_classes(q: np.ndarray, i: np.ndarray, j: np.ndarray) -> list[np.ndarray]:
    """Pairs split into x ≡ y, x ≡ −y and the rest: each class is compiled as its own batch,
    so the exact singular structure (a correlation of exactly ±1) reaches the closed forms."""
    norm = np.sqrt(q[i, i] * q[j, j])
    r = np.divide(q[i, j], norm, out=np.zeros_like(norm), where=norm > 0)
    same, opposite = (r >= 1 - 1e-12) | (i == j), r <= -1 + 1e-12
    rest = ~(same | opposite)
    return [np.nonzero(m)[0] for m in (same, opposite, rest) if m.any()]


def finite_kernel(program: ir.Program, X: np.ndarray, n: int, trials: int = 1, seed: int = 0,
                  matrix_dist: str | None = None, dtype=np.float64, params: dict | None = None,
                  max_elements: int = 1 << 22, jobs=UNSET, backend=UNSET, device=UNSET) -> KernelResult:
    """Empirical kernels of width-n networks: the same matrices for every input of a trial.
    ``jobs`` worker processes run the trials (default: the ``tensorprog.finite.options`` setting,
    else 1); the values are bit-identical to one process.  ``blocked`` and ``progress`` (a bar
    over the trials) come from ``tensorprog.finite.options``."""
    tmpl, g, s = template(program, params)
    q, i, j = _pairs(X)
    N = q.shape[0]
    opts = resolve(jobs=jobs, backend=backend, device=device)     # backend, device: as for execute
    plan = plan_run(tmpl, n, seed, dtype, matrix_dist, blocked=opts.blocked, block_rows=opts.block_rows,
                    backend=opts.backend, device=opts.device)
    trial = functools.partial(_kernel_trial, g=g, factor=D.psd_factor(s * q), i=i, j=j, N=N,
                              chunk=max(1, max_elements // n))
    runs = map_trials(plan, trial, trials, opts.jobs, opts.progress, desc="kernel trials")
    outputs = {}
    for o in tmpl.outputs:
        mats = [run[o.name] for run in runs]
        stack = np.stack(mats)
        outputs[o.name] = KernelMatrix(stack.mean(0), stack.std(0, ddof=1) if trials > 1 else np.zeros((N, N)),
                                       values=mats)
    return KernelResult(outputs, n, trials)


def _kernel_trial(ex: Executor, t: int, *, g: int, factor: np.ndarray, i: np.ndarray, j: np.ndarray,
                  N: int, chunk: int) -> dict[str, np.ndarray]:
    """One trial: N inputs x = factor·z (one z per trial), every pair (i, j) as columns of (n, P)."""
    members, width = ex.program.groups[g].members, ex.program.groups[g].width
    z = ex.rng(t, members[0]).standard_normal((factor.shape[1], ex.sizes[width]))
    inputs = (factor @ z).astype(ex.dtype)                      # N inputs, n coordinates each
    got: dict[str, list[np.ndarray]] = {o.name: [] for o in ex.program.outputs}
    for start in range(0, len(i), chunk):
        a, b = i[start:start + chunk], j[start:start + chunk]
        out = ex.run_trial(t, columns={members[0]: inputs[a].T, members[1]: inputs[b].T})
        for name in got:
            got[name].append(np.broadcast_to(out[name], a.shape))
    return {name: _symmetric(np.concatenate(parts), i, j, N) for name, parts in got.items()}


def kernel(program, X, *, n: int | None = None, trials: int = 1, seed: int = 0,
           matrix_dist: str | None = None, dtype=np.float64, tol: float = DEFAULT.tol, **params) -> KernelResult:
    """N×N kernels of a template over data X: the limit (n=None) or finite width n."""
    from ..program import Program, load
    if isinstance(program, (str, Path)):
        program = load(program, **params)
    base = program.ir if isinstance(program, Program) else program
    merged = {**base.params, **params}
    if n is None:
        if matrix_dist:
            from ..limit.matrix_laws import with_matrix_family
            base = with_matrix_family(base, matrix_dist)
        return limit_kernel(base, X, tol=tol, params=merged)
    return finite_kernel(base, X, n, trials, seed, matrix_dist, dtype, params=merged)
