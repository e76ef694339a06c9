from __future__ import annotations

from temporalio import activity

from contracts.health import PingInput, PingOutput


class HealthActivities:
    def __init__(self, task_queue: str) -> None:
        self.task_queue = task_queue

    @activity.defn(name="ping")
    async def ping(self, inp: PingInput) -> PingOutput:
        return PingOutput(message=f"pong: {inp.message}", worker_identity=activity.info().workflow_id,
                          task_queue=self.task_queue)
