"""Every shipped program (``programs/**/*.tp``) compiled with ``--symbolic`` (params as leaves,
issue 23): CPU seconds of the symbolic and the plain compile, in a fresh process each (import
excluded), how many outputs have a closed form, and the largest gap between the two compiles'
values relative to their stated errors.

    PYTHONPATH=. python bench/symbolic_programs.py [--limit 120] [programs/x.tp ...]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import numpy as np
import tensorprog as tp
program = tp.load(sys.argv[1])
t = time.process_time()
symbolic = program.compile(symbolic=True)
limits = {o.name: symbolic.result(o.var) for o in symbolic.program.outputs}
t_symbolic = time.process_time() - t
t = time.process_time()
plain = program.compile()
t_plain = time.process_time() - t
gap = 0.0
for o in plain.program.outputs:
    a, b = limits[o.name], plain.result(o.var)
    tol = np.asarray(a.error) + np.asarray(b.error) + 1e-12
    gap = max(gap, float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value)) / tol)))
closed = sum(v.exact is not None and bool(v.exact.free_symbols) for v in limits.values())
print(json.dumps({"symbolic_s": t_symbolic, "plain_s": t_plain, "outputs": len(limits),
                  "closed_in_params": closed, "gap_in_errors": gap}))
"""


def shipped() -> list[str]:
    """The shipped programs, relative to the repository root."""
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("programs/**/*.tp"))


def run(path: str, limit: float) -> dict:
    """One program in a fresh process under a CPU-time limit of ``limit`` seconds."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_CPU, (int(limit), int(limit) + 5))
    proc = subprocess.run([sys.executable, "-c", CHILD, path], cwd=ROOT, capture_output=True, text=True,
                          preexec_fn=cap)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["killed (CPU limit)"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", help="programs (default: every shipped one)")
    parser.add_argument("--limit", type=float, default=120, help="CPU seconds per program")
    args = parser.parse_args()
    for path in args.paths or shipped():
        r = run(path, args.limit)
        if "error" in r:
            print(f"{path:45s} ERROR {r['error']}", flush=True)
        else:
            print(f"{path:45s} symbolic {r['symbolic_s']:7.2f} s  plain {r['plain_s']:6.2f} s  "
                  f"closed forms {r['closed_in_params']}/{r['outputs']}  gap {r['gap_in_errors']:.2f} errors",
                  flush=True)


if __name__ == "__main__":
    main()
