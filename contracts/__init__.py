"""Every workflow / activity / signal / update / query input and output, as stdlib dataclasses.

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PingInput:
    message: str = "ping"


@dataclass
class PingOutput:
    message: str = ""
    worker_identity: str = ""
    task_queue: str = ""


# ---------------------------------------------------------------------------------------------------------------------
# Personal track: gateway -> SessionWorkflow
# ---------------------------------------------------------------------------------------------------------------------

SESSION_WORKFLOW = "SessionWorkflow"
SESSION_TURN_SIGNAL = "submit_turn"


def session_workflow_id(session_id: str) -> str:
    return f"session/{session_id}"


@dataclass
class TurnPayload:
    """The heavy part of a turn. Travels inline when small, else by reference (`TurnRef.payload_ref`)."""

    messages: list[dict] = field(default_factory=list)  # the prompt messages as trained (internal context removed)
    tools: list[dict] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    response_text: str = ""
    tool_calls: list[dict] = field(default_factory=list)


@dataclass
class TurnRef:
    """One served chat completion, as the gateway hands it to the session workflow."""

    request_id: str  # unique per served request: the idempotency key
    session_id: str  # already namespaced by API key: "<key_id>:<raw session id>"
    user: str  # API key id (never the key itself)
    turn_type: str = "main"  # "main" | "side"
    policy_version: int = 0  # engine weight_version that produced the response
    created_at: float = 0.0  # unix seconds
    payload: TurnPayload | None = None  # inline when small
    payload_ref: str = ""  # store blob ref when large
    session_done: bool = False  # X-Session-Done: 1 - this is the session's last turn
    finish_reason: str = ""
    # the prompt's trailing user/tool messages (after its last assistant message), always inline: this is the next
    # state of the session's previous main-line turn
    tail: list[dict] = field(default_factory=list)


@dataclass
class SessionConfig:
    run: str = "default"  # training run the samples feed
    method: str = "combined"  # "binary" | "opd" | "combined"
    votes: int = 3  # m
    idle_timeout_s: float = 1800.0  # no new turn for this long: close the session
    judge_timeout_s: float = 120.0  # per vote
    max_turns_per_run: int = 200  # continue-as-new after this many turns (or when the server suggests it)
    judge_queue: str = "openclaw-judge"  # votes, teacher log-probs and sample writes run here
    teacher_temperature: float = 1.0  # OPD teacher log-probs at this temperature (1.0: the paper's; < 1 sharper)


@dataclass
class SessionInput:
    session_id: str
    user: str = ""
    config: SessionConfig = field(default_factory=SessionConfig)
    # carried across continue-as-new
    pending: TurnRef | None = None  # last main-line turn, still waiting for its next state
    turn_index: int = 0  # index the next main-line turn will get
    seen_request_ids: list[str] = field(default_factory=list)
    turns_seen: int = 0
    samples_emitted: int = 0
    last_score: float = 0.0


@dataclass
class Vote:
    raw: str = ""
    score: int | None = None  # None: a failed vote (malformed, or the judge call failed)
    hint: str | None = None
    error: str = ""


@dataclass
class JudgeRequest:
    """Turn t with its next state, as a judge sees it."""

    session_id: str
    turn_index: int
    turn: TurnRef
    next_state: list[dict] = field(default_factory=list)  # the messages that followed turn t (user / tool)
    vote_index: int = 0
    kind: str = "prm"  # "prm" | "hint"


@dataclass
class TeacherRequest:
    turn: TurnRef
    hint: str
    temperature: float = 1.0  # of the teacher distribution (SessionConfig.teacher_temperature)


@dataclass
class TeacherResult:
    logprobs: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    logprobs_ref: str = ""  # set instead of logprobs when large


@dataclass
class EmitRequest:
    """Everything decided about turn t; the activity writes the sample (or its absence) and the judgement record."""

    run: str
    session_id: str
    user: str
    turn_index: int
    turn: TurnRef
    method: str
    next_state: list[dict] = field(default_factory=list)
    prm_votes: list[Vote] = field(default_factory=list)
    hint_votes: list[Vote] = field(default_factory=list)
    eval_score: int = 0
    hint: str | None = None
    emit: bool = False
    kind: str = ""  # "binary" | "opd" | "combined" | ""
    reward: float = 0.0
    reason: str = ""
    teacher: TeacherResult | None = None


@dataclass
class EmitResult:
    sample_id: str = ""  # empty: no sample
    written: bool = False
    reason: str = ""


@dataclass
class SessionStatus:
    session_id: str = ""
    turns_seen: int = 0
    main_turns: int = 0
    samples_emitted: int = 0
    judging_in_flight: int = 0
    pending_turn: int | None = None
    last_score: float = 0.0
    closed: bool = False


# ---------------------------------------------------------------------------------------------------------------------
# Training: TrainingWorkflow and its activities (select_batch, train_step, push_weights, seal_version)
# ---------------------------------------------------------------------------------------------------------------------

TRAINING_WORKFLOW = "TrainingWorkflow"
SAMPLES_AVAILABLE_SIGNAL = "samples_available"


def training_workflow_id(run: str) -> str:
    return f"training/{run}"


@dataclass
class TrainHparams:
    """What one train step needs to know about the optimisation (the trainer backend's TrainConfig, plus test hooks)."""

    lr: float = 1e-5  # paper: personal 1e-5, general 1e-6
    kl_beta: float = 0.0  # paper: 0 in simulation, general 0.01
    clip_eps: float = 0.2
    clip_eps_high: float = 0.28
    kl_estimator: str = "k3"
    loss_agg: str = "seq_mean_token_mean"
    ppo_epochs: int = 1
    num_minibatches: int = 1
    micro_batch_size: int = 0  # 0: a whole minibatch per forward pass
    micro_batch_tokens: int = 16384  # padded tokens per forward pass (a longer row goes alone); 0: no limit
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8  # AdamW's epsilon; larger: parameters with small gradients move less (see TrainConfig)
    w_binary: float = 1.0
    w_opd: float = 1.0
    negative_credit: str = "all"  # "teacher": a negative reward blames only tokens the hinted teacher disfavours
    negative_credit_margin: float = 0.69  # nats
    binary_credit: str = "all"  # "words": the binary reward skips the tokens that spell a number
    seed: int = 0
    step_sleep_s: float = 0.0  # tests: stretch a step (heartbeating) so a worker can be killed in the middle


@dataclass
class StepSummary:
    step: int = 0
    policy_version: int = 0  # the version the step produced
    n_samples: int = 0
    loss: float = 0.0
    clip_fraction: float = 0.0
    approx_kl: float = 0.0
    kl_ref: float = 0.0
    entropy: float = 0.0
    grad_norm: float = 0.0
    train_rollout_abs_diff_mean: float = 0.0
    train_rollout_abs_diff_max: float = 0.0
    tokens_per_s: float = 0.0
    duration_s: float = 0.0
    attempt: int = 1
    checkpoint: str = ""
    resumed_from: str = ""  # set when the trainer had to reload (a new worker, or a retry after a crash)
    reused: bool = False  # a retry found the step already checkpointed


@dataclass
class TrainingInput:
    """One training run. Flat on purpose, so `temporal workflow start --input '{"run": "r1", "lr": 1e-5}'` works.

    The fields after ``keep_checkpoints`` are state carried across continue-as-new; a new run leaves them alone.
    """

    run: str = "default"
    method: str = "combined"  # informational: each sample carries its own method
    batch_size: int = 16  # samples per train step (paper: 16, personal track)
    max_staleness: int = 0  # train on samples of versions [v - max_staleness, v]; 0 = strictly on-policy
    engines: list[str] = field(default_factory=list)  # policy engine base URLs that get every new version
    model_path: str = ""  # the base model (HF folder) the run starts from
    store_url: str = ""  # file://... or s3://...; empty: the worker's configured store
    max_steps: int = 0  # stop after this many train steps in total; 0 = run forever
    poll_s: float = 5.0  # first wait between checks for a full batch (doubles while nothing arrives)
    max_poll_s: float = 60.0
    steps_per_history: int = 50  # continue-as-new after this many steps (or when the server suggests it)
    step_timeout_s: float = 3600.0  # start-to-close of one train step
    push_timeout_s: float = 600.0  # start-to-close of one weight push (every engine loads the checkpoint)
    heartbeat_timeout_s: float = 120.0  # a trainer that stays silent this long is presumed dead; the step moves on
    keep_checkpoints: int = 3  # older step checkpoints are deleted once a newer one is live
    trainer_queue: str = "openclaw-trainer"
    # general track: the run drives its own rollouts (None: samples come from elsewhere, e.g. the gateway)
    rollout: RolloutInput | None = None  # what each rollout runs; its run and rollout id are the run's
    rollout_mode: str = "sync"  # "sync": a rollout runs only while no step trains; "async": one always runs, also
    #                             during steps (its samples may be up to max_staleness versions old when trained)
    # hyper-parameters (see TrainHparams)
    lr: float = 1e-5
    kl_beta: float = 0.0
    clip_eps: float = 0.2
    clip_eps_high: float = 0.28
    kl_estimator: str = "k3"
    loss_agg: str = "seq_mean_token_mean"
    ppo_epochs: int = 1
    num_minibatches: int = 1
    micro_batch_size: int = 0
    micro_batch_tokens: int = 16384
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    adam_eps: float = 1e-8  # AdamW's epsilon; larger: parameters with small gradients move less (see TrainConfig)
    w_binary: float = 1.0
    w_opd: float = 1.0
    negative_credit: str = "all"  # "teacher": a negative reward blames only tokens the hinted teacher disfavours
    negative_credit_margin: float = 0.69  # nats
    binary_credit: str = "all"  # "words": the binary reward skips the tokens that spell a number
    seed: int = 0
    step_sleep_s: float = 0.0
    # carried state
    step: int = 0  # train steps completed
    policy_version: int = 0  # the version engines serve; samples of this version are trainable
    checkpoint: str = ""  # store key prefix of the latest checkpoint ("" = the base model)
    checkpoint_version: int = 0  # the policy version that checkpoint holds; > policy_version: not pushed yet
    checkpoint_path: str = ""  # the folder the engines were told to load
    samples_trained: int = 0
    excluded_stale: int = 0  # samples archived without training because their version fell out of the window
    sealed_through: int = -1  # highest policy version whose samples are sealed
    paused: bool = False
    stop_requested: bool = False
    last_error: str = ""  # why the run paused itself (a step or a push failed after its retries)
    applied_requests: list[str] = field(default_factory=list)  # idempotency keys of applied updates (bounded)
    recent_steps: list[StepSummary] = field(default_factory=list)  # the last few steps, for `status`
    rollouts_started: int = 0
    recent_rollouts: list[RolloutSummary] = field(default_factory=list)  # the last few rollouts, for `status`


@dataclass
class SelectBatchInput:
    run: str
    store_url: str = ""
    policy_version: int = 0
    batch_size: int = 16
    max_staleness: int = 0
    take_all: bool = False  # once batch_size are there, take every untrained sample of the window (sync rollouts)


@dataclass
class SelectBatchOutput:
    sample_ids: list[str] = field(default_factory=list)  # empty unless a full batch is ready
    versions: list[int] = field(default_factory=list)  # live versions the ids come from
    available: int = 0  # untrained samples inside the staleness window
    stale_versions: list[int] = field(default_factory=list)  # live versions below the window: to be sealed
    already_trained: int = 0  # live samples the ledger already holds (an earlier attempt trained them)


@dataclass
class TrainStepInput:
    run: str
    step: int  # the step this call produces (1-based): the checkpoint of step - 1 is its starting point
    policy_version: int  # the version the batch was sampled from; the step produces policy_version + 1
    sample_ids: list[str] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    model_path: str = ""  # base model
    store_url: str = ""
    resume_from: str = ""  # store key prefix of the step - 1 checkpoint; "" = the base model
    hparams: TrainHparams = field(default_factory=TrainHparams)


@dataclass
class TrainStepOutput:
    step: int = 0
    policy_version: int = 0  # the new version (input + 1)
    checkpoint: str = ""  # store key prefix: checkpoints/run=<run>/step=<n>/
    checkpoint_url: str = ""  # file:///... or s3://...
    stats: dict = field(default_factory=dict)
    reused: bool = False  # an earlier attempt had finished the step; its checkpoint was kept
    resumed_from: str = ""  # what the in-memory model was loaded from ("" = it was already at step - 1)
    attempt: int = 1


@dataclass
class PushWeightsInput:
    engines: list[str] = field(default_factory=list)
    checkpoint: str = ""  # store key prefix of the checkpoint
    store_url: str = ""
    weight_version: str = ""


@dataclass
class PushWeightsOutput:
    engines: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already serving weight_version
    model_path: str = ""  # the local folder the engines loaded
    seconds: float = 0.0


@dataclass
class SealInput:
    run: str
    store_url: str = ""
    samples_through: int = -1  # seal sample partitions of every version <= this
    records_through: int = -1  # seal record partitions of every version <= this
    sealed_through: int = -1  # versions <= this were sealed before: only their late arrivals count as untrained
    checkpoints_before_step: int = 0  # delete the run's checkpoints of steps below this (0: keep all)


@dataclass
class SealOutput:
    versions: list[int] = field(default_factory=list)
    samples_archived: int = 0  # objects moved
    untrained_archived: int = 0  # distinct sample ids archived without ever being trained
    records_archived: int = 0
    checkpoints_deleted: int = 0


@dataclass
class ControlRequest:
    request_id: str = ""  # idempotency key; empty = none
    reason: str = ""


@dataclass
class HparamsUpdate:
    """set_hparams: every field left None keeps its value; takes effect at the next train step."""

    request_id: str = ""
    batch_size: int | None = None
    max_staleness: int | None = None
    max_steps: int | None = None
    engines: list[str] | None = None
    poll_s: float | None = None
    lr: float | None = None
    kl_beta: float | None = None
    clip_eps: float | None = None
    clip_eps_high: float | None = None
    ppo_epochs: int | None = None
    num_minibatches: int | None = None
    micro_batch_size: int | None = None
    micro_batch_tokens: int | None = None
    grad_clip: float | None = None
    w_binary: float | None = None
    w_opd: float | None = None
    negative_credit: str | None = None
    negative_credit_margin: float | None = None
    binary_credit: str | None = None
    step_sleep_s: float | None = None


@dataclass
class TrainingStatus:
    run: str = ""
    phase: str = ""  # "waiting" | "training" | "pushing" | "sealing" | "paused" | "stopped"
    step: int = 0
    policy_version: int = 0
    paused: bool = False
    stop_requested: bool = False
    batch_size: int = 0
    available: int = 0  # trainable samples at the current version (last check)
    samples_trained: int = 0
    excluded_stale: int = 0
    checkpoint: str = ""
    last_error: str = ""
    engines: list[str] = field(default_factory=list)
    hparams: TrainHparams = field(default_factory=TrainHparams)
    last_step: StepSummary | None = None
    recent_steps: list[StepSummary] = field(default_factory=list)
    rollouts_started: int = 0
    recent_rollouts: list[RolloutSummary] = field(default_factory=list)


def policy_version_of(weight_version: str | int | None) -> int:
    """Engines report `weight_version` as a string (SGLang starts at "default"); policy versions are integers."""
    try:
        return int(weight_version)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


# ---------------------------------------------------------------------------------------------------------------------
# General track: RolloutWorkflow -> EpisodeWorkflow -> env / policy / step-judge activities
# ---------------------------------------------------------------------------------------------------------------------

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


@dataclass
class EnvTasksRequest:
    env: str = "terminal"
    split: str = "train"


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
    """n episodes of each task, compared within each task's group. ``tasks`` empty: the env's ``split``."""

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
