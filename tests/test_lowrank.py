"""Matrices with many rank-one updates as RankOne chains and LowRank products (tensorprog/lang/matrices.py,
tensorprog/finite/lowrank.py): the same numbers as the expansion by definition, an IR linear in the number of
updates, the same limits, and clear errors where the chain cannot go."""
from __future__ import annotations

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import ir
from tensorprog.errors import TPTypeError, TPUsageError
from tensorprog.lang.lower import expanded, lower
from tensorprog.lang.matrices import EXPAND_TERMS
from tensorprog.lang.parser import parse_text


def program(text: str, expand_terms: int | None, **params: float) -> tp.Program:
    """``text`` lowered with products by matrices of more than ``expand_terms`` terms as LowRank
    equations (0: every updated matrix; None: none, the expansion by definition)."""
    return tp.Program(lower(parse_text(text), params, source=text, expand_terms=expand_terms))


HEAD = ("param c = 0.7\nvector g, h, x, y ~ normal(cov=[[1, 0.2, 0.1, 0], [0.2, 1, 0, 0.3], [0.1, 0, 1, 0.4], "
        "[0, 0.3, 0.4, 1]])\nmatrix W ~ normal(var=2)\n")
#: updated matrices and products of every kind: W and Wᵀ, a runtime coefficient, a scaled base,
#: a sum of two outers without base, a chain extended from an older link (B and A share A0's
#: link, so one of them copies the stack), and a product whose argument is an expression
UPDATES = HEAD + """
A0 = W - c * outer(g, h)
A = A0 + mean(x * y) * outer(tanh(x), y)
B = A0 - outer(y, x)
z1 = A @ x
z2 = A.T @ tanh(y)
z3 = (2 * A) @ (x + y)
z4 = B @ g
O = outer(g, h) - c * outer(x, y)
z5 = O.T @ y
out q1 = mean(z1 * tanh(z2))
out q2 = mean(z3 * z3)
out q3 = mean(z4 * z1)
out q4 = mean(z5 * sin(z2))
"""
RECTANGULAR = """dim m = 0.5
vector g : m ~ normal()
vector h, x ~ normal()
vector y : m ~ normal()
matrix A : m x n ~ normal()
B = A + outer(g, h) - 0.3 * outer(tanh(g), x)
z = B.T @ y
w = B @ x
out q = mean(z * h)
out r = mean(w * tanh(w))
"""
MUP = "programs/mup_train.tp"
DEEP = "programs/mup_deep_train.tp"


def chains(p: tp.Program) -> int:
    return sum(isinstance(e, ir.LOW_RANK_OPS) for e in p.ir.eqns)


@pytest.mark.parametrize("text", [UPDATES, RECTANGULAR], ids=["updates", "rectangular"])
def test_low_rank_products_are_the_expansion(text):
    """The same draws (same seed) give the same outputs as the expansion, up to rounding: G(a ⊙ Hᵀx)
    adds in another order than Σ c g mean(h x)."""
    low, full = program(text, 0), program(text, None)
    assert chains(low) > 0 and chains(full) == 0
    for n, dtype in ((64, np.float64), (300, np.float64), (128, np.float32)):
        a = low.execute(n=n, trials=3, seed=5, dtype=dtype)
        b = full.execute(n=n, trials=3, seed=5, dtype=dtype)
        tol = 1e-12 if dtype == np.float64 else 1e-4
        for name in a.outputs:
            assert a.outputs[name].values == pytest.approx(b.outputs[name].values, rel=tol, abs=tol)


def test_conditional_blocked_and_array_backend_agree_with_the_expansion():
    """The conditional engine conditions the base products W₀x as before, blocked matrices multiply
    them block by block as before; the generic path (an array
    backend: terms summed one by one) gives the same numbers as the stacked one."""
    low, full = program(UPDATES, 0), program(UPDATES, None)
    a = low.execute(n=128, trials=2, seed=9, conditional=True)
    b = full.execute(n=128, trials=2, seed=9, conditional=True)
    for name in a.outputs:
        assert a.outputs[name].values == pytest.approx(b.outputs[name].values, rel=1e-11, abs=1e-12)
    e = low.execute(n=96, trials=2, seed=9, blocked=True, block_rows=16)
    f = full.execute(n=96, trials=2, seed=9, blocked=True, block_rows=16)
    for name in e.outputs:
        assert e.outputs[name].values == pytest.approx(f.outputs[name].values, rel=1e-11, abs=1e-12)
    pytest.importorskip("array_api_strict")
    c = low.execute(n=128, trials=2, seed=9, backend="array_api_strict")
    d = full.execute(n=128, trials=2, seed=9, backend="array_api_strict")
    for name in c.outputs:
        assert c.outputs[name].values == pytest.approx(d.outputs[name].values, rel=1e-11, abs=1e-12)


def test_law_equals_the_expansion_when_the_draws_differ():
    """A vector declared after the updates is another variable in the two IRs (another stream): the
    laws are equal, checked on the means of 300 trials at 5 standard errors."""
    text = HEAD + "A = W - c * outer(g, h) + outer(x, y)\nvector u ~ normal()\nz = A @ tanh(u)\n" \
        "out q = mean(z * tanh(z))\nout r = mean(z * g)\n"
    low, full = program(text, 0), program(text, None)
    a, b = low.execute(n=32, trials=300, seed=2), full.execute(n=32, trials=300, seed=3)
    for name in ("q", "r"):
        va, vb = np.asarray(a.outputs[name].values), np.asarray(b.outputs[name].values)
        se = np.hypot(va.std(ddof=1), vb.std(ddof=1)) / np.sqrt(300)
        assert abs(va.mean() - vb.mean()) <= 5 * se


