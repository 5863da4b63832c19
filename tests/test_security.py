"""Program text is never evaluated as Python, and a program reads only its own folder."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tensorprog as tp

SOURCE = Path(__file__).resolve().parent.parent / "tensorprog"
FORBIDDEN = re.compile(r"(?<![\w.])(?<!def )(eval|exec|sympify|lambdify|parse_expr|__import__)\s*\(|"
                       r"\b(sp|sympy)\.(sympify|lambdify|parse_expr|S)\(|import pickle|allow_pickle\s*=\s*True")


def test_no_dynamic_evaluation_in_the_package():
    offenders = []
    for path in SOURCE.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if FORBIDDEN.search(code):
                offenders.append(f"{path.name}:{number}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("text", [
    'out o = __import__("os")',
    "x = ().__class__",
    'param a = load("/etc/passwd")',
    'param a = load("../x.npy")',
    "out o = mean(x.__class__)",
])
def test_python_syntax_and_escapes_are_refused(text):
    with pytest.raises(tp.TPError):
        tp.parse("vector x ~ normal()\n" + text)


def test_load_refuses_symlinks_out_of_the_folder(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    np.save(outside / "secret.npy", np.ones(3))
    prog = tmp_path / "prog"
    prog.mkdir()
    (prog / "link.npy").symlink_to(outside / "secret.npy")
    (prog / "p.tp").write_text('param a = load("link.npy")\nout o = 1\n')
    with pytest.raises(tp.TPLoadError, match="outside"):
        tp.load(prog / "p.tp")
