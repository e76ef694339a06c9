"""Grading an SWE episode without trusting the code under test to report its own result.

The repo's original tests run in the same interpreter as the package they test, and that package is the agent's code:
it can monkeypatch ``unittest`` when it is imported, exit early, print a fake summary. So the verdict never comes from
unittest's output or exit status. Instead:

- The host writes the agent's non-test files and the ORIGINAL test files into a fresh sandbox; ``tests/`` is then owned
  by root and read-only to the sandbox's uid, and Python runs with ``-B`` (no cached bytecode to plant).
- One interpreter per test module runs a small harness given on the command line (``python3 -I -B -c``), never a file
  the agent could rewrite; it runs as a function whose globals (and builtins) are a private copy no other code can
  reach. Before any package code is imported it reads a fresh random nonce and a spec from stdin (the host's view of
  the original tests: their sources, the names each test class body binds, the test module's imports), compiles the
  original sources itself, imports the standard-library modules the tests import, captures the real unittest
  classes, snapshots every loaded module's namespace and every existing class's, holds every object that exists then
  (``gc.get_objects()``), moves its report channel to a private descriptor (stdout and stderr go to /dev/null), puts
  the work dir LAST on ``sys.path`` (the package never shadows the standard library), and installs an audit hook,
  which Python code cannot remove. Armed, the hook ends the process on: any ``object.__setattr__``/``__delattr__`` of
  an object that existed before the import, any ``__code__``/``__class__`` assignment, a test class's attributes;
  reading a function's code and frames (``sys._getframe``, tracebacks' and generators' frames,
  ``sys.settrace``/``setprofile``); ``gc`` introspection, ``ctypes``, threads, signals, new processes, ``os.chdir``,
  links; opening a file outside the work dir, ``/usr``, ``/etc``, ``/tmp`` and a few devices (paths resolved by the
  hook itself, symlinks, ``..``, bytes and descriptors included: ``/proc`` is out of reach); writing anywhere in
  ``tests/`` or outside the work dir and ``/tmp``.
- The harness loads the module (importing the package), then checks: nothing watched changed (Python 3.11 raises no
  audit event for a class attribute, so identity checks do the work: unittest's modules, builtins and the test
  modules exactly; other modules and classes keep every name bound to the same object, lazily built ``None`` caches
  aside; ``sys.modules`` still holds the same modules); every class in a test's hierarchy other than ``TestCase`` and
  ``object`` is one of the original sources, each of its functions that source's code object, nothing bound that the
  class body does not bind (a fake ``unittest`` slipped into the test module's globals is caught here); what the test
  module imported from the standard library is the object it got. It runs the tests through the captured runner into
  a result class of its own, repeats the checks after each test, and reports one line per test,
  ``<nonce> <test id> PASS|FAIL``, then leaves with ``os._exit`` (no atexit handler runs). All comparisons are by
  identity over lists built in C, so no ``__eq__``/``__hash__`` of the package runs while the harness checks.
- The host counts the tests itself from the original test sources (``ast``) and passes the episode only when every
  expected test id was reported PASS with the nonce, by the process that ran it. A crash, a timeout, a skip, an
  expected failure, an import error, a missing or extra test, a tampered namespace, a blocked event: -1. The agent's
  files named like the tests folder (``tests`` as a file, ``tests/...``) are never copied; a layout clash is -1.

What this does not stop: a return value whose own ``__eq__`` (or ``__hash__``, ``__len__``, ...) lies to the test's
assertions is still the test comparing the package's value, and passes; the same holds for mutable state the tests
share with the standard library (an instance attribute of a pre-existing object, a lazily built ``None`` cache
replaced); code that reaches the nonce through a path the audit hook does not cover (a CPython bug, a native extension
already loaded) could forge a report. Where the host does not run as root ``tests/`` is only read-only by its modes;
the hook then is what keeps the sandbox's uid from rewriting it. Tests that need ``setUpClass``/``setUpModule``,
threads, decorators that replace a test method (``mock.patch``), ``inspect`` on functions, or files outside the
places above fail under this harness (-1, never a false pass); the repos here need none of them.
"""

from __future__ import annotations

import ast
import json
import secrets
from dataclasses import dataclass

from envs.sandbox import Sandbox, SandboxConfig
from envs.swe.repo import TESTS_DIR, SweRepo

