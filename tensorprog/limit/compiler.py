"""The limit compiler: the Master Theorem recurrence of a program (docs/architecture.md, "The limit
compiler").

Every vector x gets a random variable Z^x (a sympy expression over base
variables), every scalar c a number c̊:
  * initial vector: a base variable with the declared law (jointly within its group);
  * Nonlin: Z^{φ(x..; c..)} = φ(Z^x..; c̊..);   Moment: c̊ = E φ(Z^x..; c̊..);
  * MatMul: Z^{Wx} = Ẑ^{Wx} + Ż^{Wx}, where {Ẑ^{Wx}}_x is a centred Gaussian family
    per (matrix, transposition) with Cov(Ẑ^{Wx}, Ẑ^{Wy}) = σ² f E[Z^x Z^y] and
    Ż^{Wx} = σ² f Σ_y Z^y E[∂Z^x/∂Ẑ^{Wᵀy}] over the products Wᵀy computed so far
    (f = 1 for W, f = rows/cols for Wᵀ of a rectangular W);
  * an mvt matrix is W = diag(S)·G with G iid Gaussian and one scale per row, S² = (ν−2)/χ²_ν:
    Z^{Wx} = |u|·Z^{Gx} and Z^{Wᵀy} = Z^{Gᵀ(|u| y)}, u a law ``mvt_scale`` of the engine.
Expectations go to the expectation engine (``expect``); each carries its method and error.

The pipeline: :func:`compile_program` runs a :class:`Compiler` (the mutable builder: one
``do_<Eqn kind>`` rule per equation kind, in program order) with its :class:`.Interpretation`
(what the numbers are, :mod:`.interpret`: the compiler has no mode flags) and three
collaborators, the :class:`.Ledger` (the law of the base variables and every expectation), the
:class:`.Hypotheses` (warnings) and the :class:`.Finiteness` check (errors), and returns an
immutable :class:`Compiled` (the recurrence's lines, the Z's and c̊'s, the estimates; its
``limit()`` gives every output's value).
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterator, Mapping

import numpy as np
import sympy as sp

from .. import ir
from ..errors import TPLimitError, TPUsageError
from ..expect.budget import DEFAULT, Budget
from ..expect.engine import Estimate, Law
from ..ir.walk import ARITHMETIC, Rules, fold
from ..symbolic import functions as fnsym
from ..symbolic.dag import distinct_nodes
from ..symbolic.heads import HEADS
from ..symbolic.rounding import scaled
from .batch import Batch, BatchRecord, partial_derivative, substituted
from .finiteness import Finiteness
from .haar import HaarMatrix, HaarShape, Term
from .hypotheses import Hypotheses
from .indices import IndexSet
from .interpret import Batched, Exact, Interpretation, Numbers, Params
from .ledger import Ledger
from .recurrence import (Covariance, Expectation, HatBase, InitialBase, MatrixLaw, Record, Recurrence,
                         ScalarNode, Source, VectorZ, ZdotCoefficient, output_names)
from .result import Limit, LimitValue, group_limits
from .structural import OddBlocks

#: Nonlins nested deeper than this in one Z-expression are refused (sympy recurses once per level;
#: 300 levels compile in ~2 s, 1000 in ~40 s); Python's recursion limit is raised to RECURSION meanwhile
MAX_NESTING = 500
RECURSION = 20000


@contextmanager
def recursion_limit(at_least: int) -> Iterator[None]:
    """Python's recursion limit raised to at least ``at_least`` inside the block, restored on exit.

    sympy recurses once per level of an expression, and a Z-expression nests one level per
    Nonlin (up to MAX_NESTING); the limit is process-wide, so it is raised for the compile only."""
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, at_least))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@dataclass(frozen=True, eq=False)
class Compiled:
    """The Z-recurrence of a program with every scalar's limit (``limit()`` packages the outputs).

    ``recurrence``: the recurrence as data (:mod:`.recurrence`), which the printers read
    (``lines``, ``str``: as text, :mod:`.printers`); ``Z``: vector var -> Z-expression; ``c``:
    scalar var -> c̊; ``estimates``: every expectation; ``deps``: var -> indices of the
    estimates it rests on (an :class:`~.indices.IndexSet`, a bitset: O(L²) bits for L layers, not
    O(L²) set entries); ``scalar_error``: var -> propagated error of a function of scalars."""
    program: ir.Program
    recurrence: Recurrence
    Z: Mapping[int, sp.Expr]
    c: Mapping[int, sp.Expr]
    estimates: tuple[Estimate, ...]
    deps: Mapping[int, IndexSet]
    scalar_error: Mapping[int, float]
    warnings: tuple[str, ...]
    interpretation: Interpretation = field(default_factory=Numbers)
    batch_record: BatchRecord | None = None     # a batch compile's record, for a replay (:mod:`.replay`)

    @property
    def symbolic(self) -> bool:
        """Whether the compile kept exact constants and closed forms."""
        return self.interpretation.exact

    @property
    def param_values(self) -> Mapping[sp.Symbol, float]:
        """{param symbol: value} of the params left as symbols in the closed forms."""
        return MappingProxyType(dict(self.interpretation.params))

    @property
    def batch(self) -> Batch | None:
        """The batch of a batch compile (its values are arrays over the items), else None."""
        return self.interpretation.batch

    def result(self, var: int) -> LimitValue:
        """A scalar's limit with the method and error summed over every estimate it rests on."""
        return self.interpretation.summarize(self.c[var], [self.estimates[i] for i in sorted(self.deps[var])],
                                             self.scalar_error.get(var))

    def limit(self) -> Limit:
        flat = {o.name: self.result(o.var) for o in self.program.outputs}
        return Limit(group_limits(self.program.outputs, flat), list(self.warnings), flat)

    @property
    def lines(self) -> tuple[str, ...]:
        """The recurrence as text, one line per record that defines a variable (:mod:`.printers`)."""
        from .printers import recurrence_lines
        return recurrence_lines(self)

    def __str__(self) -> str:
        return "\n".join(self.lines)

    def _repr_html_(self) -> str:
        """Jupyter: the recurrence typeset (Ẑ covariances, Ż terms), see :mod:`.printers`."""
        from .printers import compiled_html
        return compiled_html(self)

    def _repr_latex_(self) -> str:
        from .printers import compiled_latex
        return compiled_latex(self)


