"""Progress lines on stderr (rich), silenced with --quiet."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable


def progress_printer(quiet: bool = False) -> Callable[[str], None]:
    if quiet:
        return lambda _msg: None
    start = time.perf_counter()

    def say(msg: str) -> None:
        print(f"[{time.perf_counter() - start:7.2f}s] {msg}", file=sys.stderr, flush=True)

    return say
