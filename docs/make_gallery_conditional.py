"""Regenerate the plot and the table of docs/gallery_conditional.md (conditional mode to n = 2^20).

    PYTHONPATH=. python docs/make_gallery_conditional.py [--trials 16]

Runs ``tpc converge programs/relu_nngp.tp --widths 2^10,...,2^20 --conditional`` from Python
(``tensorprog.finite.options(conditional=True)``): every product is drawn from its law given the
earlier ones, so a width of 10^6 costs seconds and megabytes.  Writes
docs/img/conditional_converge.png (rms and |mean − limit| against n, with the n^-1/2 line) and
prints the table and the fitted rates the page quotes.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import tensorprog as tp
from tensorprog.finite import options
from tensorprog.tools.converge import converge, render_text
from tensorprog.tools.plot import plot_convergence

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "programs" / "relu_nngp.tp"
OUT = ROOT / "docs" / "img" / "conditional_converge.png"
WIDTHS = [2 ** k for k in range(10, 21)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    with options(conditional=True, progress=False):
        result = converge(tp.load(str(PROGRAM)), WIDTHS, trials=args.trials, seed=args.seed)
    total = time.perf_counter() - start
    plot_convergence(result, OUT, title="relu_nngp.tp, conditional mode, n = 2^10 … 2^20")
    print(render_text(result))
    print("\nseconds per width:", " ".join(f"{w}:{s:.1f}" for w, s in zip(result.widths, result.seconds)))
    print(f"total {total:.0f} s; wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
