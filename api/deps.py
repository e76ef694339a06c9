"""The gateway's shared state (opened once by the lifespan) and the dependencies handlers declare."""

from __future__ import annotations

import hmac
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from api.errors import OpenAIError
from api.render import PromptRenderer
from api.security import InFlight, admin_key
from api.sink import TurnSink
from openclaw_rl.adapters import ServedAdapters, adapter_name
from openclaw_rl.generation_defaults import SamplingDefaults
from openclaw_rl.keys import ApiKey, KeyStore
from openclaw_rl.settings import Settings

ADMIN_KEY_ID = "admin"


@dataclass
class Gateway:
    settings: Settings
    policy: Any  # PolicyClient, or any object with its async generate / generate_stream / abort / health
    renderer: PromptRenderer
    keys: KeyStore
    sink: TurnSink
    model_name: str
    context_length: int
    default_max_tokens: int
    records: Any = None  # RecordWriter (or any object with its append) for the gateway's own events
    sampling_defaults: SamplingDefaults = field(default_factory=SamplingDefaults)  # for what a request leaves out
    rejected: Counter[str] = field(default_factory=Counter)  # refused requests by error code, since start
    inflight: InFlight | None = None  # per-key concurrency limit; None: settings.gateway_max_concurrent_per_key
    served: ServedAdapters | None = None  # the adapters the engine serves; None: asked through ``policy.model_info``

    def __post_init__(self) -> None:
        if self.inflight is None:
            self.inflight = InFlight(self.settings.gateway_max_concurrent_per_key)
        if self.served is None:
            self.served = ServedAdapters(self._engine_info)

    async def _engine_info(self) -> dict[str, Any]:
        info = getattr(self.policy, "model_info", None)
        return await info() if info is not None else {}

    def adapter_of(self, user: ApiKey) -> str:
        """The key's own adapter name, or "" when the key is served by, and trains, the shared policy."""
        if user.key_id == ADMIN_KEY_ID or not (user.adapter or self.settings.adapter_per_user):
            return ""
        return adapter_name(user.key_id)

    def model_of(self, user: ApiKey) -> str:
        """The model name a key sees: the base, or ``<base>:<adapter>`` (SGLang's way of naming an adapter)."""
        adapter = self.adapter_of(user)
        return f"{self.model_name}:{adapter}" if adapter else self.model_name


async def get_gateway(request: Request) -> Gateway:
    return request.app.state.gateway


GatewayDep = Annotated[Gateway, Depends(get_gateway)]


def _presented_key(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        return value.strip() if scheme.lower() == "bearer" and value.strip() else None
    return request.headers.get("x-api-key") or None


presented_key = _presented_key


# Dependencies are async on purpose: FastAPI runs plain functions in a worker thread, a GIL hand-off per request.
async def require_key(request: Request, gw: GatewayDep) -> ApiKey:
    """The caller's API key (``Authorization: Bearer <key>`` or ``X-API-Key``), or a 401 in the OpenAI shape.

    Besides the per-user keys, the operator's admin key (``OPENCLAW_ADMIN_KEY``) is accepted as user ``admin``, when
    one is configured: there is no default admin key.
    """
    key = _presented_key(request)
    if not key:
        raise OpenAIError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
                          type="invalid_request_error", code="missing_api_key",
                          headers={"WWW-Authenticate": "Bearer"})
    found = gw.keys.verify(key)
    if found is None and is_admin_key(gw, key):
        found = ApiKey(key_id=ADMIN_KEY_ID, name=ADMIN_KEY_ID)
    if found is None:
        raise OpenAIError(401, "Incorrect or revoked API key.", type="authentication_error", code="invalid_api_key",
                          headers={"WWW-Authenticate": "Bearer"})
    return found


AuthKey = Annotated[ApiKey, Depends(require_key)]


def is_admin_key(gw: Gateway, key: str) -> bool:
    """Whether ``key`` is the configured admin key (never true when none is configured)."""
    admin = admin_key(gw.settings)
    return admin is not None and hmac.compare_digest(key.encode(), admin.encode())
