"""Chat completions: prepare (session, turn type, rendered prompt), generate (whole or streamed), hand the turn on.

The reply is generated from exactly what the client sent. The turn handed to training differs in one way: OpenClaw's
trailing internal-context message is left out of ``TurnPayload.messages`` and ``prompt_ids`` (re-rendered without
it, off the request path), because the client drops that message from the history it sends next time; the trained
prompt is then a prefix of the next turn's prompt. ``response_ids`` / ``response_logprobs`` are the engine's sampled ids
and log-probs under the served prompt, kept exactly.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from api.deps import Gateway
from api.errors import ContextLengthExceeded, OpenAIError, bad_request, engine_error, error_body
from api.render import DeltaStream, RenderError, ToolCallStream, split_tool_calls, template_messages
from api.schemas import (
    AssistantMessage,
    ChatCompletion,
    ChatCompletionRequest,
    Choice,
    PromptTokensDetails,
    ToolCallOut,
    Usage,
)
from api.security import header_value
from api.sink import TurnJob
from contracts.session import TurnPayload, TurnRef
from openclaw_rl.adapters import user_run
from openclaw_rl.keys import ApiKey
from openclaw_rl.logs import get_logger
from openclaw_rl.policy_client import SamplingParams
from openclaw_rl.turns import (
    INTERNAL_CONTEXT_BEGIN,
    TURN_TYPES,
    classify_turn,
    next_state_tail,
    raw_session_id,
    session_id_for,
    strip_internal_context,
)
from openclaw_rl.versions import policy_fingerprint, policy_version_of

log = get_logger("gateway.chat")

RENDER_IN_THREAD_CHARS = 32_000  # longer conversations render off the event loop
ABORT_TIMEOUT_S = 2.0
DRAIN_TIMEOUT_S = 1.0


@dataclass
class Headers:
    session_id: str | None = None
    turn_type: str | None = None
    session_done: bool = False


@dataclass
class PreparedTurn:
    request_id: str
    created_at: float  # unix seconds; the OpenAI ``created`` field is its integer part
    user: ApiKey
    session_id: str
    turn_type: str
    session_done: bool
    messages: list[dict[str, Any]]  # as the client sent them (validated)
    tools: list[dict[str, Any]]
    prompt_text: str
    prompt_ids: list[int]
    sampling: SamplingParams
    parse_tools: bool
    include_usage: bool
    adapter: str = ""  # the key's own adapter ("" = the shared policy)
    lora: str | None = None  # the adapter the engine is asked to serve with (None: the base weights)
    model: str = ""  # the model name the reply carries
    run: str = ""  # the training run the turn feeds


@dataclass
class Completed:
    output_ids: list[int]
    output_logprobs: list[float]
    text: str
    finish_reason: str
    weight_version: str
    content: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    cached_tokens: int = 0  # prompt tokens the engine reused from its prefix cache


# ---------------------------------------------------------------------------------------------------------------------
# Prepare
# ---------------------------------------------------------------------------------------------------------------------

async def prepare(gw: Gateway, body: ChatCompletionRequest, user: ApiKey, headers: Headers) -> PreparedTurn:
    if headers.turn_type is not None and headers.turn_type.strip().lower() not in TURN_TYPES:
        raise bad_request(f"X-Turn-Type must be one of {', '.join(TURN_TYPES)}", param="X-Turn-Type")
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    tools = [t.model_dump(exclude_none=True) for t in body.tools or []]
    raw = raw_session_id(messages, header=headers.session_id, body_session_id=body.session_id, body_user=body.user,
                         prompt_cache_key=body.prompt_cache_key)
    try:
        if sum(len(str(m.get("content") or "")) for m in messages) > RENDER_IN_THREAD_CHARS:
            prompt_text = await asyncio.to_thread(gw.renderer.render_text, messages, tools)
            prompt_ids = await asyncio.to_thread(gw.renderer.encode, prompt_text)
        else:
            prompt_text = gw.renderer.render_text(messages, tools)
            prompt_ids = gw.renderer.encode(prompt_text)
    except RenderError as e:
        raise bad_request(str(e), param="messages") from None
    session_id = session_id_for(user.key_id, raw, messages)
    turn_type = classify_turn(messages, tools, headers.turn_type)
    adapter = gw.adapter_of(user)
    if body.model and ":" in body.model and body.model != gw.model_of(user):
        raise OpenAIError(404, f"The model {body.model!r} does not exist or you do not have access to it; this key "
                          f"may use {gw.model_of(user)!r}", type="invalid_request_error", code="model_not_found",
                          param="model")
    lora = adapter if adapter and gw.served is not None and await gw.served.version(adapter) is not None else None
    try:
        sampling = _sampling(gw, body, len(prompt_ids))
    except ContextLengthExceeded as e:
        _record_rejection(gw, e, user=user, session_id=session_id, turn_type=turn_type, stream=bool(body.stream))
        raise
    return PreparedTurn(
        request_id=f"chatcmpl-{uuid.uuid4().hex}", created_at=time.time(), user=user, session_id=session_id,
        turn_type=turn_type, session_done=headers.session_done,
        messages=messages, tools=tools, prompt_text=prompt_text, prompt_ids=prompt_ids, sampling=sampling,
        parse_tools=bool(tools) and body.tool_choice != "none",
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
        adapter=adapter, lora=lora, model=gw.model_of(user),
        run=user_run(gw.settings.run, user.key_id) if adapter else gw.settings.run,
    )


def _sampling(gw: Gateway, body: ChatCompletionRequest, prompt_len: int) -> SamplingParams:
    limit = gw.context_length
    requested = body.max_completion_tokens or body.max_tokens
    if prompt_len >= limit or (requested and prompt_len + requested > limit):
        raise ContextLengthExceeded(limit, prompt_len, requested)
    temperature, top_p, top_k = gw.sampling_defaults.resolve(body.temperature, body.top_p, body.top_k)
    return SamplingParams(
        max_new_tokens=requested or min(limit - prompt_len, gw.default_max_tokens),
        temperature=temperature, top_p=top_p, top_k=top_k,
        stop=[body.stop] if isinstance(body.stop, str) else (list(body.stop) if body.stop else None),
        sampling_seed=body.seed, ignore_eos=body.ignore_eos,
    )


def _record_rejection(gw: Gateway, e: ContextLengthExceeded, *, user: ApiKey, session_id: str, turn_type: str,
                      stream: bool) -> None:
    """Count the refused turn and write an ``events`` record of it. It never reaches the engine or its session
    workflow, so this record is the only trace it leaves in the store."""
    gw.rejected[e.code or "rejected"] += 1
    record = {"event": e.code, "source": "gateway", "message": str(e.detail), "session": session_id,
              "user": user.key_id, "user_name": user.name, "turn_type": turn_type, "model": gw.model_name,
              "prompt_tokens": e.prompt_tokens, "max_tokens": e.max_tokens, "context_length": e.limit,
              "stream": stream}
    log.info("turn refused: context length exceeded", session=session_id, user=user.key_id,
             prompt_tokens=e.prompt_tokens, max_tokens=e.max_tokens, context_length=e.limit)
    if gw.records is not None:
        try:
            gw.records.append("events", record)
        except Exception:  # noqa: BLE001 - a record must never change the answer
            log.exception("event record failed", session=session_id)


def _record_engine_failure(gw: Gateway, t: PreparedTurn, err: OpenAIError, *, stream: bool,
                           completion_tokens: int) -> None:
    """Write an ``events`` record (``event = 'engine_failed'``) of a turn the engine broke: the client got an error
    (a 5xx, or an error event mid-stream), so the turn goes neither to its session workflow nor to the ``turns``
    view, and this record is its only trace in the store."""
    record = {"event": "engine_failed", "source": "gateway", "message": str(err.detail), "code": err.code,
              "status": err.status_code, "request_id": t.request_id, "session": t.session_id, "user": t.user.key_id,
              "user_name": t.user.name, "turn_type": t.turn_type, "model": gw.model_name,
              "prompt_tokens": len(t.prompt_ids), "max_tokens": t.sampling.max_new_tokens,
              "completion_tokens": completion_tokens, "stream": stream}
    if gw.records is not None:
        try:
            gw.records.append("events", record)
        except Exception:  # noqa: BLE001 - a record must never change the answer
            log.exception("event record failed", session=t.session_id)


def _engine_failure(err: BaseException) -> OpenAIError | None:
    """The error when it is the engine's (``engine_*`` codes), else None."""
    return err if isinstance(err, OpenAIError) and str(err.code or "").startswith("engine_") else None


