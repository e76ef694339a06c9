"""The SWE env for real (bubblewrap, the sandbox's python3 and unittest): every repo fails unfixed and passes with its
reference fix, reset/step/evaluate, edit errors, malformed actions, timeouts, grading that ignores edited tests, the
sandbox's walls seen from a bash action, and the scripted policy."""

from __future__ import annotations

import json
import re
import time

import pytest

from envs.base import Env, Task, make_env, scripted_policy, task_suite
from envs.swe.actions import format_action, parse_action
from envs.swe.env import SweConfig, SweEnv
from envs.swe.grader import Verdict, grade
from envs.swe.repo import Fix, SweRepo
from envs.swe.scripted import MISTAKES, scripted_action
from envs.swe.tasks import FAMILIES, INSTANCES, REPOS, SUITE, instruction, variant
from tests.loopback import loopback_server


def bash(command: str) -> str:
    return format_action("bash", command=command)


def edit(path: str, old: str, new: str) -> str:
    return format_action("edit", path=path, old=old, new=new)


SUBMIT = format_action("submit")


@pytest.fixture
def env():
    e = SweEnv(SweConfig(command_timeout_s=1.5, max_steps=20))
    yield e
    e.close()


def task(name: str) -> Task:
    return SUITE.get(name)


def test_suite_shape():
    assert task_suite("swe") is SUITE
    assert len(SUITE) == len(REPOS) + INSTANCES * len(FAMILIES) and len(FAMILIES) >= 10
    train, evals = SUITE.ids("train"), SUITE.ids("eval")
    assert not set(train) & set(evals)
    hand = [SUITE.get(r.name) for r in REPOS]
    assert len([t for t in hand if t.split == "train"]) >= 16 and len([t for t in hand if t.split == "eval"]) >= 5
    tags = {tag for t in hand for tag in t.tags}
    assert tags == {"text", "numeric", "data", "systems"}
    for tag in tags:  # every domain is in both splits
        assert any(tag in SUITE.get(i).tags for i in evals) and any(tag in SUITE.get(i).tags for i in train)
    for t in SUITE.tasks():
        repo: SweRepo = t.data
        assert t.task_id == repo.name and t.instruction == instruction(repo) and t.split == repo.split
        assert repo.test_files and repo.test_count >= 3 and "tests/__init__.py" in repo.files
    for t in hand:
        assert len([p for p in t.data.files if not t.data.is_test(p)]) >= 3, t.task_id  # a few modules each
    for fam in FAMILIES:  # the last instance of each family is held out; instances differ
        ids = [f"{fam.name}-{k}" for k in range(INSTANCES)]
        assert [SUITE.get(i).split for i in ids] == ["train"] * (INSTANCES - 1) + ["eval"]
        assert all(SUITE.get(i).tags == (fam.tag, fam.name) for i in ids)
        assert len({SUITE.get(i).instruction for i in ids}) == INSTANCES
        assert variant(fam.name, 0).instruction not in {SUITE.get(i).instruction for i in ids}
    assert isinstance(make_env("swe"), Env) and make_env("swe").max_steps == 20
    assert scripted_policy("swe") is scripted_action


def test_every_repo_fails_unfixed_and_passes_with_its_fix():
    """The hand-written repos as whole episodes. The family instances are graded fixed and unfixed by the next test,
    and episodes of them are replayed by the corpus tests: an episode each here would add half a minute."""
    env = SweEnv()
    try:
        for t in (SUITE.get(r.name) for r in REPOS):
            repo: SweRepo = t.data
            verdict = grade(repo, {p: s.encode() for p, s in repo.files.items()}, env.config.sandbox,
                            env.config.test_timeout_s)
            assert not verdict.passed and "did not pass" in verdict.why, (repo.name, verdict.why)
            env.reset(t)
            for f in repo.fix:
                r = env.step(edit(f.path, f.old, f.new))
                assert r.observation.startswith("Edited "), (repo.name, r.observation)
            r = env.step(SUBMIT)
            assert r.done and r.info["diff"].startswith(f"--- a/{repo.fix[0].path}\n")
            outcome = env.evaluate()
            assert outcome.success and outcome.reward == 1.0, (repo.name, outcome.detail)
            assert outcome.detail.startswith(f"passed: all {repo.test_count} tests passed")
    finally:
        env.close()


