"""The record of one builtin (:class:`Builtin`) and the specs it holds (:class:`Head`, :class:`Kinks`).

The sympy facets are written as functions of a namespace ``s`` (first argument) that resolves
names to sympy's functions and to our own heads (``s.exp``, ``s.Step``, ``s.Delta``): the record
stays free of sympy, which :mod:`tensorprog.symbolic.heads` imports and hands in.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

#: growth classes: |f| ≤ 1 everywhere; |f(x, ...)| ≤ c + slope·|x| (linear); anything else
BOUNDED, LINEAR, OTHER = "bounded", "linear", "other"
#: parities under x → −x of the first argument: f(−x) = −f(x), f(−x) = f(x)
ODD, EVEN = -1, +1


@dataclass(frozen=True)
class Head:
    """A sympy head of our own: :mod:`tensorprog.symbolic.heads` makes the ``sympy.Function``
    subclass ``cls`` of it.

    ``value(s, *args)`` is the head at numeric (comparable) arguments, as a sympy number;
    ``derivative[i](s, *args)`` is ∂/∂args[i] (``fdiff``: what ``diff``, ``grad`` and the Ż terms
    of the Master Theorem use); ``homogeneous`` = k pulls a positive factor p out of the first
    argument, f(p·x, ...) = p^k f(x, ...) for p > 0 (k = 0 or 1; None: not homogeneous)."""
    cls: str
    value: Callable[..., Any]
    derivative: tuple[Callable[..., Any], ...]
    homogeneous: int | None = None


@dataclass(frozen=True)
class Kinks:
    """Where a builtin is not smooth (a kink or a jump of it or of its derivative): the zero sets
    of ``where(*args)`` (default: of the first argument), so that quadrature splits there; and its
    smooth pieces ``branches(s, *args)``, each valid on one side (piecewise-affine decompositions
    of a kink inside another kink's argument)."""
    branches: Callable[..., list]
    where: Callable[..., list] | None = None

    def at(self, *args) -> list:
        """The expressions whose zero sets are the kinks."""
        return list(self.where(*args)) if self.where is not None else [args[0]]


@dataclass(frozen=True)
class Builtin:
    """One builtin: every facet of it.

    * ``name``, ``arity``, ``defaults`` (values of the last ``len(defaults)`` arguments when left out);
    * ``numpy``: the finite-width function, applied coordinatewise to float64/float32 arrays
      (scipy imported inside it, not at the top);
    * ``array``: the array-API implementation, the name of a function of the namespace (``"tanh"``)
      or a builder ``array(xp, special) -> function`` (``special``: the backend's special
      functions by name); ``special`` names the one it needs beyond the standard (``erf``,
      ``expit``, ``ndtr``), without which the backend refuses the builtin;
    * ``head``: the sympy head, a sympy function's name (``"tanh"``) or a :class:`Head` of our own;
    * ``parity``: :data:`ODD`, :data:`EVEN` or 0 (in the first argument, the others fixed);
    * ``growth``: :data:`BOUNDED` (|f| ≤ 1), :data:`LINEAR` or :data:`OTHER`; a linear builtin has
      a ``slope(σ, *args)``: a bound on limsup |f| / |u| as |u| → ∞ given σ(a) = that bound for
      each argument a (inf if unknown);
    * ``kinks``: :class:`Kinks`, or None for a smooth builtin;
    * ``monotone``: the tail bound's rule, ``monotone(*c)`` for the constant values c of the
      arguments after the first: (Lipschitz constant, +1 non-decreasing / −1 non-increasing),
      or a string saying why not; None: outside the tail bound's rules;
    * ``doc``: its definition in one line (the head's docstring, the reference's).
    """
    name: str
    arity: int
    numpy: Callable
    array: str | Callable
    head: str | Head
    doc: str
    special: str | None = None
    parity: int = 0
    growth: str = OTHER
    slope: Callable[..., float] | None = None
    kinks: Kinks | None = None
    monotone: Callable[..., tuple[float, int] | str] | None = None
    defaults: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        assert self.growth in (BOUNDED, LINEAR, OTHER), self
        assert (self.growth == LINEAR) == (self.slope is not None), f"{self.name}: a slope iff linear growth"
        assert self.parity in (ODD, EVEN, 0) and len(self.defaults) < self.arity + (self.arity == 0)
