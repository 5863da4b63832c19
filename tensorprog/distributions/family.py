"""The two kinds of objects that hold everything about one law.

* :class:`ScalarLaw` — a centred, symmetric scalar law parametrised by its variance
  ``var`` (and ``df`` for the heavy-tailed ones), as the expectation engine sees an
  independent base variable: exact absolute moments E|u|^n and the density (sympy), and
  for the numerics the scale s, the density p(t), the inverse CDF and the split points
  of a piecewise Gauss–Legendre rule.
* :class:`Family` — a distribution family of the language (``normal``, ``student_t``,
  ...): what it applies to (vectors / matrices), the validation of its parameters,
  dense sampling of a matrix or of vectors, blocked row sampling (or "cannot be
  blocked"), its limit law for the compiler and the hypotheses of the Master Theorem it
  breaks.  A family whose entries are iid is its own entry law (it is a ScalarLaw).

The concrete families and the registries are in :mod:`.families`.  numpy only at import:
sympy and scipy are imported inside the methods that need them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from .checks import DEFAULT_DF, DistributionError, check_df, check_var, fmt, scalar

if TYPE_CHECKING:
    import sympy as sp
    from .sample import Draws

#: the message of a df given to a family without one
DF_ONLY = "df is only for student_t and mvt"

Params = tuple[float, "float | None", "tuple[float, ...] | None", "tuple[tuple[float, ...], ...] | None"]


def random_bits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A uint8 array of fair coin flips in {0, 1} (1 byte per entry, from packed random bits)."""
    count = math.prod(shape)
    packed = rng.integers(0, 256, size=(count + 7) // 8, dtype=np.uint8)
    return np.unpackbits(packed, count=count).reshape(shape)


def random_signs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """An int8 array of fair signs in {−1, 1}: 1 − 2·(a coin flip of :func:`random_bits`)."""
    signs = random_bits(rng, shape).view(np.int8)
    signs *= -2
    signs += 1
    return signs


def sign_bytes(rows: int, cols: int) -> int:
    """The extra memory of drawing a rows × cols matrix of signs: a byte per entry plus the packed bits."""
    n = int(rows) * int(cols)
    return n + n // 8


# ================================================================================ scalar laws
class ScalarLaw:
    """A centred symmetric scalar law of variance ``var`` (the engine's independent base variable).

    Methods take the parameters explicitly: ``v`` / ``nu`` are sympy numbers (or
    expressions) for the exact maths, ``scale`` / ``df`` floats for the numerics, where
    ``scale`` is :meth:`scale` of the variance.  The base class raises for what a law
    does not have (e.g. Rademacher has no density).
    """

    name: str = ""
    #: a ``df`` parameter: E|u|^n is finite for n < df only
    has_df: bool = False
    #: a discrete law (summed over its atoms, never integrated)
    discrete: bool = False
    #: the density has a kink at 0 (kept as a split point of every quadrature rule)
    zero_kink: bool = False
    #: the independent base variable is one more Gaussian (the engine joins it to the Gaussians)
    gaussian: bool = False

    def __repr__(self) -> str:
        return f"<law {self.name}>"

    # ---- exact (sympy)
    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """E|u|^n for n ≥ 1 (sp.oo if infinite)."""
        raise NotImplementedError(f"{self.name} has no scalar law")

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        """The density at t, as a sympy expression (for a Dirac mass on the variable)."""
        raise ValueError(f"{self.name} has no density")

    # ---- numerics (numpy / scipy)
    def scale(self, var: float, df: float | None) -> float:
        """The scale s of the law (s = √var unless the law says otherwise)."""
        return float(np.sqrt(var))

    def kinks(self) -> np.ndarray:
        """Points where the density is not smooth (inside the support)."""
        return np.array([0.0]) if self.zero_kink else np.array([])

    def edges(self, scale: float) -> np.ndarray:
        """Points where the density jumps (the ends of a bounded support), none by default."""
        return np.array([])

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        """Positive split points of the quadrature, the last one ending the truncated support."""
        raise NotImplementedError(f"{self.name} has no quadrature splits")

    def anchors(self, scale: float, df: float | None, growth: float, alt: bool = False) -> np.ndarray:
        """Sorted split points ±:meth:`splits` (and 0), symmetric; ``alt`` interleaves them
        (geometric means of neighbours, same ends) for an independent second rule."""
        pos = self.splits(scale, df, growth)
        mid = [0.0] if not alt or self.zero_kink else []
        if alt:
            pos = np.concatenate([pos[:1] / 2, np.sqrt(pos[:-2] * pos[1:-1]), pos[-1:]])
        return np.concatenate([-pos[::-1], mid, pos])

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        """The density at the points t."""
        raise NotImplementedError(f"{self.name} has no density")

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        """Inverse CDF, for uniforms u in (0, 1)."""
        raise NotImplementedError(f"{self.name} has no inverse CDF")

    def atoms(self, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """(values, probabilities) of a discrete law."""
        raise NotImplementedError(f"{self.name} is not discrete")


# ================================================================================ families
class Family(ScalarLaw):
    """A distribution family of the language: everything about one law.

    Scaling conventions: a (rows, cols) matrix has entries of mean 0 and variance
    ``var / cols``; a vector has coordinates of variance ``var``.
    """

    #: usable for vectors (else matrices only)
    vectors: bool = True
    #: accepts ``mean`` and ``cov`` for vectors (a joint Gaussian group)
    joint: bool = False
    #: the entries of a matrix are iid (uniform, laplace...); orthogonal and mvt are not
    iid_entries: bool = True
    #: a matrix can be regenerated row by row from a per-row stream (see :mod:`.blocked`)
    blockable: bool = True
    #: the law of the row scale S of a matrix W = diag(S)·G with G iid Gaussian (mvt), else None
    row_scale: ScalarLaw | None = None
    #: Haar-distributed on the orthogonal group (orthogonal): the limit compiler conditions its
    #: products on the earlier ones (limit/haar.py) instead of the iid Ẑ + Ż rule.  mvt is not iid
    #: either, but the compiler writes it exactly as diag(S)·G with G iid Gaussian
    haar: bool = False
    #: the law of a product given the earlier ones is known exactly (:mod:`.conditional`): W = diag(S)·G
    #: with G iid Gaussian (normal: S constant; mvt: iid row scales), or Haar (orthogonal)
    conditionable: bool = False

    def __repr__(self) -> str:
        return f"<family {self.name}>"

    @property
    def positional(self) -> tuple[str, ...]:
        """The parameters a call takes positionally, in order."""
        return ("df", "var") if self.has_df else ("var",)

    @property
    def keywords(self) -> tuple[str, ...]:
        """The keyword parameters of a call."""
        return ("df", "var") if self.has_df else ("var", "mean", "cov") if self.joint else ("var",)

    @property
    def non_gaussian_iid(self) -> bool:
        """iid non-Gaussian entries: covered by the non-Gaussian Master Theorem (smooth φ only)."""
        return self.iid_entries and not self.gaussian

    # ---- validation
    def check(self, var: float, df: float | None, mean: object, cov: object) -> None:
        """The cheap checks of a :class:`~.spec.DistSpec` built directly (make_spec does more)."""
        if not (math.isfinite(var) and var > 0):
            raise DistributionError(f"{self.name}: var must be a finite number > 0 (got {var!r})")
        if self.has_df:
            if df is None:
                raise DistributionError(f"{self.name}: df is required")
            if not (math.isfinite(df) and df > 2):
                raise DistributionError(f"{self.name}: df must be > 2 (got {fmt(df)})")
        elif df is not None:
            raise DistributionError(f"{self.name}: {DF_ONLY}")
        if (mean is not None or cov is not None) and not self.joint:
            raise DistributionError(f"{self.name}: mean and cov are only for normal vectors")

    def parse(self, args: Sequence[object], kwargs: Mapping[str, object], *, for_matrix: bool,
              n_vectors: int = 1) -> Params:
        """(var, df, mean, cov) of a call ``name(*args, **kwargs)``, validated (see :func:`~.spec.make_spec`)."""
        name = self.name
        if not for_matrix and not self.vectors:
            raise DistributionError(f"{name}: only for matrices, not for vectors")
        if not for_matrix and (not isinstance(n_vectors, int) or n_vectors < 1):
            raise DistributionError(f"{name}: the number of vectors must be >= 1 (got {n_vectors!r})")
        params = self._bind(args, kwargs)
        if for_matrix:
            for key in ("mean", "cov"):
                if key in params:
                    raise DistributionError(f"{name}: {key} is only allowed for vectors, not for matrices")
        var = check_var(name, scalar(name, "var", params["var"])) if "var" in params else 1.0
        df = None
        if self.has_df:
            if "df" not in params:
                raise DistributionError(f"{name}: df is required, e.g. {name}(6) or {name}(df=6)")
            df = check_df(name, scalar(name, "df", params["df"]))
        mean, cov = self.joint_params(params, n_vectors)
        return var, df, mean, cov

    def _bind(self, args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, object]:
        """Positional and keyword arguments by parameter name, or an error."""
        name, positional = self.name, self.positional
        if len(args) > len(positional):
            names = " and ".join(positional)
            raise DistributionError(
                f"{name}: takes at most {len(positional)} positional argument"
                f"{'s' if len(positional) > 1 else ''} ({names}), got {len(args)}")
        params: dict[str, object] = dict(zip(positional, args))
        for key, value in kwargs.items():
            if key not in self.keywords:
                if key in ("mean", "cov"):
                    raise DistributionError(f"{name}: {key} is only allowed with normal (for vectors)")
                if key == "df":
                    raise DistributionError(f"{name}: {DF_ONLY}")
                allowed = ", ".join(self.keywords)
                raise DistributionError(f"{name}: unknown keyword {key!r} (allowed: {allowed})")
            if key in params:
                raise DistributionError(f"{name}: {key} given twice (positionally and as a keyword)")
            params[key] = value
        return params

    def joint_params(self, params: Mapping[str, object], n_vectors: int) -> tuple[object, object]:
        """(mean, cov) of a vector call; only a joint family has them."""
        return None, None

    def replacement_df(self, df: object) -> float | None:
        """The df of this family when it replaces a matrix's (``--matrix-dist``): ``df`` if given,
        else :data:`~.checks.DEFAULT_DF` for a family with df; an error for one without."""
        if df is not None:
            raise DistributionError(f"{self.name}: {DF_ONLY}")
        return None

    # ---- dense sampling
    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """iid entries of mean 0 and variance ``entry_var``."""
        raise DistributionError(f"{self.name}: not an iid family")

    def sample_matrix(self, draws: Draws, var: float, df: float | None, rows: int, cols: int) -> np.ndarray:
        """A (rows, cols) matrix with entries of mean 0 and variance var / cols (iid by default)."""
        return self.sample_entries(draws, var / cols, df, (int(rows), int(cols)))

    def sample_vectors(self, draws: Draws, var: float, df: float | None, cov: object,
                       k: int, n: int) -> np.ndarray:
        """k independent vectors of n iid coordinates of variance var, shape (k, n)."""
        return self.sample_entries(draws, var, df, (int(k), int(n)))

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        """Bytes :meth:`sample_matrix` allocates beyond the result (and a fixed slack)."""
        return 0

    # ---- blocked sampling
    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        """One row of a blocked matrix into ``out`` (float64), from the row's own stream ``gen``."""
        raise ValueError(f"{self.name} matrices cannot be generated block by block")

    # ---- conditional sampling (W = diag(S)·G, G iid N(0, 1))
    def conditional_scale(self, gamma, xp, var: float, df: float | None, rows: int, cols: int):
        """The row scale S of W = diag(S)·G: a float (the same for every row) or a (rows,) array
        of ``xp``, drawn with ``gamma(alpha, shape)`` (standard gamma draws); only for a
        :attr:`conditionable` family (conditioning is exact in law for Gaussian G only)."""
        raise ValueError(f"{self.name} matrices are not Gaussian given a row scale: they cannot be "
                         "conditioned exactly on their earlier products")

    # ---- hypotheses of the Master Theorem
    def moment_order(self, df: float | None) -> float:
        """The order below which the moments are finite (inf: all moments)."""
        return float(df) if self.has_df else math.inf

    def exp_moment_threshold(self, var: float) -> float | None:
        """t₀ with E exp(t|X|) = ∞ for t ≥ t₀ (an initial vector of variance var); None: all finite."""
        return None

    def moments_note(self, df: float | None) -> str | None:
        """A short note on the missing moments (for the heavy-tail explanation of infinite values)."""
        return f"{self.name}(df={df:g}) has moments of order < {df:g} only" if self.has_df else None

    def moments_warning(self, df: float | None) -> str | None:
        """The warning [all moments] of a heavy-tailed law, else None."""
        if not self.has_df:
            return None
        return (f"{self.name}(df={df:g}) has finite moments only of order < {df:g}; "
                "the Master Theorem assumes all moments")

    def exp_moment_reason(self, threshold: float) -> str:
        """Why E exp(t|X|) is infinite from ``threshold`` on (the end of the [exponential moments] warning)."""
        return f"E[exp(t·|X|)] = ∞ for t ≥ √(2/var) = {threshold:.4g}"

    def exp_moment_warning(self, what: str, vector: str, rate: float, threshold: float) -> str:
        """The warning [exponential moments]: ``what`` grows like exp(rate·|vector|), rate ≥ threshold."""
        return (f"{what} grows like exp(t·|{vector}|) (t ≤ {rate:.4g}) in the {self.name} vector {vector}; "
                f"{self.exp_moment_reason(threshold)}: the limit is infinite unless that growth cancels, "
                "and the value computed is not meaningful")


class HeavyTailed(Family):
    """A family with a ``df`` > 2 parameter: moments of order < df only."""

    has_df = True

    def replacement_df(self, df: object) -> float | None:
        """``df`` checked, or :data:`~.checks.DEFAULT_DF` when None."""
        return DEFAULT_DF if df is None else check_df(self.name, scalar(self.name, "df", df))