def test_every_family_instance_fails_unfixed_and_passes_with_its_fix():
    config = SweConfig()
    for fam in FAMILIES:
        for k in range(INSTANCES):
            repo: SweRepo = SUITE.get(f"{fam.name}-{k}").data
            for f in repo.fix:
                assert repo.files[f.path].count(f.old) == 1, (repo.name, f.old)
            verdict = grade(repo, {p: s.encode() for p, s in repo.files.items()}, config.sandbox, 30.0)
            assert not verdict.passed and "did not pass" in verdict.why, (repo.name, verdict.why)
            fixed = grade(repo, {p: s.encode() for p, s in repo.fixed_files().items()}, config.sandbox, 30.0)
            assert fixed == Verdict(True, f"all {repo.test_count} tests passed"), (repo.name, fixed.why)


def test_fresh_instances_are_family_repos_that_fail_unfixed_and_pass_fixed():
    ids = SUITE.fresh(len(FAMILIES), "s2r5")
    assert ids == SUITE.fresh(len(FAMILIES), "s2r5") and not set(ids) & set(SUITE.ids())
    assert {i.partition("~")[0] for i in ids} == {f.name for f in FAMILIES}  # each family once
    held_out = {t.instruction for t in SUITE.tasks("eval")}
    config = SweConfig()
    for task_id in ids[:4]:
        task = SUITE.get(task_id)
        repo: SweRepo = task.data
        assert task.split == "train" and repo.name == task_id and task.instruction not in held_out
        assert not grade(repo, {p: s.encode() for p, s in repo.files.items()}, config.sandbox, 30.0).passed
        assert grade(repo, {p: s.encode() for p, s in repo.fixed_files().items()}, config.sandbox, 30.0).passed


def test_reset_step_evaluate(env):
    obs = env.reset(task("wordwrap-last-line"))
    assert obs.startswith("wrap() loses text.") and "wrapper/wrap.py" in obs and "tests/test_wrap.py" in obs
    r = env.step(bash("python3 -m unittest 2>&1 | tail -n 3"))
    assert "FAILED (failures=4)" in r.observation and not r.done
    env.step(bash("cd wrapper && X=42"))  # the shell persists: directory and variables
    r = env.step(bash('echo "$X $(pwd)"'))
    assert r.observation == "42 /workspace/wrapper\n[exit status 0]"
    fix = task("wordwrap-last-line").data.fix[0]
    r = env.step(edit("/workspace/" + fix.path, fix.old, fix.new))  # absolute paths under /workspace are fine
    assert r.observation.startswith("Edited wrapper/wrap.py; lines ") and "lines.append(current)" in r.observation
    r = env.step(format_action("write_file", path="wrapper/extra.py", content="WIDTH = 72\n"))
    assert r.observation == "Wrote wrapper/extra.py (11 characters)."
    r = env.step(bash("cd .. && python3 -m unittest 2>&1 | tail -n 1"))
    assert r.observation.startswith("OK")
    r = env.step(SUBMIT)
    assert r.done and r.observation == "Submitted."
    diff = r.info["diff"]
    assert "--- /dev/null\n+++ b/wrapper/extra.py\n@@ -0,0 +1 @@\n+WIDTH = 72\n" in diff
    assert "+    if current:\n+        lines.append(current)\n" in diff and "__pycache__" not in diff
    with pytest.raises(RuntimeError):
        env.step(bash("true"))
    outcome = env.evaluate()
    assert outcome.success and outcome.detail == f"passed: all 6 tests passed\n\ndiff:\n{diff}"


