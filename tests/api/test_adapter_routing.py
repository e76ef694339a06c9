"""Per-user adapters at the gateway, over real HTTP with a scripted engine: each key with its own adapter is served by
it once the engine has it (and by the base model before, as version 0 of its own run), its turns say so, and a key
never reaches another key's adapter."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from api.app import create_app
from api.cli import running
from api.sink import TemporalSubmitter, user_training_input
from contracts.session import TurnRef
from openclaw_rl.adapters import ServedAdapters, adapter_name, user_of_run, user_run
from openclaw_rl.keys import KeyStore
from openclaw_rl.policy_client import Generation, PolicyEngineError, SamplingParams
from openclaw_rl.settings import Settings
from tests.api.test_fake_engine import Fx as ScriptedFx
from tests.api.test_fake_engine import ScriptedPolicy
from tests.api.test_spool import FakeSubmitter, ListRecords


class AdapterPolicy(ScriptedPolicy):
    """A scripted engine that knows adapters: ``loaded`` maps a name to its version; a request on an adapter
    answers with that version, one without with the base's ``"7"``; every call's ``lora_path`` is kept."""

    def __init__(self, tokenizer: Any) -> None:
        super().__init__(tokenizer)
        self.loaded: dict[str, str] = {}
        self.loras: list[str | None] = []

    async def generate(self, input_ids: list[int], sampling: SamplingParams, rid: str | None = None,
                       lora_path: str | None = None) -> Generation:
        self.loras.append(lora_path)
        self._check(lora_path)
        gen = await super().generate(input_ids, sampling, rid)
        gen.weight_version = self.loaded[lora_path] if lora_path else "7"
        return gen

    async def generate_stream(self, input_ids: list[int], sampling: SamplingParams, rid: str | None = None,
                              lora_path: str | None = None):
        self.loras.append(lora_path)
        self._check(lora_path)
        async for chunk in super().generate_stream(input_ids, sampling, rid):
            if chunk.finished:
                chunk.weight_version = self.loaded[lora_path] if lora_path else "7"
            yield chunk

    def _check(self, lora_path: str | None) -> None:
        if lora_path is not None and lora_path not in self.loaded:  # as the engine answers an unknown adapter
            raise PolicyEngineError(400, f"lora_path: unknown LoRA adapter {lora_path!r}")

    async def model_info(self) -> dict[str, Any]:
        return {**await super().model_info(),
                "loaded_lora_adapters": {k: {"version": v, "resident": True} for k, v in self.loaded.items()}}


class Fx(ScriptedFx):
    """The scripted fixture's helpers, plus each user's key id."""

    def __init__(self, url: str, policy: AdapterPolicy | None, sub: FakeSubmitter, keys: dict[str, str],
                 ids: dict[str, str], settings: Settings) -> None:
        super().__init__(url, policy, sub, keys, None, settings)  # type: ignore[arg-type]
        self.ids = ids


def _app(random_model_path: Path, runtime: Path, **settings: Any) -> tuple[Any, AdapterPolicy, FakeSubmitter,
                                                                          dict[str, str], dict[str, str], Settings]:
    from transformers import AutoTokenizer

    store = KeyStore.in_runtime_dir(runtime)
    keys = {"alice": store.add("alice", adapter=True), "bob": store.add("bob")}
    ids = {name: key.split("-")[1] for name, key in keys.items()}
    s = Settings(environment="test", runtime_dir=runtime, model_path=random_model_path, run="prod",
                 store_url=f"file://{runtime / 'store'}", admin_key="admin-" + "k" * 40, **settings)
    policy, sub = AdapterPolicy(AutoTokenizer.from_pretrained(random_model_path)), FakeSubmitter()
    policy.piece = 100
    app = create_app(s, policy=policy, temporal_submitter=sub, records=ListRecords())
    return app, policy, sub, keys, ids, s


@pytest.fixture(scope="module")
def fx(random_model_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fx]:
    app, policy, sub, keys, ids, s = _app(random_model_path, tmp_path_factory.mktemp("gateway-adapters"))
    with running(app) as url:
        yield Fx(url, policy, sub, keys, ids, s)


MESSAGES = [{"role": "user", "content": "what is 2 + 3?"}]


def test_names() -> None:
    assert adapter_name("0123456789ab") == "u-0123456789ab"
    assert user_run("prod", "0123456789ab") == "prod.u-0123456789ab"
    assert user_of_run("prod.u-0123456789ab") == "0123456789ab" and user_of_run("prod") == ""
    with pytest.raises(ValueError):
        adapter_name("../x")


def test_before_its_adapter_exists_a_key_is_served_by_the_base_as_version_0_of_its_run(fx: Fx) -> None:
    fx.policy.loaded.clear()
    fx.settings  # noqa: B018 - the fixture's settings name run "prod"
    out = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=8)
    ref = fx.turn(out.id)
    alice = adapter_name(fx.ids["alice"])
    assert fx.policy.loras[-1] is None
    assert ref.adapter == alice and ref.policy_version == 0
    assert out.system_fingerprint == "policy-0" and out.model == f"scripted:{alice}"


def test_a_loaded_adapter_serves_its_key_only_and_stamps_its_version(fx: Fx) -> None:
    alice = adapter_name(fx.ids["alice"])
    fx.policy.loaded[alice] = "3"
    fx.policy.loaded[adapter_name("ffffffffffff")] = "9"  # someone else's
    fx.sub.got.clear()
    # the gateway's view of the engine is refreshed within a few seconds; a new gateway-side lookup sees it now
    import time

    time.sleep(2.1)
    a = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=8)
    assert fx.policy.loras[-1] == alice
    assert a.system_fingerprint == "policy-3" and fx.turn(a.id).policy_version == 3
    stream = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=8, stream=True)
    chunks = list(stream)
    assert fx.policy.loras[-1] == alice and chunks[-1].system_fingerprint == "policy-3"
    b = fx.client("bob").chat.completions.create(model="x", messages=MESSAGES, max_tokens=8)
    assert fx.policy.loras[-1] is None
    ref = fx.turn(b.id)
    assert ref.adapter == "" and ref.policy_version == 7 and b.model == "scripted"


def test_an_adapter_the_engine_dropped_falls_back_to_the_base(fx: Fx) -> None:
    """The gateway's view of the engine is a few seconds old: an adapter unloaded meanwhile is refused by the engine,
    and the turn is served by the base model (version 0 of the user's run) instead of failing."""
    import time

    alice = adapter_name(fx.ids["alice"])
    for stream in (False, True):
        fx.policy.loaded[alice] = "4"
        time.sleep(2.1)
        seen = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=4)
        assert seen.system_fingerprint == "policy-4"
        del fx.policy.loaded[alice]  # unloaded; the gateway still believes it is there
        n = len(fx.policy.loras)
        out = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=4, stream=stream)
        chunks = list(out) if stream else [out]
        assert fx.policy.loras[n:] == [alice, None]  # refused, then served by the base
        assert chunks[-1].system_fingerprint == "policy-0"
        assert fx.turn(chunks[0].id).policy_version == 0 and fx.turn(chunks[0].id).adapter == alice
        n = len(fx.policy.loras)
        fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=4)
        assert fx.policy.loras[n:] == [None]  # the gateway asked the engine again: no adapter now
    fx.policy.loaded[alice] = "4"  # as the other tests expect it


