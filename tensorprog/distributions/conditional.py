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
Gaussian factor is conditioned, exactly.  iid non-Gaussian entries (uniform, rademacher, ...)
are not Gaussian given linear constraints: they are refused (``conditionable`` false).

The class is written with the array-API namespace ``xp``: numpy, or a backend's (torch, jax,
cupy) on its device, where memory is O(n·k) as well.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

__all__ = ["ConditionalMatrix", "ConditioningError", "span_tol", "state_entries", "max_products"]


class ConditioningError(ValueError):
    """A conditional matrix asked for more products than its state may hold."""


def span_tol(dtype) -> float:
    """The relative residual below which an argument is in the span of the earlier ones:
    1e-10 in float64, 1e-5 in float32 (well above rounding, far below any real innovation)."""
    return 1e-10 if np.dtype(dtype).itemsize >= 8 else 1e-5


def state_entries(rows: int, cols: int, products: int) -> int:
    """Numbers stored by a rows × cols conditional matrix after ``products`` new directions
    (on either side): (rows + cols) per direction."""
    return (int(rows) + int(cols)) * int(products)


def max_products(rows: int, cols: int) -> int:
    """The most directions a conditional matrix holds before its state outgrows the dense
    matrix: (rows + cols)·k ≤ rows·cols (about n/2 for a square one)."""
    return max(1, int(rows) * int(cols) // (int(rows) + int(cols)))


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
    :func:`span_tol`; ``capacity``: the most directions held (:func:`max_products`).
    ``matmul(x, transposed)`` is W @ x or Wᵀ @ x, as for a blocked matrix."""

    def __init__(self, normal: Callable[[tuple[int, ...]], object], scale, rows: int, cols: int, xp,
                 dtype, device=None, tol: float = 1e-10, capacity: int | None = None) -> None:
        self.normal, self.xp, self.tol = normal, xp, float(tol)
        self.rows, self.cols = int(rows), int(cols)
        self.capacity = max_products(rows, cols) if capacity is None else int(capacity)
        self.scale = scale if isinstance(scale, (int, float)) else xp.reshape(scale, (self.rows, 1))
        self.kw = kw = {"dtype": dtype} if device is None else {"dtype": dtype, "device": device}
        self.qx, self.ax = xp.zeros((self.cols, 0), **kw), xp.zeros((self.rows, 0), **kw)  # A = G Q_X
        self.qu, self.bu = xp.zeros((self.rows, 0), **kw), xp.zeros((self.cols, 0), **kw)  # B = Gᵀ Q_U
        self.on_rows: Callable[[int], None] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.rows, self.cols)

    @property
    def directions(self) -> int:
        """Basis vectors held, both sides together."""
        return int(self.qx.shape[1]) + int(self.qu.shape[1])

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
            y, self.qu, self.bu = self._condition(x2 * self.scale, self.qu, self.bu, self.qx, self.ax)
        else:                                            # W x = S (G x)
            y, self.qx, self.ax = self._condition(x2, self.qx, self.ax, self.qu, self.bu)
            y = y * self.scale
        return xp.reshape(y, (y.shape[0],)) if flat else y

    def _condition(self, x, q, a, qo, bo):
        """G x for the columns of x given the state: ``q`` (the basis on x's side), ``a`` = G q,
        ``qo`` (the basis on the other side), ``bo`` = Gᵀ qo.  Returns (G x, q, a) updated."""
        xp = self.xp
        norms = xp.sqrt(xp.sum(x * x, axis=0))
        if q.shape[1]:
            c = q.T @ x                                  # classical Gram–Schmidt, twice
            r = x - _combine(q, c)
            c2 = q.T @ r
            r = r - _combine(q, c2)
            c = c + c2
        else:
            r, c = x, None
        qn, t = self._orthonormalize(r, norms)
        y = _combine(a, c) if c is not None else None
        if qn is None:
            return (y if y is not None else xp.zeros((int(a.shape[0]), int(x.shape[1])), **self.kw)), q, a
        if q.shape[1] + qo.shape[1] + qn.shape[1] > self.capacity:
            raise ConditioningError(
                f"{q.shape[1] + qo.shape[1] + qn.shape[1]} independent products with one "
                f"{self.rows} × {self.cols} matrix: the conditioned state would outgrow the dense matrix "
                f"(at most {self.capacity})")
        an = self.normal((int(a.shape[0]), int(qn.shape[1])))
        if qo.shape[1]:                                  # G qn = Q_U Bᵀ qn + P_U⊥ z
            an = _combine(qo, bo.T @ qn) + (an - _combine(qo, qo.T @ an))
        new = _combine(an, t)
        return (new if y is None else y + new), xp.concat([q, qn], axis=1), xp.concat([a, an], axis=1)

    def _orthonormalize(self, r, norms):
        """The new directions of the residuals r (d × B, already orthogonal to the basis):
        (Qn (d × s) orthonormal, T (s × B) with r = Qn T), by Gram–Schmidt twice column by column;
        a column whose residual is below ``tol`` times ``norms`` adds no direction.  (None, None)
        if there is none."""
        xp = self.xp
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
            keep = bool(nv > self.tol * norms[j])
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
