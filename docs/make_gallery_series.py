"""Numbers of docs/gallery_series.md: kernel regression with the tanh NTK, tensorprog's series against
neural-tangents' ElementwiseNumerical(deg=25).

    PYTHONPATH=. python bench/series_kernels.py --sizes 300 --save /tmp/series_gallery --json out.json
    PYTHONPATH=. python docs/make_gallery_series.py /tmp/series_gallery/tanh   (or /tmp/series_gallery/silu)

The 300 inputs (N × 10 standard normal, seed 0) are split 200 / 100; the target is
y = sin(2 x₀) + x₁ x₂ / 2 (noise-free).  Kernel ridge regression f = K_te,tr (K_tr,tr + λ I)⁻¹ y with
λ = 1e-6 · mean diag K_tr,tr, for the NNGP and the NTK of each side.
"""
from __future__ import annotations

import sys

import numpy as np


def predict(K: np.ndarray, y: np.ndarray, tr: np.ndarray, te: np.ndarray) -> np.ndarray:
    A = K[np.ix_(tr, tr)]
    lam = 1e-6 * np.mean(np.diag(A))
    return K[np.ix_(te, tr)] @ np.linalg.solve(A + lam * np.eye(len(tr)), y[tr])


def main() -> None:
    d = sys.argv[1]
    X = np.load(f"{d}/X.npy")
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] / 2
    tr, te = np.arange(200), np.arange(200, len(X))
    print("| kernel | test MSE, tensorprog | test MSE, neural-tangents | max |prediction tp − nt| | max |K_tp − K_nt| |")
    print("|---|---|---|---|---|")
    for name in ("nngp", "ntk"):
        Kt, Kn = np.load(f"{d}/tp_{name}.npy"), np.load(f"{d}/nt_{name}.npy")
        pt, pn = predict(Kt, y, tr, te), predict(Kn, y, tr, te)
        mt, mn = np.mean((pt - y[te]) ** 2), np.mean((pn - y[te]) ** 2)
        print(f"| {name} | {mt:.6g} | {mn:.6g} | {np.max(np.abs(pt - pn)):.2e} | {np.max(np.abs(Kt - Kn)):.2e} |")
    err = np.load(f"{d}/tp_ntk_err.npy")
    print(f"\ntensorprog's largest stated error: NTK {err.max():.2e}, NNGP {np.load(f'{d}/tp_nngp_err.npy').max():.2e}")


if __name__ == "__main__":
    main()
