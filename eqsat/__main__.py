"""``python -m eqsat``: the command line."""

from __future__ import annotations

import sys

from eqsat.app.cli import main

sys.exit(main())
