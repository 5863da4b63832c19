"""The compile and engine budget: one frozen dataclass, its defaults defined here only.

Every expectation the compiler asks for is computed within a :class:`Budget`; each limit an
expectation reaches is reported back on its ``Estimate`` (``budget``: the names of the fields
reached) and becomes a ``[budget]`` warning naming the option that raises it.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..arguments import positive_finite, whole


@dataclass(frozen=True)
class Budget:
    """What one expectation may cost.

    * ``tol``: target error of a numerical expectation (absolute; relative for values above 1);
    * ``max_qmc_points``: quasi-Monte Carlo points per expectation (time grows linearly);
    * ``max_quad_points``: the largest tensor quadrature grid (beyond it, QMC);
    * ``max_expand_size``: the largest symbolic expansion tried for a closed form (beyond it,
      numerics);
    * ``seed``: the seed of the randomized QMC rules (a limit is reproducible for a seed);
    * ``series_terms``: the most terms of the Mehler series for E f(x)g(y) over two Gaussians
      (:mod:`.series`; the fewest that meet ``tol`` are used; 0 turns the series off).
    """
    tol: float = 1e-10
    max_qmc_points: int = 2 ** 20
    max_quad_points: int = 2_000_000
    max_expand_size: int = 100_000
    seed: int = 0
    series_terms: int = 1024

    def __post_init__(self) -> None:
        """``tol`` positive and finite, each ``max_*`` a positive integer, ``seed`` a non-negative
        integer (an :class:`~tensorprog.arguments.ArgumentError`, a ValueError, naming the field and
        its ``tpc compile`` option otherwise).  NaN is refused: it compares false with every error,
        so it would silence the [budget] warnings."""
        positive_finite(self.tol, "tol (--tol)")
        for name in ("max_qmc_points", "max_quad_points", "max_expand_size"):
            whole(getattr(self, name), f"{name} (--{name.replace('_', '-')})", 1)
        whole(self.seed, "seed", 0)
        whole(self.series_terms, "series_terms", 0)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in order (``tpc compile --max-qmc-points`` ... and the API keywords)."""
        return tuple(f.name for f in fields(cls))


#: the defaults, for modules that need one number (e.g. a quadrature grid size)
DEFAULT = Budget()
