"""Rich displays for Jupyter: HTML (and LaTeX) of the objects a user holds.

Pure functions from a result to a string; the classes' ``_repr_html_`` / ``_repr_latex_``
methods delegate here:

* :func:`compiled_html`, :func:`compiled_latex` — a :class:`~tensorprog.limit.compiler.Compiled`:
  the Master Theorem recurrence typeset, one row per equation: Z^x = φ(Z^y..) for a Nonlin,
  Z^{Wx} = Ẑ^{Wx} + Ż^{Wx} for a MatMul (with Var Ẑ and Cov(Ẑ^{Wx}, Ẑ^{Wy}) = σ² E[Z^x Z^y]),
  c̊ = E[φ(Z..)] for a Moment;
* :func:`limit_html`, :func:`limit_latex` — a :class:`~tensorprog.limit.result.Limit`: value,
  error bound, method and closed form of every output, then the warnings;
* :func:`particles_html` — a :class:`~tensorprog.limit.particles.ParticlesResult`: the
  extrapolated value and error of every output, and the means at the two widths;
* :func:`exec_html` — an :class:`~tensorprog.finite.run.ExecResult`: mean, std and SE = std/√T;
* :func:`converge_html` — a :class:`~tensorprog.tools.converge.ConvergeResult`: per output and
  width the mean, SE, |mean − c̊| and rms, the fitted rates, and the plot inline (matplotlib);
* :func:`kernel_html` — a :class:`~tensorprog.tools.kernel.KernelResult`: a summary per output
  and each N×N kernel as a heatmap.

Objects are read by their attributes only: this module imports none of the classes it renders
(their modules import it), and sympy is imported only to typeset a compiled program or a closed
form.  Every piece of user text (names, file paths, warnings) goes through :func:`html.escape`;
warnings sit in ``mathjax_ignore`` elements so that a ``$`` in them is never typeset.  Maths is
written between ``\\(`` and ``\\)``, which both Jupyter and Sphinx's MathJax typeset.
"""
from __future__ import annotations

import base64
import html
import io
import math
import os
import re
import tempfile
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from .. import ir

#: expressions with more nodes (counted as a tree) than this are not typeset in full
MAX_TEX_NODES = 120
#: a value printed as text is cut to this many characters
MAX_TEXT = 160
#: floats inside a typeset expression are shown to this many significant digits
FLOAT_DIGITS = 6
#: kernels larger than this (N) are drawn from their leading MAX_HEATMAP × MAX_HEATMAP block
MAX_HEATMAP = 400

STYLE_TABLE = "border-collapse:collapse;margin:0.3em 0;font-size:0.92em"
STYLE_CELL = "padding:0.2em 0.7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top"
STYLE_HEAD = STYLE_CELL + ";font-weight:bold;border-bottom:2px solid #999"
STYLE_NUM = STYLE_CELL + ";text-align:right;font-family:monospace"
STYLE_WARN = "color:#8a4b00;margin:0.3em 0;padding-left:1.2em"


# ---- small HTML pieces ------------------------------------------------------------------------
def esc(text: object) -> str:
    """User text, escaped for HTML (quotes included)."""
    return html.escape(str(text), quote=True)


def math_inline(tex: str) -> str:
    """LaTeX as inline maths for MathJax (escaped for HTML: MathJax reads the decoded text)."""
    return f"\\({esc(tex)}\\)"


def cut(text: str, most: int = MAX_TEXT) -> str:
    """``text`` cut to ``most`` characters, with an ellipsis when cut."""
    return text if len(text) <= most else text[:most - 1] + "…"


