"""Dataset kernels of templates written with data inputs (the real input layer, not q11/q12/q22).

A data template is the network for two inputs, its inputs declared as data
(:mod:`..lang.kernel_inputs`): the pair ``vector x[1..2] : d = ...``, or one declaration per input,
each one vector or a sequence of T vectors (``vector x[1..T] : d = ...; vector y[1..T] : d = ...``).
The data are then N points: an (N, d) array of vectors, or an (N, T, d) array (or a list of N
(T, d) arrays) of sequences.  With Q = V Vᵀ/d, V the (N·T, d) array of every point's vectors, the
pair (i, j) enters the template only as the covariance s·Q[pair, pair] of the input layer's
group (s: U's variance) — ``mean(x_a * x_b)`` of the pair's vectors is lowered to
``mean(U x_a · U x_b) / s`` — so one lowering serves every pair:

* the limit of vector points is exactly a q-template's (:class:`.pairs.LimitSpec` with that group,
  scale s and shift 0): the same classes, replays (grid tapes with row, column and cell spaces)
  and tiles, at a q-template's speed (N = 100, ReLU depth 3: 0.035 s CPU warm against 0.028,
  the difference the template's lowering) and to its values within rounding;
* the limit of sequences compiles the (2T × 2T) covariances of the pairs in batches: the pairs
  i = j (whose covariance repeats a block) apart from the others;
* at finite width one network (the same matrices) runs every pair as columns: the input layer's
  N·T products are drawn jointly with covariance s·Q (the law of U x for Gaussian U), and the
  values of ``mean(x_a * x_b)`` are made exact (to rounding) through a hidden group whose
  columns are a factor of each pair's Q.

The kernel computes the pairs i ≤ j and mirrors them, so every output must be symmetric in the
two inputs: :func:`check_symmetric` compares each at one pair and the swapped pair first.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import numpy as np

from .. import distributions as D
from .. import ir
from ..errors import TPError, TPUsageError
from ..expect.budget import Budget
from ..lang.kernel_inputs import KernelInputs, TemplateLayout, data_declarations
from ..lang.lower import lower_template, param_names
from ..lang.parser import parse_text
from ..lang.source import base_dir_of, read_source
from ..limit.accuracy import METHOD_RANK
from .pairs import gram

#: pairs per batch compile of a sequence kernel
SEQUENCE_BATCH = 2048


@dataclass(frozen=True)
class DataTemplate:
    """A data template lowered on a pair (``gram``: "limit" or "finite"), with where the pair
    enters it (:class:`..lang.kernel_inputs.TemplateLayout`)."""
    program: ir.Program
    layout: TemplateLayout


@dataclass(frozen=True)
class TemplateText:
    """A template's text, file and folder (what lowering it on a pair needs; its own data files
    are not read)."""
    source: str
    file: str
    base_dir: str


def data_template_text(program: ir.Program | str | os.PathLike) -> TemplateText | None:
    """The template's text if it is written with data inputs (it declares data, ``vector x : d =
    ...``, and not q11, q12, q22), else None.  A path is read (not lowered: its own data need not
    exist); a program's text is parsed again (cached by the parser)."""
    if isinstance(program, (str, os.PathLike)):
        text = TemplateText(read_source(program), str(program), base_dir_of(program))
    elif program.source:
        text = TemplateText(program.source, program.file, str(program.base_dir))
    else:
        return None
    try:
        module = parse_text(text.source, text.file)
    except TPError:                         # a syntax error: reported by the ordinary load
        return None
    if data_declarations(module.statements) == 0 or {"q11", "q12", "q22"} & param_names(module.statements):
        return None
    return text


