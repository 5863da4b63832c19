"""Printers of the recurrence (:mod:`.recurrence`) and of limits: text, LaTeX, HTML, JSON.

Each reads the records of a :class:`~.compiler.Compiled` (and the limits) and nothing else:
no printer parses text that another printed.  Names are the program's own (``a[2]``, ``da3``,
from each record's :class:`~.recurrence.Source`), ``%k`` for a vector the program never named.

* :func:`recurrence_lines`: ``tpc compile``'s text, one line per variable defined;
* :func:`recurrence_json`: the records as JSON (the schema: docs/recurrence.md);
* :func:`compiled_html`, :func:`compiled_latex`: the recurrence typeset (Jupyter, ``--emit latex``);
* :func:`limit_html`, :func:`limit_latex`: value, error bound, method and closed form of every output;
* :func:`particles_html`: a :class:`~.particles.ParticlesResult`.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import sympy as sp

from .. import ir
from ..display.html import (FLOAT_DIGITS, MAX_TEX_NODES, box, cut, esc, math_inline, num, table, tex_name,
                            tex_text, tree_size, warnings_html, wide)
from ..ir.walk import Rules, fold
from ..symbolic.dag import distinct_nodes
from ..symbolic.functions import to_sympy
from .recurrence import (Covariance, Expectation, HatBase, InitialBase, MatrixLaw, Record, Recurrence,
                         ScalarNode, Source, VectorZ, ZdotCoefficient, output_names)

#: a Z-expression under more nested Nonlins than this prints as its step, in the program's names
SHOW_NESTING = 8


# ---- text ---------------------------------------------------------------------------------------
def short(value: sp.Expr) -> str:
    """A covariance for the text: a float to 6 digits, anything else as sympy prints it."""
    return f"{float(value):.6g}" if value.is_Float else str(value)


def labels(program: ir.Program) -> Callable[[int], str]:
    """var -> its label in a step: the program's name when it names that variable only, else
    ``%k`` (a name rebound in a loop, ``x = sin(x)``, names several)."""
    outputs = output_names(program)
    names = [Source.of(program, var, outputs).name for var in range(len(program.eqns))]
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return lambda var: names[var] if names[var] and counts[names[var]] == 1 else f"%{var}"


def show_step(fn: ir.Fn, label: Callable[[int], str]) -> str:
    """An IR function tree with each variable by its label: ``(a[1] * tanh(h))``."""
    return fold(fn, Rules(ref=lambda node: label(node.var), const=lambda node: f"{node.value:g}",
                          call=lambda node, args: f"{node.name}({', '.join(args)})",
                          bin=lambda node, lhs, rhs: f"({lhs} {node.op} {rhs})",
                          neg=lambda node, operand: f"-{operand}"))


def at(source: Source) -> str:
    """``line L:C``: the source position of a record."""
    return f"line {source.line}:{source.col}"


def where(source: Source) -> str:
    """``%k, line L:C``: the IR variable and source position of a record."""
    return f"%{source.var}, {at(source)}"


def product_text(r: VectorZ) -> str:
    """``W @ %3 (x)``, ``W.T @ %5``: the product, its argument by its IR variable and name."""
    return f"{r.matrix.label}{'.T' if r.transposed else ''} @ %{r.arg.var}" + (f" ({r.arg.name})" if r.arg.name else "")


def covariance_text(r: VectorZ, covs: dict[sp.Symbol, list[Covariance]]) -> str:
    """``;  Var Zhat_W_3 = 1, Cov(., Zhat_W_2) = 0.5`` of a product's Ẑ (nothing without one)."""
    if r.hat is None:
        return ""
    entries = covs.get(r.hat, [])
    var = next((c.value for c in entries if c.b == r.hat), None)
    out = f";  Var {r.hat} = {short(var)}" if var is not None else ""
    return out + "".join(f", Cov(., {c.b}) = {short(c.value)}" for c in entries if c.b != r.hat and c.value != 0)


