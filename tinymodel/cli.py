"""`openclaw-rl model ...`: build, inspect and evaluate the embedded tiny model."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(no_args_is_help=True)

PathArg = Annotated[Optional[Path], typer.Argument(help="model folder (default: the configured model_path)")]


def _resolve(path: Path | None) -> Path:
    from openclaw_rl.settings import get_settings

    return Path(path) if path is not None else Path(get_settings().model_path)


@app.command("build-tiny")
def build_tiny_command(
    out: Annotated[Optional[Path], typer.Option(help="output folder (default: model_path)")] = None,
    preset: Annotated[str, typer.Option(help="default | agents | test")] = "default",
    force: Annotated[bool, typer.Option("--force", help="rebuild even if a matching build exists")] = False,
    stage1: Annotated[Optional[Path], typer.Option(
        help="a finished build of the preset's first stage: train only the second stage on top of it")] = None,
) -> None:
    """Build the tiny Qwen3 model from scratch (seeded, CPU); a matching earlier build is reused at once."""
    from tinymodel.build import provide_tiny, read_stamp

    started = time.monotonic()
    try:
        path, how = provide_tiny(out, preset, force=force, stage1=stage1)
    except (ValueError, FileExistsError) as exc:
        raise typer.BadParameter(str(exc)) from exc
    stamp = read_stamp(path) or {}
    typer.echo(json.dumps({"path": str(path), "preset": stamp.get("preset"), "config_hash": stamp.get("config_hash"),
                           "params": stamp.get("params"), "build_seconds": stamp.get("build_seconds"),
                           "this_time": how, "seconds": round(time.monotonic() - started, 2)}, indent=2))


@app.command()
def info(path: PathArg = None) -> None:
    """Architecture, size, tokenizer and build stamp of a model folder, as JSON."""
    from safetensors import safe_open

    from tinymodel.build import read_stamp

    path = _resolve(path)
    if not (path / "config.json").exists():
        raise typer.BadParameter(f"{path} holds no model (no config.json); try `openclaw-rl model build-tiny`")
    config = json.loads((path / "config.json").read_text())
    params = 0
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        for name in f.keys():
            n = 1
            for d in f.get_slice(name).get_shape():
                n *= d
            params += n
    tok = json.loads((path / "tokenizer_config.json").read_text())
    keys = ["architectures", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings"]
    typer.echo(json.dumps({
        "path": str(path), "params": params, **{k: config.get(k) for k in keys},
        "eos_token": tok.get("eos_token"), "pad_token": tok.get("pad_token"),
        "has_chat_template": bool(tok.get("chat_template")), "stamp": read_stamp(path)}, indent=2))


@app.command("eval")
def eval_command(
    path: PathArg = None,
    n: Annotated[int, typer.Option(help="held-out problems")] = 50,
    seed: Annotated[int, typer.Option()] = 0,
    temperature: Annotated[float, typer.Option()] = 0.8,
    examples: Annotated[bool, typer.Option("--examples", help="include one reply per condition")] = False,
    agent_prompt_chars: Annotated[int, typer.Option(
        "--agent-prompt-chars", help="ask behind an OpenClaw-shaped system prompt of this many characters "
        "(replies from the local engine)")] = 0,
    engine: Annotated[bool, typer.Option("--engine", help="sample with the local engine, not transformers")] = False,
) -> None:
    """Style and accuracy rates on held-out problems (default AI style, hint following, teacher, accuracy) as JSON."""
    import torch

    from tinymodel.evaluate import evaluate

    torch.set_num_threads(1)  # small matmuls: one thread is as fast and does not fight other processes
    result = evaluate(_resolve(path), n=n, seed=seed, temperature=temperature, agent_prompt_chars=agent_prompt_chars,
                      engine=engine)
    if not examples:
        result.pop("examples", None)
    typer.echo(json.dumps(result, indent=2))
