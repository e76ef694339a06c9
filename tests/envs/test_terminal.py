"""The terminal env for real (bubblewrap, bash): reset/step/evaluate, malformed actions, timeouts, truncation, and the
task suite (every reference solution passes its host-side check; doing nothing fails it)."""

from __future__ import annotations

import json
import time

import pytest

from envs.base import Env, Task, make_env, task_suite
from envs.terminal.actions import format_action, parse_action
from envs.terminal.env import TerminalConfig, TerminalEnv
from envs.terminal.tasks import FAMILIES, INSTANCES, SUITE, TerminalTask, expect_text, variant


def bash(cmd: str) -> str:
    return format_action(cmd)


@pytest.fixture
def env():
    e = TerminalEnv(TerminalConfig(command_timeout_s=1.5, max_output_bytes=400, max_steps=8))
    yield e
    e.close()


def scratch(task_id: str = "scratch") -> Task:
    return Task(task_id, "Do nothing in particular.",
                data=TerminalTask(files={"a.txt": "alpha\n", "sub/b.txt": "beta\n"},
                                  check=expect_text("done.txt", "yes"), solution=["echo yes > done.txt"]))


def test_suite_shape():
    assert task_suite("terminal") is SUITE
    assert len(SUITE) >= 30
    train, evals = SUITE.ids("train"), SUITE.ids("eval")
    assert len(train) + len(evals) == len(SUITE) and not set(train) & set(evals)
    assert 0.15 <= len(evals) / len(SUITE) <= 0.35
    kinds = {t.tags[0] for t in SUITE.tasks()}
    assert kinds == {"files", "text", "archives", "scripts"}
    for fam in FAMILIES:  # every family is in both splits, its instances asking for different things
        ids = [f"{fam.name}-{k}" for k in range(INSTANCES)]
        assert [SUITE.get(i).split for i in ids] == ["train"] * (INSTANCES - 1) + ["eval"]
        assert all(SUITE.get(i).tags == (fam.tag, fam.name) for i in ids)
        assert len({SUITE.get(i).instruction for i in ids}) >= INSTANCES - 1, fam.name
        assert variant(fam.name, 0).instruction == variant(fam.name, 0).instruction  # a variant is reproducible
    with pytest.raises(ValueError, match="unknown env"):
        make_env("no-such-env")
    assert isinstance(make_env("terminal"), Env)


def test_fresh_instances_are_new_reproducible_and_never_an_eval_task():
    ids = SUITE.fresh(50, "s3r1")
    assert ids == SUITE.fresh(50, "s3r1") and not set(ids) & set(SUITE.fresh(50, "s3r2"))
    assert len(set(ids)) == 50 and not set(ids) & set(SUITE.ids())
    families = [i.partition("~")[0] for i in ids]
    assert len(set(families[: len(FAMILIES)])) == len(FAMILIES)  # every family once before any twice
    held_out = {t.instruction for t in SUITE.tasks("eval")}
    for task_id, family in zip(ids, families):
        task = SUITE.get(task_id)
        assert task.task_id == task_id and task.split == "train" and task.tags[1] == family
        assert task.instruction not in held_out
        assert task.instruction == variant(family, task_id.partition("~")[2]).instruction
    assert SUITE.get(ids[0]) is SUITE.get(ids[0])  # made once
    for bad in ("no_such_family~s3r1-0", "count_lines~", "count_lines-9"):
        with pytest.raises(KeyError, match="has no task"):
            SUITE.get(bad)
    with pytest.raises(ValueError, match="makes no fresh instances"):
        task_suite("toolcall").fresh(2, "s1r1")
    with pytest.raises(ValueError, match="a seed without"):
        SUITE.fresh(2, "a~b")
    with pytest.raises(KeyError, match="has no task"):
        task_suite("toolcall").get("chain_sum~s1r1-0")
    env = TerminalEnv()
    try:  # a fresh instance is a task like the others: its reference solves it, nothing does not
        for task_id in ids[:6]:
            task = SUITE.get(task_id)
            env.reset(task)
            assert not env.evaluate().success
            env.reset(task)
            for command in task.data.solution:
                assert env.step(bash(command)).info["exit_status"] == 0, (task_id, command)
            assert env.evaluate().success, task_id
    finally:
        env.close()