def test_models_list_what_a_key_may_use_and_other_adapters_are_refused(fx: Fx) -> None:
    alice = adapter_name(fx.ids["alice"])
    assert [m.id for m in fx.client("alice").models.list().data] == [f"scripted:{alice}"]
    assert [m.id for m in fx.client("bob").models.list().data] == ["scripted"]
    for user, model in (("bob", f"scripted:{alice}"), ("alice", "scripted:u-ffffffffffff")):
        r = httpx.post(f"{fx.url}/v1/chat/completions", headers={"Authorization": f"Bearer {fx.keys[user]}"},
                       json={"model": model, "messages": MESSAGES, "max_tokens": 4}, timeout=30)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["code"] == "model_not_found" and "may use" in r.json()["error"]["message"]
    ok = fx.client("alice").chat.completions.create(model=f"scripted:{alice}", messages=MESSAGES, max_tokens=4)
    assert ok.model == f"scripted:{alice}"


def test_adapter_per_user_gives_every_key_its_own(random_model_path: Path, tmp_path: Path) -> None:
    app, policy, sub, keys, ids, s = _app(random_model_path, tmp_path, adapter_per_user=True)
    with running(app) as url:
        for user in ("alice", "bob"):
            c = openai.OpenAI(base_url=f"{url}/v1", api_key=keys[user], max_retries=0, timeout=30)
            out = c.chat.completions.create(model="x", messages=MESSAGES, max_tokens=4)
            assert out.model == f"scripted:{adapter_name(ids[user])}"


