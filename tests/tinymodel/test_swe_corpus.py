"""The tiny model's SWE rows are episodes the real env would give: rows replayed through a live SweEnv (bubblewrap
sandbox, the sandbox's python3 running the tests) show the same first observation and the same outputs, but for the
"Ran N tests in X s" timing, and the episode they show passes grading. No row is an eval task; the family instances
the rows use fail their tests as given and pass them with the reference fix; the rows fit the model's context."""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from pathlib import Path

import pytest

from envs.swe.env import SweConfig, SweEnv
from envs.swe.grader import Verdict, grade
from envs.swe.tasks import FAMILIES, SUITE, variant
from tinymodel.swe_rows import CHECK, fingerprint, run_tests, swe_episode

TOKENIZER = Path(__file__).resolve().parents[2] / "tinymodel" / "weights" / "default" / "tokenizer.json"  # shipped
_TIMING = re.compile(r"^Ran (\d+) tests? in \d+\.\d+s$", re.MULTILINE)


def untimed(text: str) -> str:
    return _TIMING.sub(r"Ran \1 tests in ?s", text)


def shape(row: dict) -> str:
    """Which shape a row shows, read from its turns."""
    msgs = row["messages"]
    first, tools = msgs[2]["content"], [m["content"] for m in msgs if m["role"] == "tool"]
    if not first.startswith("<tool_call>"):
        return "invalid"
    if '"command": "cat tests/' in first:
        return "read_tests"
    if '"command": "cat ' in first:
        return "skip_run"
    if any(t.startswith("Error: ") for t in tools):
        return "bad_edit"
    if any("No such file or directory" in t for t in tools):
        return "wrong_path"
    return "clean"


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rng = random.Random(11)
    return [swe_episode(rng) for _ in range(300)]


def test_rows_cover_every_family_and_shape_and_never_an_eval_task(rows: list[dict]) -> None:
    eval_instructions = {t.instruction for t in SUITE.tasks("eval")}
    assert all(r["messages"][1]["content"].split("\n(/workspace holds:")[0] not in eval_instructions for r in rows)
    assert {r["task"].split("~")[0] for r in rows} == {f.name for f in FAMILIES}
    shapes = Counter(shape(r) for r in rows)
    assert set(shapes) == {"clean", "skip_run", "read_tests", "bad_edit", "wrong_path", "invalid"}, shapes
    assert shapes["clean"] > len(rows) / 2
    for r in rows:
        msgs = r["messages"]
        assert [m["role"] for m in msgs[:2]] == ["system", "user"] and msgs[-1]["role"] == "assistant"
        assert msgs[-1]["content"] == '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
        assert json.loads(msgs[-3]["content"].removeprefix("<tool_call>").removesuffix("</tool_call>")) == {
            "name": "bash", "arguments": {"command": CHECK}}
        assert msgs[-2]["content"].endswith("\nOK\n[exit status 0]")  # the tests pass before the submit
    tool_turns = [m["content"] for r in rows for m in r["messages"] if m["role"] == "tool"]
    assert any("FAILED (" in t and "\nAssertionError: " in t for t in tool_turns)
    assert any("\nKeyError: " in t for t in tool_turns)  # an ERROR, not only FAILs


def test_rows_replay_through_the_real_env(rows: list[dict]) -> None:
    by_family: dict[str, list[dict]] = {}
    for row in rows:
        by_family.setdefault(row["task"].split("~")[0], []).append(row)
    picked, counts = [], Counter()  # one row of each family, the shapes spread over them
    for family in sorted(by_family):
        row = min(by_family[family], key=lambda r: counts[shape(r)])
        counts[shape(row)] += 1
        picked.append(row)
    assert len(counts) >= 4, counts
    env = SweEnv(SweConfig(max_steps=20))
    try:
        for row in picked:
            family, key = row["task"].split("~")
            msgs = row["messages"]
            assert env.reset(variant(family, int(key))) == msgs[1]["content"]
            replies = [m["content"] for m in msgs[2:] if m["role"] == "assistant"]
            shown = [m["content"] for m in msgs[2:] if m["role"] == "tool"]
            for reply, expected in zip(replies, [*shown, "Submitted."]):
                result = env.step(reply)
                assert untimed(result.observation) == untimed(expected), (row["task"], reply, result.observation)
            assert result.done
            outcome = env.evaluate()
            assert outcome.success, (row["task"], outcome.detail)
    finally:
        env.close()


def test_variant_instances_fail_unfixed_and_pass_with_their_fix() -> None:
    config = SweConfig()
    for fam in FAMILIES:
        for key in range(20):  # host-side (the rows' own runner): cheap, so many keys
            repo = variant(fam.name, key).data
            assert all(repo.files[f.path].count(f.old) == 1 for f in repo.fix), repo.name
            assert run_tests(repo.files)[1] != 0 and run_tests(repo.fixed_files())[1] == 0, repo.name
        repo = variant(fam.name, 0).data  # and one through the grader, as an episode is judged
        broken = grade(repo, {p: s.encode() for p, s in repo.files.items()}, config.sandbox, 30.0)
        assert not broken.passed and "did not pass" in broken.why, (repo.name, broken.why)
        fixed = grade(repo, {p: s.encode() for p, s in repo.fixed_files().items()}, config.sandbox, 30.0)
        assert fixed == Verdict(True, f"all {repo.test_count} tests passed"), (repo.name, fixed.why)


def test_rows_fit_the_context(rows: list[dict]) -> None:
    from tokenizers import Tokenizer

    from tinymodel.build import _render

    lengths = [len(e.ids) for e in Tokenizer.from_file(str(TOKENIZER)).encode_batch(_render(rows))]
    assert sum(n > 1024 for n in lengths) <= 0.1 * len(rows) and max(lengths) < 1300


def test_fingerprint_is_stable_and_sees_the_families() -> None:
    fp = fingerprint()
    assert fp == fingerprint() and set(json.loads(fp)) == {"system", "edit", "calls", "not_a_call", "families"}
