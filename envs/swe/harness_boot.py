"""The grading harness's first stage (see ``grader.py``): ``python3 -I -B -c <this file>`` in the grading sandbox, one
interpreter per test module, with one JSON object on stdin (the nonce, the test module's original source, the tests
to run, and the runtime's source, ``harness_runtime.py``).

Before any code of the package exists in the process it: reads its input and puts its report channel on a private
descriptor (stdout and stderr go to /dev/null); imports what the tests import from the standard library (the work dir
is not on ``sys.path`` yet, and goes LAST); compiles the runtime and the test module FROZEN (below); records every
namespace, class and object that exists; switches the garbage collector off (no finalizer of the package runs in the
middle of a check); installs the runtime's audit hook; and hands over to the runtime, never to return.

Freezing a tree of code (``Freezer``): every name that the compiled code would look up in a dict some other code can
reach becomes a constant of the code object, reachable only through ``__code__`` (which the hook denies for this code).
For the runtime: every global name. For the tests (``TestsFreezer``):
- names the test module imports from the standard library, and builtins: the objects captured before the package ran;
  attribute chains on such modules, to a module, class or function: that object;
- the test module's own names, read from a function: from a private snapshot that each top-level statement fills as it
  binds them (``record``), not from the module's dict;
- ``x.assertEqual`` and the rest of TestCase's API: the runtime's own implementation (``api_get``), which checks, then
  compares, and records a failure before it raises; ``with x.assertRaises(E):`` and ``with x.subTest(...):`` become
  try/except/finally and inline code around calls to it;
- ``self.name`` in the methods of the module's classes: the instance's dict, else the class as loaded (``get``,
  ``dict_of``), never a class attribute looked up at run time; zero-argument ``super()``: the class as loaded;
- every call: ``call(f, ...)``, which checks that nothing watched changed first.

All of this file runs before the package is imported; its module-level names are deleted from ``__main__`` before the
hook is armed, and its frame (holding the rest) is never left.
"""

import ast
import builtins
import collections
import enum
import gc
import importlib
import json
import os
import re
import resource
import signal
import sys
import types
import typing
import unittest
import unittest.case
import warnings

SCOPE_NODES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.ListComp, ast.SetComp,
               ast.DictComp, ast.GeneratorExp)
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
CONSTANT_TYPES = (str, bytes, int, float, complex, bool, type(None), type(...))
FRAME_SENSITIVE = {"super", "globals", "locals", "vars", "dir", "eval", "exec", "breakpoint", "__import__"}
RAISES = {"assertRaises": False, "failUnlessRaises": False, "assertRaisesRegex": True, "assertRaisesRegexp": True}
IMPLEMENTED = {
    "assertEqual": "assert_equal", "assertEquals": "assert_equal", "failUnlessEqual": "assert_equal",
    "assertNotEqual": "assert_not_equal", "assertNotEquals": "assert_not_equal", "failIfEqual": "assert_not_equal",
    "assertTrue": "assert_true", "assert_": "assert_true", "failUnless": "assert_true",
    "assertFalse": "assert_false", "failIf": "assert_false",
    "assertIs": "assert_is", "assertIsNot": "assert_is_not", "assertIsNone": "assert_is_none",
    "assertIsNotNone": "assert_is_not_none", "assertIn": "assert_in", "assertNotIn": "assert_not_in",
    "assertIsInstance": "assert_is_instance", "assertNotIsInstance": "assert_not_is_instance",
    "assertLess": "assert_less", "assertLessEqual": "assert_less_equal", "assertGreater": "assert_greater",
    "assertGreaterEqual": "assert_greater_equal",
    "assertAlmostEqual": "assert_almost_equal", "assertAlmostEquals": "assert_almost_equal",
    "failUnlessAlmostEqual": "assert_almost_equal", "assertNotAlmostEqual": "assert_not_almost_equal",
    "assertNotAlmostEquals": "assert_not_almost_equal", "failIfAlmostEqual": "assert_not_almost_equal",
    "assertSequenceEqual": "assert_sequence_equal", "assertListEqual": "assert_list_equal",
    "assertTupleEqual": "assert_tuple_equal", "assertSetEqual": "assert_set_equal",
    "assertDictEqual": "assert_dict_equal", "assertMultiLineEqual": "assert_multi_line_equal",
    "assertCountEqual": "assert_count_equal", "assertRegex": "assert_regex", "assertRegexpMatches": "assert_regex",
    "assertNotRegex": "assert_not_regex", "assertNotRegexpMatches": "assert_not_regex",
    "assertRaises": "assert_raises", "failUnlessRaises": "assert_raises", "assertRaisesRegex": "assert_raises_regex",
    "assertRaisesRegexp": "assert_raises_regex", "fail": "fail", "skipTest": "skip_test", "subTest": "subtest_api",
    "addCleanup": "add_cleanup", "enterContext": "enter_context", "id": "test_id",
    "shortDescription": "short_description", "addTypeEqualityFunc": "unsupported", "doCleanups": "unsupported"}


