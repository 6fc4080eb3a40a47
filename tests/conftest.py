"""The tests' root. Tests live in one folder per package they test (``tests/core`` for the root modules of
``eqsat``, ``tests/app``, ``tests/onnx``, ``tests/rules``, ...; docs/architecture.md lists them); the helper
modules they share (``onnx_builders.py``, ``paths.py``, ...) and the zoo stay here, at the root, put on
``sys.path`` below for every test folder (and every xdist worker, which loads this file too).

The folders have no ``__init__.py``: pytest imports each test file by its basename (the default ``prepend`` import
mode), so two test files may not share a basename, and a folder named like an installed package (``onnx``,
``egglog``) can never shadow it."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def _isolated_cost_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EQSAT_CACHE_DIR", str(tmp_path / "cache"))
