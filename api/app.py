"""The gateway: an OpenAI-compatible chat API in front of the policy engine, feeding every served turn to Temporal.

``create_app()`` builds the FastAPI app; its lifespan opens, once, the engine client, the tokenizer (the model's own
chat template), the Temporal submitter with its spool and replayer, and the records writer. Any of them can be passed
in instead (tests inject a fake engine or a fake submitter). Run it with ``openclaw-rl gateway serve``.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.chat import ClientGone
from api.deps import Gateway
from api.errors import OpenAIError, install_error_handlers
from api.render import PromptRenderer
from api.routes import chat, health, models
from api.schemas import ChatCompletionChunk
from api.security import admin_key
from api.sink import Submitter, TemporalSubmitter, TurnSink
from api.spool import Spool
from openclaw_rl.generation_defaults import SamplingDefaults, load_sampling_defaults
from openclaw_rl.keys import KeyStore
from openclaw_rl.logs import configure_logging, get_logger
from openclaw_rl.settings import Settings, get_settings

log = get_logger("gateway")


def request_start(value: bytes | None) -> float | None:
    """``X-Request-Start: t=<unix time>`` (seconds, milliseconds or microseconds, as proxies write it) in seconds."""
    if not value:
        return None
    try:
        t = float(value.decode("latin-1").strip().removeprefix("t="))
    except ValueError:
        return None
    return t / 1e6 if t > 1e14 else t / 1e3 if t > 1e11 else t


class ServerTiming:
    """``Server-Timing: gateway;dur=T`` on every HTTP response: milliseconds from the gateway's app receiving the
    request to its response starting (a stream: its first event), the engine's part included; with ``engine;dur=E``
    where the route says the engine's time (``X-Engine-Time-Ms``), and ``queue;dur=Q`` where the request says when it
    was sent (``X-Request-Start: t=<unix time>``, the header proxies set): its wait before the app saw it (in the
    socket while the gateway was busy or waiting for a CPU). What a client measures beyond Q + T was spent outside the
    gateway: on the network or in the client."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, arrived = time.perf_counter(), time.time()
        sent = request_start(next((v for k, v in scope["headers"] if k == b"x-request-start"), None))

        async def timed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                timing = f"gateway;dur={(time.perf_counter() - started) * 1000:.3f}"
                if sent is not None and 0 <= arrived - sent < 3600:
                    timing += f", queue;dur={(arrived - sent) * 1000:.3f}"
                engine = next((v for k, v in headers if k.lower() == b"x-engine-time-ms"), None)
                if engine is not None:
                    timing += f", engine;dur={engine.decode('latin-1')}"
                message = {**message, "headers": [*headers, (b"server-timing", timing.encode("latin-1"))]}
            await send(message)

        await self.app(scope, receive, timed)


class BodyTooLarge(OpenAIError):
    def __init__(self, limit: int) -> None:
        super().__init__(413, f"Request body exceeds the gateway limit of {limit} bytes.", code="request_too_large")


class BodyLimit:
    """Refuse bodies over ``limit`` bytes with a 413: by Content-Length up front, else while reading a chunked body."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            body = json.dumps(BodyTooLarge(self.limit).body()).encode()
            await send({"type": "http.response.start", "status": 413,
                        "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})
            await send({"type": "http.response.body", "body": body})
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)  # an HTTPException: FastAPI re-raises it from body parsing
            return message

        await self.app(scope, limited, send)


def _model_folder(settings: Settings, info: dict[str, Any]) -> Path:
    """Where the model's tokenizer and generation config are: ``settings.model_path``, else the path the engine
    reports."""
    path = Path(settings.model_path)
    if not (path / "tokenizer_config.json").exists():
        path = Path(info.get("tokenizer_path") or info.get("model_path") or path)
    return path


def _load_tokenizer(settings: Settings, info: dict[str, Any]) -> Any:
    """The model's tokenizer (and chat template), from ``_model_folder``."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(_model_folder(settings, info)))


def _sampling_defaults(settings: Settings, info: dict[str, Any]) -> SamplingDefaults:
    """What a request that leaves out temperature, top_p or top_k gets (``openclaw_rl.generation_defaults``). A broken
    generation config is logged and the OpenAI values are used: it must not keep the gateway from serving."""
    try:
        return load_sampling_defaults(_model_folder(settings, info), settings.sampling_defaults)
    except ValueError as e:
        log.warning("model sampling defaults unusable; using temperature 1, top_p 1", error=str(e))
        return SamplingDefaults()


async def _model_info(policy: Any) -> dict[str, Any]:
    try:
        info = await policy.model_info()
        return info if isinstance(info, dict) else vars(info)
    except Exception as e:  # noqa: BLE001 - the engine may start after the gateway
        log.warning("engine model info unavailable; using the model config", error=repr(e))
        return {}


