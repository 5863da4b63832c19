"""Syntax tree -> IR: run the statements once, unrolling loops and arrays.

Constants (params, loop variables, lists) are folded; declarations emit
``InitVector``/``Matrix`` equations; expressions emit ``MatMul``, ``Nonlin``,
``Moment`` and ``Scalar`` equations.  A name maps to its newest binding.
The unrolled size is bounded (``max_nodes``) and checked before a loop runs away.

The pipeline of one lowering: :class:`Lowerer` runs the statements (this module); it owns an
:class:`~.builder.IRBuilder` (the equations) and an :class:`~.expressions.Expressions` (the
expression lowering), to which it is the :class:`~.expressions.Scope` (names, loop
variables, defs, params).  :func:`lower` returns the finished ``ir.Program``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from .. import ir
from . import syntax as S
from ..distributions import DistributionError, make_spec
from ..errors import TPError, TPIndexError, TPLimitError, TPNameError, TPTypeError, TPValueError
from ..builtins import BUILTINS, CONSTANTS
from . import consts
from ..symbolic import traced
from .builder import IRBuilder
from .matrices import EXPAND_TERMS
from .expressions import SPECIAL_FUNCTIONS, DefBody, Expressions
from .kernel_inputs import KernelData, KernelInputs, TemplateLayout, data_declarations
from .values import DataMat, MatExpr, MatVal, RExpr, Value, located

#: a binding of the environment: a name and its indices (``()`` for a plain name)
Key = tuple[str, tuple[int, ...]]
#: the previous binding of a loop variable that had none
MISSING = object()
#: names a program may not bind
RESERVED = frozenset({"sum", "n"})


@dataclass
class DataGroup:
    """The products ``U @ x`` of one data matrix U (n x d, entries of variance σ²/d): the initial
    vectors they are, and the data vectors x (rows) they multiply."""
    var: float                      # σ²
    width: str                      # U's output width
    rows: list[np.ndarray] = field(default_factory=list)
    members: list[int] = field(default_factory=list)
    index: dict[bytes, int] = field(default_factory=dict)    # a row's bytes -> its member

    def group(self, node, d: int) -> ir.Group:
        """The Gaussian group of the products: coordinate α of (U x_1, …, U x_k) is N(0, σ² X Xᵀ/d),
        iid over α: exactly the law of the product with Gaussian U."""
        X = np.stack(self.rows)
        cov = self.var * (X @ X.T) / d
        try:
            spec = make_spec("normal", [], {"cov": 0.5 * (cov + cov.T)}, for_matrix=False, n_vectors=len(self.rows))
        except DistributionError as err:
            raise located(TPValueError, node, f"the products with data: {err}") from None
        return ir.Group(spec, tuple(self.members), self.width)


class LoopBinding:
    """A context binding ``env[key]`` to a loop variable's value, restoring the previous binding
    (or none) on exit."""

    def __init__(self, env: dict[Key, Value], key: Key, value: float) -> None:
        self.env, self.key, self.value = env, key, value
        self.saved: object = MISSING

    def __enter__(self) -> None:
        self.saved = self.env.get(self.key, MISSING)
        self.env[self.key] = self.value

    def __exit__(self, *exc: object) -> None:
        if self.saved is MISSING:
            del self.env[self.key]
        else:
            self.env[self.key] = self.saved


class Lowerer:
    """The statement lowering: runs the statements once, binding names (``env``) and emitting
    equations into ``equations``; expressions are evaluated by ``expr``, to which this object
    is the :class:`~.expressions.Scope`."""

    def __init__(self, overrides: Mapping[str, float], base_dir: str, max_nodes: int) -> None:
        self.overrides = dict(overrides)
        self.base_dir = base_dir
        self.max_nodes = max_nodes
        self.equations = IRBuilder(max_nodes)
        self.expr = Expressions(self, self.equations)
        self.groups: list[ir.Group] = []
        self.outputs: dict[str, ir.Output] = {}
        self.env: dict[Key, Value] = {}
        self.arrays: dict[str, list[tuple[int, int]]] = {}     # declared index ranges
        self.defs: dict[str, DefBody] = {}
        self.params: dict[str, float] = {}
        self.dims: dict[str, float] = {"n": 1.0}
        self.fixed: dict[str, int] = {}                 # data dimensions: name -> size (not scaling with n)
        self.data_groups: dict[int, DataGroup] = {}     # group index -> the products of a data matrix
        self.data_at: dict[int, S.Node] = {}            # group index -> the declaration of its matrix
        self.data_cols: dict[int, str] = {}             # group index -> its matrix's data dimension
        self.steps = 0
        self.warnings: list[str] = []                   # "LINE:COL: warning ...", located by lower()
        self.bound_somewhere: set[str] = set()
        self.kernel: KernelData | None = None           # a kernel template's pair (kernel_inputs)
        self.names: dict[int, str] = {}                 # var -> the first name bound to it
        self.leaves: traced.SymbolicLeaves | None = None    # set by lower(trace=True)
        self.spec_leaf: tuple = (None, None)            # (var, cov) expressions of the last spec()

    @property
    def eqns(self) -> list[ir.Eqn]:
        """The equations emitted so far (variable k is bound by ``eqns[k]``)."""
        return self.equations.eqns

    # ---- environment (the Scope of expressions)
    def lookup(self, node, name: str, idx: tuple[int, ...]) -> Value:
        """The newest binding of ``name[idx]`` (or a constant such as ``pi``), else a located
        error saying why the name is unbound."""
        if (name, idx) in self.env:
            return self.env[(name, idx)]
        if idx and (name, ()) in self.env and name not in self.arrays:
            raise located(TPNameError, node, f"'{name}' is not an array: {name}[{', '.join(map(str, idx))}] is not bound")
        if not idx and name in CONSTANTS:
            return CONSTANTS[name]
        self.check_index(node, name, idx)
        shown = f"{name}[{', '.join(map(str, idx))}]" if idx else name
        if not idx and any(k[0] == name and k[1] for k in self.env):
            raise located(TPTypeError, node, f"'{name}' is an array: index it, e.g. {name}[1]")
        if name in self.bound_somewhere:
            raise located(TPNameError, node, f"'{shown}' is used before it is bound")
        raise located(TPNameError, node, f"unknown name '{shown}'")

    def constant(self, name: str) -> np.ndarray | None:
        value = self.env.get((name, ()))
        return value if isinstance(value, np.ndarray) else None

    def data_product(self, node, matrix: DataMat, row: np.ndarray) -> RExpr:
        """``U @ x``: the member of U's group for the data vector x (one member per distinct x)."""
        d = self.fixed[matrix.cols]
        if row.shape[0] != d:
            raise located(TPTypeError, node, f"'{matrix.name}' maps data of dimension {matrix.cols} = {d}, "
                          f"but this vector has {row.shape[0]} coordinates")
        if matrix.group < 0:                       # var=0: the zero vector, exactly
            return RExpr(ir.Const(0.0), "vector", matrix.rows)
        data = self.data_groups[matrix.group]
        key = np.ascontiguousarray(row, dtype=float).tobytes()
        if self.kernel is not None:                # the pair's vector k, whatever its values
            key = f"kernel-{self.kernel.index(node, row, 'U @ x')}".encode()
        if key not in data.index:
            member = len(data.members)
            var = self.equations.emit(ir.InitVector, node, name=f"{matrix.name}·x{member + 1}",
                                      group=matrix.group, member=member, width=matrix.rows)
            data.rows.append(np.array(row, dtype=float))
            data.members.append(var)
            data.index[key] = var
        return self.equations.var_expr(data.index[key])

    def data_mean(self, node, value: np.ndarray) -> RExpr | float:
        """``mean(e)`` of a data vector e: the mean of its d coordinates; in a kernel template,
        ``mean(x_a * x_b)`` of the inputs' vectors is a Moment (module doc of kernel_inputs)."""
        if self.kernel is None:
            return float(np.mean(value))
        operands = self.kernel.pair_operands(node.args[0], self.expr.ev)
        if operands is None or not all(isinstance(v, np.ndarray) for v in operands):
            raise located(TPTypeError, node, "in a kernel template, the data inputs enter only as U @ x and "
                          "mean(x * y) (x, y the inputs' data vectors)")
        a, b = (self.kernel.index(node, v, "mean(x * y)") for v in operands)
        if self.kernel.inputs.gram == "finite":
            hidden = self.hidden_gram(node)
            fn = ir.Bin("*", ir.Ref(hidden[a]), ir.Ref(hidden[b]))
            return self.equations.var_expr(self.equations.moment(node, fn, "n"))
        mat = self.kernel.matrix
        if mat is None or mat.group < 0 or self.kernel.scale <= 0:
            raise located(TPValueError, node, "in a kernel template, mean(x * y) of the data is computed in the "
                          "limit through the input layer: declare the input-layer matrix (of nonzero variance) "
                          "before it")
        index = self.data_groups[mat.group].index
        fn = ir.Bin("*", ir.Ref(index[f"kernel-{a}".encode()]), ir.Ref(index[f"kernel-{b}".encode()]))
        moment = self.equations.moment(node, fn, mat.rows)
        return RExpr(ir.Bin("/", ir.Ref(moment), ir.Const(self.kernel.scale)), "scalar", None, 1, 3)

    def hidden_gram(self, node) -> list[int]:
        """The hidden group ξ of a finite-width kernel template (members ξ_k for the pair's vectors,
        covariance their Gram/d; the kernel fills their columns exactly), made at first use."""
        kern = self.kernel
        if not kern.hidden:
            rows = np.stack([kern.by_k[k] for k in sorted(kern.by_k)])
            gram = rows @ rows.T / rows.shape[1]
            spec = make_spec("normal", [], {"cov": 0.5 * (gram + gram.T)}, for_matrix=False, n_vectors=len(rows))
            kern.hidden_group = len(self.groups)
            kern.hidden = [self.equations.emit(ir.InitVector, node, name=f"ξ{k + 1}", group=kern.hidden_group,
                                               member=k, width="n") for k in range(len(rows))]
            self.groups.append(ir.Group(spec, tuple(kern.hidden), "n"))
        return kern.hidden

    def layout(self) -> TemplateLayout:
        """Where the pair enters the lowered template (after :meth:`finish`)."""
        kern = self.kernel
        data = self.data_groups.get(kern.matrix.group) if kern.matrix is not None else None
        first = {"input": data.index.get(b"kernel-0") if data is not None else None,
                 "hidden": kern.hidden[0] if kern.hidden else None}
        found = {what: next((g for g, grp in enumerate(self.groups) if var is not None and grp.members[0] == var), None)
                 for what, var in first.items()}          # by member: finish() renumbers the groups
        return TemplateLayout(found["input"], kern.scale, found["hidden"], kern.inputs.tokens)

    def finish(self) -> None:
        """The groups of the data matrices, now that their products are known; a data matrix that
        multiplied nothing leaves no group (a placeholder reading no vector)."""
        for g, data in self.data_groups.items():
            if data.members:
                self.groups[g] = data.group(self.data_at[g], self.fixed[self.data_cols[g]])
        unused = [g for g, data in self.data_groups.items() if not data.members]
        if unused:
            keep = [g for g in range(len(self.groups)) if g not in unused]
            renumber = {old: new for new, old in enumerate(keep)}
            self.groups = [self.groups[g] for g in keep]
            for k, e in enumerate(self.eqns):
                if isinstance(e, ir.InitVector) and e.group != renumber[e.group]:
                    self.eqns[k] = ir.InitVector(e.var, e.name, renumber[e.group], e.member, e.width, e.pos)

    def loop_var(self, name: str, value: float) -> LoopBinding:
        return LoopBinding(self.env, (name, ()), value)

    def check_index(self, node, name: str, idx: tuple[int, ...]) -> None:
        ranges = self.arrays.get(name)
        if not ranges or not idx:
            return
        if len(idx) != len(ranges):
            raise located(TPIndexError, node, f"'{name}' takes {len(ranges)} index, got {len(idx)}")
        for i, (lo, hi) in zip(idx, ranges):
            if not lo <= i <= hi:
                raise located(TPIndexError, node, f"index {i} is outside the declared range {lo}..{hi} of '{name}'")

    def bind(self, node, name: str, idx: tuple[int, ...], value: Value) -> None:
        if name in RESERVED:
            raise located(TPNameError, node, f"'{name}' is reserved and cannot be bound")
        self.check_index(node, name, idx)
        if name in self.dims and name != "n" or name in self.defs:
            raise located(TPNameError, node, f"'{name}' is already a {'dim' if name in self.dims else 'def'}")
        self.env[(name, idx)] = value
        if isinstance(value, RExpr) and value.var is not None:     # provenance: the var's source name
            self.names.setdefault(value.var, f"{name}[{', '.join(map(str, idx))}]" if idx else name)

    # ---- statements
    def run(self, statements) -> None:
        for stmt in statements:
            self.steps += 1
            if self.steps > 2 * self.max_nodes:
                raise located(TPLimitError, stmt, "the program runs too many statements while unrolling")
            try:
                getattr(self, "do_" + type(stmt).__name__)(stmt)
            except RecursionError:      # the innermost statement: constant expressions are not bounded
                raise located(TPLimitError, stmt, "this statement nests too deeply") from None

    def do_Param(self, s: S.Param) -> None:
        value = self.overrides[s.name] if s.name in self.overrides else self.expr.const(s.value, "a param")
        if self.leaves is not None:
            value = self.leaves.tracer.param(s.name, traced.plain(value))
        self.params[s.name] = value
        self.bind(s, s.name, (), value)

    def do_Dim(self, s: S.Dim) -> None:
        ratio = self.expr.const(s.ratio, "a dim ratio")
        if not isinstance(ratio, float) or float(ratio) <= 0:
            raise located(TPValueError, s.ratio, "a dim ratio must be a positive number")
        if s.name == "n" or s.name in self.dims:
            raise located(TPNameError, s, f"the width '{s.name}' is already defined")
        self.dims[s.name] = ratio
        if self.leaves is not None and traced.expr_of(ratio) is not None:
            self.leaves.dims[s.name] = ratio.expr

    def width(self, node, name: str | None, at: tuple[int, int] | None = None) -> str:
        if name is None:
            return "n"
        if name in self.fixed:
            line, col = at or (node.line, node.col)
            raise TPTypeError(f"'{name}' is a data dimension (fixed, {self.fixed[name]}): only data vectors "
                              f"(vector x : {name} = ...) and the input side of a matrix (n x {name}) have it",
                              line, col)
        if name not in self.dims:
            line, col = at or (node.line, node.col)
            raise TPNameError(f"unknown width '{name}' (declare it with: dim {name} = RATIO)", line, col)
        return name

    def spec(self, d: S.Dist, for_matrix: bool, n_vectors: int = 1):
        """The validated spec of a distribution call, and whether its variance is 0 (``var=0``: a
        zero vector or matrix, exactly; the spec is then the call's with var=1, for its checks)."""
        args = [self.expr.const(a, "a distribution parameter") for a in d.args]
        kwargs = {}
        for k, v in d.kwargs:
            if k in kwargs:
                raise located(TPNameError, v, f"{d.family}: the keyword '{k}' is given twice")
            kwargs[k] = self.expr.const(v, "a distribution parameter")
        args, kwargs = self.untraced(args, kwargs, d.family in ("student_t", "mvt"))
        if consts.precision(kwargs.get("cov")) > 0:
            kwargs["cov"] = self.rounded_cov(d, kwargs["cov"])
        at = 1 if d.family in ("student_t", "mvt") else 0       # the positional var (after df)
        zero = False
        if isinstance(kwargs.get("var"), float) and kwargs["var"] == 0.0:
            kwargs["var"], zero = 1.0, True
        elif "var" not in kwargs and len(args) > at and isinstance(args[at], float) and args[at] == 0.0:
            args[at], zero = 1.0, True
        try:
            return make_spec(d.family, args, kwargs, for_matrix=for_matrix, n_vectors=n_vectors), zero
        except DistributionError as err:
            raise located(TPValueError, d, str(err)) from None

    def untraced(self, args: list, kwargs: dict, has_df: bool) -> tuple[list, dict]:
        """A distribution call's numbers without traces; their expressions (var, cov) kept in
        ``spec_leaf`` (df and mean decide the law: their params stay numbers)."""
        at = 1 if has_df else 0
        var = kwargs.get("var", args[at] if len(args) > at else None)
        self.spec_leaf = (traced.expr_of(var), traced.expr_of(kwargs.get("cov")))
        for v in ([args[0]] if has_df and args else []) + [kwargs.get("df"), kwargs.get("mean")]:
            traced.structure(v)
        return [traced.plain(a) for a in args], {k: traced.plain(v) for k, v in kwargs.items()}

    def rounded_cov(self, d: S.Dist, cov: np.ndarray) -> np.ndarray:
        """A covariance made from a lower-precision array (float32): negative eigenvalues within that
        precision are rounding, projected away with a warning; beyond it, the usual PSD error."""
        eps = consts.precision(cov)
        fixed, lowest = consts.project_psd(cov, eps)
        if lowest is not None:
            self.warnings.append(f"{d.line}:{d.col}: warning [precision]: cov comes from a float32 array "
                                 f"(relative precision {eps:.2g}); its smallest eigenvalue {lowest:.3g} is "
                                 "within that precision, so the negative eigenvalues were set to 0")
        return fixed

    def expand(self, decl: S.Decl) -> list[Key]:
        if decl.range is None:
            return [(decl.name, ())]
        lo, hi = self.expr.const_range(decl.range)
        if hi < lo:
            raise located(TPIndexError, decl, f"empty range {lo}..{hi}")
        self.expr.charge(decl, hi - lo + 1)
        self.arrays[decl.name] = [(lo, hi)]
        return [(decl.name, (i,)) for i in range(lo, hi + 1)]

    def do_VectorDecl(self, s: S.VectorDecl) -> None:
        keys = [k for d in s.decls for k in self.expand(d)]
        width = self.width(s, s.width, s.width_at)
        spec, zero = self.spec(s.dist, for_matrix=False, n_vectors=len(keys))
        if zero:                          # var=0: the constant vector of the mean (0 by default), exactly
            for m, (name, idx) in enumerate(keys):
                mean = spec.mean[m] if spec.mean else 0.0
                self.bind(s, name, idx, RExpr(ir.Const(float(mean)), "vector", width))
            return
        group = len(self.groups)
        members = []
        for m, (name, idx) in enumerate(keys):
            shown = f"{name}[{idx[0]}]" if idx else name
            var = self.equations.emit(ir.InitVector, s, name=shown, group=group, member=m, width=width)
            self.bind(s, name, idx, self.equations.var_expr(var))
            members.append(var)
        self.groups.append(ir.Group(spec, tuple(members), width))
        var_expr, cov_expr = self.spec_leaf
        if self.leaves is not None and (var_expr is not None or cov_expr is not None):
            k = len(members)
            self.leaves.groups[group] = (np.asarray(cov_expr, dtype=object) if cov_expr is not None
                                         else np.diag(np.full(k, var_expr, dtype=object)))

    def do_MatrixDecl(self, s: S.MatrixDecl) -> None:
        shape, at = s.shape or (None, None), s.shape_at or (None, None)
        if shape[1] in self.fixed:
            return self.data_matrix(s)
        rows, cols = (self.width(s, w, pos) for w, pos in zip(shape, at))
        spec, zero = self.spec(s.dist, for_matrix=True)
        for decl in (s.decl, *s.more):
            for name, idx in self.expand(decl):
                shown = f"{name}[{idx[0]}]" if idx else name
                if zero:                   # var=0: the zero matrix, exactly (its products are 0)
                    self.bind(s, name, idx, MatExpr(None, 0.0, (), rows, cols))
                    continue
                var = self.equations.emit(ir.Matrix, s, name=shown, dist=spec, rows=rows, cols=cols)
                self.bind(s, name, idx, MatVal(var, False))
                if self.leaves is not None and self.spec_leaf[0] is not None:
                    self.leaves.matrices[var] = self.spec_leaf[0]

    def data_matrix(self, s: S.MatrixDecl) -> None:
        """``matrix U : n x d ~ normal(var=σ²)`` with d a data dimension: U's products with data
        vectors are one jointly Gaussian initial group, of covariance σ² X Xᵀ/d."""
        rows = self.width(s, s.shape[0], s.shape_at[0] if s.shape_at else None)
        spec, zero = self.spec(s.dist, for_matrix=True)
        traced.structure(traced.Traced(0.0, self.spec_leaf[0]) if self.spec_leaf[0] is not None else None)
        if spec.family != "normal":
            raise located(TPValueError, s.dist, f"a matrix on the data dimension '{s.shape[1]}' must be normal "
                          f"(got {spec.family}): its products with data are Gaussian in the limit only then")
        for decl in (s.decl, *s.more):
            for name, idx in self.expand(decl):
                shown = f"{name}[{idx[0]}]" if idx else name
                if self.kernel is not None:
                    self.kernel.check_matrix(s)
                if zero:
                    self.bind(s, name, idx, DataMat(shown, -1, rows, s.shape[1]))
                    if self.kernel is not None:
                        self.kernel.matrix = DataMat(shown, -1, rows, s.shape[1])
                    continue
                g = len(self.groups)
                self.groups.append(None)          # filled by finish() once the products are known
                self.data_groups[g] = DataGroup(spec.var, rows)
                self.data_at[g], self.data_cols[g] = s, s.shape[1]
                self.bind(s, name, idx, DataMat(shown, g, rows, s.shape[1]))
                if self.kernel is not None:       # members in the order of the pair's vectors
                    self.kernel.matrix, self.kernel.scale = DataMat(shown, g, rows, s.shape[1]), float(spec.var)
                    for k in sorted(self.kernel.by_k):
                        self.data_product(s, self.kernel.matrix, self.kernel.by_k[k])

    def do_Data(self, s: S.Data) -> None:
        """``vector x[a..b] : d = EXPR``: the rows of a constant (b-a+1) x d array as data vectors x[a..b]
        of the fixed dimension d (``vector x : d = EXPR``: one vector, a 1-d array)."""
        ks = None
        if self.kernel is not None:               # a kernel template: the pair's data, not the file's
            keys = self.expand(s.decl)
            rows_k, ks = self.kernel.data(s, None if s.decl.range is None else len(keys))
            arr = rows_k[0] if s.decl.range is None else np.stack(rows_k)
        else:
            value = self.expr.const(s.value, "data")
            arr = np.asarray(value, dtype=float)
            keys = self.expand(s.decl)
        want = 1 if s.decl.range is None else 2
        if arr.ndim != want or want == 2 and arr.shape[0] != len(keys):
            shape = "x".join(map(str, arr.shape)) or "a number"
            need = "a 1-d array (one vector)" if want == 1 else f"a {len(keys)} x d array (one row per vector)"
            raise located(TPValueError, s.value, f"data for '{s.decl.name}' must be {need}, got shape {shape}")
        d = arr.shape[-1]
        if s.width in self.dims:
            line, col = s.width_at or (s.line, s.col)
            raise TPNameError(f"'{s.width}' is a width that scales with n: data has a fixed dimension of its "
                              "own (give it another name)", line, col)
        if self.fixed.get(s.width, d) != d:
            line, col = s.width_at or (s.line, s.col)
            raise TPValueError(f"the data dimension '{s.width}' is {self.fixed[s.width]}, but these vectors "
                               f"have {d} coordinates", line, col)
        self.fixed[s.width] = d
        rows = [arr] if want == 1 else list(arr)
        for m, ((name, idx), row) in enumerate(zip(keys, rows)):
            bound = np.array(row)
            self.bind(s, name, idx, bound)
            if ks is not None:
                self.kernel.register(bound, ks[m])

    def do_Assign(self, s: S.Assign) -> None:
        idx = tuple(self.expr.const_int(i, "an index") for i in s.indices)
        value = self.expr.ev(s.value)
        if isinstance(value, RExpr):
            value = self.equations.var_expr(self.equations.materialize(s.value, value))
        elif isinstance(value, str):
            raise located(TPTypeError, s.value, "a string cannot be bound to a name")
        self.bind(s, s.name, idx, value)

    def do_For(self, s: S.For) -> None:
        lo, hi = self.expr.const_range(s.range)
        for i in range(lo, hi + 1):
            before = (len(self.eqns), self.steps)
            with self.loop_var(s.var, float(i)):
                self.run(s.body)
            if i == lo:
                self.precheck(s, hi - lo + 1, len(self.eqns) - before[0], self.steps - before[1])

    def precheck(self, s: S.For, iterations: int, eqns_each: int, steps_each: int) -> None:
        if eqns_each * iterations > self.max_nodes - len(self.eqns) + eqns_each:
            raise located(TPLimitError, s, f"this loop would unroll to about {eqns_each * iterations} "
                          f"equations, over the limit of {self.max_nodes} (raise max_nodes to allow it)")
        if max(steps_each, 1) * iterations > 2 * self.max_nodes:
            raise located(TPLimitError, s, f"this loop runs {iterations} iterations, too many to unroll")

    def do_Def(self, s: S.Def) -> None:
        if s.name in BUILTINS or s.name in SPECIAL_FUNCTIONS or s.name == "sum":
            raise located(TPNameError, s, f"'{s.name}' is a builtin and cannot be redefined")
        if len(set(s.params)) != len(s.params):
            raise located(TPNameError, s, "repeated argument name in def")
        self.defs[s.name] = (s.params, s.body)

    def do_Out(self, s: S.Out) -> None:
        idx = tuple(self.expr.const_int(i, "an index") for i in s.indices)
        self.equations.share_moments = bool(idx)
        try:
            value = self.expr.ev(s.value) if s.value is not None else self.lookup(s, s.name, idx)
        finally:
            self.equations.share_moments = False
        if isinstance(value, float):
            value = RExpr(ir.Const(value), "scalar", None)
        if not isinstance(value, RExpr) or value.kind != "scalar":
            raise located(TPTypeError, s.value or s, f"out {s.name}: an output must be a scalar "
                          "(use mean(...) of a vector)")
        key = f"{s.name}[{', '.join(map(str, idx))}]" if idx else s.name
        if key in self.outputs:
            raise located(TPNameError, s, f"output '{key}' is defined twice")
        self.check_output_shape(s, idx)
        var = value.var if value.var is not None else self.equations.materialize(s.value or s, value)
        if s.value is not None:
            self.bind(s, s.name, idx, self.equations.var_expr(var))
        self.outputs[key] = ir.Output(key, var, ir.Pos(s.line, s.col), s.name if idx else None, idx)

    def check_output_shape(self, s: S.Out, idx: tuple[int, ...]) -> None:
        """An output name is a scalar or an array (``out K[i, j]``) with one number of indices."""
        for o in self.outputs.values():
            same = o.array == s.name if o.array is not None else o.name == s.name
            if not same:
                continue
            if bool(o.index) != bool(idx):
                raise located(TPNameError, s, f"output '{s.name}' is both a scalar and an array of outputs")
            if len(o.index) != len(idx):
                raise located(TPIndexError, s, f"output '{s.name}' takes {len(o.index)} index"
                              f"{'es' if len(o.index) > 1 else ''} (line {o.pos.line}), got {len(idx)}")
            return