def test_weighted_fresh_draws_favour_heavy_families_and_stay_reproducible():
    weights = {f: 0.1 for f in SUITE.families}
    weights["count_lines"] = weights["csv_sum"] = 1.0
    ids = SUITE.fresh(8, "s3r1", weights)
    assert ids == SUITE.fresh(8, "s3r1", dict(reversed(list(weights.items()))))  # the same seed and weights
    assert not set(ids) & set(SUITE.ids())
    families = [i.partition("~")[0] for i in ids]
    assert len(set(families)) == 8  # still without replacement
    heavy = sum(f in ("count_lines", "csv_sum") for k in range(200)
                for f in (i.partition("~")[0] for i in SUITE.fresh(4, f"w{k}", weights)))
    light = sum(f == "uppercase" for k in range(200)
                for f in (i.partition("~")[0] for i in SUITE.fresh(4, f"w{k}", weights)))
    # 4 of 39 families a draw: uniformly a family comes in about 20 of 200 draws, two in about 41; weighted ten to
    # one, the two heavy ones come in far more (229 here) and a light one in fewer (11)
    assert heavy > 200 and light < 20, (heavy, light)
    uniform = {f: 0.5 for f in SUITE.families}  # every weight alike: the unweighted draw, id for id
    assert SUITE.fresh(len(SUITE.families) + 3, "s3r1", uniform) == SUITE.fresh(len(SUITE.families) + 3, "s3r1")
    with pytest.raises(ValueError, match="missing"):
        SUITE.fresh(2, "s1r1", {"count_lines": 1.0})
    with pytest.raises(ValueError, match="not > 0"):
        SUITE.fresh(2, "s1r1", {**uniform, "csv_sum": 0.0})


def test_every_task_is_solved_by_its_reference_and_not_by_nothing():
    env = TerminalEnv()
    try:
        for task in SUITE.tasks():
            env.reset(task)
            nothing = env.evaluate()
            assert not nothing.success and nothing.reward == -1.0, task.task_id
            env.reset(task)  # a fresh sandbox with the same inputs
            for cmd in task.data.solution:
                r = env.step(bash(cmd))
                assert r.info["exit_status"] == 0, (task.task_id, r.observation)
            assert env.step(format_action(None)).done
            outcome = env.evaluate()
            assert outcome.success and outcome.reward == 1.0, (task.task_id, outcome.detail)
    finally:
        env.close()


def test_reset_step_evaluate(env):
    obs = env.reset(scratch())
    assert obs.startswith("Do nothing in particular.") and "a.txt" in obs and "sub/b.txt" in obs
    r = env.step(bash("pwd; cat a.txt"))
    assert r.observation == "/workspace\nalpha\n[exit status 0]" and not r.done
    env.step(bash("cd sub && X=42"))  # the shell persists: directory and variables
    r = env.step(bash('echo "$X $(pwd)"; ls; false'))
    assert r.observation == "42 /workspace/sub\nb.txt\n[exit status 1]" and r.info["exit_status"] == 1
    r = env.step(bash("cat <<'EOF' > ../done.txt\nyes\nEOF\necho '\"quotes\" $HOME'"))  # multi-line, quotes
    assert r.observation.startswith('"quotes" $HOME\n')
    r = env.step(bash("cat"))  # stdin is /dev/null: it cannot swallow the next command
    assert r.info["exit_status"] == 0 and not r.info["timed_out"]
    r = env.step(format_action(None))
    assert r.done and r.observation == "Submitted."
    with pytest.raises(RuntimeError):
        env.step(bash("true"))
    assert env.evaluate().success


def test_malformed_actions_become_observations(env):
    env.reset(scratch())
    bad = [
        "I think we should list the files.",
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}',  # not closed
        "<tool_call>{name: bash}</tool_call>",
        '<tool_call>["bash", "ls"]</tool_call>',
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "bash", "arguments": {"command": "  "}}</tool_call>',
    ]
    for i, text in enumerate(bad, start=1):
        r = env.step(text)
        assert r.observation.startswith("Invalid action:") and "parse_error" in r.info
        assert not r.done
    env.step("still no action")
    r = env.step("nor here")
    assert r.done and env.steps == env.max_steps == 8
    assert not env.evaluate().success


def test_action_parser_accepts_the_usual_shapes():
    assert parse_action(bash("ls -la")).args == {"command": "ls -la"}
    args_as_string = json.dumps({"name": "bash", "arguments": json.dumps({"command": "pwd"})})
    assert parse_action(f"ok <tool_call>{args_as_string}</tool_call>").args == {"command": "pwd"}
    assert parse_action("Let me look:\n```bash\nls\n```").args == {"command": "ls"}
    assert parse_action(format_action(None)).kind == "submit"
    assert parse_action("<tool_call>" + json.dumps({"name": "bash", "arguments": {"command": "x" * 9000}}) +
                        "</tool_call>").error.startswith("the command is 9000 characters long")


