"""The documented path of :func:`plot_convergence` (``tensorprog.plot.plot_convergence``); it lives
in :mod:`tensorprog.tools.plot`."""
from .tools.plot import plot_convergence, require_matplotlib

__all__ = ["plot_convergence", "require_matplotlib"]
