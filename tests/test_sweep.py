"""Sweeps (tpc sweep, Program.sweep): the batched grid equals pointwise compiles; errors name the param."""
import json
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp
from tensorprog.limit.accuracy import METHOD_RANK
from tensorprog.cli import main
from tensorprog.errors import TPUsageError
from tensorprog.sweep.grid import Axis, check_memory, parse_axis

TANH = """
param L = 3
param sw = 1.5
param sb = 0.1
param rho = 0.5
vector x, y ~ normal(cov=[[1, rho], [rho, 1]])
for l in 1..L {
    matrix W ~ normal(var=sw)
    vector b ~ normal(var=sb)
    x = W @ tanh(x) + b
    y = W @ tanh(y) + b
}
out q = mean(x * x)
out c = mean(x * y) / sqrt(mean(x * x) * mean(y * y))
out chi1 = sw * mean((1 - tanh(x) ** 2) ** 2)
"""

RELU = """
param L = 2
param rho = 0.3
param s = 2
vector x, y ~ normal(cov=[[1, rho], [rho, 1]])
for l in 1..L {
    matrix W ~ normal(var=s)
    x = W @ relu(x)
    y = W @ relu(y)
}
out kxy = mean(relu(x) * relu(y))
out kxx = mean(relu(x) ** 2)
"""


def pointwise(text, names, **params):
    return tp.parse(text, **params).limit().outputs


def check_points(text, result, rng, count=5):
    """Random grid points against pointwise compiles: equal to 1e-10 and within the stated errors."""
    shape = result.shape
    for _ in range(count):
        idx = tuple(int(rng.integers(s)) for s in shape)
        params = {k: float(v[i]) for (k, v), i in zip(result.params.items(), idx)}
        ref = pointwise(text, list(result.values), **params)
        for name, lv in ref.items():
            got, err = result.values[name][idx], result.errors[name][idx]
            assert abs(got - lv.value) <= 1e-10 * max(1, abs(lv.value)), (name, params, got, lv.value)
            assert abs(got - lv.value) <= err + lv.error
            # the batch may reach a point by a more exact rule than the lone compile (the Mehler
            # series over the batch, where a single compile keeps 1-D quadrature), never a less exact one
            method = result.methods[name][idx]
            assert METHOD_RANK[method] <= METHOD_RANK[lv.method], (name, method, lv.method)
            if method == lv.method:
                assert err == pytest.approx(lv.error, rel=1e-3, abs=1e-15)


def test_random_grid_equals_pointwise_quadrature():
    rng = np.random.default_rng(7)
    sw, sb = np.sort(rng.uniform(0.8, 3.0, 4)), np.sort(rng.uniform(0.01, 0.4, 3))
    result = tp.parse(TANH).sweep({"sw": sw, "sb": sb})
    assert result.shape == (4, 3) and result.structures == 1
    assert set(result.methods["q"].ravel()) <= {"series", "quadrature"}
    check_points(TANH, result, rng)


def test_random_grid_equals_pointwise_closed_forms():
    rng = np.random.default_rng(8)
    result = tp.parse(RELU).sweep({"rho": rng.uniform(-0.9, 0.9, 5), "s": rng.uniform(0.5, 3, 3)})
    assert set(result.methods["kxy"].ravel()) == {"exact"}
    check_points(RELU, result, rng)
    # the arc-cosine map, independently: E relu(u) relu(v) = q J(c) for variances q, correlation c
    def J(c):
        return (np.sqrt(1 - c ** 2) + (np.pi - np.arccos(c)) * c) / (2 * np.pi)
    for i, j in ((0, 0), (4, 2)):
        rho, s = result.params["rho"][i], result.params["s"][j]
        q1, c1 = s / 2, 2 * J(rho)                 # after layer 1
        q2, c2 = s * q1 / 2, 2 * J(c1)             # after layer 2
        assert result.values["kxy"][i, j] == pytest.approx(q2 * J(c2), rel=1e-12)
        assert result.values["kxx"][i, j] == pytest.approx(q2 / 2, rel=1e-12)


def test_structural_param_one_compile_per_structure():
    rng = np.random.default_rng(9)
    result = tp.parse(TANH).sweep({"L": [1, 2, 3], "sw": [1.0, 2.2]})
    assert result.structures == 3
    check_points(TANH, result, rng, count=4)


def test_leaf_of_two_params_falls_back_to_pointwise_lowering():
    text = TANH.replace("normal(var=sw)", "normal(var=sw * (1 + sb))")
    rng = np.random.default_rng(10)
    result = tp.parse(text).sweep({"sw": [1.0, 1.7, 2.4], "sb": [0.05, 0.2]})
    check_points(text, result, rng, count=4)


def test_zero_bias_is_another_structure():
    result = tp.parse(TANH).sweep({"sb": [0.0, 0.1, 0.2]})
    assert result.structures == 2
    check_points(TANH, result, np.random.default_rng(1), count=3)