# -- scopes -----------------------------------------------------------------------------------------------------------

class Scope:
    def __init__(self, node, kind, parent, top):
        self.node, self.kind, self.parent, self.top = node, kind, parent, top
        self.bound, self.globals, self.nonlocals = set(), set(), set()
        self.self_name = self.class_name = None  # a method of a top-level class: its first parameter, its class


class Scopes:
    """Python's name resolution, statically: which scope binds what (module-level binding sites counted, with the
    top-level statement that binds them)."""

    def __init__(self, tree):
        self.of = {}
        self.sites = collections.Counter()  # module-level name -> binding sites
        self.tops = collections.defaultdict(set)  # module-level name -> top-level statement indexes binding it
        self.declared_global = set()  # names a function or class declares global
        self.module = Scope(tree, "module", None, None)
        self.of[tree] = self.module
        for i, stmt in enumerate(tree.body):
            self.walk(stmt, self.module, i)
        for s in self.of.values():
            if s.kind != "module":
                self.declared_global |= s.globals
            if (isinstance(s.node, ast.FunctionDef | ast.AsyncFunctionDef) and s.parent.kind == "class"
                    and s.parent.parent is self.module):
                decorators = {d.id for d in s.node.decorator_list if isinstance(d, ast.Name)}
                positional = s.node.args.posonlyargs + s.node.args.args
                if positional and not decorators & {"staticmethod", "classmethod"}:
                    s.self_name, s.class_name = positional[0].arg, s.parent.node.name

    def bind(self, scope, name, top):
        scope.bound.add(name)
        if scope.kind == "module":
            self.sites[name] += 1
            self.tops[name].add(top)

    def enter(self, node, kind, parent, top):
        s = Scope(node, kind, parent, top)
        self.of[node] = s
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                self.bind(s, arg.arg, top)
            self.walk(node.body, s, top)
        elif isinstance(node, ast.ClassDef):
            self.walk(node.body, s, top)
        else:
            for k, gen in enumerate(node.generators):
                self.walk(gen.target, s, top)
                if k:
                    self.walk(gen.iter, s, top)
                self.walk(gen.ifs, s, top)
            for field in ("elt", "key", "value"):
                self.walk(getattr(node, field, None), s, top)

    def walk(self, node, s, top):
        if node is None:
            return
        if isinstance(node, list):
            for n in node:
                self.walk(n, s, top)
            return
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self.bind(s, node.name, top)
            a = node.args
            self.walk(node.decorator_list + a.defaults + [d for d in a.kw_defaults if d is not None], s, top)
            for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
                self.walk(arg.annotation, s, top)
            self.walk(node.returns, s, top)
            self.enter(node, "function", s, top)
            return
        if isinstance(node, ast.Lambda):
            self.walk(node.args.defaults + [d for d in node.args.kw_defaults if d is not None], s, top)
            self.enter(node, "function", s, top)
            return
        if isinstance(node, ast.ClassDef):
            self.bind(s, node.name, top)
            self.walk(node.decorator_list + node.bases + [k.value for k in node.keywords], s, top)
            self.enter(node, "class", s, top)
            return
        if isinstance(node, COMPREHENSIONS):
            self.walk(node.generators[0].iter, s, top)
            self.enter(node, "comprehension", s, top)
            return
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store | ast.Del):
                self.bind(s, node.id, top)
            return
        if isinstance(node, ast.NamedExpr):
            target = s
            while target.kind == "comprehension":
                target = target.parent
            self.bind(target, node.target.id, top)
            self.walk(node.value, s, top)
            return
        if isinstance(node, ast.Global):
            s.globals.update(node.names)
            return
        if isinstance(node, ast.Nonlocal):
            s.nonlocals.update(node.names)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                self.bind(s, a.asname or a.name.split(".")[0], top)
            return
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if a.name != "*":
                    self.bind(s, a.asname or a.name, top)
            return
        if isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            self.bind(s, node.name, top)
        if isinstance(node, ast.MatchMapping) and node.rest:
            self.bind(s, node.rest, top)
        for child in ast.iter_child_nodes(node):
            self.walk(child, s, top)

    def resolve(self, name, s):
        """("local" | "free" | "global" | "class", the scope that binds it or None) for a name read in scope s."""
        if s.kind == "module" or name in s.globals:
            return "global", None
        if name in s.bound and name not in s.nonlocals:
            return ("class" if s.kind == "class" else "local"), s
        p = s.parent
        while p is not None and p.kind != "module":
            if p.kind != "class":
                if name in p.globals:
                    return "global", None
                if name in p.bound and name not in p.nonlocals:
                    return "free", p
            p = p.parent
        return "global", None


# -- freezing ---------------------------------------------------------------------------------------------------------