def compile_program(program: ir.Program, symbolic: bool = False, *, budget: Budget = DEFAULT,
                    zdot: bool = True, batch_covs: Mapping[int, np.ndarray] | None = None,
                    symbolic_covs: Mapping[int, sp.Matrix] | None = None,
                    param_values: Mapping[sp.Symbol, float] | None = None) -> Compiled:
    """The Master Theorem recurrence of ``program``, evaluated by the interpretation the options
    name (:func:`interpretation`; ``budget`` and ``zdot``: :class:`CompileOptions`).  The
    program's updated matrices must be expanded by definition (:func:`tensorprog.lang.lower.expanded`,
    which ``Program.compile`` applies: the rule for a product by W₀ + Σ c g hᵀ/n is
    Z^{W₀x} + Σ c Z^g E[Z^h Z^x], stated equation by equation); RankOne chains are refused."""
    if program.low_rank:
        raise TPUsageError("this IR keeps updated matrices as RankOne chains: compile its expansion "
                           "(tensorprog.lang.lower.expanded(program), as Program.compile does)",
                           file=program.file)
    how = interpretation(symbolic, batch_covs, symbolic_covs, param_values, program.file)
    return Compiler(program, how, CompileOptions(budget, zdot)).run()


def interpretation(symbolic: bool = False, batch_covs: Mapping[int, np.ndarray] | None = None,
                   symbolic_covs: Mapping[int, sp.Matrix] | None = None,
                   param_values: Mapping[sp.Symbol, float] | None = None, file: str | None = None) -> Interpretation:
    """The evaluation strategy (:mod:`.interpret`) that :func:`compile_program`'s options name:
    ``batch_covs`` {group: array (P, k, k)}: :class:`.Batched`, the recurrence for P covariances of
    those initial groups at once (e.g. every pair of a dataset); ``symbolic_covs`` {group:
    covariance in param symbols} with ``param_values`` {symbol: value}: :class:`.Params`, those
    params kept symbolic; ``symbolic``: :class:`.Exact`, closed forms with exact constants;
    otherwise :class:`.Numbers`."""
    if batch_covs:
        if symbolic or symbolic_covs or param_values:
            raise TPUsageError("a batch compile (batch_covs) evaluates numbers over arrays: it takes neither "
                               "symbolic nor symbolic_covs / param_values", file=file)
        return Batched(batch_covs)
    if symbolic_covs or param_values:
        return Params(symbolic_covs or {}, param_values or {})
    return Exact() if symbolic else Numbers()