def law_text(base: InitialBase) -> str:
    """``normal(cov row [1.0, 0.5])`` or ``normal(var=1)``."""
    return base.family + (f"(cov row {list(base.cov_row)})" if base.cov_row is not None else f"(var={base.variance:g})")


def record_line(r: Record, rec: Recurrence, covs: dict, initial: dict, label: Callable[[int], str]) -> str | None:
    """The text line of a record that defines a variable (None for the others)."""
    if isinstance(r, MatrixLaw):
        return f"{r.source.label}: {r.family}, variance {r.variance:g}/{r.cols} ({r.rows}x{r.cols})"
    if isinstance(r, ScalarNode):
        if r.op == "moment":
            body = str(r.integrand) if r.nesting < SHOW_NESTING else show_step(r.step, label)
            return f"c[{r.source.label}] = E[{body}] = {r.limit.describe()}    # {where(r.source)}"
        return f"c[{r.source.label}] = {r.value}    # {where(r.source)}"
    if not isinstance(r, VectorZ):
        return None
    lhs = f"Z[{r.source.label}] = "
    if r.op == "initial":
        return f"{lhs}{r.z}    ~ {law_text(initial[r.source.var])}    # {where(r.source)}"
    if r.op == "same":
        return f"{lhs}Z[{r.arg.label}]    # {where(r.source)}: {r.matrix.label}{'.T' if r.transposed else ''} @ again"
    if r.op == "nonlin":
        body = str(r.z) if r.nesting < SHOW_NESTING else show_step(r.step, label)
        return f"{lhs}{body}    # {where(r.source)}"
    if r.op == "haar":
        return f"{lhs}{r.z}    # %{r.source.var} = {product_text(r)} (Haar), {at(r.source)}{covariance_text(r, covs)}"
    inner = f"{r.hat}" + (f" + {r.dot}" if r.dot != 0 else "")
    body = f"{r.outer}*({inner})" if r.outer != 1 else inner
    return f"{lhs}{body}    # %{r.source.var} = {product_text(r)}, {at(r.source)}{covariance_text(r, covs)}"


def recurrence_lines(compiled: Any) -> tuple[str, ...]:
    """The recurrence as text: per matrix its law, per vector Z (base variables and the Ẑ's
    covariances), per scalar c̊; each line ends with its IR variable and source position."""
    rec: Recurrence = compiled.recurrence
    covs, label = rec.covariances(), labels(compiled.program)
    initial = {r.source.var: r for r in rec if isinstance(r, InitialBase)}
    return tuple(line for r in rec if (line := record_line(r, rec, covs, initial, label)) is not None)


# ---- JSON ---------------------------------------------------------------------------------------
#: an expression larger than this as a tree (a DAG shared deeply, e.g. x = x + tanh(x) chains)
#: is written as null in JSON: its text would grow exponentially with the depth
MAX_JSON_NODES = 5000


def expr_text(expr: sp.Basic | None) -> str | None:
    """An expression as sympy's text, or None when it has more than MAX_JSON_NODES nodes as a tree."""
    if expr is None or tree_size(expr, MAX_JSON_NODES) > MAX_JSON_NODES:
        return None
    return sp.sstr(expr)


def expr_json(value: Any) -> Any:
    """A value as JSON: a sympy number as a float when it is one, else its text (``sstr``)."""
    if value is None:
        return None
    if isinstance(value, sp.Basic):
        if value.is_number and not value.free_symbols:
            try:
                return float(value)
            except TypeError:
                return expr_text(value)
        return expr_text(value)
    return ir.jsonable(value)


def limit_json(v: Any) -> dict | None:
    """A LimitValue as JSON (``exact``: the closed form when there is one, see docs/recurrence.md)."""
    if v is None:
        return None
    return {"value": ir.jsonable(v.value), "error": ir.jsonable(v.error), "method": v.method,
            "exact": None if v.exact is None else sp.sstr(v.exact)}


