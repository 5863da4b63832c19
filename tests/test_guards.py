"""Issue 28, resources and validation: memory and size guards, and arguments refused with exit 2.

Each test failed before the fix (the compile deps were Python sets; program text and files had no
size cap and a FIFO was opened and waited on; constant lists were built before being sized; a
width 64.5, a bool seed, tol=nan, bytes as program text were accepted or raised raw TypeErrors;
``tpc kernel --output bogus`` was checked after the kernel was computed).  Timings are in
``bench/compile_memory.py`` and ``bench/parse_size.py``, not here.
"""
from __future__ import annotations

import math
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.arguments import ArgumentError, positive_finite, whole
from tensorprog.cli import main
from tensorprog.errors import TPLimitError, TPLoadError, TPUsageError, TPValueError
from tensorprog.expect.budget import Budget
from tensorprog.lang.consts import MAX_CONST_BYTES
from tensorprog.lang.source import MAX_SOURCE_CHARS
from tensorprog.limit.indices import IndexSet

ROOT = Path(__file__).resolve().parent.parent
SMALL = "vector x ~ normal()\nmatrix W ~ normal()\nh = W @ relu(x)\nout o = mean(h * h)\n"


def tpc(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorprog", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout)


# ---- memory: the compiler's dependency sets ---------------------------------------------------
def test_index_set_behaves_as_a_set_of_ints():
    rng = random.Random(0)
    for _ in range(50):
        items = [rng.randrange(300) for _ in range(rng.randrange(40))]
        other = [rng.randrange(300) for _ in range(rng.randrange(40))]
        a, b = IndexSet(items), IndexSet(other)
        assert list(a) == sorted(set(items)) and len(a) == len(set(items))
        assert list(a | b) == sorted(set(items) | set(other))
        c = a.copy()
        c |= b
        c.add(301)
        assert list(c) == sorted(set(items) | set(other) | {301}) and list(a) == sorted(set(items))
        assert all((i in a) == (i in set(items)) for i in range(-2, 305))
    with pytest.raises(ValueError):
        IndexSet().add(-1)
    assert pickle.loads(pickle.dumps(IndexSet([3, 900]))) == {3, 900}        # compiled results travel to workers


def test_deep_compile_keeps_dependencies_in_bits_not_sets():
    """Each variable rests on O(depth) estimates: as sets that was O(L²) ~60-byte entries (6.1 GB at
    L=4000); as bitsets it is at most one bit per (variable, estimate) plus a small header."""
    compiled = tp.load(ROOT / "programs/relu_nngp.tp", L=10).compile()
    stored = sum(sys.getsizeof(getattr(d, "bits", d)) for d in compiled.deps.values())
    bound = len(compiled.deps) * (len(compiled.estimates) // 8 + 40)
    assert stored <= bound, (stored, bound)
    last = max(v for v in compiled.deps)
    assert len(compiled.deps[last]) >= 10 - 1          # it does rest on an estimate of every layer


# ---- memory: constant arrays --------------------------------------------------------------
def test_a_constant_list_is_sized_before_it_is_built():
    k = 3000                                  # each eye(3000) is 72 MB; 20 of them exceed 1 GiB
    assert 20 * k * k * 8 > MAX_CONST_BYTES
    text = f"vector x ~ normal()\nparam c = [eye({k}) for i in 1..20]\nout o = mean(x * x)\n"
    with pytest.raises(TPValueError, match=r"this list of 20 items of 72,000,000 bytes would take "
                                           r"1,440,000,000 bytes, more than the 1,073,741,824") as err:
        tp.parse(text)
    assert (err.value.line, err.value.col) == (2, 11)


def test_a_loaded_array_is_sized_from_its_header(tmp_path):
    big = tmp_path / "big.npy"
    entries = MAX_CONST_BYTES // 8 + 1
    with open(big, "wb") as handle:            # a header claiming more than the cap; no data written
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f8", "fortran_order": False,
                                                      "shape": (entries,)})
    program = tmp_path / "p.tp"
    program.write_text('vector x ~ normal()\nparam c = load("big.npy")\nout o = mean(x * x)\n')
    with pytest.raises(TPLoadError, match=f"{entries * 8:,} bytes, more than") as err:
        tp.load(program)
    assert (err.value.line, err.value.col) == (2, 11)


