"""Finite width against the compiled limit, parameterized over programs (the stax idea:
the same program, both back ends).  At n = 1024 and 4096 (marked slow) the mean over trials lies
within 5 standard errors (plus an O(1/n) allowance) of the limit, and the root-mean-square
deviation of single trials from the limit shrinks as n grows (by 0.75 at least over a factor 4;
0.5 expected).  The default run checks the means at n = 256 and 1024; the rate is left to the
slow run (from 256 to 1024 it shrank by only 0.84 and 0.81 for initial_moments' g_phi and
batchnorm_relu's q: widths too small for the n^{-1/2} regime)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorprog as tp

CASES = [
    # (program, params, outputs to check, O(1/n) allowance constant)
    ("programs/relu_nngp.tp", {}, ["kxy", "kxx"], 2.0),                 # forward
    ("programs/sgd_two_layer.tp", {}, ["f1"], 4.0),                     # backward, Ż term
    ("programs/wigner_moments.tp", {}, ["m2", "m4", "m6"], 20.0),        # random matrices
    ("programs/marchenko_pastur.tp", {}, ["w1", "w2", "w3"], 10.0),     # rectangular, Ż
    ("programs/initial_moments.tp", {}, ["u4", "l4", "g_phi"], 2.0),    # non-Gaussian vectors
    ("programs/batchnorm_relu.tp", {}, ["q", "k12", "next12"], 2.0),    # batchnorm
    ("tests/data/resnet_tanh_depth4.tp", {}, ["kxy", "txy"], 4.0),      # residual (linear forms)
    ("programs/transformer_preln.tp", {"T": 2, "L": 1}, ["k12", "k11"], 4.0),   # layer norm, attention
]
TRIALS = 12
#: outputs whose rms over TRIALS cannot show the n^{-1/2} rate: batchnorm_relu's q = E[σ²/(σ² + ε)] is 1 up
#: to rare coordinates with σ² ≲ ε (heavy-tailed; per-coordinate sd 5.6e-4), 1024 → 4096 shrank by 0.77
#: (skipped while its limit was QMC with an error above the rms; it is exact since expect/blocks.py's
#: shifted-norm rule)
NO_RATE = {("programs/batchnorm_relu.tp", "q")}
#: (smaller, larger) width, a factor 4 apart, and whether the rms deviation's rate is checked
WIDTHS = [pytest.param((256, 1024), False, id="n256"),
          pytest.param((1024, 4096), True, id="n1024", marks=pytest.mark.slow)]


@pytest.mark.parametrize("widths,rate", WIDTHS)
@pytest.mark.parametrize("path,params,names,allow", CASES, ids=[c[0].split("/")[-1] for c in CASES])
def test_finite_width_converges_to_limit(path, params, names, allow, widths, rate):
    program = tp.load(path, **params)
    limit = program.compile().limit()
    rms = {}
    for n in widths:
        run = program.execute(n=n, trials=TRIALS, seed=11)
        for name in names:
            o, lim = run.outputs[name], limit.outputs[name]
            se = o.std / math.sqrt(TRIALS)
            assert abs(o.mean - lim.value) <= 5 * se + allow / n + lim.error, (path, name, n, o.mean, lim.value)
            rms.setdefault(name, []).append(math.sqrt(np.mean((np.array(o.values) - lim.value) ** 2)))
    for name, (first, last) in rms.items() if rate else ():
        # skipped: outputs exact at every width, and deviations the limit's own error cannot resolve
        if first > 3 * limit.outputs[name].error + 1e-12 and (path, name) not in NO_RATE:
            assert last < 0.75 * first, (path, name, widths, first, last)
