"""Compile time of valid variants of ``programs/bn_gradient.tp`` (issue 26: every valid mutation of the
gallery programs should compile in under 10 s): each parameter changed away from the gallery's values.

    python bench/bn_mutations.py

Prints, per variant, the rate, its stated error, the method and the CPU seconds of load + compile + limit
(time.process_time: the machine is shared).  Results are in bench/README.md.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import tensorprog as tp

PROGRAM = str(Path(__file__).resolve().parent.parent / "programs" / "bn_gradient.tp")
VARIANTS = [dict(B=4), dict(B=6, D=2), dict(B=8, D=2), dict(B=5, c0=0.3), dict(B=5, eps=0.001), dict(B=5, D=4, eps=0.001),
            dict(B=4, act=0, D=2), dict(B=5, act=2), dict(B=6, act=2, sym=1), dict(B=7, D=3, sym=1)]


def main() -> None:
    print("| variant | rate | method | CPU s |")
    print("|---|---|---|---|")
    for params in VARIANTS:
        t = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            o = tp.load(PROGRAM, **params).compile().limit().outputs["rate"]
        name = " ".join(f"{k}={v}" for k, v in params.items())
        print(f"| {name} | {o.value:.6f} ± {o.error:.1g} | {o.method} | {time.process_time() - t:.1f} |", flush=True)


if __name__ == "__main__":
    main()