def test_sessions_feed_the_users_run_which_trains_its_adapter(tmp_path: Path) -> None:
    s = Settings(environment="test", runtime_dir=tmp_path, run="prod", adapter_rank=4, adapter_lr=3e-4,
                 adapter_gate="personal:student", engine_urls=["http://engine:1"])
    sub = TemporalSubmitter(s)
    mine = sub.start_arg(TurnRef(request_id="r", session_id="k:1", user="0123456789ab", adapter="u-0123456789ab"))
    shared = sub.start_arg(TurnRef(request_id="r", session_id="k:1", user="0123456789ab"))
    assert mine.config.run == "prod.u-0123456789ab" and shared.config.run == "prod"
    inp = user_training_input(s, "0123456789ab")
    assert (inp.run, inp.adapter, inp.lora_rank, inp.lr, inp.gate) == (
        "prod.u-0123456789ab", "u-0123456789ab", 4, 3e-4, "personal:student")
    assert inp.engines == ["http://engine:1"] and inp.batch_size == s.adapter_batch_size


async def test_served_adapters_keeps_the_last_answer_when_the_engine_is_away() -> None:
    answers: list[Any] = [{"loaded_lora_adapters": {"u-a": {"version": "2"}}}, RuntimeError("engine restarting")]

    async def fetch() -> dict[str, Any]:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    served = ServedAdapters(fetch, ttl_s=0.0)
    assert await served.version("u-a") == "2"
    assert await served.version("u-a") == "2"  # the refresh failed: the last answer stands
    assert await served.version("u-b") is None


def test_real_engine_serves_each_key_its_own_adapter(random_model_path: Path, tmp_path: Path) -> None:
    """The gateway in front of the real local engine with LoRA on: the adapter key's greedy reply is the engine's
    reply under that adapter, the other key's is the base model's, and the turns carry the adapter's version."""
    from transformers import AutoTokenizer

    from tests.engine.test_lora import make_adapter
    from tests.model_factory import running_engine

    runtime = tmp_path / "rt"
    store = KeyStore.in_runtime_dir(runtime)
    keys = {"alice": store.add("alice", adapter=True), "bob": store.add("bob")}
    alice = adapter_name(keys["alice"].split("-")[1])
    folder = make_adapter(random_model_path, tmp_path / "adapter", seed=3, alpha=64)
    tok = AutoTokenizer.from_pretrained(random_model_path)
    prompt = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    with running_engine(random_model_path, max_batch=8, enable_lora=True, data_dir=tmp_path / "engine") as engine:
        loaded = httpx.post(f"{engine}/load_lora_adapter", json={"lora_name": alice, "lora_path": str(folder),
                                                                 "weight_version": "5"}, timeout=60)
        assert loaded.status_code == 200, loaded.text

        def direct(lora: str | None) -> str:
            body = {"text": prompt, "sampling_params": {"max_new_tokens": 12, "temperature": 0}}
            if lora:
                body["lora_path"] = lora
            return httpx.post(f"{engine}/generate", json=body, timeout=60).json()["text"]

        with_adapter, base = direct(alice), direct(None)
        assert with_adapter != base  # the adapter changes the reply, so the routing below is visible
        s = Settings(environment="test", runtime_dir=runtime, model_path=random_model_path, engine_urls=[engine],
                     store_url=f"file://{runtime / 'store'}", http_timeout_s=60, admin_key="admin-" + "k" * 40)
        sub = FakeSubmitter()
        with running(create_app(s, temporal_submitter=sub, records=ListRecords())) as url:
            fx = Fx(url, None, sub, keys, {}, s)  # type: ignore[arg-type]
            a = fx.client("alice").chat.completions.create(model="x", messages=MESSAGES, max_tokens=12, temperature=0)
            b = fx.client("bob").chat.completions.create(model="x", messages=MESSAGES, max_tokens=12, temperature=0)
            assert a.choices[0].message.content == with_adapter and b.choices[0].message.content == base
            assert a.system_fingerprint == "policy-5" and fx.turn(a.id).policy_version == 5
            assert fx.turn(a.id).adapter == alice and fx.turn(b.id).adapter == ""
