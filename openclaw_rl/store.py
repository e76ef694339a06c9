"""The object store: one small API over a local folder (``file://<folder>``) and S3 (``s3://bucket/prefix``).

Keys are relative POSIX paths (``samples/run=r/version=3/sample-ab12.parquet``); the store maps them under its
root. S3 is reached through boto3 (path-style addressing when an endpoint is given, so MinIO and moto work) and, for
Parquet datasets, through ``pyarrow.fs.S3FileSystem``. A local write goes to a temporary file in the target folder and
is renamed into place, so a reader never sees half an object; an S3 PUT is atomic already.

Payloads by reference: ``put_blob`` stores bytes or a JSON value under a content-addressed key
(``blobs/<sha256>.json`` or ``.bin``) and returns that key as the reference, so large arrays stay out of Temporal
histories; ``pack``/``unpack`` inline a value under ``BLOB_INLINE_LIMIT`` bytes and hand out a reference above it.
The inner HTTP client does not retry: callers that need retries run inside Temporal activities, which own them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO
from urllib.parse import urlparse

if TYPE_CHECKING:
    import pyarrow.fs

    from openclaw_rl.settings import Settings

BLOB_PREFIX = "blobs/"
BLOB_INLINE_LIMIT = 64 * 1024
_TMP_MARK = ".tmp-"
MULTIPART_BYTES = 64 * 1024 * 1024  # S3 uploads and downloads go in parts of this size past it
COPY_CHUNK_BYTES = 8 * 1024 * 1024


class ObjectNotFound(FileNotFoundError):
    """No object under this key."""


def check_key(key: str) -> str:
    """Refuse keys that could escape the store root or name a folder."""
    parts = key.split("/")
    if not key or key.startswith("/") or key.endswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad object key: {key!r}")
    return key


def _json_bytes(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode()


class ObjectStore(ABC):
    """Common behaviour; the two back-ends implement the byte-level primitives."""

    @staticmethod
    def from_url(url: str, *, endpoint_url: str = "", access_key_id: str = "", secret_access_key: str = "",
                 region: str = "us-east-1") -> "ObjectStore":
        parsed = urlparse(url)
        if parsed.scheme == "file":
            return LocalStore(Path(parsed.netloc + parsed.path) if parsed.netloc else Path(parsed.path))
        if parsed.scheme == "s3":
            return S3Store(parsed.netloc, parsed.path.strip("/"), endpoint_url=endpoint_url,
                           access_key_id=access_key_id, secret_access_key=secret_access_key, region=region)
        if not parsed.scheme:
            return LocalStore(Path(url))
        raise ValueError(f"unsupported store url {url!r}: use file://<folder> or s3://bucket/prefix")

    # primitives ------------------------------------------------------------------------------------------------------
    @abstractmethod
    def put_bytes(self, key: str, data: bytes) -> None: ...

    @abstractmethod
    def get_bytes(self, key: str) -> bytes: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def list(self, prefix: str = "", limit: int | None = None) -> list[str]:
        """Keys that start with ``prefix`` (a plain string prefix, not only folders), sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the object; a missing key is not an error."""

    @abstractmethod
    def copy(self, src: str, dst: str) -> None: ...

    @abstractmethod
    def url_for(self, key: str = "") -> str:
        """A URL for the key (``file:///abs/path`` or ``s3://bucket/key``) that DuckDB and pyarrow accept."""

    @abstractmethod
    def pyarrow_fs(self) -> tuple["pyarrow.fs.FileSystem", str]:
        """A pyarrow filesystem and the base path under which keys live (``base + "/" + key``)."""

    # files: streamed, never whole in memory (checkpoint shards run to gigabytes) ---------------------------------
    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Store the file at ``path`` under ``key`` (on S3 a multipart upload past ``MULTIPART_BYTES``)."""

    @abstractmethod
    def get_file(self, key: str, path: Path) -> None:
        """Write the object to ``path`` (whole or not at all: through a temporary file and a rename)."""

    # built on the primitives -----------------------------------------------------------------------------------------
    def move(self, src: str, dst: str) -> None:
        self.copy(src, dst)
        self.delete(src)

    def move_prefix(self, src_prefix: str, dst_prefix: str) -> int:
        """Move every key under ``src_prefix`` to the same relative key under ``dst_prefix``; returns how many.

        Re-running after a crash finishes the job: keys already moved are no longer under the source.
        """
        keys = self.list(src_prefix)
        for key in keys:
            self.move(key, dst_prefix + key[len(src_prefix):])
        return len(keys)

    def put_json(self, key: str, obj: Any) -> None:
        self.put_bytes(key, _json_bytes(obj))

    def get_json(self, key: str) -> Any:
        return json.loads(self.get_bytes(key))

    def put_blob(self, obj: bytes | Any) -> str:
        """Store bytes (``.bin``) or a JSON value (``.json``) under its sha256; returns the key, which is the ref."""
        raw = isinstance(obj, (bytes, bytearray, memoryview))
        data, ext = (bytes(obj), "bin") if raw else (_json_bytes(obj), "json")
        ref = f"{BLOB_PREFIX}{hashlib.sha256(data).hexdigest()}.{ext}"
        if not self.exists(ref):  # same content, same key: a second put would only cost bandwidth
            self.put_bytes(ref, data)
        return ref

    def get_blob(self, ref: str) -> bytes | Any:
        if not ref.startswith(BLOB_PREFIX) or not ref.endswith((".bin", ".json")):
            raise ValueError(f"not a blob reference: {ref!r}")
        data = self.get_bytes(ref)
        digest = ref[len(BLOB_PREFIX):].rsplit(".", 1)[0]
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValueError(f"blob {ref} is corrupt: content does not match its hash")
        return data if ref.endswith(".bin") else json.loads(data)

    def pack(self, obj: Any, limit: int = BLOB_INLINE_LIMIT) -> dict[str, Any]:
        """``{"inline": obj}`` when its JSON is small, else ``{"ref": <blob key>}``; reverse with ``unpack``."""
        if len(_json_bytes(obj)) <= limit:
            return {"inline": obj}
        return {"ref": self.put_blob(obj)}

    def unpack(self, packed: dict[str, Any]) -> Any:
        return self.get_blob(packed["ref"]) if "ref" in packed else packed["inline"]


def _atomic_download(path: Path, fetch: Callable[[Path], None]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{_TMP_MARK}{uuid.uuid4().hex}-{path.name}")
    try:
        fetch(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _create(path: Path) -> Any:
    """Open a new file, making its folder; a concurrent move may prune that folder between mkdir and open.

    Once the file exists its folder is not empty, so it cannot be pruned before the rename.
    """
    for attempt in range(3):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return open(path, "wb")
        except FileNotFoundError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class LocalStore(ObjectStore):
    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.root)!r})"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _write(self, key: str, fill: Callable[[BinaryIO], object]) -> None:
        """Write ``key`` whole or not at all: a temporary file beside it, fsync'd, then renamed over it."""
        path = self._path(key)
        tmp = path.with_name(f"{_TMP_MARK}{uuid.uuid4().hex}-{path.name}")
        try:
            with _create(tmp) as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._write(key, lambda f: f.write(data))

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as src:
            self._write(key, lambda f: shutil.copyfileobj(src, f, COPY_CHUNK_BYTES))

    def get_file(self, key: str, path: Path) -> None:
        src = self._path(key)
        if not src.is_file():
            raise ObjectNotFound(key)
        _atomic_download(path, lambda tmp: shutil.copyfile(src, tmp))

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def list(self, prefix: str = "", limit: int | None = None) -> list[str]:
        folder = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        if not folder.is_dir():
            return []
        keys: list[str] = []
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames.sort()
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in sorted(filenames):
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix) and not name.startswith(_TMP_MARK):
                    keys.append(key)
        keys.sort()
        return keys[:limit] if limit is not None else keys

    def delete(self, key: str) -> None:
        path = self._path(key)
        path.unlink(missing_ok=True)
        self._prune(path.parent)

    def copy(self, src: str, dst: str) -> None:
        self.put_bytes(dst, self.get_bytes(src))

    def move(self, src: str, dst: str) -> None:
        src_path, dst_path = self._path(src), self._path(dst)
        if not src_path.is_file():
            raise ObjectNotFound(src)
        dst_path.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src_path, dst_path)  # a rename: atomic, and no copy of the bytes
        self._prune(src_path.parent)

    def _prune(self, folder: Path) -> None:
        """Drop folders left empty, up to the root, so sealed partitions vanish from listings and globs."""
        while folder != self.root and folder.is_relative_to(self.root):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent

    def url_for(self, key: str = "") -> str:
        # not percent-encoded: DuckDB and pyarrow take the path as written (`version=3` stays readable)
        return f"file://{(self.root / check_key(key)) if key else self.root}"

    def local_path(self, key: str = "") -> Path:
        return self._path(key) if key else self.root

    def pyarrow_fs(self) -> tuple["pyarrow.fs.FileSystem", str]:
        import pyarrow.fs as pafs

        return pafs.LocalFileSystem(), self.root.as_posix()