def test_edit_errors(env):
    env.reset(task("slugify-edges"))
    env.step(bash("ln -s /etc/hostname host.txt; ln -s /tmp scratch; printf '\\xff\\xfe' > blob.bin"))
    cases = [
        (edit("textkit/slug.py", "no such text", "x"), "Error: textkit/slug.py: the old text was not found"),
        (edit("textkit/slug.py", "import", "x"), "Error: textkit/slug.py: the old text occurs 2 times"),
        (edit("textkit/nope.py", "a", "b"), "Error: textkit/nope.py: no such file"),
        (edit("textkit", "a", "b"), "Error: textkit: no such file (a directory)"),
        (edit("blob.bin", "a", "b"), "Error: blob.bin is not a UTF-8 text file"),
        (edit("host.txt", "a", "b"), "Error: host.txt is outside the repository (/workspace)"),
        (format_action("write_file", path="scratch/x.py", content="x"),
         "Error: scratch/x.py is outside the repository (/workspace)"),
        (edit("../etc/passwd", "root", "x"), "Invalid action: edit: ../etc/passwd is outside the repository"),
        (edit("/etc/passwd", "root", "x"), "Invalid action: edit: /etc/passwd is outside the repository"),
        (edit("/workspace/../etc/passwd", "root", "x"), "Invalid action: edit: /workspace/../etc/passwd is outside"),
        (edit("textkit/slug.py", "", "x"), 'Invalid action: edit: "old" is empty'),
    ]
    for action, expected in cases:
        r = env.step(action)
        assert r.observation.startswith(expected), (action, r.observation)
        assert not r.done and (r.info.get("edit_error") or r.info.get("parse_error"))
    assert env.diff() == "Binary files /dev/null and b/blob.bin differ\n"  # links are left out: nothing changed


def test_malformed_actions_become_observations(env):
    env.reset(task("slugify-edges"))
    bad = [
        ("I would start by reading the tests.", "no action found"),
        ('<tool_call>{"name": "bash", "arguments": {"command": "ls"}}', "is not closed"),
        ("<tool_call>{name: bash}</tool_call>", "not valid JSON"),
        ('<tool_call>["edit"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "patch", "arguments": {}}</tool_call>', "the tools are bash, edit, write_file, submit"),
        ('<tool_call>{"name": "edit", "arguments": {"path": "a.py", "old": "x"}}</tool_call>', 'needs a "new" string'),
        ('<tool_call>{"name": "edit", "arguments": {"old": "x", "new": "y"}}</tool_call>', 'needs a non-empty "path"'),
        ('<tool_call>{"name": "write_file", "arguments": {"path": "a.py", "content": 3}}</tool_call>',
         'needs a "content" string'),
        ('<tool_call>{"name": "bash", "arguments": {"command": " "}}</tool_call>', 'non-empty "command"'),
    ]
    for text, why in bad:
        r = env.step(text)
        assert r.observation.startswith("Invalid action:") and why in r.info["parse_error"], (text, r.observation)
        assert not r.done
    for _ in range(env.max_steps - len(bad) - 1):
        assert not env.step("nothing").done
    r = env.step("still nothing")
    assert r.done and env.steps == env.max_steps == 20 and r.info["diff"] == ""
    outcome = env.evaluate()
    assert not outcome.success and outcome.reward == -1.0 and outcome.detail.endswith("diff:\n(no changes)")


def test_action_parser_accepts_the_usual_shapes():
    as_string = json.dumps({"name": "edit", "arguments": json.dumps({"path": "./a/../b.py", "old": "x", "new": ""})})
    assert parse_action(f"Fixing: <tool_call>{as_string}</tool_call>").args == {"path": "b.py", "old": "x", "new": ""}
    assert parse_action("Let me run them:\n```bash\npython3 -m unittest\n```").args == {
        "command": "python3 -m unittest"}
    assert parse_action(SUBMIT).kind == "submit"
    examples = re.findall(r"<tool_call>.*?</tool_call>", SweEnv.system_prompt)  # the prompt's own examples parse
    assert [parse_action(e).kind for e in examples] == ["bash", "edit", "write_file", "submit"]
    assert parse_action(format_action("write_file", path="x.py", content="y" * 300_000)).error.startswith(
        'write_file: "content" is 300000 characters long')


def test_command_timeout_keeps_the_shell(env):
    env.reset(task("slugify-edges"))
    env.step(bash("cd textkit"))
    started = time.monotonic()
    r = env.step(bash("echo before; sleep 30; echo after"))
    assert time.monotonic() - started < 5
    assert r.info["timed_out"] and r.info["exit_status"] == 137 and not r.info["shell_restarted"]
    assert "before" in r.observation and "\nafter" not in r.observation and "[timed out" in r.observation
    r = env.step(bash("pwd"))
    assert r.observation.startswith("/workspace/textkit\n")


