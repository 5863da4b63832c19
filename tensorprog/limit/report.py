"""Rendering of compiled programs and limits: text, JSON, LaTeX."""
from __future__ import annotations

import json

import sympy as sp

from .particles import ParticlesResult


def render_compiled(compiled, limit, emit: str) -> str:
    """``compiled`` (a Compiled recurrence, or a ParticlesResult) and its limit as text, JSON or LaTeX."""
    particles = isinstance(compiled, ParticlesResult)
    if emit == "json":
        data = limit.to_dict()
        if particles:
            data["method"] = "particles"
            data["particles"] = compiled.to_dict()
        else:
            data["recurrence"] = str(compiled).splitlines()
        return json.dumps(data, indent=2)
    if emit == "latex":
        rows = [f"\\mathrm{{{name}}} &= " + (sp.latex(v.exact) if v.exact is not None else
                f"{v.value:.12g} \\pm {v.error:.1e}\\ (\\text{{{v.method}}})")
                for name, v in limit.entries.items()]          # an array of outputs entry by entry
        return "\\begin{align*}\n" + " \\\\\n".join(rows) + "\n\\end{align*}"
    lines = (["# particles", str(compiled)] if particles else ["# Master Theorem recurrence", str(compiled)]) \
        + ["", "# limits"]
    width = max((len(k) for k in limit.outputs), default=0)
    lines += [f"{name:<{width}} = {v.describe()}" for name, v in limit.outputs.items()]
    lines += [""] + limit.warnings if limit.warnings else []
    return "\n".join(lines)
