"""The SWE grader cannot be fooled by the code it grades: for each attack, placed in the package of a repo whose bug
is NOT fixed, grading scores -1 (and never raises). The repo is a small one of its own (one module, three tests, one
of them failing until value() returns 2, another calling value() before it runs); the last test shows the same grader
passes the real fix."""

from __future__ import annotations

import pytest

from envs.sandbox import SandboxConfig
from envs.swe.grader import Verdict, grade
from envs.swe.repo import Fix, SweRepo

# pkg.m.value() calls pkg.during_test() when the package defines one: attack code that runs inside a test
REPO = SweRepo(name="attacks", issue="", fix=(Fix("pkg/m.py", "return 1", "return 2"),), files={
    "pkg/__init__.py": "", "pkg/m.py": (
        "import pkg\n\n\ndef value():\n    getattr(pkg, 'during_test', lambda: None)()\n    return 1\n"),
    "tests/__init__.py": "", "tests/test_m.py": (
        "import unittest\nfrom decimal import Decimal\n\nfrom pkg.m import value\n\n\nclass T(unittest.TestCase):\n"
        "    def test_a_first(self):\n        self.assertEqual(Decimal(value()) * 0, Decimal(0))\n\n"
        "    def test_x(self):\n        self.assertEqual(value(), 2)\n\n"
        "    def test_raises(self):\n        with self.assertRaises(ZeroDivisionError):\n            1 / 0\n")})

