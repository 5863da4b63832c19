"""The ``tpc`` command line (docs/architecture.md and the README), run as ``python -m tensorprog``.

Process-level behaviour (exit codes, stdout/stderr, JSON, no traceback) is checked
on real subprocesses; to keep the suite fast they are all started at once by one
module fixture and the tests read their results. The shipped ``programs/*.tp`` are
run through the same entry point in-process (``tensorprog.cli.main``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"
RELU = str(PROGRAMS / "relu_nngp.tp")

SYNTAX_ERROR = "vector x ~ normal()\nout o = mean(x) )\n"
TYPE_ERROR = "vector x ~ normal()\nmatrix W ~ normal()\nc = mean(x)\nout o = mean(W @ c)\n"
NUMERIC_ERROR = "vector x ~ normal()\n\nout o = mean(x / 0)\n"
SMALL = "param L = 2\nvector x ~ normal()\nfor l in 1..L {\n  matrix W ~ normal()\n  x = W @ tanh(x)\n}\n" \
        "out q = mean(x * x)\n"


def tpc(*args: str, cwd: Path | str = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tensorprog", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("cli")
    out = {}
    for name, text in [("syntax.tp", SYNTAX_ERROR), ("type.tp", TYPE_ERROR),
                       ("numeric.tp", NUMERIC_ERROR), ("small.tp", SMALL)]:
        (d / name).write_text(text)
        out[name] = str(d / name)
    out["missing.tp"] = str(d / "missing.tp")
    return out


@pytest.fixture(scope="module")
def runs(files) -> dict[str, subprocess.CompletedProcess]:
    """Every subprocess of this module, run concurrently."""
    jobs = {
        "check": ["check", RELU],
        "check_L2": ["check", RELU, "-D", "L=2"],
        "check_unknown_D": ["check", RELU, "-D", "Q=2"],
        "json": ["execute", RELU, "-n", "64", "--trials", "3", "--json"],
        "json_seed1": ["execute", RELU, "-n", "64", "--trials", "3", "--json", "--seed", "1"],
        "syntax": ["check", files["syntax.tp"]],
        "type": ["execute", files["type.tp"], "-n", "8"],
        "numeric": ["execute", files["numeric.tp"], "-n", "8"],
        "missing": ["check", files["missing.tp"]],
    }
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {k: pool.submit(tpc, *args) for k, args in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    return r.stdout


def failed(r: subprocess.CompletedProcess) -> list[str]:
    """The stderr lines of a run that must fail with exit code 2 and no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    return r.stderr.rstrip("\n").split("\n")


def summary_counts(stdout: str) -> dict[str, int]:
    return {m[1]: int(m[2]) for m in re.finditer(r"^\s+(\w+)\s+(\d+)$", stdout, re.M)}


# ---- check --------------------------------------------------------------------------------------
def test_check_prints_a_summary_by_kind(runs):
    out = ok(runs["check"])
    first = out.splitlines()[0]
    expected = tp.load(RELU).summary()
    assert first == f"{RELU}: ok, {sum(expected.values())} equations"
    assert summary_counts(out) == expected
    assert re.search(r"^\s+outputs\s+kxy, kxx$", out, re.M)


def test_define_changes_the_unrolled_size(runs):
    base, l2 = (summary_counts(ok(runs[k])) for k in ("check", "check_L2"))
    assert l2 == tp.load(RELU, L=2).summary() != base
    assert (l2["Matrix"], l2["MatMul"]) == (1, 2)          # for l in 2..L: one layer


def test_unknown_define_is_a_located_error(runs):
    lines = failed(runs["check_unknown_D"])
    assert re.match(rf"^{re.escape(RELU)}:\d+:\d+: unknown parameter 'Q'", lines[0]), lines
    assert runs["check_unknown_D"].stdout == ""


def test_non_numeric_define_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", RELU, "-D", "L=abc"])
    assert exit_.value.code == 2
    assert "is not a number" in capsys.readouterr().err


# ---- execute ------------------------------------------------------------------------------------
def test_execute_json_shape(runs):
    d = json.loads(ok(runs["json"]))
    assert (d["width"], d["trials"], d["seed"]) == (64, 3, 0)
    assert set(d["outputs"]) == {"kxy", "kxx"}
    for o in d["outputs"].values():
        assert set(o) >= {"mean", "std", "values"}
        assert len(o["values"]) == 3 and all(isinstance(v, float) for v in o["values"])
        assert o["mean"] == pytest.approx(np.mean(o["values"]), rel=1e-12)
        assert o["std"] == pytest.approx(np.std(o["values"], ddof=1), rel=1e-12)
        assert len(set(o["values"])) == 3                  # independent trials


