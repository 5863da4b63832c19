"""Sphinx configuration of the documentation site (``pip install ".[docs]"``, then
``sphinx-build -W -b html docs docs/_build/html``).

Pages are Markdown (MyST); the tutorial notebook is executed while the site builds (myst-nb,
cached under the build folder) so that its plots and rich displays appear; the API reference
comes from the docstrings (autodoc + napoleon).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from pygments.lexer import RegexLexer, words
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))                  # the package from this checkout

from tensorprog.builtins import BUILTINS, CONSTANTS          # noqa: E402  (after the path)
from tensorprog.distributions import FAMILIES                # noqa: E402

project = "tensorprog"
author = "the tensorprog authors"
copyright = "the tensorprog authors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "jupyter_execute"]

myst_enable_extensions = ["dollarmath", "amsmath"]
# dollarmath keeps MathJax off the page except in these classes: add the rich displays of
# tensorprog.tools.display (their maths is between \( and \))
myst_mathjax_classes = "tex2jax_process|mathjax_process|math|output_area|tp-display"
myst_heading_anchors = 3                      # [text](language.md#distributions) links

# the tutorial: executed at build time, an error in it fails the build
nb_execution_mode = "cache"
nb_execution_timeout = 300
nb_execution_raise_on_error = True
nb_execution_show_tb = True

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = "tensorprog"
html_static_path: list[str] = []


class TensorProgramLexer(RegexLexer):
    """Pygments lexer of ``.tp`` programs (the ```` ```tp ```` blocks of the language reference):
    keywords and builtins from the package's own tables, comments, numbers, operators."""
    name = "Tensor Program"
    aliases = ["tp"]
    filenames = ["*.tp"]
    tokens = {"root": [
        (r"#.*$", Comment.Single),
        (r"\s+", Whitespace),
        (words(("param", "vector", "matrix", "for", "in", "out", "def", "dim", "if", "else", "sum"),
               suffix=r"\b"), Keyword),
        (words(tuple(BUILTINS) + ("mean", "diff", "eye", "load"), suffix=r"\b"), Name.Builtin),
        (words(tuple(FAMILIES), suffix=r"\b"), Name.Function),
        (words(tuple(CONSTANTS), suffix=r"\b"), Name.Constant),
        (r"(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", Number),
        (r'"[^"\n]*"', String),
        (r"[A-Za-z_]\w*", Name),
        (r"\.\.|\*\*|\.T\b|[-+*/@=~<>!]=?", Operator),
        (r"[\[\](){},:.]", Punctuation),
        (r".", Text),                       # never an error token: a fragment still highlights
    ]}


def readme_links(app, relative_path, parent_docname, content):
    """The README is included into ``index.md``: its links are relative to the repository root, the
    page's to ``docs/``.  Links into ``docs/`` are handled by the include's ``:relative-docs:``;
    any other relative link (``bench/README.md``) becomes a link to that file (``path:../``: a download,
    since the site has no page for it)."""
    if Path(relative_path).name != "README.md" or Path(relative_path).parent.name == "bench":
        return
    content[0] = re.sub(r"\]\((?!docs/|https?:|#|mailto:|\.\./)([^)\s]+)\)", r"](path:../\1)", content[0])


def plain_text_bars(app, what, name, obj, options, lines):
    """The docstrings are plain text with RST literals: ``|x − c|`` is an absolute value, never an
    RST substitution, so every ``|`` outside ````literals```` is escaped."""
    for i, line in enumerate(lines):
        parts = line.split("``")
        lines[i] = "``".join(p.replace("|", "\\|") if k % 2 == 0 else p for k, p in enumerate(parts))


def setup(app):
    app.add_lexer("tp", TensorProgramLexer)
    app.connect("include-read", readme_links)
    app.connect("autodoc-process-docstring", plain_text_bars)
