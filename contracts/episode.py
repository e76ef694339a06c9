"""General track: RolloutWorkflow -> EpisodeWorkflow -> env / policy / step-judge activities.

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.judging import Vote

EPISODE_WORKFLOW = "EpisodeWorkflow"
ROLLOUT_WORKFLOW = "RolloutWorkflow"


def episode_workflow_id(episode_id: str) -> str:
    return f"episode/{episode_id}"


def rollout_workflow_id(rollout_id: str) -> str:
    return f"rollout/{rollout_id}"


@dataclass
class EpisodeConfig:
    """How one episode runs. Everything has a default, so ``--input '{"task_id": "count_lines"}'`` is enough."""

    env: str = "terminal"
    run: str = "default"  # the training run the samples feed
    reward: str = "outcome+process"  # "outcome+process": r_t = o + mean(PRM votes); "outcome": r_t = o
    votes: int = 3  # m step-judge votes per step (outcome+process only)
    max_steps: int = 0  # 0: the env's own (terminal 10)
    env_options: dict = field(default_factory=dict)  # env-specific, e.g. {"command_timeout_s": 10}
    # "engine": sample from the policy engine; "scripted": the task's reference actions with seeded mistakes
    # (rate ``scripted_error_rate``), their log-probs scored by the engine (for tests and benchmarks)
    policy: str = "engine"
    scripted_error_rate: float = 0.0
    temperature: float = 1.0
    max_new_tokens: int = 256
    max_context_tokens: int = 32768  # prompt + completion; the engine's context length caps it too
    seed: int = 0
    # True: sampling seeds follow (seed, task, index in the group, step) alone, so two runs (or two evaluations of one
    # run) draw the same random numbers on the same task; False: the episode id's too
    seed_by_task: bool = False
    store_url: str = ""  # empty: the worker's store
    policy_queue: str = "openclaw-judge"
    judge_queue: str = "openclaw-judge"
    env_queue: str = "openclaw-env"  # resets go here; the worker that resets an episode serves its other calls
    policy_timeout_s: float = 300.0
    judge_timeout_s: float = 120.0
    env_timeout_s: float = 120.0  # start-to-close of one env call, on top of the env's own command timeout
    env_lost_after_s: float = 30.0  # an env call not picked up this long: its worker is gone, the episode restarts
    env_restarts: int = 1  # restarts from scratch after losing the env worker


@dataclass
class EpisodeInput:
    task_id: str
    episode_id: str = ""  # empty: the workflow id
    group_id: str = ""  # the rollout group (task) it is compared within; empty: the task id
    index: int = 0  # its index in the group
    config: EpisodeConfig = field(default_factory=EpisodeConfig)


FRESH_SPLIT = "fresh"  # a rollout's split: fresh instances of the env's families (envs.base.TaskSuite.fresh)
FRESH_TASKS = 16  # fresh instances per rollout where its sample_tasks is 0


@dataclass
class EnvTasksRequest:
    env: str = "terminal"
    split: str = "train"
    fresh: int = 0  # > 0: this many fresh instances (TaskSuite.fresh) for fresh_seed instead of the split's tasks
    fresh_seed: str = ""
    # "mixed": fresh instances drawn by rlcore.curriculum.mixed_weights over family_history (family -> recent
    # [successes, episodes] pairs of the run's training groups); "none" or "": every family alike
    curriculum: str = ""
    family_history: dict[str, list[list[int]]] = field(default_factory=dict)


@dataclass
class EnvTasksResult:
    task_ids: list[str] = field(default_factory=list)


@dataclass
class EnvResetRequest:
    episode_id: str
    env: str
    task_id: str
    attempt: int = 0  # restarts of the episode so far
    max_steps: int = 0
    options: dict = field(default_factory=dict)


@dataclass
class EnvResetResult:
    task_queue: str = ""  # the worker-specific queue that serves this episode's step / evaluate / close
    observation: str = ""
    system_prompt: str = ""
    instruction: str = ""
    max_steps: int = 0
    worker: str = ""


@dataclass
class EnvStepRequest:
    episode_id: str
    attempt: int = 0
    step_index: int = 0  # a retry of an applied step gets its recorded result; it is never run twice
    action: str = ""  # the policy's text as generated


@dataclass
class EnvStepResult:
    observation: str = ""
    done: bool = False
    info: dict = field(default_factory=dict)  # exit status, timed out, parse error, the parsed action


@dataclass
class EnvEpisodeRef:
    episode_id: str
    attempt: int = 0


@dataclass
class EnvOutcome:
    reward: float = 0.0
    success: bool = False
    detail: str = ""


@dataclass
class PolicyRequest:
    run: str
    episode_id: str
    messages: list[dict] = field(default_factory=list)  # the whole history; the activity fits it to the context
    attempt: int = 0
    step_index: int = 0
    env: str = ""
    task_id: str = ""
    episode_index: int = 0  # in its group: with seed, task and attempt it fixes the scripted policy's choices
    policy: str = "engine"
    scripted_error_rate: float = 0.0
    seed: int = 0
    seed_by_task: bool = False
    temperature: float = 1.0
    max_new_tokens: int = 256
    max_context_tokens: int = 32768
    store_url: str = ""


@dataclass
class PolicyResult:
    text: str = ""
    policy_version: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = ""
    steps_omitted: int = 0  # earlier steps left out of the context (head/tail context management)
    record_ref: str = ""  # store key of the exact prompt ids, response ids and log-probs


@dataclass
class StepJudgeRequest:
    """One step as a step judge sees it (the fields of the prompts/ ``general_<env>`` templates)."""

    env: str
    episode_id: str
    step_index: int
    task_instruction: str = ""
    history: str = ""
    assistant_text: str = ""
    tool_calls: str = ""
    tool_results: str = ""
    vote_index: int = 0


@dataclass
class EpisodeStep:
    index: int = 0
    action: str = ""  # the policy's text (cut to a few thousand characters)
    observation: str = ""  # (cut likewise)
    parse_error: str = ""
    votes: list[Vote] = field(default_factory=list)
    reward: float = 0.0  # r_t
    policy_version: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps_omitted: int = 0
    record_ref: str = ""


@dataclass
class EpisodeResult:
    episode_id: str = ""
    task_id: str = ""
    group_id: str = ""
    env: str = ""
    reward_mode: str = ""
    outcome: float = 0.0
    success: bool = False
    detail: str = ""
    steps: list[EpisodeStep] = field(default_factory=list)
    restarts: int = 0
    error: str = ""  # set: the episode failed and gives no samples


@dataclass
class EpisodeProgress:
    phase: str = ""
    steps: int = 0
    restarts: int = 0
    worker_queue: str = ""


@dataclass
class RolloutInput:
    """n episodes of each task, compared within each task's group. ``tasks`` empty: the env's ``split``, or with
    ``split="fresh"`` (``FRESH_SPLIT``) ``sample_tasks`` (else ``FRESH_TASKS``) instances of the env's families made
    for this rollout, which no other rollout and no eval task shares (the terminal and SWE envs)."""

    run: str = "default"
    env: str = "terminal"
    tasks: list[str] = field(default_factory=list)
    split: str = "train"
    n: int = 8  # episodes per task
    max_parallel: int = 8  # episodes running at once
    rollout_id: str = ""  # empty: the workflow id
    episode: EpisodeConfig = field(default_factory=EpisodeConfig)  # its run and env are the rollout's
    notify_training: bool = True  # signal the run's training workflow once the samples are written
    write_samples: bool = True  # False: an evaluation; episodes run and are judged, nothing is trained on them
    sample_tasks: int = 0  # > 0: run only this many of the tasks, a deterministic random choice of each rollout
    sample_seed: int = 0  # != 0: the choice depends on (sample_seed, sample_round) only, so runs compared side by
    #                       side see the same tasks in the same round; 0: on the rollout's own random stream
    sample_round: int = 0  # set by a TrainingWorkflow to its rollout's index
    # < 0: the paper's A_t = z-score of r_t = o + mean(votes) in its bucket; >= 0: the outcome and the votes
    # normalised apart, A_t = A(o) + process_weight * A(votes) (rlcore.outcome_process_advantages)
    process_weight: float = -1.0
    # with split="fresh": "mixed" draws the families whose recent training groups split more often
    # (rlcore.curriculum); family_history is filled in by the run's TrainingWorkflow from its earlier rollouts
    curriculum: str = ""
    family_history: dict[str, list[list[int]]] = field(default_factory=dict)


@dataclass
class EpisodeSamples:
    episode_id: str
    task_id: str = ""
    outcome: float = 0.0
    record_refs: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    advantages: list[float | None] = field(default_factory=list)  # None: the step carries no signal, not written
    votes: list[list[int | None]] = field(default_factory=list)


@dataclass
class GroupSamplesRequest:
    run: str
    group_id: str
    env: str = ""
    reward_mode: str = ""
    store_url: str = ""
    episodes: list[EpisodeSamples] = field(default_factory=list)


@dataclass
class GroupSamplesResult:
    shards: list[str] = field(default_factory=list)
    written: int = 0
    dropped: int = 0  # steps without signal (an all-equal bucket) or without response tokens


@dataclass
class RolloutResult:
    rollout_id: str = ""
    run: str = ""
    env: str = ""
    episodes: int = 0
    failed: int = 0
    successes: int = 0
    mean_outcome: float = 0.0
    steps: int = 0
    samples_written: int = 0
    steps_dropped: int = 0
    shards: list[str] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # "<episode id>: <why>"
    outcomes: dict[str, list[float]] = field(default_factory=dict)  # task id -> outcome of each good episode
    invalid_steps: int = 0  # steps of good episodes whose action did not parse (of ``steps``)


@dataclass
class RolloutSummary:
    """One rollout of a training run that drives its own (``TrainingInput.rollout``)."""

    index: int = 0
    rollout_id: str = ""
    started_at_version: int = 0
    episodes: int = 0
    failed: int = 0
    successes: int = 0
    mean_outcome: float = 0.0
    samples_written: int = 0
    policy_versions: list[int] = field(default_factory=list)
