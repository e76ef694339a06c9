"""The tool-call env for real (bubblewrap, a pre-forked python): reset/step/evaluate, answers checked with math-verify
or the dataset's scorer, malformed actions, timeouts, isolation between calls, no network and no writes outside the
work dir, one long-lived executor forking a child per call, and the suite (the scripted policy solves every eval
task)."""

from __future__ import annotations

import json
import os
import socket
import statistics
import threading
import time
from fractions import Fraction

import pytest

from envs.base import Env, make_env, scripted_policy, task_suite
from envs.toolcall.actions import answer_call, parse_action, python_call
from envs.toolcall.env import SYSTEM_PROMPT, ToolCallConfig, ToolCallEnv
from envs.toolcall.scripted import scripted_action
from envs.toolcall.tasks import FAMILIES, SUITE, check_answer
from tests.loopback import loopback_server

EXPECTED_PROMPT = ('Solve the problem. Run Python with\n'
                   '<tool_call>{"name": "python", "arguments": {"code": "print(12 * 7)"}}</tool_call>\n'
                   'and give the final answer with\n'
                   '<tool_call>{"name": "answer", "arguments": {"answer": "84"}}</tool_call>')


@pytest.fixture
def env():
    e = ToolCallEnv(ToolCallConfig(call_timeout_s=1.0, max_steps=16))
    yield e
    e.close()


def first(family: str, split: str = "train"):
    return next(t for t in SUITE.tasks(split) if t.data.family == family)


def test_suite_shape_and_registration():
    assert task_suite("toolcall") is SUITE and scripted_policy("toolcall") is scripted_action
    assert len(SUITE.ids("train")) == 200 and len(SUITE.ids("eval")) == 50
    for f in FAMILIES:  # every family in both splits, tagged with its name and level
        for split in ("train", "eval"):
            assert any(t.tags == (f.name, f.level) for t in SUITE.tasks(split)), (f.name, split)
    assert {f.level for f in FAMILIES} == {"easy", "hard"}
    task = first("chain_sum")
    assert task.instruction == task.data.entry["question"]
    for t in SUITE.tasks():  # the arithmetic families' expressions are Python that gives the answer
        if t.data.expression:
            assert check_answer(t.data, str(eval(t.data.expression)))[0], t.task_id
    env = make_env("toolcall", max_steps=16)
    assert isinstance(env, Env) and env.max_steps == 16
    assert SYSTEM_PROMPT == EXPECTED_PROMPT == env.system_prompt


def test_reset_step_evaluate(env):
    task = first("products")
    assert env.reset(task) == task.instruction
    r = env.step(python_call("print(12 * 7)"))
    assert r.observation == "84\n[exit status 0]" and not r.done and r.info["exit_status"] == 0
    r = env.step(python_call("print('partial')\nprint(1 / 0)"))
    assert r.observation == "partial\nZeroDivisionError: division by zero\n[exit status 1]"
    r = env.step(python_call("x = ("))
    assert r.observation.startswith("SyntaxError: ") and r.observation.endswith("\n[exit status 1]")
    assert r.observation.count("\n") == 1  # the traceback's last line only
    assert env.step(python_call("import sys; sys.exit(3)")).observation == "[exit status 3]"
    assert env.step(python_call("x = 1")).observation == "[exit status 0]"  # no output: the status line alone
    r = env.step(answer_call(task.data.answer))
    assert r.observation == "Answer recorded." and r.done
    with pytest.raises(RuntimeError):
        env.step(python_call("print(1)"))
    outcome = env.evaluate()
    assert outcome.success and outcome.reward == 1.0 and "matches" in outcome.detail


def test_wrong_missing_and_numeric_answers(env):
    task = first("lcm")
    env.reset(task)
    env.step(answer_call(str(int(task.data.answer) + 1)))
    outcome = env.evaluate()
    assert not outcome.success and outcome.reward == -1.0 and "does not match" in outcome.detail
    env.reset(task)  # a new episode: no answer yet
    assert env.evaluate().reward == -1.0 and env.evaluate().detail == "no answer was given"
    env.step('<tool_call>{"name": "answer", "arguments": {"answer": ' + task.data.answer + '}}</tool_call>')
    assert env.evaluate().success  # a JSON number is an answer too


def test_answers_are_checked_with_math_verify_where_the_form_does_not_matter():
    dec = next(t.data for t in SUITE.tasks() if t.data.family == "decimal_chain_sum" and "." in t.data.answer)
    as_fraction = str(Fraction(dec.answer))
    assert "/" in as_fraction and check_answer(dec, as_fraction)[0]  # e.g. 14.24 == 356/25
    assert check_answer(dec, f"The answer is \\boxed{{{dec.answer}}}")[0]
    assert not check_answer(dec, str(Fraction(dec.answer) + 1))[0]
    prod = first("products").data
    assert check_answer(prod, f"{prod.answer}.0")[0]
    right, why = check_answer(prod, "no idea")  # math-verify cannot parse it: the dataset's scorer decides
    assert not right and "dataset scorer" in why
    assert not check_answer(prod, "")[0] and not check_answer(prod, "9" * 500)[0]
    assert not check_answer(prod, f"{prod.answer}**1")[0]  # powers never reach sympy
    # where the form is the point, equivalent is not enough: the dataset's scorer alone
    frac = next(t.data for t in SUITE.tasks() if t.data.family == "fraction_simplification"
                and t.data.answer.count("/") == 1 and Fraction(t.data.answer).denominator > 1)
    num, den = frac.answer.split("/")
    assert check_answer(frac, frac.answer)[0] and not check_answer(frac, f"{int(num) * 2}/{int(den) * 2}")[0]
    fact = next(t.data for t in SUITE.tasks() if t.data.family == "prime_factorization" and "×" in t.data.answer)
    assert check_answer(fact, fact.answer)[0] and not check_answer(fact, fact.answer.split(" × ")[-1])[0]


