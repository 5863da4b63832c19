"""Hypotheses of the Master Theorem and finiteness of the limit (tensorprog/limit/hypotheses.py, finiteness.py, result.py).

* a scalar whose limit is not a finite real float — division by zero (sympy zoo), NaN, ±inf,
  complex (sqrt or log of a negative number, a negative base to a non-integer power), or a
  finite number beyond the float range (exp(800)) — is a TPNumericalError located at its
  statement, through the Python API and through ``tpc compile`` (exit 2, no traceback);
* [polynomially bounded]: a vector whose Z grows faster than any polynomial (exp) multiplied by
  a matrix is outside the Master Theorem; exp inside a Moment only, exp under a bounded head
  and tanh networks are not;
* [exponential moments]: exp of a laplace vector beyond its exponential moments.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.limit.result import defect, summarize

ROOT = Path(__file__).resolve().parent.parent
KERNEL = str(ROOT / "programs" / "cond_kernel.tp")

X = "vector x ~ normal()\n"
ZERO = X + "c = mean(x * 0)\n"            # c̊ = 0 exactly
MINUS = X + "c = mean(x * x) - 2\n"       # c̊ = −1 exactly
BIG = X + "c = mean(x * x) * 800\n"       # c̊ = 800 exactly

# (program, (line, col), words the first line of the message must contain)
SCALAR_CASES = {
    "div_zero": (ZERO + "out o = 1 / c", (3, 9), ["division by zero"]),
    "div_zero_mean_x": (X + "c = mean(x)\nout o = 1 / c", (3, 9), ["division by zero"]),
    "neg_power": (ZERO + "out o = c ** -1", (3, 9), ["division by zero"]),
    "log_zero": (X + "c = mean(x * x) - 1\nout o = log(c)", (3, 9), ["log(0)"]),
    "sqrt_neg": (MINUS + "out o = sqrt(c)", (3, 9), ["sqrt", "negative", "complex"]),
    "log_neg": (MINUS + "out o = log(c)", (3, 9), ["log", "negative", "complex"]),
    "frac_power_neg": (MINUS + "out o = c ** 0.5", (3, 9), ["negative", "power", "complex"]),
    "overflow": (BIG + "out o = exp(c)", (3, 9), ["overflow"]),
    "div_zero_in_moment": (ZERO + "out o = mean(x / c)", (3, 9), ["division by zero"]),
    "div_zero_in_nonlin": (ZERO + "y = tanh(x) / c\nout o = mean(y)", (3, 5), ["division by zero"]),
    "sqrt_neg_in_moment": (MINUS + "out o = mean(x * sqrt(c))", (3, 9), ["sqrt", "negative"]),
    "sqrt_neg_in_nonlin": (MINUS + "y = x * sqrt(c)\nout o = mean(y * y)", (3, 5), ["sqrt", "negative"]),
    "log_zero_in_moment": (X + "c = mean(x * x) - 1\nout o = mean(x * log(c))", (3, 9), ["log"]),
    "overflow_in_nonlin": (BIG + "y = x * exp(c)\nout o = mean(y * y)", (3, 5), ["overflow"]),
}
# only the node-by-node checks see these: an intermediate overflow, and Float 0 / Float 0
# (sympy raises ZeroDivisionError before any value exists)
HOOK_CASES = {
    "overflow_intermediate": (BIG + "out o = mean(x) * exp(c)", (3, 9), ["exp(800)", "overflow"]),
    "overflow_cancelled": (BIG + "out o = exp(c) - exp(c)", (3, 9), ["overflow"]),
    "zero_over_zero": (ZERO + "out o = c / c", (3, 9), ["division by zero"]),
}


def compile_limit(src: str, **options):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tp.parse(src).compile(**options).limit()


def check_error(err: tp.TPError, at: tuple[int, int], words: list[str], file: str = "<string>") -> None:
    assert isinstance(err, tp.TPNumericalError), type(err)
    assert (err.line, err.col) == at
    first = str(err).splitlines()[0]
    assert first.startswith(f"{file}:{at[0]}:{at[1]}: "), first
    for word in words:
        assert word.lower() in first.lower(), (word, first)


@pytest.mark.parametrize("symbolic", [False, True], ids=["numeric", "symbolic"])
@pytest.mark.parametrize("case", list(SCALAR_CASES) + list(HOOK_CASES))
def test_non_finite_limit_or_sub_expression_is_a_located_error(case, symbolic):
    src, at, words = {**SCALAR_CASES, **HOOK_CASES}[case]
    with pytest.raises(tp.TPError) as err:
        compile_limit(src, symbolic=symbolic)
    check_error(err.value, at, words)


def test_nan_limit_is_a_located_error():
    # symbolic: 0/0 of exact zeros is sympy nan (numeric Floats raise ZeroDivisionError: HOOK_CASES)
    with pytest.raises(tp.TPError) as err:
        compile_limit(ZERO + "out o = c / c", symbolic=True)
    check_error(err.value, (3, 9), [])
    assert "nan" in str(err.value).lower() or "0 / 0" in str(err.value)


def test_finite_limits_near_the_edges_are_fine():
    lim = compile_limit(X + "c = mean(x * x)\nout a = sqrt(c - 1)\nout b = log(c)\nout d = exp(c * 700)\n"
                        "out e = 1 / (c + 1)\nout f = mean(x * exp(-c * 800))").outputs
    assert lim["a"].value == 0 and lim["b"].value == 0 and lim["e"].value == 0.5
    assert lim["d"].value == pytest.approx(1.0142320547350045e304, rel=1e-12)
    assert lim["f"].value == 0


def test_summarize_is_a_backstop_with_a_project_error():
    for value, kind in [(sp.zoo, "zoo"), (sp.nan, "nan"), (sp.oo, "inf"), (-sp.oo, "inf"), (sp.I, "complex"),
                        (sp.exp(800), "overflow"), (sp.Float(1) + 2 * sp.I, "complex")]:
        assert defect(sp.sympify(value)) == kind, value
        with pytest.raises(tp.TPNumericalError):
            summarize(value, [], False)
    assert defect(sp.exp(-800)) is None and defect(sp.Integer(3)) is None
    assert summarize(sp.exp(700), [], True).value == pytest.approx(1.0142320547350045e304)


# ---- the CLI: exit 2, FILE:LINE:COL:, no traceback ---------------------------------------------------
CLI_CASES = {"div_zero": ([], (3, 9), ["division by zero"]), "sqrt_neg": ([], (3, 9), ["sqrt", "complex"]),
             "overflow": ([], (3, 9), ["overflow"]), "div_zero_in_nonlin": (["--emit", "json"], (3, 5), ["zero"]),
             "log_neg": (["--symbolic"], (3, 9), ["log", "negative"])}


def tpc(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "tensorprog", *args], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=300)


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory) -> dict[str, tuple[str, subprocess.CompletedProcess]]:
    d = tmp_path_factory.mktemp("hyp")
    jobs = {}
    for name, (flags, _, _) in CLI_CASES.items():
        path = d / f"{name}.tp"
        path.write_text(SCALAR_CASES[name][0] + "\n")
        jobs[name] = (str(path), ["compile", str(path), *flags])
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {k: (path, pool.submit(tpc, *args)) for k, (path, args) in jobs.items()}
        return {k: (path, f.result()) for k, (path, f) in futures.items()}


@pytest.mark.parametrize("case", list(CLI_CASES))
def test_cli_compile_reports_a_non_finite_limit(cli_runs, case):
    path, r = cli_runs[case]
    _, at, words = CLI_CASES[case]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr + r.stdout and "internal error" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"{path}:{at[0]}:{at[1]}: "), first
    for word in words:
        assert word in first, (word, first)
    assert r.stderr.splitlines()[2].strip() == "^"          # the source line and a caret


# ---- [polynomially bounded] ----------------------------------------------------------------------
def poly_warnings(lim) -> list[str]:
    return [w for w in lim.warnings if "[polynomially bounded]" in w]


def test_exp_into_a_matmul_is_warned_once_per_hypothesis():
    lim = tp.load(KERNEL, act=3, L=4).compile().limit()
    (w,) = poly_warnings(lim)
    assert w.startswith(f"{KERNEL}:50:10: warning [polynomially bounded]: ") and "(also at lines 51, 52)" in w
    assert "exp" in w and "polynomial" in w


@pytest.mark.parametrize("act", [1, 2, 4], ids=["relu", "step", "normrelu"])
def test_other_activations_of_the_same_network_are_not_warned(act):
    assert tp.load(KERNEL, act=act, L=3).compile().limit().warnings == []


WARNED = {
    "exp": "h = W @ exp(x)",
    "power_with_random_exponent": "h = W @ (2 ** x)",
    "e_to_the_x": "h = W @ (e ** x)",
    "exp_times_bounded": "h = W @ (tanh(x) * exp(x))",
    "exp_inside_linear_head": "h = W @ relu(exp(x) - 1)",
    "transposed": "h = W.T @ (exp(x) - 1)",
    "exp_of_a_matmul": "g = W @ x\nh = W @ exp(g)",
}
NOT_WARNED = {
    "tanh": "h = W @ tanh(x)",
    "tanh_network": "g = W @ tanh(x)\nh = W @ tanh(g)",
    "bounded_head_of_exp": "h = W @ tanh(exp(x))",
    "gaussian_bump": "h = W @ exp(-x * x)",
    "exp_of_bounded": "h = W @ exp(tanh(x))",
    "softplus": "h = W @ softplus(x)",
    "log_of_exp": "h = W @ log(1 + exp(x))",
    "constant_power": "h = W @ (x ** 3 * 2 ** 3)",
    "exp_only_in_moment": "g = W @ tanh(x)\nh = W @ tanh(g)\nout m = mean(exp(h) * exp(x))",
}


@pytest.mark.parametrize("body", list(WARNED.values()), ids=list(WARNED))
def test_exp_into_a_matmul_is_warned(body):
    src = X + "matrix W ~ normal()\n" + body + "\nout o = mean(h * h)"
    (w,) = poly_warnings(compile_limit(src))
    line = 3 + body.count("\n")
    assert w.startswith(f"<string>:{line}:5: warning [polynomially bounded]: "), w


@pytest.mark.parametrize("body", list(NOT_WARNED.values()), ids=list(NOT_WARNED))
def test_polynomially_bounded_or_moment_only_is_not_warned(body):
    src = X + "matrix W ~ normal()\n" + body + "\nout o = mean(h * h)"
    assert compile_limit(src).warnings == []


def test_exp_in_a_moment_only_is_not_warned():
    lim = compile_limit(X + "out a = mean(exp(x))\nout b = mean(exp(2 * x) * tanh(x) ** 2)")
    assert lim.warnings == []
    assert lim.outputs["a"].value == pytest.approx(1.6487212707001282, rel=1e-12)


def test_warning_reaches_the_cli_json(tmp_path):
    path = tmp_path / "expnet.tp"
    path.write_text(X + "matrix W ~ normal()\nh = W @ exp(x)\nout o = mean(h * h)\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["compile", str(path), "--emit", "json"]) == 0
    data = json.loads(out.getvalue())
    assert data["outputs"]["o"]["value"] == pytest.approx(7.38905609893065, rel=1e-12)   # E[e^{2x}] = e²
    assert [w for w in data["warnings"] if "[polynomially bounded]" in w][0].startswith(f"{path}:3:5: ")


# ---- [exponential moments] -----------------------------------------------------------------------
@pytest.mark.parametrize("src, warned", [
    ("vector x ~ laplace()\nout o = mean(exp(2 * x))", True),          # t = 2 ≥ √2: E = ∞
    ("vector x ~ laplace()\nout o = mean(exp(x))", False),             # t = 1 < √2: E = 2
    ("vector x ~ laplace(var=0.25)\nout o = mean(exp(2 * x))", False),  # t = 2 < √8
    ("vector x ~ laplace()\nout o = mean(exp(x) * exp(x) * tanh(x))", True),
    ("vector x ~ laplace()\nmatrix W ~ normal()\nh = W @ exp(x)\nout o = mean(tanh(h))", True),  # E[e^{2x}]
    ("vector x ~ laplace()\nmatrix W ~ normal()\nh = W @ exp(0.5 * x)\nout o = mean(tanh(h))", False),
    ("vector x ~ laplace()\nout o = mean(exp(-x * x) + tanh(x))", False),
])
def test_exp_beyond_the_exponential_moments_is_warned(src, warned):
    lim = compile_limit(src)
    assert any("[exponential moments]" in w for w in lim.warnings) == warned, lim.warnings
