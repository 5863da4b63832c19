"""HTML and LaTeX pieces shared by the rich displays (Jupyter) of every stage.

Pure functions from text and numbers to strings: escaping, tables, boxes, inline maths, names
in LaTeX, and the size of an expression tree.  The displays themselves live beside what they
print (:mod:`tensorprog.limit.printers`, :mod:`tensorprog.finite.display`,
:mod:`tensorprog.tools.display`).  Every piece of user text goes through :func:`esc`; maths is
written between ``\\(`` and ``\\)``, which both Jupyter and Sphinx's MathJax typeset.  This
package imports nothing of tensorprog but itself, and no sympy.
"""
from __future__ import annotations

import base64
import html
import math
from typing import Any, Iterable, Sequence

#: expressions with more nodes (counted as a tree) than this are not typeset in full
MAX_TEX_NODES = 120
#: a value printed as text is cut to this many characters
MAX_TEXT = 160
#: floats inside a typeset expression are shown to this many significant digits
FLOAT_DIGITS = 6

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
    if len(name) == 1 and name.isascii() and name.isalpha():
        return name
    return r"\mathrm{" + "".join(TEX_SPECIALS.get(ch, ch) for ch in name) + "}"


def tex_text(text: str) -> str:
    """Arbitrary text inside maths, in a typewriter font (specials escaped)."""
    return r"\texttt{" + "".join(TEX_SPECIALS.get(ch, ch) for ch in cut(text)) + "}"


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



def laws_text(matrix_dist: str | None) -> str:
    """How a finite-width run drew its matrices."""
    return f"matrices: {matrix_dist}" if matrix_dist else "matrices as declared"
