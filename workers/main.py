"""Run Temporal workers: `python -m workers.main --queues orchestrator,judge`.

Each queue's activities are built here with their clients (engine, store), then registered as bound methods.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.worker import Worker

from openclaw_rl.logs import get_logger, log_startup
from openclaw_rl.process_exit import exit_past_the_temporal_bridge
from openclaw_rl.settings import Settings, get_settings

QUEUES = ("orchestrator", "judge", "env", "trainer")


def queue_name(s: Settings, queue: str) -> str:
    return getattr(s, f"task_queue_{queue}")


def build_worker(client: Client, s: Settings, queue: str,
                 closers: list[Callable[[], Awaitable[None]]] | None = None) -> Worker | None:
    """The workflows and activities served on one logical queue; ``closers`` collects what to close once it stops."""
    from activities.health import HealthActivities
    from workflows.health import PingWorkflow
    from workflows.session import SessionWorkflow

    tq = queue_name(s, queue)
    workflows: list[type] = []
    activities: list[Callable[..., Any]] = []
    if queue == "orchestrator":
        from workflows.episode import EpisodeWorkflow
        from workflows.rollout import RolloutWorkflow

        workflows += [PingWorkflow, SessionWorkflow, EpisodeWorkflow, RolloutWorkflow]
        activities += [HealthActivities(tq).ping]
    if queue == "orchestrator":  # training run loop and its light store / engine activities
        from workflows.training import TrainingWorkflow

        workflows += [TrainingWorkflow]
        activities += build_training_activities(s)
    if queue == "trainer":
        return build_trainer_worker(client, s, tq)
    if queue == "judge":
        acts = build_session_activities(s)
        if closers is not None:
            closers.append(acts.aclose)
        activities += [acts.judge_votes, acts.prm_vote, acts.hint_vote, acts.teacher_logprobs, acts.emit_sample]
        from activities.training import TrainerSignals

        activities += [TrainerSignals(client).notify_trainer]
        episode = build_episode_activities(s)
        if closers is not None:
            closers.append(episode.aclose)
        activities += [episode.policy_act, episode.step_vote, episode.write_group_samples]
    if not workflows and not activities:
        return None  # nothing registered on this queue yet
    return Worker(client, task_queue=tq, workflows=workflows, activities=activities)


def build_judge(s: Settings):  # type: ignore[no-untyped-def]
    from activities.judges import HeuristicJudge, LLMJudge

    if s.judge_backend == "llm":
        if not s.judge_url:
            raise SystemExit("OPENCLAW_JUDGE_BACKEND=llm needs OPENCLAW_JUDGE_URL")
        return LLMJudge(s.judge_url, api_key=s.judge_api_key.get_secret_value(), temperature=s.judge_temperature,
                        timeout_s=s.http_timeout_s)
    return HeuristicJudge(latency_s=s.judge_latency_s)


def build_session_activities(s: Settings):  # type: ignore[no-untyped-def]
    from activities.session import SessionActivities
    from openclaw_rl.policy_client import PolicyClient
    from openclaw_rl.store import store_from_settings

    teacher_url = s.teacher_url or s.engine_url
    policy = PolicyClient(teacher_url, timeout_s=s.http_timeout_s, connect_timeout_s=s.http_connect_timeout_s)
    return SessionActivities(build_judge(s), policy, store_from_settings(s), tokenizer=str(s.model_path))


def build_episode_activities(s: Settings):  # type: ignore[no-untyped-def]
    from activities.episode import EpisodeActivities
    from openclaw_rl.policy_client import PolicyClient

    policy = PolicyClient(s.engine_url, timeout_s=s.http_timeout_s, connect_timeout_s=s.http_connect_timeout_s)
    return EpisodeActivities(build_step_judge(s), policy, _store_cache(s), tokenizer=str(s.model_path))


def build_step_judge(s: Settings):  # type: ignore[no-untyped-def]
    """The general track's step judge: ``step_judge`` by name, or the judge backend's when it is empty."""
    from activities.judges import make_step_judge

    if not s.step_judge:
        return build_judge(s)
    return make_step_judge(s.step_judge, url=s.step_judge_url or s.judge_url or s.engine_url,
                           api_key=s.judge_api_key.get_secret_value(), temperature=s.judge_temperature,
                           timeout_s=s.http_timeout_s, latency_s=s.judge_latency_s)


ENV_THREADS = 64  # env calls block a thread each (a step waits for its command)


def build_env_workers(client: Client, s: Settings, closers: list[Callable[[], Awaitable[None]]] | None = None,
                      episode: Any = None) -> list[Worker]:
    """Two workers over one set of live envs: the shared env queue (task lists, resets, and the EpisodeWorkflows
    started there, which call the env, the policy and the step judge as local activities in this process) and this
    process's own queue, which ``env_reset`` hands to episodes run on other queues so that their steps come back to
    the process holding their sandbox. ``episode``: the EpisodeActivities to use (default: built from settings)."""
    import os
    import socket
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from activities.episode import EnvActivities

    tq = queue_name(s, "env")
    own = f"{tq}/{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    acts = EnvActivities(own)
    if episode is None:
        episode = build_episode_activities(s)
    pool = ThreadPoolExecutor(max_workers=ENV_THREADS, thread_name_prefix="env")
    if closers is not None:
        async def close() -> None:
            await asyncio.to_thread(acts.close_all)
            pool.shutdown(wait=False)
            await episode.aclose()
        closers.append(close)
    return [env_queue_worker(client, tq, acts, episode, pool, max_concurrent_activities=ENV_THREADS // 2),
            Worker(client, task_queue=own, activities=env_activities(acts)[2:], activity_executor=pool,
                   max_concurrent_activities=ENV_THREADS // 2)]


def env_activities(acts: Any) -> list[Callable[..., Any]]:
    """An EnvActivities' activities: tasks, reset (the shared queue only), then step, evaluate, close."""
    return [acts.env_tasks, acts.env_reset, acts.env_step, acts.env_evaluate, acts.env_close]


