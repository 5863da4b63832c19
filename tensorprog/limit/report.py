"""Rendering of compiled programs and limits for ``tpc compile``: text, JSON, LaTeX.

The recurrence's part comes from its printers (:mod:`.printers`): JSON gains ``recurrence``
(its records, the estimates and the text; schema in docs/recurrence.md), LaTeX the recurrence
typeset before the values."""
from __future__ import annotations

import json

import sympy as sp

from .particles import ParticlesResult
from .printers import compiled_latex, recurrence_json


def render_compiled(compiled, limit, emit: str) -> str:
    """``compiled`` (a Compiled recurrence, or a ParticlesResult) and its limit as text, JSON or LaTeX."""
    particles = isinstance(compiled, ParticlesResult)
    if emit == "json":
        data = limit.to_dict()
        if particles:
            data["method"] = "particles"
            data["particles"] = compiled.to_dict()
        else:
            data["recurrence"] = {**recurrence_json(compiled), "text": list(compiled.lines)}
        return json.dumps(data, indent=2)
    if emit == "latex":
        rows = [f"\\mathrm{{{name}}} &= " + (sp.latex(v.exact) if v.exact is not None else
                f"{v.value:.12g} \\pm {v.error:.1e}\\ (\\text{{{v.method}}})")
                for name, v in limit.entries.items()]          # an array of outputs entry by entry
        values = "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
        return values if particles else "% Master Theorem recurrence\n" + compiled_latex(compiled) + \
            "\n% limits\n" + values
    lines = (["# particles", str(compiled)] if particles else ["# Master Theorem recurrence", str(compiled)]) \
        + ["", "# limits"]
    width = max((len(k) for k in limit.outputs), default=0)
    lines += [f"{name:<{width}} = {v.describe()}" for name, v in limit.outputs.items()]
    lines += [""] + limit.warnings if limit.warnings else []
    return "\n".join(lines)
