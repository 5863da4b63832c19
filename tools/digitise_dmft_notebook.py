"""Read the loss curves off the figures stored in the DMFT notebook: docs/data/dmft_notebook_curves.json.

Bordelon & Pehlevan's deep_nonlinear_DMFT.ipynb (repository Pehlevan-Group/dmft_wide_networks) keeps its
outputs only as PNG figures, not as numbers.  This script digitises two of them:

* cell 5, last figure: mean_mu Delta_mu(t)^2 of the DMFT solution (gamma0 = 1, after its 20 iterations),
  a blue (C0) line alone on its axes;
* cell 10: the network's loss (width N = 2000, seed 0, gamma0 = 1), the orange (C1) line (the legend's
  orange sample is masked out; where the dashed DMFT line covers it, the curve is interpolated).

Axes are calibrated from the tick marks (y: 0, 0.2, ..., 1; x: 0, 20, ..., 100); for each pixel column
the curve's row is the colour-weighted mean row of the line's pixels, then read at t = 0..99.  One pixel
is about 0.003 in loss: that, and the line's width near 0, is the digitisation error.

    git --git-dir=<mirror> show HEAD:deep_nonlinear_DMFT.ipynb > /tmp/nb.ipynb
    python tools/digitise_dmft_notebook.py /tmp/nb.ipynb [--commit SHA]
"""
from __future__ import annotations

import argparse
import base64
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "dmft_notebook_curves.json"
C0, C1 = (31, 119, 180), (255, 127, 14)        # matplotlib's first two colours


def figures(notebook: dict, cell: int) -> list[np.ndarray]:
    """The PNG outputs of one code cell, as RGB arrays (ints)."""
    found = []
    for out in notebook["cells"][cell].get("outputs", []):
        png = out.get("data", {}).get("image/png")
        if png:
            found.append(np.asarray(Image.open(io.BytesIO(base64.b64decode(png))).convert("RGB")).astype(float))
    return found


def frame(img: np.ndarray) -> tuple[int, int, int, int]:
    """The axes' frame: top, bottom rows and left, right columns (dark lines spanning most of the figure)."""
    dark = img.sum(2) < 150
    rows = np.where(dark.sum(1) > 0.6 * img.shape[1])[0]
    cols = np.where(dark.sum(0) > 0.6 * img.shape[0])[0]
    return int(rows[0]), int(rows[-1]), int(cols[0]), int(cols[-1])


def ticks(img: np.ndarray, box: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Pixel rows of the y ticks and columns of the x ticks (short dark marks outside the frame)."""
    top, bottom, left, _ = box
    dark = img.sum(2) < 300
    return (np.where(dark[:, left - 3] & dark[:, left - 2])[0].astype(float),
            np.where(dark[bottom + 3, :] & dark[bottom + 2, :])[0].astype(float))


def trace(img: np.ndarray, colour: tuple[int, int, int], mask_legend: bool, tol: float = 60.0) -> np.ndarray:
    """The curve of one colour read at t = 0..99: loss values (100,)."""
    box = frame(img)
    yt, xt = ticks(img, box)
    if len(yt) != 6 or len(xt) != 6:
        raise ValueError(f"expected 6 ticks on each axis, found {len(yt)} and {len(xt)}")
    to_loss = np.polyfit(yt, np.linspace(1.0, 0.0, 6), 1)
    to_col = np.polyfit(np.linspace(0.0, 100.0, 6), xt, 1)
    dist = np.sqrt(((img - np.array(colour)) ** 2).sum(2))
    hit = dist < tol
    if mask_legend:                             # the legend sits in the upper right
        top, bottom, left, right = box
        hit[: top + int(0.35 * (bottom - top)), left + int(0.6 * (right - left)):] = False
    cols, rows = [], []
    for c in range(img.shape[1]):
        r = np.where(hit[:, c])[0]
        if len(r):
            w = 1.0 / (1.0 + dist[r, c])
            cols.append(c)
            rows.append(float((r * w).sum() / w.sum()))
    t = np.arange(100)
    return np.polyval(to_loss, np.interp(np.polyval(to_col, t), cols, rows))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--commit", default="d6b0751", help="the repository's commit the notebook is from")
    args = parser.parse_args(argv)
    nb = json.loads(args.notebook.read_text(encoding="utf-8"))
    dmft = trace(figures(nb, 5)[-1], C0, mask_legend=False)
    network = trace(figures(nb, 10)[0], C1, mask_legend=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "source": f"Pehlevan-Group/dmft_wide_networks@{args.commit}:deep_nonlinear_DMFT.ipynb",
        "how": "digitised by tools/digitise_dmft_notebook.py from the stored PNG outputs (about 0.003 per pixel)",
        "t": list(range(100)),
        "dmft": [round(float(v), 4) for v in dmft],
        "network_N2000_seed0": [round(float(v), 4) for v in network],
    }, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}: DMFT at t = 0, 30, 50, 99: {dmft[[0, 30, 50, 99]].round(3)}; "
          f"network: {network[[0, 30, 50, 99]].round(3)}")


if __name__ == "__main__":
    main()
