"""Every workflow / activity / signal / update / query input and output, as stdlib dataclasses.

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PingInput:
    message: str = "ping"


@dataclass
class PingOutput:
    message: str = ""
    worker_identity: str = ""
    task_queue: str = ""
