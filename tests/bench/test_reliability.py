"""The reliability drills (`openclaw-rl bench reliability`): a reduced run of every drill against the whole stack,
asserting its targets; a short schemathesis run over the gateway's OpenAPI; and the pieces the drills rely on (the
stack's kill/restart helpers, the gateway's record of a turn the engine broke, its engine time header, the reading of
schemathesis' report)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_reduced_drills_hold_their_targets(tiny_model_path: Path) -> None:  # noqa: F811
    from bench.reliability import GATEWAY_P99_MS, run

    t0 = time.monotonic()
    result = run(sessions=4, outage_s=5, turns=3, think_s=0.5, warm_s=2, after_s=2, drain_wait_s=60, judge_wait_s=45,
                 engine_streams=4, trainer_steps=2, trainer_kill_step=2, trainer_step_sleep_s=5,
                 trainer_heartbeat_timeout_s=4, trainer_deadline_s=120, fuzz_examples=3, fuzz_deadline_s=90,
                 levels=[8], level_s=5, model_path=tiny_model_path)
    assert time.monotonic() - t0 < 240, result
    outage, engine, workers, trainer, fuzz, load = (result[k] for k in ("temporal_outage", "engine_kill", "worker_kill",
                                                                        "trainer_kill", "fuzz", "load"))
    # Temporal down: every chat answered, every answered turn recorded, no sample twice, the spool emptied
    assert outage["requests_during_outage"] > 0 and outage["spool_peak"] > 0, outage
    assert outage["chat_failed"] == 0 and outage["turns_lost"] == 0 and outage["samples_duplicated"] == 0, outage
    assert outage["spool_drain_s"] is not None, outage
    # engine killed mid-stream: nothing hangs, every broken stream left its events record, the engine came back
    assert engine["broken_streams"] > 0 and engine["hung_requests"] == 0, engine
    assert engine["broken_turns_recorded"] == engine["broken_streams"], engine
    assert engine["recovery_s"] is not None and all(s == 503 for s in engine["probe_statuses"]), engine
    # workers killed under load: no turn lost, no sample written twice
    assert workers["chat_failed"] == 0 and workers["turns_lost"] == 0 and workers["samples_duplicated"] == 0, workers
    assert workers["worker_ready_s"] is not None, workers
    # trainer killed in the middle of step 2: the step ran again from step 1's checkpoint, nothing trained twice, each
    # version pushed once and served
    assert trainer["killed_mid_step"] and trainer["steps_completed"] == 2, trainer
    assert trainer["step_retried"] and trainer["killed_step"]["resumed_from"].endswith("step=1/"), trainer
    assert trainer["samples_trained_twice"] == 0 and trainer["versions_pushed"] == {"1": 1, "2": 1}, trainer
    assert trainer["engine_weight_version"] == "2" and trainer["recovery_s"] is not None, trainer
    assert trainer["turns_lost"] == 0 and trainer["samples_duplicated"] == 0, trainer
    # fuzzing: cases ran, none got a server error
    assert fuzz["fuzz_cases"] > 0 and fuzz["fuzz_5xx"] == 0, fuzz["fuzz_failures"]
    # load: no errors, and the gateway reports the engine's share of each request
    level = load["levels"][0]
    assert level["sessions"] == 8 and level["requests"] > 0 and level["errors"] == 0 and level["ramp_s"] == 1.0, level
    assert level["engine_ms_p50"] is not None and level["gateway_overhead_ms_p50"] is not None, level
    # the gateway's own handling is a part of the overhead the client sees; the wake-up sidecar ran the whole level
    assert 0 <= level["gateway_inside_ms_p50"] <= level["gateway_overhead_ms_p50"] + 1.0, level
    # the client's own wait before sending is measured, and the gateway's own time is what is left of its side
    assert level["client_wait_ms_p50"] is not None and level["client_wait_ms_p50"] >= 0, level
    assert 0 <= level["gateway_own_ms_p99"] <= level["gateway_side_ms_p99"] + 1e-3, level
    assert f"load.8.gateway_own_ms_p99 <= {GATEWAY_P99_MS:g}" in result["targets"]
    # the steady state: the requests sent after the ramp and a second more, a part of the level's
    assert level["steady_after_s"] == 2.0 and 0 < level["steady_requests"] < level["requests"], level
    assert level["gateway_own_ms_p99_steady"] is not None and level["gateway_own_ms_p99_steady"] >= 0, level
    assert level["host_wakeup_late_ms"]["wakeups"] > 100, level
    assert set(load["rss_mb_before"]) == {"temporal", "engine", "workers", "gateway"}
    assert result["samples_duplicated_total"] == 0
    assert set(result["targets"]) >= {"temporal.chat_failed == 0", "engine.hung_requests == 0", "fuzz.fuzz_5xx == 0"}


def test_bounded_fuzz_run_gets_no_server_error(tiny_model_path: Path) -> None:  # noqa: F811
    """schemathesis (every check) over the gateway's own /openapi.json with a valid key, a few examples per
    operation, through the CLI as a user runs it: stdout is the one JSON object."""
    import subprocess

    t0 = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cli.main", "bench", "reliability", "--json", "--phases", "fuzz",
                           "--fuzz-examples", "5", "--fuzz-deadline-s", "90", "--model", str(tiny_model_path)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, done.stdout[-2000:]
    fuzz = json.loads(lines[0])["fuzz"]
    assert fuzz["fuzz_cases"] > 100 and not fuzz["fuzz_deadline_hit"], fuzz
    assert fuzz["fuzz_5xx"] == 0, fuzz["fuzz_failures"]
    assert fuzz["fuzz_2xx"] > 0 and fuzz["fuzz_positive_cases"] > 0, fuzz
    assert time.monotonic() - t0 < 120


def test_stack_kill_and_restart_a_service(tmp_path: Path) -> None:
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Service, Stack, pid_alive, port_open

    stack = Stack(Settings(runtime_dir=tmp_path))
    port = _free_port()
    svc = Service("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port=port)
    try:
        stack.start(svc, timeout_s=30)
        first = svc.pid
        assert first and port_open("127.0.0.1", port)
        stack.kill("web", signal.SIGKILL)
        assert not pid_alive(first) and not port_open("127.0.0.1", port)
        stack.restart("web", timeout_s=30)
        assert svc.pid != first and svc.restarts == 1 and port_open("127.0.0.1", port)
        assert json.loads((tmp_path / "stack.json").read_text())["services"][0]["pid"] == svc.pid
        with pytest.raises(KeyError):
            stack.kill("nothing")
    finally:
        stack.stop_all()
    assert not pid_alive(svc.pid)


def test_a_service_started_nicer_runs_at_that_niceness(tmp_path: Path) -> None:
    """``engine_nice``: the local engine yields the CPU to the gateway and Temporal on a shared host; its threads
    inherit the niceness because it is set before exec."""
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Service, Stack, engine_service

    assert engine_service(Settings(engine_nice=7)).nice == 7 and engine_service(Settings()).nice == 0
    stack = Stack(Settings(runtime_dir=tmp_path))
    port = _free_port()
    svc = Service("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port=port, nice=5)
    try:
        stack.start(svc, timeout_s=30)
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert os.getpriority(os.PRIO_PROCESS, svc.pid) == mine + 5
    finally:
        stack.stop_all()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH and SCHED_IDLE are Linux's")
def test_the_services_but_the_gateway_run_under_their_scheduling_policy(tmp_path: Path) -> None:
    """``services_policy``: Temporal, the engine and the workers that ``up`` starts run under SCHED_BATCH (or
    SCHED_IDLE), so waking they do not push the gateway off its CPU; every thread they start inherits it, because it
    is set before exec. The gateway stays under the normal policy. (The default, ``group``: the next tests.)"""
    from pydantic import ValidationError

    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Service, Stack, engine_service, gateway_service, temporal_service, worker_service

    s = Settings(runtime_dir=tmp_path)
    assert s.services_policy == "group"
    for policy in ("normal", "batch", "idle", "group"):
        mine = Settings(runtime_dir=tmp_path, services_policy=policy)
        assert [svc.policy for svc in (temporal_service(mine), engine_service(mine, "m"), worker_service(mine))] \
            == [policy] * 3
        assert gateway_service(mine).policy == "normal"
        assert gateway_service(mine).cpu_group == ("gateway" if policy == "group" else "")
    with pytest.raises(ValidationError, match="services_policy"):
        Settings(services_policy="realtime")

    stack = Stack(s)
    code = ("import http.server, threading, sys; srv = http.server.ThreadingHTTPServer(('127.0.0.1', int(sys.argv[1])),"
            " http.server.SimpleHTTPRequestHandler); threading.Thread(target=srv.serve_forever).start()")
    expected = {"batch": os.SCHED_BATCH, "idle": os.SCHED_IDLE, "normal": os.SCHED_OTHER}
    services = {}
    try:
        for policy in expected:
            port = _free_port()
            services[policy] = stack.start(Service(policy, [sys.executable, "-c", code, str(port)], port=port,
                                                   policy=policy), timeout_s=30)
        for policy, svc in services.items():
            threads = sorted(int(t) for t in os.listdir(f"/proc/{svc.pid}/task"))
            assert len(threads) >= 2  # the server's thread too, started after exec
            assert {os.sched_getscheduler(t) for t in threads} == {expected[policy]}, policy
            assert os.getpriority(os.PRIO_PROCESS, svc.pid) == os.getpriority(os.PRIO_PROCESS, 0)  # niceness kept
    finally:
        stack.stop_all()
    with pytest.raises(ValueError, match="scheduling policy must be one of"):
        stack.start(Service("bad", [sys.executable, "-c", "pass"], policy="fifo"), timeout_s=5)


_THREADED_SERVER = ("import http.server, threading, sys; srv = http.server.ThreadingHTTPServer(('127.0.0.1', "
                    "int(sys.argv[1])), http.server.SimpleHTTPRequestHandler); "
                    "threading.Thread(target=srv.serve_forever).start()")


def _threads(pid: int) -> list[int]:
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def _start_service_and_gateway(stack):  # type: ignore[no-untyped-def]
    """Two threaded servers: one as a service under ``group``, one in the gateway's group."""
    from openclaw_rl.stack import Service

    ports = [_free_port(), _free_port()]
    svc = stack.start(Service("svc", [sys.executable, "-c", _THREADED_SERVER, str(ports[0])], port=ports[0],
                              policy="group"), timeout_s=30)
    gw = stack.start(Service("gw", [sys.executable, "-c", _THREADED_SERVER, str(ports[1])], port=ports[1],
                             cpu_group="gateway"), timeout_s=30)
    return svc, gw


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="cgroups and SCHED_BATCH are Linux's")
def test_group_puts_the_services_in_an_idle_cpu_group_beside_the_gateways(tmp_path: Path) -> None:
    """``services_policy=group`` (the default): the services join the stack's ``services`` CPU group, marked idle
    (``cpu.idle``), under SCHED_BATCH; the gateway joins the ``gateway`` group beside it. Both sit in one group of the
    stack's own, named after the runtime folder. ``status`` says where each runs; stopping the stack removes the
    groups, and so does the next stack's ``reclaim`` when the owner died."""
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Service, Stack, read_status

    s = Settings(runtime_dir=tmp_path)
    stack = Stack(s)
    groups = stack.cpu_groups()
    if isinstance(groups, str):
        pytest.skip(f"this host gives the stack no CPU groups: {groups}")
    assert groups.root.name.startswith("openclaw-") and Stack(s).cpu_groups() == groups  # the same folder, the same
    assert groups.idle("services") and not groups.idle("gateway")
    other = Stack(Settings(runtime_dir=tmp_path / "other")).cpu_groups()
    assert not isinstance(other, str) and other.root != groups.root and not other.remove()
    try:
        svc, gw = _start_service_and_gateway(stack)
        assert groups.members("services") == {svc.pid} and groups.members("gateway") == {gw.pid}
        tasks = {int(t) for t in (groups.path("services") / "tasks").read_text().split()} \
            if groups.version == "v1" else set(_threads(svc.pid))
        assert set(_threads(svc.pid)) <= tasks and len(_threads(svc.pid)) >= 2  # the thread started after exec too
        assert {os.sched_getscheduler(t) for t in _threads(svc.pid)} == {os.SCHED_BATCH}
        assert {os.sched_getscheduler(t) for t in _threads(gw.pid)} == {os.SCHED_OTHER}
        assert {r["name"]: r["sched"] for r in read_status(s)} == {"svc": "group services (cpu.idle)",
                                                                    "gw": "group gateway"}
        state = json.loads((tmp_path / "stack.json").read_text())
        assert state["cpu_groups"] == {"root": str(groups.root), "version": groups.version}
    finally:
        stack.stop_all()
    assert not groups.root.exists()

    # an owner that died: the next stack from the same folder stops its services and removes its groups
    stack = Stack(s)
    port = _free_port()
    svc = stack.start(Service("svc", [sys.executable, "-c", _THREADED_SERVER, str(port)], port=port, policy="group"),
                      timeout_s=30)
    assert groups.members("services") == {svc.pid}
    assert groups.remove() and groups.root.exists()  # a group holding a process stays, and says why
    assert [x["name"] for x in Stack(s).reclaim()] == ["svc"]
    assert not groups.root.exists()

    # a process outside the services' process groups that leaves the group a moment after the stop (as a stopped
    # service's last tasks can): the stop waits for it, up to a bound, then removes the groups
    stack = Stack(s)
    svc, _ = _start_service_and_gateway(stack)
    straggler = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.0)"], preexec_fn=lambda: (
        groups.path("services") / "cgroup.procs").write_text(str(os.getpid())))
    try:
        assert straggler.pid in groups.members("services")
        stack.stop_all()
        assert straggler.poll() is not None and not groups.root.exists()
    finally:
        straggler.wait()


@pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="SCHED_BATCH is Linux's")
def test_group_falls_back_to_batch_where_the_host_gives_no_cpu_group(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a writable cpu cgroup (no root, no delegation, an old kernel), ``group`` runs the services under
    SCHED_BATCH, the gateway as it is, and ``status`` says why."""
    import openclaw_rl.stack as stack_mod
    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Stack, read_status

    monkeypatch.setattr(stack_mod, "cpu_groups", lambda name: "no cgroup v1 cpu hierarchy mounted")
    s = Settings(runtime_dir=tmp_path)
    stack = Stack(s)
    try:
        svc, gw = _start_service_and_gateway(stack)
        assert {os.sched_getscheduler(t) for t in _threads(svc.pid)} == {os.SCHED_BATCH}
        assert {os.sched_getscheduler(t) for t in _threads(gw.pid)} == {os.SCHED_OTHER}
        assert {r["name"]: r["sched"] for r in read_status(s)} == {
            "svc": "batch (no CPU group: no cgroup v1 cpu hierarchy mounted)", "gw": "normal"}
        assert "cpu_groups" not in json.loads((tmp_path / "stack.json").read_text())
    finally:
        stack.stop_all()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to split")
def test_the_gateway_gets_cpus_of_its_own_and_the_other_services_the_rest(tmp_path: Path) -> None:
    """``gateway_cpus``: on a host the stack saturates, the gateway's CPUs are its alone, so a request does not wait
    behind the engine or Temporal for a CPU before the gateway reads it."""
    from pydantic import ValidationError

    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Service, Stack, engine_service, gateway_service, temporal_service, worker_service

    mine = sorted(os.sched_getaffinity(0))
    s = Settings(runtime_dir=tmp_path, gateway_cpus=[mine[-1]])
    assert gateway_service(s).cpus == [mine[-1]]
    for svc in (temporal_service(s), engine_service(s, "m"), worker_service(s)):
        assert svc.cpus == mine[:-1], svc.name
    assert all(not svc.cpus for svc in (gateway_service(Settings()), engine_service(Settings(), "m")))
    with pytest.raises(ValidationError, match="leave at least one"):
        Settings(gateway_cpus=list(range(os.cpu_count() or 1)))
    with pytest.raises(ValidationError, match="the host has no CPU"):
        Settings(gateway_cpus=[(os.cpu_count() or 1) + 64])
    os.sched_setaffinity(0, mine[:-1])  # as a pinned service reads the same settings: still valid there
    try:
        assert Settings(gateway_cpus=[mine[-1]]).gateway_cpus == [mine[-1]]
    finally:
        os.sched_setaffinity(0, mine)
    os.sched_setaffinity(0, [mine[-1]])  # a launcher held to the gateway's CPUs: the others have nowhere to go
    try:
        with pytest.raises(ValueError, match="takes every CPU this process may run on"):
            engine_service(s, "m")
    finally:
        os.sched_setaffinity(0, mine)
    stack = Stack(s)
    port = _free_port()
    svc = Service("web", [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], port=port,
                  cpus=[mine[-1]], nice=3)
    try:
        stack.start(svc, timeout_s=30)
        assert os.sched_getaffinity(svc.pid) == {mine[-1]}
        assert os.getpriority(os.PRIO_PROCESS, svc.pid) == os.getpriority(os.PRIO_PROCESS, 0) + 3
        assert os.sched_getaffinity(0) == set(mine)  # only the child is pinned
    finally:
        stack.stop_all()


def test_gateway_records_turns_the_engine_broke_and_reports_engine_time(tiny_model_path: Path,  # noqa: F811
                                                                        tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from api.app import create_app
    from api.cli import running
    from bench.reliability import server_timing
    from openclaw_rl.keys import KeyStore
    from openclaw_rl.policy_client import PolicyEngineError
    from openclaw_rl.settings import Settings
    from tests.api.test_fake_engine import ScriptedPolicy
    from tests.api.test_spool import FakeSubmitter, ListRecords

    key = KeyStore.in_runtime_dir(tmp_path).add("alice")
    settings = Settings(environment="test", runtime_dir=tmp_path, model_path=tiny_model_path,
                        store_url=f"file://{tmp_path / 'store'}")
    policy, records = ScriptedPolicy(AutoTokenizer.from_pretrained(tiny_model_path)), ListRecords()
    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": "s1"}
    body = {"messages": [{"role": "user", "content": "hi"}]}
    with running(create_app(settings, policy=policy, temporal_submitter=FakeSubmitter(), records=records)) as url:
        post = f"{url}/v1/chat/completions"
        ok = httpx.post(post, json=body, headers=headers, timeout=30)
        assert ok.status_code == 200 and float(ok.headers["X-Engine-Time-Ms"]) >= 0
        timing = server_timing(ok.headers["Server-Timing"])
        assert timing["engine"] == float(ok.headers["X-Engine-Time-Ms"]) <= timing["gateway"], timing
        # a request that says it was sent half a second ago waited that long before the gateway read it
        late = httpx.post(post, json=body, headers={**headers, "X-Request-Start": f"t={(time.time() - 0.5) * 1e6:.0f}"},
                          timeout=30)
        assert 500 <= server_timing(late.headers["Server-Timing"])["queue"] < 5000
        refused = httpx.post(post, json=body, timeout=30)  # no key: timed too, with no engine part
        assert refused.status_code == 401 and list(server_timing(refused.headers["Server-Timing"])) == ["gateway"]
        # broken mid-stream: the error event in band, and an events record with the tokens streamed so far
        policy.text, policy.error, policy.error_after = "one two three four", PolicyEngineError(0, "gone"), 2
        with httpx.stream("POST", post, json={**body, "stream": True}, headers=headers, timeout=30) as r:
            text = "".join(r.iter_text())
        assert r.status_code == 200 and '"engine_unavailable"' in text and "[DONE]" not in text
        # the engine failed before the first token: a 503, and its record
        policy.error_after = 0
        assert httpx.post(post, json=body, headers=headers, timeout=30).status_code == 503
    events = [rec for kind, rec in records.rows if kind == "events" and rec["event"] == "engine_failed"]
    assert [(e["stream"], e["code"], e["session"].endswith(":s1")) for e in events] == [
        (True, "engine_unavailable", True), (False, "engine_unavailable", True)]
    assert events[0]["completion_tokens"] > 0 and events[1]["completion_tokens"] == 0
    assert all(e["request_id"].startswith("chatcmpl-") and e["turn_type"] == "main" for e in events)
    assert not [rec for kind, rec in records.rows if kind == "turns" and rec["request_id"] == events[0]["request_id"]]


def test_read_fuzz_events_counts_cases_statuses_and_failures(tmp_path: Path) -> None:
    import base64

    from bench.reliability import read_fuzz_events

    def interaction(status: int, content: dict) -> dict:
        return {"request": {"method": "POST"},
                "response": {"status_code": status, "content": {"$base64": base64.b64encode(
                    json.dumps(content).encode()).decode()}}}

    finished = {"ScenarioFinished": {"phase": "fuzzing", "status": "failure", "recorder": {
        "label": "POST /v1/chat/completions",
        "cases": {"a": {"value": {"method": "POST", "path": "/v1/chat/completions", "body": {"max_tokens": 9 ** 9},
                                  "meta": {"generation": {"mode": "positive"}}}},
                  "b": {"value": {"method": "POST", "path": "/v1/chat/completions", "body": {},
                                  "meta": {"generation": {"mode": "negative"}}}}},
        "interactions": {"a": interaction(400, {"error": {"code": "context_length_exceeded"}}),
                         "b": interaction(400, {"error": {"code": None}})},
        "checks": {"a": [{"name": "not_a_server_error", "status": "success"},
                         {"name": "positive_data_acceptance", "status": "failure", "failure_info": {"failure": {
                             "code": "ST202", "title": "Schema-valid request rejected", "message": "Valid data"}}}],
                   "b": [{"name": "not_a_server_error", "status": "success"}]}}}}
    path = tmp_path / "events.ndjson"
    path.write_text(json.dumps({"Initialize": {}}) + "\n" + json.dumps(finished) + "\n")
    out = read_fuzz_events(path)
    assert (out["fuzz_cases"], out["fuzz_2xx"], out["fuzz_4xx"], out["fuzz_5xx"]) == (2, 0, 2, 0)
    assert (out["fuzz_positive_cases"], out["fuzz_positive_2xx"], out["fuzz_schema_failures"]) == (1, 0, 1)
    failure = out["fuzz_failures"]["positive_data_acceptance"]
    assert failure["count"] == 1 and failure["causes"] == {"400 context_length_exceeded": 1}
    assert failure["example"]["code"] == "ST202" and '"max_tokens"' in failure["example"]["body"]


def test_store_view_counts_samples_written_twice(tmp_path: Path) -> None:
    """A sample written again under its own key is one row; written again inside a batch shard, a duplicate."""
    from bench.reliability import StoreView
    from openclaw_rl.samples import Sample, SampleWriter
    from openclaw_rl.store import ObjectStore

    store = ObjectStore.from_url(f"file://{tmp_path}")
    writer = SampleWriter(store, "run")

    def sample(sid: str, session: str) -> Sample:
        return Sample(sample_id=sid, run="run", policy_version=0, prompt_ids=[1], response_ids=[2],
                      rollout_logprobs=[-0.1], session=session)

    writer.write(sample("a", "s1"))
    writer.write(sample("a", "s1"))  # a retried activity: the same key, overwritten
    writer.write(sample("b", "s2"))
    view = StoreView(tmp_path)
    assert view.duplicated() == (2, 0)
    writer.write_shard([sample("a", "s1")])
    assert view.duplicated() == (3, 1) and view.duplicated({"s1"}) == (2, 1) and view.duplicated({"s2"}) == (1, 0)


def test_store_view_reads_sealed_records(tmp_path: Path) -> None:
    """A training run seals the record partitions of the versions it moved past: turns and judgements there count."""
    from activities.session import sample_id_for
    from bench.reliability import StoreView

    def record(root: Path, kind: str, version: int, name: str, row: dict) -> None:
        folder = root / "records" / kind / f"version={version}" / "date=2026-01-01"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(json.dumps(row) + "\n")

    record(tmp_path, "turns", 1, "a.jsonl", {"request_id": "live"})
    record(tmp_path / "archive", "turns", 0, "b.jsonl", {"request_id": "sealed"})
    for i, root in enumerate((tmp_path / "archive", tmp_path)):
        record(root, "judgements", i, f"judgement-{sample_id_for('s', i)}.jsonl", {"turn": i})
    view = StoreView(tmp_path)
    assert view.turn_request_ids() == {"live", "sealed"}
    assert view.judged("s", 2) == 2 and view.judged("s", 3) == 2


def test_trainer_drill_refuses_what_it_cannot_see() -> None:
    from bench.reliability import check_trainer_drill

    check_trainer_drill(steps=3, kill_step=2, step_sleep_s=8, heartbeat_timeout_s=6)
    with pytest.raises(ValueError, match="one of the run's steps"):
        check_trainer_drill(steps=2, kill_step=3, step_sleep_s=8, heartbeat_timeout_s=6)
    with pytest.raises(ValueError, match="heartbeat"):  # heartbeats reach the server every 8 s: a 4 s step ends first
        check_trainer_drill(steps=3, kill_step=2, step_sleep_s=4, heartbeat_timeout_s=10)


def test_request_start_reads_the_forms_proxies_write() -> None:
    from api.app import request_start

    t = 1_796_000_000.25
    assert request_start(b"t=1796000000.25") == t and request_start(b"1796000000250") == t
    assert request_start(f"t={int(t * 1e6)}".encode()) == t
    assert request_start(b"") is None and request_start(b"t=soon") is None and request_start(None) is None


def test_the_dev_server_keeps_its_history_in_a_write_ahead_log(tmp_path: Path) -> None:
    """``temporal_sqlite_pragmas``: the dev server `up` starts writes through SQLite's WAL, and a workflow it accepted
    is still there after the server is SIGKILLed and started again on the same file."""
    import asyncio
    import sqlite3

    from temporalio.client import Client

    from openclaw_rl.settings import Settings
    from openclaw_rl.stack import Stack, temporal_service

    port, ui = _free_port(), _free_port()
    s = Settings(runtime_dir=tmp_path, temporal_address=f"127.0.0.1:{port}", temporal_ui_port=ui)
    assert "--sqlite-pragma" not in temporal_service(Settings(temporal_sqlite_pragmas=[])).argv

    async def started(wid: str) -> str:
        client = await Client.connect(s.temporal_address)
        handle = await client.start_workflow("NoSuchWorkflow", id=wid, task_queue="nobody-polls")
        return (await handle.describe()).id

    async def found(wid: str) -> str:
        deadline = time.monotonic() + 60
        while True:  # the restarted server opens its port before it answers
            try:
                client = await Client.connect(s.temporal_address)
                return (await client.get_workflow_handle(wid).describe()).id
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)

    stack = Stack(s)
    try:
        svc = stack.start(temporal_service(s), timeout_s=120)
        assert asyncio.run(started("kept")) == "kept"
        with sqlite3.connect(tmp_path / "temporal.sqlite") as db:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        os.killpg(svc.pid, signal.SIGKILL)
        svc = stack.start(temporal_service(s), timeout_s=120)
        assert asyncio.run(found("kept")) == "kept"
    finally:
        stack.stop_all()
