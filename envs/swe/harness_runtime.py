"""The grading harness's runtime: the code that runs after the package under test is imported (see ``grader.py``).

This file is never imported to grade. The host freezes its source once (``harness_boot.prefreeze``): every global
name below (an imported module or function, a builtin, a constant, another function of this file) becomes a slot of
a tuple that the compiled code holds as a constant, attribute chains on modules included (``os.write`` is the
function itself), so the running code looks nothing up in a dict that other code can reach; the sandbox compiles it
and fills the slots (``harness_boot.load_runtime``). A function's code and constants can only be read through
``__code__``, which the audit hook never allows for code of this file; the functions' globals are an empty dict. The
module-level values below are placeholders for a host-side import; the boot passes the real ones (containers it
fills later).

Rules for this file (what freezing needs): no classes, no nested functions or lambdas, no ``global``; attribute access
only on objects of C types that cannot be patched (dicts, lists, str, types, functions, code, SimpleNamespace) or on
what the tests and the package own; membership of a type in a tuple of types by identity (``holds``), never ``in``
(a metaclass's ``__eq__`` would decide it); never a comparison, hash, ``str()`` or ``bool()`` of an object the
package may have made while a flag of STATE is set, and every flag set in a ``try`` that clears it in ``finally``.
"""

import _thread
import gc
import os
import signal
import sys
import types
from itertools import chain, repeat
from operator import is_, methodcaller

# -- placeholders: the boot provides every one of these --------------------------------------------------------------
NONCE = ""
REPORT = -1
CWD = ""
TESTS_DIR = ""
STATE: list = []  # [armed, inside the hook, checking code, failed, skipped, current test id, loading]
SPACES: list = []  # watched namespaces: [mapping, mode, keys, values, lazy indices]
MODULES_BEFORE: list = []  # [(name, module)] loaded before the package
MODULES: dict = {}  # sys.modules
FAST: list = []  # [the watched mappings, their keys, their values, module names, the modules]: see rebase()
PRE: frozenset = frozenset()  # ids of every object that existed before the package was imported
PROTECTED: frozenset = frozenset()  # file names of the harness's code: never read, never changed
TESTS_CODE: frozenset = frozenset()  # file names of the tests' code: never changed
NAME_READERS: frozenset = frozenset()  # standard-library code that reads its caller's module name through a frame
BUILTIN_NAMES: frozenset = frozenset()
TESTCASE = object
SKIPTEST = Exception
API: dict = {}  # TestCase method name -> the function of this file that implements it
TESTCASE_DATA: dict = {}  # TestCase's data attributes (maxDiff, longMessage, failureException, ...)
TESTCASE_NAMES: frozenset = frozenset()
# id(class of the tests) -> [class, {name: (kind, value)}, __dict__ descriptor, is a TestCase, its classes' dicts]
TABLES: dict = {}
BY_NAME: dict = {}  # top-level class name -> class
SNAP: dict = {}  # the test module's names as its own statements bound them
MODULE_CODE: list = []  # [the test module's frozen code]: the one caller of record()
RAISES: dict = {}  # id(cm) -> [cm, expected, regex, caught]
CLEANUPS: list = []
SIGNALS: tuple = ()  # every signal number
HANDLERS: list = []  # their Python-level handlers at boot (none of Python code)
PREFIXES: tuple = ()  # where Python's own extension modules live (the real paths of its prefixes)
RE_COMPILE = None  # the regex compiler without re's cache (which other code can fill)
PATTERN = None  # re.Pattern
TYPE_NAME = None  # type.__dict__["__name__"]: a class's name without running its metaclass
TYPE_MRO = None  # type.__dict__["__mro__"]
TYPE_DICT = None  # type.__dict__["__dict__"]
MISSING = None  # a private sentinel

ARMED, INSIDE, CHECKING, FAILED, SKIPPED, CURRENT, LOADING = 0, 1, 2, 3, 4, 5, 6
FUNC, STATIC, CLASSM, PROP, DATA = 0, 1, 2, 3, 4
PLAIN = (int, str, float, bool, type(None), list, dict, tuple, set, frozenset, bytes, complex)
W = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
WR = "__warningregistry__"
VALUES = methodcaller("values")
CODE_ATTRS = ("__code__", "gi_code", "cr_code", "ag_code")
# modules with unaudited C entry points into the interpreter's memory, or interpreters without this one's audit hook
NATIVE_BLOCKED = ("_test", "_xx", "_interpreters", "_interpchannels", "_interpqueues")
CODE_OWNERS = (types.FunctionType, types.GeneratorType, types.CoroutineType, types.AsyncGeneratorType)
BLOCKED = ("sys._current_frames", "sys.settrace", "sys.setprofile", "sys.monitoring", "gc.", "ctypes.", "os.fork",
           "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.", "pty.", "os.kill",
           "os.killpg", "signal.", "sys.addaudithook", "cpython.", "_thread.", "os.chdir", "os.fchdir", "os.symlink",
           "os.link", "os.mkfifo", "os.mknod", "os.startfile", "mmap.", "code.__new__", "sys.remote_exec")
