"""The executor's strategies (tensorprog/finite/ops.py, layout.py): every equation kind has a rule, the
backend's operations are chosen once, and the two layouts agree — a wide trial (P inputs side by side)
gives, in the column of the trial's own input, the narrow trial's outputs, on numpy and on an
array-API backend, through every rule (batched GEMMs, a broadcast function of scalars, moments,
scalars, a RankOne link, batched LowRank products)."""
from __future__ import annotations

import typing

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import ir
from tensorprog.finite.executor import FUNCTION_RULES, STEP_RULES, Executor
from tensorprog.finite.layout import Narrow, Wide
from tensorprog.finite.ops import ArrayApiOps, NumpyOps
from tensorprog.finite.plan import plan_run
from tensorprog.lang.lower import lower
from tensorprog.lang.parser import parse_text

#: a, b: one GEMM of two columns; g: a function of scalars only (broadcast); A: a RankOne link;
#: d and d2: two LowRank products by A.T in one step; e: a LowRank product by A
SOURCE = """param c = 0.7
vector x, y ~ normal(cov=[[1, 0.3], [0.3, 1]])
matrix W ~ normal(var=2)
a = W @ x
b = W @ y
s = mean(a * b)
g = grad(mean(a) * mean(x * x), a)
A = W - c * outer(tanh(a), b)
d = A.T @ relu(a)
d2 = A.T @ tanh(b)
e = A @ g
out q1 = mean(d * e) / (s ** 2 + 1)
out q2 = mean(tanh(d) * x) + s * c
out q3 = mean(d2 * d)
"""


def program() -> ir.Program:
    """SOURCE with every updated matrix as a RankOne chain (LowRank products)."""
    return tp.Program(lower(parse_text(SOURCE), {}, source=SOURCE, expand_terms=0)).ir


def test_every_equation_kind_has_a_rule():
    run = set(typing.get_args(ir.Eqn)) - {ir.Matrix, ir.InitVector}     # drawn, not run
    assert set(STEP_RULES) == run
    assert set(FUNCTION_RULES) == set(ir.FUNCTION_OPS)
    kinds = {type(e) for e in program().eqns}
    assert kinds == set(typing.get_args(ir.Eqn))                       # SOURCE exercises them all


@pytest.mark.parametrize("backend, ops", [("numpy", NumpyOps), ("array_api_strict", ArrayApiOps)])
def test_the_backend_picks_its_operations_once(backend, ops):
    pytest.importorskip(backend)
    ex = Executor(plan_run(program(), 16, 0, np.float64, None, None, backend=backend))
    assert type(ex.ops) is ops
    assert isinstance(ex.narrow, Narrow) and isinstance(ex.wide, Wide)
    assert ex.narrow.stacks_links == (backend == "numpy") and not ex.wide.stacks_links


@pytest.mark.parametrize("backend", ["numpy", "array_api_strict"])
def test_a_wide_trial_holds_the_narrow_trial_in_its_own_column(backend):
    """Columns [x, x', x''] for the initial vector x, x its own draw in the trial: column 0 of every
    output is the narrow trial's output (the other columns are other inputs: other values)."""
    pytest.importorskip(backend)
    p = program()
    n, trial = 40, 3
    ex = Executor(plan_run(p, n, 11, np.float64, None, None, backend=backend))
    narrow = ex.run_trial(trial)
    x = next(e.var for e in p.eqns if isinstance(e, ir.InitVector) and e.name == "x")
    group = next(g for g in p.groups if x in g.members)
    own = ex.ops.to_host(ex.ops.vectors(trial, group, n))[group.members.index(x)]
    others = np.random.default_rng(5).standard_normal((n, 2))
    wide = ex.run_trial(trial, columns={x: np.column_stack([own, others])})
    assert set(wide) == set(narrow) == {"q1", "q2", "q3"}
    for name, value in narrow.items():
        assert isinstance(value, float) and wide[name].shape == (3,)
        assert wide[name][0] == pytest.approx(value, rel=1e-12, abs=1e-14)
        assert abs(wide[name][1] - value) > 1e-6 * (1 + abs(value))