# ---------------------------------------------------------------------------------------------------------------------
# Hand-off (runs in the sink's worker thread, after the reply)
# ---------------------------------------------------------------------------------------------------------------------

def served_version(t: PreparedTurn, weight_version: Any) -> int:
    """The policy version of the run the turn feeds: the engine's weight version, or for a key with its own adapter
    that the engine did not serve it with yet (its run has pushed nothing), version 0 of that run."""
    if t.adapter and not t.lora:
        return 0
    return policy_version_of(weight_version)


def _adapter_gone(gw: Gateway, t: PreparedTurn, err: OpenAIError) -> bool:
    """The engine refused the turn's adapter (unloaded since the gateway last looked): forget what the gateway knew
    and serve this turn with the base model, as before the user's run had pushed anything (version 0 of its run)."""
    cause = err.__cause__
    if not t.lora or getattr(cause, "status", None) != 400 or t.lora not in str(getattr(cause, "message", "")):
        return False
    log.warning("engine does not serve the key's adapter; serving the base model", adapter=t.lora,
                request_id=t.request_id)
    if gw.served is not None:
        gw.served.invalidate()
    t.lora = None
    return True


def _lora(t: PreparedTurn) -> dict[str, Any]:
    """The engine call's adapter argument, only when there is one (engine clients without adapters stay valid)."""
    return {"lora_path": t.lora} if t.lora else {}


