"""The front end against docs/language.md: every documented form parses and means what it says.

Tests look at the unrolled IR (``Program.ir``: flat equations, groups, outputs,
dims, params) rather than at "no exception", and check a few execution semantics
on tiny widths with fixed seeds through invariants that hold exactly whatever
the random draw (``mean((2x)²) == 4·mean(x²)``...).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import ir
from tensorprog.finite.evaluate import eval_fn

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"

FIRST_PROGRAM = """\
# Deep ReLU MLP at two inputs: the NNGP kernel (arc-cosine recursion).
param L = 3                      # overridable: tpc ... -D L=5, or load(path, L=5)
param rho = 0.3

vector x, y ~ normal(cov=[[1, rho], [rho, 1]])   # W1·ξ and W1·ξ' : jointly Gaussian coordinates

for l in 2..L {
    matrix W ~ normal(var=2)     # a fresh n×n matrix each iteration, entries N(0, 2/n)
    x = W @ relu(x)              # MatMul; its argument is a Nonlin of earlier vectors
    y = W @ relu(y)
}

out kxy = mean(relu(x) * relu(y))   # Moment: (1/n) Σ_α relu(x_α) relu(y_α)
out kxx = mean(relu(x) ** 2)
"""


# ---- helpers -------------------------------------------------------------------
def of(p: tp.Program, kind: type) -> list:
    """The equations of one kind, in program order."""
    return [e for e in p.ir.eqns if isinstance(e, kind)]


def out_eqn(p: tp.Program, name: str):
    (o,) = [o for o in p.ir.outputs if o.name == name]
    return p.ir.eqns[o.var]


def const_out(p: tp.Program, name: str) -> float:
    """The folded value of a constant output (a Scalar equation whose function is a Const)."""
    e = out_eqn(p, name)
    assert isinstance(e, ir.Scalar) and isinstance(e.fn, ir.Const), e
    return e.fn.value


def run(src: str, n: int = 8, seed: int = 0, **params) -> dict[str, float]:
    r = tp.parse(src, **params).execute(n=n, trials=1, seed=seed)
    return {k: o.values[0] for k, o in r.outputs.items()}


def moment_fn(src: str, name: str = "o") -> ir.Fn:
    e = out_eqn(tp.parse(src), name)
    assert isinstance(e, ir.Moment), e
    return e.fn


# ---- the first program -----------------------------------------------------------
@pytest.mark.parametrize("L", [3, 5])
def test_first_program_unrolls_per_layer(L):
    p = tp.parse(FIRST_PROGRAM) if L == 3 else tp.parse(FIRST_PROGRAM, L=L)
    assert p.ir.params == {"L": float(L), "rho": 0.3}
    layers = L - 1
    assert p.summary() == {"InitVector": 2, "Matrix": layers, "MatMul": 2 * layers,
                           "Nonlin": 2 * layers, "Moment": 2}
    # one fresh matrix per iteration, each used by exactly the two MatMuls of its layer
    mats = of(p, ir.Matrix)
    assert len({m.var for m in mats}) == layers
    assert all(m.dist.family == "normal" and m.dist.var == 2.0 for m in mats)
    mm = of(p, ir.MatMul)
    assert [m.matrix for m in mm] == [w.var for w in mats for _ in range(2)]
    assert not any(m.transposed for m in mm)
    # x and y: one joint group with the declared covariance
    assert len(p.ir.groups) == 1
    g = p.ir.groups[0]
    assert len(g.members) == 2 and g.dist.cov == ((1.0, 0.3), (0.3, 1.0))
    # the chain: each MatMul's argument is relu of the previous binding of the same name
    x0, y0 = g.members
    prev = {"x": x0, "y": y0}
    for i, m in enumerate(mm):
        arg = p.ir.eqns[m.arg]
        which = "xy"[i % 2]
        assert isinstance(arg, ir.Nonlin) and arg.fn == ir.Call("relu", (ir.Ref(prev[which]),))
        prev[which] = m.var
    # the outputs read the newest bindings
    assert [o.name for o in p.ir.outputs] == ["kxy", "kxx"]
    kxy, kxx = out_eqn(p, "kxy"), out_eqn(p, "kxx")
    assert kxy.fn == ir.Bin("*", ir.Call("relu", (ir.Ref(prev["x"]),)), ir.Call("relu", (ir.Ref(prev["y"]),)))
    assert kxx.fn == ir.Bin("**", ir.Call("relu", (ir.Ref(prev["x"]),)), ir.Const(2.0))


def test_first_program_matches_shipped_example_structure():
    shipped = tp.load(PROGRAMS / "relu_nngp.tp", L=4)
    assert shipped.summary()["Matrix"] == 3 and shipped.outputs == ["kxy", "kxx"]


def test_source_positions_are_kept_on_equations():
    p = tp.parse(FIRST_PROGRAM)
    assert of(p, ir.InitVector)[0].pos == ir.Pos(5, 1)
    assert of(p, ir.Matrix)[0].pos == ir.Pos(8, 5)
    assert of(p, ir.MatMul)[0].pos == ir.Pos(9, 9)        # the '@' expression starts at W
    assert of(p, ir.Nonlin)[0].pos.line == 9
    assert out_eqn(p, "kxx").pos.line == 14


# ---- precedence and constants -------------------------------------------------------
def test_matmul_sum_is_two_matmuls_feeding_one_nonlin():
    p = tp.parse("vector v ~ normal()\nmatrix W ~ normal()\nh = W @ v + W.T @ v\nout o = mean(tanh(h))")
    a, b = of(p, ir.MatMul)
    assert (a.transposed, b.transposed) == (False, True)
    assert a.matrix == b.matrix and a.arg == b.arg == of(p, ir.InitVector)[0].var
    (h,) = of(p, ir.Nonlin)
    assert h.fn == ir.Bin("+", ir.Ref(a.var), ir.Ref(b.var)) and set(h.args) == {a.var, b.var}
    assert out_eqn(p, "o").fn == ir.Call("tanh", (ir.Ref(h.var),))


@pytest.mark.parametrize("expr, value", [
    ("2**3**2", 512.0),            # ** is right-associative
    ("-2**2", -4.0),               # ** binds tighter than unary minus
    ("2**-1", 0.5),
    ("2 * 3 ** 2", 18.0),
    ("1 - 2 - 3", -4.0),           # left to right
    ("8 / 2 / 2", 2.0),
    ("1 + 2 * 3", 7.0),
    ("(1 + 2) * 3", 9.0),
    ("1e-3 + .5 + 2.5E2", 250.501),
    ("(1 if 2 > 1 else 0) + (1 if 1 != 1 else 5)", 6.0),
    ("pi", math.pi),
    ("e", math.e),
    ("sum(j in 1..4: j)", 10.0),
    ("sum(j in 1..0: j)", 0.0),
])
def test_constants_fold(expr, value):
    p = tp.parse(f"out c = {expr}")
    assert const_out(p, "c") == pytest.approx(value, rel=1e-12)
    assert p.execute(n=4).outputs["c"].values == [pytest.approx(value, rel=1e-12)]


def test_unary_minus_applies_after_power_on_vectors():
    p = tp.parse("vector x ~ normal()\ny = -x**2\nout o = mean(y)")
    (y,) = of(p, ir.Nonlin)
    x = of(p, ir.InitVector)[0].var
    assert y.fn == ir.Neg(ir.Bin("**", ir.Ref(x), ir.Const(2.0)))
    assert run("vector x ~ normal()\nout o = mean(-x**2)")["o"] < 0


def test_matmul_and_mul_are_left_to_right():
    p = tp.parse("vector v ~ normal()\nmatrix W ~ normal()\nout o = mean(W @ v * 2)")
    (mm,) = of(p, ir.MatMul)
    assert out_eqn(p, "o").fn == ir.Bin("*", ir.Ref(mm.var), ir.Const(2.0))


# ---- params ----------------------------------------------------------------------------
def test_params_fold_and_overrides_propagate():
    src = "param a = 2\nparam b = a * 3\nout c = b + 1"
    assert const_out(tp.parse(src), "c") == 7.0
    p = tp.parse(src, a=4)
    assert p.ir.params == {"a": 4.0, "b": 12.0} and const_out(p, "c") == 13.0
    assert const_out(tp.parse(src, b=0.5), "c") == 1.5


def test_param_is_a_constant_in_loop_bounds_and_distributions():
    src = "param K = 2\nparam v = 0.5\nvector h[1..K] ~ normal(var=v)\nout o = mean(h[K])"
    p = tp.parse(src, K=4, v=3)
    assert len(of(p, ir.InitVector)) == 4
    assert p.ir.groups[0].dist.var == 3.0


def test_unknown_override_is_a_name_error():
    with pytest.raises(tp.TPNameError, match="unknown parameter 'Q'"):
        tp.parse(FIRST_PROGRAM, Q=2)


# ---- declarations -------------------------------------------------------------------------
def test_joint_vectors_are_one_group_with_the_cov():
    p = tp.parse("vector a, b, c ~ normal(cov=[[2, 1, 0], [1, 2, 0], [0, 0, 1]])\nout o = mean(a*b*c)")
    assert len(p.ir.groups) == 1
    g = p.ir.groups[0]
    assert g.members == tuple(e.var for e in of(p, ir.InitVector))
    assert [e.name for e in of(p, ir.InitVector)] == ["a", "b", "c"]
    assert [e.member for e in of(p, ir.InitVector)] == [0, 1, 2]
    assert g.dist.cov == ((2.0, 1.0, 0.0), (1.0, 2.0, 0.0), (0.0, 0.0, 1.0))


def test_separate_declarations_are_separate_groups():
    p = tp.parse("vector a ~ normal()\nvector b ~ uniform()\nout o = mean(a*b)")
    assert [g.dist.family for g in p.ir.groups] == ["normal", "uniform"]
    assert [e.group for e in of(p, ir.InitVector)] == [0, 1]


def test_array_of_vectors():
    p = tp.parse("vector h[1..3] ~ normal()\nout o = mean(h[1] * h[3])")
    inits = of(p, ir.InitVector)
    assert [e.name for e in inits] == ["h[1]", "h[2]", "h[3]"]
    assert out_eqn(p, "o").fn == ir.Bin("*", ir.Ref(inits[0].var), ir.Ref(inits[2].var))


def test_array_of_vectors_with_cov_is_joint():
    src = "vector x[1..3] ~ normal(cov=[[1 if i == j else 0.5 for j in 1..3] for i in 1..3])\n" \
          "out o = mean(x[1] * x[2])"
    p = tp.parse(src)
    assert len(p.ir.groups) == 1 and len(p.ir.groups[0].members) == 3
    np.testing.assert_array_equal(np.array(p.ir.groups[0].dist.cov),
                                  [[1, 0.5, 0.5], [0.5, 1, 0.5], [0.5, 0.5, 1]])


def test_eye_as_cov():
    p = tp.parse("vector x[1..3] ~ normal(cov=eye(3))\nout o = mean(x[1] * x[2])")
    np.testing.assert_array_equal(np.array(p.ir.groups[0].dist.cov), np.eye(3))


def test_comprehension_with_param_size():
    src = "param B = 2\nparam rho = 0.25\n" \
          "vector x[1..B] ~ normal(cov=[[1 if i == j else rho for j in 1..B] for i in 1..B])\n" \
          "out o = mean(x[1] * x[B])"
    p = tp.parse(src, B=4)
    cov = np.array(p.ir.groups[0].dist.cov)
    assert cov.shape == (4, 4) and cov[0, 3] == 0.25 and cov[2, 2] == 1.0


def test_array_of_matrices_are_independent():
    p = tp.parse("matrix W[1..2] ~ normal(var=2)\nvector v ~ normal()\nout o = mean(W[2] @ (W[1] @ v))")
    w1, w2 = of(p, ir.Matrix)
    assert (w1.name, w2.name) == ("W[1]", "W[2]") and w1.var != w2.var
    first, second = of(p, ir.MatMul)
    assert first.matrix == w1.var and second.matrix == w2.var and second.arg == first.var


def test_two_index_names():
    p = tp.parse("vector v ~ normal()\nfor l in 1..2 { for b in 1..3 { x[l, b] = v * l + b } }\n"
                 "out o = mean(x[2, 1])")
    nl = of(p, ir.Nonlin)
    assert len(nl) == 6
    v = of(p, ir.InitVector)[0].var
    assert out_eqn(p, "o").fn == ir.Ref(nl[3].var)     # (l, b) = (2, 1) is the 4th binding
    assert nl[3].fn == ir.Bin("+", ir.Bin("*", ir.Ref(v), ir.Const(2.0)), ir.Const(1.0))


def test_indexed_names_with_index_expressions():
    p = tp.parse("param L = 3\nfor i in 0..L-1 { a[i] = i * 10 }\nout o = a[L - 1] + a[1]")
    assert const_out(p, "o") == 30.0


def test_indexed_binding_needs_no_declaration_and_separate_arities():
    p = tp.parse("x[1] = 1; x[1, 2] = 2\nout o = x[1] + x[1, 2]")
    assert const_out(p, "o") == 3.0


# ---- loops, rebinding, def, sum -----------------------------------------------------------------
def test_for_loop_declares_fresh_matrices_and_vectors_each_iteration():
    p = tp.parse("vector s ~ normal()\nmatrix A ~ normal()\n"
                 "for i in 1..3 { matrix W ~ normal(); vector u ~ normal(); s = W @ s + A @ u }\n"
                 "out o = mean(s)")
    mats = of(p, ir.Matrix)
    assert len(mats) == 4 and len({m.var for m in mats}) == 4
    assert len(of(p, ir.InitVector)) == 4 and len(p.ir.groups) == 4
    w_vars = [m.matrix for m in of(p, ir.MatMul) if m.matrix != mats[0].var]
    assert w_vars == [m.var for m in mats[1:]]          # each iteration uses its own W


def test_loop_with_empty_range_does_nothing_and_loop_variable_is_scoped():
    assert const_out(tp.parse("a = 5\nfor i in 3..1 { a = i }\nout o = a"), "o") == 5.0
    with pytest.raises(tp.TPNameError):
        tp.parse("for i in 1..3 { a = i }\nout o = i")
    # a loop variable shadows an outer name only inside the loop
    p = tp.parse("vector v ~ normal()\nfor v in 1..2 { a = v }\nout o = mean(v)\nout q = a")
    assert const_out(p, "q") == 2.0 and isinstance(out_eqn(p, "o"), ir.Moment)


def test_rebinding_later_uses_see_newest_binding():
    p = tp.parse("vector x ~ normal()\ny = x\nx = x * 2\nx = x + 1\nout a = mean(x)\nout b = mean(y)")
    x0 = of(p, ir.InitVector)[0].var
    n1, n2 = of(p, ir.Nonlin)
    assert n1.fn == ir.Bin("*", ir.Ref(x0), ir.Const(2.0))
    assert n2.fn == ir.Bin("+", ir.Ref(n1.var), ir.Const(1.0))
    assert out_eqn(p, "a").fn == ir.Ref(n2.var)
    assert out_eqn(p, "b").fn == ir.Ref(x0)


def test_rebinding_semantics_on_execution():
    r = run("vector x ~ normal()\ny = x\nx = 2 * x\nout a = mean(x * x)\nout b = mean(y * y)", n=16)
    assert r["a"] == pytest.approx(4 * r["b"], rel=1e-12)


def test_transpose_of_transpose():
    p = tp.parse("matrix W ~ normal()\nvector v ~ normal()\nout o = mean(W.T.T @ v)\n"
                 "out q = mean(W.T.T.T @ v)")
    a, b = of(p, ir.MatMul)
    assert not a.transposed and b.transposed and a.matrix == b.matrix


def test_names_that_are_not_keywords():
    # The language's keywords are only: param dim vector matrix for in def out
    p = tp.parse("vector x, T, out2, in_ ~ normal()\nif = 2\nout o = mean(x * T * out2 * in_) * if")
    assert p.outputs == ["o"]


def test_sum_is_reserved():
    # 'sum' introduces sum(j in a..b: e); binding it is refused rather than half-working
    with pytest.raises(tp.TPNameError, match="reserved"):
        tp.parse("sum = 3")


def test_def_is_a_scalar_expression_inlined_in_nonlins():
    p = tp.parse("param k = 2\ndef f(a, b) = k * a * tanh(b) + pi\ndef g(a) = f(a, a) - 1\n"
                 "vector v ~ normal()\nout o = mean(g(v))\nout c = f(1, 0)")
    v = of(p, ir.InitVector)[0].var
    expected = ir.Bin("-", ir.Bin("+", ir.Bin("*", ir.Bin("*", ir.Const(2.0), ir.Ref(v)),
                                               ir.Call("tanh", (ir.Ref(v),))), ir.Const(math.pi)),
                      ir.Const(1.0))
    assert out_eqn(p, "o").fn == expected
    assert const_out(p, "c") == pytest.approx(math.pi)
    assert not of(p, ir.Nonlin)                       # inlined into the Moment


def test_sum_over_vectors_is_a_vector_and_unrolled():
    p = tp.parse("vector v ~ normal()\ns = sum(j in 1..3: v * j)\nout o = mean(s)")
    (s,) = of(p, ir.Nonlin)
    v = of(p, ir.InitVector)[0].var
    terms = [ir.Bin("*", ir.Ref(v), ir.Const(float(j))) for j in (1, 2, 3)]
    assert s.fn == ir.Bin("+", ir.Bin("+", terms[0], terms[1]), terms[2])


def test_sum_of_scalars_is_a_scalar():
    p = tp.parse("vector v ~ normal()\nc = mean(v)\nout o = sum(j in 1..3: c * j)")
    assert isinstance(out_eqn(p, "o"), ir.Scalar)


def test_sum_semantics_on_execution():
    r = run("vector x ~ normal()\nout s = mean(sum(j in 1..3: j * x * x))\nout t = mean(x * x)")
    assert r["s"] == pytest.approx(6 * r["t"], rel=1e-12)


def test_scalars_enter_nonlins_as_arguments():
    p = tp.parse("vector v ~ normal()\nc = mean(v)\nout o = mean(c * v + tanh(c))")
    c = out_eqn(p, "o")
    (m1,) = [e for e in of(p, ir.Moment) if e.var != c.var]
    assert m1.var in c.args
    r = run("vector v ~ normal()\nc = mean(v)\nout o = mean(c * v)\nout q = c * c", n=16)
    assert r["o"] == pytest.approx(r["q"], rel=1e-12)


def test_scalar_arithmetic_of_moments_is_a_scalar_eqn():
    p = tp.parse("vector v ~ normal()\nout o = mean(v) * 2 + 1")
    o = out_eqn(p, "o")
    assert isinstance(o, ir.Scalar)
    assert o.fn == ir.Bin("+", ir.Bin("*", ir.Ref(of(p, ir.Moment)[0].var), ir.Const(2.0)), ir.Const(1.0))


def test_out_name_form_outputs_an_existing_scalar():
    p = tp.parse("vector v ~ normal()\nc2 = mean(v)\nout c2")
    assert p.outputs == ["c2"] and isinstance(out_eqn(p, "c2"), ir.Moment)


# ---- diff --------------------------------------------------------------------------------------------
def test_diff_relu_is_step():
    p = tp.parse("vector h ~ normal()\nout o = mean(diff(relu(h), h))")
    h = of(p, ir.InitVector)[0].var
    assert out_eqn(p, "o").fn == ir.Call("step", (ir.Ref(h),))


def test_diff_through_a_named_nonlin_binding():
    p = tp.parse("vector h ~ normal()\na = tanh(h)\nout o = mean(diff(a * a, h))")
    h = of(p, ir.InitVector)[0].var
    fn = out_eqn(p, "o").fn
    assert ir.refs(fn) == (h,)                         # expanded through a = tanh(h)
    xs = np.linspace(-3, 3, 41)
    got = eval_fn(fn, {h: xs}.__getitem__)
    np.testing.assert_allclose(got, 2 * np.tanh(xs) * (1 - np.tanh(xs) ** 2), rtol=1e-12, atol=1e-14)


def test_diff_on_execution_agrees_with_the_hand_derivative():
    r = run("vector h ~ normal()\na = tanh(h)\nout d = mean(diff(a * a, h))\n"
            "out r = mean(2 * tanh(h) * (1 - tanh(h) ** 2))", n=16)
    assert r["d"] == pytest.approx(r["r"], rel=1e-12)


def test_diff_stops_at_matmul_results():
    p = tp.parse("vector x ~ normal()\nmatrix W ~ normal()\ng = W @ x\nz = tanh(g) * x\n"
                 "out o = mean(diff(z, x))")
    (g,) = of(p, ir.MatMul)
    assert out_eqn(p, "o").fn == ir.Call("tanh", (ir.Ref(g.var),))


def test_diff_of_matmul_result_is_zero_inside_a_vector_expression():
    r = run("vector v ~ normal()\nmatrix W ~ normal()\nout o = mean(v * diff(W @ v, v))")
    assert r["o"] == 0.0


def test_diff_of_matmul_result_is_a_zero_vector():
    r = run("vector v ~ normal()\nmatrix W ~ normal()\nout o = mean(diff(W @ v, v))")
    assert r["o"] == 0.0


def test_diff_with_constant_derivative_is_a_vector():
    r = run("vector v ~ normal()\nout o = mean(diff(2 * v, v))")
    assert r["o"] == 2.0


def test_diff_with_scalar_derivative_is_a_vector():
    r = run("vector v ~ normal()\nc = mean(v)\nout o = mean(diff(c * v, v))\nout q = c", n=16)
    assert r["o"] == pytest.approx(r["q"], rel=1e-12)


def test_diff_is_not_a_scalar_output():
    with pytest.raises(tp.TPTypeError):
        tp.parse("vector v ~ normal()\nout d = diff(2 * v, v)")


def test_diff_stops_at_initial_vectors():
    p = tp.parse("vector x ~ normal()\nvector y ~ normal()\nout o = mean(diff(x * y, x))")
    y = of(p, ir.InitVector)[1].var
    assert out_eqn(p, "o").fn == ir.Ref(y)


@pytest.mark.parametrize("expr, deriv", [
    ("x ** 3", lambda x: 3 * x ** 2),
    ("exp(x)", np.exp),
    ("sin(x) * cos(x)", lambda x: np.cos(x) ** 2 - np.sin(x) ** 2),
    ("sigmoid(x)", lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
    ("softplus(x)", lambda x: 1 / (1 + np.exp(-x))),
    ("erf(x)", lambda x: 2 / np.sqrt(np.pi) * np.exp(-x ** 2)),
    ("leaky_relu(x, 0.1)", lambda x: np.where(x > 0, 1.0, 0.1)),
    ("abs(x)", np.sign),
    ("gelu(x)", lambda x: 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
        + x * np.exp(-x ** 2 / 2) / math.sqrt(2 * math.pi)),
])
def test_diff_of_builtins(expr, deriv):
    p = tp.parse(f"vector x ~ normal()\nout o = mean(diff({expr}, x))")
    x = of(p, ir.InitVector)[0].var
    xs = np.array([-2.0, -0.7, -0.1, 0.3, 1.1, 2.5])
    np.testing.assert_allclose(eval_fn(out_eqn(p, "o").fn, {x: xs}.__getitem__), deriv(xs),
                               rtol=1e-10, atol=1e-12)


# ---- variable widths --------------------------------------------------------------------------------
WIDTHS = """\
dim m = 0.5
vector z : m ~ normal()
matrix A : m x n ~ normal(var=2)
vector v ~ normal()
u = A @ v
w = A.T @ z
out a = mean(u * z)
out b = mean(w * v)
out ones = mean(step(z) + step(-z))
out ones_u = mean(step(u) + step(-u))
"""


def test_dim_widths_on_equations():
    p = tp.parse(WIDTHS)
    assert p.ir.dims == {"n": 1.0, "m": 0.5}
    z, v = of(p, ir.InitVector)
    assert (z.width, v.width) == ("m", "n")
    assert [g.width for g in p.ir.groups] == ["m", "n"]
    (A,) = of(p, ir.Matrix)
    assert (A.rows, A.cols) == ("m", "n") and A.dist.var == 2.0
    u, w = of(p, ir.MatMul)
    assert (u.width, u.transposed) == ("m", False)
    assert (w.width, w.transposed) == ("n", True)
    assert [e.width for e in of(p, ir.Moment)] == ["m", "n", "m", "m"]


def test_mean_over_an_m_vector_averages_its_m_coordinates():
    r = run(WIDTHS, n=8)
    assert r["ones"] == 1.0 and r["ones_u"] == 1.0


def test_default_width_is_n():
    p = tp.parse("matrix A : n x n ~ normal()\nvector v ~ normal()\nout o = mean(A @ v)")
    (A,) = of(p, ir.Matrix)
    assert (A.rows, A.cols) == ("n", "n")
    assert of(p, ir.MatMul)[0].width == "n"


# ---- load ------------------------------------------------------------------------------------------------
def test_load_is_relative_to_the_program_folder(tmp_path, monkeypatch):
    cov = np.array([[1.0, 0.25], [0.25, 2.0]])
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "cov.npy", cov)
    np.save(tmp_path / "data" / "scale.npy", np.array(3.0))
    (tmp_path / "p.tp").write_text('param s = load("data/scale.npy")\n'
                                   'vector x, y ~ normal(cov=load("cov.npy"))\n'
                                   'out o = mean(x * y) * s\n')
    monkeypatch.chdir(tmp_path.parent)          # not the program's folder
    p = tp.load(tmp_path / "p.tp")
    np.testing.assert_array_equal(np.array(p.ir.groups[0].dist.cov), cov)
    assert p.ir.params["s"] == 3.0
    assert p.ir.file == str(tmp_path / "p.tp")


def test_load_with_overrides(tmp_path):
    (tmp_path / "p.tp").write_text(FIRST_PROGRAM)
    assert tp.load(tmp_path / "p.tp", L=6).summary()["Matrix"] == 5


# ---- builtins ---------------------------------------------------------------------------------------------
def _erf(x):
    return np.vectorize(math.erf)(x)


BUILTIN_REFS = {
    "relu": lambda x: np.maximum(x, 0),
    "step": lambda x: (x > 0).astype(float),
    "abs": np.abs,
    "sign": np.sign,
    "tanh": np.tanh,
    "erf": _erf,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "softplus": lambda x: np.log1p(np.exp(x)),
    "gelu": lambda x: x * (1 + _erf(x / math.sqrt(2))) / 2,
    "silu": lambda x: x / (1 + np.exp(-x)),
    "selu": lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(np.minimum(x, 0))),
    "mish": lambda x: x * np.tanh(np.log1p(np.exp(x))),
    "softsign": lambda x: x / (1 + np.abs(x)),
}
BINARY_REFS = {
    "leaky_relu": lambda x, a: np.where(x > 0, x, a * x),
    "elu": lambda x, a: np.where(x > 0, x, a * np.expm1(np.minimum(x, 0))),
    "min": np.minimum,
    "max": np.maximum,
}


@pytest.mark.parametrize("name", sorted(BUILTIN_REFS))
def test_unary_builtin(name):
    ref = BUILTIN_REFS[name]
    positive = name in ("log", "sqrt")
    c = 0.7 if positive else -0.7
    p = tp.parse(f"vector x ~ normal()\nout o = mean({name}(x))\nout c = {name}({c})")
    x = of(p, ir.InitVector)[0].var
    assert out_eqn(p, "o").fn == ir.Call(name, (ir.Ref(x),))
    assert const_out(p, "c") == pytest.approx(float(ref(np.array(c))), rel=1e-12)
    xs = np.array([0.2, 0.5, 1.0, 2.0, 3.5]) if positive else np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    np.testing.assert_allclose(eval_fn(out_eqn(p, "o").fn, {x: xs}.__getitem__), ref(xs), rtol=1e-12)


def test_step_is_zero_at_zero():
    assert const_out(tp.parse("out c = step(0)"), "c") == 0.0
    assert const_out(tp.parse("out c = step(1e-300)"), "c") == 1.0


@pytest.mark.parametrize("name", sorted(BINARY_REFS))
def test_binary_builtin(name):
    ref = BINARY_REFS[name]
    p = tp.parse(f"vector x ~ normal()\nout o = mean({name}(x, 0.1))\nout c = {name}(-0.5, 0.1)")
    x = of(p, ir.InitVector)[0].var
    assert out_eqn(p, "o").fn == ir.Call(name, (ir.Ref(x), ir.Const(0.1)))
    assert const_out(p, "c") == pytest.approx(float(ref(-0.5, 0.1)))
    xs = np.array([-2.0, -0.5, 0.0, 0.05, 0.5, 2.0])
    np.testing.assert_allclose(eval_fn(out_eqn(p, "o").fn, {x: xs}.__getitem__), ref(xs, 0.1))


def test_power_of_a_vector():
    p = tp.parse("vector x ~ normal()\nout o = mean(x ** 3 + x ** 0.5 * 0)")
    x = of(p, ir.InitVector)[0].var
    assert ir.calls(out_eqn(p, "o").fn) == set()
    xs = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(eval_fn(out_eqn(p, "o").fn, {x: xs}.__getitem__), xs ** 3)


# ---- lexical rules ---------------------------------------------------------------------------------------------
def test_semicolons_comments_blank_lines_and_brackets_over_lines():
    src = ("\n\n# a comment line\n   \n"
           "param a = 1; param b = 2   # trailing comment\n"
           "vector x, y ~ normal(cov=[[1, 0.5],   # inside a list\n"
           "                          [0.5, 1]])\n"
           ";;\n"
           "out o = mean(tanh(x +\n"
           "                 y));  out c = a + b;\n"
           "# end")
    p = tp.parse(src)
    assert p.outputs == ["o", "c"] and const_out(p, "c") == 3.0
    assert p.ir.groups[0].dist.cov == ((1.0, 0.5), (0.5, 1.0))
    assert of(p, ir.InitVector)[0].pos.line == 6


def test_crlf_line_endings():
    p = tp.parse("vector x ~ normal(\r\n  var = 2\r\n  )\r\nout o = mean(x)\r\n")
    assert p.ir.groups[0].dist.var == 2.0 and out_eqn(p, "o").pos.line == 4


def test_single_line_loop_body_with_semicolons_and_spaced_range():
    p = tp.parse("for i in 1 .. 3 { a = i; b = 2 * i }; out o = a + b")
    assert const_out(p, "o") == 9.0


def test_names_may_contain_underscores_and_digits():
    p = tp.parse("vector _x1, Y_2 ~ normal()\nout o_3 = mean(_x1 * Y_2)")
    assert p.outputs == ["o_3"]


# ---- distributions ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dist, family, var, df", [
    ("normal()", "normal", 1.0, None),
    ("normal(var=2)", "normal", 2.0, None),
    ("uniform()", "uniform", 1.0, None),
    ("uniform(var=3)", "uniform", 3.0, None),
    ("rademacher()", "rademacher", 1.0, None),
    ("rademacher(var=0.5)", "rademacher", 0.5, None),
    ("student_t(df=6)", "student_t", 1.0, 6.0),
    ("student_t(6)", "student_t", 1.0, 6.0),
    ("student_t(5, var=2)", "student_t", 2.0, 5.0),
    ("laplace()", "laplace", 1.0, None),
    ("laplace(var=2)", "laplace", 2.0, None),
])
def test_distributions_for_vectors_and_matrices(dist, family, var, df):
    p = tp.parse(f"vector x ~ {dist}\nmatrix W ~ {dist}\nout o = mean(W @ x)")
    for spec in (p.ir.groups[0].dist, of(p, ir.Matrix)[0].dist):
        assert (spec.family, spec.var, spec.df) == (family, var, df)
    assert np.isfinite(p.execute(n=8).outputs["o"].mean)


@pytest.mark.parametrize("dist, family, var, df", [
    ("orthogonal()", "orthogonal", 1.0, None),
    ("orthogonal(var=2)", "orthogonal", 2.0, None),
    ("mvt(df=5)", "mvt", 1.0, 5.0),
    ("mvt(5)", "mvt", 1.0, 5.0),
    ("mvt(df=5, var=2)", "mvt", 2.0, 5.0),
])
def test_matrix_only_distributions(dist, family, var, df):
    p = tp.parse(f"vector x ~ normal()\nmatrix W ~ {dist}\nout o = mean(W @ x)")
    spec = of(p, ir.Matrix)[0].dist
    assert (spec.family, spec.var, spec.df) == (family, var, df)
    assert np.isfinite(p.execute(n=8).outputs["o"].mean)


def test_normal_with_mean_and_cov():
    p = tp.parse("vector x, y ~ normal(mean=[1, -2], cov=[[1, 0], [0, 1]])\nout a = mean(x)\nout b = mean(y)")
    spec = p.ir.groups[0].dist
    assert spec.mean == (1.0, -2.0) and spec.cov == ((1.0, 0.0), (0.0, 1.0))
    r = p.execute(n=4096, seed=1).outputs
    assert abs(r["a"].mean - 1) < 0.1 and abs(r["b"].mean + 2) < 0.1


def test_joint_draw_follows_the_cov():
    r = run("vector x, y ~ normal(cov=[[1, 1], [1, 1]])\nout d = mean((x - y) ** 2)\n"
            "vector u, w ~ normal(cov=[[1, 0.5], [0.5, 1]])\nout c = mean(u * w)", n=4096)
    assert r["d"] == 0.0                   # perfectly correlated: identical coordinates
    assert abs(r["c"] - 0.5) < 0.1         # ±5 SE of a 4096-sample covariance


# ---- execution semantics on tiny cases --------------------------------------------------------------------------
def test_first_program_runs_and_is_seed_reproducible():
    p = tp.parse(FIRST_PROGRAM, L=2)
    a = p.execute(n=32, trials=2, seed=5).to_dict()
    b = p.execute(n=32, trials=2, seed=5).to_dict()
    assert a == b and set(a["outputs"]) == {"kxy", "kxx"}
    assert all(v >= 0 for v in a["outputs"]["kxx"]["values"])


def test_independent_fresh_vectors_differ():
    r = run("for i in 1..2 { vector u ~ normal(); s[i] = u }\nout d = mean((s[1] - s[2]) ** 2)")
    assert r["d"] > 0


def test_matmul_linearity_on_execution():
    r = run("vector v ~ normal()\nmatrix W ~ normal()\nout d = mean((W @ (2 * v) - 2 * (W @ v)) ** 2)\n"
            "out q = mean((W @ v) ** 2)", n=16)
    assert r["d"] < 1e-24 and r["q"] > 0
