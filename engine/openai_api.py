"""OpenAI-compatible ``/v1/chat/completions`` and ``/v1/models`` on top of the native generation path.

The prompt is the model's chat template rendered with ``add_generation_prompt``; each choice is one ``Req``.
The weight version that produced a reply is in ``metadata.weight_version``.

LoRA adapters, as SGLang: ``model`` of the form ``"<served model name>:<adapter name>"`` selects a loaded adapter, and
so does ``model`` set to an adapter's name alone (its ``id`` in ``/v1/models``) or an explicit ``lora_path`` (which
``model`` overrides when both name one). ``metadata.lora_name`` names the adapter used, and ``metadata.weight_version``
is then its version. ``/v1/models`` lists each registered adapter after the base model, with ``parent`` the base.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.generate import DEFAULT_MAX_NEW_TOKENS, abort_unfinished, lora_name, submit, wait_finished
from engine.request import Req
from engine.sampling import SamplingConfig
from engine.schemas import ChatCompletionRequest
from engine.state import BadRequest, EngineState, State, check_api_key, parse

router = APIRouter(dependencies=[Depends(check_api_key)])
_FINISH = {"stop": "stop", "length": "length", "abort": "abort"}


@router.get("/v1/models")
async def models(state: State) -> dict[str, Any]:
    created, base = int(time.time()), state.config.model_name
    data = [{"id": base, "object": "model", "created": created, "owned_by": "openclaw-rl",
             "root": str(state.config.model_path), "max_model_len": state.context_len}]
    if state.lora is not None:
        data += [{"id": name, "object": "model", "created": created, "owned_by": "openclaw-rl", "root": e.source,
                  "parent": base, "max_model_len": state.context_len, "weight_version": e.version}
                 for name, e in state.lora.entries.items()]
    return {"object": "list", "data": data}


def _adapter(body: ChatCompletionRequest, state: EngineState) -> str | None:
    """The adapter a chat request names: ``model`` as ``<base>:<adapter>`` (or an adapter's own name), else
    ``lora_path``. Without LoRA enabled, a ``model`` that is not ``<base>:...`` is ignored, as before."""
    model, base = body.model, state.config.model_name
    from_model = None
    if model and model != base:
        if model.startswith(base + ":"):
            from_model = model[len(base) + 1:]
        elif state.lora is not None and model in state.lora.entries:
            from_model = model
        elif state.lora is not None and ":" in model:
            from_model = model.split(":", 1)[1]
    if from_model is not None:
        return lora_name(from_model, state, "model")
    return lora_name(body.lora_path, state)


def _reqs(body: ChatCompletionRequest, state: EngineState) -> list[Req]:
    try:
        prompt_text = state.tokenizer.chat([m.flat() for m in body.messages], tools=body.tools)
    except Exception as exc:  # noqa: BLE001 - a template error is the caller's input problem
        raise BadRequest(f"could not apply the chat template: {exc}") from None
    prompt = state.tokenizer.encode(prompt_text)
    adapter = _adapter(body, state)
    ctx = state.context_len
    max_new = body.max_completion_tokens or body.max_tokens
    if max_new is None:
        max_new = max(0, min(DEFAULT_MAX_NEW_TOKENS, ctx - len(prompt)))
    if len(prompt) + max_new > ctx or len(prompt) >= ctx:
        raise BadRequest(f"{len(prompt)} prompt tokens + {max_new} completion tokens exceed the context length {ctx}")
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    top = (body.top_logprobs or 0) if body.logprobs else 0
    temperature, top_p, top_k = state.sampling_defaults.resolve(body.temperature, body.top_p, body.top_k)
    reqs = []
    for i in range(body.n):
        seed = None if body.seed is None else body.seed + i
        sampling = SamplingConfig(max_new_tokens=max_new, temperature=temperature, top_p=top_p, top_k=top_k, stop=stop,
                                  stop_token_ids=list(body.stop_token_ids or []), ignore_eos=body.ignore_eos,
                                  skip_special_tokens=body.skip_special_tokens, seed=seed)
        reqs.append(Req(input_ids=list(prompt), sampling=sampling, return_logprob=body.logprobs,
                        top_logprobs_num=top, stream=body.stream, incremental=False, lora_name=adapter))
    return reqs


def _logprobs(out: dict[str, Any], state: EngineState, start: int = 0) -> dict[str, Any] | None:
    meta = out["meta_info"]
    if "output_token_logprobs" not in meta:
        return None
    tops = meta.get("output_top_logprobs") or [[] for _ in meta["output_token_logprobs"]]
    content = []
    for (lp, tid, _), top in list(zip(meta["output_token_logprobs"], tops))[start:]:
        tok = state.tokenizer.token_text(tid)
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()),
                        "top_logprobs": [{"token": state.tokenizer.token_text(t), "logprob": v,
                                          "bytes": list(state.tokenizer.token_text(t).encode())} for v, t, _ in top]})
    return {"content": content}


@router.post("/v1/chat/completions")
async def chat_completions(request: Request, state: State):  # noqa: ANN201 - JSON or SSE
    body = await parse(request, ChatCompletionRequest)
    reqs = _reqs(body, state)
    await submit(reqs, state)
    state.counters["requests"] += len(reqs)
    cid, created, name = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.model or state.config.model_name
    if body.stream:
        usage = bool((body.stream_options or {}).get("include_usage"))
        return StreamingResponse(_stream(reqs, state, cid, created, name, usage), media_type="text/event-stream")
    outs = await wait_finished(reqs, request, state)
    choices = [{"index": i, "message": {"role": "assistant", "content": o["text"]},
                "logprobs": _logprobs(o, state), "finish_reason": _FINISH[o["meta_info"]["finish_reason"]["type"]],
                "matched_stop": o["meta_info"]["finish_reason"].get("matched")} for i, o in enumerate(outs)]
    completion = sum(o["meta_info"]["completion_tokens"] for o in outs)
    prompt = len(reqs[0].input_ids)
    return JSONResponse({
        "id": cid, "object": "chat.completion", "created": created, "model": name, "choices": choices,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        "metadata": _metadata(outs[0])})


def _metadata(out: dict[str, Any]) -> dict[str, Any]:
    meta = out["meta_info"]
    return {"weight_version": meta["weight_version"], **({"lora_name": meta["lora_name"]} if "lora_name" in meta
                                                          else {})}


async def _stream(reqs: list[Req], state: EngineState, cid: str, created: int, name: str,
                  usage: bool) -> AsyncIterator[bytes]:
    def chunk(choices: list[dict[str, Any]], **extra: Any) -> bytes:
        body = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": name, "choices": choices}
        return b"data: " + json.dumps({**body, **extra}).encode() + b"\n\n"

    sent_text = [0] * len(reqs)
    sent_tok = [0] * len(reqs)
    completion, metadata = 0, None
    try:
        yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                      "finish_reason": None} for i in range(len(reqs))])
        for i, r in enumerate(reqs):  # choices stream one after another; each is already running in the batch
            assert r.events is not None
            while True:
                out = await r.events.get()
                fin = out["meta_info"]["finish_reason"]
                delta, lp = out["text"][sent_text[i]:], _logprobs(out, state, sent_tok[i])
                sent_text[i], sent_tok[i] = len(out["text"]), out["meta_info"]["completion_tokens"]
                if delta or fin is not None:
                    yield chunk([{"index": i, "delta": {"content": delta} if delta else {}, "logprobs": lp,
                                  "finish_reason": _FINISH[fin["type"]] if fin else None}],
                                metadata=_metadata(out))
                if fin is not None:
                    completion += out["meta_info"]["completion_tokens"]
                    metadata = _metadata(out)
                    break
        if usage:
            prompt = len(reqs[0].input_ids)
            yield chunk([], usage={"prompt_tokens": prompt, "completion_tokens": completion,
                                   "total_tokens": prompt + completion}, metadata=metadata)
        yield b"data: [DONE]\n\n"
    finally:
        abort_unfinished(reqs, state, "client disconnected")
