"""Regenerate the loss-curve figure of docs/gallery_mup.md (μP training by grad and outer).

    PYTHONPATH=. python docs/make_gallery_mup.py

Compiles programs/mup_train_batch.tp (T = 3 full-batch steps, P = 2 examples) once — its outputs are
the loss before each step and after the last — and runs it at widths 256, 1024 and 4096 (8 seeds
each).  Writes docs/img/mup_train_batch.png and prints the table the page quotes.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import matplotlib                                       # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt                         # noqa: E402
import numpy as np                                      # noqa: E402

import tensorprog as tp                                 # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "programs" / "mup_train_batch.tp"
OUTPUTS = ("loss0", "loss1", "loss2", "lossT")
T, WIDTHS, TRIALS = 3, (256, 1024, 4096), 8


def main() -> None:
    program = tp.load(PROGRAM, T=T)
    t0 = time.time()
    lim = program.compile().limit().outputs
    compile_s = time.time() - t0
    steps = np.arange(T + 1)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(steps, [lim[o].value for o in OUTPUTS], yerr=[lim[o].error for o in OUTPUTS], fmt="k-",
                lw=2, label="limit (compiled)")
    print(f"limit ({compile_s:.0f} s): " + ", ".join(f"{lim[o].value:.5f} ± {lim[o].error:.1e} ({lim[o].method})"
                                                      for o in OUTPUTS))
    rows = []
    for n, marker in zip(WIDTHS, "os^"):
        t0 = time.time()
        run = program.execute(n=n, trials=TRIALS, seed=0, progress=False)
        means = [run.outputs[o].mean for o in OUTPUTS]
        ses = [run.outputs[o].std / math.sqrt(TRIALS) for o in OUTPUTS]
        ax.errorbar(steps, means, yerr=ses, fmt=marker + "--", ms=4, capsize=2, label=f"n = {n} ({TRIALS} seeds)")
        rows.append((n, means, ses, time.time() - t0))
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (2 examples)")
    ax.set_title("μP, two hidden tanh layers: the loss curve and its limit")
    ax.set_xticks(steps)
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "img" / "mup_train_batch.png", dpi=110)
    print("| width | " + " | ".join(f"loss after {s} step{'s' if s != 1 else ''}" for s in steps) + " |")
    print("|---" * (T + 2) + "|")
    print("| limit | " + " | ".join(f"{lim[o].value:.5f} ± {lim[o].error:.1e}" for o in OUTPUTS) + " |")
    for n, means, ses, secs in rows:
        print(f"| {n} | " + " | ".join(f"{m:.5f} ± {s:.5f}" for m, s in zip(means, ses)) + f" |   ({secs:.0f} s)")


if __name__ == "__main__":
    main()
