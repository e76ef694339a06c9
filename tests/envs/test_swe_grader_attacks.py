"""The SWE grader cannot be fooled by the code it grades: for each attack, placed in the package of a repo whose bug
is NOT fixed, grading scores -1 (and never raises); where the reason is specific, it says what was caught. The repo
is a small one of its own: ``value()`` returns 1 until it is fixed to return 2, and ``check()`` raises ValueError only
once it is fixed; its tests read the expected value from a module constant, a module function, ``self`` (set in
setUp) and a helper class, so that an attack must defeat every path the tests take. ``value()`` calls
``pkg.during_test()`` when the package defines one: attack code that runs inside a test. The same grader passes the
real fix, and runs ordinary unittest code (subTest, setUpClass, cleanups, super(), assertRaises' context, ...) as
unittest does."""

from __future__ import annotations

import pytest

from envs.sandbox import SandboxConfig
from envs.swe.env import SweEnv
from envs.swe.grader import Verdict, grade
from envs.swe.repo import Fix, SweRepo

TEST_M = '''import unittest
from decimal import Decimal

from pkg.m import check, value

EXPECTED = 2


def expected():
    return EXPECTED


class Helper:
    def __init__(self):
        self.want = expected()

    def want_value(self):
        return self.want


class T(unittest.TestCase):
    TWO = 2

    def setUp(self):
        self.want = expected()

    def test_a_first(self):
        self.assertEqual(Decimal(value()) * 0, Decimal(0))

    def test_raises(self):
        with self.assertRaises(ZeroDivisionError):
            1 / 0

    def test_x(self):
        self.assertEqual(value(), 2)

    def test_y(self):
        got = value()
        self.assertEqual(got, self.TWO)
        self.assertEqual(got, self.want)
        self.assertEqual(got, EXPECTED)
        self.assertTrue(got == Helper().want_value())

    def test_z(self):
        with self.assertRaises(ValueError):
            check()
'''

REPO = SweRepo(name="attacks", issue="", fix=(Fix("pkg/m.py", "return 1", "return 2"),), files={
    "pkg/__init__.py": "", "pkg/m.py": (
        "import pkg\n\n\ndef value():\n    getattr(pkg, 'during_test', lambda: None)()\n    return 1\n\n\n"
        "def check():\n    if value() == 2:\n        raise ValueError('fixed')\n"),
    "tests/__init__.py": "", "tests/test_m.py": TEST_M})
BUGGY = "3 of 5 tests in tests.test_m did not pass: T.test_x, T.test_y, T.test_z"

# the test classes, found from the package without naming the test module (which grading never registers)
FIND_T = ("def find_t():\n    import unittest\n    for c in unittest.TestCase.__subclasses__():\n"
          "        if c.__name__ == 'T':\n            return c\n")

