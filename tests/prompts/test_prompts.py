"""Every judge template renders, keeps its literal \\boxed{} braces, and refuses missing or stray values."""

from __future__ import annotations

from pathlib import Path

import pytest

import prompts
from prompts import PromptError, fields, names, render

EXPECTED = {
    "personal_prm", "personal_hint", "personalization_eval",
    "general_terminal", "general_gui", "general_swe", "general_toolcall",
}


def _values(name: str) -> dict[str, str]:
    return {field: f"<<{field}-value>>" for field in fields(name)}


def test_names_lists_every_template() -> None:
    assert set(names()) == EXPECTED
    assert {prompts.PERSONAL_PRM, prompts.PERSONAL_HINT, prompts.PERSONALIZATION_EVAL,
            *prompts.GENERAL_JUDGES.values()} == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_render_fills_every_placeholder_and_keeps_boxed(name: str) -> None:
    values = _values(name)
    assert values, f"{name} has no placeholders"
    messages = render(name, **values)
    assert [m["role"] for m in messages] == ["system", "user"]
    text = "\n".join(m["content"] for m in messages)
    for value in values.values():
        assert value in text
    assert "$" not in text  # no placeholder left behind
    assert "\\boxed{" in text
    assert all(m["content"].strip() for m in messages)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_missing_value_raises(name: str) -> None:
    values = _values(name)
    dropped = sorted(values)[0]
    del values[dropped]
    with pytest.raises(PromptError, match=dropped):
        render(name, **values)


def test_unknown_placeholder_and_unknown_template_raise() -> None:
    with pytest.raises(PromptError, match="unknown placeholders.*respnse"):
        render("personal_prm", response="r", next_state="s", respnse="typo")
    with pytest.raises(PromptError, match="unknown prompt template"):
        render("no_such_template")


def test_values_are_inserted_verbatim() -> None:
    tricky = "cost: $5 ${next_state} {x} \\boxed{1}"
    user = render("personal_prm", response=tricky, next_state="thanks!")[1]["content"]
    assert tricky in user and "thanks!" in user


def test_hint_and_evaluator_templates_carry_their_contract() -> None:
    hint = "\n".join(m["content"] for m in render("personal_hint", **_values("personal_hint")))
    assert "[HINT_START]" in hint and "[HINT_END]" in hint and "\\boxed{1}" in hint and "\\boxed{-1}" in hint
    evaluator = render("personalization_eval", **_values("personalization_eval"))[0]["content"]
    for score in ("0", "0.25", "0.5", "0.75", "1"):
        assert f"\\boxed{{{score}}}" in evaluator


def test_template_files_are_txt_package_data() -> None:
    folder = Path(prompts.__file__).parent
    for name in EXPECTED:
        for part in ("system", "user"):
            assert (folder / f"{name}.{part}.txt").is_file()
