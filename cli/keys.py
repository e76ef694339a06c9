"""`openclaw-rl keys add|list|revoke`: the gateway's per-user API keys (stored hashed under the runtime folder)."""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from openclaw_rl.keys import KeyStore

app = typer.Typer(no_args_is_help=True, help="Gateway API keys (stored hashed under the runtime folder).")


def _store() -> KeyStore:
    from openclaw_rl.settings import get_settings

    return KeyStore.in_runtime_dir(get_settings().runtime_dir)


@app.command("add")
def add_command(name: Annotated[str, typer.Argument(help="who the key is for (unique among active keys)")],
                adapter: Annotated[bool, typer.Option("--adapter", help="this user gets its own LoRA adapter, trained "
                                                      "from its own turns only (also: OPENCLAW_ADAPTER_PER_USER=1 "
                                                      "for every key)")] = False) -> None:
    """Create a key and print it once; only its hash is kept."""
    try:
        key = _store().add(name, adapter=adapter)
    except ValueError as e:
        typer.echo(str(e), err=True)
        raise typer.Exit(1) from None
    typer.echo(key)


@app.command("list")
def list_command(as_json: Annotated[bool, typer.Option("--json", help="print JSON")] = False) -> None:
    """Key names, ids and state (never the keys)."""
    rows = [{"name": r.name, "key_id": r.key_id, "created_at": r.created_at, "revoked_at": r.revoked_at,
             "adapter": r.adapter} for r in _store().list()]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        state = "revoked" if r["revoked_at"] else "active"
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))
        own = "  own adapter" if r["adapter"] else ""
        typer.echo(f"{r['name']:<24} {r['key_id']}  {state:<8} created {created}{own}")


@app.command("revoke")
def revoke_command(name: Annotated[str, typer.Argument(help="key name or key id")]) -> None:
    """Revoke a key; the gateway refuses it from its next request."""
    n = _store().revoke(name)
    if not n:
        typer.echo(f"no active key named {name!r}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {n} key(s) named {name!r}")
