"""SessionWorkflow against a real Temporal server, the real local engine and a real (file://) object store.

Judging uses the heuristic judge (a rule-based stand-in for the LLM judge) through the same activities and parsing code.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client, WorkflowHistory
from temporalio.worker import Replayer, Worker

from activities.judges import HeuristicJudge
from activities.session import SessionActivities, sample_id_for
from activities.training import TrainerSignals
from contracts.session import SessionConfig, SessionInput, SessionStatus, TurnPayload, TurnRef, session_workflow_id
from openclaw_rl.policy_client import PolicyClient, SamplingParams
from openclaw_rl.samples import SampleReader
from openclaw_rl.store import ObjectStore
from openclaw_rl.versions import policy_version_of
from workflows.session import SessionWorkflow

HISTORY_DIR = Path(__file__).parent / "histories"
COMPLAINT = "This looks way too much like a chatbot wrote it. Just write it like a normal person, no bold or lists."
PRAISE = "Thanks, that is perfect."


async def serve_turn(policy: PolicyClient, tokenizer, messages: list[dict], session: str, *, turn_type="main",
                     done=False) -> TurnRef:
    """What the gateway does for one request: render, generate with log-probs, build the TurnRef."""
    prompt_ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(prompt_ids, "input_ids"):
        prompt_ids = prompt_ids["input_ids"]
    gen = await policy.generate(list(prompt_ids), SamplingParams(max_new_tokens=12, temperature=1.0))
    tail = []
    for m in reversed(messages):
        if m["role"] == "assistant":
            break
        tail.insert(0, m)
    return TurnRef(request_id=uuid.uuid4().hex, session_id=session, user="alice", turn_type=turn_type,
                   policy_version=policy_version_of(gen.weight_version), created_at=time.time(), session_done=done,
                   tail=tail,
                   payload=TurnPayload(messages=messages, prompt_ids=list(prompt_ids), response_ids=gen.output_ids,
                                       response_logprobs=gen.output_logprobs, response_text=gen.text))


@pytest.fixture
def store(tmp_path) -> ObjectStore:
    return ObjectStore.from_url(f"file://{tmp_path / 'store'}")


def worker_pair(client: Client, acts: SessionActivities, tq: str, jq: str) -> tuple[Worker, Worker]:
    return (Worker(client, task_queue=tq, workflows=[SessionWorkflow]),
            Worker(client, task_queue=jq, activities=[acts.judge_votes, acts.prm_vote, acts.hint_vote,
                                                      acts.teacher_logprobs,
                                                      acts.emit_sample, TrainerSignals(client).notify_trainer]))


async def test_session_pairs_turns_judges_and_emits(temporal_env, local_engine, random_model_path, store, tmp_path):
    from transformers import AutoTokenizer

    client: Client = temporal_env.client
    tok = AutoTokenizer.from_pretrained(str(random_model_path))
    tq, jq = f"orch-{uuid.uuid4().hex[:6]}", f"judge-{uuid.uuid4().hex[:6]}"
    session = f"alice:{uuid.uuid4().hex[:8]}"
    async with PolicyClient(local_engine) as policy:
        acts = SessionActivities(HeuristicJudge(), policy, store, tok)
        w1, w2 = worker_pair(client, acts, tq, jq)
        async with w1, w2:
            cfg = SessionConfig(run="t", method="combined", votes=3, idle_timeout_s=60, judge_queue=jq,
                                teacher_temperature=0.5)
            history: list[dict] = [{"role": "user", "content": "What is 12 plus 30?"}]
            turns = []
            t0 = await serve_turn(policy, tok, history, session)
            turns.append(t0)
            # a side turn (e.g. a session-title request) between main turns: forwarded, never trained
            side = await serve_turn(policy, tok, [{"role": "system", "content": "Write a short session title."},
                                                  {"role": "user", "content": "hello"}], session, turn_type="side")
            history += [{"role": "assistant", "content": t0.payload.response_text},
                        {"role": "user", "content": COMPLAINT}]
            t1 = await serve_turn(policy, tok, history, session)
            history += [{"role": "assistant", "content": t1.payload.response_text},
                        {"role": "user", "content": PRAISE}]
            t2 = await serve_turn(policy, tok, history, session, done=True)
            wid = session_workflow_id(session)
            for i, turn in enumerate([t0, side, t1, t1, t2]):  # t1 twice: a duplicated signal is ignored
                await client.start_workflow(SessionWorkflow.run, SessionInput(session_id=session, user="alice",
                                                                              user_name="Alice A.", config=cfg),
                                            id=wid, task_queue=tq, start_signal="submit_turn",
                                            start_signal_args=[turn])
            handle = client.get_workflow_handle(wid, result_type=SessionStatus)
            status: SessionStatus = await handle.result()

    assert status.closed and status.main_turns == 3 and status.turns_seen == 4
    samples = {s.turn: s for v in SampleReader(store, "t").list_versions() for s in SampleReader(store, "t").read(v)}
    # turn 0: complaint with a correction -> eval -1 and an accepted hint -> combined sample with teacher log-probs
    s0 = samples[0]
    assert s0.method == "combined" and s0.reward == -1.0
    assert s0.teacher_logprobs is not None and len(s0.teacher_logprobs) == len(t0.payload.response_ids)
    assert s0.response_ids == t0.payload.response_ids and s0.rollout_logprobs == pytest.approx(
        t0.payload.response_logprobs)
    assert s0.sample_id == sample_id_for(session, 0)
    # the teacher saw the hint: its prompt differs, so its log-probs differ from the rollout's somewhere
    assert any(abs(a - b) > 1e-6 for a, b in zip(s0.teacher_logprobs, s0.rollout_logprobs))
    # turn 1: praise -> eval +1, no hint -> binary sample, no teacher term
    assert samples[1].method == "binary" and samples[1].reward == 1.0 and samples[1].teacher_logprobs is None
    # turn 2: the session ended without a next state -> explicit no-sample record
    assert 2 not in samples
    judgements = [json.loads(store.get_bytes(k)) for k in store.list("records/judgements/")]
    by_turn = {j["turn"]: j for j in judgements}
    assert sorted(by_turn) == [0, 1, 2]
    assert by_turn[2]["emitted"] is False and "no next state" in by_turn[2]["reason"]
    assert by_turn[0]["hint_accepted"] and "normal person" in by_turn[0]["hint"]
    assert len(by_turn[0]["prm_votes"]) == 3 and all(v["score"] == -1 for v in by_turn[0]["prm_votes"])
    # the teacher's log-probs are those of the hinted prompt at the session's teacher temperature
    from rlcore.judging import inject_hint

    hinted = tok.apply_chat_template(inject_hint(t0.payload.messages, by_turn[0]["hint"]), add_generation_prompt=True,
                                     tokenize=True)
    hinted = hinted["input_ids"] if hasattr(hinted, "input_ids") else hinted
    async with PolicyClient(local_engine) as policy:
        assert s0.teacher_logprobs == pytest.approx(await policy.score(list(hinted), s0.response_ids, 0.5), abs=1e-5)
        assert s0.teacher_logprobs != pytest.approx(await policy.score(list(hinted), s0.response_ids), abs=1e-3)

    # the Temporal UI can list and filter sessions by the search attributes the workflow sets
    found = []
    for _ in range(50):
        found = [w async for w in client.list_workflows(
            f"OpenclawSession = '{session}' AND OpenclawUser = 'alice' AND OpenclawUserName = 'Alice A.'")]
        if found:
            break
        await asyncio.sleep(0.2)
    assert [w.id for w in found] == [wid]
    attrs = {k.name: v for k, v in ((p.key, p.value) for p in found[0].typed_search_attributes)}
    assert attrs["OpenclawLastScore"] in (-1.0, 1.0) and attrs["OpenclawPolicyVersion"] == 0
    assert attrs["OpenclawRun"] == "t"  # the run the session feeds (a user's own run when it has an adapter)

    # the recorded history replays against the current workflow code
    history = await handle.fetch_history()
    # no training run "t" exists: telling it about samples is a plain activity, never a failed signal in the UI
    from temporalio.api.enums.v1 import EventType

    types = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_FAILED not in types
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED not in types
    assert any(e.activity_task_scheduled_event_attributes.activity_type.name == "notify_trainer"
               for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    # each judged turn's 2m votes (m = 3, combined) ran in one activity, so the turn is in the history once for them
    scheduled = Counter(e.activity_task_scheduled_event_attributes.activity_type.name for e in history.events
                        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    assert scheduled["judge_votes"] == 2 and scheduled["prm_vote"] == scheduled["hint_vote"] == 0, scheduled
    await Replayer(workflows=[SessionWorkflow]).replay_workflow(history)
    HISTORY_DIR.mkdir(exist_ok=True)
    recorded = HISTORY_DIR / "session_workflow_v1.json"
    if not recorded.exists():  # first run records it; later runs replay the committed file below
        recorded.write_text(history.to_json())


async def test_recorded_session_history_replays():
    """A committed SessionWorkflow history must keep replaying: a change to its commands needs workflow.patched()."""
    recorded = HISTORY_DIR / "session_workflow_v1.json"
    assert recorded.exists(), "tests/histories/session_workflow_v1.json is missing"
    history = WorkflowHistory.from_json("session/recorded", recorded.read_text())
    await Replayer(workflows=[SessionWorkflow]).replay_workflow(history)


async def test_idle_session_closes_and_records_last_turn(temporal_env, local_engine, random_model_path, store):
    from transformers import AutoTokenizer

    client: Client = temporal_env.client
    tok = AutoTokenizer.from_pretrained(str(random_model_path))
    tq, jq = f"orch-{uuid.uuid4().hex[:6]}", f"judge-{uuid.uuid4().hex[:6]}"
    session = f"bob:{uuid.uuid4().hex[:8]}"
    async with PolicyClient(local_engine) as policy:
        acts = SessionActivities(HeuristicJudge(), policy, store, tok)
        w1, w2 = worker_pair(client, acts, tq, jq)
        async with w1, w2:
            turn = await serve_turn(policy, tok, [{"role": "user", "content": "hi"}], session)
            cfg = SessionConfig(run="t", idle_timeout_s=2, judge_queue=jq)
            handle = await client.start_workflow(
                SessionWorkflow.run, SessionInput(session_id=session, user="bob", config=cfg),
                id=session_workflow_id(session), task_queue=tq, start_signal="submit_turn", start_signal_args=[turn],
                execution_timeout=timedelta(seconds=60))
            status = await handle.result()
    assert status.closed and status.main_turns == 1 and status.samples_emitted == 0
    (key,) = store.list("records/judgements/")
    record = json.loads(store.get_bytes(key))
    assert record["turn"] == 0 and record["emitted"] is False and "no next state" in record["reason"]


async def test_session_activities_close_their_clients(local_engine):
    # the judge worker closes the engine client (and an LLM judge's) when it stops; a heuristic judge has none
    policy = PolicyClient(local_engine)
    await policy.health()
    session = policy._http()
    acts = SessionActivities(HeuristicJudge(), policy, store=None, tokenizer="unused")
    await acts.aclose()
    assert session.closed
