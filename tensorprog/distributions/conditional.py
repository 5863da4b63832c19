"""Gaussian matrices never stored: each product drawn from its law given the earlier products.

**The rule (Bolthausen's conditioning).**  Let G (m × k) have iid N(0, 1) entries.  Suppose the
products computed so far are G X = Y (forward, the columns of X in R^k) and Gᵀ U = V (backward,
the columns of U in R^m).  These constraints are linear in the Gaussian vector vec(G), so the
law of G given them is Gaussian; writing P_X = X (XᵀX)⁻¹ Xᵀ and P_X⊥ = I − P_X,

    G = Y (XᵀX)⁻¹ Xᵀ + U (UᵀU)⁻¹ Vᵀ P_X⊥ + P_U⊥ G̃ P_X⊥,     G̃ an independent copy of G,

(the first two terms are E[G | the products]: they reproduce G X = Y and Gᵀ U = V, using
Uᵀ Y = Vᵀ X; the last is the part of G the products have not seen, independent of them).  So
a new product is

    G x  = Y d + U (UᵀU)⁻¹ Vᵀ P_X⊥ x + P_U⊥ g,    d = (XᵀX)⁻¹ Xᵀ x,   g ~ N(0, ‖P_X⊥ x‖² I_m),

and Gᵀ u the same with the sides exchanged.  Drawing the products one after the other from
these conditional laws gives their joint law exactly: the law of a dense run, at any width,
not an approximation.  No m × k matrix is ever formed.

**The state.**  Orthonormal bases of the arguments on each side, with their images:
Q_X (k × a) with A = G Q_X (m × a), and Q_U (m × b) with B = Gᵀ Q_U (k × b).  Then

    G x  = A (Q_Xᵀ x) + Q_U (Bᵀ r) + P_U⊥ g,     r = P_X⊥ x = x − Q_X Q_Xᵀ x,  g ~ N(0, I_m)·‖r‖,

and, for the new basis vector q = r/‖r‖, G q = Q_U (Bᵀ q) + P_U⊥ z with z ~ N(0, I_m): appended
to Q_X and A.  r is computed by classical Gram–Schmidt run twice (enough for orthogonality to
rounding); an argument whose residual is below ``tol`` times its norm lies in the span of the
earlier ones: its product is determined (A Q_Xᵀ x), it adds no randomness and no basis
vector.  A batch of B columns (a GEMM step, or the (n, P) columns of a kernel) is conditioned
as a block: the residuals of all columns against the old basis at once, then Gram–Schmidt
among themselves, one Gaussian draw per new direction — the same law as one column after
the other.  A product costs O((m + k)·(a + b)) per column, the state is (m + k)·(a + b)
numbers.

**Laws.**  W = diag(S)·G: ``normal`` has S = √(var/k) on every row, ``mvt`` one iid scale per row
(:meth:`~.family.Family.conditional_scale`), so W x = S ⊙ (G x) and Wᵀ u = Gᵀ (S ⊙ u): the
Gaussian factor is conditioned, exactly.  ``orthogonal`` matrices are conditioned by the Haar
analogue (:class:`ConditionalHaar`: known on the span of the earlier arguments, a uniformly
random isometry on its complement).  iid non-Gaussian entries (uniform, rademacher, ...) are not
Gaussian given linear constraints: they are refused (``conditionable`` false).

The class is written with the array-API namespace ``xp``: numpy, or a backend's (torch, jax,
cupy) on its device, where memory is O(n·k) as well.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from .spec import DistSpec

__all__ = ["Columns", "ConditionalHaar", "ConditionalMatrix", "conditional_matrix", "ConditioningError", "span_tol", "state_entries", "max_products"]


class ConditioningError(ValueError):
    """A conditional matrix asked for more products than its state may hold."""


def span_tol(dtype) -> float:
    """The relative residual below which an argument is in the span of the earlier ones:
    1e-10 in float64, 1e-5 in float32 (well above rounding, far below any real innovation)."""
    return 1e-10 if np.dtype(dtype).itemsize >= 8 else 1e-5


def state_entries(rows: int, cols: int, products: int, haar: bool = False) -> int:
    """Numbers stored by a rows × cols conditional matrix after ``products`` new directions
    (on either side): (rows + cols) per direction; 2·max(rows, cols) for a Haar one."""
    per = 2 * max(int(rows), int(cols)) if haar else int(rows) + int(cols)
    return per * int(products)


def max_products(rows: int, cols: int, haar: bool = False) -> int:
    """The most directions a conditional matrix holds before its state outgrows the dense
    matrix: state_entries ≤ rows·cols (about n/2 for a square one)."""
    return max(1, int(rows) * int(cols) // (state_entries(rows, cols, 1, haar)))


class Columns:
    """A d × k array grown by appending columns: a buffer (``reserve`` columns at first) doubled
    when full, written in place (numpy, torch, cupy), so a product costs no copy of the state;
    concatenated instead where arrays are immutable (jax)."""

    def __init__(self, xp, d: int, kw: dict, reserve: int = 0) -> None:
        self.xp, self.kw, self.k, self.inplace = xp, kw, 0, True
        self.buf = xp.zeros((int(d), max(0, int(reserve))), **kw)

    @property
    def array(self):
        """The k columns (a view of the buffer)."""
        return self.buf if self.k == int(self.buf.shape[1]) else self.buf[:, :self.k]

    def set(self, a) -> None:
        """Replace the columns by ``a``."""
        self.buf, self.k = a, int(a.shape[1])

    def append(self, cols) -> None:
        r = int(cols.shape[1])
        if self.inplace:
            try:
                if self.k + r > int(self.buf.shape[1]):
                    grown = self.xp.zeros((int(self.buf.shape[0]), max(2 * int(self.buf.shape[1]), self.k + r)),
                                          **self.kw)
                    grown[:, :self.k] = self.array
                    self.buf = grown
                self.buf[:, self.k:self.k + r] = cols
                self.k += r
                return
            except TypeError:                            # immutable arrays (jax): concatenate
                self.inplace = False
                self.buf = self.array
        self.buf = self.xp.concat([self.buf, cols], axis=1)
        self.k += r


def orthonormalize(xp, r, norms, tol: float):
    """The new directions of the residuals r (d × B, already orthogonal to the basis):
    (Qn (d × s) orthonormal, T (s × B) with r = Qn T), by Gram–Schmidt twice column by column;
    a column whose residual is below ``tol`` times ``norms`` adds no direction.  (None, None)
    if there is none."""
    cols: list = []
    coefs: list = []
    for j in range(int(r.shape[1])):
        v = r[:, j]
        t = None
        if cols:
            qn = xp.stack(cols, axis=1)
            t = qn.T @ v
            v = v - qn @ t
            t2 = qn.T @ v
            v = v - qn @ t2
            t = t + t2
        nv = xp.sqrt(xp.sum(v * v))
        keep = bool(nv > tol * norms[j])
        parts = ([t] if t is not None else []) + ([xp.reshape(nv, (1,))] if keep else [])
        coefs.append(parts)
        if keep:
            cols.append(v / nv)
    if not cols:
        return None, None
    s = len(cols)
    zero = xp.zeros((s,), dtype=r.dtype, device=getattr(r, "device", None)) if s else None
    columns = []
    for parts in coefs:
        col = xp.concat(parts) if parts else zero[:0]
        columns.append(xp.concat([col, zero[:s - int(col.shape[0])]]))
    return xp.stack(cols, axis=1), xp.stack(columns, axis=1)


def residual(xp, q, x):
    """(r, c): x = q c + r with r ⟂ the orthonormal columns of q, by classical Gram–Schmidt run
    twice (c None when q has no column)."""
    if not q.shape[1]:
        return x, None
    c = q.T @ x
    r = x - _combine(q, c)
    c2 = q.T @ r
    return r - _combine(q, c2), c + c2


def _combine(basis, coef):
    """basis @ coef for a tall basis (d × a) and a small coef (a × B), computed as (coefᵀ basisᵀ)ᵀ:
    the same numbers, but multithreaded BLAS splits the long side well this way round (the
    direct form was 10-50× slower for a ≤ 4 on a loaded machine)."""
    return (coef.T @ basis.T).T


class ConditionalMatrix:
    """A rows × cols matrix W = diag(S)·G, G iid N(0, 1), whose products are drawn from their law
    given the earlier ones (the module docstring).  ``normal(shape)``: iid N(0, 1) draws of the
    matrix's stream, in the run's dtype; ``scale``: S (a float, or a (rows,) array); ``xp``,
    ``dtype``, ``device``: the array namespace and where the state lives; ``tol``: see
    :func:`span_tol`; ``capacity``: the most directions held (:func:`max_products`); ``reserve``:
    the directions expected on each side (forward, backward), allocated at once.
    ``matmul(x, transposed)`` is W @ x or Wᵀ @ x, as for a blocked matrix."""

    def __init__(self, normal: Callable[[tuple[int, ...]], object], scale, rows: int, cols: int, xp,
                 dtype, device=None, tol: float = 1e-10, capacity: int | None = None,
                 reserve: tuple[int, int] = (0, 0)) -> None:
        self.normal, self.xp, self.tol = normal, xp, float(tol)
        self.rows, self.cols = int(rows), int(cols)
        self.capacity = max_products(rows, cols) if capacity is None else int(capacity)
        self.scale = (scale if isinstance(scale, (int, float))
                      else xp.reshape(xp.astype(scale, dtype), (self.rows, 1)))   # computed in float64
        self.kw = kw = {"dtype": dtype} if device is None else {"dtype": dtype, "device": device}
        fwd, bwd = (min(int(r), self.capacity) for r in reserve)
        self.x_side = (Columns(xp, self.cols, kw, fwd), Columns(xp, self.rows, kw, fwd))  # Q_X, A = G Q_X
        self.u_side = (Columns(xp, self.rows, kw, bwd), Columns(xp, self.cols, kw, bwd))  # Q_U, B = Gᵀ Q_U
        self.on_rows: Callable[[int], None] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def directions(self) -> int:
        """Basis vectors held, both sides together."""
        return self.x_side[0].k + self.u_side[0].k

    def set_state(self, qx, ax, qu, bu) -> None:
        """Set the state: orthonormal Q_X with A = G Q_X and Q_U with B = Gᵀ Q_U (for tests)."""
        for cols, a in zip(self.x_side + self.u_side, (qx, ax, qu, bu)):
            cols.set(a)

    def matmul(self, x, transposed: bool = False):
        """W @ x (x of shape (cols,) or (cols, B)), or Wᵀ @ x (x of shape (rows,) or (rows, B))."""
        xp = self.xp
        inner = self.rows if transposed else self.cols
        if x.shape[0] != inner:
            raise ValueError(f"shape mismatch: {'Wᵀ' if transposed else 'W'} is "
                             f"{(self.cols, self.rows) if transposed else self.shape}, x is {tuple(x.shape)}")
        flat = x.ndim == 1
        x2 = xp.reshape(x, (inner, 1)) if flat else x
        if transposed:                                   # Wᵀ u = Gᵀ (S u)
            y = self._condition(x2 * self.scale, self.u_side, self.x_side)
        else:                                            # W x = S (G x)
            y = self._condition(x2, self.x_side, self.u_side)
            y = y * self.scale
        return xp.reshape(y, (y.shape[0],)) if flat else y

    def _condition(self, x, side, other):
        """G x for the columns of x given the state, which it updates: ``side`` = (q, a), the basis
        on x's side and its image a = G q; ``other`` = (qo, bo), the basis on the other side and
        bo = Gᵀ qo (for Gᵀ u the roles of G and Gᵀ are exchanged)."""
        xp = self.xp
        q, a, qo, bo = side[0].array, side[1].array, other[0].array, other[1].array
        norms = xp.sqrt(xp.sum(x * x, axis=0))
        r, c = residual(xp, q, x)
        qn, t = orthonormalize(xp, r, norms, self.tol)
        y = _combine(a, c) if c is not None else None
        if qn is None:
            return y if y is not None else xp.zeros((int(a.shape[0]), int(x.shape[1])), **self.kw)
        if q.shape[1] + qo.shape[1] + qn.shape[1] > self.capacity:
            raise ConditioningError(
                f"{q.shape[1] + qo.shape[1] + qn.shape[1]} independent products with one "
                f"{self.rows} × {self.cols} matrix: the conditioned state would outgrow the dense matrix "
                f"(at most {self.capacity})")
        an = self.normal((int(a.shape[0]), int(qn.shape[1])))
        if qo.shape[1]:                                  # G qn = Q_U Bᵀ qn + P_U⊥ z
            an = _combine(qo, bo.T @ qn) + (an - _combine(qo, qo.T @ an))
        new = _combine(an, t)
        side[0].append(qn)
        side[1].append(an)
        return new if y is None else y + new


class ConditionalHaar:
    """A rows × cols ``orthogonal`` matrix, never stored: M = c·(a block of a Haar orthogonal
    N × N matrix O), N = max(rows, cols), with its products drawn given the earlier ones.

    O is known on the span S of the vectors it has been applied to (and of the images of the
    vectors Oᵀ has been applied to): an isometry of S onto T = O S.  By the invariance of the Haar
    law, given that, O on S⊥ is a uniformly random isometry onto T⊥.  So, with orthonormal bases
    Q_S and Q_T = O Q_S,

        O x  = Q_T (Q_Sᵀ x) + (a uniformly random orthonormal frame F of T⊥) · T_r,

    where r = P_S⊥ x = Q_n T_r (Gram–Schmidt); F is the Gram–Schmidt frame of P_T⊥ Z, Z Gaussian,
    and (Q_n, F) joins (Q_S, Q_T).  Oᵀ u is the same with S and T exchanged.  Exact in law, O(N·k)
    per product.  The rectangular shapes of :class:`~.families.Orthogonal` are blocks of O:
    wide (rows ≤ cols, N = cols) M = √var·O[:rows, :], so M x = √var (O x)[:rows] and
    Mᵀ u = √var Oᵀ (u padded with zeros); tall (N = rows) M = √(var·rows/cols)·O[:, :cols],
    so M x = c·O (x padded) and Mᵀ u = c·(Oᵀ u)[:cols].  Computing the whole of O x conditions
    on more than the program sees, which keeps the law of what it sees exact."""

    def __init__(self, normal: Callable[[tuple[int, ...]], object], var: float, rows: int, cols: int, xp,
                 dtype, device=None, tol: float = 1e-10, capacity: int | None = None,
                 reserve: tuple[int, int] = (0, 0)) -> None:
        self.normal, self.xp, self.tol = normal, xp, float(tol)
        self.rows, self.cols = int(rows), int(cols)
        self.big = max(self.rows, self.cols)
        self.scale = (var if self.rows <= self.cols else var * self.rows / self.cols) ** 0.5
        self.capacity = max_products(rows, cols, haar=True) if capacity is None else int(capacity)
        self.kw = kw = {"dtype": dtype} if device is None else {"dtype": dtype, "device": device}
        k = min(sum(int(r) for r in reserve), self.capacity)
        self.s_side = (Columns(xp, self.big, kw, k), Columns(xp, self.big, kw, k))   # Q_S, Q_T = O Q_S
        self.on_rows: Callable[[int], None] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def directions(self) -> int:
        return self.s_side[0].k

    def _pad(self, x):
        if x.shape[0] == self.big:
            return x
        zeros = self.xp.zeros((self.big - int(x.shape[0]), int(x.shape[1])), **self.kw)
        return self.xp.concat([x, zeros], axis=0)

    def matmul(self, x, transposed: bool = False):
        """M @ x, or Mᵀ @ x, as :meth:`ConditionalMatrix.matmul`."""
        xp = self.xp
        inner, outer = (self.rows, self.cols) if transposed else (self.cols, self.rows)
        if x.shape[0] != inner:
            raise ValueError(f"shape mismatch: {'Wᵀ' if transposed else 'W'} is "
                             f"{(self.cols, self.rows) if transposed else self.shape}, x is {tuple(x.shape)}")
        flat = x.ndim == 1
        x2 = self._pad(xp.reshape(x, (inner, 1)) if flat else x)
        q_s, q_t = self.s_side
        y = self._condition(x2, q_t, q_s) if transposed else self._condition(x2, q_s, q_t)
        y = y[:outer, :] * self.scale
        return xp.reshape(y, (outer,)) if flat else y

    def _condition(self, x, src: Columns, dst: Columns):
        """O x (or Oᵀ x with ``src``, ``dst`` = Q_T, Q_S), updating the bases."""
        xp = self.xp
        norms = xp.sqrt(xp.sum(x * x, axis=0))
        r, c = residual(xp, src.array, x)
        qn, t = orthonormalize(xp, r, norms, self.tol)
        y = _combine(dst.array, c) if c is not None else None
        if qn is None:
            return y if y is not None else xp.zeros((self.big, int(x.shape[1])), **self.kw)
        if src.k + int(qn.shape[1]) > self.capacity:
            raise ConditioningError(
                f"{src.k + int(qn.shape[1])} independent products with one {self.rows} × {self.cols} "
                f"orthogonal matrix: the conditioned state would outgrow the dense matrix (at most {self.capacity})")
        z = self.normal((self.big, int(qn.shape[1])))
        z, _ = residual(xp, dst.array, z)                # P_T⊥ Z, then its Gram–Schmidt frame: Haar in T⊥
        frame, _ = orthonormalize(xp, z, xp.sqrt(xp.sum(z * z, axis=0)), self.tol)
        if frame is None or frame.shape[1] != qn.shape[1]:     # probability 0 below capacity
            raise ConditioningError("a Gaussian draw fell into the span of the earlier products")
        src.append(qn)
        dst.append(frame)
        new = _combine(frame, t)
        return new if y is None else y + new


def conditional_matrix(spec: DistSpec, rows: int, cols: int, normal: Callable[[tuple[int, ...]], object],
                       gamma: Callable[[float, tuple[int, ...]], object], xp, dtype, device=None,
                       tol: float = 1e-10, reserve: tuple[int, int] = (0, 0)):
    """The conditional rows × cols matrix of law ``spec``: a :class:`ConditionalHaar` for a Haar
    family (orthogonal), else a :class:`ConditionalMatrix` W = diag(S)·G with S drawn now by the
    family (:meth:`~.family.Family.conditional_scale`, with ``gamma``).  ``normal(shape)`` and
    ``gamma(alpha, shape)`` are the matrix's stream; a family that cannot be conditioned raises
    ValueError."""
    law = spec.law
    if not law.conditionable:
        raise ValueError(f"{spec.family} matrices cannot be conditioned exactly on their earlier products")
    if law.haar:
        return ConditionalHaar(normal, spec.var, rows, cols, xp, dtype, device, tol, reserve=reserve)
    scale = law.conditional_scale(gamma, xp, spec.var, spec.df, rows, cols)
    return ConditionalMatrix(normal, scale, rows, cols, xp, dtype, device, tol, reserve=reserve)
