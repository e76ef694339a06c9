"""``POST /v1/chat/completions``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse

from api.chat import Headers, complete, open_stream, prepare
from api.deps import AuthKey, GatewayDep
from api.schemas import ChatCompletion, ChatCompletionRequest

router = APIRouter(tags=["chat"])


@router.post("/v1/chat/completions", response_model=ChatCompletion)
async def chat_completions(
    body: ChatCompletionRequest,
    request: Request,
    user: AuthKey,
    gw: GatewayDep,
    x_session_id: Annotated[str | None, Header(description="the client's session id")] = None,
    x_turn_type: Annotated[str | None, Header(description="main | side (side turns are never trained)")] = None,
    x_session_done: Annotated[str | None, Header(description="1: this is the session's last turn")] = None,
):  # noqa: ANN201 - a ChatCompletion, or an event stream when body.stream
    headers = Headers(session_id=x_session_id, turn_type=x_turn_type,
                      session_done=(x_session_done or "").strip().lower() in ("1", "true", "yes"))
    turn = await prepare(gw, body, user, headers)
    if body.stream:
        return await open_stream(gw, turn, request)
    reply = await complete(gw, turn, request)
    return JSONResponse(reply.model_dump(mode="json"), headers={"X-Session-Id": turn.session_id})
