"""The ``content`` step votes of the SWE and GUI envs on real episodes: the env's own observations for a reference
solution and for the mistakes the rules are there to catch, each step put to the judge as an episode workflow does
(``judge_request``)."""

from __future__ import annotations

import asyncio

from activities.judges import HeuristicJudge
from contracts.episode import EpisodeStep
from envs.base import Env
from envs.gui.actions import format_action as gui_action
from envs.gui.env import GuiEnv
from envs.gui.tasks import SUITE as GUI
from envs.swe.actions import format_action as swe_action
from envs.swe.env import SweEnv
from envs.swe.scripted import plan
from envs.swe.tasks import SUITE as SWE
from rlcore.judging import parse_score
from workflows.episode import judge_request

JUDGE = HeuristicJudge(step_rule="content")


def votes(env_name: str, env: Env, task_id: str, suite, actions: list[str]) -> list[int]:  # noqa: ANN001
    """Run ``actions`` in ``env`` on the task and vote every step with the content rule, as the workflow would."""
    task = suite.get(task_id)
    env.reset(task)
    steps: list[EpisodeStep] = []
    out = []
    try:
        for i, action in enumerate(actions):
            result = env.step(action)
            step = EpisodeStep(index=i, action=action, observation=result.observation,
                               parse_error=result.info.get("parse_error", ""))
            req = judge_request(env_name, "e", task.instruction, steps, step, result.info)
            out.append(parse_score(asyncio.run(JUDGE.complete_step(req))))
            steps.append(step)
            if result.done:
                break
    finally:
        env.close()
    return out


def test_swe_reference_steps_are_voted_up_and_mistakes_down() -> None:
    task = SWE.tasks("train")[0]
    run_tests = swe_action("bash", command="python3 -m unittest")
    fix = plan(task.data)[1:-1]  # the reference edits
    # the tests fail first (0: that is how the bug is found), each edit applies (+1), then they pass (+1), submit (+1)
    assert votes("swe", SweEnv(), task.task_id, SWE, [run_tests, *fix, run_tests, swe_action("submit")]) == \
        [0, *[1] * len(fix), 1, 1]
    test_file = sorted(task.data.test_files)[-1]
    first_line = task.data.files[test_file].splitlines()[0]
    mistakes = [swe_action("edit", path=fix_path(task), old="no such text here", new="x"),  # does not apply
                swe_action("edit", path=test_file, old=first_line, new=first_line + "  # ok"),  # edits the tests
                run_tests, run_tests,  # the second run repeats the first
                swe_action("submit")]  # after failing runs
    assert votes("swe", SweEnv(), task.task_id, SWE, mistakes) == [-1, -1, 0, -1, -1]


def fix_path(task) -> str:  # noqa: ANN001
    return task.data.fix[0].path


def test_gui_typed_text_is_read_against_the_task() -> None:
    env = GuiEnv()
    task_id = "login-user-1"
    first = env.reset(GUI.get(task_id))
    env.close()
    user, password = first.partition("\n")[0].split('"')[1::2]
    refs = {line.split("]")[0].strip(" [") for line in first.splitlines()}
    assert {"7", "10", "11"} <= refs, first  # the username and password fields and the login button
    good = [gui_action("type", ref=7, text=user), gui_action("type", ref=10, text=password),
            gui_action("click", ref=11)]
    # typing what the task quotes is +1 at any step; the task's end is 0 (the outcome decides)
    assert votes("gui", GuiEnv(), task_id, GUI, good) == [1, 1, 0]
    # a first click that does not end the task: the page before it is not in the history (0); the same click again
    # leaves the page as it was (-1)
    assert votes("gui", GuiEnv(), task_id, GUI, [gui_action("click", ref=6)] * 2) == [0, -1]
    made_up = [gui_action("type", ref=7, text="admin")] * 2  # a name the task does not give
    assert votes("gui", GuiEnv(), task_id, GUI, made_up) == [-1, -1]