# event -> (positions of the paths it writes, positions of directory descriptors they may be relative to)
WRITES = {"os.remove": ((0,), (1,)), "os.rmdir": ((0,), (1,)), "os.mkdir": ((0,), (2,)),
          "os.rename": ((0, 1), (2, 3)), "os.chmod": ((0,), (2,)), "os.chown": ((0,), (3,)),
          "os.utime": ((0,), (3,)), "os.truncate": ((0,), ()), "os.chflags": ((0,), ()),
          "os.lchflags": ((0,), ()), "os.lchmod": ((0,), ()), "os.setxattr": ((0,), ()),
          "os.removexattr": ((0,), ()), "shutil.rmtree": ((0,), (1,)), "shutil.move": ((0, 1), ()),
          "shutil.copyfile": ((1,), ()), "shutil.copymode": ((1,), ()), "shutil.copystat": ((1,), ()),
          "shutil.copytree": ((1,), ()), "shutil.unpack_archive": ((1,), ()), "shutil.make_archive": ((0,), ())}


# -- reporting --------------------------------------------------------------------------------------------------------

def text(x):
    """x when it is an exact str (safe to format), else a stand-in: no __str__ of the package runs here."""
    return x if type(x) is str else "?"


def write_all(data):
    while data:
        n = os.write(REPORT, data)
        data = data[n:]


def die(why):
    """Report that grading caught tampering and end the process at once (no cleanup, no atexit handler)."""
    try:
        write_all(("%s VIOLATION %s\n" % (NONCE, text(why))).encode())
    finally:
        os._exit(86)


# -- the audit hook ---------------------------------------------------------------------------------------------------

def real(p):
    """The real path that p names (symlinks followed, relative to the cwd), or None when p is no plain path."""
    if type(p) is bytes:
        try:
            p = p.decode("utf-8", "strict")  # no error handler: the package can register its own under any name
        except UnicodeDecodeError:
            return None
    if type(p) is int and p >= 0:  # a descriptor: what it is open on
        try:
            p = os.readlink("/proc/self/fd/%d" % p)
        except OSError:
            return None
    if type(p) is not str:
        return None
    if not p.startswith("/"):
        p = os.getcwd() + "/" + p
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
            link = (os.lstat(here).st_mode & 0o170000) == 0o120000
        except (OSError, ValueError):
            link = False
        if not link:
            done.append(part)
            continue
        hops += 1
        if hops > 40:
            return None
        target = os.readlink(here)
        if target.startswith("/"):
            done = []
        todo.extend(target.split("/")[::-1])
    return "/" + "/".join(done)


def under(path, top):
    return path == top or path.startswith(top + "/")


def readable(path):
    return path is not None and (under(path, CWD) or under(path, "/usr") or under(path, "/etc") or
                                 under(path, "/tmp") or path in ("/dev/null", "/dev/zero", "/dev/urandom"))


def writable(path):
    return path is not None and not under(path, TESTS_DIR) and (
        under(path, CWD) or under(path, "/tmp") or path == "/dev/null")


def protected_function(obj):
    """Whether obj is a function of the harness or of the tests (the hook's caller guarantees nothing re-enters)."""
    if type(obj) is not types.FunctionType:
        return False
    name = obj.__code__.co_filename
    if type(name) is not str:  # a str subclass would run its __hash__ here, with the hook switched off
        return True
    return name in PROTECTED or name in TESTS_CODE


def hook(event, args):
    if not STATE[ARMED] or STATE[INSIDE]:
        return
    if type(event) is not str or type(args) is not tuple:
        die("an audit event that is no str")
    if event == "builtins.id":
        return
    if event == "import":
        module, filename = args[0], args[1] if len(args) > 1 else None
        if type(module) is not str or module.startswith(NATIVE_BLOCKED):
            die("import of %s" % text(module))
        if filename is not None and not (type(filename) is str and (
                filename.endswith(".py") or filename.endswith(".pyc"))):
            where = real(filename)  # an extension module: only Python's own, never one from the work dir or /tmp
            if where is None or under(where, CWD) or not any([under(where, top) for top in PREFIXES]):
                die("import of the extension module %s" % (where or text(filename)))
        return
    if event == "object.__getattr__":
        name = args[1] if len(args) > 1 else None
        if type(name) is not str:
            die("object.__getattr__ of a name that is no str")
        if name in CODE_ATTRS:
            obj = args[0]
            if STATE[CHECKING]:
                return
            if not holds(CODE_OWNERS, type(obj)):  # by identity: a metaclass's __eq__ must not decide it
                die("%s of an object that owns no code" % name)
            STATE[INSIDE] = True  # a C getter of a C type: no other code runs while the hook reads it
            try:
                code = getattr(obj, name)
            finally:
                STATE[INSIDE] = False  # whatever happens (a RecursionError): the hook never stays switched off
            if type(code.co_filename) is not str or code.co_filename in PROTECTED:
                die("%s of the harness's code" % name)
            return  # the package's, the standard library's or the tests' code (constants all read-only): inspect
        if name == "__defaults__":
            return  # a tuple
        if name == "__kwdefaults__" and type(args[0]) is types.FunctionType:
            STATE[INSIDE] = True
            try:
                defaults = args[0].__kwdefaults__
                mine = protected_function(args[0])
            finally:
                STATE[INSIDE] = False
            if defaults is None or not mine:
                return
            die("__kwdefaults__ (a dict) of a function of the tests")
        die("object.__getattr__ of %s" % name)
    if event == "sys._getframe":
        STATE[INSIDE] = True
        try:
            caller = sys._getframe(1).f_code
        finally:
            STATE[INSIDE] = False
        if caller in NAME_READERS:
            return
        die("sys._getframe from %s" % text(caller.co_name))
    if event == "object.__setattr__" or event == "object.__delattr__":
        target, name = args[0], args[1]
        if type(name) is not str:
            die("%s of a name that is no str" % event)
        if id(target) in PRE:
            die("%s of %s on an object that existed before the package was imported" % (event, name))
        if name == "__code__" or name == "__class__":
            die("%s of %s" % (event, name))
        STATE[INSIDE] = True
        try:
            mine = protected_function(target)
        finally:
            STATE[INSIDE] = False
        if mine:
            die("%s of %s on a function of the tests" % (event, name))
        return
    if event == "open":
        if len(args) != 3:
            die("open with %d arguments" % len(args))
        path, mode, flags = args
        where = real(path)
        write_ = (type(flags) is int and flags & W) or (type(mode) is str and (
            "w" in mode or "a" in mode or "x" in mode or "+" in mode))
        if not (writable(where) if write_ else readable(where)) or (
                where is not None and under(where, TESTS_DIR) and type(path) is int):
            die("open %s%s" % ("for writing " if write_ else "", where or "(not a plain path)"))
        return
    spots = WRITES.get(event)
    if spots is not None:
        for at in spots[1]:
            if at < len(args) and args[at] is not None:
                die("%s relative to a directory descriptor" % event)
        for at in spots[0]:
            if at < len(args):
                where = real(args[at])
                if not writable(where):
                    die("%s %s" % (event, where or "(not a plain path)"))
        return
    if event.startswith(BLOCKED):
        die(event)


