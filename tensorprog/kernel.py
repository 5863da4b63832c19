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

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import distributions as D
from . import ir
from .compile import Compiled
from .errors import TPUsageError
from .execute import Executor
from .lower import lower
from .parser import parse_text

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


def _lower(program: ir.Program, params: dict) -> ir.Program:
    module = parse_text(program.source, program.file)
    return lower(module, params, file=program.file, source=program.source, base_dir=program.base_dir)


def template(program: ir.Program, params: dict | None = None) -> tuple[ir.Program, int, float]:
    """(IR, index of the input group, scale s): where q11, q12, q22 enter the program."""
    params = {k: v for k, v in (params or program.params).items() if k not in Q_NAMES}
    missing = [q for q in Q_NAMES if q not in program.params]
    if missing:
        raise TPUsageError(f"a kernel template declares params q11, q12, q22 (missing: {', '.join(missing)})",
                           file=program.file)
    probes = [_lower(program, {**params, **dict(zip(Q_NAMES, p))}) for p in PROBES]
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


def limit_kernel(program: ir.Program, X: np.ndarray, tol: float = 1e-10, params: dict | None = None) -> KernelResult:
    """The infinite-width kernels, vectorized over all pairs."""
    tmpl, g, s = template(program, params)
    q, i, j = _pairs(X)
    covs = s * np.stack([np.stack([q[i, i], q[i, j]], -1), np.stack([q[i, j], q[j, j]], -1)], -2)
    compiled = Compiled(tmpl, tol=tol, batch_covs={g: covs})
    lim = compiled.limit()
    N = q.shape[0]
    outputs = {name: KernelMatrix(_symmetric(np.broadcast_to(v.value, i.shape), i, j, N),
                                  error=_symmetric(np.broadcast_to(v.error, i.shape), i, j, N),
                                  method=v.method) for name, v in lim.outputs.items()}
    return KernelResult(outputs, None, warnings=lim.warnings)


def finite_kernel(program: ir.Program, X: np.ndarray, n: int, trials: int = 1, seed: int = 0,
                  matrix_dist: str | None = None, dtype=np.float64, params: dict | None = None,
                  max_elements: int = 1 << 22) -> KernelResult:
    """Empirical kernels of width-n networks: the same matrices for every input of a trial."""
    tmpl, g, s = template(program, params)
    q, i, j = _pairs(X)
    N, members = q.shape[0], tmpl.groups[g].members
    ex = Executor(tmpl, n, seed, dtype, matrix_dist)
    factor = D.psd_factor(s * q)
    chunk = max(1, max_elements // n)
    per_trial: dict[str, list[np.ndarray]] = {o.name: [] for o in tmpl.outputs}
    for t in range(trials):
        z = ex.rng(t, members[0]).standard_normal((factor.shape[1], ex.sizes[tmpl.groups[g].width]))
        inputs = (factor @ z).astype(dtype)                     # N inputs, n coordinates each
        got: dict[str, list[np.ndarray]] = {name: [] for name in per_trial}
        for start in range(0, len(i), chunk):
            a, b = i[start:start + chunk], j[start:start + chunk]
            out = ex.run_trial(t, columns={members[0]: inputs[a].T, members[1]: inputs[b].T})
            for name in got:
                got[name].append(np.broadcast_to(out[name], a.shape))
        for name in per_trial:
            per_trial[name].append(_symmetric(np.concatenate(got[name]), i, j, N))
    outputs = {}
    for name, mats in per_trial.items():
        stack = np.stack(mats)
        outputs[name] = KernelMatrix(stack.mean(0), stack.std(0, ddof=1) if trials > 1 else np.zeros((N, N)),
                                     values=mats)
    return KernelResult(outputs, n, trials)


def kernel(program, X, *, n: int | None = None, trials: int = 1, seed: int = 0,
           matrix_dist: str | None = None, dtype=np.float64, tol: float = 1e-10, **params) -> KernelResult:
    """N×N kernels of a template over data X: the limit (n=None) or finite width n."""
    from .program import Program, load
    if isinstance(program, (str, Path)):
        program = load(program, **params)
    base = program.ir if isinstance(program, Program) else program
    merged = {**base.params, **params}
    if n is None:
        return limit_kernel(base, X, tol=tol, params=merged)
    return finite_kernel(base, X, n, trials, seed, matrix_dist, dtype, params=merged)
