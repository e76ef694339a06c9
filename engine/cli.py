"""`openclaw-rl engine ...`: run the local SGLang-compatible policy engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(no_args_is_help=True)


@app.command()
def serve(
    model: Annotated[Path | None, typer.Option("--model", help="HF folder (Qwen3); default: settings.model_path")]
    = None,
    host: Annotated[str | None, typer.Option(help="bind address; default: settings.engine_host")] = None,
    port: Annotated[int | None, typer.Option(help="port; default: settings.engine_port")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="requests decoded together (cache slots)")] = 16,
    context_length: Annotated[int | None, typer.Option("--context-length", help="cap below the model's")] = None,
    weight_version: Annotated[str, typer.Option("--weight-version", help="version of the initial weights")] = "default",
    served_model_name: Annotated[str | None, typer.Option("--served-model-name")] = None,
    api_key: Annotated[str | None, typer.Option("--api-key", envvar="OPENCLAW_ENGINE_API_KEY")] = None,
    threads: Annotated[int | None, typer.Option(help="torch intra-op threads")] = None,
    incremental_streaming_output: Annotated[bool, typer.Option(
        "--incremental-streaming-output", help="stream deltas instead of cumulative chunks (SGLang's flag)")] = False,
    disable_radix_cache: Annotated[bool, typer.Option(
        "--disable-radix-cache", help="compute every prompt in full, keep no prefix cache (SGLang's flag)")] = False,
    sampling_defaults: Annotated[str | None, typer.Option(
        "--sampling-defaults", help="what an OpenAI request leaves out of temperature/top_p/top_k: the model's "
                                    "generation_config.json (model) or 1/1/none (openai); default: settings "
                                    "(SGLang's flag)")] = None,
    enable_lora: Annotated[bool, typer.Option(
        "--enable-lora", envvar="OPENCLAW_ENGINE_ENABLE_LORA",
        help="serve LoRA adapters (/load_lora_adapter, lora_path in /generate; SGLang's flag)")] = False,
    max_loras_per_batch: Annotated[int, typer.Option(
        "--max-loras-per-batch", min=1, help="distinct adapters in the running batch; requests of one more wait")] = 8,
    max_loaded_loras: Annotated[int, typer.Option(
        "--max-loaded-loras", min=1, help="adapters kept in memory; using one more evicts the least recently "
                                          "used one no request uses (read again from its folder when next used)")] = 16,
    lora_paths: Annotated[list[str] | None, typer.Option(
        "--lora-paths", help="an adapter to load at start (repeatable): NAME=PATH, PATH, or SGLang's JSON form; "
                             "PATH may be a store URL; implies --enable-lora")] = None,
    data_dir: Annotated[Path | None, typer.Option(
        "--data-dir", help="where checkpoints and adapters fetched from a store URL are kept; "
                           "default: <runtime_dir>/engine")] = None,
) -> None:
    """Serve a model over SGLang's native HTTP API (subset) with continuous batching and hot weight swaps."""
    import uvicorn

    from engine.server import create_app
    from engine.state import EngineConfig
    from openclaw_rl.generation_defaults import MODES
    from openclaw_rl.logs import log_startup
    from openclaw_rl.settings import get_settings

    s = get_settings()
    if sampling_defaults is not None and sampling_defaults not in MODES:
        raise typer.BadParameter(f"must be one of {', '.join(MODES)}", param_hint="--sampling-defaults")
    log_startup("engine")
    config = EngineConfig(model_path=model or s.model_path, max_batch=max_batch, context_length=context_length,
                          weight_version=weight_version, served_model_name=served_model_name, api_key=api_key,
                          threads=threads, incremental_streaming_output=incremental_streaming_output,
                          prefix_cache=not disable_radix_cache,
                          sampling_defaults=sampling_defaults or s.sampling_defaults, enable_lora=enable_lora,
                          max_loras_per_batch=max_loras_per_batch, max_loaded_loras=max_loaded_loras,
                          lora_paths=list(lora_paths or []), data_dir=data_dir)
    uvicorn.run(create_app(config), host=host or s.engine_host, port=port or s.engine_port, log_level="warning",
                access_log=False)