def table(header: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[bool] = ()) -> str:
    """An HTML table; cells are HTML already (escape them first).  ``numeric[i]``: column i
    right-aligned in a monospace font."""
    def cell(tag: str, i: int, body: str) -> str:
        style = STYLE_HEAD if tag == "th" else (STYLE_NUM if i < len(numeric) and numeric[i] else STYLE_CELL)
        return f'<{tag} style="{style}">{body}</{tag}>'
    head = "".join(cell("th", i, h) for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f'<table style="{STYLE_TABLE}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def warnings_html(warnings: Sequence[str], title: str = "warnings") -> str:
    """The warnings as an escaped list (never typeset), or nothing."""
    if not warnings:
        return ""
    items = "".join(f"<li>{esc(w)}</li>" for w in warnings)
    return (f'<div class="tp-warnings mathjax_ignore tex2jax_ignore"><b>{esc(title)}</b>'
            f'<ul style="{STYLE_WARN}">{items}</ul></div>')


def box(kind: str, caption: str, *parts: str) -> str:
    """A display: a caption (HTML) above its parts."""
    return (f'<div class="tp-display tp-{kind}" style="max-width:100%;overflow-x:auto">'
            f'<div style="margin-bottom:0.2em">{caption}</div>' + "".join(parts) + "</div>")


def wide(body: str, width: str = "36em") -> str:
    """Content that may be wider than the page (a long closed form), in its own scrolling box."""
    return f'<div style="max-width:{width};overflow-x:auto">{body}</div>'


def png_img(png: bytes, alt: str) -> str:
    """A PNG inline, as a data URI."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(alt)}" src="data:image/png;base64,{data}" style="max-width:100%"/>'


def num(x: Any, fmt: str = ".6g") -> str:
    """A number for a table ("—" for None or NaN)."""
    if x is None:
        return "—"
    x = float(x)
    return "—" if math.isnan(x) else format(x, fmt)


# ---- LaTeX of names and sympy expressions -----------------------------------------------------
TEX_SPECIALS = {"\\": r"\backslash ", "_": r"\_", "%": r"\%", "#": r"\#", "&": r"\&", "$": r"\$",
                "{": r"\{", "}": r"\}", "^": r"\hat{}", "~": r"\sim "}


def tex_name(name: str) -> str:
    """A program name in maths: one letter as is, longer names upright (specials escaped)."""
    if re.fullmatch(r"[A-Za-z]", name):
        return name
    return r"\mathrm{" + "".join(TEX_SPECIALS.get(ch, ch) for ch in name) + "}"


def tex_text(text: str) -> str:
    """Arbitrary text inside maths, in a typewriter font (specials escaped)."""
    return r"\texttt{" + "".join(TEX_SPECIALS.get(ch, ch) for ch in cut(text)) + "}"


def tex_number_text(text: str) -> str:
    """A value printed by sympy as text: numbers and fractions as maths, anything else as text."""
    text = text.strip()
    m = re.fullmatch(r"(-?)(\d+(?:\.\d+)?(?:e[-+]?\d+)?)(?:/(\d+))?", text)
    if not m:
        return tex_text(text)
    sign, top, bottom = m.groups()
    return sign + (rf"\tfrac{{{top}}}{{{bottom}}}" if bottom else top)


def tree_size(expr: Any, most: int = 10**9) -> int:
    """Number of nodes of ``expr`` counted as a tree (what printing visits), computed over its
    DAG, so in time linear in its distinct sub-expressions; stops counting past ``most``."""
    sizes: dict[Any, int] = {}
    stack: list[tuple[Any, bool]] = [(expr, False)]
    while stack:
        node, ready = stack.pop()
        if node in sizes:
            continue
        if ready:
            sizes[node] = min(most + 1, 1 + sum(sizes[a] for a in node.args))
            continue
        stack.append((node, True))
        stack.extend((a, False) for a in node.args if a not in sizes)
    return sizes[expr]


class Namer:
    """LaTeX names of the symbols of a compiled program: base variables Z_x -> Z^{x}, Gaussians
    Zhat_W_4 -> Ẑ^{W}_{4} (Zhat_WT_4 -> Ẑ^{Wᵀ}_{4}), mvt row scales u_W -> u^{W}, and the
    one-step leaves %k -> Z^{%k} (vectors) or c̊^{%k} (scalars)."""

    def __init__(self, program: ir.Program) -> None:
        self.program = program
        self.matrices = {e.name for e in program.eqns if isinstance(e, ir.Matrix)}

    def matrix(self, name: str) -> str:
        """``W`` or ``WT`` (the transpose, when W is a matrix and WT is not)."""
        if name.endswith("T") and name[:-1] in self.matrices and name not in self.matrices:
            return tex_name(name[:-1]) + r"^{\top}"
        return tex_name(name)

    def symbol(self, name: str) -> str | None:
        """The LaTeX of a symbol named ``name``, or None (sympy's own printing)."""
        if m := re.fullmatch(r"Zh(?:at|aar)_(.+)_(\d+)", name):
            return rf"\hat{{Z}}^{{{self.matrix(m[1])}}}_{{{m[2]}}}"
        if m := re.fullmatch(r"%(\d+)", name):
            return self.var(int(m[1]))
        if m := re.fullmatch(r"Z_(.+)", name):
            return rf"Z^{{{tex_name(m[1])}}}"
        if m := re.fullmatch(r"u_(.+)", name):
            return rf"u^{{{tex_name(m[1])}}}"
        return None

    def var(self, var: int) -> str:
        """Z^{x} of an initial vector, Z^{%k} of another vector, c̊^{%k} of a scalar."""
        e = self.program.eqns[var]
        if isinstance(e, ir.InitVector):
            return rf"Z^{{{tex_name(e.name)}}}"
        if isinstance(e, ir.SCALAR_OPS):
            return rf"\mathring{{c}}^{{\%{var}}}"
        return rf"Z^{{\%{var}}}"

    def latex(self, expr: Any) -> str | None:
        """``expr`` typeset, or None when it is too large to read (more than MAX_TEX_NODES)."""
        import sympy as sp
        from ..symbolic.dag import distinct_nodes
        if not isinstance(expr, sp.Basic):
            return None
        if tree_size(expr, MAX_TEX_NODES) > MAX_TEX_NODES:
            return None
        nodes = distinct_nodes(expr)
        names = {s: t for s in nodes if isinstance(s, sp.Symbol) and (t := self.symbol(s.name)) is not None}
        floats = {f: sp.Float(f, FLOAT_DIGITS) for f in nodes if isinstance(f, sp.Float)}
        return sp.latex(expr.xreplace(floats) if floats else expr, symbol_names=names)


# ---- the compiled program ---------------------------------------------------------------------
ZHAT_RULE = (r"\operatorname{Cov}(\hat Z^{Wx}, \hat Z^{Wy}) = \sigma^2\,\mathbb{E}[Z^x Z^y],\quad"
             r"\dot Z^{Wx} = \sigma^2 \sum_y Z^y\, \mathbb{E}\Big[\frac{\partial Z^x}{\partial \hat Z^{W^\top y}}\Big]")


def line_index(lines: Sequence[str]) -> dict[str, str]:
    """The recurrence's text lines by what they define: ``Z[x]``, ``Z[%4]``, ``c[%7]``, ``W:``."""
    index = {}
    for line in lines:
        head = line.split(" = ", 1)[0] if line.startswith(("Z[", "c[")) else line.split(":", 1)[0] + ":"
        index.setdefault(head, line)
    return index


def one_step(e: ir.Nonlin | ir.Moment | ir.Scalar, exact: bool) -> Any:
    """φ(%a, %b, ..) of a Nonlin / Moment / Scalar as sympy, each argument a symbol ``%k``."""
    import sympy as sp
    from ..symbolic.functions import to_sympy
    return to_sympy(e.fn, lambda v: sp.Symbol(f"%{v}"), exact=exact)


def covariances_html(comment: str, namer: Namer) -> list[str]:
    """``Var Zhat_W_6 = 1, Cov(., Zhat_W_4) = 1/2`` (a line's comment) as HTML pieces: the
    left side typeset, a number typeset, any other value as (wrappable) code."""
    out = []
    for piece in re.split(r", (?=Cov\(\., )", comment):
        piece = piece.strip()
        m = re.fullmatch(r"Var (\S+) = (.*)", piece, re.S) or re.fullmatch(r"Cov\(\., (\S+)\) = (.*)", piece, re.S)
        if not m:
            out += [esc(piece)] if piece else []
            continue
        symbol = namer.symbol(m[1]) or tex_text(m[1])
        left = rf"\operatorname{{Var}} {symbol}" if piece.startswith("Var") else rf"\operatorname{{Cov}}(\cdot, {symbol})"
        value = tex_number_text(m[2])
        out.append(math_inline(f"{left} = {value}") if not value.startswith(r"\texttt")
                   else f"{math_inline(left + ' =')} <code>{esc(cut(m[2].strip()))}</code>")
    return out


def matmul_row(e: ir.MatMul, compiled: Any, namer: Namer, line: str) -> tuple[str, str, str]:
    """Z^{Wx} = Ẑ^{Wx} + Ż^{Wx}, the product, Var Ẑ and its covariances."""
    import sympy as sp
    from ..symbolic.dag import distinct_nodes
    z = compiled.Z[e.var]
    body, _, comment = line.partition("    # ")
    product, _, covs = comment.partition(";  ")
    hats = [s for s in distinct_nodes(z) if isinstance(s, sp.Symbol)
            and re.fullmatch(rf"Zh(?:at|aar)_.+_{e.var}", s.name)] if tree_size(z, 10**6) < 10**6 else []
    lhs = namer.var(e.var)
    if len(hats) == 1 and isinstance(z, sp.Add) and hats[0] in z.args:
        hat = hats[0]
        dot = z - hat
        hat_tex = namer.symbol(hat.name) or sp.latex(hat)
        if dot == 0:
            rhs = hat_tex
        else:
            dot_tex = namer.latex(dot)
            rhs = hat_tex + " + " + (rf"\underbrace{{{dot_tex}}}_{{\dot Z}}" if dot_tex is not None
                                     else rf"\dot Z^{{\%{e.var}}}\ (\text{{{tree_size(dot)} terms}})")
    else:
        rhs = namer.latex(z) or tex_text(body.split(" = ", 1)[-1])
    note = [esc(product)] + covariances_html(covs, namer)
    return lhs, rhs, "<br/>".join(note)


def compiled_rows(compiled: Any) -> list[tuple[int, str, str, str]]:
    """(var, lhs, rhs, note HTML) per equation other than a matrix; a matrix gives its law."""
    program, namer = compiled.program, Namer(compiled.program)
    lines = line_index(compiled.lines)
    rows = []
    for e in program.eqns:
        key = f"Z[{e.name}]" if isinstance(e, ir.InitVector) else (
            f"{e.name}:" if isinstance(e, ir.Matrix) else f"{'c' if isinstance(e, ir.SCALAR_OPS) else 'Z'}[%{e.var}]")
        line = lines.get(key, "")
        if isinstance(e, ir.Matrix):
            rows.append((e.var, tex_name(e.name), "", esc(line.partition(": ")[2])))
        elif isinstance(e, ir.InitVector):
            lhs, z = namer.var(e.var), namer.latex(compiled.Z[e.var]) or tex_text(str(compiled.Z[e.var]))
            rows.append((e.var, lhs, "" if z == lhs else z, esc(line.partition("~ ")[2])))
        elif isinstance(e, ir.MatMul):
            rows.append((e.var, *matmul_row(e, compiled, namer, line)))
        else:
            rows.append((e.var, *function_row(e, compiled, namer, line)))
    return rows


def function_row(e: ir.Nonlin | ir.Moment | ir.Scalar, compiled: Any, namer: Namer,
                 line: str) -> tuple[str, str, str]:
    """Z^{%k} = φ(Z..) (then in the base variables), c̊ = E[φ(Z..)], or c̊ = f(c̊..)."""
    step = namer.latex(one_step(e, compiled.symbolic)) or tex_text(ir.show_fn(e.fn))
    lhs = namer.var(e.var)
    if isinstance(e, ir.Nonlin):
        full = namer.latex(compiled.Z[e.var])
        rhs = step + (f" = {full}" if full is not None and full != step else "")
        return lhs, rhs, ""
    if isinstance(e, ir.Moment):
        return lhs, rf"\mathbb{{E}}\left[{step}\right]", moment_value(line, namer.latex(compiled.c[e.var]))
    value = namer.latex(compiled.c[e.var])
    return lhs, step, math_inline(value) if value is not None else esc(cut(str(compiled.c[e.var])))


def moment_value(line: str, closed_form: str | None) -> str:
    """A Moment's value as its line states it (``0.5 (exact: 1/2)``, ``0.31 ± 2e-9 (quadrature)``),
    an exact one with its closed form typeset when it is small."""
    described = line.rpartition("] = ")[2]
    if "(exact" not in described:
        return esc(cut(described))
    value = described.split(" (exact", 1)[0]
    form = f" = {math_inline(closed_form)}" if closed_form is not None and closed_form != value else ""
    return f"{esc(value)} (exact){form}"


def compiled_html(compiled: Any) -> str:
    """The recurrence as a table: variable (and the outputs it is), the rule typeset, and the
    law / value / covariances; then the warnings."""
    program = compiled.program
    outs: dict[int, list[str]] = {}
    for o in program.outputs:
        outs.setdefault(o.var, []).append(o.name)
    rows = []
    for var, lhs, rhs, note in compiled_rows(compiled):
        label = f"<code>%{var}</code>" + "".join(f"<br/><b>out {esc(n)}</b>" for n in outs.get(var, []))
        formula = math_inline(f"{lhs} = {rhs}" if rhs else lhs)
        rows.append((label, formula, note))
    caption = (f"<b>Master Theorem recurrence</b> of <code>{esc(program.file)}</code>"
               f"{' (symbolic)' if compiled.symbolic else ''}: {len(program.eqns)} equations, "
               f"outputs {esc(', '.join(o.name for o in program.outputs))}<br/>"
               f"<small>{math_inline(ZHAT_RULE)}</small>")
    body = table(["var", "recurrence", "law · value · covariances"], rows)
    scroll = f'<div style="max-height:40em;overflow:auto">{body}</div>'
    return box("compiled", caption, scroll, warnings_html(list(compiled.warnings)))


def compiled_latex(compiled: Any) -> str:
    """The recurrence as one ``aligned`` block (matrices left out)."""
    rows = [f"{lhs} &= {rhs}" for _, lhs, rhs, _ in compiled_rows(compiled) if rhs]
    return "$$\\begin{aligned}\n" + " \\\\\n".join(rows) + "\n\\end{aligned}$$"


# ---- limits -----------------------------------------------------------------------------------
def closed_form_tex(value: Any) -> str | None:
    """A LimitValue's closed form typeset (None when there is none or it is too large)."""
    if getattr(value, "exact", None) is None:
        return None
    import sympy as sp
    if tree_size(value.exact, 4 * MAX_TEX_NODES) > 4 * MAX_TEX_NODES:
        return None
    return sp.latex(value.exact)


def value_cells(value: Any) -> tuple[str, str]:
    """(value, error) of a LimitValue as text; arrays as their range."""
    if np.ndim(value.value):
        v, err = np.asarray(value.value, float), np.asarray(value.error, float)
        return f"[{v.size} values in {v.min():.6g}..{v.max():.6g}]", f"{err.max():.2g}"
    return f"{float(value.value):.12g}", f"{float(value.error):.2g}"


def limit_html(limit: Any) -> str:
    """Value, error bound, method and closed form of every output; then the warnings."""
    rows = []
    for name, v in limit.outputs.items():
        value, error = value_cells(v)
        tex = closed_form_tex(v)
        form = wide(math_inline(tex)) if tex is not None else (
            esc(cut(str(v.exact))) if getattr(v, "exact", None) is not None else "—")
        rows.append((f"<b>{esc(name)}</b>", esc(value), esc(error), esc(v.method), form))
    caption = "<b>Infinite-width limit</b> (error: a bound on |value − limit|)"
    return box("limit", caption, table(["output", "value", "± error", "method", "closed form"], rows,
                                       numeric=[False, True, True]),
               warnings_html(list(limit.warnings)))


def limit_latex(limit: Any) -> str:
    """``align*`` of every output: its closed form, or value ± error (method)."""
    rows = []
    for name, v in limit.outputs.items():
        tex = closed_form_tex(v)
        value, error = value_cells(v)
        rhs = tex if tex is not None else rf"{tex_text(value)} \pm {error}\ (\text{{{v.method}}})"
        rows.append(f"{tex_name(name)} &= {rhs}")
    return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"


# ---- limits by particles ----------------------------------------------------------------------
def particles_html(result: Any) -> str:
    """A :class:`~tensorprog.limit.particles.ParticlesResult`: per output the extrapolated value,
    its error (statistical + bias), and the means ± SE at the two widths; then the warnings."""
    o, large, small = result.options, result.large, result.small
    rows = []
    for name, v in result.outputs.items():
        rows.append((f"<b>{esc(name)}</b>", num(v.value, ".10g"), num(v.error, ".2g"), num(v.statistical, ".2g"),
                     num(v.bias, ".2g"), f"{num(large.means[name], '.8g')} ± {num(large.sems[name], '.2g')}",
                     f"{num(small.means[name], '.8g')} ± {num(small.sems[name], '.2g')}"))
    caption = (f"<b>Infinite-width limit by particles</b> of <code>{esc(result.program.file)}</code>: widths "
               f"N = {int(large.width)} and {int(small.width)}, {int(o.replicas)} replicas each, "
               f"{esc(result.engine)} engine, seed {esc(o.seed)}, {result.seconds:.3g} s<br/><small>value: "
               "Richardson extrapolation to 1/n → 0; error = statistical (Student t, 99%) + bias "
               "(the 1/n correction)</small>")
    header = ["output", "value", "± error", "statistical", "bias", f"mean at {int(large.width)} ± SE",
              f"mean at {int(small.width)} ± SE"]
    return box("particles", caption, table(header, rows, numeric=[False] + [True] * 6),
               warnings_html(list(result.warnings)))


# ---- finite width -----------------------------------------------------------------------------
def laws_text(matrix_dist: str | None) -> str:
    return f"matrices: {matrix_dist}" if matrix_dist else "matrices as declared"


def exec_html(result: Any) -> str:
    """Mean, standard deviation and standard error of the mean of every output over the trials."""
    rows = []
    for name, o in getattr(result, "entries", result.outputs).items():     # arrays entry by entry
        values = np.asarray(o.values, float)
        sem = float(np.std(values, ddof=1) / math.sqrt(values.size)) if values.size > 1 else float("nan")
        rows.append((f"<b>{esc(name)}</b>", num(o.mean, ".10g"), num(o.std, ".4g"), num(sem, ".3g")))
    caption = (f"<b>Finite width</b> n = {int(result.width)}, {int(result.trials)} trial(s), seed "
               f"{esc(result.seed)}, {esc(result.dtype)}, {esc(laws_text(result.matrix_dist))}"
               + (", blocked" if getattr(result, "blocked", False) else "")
               + (", conditional" if getattr(result, "conditional", False) else "")
               + (f", {esc(result.backend)} on {esc(getattr(result, 'device', 'cpu'))}"
                  if getattr(result, "backend", "numpy") != "numpy" else ""))
    return box("execute", caption, table(["output", "mean", "std", "SE"], rows,
                                         numeric=[False, True, True, True]))


# ---- convergence ------------------------------------------------------------------------------
def rate_text(rate: float | None, error: float | None) -> str:
    if rate is None:
        return "—"
    return f"{rate:+.3f}" + (f" ± {error:.3f}" if error is not None else "")


def converge_output_html(o: Any) -> str:
    """One output across the widths: mean, SE, |mean − c̊| (~ where below noise) and rms."""
    lim = f"{o.limit:.12g}" + (" (exact)" if o.method == "exact" else f" ± {o.limit_error:.2g} ({o.method})")
    rows = [(str(w), num(o.means[i], ".8g"), num(o.sems[i], ".3g"),
             num(o.bias[i], ".3g") + ("" if o.bias_resolved[i] else " ~"), num(o.rms[i], ".3g"))
            for i, w in enumerate(o.widths)]
    rates = (f"rate {esc(rate_text(o.rate, o.rate_error))} (slope of log rms against log n) · "
             f"bias_rate {esc(rate_text(o.bias_rate, o.bias_rate_error))}")
    return (f"<div><b>{esc(o.name)}</b>: limit {esc(lim)}"
            + table(["width", "mean", "SE", "|mean − limit|", "rms"], rows, numeric=[True] * 5)
            + f"<small>{rates}</small></div>")


def converge_png(result: Any) -> bytes | None:
    """The convergence plot of ``result`` as PNG bytes (None without matplotlib or when nothing
    can be drawn)."""
    from ..errors import TPUsageError
    from .plot import plot_convergence
    fd, path = tempfile.mkstemp(suffix=".png")
    os.close(fd)
    try:
        plot_convergence(result, path, dpi=80)
        with open(path, "rb") as f:
            return f.read()
    except TPUsageError:
        return None
    finally:
        os.unlink(path)


def converge_html(result: Any, png: bytes | None | Callable[[Any], bytes | None] = converge_png) -> str:
    """Per output a table over the widths and the rates, the plot (``png``: the bytes, or a
    function drawing them) and the warnings."""
    image = png(result) if callable(png) else png
    caption = (f"<b>Convergence</b> of <code>{esc(result.file)}</code>: {int(result.trials)} trial(s) "
               f"per width, seed {esc(result.seed)}, {esc(result.dtype)}, {esc(laws_text(result.matrix_dist))}"
               "<br/><small>~: |mean − limit| is below 2 standard errors there (noise)</small>")
    tables = "".join(converge_output_html(o) for o in result.outputs.values())
    side = png_img(image, "deviation from the limit against the width") if image else ""
    layout = (f'<div style="display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start">'
              f"<div>{tables}</div><div>{side}</div></div>")
    return box("converge", caption, layout, warnings_html(list(result.warnings)))


# ---- dataset kernels --------------------------------------------------------------------------
def heatmap_png(matrices: dict[str, np.ndarray], title: str) -> bytes | None:
    """The kernels side by side as heatmaps (None without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    fig = Figure(figsize=(3.2 * len(matrices) + 0.4, 3.0))
    FigureCanvasAgg(fig)
    for k, (name, m) in enumerate(matrices.items()):
        ax = fig.add_subplot(1, len(matrices), k + 1)
        shown = np.asarray(m, float)[:MAX_HEATMAP, :MAX_HEATMAP]
        im = ax.imshow(shown, cmap="viridis", interpolation="nearest")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
        ax.set_title(name + ("" if shown.shape == np.shape(m) else f" (first {MAX_HEATMAP})"), fontsize=10)
        ax.set_xticks([]), ax.set_yticks([])
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=80)
    return out.getvalue()


def kernel_html(result: Any) -> str:
    """Per output: N, the diagonal and off-diagonal means, method and largest error; the heatmaps."""
    summary = result.summary()
    rows = []
    for name, k in result.outputs.items():
        s = summary["outputs"][name]
        rows.append((f"<b>{esc(name)}</b>", str(np.shape(k.mean)[0]), num(s["diag_mean"], ".8g"),
                     num(s["offdiag_mean"], ".8g"), esc(s["method"]), num(s["max_error"], ".2g")))
    where = ("the infinite-width limit" if result.width is None
             else f"finite width n = {int(result.width)}, {int(result.trials)} trial(s)")
    spread = "error bound" if result.width is None else "SE (std/√trials)"
    caption = f"<b>Dataset kernel</b>: {esc(where)}"
    png = heatmap_png({n: k.mean for n, k in result.outputs.items()}, where)
    return box("kernel", caption,
               table(["output", "N", "diagonal mean", "off-diagonal mean", "method", f"largest {spread}"],
                     rows, numeric=[False, True, True, True, False, True]),
               png_img(png, "kernel heatmaps") if png else "", warnings_html(list(result.warnings)))
