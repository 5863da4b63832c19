"""Regenerate the numbers and plots of docs/gallery_003.md and docs/gallery_004.md.

    PYTHONPATH=. python docs/make_gallery_003_004.py            # both papers (89 s CPU)
    PYTHONPATH=. python docs/make_gallery_003_004.py 004        # one of them
    PYTHONPATH=. python docs/make_gallery_003_004.py 003-lambda # λ_G(B) compiled exactly (issue 26)

Each depth sweep runs (and compiles) its program once, at the largest depth, with `out` lines
added inside the layer loop (:func:`layered`: the program file's own text, every statement
unchanged), and reads every layer from that one run.  Forward (003-2, 004-2): a network's first
l layers are an l-layer network, so each layer has the law of the separate run at that depth
(correlated across depth, as in one network).  Backward (003-4): the gradient after each of the
10 backward layers of one network, as in the paper's Fig. 1b (a separate D-layer run differs at
finite width only in the forward layers below; the limit is D·log λ_G for both).  Finite width
uses conditional matrices (:func:`run`).  Both papers: 89 s CPU (85 user + 4 sys; 5:25 wall on
2 cores shared with load 12-15), half of it NormReLU's 200-layer compile; before these changes
~190 separate dense runs and compiles took 311 s CPU (issue 26).  Each section logs its CPU and
wall seconds.

Prints the tables (markdown) that the gallery pages quote and writes
docs/img/seed003_*.png and docs/img/seed004_*.png (matplotlib, Agg).  Every reference value
is computed here independently of the programs (closed forms or Monte Carlo on the sphere),
as in tests/test_paper_batchnorm.py and tests/test_paper_conditioning.py.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from functools import lru_cache
from math import acos, asin, e, exp, pi, sqrt
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401
import numpy as np  # noqa: E402
from scipy.special import ndtr  # noqa: E402
from scipy.stats import norm  # noqa: E402

import tensorprog as tp  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
PROG = ROOT / "programs"
N, SEED = 1024, 0


def log(msg: str) -> None:
    print(msg, flush=True)


def table(header: list[str], rows: list[list]) -> None:
    log("| " + " | ".join(header) + " |")
    log("|" + "---|" * len(header))
    for r in rows:
        log("| " + " | ".join(str(x) for x in r) + " |")
    log("")


def pm(mean: float, err: float, digits: int = 4) -> str:
    return f"{mean:.{digits}f} ± {err:.{digits}f}"


@contextmanager
def timed(label: str):
    """Log the CPU (this process) and wall seconds of a block."""
    cpu, wall = time.process_time(), time.perf_counter()
    yield
    log(f"[{label}: {time.process_time() - cpu:.1f} s CPU, {time.perf_counter() - wall:.1f} s wall]\n")


def run(program: tp.Program, trials: int = 8) -> dict:
    """The outputs of ``program`` at width N over ``trials`` trials, with conditional matrices
    (``--conditional``: each product W x, Wᵀ u drawn from its law given the earlier ones, so the
    n × n matrices are never drawn; the law of a dense run exactly, not an approximation:
    tensorprog/distributions/conditional.py).  10–50 times cheaper here than dense matrices."""
    return program.execute(n=N, trials=trials, seed=SEED, conditional=True).outputs


def layered(path: Path, inserts: list[tuple[str, str]], **params: float) -> tp.Program:
    """The program at ``path`` with ``out`` lines added: each (anchor, lines) puts ``lines`` right
    after ``anchor``, whole lines of the file that occur there exactly once.  Every statement of the
    file is kept as it is, so the network is the file's; the added outputs only read it (one per
    layer, inside the layer loop)."""
    text = path.read_text()
    for anchor, extra in inserts:
        if text.count(anchor) != 1 or not anchor.endswith("\n"):
            raise SystemExit(f"{path}: the lines {anchor!r} occur {text.count(anchor)} times, not once")
        text = text.replace(anchor, anchor + extra)
    return tp.parse(text, file=str(path), base_dir=str(path.parent), **params)


def per_layer(r, name: str, layers: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over trials of an array output ``name[1..layers]`` (finite width)."""
    v = np.array(r[name].values, dtype=float)[:, :layers]
    return v.mean(axis=0), v.std(axis=0, ddof=1) / sqrt(len(v))


# ==== seed 003 ===================================================================================
def J1(t: float) -> float:
    return (sqrt(1 - t * t) + (pi - acos(t)) * t) / pi


