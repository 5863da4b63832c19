"""One object per distribution family, and the registries :data:`FAMILIES` and :data:`LAWS`.

All laws are centred and rescaled to the requested variance v (of a vector coordinate,
or of a matrix entry: var / cols):

============== ==================================================================================
``normal``      N(0, v); vectors may be a joint group (``mean``, ``cov``)
``uniform``     uniform on [−A, A), A = √(3v):   E u^{2k} = v^k 3^k/(2k+1),  E|u|^n = A^n/(n+1)
``rademacher``  ±√v with probability 1/2 each:   E u^{2k} = v^k
``laplace``     density e^{−|u|/b}/(2b), b = √(v/2):   E|u|^n = n! b^n
``student_t``   σ·T_ν, σ² = v(ν−2)/ν (ν = df > 2):
                E|u|^n = σ^n ν^{n/2} Γ((n+1)/2) Γ((ν−n)/2)/(√π Γ(ν/2)) for n < ν, ∞ for n ≥ ν
``orthogonal``  (matrices) Haar orthogonal, see :class:`Orthogonal`
``mvt``         (matrices) rows iid multivariate Student-t: W = diag(S)·G, G iid N(0, v),
                S² = (ν−2)/χ²_ν one per row; rotation invariant, entries uncorrelated, not independent
============== ==================================================================================

:data:`LAWS` are the scalar laws of the expectation engine: the iid families and
``mvt_scale`` (:class:`MvtScale`, ±S with a fair sign: the row scale of an mvt matrix,
E|u|^n = (v(ν−2)/2)^{n/2} Γ((ν−n)/2)/Γ(ν/2) for n < ν, ∞ for n ≥ ν).

Dense sampling draws through a :class:`~.sample.Draws` (the generator, dtype and draw
dtype); blocked sampling draws each row from its own Philox stream, in float64.  The
order of the draws of each law is part of its definition (bit-identical samples).
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Mapping

import numpy as np

from .checks import DistributionError, check_cov, numeric_array
from .factor import cached_factor, combine, row_plan
from .family import Family, HeavyTailed, ScalarLaw, random_bits, random_signs, sign_bytes

if TYPE_CHECKING:
    import sympy as sp
    from .sample import Draws, Stream

F64 = np.dtype(np.float64)


# ================================================================================ iid families
class Normal(Family):
    """N(0, var): vectors become Gaussian base variables of the limit (jointly, with ``cov``)."""

    name, gaussian, joint, conditionable = "normal", True, True, True

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """E|u|^n = (2v)^{n/2} Γ((n+1)/2)/√π."""
        import sympy as sp
        return sp.sqrt(2 * v) ** n * sp.gamma(sp.Rational(n + 1, 2)) / sp.sqrt(sp.pi)

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        """e^{−t²/(2v)}/√(2πv)."""
        import sympy as sp
        return sp.exp(-t ** 2 / (2 * v)) / sp.sqrt(2 * sp.pi * v)

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        """Tails cut at ±13 s (mass < 1e-38; ±35 s for an exponentially growing integrand)."""
        far = [18.0, 25.0, 35.0] if growth == np.inf else []
        return np.array([1.0, 2.2, 3.6, 5.2, 7.2, 9.6, 13.0] + far) * scale

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        return np.exp(-0.5 * (t / scale) ** 2) / (scale * np.sqrt(2 * np.pi))

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        from scipy import special as sps
        return scale * sps.ndtri(u)

    def joint_params(self, params: Mapping[str, object], n_vectors: int) -> tuple[object, object]:
        """``mean`` (a number or k values) and ``cov`` (k x k symmetric PSD, excluding ``var``)."""
        mean = cov = None
        if "cov" in params:
            if "var" in params:
                raise DistributionError(f"{self.name}: give either cov or var, not both")
            c = check_cov(numeric_array(self.name, "cov", params["cov"]), self.name)
            c = 0.5 * (c + c.T)  # exactly symmetric (keeps exact equalities of entries)
            if c.shape != (n_vectors, n_vectors):
                raise DistributionError(
                    f"{self.name}: cov must be {n_vectors}x{n_vectors} for {n_vectors} "
                    f"vector{'s' if n_vectors > 1 else ''} (got {c.shape[0]}x{c.shape[1]})")
            cov = tuple(tuple(float(v) for v in row) for row in c)
        if "mean" in params:
            m = numeric_array(self.name, "mean", params["mean"])
            if m.ndim == 0:
                m = np.full(n_vectors, float(m))
            if m.ndim != 1 or m.shape[0] != n_vectors:
                raise DistributionError(
                    f"{self.name}: mean must be a number or have length {n_vectors} for {n_vectors} "
                    f"vector{'s' if n_vectors > 1 else ''} (got shape {m.shape})")
            if not np.all(np.isfinite(m)):
                raise DistributionError(f"{self.name}: mean must have finite entries")
            mean = tuple(float(v) for v in m)
        return mean, cov

    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """``standard_normal`` · √v."""
        out = draws.fill("standard_normal", shape)
        out *= draws.dt.type(math.sqrt(entry_var))
        return out

    def sample_vectors(self, draws: Draws, var: float, df: float | None, cov: object,
                       k: int, n: int) -> np.ndarray:
        """With ``cov``: L z, L the pivoted-Cholesky factor (exact copies / negations stay exact)."""
        if cov is None:
            return super().sample_vectors(draws, var, df, cov, k, n)
        lf = cached_factor(cov)
        z = draws.fill("standard_normal", (lf.shape[1], int(n)))
        return combine(lf.astype(draws.dt), z)

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        gen.standard_normal(dtype=F64, out=out)
        out *= F64.type(math.sqrt(entry_var))

    def conditional_scale(self, gamma, xp, var: float, df: float | None, rows: int, cols: int) -> float:
        """S = √(var/cols) for every row: W = S·G."""
        return math.sqrt(var / cols)

    def draw_entries(self, s: Stream, entry_var: float, df: float | None, shape: tuple[int, ...]):
        """On an array backend: ``normal`` · √v."""
        out = s.normal(shape)
        out *= math.sqrt(entry_var)
        return out

    def draw_joint(self, s: Stream, cov: object, n: int):
        """On an array backend: L z, L the pivoted-Cholesky factor; rows of L that are equal,
        opposite or zero give equal, exactly negated or zero vectors (as :func:`~.factor.combine`)."""
        lf = cached_factor(cov)
        z = s.normal((lf.shape[1], int(n)))
        xp, canon, plan = s.xp, *row_plan(lf)
        base = s.asarray(lf[canon]) @ z if canon else None
        zero = xp.zeros((int(n),), dtype=s.dtype, device=getattr(z, "device", None))
        rows = [zero if j < 0 else base[j, :] if sign > 0 else -base[j, :] for j, sign in plan]
        return xp.stack(rows, axis=0)


class Uniform(Family):
    """Uniform on [−A, A), A = √(3 var)."""

    name = "uniform"

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """E|u|^n = A^n/(n+1)."""
        import sympy as sp
        return sp.sqrt(3 * v) ** n / (n + 1)

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        """Step(A − |t|)/(2A)."""
        import sympy as sp
        from ..symbolic.heads import AbsF, Step
        a = sp.sqrt(3 * v)
        return Step(a - AbsF(t)) / (2 * a)

    def scale(self, var: float, df: float | None) -> float:
        """A = √(3 var)."""
        return float(np.sqrt(3 * var))

    def edges(self, scale: float) -> np.ndarray:
        return np.array([-scale, scale])

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        return np.array([0.5, 1.0]) * scale

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        return np.where(np.abs(t) <= scale, 0.5 / scale, 0.0)

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        return scale * (2 * u - 1)

    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """``random`` in [0, 1), mapped to [−A, A)."""
        dt, b = draws.dt, math.sqrt(3.0 * entry_var)
        out = draws.fill("random", shape)  # [0, 1)
        out *= dt.type(2.0 * b)
        out -= dt.type(b)  # [-b, b)
        return out

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        b = math.sqrt(3.0 * entry_var)
        gen.random(dtype=F64, out=out)
        out *= F64.type(2.0 * b)
        out -= F64.type(b)

    def draw_entries(self, s: Stream, entry_var: float, df: float | None, shape: tuple[int, ...]):
        """On an array backend: ``uniform`` in [0, 1), mapped to [−A, A)."""
        b = math.sqrt(3.0 * entry_var)
        out = s.uniform(shape)
        out *= 2.0 * b
        out -= b
        return out


class Rademacher(Family):
    """±√var with probability 1/2 each (a discrete law)."""

    name, discrete = "rademacher", True

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """E|u|^n = v^{n/2}."""
        import sympy as sp
        return sp.sqrt(v) ** n

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        raise ValueError("a Dirac mass of a Rademacher variable has no density")

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        return np.where(u < 0.5, -scale, scale)

    def atoms(self, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """±s with probability 1/2."""
        return np.array([-scale, scale]), np.array([0.5, 0.5])

    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """Packed random bits (``integers(0, 256, uint8)``): the same numbers in every dtype."""
        dt, a = draws.dt, math.sqrt(entry_var)
        out = np.empty(shape, dtype=dt)
        np.multiply(random_bits(draws.rng, shape), dt.type(2.0 * a), out=out)  # {0, 2a}
        out -= dt.type(a)  # {-a, a}
        return out

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        return sign_bytes(rows, cols)

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        a = math.sqrt(entry_var)
        np.multiply(random_bits(gen, out.shape), F64.type(2.0 * a), out=out)
        out -= F64.type(a)

    def draw_entries(self, s: Stream, entry_var: float, df: float | None, shape: tuple[int, ...]):
        """On an array backend: ``signs`` · √v."""
        out = s.signs(shape)
        out *= math.sqrt(entry_var)
        return out


class Laplace(Family):
    """Density e^{−|u|/b}/(2b), b = √(var/2); E exp(t|u|) = ∞ for t ≥ 1/b."""

    name, zero_kink = "laplace", True

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """E|u|^n = n! b^n."""
        import sympy as sp
        return sp.factorial(n) * sp.sqrt(v / 2) ** n

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        import sympy as sp
        from ..symbolic.heads import AbsF
        b = sp.sqrt(v / 2)
        return sp.exp(-AbsF(t) / b) / (2 * b)

    def scale(self, var: float, df: float | None) -> float:
        """b = √(var/2)."""
        return float(np.sqrt(var / 2))

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        """Up to 80 b."""
        return np.array([1.0, 2.5, 5, 9, 15, 24, 36, 52, 80]) * scale

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        return np.exp(-np.abs(t) / scale) / (2 * scale)

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        d = u - 0.5
        return -scale * np.sign(d) * np.log1p(-2 * np.abs(d))

    def exp_moment_threshold(self, var: float) -> float | None:
        """1/b = √(2/var)."""
        return math.sqrt(2.0 / var)

    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """``standard_exponential``, then packed sign bits, · b."""
        out = draws.fill("standard_exponential", shape)
        signs = random_signs(draws.rng, shape)
        np.multiply(out, signs, out=out)
        del signs
        out *= draws.dt.type(math.sqrt(entry_var / 2.0))
        return out

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        return sign_bytes(rows, cols)

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        gen.standard_exponential(dtype=F64, out=out)
        out *= random_signs(gen, out.shape)
        out *= F64.type(math.sqrt(entry_var / 2.0))

    def draw_entries(self, s: Stream, entry_var: float, df: float | None, shape: tuple[int, ...]):
        """On an array backend: ``exponential``, then ``signs``, · b."""
        out = s.exponential(shape)
        out *= s.signs(shape)
        out *= math.sqrt(entry_var / 2.0)
        return out


class StudentT(HeavyTailed):
    """σ·T_ν with σ² = var(ν−2)/ν: moments of order < ν only, no exponential moment."""

    name = "student_t"

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """σ^n ν^{n/2} Γ((n+1)/2) Γ((ν−n)/2)/(√π Γ(ν/2)) for n < ν, ∞ for n ≥ ν."""
        import sympy as sp
        if n >= nu:
            return sp.oo
        sigma = sp.sqrt(v * (nu - 2) / nu)
        return (sigma ** n * nu ** sp.Rational(n, 2) * sp.gamma(sp.Rational(n + 1, 2))
                * sp.gamma((nu - n) / 2) / (sp.sqrt(sp.pi) * sp.gamma(nu / 2)))

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        import sympy as sp
        s = sp.sqrt(v * (nu - 2) / nu)
        return (sp.gamma((nu + 1) / 2) / (sp.sqrt(nu * sp.pi) * sp.gamma(nu / 2) * s)
                * (1 + (t / s) ** 2 / nu) ** (-(nu + 1) / 2))

    def scale(self, var: float, df: float | None) -> float:
        """σ = √(var(ν−2)/ν)."""
        return float(np.sqrt(var * (df - 2) / df))

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        """σ·4^k up to T^{growth−ν} ≲ 1e-16 (``growth``: the polynomial growth of the integrand)."""
        kmax = int(np.ceil(16 / max(df - growth, 0.5) * np.log(10) / np.log(4)))
        return scale * 4.0 ** np.arange(-1, min(max(kmax, 6), 40))

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        from scipy import special as sps
        nu = df
        logc = sps.gammaln((nu + 1) / 2) - sps.gammaln(nu / 2) - 0.5 * np.log(nu * np.pi)
        return np.exp(logc - (nu + 1) / 2 * np.log1p((t / scale) ** 2 / nu)) / scale

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        from scipy import special as sps
        return scale * sps.stdtrit(df, u)

    def exp_moment_threshold(self, var: float) -> float | None:
        """0: E exp(t|X|) = ∞ for every t > 0."""
        return 0.0

    def exp_moment_reason(self, threshold: float) -> str:
        return "a Student t law has no exponential moments: E[exp(t·|X|)] = ∞ for every t > 0"

    def sample_entries(self, draws: Draws, entry_var: float, df: float | None,
                       shape: tuple[int, ...]) -> np.ndarray:
        """t_df·√((df−2)/df) = z·√((df−2)/χ²_df), χ²_df = 2 Γ(df/2): ``standard_gamma`` then
        ``standard_normal``, · √v."""
        dt = draws.dt
        g = draws.fill("standard_gamma", shape, df / 2.0)
        g *= dt.type(2.0 / (df - 2.0))
        np.sqrt(g, out=g)
        out = draws.fill("standard_normal", shape)
        out /= g
        del g
        out *= dt.type(math.sqrt(entry_var))
        return out

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        return int(rows) * int(cols) * itemsize  # the chi-square array

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        g = gen.standard_gamma(df / 2.0, size=out.shape[0], dtype=F64)
        g *= F64.type(2.0 / (df - 2.0))
        np.sqrt(g, out=g)
        gen.standard_normal(dtype=F64, out=out)
        out /= g
        out *= F64.type(math.sqrt(entry_var))

    def draw_entries(self, s: Stream, entry_var: float, df: float | None, shape: tuple[int, ...]):
        """On an array backend: ``gamma(df/2)`` then ``normal``: z / √(2 Γ / (df − 2)) · √v."""
        g = s.gamma(df / 2.0, shape)
        g *= 2.0 / (df - 2.0)
        g = s.xp.sqrt(g)
        out = s.normal(shape)
        out /= g
        del g
        out *= math.sqrt(entry_var)
        return out


# ================================================================================ matrix-only families
class Orthogonal(Family):
    """Haar orthogonal (matrices only), entries of variance var / cols.

    Square: Q·√var.  Rectangular: from a Haar orthogonal N x N matrix Q, N = max(rows, cols):
    wide (rows ≤ cols) M = √var·Q[:rows, :], so M Mᵀ = var I; tall (rows > cols)
    M = √(var·rows/cols)·Q[:, :cols], so MᵀM = var (rows/cols) I.  Every row depends on the
    whole matrix: it cannot be blocked; its entries are not iid: the limit compiler has its own
    rule for its transposes (limit/haar.py).
    """

    name, vectors, iid_entries, blockable, haar = "orthogonal", False, False, False, True
    #: conditioned by the Haar rule (known on the earlier span, uniform isometry on its complement)
    conditionable = True

    def sample_matrix(self, draws: Draws, var: float, df: float | None, rows: int, cols: int) -> np.ndarray:
        """Fortran-ordered when rows > cols."""
        dt = draws.dt
        if rows <= cols:  # wide: orthonormal rows, entries of variance 1/cols
            out = haar_columns(draws, cols, rows).T
            out *= dt.type(math.sqrt(var))
        else:  # tall: orthonormal columns, entries of variance 1/rows
            out = haar_columns(draws, rows, cols)
            out *= dt.type(math.sqrt(var * rows / cols))
        return out

    def draw_matrix(self, s: Stream, var: float, df: float | None, rows: int, cols: int):
        """On an array backend: the same matrix from ``xp.linalg.qr`` of a Gaussian (signs fixed
        by diag(R)); a backend without the linalg extension is named."""
        xp = s.xp
        if not hasattr(xp, "linalg"):
            raise DistributionError(f"orthogonal matrices need a QR decomposition, which the "
                                    f"{getattr(s.backend, 'name', 'array')} backend lacks")
        big, small = max(int(rows), int(cols)), min(int(rows), int(cols))
        q, r = xp.linalg.qr(s.normal((small, big)).T)         # the Gaussian of the numpy sampler
        d = xp.linalg.diagonal(r)
        q *= xp.reshape(xp.where(d < 0, -xp.ones_like(d), xp.ones_like(d)), (1, small))
        if rows <= cols:                              # wide: orthonormal rows
            return q.T * math.sqrt(var)
        return q * math.sqrt(var * rows / cols)       # tall: orthonormal columns

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        """In-place LAPACK QR on one buffer + tau + signs + workspace (~ block size · big)."""
        big, small = max(int(rows), int(cols)), min(int(rows), int(cols))
        return (2 * small + 64 * (big + small)) * itemsize


def haar_columns(draws: Draws, big: int, small: int) -> np.ndarray:
    """big x small with orthonormal columns: the first `small` columns of a Haar
    orthogonal big x big matrix (QR of a Gaussian, signs fixed by diag(R)).

    In place via LAPACK geqrf/orgqr on a Fortran-ordered buffer: one copy of the
    matrix plus O(big * 64) workspace. Returned Fortran-ordered.
    """
    dt = draws.dt
    g = draws.fill("standard_normal", (small, big)).T  # big x small, Fortran order
    from scipy.linalg import get_lapack_funcs       # scipy only when an orthogonal matrix is drawn
    geqrf, orgqr = get_lapack_funcs(("geqrf", "orgqr"), (g,))
    lwork = max(1, int(geqrf(g, lwork=-1, overwrite_a=1)[2][0]))
    qr, tau, _, info = geqrf(g, lwork=lwork, overwrite_a=1)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"geqrf failed (info={info})")
    signs = np.where(np.diagonal(qr) < 0, dt.type(-1), dt.type(1))
    lwork = max(1, int(orgqr(qr, tau, lwork=-1, overwrite_a=1)[1][0]))
    q, _, info = orgqr(qr, tau, lwork=lwork, overwrite_a=1)
    if info != 0:  # pragma: no cover
        raise RuntimeError(f"orgqr failed (info={info})")
    q *= signs[np.newaxis, :]
    return q


class MvtScale(ScalarLaw):
    """±S with a fair random sign, S² = var(ν−2)/χ²_ν (ν = df > 2): the row scale of an mvt
    matrix, whose rows are S·g with g iid Gaussian (E u² = var)."""

    name, has_df = "mvt_scale", True

    def abs_moment(self, v: sp.Expr, nu: sp.Expr | None, n: int) -> sp.Expr:
        """(v(ν−2)/2)^{n/2} Γ((ν−n)/2)/Γ(ν/2) for n < ν, ∞ for n ≥ ν."""
        import sympy as sp
        if n >= nu:
            return sp.oo
        return (v * (nu - 2) / 2) ** sp.Rational(n, 2) * sp.gamma((nu - n) / 2) / sp.gamma(nu / 2)

    def density(self, v: sp.Expr, nu: sp.Expr | None, t: sp.Expr) -> sp.Expr:
        """½ p_S(|t|), p_S(s) = f_χ²(c/s²)·2c/s³ with c = var(ν−2); 0 at t = 0."""
        import sympy as sp
        from ..symbolic.heads import AbsF
        c = v * (nu - 2)
        x = c / t ** 2
        chi2 = x ** (nu / 2 - 1) * sp.exp(-x / 2) / (2 ** (nu / 2) * sp.gamma(nu / 2))
        return sp.Piecewise((0, sp.Eq(t, 0)), (chi2 * c / AbsF(t) ** 3, True))

    def scale(self, var: float, df: float | None) -> float:
        """s = √(var(ν−2)), S = s/√χ²_ν."""
        return float(np.sqrt(var * (df - 2)))

    def splits(self, scale: float, df: float | None, growth: float) -> np.ndarray:
        """S ≈ s/√ν; below s/(8√ν) the density is < e^{-32ν}; doubling up to S^{growth−ν} ≲ 1e-16."""
        kmax = int(np.ceil(16 / max(df - growth, 0.5) * np.log(10) / np.log(2)))
        return scale / np.sqrt(df) * 2.0 ** np.arange(-3, min(max(kmax, 6), 80))

    def pdf(self, scale: float, df: float | None, t: np.ndarray) -> np.ndarray:
        from scipy import special as sps
        a = np.abs(np.asarray(t, dtype=float))
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            x = (scale / a) ** 2
            out = np.exp(sps.xlogy(df / 2 - 1, x) - x / 2 - df / 2 * np.log(2)
                         - sps.gammaln(df / 2)) * scale ** 2 / a ** 3
        return np.where(a > 0, out, 0.0)

    def ppf(self, scale: float, df: float | None, u: np.ndarray) -> np.ndarray:
        from scipy import special as sps
        d = np.asarray(u, dtype=float) - 0.5
        with np.errstate(divide="ignore"):
            return np.sign(d) * scale / np.sqrt(sps.chdtri(df, 2 * np.abs(d)))


MVT_SCALE = MvtScale()


class Mvt(HeavyTailed):
    """Rows iid multivariate Student-t (matrices only): row = z·√((df−2)/χ²_df)·√(var/cols), one
    chi-square per row.  The compiler writes W = diag(S)·G exactly, G iid Gaussian and S the iid
    row scales (:data:`row_scale`, variance 1): so transposes are covered, but S has no
    exponential moment."""

    name, vectors, iid_entries, row_scale, conditionable = "mvt", False, False, MVT_SCALE, True

    def exp_moment_threshold(self, var: float) -> float | None:
        """0: the row scale S has no exponential moment."""
        return 0.0

    def sample_matrix(self, draws: Draws, var: float, df: float | None, rows: int, cols: int) -> np.ndarray:
        """``standard_gamma(df/2)`` (float64) for the rows, then ``standard_normal``."""
        entry_var = var / cols
        chi2 = 2.0 * draws.rng.standard_gamma(df / 2.0, size=rows)
        factor = np.sqrt((df - 2.0) / chi2 * entry_var).astype(draws.dt)
        out = draws.fill("standard_normal", (int(rows), int(cols)))
        out *= factor[:, np.newaxis]
        return out

    def extra_bytes(self, rows: int, cols: int, itemsize: int) -> int:
        return 16 * int(rows) * 8  # a few per-row vectors

    def conditional_scale(self, gamma, xp, var: float, df: float | None, rows: int, cols: int):
        """S_i = √((df − 2)/χ²_i · var/cols), χ²_i = 2·``gamma(df/2)``: one per row, as in
        :meth:`sample_matrix` (the gamma draws come first in the matrix's stream)."""
        chi2 = 2.0 * gamma(df / 2.0, (int(rows),))
        return xp.sqrt(((df - 2.0) * var / cols) / chi2)

    def sample_row(self, gen: np.random.Generator, out: np.ndarray, entry_var: float,
                   df: float | None) -> None:
        """One ``standard_gamma(df/2)`` for the row, then ``standard_normal``."""
        chi2 = 2.0 * float(gen.standard_gamma(df / 2.0))
        gen.standard_normal(dtype=F64, out=out)
        out *= F64.type(math.sqrt((df - 2.0) / chi2 * entry_var))

    def draw_matrix(self, s: Stream, var: float, df: float | None, rows: int, cols: int):
        """On an array backend: ``gamma(df/2)`` for the rows, then ``normal``."""
        xp = s.xp
        factor = xp.sqrt(((df - 2.0) * var / cols) / (2.0 * s.gamma(df / 2.0, (int(rows),))))
        out = s.normal((int(rows), int(cols)))
        out *= xp.reshape(factor, (int(rows), 1))
        return out


# ================================================================================ registries
NORMAL, UNIFORM, RADEMACHER, STUDENT_T = Normal(), Uniform(), Rademacher(), StudentT()
LAPLACE, ORTHOGONAL, MVT = Laplace(), Orthogonal(), Mvt()

#: the distribution families of the language, by name
FAMILIES: dict[str, Family] = {f.name: f for f in (NORMAL, UNIFORM, RADEMACHER, STUDENT_T, LAPLACE,
                                                   ORTHOGONAL, MVT)}
#: matrices-only families (orthogonal, mvt)
MATRIX_ONLY: frozenset[str] = frozenset(name for name, f in FAMILIES.items() if not f.vectors)
#: families usable for vectors
VECTOR_FAMILIES: frozenset[str] = frozenset(name for name, f in FAMILIES.items() if f.vectors)
#: families with a ``df`` parameter (only moments of order < df exist)
HEAVY_TAILED: frozenset[str] = frozenset(name for name, f in FAMILIES.items() if f.has_df)
#: families a blocked matrix can be drawn from (every row from its own stream)
BLOCKABLE: frozenset[str] = frozenset(name for name, f in FAMILIES.items() if f.blockable)
#: the scalar laws of the expectation engine, by name (this order in its messages)
LAWS: dict[str, ScalarLaw] = {f.name: f for f in (UNIFORM, RADEMACHER, LAPLACE, STUDENT_T, MVT_SCALE, NORMAL)}


def unknown_family(family: object) -> str:
    """The message of an unknown family name."""
    return f"unknown distribution {family!r} (known: {', '.join(sorted(FAMILIES))})"


def family_of(name: object) -> Family:
    """The family called ``name``, or a :class:`DistributionError`."""
    if not isinstance(name, str) or name not in FAMILIES:
        raise DistributionError(unknown_family(name))
    return FAMILIES[name]
