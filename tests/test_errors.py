"""Every kind of program error: its exception class, message and exact position.

Each case is (source, class, line, col, message fragment): the position is that of
the offending token. Every error must be a ``tp.TPError`` whose ``str`` is
``<string>:LINE:COL: message`` followed by the source line and a caret under COL.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp

ROOT = Path(__file__).resolve().parent.parent

V = "vector v ~ normal()\n"
VW = "vector v ~ normal()\nmatrix W ~ normal()\n"

# (id, source, error class, line, col, fragment of the message)
CASES = [
    # ---- syntax
    ("missing-rparen", V + "out o = mean(tanh(v) + 1\nout p = 1", tp.TPSyntaxError, 3, 1, "unexpected 'out'"),
    ("stray-token", V + "out o = mean(v) 3", tp.TPSyntaxError, 2, 17, "unexpected '3'"),
    ("stray-rparen", V + "out o = mean(v))", tp.TPSyntaxError, 2, 16, "unexpected ')'"),
    ("bad-statement", V + "v + 1", tp.TPSyntaxError, 2, 3, "unexpected '+'"),
    ("bad-character", "out o = 1 $ 2", tp.TPSyntaxError, 1, 11, "unexpected character '$'"),
    ("unterminated-string", 'param a = load("x.npy)', tp.TPSyntaxError, 1, 16, "unexpected character"),
    ("keyword-as-name", "param = 3", tp.TPSyntaxError, 1, 7, "unexpected '='"),
    ("missing-tilde", "vector x normal()", tp.TPSyntaxError, 1, 10, "unexpected 'normal'"),
    ("dangling-operator", "out o = 1 +", tp.TPSyntaxError, 1, 12, "unexpected newline"),
    ("attribute", VW + "out o = mean(W.foo @ v)", tp.TPSyntaxError, 3, 16, "unknown attribute '.foo'"),
    ("matrix-shape-x", "dim m = 0.5\nmatrix A : m y n ~ normal()", tp.TPSyntaxError, 2, 14, "expected 'x'"),
    # ---- names
    ("unknown-name", V + "out o = mean(y)", tp.TPNameError, 2, 14, "unknown name 'y'"),
    ("used-before-bound", V + "out o = mean(y)\ny = v", tp.TPNameError, 2, 14, "used before it is bound"),
    ("used-before-bound-in-loop", V + "for i in 1..2 {\n  out o = mean(y)\n}\ny = v",
     tp.TPNameError, 3, 16, "used before it is bound"),
    ("unknown-indexed-name", V + "out o = mean(v[1])", tp.TPNameError, 2, 14, "v[1]"),
    ("unknown-function", V + "out o = mean(foo(v))", tp.TPNameError, 2, 14, "unknown function 'foo'"),
    ("def-free-name", V + "def f(a) = a * v\nout o = mean(f(v))", tp.TPNameError, 2, 16,
     "not an argument of this def"),
    ("def-builtin", "def mean(a) = a", tp.TPNameError, 1, 1, "'mean' is a builtin"),
    ("def-repeated-arg", "def f(a, a) = a", tp.TPNameError, 1, 1, "repeated argument"),
    ("output-twice", V + "out o = mean(v)\nout o = 1", tp.TPNameError, 3, 1, "defined twice"),
    ("dim-twice", "dim m = 0.5\ndim m = 0.3", tp.TPNameError, 2, 1, "already defined"),
    ("dim-n", "dim n = 0.5", tp.TPNameError, 1, 1, "already defined"),
    ("bind-a-dim", "dim m = 0.5\nm = 3", tp.TPNameError, 2, 1, "'m' is already a dim"),
    ("loop-var-after-loop", "for i in 1..3 { a = i }\nout o = i", tp.TPNameError, 2, 9, "unknown name 'i'"),
    # ---- arity
    ("arity-too-many", V + "out o = mean(tanh(v, v))", tp.TPTypeError, 2, 14, "tanh() takes 1 argument, got 2"),
    ("arity-too-few", V + "out o = mean(max(v))", tp.TPTypeError, 2, 14, "max() takes 2 arguments, got 1"),
    ("arity-none", V + "out o = mean(relu())", tp.TPTypeError, 2, 14, "relu() takes 1 argument, got 0"),
    ("arity-leaky", V + "out o = mean(leaky_relu(v))", tp.TPTypeError, 2, 14, "takes 2 arguments"),
    ("arity-def", "def f(a) = a\nout o = f(1, 2)", tp.TPTypeError, 2, 9, "f() takes 1 argument, got 2"),
    ("arity-mean", V + "out o = mean(v, v)", tp.TPTypeError, 2, 9, "mean() takes 1 argument"),
    ("arity-diff", V + "out o = mean(diff(v))", tp.TPTypeError, 2, 14, "diff() takes two arguments"),
    ("keyword-to-builtin", V + "out o = mean(tanh(x=v))", tp.TPTypeError, 2, 14, "no keyword arguments"),
    # ---- types
    ("matmul-scalar", VW + "c = mean(v)\nout o = mean(W @ c)", tp.TPTypeError, 4, 18,
     "right side of '@' must be a vector"),
    ("matmul-number", VW + "out o = mean(W @ 1)", tp.TPTypeError, 3, 18, "right side of '@' must be a vector"),
    ("matmul-param", "param a = 2\n" + VW + "out o = mean(W @ a)", tp.TPTypeError, 4, 18,
     "right side of '@' must be a vector"),
    ("matmul-moment", VW + "out o = mean(W @ mean(v))", tp.TPTypeError, 3, 18, "must be a vector"),
    ("matmul-matrix", VW + "out o = mean(W @ W)", tp.TPTypeError, 3, 18, "a matrix used as a value"),
    ("mean-of-scalar", V + "c = mean(v)\nout o = mean(c)", tp.TPTypeError, 3, 9, "mean() needs a vector"),
    ("mean-of-number", "out o = mean(2)", tp.TPTypeError, 1, 9, "mean() needs a vector"),
    ("mean-of-matrix", VW + "out o = mean(W)", tp.TPTypeError, 3, 9, "not a matrix"),
    ("scalar-matmul", V + "c = mean(v)\nout o = mean(c @ v)", tp.TPTypeError, 3, 14,
     "left side of '@' must be a matrix"),
    ("vector-matmul", VW + "out o = mean(v @ W)", tp.TPTypeError, 3, 14, "left side of '@' must be a matrix"),
    ("matrix-plus-vector", VW + "out o = mean(W + v)", tp.TPTypeError, 3, 14, "a matrix used as a value"),
    ("matrix-in-builtin", VW + "out o = mean(tanh(W))", tp.TPTypeError, 3, 19, "a matrix used as a value"),
    ("vector-times-matrix", VW + "out o = mean(v * W @ v)", tp.TPTypeError, 3, 18, "a matrix used as a value"),
    ("matrix-to-def", VW + "def f(a) = a\nout o = mean(f(W))", tp.TPTypeError, 4, 16, "takes scalars or vectors"),
    ("vector-output", V + "out v2 = v", tp.TPTypeError, 2, 10, "output must be a scalar"),
    ("vector-output-by-name", V + "out v", tp.TPTypeError, 2, 1, "output must be a scalar"),
    ("transpose-vector", V + "out o = mean(v.T)", tp.TPTypeError, 2, 14, "'.T' applies to a matrix only"),
    ("transpose-matmul", VW + "out o = mean((W @ v).T)", tp.TPTypeError, 3, 14, "'.T' applies to a matrix"),
    ("compare-vectors", V + "out o = mean(v > 0)", tp.TPTypeError, 2, 14, "comparison '>' needs constants"),
    ("if-on-vector", V + "out o = mean(1 if v else 2)", tp.TPTypeError, 2, 19, "condition of 'if'"),
    ("list-as-value", "param a = [1, 2]\n" + V + "out o = mean(v * a)", tp.TPTypeError, 3, 18,
     "list constant cannot be used"),
    ("string-as-value", V + 'out o = mean(v * "s")', tp.TPTypeError, 2, 18, "string cannot be used"),
    ("string-bound", 'a = "s"', tp.TPTypeError, 1, 5, "string cannot be bound"),
    ("array-unindexed", "vector h[1..2] ~ normal()\nout o = mean(h)", tp.TPTypeError, 2, 14, "'h' is an array"),
    ("runtime-in-dist", V + "c = mean(v)\nvector x ~ normal(var=c)", tp.TPTypeError, 3, 23,
     "distribution parameter must be a constant"),
    ("runtime-range-end", V + "for i in 1..mean(v) { a = 1 }", tp.TPTypeError, 2, 13, "range end must be a constant"),
    ("runtime-index", "vector h[1..2] ~ normal()\nout o = mean(h[mean(h[1])])", tp.TPTypeError, 2, 16,
     "index must be a constant"),
    ("list-element-vector", V + "param a = [v]", tp.TPTypeError, 2, 12, "list element must be a constant"),
    ("diff-wrt-expression", V + "out o = mean(diff(v, v * 2))", tp.TPTypeError, 2, 22, "x must be the name of a vector"),
    ("diff-of-constant", V + "out o = mean(diff(1, v))", tp.TPTypeError, 2, 19, "e must be a vector expression"),
    ("load-not-string", "param a = load(3)", tp.TPTypeError, 1, 11, "load() takes a file name"),
    # ---- widths
    ("width-mismatch-matmul", "dim m = 0.5\nvector z : m ~ normal()\nmatrix A : m x n ~ normal()\n"
     "out o = mean(A @ z)", tp.TPTypeError, 4, 14, "A maps n-vectors, but the argument has width m"),
    ("width-mismatch-transpose", "dim m = 0.5\nvector v ~ normal()\nmatrix A : m x n ~ normal()\n"
     "out o = mean(A.T @ v)", tp.TPTypeError, 4, 14, "A.T maps m-vectors"),
    ("width-mismatch-nonlin", "dim m = 0.5\nvector z : m ~ normal()\nvector v ~ normal()\n"
     "out o = mean(z * v)", tp.TPTypeError, 4, 14, "different widths"),
    ("dim-ratio-zero", "dim m = 0", tp.TPValueError, 1, 9, "positive"),
    ("dim-ratio-negative", "dim m = -1", tp.TPValueError, 1, 9, "positive"),
    # ---- distributions
    ("cov-not-symmetric", "vector x, y ~ normal(cov=[[1, 0.5], [0.2, 1]])", tp.TPValueError, 1, 15, "symmetric"),
    ("cov-not-psd", "vector x, y ~ normal(cov=[[1, 2], [2, 1]])", tp.TPValueError, 1, 15, "positive semidefinite"),
    ("cov-negative-diagonal", "vector x, y ~ normal(cov=[[1, 0], [0, -1]])", tp.TPValueError, 1, 15,
     "positive semidefinite"),
    ("cov-wrong-size", "vector x, y ~ normal(cov=eye(3))", tp.TPValueError, 1, 15, "cov must be 2x2"),
    ("cov-and-var", "vector x, y ~ normal(cov=eye(2), var=2)", tp.TPValueError, 1, 15, "either cov or var"),
    ("cov-for-matrix", "matrix W ~ normal(cov=[[1]])", tp.TPValueError, 1, 12, "only allowed for vectors"),
    ("mean-wrong-length", "vector x ~ normal(mean=[1, 2])", tp.TPValueError, 1, 12, "mean must be"),
    ("df-two", "vector x ~ student_t(df=2)", tp.TPValueError, 1, 12, "df must be > 2"),
    ("df-positional", "matrix W ~ student_t(1)", tp.TPValueError, 1, 12, "df must be > 2"),
    ("df-mvt", "matrix W ~ mvt(1.5)", tp.TPValueError, 1, 12, "df must be > 2"),
    ("df-missing", "matrix W ~ student_t()", tp.TPValueError, 1, 12, "df is required"),
    ("var-negative-tiny", "vector x ~ normal(var=0 * -1 - 1e-9)", tp.TPValueError, 1, 12, "var must be a finite number > 0"),
    ("var-negative", "matrix W ~ uniform(var=-1)", tp.TPValueError, 1, 12, "var must be a finite number > 0"),
    ("unknown-family", "vector x ~ cauchy()", tp.TPValueError, 1, 12, "unknown distribution 'cauchy'"),
    ("unknown-keyword", "vector x ~ normal(scale=2)", tp.TPValueError, 1, 12, "unknown keyword 'scale'"),
    ("too-many-positional", "matrix W ~ normal(1, 2)", tp.TPValueError, 1, 12, "at most 1 positional"),
    ("matrix-only-family", "vector x ~ orthogonal()", tp.TPValueError, 1, 12, "only for matrices"),
    ("mvt-for-vector", "vector x ~ mvt(5)", tp.TPValueError, 1, 12, "only for matrices"),
    # ---- indices and constants
    ("index-out-of-range", "vector h[1..3] ~ normal()\nout o = mean(h[4])", tp.TPIndexError, 2, 14,
     "index 4 is outside the declared range 1..3"),
    ("index-zero", "vector h[1..3] ~ normal()\nout o = mean(h[0])", tp.TPIndexError, 2, 14, "outside"),
    ("index-in-loop", "vector h[1..3] ~ normal()\nfor i in 1..4 {\n  o[i] = mean(h[i])\n}",
     tp.TPIndexError, 3, 15, "index 4 is outside"),
    ("assign-out-of-range", "vector h[1..3] ~ normal()\nh[4] = h[1]", tp.TPIndexError, 2, 1, "outside"),
    ("index-count", "vector h[1..3] ~ normal()\nout o = mean(h[1, 2])", tp.TPIndexError, 2, 14, "takes 1 index"),
    ("empty-array-range", "vector h[3..1] ~ normal()", tp.TPIndexError, 1, 8, "empty range"),
    ("index-not-integer", "vector h[1..3] ~ normal()\nout o = mean(h[0.5])", tp.TPValueError, 2, 16,
     "must be an integer, got 0.5"),
    ("range-not-integer", "for i in 1..2.5 { a = 1 }", tp.TPValueError, 1, 13, "must be an integer, got 2.5"),
    ("sum-range-not-integer", "out o = sum(j in 1..2.5: j)", tp.TPValueError, 1, 21, "must be an integer"),
    ("division-by-zero", "out o = 1/0", tp.TPValueError, 1, 9, "'/' on constants"),
    ("log-of-negative", "out o = log(-1)", tp.TPValueError, 1, 9, "not finite"),
    ("overflow", "out o = 10 ** 400", tp.TPValueError, 1, 9, "overflow"),
    ("shapes", "param a = [1, 2] * [1, 2, 3]", tp.TPValueError, 1, 11, "shapes do not match"),
    ("eye-too-big", "param a = eye(100000)", tp.TPValueError, 1, 11, "eye(k) needs"),
    ("eye-fraction", "param a = eye(2.5)", tp.TPValueError, 1, 11, "must be an integer"),
    ("diff-of-step", V + "out o = mean(diff(step(v), v))", tp.TPValueError, 2, 14, "Dirac mass"),
    ("diff-of-sign", V + "out o = mean(diff(sign(v), v))", tp.TPValueError, 2, 14, "Dirac mass"),
]


def check_rendering(err: tp.TPError, src: str, file: str = "<string>") -> None:
    """``FILE:LINE:COL: message``, then the source line, then a caret under COL."""
    text = str(err)
    lines = text.split("\n")
    assert lines[0] == f"{file}:{err.line}:{err.col}: {err.message}"
    source_line = src.splitlines()[err.line - 1].replace("\t", " ")
    assert lines[1] == "    " + source_line
    assert lines[2] == "    " + " " * (err.col - 1) + "^"


@pytest.mark.parametrize("src, cls, line, col, fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_error(src, cls, line, col, fragment):
    with pytest.raises(cls) as err:
        tp.parse(src)
    e = err.value
    assert isinstance(e, tp.TPError)
    assert (e.line, e.col) == (line, col), str(e)
    assert fragment in e.message
    assert str(e).startswith(f"<string>:{line}:{col}: ")
    check_rendering(e, src)


def test_case_ids_are_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))


def test_error_classes_are_exported_and_subclass_tperror():
    names = ["TPSyntaxError", "TPNameError", "TPTypeError", "TPValueError", "TPIndexError",
             "TPLoadError", "TPLimitError", "TPNumericalError", "TPUsageError"]
    for name in names:
        cls = getattr(tp, name)
        assert issubclass(cls, tp.TPError) and cls is not tp.TPError and name in tp.__all__
    assert issubclass(tp.TPError, Exception) and "TPError" in tp.__all__


def test_tab_is_rendered_as_one_column():
    src = V + "\tout o = mean(y)"
    with pytest.raises(tp.TPNameError) as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == (2, 15)
    check_rendering(err.value, src)


def test_errors_in_a_file_carry_its_name(tmp_path):
    path = tmp_path / "bad.tp"
    src = V + "out o = mean(W)\n"
    path.write_text(src)
    with pytest.raises(tp.TPNameError) as err:
        tp.load(path)
    assert str(err.value).startswith(f"{path}:2:14: unknown name 'W'")
    check_rendering(err.value, src, file=str(path))


def test_parse_with_a_file_name():
    with pytest.raises(tp.TPSyntaxError) as err:
        tp.parse("out o = 1 $", file="my.tp")
    assert str(err.value).startswith("my.tp:1:11: ")


def test_unknown_override():
    with pytest.raises(tp.TPNameError) as err:
        tp.parse("param L = 3\nout o = L", Q=5)
    assert "unknown parameter 'Q'" in err.value.message and "L" in err.value.message
    assert str(err.value).startswith("<string>:")


def test_missing_program_file(tmp_path):
    with pytest.raises(tp.TPLoadError) as err:
        tp.load(tmp_path / "nope.tp")
    assert str(err.value).startswith(f"{tmp_path / 'nope.tp'}: ")


# ---- load ----------------------------------------------------------------------------------------------
@pytest.fixture
def folder(tmp_path):
    prog = tmp_path / "prog"
    prog.mkdir()
    np.save(prog / "ok.npy", np.eye(2))
    np.save(tmp_path / "outside.npy", np.eye(2))
    np.save(prog / "obj.npy", np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    np.save(prog / "complex.npy", np.array([1 + 2j]))
    (prog / "table.txt").write_text("1 2\n3 4\n")
    (prog / "garbage.npy").write_bytes(b"not an npy file at all")
    return prog


@pytest.mark.parametrize("name, fragment", [
    ("missing.npy", "no file 'missing.npy'"),
    ("../outside.npy", "outside the program's folder"),
    ("sub/../../outside.npy", "outside the program's folder"),
    ("ABS", "is absolute"),
    ("obj.npy", "not a numeric .npy array"),
    ("complex.npy", "real numeric array"),
    ("garbage.npy", "not a numeric .npy array"),
    ("table.txt", "only .npy files"),
])
def test_bad_load(folder, name, fragment):
    if name == "ABS":
        name = str(folder / "ok.npy")
    src = f'vector a, b ~ normal(cov=load("{name}"))\nout o = mean(a * b)\n'
    (folder / "p.tp").write_text(src)
    with pytest.raises(tp.TPLoadError) as err:
        tp.load(folder / "p.tp")
    assert (err.value.line, err.value.col) == (1, 26)      # the load( call
    assert fragment in err.value.message
    check_rendering(err.value, src, file=str(folder / "p.tp"))


def test_good_load_next_to_the_bad_ones(folder):
    (folder / "p.tp").write_text('vector a, b ~ normal(cov=load("ok.npy"))\nout o = mean(a * b)\n')
    assert tp.load(folder / "p.tp").ir.groups[0].dist.cov == ((1.0, 0.0), (0.0, 1.0))


def test_load_refuses_pickles_without_running_them(folder, tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    np.save(folder / "evil.npy", np.array([Evil()], dtype=object), allow_pickle=True)
    (folder / "p.tp").write_text('param a = load("evil.npy")\n')
    with pytest.raises(tp.TPLoadError):
        tp.load(folder / "p.tp")
    assert not marker.exists()


# ---- size limits ----------------------------------------------------------------------------------------
LIMIT_CASES = [
    ("matmul-loop", VW + "for i in 1..100000000 { v = W @ v }\nout o = mean(v)", 3, 1),
    ("nonlin-loop", V + "for i in 1..100000000 { v = v + 1 }\nout o = mean(v)", 2, 1),
    ("constant-loop", V + "for i in 1..100000000 { a = 1 }\nout o = mean(v)", 2, 1),
    ("nested-loops", V + "for i in 1..10000 { for j in 1..10000 { v = v + 1 } }", 2, 1),
    ("nested-empty-inner", V + "for i in 1..100000000 { for j in 1..0 { a = 1 } }", 2, 1),
    ("vector-array", "vector v[1..100000000] ~ normal()", 1, 8),
    ("matrix-array", "matrix W[1..100000000] ~ normal()", 1, 8),
    ("sum", V + "out o = mean(sum(j in 1..100000000: v))", 2, 14),
    ("comprehension", "param a = [i for i in 1..100000000]", 1, 11),
]


@pytest.mark.parametrize("src, line, col", [c[1:] for c in LIMIT_CASES], ids=[c[0] for c in LIMIT_CASES])
def test_huge_unrolling_is_refused_quickly(src, line, col):
    start = time.process_time()                # CPU seconds: a bound on the work, not on the load
    with pytest.raises(tp.TPLimitError) as err:
        tp.parse(src)
    assert time.process_time() - start < 2.0   # refused, not unrolled
    assert (err.value.line, err.value.col) == (line, col)
    check_rendering(err.value, src)


def test_max_nodes_is_a_parameter():
    src = VW + "for i in 1..20 { v = W @ v }\nout o = mean(v)"
    assert tp.parse(src, max_nodes=100).summary()["MatMul"] == 20
    with pytest.raises(tp.TPLimitError, match="over the limit of 10"):
        tp.parse(src, max_nodes=10)


SLOW_LOOPS = {
    "empty-body": V + "for i in 1..100000000 { }\nout o = mean(v)",
    "constant-body": "for i in 1..9000000 { a = 1 }\nout o = a",
}
_CHILD = """
import sys, time, tensorprog as tp
text = sys.stdin.read()
start = time.process_time()
try:
    tp.parse(text)
    print("ok", time.process_time() - start)
