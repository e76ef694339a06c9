"""A stand-in policy engine for the weight-push tests: the control routes of the engine's API over real HTTP, with no
model behind them.

It answers ``/get_model_info`` (``weight_version``, ``loaded_lora_adapters``), ``/update_weights_from_disk``,
``/load_lora_adapter`` and ``/unload_lora_adapter`` as the engine does, and records every call. ``refuse_loaded``
makes it answer like SGLang to a load under a name it already serves (400, "already loaded"), instead of replacing the
adapter in place as the local engine does. A local ``lora_path`` must be a folder holding ``adapter_config.json``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class FakeLoraEngine:
    weight_version: str = "0"
    refuse_loaded: bool = False
    loaded: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    files: dict[str, list[str]] = field(default_factory=dict)  # local folder loaded -> its file names then

    def app(self) -> Any:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse

        app = FastAPI()

        @app.get("/get_model_info")
        async def model_info() -> dict[str, Any]:
            return {"weight_version": self.weight_version,
                    "loaded_lora_adapters": {k: dict(v) for k, v in self.loaded.items()}}

        @app.post("/update_weights_from_disk")
        async def update(body: dict[str, Any]) -> JSONResponse:
            self.calls.append(("update_weights_from_disk", body))
            self.weight_version = str(body["weight_version"])
            return JSONResponse({"success": True, "message": "ok", "num_paused_requests": 0})

        @app.post("/load_lora_adapter")
        async def load(body: dict[str, Any]) -> JSONResponse:
            self.calls.append(("load_lora_adapter", body))
            name, path = body["lora_name"], body["lora_path"]
            if self.refuse_loaded and name in self.loaded:
                return JSONResponse({"success": False, "message": f"LoRA adapter {name!r} is already loaded"},
                                    status_code=400)
            if "://" not in path:
                folder = Path(path)
                if not (folder / "adapter_config.json").is_file():
                    return JSONResponse({"success": False, "message": f"no adapter in {path}"}, status_code=400)
                self.files[path] = sorted(p.name for p in folder.iterdir())
            self.loaded[name] = {"version": str(body.get("weight_version")), "path": path, "resident": True}
            return JSONResponse({"success": True, "message": f"loaded {name}"})

        @app.post("/unload_lora_adapter")
        async def unload(body: dict[str, Any]) -> JSONResponse:
            self.calls.append(("unload_lora_adapter", body))
            if self.loaded.pop(body["lora_name"], None) is None:
                return JSONResponse({"success": False, "message": "not loaded"}, status_code=400)
            return JSONResponse({"success": True, "message": "unloaded"})

        return app

    def called(self, route: str) -> list[dict[str, Any]]:
        return [body for r, body in self.calls if r == route]


@contextmanager
def fake_engine(**kwargs: Any) -> Iterator[tuple[str, FakeLoraEngine]]:
    """Serve a ``FakeLoraEngine`` on a free loopback port; yields (its URL, the fake)."""
    from api.cli import running

    fake = FakeLoraEngine(**kwargs)
    with running(fake.app()) as url:
        yield url, fake
