"""Regenerate the numbers and plots of docs/gallery_003.md and docs/gallery_004.md.

    PYTHONPATH=. python docs/make_gallery_003_004.py            # both papers (~4 min, 1 core)
    PYTHONPATH=. python docs/make_gallery_003_004.py 004        # one of them
    PYTHONPATH=. python docs/make_gallery_003_004.py 003-lambda # λ_G(B) compiled exactly (issue 26)

Measured on a 2-core machine: 252 s wall (246 s CPU) for both, with another long compile running
on the second core; 130 s wall for 003 alone (second core busy for at least part of it); 59 s wall
(83 s CPU, BLAS on both cores) for 004 alone with the second core free.  After issue 26 (ReLU limits
exact): 003 alone 142 s CPU (307 s wall with the machine shared by several sessions); its compiles take
about 25 s of that (tanh by QMC 18 s), the rest is finite width and the reference Monte Carlo.
After the expansion speed-ups of expect/multiply.py: both 318 s CPU (user; 18:40 wall, machine loaded);
the issue-26 target of 2 minutes is not met.  Each section now logs its CPU and wall seconds.

Prints the tables (markdown) that the gallery pages quote and writes
docs/img/seed003_*.png and docs/img/seed004_*.png (matplotlib, Agg).  Every reference value
is computed here independently of the programs (closed forms or Monte Carlo on the sphere),
as in tests/test_paper_batchnorm.py and tests/test_paper_conditioning.py.
"""
from __future__ import annotations

import sys
import time
from math import acos, asin, e, exp, pi, sqrt
from pathlib import Path

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402,F401
import numpy as np  # noqa: E402
from scipy import integrate  # noqa: E402
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