def J0(t: float) -> float:
    return (pi - acos(t)) / pi


def lambda_relu(B: int) -> float:
    r = -1 / (B - 1)
    return (B - 2 + J0(r) + J1(r)) / ((B - 3) * (1 - J1(r)))


def lambda_mc(B: int, phi, dphi, m: int = 400_000, seed: int = 7) -> float:
    z = np.random.default_rng(seed).standard_normal((m, B))
    z -= z.mean(axis=1, keepdims=True)
    v = z / np.linalg.norm(z, axis=1, keepdims=True)
    y = sqrt(B) * v
    f, d = phi(y), dphi(y)
    d2 = d ** 2
    tr = (d2.sum(1) * (1 - 1 / B) - (d2 * v ** 2).sum(1)
          - (d2.sum(1) - d.sum(1) ** 2 / B - (d * v).sum(1) ** 2) / B)
    ab = np.mean(f[:, 0] ** 2 - f[:, 0] * f[:, 1])
    return B * tr.mean() / (ab * (B - 3) * (B - 1))


TANH = (np.tanh, lambda y: 1 - np.tanh(y) ** 2)


@lru_cache(maxsize=None)
def tanh_mc(B: int, m: int = 400_000) -> float:
    """λ_G(B) for tanh by Monte Carlo on the sphere (computed once per (B, m) in a run)."""
    return lambda_mc(B, *TANH, m=m)


#: bn_fixed_point.tp with the batch covariance read after every layer l
FIXED_LAYERS = [("    for b in 1..B { h[b] = W @ relu(y[b]) }\n",
                 "    out C12[l] = mean(h[1] * h[2])\n    out C1B[l] = mean(h[1] * h[B])\n"
                 "    out Q11[l] = mean(h[1] ** 2)\n")]
#: bn_gradient.tp with the squared gradient norm read after every backward layer k
GRAD_LAYERS = [("        dh[D + 2 - k, a] = sum(b in 1..B: diff(x[D + 2 - k, b], h[D + 2 - k, a]) * dx[D + 2 - k, b])\n"
                "    }\n", "    out NK[k] = mean(sum(a in 1..B: dh[D + 2 - k, a] ** 2))\n")]


