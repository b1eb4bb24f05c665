"""The compiled build is what a compiled run tests, and nothing else is.

``python3 devtools/dev.py test`` runs a focused set of tests a second time on the mypyc
build (``build/mypyc`` first on PYTHONPATH, GREENPOOL_COMPILED=1). There, every module
greenpool._compiled names must be the compiled one: a build that fell back to pure Python
fails here instead of passing the same tests twice. In the ordinary run, none is.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

import greenpool._compiled
from greenpool._compiled import MODULES, compiled, mypyc_attr


def test_the_compiled_run_imports_every_compiled_module_and_the_pure_run_none() -> None:
    expected = list(MODULES) if os.environ.get("GREENPOOL_COMPILED") == "1" else []
    assert compiled() == expected


def test_mypyc_attr_leaves_a_class_as_it_is() -> None:
    class Plain:
        pass

    assert mypyc_attr(native_class=False)(Plain) is Plain


def test_without_mypy_installed_mypyc_attr_is_a_decorator_that_does_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mypy_extensions", None)  # import fails
    spec = importlib.util.spec_from_file_location("_compiled_alone", greenpool._compiled.__file__)
    assert spec is not None and spec.loader is not None
    alone = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(alone)

    class Plain:
        pass

    assert alone.mypyc_attr.__module__ == "_compiled_alone"
    assert alone.mypyc_attr(native_class=False)(Plain) is Plain
