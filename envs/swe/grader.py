"""Grading an SWE episode without trusting any code the agent wrote to report, or to reach, a result.

The repo's original tests call the package under test, so they run in one interpreter with it, and the package is the
agent's code: at import, or whenever a test calls it, it can rebind any module global or class attribute (Python 3.11
raises no audit event for either), swap a function in and out again before anyone looks, exit, or print a fake summary.
A grader that runs unittest's own runner, or checks the interpreter's state between tests, loses to a patch that is
made and undone inside one test (e.g. ``unittest.case._addError`` replaced while a test runs and restored by the
replacement itself). So the verdict never depends on code or state that the package can reach:

- The host lays the agent's files and the ORIGINAL test files into a fresh sandbox (``tests/`` owned by root and
  read-only to the sandbox's uid; anything of the agent's named like the tests folder is left out) and, for each test
  module, runs a fresh ``python3 -I -B`` whose program (``harness_boot.py``) and runtime (``harness_runtime.py``) the
  host sends; nothing is read from the work dir but the package. Its input: a fresh random nonce, the test module's
  source (from the host, not the disk), and the test ids the host counted in that source with ``ast``.
- Before the package is imported the boot compiles the runtime and the test module itself, FROZEN: every name their code
  would look up where the package could rebind it becomes a constant of the code object (see ``harness_boot.py``):
  builtins and the standard library the tests import as captured before the package ran; ``self.assertEqual`` and the
  rest of TestCase's API as the runtime's own implementation (unittest's code never decides anything); ``self.x`` as
  the instance's dict or the class as loaded; the module's own names from a snapshot its statements fill. A code
  object's constants are reachable only through ``__code__``, and the audit hook, which Python code cannot remove,
  ends the run on reading the code of the harness or the tests, on frames (``sys._getframe``, tracebacks', generators'),
  ``gc`` introspection, ``ctypes``, threads, signals, new processes, writes to ``tests/`` or outside the work dir and
  ``/tmp``, reads outside it, ``/usr``, ``/etc``, ``/tmp`` (``/proc`` included), and monkeypatching a function of the
  tests or any object that existed before the package.
- The runtime calls each test itself (setUp, the method, tearDown, cleanups), from its own frame, and decides PASS
  with its own locals: every part returned normally, no assertion recorded a failure (each records it before it
  raises, so a swallowed AssertionError still fails), nothing skipped, the method returned None. Before every call the
  tests make, before every assertion and around every test it checks, by identity, that every module, builtin and class
  that existed before the package (and each test class's functions) is as it was, with the garbage collector off so
  that no finalizer runs in between: a patch must be in place to act, so it is caught before it can.
- Each test's verdict goes to the host on a private pipe descriptor as ``<nonce> <test id> PASS|FAIL`` after the last
  test, then the process leaves with ``os._exit`` (no atexit handler runs); stdout and stderr go to /dev/null. The host
  passes the episode only when every test id it counted was reported PASS with the nonce. A crash, a timeout, a
  missing or extra test, an import error, a violation: -1.

What this does not stop: a value the package returns whose own ``__eq__``/``__bool__``/``__contains__``/... lies is
still what the test compares (the assertion ran, on the package's object); objects the tests hand to the package (a
callback, a fake clock, a list) and mutable state the tests share with it that is not a namespace (``re``'s cache, a
``decimal`` context, an instance's dict it was given) are the package's to change; attribute access on objects other
than ``self`` (``clock.now``) and the methods of the tests' helper classes called through their instances are ordinary
Python, so a patch the package makes and undoes between two such accesses without a call in between goes unseen; a
CPython bug or an already loaded native extension could reach the nonce. Tests that need threads, ``mock.patch`` as a
decorator or of the standard library, ``assertWarns``/``assertLogs``, ``inspect`` of test functions, or a package that
formats tracebacks or logs through ``logging`` (frames) fail under this harness (-1, never a false pass); the repos
here need none of them. Where the host does not run as root ``tests/`` is only read-only by its modes; the hook then
is what keeps the sandbox's uid from rewriting it.
"""

from __future__ import annotations

import ast
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from envs.sandbox import Sandbox, SandboxConfig
from envs.swe.harness_boot import prefreeze
from envs.swe.repo import TESTS_DIR, SweRepo

MAX_GRADED_FILES = 1000
VIOLATION_EXIT = 86  # the harness's exit status when the audit hook or an integrity check caught tampering
BOOT = Path(__file__).with_name("harness_boot.py").read_text()
RUNTIME = prefreeze(Path(__file__).with_name("harness_runtime.py").read_text())  # frozen once, here


@dataclass(frozen=True)
class Verdict:
    passed: bool
    why: str


