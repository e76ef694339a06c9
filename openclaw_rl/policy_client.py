"""The one client for policy engines (the local engine or SGLang), used by the gateway and by Temporal activities.

It speaks only SGLang's native API (``/generate``, ``/update_weights_from_disk``, ``/load_lora_adapter``,
``/unload_lora_adapter``, ``/get_model_info``, ``/health``, ``/tokenize``, ``/abort_request``) and sends only fields
SGLang defines (tests/test_policy_client_contract.py checks this). Timeouts are explicit; there are **no retries**
here: Temporal retries activities, and a hidden retry inside an activity would double the work and blur the retry
policy. Errors are ``PolicyEngineError`` with ``retryable`` telling the activity whether a retry can help (5xx,
connection and timeout errors) or not (4xx).

Log-probs are always requested and kept with the exact token ids, so nothing is re-tokenised downstream.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

import aiohttp


class PolicyEngineError(Exception):
    """An engine call failed: ``status`` is the HTTP status, or 0 when no response came (connect error, timeout)."""

    def __init__(self, status: int, message: str, *, timed_out: bool = False) -> None:
        super().__init__(f"policy engine error {status}: {message}")
        self.status = status
        self.message = message
        self.timed_out = timed_out  # no answer in time (status 0), as opposed to no connection at all

    @property
    def retryable(self) -> bool:
        return self.status == 0 or self.status >= 500 or self.status in (408, 429)


@dataclass
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    sampling_seed: int | None = None  # per-request seed (SGLang's `sampling_seed`)

    def to_sglang(self) -> dict[str, Any]:
        """SGLang ``sampling_params``; unset optional lists are left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class Generation:
    output_ids: list[int]
    output_logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length" | "abort"
    prompt_tokens: int
    completion_tokens: int
    weight_version: str
    matched_stop: int | str | None = None
    cached_tokens: int = 0  # prompt tokens the engine reused from its prefix cache


@dataclass
class GenerationChunk:
    output_ids: list[int]  # new since the previous chunk
    output_logprobs: list[float]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    weight_version: str | None = None  # set on the final chunk
    matched_stop: int | str | None = None
    cached_tokens: int = 0  # set on the final chunk
    extra: dict[str, Any] = field(default_factory=dict)


def _finish(meta: dict[str, Any]) -> tuple[str | None, int | str | None]:
    fr = meta.get("finish_reason")
    if fr is None:
        return None, None
    if isinstance(fr, str):
        return fr, None
    return fr.get("type"), fr.get("matched")


def _logprobs(meta: dict[str, Any], key: str) -> list[Any]:
    return [entry[0] for entry in meta.get(key) or []]


# Idle pooled connections are dropped before the server's keep-alive (uvicorn, hence SGLang: 5 s) runs out, so a
# request is never sent on a connection the server is closing (a POST cannot be retried safely).
IDLE_CONNECTION_S = 3.0


