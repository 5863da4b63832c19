"""docs/tutorial.ipynb runs top to bottom (through nbclient, as CI does) and shows its plots and
rich displays; its outputs are kept out of git."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"


def test_the_tutorial_is_stored_without_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert len(code) >= 8
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code)


@pytest.mark.slow          # the whole tutorial, executed: minutes
def test_the_tutorial_runs_and_shows_plots_and_rich_displays():
    nbformat = pytest.importorskip("nbformat", reason="the test extra installs nbformat (with nbclient)")
    nbclient = pytest.importorskip("nbclient", reason="the test extra installs nbclient")
    pytest.importorskip("ipykernel", reason="the test extra installs ipykernel (the notebook's kernel)")
    pytest.importorskip("matplotlib", reason="the tutorial draws with matplotlib (test extra)")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    seconds = time.perf_counter() - start
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    data = [o.get("data", {}) for o in outputs]
    pngs = [d for d in data if "image/png" in d]
    html = "".join(d.get("text/html", "") for d in data)
    assert len(pngs) >= 2                                        # universality and the kernel heatmaps
    for kind in ("tp-execute", "tp-compiled", "tp-limit", "tp-converge", "tp-kernel", "tp-particles"):
        assert f"tp-display {kind}" in html, kind
    assert r"_{\dot Z}" in html                                  # the backward pass's Ż term
    assert "data:image/png;base64," in html                      # the convergence plot, inline
    assert seconds < 300                                         # a newcomer's 5 minutes