except tp.TPLimitError:
    print("limit", time.process_time() - start)
"""
#: CPU seconds the child's parse may take (its interpreter's start-up not counted)
QUICK = 10.0


@pytest.fixture(scope="module")
def slow_loops() -> dict[str, str]:
    """'ok', 'limit' or 'timeout' for each of SLOW_LOOPS, parsed in child processes run
    concurrently and killed after two minutes (a hang must not hang the suite); 'slow' where the
    parse took more than QUICK seconds of CPU time (wall time would measure the machine's load)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    procs = {}
    for key, src in SLOW_LOOPS.items():
        procs[key] = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      cwd=ROOT, env=env)
        procs[key].stdin.write(src)
        procs[key].stdin.close()
    deadline = time.monotonic() + 120.0     # a hang: ~50 s of CPU, killed here even on a loaded box
    results = {}
    for key, proc in procs.items():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            assert proc.returncode == 0, proc.stderr.read()
            status, cpu = proc.stdout.read().split()
            results[key] = status if float(cpu) < QUICK else "slow"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            results[key] = "timeout"
        finally:
            proc.stdout.close()
            proc.stderr.close()
    return results


def test_huge_loop_with_empty_body_is_quick(slow_loops):
    assert slow_loops["empty-body"] == "limit"


def test_huge_loop_with_constant_body_is_quick(slow_loops):
    assert slow_loops["constant-body"] == "limit"


