"""Sphinx configuration of the dataflow-watermarks documentation (MyST Markdown pages).

Build with ``make docs`` (warnings are errors). Notebooks are rendered by myst-nb from
their stored outputs, never executed by the build; the test suite executes them.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # autodoc imports the packages from this checkout

project = "dataflow-watermarks"
author = "the dataflow-watermarks authors"
copyright = "the dataflow-watermarks authors"

extensions = [
    "myst_nb",  # MyST Markdown pages and notebooks (it includes myst_parser)
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
]

source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "**.ipynb_checkpoints", "Thumbs.db", ".DS_Store"]
root_doc = "index"

myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3

# notebooks show their stored outputs; the tests execute them (nbclient), the build never
nb_execution_mode = "off"

autodoc_default_options = {"members": True, "undoc-members": False}
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True

html_theme = "alabaster"
html_title = "dataflow-watermarks"
html_static_path: list[str] = []
html_theme_options = {"page_width": "1180px", "sidebar_width": "230px"}
