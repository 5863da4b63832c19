"""The compiler's ledger of expectations: every E[·] of the recurrence goes through ``E``, which
caches it, records its Estimate (method, error, resource limits reached) and the set of
estimates each scalar rests on; a scalar's error is then Σ over those estimates, and a
function of scalars f(c) adds Σ_a |∂f/∂c_a|·err(c_a) (``_propagated_error``)."""
from __future__ import annotations

import sympy as sp

from ..symbolic import functions as fnsym
from .. import ir
from ..errors import TPValueError
from ..expect.engine import Estimate, expect
from ..symbolic.heads import Delta

#: closed forms in param symbols larger than this (sympy operation count) become numbers
MAX_SYMBOLIC_OPS = 80


class Ledger:
    """Mixed into ``Compiled``: needs program, symbolic, batch, options, laws, cov, param_values,
    estimates, scalar_error, c, hyp, _cache and ``result``."""

    def num(self, value: float) -> sp.Expr:
        return fnsym.constant(float(value), self.symbolic)

    def E(self, expr: sp.Expr, where: ir.Eqn, deps: set[int]) -> sp.Expr:
        """E[expr] over the base variables it depends on (exact where possible).

        Records the estimate in ``deps`` (the error budget of what uses it) and
        returns its value as sympy (the closed form in symbolic mode)."""
        key = expr
        if key not in self._cache:
            self._cache[key] = self._expect_batch(expr, where) if self.batch else self._expect(expr, where)
        index = self._cache[key]
        deps.add(index)
        est = self.estimates[index]
        if self.batch:
            return self.batch.number(est.value)
        return est.exact if est.exact is not None and self.symbolic else sp.Float(est.value)

    def _expect_batch(self, expr: sp.Expr, where: ir.Eqn) -> int:
        gauss = [s for s in sorted(expr.free_symbols, key=sp.default_sort_key)
                 if s not in self.laws and s not in self.batch.values]
        cov = [[self.cov.get((a, b), 0) for b in gauss] for a in gauss]
        return self._record(expr, where, lambda: self.batch.expect(expr, gauss, cov, self.laws, self.options))

    def _expect(self, expr: sp.Expr, where: ir.Eqn) -> int:
        syms = sorted(expr.free_symbols, key=sp.default_sort_key)
        gauss = [s for s in syms if s not in self.laws and s not in self.param_values]
        cov = sp.Matrix(len(gauss), len(gauss), lambda i, j: self.cov.get((gauss[i], gauss[j]), 0))
        laws = {s: self.laws[s] for s in syms if s in self.laws}
        return self._record(expr, where, lambda: self._expect_params(expr, gauss, cov, laws) if self.param_values
                            else expect(expr, gauss, cov, laws, exact=True, **self.options))

    def _record(self, expr: sp.Expr, where: ir.Eqn, compute) -> int:
        """Run ``compute()`` (an expectation), check it against the hypotheses and budgets, and
        append it to the ledger; its index."""
        try:
            est = compute()
        except ValueError as err:
            raise TPValueError(f"cannot evaluate E[{expr}]: {err}", where.pos.line, where.pos.col,
                               self.program.file, self.program.source) from None
        self.hyp.estimate(where, est)
        self.hyp.budget(where, est, self.options)
        self.estimates.append(est)
        return len(self.estimates) - 1

    def _expect_params(self, expr, gauss, cov, laws) -> Estimate:
        """A closed form in the param symbols if there is one, else numbers at their values."""
        symbolic = (expr.free_symbols | cov.free_symbols) & self.param_values.keys()
        small = max([sp.count_ops(expr)] + [sp.count_ops(c) for c in cov]) < MAX_SYMBOLIC_OPS
        if symbolic and small:
            try:
                est = expect(expr, gauss, cov, laws, exact=True, **self.options)
                if est.exact is not None and est.method == "exact" and \
                        sp.count_ops(est.exact) < 4 * MAX_SYMBOLIC_OPS:
                    value = complex(sp.N(est.exact.subs(self.param_values), 17))
                    return Estimate(value.real, 0.0, "exact", est.exact)
            except ValueError:
                pass
        if symbolic:                       # numbers, but exact ones: rho = 0.3 -> 3/10
            exact = {s: fnsym.constant(v, True) for s, v in self.param_values.items()}
            expr, cov = expr.subs(exact), cov.subs(exact)
        return expect(expr, gauss, cov, laws, exact=True, **self.options)

    def _propagated_error(self, e: ir.Scalar) -> float:
        """Σ_a |∂f/∂c_a| · err(c_a): a scalar function's error from its arguments' errors."""
        syms = {a: sp.Symbol(f"c[%{a}]", real=True) for a in e.args if a in self.c}
        f = fnsym.to_sympy(e.fn, lambda v: syms.get(v, self.leaf(v)))
        at = {s: self.c[a] for a, s in syms.items()}
        errors = {a: self.result(a).error for a in syms}
        total = 0.0
        for a, s in syms.items():
            slope = sp.diff(f, s)
            jumps = [d.args[0] for d in slope.atoms(Delta)
                     if abs(complex(sp.N(d.args[0].subs(at)))) <= 10 * sum(errors.values())]
            if jumps:                  # f jumps at (or within the error of) the arguments' limits
                self._jump(e, jumps, sum(errors.values()))
                return float("inf")
            slope = complex(sp.N(slope.subs(at)))
            total += abs(slope) * errors[a] if slope == slope else float("inf")
        return total

    def _jump(self, e: ir.Scalar, jumps: list[sp.Expr], error: float) -> None:
        """Warn: f(c) is discontinuous where c's limit lies, so f(c_n) need not converge to f(c̊)."""
        at = ", ".join(sorted({str(a) for a in jumps}))
        self.hyp.warn(e, "continuity", f"this scalar function jumps where its argument's limit lies "
                      f"({at} = 0 within the error {error:.1e}): finite-width values need not converge "
                      "to the value given, whose error is unbounded")
