"""What the terminal suite's families share: host-side checks of the work dir, archive helpers, and name pools.

A check takes the work dir (``WorkDir``, which never follows a symlink out of it) and returns None when the task is
done, else a sentence saying what is wrong.
"""

from __future__ import annotations

import gzip
import io
import random
import tarfile
from collections.abc import Callable

from envs.sandbox import WorkDir

Check = Callable[[WorkDir], "str | None"]



def coined(n: int, seed: str) -> list[str]:
    """``n`` distinct made-up six-letter names (three consonant-vowel pairs: none is part of another), the same on
    every import."""
    rng, out = random.Random(seed), set()
    while len(out) < n:
        out.add("".join(rng.choice("bdfgklmnprstvz") + rng.choice("aeiou") for _ in range(3)))
    return sorted(out)


# Name pools: a few everyday names, then made-up ones, so that most instances name things no agent can have
# memorised: a command that solves them copies the instruction's names (what a model must learn), not a habit.
_COINED = coined(700, "terminal-names")
WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean", "candle", "forest", "pepper",
         "rocket", "silver", "window", "garden", "planet", "violet", "copper", "meadow", *_COINED[:200]]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar"]
# file and folder names the families draw from, so that instances of one family differ in what the command must name
STEMS = ["data", "notes", "words", "items", "list", "report", "input", "log", "names", "values", "records", "draft",
         *_COINED[200:400]]
OUTPUTS = ["answer.txt", "result.txt", "out.txt", "output.txt", *(f"{w}.txt" for w in _COINED[400:500])]
DIRS = ["data", "docs", "notes", "logs", "src", "assets", "files", "inbox", "reports", "archive", *_COINED[500:700]]


def pick(rng: random.Random, pool: list[str], k: int = 1) -> list[str]:
    """``k`` distinct entries of ``pool``."""
    return rng.sample(pool, k)


def _lines(text: str | None) -> list[str] | None:
    return None if text is None else text.rstrip("\n").split("\n") if text.strip() else []


def expect_text(path: str, expected: str) -> Check:
    """The file holds ``expected`` (surrounding whitespace ignored)."""
    def check(wd: WorkDir) -> str | None:
        got = wd.read_text(path)
        if got is None:
            return f"{path} is missing"
        return None if got.strip() == expected.strip() else f"{path} holds {got.strip()[:80]!r}, not the answer"
    return check


def expect_lines(path: str, expected: list[str]) -> Check:
    def check(wd: WorkDir) -> str | None:
        got = _lines(wd.read_text(path))
        if got is None:
            return f"{path} is missing"
        got = [g.rstrip("\r") for g in got]
        return None if got == expected else f"{path} has {len(got)} lines, not the {len(expected)} expected ones"
    return check


def all_of(*checks: Check) -> Check:
    def check(wd: WorkDir) -> str | None:
        for c in checks:
            why = c(wd)
            if why is not None:
                return why
        return None
    return check


def exists(path: str) -> Check:
    return lambda wd: None if wd.is_file(path) else f"{path} is missing"


def gz(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def tar(files: dict[str, str], compress: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as t:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            t.addfile(info, io.BytesIO(data))
    return gz(buf.getvalue()) if compress else buf.getvalue()


def tar_members(data: bytes | None) -> dict[str, bytes] | None:
    """name -> content of the regular files of a (possibly gzipped) tar, read in memory; None if unreadable."""
    if data is None:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as t:
            out = {}
            for m in t.getmembers():
                if m.isfile() and m.size <= 1 << 20:
                    f = t.extractfile(m)
                    out[m.name.removeprefix("./")] = f.read() if f else b""
            return out
    except (tarfile.TarError, OSError, EOFError):
        return None
