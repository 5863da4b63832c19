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
    # K[i, j] and K[j, i] are one Moment (equal up to the order of *), so one expectation: 6 of 9
    assert p.summary()["Moment"] == 6 and len(compiled.estimates) == 6
    var = {o.name: o.var for o in p.ir.outputs}
    assert var["K[1, 2]"] == var["K[2, 1]"] and var["K[1, 2]"] != var["K[1, 3]"]
    # outside arrays of outputs, equal means stay separate equations (the IR of scalar outs is unchanged)
    twice = tp.parse("vector x, y ~ normal()\nout a = mean(x * y)\nout b = mean(y * x)\n")
    assert twice.summary()["Moment"] == 2


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


# ---- data inputs of a fixed dimension ---------------------------------------------------
DATA = """\
param s = 2
vector x[1..4] : d = load("X.npy")          # 4 data vectors of dimension d = 5
matrix U : n x d ~ normal(var=s)            # entries of variance s/d
matrix W ~ normal(var=2)
for i in 1..4 {
    h[i] = U @ x[i]
    g[i] = W @ relu(h[i])
}
for i in 1..4 {
    for j in i..4 {
        out K[i, j] = mean(relu(g[i]) * relu(g[j]))
        out Q[i, j] = mean(h[i] * h[j])
        out D[i, j] = mean(x[i] * x[j])
    }
}
"""

OLD = """\
vector h[1..4] ~ normal(cov=load("C.npy"))
matrix W ~ normal(var=2)
for i in 1..4 {
    g[i] = W @ relu(h[i])
}
for i in 1..4 {
    for j in i..4 {
        out K[i, j] = mean(relu(g[i]) * relu(g[j]))
    }
}
"""


@pytest.fixture
def data_dir(tmp_path):
    X = np.random.default_rng(7).normal(size=(4, 5))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "C.npy", 2 * X @ X.T / 5)
    (tmp_path / "data.tp").write_text(DATA)
    (tmp_path / "old.tp").write_text(OLD)
    return tmp_path, X


def upper(a: np.ndarray) -> np.ndarray:
    return a[np.triu_indices(a.shape[0])]


def test_data_limit_is_the_gaussian_family(data_dir):
    path, X = data_dir
    lim = tp.load(path / "data.tp").limit().outputs
    np.testing.assert_allclose(upper(lim["Q"].value), upper(2 * X @ X.T / 5), rtol=1e-12)
    np.testing.assert_allclose(upper(lim["D"].value), upper(X @ X.T / 5), rtol=1e-14)
    old = tp.load(path / "old.tp").limit().outputs
    np.testing.assert_allclose(upper(lim["K"].value), upper(old["K"].value), rtol=1e-12)


def test_data_finite_width_converges_to_the_limit(data_dir):
    path, X = data_dir
    p = tp.load(path / "data.tp")
    lim = p.limit().outputs
    r = p.execute(n=512, trials=24, seed=3)
    for name in ("K", "Q"):
        sem = upper(r.outputs[name].std) / np.sqrt(24)
        z = np.abs(upper(r.outputs[name].mean) - upper(lim[name].value)) / sem
        assert np.all(z < 5), (name, z)
    # the data's own mean is a constant, exactly the same at every width
    np.testing.assert_allclose(upper(r.outputs["D"].mean), upper(lim["D"].value), rtol=1e-14)
    assert np.all(upper(r.outputs["D"].std) < 1e-15)


def test_data_input_layer_ntk_term(data_dir):
    """The input layer's NTK term <dh, dh'> · xᵀx'/d with dh = grad(f, h): for f = mean(relu(h)),
    dh = step(h), so the term is E[step(u) step(v)] · xᵀx'/d = (1 − arccos(ρ)/π)/2 · xᵀx'/d."""
    path, X = data_dir
    (path / "ntk.tp").write_text("""\
vector x[1..2] : d = load("X2.npy")
matrix U : n x d ~ normal(var=1)
h1 = U @ x[1]
h2 = U @ x[2]
f1 = mean(relu(h1))
f2 = mean(relu(h2))
out ntk = mean(grad(f1, h1) * grad(f2, h2)) * mean(x[1] * x[2])
""")
    np.save(path / "X2.npy", X[:2])
    value = tp.load(path / "ntk.tp").limit().outputs["ntk"].value
    q = X[:2] @ X[:2].T / 5
    rho = q[0, 1] / np.sqrt(q[0, 0] * q[1, 1])
    assert value == pytest.approx((1 - np.arccos(rho) / np.pi) / 2 * q[0, 1], rel=1e-10)


