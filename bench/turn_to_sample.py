"""Turn to sample: how long after a next state arrives is the previous turn's sample durable?

The whole stack runs as in `openclaw-rl up` (Temporal dev server, local engine, workers, gateway) in a temporary
runtime folder, with the heuristic judge (a rule-based stand-in for an LLM judge, no model calls) and m = 3 votes.
For each of ``n`` sessions: a question through the gateway, then a complaint that carries a correction (the next state).
The clock starts when the gateway has answered the complaint (the moment the next state is in the system) and stops
when turn 0's judgement record and its sample are in the store: votes, hint selection, teacher log-probs from the
engine and the Parquet write all happened.
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

COMPLAINT = "This looks way too much like a chatbot wrote it. Just write it like a normal person, no bold or lists."


def _chat(http: httpx.Client, url: str, key: str, session: str, messages: list[dict]) -> str:
    r = http.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}", "X-Session-Id": session},
                  json={"model": "policy", "messages": messages, "max_tokens": 24, "temperature": 0.7})
    r.raise_for_status()
    return r.json()["choices"][0]["message"]["content"] or ""


def run(n: int = 12, model_path: Path | None = None) -> dict[str, Any]:
    from activities.session import sample_id_for
    from bench.procs import bench_model, free_port
    from openclaw_rl.keys import KeyStore
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Stack, engine_service, gateway_service, temporal_service, worker_service

    model, _ = bench_model(model_path)
    tmp = Path(tempfile.mkdtemp(prefix="bench-t2s-"))
    env = {"OPENCLAW_RUNTIME_DIR": str(tmp), "OPENCLAW_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
           "OPENCLAW_TEMPORAL_UI_PORT": str(free_port()), "OPENCLAW_ENGINE_PORT": str(free_port()),
           "OPENCLAW_GATEWAY_PORT": str(free_port()), "OPENCLAW_MODEL_PATH": str(model),
           "OPENCLAW_JUDGE_BACKEND": "heuristic", "OPENCLAW_LOG_FORMAT": "json"}
    os.environ.update(env)
    s = Settings()
    stack = Stack(s)
    latencies: list[float] = []
    measured: list[Path] = []  # the judgement records of the measured sessions
    try:
        stack.start(temporal_service(s))
        stack.start(engine_service(s, str(model)), timeout_s=300)
        stack.start(worker_service(s))
        stack.start(gateway_service(s), timeout_s=120)
        key = KeyStore.in_runtime_dir(tmp).add("bench")
        key_id = key.split("-")[1]
        url = f"http://{s.gateway_host}:{s.gateway_port}"
        judgements = tmp / "store" / "records" / "judgements"
        with httpx.Client(timeout=120) as http:
            for i in range(n + 1):  # the first session warms every worker up and is not counted
                raw = f"bench-{uuid.uuid4().hex[:8]}"
                history = [{"role": "user", "content": "What is 12 plus 30?"}]
                history.append({"role": "assistant", "content": _chat(http, url, key, raw, history)})
                history.append({"role": "user", "content": COMPLAINT})
                _chat(http, url, key, raw, history)
                t0 = time.perf_counter()
                name = f"judgement-{sample_id_for(f'{key_id}:{raw}', 0)}.jsonl"
                deadline = t0 + 120
                while not (found := list(judgements.glob(f"*/*/{name}"))):
                    if time.perf_counter() > deadline:
                        raise RuntimeError(f"no judgement for session {raw} within 120 s")
                    time.sleep(0.01)
                if i:
                    latencies.append(time.perf_counter() - t0)
                    measured.append(found[0])
        emitted = [json.loads(p.read_text())["emitted"] for p in measured]
    finally:
        stack.stop_all()
    latencies.sort()
    return {"bench": "turn_to_sample", "judge": "heuristic", "votes": s.judge_votes, "sessions": n,
            "turn_to_sample_s_p50": round(statistics.median(latencies), 3),
            "turn_to_sample_s_p90": round(latencies[int(0.9 * (len(latencies) - 1))], 3),
            "samples_emitted": sum(emitted), "model": str(model)}
