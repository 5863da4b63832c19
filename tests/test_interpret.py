"""Evaluation strategies as interpretations (tensorprog/limit/interpret.py): the compiler asks the
compile's one interpretation what its numbers are, and a batch compile's replay record is one
frozen object assembled from the numbers as they were made."""
import dataclasses

import numpy as np
import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.errors import TPUsageError
from tensorprog.limit.batch import BatchRecord
from tensorprog.limit.compiler import CompileOptions, Compiler, compile_program, interpretation
from tensorprog.limit.interpret import Batched, Exact, Numbers, Params
from tensorprog.limit.replay import record

PAIR = """
param rho = 0.3
vector x, y ~ normal(cov=[[1, rho], [rho, 2]])
matrix W ~ normal(var=2)
a = W @ relu(x)
b = W @ relu(y)
out k = mean(relu(a) * relu(b))
out q = mean(a * a)
"""


def pair_covs(P: int) -> np.ndarray:
    """P covariances [[1, c], [c, 2]] with c spread over (-1.2, 1.2)."""
    c = np.linspace(-1.2, 1.2, P)
    return np.stack([np.array([[1.0, v], [v, 2.0]]) for v in c])


def test_front_door_picks_the_interpretation():
    assert type(interpretation()) is Numbers
    assert type(interpretation(symbolic=True)) is Exact
    assert type(interpretation(True, symbolic_covs={0: sp.eye(2)}, param_values={sp.Symbol("p"): 1.0})) is Params
    assert type(interpretation(batch_covs={0: pair_covs(3)})) is Batched


def test_a_batch_compile_takes_no_symbolic_option():
    program = tp.parse(PAIR).ir
    with pytest.raises(TPUsageError, match="batch_covs"):
        compile_program(program, symbolic=True, batch_covs={0: pair_covs(3)})


def test_the_builder_with_an_interpretation_equals_the_front_door():
    """Compiler(program, Exact()) is compile_program(program, symbolic=True): the same closed forms."""
    program = tp.parse(PAIR).ir
    direct = Compiler(program, Exact(), CompileOptions()).run().limit().outputs
    front = compile_program(program, symbolic=True).limit().outputs
    numeric = compile_program(program).limit().outputs
    for name in ("k", "q"):
        assert direct[name].exact is not None and sp.simplify(direct[name].exact - front[name].exact) == 0
        assert direct[name].value == front[name].value
        assert numeric[name].exact is None
        assert abs(numeric[name].value - front[name].value) <= numeric[name].error + front[name].error


def test_batched_values_equal_one_compile_per_covariance():
    """The Batched interpretation on P covariances gives, item by item, what Numbers gives on each."""
    covs = pair_covs(5)
    program = tp.parse(PAIR).ir
    batch = compile_program(program, batch_covs={0: covs}).limit().outputs
    for p in (0, 2, 4):
        one = tp.parse(PAIR, rho=float(covs[p, 0, 1])).compile().limit().outputs
        for name in ("k", "q"):
            tol = one[name].error + batch[name].error[p]
            assert abs(batch[name].value[p] - one[name].value) <= tol, (name, p)


def test_the_zero_dot_coefficient_is_decided_by_the_interpretation():
    """An interpretation that calls every Ż coefficient zero compiles the gradient independence
    assumption: the same limits as zdot=False, and different from the full rule."""
    class NoZdot(Numbers):
        def zero(self, coeff):
            return True
    program = tp.load("programs/sgd_two_layer.tp").ir
    dropped = Compiler(program, NoZdot()).run().limit().outputs["f1"]
    gia = compile_program(program, zdot=False).limit().outputs["f1"]
    full = compile_program(program).limit().outputs["f1"]
    assert dropped.value == gia.value
    assert abs(full.value - gia.value) > 10 * (full.error + gia.error)


def test_the_batch_record_is_frozen_data_with_its_sources():
    compiled = compile_program(tp.parse(PAIR).ir, batch_covs={0: pair_covs(4)})
    made = compiled.batch_record
    assert isinstance(made, BatchRecord) and made.unreplayable is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.unreplayable = "no"
    kinds = {source[0] for source in made.sources.values()}
    assert kinds == {"input", "estimate"}
    # the varying input entry (1, 0) is a symbol with its source; (0, 0) and (1, 1) are agreed constants
    assert ("input", 0, 1, 0) in made.sources.values()
    assert {s for s, _ in made.constants} >= {("input", 0, 0, 0), ("input", 0, 1, 1)}
    assert set(made.notes) == set(range(len(compiled.estimates)))
    assert record(compiled, ["k", "q"]) is not None


def test_unreplayable_is_a_value_with_its_reason():
    """A Haar-orthogonal matrix used transposed makes its coefficients on the batch's arrays: the
    record says so, and no replay is made from it; the values are those of one compile per item
    (a residual's tolerance per item: this batch compile raised a ValueError before)."""
    text = ("vector x, y ~ normal(cov=[[1, 0.5], [0.5, 1]])\nmatrix O ~ orthogonal()\n"
            "a = O @ x\nb = O @ y\nc = O.T @ tanh(a)\nout k = mean(c * y)\n")
    covs = pair_covs(3) / 2
    compiled = compile_program(tp.parse(text).ir, batch_covs={0: covs})
    assert "Haar" in compiled.batch_record.unreplayable
    assert record(compiled, ["k"]) is None
    batch = compiled.limit().outputs["k"]
    for p in range(3):
        one = tp.parse(text.replace("[[1, 0.5], [0.5, 1]]", str(covs[p].tolist()))).compile()
        assert one.batch_record is None and one.batch is None
        k = one.limit().outputs["k"]
        assert abs(batch.value[p] - k.value) <= batch.error[p] + k.error, p
    assert abs(batch.value[0]) > 0.4                    # not a vacuous agreement
