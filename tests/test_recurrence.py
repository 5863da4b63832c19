"""The recurrence as data (tensorprog.limit.recurrence): the records the compiler emits, their
source names, the printers that read them (text, JSON, LaTeX), and the --symbolic defects of
issue 23 (functions of moments with param symbols, JSON ``exact``)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.limit.recurrence import (Covariance, Expectation, HatBase, InitialBase, MatrixLaw, ScalarNode,
                                         VectorZ, ZdotCoefficient)

ROOT = Path(__file__).resolve().parent.parent

BACKWARD = """
vector x, v ~ normal(cov=[[1, 0], [0, 1]])
matrix W ~ normal()
h = W @ x
dx = W.T @ (v * step(h))
x1 = x + 0.5 * dx
h1 = W @ x1
out g = mean(dx * dx)
out f1 = mean(v * h1)
"""

LOOP = """
vector x ~ normal()
h[0] = x
matrix W ~ normal(var=2)
for l in 1..2 {
    h[l] = W @ relu(h[l-1])
}
out q = mean(h[2] * h[2])
"""

MOMENTS = """
param rho = 0.5
vector a1, b1 ~ normal(cov=[[1, rho], [rho, 1]])
out k = mean(a1*b1) ** 2
out r = mean(a1*a1) / (1 + mean(a1*b1))
"""


def records(text: str, symbolic: bool = True):
    compiled = tp.parse(text).compile(symbolic=symbolic)
    return compiled, list(compiled.recurrence)


def test_records_of_a_backward_pass_are_the_master_theorem_facts():
    compiled, recs = records(BACKWARD)
    by_name = {r.source.name: r for r in recs if isinstance(r, VectorZ)}
    # h1 = W x1: Ẑ^{W x1} with Var = E[(Z^x1)²] = 1 + 1/4·E[(Ẑ^{Wᵀ})²] = 1 + 1/4·1/2 = 9/8,
    # Cov with Ẑ^{W x} = E[Z^x1 Z^x] = 1, and Ż = E[∂Z^x1/∂Ẑ^{Wᵀ(v step h)}]·Z^{v step h} = 1/2·v·step(h)
    h1 = by_name["h1"]
    assert h1.op == "matmul" and h1.matrix.name == "W" and not h1.transposed and h1.arg.name == "x1"
    hat = next(r for r in recs if isinstance(r, HatBase) and r.source.name == "h1")
    assert hat.symbol == h1.hat and hat.arg.name == "x1"
    covs = {(c.a, c.b): c for c in recs if isinstance(c, Covariance)}
    var = covs[(h1.hat, h1.hat)]
    assert var.value == sp.Rational(9, 8) and var.sigma2 == 1
    other = by_name["h"].hat
    assert covs[(h1.hat, other)].value == 1
    zdot = [r for r in recs if isinstance(r, ZdotCoefficient) and r.source.name == "h1"]
    assert len(zdot) == 1 and zdot[0].coefficient == sp.Rational(1, 2) and zdot[0].hat == by_name["dx"].hat
    # every expectation a covariance or a Ż coefficient names is a recorded expectation node
    nodes = {r.index: r for r in recs if isinstance(r, Expectation)}
    for r in recs:
        if isinstance(r, (Covariance, ZdotCoefficient)) and r.expectation is not None:
            assert r.expectation in nodes and r.expectation < len(compiled.estimates)
    assert nodes[var.expectation].value == sp.Rational(9, 8)
    g = next(r for r in recs if isinstance(r, ScalarNode) and r.source.name == "g")
    assert g.op == "moment" and g.limit.exact == sp.Rational(1, 2)


def test_every_record_uses_only_what_earlier_records_define():
    _, recs = records(BACKWARD)
    defined: set = set()
    for r in recs:
        if isinstance(r, (InitialBase, HatBase)):
            defined.add(r.symbol)
        if isinstance(r, Covariance):
            assert {r.a, r.b} <= defined
        if isinstance(r, VectorZ):
            assert r.z.free_symbols <= defined
        if isinstance(r, ZdotCoefficient):
            assert r.hat in defined


def test_records_carry_the_programs_names_and_positions():
    compiled, recs = records(LOOP, symbolic=False)
    products = [r for r in recs if isinstance(r, VectorZ) and r.op == "matmul"]
    assert [r.source.name for r in products] == ["h[1]", "h[2]"]
    assert all(r.source.line == 6 for r in products)
    matrix = next(r for r in recs if isinstance(r, MatrixLaw))
    assert matrix.source.name == "W" and matrix.variance == 2
    text = str(compiled)
    assert "Z[h[2]] = " in text and "W @ %" in text and "line 6:" in text
    assert next(r for r in recs if isinstance(r, ScalarNode)).source.name == "q"


def test_json_gains_the_recurrence_and_exact_when_the_method_is_exact(capsys):
    assert main(["compile", str(ROOT / "programs" / "relu_nngp.tp"), "--emit", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    kxx = data["outputs"]["kxx"]
    assert kxx["method"] == "exact" and float(kxx["exact"]) == kxx["value"] == 0.5
    rec = data["recurrence"]
    kinds = {r["kind"] for r in rec["records"]}
    assert kinds == {"initial", "covariance", "matrix", "vector", "expectation", "hat", "scalar"}
    for r in rec["records"]:
        assert set(r["source"]) == {"var", "name", "line", "col"}
        if r["kind"] == "expectation":
            assert 0 <= r["index"] < len(rec["estimates"])
    scalars = {r["source"]["name"]: r for r in rec["records"] if r["kind"] == "scalar"}
    assert scalars["kxx"]["limit"]["value"] == 0.5 and scalars["kxx"]["op"] == "moment"
    assert rec["text"][0].startswith("Z[x] = Z_x")


def test_quadrature_outputs_have_no_exact_in_json():
    lim = tp.parse("vector x ~ normal()\nout t = mean(tanh(x) ** 2)").compile().limit()
    out = lim.to_dict()["outputs"]["t"]
    assert out["method"] != "exact" and out["exact"] is None


def test_latex_prints_the_recurrence_and_the_values(tmp_path, capsys):
    f = tmp_path / "b.tp"
    f.write_text(BACKWARD)
    assert main(["compile", str(f), "--emit", "latex", "--symbolic"]) == 0
    out = capsys.readouterr().out
    assert r"\hat{Z}^{W}_{3}" in out and r"\hat{Z}^{W^{\top}}_{5}" in out and r"_{\dot Z}" in out
    assert r"Z^{\mathrm{h1}}" in out and r"\mathrm{g} &= \frac{1}{2}" in out


def test_symbolic_functions_of_moments_with_a_param_are_closed_forms():
    rho = sp.Symbol("rho", real=True)
    symbolic = tp.parse(MOMENTS).compile(symbolic=True).limit().outputs
    plain = tp.parse(MOMENTS).compile().limit().outputs
    assert sp.simplify(symbolic["k"].exact - rho ** 2) == 0
    assert sp.simplify(symbolic["r"].exact - 1 / (1 + rho)) == 0
    for name in ("k", "r"):
        assert abs(symbolic[name].value - plain[name].value) <= symbolic[name].error + plain[name].error


def test_symbolic_cli_on_a_shipped_program_with_an_ntk_formula():
    program = ROOT / "programs" / "tsuchida_exchangeable.tp"
    symbolic = tp.load(program).compile(symbolic=True).limit().outputs
    plain = tp.load(program).compile().limit().outputs
    assert symbolic["cos1_iid"].exact is not None and sp.Symbol("rho", real=True) in symbolic["cos1_iid"].exact.free_symbols
    for name, v in plain.items():
        assert abs(symbolic[name].value - v.value) <= symbolic[name].error + v.error, name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["golikov_ntk_erf", "golikov_ntk_relu"])
def test_symbolic_golikov_ntk_programs_compile(name):
    proc = subprocess.run([sys.executable, "-m", "tensorprog", "compile", "--symbolic", f"programs/{name}.tp",
                           "--emit", "json"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    plain = tp.load(ROOT / "programs" / f"{name}.tp").compile().limit().outputs
    for out, v in json.loads(proc.stdout)["outputs"].items():
        assert abs(v["value"] - plain[out].value) <= v["error"] + plain[out].error, out


def imported_packages(package: str) -> set[str]:
    """Every tensorprog module imported anywhere (functions included) by the modules of ``package``."""
    found = set()
    for path in (ROOT / "tensorprog" / package).rglob("*.py"):
        depth = len(path.relative_to(ROOT / "tensorprog").parts) - 1
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                up = node.level - 1
                if up >= depth and node.module:
                    found.add(node.module.split(".")[0])
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tensorprog."):
                found.add(node.module.split(".")[1])
    return found


def test_limit_and_finite_do_not_import_tools():
    assert "tools" not in imported_packages("limit")
    assert "tools" not in imported_packages("finite")


def test_display_reads_records_not_text():
    for module in ("tools/display.py", "limit/printers.py", "display/html.py"):
        source = (ROOT / "tensorprog" / module).read_text()
        assert "import re" not in source and ".lines" not in source, module


@pytest.mark.parametrize("program", ["relu_nngp.tp", "wigner_moments.tp", "marchenko_pastur.tp", "BACKWARD"])
def test_the_sampling_interpreter_of_the_records_agrees_with_the_compiled_limits(program):
    """Monte Carlo from the records alone (Gaussian base variables, their covariance entries, the
    Moments' integrands) against the compiled limits (closed forms, quadrature): within 5 SE."""
    from tensorprog.limit.sample import SampleOptions, sample_recurrence
    compiled = (tp.parse(BACKWARD) if program == "BACKWARD" else tp.load(ROOT / "programs" / program)).compile()
    sampled = sample_recurrence(compiled, SampleOptions(points=100_000, seed=7))
    moments = [r.source.var for r in compiled.recurrence if isinstance(r, ScalarNode) and r.op == "moment"]
    assert sorted(sampled) == sorted(moments) and moments
    for var, s in sampled.items():
        limit = compiled.result(var)
        assert 0 < s.stderr < 0.05
        assert abs(s.value - limit.value) <= 5 * s.stderr + limit.error, (var, s, limit)


def test_the_sampling_interpreter_refuses_a_law_it_does_not_draw():
    from tensorprog.errors import TPUsageError
    from tensorprog.limit.sample import sample_recurrence
    compiled = tp.parse("vector x ~ normal()\nmatrix W ~ mvt(df=5)\nh = W @ x\nout k = mean(h * h)").compile()
    with pytest.raises(TPUsageError, match="row scale"):
        sample_recurrence(compiled)
    compiled = tp.parse("vector x ~ uniform()\nout k = mean(x * x)").compile()
    with pytest.raises(TPUsageError, match="uniform"):
        sample_recurrence(compiled)


#: the fields of each record kind in JSON, as docs/recurrence.md documents them
SCHEMA = {
    "matrix": {"family", "variance", "rows", "cols", "row_scale"},
    "initial": {"symbol", "family", "mean", "group", "member", "cov_row", "variance"},
    "hat": {"symbol", "matrix", "transposed", "arg", "haar"},
    "covariance": {"a", "b", "value", "sigma2", "expectation"},
    "expectation": {"index", "integrand", "value"},
    "zdot": {"hat", "partner", "sigma2", "coefficient", "expectation"},
    "vector": {"op", "z", "step", "matrix", "arg", "transposed", "hat", "dot", "outer"},
    "scalar": {"op", "value", "step", "integrand", "expectation", "limit"},
}

HAAR_MVT = """
vector x ~ normal()
matrix Q ~ orthogonal()
matrix M ~ mvt(df=6)
h = Q @ x
g = Q.T @ (h * h)
m = M @ tanh(g)
out a = mean(g * x)
out b = mean(m * m)
"""


@pytest.mark.parametrize("text", [BACKWARD, HAAR_MVT])
def test_json_records_follow_the_documented_schema(text):
    from tensorprog.limit.printers import recurrence_json
    data = json.loads(json.dumps(recurrence_json(tp.parse(text).compile())))
    kinds = set()
    for r in data["records"]:
        kinds.add(r["kind"])
        assert set(r) == {"kind", "source"} | SCHEMA[r["kind"]], r["kind"]
    assert kinds >= {"matrix", "initial", "hat", "covariance", "vector", "scalar"}
    schema_doc = (ROOT / "docs" / "recurrence.md").read_text()
    for kind, fields in SCHEMA.items():
        schema_table = schema_doc.split("## JSON schema", 1)[1]
        row = next(line for line in schema_table.splitlines() if line.startswith(f"| `{kind}` | `"))
        assert all(f"`{f}`" in row for f in fields), kind


def test_haar_and_mvt_records_name_their_bases():
    compiled = tp.parse(HAAR_MVT).compile()
    recs = list(compiled.recurrence)
    matrix = {r.source.name: r for r in recs if isinstance(r, MatrixLaw)}
    assert matrix["M"].row_scale is not None and matrix["Q"].row_scale is None
    haar = [r for r in recs if isinstance(r, VectorZ) and r.op == "haar"]
    assert [r.source.name for r in haar] == ["h", "g"] and all(r.matrix.name == "Q" for r in haar)
    html = compiled._repr_html_()
    assert r"u^{M}" in html and r"\hat{Z}^{Q^{\top}}" in html
