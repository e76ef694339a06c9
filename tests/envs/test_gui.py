"""The GUI env for real (headless Chromium in bubblewrap, MiniWoB++ pages): reset/step/evaluate, the action parser,
the scripted policy, a page that hangs, no network from the page, a fresh profile per episode, nothing left running
after close."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from pathlib import Path

import pytest

from envs.base import Env, Task, make_env, scripted_policy, task_suite
from envs.gui.actions import format_action, parse_action
from envs.gui.env import GuiConfig, GuiEnv
from envs.gui.scripted import SOLUTIONS, solutions
from envs.gui.tasks import EVAL, SUITE, TRAIN, GuiTask, own_page


@pytest.fixture
def env():
    e = GuiEnv(GuiConfig(step_timeout_s=3.0, max_steps=6))
    yield e
    e.close()


def own(body: str, script: str = "var genProblem = function() {};", utterance: str = "Do it.") -> Task:
    return Task("own-1", utterance, data=GuiTask("own", 1, html=own_page(body, script, utterance)))


def alive(pids: list[int]) -> list[int]:
    """The pids still running. A zombie is dead: bwrap's inner process, orphaned when the outer one is killed, waits
    there for the machine's pid 1 to reap it."""
    out = []
    for p in pids:
        try:
            state = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(p)
    return out


def test_suite_shape():
    assert task_suite("gui") is SUITE
    train, evals = SUITE.ids("train"), SUITE.ids("eval")
    assert len(train) + len(evals) == len(SUITE) >= 60 and not set(train) & set(evals)
    assert {t.data.page for t in SUITE.tasks("train")} == set(TRAIN)
    assert {t.data.page for t in SUITE.tasks("eval")} == set(EVAL) and not set(TRAIN) & set(EVAL)
    for t in SUITE.tasks():
        assert t.task_id == f"{t.data.page}-{t.data.seed}" and t.tags == (t.data.page,)
    assert isinstance(make_env("gui"), Env)  # starts nothing until reset
    assert set(solutions()) == set(SUITE.ids()), f"re-record {SOLUTIONS.name}"


def test_parse_action():
    assert parse_action(format_action("click", ref=7)).args == {"ref": 7}
    assert parse_action('<tool_call>{"name": "click", "arguments": "{\\"ref\\": \\"[5]\\"}"}</tool_call>').args == {
        "ref": 5}
    assert parse_action(format_action("type", ref=3, text="hi")).args == {"ref": 3, "text": "hi"}
    assert parse_action(format_action("click_xy", x=10, y=20.5)).args == {"x": 10.0, "y": 20.5}
    assert parse_action(format_action("key", key="return")).kind == "key"
    for text, why in [("click 7", "no action found"), ('<tool_call>{"name": "click"', "not closed"),
                      ("<tool_call>{oops}</tool_call>", "not valid JSON"),
                      (format_action("scroll", ref=1), "unknown tool"),
                      (format_action("click", ref="submit"), '"ref" must be'),
                      (format_action("click", ref=True), '"ref" must be'),
                      (format_action("type", ref=3), 'needs a "text"'),
                      (format_action("click_xy", x=-1, y=3), "off the page"),
                      (format_action("click_xy", x="a", y=3), "needs numbers"),
                      (format_action("key", key="Hyper"), "key needs"),
                      ("<tool_call>[1]</tool_call>", "JSON object")]:
        a = parse_action(text)
        assert not a.ok and why in a.error, (text, a.error)


def test_reset_step_evaluate(env):
    task = SUITE.get("click-button-1")
    obs = env.reset(task)
    assert obs.startswith('Task: Click on the "Ok" button.\n') and '] button "Ok" (' in obs
    assert env.reset(task) == obs  # seeded: the same page on every reset
    r = env.step("I will click the button.")  # malformed: nothing happens, the episode goes on
    assert not r.done and r.observation.startswith("Invalid action: no action found") and "parse_error" in r.info
    r = env.step(format_action("click", ref=999))
    assert not r.done and r.observation.startswith("Invalid action: no element [999]") and r.info["action_error"]
    r = env.step(format_action("type", ref=3, text="x"))  # a div, not a text field
    assert "not a text field" in r.observation and not r.done
    ok = next(e for e in env.last_state["elements"] if e.get("text") == "Ok")
    r = env.step(format_action("click", ref=ok["ref"]))
    assert r.done and r.observation == "The task has ended." and r.info["miniwob_reward"] == 1.0
    json.dumps(r.info)
    assert env.evaluate().success and env.evaluate().reward == 1.0
    with pytest.raises(RuntimeError):
        env.step(format_action("click", ref=ok["ref"]))

    env.reset(SUITE.get("click-test-2-1"))  # the wrong button ends the task too, with -1
    wrong = next(e for e in env.last_state["elements"] if e.get("text") == "TWO")
    assert env.step(format_action("click", ref=wrong["ref"])).done
    assert env.evaluate().reward == -1.0 and not env.evaluate().success

    env.reset(SUITE.get("focus-text-1"))  # out of steps: not done, -1
    for _ in range(env.max_steps):
        r = env.step(format_action("click_xy", x=150, y=20))
    assert r.done and not r.info["task_done"]
    assert env.evaluate().detail == "the task did not end in 6 steps"


