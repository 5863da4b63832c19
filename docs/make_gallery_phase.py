"""Numbers and figures of docs/gallery_phase.md (phase diagrams by ``Program.sweep``).

    PYTHONPATH=. python docs/make_gallery_phase.py [--sw 31] [--sb 13]

Every sweep is checked at a few points against a recursion written here in numpy, independently
of the compiler (Gauss–Legendre quadrature on [−12, 12], the closed forms quoted in the programs).
"""
from __future__ import annotations

import argparse
import time

import numpy as np
from numpy.polynomial.legendre import leggauss
from scipy.optimize import brentq

import tensorprog as tp

IMG = "docs/img"
X, WX = leggauss(1500)
X, WX = 12 * X, 12 * WX * np.exp(-(12 * X) ** 2 / 2) / np.sqrt(2 * np.pi)     # ∫ f dγ ≈ f(X) @ WX
X2, W2 = leggauss(600)
X2, W2 = 12 * X2, 12 * W2 * np.exp(-(12 * X2) ** 2 / 2) / np.sqrt(2 * np.pi)


def e1(f, q):
    """E f(√q z), z ~ N(0, 1)."""
    return f(np.sqrt(q) * X) @ WX


def e2(f, g, q1, q2, k):
    """E f(u) g(v), (u, v) ~ N(0, [[q1, k], [k, q2]])."""
    a = np.sqrt(q1)
    rho = k / (a * np.sqrt(q2))
    u = a * X2[:, None]
    v = np.sqrt(q2) * (rho * X2[:, None] + np.sqrt(max(1 - rho ** 2, 0.0)) * X2[None, :])
    return W2 @ (f(u) * g(v)) @ W2


def tanh_recursion(sw: float, sb: float, L: int, rho: float = 0.5) -> dict:
    """q, c, χ₁ after L layers h -> W tanh(h) + b, by the mean-field maps."""
    q1 = q2 = 1.0
    k = rho
    for _ in range(L):
        q1, q2, k = (sw * e1(lambda t: np.tanh(t) ** 2, q1) + sb, sw * e1(lambda t: np.tanh(t) ** 2, q2) + sb,
                     sw * e2(np.tanh, np.tanh, q1, q2, k) + sb)
    return {"q": q1, "c": k / np.sqrt(q1 * q2), "chi1": sw * e1(lambda t: np.cosh(t) ** -4, q1)}


def critical_sw(sb: float) -> float:
    """σ_w² with χ₁ = 1 at the fixed point q* of q = σ_w² E tanh(√q z)² + σ_b² (Schoenholz et al.)."""
    def chi1(sw):
        q = 1.0
        for _ in range(2000):
            q_new = sw * e1(lambda t: np.tanh(t) ** 2, q) + sb
            if abs(q_new - q) < 1e-15:
                break
            q = q_new
        return sw * e1(lambda t: np.cosh(t) ** -4, q) - 1
    return brentq(chi1, 1.0, 3.0, xtol=1e-12)


def timed(fn):
    cpu = time.process_time()
    out = fn()
    return out, time.process_time() - cpu


