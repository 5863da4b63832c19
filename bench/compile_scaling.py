"""Compile time of the limit compiler against depth (issue 11, "compiler scaling").

One run, in process: for every family and depth (ascending), ``tp.parse(...)`` / ``tp.load(...)``
then ``.compile().limit()`` is called ``--repeat`` times (default 2), after a warm-up compile of a
tiny program so imports and the parser's tables do not count.  Both the first call and the best
are reported; the plot and the targets use the first call.  The first call of a depth already
profits from what the earlier depths derived (the compiler caches expectations by shape: by
design, a depth costs evaluations, not derivations); a repeat of the same program also hits
sympy's global cache of the expressions it built, so "best" understates a fresh compile.
Families:

* **ReLU ResNet** ``x[l] = x[l-1] + W[l] @ relu(x[l-1])`` from two correlated inputs
  (cov [[1, 0.5], [0.5, 1]]), NNGP outputs mean(x·y), mean(x·x); W entries N(0, 1/n).
  Reference: K_l = K_{l−1} + E[relu(u) relu(v)], (u, v) ~ N(0, K_{l−1}), by the arc-cosine
  formula E = √(q₁q₂)/(2π)·(sin θ + (π − θ) cos θ), cos θ = c/√(q₁q₂).  Values grow like 1.5^L,
  so its error is relative.  Targets: depth 64 < 5 s, t(128)/t(64) ≤ 2.2.
* **tanh ResNet** ``x[l] = x[l-1] + W[l] @ tanh(x[l-1])``, same inputs and outputs.
  Reference: K_l = K_{l−1} + E[tanh(u) tanh(v)] with every expectation by the trapezoidal rule in
  whitened coordinates (u, v) = C z, C the Cholesky factor of K_{l−1}, z ~ N(0, I₂), step h on
  [−12, 12]²; the integrand is analytic in a strip of half-width π/(2·√K₁₁) (tanh's poles), so the
  rule converges like exp(−2π·width/h): at the default h = 0.025 about e⁻⁶³ at depth 48.  The
  reference's own error is |Q_h − Q_2h| (printed).  Gauss–Hermite is *not* used: with K₁₁ ≈ 38
  at depth 48, tanh(6z) has poles 0.25 from the real axis and a 200×200 Gauss–Hermite rule is off
  by ~1e-5 (200 against 300 points differ by 6e-6).  Target: depth 48 < 10 s, error ≤ 1e-8.
* **pre-LN transformer** ``programs/transformer_preln.tp`` (T = 4 tokens, L blocks); depth = L.
  No independent reference here (its values are checked in the tests).  Target: T = 4, L = 4 < 10 s.
* **ReLU MLP NNGP** (σ² = 2, forward pass only, the ``nngp`` of ``programs/kernels/relu_mlp.tp``)
  and **ReLU NTK** (``programs/kernels/relu_mlp.tp`` itself, param ``L``: NNGP plus the NTK by
  a backward pass through the transposed matrices).  Reference: the arc-cosine recursion
  Σ^l = σ²·E relu relu(Σ^{l−1}), Θ^l = Σ^l + σ²·E step step(Σ^{l−1})·Θ^{l−1}, readout
  nngp = E relu relu(Σ^L), ntk = nngp + E step step(Σ^L)·Θ^L (relative error).

``--before`` also times the old tree (commit ac4814e, checked out without git at ``--base``,
default /tmp/base11) on the ReLU ResNet at depths 4, 8, 12, 16, by the CLI in a subprocess
(``PYTHONPATH=BASE python -m tensorprog compile FILE -D L=depth``, cwd BASE, 120 s timeout), and
this tree by the same command, so before/after include the interpreter start-up alike.

    python bench/compile_scaling.py [--quick] [--before] [--json out.json] [--plot docs/compile_scaling.png]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent

RESNET = """
param L = 4
vector x0, y0 ~ normal(cov=[[1, 0.5], [0.5, 1]])
matrix W[1..L] ~ normal()
x[0] = x0
y[0] = y0
for l in 1..L {
    x[l] = x[l-1] + W[l] @ ACT(x[l-1])
    y[l] = y[l-1] + W[l] @ ACT(y[l-1])
}
out kxy = mean(x[L] * y[L])
out kxx = mean(x[L] * x[L])
"""

MLP_NNGP = """
param L = 3
param var = 2
vector h1, g1 ~ normal(cov=[[1, 0.5], [0.5, 1]])
x[1] = h1
y[1] = g1
matrix W[2..L] ~ normal(var=var)
for l in 2..L {
    x[l] = W[l] @ relu(x[l-1])
    y[l] = W[l] @ relu(y[l-1])
}
out nngp = mean(relu(x[L]) * relu(y[L]))
"""

WARMUP = """
vector u, v ~ normal(cov=[[1, 0.3], [0.3, 1]])
matrix W ~ normal()
out k = mean(relu(W @ relu(u)) * tanh(v))
"""

INPUT_COV = np.array([[1.0, 0.5], [0.5, 1.0]])


# ---------------------------------------------------------------- references

def relu_moments(k: np.ndarray) -> tuple[np.ndarray, float]:
    """(E[relu(u)relu(v)] as a 2×2 matrix, E[step(u)step(v)]) for (u, v) ~ N(0, k): arc-cosine,
    E relu(u)relu(v) = √(q₁q₂)/(2π)(sin θ + (π − θ)cos θ), E step step = (π − θ)/(2π)."""
    q1, q2, c = k[0, 0], k[1, 1], k[0, 1]
    cos = min(1.0, max(-1.0, c / math.sqrt(q1 * q2)))
    theta = math.acos(cos)
    off = math.sqrt(q1 * q2) / (2 * math.pi) * (math.sin(theta) + (math.pi - theta) * cos)
    return np.array([[q1 / 2, off], [off, q2 / 2]]), (math.pi - theta) / (2 * math.pi)


def relu_resnet_reference(depth: int) -> dict[str, float]:
    """K_l = K_{l−1} + E relu relu(K_{l−1}) from K_0 = INPUT_COV."""
    k = INPUT_COV.copy()
    for _ in range(depth):
        k = k + relu_moments(k)[0]
    return {"kxy": float(k[0, 1]), "kxx": float(k[0, 0])}


def relu_mlp_reference(depth: int, var: float = 2.0) -> dict[str, float]:
    """Arc-cosine NNGP/NTK recursion of programs/kernels/relu_mlp.tp (var1 = 1, see its header)."""
    sigma, theta = INPUT_COV.copy(), INPUT_COV[0, 1]
    for _ in range(2, depth + 1):
        e, edot = relu_moments(sigma)
        sigma = var * e
        theta = sigma[0, 1] + var * edot * theta
    e, edot = relu_moments(sigma)
    return {"nngp": float(e[0, 1]), "ntk": float(e[0, 1] + edot * theta)}


def trapezoid_nodes(h: float, bound: float = 12.0) -> tuple[np.ndarray, np.ndarray]:
    """Nodes z and weights h·φ(z) of the trapezoidal rule for E f(z), z ~ N(0, 1), on [−bound, bound]."""
    z = np.arange(-bound, bound + h / 2, h)
    return z, h * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)


def tanh_moments(k: np.ndarray, h: float) -> np.ndarray:
    """E[tanh(u)tanh(v)] (2×2) for (u, v) = C z ~ N(0, k), C = cholesky(k), by the trapezoidal rule
    in z (1-D on the diagonal, 2-D off it)."""
    z, w = trapezoid_nodes(h)
    c = np.linalg.cholesky(k)
    d1 = float(w @ np.tanh(c[0, 0] * z) ** 2)
    d2 = float(w @ np.tanh(math.sqrt(k[1, 1]) * z) ** 2)
    tu = np.tanh(c[0, 0] * z)
    tv = np.tanh(c[1, 0] * z[:, None] + c[1, 1] * z[None, :])
    off = float(w @ (tu[:, None] * tv) @ w)
    return np.array([[d1, off], [off, d2]])


def tanh_resnet_references(depth: int, h: float = 0.025) -> tuple[list[dict[str, float]], float]:
    """K_l = K_{l−1} + E tanh tanh(K_{l−1}) for l = 1..depth (entry l−1 of the list), and the
    largest |Q_h − Q_2h| over all layers' outputs (the reference's own error check)."""
    fine, coarse = INPUT_COV.copy(), INPUT_COV.copy()
    out, check = [], 0.0
    for _ in range(depth):
        fine = fine + tanh_moments(fine, h)
        coarse = coarse + tanh_moments(coarse, 2 * h)
        check = max(check, float(np.max(np.abs(fine - coarse))))
        out.append({"kxy": float(fine[0, 1]), "kxx": float(fine[0, 0])})
    return out, check


# ---------------------------------------------------------------- timing

@dataclass
class Row:
    """One (family, depth) measurement."""
    family: str
    depth: int
    best_s: float
    first_s: float
    values: dict[str, float]
    stated: dict[str, float]
    methods: list[str]
    error: float | None = None       # max over outputs of |compiled − reference| (abs or relative)
    error_kind: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass
class Family:
    """A family of programs indexed by depth, with an optional reference."""
    name: str
    depths: list[int]
    build: Callable[[int], "tp.Program"]
    reference: Callable[[int], dict[str, float]] | None = None
    relative: bool = False
    depth_label: str = "layers"


def timed(build: Callable[[], "tp.Program"], repeat: int) -> tuple[float, float, object]:
    """(first, best) wall time of build().compile().limit() over ``repeat`` calls, and the last limit."""
    times, lim = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        lim = build().compile().limit()
        times.append(time.perf_counter() - t0)
    return times[0], min(times), lim


def measure(fam: Family, repeat: int) -> list[Row]:
    """Time every depth of a family (ascending) and compare with its reference."""
    rows = []
    for depth in fam.depths:
        first, best, lim = timed(lambda: fam.build(depth), repeat)
        outs = lim.outputs
        row = Row(fam.name, depth, best, first, {k: float(v.value) for k, v in outs.items()},
                  {k: float(v.error) for k, v in outs.items()}, sorted({v.method for v in outs.values()}),
                  warnings=[str(w) for w in lim.warnings])
        if fam.reference is not None:
            ref = fam.reference(depth)
            errs = [abs(row.values[k] - r) / (abs(r) if fam.relative else 1.0) for k, r in ref.items()]
            row.error, row.error_kind = max(errs), "relative" if fam.relative else "absolute"
        rows.append(row)
        print(f"  {fam.name:<18} depth {depth:>4}: {best:7.3f} s (first {first:.3f} s)"
              + (f", error {row.error:.1e}" if row.error is not None else ""), flush=True)
    return rows


def families(quick: bool, tanh_refs: list[dict[str, float]]) -> list[Family]:
    """The five families of the benchmark (fewer depths with ``quick``)."""
    pick = (lambda full, short: short if quick else full)
    relu_text, tanh_text = RESNET.replace("ACT", "relu"), RESNET.replace("ACT", "tanh")
    return [
        Family("ReLU ResNet", pick([4, 8, 16, 32, 64, 128], [4, 8, 16, 32]),
               lambda d: tp.parse(relu_text, L=d), relu_resnet_reference, relative=True),
        Family("tanh ResNet", pick([4, 8, 12, 16, 24, 32, 48], [4, 8, 16]),
               lambda d: tp.parse(tanh_text, L=d), lambda d: tanh_refs[d - 1]),
        Family("pre-LN transformer", pick([1, 2, 4, 8], [1, 2, 4]),
               lambda d: tp.load(ROOT / "programs/transformer_preln.tp", T=4, L=d), depth_label="blocks"),
        Family("ReLU MLP NNGP", pick([8, 16, 32, 64, 128], [8, 16, 32]),
               lambda d: tp.parse(MLP_NNGP, L=d), lambda d: {"nngp": relu_mlp_reference(d)["nngp"]},
               relative=True),
        Family("ReLU NTK (backward)", pick([8, 16, 32, 64], [8, 16]),
               lambda d: tp.load(ROOT / "programs/kernels/relu_mlp.tp", L=d), relu_mlp_reference,
               relative=True),
    ]


# ---------------------------------------------------------------- before / after (CLI)

def cli_time(tree: Path, program: Path, depth: int, timeout: float) -> tuple[float | None, str]:
    """Wall time of ``python -m tensorprog compile program -D L=depth`` with tree on PYTHONPATH,
    cwd tree (None on a timeout or a failure), and the last line of its output."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "tensorprog", "compile", str(program), "-D", f"L={depth}"],
                              cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f} s"
    elapsed = time.perf_counter() - t0
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return (elapsed if proc.returncode == 0 else None), (lines[-1] if lines else "")


