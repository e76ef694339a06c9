"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` for every non-2xx answer.

Validation errors are 400 (not FastAPI's 422) with the failing field in ``param``; engine failures map to 502/503/504;
anything unexpected is a 500 in the same shape, never a bare one. Engine failures and unexpected errors say only what
happened, with a code and the request id (also in ``X-Request-Id``); their detail goes to the log under that id.
"""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from openclaw_rl.logs import get_logger

log = get_logger("gateway")

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 405: "invalid_request_error", 413: "invalid_request_error",
          429: "rate_limit_error"}


class OpenAIError(HTTPException):
    """An HTTPException that renders in the OpenAI error shape."""

    def __init__(self, status: int, message: str, *, type: str | None = None, param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=message, headers=headers)
        self.type = type or _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(str(self.detail), self.type, self.param, self.code)


class ContextLengthExceeded(OpenAIError):
    """The prompt (plus the completion asked for) does not fit the model's context: OpenAI's 400
    ``context_length_exceeded``, with the numbers kept for the record."""

    def __init__(self, limit: int, prompt_tokens: int, max_tokens: int | None) -> None:
        asked = f" and {max_tokens} in the completion" if max_tokens else ""
        super().__init__(400, f"This model's maximum context length is {limit} tokens. However, your request has "
                              f"{prompt_tokens} tokens in the messages{asked}. Shorten the messages or the completion.",
                         param="messages", code="context_length_exceeded")
        self.limit, self.prompt_tokens, self.max_tokens = limit, prompt_tokens, max_tokens


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


_ENGINE_MESSAGES = {
    "engine_timeout": "The policy engine did not answer in time; retry the request.",
    "engine_unavailable": "The policy engine is unavailable right now; retry the request.",
    "engine_rejected": "The policy engine rejected the request.",
    "engine_error": "The policy engine failed to answer.",
}


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex}"


def _classify_engine_error(exc: BaseException) -> tuple[int, str]:
    from openclaw_rl.policy_client import PolicyEngineError

    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return 504, "engine_timeout"
    if isinstance(exc, httpx.TransportError | ConnectionError):
        return 503, "engine_unavailable"
    if isinstance(exc, PolicyEngineError):
        status = int(getattr(exc, "status", 0) or 0)
        if status in (408, 504) or (status == 0 and exc.timed_out):
            return 504, "engine_timeout"
        if status in (0, 429, 503):
            return 503, "engine_unavailable"
        if status == 400:
            return 400, "engine_rejected"
    return 502, "engine_error"


def engine_error(exc: BaseException, request_id: str | None = None) -> OpenAIError:
    """Map a policy-engine failure to 502 (bad answer), 503 (unreachable / busy), 504 (timed out) or 400 (refused).

    The client gets a fixed message, the code and the request id; the exception's own text (engine URL, engine
    message) is logged under that id and never sent."""
    status, code = _classify_engine_error(exc)
    rid = request_id or new_request_id()
    log.warning("policy engine error", request_id=rid, code=code, status=status, error=repr(exc)[:2000])
    return OpenAIError(status, f"{_ENGINE_MESSAGES[code]} (request id {rid})",
                       type="invalid_request_error" if status == 400 else "server_error", code=code,
                       headers={"X-Request-Id": rid})


_MESSAGE_ROLES = {"system", "developer", "user", "assistant", "tool"}  # union tags in a message's error location


def _loc_param(loc: tuple[Any, ...]) -> str:
    if loc and loc[0] == "header" and len(loc) > 1:  # FastAPI's alias: x-turn-type -> X-Turn-Type
        return "-".join(w.capitalize() for w in str(loc[1]).split("-"))
    parts: list[str] = []
    for i, p in enumerate(loc):
        if p == "body" and i == 0:
            continue
        if p in _MESSAGE_ROLES and i > 0 and isinstance(loc[i - 1], int):
            continue  # the discriminated message union puts the role in the location: messages.0.user.content
        parts.append(str(p))
    return ".".join(parts)


def _role_tag(loc: tuple[Any, ...]) -> str | None:
    for i, p in enumerate(loc):
        if p in _MESSAGE_ROLES and i > 0 and isinstance(loc[i - 1], int):
            return str(p)
    return None


def _error_param(err: dict[str, Any]) -> str:
    ctx = err.get("ctx") or {}
    if isinstance(ctx.get("param"), str):  # our own errors name the field they found (an unpaired surrogate)
        return ctx["param"]
    param = _loc_param(tuple(err.get("loc", ())))
    if err.get("type") in ("union_tag_invalid", "union_tag_not_found") and ctx.get("discriminator"):
        param = ".".join(p for p in (param, str(ctx["discriminator"]).strip("'")) if p)
    return param


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """One readable message (and the first failing field) from pydantic / FastAPI validation errors."""
    if errors and errors[0].get("type") == "json_invalid":
        detail = (errors[0].get("ctx") or {}).get("error", "")
        return f"Malformed JSON body: {detail}".rstrip(": "), None
    lines = []
    for err in errors[:5]:
        loc = tuple(err.get("loc", ()))
        param = _error_param(err)
        msg = err.get("msg", "invalid value")
        if err.get("type") == "missing" and not param:
            msg = "a JSON object body is required"
        elif err.get("type") == "missing" and _role_tag(loc) and loc:
            msg = f"a {_role_tag(loc)!r} message needs {str(loc[-1])!r}"
        lines.append(f"{param}: {msg}" if param else msg)
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    first = _error_param(errors[0]) if errors else None
    return "Invalid request: " + "; ".join(lines) + more, first or None


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(OpenAIError)
    async def _openai_error(_: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = OpenAIError(exc.status_code, str(exc.detail))
        return JSONResponse(err.body(), status_code=exc.status_code, headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(list(exc.errors()))
        return JSONResponse(error_body(message, "invalid_request_error", param), status_code=400)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        rid = new_request_id()
        log.exception("unhandled gateway error", path=request.url.path, request_id=rid)
        return JSONResponse(error_body(f"The gateway failed to handle the request (request id {rid}).",
                                       "server_error", None, "internal_error"),
                            status_code=500, headers={"X-Request-Id": rid})
