"""The numpy evaluator of sympy expressions (tensorprog.symbolic.evaluate) on 10⁶ points.

A compiled tape of tanh(x)·relu(y) + exp(−x²)·step(x − y) applied to two vectors of 10⁶ normal
draws: best of --repeats, in seconds (was a timed unit test, tests/test_numeric.py, with a
1 s budget; the value is also checked against numpy written by hand).

    python bench/evaluate_speed.py [--points 1000000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import sympy as sp

from tensorprog.symbolic.evaluate import compile_exprs
from tensorprog.symbolic.heads import Relu, Step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=10 ** 6)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    x, y = sp.symbols("x y", real=True)
    expr = sp.tanh(x) * Relu(y) + sp.exp(-x ** 2) * Step(x - y)
    rng = np.random.default_rng(1)
    xs, ys = rng.normal(size=args.points), rng.normal(size=args.points)
    tape = compile_exprs([expr], [x, y])
    best = float("inf")
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        (out,) = tape(xs, ys)
        best = min(best, time.perf_counter() - t0)
    want = np.tanh(xs) * np.maximum(ys, 0) + np.exp(-xs ** 2) * (xs > ys)
    assert np.allclose(out, want, rtol=1e-14, atol=1e-14)
    print(f"{args.points} points: {best:.3f} s (best of {args.repeats}), {best / args.points * 1e9:.1f} ns per point")


if __name__ == "__main__":
    main()