def points_array(X, file: str = "<string>") -> np.ndarray:
    """The data as a float64 array: (N, d) vectors or (N, T, d) sequences (a list of N arrays of
    one shape (d,) or (T, d) is stacked); finite, N, T, d ≥ 1; else a TPUsageError naming the
    problem (sequences of different lengths are refused: pad or bucket them by length)."""
    if isinstance(X, (list, tuple)):
        shapes = {np.shape(x) for x in X}
        if len(shapes) > 1:
            lengths = sorted({s[0] for s in shapes if len(s) == 2})
            what = (f"sequences of different lengths ({', '.join(map(str, lengths[:6]))}"
                    f"{', …' if len(lengths) > 6 else ''})" if len(lengths) > 1 else
                    f"points of different shapes ({', '.join(map(str, sorted(shapes)[:4]))})")
            raise TPUsageError(f"the inputs are {what}: a data template takes points of one shape "
                               "(pad the sequences, or compute one kernel per length)", file=file)
        X = np.stack([np.asarray(x) for x in X]) if X else np.zeros((0, 1))
    raw = np.asarray(X)
    if raw.dtype.kind not in "biuf":
        raise TPUsageError(f"the inputs must be a real numeric array, not of dtype {raw.dtype}", file=file)
    A = raw.astype(float, copy=False)
    if A.ndim not in (2, 3) or 0 in A.shape:
        raise TPUsageError(f"the inputs must be an (N, d) array of vectors or an (N, T, d) array of sequences, "
                           f"N, T, d ≥ 1 (got shape {A.shape})", file=file)
    bad = ~np.isfinite(A)
    if bad.any():
        where = tuple(int(k) for k in np.argwhere(bad)[0])
        what = "NaN" if np.isnan(A[where]) else "an infinity"
        raise TPUsageError(f"the inputs' point {where[0]} (X[{where[0]}], counted from 0) holds {what} at "
                           f"{'column' if A.ndim == 2 else 'token, column'} {', '.join(map(str, where[1:]))}: "
                           "every input must be finite", file=file)
    return A


