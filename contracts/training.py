"""Training: TrainingWorkflow and its activities (select_batch, train_step, push_weights, seal_version).

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.episode import RolloutInput, RolloutSummary

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


