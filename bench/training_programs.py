"""The long training programs (issue 23, item 4): CPU seconds of the plain and the ``--symbolic``
compile of mup_train_curve, mup_deep_train and dmft_tanh_depth3 at a number of steps T, each in a
fresh process (import excluded; the plain compile runs first, the symbolic one after it in the same
process reuses its numeric expectations, as ``tests/test_symbolic_params.py`` does the other way
round), and the largest gap between the two compiles' values in units of their stated errors.

    PYTHONPATH=. python bench/training_programs.py [--limit 900] [mup_train_curve.tp:3,4,5 ...]

Their expectations are integrals over O(T·P) Gaussians (QMC at ``max_qmc_points`` beyond three
dimensions), so the cost grows faster than linearly in T: the table says which T a test can afford.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time, warnings
import numpy as np
import tensorprog as tp
program = tp.load(sys.argv[1], T=int(sys.argv[2]))
warnings.simplefilter("ignore")
t = time.process_time()
plain = program.compile()
t_plain = time.process_time() - t
t = time.process_time()
symbolic = program.compile(symbolic=True)
t_symbolic = time.process_time() - t
gap = 0.0
for o in plain.program.outputs:
    a, b = symbolic.result(o.var), plain.result(o.var)
    tol = np.asarray(a.error) + np.asarray(b.error) + 1e-12
    gap = max(gap, float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value)) / tol)))
last = plain.result(plain.program.outputs[-1].var)
print(json.dumps({"plain_s": t_plain, "symbolic_s": t_symbolic, "gap_in_errors": gap,
                  "last_output": [float(last.value), float(last.error), last.method]}))
"""

DEFAULT = ["programs/mup_train_curve.tp:3,4,5,6", "programs/mup_deep_train.tp:1,2",
           "programs/dmft_tanh_depth3.tp:0,1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cases", nargs="*", default=DEFAULT, help="PROGRAM:T1,T2,...")
    parser.add_argument("--limit", type=float, default=900, help="wall seconds per (program, T)")
    args = parser.parse_args()
    rows = []
    for case in args.cases:
        path, steps = case.split(":")
        for T in steps.split(","):
            try:
                out = subprocess.run([sys.executable, "-c", CHILD, str(ROOT / path), T], capture_output=True,
                                     text=True, timeout=args.limit, cwd=ROOT)
                row = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
                    {"error": out.stderr.strip().splitlines()[-1:]}
            except subprocess.TimeoutExpired:
                row = {"error": f"over {args.limit:g} s"}
            rows.append({"program": path, "T": int(T), **row})
            print(json.dumps(rows[-1]), flush=True)
    (ROOT / "bench" / "results").mkdir(exist_ok=True)
    (ROOT / "bench" / "results" / "training_programs.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
