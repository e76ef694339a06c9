"""Activities of the general track.

``EnvActivities`` (env queue; sync, in a thread pool): ``env_tasks``, ``env_reset``, ``env_step``, ``env_evaluate``,
``env_close``. An env is a live process tree (a sandboxed shell), so it stays in the worker that reset it. The env
option ``outcome_placebo`` (a seed; taken out before the env sees its options) makes ``env_evaluate``'s reward a fair
coin, the success flag staying the env's: a study control for what update noise alone does. Episodes
started on the env queue run on the env worker and call these as local activities, in the process holding the env.
For episodes run elsewhere the worker also listens on a queue of its own, whose name ``env_reset`` returns, and the
episode sends its steps there. If that worker dies, the episode workflow notices (its workflow task times out, or a call
to the worker's queue is not picked up) and restarts the episode from scratch on another worker. ``env_step`` is keyed
by step index: a retry of an applied step gets its recorded result, so no action ever runs twice. Episodes left behind
(their workflow was terminated) are closed after ``idle_timeout_s``.

``EpisodeActivities`` (judge queue by default): ``policy_act`` fits the episode's history into the context
(head/tail: the system prompt and the task stay, the oldest steps go), renders it to token ids and gets the response
with exact token ids and log-probs from the policy engine; it writes them to the store (the step's record) and returns
the text and the record's key, so the workflow history holds no token ids. ``step_vote`` is one step-judge vote
(prompts/ ``general_<env>`` templates, the same judge backends as the personal track). ``write_group_samples`` turns a
task group's step records, rewards and advantages into training samples, one Parquet shard per policy version.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.clients import EngineAndJudge
from activities.judges import Judge
from contracts.episode import (
    EnvEpisodeRef,
    EnvOutcome,
    EnvResetRequest,
    EnvResetResult,
    EnvStepRequest,
    EnvStepResult,
    EnvTasksRequest,
    EnvTasksResult,
    GroupSamplesRequest,
    GroupSamplesResult,
    PolicyRequest,
    PolicyResult,
    StepJudgeRequest,
)
from envs.base import Env, make_env, scripted_policy, task_suite
from openclaw_rl.policy_client import PolicyEngineError, SamplingParams
from openclaw_rl.versions import policy_version_of
from rlcore.curriculum import CURRICULA, mixed_weights
from rlcore.judging import Vote, parse_score


class EpisodeNotFoundError(Exception):
    """This env worker does not hold the episode (it was restarted, or the episode was reaped); non-retryable."""


class StepOrderError(Exception):
    """A step arrived out of order; non-retryable."""


class ContextTooLongError(Exception):
    """Even the system prompt and the task alone do not fit the context; non-retryable."""


# ---------------------------------------------------------------------------------------------------------------------
# env worker
# ---------------------------------------------------------------------------------------------------------------------

PLACEBO_OPTION = "outcome_placebo"  # env option (a seed): the outcome reward is a fair coin, see ``placebo_reward``


def placebo_reward(seed: object, episode_id: str, attempt: int) -> float:
    """A study control: +1 or -1, a fair coin fixed by (seed, episode, attempt), in place of the outcome reward. A run
    trained on it gets updates of the same size and shape as a real one with no information in them, so what it does
    to held-out success is what update noise alone does. The episode's success stays the env's own."""
    return 1.0 if int(hashlib.sha256(f"{seed}:{episode_id}:{attempt}".encode()).hexdigest()[:8], 16) % 2 else -1.0


@dataclass
class _Live:
    env: Env
    placebo: object = None  # set: the outcome reward is ``placebo_reward`` (a study control)
    done: list[tuple[str, EnvStepResult]] = field(default_factory=list)  # (action, result) of each applied step
    touched: float = field(default_factory=time.monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)


class EnvActivities:
    def __init__(self, worker_queue: str, idle_timeout_s: float = 1800.0) -> None:
        self.worker_queue = worker_queue
        self.idle_timeout_s = idle_timeout_s
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _key(episode_id: str, attempt: int) -> str:
        return f"{episode_id}#{attempt}"

    def _get(self, episode_id: str, attempt: int) -> _Live:
        with self._lock:
            live = self._live.get(self._key(episode_id, attempt))
        if live is None:
            raise EpisodeNotFoundError(f"episode {episode_id} (attempt {attempt}) is not on {self.worker_queue}")
        live.touched = time.monotonic()
        return live

    def _reap(self) -> None:
        now = time.monotonic()
        with self._lock:
            stale = [k for k, v in self._live.items() if now - v.touched > self.idle_timeout_s]
            gone = [self._live.pop(k) for k in stale]
        for live in gone:
            live.env.close()

    def live_episodes(self) -> int:
        with self._lock:
            return len(self._live)

    def close_all(self) -> None:
        with self._lock:
            gone, self._live = list(self._live.values()), {}
        for live in gone:
            live.env.close()

    @activity.defn(name="env_tasks")
    def env_tasks(self, req: EnvTasksRequest) -> EnvTasksResult:
        suite = task_suite(req.env)
        if req.fresh > 0:
            try:
                weights = None
                if req.curriculum == "mixed":
                    weights = mixed_weights(suite.families, req.family_history)
                elif req.curriculum not in ("", "none"):
                    raise ValueError(f"unknown curriculum {req.curriculum!r}: one of {', '.join(CURRICULA)}")
                return EnvTasksResult(task_ids=suite.fresh(req.fresh, req.fresh_seed, weights))
            except ValueError as err:  # no fresh instances in this env: retrying will not make them
                raise ApplicationError(str(err), type="FreshTasksUnavailable", non_retryable=True) from err
        return EnvTasksResult(task_ids=suite.ids(req.split))  # type: ignore[arg-type]

    @activity.defn(name="env_reset")
    def env_reset(self, req: EnvResetRequest) -> EnvResetResult:
        self._reap()
        task = task_suite(req.env).get(req.task_id)
        options = dict(req.options)
        placebo = options.pop(PLACEBO_OPTION, None)
        if req.max_steps:
            options["max_steps"] = req.max_steps
        env = make_env(req.env, **options)
        try:
            observation = env.reset(task)
        except BaseException:
            env.close()
            raise
        key = self._key(req.episode_id, req.attempt)
        with self._lock:  # a retried reset replaces the first one's env
            old = self._live.pop(key, None)
            self._live[key] = _Live(env, placebo=placebo)
        if old is not None:
            old.env.close()
        return EnvResetResult(task_queue=self.worker_queue, observation=observation, system_prompt=env.system_prompt,
                              instruction=task.instruction, max_steps=env.max_steps, worker=self.worker_queue)

    @activity.defn(name="env_step")
    def env_step(self, req: EnvStepRequest) -> EnvStepResult:
        """Applies step ``step_index``. A step that already ran with the same action gets its recorded result and is
        never run twice: a retry, or a local activity run again when the workflow task that held its result was lost
        (a busy worker's task times out and the history is replayed from the last recorded step). The same index
        with another action, or an index ahead of the env, means the env no longer matches the history:
        ``StepOrderError``, and the workflow restarts the episode on a fresh env."""
        live = self._get(req.episode_id, req.attempt)
        with live.lock:
            applied = len(live.done)
            if req.step_index < applied:
                action, result = live.done[req.step_index]
                if action == req.action:
                    return result
                raise StepOrderError(f"step {req.step_index} of {req.episode_id} came again with another action "
                                     f"after {applied} steps")
            if req.step_index != applied:
                raise StepOrderError(f"step {req.step_index} of {req.episode_id} arrived after {applied} steps")
            r = live.env.step(req.action)
            result = EnvStepResult(observation=r.observation, done=r.done, info=r.info)
            live.done.append((req.action, result))
            return result

    @activity.defn(name="env_evaluate")
    def env_evaluate(self, req: EnvEpisodeRef) -> EnvOutcome:
        live = self._get(req.episode_id, req.attempt)
        with live.lock:
            o = live.env.evaluate()
        if live.placebo is not None:
            return EnvOutcome(reward=placebo_reward(live.placebo, req.episode_id, req.attempt), success=o.success,
                              detail=f"[placebo: the reward is a coin flip] {o.detail}")
        return EnvOutcome(reward=o.reward, success=o.success, detail=o.detail)

    @activity.defn(name="env_close")
    def env_close(self, req: EnvEpisodeRef) -> bool:
        with self._lock:
            live = self._live.pop(self._key(req.episode_id, req.attempt), None)
        if live is not None:
            live.env.close()
        return live is not None


# ---------------------------------------------------------------------------------------------------------------------
# policy, step judge, samples
# ---------------------------------------------------------------------------------------------------------------------

def render_ids(tokenizer: Any, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "input_ids") or isinstance(ids, dict):
        ids = ids["input_ids"]
    return list(ids)


def fit_context(tokenizer: Any, messages: list[dict], budget: int) -> tuple[list[int], int]:
    """Token ids of the longest context within ``budget``: the head (system prompt, task) always, then the most recent
    steps; a note in the task message says how many earlier steps were left out. Returns (ids, steps left out)."""
    ids = render_ids(tokenizer, messages)
    if len(ids) <= budget:
        return ids, 0
    head, rest = messages[:2], messages[2:]
    for drop in range(2, len(rest) + 1, 2):  # whole steps: (assistant, observation) pairs
        note = {**head[-1], "content": f"{head[-1]['content']}\n[{drop // 2} earlier step(s) omitted]"}
        ids = render_ids(tokenizer, head[:-1] + [note] + rest[drop:])
        if len(ids) <= budget:
            return ids, drop // 2
    raise ContextTooLongError(f"the system prompt and the task take {len(render_ids(tokenizer, head))} tokens; the "
                              f"budget is {budget}")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def record_key(run: str, episode_id: str, attempt: int, step: int, try_: int) -> str:
    return f"episodes/run={run}/{_digest(episode_id)}/attempt={attempt}/step={step:03d}-try={try_}.json"


class EpisodeActivities(EngineAndJudge):
    def __init__(self, judge: Judge, policy: Any, stores: Any, tokenizer: Any) -> None:
        super().__init__(judge, policy, tokenizer)
        self.stores = stores  # activities.training.StoreCache
        self._context_len: int | None = None

    async def _engine_context(self) -> int:
        if self._context_len is None:
            info = await self.policy.model_info()
            self._context_len = int(info.get("context_length") or 1 << 30)
        return self._context_len

    @activity.defn(name="policy_act")
    async def policy_act(self, req: PolicyRequest) -> PolicyResult:
        try:
            context = min(req.max_context_tokens, await self._engine_context())
            if req.policy == "scripted":
                text, response_ids = self._scripted_text(req)
                prompt_ids, omitted = fit_context(self.tokenizer, req.messages, context - len(response_ids))
                logprobs, version = await self._score(prompt_ids, response_ids)
                finish, temperature = "stop", 1.0
            elif req.policy == "engine":
                prompt_ids, omitted = fit_context(self.tokenizer, req.messages, context - req.max_new_tokens)
                who = f"{req.task_id}:{req.episode_index}" if req.seed_by_task else req.episode_id
                seed = int(_digest(f"{req.seed}:{who}:{req.attempt}:{req.step_index}")[:8], 16)
                gen = await self.policy.generate(prompt_ids, SamplingParams(
                    max_new_tokens=req.max_new_tokens, temperature=req.temperature, sampling_seed=seed))
                text, response_ids, logprobs = gen.text, gen.output_ids, gen.output_logprobs
                version, finish = policy_version_of(gen.weight_version), gen.finish_reason
                # the engine's log-probs are of log_softmax(logits / T); greedy (T = 0) reports them at 1.0
                temperature = req.temperature if req.temperature > 1e-6 else 1.0
            else:
                raise ValueError(f"unknown policy {req.policy!r}: engine or scripted")
        except PolicyEngineError as err:
            raise ApplicationError(str(err), type="PolicyEngineError", non_retryable=not err.retryable) from err
        key = record_key(req.run, req.episode_id, req.attempt, req.step_index, activity.info().attempt)
        record = {"episode_id": req.episode_id, "attempt": req.attempt, "step": req.step_index,
                  "policy_version": version, "prompt_ids": prompt_ids, "response_ids": list(response_ids),
                  "rollout_logprobs": [float(x) for x in logprobs], "temperature": temperature, "text": text,
                  "steps_omitted": omitted}
        await asyncio.to_thread(self.stores.get(req.store_url).put_bytes, key, json.dumps(record).encode())
        return PolicyResult(text=text, policy_version=version, prompt_tokens=len(prompt_ids),
                            completion_tokens=len(response_ids), finish_reason=finish, steps_omitted=omitted,
                            record_ref=key)

    def _scripted_text(self, req: PolicyRequest) -> tuple[str, list[int]]:
        """The env's scripted action and its token ids (ending with EOS, as a generation would)."""
        task = task_suite(req.env).get(req.task_id)
        seed = f"{req.seed}:{req.task_id}:{req.episode_index}:{req.attempt}"
        text = scripted_policy(req.env)(task, req.step_index, seed, req.scripted_error_rate)
        tok = self.tokenizer
        return text, list(tok.encode(text, add_special_tokens=False)) + [tok.eos_token_id]

    async def _score(self, prompt_ids: list[int], response_ids: list[int]) -> tuple[list[float], int]:
        """Log-probs of a given response under the engine's current weights (teacher forcing), and their version."""
        before = policy_version_of((await self.policy.model_info()).get("weight_version"))
        logprobs = await self.policy.score(prompt_ids, response_ids)
        after = policy_version_of((await self.policy.model_info()).get("weight_version"))
        if before != after:  # the weights changed under the call: score again (Temporal retries)
            raise ApplicationError(f"policy version moved from {before} to {after} while scoring", type="VersionMoved")
        return logprobs, after

    @activity.defn(name="step_vote")
    async def step_vote(self, req: StepJudgeRequest) -> Vote:
        text = await self.judge.complete_step(req)
        return Vote(raw=text, score=parse_score(text))

    @activity.defn(name="write_group_samples")
    async def write_group_samples(self, req: GroupSamplesRequest) -> GroupSamplesResult:
        return await asyncio.to_thread(self._write_group, req)

    def _write_group(self, req: GroupSamplesRequest) -> GroupSamplesResult:
        from openclaw_rl.samples import Sample, SampleWriter, make_sample_id

        store = self.stores.get(req.store_url)
        by_version: dict[int, list[Sample]] = {}
        dropped = 0
        for ep in req.episodes:
            for t, (ref, reward, adv) in enumerate(zip(ep.record_refs, ep.rewards, ep.advantages)):
                rec = json.loads(store.get_bytes(ref))
                if adv is None or not rec["response_ids"]:
                    dropped += 1
                    continue
                n = len(rec["response_ids"])
                meta = {"env": req.env, "task": ep.task_id, "episode": ep.episode_id, "attempt": rec["attempt"],
                        "outcome": ep.outcome, "reward_mode": req.reward_mode, "steps_omitted": rec["steps_omitted"],
                        "votes": ep.votes[t] if t < len(ep.votes) else []}
                sample = Sample(
                    sample_id=make_sample_id(req.group_id, ep.episode_id, t), run=req.run,
                    policy_version=int(rec["policy_version"]), prompt_ids=rec["prompt_ids"],
                    response_ids=rec["response_ids"], rollout_logprobs=rec["rollout_logprobs"], reward=float(reward),
                    method="binary", session=ep.episode_id, turn=t, group_id=req.group_id, step_index=t,
                    advantages=[float(adv)] * n, meta=json.dumps(meta), temperature=rec.get("temperature"))
                by_version.setdefault(sample.policy_version, []).append(sample)
        writer = SampleWriter(store, req.run)
        shards = [writer.write_shard(samples) for _, samples in sorted(by_version.items())]
        return GroupSamplesResult(shards=shards, written=sum(len(s) for s in by_version.values()), dropped=dropped)