# -- integrity --------------------------------------------------------------------------------------------------------

def str_keys(d, where):
    """So that looking a name up in d compares str with str and never runs an __eq__ of the package."""
    for k in list(d):
        if type(k) is not str:
            die("a namespace holds a name that is no str (%s)" % where)


def identical(a, b):
    return len(a) == len(b) and all(map(is_, a, b))


def holds(items, x):
    """Whether x is one of items, by identity (``in`` would run an __eq__, a metaclass's one included)."""
    for item in items:
        if item is x:
            return True
    return False


def space_changed(entry):
    """Whether a watched namespace differs from its reference. Modes: "strict" (unittest's modules, builtins): the
    same names bound to the same objects, a warnings registry aside; "module" (any other module loaded before the
    package): every name it had, in order, bound to the same object unless that was None (a lazily built cache) or is
    sys's stdout/stderr/stdin, and no new name that shadows a builtin; "class" (any class that existed then): the same,
    with no new name at all; "tests" (a class of the tests): every function and descriptor it had when it was loaded,
    the same object (its data may change)."""
    d, mode, keys, values, lazy = entry
    now_keys, now_values = list(d), list(d.values())
    if identical(now_keys, keys) and identical(now_values, values):
        return False
    if mode == "strict":
        a = [i for i in range(len(now_keys)) if now_keys[i] is not WR]
        b = [i for i in range(len(keys)) if keys[i] is not WR]
        return not (identical([now_keys[i] for i in a], [keys[i] for i in b]) and
                    identical([now_values[i] for i in a], [values[i] for i in b]))
    if mode == "tests":
        str_keys(d, "a class of the tests")
        for i in range(len(keys)):
            if d.get(keys[i], MISSING) is not values[i]:
                return True
        return False
    n = len(keys)
    if not identical(now_keys[:n], keys):
        return True
    for i in range(n):
        if now_values[i] is not values[i] and i not in lazy:
            return True
    for k in now_keys[n:]:
        if mode == "class" or type(k) is not str or (k in BUILTIN_NAMES and k is not WR):
            return True
    return False


def rebase():
    """The flat reference the quick path of check() compares with: every watched mapping's keys and values, and the
    modules loaded before the package, as they are now (only ever after the rules of space_changed allowed it)."""
    mappings = [entry[0] for entry in SPACES]
    names = [name for name, module in MODULES_BEFORE]
    FAST[:] = [mappings, list(chain.from_iterable(mappings)), list(chain.from_iterable(map(VALUES, mappings))),
               names, [module for name, module in MODULES_BEFORE]]


def check(where):
    """Die when anything watched changed: run before every call the tests make, before every assertion, around every
    test. No code of the package runs while it checks (identity only, lists built in C, the collector off).

    Signal handlers first, read in one pass of C (``list(map(...))`` runs no bytecode, so no handler runs while they
    are read): when none is Python code at that instant, none can run until code of the package runs again, which
    nothing here calls. Python 3.11 raises no audit event for ``signal.signal`` or ``setitimer``. Then the quick path:
    every watched key and value, flattened in C, the same objects as the reference; only when they are not, the rules
    of space_changed decide (a lazily built cache may be filled, a module may gain a name)."""
    if not identical(list(map(signal.getsignal, SIGNALS)), HANDLERS):
        die("a signal handler was installed (%s)" % where)
    if gc.isenabled():
        die("the garbage collector was switched on (%s)" % where)
    if _thread._count():
        die("a thread was started (%s)" % where)
    if not all(map(is_, map(type, MODULES), repeat(str))):
        die("sys.modules holds a name that is no str (%s)" % where)
    mappings, keys, values, names, modules = FAST
    if not identical(list(map(MODULES.get, names)), modules):
        die("a module loaded before the package was replaced in sys.modules (%s)" % where)
    if (identical(list(chain.from_iterable(mappings)), keys)
            and identical(list(chain.from_iterable(map(VALUES, mappings))), values)):
        return
    for entry in SPACES:
        if space_changed(entry):
            die("a namespace changed %s" % where)
    rebase()


# -- what the rewritten tests call ------------------------------------------------------------------------------------

def packaged(f):
    """Whether f is a function of the package (its code compiled from a file of the work dir outside the tests): a
    call straight into the package needs no check first; only its code runs until the next check, and whatever of
    the tests' code it calls back checks its own calls."""
    if type(f) is types.MethodType:
        f = f.__func__
    if type(f) is not types.FunctionType:
        return False
    STATE[INSIDE] = True  # a C getter of a C type, then a str's attribute: nothing else runs meanwhile
    try:
        name = f.__code__.co_filename
    finally:
        STATE[INSIDE] = False
    return type(name) is str and name.startswith(CWD + "/") and not name.startswith(TESTS_DIR + "/")


