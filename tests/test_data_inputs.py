"""Programs over real data (issue 27): indexing constants, arrays of outputs, data inputs of a
fixed dimension, float32 covariances.  Statistical checks use fixed seeds and 5 standard errors."""
from __future__ import annotations

import json

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.cli import main
from tensorprog.errors import TPError

ARC = """\
S = [[1, 0.5, -0.2], [0.5, 2, 0.3], [-0.2, 0.3, 1.5]]
vector x[1..3] ~ normal(cov=S)
for i in 1..3 {
    for j in 1..3 {
        out K[i, j] = mean(relu(x[i]) * relu(x[j]))
    }
}
out s = S[2, 3]
"""


def arccos1(a: float, b: float, c: float) -> float:
    """E relu(u) relu(v) for (u, v) ~ N(0, [[a, c], [c, b]]): the first arc-cosine kernel."""
    rho = np.clip(c / np.sqrt(a * b), -1, 1)
    t = np.arccos(rho)
    return np.sqrt(a * b) / (2 * np.pi) * (np.sin(t) + (np.pi - t) * np.cos(t))


def fails(text: str, *where: str, **kw) -> str:
    with pytest.raises(TPError) as info:
        tp.parse(text, **kw)
    message = str(info.value)
    for w in where:
        assert w in message, message
    return message


# ---- indexing constants ---------------------------------------------------------
def test_index_literal_and_loaded(tmp_path):
    np.save(tmp_path / "S.npy", np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
    (tmp_path / "p.tp").write_text('S = load("S.npy")\nv = [10, 20]\nparam q = 3\n'
                                   'vector x ~ normal(var=S[2, 1] / 4)\n'
                                   'r = S[2]\nout a = S[1, 3] * v[2] + r[q]\n'
                                   'out b = mean(x * x) * v[1]\n')
    p = tp.load(tmp_path / "p.tp")
    lim = p.limit().outputs
    assert lim["a"].value == 3 * 20 + 6
    assert lim["b"].value == pytest.approx(10.0, abs=1e-12)          # var = S[2,1]/4 = 1


@pytest.mark.parametrize("text, where", [
    ("v = [1, 2, 3]\nout a = v[4]\n", "2:9: index 4 is out of range of 'v'"),
    ("v = [1, 2, 3]\nout a = v[0]\n", "indexed from 1 to 3"),
    ("S = [[1, 2], [3, 4]]\nout a = S[1, 3]\n", "2:9: index 3 is out of range on axis 2"),
    ("S = [[1, 2], [3, 4]]\nout a = S[1, 1, 1]\n", "3 indices are given"),
])
def test_index_out_of_range_is_located(text, where):
    fails(text, "<string>:", where)


# ---- arrays of outputs -------------------------------------------------------------
def test_array_output_limit_matches_formula_and_is_symmetric():
    p = tp.parse(ARC)
    compiled = p.compile()
    lim = compiled.limit()
    K = lim.outputs["K"].value
    S = np.array([[1, 0.5, -0.2], [0.5, 2, 0.3], [-0.2, 0.3, 1.5]])
    want = np.array([[arccos1(S[i, i], S[j, j], S[i, j]) for j in range(3)] for i in range(3)])
    assert isinstance(K, np.ndarray) and K.shape == (3, 3)
    np.testing.assert_allclose(K, want, rtol=1e-12)
    assert lim.outputs["K"].error.shape == (3, 3) and lim.outputs["K"].method == "exact"
    assert lim.outputs["s"].value == 0.3 and lim.entries["K[2, 3]"].value == K[1, 2]
    # K[i, j] and K[j, i] are one expectation: 6 of the 9 entries are distinct
    assert len(compiled.estimates) == 6


def test_array_output_execute_and_json():
    p = tp.parse(ARC)
    r = p.execute(n=256, trials=3, seed=1)
    assert r.outputs["K"].mean.shape == (3, 3) and len(r.outputs["K"].values) == 3
    np.testing.assert_array_equal(r.outputs["K"].mean, r.outputs["K"].mean.T)
    assert r.entries["K[1, 2]"].mean == r.outputs["K"].mean[0, 1]
    data = json.loads(json.dumps(r.to_dict()))
    assert np.array(data["outputs"]["K"]["mean"]).shape == (3, 3)


def test_array_output_partial_has_missing_entries():
    text = ARC.replace("for j in 1..3", "for j in i..3")
    lim = tp.parse(text).limit()
    K = lim.outputs["K"].value
    assert np.isnan(K[1, 0]) and not np.isnan(K[0, 1])
    assert lim.to_dict()["outputs"]["K"]["value"][1][0] is None


def test_array_output_errors_are_located():
    fails("vector x ~ normal()\nout K = mean(x)\nout K[1] = mean(x)\n", "3:1:", "both a scalar and an array")
    fails("vector x ~ normal()\nout K[1] = mean(x)\nout K[1, 2] = mean(x)\n", "3:1:", "takes 1 index")
    fails("vector x ~ normal()\nout K[1] = mean(x)\nout K[1] = mean(x * x)\n", "3:1:", "'K[1]' is defined twice")


def test_compile_and_execute_save_npz_and_json(tmp_path, capsys):
    f = tmp_path / "k.tp"
    f.write_text(ARC)
    assert main(["compile", str(f), "--emit", "json", "--out", str(tmp_path / "lim.npz")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert np.array(data["outputs"]["K"]["value"]).shape == (3, 3)
    saved = np.load(tmp_path / "lim.npz")
    np.testing.assert_allclose(saved["K"], data["outputs"]["K"]["value"], rtol=0)
    assert saved["K_error"].shape == (3, 3) and float(saved["s"]) == 0.3
    assert main(["execute", str(f), "-n", "64", "--trials", "2", "--json", "--out", str(tmp_path / "e.npz")]) == 0
    data = json.loads(capsys.readouterr().out)
    saved = np.load(tmp_path / "e.npz")
    np.testing.assert_allclose(saved["K"], data["outputs"]["K"]["mean"], rtol=0)
    assert saved["K_std"].shape == (3, 3)
    assert main(["compile", str(f), "--out", str(tmp_path / "lim.txt")]) == 2
    assert "must end in .npz" in capsys.readouterr().err
