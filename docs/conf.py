"""Sphinx configuration for greenpool's documentation.

Build it with ``sphinx-build -W -b html docs docs/_build/html`` (and ``-b doctest`` to run the
examples). The spec conformance page is generated from a run of the spec test modules: see
``_ext/conformance.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from greenpool import __version__  # noqa: E402

project = "greenpool"
author = "the greenpool authors"
copyright = "the greenpool authors"
release = __version__
version = __version__.split(".dev")[0]

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.intersphinx",
    "conformance",
]

exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
# The examples in .rst pages run under ``-b doctest``; docstrings' own examples run in the tests.
doctest_test_doctest_blocks = ""
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