def env_queue_worker(client: Client, task_queue: str, env: Any, episode: Any, executor: Any,
                     **options: Any) -> Worker:
    """The shared env queue's worker: the env activities, and EpisodeWorkflow with the policy call and the step vote,
    so that an episode started on this queue finds its env, the policy and the judge in this process.

    Episodes run outside the sandbox here: a fresh sandbox per run costs ~7-10 ms, a third of what Temporal adds to
    a whole terminal episode, and an episode is one short run. The module imports the contracts, a pure reward
    function and the activity classes it calls by reference; the replay tests run it in the sandbox, so its
    determinism is still checked."""
    from temporalio.worker import UnsandboxedWorkflowRunner

    from workflows.episode import EpisodeWorkflow

    return Worker(client, task_queue=task_queue, workflows=[EpisodeWorkflow],
                  activities=[*env_activities(env), episode.policy_act, episode.step_vote], activity_executor=executor,
                  workflow_runner=UnsandboxedWorkflowRunner(), **options)


def build_training_activities(s: Settings) -> list[Callable[..., Any]]:
    from activities.training import StoreActivities
    from openclaw_rl.policy_client import PolicyClient

    def policy(url: str) -> PolicyClient:  # a weight load can take minutes on a big model
        return PolicyClient(url, timeout_s=max(s.http_timeout_s, 600.0), connect_timeout_s=s.http_connect_timeout_s)

    acts = StoreActivities(_store_cache(s), policy)
    return [acts.select_batch, acts.push_weights, acts.seal_version, acts.evaluate_candidate, acts.find_version,
            acts.record_training_event]


def build_trainer_worker(client: Client, s: Settings, tq: str) -> Worker:
    """train_step and base_checkpoint are sync activities (torch holds the thread): one at a time, in their own thread
    pool, so they share the one in-memory model."""
    from concurrent.futures import ThreadPoolExecutor

    from activities.training import TrainerActivities

    megatron = None
    if s.trainer_backend == "megatron":
        from trainer.megatron.launch import MegatronLaunch

        megatron = MegatronLaunch(nproc=s.megatron_nproc, tp=s.megatron_tp)
    acts = TrainerActivities(_store_cache(s), megatron=megatron)
    return Worker(client, task_queue=tq, activities=[acts.train_step, acts.base_checkpoint],
                  max_concurrent_activities=1,
                  activity_executor=ThreadPoolExecutor(max_workers=1, thread_name_prefix="train"))


def _store_cache(s: Settings):  # type: ignore[no-untyped-def]
    from activities.training import StoreCache
    from openclaw_rl.store import s3_options

    return StoreCache(s.resolved_store_url, s.runtime_dir / "cache", **s3_options(s))


async def run(queues: list[str]) -> None:
    s = get_settings()
    log = get_logger("workers")
    client = await Client.connect(s.temporal_address, namespace=s.temporal_namespace)
    closers: list[Callable[[], Awaitable[None]]] = []
    workers: list[Worker] = []
    for q in queues:
        if q == "env":
            workers += build_env_workers(client, s, closers)
        elif (w := build_worker(client, s, q, closers)) is not None:
            workers.append(w)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    log.info("workers started", queues=[queue_name(s, q) for q in queues])
    async with _all(workers):
        await stop.wait()
    for close in closers:
        await close()
    log.info("workers stopped")


class _all:
    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers

    async def __aenter__(self) -> None:
        for w in self.workers:
            await w.__aenter__()

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(w.__aexit__(*exc) for w in self.workers))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--queues", default=",".join(QUEUES), help="comma-separated subset of " + ",".join(QUEUES))
    args = p.parse_args(argv)
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    bad = [q for q in queues if q not in QUEUES]
    if bad:
        p.error(f"unknown queue(s) {bad}; choose from {QUEUES}")
    log_startup("workers")
    asyncio.run(run(queues))
    exit_past_the_temporal_bridge(0)  # stopped cleanly: no abort in the interpreter's teardown


if __name__ == "__main__":
    main()
