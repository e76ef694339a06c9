"""The durable spool and the turn sink: order kept per session, nothing lost while Temporal is away."""

from __future__ import annotations

import asyncio
from pathlib import Path

from api.sink import TurnJob, TurnRejected, TurnSink, turn_ref_from_json, turn_ref_to_json
from api.spool import Spool
from contracts.session import TurnPayload, TurnRef
from openclaw_rl.store import ObjectStore


class FakeSubmitter:
    """Accepts turns while ``up``; raises like an unreachable server otherwise."""

    def __init__(self, up: bool = True, delay_s: float = 0.0) -> None:
        self.up = up
        self.delay_s = delay_s
        self.got: list[TurnRef] = []
        self.reject: set[str] = set()
        self.connected: bool | None = None
        self.slow: dict[str, float] = {}
        self.in_flight = self.most_in_flight = 0
        self.fail_after: int | None = None  # goes down once this many turns were accepted

    async def submit(self, ref: TurnRef) -> None:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await asyncio.sleep(self.slow.get(ref.request_id, self.delay_s))
        finally:
            self.in_flight -= 1
        if self.fail_after is not None and len(self.got) >= self.fail_after:
            self.up = False
        if ref.request_id in self.reject:
            raise TurnRejected("bad turn")
        if not self.up:
            self.connected = False
            raise ConnectionRefusedError("temporal is down")
        self.connected = True
        self.got.append(ref)

    async def close(self) -> None:
        pass


class ListRecords:
    def __init__(self) -> None:
        self.rows: list[tuple[str, dict]] = []

    def append(self, kind: str, record: dict, policy_version: int | None = None) -> None:
        self.rows.append((kind, record))


def ref(session: str, n: int, payload: TurnPayload | None = None) -> TurnRef:
    return TurnRef(request_id=f"{session}-{n}", session_id=session, user="k1", created_at=float(n),
                   payload=payload or TurnPayload(response_text=f"reply {n}", response_ids=[n]))


def job(r: TurnRef) -> TurnJob:
    return TurnJob(session_id=r.session_id, request_id=r.request_id,
                   build=lambda: (r, {"request_id": r.request_id, "session_id": r.session_id}))


