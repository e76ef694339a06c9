"""EpisodeWorkflow: one general-track rollout episode (one per episode, replayable in the Temporal UI).

    env_reset -> the env (a live sandbox) stays in the worker that reset it
    loop up to max steps:
        policy_act (exact prompt ids, response ids, log-probs -> a record in the store)
        env_step on the env's worker (a malformed action is an observation, not an error)
        m step_vote activities, started in the background: they run while the next step does
    env_evaluate (outcome o), env_close
    r_t = o + mean(valid votes_t)  (rlcore.step_reward; ``reward="outcome"``: r_t = o)

Two ways to run, chosen by the task queue the episode was started on:

- on the env queue (``config.env_queue``; the RolloutWorkflow starts its episodes there): the workflow runs on an env
  worker and every call is a *local activity* in that worker's process, next to the env it reset. No call makes a
  server round trip; a whole episode is usually one workflow task. The votes are local too: a regular activity
  scheduled while local activities run only reaches the server when the workflow task completes, so it would not run
  alongside the next step. Losing the worker: its workflow task times out (the episode's workflow task timeout,
  10 s by default) and another env worker replays the history; the first env call it makes finds no env
  (``EpisodeNotFoundError``) and the episode restarts from scratch. If the worker died before any of the episode's
  progress was recorded (one workflow task, heartbeated every 80% of the task timeout), the replay simply runs it
  again from the start. If the same worker is only slow, its task times out and the replay may run again steps
  whose results the lost task held: the env hands back a step it already ran with the same action, and a step that
  comes with another action (or ahead of the env) is a ``StepOrderError``, which also restarts the episode.
- anywhere else (the orchestrator queue, as before): regular activities, the policy and votes on their queues, env
  calls on the worker-specific queue that ``env_reset`` returns; an env call not picked up within
  ``env_lost_after_s`` means the worker is gone and the episode restarts from scratch.

Either way the restart is bounded by ``env_restarts``; the env's state died with the worker, and samples are only
written after the episode, so nothing of the lost attempt is trained on. The result carries per-step rewards, votes
and record keys, never token ids; the RolloutWorkflow normalises rewards within its task group and writes the samples.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

with workflow.unsafe.imports_passed_through():
    from activities.episode import EnvActivities, EpisodeActivities
    from contracts.episode import (
        EPISODE_WORKFLOW,
        EnvEpisodeRef,
        EnvOutcome,
        EnvResetRequest,
        EnvResetResult,
        EnvStepRequest,
        EnvStepResult,
        EpisodeConfig,
        EpisodeInput,
        EpisodeProgress,
        EpisodeResult,
        EpisodeStep,
        PolicyRequest,
        PolicyResult,
        StepJudgeRequest,
    )
    from rlcore.general import step_reward
    from rlcore.judging import Vote

KEPT_CHARS = 2000  # of each action and observation in the result (the full ones are in the records)
HISTORY_CHARS = 4000  # of earlier steps shown to the step judge
ENV_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                        maximum_attempts=3,
                        non_retryable_error_types=["EpisodeNotFoundError", "StepOrderError", "SandboxError",
                                                   "KeyError", "ValueError", "TypeError"])
POLICY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                           maximum_attempts=5, non_retryable_error_types=["ContextTooLongError", "ValueError",
                                                                          "KeyError"])
VOTE_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10),
                         maximum_attempts=3)
_TOOL_CALL = re.compile(r"<tool_call>.*?(</tool_call>|$)", re.DOTALL)
LOCAL_PATCH = "episode-local-activities"  # episodes on the env queue call everything as local activities
STEP_ORDER_PATCH = "step-order-restarts"  # an env that no longer matches the history restarts the episode


class EnvLost(Exception):
    """The worker holding the episode's env is gone."""


class EnvDiverged(EnvLost):
    """The episode's env is there but no longer matches the history (``StepOrderError``): it is closed first."""


# how an activity fails for good: a local activity's own error arrives unwrapped, its timeout as an ActivityError
CALL_FAILED = (ActivityError, ApplicationError)


