"""Unit tests of the linear-form reduction (expect/forms.py) and of the shape-cached, PSD-projected
expectations (expect/shapes.py), each checked against an independent numpy computation.

Tolerances: float sums of k products carry a relative rounding error of at most ~k·ε (ε = 2.2e-16)
of Σ|a_i||b_j||Σ_ij|; eigen-decompositions of a d×d matrix are backward stable to ~d·ε·‖C‖₂.
"""
from __future__ import annotations

import math
import multiprocessing
import time
from queue import Empty

import numpy as np
import pytest
import sympy as sp

from tensorprog.expect.budget import DEFAULT
from tensorprog.expect.forms import coordinate, to_forms
from tensorprog.symbolic.dag import distinct_nodes
from tensorprog.expect.shapes import NEGLIGIBLE, Shapes, nearest_psd
from tensorprog.symbolic.heads import Relu

EPS = np.finfo(float).eps


def gaussians(m: int) -> list[sp.Symbol]:
    return [sp.Symbol(f"g{i}", real=True) for i in range(m)]


def cov_fn(gs: list[sp.Symbol], S: np.ndarray):
    """``cov_row`` of to_forms: g ↦ {h: Σ_gh} over the non-zero Σ_gh."""
    index = {g: i for i, g in enumerate(gs)}
    return lambda g: {h: float(S[index[g], j]) for j, h in enumerate(gs) if S[index[g], j] != 0}


def random_psd(rng: np.random.Generator, m: int) -> np.ndarray:
    A = rng.standard_normal((m, m + 2))
    return A @ A.T / m


def weight_vector(weights, gs) -> np.ndarray:
    return np.array([weights.get(g, 0.0) for g in gs])


def arccos_relu(c11: float, c12: float, c22: float) -> float:
    """E relu(u) relu(v) for (u, v) ~ N(0, [[c11, c12], [c12, c22]]) (Cho & Saul's arc-cosine kernel):
    √(c11 c22)/(2π) · (sin θ + (π − θ) cos θ), cos θ = c12/√(c11 c22)."""
    s = math.sqrt(c11 * c22)
    cos = max(-1.0, min(1.0, c12 / s))
    theta = math.acos(cos)
    return s / (2 * math.pi) * (math.sin(theta) + (math.pi - theta) * cos)


# ------------------------------------------------------------------------------------------------
# to_forms
# ------------------------------------------------------------------------------------------------
def resnet_forms(L: int, rng: np.random.Generator):
    """Two inputs x0, y0 and L residual increments each: x_L = x0 + Σ ĝ_l, y_L = y0 + Σ ĥ_l, with
    every Gaussian correlated with every other (a random PSD Σ)."""
    gs = gaussians(2 * L + 2)
    S = random_psd(rng, len(gs))
    xs = gs[0] + sum(gs[2:L + 2], sp.Integer(0))
    ys = gs[1] + sum((sp.Rational(1, 2) * g for g in gs[L + 2:]), sp.Integer(0))
    a = np.zeros(len(gs))
    a[0], a[2:L + 2] = 1.0, 1.0
    b = np.zeros(len(gs))
    b[1], b[L + 2:] = 1.0, 0.5
    return gs, S, xs, ys, a, b


def test_resnet_sum_of_many_gaussians_is_two_coordinates():
    rng = np.random.default_rng(0)
    gs, S, xs, ys, a, b = resnet_forms(20, rng)
    expr = Relu(xs) * Relu(ys) + sp.tanh(xs) ** 2
    forms = to_forms(expr, frozenset(gs), cov_fn(gs, S))
    assert len(forms.coords) == 2
    assert forms.expr.free_symbols == set(forms.coords)
    # which coordinate is which: by its weights
    A = np.array([weight_vector(w, gs) for w in forms.weights])
    order = [0, 1] if np.allclose(A[0], a) else [1, 0]
    assert np.array_equal(A[order[0]], a) and np.array_equal(A[order[1]], b)
    u, v = forms.coords[order[0]], forms.coords[order[1]]
    assert sp.simplify(forms.expr - (Relu(u) * Relu(v) + sp.tanh(u) ** 2)) == 0
    C = A @ S @ A.T
    scale = np.abs(A) @ np.abs(S) @ np.abs(A).T
    assert np.all(np.abs(forms.cov - C) <= (2 * len(gs) + 2) * EPS * scale)
    assert np.array_equal(forms.cov, forms.cov.T)


