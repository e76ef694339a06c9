"""Check that the running environment holds exactly the packages of ``requirements.lock``: every locked package at its
locked version, and nothing else (but pip and the project itself). Exit 0 when it does; otherwise print each package
that differs and exit 1.

    python scripts/check_lock.py [--lock requirements.lock]

Standard library only, so it runs in any environment, even a broken one.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "openclaw-rl"
NOT_LOCKED = {"pip", PROJECT}  # pip comes with the interpreter's venv; the project is installed from the tree
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def canonical(name: str) -> str:
    """PEP 503 name: case and runs of ``-_.`` do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        match = _PIN.match(line)
        if match:
            pins[canonical(match.group(1))] = match.group(2)
    if not pins:
        raise SystemExit(f"{path}: no `name==version` lines; is this a lock file?")
    return pins


def installed() -> dict[str, str]:
    return {canonical(dist.metadata["Name"]): dist.version for dist in importlib.metadata.distributions()
            if dist.metadata["Name"]}


def differences(lock: dict[str, str], have: dict[str, str]) -> list[str]:
    problems = []
    for name in sorted(lock.keys() | have.keys()):
        if name in NOT_LOCKED:
            continue
        want, got = lock.get(name), have.get(name)
        if want is None:
            problems.append(f"{name}=={got} is installed but not in the lock")
        elif got is None:
            problems.append(f"{name}=={want} is in the lock but not installed")
        elif want != got:
            problems.append(f"{name}: installed {got}, the lock says {want}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lock", type=Path, default=ROOT / "requirements.lock")
    args = parser.parse_args(argv)
    lock = read_lock(args.lock)
    problems = differences(lock, installed())
    if problems:
        print(f"The environment ({sys.prefix}) does not match {args.lock}:", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        print("Reinstall from the lock (`make clean` then `make test`), or refresh the lock on purpose (`make lock`).",
              file=sys.stderr)
        return 1
    print(f"environment matches {args.lock.name}: {len(lock)} packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
