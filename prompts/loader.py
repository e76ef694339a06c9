"""Judge prompt templates stored as text files beside this module, rendered to OpenAI chat messages.

Each template ``NAME`` is a pair of files, ``NAME.system.txt`` and ``NAME.user.txt``. Placeholders use
``string.Template`` syntax, ``${name}``, so the braces of ``\\boxed{1}`` and of JSON examples are plain text and need
no escaping; a literal dollar sign is written ``$$``. Rendering is strict: a placeholder without a value, a value no
placeholder uses, and an unknown template name all raise ``PromptError``. Substituted values are inserted verbatim
and never re-expanded, so judge inputs containing ``$`` or ``{}`` are safe.
"""

from __future__ import annotations

import functools
import string
from importlib import resources
from typing import Any

_PARTS = ("system", "user")
_SUFFIX = ".txt"


class PromptError(ValueError):
    """A template is unknown, malformed, or was given missing or unexpected values."""


def names() -> list[str]:
    """The names of all templates, sorted (a template exists when its ``.system.txt`` file does)."""
    suffix = f".system{_SUFFIX}"
    return sorted(p.name[: -len(suffix)] for p in resources.files(__package__).iterdir() if p.name.endswith(suffix))


@functools.cache
def _load(name: str) -> tuple[string.Template, string.Template]:
    if name not in names():
        raise PromptError(f"unknown prompt template {name!r}; known: {', '.join(names())}")
    root = resources.files(__package__)
    templates = []
    for part in _PARTS:
        text = (root / f"{name}.{part}{_SUFFIX}").read_text(encoding="utf-8").rstrip("\n")
        template = string.Template(text)
        if not template.is_valid():
            raise PromptError(f"template {name}.{part}{_SUFFIX} has a malformed placeholder (write $$ for a dollar)")
        templates.append(template)
    return templates[0], templates[1]


def fields(name: str) -> set[str]:
    """The placeholder names a template needs, across its system and user parts."""
    system, user = _load(name)
    return set(system.get_identifiers()) | set(user.get_identifiers())


def render(name: str, **values: Any) -> list[dict[str, str]]:
    """Fill template ``name`` and return ``[{"role": "system", ...}, {"role": "user", ...}]``.

    Every placeholder must get a value and every value must match a placeholder; values are converted with ``str``.
    """
    needed = fields(name)
    missing, unknown = needed - values.keys(), values.keys() - needed
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing values for {sorted(missing)}")
        if unknown:
            problems.append(f"unknown placeholders {sorted(unknown)}")
        raise PromptError(f"template {name!r}: {'; '.join(problems)} (expects {sorted(needed)})")
    text = {k: str(v) for k, v in values.items()}
    system, user = _load(name)
    return [{"role": "system", "content": system.substitute(text)},
            {"role": "user", "content": user.substitute(text)}]
