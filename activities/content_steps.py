"""``content`` step votes for the SWE and GUI envs: what a step did, read against the task and the earlier steps.

Like the tool-call and terminal rules (``activities.judges``), they never see what grading sees that the agent does not
(the SWE grader's verdict, MiniWoB's reward): only the task, the step's call and result, and the history.

- SWE (``assess_swe_content``): a test run is judged by what it shows, not by its exit status (a failing run before
  any edit is how the bug is found: 0, not -1; a passing one +1; a failing one after an edit 0); an edit that does not
  apply is -1, an edit of the tests -1 (grading puts the original tests back: it gains nothing), an edit that changes
  nothing -1; a submit is +1 after a passing test run with no edit since, -1 otherwise (submitted untested or failing).
- GUI (``assess_gui_content``): text typed into a field is -1 unless the task's utterance quotes it (the commonest
  way a small model fails a form: a name it made up or remembered); an action after which the page reads exactly as
  before is -1 (no progress), one that changed it +1; the end of the task is 0 (the outcome decides), and so is a
  first action that does not end it (the page before it is not in the history).

Malformed actions, timeouts and exact repeats are -1 as in ``assess_step``.
"""

from __future__ import annotations

import re

from activities.judges import (
    _CALL,
    _call_parts,
    _earlier_actions,
    _earlier_results,
    assess_step,
    repeated_step,
)

# a unittest run's closing lines: "OK" (maybe with skips) or "FAILED (failures=1, errors=2)"
_UNITTEST_OK = re.compile(r"^Ran \d+ tests? in [\d.]+s\n\nOK\b", re.MULTILINE)
_UNITTEST_FAILED = re.compile(r"^FAILED \(", re.MULTILINE)
_QUOTED = re.compile(r'"([^"]+)"')
_EDITS = ("edit", "write_file")


def _call(tool_calls: str) -> tuple[object, dict]:
    name, args = _call_parts(tool_calls)
    return name, args if isinstance(args, dict) else {}


def _steps(history: str) -> list[tuple[str, str]]:
    """(action, observation) of each earlier step (``judge_request``'s "Step i:" blocks)."""
    return list(zip(_earlier_actions(history), _earlier_results(history)))


def _name(action: str) -> object:
    """The tool name of an earlier step's reply (its first ``<tool_call>``), or None."""
    m = _CALL.search(action)
    return _call(m.group(1))[0] if m else None


def _test_run(result: str) -> str:
    """"ok", "failed" or "" (not a unittest run) for one observation."""
    if _UNITTEST_OK.search(result):
        return "ok"
    return "failed" if _UNITTEST_FAILED.search(result) else ""


def assess_swe_content(task: str, tool_calls: str, tool_results: str, history: str = "") -> tuple[int, str]:
    name, args = _call(tool_calls)
    run = _test_run(tool_results) if name == "bash" else ""
    score, why = assess_step(tool_calls, tool_results, history)
    if score == -1 and not (run and repeated_step(tool_calls, tool_results, history) is None):
        return score, why  # a failing test run's exit status is not held against it; a repeated one is
    earlier = _steps(history)
    edited = any(_name(a) in _EDITS and not o.startswith("Error") for a, o in earlier)
    if run == "ok":
        return 1, "The tests pass."
    if run == "failed":
        if edited:
            return 0, "The tests still fail after an edit."
        return 0, "The tests show the failure before any change."
    if name in ("edit", "write_file"):
        path = str(args.get("path", ""))
        if tool_results.startswith("Error"):
            return -1, "The edit did not apply."
        if path.removeprefix("/workspace/").startswith("tests/"):
            return -1, "The edit changes the tests; grading runs the original ones."
        if name == "edit" and args.get("old") == args.get("new"):
            return -1, "The edit changes nothing."
        return 1, "The edit applied to the code."
    if name == "submit":
        last = ""
        for action, observation in earlier:
            if _name(action) in _EDITS:
                last = "edited" if not observation.startswith("Error") else last
            elif outcome := _test_run(observation):
                last = outcome
        if last == "ok":
            return 1, "Submitted after the tests passed."
        return -1, "Submitted without a passing test run after the last change."
    return score, why


def _page(observation: str) -> str:
    """A GUI observation's element list (from its second line), or "" when it is not a page."""
    head, _, rest = observation.partition("\n")
    return rest if head.startswith("Task:") else ""


def assess_gui_content(task: str, tool_calls: str, tool_results: str, history: str = "") -> tuple[int, str]:
    score, why = assess_step(tool_calls, tool_results, history)
    if score == -1:
        return score, why
    if tool_results.startswith("The task has ended."):
        return 0, "The task ended; the outcome decides."
    name, args = _call(tool_calls)
    utterance = tool_results.partition("\n")[0]
    if name == "type":
        text = str(args.get("text", ""))
        if text not in _QUOTED.findall(utterance):
            return -1, f"Typed {text!r}, which the task does not give."
        return 1, "Typed what the task gives."
    earlier = _steps(history)
    if not earlier:
        return 0, "The first action; the page before it is not in the history."
    if (page := _page(tool_results)) and page == _page(earlier[-1][1]):
        return -1, "The page reads as before: the action did nothing."
    return 1, "The action changed the page."