def test_resnet_one_input_is_one_coordinate():
    rng = np.random.default_rng(1)
    gs, S, xs, _, a, _ = resnet_forms(12, rng)
    expr = Relu(xs) * sp.tanh(xs) + sp.exp(-xs ** 2)      # equal forms share a coordinate
    forms = to_forms(expr, frozenset(gs), cov_fn(gs, S))
    assert len(forms.coords) == 1
    (u,) = forms.coords
    assert u == coordinate(0)
    assert sp.simplify(forms.expr - (Relu(u) * sp.tanh(u) + sp.exp(-u ** 2))) == 0
    assert abs(forms.cov[0, 0] - a @ S @ a) <= (2 * len(gs) + 2) * EPS * (np.abs(a) @ np.abs(S) @ np.abs(a))


def test_independent_laws_and_constants_stay():
    """A non-Gaussian law and a number are not coordinates; a sum with them keeps them outside the form."""
    gs = gaussians(3)
    w = sp.Symbol("w", real=True)                      # an independent non-Gaussian law
    S = np.diag([1.0, 2.0, 3.0])
    expr = sp.tanh(gs[0] + 2 * gs[1] + w + 3) * w
    forms = to_forms(expr, frozenset(gs), cov_fn(gs, S))
    assert len(forms.coords) == 1
    u = forms.coords[0]
    assert forms.expr == sp.tanh(u + w + 3) * w
    assert forms.weights[0] == {gs[0]: 1.0, gs[1]: 2.0}
    assert forms.cov[0, 0] == 1.0 + 4 * 2.0


def test_same_shape_at_two_layers_is_the_same_expression():
    """Coordinates are named in walk order: the same integrand over other Gaussians is equal."""
    gs = gaussians(4)
    S = np.eye(4)
    f1 = to_forms(Relu(gs[0] + gs[1]) * Relu(gs[0] - gs[1]), frozenset(gs), cov_fn(gs, S))
    f2 = to_forms(Relu(gs[2] + gs[3]) * Relu(gs[2] - gs[3]), frozenset(gs), cov_fn(gs, S))
    assert f1.expr == f2.expr
    assert np.array_equal(f1.cov, f2.cov)


def test_zero_variance_forms_vanish():
    gs = gaussians(3)
    S = np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]])     # g0 = g1 a.s., g2 = 0
    expr = sp.tanh(gs[0] - gs[1]) + sp.cos(gs[2]) + Relu(gs[0] + gs[2]) * sp.sin(2 * gs[2])
    forms = to_forms(expr, frozenset(gs), cov_fn(gs, S))
    # g0 − g1 has variance 1 + 1 − 2 = 0 exactly; g2 and 2·g2 have variance 0: all three vanish,
    # and only g0 + g2 (variance 1) is left as a coordinate
    assert len(forms.coords) == len(forms.weights) == 1 and forms.cov.shape == (1, 1)
    assert forms.cov[0, 0] == 1.0 and forms.weights[0] == {gs[0]: 1.0, gs[2]: 1.0}
    assert forms.expr == sp.Integer(1)                  # tanh(0) + cos(0) + relu(·)·sin(0)


def test_a_form_with_nonzero_variance_is_kept():
    gs = gaussians(2)
    S = np.array([[1.0, 0.5], [0.5, 1.0]])
    forms = to_forms(sp.tanh(gs[0] - gs[1]) ** 2, frozenset(gs), cov_fn(gs, S))
    assert forms.expr == sp.tanh(coordinate(0)) ** 2
    assert forms.cov[0, 0] == 1.0                       # 1 + 1 − 2·0.5




def dag_value(expr: sp.Basic, at: dict) -> float:
    """expr at the point ``at`` (symbol -> float), each distinct node evaluated once."""
    memo: dict[int, float] = {}

    def value(node: sp.Basic) -> float:
        if id(node) not in memo:
            if node in at:
                memo[id(node)] = at[node]
            elif node.is_Number:
                memo[id(node)] = float(node)
            elif node.is_Add:
                memo[id(node)] = math.fsum(value(a) for a in node.args)
            elif node.is_Mul:
                memo[id(node)] = math.prod(value(a) for a in node.args)
            elif isinstance(node, sp.tanh):
                memo[id(node)] = math.tanh(value(node.args[0]))
            else:
                raise AssertionError(f"unexpected node {node.func}")
        return memo[id(node)]
    return value(expr)


