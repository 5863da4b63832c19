"""Regenerate docs/img/dmft_loss.png and the table of docs/gallery_dmft.md (the DMFT paper's own setting).

    PYTHONPATH=. python docs/make_gallery_dmft.py [--quick]

Bordelon & Pehlevan's deep_nonlinear_DMFT.ipynb trains a depth-3 tanh MLP (phi = tanh(0.8 h)/0.8) on
P = 10 points for T = 100 full-batch steps in the mean-field parameterisation (gamma0 = 1, eta = 0.1,
centred output).  This script puts side by side:

* finite widths n = 256 ... 32768 of the notebook's network (docs/data/dmft_widths_h200.npz, written by
  bench/dmft_network.py --jax on an NVIDIA H200: 64 seeds up to n = 2048 and at 8192, 32 at 4096 and
  16384, 40 at 32768);
* the width -> infinity limit of the whole curve: the particle method's estimator
  (:func:`tensorprog.limit.particles.extrapolate`: Richardson from N = 32768 and N/4 = 8192, error =
  99% Student term + the size of the 1/n correction) applied to those runs;
* programs/dmft_tanh_depth3.tp itself, the .tp program of the same training: ``compile --method
  particles`` and the dense executor at n = 256, at T = T_PROG steps (the program's executor pays per
  equation, about 2·10^6 Moments at T = 100: its first steps are what a CPU does in minutes), and at
  T = 5 at widths 256 ... 2048 (dense) and 16384 (conditional engine) beside the network at those widths;
* the notebook's own curves (docs/data/dmft_notebook_curves.json, digitised from its stored figures by
  tools/digitise_dmft_notebook.py): its DMFT solution and its width-2000 network (seed 0), and the replay
  of that very network (the notebook's own random draw, float32: bench/dmft_network.py --notebook-draw).

Prints the table the page quotes and the times.  ``--quick`` skips the program runs and the replay.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import matplotlib                                       # noqa: E402
matplotlib.use("Agg")
import matplotlib.pyplot as plt                         # noqa: E402
import numpy as np                                      # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import tensorprog as tp                                 # noqa: E402
from tensorprog.limit.particles import extrapolate      # noqa: E402

PROGRAM = ROOT / "programs" / "dmft_tanh_depth3.tp"
WIDTHS = ROOT / "docs" / "data" / "dmft_widths_h200.npz"
NOTEBOOK = ROOT / "docs" / "data" / "dmft_notebook_curves.json"
T_PROG, PROG_WIDTH, PROG_TRIALS = 10, 256, 8
PARTICLES, REPLICAS = 4096, 8
TABLE_STEPS = (1, 5, 10, 20, 30, 40, 50, 60, 80, 99, 100)
SHOWN = (256, 1024, 4096, 32768)
WIDTH_RUNS = ((256, 16, False), (512, 16, False), (1024, 16, False), (2048, 16, False), (16384, 8, True))


def bench_module():
    """bench/dmft_network.py (the notebook's network, dense) as a module."""
    spec = importlib.util.spec_from_file_location("dmft_network", ROOT / "bench" / "dmft_network.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dense_widths() -> dict[int, np.ndarray]:
    """width -> losses (seeds, 101) of the dense runs."""
    data = np.load(WIDTHS)
    return {int(n): data[f"n{int(n)}"] for n in data["widths"]}


def stats(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over seeds, per step."""
    return losses.mean(0), losses.std(0, ddof=1) / math.sqrt(len(losses))


def dense_limit(runs: dict[int, np.ndarray], large: int = 32768, ratio: int = 4) -> tuple[np.ndarray, np.ndarray]:
    """The particle estimator on the dense runs at N = large and N / ratio: value and error per step."""
    (m_n, s_n), (m_s, s_s) = stats(runs[large]), stats(runs[large // ratio])
    got = [extrapolate((m_n[t], s_n[t], len(runs[large])), (m_s[t], s_s[t], len(runs[large // ratio])), ratio)
           for t in range(len(m_n))]
    return np.array([g.value for g in got]), np.array([g.error for g in got])


def fit_limit(runs: dict[int, np.ndarray], t: int, smallest: int = 1024) -> tuple[float, float, float, int]:
    """Cross-check of the limit at step t: the weighted least-squares fit mean_n = L + a/n over every width
    >= smallest (weights 1/SE²): L, its standard error, chi² and the degrees of freedom."""
    widths = sorted(n for n in runs if n >= smallest)
    m = np.array([runs[n][:, t].mean() for n in widths])
    s = np.array([runs[n][:, t].std(ddof=1) / math.sqrt(len(runs[n])) for n in widths])
    design = np.stack([np.ones(len(widths)), 1.0 / np.array(widths)], axis=1)
    weights = 1.0 / s ** 2
    cov = np.linalg.inv(design.T @ (design * weights[:, None]))
    coef = cov @ (design.T @ (weights * m))
    chi2 = float((((design @ coef) - m) / s) @ (((design @ coef) - m) / s))
    return float(coef[0]), float(math.sqrt(cov[0, 0])), chi2, len(widths) - 2


def program_steps(program: tp.Program) -> dict[str, int]:
    """Output name -> step (loss<t> is the loss after min(t, T) steps)."""
    return {name: min(int(name[4:]), T_PROG) for name in program.outputs}


def run_program() -> dict:
    """The .tp program at T = T_PROG: its particle limit and the dense executor at PROG_WIDTH, with times."""
    t0 = time.time()
    program = tp.load(PROGRAM, T=T_PROG)
    lower_s = time.time() - t0
    steps = program_steps(program)
    t0 = time.time()
    lim = program.compile(method="particles", particles=PARTICLES, replicas=REPLICAS).limit().outputs
    particles_s = time.time() - t0
    t0 = time.time()
    run = program.execute(n=PROG_WIDTH, trials=PROG_TRIALS, seed=0, progress=False)
    execute_s = time.time() - t0
    out = {"lower_s": lower_s, "particles_s": particles_s, "execute_s": execute_s, "limit": {}, "finite": {}}
    for name, t in steps.items():
        out["limit"][t] = (lim[name].value, lim[name].error)
        o = run.outputs[name]
        out["finite"][t] = (float(o.mean), float(o.std) / math.sqrt(PROG_TRIALS))
    return out


def program_widths(runs: dict[int, np.ndarray]) -> None:
    """The .tp program at T = 5 at several widths (dense executor; the conditional one at the widest) beside
    the dense network at the same width: the loss after 1, 3 and 5 steps, mean ± SE, and the seconds."""
    program = tp.load(PROGRAM, T=5)
    print("| n | engine | seeds | time | .tp loss1 | network loss1 | .tp loss3 | network loss3 | .tp loss5 | network loss5 |")
    print("|---" * 10 + "|")
    for n, trials, conditional in WIDTH_RUNS:
        t0 = time.time()
        extra = {"conditional": True} if conditional else {}
        out = program.execute(n=n, trials=trials, seed=1, progress=False, **extra).outputs
        secs = time.time() - t0
        cells = []
        for k in (1, 3, 5):
            o = out[f"loss{k}"]
            m, s = stats(runs[n])
            cells += [f"{o.mean:.5f} ± {o.std / math.sqrt(trials):.5f}", f"{m[k]:.5f} ± {s[k]:.5f}"]
        engine = "conditional" if conditional else "dense"
        print(f"| {n} | {engine} | {trials} | {secs:.0f} s | " + " | ".join(cells) + " |", flush=True)


def notebook_replay() -> tuple[np.ndarray, float]:
    """The notebook's width-2000 network with its own draw (PRNGKey(0), float32), and the seconds it took."""
    t0 = time.time()
    losses = bench_module().train_jax(np.load(ROOT / "programs" / "dmft_X.npy"), 2000, 100, 0, 1,
                                      notebook_draw=True)[0]
    return losses, time.time() - t0


def plot(runs, lim, err, nb, replay, prog) -> None:
    t = np.arange(101)
    fig, (ax, dx) = plt.subplots(1, 2, figsize=(12, 4.6))
    ax.fill_between(t, lim - err, lim + err, color="k", alpha=0.25, lw=0)
    ax.plot(t, lim, "k-", lw=1.5, label="limit n → ∞ (particle estimator, dense N = 32768, 8192)")
    for n, marker in zip(SHOWN, "os^v"):
        m, s = stats(runs[n])
        sel = t[::5]
        ax.errorbar(sel + 0.6 * SHOWN.index(n) - 0.9, m[sel], yerr=s[sel], fmt=marker, ms=3.5, capsize=2,
                    label=f"n = {n} ({len(runs[n])} seeds)")
    tn = np.array(nb["t"])
    ax.plot(tn, nb["dmft"], "r--", lw=1.3, label="notebook: DMFT solver (digitised)")
    ax.plot(tn, nb["network_N2000_seed0"], ":", color="C1", lw=1.8, label="notebook: network N = 2000, seed 0 (digitised)")
    if prog is not None:
        ts = sorted(prog["limit"])
        ax.errorbar(ts, [prog["limit"][k][0] for k in ts], yerr=[prog["limit"][k][1] for k in ts], fmt="D",
                    color="C4", ms=4, capsize=2, label=f".tp program: compile --method particles (T = {T_PROG})")
    ax.set_xlabel("step t")
    ax.set_ylabel(r"loss $\frac{1}{P}\sum_\mu (f_\mu - f_\mu^0 - y_\mu)^2$")
    ax.set_title("depth-3 tanh MLP, P = 10, γ₀ = 1, η = 0.1 (the DMFT notebook's setting)")
    ax.legend(fontsize=7.5)

    dx.fill_between(t, -err, err, color="k", alpha=0.25, lw=0, label="limit's error")
    for n, marker in zip(SHOWN, "os^v"):
        m, s = stats(runs[n])
        sel = t[::2]
        dx.errorbar(sel, m[sel] - lim[sel], yerr=s[sel], fmt=marker + "-", ms=2.5, lw=0.6, capsize=1,
                    label=f"n = {n}")
    dx.plot(tn, np.array(nb["dmft"]) - lim[:100], "r--", lw=1.3, label="notebook: DMFT solver")
    if replay is not None:
        dx.plot(tn, replay[:100] - lim[:100], ":", color="C1", lw=1.8,
                label="notebook's network N = 2000 (its own draw, replayed)")
    if prog is not None:
        ts = np.array(sorted(prog["limit"]))
        dx.errorbar(ts, [prog["limit"][k][0] - lim[k] for k in ts], yerr=[prog["limit"][k][1] for k in ts], fmt="D",
                    color="C4", ms=4, capsize=2, label=f".tp program, particles (T = {T_PROG})")
        dx.errorbar(ts + 0.4, [prog["finite"][k][0] - lim[k] for k in ts], yerr=[prog["finite"][k][1] for k in ts],
                    fmt="o", mfc="none", color="C0", ms=5, capsize=2,
                    label=f".tp program, n = {PROG_WIDTH} ({PROG_TRIALS} seeds)")
    dx.axhline(0, color="k", lw=0.6)
    dx.set_xlabel("step t")
    dx.set_ylabel("loss − limit")
    dx.set_title("difference from the limit (finite widths: mean ± SE)")
    dx.legend(fontsize=7.5)
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "img" / "dmft_loss.png", dpi=110)


def table(runs, lim, err, nb, replay, prog) -> None:
    cols = ["limit (dense, extrapolated)"] + [f"n = {n}" for n in SHOWN] + ["notebook DMFT", "notebook N = 2000",
                                                                         "its replay"]
    if prog is not None:
        cols += [f".tp particles (T = {T_PROG})", f".tp n = {PROG_WIDTH}"]
    print("| t | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for t in TABLE_STEPS:
        row = [f"{lim[t]:.5f} ± {err[t]:.5f}"]
        for n in SHOWN:
            m, s = stats(runs[n])
            row.append(f"{m[t]:.5f} ± {s[t]:.5f}")
        row += [f"{nb['dmft'][t]:.3f}" if t < 100 else "—",
                f"{nb['network_N2000_seed0'][t]:.3f}" if t < 100 else "—",
                f"{replay[t]:.5f}" if replay is not None else "—"]
        if prog is not None:
            row += [f"{prog['limit'][t][0]:.5f} ± {prog['limit'][t][1]:.5f}" if t in prog["limit"] and t <= T_PROG
                    else "—",
                    f"{prog['finite'][t][0]:.5f} ± {prog['finite'][t][1]:.5f}" if t in prog["finite"] and t <= T_PROG
                    else "—"]
        print(f"| {t} | " + " | ".join(row) + " |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the .tp program's runs and the notebook replay")
    args = parser.parse_args(argv)
    runs = dense_widths()
    lim, err = dense_limit(runs)
    nb = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    replay = prog = None
    if not args.quick:
        replay, replay_s = notebook_replay()
        print(f"notebook replay (N = 2000, float32, CPU): {replay_s:.0f} s")
        prog = run_program()
        print(f".tp program at T = {T_PROG}: lowered in {prog['lower_s']:.0f} s; compile --method particles "
              f"(N = {PARTICLES}, {REPLICAS} replicas) {prog['particles_s']:.0f} s; execute n = {PROG_WIDTH}, "
              f"{PROG_TRIALS} trials: {prog['execute_s']:.0f} s")
    plot(runs, lim, err, nb, replay, prog)
    table(runs, lim, err, nb, replay, prog)
    if not args.quick:
        program_widths(runs)
    print("cross-check, fit L + a/n over widths 1024-32768: " + "; ".join(
        "t = {}: {:.5f} ± {:.5f} (chi² {:.1f}/{})".format(t, *fit_limit(runs, t)) for t in (10, 30, 50, 99)))
    worst = max(range(1, 100), key=lambda t: abs(nb["dmft"][t] - lim[t]))
    print(f"largest |notebook DMFT − limit|: {abs(nb['dmft'][worst] - lim[worst]):.4f} at t = {worst}; "
          f"limit's largest error {err.max():.5f}")


if __name__ == "__main__":
    main()