def phase(args) -> None:
    text = open("programs/tanh_phase.tp").read() + \
        "out chi_c = sw * mean((1 - tanh(x) ** 2) * (1 - tanh(y) ** 2))\n"
    prog = tp.parse(text, file="programs/tanh_phase.tp")
    grid = {"sw": np.linspace(1, 4, args.sw), "sb": np.linspace(0.01, 0.3, args.sb)}
    res, cpu = timed(lambda: prog.sweep(grid))
    print(f"[phase] {args.sw} x {args.sb} grid, depth 20: {cpu:.1f} s CPU, {res.structures} structure(s), "
          f"max error {max(float(np.max(e)) for e in res.errors.values()):.1e}")
    chi_c = res.values["chi_c"]
    res.values["xi_c"] = -1 / np.log(np.where(chi_c < 1, chi_c, np.nan))
    res.errors["xi_c"] = res.errors["chi_c"] * res.values["xi_c"] ** 2 / np.where(chi_c < 1, chi_c, np.nan)
    res.methods["xi_c"] = res.methods["chi_c"]
    shown = type(res)(res.params, {k: res.values[k] for k in ("chi1", "c", "xi_c")},
                      {k: res.errors[k] for k in ("chi1", "c", "xi_c")},
                      {k: res.methods[k] for k in ("chi1", "c", "xi_c")})
    shown.plot(f"{IMG}/phase_tanh.png", {"chi1": [1.0]})
    for i, j in ((0, 0), (args.sw // 2, args.sb // 3), (args.sw - 1, args.sb - 1)):
        sw, sb = grid["sw"][i], grid["sb"][j]
        ref = tanh_recursion(sw, sb, 20)
        diffs = {k: abs(res.values[k][i, j] - ref[k]) for k in ref}
        print(f"[phase] sw={sw:.4g} sb={sb:.4g}: " + ", ".join(f"{k} {res.values[k][i, j]:.10f} "
              f"(recursion {ref[k]:.10f}, |diff| {diffs[k]:.1e}, error {res.errors[k][i, j]:.1e})" for k in ref))
    line, cpu = timed(lambda: tp.parse(text, sb=0.05).sweep({"sw": np.linspace(1.6, 1.9, 31)}))
    chi1 = line.values["chi1"]
    k = int(np.nonzero(np.diff(np.sign(chi1 - 1)))[0][0])
    s0, s1 = line.params["sw"][k:k + 2]
    crossing = s0 + (1 - chi1[k]) * (s1 - s0) / (chi1[k + 1] - chi1[k])
    print(f"[phase] sb = 0.05: chi1 = 1 at sw = {crossing:.4f} (sweep of 31 points, linear between them, "
          f"{cpu:.1f} s CPU); fixed-point recursion: {critical_sw(0.05):.4f}")
    line.plot(f"{IMG}/phase_tanh_line.png", {"chi1": [1.0]})


def batchnorm() -> None:
    Bs = [4, 5, 6, 8, 10]
    res, cpu = timed(lambda: tp.load("programs/bn_gradient.tp", sym=1).sweep({"B": Bs}))
    print(f"[batchnorm] B = {Bs}: {cpu:.1f} s CPU, {res.structures} structures")
    for i, B in enumerate(Bs):
        rho = -1 / (B - 1)
        j1 = (np.sqrt(1 - rho ** 2) + (np.pi - np.arccos(rho)) * rho) / np.pi
        j0 = (np.pi - np.arccos(rho)) / np.pi
        lam = (B - 2 + j0 + j1) / ((B - 3) * (1 - j1))
        v, e = res.values["rate"][i], res.errors["rate"][i]
        print(f"[batchnorm] B={B}: rate {v:.5f} ± {e:.2g} ({res.methods['rate'][i]}); closed form {lam:.5f}; "
              f"|diff| {abs(v - lam):.1e} {'within' if abs(v - lam) <= e else 'OUTSIDE'} the error")
    res.plot(f"{IMG}/phase_bn_rate.png")


def conditioning() -> None:
    Ls = list(range(1, 11))
    res, cpu = timed(lambda: tp.load("programs/cond_kernel.tp").sweep({"L": Ls}))
    print(f"[conditioning] L = 1..10, ReLU: {cpu:.1f} s CPU")

    def dual(r):
        return (np.sqrt(1 - r ** 2) + (np.pi - np.arccos(r)) * r - 1) / (np.pi - 1)
    r = np.array([0.9, 0.5, 0.2])
    worst = 0.0
    for i, L in enumerate(Ls):
        want = r.copy()
        for _ in range(L):               # K^L = σ̂ applied L times to the input Gram entries
            want = dual(want)
        got = np.array([res.values[k][i] for k in ("k12", "k13", "k23")])
        worst = max(worst, float(np.max(np.abs(got - want))))
        K = np.array([[1, got[0], got[1]], [got[0], 1, got[2]], [got[1], got[2], 1]])
        if L in (1, 2, 5, 10):
            print(f"[conditioning] L={L}: K12 {got[0]:.6f} K13 {got[1]:.6f} K23 {got[2]:.6f}, "
                  f"condition number {np.linalg.cond(K):.4f}")
    print(f"[conditioning] max |sweep - dual composition| over L = 1..10: {worst:.1e}")
    res.plot(f"{IMG}/phase_conditioning.png")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sw", type=int, default=31)
    ap.add_argument("--sb", type=int, default=13)
    ap.add_argument("--only", choices=["phase", "batchnorm", "conditioning"], default=None)
    args = ap.parse_args()
    if args.only in (None, "phase"):
        phase(args)
    if args.only in (None, "batchnorm"):
        batchnorm()
    if args.only in (None, "conditioning"):
        conditioning()


if __name__ == "__main__":
    main()