def dag_symbols(expr: sp.Basic) -> set:
    """free_symbols in time proportional to the distinct nodes (sympy's walks the tree)."""
    seen: set[int] = set()
    out, stack = set(), [expr]
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            out |= {node} if node.is_Symbol else set()
            stack.extend(node.args)
    return out


DEPTH = 40


def reduce_tanh_chain(queue) -> None:
    """(in a child process) z ← tanh(z) + z, DEPTH times, from z = g0 + 2·g1, through to_forms."""
    gs = gaussians(2)
    S = np.array([[1.0, 0.3], [0.3, 2.0]])
    z = gs[0] + 2 * gs[1]
    for _ in range(DEPTH):          # unevaluated: sympy's own tanh(Add) evaluation walks the tree
        z = sp.Add(sp.tanh(z, evaluate=False), z, evaluate=False)
    start = time.perf_counter()
    forms = to_forms(z, frozenset(gs), cov_fn(gs, S))
    took = time.perf_counter() - start
    points = [(3.0, 0.5), (-2.0, -1.5)]            # g0 + 2·g1 = 4 and −5: |z_k| grows, tanh' ≤ 1e-3
    values = [(dag_value(forms.expr, {coordinate(0): a + 2 * b}), dag_value(z, {gs[0]: a, gs[1]: b}))
              for a, b in points]
    queue.put((took, len(distinct_nodes(z)), len(distinct_nodes(forms.expr)), len(forms.coords),
               float(forms.cov[0, 0]), dag_symbols(forms.expr) == {coordinate(0)}, values))


