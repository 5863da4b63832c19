"""A data template's dataset kernel against the equivalent q-template's: time and agreement.

    python bench/data_kernel.py [--N 100] [--d 16] [--L 3] [--repeats 3] [--width 0]

programs/kernels/relu_mlp_data.tp (the input layer written as U @ x) and programs/kernels/relu_mlp.tp
(q11, q12, q22) on the same N random inputs (with an equal, an opposite and a parallel pair), ReLU
depth L.  Prints one JSON line per template: the first call in this process ("cold": records or
loads the replay; run with TENSORPROG_CACHE_DIR=off to see recording), the best of ``repeats``
later calls ("warm"), wall and CPU seconds (``--first``: which runs first and pays the imports) (time.process_time); then the largest relative
difference of each output between the two.  ``--width n``: the same at finite width n (4 trials;
then the median over entries of the difference in standard errors of two independent runs,
about 0.7 when they agree — less here, as the same seed draws the same hidden matrices; with 4
trials a maximum over thousands of entries says little).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--N", type=int, default=100)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--L", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--width", type=int, default=0)
    ap.add_argument("--first", choices=["data", "q"], default="data",
                    help="the template run first (its cold call pays the process's imports)")
    a = ap.parse_args()
    import tensorprog as tp
    X = np.random.default_rng(0).normal(size=(a.N, a.d))
    X[4], X[6], X[8] = X[2], -X[1], 3 * X[0]
    kw = dict(n=a.width or None, trials=4 if a.width else 1)
    results = {}
    order = [("data", "programs/kernels/relu_mlp_data.tp"), ("q", "programs/kernels/relu_mlp.tp")]
    for name, path in (order if a.first == "data" else order[::-1]):
        first, cold, cold_cpu = timed(lambda: tp.kernel(path, X, L=a.L, **kw))
        warm = [timed(lambda: tp.kernel(path, X, L=a.L, **kw))[1:] for _ in range(a.repeats)]
        best = min(warm)
        results[name] = first
        print(json.dumps({"template": name, "N": a.N, "L": a.L, "width": a.width or "limit",
                          "cold_s": round(cold, 4), "cold_cpu_s": round(cold_cpu, 4),
                          "warm_s": round(best[0], 4), "warm_cpu_s": round(best[1], 4)}))
    if not a.width:
        diff = {k: float(np.max(np.abs(results["data"].outputs[k].mean - results["q"].outputs[k].mean)
                                / np.abs(results["q"].outputs[k].mean))) for k in results["q"].outputs}
        print(json.dumps({"max_relative_difference": diff}))
        return
    z = {}                                 # the difference in standard errors (as if independent)
    for k in results["q"].outputs:
        d, q = results["data"].outputs[k], results["q"].outputs[k]
        se = np.sqrt((d.std ** 2 + q.std ** 2) / 4)
        z[k] = float(np.median(np.abs(d.mean - q.mean) / np.maximum(se, 1e-300)))
    print(json.dumps({"median_abs_z_of_the_difference": z}))


if __name__ == "__main__":
    main()
