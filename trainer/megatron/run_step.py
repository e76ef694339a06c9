"""Run Megatron backend train steps on samples from a JSON-lines file; one process per rank under torchrun.

    torchrun --standalone --nproc_per_node=2 -m trainer.megatron.run_step \\
        --model /path/to/hf-qwen3 --samples batch.jsonl --tp 2 --steps 1 --out /tmp/run

Each line of ``--samples`` is one sample with the fields ``trainer.batch.collate`` reads: ``prompt_ids``,
``response_ids``, ``rollout_logprobs``, and optionally ``teacher_logprobs``, ``loss_mask``, ``reward``, ``method``,
``advantages``. ``--config`` is a JSON object of ``TrainConfig`` fields. Data parallelism is world size / ``--tp``.

Rank 0 writes into ``--out``: ``stats.json`` (one dict per step), ``logits.pt`` with ``--dump-logits`` (the
full-vocabulary logits of the batch rows before training, for checks against Hugging Face), and checkpoint folders
(an HF folder plus optimizer shards): ``checkpoint/`` after the steps with ``--save``, ``initial/`` before them with
``--save-initial``.

The trainer worker (``OPENCLAW_TRAINER_BACKEND=megatron``) runs one step a process through
``trainer.megatron.launch``: ``--resume`` the previous step's checkpoint (weights, optimizer shards, step counter) or,
at the first step, the base model; ``--start-step`` sets the step counter (after a rollback a step resumes an older
checkpoint); ``--policy-version`` and ``--extra`` (JSON) go into the checkpoint's ``trainer_state.json``, written to
``--save-dir``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass
class JsonSample:
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_logprobs: list[float]
    teacher_logprobs: list[float] | None = None
    loss_mask: list[int] | None = None
    reward: float = 0.0
    method: str = "combined"
    advantages: list[float] | None = None
    sample_id: str = ""
    temperature: float | None = None


def read_samples(path: str | Path) -> list[JsonSample]:
    return [JsonSample(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="Hugging Face Qwen3 folder")
    parser.add_argument("--samples", required=True, help="JSON lines, one sample a line")
    parser.add_argument("--out", required=True, help="folder for rank 0's outputs")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel size")
    parser.add_argument("--steps", type=int, default=1, help="train steps on the same samples (0: none)")
    parser.add_argument("--config", default="{}", help="JSON object of TrainConfig fields")
    parser.add_argument("--dump-logits", action="store_true", help="write logits.pt before training")
    parser.add_argument("--save", action="store_true", help="write checkpoint/ after the steps")
    parser.add_argument("--save-initial", action="store_true",
                        help="write initial/ before any step (the weights after HF -> Megatron -> HF)")
    parser.add_argument("--resume", default="", help="checkpoint folder to continue from (weights, optimizer, step)")
    parser.add_argument("--start-step", type=int, default=None,
                        help="the step counter before training (default: 0, or the --resume checkpoint's)")
    parser.add_argument("--policy-version", type=int, default=None, help="policy version recorded in the checkpoint")
    parser.add_argument("--extra", default="{}", help="JSON object added to the checkpoint's trainer_state.json")
    parser.add_argument("--save-dir", default="", help="write the checkpoint after the steps here")
    args = parser.parse_args(argv)

    from trainer.batch import collate
    from trainer.megatron import parallel
    from trainer.megatron.backend import MegatronBackend
    from trainer.torch_backend import TrainConfig

    backend = MegatronBackend(args.model, TrainConfig(**json.loads(args.config)), tp=args.tp)
    if args.resume:
        backend.load_checkpoint(args.resume)
    if args.start_step is not None or not args.resume:
        backend.step = args.start_step or 0  # after a rollback a step resumes an older checkpoint
    samples = read_samples(args.samples)
    out = Path(args.out)
    rank0 = torch.distributed.get_rank() == 0
    if rank0:
        out.mkdir(parents=True, exist_ok=True)
    if args.dump_logits:
        batch = collate(samples, backend.pad_id)
        logits = backend.full_logits(batch.input_ids)
        if rank0:
            torch.save({"input_ids": batch.input_ids, "attention_mask": batch.attention_mask, "logits": logits},
                       out / "logits.pt")
    if args.save_initial:
        backend.save_checkpoint(out / "initial")
    stats = [backend.train_step(samples) for _ in range(args.steps)]
    if rank0:
        (out / "stats.json").write_text(json.dumps(stats, indent=2))
    if args.policy_version is not None:
        backend.policy_version = args.policy_version
    extra = json.loads(args.extra)
    if args.save:
        backend.save_checkpoint(out / "checkpoint", extra=extra)
    if args.save_dir:
        backend.save_checkpoint(args.save_dir, extra={**extra, "stats": stats[-1] if stats else {}})
    parallel.shutdown()


if __name__ == "__main__":
    main()
