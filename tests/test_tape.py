"""The one numeric tape (tensorprog.symbolic.tape) and the grid's space pass over it
(tensorprog.symbolic.grid.regroup): the grid tape computes what its own tape computes entry by
entry, the pass changes nothing with every input in one space, a plain tape round-trips as JSON."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import sympy as sp

from tensorprog.symbolic.grid import CELL, COL, CONST, ROW, GridTape, derived_spaces, regroup
from tensorprog.symbolic.hermite import pack
from tensorprog.symbolic.mehler import (DiagonalSlope, Mean, MeanCurve, MehlerCurve, MehlerError, MehlerSlope,
                                        MehlerValue, T, diagonal_slope, hermite_head, mean_curve, mehler_curve,
                                        mehler_slope)
from tensorprog.symbolic.tape import Tape

from test_grid import CELLS, COLS, EXPRESSIONS, ROWS, SHARED, SYMBOLS, inputs

NSYMBOLS = (len(ROWS), len(COLS), len(CELLS))


def full(arrays, shape):
    """The arrays broadcast to the grid's shape (every input a cell)."""
    return [np.broadcast_to(x, shape) for x in arrays]


@pytest.mark.parametrize("grid", [True, False], ids=["grid", "list"])
def test_grid_pass_equals_its_tape_entry_by_entry(grid):
    """The regrouped tape, run entry by entry on full arrays (every input in one space), gives
    bit for bit what the grid tape gives with its row and column operations done once per input
    and its cell operations in registers: the space analysis decides where, not what."""
    tape = Tape.compile([*EXPRESSIONS, *SHARED], SYMBOLS)
    grid_tape = GridTape.of(tape, NSYMBOLS)
    flat = Tape(tape.ninputs, *regroup(tape, NSYMBOLS))
    assert [op.kind for op in flat.ops] == [op.kind for op in grid_tape.ops]
    rows, cols, cells = inputs(np.random.default_rng(13), grid)
    got = grid_tape(rows, cols, cells)
    shape = got[0].shape
    want = flat(*full([*rows, *cols, *cells], shape))
    assert len(got) == len(want) == len(EXPRESSIONS) + len(SHARED)
    for g, w in zip(got, want):
        assert g.shape == w.shape == shape
        assert np.array_equal(g, w, equal_nan=True)
    assert grid_tape.counts["row"] > 0 and grid_tape.counts["col"] > 0 and grid_tape.counts["cell"] > 0


def test_pass_with_every_input_in_one_space_changes_nothing():
    """regroup with all inputs rows is the tape itself (same operations, renumbered slots)."""
    tape = Tape.compile([*EXPRESSIONS, *SHARED], SYMBOLS)
    nslots, consts, ops, outputs = regroup(tape, (len(SYMBOLS), 0, 0))
    assert [(op.kind, op.arg, len(op.args)) for op in ops] == [(op.kind, op.arg, len(op.args)) for op in tape.ops]
    assert sorted(consts.values()) == sorted(tape.consts.values())
    rows, cols, cells = inputs(np.random.default_rng(4), False)
    args = [*rows, *cols, *cells]
    for g, w in zip(Tape(tape.ninputs, nslots, consts, ops, outputs)(*args), tape(*args)):
        assert np.array_equal(g, w, equal_nan=True)


def test_spaces_are_derived_from_the_inputs():
    a, b, c = sp.symbols("a b c")
    tape = Tape.compile([sp.exp(a) + 1, sp.log(b), sp.exp(a) * sp.log(b), c * a, sp.Integer(2)], [a, b, c])
    grid = GridTape.of(tape, (1, 1, 1))
    spaces = derived_spaces(grid.ops, grid.consts, (1, 1, 1))
    assert [spaces[o] for o in grid.outputs] == [ROW, COL, CELL, CELL, CONST]
    with pytest.raises(ValueError):
        GridTape.of(tape, (1, 1, 0))