def turn_job(gw: Gateway, t: PreparedTurn, done: Completed) -> TurnJob:
    def build() -> tuple[TurnRef, dict[str, Any]]:
        trained = strip_internal_context(t.messages)
        stripped = trained != t.messages
        prompt_text = gw.renderer.render_text(trained, t.tools) if stripped else t.prompt_text
        prompt_ids = gw.renderer.encode(prompt_text) if stripped else t.prompt_ids
        messages = template_messages(trained)
        version = served_version(t, done.weight_version)
        payload = TurnPayload(messages=messages, tools=t.tools, prompt_ids=prompt_ids,
                              response_ids=list(done.output_ids), response_logprobs=list(done.output_logprobs),
                              response_text=done.text, tool_calls=done.tool_calls)
        ref = TurnRef(request_id=t.request_id, session_id=t.session_id, user=t.user.key_id, turn_type=t.turn_type,
                      policy_version=version, created_at=t.created_at, payload=payload,
                      session_done=t.session_done, finish_reason=done.finish_reason,
                      tail=next_state_tail(messages), user_name=t.user.name, adapter=t.adapter)
        record = {"request_id": t.request_id, "session": t.session_id,
                  "latency_ms": round((done_at - t.created_at) * 1000.0, 3), "user": t.user.key_id,
                  "user_name": t.user.name, "turn_type": t.turn_type, "policy_version": version,
                  "adapter": t.adapter, "run": t.run,
                  "weight_version": str(done.weight_version), "messages": messages, "tools": t.tools,
                  "prompt_text": prompt_text, "response_text": done.text, "content": done.content,
                  "tool_calls": done.tool_calls, "finish_reason": done.finish_reason,
                  "prompt_tokens": len(prompt_ids), "served_prompt_tokens": len(t.prompt_ids),
                  "completion_tokens": len(done.output_ids), "cached_tokens": done.cached_tokens,
                  "temperature": t.sampling.temperature, "top_p": t.sampling.top_p, "top_k": t.sampling.top_k,
                  "internal_context_stripped": stripped,
                  "session_done": t.session_done, "created_at": t.created_at}
        return ref, record

    done_at = time.time()
    heavy = len(t.prompt_ids) > 2048 or INTERNAL_CONTEXT_BEGIN in str(t.messages[-1].get("content"))
    return TurnJob(session_id=t.session_id, request_id=t.request_id, build=build, heavy=heavy)


# ---------------------------------------------------------------------------------------------------------------------
# Not streamed
# ---------------------------------------------------------------------------------------------------------------------

async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _abort(gw: Gateway, rid: str) -> None:
    with anyio.move_on_after(ABORT_TIMEOUT_S, shield=True):
        try:
            await gw.policy.abort(rid)
        except Exception as e:  # noqa: BLE001 - best effort: the engine may already be done or gone
            log.warning("engine abort failed", rid=rid, error=repr(e))


