"""Drive the gateway the way a real agent client does: the stock ``openai`` AsyncOpenAI client, streamed replies, and
the session headers a client sets (``X-Session-Id``, ``X-Turn-Type``, ``X-Session-Done: 1`` on the last request).

One conversation per problem, with a simulated user (envs.personal.users)::

    opening -> answer 1 -> reaction 1 -> answer 2 -> reaction 2 -> ... (``rounds`` reactions)

A reaction reaches the gateway the only way a next state can: as the last user message of the conversation's next
request. So the request that carries the final reaction is the session's last one (``X-Session-Done: 1``); its answer
is served and logged but never judged (it has no next state). A user who is satisfied (praise) ends the conversation
early, the praise still going out as the closing request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from openai import AsyncOpenAI

from envs.personal.problems import Problem
from envs.personal.users import Reaction
from openclaw_rl.versions import version_of_fingerprint


class SimulatedUser(Protocol):
    setting: str

    def opening(self, problem: Problem) -> str: ...

    def react(self, problem: Problem, answer: str) -> Reaction: ...

    def score(self, problem: Problem, answer: str) -> float: ...


@dataclass
class Reply:
    text: str
    policy_version: int | None  # from the stream's ``system_fingerprint`` ("policy-<version>"), if sent
    finish_reason: str = ""


@dataclass
class ConversationLog:
    problem_id: str
    session_id: str  # the raw id sent as X-Session-Id (the gateway namespaces it by API key)
    messages: list[dict[str, str]] = field(default_factory=list)  # the whole conversation, closing answer included
    answers: list[str] = field(default_factory=list)  # every answer, the closing one last
    reactions: list[dict[str, Any]] = field(default_factory=list)  # {"text", "kind", "satisfied"} per judged answer
    scores: list[float] = field(default_factory=list)  # personalization score of every answer
    policy_versions: list[int | None] = field(default_factory=list)  # per answer

    @property
    def first_answer(self) -> str:
        return self.answers[0] if self.answers else ""

    @property
    def satisfied(self) -> bool:
        return bool(self.reactions) and bool(self.reactions[-1]["satisfied"])


class GatewayDriver:
    """An OpenAI client pointed at the gateway. No client-side retries: a retried POST would be a second served turn."""

    def __init__(self, base_url: str, api_key: str, *, model: str = "openclaw", temperature: float = 0.7,
                 max_tokens: int = 320, timeout_s: float = 300.0) -> None:
        self.client = AsyncOpenAI(base_url=base_url.rstrip("/") + "/v1", api_key=api_key, max_retries=0,
                                  timeout=float(timeout_s))  # a plain number: the client's HTTP library is its own
        self.model = model
        self.temperature = temperature
        self.max_tokens = max_tokens

    async def chat(self, messages: list[dict[str, str]], *, session_id: str, turn_type: str = "main",
                   done: bool = False, seed: int | None = None, temperature: float | None = None) -> Reply:
        """One streamed chat completion with the session headers; returns the assembled reply."""
        headers = {"X-Session-Id": session_id, "X-Turn-Type": turn_type}
        if done:
            headers["X-Session-Done"] = "1"
        extra: dict[str, Any] = {}
        if seed is not None:
            extra["seed"] = seed
        stream = await self.client.chat.completions.create(
            model=self.model, messages=messages, stream=True, max_tokens=self.max_tokens,
            temperature=self.temperature if temperature is None else temperature, extra_headers=headers, **extra)
        parts: list[str] = []
        fingerprint, finish = None, ""
        async for chunk in stream:
            fingerprint = chunk.system_fingerprint or fingerprint
            for choice in chunk.choices:
                if choice.delta and choice.delta.content:
                    parts.append(choice.delta.content)
                if choice.finish_reason:
                    finish = choice.finish_reason
        return Reply("".join(parts), version_of_fingerprint(fingerprint), finish)

    async def converse(self, user: SimulatedUser, problem: Problem, *, session_id: str, rounds: int = 2,
                       stop_when_satisfied: bool = True, seed: int | None = None) -> ConversationLog:
        """One conversation about ``problem``: ``rounds`` judged answers, each followed by the user's reaction."""
        log = ConversationLog(problem_id=problem.id, session_id=session_id)
        log.messages.append({"role": "user", "content": user.opening(problem)})
        for i in range(rounds + 1):
            closing = i == rounds or (stop_when_satisfied and log.satisfied)
            reply = await self.chat(log.messages, session_id=session_id, done=closing,
                                    seed=None if seed is None else seed + i)
            log.messages.append({"role": "assistant", "content": reply.text})
            log.answers.append(reply.text)
            log.scores.append(user.score(problem, reply.text))
            log.policy_versions.append(reply.policy_version)
            if closing:
                break
            reaction = user.react(problem, reply.text)
            log.reactions.append({"text": reaction.text, "kind": reaction.kind, "satisfied": reaction.satisfied})
            log.messages.append({"role": "user", "content": reaction.text})
        return log

    async def aclose(self) -> None:
        await self.client.close()
