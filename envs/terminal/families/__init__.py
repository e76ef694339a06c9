"""The terminal suite's task families: each a generator that makes one instance from a seeded ``random.Random``.

An instance (``Spec``) is an instruction, the work dir's starting files, a host-side check and a reference solution
(shell commands that solve it). Instances of one family differ in their file and folder names, the words and numbers
asked for and the files' contents, so a command that worked for one instance does not solve another as it is: the
instruction must be read. Families live in one module per kind (``files``, ``text``, ``archives``, ``scripts``), each
listing its ``FAMILIES``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from envs.terminal.checks import Check


@dataclass(frozen=True)
class Spec:
    instruction: str
    files: dict[str, bytes | str]
    check: Check
    solution: list[str]
    modes: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Family:
    name: str
    tag: str  # files | text | archives | scripts
    make: Callable[[random.Random], Spec]


def families(tag: str) -> Callable[..., list[Family]]:
    """``FAMILIES = families("text")(make_a, make_b)``: each ``make_<name>`` becomes ``Family("<name>", tag, ...)``."""
    def collect(*makers: Callable[[random.Random], Spec]) -> list[Family]:
        return [Family(m.__name__.removeprefix("make_"), tag, m) for m in makers]
    return collect
