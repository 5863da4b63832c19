"""A sampling interpreter of the recurrence: the limit by Monte Carlo over its base variables.

The seam where a sampling engine plugs in (docs/architecture.md, "Evaluation strategies"):
it reads ``Compiled.recurrence`` (:mod:`.recurrence`) and nothing else of the compiler, one
rule per record kind, and evaluates every Moment as a sample mean:

* ``initial`` and ``hat`` records declare the Gaussian base variables, in order;
* ``covariance`` records give their joint covariance Σ (entries not recorded are 0: families of
  different matrices and directions are independent); Σ's values are numbers, or closed forms
  in param symbols taken at the params' values;
* ``scalar`` records of a Moment: c̊ ≈ (1/N) Σ_i f(g_i), f the record's integrand (a sympy tree
  over the base variables, the scalars it uses already their limits), g_i ~ N(0, Σ) iid, with
  its standard error std/√N;
* ``matrix``, ``expectation``, ``zdot`` and ``vector`` records need no rule: the integrands are
  already written in the base variables.

A base variable of another law (a non-Gaussian initial vector, an ``mvt`` row scale) has no
rule here yet: sampling it is refused with a TPUsageError, as is a batch compile (its values
are arrays over pairs).  Σ is factored by its eigen-decomposition with negative eigenvalues
(rounding) set to 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import sympy as sp

from ..errors import TPUsageError
from ..symbolic.evaluate import evaluate
from .recurrence import Covariance, HatBase, InitialBase, MatrixLaw, ScalarNode


@dataclass(frozen=True)
class SampleOptions:
    """``points``: N, the Monte Carlo sample size; ``seed``: of numpy's default generator."""
    points: int = 100_000
    seed: int = 0

    def __post_init__(self) -> None:
        if not (isinstance(self.points, int) and self.points >= 2):
            raise TPUsageError(f"points must be an integer of at least 2, got {self.points!r}")


@dataclass(frozen=True)
class Sampled:
    """A Moment's Monte Carlo estimate: ``value`` ± ``stderr`` (std/√N)."""
    value: float
    stderr: float


def gaussian_bases(compiled: Any) -> tuple[list[sp.Symbol], np.ndarray]:
    """The Gaussian base variables in record order and their covariance Σ (floats)."""
    params: Mapping[sp.Symbol, float] = compiled.param_values
    symbols: list[sp.Symbol] = []
    entries: list[Covariance] = []
    for r in compiled.recurrence:
        if isinstance(r, MatrixLaw) and r.row_scale is not None:
            raise TPUsageError(f"sampling the recurrence: matrix '{r.source.label}' has a random row scale "
                               f"({r.family}), a base variable this interpreter does not draw")
        elif isinstance(r, (InitialBase, HatBase)):
            symbols.append(r.symbol)
        elif isinstance(r, Covariance):
            entries.append(r)
    gaussian = {c.a for c in entries if c.a == c.b}
    for r in compiled.recurrence:
        if isinstance(r, InitialBase) and r.symbol not in gaussian:
            raise TPUsageError(f"sampling the recurrence: initial vector '{r.source.label}' has the law "
                               f"{r.family}, which this interpreter does not draw")
    index = {s: i for i, s in enumerate(symbols)}
    cov = np.zeros((len(symbols), len(symbols)))
    for c in entries:
        value = c.value.subs(params) if params and isinstance(c.value, sp.Basic) else c.value
        cov[index[c.a], index[c.b]] = cov[index[c.b], index[c.a]] = float(value)
    return symbols, cov


def draw(cov: np.ndarray, points: int, rng: np.random.Generator) -> np.ndarray:
    """``points`` iid draws of N(0, cov), as a (k, points) array."""
    if cov.shape[0] == 0:
        return np.zeros((0, points))
    eigenvalues, vectors = np.linalg.eigh(0.5 * (cov + cov.T))
    factor = vectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    return factor @ rng.standard_normal((cov.shape[0], points))


def sample_recurrence(compiled: Any, options: SampleOptions = SampleOptions()) -> dict[int, Sampled]:
    """var -> the Monte Carlo estimate of every Moment of ``compiled`` (a :class:`~.compiler.Compiled`)."""
    if compiled.batch is not None:
        raise TPUsageError("sampling the recurrence: a batch compile's values are arrays over pairs; "
                           "sample one compile per covariance instead")
    symbols, cov = gaussian_bases(compiled)
    sample = draw(cov, options.points, np.random.default_rng(options.seed))
    env = {s: sample[i] for i, s in enumerate(symbols)}
    params = compiled.param_values
    out: dict[int, Sampled] = {}
    for r in compiled.recurrence:
        if isinstance(r, ScalarNode) and r.op == "moment":
            integrand = r.integrand.subs(params) if params else r.integrand
            used = {s: env[s] for s in integrand.free_symbols}
            values = np.broadcast_to(np.asarray(evaluate(integrand, used), dtype=float), (options.points,))
            out[r.source.var] = Sampled(float(np.mean(values)),
                                        float(np.std(values, ddof=1) / np.sqrt(options.points)))
    return out
