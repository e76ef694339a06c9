"""Checkpoints and adapters named by an object-store URL (``s3://bucket/prefix`` or ``file:///abs/folder``): the engine
copies the prefix into its own data dir, then reads the copy like any local folder.

Why a copy even of a ``file://`` store: the engine's folder does not change under it (a trainer may prune or rewrite
the store's prefix), and an adapter evicted from memory is read again from it later (engine/lora_registry.py).

- Only a complete checkpoint is fetched: one whose top level has ``trainer_state.json`` (the trainer writes it last),
  or ``adapter_config.json`` + ``adapter_model.safetensors``, or ``config.json`` + ``*.safetensors`` (with every shard
  a ``model.safetensors.index.json`` names). Anything else is refused with a ValueError naming what is missing.
- Only the top-level files the engine reads are copied (``*.json``, ``*.safetensors`` and tokenizer files), never the
  optimizer state a training checkpoint carries beside them.
- A fetch with a version is kept under ``<data_dir>/fetched/<kind>/<hash of URL and version>``, so the same version
  is fetched once; a fetch without one is fetched again each time (nothing says the prefix did not change). A copy is
  written to a temporary folder and renamed into place, so a folder there is always whole.
- ``prune`` removes a kind's copies that nothing uses any more (the registry keeps its adapters' copies; a full
  checkpoint's copy is not needed once its weights are in memory, past the one kept for a retried push).

Everything here blocks (network, disk): callers run it on a worker thread.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path
from urllib.parse import urlparse

from openclaw_rl.store import ObjectStore

SCHEMES = ("s3", "file")
_READ_SUFFIXES = (".json", ".safetensors", ".jinja", ".txt", ".model")
_TMP = ".tmp-"


def is_url(source: str) -> bool:
    """Whether ``source`` names an object-store prefix (else it is a local folder path)."""
    return urlparse(source).scheme in SCHEMES


def check_complete(names: set[str], where: str) -> None:
    """Refuse (ValueError) a checkpoint whose top-level file ``names`` show it is not whole yet."""
    if not names:
        raise ValueError(f"nothing at {where}: no checkpoint or adapter there")
    if "trainer_state.json" in names:
        return
    if {"adapter_config.json", "adapter_model.safetensors"} <= names:
        return
    if "config.json" in names and any(n.endswith(".safetensors") for n in names):
        return
    raise ValueError(f"incomplete checkpoint at {where}: it has neither trainer_state.json (written last by the "
                     f"trainer) nor adapter_config.json + adapter_model.safetensors nor config.json + *.safetensors "
                     f"(found: {', '.join(sorted(names)[:8])})")


def _check_shards(folder: Path, where: str) -> None:
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"incomplete checkpoint at {where}: unreadable model.safetensors.index.json ({exc})") from None
    missing = sorted(s for s in shards if not (folder / s).is_file())
    if missing:
        raise ValueError(f"incomplete checkpoint at {where}: shards {', '.join(missing[:4])} are missing")


class Fetcher:
    """Copies store prefixes into ``root`` (the engine's data dir) with the S3 connection settings ``s3``."""

    def __init__(self, root: Path, **s3: str) -> None:
        self.root = Path(root)
        self.s3 = s3
        self.fetches = 0  # downloads made (a cached version counts none)

    def local(self, source: str, version: str | None, kind: str) -> Path:
        """The folder to read for ``source``: itself when it is a local path, else the engine's copy of the store
        prefix (fetched now unless this very version is already here)."""
        if not is_url(source):
            if "://" in source:
                raise ValueError(f"unsupported URL {source!r}: use a local folder, s3://bucket/prefix or "
                                 f"file:///folder")
            return Path(source)
        url = source.rstrip("/")
        folder = self.root / "fetched" / kind / self._name(url, version)
        if version is not None and folder.is_dir():
            return folder
        store = self._store(url)
        try:
            names = {k for k in store.list("") if "/" not in k}
        except Exception as exc:  # noqa: BLE001 - any store failure is the caller's answer, with its reason
            raise ValueError(f"could not list {url}: {exc}") from None
        check_complete(names, url)
        tmp = folder.with_name(f"{_TMP}{uuid.uuid4().hex}")
        tmp.mkdir(parents=True)
        try:
            for name in sorted(names):
                if name.endswith(_READ_SUFFIXES) or name.startswith("tokenizer"):
                    try:
                        store.get_file(name, tmp / name)
                    except Exception as exc:  # noqa: BLE001
                        raise ValueError(f"could not fetch {url}/{name}: {exc}") from None
            _check_shards(tmp, url)
            if folder.is_dir():  # the same version fetched meanwhile: keep that one
                return folder
            tmp.rename(folder)
            self.fetches += 1
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return folder

    def prune(self, kind: str, keep: set[Path]) -> int:
        """Remove ``kind``'s copies other than ``keep`` (a copy still being written is left alone); returns how
        many."""
        base = self.root / "fetched" / kind
        if not base.is_dir():
            return 0
        kept = {Path(p).resolve() for p in keep}
        removed = 0
        for folder in base.iterdir():
            if folder.resolve() not in kept and not folder.name.startswith(_TMP):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        return removed

    def _store(self, url: str) -> ObjectStore:
        parsed = urlparse(url)
        if parsed.scheme == "file":
            folder = Path(parsed.netloc + parsed.path) if parsed.netloc else Path(parsed.path)
            if not folder.is_dir():  # checked first: a LocalStore would create the folder
                raise ValueError(f"nothing at {url}: no such folder")
            return ObjectStore.from_url(url)
        return ObjectStore.from_url(url, **self.s3)

    @staticmethod
    def _name(url: str, version: str | None) -> str:
        """A folder name for (url, version): readable tail, hashed whole; a fresh one when there is no version."""
        tag = version if version is not None else f"unversioned-{uuid.uuid4().hex}"
        digest = hashlib.sha256(f"{url}\0{tag}".encode()).hexdigest()[:20]
        tail = "".join(c if c.isalnum() or c in "-_=." else "_" for c in url.rsplit("/", 1)[-1])[:40]
        return f"{tail}-{digest}"
