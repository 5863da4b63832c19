"""Caches are explicit objects keyed by pure inputs: the data files a program reads are found in
its syntax tree (not guessed from its text), and enter the keys by their bytes."""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

import tensorprog as tp
from tensorprog.lang.reads import inputs_digest, loaded_files
from tensorprog.limit.replay_store import ReplayStore
from tensorprog.tools import pairs
from tensorprog.tools.caches import Memo, ReplayCache
from tensorprog.tools.kernel import affine_template, template_key

TEMPLATE = '''param q11 = 1
param q12 = 0.5
param q22 = 1
w = load("w.npy")
vector h1, g1 ~ normal(cov=[[w[1] * q11, w[1] * q12], [w[1] * q12, w[1] * q22]])
out k = mean(relu(h1) * relu(g1))
'''


def test_loaded_files_are_read_from_the_syntax_tree():
    text = ('# load("comment.npy") is no call\n'
            'param p = 1\n'
            'a = load("b.npy") if p > 0 else load("a.npy")\n'
            'c = load("b.npy")\n'
            'vector x ~ normal()\n'
            'out m = mean(x * x) + a[1] + c[1]\n')
    assert loaded_files(text) == ("a.npy", "b.npy")          # both branches, once each, no comment
    assert loaded_files("vector x ~ normal()\nout m = mean(x * x)\n") == ()
    assert loaded_files('a = load(name)\nvector x ~ normal()\nout m = mean(x)\n') is None


def test_the_inputs_digest_follows_the_bytes_of_the_files(tmp_path):
    text = TEMPLATE
    np.save(tmp_path / "w.npy", np.array([2.0, 3.0]))
    first = inputs_digest(text, "t.tp", str(tmp_path))
    assert inputs_digest(text, "t.tp", str(tmp_path)) == first
    np.save(tmp_path / "w.npy", np.array([5.0, 3.0]))
    assert inputs_digest(text, "t.tp", str(tmp_path)) != first
    assert inputs_digest(text.replace("0.5", "0.25"), "t.tp", str(tmp_path)) != first


def test_a_template_that_loads_a_file_is_found_again_when_the_file_changes(tmp_path, monkeypatch):
    """The template memo is keyed by the file's bytes: a changed file is a new finding, the same
    file the same one (the memo's own object); the store key exists, and moves with the bytes."""
    monkeypatch.setattr("tensorprog.tools.kernel.TEMPLATES", OrderedDict())
    np.save(tmp_path / "w.npy", np.array([2.0, 3.0]))
    program = tp.parse(TEMPLATE, file="t.tp", base_dir=str(tmp_path)).ir
    found = affine_template(program)
    assert found[1:] == (0, 2.0, 0.0)
    assert affine_template(program) is found
    key = template_key(program, {})
    assert key is not None and key.startswith("template-")
    np.save(tmp_path / "w.npy", np.array([5.0, 3.0]))
    program = tp.parse(TEMPLATE, file="t.tp", base_dir=str(tmp_path)).ir
    assert affine_template(program)[1:] == (0, 5.0, 0.0)
    assert template_key(program, {}) != key


def test_memo_drops_the_least_recently_used():
    memo = Memo(OrderedDict(), size=2)
    memo.put("a", 1)
    memo.put("b", 2)
    assert memo.get("a") == 1                # a is now the most recent
    memo.put("c", 3)
    assert list(memo.items) == ["a", "c"] and memo.get("b", "gone") == "gone"


def test_a_band_uses_the_replay_cache_it_is_handed(monkeypatch):
    """limit_band records into the cache given to it, not into the process's default."""
    default = OrderedDict()
    monkeypatch.setattr(pairs, "REPLAYS", default)
    program = tp.load("programs/kernels/relu_mlp.tp", L=2).ir
    X = np.random.default_rng(0).standard_normal((6, 3))
    spec = pairs.LimitSpec(*affine_template(program), X, 1e-6)
    N = X.shape[0]
    values = {name: np.zeros((N, N)) for name in spec.names}
    errors = {name: np.zeros((N, N)) for name in spec.names}
    mine = ReplayCache(Memo(OrderedDict(), 8), ReplayStore(None))
    band = pairs.limit_band(spec, (0, N), values, errors, mine)
    assert set(band.methods.values()) == {"exact"}
    assert len(mine.memory.items) >= 1 and not default
    assert all(found is not None for found in mine.memory.items.values())
