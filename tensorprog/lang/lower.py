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

from typing import Mapping

from .. import ir
from . import syntax as S
from ..distributions import DistributionError, make_spec
from ..errors import TPError, TPIndexError, TPLimitError, TPNameError, TPTypeError, TPValueError
from ..builtins import BUILTINS, CONSTANTS
from .builder import IRBuilder
from .expressions import SPECIAL_FUNCTIONS, DefBody, Expressions
from .values import MatVal, RExpr, Value, located

#: a binding of the environment: a name and its indices (``()`` for a plain name)
Key = tuple[str, tuple[int, ...]]
#: the previous binding of a loop variable that had none
MISSING = object()
#: names a program may not bind
RESERVED = frozenset({"sum", "n"})


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
        self.steps = 0
        self.bound_somewhere: set[str] = set()

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
        self.params[s.name] = value
        self.bind(s, s.name, (), value)

    def do_Dim(self, s: S.Dim) -> None:
        ratio = self.expr.const(s.ratio, "a dim ratio")
        if not isinstance(ratio, float) or ratio <= 0:
            raise located(TPValueError, s.ratio, "a dim ratio must be a positive number")
        if s.name == "n" or s.name in self.dims:
            raise located(TPNameError, s, f"the width '{s.name}' is already defined")
        self.dims[s.name] = ratio

    def width(self, node, name: str | None, at: tuple[int, int] | None = None) -> str:
        if name is None:
            return "n"
        if name not in self.dims:
            line, col = at or (node.line, node.col)
            raise TPNameError(f"unknown width '{name}' (declare it with: dim {name} = RATIO)", line, col)
        return name

    def spec(self, d: S.Dist, for_matrix: bool, n_vectors: int = 1):
        args = [self.expr.const(a, "a distribution parameter") for a in d.args]
        kwargs = {}
        for k, v in d.kwargs:
            if k in kwargs:
                raise located(TPNameError, v, f"{d.family}: the keyword '{k}' is given twice")
            kwargs[k] = self.expr.const(v, "a distribution parameter")
        try:
            return make_spec(d.family, args, kwargs, for_matrix=for_matrix, n_vectors=n_vectors)
        except DistributionError as err:
            raise located(TPValueError, d, str(err)) from None

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
        spec = self.spec(s.dist, for_matrix=False, n_vectors=len(keys))
        group = len(self.groups)
        members = []
        for m, (name, idx) in enumerate(keys):
            shown = f"{name}[{idx[0]}]" if idx else name
            var = self.equations.emit(ir.InitVector, s, name=shown, group=group, member=m, width=width)
            self.bind(s, name, idx, self.equations.var_expr(var))
            members.append(var)
        self.groups.append(ir.Group(spec, tuple(members), width))

    def do_MatrixDecl(self, s: S.MatrixDecl) -> None:
        rows, cols = (self.width(s, w, at) for w, at in zip(s.shape or (None, None), s.shape_at or (None, None)))
        spec = self.spec(s.dist, for_matrix=True)
        for name, idx in self.expand(s.decl):
            shown = f"{name}[{idx[0]}]" if idx else name
            var = self.equations.emit(ir.Matrix, s, name=shown, dist=spec, rows=rows, cols=cols)
            self.bind(s, name, idx, MatVal(var, False))

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
        value = self.expr.ev(s.value) if s.value is not None else self.lookup(s, s.name, ())
        if isinstance(value, float):
            value = RExpr(ir.Const(value), "scalar", None)
        if not isinstance(value, RExpr) or value.kind != "scalar":
            raise located(TPTypeError, s.value or s, f"out {s.name}: an output must be a scalar "
                          "(use mean(...) of a vector)")
        if s.name in self.outputs:
            raise located(TPNameError, s, f"output '{s.name}' is defined twice")
        var = value.var if value.var is not None else self.equations.materialize(s.value or s, value)
        if s.value is not None:
            self.bind(s, s.name, (), self.equations.var_expr(var))
        self.outputs[s.name] = ir.Output(s.name, var, ir.Pos(s.line, s.col))


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
          source: str = "", base_dir: str = ".", max_nodes: int = 1_000_000) -> ir.Program:
    """Unroll a parsed program into the IR; raise located ``TPError``s."""
    overrides = dict(overrides or {})
    try:
        unknown = sorted(set(overrides) - param_names(module.statements))
        if unknown:
            known = ", ".join(sorted(param_names(module.statements))) or "none"
            first = next((s for s in module.statements if isinstance(s, S.Param)), None)
            raise TPNameError(f"unknown parameter '{unknown[0]}' (the program's params: {known})",
                              first.line if first else 1, first.col if first else 1)
        low = Lowerer({k: float(v) for k, v in overrides.items()}, base_dir, max_nodes)
        low.bound_somewhere = declared_names(module.statements)
        low.run(module.statements)
    except TPError as err:
        raise err.located(file, source) from None
    except RecursionError:
        raise TPLimitError("the program nests too deeply", 1, 1, file, source) from None
    return ir.verify(ir.Program(tuple(low.eqns), tuple(low.groups), tuple(low.outputs.values()),
                                dims=dict(low.dims), params=dict(low.params), file=file, source=source,
                                base_dir=base_dir))
