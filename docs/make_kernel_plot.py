"""Empirical NTK/NNGP kernels at finite width against the limit kernel (issue: dataset kernels).

For N = 20 inputs (fixed seed) and the ReLU MLP template, the relative Frobenius distance
‖K_n − K_∞‖_F / ‖K_∞‖_F of single networks (mean and spread over trials) against the width,
with the n^{-1/2} reference.  Writes docs/img/kernel_frobenius.png and prints the table.

    python docs/make_kernel_plot.py [--trials 8]
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import tensorprog as tp

TEMPLATE = "programs/kernels/relu_mlp.tp"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--widths", default="64,128,256,512,1024,2048")
    a = ap.parse_args()
    widths = [int(w) for w in a.widths.split(",")]
    X = np.random.default_rng(0).standard_normal((20, 10))
    lim = tp.kernel(TEMPLATE, X, L=3)
    rows = {name: [] for name in ("nngp", "ntk")}
    print(f"{'n':>6} " + " ".join(f"{name + ' dist':>22}" for name in rows))
    for n in widths:
        F = tp.kernel(TEMPLATE, X, L=3, n=n, trials=a.trials, seed=1)
        line = f"{n:>6} "
        for name in rows:
            ref = lim.outputs[name].mean
            d = np.array([np.linalg.norm(v - ref) / np.linalg.norm(ref) for v in F.outputs[name].values])
            rows[name].append((d.mean(), d.std(ddof=1) / np.sqrt(len(d))))
            line += f"{d.mean():>14.4f} ± {d.std(ddof=1) / np.sqrt(len(d)):.4f}"
        print(line)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for name, pts in rows.items():
        m, s = np.array(pts).T
        ax.errorbar(widths, m, yerr=s, marker="o", capsize=3, label=name)
        slope = np.polyfit(np.log(widths), np.log(m), 1)[0]
        print(f"{name}: fitted slope {slope:.3f} (n^-1/2: -0.5)")
    ref = rows["ntk"][0][0] * (np.array(widths) / widths[0]) ** -0.5
    ax.plot(widths, ref, "k--", label="n$^{-1/2}$")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("width n")
    ax.set_ylabel("relative Frobenius distance to the limit")
    ax.set_title(f"ReLU MLP (L=3), N=20 inputs, {a.trials} networks per width")
    ax.legend()
    out = Path("docs/img/kernel_frobenius.png")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120, bbox_inches="tight")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
