"""Dataset kernels of templates written with data inputs (issue 27): vector pairs against the
q-template and against the data program itself, sequences (an RNN over token sequences) against
the program compiled on all sentences at once and a closed form, finite width against the limit,
and located errors for data that do not fit."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPError
from tensorprog.tools import data_kernel as dk

PROGRAMS = "programs"
DATA_MLP = f"{PROGRAMS}/kernels/relu_mlp_data.tp"
Q_MLP = f"{PROGRAMS}/kernels/relu_mlp.tp"
RNN = f"{PROGRAMS}/gp4a_rnn_kernel.tp"


def arccos1(a, b, c):
    """E relu(u) relu(v), (u, v) ~ N(0, [[a, c], [c, b]]): the first arc-cosine kernel."""
    rho = np.clip(c / np.sqrt(a * b), -1, 1)
    t = np.arccos(rho)
    return np.sqrt(a * b) / (2 * np.pi) * (np.sin(t) + (np.pi - t) * np.cos(t))


def singular_data(N: int = 12, d: int = 6, seed: int = 5) -> np.ndarray:
    """Random rows with an equal pair, an opposite pair and a parallel pair (y = 3x): every
    singularity class of the pairs."""
    X = np.random.default_rng(seed).normal(size=(N, d))
    X[4], X[6], X[8] = X[2], -X[1], 3 * X[0]
    return X


# ---- vector pairs: the q-template's kernel, at its speed ------------------------------------
@pytest.mark.parametrize("b1", [0.0, 0.3])
def test_data_template_equals_q_template(b1):
    X = singular_data()
    got = tp.kernel(DATA_MLP, X, b1=b1)
    want = tp.kernel(Q_MLP, X, b1=b1)
    for name in ("nngp", "ntk"):
        g, w = got.outputs[name], want.outputs[name]
        assert g.method == "exact" == w.method
        np.testing.assert_allclose(g.mean, w.mean, rtol=1e-12, atol=0)
        assert np.all(g.error < 1e-12)


def test_data_template_uses_the_replayed_tiles():
    """The vector path is the q-template's LimitSpec: the input group, U's variance as the scale,
    no shift; and the recorded replay of the rest class is used (no batch compile per pair)."""
    from tensorprog.tools import pairs
    X = singular_data()
    program = tp.load(DATA_MLP, var1=1.5).ir
    tmpl = dk.data_template(program, X, dict(program.params), "limit")
    assert tmpl.layout.scale == 1.5 and tmpl.layout.hidden is None and tmpl.layout.tokens == 1
    group = tmpl.program.groups[tmpl.layout.group]
    assert len(group.members) == 2
    spec = pairs.LimitSpec(tmpl.program, tmpl.layout.group, 1.5, 0.0, X, 1e-10)
    assert pairs.replay_for(spec, "rest", pairs.rest_candidates(spec)) is not None


def test_data_template_out_of_core_is_the_in_memory_kernel(tmp_path):
    X = singular_data(N=20)
    tiled = tp.kernel(DATA_MLP, X, out=str(tmp_path) + "/", tile_pairs=50)
    whole = tp.kernel(DATA_MLP, X)
    for name in ("nngp", "ntk"):
        np.testing.assert_array_equal(np.asarray(tiled.outputs[name].mean), whole.outputs[name].mean)


FULL = """\
param L = 3
param var = 2
vector x[1..5] : d = load("X.npy")
matrix U : n x d ~ normal(var=1.5)
for i in 1..5 {
    h[i, 1] = U @ x[i]
}
for l in 2..L {
    matrix W ~ normal(var=var)
    for i in 1..5 {
        h[i, l] = W @ relu(h[i, l - 1])
    }
}
vector v ~ normal()
for i in 1..5 {
    f[i] = mean(v * relu(h[i, L]))
    for l in 1..L {
        dh[i, l] = grad(f[i], h[i, l])
    }
}
for i in 1..5 {
    for j in i..5 {
        out nngp[i, j] = mean(relu(h[i, L]) * relu(h[j, L]))
        out ntk[i, j] = mean(relu(h[i, L]) * relu(h[j, L])) + sum(l in 2..L: var * mean(dh[i, l] * dh[j, l]) * mean(relu(h[i, l - 1]) * relu(h[j, l - 1]))) + 1.5 * mean(dh[i, 1] * dh[j, 1]) * mean(x[i] * x[j])
    }
}
"""


def test_data_template_equals_the_program_on_the_whole_dataset(tmp_path):
    """The pair template over 5 points = the same network written for all 5 points at once."""
    X = np.random.default_rng(11).normal(size=(5, 4))
    np.save(tmp_path / "X.npy", X)
    (tmp_path / "full.tp").write_text(FULL)
    whole = tp.load(tmp_path / "full.tp").limit().outputs
    got = tp.kernel(DATA_MLP, X, var1=1.5)
    iu = np.triu_indices(5)
    for name in ("nngp", "ntk"):
        np.testing.assert_allclose(got.outputs[name].mean[iu], whole[name].value[iu], rtol=1e-12)


def test_finite_width_vectors_converge_and_gram_means_are_exact(tmp_path):
    """Finite width: within 5 standard errors of the limit; mean(x[1] * x[2]) is xᵀy/d exactly
    (to rounding) at every width, as the program computes it."""
    X = singular_data(N=9, d=5)
    path = tmp_path / "t.tp"
    np.save(tmp_path / "pair.npy", X[:2])
    path.write_text(open(DATA_MLP).read() + "out D = mean(x[1] * x[2])\n")
    lim = tp.kernel(path, X)
    trials = 16
    fin = tp.kernel(path, X, n=256, trials=trials, seed=2)
    for name in ("nngp", "ntk"):
        sem = fin.outputs[name].std / np.sqrt(trials)
        z = np.abs(fin.outputs[name].mean - lim.outputs[name].mean) / np.maximum(sem, 1e-300)
        assert np.all(z < 5), (name, z.max())
    np.testing.assert_allclose(fin.outputs["D"].mean, X @ X.T / 5, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(lim.outputs["D"].mean, X @ X.T / 5, rtol=1e-12, atol=1e-14)
    assert np.all(fin.outputs["D"].std < 1e-13)


def test_two_single_vector_inputs(tmp_path):
    """Inputs declared apart (vector x : d, vector y : d): the kernel at (i, j) is the template
    on its own data (X[i], X[j])."""
    (tmp_path / "two.tp").write_text("vector x : d = load(\"a.npy\")\nvector y : d = load(\"b.npy\")\n"
                                     "matrix U : n x d ~ normal(var=2)\nmatrix W ~ normal(var=2)\n"
                                     "h = W @ relu(U @ x)\ng = W @ relu(U @ y)\n"
                                     "out k = mean(relu(h) * relu(g)) + mean(x * y)\n")
    X = np.random.default_rng(1).normal(size=(6, 5))
    got = tp.kernel(tmp_path / "two.tp", X).outputs["k"].mean
    for i, j in [(1, 4), (2, 2), (0, 5)]:
        np.save(tmp_path / "a.npy", X[i])
        np.save(tmp_path / "b.npy", X[j])
        assert got[i, j] == pytest.approx(tp.load(tmp_path / "two.tp").limit().outputs["k"].value, rel=1e-12)


# ---- sequences ---------------------------------------------------------------------------------
def test_rnn_over_sequences_equals_the_program_over_all_sentences():
    """programs/gp4a_rnn.tp (3 sentences in one program) and the sequence template over the
    same 3 sentences: the same K and M."""
    S = np.load(f"{PROGRAMS}/gp4a_tokens.npy").reshape(3, 4, 300)
    got = tp.kernel(RNN, S)
    whole = tp.load(f"{PROGRAMS}/gp4a_rnn.tp").limit().outputs
    for name in ("K", "M"):
        assert got.outputs[name].method == "exact"
        np.testing.assert_allclose(got.outputs[name].mean, whole[name].value, rtol=1e-12)


def test_rnn_sequences_equal_the_template_compiled_per_pair(tmp_path):
    """The batched sequence kernel = the template itself compiled on each pair (its own data)."""
    rng = np.random.default_rng(8)
    S = rng.normal(size=(4, 3, 5))
    S[2] = S[1]                                           # a repeated sentence
    S[3, 0] = S[0, 2]                                     # a repeated word
    text = open(RNN).read().replace('S = load("gp4a_tokens.npy")', 'S = load("pair.npy")')
    (tmp_path / "rnn.tp").write_text(text)
    np.save(tmp_path / "pair.npy", np.concatenate([S[0], S[1]]))      # read by S = load(...) in any case
    got = tp.kernel(tmp_path / "rnn.tp", S, T=3)
    for i, j in [(0, 0), (0, 1), (1, 2), (0, 3), (2, 3)]:
        np.save(tmp_path / "pair.npy", np.concatenate([S[i], S[j]]))
        lim = tp.load(tmp_path / "rnn.tp", T=3).limit().outputs
        for name in ("K", "M"):
            assert got.outputs[name].mean[i, j] == pytest.approx(lim[name].value, rel=1e-12, abs=1e-15)


def test_one_step_rnn_is_the_mlp_kernel():
    """T = 1: K(x, y) = E relu(u) relu(v), (u, v) ~ N(0, su·[[q_xx, q_xy], [q_xy, q_yy]] + sb)."""
    S = np.random.default_rng(3).normal(size=(5, 1, 7))
    got = tp.kernel(RNN, S, T=1, su=1.7, sb=0.2)
    q = S[:, 0] @ S[:, 0].T / 7
    C = 1.7 * q + 0.2
    d = np.diag(C)
    want = arccos1(d[:, None], d[None, :], C)
    np.testing.assert_allclose(got.outputs["K"].mean, want, rtol=1e-12)
    np.testing.assert_allclose(got.outputs["M"].mean, want, rtol=1e-12)


def test_sequences_finite_width_converges_and_accepts_a_list():
    S = np.random.default_rng(4).normal(size=(3, 2, 6))
    lim = tp.kernel(RNN, S, T=2)
    trials = 12
    fin = tp.kernel(RNN, list(S), T=2, n=256, trials=trials, seed=5)
    for name in ("K", "M"):
        sem = fin.outputs[name].std / np.sqrt(trials)
        z = np.abs(fin.outputs[name].mean - lim.outputs[name].mean) / np.maximum(sem, 1e-300)
        assert np.all(z < 5), (name, z.max())


def test_cli_kernel_over_sequences(tmp_path, capsys):
    S = np.load(f"{PROGRAMS}/gp4a_tokens.npy").reshape(3, 4, 300)
    np.save(tmp_path / "S.npy", S)
    assert main(["kernel", RNN, "--inputs", str(tmp_path / "S.npy"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    whole = tp.load(f"{PROGRAMS}/gp4a_rnn.tp").limit().outputs
    np.testing.assert_allclose(np.array(data["outputs"]["K"]["value"]), whole["K"].value, rtol=1e-12)
    assert main(["kernel", RNN, "--inputs", str(tmp_path / "S.npy")]) == 0
    assert "3 sequences of 4 vectors of dimension 300: limit" in capsys.readouterr().out


# ---- errors ------------------------------------------------------------------------------------
def kernel_error(template, X, **kw) -> str:
    with pytest.raises(TPError) as info:
        tp.kernel(template, X, **kw)
    return str(info.value)


def test_sequence_length_mismatch_is_located():
    S = np.random.default_rng(0).normal(size=(3, 5, 4))
    message = kernel_error(RNN, S)
    assert f"{RNN}:10:1:" in message and "sequences of 5 vectors (set -D T=5)" in message


def test_shapes_that_do_not_fit_are_errors(tmp_path):
    X = np.random.default_rng(0).normal(size=(4, 3))
    assert "sequences of 3 vectors" in kernel_error(DATA_MLP, X.reshape(4, 1, 3).repeat(3, axis=1))
    assert "the data's points are single vectors" in kernel_error(RNN, X)
    assert "sequences of different lengths (2, 3)" in kernel_error(RNN, [np.ones((2, 3)), np.ones((3, 3))])
    assert "(N, d) array of vectors or an (N, T, d)" in kernel_error(RNN, np.ones(4))
    bad = np.ones((3, 2, 3))
    bad[1, 1, 2] = np.nan
    assert "point 1 (X[1], counted from 0) holds NaN at token, column 1, 2" in kernel_error(RNN, bad, T=2)
    assert "takes vectors through q11, q12, q22" in kernel_error(Q_MLP, bad)
    assert "needs width n ≥ 2" in kernel_error(DATA_MLP, X, n=1)


@pytest.mark.parametrize("body, where", [
    ('vector x[1..3] : d = load("P.npy")\nmatrix U : n x d ~ normal()\nout k = mean((U @ x[1]) * (U @ x[2]))\n',
     "1:1: a kernel template's one data declaration holds the pair of inputs, x[1..2] (got 3 vectors)"),
    ('vector x[1..2] : d = load("P.npy")\nmatrix U : n x d ~ normal()\nout k = mean(relu(x[1])) * mean((U @ x[1]) * (U @ x[2]))\n',
     "3:9: in a kernel template, the data inputs enter only as U @ x and mean(x * y)"),
    ('vector x[1..2] : d = load("P.npy")\nmatrix U : n x d ~ normal()\nout k = mean((U @ (2 * x[1])) * (U @ x[2]))\n',
     "takes the inputs' data vectors as declared"),
    ('vector x[1..2] : d = load("P.npy")\nmatrix U, V : n x d ~ normal()\nout k = mean((U @ x[1]) * (V @ x[2]))\n',
     "2:1: a kernel template has one input-layer matrix on the data (already 'U')"),
    ('vector x[1..2] : d = load("P.npy")\nmatrix U : n x d ~ normal()\nout k = mean((U @ x[1]) * (U @ x[2]))\n'
     'out a = mean(x[1] * x[1]) - mean(x[2] * x[2])\n', "output 'a' is not symmetric"),
    ('P = load("P.npy")\nvector x : d = P[1]\nmatrix U : n x d ~ normal()\nvector y : d = P[2]\n'
     'out k = mean((U @ x) * (U @ y))\n', "3:1: in a kernel template, declare the data inputs before the input-layer"),
    ('vector x[1..2] : d = load("P.npy")\nout q = mean(x[1] * x[2])\nmatrix U : n x d ~ normal()\n'
     'out k = mean((U @ x[1]) * (U @ x[2]))\n', "2:9: in a kernel template, mean(x * y) of the data is computed"),
])
def test_template_errors_are_located(tmp_path, body, where):
    rows = 3 if "x[1..3]" in body else 2
    np.save(tmp_path / "P.npy", np.random.default_rng(2).normal(size=(rows, 4)))
    (tmp_path / "t.tp").write_text(body)
    tp.load(tmp_path / "t.tp").limit()                 # the template runs alone on its own data
    message = kernel_error(tmp_path / "t.tp", np.random.default_rng(1).normal(size=(3, 4)))
    assert str(tmp_path / "t.tp") in message and where in message, message


def test_out_of_core_refused_for_sequences(tmp_path):
    S = np.random.default_rng(0).normal(size=(3, 2, 4))
    assert "computed in memory" in kernel_error(RNN, S, T=2, out=str(tmp_path) + "/")
