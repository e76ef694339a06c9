"""The import graph between top-level packages follows the README's layout table: each package imports only the
packages its row names under "may import", that relation has no cycle, and the base library (`openclaw_rl`) sits on the
pure core alone. An import that runs up a layer, anywhere in a file (a lazy import inside a function included), fails.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE, PURE = "openclaw_rl", {"rlcore", "prompts"}


def packages() -> set[str]:
    return {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file() and p.name != "tests"}


def layout_table() -> dict[str, set[str]]:
    """{package: the project packages it may import}, read from the README's `## Layout` table (its rows for folders
    that are not packages, such as `deploy/`, left out)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([A-Za-z_]+)/`", cells[0]) if len(cells) == 3 else None
        if match:
            rows[match.group(1)] = set(re.findall(r"`([A-Za-z_]+)`", cells[2]))
    return {name: allowed for name, allowed in rows.items() if name in packages()}


def imports_of(package: str, known: set[str]) -> dict[str, set[str]]:
    """{imported project package: files importing it} for every .py file under the package."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in known and top != package:
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_package_has_a_row_and_every_row_a_package():
    rows = layout_table()
    assert set(rows) == packages(), f"packages without a row, or rows without a package: {set(rows) ^ packages()}"
    for package, allowed in rows.items():
        assert allowed <= packages(), f"{package}: the table names unknown packages {allowed - packages()}"


def test_imports_follow_the_table():
    rows, known = layout_table(), packages()
    upward = {f"{package} -> {target} ({', '.join(sorted(files))})"
              for package in known for target, files in imports_of(package, known).items()
              if target not in rows[package]}
    assert not upward, "imports the README's layout table does not allow:\n" + "\n".join(sorted(upward))


def test_the_allowed_graph_has_no_cycle():
    rows = layout_table()
    done: set[str] = set()
    while len(done) < len(rows):
        ready = {p for p, allowed in rows.items() if p not in done and allowed <= done}
        assert ready, f"a cycle among {sorted(set(rows) - done)}"
        done |= ready


def test_the_base_library_sits_on_the_pure_core_only():
    assert layout_table()[BASE] <= PURE
    assert set(imports_of(BASE, packages())) <= PURE
