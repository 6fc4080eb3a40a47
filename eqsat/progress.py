"""Progress lines on stderr (plain ``print``, each stamped with the seconds since the start), silenced with
--quiet."""

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
