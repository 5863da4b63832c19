"""The tail bound of Golikov's thesis (ch. 4, Theorem 4.3.1) beside the empirical tail (``tpc tailbound``).

* :mod:`.recognise`: the theorem's class in a program, and its constants;
* :mod:`.chain`: the bound of one chain once its constants are known;
* :mod:`.rules`: the syntactic function rules (Lipschitz, monotone, zero at 0);
* :mod:`.bound`: the bound against the empirical tail at finite width, and its table.
"""
from .bound import analyze, compare, empirical_tail, render_rows, tail_bound
from .chain import C0_43, K_43, Chain
from .recognise import TailBoundUnsupported

__all__ = ["analyze", "tail_bound", "empirical_tail", "compare", "render_rows", "Chain",
           "TailBoundUnsupported", "K_43", "C0_43"]
