"""tensorprog: Tensor Programs at finite width and in the infinite-width limit.

    import tensorprog as tp
    p = tp.load("programs/relu_nngp.tp", L=5)
    p.execute(n=1024, trials=8).outputs["kxy"].mean
    p.compile().limit().outputs["kxy"].value
"""
from .errors import (TPError, TPIndexError, TPLimitError, TPLoadError, TPNameError,
                     TPNumericalError, TPSyntaxError, TPTypeError, TPUsageError, TPValueError)
from .program import Program, load, parse
from .kernel import kernel  # noqa: E402  (tp.kernel is the function; the module is tensorprog.kernel)

__all__ = ["Program", "load", "parse", "kernel", "TPError", "TPSyntaxError", "TPNameError", "TPTypeError",
           "TPValueError", "TPIndexError", "TPLoadError", "TPLimitError", "TPNumericalError",
           "TPUsageError"]
__version__ = "0.1.0"