def call(f, /, *args, **kwargs):
    """Every call in the tests' code: check (unless it goes straight into the package), then call."""
    if not packaged(f):
        check("before a call of the tests")
    return f(*args, **kwargs)


def record(names, g):
    """After each top-level statement of a test module: the names it bound, as it bound them."""
    if not STATE[LOADING]:
        die("the harness's record called after the test module was loaded")
    STATE[INSIDE] = True
    try:
        caller = sys._getframe(1).f_code
    finally:
        STATE[INSIDE] = False
    if caller is not MODULE_CODE[0]:  # the package, while the module loads (a class defined before the import)
        die("the harness's record called by other code than the test module's")
    for name in names:
        if name in g:
            SNAP[name] = g[name]
        else:
            SNAP.pop(name, None)


def module_name(name):
    """A name of the test module, read from a function of the tests: as the module's own statements bound it."""
    value = SNAP.get(name, MISSING)
    if value is MISSING:
        raise NameError("name %r is not defined" % name)
    return value


def api_get(obj, name):
    """``x.assertEqual`` and the rest of TestCase's API, for a test case: the harness's own implementation."""
    if isinstance(obj, TESTCASE):
        return API[name]
    return getattr(obj, name)


def bind(obj, cls, entry):
    kind, value = entry
    if kind == FUNC:
        return types.MethodType(value, obj)
    if kind == CLASSM:
        return types.MethodType(value, cls)
    if kind == PROP:
        return value(obj)
    return value  # STATIC, DATA


def instance_dict(obj, descr):
    d = descr.__get__(obj)
    if type(d) is not dict:
        raise TypeError("grading: the instance's __dict__ is no dict")
    return d


def descriptor(t):
    """Whether instances of class t are descriptors (t or a base defines __get__), read without t's metaclass."""
    for c in TYPE_MRO.__get__(t):
        if "__get__" in TYPE_DICT.__get__(c):
            return True
    return False


def get(obj, name):
    """``self.name`` in the tests' classes: the instance's own dict, else the class as it was loaded (its functions
    checked against the original code), else, for a test case, TestCase's data and the harness's API."""
    cls = type(obj)
    entry = TABLES.get(id(cls))
    if entry is None or entry[0] is not cls:
        return getattr(obj, name)
    table, descr, is_case = entry[1], entry[2], entry[3]
    found = table.get(name, MISSING)
    if found is not MISSING and found[0] == PROP:
        return bind(obj, cls, found)
    if descr is not None:
        d = instance_dict(obj, descr)
        if name in d:
            return d[name]
    if found is not MISSING and found[0] != DATA:
        return bind(obj, cls, found)
    for proxy in entry[4]:  # class data as the classes hold it now (setUpClass may set it)
        if name in proxy:
            value = proxy[name]
            if holds(PLAIN, type(value)) or not descriptor(type(value)):
                return value
            if found is not MISSING and found[1] is value:  # a descriptor of the tests' own
                return getattr(obj, name)
            die("a descriptor appeared on a class of the tests: %s" % name)
    if name.startswith("__") and name.endswith("__"):
        return getattr(obj, name)  # self.__class__, self.__dict__: Python's own
    if is_case:
        if name in TESTCASE_DATA:
            return TESTCASE_DATA[name]
        if name in API:
            return API[name]
        if name in TESTCASE_NAMES:
            raise AttributeError("grading does not support self.%s in the tests" % name)
    return getattr(obj, name)


def dict_of(obj, name, mode):
    """The mapping that ``self.name = ...`` (mode "set"), ``self.name += ...`` ("aug") or ``del self.name`` ("del")
    writes: the instance's own dict, reached through the descriptor captured when the class was loaded."""
    cls = type(obj)
    entry = TABLES.get(id(cls))
    if entry is None or entry[0] is not cls or entry[2] is None:
        d = vars(obj)
        if mode == "aug" and name not in d:
            d[name] = getattr(obj, name)
        return d
    found = entry[1].get(name, MISSING)
    if found is not MISSING and found[0] == PROP:
        raise AttributeError("grading does not support assigning self.%s through a property" % name)
    d = instance_dict(obj, entry[2])
    if mode == "aug" and name not in d:
        d[name] = get(obj, name)
    return d


def super_of(name, obj):
    """Zero-argument ``super()`` in a method of the test class ``name``."""
    return super(BY_NAME[name], obj)


# -- values that lie ---------------------------------------------------------------------------------------------------

SCALARS = (int, float, str, bytes, bool, type(None), complex)
CONTAINERS = (list, tuple, set, frozenset)
INF = float("inf")


def plain(x, depth):
    """Whether x is made only of exact builtin scalars and containers (small ones): comparing it runs C code of
    immutable types only, which nothing can patch, so an assertion on such values needs no check first."""
    t = type(x)
    if holds(SCALARS, t):
        return True
    if depth > 5 or (holds(CONTAINERS, t) or t is dict) and len(x) > 200:
        return False
    if holds(CONTAINERS, t):
        for v in x:
            if not plain(v, depth + 1):
                return False
        return True
    if t is dict:
        for k in x:
            if not plain(k, depth + 1) or not plain(x[k], depth + 1):
                return False
        return True
    return False


def check_for(a, b):
    """The check before an assertion that compares a with b, unless both are plain."""
    if not (plain(a, 0) and plain(b, 0)):
        check("before an assertion")