def constant_ok(value):
    if isinstance(value, tuple | frozenset):
        return type(value) in (tuple, frozenset) and all(constant_ok(v) for v in value)
    return type(value) in CONSTANT_TYPES


class Freezer(ast.NodeTransformer):
    """Rewrites a tree so that the names it reads come from constants; subclasses decide which."""

    def __init__(self, tree, token):
        self.scopes = Scopes(tree)
        self.token = token
        self.placeholder = ("\x00" + token,)  # in the compiled code: the tuple (None, *objects)
        self.objects = []
        self.index = {}  # id(object) -> its position in the tuple (objects holds it: no id is reused)
        self.stack = []

    # constants. A literal stays a literal; any other object becomes ``<placeholder>[i]`` (i >= 1), and the
    # placeholder (a one-element tuple) becomes the tuple of the objects after compiling. Never a bare placeholder:
    # the compiler folds expressions of constants (a subscript, ``not``, an ``if``), but it leaves an index out of
    # range alone. A tuple: nothing can be swapped in it (a mappingproxy would hand its dict to an ``__eq__``).
    def const(self, value, near=None):
        if constant_ok(value):
            node = ast.Constant(value)
        else:
            i = self.index.get(id(value))
            if i is None:
                self.objects.append(value)
                i = self.index[id(value)] = len(self.objects)
            node = ast.Subscript(ast.Constant(self.placeholder), ast.Constant(i), ast.Load())
        return ast.copy_location(node, near) if near is not None else node

    def value_of(self, node):
        """(True, the object) when node is a constant of this freezer's, else (False, None)."""
        if isinstance(node, ast.Constant):
            return True, node.value
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Constant)
                and node.value.value == self.placeholder and isinstance(node.slice, ast.Constant)):
            return True, self.objects[node.slice.value - 1]
        return False, None

    @property
    def scope(self):
        return self.stack[-1]

    def visit(self, node):
        """Visit, then give what replaced node node's location (fix_missing_locations on the whole tree is slow)."""
        out = super().visit(node)
        if out is not node and out is not None:
            for n in out if isinstance(out, list) else [out]:
                locate(n, node)
        return out

    # scopes: the parts of a definition that its enclosing scope evaluates come first
    def visit_all(self, nodes):
        out = []
        for n in nodes:
            r = self.visit(n)
            if r is None:
                continue
            out.extend(r if isinstance(r, list) else [r])
        return out

    def visit_arguments_outside(self, a):
        a.defaults = self.visit_all(a.defaults)
        a.kw_defaults = [d if d is None else self.visit(d) for d in a.kw_defaults]
        for arg in a.posonlyargs + a.args + a.kwonlyargs + [x for x in (a.vararg, a.kwarg) if x]:
            if arg.annotation is not None:
                arg.annotation = self.visit(arg.annotation)

    def visit_Module(self, node):
        self.stack.append(self.scopes.module)
        node.body = self.visit_body_of_module(node.body)
        self.stack.pop()
        return node

    def visit_body_of_module(self, body):
        return self.visit_all(body)

    def visit_FunctionDef(self, node):
        node.decorator_list = self.visit_all(node.decorator_list)
        self.visit_arguments_outside(node.args)
        if node.returns is not None:
            node.returns = self.visit(node.returns)
        self.stack.append(self.scopes.of[node])
        node.body = self.visit_all(node.body)
        self.stack.pop()
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        self.visit_arguments_outside(node.args)
        self.stack.append(self.scopes.of[node])
        node.body = self.visit(node.body)
        self.stack.pop()
        return node

    def visit_ClassDef(self, node):
        node.decorator_list = self.visit_all(node.decorator_list)
        node.bases = self.visit_all(node.bases)
        for k in node.keywords:
            k.value = self.visit(k.value)
        self.stack.append(self.scopes.of[node])
        node.body = self.visit_all(node.body)
        self.stack.pop()
        return node

    def visit_comprehension_node(self, node):
        gens = node.generators
        gens[0].iter = self.visit(gens[0].iter)
        self.stack.append(self.scopes.of[node])
        for k, gen in enumerate(gens):
            gen.target = self.visit(gen.target)
            if k:
                gen.iter = self.visit(gen.iter)
            gen.ifs = self.visit_all(gen.ifs)
        for field in ("elt", "key", "value"):
            if getattr(node, field, None) is not None:
                setattr(node, field, self.visit(getattr(node, field)))
        self.stack.pop()
        return node

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = visit_comprehension_node

    def visit_Name(self, node):
        kind, _ = self.scopes.resolve(node.id, self.scope)
        if kind == "global":
            replaced = self.global_name(node)
            if replaced is not None:
                return ast.copy_location(replaced, node)
        return node

    def global_name(self, node):
        return None


def locate(node, near):
    """Give near's location to every node below node (node included) that has none: the new ones."""
    if hasattr(near, "lineno"):
        for n in ast.walk(node):
            if "lineno" in n._attributes and not hasattr(n, "lineno"):
                ast.copy_location(n, near)


