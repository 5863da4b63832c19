"""``tpc converge`` and ``tensorprog.tools.converge``: finite width against the limit, with the rate.

The tolerances are statistical and stated where they are used.  The cheap program
``vector x ~ normal(); out m = mean(x*x); out s = mean(x)**2`` has known finite-width
laws: m − 1 has mean 0 and variance 2/n exactly, so the RMS deviation of one trial is
sqrt(2/n) (rate −1/2) while the bias is zero (below the noise at every width); s is
χ²₁/n, so its bias is exactly 1/n and its RMS sqrt(3)/n (both rates −1).
The process-level tests (JSON and progress on stderr, exit code 2) run real subprocesses,
started at once by one module fixture; the rest of the command line runs in-process.
"""
from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.tools.converge import ConvergeResult, converge, parse_widths, render_text
from tensorprog.errors import TPUsageError

ROOT = Path(__file__).resolve().parent.parent
RELU = str(ROOT / "programs" / "relu_nngp.tp")
CHEAP = "vector x ~ normal()\nout m = mean(x*x)\nout s = mean(x)**2\n"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# the cheap program: 6 widths (factor 2 apart) and T trials per width
WIDTHS = [64, 128, 256, 512, 1024, 2048]
T = 2000


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
        return True
    except ImportError:
        return False


