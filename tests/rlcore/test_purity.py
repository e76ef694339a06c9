"""rlcore stays pure: no service, storage or network library is imported by it, statically or at run time."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import rlcore

FORBIDDEN = ("temporalio", "fastapi", "boto3", "botocore", "duckdb", "httpx", "pyarrow", "starlette", "requests")
RLCORE_DIR = Path(rlcore.__file__).resolve().parent


def _imported_roots(tree: ast.AST) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
                "import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
            roots.add(str(node.args[0].value).split(".")[0])
    return roots


def test_no_forbidden_imports_in_source() -> None:
    files = sorted(RLCORE_DIR.rglob("*.py"))
    assert files, "rlcore has no source files"
    offenders = {}
    for path in files:
        bad = _imported_roots(ast.parse(path.read_text(), filename=str(path))) & set(FORBIDDEN)
        if bad:
            offenders[str(path.relative_to(RLCORE_DIR))] = sorted(bad)
    assert not offenders, f"rlcore imports forbidden modules: {offenders}"


def test_no_forbidden_modules_loaded_at_import() -> None:
    code = (
        "import json, sys\n"
        "import rlcore, rlcore.ppo, rlcore.advantages, rlcore.judging, rlcore.general\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    assert loaded == [], f"importing rlcore loaded {loaded}"


def test_the_plain_python_parts_load_without_torch_and_every_name_resolves() -> None:
    """``rlcore.judging`` and ``rlcore.general`` serve the gateway and the workflows: importing them (and the package)
    loads no torch; the package's names still resolve, each from its own module."""
    code = (
        "import sys\n"
        "import rlcore, rlcore.judging, rlcore.general\n"
        "print('torch' in sys.modules)\n"
        "home = lambda n: sys.modules['rlcore.' + rlcore._HOME[n]]\n"
        "print(all(getattr(rlcore, n) is getattr(home(n), n) for n in rlcore.__all__))\n"
        "print(sorted(rlcore.__all__) == sorted(rlcore._HOME))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.split() == ["False", "True", "True"], proc.stdout + proc.stderr