def made_later(x, depth):
    """Whether x holds an object of a class that did not exist before the package was imported and that the tests did
    not define (a class of the package, then): its comparisons are the package's code."""
    t = type(x)
    if holds(SCALARS, t):
        return False
    if depth > 20:
        return True
    if holds(CONTAINERS, t):
        for v in x:
            if made_later(v, depth + 1):
                return True
        return False
    if t is dict:
        for k in x:
            if made_later(k, depth + 1):
                return True
        for v in x.values():
            if made_later(v, depth + 1):
                return True
        return False
    return id(t) not in PRE and not holds(list(BY_NAME.values()), t)


def perturbed(x, depth):
    """A value that nothing honest equals if it equals x: every leaf changed, a fresh object for anything else."""
    t = type(x)
    if t is bool:
        return not x
    if t is int or t is complex:
        return x + 1
    if t is float:
        return x + 1.0 if -INF < x < INF else 0.5
    if t is str:
        return x + "\x00"
    if t is bytes:
        return x + b"\x00"
    if depth < 20:
        if t is list:
            return [perturbed(v, depth + 1) for v in x] if x else [object()]
        if t is tuple:
            return tuple([perturbed(v, depth + 1) for v in x]) if x else (object(),)
        if t is dict:
            return {k: perturbed(x[k], depth + 1) for k in x} if x else {object(): object()}
        if t is set or t is frozenset:  # every element changed, as many of them (a new one: a size that differs)
            changed = {perturbed(v, depth + 1) for v in x}
            if len(changed) != len(x) or not x:
                changed = set(x) | {object()}
            return changed if t is set else frozenset(changed)
    return object()


def lies(first, second):
    """Whether first == second only because a value of the package equals what it cannot: the other side altered.
    (A value that hard-codes the one right answer is not caught; one that equals everything is.)"""
    try:
        if made_later(first, 0) and (True if first == perturbed(second, 0) else False):
            return True
        if made_later(second, 0) and (True if perturbed(first, 0) == second else False):
            return True
    except BaseException:
        return False
    return False


def lied(first, second, msg):
    STATE[FAILED] = True
    failed(msg, "%s equals %s, and an altered %s too: a value of the package that equals anything" % (
        shown(first), shown(second), shown(second)))


# -- assertions: each checks first, decides with its own locals, records a failure before raising -------------------

def failed(msg, standard):
    STATE[FAILED] = True
    if msg is not None:
        try:
            standard = "%s : %s" % (standard, str(msg))
        except BaseException:
            pass
    raise AssertionError(standard)


def shown(x):
    """A short repr for a failure message (the failure is recorded already: whatever this runs cannot undo it)."""
    try:
        r = repr(x)
        if type(r) is not str:
            return "?"
    except BaseException:
        return "<unprintable>"
    return r if len(r) <= 120 else r[:117] + "..."


def truth(x):
    """bool(x), recording a failure when it raises."""
    ok = False
    try:
        ok = True if x else False
    finally:
        if not ok:
            STATE[FAILED] = True
    return ok


def assert_equal(first, second, msg=None):
    check_for(first, second)
    ok = False
    try:
        ok = True if first == second else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s != %s" % (shown(first), shown(second)))
    if lies(first, second):
        lied(first, second, msg)


def assert_not_equal(first, second, msg=None):
    check_for(first, second)
    ok = False
    try:
        ok = True if first != second else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s == %s" % (shown(first), shown(second)))
    for x in (first, second):
        if made_later(x, 0):
            try:
                differs = True if x != x else False
            except BaseException:
                differs = False
            if differs:
                STATE[FAILED] = True
                failed(msg, "%s differs from itself: a value of the package that differs from anything" % shown(x))


def assert_true(expr, msg=None):
    check_for(expr, None)
    if not truth(expr):
        failed(msg, "%s is not true" % shown(expr))


def assert_false(expr, msg=None):
    check_for(expr, None)
    ok = False
    try:
        ok = False if expr else True
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s is not false" % shown(expr))


def assert_is(first, second, msg=None):
    if first is not second:
        failed(msg, "%s is not %s" % (shown(first), shown(second)))


def assert_is_not(first, second, msg=None):
    if first is second:
        failed(msg, "unexpectedly identical: %s" % shown(first))


def assert_is_none(obj, msg=None):
    if obj is not None:
        failed(msg, "%s is not None" % shown(obj))


def assert_is_not_none(obj, msg=None):
    if obj is None:
        failed(msg, "unexpectedly None")


def assert_in(member, container, msg=None):
    check_for(member, container)
    ok = False
    try:
        ok = True if member in container else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s not found in %s" % (shown(member), shown(container)))
    if (made_later(member, 0) or made_later(container, 0)) and (
            lies_in(perturbed(member, 0), container) or lies_in(member, perturbed(container, 0))):
        STATE[FAILED] = True
        failed(msg, "%s is in %s, and so is what cannot be: a value of the package that holds or equals anything" % (
            shown(member), shown(container)))


def lies_in(member, container):
    try:
        return True if member in container else False
    except BaseException:
        return False


def assert_not_in(member, container, msg=None):
    check_for(member, container)
    ok = False
    try:
        ok = False if member in container else True
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s unexpectedly found in %s" % (shown(member), shown(container)))


def assert_is_instance(obj, cls, msg=None):
    check("before an assertion")
    ok = False
    try:
        ok = True if isinstance(obj, cls) else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s is not an instance of %s" % (shown(obj), shown(cls)))