def seed003() -> None:
    fixed, grad = str(PROG / "bn_fixed_point.tp"), str(PROG / "bn_gradient.tp")

    log("## 003-1 fixed point (Theorem 5): bn_fixed_point.tp, L = 1, BSB1 input\n")
    rows = []
    with timed("003-1"):
        for B in (4, 6, 8):
            t = time.process_time()
            lim = tp.load(fixed, B=B).compile().limit().outputs
            r = run(tp.load(fixed, B=B))
            rows.append([B, "0.5", pm(lim["qavg"].value, lim["qavg"].error, 5),
                         pm(r["qavg"].mean, r["qavg"].std / sqrt(8)), f"{0.5 * J1(-1 / (B - 1)):.6f}",
                         pm(lim["cavg"].value, lim["cavg"].error, 6), pm(r["cavg"].mean, r["cavg"].std / sqrt(8)),
                         f"{time.process_time() - t:.1f} s"])
    table(["B", "diag: paper", "diag: limit", f"diag: n={N}", "off-diag: ½J1(−1/(B−1))", "off-diag: limit",
           f"off-diag: n={N}", "cpu"], rows)

    log("## 003-2 convergence to the fixed point from a non-BSB1 input (ar = 1, rho = 0.9, B = 4)\n")
    log("(one run at L = 8 and one compile at L = 4, every layer read: `out C12[l]` ... in the loop)\n")
    target = 0.5 * J1(-1 / 3)
    Ls, Lc, keys = list(range(1, 9)), 4, ("C12", "C1B", "Q11")
    with timed("003-2"):
        r = run(layered(PROG / "bn_fixed_point.tp", FIXED_LAYERS, B=4, L=Ls[-1], ar=1, rho=0.9))
        lo = layered(PROG / "bn_fixed_point.tp", FIXED_LAYERS, B=4, L=Lc, ar=1, rho=0.9).compile().limit().outputs
    fw = {k: per_layer(r, k, Ls[-1]) for k in keys}
    lim = {k: np.asarray(lo[k].value, dtype=float) for k in keys}
    rows = []
    for i, L in enumerate(Ls):
        cell = (lambda k: f"{lim[k][i]:.5f}") if L <= Lc else (lambda k: "—")
        rows.append([L, cell("C12"), cell("C1B"), pm(fw["C12"][0][i], fw["C12"][1][i]),
                     pm(fw["C1B"][0][i], fw["C1B"][1][i]), cell("Q11"), pm(fw["Q11"][0][i], fw["Q11"][1][i])])
    table(["L", "c12 limit", "c1B limit", f"c12 n={N}", f"c1B n={N}", "q11 limit", f"q11 n={N}"], rows)
    log(f"fixed point: q = 0.5, c = {target:.6f}\n")
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, (k, lab) in enumerate([("C12", "Σ₁₂ (input corr 0.9)"), ("C1B", "Σ₁₄ (input corr 0.729)")]):
        ax.errorbar(Ls, fw[k][0], fw[k][1], fmt="o", color=f"C{i}", capsize=3, label=f"{lab}, n={N}")
        ax.plot(Ls[:Lc], lim[k], "-", color=f"C{i}", label=f"{lab}, compiled limit")
    ax.axhline(target, color="k", ls="--", label="½·J1(−1/3), Theorem 5")
    ax.set_xlabel("layers L")
    ax.set_ylabel("batch covariance")
    ax.set_title("ReLU + batchnorm, B = 4: Σ^L → BSB1 fixed point")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "seed003_fixed_point_depth.png", dpi=120)
    plt.close(fig)

    log("## 003-3 gradient growth rate λ_G(B): bn_gradient.tp\n")
    rows, compiled = [], {}
    with timed("003-3 compiles"):
        for B in (4, 5, 6):
            for act, name in ((1, "relu"), (2, "tanh")) + (((0, "linear"),) if B == 4 else ()):
                t = time.process_time()
                o = tp.load(grad, B=B, D=1, act=act, sym=1).compile().limit().outputs["rate"]
                compiled[(name, B)] = o
                ref = lambda_relu(B) if act == 1 else (tanh_mc(B) if act == 2 else (B - 2) / (B - 3))
                rows.append([name, B, f"{ref:.4f}", pm(o.value, o.error, 4), o.method,
                             f"{time.process_time() - t:.1f} s"])
    table(["φ", "B", "reference", "compiled limit (sym=1)", "method", "cpu"], rows)
    rows, finite = [], {}
    with timed("003-3 finite width"):
        for B in (6, 8, 12):
            for act, name in ((1, "relu"), (2, "tanh")):
                r = run(tp.load(grad, B=B, D=1, act=act), trials=16)["rate"]
                finite[(name, B)] = r
                ref = lambda_relu(B) if act == 1 else tanh_mc(B)
                rows.append([name, B, f"{ref:.4f}", pm(r.mean, r.std / 4, 3)])
    table(["φ", "B", "reference", f"finite width n={N}, 16 trials"], rows)

    Bs = np.arange(4, 65)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(Bs, [lambda_relu(int(B)) for B in Bs], "C0-", label="ReLU: closed form")
    tb = [4, 5, 6, 8, 12, 16, 24, 32, 48, 64]
    with timed("003-3 tanh Monte Carlo curve"):
        ax.plot(tb, [tanh_mc(B, m=100_000) for B in tb], "C1-", label="tanh: Monte Carlo on the sphere")
    ax.plot(Bs, (Bs - 2) / (Bs - 3), "C2-", label="linear: (B−2)/(B−3)")
    ax.axhline(pi / (pi - 1), color="C0", ls=":", lw=1, label="π/(π−1)")
    for (name, B), o in compiled.items():
        c = {"relu": "C0", "tanh": "C1", "linear": "C2"}[name]
        ax.errorbar([B], [o.value], [o.error], fmt="s", color=c, mfc="none", capsize=3)
    for (name, B), r in finite.items():
        ax.errorbar([B], [r.mean], [r.std / 4], fmt="o", color="C0" if name == "relu" else "C1", capsize=3)
    ax.plot([], [], "ks", mfc="none", label="compiled limit (tpc compile)")
    ax.plot([], [], "ko", label=f"finite width n={N}")
    ax.set_xscale("log")
    ax.set_xticks([4, 6, 8, 12, 16, 32, 64])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_ylim(0.9, 3.3)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("λ_G (squared gradient norm, per layer)")
    ax.set_title("batchnorm: gradient explosion rate")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "seed003_lambda_vs_B.png", dpi=120)
    plt.close(fig)

    log("## 003-4 log gradient norm against depth (ReLU, finite width)\n")
    log("(one run at D = 10 per B, the gradient read after every backward layer: `out NK[k]` in the loop)\n")
    Ds, rows = list(range(1, 11)), []
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, B in enumerate((6, 8, 12)):
        with timed(f"003-4 B = {B}"):
            r = run(layered(PROG / "bn_gradient.tp", GRAD_LAYERS, B=B, D=Ds[-1], act=1))
        ratio = np.log(np.array(r["NK"].values, dtype=float) / np.array(r["n_top"].values)[:, None])
        means, sems = ratio.mean(axis=0), ratio.std(axis=0, ddof=1) / sqrt(len(ratio))
        ax.errorbar(Ds, means, sems, fmt="o", color=f"C{i}", capsize=2, label=f"B = {B}, n = {N}")
        ax.plot([0] + Ds, [D * np.log(lambda_relu(B)) for D in [0] + Ds], color=f"C{i}", ls="--")
        slope, se = slope_se(Ds, ratio)
        rows.append([B, f"{np.log(lambda_relu(B)):.4f}", pm(slope, se), f"{means[-1]:.3f} ± {sems[-1]:.3f}",
                     f"{Ds[-1] * np.log(lambda_relu(B)):.3f}"])
    ax.plot([], [], "k--", label="limit: D·log λ_G(B)")
    ax.set_xlabel("layers back-propagated D")
    ax.set_ylabel("log(‖gradient after D layers‖² / ‖g‖²)")
    ax.set_title("ReLU + batchnorm: gradients explode with depth")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "seed003_gradnorm_depth.png", dpi=120)
    plt.close(fig)
    table(["B", "limit slope log λ_G", f"fitted slope, n={N}", f"log ratio at D=10, n={N}", "limit at D=10"],
          rows)