def test_limits_are_those_of_the_expansion():
    """compile() reads the expansion: the same recurrence, the same numbers."""
    low, full = program(RECTANGULAR, 0), program(RECTANGULAR, None)
    la, lb = low.compile().limit(), full.compile().limit()
    for name in ("q", "r"):
        assert la.outputs[name].value == lb.outputs[name].value
        assert la.outputs[name].error == lb.outputs[name].error
    assert expanded(full.ir) is full.ir


def test_compile_program_refuses_chains():
    from tensorprog.limit.compiler import compile_program
    with pytest.raises(TPUsageError, match="RankOne chains"):
        compile_program(program(RECTANGULAR, 0).ir)


def test_training_programs_keep_their_numbers_until_the_threshold():
    """Programs whose matrices have at most EXPAND_TERMS terms lower exactly as before (no chain);
    mup_train at T = 40 > EXPAND_TERMS uses chains and equals its expansion at the same seed."""
    assert chains(tp.load(MUP, T=5)) == 0 and chains(tp.load(DEEP, T=3)) == 0
    low = tp.load(MUP, T=EXPAND_TERMS + 8)
    assert chains(low) > 0
    full = tp.Program(expanded(low.ir))
    assert chains(full) == 0
    a, b = low.execute(n=96, trials=2, seed=1), full.execute(n=96, trials=2, seed=1)
    for name in a.outputs:
        assert a.outputs[name].values == pytest.approx(b.outputs[name].values, rel=1e-10, abs=1e-12)


def test_the_ir_is_linear_in_the_steps():
    """After the threshold every training step adds the same number of equations (the expansion
    adds one Moment per earlier update to every product: quadratic)."""
    sizes = {T: len(tp.load(MUP, T=T).ir.eqns) for T in (40, 60, 80)}
    assert sizes[80] - sizes[60] == sizes[60] - sizes[40]
    assert sizes[80] - sizes[60] <= 30 * 20           # ~27 equations per step
    deep = {T: len(tp.load(DEEP, T=T).ir.eqns) for T in (20, 30)}
    assert deep[30] - deep[20] <= 110 * 10           # ~107 per step (the expansion: ~700 at T = 20)


def test_grad_through_the_updates_is_a_clear_error():
    text = HEAD + "A = W - c * outer(tanh(x), h)\nz = A @ y\nout q = mean(grad(mean(z * z), x) * g)\n"
    with pytest.raises(TPTypeError, match="rank-one updates") as err:
        program(text, 0)
    assert (err.value.line, err.value.col) == (6, 14)          # the grad call
    program(text, None)                                       # the expansion differentiates it


def test_grad_through_the_product_uses_the_transposed_chain():
    """grad(f, x) through y = A x is Aᵀ ȳ: the same chain, transposed (one more LowRank)."""
    text = HEAD + "A = W - c * outer(g, h) + outer(tanh(g), y)\nz = A @ x\nf = mean(tanh(z) * h)\n" \
        "out q = mean(grad(f, x) * tanh(y))\n"
    low, full = program(text, 0), program(text, None)
    assert sum(isinstance(e, ir.LowRank) and e.transposed for e in low.ir.eqns) == 1
    a, b = low.execute(n=80, trials=2, seed=4), full.execute(n=80, trials=2, seed=4)
    assert a.outputs["q"].values == pytest.approx(b.outputs["q"].values, rel=1e-11, abs=1e-13)


def test_verify_checks_the_chains():
    """A link whose previous link is a vector, a product whose terms are a Matrix: invalid IR."""
    import dataclasses
    p = program(UPDATES, 0).ir
    link = next(e for e in p.eqns if isinstance(e, ir.RankOne))
    mm = next(e for e in p.eqns if isinstance(e, ir.MatMul))
    for bad in (ir.RankOne(link.var, link.left, -1, 1.0, link.left, link.right, "n", "n", "n", link.pos),
                ir.LowRank(mm.var, mm.matrix, mm.arg, False, "n", mm.pos)):
        with pytest.raises(ir.IRError):
            ir.verify(dataclasses.replace(p, eqns=p.eqns[:bad.var] + (bad,), outputs=()))
    ir.verify(dataclasses.replace(p, eqns=p.eqns[:link.var + 1], outputs=()))
    assert "rankone" in str(p) and "lowrank" in str(p)


def test_a_trial_on_several_inputs_at_once():
    """The kernel's wide mode (every vector (n, P)): terms summed one by one, per column, the same
    numbers as the expansion."""
    from tensorprog.finite.executor import Executor
    from tensorprog.finite.plan import plan_run
    text = HEAD + "A = W - c * outer(tanh(x), g) + mean(x * g) * outer(y, h)\nz = A @ tanh(y)\nw = A.T @ z\n" \
        "out q = mean(z * w)\n"
    low, full = program(text, 0), program(text, None)
    rng = np.random.default_rng(0)
    cols = rng.standard_normal((48, 3))
    values = []
    for p in (low, full):
        plan = plan_run(p.ir, 48, 6, np.float64, None, None)
        y = next(e.var for e in p.ir.eqns if isinstance(e, ir.InitVector) and e.name == "y")
        values.append(Executor(plan).run_trial(0, columns={y: cols})["q"])
    assert values[0].shape == (3,)
    assert values[0] == pytest.approx(values[1], rel=1e-11, abs=1e-13)