def data_template(text: TemplateText, X: np.ndarray, params: dict, gram_mode: str) -> DataTemplate:
    """The template lowered on the first pair of ``X`` (its IR does not depend on the pair but for
    the input group's covariance), ``params`` overriding its params: located errors for shapes
    that do not fit."""
    second = X[1] if X.shape[0] > 1 else X[0]
    inputs = KernelInputs(X[0], second, gram_mode)
    module = parse_text(text.source, text.file)
    overrides = {k: v for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    prog, layout = lower_template(module, inputs, overrides, file=text.file, source=text.source,
                                  base_dir=text.base_dir)
    if layout.group is None:
        raise TPUsageError("the template's data inputs never enter the network: write the input layer as "
                           "U @ x (matrix U : n x d ~ normal(var=s), s > 0)", file=text.file)
    return DataTemplate(prog, layout)


def vectors(X: np.ndarray) -> np.ndarray:
    """(N·T, d): every point's vectors, point after point (vectors: T = 1)."""
    return X.reshape(-1, X.shape[-1])


def pair_members(i: np.ndarray, j: np.ndarray, T: int) -> np.ndarray:
    """(P, 2T): the rows of :func:`vectors` that are the members of pairs (i, j), in the order of
    the template's group (the first point's vectors, then the second's)."""
    t = np.arange(T)
    return np.concatenate([i[:, None] * T + t, j[:, None] * T + t], axis=1)


def check_symmetric(tmpl: DataTemplate, X: np.ndarray, budget: Budget) -> None:
    """A TPUsageError naming the first output that is not symmetric in the two inputs, K(x, y) ≠
    K(y, x) beyond the two error bounds and 1e-9 relative, at the first point and the first point
    unlike it (a dataset kernel computes the pairs i ≤ j and mirrors them); see
    :func:`swapped_values`."""
    other = next((k for k in range(1, X.shape[0]) if not np.array_equal(X[k], X[0])), None)
    if other is None:
        return
    names, values, errors = swapped_values(tmpl, X, other, budget)
    for name, (a, b), e in zip(names, values, errors):
        if not abs(a - b) <= e.sum() + 1e-9 * (abs(a) + abs(b)):
            raise TPUsageError(f"output '{name}' is not symmetric in the template's two inputs: {a:.12g} for "
                               f"(X[0], X[{other}]), {b:.12g} for (X[{other}], X[0]); a dataset kernel computes "
                               "the pairs i ≤ j and mirrors them (write outputs symmetric in x and y, e.g. "
                               "mean(h * g))", file=tmpl.program.file)


def swapped_values(tmpl: DataTemplate, X: np.ndarray, other: int, budget: Budget) -> tuple[list, list, list]:
    """(names, values, errors) of every output at the pair (X[0], X[other]) and at (X[other], X[0]):
    by the rest class's replay where the template has one (vector points: no compile; the replay
    recorded on the data's rest candidates, the one the kernel then uses), else by one batch
    compile of the two."""
    from . import pairs
    T, s, g = tmpl.layout.tokens, tmpl.layout.scale, tmpl.layout.group
    Q = gram(vectors(X[[0, other]]))
    if T == 1:
        spec = pairs.LimitSpec(tmpl.program, g, s, 0.0, vectors(X), budget.tol, budget.max_qmc_points)
        found = pairs.replay_for(spec, "rest", pairs.rest_candidates(spec))
        if found is not None:
            a, b, c = s * Q[0, 0], s * Q[1, 1], s * Q[0, 1]
            got = [found[0](np.array([x]), np.array([y]), np.array([c])) for x, y in ((a, b), (b, a))]
            if got[0][2].all() and got[1][2].all():
                return (list(found[0].names), [(v1[0], v2[0]) for v1, v2 in zip(got[0][0], got[1][0])],
                        [np.array([e1[0], e2[0]]) for e1, e2 in zip(got[0][1], got[1][1])])
    from ..limit.compiler import compile_program
    rows = pair_members(np.array([0, 1]), np.array([1, 0]), T)
    covs = s * Q[rows[:, :, None], rows[:, None, :]]
    lim = compile_program(tmpl.program, budget=budget, batch_covs={g: covs}).limit()
    names = list(lim.outputs)
    return (names, [tuple(np.broadcast_to(lim.outputs[n].value, (2,))) for n in names],
            [np.broadcast_to(lim.outputs[n].error, (2,)) for n in names])


# ---- the limit of sequences ----------------------------------------------------------------

def sequence_limit(tmpl: DataTemplate, X: np.ndarray, budget: Budget) -> tuple[dict, dict, dict, list[str]]:
    """(values, errors, methods, warnings) of the limit kernels over sequences: per output N×N
    arrays.  The pairs i = j and i < j are compiled in separate batches of at most
    :data:`SEQUENCE_BATCH` pairs (a batch sees one singular structure)."""
    from ..limit.compiler import compile_program
    N, T = X.shape[0], tmpl.layout.tokens
    Q = gram(vectors(X))
    s, g = tmpl.layout.scale, tmpl.layout.group
    names = [o.name for o in tmpl.program.outputs]
    values = {name: np.empty((N, N)) for name in names}
    errors = {name: np.empty((N, N)) for name in names}
    methods: dict[str, set] = {name: set() for name in names}
    warnings: list[str] = []
    i, j = np.triu_indices(N)
    for part in (i == j, i < j):
        pi, pj = i[part], j[part]
        for start in range(0, len(pi), SEQUENCE_BATCH):
            a, b = pi[start:start + SEQUENCE_BATCH], pj[start:start + SEQUENCE_BATCH]
            rows = pair_members(a, b, T)
            covs = s * Q[rows[:, :, None], rows[:, None, :]]
            lim = compile_program(tmpl.program, budget=budget, batch_covs={g: covs}).limit()
            for name, v in lim.outputs.items():
                values[name][a, b] = values[name][b, a] = v.value
                errors[name][a, b] = errors[name][b, a] = v.error
                methods[name].add(v.method)
            warnings += [w for w in lim.warnings if w not in warnings]
    return values, errors, {n: max(m or {"exact"}, key=METHOD_RANK.__getitem__) for n, m in methods.items()}, warnings


# ---- finite width --------------------------------------------------------------------------

def input_layer_factor(tmpl: DataTemplate, X: np.ndarray, file: str) -> np.ndarray:
    """A with A Aᵀ = s·Q: the input layer's products for all N·T vectors of the data."""
    try:
        return D.psd_factor(tmpl.layout.scale * gram(vectors(X)))
    except D.DistributionError as err:            # s·Q is a Gram matrix: only a bug gets here
        raise TPUsageError(f"finite-width kernel: the input layer's covariance is not PSD ({err})", file=file) from None


def hidden_columns(Q: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """(2T, n, P): columns ξ_k of the hidden group for P pairs (``rows``: their members' rows of
    Q), with mean(ξ_a ξ_b) = Q_ab to rounding: ξ_k = √n·F[k] on the first 2T coordinates, F Fᵀ
    the pair's Q (a symmetric square root by eigh; negative rounding eigenvalues cut to 0)."""
    sub = Q[rows[:, :, None], rows[:, None, :]]
    w, v = np.linalg.eigh(sub)
    F = v * np.sqrt(np.clip(w, 0, None))[:, None, :]              # (P, K, K): F Fᵀ = sub
    K, P = rows.shape[1], rows.shape[0]
    cols = np.zeros((K, n, P))
    cols[:, :K, :] = np.sqrt(n) * np.transpose(F, (1, 2, 0))
    return cols


def data_trial(ex, t: int, *, layout: TemplateLayout, group: tuple[int, ...], hidden: tuple[int, ...] | None,
               factor: np.ndarray, Q: np.ndarray, i: np.ndarray, j: np.ndarray, N: int, chunk: int) -> dict:
    """One trial of a data template: the input layer's products of all vectors drawn once, every
    pair (i, j) as columns (one BLAS thread: the bits of a trial do not depend on where it runs)."""
    from threadpoolctl import threadpool_limits
    n = ex.sizes[ex.program.groups[layout.group].width]
    with threadpool_limits(limits=1, user_api="blas"):
        z = ex.rng(t, group[0]).standard_normal((factor.shape[1], n))
        inputs = (factor @ z).astype(ex.dtype)                   # N·T vectors' products, n coordinates each
        got: dict[str, list[np.ndarray]] = {o.name: [] for o in ex.program.outputs}
        for start in range(0, len(i), chunk):
            a, b = i[start:start + chunk], j[start:start + chunk]
            rows = pair_members(a, b, layout.tokens)
            columns = {m: inputs[rows[:, k]].T for k, m in enumerate(group)}
            if hidden is not None:
                xi = hidden_columns(Q, rows, ex.sizes[ex.program.groups[layout.hidden].width])
                columns.update({m: xi[k] for k, m in enumerate(hidden)})
            out = ex.run_trial(t, columns=columns)
            for name in got:
                got[name].append(np.broadcast_to(out[name], a.shape))
    return {name: symmetric(np.concatenate(parts), i, j, N) for name, parts in got.items()}


def symmetric(values: np.ndarray, i: np.ndarray, j: np.ndarray, N: int) -> np.ndarray:
    """The N×N symmetric matrix with ``values`` at (i, j) and (j, i)."""
    K = np.empty((N, N))
    K[i, j] = values
    K[j, i] = values
    return K


def finite_setup(tmpl: DataTemplate, X: np.ndarray, n: int, max_elements: int) -> dict:
    """The keyword arguments of :func:`data_trial` (a TPUsageError if the width cannot hold the
    exact Gram columns: n ≥ 2T)."""
    layout, prog = tmpl.layout, tmpl.program
    K = 2 * layout.tokens
    if layout.hidden is not None and n < K:
        raise TPUsageError(f"finite-width kernel: mean(x * y) of the data needs width n ≥ {K} (2 × the "
                           f"{layout.tokens} vector(s) of a point), got n = {n}", file=prog.file)
    N = X.shape[0]
    i, j = np.triu_indices(N)
    Q = gram(vectors(X))
    hidden = prog.groups[layout.hidden].members if layout.hidden is not None else None
    return dict(layout=layout, group=prog.groups[layout.group].members, hidden=hidden,
                factor=input_layer_factor(tmpl, X, prog.file), Q=Q, i=i, j=j, N=N,
                chunk=max(1, max_elements // (n * max(1, layout.tokens))))


def finite_trial(setup: dict):
    """:func:`data_trial` with its data bound (picklable: a functools.partial of a module function)."""
    return functools.partial(data_trial, **setup)
