"""``GET /v1/models``: the policy this key is served by (the shared one, or ``<base>:<adapter>`` for a key with its own
adapter)."""

from __future__ import annotations

import time

from fastapi import APIRouter

from api.deps import AuthKey, GatewayDep
from api.schemas import ErrorResponse, ModelCard, ModelList

router = APIRouter(tags=["models"])
_STARTED = int(time.time())


@router.get("/v1/models", response_model=ModelList, responses={
    401: {"model": ErrorResponse, "description": "missing, wrong or revoked API key"}})
async def list_models(user: AuthKey, gw: GatewayDep) -> ModelList:
    return ModelList(data=[ModelCard(id=gw.model_of(user), created=_STARTED)])
