"""Where things are, for the tests in every folder: a test file lies one folder below the tests' root
(``tests/<package>/test_*.py``), so no test finds the repository by counting ``os.path.dirname`` calls."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
"""the tests' root (``tests/``): the shared helper modules and the zoo; on ``sys.path`` (tests/conftest.py)"""
REPO = TESTS.parent
"""the repository's root (pyproject.toml, the packages' folders)"""
ZOO = TESTS / "zoo"
"""the real-model zoo (``import zoo``)"""
SCRIPTS = REPO / "scripts"
"""the benchmark and reproduction scripts (not a package: put on ``sys.path`` or loaded by tests/script_loader.py)"""
