"""Per-user API keys for the gateway, stored hashed in ``<runtime_dir>/keys.json``.

A key reads ``ocl-<key_id>-<secret>``. The file keeps, per key, its name, id, a random salt and
``HMAC-SHA256(salt, secret)``; the secret itself is printed once by ``openclaw-rl keys add NAME`` and never stored.
The key id is public: it names the user in records and namespaces their sessions. The gateway re-reads the file when
it changes, so a key added or revoked from the CLI takes effect without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

KEY_PREFIX = "ocl"
KEYS_FILE = "keys.json"
_KEY_RE = re.compile(rf"^{KEY_PREFIX}-([0-9a-f]{{12}})-([A-Za-z0-9_\-]{{20,}})$")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@\-]{0,63}$")


@dataclass(frozen=True)
class ApiKey:
    """A verified caller: ``key_id`` names the user everywhere (records, session namespace)."""

    key_id: str
    name: str
    adapter: bool = False  # served by, and training, its own LoRA adapter (openclaw_rl.adapters)


@dataclass
class KeyRecord:
    key_id: str
    name: str
    salt: str
    digest: str
    created_at: float
    revoked_at: float | None = None
    adapter: bool = False  # `keys add NAME --adapter`: this user gets an adapter even without ADAPTER_PER_USER

    @property
    def active(self) -> bool:
        return self.revoked_at is None


def _digest(salt: str, secret: str) -> str:
    return hmac.new(bytes.fromhex(salt), secret.encode(), hashlib.sha256).hexdigest()


class KeyStore:
    """The key file: add / list / revoke for the CLI, ``verify`` for the gateway (cheap; reloads on change)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._records: dict[str, KeyRecord] = {}
        self._stamp: tuple[int, int, int] | None = None

    @classmethod
    def in_runtime_dir(cls, runtime_dir: Path) -> "KeyStore":
        return cls(Path(runtime_dir) / KEYS_FILE)

    # file ------------------------------------------------------------------------------------------------------------
    def _load(self) -> dict[str, KeyRecord]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._records, self._stamp = {}, None
            return self._records
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)  # a save is a rename: new inode
        if stamp != self._stamp:
            rows = json.loads(self.path.read_text() or "{}").get("keys", [])
            self._records = {r["key_id"]: KeyRecord(**r) for r in rows}
            self._stamp = stamp
        return self._records

    def _save(self, records: dict[str, KeyRecord]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"keys": [asdict(r) for r in records.values()]}, f, indent=2)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._stamp = None

    # CLI side ---------------------------------------------------------------------------------------------------------
    def add(self, name: str, adapter: bool = False) -> str:
        """Create a key for ``name`` (with ``adapter``: its own LoRA adapter); returns the full key (the only time it
        exists in clear)."""
        if not _NAME_RE.match(name):
            raise ValueError(f"bad key name {name!r}: letters, digits and _.@- only, at most 64 characters")
        with self._lock:
            records = dict(self._load())
            if any(r.name == name and r.active for r in records.values()):
                raise ValueError(f"an active key named {name!r} exists; revoke it first")
            key_id = secrets.token_hex(6)
            while key_id in records:
                key_id = secrets.token_hex(6)
            secret, salt = secrets.token_urlsafe(32), secrets.token_hex(16)
            records[key_id] = KeyRecord(key_id, name, salt, _digest(salt, secret), time.time(), adapter=adapter)
            self._save(records)
        return f"{KEY_PREFIX}-{key_id}-{secret}"

    def list(self) -> list[KeyRecord]:
        with self._lock:
            return sorted(self._load().values(), key=lambda r: r.created_at)

    def revoke(self, name_or_id: str) -> int:
        """Revoke the active keys with this name (or this key id); returns how many."""
        with self._lock:
            records = dict(self._load())
            hits = [r for r in records.values() if r.active and name_or_id in (r.name, r.key_id)]
            for r in hits:
                records[r.key_id] = KeyRecord(**{**asdict(r), "revoked_at": time.time()})
            if hits:
                self._save(records)
        return len(hits)

    # gateway side -----------------------------------------------------------------------------------------------------
    def verify(self, key: str) -> ApiKey | None:
        match = _KEY_RE.match(key)
        if not match:
            return None
        key_id, secret = match.groups()
        with self._lock:
            record = self._load().get(key_id)
        if record is None or not record.active:
            return None
        if not hmac.compare_digest(record.digest, _digest(record.salt, secret)):
            return None
        return ApiKey(key_id=record.key_id, name=record.name, adapter=record.adapter)
