"""General-track step judges: the exit-status heuristic, the content heuristics of the terminal env (its rules, every
reference step voted up) and of the tool-call env (on real episodes: the tiny model's actions from an `experiment
general` run, their observations from the env), the LLM judge's
templates for every env, and the judges by name."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from activities.judges import (
    STEP_JUDGES,
    HeuristicJudge,
    LLMJudge,
    assess_step,
    assess_terminal_content,
    assess_toolcall_content,
    make_step_judge,
    numbers,
    repeated_step,
    step_template_values,
    task_expression,
)
from contracts.episode import EpisodeStep, StepJudgeRequest
from envs.terminal.tasks import SUITE as TERMINAL
from envs.toolcall.tasks import SUITE
from prompts import GENERAL_JUDGES, render
from rlcore.judging import parse_score
from tests.fixtures_model import tiny_model_path  # noqa: F401 - session fixture
from workflows.episode import judge_request

OK = "[exit status 0]"
RECORDED = "Answer recorded."
NO_CALL = "Invalid action: no tool call found: reply with one <tool_call>{...}</tool_call>. Nothing was run."


def py(code: str) -> str:
    return json.dumps({"name": "python", "arguments": {"code": code}}).join(("<tool_call>", "</tool_call>"))


def ans(value: str) -> str:
    return json.dumps({"name": "answer", "arguments": {"answer": value}}).join(("<tool_call>", "</tool_call>"))


# Real episodes: the shipped tiny model's actions at temperature 1.0 (run general-toolcall-20261205-140730, outcome
# seed 0), the env's observations, whether the answer was right, and the votes each judge gives each step.
EPISODES = [
    # a success: the expression transcribed, its result answered
    ("chain_sum-011", [(py("print(5 + 5 + 0)"), f"10\n{OK}"), (ans("10"), RECORDED)], True,
     {"heuristic": [1, 0], "content": [1, 1]}),
    # a transcription error (+ 57 written + -57): a clean call, so the exit-status judge gives +1
    ("chain_sum-010", [(py("print(43 - 29 + 56 + -57)"), f"13\n{OK}"), (ans("13"), RECORDED)], False,
     {"heuristic": [1, 0], "content": [-1, 1]}),
    # a guess: no call, a number neither computed nor in the task
    ("basic_arithmetic-031", [(ans("- 2"), RECORDED)], False, {"heuristic": [0], "content": [-1]}),
    # a call that computes nothing new (3 is in the task's example), then its result answered
    ("prime_factorization-010", [(py("import math\nprint(math.lcm(3, 3))"), f"3\n{OK}"), (ans("3"), RECORDED)],
     False, {"heuristic": [1, 0], "content": [0, 1]}),
    # syntax errors, then a call with a number the task does not give
    ("simple_equations-009", [(py("print(( 6 -42)"), "SyntaxError: '(' was never closed\n[exit status 1]"),
                              (py("print(-()"), "SyntaxError: '(' was never closed\n[exit status 1]"),
                              (py("print(- -4 - -42)"), f"46\n{OK}"), (ans("46"), RECORDED)], False,
     {"heuristic": [-1, -1, 1, 0], "content": [-1, -1, -1, 1]}),
    # a malformed step, then the same call again with the same result
    ("gcd-009", [(py("import math\nprint(math.gcd(97, 95))"), f"1\n{OK}"), ("The tool.", NO_CALL),
                 (py("import math\nprint(math.gcd(97, 95))"), f"1\n{OK}"), (ans("1"), RECORDED)], True,
     {"heuristic": [1, -1, -1, 0], "content": [1, -1, -1, 1]}),
]


def requests(task_id: str, steps: list[tuple[str, str]]) -> list[StepJudgeRequest]:
    """What the episode workflow sends the step judge for each step (``workflows.episode.judge_request``)."""
    from envs.toolcall.actions import parse_action

    task = SUITE.get(task_id)
    done: list[EpisodeStep] = []
    out = []
    for t, (action, observation) in enumerate(steps):
        parsed = parse_action(action)
        step = EpisodeStep(index=t, action=action, observation=observation, parse_error=parsed.error)
        done.append(step)
        info = {"action": {"name": parsed.kind, "arguments": parsed.args}} if parsed.ok else {}
        out.append(judge_request("toolcall", f"ep-{task_id}", task.instruction, done, step, info))
    return out


def votes(rule: str, task_id: str, steps: list[tuple[str, str]]) -> list[int]:
    judge = HeuristicJudge(step_rule=rule)
    return [parse_score(asyncio.run(judge.complete_step(r))) for r in requests(task_id, steps)]


def test_recorded_observations_are_the_envs() -> None:
    """The episodes above replayed through the env (sandboxed python) give the recorded observations and outcomes."""
    from envs.toolcall.env import ToolCallEnv

    env = ToolCallEnv()
    try:
        for task_id, steps, success, _ in EPISODES:
            env.reset(SUITE.get(task_id))
            for action, observation in steps:
                assert env.step(action).observation == observation, (task_id, action)
            assert env.evaluate().success is success, task_id
    finally:
        env.close()


@pytest.mark.parametrize("rule", ["heuristic", "content"])
def test_votes_on_real_episodes(rule: str) -> None:
    for task_id, steps, _, expected in EPISODES:
        assert votes(rule, task_id, steps) == expected[rule], task_id


def test_content_ranks_real_successes_above_failures() -> None:
    """Mean step vote per episode, how often a success outranks a failure (ties half): the exit-status judge ranks
    these real episodes worse than chance (its +1 for the clean but wrong calls), the content judge mostly right."""
    def mean(rule: str, steps: list[tuple[str, str]], task_id: str) -> float:
        v = votes(rule, task_id, steps)
        return sum(v) / len(v)

    def auc(rule: str) -> float:
        wins = [mean(rule, s, t) for t, s, ok, _ in EPISODES if ok]
        losses = [mean(rule, s, t) for t, s, ok, _ in EPISODES if not ok]
        return sum((w > x) + 0.5 * (w == x) for w in wins for x in losses) / (len(wins) * len(losses))

    assert auc("heuristic") == pytest.approx(3.5 / 8) and auc("content") == pytest.approx(6.5 / 8)


def test_content_judge_never_sees_the_answer() -> None:
    """The vote depends on the task text and the observations only: a wrong answer that a call computed gets +1 (the
    outcome says it is wrong), and the request carries no answer to peek at."""
    assert "answer" not in {f for f in StepJudgeRequest.__dataclass_fields__} - {"tool_calls", "tool_results"}
    r = requests("chain_sum-010", EPISODES[1][1])[1]
    assert assess_toolcall_content(r.task_instruction, r.tool_calls, r.tool_results, r.history)[0] == 1


def test_content_rules() -> None:
    task = "State the final answer to the following arithmetic problem: 43 - 29 + 56 + 57 ="
    call = json.dumps({"name": "python", "arguments": {"code": "print(43 - 29 + 56 + 57)"}})
    assert assess_toolcall_content(task, call, f"127\n{OK}")[0] == 1
    # prints nothing: nothing to answer from
    quiet = json.dumps({"name": "python", "arguments": {"code": "x = 43 - 29 + 56 + 57"}})
    assert assess_toolcall_content(task, quiet, OK)[0] == -1
    # the same number again from another call: nothing new
    history = f"Step 0:\n<tool_call>{call}</tool_call>\n-> 127\n{OK}"
    other = json.dumps({"name": "python", "arguments": {"code": "print(43 - 29 + (56 + 57))"}})
    assert assess_toolcall_content(task, other, f"127\n{OK}", history)[0] in (0, -1)
    # an answer from a result: +1; from the task only: 0; from nowhere: -1; no number: -1
    for given, score in (("127", 1), ("57", 0), ("128", -1), ("many", -1)):
        call = json.dumps({"name": "answer", "arguments": {"answer": given}})
        assert assess_toolcall_content(task, call, RECORDED, history)[0] == score, given
    # malformed, failing and timed-out calls as the exit-status judge
    assert assess_toolcall_content(task, "(malformed: no tool call)", NO_CALL)[0] == -1
    assert assess_toolcall_content(task, call, "[timed out after 5 s]")[0] == -1


def test_task_expression_and_numbers() -> None:
    assert task_expression("Calculate -75 * 8 - -6.") == "-75*8--6"
    assert task_expression("Calculate 54 + ( -6 + -67 ).") == "54+(-6+-67)"
    assert task_expression("Solve the following multiplication: 63 * 70. Give only the result") == "63*70"
    assert task_expression("Determine the value of d that satisfies: 44 - 42*d = -586") == ""  # an equation
    assert task_expression("Simplify the fraction 224/826 to its lowest terms.") == ""  # a fraction, not a sum
    assert task_expression("Find the Greatest Common Divisor (GCD) of these numbers: 60, 55.") == ""
    assert numbers("print(43 - 29 + 56 + -57)") == [43, 29, 56, -57]
    assert numbers("1,000 apples, 3.25 and 1.5e-05; x1 = 7") == [1000, 3.25, 1.5e-05, 7]
    # every task family: an expression where the task writes one out
    families = {t.data.family for t in SUITE.tasks("train") if task_expression(t.instruction)}
    assert families == {"basic_arithmetic", "chain_sum", "products", "decimal_chain_sum", "decimal_arithmetic"}


def test_content_rule_of_other_envs_is_the_exit_status_rule() -> None:
    req = StepJudgeRequest(env="swe", episode_id="e", step_index=0, task_instruction="Fix notes.txt in pkg/mod.py.",
                           tool_calls=json.dumps({"name": "bash", "arguments": {"command": "cat other.py"}}),
                           tool_results=f"9\n{OK}")
    assert parse_score(asyncio.run(HeuristicJudge(step_rule="content").complete_step(req))) == 1


def bash(command: str) -> str:
    return json.dumps({"name": "bash", "arguments": {"command": command}})


def test_terminal_content_votes_every_reference_step_up() -> None:
    """Every step of every terminal task's reference solution names only what the task and the earlier steps name:
    the rule never votes a right command down."""
    for task in TERMINAL.tasks():
        history: list[str] = []
        for i, command in enumerate(task.data.solution):
            score, why = assess_terminal_content(task.instruction, bash(command), OK, "\n\n".join(history))
            assert score == 1, (task.task_id, command, why)
            history.append(f"Step {i}:\n<tool_call>{bash(command)}</tool_call>\n-> {OK}")
        submit = json.dumps({"name": "submit", "arguments": {}})
        assert assess_terminal_content(task.instruction, submit, "Submitted.", "\n\n".join(history))[0] == 0


def test_terminal_content_rules() -> None:
    task = "Write the number of lines in draft.txt to output.txt."
    judge = HeuristicJudge(step_rule="content")

    def vote(command: str, result: str = OK, history: str = "") -> int:
        req = StepJudgeRequest(env="terminal", episode_id="e", step_index=0, task_instruction=task,
                               tool_calls=bash(command), tool_results=result, history=history)
        return parse_score(asyncio.run(judge.complete_step(req)))

    assert vote("wc -l < draft.txt > output.txt") == 1
    assert vote("wc -l < words.txt > output.txt") == -1  # a file the task never names: misread
    assert vote("wc -l < draft.txt > answer.txt") == -1  # the output under another name
    assert vote("wc -l < /workspace/draft.txt > output.txt") == 1
    assert vote("cat draft.md") == -1
    assert vote("awk 'END {print NR}' draft.txt > output.txt") == 1  # a program in quotes names nothing
    assert vote("wc -l < draft.txt > output.txt", "wc: draft.txt: No such file\n[exit status 1]") == -1
    # a name an earlier result showed is known; one an earlier command made too
    shown = f"Step 0:\n<tool_call>{bash('ls')}</tool_call>\n-> draft.txt\nold/notes.txt\n{OK}"
    assert vote("cat old/notes.txt", history=shown) == 1
    made = f"Step 0:\n<tool_call>{bash('echo 1 > tmp.sh')}</tool_call>\n-> {OK}"
    assert vote("bash tmp.sh > output.txt", history=made) == 1
    submit = json.dumps({"name": "submit", "arguments": {}})
    assert assess_terminal_content(task, submit, "Submitted.")[0] == -1  # nothing was done
    assert assess_terminal_content(task, submit, "Submitted.", made)[0] == 0  # the outcome decides
    failed = f"Step 0:\n<tool_call>{bash('cat x.txt')}</tool_call>\n-> cat: x.txt: No such file\n[exit status 1]"
    assert assess_terminal_content(task, submit, "Submitted.", failed)[0] == -1


def test_step_template_values_render_every_env() -> None:
    for env, template in GENERAL_JUDGES.items():
        req = StepJudgeRequest(env=env, episode_id="e", step_index=2, task_instruction="the task",
                               history="Step 0:\na\n-> first\n\nStep 1:\nb\n-> second", assistant_text="I look.",
                               tool_calls='{"name": "x", "arguments": {}}', tool_results="out\n[exit status 2]")
        system, user = render(template, **step_template_values(req))
        assert "the task" in user["content"] and "out" in user["content"], env
    swe = step_template_values(StepJudgeRequest(env="swe", episode_id="e", step_index=0,
                                                tool_results="[exit status 2]"))
    assert swe["returncode"] == "2" and swe["n_history"] == 0
    gui = step_template_values(StepJudgeRequest(env="gui", episode_id="e", step_index=1, history="Step 0:\na\n-> s1"))
    assert gui["observation"] == "s1"


def test_llm_step_judge_fills_the_toolcall_template() -> None:
    seen: list[dict] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        return httpx.Response(200, json={"choices": [{"message": {"content": "Fine. \\boxed{1}"}}]})

    judge = make_step_judge("llm", url="http://judge.invalid")
    assert isinstance(judge, LLMJudge)

    async def go() -> str:
        judge.http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
        try:
            return await judge.complete_step(requests("chain_sum-011", EPISODES[0][1])[0])
        finally:
            await judge.aclose()

    assert parse_score(asyncio.run(go())) == 1
    user = seen[0]["messages"][1]["content"]
    assert "5 + 5 + 0 =" in user and "print(5 + 5 + 0)" in user and "10\n[exit status 0]" in user


def test_llm_step_judge_asks_a_real_engine(tiny_model_path: Path) -> None:  # noqa: F811
    # the policy engine itself as step judge: its /v1/chat/completions, the env's template, m votes = m calls. The
    # tiny test model is no judge: a reply without a \\boxed{} score is a None vote, left out of the step reward's mean
    from tests.model_factory import running_engine

    req = requests("chain_sum-011", EPISODES[0][1])[0]

    async def go(url: str) -> list[str]:
        judge = make_step_judge("llm", url=url, temperature=1.0)
        judge.max_tokens = 8
        try:
            return [await judge.complete_step(req) for _ in range(3)]
        finally:
            await judge.aclose()

    with running_engine(tiny_model_path, max_batch=4) as url:
        raws = asyncio.run(go(url))
    assert len(raws) == 3 and all(isinstance(r, str) and r for r in raws)
    assert all(parse_score(r) in (None, -1, 0, 1) for r in raws)


def test_step_judges_by_name() -> None:
    assert STEP_JUDGES == ("heuristic", "content", "llm")
    assert make_step_judge("heuristic").step_rule == "heuristic"
    assert make_step_judge("content").step_rule == "content"
    for bad in (lambda: make_step_judge("llm"), lambda: make_step_judge("oracle"),
                lambda: HeuristicJudge(step_rule="oracle")):
        with pytest.raises(ValueError):
            bad()


def test_exit_status_rule_unchanged() -> None:
    call = json.dumps({"name": "python", "arguments": {"code": "print(1)"}})
    assert assess_step(call, f"1\n{OK}") == (1, "The command ran cleanly.")


def test_a_repeated_call_is_found_whatever_its_timings() -> None:
    """Two runs of the same test command differ only in their timing line: the second is a repeat. A changed result
    is not."""
    call = '{"name": "bash", "arguments": {"command": "python3 -m unittest"}}'
    first = "F.\nFAIL: test_total\n----\nRan 2 tests in 0.001s\n\nFAILED (failures=1)\n[exit status 1]"
    history = f"Step 0:\n<tool_call>{call}</tool_call>\n-> {first}"
    assert repeated_step(call, first.replace("0.001s", "0.004s"), history) == 0
    assert repeated_step(call, first.replace("in 0.001s", "in 12.50 ms"), history) == 0
    assert repeated_step(call, first.replace("failures=1", "failures=2"), history) is None
    assert repeated_step('{"name": "bash", "arguments": {"command": "ls"}}', first, history) is None
