"""Every module of every eqsat package runs its doctests (so the examples in docstrings stay true)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import tomllib

from paths import REPO


def _modules() -> list[str]:
    """Every module of every package pyproject.toml installs (eqsat.rules etc. live in their own folders, so
    walking eqsat's folder alone would miss them)."""
    with open(REPO / "pyproject.toml", "rb") as f:
        packages = tomllib.load(f)["tool"]["setuptools"]["packages"]
    names = set(packages)
    for name in packages:
        package = importlib.import_module(name)
        names |= {info.name for info in pkgutil.walk_packages(package.__path__, name + ".")}
    return sorted(names)


def test_every_module_passes_its_doctests():
    modules = _modules()
    assert {"eqsat.rules", "eqsat.mcts", "eqsat.extract", "eqsat.cost", "eqsat.models", "eqsat.app"} <= set(modules)
    failed = attempted = 0
    for name in modules:
        if name == "eqsat.__main__":
            continue  # runs the command line on import
        result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
        failed += result.failed
        attempted += result.attempted
        assert result.failed == 0, name
    assert attempted >= 6, attempted