def test_data_products_are_shared_and_zero_variance(data_dir):
    path, X = data_dir
    (path / "z.tp").write_text('vector x[1..4] : d = load("X.npy")\nmatrix U, V : n x d ~ normal()\n'
                               'param sb = 1\nvector b ~ normal(var=sb)\n'
                               'out same = mean((U @ x[1]) * (U @ x[1]))\nout indep = mean((U @ x[1]) * (V @ x[1]))\n'
                               'out bias = mean(b * b)\n')
    p = tp.load(path / "z.tp")
    assert len(p.ir.groups) == 3                    # U's products, V's products, b
    lim = p.limit().outputs
    assert lim["same"].value == pytest.approx(X[0] @ X[0] / 5, rel=1e-12) and lim["indep"].value == 0
    off = tp.load(path / "z.tp", sb=0)
    assert off.limit().outputs["bias"].value == 0
    assert off.execute(n=64).outputs["bias"].mean == 0.0
    (path / "u0.tp").write_text('param s = 0\nvector x[1..4] : d = load("X.npy")\nmatrix U : n x d ~ normal(var=s)\n'
                                'vector b ~ normal()\nh = U @ x[2] + b\nout u = mean((U @ x[1]) ** 2)\n'
                                'out k = mean(h * h) - mean(b * b)\n')
    zero = tp.load(path / "u0.tp")
    lim, run = zero.limit().outputs, zero.execute(n=32)
    assert lim["u"].value == 0 and run.outputs["u"].mean == 0.0
    assert run.outputs["k"].mean == 0.0 and lim["k"].value == 0          # h is b, exactly


@pytest.mark.parametrize("body, where", [
    ("matrix U : n x d ~ normal()\nvector y ~ normal()\nout a = mean(U @ y)\n", "4:18: 'U' maps data"),
    ("vector z : d ~ normal()\n", "'d' is a data dimension"),
    ("matrix U : n x d ~ uniform()\n", "must be normal"),
    ("matrix U : n x d ~ normal()\nout a = mean((U.T) @ x[1])\n", "no transpose"),
    ("vector y[1..3] : d = load(\"X.npy\")\n", "must be a 3 x d array"),
    ("vector y : d = [1, 2]\n", "the data dimension 'd' is 5"),
    ("dim m = 0.5\nvector y : m = [1, 2]\n", "a width that scales with n"),
])
def test_data_errors_are_located(data_dir, body, where):
    path, _ = data_dir
    (path / "bad.tp").write_text('vector x[1..4] : d = load("X.npy")\n' + body)
    with pytest.raises(TPError) as info:
        tp.load(path / "bad.tp")
    assert str(path / "bad.tp") in str(info.value) and where in str(info.value), str(info.value)


# ---- float32 covariances --------------------------------------------------------------
def float32_gram(seed: int = 4) -> np.ndarray:
    """A rank-deficient float32 Gram matrix (rows repeat, as words do) whose smallest eigenvalue is
    negative by rounding only (about -3e-8 at this seed)."""
    X = np.random.default_rng(seed).normal(size=(4, 3)).astype(np.float32)
    X = np.concatenate([X, X[:2]])
    C = (X @ X.T / 3).astype(np.float32)
    return (C + C.T) / 2


COV = 'vector h[1..6] ~ normal(cov=load("C.npy"))\nout k = mean(relu(h[1]) * relu(h[5]))\n'


def test_float32_cov_within_precision_is_projected_with_a_warning(tmp_path, capsys):
    C = float32_gram()
    lowest = np.linalg.eigvalsh(C.astype(float))[0]
    assert -1e-7 < lowest < 0
    np.save(tmp_path / "C.npy", C)
    (tmp_path / "p.tp").write_text(COV)
    p = tp.load(tmp_path / "p.tp")
    (warning,) = p.ir.warnings
    assert warning.startswith(f"{tmp_path / 'p.tp'}:1:18: warning [precision]") and f"{lowest:.3g}" in warning
    lim = p.limit()
    assert warning in lim.warnings
    assert lim.outputs["k"].value == pytest.approx(arccos1(C[0, 0], C[4, 4], C[0, 4]), rel=1e-6)
    assert main(["check", str(tmp_path / "p.tp")]) == 0 and "warning [precision]" in capsys.readouterr().out
    # the same numbers at float64 precision are refused: only float32 data is forgiven its rounding
    np.save(tmp_path / "C.npy", C.astype(np.float64))
    with pytest.raises(TPError, match="1:18: normal: cov must be positive semidefinite"):
        tp.load(tmp_path / "p.tp")


def test_float32_cov_beyond_precision_is_a_located_error(tmp_path):
    C = float32_gram().astype(float)
    C[0, 4] = C[4, 0] = C[0, 4] * 1.01 + 0.05             # no longer a Gram matrix
    np.save(tmp_path / "C.npy", C.astype(np.float32))
    (tmp_path / "p.tp").write_text(COV)
    with pytest.raises(TPError, match=r"p.tp:1:18: normal: cov must be positive semidefinite \(smallest eigenvalue"):
        tp.load(tmp_path / "p.tp")


def test_float32_precision_survives_constant_arithmetic(tmp_path):
    np.save(tmp_path / "C.npy", float32_gram())
    (tmp_path / "p.tp").write_text(COV.replace('load("C.npy")', '2 * load("C.npy") + 0'))
    assert len(tp.load(tmp_path / "p.tp").ir.warnings) == 1


def test_array_output_text_and_latex(tmp_path, capsys):
    f = tmp_path / "k.tp"
    f.write_text(ARC)
    assert main(["compile", str(f), "--emit", "latex"]) == 0
    out = capsys.readouterr().out
    assert "\\mathrm{K[2, 3]}" in out and "\\mathrm{s}" in out
    assert main(["compile", str(f)]) == 0
    assert "K = [9 values in" in capsys.readouterr().out
    assert main(["check", str(f)]) == 0
    assert "outputs    K, s" in capsys.readouterr().out