def slope_se(Ds: list[int], ratio: np.ndarray) -> tuple[float, float]:
    """The least-squares slope of the trials' mean log ratio against D, and its standard error
    over trials (each trial's own fitted slope; the trials are independent, the layers of one
    trial are not)."""
    per_trial = np.polyfit(Ds, ratio.T, 1)[0]
    return float(per_trial.mean()), float(per_trial.std(ddof=1) / sqrt(len(per_trial)))


LAMBDA_BS = (4, 5, 6, 7, 8, 9, 10, 12, 16)


def seed003_lambda_exact() -> None:
    """λ_G(B) compiled (ReLU, D = 1, sym = 1) against the closed form over B (issue 26: the block rule
    integrates the batch's radius exactly, so the compiled limit is exact) and one depth-4 compile."""
    log("## 003-5 λ_G(B) compiled exactly, against the closed form\n")
    rows, got = [], {}
    for B in LAMBDA_BS:
        t = time.process_time()
        o = tp.load(str(PROG / "bn_gradient.tp"), B=B, D=1, sym=1).compile().limit().outputs["rate"]
        got[B] = o
        rows.append([B, f"{lambda_relu(B):.10f}", f"{o.value:.10f} ± {o.error:.1g}", o.method,
                     f"{abs(o.value - lambda_relu(B)):.1g}", f"{time.process_time() - t:.1f} s"])
    t = time.process_time()
    o = tp.load(str(PROG / "bn_gradient.tp"), B=5, D=4).compile().limit().outputs["rate"]
    rows.append(["5 (D = 4, sym = 0)", f"{lambda_relu(5):.10f}", f"{o.value:.10f} ± {o.error:.1g}", o.method,
                 f"{abs(o.value - lambda_relu(5)):.1g}", f"{time.process_time() - t:.1f} s"])
    table(["B", "closed form", "compiled limit", "method", "|diff|", "cpu"], rows)
    Bs = np.arange(4, 65)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(Bs, [lambda_relu(int(B)) for B in Bs], "C0-", label="closed form (B−2+J0+J1)/((B−3)(1−J1))")
    ax.plot(list(got), [o.value for o in got.values()], "ks", mfc="none", label="compiled limit (exact)")
    ax.axhline(pi / (pi - 1), color="C0", ls=":", lw=1, label="π/(π−1)")
    ax.set_xscale("log")
    ax.set_xticks([4, 6, 8, 12, 16, 32, 64])
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.set_xlabel("batch size B")
    ax.set_ylabel("λ_G (ReLU)")
    ax.set_title("batchnorm: λ_G compiled exactly against the closed form")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "seed003_lambda_exact.png", dpi=120)
    plt.close(fig)


