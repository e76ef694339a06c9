"""Kill the judge worker in the middle of judging and restart it: nothing is lost and nothing is trained twice.

The judge worker runs as its own process (`python -m workers.main --queues judge`) and is killed with SIGKILL while
votes are in flight (the heuristic judge is given a simulated latency so judging takes a while). After a restart, every
main-line turn must end with exactly one judgement record, emitted samples must be unique by id, and `openclaw-rl sql`
must show no duplicate sample ids.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from contracts.session import SessionConfig, SessionInput, SessionStatus, session_workflow_id
from openclaw_rl.policy_client import PolicyClient
from openclaw_rl.store import ObjectStore
from tests.workflows.test_session import COMPLAINT, PRAISE, serve_turn
from workflows.session import SessionWorkflow

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def start_judge_worker(env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "workers.main", "--queues", "judge"], env=env,
                            stdout=open(log, "ab"), stderr=subprocess.STDOUT, start_new_session=True,
                            cwd=str(Path(__file__).resolve().parents[2]))


async def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def test_judge_worker_killed_mid_judging(temporal_env, local_engine, random_model_path, tmp_path):
    from transformers import AutoTokenizer

    client: Client = temporal_env.client
    store_dir = tmp_path / "store"
    store = ObjectStore.from_url(f"file://{store_dir}")
    tq, jq = f"orch-{uuid.uuid4().hex[:6]}", f"judge-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "OPENCLAW_TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "OPENCLAW_TASK_QUEUE_JUDGE": jq, "OPENCLAW_MODEL_PATH": str(random_model_path),
           "OPENCLAW_ENGINE_URLS": json.dumps([local_engine]), "OPENCLAW_STORE_URL": f"file://{store_dir}",
           "OPENCLAW_JUDGE_BACKEND": "heuristic", "OPENCLAW_JUDGE_LATENCY_S": "1.5", "OPENCLAW_LOG_FORMAT": "json"}
    log = tmp_path / "judge-worker.log"
    tok = AutoTokenizer.from_pretrained(str(random_model_path))
    cfg = SessionConfig(run="crash", method="combined", votes=3, idle_timeout_s=120, judge_queue=jq,
                        judge_timeout_s=4)
    sessions = [f"carol:{uuid.uuid4().hex[:8]}" for _ in range(3)]
    worker = start_judge_worker(env, log)
    try:
        async with PolicyClient(local_engine) as policy, Worker(client, task_queue=tq, workflows=[SessionWorkflow]):
            handles = []
            for sid in sessions:  # three main-line turns per session: two judged, the last closed without a sample
                history = [{"role": "user", "content": "What is 7 times 6?"}]
                turns = []
                for reaction in (COMPLAINT, PRAISE, None):
                    turn = await serve_turn(policy, tok, history, sid, done=reaction is None)
                    turns.append(turn)
                    if reaction:
                        history += [{"role": "assistant", "content": turn.payload.response_text},
                                    {"role": "user", "content": reaction}]
                for turn in turns:
                    h = await client.start_workflow(
                        SessionWorkflow.run, SessionInput(session_id=sid, user="carol", config=cfg),
                        id=session_workflow_id(sid), task_queue=tq, start_signal="submit_turn",
                        start_signal_args=[turn], result_type=SessionStatus)
                handles.append(h)
            # votes are in flight once the worker has picked up activities; kill it hard in the middle
            await asyncio.sleep(2.5)
            judged_before = len(store.list("records/judgements/"))
            worker.send_signal(signal.SIGKILL)
            worker.wait(10)
            assert judged_before < 9, "judging finished before the kill: the test would prove nothing"
            await asyncio.sleep(1.0)
            worker = start_judge_worker(env, log)
            statuses = await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), timeout=240)
    finally:
        worker.kill()
        worker.wait(10)

    assert all(s.closed and s.main_turns == 3 for s in statuses)
    records = [json.loads(store.get_bytes(k)) for k in store.list("records/judgements/")]
    per_turn = {}
    for r in records:
        per_turn.setdefault((r["session"], r["turn"]), []).append(r)
    assert sorted(per_turn) == sorted((sid, t) for sid in sessions for t in range(3))
    assert all(len(v) == 1 for v in per_turn.values()), "a turn was judged into more than one record"
    assert all(not per_turn[(sid, 2)][0]["emitted"] for sid in sessions)
    emitted = [r["sample_id"] for r in records if r["emitted"]]
    assert len(emitted) == len(set(emitted)) >= len(sessions)

    # the same through the query tool users have: no duplicate sample ids
    out = subprocess.run([str(BIN / "openclaw-rl"), "sql", "--json",
                          "SELECT sample_id, count(*) AS n FROM samples GROUP BY sample_id"],
                         env={**env, "OPENCLAW_RUNTIME_DIR": str(tmp_path)}, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert {r["sample_id"] for r in rows} == set(emitted)
    assert all(r["n"] == 1 for r in rows)
