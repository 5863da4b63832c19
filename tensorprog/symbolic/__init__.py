"""The symbolic layer shared by ``diff``, the compiler and the expectation engine (sympy).

* :mod:`.heads`: each builtin's sympy head (the infinite-width side of :mod:`tensorprog.builtins`);
* :mod:`.functions`: IR function trees <-> sympy expressions;
* :mod:`.evaluate`: sympy expressions evaluated with numpy by walking the tree (never ``lambdify``).
"""
