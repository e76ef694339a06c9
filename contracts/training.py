"""Training: TrainingWorkflow and its activities (select_batch, train_step, push_weights, seal_version; for adapter
runs with a gate evaluate_candidate; base_checkpoint, find_version and record_training_event for rollbacks and events).

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from contracts.episode import RolloutInput, RolloutSummary

TRAINING_WORKFLOW = "TrainingWorkflow"
SAMPLES_AVAILABLE_SIGNAL = "samples_available"


# every linear layer of a Qwen/Llama-style block: attention and MLP
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
CANDIDATE_SUFFIX = "~candidate"
# what a training run writes into the ``events`` records (besides ALARM_EVENT)
EVENT_ACCEPTED, EVENT_REJECTED, EVENT_ROLLBACK = "version_accepted", "version_rejected", "rollback"
ALARM_EVENT = "reward_hacking_suspected"  # raised by gated runs and by the general experiment alike
VERDICT_FILE = "verdict.json"


def training_workflow_id(run: str) -> str:
    return f"training/{run}"


def candidate_adapter(adapter: str) -> str:
    """The name a candidate version of ``adapter`` is staged under in an engine while the gate scores it: beside the
    live adapter, so users keep being served by the live one."""
    return adapter + CANDIDATE_SUFFIX


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
    adapter: str = ""  # LoRA adapter name: only the adapter trains, the base stays frozen; "" = the full model
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))


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
    reward_mean: float = 0.0  # mean reward of the batch's samples (what the run optimises)
    train_rollout_abs_diff_mean: float = 0.0
    train_rollout_abs_diff_max: float = 0.0
    tokens_per_s: float = 0.0
    duration_s: float = 0.0
    attempt: int = 1
    checkpoint: str = ""
    resumed_from: str = ""  # set when the trainer had to reload (a new worker, or a retry after a crash)
    reused: bool = False  # a retry found the step already checkpointed


@dataclass
class GateVerdict:
    """What the gate said about one candidate version (also ``verdict.json`` in its checkpoint)."""

    version: int = 0  # the candidate's policy version (served as such only when accepted)
    step: int = 0
    checkpoint: str = ""
    accepted: bool = True
    live: float = 0.0  # held-out score of the live version
    candidate: float = 0.0  # held-out score of the candidate
    n: int = 0  # held-out problems scored
    margin: float = 0.0
    reason: str = ""


@dataclass
class GatePoint:
    """One gated step: the batch's training reward next to the candidate's held-out score (the alarm compares them)."""

    step: int = 0
    version: int = 0
    train_reward: float = 0.0
    heldout: float = 0.0


@dataclass
class ServedVersion:
    """A policy version the engines were given, and the checkpoint it is (for ``rollback``)."""

    version: int = 0
    checkpoint: str = ""  # "" = the base model
    step: int = 0  # the train step that wrote the checkpoint
    source: str = "train"  # "train" | "rollback"


@dataclass
class TrainingInput:
    """One training run. Flat on purpose, so `temporal workflow start --input '{"run": "r1", "lr": 1e-5}'` works.

    The fields from ``step`` on are state carried across continue-as-new; a new run leaves them alone.

    With ``adapter`` the run trains a LoRA adapter of that name on a frozen base and the engines serve it beside the
    base (``/load_lora_adapter``); with ``gate`` too, every new version is scored on a held-out check against the live
    one before it is served, and a worse one is kept out.
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
    # per-user adapter (see TrainHparams) and the gate in front of every push
    adapter: str = ""
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    gate: str = ""  # held-out check a candidate must pass before it is served, e.g. "personal:student"; "" = none
    gate_margin: float = 0.05  # a candidate scoring more than this below the live version is rejected
    gate_problems: int = 16  # held-out problems per evaluation (the same ones every time: scores compare over steps)
    gate_timeout_s: float = 1800.0  # start-to-close of one evaluation (it heartbeats)
    # carried state
    step: int = 0  # train steps completed
    policy_version: int = 0  # the version engines serve; samples of this version are trainable
    checkpoint: str = ""  # store key prefix of the checkpoint the next step starts from ("" = the base model)
    checkpoint_version: int = 0  # the policy version that checkpoint holds; > policy_version: not pushed yet
    checkpoint_path: str = ""  # what the engines were told to load (a folder, or a store URL they download)
    checkpoint_step: int = -1  # the train step that wrote ``checkpoint`` (-1: ``step``, as before rollbacks existed)
    live_checkpoint: str = ""  # the checkpoint of the version the engines serve ("" = the base model)
    live_step: int = -1  # the step that wrote it (-1: not known yet)
    rollback_to: int = -1  # >= 0: the unpushed checkpoint is this version's, rolled back to (pushed without the gate)
    versions_rejected: int = 0
    rollbacks: int = 0
    last_verdict: GateVerdict | None = None
    gate_points: list[GatePoint] = field(default_factory=list)  # the last few gated steps, for the alarm
    served: list[ServedVersion] = field(default_factory=list)  # the last versions pushed, newest last
    samples_trained: int = 0
    excluded_stale: int = 0  # samples archived without training because their version fell out of the window
    sealed_through: int = -1  # highest policy version whose samples are sealed
    paused: bool = False
    pause_at_version: int = 0  # > 0: pause once the run serves this version (``pause`` with ``at_version``)
    stop_requested: bool = False
    last_error: str = ""  # why the run paused itself (a step or a push failed after its retries)
    applied_requests: list[str] = field(default_factory=list)  # idempotency keys of applied updates (bounded)
    recent_steps: list[StepSummary] = field(default_factory=list)  # the last few steps, for `status`
    rollouts_started: int = 0
    recent_rollouts: list[RolloutSummary] = field(default_factory=list)  # the last few rollouts, for `status`
    # fresh rollouts with a curriculum: family -> its last training groups' [successes, episodes]
    family_history: dict[str, list[list[int]]] = field(default_factory=dict)


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
    resume_from: str = ""  # store key prefix of the checkpoint to start from; "" = the base model
    hparams: TrainHparams = field(default_factory=TrainHparams)
    # the step that wrote ``resume_from``; -1: step - 1. Lower after a rejected candidate or a rollback: the step
    # starts again from the live checkpoint
    resume_step: int = -1


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
    checkpoint: str = ""  # store key prefix of the checkpoint; "" = the base model at ``model_path``
    store_url: str = ""
    weight_version: str = ""
    adapter: str = ""  # an adapter run: the engines load the checkpoint as this LoRA adapter
    model_path: str = ""  # the base model folder (on the engines' host), pushed when ``checkpoint`` is ""


