"""Sweeps: a program's outputs over a grid of param values (``tpc sweep``, ``Program.sweep``).

The grid is the outer product of one axis per swept param (``NAME=START:STOP:COUNT``, an inclusive
linspace, or ``NAME=V1,V2,...``).  In the limit, the points are sorted into *structures*
(:mod:`tensorprog.limit.sweep`): params that change only matrix variances, initial covariances or
constants (σ_w², σ_b², ρ, a learning rate) are batched, one compile for all their points; params
that change the unrolled program (a depth, a loop bound, a dim) give one compile per distinct
structure.  At finite width (``n``), every point is run with ``trials`` seeds, in blocks of
points over ``jobs`` processes or a Dask ``scheduler``.

Lowering every point of a large grid costs milliseconds a point, so the leaves are read from
lowerings along each axis (the other params at their first values) whenever every leaf moves
with one swept param only; that decomposition is then checked against full lowerings at a few
points (the far corner and seeded random points), and every point is lowered when it fails.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Hashable, Mapping, Sequence

import numpy as np

from .. import ir
from ..errors import TPError, TPUsageError
from ..expect.budget import DEFAULT, Budget
from ..limit.sweep import Leaves, compile_points, point_values, split, stack

#: bytes of working memory per grid point and quadrature node of one batched expectation
#: (a shared rule of up to ~4096 nodes, evaluated in chunks) charged when checking a grid's size
WORK_BYTES_PER_POINT = 8 * 64
#: full lowerings that check an axis decomposition of the leaves
CHECK_POINTS = 3


@dataclass(frozen=True)
class Axis:
    """One swept param and its values."""
    name: str
    values: np.ndarray


@dataclass
class SweepResult:
    """Outputs over a grid: ``params`` {name: values of its axis} (grid shape = their lengths in
    order), ``values``/``errors`` {output: array of the grid's shape} and ``methods`` {output: array
    of method names}.  In the limit the error bounds |value − limit|; at finite width (``width``
    set) values are means over ``trials`` seeds and errors their standard errors."""
    params: dict[str, np.ndarray]
    values: dict[str, np.ndarray]
    errors: dict[str, np.ndarray]
    methods: dict[str, np.ndarray]
    warnings: list[str] = field(default_factory=list)
    width: int | None = None
    trials: int = 1
    structures: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.params.values())

    def grids(self) -> dict[str, np.ndarray]:
        """Each param's value at every grid point (``np.meshgrid(..., indexing="ij")``)."""
        return dict(zip(self.params, np.meshgrid(*self.params.values(), indexing="ij")))

    def to_dict(self) -> dict:
        return {"params": {k: v.tolist() for k, v in self.params.items()},
                "outputs": {k: {"value": self.values[k].tolist(), "error": self.errors[k].tolist(),
                                "method": self.methods[k].tolist()} for k in self.values},
                "warnings": list(self.warnings)}

    def save(self, path: str) -> str:
        """An ``.npz`` with each output ``NAME``, ``NAME_error``, and each param's grid ``NAME``
        (a param named like an output is saved as ``param_NAME``)."""
        from ..npz import save_npz
        arrays: dict[str, np.ndarray] = {}
        for k in self.values:
            arrays[k], arrays[f"{k}_error"] = self.values[k], self.errors[k]
        for k, grid in self.grids().items():
            arrays[k if k not in arrays else f"param_{k}"] = grid
        save_npz(path, arrays)
        return path

    def plot(self, path: str | None = None, contours: Mapping[str, Sequence[float]] | None = None):
        """The figure (:func:`tensorprog.sweep.plot.plot_sweep`), saved to ``path`` if given."""
        from .plot import plot_sweep
        return plot_sweep(self, path, contours or {})

    def _repr_png_(self) -> bytes | None:
        """Jupyter: the plot of the sweep (nothing without matplotlib)."""
        from .plot import png_bytes
        return png_bytes(self)

    def _repr_html_(self) -> str:
        """Jupyter: the summary, then the plot (when matplotlib is there and 1 or 2 params are swept)."""
        import base64
        import html
        png = self._repr_png_()
        image = "" if png is None else f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"/>'
        return f"<pre>{html.escape(self.summary())}</pre>{image}"

    def __repr__(self) -> str:
        return f"<SweepResult {self.summary().splitlines()[0]}>"

    def summary(self) -> str:
        what = "limit" if self.width is None else f"width {self.width}, {self.trials} trial(s)"
        grid = " x ".join(f"{k}[{len(v)}]" for k, v in self.params.items())
        rows = [f"sweep over {grid} = {math.prod(self.shape)} points: {what}"
                + (f", {self.structures} structure(s)" if self.width is None else "")]
        for k, v in self.values.items():
            methods = ", ".join(sorted(set(self.methods[k].ravel().tolist())))
            rows.append(f"  {k:<10} {np.nanmin(v):.6g} .. {np.nanmax(v):.6g}, max error "
                        f"{np.nanmax(self.errors[k]):.2g} ({methods})")
        return "\n".join(rows + self.warnings)


