"""``POST /v1/chat/completions``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request

from api.chat import Headers, complete, open_stream, prepare
from api.deps import AuthKey, GatewayDep
from api.schemas import ChatCompletion, ChatCompletionRequest, ErrorResponse, TurnType
from api.security import request_header_text

router = APIRouter(tags=["chat"])


def _error(description: str) -> dict:
    return {"model": ErrorResponse, "description": description}


RESPONSES: dict = {
    200: {"description": "A ChatCompletion (application/json), or with `stream: true` server-sent events "
                         "(text/event-stream): `data: <ChatCompletionChunk>` frames, then `data: [DONE]`. "
                         "`X-Session-Id` echoes the session id, percent-encoded (UTF-8) outside printable ASCII.",
          "content": {"text/event-stream": {
              # each event (OpenAPI 3.2's itemSchema; there ``schema`` would be the whole stream): a chunk as JSON,
              # or the closing [DONE]
              "x-chunk-schema": {"$ref": "#/components/schemas/ChatCompletionChunk"},
              "itemSchema": {"type": "object", "required": ["data"], "properties": {"data": {"oneOf": [
                  {"type": "string", "contentMediaType": "application/json",
                   "contentSchema": {"$ref": "#/components/schemas/ChatCompletionChunk"}},
                  {"const": "[DONE]"}]}}}}}},
    400: _error("invalid request (the failing field in `error.param`), or the context length is exceeded"),
    401: _error("missing, wrong or revoked API key"),
    404: _error("`model` names an adapter this key may not use (`GET /v1/models` lists the key's own)"),
    413: _error("request body over the gateway's limit"),
    429: _error("too many requests in flight for this API key; see `Retry-After`"),
    500: _error("unexpected gateway error (a request id, no detail)"),
    502: _error("the policy engine failed (a code and a request id, no detail)"),
    503: _error("the policy engine is unavailable or aborted the generation"),
    504: _error("the policy engine timed out"),
}


@router.post("/v1/chat/completions", response_model=ChatCompletion, responses=RESPONSES)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    user: AuthKey,
    gw: GatewayDep,
    x_session_id: Annotated[str | None, Header(description="the client's session id")] = None,
    x_turn_type: Annotated[TurnType | None, Header(description="main | side (side turns are never trained); "
                                                               "case-insensitive")] = None,
    x_session_done: Annotated[str | None, Header(description="1: this is the session's last turn")] = None,
):  # noqa: ANN201 - a ChatCompletion, or an event stream when body.stream
    headers = Headers(session_id=request_header_text(x_session_id),
                      turn_type=x_turn_type.value if x_turn_type is not None else None,
                      session_done=(x_session_done or "").strip().lower() in ("1", "true", "yes"))
    release = gw.inflight.acquire(user.key_id)  # a 429 over the per-key limit, before anything is done
    try:
        turn = await prepare(gw, body, user, headers)
        if body.stream:
            response = await open_stream(gw, turn, request, on_close=release)
            release = None  # the stream releases the slot when it ends
            return response
        return await complete(gw, turn, request)
    finally:
        if release is not None:
            release()
