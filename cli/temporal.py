"""Temporal client helpers shared by the CLI, gateway and tests."""

from __future__ import annotations

import uuid
from datetime import timedelta

from temporalio.client import Client

from openclaw_rl.settings import Settings


async def connect(s: Settings) -> Client:
    return await Client.connect(s.temporal_address, namespace=s.temporal_namespace)


async def ping_worker(s: Settings, timeout_s: float = 10.0) -> bool:
    """Run PingWorkflow on the orchestrator queue: proves server, worker and activity all answer."""
    from contracts.health import PingInput, PingOutput
    from workflows.health import PingWorkflow

    client = await connect(s)
    out = await client.execute_workflow(
        PingWorkflow.run, PingInput("status"), id=f"ping-{uuid.uuid4().hex[:8]}",
        task_queue=s.task_queue_orchestrator, result_type=PingOutput,
        execution_timeout=timedelta(seconds=timeout_s))
    return out.message == "pong: status"
