"""Write the regression reference of compiled limits: tests/data/limits_before_forms.json.

The reference holds the limits the compiler gave BEFORE expectations went through linear forms
(issue 11: ``tensorprog/expect/forms.py``, ``tensorprog/expect/shapes.py``), so that
``tests/test_limit_regression.py`` can check the new compiler against the old one:

    {program path (relative to the repository root): {output: {"value", "error", "method"}}}

for every ``programs/*.tp``, ``programs/kernels/*.tp`` and ``tests/data/*.tp`` (the regression's own
programs: a ReLU ResNet of depth 6 and a tanh ResNet of depth 4 from two correlated inputs, the pre-LN
transformer with L = 2 and μP training with T = 1).

How the committed file was generated: with the tree of commit ac4814e ("finite.run exports its own
names only ..."), the last commit before the linear-form change c8bde4c, unpacked at /tmp/base11:

    python tools/make_limit_reference.py --old-tree /tmp/base11

Each program is compiled by that tree's CLI, from inside it (so that its package, not the installed
one, is imported):

    cd OLD_TREE && PYTHONPATH=OLD_TREE python -m tensorprog compile FILE --emit json

with the default budget (tol 1e-10).  A program the old tree fails on, or takes more than
``--timeout`` seconds for, is left out (and said so on stderr).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "limits_before_forms.json"
PATTERNS = ("programs/*.tp", "programs/kernels/*.tp", "tests/data/*.tp")


def programs() -> list[Path]:
    """Every program of the reference, as paths relative to the repository root."""
    return [p.relative_to(ROOT) for pattern in PATTERNS for p in sorted(ROOT.glob(pattern))]


def compile_old(program: Path, old_tree: Path, timeout: float) -> tuple[dict | None, float, str]:
    """(outputs as {name: {value, error, method}} or None, seconds, stderr) from the old tree's CLI."""
    env = dict(os.environ, PYTHONPATH=str(old_tree))
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "tensorprog", "compile", str(ROOT / program), "--emit", "json"],
                              cwd=old_tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - start, f"timed out after {timeout} s"
    took = time.perf_counter() - start
    if proc.returncode != 0:
        return None, took, proc.stderr.strip()
    outputs = json.loads(proc.stdout)["outputs"]
    return {name: {k: o[k] for k in ("value", "error", "method")} for name, o in outputs.items()}, took, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old-tree", type=Path, required=True, help="the source tree before the change")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per program at most")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    if not (args.old_tree / "tensorprog" / "__init__.py").is_file():
        parser.error(f"{args.old_tree} holds no tensorprog package")
    paths = programs()
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda p: compile_old(p, args.old_tree.resolve(), args.timeout), paths))
    reference = {}
    for path, (outputs, took, err) in zip(paths, results):
        print(f"{path}: {took:.1f} s{'' if outputs is not None else ' LEFT OUT: ' + err.splitlines()[-1]}",
              file=sys.stderr)
        if outputs is not None:
            reference[path.as_posix()] = outputs
    args.out.write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
