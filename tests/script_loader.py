"""The benchmark scripts (``scripts/*.py``, not a package) loaded as modules, for the tests that call them."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from paths import SCRIPTS


def load_script(name: str) -> ModuleType:
    """``scripts/NAME.py`` as a module, loaded afresh (a test's changes to it stay its own)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # where a dataclass of the script looks its module up
    spec.loader.exec_module(module)
    return module