def assert_not_is_instance(obj, cls, msg=None):
    check("before an assertion")
    ok = False
    try:
        ok = False if isinstance(obj, cls) else True
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s is an instance of %s" % (shown(obj), shown(cls)))


def compared(first, second, op):
    """first <op> second, as a bool (what raises, raises)."""
    if op == "<":
        return True if first < second else False
    if op == "<=":
        return True if first <= second else False
    if op == ">":
        return True if first > second else False
    return True if first >= second else False


def compare(first, second, op):
    """compared(), recording a failure when it is false or raises."""
    ok = False
    try:
        ok = compared(first, second, op)
    finally:
        if not ok:
            STATE[FAILED] = True
    return ok


def ordered(a, b, op, opposite, msg, words):
    """a op b, and, for a value of the package, not also its opposite (a value for which every comparison is true)."""
    check_for(a, b)
    if not compare(a, b, op):
        failed(msg, "%s not %s %s" % (shown(a), words, shown(b)))
    if made_later(a, 0) or made_later(b, 0):
        try:
            both = compared(a, b, opposite)
        except BaseException:
            both = False
        if both:
            STATE[FAILED] = True
            failed(msg, "%s is %s %s and also the opposite: a value of the package that compares as anything" % (
                shown(a), words, shown(b)))


def assert_less(a, b, msg=None):
    ordered(a, b, "<", ">=", msg, "less than")


def assert_less_equal(a, b, msg=None):
    ordered(a, b, "<=", ">", msg, "less than or equal to")


def assert_greater(a, b, msg=None):
    ordered(a, b, ">", "<=", msg, "greater than")


def assert_greater_equal(a, b, msg=None):
    ordered(a, b, ">=", "<", msg, "greater than or equal to")


def almost(first, second, places, delta):
    """unittest's rule: equal, or within delta, or round(difference, places or 7) == 0."""
    ok = False
    try:
        if first == second:
            ok = True
        else:
            if delta is not None and places is not None:
                raise TypeError("specify delta or places not both")
            diff = abs(first - second)
            if delta is not None:
                ok = True if diff <= delta else False
            else:
                ok = True if round(diff, 7 if places is None else places) == 0 else False
    except BaseException:
        STATE[FAILED] = True
        raise
    return ok


def assert_almost_equal(first, second, places=None, msg=None, delta=None):
    check_for(first, second)
    if not almost(first, second, places, delta):
        failed(msg, "%s != %s within %s" % (shown(first), shown(second), "delta" if delta is not None else "places"))
    if lies(first, second):
        lied(first, second, msg)


def assert_not_almost_equal(first, second, places=None, msg=None, delta=None):
    check_for(first, second)
    if almost(first, second, places, delta):
        failed(msg, "%s == %s within %s" % (shown(first), shown(second), "delta" if delta is not None else "places"))


def sequence_equal(seq1, seq2, msg, seq_type):
    check_for(seq1, seq2)
    ok = False
    try:
        if seq_type is not None and not (isinstance(seq1, seq_type) and isinstance(seq2, seq_type)):
            ok = False
        else:
            len(seq1)
            len(seq2)
            ok = True if seq1 == seq2 else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "sequences differ: %s != %s" % (shown(seq1), shown(seq2)))
    if lies(seq1, seq2):
        lied(seq1, seq2, msg)


def assert_sequence_equal(seq1, seq2, msg=None, seq_type=None):
    sequence_equal(seq1, seq2, msg, seq_type)


def assert_list_equal(list1, list2, msg=None):
    sequence_equal(list1, list2, msg, list)


def assert_tuple_equal(tuple1, tuple2, msg=None):
    sequence_equal(tuple1, tuple2, msg, tuple)


def assert_set_equal(set1, set2, msg=None):
    check_for(set1, set2)
    ok = False
    try:
        ok = False if (set1.difference(set2) or set2.difference(set1)) else True
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "sets differ: %s != %s" % (shown(set1), shown(set2)))


def typed_unequal(first, second, msg, kind):
    check_for(first, second)
    ok = False
    try:
        ok = isinstance(first, kind) and isinstance(second, kind) and (False if first != second else True)
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "%s != %s" % (shown(first), shown(second)))
    if lies(first, second):
        lied(first, second, msg)


def assert_dict_equal(d1, d2, msg=None):
    typed_unequal(d1, d2, msg, dict)


def assert_multi_line_equal(first, second, msg=None):
    typed_unequal(first, second, msg, str)


def assert_count_equal(first, second, msg=None):
    """The same elements the same number of times, by ==, whatever the order."""
    check_for(first, second)
    ok = False
    a, b = [], []
    try:
        a, b = list(first), list(second)
        left = list(b)
        ok = len(a) == len(left)
        for x in a:
            if not ok:
                break
            for i in range(len(left)):
                if left[i] == x:
                    del left[i]
                    break
            else:
                ok = False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "element counts differ: %s, %s" % (shown(a), shown(b)))
    if made_later(a, 0) or made_later(b, 0):
        pa, pb = perturbed(a, 0), perturbed(b, 0)
        for x in a:
            if made_later(x, 0) and lies_in(x, pb):
                lied(a, b, msg)
        for y in b:
            if made_later(y, 0) and lies_in(y, pa):
                lied(a, b, msg)


def compiled(regex):
    if type(regex) is str or type(regex) is bytes:
        return RE_COMPILE(regex, 0)
    if type(regex) is PATTERN:
        return regex
    raise TypeError("grading: a regex must be a str, bytes or re.Pattern")


def assert_regex(text_, expected_regex, msg=None):
    check("before an assertion")
    ok = False
    try:
        ok = True if compiled(expected_regex).search(text_) else False
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "regex didn't match: %s" % shown(text_))


