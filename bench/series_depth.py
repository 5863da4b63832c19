"""Every smooth activation's dataset kernels at depth 10 × N = 1000 (issue 25: "no slow path is left
for smooth activations: depth 10 × N = 1000 for any of them in under 10 s").

    PYTHONPATH=. python bench/series_depth.py [--activations gelu,mish,sigmoid,softplus,tanh,silu]
        [--size 1000] [--depth 10] [--json out.json]

The template: programs/kernels/tanh_mlp.tp (NNGP + NTK by ``grad``) with its activation replaced by
each one named (the forward pass only, as the shipped silu/gelu/mish templates are made), σ_w² = 1.5,
first-layer bias variance 0.1, tol 1e-10, inputs N × 10 standard normal (seed 0).  Each activation
runs in a fresh process with ``TENSORPROG_CACHE_DIR=off`` (series_kernels.CHILD): CPU seconds of the
tp.kernel call (template compiled, recorded, replayed; imports timed apart) and of a second, warm
call on other data.  Reported per activation: cold / warm CPU, the methods, and whether every entry
is finite with a finite stated error.  softsign (kinked at 0: its coefficients by the split rule,
symbolic/split_rule.py, the cells the series misses by the mixed rule, symbolic/mixed.py) is run
too; elu and selu (closed forms) by ``--activations elu,selu``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from series_kernels import CHILD  # noqa: E402

SMOOTH = ("gelu", "mish", "sigmoid", "softplus", "tanh", "silu")
#: activations kinked at 0 that the series replays (split rule, mixed rule)
KINKED = ("softsign",)


def template(act: str, work: str) -> str:
    """tanh_mlp.tp with ``act`` in the forward pass (its comments left as they are)."""
    lines = (ROOT / "programs" / "kernels" / "tanh_mlp.tp").read_text().splitlines()
    body = [ln if ln.lstrip().startswith("#") else ln.replace("tanh(", f"{act}(") for ln in lines]
    path = f"{work}/{act}_mlp.tp"
    Path(path).write_text("\n".join(body) + "\n")
    return path


def run(act: str, X: np.ndarray, params: dict, work: str) -> dict:
    """tp.kernel in a fresh process (series_kernels.CHILD): its times, methods and finiteness."""
    np.save(f"{work}/X.npy", X)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", CHILD, f"{work}/X.npy", json.dumps(params), f"{work}/{act}",
                          template(act, work)], capture_output=True, text=True, env=env, check=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    arrays = [np.load(f"{work}/{act}_{k}.npy") for k in ("nngp", "ntk", "nngp_err", "ntk_err")]
    info["finite"] = bool(all(np.isfinite(a).all() for a in arrays))
    info["max_stated"] = [float(arrays[2].max()), float(arrays[3].max())]
    return info


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--activations", default=",".join(SMOOTH + KINKED))
    ap.add_argument("--size", type=int, default=1000)
    ap.add_argument("--depth", type=int, default=10)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    X = np.random.default_rng(0).standard_normal((a.size, 10))
    params = dict(L=a.depth, var=1.5, var1=1.5, b1=0.1, tol=1e-10)
    report = {"size": a.size, "depth": a.depth, "load": os.getloadavg()[0], "runs": {}}
    with tempfile.TemporaryDirectory() as work:
        for act in a.activations.split(","):
            info = run(act, X, params, work)
            report["runs"][act] = info
            print(act, json.dumps(info), flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
