"""The held-out check that gates a new policy version: the live adapter and a candidate, scored side by side.

Before a trained adapter replaces the one users are served with, both answer the same held-out problems and are
scored with the experiment's own evaluation (``envs.personal.evaluate.evaluate``): the same openings from a fresh
simulated user, sent as first messages, and the same rubric (personalization score, task accuracy, malformed share).
Reusing it rather than rebuilding prompts keeps the gate and the reported figures measuring one thing.

- Problems: held-out problems (``heldout_problems``: never trained on) drawn with ``GATE_SEED + seed``, leaving out
  the ones the experiment reports its figures on (the first ``REPORTED_PROBLEMS`` of ``EVAL_SEED``'s draw): a gate
  that picked versions by those problems would flatter the reported "after" score.
- Answers are greedy (temperature 0), so a version's score is a property of its weights, not of a sampling draw:
  scoring the same version twice gives the same number, and a difference between live and candidate is theirs.
- The engine speaks SGLang's OpenAI API: ``model`` = ``"<served name>:<adapter>"`` selects an adapter, the plain
  served name the base weights. An engine that does not know an adapter name may quietly serve the base model
  instead, which would make the gate compare the base with itself; so an adapter the engine does not list (in
  ``/v1/models`` entries with a ``parent``, or ``/get_model_info``'s ``loaded_lora_adapters``) is an error.
- Both versions' requests are in flight together, so the engine batches them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from envs.personal.driver import GatewayDriver
from envs.personal.evaluate import EVAL_SEED, Evaluation, evaluate, heldout_problems
from envs.personal.problems import Problem, iter_problems

GATES = {"personal:student": "student", "personal:teacher": "teacher", "personal:structured": "structured"}
GATE_SEED = EVAL_SEED + 1_000_003
REPORTED_PROBLEMS = 216  # the experiment's default evaluation size (cli.experiments.personal)
CONCURRENCY = 8  # requests in flight per version


def gate_setting(gate: str) -> str:
    """The simulated user's setting of a gate name ("personal:student" -> "student")."""
    try:
        return GATES[gate]
    except KeyError:
        raise ValueError(f"unknown gate {gate!r}; expected one of {', '.join(sorted(GATES))}") from None


def gate_problems(n: int, seed: int = 0) -> list[Problem]:
    """``n`` held-out problems of the gate's own draw: none of them trained on, none among the reported ones."""
    reported = {p.id for p in heldout_problems(REPORTED_PROBLEMS)}
    out: list[Problem] = []
    for p in iter_problems("heldout", seed=GATE_SEED + seed):
        if len(out) >= n:
            break
        if p.id not in reported:
            out.append(p)
    return out


async def served_models(engine_url: str, api_key: str = "EMPTY") -> tuple[str, set[str]]:
    """The engine's served model name and the adapters it serves now.

    ``/v1/models`` lists the base model (no ``parent``) and, on SGLang, each adapter with the base as ``parent``;
    ``/get_model_info`` may name the served model (``served_model_name``) and the adapters (``loaded_lora_adapters``,
    a mapping or a list). Either may be missing on a given engine, so both are read."""
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx.AsyncClient(base_url=engine_url.rstrip("/"), headers=headers, timeout=30.0) as client:
        models = (await client.get("/v1/models")).raise_for_status().json().get("data") or []
        info_resp = await client.get("/get_model_info")
        info = info_resp.json() if info_resp.status_code == 200 else {}
    base = [m["id"] for m in models if isinstance(m, dict) and not m.get("parent")]
    adapters = {str(m["id"]) for m in models if isinstance(m, dict) and m.get("parent")}
    loaded = info.get("loaded_lora_adapters") if isinstance(info, dict) else None
    if isinstance(loaded, dict | list):
        adapters |= {str(name) for name in loaded}
    name = (info.get("served_model_name") if isinstance(info, dict) else None) or (base[0] if base else "")
    if not name:
        raise RuntimeError(f"{engine_url} names no served model in /v1/models or /get_model_info")
    return str(name), adapters


def _side(ev: Evaluation, i: int) -> dict[str, Any]:
    it = ev.items[i]
    return {"answer": it.answer, "score": it.score, "correct": it.correct, "well_formed": it.well_formed,
            "malformed_reason": it.malformed_reason}


async def score_versions(engine_url: str, live_lora: str | None, candidate_lora: str | None, gate: str,
                         problems: int = 16, seed: int = 0, base_model: str | None = None, *,
                         api_key: str = "EMPTY", max_tokens: int = 320, concurrency: int = CONCURRENCY,
                         timeout_s: float = 300.0) -> dict[str, Any]:
    """Score the live adapter (None: the base weights) and ``candidate_lora`` on ``problems`` held-out problems.

    Returns ``{"live", "candidate"}`` (mean personalization score), ``n``, ``{live,candidate}_degenerate`` (share of
    malformed answers), ``{live,candidate}_accuracy`` and ``details`` (per problem: the prompt and each side's answer
    and score). ``base_model`` overrides the served name read from the engine. Raises ValueError for an unknown
    ``gate`` and LookupError for an adapter the engine does not serve.
    """
    setting = gate_setting(gate)
    if problems < 1:
        raise ValueError("problems must be >= 1")
    served, adapters = await served_models(engine_url, api_key)
    base = base_model or served
    for lora in (live_lora, candidate_lora):
        if lora and lora not in adapters:
            raise LookupError(f"the engine at {engine_url} does not serve adapter {lora!r} "
                              f"(serving: {', '.join(sorted(adapters)) or 'no adapters'})")
    asked = gate_problems(problems, seed)
    drivers = [GatewayDriver(engine_url, api_key, model=f"{base}:{lora}" if lora else base, temperature=0.0,
                             max_tokens=max_tokens, timeout_s=timeout_s) for lora in (live_lora, candidate_lora)]
    try:
        live, candidate = await asyncio.gather(*(
            evaluate(driver, setting, asked, tag=f"gate/{name}", concurrency=concurrency, temperature=0.0,
                     seed=GATE_SEED + seed)
            for driver, name in zip(drivers, ("live", "candidate"), strict=True)))
    finally:
        for driver in drivers:
            await driver.aclose()
    details = [{"problem_id": p.id, "prompt": live.items[i].prompt, "live": _side(live, i),
                "candidate": _side(candidate, i)} for i, p in enumerate(asked)]
    return {"gate": gate, "setting": setting, "live": live.score, "candidate": candidate.score, "n": live.n,
            "live_degenerate": live.degenerate_rate, "candidate_degenerate": candidate.degenerate_rate,
            "live_accuracy": live.accuracy, "candidate_accuracy": candidate.accuracy,
            "live_model": drivers[0].model, "candidate_model": drivers[1].model, "details": details}