def seed003() -> None:
    fixed, grad = str(PROG / "bn_fixed_point.tp"), str(PROG / "bn_gradient.tp")

    log("## 003-1 fixed point (Theorem 5): bn_fixed_point.tp, L = 1, BSB1 input\n")
    rows = []
    for B in (4, 6, 8):
        t = time.process_time()
        lim = tp.load(fixed, B=B).compile().limit().outputs
        r = tp.load(fixed, B=B).execute(n=N, trials=8, seed=SEED).outputs
        rows.append([B, "0.5", pm(lim["qavg"].value, lim["qavg"].error, 5), pm(r["qavg"].mean, r["qavg"].std / sqrt(8)),
                     f"{0.5 * J1(-1 / (B - 1)):.6f}", pm(lim["cavg"].value, lim["cavg"].error, 6),
                     pm(r["cavg"].mean, r["cavg"].std / sqrt(8)), f"{time.process_time() - t:.0f} s"])
    table(["B", "diag: paper", "diag: limit", f"diag: n={N}", "off-diag: ½J1(−1/(B−1))", "off-diag: limit",
           f"off-diag: n={N}", "cpu"], rows)

    log("## 003-2 convergence to the fixed point from a non-BSB1 input (ar = 1, rho = 0.9, B = 4)\n")
    target = 0.5 * J1(-1 / 3)
    rows, Ls, fw, lims = [], list(range(1, 9)), {}, {}
    for L in Ls:
        p = tp.load(fixed, B=4, L=L, ar=1, rho=0.9)
        r = p.execute(n=N, trials=8, seed=SEED).outputs
        fw[L] = r
        lim = p.compile().limit().outputs if L <= 4 else None
        if lim:
            lims[L] = lim
        cell = (lambda k: f"{lim[k].value:.5f}") if lim else (lambda k: "—")
        rows.append([L, cell("c12"), cell("c1B"), pm(r["c12"].mean, r["c12"].std / sqrt(8)),
                     pm(r["c1B"].mean, r["c1B"].std / sqrt(8)), cell("q11"), pm(r["q11"].mean, r["q11"].std / sqrt(8))])
    table(["L", "c12 limit", "c1B limit", f"c12 n={N}", f"c1B n={N}", "q11 limit", f"q11 n={N}"], rows)
    log(f"fixed point: q = 0.5, c = {target:.6f}\n")
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, (k, lab) in enumerate([("c12", "Σ₁₂ (input corr 0.9)"), ("c1B", "Σ₁₄ (input corr 0.729)")]):
        ax.errorbar(Ls, [fw[L][k].mean for L in Ls], [fw[L][k].std / sqrt(8) for L in Ls], fmt="o",
                    color=f"C{i}", capsize=3, label=f"{lab}, n={N}")
        ax.plot(list(lims), [lims[L][k].value for L in lims], "-", color=f"C{i}", label=f"{lab}, compiled limit")
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
    for B in (4, 5, 6):
        for act, name in ((1, "relu"), (2, "tanh")) + (((0, "linear"),) if B == 4 else ()):
            t = time.process_time()
            o = tp.load(grad, B=B, D=1, act=act, sym=1).compile().limit().outputs["rate"]
            compiled[(name, B)] = o
            ref = lambda_relu(B) if act == 1 else (lambda_mc(B, *TANH) if act == 2 else (B - 2) / (B - 3))
            rows.append([name, B, f"{ref:.4f}", pm(o.value, o.error, 4), o.method, f"{time.process_time() - t:.0f} s"])
    table(["φ", "B", "reference", "compiled limit (sym=1)", "method", "cpu"], rows)
    rows, finite = [], {}
    for B in (6, 8, 12):
        for act, name in ((1, "relu"), (2, "tanh")):
            r = tp.load(grad, B=B, D=1, act=act).execute(n=N, trials=16, seed=SEED).outputs["rate"]
            finite[(name, B)] = r
            ref = lambda_relu(B) if act == 1 else lambda_mc(B, *TANH)
            rows.append([name, B, f"{ref:.4f}", pm(r.mean, r.std / 4, 3)])
    table(["φ", "B", "reference", f"finite width n={N}, 16 trials"], rows)

    Bs = np.arange(4, 65)
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    ax.plot(Bs, [lambda_relu(int(B)) for B in Bs], "C0-", label="ReLU: closed form")
    tb = [4, 5, 6, 8, 12, 16, 24, 32, 48, 64]
    ax.plot(tb, [lambda_mc(B, *TANH, m=100_000) for B in tb], "C1-", label="tanh: Monte Carlo on the sphere")
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
    Ds, rows = list(range(1, 11)), []
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for i, B in enumerate((6, 8, 12)):
        means, sems = [], []
        for D in Ds:
            r = tp.load(grad, B=B, D=D, act=1).execute(n=N, trials=8, seed=SEED).outputs
            ratio = np.log(np.array(r["n_bot"].values) / np.array(r["n_top"].values))
            means.append(ratio.mean())
            sems.append(ratio.std(ddof=1) / sqrt(8))
        ax.errorbar(Ds, means, sems, fmt="o", color=f"C{i}", capsize=2, label=f"B = {B}, n = {N}")
        ax.plot([0] + Ds, [D * np.log(lambda_relu(B)) for D in [0] + Ds], color=f"C{i}", ls="--")
        slope = np.polyfit(Ds, means, 1)[0]
        rows.append([B, f"{np.log(lambda_relu(B)):.4f}", f"{slope:.4f}", f"{means[-1]:.3f} ± {sems[-1]:.3f}",
                     f"{Ds[-1] * np.log(lambda_relu(B)):.3f}"])
    ax.plot([], [], "k--", label="limit: D·log λ_G(B)")
    ax.set_xlabel("layers back-propagated D")
    ax.set_ylabel("log(‖dh at layer 2‖² / ‖g‖²)")
    ax.set_title("ReLU + batchnorm: gradients explode with depth")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "seed003_gradnorm_depth.png", dpi=120)
    plt.close(fig)
    table(["B", "limit slope log λ_G", f"fitted slope, n={N}", "log ratio at D=10, n=1024", "limit at D=10"], rows)


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


def dual_normrelu(rho: float) -> float:
    s = sqrt(max(1 - rho * rho, 0.0))

    def inner(u):
        if s == 0:
            return max(rho * u, B_KINK)
        m = rho * u - B_KINK
        return B_KINK + m * norm.cdf(m / s) + s * norm.pdf(m / s)
    f = lambda u: norm.pdf(u) * max(u, B_KINK) * inner(u)
    edges = [-np.inf, B_KINK, np.inf]
    val = sum(integrate.quad(f, a, c, epsabs=1e-13, epsrel=1e-12)[0] for a, c in zip(edges, edges[1:]))
    return LAM_B ** 2 * (val - MU_B ** 2)