def test_series_pass_keeps_hermite_a_row_operation_and_rejects_a_cell_variance():
    a, b, c = sp.symbols("a b c")
    H = hermite_head(sp.tanh(T), 128, 0.04)
    value = MehlerValue(H(a), H(b), c / sp.sqrt(a * b), sp.Float(1e-12))
    tape = Tape.compile([value, MehlerError(H(a), H(b), c / sp.sqrt(a * b), sp.Float(1e-12)), Mean(H(a))],
                        [a, b, c])
    grid = GridTape.of(tape, (1, 1, 1))
    hermites = [op for op in grid.ops if op.kind == "hermite"]
    assert len(hermites) == 2 and {grid.spaces[op.out] for op in hermites} == {ROW, COL}
    assert len({id(op.arg) for op in hermites}) == 1             # one function, one coefficient table
    A, B = np.array([[0.5], [1.2]]), np.array([[0.7, 1.0, 1.3]])
    C = 0.4 * np.sqrt(A * B)
    got = grid([A], [B], [C])
    want = Tape(tape.ninputs, *regroup(tape, (1, 1, 1)))(*full([A, B, C], (2, 3)))
    assert np.all(np.isfinite(got[0])) and np.all(got[1] < 1e-10)
    for g, w in zip(got, want):
        assert np.array_equal(g, w)
    with pytest.raises(ValueError, match="depends on the pair"):
        GridTape.of(Tape.compile([Mean(H(c))], [a, b, c]), (1, 1, 1))


def test_error_heads_of_the_replay_are_tape_operations():
    """The heads a replay's propagated error is written in (limit/replay.py): |x| and the series'
    slopes, evaluated as the numpy functions of symbolic/mehler.py and kept by a JSON round trip."""
    a, b, c = sp.symbols("a b c", real=True)
    H = hermite_head(sp.tanh(T), 32, 0.05)
    rho = c / sp.sqrt(a * b)
    exprs = [sp.Abs(c - a, evaluate=False), MehlerSlope(H(a), H(b), rho), MehlerCurve(H(a), H(b), rho),
             MeanCurve(H(a)), DiagonalSlope(H(a))]
    tape = Tape.compile(exprs, [a, b, c])
    A, B, C = np.array([0.5, 1.2]), np.array([0.7, 1.3]), np.array([0.1, -0.6])
    PA, PB = pack(np.tanh, 32, 0.05, A), pack(np.tanh, 32, 0.05, B)
    r = C / np.sqrt(A * B)
    want = [np.abs(C - A), mehler_slope(PA, PB, r), mehler_curve(PA, PB, r), mean_curve(PA), diagonal_slope(PA)]
    again = Tape.from_json(json.loads(json.dumps(tape.to_json())))
    for t in (tape, again):
        for g, w in zip(t(A, B, C), want):
            assert np.array_equal(g, w)


def test_plain_tape_json_round_trip():
    tape = Tape.compile([*EXPRESSIONS, *SHARED], SYMBOLS)
    again = Tape.from_json(json.loads(json.dumps(tape.to_json())))
    rows, cols, cells = inputs(np.random.default_rng(6), False)
    for g, w in zip(again(*rows, *cols, *cells), tape(*rows, *cols, *cells)):
        assert np.array_equal(g, w, equal_nan=True)
    data = tape.to_json()
    data["ninputs"] = 2                           # reads slots that are not inputs any more
    with pytest.raises(ValueError):
        Tape.from_json(data)


def test_replay_uses_no_sympy_private_api():
    src = (pathlib.Path(__file__).parents[1] / "tensorprog" / "limit" / "replay.py").read_text()
    for word in ("_from_args", "Basic.__new__", "AssocOp"):
        assert word not in src


def test_a_record_is_pure_data_of_its_compile(monkeypatch):
    """Recording the same batch compile twice gives the same stored tape (nothing in it depends on
    the order things were made in, or on sympy's caches: recording a compile again used to compare
    deep unevaluated expressions in sympy's cache)."""
    import tensorprog as tp
    from tensorprog.limit import replay
    from tensorprog.limit.replay_store import ReplayStore
    from tensorprog.tools import pairs

    monkeypatch.setattr(pairs, "STORE", ReplayStore(None))      # nothing recorded before
    pairs.REPLAYS.clear()
    seen = []
    monkeypatch.setattr(pairs, "record", lambda compiled, names: seen.append((compiled, names))
                        or replay.record(compiled, names))
    X = np.random.default_rng(0).standard_normal((4, 3))
    tp.kernel(pathlib.Path(__file__).parents[1] / "programs" / "kernels" / "relu_mlp.tp", X, L=4)
    assert seen
    for compiled, names in seen:
        first, again = replay.record(compiled, names), replay.record(compiled, names)
        assert first is not None and first.method == "exact"
        assert json.dumps(first.to_json()) == json.dumps(again.to_json())
