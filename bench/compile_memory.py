"""Peak memory and time of ``tpc compile programs/relu_nngp.tp -D L=depth`` against the depth (issue 28).

Each depth runs the CLI in a fresh subprocess (``python -m tensorprog compile ...``, cwd the tree,
``PYTHONPATH`` the tree) and reads its peak resident set size from ``os.wait4`` (the child's own
``ru_maxrss``, start-up included: about 50 MB of numpy, sympy and scipy).  ``--base DIR`` runs the
same commands on another tree (e.g. the commit before the fix, unpacked with ``git archive``), so
before and after are measured alike, one after the other on the same machine.

Before the fix every variable's set of estimates it rests on was a Python ``set``: a variable at
depth l rests on O(l) estimates, so the sets held O(L²) indices, ~60 bytes each.  They are now
bitsets (:mod:`tensorprog.limit.indices`).

    PYTHONPATH=. python bench/compile_memory.py [--depths 250,500,1000,2000] [--base /tmp/guards_base]

Measured on the 2 shared cores of the development machine (load 12-20 from other jobs, so the
seconds are noisy; peak memory is not), base = commit 72d0d1b unpacked by ``git archive``:

    L       base s   base MB    this tree s   this tree MB
    250       16.0       178           13.9            156
    500       17.3       250           19.3            159
    1000      25.9       527           25.1            166
    2000      49.5      1624           34.6            182
    4000         —   6100 (issue 28)  163.0            217

Both trees print the same text (``cmp`` of the output at L=300).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(tree: Path, depth: int) -> tuple[float, float]:
    """(seconds, peak RSS in MB) of one compile at ``depth`` with the code of ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "tensorprog", "compile", "programs/relu_nngp.tp",
                             "-D", f"L={depth}"], cwd=tree, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"compile at L={depth} failed in {tree}")
    return seconds, usage.ru_maxrss / 1024          # ru_maxrss is in KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--depths", default="250,500,1000,2000")
    ap.add_argument("--base", default=None, help="also run this tree (before the fix)")
    args = ap.parse_args()
    trees = [("this tree", ROOT)] + ([("base", Path(args.base))] if args.base else [])
    print(f"{'tree':<10} {'L':>6} {'seconds':>8} {'peak MB':>8}")
    for depth in (int(d) for d in args.depths.split(",")):
        for name, tree in trees:
            seconds, mb = measure(tree, depth)
            print(f"{name:<10} {depth:>6} {seconds:>8.1f} {mb:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
