"""A round trip through Temporal and a worker: `openclaw-rl status` uses it to prove the worker answers."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities.health import HealthActivities
    from contracts.health import PingInput, PingOutput


@workflow.defn
class PingWorkflow:
    @workflow.run
    async def run(self, inp: PingInput) -> PingOutput:
        return await workflow.execute_activity_method(
            HealthActivities.ping,
            inp,
            start_to_close_timeout=timedelta(seconds=10),
            retry_policy=RetryPolicy(maximum_attempts=3),
        )
