"""``GET /v1/models``: the one policy this gateway serves."""

from __future__ import annotations

import time

from fastapi import APIRouter

from api.deps import AuthKey, GatewayDep
from api.schemas import ErrorResponse, ModelCard, ModelList

router = APIRouter(tags=["models"])
_STARTED = int(time.time())


@router.get("/v1/models", response_model=ModelList, responses={
    401: {"model": ErrorResponse, "description": "missing, wrong or revoked API key"}})
async def list_models(_: AuthKey, gw: GatewayDep) -> ModelList:
    return ModelList(data=[ModelCard(id=gw.model_name, created=_STARTED)])
