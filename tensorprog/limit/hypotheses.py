"""Where a program leaves a theorem's hypotheses: compute anyway, and say which one.

  * non-Gaussian Master Theorem (Golikov, ch. 3): iid entries with all moments and
    polynomially smooth nonlinearities;
  * Master Theorem with transposes: iid entries, or Haar-orthogonal (its own exact rule, limit/haar.py);
  * moments: student_t(df) has moments only of order < df;
  * regularity: a denominator that can vanish makes φ non-pseudo-Lipschitz;
  * growth [polynomially bounded]: the Master Theorem is stated for polynomially bounded
    (pseudo-Lipschitz) φ.  exp(Z) of a Gaussian Z has every moment, so exp inside a Moment
    is fine; but a vector whose Z grows faster than any polynomial (exp(Z), 2 ** Z,
    anything that keeps such a term outside a bounded head) multiplied by a matrix puts
    exponentially growing functions into the next layer's Z: outside the theorem, and
    finite widths overflow or approach the limit very slowly;
  * exponential moments: E exp(t·|X|) is infinite for student_t X (every t > 0) and for
    laplace(var) X once t ≥ √(2/var): an integrand (or a MatMul argument, whose square is
    integrated) growing that fast in such an initial vector has no finite limit.

Each becomes a warning (``[hypothesis]: message``, once per message with every place it
occurs).  Not a hypothesis but a requirement, checked by :mod:`.finiteness`: every limit
must be a finite real float.
"""
from __future__ import annotations

import math
import re
import numpy as np
import sympy as sp

from .. import ir
from ..distributions import Family
from ..expect.analysis import BOUNDED, LINEAR, bounded_above, growth
from ..expect.budget import Budget
from ..expect.engine import Estimate
from .finiteness import real_params
from ..builtins import LINEAR as LINEAR_GROWTH
from ..symbolic.heads import NON_SMOOTH_HEADS, record_of

_BATCH_SYMBOL = re.compile(r"b_\d+")
_POLY_MESSAGE = ("a vector whose Z grows faster than any polynomial (exp, or a power with a random "
                 "exponent) is multiplied by a matrix: the Master Theorem assumes polynomially bounded "
                 "(pseudo-Lipschitz) nonlinearities; the limit is computed by the same rules, but finite "
                 "widths overflow or approach it very slowly")