def record_json(r: Record, label: Callable[[int], str]) -> dict:
    """One record as a JSON object: ``kind``, ``source`` and the kind's fields (docs/recurrence.md)."""
    s = r.source
    out: dict = {"kind": r.kind, "source": {"var": s.var, "name": s.name, "line": s.line, "col": s.col}}

    def ref(src: Source | None) -> dict | None:
        return None if src is None else {"var": src.var, "name": src.name}
    if isinstance(r, MatrixLaw):
        out.update(family=r.family, variance=r.variance, rows=r.rows, cols=r.cols,
                   row_scale=None if r.row_scale is None else r.row_scale.name)
    elif isinstance(r, InitialBase):
        out.update(symbol=r.symbol.name, family=r.family, mean=expr_json(r.mean), group=r.group, member=r.member,
                   cov_row=None if r.cov_row is None else [float(c) for c in r.cov_row],
                   variance=r.variance)
    elif isinstance(r, HatBase):
        out.update(symbol=r.symbol.name, matrix=ref(r.matrix), transposed=r.transposed, arg=ref(r.arg), haar=r.haar)
    elif isinstance(r, Covariance):
        out.update(a=r.a.name, b=r.b.name, value=expr_json(r.value), sigma2=expr_json(r.sigma2),
                   expectation=r.expectation)
    elif isinstance(r, Expectation):
        out.update(index=r.index, integrand=expr_text(r.integrand), value=expr_json(r.value))
    elif isinstance(r, ZdotCoefficient):
        out.update(hat=r.hat.name, partner=ref(r.partner), sigma2=expr_json(r.sigma2),
                   coefficient=expr_json(r.coefficient), expectation=r.expectation)
    elif isinstance(r, VectorZ):
        out.update(op=r.op, z=expr_text(r.z), step=None if r.step is None else show_step(r.step, label),
                   matrix=ref(r.matrix), transposed=r.transposed, arg=ref(r.arg),
                   hat=None if r.hat is None else r.hat.name, dot=expr_text(r.dot), outer=expr_text(r.outer))
    elif isinstance(r, ScalarNode):
        out.update(op=r.op, value=expr_json(r.value), step=show_step(r.step, label),
                   integrand=expr_text(r.integrand),
                   expectation=r.expectation, limit=limit_json(r.limit))
    return out


def recurrence_json(compiled: Any) -> dict:
    """The recurrence as JSON: ``records`` (each with its source) and ``estimates`` (method and
    error of each expectation node, by index)."""
    label = labels(compiled.program)
    return {"records": [record_json(r, label) for r in compiled.recurrence],
            "estimates": [{"value": ir.jsonable(e.value), "error": ir.jsonable(e.error), "method": e.method}
                          for e in compiled.estimates]}


