"""Finite width: run the IR with numpy at width n over independent, seeded trials.

* :mod:`.run`: :func:`execute` and :class:`ExecResult`, the entry point;
* :mod:`.executor`: one program at one width, trial by trial (the hot loop);
* :mod:`.evaluate`: function trees evaluated with numpy, and the cause of a non-finite value;
* :mod:`.schedule`: which equations run together, and when arrays die;
* :mod:`.memory`: dense or blocked matrices, planned before anything is allocated;
* :mod:`.workers` and :mod:`.parallel`: trials in worker processes;
* :mod:`.options`: the execution defaults; :mod:`.progress`: progress on stderr.
"""