def expected_tests(repo: SweRepo) -> dict[str, list[tuple[str, str, str]]]:
    """{test module: [(test id, class, method)]}, read from the original test sources on the host: every ``test*``
    function of every top-level class of a ``tests/test*.py`` file that derives from a ``TestCase`` (directly, or
    through a class of the same file), its inherited tests included, as unittest's loader finds them."""
    out: dict[str, list[tuple[str, str, str]]] = {}
    for path, text in sorted(repo.test_files.items()):
        name = path.rsplit("/", 1)[-1]
        if not (name.startswith("test") and name.endswith(".py")):
            continue
        module = path[:-3].replace("/", ".")
        classes = {n.name: n for n in ast.parse(text).body if isinstance(n, ast.ClassDef)}

        def is_case(node: ast.ClassDef, seen: frozenset = frozenset()) -> bool:
            for b in node.bases:
                text_ = ast.unparse(b)
                if text_.endswith("TestCase"):
                    return True
                if text_ in classes and text_ not in seen and is_case(classes[text_], seen | {node.name}):
                    return True
            return False

        def methods(node: ast.ClassDef, seen: frozenset = frozenset()) -> set[str]:
            found = {f.name for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                     and f.name.startswith("test")}
            for b in node.bases:
                text_ = ast.unparse(b)
                if text_ in classes and text_ not in seen:
                    found |= methods(classes[text_], seen | {node.name})
            return found

        ids = [(f"{module}.{c}.{m}", c, m) for c, node in classes.items() if is_case(node)
               for m in sorted(methods(node))]
        if ids:
            out[module] = ids
    return out


def graded_sources(repo: SweRepo, files: dict[str, bytes]) -> dict[str, bytes]:
    """The agent's files that grading uses: everything but the tests folder, or anything named like it."""
    root = TESTS_DIR.rstrip("/")
    return {p: d for p, d in files.items() if p != root and not p.startswith(TESTS_DIR)}


def grade(repo: SweRepo, files: dict[str, bytes], sandbox: SandboxConfig, timeout_s: float) -> Verdict:
    """Run the repo's original tests over the agent's files in a fresh sandbox, one harnessed interpreter per test
    module; pass only when every expected test reported PASS with this grading's nonce."""
    sources = graded_sources(repo, files)
    if len(sources) > MAX_GRADED_FILES:
        return Verdict(False, f"the work dir holds {len(sources)} files; at most {MAX_GRADED_FILES} are graded")
    expected = expected_tests(repo)
    with Sandbox(sandbox) as sb:
        try:
            sb.put_files({**sources, **repo.test_files})
        except OSError as err:  # a path of the agent's clashes with the repo's (a file where a folder must be, ...)
            return Verdict(False, f"the agent's files cannot be laid out with the tests: {err}")
        sb.seal(TESTS_DIR.rstrip("/"))
        for module, tests in expected.items():
            ids = {t[0] for t in tests}
            nonce = secrets.token_hex(16)
            path = module.replace(".", "/") + ".py"
            spec = json.dumps({"nonce": nonce, "module": module, "path": path, "source": repo.files[path],
                               "tests": tests, "tests_dir": TESTS_DIR.rstrip("/"), "runtime": RUNTIME})
            rc, out, timed_out = sb.run(["python3", "-I", "-B", "-c", BOOT], timeout=timeout_s, input=spec.encode())
            if timed_out:
                return Verdict(False, f"{module}: the tests timed out after {timeout_s:.0f} s")
            verdicts: dict[str, str] = {}
            for line in out.decode("utf-8", errors="replace").splitlines():
                parts = line.split(" ", 2)
                if len(parts) == 3 and parts[0] == nonce:
                    if parts[1] == "VIOLATION":
                        return Verdict(False, f"{module}: grading stopped the run: {parts[2]}")
                    verdicts[parts[1]] = "FAIL" if verdicts.get(parts[1]) == "FAIL" else parts[2]
            if not verdicts:
                return Verdict(False, f"{module}: the run ended without reporting any test (exit status {rc})")
            if rc != 0:
                return Verdict(False, f"{module}: the test run exited with status {rc}")
            failed = sorted(i for i in ids if verdicts.get(i) != "PASS")
            extra = sorted(set(verdicts) - ids)
            if failed or extra:
                names = ", ".join(t.rsplit(".", 2)[-2] + "." + t.rsplit(".", 1)[-1] for t in failed)
                more = f"; unexpected tests: {', '.join(extra)}" if extra else ""
                return Verdict(False, f"{len(failed)} of {len(ids)} tests in {module} did not pass: {names}{more}")
    total = sum(len(t) for t in expected.values())
    return Verdict(True, f"all {total} tests passed")
