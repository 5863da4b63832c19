"""Executor speed: a batched ReLU MLP against the numpy floor for the same work.

Program: B inputs through L layers of width n, x_b <- W_l relu(x_b).  The floor
samples the same matrices (rng.standard_normal + scaling) and does one
n×n @ n×B GEMM per layer, plus the relu: what any implementation must do.
Both run in this process, interleaved, best of R repetitions; the ratio is
executor / floor (target ≤ 1.1).

    python bench/executor_mlp.py [--n 2048] [--batch 32] [--layers 4] [--reps 5]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tensorprog as tp

PROGRAM = """
param B = 32
param L = 4
vector x[1..B] ~ normal()
for l in 1..L {
    matrix W ~ normal(var=2)
    for b in 1..B { x[b] = W @ relu(x[b]) }
}
out k = mean(sum(b in 1..B: relu(x[b]) ** 2)) / B
"""


def floor(n: int, batch: int, layers: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, batch))
    for _ in range(layers):
        w = rng.standard_normal((n, n))
        w *= np.sqrt(2.0 / n)
        x = w @ np.maximum(x, 0)
    return float(np.mean(np.maximum(x, 0) ** 2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    program = tp.parse(PROGRAM, B=a.batch, L=a.layers)
    gemms = sum(1 for e in program.ir.eqns if type(e).__name__ == "MatMul")
    times = {"tensorprog": [], "numpy floor": []}
    for rep in range(a.reps):
        t0 = time.perf_counter()
        program.execute(n=a.n, trials=1, seed=rep)
        times["tensorprog"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        floor(a.n, a.batch, a.layers, rep)
        times["numpy floor"].append(time.perf_counter() - t0)
    best = {k: min(v) for k, v in times.items()}
    print(f"ReLU MLP n={a.n} B={a.batch} L={a.layers} ({gemms} MatMuls in the IR), best of {a.reps}:")
    for k, v in best.items():
        print(f"  {k:<12} {v * 1e3:8.1f} ms")
    print(f"  ratio        {best['tensorprog'] / best['numpy floor']:.3f}  (target <= 1.1)")


if __name__ == "__main__":
    main()
