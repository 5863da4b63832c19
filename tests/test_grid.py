"""GridTape (tensorprog.symbolic.grid): row / column / cell expressions against the reference
evaluator (tensorprog.symbolic.evaluate.Tape), space sorting, work arrays, JSON storage, errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import sympy as sp

from tensorprog.symbolic import heads as H
from tensorprog.symbolic.evaluate import Tape
from tensorprog.symbolic.grid import GridTape, Workspace

a, a2 = sp.symbols("a a2")          # row symbols: one value per row i (positive)
b, b2 = sp.symbols("b b2")          # column symbols (positive)
c, c2 = sp.symbols("c c2")          # cell symbols (c in (-0.9, 0.9), c2 positive)
ROWS, COLS, CELLS = (a, a2), (b, b2), (c, c2)
SYMBOLS = (*ROWS, *COLS, *CELLS)
R, C = 4, 5


def deep_chain(n: int = 200) -> sp.Expr:
    """e ← e·c + a, n times (a DAG deeper than Python's recursion would allow walked naively)."""
    e = a2
    for _ in range(n):
        e = e * c + a
    return e


EXPRESSIONS = [
    # nested Add/Mul with constants
    sp.Add(sp.Mul(2, a, b, evaluate=False), sp.Mul(3, sp.Add(c, 1, b, evaluate=False), a2, evaluate=False),
           sp.Rational(1, 3), evaluate=False),
    (a + 2 * b + 3) * (c * a2 + sp.pi) + 7 * (a * b2 - 1),
    sp.Add(a, 2, 3, b, evaluate=False),
    sp.Mul(a, 2, 3, c, evaluate=False),
    # negations
    a - b, c - a * b, -3 * a * b + c, a - c2, -c, 2 - a * c, a * b - a2 * b2 - c,
    # max / min
    sp.Max(a, b), sp.Min(a, c), sp.Max(a, b, c, sp.Rational(1, 2)), sp.Min(c, 0.25, b2, a2),
    sp.Max(a, a2, 1), sp.Max(c * a, c2 - b), sp.Min(sp.Max(c, -0.1), a),
    # abs, inverse trig, roots
    sp.Abs(c), sp.Abs(c * a - b), sp.asin(c), sp.acos(c * a / (a + 1)), sp.sqrt(a * b + c2),
    sp.asin(c) * a + sp.acos(c) * b,
    # powers
    a**2, (c + a)**2, c2**-1, (a + c2)**-1, sp.sqrt(c2 * b), (a * c2)**sp.Rational(-1, 2),
    c**3, (b + c)**-2, c2**2.5, a**b, c2**(a * b),
    # heads with numpy rules
    sp.exp(c * a), sp.log(c2 + a), sp.erf(c * b), sp.tanh(c + a2), sp.sin(a * c), sp.cos(b + c),
    sp.atan(c2), sp.sinh(c), sp.cosh(c * b), sp.erfc(c), sp.tan(c), sp.atan2(c, a),
    H.Relu(c), H.Step(c - 0.1), H.Sigmoid(a * c), H.Softplus(c * b2), H.Gelu(c), H.LeakyRelu(c, 0.1 * a),
    sp.sign(c), H.AbsF(c * b),
    # repeated arguments
    sp.Add(a, a, b, evaluate=False), sp.Mul(c, c, a, evaluate=False), sp.Add(c, c, c2, evaluate=False),
    sp.Max(c, c, a, evaluate=False),
    # a deep chain
    deep_chain(),
]

#: several outputs that share subexpressions (and an output that is a symbol, a constant)
SHARED = [
    sp.exp(a * c) + b,
    sp.exp(a * c) * sp.sqrt(a + b),
    sp.sqrt(a + b) - sp.exp(a * c),
    a,
    sp.Integer(3),
    c * a + a2,
    (c * a + a2)**2 + b2,
]


def inputs(rng: np.random.Generator, grid: bool, size: tuple[int, int] = (R, C)):
    """(rows, cols, cells) in grid form ((R, 1), (1, C), (R, C)) or list form ((P,) each)."""
    n, m = size
    if grid:
        rows = [rng.uniform(0.3, 1.5, (n, 1)) for _ in ROWS]
        cols = [rng.uniform(0.3, 1.5, (1, m)) for _ in COLS]
    else:
        rows = [rng.uniform(0.3, 1.5, n * m) for _ in ROWS]
        cols = [rng.uniform(0.3, 1.5, n * m) for _ in COLS]
    shape = (n, m) if grid else (n * m,)
    cells = [rng.uniform(-0.9, 0.9, shape), rng.uniform(0.2, 1.5, shape)]
    return rows, cols, cells


def close(got: np.ndarray, want: np.ndarray, rtol: float = 1e-13) -> bool:
    """Equal up to ``rtol`` relative (NaN where the reference has NaN)."""
    got, want = np.broadcast_arrays(np.asarray(got, float), np.asarray(want, float))
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return False
    ok = ~np.isnan(want)
    err = np.abs(got[ok] - want[ok])
    return bool(np.all(err <= rtol * np.maximum(np.abs(want[ok]), 1e-300) + 1e-300))


def label(e: sp.Basic) -> str:
    """A short test id (the deep chain's text is too deep to print)."""
    try:
        return str(e)[:40]
    except RecursionError:
        return "deep_chain"


def reference(exprs, rows, cols, cells) -> list[np.ndarray]:
    return Tape.compile(exprs, SYMBOLS)(*rows, *cols, *cells)


@pytest.mark.parametrize("grid", [True, False], ids=["grid", "list"])
@pytest.mark.parametrize("expr", EXPRESSIONS, ids=lambda e: label(e))
def test_matches_reference_evaluator(expr, grid):
    rows, cols, cells = inputs(np.random.default_rng(7), grid)
    tape = GridTape.compile([expr], ROWS, COLS, CELLS)
    got = tape(rows, cols, cells)[0]
    want = reference([expr], rows, cols, cells)[0]
    assert got.shape == want.shape == ((R, C) if grid else (R * C,))
    assert close(got, want), (expr, got, want)


@pytest.mark.parametrize("expr", [-a - b, -c - a * b, -a - a2, -c - c2, -a * b - c2 * b,
                                  c * (-a - b), sp.exp(-c - c2)],
                         ids=lambda e: str(e))
def test_sum_of_negations_only(expr):
    rows, cols, cells = inputs(np.random.default_rng(8), True)
    got = GridTape.compile([expr], ROWS, COLS, CELLS)(rows, cols, cells)[0]
    assert close(got, reference([expr], rows, cols, cells)[0])


@pytest.mark.parametrize("grid", [True, False], ids=["grid", "list"])
def test_several_outputs_sharing_subexpressions(grid):
    rows, cols, cells = inputs(np.random.default_rng(3), grid)
    tape = GridTape.compile(SHARED, ROWS, COLS, CELLS)
    got = tape(rows, cols, cells)
    want = reference(SHARED, rows, cols, cells)
    assert len(got) == len(SHARED)
    for g, w, e in zip(got, want, SHARED):
        assert g.shape == w.shape
        assert close(g, w), e
    # exp(a·c) is computed once, however many outputs use it
    assert sum(op.kind == "fn" and op.arg == "exp" for op in tape.ops) == 1


def test_all_expressions_in_one_tape():
    """All the expressions compiled together (sharing slots and registers) give the same values."""
    rows, cols, cells = inputs(np.random.default_rng(5), True)
    got = GridTape.compile(EXPRESSIONS, ROWS, COLS, CELLS)(rows, cols, cells)
    want = reference(EXPRESSIONS, rows, cols, cells)
    for g, w, e in zip(got, want, EXPRESSIONS):
        assert close(g, w), e


# ---- spaces -----------------------------------------------------------------------------------

def test_row_only_expression_has_only_row_operations():
    e = sp.exp(a * a2) + sp.sqrt(a) * 3 - a2**2
    tape = GridTape.compile([e], ROWS, COLS, CELLS)
    assert tape.counts["row"] > 0 and tape.counts["col"] == 0 and tape.counts["cell"] == 0
    rows, cols, cells = inputs(np.random.default_rng(1), True)
    got = tape(rows, cols, cells)[0]
    assert got.shape == (R, C)
    assert close(got, reference([e], rows, cols, cells)[0])


def test_column_only_expression_has_only_column_operations():
    tape = GridTape.compile([sp.log(b * b2) + sp.Max(b, 0.7)], ROWS, COLS, CELLS)
    assert tape.counts == {"row": 0, "col": tape.counts["col"], "cell": 0} and tape.counts["col"] > 0


def test_sum_regrouped_by_space_has_one_cell_operation():
    tape = GridTape.compile([sp.Add(a * 2, a**2, b, c, evaluate=False)], [a], [b], [c])
    assert tape.counts["cell"] == 1
    assert tape.counts["col"] == 0
    assert tape.counts["row"] == 3              # 2a, a², 2a + a²


def test_product_and_max_regrouped_by_space():
    e1 = sp.Mul(a, b, 3, a2, b2, c, 2, evaluate=False)
    e2 = sp.Max(a, b, a2, c, b2, 1)
    for e in (e1, e2):
        tape = GridTape.compile([e], ROWS, COLS, CELLS)
        assert tape.counts["cell"] == 1, e
        rows, cols, cells = inputs(np.random.default_rng(2), True)
        assert close(tape(rows, cols, cells)[0], reference([e], rows, cols, cells)[0])


def test_constants_folded_and_negation_becomes_subtraction():
    tape = GridTape.compile([sp.Add(a, 2, 3, b, evaluate=False)], [a], [b], [])
    used = [tape.consts[k] for op in tape.ops for k in op.args if k in tape.consts]
    assert used == [5.0] and len(tape.ops) == 2             # a + 5 (row), then + b (cell)
    tape = GridTape.compile([a * b - c], [a], [b], [c])
    assert [op.kind for op in tape.ops] == ["mul", "add"]          # no multiplication by −1 left
    assert tape.ops[-1].arg == (1, -1)
    assert all(tape.consts.get(k) != -1.0 for op in tape.ops for k in op.args)


def test_dead_operations_are_dropped():
    """The −1·y that a subtraction replaced is not computed."""
    tape = GridTape.compile([c - a * c2], [a], [], [c, c2])
    assert len(tape.ops) == 2
    rows, cols, cells = [np.array([0.5, 2.0])], [], [np.array([1.0, 3.0]), np.array([4.0, 5.0])]
    assert np.array_equal(tape(rows, cols, cells)[0], [1.0 - 2.0, 3.0 - 10.0])


# ---- work arrays --------------------------------------------------------------------------------

def test_workspace_reuse_gives_right_values_each_call():
    exprs = [deep_chain(30), sp.exp(a * c) * sp.sqrt(c2 + b) - sp.Max(c, b2 * a), (c * a2 + b)**-2]
    tape = GridTape.compile(exprs, ROWS, COLS, CELLS)
    assert tape.nregisters >= 1
    work = Workspace()
    rng = np.random.default_rng(11)
    for grid, size in [(True, (R, C)), (True, (R, C)), (True, (7, 9)), (False, (3, 2)), (True, (2, 3))]:
        first_in = inputs(rng, grid, size)
        first = [np.array(x, copy=True) for x in tape(*first_in, work=work)]
        second_in = inputs(rng, grid, size)
        second = tape(*second_in, work=work)
        for got, want in zip(first, reference(exprs, *first_in)):
            assert close(got, want)
        for got, want in zip(second, reference(exprs, *second_in)):
            assert close(got, want)


def test_call_checks_the_number_of_arrays():
    tape = GridTape.compile([a + b], [a], [b], [])
    with pytest.raises(ValueError):
        tape([np.ones(2)], [], [])


# ---- JSON storage -------------------------------------------------------------------------------

def test_json_round_trip_is_bit_identical():
    exprs = [*EXPRESSIONS, *SHARED]
    tape = GridTape.compile(exprs, ROWS, COLS, CELLS)
    text = json.dumps(tape.to_json())
    assert "lambda" not in text and "import" not in text and "<" not in text
    again = GridTape.from_json(json.loads(text))
    for grid in (True, False):
        args = inputs(np.random.default_rng(9), grid)
        for x, y in zip(tape(*args), again(*args)):
            assert np.array_equal(x, y, equal_nan=True)
    assert again.to_json() == json.loads(text)


def test_json_holds_exponents_and_heads_as_data():
    tape = GridTape.compile([c2**2.5 + sp.sqrt(c2) + sp.erf(c) + c2**a], [a], [], [c, c2])
    data = tape.to_json()
    ops = data["ops"]
    assert ["pow", [1, 2]] in [op[:2] for op in ops]
    assert ["pow", 2.5] in [op[:2] for op in ops]
    assert ["fn", "erf"] in [op[:2] for op in ops] and ["fn", "Pow"] in [op[:2] for op in ops]
    for op in ops:
        json.dumps(op)


def stored() -> dict:
    return json.loads(json.dumps(GridTape.compile([sp.erf(a * c) - b], [a], [b], [c]).to_json()))


@pytest.mark.parametrize("spoil", ["kind", "head", "missing_ops", "missing_outputs", "missing_nsymbols",
                                   "not_a_dict", "short_op", "pow_text", "head_not_text"])
def test_from_json_rejects_malformed_data(spoil):
    data = stored()
    fn = next(k for k, op in enumerate(data["ops"]) if op[0] == "fn")
    if spoil == "kind":
        data["ops"][0][0] = "subtract"
    elif spoil == "head":
        data["ops"][fn][1] = "__import__"
    elif spoil.startswith("missing_"):
        del data[spoil[len("missing_"):]]
    elif spoil == "not_a_dict":
        data = [data]
    elif spoil == "short_op":
        data["ops"][0] = data["ops"][0][:2]
    elif spoil == "pow_text":
        data["ops"].append(["pow", "x", [0], 99])
    elif spoil == "head_not_text":
        data["ops"][fn][1] = ["erf"]
    with pytest.raises(ValueError):
        GridTape.from_json(data)


@pytest.mark.parametrize("spoil", ["zero_denominator", "undefined_slot", "wrong_arity", "short_fold"])
def test_from_json_rejects_inconsistent_data(spoil):
    data = stored()
    fn = next(k for k, op in enumerate(data["ops"]) if op[0] == "fn")
    if spoil == "wrong_arity":
        data["ops"][fn][1] = "atan2"                  # a binary head given one argument
    elif spoil == "short_fold":
        data["ops"].append(["mul", None, [0], data["nslots"]])
        data["nslots"] += 1
    elif spoil == "zero_denominator":
        data["ops"].append(["pow", [1, 0], [0], data["nslots"]])
        data["nslots"] += 1
    else:
        data["ops"][-1][2][0] = 10 ** 6
    with pytest.raises(ValueError):
        GridTape.from_json(data)


# ---- errors -------------------------------------------------------------------------------------

def test_unknown_symbol_raises():
    x = sp.Symbol("x")
    with pytest.raises(ValueError, match="unknown symbol"):
        GridTape.compile([a + x], [a], [b], [c])


def test_dirac_delta_raises():
    with pytest.raises(ValueError, match="Dirac"):
        GridTape.compile([H.Delta(c) * a], [a], [b], [c])


def test_symbol_given_twice_raises():
    with pytest.raises(ValueError):
        GridTape.compile([a], [a], [a], [])


def test_function_without_numeric_rule_raises():
    f = sp.Function("f")
    with pytest.raises(ValueError):
        GridTape.compile([f(a)], [a], [], [])