def test_a_dag_with_exponentially_many_paths_is_reduced_quickly():
    """z ← tanh(z) + z, 40 times, from z = g0 + 2·g1: the tree repeats tanh(g0 + 2·g1) 2^39 times, the DAG
    has O(40) nodes.  The result is the same recursion over the one coordinate ℓ0 = g0 + 2·g1.  Run in a
    child process so that an exponential walk fails the test (after 5 s) instead of hanging it."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=reduce_tanh_chain, args=(queue,))
    child.start()
    try:
        took, nodes, reduced_nodes, k, var, symbols, values = queue.get(timeout=5)
    except Empty:
        child.kill()
        child.join()
        pytest.fail("to_forms did not reduce a 40-deep DAG (2^40 tree nodes) within 5 s")
    child.join()
    assert nodes < 10 * DEPTH and reduced_nodes < 10 * DEPTH, (nodes, reduced_nodes)
    assert took < 2.0, took                 # a walk of the tree would visit ~2^40 nodes
    assert k == 1 and symbols
    assert abs(var - 10.2) <= 8 * EPS * 10.2
    for reduced, original in values:        # |z_40| ≤ 45: 40 roundings of the sums, tanh' ≤ 1e-3 damps
        assert abs(reduced - original) <= 4 * DEPTH * EPS * abs(original), (reduced, original)


def test_a_shallow_dag_is_reduced_to_the_same_recursion():
    """The same chain 8 deep (fast either way): the reduction is the recursion over ℓ0."""
    gs = gaussians(2)
    S = np.array([[1.0, 0.3], [0.3, 2.0]])
    z = gs[0] + 2 * gs[1]
    for _ in range(8):
        z = sp.tanh(z) + z
    forms = to_forms(z, frozenset(gs), cov_fn(gs, S))
    w = coordinate(0)
    for _ in range(8):
        w = sp.tanh(w) + w
    assert len(forms.coords) == 1
    assert forms.expr == w
    assert abs(forms.cov[0, 0] - 10.2) <= 8 * EPS * 10.2     # 1 + 4·0.3 + 4·2, summed in some order


# ------------------------------------------------------------------------------------------------
# nearest_psd
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rank", [4, 2])
def test_nearest_psd_leaves_a_psd_matrix_alone(rank):
    rng = np.random.default_rng(rank)
    A = rng.standard_normal((4, rank))
    C = A @ A.T                               # rank-deficient for rank 2: eigenvalues 0 up to rounding
    proj, delta = nearest_psd(C)
    assert delta == 0.0
    assert np.array_equal(proj, C)


def test_nearest_psd_projects_an_indefinite_matrix():
    rng = np.random.default_rng(7)
    V, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    lam = np.array([-1e-3, 0.5, 2.0])
    C = (V * lam) @ V.T
    C = (C + C.T) / 2
    proj, delta = nearest_psd(C)
    tol = 3 * 3 * EPS * 2.0                   # d·ε·‖C‖₂, with a factor 3 for the two products
    assert abs(delta - 1e-3) <= tol
    expected = (V * np.maximum(lam, 0)) @ V.T
    assert np.max(np.abs(proj - expected)) <= tol
    assert np.array_equal(proj, proj.T)
    assert np.linalg.eigvalsh(proj)[0] >= -tol
    assert abs(np.linalg.norm(C - proj, 2) - delta) <= tol


def test_nearest_psd_tolerates_rounding_only():
    C = np.array([[1.0, 1.0], [1.0, 1.0]])
    C[0, 1] = C[1, 0] = 1.0 + 1e-14          # λ_min = −1e-14 ≥ −NEGLIGIBLE·max variance: rounding
    assert NEGLIGIBLE * 1.0 > 1e-14
    proj, delta = nearest_psd(C)
    assert delta == 0.0 and np.array_equal(proj, C)
    C[0, 1] = C[1, 0] = 1.0 + 1e-9           # beyond rounding: projected
    proj, delta = nearest_psd(C)
    assert abs(delta - 1e-9) <= 4 * EPS * 2
    assert np.linalg.eigvalsh(proj)[0] >= -4 * EPS * 2


# ------------------------------------------------------------------------------------------------
# Shapes.expect
# ------------------------------------------------------------------------------------------------
U, V_ = coordinate(0), coordinate(1)
RELU2 = Relu(U) * Relu(V_)


@pytest.mark.parametrize("c11, c12, c22", [(1.0, 0.3, 2.0), (2.0, -1.5, 1.5), (1.0, 0.0, 1.0), (0.5, 0.49, 0.5)])
def test_relu_relu_is_the_arc_cosine_kernel(c11, c12, c22):
    est = Shapes().expect(RELU2, (U, V_), np.array([[c11, c12], [c12, c22]]), {}, DEFAULT)
    truth = arccos_relu(c11, c12, c22)
    assert est.method == "exact"
    # a few roundings in each of the two evaluations of an O(1) formula
    assert abs(est.value - truth) <= est.error + 16 * EPS * max(1.0, truth), (est, truth)


def test_one_shape_at_several_covariances():
    """The cache shares derivations, never values: the same shape at new covariances (a zero entry among
    them, which is structure) gives each covariance's own value."""
    shapes = Shapes()
    for c11, c12, c22 in [(1.0, 0.3, 2.0), (1.5, 0.9, 1.0), (1.0, 0.0, 1.0), (1.0, 0.3, 2.0), (3.0, -0.2, 0.7)]:
        est = shapes.expect(RELU2, (U, V_), np.array([[c11, c12], [c12, c22]]), {}, DEFAULT)
        truth = arccos_relu(c11, c12, c22)
        assert abs(est.value - truth) <= est.error + 16 * EPS * max(1.0, truth), ((c11, c12, c22), est, truth)


def gauss_hermite_tanh2(C: np.ndarray, points: int = 120) -> float:
    """E tanh(u) tanh(v), (u, v) ~ N(0, C), by a tensor Gauss–Hermite rule on the Cholesky factor."""
    x, w = np.polynomial.hermite_e.hermegauss(points)
    w = w / w.sum()
    Lc = np.linalg.cholesky(C)
    X, Y = np.meshgrid(x, x, indexing="ij")
    u = Lc[0, 0] * X
    v = Lc[1, 0] * X + Lc[1, 1] * Y
    return float(np.sum(np.outer(w, w) * np.tanh(u) * np.tanh(v)))


