"""Episode bench: what Temporal costs per step, and whether 16 episodes at once all finish.

One process holds a Temporal dev server (in-memory), the workers (orchestrator, judge, env: the env worker with its
own queue, as in production) and talks to the local engine (a separate process). The policy is the terminal env's
scripted policy (the tiny model cannot act yet), its log-probs scored by the engine; m = 3 heuristic step votes.
Episodes run on the env queue, as RolloutWorkflow starts them: the env worker runs the workflow, and its env, policy
and vote calls are local activities in that worker (workflows/episode.py).

- ``temporal_overhead_ms_per_step``: the same terminal episodes (same tasks, seeds, config) run alternately as an
  ``EpisodeWorkflow`` and as a plain asyncio loop that calls the same activity functions in the same order (votes
  in the background while the next step runs), in this one run against this one env; the difference in wall time
  per step.
- ``parallel_episodes_failed``: a ``RolloutWorkflow`` of 2 tasks x 8 episodes, all 16 at once; how many failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

TASKS = ["fib_script-2", "count_lines-0", "line_range-1", "top_word-0"]



@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 points at stderr meanwhile, so child processes started now write there for good."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)

async def plain_episode(env_acts: Any, ep_acts: Any, inp: Any) -> Any:
    """EpisodeWorkflow._attempt without Temporal: the same activity functions, called directly, in the same order."""
    from temporalio.testing import ActivityEnvironment

    from contracts.episode import EnvEpisodeRef, EnvResetRequest, EnvStepRequest, EpisodeStep, PolicyRequest
    from rlcore.general import step_reward
    from workflows.episode import judge_request

    cfg = inp.config

    def call_sync(fn: Any, arg: Any) -> Any:
        return asyncio.to_thread(ActivityEnvironment().run, fn, arg)

    def call(fn: Any, arg: Any) -> Any:
        return ActivityEnvironment().run(fn, arg)

    reset = await call_sync(env_acts.env_reset, EnvResetRequest(
        episode_id=inp.episode_id, env=cfg.env, task_id=inp.task_id, options=dict(cfg.env_options)))
    ref = EnvEpisodeRef(episode_id=inp.episode_id)
    messages = [{"role": "system", "content": reset.system_prompt}, {"role": "user", "content": reset.observation}]
    steps, votes = [], []
    for t in range(reset.max_steps):
        pol = await call(ep_acts.policy_act, PolicyRequest(
            run=cfg.run, episode_id=inp.episode_id, messages=list(messages), step_index=t, env=cfg.env,
            task_id=inp.task_id, episode_index=inp.index, policy=cfg.policy,
            scripted_error_rate=cfg.scripted_error_rate, seed=cfg.seed, max_new_tokens=cfg.max_new_tokens,
            max_context_tokens=cfg.max_context_tokens, store_url=cfg.store_url))
        st = await call_sync(env_acts.env_step, EnvStepRequest(episode_id=inp.episode_id, step_index=t,
                                                               action=pol.text))
        messages += [{"role": "assistant", "content": pol.text}, {"role": "tool", "content": st.observation}]
        step = EpisodeStep(index=t, action=pol.text, observation=st.observation,
                           parse_error=str(st.info.get("parse_error", "")), record_ref=pol.record_ref)
        steps.append(step)
        req = judge_request(cfg.env, inp.episode_id, reset.instruction, steps, step, st.info)
        votes.append(asyncio.gather(*(call(ep_acts.step_vote, replace(req, vote_index=i))
                                      for i in range(cfg.votes))))
        if st.done:
            break
    outcome = await call_sync(env_acts.env_evaluate, ref)
    await call_sync(env_acts.env_close, ref)
    for step, vs in zip(steps, votes):
        step.votes = list(await vs)
        step.reward = step_reward(outcome.reward, [v.score for v in step.votes])
    return steps


async def _run(model: Path, episodes: int, votes: int) -> dict[str, Any]:
    from temporalio.testing import WorkflowEnvironment
    from temporalio.worker import Worker

    from activities.episode import EnvActivities, EpisodeActivities
    from activities.judges import HeuristicJudge
    from activities.training import StoreCache
    from bench import procs
    from bench.serving import start_engine
    from contracts.episode import EpisodeConfig, EpisodeInput, EpisodeResult, RolloutInput, RolloutResult
    from openclaw_rl.policy_client import PolicyClient
    from workers.main import env_activities, env_queue_worker
    from workflows.episode import EpisodeWorkflow
    from workflows.rollout import RolloutWorkflow

    tmp = Path(tempfile.mkdtemp(prefix="bench-episode-"))
    port = procs.free_port()
    engine = start_engine(model, port, tmp / "engine.log", max_batch=16)
    url = f"http://127.0.0.1:{port}"
    tag = uuid.uuid4().hex[:6]
    oq, jq, eq = f"orch-{tag}", f"judge-{tag}", f"env-{tag}"
    store_url = f"file://{tmp / 'store'}"
    cfg = EpisodeConfig(run="bench", policy="scripted", scripted_error_rate=0.2, votes=votes, max_new_tokens=256,
                        store_url=store_url, policy_queue=jq, judge_queue=jq, env_queue=eq)
    try:
        async with AsyncExitStack() as stack:
            with _stdout_to_stderr():  # the dev server prints a banner; this bench's stdout is one JSON object
                env = await WorkflowEnvironment.start_local(
                    dev_server_existing_path=str(Path(sys.executable).parent / "temporal"), ui=False,
                    dev_server_log_level="error")
            stack.push_async_callback(env.shutdown)
            client = env.client
            policy = await stack.enter_async_context(PolicyClient(url))
            pool = stack.enter_context(ThreadPoolExecutor(max_workers=64))
            env_acts = EnvActivities(f"{eq}/own")
            ep_acts = EpisodeActivities(HeuristicJudge(), policy, StoreCache(store_url, tmp / "cache"), str(model))
            for w in (Worker(client, task_queue=oq, workflows=[EpisodeWorkflow, RolloutWorkflow]),
                      Worker(client, task_queue=jq, activities=[ep_acts.policy_act, ep_acts.step_vote,
                                                                ep_acts.write_group_samples]),
                      env_queue_worker(client, eq, env_acts, ep_acts, pool, max_concurrent_activities=32),
                      Worker(client, task_queue=env_acts.worker_queue, activities=env_activities(env_acts)[2:],
                             activity_executor=pool, max_concurrent_activities=32)):
                await stack.enter_async_context(w)

            wf_s, plain_s, wf_steps, plain_steps = [], [], 0, 0
            for i in range(episodes + 1):  # the first pair warms up (tokenizer, engine, sandbox cgroups) unmeasured
                task = TASKS[i % len(TASKS)]
                inp = EpisodeInput(task_id=task, episode_id=f"bench-{tag}-{i}", index=i, config=cfg)
                t0 = time.perf_counter()
                result: EpisodeResult = await client.execute_workflow(  # on the env queue, as RolloutWorkflow does
                    EpisodeWorkflow.run, inp, id=f"episode/{inp.episode_id}", task_queue=eq)
                t1 = time.perf_counter()
                steps = await plain_episode(env_acts, ep_acts, replace(inp, episode_id=f"{inp.episode_id}-plain"))
                t2 = time.perf_counter()
                if [s.reward for s in steps] != [s.reward for s in result.steps]:
                    raise RuntimeError(f"the plain loop and the workflow diverged on {task}")
                if i:
                    wf_s.append(t1 - t0)
                    plain_s.append(t2 - t1)
                    wf_steps += len(result.steps)
                    plain_steps += len(steps)

            t0 = time.perf_counter()
            rollout: RolloutResult = await client.execute_workflow(
                RolloutWorkflow.run, RolloutInput(run="bench", env="terminal", tasks=["count_lines-0", "top_word-0"],
                                                  n=8, max_parallel=16, notify_training=False, episode=cfg),
                id=f"rollout/bench-{tag}", task_queue=oq)
            parallel_s = time.perf_counter() - t0
            # the measured episodes call everything as local activities; the rollout's own activities (task groups'
            # samples) still go through the server
            dispatch = await _dispatch_latency(
                client, [f"episode/bench-{tag}-{i}" for i in range(1, episodes + 1)] + [f"rollout/bench-{tag}"])
    finally:
        procs.stop(engine)
    wf_ms, plain_ms = 1000 * sum(wf_s) / wf_steps, 1000 * sum(plain_s) / plain_steps
    overhead = wf_ms - plain_ms
    return {
        "temporal_overhead_ms_per_step": round(overhead, 2),
        "parallel_episodes_failed": rollout.failed,
        "ok": overhead <= 20.0 and rollout.failed == 0,
        "workflow_ms_per_step": round(wf_ms, 2),
        # from the measured episodes' and the rollout's histories: the server's time from scheduling a task to a
        # worker starting it, and a workflow task's run (an episode on an env worker is mostly one workflow task)
        "activity_dispatch_ms_p50": dispatch["activity"],
        "workflow_task_dispatch_ms_p50": dispatch["workflow_task"],
        "workflow_task_ms_p50": dispatch["workflow_task_run"],
        "plain_ms_per_step": round(plain_ms, 2),
        "episodes_each": len(wf_s),
        "steps_each": wf_steps,
        "workflow_episode_s_p50": round(statistics.median(wf_s), 4),
        "plain_episode_s_p50": round(statistics.median(plain_s), 4),
        "parallel_episodes": rollout.episodes,
        "parallel_wall_s": round(parallel_s, 2),
        "parallel_samples_written": rollout.samples_written,
        "votes_per_step": cfg.votes,
        "policy": "scripted (reference commands with seeded mistakes), log-probs scored by the local engine",
        "model": str(model),
        "env": "terminal",
    }


async def _dispatch_latency(client: Any, workflow_ids: list[str]) -> dict[str, float]:
    """Median ms from scheduled to started (activities, workflow tasks) and from started to completed (workflow
    tasks): how much of a step is Temporal passing work around rather than doing it."""
    from temporalio.api.enums.v1 import EventType

    times: dict[str, list[float]] = {"activity": [], "workflow_task": [], "workflow_task_run": []}
    for wid in workflow_ids:
        history = await client.get_workflow_handle(wid).fetch_history()
        at = {e.event_id: e.event_time.ToDatetime().timestamp() for e in history.events}
        for e in history.events:
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                times["activity"].append(
                    at[e.event_id] - at[e.activity_task_started_event_attributes.scheduled_event_id])
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                times["workflow_task"].append(
                    at[e.event_id] - at[e.workflow_task_started_event_attributes.scheduled_event_id])
            elif e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                times["workflow_task_run"].append(
                    at[e.event_id] - at[e.workflow_task_completed_event_attributes.started_event_id])
    return {k: round(1000 * statistics.median(v), 2) if v else 0.0 for k, v in times.items()}


def run(model_path: Path | None = None, episodes: int = 12, votes: int = 3) -> dict[str, Any]:
    from bench.procs import bench_model

    model, _ = bench_model(model_path)
    return asyncio.run(_run(model, episodes, votes))