def test_editing_or_deleting_the_tests_does_not_pass_grading(env):
    t = task("inventory-exact-stock")
    env.reset(t)
    stub = "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        pass\n"
    env.step(format_action("write_file", path="tests/test_stock.py", content=stub))
    env.step(format_action("write_file", path="tests/test_more.py", content=stub))
    r = env.step(bash("python3 -m unittest 2>&1 | tail -n 1"))
    assert r.observation.startswith("OK")  # it passes in the episode ...
    outcome = env.evaluate()  # ... not when graded with the original tests
    assert not outcome.success and outcome.reward == -1.0
    assert outcome.detail.startswith("failed: 2 of 5 tests in tests.test_stock did not pass: ")
    assert "InventoryTest.test_reserve_all" in outcome.detail and "+++ b/tests/test_more.py" in outcome.detail

    env.reset(t)
    env.step(bash("rm -rf tests && python3 -m unittest 2>&1 | tail -n 1"))
    outcome = env.evaluate()
    assert not outcome.success and "2 of 5 tests in tests.test_stock did not pass" in outcome.detail
    assert "--- a/tests/test_stock.py\n+++ /dev/null" in outcome.detail

    env.reset(t)  # a module that ends the run early does not pass either
    env.step(format_action("write_file", path="stock/__init__.py", content="import os\nos._exit(0)\n"))
    outcome = env.evaluate()
    assert not outcome.success and outcome.detail.startswith(
        "failed: tests.test_stock: the run ended without reporting any test (exit status 0)")


def test_no_network_and_no_writes_outside_the_work_dir(env):
    with loopback_server() as (port, accepted):
        env.reset(task("slugify-edges"))
        r = env.step(bash(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED"))
        code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)"
        r2 = env.step(bash(f'python3 -c "{code}" 2>&1 | tail -n 1'))
    assert "CONNECTED" not in r.observation and "Connection refused" in r.observation
    assert "ConnectionRefusedError" in r2.observation and not accepted
    r = env.step(bash("for p in / /usr /etc /root; do touch $p/swe-marker 2>/dev/null && echo WROTE $p; done; "
                      "touch /workspace/ok && echo WROTE /workspace"))
    assert r.observation == "WROTE /workspace\n[exit status 0]"


def test_scripted_policy_solves_an_episode(env):
    t = task("semver-numeric-compare")
    env.reset(t)
    for step in range(env.max_steps):
        r = env.step(scripted_action(t, step, "seed-0", 0.0))
        if r.done:
            break
    assert r.observation == "Submitted." and step == len(t.data.fix) + 2
    assert env.evaluate().success

    # with mistakes: they show up as observations, and the plan still completes
    seed, rate = "seed-7", 0.3
    actions = [scripted_action(t, s, seed, rate) for s in range(env.max_steps)]
    assert any(a in MISTAKES[:4] for a in actions[:6]), "this seed makes an early mistake"
    env.reset(t)
    observations = []
    for action in actions:
        r = env.step(action)
        observations.append(r.observation)
        if r.done:
            break
    assert any(o.startswith(("Invalid action:", "Error:")) for o in observations)
    assert env.evaluate().success


def test_grade_counts_every_test():
    repo = SweRepo(name="tiny", issue="", fix=(Fix("pkg/m.py", "1", "2"),), files={
        "pkg/__init__.py": "", "pkg/m.py": "X = 1\n", "pkg/n.py": "",
        "tests/__init__.py": "", "tests/test_m.py": (
            "import unittest\nfrom pkg.m import X\n\n\nclass T(unittest.TestCase):\n"
            "    def test_x(self):\n        self.assertEqual(X, 2)\n\n"
            "    def test_y(self):\n        pass\n")})
    assert repo.test_count == 2
    files = {p: s.encode() for p, s in repo.fixed_files().items()}
    config = SweConfig()
    assert grade(repo, files, config.sandbox, 30.0) == Verdict(True, "all 2 tests passed")
    files["pkg/m.py"] = b"import time\ntime.sleep(30)\n"
    assert grade(repo, files, config.sandbox, 1.0) == Verdict(False, "tests.test_m: the tests timed out after 1 s")