def substitute(value, placeholder, objects):
    """A compiled code object with its placeholder replaced by a read-only view of the freezer's objects, in nested
    code objects too (the tests' code may be read, by ``inspect`` say: nothing in it can be written)."""
    if type(value) is types.CodeType:
        return value.replace(co_consts=tuple(substitute(c, placeholder, objects) for c in value.co_consts))
    if type(value) is tuple and value == placeholder:
        return objects
    return value


def leftovers(value, token):
    """Whether a placeholder survived (constant folding that merged one into another constant)."""
    t = type(value)
    if t is types.CodeType:
        return any(leftovers(c, token) for c in value.co_consts)
    if t is str:
        return "\x00" + token in value
    if t is frozenset or t is tuple and all(type(v) in CONSTANT_TYPES + (tuple, frozenset) for v in value):
        return any(leftovers(v, token) for v in value)
    return False


def freeze(freezer, tree, filename):
    tree = freezer.visit(tree)
    with warnings.catch_warnings():  # "'str' object is not callable": a placeholder, called
        warnings.simplefilter("ignore")
        code = compile(tree, filename, "exec", dont_inherit=True)
    frozen = substitute(code, freezer.placeholder, (None, *freezer.objects))
    if leftovers(frozen, freezer.token):
        raise RuntimeError("a placeholder survived freezing " + filename)
    return frozen


class Spec:
    """A constant of the runtime, named where it is frozen (the host) and found where it runs (the sandbox)."""

    def __init__(self, *parts):
        self.parts = parts


class RuntimeFreezer(Freezer):
    """The runtime: every global name a constant (its own functions through the dict of them, found later), attribute
    chains on modules folded; anything else is an error. Symbolic: it runs on the host, and its constants are Specs
    (``prefreeze``)."""

    def __init__(self, tree, token, values, modules, defs):
        super().__init__(tree, token)
        self.values, self.modules, self.defs = values, modules, defs
        self.specs = {}
        self.ns = self.spec("rt")

    def spec(self, *parts):
        """One Spec per name, so that one slot holds it."""
        return self.specs.setdefault(parts, Spec(*parts))

    def global_name(self, node):
        if not isinstance(node.ctx, ast.Load):
            raise RuntimeError("the runtime binds the global %s" % node.id)
        if self.scope.kind == "module":
            return None
        if node.id in self.defs:
            return ast.Subscript(self.const(self.ns), ast.Constant(node.id), ast.Load())  # defined later
        if node.id in self.values:
            return self.const(self.values[node.id], node)
        if node.id in vars(builtins):
            return self.const(self.spec("builtin", node.id), node)
        raise RuntimeError("the runtime reads an unknown name %s" % node.id)

    def visit_Attribute(self, node):
        node.value = self.visit(node.value)
        known, obj = self.value_of(node.value)
        if known and isinstance(obj, Spec) and obj.parts[0] == "scratch" and obj.parts[1] in self.modules:
            if isinstance(node.ctx, ast.Load):
                return self.const(self.spec("attr", obj.parts[1], node.attr), node)
        return node


PROVIDED = ("NONCE", "REPORT", "CWD", "TESTS_DIR", "STATE", "SPACES", "MODULES_BEFORE", "MODULES", "FAST", "PRE",
            "PROTECTED", "TESTS_CODE", "NAME_READERS", "BUILTIN_NAMES", "TESTCASE", "SKIPTEST", "API",
            "TESTCASE_DATA", "TESTCASE_NAMES", "TABLES", "BY_NAME", "SNAP", "RAISES", "CLEANUPS", "SIGNALS",
            "HANDLERS", "PREFIXES", "MODULE_CODE", "RE_COMPILE", "PATTERN", "TYPE_NAME", "TYPE_MRO", "TYPE_DICT",
            "MISSING")


