"""A persistent, process-safe cache of measured operator costs (SQLite, WAL mode).

Keyed by device name, backend version, and the operator key (op, attributes, shapes, dtype). The
default location is ``$EQSAT_CACHE_DIR/costs.sqlite`` or ``~/.cache/eqsat/costs.sqlite``.
"""

from __future__ import annotations

import os
import sqlite3
import threading

from .base import OpKey


def default_path() -> str:
    base = os.environ.get("EQSAT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "eqsat")
    return os.path.join(base, "costs.sqlite")


class CostCache:
    def __init__(self, path: str | None = None):
        self.path = path or default_path()
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        self._local = threading.local()
        with self._conn() as c:
            c.execute("CREATE TABLE IF NOT EXISTS costs (device TEXT, backend TEXT, key TEXT, us REAL, "
                      "PRIMARY KEY (device, backend, key))")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=60.0)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
        return conn

    def get(self, device: str, backend: str, key: OpKey) -> float | None:
        row = self._conn().execute("SELECT us FROM costs WHERE device=? AND backend=? AND key=?",
                                   (device, backend, key.text())).fetchone()
        return None if row is None else float(row[0])

    def put(self, device: str, backend: str, key: OpKey, us: float) -> None:
        conn = self._conn()
        with conn:
            conn.execute("INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?)", (device, backend, key.text(), float(us)))

    def summary(self) -> list[tuple[str, str, str, int, float]]:
        """(device, backend, op, count, total us) per group."""
        rows = self._conn().execute("SELECT device, backend, key, us FROM costs").fetchall()
        groups: dict[tuple[str, str, str], list[float]] = {}
        for device, backend, key, us in rows:
            groups.setdefault((device, backend, key.split("|", 1)[0]), []).append(us)
        return [(d, b, op, len(v), sum(v)) for (d, b, op), v in sorted(groups.items())]

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM costs").fetchone()[0])
