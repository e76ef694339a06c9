"""The local engine's HTTP server: a subset of SGLang's native API plus OpenAI chat, over the pure-torch runner.

``create_app(config)`` builds the app; its lifespan loads the model, starts the scheduler and stops it on shutdown.
Every malformed request is a 400 with ``{"error": {"message": ...}}``; nothing a client sends should give a 500.

Differences from SGLang worth knowing: the prefix cache reuses whole slots (engine/prefix_cache.py) rather than a radix
tree of pages, and ``/flush_cache`` forgets the kept prefixes even while requests run; ``/pause_generation``
mode ``abort`` (SGLang's default) aborts running requests, ``retract`` and ``in_place`` both keep them where they are;
a weight update never pauses or aborts anything unless ``abort_all_requests`` is set (see engine/scheduler.py), and
the new checkpoint must share the served model's shapes and tokenizer.

LoRA (``--enable-lora``): ``/load_lora_adapter`` and ``/unload_lora_adapter`` with SGLang's bodies and answer
(``success``, ``message``/``error_message``, ``loaded_adapters``: name -> path), plus our ``weight_version`` (the
version reported for requests that use the adapter; default: how many times that name was loaded, "1", "2", ...).
A failed load answers 400 (503 when every resident adapter is pinned or in use), and the adapters served before stay
as they were. ``/get_model_info`` adds ``loaded_lora_adapters`` (name -> version, path, resident, ...).
``lora_path`` of ``/load_lora_adapter`` and ``model_path`` of ``/update_weights_from_disk`` may be a store URL
(``s3://bucket/prefix``, ``file:///folder``): the engine copies it into its data dir first (engine/fetch.py), on a
worker thread.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from engine.fetch import is_url
from engine.generate import ClientGone
from engine.lora_registry import LoraRegistry, NoRoom
from engine.request import Req
from engine.sampling import SamplingConfig
from engine.schemas import (
    AbortReq,
    DetokenizeRequest,
    LoadLoRAAdapterReqInput,
    PauseGenerationReqInput,
    TokenizeRequest,
    UnloadLoRAAdapterReqInput,
    UpdateWeightFromDiskReqInput,
)
from engine.state import BadRequest, EngineConfig, EngineState, State, Unavailable, check_api_key, parse
from openclaw_rl.generation_defaults import load_sampling_defaults
from openclaw_rl.logs import get_logger

log = get_logger("engine.server")
router = APIRouter(dependencies=[Depends(check_api_key)])
public = APIRouter()


def build_state(config: EngineConfig) -> EngineState:
    import torch

    from engine.fetch import Fetcher
    from engine.model import load_weights
    from engine.runner import Runner, Tokenizer
    from engine.scheduler import Scheduler
    from openclaw_rl.settings import get_settings
    from openclaw_rl.store import s3_options

    if config.max_loras_per_batch < 1 or config.max_loaded_loras < 1:
        raise ValueError("max_loras_per_batch and max_loaded_loras must be at least 1")

    # Process-wide. Tiny matmuls gain little from threads, and spinning OpenMP workers on a small shared host cost
    # far more than they give, so the default is half the cores.
    torch.set_num_threads(config.threads or max(1, min(8, (os.cpu_count() or 2) // 2)))
    weights = load_weights(config.model_path, config.weight_version)
    tokenizer = Tokenizer(config.model_path)
    ctx = min(config.context_length or weights.config.max_position_embeddings,
              weights.config.max_position_embeddings)
    runner = Runner(weights, tokenizer, slots=config.max_batch, context_len=ctx, prefix_cache=config.prefix_cache)
    scheduler = Scheduler(runner, weights, max_running=config.max_batch, max_adapters=config.max_loras_per_batch)
    settings = get_settings()
    fetcher = Fetcher(config.data_dir or settings.runtime_dir / "engine", **s3_options(settings))
    lora = LoraRegistry(weights.config, fetcher, config.max_loaded_loras, scheduler.busy_adapters) \
        if config.lora_enabled else None
    return EngineState(config=config, scheduler=scheduler, tokenizer=tokenizer, context_len=ctx,
                       vocab_size=weights.config.vocab_size,
                       sampling_defaults=load_sampling_defaults(config.model_path, config.sampling_defaults),
                       fetcher=fetcher, lora=lora)


def lora_spec(spec: str) -> tuple[str, str, bool]:
    """(name, path, pinned) of a ``--lora-paths`` entry, in SGLang's forms: ``NAME=PATH``, ``PATH`` (named after its
    last component) or ``{"lora_name": ..., "lora_path": ..., "pinned": ...}``."""
    if spec.lstrip().startswith("{"):
        try:
            body = LoadLoRAAdapterReqInput.model_validate_json(spec)
        except ValueError as exc:
            raise ValueError(f"bad --lora-paths entry {spec!r}: {exc}") from None
        return body.lora_name, body.lora_path, body.pinned
    name, sep, path = spec.partition("=")
    if sep and name and not any(c in name for c in "/:\\"):
        return name, path, False
    return spec.rstrip("/").rsplit("/", 1)[-1], spec, False


def create_app(config: EngineConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = build_state(config)
        app.state.engine = state
        state.scheduler.start()
        for spec in config.lora_paths:
            assert state.lora is not None
            name, path, pinned = lora_spec(spec)
            await state.lora.load(name, path, pinned=pinned)
        gc.freeze()  # the model and torch's start-up objects leave the collector's scans: shorter pauses mid-decode
        log.info("engine ready", model_path=str(config.model_path), context_len=state.context_len,
                 max_batch=config.max_batch, weight_version=state.scheduler.weights.version,
                 sampling_defaults=state.sampling_defaults.as_dict())
        try:
            yield
        finally:
            await state.scheduler.stop()

    from engine.generate import router as generate_router
    from engine.openai_api import router as openai_router

    app = FastAPI(title="openclaw-rl local engine", lifespan=lifespan)
    app.include_router(public)
    app.include_router(router)
    app.include_router(generate_router)
    app.include_router(openai_router)
    _install_error_handlers(app)
    return app


def error_body(message: str, code: int, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(BadRequest)
    async def _bad(_: Request, exc: BadRequest) -> JSONResponse:
        return JSONResponse(error_body(exc.message, 400), status_code=400)

    @app.exception_handler(Unavailable)
    async def _unavailable(_: Request, exc: Unavailable) -> JSONResponse:
        return JSONResponse(error_body(exc.message, 503, "ServiceUnavailableError"), status_code=503)

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, __: ClientGone) -> Response:
        return Response(status_code=499)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        msg = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:6])
        return JSONResponse(error_body(msg, 400), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return JSONResponse(error_body(str(exc.detail), exc.status_code, "HTTPError"), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error")
        return JSONResponse(error_body(f"internal error: {exc}", 500, "InternalServerError"), status_code=500)


# -- health and info --------------------------------------------------------------------------------------------
@public.get("/health")
async def health() -> Response:
    return Response(status_code=200)


@router.get("/health_generate")
async def health_generate(state: State) -> Response:
    """200 when a one-token generation completes (or generation is paused on purpose), else 503."""
    import asyncio

    if state.scheduler.paused:
        return Response(status_code=200)
    req = Req(input_ids=[0], sampling=SamplingConfig(max_new_tokens=1, temperature=0.0),
              rid=f"HEALTH_CHECK_{time.time_ns()}")
    state.scheduler.submit(req)
    try:
        assert req.events is not None
        async with asyncio.timeout(20):
            while (await req.events.get())["meta_info"]["finish_reason"] is None:
                pass
    except TimeoutError:
        state.scheduler.abort(req.rid, message="health check timed out")
        return Response(status_code=503)
    return Response(status_code=200)


@router.get("/get_model_info")
async def get_model_info(state: State) -> dict[str, Any]:
    w = state.scheduler.weights
    return {
        "model_path": w.path, "tokenizer_path": str(state.config.model_path), "is_generation": True,
        "preferred_sampling_params": None, "weight_version": w.version, "served_model_name": state.config.model_name,
        "context_length": state.context_len, "vocab_size": state.vocab_size,
        "max_running_requests": state.config.max_batch, "eos_token_ids": list(w.config.eos_token_ids),
        **state.scheduler.stats(), **state.counters,
        "lora_enabled": state.lora is not None, "max_loras_per_batch": state.config.max_loras_per_batch,
        "max_loaded_loras": state.config.max_loaded_loras,
        "loaded_lora_adapters": state.lora.info() if state.lora is not None else {},
        **(state.lora.stats() if state.lora is not None else {}),
    }


@router.get("/get_weight_version")
async def get_weight_version(state: State) -> dict[str, str]:
    return {"weight_version": state.scheduler.weights.version}


# -- control ----------------------------------------------------------------------------------------------------
@router.post("/update_weights_from_disk")
async def update_weights_from_disk(request: Request, state: State) -> JSONResponse:
    body = await parse(request, UpdateWeightFromDiskReqInput)
    async with state.update_lock:
        path = body.model_path
        if is_url(path):
            assert state.fetcher is not None
            try:
                local = await asyncio.to_thread(state.fetcher.local, path, body.weight_version, "full")
            except Exception as exc:  # noqa: BLE001 - reported to the caller; the served weights stay
                log.warning("weight fetch failed", model_path=path, error=str(exc))
                return JSONResponse({"success": False, "message": f"failed to fetch weights from {path}: {exc}",
                                     "num_paused_requests": 0}, status_code=400)
            path = str(local)
        ok, message = await state.scheduler.update_weights(path, body.weight_version,
                                                           abort_all=body.abort_all_requests)
        if ok and is_url(body.model_path) and state.fetcher is not None:
            await asyncio.to_thread(state.fetcher.prune, "full", {Path(path)})  # in memory now: keep only this copy
    content = {"success": ok, "message": message, "num_paused_requests": 0}
    return JSONResponse(content, status_code=200 if ok else 400)


# -- LoRA adapters ----------------------------------------------------------------------------------------------
def _registry(state: EngineState) -> LoraRegistry:
    if state.lora is None:
        raise BadRequest("LoRA is not enabled on this engine (start it with --enable-lora)")
    return state.lora


def _lora_answer(registry: LoraRegistry, ok: bool, message: str, status: int = 200) -> JSONResponse:
    """SGLang's LoRA update answer (``success``, ``error_message``, ``loaded_adapters``) plus ``message``."""
    return JSONResponse({"success": ok, "message": message, "error_message": "" if ok else message,
                         "loaded_adapters": registry.loaded_adapters()}, status_code=status)


