"""Distribution specs: the validated :class:`DistSpec` of a declaration's distribution call.

:func:`make_spec` checks a call (``normal(var=2)``, ``student_t(6)``,
``normal(cov=M, mean=[1, 2])``...) with the rules of its family object
(:meth:`~.family.Family.parse`) and returns a hashable spec; :func:`with_family` swaps
the family of a matrix spec (``--matrix-dist``).  Every problem is a
:class:`DistributionError` naming the family and the parameter; the caller adds
``FILE:LINE:COL``.  Sampling lives in :mod:`.sample`, the covariance factor in
:mod:`.factor`, everything about one family in :mod:`.families`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from .checks import DistributionError
from .families import FAMILIES, family_of
from .family import Family


@dataclass(frozen=True)
class DistSpec:
    """A validated distribution: the family name and its parameters (hashable).

    ``var`` is the variance of a vector coordinate, or ``fan_in`` times the
    variance of a matrix entry. ``mean`` (length k) and ``cov`` (k x k) only
    occur in vector specs of family ``normal``; with ``cov`` set, ``var`` is unused.
    :attr:`law` is the family object (validation, sampling, limit law, hypotheses).
    """

    family: str
    var: float = 1.0
    df: float | None = None
    mean: tuple[float, ...] | None = None
    cov: tuple[tuple[float, ...], ...] | None = None

    def __post_init__(self) -> None:  # cheap sanity checks; make_spec does the full job
        family_of(self.family).check(self.var, self.df, self.mean, self.cov)

    @property
    def law(self) -> Family:
        """The family object of this spec."""
        return FAMILIES[self.family]

    @property
    def n_vectors(self) -> int | None:
        """k fixed by ``cov`` or ``mean``, else None (any number of iid vectors)."""
        if self.cov is not None:
            return len(self.cov)
        if self.mean is not None:
            return len(self.mean)
        return None


def make_spec(family: str, args: Sequence[object], kwargs: Mapping[str, object], *,
              for_matrix: bool, n_vectors: int = 1) -> DistSpec:
    """Validate a distribution call and return its :class:`DistSpec`.

    ``args`` / ``kwargs`` are evaluated constants (numbers; nested lists or numpy
    arrays for ``cov`` and ``mean``). ``for_matrix`` says whether the call
    initialises a matrix; ``n_vectors`` is the number k of vectors declared
    together (``vector x, y ~ ...`` or an array ``x[1..k]``), ignored for matrices.
    """
    law = family_of(family)
    var, df, mean, cov = law.parse(args, kwargs, for_matrix=for_matrix, n_vectors=n_vectors)
    return DistSpec(law.name, var=var, df=df, mean=mean, cov=cov)


def with_family(spec: DistSpec, family: str, df: float | None = None) -> DistSpec:
    """The matrix spec ``spec`` with its family replaced (``--matrix-dist``), keeping ``var``.

    ``student_t`` / ``mvt`` get ``df`` if given (also as ``"student_t:8"``), else
    :data:`~.checks.DEFAULT_DF` (6); ``df`` for any other family is an error.
    """
    if isinstance(family, str) and ":" in family and df is None:
        family, _, text = family.partition(":")
        try:
            df = float(text)
        except ValueError:
            raise DistributionError(f"{family}: df must be a number, not {text!r} (e.g. student_t:8)") from None
    law = family_of(family)
    if spec.mean is not None or spec.cov is not None:
        raise DistributionError(f"{family}: cannot replace the family of a vector distribution with mean/cov")
    return DistSpec(law.name, var=spec.var, df=law.replacement_df(df))