def relu_nngp_limit(rho: float = 0.3, L: int = 3) -> float:
    """kxy of programs/relu_nngp.tp, the degree-1 arc-cosine map applied L times, halved
    (independent of the compiler)."""
    for _ in range(L):
        rho = (math.sqrt(1 - rho * rho) + (math.pi - math.acos(rho)) * rho) / math.pi
    return rho / 2


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def tpc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MPLBACKEND="Agg")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tensorprog", "converge", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    jobs = {
        "json": [RELU, "--widths", "32,64,128,256", "--trials", "16", "--seed", "3", "--json",
                 "--progress"],
        "bad_widths": [RELU, "--widths", "64,abc"],
    }
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = {k: pool.submit(tpc, *v) for k, v in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


@pytest.fixture(scope="module")
def cheap() -> ConvergeResult:
    return converge(tp.parse(CHEAP), WIDTHS, trials=T, seed=7)


# ---- the statistics, on a program whose finite-width law is known

def test_cheap_limit_and_shapes(cheap):
    m = cheap.outputs["m"]
    assert (m.limit, m.method) == (1.0, "exact") and m.limit_error < 1e-12
    assert cheap.widths == m.widths == WIDTHS and cheap.trials == T
    for key in ("means", "stds", "sems", "rms", "rms_sems", "bias", "bias_resolved", "values"):
        assert len(getattr(m, key)) == len(WIDTHS), key
    assert all(len(v) == T for v in m.values)
    assert len(set(cheap.width_seeds)) == len(WIDTHS)          # independent streams per width


def test_rms_rate_is_minus_one_half(cheap):
    m = cheap.outputs["m"]
    # E rms² = 2/n exactly; rms is estimated to a relative 1/sqrt(2T) = 1.6 % per width:
    # 5 standard errors is 8 %.
    ratio = np.array(m.rms) / np.sqrt(2 / np.array(WIDTHS))
    assert np.all(np.abs(ratio - 1) < 5 / math.sqrt(2 * T)), ratio
    # the slope's standard error is 1.6 % / sqrt(Σ (log n − mean)²) ≈ 0.0055 for 6 doublings;
    # the propagated error must say so, and the rate lie within 5 of them of −1/2 (|Δ| < 0.03).
    expected_err = 1 / math.sqrt(2 * T) / math.sqrt(np.sum((np.log(WIDTHS) - np.log(WIDTHS).mean()) ** 2))
    assert 0.7 * expected_err < m.rate_error < 1.4 * expected_err
    assert abs(m.rate + 0.5) < 5 * expected_err, m.rate


def test_zero_bias_is_reported_as_noise(cheap):
    m = cheap.outputs["m"]
    # the mean of m is exactly 1: |mean − 1| is within 2 sem at (nearly) every width
    assert sum(m.bias_resolved) <= 1
    assert any("below the statistical noise" in note and "bias_rate fits noise" in note for note in m.notes)
    assert any(w.startswith("m: ") and "noise" in w for w in cheap.warnings)
    assert m.bias_rate_error is None or m.bias_rate_error > 0.3   # meaningless, and says so


def test_a_one_over_n_output(cheap):
    s = cheap.outputs["s"]
    n = np.array(WIDTHS, float)
    assert s.limit == 0.0
    # s = χ²₁/n: bias 1/n (relative sem sqrt(2/T) = 3.2 %), rms sqrt(3)/n (relative se 3.7 %)
    assert np.all(np.abs(np.array(s.bias) * n - 1) < 5 * math.sqrt(2 / T))
    assert np.all(np.abs(np.array(s.rms) * n / math.sqrt(3) - 1) < 5 * 0.037)
    assert all(s.bias_resolved) and not s.notes
    for rate, err in ((s.rate, s.rate_error), (s.bias_rate, s.bias_rate_error)):
        assert err < 0.03 and abs(rate + 1) < 5 * err, (rate, err)


def test_relu_nngp_converges_to_its_limit():
    r = converge(tp.load(RELU), [32, 64, 128, 256], trials=24, seed=0)
    kxy = r.outputs["kxy"]
    assert kxy.limit == pytest.approx(relu_nngp_limit(), abs=1e-12)
    assert r.outputs["kxx"].limit == pytest.approx(0.5, abs=1e-12)
    for o in r.outputs.values():
        assert np.all(np.array(o.bias) < 4 * np.array(o.sems) + 2e-3), (o.name, o.bias, o.sems)
        # 24 trials: rms to ≈ 15-20 % per width, slope error ≈ 0.1–0.15 over 3 doublings
        assert o.rate_error < 0.2 and abs(o.rate + 0.5) < 4 * o.rate_error, (o.name, o.rate, o.rate_error)


def test_matrix_law_and_reproducibility():
    p = tp.load(RELU, L=2)
    a = converge(p, [32, 64], trials=3, seed=5, matrix_dist="uniform")
    b = converge(p, [64, 32], trials=3, seed=5, matrix_dist="uniform")
    assert a.to_dict(values=True) | {"seconds": 0} == b.to_dict(values=True) | {"seconds": 0}
    assert a.matrix_dist == "uniform" and a.label == "uniform"
    # the limit is compiled with the swapped law: relu with uniform matrices leaves a hypothesis
    assert any("smooth nonlinearity" in w for w in a.warnings)
    assert not any("smooth nonlinearity" in w for w in converge(p, [32], trials=2).warnings)
    c = converge(p, [32, 64], trials=3, seed=6, matrix_dist="uniform")
    assert c.outputs["kxy"].values != a.outputs["kxy"].values


def test_progress_callable_and_stream(capsys):
    seen = []
    converge(tp.parse(CHEAP), [8, 16], trials=2, progress=lambda w, t, s: seen.append((w, t, s)))
    assert [(w, t) for w, t, _ in seen] == [(8, 2), (16, 2)] and all(s >= 0 for *_, s in seen)
    assert capsys.readouterr().err == ""                  # a callable instead of the bar
    converge(tp.parse(CHEAP), [8], trials=1, progress=True)
    err = capsys.readouterr().err
    assert err.startswith("\rwidths:") and "1/1" in err and "n=8" in err
    with pytest.raises(TypeError, match="progress must be"):         # a stream is no longer taken
        converge(tp.parse(CHEAP), [8], trials=1, progress=sys.stderr)


def test_one_trial_and_one_width_give_json_without_nan():
    r = converge(tp.parse(CHEAP), [16], trials=1)
    d = json.loads(json.dumps(r.to_dict(), allow_nan=False))
    assert d["outputs"]["m"]["rate"] is None and d["outputs"]["m"]["sems"] == [None]
    assert any("one width only" in n for n in r.outputs["m"].notes)
    assert "rate" in render_text(r)


@pytest.mark.parametrize("text, widths", [("256,512,1024", [256, 512, 1024]),
                                          (" 512, 256,512 ", [256, 512]), ("1", [1])])
def test_parse_widths(text, widths):
    assert parse_widths(text) == widths


@pytest.mark.parametrize("kwargs", [dict(widths=[0, 8]), dict(widths=[]), dict(widths=[8.5]),
                                    dict(widths=[8], trials=0), dict(widths=[8], seed=-1)])
def test_bad_arguments_are_usage_errors(kwargs):
    with pytest.raises(TPUsageError):
        converge(tp.parse(CHEAP), **{"trials": 2, **kwargs})


def test_too_wide_fails_before_running_the_small_widths():
    seen = []
    with pytest.raises(tp.TPLimitError, match="GiB"):
        converge(tp.load(RELU), [8, 10**6], trials=2, progress=lambda *a: seen.append(a))
    assert seen == []


# ---- plots

@pytest.mark.skipif(not have_matplotlib(), reason="the plot extra (matplotlib) is not installed")
def test_plot_overlays_matrix_laws(tmp_path):
    import matplotlib
    matplotlib.use("Agg")
    from tensorprog.tools.plot import plot_convergence
    p = tp.load(RELU, L=2)
    results = [converge(p, [16, 32, 64], trials=4, matrix_dist=law) for law in ("normal", "rademacher")]
    path = plot_convergence(results, tmp_path / "laws.png", title="two laws", outputs=["kxy"])
    data = Path(path).read_bytes()
    w, h = png_size(data)
    assert len(data) > 5000 and w > 400 and h > 300
    with pytest.raises(TPUsageError, match="no output"):
        plot_convergence(results, tmp_path / "x.png", outputs=["nope"])
    with pytest.raises(TPUsageError, match="labels"):
        plot_convergence(results, tmp_path / "x.png", labels=["one"])
    with pytest.raises(TPUsageError, match="cannot write the plot"):
        plot_convergence(results[0], tmp_path / "no such dir" / "x.png")


def test_missing_matplotlib_is_a_clear_error(monkeypatch, tmp_path, capsys):
    from tensorprog.tools.plot import plot_convergence
    monkeypatch.setitem(sys.modules, "matplotlib", None)           # import matplotlib -> ImportError
    r = converge(tp.parse(CHEAP), [8, 16], trials=2)
    with pytest.raises(TPUsageError, match=r"pip install 'tensorprog\[plot\]'"):
        plot_convergence(r, tmp_path / "x.png")
    # the CLI refuses before running anything
    assert main(["converge", RELU, "--widths", "8", "--plot", str(tmp_path / "y.png")]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "Traceback" not in err and not (tmp_path / "y.png").exists()


# ---- the command line

def test_cli_json(runs):
    r = runs["json"]
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["trials"], d["seed"], d["matrix_dist"], d["widths"]) == (16, 3, None, [32, 64, 128, 256])
    assert isinstance(d["warnings"], list)
    assert set(d["outputs"]) == {"kxy", "kxx"}
    kxy = d["outputs"]["kxy"]
    for key in ("limit", "widths", "means", "stds", "rate", "limit_error", "method", "sems", "rms",
                "bias_rate"):
        assert key in kxy, key
    assert kxy["limit"] == pytest.approx(relu_nngp_limit(), abs=1e-12) and kxy["method"] == "exact"
    assert all(len(kxy[k]) == 4 for k in ("widths", "means", "stds", "sems", "rms"))
    assert -1.0 < kxy["rate"] < -0.1
    # --progress: a bar over the widths on stderr, nothing else
    lines = [line for line in r.stderr.splitlines() if line]     # its redraws (text mode: \r -> \n)
    assert lines and all(line.startswith("widths:") for line in lines)
    assert "4/4" in lines[-1] and all(f"n={w}" in r.stderr for w in (32, 64, 128, 256))


def test_cli_plot_writes_png(tmp_path, capsys):
    code = main(["converge", RELU, "--widths", "32,64", "--trials", "4", "--plot", str(tmp_path / "r.png")])
    out, err = capsys.readouterr()
    if not have_matplotlib():
        assert code == 2 and "pip install 'tensorprog[plot]'" in err
        pytest.skip("the plot extra (matplotlib) is not installed")
    assert code == 0, err
    assert err == "" and f"plot: {tmp_path / 'r.png'}" in out    # no progress: stderr is no terminal
    data = (tmp_path / "r.png").read_bytes()
    assert data[:8] == PNG_SIGNATURE and len(data) > 5000 and png_size(data)[0] > 400


def test_cli_bad_widths_process(runs):
    r = runs["bad_widths"]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "--widths: 'abc' is not an integer width" in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_cli_text(capsys):
    assert main(["converge", RELU, "--widths", "64,32", "--trials", "4", "-D", "L=2"]) == 0
    out, err = capsys.readouterr()
    assert "kxy: limit" in out and "rate" in out and "bias_rate" in out and err == ""
    rows = [line.split()[0] for line in out.splitlines() if line.strip()[:2] in ("32", "64")]
    assert rows == ["32", "64", "32", "64"]              # sorted, for each output


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as stop:                   # argparse's own errors
        return stop.code


@pytest.mark.parametrize("args, message", [(["--widths", "0,64"], "the width 0 is not at least 1"),
                                           (["--widths=-8,64"], "the width -8 is not at least 1"),
                                           (["--widths", "64,128.5"], "'128.5' is not an integer width"),
                                           (["--widths", ""], "comma-separated list of widths"),
                                           (["--widths", "32", "--matrix-dist", "cauchy"], "--matrix-dist"),
                                           (["--widths", "32", "--trials", "0"], "trials"),
                                           (["--widths", "32", "--seed", "-1"], "seed")])
def test_cli_errors_exit_2(capsys, args, message):
    assert _exit_code(["converge", RELU, *args]) == 2
    out, err = capsys.readouterr()
    assert message in err and "Traceback" not in err and out == ""