def test_recursive_def_is_located():
    with pytest.raises(tp.TPLimitError) as err:
        tp.parse("def f(a) = f(a)\nout o = f(1)")
    assert (err.value.line, err.value.col) in ((1, 12), (2, 9))


# ---- known bugs -----------------------------------------------------------------------------------------
def test_matrix_bound_to_a_name_is_an_alias():
    # binding a matrix to a name aliases it (weight sharing), it is not used as a value
    p = tp.parse("matrix W ~ normal()\nV = W\nvector x ~ normal()\nout o = mean((V @ x) * (W @ x))")
    mm = [e for e in p.ir.eqns if type(e).__name__ == "MatMul"]
    assert len(mm) == 2 and mm[0].matrix == mm[1].matrix
    with pytest.raises(tp.TPTypeError) as err:
        tp.parse("matrix W ~ normal()\nvector x ~ normal()\ny = x + W")
    assert (err.value.line, err.value.col) == (3, 9)


@pytest.mark.parametrize("src", ["vector z : k ~ normal()", "matrix A : k x n ~ normal()"])
def test_unknown_width_is_located_at_the_name(src):
    with pytest.raises(tp.TPNameError, match="unknown width 'k'") as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == (1, 12)


@pytest.mark.parametrize("src", ["out o", "vector v ~ normal()\nout o = mean(v[1])"])
def test_never_bound_name_is_not_reported_as_used_before_bound(src):
    with pytest.raises(tp.TPNameError) as err:
        tp.parse(src)
    assert "used before it is bound" not in err.value.message


