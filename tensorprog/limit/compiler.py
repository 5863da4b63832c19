"""The limit compiler: the Master Theorem recurrence of a program (DESIGN.md).

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
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import sympy as sp

from .. import ir
from .batch import Batch
from ..errors import TPLimitError
from .ledger import Ledger
from ..expect.engine import Estimate, Law
from ..expect.linalg import MAX_EXPAND_SIZE
from ..expect.numeric import QUAD_BUDGET
from .hypotheses import Hypotheses
from .result import Limit, LimitValue, summarize

#: str(compiled) prints a Z-expression with more nested Nonlins in the IR's %-names instead
SHOW_NESTING = 8
#: Nonlins nested deeper than this in one Z-expression are refused (sympy recurses once per level;
#: 300 levels compile in ~2 s, 1000 in ~40 s); Python's recursion limit is raised to RECURSION meanwhile
MAX_NESTING = 500
RECURSION = 20000


@dataclass
class Family:
    """The Ẑ's of one matrix in one direction (W or Wᵀ)."""
    sigma2: sp.Expr                                   # σ² f
    members: list[tuple[sp.Symbol, sp.Expr, int]] = field(default_factory=list)  # (Ẑ, Z of argument, var)


class Compiled(Ledger):
    """The Z-recurrence of a program with every scalar's limit (``limit()`` packages the outputs)."""

    def __init__(self, program: ir.Program, symbolic: bool = False, tol: float = 1e-10,
                 max_qmc_points: int = 2**20, seed: int = 0, zdot: bool = True,
                 max_quad_points: int = QUAD_BUDGET, max_expand_size: int = MAX_EXPAND_SIZE,
                 batch_covs: Mapping[int, np.ndarray] | None = None,
                 symbolic_covs: Mapping[int, sp.Matrix] | None = None,
                 param_values: Mapping[sp.Symbol, float] | None = None) -> None:
        """``zdot=False`` drops every Ż term: the "gradient independence assumption" of the
        NTK literature, exact only when no vector depends on both W and Wᵀ products.

        ``batch_covs`` {group: array (P, k, k)} evaluates the recurrence for P covariances of
        those initial groups at once (e.g. every pair of a dataset): scalars that vary over
        the batch are symbols whose values are arrays (``self.values``)."""
        self.program, self.symbolic, self.use_zdot = program, symbolic, zdot
        self.batch = Batch(batch_covs) if batch_covs else None
        self.symbolic_covs = dict(symbolic_covs or {})       # group -> covariance in param symbols
        self.param_values = dict(param_values or {})
        self.base_of: dict[int, sp.Symbol] = {}
        self.base_names: set[str] = set()
        self.scalar_error: dict[int, float] = {}
        self.options = dict(tol=tol, max_qmc_points=max_qmc_points, seed=seed,
                            max_quad_points=max_quad_points, max_expand_size=max_expand_size)
        self.Z: dict[int, sp.Expr] = {}                   # vector var -> Z
        self.c: dict[int, sp.Expr] = {}                    # scalar var -> c̊
        self.deps: dict[int, set[int]] = {}                # var -> estimates it depends on
        self.estimates: list[Estimate] = []
        self.gauss: list[sp.Symbol] = []
        self.cov: dict[tuple[sp.Symbol, sp.Symbol], sp.Expr] = {}
        self.laws: dict[sp.Symbol, Law] = {}
        self.families: dict[tuple[int, bool], Family] = {}
        self.row_scale: dict[int, sp.Expr] = {}          # mvt matrix var -> |u|, its rows' random scale
        self.matmul_of: dict[tuple[int, bool, int], int] = {}
        self.lines: list[str] = []
        self.nesting: dict[int, int] = {}     # var -> depth of the Nonlins nested in its Z
        self.hyp = Hypotheses(program)
        self._cache: dict[sp.Expr, Estimate] = {}
        old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(old, RECURSION))
        try:
            for e in program.eqns:
                getattr(self, "do_" + type(e).__name__)(e)
        finally:
            sys.setrecursionlimit(old)

    # ---- numbers (expectations and their errors: compile_expect.Ledger)
    def leaf(self, var: int) -> sp.Expr:
        return self.Z[var] if var in self.Z else self.c[var]

    def deps_of(self, args) -> set[int]:
        return set().union(*(self.deps[a] for a in args))

    def add_gaussian(self, sym: sp.Symbol, covs: dict[sp.Symbol, sp.Expr]) -> None:
        self.gauss.append(sym)
        for other, value in covs.items():
            self.cov[(sym, other)] = self.cov[(other, sym)] = value

    # ---- equations
    def do_InitVector(self, e: ir.InitVector) -> None:
        group = self.program.groups[e.group]
        spec = group.dist
        name = f"Z_{e.name}".replace("[", "").replace("]", "")
        if name in self.base_names:            # x[1] and x1 are different vectors
            name += f"_{e.var}"
        self.base_names.add(name)
        sym = sp.Symbol(name, real=True)
        self.hyp.base(e, sym)
        mean = self.num(spec.mean[e.member]) if spec.mean else sp.Integer(0)
        if spec.family == "normal":
            entry = self.cov_entry(e.group, spec)
            covs = {sym: entry(e.member, e.member)}
            for m, other in enumerate(group.members[:e.member]):
                if spec.cov:
                    covs[self.base_of[other]] = entry(e.member, m)
            self.add_gaussian(sym, covs)
        else:
            self.laws[sym] = Law(spec.family, self.num(spec.var), spec.df)
        self.base_of[e.var] = sym
        self.Z[e.var] = mean + sym
        self.deps[e.var] = set()
        law = f"{spec.family}" + (f"(cov row {list(spec.cov[e.member])})" if spec.cov else f"(var={spec.var:g})")
        self.lines.append(f"Z[{e.name}] = {self.Z[e.var]}    ~ {law}")

    def cov_entry(self, group: int, spec):
        """Entry (i, j) of an initial group's covariance: a number, or a batch symbol."""
        if self.batch and group in self.batch.covs:
            return lambda i, j: self.batch.number(self.batch.covs[group][:, i, j])
        if group in self.symbolic_covs:
            return lambda i, j: self.symbolic_covs[group][i, j]
        return lambda i, j: self.num(spec.cov[i][j] if spec.cov else spec.var)

    def do_Matrix(self, e: ir.Matrix) -> None:
        ratio = self.num(self.program.dims[e.rows] / self.program.dims[e.cols])
        var = self.num(e.dist.var)
        self.families[(e.var, False)] = Family(var)
        self.families[(e.var, True)] = Family(var * ratio)
        if e.dist.family == "mvt":      # W = diag(S)·G, G iid Gaussian, S iid with S² = (ν−2)/χ²_ν
            u = sp.Symbol(f"u_{e.name}", real=True, nonzero=True)
            self.laws[u] = Law("mvt_scale", 1, e.dist.df)
            self.row_scale[e.var] = sp.Abs(u)
            self.hyp.row_scale(e, u)
        self.lines.append(f"{e.name}: {e.dist.family}, variance {e.dist.var:g}/{e.cols} ({e.rows}x{e.cols})")

    def do_MatMul(self, e: ir.MatMul) -> None:
        key = (e.matrix, e.transposed, e.arg)
        if key in self.matmul_of:                      # the same product again: the same vector
            self.Z[e.var] = self.Z[self.matmul_of[key]]
            self.deps[e.var] = self.deps[self.matmul_of[key]]
            return
        self.matmul_of[key] = e.var
        fam = self.families[(e.matrix, e.transposed)]
        scale = self.row_scale.get(e.matrix)            # mvt: Wx = S ⊙ (Gx), Wᵀy = Gᵀ(S ⊙ y)
        zx = self.Z[e.arg] if scale is None or not e.transposed else scale * self.Z[e.arg]
        name = self.program.eqns[e.matrix].name + ("T" if e.transposed else "")
        hat = sp.Symbol(f"Zhat_{name}_{e.var}", real=True)
        deps = set(self.deps[e.arg])
        covs = {hat: fam.sigma2 * self.E(zx * zx, e, deps)}
        for other, zy, y in fam.members:
            deps |= self.deps[y]
            covs[other] = fam.sigma2 * self.E(zx * zy, e, deps)
        self.add_gaussian(hat, covs)
        fam.members.append((hat, zx, e.arg))
        dot = self.zdot(e, zx, deps) if self.use_zdot else sp.Integer(0)
        outer = scale if scale is not None and not e.transposed else sp.Integer(1)
        if dot != 0:                     # Ż carries the arguments of the other direction's products
            self.nesting[e.var] = max((self.nesting.get(y, 0) for _, _, y in
                                       self.families[(e.matrix, not e.transposed)].members), default=0)
        self.Z[e.var] = outer * (hat + dot)
        self.deps[e.var] = deps
        self.hyp.matmul(e)
        self.lines.append(f"Z[%{e.var}] = " + (f"{outer}*(" if outer != 1 else "") + f"{hat}"
                          + (f" + {dot}" if dot != 0 else "") + (")" if outer != 1 else "")
                          + f"    # {name} @ %{e.arg};  Var {hat} = {_short(covs[hat])}"
                          + "".join(f", Cov(., {o}) = {_short(v)}" for o, v in covs.items()
                                    if o is not hat and v != 0))

    def zdot(self, e: ir.MatMul, zx: sp.Expr, deps: set[int]) -> sp.Expr:
        """Ż^{Wx} = σ² f Σ_y Z^y E[∂Z^x/∂Ẑ^{Wᵀy}] over the products by the other direction."""
        other = self.families[(e.matrix, not e.transposed)]
        total = sp.Integer(0)
        for hat_y, zy, y in other.members:
            if not zx.has(hat_y):
                continue
            deps |= self.deps[y]
            coeff = self.E(sp.diff(zx, hat_y), e, deps)
            if coeff != 0:
                total += self.families[(e.matrix, e.transposed)].sigma2 * coeff * zy
        return total

    def do_Nonlin(self, e: ir.Nonlin) -> None:
        self.Z[e.var] = self.hyp.evaluate(e, self.leaf, self.symbolic)
        self.deps[e.var] = self.deps_of(e.args)
        self.nesting[e.var] = 1 + max((self.nesting.get(a, 0) for a in e.args), default=0)
        if self.nesting[e.var] > MAX_NESTING:
            raise TPLimitError(f"Nonlins nest {self.nesting[e.var]} deep in this vector's Z-expression, more than "
                               f"the compiler's {MAX_NESTING} (one symbolic expression per chain of Nonlins); "
                               "execute the program at finite width instead", e.pos.line, e.pos.col,
                               self.program.file, self.program.source)
        self.hyp.nonlin(e, self.Z[e.var])
        self.lines.append(f"Z[%{e.var}] = {self.show(self.Z[e.var], e)}")

    def do_Moment(self, e: ir.Moment) -> None:
        integrand = self.hyp.evaluate(e, self.leaf, self.symbolic)
        self.hyp.nonlin(e, integrand)
        deps = self.deps_of(e.args)
        self.c[e.var] = self.E(integrand, e, deps)
        self.deps[e.var] = deps
        self.lines.append(f"c[%{e.var}] = E[{self.show(integrand, e)}] = {self.result(e.var).describe()}")

    def show(self, expr: sp.Expr, e: ir.Nonlin | ir.Moment) -> str:
        """expr in the base variables, or in the IR's %-names when Nonlins nest deeper than SHOW_NESTING."""
        if max((self.nesting.get(a, 0) for a in e.args), default=0) < SHOW_NESTING:
            return str(expr)
        return ir.show_fn(e.fn)

    def do_Scalar(self, e: ir.Scalar) -> None:
        value = self.hyp.evaluate(e, self.leaf, self.symbolic)
        value = sp.nsimplify(value) if self.symbolic and value.is_number and value.free_symbols == set() else value
        self.hyp.scalar(e, value)
        self.c[e.var] = value
        self.deps[e.var] = self.deps_of(e.args)
        if not self.batch:
            self.scalar_error[e.var] = self._propagated_error(e)
        self.lines.append(f"c[%{e.var}] = {value}")

    # ---- results
    def result(self, var: int) -> LimitValue:
        """A scalar's limit with the method and error summed over every estimate it rests on."""
        estimates = [self.estimates[i] for i in sorted(self.deps[var])]
        if self.batch:
            return self.batch.summarize(self.c[var], estimates)
        out = summarize(self.c[var], estimates, self.symbolic, self.param_values)
        if var in self.scalar_error:          # a function of scalars: errors weighted by sensitivity
            return LimitValue(out.value, self.scalar_error[var] + 4e-16 * (abs(out.value) + 1),
                              out.method, out.exact)
        return out

    def limit(self) -> Limit:
        return Limit({o.name: self.result(o.var) for o in self.program.outputs},
                     list(self.hyp.warnings))

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _short(value: sp.Expr) -> str:
    return f"{float(value):.6g}" if value.is_Float else str(value)


def compile_program(program: ir.Program, symbolic: bool = False, **options) -> Compiled:
    return Compiled(program, symbolic=symbolic, **options)