def _lost(err: ActivityError | ApplicationError) -> type[EnvLost] | None:
    """How the episode's env is lost, if it is: gone (``EnvLost``), or there but no longer matching the history
    (``EnvDiverged``). Either way the episode restarts on a fresh env."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, ActivityTimeoutError) and cause.type == TimeoutType.SCHEDULE_TO_START:
        return EnvLost
    if not isinstance(cause, ApplicationError):
        return None
    if cause.type == "EpisodeNotFoundError":
        return EnvLost
    # before the patch such an episode failed; its recorded histories replay as they ran
    if cause.type == "StepOrderError" and workflow.patched(STEP_ORDER_PATCH):
        return EnvDiverged
    return None


def _runs_local(cfg: EpisodeConfig) -> bool:
    """Whether this run calls everything as local activities. A new run decides by the queue it runs on (the worker's
    queue is not in the history); a replay follows the patch marker that decision left, or its absence."""
    if workflow.unsafe.is_replaying():
        return workflow.patched(LOCAL_PATCH)
    return workflow.info().task_queue == cfg.env_queue and workflow.patched(LOCAL_PATCH)


def _cut(text: str, n: int = KEPT_CHARS) -> str:
    return text if len(text) <= n else text[: n // 2] + f"\n[... {len(text) - n} characters ...]\n" + text[-n // 2:]


def judge_request(env: str, episode_id: str, instruction: str, steps: list[EpisodeStep], step: EpisodeStep,
                  info: dict) -> StepJudgeRequest:
    """What a step judge sees of step t: the task, the earlier steps, the reply, its tool call and its result."""
    earlier = "\n\n".join(f"Step {s.index}:\n{s.action}\n-> {s.observation}" for s in steps[:step.index])
    if len(earlier) > HISTORY_CHARS:
        earlier = "[...]\n" + earlier[-HISTORY_CHARS:]
    action = info.get("action")
    tool_calls = json.dumps(action) if action else f"(malformed: {step.parse_error or 'no tool call'})"
    return StepJudgeRequest(env=env, episode_id=episode_id, step_index=step.index, task_instruction=instruction,
                            history=earlier, assistant_text=_TOOL_CALL.sub("", step.action).strip() or "(none)",
                            tool_calls=tool_calls, tool_results=step.observation)


@workflow.defn(name=EPISODE_WORKFLOW)
class EpisodeWorkflow:
    def __init__(self) -> None:
        self.progress = EpisodeProgress(phase="starting")
        self.local = False

    @workflow.query
    def status(self) -> EpisodeProgress:
        return self.progress

    @workflow.run
    async def run(self, inp: EpisodeInput) -> EpisodeResult:
        if not inp.episode_id:
            inp = replace(inp, episode_id=workflow.info().workflow_id)
        if not inp.group_id:
            inp = replace(inp, group_id=inp.task_id)
        cfg = inp.config
        self.local = _runs_local(cfg)
        while True:
            try:
                result = await self._attempt(inp, self.progress.restarts)
                break
            except EnvLost as lost:
                workflow.logger.warning("env worker lost", extra={"episode": inp.episode_id, "error": str(lost)})
                if self.progress.restarts >= cfg.env_restarts:
                    result = EpisodeResult(episode_id=inp.episode_id, task_id=inp.task_id, group_id=inp.group_id,
                                           env=cfg.env, reward_mode=cfg.reward,
                                           error=f"env worker lost {self.progress.restarts + 1} times: {lost}")
                    break
                self.progress.restarts += 1
        result.restarts = self.progress.restarts
        self.progress.phase = "done"
        return result

    async def _call(self, act: Callable[..., Any], arg: object, queue: str, timeout_s: float,
                    retry: RetryPolicy, lost_after_s: float | None = None) -> Any:
        """The activity method ``act``: a local activity in this worker's process (episodes on the env queue), else an
        activity on ``queue``."""
        if self.local:
            return await workflow.execute_local_activity_method(
                act, arg, start_to_close_timeout=timedelta(seconds=timeout_s), retry_policy=retry)
        return await workflow.execute_activity_method(
            act, arg, task_queue=queue,
            schedule_to_start_timeout=None if lost_after_s is None else timedelta(seconds=lost_after_s),
            start_to_close_timeout=timedelta(seconds=timeout_s), retry_policy=retry)

    async def _env(self, queue: str, act: Callable[..., Any], arg: object, cfg: EpisodeConfig) -> Any:
        timeout = cfg.env_timeout_s + float(cfg.env_options.get("command_timeout_s", 10.0))
        try:
            return await self._call(act, arg, queue, timeout, ENV_RETRY, cfg.env_lost_after_s)
        except CALL_FAILED as err:
            if lost := _lost(err):
                raise lost(str(err.cause or err)) from err
            raise

    async def _attempt(self, inp: EpisodeInput, attempt: int) -> EpisodeResult:
        cfg = inp.config
        self.progress.phase, self.progress.steps = "reset", 0
        reset: EnvResetResult = await self._call(
            EnvActivities.env_reset,
            EnvResetRequest(episode_id=inp.episode_id, env=cfg.env, task_id=inp.task_id, attempt=attempt,
                            max_steps=cfg.max_steps, options=dict(cfg.env_options)),
            cfg.env_queue, cfg.env_timeout_s, ENV_RETRY)
        queue = reset.task_queue
        self.progress.worker_queue = queue
        ref = EnvEpisodeRef(episode_id=inp.episode_id, attempt=attempt)
        messages = [{"role": "system", "content": reset.system_prompt}, {"role": "user", "content": reset.observation}]
        steps: list[EpisodeStep] = []
        votes: list[asyncio.Task[list[Vote]]] = []
        try:
            for t in range(reset.max_steps):
                self.progress.phase, self.progress.steps = "policy", t
                pol: PolicyResult = await self._call(
                    EpisodeActivities.policy_act, PolicyRequest(
                        run=cfg.run, episode_id=inp.episode_id, messages=list(messages), attempt=attempt,
                        step_index=t, env=cfg.env, task_id=inp.task_id, episode_index=inp.index, policy=cfg.policy,
                        scripted_error_rate=cfg.scripted_error_rate, seed=cfg.seed, seed_by_task=cfg.seed_by_task,
                        temperature=cfg.temperature,
                        max_new_tokens=cfg.max_new_tokens, max_context_tokens=cfg.max_context_tokens,
                        store_url=cfg.store_url),
                    cfg.policy_queue, cfg.policy_timeout_s, POLICY_RETRY)
                self.progress.phase = "env"
                st: EnvStepResult = await self._env(
                    queue, EnvActivities.env_step, EnvStepRequest(episode_id=inp.episode_id, attempt=attempt,
                                                                  step_index=t, action=pol.text), cfg)
                messages += [{"role": "assistant", "content": pol.text}, {"role": "tool", "content": st.observation}]
                step = EpisodeStep(index=t, action=_cut(pol.text), observation=_cut(st.observation),
                                   parse_error=str(st.info.get("parse_error", "")), policy_version=pol.policy_version,
                                   prompt_tokens=pol.prompt_tokens, completion_tokens=pol.completion_tokens,
                                   steps_omitted=pol.steps_omitted, record_ref=pol.record_ref)
                steps.append(step)
                if cfg.reward == "outcome+process" and cfg.votes > 0:
                    req = judge_request(cfg.env, inp.episode_id, reset.instruction, steps, step, st.info)
                    votes.append(asyncio.create_task(self._votes(req, cfg)))
                if st.done:
                    break
            self.progress.phase = "evaluate"
            outcome: EnvOutcome = await self._env(queue, EnvActivities.env_evaluate, ref, cfg)
        except EnvLost as lost:
            for task in votes:
                task.cancel()
            if isinstance(lost, EnvDiverged):
                await self._close(queue, ref, cfg)
            raise
        except BaseException:  # a policy or env call failed for good, or the workflow was cancelled: free the sandbox
            await self._close(queue, ref, cfg)
            raise
        await self._close(queue, ref, cfg)
        self.progress.phase = "judging"
        for step, task in zip(steps, votes):
            step.votes = await task
        for step in steps:
            scores = [v.score for v in step.votes]
            step.reward = step_reward(outcome.reward, scores) if cfg.reward == "outcome+process" else outcome.reward
        return EpisodeResult(episode_id=inp.episode_id, task_id=inp.task_id, group_id=inp.group_id, env=cfg.env,
                             reward_mode=cfg.reward, outcome=outcome.reward, success=outcome.success,
                             detail=outcome.detail, steps=steps)

    async def _close(self, queue: str, ref: EnvEpisodeRef, cfg: EpisodeConfig) -> None:
        try:
            await self._env(queue, EnvActivities.env_close, ref, cfg)
        except (*CALL_FAILED, EnvLost) as err:  # the env worker reaps what is left
            workflow.logger.warning("env close failed", extra={"episode": ref.episode_id, "error": str(err)})

    async def _votes(self, req: StepJudgeRequest, cfg: EpisodeConfig) -> list[Vote]:
        return list(await asyncio.gather(*(self._vote(replace(req, vote_index=i), cfg) for i in range(cfg.votes))))

    async def _vote(self, req: StepJudgeRequest, cfg: EpisodeConfig) -> Vote:
        try:
            return await self._call(EpisodeActivities.step_vote, req, cfg.judge_queue, cfg.judge_timeout_s, VOTE_RETRY)
        except CALL_FAILED as err:  # a failed vote is left out of the mean; it never fails the episode
            return Vote(raw="", score=None, error=str(err.cause or err)[:500])