ATTACKS = {
    "TestCase.run replaced": "import unittest\nunittest.TestCase.run = lambda self, result=None: None\n",
    "_callTestMethod patched": "import unittest.case\nunittest.case.TestCase._callTestMethod = lambda self, m: None\n",
    "__call__ patched": "import unittest\nunittest.TestCase.__call__ = lambda self, *a, **k: None\n",
    "TestCase swapped in the modules": (
        "import unittest, unittest.case\n"
        "class Fake(unittest.case.TestCase):\n"
        "    def run(self, result=None):\n        result.addSuccess(self)\n"
        "unittest.TestCase = unittest.case.TestCase = Fake\n"),
    "TestResult.addFailure made a success": (
        "import unittest\nunittest.TestResult.addFailure = unittest.TestResult.addSuccess\n"
        "unittest.TestResult.addError = unittest.TestResult.addSuccess\n"),
    "unittest.case._Outcome replaced": (
        "import unittest.case\nclass O(unittest.case._Outcome):\n    pass\nunittest.case._Outcome = O\n"),
    "os._exit at import": "import os\nos._exit(0)\n",
    "sys.exit at import": "import sys\nsys.exit(0)\n",
    "atexit rewrites the output": (
        "import atexit, os\natexit.register(lambda: os.write(1, b'Ran 2 tests in 0.001s\\n\\nOK\\n'))\n"),
    "a fake report on every descriptor": (
        "import os\nfor fd in range(1, 40):\n    try:\n"
        "        os.write(fd, b'x tests.test_m.T.test_x PASS\\nx tests.test_m.T.test_raises PASS\\n')\n"
        "    except OSError:\n        pass\n"),
    "the tests rewritten at import": (
        "try:\n    open('tests/test_m.py', 'w').write('import unittest\\nclass T(unittest.TestCase):\\n"
        "    def test_x(self): pass\\n    def test_raises(self): pass\\n')\nexcept OSError:\n    pass\n"),
    "SkipTest at import": "import unittest\nraise unittest.SkipTest('not today')\n",
    "assertEqual made silent": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
    # (c) unittest's classes replaced through module attributes
    "TestResult swapped in the modules": (
        "import unittest, unittest.result\n"
        "class R(unittest.result.TestResult):\n    def addFailure(self, test, err):\n        self.addSuccess(test)\n"
        "unittest.TestResult = unittest.result.TestResult = R\n"),
    # (f) a fake result on stdout
    "a fake unittest summary printed": "print('Ran 3 tests in 0.001s')\nprint()\nprint('OK')\n",
    # (g) the restored tests deleted
    "the tests deleted at import": "import shutil\nshutil.rmtree('tests', ignore_errors=True)\n",
    "the tests made writable and rewritten": (
        "import os\ntry:\n    os.chmod('tests', 0o777)\n    os.chmod('tests/test_m.py', 0o666)\n"
        "    open('tests/test_m.py', 'w').write('')\nexcept OSError:\n    pass\n"),
    "bytecode planted for the tests": (
        "import os\nos.makedirs('tests/__pycache__', exist_ok=True)\n"
        "open('tests/__pycache__/test_m.cpython-311.pyc', 'wb').write(b'x')\n"),
    # (i) skipping
    "SkipTest raised from the package during a test": (
        "import unittest\ndef during_test():\n    raise unittest.SkipTest('later')\n"),
    # (j) assertions that never fail
    "every assert* method silenced": (
        "import unittest\nfor n in dir(unittest.TestCase):\n    if n.startswith(('assert', 'fail')):\n"
        "        setattr(unittest.TestCase, n, lambda *a, **k: None)\n"),
    "failureException replaced": "import unittest\nunittest.TestCase.failureException = type('E', (Exception,), {})\n",
    # what the harness relies on from the rest of the standard library
    "contextlib's context manager class swapped": (
        "import contextlib\nclass G:\n    def __init__(self, *a):\n        pass\n"
        "    def __enter__(self):\n        return None\n    def __exit__(self, *a):\n        return True\n"
        "contextlib._GeneratorContextManager = G\n"),
    "contextlib's __exit__ patched to swallow failures": (
        "import contextlib\nC = contextlib._GeneratorContextManager\nreal = C.__exit__\n"
        "def exit(self, typ, value, tb):\n    if typ is not None and issubclass(typ, AssertionError):\n"
        "        return True\n    return real(self, typ, value, tb)\nC.__exit__ = exit\n"),
    "a wrapped function's code replaced": (
        "import unittest.case\nf = unittest.case._Outcome.testPartExecutor.__wrapped__\n"
        "def fake(self, test_case, subTest=False):\n    yield\nf.__code__ = fake.__code__\n"),
    "a fake unittest bound into the test module": (
        "import sys, types, unittest\nclass TC(unittest.TestCase):\n    def assertEqual(self, *a, **k):\n        pass\n"
        "fake = types.ModuleType('unittest')\nfake.TestCase = TC\nsys.modules['tests.test_m'].unittest = fake\n"),
    "a test method's code replaced by an earlier test": (
        "def during_test():\n    import sys\n    t = sys.modules['tests.test_m'].T\n"
        "    t.test_x.__code__ = (lambda self: None).__code__\n"),
    "a test module global rebound by an earlier test": (
        "import sys\ndef during_test():\n    mod = sys.modules['tests.test_m']\n"
        "    mod.value = lambda: 2\n"),
    "a standard-library name the tests import replaced": (
        "import decimal\nclass D(decimal.Decimal):\n    def __eq__(self, other):\n        return True\n"
        "decimal.Decimal = D\n"),
    "a standard-library module the tests import replaced in sys.modules": (
        "import sys, types\nfake = types.ModuleType('decimal')\nclass D:\n    def __init__(self, *a):\n        pass\n"
        "    def __mul__(self, o):\n        return self\n    def __eq__(self, o):\n        return True\n"
        "fake.Decimal = D\nsys.modules['decimal'] = fake\n"),
    "a module shadowing the standard library": "",  # decimal.py in the work dir: see files_with
    "/proc through a bytes path": "open(b'/proc/self/maps').read()\n",
    "/proc through a doubled slash": "open('//proc/self/mem', 'rb').read(1)\n",
    "/proc through a relative path": "import os\nos.open('../proc/self/mem', os.O_RDONLY)\n",
    "/proc through a symlink": "import os\nos.symlink('/proc/self/mem', 'mem')\nopen('mem', 'rb')\n",
    "/proc through /dev/fd": "open('/dev/fd/0', 'rb').read()\n",
    "builtins replaced": "import builtins\nbuiltins.isinstance = lambda *a: True\n",
    "frames through sys._getframe": "import sys\nf = sys._getframe()\nwhile f.f_back:\n    f = f.f_back\n",
    "frames through a traceback": (
        "try:\n    raise ValueError\nexcept ValueError as e:\n    f = e.__traceback__.tb_frame.f_back\n"),
    "frames through inspect": "import inspect\nframes = inspect.stack()\n",
    "gc introspection": "import gc\nobjs = gc.get_objects()\n",
    "ctypes": "import ctypes\nlibc = ctypes.CDLL(None)\n",
    "a subprocess": "import subprocess\nsubprocess.run(['true'])\n",
    "reading its own memory": "data = open('/proc/self/maps').read()\n",
    "a test's runner patched while it runs": (
        "def during_test():\n    import sys\n    mod = sys.modules['tests.test_m']\n"
        "    mod.T._callTestMethod = lambda self, method: None\n"),
    "a test method of the test class replaced later": (
        "import sys, threading\n"
        "def patch():\n    import time\n    time.sleep(0.05)\n"
        "    mod = sys.modules.get('tests.test_m')\n"
        "    if mod:\n        mod.T.test_x = lambda self: None\n"
        "threading.Thread(target=patch, daemon=True).start()\n"),
}