async def wait_for(cond, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def ids(refs: list[TurnRef], session: str | None = None) -> list[str]:
    return [r.request_id for r in refs if session is None or r.session_id == session]


# ---------------------------------------------------------------------------------------------------------------------
# Spool
# ---------------------------------------------------------------------------------------------------------------------

def test_spool_order_remove_bury_and_reopen(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seqs = [spool.append("s1" if i % 2 else "s2", f"r{i}", f"body{i}") for i in range(5)]
    assert seqs == sorted(seqs)
    assert [e.request_id for e in spool.oldest()] == ["r0", "r1", "r2", "r3", "r4"]
    assert spool.has_session("s1") and not spool.has_session("s3")
    spool.remove(seqs[0])
    spool.failed(seqs[1], "boom")
    spool.bury(seqs[2], "refused")
    assert spool.pending() == 3 and spool.dead() == 1
    assert spool.oldest(1)[0].attempts == 1
    spool.close()
    again = Spool(tmp_path)  # what was committed survives the process
    assert [e.request_id for e in again.oldest()] == ["r1", "r3", "r4"]
    again.close()


def test_turn_ref_json_round_trip() -> None:
    r = ref("s", 1, TurnPayload(messages=[{"role": "user", "content": "hi"}], prompt_ids=[1, 2],
                                response_logprobs=[-0.5], tool_calls=[{"id": "c"}]))
    assert turn_ref_from_json(turn_ref_to_json(r)) == r
    bare = TurnRef(request_id="x", session_id="s", user="u", payload_ref="blobs/ab.json")
    assert turn_ref_from_json(turn_ref_to_json(bare)) == bare


# ---------------------------------------------------------------------------------------------------------------------
# Sink
# ---------------------------------------------------------------------------------------------------------------------

async def test_delivers_in_order_and_records(tmp_path: Path) -> None:
    sub, records = FakeSubmitter(delay_s=0.001), ListRecords()
    sink = TurnSink(sub, Spool(tmp_path), records=records)
    await sink.start()
    for n in range(6):
        for s in ("a", "b"):
            sink.submit(job(ref(s, n)))
    await wait_for(lambda: len(sub.got) == 12)
    assert ids(sub.got, "a") == [f"a-{n}" for n in range(6)]
    assert ids(sub.got, "b") == [f"b-{n}" for n in range(6)]
    assert [kind for kind, _ in records.rows] == ["turns"] * 12
    assert sink.spool.pending() == 0
    await sink.close()


async def test_unreachable_then_back_replays_everything_in_order(tmp_path: Path) -> None:
    sub = FakeSubmitter(up=False)
    sink = TurnSink(sub, Spool(tmp_path), retry_min_s=0.05, retry_max_s=0.2)
    await sink.start()
    for n in range(5):
        for s in ("a", "b", "c"):
            sink.submit(job(ref(s, n)))
    await wait_for(lambda: sink.spool.pending() == 15)
    assert sub.got == [] and sink.state()["down"]
    sub.up = True
    await wait_for(lambda: len(sub.got) == 15)
    for s in ("a", "b", "c"):
        assert ids(sub.got, s) == [f"{s}-{n}" for n in range(5)]
    await wait_for(lambda: sink.spool.pending() == 0)  # an entry is removed once its delivery returned
    await wait_for(lambda: not sink.state()["down"])
    sink.submit(job(ref("a", 99)))  # straight through again
    await wait_for(lambda: len(sub.got) == 16)
    await sink.close()


async def test_replay_sends_sessions_side_by_side_each_in_order(tmp_path: Path) -> None:
    spool = Spool(tmp_path)  # left over from a run while Temporal was away: 20 sessions, 3 turns each
    for n in range(3):
        for s in range(20):
            spool.append(f"s{s}", f"s{s}-{n}", turn_ref_to_json(ref(f"s{s}", n)))
    sub = FakeSubmitter(delay_s=0.02)
    sink = TurnSink(sub, spool, replay_parallel=4)
    await sink.start()
    await wait_for(lambda: spool.pending() == 0)
    assert len(sub.got) == 60 and 1 < sub.most_in_flight <= 4
    for s in range(20):
        assert ids(sub.got, f"s{s}") == [f"s{s}-{n}" for n in range(3)]
    await sink.close()


async def test_a_failed_replay_stops_new_deliveries_and_keeps_the_line(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    for n in range(5):
        for s in ("a", "b", "c"):
            spool.append(s, f"{s}-{n}", turn_ref_to_json(ref(s, n)))
    sub = FakeSubmitter(delay_s=0.01)
    sub.fail_after = 4  # Temporal goes away mid-replay
    sink = TurnSink(sub, spool, retry_min_s=0.05, retry_max_s=0.1, replay_parallel=3)
    await sink.start()
    await wait_for(lambda: sink.state()["down"] and sub.in_flight == 0)
    sent = len(sub.got)
    assert 4 <= sent < 15 and spool.pending() == 15 - sent
    for s in ("a", "b", "c"):  # every session's delivered turns are a prefix of its line: nothing skipped
        got = ids(sub.got, s)
        assert got == [f"{s}-{n}" for n in range(len(got))]
    left = {e.request_id for e in spool.oldest(100)}
    assert left == {f"{s}-{n}" for s in "abc" for n in range(5)} - {r.request_id for r in sub.got}
    sub.fail_after, sub.up = None, True
    await wait_for(lambda: spool.pending() == 0)
    for s in ("a", "b", "c"):
        assert ids(sub.got, s) == [f"{s}-{n}" for n in range(5)]
    await sink.close()


async def test_new_turns_queue_behind_spooled_ones(tmp_path: Path) -> None:
    spool = Spool(tmp_path)  # left over from a previous run
    spool.append("a", "a-0", turn_ref_to_json(ref("a", 0)))
    sub = FakeSubmitter()
    sub.slow = {"a-0": 0.3}
    sink = TurnSink(sub, spool)
    await sink.start()  # the replayer starts sending a-0 (slowly)
    sink.submit(job(ref("a", 1)))  # must wait behind a-0
    sink.submit(job(ref("b", 0)))  # another session is not held up
    await wait_for(lambda: len(sub.got) == 3)
    assert ids(sub.got) == ["b-0", "a-0", "a-1"]
    await wait_for(lambda: spool.pending() == 0)
    await sink.close()


async def test_refused_turns_go_to_the_dead_table(tmp_path: Path) -> None:
    sub = FakeSubmitter()
    sub.reject.add("a-1")
    sink = TurnSink(sub, Spool(tmp_path))
    await sink.start()
    for n in range(3):
        sink.submit(job(ref("a", n)))
    await wait_for(lambda: len(sub.got) == 2)
    assert ids(sub.got) == ["a-0", "a-2"]
    assert sink.spool.dead() == 1 and sink.spool.pending() == 0
    await sink.close()


async def test_shutdown_spools_in_flight_and_next_start_replays(tmp_path: Path) -> None:
    slow = FakeSubmitter(delay_s=30.0)
    sink = TurnSink(slow, Spool(tmp_path), close_timeout_s=0.2)
    await sink.start()
    for n in range(3):
        sink.submit(job(ref("a", n)))
    await asyncio.sleep(0.05)
    await sink.close()
    spool = Spool(tmp_path)
    assert [e.request_id for e in spool.oldest()] == ["a-0", "a-1", "a-2"]
    fast = FakeSubmitter()
    sink2 = TurnSink(fast, spool)
    await sink2.start()
    await wait_for(lambda: len(fast.got) == 3)
    assert ids(fast.got) == ["a-0", "a-1", "a-2"]
    await sink2.close()


async def test_large_payload_goes_to_the_store_by_reference(tmp_path: Path) -> None:
    sub = FakeSubmitter()
    store = ObjectStore.from_url(f"file://{tmp_path / 'store'}")
    sink = TurnSink(sub, Spool(tmp_path / "spool"), store=store, inline_limit=1024)
    await sink.start()
    small = ref("a", 0)
    big = ref("a", 1, TurnPayload(response_ids=list(range(2000)), response_logprobs=[-0.25] * 2000))
    sink.submit(job(small))
    sink.submit(job(big))
    await wait_for(lambda: len(sub.got) == 2)
    assert sub.got[0].payload == small.payload and sub.got[0].payload_ref == ""
    assert sub.got[1].payload is None and sub.got[1].payload_ref.startswith("blobs/")
    assert TurnPayload(**store.get_blob(sub.got[1].payload_ref)) == big.payload
    await sink.close()
