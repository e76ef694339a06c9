"""``GET /healthz``: can this gateway serve (engine), and where do turns go (Temporal or the spool)?

200 while the engine answers (Temporal down only degrades: turns spool and replay later); 503 when it does not.
``rejected`` counts the requests refused since start by error code (``context_length_exceeded``).
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from api.deps import GatewayDep
from api.schemas import HealthReport

router = APIRouter(tags=["health"])
ENGINE_HEALTH_TIMEOUT_S = 2.0


@router.get("/healthz", response_model=HealthReport)
async def healthz(gw: GatewayDep) -> JSONResponse:
    try:
        ok = await asyncio.wait_for(gw.policy.health(), timeout=ENGINE_HEALTH_TIMEOUT_S)
        engine = {"ok": ok is not False, "url": gw.settings.engine_url}
    except Exception as e:  # noqa: BLE001 - any failure means the engine cannot serve now
        engine = {"ok": False, "url": gw.settings.engine_url, "error": repr(e)[:300]}
    sink = gw.sink.state()
    connected = getattr(gw.sink.submitter, "connected", None)
    temporal = {"address": gw.settings.temporal_address,
                "state": "unknown" if connected is None else ("connected" if connected and not sink["down"]
                                                              else "unreachable")}
    spool = {"pending": sink["pending"], "in_flight": sink["in_flight"], "delivered": sink["delivered"]}
    status = "down" if not engine["ok"] else ("degraded" if sink["down"] or sink["pending"] else "ok")
    report = HealthReport(status=status, engine=engine, temporal=temporal, spool=spool, rejected=dict(gw.rejected))
    return JSONResponse(report.model_dump(), status_code=200 if engine["ok"] else 503)