def test_unknown_width_is_a_name_error():
    with pytest.raises(tp.TPNameError, match="unknown width 'k'") as err:
        tp.parse("vector z : k ~ normal()")
    assert err.value.line == 1


@pytest.mark.parametrize("src", ["param a = [[1, 2], [3]]", "param a = [[1, 2], 3]",
                                 "param a = [[1 for j in 1..i] for i in 1..2]"])
def test_ragged_list_is_a_value_error(src):
    with pytest.raises(tp.TPValueError) as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == (1, 11)


def test_repeated_keyword_in_distribution():
    with pytest.raises(tp.TPError) as err:
        tp.parse("matrix W ~ normal(var=1, var=2)")
    assert err.value.line == 1


def test_infinite_literal_is_refused():
    with pytest.raises(tp.TPValueError) as err:
        tp.parse("out o = 1e400")
    assert (err.value.line, err.value.col) == (1, 9)


@pytest.mark.parametrize("src", [V + "out o = mean(tanh(v)", V + "out o = mean(tanh(v)\n\n\n"])
def test_unexpected_end_is_located_after_the_last_token(src):
    with pytest.raises(tp.TPSyntaxError, match="end of program") as err:
        tp.parse(src)
    assert (err.value.line, err.value.col) == (2, 21)


def test_unexpected_end_is_a_syntax_error():
    with pytest.raises(tp.TPSyntaxError, match="end of program"):
        tp.parse("for i in 1..3 {\n  a = 1\n")


