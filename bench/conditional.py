"""The widest finite width: the ReLU NNGP program in conditional mode, time and memory per trial.

Program: ``programs/relu_nngp.tp`` (L = 3, rho = 0.3: two inputs through two n × n layers,
four products, exact limits kxx = 1/2 and kxy = the arc-cosine map applied three times, halved).
In conditional mode (``--conditional``) no matrix is stored or regenerated: each product is
drawn from its law given the earlier ones, so a trial costs O(n·k) time and memory (k = 2
products per matrix here) where a dense trial needs n² numbers and a blocked one draws them.

Every configuration (width n, dtype) runs its trials in a fresh subprocess, so that its peak
resident memory (ru_maxrss) is its own; the time per trial is the wall time of the trials
(load and planning excluded) divided by their number.

    PYTHONPATH=. python bench/conditional.py [--widths 1e6,1e7] [--f32-widths 1e7,1e8] [--trials 2] [--json out.json]

Measured on the project machine (2-core AMD EPYC VM, 23.5 GiB RAM, numpy 2.4.6 with OpenBLAS),
seed 0, while other work shared its 2 cores (load average in the table: wall times are 2–5×
those of an idle machine).  ``PYTHONPATH=. python bench/conditional.py --trials 2``:

| n | dtype | trials | s / trial | peak RSS | value − limit | load |
|---|---|---|---|---|---|---|
| 10^6 | float64 | 2 | 3.0 | 0.17 GiB | kxy -6.3e-04 kxx -1.7e-04 | 16.2 |
| 10^7 | float64 | 2 | 76.7 | 1.10 GiB | kxy -4.1e-04 kxx -8.6e-06 | 17.0 |
| 10^7 | float32 | 2 | 48.8 | 0.58 GiB | kxy -4.1e-04 kxx -8.7e-06 | 16.2 |
| 10^8 | float32 | 2 | 435.3 | 5.27 GiB | kxy -7.3e-05 kxx +7.6e-05 | 19.9 |

* n = 10^7 in float64: 77 s a trial at load 17 with a peak of 1.1 GiB (float32: 49 s, 0.58 GiB);
  a dense W at that width would be 10^14 numbers (800 TB), a blocked trial would draw
  2·10^14 random numbers (about 25 CPU-days at ~10 ns each).
* n = 10^8 in float32: 435 s a trial at load 20 with a peak of 5.3 GiB.
* Time and memory grow linearly in n from 10^7 on (float32, 10^7 → 10^8: ×8.9 in time, ×9.1 in
  memory); 10^6 → 10^7 is ×25 in time (probably the 10^6 arrays, 16 MB each, staying in cache).
  The deviations from the limit are the O(n^-1/2) fluctuations of two trials (1e-4 to 6e-4).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

PROGRAM = "programs/relu_nngp.tp"


def exact() -> dict[str, float]:
    """kxx = 1/2, kxy = the degree-1 arc-cosine map applied L = 3 times to rho = 0.3, halved."""
    k = 0.3
    for _ in range(3):
        k = (math.sqrt(1 - k * k) + (math.pi - math.acos(k)) * k) / math.pi
    return {"kxy": k / 2, "kxx": 0.5}


def child(n: int, dtype: str, trials: int, backend: str = "numpy", device: str = "cpu") -> None:
    """One configuration, in this (fresh) process: prints a JSON line.  On a GPU the first trial
    (kernel compilation, allocator warm-up) is run and left out of the time, and the peak is the
    device's (``torch.cuda.max_memory_allocated``) where torch runs."""
    import tensorprog as tp
    program = tp.load(PROGRAM)
    run = dict(n=n, dtype=dtype, conditional=True, jobs=1, backend=backend, device=device, progress=False)
    if device != "cpu":
        program.execute(trials=1, seed=99, **run)
    start = time.perf_counter()
    result = program.execute(trials=trials, seed=0, **run)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if backend == "torch" and device == "cuda":
        import torch
        peak = torch.cuda.max_memory_allocated()
    print(json.dumps({"n": n, "dtype": dtype, "backend": backend, "device": device, "trials": trials,
                      "seconds_per_trial": seconds / trials,
                      "peak_gib": peak / 2**30, "load": os.getloadavg()[0],
                      "values": {k: o.mean for k, o in result.outputs.items()},
                      "sem": {k: o.sem for k, o in result.outputs.items()}}))


def run(n: int, dtype: str, trials: int, backend: str = "numpy", device: str = "cpu") -> dict:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, __file__, "--child", str(n), dtype, str(trials), backend, device],
                         capture_output=True, text=True, env=env, cwd=root)
    if out.returncode:
        return {"n": n, "dtype": dtype, "error": error_text(out.stderr)}
    return json.loads(out.stdout.strip().splitlines()[-1])


def error_text(stderr: str) -> str:
    """The child's error, for the table: its last lines but the source line and caret that a located
    error prints under its message (the last line alone was just "^")."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip() and set(ln.strip()) != {"^"}]
    return " / ".join(lines[-3:])


def row(r: dict, limits: dict[str, float]) -> str:
    exp = round(math.log10(r["n"]))
    if "error" in r:
        return f"| 10^{exp} | {r['dtype']} | {r['error']} | | | | |"
    dev = " ".join(f"{k} {r['values'][k] - limits[k]:+.1e}" for k in limits)
    return (f"| 10^{exp} | {r['dtype']} | {r['trials']} | {r['seconds_per_trial']:.1f} | "
            f"{r['peak_gib']:.2f} GiB | {dev} | {r['load']:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--widths", default="1e6,1e7", help="float64 widths")
    ap.add_argument("--f32-widths", default="1e7,1e8", help="float32 widths")
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--json", default=None)
    ap.add_argument("--backend", default="numpy", help="numpy, torch, jax or cupy")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(int(args.child[0]), args.child[1], int(args.child[2]), args.child[3], args.child[4])
        return
    configs = [(int(float(w)), "float64") for w in args.widths.split(",") if w]
    configs += [(int(float(w)), "float32") for w in args.f32_widths.split(",") if w]
    limits, results = exact(), []
    print("| n | dtype | trials | s / trial | peak RSS | value − limit | load |")
    print("|---|---|---|---|---|---|---|")
    for n, dtype in configs:
        results.append(run(n, dtype, args.trials, args.backend, args.device))
        print(row(results[-1], limits), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
