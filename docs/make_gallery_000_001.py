"""Regenerate the numbers and plots of docs/gallery_000_001.md (Tsuchida et al., seeds 000 and 001).

    PYTHONPATH=. python docs/make_gallery_000_001.py            # everything (~5 min on 2 cores)
    PYTHONPATH=. python docs/make_gallery_000_001.py --only 001 # one seed

Prints the gallery's tables (markdown) to stdout and writes docs/img/seed000_*.png and
docs/img/seed001_*.png.  Every limit is compiled by tensorprog from the programs in programs/;
the "recursion" columns are the paper's formulas evaluated here with numpy, independently.
Matplotlib's object-oriented API on the Agg canvas only (no pyplot state).
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

import tensorprog as tp
from tensorprog.tools.converge import converge
from tensorprog.tools.plot import plot_convergence

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
KERNEL = ROOT / "programs" / "tsuchida_lrelu_kernel.tp"
DEPTH = ROOT / "programs" / "tsuchida_lrelu_depth.tp"
EXCH = ROOT / "programs" / "tsuchida_exchangeable.tp"
DEPTHS = [1, 2, 4, 8, 16, 32, 64, 128]


# ----------------------------------------------------------------------------- formulas (numpy)

def arccos_j(z):
    t = np.arccos(np.clip(z, -1, 1))
    return np.sin(t) + (np.pi - t) * np.cos(t)


def T(z, a, last=None):
    """Corollary 8's map; ``last`` replaces z in the 2az term (the §6.1 misprint: cos t_0)."""
    return ((1 - a) ** 2 / np.pi * arccos_j(z) + 2 * a * (z if last is None else last)) / (1 + a * a)


def composed(rho, a, j, garbled=False):
    z = rho
    for _ in range(j):
        z = T(z, a, rho if garbled else None)
    return z


def figure(w=7.0, h=4.6):
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    return fig


def sem(o):
    return o.std / math.sqrt(len(o.values))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------- seed 001

