"""Limit-compiler benchmarks (issue: the limit compiler).

1. tanh MLP NNGP kernel, depth L = 3: compiled limit against an independent reference
   (300-point Gauss–Hermite tensor quadrature per layer, in numpy), and the time per kernel
   entry (compile + limit of one (kxy, kxx) pair, in process, after a warm-up);
   target: error ≤ 1e-8 in < 0.1 s per entry.
2. Compile + limit time for the 12th Wigner moment, and for two SGD steps of a network
   with one hidden n×n layer (transposes: Ż terms).

    python bench/compile_bench.py
"""
from __future__ import annotations

import math
import time

import numpy as np

import tensorprog as tp

WIGNER_12 = """
vector v ~ normal()
matrix W ~ normal()
p[0] = v
for k in 1..6 { p[k] = (W @ p[k-1] + W.T @ p[k-1]) / sqrt(2) }
out m12 = mean(p[6] * p[6])
"""

SGD_TWO_STEPS = """
param xi = 1.0
param y = 1.0
param lr = 0.5
vector u, v ~ normal(cov=[[1, 0], [0, 1]])
matrix W ~ normal()
x = u * xi
h = W @ tanh(x)
f = mean(v * tanh(h))
for s in 1..2 {
    g = f - y
    dh = g * v * (1 - tanh(h) ** 2)
    dx = (W.T @ dh) * (1 - tanh(x) ** 2)
    v = v - lr * g * tanh(h)
    u1 = u - lr * dx * xi
    x1 = u1 * xi
    h = W @ tanh(x1) - lr * dh * mean(tanh(x) * tanh(x1))
    u = u1
    x = x1
    f = mean(v * tanh(h))
}
out f2 = f
"""


def gh_reference(L: int, rho: float, var: float, points: int = 300) -> tuple[float, float]:
    """(kxy, kxx) by a 300-point Gauss–Hermite tensor rule at every layer."""
    t, w = np.polynomial.hermite_e.hermegauss(points)
    w = w / w.sum()
    a, b = np.meshgrid(t, t, indexing="ij")
    wt = np.outer(w, w)
    q, c = 1.0, rho

    def moments(q: float, c: float) -> tuple[float, float]:
        r = c / q
        u = math.sqrt(q) * a
        v = math.sqrt(q) * (r * a + math.sqrt(max(1 - r * r, 0.0)) * b)
        return float(np.sum(wt * np.tanh(u) ** 2)), float(np.sum(wt * np.tanh(u) * np.tanh(v)))
    for _ in range(L - 1):
        e2, e12 = moments(q, c)
        q, c = var * e2, var * e12
    e2, e12 = moments(q, c)
    return e12, e2


def timed(fn, repeat: int = 3) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - t0)
    return best, value


def main() -> None:
    L, rho, var = 3, 0.5, 1.5
    tp.load("programs/tanh_nngp.tp", L=L, rho=0.1, var=var).compile().limit()   # warm-up: imports
    worst, slowest = 0.0, 0.0
    for r in (rho, 0.3, -0.2, 0.9):        # a different input pair each time: nothing is cached
        t0 = time.perf_counter()
        lim = tp.load("programs/tanh_nngp.tp", L=L, rho=r, var=var).compile().limit()
        slowest = max(slowest, time.perf_counter() - t0)
        ref = gh_reference(L, r, var)
        err = max(abs(lim.outputs["kxy"].value - ref[0]), abs(lim.outputs["kxx"].value - ref[1]))
        est = max(lim.outputs["kxy"].error, lim.outputs["kxx"].error)
        worst = max(worst, err)
        assert err <= est + 1e-14, (r, err, est)
    print(f"tanh MLP kernel, depth {L}, 4 input pairs: max |limit − 300-pt reference| = {worst:.1e} "
          f"(each within its reported error), method {lim.outputs['kxy'].method}; "
          f"slowest {slowest:.3f} s per kernel entry (kxy and kxx together)")
    seconds, lim = timed(lambda: tp.parse(WIGNER_12).compile(symbolic=True).limit(), repeat=1)
    print(f"12th Wigner moment: {lim.outputs['m12'].exact} (Catalan(6) = 132) in {seconds:.2f} s")
    seconds, lim = timed(lambda: tp.parse(SGD_TWO_STEPS).compile().limit(), repeat=1)
    o = lim.outputs["f2"]
    print(f"two SGD steps, one hidden n×n layer: f2 = {o.value:.10f} ± {o.error:.1e} ({o.method}) "
          f"in {seconds:.2f} s")


if __name__ == "__main__":
    main()
