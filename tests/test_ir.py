"""The IR package: the walker (fold, subtrees, preorder, map_refs, refs, calls), the printer, and
the verifier run after lowering (every shipped program passes; hand-broken IR is refused with an
``IRError`` naming the equation).  Also the back ends' use of the walker: numpy's semantics of
``/`` on Python floats in the executor, sympy numbers for constants in ``to_sympy``."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog import ir
from tensorprog.finite.evaluate import DIVISION_BY_ZERO, eval_fn, first_nonfinite

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = sorted((ROOT / "programs").rglob("*.tp"))

x, y = ir.Ref(0), ir.Ref(1)
TANH_X = ir.Call("tanh", (x,))
TREE = ir.Bin("+", ir.Bin("*", ir.Const(2.0), TANH_X), ir.Neg(ir.Bin("/", y, TANH_X)))   # 2 tanh x + -(y / tanh x)


# ---- the walker ---------------------------------------------------------------------------------------------
def numeric_rules(env: dict[int, float], seen: list) -> ir.Rules:
    def call(node, args):
        seen.append(node.name)
        return {"tanh": np.tanh, "relu": lambda v: max(v, 0.0)}[node.name](*args)
    return ir.Rules(ref=lambda node: env[node.var], const=lambda node: node.value, call=call)


def test_fold_applies_one_rule_per_node_kind_with_arithmetic_defaults():
    seen: list = []
    got = ir.fold(TREE, numeric_rules({0: 0.3, 1: 1.5}, seen))
    assert got == pytest.approx(2 * np.tanh(0.3) - 1.5 / np.tanh(0.3))
    assert seen == ["tanh"]                              # the shared tanh(x) object is folded once


def test_fold_folds_equal_copies_separately_and_shares_a_memo_across_trees():
    seen: list = []
    rules = numeric_rules({0: 0.3}, seen)
    copy = ir.Call("tanh", (ir.Ref(0),))
    ir.fold(ir.Bin("+", TANH_X, copy), rules)
    assert seen == ["tanh", "tanh"]
    memo: dict = {}
    ir.fold(TANH_X, rules, memo)
    ir.fold(ir.Neg(TANH_X), rules, memo)
    assert seen == ["tanh"] * 3


def test_fold_goes_bottom_up_left_to_right_and_is_not_bounded_by_the_stack():
    order: list = []
    ir.fold(TREE, ir.Rules(ref=lambda n: order.append(f"%{n.var}"), const=lambda n: order.append(n.value),
                           call=lambda n, a: order.append(n.name), bin=lambda n, a, b: order.append(n.op),
                           neg=lambda n, a: order.append("neg")))
    assert order == [2.0, "%0", "tanh", "*", "%1", "/", "neg", "+"]
    deep: ir.Fn = x
    for _ in range(20_000):
        deep = ir.Neg(deep)
    assert ir.fold(deep, ir.Rules(ref=lambda n: 1.0, const=lambda n: 0.0, call=None)) == 1.0


def test_fold_refuses_what_is_not_a_node():
    with pytest.raises(TypeError, match="not a function tree node"):
        ir.fold(ir.Neg("x"), ir.Rules(ref=lambda n: 0, const=lambda n: 0, call=lambda n, a: 0))


def test_children_subtrees_and_preorder():
    assert ir.children(TREE) == (TREE.lhs, TREE.rhs) and ir.children(TANH_X) == (x,)
    assert ir.children(ir.Neg(y)) == (y,) and ir.children(x) == () and ir.children(ir.Const(1.0)) == ()
    twice = ir.Bin("-", ir.Call("tanh", (ir.Ref(0),)), ir.Call("tanh", (ir.Ref(0),)))   # equal, not shared
    assert list(ir.subtrees(twice)) == [twice, twice.lhs, x]
    assert list(ir.preorder(twice)) == [twice, twice.lhs, twice.lhs.args[0], twice.rhs, twice.rhs.args[0]]
    shared = list(ir.preorder(TREE))
    assert len(shared) == 8 and sum(n is TANH_X for n in shared) == 1      # 10 tree nodes, tanh x shared


def test_map_refs_replaces_leaves_and_keeps_the_rest():
    got = ir.map_refs(TREE, lambda r: ir.Ref(r.var + 10))
    want = ir.Bin("+", ir.Bin("*", ir.Const(2.0), ir.Call("tanh", (ir.Ref(10),))),
                  ir.Neg(ir.Bin("/", ir.Ref(11), ir.Call("tanh", (ir.Ref(10),)))))
    assert got == want
    assert ir.map_refs(TREE, lambda r: r) == TREE


def test_refs_in_order_of_first_appearance_and_calls():
    fn = ir.Bin("*", ir.Ref(4), ir.Call("max", (ir.Ref(2), ir.Neg(ir.Call("relu", (ir.Ref(4),))))))
    assert ir.refs(fn) == (4, 2)
    assert ir.refs(TREE) == (0, 1) and ir.refs(ir.Const(1.0)) == ()
    assert ir.calls(fn) == {"max", "relu"} and ir.calls(x) == set()


def test_arithmetic_is_the_operator_table():
    assert set(ir.ARITHMETIC) == {"+", "-", "*", "/", "**"}
    assert [ir.ARITHMETIC[op](6.0, 3.0) for op in "+-*/"] == [9.0, 3.0, 18.0, 2.0]
    assert ir.ARITHMETIC["**"](2.0, 3.0) == 8.0


# ---- the back ends through the walker -------------------------------------------------------------------------
def test_numpy_evaluation_divides_python_floats_like_numpy():
    read = {0: 1.0, 1: 0.0}.__getitem__                 # the executor's scalars are Python floats
    with np.errstate(all="ignore"):
        assert eval_fn(ir.Bin("/", x, y), read) == np.inf
        assert eval_fn(ir.Bin("/", ir.Const(1.0), ir.Const(0.0)), read) == np.inf
        assert np.isnan(eval_fn(ir.Bin("**", ir.Const(-8.0), ir.Const(1 / 3)), read))
    cause = first_nonfinite(ir.Call("tanh", (ir.Bin("/", x, y),)), read)
    assert cause.event == DIVISION_BY_ZERO and cause.describe() == "division by zero (inf) in '/'"
    assert first_nonfinite(TREE, {0: 0.3, 1: 1.5}.__getitem__) is None


def test_numpy_evaluation_of_a_tree():
    xs = np.linspace(-1.0, 1.0, 4)
    got = eval_fn(TREE, {0: xs, 1: 2 * xs}.__getitem__)
    np.testing.assert_allclose(got, 2 * np.tanh(xs) - 2 * xs / np.tanh(xs))


def test_to_sympy_makes_constants_sympy_numbers_before_the_operator():
    sp = pytest.importorskip("sympy")
    from tensorprog.symbolic.functions import shape, to_sympy
    c = ir.Const
    assert to_sympy(ir.Bin("/", c(1.0), c(2.0)), None) == sp.Rational(1, 2)   # not 0.5, not 0
    assert to_sympy(ir.Bin("**", c(2.0), c(-1.0)), None) == sp.Rational(1, 2)
    assert to_sympy(ir.Bin("/", c(1.0), c(0.0)), None) is sp.zoo                # not ZeroDivisionError
    s0, s1 = sp.symbols("s0 s1")
    assert to_sympy(TREE, [s0, s1].__getitem__) == 2 * sp.tanh(s0) - s1 / sp.tanh(s0)
    assert shape(TREE) == (4, 10) and shape(x) == (0, 1)


# ---- the printer ----------------------------------------------------------------------------------------------
SMALL = """vector x ~ normal()
matrix W ~ normal(var=2)
h = W @ tanh(x)
c = mean(h * -x)
out o = c / 2
out c = c
"""


def test_printer_shows_a_small_program():
    assert str(tp.parse(SMALL).ir) == "\n".join([
        "%0 = init x (group 0.0) :n    # line 1",
        "%1 = matrix W normal(var=2) nxn    # line 2",
        "%2 = nonlin tanh(%0)    # line 3",
        "%3 = matmul %1 @ %2    # line 3",
        "%4 = moment (%3 * -%0)    # line 4",
        "%5 = scalar (%4 / 2)    # line 5",
        "out o = %5",
        "out c = %4"])
    assert ir.show_fn(TREE) == "((2 * tanh(%0)) + -(%1 / tanh(%0)))"


# ---- the verifier ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_every_shipped_program_verifies(path):
    program = tp.load(str(path)).ir
    assert ir.verify(program) is program


def small() -> ir.Program:
    return tp.parse(SMALL).ir


def broken(program: ir.Program, var: int, **fields) -> ir.Program:
    eqns = list(program.eqns)
    eqns[var] = dataclasses.replace(eqns[var], **fields)
    return dataclasses.replace(program, eqns=tuple(eqns))


def refused(program: ir.Program, where: str, why: str) -> ir.IRError:
    with pytest.raises(ir.IRError) as err:
        ir.verify(program)
    assert err.value.where == where and why in err.value.why, str(err.value)
    assert str(err.value).startswith(f"invalid IR at {where}: ")
    return err.value


def test_use_before_bind_is_refused():
    p = small()
    refused(broken(p, 2, fn=ir.Call("tanh", (ir.Ref(3),)), args=(3,)), "%2 = nonlin tanh(%3)",
            "reads %3 before it is bound")
    refused(broken(p, 3, arg=3), "%3 = matmul %1 @ %3", "reads %3 before it is bound")


def test_double_bind_is_refused():
    p = small()
    twice = dataclasses.replace(p, eqns=p.eqns[:3] + (dataclasses.replace(p.eqns[3], var=2),) + p.eqns[4:])
    refused(twice, "%2 = matmul %1 @ %2", "binds %2 at position 3")


def test_matmul_on_a_non_matrix_and_of_the_wrong_width_is_refused():
    p = small()
    refused(broken(p, 3, matrix=0), "%3 = matmul %0 @ %2", "%0 is not a Matrix but InitVector")
    dims = dataclasses.replace(p, dims={"n": 1.0, "m": 0.5})
    narrow = broken(dims, 1, rows="m", cols="m")
    refused(narrow, "%3 = matmul %1 @ %2", "the matrix maps m-vectors, but %2 has width n")
    refused(broken(broken(dims, 1, rows="m"), 3, width="n"), "%3 = matmul %1 @ %2",
            "the result has width n, not the matrix's output width m")


def test_wrong_arity_and_unknown_builtins_are_refused():
    p = small()
    refused(broken(p, 2, fn=ir.Call("tanh", (x, x))), "%2 = nonlin tanh(%0, %0)",
            "tanh takes 1 argument(s), not 2")
    refused(broken(p, 2, fn=ir.Call("sinh", (x,))), "%2 = nonlin sinh(%0)", "sinh is not a builtin")


def test_args_kinds_and_widths_of_function_equations_are_checked():
    p = small()
    refused(broken(p, 2, args=()), "%2 = nonlin tanh(%0)", "args () are not the variables its function reads (0,)")
    refused(broken(p, 5, fn=ir.Bin("/", ir.Ref(3), ir.Const(2.0)), args=(3,)), "%5 = scalar (%3 / 2)",
            "reads %3, a vector (a Scalar reads scalars only)")
    refused(broken(p, 2, fn=ir.Call("tanh", (ir.Ref(1),)), args=(1,)), "%2 = nonlin tanh(%1)",
            "reads %1, a Matrix")
    refused(broken(p, 2, width="m"), "%2 = nonlin tanh(%0)", "the width 'm' is not declared")


def test_an_output_of_a_vector_is_refused():
    p = small()
    vector_out = dataclasses.replace(p, outputs=(dataclasses.replace(p.outputs[0], var=3),))
    refused(vector_out, "out o = %3", "an output must be a scalar, and %3 is a MatMul")


def test_groups_must_list_their_initial_vectors():
    p = small()
    refused(dataclasses.replace(p, groups=(dataclasses.replace(p.groups[0], members=(2,)),)),
            "%0 = init x (group 0.0) :n", "it is not member 0 of group 0")


def test_an_ir_error_is_a_bug_not_a_user_error():
    assert issubclass(ir.IRError, AssertionError) and not issubclass(ir.IRError, tp.TPError)
