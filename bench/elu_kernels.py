"""ELU / SELU dataset kernels in closed form (Φ₂; issue 25): tp.kernel on programs/kernels/{elu,selu}_mlp.tp
at depth 10 (σ_w² = 1.5, σ₁² = 1.5, first-layer bias 0.1), N inputs of dimension 10, from a cold start
(a fresh replay store), and sampled entries (diagonal included) against the layer recursion of
tests/test_elu_kernels.py (every expectation by composite Gauss–Legendre split at the kinks).

    python bench/elu_kernels.py [N]      (default 300)
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp()          # a cold start: no stored replay

import tensorprog as tp                                      # noqa: E402
from tests.test_elu_kernels import delu, dselu, elu, recursion, selu   # noqa: E402


def main(N: int = 300, L: int = 10) -> None:
    X = np.random.default_rng(0).standard_normal((N, 10))
    q = X @ X.T / 10
    rng = np.random.default_rng(1)
    pairs = [(i, i) for i in rng.choice(N, 4, replace=False)] + [tuple(p) for p in rng.choice(N, (12, 2))]
    for name, phi, dphi in (("elu", elu, delu), ("selu", selu, dselu)):
        cpu, wall = time.process_time(), time.time()
        K = tp.kernel(ROOT / "programs" / "kernels" / f"{name}_mlp.tp", X, L=L, var=1.5, var1=1.5, b1=0.1)
        cpu, wall = time.process_time() - cpu, time.time() - wall
        worst, ratio, loose = 0.0, 0.0, 0.0
        for i, j in pairs:
            ref = recursion(phi, dphi, q[i, i], q[i, j], q[j, j], L, 1.5, 1.5, 0.1)
            for out, r in zip(("nngp", "ntk"), ref):
                e = abs(K.outputs[out].mean[i, j] - r)
                stated = K.outputs[out].error[i, j]
                worst, ratio = max(worst, e), max(ratio, e / stated)
                loose = max(loose, stated / max(e, 1e-16 * max(1.0, abs(r))))     # (actual floored at 1 ulp)
        print(f"{name}: N = {N}, depth {L}: {cpu:.2f} s CPU ({wall:.2f} s wall); methods "
              f"{K.outputs['nngp'].method}/{K.outputs['ntk'].method}; largest stated error "
              f"{max(np.max(K.outputs[o].error) for o in ('nngp', 'ntk')):.2e}; on {len(pairs)} sampled "
              f"pairs |kernel − reference| ≤ {worst:.2e}, at most {ratio:.2f}× its stated error; the stated "
              f"error at most {loose:.0f}× the actual (floored at 1e-16 relative)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
