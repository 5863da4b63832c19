"""Array backends against numpy: time per trial of one program at several widths.

CPU mode (the default): every CPU backend installed (numpy, torch, jax) runs the same program
(PROGRAM below: a batched ReLU MLP, B inputs through L layers, plus a transposed product, so
that matrix sampling, GEMMs and the nonlinearities all count) at each width, dense, one trial
per call after a warm-up call (imports, jax's and torch's first-call costs), best of
``--reps``, interleaved; the table gives seconds per trial and each backend's ratio to numpy
(target: ≤ 1.5 on CPU).

GPU mode (``--gpu``): for each GPU backend installed (torch, jax, cupy) on ``--device cuda``,
widths double from ``--start`` while the dense matrices fit in the device's memory, then go on
blocked (matrix-free, regenerated block by block on the device) up to ``--max-width``; numpy on
the CPU is timed at the same widths up to ``--cpu-max`` for the ratio.  One command::

    python bench/backends.py                       # CPU backends against numpy, this machine
    python bench/backends.py --gpu --json gpu.json # on a machine with a CUDA GPU

Every row names the device it ran on.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import tensorprog as tp
from tensorprog.errors import TPError
from tensorprog.finite.backend import BackendError, get_backend

PROGRAM = """
param B = 8
param L = 3
vector x[1..B] ~ normal()
for l in 1..L {
    matrix W ~ normal(var=2)
    for b in 1..B { x[b] = W @ relu(x[b]) }
}
matrix V ~ normal()
g = V.T @ tanh(x[1])
out k = mean(sum(b in 1..B: relu(x[b]) ** 2)) / B
out q = mean(g * g)
"""


def available(names: list[str], device: str) -> list[str]:
    """The backends of ``names`` that run on ``device`` here (others are reported and skipped)."""
    out = []
    for name in names:
        try:
            get_backend(name, device)
            out.append(name)
        except BackendError as err:
            print(f"# {name} on {device}: skipped ({err})")
    return out


def per_trial(program, n: int, backend: str, device: str, reps: int, blocked: bool | None = False,
              dtype: str = "float32") -> float:
    """Best seconds of one trial over ``reps`` calls (after one warm-up call)."""
    lib = get_backend(backend, device)
    run = dict(n=n, trials=1, dtype=dtype, backend=backend, device=device, blocked=blocked, progress=False)
    program.execute(seed=0, **run)
    best = float("inf")
    for r in range(reps):
        lib.synchronize()
        t = time.perf_counter()
        program.execute(seed=r + 1, **run)
        lib.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def cpu(widths: list[int], reps: int, dtype: str) -> list[dict]:
    program = tp.parse(PROGRAM)
    names = available(["numpy", "torch", "jax"], "cpu")
    rows = []
    print(f"{'width':>7} " + " ".join(f"{b:>16}" for b in names) + "   (s per trial; ratio to numpy)")
    for n in widths:
        times = {}
        for b in names:                                   # interleaved: the same machine state
            times[b] = per_trial(program, n, b, "cpu", reps, dtype=dtype)
        rows.append({"width": n, "device": "cpu", "dtype": dtype, "seconds": times,
                     "ratio": {b: times[b] / times["numpy"] for b in names}})
        print(f"{n:>7} " + " ".join(f"{times[b]:>8.4f} ({times[b] / times['numpy']:.2f}x)" for b in names))
    return rows


def gpu(start: int, max_width: int, cpu_max: int, reps: int, dtype: str,
        backends: list[str] | None = None) -> list[dict]:
    program = tp.parse(PROGRAM)
    names = available(backends or ["torch", "jax", "cupy"], "cuda")
    rows = []
    for b in names:
        n, blocked = start, False
        while n <= max_width:
            try:
                t = per_trial(program, n, b, "cuda", reps, blocked=blocked, dtype=dtype)
            except TPError as err:             # the dense matrices no longer fit: blocked from here
                if blocked:
                    print(f"# {b} n={n}: {err.message}")
                    break
                blocked = True
                continue
            row = {"width": n, "backend": b, "device": "cuda", "blocked": blocked, "dtype": dtype,
                   "seconds": t}
            if n <= cpu_max:
                row["numpy_cpu_seconds"] = per_trial(program, n, "numpy", "cpu", 1, blocked=None, dtype=dtype)
            rows.append(row)
            ratio = (f", numpy CPU {row['numpy_cpu_seconds']:.3f} s ({row['numpy_cpu_seconds'] / t:.1f}x)"
                     if "numpy_cpu_seconds" in row else "")
            print(f"{b:>6} cuda n={n:>7} {'blocked' if blocked else 'dense':>7}: {t:.4f} s per trial{ratio}")
            n *= 2
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", default="512,1024,2048,4096", help="CPU mode widths")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--gpu", action="store_true", help="GPU mode (needs a CUDA device)")
    ap.add_argument("--start", type=int, default=4096, help="GPU mode: first width")
    ap.add_argument("--max-width", type=int, default=1 << 17, help="GPU mode: last width (blocked beyond memory)")
    ap.add_argument("--cpu-max", type=int, default=8192, help="GPU mode: numpy on the CPU up to this width")
    ap.add_argument("--backends", default=None,
                    help="GPU mode: comma-separated backends (default torch,jax,cupy); one per process keeps "
                         "one library's memory cache from starving the next")
    ap.add_argument("--json", default=None, help="write the rows to this file")
    args = ap.parse_args()
    print(f"# {platform.processor() or platform.machine()}, python {platform.python_version()}")
    if args.gpu:
        rows = gpu(args.start, args.max_width, args.cpu_max, args.reps, args.dtype,
                   args.backends.split(",") if args.backends else None)
    else:
        rows = cpu([int(w) for w in args.widths.split(",")], args.reps, args.dtype)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