# ---- LaTeX and HTML -----------------------------------------------------------------------------
class Namer:
    """LaTeX names of a compiled program's symbols, from its base records: Z_x -> Z^{x},
    Ẑ of the product %k by W -> Ẑ^{W}_{k} (by Wᵀ: Ẑ^{W^⊤}_{k}), an mvt row scale -> u^{W}; a
    variable -> Z^{name} (vectors) or c̊^{name} (scalars), by its source name."""

    def __init__(self, compiled: Any) -> None:
        self.program = compiled.program
        self.outputs = output_names(compiled.program)
        self.symbols: dict[sp.Symbol, str] = {}
        rec: Recurrence = compiled.recurrence
        self.names = {r.source.var: r.source for r in rec if isinstance(r, (MatrixLaw, VectorZ, ScalarNode))}
        counts: dict[str, int] = {}
        for s in self.names.values():
            counts[s.name] = counts.get(s.name, 0) + 1
        self.repeated = {n for n, k in counts.items() if k > 1}
        for r in rec:
            if isinstance(r, InitialBase):
                self.symbols[r.symbol] = rf"Z^{{{tex_name(r.source.name)}}}"
            elif isinstance(r, HatBase):
                top = tex_name(r.matrix.label) + (r"^{\top}" if r.transposed else "")
                self.symbols[r.symbol] = rf"\hat{{Z}}^{{{top}}}_{{{r.source.var}}}"
            elif isinstance(r, MatrixLaw) and r.row_scale is not None:
                self.symbols[r.row_scale] = rf"u^{{{tex_name(r.source.label)}}}"

    def name(self, var: int) -> str:
        """A variable's name in maths: its source name (with ``%k`` when the name is rebound), else %k."""
        src = self.names.get(var) or Source.of(self.program, var, self.outputs)
        if not src.name:
            return rf"\%{var}"
        return tex_name(src.name) + (rf"\,[\%{var}]" if src.name in self.repeated else "")

    def var(self, var: int) -> str:
        """Z^{x} of a vector, c̊^{c} of a scalar."""
        if isinstance(self.program.eqns[var], ir.SCALAR_OPS):
            return rf"\mathring{{c}}^{{{self.name(var)}}}"
        return rf"Z^{{{self.name(var)}}}"

    def latex(self, expr: Any) -> str | None:
        """``expr`` typeset, or None when it is too large to read (more than MAX_TEX_NODES)."""
        if not isinstance(expr, sp.Basic) or tree_size(expr, MAX_TEX_NODES) > MAX_TEX_NODES:
            return None
        nodes = distinct_nodes(expr)
        names = {s: self.symbols[s] for s in nodes if isinstance(s, sp.Symbol) and s in self.symbols}
        floats = {f: sp.Float(f, FLOAT_DIGITS) for f in nodes if isinstance(f, sp.Float)}
        return sp.latex(expr.xreplace(floats) if floats else expr, symbol_names=names)

    def step(self, fn: ir.Fn, exact: bool) -> str | None:
        """One IR step φ(a, b, ..) typeset, each argument by its name."""
        leaves = {}

        def leaf(v: int) -> sp.Symbol:
            leaves.setdefault(v, sp.Symbol(f"v{v}"))
            return leaves[v]
        expr = to_sympy(fn, leaf, exact=exact)
        if tree_size(expr, MAX_TEX_NODES) > MAX_TEX_NODES:
            return None
        return sp.latex(expr, symbol_names={s: self.var(v) for v, s in leaves.items()})


ZHAT_RULE = (r"\operatorname{Cov}(\hat Z^{Wx}, \hat Z^{Wy}) = \sigma^2\,\mathbb{E}[Z^x Z^y],\quad"
             r"\dot Z^{Wx} = \sigma^2 \sum_y Z^y\, \mathbb{E}\Big[\frac{\partial Z^x}{\partial \hat Z^{W^\top y}}\Big]")


def number_tex(value: sp.Expr, namer: Namer) -> str | None:
    """A covariance typeset: a fraction as ``\\tfrac``, a float to FLOAT_DIGITS, else the expression."""
    if value.is_Rational and not value.is_Integer:
        sign = "-" if value < 0 else ""
        return rf"{sign}\tfrac{{{abs(value.p)}}}{{{value.q}}}"
    if value.is_Integer:
        return str(value)
    if value.is_Float:
        return format(float(value), f".{FLOAT_DIGITS}g")
    return namer.latex(value)


def covariances_html(r: VectorZ, covs: dict[sp.Symbol, list[Covariance]], namer: Namer) -> list[str]:
    """Var Ẑ and its non-zero covariances with earlier Ẑ's, typeset (as code when too large)."""
    out = []
    for c in covs.get(r.hat, []) if r.hat is not None else []:
        if c.b != r.hat and c.value == 0:
            continue
        symbol = namer.symbols.get(c.b) or tex_text(c.b.name)
        left = rf"\operatorname{{Var}} {symbol}" if c.b == r.hat else rf"\operatorname{{Cov}}(\cdot, {symbol})"
        value = number_tex(c.value, namer)
        out.append(math_inline(f"{left} = {value}") if value is not None
                   else f"{math_inline(left + ' =')} <code>{esc(cut(str(c.value)))}</code>")
    return out


