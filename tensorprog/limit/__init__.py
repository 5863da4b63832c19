"""The limit compiler: the Master Theorem recurrence of a program and the limit of every output.

* :mod:`.compiler`: Z-expressions of every vector and c̊ of every scalar;
* :mod:`.ledger`: every expectation, cached, with its method and error;
* :mod:`.hypotheses` and :mod:`.finiteness`: where a program leaves a theorem's hypotheses;
* :mod:`.result`: :class:`Limit` and :class:`LimitValue`; :mod:`.report`: text, JSON, LaTeX;
* :mod:`.batch`: one recurrence over many covariances (dataset kernels);
* :mod:`.symbolic_params`: params kept as symbols in closed forms.
"""