ATTACKS = {
    # (a) TestCase.run replaced at import
    "TestCase.run replaced": "import unittest\nunittest.TestCase.run = lambda self, result=None: None\n",
    # (b) how a test method is called
    "_callTestMethod patched": "import unittest.case\nunittest.case.TestCase._callTestMethod = lambda self, m: None\n",
    "__call__ patched": "import unittest\nunittest.TestCase.__call__ = lambda self, *a, **k: None\n",
    # (c) unittest's classes and functions replaced through module attributes
    "TestCase swapped in the modules": (
        "import unittest, unittest.case\n"
        "class Fake(unittest.case.TestCase):\n"
        "    def run(self, result=None):\n        result.addSuccess(self)\n"
        "unittest.TestCase = unittest.case.TestCase = Fake\n"),
    "TestResult.addFailure made a success": (
        "import unittest\nunittest.TestResult.addFailure = unittest.TestResult.addSuccess\n"
        "unittest.TestResult.addError = unittest.TestResult.addSuccess\n"),
    "TestResult swapped in the modules": (
        "import unittest, unittest.result\n"
        "class R(unittest.result.TestResult):\n    def addFailure(self, test, err):\n        self.addSuccess(test)\n"
        "unittest.TestResult = unittest.result.TestResult = R\n"),
    "unittest.case._Outcome replaced": (
        "import unittest.case\nclass O(unittest.case._Outcome):\n    pass\nunittest.case._Outcome = O\n"),
    # patches made and undone inside a test: what the previous grader (unittest's runner) lost to
    "_addError swapped while a test runs and restored by itself": (
        "import unittest.case as c\n"
        "def during_test():\n    real = c._addError\n"
        "    def evil(result, test, exc_info):\n        c._addError = real\n        result.addSuccess(test)\n"
        "    c._addError = evil\n    raise ValueError\n"),
    "assertEqual swapped until its next call, which restores it": (
        "import unittest\n"
        "def during_test():\n    TC = unittest.TestCase\n    real = TC.__dict__['assertEqual']\n"
        "    def evil(self, *a, **k):\n        TC.assertEqual = real\n    TC.assertEqual = evil\n"),
    "assertRaises' context swapped until used": (
        "import unittest.case as c\n"
        "def during_test():\n    real = c._AssertRaisesContext\n"
        "    class Ctx:\n        def __init__(self, *a):\n            pass\n        def __enter__(self):\n"
        "            c._AssertRaisesContext = real\n            return self\n"
        "        def __exit__(self, *a):\n            return True\n"
        "    c._AssertRaisesContext = Ctx\n"),
    "the test module's constant and function rebound while a test runs": FIND_T + (
        "def during_test():\n    g = find_t().setUp.__globals__\n    g['EXPECTED'] = 1\n"
        "    g['expected'] = lambda: 1\n"),
    "a helper class's method swapped until used": FIND_T + (
        "def during_test():\n    import sys\n    h = find_t().setUp.__globals__['Helper']\n"
        "    real = h.__dict__['want_value']\n"
        "    def evil(self):\n        h.want_value = real\n        return 1\n    h.want_value = evil\n"),
    "a property on the test class hides self.want": FIND_T + (
        "def during_test():\n    T = find_t()\n"
        "    def evil(self):\n        del T.want\n        return 1\n    T.want = property(evil)\n"),
    "a descriptor put in the test class's data": FIND_T + (
        "def during_test():\n    T = find_t()\n    class D:\n        def __get__(self, obj, cls=None):\n"
        "            return 1\n    T.TWO = D()\n    T.want = D()\n"),
    "a test method replaced before it runs": FIND_T + (
        "def during_test():\n    T = find_t()\n    for n in ('test_x', 'test_y', 'test_z'):\n"
        "        setattr(T, n, lambda self: None)\n"),
    "a builtin swapped until used": (
        "import builtins\ndef during_test():\n    real = builtins.isinstance\n"
        "    def evil(*a):\n        builtins.isinstance = real\n        return True\n    builtins.isinstance = evil\n"),
    "__build_class__ swapped at import to rewrite the test class": (
        "import builtins\nreal = builtins.__build_class__\n"
        "def evil(func, name, *bases, **kw):\n    builtins.__build_class__ = real\n"
        "    cls = real(func, name, *bases, **kw)\n"
        "    for n in ('test_x', 'test_y', 'test_z'):\n        if hasattr(cls, n):\n"
        "            setattr(cls, n, lambda self: None)\n    return cls\n"
        "builtins.__build_class__ = evil\n"),
    "TestCase.__init_subclass__ rewrites the test class": (
        "import unittest\nreal = unittest.TestCase.__dict__['__init_subclass__']\n"
        "def evil(cls, **kw):\n    unittest.TestCase.__init_subclass__ = real\n"
        "    cls.test_x = cls.test_y = cls.test_z = lambda self: None\n"
        "unittest.TestCase.__init_subclass__ = classmethod(evil)\n"),
    "a finalizer patches between tests": (
        "import gc, unittest\ngc.enable()\nclass Bomb:\n    def __del__(self):\n"
        "        unittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "def during_test():\n    b = Bomb()\n    b.me = b\n"),
    "the garbage collector switched on": "import gc\ndef during_test():\n    gc.enable()\n",
    # (d) exits
    "os._exit at import": "import os\nos._exit(0)\n",
    "sys.exit at import": "import sys\nsys.exit(0)\n",
    "os._exit in a test": "import os\ndef during_test():\n    os._exit(0)\n",
    "SystemExit in a test": "def during_test():\n    raise SystemExit(0)\n",
    "KeyboardInterrupt in a test": "def during_test():\n    raise KeyboardInterrupt\n",
    # (e) atexit
    "atexit rewrites the output": (
        "import atexit, os\natexit.register(lambda: os.write(1, b'Ran 5 tests in 0.001s\\n\\nOK\\n'))\n"),
    # (f) fake results
    "a fake unittest summary printed": "import sys\nprint('Ran 5 tests in 0.001s')\nprint()\nprint('OK')\n"
                                       "print('OK', file=sys.stderr)\n",
    "a fake report on every descriptor": (
        "import os\nfor fd in range(1, 40):\n    try:\n"
        "        os.write(fd, b''.join(b'x tests.test_m.T.test_%s PASS\\n' % n for n in (b'x', b'y', b'z')))\n"
        "    except OSError:\n        pass\n"),
    "the report descriptor closed": "import os\nfor fd in range(3, 40):\n    try:\n        os.close(fd)\n"
                                    "    except OSError:\n        pass\n",
    # (g) the restored tests
    "the tests rewritten at import": (
        "try:\n    open('tests/test_m.py', 'w').write('import unittest\\nclass T(unittest.TestCase):\\n"
        "    def test_x(self): pass\\n')\nexcept OSError:\n    pass\n"),
    "the tests deleted at import": "import shutil\nshutil.rmtree('tests', ignore_errors=True)\n",
    "the tests made writable and rewritten": (
        "import os\ntry:\n    os.chmod('tests', 0o777)\n    os.chmod('tests/test_m.py', 0o666)\n"
        "    open('tests/test_m.py', 'w').write('')\nexcept OSError:\n    pass\n"),
    "bytecode planted for the tests": (
        "import os\nos.makedirs('tests/__pycache__', exist_ok=True)\n"
        "open('tests/__pycache__/test_m.cpython-311.pyc', 'wb').write(b'x')\n"),
    "the harness's code read through the tests' constants": FIND_T + (
        "import types\ndef during_test():\n    for c in find_t().test_y.__code__.co_consts:\n"
        "        for v in (c if type(c) is tuple else ()):\n"
        "            if type(v) is types.FunctionType:\n                v.__code__\n"),
    "the tests' constants rewritten": FIND_T + (
        "def during_test():\n    grabbed = []\n    class Grab:\n        def __eq__(self, other):\n"
        "            grabbed.append(other)\n            return NotImplemented\n"
        "    for c in find_t().test_y.__code__.co_consts:\n        c == Grab()\n"
        "    for g in grabbed:\n        if type(g) is dict:\n            g.clear()\n"
        "        if type(g) is list:\n            g[:] = [None] * len(g)\n"
        "    import unittest\n    api = [v for c in find_t().test_y.__code__.co_consts if type(c) is tuple\n"
        "           for v in c if getattr(v, '__name__', '') == 'module_name']\n"
        "    for f in api:\n        f.__globals__['SNAP'] = {'EXPECTED': 1}\n"),
    "the harness's record called again": FIND_T + (
        "import types\ndef during_test():\n    for c in find_t().test_y.__code__.co_consts:\n"
        "        for v in (c if type(c) is tuple else ()):\n"
        "            if getattr(v, '__name__', '') == 'record':\n"
        "                v(('EXPECTED', 'expected'), {'EXPECTED': 1, 'expected': lambda: 1})\n"),
    "a test function's code replaced": FIND_T + (
        "def during_test():\n    find_t().test_y.__code__ = (lambda self: None).__code__\n"),
    "a test function's defaults set": FIND_T + (
        "def during_test():\n    find_t().setUp.__globals__['expected'].__defaults__ = (1,)\n"),
    # (i) skipping
    "SkipTest at import": "import unittest\nraise unittest.SkipTest('not today')\n",
    "SkipTest raised in a test": "import unittest\ndef during_test():\n    raise unittest.SkipTest('later')\n",
    "unittest.skip injected": FIND_T + (
        "import unittest\ndef during_test():\n    T = find_t()\n"
        "    for n in ('test_x', 'test_y', 'test_z'):\n        setattr(T, n, unittest.skip('no')(getattr(T, n)))\n"),
    "the class marked skipped": FIND_T + "def during_test():\n    find_t().__unittest_skip__ = True\n",
    "expectedFailure marks": FIND_T + (
        "def during_test():\n    T = find_t()\n    for n in ('test_x', 'test_y', 'test_z'):\n"
        "        vars(T)[n].__dict__['__unittest_expecting_failure__'] = True\n"),
    # (j) assertions that never fail
    "assertEqual made silent": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n",
    "every assert* method silenced": (
        "import unittest\nfor n in dir(unittest.TestCase):\n    if n.startswith(('assert', 'fail')):\n"
        "        setattr(unittest.TestCase, n, lambda *a, **k: None)\n"),
    "failureException replaced": "import unittest\nunittest.TestCase.failureException = type('E', (Exception,), {})\n",
    "builtins replaced": "import builtins\nbuiltins.isinstance = lambda *a: True\n",
    "AssertionError replaced in builtins": "import builtins\nbuiltins.AssertionError = type('A', (Exception,), {})\n",
    # the standard library the tests use
    "a standard-library name the tests import replaced": (
        "import decimal\nclass D(decimal.Decimal):\n    def __eq__(self, other):\n        return True\n"
        "decimal.Decimal = D\n"),
    "a standard-library module the tests import replaced in sys.modules": (
        "import sys, types\nfake = types.ModuleType('decimal')\nclass D:\n    def __init__(self, *a):\n        pass\n"
        "    def __mul__(self, o):\n        return self\n    def __eq__(self, o):\n        return True\n"
        "fake.Decimal = D\nsys.modules['decimal'] = fake\n"),
    "contextlib's __exit__ patched to swallow failures": (
        "import contextlib\nC = contextlib._GeneratorContextManager\nreal = C.__exit__\n"
        "def exit(self, typ, value, tb):\n    if typ is not None and issubclass(typ, AssertionError):\n"
        "        return True\n    return real(self, typ, value, tb)\nC.__exit__ = exit\n"),
    # the harness's own state
    "frames through sys._getframe": "import sys\nf = sys._getframe()\nwhile f.f_back:\n    f = f.f_back\n",
    "frames through a traceback in a test": (
        "def during_test():\n    try:\n        raise ValueError\n    except ValueError as e:\n"
        "        f = e.__traceback__.tb_frame.f_back\n"),
    "frames through a generator": "def during_test():\n    g = (x for x in [1])\n    g.gi_frame\n",
    "frames through inspect": "import inspect\nframes = inspect.stack()\n",
    "gc introspection": "import gc\ndef during_test():\n    objs = gc.get_objects()\n",
    "gc referents of a test function": FIND_T + (
        "import gc\ndef during_test():\n    gc.get_referents(find_t().test_x)\n"),
    "ctypes": "import ctypes\nlibc = ctypes.CDLL(None)\n",
    "a subprocess": "import subprocess\nsubprocess.run(['true'])\n",
    "a thread": "import threading\nthreading.Thread(target=lambda: None).start()\n",
    "a thread that patches while the tests run": (
        "import threading, time, unittest\n"
        "def flip():\n    real = unittest.TestCase.__dict__['assertEqual']\n    while True:\n"
        "        unittest.TestCase.assertEqual = lambda *a, **k: None\n        time.sleep(0)\n"
        "        unittest.TestCase.assertEqual = real\n"
        "try:\n    threading.Thread(target=flip, daemon=True).start()\nexcept RuntimeError:\n    pass\n"),
    "a signal handler that patches at a timer's tick": (
        "import signal, unittest\nreal = unittest.TestCase.__dict__['assertEqual']\n"
        "def tick(*a):\n    unittest.TestCase.assertEqual = lambda *a, **k: None\n"
        "    signal.signal(signal.SIGALRM, signal.SIG_DFL)\n"
        "def during_test():\n    signal.signal(signal.SIGALRM, tick)\n"
        "    signal.setitimer(signal.ITIMER_REAL, 0.05)\n"),
    "a signal handler that keeps moving": (
        "import signal\nnums = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]\n"
        "def hop(*a):\n    for s in nums:\n        signal.signal(s, signal.SIG_DFL)\n"
        "    s = nums[0]\n    signal.signal(s, hop)\n    signal.raise_signal(s)\n"
        "def during_test():\n    hop()\n"),
    "a codec error handler run by the audit hook": (
        "import codecs, sys\n"
        "def evil(err):\n    f = sys._getframe()\n    return ('x', err.end)\n"
        "codecs.register_error('surrogateescape', evil)\n"
        "def during_test():\n    try:\n        open(b'/tmp/\\xff', 'rb')\n    except OSError:\n        pass\n"),
    "the harness's functions through the globals of one it hands out": FIND_T + (
        "import os, types\ndef during_test():\n    for c in find_t().test_y.__code__.co_consts:\n"
        "        for v in (c if type(c) is tuple else ()):\n"
        "            if type(v) is types.FunctionType and ('rebase' in v.__globals__ or 'load' in v.__globals__):\n"
        "                os._exit(0)\n"),
    "the hook left switched off by a RecursionError": (
        "import os, sys\n"
        "def poke():\n    f = lambda: None\n    try:\n        f.__defaults__ = ()\n    except RecursionError:\n"
        "        pass\n"
        "def edge(n):\n    if n:\n        try:\n            edge(n - 1)\n        except RecursionError:\n"
        "            pass\n    for k in range(4):\n        try:\n            list(map(lambda _: poke(), [0]))\n"
        "        except RecursionError:\n            pass\n        try:\n            poke()\n"
        "        except RecursionError:\n            pass\n"
        "def during_test():\n    try:\n        edge(sys.getrecursionlimit())\n    except RecursionError:\n"
        "        pass\n"
        "    if sys._getframe() is not None:\n        os._exit(0)\n"),
    "a subinterpreter without the audit hook": (
        "def during_test():\n    import _xxsubinterpreters as i\n"
        "    i.run_string(i.create(), 'import ctypes')\n"),
    "CPython's test C API": "import _testcapi\n",
    "an extension module of the agent's": (
        "import os, shutil, _json\nname = os.path.basename(_json.__file__)\n"
        "shutil.copyfile(_json.__file__, 'evil' + name[name.index('.'):])\n"
        "try:\n    import evil\nexcept ImportError:\n    pass\n"),
    "a metaclass that claims to be a code owner, through sys.audit": (
        "import sys\nclass Meta(type):\n    def __eq__(cls, other):\n        return True\n"
        "    __hash__ = type.__hash__\n"
        "class Evil(metaclass=Meta):\n    @property\n    def __code__(self):\n"
        "        f = sys._getframe()\n        import os\n        os._exit(0)\n"
        "def during_test():\n    sys.audit('object.__getattr__', Evil(), '__code__')\n"),
    "another audit hook": "import sys\nsys.addaudithook(lambda *a: None)\n",
    "a profiler": "import sys\nsys.setprofile(lambda *a: None)\n",
    "reading its own memory": "data = open('/proc/self/maps').read()\n",
    "/proc through a bytes path": "open(b'/proc/self/maps').read()\n",
    "/proc through a doubled slash": "open('//proc/self/mem', 'rb').read(1)\n",
    "/proc through a relative path": "import os\nos.open('../proc/self/mem', os.O_RDONLY)\n",
    "/proc through a symlink": "import os\nos.symlink('/proc/self/mem', 'mem')\nopen('mem', 'rb')\n",
    "/proc through /dev/fd": "open('/dev/fd/0', 'rb').read()\n",
    "the harness's boot functions called": (
        "import sys\ndef during_test():\n    main = vars(sys.modules['__main__'])\n"
        "    for k, v in list(main.items()):\n        if callable(v) and not k.startswith('__'):\n"
        "            v()\n"),
    "the test module's code through an exec audit event": (
        "import sys\nsys.addaudithook(lambda e, a: None)\n"),
}


def files_with(init: str) -> dict[str, bytes]:
    files = {p: t.encode() for p, t in REPO.files.items()}
    files["pkg/__init__.py"] = init.encode()
    return files


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_from_unfixed_code_scores_minus_one(attack: str) -> None:
    verdict = grade(REPO, files_with(ATTACKS[attack]), SandboxConfig(), 30.0)
    assert not verdict.passed, (attack, verdict)


def test_the_snapshot_cannot_be_written_while_the_module_loads() -> None:
    """A test module that defines its class before it imports the package: the package, imported then, finds the
    class, and in its code the harness's record(); calling it ends the run."""
    repo = SweRepo(name="late-import", issue="", fix=REPO.fix, files={**REPO.files, "tests/test_m.py": (
        "import unittest\n\nEXPECTED = 2\n\n\nclass T(unittest.TestCase):\n"
        "    def test_x(self):\n        self.assertEqual(value(), EXPECTED)\n\n\n"
        "from pkg.m import value  # noqa: E402\n")})
    files = {p: t.encode() for p, t in repo.files.items()}
    files["pkg/__init__.py"] = (FIND_T + "import types\nfor c in find_t().test_x.__code__.co_consts:\n"
                                "    for v in (c if type(c) is tuple else ()):\n"
                                "        if getattr(v, '__name__', '') == 'record':\n"
                                "            v(('EXPECTED',), {'EXPECTED': 1})\n"
                                "def value():\n    return 1\n").encode()
    files["pkg/m.py"] = b"from pkg import value\n"
    verdict = grade(repo, files, SandboxConfig(), 30.0)
    assert not verdict.passed and "record called by other code" in verdict.why, verdict
    fixed = {p: t.encode() for p, t in repo.fixed_files().items()}
    assert grade(repo, fixed, SandboxConfig(), 30.0) == Verdict(True, "all 1 tests passed")


def test_a_module_shadowing_the_standard_library_is_not_used_by_the_tests() -> None:
    files = files_with("")
    files["decimal.py"] = (b"class Decimal:\n    def __init__(self, *a):\n        pass\n"
                           b"    def __mul__(self, o):\n        return self\n"
                           b"    def __eq__(self, o):\n        return True\n")
    files["pkg/m.py"] = files["pkg/m.py"].replace(b"    return 1", b"    import decimal\n    return decimal.Decimal(1)")
    verdict = grade(REPO, files, SandboxConfig(), 30.0)
    assert not verdict.passed, verdict


@pytest.mark.parametrize("name", ["tests", "tests.py", "tests/", "tests/__init__.py/x", "tests/test_m.py/x"])
def test_a_file_named_like_the_tests_folder_scores_minus_one_without_raising(name: str) -> None:
    files = {p: t.encode() for p, t in REPO.files.items() if not p.startswith("tests/")}
    files[name.rstrip("/")] = b"import unittest\nunittest.TestCase.run = lambda self, result=None: None\n"
    verdict = grade(REPO, files, SandboxConfig(), 30.0)
    assert not verdict.passed and "T.test_x" in verdict.why, verdict


def test_a_folder_named_like_a_test_file_scores_minus_one_through_the_env() -> None:
    """Through ``SweEnv.evaluate``: the agent's own ``tests/`` content, a folder where a test file must go."""
    from envs.base import Task
    from tests.envs.test_swe import bash

    env = SweEnv()
    try:
        env.reset(Task(task_id="attacks", instruction="", split="train", data=REPO))
        env.step(bash("rm -rf tests && mkdir -p tests/test_m.py tests/__init__.py && touch tests/test_m.py/x"))
        outcome = env.evaluate()
        assert outcome.reward == -1.0 and not outcome.success, outcome.detail
    finally:
        env.close()


REASONS = {
    "TestCase.run replaced": "a namespace changed when the test module was loaded",
    "_addError swapped while a test runs and restored by itself": "a namespace changed after tests.test_m.T.test_a",
    "assertEqual swapped until its next call, which restores it": "a namespace changed before a call of the tests",
    "the test module's constant and function rebound while a test runs": BUGGY,
    "a helper class's method swapped until used": "a namespace changed before",
    "a property on the test class hides self.want": BUGGY,
    "a finalizer patches between tests": "the garbage collector was switched on",
    "frames through sys._getframe": "sys._getframe",
    "frames through a traceback in a test": "tb_frame",
    "the harness's code read through the tests' constants": "__code__ of the harness's code",
    "the harness's record called again": "record called after the test module was loaded",
    "a test function's code replaced": "__code__",
    "a test function's defaults set": "on a function of the tests",
    "gc referents of a test function": "gc.get_referents",
    "__build_class__ swapped at import to rewrite the test class": "a namespace changed when the test module",
    "TestCase.__init_subclass__ rewrites the test class": "T.test_x is not the original code",
    "os._exit at import": "without reporting any test",
    "the report descriptor closed": "without reporting any test",
    "a thread": "the test module did not load: RuntimeError",
    "a metaclass that claims to be a code owner, through sys.audit": "__code__ of an object that owns no code",
    "a descriptor put in the test class's data": "a descriptor appeared on a class of the tests: TWO",
    "a subinterpreter without the audit hook": "import of _xxsubinterpreters",
    "an extension module of the agent's": "import of the extension module /workspace/evil",
    "the harness's functions through the globals of one it hands out": BUGGY,
    "the hook left switched off by a RecursionError": "sys._getframe",
    "a signal handler that patches at a timer's tick": "a signal handler was installed",
    "a codec error handler run by the audit hook": "open (not a plain path)",
}


@pytest.mark.parametrize("attack", sorted(k for k in REASONS if k in ATTACKS))
def test_the_reasons_name_what_was_caught(attack: str) -> None:
    verdict = grade(REPO, files_with(ATTACKS[attack]), SandboxConfig(), 30.0)
    assert not verdict.passed and REASONS[attack] in verdict.why, verdict


def test_the_real_fix_passes_and_the_bug_fails() -> None:
    fixed = {p: t.encode() for p, t in REPO.fixed_files().items()}
    assert grade(REPO, fixed, SandboxConfig(), 30.0) == Verdict(True, "all 5 tests passed")
    buggy = {p: t.encode() for p, t in REPO.files.items()}
    assert grade(REPO, buggy, SandboxConfig(), 30.0) == Verdict(False, BUGGY)


# -- the harness runs ordinary unittest code as unittest does ----------------------------------------------------------

SEMANTICS = SweRepo(name="semantics", issue="", fix=(Fix("pkg/core.py", "return a - b", "return a + b"),), files={
    "pkg/__init__.py": "",
    "pkg/core.py": '''import collections
import inspect
import json
from dataclasses import dataclass


@dataclass
class Point:
    x: int
    y: int


def add(a, b):
    return a - b


def parse(text):
    if not text:
        raise ValueError("empty input")
    return json.loads(text)


def arity(fn):
    return len(inspect.signature(fn).parameters)


def apply(fn, *args):
    return fn(*args)


def counts(words):
    return collections.Counter(words)
''',
    "tests/__init__.py": "",
    "tests/test_sem.py": '''import json
import unittest
from collections import Counter

from pkg.core import Point, add, apply, arity, counts, parse

TABLE = [(1, 2, 3), (2, 2, 4), (-1, 1, 0)]
READY = False


def setUpModule():
    global READY
    READY = True


def square(n):
    return n * n


class Base(unittest.TestCase):
    shared = None

    @classmethod
    def setUpClass(cls):
        cls.shared = {"ready": True}

    def setUp(self):
        self.log = ["set up"]
        self.addCleanup(self.log.clear)

    def check_add(self, a, b, want):
        self.assertEqual(add(a, b), want)

    @staticmethod
    def twice(n):
        return 2 * n


class SemanticsTest(Base):
    limit = 10

    def setUp(self):
        super().setUp()
        self.total = 0
        self.maxDiff = None

    def test_table(self):
        for a, b, want in TABLE:
            with self.subTest(a=a, b=b):
                self.check_add(a, b, want)

    def test_raises(self):
        with self.assertRaises(ValueError) as cm:
            parse("")
        self.assertIn("empty", str(cm.exception))
        with self.assertRaisesRegex(ValueError, "empty"):
            parse("")
        self.assertRaises(json.JSONDecodeError, parse, "{")
        self.assertTrue(READY)

    def test_state_and_closures(self):
        self.total += 5
        self.total += add(1, 1)
        self.assertEqual(self.total, 7)
        self.assertTrue(self.shared["ready"])
        self.assertEqual(self.log, ["set up"])
        self.assertLess(self.total, self.limit)
        hits = []
        self.assertEqual(apply(lambda n: hits.append(n) or add(n, self.total), 3), 10)
        self.assertEqual(hits, [3])
        self.assertEqual([square(i) for i in range(3)], [0, 1, 4])
        self.assertEqual(self.twice(add(1, 1)), 4)
        self.assertEqual(arity(square), 1)

    def test_values(self):
        self.assertEqual(Point(1, 2), Point(add(0, 1), 2))
        self.assertNotEqual(Point(1, 2), Point(2, 1))
        self.assertCountEqual(counts("abca").elements(), ["a", "a", "b", "c"])
        self.assertEqual(counts("aab"), Counter({"a": 2, "b": 1}))
        self.assertAlmostEqual(add(0.1, 0.2), 0.3)
        self.assertIsInstance(parse("[1]"), list)
        self.assertDictEqual(parse('{"a": 1}'), {"a": add(0, 1)})
        self.assertRegex("abc", r"b")
        self.assertIsNone(None)

    def test_local_import(self):
        import math
        from fractions import Fraction
        self.assertEqual(math.floor(add(1.5, 1)), 2)
        self.assertEqual(Fraction(1, 2) + Fraction(1, 2), add(0, 1))

    def test_id(self):
        self.assertTrue(self.id().endswith("SemanticsTest.test_id"))
''',
})


def test_ordinary_unittest_code_grades_as_unittest_would() -> None:
    fixed = {p: t.encode() for p, t in SEMANTICS.fixed_files().items()}
    assert grade(SEMANTICS, fixed, SandboxConfig(), 30.0) == Verdict(True, "all 6 tests passed")
    buggy = {p: t.encode() for p, t in SEMANTICS.files.items()}
    assert grade(SEMANTICS, buggy, SandboxConfig(), 30.0) == Verdict(False, (
        "4 of 6 tests in tests.test_sem did not pass: SemanticsTest.test_local_import, "
        "SemanticsTest.test_state_and_closures, SemanticsTest.test_table, SemanticsTest.test_values"))


LIARS = {
    "an int that equals anything": (
        "class L(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "import pkg.m\nreal = pkg.m.value\npkg.m.value = lambda: L(real())\n"),
    "an object that equals anything": (
        "class A:\n    def __eq__(self, other):\n        return True\n    __hash__ = object.__hash__\n"
        "import pkg.m\npkg.m.value = lambda: A()\n"),
    "an int that compares as anything": (
        "class L(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "    __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
        "import pkg.m\nreal = pkg.m.value\npkg.m.value = lambda: L(real())\n"),
    "a set of values that equal anything": (
        "class A:\n    def __eq__(self, other):\n        return True\n    def __hash__(self):\n        return hash(2)\n"
        "import pkg.m\npkg.m.value = lambda: A()\npkg.m.box = lambda: [A()]\npkg.m.pair = lambda: {A(), 3}\n"),
    "a str that equals anything": (
        "class S(str):\n    def __eq__(self, other):\n        return True\n    __hash__ = str.__hash__\n"
        "import pkg.m\npkg.m.value = lambda: S('1')\n"),
}

LIAR_REPO = SweRepo(name="liars", issue="", fix=(Fix("pkg/m.py", "return 1", "return 2"),), files={
    "pkg/__init__.py": "", "pkg/m.py": (
        "def value():\n    return 1\n\n\ndef box():\n    return [value()]\n\n\ndef pair():\n"
        "    return {value(), 3}\n"),
    "tests/__init__.py": "", "tests/test_m.py": (
        "import unittest\n\nfrom pkg.m import box, pair, value\n\n\nclass T(unittest.TestCase):\n"
        "    def test_equal(self):\n        self.assertEqual(value(), 2)\n\n"
        "    def test_reversed(self):\n        self.assertEqual(2, value())\n\n"
        "    def test_nested(self):\n        self.assertEqual(box(), [2])\n\n"
        "    def test_in(self):\n        self.assertIn(value(), [2, 3])\n\n"
        "    def test_count(self):\n        self.assertCountEqual(box(), [2])\n\n"
        "    def test_order(self):\n        self.assertGreater(value(), 1)\n\n"
        "    def test_set(self):\n        self.assertEqual(pair(), {2, 3})\n")})


@pytest.mark.parametrize("liar", sorted(LIARS))
def test_a_value_that_equals_anything_is_not_a_pass(liar: str) -> None:
    """Not the package's own answer: a value that equals whatever it is compared with (the assertion ran, on the
    package's object; the harness also compares it with an altered expected value)."""
    files = {p: t.encode() for p, t in LIAR_REPO.files.items()}
    files["pkg/__init__.py"] = LIARS[liar].encode()
    verdict = grade(LIAR_REPO, files, SandboxConfig(), 30.0)
    assert not verdict.passed, verdict
    assert "did not pass: T.test_count, T.test_equal, T.test_in, T.test_nested" in verdict.why, verdict


def test_values_of_the_package_that_compare_honestly_pass() -> None:
    files = {p: t.encode() for p, t in LIAR_REPO.fixed_files().items()}
    assert grade(LIAR_REPO, files, SandboxConfig(), 30.0) == Verdict(True, "all 7 tests passed")
    files["pkg/__init__.py"] = (  # an int subclass and a class with an honest __eq__, as a fix could return
        b"class Two(int):\n    pass\nclass Box:\n    def __init__(self, v):\n        self.v = v\n"
        b"    def __eq__(self, other):\n        return other == [self.v]\n    def __iter__(self):\n"
        b"        return iter([self.v])\nimport pkg.m\npkg.m.value = lambda: Two(2)\n"
        b"pkg.m.box = lambda: Box(2)\n")
    assert grade(LIAR_REPO, files, SandboxConfig(), 30.0) == Verdict(True, "all 7 tests passed")