def declared_names(statements) -> set[str]:
    """The names a program binds anywhere (loop bodies included): reading one before its
    binding is "used before it is bound", not "unknown"."""
    names: set[str] = set()
    for s in statements:
        if isinstance(s, (S.Param, S.Assign)) or isinstance(s, S.Out) and s.value is not None:
            names.add(s.name)
        elif isinstance(s, S.VectorDecl):
            names.update(d.name for d in s.decls)
        elif isinstance(s, S.MatrixDecl):
            names.update(d.name for d in (s.decl, *s.more))
        elif isinstance(s, S.Data):
            names.add(s.decl.name)
        elif isinstance(s, S.For):
            names |= declared_names(s.body)
    return names


def param_names(statements) -> set[str]:
    """The params a program declares (loop bodies included): the names ``overrides`` may set."""
    names: set[str] = set()
    for s in statements:
        if isinstance(s, S.Param):
            names.add(s.name)
        elif isinstance(s, S.For):
            names |= param_names(s.body)
    return names


def lower(module: S.Module, overrides: Mapping[str, float] | None = None, *, file: str = "<string>",
          source: str = "", base_dir: str = ".", max_nodes: int = 1_000_000,
          expand_terms: int | None = EXPAND_TERMS, trace: bool = False) -> ir.Program:
    """Unroll a parsed program into the IR; raise located ``TPError``s.  ``expand_terms``: a
    product by a matrix with more rank-one terms than this is a LowRank equation over a RankOne
    chain (None: every product expands; :mod:`.matrices`).  ``trace``: params are leaves
    (:mod:`tensorprog.symbolic.traced`): the program's ``leaves`` and its ``Const`` leaves carry
    expressions in them (for ``compile --symbolic``); the numbers are the same."""
    return lower_with(module, overrides, file=file, source=source, base_dir=base_dir, max_nodes=max_nodes,
                      expand_terms=expand_terms, trace=trace)[0]


