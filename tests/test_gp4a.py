"""The GP4A RNN and transformer written by hand on data inputs (programs/gp4a_*.tp, issue 27):
their limits equal the generated initial-vector formulation, and finite width agrees with them."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp

PROGRAMS = Path(__file__).resolve().parent.parent / "programs"


def generated(path: Path, data: str, var: str, tmp: Path) -> Path:
    """The pre-data-input version a script would generate: the products U @ x[i] as initial
    vectors u[i] with the covariance var · X Xᵀ/d written out to a file."""
    X = np.load(PROGRAMS / data).astype(float)
    np.save(tmp / "gram.npy", float(var) * X @ X.T / X.shape[1])
    text = path.read_text()
    text = re.sub(r"vector x\[1\.\.(\w+)\] : d = load\(\"[^\"]+\"\)", r'vector u[1..\1] ~ normal(cov=load("gram.npy"))', text)
    text = re.sub(r"matrix U : n x d ~ normal\(var=\w+\).*\n", "", text)
    text = re.sub(r"U @ x\[", "u[", text)
    assert "U @" not in text and "load(\"gram.npy\")" in text
    (tmp / path.name).write_text(text)
    return tmp / path.name


@pytest.mark.parametrize("name, data, var", [("gp4a_rnn.tp", "gp4a_tokens.npy", 1),
                                             ("gp4a_transformer.tp", "gp4a_sentence.npy", 1)])
def test_gp4a_by_hand(name, data, var, tmp_path):
    path = PROGRAMS / name
    assert len(path.read_text().splitlines()) < 30
    program = tp.load(path)
    lim = program.limit()
    old = tp.load(generated(path, data, var, tmp_path)).limit()
    assert set(lim.outputs) == set(old.outputs)
    for out, value in lim.outputs.items():
        assert value.method == "exact" and value.value.shape == old.outputs[out].value.shape
        np.testing.assert_allclose(value.value, old.outputs[out].value, rtol=1e-12, atol=1e-14)
    run = program.execute(n=256, trials=8, seed=11)
    for out, value in lim.outputs.items():
        sem = run.outputs[out].std / np.sqrt(8)
        z = np.abs(run.outputs[out].mean - value.value) / sem
        assert np.all(z < 5), (out, z.max())