@router.post("/load_lora_adapter")
async def load_lora_adapter(request: Request, state: State) -> JSONResponse:
    body = await parse(request, LoadLoRAAdapterReqInput)
    registry = _registry(state)
    try:
        entry = await registry.load(body.lora_name, body.lora_path, body.weight_version, body.pinned)
    except NoRoom as exc:
        return _lora_answer(registry, False, f"could not load LoRA adapter {body.lora_name!r}: {exc}", 503)
    except Exception as exc:  # noqa: BLE001 - a bad adapter is the caller's problem; the served adapters stay
        log.warning("lora load failed", lora_name=body.lora_name, lora_path=body.lora_path, error=str(exc))
        return _lora_answer(registry, False, f"failed to load LoRA adapter {body.lora_name!r} from "
                                             f"{body.lora_path}: {exc}", 400)
    return _lora_answer(registry, True, f"Succeeded to load LoRA adapter {entry.name!r} "
                                        f"(weight_version={entry.version}, rank {entry.rank})")


@router.post("/unload_lora_adapter")
async def unload_lora_adapter(request: Request, state: State) -> JSONResponse:
    body = await parse(request, UnloadLoRAAdapterReqInput)
    registry = _registry(state)
    try:
        await registry.unload(body.lora_name)
    except ValueError as exc:
        return _lora_answer(registry, False, str(exc), 400)
    return _lora_answer(registry, True, f"Succeeded to unload LoRA adapter {body.lora_name!r}")


