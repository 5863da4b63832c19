"""Where a program leaves a theorem's hypotheses: compute anyway, and say which one.

  * non-Gaussian Master Theorem (Golikov, ch. 3): iid entries with all moments and
    polynomially smooth nonlinearities;
  * Master Theorem with transposes: iid entries (not orthogonal, not rotation-invariant rows);
  * moments: student_t(df) has moments only of order < df;
  * regularity: a denominator that can vanish makes φ non-pseudo-Lipschitz.
"""
from __future__ import annotations

import sympy as sp

from . import ir
from .nonlin import BUILTINS, NON_SMOOTH_HEADS

_NON_IID = ("orthogonal", "mvt")


class Hypotheses:
    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self._seen: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.matrices = {e.var: e for e in program.eqns if isinstance(e, ir.Matrix)}
        self.non_gaussian = [m for m in self.matrices.values() if m.dist.family not in ("normal",) + _NON_IID]
        for m in self.matrices.values():
            self._heavy_tail(m, m.dist)
        for g in program.groups:
            self._heavy_tail(program.eqns[g.members[0]], g.dist)

    def warn(self, e, hypothesis: str, message: str) -> None:
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
        if spec.family in ("student_t", "mvt"):
            self.warn(e, "all moments", f"{spec.family}(df={spec.df:g}) has finite moments only of "
                      f"order < {spec.df:g}; the Master Theorem assumes all moments")

    def matmul(self, e: ir.MatMul) -> None:
        m = self.matrices[e.matrix]
        if m.dist.family in _NON_IID and e.transposed:
            self.warn(e, "iid entries", f"{m.name} ({m.dist.family}) is used transposed; the Master "
                      "Theorem with transposes is proven for iid entries only")
        elif m.dist.family == "mvt":
            self.warn(e, "iid entries", f"{m.name} has mvt rows (not iid): the limit is computed as for "
                      "iid Gaussian entries of the same variance — exact for second moments of positively "
                      "homogeneous φ (relu, leaky_relu), not otherwise (a row is S·g with a random scale S)")

    def nonlin(self, e, expr: sp.Expr) -> None:
        if self.non_gaussian and expr.has(*NON_SMOOTH_HEADS):
            names = ", ".join(sorted({f"{m.name} ({m.dist.family})" for m in self.non_gaussian}))
            self.warn(e, "smooth nonlinearity", "a non-smooth nonlinearity with non-Gaussian "
                      f"matrices {names}: the non-Gaussian Master Theorem needs polynomially smooth φ")
        for power in expr.atoms(sp.Pow):
            if power.exp.is_negative and power.base.free_symbols and not power.base.is_positive:
                self.warn(e, "pseudo-Lipschitz", f"the denominator {power.base} can vanish")

    def scalar(self, e: ir.Scalar, value: sp.Expr) -> None:
        if value.is_number and not sp.N(value).is_finite and value.is_comparable:
            from .errors import TPNumericalError
            raise TPNumericalError(f"the limit of this scalar is not finite ({value})", e.pos.line,
                                   e.pos.col, self.program.file, self.program.source)

    def budget(self, e, est, tol: float, max_qmc_points: int) -> None:
        """An expectation that stopped at its budget above the target error."""
        import numpy as np
        if est.method == "qmc" and np.max(est.error) > max(tol, 1e-300) * 10:
            self.warn(e, "budget", f"an expectation stopped at max_qmc_points={max_qmc_points} with error "
                      f"{np.max(est.error):.1e} > tol {tol:.0e}; raise --max-qmc-points (time grows "
                      "linearly) or accept the stated error")

    def estimate(self, e, est) -> None:
        import numpy as np
        if not np.all(np.isfinite(est.value)):
            from .errors import TPNumericalError
            raise TPNumericalError(f"an expectation in the limit is not finite ({est.value})", e.pos.line,
                                   e.pos.col, self.program.file, self.program.source)
