"""Personal track: gateway -> SessionWorkflow -> judge, teacher and emit activities.

New fields always get defaults so older histories still decode.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlcore.judging import Vote

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
    user_name: str = ""  # the key's name (`keys add NAME`): the session is found by it in the Temporal UI
    # the key's own LoRA adapter (openclaw_rl.adapters), "" for a key on the shared policy: the session feeds that
    # adapter's run, and teacher log-probs are taken under it
    adapter: str = ""


@dataclass
class SessionConfig:
    run: str = "default"  # training run the samples feed
    method: str = "combined"  # "binary" | "opd" | "combined"
    votes: int = 3  # m
    idle_timeout_s: float = 1800.0  # no new turn for this long: close the session
    judge_timeout_s: float = 120.0  # per vote
    # a vote, teacher call or sample write whose worker stopped heartbeating this long is retried elsewhere (they beat
    # every 2 s while their call is in flight), long before judge_timeout_s
    heartbeat_timeout_s: float = 15.0
    max_turns_per_run: int = 200  # continue-as-new after this many turns (or when the server suggests it)
    judge_queue: str = "openclaw-judge"  # votes, teacher log-probs and sample writes run here
    teacher_temperature: float = 1.0  # OPD teacher log-probs at this temperature (1.0: the paper's; < 1 sharper)


@dataclass
class SessionInput:
    session_id: str
    user: str = ""
    user_name: str = ""
    config: SessionConfig = field(default_factory=SessionConfig)
    # carried across continue-as-new
    pending: TurnRef | None = None  # last main-line turn, still waiting for its next state
    turn_index: int = 0  # index the next main-line turn will get
    seen_request_ids: list[str] = field(default_factory=list)
    turns_seen: int = 0
    samples_emitted: int = 0
    last_score: float = 0.0


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
class VotesRequest:
    """Turn t with its next state, and how many votes of each kind to take: one activity for all of a turn's votes,
    so the turn is in the history once, not once per vote."""

    session_id: str
    turn_index: int
    turn: TurnRef
    next_state: list[dict] = field(default_factory=list)
    prm: int = 0  # PRM votes (binary, combined)
    hint: int = 0  # hint votes (opd, combined)


@dataclass
class Votes:
    prm: list[Vote] = field(default_factory=list)
    hint: list[Vote] = field(default_factory=list)


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