def test_answers_are_checked_off_the_main_thread_too():
    task = first("decimal_chain_sum").data
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(check_answer(task, str(Fraction(task.answer)))[0]))
    t.start()
    t.join()
    assert got == [True]


def test_malformed_actions_become_observations(env):
    env.reset(first("gcd"))
    bad = [
        "The answer is 5.",
        '<tool_call>{"name": "python", "arguments": {"code": "print(1)"}}',  # not closed
        "<tool_call>{name: python}</tool_call>",
        '<tool_call>["python", "print(1)"]</tool_call>',
        '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>',
        '<tool_call>{"name": "python", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "answer", "arguments": {"answer": "  "}}</tool_call>',
        "```python\nprint(1)\n```",
    ]
    for text in bad:
        r = env.step(text)
        assert r.observation.startswith("Invalid action: ") and r.observation.endswith(". Nothing was run.")
        assert "parse_error" in r.info and not r.done, text
    assert "unknown tool 'bash'" in env.step(bad[4]).observation
    for _ in range(env.max_steps - len(bad) - 2):
        assert not env.step("nothing").done
    assert env.step("nothing").done and env.steps == env.max_steps == 16
    assert env.evaluate().detail == "no answer was given"


def test_action_parser_shapes():
    assert parse_action(python_call("print(1)")).args == {"code": "print(1)"}
    as_string = json.dumps({"name": "answer", "arguments": json.dumps({"answer": "7"})})
    assert parse_action(f"So: <tool_call>{as_string}</tool_call>").args == {"answer": "7"}
    assert answer_call("2 × 3") == '<tool_call>{"name": "answer", "arguments": {"answer": "2 × 3"}}</tool_call>'
    assert python_call("print(12 * 7)") in SYSTEM_PROMPT and answer_call("84") in SYSTEM_PROMPT


def test_a_call_that_never_ends_times_out_and_the_next_one_works(env):
    env.reset(first("gcd"))
    server = env.executor.server_pid
    started = time.monotonic()
    r = env.step(python_call("print('before', flush=True)\nwhile True: pass"))
    assert time.monotonic() - started < 5
    assert r.observation == "before\n[timed out after 1 s]" and r.info["timed_out"] and r.info["exit_status"] is None
    r = env.step(python_call("print(2 + 2)"))
    assert r.observation == "4\n[exit status 0]" and env.executor.server_pid == server
    assert not r.info["executor_restarted"]


def test_a_call_that_kills_the_executor_gets_a_new_one(env):
    env.reset(first("gcd"))
    host_pid = env.executor.host_pid
    r = env.step(python_call("import os; os.kill(os.getppid(), 9)"))
    assert r.info["executor_restarted"] and "a new one was started" in r.observation
    assert env.executor.host_pid != host_pid
    assert env.step(python_call("print(5)")).observation == "5\n[exit status 0]"


def test_output_is_truncated_head_and_tail(env):
    env.reset(first("gcd"))
    r = env.step(python_call("print('\\n'.join(str(i) for i in range(1, 3001)))"))
    total = len("\n".join(str(i) for i in range(1, 3001))) + 1
    assert r.info["truncated_bytes"] == total - 1024
    assert r.observation.startswith("1\n2\n3\n") and r.observation.endswith("2999\n3000\n[exit status 0]")
    assert f"\n[... {total - 1024} bytes of output omitted ...]\n" in r.observation


def test_calls_are_isolated(env):
    env.reset(first("gcd"))
    code = ("import math, os, subprocess\nx = 41\nmath.pi = 3\nopen('state.txt', 'w').write('x')\n"
            "open('/tmp/state.txt', 'w').write('x')\nsubprocess.Popen(['sleep', '60'])\nprint('set')")
    assert env.step(python_call(code)).observation == "set\n[exit status 0]"
    check = ("import math, os\nprint(math.pi, 'x' in dir(), os.listdir('.'), os.listdir('/tmp'))\n"
             "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == sorted({1, os.getppid(), "
             "os.getpid()}))")
    r = env.step(python_call(check))
    assert r.observation == "3.141592653589793 False [] []\nTrue\n[exit status 0]"  # nothing left, nothing running