class S3Store(ObjectStore):
    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str = "", access_key_id: str = "",
                 secret_access_key: str = "", region: str = "us-east-1") -> None:
        if not bucket:
            raise ValueError("s3 store url needs a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = f"{prefix.strip('/')}/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.region = region or "us-east-1"
        self._client = self._make_client()

    def __repr__(self) -> str:
        return f"S3Store({self.url_for()!r}, endpoint={self.endpoint_url or 'aws'!r})"

    def _make_client(self) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(connect_timeout=5, read_timeout=60, retries={"total_max_attempts": 1},
                        s3={"addressing_style": "path"} if self.endpoint_url else {})
        return boto3.client("s3", endpoint_url=self.endpoint_url or None, region_name=self.region,
                            aws_access_key_id=self.access_key_id or None,
                            aws_secret_access_key=self.secret_access_key or None, config=config)

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put_bytes(self, key: str, data: bytes) -> None:
        self._client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def _transfer(self) -> Any:
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(multipart_threshold=MULTIPART_BYTES, multipart_chunksize=MULTIPART_BYTES,
                              max_concurrency=4)

    def put_file(self, key: str, path: Path) -> None:
        self._client.upload_file(str(path), self.bucket, self._key(key), Config=self._transfer())

    def get_file(self, key: str, path: Path) -> None:
        from botocore.exceptions import ClientError

        def download(tmp: Path) -> None:
            try:
                self._client.download_file(self.bucket, self._key(key), str(tmp), Config=self._transfer())
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                    raise ObjectNotFound(key) from None
                raise

        _atomic_download(path, download)

    def get_bytes(self, key: str) -> bytes:
        try:
            return self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except self._client.exceptions.NoSuchKey:
            raise ObjectNotFound(key) from None

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self._client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def list(self, prefix: str = "", limit: int | None = None) -> list[str]:
        keys: list[str] = []
        pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
        for page in pages:
            keys.extend(obj["Key"][len(self.prefix):] for obj in page.get("Contents", []))
            if limit is not None and len(keys) >= limit:
                break
        keys.sort()
        return keys[:limit] if limit is not None else keys

    def delete(self, key: str) -> None:
        self._client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def copy(self, src: str, dst: str) -> None:
        from botocore.exceptions import ClientError

        try:
            self._client.copy_object(Bucket=self.bucket, Key=self._key(dst),
                                     CopySource={"Bucket": self.bucket, "Key": self._key(src)})
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                raise ObjectNotFound(src) from None
            raise

    def url_for(self, key: str = "") -> str:
        return f"s3://{self.bucket}/{self._key(key) if key else self.prefix}".rstrip("/")

    def pyarrow_fs(self) -> tuple["pyarrow.fs.FileSystem", str]:
        import pyarrow.fs as pafs

        kwargs: dict[str, Any] = {"region": self.region}
        if self.access_key_id:
            kwargs.update(access_key=self.access_key_id, secret_key=self.secret_access_key)
        if self.endpoint_url:
            endpoint = urlparse(self.endpoint_url)
            kwargs.update(endpoint_override=endpoint.netloc or endpoint.path, scheme=endpoint.scheme or "https")
        return pafs.S3FileSystem(**kwargs), f"{self.bucket}/{self.prefix}".rstrip("/")


def s3_options(s: "Settings") -> dict[str, str]:
    """The S3 connection settings, as ``ObjectStore.from_url`` takes them."""
    return {"endpoint_url": s.s3_endpoint_url, "access_key_id": s.aws_access_key_id.get_secret_value(),
            "secret_access_key": s.aws_secret_access_key.get_secret_value(), "region": s.aws_region}


def store_from_settings(settings: "Settings | None" = None, url: str | None = None) -> ObjectStore:
    """The store at ``url`` (default: the one the settings name, ``OPENCLAW_STORE_URL``; empty:
    ``<runtime_dir>/store``), with the settings' S3 connection."""
    from openclaw_rl.settings import get_settings

    s = settings or get_settings()
    return ObjectStore.from_url(url or s.resolved_store_url, **s3_options(s))
