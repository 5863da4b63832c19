"""Rich displays (tensorprog.tools.display): the HTML/LaTeX Jupyter shows for compiled programs,
limits, finite-width runs, convergence runs and dataset kernels."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.finite.progress import ProgressBar, in_notebook
from tensorprog.finite.run import ExecResult, OutputStats
from tensorprog.limit.result import Limit, LimitValue
from tensorprog.tools import display

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


def test_limit_html_has_value_error_method_closed_form_and_escaped_warnings():
    import sympy as sp
    lim = Limit({"k<x>": LimitValue(0.25, 3e-9, "quadrature"),
                 "half": LimitValue(0.5, 6e-16, "exact", sp.Rational(1, 2))},
                ["prog.tp:3:1: warning [all moments]: <script>alert('x')</script> & more"])
    html = lim._repr_html_()
    assert "0.25" in html and "3e-09" in html and "quadrature" in html
    assert r"\(\frac{1}{2}\)" in html and "exact" in html
    assert "k&lt;x&gt;" in html and "k<x>" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in html
    assert "<script>" not in html
    assert "mathjax_ignore" in html                       # a warning is never typeset
    latex = lim._repr_latex_()
    assert latex.startswith("\\begin{align*}") and r"\frac{1}{2}" in latex and r"\pm 3e-09" in latex
    assert r"\mathrm{k<x>}" in latex


def test_limit_of_a_program_displays_its_closed_form():
    lim = tp.parse("vector x ~ normal()\nout m4 = mean(x ** 4)").limit(symbolic=True)
    html = lim._repr_html_()
    assert "<b>m4</b>" in html and ">3</td>" in html
    assert r"\(3\)" in html and "exact" in html


def test_exec_html_has_mean_std_and_se():
    r = ExecResult(width=64, trials=4, seed=7, outputs={"a&b": OutputStats(1.5, 0.2, [1.3, 1.5, 1.7, 1.5])})
    html = r._repr_html_()
    assert "n = 64" in html and "4 trial(s)" in html and "seed 7" in html
    assert "a&amp;b" in html and "1.5" in html
    se = np.std([1.3, 1.5, 1.7, 1.5], ddof=1) / 2
    assert f"{se:.3g}" in html and "<th" in html and "SE" in html


def test_compiled_html_typesets_zhat_covariances_and_the_zdot_term():
    compiled = tp.parse(BACKWARD).compile(symbolic=True)
    html = compiled._repr_html_()
    assert r"\hat{Z}^{W}_{3}" in html                       # Ẑ of W x
    assert r"\hat{Z}^{W^{\top}}_{5}" in html                # Ẑ of Wᵀ(...)
    assert r"\underbrace{" in html and r"_{\dot Z}" in html   # the Ż of W x1
    assert r"\operatorname{Var} \hat{Z}^{W^{\top}}_{5} = \tfrac{1}{2}" in html
    assert r"\operatorname{Cov}(\cdot, \hat{Z}^{W}_{3}) = 1" in html
    assert "out g" in html and "out f1" in html
    latex = compiled._repr_latex_()
    assert latex.startswith("$$\\begin{aligned}") and r"\dot Z" in latex
    assert str(compiled) == "\n".join(compiled.lines)          # plain text unchanged


def test_compiled_display_of_a_deep_program_stays_small():
    p = tp.load(ROOT / "programs" / "relu_nngp.tp", L=12)
    html = p.compile()._repr_html_()
    assert html.count("<tr>") >= 12 and len(html) < 200_000


def test_kernel_html_has_a_summary_and_a_heatmap():
    pytest.importorskip("matplotlib")
    X = np.random.default_rng(0).standard_normal((6, 3))
    K = tp.kernel(ROOT / "programs" / "kernels" / "relu_mlp.tp", X, L=2)
    html = K._repr_html_()
    assert "infinite-width limit" in html and "nngp" in html and "ntk" in html
    assert "data:image/png;base64," in html


def test_converge_html_has_the_table_and_the_plot_inline():
    pytest.importorskip("matplotlib")
    from tensorprog.converge import converge
    run = converge(tp.parse("vector x ~ normal()\nmatrix W ~ normal()\nout q = mean((W @ x) ** 2)"),
                   [32, 64], trials=3, progress=False)
    html = run._repr_html_()
    assert "Convergence" in html and "|mean − limit|" in html and "rate" in html
    assert html.count("<tr>") >= 3
    assert "data:image/png;base64," in html
    assert "<img" not in display.converge_html(run, png=None)          # the plot is optional


def test_tree_size_counts_shared_subexpressions_as_a_tree():
    import sympy as sp
    x = sp.Symbol("x")
    e = x
    for _ in range(40):                 # 2^40 leaves as a tree, 41 distinct nodes
        e = sp.Add(e, sp.Mul(e, 2, evaluate=False), evaluate=False)
    assert display.tree_size(e, 1000) == 1001


def test_progress_bars_show_in_a_jupyter_kernel_by_default(monkeypatch):
    class Shell:
        config = {"IPKernelApp": {}}

    class FakeIPython:
        @staticmethod
        def get_ipython():
            return Shell()

    assert not in_notebook() or "IPython" in sys.modules
    monkeypatch.setitem(sys.modules, "IPython", FakeIPython)
    assert in_notebook()
    with ProgressBar(3, None) as bar:
        assert bar.enabled                               # automatic bar: shown in a notebook
    with ProgressBar(3, False) as bar:
        assert not bar.enabled


def test_display_functions_do_not_import_sympy_for_finite_width_results():
    code = ("import sys, tensorprog as tp\n"
            "r = tp.parse('vector x ~ normal()\\nout m = mean(x * x)').execute(n=16, trials=2)\n"
            "html = r._repr_html_()\n"
            "print('sympy' in sys.modules, 'SE' in html)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.split() == ["False", "True"]
