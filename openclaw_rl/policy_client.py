"""The one client for policy engines (the local engine or SGLang), used by the gateway and by Temporal activities.

It speaks only SGLang's native API (``/generate``, ``/update_weights_from_disk``, ``/get_model_info``, ``/health``,
``/tokenize``, ``/abort_request``) and sends only fields SGLang defines (tests/test_policy_client_contract.py checks
this). Timeouts are explicit; there are **no retries** here: Temporal retries activities, and a hidden retry inside
an activity would double the work and blur the retry policy. Errors are ``PolicyEngineError`` with ``retryable``
telling the activity whether a retry can help (5xx, connection and timeout errors) or not (4xx).

Log-probs are always requested and kept with the exact token ids, so nothing is re-tokenised downstream.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

import httpx


class PolicyEngineError(Exception):
    """An engine call failed: ``status`` is the HTTP status, or 0 when no response came (connect error, timeout)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"policy engine error {status}: {message}")
        self.status = status
        self.message = message

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


@dataclass
class GenerationChunk:
    output_ids: list[int]  # new since the previous chunk
    output_logprobs: list[float]
    text: str
    finished: bool = False
    finish_reason: str | None = None
    weight_version: str | None = None  # set on the final chunk
    matched_stop: int | str | None = None
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


class PolicyClient:
    def __init__(self, base_url: str, timeout_s: float = 120.0, connect_timeout_s: float = 5.0,
                 api_key: str | None = None, transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, transport=transport,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "PolicyClient":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    # -- transport --------------------------------------------------------------------------------------------------
    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, json=body)
        except httpx.TimeoutException as exc:
            raise PolicyEngineError(0, f"timeout calling {path}: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise PolicyEngineError(0, f"cannot reach {self.base_url}{path}: {exc!r}") from exc
        if resp.status_code >= 400:
            raise PolicyEngineError(resp.status_code, _error_message(resp))
        return resp

    # -- generation -------------------------------------------------------------------------------------------------
    def _generate_body(self, input_ids: list[int], sampling: SamplingParams, rid: str | None,
                       stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"input_ids": list(input_ids), "sampling_params": sampling.to_sglang(),
                                "return_logprob": True, "stream": stream}
        if rid is not None:
            body["rid"] = rid
        return body

    async def generate(self, input_ids: list[int], sampling: SamplingParams, rid: str | None = None) -> Generation:
        out = (await self._request("POST", "/generate", self._generate_body(input_ids, sampling, rid, False))).json()
        if isinstance(out, list):
            out = out[0]
        meta = out["meta_info"]
        reason, matched = _finish(meta)
        output_ids = list(out.get("output_ids") or [])
        return Generation(
            output_ids=output_ids, output_logprobs=_logprobs(meta, "output_token_logprobs"), text=out.get("text", ""),
            finish_reason=reason or "length", prompt_tokens=int(meta.get("prompt_tokens", len(input_ids))),
            completion_tokens=int(meta.get("completion_tokens", len(output_ids))),
            weight_version=str(meta.get("weight_version", "")), matched_stop=matched)

    async def generate_stream(self, input_ids: list[int], sampling: SamplingParams,
                              rid: str | None = None) -> AsyncIterator[GenerationChunk]:
        """Chunks with only what is new. Works with SGLang's default cumulative stream and with
        ``--incremental-streaming-output`` (a chunk is cumulative when it carries as many ids as completion_tokens)."""
        body = self._generate_body(input_ids, sampling, rid, True)
        seen_ids, seen_text, done = 0, "", False
        try:
            async with self._http.stream("POST", "/generate", json=body) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise PolicyEngineError(resp.status_code, _error_message(resp))
                async for line in resp.aiter_lines():
                    if done or not line.startswith("data:"):
                        continue  # read to the end of the body so the connection goes back to the pool
                    data = line[5:].strip()
                    if data == "[DONE]":
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
                                          weight_version=meta.get("weight_version") if reason else None)
        except httpx.TimeoutException as exc:
            raise PolicyEngineError(0, f"timeout streaming /generate: {exc!r}") from exc
        except httpx.TransportError as exc:
            raise PolicyEngineError(0, f"stream from {self.base_url} broke: {exc!r}") from exc

    async def score(self, prompt_ids: list[int], response_ids: list[int]) -> list[float]:
        """log p(response_ids[i] | prompt_ids + response_ids[:i]) under the engine's current weights.

        SGLang's ``input_token_logprobs`` starts at ``logprob_start_len`` and its first entry is null (that position's
        predictor is not computed), so the window starts one token early, on the last prompt token, and that entry
        is dropped: exactly ``len(response_ids)`` values come back.
        """
        if not prompt_ids:
            raise ValueError("score needs at least one prompt token")
        if not response_ids:
            return []
        body = {"input_ids": list(prompt_ids) + list(response_ids),
                "sampling_params": {"max_new_tokens": 0, "temperature": 1.0},
                "return_logprob": True, "logprob_start_len": len(prompt_ids) - 1}
        out = (await self._request("POST", "/generate", body)).json()
        if isinstance(out, list):
            out = out[0]
        values = _logprobs(out["meta_info"], "input_token_logprobs")[1:]
        if len(values) != len(response_ids) or any(v is None for v in values):
            raise PolicyEngineError(500, f"engine returned {len(values)} log-probs for {len(response_ids)} tokens")
        return [float(v) for v in values]

    # -- control ----------------------------------------------------------------------------------------------------
    async def update_weights_from_disk(self, model_path: str, weight_version: str) -> dict[str, Any]:
        body = {"model_path": model_path, "weight_version": weight_version}
        return (await self._request("POST", "/update_weights_from_disk", body)).json()

    async def model_info(self) -> dict[str, Any]:
        return (await self._request("GET", "/get_model_info")).json()

    async def health(self) -> bool:
        try:
            await self._request("GET", "/health")
        except PolicyEngineError:
            return False
        return True

    async def tokenize(self, text: str) -> list[int]:
        out = (await self._request("POST", "/tokenize", {"prompt": text, "add_special_tokens": False})).json()
        return list(out["tokens"])

    async def abort(self, rid: str) -> None:
        await self._request("POST", "/abort_request", {"rid": rid})


def _error_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500] or resp.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        for key in ("message", "detail", "error"):
            if key in body:
                return str(body[key])
    return str(body)[:500]
