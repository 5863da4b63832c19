"""How wide can one trial go on this machine?  Dense against blocked matrices, float32 and float64.

Program (one layer; the limit of k is 2·E[relu(x)²] = 1):

    vector x ~ normal()
    matrix W ~ normal(var=2)
    h = W @ relu(x)
    out k = mean(h * h)

Every configuration (width n, dtype, dense or blocked) runs one trial in a fresh
subprocess, so that its peak resident memory (ru_maxrss) is its own.  Dense runs
store W (n² entries); the executor refuses them before allocating when they do not
fit.  Blocked runs regenerate W row block by row block (``blocked=True``), using
every core for the generation.  A blocked run is first timed on a slice of rows
(the cost per row is the same for every row); if the full run would take longer
than ``--max-seconds`` only that estimate is reported ("estimated"), otherwise the
full trial runs ("full").  Timings are wall-clock seconds and the process's CPU
seconds; the load average of the machine is printed with them (this bench shares
its 2 cores with whatever else runs).

    python bench/width_limit.py [--dense 13,14,15,16] [--blocked 15,16,17]
                                [--dtypes float32,float64] [--max-seconds 600] [--json out.json]

Measured on the project machine (2-core AMD EPYC VM, 23.5 GiB RAM, numpy 2.4.6 with
OpenBLAS), one trial, seed 0.  The machine was shared with other work the whole time
(load average 6–11 on 2 cores), so wall times are about 2–3× what an idle machine
gives; CPU seconds are the steadier figure (a blocked run uses both cores: idle wall
≈ CPU / 2).  ``python bench/width_limit.py`` (with ``--max-seconds 3000`` for the
2^17 rows, which the default 600 s budget only estimates: 708 s / 1138 s from 2048 rows):

| n | dtype | matrices | W would need | status | wall s | CPU s | peak RSS | k (limit 1) | load |
|---|---|---|---|---|---|---|---|---|---|
| 2^13 | float32 | dense | 0.25 GiB | full | 1.5 | 0.8 | 0.38 GiB | 0.99189 | 9.6 |
| 2^13 | float64 | dense | 0.50 GiB | full | 2.3 | 1.2 | 0.63 GiB | 1.00453 | 9.6 |
| 2^14 | float32 | dense | 1.00 GiB | full | 8.1 | 4.1 | 1.13 GiB | 0.98182 | 9.4 |
| 2^14 | float64 | dense | 2.00 GiB | full | 14.7 | 5.9 | 2.13 GiB | 1.02456 | 9.3 |
| 2^15 | float32 | dense | 4.00 GiB | full | 43.0 | 19.1 | 4.13 GiB | 0.98530 | 9.6 |
| 2^15 | float64 | dense | 8.00 GiB | full | 75.6 | 26.5 | 8.13 GiB | 1.00827 | 9.0 |
| 2^16 | float32 | dense | 16.00 GiB | full | 213 | 70.8 | 16.13 GiB | 1.00349 | 10.7 |
| 2^16 | float64 | dense | 32.00 GiB | refused before allocating (32 GiB > 19.6 GiB) | — | — | — | — | 11.6 |
| 2^15 | float32 | blocked | 4.00 GiB | full | 52.0 | 17.8 | 0.16 GiB | 1.00714 | 11.6 |
| 2^15 | float64 | blocked | 8.00 GiB | full | 50.9 | 22.4 | 0.18 GiB | 1.00652 | 11.0 |
| 2^16 | float32 | blocked | 16.00 GiB | full | 184 | 66.9 | 0.16 GiB | 0.99683 | 9.1 |
| 2^16 | float64 | blocked | 32.00 GiB | full | 217 | 89.8 | 0.17 GiB | 0.99624 | 10.1 |
| **2^17** | float32 | blocked | 64.00 GiB | **full** | 763 | 281 | 0.16 GiB | 0.99055 | 6.7 |
| **2^17** | float64 | blocked | 128.00 GiB | **full** | 854 | 372 | 0.17 GiB | 0.99443 | 6.2 |

A rerun at load 4–5: 2^15 float64 dense 54.1 s wall (26.7 CPU), blocked 40.6 s
(25.5 CPU); 2^16 float64 blocked 183 s (97 CPU).

* Largest width reached: n = 2^17 = 131072 (2^34 ≈ 1.7·10^10 entries of W, which
  would need 64 GiB in float32 and 128 GiB in float64), a full trial in blocked mode
  with a peak RSS of 0.17 GiB.  Dense matrices stop at 2^16 in float32 and between
  2^15 and 2^16 in float64.
* The cost is generating the random numbers (about 10–12 ns of CPU per normal entry
  with Philox, the same as numpy's default PCG64): time grows as n², memory as n.
  Blocked is not slower than dense per entry, and it uses both cores for the
  generation where dense sampling uses one.  2^18 would take 4× the 2^17 time
  (≈ 9–13 min on an idle machine by the CPU times above, about an hour at this
  load), in the same 0.2 GiB.
* The float32 saving is small for blocked runs (generation, not memory traffic,
  dominates); for dense runs float32 is what lets 2^16 fit.
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

PROGRAM = """
vector x ~ normal()
matrix W ~ normal(var=2)
h = W @ relu(x)
out k = mean(h * h)
"""
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))          # this checkout's tensorprog, installed or not


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(n: int, dtype: str, mode: str, max_seconds: float, seed: int) -> dict:
    """One configuration, in this process; returns a JSON-able row."""
    import numpy as np
    import tensorprog as tp
    from tensorprog.distributions.blocked import BlockedMatrix, matrix_key
    from tensorprog.finite.plan import plan_run
    program = tp.parse(PROGRAM)
    blocked = mode == "blocked"
    itemsize = np.dtype(dtype).itemsize
    row = {"n": n, "log2n": round(math.log2(n), 2), "dtype": dtype, "mode": mode,
           "entries": n * n, "matrix_gib": n * n * itemsize / 2**30, "load": os.getloadavg()[0]}
    try:
        plan = plan_run(program.ir, n, seed, dtype, None, blocked=blocked)
    except tp.TPLimitError as err:
        row.update(status="refused", message=err.message.split(";")[0])
        return row
    row["peak_estimate_gib"] = plan.peak / 2**30
    est = None
    if blocked:                                   # time a slice of rows, extrapolate
        w_var = next(e.var for e in program.ir.eqns if type(e).__name__ == "Matrix")
        spec = program.ir.eqns[w_var].dist
        rows = max(64, min(n, int(2**28 // n)))   # about 2^28 entries
        part = BlockedMatrix(matrix_key(seed, 0, w_var), spec, rows, n, dtype, threads=plan.threads)
        part.block_rows = plan.rows_per_block(n, n)
        x = np.ones(n, dtype)
        t0, c0 = time.perf_counter(), cpu_seconds()
        part.matmul(x)
        t1, c1 = time.perf_counter(), cpu_seconds()
        est = (t1 - t0) * n / rows
        row.update(slice_rows=rows, estimate_s=est, estimate_cpu_s=(c1 - c0) * n / rows)
        if est > max_seconds:
            row.update(status="estimated", ns_per_entry=1e9 * (t1 - t0) / (rows * n))
            return row
    t0, c0 = time.perf_counter(), cpu_seconds()
    r = program.execute(n=n, trials=1, seed=seed, dtype=dtype, blocked=blocked, progress=False)
    t1, c1 = time.perf_counter(), cpu_seconds()
    k = r.outputs["k"].values[0]
    row.update(status="full", wall_s=t1 - t0, cpu_s=c1 - c0, k=k, ns_per_entry=1e9 * (t1 - t0) / (n * n),
               maxrss_gib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 2**30,
               load_after=os.getloadavg()[0])
    return row


def run_subprocess(n: int, dtype: str, mode: str, max_seconds: float, seed: int) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", str(n), dtype, mode,
           "--max-seconds", str(max_seconds), "--seed", str(seed)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"n": n, "log2n": round(math.log2(n), 2), "dtype": dtype, "mode": mode,
                "status": "failed", "message": p.stderr.strip().splitlines()[-1:] or ["?"]}
    return json.loads(p.stdout.strip().splitlines()[-1])


def fmt_s(x) -> str:
    if x is None:
        return "—"
    return f"{x:.1f}" if x < 100 else f"{x:.0f}"


def table(rows: list[dict]) -> str:
    lines = ["| n | dtype | matrices | W would need | status | wall s | CPU s | ns/entry (wall) "
             "| peak RSS | k (limit 1) | load avg |", "|" + "---|" * 11]
    for r in rows:
        status, wall, cpu = r["status"], r.get("wall_s"), r.get("cpu_s")
        if status == "estimated":
            status = f"estimated from {r['slice_rows']} rows"
            wall, cpu = r["estimate_s"], r["estimate_cpu_s"]
        elif status in ("refused", "failed"):
            status = f"{status}: {r.get('message')}"
        cells = [f"2^{r['log2n']:g}", r["dtype"], r["mode"], f"{r.get('matrix_gib', 0):.2f} GiB", status,
                 fmt_s(wall), fmt_s(cpu),
                 f"{r['ns_per_entry']:.1f}" if "ns_per_entry" in r else "—",
                 f"{r['maxrss_gib']:.2f} GiB" if "maxrss_gib" in r else "—",
                 f"{r['k']:.5f}" if "k" in r else "—",
                 f"{r['load']:.1f}" if "load" in r else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", nargs=3, metavar=("N", "DTYPE", "MODE"), help=argparse.SUPPRESS)
    ap.add_argument("--dense", default="13,14,15,16", help="log2 widths run with dense matrices")
    ap.add_argument("--blocked", default="15,16,17", help="log2 widths run with blocked matrices")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--max-seconds", type=float, default=600.0,
                    help="run a blocked width in full only if its estimate is below this")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    a = ap.parse_args()
    if a.one:
        n, dtype, mode = a.one
        print(json.dumps(one(int(n), dtype, mode, a.max_seconds, a.seed)))
        return
    import numpy as np
    from tensorprog.finite.memory import available_memory
    from tensorprog.finite.parallel import cpu_count
    print(f"machine: {cpu_count()} cores, {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} "
          f"GiB RAM, {available_memory() / 2**30:.1f} GiB available, load average {os.getloadavg()[0]:.1f}; "
          f"numpy {np.__version__}", flush=True)
    rows = []
    configs = [(int(e), d, "dense") for d in a.dtypes.split(",") for e in a.dense.split(",") if e] + \
              [(int(e), d, "blocked") for d in a.dtypes.split(",") for e in a.blocked.split(",") if e]
    for e, dtype, mode in sorted(configs, key=lambda c: (c[2] != "dense", c[0], c[1])):
        t0 = time.perf_counter()
        r = run_subprocess(2**e, dtype, mode, a.max_seconds, a.seed)
        rows.append(r)
        print(f"  2^{e} {dtype} {mode}: {r['status']} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
              flush=True)
    print(table(rows))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