def test_keys_text_and_screenshot():
    script = """var genProblem = function() {
      document.getElementById('f').value = 'old';
      document.getElementById('f').onkeydown = function(e) {
        if (e.key === 'Enter') core.endEpisode(this.value === 'new text' ? 1 : -1, false, 'typed ' + this.value);
      };
    };"""
    env = GuiEnv(GuiConfig(screenshots=True, step_timeout_s=3.0))
    try:
        obs = env.reset(own('<input type="text" id="f">', script, utterance="Type it."))
        assert obs.startswith("Task: Type it.") and 'input_text#f value="old"' in obs
        assert env.last_screenshot[:8] == b"\x89PNG\r\n\x1a\n"
        field = next(e for e in env.last_state["elements"] if e["id"] == "f")
        r = env.step(format_action("type", ref=field["ref"], text="new text"))  # replaces the text
        assert 'value="new text"' in r.observation and "focused" in r.observation
        r = env.step(format_action("key", key="Enter"))
        assert r.done and env.evaluate().success and env.evaluate().detail == "MiniWoB reward 1 (typed new text)"
    finally:
        env.close()


@pytest.mark.parametrize("task_id,error_rate,seed", [("click-checkboxes-2", 0.0, "s1"), ("login-user-3", 0.4, "s1"),
                                                     ("choose-list-4", 0.0, "s1"), ("click-dialog-2-2", 0.35, "s2")])
def test_scripted_policy_solves(env, task_id, error_rate, seed):
    policy = scripted_policy("gui")
    task = SUITE.get(task_id)
    env.max_steps = 30
    env.reset(task)
    step = 0
    while not env.done:
        env.step(policy(task, step, seed, error_rate))
        step += 1
    assert env.evaluate().success, (task_id, env.evaluate().detail)
    assert (step > len(solutions()[task_id])) == (error_rate > 0)  # the mistakes were made, and did no harm


@pytest.mark.slow
def test_every_task_is_solved_by_its_recorded_actions():
    env = GuiEnv()
    policy = scripted_policy("gui")
    try:
        for task in SUITE.tasks():
            env.reset(task)
            step = 0
            while not env.done:
                env.step(policy(task, step, "s", 0.0))
                step += 1
            assert env.evaluate().success, (task.task_id, env.evaluate().detail)
    finally:
        env.close()


def test_a_hanging_page_ends_the_step_not_the_worker():
    script = "var genProblem = function() { document.getElementById('b').onclick = function() { for (;;) {} }; };"
    env = GuiEnv(GuiConfig(step_timeout_s=1.5))
    try:
        env.reset(own('<button id="b">Go</button>', script))
        pids = env.sandbox.processes()
        button = next(e for e in env.last_state["elements"] if e["id"] == "b")
        r = env.step(format_action("click", ref=button["ref"]))
        assert r.done and r.info["timed_out"] and r.observation.startswith("The page stopped responding")
        assert r.info["seconds"] < 5
        assert env.evaluate().detail == "the page stopped responding" and env.evaluate().reward == -1.0
    finally:
        env.close()
    assert pids and not alive(pids)


def test_leaving_the_task_page_ends_the_episode(env):
    env.reset(own('<a id="away" href="about:blank">elsewhere</a>'))
    link = next(e for e in env.last_state["elements"] if e["id"] == "away")
    r = env.step(format_action("click", ref=link["ref"]))
    assert r.done and r.observation.startswith("The page failed after this action") and r.info["page_error"]
    assert env.evaluate().detail.startswith("the page failed") and env.evaluate().reward == -1.0


class _Counter(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("Access-Control-Allow-Origin", "*")
        self.end_headers()
        self.wfile.write(b"reached")

    def log_message(self, *args: object) -> None:
        pass


def test_no_network_and_a_fresh_profile_per_episode(env):
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), _Counter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    urls = [f"http://127.0.0.1:{port}/"]
    host_ip = socket.gethostbyname(socket.gethostname())
    if not host_ip.startswith("127."):
        urls.append(f"http://{host_ip}:{port}/")
    try:
        urllib_ok = __import__("urllib.request").request.urlopen(urls[0], timeout=5).read()
        assert urllib_ok == b"reached" and _Counter.hits == 1  # the server is up for the host
        env.reset(own("<p>offline</p>"))
        first_pids = env.sandbox.processes()
        for url in urls + ["http://example.com/"]:
            got = env.browser.evaluate(f"fetch({json.dumps(url)}, {{mode: 'no-cors'}}).then(r => 'reached', "
                                       "e => 'failed: ' + e.message)", await_promise=True)
            assert got.startswith("failed"), (url, got)
        env.browser.evaluate("localStorage.setItem('seen', 'yes'); true")
        assert env.browser.evaluate("localStorage.getItem('seen')") == "yes"
        for url in urls:
            assert env.browser.navigate(url).startswith("net::ERR_"), url
        assert _Counter.hits == 1  # nothing from the browser got through

        env.reset(own("<p>offline</p>"))  # a new browser, a new profile: nothing stored is left
        assert not alive(first_pids)
        assert env.browser.evaluate("localStorage.getItem('seen')") is None
    finally:
        server.shutdown()
        server.server_close()


def test_close_leaves_no_browser_behind():
    env = GuiEnv()
    env.reset(SUITE.get("click-test-1"))
    pids = env.sandbox.processes()
    assert len(pids) >= 3  # bwrap, Chromium and its helpers
    env.close()
    env.close()  # idempotent
    assert not alive(pids)