@dataclass(frozen=True)
class CompileOptions:
    """``budget``: what each expectation may cost.  ``zdot=False`` drops every Ż term: the
    "gradient independence assumption" of the NTK literature, exact only when no vector depends
    on both W and Wᵀ products."""
    budget: Budget = DEFAULT
    zdot: bool = True


@dataclass
class Family:
    """The Ẑ's of one matrix in one direction (W or Wᵀ)."""
    sigma2: sp.Expr                                   # σ² f
    members: list[tuple[sp.Symbol, sp.Expr, int]] = field(default_factory=list)  # (Ẑ, Z of argument, var)


class Compiler:
    """Builds the recurrence equation by equation (``do_<Eqn kind>``); ``run()`` gives the
    :class:`Compiled`.  One compiler compiles once."""

    def __init__(self, program: ir.Program, interpretation: Interpretation | None = None,
                 options: CompileOptions = CompileOptions()) -> None:
        """``interpretation`` (:mod:`.interpret`; default :class:`.Numbers`): what the numbers of
        the recurrence are — every question whose answer depends on the evaluation strategy goes
        to it; ``options``: the budget and the Ż rule."""
        self.program, self.interp, self.use_zdot = program, interpretation or Numbers(), options.zdot
        self.hypotheses = Hypotheses(program)
        self.finiteness = Finiteness(program, self.hypotheses.params, self.hypotheses.heavy_laws)
        self.ledger = Ledger(program, options.budget, self.interp, self.hypotheses, self.finiteness)
        self.base_of: dict[int, sp.Symbol] = {}
        self.base_names: set[str] = set()
        self.scalar_error: dict[int, float] = {}
        self.Z: dict[int, sp.Expr] = {}                   # vector var -> Z
        self.c: dict[int, sp.Expr] = {}                    # scalar var -> c̊
        self.deps: dict[int, IndexSet] = {}                # var -> estimates it depends on (a bitset)
        self.families: dict[tuple[int, bool], Family] = {}
        self.row_scale: dict[int, sp.Expr] = {}          # mvt matrix var -> |u|, its rows' random scale
        self.matmul_of: dict[tuple[int, bool, int], int] = {}
        self.haar: dict[tuple[int, bool], HaarMatrix] = {}       # (orthogonal matrix, direction) -> its products
        self.haar_deps: dict[tuple[int, bool], IndexSet] = {}    # the estimates those rest on
        self.transposed = {e.matrix for e in program.eqns if isinstance(e, ir.MatMul) and e.transposed}
        self.records: list[Record] = []       # the recurrence as data, in the order derived
        self.sources: dict[int, Source] = {}
        self.output_names = output_names(program)
        self.expectations: set[int] = set()   # estimate indices already recorded
        self.nesting: dict[int, int] = {}     # var -> depth of the Nonlins nested in its Z
        self._done = False

    def run(self) -> Compiled:
        """Every equation in order, then the frozen result; Python's recursion limit is raised to
        RECURSION meanwhile (sympy recurses once per nested Nonlin)."""
        if self._done:
            raise RuntimeError("a Compiler compiles once")
        self._done = True
        with recursion_limit(RECURSION):
            for e in self.program.eqns:
                getattr(self, "do_" + type(e).__name__)(e)
        return Compiled(self.program, Recurrence(tuple(self.records)), MappingProxyType(dict(self.Z)),
                        MappingProxyType(dict(self.c)), tuple(self.ledger.estimates),
                        MappingProxyType({v: d.copy() for v, d in self.deps.items()}),
                        MappingProxyType(dict(self.scalar_error)),
                        tuple(self.program.warnings) + tuple(self.hypotheses.warnings),
                        self.interp, self.interp.record(self.ledger.estimates))

    # ---- values
    def num(self, value: float) -> sp.Expr:
        """A constant of the program (as the interpretation writes it: exact rationals, or floats)."""
        return self.interp.constant(value)

    def leaf(self, var: int) -> sp.Expr:
        """Z of a vector, c̊ of a scalar."""
        return self.Z[var] if var in self.Z else self.c[var]

    def deps_of(self, args) -> IndexSet:
        out = IndexSet()
        out.update(*(self.deps[a] for a in args))
        return out

    def source(self, var: int) -> Source:
        """The source name and position of ``var`` (for the records)."""
        if var not in self.sources:
            self.sources[var] = Source.of(self.program, var, self.output_names)
        return self.sources[var]

    def E(self, expr: sp.Expr, where: ir.Eqn, deps: IndexSet) -> sp.Expr:
        """E[expr] by the ledger; the first time, an expectation node in the records."""
        value = self.ledger.E(expr, where, deps)
        index = self.ledger.index(expr)
        if index not in self.expectations:
            self.expectations.add(index)
            self.records.append(Expectation(self.source(where.var), index, expr, value))
        return value

    def expectation_of(self, expr: sp.Expr) -> int:
        """The estimate index of an expectation already taken."""
        return self.ledger.index(expr)

    def result(self, var: int) -> LimitValue:
        """A scalar's limit, as far as compiled."""
        return self.ledger.result(self.c[var], self.deps[var], self.scalar_error.get(var))

    def build(self, e: ir.Nonlin | ir.Moment | ir.Scalar) -> sp.Expr:
        """φ(Z^x..; c̊..): the sympy expression of ``e.fn`` with each vector leaf replaced by its Z
        and each scalar leaf by its c̊.  Each operation's value, as it is built, goes to the
        finiteness check (a sub-expression of scalars must be a finite real float)."""
        eqns = self.program.eqns

        def apply(op: str, node: ir.Fn, parts: list[tuple[sp.Expr, bool]],
                  compute: Callable[..., sp.Expr]) -> tuple[sp.Expr, bool]:
            values, scalar = [v for v, _ in parts], [s for _, s in parts]
            try:
                value = compute(*values)
            except ZeroDivisionError:
                value = None
            self.finiteness.operation(e, op, node, values, scalar, value)
            return value, all(scalar)

        rules = Rules(ref=lambda node: (self.leaf(node.var), isinstance(eqns[node.var], ir.SCALAR_OPS)),
                      const=lambda node: (self.constant(node), True),
                      call=lambda node, args: apply(node.name, node, args, HEADS[node.name]),
                      bin=lambda node, lhs, rhs: apply(node.op, node, [lhs, rhs], ARITHMETIC[node.op]),
                      neg=lambda node, operand: apply("-", node, [operand], lambda v: -v))
        return fold(e.fn, rules)[0]

    def constant(self, node: ir.Const) -> sp.Expr:
        """A constant leaf of a function tree, by the interpretation (a sweep's compiler,
        :mod:`.sweep`, gives the leaves that vary over its points as batch symbols)."""
        return self.interp.leaf(node, self.program)

    def add_gaussian(self, sym: sp.Symbol, covs: dict[sp.Symbol, sp.Expr]) -> None:
        self.ledger.add_gaussian(sym, covs)

    # ---- equations
    def do_InitVector(self, e: ir.InitVector) -> None:
        group = self.program.groups[e.group]
        spec = group.dist
        name = f"Z_{e.name}".replace("[", "").replace("]", "")
        if name in self.base_names:            # x[1] and x1 are different vectors
            name += f"_{e.var}"
        self.base_names.add(name)
        sym = sp.Symbol(name, real=True)
        self.hypotheses.base(e, sym)
        mean = self.num(spec.mean[e.member]) if spec.mean else sp.Integer(0)
        if spec.law.gaussian:
            entry = self.cov_entry(e.group, spec)
            covs = {sym: entry(e.member, e.member)}
            for m, other in enumerate(group.members[:e.member]):
                if spec.cov:
                    covs[self.base_of[other]] = entry(e.member, m)
            self.add_gaussian(sym, covs)
        else:
            self.ledger.add_law(sym, Law(spec.family, self.num(spec.var), spec.df))
        self.base_of[e.var] = sym
        self.Z[e.var] = mean + sym
        self.deps[e.var] = IndexSet()
        src = self.source(e.var)
        self.records.append(InitialBase(src, sym, spec.family, mean, e.group, e.member,
                                        tuple(spec.cov[e.member]) if spec.cov else None,
                                        None if spec.cov else spec.var))
        if spec.law.gaussian:
            self.records += [Covariance(src, sym, other, value) for other, value in covs.items()]
        self.records.append(VectorZ(src, "initial", self.Z[e.var]))

    def cov_entry(self, group: int, spec) -> Callable[[int, int], sp.Expr]:
        """Entry (i, j) of an initial group's covariance: a number, a batch symbol, an expression
        in param symbols (the interpretation's)."""
        return self.interp.initial_cov(group, spec)

    def do_Matrix(self, e: ir.Matrix) -> None:
        var, ratio = self.interp.matrix_variance(e, self.program)
        self.families[(e.var, False)] = Family(var)
        self.families[(e.var, True)] = Family(var * ratio)
        scale_law = e.dist.law.row_scale
        if scale_law is not None:   # mvt: W = diag(S)·G, G iid Gaussian, S iid with S² = (ν−2)/χ²_ν
            u = sp.Symbol(f"u_{e.name}", real=True, nonzero=True)
            self.ledger.add_law(u, Law(scale_law.name, 1, e.dist.df))
            self.row_scale[e.var] = sp.Abs(u)
            self.hypotheses.row_scale(e, u)
        if e.dist.law.haar and e.var in self.transposed:
            for direction in ({False} if self.use_zdot else {False, True}):
                self.haar[(e.var, direction)] = self.haar_matrix(e, direction)
        self.records.append(MatrixLaw(self.source(e.var), e.dist.family, e.dist.var, e.rows, e.cols,
                                      u if scale_law is not None else None))

    def haar_matrix(self, e: ir.Matrix, direction: bool) -> HaarMatrix:
        """The products by a Haar-orthogonal matrix used transposed (:mod:`.haar`); ``direction`` keys
        its state (one state for both directions; one each under zdot=False, which takes the
        transposed products independent of the forward ones)."""
        deps = self.haar_deps.setdefault((e.var, direction), IndexSet())
        shape = HaarShape.of(self.program.dims[e.rows], self.program.dims[e.cols], self.num(e.dist.var),
                             self.interp.haar_number)

        def inner(a: Term, b: Term) -> sp.Expr:
            za, zb = (self.Z[t] if isinstance(t, int) else t for t in (a, b))
            deps.update(*(self.deps[t] for t in (a, b) if isinstance(t, int)))
            return self.E(za * zb, e, deps)

        def tolerance(scale, spread):
            """When a residual counts as 0 (a determined product): the interpretation decides."""
            return self.interp.haar_tolerance(scale, spread, lambda: self.ledger.error_sum(deps))

        def fresh(name: str) -> sp.Symbol:
            return sp.Symbol(f"Zhat_{name}", real=True)
        return HaarMatrix(shape, self.interp.haar_arithmetic(), inner, tolerance, fresh)

    def do_MatMul(self, e: ir.MatMul) -> None:
        key = (e.matrix, e.transposed, e.arg)
        if key in self.matmul_of:                      # the same product again: the same vector
            self.Z[e.var] = self.Z[self.matmul_of[key]]
            self.deps[e.var] = self.deps[self.matmul_of[key]]
            self.records.append(VectorZ(self.source(e.var), "same", self.Z[e.var], matrix=self.source(e.matrix),
                                        transposed=e.transposed, arg=self.source(self.matmul_of[key])))
            return
        self.matmul_of[key] = e.var
        if (e.matrix, e.transposed and not self.use_zdot) in self.haar:
            return self.haar_matmul(e)
        fam = self.families[(e.matrix, e.transposed)]
        scale = self.row_scale.get(e.matrix)            # mvt: Wx = S ⊙ (Gx), Wᵀy = Gᵀ(S ⊙ y)
        zx = self.Z[e.arg] if scale is None or not e.transposed else scale * self.Z[e.arg]
        name = self.program.eqns[e.matrix].name + ("T" if e.transposed else "")
        hat = sp.Symbol(f"Zhat_{name}_{e.var}", real=True)
        deps = self.deps[e.arg].copy()
        covs = {hat: scaled(fam.sigma2, self.E(zx * zx, e, deps))}
        src = self.source(e.var)
        entries = [Covariance(src, hat, hat, covs[hat], fam.sigma2, self.expectation_of(zx * zx))]
        for other, zy, y in fam.members:
            deps |= self.deps[y]
            covs[other] = scaled(fam.sigma2, self.E(zx * zy, e, deps))
            entries.append(Covariance(src, hat, other, covs[other], fam.sigma2, self.expectation_of(zx * zy)))
        self.add_gaussian(hat, covs)
        self.records.append(HatBase(src, hat, self.source(e.matrix), e.transposed, self.source(e.arg)))
        self.records += entries
        fam.members.append((hat, zx, e.arg))
        dot = self.zdot(e, zx, deps) if self.use_zdot else sp.Integer(0)
        outer = scale if scale is not None and not e.transposed else sp.Integer(1)
        if dot != 0:                     # Ż carries the arguments of the other direction's products
            self.nesting[e.var] = max((self.nesting.get(y, 0) for _, _, y in
                                       self.families[(e.matrix, not e.transposed)].members), default=0)
        self.Z[e.var] = outer * (hat + dot)
        self.deps[e.var] = deps
        self.hypotheses.matmul(e)
        self.records.append(VectorZ(src, "matmul", self.Z[e.var], matrix=self.source(e.matrix), transposed=e.transposed,
                                    arg=self.source(e.arg), hat=hat, dot=dot, outer=outer,
                                    nesting=self.nesting.get(e.var, 0)))

    def haar_matmul(self, e: ir.MatMul) -> None:
        """Z of a product by a Haar-orthogonal matrix used transposed: s·(Σ_k c_k v_k + g), the
        earlier products' images plus a fresh Gaussian g for the residual (:mod:`.haar`)."""
        direction = e.transposed and not self.use_zdot
        state, deps = self.haar[(e.matrix, direction)], self.haar_deps[(e.matrix, direction)]
        deps.update(self.deps[e.arg])
        name = self.program.eqns[e.matrix].name + ("T" if e.transposed else "") + f"_{e.var}"
        product = state.product(e.arg, name, e.transposed)
        src = self.source(e.var)
        if product.hat is not None:
            self.add_gaussian(product.hat, {h: state.arith.to_sympy(c) for h, c in product.covs.items()})
            self.records.append(HatBase(src, product.hat, self.source(e.matrix), e.transposed, self.source(e.arg),
                                        haar=True))
        terms = [(state.arith.to_sympy(c), self.Z[t] if isinstance(t, int) else t) for t, c in product.seen.items()]
        images = sp.Add(*(c * z for c, z in terms if c != 0))
        self.Z[e.var] = state.shape.scale * images
        self.deps[e.var] = deps.copy()
        self.nesting[e.var] = max((self.nesting.get(t, 0) for t in product.seen if isinstance(t, int)), default=0)
        self.hypotheses.matmul(e)
        if product.hat is not None:
            covs = {h: state.arith.to_sympy(c) for h, c in product.covs.items()}
            self.records += [Covariance(src, product.hat, h, v) for h, v in covs.items()]
        self.records.append(VectorZ(src, "haar", self.Z[e.var], matrix=self.source(e.matrix), transposed=e.transposed,
                                    arg=self.source(e.arg), hat=product.hat, nesting=self.nesting[e.var]))

    def zdot(self, e: ir.MatMul, zx: sp.Expr, deps: IndexSet) -> sp.Expr:
        """Ż^{Wx} = σ² f Σ_y Z^y E[∂Z^x/∂Ẑ^{Wᵀy}] over the products by the other direction."""
        other = self.families[(e.matrix, not e.transposed)]
        total = sp.Integer(0)
        odd = None
        for hat_y, zy, y in other.members:
            if not zx.has(hat_y):
                continue
            if odd is None:                     # exact zeros by independence and symmetry
                gaussians = (s for s in distinct_nodes(zx) if s.is_Symbol and (s, s) in self.ledger.cov)
                odd = OddBlocks(zx, gaussians, self.ledger.cov)
            if odd.zero(hat_y):
                continue
            deps |= self.deps[y]
            derivative = sp.diff(zx, hat_y)
            coeff = self.E(derivative, e, deps)
            if not self.interp.zero(coeff):
                sigma2 = self.families[(e.matrix, e.transposed)].sigma2
                total += sigma2 * coeff * zy
                self.records.append(ZdotCoefficient(self.source(e.var), hat_y, self.source(y), sigma2, coeff,
                                                    self.expectation_of(derivative)))
        return total

    def do_Nonlin(self, e: ir.Nonlin) -> None:
        self.Z[e.var] = self.build(e)
        self.deps[e.var] = self.deps_of(e.args)
        self.nesting[e.var] = 1 + max((self.nesting.get(a, 0) for a in e.args), default=0)
        if self.nesting[e.var] > MAX_NESTING:
            raise TPLimitError(f"Nonlins nest {self.nesting[e.var]} deep in this vector's Z-expression, more than "
                               f"the compiler's {MAX_NESTING} (one symbolic expression per chain of Nonlins); "
                               "execute the program at finite width instead", e.pos.line, e.pos.col,
                               self.program.file, self.program.source)
        self.check_expression(e, self.Z[e.var])
        self.records.append(VectorZ(self.source(e.var), "nonlin", self.Z[e.var], step=e.fn,
                                    nesting=self.args_nesting(e)))

    def do_Moment(self, e: ir.Moment) -> None:
        integrand = self.build(e)
        self.check_expression(e, integrand)
        deps = self.deps_of(e.args)
        self.c[e.var] = self.E(integrand, e, deps)
        self.deps[e.var] = deps
        self.records.append(ScalarNode(self.source(e.var), "moment", self.c[e.var], e.fn, self.result(e.var),
                                       integrand, self.expectation_of(integrand), self.args_nesting(e)))

    def check_expression(self, e: ir.Nonlin | ir.Moment, expr: sp.Expr) -> None:
        """A Z or an integrand: finite numbers in it (else an error), then the hypotheses (warnings)."""
        nodes = distinct_nodes(expr)
        self.finiteness.expression(e, nodes)
        self.hypotheses.nonlin(e, expr, nodes)

    def args_nesting(self, e: ir.Nonlin | ir.Moment) -> int:
        """The deepest chain of Nonlins under the arguments of ``e``."""
        return max((self.nesting.get(a, 0) for a in e.args), default=0)

    def do_Scalar(self, e: ir.Scalar) -> None:
        value = self.interp.scalar_value(self.build(e))
        self.finiteness.scalar(e, value)
        self.c[e.var] = value
        self.deps[e.var] = self.deps_of(e.args)
        error = self.interp.scalar_error(lambda: self.propagated_error(e))
        if error is None and isinstance(self.interp, Batched):
            error = self.propagated_array(e)      # a batch (dataset kernels, sweeps): on arrays
        if error is not None:
            self.scalar_error[e.var] = error
        self.records.append(ScalarNode(self.source(e.var), "scalar", value, e.fn, None))

    def propagated_array(self, e: ir.Scalar) -> np.ndarray | None:
        """Σ_a |∂f/∂c_a| · err(c_a) at every item of a batch, for c = f(c_a..) (f built with a symbol
        per scalar argument, its varying constants as batch symbols); None where a derivative cannot
        be evaluated on arrays (the error is then the sum of the estimates')."""
        batch = self.interp.batch
        syms = {a: sp.Symbol(f"c[%{a}]", real=True) for a in e.args if a in self.c}
        saved = {a: self.c[a] for a in syms}
        try:
            self.c.update(syms)
            f = self.build(e)
        finally:
            self.c.update(saved)
        total = np.zeros(batch.P)
        at = {t: saved[b] for b, t in syms.items()}
        try:
            for a, s in syms.items():
                slope = np.abs(batch.eval(substituted(partial_derivative(f, s), at)))
                error = self.scalar_error.get(a)
                error = self.ledger.error_sum(self.deps[a]) if error is None else error
                total = total + np.where(np.isfinite(slope), slope, np.inf) * error
        except (TypeError, ValueError, KeyError):
            return None
        return total

    def propagated_error(self, e: ir.Scalar) -> float:
        """Σ_a |∂f/∂c_a| · err(c_a) for c = f(c_a..), with f built over a symbol per scalar argument."""
        syms = {a: sp.Symbol(f"c[%{a}]", real=True) for a in e.args if a in self.c}
        f = fnsym.to_sympy(e.fn, lambda v: syms.get(v, self.leaf(v)))
        at = {s: self.c[a] for a, s in syms.items()}
        errors = {s: self.result(a).error for a, s in syms.items()}
        return self.ledger.propagated_error(e, f, at, errors)