def lower_template(module: S.Module, inputs: KernelInputs, overrides: Mapping[str, float] | None = None, *,
                   file: str = "<string>", source: str = "", base_dir: str = ".",
                   max_nodes: int = 1_000_000) -> tuple[ir.Program, TemplateLayout]:
    """A kernel template written with data inputs, lowered on the pair ``inputs`` (see
    :mod:`.kernel_inputs`): the IR and where the pair enters it."""
    return lower_with(module, overrides, file=file, source=source, base_dir=base_dir, max_nodes=max_nodes,
                      inputs=inputs)


def lower_with(module: S.Module, overrides: Mapping[str, float] | None = None, *, file: str = "<string>",
               source: str = "", base_dir: str = ".", max_nodes: int = 1_000_000,
               inputs: KernelInputs | None = None, expand_terms: int | None = EXPAND_TERMS,
               trace: bool = False) -> tuple[ir.Program, TemplateLayout | None]:
    """:func:`lower`, or :func:`lower_template` when ``inputs`` are given."""
    overrides = dict(overrides or {})
    try:
        unknown = sorted(set(overrides) - param_names(module.statements))
        if unknown:
            known = ", ".join(sorted(param_names(module.statements))) or "none"
            first = next((s for s in module.statements if isinstance(s, S.Param)), None)
            raise TPNameError(f"unknown parameter '{unknown[0]}' (the program's params: {known})",
                              first.line if first else 1, first.col if first else 1)
        low = Lowerer({k: float(v) for k, v in overrides.items()}, base_dir, max_nodes)
        low.expr.matrices.expand_terms = expand_terms
        low.bound_somewhere = declared_names(module.statements)
        if inputs is not None:
            low.kernel = KernelData(inputs, data_declarations(module.statements))
        if trace:
            low.leaves = traced.SymbolicLeaves(traced.Tracer())
        token = traced.ACTIVE.set(low.leaves.tracer if trace else None)
        try:
            low.run(module.statements)
            low.finish()
        finally:
            traced.ACTIVE.reset(token)
        layout = low.layout() if inputs is not None else None
        if not low.outputs:
            line, col = module.statements[-1].line if module.statements else 1, 1
            low.warnings.append(f"{line}:{col}: warning [no out]: the program has no 'out' statement, so it "
                                "computes and reports nothing (add one, e.g. out k = mean(x * x))")
    except TPError as err:
        raise err.located(file, source) from None
    except RecursionError:
        raise TPLimitError("the program nests too deeply", 1, 1, file, source) from None
    return ir.verify(ir.Program(tuple(low.eqns), tuple(low.groups), tuple(low.outputs.values()),
                                dims=dict(low.dims), params=dict(low.params), file=file, source=source,
                                base_dir=base_dir, warnings=tuple(f"{file}:{w}" for w in low.warnings),
                                overrides={k: float(v) for k, v in overrides.items()},
                                max_nodes=max_nodes, names=dict(low.names), leaves=low.leaves)), layout


def expanded(program: ir.Program) -> ir.Program:
    """``program`` with every product by an updated matrix expanded by definition (the IR the
    limit compiler reads: Z^{Wx} = Z^{W₀x} + Σ c Z^g E[Z^h Z^x]): the program itself when it has
    no RankOne chain, else its source lowered again with ``expand_terms=None``."""
    if not program.low_rank:
        return program
    from .parser import parse_text
    return lower(parse_text(program.source, program.file), program.overrides, file=program.file,
                 source=program.source, base_dir=program.base_dir, max_nodes=program.max_nodes,
                 expand_terms=None)