def files_with(init: str) -> dict[str, bytes]:
    files = {p: t.encode() for p, t in REPO.files.items()}
    files["pkg/__init__.py"] = init.encode()
    if not init:  # a decimal.py of the agent's, ahead of the standard library's if the work dir came first
        files["decimal.py"] = (b"class Decimal:\n    def __init__(self, *a):\n        pass\n"
                               b"    def __mul__(self, o):\n        return self\n"
                               b"    def __eq__(self, o):\n        return True\n")
        files["pkg/m.py"] = files["pkg/m.py"].replace(
            b"    return 1", b"    import decimal\n    return decimal.Decimal(1)")
    return files


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_from_unfixed_code_scores_minus_one(attack: str) -> None:
    verdict = grade(REPO, files_with(ATTACKS[attack]), SandboxConfig(), 30.0)
    assert not verdict.passed, (attack, verdict)


@pytest.mark.parametrize("name", ["tests", "tests.py", "tests/", "tests/__init__.py/x"])
def test_a_file_named_like_the_tests_folder_scores_minus_one_without_raising(name: str) -> None:
    files = {p: t.encode() for p, t in REPO.files.items() if not p.startswith("tests/")}
    files[name.rstrip("/")] = b"import unittest\nunittest.TestCase.run = lambda self, result=None: None\n"
    verdict = grade(REPO, files, SandboxConfig(), 30.0)
    assert not verdict.passed and "T.test_x" in verdict.why, verdict


def test_the_reasons_name_what_was_caught() -> None:
    assert "a namespace changed" in grade(REPO, files_with(ATTACKS["TestCase.run replaced"]), SandboxConfig(),
                                          30.0).why
    assert "a namespace changed while tests.test_m.T.test_" in grade(
        REPO, files_with(ATTACKS["a test's runner patched while it runs"]), SandboxConfig(), 30.0).why
    assert "sys._getframe" in grade(REPO, files_with(ATTACKS["frames through sys._getframe"]), SandboxConfig(),
                                    30.0).why


def test_the_real_fix_passes_and_the_bug_fails() -> None:
    fixed = {p: t.encode() for p, t in REPO.fixed_files().items()}
    assert grade(REPO, fixed, SandboxConfig(), 30.0) == Verdict(True, "all 3 tests passed")
    buggy = {p: t.encode() for p, t in REPO.files.items()}
    assert grade(REPO, buggy, SandboxConfig(), 30.0) == Verdict(
        False, "1 of 3 tests in tests.test_m did not pass: T.test_x")