def product_rhs(r: VectorZ, namer: Namer) -> str:
    """Ẑ + Ż of a product (Ż under a brace; summarised when too large), or its whole Z."""
    if r.op == "matmul" and r.outer == 1:
        hat = namer.symbols[r.hat]
        if r.dot == 0:
            return hat
        dot = namer.latex(r.dot)
        return hat + " + " + (rf"\underbrace{{{dot}}}_{{\dot Z}}" if dot is not None
                              else rf"\dot Z^{{{namer.name(r.source.var)}}}\ (\text{{{tree_size(r.dot)} terms}})")
    if r.op == "same":
        return namer.var(r.arg.var)
    return namer.latex(r.z) or tex_text(str(r.z))


def moment_note(r: ScalarNode, namer: Namer) -> str:
    """A Moment's value (``0.31 ± 2e-9 (quadrature)``); an exact one with its closed form."""
    v = r.limit
    if v.method != "exact":
        return esc(cut(v.describe()))
    value = f"{v.value:.12g}"
    form = namer.latex(r.value)
    shown = f" = {math_inline(form)}" if form is not None and form != value else ""
    return f"{esc(value)} (exact){shown}"


def compiled_rows(compiled: Any) -> list[tuple[int, str, str, str]]:
    """(var, lhs, rhs, note HTML) per record defining a variable: a matrix gives its law."""
    rec: Recurrence = compiled.recurrence
    namer, covs = Namer(compiled), rec.covariances()
    initial = {r.source.var: r for r in rec if isinstance(r, InitialBase)}
    rows = []
    for r in rec:
        if isinstance(r, MatrixLaw):
            note = f"{r.family}, variance {r.variance:g}/{r.cols} ({r.rows}x{r.cols})"
            rows.append((r.source.var, tex_name(r.source.label), "", esc(note)))
        elif isinstance(r, VectorZ):
            lhs = namer.var(r.source.var)
            if r.op == "initial":
                z = namer.latex(r.z) or tex_text(str(r.z))
                rows.append((r.source.var, lhs, "" if z == lhs else z, esc(law_text(initial[r.source.var]))))
            elif r.op == "nonlin":
                step = namer.step(r.step, compiled.symbolic) or tex_text(ir.show_fn(r.step))
                full = namer.latex(r.z)
                rows.append((r.source.var, lhs, step + (f" = {full}" if full is not None and full != step else ""), ""))
            else:
                note = [esc(product_text(r) + (" (Haar)" if r.op == "haar" else ""))] + covariances_html(r, covs, namer)
                rows.append((r.source.var, lhs, product_rhs(r, namer), "<br/>".join(note)))
        elif isinstance(r, ScalarNode):
            lhs = namer.var(r.source.var)
            step = namer.step(r.step, compiled.symbolic) or tex_text(ir.show_fn(r.step))
            if r.op == "moment":
                rows.append((r.source.var, lhs, rf"\mathbb{{E}}\left[{step}\right]", moment_note(r, namer)))
            else:
                value = namer.latex(r.value)
                rows.append((r.source.var, lhs, step,
                             math_inline(value) if value is not None else esc(cut(str(r.value)))))
    return rows


def compiled_html(compiled: Any) -> str:
    """The recurrence as a table: variable (its name, %k, and the outputs it is), the rule
    typeset, and the law / value / covariances; then the warnings."""
    program = compiled.program
    outs: dict[int, list[str]] = {}
    for o in program.outputs:
        outs.setdefault(o.var, []).append(o.name)
    rows = []
    for var, lhs, rhs, note in compiled_rows(compiled):
        name = program.names.get(var) or getattr(program.eqns[var], "name", "")
        label = (f"<code>{esc(name)}</code> " if name else "") + f"<code>%{var}</code>" \
            + "".join(f"<br/><b>out {esc(n)}</b>" for n in outs.get(var, []))
        rows.append((label, math_inline(f"{lhs} = {rhs}" if rhs else lhs), note))
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


# ---- limits -------------------------------------------------------------------------------------
def closed_form_tex(value: Any) -> str | None:
    """A LimitValue's closed form typeset (None when there is none or it is too large)."""
    if getattr(value, "exact", None) is None:
        return None
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


def particles_html(result: Any) -> str:
    """A :class:`~.particles.ParticlesResult`: per output the extrapolated value, its error
    (statistical + bias), and the means ± SE at the two widths; then the warnings."""
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
