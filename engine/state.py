"""What every route needs: the engine state, body parsing, error responses and the optional API key."""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, TypeVar

from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel, ValidationError

from engine.fetch import Fetcher
from engine.lora_registry import LoraRegistry
from engine.runner import Tokenizer
from engine.scheduler import Scheduler
from openclaw_rl.generation_defaults import SamplingDefaults

M = TypeVar("M", bound=BaseModel)


@dataclass
class EngineConfig:
    model_path: Path
    max_batch: int = 16
    context_length: int | None = None  # default: the model's max_position_embeddings
    weight_version: str = "default"
    served_model_name: str | None = None
    api_key: str | None = None
    threads: int | None = None
    incremental_streaming_output: bool = False
    prefix_cache: bool = True  # reuse the keys/values of a cached prompt prefix (engine/prefix_cache.py)
    sampling_defaults: str = "model"  # for what an OpenAI request leaves out: generation_config.json, or "openai"
    # LoRA adapters (engine/lora_registry.py), with SGLang's flag names; ``lora_paths`` (NAME=PATH, PATH, or SGLang's
    # JSON form) are loaded at start and imply ``enable_lora``
    enable_lora: bool = False
    max_loras_per_batch: int = 8  # distinct adapters in the running batch; requests of one more wait
    max_loaded_loras: int = 16  # adapters resident in memory; using one more evicts the least recently used idle one
    lora_paths: list[str] = field(default_factory=list)
    data_dir: Path | None = None  # what was fetched from a store (engine/fetch.py); default: <runtime_dir>/engine

    @property
    def model_name(self) -> str:
        return self.served_model_name or Path(self.model_path).name

    @property
    def lora_enabled(self) -> bool:
        return self.enable_lora or bool(self.lora_paths)


@dataclass
class EngineState:
    config: EngineConfig
    scheduler: Scheduler
    tokenizer: Tokenizer
    context_len: int
    vocab_size: int
    sampling_defaults: SamplingDefaults = field(default_factory=SamplingDefaults)
    counters: dict[str, int] = field(default_factory=lambda: {"requests": 0, "aborted_requests": 0})
    fetcher: Fetcher | None = None
    lora: LoraRegistry | None = None  # None: LoRA is not enabled
    update_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one full weight update (fetch + load) at a time


class BadRequest(Exception):
    """Turned into ``400 {"error": {"message": ...}}``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unavailable(Exception):
    """Turned into ``503 {"error": {"message": ...}}``: the request may succeed if retried later."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def get_state(request: Request) -> EngineState:
    return request.app.state.engine


def check_api_key(request: Request) -> None:
    key = request.app.state.engine.config.api_key
    if not key:
        return
    given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
    if not secrets.compare_digest(given.encode(), key.encode()):
        raise HTTPException(status_code=401, detail="invalid or missing API key")


State = Annotated[EngineState, Depends(get_state)]


def describe(exc: ValidationError) -> str:
    """One line per problem, without pydantic's union-branch noise."""
    lines: list[str] = []
    for err in exc.errors():
        parts = [p for p in err["loc"] if not (isinstance(p, str) and ("[" in p or p.startswith("function")))]
        loc = ".".join(str(p) for p in parts)
        msg = err["msg"].removeprefix("Value error, ")
        line = f"{loc}: {msg}" if loc and not msg.startswith(loc) else msg
        if line not in lines:
            lines.append(line)
    return "; ".join(lines[:6])


async def parse(request: Request, model: type[M]) -> M:
    body = await request.body()
    try:
        return model.model_validate_json(body or b"{}")
    except ValidationError as exc:
        raise BadRequest(describe(exc)) from None