def prefreeze(source):
    """The runtime (``harness_runtime.py``), frozen once on the host: {"prelude": its module-level imports and
    assignments, "source": its functions with every global name a placeholder slot, "specs": what each slot holds,
    "defs": the function names, "placeholder"}. The sandbox compiles both and fills the slots (``load_runtime``)."""
    tree = ast.parse(source, "<grader>")
    prelude, values, modules = [], {}, set()
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) or isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        prelude.append(stmt)
        if isinstance(stmt, ast.Import):
            for a in stmt.names:
                if a.asname or "." in a.name:
                    raise RuntimeError("the runtime imports %s as a dotted or renamed name" % a.name)
                modules.add(a.name)
                values[a.name] = Spec("scratch", a.name)
            continue
        if isinstance(stmt, ast.ImportFrom):
            for a in stmt.names:
                values[a.asname or a.name] = Spec("scratch", a.asname or a.name)
            continue
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else getattr(
            stmt, "target", None)
        names = [target] if isinstance(target, ast.Name) else getattr(target, "elts", None)
        if not names or not all(isinstance(n, ast.Name) for n in names):
            raise RuntimeError("the runtime's module level: %s" % ast.unparse(stmt))
        try:
            literal = ast.literal_eval(stmt.value)
        except ValueError:
            literal = Spec
        for k, n in enumerate(names):
            value = literal if literal is Spec or isinstance(target, ast.Name) else literal[k]
            if n.id in PROVIDED:
                values[n.id] = Spec("value", n.id)
            elif value is not Spec and constant_ok(value):
                values[n.id] = value
            else:
                values[n.id] = Spec("scratch", n.id)
    missing = [n for n in PROVIDED if n not in values]
    if missing:
        raise RuntimeError("the runtime lacks the placeholders " + ", ".join(missing))
    defs = [s.name for s in tree.body if isinstance(s, ast.FunctionDef)]
    freezer = RuntimeFreezer(tree, os.urandom(12).hex(), values, modules, set(defs))
    body = freezer.visit(ast.Module([s for s in tree.body if isinstance(s, ast.FunctionDef)], []))
    return {"prelude": ast.unparse(ast.Module(prelude, [])), "source": ast.unparse(body), "defs": defs,
            "specs": [o.parts for o in freezer.objects], "placeholder": freezer.placeholder[0]}