# ---- the grid
def parse_axis(text: str, file: str = "<string>") -> Axis | tuple[str, float]:
    """``NAME=START:STOP:COUNT`` (inclusive linspace) or ``NAME=V1,V2,...`` as an Axis; a single
    ``NAME=VALUE`` as (name, value), a fixed param.  A TPUsageError naming the param otherwise."""
    name, eq, spec = text.partition("=")
    name, spec = name.strip(), spec.strip()
    if not eq or not name:
        raise TPUsageError(f"-D expects NAME=START:STOP:COUNT, NAME=V1,V2,... or NAME=VALUE, got {text!r}", file=file)
    if not spec:
        raise TPUsageError(f"-D {name}: empty range (give START:STOP:COUNT or V1,V2,...)", file=file)
    if ":" in spec:
        parts = spec.split(":")
        if len(parts) != 3:
            raise TPUsageError(f"-D {name}={spec}: a range is START:STOP:COUNT", file=file)
        start, stop, count = (_number(p, name, file) for p in parts)
        if not count.is_integer() or count < 0:
            raise TPUsageError(f"-D {name}: the count {parts[2]!r} must be a whole number of points", file=file)
        if count == 0:
            raise TPUsageError(f"-D {name}: count 0 gives no points (give COUNT >= 1)", file=file)
        return Axis(name, np.linspace(start, stop, int(count)))
    items = [p.strip() for p in spec.split(",")]
    if any(not p for p in items):
        raise TPUsageError(f"-D {name}={spec}: empty value in the list", file=file)
    values = [_number(p, name, file) for p in items]
    return Axis(name, np.array(values)) if "," in spec else (name, values[0])


