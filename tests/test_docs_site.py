"""The documentation site (Sphinx + MyST + myst-nb, docs/conf.py) builds with warnings as errors,
and holds the README's tour, the language reference, architecture, gallery, the tutorial
(executed, with its outputs) and the API reference."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow          # a Sphinx build that executes the tutorial: minutes
def test_the_site_builds_without_warnings(tmp_path):
    for module in ("sphinx", "myst_nb", "furo"):
        pytest.importorskip(module, reason='the docs extra is not installed: pip install ".[docs]"')
    pytest.importorskip("ipykernel", reason="the tutorial is executed while the site builds")
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    pages = {p.stem for p in out.glob("*.html")}
    assert {"index", "tutorial", "language", "architecture", "gallery", "api"} <= pages
    assert "Quick start" in (out / "index.html").read_text()                 # the README's tour
    tutorial = (out / "tutorial.html").read_text()
    assert "tp-display tp-compiled" in tutorial and "<img" in tutorial     # executed: displays, plots
    api = (out / "api.html").read_text()
    assert "tensorprog.program.load" in api and "ConvergeResult" in api
    assert (out / "_images").is_dir()                                       # the gallery's figures