DUALS = {1: lambda r: (sqrt(1 - r * r) + (pi - acos(r)) * r - 1) / (pi - 1),
         2: lambda r: 2 / pi * asin(r), 3: lambda r: (exp(r) - 1) / (e - 1), 4: dual_normrelu}
MU = {1: (pi - 2) / (2 * (pi - 1)), 2: 1 - 2 / pi, 3: (e - 2) / (e - 1), 4: 1 - LAM_B ** 2 * norm.sf(B_KINK) ** 2}
NAMES = {1: "ReLU", 2: "step", 3: "exp", 4: f"NormReLU (b = {B_KINK})"}
GRAM = {"k12": 0.9, "k13": 0.5, "k23": 0.2}


def kappa(k: dict) -> float:
    K = np.array([[k["k11"], k["k12"], k["k13"]], [k["k12"], k["k22"], k["k23"]], [k["k13"], k["k23"], k["k33"]]])
    w = np.linalg.eigvalsh(K)
    return float(w[-1] / w[0])


def seed004() -> None:
    mu_prog, kern = str(PROG / "cond_mu.tp"), str(PROG / "cond_kernel.tp")

    log("## 004-1 coefficient of non-linearity: cond_mu.tp\n")
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
    depths = {1: list(range(1, 13)), 2: list(range(1, 13)), 3: list(range(1, 13)),
              4: [1, 2, 5, 10, 20, 50, 100, 200]}
    curves = {}
    for act in (1, 2, 3, 4):
        rows, c = [], {"L": [], "k12": [], "kappa": [], "fw_L": [], "fw_k12": [], "fw_k12_se": [],
                       "fw_kappa": [], "fw_kappa_se": []}
        for L in depths[act]:
            p = tp.load(kern, act=act, L=L, b=B_KINK)
            lim = {k: v.value for k, v in p.compile().limit().outputs.items()}
            rho = 0.9
            for _ in range(L):
                rho = DUALS[act](rho)
            c["L"].append(L), c["k12"].append(lim["k12"]), c["kappa"].append(kappa(lim))
            fw_cell = "—"
            if L <= 12:
                try:
                    r = p.execute(n=N, trials=8, seed=SEED).outputs
                    ks = [kappa({k: v.values[t] for k, v in r.items()}) for t in range(8)]
                    if act != 3 or L <= 2:         # exp at L ≥ 3 does not converge: not plotted
                        c["fw_L"].append(L), c["fw_k12"].append(r["k12"].mean)
                        c["fw_k12_se"].append(r["k12"].std / sqrt(8))
                        c["fw_kappa"].append(np.mean(ks)), c["fw_kappa_se"].append(np.std(ks, ddof=1) / sqrt(8))
                    if np.mean(ks) < 1e3:
                        fw_cell = (f"K12 {pm(r['k12'].mean, r['k12'].std / sqrt(8), 3)}, "
                                   f"κ {pm(np.mean(ks), np.std(ks, ddof=1) / sqrt(8), 2)}")
                    else:
                        fw_cell = f"diverges: K12 = {r['k12'].mean:.2g}, κ = {np.mean(ks):.2g}"
                except tp.TPError as err:
                    fw_cell = "stopped: " + str(err).split(": ", 1)[1].split(" (")[0]
            rows.append([L, f"{rho:.6f}", f"{lim['k12']:.6f}", f"{lim['k13']:.6f}", f"{lim['k23']:.6f}",
                         f"{lim['k12'] / lim['k12_prev']:.4f}", f"{kappa(lim):.4f}", fw_cell])
        curves[act] = c
        log(f"### {NAMES[act]}: μ = {MU[act]:.6f}, 1 − μ = {1 - MU[act]:.6f}\n")
        table(["L", "σ̂^L(0.9)", "K12 limit", "K13 limit", "K23 limit", "K12^L/K12^(L−1)", "κ(K^L) limit",
               f"finite width n={N}, 8 trials"], rows)

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