class PolicyClient:
    """HTTP/1.1 keep-alive client (aiohttp: about half the CPU per streamed token of httpx, which matters on the
    gateway's request path). ``timeout_s`` bounds each wait for bytes from the engine; ``connect_timeout_s`` the
    connection. The session is opened on first use, on the running event loop (one per loop)."""

    def __init__(self, base_url: str, timeout_s: float = 120.0, connect_timeout_s: float = 5.0,
                 api_key: str | None = None, max_connections: int = 256) -> None:
        self.base_url = base_url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=timeout_s)
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _http(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            self._session = aiohttp.ClientSession(
                headers=self._headers, timeout=self._timeout, raise_for_status=False,
                connector=aiohttp.TCPConnector(limit=self._max_connections, ttl_dns_cache=300,
                                               keepalive_timeout=IDLE_CONNECTION_S),
                json_serialize=_dumps)
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed and self._loop is asyncio.get_running_loop():
            await self._session.close()
        self._session = None

    async def __aenter__(self) -> "PolicyClient":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- transport --------------------------------------------------------------------------------------------------
    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """The decoded JSON answer (None for an empty body); a PolicyEngineError for any failure."""
        try:
            async with self._http().request(method, self.base_url + path, json=body) as resp:
                raw = await resp.read()
                if resp.status >= 400:
                    raise PolicyEngineError(resp.status, _error_message(raw, resp.reason))
        except aiohttp.ConnectionTimeoutError as exc:
            raise PolicyEngineError(0, f"cannot connect to {self.base_url}{path} in time: {exc!r}") from exc
        except TimeoutError as exc:  # aiohttp's ServerTimeoutError (no bytes within timeout_s) is one too
            raise PolicyEngineError(0, f"timeout calling {path}: {exc!r}", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise PolicyEngineError(0, f"cannot reach {self.base_url}{path}: {exc!r}") from exc
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise PolicyEngineError(502, f"{path} answered with non-JSON: {raw[:200]!r}") from exc

    # -- generation -------------------------------------------------------------------------------------------------
    def _generate_body(self, input_ids: list[int], sampling: SamplingParams, rid: str | None,
                       stream: bool, lora_path: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"input_ids": list(input_ids), "sampling_params": sampling.to_sglang(),
                                "return_logprob": True, "stream": stream}
        if rid is not None:
            body["rid"] = rid
        if lora_path:
            body["lora_path"] = lora_path
        return body

    async def generate(self, input_ids: list[int], sampling: SamplingParams, rid: str | None = None,
                       lora_path: str | None = None) -> Generation:
        """One completion; ``lora_path`` names a LoRA adapter the engine has loaded (None: the base weights)."""
        out = await self._request("POST", "/generate", self._generate_body(input_ids, sampling, rid, False, lora_path))
        if isinstance(out, list):
            out = out[0]
        meta = out["meta_info"]
        reason, matched = _finish(meta)
        output_ids = list(out.get("output_ids") or [])
        return Generation(
            output_ids=output_ids, output_logprobs=_logprobs(meta, "output_token_logprobs"), text=out.get("text", ""),
            finish_reason=reason or "length", prompt_tokens=int(meta.get("prompt_tokens", len(input_ids))),
            completion_tokens=int(meta.get("completion_tokens", len(output_ids))),
            weight_version=str(meta.get("weight_version", "")), matched_stop=matched,
            cached_tokens=int(meta.get("cached_tokens") or 0))

    async def generate_stream(self, input_ids: list[int], sampling: SamplingParams,
                              rid: str | None = None, lora_path: str | None = None) -> AsyncIterator[GenerationChunk]:
        """Chunks with only what is new. Works with SGLang's default cumulative stream and with
        ``--incremental-streaming-output`` (a chunk is cumulative when it carries as many ids as completion_tokens)."""
        body = self._generate_body(input_ids, sampling, rid, True, lora_path)
        seen_ids, seen_text, done = 0, "", False
        try:
            async with self._http().post(self.base_url + "/generate", json=body) as resp:
                if resp.status >= 400:
                    raise PolicyEngineError(resp.status, _error_message(await resp.read(), resp.reason))
                async for line in _lines(resp.content):
                    if done or not line.startswith(b"data:"):
                        continue  # read to the end of the body so the connection goes back to the pool
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        done = True
                        continue
                    out = json.loads(data)
                    if "error" in out:  # SGLang reports request errors found after the 200 inside the stream
                        err = out["error"]
                        code = err.get("code") if isinstance(err, dict) else None
                        message = err.get("message", str(err)) if isinstance(err, dict) else str(err)
                        raise PolicyEngineError(code if isinstance(code, int) else 400, message)
                    meta = out["meta_info"]
                    ids, lps = list(out.get("output_ids") or []), _logprobs(meta, "output_token_logprobs")
                    text = out.get("text") or ""
                    total = int(meta.get("completion_tokens", seen_ids + len(ids)))
                    if len(ids) == total and total >= seen_ids:  # cumulative chunk
                        ids, lps = ids[seen_ids:], lps[seen_ids:] if len(lps) == total else lps
                        delta = text[len(seen_text):] if text.startswith(seen_text) else text
                        seen_text = text
                    else:
                        delta = text
                        seen_text += text
                    seen_ids = total
                    reason, matched = _finish(meta)
                    yield GenerationChunk(output_ids=ids, output_logprobs=lps, text=delta, finished=reason is not None,
                                          finish_reason=reason, matched_stop=matched,
                                          weight_version=meta.get("weight_version") if reason else None,
                                          cached_tokens=int(meta.get("cached_tokens") or 0) if reason else 0)
        except aiohttp.ConnectionTimeoutError as exc:
            raise PolicyEngineError(0, f"cannot connect to {self.base_url} in time: {exc!r}") from exc
        except TimeoutError as exc:
            raise PolicyEngineError(0, f"timeout streaming /generate: {exc!r}", timed_out=True) from exc
        except aiohttp.ClientError as exc:
            raise PolicyEngineError(0, f"stream from {self.base_url} broke: {exc!r}") from exc

    async def score(self, prompt_ids: list[int], response_ids: list[int], temperature: float = 1.0,
                    lora_path: str | None = None) -> list[float]:
        """log p(response_ids[i] | prompt_ids + response_ids[:i]) under the engine's current weights, of the
        distribution at ``temperature`` (log_softmax(logits / temperature); 1.0: the model's own).

        SGLang's ``input_token_logprobs`` starts at ``logprob_start_len`` and its first entry is null (that position's
        predictor is not computed), so the window starts one token early, on the last prompt token, and that entry
        is dropped: exactly ``len(response_ids)`` values come back.
        """
        if not prompt_ids:
            raise ValueError("score needs at least one prompt token")
        if not response_ids:
            return []
        if not temperature > 0:
            raise ValueError(f"score needs a temperature > 0, got {temperature}")
        body = {"input_ids": list(prompt_ids) + list(response_ids),
                "sampling_params": {"max_new_tokens": 0, "temperature": float(temperature)},
                "return_logprob": True, "logprob_start_len": len(prompt_ids) - 1}
        if lora_path:
            body["lora_path"] = lora_path
        out = await self._request("POST", "/generate", body)
        if isinstance(out, list):
            out = out[0]
        values = _logprobs(out["meta_info"], "input_token_logprobs")[1:]
        if len(values) != len(response_ids) or any(v is None for v in values):
            raise PolicyEngineError(500, f"engine returned {len(values)} log-probs for {len(response_ids)} tokens")
        return [float(v) for v in values]

    # -- control ----------------------------------------------------------------------------------------------------
    async def update_weights_from_disk(self, model_path: str, weight_version: str) -> dict[str, Any]:
        body = {"model_path": model_path, "weight_version": weight_version}
        return await self._request("POST", "/update_weights_from_disk", body)

    async def load_lora_adapter(self, lora_name: str, lora_path: str,
                                weight_version: str | None = None) -> dict[str, Any]:
        """Serve the LoRA adapter in ``lora_path`` as ``lora_name`` (what ``/generate``'s ``lora_path`` names).

        ``lora_path`` is a folder on the engine's host or a store URL (``s3://...`` or ``file://...``) that the engine
        downloads itself, so the caller never copies a checkpoint. ``weight_version`` is the adapter's policy version
        (``/get_model_info``'s ``loaded_lora_adapters`` reports it); SGLang has no such field and it is left out when
        None. A refusal comes back as ``{"success": false, ...}`` or a 400."""
        body: dict[str, Any] = {"lora_name": lora_name, "lora_path": lora_path}
        if weight_version is not None:
            body["weight_version"] = weight_version
        return await self._request("POST", "/load_lora_adapter", body)

    async def unload_lora_adapter(self, lora_name: str) -> dict[str, Any]:
        """Stop serving the adapter ``lora_name``; requests naming it fail from then on."""
        return await self._request("POST", "/unload_lora_adapter", {"lora_name": lora_name})

    async def model_info(self) -> dict[str, Any]:
        return await self._request("GET", "/get_model_info")

    async def health(self) -> bool:
        try:
            await self._request("GET", "/health")
        except PolicyEngineError:
            return False
        return True

    async def tokenize(self, text: str) -> list[int]:
        out = await self._request("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})
        return list(out["tokens"])

    async def abort(self, rid: str) -> None:
        await self._request("POST", "/abort_request", {"rid": rid})


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


async def _lines(stream: aiohttp.StreamReader) -> AsyncIterator[bytes]:
    """Lines of a response body, however long (aiohttp's own line reader refuses lines past its buffer size, and a
    cumulative SGLang stream chunk with log-probs can be that long)."""
    pending = b""
    async for data in stream.iter_any():
        pending += data
        if b"\n" not in data:
            continue
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line
    if pending:
        yield pending


def _error_message(raw: bytes, reason: str | None) -> str:
    try:
        body = json.loads(raw)
    except ValueError:
        return raw[:500].decode("utf-8", "replace") or (reason or "")
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if key in body:
                return str(body[key])
    return str(body)[:500]