def seed001_one_layer():
    print("\n### Seed 001, one layer: eq. (8) and the t scale nu/(nu-2)\n")
    lim = tp.load(KERNEL).compile().limit()
    print("`tpc compile programs/tsuchida_lrelu_kernel.tp` (a = 0.2, rho = 0.3, qx = 1, qy = 2, nu = 10):\n")
    print("| output | compiled | eq. (8) |")
    print("|---|---|---|")
    ew2 = 10 / 8
    ref = {"k": ew2 * math.sqrt(2) * (0.64 / (2 * math.pi) * arccos_j(0.3) + 0.2 * 0.3),
           "kxx": ew2 * 1.04 / 2, "kyy": ew2 * 2 * 1.04 / 2, "cos1": T(0.3, 0.2), "kurt": float("nan")}
    for name, v in lim.outputs.items():
        r = "3(nu-2)/(nu-4) = 4 for mvt rows" if name == "kurt" else f"{ref[name]:.12g}"
        print(f"| {name} | {v.value:.12g} | {r} |")

    print("\nFinite width, n = 1000, 16 trials, seed 3: the paper's unit-shape t rows "
          "(`-D nu=NU`, var = nu/(nu-2)), and iid rows (`--matrix-dist`, var 5/4 as for nu = 10):\n")
    print("| rows | kxx (mean ± se) | eq. (8): (nu/(nu-2))(1+a²)/2 | cos1 (mean ± se) | eq. (8) | kurt (median) | t value 3(nu-2)/(nu-4) |")
    print("|---|---|---|---|---|---|---|")
    for nu in (3, 5, 10):
        r = tp.load(KERNEL, nu=nu).execute(n=1000, trials=16, seed=3)
        kx, c1, ku = r.outputs["kxx"], r.outputs["cos1"], r.outputs["kurt"]
        tk = f"{3 * (nu - 2) / (nu - 4):.3g}" if nu > 4 else "∞"
        print(f"| mvt(df={nu}) | {kx.mean:.4f} ± {sem(kx):.4f} | {nu / (nu - 2) * 1.04 / 2:.4f} | "
              f"{c1.mean:.4f} ± {sem(c1):.4f} | {T(0.3, 0.2):.4f} | {np.median(ku.values):.3g} | {tk} |")
    for law in ("normal", "uniform", "laplace"):
        r = tp.load(KERNEL).execute(n=1000, trials=16, seed=3, matrix_dist=law)
        kx, c1, ku = r.outputs["kxx"], r.outputs["cos1"], r.outputs["kurt"]
        print(f"| iid {law} | {kx.mean:.4f} ± {sem(kx):.4f} | {1.25 * 1.04 / 2:.4f} | "
              f"{c1.mean:.4f} ± {sem(c1):.4f} | {T(0.3, 0.2):.4f} | {np.median(ku.values):.3g} | (3) |")

    # Figure 2 / Figure 4 (j = 1): the normalized kernel against the input angle
    log("seed001: one-layer kernel against theta0")
    fig = figure()
    ax = fig.add_subplot(1, 1, 1)
    grid = np.linspace(0, np.pi, 25)
    pts = np.linspace(0, np.pi, 9)
    for i, a in enumerate((0.0, 0.2)):
        comp = [tp.load(KERNEL, a=a, rho=float(np.cos(t))).compile().limit().outputs["cos1"].value for t in grid]
        ax.plot(grid, comp, color=f"C{i}", lw=1.8, label=f"compiled limit, a = {a}")
        for k, (law, nu, mk) in enumerate([(None, 3, "o"), (None, 5, "s"), ("laplace", 10, "^")]):
            means, errs = [], []
            for t in pts:
                r = tp.load(KERNEL, a=a, rho=float(np.cos(t)), nu=nu).execute(n=1000, trials=4, seed=11,
                                                                              matrix_dist=law)
                means.append(r.outputs["cos1"].mean)
                errs.append(sem(r.outputs["cos1"]))
            lab = f"n = 1000, {'mvt(df=%d)' % nu if law is None else 'iid ' + law}" if i == 0 else None
            ax.errorbar(pts + (k - 1) * 0.03, means, yerr=errs, fmt=mk, ms=4, mfc="none",
                        color=f"C{i}", capsize=2, label=lab)
    ax.set_xlabel("input angle θ0")
    ax.set_ylabel("normalized kernel cos θ1")
    ax.set_title("Seed 001, eq. (8): one (leaky) ReLU layer, rotation-invariant and iid rows")
    ax.legend(fontsize=8)
    fig.savefig(IMG / "seed001_kernel_theta.png", dpi=110)

    log("seed001: kurtosis convergence (mvt rows are S·g: a t preactivation)")
    res = converge(tp.load(KERNEL), [256, 512, 1024, 2048, 4096], trials=16, seed=0)
    plot_convergence(res, IMG / "seed001_converge_mvt_kurtosis.png", outputs=["cos1", "kurt"],
                     title="tsuchida_lrelu_kernel.tp, mvt(df=10) rows: cos1 and kurt (→ 4, the t value)")
    print("\n`converge(tsuchida_lrelu_kernel.tp, widths 256..4096, trials 16)` with mvt(df=10) rows:\n")
    print("| output | limit (compiled) | " + " | ".join(f"n={w}" for w in res.widths) + " | rate |")
    print("|---|---|" + "---|" * len(res.widths) + "---|")
    for name in ("cos1", "kurt"):
        o = res.outputs[name]
        print(f"| {name} | {o.limit:.6g} | " + " | ".join(f"{m:.4f}" for m in o.means)
              + f" | {o.rate:+.2f} |")