def test_same_seed_same_values_and_different_seed_different_values(runs):
    a, c = (json.loads(ok(runs[k])) for k in ("json", "json_seed1"))
    # the same seed in another process (this one) gives bit-identical values
    assert a["outputs"] == tp.load(RELU).execute(n=64, trials=3, seed=0).to_dict()["outputs"]
    assert c["seed"] == 1
    for name in a["outputs"]:
        assert all(x != y for x, y in zip(a["outputs"][name]["values"], c["outputs"][name]["values"]))


def test_float32(capsys):
    assert main(["execute", RELU, "-n", "64", "--trials", "2", "--json", "--dtype", "float32"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d.get("dtype", "float32") == "float32"
    assert d["trials"] == 2 and all(np.isfinite(d["outputs"]["kxx"]["values"]))
    f64 = tp.load(RELU).execute(n=64, trials=2).outputs["kxx"].values
    assert d["outputs"]["kxx"]["values"] != f64


def test_define_in_execute(files, capsys):
    assert main(["execute", files["small.tp"], "-n", "16", "--json", "-D", "L=3"]) == 0
    d = json.loads(capsys.readouterr().out)
    api = tp.load(files["small.tp"], L=3).execute(n=16, seed=0).to_dict()
    assert d["outputs"] == api["outputs"]
    assert d["outputs"] != tp.load(files["small.tp"]).execute(n=16, seed=0).to_dict()["outputs"]


def test_execute_text_output(files, capsys):
    assert main(["execute", files["small.tp"], "-n", "16", "--trials", "2", "--seed", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("width 16, 2 trial(s), seed 4, float64")
    row = [line for line in lines if line.split()[:1] == ["q"]]
    assert len(row) == 1 and len(row[0].split()) == 1 + 2 + 2    # name, mean, std, two values


# ---- errors -------------------------------------------------------------------------------------
def test_syntax_error(runs, files):
    lines = failed(runs["syntax"])
    assert lines[0].startswith(f"{files['syntax.tp']}:2:17: unexpected ')'")
    assert lines[1] == "    out o = mean(x) )"
    assert lines[2] == "    " + " " * 16 + "^"
    assert runs["syntax"].stdout == ""


def test_type_error(runs, files):
    lines = failed(runs["type"])
    assert lines[0].startswith(f"{files['type.tp']}:4:18: ")
    assert "must be a vector" in lines[0]
    assert lines[1:3] == ["    out o = mean(W @ c)", "    " + " " * 17 + "^"]


def test_numerical_error_at_execution_is_located(runs, files):
    lines = failed(runs["numeric"])
    assert lines[0].startswith(f"{files['numeric.tp']}:3:9: ")
    assert "inf" in lines[0] or "NaN" in lines[0]


def test_missing_file(runs, files):
    lines = failed(runs["missing"])
    # no line or column exists for a file that cannot be read: FILE: message
    assert lines[0].startswith(f"{files['missing.tp']}: ")
    assert "cannot read" in lines[0]


@pytest.mark.parametrize("args, fragment", [
    (["-n", "0"], "width"),
    (["-n", "8", "--trials", "0"], "trials"),
    (["-n", "8", "--matrix-dist", "cauchy"], "cauchy"),
])
def test_bad_execute_options(files, capsys, args, fragment):
    assert main(["execute", files["small.tp"], *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{files['small.tp']}: ") and fragment in err


# ---- the shipped programs (in-process, same entry point) -----------------------------------------
SHIPPED = sorted(PROGRAMS.glob("*.tp"))


def test_programs_are_shipped():
    assert len(SHIPPED) >= 3 and PROGRAMS / "relu_nngp.tp" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_program_checks_and_executes(path, capsys):
    assert main(["check", str(path)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: ok, ")
    names = tp.load(path).outputs
    assert names, "a shipped program should have outputs"
    assert main(["execute", str(path), "-n", "64", "--json"]) == 0, capsys.readouterr().err
    d = json.loads(capsys.readouterr().out)
    assert list(d["outputs"]) == names
    assert all(np.all(np.isfinite(np.asarray(o["mean"], dtype=float))) for o in d["outputs"].values())


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_program_has_a_header_comment(path):
    assert path.read_text().startswith("#")


def test_in_process_errors_return_2_without_raising(files, capsys):
    assert main(["check", files["syntax.tp"]]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{files['syntax.tp']}:2:17: ")
