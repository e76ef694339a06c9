"""Health check: PingWorkflow's input and output.

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PingInput:
    message: str = "ping"


@dataclass
class PingOutput:
    message: str = ""
    worker_identity: str = ""
    task_queue: str = ""