# ---- execution errors are located too ------------------------------------------------------------------
def test_numerical_error_is_located():
    src = V + "out o = mean(v / 0)"
    with pytest.raises(tp.TPNumericalError) as err:
        tp.parse(src).execute(n=4)
    assert (err.value.line, err.value.col) == (2, 9)
    check_rendering(err.value, src)


@pytest.mark.parametrize("kwargs", [{"n": 0}, {"n": 4, "trials": 0}, {"n": 4, "matrix_dist": "cauchy"}])
def test_bad_execute_arguments_are_usage_errors(kwargs):
    with pytest.raises(tp.TPUsageError):
        tp.parse(VW + "out o = mean(W @ v)").execute(**kwargs)


# ---- found by the long fuzz run: a line continuation that joins no line ----------------------------
@pytest.mark.parametrize("tail, where", [("\\", "3:1"), ("\\\n", "3:1"), ("\\\n\n  \n", "3:1"),
                                         ("out p = mean(x) \\\n", "3:17")])
def test_line_continuation_at_the_end_of_the_file(tail, where):
    with pytest.raises(tp.TPSyntaxError) as err:
        tp.parse("vector x ~ normal()\nout o = mean(x)\n" + tail)
    assert str(err.value).startswith(f"<string>:{where}: a line continuation '\\' at the end of the file")


@pytest.mark.parametrize("text", ["vector x ~ normal()\nout o = \\\n  mean(x)\n",
                                  "vector x ~ normal()\nout o = mean(x)  # ends with \\\n"])
def test_line_continuations_that_join_a_line_or_sit_in_a_comment(text):
    assert tp.parse(text).ir.outputs[0].name == "o"