def test_no_state_survives_in_shm_locked_folders_or_a_read_only_workspace(env):
    """Files in /dev/shm, a folder made unreadable in /tmp or /workspace, and /workspace made read-only: none of it
    reaches the next call, nor the next episode."""
    env.reset(first("gcd"))
    code = ("import os\nopen('/dev/shm/state', 'w').write('x')\n"
            "os.makedirs('/tmp/locked/inner'); open('/tmp/locked/inner/f', 'w').write('x')\n"
            "os.chmod('/tmp/locked', 0)\n"
            "os.makedirs('locked/inner'); open('locked/inner/f', 'w').write('x'); os.chmod('locked', 0)\n"
            "os.chmod('/workspace', 0o555)\nprint('set')")
    assert env.step(python_call(code)).observation == "set\n[exit status 0]"
    check = ("import os\nprint(os.listdir('/dev/shm'), os.listdir('/tmp'), os.listdir('/workspace'))\n"
             "open('/workspace/w.txt', 'w').write('ok'); print(open('/workspace/w.txt').read())")
    assert env.step(python_call(check)).observation == "[] [] []\nok\n[exit status 0]"
    env.reset(first("gcd"))
    assert env.step(python_call("import os\nprint(os.listdir('/dev/shm'), os.listdir('/tmp'))")).observation == \
        "[] []\n[exit status 0]"


def test_a_loopback_server_on_the_host_is_unreachable(env):
    with loopback_server() as (port, accepted):
        with socket.create_connection(("127.0.0.1", port), timeout=2):  # the host itself reaches it
            pass
        env.reset(first("gcd"))
        r = env.step(python_call(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                                 "print('CONNECTED')"))
    assert "CONNECTED" not in r.observation and r.observation.startswith("ConnectionRefusedError")
    assert len(accepted) == 1  # only the host's own connection


def test_no_writes_outside_the_work_dir(env):
    env.reset(first("gcd"))
    marker = f"toolcall-marker-{env.sandbox.id}"
    code = (f"import os\nfor d in ('/', '/usr', '/etc', '/var', '/tmp', '/workspace', '/dev/shm'):\n"
            f"    try:\n        open(os.path.join(d, {marker!r}), 'w').close(); print('WROTE', d)\n"
            f"    except OSError as err:\n        pass\nprint(os.getuid(), os.getcwd())")
    r = env.step(python_call(code))
    wrote = {line.split()[1] for line in r.observation.splitlines() if line.startswith("WROTE")}
    assert "/workspace" in wrote and wrote <= {"/tmp", "/workspace", "/dev/shm"}
    assert "1000 /workspace" in r.observation
    for host in ("/", "/usr", "/etc", "/var", "/tmp", "/dev/shm"):
        assert not os.path.exists(f"{host}/{marker}")


def test_the_executor_is_pre_forked(env):
    env.reset(first("gcd"))
    host_pid, server_pid = env.executor.host_pid, env.executor.server_pid
    latencies, children = [], set()
    for _ in range(20):
        started = time.perf_counter()
        r = env.executor.call("print(12 * 7)", 5.0)
        latencies.append((time.perf_counter() - started) * 1000)
        assert r.output == "84\n" and r.server_pid == server_pid != r.pid
        children.add(r.pid)
    assert len(children) == 20 and env.executor.host_pid == host_pid  # one server, a new child per call
    env.reset(first("lcm"))  # a reset keeps the executor
    assert env.executor.server_pid == server_pid and env.executor.host_pid == host_pid
    print(f"python call latency: median {statistics.median(latencies):.2f} ms over 20 calls")


def test_scripted_policy_solves_every_eval_task(env):
    for task in SUITE.tasks("eval"):
        assert env.reset(task) == task.instruction
        step = 0
        while not env.done:
            r = env.step(scripted_action(task, step, seed="s", error_rate=0.0))
            if step == 0:  # the python call printed the answer itself
                assert r.info["exit_status"] == 0, (task.task_id, r.observation)
                printed = r.observation.rsplit("\n", 1)[0]
                assert check_answer(task.data, printed)[0], (task.task_id, r.observation)
            step += 1
        assert step == 2
        outcome = env.evaluate()
        assert outcome.success and outcome.reward == 1.0, (task.task_id, outcome.detail)


def test_scripted_policy_mistakes_are_seeded():
    task = first("chain_sum")
    runs = [[scripted_action(task, k, "seed-1", 0.5) for k in range(12)] for _ in range(2)]
    assert runs[0] == runs[1]
    assert any(not parse_action(a).ok or a not in (python_call(f"print({task.data.expression})"),
                                                   answer_call(task.data.answer)) for a in runs[0])
    assert [scripted_action(task, k, "x", 0.0) for k in range(2)] == [
        python_call(f"print({task.data.expression})"), answer_call(task.data.answer)]


def test_toolcall_bench_prints_one_json_object_with_both_latencies() -> None:
    from tests.bench.test_bench import bench_cli

    result = bench_cli("toolcall", "--json", "--calls", "4", timeout=300)
    assert result["calls"] == 4
    assert result["python_call_ms_p50"] > 0 and result["process_start_ms_p50"] > 0
    speedup = result["process_start_ms_p50"] / result["python_call_ms_p50"]
    assert result["speedup_p50"] == pytest.approx(speedup, rel=0.05)
