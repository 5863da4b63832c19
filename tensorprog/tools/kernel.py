"""Kernels over datasets: one template program, all N(N+1)/2 input pairs at once.

A template is written for two inputs whose first-layer preactivations are jointly
Gaussian with covariance s·[[q11, q12], [q12, q22]] + b (declared params q11, q12, q22;
s a constant such as the first layer's weight variance, b a first-layer bias's variance).
For data X (N × d), q = X Xᵀ / d fills those entries for every pair i ≤ j:
  * the limit: the compiled recurrence in batch mode, by :mod:`.pairs` — where every
    expectation has a closed form, the batch compile is recorded once per template on a few
    pairs and replayed over blocks of pairs (:mod:`..limit.replay`; per-input work once per
    input), else one batch per class of pairs (closed forms evaluated on arrays, or one shared
    quadrature grid); tile by tile, out of core or on a cluster with :mod:`.tiles`;
  * finite width n: one network (the same matrices) applied to all N inputs, drawn jointly with
    covariance s·q + b·11ᵀ, the pairs as columns of (n, P) arrays, so each layer is one GEMM per
    chunk of pairs.

A template may instead take its two inputs as data, with the real input layer (``U @ x``), each
input a vector or a sequence of vectors: :mod:`.data_kernel`.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import numbers
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import distributions as D
from .. import ir
from ..arguments import usage, whole
from ..expect.budget import DEFAULT, Budget
from ..errors import TPError, TPUsageError
from ..finite.exec_options import UNSET, resolve
from ..finite.executor import Executor
from ..finite.plan import RunSpec, run_plan
from ..finite.run import map_trials
from ..lang.lower import lower
from ..lang.parser import parse_text
from ..lang.reads import inputs_digest
from ..limit.replay_store import warn as store_warning
from . import pairs
from .caches import Memo
from .data_kernel import (TemplateText, check_symmetric, data_template, data_template_text, finite_setup,
                          finite_trial, points_array, sequence_limit)
from .kernel_dir import MANIFEST, make_directory
from .pairs import LimitSpec, first_layer_cov, gram
from .tiles import (TILE_PAIRS, check_memory, inputs_array, is_directory, large_summary, limit_tiles,
                    write_finite)

Q_NAMES = ("q11", "q12", "q22")
PROBES = ((1.3, 0.37, 0.9),)          # the q at which a template is lowered (any valid one)


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
            spread = k.error if k.error is not None else (k.std / np.sqrt(max(self.trials, 1)))
            if isinstance(k.mean, np.memmap):          # out of core: band by band
                diag, offdiag, top = large_summary(k.mean, spread)
                rows[name] = {"diag_mean": diag, "offdiag_mean": offdiag, "method": k.method, "max_error": top}
                continue
            off = k.mean[~np.eye(N, dtype=bool)]
            rows[name] = {"diag_mean": float(np.mean(np.diag(k.mean))),
                          "offdiag_mean": float(off.mean()) if off.size else float("nan"),
                          "method": k.method, "max_error": float(np.max(spread))}
        return {"width": self.width, "trials": self.trials, "outputs": rows, "warnings": self.warnings}

    def save(self, path: str | Path, output: str | None = None) -> Path:
        """``.npz``: every output (and ``NAME_error`` / ``NAME_std``); ``.npy``: one output (a
        name without either suffix gets ``.npy``, as numpy writes it).  Returns the path written."""
        target = save_path(path)
        try:
            if target.suffix == ".npz":
                arrays = {name: k.mean for name, k in self.outputs.items()}
                arrays.update({f"{name}_{'error' if k.error is not None else 'std'}":
                               (k.error if k.error is not None else k.std) for name, k in self.outputs.items()})
                np.savez(target, **arrays)
                return target
            name = output or next(iter(self.outputs))
            if name not in self.outputs:
                raise TPUsageError(f"--output: no output '{name}' (outputs: {', '.join(self.outputs)})")
            np.save(target, self.outputs[name].mean)
        except OSError as err:
            raise TPUsageError(f"--out: cannot write {target} ({err.strerror or err})") from None
        return target

    def to_dict(self) -> dict:
        """JSON data (``tpc kernel --json``): the summary's figures and, per output, the kernel itself:
        ``value`` and ``error`` (the limit) or ``mean``, ``std`` and ``values`` per trial (finite
        width); ``trials`` only at finite width.  Kernels written out of core (memory maps) stay in
        their files: only their summaries are given."""
        summary = self.summary()
        data: dict = {"width": self.width}
        if self.width is not None:
            data["trials"] = self.trials
        outputs = {}
        for name, k in self.outputs.items():
            row = dict(summary["outputs"][name])
            if not isinstance(k.mean, np.memmap):
                if self.width is None:
                    row.update(value=ir.jsonable(k.mean), error=ir.jsonable(k.error))
                else:
                    row.update(mean=ir.jsonable(k.mean), std=ir.jsonable(k.std),
                               values=[ir.jsonable(v) for v in k.values])
            outputs[name] = row
        data["outputs"], data["warnings"] = outputs, list(self.warnings)
        return data

    def _repr_html_(self) -> str:
        """Jupyter: a summary per output and the kernels as heatmaps."""
        from .display import kernel_html
        return kernel_html(self)


def save_path(path: str | Path) -> Path:
    """The file :meth:`KernelResult.save` writes for ``path`` (``.npz``, ``.npy``, or ``path.npy``),
    checked before any computation: its folder must exist and it must not be a directory."""
    target = Path(path)
    if target.is_dir():
        raise TPUsageError(f"--out: {target} is a directory (end it with '/' to write NAME.npy files into it)")
    if target.suffix not in (".npz", ".npy"):
        target = target.with_name(target.name + ".npy")
    folder = target.parent
    if not folder.is_dir():
        raise TPUsageError(f"--out: the folder {folder} does not exist (create it, or end --out with '/' "
                           "for a directory of .npy files)")
    if target.is_dir():
        raise TPUsageError(f"--out: {target} is a directory (end it with '/' to write NAME.npy files into it)")
    return target


def load_inputs(path: str) -> np.ndarray:
    """An (N, d) real array from a .npy file (no pickles), N ≥ 1 and d ≥ 1, or (N, T, d) (sequences,
    for a data template); errors name the file (and the row of a NaN or inf)."""
    try:
        X = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:
        raise TPUsageError(f"--inputs: cannot read {path}: {err or type(err).__name__}", file=str(path)) from None
    if not isinstance(X, np.ndarray) or X.ndim not in (2, 3) or X.dtype.kind not in "biuf":
        raise TPUsageError(f"--inputs: {path} must hold a real numeric (N, d) array (or (N, T, d): "
                           "sequences, for a template written with data inputs)", file=str(path))
    if 0 in X.shape:
        raise TPUsageError(f"--inputs: {path} holds an array of shape {X.shape}: N ≥ 1 inputs of "
                           "dimension d ≥ 1 are needed", file=str(path))
    if X.ndim == 3:
        from .data_kernel import points_array
        return points_array(X, str(path))
    return finite_rows(X.astype(float), str(path))


def finite_rows(X: np.ndarray, file: str) -> np.ndarray:
    """X unchanged if every entry is finite, else a TPUsageError naming ``file`` and the first row
    holding a NaN or an infinity (counted from 0, as numpy's X[i])."""
    arr = np.asarray(X)
    if arr.ndim == 2 and arr.dtype.kind in "biuf" and arr.size and not np.all(np.isfinite(arr)):
        row, col = (int(k) for k in np.argwhere(~np.isfinite(arr))[0])
        what = "NaN" if np.isnan(arr[row, col]) else "an infinity"
        bad = int(np.sum(~np.all(np.isfinite(arr), axis=1)))
        raise TPUsageError(f"the inputs' row {row} (X[{row}], counted from 0) holds {what} at column {col}"
                           + (f"; {bad} rows are not finite" if bad > 1 else "")
                           + ": every input must be finite", file=file)
    return X


def affine_template(program: ir.Program, params: dict | None = None,
                    memo: Memo | None = None) -> tuple[ir.Program, int, float, float]:
    """(IR, index of the input group, scale s, shift b): q11, q12, q22 enter the program only as the
    covariance s·[[q11, q12], [q12, q22]] + b of one pair of initial vectors (b: a first-layer bias's
    variance, added to every entry).  Found by unrolling the template at the probe values of q: the
    IR must not move, and the pair's covariance must be that affine function at every probe.
    ``memo``: the findings by :func:`template_inputs` (default: :data:`TEMPLATES`)."""
    params = {k: v for k, v in (params or program.params).items() if k not in Q_NAMES}
    memo = Memo(TEMPLATES, MAX_TEMPLATES) if memo is None else memo
    key = finding_key(program, params)
    found = memo.get(key) if key is not None else None
    if found is None:
        found = affine_finding(program, params, memo).lowered()
        if key is not None:
            memo.put(key, found)
    return found


@dataclass(frozen=True)
class AffineFinding:
    """Where q enters a template (:func:`affine_finding`): the input group g, its scale s and
    shift b, found by the traced lowering alone; :meth:`lowered` unrolls the template at the probe
    q as well (what :func:`affine_template` returns), which a template lowered at its own params
    does not need (:func:`limit_template`)."""
    group: int
    scale: float
    shift: float
    module: object = field(compare=False, repr=False)     # the parsed template
    at: dict = field(compare=False, repr=False)           # its params, q at the probe
    program: ir.Program = field(compare=False, repr=False)

    def lowered(self) -> tuple[ir.Program, int, float, float]:
        """(IR at the probe q, g, s, b)."""
        p = self.program
        return (lower(self.module, self.at, file=p.file, source=p.source, base_dir=p.base_dir),
                self.group, self.scale, self.shift)


def finding_key(program: ir.Program, params: dict) -> tuple | None:
    """The memo key of a template's findings (:func:`template_inputs`, named in the IR found), or
    None where what its lowering depends on is not known."""
    missing = [q for q in Q_NAMES if q not in program.params]
    if missing:
        raise TPUsageError(f"a kernel template declares params q11, q12, q22 (missing: {', '.join(missing)})",
                           file=program.file)
    inputs = template_inputs(program, params)
    return None if inputs is None else (program.file, str(program.base_dir), inputs)


def affine_finding(program: ir.Program, params: dict | None = None, memo: Memo | None = None) -> AffineFinding:
    """:func:`affine_template`'s finding (g, s, b) by the traced lowering only, kept in ``memo``
    (default: :data:`TEMPLATES`) beside the IRs :func:`affine_template` keeps."""
    params = {k: v for k, v in (params or program.params).items() if k not in Q_NAMES}
    memo = Memo(TEMPLATES, MAX_TEMPLATES) if memo is None else memo
    key = finding_key(program, params)
    key = None if key is None else ("finding",) + key
    found = memo.get(key) if key is not None else None
    if found is None:
        found = _affine_finding(program, params)
        if key is not None:
            memo.put(key, found)
    return found


def template_inputs(program: ir.Program, params: dict) -> str | None:
    """A digest of what a template's lowering depends on: its text, the bytes of every file it
    loads (:func:`~tensorprog.lang.reads.inputs_digest`) and ``params`` but q; None when that is
    not known (no source, a ``load`` of a computed name, a param that is not a number)."""
    if not program.source:
        return None
    digest = inputs_digest(program.source, program.file, str(program.base_dir))
    rest = sorted((k, v) for k, v in params.items() if k not in Q_NAMES)
    if digest is None or not all(isinstance(v, numbers.Real) for _, v in rest):
        return None
    return hashlib.sha256(repr((digest, rest)).encode()).hexdigest()


def _affine_finding(program: ir.Program, params: dict) -> AffineFinding:
    """:func:`affine_finding` without its cache: the template lowered once with its params as
    leaves (:mod:`tensorprog.symbolic.traced`); (s, b) read from the one initial pair whose
    covariance is s·[[q11, q12], [q12, q22]] + b in the q symbols, which enter nothing else."""
    at = {**params, **dict(zip(Q_NAMES, PROBES[0]))}
    module = parse_text(program.source, program.file)
    traced = lower(module, at, file=program.file, source=program.source, base_dir=program.base_dir, trace=True)
    leaves = traced.leaves
    q = [leaves.tracer.symbols.get(name) for name in Q_NAMES]
    found = None
    if None not in q and not leaves.tracer.structural & set(Q_NAMES) and not q_elsewhere(traced, set(q)):
        found = [(g, *sb) for g, cov in leaves.groups.items()
                 if (sb := affine_in_q(cov, q, leaves.symbols())) is not None]
    if not found or len(found) != 1:
        raise TPUsageError("q11, q12, q22 must enter the template only as the covariance "
                           "s·[[q11, q12], [q12, q22]] + b of one pair of initial vectors", file=program.file)
    g, s, b = found[0]
    return AffineFinding(g, s, b, module, at, program)


def affine_in_q(cov: np.ndarray, q: list, values: dict) -> tuple[float, float] | None:
    """(s, b) when the (2, 2) covariance expressions ``cov`` are s·[[q11, q12], [q12, q22]] + b
    with s, b free of q (other params at their ``values``), else None."""
    import sympy as sp
    if cov.shape != (2, 2):
        return None
    at = {k: v for k, v in values.items() if k not in q}
    where = ((0, 0, 0), (0, 1, 1), (1, 0, 1), (1, 1, 2))
    sb = set()
    for i, j, k in where:
        entry = cov[i, j] if isinstance(cov[i, j], sp.Basic) else sp.Float(float(cov[i, j]))  # a number
        e = sp.expand(entry.subs(at))
        terms = e.as_coefficients_dict()         # c·q_k + r: its coefficients are ∂e/∂q_k and e at q_k = 0
        if set(terms) <= {q[k], sp.S.One} and all(c.is_Number for c in terms.values()):
            sb.add((float(terms.get(q[k], 0)), float(terms.get(sp.S.One, 0))))
            continue
        if not e.free_symbols <= set(q):
            return None
        others = [v for v in q if v is not q[k]]
        if any(e.coeff(v) != 0 for v in others) or sp.diff(e, q[k], 2) != 0:
            return None
        slope, rest = sp.diff(e, q[k]), e.subs(q[k], 0)
        sb.add((float(slope), float(rest)))
    return sb.pop() if len(sb) == 1 else None


def q_elsewhere(program: ir.Program, q: set) -> bool:
    """Whether the q symbols enter a leaf other than an initial covariance (a matrix's σ², a dim,
    a constant of a function tree)."""
    from ..ir.walk import children
    leaves = program.leaves
    exprs = list(leaves.matrices.values()) + list(leaves.dims.values())
    stack = [e.fn for e in program.eqns if isinstance(e, ir.FUNCTION_OPS)]
    while stack:
        fn = stack.pop()
        if isinstance(fn, ir.Const):
            exprs.append(getattr(fn.value, "expr", None))
        stack.extend(children(fn))
    return any(q & getattr(e, "free_symbols", set()) for e in exprs)


def limit_template(program: ir.Program, params: dict) -> tuple[ir.Program, int, float, float]:
    """:func:`affine_template` for the limit kernels, where the input group's covariance is never
    read (a batch compile is given the pairs' covariances, and a record's key leaves it out): the
    template's own IR serves when it is the probes' IR but for that covariance.  The finding
    (group, s, b) is kept in the replay store, so that a new process lowers the template once
    instead of once per probe."""
    store = pairs.default_cache().store
    key = template_key(program, params)
    data = store.load_data(key) if key is not None else None
    if data is not None:
        found = stored_finding(program, data)
        if found is not None:
            return found
        store_warning(f"the stored finding {key[:21]}… does not fit the template's own covariance: "
                      "ignored, found again")
    finding = affine_finding(program, params)
    g, s, b = finding.group, finding.scale, finding.shift
    if not own_lowering(program, params):          # else the probe's IR is the program's but for q
        tmpl, g, s, b = affine_template(program, params)
        if not same_but_covariance(program, tmpl, g):
            return tmpl, g, s, b
    if key is not None:
        store.save_data(key, {"group": g, "scale": s, "shift": b})
    return program, g, s, b


def own_lowering(program: ir.Program, params: dict) -> bool:
    """Whether ``program`` is its text lowered plainly at ``params`` (q aside): the IR that
    :func:`tensorprog.program.parse` lowers and keeps (:func:`tensorprog.program.lowered`, by text
    and overrides: the program itself where it was parsed so, else lowered again and compared; a
    program that reads files is not known so).
    The template lowered at the probe q is then this IR but for the input group's covariance, which
    the traced lowering has shown to be the only place q enters (as a stored finding is trusted)."""
    from ..program import lowered
    rest = {k: v for k, v in params.items() if k not in Q_NAMES}
    if not program.source or "load" in program.source or rest != {k: v for k, v in program.params.items()
                                                                  if k not in Q_NAMES}:
        return False
    try:
        kept = lowered(program.source, program.file, tuple(sorted(program.overrides.items())),
                       str(program.base_dir), program.max_nodes)
    except TPError:
        return False
    return kept == program


def stored_finding(program: ir.Program, data: dict) -> tuple[ir.Program, int, float, float] | None:
    """(program, g, s, b) of a stored finding if it fits the template's own IR: group g is a pair
    whose covariance is s·[[q11, q12], [q12, q22]] + b at the program's own q (which must pin s
    and b down: two distinct q values); else None."""
    try:
        g, s, b = int(data["group"]), float(data["scale"]), float(data["shift"])
        q = [float(program.params[name]) for name in Q_NAMES]
    except (KeyError, TypeError, ValueError):
        return None
    if not 0 <= g < len(program.groups) or len(set(q)) < 2:
        return None
    group = program.groups[g]
    if group.dist.cov is None or len(group.members) != 2:
        return None
    cov = np.array(group.dist.cov, dtype=float)
    want = first_layer_cov(s, b, *q)
    if cov.shape != (2, 2) or not np.allclose(cov, want, rtol=1e-12, atol=1e-14 * abs(b)):
        return None
    return program, g, s, b


def template_key(program: ir.Program, params: dict) -> str | None:
    """The store key of a template's finding: :func:`template_inputs` (its text, the files it
    loads and its params but q), or None where those are not known."""
    inputs = template_inputs(program, params)
    return None if inputs is None else "template-" + inputs


def same_but_covariance(a: ir.Program, b: ir.Program, g: int) -> bool:
    """The two IRs agree but for the covariance of group g."""
    if a.eqns != b.eqns or a.outputs != b.outputs or len(a.groups) != len(b.groups):
        return False
    return all(x == y or (k == g and x.members == y.members and x.width == y.width
                          and dataclasses.replace(x.dist, cov=None) == dataclasses.replace(y.dist, cov=None))
               for k, (x, y) in enumerate(zip(a.groups, b.groups)))


def _pairs(X: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = inputs_array(X)
    q = gram(X)                      # summed in a fixed order (pairs.gram_block)
    i, j = np.triu_indices(X.shape[0])
    return q, i, j


def _symmetric(values: np.ndarray, i: np.ndarray, j: np.ndarray, N: int) -> np.ndarray:
    K = np.empty((N, N))
    K[i, j] = values
    K[j, i] = values
    return K


def limit_kernel(program: ir.Program, X: np.ndarray, tol: float = DEFAULT.tol, params: dict | None = None,
                 max_qmc_points: int | None = None) -> KernelResult:
    """The infinite-width kernels of all pairs, in memory: the rows of the upper triangle band by
    band (:mod:`.pairs`: replayed blocks where the forms are closed, batch compiles elsewhere),
    written in place, then mirrored."""
    return tiled_limit_kernel(program, X, tol, params if params is not None else dict(program.params),
                              None, TILE_PAIRS, None, max_qmc_points)


#: the process's affine_template findings by (file, :func:`template_inputs`), at most MAX_TEMPLATES
TEMPLATES: OrderedDict = OrderedDict()
MAX_TEMPLATES = 32


def finite_kernel(program: ir.Program, X: np.ndarray, n: int, trials: int = 1, seed: int = 0,
                  matrix_dist: str | None = None, dtype=np.float64, params: dict | None = None,
                  max_elements: int = 1 << 22, jobs=UNSET, backend=UNSET, device=UNSET,
                  scheduler=UNSET) -> KernelResult:
    """Empirical kernels of width-n networks: the same matrices for every input of a trial.
    ``jobs`` worker processes run the trials (default: the ``tensorprog.finite.options`` setting,
    else 1); the values are bit-identical to one process.  ``scheduler`` (a Dask address,
    ``"local"`` or a Client) runs them on that cluster instead, one task per trial, bit-identical
    too.  ``blocked``, ``conditional`` (a trial's pieces of pairs share its conditional matrices)
    and ``progress`` (a bar over the trials) come from ``tensorprog.finite.options``.

    The template's first-layer covariance s·q + b (:func:`affine_template`; b a first-layer bias's
    variance) becomes that of all N inputs at once: x = A·z with A Aᵀ = s·q + b·11ᵀ (q = X Xᵀ/d),
    so every pair (i, j) is N(0, s·[[q_ii, q_ij], [q_ij, q_jj]] + b), as in the limit.  That N×N
    matrix is PSD when b ≥ 0; a b < 0 that makes it indefinite is a TPUsageError."""
    usage(lambda: whole(trials, "trials", 1), program.file)
    X = inputs_array(X)
    N = X.shape[0]
    check_memory(finite_bytes(N, n, trials, len(program.outputs)),
                 f"the finite-width kernel of N = {N} inputs ({trials} trial(s), width {n})",
                 "use fewer inputs or trials (the N×N input factor and every trial's N×N kernels are held in memory)")
    tmpl, g, s, b = affine_template(program, params)
    q, i, j = _pairs(X)
    factor = inputs_factor(s, b, q, program.file)
    opts = resolve(jobs=jobs, backend=backend, device=device, scheduler=scheduler)   # as for execute
    plan = run_plan(tmpl, RunSpec.checked(tmpl.file, n, seed, dtype, matrix_dist), opts)
    trial = functools.partial(_kernel_trial, g=g, factor=factor, i=i, j=j, N=N,
                              chunk=max(1, max_elements // n))
    runs = map_trials(plan, trial, trials, opts.jobs, opts.progress, desc="kernel trials",
                      scheduler=opts.scheduler)
    outputs = {}
    for o in tmpl.outputs:
        mats = [run[o.name] for run in runs]
        stack = np.stack(mats)
        outputs[o.name] = KernelMatrix(stack.mean(0), stack.std(0, ddof=1) if trials > 1 else np.zeros((N, N)),
                                       values=mats)
    return KernelResult(outputs, n, trials)


def finite_bytes(N: int, n: int, trials: int, outputs: int) -> int:
    """About the peak bytes of :func:`finite_kernel`: q, the pair indices, the input factor and its
    eigendecomposition (≈ 6 N² floats); per output, every trial's N×N kernel twice (the list and
    the stack), the mean, the std and a trial's pairs (≈ (2·trials + 3.5) N²); the inputs (N·n)."""
    n = n if isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0 else 1
    return 8 * (6 * N * N + int(outputs * (2 * trials + 3.5) * N * N) + N * n)


def inputs_factor(s: float, b: float, q: np.ndarray, file: str = "<string>") -> np.ndarray:
    """A (N × N) with A Aᵀ = s·q + b·11ᵀ: the first-layer covariance of all N inputs (b = 0:
    exactly ``psd_factor(s·q)``, nothing added).  Not PSD (b < 0 and 1 not in q's range, or
    |b| too large) is a TPUsageError."""
    cov = s * q if b == 0 else s * q + b
    try:
        return D.psd_factor(cov)
    except D.DistributionError as err:
        raise TPUsageError(f"finite-width kernel: the first-layer covariance s·q + b of the {q.shape[0]} inputs "
                           f"(s = {s:g}, b = {b:g}, q = X Xᵀ/d) is not positive semidefinite ({err}); "
                           "b, a first-layer bias's variance, must keep it PSD (b ≥ 0 always does)",
                           file=file) from None


def _kernel_trial(ex: Executor, t: int, *, g: int, factor: np.ndarray, i: np.ndarray, j: np.ndarray,
                  N: int, chunk: int) -> dict[str, np.ndarray]:
    """One trial: N inputs x = factor·z (one z per trial), every pair (i, j) as columns of (n, P).
    Its products run on one BLAS thread wherever it runs: OpenBLAS's GEMM of an (n, n) matrix and
    (n, P) columns gives other bits on other thread counts, and a trial must give the same bits
    here, in ``jobs`` worker processes and on a Dask worker (one thread each)."""
    from threadpoolctl import threadpool_limits          # imported with the run, as in finite.parallel
    with threadpool_limits(limits=1, user_api="blas"):
        return _kernel_columns(ex, t, g, factor, i, j, N, chunk)


def _kernel_columns(ex: Executor, t: int, g: int, factor: np.ndarray, i: np.ndarray, j: np.ndarray,
                    N: int, chunk: int) -> dict[str, np.ndarray]:
    """:func:`_kernel_trial` on the BLAS threads it is given."""
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
           matrix_dist: str | None = None, dtype=np.float64, tol: float = DEFAULT.tol, out=None,
           tile_pairs: int = TILE_PAIRS, scheduler=UNSET, max_qmc_points: int | None = None,
           **params) -> KernelResult:
    """N×N kernels of a template over data X: the limit (n=None) or finite width n.

    X is (N, d); a template written with data inputs (:mod:`.data_kernel`) also takes (N, T, d)
    sequences, or a list of N arrays of one shape.

    ``tol`` and ``max_qmc_points`` (None: the default of
    :class:`~tensorprog.expect.budget.Budget`) are the limit's budget per expectation, as for
    ``Program.compile``; a ``[budget]`` warning names the one to raise.

    ``out``: a directory (a path ending in '/', or an existing directory) to write every output
    to as ``out/NAME.npy`` (and ``NAME_error.npy``; ``NAME_std.npy`` at finite width); in the
    limit they are filled tile by tile (``tile_pairs`` pairs at most) through memory maps, so
    memory is bounded by a tile, and a rerun resumes an interrupted run after checking what it
    trusts (:mod:`.tiles`, :mod:`.kernel_dir`: a lock, temporary names until complete, digests of
    the finished tiles); the result then holds read-only memory maps.  In memory, a kernel that
    would not fit is a TPLimitError before anything is allocated.  ``scheduler`` (default: the
    ``tensorprog.finite.options`` setting): a Dask scheduler address, ``"local"`` or a
    ``distributed.Client``; the limit's tiles, or the finite-width trials, run there.  At finite
    width the kernels are computed in memory (one N×N input factor per trial) and then written."""
    from ..program import Program, load
    text = data_template_text(program.ir if isinstance(program, Program) else program)
    if text is None and isinstance(program, (str, Path)):
        program = load(program, **params)
    base = program.ir if isinstance(program, Program) else program
    if text is not None:                   # an (N, d) or (N, T, d) array, or a list of N points
        X = points_array(X, text.file)
        merged = params if isinstance(program, (str, Path)) else {**base.params, **params}
    else:
        if not isinstance(X, (list, tuple)) and np.ndim(X) == 3:
            raise TPUsageError(f"the inputs are sequences (shape {np.shape(X)}), but this template takes vectors "
                               "through q11, q12, q22: write it with data inputs (vector x[1..T] : d = ...; "
                               "docs/language.md#kernel-templates-with-data-inputs)", file=base.file)
        finite_rows(X, base.file)
        merged = {**base.params, **params}
    if out is not None and not is_directory(out):
        raise TPUsageError(f"out: {out} is not a directory (end it with '/'); for one .npz file "
                           "call .save(path) on the result")
    if out is not None and n is not None:
        if (Path(out) / MANIFEST).exists():
            raise TPUsageError(f"out: {out} holds an out-of-core limit kernel ({MANIFEST}); write the "
                               "finite-width kernels to another directory")
        make_directory(out)                 # before the computation, not after it
    sched = resolve(scheduler=scheduler).scheduler
    if text is not None:
        result = data_kernel(text, X, n, trials, seed, matrix_dist, dtype, tol, merged, out, tile_pairs, sched,
                             max_qmc_points)
    elif n is None:
        if matrix_dist:
            from ..distributions.swap import with_matrix_family
            base = with_matrix_family(base, matrix_dist)
        if out is None and sched is None:
            return limit_kernel(base, X, tol=tol, params=merged, max_qmc_points=max_qmc_points)
        return tiled_limit_kernel(base, X, tol, merged, out, tile_pairs, sched, max_qmc_points)
    else:
        result = finite_kernel(base, X, n, trials, seed, matrix_dist, dtype, params=merged, scheduler=sched)
    if out is not None and n is not None:
        write_finite(out, {k: m.mean for k, m in result.outputs.items()},
                     {k: m.std for k, m in result.outputs.items()})
    return result


def tiled_limit_kernel(program: ir.Program, X: np.ndarray, tol: float, params: dict, out,
                       tile_pairs: int, scheduler, max_qmc_points: int | None = None) -> KernelResult:
    """:func:`limit_kernel` tile by tile (:func:`.tiles.limit_tiles`): into ``out`` (a directory)
    or memory, locally or on ``scheduler``; bit-identical to it where the forms are closed."""
    tmpl, g, s, b = limit_template(program, params)
    X = inputs_array(X)
    if max_qmc_points is not None:
        _check_budget(tol, max_qmc_points, program.file)
    return spec_kernel(LimitSpec(tmpl, g, s, b, X, tol, max_qmc_points), out, tile_pairs, scheduler)


def spec_kernel(spec: LimitSpec, out, tile_pairs: int, scheduler) -> KernelResult:
    """The limit kernels of a :class:`.pairs.LimitSpec`, tile by tile (:func:`.tiles.limit_tiles`)."""
    got = limit_tiles(spec, out, tile_pairs, scheduler, resolve().progress)
    outputs = {name: KernelMatrix(got.values[name], error=got.errors[name], method=got.methods[name])
               for name in got.values}
    return KernelResult(outputs, None, warnings=list(got.warnings))


def _check_budget(tol: float, max_qmc_points: int, file: str) -> None:
    """A budget out of range is a TPUsageError (as for ``Program.compile``)."""
    from ..expect.budget import Budget
    try:
        Budget(tol=tol, max_qmc_points=max_qmc_points)
    except (ValueError, TypeError) as err:
        raise TPUsageError(str(err), file=file) from None


def data_kernel(text: TemplateText, X: np.ndarray, n: int | None, trials: int, seed: int, matrix_dist: str | None,
                dtype, tol: float, params: dict, out, tile_pairs: int, scheduler,
                max_qmc_points: int | None) -> KernelResult:
    """:func:`kernel` of a template written with data inputs (:mod:`.data_kernel`): X is (N, d)
    (vector points: the limit is a q-template's, replayed and tiled) or (N, T, d) (sequences:
    batch compiles, in memory)."""
    if n is None:
        if max_qmc_points is not None:
            _check_budget(tol, max_qmc_points, text.file)
        tmpl = data_template(text, X, params, "limit")
        prog = tmpl.program
        if matrix_dist:
            from ..distributions.swap import with_matrix_family
            prog = with_matrix_family(prog, matrix_dist)
        tokens = tmpl.layout.tokens
        spec = LimitSpec(prog, tmpl.layout.group, tmpl.layout.scale, 0.0, X.reshape(X.shape[0], -1)
                         if tokens == 1 else X[:, 0], tol, max_qmc_points)
        check_symmetric(dataclasses.replace(tmpl, program=prog), X, spec.budget)
        if tokens == 1:                      # exactly a q-template's spec: s·q of the pair, shift 0
            return spec_kernel(spec, out, tile_pairs, scheduler)
        if out is not None or scheduler is not None:
            raise TPUsageError("a kernel over sequences is computed in memory: out='DIR/' and a scheduler "
                               "take vector data only (save the result with .save(path) / --out K.npz)",
                               file=text.file)
        values, errors, methods, warnings = sequence_limit(dataclasses.replace(tmpl, program=prog), X, spec.budget)
        return KernelResult({name: KernelMatrix(values[name], error=errors[name], method=methods[name])
                             for name in values}, None, warnings=warnings)
    usage(lambda: whole(trials, "trials", 1), text.file)
    N = X.shape[0]
    T = X.shape[1] if X.ndim == 3 else 1
    tmpl = data_template(text, X, params, "finite")
    check_memory(finite_bytes(N * T, n, trials, 0) + finite_bytes(N, 1, trials, len(tmpl.program.outputs)),
                 f"the finite-width kernel of N = {N} inputs ({trials} trial(s), width {n})",
                 "use fewer inputs or trials (the input layer's factor and every trial's N×N kernels are held "
                 "in memory)")
    check_symmetric(data_template(text, X, params, "limit"), X, Budget(tol=tol))
    setup = finite_setup(tmpl, X, n, 1 << 22)
    opts = resolve(scheduler=scheduler)
    plan = run_plan(tmpl.program, RunSpec.checked(text.file, n, seed, dtype, matrix_dist), opts)
    runs = map_trials(plan, finite_trial(setup), trials, opts.jobs, opts.progress, desc="kernel trials",
                      scheduler=opts.scheduler)
    outputs = {}
    for o in tmpl.program.outputs:
        mats = [run[o.name] for run in runs]
        stack = np.stack(mats)
        outputs[o.name] = KernelMatrix(stack.mean(0), stack.std(0, ddof=1) if trials > 1 else np.zeros((N, N)),
                                       values=mats)
    return KernelResult(outputs, n, trials)
