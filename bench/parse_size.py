"""Checking time against program size, and the time to refuse a program over the size cap (issue 28).

For sizes up to :data:`tensorprog.lang.source.MAX_SOURCE_CHARS` (256 KiB), a program of unrolled
statements ``h{i} = W @ relu(x) + x * {i}.5`` is checked with ``tp.parse`` (parse and lower, in
process, after a warm-up), best of ``--repeat``, in CPU seconds; the time per kB should stay flat (linear in the
size).  Then a 5 MB program and a 5 MB expression (``x + x + ... + x``), which took 221 s and 286 s
to check before the cap, are refused: the time to the TPLimitError is printed.

    PYTHONPATH=. python bench/parse_size.py [--repeat 2]

Measured (``--repeat 1``, 2 shared cores, CPU seconds):

       chars    CPU s  ms per kB
       16384     0.46       29.0
       32768     0.60       18.7
       65536     1.72       26.8
      131072     2.82       22.1
      262144     6.24       24.4
    5 MB of statements refused in 0.061 s   (was 221 s and 1.25 GB to check)
    5 MB expression refused in 0.022 s      (was 286 s before its depth error)
"""
from __future__ import annotations

import argparse
import time

import tensorprog as tp
from tensorprog.errors import TPLimitError
from tensorprog.lang.source import MAX_SOURCE_CHARS

HEAD = "vector x ~ normal()\nmatrix W ~ normal()\n"


def statements(chars: int, tag: int) -> str:
    """About ``chars`` characters of statements (``tag`` makes the text unique: no cache hit)."""
    lines, size, i = [HEAD], len(HEAD), 0
    while size < chars - 40:
        line = f"h{i} = W @ relu(x) + x * {i}.{tag}\n"
        lines.append(line)
        size += len(line)
        i += 1
    lines.append("out o = mean(x * x)\n")
    return "".join(lines)


def seconds(call) -> float:
    """CPU seconds of ``call()`` (this process: other jobs on the machine do not count)."""
    start = time.process_time()
    call()
    return time.process_time() - start


def refused(text: str) -> float:
    start = time.perf_counter()
    try:
        tp.parse(text)
    except TPLimitError:
        return time.perf_counter() - start
    raise SystemExit("not refused")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    tp.parse(statements(2000, 0))                                     # warm-up: imports, parser tables
    print(f"{'chars':>8} {'CPU s':>8} {'ms per kB':>10}")
    size = 16 * 1024
    while size <= MAX_SOURCE_CHARS:
        best = min(seconds(lambda: tp.parse(statements(size, r + 1))) for r in range(args.repeat))
        print(f"{size:>8} {best:>8.2f} {1000 * best / (size / 1024):>10.1f}", flush=True)
        size *= 2
    five = 5 * 1024 * 1024
    print(f"5 MB of statements refused in {refused(statements(five, 9)):.3f} s")
    expr = HEAD + "out o = mean(" + "x + " * (five // 4) + "x)\n"
    print(f"5 MB expression refused in {refused(expr):.3f} s")


if __name__ == "__main__":
    main()
