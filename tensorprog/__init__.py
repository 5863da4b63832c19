"""tensorprog: Tensor Programs at finite width and in the infinite-width limit.

    import tensorprog as tp
    p = tp.load("programs/relu_nngp.tp", L=5)
    p.execute(n=1024, trials=8).outputs["kxy"].mean
    p.compile().limit().outputs["kxy"].value

The package reads as its pipeline: :mod:`.lang` (text -> IR), :mod:`.ir`, :mod:`.distributions`,
:mod:`.finite` (finite width), :mod:`.limit` (the Master Theorem compiler), :mod:`.expect` (the
expectation engine), :mod:`.tools` (kernels, convergence, tail bound); ``docs/architecture.md``
describes them.  ``import tensorprog`` loads neither sympy nor scipy: the compiler and the
dataset kernels are imported when first used.
"""
from .errors import (TPError, TPIndexError, TPLimitError, TPLoadError, TPNameError, TPNumericalError,
                     TPSyntaxError, TPTypeError, TPUsageError, TPValueError)
from .program import Program, load, parse

__all__ = ["Program", "load", "parse", "kernel", "TPError", "TPSyntaxError", "TPNameError", "TPTypeError",
           "TPValueError", "TPIndexError", "TPLoadError", "TPLimitError", "TPNumericalError",
           "TPUsageError"]
__version__ = "0.1.0"


def __getattr__(name: str):
    """``tp.kernel`` (:func:`tensorprog.tools.kernel.kernel`), imported on first use."""
    if name == "kernel":
        from .tools.kernel import kernel
        return kernel
    raise AttributeError(f"module 'tensorprog' has no attribute {name!r}")
