"""Finite width: run the IR at width n (numpy, or another array backend) over independent, seeded trials.

The pipeline, one module per stage:

* :mod:`.exec_options`: :class:`ExecOptions` (``jobs``, ``blocked``, ``progress``,
  ``block_rows``, ``backend``, ``device``) and :func:`options`, their defaults for a block of code
  (``with tensorprog.finite.options(jobs=2): ...``);
* :mod:`.plan`: :func:`~.plan.run_plan`, everything decided before a trial runs: sizes,
  laws, the schedule (:mod:`.schedule`: which equations run together, when arrays die)
  and dense or blocked matrices (:mod:`.memory`);
* :mod:`.executor`: the interpreter of a plan, trial by trial, with a rule per equation
  kind (the hot loop), on two strategies chosen once: the backend's array operations
  (:mod:`.ops`) and the trial's layout (:mod:`.layout`: one input, or P side by side);
  :mod:`.evaluate`: function trees with numpy, and the cause of a non-finite value;
* :mod:`.backend`: the array libraries (numpy, torch, jax, cupy; ``backend`` and ``device``
  options): their array-API namespaces, random streams and builtins;
* :mod:`.workers` and :mod:`.parallel`: trials in worker processes; :mod:`.progress`: bars;
* :mod:`.run`: :func:`~.run.execute` and :func:`~.run.map_trials`, the entry points.
"""
from .exec_options import UNSET, ExecOptions, options

__all__ = ["ExecOptions", "UNSET", "options"]
