"""The builtins of the language: one record per builtin, every facet of it in one place.

A :class:`~.record.Builtin` holds, as neural-tangents' stax keeps a layer's ``fn`` beside its
``kernel_fn``: the finite-width numpy function, its array-API implementation (and the special
function it needs beyond the standard), its sympy head and derivative, parity, growth class (with
its slope), kinks, and the tail bound's rule.  Every stage reads the records (:data:`BUILTINS`):

* the front end and the verifier: name, arity, default arguments, the numpy function for constants;
* the finite-width back ends: ``numpy`` and ``array`` (:mod:`tensorprog.finite.backend`);
* the sympy side: the head and its derivative (:mod:`tensorprog.symbolic.heads` makes the
  ``sympy.Function`` classes of the :class:`~.record.Head` specs);
* the structural analyses and the hypothesis checks: parity, growth, slope, kinks
  (:mod:`tensorprog.expect.analysis`, :mod:`tensorprog.limit.hypotheses`);
* the tail bound: ``monotone`` (:mod:`tensorprog.tools.tailbound.rules`).

Exact Gaussian expectations of particular heads (the arc-cosine family, erf, gelu...) are rules
of the expectation engine, written against the heads; a builtin without one is integrated
numerically.  This package imports numpy only (scipy inside the functions that need it, sympy
never), so every stage can import it and ``import tensorprog`` stays light.
"""
from .record import BOUNDED, EVEN, LINEAR, ODD, OTHER, Builtin, Head, Kinks
from .table import BUILTINS, CONSTANTS

__all__ = ["Builtin", "Head", "Kinks", "BUILTINS", "CONSTANTS", "BOUNDED", "LINEAR", "OTHER", "ODD", "EVEN"]