async def _call_engine(gw: Gateway, request: Request, rid: str, call: Awaitable[Any]) -> Any:
    """Await an engine call, mapping failures to OpenAI errors; a client that hangs up aborts the engine request."""
    task = asyncio.ensure_future(call)
    watcher = asyncio.ensure_future(_until_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await _abort(gw, rid)
        raise ClientGone()
    try:
        return task.result()
    except (OpenAIError, ClientGone):
        raise
    except Exception as e:
        raise engine_error(e, rid) from e


class ClientGone(Exception):
    """The client disconnected before the reply; nothing to send, nothing to train on."""


def _finish(raw_reason: Any, calls: list[dict[str, Any]]) -> str:
    reason = str(raw_reason or "stop")
    if reason == "abort":  # cut short by the engine itself: a partial reply is neither served nor trained
        raise OpenAIError(503, "the policy engine aborted the generation; retry the request", type="server_error",
                          code="engine_aborted")
    if calls and reason != "length":
        return "tool_calls"
    return reason if reason in ("stop", "length") else "stop"


def reply_headers(t: PreparedTurn) -> dict[str, str]:
    """``X-Session-Id`` echoes the namespaced session id, percent-encoded where it is not printable ASCII."""
    return {"X-Session-Id": header_value(t.session_id)}


async def complete(gw: Gateway, t: PreparedTurn, request: Request) -> JSONResponse:
    """The whole reply. The response is built before the turn is handed on, so a turn is recorded only when its
    reply can be sent. ``X-Engine-Time-Ms`` says how long the engine call took (the rest is the gateway's)."""
    started = time.perf_counter()
    try:
        try:
            gen = await _call_engine(gw, request, t.request_id, gw.policy.generate(t.prompt_ids, t.sampling,
                                                                                   rid=t.request_id, **_lora(t)))
        except OpenAIError as e:
            if not _adapter_gone(gw, t, e):
                raise
            gen = await _call_engine(gw, request, t.request_id, gw.policy.generate(t.prompt_ids, t.sampling,
                                                                                   rid=t.request_id))
        engine_ms = (time.perf_counter() - started) * 1000.0
        content, calls = split_tool_calls(gen.text) if t.parse_tools else (gen.text, [])
        finish = _finish(gen.finish_reason, calls)
    except OpenAIError as e:
        if _engine_failure(e):
            _record_engine_failure(gw, t, e, stream=False, completion_tokens=0)
        raise
    done = Completed(output_ids=list(gen.output_ids), output_logprobs=list(gen.output_logprobs), text=gen.text,
                     finish_reason=finish, weight_version=str(gen.weight_version),
                     content=(content or None) if calls else content, tool_calls=calls,
                     cached_tokens=gen.cached_tokens)
    message = AssistantMessage(content=done.content,
                               tool_calls=[ToolCallOut.model_validate(c) for c in calls] or None)
    reply = ChatCompletion(
        id=t.request_id, created=int(t.created_at), model=t.model or gw.model_name,
        system_fingerprint=policy_fingerprint(served_version(t, gen.weight_version)),
        choices=[Choice(message=message, finish_reason=finish)],
        usage=Usage(prompt_tokens=len(t.prompt_ids), completion_tokens=len(gen.output_ids),
                    total_tokens=len(t.prompt_ids) + len(gen.output_ids),
                    prompt_tokens_details=PromptTokensDetails(cached_tokens=gen.cached_tokens)))
    response = JSONResponse(reply.model_dump(mode="json"),
                            headers={**reply_headers(t), "X-Engine-Time-Ms": f"{engine_ms:.3f}"})
    gw.sink.submit(turn_job(gw, t, done))
    return response


# ---------------------------------------------------------------------------------------------------------------------
# Streamed (server-sent events in the OpenAI chunk format)
# ---------------------------------------------------------------------------------------------------------------------

class EventStreamResponse(StreamingResponse):
    """A streaming response that always closes its generator, so an engine request is aborted on disconnect, and
    calls ``on_close`` (the per-key concurrency slot's release) when it is done, however it ends."""

    media_type = "text/event-stream"
    on_close: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if self.on_close is not None:
                self.on_close()

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        finally:
            with anyio.CancelScope(shield=True):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]


