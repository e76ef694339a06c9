"""``GET /healthz``: can this gateway serve (engine), and where do turns go (Temporal or the spool)?

200 while the engine answers (Temporal down only degrades: turns spool and replay later); 503 when it does not.
Without credentials the answer is only ``{"status": "ok"}`` or ``{"status": "down"}``, for load balancers. With the
admin key (``OPENCLAW_ADMIN_KEY``) it is the whole report: the engine's URL and state, Temporal's address and state,
the spool, and ``rejected``, the requests refused since start by error code (``context_length_exceeded``). Any other
key gets a 403 (a 401 when it is not a key at all); so does any key while no admin key is configured.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from api.deps import Gateway, GatewayDep, is_admin_key, presented_key
from api.errors import OpenAIError
from api.schemas import ErrorResponse, HealthReport, HealthStatus
from api.security import ADMIN_KEY_HELP, admin_key

router = APIRouter(tags=["health"])
ENGINE_HEALTH_TIMEOUT_S = 2.0
_DETAILS = "/healthz without credentials says only ok or down."


def _check_admin(gw: Gateway, key: str) -> None:
    if admin_key(gw.settings) is None:
        raise OpenAIError(403, f"{ADMIN_KEY_HELP} Health details need it; {_DETAILS}", code="admin_key_not_configured")
    if is_admin_key(gw, key):
        return
    if gw.keys.verify(key) is None:
        raise OpenAIError(401, "Incorrect or revoked API key.", type="authentication_error", code="invalid_api_key",
                          headers={"WWW-Authenticate": "Bearer"})
    raise OpenAIError(403, f"Health details need the admin key (OPENCLAW_ADMIN_KEY); {_DETAILS}",
                      code="admin_key_required")


@router.get("/healthz", response_model=HealthStatus | HealthReport, responses={
    200: {"description": "Serving. Without credentials a HealthStatus; with the admin key a HealthReport."},
    401: {"model": ErrorResponse, "description": "not a valid key"},
    403: {"model": ErrorResponse, "description": "a key that is not the admin key, or no admin key configured"},
    503: {"model": HealthStatus | HealthReport, "description": "the policy engine does not answer"},
})
async def healthz(request: Request, gw: GatewayDep) -> JSONResponse:
    key = presented_key(request)
    if key is not None:
        _check_admin(gw, key)
    try:
        ok = await asyncio.wait_for(gw.policy.health(), timeout=ENGINE_HEALTH_TIMEOUT_S)
        engine = {"ok": ok is not False, "url": gw.settings.engine_url}
    except Exception as e:  # noqa: BLE001 - any failure means the engine cannot serve now
        engine = {"ok": False, "url": gw.settings.engine_url, "error": repr(e)[:300]}
    code = 200 if engine["ok"] else 503
    if key is None:
        return JSONResponse(HealthStatus(status="ok" if engine["ok"] else "down").model_dump(), status_code=code)
    sink = gw.sink.state()
    connected = getattr(gw.sink.submitter, "connected", None)
    temporal = {"address": gw.settings.temporal_address,
                "state": "unknown" if connected is None else ("connected" if connected and not sink["down"]
                                                              else "unreachable")}
    spool = {"pending": sink["pending"], "in_flight": sink["in_flight"], "delivered": sink["delivered"]}
    status = "down" if not engine["ok"] else ("degraded" if sink["down"] or sink["pending"] else "ok")
    report = HealthReport(status=status, engine=engine, temporal=temporal, spool=spool, rejected=dict(gw.rejected))
    return JSONResponse(report.model_dump(), status_code=code)