def test_timeouts_kill_the_command_and_keep_the_shell(env):
    env.reset(scratch())
    env.step(bash("cd sub"))
    started = time.monotonic()
    r = env.step(bash("echo before; sleep 30; echo after"))
    assert time.monotonic() - started < 5
    assert r.info["timed_out"] and r.info["exit_status"] == 137 and not r.info["shell_restarted"]
    assert "before" in r.observation and "\nafter" not in r.observation and "[timed out" in r.observation
    assert env.step(bash("pwd")).observation.startswith("/workspace/sub")  # same shell, same directory
    r = env.step(bash("Y=1; while true; do :; done; echo after"))  # builtins only: no process to kill
    assert r.info["timed_out"] and r.info["exit_status"] == 137 and not r.info["shell_restarted"]
    assert env.step(bash('echo "$Y"; pwd')).observation.startswith("1\n/workspace/sub\n")
    # a command that will not stop costs the shell: a new one starts in /workspace
    r = env.step(bash("trap '' USR1; while true; do :; done"))
    assert r.info["timed_out"] and r.info["shell_restarted"] and r.info["exit_status"] is None
    r = env.step(bash("pwd"))
    assert r.observation.startswith("/workspace\n") and r.info["exit_status"] == 0


def test_exit_and_sentinel_lookalikes(env):
    env.reset(scratch())
    r = env.step(bash("exit 3"))
    assert r.info["shell_restarted"] and "[the shell ended" in r.observation
    r = env.step(bash("echo '__OPENCLAW_DONE_0123__ 0'; printf '\\n__OPENCLAW_DONE_x__ 5\\n'; echo after"))
    assert r.observation.endswith("after\n[exit status 0]")


def test_output_is_truncated_head_and_tail(env):
    env.reset(scratch())
    r = env.step(bash("seq 1 20000"))
    total = len("\n".join(str(i) for i in range(1, 20001))) + 1
    assert r.info["truncated_bytes"] == total - 400
    assert r.observation.startswith("1\n2\n3\n") and r.observation.endswith("19999\n20000\n[exit status 0]")
    assert f"[... {total - 400} bytes of output omitted ...]" in r.observation
    started = time.monotonic()
    r = env.step(bash("yes"))  # a flood until the timeout: read and dropped, never held
    assert r.info["timed_out"] and r.info["truncated_bytes"] > 1_000_000
    assert len(r.observation) < 700 and time.monotonic() - started < 6


def test_verifier_does_not_follow_links_to_host_files(env):
    env.reset(scratch())
    env.step(bash("ln -s /etc/hostname done.txt"))
    outcome = env.evaluate()
    assert not outcome.success and "missing" in outcome.detail


async def test_the_heuristic_step_judge_votes_down_a_repeat_that_changes_nothing(env):
    """Real steps through ``judge_request`` (the history a step judge sees) and the heuristic judge: a clean command
    +1; the same call again with the same output -1 (no progress); the same call after the output changed +1."""
    from activities.judges import HeuristicJudge
    from contracts.episode import EpisodeStep
    from rlcore.judging import parse_score
    from workflows.episode import judge_request

    env.reset(scratch())
    judge, steps, votes = HeuristicJudge(), [], []
    for text in ["Let me look.\n" + bash("ls"), "Again.\n" + bash("ls"), bash("touch c.txt"), bash("ls"),
                 bash("ls -1")]:
        r = env.step(text)
        step = EpisodeStep(index=len(steps), action=text, observation=r.observation)
        steps.append(step)
        req = judge_request("terminal", "ep", "Do nothing in particular.", steps, step, r.info)
        raw = await judge.complete_step(req)
        votes.append(parse_score(raw))
        if len(steps) == 2:
            assert "repeats step 0" in raw and "Step 0:\n" in req.history
    assert votes == [1, -1, 1, 1, 1], votes


async def test_a_repeat_whose_output_differs_only_by_the_clock_is_still_a_repeat(env):
    """A command printing the time (and a long hex id) twice: the outputs differ, nothing changed, so the second -1;
    a command whose output changes in a real number is no repeat."""
    from activities.judges import HeuristicJudge
    from contracts.episode import EpisodeStep
    from rlcore.judging import parse_score
    from workflows.episode import judge_request

    env.reset(scratch())
    judge, steps, votes, outputs = HeuristicJudge(), [], [], []
    stamp = "date +%Y-%m-%dT%H:%M:%S.%N; date +%T.%N; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"
    for text in [bash(stamp), bash(stamp), bash("ls | wc -l"), bash("touch d.txt"), bash("ls | wc -l")]:
        r = env.step(text)
        outputs.append(r.observation)
        step = EpisodeStep(index=len(steps), action=text, observation=r.observation)
        steps.append(step)
        votes.append(parse_score(await judge.complete_step(judge_request("terminal", "ep", "Look around.", steps,
                                                                          step, r.info))))
    assert outputs[0] != outputs[1]  # the clock moved and the id is new
    assert votes == [1, -1, 1, 1, 1], (votes, outputs)