class Hypotheses:
    """The warnings of a compilation: where the program leaves a theorem's hypotheses.

    The compiler calls ``base`` and ``row_scale`` when it names a random base variable,
    ``matmul(e)`` for each product, ``nonlin(e, expr, nodes)`` for each Z and integrand
    (``nodes`` its distinct sub-expressions), ``budget(e, est, budget)`` for each expectation,
    and ``warn(e, hypothesis, message)`` for a hypothesis of its own; ``warnings`` is the
    report.  ``heavy_laws`` describes the heavy-tailed laws (for :class:`.Finiteness`);
    ``params`` are the program's numeric params as symbols with their values.
    """

    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self._seen: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.matrices = {e.var: e for e in program.eqns if isinstance(e, ir.Matrix)}
        # iid non-Gaussian entries (an mvt matrix is diag(S)·G with G iid Gaussian, which the compiler
        # writes exactly; orthogonal entries are not iid)
        self.non_gaussian = [m for m in self.matrices.values() if m.dist.law.non_gaussian_iid]
        # param symbols (symbolic compilation) and their values; other non-vector symbols are batch items
        self.params = real_params(program)
        self.heavy_laws: list[str] = []                       # the heavy-tailed laws, for messages
        self._fast: set[int] = set()                          # Nonlin vars whose Z is not poly. bounded
        self._rates: dict[int, dict[sp.Symbol, float]] = {}   # Nonlin var -> {tail symbol: exp rate}
        self._tails: dict[str, tuple[str, Family, float]] = {}  # symbol name -> (vector, family, threshold)
        for m in self.matrices.values():
            self._heavy_tail(m, m.dist)
        for g in program.groups:
            self._heavy_tail(program.eqns[g.members[0]], g.dist)

    def base(self, e: ir.InitVector, sym: sp.Symbol) -> None:
        """The compiler names the base variable of an initial vector: remember it when its law
        lacks exponential moments."""
        spec = self.program.groups[e.group].dist
        threshold = spec.law.exp_moment_threshold(spec.var)
        if threshold is not None:
            self._tails[sym.name] = (e.name, spec.law, threshold)

    def row_scale(self, e: ir.Matrix, sym: sp.Symbol) -> None:
        """The random row scale S of an mvt matrix has no exponential moments (its tail is ~ s^−ν−1)."""
        self._tails[sym.name] = (f"(the row scale of {e.name})", e.dist.law,
                                 e.dist.law.exp_moment_threshold(e.dist.var))

    def warn(self, e: ir.Eqn, hypothesis: str, message: str) -> None:
        """Record a warning at e's statement (each message once, with every place it occurs)."""
        places = self._seen.setdefault((hypothesis, message), [])
        if (e.pos.line, e.pos.col) not in places:
            places.append((e.pos.line, e.pos.col))

    @property
    def warnings(self) -> list[str]:
        """One line per hypothesis and message, at its first place (and how many more)."""
        out = []
        for (hypothesis, message), places in self._seen.items():
            (line, col), more = places[0], len(places) - 1
            also = f" (also at line{'s' if more > 1 else ''} {', '.join(str(p[0]) for p in places[1:6])}" \
                f"{', ...' if more > 5 else ''})" if more else ""
            out.append(f"{self.program.file}:{line}:{col}: warning [{hypothesis}]: {message}{also}")
        return out

    def _heavy_tail(self, e, spec) -> None:
        note = spec.law.moments_note(spec.df)
        if note is not None:
            self.heavy_laws.append(note)
            self.warn(e, "all moments", spec.law.moments_warning(spec.df))

    def matmul(self, e: ir.MatMul) -> None:
        if e.arg in self._fast:
            self.warn(e, "polynomially bounded", _POLY_MESSAGE)
        for sym, rate in self._rates.get(e.arg, {}).items():
            self._exp_moments(e, sym, 2 * rate, "the square of a MatMul argument")   # Var Ẑ = σ² E[(Z^x)²]

    def nonlin(self, e: ir.Nonlin | ir.Moment, expr: sp.Expr, nodes: list[sp.Basic]) -> None:
        """A Z (``e`` a Nonlin) or an integrand (a Moment) and its distinct sub-expressions ``nodes``:
        smoothness, vanishing denominators, growth and exponential moments."""
        if self.non_gaussian and any(isinstance(n, NON_SMOOTH_HEADS) for n in nodes):
            names = ", ".join(sorted({f"{m.name} ({m.dist.family})" for m in self.non_gaussian}))
            self.warn(e, "smooth nonlinearity", "a non-smooth nonlinearity with non-Gaussian "
                      f"matrices {names}: the non-Gaussian Master Theorem needs polynomially smooth φ")
        powers = [n for n in nodes if n.is_Pow]
        for power in powers:
            if power.exp.is_negative and power.base.free_symbols and not power.base.is_positive:
                self.warn(e, "pseudo-Lipschitz", f"the denominator {power.base} can vanish")
        exps = [n for n in nodes if isinstance(n, sp.exp)]
        if not (exps or any(not p.exp.is_number for p in powers)):
            return                                       # polynomially bounded: nothing grows faster
        if isinstance(e, ir.Nonlin):
            grown = set().union(*(f.free_symbols for f in exps),
                                *(p.exp.free_symbols for p in powers if not p.exp.is_number))
            if any(growth(expr, s) == math.inf for s in self._random(grown)):
                self._fast.add(e.var)
        rates = {s: _exp_rate(expr, s) for s in nodes if s.is_Symbol and s.name in self._tails}
        if isinstance(e, ir.Nonlin):
            self._rates[e.var] = {s: r for s, r in rates.items() if r > 0}
        else:
            for sym, rate in rates.items():
                self._exp_moments(e, sym, rate, "the integrand")

    def _exp_moments(self, e, sym: sp.Symbol, rate: float, what: str) -> None:
        name, family, threshold = self._tails[sym.name]
        if rate <= 0 or rate < threshold:
            return
        self.warn(e, "exponential moments", family.exp_moment_warning(what, name, rate, threshold))

    def _random(self, symbols: set[sp.Symbol]) -> list[sp.Symbol]:
        """The random ones (base variables of Z's) among symbols: not params, not batch items."""
        return [s for s in symbols if s not in self.params and not _BATCH_SYMBOL.fullmatch(s.name)]

    def budget(self, e: ir.Eqn, est: Estimate, budget: Budget) -> None:
        """Name each resource limit an expectation reached, with the option that raises it; and
        QMC error bars that cannot be trusted (an integrand with infinite variance)."""
        error, tol = float(np.max(est.error)), budget.tol
        hit = set(getattr(est, "budget", ()))
        if est.method == "qmc" and error > max(tol, 1e-300) * 10:
            hit.add("max_qmc_points")
        for name in sorted(hit):
            key = "max_quad_points_kept" if name == "max_quad_points" and est.method != "qmc" else name
            self.warn(e, "budget", _BUDGET[key].format(limit=getattr(budget, name), error=error, tol=tol))
        if getattr(est, "heavy_tail", False):
            self.warn(e, "finite variance", "a quasi-Monte Carlo integrand looks heavy-tailed (estimated "
                      "tail index < 2, i.e. infinite variance): its error bar is not reliable")


