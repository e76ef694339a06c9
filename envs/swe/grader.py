"""Grading an SWE episode without trusting the code under test to report its own result.

The repo's original tests run in the same interpreter as the package they test, and that package is the agent's code:
it can monkeypatch ``unittest`` when it is imported, exit early, print a fake summary. So the verdict never comes from
unittest's output or exit status. Instead:

- The host writes the agent's non-test files and the ORIGINAL test files into a fresh sandbox; ``tests/`` is then owned
  by root and read-only to the sandbox's uid, and Python runs with ``-B`` (no cached bytecode to plant).
- One interpreter per test module runs a small harness given on the command line (``python3 -I -B -c``), never a file
  the agent could rewrite. Before any package code is imported the harness reads a fresh random nonce from stdin into
  a local variable, captures the real unittest classes and functions, snapshots the namespaces of the unittest modules
  and of ``builtins``, moves its report channel to a private file descriptor (stdout and stderr go to /dev/null), and
  installs an audit hook, which Python code cannot remove. Armed, the hook ends the process on what no test of these
  repos needs and what reaching the harness would take: assigning to a unittest class or function or to a test
  method of a test class (``object.__setattr__``/``__delattr__``), frames (``sys._getframe``, tracebacks' and
  generators' frames, ``sys.settrace``/``setprofile``), ``gc`` introspection, ``ctypes``, new processes, and opening
  anything under ``/proc``.
- The harness loads the module (importing the package), checks that nothing it captured was replaced, runs the module's
  tests through the captured runner into a result class of its own, checks again, and reports one line per test,
  ``<nonce> <test id> PASS|FAIL``, then leaves with ``os._exit`` (no atexit handler runs).
- The host counts the tests itself from the original test sources (``ast``) and passes the episode only when every
  expected test id was reported PASS with the nonce, by the process that ran it. A crash, a timeout, a skip, an
  expected failure, an import error, a missing or extra test, a tampered namespace: -1.

What this does not stop: a return value whose own ``__eq__`` (or ``__hash__``, ``__len__``, ...) lies to the test's
assertions is still the test comparing the package's value, and passes; code that reaches the nonce through a path
the audit hook does not cover (a CPython bug, a native extension already loaded) could forge a report.
"""

from __future__ import annotations

import ast
import secrets
from dataclasses import dataclass

from envs.sandbox import Sandbox, SandboxConfig
from envs.swe.repo import TESTS_DIR, SweRepo

MAX_GRADED_FILES = 1000
VIOLATION_EXIT = 86  # the harness's exit status when the audit hook or an integrity check caught tampering

