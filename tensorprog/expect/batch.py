"""E[f] for one expression and many covariance matrices at once (e.g. all pairs of a dataset).

``expect_batch(expr, gaussians, covs, *, exact=True, budget=DEFAULT)`` with ``covs`` of shape
(P, d, d) returns a :class:`BatchResult`:

1. closed form: the covariance entries that vary over the batch become symbols
   c_ij (the others keep their common value), the engine derives E[f] once as a
   function of them, and ``symbolic.evaluate.evaluate`` computes it for all P at once;
   points where the generic formula is singular (e.g. 0/0 at ρ = ±1) are redone as a
   batch of their own (or one by one);
2. otherwise, an integrand that is a product of factors over independent blocks of Gaussians
   (covariance entries 0 over the whole batch) is the product of each block's batch; over two
   Gaussians, f(x)·g(y) goes to the Mehler series (:mod:`.series`: coefficients once per
   distinct variance, a polynomial in ρ per matrix) where its bound meets the target;
3. otherwise, for a smooth integrand of d ≤ 3 Gaussians, one tensor rule in whitened
   coordinates ξ (z = L_p ξ, L_p from each Σ_p's eigendecomposition) serves the whole
   batch, refined until every entry meets the target (error as in :mod:`.quad`);
4. anything else falls back to :func:`.engine.expect` for each matrix.

The :class:`.budget.Budget` of ``expect`` applies (``tol``, ``max_qmc_points``,
``max_quad_points``, ``max_expand_size``, ``seed``); ``BatchResult.budget`` names the
limits reached over the batch and ``BatchResult.heavy_tail`` says whether a QMC part
looked heavy-tailed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Sequence

import numpy as np
import sympy as sp

from .analysis import kink_args
from .budget import DEFAULT, Budget
from .engine import expect
from .laws import Coord, as_number
from .linalg import Matrix
from .quad import ORDERS, estimate_error
from .reduce import Ctx, Engine
from .series import kinked_at_zero, numpy_function, separate, series_pairs
from ..symbolic.bivariate import Phi2
from ..symbolic.hermite import AIM, coefficients, step_for
from ..symbolic.mixed import MixedError, MixedValue, better
from ..symbolic.split_quad import split_expect
from ..symbolic.split_rule import split_step
from ..symbolic.mehler import Mean, MeanError, MehlerError, MehlerValue, T, hermite_head
from ..symbolic.evaluate import compile_exprs, evaluate
from ..symbolic.rounding import NoRoundingRule, lifted_rounding, value_and_error


class Uniform(Sequence[str]):
    """P copies of one method name, without a list of P entries (a batch has 10⁵–10⁶ items)."""

    def __init__(self, method: str, size: int) -> None:
        self.method, self.size = method, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.method] * len(range(*k.indices(self.size)))
        if not -self.size <= k < self.size:
            raise IndexError(k)
        return self.method

    def __iter__(self) -> Iterator[str]:
        return iter([self.method] * self.size)


def method_kinds(methods: Sequence[str]) -> set[str]:
    """The distinct methods of a batch (one look when they are :class:`Uniform`)."""
    return {methods.method} if isinstance(methods, Uniform) and len(methods) else set(methods)


@dataclass(frozen=True)
class BatchResult:
    """E[expr] for each of P covariance matrices.

    ``values``, ``errors``: arrays (P,); ``methods``: per matrix, ``"exact"``,
    ``"quadrature"`` or ``"qmc"``; ``budget``: the sorted names of the :class:`.budget.Budget`
    fields reached anywhere in the batch (as ``Estimate.budget``); ``heavy_tail``: some QMC
    part looked like an integrand of infinite variance (as ``Estimate.heavy_tail``)."""
    values: np.ndarray
    errors: np.ndarray
    methods: list[str]
    budget: tuple[str, ...] = ()
    heavy_tail: bool = False
    form: ClosedFormTrace | None = None      # all values by one closed form: how (else None)


#: batches longer than this are probed before the whole is compared (:func:`_same`)
PROBE_FROM = 256


def _same(a: np.ndarray, b: np.ndarray, sign: int = 1) -> bool:
    """a = sign·b to rounding over the whole batch (a cheap probe of a few entries first, in a large
    batch: the same test on every 16th entry)."""
    if len(a) > PROBE_FROM and not same_columns(a[::len(a) // 16], b[::len(a) // 16], sign):
        return False
    return same_columns(a, b, sign)


def same_columns(a: np.ndarray, b: np.ndarray, sign: int = 1) -> bool:
    """a = sign·b to rounding (relative 1e-12) everywhere."""
    return bool(np.all(np.abs(a - sign * b) <= 1e-12 * np.abs(sign * b)))


def first_tie(columns: dict[sp.Symbol, np.ndarray], col: np.ndarray) -> tuple[sp.Symbol, int] | None:
    """The first (symbol, sign) of ``columns`` (in order; sign 1 before −1) whose values are
    sign·col to rounding (:func:`_same`), or None.  A short batch compares every column at once."""
    if len(col) > PROBE_FROM or len(columns) < 2:
        return next(((c, s) for c, v in columns.items() for s in (1, -1) if _same(v, col, s)), None)
    V = np.array(list(columns.values()))
    scale = 1e-12 * np.abs(col)
    plus = np.all(np.abs(V - col) <= scale, axis=1)
    minus = np.all(np.abs(V - (-1) * col) <= scale, axis=1)       # as same_columns(v, col, -1)
    for c, p, m in zip(columns, plus, minus):
        if p or m:
            return c, 1 if p else -1
    return None


def _symbolic_cov(covs: np.ndarray) -> tuple[sp.Matrix, dict, dict]:
    """A covariance with a symbol for each entry that varies over the batch; and its layout
    {(i, j): ("const", value) | ("sym", symbol, sign)} for i ≤ j (how each entry was read)."""
    P, d, _ = covs.shape
    entries, values, layout = {}, {}, {}
    first = covs[0]
    constant = np.all(covs == first, axis=0)        # the entries equal over the whole batch
    for i in range(d):
        for j in range(i, d):
            if constant[i, j]:
                entries[(i, j)] = as_number(float(first[i, j]))
                layout[(i, j)] = ("const", float(first[i, j]))
                continue
            col = covs[:, i, j]
            # entries equal over the whole batch share a symbol, so exact relations such as
            # x ≡ y (Cov = Var) stay visible to the closed form
            tied = first_tie(values, col)
            if tied is None:
                tied = (sp.Symbol(f"c_{i}_{j}", positive=True if i == j else None, real=True), 1)
                values[tied[0]] = col
            layout[(i, j)] = ("sym",) + tied
            entries[(i, j)] = tied[1] * tied[0]
    S = sp.Matrix(d, d, [entries[(min(i, j), max(i, j))] for i in range(d) for j in range(d)])
    return S, values, layout


@dataclass(frozen=True)
class ClosedFormTrace:
    """How a batch's values were computed in closed form: F over the ``layout`` of the
    covariance entries (see :func:`_symbolic_cov`); lets a caller replay F on other covariances
    that have the same layout (the same constant entries and ties)."""
    F: sp.Expr
    layout: dict
    error: sp.Expr = sp.Integer(0)       # the stated error as a formula (the series; 0 when exact)


def expect_batch(expr: sp.Expr, gaussians: Sequence[sp.Symbol], covs: np.ndarray, *,
                 exact: bool = True, budget: Budget = DEFAULT, forms: "FormMemo | None" = None) -> BatchResult:
    """E[expr] for z ~ N(0, covs[p]), p = 0..P−1, each within ``budget`` (module doc).  ``forms``:
    the closed forms found not to exist in earlier calls (one compile's, :class:`FormMemo`)."""
    covs = np.asarray(covs, dtype=float)
    gaussians = tuple(gaussians)
    P, d = covs.shape[0], len(gaussians)
    if covs.shape != (P, d, d):
        raise ValueError(f"covs has shape {covs.shape}, expected (P, {d}, {d})")
    return _batch(expr, gaussians, covs, exact, budget, retry=True, forms=forms)


class FormMemo:
    """The closed forms the engine found not to exist (:func:`_generic_form`), by the problem up to
    the names of its Gaussians: the integrand with its Gaussians renamed in order, their
    assumptions, the symbolic covariance and the expansion bound.  A deep template asks the same
    question at every layer of other Gaussians (E silu(x)silu(y) has none): the answer is found once
    per compile.  A form found is kept by the problem with its Gaussians' own names (``found``):
    its expression is the one derived for them (the forms' coordinates ℓ0, ℓ1, … are the same at
    every layer, and so is their covariance read symbolically where it has the same layout)."""

    def __init__(self) -> None:
        self.failed: dict[tuple, bool] = {}          # problem -> whether an expansion was refused
        self.found: dict[tuple, tuple] = {}          # (expr, gaussians, problem) -> (F, refused)
        self.renamed: dict[tuple, tuple] = {}        # (expr, gaussians) -> the integrand's part of its key
        self.covs: dict[tuple, tuple] = {}           # a batch's covariances -> :func:`_symbolic_cov`
        self.splits: dict[tuple, tuple | None] = {}  # (expr, gaussians, blocks) -> :func:`split_blocks`
        self.roundings: dict[sp.Expr, tuple] = {}    # a form with Φ₂ -> its :func:`lifted_rounding`

    def rounding(self, F: sp.Expr) -> tuple[sp.Expr, dict]:
        """:func:`..symbolic.rounding.lifted_rounding` (F), once per form (the same at every layer)."""
        if F not in self.roundings:
            self.roundings[F] = lifted_rounding(F)
        return self.roundings[F]

    def split(self, expr: sp.Expr, gaussians: tuple, blocks: list[list[int]]) -> tuple[sp.Expr, list] | None:
        """:func:`split_blocks`, once per integrand and blocks (the same at every layer)."""
        key = (expr, gaussians, tuple(map(tuple, blocks)))
        if key not in self.splits:
            self.splits[key] = split_blocks(expr, gaussians, blocks)
        return self.splits[key]

    def symbolic_cov(self, covs: np.ndarray) -> tuple[sp.Matrix, dict, dict]:
        """:func:`_symbolic_cov` of ``covs``, once per content (a batch's expectation reads its
        covariances in its closed-form attempt and again in the route that gives it); copies."""
        key = (covs.shape, covs.dtype.str, covs.tobytes())
        if key not in self.covs:
            self.covs[key] = _symbolic_cov(covs)
        S, values, layout = self.covs[key]
        return S.copy(), dict(values), dict(layout)

    def key(self, expr: sp.Expr, gaussians: tuple, S: sp.Matrix, max_expand_size: float) -> tuple:
        if (expr, gaussians) not in self.renamed:     # the same integrand at every layer: renamed once
            names = {g: sp.Symbol(f"form_memo_z{k}", **g.assumptions0) for k, g in enumerate(gaussians)}
            self.renamed[(expr, gaussians)] = (expr.xreplace(names),
                                               tuple(frozenset(g.assumptions0.items()) for g in gaussians))
        return self.renamed[(expr, gaussians)] + (tuple(S.flat()), max_expand_size)


def _batch(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, exact: bool, budget: Budget,
           retry: bool, forms: FormMemo | None = None) -> BatchResult:
    """The three routes of the module doc, in order; a refused expansion is reported whatever
    route gives the values."""
    refused = False
    if exact:
        F, values, refused, layout = _generic_form(expr, gaussians, covs, budget.max_expand_size, forms)
        if F is not None:
            res = _closed_form(F, values, expr, gaussians, covs, budget, retry, forms)
            if res.form is not None and not refused:
                res = replace(res, form=ClosedFormTrace(F, layout))
            return _refused(res, refused)
    if expr.free_symbols <= set(gaussians):
        res = _factored(expr, gaussians, covs, exact, budget, retry, forms)
        if res is not None:
            return _refused(res, refused)
    if len(gaussians) <= 3 and not kink_args([expr]) and expr.free_symbols <= set(gaussians):
        res = _tensor_batch(expr, gaussians, covs, budget)
        if res is not None:
            return _refused(BatchResult(res[0], res[1], Uniform("quadrature", len(covs))), refused)
    return _refused(_one_by_one(expr, gaussians, covs, exact, budget), refused)


def _generic_form(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, max_expand_size: float,
                  forms: FormMemo | None = None) -> tuple[sp.Expr | None, dict, bool, dict]:
    """(F, values, refused): E[expr] in closed form as a function F of the covariance entries
    that vary over the batch (``values``: symbol -> its P values), or None if some part of it
    needs numerics; ``refused``: an expansion beyond ``max_expand_size`` was not attempted;
    ``layout``: how the covariance entries were read (:func:`_symbolic_cov`)."""
    S, values, layout = _symbolic_cov(covs) if forms is None else forms.symbolic_cov(covs)
    key = None if forms is None else forms.key(expr, gaussians, S, max_expand_size)
    if key is not None and key in forms.failed:
        return None, values, forms.failed[key], layout
    if key is not None and (expr, gaussians, key) in forms.found:
        F, refused = forms.found[(expr, gaussians, key)]
        return F, values, refused, layout
    engine = Engine(True, max_expand_size)
    try:
        F = engine.E(expr, Ctx(gaussians, Matrix(S), ()))
    except ValueError:
        F = None
    if key is not None and (F is None or engine.jobs):
        forms.failed[key] = engine.expansion_refused
    elif key is not None:
        forms.found[(expr, gaussians, key)] = (F, engine.expansion_refused)
    return (F if not engine.jobs else None), values, engine.expansion_refused, layout


def _closed_form(F: sp.Expr, values: dict, expr: sp.Expr, gaussians: tuple, covs: np.ndarray,
                 budget: Budget, retry: bool, forms: FormMemo | None = None) -> BatchResult:
    """F evaluated for all P; the points where it is not finite (a 0/0 of the generic formula)
    are redone: as a batch of their own when there are several (once), else one by one.  Its errors
    are 0 (the caller charges the rounding of the value), but for a form with Φ₂: the bound of
    :func:`..symbolic.rounding.function_rounding` (one by one where it has none)."""
    P = len(covs)
    errors = np.zeros(P)
    if F.has(Phi2):
        # e^m·Φ₂ and e^m·erfc terms (ELU, SELU) err far beyond the rounding of |E| the ledger charges:
        # their own errors, as the replay charges them (:func:`..symbolic.rounding.function_rounding`);
        # a number F (one pair) likewise, in float64 (not Φ₂ by mpmath at 20 digits)
        try:
            out, err = value_and_error(F, values, None if forms is None else forms.rounding(F))
        except NoRoundingRule:
            return _one_by_one(expr, gaussians, covs, True, budget)
        out, errors = np.broadcast_to(out, (P,)).copy(), np.broadcast_to(err, (P,)).copy()
    else:
        out = np.broadcast_to(evaluate(F, values) if values else float(F.evalf(20)), (P,)).copy()
    res = BatchResult(out, errors, Uniform("exact", P))
    bad = np.nonzero(~(np.isfinite(out) & np.isfinite(errors)))[0]
    if not len(bad):
        return replace(res, form=ClosedFormTrace(F, {}))       # the caller fills in the layout
    if retry and len(bad) > 1:
        return _fill(res, bad, _batch(expr, gaussians, covs[bad], True, budget, retry=False, forms=forms))
    if len(bad):
        return _fill(res, bad, _one_by_one(expr, gaussians, covs[bad], True, budget))
    return res


def _one_by_one(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, exact: bool,
                budget: Budget) -> BatchResult:
    """``expect`` for each matrix."""
    ests = [expect(expr, gaussians, sp.Matrix(c.tolist()), exact=exact, budget=budget) for c in covs]
    return BatchResult(np.array([e.value for e in ests]), np.array([e.error for e in ests]),
                       [e.method for e in ests], tuple(sorted({b for e in ests for b in e.budget})),
                       any(e.heavy_tail for e in ests))


def _fill(res: BatchResult, idx: np.ndarray, sub: BatchResult) -> BatchResult:
    """res with its entries idx taken from sub, and sub's budgets and heavy-tail flag added."""
    values, errors = res.values.copy(), res.errors.copy()
    values[idx], errors[idx] = sub.values, sub.errors
    methods = res.methods
    if not (isinstance(methods, Uniform) and method_kinds(sub.methods) <= {methods.method}):
        methods = list(methods)
        for k, p in enumerate(idx):
            methods[p] = sub.methods[k]
    return BatchResult(values, errors, methods, tuple(sorted(set(res.budget) | set(sub.budget))),
                       res.heavy_tail or sub.heavy_tail)


def _refused(res: BatchResult, refused: bool) -> BatchResult:
    """res, naming ``max_expand_size`` among its budgets if an expansion was refused."""
    if not refused:
        return res
    return BatchResult(res.values, res.errors, res.methods,
                       tuple(sorted(set(res.budget) | {"max_expand_size"})), res.heavy_tail)


def _rule(d: int, n: int, alt: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The d-dimensional tensor rule (points (d, N), weights (N,)) in standard normals."""
    x, w = Coord(None).rule(n, alt)
    xi = np.stack([g.ravel() for g in np.meshgrid(*[x] * d, indexing="ij")])
    W = np.ones(())
    for _ in range(d):
        W = np.multiply.outer(W, w)
    return xi, W.ravel()


#: points × matrices evaluated at once by a tensor rule: chunks of this size stay in cache (4x faster
#: than chunks of ``max_quad_points`` = 2·10⁶ for a 2-d tanh integrand); each item's sum is unchanged
CHUNK_POINTS = 1 << 18


def _apply(tape, L: np.ndarray, xi: np.ndarray, W: np.ndarray, ps: np.ndarray,
           max_points: int) -> tuple[np.ndarray, np.ndarray]:
    """(Q, roundoff floor) for the matrices ps, in chunks of at most max_points points × matrices."""
    q, floor = np.zeros(len(ps)), np.zeros(len(ps))
    chunk = max(1, min(max_points, CHUNK_POINTS) // xi.shape[1])
    for start in range(0, len(ps), chunk):
        vals = tape(*np.einsum("pij,jn->ipn", L[ps[start:start + chunk]], xi))[0]
        q[start:start + chunk] = vals @ W
        floor[start:start + chunk] = 8 * np.finfo(float).eps * (np.abs(vals) @ W)
    return q, floor


def _tensor_batch(expr: sp.Expr, gaussians: tuple, covs: np.ndarray,
                  budget: Budget) -> tuple[np.ndarray, np.ndarray] | None:
    """(values, errors) by one tensor rule in whitened coordinates for all matrices; as in
    :mod:`.quad`, orders grow until the error estimate of |Q_n − Q_n'| meets the target
    ``budget.tol`` (relative above 1), then the rule on interleaved splits cross-checks Q_n.
    None if some matrix does not converge within ``budget.max_quad_points`` grid points."""
    tol, max_points = budget.tol, budget.max_quad_points
    P, d = covs.shape[0], len(gaussians)
    lam, V = np.linalg.eigh(covs)
    L = V * np.sqrt(np.clip(lam, 0.0, None))[:, None, :]           # (P, d, d), Σ_p = L_p L_pᵀ
    tape = compile_exprs((expr,), gaussians)
    values, errors, final = np.zeros(P), np.full(P, np.inf), np.zeros(P, dtype=int)
    prev, d_prev = np.zeros(P), np.full(P, np.inf)          # d_prev = ∞: no rate known yet
    todo = np.arange(P)
    for k, n in enumerate(ORDERS):
        if len(Coord(None).rule(n)[0]) ** d > max_points or not len(todo):
            break
        q, floor = _apply(tape, L, *_rule(d, n), todo, max_points)
        if k:
            diff = np.abs(q - prev[todo])
            errors[todo] = estimate_error(diff, d_prev[todo]) + floor
            values[todo], final[todo], d_prev[todo] = q, n, diff
        prev[todo] = q
        todo = todo[errors[todo] > tol * np.maximum(1.0, np.abs(values[todo]))]
    if len(todo):
        return None
    for n in np.unique(final):
        ps = np.nonzero(final == n)[0]
        q_alt, floor = _apply(tape, L, *_rule(d, n, alt=True), ps, max_points)
        errors[ps] = np.maximum(errors[ps], np.abs(values[ps] - q_alt) + floor)
    return values, errors


def _blocks(covs: np.ndarray) -> list[list[int]]:
    """The independent blocks of the Gaussians: connected components of the entries that are
    not 0 somewhere in the batch."""
    d = covs.shape[1]
    tied = np.any(covs != 0, axis=0)
    seen, out = set(), []
    for i in range(d):
        if i in seen:
            continue
        block, todo = [], [i]
        seen.add(i)
        while todo:
            k = todo.pop()
            block.append(k)
            for j in np.nonzero(tied[k])[0]:
                if int(j) not in seen:
                    seen.add(int(j))
                    todo.append(int(j))
        out.append(sorted(block))
    return out


def _factored(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, exact: bool, budget: Budget,
              retry: bool, forms: FormMemo | None = None) -> BatchResult | None:
    """Route 2 of the module doc, or None where it does not apply."""
    blocks = _blocks(covs)
    if len(blocks) > 1:
        return _product(expr, gaussians, covs, blocks, exact, budget, retry, forms)
    if len(gaussians) == 2 and budget.series_terms > 0:
        return _series_batch(expr, gaussians, covs, exact, budget, retry, forms)
    if len(gaussians) == 1 and budget.series_terms > 0 and (not kink_args([expr]) or
                                                            kinked_at_zero(expr, gaussians[0])):
        return _mean_batch(expr, gaussians, covs, budget, forms)
    return None


#: the order of the coefficients whose error estimate covers E φ (the first coefficient's)
MEAN_ORDER = 8


def _mean_batch(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, budget: Budget,
                forms: FormMemo | None = None) -> BatchResult | None:
    """E φ(x) for every variance: α_0 of the series' coefficients (the trapezoidal rule, once per
    distinct variance, error from the rule at step 1.25h; the split rule for kinks at 0 alone:
    :mod:`..symbolic.split_rule`); None if some misses the target."""
    x = gaussians[0]
    a = covs[:, 0, 0]
    h = step_for(MEAN_ORDER, 1.5 * float(a.max())) if not kink_args([expr]) else split_step(MEAN_ORDER)
    ua, ia = np.unique(a, return_inverse=True)
    with np.errstate(all="ignore"):
        c = coefficients(numpy_function(expr, x), ua, MEAN_ORDER, h)
    values, errors = c.alpha[ia, 0], c.err[ia] + 4 * np.finfo(float).eps * np.abs(c.alpha[ia, 0])
    if not np.all(np.isfinite(values) & (errors <= budget.tol * np.maximum(1.0, np.abs(values)))):
        return None
    S, _, layout = _symbolic_cov(covs) if forms is None else forms.symbolic_cov(covs)
    A = hermite_head(expr.xreplace({x: T}), MEAN_ORDER, h)(S[0, 0])
    return BatchResult(values, errors, Uniform("series", len(covs)),
                       form=ClosedFormTrace(Mean(A), layout, MeanError(A)))


def _product(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, blocks: list[list[int]], exact: bool,
             budget: Budget, retry: bool, forms: FormMemo | None = None) -> BatchResult | None:
    """E Π_b f_b = Π_b E f_b over independent blocks b (None if a factor ties two blocks); the
    error of a product A·B is |A|e_B + |B|e_A + e_A e_B."""
    split = split_blocks(expr, gaussians, blocks) if forms is None else forms.split(expr, gaussians, blocks)
    if split is None:
        return None
    coeff, parts = split
    P = len(covs)
    values, errors = np.full(P, float(coeff)), np.zeros(P)
    methods, budgets, heavy = Uniform("exact", P), set(), False
    F, E, layout = coeff, sp.Integer(0), _zero_layout(blocks, covs.shape[1])
    for block, integrand in zip(blocks, parts):
        if integrand is None:
            continue
        idx = np.array(block)
        res = _batch(integrand, tuple(gaussians[i] for i in block), covs[:, idx][:, :, idx],
                     exact, budget, retry, forms)
        errors = np.abs(values) * res.errors + np.abs(res.values) * errors + errors * res.errors
        values = values * res.values
        methods = _worse(methods, res.methods)
        budgets |= set(res.budget)
        heavy = heavy or res.heavy_tail
        if res.form is None or layout is None:
            layout = None
            continue
        Fb, Eb = _renamed(res.form, block, layout)
        E = product_error(F, E, Fb, Eb)
        F = F * Fb
    form = None if layout is None else ClosedFormTrace(F, layout, E)
    return BatchResult(values, errors, methods, tuple(sorted(budgets)), heavy, form)


def product_error(F: sp.Expr, E: sp.Expr, Fb: sp.Expr, Eb: sp.Expr) -> sp.Expr:
    """|F|·E_b + |F_b|·E + E·E_b, the error of F·F_b (errors E, E_b), as a formula.  Where E is 0
    (every block before was exact) and F_b and E_b are known finite or not known infinite, the
    last two terms are sympy's 0 (0·x is 0 unless x is known infinite): written so, without making
    |F_b|, whose assumptions sympy would search (the series' heads at every layer)."""
    if E is sp.S.Zero and Fb.is_finite and Eb.is_finite is not False:
        return sp.Abs(F) * Eb
    return sp.Abs(F) * Eb + sp.Abs(Fb) * E + E * Eb


def split_blocks(expr: sp.Expr, gaussians: tuple, blocks: list[list[int]]) -> tuple[sp.Expr, list] | None:
    """(c, [f_b or None]): expr = c·Π_b f_b with f_b the product of its factors over block b's
    Gaussians (None where it has none) and c free of them; None if a factor ties two blocks."""
    where = {gaussians[i]: n for n, block in enumerate(blocks) for i in block}
    parts: list[list[sp.Expr]] = [[] for _ in blocks]
    coeff = sp.Integer(1)
    for f in sp.Mul.make_args(expr):
        owners = {where[g] for g in f.free_symbols if g in where}
        if len(owners) > 1:
            return None
        if owners:
            parts[owners.pop()].append(f)
        else:
            coeff *= f
    return coeff, [sp.Mul(*factors) if factors else None for factors in parts]


def _zero_layout(blocks: list[list[int]], d: int) -> dict:
    """The layout entries between independent blocks: constant 0 (a replay checks they stay so)."""
    owner = {i: n for n, block in enumerate(blocks) for i in block}
    return {(i, j): ("const", 0.0) for i in range(d) for j in range(i, d) if owner[i] != owner[j]}


def _renamed(form: ClosedFormTrace, block: list[int], layout: dict) -> tuple[sp.Expr, sp.Expr]:
    """A block's form in the whole covariance's indices: its entries (i, j) become
    (block[i], block[j]) in ``layout`` (filled in place) and its symbols are renamed to match."""
    names: dict[sp.Symbol, sp.Symbol] = {}
    for (i, j), how in form.layout.items():
        I, J = block[i], block[j]
        if how[0] == "const":
            layout[(I, J)] = how
            continue
        if how[1] not in names:
            names[how[1]] = sp.Symbol(f"c_{I}_{J}", positive=True if I == J else None, real=True)
        layout[(I, J)] = ("sym", names[how[1]], how[2])
    return form.F.xreplace(names), form.error.xreplace(names)


def _worse(a: Sequence[str], b: Sequence[str]) -> Sequence[str]:
    """Per item, the less exact of two methods."""
    rank = {"exact": 0, "series": 1, "quadrature": 2, "qmc": 3}
    ka, kb = method_kinds(a), method_kinds(b)
    if len(ka) == 1 and len(kb) == 1:
        return a if rank[next(iter(ka))] >= rank[next(iter(kb))] else b
    return [x if rank[x] >= rank[y] else y for x, y in zip(a, b)]


def _series_batch(expr: sp.Expr, gaussians: tuple, covs: np.ndarray, exact: bool, budget: Budget,
                  retry: bool, forms: FormMemo | None = None) -> BatchResult | None:
    """E f(x)g(y) for every matrix by the Mehler series (:func:`.series.series_pairs`); the
    matrices where its bound misses the target go the other routes (without the series)."""
    parts = separate(expr, gaussians)
    if parts is None:
        return None
    f, g = parts
    x, y = gaussians
    same = f.xreplace({x: y}) == g
    phi = numpy_function(f, x)
    psi = phi if same else numpy_function(g, y)
    split = (kinked_at_zero(f, x), kinked_at_zero(g, y))      # kinks at 0: the split rule's coefficients
    if any(split) and (tied := tied_sign(covs)):                # u ≡ ±v: E f(x)g(±x), one Gaussian
        return _mean_batch(f * g.xreplace({y: tied * x}), (x,), covs, budget, forms)
    with np.errstate(all="ignore"):
        res = series_pairs(phi, psi, covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1], budget.tol,
                           budget.series_terms, same, split)
    out = BatchResult(res.values, res.errors, Uniform("series", len(covs)))
    bad = np.nonzero(~(res.ok & np.isfinite(res.values)))[0]
    if any(split):                       # kinked at 0: split quadrature where the series misses its aim
        out, bad = split_fill(out, res, phi, psi, covs, budget.tol)
    if not len(bad):
        S, _, layout = _symbolic_cov(covs) if forms is None else forms.symbolic_cov(covs)
        h = step_for(res.cover, 1.5 * float(max(covs[:, 0, 0].max(), covs[:, 1, 1].max())))
        A = hermite_head(f.xreplace({x: T}), res.cover, split_step(res.cover) if split[0] else h)(S[0, 0])
        B = hermite_head(g.xreplace({y: T}), res.cover, split_step(res.cover) if split[1] else h)(S[1, 1])
        rho = S[0, 1] * sp.Pow(S[0, 0] * S[1, 1], sp.Rational(-1, 2), evaluate=False)
        tol = sp.Float(budget.tol)
        if any(split):                   # the mixed rule: the series, split quadrature where it misses
            form = ClosedFormTrace(MixedValue(A, B, rho, tol, S[0, 0], S[1, 1]), layout,
                                   MixedError(A, B, rho, tol, S[0, 0], S[1, 1]))
        else:
            form = ClosedFormTrace(MehlerValue(A, B, rho, tol), layout, MehlerError(A, B, rho, tol))
        return replace(out, form=form)
    rest = _batch(expr, gaussians, covs[bad], exact, replace(budget, series_terms=0), retry, forms)
    return _fill(out, bad, rest)


def tied_sign(covs: np.ndarray) -> int:
    """±1 where every matrix of the batch is [[a, ±a], [±a, a]] exactly (u ≡ ±v), else 0."""
    a, b, c = covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1]
    if not np.array_equal(a, b):
        return 0
    return 1 if np.array_equal(c, a) else -1 if np.array_equal(c, -a) else 0


def split_fill(out: BatchResult, res, phi, psi, covs: np.ndarray, tol: float) -> tuple[BatchResult, np.ndarray]:
    """``out`` (the series' ``res``) with the pairs whose series error misses its aim (AIM·tol,
    relative above 1) by :func:`..symbolic.split_quad.split_expect` where that meets ``tol`` with a
    smaller error, as the replay's mixed rule takes them (:func:`..symbolic.mixed.better`); and the
    pairs that neither meets."""
    aim = np.nonzero(~(res.errors <= AIM * tol * np.maximum(1.0, np.abs(res.values))))[0]
    if not len(aim):
        return out, aim
    sub = covs[aim]
    values, errors, ok = split_expect(phi, psi, sub[:, 0, 0], sub[:, 1, 1], sub[:, 0, 1], tol)
    value, error = better(res.values[aim], res.errors[aim], values, errors, ok, tol)
    take = ok & ~(res.errors[aim] <= errors)
    if take.any():
        out = _fill(out, aim[take], BatchResult(value[take], error[take], Uniform("quadrature", int(take.sum()))))
    return out, aim[~np.isfinite(value)]