#: one message per option (the errors themselves are in the outputs' ±), so that warnings group
_BUDGET = {
    "max_qmc_points": "an expectation stopped at max_qmc_points={limit} with its error above tol {tol:.0e}; "
                      "raise --max-qmc-points (max_qmc_points= in Python; time grows linearly) or accept "
                      "the stated error; for a long program (high-dimensional integrands, e.g. many training "
                      "steps) use --method particles, whose cost is linear in the program's length",
    "max_quad_points": "an expectation needed a quadrature grid above max_quad_points={limit} and went to "
                       "QMC; raise --max-quad-points (memory and time grow with it)",
    # the grid stopped, QMC was tried and did no better: the value kept (and reported) is quadrature's
    "max_quad_points_kept": "an expectation's quadrature grid stopped at max_quad_points={limit} with its "
                            "error above tol {tol:.0e}; QMC did no better, so the quadrature value is kept "
                            "(with its stated error); raise --max-quad-points (memory and time grow with it)",
    "max_expand_size": "a closed form was not attempted: the symbolic expansion would exceed "
                       "max_expand_size={limit} terms, so the value is numeric; raise --max-expand-size to try",
}


# ---- growth ---------------------------------------------------------------------------------------
def _exp_rate(expr: sp.Expr, u: sp.Symbol) -> float:
    """An upper bound on t such that |expr| ≤ C (1 + |u|)^p e^{t|u|} (inf if faster; 0 if polynomial)."""
    memo: dict = {}

    def r(e: sp.Expr) -> float:
        if e in memo:
            return memo[e]
        if not e.has(u) or e == u:
            out = 0.0
        elif e.is_Add or isinstance(e, LINEAR):
            out = max(r(a) for a in e.args)
        elif e.is_Mul:
            out = sum(r(a) for a in e.args)
        elif e.is_Pow:
            if e.exp.has(u):
                out = r(sp.exp(e.exp * sp.log(e.base))) if e.base.is_number and e.base.is_positive else math.inf
            elif e.exp.is_number and e.exp.is_positive:
                out = float(e.exp) * r(e.base)
            else:
                out = 0.0
        elif isinstance(e, BOUNDED):
            out = 0.0
        elif isinstance(e, sp.log):
            out = 0.0 if r(e.args[0]) < math.inf else math.inf
        elif isinstance(e, sp.exp):
            a = e.args[0]
            degree = growth(a, u)
            out = 0.0 if bounded_above(a) or degree < 1 else math.inf if degree > 1 else _slope(a, u)
        else:
            out = max(r(a) for a in e.args)
        memo[e] = out
        return out
    return r(expr)


def _slope(e: sp.Expr, u: sp.Symbol) -> float:
    """An upper bound on limsup |e| / |u| as |u| → ∞ for e of linear growth in u (inf if unknown)."""
    if not e.has(u):
        return 0.0
    if e == u:
        return 1.0
    if e.is_Add:
        return sum(_slope(a, u) for a in e.args)
    if e.is_Mul:
        coeff, factors = 1.0, []
        for f in e.args:
            if f.has(u):
                factors.append(f)
            elif f.is_number:
                coeff *= abs(complex(sp.N(f)))
            elif isinstance(f, BOUNDED) and not isinstance(f, (sp.atan, sp.erfc)):
                pass                                     # |f| ≤ 1
            else:
                return math.inf                          # a random, unbounded coefficient
        return coeff * _slope(factors[0], u) if len(factors) == 1 else math.inf
    if isinstance(e, sp.Abs):
        return _slope(e.args[0], u)
    rec = record_of(e)
    if rec is not None and rec.growth == LINEAR_GROWTH:                # the builtin's record: its slope
        return rec.slope(lambda a: _slope(a, u), *e.args)
    return 0.0 if growth(e, u) < 1 else math.inf