@dataclass
class PushWeightsOutput:
    engines: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already serving weight_version
    model_path: str = ""  # what the engines were told to load: a folder, or a store URL they download themselves
    seconds: float = 0.0


@dataclass
class SealInput:
    run: str
    store_url: str = ""
    samples_through: int = -1  # seal sample partitions of every version <= this
    records_through: int = -1  # seal record partitions of every version <= this
    sealed_through: int = -1  # versions <= this were sealed before: only their late arrivals count as untrained
    checkpoints_before_step: int = 0  # delete the run's checkpoints of steps below this (0: keep all)
    keep: list[str] = field(default_factory=list)  # checkpoint prefixes never deleted (the live one, the next start)


@dataclass
class SealOutput:
    versions: list[int] = field(default_factory=list)
    samples_archived: int = 0  # objects moved
    untrained_archived: int = 0  # distinct sample ids archived without ever being trained
    records_archived: int = 0
    checkpoints_deleted: int = 0


@dataclass
class EvaluateInput:
    """evaluate_candidate: stage the candidate checkpoint in ``engine`` beside the live adapter and score both."""

    run: str
    store_url: str = ""
    engine: str = ""
    adapter: str = ""
    checkpoint: str = ""  # the candidate's store key prefix
    step: int = 0
    candidate_version: int = 0
    live_version: int = 0
    gate: str = ""
    margin: float = 0.05
    problems: int = 16
    seed: int = 0
    train_reward: float = 0.0  # the step's batch reward, recorded beside the scores in the event


@dataclass
class BaseCheckpointInput:
    """base_checkpoint: an adapter run's version 0 as a checkpoint (a fresh adapter: the base unchanged)."""

    run: str
    store_url: str = ""
    model_path: str = ""
    hparams: TrainHparams = field(default_factory=TrainHparams)


@dataclass
class FindVersionInput:
    """find_version: the checkpoint that holds policy version ``version`` (``checkpoint``: where the run recorded it,
    "" to look it up in the store)."""

    run: str
    store_url: str = ""
    version: int = 0
    checkpoint: str = ""


@dataclass
class FindVersionOutput:
    checkpoint: str = ""
    step: int = 0


@dataclass
class TrainingEvent:
    """One ``events`` record of a training run (``record_training_event``); ``fields`` are extra columns."""

    run: str
    store_url: str = ""
    event: str = ""
    policy_version: int = 0
    message: str = ""
    adapter: str = ""
    key: str = ""  # what makes the event unique in the run (a retry rewrites the same record)
    fields: dict = field(default_factory=dict)


@dataclass
class RollbackRequest:
    """rollback: serve the weights of policy version ``to_version`` again, as a new version (0: the base model)."""

    to_version: int = 0
    request_id: str = ""
    reason: str = ""


@dataclass
class ControlRequest:
    request_id: str = ""  # idempotency key; empty = none
    reason: str = ""
    # pause only: > the current policy version, the run pauses itself once it serves that version (before its next
    # rollout or step), however late the caller looks; 0: at the next step boundary
    at_version: int = 0


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
    gate_margin: float | None = None
    gate_problems: int | None = None


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
    adapter: str = ""  # "" = a full-model run
    gate: str = ""
    live_version: int = 0  # the version the engines serve (policy_version; an unpushed or rejected one is not live)
    live_checkpoint: str = ""  # its checkpoint ("" = the base model)
    last_verdict: GateVerdict | None = None
    versions_rejected: int = 0
    rollbacks: int = 0
    last_step: StepSummary | None = None
    recent_steps: list[StepSummary] = field(default_factory=list)
    rollouts_started: int = 0
    recent_rollouts: list[RolloutSummary] = field(default_factory=list)
    max_steps: int = 0  # the run stops after this many train steps (0: never by itself)
    # fresh rollouts with a curriculum: family -> its last training groups' [successes, episodes]
    family_history: dict[str, list[list[int]]] = field(default_factory=dict)


