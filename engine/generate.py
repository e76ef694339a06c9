"""``POST /generate``: SGLang's native generation endpoint (single, batch, n>1, streaming, scoring).

Scoring a given continuation is ``max_new_tokens=0`` with ``return_logprob`` and ``logprob_start_len``: the prompt
log-probs come back in ``meta_info.input_token_logprobs`` with SGLang's convention (first entry's log-prob is null).

``lora_path`` names a loaded LoRA adapter (one name for the batch, or one per prompt, null for the base model), as in
SGLang; ``meta_info.weight_version`` is then the adapter's version and ``meta_info.lora_name`` its name.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse

from engine.lora_registry import NoRoom, UnknownAdapter
from engine.request import Req
from engine.sampling import SamplingConfig
from engine.schemas import GenerateReqInput, SamplingParamsInput
from engine.state import BadRequest, EngineState, State, Unavailable, check_api_key, parse

router = APIRouter(dependencies=[Depends(check_api_key)])
DEFAULT_MAX_NEW_TOKENS = 128


@router.api_route("/generate", methods=["POST", "PUT"])
async def generate(request: Request, state: State):  # noqa: ANN201 - JSON or SSE
    body = await parse(request, GenerateReqInput)
    reqs, single = build_reqs(body, state)
    await submit(reqs, state)
    state.counters["requests"] += len(reqs)
    if body.stream:
        return StreamingResponse(_sse(reqs, state, batch=not single), media_type="text/event-stream")
    outs = await wait_finished(reqs, request, state)
    return JSONResponse(outs[0] if single else outs)


def _per_item(value: Any, batch: int, name: str) -> list[Any]:
    if isinstance(value, list):
        if len(value) != batch:
            raise BadRequest(f"{name} has {len(value)} entries for a batch of {batch}")
        return value
    return [value] * batch


def lora_name(name: str | None, state: EngineState, field: str = "lora_path") -> str | None:
    """A requested adapter name, checked: registered, and LoRA enabled at all (else a 400 naming ``field``)."""
    if name is None:
        return None
    if state.lora is None:
        raise BadRequest(f"{field}: LoRA is not enabled on this engine (start it with --enable-lora)")
    if not name:
        raise BadRequest(f"{field}: an adapter name must not be empty (null serves the base model)")
    try:
        state.lora.check(name)
    except UnknownAdapter as exc:
        raise BadRequest(f"{field}: {exc}") from None
    return name


async def submit(reqs: list[Req], state: EngineState) -> None:
    """Give each request the adapter it names (reading an evicted one back into memory) and queue them all."""
    names = [r.lora_name for r in reqs]
    if state.lora is None or not any(names):
        for r in reqs:
            state.scheduler.submit(r)
        return
    try:
        async with state.lora.use(names) as adapters:
            for r, adapter in zip(reqs, adapters):
                r.adapter = adapter
                state.scheduler.submit(r)
    except NoRoom as exc:
        raise Unavailable(str(exc)) from None
    except ValueError as exc:  # unloaded meanwhile (UnknownAdapter), or its folder could not be read again
        raise BadRequest(f"lora_path: {exc}") from None


def _prompts(body: GenerateReqInput, state: EngineState) -> tuple[list[list[int]], bool]:
    if (body.text is None) == (body.input_ids is None):
        raise BadRequest("provide exactly one of 'text' or 'input_ids'")
    if body.text is not None:
        texts = [body.text] if isinstance(body.text, str) else body.text
        prompts = [state.tokenizer.encode(t, add_special_tokens=True) for t in texts]
        single = isinstance(body.text, str)
    else:
        ids = body.input_ids or []
        if not ids:
            raise BadRequest("input_ids is empty: a prompt has no tokens")
        single = isinstance(ids[0], int)
        prompts = [ids] if single else ids  # type: ignore[list-item]
    if not prompts:
        raise BadRequest("the batch is empty")
    for p in prompts:
        if not p:
            raise BadRequest("a prompt has no tokens")
        bad = [t for t in p if not 0 <= t < state.vocab_size]
        if bad:
            raise BadRequest(f"token id {bad[0]} is out of vocabulary (size {state.vocab_size})")
    return prompts, single  # type: ignore[return-value]


def _sampling(p: SamplingParamsInput | None, prompt_len: int, state: EngineState) -> SamplingConfig:
    p = p or SamplingParamsInput()
    max_new = DEFAULT_MAX_NEW_TOKENS if p.max_new_tokens is None else p.max_new_tokens
    ctx = state.context_len
    if prompt_len >= ctx:
        raise BadRequest(f"the input ({prompt_len} tokens) is longer than the model's context length ({ctx} tokens)")
    if prompt_len + max_new > ctx:
        raise BadRequest(f"requested token count exceeds the model's context length of {ctx} tokens: "
                         f"{prompt_len} prompt tokens + max_new_tokens {max_new}")
    bad = [t for t in p.stop_token_ids or [] if not 0 <= t < state.vocab_size]
    if bad:
        raise BadRequest(f"stop_token_ids: {bad[0]} is out of vocabulary")
    return SamplingConfig(
        max_new_tokens=max_new, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k, min_p=p.min_p,
        stop=p.stop_list, stop_token_ids=list(p.stop_token_ids or []), ignore_eos=p.ignore_eos,
        skip_special_tokens=p.skip_special_tokens, no_stop_trim=p.no_stop_trim, seed=p.sampling_seed)


def build_reqs(body: GenerateReqInput, state: EngineState) -> tuple[list[Req], bool]:
    """Validate and expand a request into one ``Req`` per (prompt, sample), ordered like SGLang
    (all prompts for sample 0, then all prompts for sample 1, ...)."""
    prompts, single = _prompts(body, state)
    batch = len(prompts)
    params = _per_item(body.sampling_params, batch, "sampling_params")
    ns = {(p.n if p else 1) for p in params}
    if len(ns) != 1:
        raise BadRequest("sampling_params.n must be the same for every prompt of a batch")
    n = ns.pop()
    want_lp = _per_item(body.return_logprob, batch, "return_logprob")
    starts = _per_item(body.logprob_start_len, batch, "logprob_start_len")
    tops = _per_item(body.top_logprobs_num, batch, "top_logprobs_num")
    loras = [lora_name(name, state) for name in _per_item(body.lora_path, batch, "lora_path")]
    rids = _rids(body.rid, batch, n, single)
    reqs = []
    for k in range(n):
        for i, prompt in enumerate(prompts):
            start = -1 if starts[i] is None else starts[i]
            if not -1 <= start < len(prompt):
                raise BadRequest(f"logprob_start_len {start} must be -1 or within the prompt (length {len(prompt)})")
            top = tops[i] or 0
            if not 0 <= top <= state.vocab_size:
                raise BadRequest(f"top_logprobs_num {top} must be between 0 and the vocabulary size")
            reqs.append(Req(
                input_ids=list(prompt), sampling=_sampling(params[i], len(prompt), state), rid=rids[k * batch + i],
                return_logprob=bool(want_lp[i]), logprob_start_len=start, top_logprobs_num=top,
                return_text_in_logprobs=body.return_text_in_logprobs, stream=body.stream,
                incremental=state.config.incremental_streaming_output, lora_name=loras[i]))
    return reqs, single and n == 1


def _rids(rid: str | list[str] | None, batch: int, n: int, single: bool) -> list[str]:
    total = batch * n
    if rid is None:
        return [uuid.uuid4().hex for _ in range(total)]
    if isinstance(rid, str):
        return [rid] if single and n == 1 else [f"{rid}_{i}" for i in range(total)]
    if len(rid) != batch:
        raise BadRequest(f"rid has {len(rid)} entries for a batch of {batch}")
    return list(rid) if n == 1 else [f"{rid[i % batch]}_{i // batch}" for i in range(total)]


async def _until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _final(r: Req) -> dict[str, Any]:
    assert r.events is not None
    while True:
        out = await r.events.get()
        if out["meta_info"]["finish_reason"] is not None:
            return out


async def wait_finished(reqs: list[Req], request: Request, state: EngineState) -> list[dict[str, Any]]:
    """Final outputs of ``reqs``; if the client goes away first, abort them so their slots free up."""
    results = asyncio.gather(*(_final(r) for r in reqs))
    gone = asyncio.create_task(_until_disconnect(request))
    try:
        await asyncio.wait({results, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not results.done():
            abort_unfinished(reqs, state, "client disconnected")
            results.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await results
    if results.cancelled():
        raise ClientGone()
    return results.result()


class ClientGone(Exception):
    """The client disconnected before its answer was ready (nobody reads the response)."""


def abort_unfinished(reqs: list[Req], state: EngineState, message: str) -> None:
    """Abort these very requests (not others that happen to share a rid)."""
    for r in reqs:
        if not r.finished and r.abort_message is None:
            r.abort_message = message
            state.counters["aborted_requests"] += 1
    state.scheduler.wake()


async def _sse(reqs: list[Req], state: EngineState, batch: bool) -> AsyncIterator[bytes]:
    merged: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()

    async def pump(i: int, r: Req) -> None:
        assert r.events is not None
        while True:
            out = await r.events.get()
            await merged.put((i, out))
            if out["meta_info"]["finish_reason"] is not None:
                return

    pumps = [asyncio.create_task(pump(i, r)) for i, r in enumerate(reqs)]
    open_ = len(reqs)
    try:
        while open_:
            i, out = await merged.get()
            if batch:
                out["index"] = i
            open_ -= out["meta_info"]["finish_reason"] is not None
            yield b"data: " + json.dumps(out).encode() + b"\n\n"
        yield b"data: [DONE]\n\n"
    finally:
        abort_unfinished(reqs, state, "client disconnected")
        for p in pumps:
            p.cancel()