def test_errors_name_the_param():
    p = tp.parse(TANH)
    with pytest.raises(TPUsageError, match="unknown param 'sigma'"):
        p.sweep({"sigma": [1, 2]})
    with pytest.raises(TPUsageError, match="param sw has an empty range"):
        p.sweep({"sw": []})
    with pytest.raises(TPUsageError, match="-D sw: count 0"):
        parse_axis("sw=1:2:0")
    with pytest.raises(TPUsageError, match="-D sw: empty range"):
        parse_axis("sw=")
    with pytest.raises(TPUsageError, match=r"sw \(1000000\) x sb \(1000000\) has 1,000,000,000,000 points "
                                           r"and needs about [\d,]+ bytes"):
        check_memory([Axis("sw", np.zeros(10 ** 6)), Axis("sb", np.zeros(10 ** 6))], 3, "f")
    assert check_memory([Axis("sw", np.zeros(10))], 3, "f", available=10 ** 6) == 10 * 8 * 10 + 10 * 512
    with pytest.raises(TPUsageError, match="needs about 5,920 bytes, more than the 100 available"):
        check_memory([Axis("sw", np.zeros(10))], 3, "f", available=100)
    with pytest.raises(tp.TPError, match="at the sweep point sw=-1"):
        p.sweep({"sw": [1.0, -1.0]})


def test_parse_axis():
    a = parse_axis("sw=1:2:5")
    assert a.name == "sw" and np.allclose(a.values, [1, 1.25, 1.5, 1.75, 2])
    assert np.array_equal(parse_axis("sb=0.1, 0.3").values, [0.1, 0.3])
    assert parse_axis("L=4") == ("L", 4.0)


def test_cli_json_npz_and_errors(tmp_path, capsys):
    prog = tmp_path / "t.tp"
    prog.write_text(RELU)
    out = tmp_path / "g.npz"
    assert main(["sweep", str(prog), "-D", "rho=0:0.5:3", "-D", "s=1,2", "--json", "--out", str(out)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["params"] == {"rho": [0.0, 0.25, 0.5], "s": [1.0, 2.0]}
    assert np.array(data["outputs"]["kxy"]["value"]).shape == (3, 2)
    assert data["outputs"]["kxx"]["method"][0][0] == "exact"
    saved = np.load(out)
    assert set(saved.files) == {"kxy", "kxy_error", "kxx", "kxx_error", "rho", "s"}
    assert np.array_equal(saved["s"], [[1, 2]] * 3) and np.allclose(saved["kxy"], data["outputs"]["kxy"]["value"])
    for args, message in ((["-D", "nope=1,2"], "unknown param 'nope'"), (["-D", "rho=0:1:0"], "count 0"),
                          (["-D", "rho=0,1", "--contour", "k=1"], "no output named 'k'"),
                          (["-D", "rho=0,1", "-D", "rho=0.5"], "-D rho: given more than once")):
        assert main(["sweep", str(prog)] + args) == 2
        assert message in capsys.readouterr().err


def test_finite_width_equals_pointwise_execute():
    p = tp.parse(TANH, L=2)
    result = p.sweep({"sw": [1.0, 2.0], "sb": [0.1, 0.3]}, n=48, trials=3, seed=5)
    for i, sw in enumerate([1.0, 2.0]):
        for j, sb in enumerate([0.1, 0.3]):
            ref = tp.parse(TANH, L=2, sw=sw, sb=sb).execute(48, 3, 5).entries
            for name, o in ref.items():
                assert result.values[name][i, j] == o.mean
                assert result.errors[name][i, j] == pytest.approx(o.sem)
    again = p.sweep({"sw": [1.0, 2.0], "sb": [0.1, 0.3]}, n=48, trials=3, seed=5, jobs=2)
    assert all(np.array_equal(again.values[k], result.values[k]) for k in result.values)


def test_plots(tmp_path):
    pytest.importorskip("matplotlib")
    r2 = tp.parse(TANH, L=2).sweep({"sw": [1.0, 1.5, 2.0], "sb": [0.05, 0.2]})
    fig = r2.plot(tmp_path / "two.png", {"chi1": [1.0]})
    assert (tmp_path / "two.png").stat().st_size > 0
    assert [ax.get_xlabel() for ax in fig.axes if ax.get_xlabel()][:1] == ["sw"]
    r1 = tp.parse(TANH, L=2).sweep({"sw": [1.0, 1.5, 2.0]})
    fig = r1.plot(tmp_path / "one.png")
    assert fig.axes[0].get_xlabel() == "sw"
    assert r1._repr_png_()[:4] == b"\x89PNG"
    page = r1._repr_html_()
    assert page.startswith("<pre>sweep over sw[3] = 3 points: limit") and '<img src="data:image/png;base64,' in page


def test_learning_rate_sweep_equals_pointwise():
    path = Path(__file__).resolve().parent.parent / "programs" / "sgd_two_layer.tp"
    text = path.read_text()
    result = tp.parse(text, file=str(path)).sweep({"lr": [0.1, 1.0]})
    assert result.structures == 1
    for i, lr in enumerate([0.1, 1.0]):
        ref = tp.parse(text, lr=lr).limit().outputs
        for name, lv in ref.items():
            assert abs(result.values[name][i] - lv.value) <= 1e-10 * max(1, abs(lv.value))


def test_finite_width_on_a_dask_scheduler_equals_local():
    pytest.importorskip("distributed")
    p = tp.parse(TANH, L=2)
    grid = {"sw": [1.0, 2.0], "sb": [0.1, 0.2]}
    local = p.sweep(grid, n=32, trials=2, seed=1)
    remote = p.sweep(grid, n=32, trials=2, seed=1, scheduler="local")
    assert all(np.array_equal(remote.values[k], local.values[k]) for k in local.values)
    with pytest.raises(TPUsageError, match="width must be a positive integer"):
        p.sweep(grid, n=0)