def load_runtime(frozen, provided, rt):
    """The runtime's functions, from ``prefreeze``'s output: compiled here, each slot filled with the object its spec
    names. ``rt`` (the dict of them, which the functions reach through a constant) is filled in place."""
    scratch = {}
    exec(compile(frozen["prelude"], "<grader-values>", "exec"), scratch)
    objects = [None]
    for spec in frozen["specs"]:
        kind = spec[0]
        if kind == "scratch":
            objects.append(scratch[spec[1]])
        elif kind == "value":
            objects.append(provided[spec[1]])
        elif kind == "builtin":
            objects.append(vars(builtins)[spec[1]])
        elif kind == "attr":
            objects.append(getattr(scratch[spec[1]], spec[2]))
        elif kind == "rt":
            objects.append(rt)
        else:
            raise RuntimeError("unknown spec %r" % (spec,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = compile(frozen["source"], "<grader>", "exec", dont_inherit=True)
    placeholder = (frozen["placeholder"],)
    frozen_code = substitute(code, placeholder, tuple(objects))
    if leftovers(frozen_code, frozen["placeholder"][1:]):
        raise RuntimeError("a placeholder survived freezing the runtime")
    namespace = {"__builtins__": {}, "__name__": "__grader__"}
    exec(frozen_code, namespace)  # definitions only: their code is frozen
    rt.update({name: namespace.pop(name) for name in frozen["defs"]})  # their globals: nothing (the package can
    return frozen_code, namespace  # reach the functions handed to the tests, and so their __globals__)


class TestsFreezer(Freezer):
    """A test module: see the module docstring for what becomes what."""

    def __init__(self, tree, token, rt, imported, api_names):
        super().__init__(tree, token)
        self.rt, self.imported, self.api_names = rt, imported, api_names
        self.count = 0
        sc = self.scopes
        self.dynamic = sc.declared_global
        # names bound once, by an import of something captured before the package: constants everywhere
        self.constants = {}
        for stmt in tree.body:
            if isinstance(stmt, ast.Import | ast.ImportFrom):
                for a in stmt.names:
                    name = a.asname or a.name.split(".")[0]
                    if id(a) in imported and sc.sites[name] == 1 and name not in self.dynamic:
                        self.constants[name] = imported[id(a)]
        self.class_names = set()  # names bound in the bodies of the module's classes: their own, never the API's
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.class_names |= sc.of[stmt].bound
        self.bound_by_top = collections.defaultdict(set)
        for name, tops in sc.tops.items():
            for i in tops:
                self.bound_by_top[i].add(name)

    def fn(self, name, near=None):
        return self.const(self.rt[name], near)

    def call_of(self, name, args, keywords=(), near=None):
        return ast.Call(self.fn(name, near), list(args), list(keywords))

    # names
    def global_name(self, node):
        name = node.id
        if not isinstance(node.ctx, ast.Load):
            return None
        if name in self.constants:
            return self.const(self.constants[name], node)
        if self.scopes.sites[name] or name in self.dynamic:
            s = self.scope
            if (s.kind in ("function", "comprehension") and name not in self.dynamic
                    and name not in self.bound_by_top[s.top]):
                return self.call_of("module_name", [ast.Constant(name)])
            return None
        if name in vars(builtins) and not (name.startswith("__") and name.endswith("__")):
            return self.const(vars(builtins)[name], node)
        return None

    def is_builtin(self, name):
        kind, _ = self.scopes.resolve(name, self.scope)
        return (kind == "global" and name not in self.constants and not self.scopes.sites[name]
                and name not in self.dynamic and name in vars(builtins))

    def self_of(self, node):
        """The method scope whose first parameter ``node`` (a Name) is, or None."""
        if not isinstance(node, ast.Name):
            return None
        kind, where = self.scopes.resolve(node.id, self.scope)
        if kind in ("local", "free") and where is not None and where.self_name == node.id:
            return where
        return None

    def slot(self, name_node, attr, mode, ctx, near):
        holder = self.call_of("dict_of", [ast.Name(name_node.id, ast.Load()), ast.Constant(attr), ast.Constant(mode)])
        return ast.copy_location(ast.Subscript(holder, ast.Constant(attr), ctx), near)

    # module level: record what each statement binds
    def visit_body_of_module(self, body):
        out = []
        for i, stmt in enumerate(body):
            out.extend(self.visit_all([stmt]))
            names = sorted(self.bound_by_top.get(i, ()))
            future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
            if names and not future:
                rec = self.call_of("record", [ast.Constant(tuple(names)),
                                              ast.Call(self.const(globals_builtin), [], [])])
                out.append(ast.Expr(rec))
                locate(out[-1], stmt)
        return out

    # attributes
    def visit_Attribute(self, node):
        method = self.self_of(node.value)
        if method is not None:
            if isinstance(node.ctx, ast.Load):
                name = "api_get" if node.attr in self.api_names and node.attr not in self.class_names else "get"
                return ast.copy_location(
                    self.call_of(name, [ast.Name(node.value.id, ast.Load()), ast.Constant(node.attr)]), node)
            return self.slot(node.value, node.attr, "del" if isinstance(node.ctx, ast.Del) else "set", node.ctx,
                             node)
        node.value = self.visit(node.value)
        if isinstance(node.ctx, ast.Load):
            if node.attr in self.api_names and node.attr not in self.class_names:
                return ast.copy_location(self.call_of("api_get", [node.value, ast.Constant(node.attr)]), node)
            known, obj = self.value_of(node.value)
            if known and isinstance(obj, types.ModuleType) and hasattr(obj, node.attr):
                value = getattr(obj, node.attr)
                if isinstance(value, type | types.ModuleType | types.FunctionType | types.BuiltinFunctionType):
                    return self.const(value, node)
        return node

    def visit_AugAssign(self, node):
        method = self.self_of(node.target.value) if isinstance(node.target, ast.Attribute) else None
        if method is None:
            return self.generic_visit(node)
        node.value = self.visit(node.value)
        node.target = self.slot(node.target.value, node.target.attr, "aug", ast.Store(), node.target)
        locate(node.target, node)
        return node

    # calls
    def visit_Call(self, node):
        f = node.func
        if (isinstance(f, ast.Name) and f.id == "super" and not node.args and not node.keywords
                and self.scope.self_name is not None and self.is_builtin("super")):
            return ast.copy_location(self.call_of("super_of", [ast.Constant(self.scope.class_name),
                                                               ast.Name(self.scope.self_name, ast.Load())]), node)
        sensitive = isinstance(f, ast.Name) and f.id in FRAME_SENSITIVE and self.is_builtin(f.id)
        node = self.generic_visit(node)
        if sensitive:
            return node
        inner = node.func
        if isinstance(inner, ast.Call):
            known, obj = self.value_of(inner.func)
            if known and obj is self.rt["api_get"]:
                return node  # an assertion: it checks itself
        return ast.copy_location(ast.Call(self.fn("call"), [node.func] + node.args, node.keywords), node)

    # imports inside functions: what was captured before the package, as a constant
    def visit_import(self, node):
        if self.scope.kind == "module" or self.scope.kind == "class":
            return node
        if any(a.name == "*" or id(a) not in self.imported for a in node.names):
            return node
        out = []
        for a in node.names:
            name = a.asname or a.name.split(".")[0]
            out.append(ast.copy_location(ast.Assign([ast.Name(name, ast.Store())], self.const(self.imported[id(a)])),
                                         node))
        return out

    visit_Import = visit_ImportFrom = visit_import

    # with x.assertRaises(...) / with x.subTest(...)
    def special(self, item):
        ctx = item.context_expr
        if not (isinstance(ctx, ast.Call) and isinstance(ctx.func, ast.Attribute)):
            return None
        attr = ctx.func.attr
        if attr in self.class_names:
            return None
        if attr in RAISES:
            return "raises"
        if attr == "subTest" and item.optional_vars is None:
            return "subtest"
        return None

    def visit_With(self, node):
        if len(node.items) > 1 and any(self.special(i) for i in node.items):
            inner = node.body
            for item in reversed(node.items[1:]):
                inner = [ast.copy_location(ast.With(items=[item], body=inner), node)]
            node = ast.copy_location(ast.With(items=[node.items[0]], body=inner), node)
        item = node.items[0]
        kind = self.special(item) if len(node.items) == 1 else None
        if kind is None:
            return self.generic_visit(node)
        ctx = item.context_expr
        obj = self.visit(ctx.func.value)
        args = self.visit_all(ctx.args)
        keywords = [ast.keyword(k.arg, self.visit(k.value)) for k in ctx.keywords]
        if kind == "subtest":
            head = ast.Expr(self.call_of("subtest", [obj] + args, keywords))
            return [ast.copy_location(head, node)] + self.visit_all(node.body)
        self.count += 1
        cm, err = "_grader_cm_%d" % self.count, "_grader_e_%d" % self.count
        opened = self.call_of("raises_open", [obj, ast.Constant(RAISES[ctx.func.attr])] + args, keywords)
        out = [ast.Assign([ast.Name(cm, ast.Store())], opened)]
        if item.optional_vars is not None:
            out.append(ast.Assign([self.visit(item.optional_vars)], ast.Name(cm, ast.Load())))
        handler = ast.ExceptHandler(self.const(BaseException), err, [ast.Expr(self.call_of(
            "raises_caught", [ast.Name(cm, ast.Load()), ast.Name(err, ast.Load())]))])
        out.append(ast.Try(self.visit_all(node.body), [handler], [],
                           [ast.Expr(self.call_of("raises_close", [ast.Name(cm, ast.Load())]))]))
        return [ast.copy_location(n, node) for n in out]


globals_builtin = globals


# -- the boot ---------------------------------------------------------------------------------------------------------

def preimport(tree):
    """What each import of the test source gives, imported now (before the work dir is on sys.path: so only the
    standard library and the system's packages): {id(alias): object}."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                try:
                    importlib.import_module(a.name)
                except Exception:  # the package's own, imported later
                    continue
                out[id(a)] = sys.modules[a.name] if a.asname else sys.modules[a.name.split(".")[0]]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            try:
                module = importlib.import_module(node.module)
            except Exception:  # not the standard library
                continue
            for a in node.names:
                if a.name == "*":
                    continue
                if not hasattr(module, a.name):
                    try:
                        importlib.import_module(node.module + "." + a.name)
                    except Exception:  # not the standard library
                        continue
                if hasattr(module, a.name):
                    out[id(a)] = getattr(module, a.name)
    return out


def class_codes(code):
    """{class name: {function name: code}} for the functions directly in each top-level class body."""
    out = {}
    for c in code.co_consts:
        if type(c) is types.CodeType and c.co_qualname == c.co_name:
            fns = {}
            for f in c.co_consts:
                if type(f) is types.CodeType and f.co_qualname == c.co_name + "." + f.co_name:
                    fns[f.co_name] = f
            out.setdefault(c.co_name, fns)
    return out


def main():
    chunks = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    report = os.dup(1)
    os.set_inheritable(report, False)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    spec = json.loads(b"".join(chunks))
    try:
        prepared = prepare(spec, report)
    except BaseException as err:  # a harness bug or a test source it cannot compile: -1, with the reason
        os.write(report, ("%s VIOLATION the harness could not start: %s: %s\n" % (
            spec.get("nonce"), type(err).__name__, str(err)[:300].replace("\n", " "))).encode())
        os._exit(87)
    state, run, args, held = prepared  # held: every object that existed before, so that no id in PRE is reused
    disable, add_hook = gc.disable, sys.addaudithook
    main_vars = vars(sys.modules["__main__"])  # this file's names: nothing of it is left for the package to call
    for k in [k for k in main_vars if not (k.startswith("__") and k.endswith("__"))]:
        del main_vars[k]
    disable()
    add_hook(args[-1])
    state[0] = True
    run(*args[:-1])


def prepare(spec, report):
    """Everything before the package runs: (STATE, the runtime's run, its arguments and, last, the audit hook, the
    objects that existed)."""
    cwd = os.getcwd()
    module, path = spec["module"], spec["path"]
    filename = cwd + "/" + path
    test_tree = ast.parse(spec["source"], filename)
    imported = preimport(test_tree)
    sys.path.append(cwd)  # last: the package never shadows the standard library
    token = os.urandom(12).hex()

    # the runtime, frozen on the host; its slots filled here
    state = [False, False, False, False, False, "", False]
    spaces, modules_before, pre, protected, tests_code, readers = [], [], set(), set(), set(), set()
    signals, handlers, fast = tuple(sorted(signal.valid_signals())), [], []
    api, tables, by_name, snap, raises, cleanups = {}, {}, {}, {}, {}, []
    tc = unittest.case.TestCase
    tc_vars = vars(tc)
    data = {k: v for k, v in tc_vars.items()
            if not isinstance(v, types.FunctionType | staticmethod | classmethod | property)
            and not (k.startswith("__") and k.endswith("__"))}
    compiler = getattr(getattr(re, "_compiler", None), "compile", None)
    if compiler is None:
        import sre_compile
        compiler = sre_compile.compile
    provided = dict(NONCE=spec["nonce"], REPORT=report, CWD=cwd, TESTS_DIR=cwd + "/" + spec["tests_dir"],
                    STATE=state, SPACES=spaces, MODULES_BEFORE=modules_before, MODULES=sys.modules, FAST=fast,
                    PRE=pre, PROTECTED=protected, TESTS_CODE=tests_code, NAME_READERS=readers,
                    BUILTIN_NAMES=frozenset(vars(builtins)), TESTCASE=tc, SKIPTEST=unittest.SkipTest, API=api,
                    TESTCASE_DATA=data, TESTCASE_NAMES=frozenset(dir(tc)), TABLES=tables, BY_NAME=by_name,
                    SNAP=snap, RAISES=raises, CLEANUPS=cleanups, SIGNALS=signals, HANDLERS=handlers,
                    RE_COMPILE=compiler, PATTERN=re.Pattern, TYPE_NAME=vars(type)["__name__"], MISSING=object(),
                    TYPE_MRO=vars(type)["__mro__"], TYPE_DICT=vars(type)["__dict__"],
                    PREFIXES=tuple(sorted({os.path.realpath(p) for p in (
                        sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix, "/usr")})))
    module_code = []
    provided["MODULE_CODE"] = module_code
    rt = {}
    frozen_rt, scratch_rt = load_runtime(spec["runtime"], provided, rt)
    for name in dir(tc):
        value = tc_vars.get(name)
        if name in IMPLEMENTED:
            api[name] = rt[IMPLEMENTED[name]]
        elif name.startswith(("assert", "fail")) and isinstance(value, types.FunctionType):
            api[name] = rt["unsupported"]

    # the test module, frozen
    frozen_tests = freeze(TestsFreezer(test_tree, token, rt, imported, frozenset(api)), test_tree, filename)
    module_code.append(frozen_tests)
    codes = class_codes(frozen_tests)
    fresh = ast.parse(spec["source"], filename)
    scopes = Scopes(fresh)
    classes = [(s.name, frozenset(scopes.of[s].bound), codes.get(s.name, {}))
               for s in fresh.body if isinstance(s, ast.ClassDef)]
    hooks = frozenset(s.name for s in test_tree.body
                      if isinstance(s, ast.FunctionDef) and s.name in ("setUpModule", "tearDownModule"))
    g = {"__name__": module, "__file__": filename, "__package__": module.rpartition(".")[0],
         "__builtins__": dict(vars(builtins)), "__doc__": None, "__spec__": None, "__loader__": None}
    tests = [tuple(t) for t in spec["tests"]]

    # what must not change, and the hook
    protected.update({"<grader>", "<grader-values>"})  # not "<string>": this file's, and dataclasses' code
    tests_code.add(filename)
    readers.update({collections.namedtuple.__code__, typing._caller.__code__})
    if hasattr(enum.EnumType, "_create_"):
        readers.add(enum.EnumType._create_.__code__)
    strict_modules = {id(m) for m in (unittest, unittest.case, builtins) if m is not None}
    for name in ("unittest.loader", "unittest.result", "unittest.suite", "unittest.util"):
        if name in sys.modules:
            strict_modules.add(id(sys.modules[name]))
    keep = gc.get_objects()
    watched = [m for k, m in list(sys.modules.items()) if type(m) is types.ModuleType and k != "__main__"]
    for m in watched:
        d = vars(m)
        mode = "strict" if id(m) in strict_modules else "module"
        keys, vals = list(d), list(d.values())
        lazy = {i for i, v in enumerate(vals) if v is None}
        if m is sys:  # what a test may redirect (contextlib.redirect_stdout): data, never called by the harness
            lazy |= {i for i, k in enumerate(keys) if k in ("stdout", "stderr", "stdin")}
        spaces.append((d, mode, keys, vals, frozenset(lazy)))
    d = g["__builtins__"]
    spaces.append((d, "strict", list(d), list(d.values()), frozenset()))
    for c in keep:
        if isinstance(c, type) and not c.__flags__ & (1 << 8):  # a class that can change (not immutable)
            d = vars(c)
            vals = list(d.values())
            spaces.append((d, "class", list(d), vals, frozenset(i for i, v in enumerate(vals) if v is None)))
    modules_before.extend((k, m) for k, m in list(sys.modules.items()) if type(k) is str)
    keep += watched + spaces + [frozen_rt, frozen_tests, g, rt, scratch_rt]
    pre.update(id(o) for o in keep)
    pre.update(id(f) for f in rt.values())
    # no thread, ever (Python 3.11 raises no audit event for one): one process of this uid, and no raising it again
    resource.setrlimit(resource.RLIMIT_NPROC, (1, 1))
    handlers.extend(map(signal.getsignal, signals))
    rt["rebase"]()
    return state, rt["run"], (frozen_tests, g, classes, tc_vars["__dict__"], tests, hooks, rt["hook"]), keep


if __name__ == "__main__":
    main()
