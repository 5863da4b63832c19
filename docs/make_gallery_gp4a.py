"""The numbers of docs/gallery_gp4a.md: the GP4A RNN and transformer limits, and finite width beside
them (16 networks per width, seed = width).

    python docs/make_gallery_gp4a.py
"""
from pathlib import Path

import numpy as np

import tensorprog as tp

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"
TRIALS = 16


def main() -> None:
    for name in ("gp4a_rnn", "gp4a_transformer"):
        p = tp.load(PROGRAMS / f"{name}.tp")
        lim = p.limit()
        print(f"## {name}")
        for out, v in lim.outputs.items():
            print(out, "limit", np.array2string(v.value, precision=4, max_line_width=200))
        for n in (64, 256, 1024):
            r = p.execute(n=n, trials=TRIALS, seed=n)
            for out, v in lim.outputs.items():
                dev = np.abs(r.outputs[out].mean - v.value)
                sem = r.outputs[out].std / np.sqrt(TRIALS)
                rms = np.sqrt(np.mean([(x - v.value) ** 2 for x in r.outputs[out].values], axis=0))
                print(f"n={n:5d} {out}: max|mean-limit| {dev.max():.4f}  max z {np.max(dev / sem):.2f}  "
                      f"mean single-network rms error {rms.mean():.4f}")


if __name__ == "__main__":
    main()
