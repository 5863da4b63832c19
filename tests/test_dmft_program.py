"""programs/dmft_tanh_depth3.tp, the DMFT paper's own setting (docs/gallery_dmft.md).

* its data are the notebook's: dmft_X.npy gives the Gram checksum the notebook printed, and the program's
  literal Cholesky factor C is the one of that Gram matrix (as tools/make_dmft_data.py writes it);
* its hand-written backward pass is grad's (autodiff = 1 against 0, same seed: the same numbers);
* it has the notebook network's law: the loss after 1 and 2 steps at width 128 agrees with
  bench/dmft_network.py (the notebook's raw parameterisation, dense, numpy) within 5 standard errors;
* its step-1 loss at width 256 agrees with its limit at T = 1 (compile --method particles) within 5
  standard errors plus the limit's error, and that limit agrees with the dense H200 runs of the notebook's
  network (docs/data/dmft_widths_h200.npz, extrapolated to n -> infinity by the same estimator).
"""
from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.limit.particles import extrapolate

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "programs" / "dmft_tanh_depth3.tp"


def module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def x() -> np.ndarray:
    return np.load(ROOT / "programs" / "dmft_X.npy")


def test_the_data_are_the_notebooks(x):
    assert x.shape == (25, 10)
    gram32 = (x.astype(np.float32).T @ x.astype(np.float32)) / np.float32(25)
    assert abs(float(np.mean(gram32 ** 2)) - 0.15922138) < 5e-8         # the notebook prints 0.15922138
    text = PROGRAM.read_text(encoding="utf-8")
    c = np.zeros((10, 10))
    for i, j, value in re.findall(r"C\[(\d+), (\d+)\] = ([-0-9.e]+)", text):
        c[int(i) - 1, int(j) - 1] = float(value)
    np.testing.assert_allclose(c @ c.T, x.T @ x / 25, rtol=0, atol=1e-14)
    make = module(ROOT / "tools" / "make_dmft_data.py", "make_dmft_data")
    assert make.with_block(text, make.cholesky_block(x)) == text


def test_the_backward_pass_is_grads():
    hand = tp.load(PROGRAM, T=2).execute(n=64, trials=1, seed=5, progress=False).outputs
    auto = tp.load(PROGRAM, T=2, autodiff=1).execute(n=64, trials=1, seed=5, progress=False).outputs
    assert list(hand) == list(auto)
    for name in hand:
        np.testing.assert_allclose(hand[name].values, auto[name].values, rtol=1e-12, atol=1e-14)
    assert hand["loss2"].values[0] < hand["loss1"].values[0] < hand["loss0"].values[0] == pytest.approx(1.0)


def test_the_program_has_the_notebook_networks_law(x):
    n, trials = 128, 16
    prog = tp.load(PROGRAM, T=2).execute(n=n, trials=trials, seed=11, progress=False).outputs
    bench = module(ROOT / "bench" / "dmft_network.py", "dmft_network")
    rng = np.random.default_rng(12)
    dense = np.stack([bench.train(x, n, 2, rng) for _ in range(4 * trials)])
    for t in (1, 2):
        p = np.asarray(prog[f"loss{t}"].values)
        diff = p.mean() - dense[:, t].mean()
        se = math.hypot(p.std(ddof=1) / math.sqrt(len(p)), dense[:, t].std(ddof=1) / math.sqrt(len(dense)))
        assert abs(diff) <= 5 * se, (t, p.mean(), dense[:, t].mean(), se)
        assert 1 - dense[:, t].mean() > 20 * se            # the loss has moved: the test can tell


def test_step_one_agrees_with_the_limit():
    program = tp.load(PROGRAM, T=1)
    lim = program.compile(method="particles", particles=1024, replicas=8, seed=3).limit().outputs["loss1"]
    run = program.execute(n=256, trials=16, seed=4, progress=False).outputs["loss1"]
    se = float(run.std) / math.sqrt(16)
    assert abs(float(run.mean) - lim.value) <= 5 * se + lim.error, (run.mean, se, lim)
    data = np.load(ROOT / "docs" / "data" / "dmft_widths_h200.npz")
    big, small = data["n32768"][:, 1], data["n8192"][:, 1]
    dense = extrapolate((big.mean(), big.std(ddof=1) / math.sqrt(len(big)), len(big)),
                        (small.mean(), small.std(ddof=1) / math.sqrt(len(small)), len(small)), 4)
    assert abs(dense.value - lim.value) <= dense.error + lim.error, (dense, lim)
    assert 1 - lim.value > 5 * lim.error                  # the step's decrease is resolved: the test can tell