# ---- program text: size and kind of file --------------------------------------------------
def test_program_text_over_the_cap_is_refused_where_it_crosses_it():
    line = "h = W @ relu(x)\n"
    text = SMALL + line * (MAX_SOURCE_CHARS // len(line) + 10)
    with pytest.raises(TPLimitError, match=f"more than the {MAX_SOURCE_CHARS:,} a program may have") as err:
        tp.parse(text)
    assert err.value.line == text.count("\n", 0, MAX_SOURCE_CHARS) + 1
    with pytest.raises(TPLimitError):
        tp.parse(SMALL, max_chars=10)
    with pytest.raises(TPUsageError, match="max_chars"):
        tp.parse(SMALL, max_chars=0)


def test_a_deep_expression_over_the_cap_is_refused_before_parsing():
    text = "vector x ~ normal()\nout o = mean(" + "x + " * (MAX_SOURCE_CHARS // 4) + "x)\n"
    with pytest.raises(TPLimitError, match="a program may have") as err:
        tp.parse(text)
    assert err.value.line == 2
    assert len(str(err.value)) < 1000            # located, without an excerpt of the 1 MB line


def test_a_program_file_over_the_cap_exits_2(tmp_path):
    big = tmp_path / "big.tp"
    big.write_text(SMALL + "# padding\n" * (MAX_SOURCE_CHARS // 10 + 1))
    proc = tpc("check", str(big))
    assert proc.returncode == 2 and "bytes, more than the" in proc.stderr and "max_chars" in proc.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "prog.tp"
    os.mkfifo(fifo)
    proc = tpc("check", str(fifo), timeout=60)              # it used to block forever in open()
    assert proc.returncode == 2 and "FIFO" in proc.stderr and "not a regular file" in proc.stderr
    with pytest.raises(TPLoadError, match="a directory, not a regular file"):
        tp.load(tmp_path)


# ---- validation: widths, seeds, trials -------------------------------------------------------
@pytest.mark.parametrize("kwargs, what", [
    (dict(n=64.5), "the width n"), (dict(n=64.0), "the width n"), (dict(n=True), "the width n"),
    (dict(n="64"), "the width n"), (dict(n=0), "the width n"),
    (dict(n=8, seed=1.5), "the seed"), (dict(n=8, seed=True), "the seed"), (dict(n=8, seed=-1), "the seed"),
    (dict(n=8, trials=2.0), "trials"), (dict(n=8, trials=False), "trials"),
    (dict(n=8, jobs=1.5), "jobs"),
])
def test_execute_refuses_non_integer_widths_seeds_and_trials(kwargs, what):
    program = tp.parse(SMALL)
    with pytest.raises(TPUsageError, match=what):
        program.execute(**kwargs)


def test_numpy_integers_are_integers():
    result = tp.parse(SMALL).execute(n=np.int64(8), seed=np.uint8(3), trials=np.int32(2))
    assert result.width == 8 and result.seed == 3 and result.trials == 2


def test_the_rules_themselves():
    assert whole(np.int16(5), "k", 1) == 5 and positive_finite(np.float32(0.5), "t") == 0.5
    for bad in (True, 1.0, "1", None, 0):
        with pytest.raises(ArgumentError):
            whole(bad, "k", 1)
    for bad in (0, -1.0, math.nan, math.inf, True, "1e-3", None):
        with pytest.raises(ArgumentError):
            positive_finite(bad, "t")


# ---- validation: the compile budget, in Python and in the CLI --------------------------------
@pytest.mark.parametrize("options", [dict(tol=-1), dict(tol=0), dict(tol=math.nan), dict(tol=math.inf),
                                     dict(tol=True), dict(max_qmc_points=0), dict(max_qmc_points=2.5),
                                     dict(max_quad_points=-3), dict(max_expand_size=True), dict(seed=-1)])
def test_compile_refuses_a_budget_out_of_range(options):
    name = next(iter(options))
    with pytest.raises(TPUsageError, match=name):
        tp.parse(SMALL).compile(**options)
    with pytest.raises(ValueError, match=name):          # Budget keeps its ValueError contract
        Budget(**options)


@pytest.mark.parametrize("flag, value", [("--tol", "-1"), ("--tol", "nan"), ("--tol", "inf"), ("--tol", "0"),
                                         ("--max-qmc-points", "0"), ("--max-quad-points", "2.5"),
                                         ("--max-expand-size", "-1")])
def test_cli_refuses_a_budget_out_of_range(flag, value, capsys):
    assert main(["compile", str(ROOT / "programs/relu_nngp.tp"), flag, value]) == 2
    err = capsys.readouterr().err
    assert flag in err and "must be a positive" in err and "Traceback" not in err


def test_cli_budget_in_range_still_compiles(capsys):
    assert main(["compile", str(ROOT / "programs/relu_nngp.tp"), "-D", "L=2", "--tol", "1e-8",
                 "--max-qmc-points", "1e5"]) == 0
    assert "kxx = 0.5" in capsys.readouterr().out


def test_cli_tol_nan_is_refused_in_a_subprocess_with_exit_2():
    proc = tpc("compile", "programs/relu_nngp.tp", "--tol", "nan")
    assert proc.returncode == 2 and "tol (--tol) must be a positive finite number, not nan" in proc.stderr


# ---- validation: parse and load arguments ----------------------------------------------------
@pytest.mark.parametrize("call", [lambda: tp.parse(b"out o = 1"), lambda: tp.parse(None), lambda: tp.parse(3),
                                  lambda: tp.parse(SMALL, file=7), lambda: tp.parse(SMALL, max_nodes=1.5),
                                  lambda: tp.load(3), lambda: tp.load(None), lambda: tp.load(b"x.tp"),
                                  lambda: tp.load(ROOT / "programs/relu_nngp.tp", L="4")])
def test_parse_and_load_refuse_arguments_of_the_wrong_type(call):
    with pytest.raises(TPUsageError):
        call()


# ---- validation: an output name is checked before the computation ----------------------------
def test_kernel_output_name_is_checked_before_anything_is_computed(tmp_path):
    """The inputs file does not even exist: the bad --output must be what is reported."""
    proc = tpc("kernel", "programs/kernels/relu_mlp.tp", "--inputs", str(tmp_path / "missing.npy"),
               "--out", str(tmp_path / "k.npy"), "--output", "bogus")
    assert proc.returncode == 2
    assert "--output: no output named 'bogus' (outputs: nngp, ntk)" in proc.stderr


def test_tailbound_output_name_is_checked_before_anything_is_computed():
    proc = tpc("tailbound", "programs/golikov_tailbound.tp", "--output", "bogus", "--trials", "100000")
    assert proc.returncode == 2 and "no output named 'bogus'" in proc.stderr
