"""``compile(method="particles")`` (tensorprog/limit/particles.py): limits from finite widths N and
N/4 with replicas, extrapolated to 1/n → 0, with an honest error.

* the statistics alone, on synthetic outputs c + b₁/n + b₂/n² + σ/√n·noise: the extrapolation
  removes b₁/n exactly, and over many experiments the stated error covers c at least 95% of
  the time while being at most 10× the root-mean-square actual error;
* on programs with exactly known limits (ReLU NNGP, Wigner moments, a Haar program, one μP SGD step
  whose limit the recurrence computes by quadrature), over a few seeds: every stated error covers the exact
  value, and the errors are at most 10× the rms actual error (the full study over many seeds is
  bench/particles_coverage.py);
* options are checked (TPUsageError, exit 2 from ``tpc``); text, JSON (method ``particles``,
  exact null), LaTeX and the HTML display;
* a seed reproduces, and different seeds differ;
* the QMC ``[budget]`` warning names ``--method particles``.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPUsageError
from tensorprog.limit.particles import (MIN_REPLICAS, ParticleOptions, extrapolate, most_products,
                                        particles, run_seeds)

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "programs"


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


# ---- the statistics, on synthetic outputs -----------------------------------------------------
def synthetic(rng, c: float, b1: float, b2: float, sigma: float, n: int, replicas: int) -> tuple[float, float, int]:
    values = c + b1 / n + b2 / n ** 2 + sigma / math.sqrt(n) * rng.standard_normal(replicas)
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(replicas)), replicas


def test_extrapolation_removes_the_first_order_bias_exactly():
    v = extrapolate((2 + 3 / 1024, 0.0, 8), (2 + 3 / 256, 0.0, 8), 4.0)
    assert abs(v.value - 2) < 1e-14
    assert v.statistical == 0 and abs(v.bias - 3 / 1024) < 1e-15      # the first-order correction
    assert v.error >= abs(v.value - 2)


@pytest.mark.parametrize("replicas", [4, 8, 32])
@pytest.mark.parametrize("b1, b2", [(0.0, 0.0), (5.0, 0.0), (-20.0, 40.0)])
def test_synthetic_coverage_and_tightness(replicas, b1, b2):
    rng = np.random.default_rng(1000 * replicas + int(b1))
    c, sigma, n = 0.7, 2.0, 4096
    errors, actual = [], []
    for _ in range(2000):
        v = extrapolate(synthetic(rng, c, b1, b2, sigma, n, replicas),
                        synthetic(rng, c, b1, b2, sigma, n // 4, replicas), 4.0)
        errors.append(v.error)
        actual.append(v.value - c)
    errors, actual = np.array(errors), np.array(actual)
    coverage = np.mean(np.abs(actual) <= errors)
    rms = math.sqrt(np.mean(actual ** 2))
    assert coverage >= 0.95, coverage
    assert np.mean(errors) <= 10 * rms, (np.mean(errors), rms)


# ---- programs with known limits ---------------------------------------------------------------
#: Haar-orthogonal matrices, forward and transposed (their limit: tensorprog/limit/haar.py; at finite
#: width the conditional engine's Haar analogue)
HAAR = """vector v ~ normal()
matrix O ~ orthogonal(var=2)
x = O @ v
y = O.T @ tanh(x)
out a = mean(y * v)
out b = mean(tanh(x) ** 2)
out c = mean(y * y)
"""
CASES = {       # program, params, width N, replicas
    "relu_nngp": ({}, 256, 8),
    "wigner_moments": ({}, 256, 8),
    "golikov_sgd_mup": ({"lr": 0.5}, 256, 8),
    "haar": ({}, 256, 8),
}
SEEDS = range(8)


def case_program(name: str, params: dict) -> tp.Program:
    return tp.parse(HAAR, file="haar.tp") if name == "haar" else tp.load(PROGRAMS / f"{name}.tp", **params)


@pytest.fixture(scope="module")
def studies() -> dict:
    """{program: (exact limits, [limit by particles for each seed])}."""
    out = {}
    for name, (params, n, replicas) in CASES.items():
        program = case_program(name, params)
        exact = program.compile().limit().outputs
        assert all(v.error < 1e-8 for v in exact.values())
        runs = [program.compile(method="particles", particles=n, replicas=replicas, seed=s).limit()
                for s in SEEDS]
        out[name] = (exact, runs)
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_stated_error_covers_the_exact_limit(studies, name):
    exact, runs = studies[name]
    for seed, lim in zip(SEEDS, runs):
        for out, v in lim.outputs.items():
            assert v.method == "particles" and v.exact is None
            assert abs(v.value - exact[out].value) <= v.error, (name, out, seed, v, exact[out].value)


@pytest.mark.parametrize("name", list(CASES))
def test_stated_error_is_not_absurdly_loose(studies, name):
    exact, runs = studies[name]
    for out in exact:
        actual = [runs[k].outputs[out].value - exact[out].value for k in range(len(runs))]
        stated = [runs[k].outputs[out].error for k in range(len(runs))]
        rms = math.sqrt(np.mean(np.square(actual)))
        assert np.mean(stated) <= 10 * rms, (name, out, np.mean(stated), rms)


def test_engines():
    assert tp.load(PROGRAMS / "relu_nngp.tp").compile(method="particles", particles=256, replicas=4).engine \
        == "conditional"
    haar = case_program("haar", {}).compile(method="particles", particles=256, replicas=4)
    assert haar.engine == "conditional"                    # orthogonal: the Haar analogue
    uniform = tp.load(PROGRAMS / "relu_nngp.tp").compile(method="particles", particles=256, replicas=4,
                                                          matrix_dist="uniform")
    assert uniform.engine == "dense"                       # iid non-Gaussian: not conditionable
    with pytest.raises(TPUsageError, match="not Gaussian"):
        particles(tp.load(PROGRAMS / "relu_nngp.tp").ir, ParticleOptions(particles=256, replicas=4, conditional=True),
                  matrix_dist="uniform")


def test_the_engine_and_the_runs_are_reported():
    program = tp.load(PROGRAMS / "relu_nngp.tp")
    res = program.compile(method="particles", particles=256, replicas=4, seed=3)
    assert res.large.width == 256 and res.small.width == 64 and res.large.replicas == res.small.replicas == 4
    assert res.engine in ("conditional", "dense")
    seeds = run_seeds(3)
    assert (res.large.seed, res.small.seed) == seeds and seeds[0] != seeds[1]
    direct = program.execute(256, trials=4, seed=seeds[0], **({"conditional": True} if res.engine ==
                                                                "conditional" else {}))
    assert res.large.means["kxy"] == direct.outputs["kxy"].mean


def test_a_seed_reproduces_and_seeds_differ():
    program = tp.load(PROGRAMS / "relu_nngp.tp")
    a, b, c = (program.compile(method="particles", particles=256, replicas=4, seed=s).limit() for s in (5, 5, 6))
    assert a.outputs["kxy"].value == b.outputs["kxy"].value
    assert a.outputs["kxy"].value != c.outputs["kxy"].value


# ---- options -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"particles": 100}, "too small"),
    ({"particles": 0}, "positive integer"),
    ({"particles": 2.5e4}, "positive integer"),
    ({"particles": True}, "positive integer"),
    ({"replicas": MIN_REPLICAS - 1}, f"at least {MIN_REPLICAS}"),
    ({"replicas": 8.0}, f"at least {MIN_REPLICAS}"),
    ({"seed": -1}, "non-negative"),
    ({"symbolic": True}, "not of --method particles"),
    ({"tol": 1e-3}, "not of --method particles"),
])
def test_bad_options_are_usage_errors(kwargs, words):
    program = tp.load(PROGRAMS / "relu_nngp.tp")
    with pytest.raises(TPUsageError, match=words):
        program.compile(method="particles", **kwargs)


def test_too_few_particles_for_the_products_names_the_least():
    program = tp.load(PROGRAMS / "mup_train.tp", T=20)         # 41 products by W
    assert most_products(program.ir) == 41
    with pytest.raises(TPUsageError, match=r"41 products by one matrix.*--particles 656 or more"):
        program.compile(method="particles", particles=512)


def test_method_and_particle_options_are_checked():
    program = tp.load(PROGRAMS / "relu_nngp.tp")
    with pytest.raises(TPUsageError, match="unknown compile method"):
        program.compile(method="montecarlo")
    with pytest.raises(TPUsageError, match="apply to --method particles only"):
        program.compile(particles=1024)
    assert ParticleOptions().small == ParticleOptions().particles // 4


@pytest.mark.parametrize("args, words", [
    (["--method", "particles", "--particles", "64"], "too small"),
    (["--method", "particles", "--replicas", "2"], "at least 4"),
    (["--method", "particles", "--symbolic"], "--symbolic"),
    (["--method", "particles", "--tol", "1e-3"], "--tol"),
    (["--particles", "1024"], "apply to --method particles only"),
])
def test_cli_usage_errors_exit_2(args, words):
    code, out, err = run_cli("compile", str(PROGRAMS / "relu_nngp.tp"), *args)
    assert code == 2 and words in err and "Traceback" not in err and out == ""


def test_cli_bad_numbers_are_argparse_errors():
    with pytest.raises(SystemExit) as info, contextlib.redirect_stderr(io.StringIO()):
        main(["compile", str(PROGRAMS / "relu_nngp.tp"), "--method", "particles", "--particles", "-3"])
    assert info.value.code == 2


# ---- outputs -----------------------------------------------------------------------------------
def test_cli_text_json_latex():
    base = ["compile", str(PROGRAMS / "relu_nngp.tp"), "--method", "particles", "--particles", "256",
            "--replicas", "4", "--seed", "1"]
    code, text, _ = run_cli(*base)
    assert code == 0 and "# particles" in text and "N = 256" in text and "(particles)" in text
    assert "kxy = " in text and "Master Theorem" not in text
    code, out, _ = run_cli(*base, "--emit", "json")
    data = json.loads(out)
    assert code == 0 and data["method"] == "particles"
    for name in ("kxy", "kxx"):
        o = data["outputs"][name]
        assert o["method"] == "particles" and o["exact"] is None and o["error"] > 0
    assert [r["width"] for r in data["particles"]["runs"]] == [256, 64]
    api = tp.load(PROGRAMS / "relu_nngp.tp").compile(method="particles", particles=256, replicas=4, seed=1)
    assert data["outputs"]["kxy"]["value"] == api.limit().outputs["kxy"].value
    code, out, _ = run_cli(*base, "--emit", "latex")
    assert code == 0 and r"\pm" in out and "particles" in out


def test_html_display():
    res = tp.load(PROGRAMS / "relu_nngp.tp").compile(method="particles", particles=256, replicas=4)
    html = res._repr_html_()
    assert "by particles" in html and "kxy" in html and "mean at 256" in html and "mean at 64" in html
    assert "particles" in res.limit()._repr_html_()


def test_qmc_budget_warning_names_particles(tmp_path):
    path = tmp_path / "q.tp"
    path.write_text("vector x, y, z, w, u ~ normal()\n"
                    "out o = mean(tanh(x + y) * tanh(y - z) * tanh(z + w) * tanh(w - u) * tanh(u + x + 1))\n")
    lim = tp.load(path).compile(max_qmc_points=2 ** 10, max_quad_points=10).limit()
    text = "\n".join(lim.warnings)
    assert "[budget]" in text and "--max-qmc-points" in text and "--method particles" in text


def test_a_pure_1_over_n_bias_is_removed_and_named():
    """mean(x)² has the mean 1/n exactly and the limit 0: the extrapolation removes the bias that
    the run at N has, and the [particles] warning says the correction dominates the error."""
    program = tp.parse("vector x ~ normal()\nout o = mean(x) ** 2\n", file="bias.tp")
    res = program.compile(method="particles", particles=256, replicas=256, seed=0)
    v = res.outputs["o"]
    assert abs(res.large.means["o"] - 1 / 256) < 4 * res.large.sems["o"]      # the run at N is biased ...
    assert res.large.means["o"] > 6 * res.large.sems["o"]
    assert abs(v.value) <= v.error and abs(v.value) < 3 * v.se                # ... the extrapolation is not
    assert v.bias > v.statistical
    assert any("[particles] o:" in w and "--particles" in w for w in res.limit().warnings)


# ---- control variates (tensorprog/limit/controls.py) ------------------------------------------
def synthetic_run(rng, width: int, c: float, c0: float, b1: float, bc: float, beta: float,
                  sigma: float, replicas: int):
    """A WidthRun of an output y and a control z at width n: z = c0 + bc/n + ε_z/√n,
    y = c + b1/n + β ε_z/√n + σ ε/√n (ε's standard normal)."""
    from tensorprog.limit.particles import WidthRun
    ez, e = rng.standard_normal(replicas), rng.standard_normal(replicas)
    z = c0 + bc / width + ez / math.sqrt(width)
    y = c + b1 / width + (beta * ez + sigma * e) / math.sqrt(width)
    values = {"y": tuple(y), "z": tuple(z)}
    return WidthRun(width, replicas, 0, {k: float(np.mean(v)) for k, v in values.items()},
                    {k: float(np.std(v, ddof=1) / math.sqrt(replicas)) for k, v in values.items()}, 0.0, values)


@pytest.mark.parametrize("replicas", [8, 16])
@pytest.mark.parametrize("b1, bc", [(0.0, 0.0), (5.0, -3.0)])
def test_control_variates_cover_and_reduce_the_error(replicas, b1, bc):
    from tensorprog.limit.controls import ControlLimit
    from tensorprog.limit.particles import estimate
    rng = np.random.default_rng(7 * replicas + int(b1))
    c, c0, n = 0.7, 0.2, 4096
    control = [ControlLimit("z", 1, c0, 0.0, "exact")]
    with_cv, without = [], []
    for _ in range(2000):
        large = synthetic_run(rng, n, c, c0, b1, bc, 2.0, 0.3, replicas)
        small = synthetic_run(rng, n // 4, c, c0, b1, bc, 2.0, 0.3, replicas)
        with_cv.append(estimate("y", 0, large, small, control, 4.0, replicas))
        without.append(estimate("y", 0, large, small, [], 4.0, replicas))
    for runs in (with_cv, without):
        actual = np.array([v.value - c for v in runs])
        errors = np.array([v.error for v in runs])
        assert np.mean(np.abs(actual) <= errors) >= 0.95
        assert np.mean(errors) <= 10 * math.sqrt(np.mean(actual ** 2))
    rms = [math.sqrt(np.mean([(v.value - c) ** 2 for v in runs])) for runs in (with_cv, without)]
    assert rms[0] < 0.3 * rms[1], rms            # the control explains 2²/(2² + 0.3²) of the variance


def test_control_variates_on_a_program_with_a_known_limit():
    """One μP SGD step (golikov_sgd_mup.tp, lr = 0.5): f0 (limit 0 by the recurrence) controls the
    others; over fixed seeds every stated error covers the quadrature limit, f0 is reported by its
    recurrence value, and the errors are at most 10× the rms actual error."""
    program = tp.load(PROGRAMS / "golikov_sgd_mup.tp", lr=0.5)
    exact = program.compile().limit().outputs
    runs = [program.compile(method="particles", particles=256, replicas=8, seed=s, controls=("f0",))
            for s in range(8)]
    assert runs[0].controls[0].name == "f0" and runs[0].controls[0].value == exact["f0"].value
    for r in runs:
        lim = r.limit().outputs
        assert lim["f0"].method == exact["f0"].method and lim["f0"].value == exact["f0"].value
        for out in ("f1", "K", "f_lin", "dfeat"):
            assert lim[out].method == "particles" and len(r.outputs[out].beta) == 1
            assert abs(lim[out].value - exact[out].value) <= lim[out].error, (out, r.options.seed)
    for out in ("f1", "K", "f_lin", "dfeat"):
        actual = [r.outputs[out].value - exact[out].value for r in runs]
        assert np.mean([r.outputs[out].error for r in runs]) <= 10 * math.sqrt(np.mean(np.square(actual)))


def test_control_variates_of_a_later_scalar_use_the_prefix():
    """mup_train.tp (T = 5): f[0] and f[1] are scalars of its first steps; their limits come from
    the program's prefix (as cheap as golikov_sgd_mup.tp), f1 is reported by the recurrence."""
    program = tp.load(PROGRAMS / "mup_train.tp", T=5)
    r = program.compile(method="particles", particles=256, replicas=8, controls=("f[0]", "f[1]"))
    golikov = tp.load(PROGRAMS / "golikov_sgd_mup.tp", lr=0.5).compile().limit().outputs
    assert abs(r.limit().outputs["f1"].value - golikov["f1"].value) < 1e-8
    assert r.outputs["fT"].method == "particles" and len(r.outputs["fT"].beta) == 2
    assert "control variates" in str(r) and r.to_dict()["controls"][1]["name"] == "f[1]"
    assert "control variates" in r._repr_html_() and "f[1]" in r._repr_html_()


@pytest.mark.parametrize("controls, replicas, words", [
    (("nope",), 8, "not a scalar of this program"),
    (("f0", "K", "f1", "dfeat"), 7, "need at least 8 replicas"),
])
def test_bad_control_variates_are_usage_errors(controls, replicas, words):
    program = tp.load(PROGRAMS / "golikov_sgd_mup.tp", lr=0.5)
    with pytest.raises(TPUsageError, match=words):
        program.compile(method="particles", particles=256, replicas=replicas, controls=controls)


def test_cli_control_variates():
    code, out, err = run_cli("compile", str(PROGRAMS / "golikov_sgd_mup.tp"), "-D", "lr=0.5", "--method",
                             "particles", "--particles", "256", "--replicas", "8", "--control-variates", "f0")
    assert code == 0, err
    assert "control variates" in out and "f0 = 0" in out
    code, _, err = run_cli("compile", str(PROGRAMS / "golikov_sgd_mup.tp"), "--control-variates", "f0")
    assert code == 2 and "--method particles only" in err


def test_collinear_controls_lose_one_degree_of_freedom_not_the_fit():
    """f[0] and dl[0] = f[0] − y are collinear: the fit is the same as with f[0] alone, and its
    degrees of freedom are those of one control."""
    program = tp.load(PROGRAMS / "mup_train.tp", T=2)
    one = program.compile(method="particles", particles=256, replicas=8, controls=("f[0]",))
    two = program.compile(method="particles", particles=256, replicas=8, controls=("f[0]", "dl[0]"))
    for out in ("f1", "fT"):
        assert two.outputs[out].dof == one.outputs[out].dof == 8 - 2
        assert abs(two.outputs[out].value - one.outputs[out].value) < 1e-12
        assert abs(two.outputs[out].se - one.outputs[out].se) < 1e-12


def test_arrays_of_outputs_entry_by_entry():
    """``out K[i]`` is reported entry by entry (it was an internal error), with controls too."""
    source = ("vector x ~ normal()\nmatrix W ~ normal()\ny = W @ x\n"
              "out K[1] = mean(y * y)\nout K[2] = mean(x * y)\n")
    program = tp.parse(source, file="arrays.tp")
    plain = program.compile(method="particles", particles=512, replicas=8).limit().outputs
    assert abs(plain["K[1]"].value - 1) <= plain["K[1]"].error
    cv = program.compile(method="particles", particles=512, replicas=8, controls="K[2]").limit().outputs
    assert cv["K[2]"].value == 0 and cv["K[1]"].method == "particles"
    assert abs(cv["K[1]"].value - 1) <= cv["K[1]"].error