# The harness. Everything it relies on after the package is imported is a local variable of _main or a closure cell.
HARNESS = r'''
def _main():
    import builtins, os, sys
    import unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util
    nonce = sys.stdin.readline().strip()
    module = sys.argv[1]
    exit_, write, close = os._exit, os.write, os.close
    report = os.dup(1)
    os.set_inheritable(report, False)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    close(null)
    sys.path.insert(0, os.getcwd())
    mods = [unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util]
    TestCase, TestResult, TestSuite = unittest.case.TestCase, unittest.result.TestResult, unittest.suite.TestSuite
    loader = unittest.loader.TestLoader()
    isinstance_, issubclass_, type_, id_, list_, getattr_, str_ = isinstance, issubclass, type, id, list, getattr, str
    getframe = sys._getframe
    import collections, enum, traceback, typing
    clear_frames = traceback.clear_frames.__code__  # assertRaises clears its traceback's frames: allowed
    # standard-library callers of sys._getframe that only read the calling module's name (namedtuple, NamedTuple,
    # TypeVar, the Enum functional API): allowed; they hand no frame back
    name_readers = {collections.namedtuple.__code__, typing._caller.__code__}
    if hasattr(enum.EnumType, "_create_"):
        name_readers.add(enum.EnumType._create_.__code__)

    class Result(TestResult):
        """Keeps test ids only (formatting a failure's traceback would read its frames). Its methods live on the
        instance, which the package under test has no way to reach, so patching the class changes nothing."""

        def __init__(self):
            super().__init__()
            passed, failed = [], []
            self.passed, self.failed = passed, failed

            def add_success(test):
                passed.append(test.id())

            def add_failed(test, *rest):
                failed.append(test.id())

            def add_sub_test(test, subtest, err):
                if err is not None:
                    failed.append(test.id())

            self.addSuccess, self.addSubTest = add_success, add_sub_test
            self.addError = self.addFailure = self.addSkip = add_failed
            self.addExpectedFailure = self.addUnexpectedSuccess = add_failed

    protected = {id_(Result)} | {id_(v) for v in vars(Result).values()}
    for mod in mods:
        for value in list_(vars(mod).values()):
            if isinstance_(value, type_) or callable(value):
                protected.add(id_(value))
                for member in list_(getattr_(value, "__dict__", {}).values()):
                    protected.add(id_(member))
    critical = {name for name in TestCase.__dict__ if not name.startswith("_class")}

    classes = [TestCase, TestResult, TestSuite, Result]

    def snapshot():
        return [(mod.__name__, {k: id_(v) for k, v in vars(mod).items()}) for mod in mods + [builtins]] + \
               [(cls.__name__, {k: id_(v) for k, v in vars(cls).items()}) for cls in classes]

    before = snapshot()
    armed, inside = [False], [False]
    blocked = ("sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile", "gc.", "ctypes.",
               "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.",
               "pty.", "os.kill", "os.killpg", "signal.", "sys.addaudithook", "cpython.", "_thread.",
               "object.__getattr__")

    def die(why):
        write(report, ("%s VIOLATION %s\n" % (nonce, why)).encode())
        exit_(86)

    def hook(event, args):
        if not armed[0] or inside[0]:
            return
        if (event == "object.__getattr__" and args[1] == "tb_frame") or event == "sys._getframe":
            inside[0] = True
            caller = getframe(1).f_code
            inside[0] = False
            if caller is clear_frames or (event == "sys._getframe" and caller in name_readers):
                return
            die("%s from %s" % (event if event == "sys._getframe" else "tb_frame", caller.co_name))
        if event in ("object.__setattr__", "object.__delattr__"):
            target, name = args[0], args[1]
            if id_(target) in protected:
                die("%s of %s" % (event, name))
            if isinstance_(target, type_) and issubclass_(target, TestCase) and (
                    str_(name).startswith("test") or name in critical):
                die("%s of a test class's %s" % (event, name))
        elif event == "open" and isinstance_(args[0], str_) and args[0].startswith("/proc"):
            die("open %s" % args[0])
        elif event.startswith(blocked):
            die(event)

    sys.addaudithook(hook)
    armed[0] = True
    try:
        suite = loader.loadTestsFromName(module)
    except BaseException as err:  # noqa
        die("import failed: %s" % type_(err).__name__)
    if loader.errors or snapshot() != before:
        die("the module did not load cleanly, or a namespace changed")
    tests, todo = [], [suite]
    while todo:
        item = todo.pop(0)
        if isinstance_(item, TestSuite):
            todo[:0] = list_(item._tests)
        elif isinstance_(item, TestCase):
            tests.append(item)
        else:
            die("not a test: %s" % type_(item).__name__)
    for cls in {type_(t) for t in tests}:  # each test class, up to TestCase: its methods may not change either
        classes.extend(c for c in cls.__mro__ if c not in classes and issubclass_(c, TestCase))
    before = snapshot()
    result, run = Result(), TestCase.run
    for test in tests:  # one at a time through the captured runner, every namespace checked after each
        try:
            run(test, result)
        except BaseException as err:  # noqa
            die("the run raised %s" % type_(err).__name__)
        if snapshot() != before:
            die("a namespace changed while %s ran" % test.id())
    failed = set(result.failed)
    lines = []
    for test_id in result.passed:
        lines.append("%s %s %s\n" % (nonce, test_id, "FAIL" if test_id in failed else "PASS"))
    for test_id in sorted(failed):
        lines.append("%s %s FAIL\n" % (nonce, test_id))
    write(report, "".join(lines).encode())
    exit_(0)

_main()
'''


@dataclass(frozen=True)
class Verdict:
    passed: bool
    why: str


def expected_tests(repo: SweRepo) -> dict[str, set[str]]:
    """{test module: its test ids}, read from the original test sources on the host: every ``test*`` method of every
    class in a ``tests/test*.py`` file that derives from a ``TestCase``."""
    out: dict[str, set[str]] = {}
    for path, text in sorted(repo.test_files.items()):
        name = path.rsplit("/", 1)[-1]
        if not (name.startswith("test") and name.endswith(".py")):
            continue
        module = path[:-3].replace("/", ".")
        ids = set()
        for node in ast.parse(text).body:
            if isinstance(node, ast.ClassDef) and any("TestCase" in ast.unparse(b) for b in node.bases):
                ids |= {f"{module}.{node.name}.{f.name}" for f in node.body
                        if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef) and f.name.startswith("test")}
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
        for module, ids in expected.items():
            nonce = secrets.token_hex(16)
            argv = ["python3", "-I", "-B", "-c", HARNESS, module]
            rc, out, timed_out = sb.run(argv, timeout=timeout_s, input=(nonce + "\n").encode())
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
    total = sum(len(ids) for ids in expected.values())
    return Verdict(True, f"all {total} tests passed")
