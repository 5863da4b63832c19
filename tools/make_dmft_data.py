"""Write the data of the DMFT paper's setting: programs/dmft_X.npy and the Gram factor in programs/dmft_tanh_depth3.tp.

Bordelon & Pehlevan's notebook (Pehlevan-Group/dmft_wide_networks, deep_nonlinear_DMFT.ipynb) trains on
P = 10 inputs of dimension D = 25 drawn by JAX:

    X = jax.random.normal(jax.random.PRNGKey(0), (D, P))     # D x P, float32

with the threefry PRNG of 2022 (``jax_threefry_partitionable`` off; JAX >= 0.5 turned it on, which changes
the draw).  The notebook prints mean(Kx**2) = 0.15922138 for Kx = X^T X / D; this script checks that number,
so the data are the notebook's own, not a lookalike.

The network sees the data only through h1 = W0 X / sqrt(D) (W0 with iid N(0, 1) entries, trained).  With the
QR factorisation X / sqrt(D) = Q R (Q: D x P with orthonormal columns, R: P x P upper triangular),
h1_mu = sum_k R[k, mu] omega_k, where omega_k = W0 Q[:, k] are P independent N(0, I_n) vectors and a gradient
step on W0 is the same gradient step on the omega_k (the part of W0 orthogonal to the data never enters).
So the program declares omega_1..omega_P and the lower-triangular Cholesky factor C = R^T of
Kx = X^T X / D (Kx = C C^T) as literal constants C[p, k], written between the marker lines of the program.

    python tools/make_dmft_data.py            # (re)writes programs/dmft_X.npy and the program's C block
    python tools/make_dmft_data.py --check    # exit 1 if either differs from what it would write
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "programs" / "dmft_X.npy"
PROGRAM = ROOT / "programs" / "dmft_tanh_depth3.tp"
BEGIN = "# --- begin C (written by tools/make_dmft_data.py) ---"
END = "# --- end C ---"
D, P = 25, 10
NOTEBOOK_MEAN_KX2 = 0.15922138


def notebook_inputs() -> np.ndarray:
    """X (D x P) exactly as the notebook draws it, as float64 (the float32 values)."""
    import jax
    jax.config.update("jax_threefry_partitionable", False)
    from jax import random
    return np.asarray(random.normal(random.PRNGKey(0), (D, P)), dtype=np.float64)


def gram(x: np.ndarray) -> np.ndarray:
    """Kx = X^T X / D, the inputs' Gram matrix (P x P)."""
    return x.T @ x / x.shape[0]


def cholesky_block(x: np.ndarray) -> str:
    """The lines binding C[p, k] (k <= p), Kx = C C^T, to 17 significant digits."""
    c = np.linalg.cholesky(gram(x))
    lines = [BEGIN]
    for p in range(P):
        lines.append("; ".join(f"C[{p + 1}, {k + 1}] = {c[p, k]:.17g}" for k in range(p + 1)))
    lines.append(END)
    return "\n".join(lines)


def with_block(text: str, block: str) -> str:
    """The program text with the lines between the markers replaced by block."""
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[stop:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare with the committed files")
    args = parser.parse_args(argv)
    x = notebook_inputs()
    got = float(np.mean(gram(x.astype(np.float32)) ** 2))
    if abs(got - NOTEBOOK_MEAN_KX2) > 1e-7:
        print(f"mean(Kx**2) = {got:.8f}, the notebook printed {NOTEBOOK_MEAN_KX2}: not the notebook's data",
              file=sys.stderr)
        return 1
    text = PROGRAM.read_text(encoding="utf-8")
    new_text = with_block(text, cholesky_block(x))
    if args.check:
        same = DATA.exists() and np.array_equal(np.load(DATA), x) and new_text == text
        print("up to date" if same else "differs")
        return 0 if same else 1
    np.save(DATA, x)
    PROGRAM.write_text(new_text, encoding="utf-8")
    print(f"wrote {DATA.relative_to(ROOT)} (mean(Kx**2) = {got:.8f}) and the C block of {PROGRAM.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