# ==== seed 004 ===================================================================================
B_KINK = -1.6
P_B, p_B = norm.cdf(B_KINK), norm.pdf(B_KINK)
MU_B = B_KINK * P_B + p_B
LAM_B = 1 / sqrt(B_KINK ** 2 * P_B + B_KINK * p_B + 1 - P_B - MU_B ** 2)


def gauss_panels(a: float, c: float, panels: int, order: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights of composite Gauss–Legendre on [a, c] (``panels`` equal panels)."""
    x, w = np.polynomial.legendre.leggauss(order)
    edges = np.linspace(a, c, panels + 1)
    half = np.diff(edges)[:, None] / 2
    return (edges[:-1, None] + half * (x + 1)).ravel(), (half * w).ravel()


#: u below and above the kink b (|u| > 12 carries less than 1e-32 of the Gaussian)
NORMRELU_NODES = ((*gauss_panels(-12.0, B_KINK, 4), True), (*gauss_panels(B_KINK, 12.0, 10), False))


def dual_normrelu(rho: float) -> float:
    """σ̂(ρ) = λ_b² (E max(u, b) max(v, b) − μ_b²) for unit Gaussians of correlation ρ: the inner
    expectation over v given u in closed form, E max(ρu + s z, b) = b + m Φ(m/s) + s φ(m/s)
    (m = ρu − b, s = √(1 − ρ²)), the outer over u by Gauss–Legendre split at the kink u = b
    (vectorised; agrees with scipy's adaptive quad to 1e-15 for ρ in [−0.3, 1])."""
    s = sqrt(max(1 - rho * rho, 0.0))
    total = 0.0
    for u, w, below in NORMRELU_NODES:
        m = rho * u - B_KINK
        inner = B_KINK + m * ndtr(m / s) + s * norm_pdf(m / s) if s > 0 else np.maximum(rho * u, B_KINK)
        total += float(np.sum(w * norm_pdf(u) * (B_KINK if below else u) * inner))
    return LAM_B ** 2 * (total - MU_B ** 2)


def norm_pdf(x: np.ndarray) -> np.ndarray:
    return np.exp(-x * x / 2) / sqrt(2 * pi)


DUALS = {1: lambda r: (sqrt(1 - r * r) + (pi - acos(r)) * r - 1) / (pi - 1),
         2: lambda r: 2 / pi * asin(r), 3: lambda r: (exp(r) - 1) / (e - 1), 4: dual_normrelu}
MU = {1: (pi - 2) / (2 * (pi - 1)), 2: 1 - 2 / pi, 3: (e - 2) / (e - 1), 4: 1 - LAM_B ** 2 * norm.sf(B_KINK) ** 2}
NAMES = {1: "ReLU", 2: "step", 3: "exp", 4: f"NormReLU (b = {B_KINK})"}
GRAM = {"k12": 0.9, "k13": 0.5, "k23": 0.2}


PAIRS = ("11", "22", "33", "12", "13", "23")


def kernel_outs(index: str, indent: str) -> str:
    """``out KLij[index]``: the six entries of the kernel after a layer (as the program's k11 ... k23)."""
    return "".join(f"{indent}out KL{ij}[{index}] = mean(sigma(h{ij[0]}) "
                   + ("** 2)\n" if ij[0] == ij[1] else f"* sigma(h{ij[1]}))\n") for ij in PAIRS)


#: cond_kernel.tp with the kernel read after every layer (layer 1 before the loop, l = 2..L in it)
KERNEL_LAYERS = [("vector h1, h2, h3 ~ normal(cov=[[1, r12, r13], [r12, 1, r23], [r13, r23, 1]])\n",
                  kernel_outs("1", "")),
                 ("    h3 = W @ sigma(h3)\n", kernel_outs("l", "    "))]


def kappa(k: dict) -> float:
    """The condition number of the 3 × 3 kernel with entries k["11"] ... k["23"]."""
    K = np.array([[k["11"], k["12"], k["13"]], [k["12"], k["22"], k["23"]], [k["13"], k["23"], k["33"]]])
    w = np.linalg.eigvalsh(K)
    return float(w[-1] / w[0])


#: the depth each sweep is compiled to, and run to at finite width (exp overflows from L = 5 on)
LIMIT_DEPTH = {1: 12, 2: 12, 3: 12, 4: 200}
FINITE_DEPTH = {1: 12, 2: 12, 3: 4, 4: 10}
ROWS = {4: [1, 2, 5, 10, 20, 50, 100, 200]}


def finite_cell(k12: np.ndarray, ks: np.ndarray) -> str:
    """A table cell from the trials' K12 and κ at one depth."""
    se = lambda v: np.std(v, ddof=1) / sqrt(len(v))
    if np.mean(ks) < 1e3:                  # (a diverging exp network's κ overflows in np.std)
        return f"K12 {pm(np.mean(k12), se(k12), 3)}, κ {pm(np.mean(ks), se(ks), 2)}"
    return f"diverges: K12 = {np.mean(k12):.2g}, κ = {np.mean(ks):.2g}"


def stopped_cell(L: int) -> str:
    """The original program (exp) run to depth L: where it stops, or its cell if it does not."""
    try:
        r = run(tp.load(str(PROG / "cond_kernel.tp"), act=3, L=L, b=B_KINK))
    except tp.TPError as err:
        return "stopped: " + str(err).split(": ", 1)[1].split(" (")[0]
    ks = np.array([kappa({ij: r["k" + ij].values[t] for ij in PAIRS}) for t in range(8)])
    return finite_cell(np.array(r["k12"].values), ks)


def kernel_sweep(act: int) -> dict:
    """One compile to LIMIT_DEPTH and one run to FINITE_DEPTH of cond_kernel.tp (every layer read),
    the reference σ̂^{∘L}(0.9), and the table of the sweep."""
    with timed(f"004-2 {NAMES[act]}: compile to L = {LIMIT_DEPTH[act]}"):
        lo = layered(PROG / "cond_kernel.tp", KERNEL_LAYERS, act=act, L=LIMIT_DEPTH[act], b=B_KINK
                     ).compile().limit().outputs
    lim = {ij: np.asarray(lo["KL" + ij].value, dtype=float) for ij in PAIRS}
    Ls = np.arange(1, LIMIT_DEPTH[act] + 1)
    kap = np.array([kappa({ij: lim[ij][i] for ij in PAIRS}) for i in range(len(Ls))])
    rho, ref = 0.9, []
    for _ in Ls:
        rho = DUALS[act](rho)
        ref.append(rho)
    with timed(f"004-2 {NAMES[act]}: n = {N} to L = {FINITE_DEPTH[act]}"):
        r = run(layered(PROG / "cond_kernel.tp", KERNEL_LAYERS, act=act, L=FINITE_DEPTH[act], b=B_KINK))
        fw = {ij: np.array(r["KL" + ij].values, dtype=float) for ij in PAIRS}      # trials × layers
        ks = np.array([[kappa({ij: fw[ij][t, i] for ij in PAIRS}) for i in range(FINITE_DEPTH[act])]
                       for t in range(len(fw["12"]))])
        stops = {L: stopped_cell(L) for L in (5, 8, 12)} if act == 3 else {}
    rows = []
    for L in ROWS.get(act, list(Ls)):
        i = L - 1
        prev = lim["12"][i - 1] if i else GRAM["k12"]
        cell = finite_cell(fw["12"][:, i], ks[:, i]) if L <= FINITE_DEPTH[act] else stops.get(L, "—")
        rows.append([L, f"{ref[i]:.6f}", f"{lim['12'][i]:.6f}", f"{lim['13'][i]:.6f}", f"{lim['23'][i]:.6f}",
                     f"{lim['12'][i] / prev:.4f}", f"{kap[i]:.4f}", cell])
    log(f"### {NAMES[act]}: μ = {MU[act]:.6f}, 1 − μ = {1 - MU[act]:.6f}\n")
    table(["L", "σ̂^L(0.9)", "K12 limit", "K13 limit", "K23 limit", "K12^L/K12^(L−1)", "κ(K^L) limit",
           f"finite width n={N}, 8 trials"], rows)
    log(f"max over L = 1..{Ls[-1]} of |K12 limit − σ̂^L(0.9)|: {np.max(np.abs(lim['12'] - ref)):.1e}\n")
    shown = FINITE_DEPTH[act] if act != 3 else 2          # exp at L ≥ 3 does not converge: not plotted
    return {"L": Ls, "k12": lim["12"], "kappa": kap, "fw_L": list(range(1, shown + 1)),
            "fw_k12": fw["12"].mean(0)[:shown], "fw_k12_se": fw["12"].std(0, ddof=1)[:shown] / sqrt(8),
            "fw_kappa": ks.mean(0)[:shown], "fw_kappa_se": ks.std(0, ddof=1)[:shown] / sqrt(8)}


def seed004() -> None:
    mu_prog = str(PROG / "cond_mu.tp")

    log("## 004-1 coefficient of non-linearity: cond_mu.tp\n")
    with timed("004-1"):
        lim = tp.load(mu_prog).compile(symbolic=True).limit().outputs
        r = tp.load(mu_prog).execute(n=4096, trials=8, seed=SEED).outputs
    rows = []
    for key, act in [("mu_relu", 1), ("mu_step", 2), ("mu_exp", 3), ("mu_normrelu", 4)]:
        exact = lim[key].exact if len(str(lim[key].exact)) < 40 else "(erf/exp closed form)"
        rows.append([NAMES[act], f"{MU[act]:.6f}", f"{lim[key].value:.6f}", f"`{exact}`",
                     pm(r[key].mean, r[key].std / sqrt(8))])
    table(["σ (normalized)", "μ (derived)", "μ compiled", "closed form (tpc compile --symbolic)",
           "n=4096, 8 trials"], rows)
    log(f"NormReLU b = {B_KINK}: μ_b = {lim['mu_b'].value:.6f} (E max(X,b)), λ_b = {lim['lambda_b'].value:.6f}\n")

    log("## 004-2 kernel of three inputs against depth: cond_kernel.tp\n")
    log("(per activation one compile and one run at the largest depth, every layer read: `out KL12[l]` ...)\n")
    curves = {act: kernel_sweep(act) for act in (1, 2, 3, 4)}

    for what, fname, ylab in [("k12", "seed004_offdiag_decay.png", "K12^L (inputs' correlation 0.9)"),
                              ("kappa", "seed004_condition_number.png", "κ(K^L) − 1")]:
        fig, axs = plt.subplots(1, 2, figsize=(10, 3.9))
        for act, c in curves.items():
            ax, col = axs[1 if act == 4 else 0], f"C{act - 1}"
            L0 = np.array(c["L"], dtype=float)
            y = np.array(c[what]) - (1 if what == "kappa" else 0)
            lab = f"{NAMES[act]}, 1 − μ = {1 - MU[act]:.3f}"
            ax.semilogy(L0, y, "-", color=col, label=lab + " (limit)")
            if what == "k12":           # the asymptotic slope, anchored at the deepest point
                ax.semilogy(L0, y[-1] * (1 - MU[act]) ** (L0 - L0[-1]), ":", color=col, lw=1)
            if c["fw_L"]:
                fy = np.array(c["fw_" + what]) - (1 if what == "kappa" else 0)
                ax.errorbar(c["fw_L"], fy, c["fw_" + what + "_se"], fmt="o", ms=3, color=col, capsize=2)
        for ax in axs:
            ax.plot([], [], "ko", ms=3, label=f"finite width n={N}, 8 trials")
            if what == "k12":
                ax.plot([], [], "k:", label="slope (1 − μ) per layer")
            ax.set_xlabel("depth L")
            ax.set_ylabel(ylab)
            ax.legend(fontsize=7)
        axs[0].set_title(("off-diagonal decay" if what == "k12" else "condition number (κ₀ = 46.9)")
                         + ": ReLU, step, exp")
        axs[1].set_title("NormReLU (eq. 4), b = −1.6: μ = 0.0155")
        fig.tight_layout()
        fig.savefig(IMG / fname, dpi=120)
        plt.close(fig)

if __name__ == "__main__":
    which = sys.argv[1:] or ["003", "004"]
    IMG.mkdir(parents=True, exist_ok=True)
    for name, section in (("003", seed003), ("003-lambda", seed003_lambda_exact), ("004", seed004)):
        if name in which:                      # 003-lambda on request: ~50 s CPU
            cpu, wall = time.process_time(), time.perf_counter()
            section()
            log(f"[{name}: {time.process_time() - cpu:.0f} s CPU, {time.perf_counter() - wall:.0f} s wall]\n")
