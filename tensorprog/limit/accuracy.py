"""How exact a limit value is: the rank of each method, and the rounding charged to a value.

Neither numpy nor sympy is imported here, so the command line's start (which imports
:mod:`.particles`) stays light."""
from __future__ import annotations

#: methods from most to least exact: a result's method is the largest rank among its estimates
METHOD_RANK = {"exact": 0, "series": 0.5, "quadrature": 1, "qmc": 2, "particles": 3}

#: float64 rounding charged to a limit value once it is evaluated, relative to |value| (the
#: compile adds 1 to |value|: O(1) terms may have cancelled in it).  Not ``ledger.ROUNDING``
#: (4 eps ≈ 8.9e-16, charged to every expectation): this one is ≈ 1.8 eps, on the value only.
VALUE_ROUNDING = 4e-16
