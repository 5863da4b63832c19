"""The documented path of :func:`converge` (``tensorprog.converge.converge``); it lives in
:mod:`tensorprog.tools.converge`."""
from .tools.converge import ConvergeResult, converge, parse_widths, render_text

__all__ = ["ConvergeResult", "converge", "parse_widths", "render_text"]