def test_a_shape_without_closed_form_is_remembered_and_still_right():
    shapes = Shapes()
    expr = sp.tanh(U) * sp.tanh(V_)
    for C in (np.array([[1.0, 0.4], [0.4, 2.0]]), np.array([[0.7, -0.3], [-0.3, 1.2]])):
        est = shapes.expect(expr, (U, V_), C, {}, DEFAULT)
        assert est.method != "exact"
        truth = gauss_hermite_tanh2(C)
        assert abs(est.value - truth) <= est.error + 1e-13, (est, truth)
        assert len(shapes.no_closed_form) == 1


# An indefinite covariance: correlation 1 whose off-diagonal entry came out ε too large
EPS_C = 1e-6
DRIFTED = np.array([[1.0, 1.0 + EPS_C], [1.0 + EPS_C, 1.0]])      # eigenvalues 2 + ε and −ε


def test_drift_beyond_the_allowance_is_refused():
    with pytest.raises(ValueError, match="not positive semi-definite"):
        Shapes().expect(RELU2, (U, V_), DRIFTED, {}, DEFAULT, drift=lambda: EPS_C / 2)
    with pytest.raises(ValueError, match="not positive semi-definite"):
        Shapes().expect(RELU2, (U, V_), DRIFTED, {}, DEFAULT)       # no allowance at all


def test_drift_within_the_allowance_is_projected_and_costs_error():
    est = Shapes().expect(RELU2, (U, V_), DRIFTED, {}, DEFAULT, drift=lambda: 2 * EPS_C)
    # C₊ = [[1 + ε/2, 1 + ε/2], [1 + ε/2, 1 + ε/2]] (rank one), δ = ε
    half = 1 + EPS_C / 2
    at_proj = arccos_relu(half, half, half)            # = (1 + ε/2)/2
    # the projection's displacement once more: 2C₊ − C = [[1 + ε, 1], [1, 1 + ε]]
    moved = arccos_relu(1 + EPS_C, 1.0, 1 + EPS_C)
    assert abs(est.value - at_proj) <= est.error
    assert est.error >= abs(moved - at_proj) - 1e-15   # |E(2C₊ − C) − E(C₊)| joined the error
    assert est.exact is None and est.method != "exact"


def test_the_projection_error_covers_the_projection():
    """C → C₊ moves C by δ·vvᵀ (v: the clipped eigenvector); to first order the value moves by
    |E(C₊ + δ·vvᵀ) − E(C₊)| (the mirror image, a PSD matrix).  Here v = (1, −1)/√2: the move lowers the
    correlation, E relu(u) relu(v) ≈ c12/2 near correlation 1 moves by ≈ δ/4 = 2.5e-7, but along δI
    (both variances up, the correlation down) it hardly moves: ≈ 1e-10."""
    est = Shapes().expect(RELU2, (U, V_), DRIFTED, {}, DEFAULT, drift=lambda: 2 * EPS_C)
    half = 1 + EPS_C / 2
    at_proj = arccos_relu(half, half, half)
    mirror = arccos_relu(half + EPS_C / 2, half - EPS_C / 2, half + EPS_C / 2)
    assert abs(mirror - at_proj) > 1e-7
    assert est.error >= abs(mirror - at_proj), (est, abs(mirror - at_proj))


def test_the_error_grows_with_the_drift():
    """A larger negative eigenvalue (within the allowance) costs a larger error."""
    errors = []
    for eps in (1e-8, 1e-6, 1e-4):
        C = np.array([[0.36 - eps, 0.6], [0.6, 1.0]])      # det = −ε: λ_min ≈ −ε/1.36
        est = Shapes().expect(RELU2, (U, V_), C, {}, DEFAULT, drift=lambda: eps)
        lam = np.linalg.eigvalsh(C)[0]
        assert lam < 0
        proj = C - lam * np.outer(*(2 * [np.linalg.eigh(C)[1][:, 0]]))
        at_proj = arccos_relu(proj[0, 0], proj[0, 1], proj[1, 1])
        moved = arccos_relu(proj[0, 0] - lam, proj[0, 1], proj[1, 1] - lam)
        assert abs(est.value - at_proj) <= est.error + 16 * EPS
        assert est.error >= abs(moved - at_proj) - 16 * EPS
        errors.append(est.error)
    assert errors[0] < errors[1] < errors[2], errors
    exact = Shapes().expect(RELU2, (U, V_), np.array([[0.36, 0.6], [0.6, 1.0]]), {}, DEFAULT)
    assert exact.error < errors[0]
