"""A local durable spool for turns the gateway could not hand to Temporal.

One SQLite file (``<runtime_dir>/spool/turns.sqlite``, WAL, ``synchronous=FULL`` so every commit is fsync'd) with an
append-only table ordered by ``seq``. The replayer reads the oldest entries first and deletes each one only after
Temporal accepted it, so replay preserves order (within a session in particular) and a crash at any point loses
nothing: at worst an entry is sent twice, and the request id lets the session workflow drop the duplicate.
Entries Temporal refuses for good (a malformed turn) move to a ``dead`` table: kept for inspection, never retried.

The methods are blocking (an fsync each); async callers run them in a thread.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SPOOL_FILE = "turns.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS turns_session ON turns (session_id);
CREATE TABLE IF NOT EXISTS dead (
    seq INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    request_id TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at REAL NOT NULL,
    error TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class SpoolEntry:
    seq: int
    session_id: str
    request_id: str
    body: str  # the TurnRef as JSON
    attempts: int = 0


class Spool:
    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / SPOOL_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    @classmethod
    def in_runtime_dir(cls, runtime_dir: Path) -> "Spool":
        return cls(Path(runtime_dir) / "spool")

    def append(self, session_id: str, request_id: str, body: str) -> int:
        """Durably add one entry (returns after the fsync); returns its sequence number."""
        with self._lock:
            cur = self._db.execute("INSERT INTO turns (session_id, request_id, body, created_at) VALUES (?, ?, ?, ?)",
                                   (session_id, request_id, body, time.time()))
            return int(cur.lastrowid or 0)

    def oldest(self, limit: int = 100) -> list[SpoolEntry]:
        with self._lock:
            rows = self._db.execute("SELECT seq, session_id, request_id, body, attempts FROM turns ORDER BY seq "
                                    "LIMIT ?", (limit,)).fetchall()
        return [SpoolEntry(*row) for row in rows]

    def remove(self, seq: int) -> None:
        with self._lock:
            self._db.execute("DELETE FROM turns WHERE seq = ?", (seq,))

    def failed(self, seq: int, error: str) -> None:
        """Note a failed attempt; the entry stays first in line."""
        with self._lock:
            self._db.execute("UPDATE turns SET attempts = attempts + 1, last_error = ? WHERE seq = ?",
                             (error[:2000], seq))

    def bury(self, seq: int, error: str) -> None:
        """Move an entry Temporal refuses for good to the dead table (kept, never retried)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("INSERT OR REPLACE INTO dead (seq, session_id, request_id, body, created_at, error) "
                                 "SELECT seq, session_id, request_id, body, created_at, ? FROM turns WHERE seq = ?",
                                 (error[:2000], seq))
                self._db.execute("DELETE FROM turns WHERE seq = ?", (seq,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def has_session(self, session_id: str) -> bool:
        with self._lock:
            row = self._db.execute("SELECT 1 FROM turns WHERE session_id = ? LIMIT 1", (session_id,)).fetchone()
        return row is not None

    def sessions(self) -> dict[str, int]:
        """Pending entries per session."""
        with self._lock:
            rows = self._db.execute("SELECT session_id, COUNT(*) FROM turns GROUP BY session_id").fetchall()
        return {sid: int(n) for sid, n in rows}

    def pending(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM turns").fetchone()[0])

    def dead(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM dead").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()