class _Chunks:
    def __init__(self, t: PreparedTurn, model: str) -> None:
        self.base = {"id": t.request_id, "object": "chat.completion.chunk", "created": int(t.created_at),
                     "model": model}
        self.fingerprint: str | None = None

    def event(self, delta: dict[str, Any], finish_reason: str | None = None) -> str:
        chunk = {**self.base, "system_fingerprint": self.fingerprint,
                 "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
        return f"data: {json.dumps(chunk, ensure_ascii=False, separators=(',', ':'))}\n\n"

    def usage(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> str:
        chunk = {**self.base, "system_fingerprint": self.fingerprint, "choices": [],
                 "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                           "total_tokens": prompt_tokens + completion_tokens,
                           "prompt_tokens_details": {"cached_tokens": cached_tokens}}}
        return f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n"


async def open_stream(gw: Gateway, t: PreparedTurn, request: Request, on_close: Any = None) -> EventStreamResponse:
    """Start the engine stream before answering, so an unreachable engine is a proper 503, not a broken stream."""
    headers = {**reply_headers(t), "Cache-Control": "no-cache"}
    engine = gw.policy.generate_stream(t.prompt_ids, t.sampling, rid=t.request_id, **_lora(t))
    try:
        try:
            first = await _call_engine(gw, request, t.request_id, engine.__anext__())
        except OpenAIError as e:
            if not _adapter_gone(gw, t, e):
                raise
            await engine.aclose()
            engine = gw.policy.generate_stream(t.prompt_ids, t.sampling, rid=t.request_id)
            first = await _call_engine(gw, request, t.request_id, engine.__anext__())
    except StopAsyncIteration:
        first = None
    except BaseException as e:
        await engine.aclose()
        if (err := _engine_failure(e)) is not None:
            _record_engine_failure(gw, t, err, stream=True, completion_tokens=0)
        raise
    response = EventStreamResponse(_stream(gw, t, engine, first), headers=headers)
    response.on_close = on_close
    return response


async def _stream(gw: Gateway, t: PreparedTurn, engine: AsyncIterator[Any], first: Any) -> AsyncIterator[str]:
    chunks = _Chunks(t, t.model or gw.model_name)
    deltas = DeltaStream(ToolCallStream() if t.parse_tools else None)
    ids: list[int] = []
    logprobs: list[float] = []
    text: list[str] = []
    reason: Any = None
    version: Any = ""
    cached = 0
    finished = False
    try:
        # Frames are batched per engine chunk: the role frame leaves with the first token, the closing frames
        # (finish, usage, [DONE]) with the last, so each token costs one write.
        pending = chunks.event({"role": "assistant", "content": ""})
        async for chunk in _chain([first] if first is not None else [], engine):
            ids.extend(chunk.output_ids)
            logprobs.extend(chunk.output_logprobs)
            text.append(chunk.text)
            version = chunk.weight_version or version
            chunks.fingerprint = policy_fingerprint(served_version(t, version))
            pending += "".join(chunks.event(delta) for delta in deltas.feed(chunk.text))
            if chunk.finished:
                reason, cached = chunk.finish_reason, chunk.cached_tokens
                break
            yield pending
            pending = ""
        pending += "".join(chunks.event(delta) for delta in deltas.finish())
        calls = deltas.calls
        finish = _finish(reason, calls)
        full = "".join(text)
        content = (split_tool_calls(full)[0] or None) if calls else full
        finished = True
        gw.sink.submit(turn_job(gw, t, Completed(ids, logprobs, full, finish, str(version), content, calls, cached)))
        pending += chunks.event({}, finish_reason=finish)
        if t.include_usage:
            pending += chunks.usage(len(t.prompt_ids), len(ids), cached)
        yield pending + "data: [DONE]\n\n"
    except Exception as e:  # noqa: BLE001 - headers are sent: report in-band, as OpenAI does
        err = e if isinstance(e, OpenAIError) else engine_error(e, t.request_id)
        log.warning("stream failed", request_id=t.request_id, error=str(err.detail))
        _record_engine_failure(gw, t, err, stream=True, completion_tokens=len(ids))
        yield f"data: {json.dumps(error_body(str(err.detail), err.type, None, err.code))}\n\n"
    finally:
        if not finished:
            await _abort(gw, t.request_id)
        with anyio.CancelScope(shield=True):
            await _drain(engine, finished)


async def _drain(engine: AsyncIterator[Any], finished: bool) -> None:
    """Read the engine stream to its end after the last token (its [DONE]), so the connection goes back to the
    pool instead of being closed; give up quickly and close it otherwise."""
    if finished:
        with anyio.move_on_after(DRAIN_TIMEOUT_S):
            try:
                async for _ in engine:
                    pass
            except Exception:  # noqa: BLE001 - the reply is complete; the connection is simply not reused
                pass
    await engine.aclose()  # type: ignore[attr-defined]


async def _chain(first: list[Any], rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    for item in first:
        yield item
    async for item in rest:
        yield item
