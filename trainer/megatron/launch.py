"""One Megatron train step as a ``torchrun`` job, for a caller that is not itself a rank (the trainer worker).

``MegatronLaunch(nproc, tp).train_step(...)`` writes the samples as JSON lines, runs ``trainer.megatron.run_step``
(``nproc`` ranks, tensor-parallel size ``tp``, data-parallel size ``nproc / tp``) from the previous checkpoint or the
base model, and returns the step's statistics; the checkpoint (HF folder, optimizer shards, ``trainer_state.json``
last) is in ``save_dir`` when it returns. Each step is a fresh job: nothing lives between steps but the checkpoint, so
a crashed job costs that step only, and its retry starts from the same checkpoint. A failed job raises
``MegatronStepError`` with the end of its output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from trainer.megatron import refuse_adapter
from trainer.megatron.run_step import JsonSample

_REPO = Path(__file__).resolve().parents[2]


class MegatronStepError(RuntimeError):
    """The torchrun job of a train step failed; the message ends with its output."""


@dataclass
class MegatronLaunch:
    nproc: int = 1  # ranks (processes) of the job
    tp: int = 1  # tensor-parallel size; nproc / tp data-parallel replicas

    def __post_init__(self) -> None:
        if self.nproc < 1 or self.tp < 1 or self.nproc % self.tp:
            raise ValueError(f"megatron nproc={self.nproc} must be a positive multiple of tp={self.tp}")

    def command(self, args: list[str]) -> list[str]:
        if self.nproc == 1:
            return [sys.executable, "-m", "trainer.megatron.run_step", *args]
        torchrun = Path(sys.executable).parent / "torchrun"
        return [str(torchrun), "--standalone", f"--nproc_per_node={self.nproc}", "-m", "trainer.megatron.run_step",
                *args]

    def train_step(self, model_path: str | Path, samples: list[Any], config: Any, save_dir: str | Path, *,
                   resume: str | Path = "", start_step: int = 0, policy_version: int | None = None,
                   extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Train one step on ``samples`` (``Sample``-like objects) with ``config`` (a ``TrainConfig``); the
        checkpoint goes to ``save_dir``. Returns the step's statistics. An adapter run is refused (ValueError)
        before any job starts."""
        refuse_adapter(config)
        with tempfile.TemporaryDirectory(prefix="megatron-step-") as tmp:
            work = Path(tmp)
            lines = [json.dumps({f.name: getattr(s, f.name, None) for f in fields(JsonSample)
                                 if getattr(s, f.name, None) is not None}) for s in samples]
            (work / "samples.jsonl").write_text("\n".join(lines) + "\n")
            args = ["--model", str(model_path), "--samples", str(work / "samples.jsonl"), "--out", str(work / "out"),
                    "--tp", str(self.tp), "--config", json.dumps(asdict(config)), "--save-dir", str(save_dir),
                    "--extra", json.dumps(extra or {})]
            args += (["--resume", str(resume)] if resume else []) + ["--start-step", str(start_step)]
            if policy_version is not None:
                args += ["--policy-version", str(policy_version)]
            threads = max(1, (os.cpu_count() or 1) // self.nproc)  # OMP threads per rank: the cores shared out
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONWARNINGS": "ignore",
                   "PYTHONPATH": os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH", "")) if p)}
            cmd = self.command(args)
            proc = subprocess.run(cmd, cwd=_REPO, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise MegatronStepError(f"megatron train step failed (exit {proc.returncode}): {' '.join(cmd)}\n"
                                        f"{(proc.stdout + proc.stderr)[-3000:]}")
            stats = json.loads((work / "out" / "stats.json").read_text())
        return stats[-1] if stats else {}
