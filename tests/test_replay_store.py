"""Kernel replays kept on disk (tensorprog.limit.replay_store.ReplayStore) and their use by
tensorprog.tools.pairs (replay_for, STORE, REPLAYS): a new process loads what an earlier one
recorded, bit for bit; files that are damaged, of other code, or absent are recorded again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.limit import replay_store
from tensorprog.limit.replay_store import ReplayStore
from tensorprog.tools import pairs as pmod

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "programs/kernels/relu_mlp.tp"

#: a kernel computed in a fresh process; its values saved to OUT.npy.  With NO_RECORD set, the
#: batch compile that records a replay raises: the kernel must come from the store.
SCRIPT = """
import os, sys
import numpy as np
import tensorprog as tp
from tensorprog.tools import pairs
if os.environ.get("NO_RECORD"):
    def no_record(*args, **kwargs):
        raise RuntimeError("recorded instead of loaded")
    pairs.record_class = no_record
X = np.random.default_rng(0).standard_normal((20, 5))
K = tp.kernel("programs/kernels/relu_mlp.tp", X, L=3)
np.save(sys.argv[1], np.stack([K.outputs[n].mean for n in ("nngp", "ntk")]
                              + [K.outputs[n].error for n in ("nngp", "ntk")]))
"""


def data() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((20, 5))


def run_kernel(cache: object, out: Path, no_record: bool = False) -> subprocess.CompletedProcess:
    env = dict(os.environ, TENSORPROG_CACHE_DIR=str(cache))
    env.pop("NO_RECORD", None)
    if no_record:
        env["NO_RECORD"] = "1"
    return subprocess.run([sys.executable, "-c", SCRIPT, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def stack(K) -> np.ndarray:
    return np.stack([K.outputs[n].mean for n in ("nngp", "ntk")] + [K.outputs[n].error for n in ("nngp", "ntk")])


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """pairs' store in a directory of this test's own, its memory empty (and emptied after)."""
    directory = tmp_path / "replays"
    monkeypatch.setattr(pmod, "STORE", ReplayStore(directory))
    pmod.REPLAYS.clear()
    yield directory
    pmod.REPLAYS.clear()


@pytest.fixture(scope="module")
def fresh_values(tmp_path_factory) -> np.ndarray:
    """The kernel of a process with no store: the values every other way must give."""
    out = tmp_path_factory.mktemp("fresh") / "fresh.npy"
    done = run_kernel("off", out)
    assert done.returncode == 0, done.stderr
    return np.load(out)


# ---- across processes ---------------------------------------------------------------------------

def test_second_process_loads_the_record_bit_for_bit(tmp_path, fresh_values):
    first = run_kernel(tmp_path, tmp_path / "first.npy")
    assert first.returncode == 0, first.stderr
    files = sorted((tmp_path / "replays").glob("*.json"))
    assert files, "the first process wrote no record"
    assert not list((tmp_path / "replays").glob("*.tmp"))
    stamps = {f: f.stat().st_mtime_ns for f in files}
    second = run_kernel(tmp_path, tmp_path / "second.npy", no_record=True)
    assert second.returncode == 0, second.stderr          # no batch compile was needed
    a, b = np.load(tmp_path / "first.npy"), np.load(tmp_path / "second.npy")
    assert np.array_equal(a, b)
    assert np.array_equal(a, fresh_values)
    assert {f: f.stat().st_mtime_ns for f in sorted((tmp_path / "replays").glob("*.json"))} == stamps


def test_without_a_record_the_second_process_would_compile(tmp_path):
    """The check above has teeth: with an empty store, the patched process fails."""
    done = run_kernel(tmp_path, tmp_path / "x.npy", no_record=True)
    assert done.returncode != 0 and "recorded instead of loaded" in done.stderr


def test_cache_dir_off_writes_nothing(tmp_path, fresh_values):
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, TENSORPROG_CACHE_DIR="off", HOME=str(home), XDG_CACHE_HOME=str(home / "xdg"))
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "off.npy")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert list(home.rglob("*")) == []
    assert list(tmp_path.glob("off*")) == [tmp_path / "off.npy"]
    assert np.array_equal(np.load(tmp_path / "off.npy"), fresh_values)


@pytest.mark.parametrize("value", ["off", "OFF", "none", "0", ""])
def test_off_values_name_no_store(monkeypatch, value):
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", value)
    store = ReplayStore.from_environment()
    assert store.directory is None and store.path("k") is None and store.load("k") is False
    store.save("k", None)                                   # nothing to write, no error


def test_environment_names_the_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", str(tmp_path))
    assert ReplayStore.from_environment().directory == tmp_path / "replays"
    monkeypatch.delenv("TENSORPROG_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ReplayStore.from_environment().directory == tmp_path / "xdg" / "tensorprog" / "replays"


# ---- in this process ----------------------------------------------------------------------------

def test_in_process_record_then_load(store, fresh_values, monkeypatch):
    K = tp.kernel(TEMPLATE, data(), L=3)
    assert np.array_equal(stack(K), fresh_values)
    files = sorted(store.glob("*.json"))
    assert files
    pmod.REPLAYS.clear()
    monkeypatch.setattr(pmod, "record_class", lambda *a, **k: pytest.fail("recorded instead of loaded"))
    assert np.array_equal(stack(tp.kernel(TEMPLATE, data(), L=3)), fresh_values)


def test_record_is_json_data_only(store):
    tp.kernel(TEMPLATE, data(), L=3)
    files = sorted(store.glob("*.json"))
    assert files
    for f in files:
        text = f.read_text()
        record = json.loads(text)
        if f.name.startswith("template-"):          # a template's finding: group, scale, shift
            assert set(record) == {"format", "code", "digest", "group", "scale", "shift"}
        else:
            assert set(record) == {"format", "code", "digest", "replay", "warnings"}
        assert record["format"] == replay_store.FORMAT and record["code"] == replay_store.code_digest()
        assert "lambda" not in text and "import" not in text and "__" not in text

        def plain(x) -> bool:
            if isinstance(x, dict):
                return all(isinstance(k, str) and plain(v) for k, v in x.items())
            if isinstance(x, list):
                return all(plain(v) for v in x)
            return x is None or isinstance(x, (bool, int, float, str))
        assert plain(record)
        assert json.loads(json.dumps(record)) == record


def spoiled_store_gives_same_values(store: Path, fresh_values: np.ndarray, spoil) -> None:
    """Record, spoil every file with ``spoil(path)``, compute again from an empty memory: the
    files are ignored, recorded again (valid again afterwards), and the values are the same."""
    tp.kernel(TEMPLATE, data(), L=3)
    files = sorted(f for f in store.glob("*.json") if not f.name.startswith("template-"))   # the replays
    assert files
    for f in files:
        spoil(f)
    pmod.REPLAYS.clear()
    calls = []
    original = pmod.record_class
    pmod.record_class = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        K = tp.kernel(TEMPLATE, data(), L=3)
    finally:
        pmod.record_class = original
    assert calls, "a spoiled record was used"
    assert np.array_equal(stack(K), fresh_values)
    for f in files:
        assert json.loads(f.read_text())["code"] == replay_store.code_digest()


@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "wrong_format", "bad_op", "missing_replay_key"])
def test_damaged_record_is_recorded_again(store, fresh_values, how):
    def spoil(f: Path) -> None:
        text = f.read_text()
        if how == "garbage":
            f.write_bytes(b"\x00\xff not json {")
        elif how == "truncated":
            f.write_text(text[: len(text) // 2])
        elif how == "empty":
            f.write_text("")
        elif how == "wrong_format":
            f.write_text(json.dumps({**json.loads(text), "format": replay_store.FORMAT + 1}))
        elif how == "bad_op":
            record = json.loads(text)
            if record["replay"] is not None:
                record["replay"]["tape"]["ops"][0][0] = "no_such_operation"
            f.write_text(json.dumps(record))
        elif how == "missing_replay_key":
            record = json.loads(text)
            del record["warnings"]
            f.write_text(json.dumps(record))
    spoiled_store_gives_same_values(store, fresh_values, spoil)


def test_record_of_other_code_is_ignored(store, fresh_values):
    def spoil(f: Path) -> None:
        record = json.loads(f.read_text())
        record["code"] = "0" * 64
        f.write_text(json.dumps(record))
    spoiled_store_gives_same_values(store, fresh_values, spoil)


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"text"', "3"])
def test_record_that_is_not_an_object_is_recorded_again(store, fresh_values, text):
    spoiled_store_gives_same_values(store, fresh_values, lambda f: f.write_text(text))


def test_record_with_zero_denominator_is_recorded_again(store, fresh_values):
    def spoil(f: Path) -> None:
        record = json.loads(f.read_text())
        ops = record["replay"]["tape"]["ops"]
        for op in ops:
            if op[0] == "pow" and isinstance(op[1], list):
                op[1] = [1, 0]
        f.write_text(json.dumps(record))
    spoiled_store_gives_same_values(store, fresh_values, spoil)


def test_unwritable_directory_does_not_raise(tmp_path, monkeypatch, fresh_values):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setattr(pmod, "STORE", ReplayStore(blocker / "replays"))      # mkdir fails: NotADirectory
    pmod.REPLAYS.clear()
    try:
        assert np.array_equal(stack(tp.kernel(TEMPLATE, data(), L=3)), fresh_values)
    finally:
        pmod.REPLAYS.clear()
    assert blocker.read_text() == "not a directory"


def test_read_only_directory_does_not_raise(tmp_path, monkeypatch, fresh_values):
    directory = tmp_path / "replays"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        if os.access(directory, os.W_OK):
            pytest.skip("running as a user who may write anywhere (root)")
        monkeypatch.setattr(pmod, "STORE", ReplayStore(directory))
        pmod.REPLAYS.clear()
        assert np.array_equal(stack(tp.kernel(TEMPLATE, data(), L=3)), fresh_values)
        assert list(directory.iterdir()) == []
    finally:
        directory.chmod(0o700)
        pmod.REPLAYS.clear()


def test_store_round_trip_of_not_replayable(tmp_path):
    """None (a template that cannot be replayed) is stored and loaded as None; an absent key is False."""
    store = ReplayStore(tmp_path)
    assert store.load("absent") is False
    store.save("k", None)
    assert store.load("k") is None
    assert json.loads((tmp_path / "k.json").read_text())["replay"] is None


def test_template_finding_is_stored_and_spares_the_probe_lowerings(store, fresh_values, monkeypatch):
    """The first-layer group, scale and shift of a template are kept in the store: with them, a
    kernel needs neither affine_template's probe lowerings nor a new record, and its values are
    the same bits."""
    from tensorprog.tools import kernel as kmod
    tp.kernel(TEMPLATE, data(), L=3)
    found = [f for f in store.glob("template-*.json")]
    assert len(found) == 1 and json.loads(found[0].read_text())["group"] == 0
    pmod.REPLAYS.clear()
    kmod.TEMPLATES.clear()

    def refuse(*args, **kwargs):
        raise AssertionError("the template was unrolled at the probes again")
    monkeypatch.setattr(kmod, "affine_template", refuse)
    monkeypatch.setattr(pmod, "record_class", refuse)
    assert np.array_equal(stack(tp.kernel(TEMPLATE, data(), L=3)), fresh_values)


# ---- integrity: a record changed on disk is never used; the directory is private ----------------

def reseal(path: Path, record: dict) -> None:
    """Write ``record`` with its digest recomputed: a deliberate change, not damage."""
    body = {k: v for k, v in record.items() if k != "digest"}
    path.write_text(json.dumps({**body, "digest": replay_store.record_digest(path.stem, body)}))


def change_record(path: Path, what: str) -> bool:
    """Change ``what`` in the record at ``path`` (valid JSON still); False if it has no such thing."""
    record = json.loads(path.read_text())
    if what == "scale" and "scale" in record:
        record["scale"] *= 1.5
    elif what == "group" and "group" in record:
        record["group"] += 1
    elif what == "constant" and record.get("replay"):
        consts = record["replay"]["tape"]["consts"]
        if not any(v == 2.0 for _, v in consts):          # the template's weight variance, var = 2
            return False
        record["replay"]["tape"]["consts"] = [[k, 3.0 if v == 2.0 else v] for k, v in consts]
    elif what == "digest":
        record["digest"] = "0" * 64
        path.write_text(json.dumps(record))
        return True
    else:
        return False
    path.write_text(json.dumps(record))
    return True


@pytest.mark.parametrize("what, sealed", [(w, False) for w in ("scale", "group", "constant", "digest")]
                         + [(w, True) for w in ("scale", "group", "constant")])
def test_changed_record_is_not_used(store, fresh_values, what, sealed):
    """A record changed after it was written (its scale, group, a constant of its tape, or its
    digest) gives the kernel of an uncached compile, with a StoreWarning: by its digest, or, where
    the digest was recomputed too, by the checks of its meaning (a fresh compile of a few pairs;
    the template's own covariance).  Before these checks the kernel came out wrong (the NTK
    diagonal 1.95 → 2.92 for a scale × 1.5).  ``sealed``: the digest recomputed after the change."""
    from tensorprog.tools import kernel as kmod
    tp.kernel(TEMPLATE, data(), L=3)
    changed = [f for f in sorted(store.glob("*.json")) if change_record(f, what)]
    assert changed, f"no record has a {what} to change"
    if sealed:
        for f in changed:
            reseal(f, json.loads(f.read_text()))
    pmod.REPLAYS.clear()
    kmod.TEMPLATES.clear()
    expected = "disagrees with a fresh compile|does not fit" if sealed else "does not match its digest"
    with pytest.warns(replay_store.StoreWarning, match=expected):
        K = tp.kernel(TEMPLATE, data(), L=3)
    got = stack(K)
    assert np.allclose(got, fresh_values, rtol=1e-13, atol=0)
    if what != "digest":           # the kernel was recorded again: bit for bit what an uncached run gives
        assert np.array_equal(got[:2], fresh_values[:2])


def test_recorded_again_after_a_change_and_trusted_afterwards(store, fresh_values):
    """The record written in place of a changed one is used by the next process-like run (no
    warning, no new record)."""
    tp.kernel(TEMPLATE, data(), L=3)
    for f in store.glob("*.json"):
        change_record(f, "constant")
    pmod.REPLAYS.clear()
    with pytest.warns(replay_store.StoreWarning):
        tp.kernel(TEMPLATE, data(), L=3)
    pmod.REPLAYS.clear()
    calls = []
    original = pmod.record_class
    pmod.record_class = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error", replay_store.StoreWarning)
            K = tp.kernel(TEMPLATE, data(), L=3)
    finally:
        pmod.record_class = original
    assert not calls
    assert np.array_equal(stack(K), fresh_values)


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_store_directories_are_private(tmp_path, monkeypatch):
    """The directories the store makes have mode 0700 whatever the umask; records go there."""
    monkeypatch.setenv("TENSORPROG_CACHE_DIR", str(tmp_path / "cache"))
    store = ReplayStore.from_environment()
    old = os.umask(0o022)
    try:
        store.save_data("k", {"x": 1})
    finally:
        os.umask(old)
    assert mode(tmp_path / "cache") == 0o700 and mode(tmp_path / "cache" / "replays") == 0o700
    assert store.load_data("k")["x"] == 1


def test_open_store_directory_is_made_private(tmp_path):
    directory = tmp_path / "replays"
    directory.mkdir()
    directory.chmod(0o777)
    store = ReplayStore(directory)
    store.save_data("k", {"x": 1})
    assert mode(directory) == 0o700
    assert store.load_data("k")["x"] == 1


def test_store_directory_of_another_user_is_not_used(tmp_path, monkeypatch, fresh_values):
    """A directory that belongs to someone else is neither read nor written (a StoreWarning), and
    the kernel is computed as without a store."""
    if not hasattr(os, "geteuid"):
        pytest.skip("no user ids here")
    directory = tmp_path / "replays"
    ReplayStore(directory).save_data("k", {"x": 1})
    before = sorted(p.name for p in directory.iterdir())
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)         # the directory is now another user's
    foreign = ReplayStore(directory)
    with pytest.warns(replay_store.StoreWarning, match="belongs to another user"):
        assert foreign.load_data("k") is None
    monkeypatch.setattr(pmod, "STORE", foreign)
    pmod.REPLAYS.clear()
    try:
        with pytest.warns(replay_store.StoreWarning, match="belongs to another user"):
            assert np.array_equal(stack(tp.kernel(TEMPLATE, data(), L=3)), fresh_values)
    finally:
        pmod.REPLAYS.clear()
    assert sorted(p.name for p in directory.iterdir()) == before
