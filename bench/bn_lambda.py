"""Batchnorm's gradient explosion rate λ_G(B) compiled from ``programs/bn_gradient.tp`` (issue 26).

Two measurements, each in this process with CPU seconds (time.process_time) beside wall seconds:

1. ``-D B=5 -D D=4`` (5 weight matrices, 4 backward layers): value, stated error and time, against
   the closed form λ_G(5) = 2.2737066482;
2. λ_G(B) for one backward layer (D = 1, sym = 1) over B, against the closed form

       λ_G(B) = (B − 2 + J1(ρ) + J1′(ρ)) / ((B − 3)(1 − J1(ρ))),   ρ = −1/(B − 1),

   J1(t) = (√(1 − t²) + (π − arccos t)·t)/π (the arc-cosine kernel of ReLU, normalised to J1(1) = 1)
   and J1′(t) = J0(t) = (π − arccos t)/π (its derivative, used in closed form; checked against a
   central difference below).

    python bench/bn_lambda.py [--depth-only] [--Bs 4,5,6,7,8,9,10,12,16,24,32]

Results are in bench/README.md (section "Batch-coupled backward passes").
"""
from __future__ import annotations

import argparse
import time
import warnings
from math import acos, pi, sqrt
from pathlib import Path

import tensorprog as tp

PROGRAM = str(Path(__file__).resolve().parent.parent / "programs" / "bn_gradient.tp")


def J1(t: float) -> float:
    return (sqrt(1 - t * t) + (pi - acos(t)) * t) / pi


def J1_prime(t: float, h: float = 1e-6) -> float:
    """J1′ by a central difference (the closed form J0 is checked against it)."""
    return (J1(t + h) - J1(t - h)) / (2 * h)


def J0(t: float) -> float:
    """J1′ in closed form: d/dt[√(1 − t²) + (π − arccos t)t]/π = (π − arccos t)/π."""
    return (pi - acos(t)) / pi


def lambda_closed(B: int) -> float:
    rho = -1 / (B - 1)
    return (B - 2 + J1(rho) + J0(rho)) / ((B - 3) * (1 - J1(rho)))


def timed(**params) -> tuple[object, float, float]:
    t0, w0 = time.process_time(), time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = tp.load(PROGRAM, **params).compile().limit().outputs["rate"]
    return out, time.process_time() - t0, time.perf_counter() - w0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--Bs", default="4,5,6,7,8,9,10,12,16,24,32")
    ap.add_argument("--depth-only", action="store_true")
    args = ap.parse_args()
    for t in (-0.9, -1 / 3, 0.2):
        assert abs(J1_prime(t) - J0(t)) < 1e-8        # the derivation of J1′, checked numerically
    out, cpu, wall = timed(B=5, D=4)
    ref = lambda_closed(5)
    print(f"B=5 D=4: {out.value:.10f} ± {out.error:.2g} ({out.method}); closed form {ref:.10f}; "
          f"|diff| = {abs(out.value - ref):.2g}; {cpu:.1f} s CPU, {wall:.1f} s wall")
    if args.depth_only:
        return
    print("| B | closed form | compiled (D = 1, sym = 1) | |diff| | method | CPU s | wall s |")
    print("|---|---|---|---|---|---|---|")
    for B in (int(b) for b in args.Bs.split(",")):
        out, cpu, wall = timed(B=B, D=1, sym=1)
        ref = lambda_closed(B)
        print(f"| {B} | {ref:.8f} | {out.value:.8f} ± {out.error:.1g} | {abs(out.value - ref):.1g} | "
              f"{out.method} | {cpu:.1f} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
