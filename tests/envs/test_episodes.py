"""Every env kind runs whole episodes through the real workflows: a RolloutWorkflow over EpisodeWorkflows on a real
Temporal server, the env worker holding real sandboxes (a headless Chromium for the GUI env), the local engine scoring
the actions' log-probs and the heuristic step judge voting. The policy is each env's scripted one (the tiny model acts
only in the tool-call env, which tests/test_training_rollouts.py and the general experiment cover with it): without
mistakes every episode succeeds; with seeded mistakes the malformed actions become observations and the episodes
still end, graded."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from activities.episode import EnvActivities, EpisodeActivities
from activities.judges import HeuristicJudge
from activities.training import StoreCache
from contracts.episode import FRESH_SPLIT, EpisodeConfig, RolloutInput, RolloutResult
from envs.terminal.tasks import SUITE as TERMINAL
from openclaw_rl.policy_client import PolicyClient
from tests.model_factory import make_random_qwen3, running_engine
from workers.main import env_queue_worker
from workflows.episode import EpisodeWorkflow
from workflows.rollout import RolloutWorkflow


@pytest.fixture(scope="module")
def long_model(tmp_path_factory):  # a GUI page's element list is longer than the session model's 512 positions
    return make_random_qwen3(tmp_path_factory.mktemp("random-qwen3-4k"), seed=0, max_positions=4096)


CASES = {"swe": ["slugify-edges"], "gui": ["click-button-1", "enter-text-2"], "terminal": ["create_file-0"]}


async def _serve(stack: AsyncExitStack, client: Client, tag: str, tmp_path, model) -> tuple[str, str, str, str]:
    """Workers for the rollout and episode workflows, their activities and an engine on ``model``: (orchestrator,
    judge and env queues, store url)."""
    orch, judge, env_q = f"orch-{tag}", f"judge-{tag}", f"env-{tag}"
    store_url = f"file://{tmp_path / 'store'}"
    stores = StoreCache(store_url, tmp_path / "cache")
    url = stack.enter_context(running_engine(model, weight_version="0", max_batch=8))
    policy = await stack.enter_async_context(PolicyClient(url))
    pool = stack.enter_context(ThreadPoolExecutor(max_workers=8))
    env_acts = EnvActivities(f"{env_q}/{tag}")
    acts = EpisodeActivities(HeuristicJudge(), policy, stores, str(model))
    stack.callback(lambda: _no_live_episodes(env_acts))
    for w in [Worker(client, task_queue=orch, workflows=[RolloutWorkflow, EpisodeWorkflow]),
              Worker(client, task_queue=judge, activities=[acts.policy_act, acts.step_vote,
                                                           acts.write_group_samples]),
              env_queue_worker(client, env_q, env_acts, acts, pool),
              Worker(client, task_queue=env_acts.worker_queue,
                     activities=[env_acts.env_step, env_acts.env_evaluate, env_acts.env_close],
                     activity_executor=pool)]:
        await stack.enter_async_context(w)
    return orch, judge, env_q, store_url


def _no_live_episodes(env_acts: EnvActivities) -> None:
    assert env_acts.live_episodes() == 0  # every sandbox closed


@pytest.mark.parametrize("env", sorted(CASES))
async def test_scripted_episodes_complete_in_every_env(env, temporal_env, long_model, tmp_path):
    client: Client = temporal_env.client
    tag = uuid.uuid4().hex[:6]
    results: list[RolloutResult] = []
    async with AsyncExitStack() as stack:
        orch, judge, env_q, store_url = await _serve(stack, client, tag, tmp_path, long_model)
        for rate in (0.0, 0.5):
            cfg = EpisodeConfig(env=env, run=f"e-{tag}", policy="scripted", scripted_error_rate=rate, votes=1,
                                max_new_tokens=64, store_url=store_url, policy_queue=judge, judge_queue=judge,
                                env_queue=env_q, seed=3)
            results.append(await client.execute_workflow(
                RolloutWorkflow.run, RolloutInput(run=cfg.run, env=env, tasks=CASES[env], n=2, episode=cfg),
                id=f"rollout/{env}-{tag}-{rate}", task_queue=orch))
    clean, noisy = results
    assert clean.failed == 0 and clean.episodes == 2 * len(CASES[env])
    assert clean.successes == clean.episodes and clean.mean_outcome == 1.0
    assert noisy.failed == 0 and noisy.episodes == clean.episodes and noisy.steps >= clean.steps


async def test_a_fresh_rollout_runs_new_instances_that_its_seed_and_round_choose(temporal_env, long_model, tmp_path):
    """``split="fresh"``: the rollout runs instances of the terminal families made for its (seed, round), never a
    suite task; the env worker makes each again from its id, and the reference solution solves every one."""
    client: Client = temporal_env.client
    tag = uuid.uuid4().hex[:6]
    async with AsyncExitStack() as stack:
        orch, judge, env_q, store_url = await _serve(stack, client, tag, tmp_path, long_model)
        cfg = EpisodeConfig(env="terminal", run=f"f-{tag}", policy="scripted", scripted_error_rate=0.0, votes=1,
                            max_new_tokens=64, store_url=store_url, policy_queue=judge, judge_queue=judge,
                            env_queue=env_q, seed=3)

        async def rollout(k: int, round_: int) -> RolloutResult:
            return await client.execute_workflow(
                RolloutWorkflow.run, RolloutInput(run=cfg.run, env="terminal", split=FRESH_SPLIT, n=1, episode=cfg,
                                                  sample_tasks=3, sample_seed=7, sample_round=round_,
                                                  write_samples=False),
                id=f"rollout/fresh-{tag}-{k}", task_queue=orch)

        first, again, other = await rollout(0, 2), await rollout(1, 2), await rollout(2, 3)
    suite_ids = set(TERMINAL.ids())
    assert set(first.outcomes) == set(TERMINAL.fresh(3, "s7r2")) == set(again.outcomes)  # (in finishing order)
    assert set(other.outcomes) == set(TERMINAL.fresh(3, "s7r3")) and not set(other.outcomes) & set(first.outcomes)
    for res in (first, other):
        assert not set(res.outcomes) & suite_ids
        assert len({t.partition("~")[0] for t in res.outcomes}) == 3  # three families
        assert res.failed == 0 and res.episodes == 3 and res.successes == 3