def _context_length(info: dict[str, Any], tokenizer: Any, model_path: Path) -> int:
    """The engine's context window (model info), else the model config's, else the tokenizer's."""
    for key in ("context_length", "max_context_length", "max_model_len", "max_position_embeddings"):
        if isinstance(info.get(key), int) and info[key] > 0:
            return int(info[key])
    try:
        config = json.loads((model_path / "config.json").read_text())
        if int(config.get("max_position_embeddings", 0)) > 0:
            return int(config["max_position_embeddings"])
    except (OSError, ValueError):
        pass
    limit = int(getattr(tokenizer, "model_max_length", 0) or 0)
    return limit if 0 < limit < 10_000_000 else 32_768


def create_app(settings: Settings | None = None, *, policy: Any = None, temporal_submitter: Submitter | None = None,
               tokenizer: Any = None, keys: KeyStore | None = None, store: Any = None, records: Any = None,
               max_body_bytes: int | None = None) -> FastAPI:
    s = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from openclaw_rl.policy_client import PolicyClient
        from openclaw_rl.records import RecordWriter
        from openclaw_rl.store import store_from_settings

        configure_logging(s.log_level, s.log_format, process="gateway")
        log.info("settings resolved", **s.redacted())
        if admin_key(s) is None:
            log.warning("no admin key configured (a placeholder counts as none): the admin user and /healthz details "
                        "are refused; set OPENCLAW_ADMIN_KEY to a long random secret to enable them",
                        placeholder=bool(s.admin_key.get_secret_value()))
        own_policy = policy is None
        engine = policy or PolicyClient(s.engine_url, timeout_s=s.http_timeout_s,
                                        connect_timeout_s=s.http_connect_timeout_s)
        info = await _model_info(engine)
        tok = tokenizer or _load_tokenizer(s, info)
        blob_store = store or store_from_settings(s)
        writer = records if records is not None else RecordWriter(blob_store)
        spool = Spool.in_runtime_dir(s.runtime_dir)
        sink = TurnSink(temporal_submitter or TemporalSubmitter(s, timeout_s=min(s.http_timeout_s, 10.0)), spool,
                        store=blob_store, records=writer, retry_max_s=s.gateway_spool_retry_max_s)
        await sink.start()
        gw = Gateway(settings=s, policy=engine, renderer=PromptRenderer(tok),
                     keys=keys or KeyStore.in_runtime_dir(s.runtime_dir), sink=sink,
                     model_name=info.get("served_model_name") or Path(s.model_path).name,
                     context_length=_context_length(info, tok, Path(s.model_path)),
                     default_max_tokens=s.gateway_default_max_tokens, records=writer,
                     sampling_defaults=_sampling_defaults(s, info))
        app.state.gateway = gw
        gc.freeze()  # start-up objects (tokenizer, torch via transformers) leave the collector's scans: no long pauses
        log.info("gateway ready", engine=s.engine_url, temporal=s.temporal_address, model=gw.model_name,
                 context_length=gw.context_length, spooled=sink.state()["pending"],
                 sampling_defaults=gw.sampling_defaults.as_dict())
        try:
            yield
        finally:
            await sink.close()
            if records is None:
                await asyncio.to_thread(writer.close)
            spool.close()
            if own_policy and hasattr(engine, "aclose"):
                await engine.aclose()

    app = FastAPI(title="OpenClaw-RL gateway", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)

    @app.exception_handler(ClientGone)
    async def _client_gone(_: Request, __: ClientGone) -> Response:
        return Response(status_code=499)

    for router in (chat.router, models.router, health.router):
        app.include_router(router)
    app.add_middleware(BodyLimit, limit=max_body_bytes or s.gateway_max_body_bytes)
    app.add_middleware(ServerTiming)  # the outermost of the gateway's own: it also times the 413s
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The published schema, as the gateway behaves: validation errors are 400 in the error shape (FastAPI's 422 and
    its validation-error models are removed), and the stream's chunk model is listed. It is public (``/docs``,
    ``/openapi.json``) and holds no address, path or setting of this deployment."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, routes=app.routes,
                         description="OpenAI-compatible chat completions in front of the policy engine.")
    schema.setdefault("components", {})["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "an `ocl-...` key, or the admin key"}}
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):  # an optional header is absent, never null
                options = parameter.get("schema", {}).get("anyOf", [])
                if len(options) == 2 and {"type": "null"} in options:
                    kept = next(o for o in options if o != {"type": "null"})
                    parameter["schema"] = {**{k: v for k, v in parameter["schema"].items() if k != "anyOf"}, **kept}
            responses = operation.get("responses", {})
            responses.pop("422", None)
            if "401" in responses:  # a key is required; /healthz takes one optionally (details: the admin key)
                operation["security"] = [{"apiKey": []}] if "403" not in responses else [{}, {"apiKey": []}]
    components = schema["components"].setdefault("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    chunk = ChatCompletionChunk.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in chunk.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault("ChatCompletionChunk", chunk)
    app.openapi_schema = schema
    return schema
