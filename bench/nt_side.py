"""The neural-tangents side of bench/nt_compare.py; runs in neural-tangents' own venv.

    /work/nt-venv/bin/python bench/nt_side.py SPEC.json

SPEC.json: {"inputs": "X.npy", "out_dir": DIR, "repeats": R, "jobs": [JOB, ...]} with
JOB = {"name": str, "act": "relu" | "tanh" | "silu", "depth": L, "w_std": σ_w, "w_std_first": σ_1,
"w_std_out": σ_out, "deg": 25 (tanh only), "batch_size": 0 (0: whole matrix at once),
"inputs": X.npy (optional, overrides the spec's)}.

Per job the network is the stax MLP

    serial(Dense(512, W_std=σ_1), Act,  [Dense(512, W_std=σ_w), Act] × (L − 1),  Dense(1, W_std=σ_out))

(NTK parameterization, no biases: b_std=None), with Act = Relu() or
ElementwiseNumerical(jnp.tanh, deg, df=1 − tanh²).  kernel_fn(X, X, ("nngp", "ntk")) is
jit-compiled, run once (compilation), then timed R times (best and all reported), in float64.
Prints one JSON line {"jobs": {name: {"seconds": [...], "best": s, "compile": s, "compile_cpu": s, ...}}}
(``compile``/``compile_cpu``: the first call's wall/CPU seconds — tracing, XLA compilation and one run) and
saves DIR/NAME_nngp.npy, DIR/NAME_ntk.npy.
"""
from __future__ import annotations

import json
import os
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
warnings.filterwarnings("ignore")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import neural_tangents as nt  # noqa: E402
from neural_tangents import stax  # noqa: E402


def network(job: dict):
    if job["act"] == "relu":
        act = stax.Relu
    elif job["act"] == "tanh":
        def act():
            return stax.ElementwiseNumerical(jnp.tanh, deg=job["deg"], df=lambda x: 1 - jnp.tanh(x) ** 2)
    elif job["act"] == "silu":
        def act():
            def df(x):
                s = jax.nn.sigmoid(x)
                return s * (1 + x * (1 - s))
            return stax.ElementwiseNumerical(lambda x: x * jax.nn.sigmoid(x), deg=job["deg"], df=df)
    else:
        raise SystemExit(f"unknown activation {job['act']!r}")
    layers = [stax.Dense(512, W_std=job["w_std_first"], b_std=job.get("b_std_first")), act()]
    for _ in range(job["depth"] - 1):
        layers += [stax.Dense(512, W_std=job["w_std"], b_std=None), act()]
    layers += [stax.Dense(1, W_std=job["w_std_out"], b_std=None)]
    return stax.serial(*layers)


def run(job: dict, X: np.ndarray, repeats: int, out_dir: str) -> dict:
    _, _, kernel_fn = network(job)
    if job.get("batch_size"):
        kernel_fn = nt.batch(kernel_fn, batch_size=job["batch_size"], store_on_device=False)
    else:
        kernel_fn = jax.jit(kernel_fn, static_argnames=("get",))
    Xj = jnp.asarray(X, dtype=jnp.float64)

    def once():
        k = kernel_fn(Xj, Xj, get=("nngp", "ntk"))
        jax.block_until_ready(k)
        return k

    t0, c0 = time.perf_counter(), time.process_time()
    k = once()                                     # tracing + XLA compilation + one run
    compile_s, compile_cpu = time.perf_counter() - t0, time.process_time() - c0
    times, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        k = once()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    nngp, ntk = np.asarray(k.nngp, dtype=np.float64), np.asarray(k.ntk, dtype=np.float64)
    np.save(os.path.join(out_dir, f"{job['name']}_nngp.npy"), nngp)
    np.save(os.path.join(out_dir, f"{job['name']}_ntk.npy"), ntk)
    return {"seconds": times, "best": min(times), "cpu": cpu, "best_cpu": min(cpu), "compile": compile_s,
            "compile_cpu": compile_cpu, "finite": bool(np.isfinite(nngp).all() and np.isfinite(ntk).all()),
            "dtype": str(k.nngp.dtype)}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    info = {"neural_tangents": getattr(nt, "__version__", "?"), "jax": jax.__version__,
            "jaxlib": jax.lib.__version__ if hasattr(jax.lib, "__version__") else "?",
            "numpy": np.__version__, "devices": [str(d) for d in jax.devices()], "jobs": {}}
    for job in spec["jobs"]:
        X = np.load(job.get("inputs", spec["inputs"]))
        info["jobs"][job["name"]] = run(job, X, spec["repeats"], spec["out_dir"])
    print(json.dumps(info))


if __name__ == "__main__":
    main()