def _number(text: str, name: str, file: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TPUsageError(f"-D {name}: {text!r} is not a number", file=file) from None
    if not math.isfinite(value):
        raise TPUsageError(f"-D {name}: {text!r} is not a finite number", file=file)
    return value


def axes_of(sweep: Mapping[str, object], known: Mapping[str, float], file: str) -> list[Axis]:
    """The axes of ``{name: values}`` (a sequence or array of numbers), checked against the
    program's params ``known``: an unknown param, an empty list or a non-number is a TPUsageError."""
    if not sweep:
        raise TPUsageError("sweep: no param to sweep (give NAME=START:STOP:COUNT or NAME=V1,V2,...)", file=file)
    axes = []
    for name, values in sweep.items():
        if name not in known:
            raise TPUsageError(f"sweep: unknown param {name!r} (the program's params: "
                               f"{', '.join(sorted(known)) or 'none'})", file=file)
        try:
            array = np.atleast_1d(np.asarray(values, dtype=float))
        except (TypeError, ValueError):
            raise TPUsageError(f"sweep: the values of param {name} must be numbers", file=file) from None
        if array.ndim != 1 or array.size == 0:
            raise TPUsageError(f"sweep: param {name} has an empty range (no values)", file=file)
        if not np.all(np.isfinite(array)):
            raise TPUsageError(f"sweep: param {name} has a value that is not finite", file=file)
        axes.append(Axis(name, array))
    return axes


def check_memory(axes: Sequence[Axis], outputs: int, file: str, available: int | None = None) -> int:
    """The bytes a grid needs (3 arrays per output, the param grids, the batch's working
    memory); a TPUsageError naming the params if that is beyond the memory available."""
    from ..finite.memory import available_memory
    points = math.prod(len(a.values) for a in axes)
    needed = points * 8 * (3 * max(outputs, 1) + len(axes)) + points * WORK_BYTES_PER_POINT
    free = available_memory() if available is None else available
    if needed > free:
        sizes = " x ".join(f"{a.name} ({len(a.values)})" for a in axes)
        raise TPUsageError(f"sweep: the grid {sizes} has {points:,} points and needs about {needed:,} bytes, "
                           f"more than the {free:,} available: sweep fewer values", file=file)
    return needed


# ---- lowering the points
class Lowerer:
    """The program's source lowered at param values (parsed once)."""

    def __init__(self, program: ir.Program) -> None:
        from ..lang.parser import parse_text
        self.program = program
        self.module = parse_text(program.source, program.file)
        self.base = {k: v for k, v in program.params.items() if isinstance(v, float)}
        self.warnings: list[str] = []

    def at(self, values: Mapping[str, float]) -> ir.Program:
        from ..lang.lower import lower
        params = {**self.base, **{k: float(v) for k, v in values.items()}}
        try:
            low = lower(self.module, params, file=self.program.file, source=self.program.source,
                        base_dir=self.program.base_dir)
        except TPError as err:
            at = ", ".join(f"{k}={float(v):g}" for k, v in values.items())
            err.message = f"at the sweep point {at}: {err.message}"
            raise err.located(err.file, err.source) from None
        self.warnings.extend(w for w in low.warnings if w not in self.warnings)
        return low

    def split_at(self, values: Mapping[str, float]) -> tuple[Hashable, Leaves, ir.Program]:
        low = self.at(values)
        key, leaves = split(low)
        return key, leaves, low


@dataclass
class Structure:
    """Points of one structure: a lowered program of it, the flat grid indices, the leaves (P,)."""
    program: ir.Program
    points: np.ndarray
    leaves: list[Leaves] | Leaves


def structures(lowerer: Lowerer, axes: Sequence[Axis], seed: int = 0) -> list[Structure]:
    """The grid's points sorted into structures, with their leaves (:func:`leaf_arrays`).

    Each axis's values are first split into classes by the structure they give (the other params
    at their first values): ``sb = 0`` (no bias vector) against ``sb > 0``, or every depth apart.
    Each product of classes is then one structure if its lines and check points say so."""
    shape = tuple(len(a.values) for a in axes)
    first = {a.name: a.values[0] for a in axes}
    classes = []
    for a in axes:
        keys: dict[Hashable, list[int]] = {}
        for j, v in enumerate(a.values):
            keys.setdefault(lowerer.split_at({**first, a.name: v})[0], []).append(j)
        classes.append([np.array(js) for js in keys.values()])
    out: list[Structure] = []
    for combo in itertools.product(*classes):
        sub = [Axis(a.name, a.values[js]) for a, js in zip(axes, combo)]
        local = np.indices(tuple(len(js) for js in combo)).reshape(len(axes), -1).T
        glob = np.ravel_multi_index(tuple(js[local[:, i]] for i, js in enumerate(combo)), shape)
        for s in _combo(lowerer, sub, np.arange(len(local)), local, seed):
            s.points = glob[s.points]
            out.append(s)
    return out


def _combo(lowerer: Lowerer, axes: Sequence[Axis], points: np.ndarray, index: np.ndarray,
           seed: int) -> list[Structure]:
    """The points of a (sub)grid: one structure, its leaves read from lowerings along each axis
    when that is checked to be right, else every point lowered and grouped by structure."""
    base = {a.name: a.values[0] for a in axes}
    free = range(len(axes))
    key, leaves0, low = lowerer.split_at(base)
    lines = {i: [lowerer.split_at({**base, axes[i].name: v}) for v in axes[i].values] for i in free}
    if all(k == key for line in lines.values() for k, _, _ in line):
        moved = _moving_axes(leaves0, {i: [l for _, l, _ in line] for i, line in lines.items()})
        if moved is not None:
            assemble = _assembler(leaves0, {i: [l for _, l, _ in line] for i, line in lines.items()}, moved)
            if _checked(lowerer, axes, points, index, assemble, key, seed):
                return [Structure(low, points, assemble(index[points]))]
    return _pointwise(lowerer, axes, points, index)


def _leaf_items(leaves: Leaves) -> dict:
    return {**{("m", v): x for v, x in leaves.matrices.items()}, **{("g", g): x for g, x in leaves.groups.items()},
            **{("c",) + k: x for k, x in leaves.consts.items()}}


def _moving_axes(leaves0: Leaves, lines: Mapping[int, list[Leaves]]) -> dict | None:
    """{leaf: the one axis along which it moves}; None if a leaf moves along two axes."""
    items0, moved = _leaf_items(leaves0), {}
    for i, line in lines.items():
        for leaves in line:
            for k, x in _leaf_items(leaves).items():
                if not np.array_equal(x, items0[k]):
                    if moved.get(k, i) != i:
                        return None
                    moved[k] = i
    return moved


def _assembler(leaves0: Leaves, lines: Mapping[int, list[Leaves]], moved: Mapping):
    """A function: grid indices (P, k) -> the leaves of those points as arrays (from the lines)."""
    items0 = _leaf_items(leaves0)
    tables = {k: np.stack([_leaf_items(l)[k] for l in lines[i]]) for k, i in moved.items()}

    def assemble(idx: np.ndarray) -> Leaves:
        arrays = {k: (tables[k][idx[:, moved[k]]] if k in moved else np.broadcast_to(x, (len(idx),) + np.shape(x)))
                  for k, x in items0.items()}
        return Leaves({k[1]: a for k, a in arrays.items() if k[0] == "m"},
                      {k[1]: a for k, a in arrays.items() if k[0] == "g"},
                      {k[1:]: a for k, a in arrays.items() if k[0] == "c"})
    return assemble


def _checked(lowerer: Lowerer, axes: Sequence[Axis], points: np.ndarray, index: np.ndarray, assemble,
             key: Hashable, seed: int) -> bool:
    """The assembled leaves equal full lowerings at the last point and a few seeded random ones."""
    rng = np.random.default_rng(seed)
    picks = {int(points[-1])} | {int(p) for p in rng.choice(points, size=min(CHECK_POINTS, len(points)),
                                                             replace=False)}
    for p in sorted(picks):
        k, leaves, _ = lowerer.split_at({a.name: a.values[j] for a, j in zip(axes, index[p])})
        got = assemble(index[p:p + 1])
        want = _leaf_items(leaves)
        if k != key or any(not np.array_equal(np.asarray(a)[0], want[kk]) for kk, a in _leaf_items(got).items()):
            return False
    return True


def _pointwise(lowerer: Lowerer, axes: Sequence[Axis], points: np.ndarray, index: np.ndarray) -> list[Structure]:
    """Every point lowered, grouped by structure."""
    groups: dict[Hashable, Structure] = {}
    for p in points:
        key, leaves, low = lowerer.split_at({a.name: a.values[j] for a, j in zip(axes, index[p])})
        group = groups.setdefault(key, Structure(low, np.zeros(0, int), []))
        group.points = np.append(group.points, p)
        group.leaves.append(leaves)
    return list(groups.values())


def leaf_arrays(structure: Structure) -> tuple[Leaves, int]:
    """The leaves of a structure that vary over its points, as arrays; its number of points."""
    leaves = structure.leaves
    if isinstance(leaves, list):
        return stack(leaves), len(leaves)
    size = len(structure.points)

    def varying(a):
        a = np.asarray(a)
        return bool(np.any(a != a[:1]))
    return Leaves({k: a for k, a in leaves.matrices.items() if varying(a)},
                  {k: np.array(a) for k, a in leaves.groups.items() if varying(a)},
                  {k: a for k, a in leaves.consts.items() if varying(a)}), size


# ---- the sweep
def sweep_limit(program: ir.Program, axes: Sequence[Axis], budget: Budget = DEFAULT) -> SweepResult:
    """The limit of every output at every grid point, one batched compile per structure."""
    names = [o.name for o in program.outputs]
    if not names:
        raise TPUsageError("the program has no 'out' statement: a sweep would report nothing", file=program.file)
    check_memory(axes, len(names), program.file)
    shape = tuple(len(a.values) for a in axes)
    total = math.prod(shape)
    values = {k: np.full(total, np.nan) for k in names}
    errors = {k: np.full(total, np.nan) for k in names}
    methods = {k: np.full(total, "", dtype=object) for k in names}
    lowerer = Lowerer(program)
    warnings: list[str] = []
    found = structures(lowerer, axes)
    for s in found:
        leaves, size = leaf_arrays(s)
        compiled = compile_points(s.program, leaves, size, budget)
        for k, lv in point_values(compiled, size).items():
            values[k][s.points], errors[k][s.points], methods[k][s.points] = lv.value, lv.error, lv.method
        warnings += [w for w in compiled.warnings if w not in warnings]
    warnings += [w for w in lowerer.warnings if w not in warnings]
    return SweepResult({a.name: a.values for a in axes}, {k: v.reshape(shape) for k, v in values.items()},
                       {k: v.reshape(shape) for k, v in errors.items()},
                       {k: v.reshape(shape).astype(str) for k, v in methods.items()}, warnings, structures=len(found))


@dataclass(frozen=True)
class FiniteSpec:
    """What every block of a finite-width sweep shares (picklable: sent to workers)."""
    source: str
    file: str
    base_dir: str
    base: tuple
    names: tuple[str, ...]
    n: int
    trials: int
    seed: int
    matrix_dist: str | None
    dtype: str


def run_block(spec: FiniteSpec, block: list[tuple[int, tuple[float, ...]]]) -> list[tuple[int, dict]]:
    """Worker side: each point (flat index, swept values) of a block run at width n, trials seeds:
    {output: (mean, standard error)}."""
    from ..finite.run import execute
    from ..lang.lower import lower
    from ..lang.parser import parse_text
    module, out = parse_text(spec.source, spec.file), []
    for p, vals in block:
        params = {**dict(spec.base), **dict(zip(spec.names, vals))}
        low = lower(module, params, file=spec.file, source=spec.source, base_dir=spec.base_dir)
        res = execute(low, spec.n, spec.trials, spec.seed, spec.matrix_dist, spec.dtype, jobs=1, scheduler=None)
        out.append((p, {k: (float(o.mean), float(o.sem)) for k, o in res.entries.items()}))
    return out


class BlockRunner:
    """A picklable factory/callable pair for :func:`tensorprog.finite.parallel.imap_unordered`."""

    def __init__(self, spec: FiniteSpec) -> None:
        self.spec = spec

    def __call__(self):
        return lambda block: run_block(self.spec, block)


def sweep_finite(program: ir.Program, axes: Sequence[Axis], n: int, trials: int = 1, seed: int = 0,
                 matrix_dist: str | None = None, dtype: str = "float64", jobs: int = 1,
                 scheduler: object = None, block: int | None = None) -> SweepResult:
    """Means and standard errors at width ``n`` over ``trials`` seeds (the same seeds at every
    point), one task per block of points, over ``jobs`` processes or a Dask ``scheduler``."""
    from ..finite.parallel import cpu_count, imap_unordered
    names = [o.name for o in program.outputs]
    if not names:
        raise TPUsageError("the program has no 'out' statement: a sweep would report nothing", file=program.file)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise TPUsageError(f"sweep: the width must be a positive integer, not {n!r}", file=program.file)
    check_memory(axes, len(names), program.file)
    shape = tuple(len(a.values) for a in axes)
    total = math.prod(shape)
    grid = [tuple(float(a.values[j]) for a, j in zip(axes, idx)) for idx in np.ndindex(*shape)]
    Lowerer(program).at({a.name: a.values[0] for a in axes})        # errors of the program, before the run
    base = tuple((k, v) for k, v in program.params.items() if isinstance(v, float))
    spec = FiniteSpec(program.source, program.file, program.base_dir, base, tuple(a.name for a in axes), int(n),
                      int(trials), int(seed), matrix_dist, dtype)
    workers = cpu_count() if jobs == 0 else max(1, int(jobs))
    size = block or max(1, math.ceil(total / (4 * workers)))
    blocks = [list(enumerate(grid))[s:s + size] for s in range(0, total, size)]
    if scheduler is not None:
        from ..finite.cluster import map_items
        results = map_items(scheduler, lambda: spec, run_block, blocks)
    elif workers > 1 and len(blocks) > 1:
        results = [r for _, r in imap_unordered(BlockRunner(spec), blocks, workers)]
    else:
        results = [run_block(spec, b) for b in blocks]
    entries = sorted({k for r in results for _, d in r for k in d})
    values = {k: np.full(total, np.nan) for k in entries}
    errors = {k: np.full(total, np.nan) for k in entries}
    for r in results:
        for p, d in r:
            for k, (m, se) in d.items():
                values[k][p], errors[k][p] = m, se
    method = f"width {n}"
    return SweepResult({a.name: a.values for a in axes}, {k: v.reshape(shape) for k, v in values.items()},
                       {k: v.reshape(shape) for k, v in errors.items()},
                       {k: np.full(shape, method) for k in entries}, [], width=int(n), trials=int(trials))


def parse_contours(texts: Sequence[str], outputs: Sequence[str], file: str) -> dict[str, list[float]]:
    """``NAME=LEVEL`` options as {output: [levels]}; an unknown output or a non-number is a TPUsageError."""
    out: dict[str, list[float]] = {}
    for text in texts:
        name, eq, level = text.partition("=")
        name = name.strip()
        if not eq or not name:
            raise TPUsageError(f"--contour expects NAME=LEVEL, got {text!r}", file=file)
        if name not in outputs:
            raise TPUsageError(f"--contour: no output named {name!r} (outputs: {', '.join(outputs) or 'none'})",
                               file=file)
        out.setdefault(name, []).append(_number(level, name, file))
    return out


def split_defines(defines: Sequence[str], path: str) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """``-D`` texts as ({swept param: values}, {fixed param: value})."""
    parsed = [parse_axis(t, path) for t in defines]
    names = [a.name if isinstance(a, Axis) else a[0] for a in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TPUsageError(f"-D {twice[0]}: given more than once (one -D per param)", file=path)
    return ({a.name: a.values for a in parsed if isinstance(a, Axis)},
            {p[0]: p[1] for p in parsed if isinstance(p, tuple)})


def sweep_command(program, swept: Mapping[str, np.ndarray], contours: Sequence[str] = (), *, n: int | None = None,
                  trials: int = 1, seed: int = 0, matrix_dist: str | None = None, dtype: str = "float64",
                  jobs: int = 1, scheduler: object = None, tol: float | None = None,
                  max_qmc_points: int | None = None, out: str | None = None, plot: str | None = None) -> SweepResult:
    """``tpc sweep``: a loaded :class:`~tensorprog.program.Program` swept over ``swept``, saved and
    plotted (the options checked before the run)."""
    path = program.ir.file
    levels = parse_contours(contours, [o.name for o in program.ir.outputs], path)
    if out is not None and not str(out).endswith(".npz"):
        raise TPUsageError(f"--out: {out} must end in .npz (one array per output and param grid)", file=path)
    if plot is not None:
        from ..arguments import require_matplotlib
        require_matplotlib()
    result = program.sweep(swept, n=n, trials=trials, seed=seed, tol=tol, max_qmc_points=max_qmc_points,
                           matrix_dist=matrix_dist, dtype=dtype, jobs=jobs, scheduler=scheduler)
    if out is not None:
        result.save(out)
    if plot is not None:
        result.plot(plot, levels)
    return result