@router.post("/flush_cache")
async def flush_cache(state: State) -> PlainTextResponse:
    state.scheduler.runner.pool.flush()
    return PlainTextResponse("Cache flushed.\n")


@router.post("/pause_generation")
async def pause_generation(request: Request, state: State) -> dict[str, Any]:
    body = await parse(request, PauseGenerationReqInput)
    state.scheduler.pause(body.mode)
    return {"success": True, "message": f"generation paused (mode={body.mode})"}


@router.post("/continue_generation")
async def continue_generation(state: State) -> dict[str, Any]:
    state.scheduler.resume()
    return {"success": True, "message": "generation continued"}


@router.post("/abort_request")
async def abort_request(request: Request, state: State) -> Response:
    body = await parse(request, AbortReq)
    if not body.rid and not body.abort_all:
        raise BadRequest("provide 'rid' or set 'abort_all'")
    message = body.abort_message or "aborted by abort_request"
    state.counters["aborted_requests"] += state.scheduler.abort(body.rid, abort_all=body.abort_all, message=message)
    return Response(status_code=200)


# -- tokenizer --------------------------------------------------------------------------------------------------
@router.post("/tokenize")
@router.post("/v1/tokenize")
async def tokenize(request: Request, state: State) -> dict[str, Any]:
    body = await parse(request, TokenizeRequest)
    prompt = body.prompt if body.prompt is not None else body.text
    if isinstance(prompt, str):
        tokens = state.tokenizer.encode(prompt, add_special_tokens=body.add_special_tokens)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": state.context_len}
    assert prompt is not None
    many = [state.tokenizer.encode(p, add_special_tokens=body.add_special_tokens) for p in prompt]
    return {"tokens": many, "count": [len(t) for t in many], "max_model_len": state.context_len}


@router.post("/detokenize")
@router.post("/v1/detokenize")
async def detokenize(request: Request, state: State) -> dict[str, Any]:
    body = await parse(request, DetokenizeRequest)
    batch = body.tokens if body.tokens and isinstance(body.tokens[0], list) else [body.tokens]
    for ids in batch:
        bad = [t for t in ids if not 0 <= t < state.vocab_size]  # type: ignore[operator]
        if bad:
            raise BadRequest(f"token id {bad[0]} is out of vocabulary (size {state.vocab_size})")
    texts = [state.tokenizer.decode(ids, body.skip_special_tokens) for ids in batch]  # type: ignore[arg-type]
    return {"text": texts if batch is body.tokens else texts[0]}