def assert_not_regex(text_, unexpected_regex, msg=None):
    check("before an assertion")
    ok = False
    try:
        ok = False if compiled(unexpected_regex).search(text_) else True
    finally:
        if not ok:
            STATE[FAILED] = True
    if not ok:
        failed(msg, "regex matched: %s" % shown(text_))


def name_of(expected):
    if type(expected) is tuple:
        return ", ".join([name_of(e) for e in expected])
    try:
        return TYPE_NAME.__get__(expected)
    except BaseException:
        return "?"


def matches(e, expected, regex):
    """Whether the exception the tests expected was raised (a failure is recorded when the check itself raises)."""
    ok = False
    try:
        ok = True if isinstance(e, expected) else False
        if ok and regex is not None:
            ok = True if compiled(regex).search(str(e)) else False
    except BaseException:
        STATE[FAILED] = True
        raise
    return ok


def raises_call(expected, regex, args, kwargs):
    if not args:
        STATE[FAILED] = True
        raise TypeError("grading supports assertRaises as `with self.assertRaises(...)` or with a callable")
    check("before an assertion")
    try:
        args[0](*args[1:], **kwargs)
    except BaseException as e:
        if matches(e, expected, regex):
            return None
        raise
    failed(None, "%s not raised" % name_of(expected))


def assert_raises(expected, *args, **kwargs):
    kwargs.pop("msg", None)
    return raises_call(expected, None, args, kwargs)


def assert_raises_regex(expected, expected_regex, *args, **kwargs):
    kwargs.pop("msg", None)
    return raises_call(expected, expected_regex, args, kwargs)


def raises_open(obj, with_regex, expected, *rest, msg=None):
    """``with x.assertRaises(E) [as cm]:`` rewritten as try/except/finally around its body: here it starts."""
    check("before an assertion")
    if not isinstance(obj, TESTCASE):
        STATE[FAILED] = True
        raise TypeError("grading supports assertRaises only on a test case")
    if with_regex and len(rest) != 1 or not with_regex and rest:
        STATE[FAILED] = True
        raise TypeError("grading: unexpected arguments to assertRaises in a with statement")
    cm = types.SimpleNamespace(expected=expected, exception=None, msg=msg)
    RAISES[id(cm)] = [cm, expected, rest[0] if with_regex else None, False]
    return cm


def raises_entry(cm):
    entry = RAISES.get(id(cm))
    if entry is None or entry[0] is not cm:
        STATE[FAILED] = True
        raise TypeError("grading: an assertRaises context that this test did not open")
    return entry


def raises_caught(cm, e):
    """The body raised e: swallowed when it is what the test expects, else raised again."""
    entry = raises_entry(cm)
    if matches(e, entry[1], entry[2]):
        entry[3] = True
        cm.exception = e
        return None
    raise e


def raises_close(cm):
    entry = raises_entry(cm)
    if not entry[3]:
        failed(None, "%s not raised" % name_of(entry[1]))


def subtest(obj, *args, **kwargs):
    """``with self.subTest(...):`` runs its body inline (a failing subtest fails the test, as in unittest)."""
    check("before a subtest")
    if not isinstance(obj, TESTCASE):
        raise TypeError("grading supports subTest only on a test case")


def subtest_api(*args, **kwargs):
    STATE[FAILED] = True
    raise TypeError("grading supports subTest only as `with self.subTest(...):`")


def fail(msg=None):
    failed(msg, "fail() called")


def skip_test(reason):
    STATE[SKIPPED] = True
    raise SKIPTEST(reason)


def add_cleanup(function, /, *args, **kwargs):
    CLEANUPS.append((function, args, kwargs))


def enter_context(cm):
    cls = type(cm)
    enter, exit_ = cls.__enter__, cls.__exit__
    result = enter(cm)
    CLEANUPS.append((exit_, (cm, None, None, None), {}))
    return result


def test_id():
    return STATE[CURRENT]


def short_description():
    return None


def unsupported(*args, **kwargs):
    STATE[FAILED] = True
    raise TypeError("grading does not support this TestCase method (assertWarns, assertLogs, ...)")


# -- loading and running ----------------------------------------------------------------------------------------------

def classify(value):
    """A class attribute as the harness binds it: (kind, the function or value)."""
    kind = type(value)
    if kind is types.FunctionType:
        return (FUNC, value)
    if kind is staticmethod:
        return (STATIC, value.__func__)
    if kind is classmethod:
        return (CLASSM, value.__func__)
    if kind is property:
        return (PROP, value.fget)
    return (DATA, value)


def verify(name, cls, body, codes):
    """A top-level class of the test module, as its original source made it: a plain class, nothing bound that its
    body does not bind, each function of its body that body's code (identity: the harness compiled it)."""
    if type(cls) is not type:
        die("the tests' class %s is not a plain class" % name)
    proxy = vars(cls)
    str_keys(proxy, name)
    for key in list(proxy):
        value = proxy[key]
        if key in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__", "__annotations__",
                   "__orig_bases__", "__static_attributes__", "__firstlineno__", "_classSetupFailed",
                   "_class_cleanups", "__unittest_skip__", "__unittest_skip_why__"):
            continue
        if key not in body:
            die("%s.%s is not in the original tests" % (name, key))
        kind = type(value)
        fn = value
        if kind is staticmethod or kind is classmethod:
            fn = value.__func__
        elif kind is property:
            fn = value.fget
        if type(fn) is types.FunctionType and key in codes:
            STATE[CHECKING] = True
            try:
                same = fn.__code__ is codes[key]
            finally:
                STATE[CHECKING] = False
            if not same:
                die("%s.%s is not the original code" % (name, key))


