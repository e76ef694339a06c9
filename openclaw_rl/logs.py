"""structlog, configured once per process.

Console renderer on a terminal, JSON lines otherwise. A processor merges the current Temporal workflow / activity ids
into every event, so a log line from inside an activity can be found from the Temporal UI and back.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_configured = False


def _temporal_context(_: Any, __: str, event: dict[str, Any]) -> dict[str, Any]:
    # Imported lazily so processes without temporalio loaded pay nothing.
    try:
        from temporalio import activity, workflow
    except ImportError:  # pragma: no cover
        return event
    try:
        if activity.in_activity():
            info = activity.info()
            event.setdefault("activity_id", info.activity_id)
            event.setdefault("activity_type", info.activity_type)
            event.setdefault("workflow_id", info.workflow_id)
            event.setdefault("workflow_run_id", info.workflow_run_id)
            event.setdefault("attempt", info.attempt)
        elif workflow.in_workflow():
            winfo = workflow.info()
            event.setdefault("workflow_id", winfo.workflow_id)
            event.setdefault("workflow_run_id", winfo.run_id)
            event.setdefault("workflow_type", winfo.workflow_type)
    except Exception:  # noqa: BLE001 - logging must never raise
        pass
    return event


def configure_logging(level: str = "INFO", fmt: str = "auto", process: str | None = None) -> None:
    """Configure structlog and stdlib logging for this process (idempotent)."""
    global _configured
    if _configured:
        return
    use_json = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _temporal_context,
    ]
    renderer: Any = structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(foreign_pre_chain=shared, processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer])
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("httpx", "httpcore", "uvicorn.access", "botocore", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    if process:
        structlog.contextvars.bind_contextvars(process=process)
    _forward_temporal_core_logs()
    _configured = True


def _forward_temporal_core_logs() -> None:
    """Temporal's core SDK (Rust) writes its own warnings ("Workflow task duration exceeded ...") straight to the
    console, stdout included, where a command's JSON goes. Route them through Python logging instead (stderr, this
    format, logger ``temporal_sdk_core``), by giving the process a default Temporal runtime that forwards them. A
    process whose default runtime already exists keeps it."""
    try:
        from temporalio.runtime import LogForwardingConfig, LoggingConfig, Runtime, TelemetryConfig, TelemetryFilter
    except ImportError:  # pragma: no cover - temporalio is a base dependency
        return
    forwarding = LoggingConfig(filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
                               forwarding=LogForwardingConfig(logger=logging.getLogger("temporal_sdk_core")))
    try:
        Runtime.set_default(Runtime(telemetry=TelemetryConfig(logging=forwarding)), error_if_already_set=True)
    except RuntimeError:  # a client or worker of this process made the default runtime already
        pass


def get_logger(name: str | None = None) -> Any:
    return structlog.get_logger(name)


def log_startup(process: str) -> None:
    """Configure logging from settings and log the resolved settings (secrets masked)."""
    from openclaw_rl.settings import get_settings

    s = get_settings()
    configure_logging(s.log_level, s.log_format, process=process)
    get_logger(process).info("settings resolved", **s.redacted())
