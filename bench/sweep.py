"""Sweeps (issue 24): the time of a batched limit sweep against pointwise compiles.

    PYTHONPATH=. python bench/sweep.py [--sw 100] [--sb 60] [--depth 20] [--bias 50] [--check 3]

1. programs/tanh_phase.tp (tanh MLP with biases, outputs q, c, χ₁) at depth --depth over a
   --sw × --sb grid of σ_w² ∈ [1, 4], σ_b² ∈ [0.01, 0.3]: one batched compile (``Program.sweep``);
2. programs/kernels/relu_mlp.tp (the ReLU NNGP/NTK template) over --bias values of b1 ∈ [0, 1];
3. a pointwise ``compile`` of --check random points of each grid: the time per point and the
   largest |batched − pointwise|, which must be below 1e-10 (quadrature and closed forms).

CPU seconds (``time.process_time``, this process) beside wall seconds: the machine is shared.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorprog as tp


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def check(path: str, result, count: int, fixed: dict, rng) -> tuple[float, float]:
    """(largest |batched − pointwise| relative to max(1, |value|), CPU seconds per pointwise compile)."""
    worst, cpu = 0.0, 0.0
    for _ in range(count):
        idx = tuple(int(rng.integers(s)) for s in result.shape)
        params = {k: float(v[i]) for (k, v), i in zip(result.params.items(), idx)}
        ref, c, _ = timed(lambda: tp.load(path, **fixed, **params).limit().outputs)
        cpu += c
        for name, lv in ref.items():
            worst = max(worst, abs(result.values[name][idx] - lv.value) / max(1.0, abs(lv.value)))
    return worst, cpu / max(count, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sw", type=int, default=100)
    ap.add_argument("--sb", type=int, default=60)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--bias", type=int, default=50)
    ap.add_argument("--check", type=int, default=3)
    ap.add_argument("--tol", type=float, default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    path = "programs/tanh_phase.tp"
    grid = {"sw": np.linspace(1, 4, args.sw), "sb": np.linspace(0.01, 0.3, args.sb)}
    prog = tp.load(path, L=args.depth)
    res, cpu, wall = timed(lambda: prog.sweep(grid, tol=args.tol))
    worst, per_point = check(path, res, args.check, {"L": args.depth}, rng)
    points = args.sw * args.sb
    print(f"tanh_phase depth {args.depth}, {args.sw} x {args.sb} = {points} points: {cpu:.1f} s CPU "
          f"({wall:.1f} s wall), {res.structures} structure(s); pointwise {per_point:.2f} s CPU a point "
          f"(x {points} = {per_point * points:.0f} s); max |batched - pointwise| = {worst:.1e}")

    path = "programs/kernels/relu_mlp.tp"
    prog = tp.load(path)
    res, cpu, wall = timed(lambda: prog.sweep({"b1": np.linspace(0, 1, args.bias)}, tol=args.tol))
    worst, per_point = check(path, res, args.check, {}, rng)
    print(f"relu_mlp NTK template, {args.bias} bias values: {cpu:.2f} s CPU ({wall:.1f} s wall); pointwise "
          f"{per_point:.2f} s CPU a point (x {args.bias} = {per_point * args.bias:.0f} s); "
          f"max |batched - pointwise| = {worst:.1e}")


if __name__ == "__main__":
    main()
