"""A kernel's diagonal (the x ≡ y cells (i, i)) from the rest class's record (tensorprog.limit.replay
DiagonalBuilder, Replay.diagonal_values): one batch compile for a series template instead of two,
the diagonal within its stated errors of an independent compile, as tight as the x ≡ y class's own
record, kept in the store and checked when loaded."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.expect.budget import Budget
from tensorprog.limit import replay_store
from tensorprog.limit.compiler import compile_program
from tensorprog.limit.replay_store import ReplayStore
from tensorprog.tools import pairs as pmod
from tensorprog.tools.kernel import limit_template

PARAMS = dict(L=3, var=1.5, var1=1.5, b1=0.1)


def data(n: int = 6) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((n, 4))


@pytest.fixture
def memory(monkeypatch):
    """No store, nothing recorded before (and nothing left after)."""
    monkeypatch.setattr(pmod, "STORE", ReplayStore(None))
    pmod.REPLAYS.clear()
    yield
    pmod.REPLAYS.clear()


def counted(monkeypatch) -> list:
    """The batch compiles pairs makes, counted (each call's number of pairs)."""
    calls = []
    original = pmod.compile_program

    def counting(program, **kwargs):
        calls.append(len(next(iter(kwargs["batch_covs"].values()))))
        return original(program, **kwargs)
    monkeypatch.setattr(pmod, "compile_program", counting)
    return calls


@pytest.mark.parametrize("act", ["silu", "tanh"])
def test_diagonal_without_a_compile_of_its_own(act, memory, monkeypatch):
    """One batch compile (the rest class's record) serves every entry, the diagonal included;
    each diagonal entry agrees with its own compile by quadrature (no series) within the two
    stated errors."""
    calls = counted(monkeypatch)
    X = data()
    K = tp.kernel(f"programs/kernels/{act}_mlp.tp", X, **PARAMS)
    assert len(calls) == 1, calls
    q = X @ X.T / X.shape[1]
    for i in (0, 3, 5):
        p = tp.load(f"programs/kernels/{act}_mlp.tp", **PARAMS, q11=float(q[i, i]), q12=float(q[i, i]),
                    q22=float(q[i, i]))
        ref = compile_program(p.ir, budget=Budget(series_terms=0)).limit().outputs
        for name in ("nngp", "ntk"):
            got, err = K.outputs[name].mean[i, i], K.outputs[name].error[i, i]
            assert abs(got - ref[name].value) <= err + ref[name].error, (name, i)
            assert err <= 1e-12


@pytest.mark.parametrize("act", ["silu", "tanh"])
def test_diagonal_as_tight_as_the_x_equals_y_record(act, memory):
    """The diagonal part's values agree with the x ≡ y class's own record (a batch compile of the
    pairs (i, i)) within both errors, and its errors are within 1.5× that record's (the signed
    DiagonalSlope, not the pair's three slopes in absolute value)."""
    X = data(12)
    prog = tp.load(f"programs/kernels/{act}_mlp.tp", **PARAMS)
    tmpl, g, s, b = limit_template(prog.ir, {**prog.ir.params, **PARAMS})
    spec = pmod.LimitSpec(tmpl, g, s, b, X, 1e-10)
    rest = pmod.replay_for(spec, "rest", pmod.rest_candidates(spec))
    assert rest.replay.diagonal is not None
    i = np.arange(len(X))
    covs = pmod.pair_covs(spec, i, i)
    sides = rest.replay.tape.sides([covs[:, 0, 0]], [covs[:, 1, 1]])
    values, errors, valid = rest.replay.diagonal_values(sides)
    same = pmod.replay_for(spec, "same", pmod.Pairs(i, i))
    v2, e2, ok2 = same.replay(covs[:, 0, 0], covs[:, 1, 1], covs[:, 0, 1])
    assert valid.all() and ok2.all()
    for n in range(len(rest.replay.names)):
        assert np.all(np.abs(values[n] - v2[n]) <= errors[n] + e2[n])
        assert np.all(errors[n] <= 1.5 * e2[n])


def test_diagonal_part_kept_in_the_store_and_checked(tmp_path, monkeypatch):
    """A record with a diagonal part is stored and loaded bit for bit; one whose diagonal values
    were replaced by their errors (the digest recomputed) disagrees with a fresh compile of a
    diagonal pair: ignored with a StoreWarning, recorded again, the kernel as a fresh one's."""
    directory = tmp_path / "replays"
    monkeypatch.setattr(pmod, "STORE", ReplayStore(directory))
    pmod.REPLAYS.clear()
    template, X = "programs/kernels/silu_mlp.tp", data()
    fresh = tp.kernel(template, X, **PARAMS)
    pmod.REPLAYS.clear()
    loaded = tp.kernel(template, X, **PARAMS)
    for name in ("nngp", "ntk"):
        assert np.array_equal(loaded.outputs[name].mean, fresh.outputs[name].mean)
        assert np.array_equal(loaded.outputs[name].error, fresh.outputs[name].error)
    changed = 0
    for path in directory.glob("*.json"):
        record = json.loads(path.read_text())
        replay = record.get("replay")
        if not replay or not replay.get("diagonal"):
            continue
        k, outputs = len(replay["names"]), replay["tape"]["outputs"]
        outputs[2 * k:3 * k] = outputs[3 * k:4 * k]              # the diagonal's values: its errors
        body = {key: v for key, v in record.items() if key != "digest"}
        path.write_text(json.dumps({**body, "digest": replay_store.record_digest(path.stem, body)}))
        changed += 1
    assert changed == 1
    pmod.REPLAYS.clear()
    with pytest.warns(replay_store.StoreWarning, match="disagrees with a fresh compile"):
        again = tp.kernel(template, X, **PARAMS)
    for name in ("nngp", "ntk"):
        assert np.array_equal(again.outputs[name].mean, fresh.outputs[name].mean)
    pmod.REPLAYS.clear()


def test_closed_form_template_keeps_the_x_equals_y_record(memory, monkeypatch):
    """A template with closed forms other than the series (ReLU's arc-cosine, whose value at ρ → 1
    loses digits) has no diagonal part: its diagonal comes from the x ≡ y class's own compile."""
    calls = counted(monkeypatch)
    X = data()
    K = tp.kernel("programs/kernels/relu_mlp.tp", X, L=3)
    assert len(calls) == 2, calls                         # the rest pairs, then the pairs (i, i)
    prog = tp.load("programs/kernels/relu_mlp.tp", L=3)
    tmpl, g, s, b = limit_template(prog.ir, {**prog.ir.params, "L": 3})
    spec = pmod.LimitSpec(tmpl, g, s, b, X, 1e-10)
    assert pmod.replay_for(spec, "rest").replay.diagonal is None
    assert np.all(np.isfinite(np.diag(K.outputs["ntk"].mean)))


def test_diagonal_tile_by_tile_agrees(memory, tmp_path):
    """The diagonal part is computed with each band's rows: a kernel written tile by tile (bands of
    a few rows) agrees with the in-memory one within the two stated errors, the diagonal included.
    (Not bit for bit for a series template, before this change too: a band's packed coefficients
    are computed with its own rows' variances.)"""
    X = data(13)
    whole = tp.kernel("programs/kernels/silu_mlp.tp", X, **PARAMS)
    tiled = tp.kernel("programs/kernels/silu_mlp.tp", X, **PARAMS, out=str(tmp_path / "K") + "/", tile_pairs=20)
    for name in ("nngp", "ntk"):
        a, b = np.asarray(tiled.outputs[name].mean), whole.outputs[name].mean
        ea, eb = np.asarray(tiled.outputs[name].error), whole.outputs[name].error
        assert np.all(np.abs(a - b) <= ea + eb)
        assert np.all(np.diag(ea) <= 2 * np.diag(eb)) and np.all(np.diag(eb) <= 2 * np.diag(ea))
