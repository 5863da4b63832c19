"""The limit compiler: the Master Theorem recurrence of a program and the limit of every output.

The pipeline: :func:`.compiler.compile_program` runs a :class:`.compiler.Compiler` (one rule per
equation kind) with its collaborators and returns an immutable :class:`.compiler.Compiled`,
whose ``limit()`` is a :class:`.result.Limit`.

* :mod:`.compiler`: Z-expressions of every vector and c̊ of every scalar;
* :mod:`.interpret`: the evaluation strategies (what the compile's numbers are: floats, exact
  closed forms, params as symbols, arrays over a batch), one :class:`~.interpret.Interpretation`
  per compile;
* :mod:`.ledger`: the law of the base variables and every expectation, cached, with its method
  and error;
* :mod:`.hypotheses`: where a program leaves a theorem's hypotheses (warnings);
  :mod:`.finiteness`: where a limit is not a finite real float (errors);
* :mod:`.result`: :class:`~.result.Limit` and :class:`~.result.LimitValue`; :mod:`.report`:
  text, JSON, LaTeX;
* :mod:`.batch`: one recurrence over many covariances (dataset kernels);
* :mod:`.symbolic_params`: params kept as symbols in closed forms.
"""
