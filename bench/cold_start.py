"""The first tp.kernel call in a new process against the next ones (the warm-up target: cold ≤ 2× warm).

    python bench/cold_start.py TEMPLATE.tp X.npy [--L 10] [--var 2.0] [--repeats 3]

Prints one JSON line: {"import": s, "cold": s, "warm": s (best of the repeats), "ratio": cold/warm}.
"cold" is the first call after ``import tensorprog`` and the kernel module (the import itself is
reported apart); it loads the template's replay from the replay store when an earlier process
recorded it (``TENSORPROG_CACHE_DIR``; ``off`` shows the cost of recording it).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("template")
    ap.add_argument("inputs")
    ap.add_argument("--L", type=int, default=10)
    ap.add_argument("--var", type=float, default=2.0)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    X = np.load(a.inputs)
    t0 = time.perf_counter()
    import tensorprog as tp
    from tensorprog.tools import kernel  # noqa: F401  (the kernel machinery, imported before timing)
    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    tp.kernel(a.template, X, L=a.L, var=a.var, var1=a.var)
    cold = time.perf_counter() - t0
    warm = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        tp.kernel(a.template, X, L=a.L, var=a.var, var1=a.var)
        warm.append(time.perf_counter() - t0)
    print(json.dumps({"import": imported, "cold": cold, "warm": min(warm), "ratio": cold / min(warm)}))


if __name__ == "__main__":
    main()
