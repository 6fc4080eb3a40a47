"""A persistent, process-safe cache of measured operator costs (SQLite, WAL mode).

Keyed by device name, backend version, and the operator key (op, attributes, shapes, dtype). A second table
keeps the recent readings of the contention probes (:class:`eqsat.cost.measure.Contention`). The
default location is ``$EQSAT_CACHE_DIR/costs.sqlite`` or ``~/.cache/eqsat/costs.sqlite``.

A cache that is not a readable database (random bytes, a truncated file, a folder in its place) is moved
aside to ``<path>.corrupt-<timestamp>`` with a one-line warning on stderr, and an empty one is built.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable

from eqsat.errors import InputError

from .base import OpKey

_SIDE_FILES = ("-wal", "-shm", "-journal")
SETUP_LOCK_SECONDS = 5.0
"""how long opening the cache waits for another process's lock before the run goes on without it"""
LOCK_SECONDS = 60.0
"""how long a write waits for another process's lock (concurrent runs share the cache)"""


def default_path() -> str:
    base = os.environ.get("EQSAT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "eqsat")
    return os.path.join(base, "costs.sqlite")


def _is_corruption(exc: sqlite3.Error) -> bool:
    """A damaged or foreign file (including the I/O errors a truncated one gives), as opposed to a lock or a
    permission problem, which moving the file aside would not cure."""
    text = str(exc).lower()
    return not any(word in text for word in ("locked", "busy", "readonly", "read-only", "unable to open"))


class CostCache:
    """The cache at ``path``, or at :func:`default_path` if None. One that cannot be used (its folder cannot be made
    or written, a file stands where the folder should be, another process keeps it locked): with an explicit
    ``path``, InputError naming the cause; at the default path, a one-line warning and a cache in memory for this
    run only (the run goes on; nothing is kept for later runs)."""

    def __init__(self, path: str | None = None):
        self.path = path or default_path()
        self.moved_aside: str | None = None
        self.in_memory: str | None = None  # why the cache lives in memory only, if it does
        self._local = threading.local()
        self._generation = 0
        self._keeper: sqlite3.Connection | None = None
        self._ready = False
        try:
            self._setup()
            self.close()  # reconnect with the run's lock timeout
            self._ready = True
        except (OSError, sqlite3.Error) as exc:
            cause = f"{exc.strerror}: {exc.filename}" if isinstance(exc, OSError) and exc.strerror else str(exc)
            if path is not None:
                raise InputError(f"cost cache {self.path}: {cause}; check its permissions, or give a writable "
                                 "--cache FILE") from None
            self._to_memory(f"{cause}; point EQSAT_CACHE_DIR at a writable folder to keep measurements")

    def _setup(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        if os.path.isdir(self.path):
            self._move_aside("it is a folder")
        try:
            self._open_checked()
        except sqlite3.Error as exc:
            if not _is_corruption(exc):
                raise
            self._move_aside(str(exc))
            self._open_checked()

    def _to_memory(self, reason: str) -> None:
        """Go on with an empty cache in memory (shared by this process's threads), saying so once."""
        self.close()
        if self.in_memory is None:
            print(f"eqsat: warning: cost cache {self.path} cannot be used ({reason}); running without it "
                  "(measurements are kept in memory for this run only)", file=sys.stderr)
        self.in_memory = reason
        self._generation += 1
        self.path = f"file:eqsat-costs-{os.getpid()}-{id(self)}?mode=memory&cache=shared"
        self._keeper = self._keeper or sqlite3.connect(self.path, uri=True, check_same_thread=False)
        self._open_checked()

    def _open_checked(self) -> None:
        conn = self._conn()
        row = conn.execute("PRAGMA quick_check").fetchone()
        if row is None or row[0] != "ok":
            raise sqlite3.DatabaseError(f"integrity check failed: {row[0] if row else 'no answer'}")
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS costs (device TEXT, backend TEXT, key TEXT, us REAL, "
                         "PRIMARY KEY (device, backend, key))")
            conn.execute("CREATE TABLE IF NOT EXISTS readings (seq INTEGER PRIMARY KEY AUTOINCREMENT, device TEXT, "
                         "backend TEXT, key TEXT, us REAL)")
        columns = [r[1] for r in conn.execute("PRAGMA table_info(costs)").fetchall()]
        if columns != ["device", "backend", "key", "us"]:
            raise sqlite3.DatabaseError(f"its costs table has columns {columns}, not eqsat's")
        conn.execute("SELECT COUNT(*) FROM costs").fetchone()

    def _move_aside(self, reason: str) -> None:
        self.close()
        stamp = time.strftime("%Y%m%dT%H%M%S")
        target = f"{self.path}.corrupt-{stamp}"
        k = 1
        while os.path.exists(target):
            target, k = f"{self.path}.corrupt-{stamp}-{k}", k + 1
        try:
            os.replace(self.path, target)
        except FileNotFoundError:  # another process moved it first
            target = "(moved by another process)"
        for side in _SIDE_FILES:  # a stale write-ahead log must not be replayed into the new database
            if os.path.exists(self.path + side):
                os.replace(self.path + side, f"{self.path}.corrupt-{stamp}{side}")
        self.moved_aside = target
        print(f"eqsat: warning: cost cache {self.path} is unreadable ({reason}); moved it to {target} "
              "and started an empty one", file=sys.stderr)

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "generation", 0) != self._generation:
            conn.close()  # the cache moved to memory since this thread connected
            conn = None
        if conn is None:
            memory = self.in_memory is not None
            conn = sqlite3.connect(self.path, timeout=LOCK_SECONDS if memory or self._ready else SETUP_LOCK_SECONDS,
                                   uri=memory)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")  # WAL stays consistent; no fsync per commit
            except sqlite3.Error:
                conn.close()
                raise
            self._local.conn, self._local.generation = conn, self._generation
        return conn

    def _transaction(self, body: Callable[[sqlite3.Connection], object]) -> None:
        """Run ``body``'s writes in one transaction; a cache that turns unusable meanwhile (locked past
        LOCK_SECONDS, the disk full or made read-only) moves to memory with a warning, and the writes go there."""
        try:
            conn = self._conn()
            with conn:
                body(conn)
        except sqlite3.OperationalError as exc:
            if self.in_memory is not None:
                raise
            self._to_memory(str(exc))
            conn = self._conn()
            with conn:
                body(conn)

    def get(self, device: str, backend: str, key: OpKey) -> float | None:
        row = self._conn().execute("SELECT us FROM costs WHERE device=? AND backend=? AND key=?",
                                   (device, backend, key.text())).fetchone()
        return None if row is None else float(row[0])

    def put(self, device: str, backend: str, key: OpKey, us: float) -> None:
        self._transaction(lambda conn: conn.execute("INSERT OR REPLACE INTO costs VALUES (?, ?, ?, ?)",
                                                    (device, backend, key.text(), float(us))))

    def add_reading(self, device: str, backend: str, key: OpKey, us: float, keep: int) -> None:
        """Record a reading of ``key`` (a probe), keeping only its ``keep`` most recent."""
        text = key.text()

        def body(conn: sqlite3.Connection) -> None:
            conn.execute("INSERT INTO readings (device, backend, key, us) VALUES (?, ?, ?, ?)",
                         (device, backend, text, float(us)))
            conn.execute("DELETE FROM readings WHERE device=? AND backend=? AND key=? AND seq NOT IN (SELECT seq FROM "
                         "readings WHERE device=? AND backend=? AND key=? ORDER BY seq DESC LIMIT ?)",
                         (device, backend, text, device, backend, text, int(keep)))

        self._transaction(body)

    def readings(self, device: str, backend: str, key: OpKey, n: int) -> list[float]:
        """The ``n`` most recent readings of ``key``, newest first."""
        rows = self._conn().execute("SELECT us FROM readings WHERE device=? AND backend=? AND key=? ORDER BY seq DESC "
                                    "LIMIT ?", (device, backend, key.text(), int(n))).fetchall()
        return [float(r[0]) for r in rows]

    def summary(self) -> list[tuple[str, str, str, int, float]]:
        """(device, backend, op, count, total us) per group."""
        rows = self._conn().execute("SELECT device, backend, key, us FROM costs").fetchall()
        groups: dict[tuple[str, str, str], list[float]] = {}
        for device, backend, key, us in rows:
            groups.setdefault((device, backend, key.split("|", 1)[0]), []).append(us)
        return [(d, b, op, len(v), sum(v)) for (d, b, op), v in sorted(groups.items())]

    def __len__(self) -> int:
        return int(self._conn().execute("SELECT COUNT(*) FROM costs").fetchone()[0])
