"""The language front end: ``.tp`` text -> syntax tree -> IR.

* :mod:`.parser`: text -> :mod:`.syntax` tree (Lark, grammar in ``grammar/tensorprog.lark``);
* :mod:`.lower`: statements -> IR, unrolling loops and arrays, folding constants (:mod:`.consts`);
* :mod:`.expressions`: expressions -> typed values and function trees;
* :mod:`.diff`: ``diff(e, x)``, the coordinatewise derivative, emitted as IR function trees.
"""
