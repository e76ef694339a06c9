"""One buggy repo: its files, the bug report an agent gets, and the reference fix (exact string edits)."""

from __future__ import annotations

import re
from dataclasses import dataclass

TESTS_DIR = "tests/"
_TEST_DEF = re.compile(r"^\s+def test_\w+\(", re.MULTILINE)


def src(text: str) -> str:
    """A file's text from a literal that starts on the line after its opening quotes (that first newline dropped)."""
    return text.removeprefix("\n")


@dataclass(frozen=True)
class Fix:
    path: str
    old: str  # occurs exactly once in the buggy file
    new: str


@dataclass(frozen=True)
class SweRepo:
    name: str
    issue: str  # the bug report, as a user would file it
    files: dict[str, str]  # path -> text; the tests live under tests/ and run with `python3 -m unittest`
    fix: tuple[Fix, ...]
    tags: tuple[str, ...] = ()
    split: str = "train"

    def is_test(self, path: str) -> bool:
        return path.startswith(TESTS_DIR)

    @property
    def test_files(self) -> dict[str, str]:
        return {p: t for p, t in self.files.items() if self.is_test(p)}

    @property
    def test_count(self) -> int:
        """How many tests a full run reports: every ``def test_...`` of the test files (no test is generated)."""
        return sum(len(_TEST_DEF.findall(t)) for t in self.test_files.values())

    def fixed_files(self) -> dict[str, str]:
        files = dict(self.files)
        for f in self.fix:
            if files[f.path].count(f.old) != 1:
                raise ValueError(f"{self.name}: the fix's old text must occur once in {f.path}: {f.old!r}")
            files[f.path] = files[f.path].replace(f.old, f.new)
        return files
