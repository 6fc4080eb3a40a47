"""``python -m eqsat``: the command line."""

from __future__ import annotations

from eqsat.app.cli import entry

entry()
