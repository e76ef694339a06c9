"""OpenAI-style errors: ``{"error": {"message", "type", "param", "code"}}`` for every non-2xx answer.

Validation errors are 400 (not FastAPI's 422) with the failing field in ``param``; engine failures map to 502/503/504;
anything unexpected is a 500 in the same shape, never a bare one.
"""

from __future__ import annotations

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


def engine_error(exc: BaseException) -> OpenAIError:
    """Map a policy-engine failure to 502 (bad answer), 503 (unreachable / busy) or 504 (timed out)."""
    from openclaw_rl.policy_client import PolicyEngineError

    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return OpenAIError(504, f"policy engine timed out: {exc!r}", type="server_error", code="engine_timeout")
    if isinstance(exc, httpx.TransportError | ConnectionError):
        return OpenAIError(503, f"policy engine unreachable: {exc!r}", type="server_error", code="engine_unavailable")
    if isinstance(exc, PolicyEngineError):
        status = int(getattr(exc, "status", 0) or 0)
        message = f"policy engine error: {getattr(exc, 'message', str(exc))}"
        if status in (408, 504) or (status == 0 and exc.timed_out):
            return OpenAIError(504, message, type="server_error", code="engine_timeout")
        if status in (0, 429, 503):
            return OpenAIError(503, message, type="server_error", code="engine_unavailable")
        if status == 400:
            return OpenAIError(400, message, code="engine_rejected")
        return OpenAIError(502, message, type="server_error", code="engine_error")
    return OpenAIError(502, f"policy engine error: {exc!r}", type="server_error", code="engine_error")


def _loc_param(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts)


def validation_message(errors: list[dict[str, Any]]) -> tuple[str, str | None]:
    """One readable message (and the first failing field) from pydantic / FastAPI validation errors."""
    if errors and errors[0].get("type") == "json_invalid":
        detail = (errors[0].get("ctx") or {}).get("error", "")
        return f"Malformed JSON body: {detail}".rstrip(": "), None
    lines = []
    for err in errors[:5]:
        param = _loc_param(tuple(err.get("loc", ())))
        msg = err.get("msg", "invalid value")
        if err.get("type") == "missing" and not param:
            msg = "a JSON object body is required"
        lines.append(f"{param}: {msg}" if param else msg)
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    first = _loc_param(tuple(errors[0].get("loc", ()))) if errors else None
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
        log.exception("unhandled gateway error", path=request.url.path)
        return JSONResponse(error_body(f"internal error: {type(exc).__name__}", "server_error", None,
                                       "internal_error"), status_code=500)
