"""Regenerate the 100-step μP loss curve of docs/gallery_mup_long.md.

    PYTHONPATH=. python docs/make_gallery_mup_long.py [--particles 16384] [--replicas 8] [--trials 8]
                                                       [--widths 256,1024,4096,16384] [--json out.json]

programs/mup_train_curve.tp (programs/mup_train.tp with the loss before steps 0–5, 10, 15, ..., 100
as outputs), T = 100:

* the limit by ``compile(method="particles")`` (widths N and N/4, R replicas each, conditional engine,
  Richardson-extrapolated), drawn as a band of ± its stated error;
* finite widths 256 to 16384 (``execute(..., conditional=True)``: exact in law at each width; the
  dense engine at 256, below twice the 201 products by W), ``--trials`` seeds, as points with ± 1
  standard error;
* a mark at T = 5, where the Master Theorem compile (QMC) stops (44 s at T = 5 with error 3e-3 on a quiet
  machine, each further step about 3× the time: README, Benchmarks).

Writes docs/img/mup_train_long.png (and the finite widths' points to docs/img/mup_train_long.json:
``--reuse-widths`` redraws with them, running only the limit) and prints the table the page quotes.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import matplotlib                                       # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt                         # noqa: E402
import numpy as np                                      # noqa: E402

import tensorprog as tp                                 # noqa: E402
from tensorprog.limit.particles import most_products    # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "programs" / "mup_train_curve.tp"
STORE = ROOT / "docs" / "img" / "mup_train_long.json"        # the finite widths' points, for --reuse-widths
STEPS = [0, 1, 2, 3, 4] + list(range(5, 101, 5))
QMC_STOP = 5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--particles", type=int, default=16384)
    ap.add_argument("--replicas", type=int, default=8)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--widths", default="256,1024,4096,16384")
    ap.add_argument("--json", default=None)
    ap.add_argument("--reuse-widths", action="store_true",
                    help="take the finite widths from docs/img/mup_train_long.json instead of running them")
    args = ap.parse_args()
    load0 = os.getloadavg()[0]
    t0 = time.time()
    program = tp.load(PROGRAM, T=100)
    lowered = time.time() - t0
    t0 = time.time()
    res = program.compile(method="particles", particles=args.particles, replicas=args.replicas, seed=0)
    lim = res.limit().outputs
    limit_s = time.time() - t0
    names = [f"loss{s}" for s in STEPS]
    value = np.array([lim[k].value for k in names])
    error = np.array([lim[k].error for k in names])
    print(f"limit by particles: {limit_s:.1f} s", flush=True)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    floor = 1e-36                                       # log axis: the band's lower edge kept positive
    ax.fill_between(STEPS, np.maximum(value - error, floor), value + error, color="0.75", label=f"limit ± error (particles, N = "
                    f"{args.particles}, {args.replicas} replicas)")
    ax.plot(STEPS, value, "k-", lw=1.2)
    widths = [int(w) for w in args.widths.split(",")]
    rows = {}
    saved = json.loads(STORE.read_text()) if args.reuse_widths else None
    for n, marker in zip(widths, "osD^v<>"):
        if saved is not None:
            means, ses = (np.array(a) for a in saved["widths"][str(n)])
            rows[n] = (means, ses, saved["seconds"][str(n)])
            ax.errorbar(STEPS, means, yerr=ses, fmt=marker, ms=3.5, capsize=2, label=f"n = {n} ({args.trials} seeds)")
            continue
        t0 = time.time()
        conditional = n >= 2 * most_products(program.ir)  # below, the dense engine (the same law)
        run = program.execute(n, trials=args.trials, seed=1000 + n, conditional=conditional, progress=False)
        means = np.array([run.outputs[k].mean for k in names])
        ses = np.array([run.outputs[k].sem for k in names])
        rows[n] = (means, ses, time.time() - t0)
        ax.errorbar(STEPS, means, yerr=ses, fmt=marker, ms=3.5, capsize=2, label=f"n = {n} ({args.trials} seeds)")
    ax.axvline(QMC_STOP, color="tab:red", ls=":", lw=1.5)
    ax.annotate("QMC compile\nstops (T ≈ 5)", xy=(QMC_STOP, value.max()), xytext=(QMC_STOP + 3, value.max()),
                color="tab:red", fontsize=9, va="top")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (f − y)²/2")
    ax.set_title("μP, two hidden tanh layers, 100 SGD steps: the limit and finite widths")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "img" / "mup_train_long.png", dpi=110)
    print(f"lowering {lowered:.1f} s, limit by particles {limit_s:.1f} s ({res.engine} engine), "
          f"load average {load0:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| step | limit (particles) | " + " | ".join(f"n = {n}" for n in widths) + " |")
    print("|---" * (len(widths) + 2) + "|")
    for i, s in enumerate(STEPS):
        cells = [f"{rows[n][0][i]:.4g} ± {rows[n][1][i]:.1e}" for n in widths]
        print(f"| {s} | {value[i]:.4g} ± {error[i]:.1e} | " + " | ".join(cells) + " |")
    print("| seconds | " + f"{limit_s:.0f} | " + " | ".join(f"{rows[n][2]:.0f}" for n in widths) + " |")
    if not args.reuse_widths:
        STORE.write_text(json.dumps({"steps": STEPS, "widths": {n: [r[0].tolist(), r[1].tolist()] for n, r in rows.items()},
                                     "seconds": {n: r[2] for n, r in rows.items()}}))
    if args.json:
        Path(args.json).write_text(json.dumps({"steps": STEPS, "limit": value.tolist(), "error": error.tolist()}))


if __name__ == "__main__":
    main()
