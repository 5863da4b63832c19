"""What a newcomer hit (issue 27, item 6): each rough edge, with the behaviour it should have."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPError, TPNumericalError, TPUsageError
from tensorprog.limit.replay_store import ReplayStore
from tensorprog.tools import pairs

TEMPLATE = "programs/kernels/relu_mlp.tp"
QMC = "vector a, b, c, d ~ normal()\nout k = mean(tanh(a + b * c) * sin(d * a + 0.3))\n"


# ---- budget options where the [budget] warnings name them ---------------------------------------
def test_converge_takes_max_qmc_points_and_its_warning_is_true():
    from tensorprog.tools.converge import converge
    result = converge(tp.parse(QMC), [8], trials=2, max_qmc_points=64, progress=False)
    (warning,) = [w for w in result.warnings if "[budget]" in w]
    assert "max_qmc_points=64" in warning and "--max-qmc-points" in warning


@pytest.mark.parametrize("command", ["kernel", "converge", "compile"])
def test_commands_whose_warnings_name_max_qmc_points_have_it(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = capsys.readouterr().out
    assert "--max-qmc-points" in text and "--tol" in text


def test_kernel_passes_its_budget_to_every_compile(monkeypatch):
    seen = []
    real = pairs.compile_program

    def spy(program, *args, budget=None, **kwargs):
        seen.append(budget)
        return real(program, *args, budget=budget, **kwargs)

    monkeypatch.setattr(pairs, "compile_program", spy)
    monkeypatch.setattr(pairs, "STORE", ReplayStore(None))
    pairs.REPLAYS.clear()
    X = np.random.default_rng(2).normal(size=(3, 4))
    tp.kernel(TEMPLATE, X, L=2, max_qmc_points=4096, tol=1e-9)
    assert seen and all(b.max_qmc_points == 4096 and b.tol == 1e-9 for b in seen)
    with pytest.raises(TPUsageError, match=r"max_qmc_points \(--max-qmc-points\) must be a positive integer, not 0"):
        tp.kernel(TEMPLATE, X, L=2, max_qmc_points=0)


def test_quadrature_kept_is_not_reported_as_qmc():
    lim = tp.parse("vector x ~ normal()\nout a = mean(cos(3*x) * tanh(x) ** 2)\n").limit(
        max_quad_points=128, max_qmc_points=8, series_terms=0)      # (the series would need no grid)
    assert lim.outputs["a"].method == "quadrature"
    (warning,) = lim.warnings
    assert "quadrature value is kept" in warning and "went to QMC" not in warning
    lim = tp.parse("vector x ~ normal()\nout a = mean(cos(3*x) * tanh(x) ** 2)\n").limit(
        max_quad_points=16, max_qmc_points=8, series_terms=0)
    assert lim.outputs["a"].method == "qmc" and any("went to QMC" in w for w in lim.warnings)


# ---- language ------------------------------------------------------------------------------
BIAS = """\
param sb = 0.5
vector x ~ normal()
vector b ~ normal(var=sb)
matrix W, V ~ normal(var=sb)
h = W @ x + b
out k = mean(h * h)
out v = mean((V @ x) ** 2)
"""


def test_var_zero_switches_a_bias_off_exactly_in_both_back_ends():
    on, off = tp.parse(BIAS), tp.parse(BIAS, sb=0)
    assert on.limit().outputs["k"].value == pytest.approx(0.5 * 1 + 0.5, rel=1e-12)
    lim = off.limit().outputs
    assert lim["k"].value == 0 and lim["v"].value == 0
    run = off.execute(n=32, trials=2)
    assert run.outputs["k"].values == [0.0, 0.0] and run.outputs["v"].values == [0.0, 0.0]
    mean = tp.parse("vector m ~ normal(mean=2, var=0)\nout a = mean(m * m)\n")
    assert mean.limit().outputs["a"].value == 4 and mean.execute(n=8).outputs["a"].mean == 4


def test_matrix_list_declares_independent_matrices():
    p = tp.parse("vector x ~ normal()\nmatrix A, B[1..2] ~ normal(var=2)\n"
                 "out ab = mean((A @ x) * (B[2] @ x))\nout aa = mean((A @ x) ** 2)\n")
    assert [e.name for e in p.ir.eqns if isinstance(e, tp.ir.Matrix)] == ["A", "B[1]", "B[2]"]
    lim = p.limit().outputs
    assert lim["ab"].value == 0 and lim["aa"].value == pytest.approx(2.0, rel=1e-12)


def test_no_out_is_a_warning_and_executing_it_an_error(tmp_path, capsys):
    f = tmp_path / "p.tp"
    f.write_text("vector x ~ normal()\ny = relu(x)\n")
    p = tp.load(f)
    assert p.ir.warnings == (f"{f}:2:1: warning [no out]: the program has no 'out' statement, so it "
                             "computes and reports nothing (add one, e.g. out k = mean(x * x))",)
    with pytest.raises(TPUsageError, match="no 'out' statement"):
        p.execute(n=8)
    assert main(["execute", str(f), "-n", "8"]) == 2
    assert f"{f}: the program has no 'out'" in capsys.readouterr().err


@pytest.mark.parametrize("body, names", [("log(x) ** 2", "applies log;"), ("sqrt(x)", "applies sqrt;"),
                                         ("x ** 0.5", "applies '**';")])
def test_undefined_expectation_names_the_operation(body, names):
    with pytest.raises(TPNumericalError) as info:
        tp.parse(f"vector x ~ normal()\nout a = mean({body})\n").limit()
    assert "2:9: an expectation in the limit is not finite" in str(info.value) and names in str(info.value)


# ---- kernels ---------------------------------------------------------------------------------
def test_kernel_input_errors_name_the_file_and_the_row(tmp_path, capsys):
    X = np.ones((5, 3))
    X[3, 2] = np.nan
    np.save(tmp_path / "X.npy", X)
    assert main(["kernel", TEMPLATE, "--inputs", str(tmp_path / "X.npy")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{tmp_path / 'X.npy'}: the inputs' row 3 (X[3], counted from 0) holds NaN at column 2")
    assert main(["kernel", TEMPLATE, "--inputs", str(tmp_path / "none.npy")]) == 2
    assert capsys.readouterr().err.startswith(f"{tmp_path / 'none.npy'}: --inputs: cannot read")
    X[3, 2], X[1, 0] = np.inf, np.nan
    with pytest.raises(TPUsageError, match=r"row 1 \(X\[1\], counted from 0\) holds NaN at column 0; 2 rows"):
        tp.kernel(TEMPLATE, X)


def test_kernel_json_gives_the_arrays(tmp_path, capsys):
    X = np.random.default_rng(1).normal(size=(4, 3))
    np.save(tmp_path / "X.npy", X)
    assert main(["kernel", TEMPLATE, "--inputs", str(tmp_path / "X.npy"), "-D", "L=2", "--json",
                 "--out", str(tmp_path / "K.npz")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "trials" not in data and data["width"] is None
    saved = np.load(tmp_path / "K.npz")
    np.testing.assert_array_equal(np.array(data["outputs"]["nngp"]["value"]), saved["nngp"])
    np.testing.assert_array_equal(np.array(data["outputs"]["ntk"]["error"]), saved["ntk_error"])
    assert main(["kernel", TEMPLATE, "--inputs", str(tmp_path / "X.npy"), "-D", "L=2", "--json",
                 "-n", "32", "--trials", "2"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["trials"] == 2 and np.array(data["outputs"]["nngp"]["mean"]).shape == (4, 4)
    assert len(data["outputs"]["nngp"]["values"]) == 2


HIDDEN_BIAS = """\
param q11 = 1
param q12 = 0.5
param q22 = 1
param sb = 0.1
vector h1, g1 ~ normal(cov=[[q11, q12], [q12, q22]])
vector b[2..3] ~ normal(var=sb)
x = h1
y = g1
for l in 2..3 {
    matrix W ~ normal(var=2)
    x = W @ relu(x) + b[l]
    y = W @ relu(y) + b[l]
}
out nngp = mean(relu(x) * relu(y))
"""


def test_templates_with_hidden_biases_replay_from_the_store(tmp_path, monkeypatch):
    """A template with extra initial vectors (hidden-layer biases) is recorded once; a new process
    (an empty memory, the same store) on other data replays the record instead of recording again."""
    f = tmp_path / "bias.tp"
    f.write_text(HIDDEN_BIAS)
    monkeypatch.setattr(pairs, "STORE", ReplayStore(tmp_path / "store"))
    recorded = []
    real = pairs.record_class
    monkeypatch.setattr(pairs, "record_class", lambda *a: recorded.append(1) or real(*a))
    rng = np.random.default_rng(5)
    pairs.REPLAYS.clear()
    first = tp.kernel(f, rng.normal(size=(5, 3)))
    assert recorded and first.outputs["nngp"].method == "exact"
    recorded.clear()
    pairs.REPLAYS.clear()                                   # as a new process: memory empty
    tp.kernel(f, rng.normal(size=(6, 3)))
    assert recorded == []