def load(code, g, classes, dict_descr):
    """Run the test module's code (this imports the package), then check everything and build the class tables."""
    STATE[LOADING] = True
    try:
        exec(code, g)
    except BaseException as e:
        die("the test module did not load: %s" % name_of(type(e)))
    finally:
        STATE[LOADING] = False
    check("when the test module was loaded")
    for name, body, codes in classes:
        cls = SNAP.get(name, MISSING)
        if cls is MISSING:
            continue
        verify(name, cls, body, codes)
        BY_NAME[name] = cls
    for name in BY_NAME:
        cls = BY_NAME[name]
        mro = cls.__mro__
        is_case = holds(mro, TESTCASE)
        ours = True
        mine = list(BY_NAME.values())
        for c in mro:
            if c is not object and c is not TESTCASE and not holds(mine, c):
                ours = False
        if is_case and not ours:
            die("the test class %s derives from a class outside the tests" % name)
        if not ours:
            continue
        table = {}
        for c in mro[::-1]:
            if c is object or c is TESTCASE:
                continue
            proxy = vars(c)
            for key in list(proxy):
                if key not in ("__module__", "__qualname__", "__doc__", "__dict__", "__weakref__"):
                    table[key] = classify(proxy[key])
        descr = dict_descr if is_case else None
        if not is_case:
            for c in mro:
                if c is not object and "__dict__" in vars(c):
                    descr = vars(c)["__dict__"]
                    break
        if "__getattr__" in table or "__getattribute__" in table or "__slots__" in table:
            descr = None
        TABLES[id(cls)] = [cls, table, descr, is_case,
                           [vars(c) for c in mro if c is not object and c is not TESTCASE]]
        proxy = vars(cls)
        keys = [k for k in list(proxy) if classify(proxy[k])[0] != DATA]
        SPACES.append((proxy, "tests", keys, [proxy[k] for k in keys], frozenset()))
    rebase()
    check("when the test classes were checked")


def run_one(cls, entry, name, tid):
    """One test, called from here with its own code: PASS only when setUp, the test, tearDown and the cleanups
    returned normally, no assertion recorded a failure, nothing skipped, and nothing watched changed."""
    STATE[FAILED] = False
    STATE[SKIPPED] = False
    STATE[CURRENT] = tid
    CLEANUPS.clear()
    RAISES.clear()
    table, descr = entry[1], entry[2]
    found = table.get(name)
    if found is None or found[0] != FUNC:
        return False
    method = found[1]
    marks = vars(method)
    str_keys(marks, tid)
    if marks.get("__unittest_skip__") or marks.get("__unittest_expecting_failure__"):
        return False
    instance = object.__new__(cls)
    if descr is not None:
        instance_dict(instance, descr)["_testMethodName"] = name
    check("before %s" % tid)
    ok = True
    setup = table.get("setUp")
    try:
        if setup is not None:
            bind(instance, cls, setup)()
    except BaseException:
        ok = False
    if ok:
        try:
            if method(instance) is not None:  # a generator or coroutine: its body never ran
                ok = False
        except BaseException:
            ok = False
        teardown = table.get("tearDown")
        try:
            if teardown is not None:
                bind(instance, cls, teardown)()
        except BaseException:
            ok = False
    while CLEANUPS:
        function, args, kwargs = CLEANUPS.pop()
        try:
            function(*args, **kwargs)
        except BaseException:
            ok = False
    check("after %s" % tid)
    return ok and not STATE[FAILED] and not STATE[SKIPPED]


def call_hook(owner, name):
    """setUpClass/tearDownClass of a test class, setUpModule/tearDownModule of the module: True when it ran cleanly."""
    STATE[FAILED] = False
    STATE[SKIPPED] = False
    try:
        if owner is None:
            fn = SNAP.get(name, MISSING)
            if fn is not MISSING:
                fn()
        else:
            entry = TABLES[id(owner)]
            found = entry[1].get(name)
            if found is not None:
                bind(None, owner, found)()
    except BaseException:
        return False
    return not STATE[FAILED] and not STATE[SKIPPED]


def run(code, g, classes, dict_descr, tests, module_hooks):
    """Load the module, run every expected test ([test id, class, method]), report, and leave."""
    load(code, g, classes, dict_descr)
    results = []
    module_ok = call_hook(None, "setUpModule") if "setUpModule" in module_hooks else True
    i = 0
    while i < len(tests):
        cname = tests[i][1]
        group = []
        while i < len(tests) and tests[i][1] == cname:
            group.append(tests[i])
            i += 1
        cls = BY_NAME.get(cname)
        entry = TABLES.get(id(cls)) if cls is not None else None
        if entry is None or not entry[3] or vars(cls).get("__unittest_skip__"):
            for tid, c, m in group:
                results.append((tid, False))
            continue
        class_ok = module_ok and call_hook(cls, "setUpClass")
        outcomes = []
        for tid, c, m in group:
            outcomes.append((tid, class_ok and run_one(cls, entry, m, tid)))
        if not call_hook(cls, "tearDownClass"):
            outcomes = [(tid, False) for tid, ok in outcomes]
        results.extend(outcomes)
    if "tearDownModule" in module_hooks and not call_hook(None, "tearDownModule"):
        results = [(tid, False) for tid, ok in results]
    check("when the tests ended")
    write_all("".join(["%s %s %s\n" % (NONCE, tid, "PASS" if ok else "FAIL") for tid, ok in results]).encode())
    os._exit(0)
