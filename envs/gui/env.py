"""GuiEnv: one MiniWoB++ task in a headless Chromium of its own, in a bubblewrap sandbox with no network.

Each ``reset`` starts a fresh sandbox and browser (an empty profile; nothing carries over from an earlier episode),
loads the task's page, seeds it and starts the task. Each ``step`` runs one action and returns the page as text (the
task's utterance and its visible elements, see ``envs.gui.page``); with ``screenshots`` on, a PNG of the task area is
kept in ``last_screenshot`` for vision models (out of the text observation and out of ``info``, which stays JSON).

The episode ends when MiniWoB ends the task (a right or wrong final click, a submitted form) or after ``max_steps``.
``evaluate`` turns MiniWoB's raw reward (not scaled by time) into the outcome: above 0 is a success (+1), anything
else, an unfinished task included, is -1. MiniWoB's own 10 s clock is lifted: a model takes longer than that per step.

A step whose action makes the page stop answering (a script that loops) returns an observation saying so after
``step_timeout_s`` and ends the episode (-1); so does an action after which the page fails (it navigates away from
the task, a script throws). The browser is killed at ``close``. Only a browser that dies raises.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from envs.base import Action, Outcome, StepResult, Task
from envs.gui import page
from envs.gui.actions import key_event, parse_action
from envs.gui.browser import (
    Browser,
    BrowserError,
    BrowserGone,
    BrowserOptions,
    CdpTimeout,
)
from envs.gui.tasks import GuiTask, miniwob_html_dir
from envs.sandbox import Sandbox, SandboxConfig, SandboxLimits, cgroup_plan
from openclaw_rl.logs import get_logger

log = get_logger("gui-env")

SYSTEM_PROMPT = (
    "You operate a web page to do the task it states. Each observation lists the page's visible elements as "
    '[ref] tag "text" value (x,y widthxheight) flags. Each reply does one action on a ref of the latest list:\n'
    '<tool_call>{"name": "click", "arguments": {"ref": 7}}</tool_call>\n'
    '<tool_call>{"name": "type", "arguments": {"ref": 5, "text": "hello"}}</tool_call> (replaces the field\'s text)\n'
    '<tool_call>{"name": "select", "arguments": {"ref": 4, "option": "Blue"}}</tool_call> (a drop-down list)\n'
    '<tool_call>{"name": "click_xy", "arguments": {"x": 80, "y": 120}}</tool_call> (a point of the page)\n'
    '<tool_call>{"name": "key", "arguments": {"key": "Enter"}}</tool_call> (Enter, Tab, Backspace, Escape, arrows)\n'
    "The episode ends when the task is done (or failed)."
)
TASK_AREA = (0, 0, 160, 210)  # where MiniWoB draws the task; the rest of the window is its score board
PAGE_NAME = "page.html"  # a task's own page, written into the work dir


def _sandbox_config() -> SandboxConfig:
    """Chromium needs more threads and files than a shell; with no cgroup to bound memory the sandbox would fall back
    to RLIMIT_AS, which Chromium cannot run under (it reserves tens of GiB of address space), so then none is set."""
    limits = SandboxLimits(pids=512, memory_bytes=2 << 30, open_files=4096)
    if cgroup_plan().mode == "none":
        log.warning("no cgroup for the browser sandbox: its memory is not bounded")
        limits = replace(limits, memory_bytes=1 << 46)
    # Chromium's own sandbox (a second layer inside bwrap's) needs user namespaces of its own
    return SandboxConfig(limits=limits, ro_binds=("/usr", "/etc", str(miniwob_html_dir())), nested_userns=True)


@dataclass
class GuiConfig:
    max_steps: int = 30
    step_timeout_s: float = 10.0  # per action, its settling and the page read included
    load_timeout_s: float = 30.0  # browser start and page load
    settle_ms: int = 60  # after an action, before the page is read: handlers and short animations run
    screenshots: bool = False
    browser: BrowserOptions = field(default_factory=BrowserOptions)
    sandbox: SandboxConfig | None = None  # None: the default for a browser (``_sandbox_config``)


@dataclass
class _Status:
    done: bool = False  # MiniWoB ended the task
    raw_reward: float = 0.0
    reason: str = ""
    hung: bool = False  # the page stopped answering
    broken: str = ""  # the page failed under an action (a script error, a navigation away from the task)


class GuiEnv:
    name = "gui"
    system_prompt = SYSTEM_PROMPT

    def __init__(self, config: GuiConfig | None = None, **overrides: Any) -> None:
        self.config = config or GuiConfig(**overrides)
        self.max_steps = self.config.max_steps
        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.browser: Browser | None = None
        self.steps = 0
        self.done = False
        self.status = _Status()
        self.last_state: dict[str, Any] = {}  # the latest page read (utterance, elements, MiniWoB's globals)
        self.last_screenshot: bytes | None = None

    # -- episode ----------------------------------------------------------------------------------------------------
    def reset(self, task: Task) -> str:
        self.close()
        self.task, self.steps, self.done, self.status = task, 0, False, _Status()
        self.last_state, self.last_screenshot = {}, None
        data: GuiTask = task.data
        self.sandbox = Sandbox(self.config.sandbox or _sandbox_config())
        try:
            if data.html:
                self.sandbox.put_files({PAGE_NAME: data.html})
                url = f"file:///workspace/{PAGE_NAME}"
            else:
                url = f"file://{miniwob_html_dir()}/miniwob/{data.page}.html"
            self.browser = Browser(self.sandbox, self.config.browser)
            self._start(url, data.seed)
            self._read()
        except BaseException:
            self.close()
            raise
        return page.format_page(self.last_state)

    def _start(self, url: str, seed: int) -> None:
        deadline = time.monotonic() + self.config.load_timeout_s
        error = self.browser.navigate(url, timeout=self.config.load_timeout_s)
        if error:
            raise RuntimeError(f"could not load {url}: {error}")
        while not self.browser.evaluate(page.READY_JS, timeout=max(0.1, deadline - time.monotonic())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not become ready in {self.config.load_timeout_s} s")
            time.sleep(0.02)
        # MiniWoB's clock is lifted (the env counts steps); some tasks get ready asynchronously (WOB_TASK_READY)
        ready = self.browser.evaluate(page.start_js(seed, episode_ms=10 ** 9), timeout=self.config.load_timeout_s)
        while not ready:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{url} did not get its task ready in {self.config.load_timeout_s} s")
            time.sleep(0.05)
            ready = self.browser.evaluate("WOB_TASK_READY", timeout=max(0.1, deadline - time.monotonic()))

    def _read(self, timeout: float | None = None) -> None:
        state = self.browser.evaluate(page.OBSERVE_JS, timeout=timeout or self.config.step_timeout_s)
        self.last_state = state
        self.status.done = bool(state.get("done"))
        self.status.raw_reward = float(state.get("raw_reward") or 0.0)
        self.status.reason = str(state.get("reason") or "")
        if self.config.screenshots and not self.status.done:
            self.last_screenshot = self.browser.screenshot(TASK_AREA, timeout=timeout or self.config.step_timeout_s)

    def step(self, action: str) -> StepResult:
        if self.browser is None or self.done:
            raise RuntimeError("step() after the episode ended or before reset()")
        self.steps += 1
        parsed = parse_action(action)
        info: dict[str, Any] = {"action": {"name": parsed.kind, "arguments": parsed.args}} if parsed.ok else {
            "parse_error": parsed.error}
        if not parsed.ok:
            obs = f"Invalid action: {parsed.error}. Nothing was done; the page is unchanged."
        else:
            obs = self._act(parsed, info)
        s = self.status
        self.done = s.done or s.hung or bool(s.broken) or self.steps >= self.max_steps
        info.update(task_done=s.done, timed_out=s.hung)
        if s.done:
            info["miniwob_reward"] = s.raw_reward
        return StepResult(obs, done=self.done, info=info)

    def _act(self, action: Action, info: dict[str, Any]) -> str:
        deadline = time.monotonic() + self.config.step_timeout_s

        def left() -> float:
            return max(0.05, deadline - time.monotonic())

        started = time.monotonic()
        try:
            error = self._do(action, left)
            if error:
                info["action_error"] = error
                return f"Invalid action: {error}. Nothing was done; the page is unchanged."
            self.browser.evaluate(page.SETTLE_JS % self.config.settle_ms, timeout=left(), await_promise=True)
            self._read(left())
        except CdpTimeout:
            self.status.hung = True
            info["seconds"] = round(time.monotonic() - started, 3)
            return (f"The page stopped responding: no answer within {self.config.step_timeout_s:g} s after this "
                    "action. The episode ends.")
        except BrowserGone:
            raise  # the environment's fault, not the action's
        except BrowserError as err:
            self.status.broken = str(err)[:300]
            info["page_error"] = self.status.broken
            return f"The page failed after this action ({self.status.broken}). The episode ends."
        info["seconds"] = round(time.monotonic() - started, 3)
        if self.status.done:
            return "The task has ended."
        return page.format_page(self.last_state)

    def _do(self, action: Action, left: Any) -> str:
        """Run one parsed action; returns what was wrong with it ("" when it ran)."""
        b, args = self.browser, action.args
        if action.kind == "click_xy":
            b.mouse_click(args["x"], args["y"], timeout=left())
        elif action.kind == "key":
            b.press_key(key_event(args["key"]), timeout=left())
        elif action.kind == "click" and args["ref"] < 0:  # a piece of text: click its middle
            piece = next((e for e in self.last_state.get("elements", []) if e["ref"] == args["ref"]), None)
            if piece is None:
                return f"no element [{args['ref']}] in the latest observation"
            x, y, w, h = piece["box"]
            b.mouse_click(x + w / 2, y + h / 2, timeout=left())
        elif action.kind == "click":
            target = b.evaluate(page.CLICK_TARGET_JS % args["ref"], timeout=left())
            if "error" in target:
                return target["error"]
            if "x" in target:
                b.mouse_click(target["x"], target["y"], timeout=left())
        elif action.kind == "type":
            error = b.evaluate(page.FOCUS_FIELD_JS % args["ref"], timeout=left())
            if error:
                return error
            b.insert_text(args["text"], timeout=left())
        elif action.kind == "select":
            return b.evaluate(page.SELECT_JS % (args["ref"], json.dumps(args["option"])), timeout=left())
        return ""

    def evaluate(self) -> Outcome:
        if self.task is None:
            raise RuntimeError("evaluate() before reset()")
        s = self.status
        if s.hung:
            return Outcome(reward=-1.0, success=False, detail="the page stopped responding")
        if s.broken:
            return Outcome(reward=-1.0, success=False, detail=f"the page failed: {s.broken}")
        if not s.done:
            return Outcome(reward=-1.0, success=False, detail=f"the task did not end in {self.steps} steps")
        why = f"MiniWoB reward {s.raw_reward:g}" + (f" ({s.reason})" if s.reason else "")
        return Outcome(reward=1.0 if s.raw_reward > 0 else -1.0, success=s.raw_reward > 0, detail=why)

    def screenshot(self) -> bytes:
        """A PNG of the task area now."""
        if self.browser is None:
            raise RuntimeError("screenshot() before reset()")
        return self.browser.screenshot(TASK_AREA, timeout=self.config.step_timeout_s)

    def close(self) -> None:
        if self.browser is not None:
            self.browser.close()
            self.browser = None
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None

