"""Lowering and executing ``diff`` through a B-argument batchnorm Nonlin.

The program is ``programs/bn_gradient.tp`` (one backward batchnorm layer written with
``diff``): every ∂x_b/∂h_a depends on all B inputs through the batch mean and variance.
For each B it times ``tp.load`` (parse + lowering, where ``diff`` runs), ``execute(n)``
and, for small B, ``compile()`` (no ``limit()``: the recurrence only), and reports the
IR's size: equations, and the operations of all function trees counted as trees
(``tree``: what a recursive walk visits) and as shared graphs (``dag``: distinct nodes).

    python bench/diff_batchnorm.py [--B 4,8,12,16,32] [--n 256] [--act 1] [--compile-max 8]

Measured (2 shared cores, act = 1, n = 256, one trial), before and after ``diff`` shared its
sub-expressions (memoised differentiation, CSE into Nonlins; results bit for bit the same):

    B   load s before / after   exec s before / after   tree ops before / after
    4        0.48 / 0.13             0.01 / 0.01               4 955 / 780
    8        2.20 / 0.11             0.15 / 0.02              62 479 / 2 800
   12        8.87 / 0.24             0.28 / 0.03             292 387 / 6 068
   16       13.4  / 0.44             0.46 / 0.03             888 215 / 10 584
   32       186   / 1.16             6.85 / 0.07          13 381 927 / 41 128
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tensorprog as tp
from tensorprog import ir

PROGRAM = Path(__file__).resolve().parent.parent / "programs" / "bn_gradient.tp"


def sizes(program: ir.Program) -> tuple[int, int, int]:
    """(equations, tree operations, distinct operations) over all function trees."""
    tree, dag = 0, 0
    seen: set[int] = set()
    for e in program.eqns:
        fn = getattr(e, "fn", None)
        if fn is None:
            continue
        stack = [fn]
        while stack:
            f = stack.pop()
            tree += 1
            if id(f) not in seen:
                seen.add(id(f))
                dag += 1
            if isinstance(f, ir.Call):
                stack.extend(f.args)
            elif isinstance(f, ir.Bin):
                stack += [f.lhs, f.rhs]
            elif isinstance(f, ir.Neg):
                stack.append(f.operand)
    return len(program.eqns), tree, dag


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--B", default="4,8,12,16,32")
    ap.add_argument("--n", type=int, default=256)
    ap.add_argument("--act", type=int, default=1, help="0 linear, 1 relu, 2 tanh")
    ap.add_argument("--compile-max", type=int, default=8, help="compile() only for B up to this")
    args = ap.parse_args(argv)
    print(f"{'B':>3} {'load s':>8} {'exec s':>8} {'compile s':>9} {'eqns':>6} {'tree ops':>10} "
          f"{'dag ops':>8}  rate")
    for B in (int(b) for b in args.B.split(",")):
        t0 = time.perf_counter()
        p = tp.load(PROGRAM, B=B, D=1, act=args.act)
        t1 = time.perf_counter()
        r = p.execute(n=args.n, trials=1, seed=0)
        t2 = time.perf_counter()
        comp = "-"
        if B <= args.compile_max:
            p.compile()
            comp = f"{time.perf_counter() - t2:9.2f}"
        eqns, tree, dag = sizes(p.ir)
        print(f"{B:>3} {t1 - t0:8.2f} {t2 - t1:8.2f} {comp:>9} {eqns:>6} {tree:>10} {dag:>8}  "
              f"{r.outputs['rate'].mean:.6g}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
