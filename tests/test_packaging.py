"""A wheel built from the committed tree ships the grammar inside the package."""
from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _tracked_copy(dest: Path) -> Path:
    """A clean checkout: only the files git tracks (or the tree, outside a git checkout)."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
        for name in files:
            if (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:
        shutil.copytree(ROOT, dest, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", ".*venv*"))
    return dest


def test_wheel_contains_grammar(tmp_path):
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "wheel"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                           str(src)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = out.glob("tensorprog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tensorprog/grammar/tensorprog.lark" in names
    grammar = zipfile.ZipFile(wheel).read("tensorprog/grammar/tensorprog.lark").decode()
    assert grammar == (ROOT / "grammar" / "tensorprog.lark").read_text()
    assert "tensorprog/cli.py" in names
    modules = {p.relative_to(src).as_posix() for p in (src / "tensorprog").rglob("*.py")}
    assert modules and modules <= set(names), sorted(modules - set(names))   # every subpackage ships