MAX_GRADED_FILES = 1000
VIOLATION_EXIT = 86  # the harness's exit status when the audit hook or an integrity check caught tampering

# The harness. After the package is imported it relies only on local variables, closure cells and a private copy
# of the builtins (it runs as a function whose globals no other code can reach).
HARNESS = r'''
def _main():
    import builtins, gc, json, os, sys, types
    import unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util
    import collections, enum, traceback, typing
    nonce = sys.stdin.readline().strip()
    spec = json.loads(sys.stdin.readline())
    module, sources = spec["module"], spec["sources"]  # {test module: its original source}, from the host
    exit_, write, close, getcwd, lstat, readlink = os._exit, os.write, os.close, os.getcwd, os.lstat, os.readlink
    report = os.dup(1)
    os.set_inheritable(report, False)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    close(null)
    cwd, modules = getcwd(), sys.modules
    tests_dir = cwd + "/" + spec["tests_dir"]

    # the original test sources, compiled here: what every method of a test class must be
    codes = {}
    for name, (path, text) in sources.items():
        todo, found = [compile(text, cwd + "/" + path, "exec")], {}
        while todo:
            code = todo.pop()
            found[code.co_qualname] = code
            todo.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        codes[name] = found
    bodies = {(mod, qualname): frozenset(names) for mod, qualname, names in spec["bodies"]}
    bindings = []
    for local, mod, attr in spec["imports"]:
        try:  # the work dir is not on sys.path yet: only the standard library can be imported here
            value = __import__(mod, fromlist=["x"] if attr else [])
            if attr:
                value = getattr(value, attr)
        except Exception:  # noqa: the repo's own package, imported later
            continue
        bindings.append((local, value))
    sys.path.append(cwd)  # last: the package never shadows the standard library

    mods = [unittest, unittest.case, unittest.loader, unittest.result, unittest.suite, unittest.util]
    TestCase, TestResult, TestSuite = unittest.case.TestCase, unittest.result.TestResult, unittest.suite.TestSuite
    loader = unittest.loader.TestLoader()
    isinstance_, issubclass_, type_, id_, list_, str_, bytes_, int_ = isinstance, issubclass, type, id, list, str, \
        bytes, int
    vars_, tuple_, len_, object_, FunctionType, ModuleType = vars, tuple, len, object, types.FunctionType, \
        types.ModuleType
    staticmethod_, classmethod_, map_, zip_, range_, all_ = staticmethod, classmethod, map, zip, range, all
    from operator import is_
    decode = bytes.decode
    pathlib = modules.get("pathlib")  # path objects are read only where the tests use them (so it is loaded now)
    path_types = (pathlib.PosixPath, pathlib.PurePosixPath) if pathlib is not None else ()
    getframe = sys._getframe
    clear_frames = traceback.clear_frames.__code__  # assertRaises clears its traceback's frames: allowed
    # standard-library callers of sys._getframe that only read the calling module's name (namedtuple, NamedTuple,
    # TypeVar, the Enum functional API): allowed; they hand no frame back
    name_readers = {collections.namedtuple.__code__, typing._caller.__code__}
    if hasattr(enum.EnumType, "_create_"):
        name_readers.add(enum.EnumType._create_.__code__)
    W = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND

    class Result(TestResult):
        """Keeps test ids only (formatting a failure's traceback would read its frames). Its methods live on the
        instance, which the package under test has no way to reach."""

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

    wr = "__warningregistry__"  # interned: the key warnings adds to a module's namespace

    def entries(d):  # a namespace's names and values in its order, as lists built in C (no audit event, no __eq__)
        return list_(d), list_(d.values())

    def identical(a, b):
        return len_(a) == len_(b) and all_(map_(is_, a, b))

    def same():
        """Whether every watched namespace still holds what it held when its reference was taken. A strict one
        (unittest's modules, builtins, the test modules, every class of a test's hierarchy) exactly, a warnings
        registry aside; any other module loaded before the package every name it had, in the same order, bound to
        the same object unless that was None (the standard library's lazily built caches), and no new name that
        shadows a builtin; any other class that existed then (contextlib's, functools', ...) the same, with no new name
        at all. Objects are compared by identity only: no code of the package runs while it checks."""
        for d, strict, keys, values, lazy in spaces:
            now_keys, now_values = entries(d)
            if identical(now_keys, keys) and identical(now_values, values):
                continue
            if strict:
                pairs = [(k, v) for k, v in zip_(now_keys, now_values) if k is not wr]
                ref = [(k, v) for k, v in zip_(keys, values) if k is not wr]
                if not (identical([k for k, v in pairs], [k for k, v in ref]) and
                        identical([v for k, v in pairs], [v for k, v in ref])):
                    return False
                continue
            n = len_(keys)
            if not identical(now_keys[:n], keys):
                return False
            for i in range_(n):
                if now_values[i] is not values[i] and i not in lazy:
                    return False
            for k in now_keys[n:]:
                if strict is None or type_(k) is not str_ or (k in builtin_names and k is not wr):
                    return False
        str_keys(modules)
        for k, m in modules_before:  # every module loaded before the package still the one loaded
            if modules.get(k) is not m:
                return False
        return True

    def watch(d, strict):
        keys, values = entries(d)
        spaces.append((d, strict, keys, values, frozenset(i for i, v in enumerate(values) if v is None)))

    def str_keys(d):  # so that looking a name up in d compares str with str, never runs a package's __eq__
        for k in list_(d):
            if type_(k) is not str_:
                die("a namespace holds a name that is no str")

    def real(p):
        """The real path that p names (symlinks followed, relative to the cwd), or None when p is no plain path."""
        if type_(p) is bytes_:
            p = decode(p, "utf-8", "surrogateescape")
        elif type_(p) in path_types:
            p = str_(p)
        if type_(p) is int_ and p >= 0:  # a descriptor: what it is open on
            try:
                p = readlink("/proc/self/fd/%d" % p)
            except OSError:
                return None
        if type_(p) is not str_:
            return None
        if not p.startswith("/"):
            p = getcwd() + "/" + p
        done, todo, hops = [], p.split("/")[::-1], 0
        while todo:
            part = todo.pop()
            if part == "" or part == ".":
                continue
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join(done + [part])
            try:
                link = (lstat(here).st_mode & 0o170000) == 0o120000
            except (OSError, ValueError):
                link = False
            if not link:
                done.append(part)
                continue
            hops += 1
            if hops > 40:
                return None
            target = readlink(here)
            if target.startswith("/"):
                done = []
            todo.extend(target.split("/")[::-1])
        return "/" + "/".join(done)

    def under(path, top):
        return path == top or path.startswith(top + "/")

    def readable(path):
        return path is not None and (under(path, cwd) or under(path, "/usr") or under(path, "/etc") or
                                     under(path, "/tmp") or path in ("/dev/null", "/dev/zero", "/dev/urandom"))

    def writable(path):
        return path is not None and not under(path, tests_dir) and (
            under(path, cwd) or under(path, "/tmp") or path == "/dev/null")

    # event -> (positions of paths it writes, positions of directory descriptors they may be relative to)
    writes = {"os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
              "os.rename": ((0, 1), (2, 3)), "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)),
              "os.utime": ((0,), (3,)), "os.truncate": ((0,), ()), "os.chflags": ((0,), ()),
              "os.lchflags": ((0,), ()), "os.lchmod": ((0,), ()), "os.setxattr": ((0,), ()),
              "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)), "shutil.move": ((0, 1), ()),
              "shutil.copyfile": ((1,), ()), "shutil.copymode": ((1,), ()), "shutil.copystat": ((1,), ()),
              "shutil.copytree": ((1,), ()), "shutil.unpack_archive": ((1,), ()), "shutil.make_archive": ((0,), ())}
    blocked = ("sys._current_frames", "sys.settrace", "sys.setprofile", "sys.monitoring", "gc.", "ctypes.",
               "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.",
               "pty.", "os.kill", "os.killpg", "signal.", "sys.addaudithook", "cpython.", "_thread.",
               "os.chdir", "os.symlink", "os.link", "os.mkfifo", "os.mknod", "os.startfile", "mmap.",
               "code.__new__")
    armed, inside, checking = [False], [False], [False]

    def die(why):
        write(report, ("%s VIOLATION %s\n" % (nonce, why)).encode())
        exit_(86)

    def hook(event, args):
        if event == "builtins.id" or not armed[0] or inside[0]:
            return
        if event == "object.__getattr__":
            if checking[0] and args[1] == "__code__":  # the harness's own checks, below
                return
            if args[1] == "tb_frame":
                inside[0] = True
                caller = getframe(1).f_code
                inside[0] = False
                if caller is clear_frames:
                    return
            die("%s of %s" % (event, args[1]))
        if event == "sys._getframe":
            inside[0] = True
            caller = getframe(1).f_code
            inside[0] = False
            if caller in name_readers:
                return
            die("sys._getframe from %s" % caller.co_name)
        if event == "object.__setattr__" or event == "object.__delattr__":
            target, name = args[0], args[1]
            if type_(name) is not str_:
                die("%s of a name that is no str" % event)
            if id_(target) in pre:
                die("%s of %s on an object that existed before the package was imported" % (event, name))
            if name == "__code__" or name == "__class__":
                die("%s of %s" % (event, name))
            if issubclass_(type_(target), type_) and issubclass_(target, TestCase) and not name.startswith("_class"):
                die("%s of a test class's %s" % (event, name))
            return
        if event == "open":
            if len_(args) != 3:
                die("open with %d arguments" % len_(args))
            path, mode, flags = args
            where = real(path)
            write_ = (type_(flags) is int_ and flags & W) or (type_(mode) is str_ and (
                "w" in mode or "a" in mode or "x" in mode or "+" in mode))
            if not (writable(where) if write_ else readable(where)) or (where is not None and under(where, tests_dir)
                                                                        and type_(path) is int_):
                die("open %s%s" % ("for writing " if write_ else "", where or "(not a plain path)"))
            return
        spots = writes.get(event) if type_(event) is str_ else None
        if spots is not None:
            for at in spots[1]:
                if at < len_(args) and args[at] is not None:
                    die("%s relative to a directory descriptor" % event)
            for at in spots[0]:
                if at < len_(args) and not writable(real(args[at])):
                    die("%s %s" % (event, real(args[at]) or "(not a plain path)"))
            return
        if event.startswith(blocked):
            die(event)

    def verify_class(cls):
        """A class of the test's hierarchy is the original one: defined by a test module's original source, each of
        its functions that source's own code, nothing bound that the source's class body does not bind."""
        if type_(cls) is not type_:
            die("a test class with a metaclass")
        mod = vars_(cls).get("__module__")
        found = codes.get(mod) if type_(mod) is str_ else None
        names = bodies.get((mod, cls.__qualname__)) if found is not None else None
        if names is None:
            die("%s is not a class of the original tests" % cls.__qualname__)
        for key, value in list_(vars_(cls).items()):
            if type_(key) is not str_:
                die("a strange name in %s" % cls.__qualname__)
            if key in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "_classSetupFailed",
                       "_class_cleanups", "__annotations__", "__unittest_skip__", "__unittest_skip_why__"):
                continue
            if key not in names:
                die("%s.%s is not in the original tests" % (cls.__qualname__, key))
            if type_(value) is staticmethod_ or type_(value) is classmethod_:
                value = value.__func__
            if type_(value) is FunctionType:
                expected = found.get(cls.__qualname__ + "." + key)
                if expected is None or value.__code__ != expected:
                    die("%s.%s is not the original code" % (cls.__qualname__, key))

    watched = [m for m in list_(modules.values()) if type_(m) is ModuleType]
    classes = [TestCase, TestResult, TestSuite, Result]
    strict, n_classes = mods + [builtins], len_(classes)
    spaces, builtin_names = [], frozenset(k for k in vars_(builtins) if type_(k) is str_)
    for m in watched:
        watch(vars_(m), m in strict)
    for c in classes:
        watch(vars_(c), True)
    keep = gc.get_objects()
    for c in keep:  # Python 3.11 raises no audit event when a class attribute is assigned: every class is watched
        if isinstance_(c, type_) and c not in classes:
            watch(vars_(c), None)
    modules_before, run = [(k, m) for k, m in modules.items() if type_(k) is str_], TestCase.run
    keep += watched + spaces  # held: no id below is ever reused
    pre = frozenset(id_(o) for o in keep)
    sys.addaudithook(hook)
    armed[0] = True
    try:
        suite = loader.loadTestsFromName(module)
    except BaseException as err:  # noqa
        die("import failed: %s" % type_(err).__name__)
    if loader.errors or not same():
        die("the module did not load cleanly, or a namespace changed")
    tests, todo = [], [suite]
    while todo:
        item = todo.pop(0)
        if type_(item) is TestSuite:
            todo[:0] = list_(item._tests)
        elif issubclass_(type_(item), TestCase):
            tests.append(item)
        else:
            die("not a test: %s" % type_(item).__name__)
    checking[0] = True
    seen = []
    for test in tests:
        cls = type_(test)
        if type_(cls) is not type_:
            die("a test class with a metaclass")
        if id_(cls) in seen:
            continue
        seen.append(id_(cls))
        mro = cls.__mro__
        for c in mro:
            if type_(c) is not type_:
                die("a test class with a metaclass")
        if mro[-1] is not object_ or TestCase not in mro:
            die("%s does not derive from unittest.TestCase" % cls.__qualname__)
        for c in mro:
            if c is not TestCase and c is not object_ and c not in classes:
                verify_class(c)
                classes.append(c)
    checking[0] = False
    str_keys(modules)
    test_module = modules.get(module)
    if type_(test_module) is not ModuleType:
        die("the test module is not a module")
    str_keys(vars_(test_module))
    for local, value in bindings:  # what the tests imported from the standard library is what they got
        if vars_(test_module).get(local) is not value:
            die("the test module's %s is not what it imported" % local)
    for m in list_(modules.values()):
        if type_(m) is ModuleType and type_(m.__name__) is str_ and m not in watched and (
                m.__name__ == "tests" or m.__name__.startswith("tests.")):
            watch(vars_(m), True)
    for c in classes[n_classes:]:
        watch(vars_(c), True)
    result = Result()
    for test in tests:  # one at a time through the captured runner, every namespace checked after each
        try:
            run(test, result)
        except BaseException as err:  # noqa
            die("the run raised %s" % type_(err).__name__)
        if not same():
            die("a namespace changed while %s ran" % test.id())
    failed = set(result.failed)
    lines = []
    for test_id in result.passed:
        lines.append("%s %s %s\n" % (nonce, test_id, "FAIL" if test_id in failed else "PASS"))
    for test_id in sorted(failed):
        lines.append("%s %s FAIL\n" % (nonce, test_id))
    write(report, "".join(lines).encode())
    exit_(0)

import builtins as _b, types as _t
_t.FunctionType(_main.__code__, {"__builtins__": dict(vars(_b)), "__name__": "__grader__"})()
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


def harness_spec(repo: SweRepo) -> dict:
    """What the harness checks the loaded tests against, read from the original test sources here: every Python file
    of the tests folder ({module: [path, source]}, compiled there), the names each class body binds, and each test
    module's top-level imports (those of the standard library are imported before the package, and checked after)."""
    sources, bodies, imports = {}, [], {}
    for path, text in sorted(repo.test_files.items()):
        if not path.endswith(".py"):
            continue
        module = path[:-3].replace("/", ".").removesuffix(".__init__")
        sources[module] = [path, text]
        tree = ast.parse(text)
        todo = [(tree, "")]
        while todo:
            node, prefix = todo.pop()
            for child in node.body:
                if isinstance(child, ast.ClassDef):
                    names = set()
                    for item in child.body:
                        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                            names.add(item.name)
                        targets = item.targets if isinstance(item, ast.Assign) else [getattr(item, "target", None)]
                        names |= {t.id for t in targets if isinstance(t, ast.Name)}
                    bodies.append([module, prefix + child.name, sorted(names)])
                    todo.append((child, prefix + child.name + "."))
        found = imports.setdefault(module, [])
        for node in tree.body:
            if isinstance(node, ast.Import):
                found += [[a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0], None]
                          for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                found += [[a.asname or a.name, node.module, a.name] for a in node.names if a.name != "*"]
    return {"tests_dir": TESTS_DIR.rstrip("/"), "sources": sources, "bodies": bodies, "imports": imports}


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
    spec_of_tests = harness_spec(repo)
    with Sandbox(sandbox) as sb:
        try:
            sb.put_files({**sources, **repo.test_files})
        except OSError as err:  # a path of the agent's clashes with the repo's (a file where a folder must be, ...)
            return Verdict(False, f"the agent's files cannot be laid out with the tests: {err}")
        sb.seal(TESTS_DIR.rstrip("/"))
        for module, ids in expected.items():
            nonce = secrets.token_hex(16)
            spec = json.dumps({**spec_of_tests, "module": module, "imports": spec_of_tests["imports"].get(module, [])})
            argv = ["python3", "-I", "-B", "-c", HARNESS, module]
            rc, out, timed_out = sb.run(argv, timeout=timeout_s, input=f"{nonce}\n{spec}\n".encode())
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