def seed001_depth():
    print("\n### Seed 001, depth: the composed normalized kernel (§6.1), eq. (10) init\n")
    rows = {}
    for a in (0.0, 0.2):
        for rho in (0.0, -math.sqrt(0.5)):
            for j in DEPTHS:
                log(f"seed001 depth: compile a={a} rho={rho:.3f} L={j}")
                t0 = time.perf_counter()
                lim = tp.load(DEPTH, L=j, a=a, rho=rho).compile().limit()
                rows[(a, rho, j)] = (lim.outputs["cos_theta"].value, lim.outputs["kxx"].value,
                                     time.perf_counter() - t0)
    fw = {}
    for a in (0.0, 0.2):
        for j in DEPTHS:
            log(f"seed001 depth: finite width a={a} L={j}")
            r = tp.load(DEPTH, L=j, a=a, rho=0.0).execute(n=1000, trials=4, seed=7)
            fw[(a, j)] = (r.outputs["cos_theta"].mean, sem(r.outputs["cos_theta"]))

    for rho, name in ((0.0, "π/2"), (-math.sqrt(0.5), "3π/4")):
        print(f"\nθ0 = {name}: `tpc compile programs/tsuchida_lrelu_depth.tp -D L=j -D a=A -D rho={rho:.6g}`"
              + (", finite width `tpc execute ... -n 1000 --trials 4 --seed 7` (mvt(df=5) rows)" if rho == 0 else "")
              + ":\n")
        head = "| j | a=0: compiled | recursion | abs diff |"
        head += " n=1000 mvt |" if rho == 0 else ""
        head += " a=0.2: compiled | recursion | abs diff |"
        head += " n=1000 mvt | printed θ0-recursion |" if rho == 0 else " printed θ0-recursion |"
        print(head)
        print("|" + "---|" * (head.count("|") - 1))
        for j in DEPTHS:
            line = f"| {j} |"
            for a in (0.0, 0.2):
                c, _, _ = rows[(a, rho, j)]
                ref = composed(rho, a, j)
                line += f" {c:.10f} | {ref:.10f} | {abs(c - ref):.1e} |"
                if rho == 0:
                    m, s = fw[(a, j)]
                    line += f" {m:.4f} ± {s:.4f} |"
            line += f" {composed(rho, 0.2, j, garbled=True):.4f} |"
            print(line)
    print("\nkxx (eq. (10) makes it 1): compiled "
          + ", ".join(f"{rows[(0.2, 0.0, j)][1]:.15g}" for j in (1, 128))
          + f" at j = 1, 128; compile time at j = 128: {rows[(0.2, 0.0, 128)][2]:.1f} s")
    a = 0.2
    print(f"\nPolynomial approach (our expansion): θ_j·j → 3π(1+a²)/(1−a)² = {3 * math.pi * 1.04 / 0.64:.4f} "
          f"for a = 0.2; recursion from θ0 = π/2: " + ", ".join(
              f"j={j}: {math.acos(composed(0.0, a, j)) * j:.4f}" for j in (128, 1024, 16384)))

    fig = figure()
    ax = fig.add_subplot(1, 1, 1)
    js = np.arange(1, 129)
    for i, a in enumerate((0.0, 0.2)):
        ax.plot(js, [composed(0.0, a, j) for j in js], color=f"C{i}", lw=1.2,
                label=f"a = {a}: recursion cos θj = T(cos θj−1) (numpy)")
        ax.plot(DEPTHS, [rows[(a, 0.0, j)][0] for j in DEPTHS], "o", color=f"C{i}", ms=6,
                label=f"a = {a}: compiled limit")
        ax.errorbar(DEPTHS, [fw[(a, j)][0] for j in DEPTHS], yerr=[fw[(a, j)][1] for j in DEPTHS],
                    fmt="s", mfc="none", color=f"C{i}", ms=7, capsize=2, label=f"a = {a}: n = 1000, mvt(df=5)")
        tail = js[js >= 16]
        ax.plot(tail, [1 - 0.5 * (3 * math.pi * (1 + a * a) / ((1 - a) ** 2 * j)) ** 2 for j in tail], ":",
                color=f"C{i}", lw=1, label=f"a = {a}: 1 − θj²/2, θj ≈ 3π(1+a²)/((1−a)² j)")
    ax.plot(js, [composed(0.0, 0.2, j, garbled=True) for j in js], "--", color="C3", lw=1.2,
            label="a = 0.2: the printed recursion (2a cos θ0)")
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("depth j")
    ax.set_ylabel("normalized kernel cos θj (θ0 = π/2)")
    ax.set_title("Seed 001 §6.1: composed kernel → 1 (Corollary 8), polynomially")
    ax.legend(fontsize=7, loc="lower right")
    fig.savefig(IMG / "seed001_depth.png", dpi=110)

    log("seed001: universality across laws (converge)")
    p = tp.load(DEPTH, L=4, a=0.2, rho=0.0)
    laws = [None, "normal", "uniform", "laplace", "rademacher"]
    runs = [converge(p, [128, 256, 512, 1024, 2048], trials=16, seed=1, matrix_dist=law) for law in laws]
    labels = ["mvt(df=5)" if law is None else law for law in laws]
    plot_convergence(runs, IMG / "seed001_converge_laws.png", labels=labels, outputs=["cos_theta"],
                     title="tsuchida_lrelu_depth.tp (L=4, a=0.2, θ0=π/2): five weight laws, one limit")
    print("\n`converge(tsuchida_lrelu_depth.tp -D L=4 -D a=0.2 -D rho=0, widths 128..2048, trials 16)`, "
          f"output cos_theta, limit {runs[0].outputs['cos_theta'].limit:.10f}:\n")
    print("| law | " + " | ".join(f"n={w}" for w in runs[0].widths) + " | rate (rms) |")
    print("|---|" + "---|" * (len(runs[0].widths) + 1))
    for lab, r in zip(labels, runs):
        o = r.outputs["cos_theta"]
        print(f"| {lab} | " + " | ".join(f"{m:.4f} ± {s:.4f}" for m, s in zip(o.means, o.sems))
              + f" | {o.rate:+.2f} ± {o.rate_error:.2f} |")


