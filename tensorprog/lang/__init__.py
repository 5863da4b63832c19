"""The language front end: ``.tp`` text -> syntax tree -> IR.

The pipeline, one module per stage:

* :mod:`.parser`: text -> :mod:`.syntax` tree (Lark, grammar in ``grammar/tensorprog.lark``);
* :mod:`.lower`: statements -> IR (``lower``), unrolling loops and arrays; the statement
  lowering is the :class:`~.expressions.Scope` of the expression lowering;
* :mod:`.expressions`: expressions -> typed values (:mod:`.values`) and function trees,
  folding constants (:mod:`.consts`);
* :mod:`.builder`: the equation list one lowering emits into, shared by the stages;
* :mod:`.diff`: ``diff(e, x)``, the coordinatewise derivative, emitted as IR function trees
  (imported, with sympy, only by programs that use it);
* :mod:`.grad`: ``grad(f, x)`` = n·∂f/∂x, reverse mode over the equations (transposed MatMuls,
  the chain rule on scalars), emitted as ordinary equations (imported, with sympy, likewise).

Dependencies go one way: lower -> expressions -> (diff, grad, builder) -> values.
"""
