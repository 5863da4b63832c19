"""The DMFT paper's network written directly (dense matrices): the reference for programs/dmft_tanh_depth3.tp.

Bordelon & Pehlevan's notebook (Pehlevan-Group/dmft_wide_networks, deep_nonlinear_DMFT.ipynb) trains, with
every raw weight iid N(0, 1),

    h1 = W0 X / sqrt(D),  h2 = W1 phi(h1) / sqrt(n),  h3 = W2 phi(h2) / sqrt(n),  f = phi(h3)^T v / (n gamma0),
    phi(h) = tanh(beta h) / beta,   L = sum_mu (f_mu - f0_mu - y_mu)^2 / (2P),

by full-batch gradient descent on W0, W1, W2, v with rate eta gamma0^2 n, f0 the output at initialisation.
This module does the same with numpy (or any array module with the numpy API, e.g. jax.numpy on a GPU): the
n x n matrices are formed and updated in place, gradients by hand:

    dl = f - f0 - y,  e_mu = dl_mu / P,
    G3 = (v phi'(h3)) / (n gamma0)  (column mu: df_mu/dh3_mu),
    G2 = (W2^T G3 / sqrt(n)) phi'(h2),   G1 = (W1^T G2 / sqrt(n)) phi'(h1),
    v  -= lr phi(h3) e / (n gamma0),   W2 -= lr (G3 e) phi(h2)^T / sqrt(n),
    W1 -= lr (G2 e) phi(h1)^T / sqrt(n),  W0 -= lr (G1 e) X^T / sqrt(D),   lr = eta gamma0^2 n.

It is an independent check of the program (same law at every width n: the program's input layer is W0 in the
basis of the data's span, see tools/make_dmft_data.py) and, on a GPU, the way to wide finite widths over the
whole T = 100 steps (the program's executor pays per equation: about 2·10^6 Moments at T = 100).

    python bench/dmft_network.py --widths 256 512 --trials 8 --T 100 --out /tmp/curves.npz [--jax]

Writes {"widths", "losses": (len(widths), trials, T + 1), "seconds": per width} and prints a summary.  With
--jax trial t of width n is drawn from PRNGKey(1000 n + t) (threefry, not partitionable): the draws of
docs/data/dmft_widths_h200.npz, made on an NVIDIA H200 with

    python bench/dmft_network.py --jax --widths 256 512 1024 2048 8192 --trials 64 --out ...
    python bench/dmft_network.py --jax --widths 4096 16384 --trials 32 --out ...
    python bench/dmft_network.py --jax --widths 32768 --trials 40 --out ...

(0.06 s per trial up to n = 2048, 0.16 s at 4096, 0.27 s at 8192, 0.8 s at 16384, 2.8 s at 32768, float64;
the same draws came back from two separate H200 sessions to 2e-16).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "programs" / "dmft_X.npy"
ETA, GAMMA, BETA, T_STEPS = 0.1, 1.0, 0.8, 100


def targets(p: int) -> np.ndarray:
    """y_mu = -1 for mu <= P/2, +1 after (the notebook's linspace(1, P, P) > P/2)."""
    return np.where(np.arange(1, p + 1) > p / 2, 1.0, -1.0)


def train(x: np.ndarray, n: int, steps: int, rng: np.random.Generator, eta: float = ETA, gamma: float = GAMMA,
          beta: float = BETA) -> np.ndarray:
    """The losses mean_mu (f_mu - f0_mu - y_mu)^2 after t = 0..steps GD steps of one network of width n (numpy)."""
    d, p = x.shape
    y = targets(p)
    w0 = rng.standard_normal((n, d))
    w1 = rng.standard_normal((n, n))
    w2 = rng.standard_normal((n, n))
    v = rng.standard_normal(n)
    lr, sn, sd = eta * gamma ** 2 * n, np.sqrt(n), np.sqrt(d)
    losses, f0 = np.empty(steps + 1), None
    for t in range(steps + 1):
        h1 = w0 @ x / sd
        a1 = np.tanh(beta * h1)
        h2 = w1 @ (a1 / beta) / sn
        a2 = np.tanh(beta * h2)
        h3 = w2 @ (a2 / beta) / sn
        a3 = np.tanh(beta * h3)
        f = (a3 / beta).T @ v / (n * gamma)
        if f0 is None:
            f0 = f.copy()
        dl = f - f0 - y
        losses[t] = np.mean(dl ** 2)
        if t == steps:
            break
        e = dl / p
        g3 = (v[:, None] * (1 - a3 ** 2)) / (n * gamma)          # df_mu/dh3_mu
        g2 = (w2.T @ g3) / sn * (1 - a2 ** 2)
        g1 = (w1.T @ g2) / sn * (1 - a1 ** 2)
        v -= lr * (a3 / beta) @ e / (n * gamma)
        w2 -= lr * (g3 * e) @ (a2 / beta).T / sn
        w1 -= lr * (g2 * e) @ (a1 / beta).T / sn
        w0 -= lr * (g1 * e) @ x.T / sd
    return losses


def notebook_params(n: int, d: int, seed: int):
    """The notebook's own initial draw (construct_NN with PRNGKey(seed), float32, threefry as in 2022):
    W0 from the key, then W1 and W2 each from a key split off the previous one, and v from W2's key."""
    import jax
    jax.config.update("jax_threefry_partitionable", False)
    from jax import random
    key = random.PRNGKey(seed)
    params = [random.normal(key, (n, d))]
    for _ in range(2):
        key, _unused = random.split(key)
        params.append(random.normal(key, (n, n)))
    params.append(random.normal(key, (n,)))
    return tuple(params)


def train_jax(x: np.ndarray, n: int, steps: int, seed: int, trials: int, eta: float = ETA, gamma: float = GAMMA,
              beta: float = BETA, notebook_draw: bool = False) -> np.ndarray:
    """``train`` in jax (one compiled step, the matrices donated): losses (trials, steps + 1).  float64 with
    trial t drawn from PRNGKey(seed + t); with ``notebook_draw`` float32 and the notebook's own draw of
    PRNGKey(seed + t) (:func:`notebook_params`), which replays the notebook's network run."""
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_threefry_partitionable", False)      # the draws of docs/data/dmft_widths_h200.npz
    jax.config.update("jax_enable_x64", not notebook_draw)
    dtype = jnp.float32 if notebook_draw else jnp.float64
    d, p = x.shape
    xj, y = jnp.asarray(x, dtype), jnp.asarray(targets(p), dtype)
    lr, sn, sd = eta * gamma ** 2 * n, np.sqrt(n), np.sqrt(d)

    def forward(w0, w1, w2, v):
        a1 = jnp.tanh(beta * (w0 @ xj / sd))
        a2 = jnp.tanh(beta * (w1 @ (a1 / beta) / sn))
        a3 = jnp.tanh(beta * (w2 @ (a2 / beta) / sn))
        return a1, a2, a3, (a3 / beta).T @ v / (n * gamma)

    def step(params, f0):
        w0, w1, w2, v = params
        a1, a2, a3, f = forward(w0, w1, w2, v)
        dl = f - f0 - y
        e = dl / p
        g3 = (v[:, None] * (1 - a3 ** 2)) / (n * gamma)
        g2 = (w2.T @ g3) / sn * (1 - a2 ** 2)
        g1 = (w1.T @ g2) / sn * (1 - a1 ** 2)
        new = (w0 - lr * (g1 * e) @ xj.T / sd, w1 - lr * (g2 * e) @ (a1 / beta).T / sn,
               w2 - lr * (g3 * e) @ (a2 / beta).T / sn, v - lr * (a3 / beta) @ e / (n * gamma))
        return new, jnp.mean(dl ** 2)

    step_jit = jax.jit(step, donate_argnums=(0,))
    out = np.empty((trials, steps + 1))
    for trial in range(trials):
        if notebook_draw:
            params = notebook_params(n, d, seed + trial)
        else:
            k = jax.random.split(jax.random.PRNGKey(seed + trial), 4)
            params = (jax.random.normal(k[0], (n, d), dtype), jax.random.normal(k[1], (n, n), dtype),
                      jax.random.normal(k[2], (n, n), dtype), jax.random.normal(k[3], (n,), dtype))
        f0 = forward(*params)[3]
        losses = []
        for _ in range(steps):
            params, loss = step_jit(params, f0)
            losses.append(loss)
        losses.append(jnp.mean((forward(*params)[3] - f0 - y) ** 2))
        out[trial] = np.asarray(jnp.stack(losses))
        del params
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--T", type=int, default=T_STEPS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jax", action="store_true", help="run with jax (on a GPU where there is one), float64")
    parser.add_argument("--notebook-draw", action="store_true",
                        help="with --jax: float32 and the notebook's own draw of PRNGKey(seed + trial)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    x = np.load(DATA)
    curves, seconds = [], []
    for n in args.widths:
        t0 = time.time()
        if args.jax:
            seed = args.seed if args.notebook_draw else args.seed + 1000 * n     # trial t: PRNGKey(seed + t)
            got = train_jax(x, n, args.T, seed, args.trials, notebook_draw=args.notebook_draw)
        else:
            rng = np.random.default_rng([args.seed, n])
            got = np.stack([train(x, n, args.T, rng) for _ in range(args.trials)])
        seconds.append(time.time() - t0)
        curves.append(got)
        m, se = got.mean(0), got.std(0, ddof=1) / np.sqrt(args.trials)
        print(f"n = {n}: {seconds[-1]:.1f} s; loss at t = 10, 30, 50, {args.T}: "
              + ", ".join(f"{m[t]:.5f} ± {se[t]:.5f}" for t in (10, 30, 50, args.T) if t <= args.T), flush=True)
        np.savez(args.out, widths=np.array(args.widths[:len(curves)]), losses=np.stack(curves),
                 seconds=np.array(seconds))


if __name__ == "__main__":
    main()