# ----------------------------------------------------------------------------- seed 000

def seed000():
    print("\n### Seed 000: exchangeable weights W = G + κ √c b 1ᵀ/n\n")
    cases = [("defaults (non-zero sums)", {}),
             ("center = 1 (zero sums, Proposition 6)", {"center": 1}),
             ("mux = 1, muy = -1, rho = 0.9", {"mux": 1, "muy": -1, "rho": 0.9})]
    names = ["cos_theta0", "k", "k_iid", "dev", "bound10x", "bound10y", "bound11", "bound"]
    print("| case | | " + " | ".join(names) + " |")
    print("|---|---|" + "---|" * len(names))
    for label, kw in cases:
        lim = tp.load(EXCH, **kw).compile().limit()
        r = tp.load(EXCH, **kw).execute(n=1024, trials=16, seed=3)
        print(f"| {label} | compiled | " + " | ".join(f"{lim.outputs[n].value:.6f}" for n in names) + " |")
        print("| | n = 1024 | " + " | ".join(f"{r.outputs[n].mean:.4f} ± {sem(r.outputs[n]):.4f}"
                                               for n in names) + " |")
    r = tp.load(EXCH, center=1).execute(n=1024, trials=16, seed=3)
    print(f"\ncenter = 1 at n = 1024: max over trials of |dev| = {np.max(np.abs(r.outputs['dev'].values)):.1e}, "
          f"of bound = {np.max(r.outputs['bound'].values):.1e}")

    # the bound's slack over random parameters, from the independent closed form (numpy only)
    rng = np.random.default_rng(0)
    worst, negative = 0.0, 0
    for _ in range(100_000):
        mux, muy = rng.normal(size=2) * 2
        rho, s2, c = rng.uniform(-1, 1), rng.uniform(0.1, 3), rng.exponential(2)
        M = np.array([[1 + mux ** 2, rho + mux * muy], [rho + mux * muy, 1 + muy ** 2]])
        m = np.array([mux, muy])
        nx, ny = math.sqrt(M[0, 0]), math.sqrt(M[1, 1])

        def J(S):
            d = math.sqrt(S[0, 0] * S[1, 1])
            return d / (2 * math.pi) * float(arccos_j(S[0, 1] / d))
        dev = (J(s2 * M + c * np.outer(m, m)) - J(s2 * M)) / (nx * ny)
        bound = math.sqrt(s2 * c) * (abs(mux) / nx + abs(muy) / ny) + c * abs(mux * muy) / (nx * ny)
        worst = max(worst, abs(dev) / bound)
        negative += dev < 0
    print(f"\nOver 1e5 random (mux, muy, rho, sigma2, c) (numpy closed form): max abs(dev)/bound = "
          f"{worst:.3f}; dev < 0 in {negative} draws")

    log("seed000: normalized kernel against theta0")
    fig = figure()
    ax = fig.add_subplot(1, 1, 1)
    mu = 0.5
    lo = math.acos((mu * mu - 1) / (mu * mu + 1))
    for i, (label, center) in enumerate((("zero-sum inputs (center = 1)", 1), (f"non-zero sums, mux = muy = {mu}", 0))):
        th = np.linspace(0, math.pi if center else lo, 25)
        rho = np.cos(th) if center else np.cos(th) * (1 + mu * mu) - mu * mu
        rho = np.clip(rho, -1, 1)
        comp = [tp.load(EXCH, mux=mu, muy=mu, rho=float(r_), center=center).compile().limit() for r_ in rho]
        ax.plot(th, [c.outputs["cos1"].value for c in comp], color=f"C{i}", lw=1.8,
                label=f"{label}: compiled, offset c = 1")
        if i == 1:
            ax.plot(th, [c.outputs["cos1_iid"].value for c in comp], "--", color=f"C{i}", lw=1.2,
                    label=f"{label}: compiled iid part (9), normalized")
        pts = th[::4]
        rp = rho[::4]
        means, errs = [], []
        for r_ in rp:
            r = tp.load(EXCH, mux=mu, muy=mu, rho=float(r_), center=center).execute(n=1024, trials=4, seed=2)
            means.append(r.outputs["cos1"].mean)
            errs.append(sem(r.outputs["cos1"]))
        ax.errorbar(pts, means, yerr=errs, fmt="o", mfc="none", color=f"C{i}", capsize=2,
                    label=f"{label}: n = 1024")
    ax.plot(np.linspace(0, math.pi, 50), arccos_j(np.cos(np.linspace(0, math.pi, 50))) / math.pi, ":",
            color="k", lw=1, label="normalized arc-cosine kernel (9)/(9 at θ=0)")
    ax.set_xlabel("input angle θ0")
    ax.set_ylabel("normalized kernel cos θ1")
    ax.set_title("Seed 000: exchangeable rows (iid + row offset), Proposition 6")
    ax.legend(fontsize=7)
    fig.savefig(IMG / "seed000_kernel_theta.png", dpi=110)

    log("seed000: deviation and bound against the offset variance")
    fig = figure()
    ax = fig.add_subplot(1, 1, 1)
    cs = np.geomspace(0.01, 10, 13)
    print("\n|k − (9)| against the bound as the offset variance c grows "
          "(`tpc compile programs/tsuchida_exchangeable.tp -D c=C`; n = 1024, 8 trials, seed 4):\n")
    print("| case | c | compiled k − (9) | n = 1024 | compiled bound | abs(dev) / bound |")
    print("|---|---|---|---|---|---|")
    for i, (label, kw) in enumerate((("mux=1, muy=0.5, rho=0.3", {}),
                                     ("mux=1, muy=-1, rho=0.9", {"mux": 1, "muy": -1, "rho": 0.9}))):
        comp = [tp.load(EXCH, c=float(c), **kw).compile().limit() for c in cs]
        dev = np.array([c.outputs["dev"].value for c in comp])
        b = np.array([c.outputs["bound"].value for c in comp])
        ax.plot(cs, np.abs(dev), color=f"C{i}", lw=1.8, label=f"{label}: |k − (9)|, compiled")
        ax.plot(cs, b, "--", color=f"C{i}", lw=1.4, label=f"{label}: (10)x + (10)y + (11), compiled")
        means, errs = [], []
        for c in (0.1, 1.0, 10.0):
            r = tp.load(EXCH, c=c, **kw).execute(n=1024, trials=8, seed=4)
            lim = tp.load(EXCH, c=c, **kw).compile().limit()
            o = r.outputs["dev"]
            means.append(abs(o.mean))
            errs.append(sem(o))
            print(f"| {label} | {c:g} | {lim.outputs['dev'].value:.5f} | {o.mean:.4f} ± {sem(o):.4f} | "
                  f"{lim.outputs['bound'].value:.4f} | {abs(lim.outputs['dev'].value) / lim.outputs['bound'].value:.3f} |")
        ax.errorbar([0.1, 1.0, 10.0], means, yerr=errs, fmt="o", mfc="none", color=f"C{i}", capsize=2,
                    label=f"{label}: |mean dev|, n = 1024")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("offset variance c  (E[W'11 W'12] = κ² c / n, products with L_x L_y stay O(1))")
    ax.set_ylabel("|k − (9)|  and its bound")
    ax.set_title("Seed 000: deviation from (9) (∝ c) under the bounds (10)–(11) (∝ √c)")
    ax.legend(fontsize=7, loc="upper left")
    fig.savefig(IMG / "seed000_dev_bound.png", dpi=110)

    log("seed000: converge")
    res = converge(tp.load(EXCH), [128, 256, 512, 1024, 2048], trials=16, seed=0)
    plot_convergence(res, IMG / "seed000_converge.png", outputs=["k", "k_iid", "dev", "bound"],
                     title="tsuchida_exchangeable.tp (non-zero sums): finite width → limit")
    print("\n`converge(tsuchida_exchangeable.tp, widths 128..2048, trials 16)`:\n")
    print("| output | limit | " + " | ".join(f"n={w}" for w in res.widths) + " | rate (rms) |")
    print("|---|---|" + "---|" * (len(res.widths) + 1))
    for name in ("k", "k_iid", "dev", "bound"):
        o = res.outputs[name]
        print(f"| {name} | {o.limit:.6f} | " + " | ".join(f"{m:.4f}" for m in o.means)
              + f" | {o.rate:+.2f} ± {o.rate_error:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=["000", "001"], help="one seed only")
    args = ap.parse_args()
    IMG.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    if args.only in (None, "001"):
        seed001_one_layer()
        seed001_depth()
    if args.only in (None, "000"):
        seed000()
    log(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