def before_after(base: Path, depths: list[int], timeout: float) -> list[dict[str, object]]:
    """The ReLU ResNet by the CLI, on the old tree and on this one."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / "relu_resnet.tp"
        program.write_text(RESNET.replace("ACT", "relu"))
        for depth in depths:
            old, old_msg = cli_time(base, program, depth, timeout)
            new, new_msg = cli_time(ROOT, program, depth, timeout)
            rows.append({"depth": depth, "before_s": old, "after_s": new, "before_out": old_msg,
                         "after_out": new_msg})
            print(f"  CLI ReLU ResNet depth {depth:>3}: before {fmt_s(old)}, after {fmt_s(new)}", flush=True)
    return rows


# ---------------------------------------------------------------- reporting

def fmt_s(t: float | None) -> str:
    """Seconds, or — for none."""
    return "—" if t is None else f"{t:.2f} s"


def by_depth(rows: list[Row], family: str) -> dict[int, Row]:
    """A family's rows by depth."""
    return {r.depth: r for r in rows if r.family == family}


def markdown_table(rows: list[Row]) -> str:
    """One line per (family, depth)."""
    out = ["| family | depth | compile + limit, first call | best of the calls | method | max stated error "
           "| max error vs reference |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = "—" if r.error is None else f"{r.error:.1e} ({'rel.' if r.error_kind == 'relative' else 'abs.'})"
        stated = max(r.stated.values()) if not r.error_kind == "relative" else max(
            r.stated[k] / abs(r.values[k]) for k in r.stated if r.values[k] != 0)
        stated_s = f"{stated:.1e}" + (" (rel.)" if r.error_kind == "relative" else "")
        out.append(f"| {r.family} | {r.depth} | {r.first_s:.2f} s | {r.best_s:.2f} s | {', '.join(r.methods)} "
                   f"| {stated_s} | {err} |")
    return "\n".join(out)


def before_table(rows: list[dict[str, object]]) -> str:
    """The before/after CLI times as a markdown table."""
    out = ["| ReLU ResNet depth | before (ac4814e), `tpc compile` | after, `tpc compile` | speed-up |",
           "|---|---|---|---|"]
    for r in rows:
        old, new = r["before_s"], r["after_s"]
        ratio = f"{old / new:.0f}×" if old is not None and new else "—"
        old_s = fmt_s(old) if old is not None else str(r["before_out"])     # "timeout after … s" or the error
        out.append(f"| {r['depth']} | {old_s} | {fmt_s(new)} | {ratio} |")
    return "\n".join(out)


def targets(rows: list[Row]) -> list[str]:
    """The issue's targets against the figures of this run (those this run measured)."""
    lines = []
    relu, tanh_r, tr = by_depth(rows, "ReLU ResNet"), by_depth(rows, "tanh ResNet"), by_depth(rows, "pre-LN transformer")
    if 64 in relu:
        t64, b64 = relu[64].first_s, relu[64].best_s
        lines.append(f"ReLU ResNet depth 64: first call {t64:.2f} s, best {b64:.2f} s (target < 5 s): "
                     f"{'met' if t64 < 5 else 'MISSED'}")
        if 128 in relu:
            ratio, best_ratio = relu[128].first_s / t64, relu[128].best_s / b64
            lines.append(f"ReLU ResNet t(128)/t(64) = {ratio:.2f} first calls, {best_ratio:.2f} best "
                         f"(target ≤ 2.2): {'met' if max(ratio, best_ratio) <= 2.2 else 'MISSED'}")
    if 48 in tanh_r:
        r = tanh_r[48]
        ok = r.first_s < 10 and r.error is not None and r.error <= 1e-8
        lines.append(f"tanh ResNet depth 48: first call {r.first_s:.2f} s, best {r.best_s:.2f} s, "
                     f"|compiled − reference| = {r.error:.1e}, stated {max(r.stated.values()):.1e} "
                     f"(target < 10 s, ≤ 1e-8): {'met' if ok else 'MISSED'}")
    if 4 in tr:
        lines.append(f"pre-LN transformer T=4, L=4: first call {tr[4].first_s:.2f} s, best {tr[4].best_s:.2f} s "
                     f"(target < 10 s): {'met' if tr[4].first_s < 10 else 'MISSED'}")
    return lines


STYLE = {"ReLU ResNet": ("o", "C0"), "tanh ResNet": ("s", "C1"), "pre-LN transformer": ("^", "C2"),
         "ReLU MLP NNGP": ("D", "C3"), "ReLU NTK (backward)": ("v", "C4")}


def plot(rows: list[Row], before: list[dict[str, object]], path: Path) -> None:
    """Log-log compile time against depth, one line per family; the old tree dashed; targets as stars."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(10.0, 5.2), dpi=130)
    for name, (marker, color) in STYLE.items():
        pts = sorted(by_depth(rows, name).items())
        if pts:
            label = name + (" (depth = blocks, T = 4)" if name == "pre-LN transformer" else "")
            ax.plot([d for d, _ in pts], [r.first_s for _, r in pts], marker=marker, color=color, label=label)
    old = [(r["depth"], r["before_s"]) for r in before if r["before_s"] is not None]
    new = [(r["depth"], r["after_s"]) for r in before if r["after_s"] is not None]
    if old:
        ax.plot(*zip(*old), "o--", color="0.3", mfc="white", label="ReLU ResNet, before (ac4814e), tpc compile")
    if new:
        ax.plot(*zip(*new), "o:", color="0.6", mfc="white", ms=4,
                label="ReLU ResNet, after, tpc compile (~2 s start-up)")
    for (d, t, color, text) in [(64, 5, "C0", "ResNet 64: < 5 s"), (48, 10, "C1", "tanh 48: < 10 s"),
                                (4, 10, "C2", "L = 4: < 10 s")]:
        ax.plot([d], [t], marker="*", ms=13, color=color, mec="k", mew=0.6, ls="none")
        ax.annotate(text, (d, t), textcoords="offset points", xytext=(8, -3), fontsize=7, color=color)
    ax.plot([], [], marker="*", ms=11, color="w", mec="k", mew=0.6, ls="none", label="targets (issue 11)")
    d = np.array([1.0, 160.0])
    ax.plot(d, 0.01 * d, ":", color="0.6", lw=1, label="slope 1 (linear in depth)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ticks = [1, 2, 4, 8, 16, 32, 64, 128]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.set_xlim(0.8, 180)
    ax.set_xlabel("depth (layers; transformer: blocks)")
    ax.set_ylabel("compile + limit time, first call (s)")
    ax.set_title("Limit compiler: compile time against depth")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


def machine() -> str:
    """The machine, the versions and the current load, in words."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"numpy {np.__version__}, 1-minute load average at the end {load:.2f}")


def main(argv: list[str] | None = None) -> None:
    """Measure, print the tables and the targets, write the JSON and the plot."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer depths, one repeat")
    ap.add_argument("--repeat", type=int, default=None, help="timed calls per point (default 2; --quick 1)")
    ap.add_argument("--before", action="store_true", help="also time the old tree by the CLI")
    ap.add_argument("--base", type=Path, default=Path("/tmp/base11"), help="the old tree (default /tmp/base11)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per old-tree run (default 120)")
    ap.add_argument("--json", type=Path, help="write the measurements here")
    ap.add_argument("--plot", type=Path, help="write the log-log plot here (PNG)")
    args = ap.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 2)

    if hasattr(os, "getloadavg"):
        print(f"1-minute load average at the start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    t0 = time.perf_counter()
    tp.parse(WARMUP).compile().limit()
    print(f"warm-up compile: {time.perf_counter() - t0:.2f} s")
    tanh_depth = 16 if args.quick else 48
    tanh_refs, tanh_check = tanh_resnet_references(tanh_depth)
    print(f"tanh reference (trapezoid h = 0.025 vs 0.05, all layers to depth {tanh_depth}): "
          f"max |Q_h − Q_2h| = {tanh_check:.1e}")

    rows: list[Row] = []
    for fam in families(args.quick, tanh_refs):
        rows.extend(measure(fam, repeat))
    before = before_after(args.base, [4, 8, 12, 16], args.timeout) if args.before else []

    print(f"\nMachine: {machine()}; {repeat} call(s) per point, in process, after a warm-up compile.\n")
    print(markdown_table(rows))
    if before:
        print("\n" + before_table(before))
    print(f"\ntanh reference's own error (|Q_h − Q_2h|): {tanh_check:.1e}")
    for line in targets(rows):
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "repeat": repeat, "tanh_reference_check": tanh_check,
                                         "rows": [asdict(r) for r in rows], "before_after": before}, indent=1))
    if args.plot:
        plot(rows, before, args.plot)
        print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
