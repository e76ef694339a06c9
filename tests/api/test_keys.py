"""API keys: stored hashed, verified cheaply, revoked at once; the `keys` CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.keys import app
from openclaw_rl.keys import KeyStore


def test_add_verify_revoke(tmp_path: Path) -> None:
    store = KeyStore.in_runtime_dir(tmp_path)
    key = store.add("alice")
    assert key.startswith("ocl-")
    found = store.verify(key)
    assert found is not None and found.name == "alice" and key.split("-")[1] == found.key_id
    assert store.verify(key + "x") is None and store.verify("ocl-" + found.key_id + "-" + "a" * 43) is None
    assert store.verify("") is None and store.verify("Bearer " + key) is None
    assert store.revoke("alice") == 1
    assert store.verify(key) is None
    assert store.revoke("alice") == 0


def test_secret_is_never_stored_and_file_is_private(tmp_path: Path) -> None:
    store = KeyStore.in_runtime_dir(tmp_path)
    key = store.add("bob")
    text = store.path.read_text()
    assert key not in text and key.split("-", 2)[2] not in text
    assert store.path.stat().st_mode & 0o077 == 0
    row = json.loads(text)["keys"][0]
    assert set(row) == {"key_id", "name", "salt", "digest", "created_at", "revoked_at", "adapter"}


def test_a_key_with_its_own_adapter_and_a_key_file_from_before_adapters(tmp_path: Path) -> None:
    store = KeyStore.in_runtime_dir(tmp_path)
    mine, shared = store.add("dora", adapter=True), store.add("eve")
    assert store.verify(mine).adapter and not store.verify(shared).adapter
    rows = json.loads(store.path.read_text())["keys"]
    for row in rows:
        del row["adapter"]  # a file written before adapters existed
    store.path.write_text(json.dumps({"keys": rows}))
    again = KeyStore.in_runtime_dir(tmp_path)
    assert again.verify(mine) is not None and not again.verify(mine).adapter


def test_names_are_unique_among_active_keys(tmp_path: Path) -> None:
    store = KeyStore.in_runtime_dir(tmp_path)
    first = store.add("carol")
    with pytest.raises(ValueError):
        store.add("carol")
    with pytest.raises(ValueError):
        store.add("bad name with spaces")
    store.revoke("carol")
    second = store.add("carol")  # a new key after revoking the old one
    assert store.verify(first) is None and store.verify(second) is not None


def test_another_process_sees_changes(tmp_path: Path) -> None:
    gateway_view, cli_view = KeyStore.in_runtime_dir(tmp_path), KeyStore.in_runtime_dir(tmp_path)
    assert gateway_view.verify("ocl-000000000000-" + "a" * 43) is None  # loads the (missing) file
    key = cli_view.add("dave")
    assert gateway_view.verify(key) is not None
    cli_view.revoke(key.split("-")[1])  # by key id
    assert gateway_view.verify(key) is None


def test_cli_add_list_revoke(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from openclaw_rl.settings import get_settings

    monkeypatch.setenv("OPENCLAW_RUNTIME_DIR", str(tmp_path))
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        added = runner.invoke(app, ["add", "erin"])
        assert added.exit_code == 0, added.output
        key = added.output.strip()
        assert KeyStore.in_runtime_dir(tmp_path).verify(key) is not None
        listed = runner.invoke(app, ["list", "--json"])
        rows = json.loads(listed.output)
        assert [(r["name"], r["revoked_at"]) for r in rows] == [("erin", None)] and key not in listed.output
        assert "erin" in runner.invoke(app, ["list"]).output
        assert runner.invoke(app, ["add", "erin"]).exit_code == 1
        assert runner.invoke(app, ["revoke", "erin"]).exit_code == 0
        assert runner.invoke(app, ["revoke", "erin"]).exit_code == 1
        assert KeyStore.in_runtime_dir(tmp_path).verify(key) is None
    finally:
        get_settings.cache_clear()
