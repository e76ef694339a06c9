"""Data-structure repos: pagination, interval merging, an LRU cache, dependency ordering, stock reservations."""

from __future__ import annotations

from envs.swe.repo import Fix, SweRepo, src

TAGS = ("data",)

PAGINATION = SweRepo(
    name="pagination-last-page",
    tags=TAGS,
    issue="""
The last page of results is unreachable. With 45 items and 20 per page, page_count() says 2, so page 3 (the last 5
items) is rejected as out of range and the page links stop at 2. Exactly 40 items should still be 2 pages, and no
items one (empty) page.
""",
    files={
        "paging/__init__.py": "",
        "paging/pages.py": src(r"""
def page_count(total, per_page):
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    return max(1, total // per_page)


def page(items, number, per_page):
    '''Page `number` (1-based) of `items`.'''
    if not 1 <= number <= page_count(len(items), per_page):
        raise IndexError(f"page {number} is out of range")
    start = (number - 1) * per_page
    return items[start:start + per_page]
"""),
        "paging/links.py": src(r"""
from paging.pages import page_count


def page_links(total, per_page, current, window=2):
    last = page_count(total, per_page)
    lo, hi = max(1, current - window), min(last, current + window)
    links = list(range(lo, hi + 1))
    if lo > 1:
        links = [1, None] + links if lo > 2 else [1] + links
    if hi < last:
        links = links + [None, last] if hi < last - 1 else links + [last]
    return links
"""),
        "tests/__init__.py": "",
        "tests/test_paging.py": src(r"""
import unittest

from paging.links import page_links
from paging.pages import page, page_count


class PagesTest(unittest.TestCase):
    def test_count(self):
        self.assertEqual(page_count(45, 20), 3)
        self.assertEqual(page_count(40, 20), 2)
        self.assertEqual(page_count(0, 20), 1)

    def test_last_page(self):
        self.assertEqual(page(list(range(45)), 3, 20), [40, 41, 42, 43, 44])

    def test_out_of_range(self):
        with self.assertRaises(IndexError):
            page(list(range(40)), 3, 20)


class LinksTest(unittest.TestCase):
    def test_links(self):
        self.assertEqual(page_links(95, 10, 5), [1, None, 3, 4, 5, 6, 7, None, 10])

    def test_small(self):
        self.assertEqual(page_links(25, 10, 1), [1, 2, 3])
"""),
    },
    fix=(Fix("paging/pages.py", "return max(1, total // per_page)", "return max(1, -(-total // per_page))"),),
)

INTERVALS = SweRepo(
    name="intervals-unsorted",
    tags=TAGS,
    split="eval",
    issue="""
merge() only merges intervals that are already in order. merge([(5, 8), (1, 3), (2, 6)]) returns
[(5, 8), (1, 6)] instead of [(1, 8)], and free_slots() on a calendar with unsorted bookings reports overlapping free
time. Touching intervals such as (1, 3) and (3, 4) are meant to merge.
""",
    files={
        "spans/__init__.py": "",
        "spans/merge.py": src(r"""
def merge(intervals):
    '''Union of closed intervals (start, end), as disjoint intervals in order.'''
    merged = []
    for start, end in intervals:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
"""),
        "spans/calendar.py": src(r"""
from spans.merge import merge


def free_slots(bookings, day_start, day_end):
    free, cursor = [], day_start
    for start, end in merge(bookings):
        if start > cursor:
            free.append((cursor, min(start, day_end)))
        cursor = max(cursor, end)
    if cursor < day_end:
        free.append((cursor, day_end))
    return free


def busy_time(bookings):
    return sum(end - start for start, end in merge(bookings))
"""),
        "tests/__init__.py": "",
        "tests/test_spans.py": src(r"""
import unittest

from spans.calendar import busy_time, free_slots
from spans.merge import merge


class MergeTest(unittest.TestCase):
    def test_sorted(self):
        self.assertEqual(merge([(1, 3), (2, 4), (6, 7)]), [(1, 4), (6, 7)])

    def test_touching(self):
        self.assertEqual(merge([(1, 3), (3, 4)]), [(1, 4)])

    def test_unsorted(self):
        self.assertEqual(merge([(5, 8), (1, 3), (2, 6)]), [(1, 8)])


class CalendarTest(unittest.TestCase):
    def test_free(self):
        self.assertEqual(free_slots([(13, 14), (9, 10), (9, 11)], 8, 17), [(8, 9), (11, 13), (14, 17)])

    def test_busy(self):
        self.assertEqual(busy_time([(3, 5), (1, 2), (4, 6)]), 4)
"""),
    },
    fix=(Fix("spans/merge.py", "    for start, end in intervals:", "    for start, end in sorted(intervals):"),),
)

LRU = SweRepo(
    name="lru-recency",
    tags=TAGS,
    issue="""
The LRU cache evicts entries that were just used. After cache.put("a", 1), put("b", 2), get("a") and put("c", 3) on
a cache of size 2, "a" is gone and "b" survives: a read does not count as a use. The memoize decorator suffers from
it too (hot keys get recomputed).
""",
    files={
        "cachekit/__init__.py": "",
        "cachekit/lru.py": src(r"""
from collections import OrderedDict

_MISSING = object()


class LRUCache:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key, default=None):
        value = self._data.get(key, _MISSING)
        if value is _MISSING:
            self.misses += 1
            return default
        self.hits += 1
        return value

    def put(self, key, value):
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __contains__(self, key):
        return key in self._data

    def __len__(self):
        return len(self._data)
"""),
        "cachekit/memo.py": src(r"""
import functools

from cachekit.lru import _MISSING, LRUCache


def memoize(capacity=128):
    def wrap(fn):
        cache = LRUCache(capacity)

        @functools.wraps(fn)
        def inner(*args):
            value = cache.get(args, _MISSING)
            if value is _MISSING:
                value = fn(*args)
                cache.put(args, value)
            return value

        inner.cache = cache
        return inner
    return wrap
"""),
        "tests/__init__.py": "",
        "tests/test_lru.py": src(r"""
import unittest

from cachekit.lru import LRUCache
from cachekit.memo import memoize


class LRUTest(unittest.TestCase):
    def test_evicts_oldest(self):
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        c.put("c", 3)
        self.assertNotIn("a", c)
        self.assertEqual(len(c), 2)

    def test_get_refreshes(self):
        c = LRUCache(2)
        c.put("a", 1)
        c.put("b", 2)
        self.assertEqual(c.get("a"), 1)
        c.put("c", 3)
        self.assertIn("a", c)
        self.assertNotIn("b", c)

    def test_counts(self):
        c = LRUCache(1)
        c.get("x")
        c.put("x", 1)
        c.get("x")
        self.assertEqual((c.hits, c.misses), (1, 1))


class MemoTest(unittest.TestCase):
    def test_hot_key_stays(self):
        calls = []

        @memoize(capacity=2)
        def square(n):
            calls.append(n)
            return n * n

        for n in (1, 2, 1, 3, 1):
            square(n)
        self.assertEqual(calls, [1, 2, 3])
"""),
    },
    fix=(Fix("cachekit/lru.py", "        self.hits += 1\n        return value\n",
             "        self.hits += 1\n        self._data.move_to_end(key)\n        return value\n"),),
)

TOPO = SweRepo(
    name="deps-topological-order",
    tags=TAGS,
    issue="""
install_order() leaves packages out. For {"app": ["web", "db"], "web": ["http"]} it returns ["web", "app"]: "db" and
"http" only appear as dependencies, never as keys, and they are missing from the order, so they never get installed.
Every package that is mentioned must be in the order, after its dependencies.
""",
    files={
        "deps/__init__.py": "",
        "deps/graph.py": src(r"""
class CycleError(ValueError):
    pass


def topological_order(requires):
    '''requires: package -> packages it needs. Dependencies come first; ties in name order.'''
    nodes = set(requires)
    needed_by = {n: [] for n in nodes}
    waiting = {n: 0 for n in nodes}
    for pkg, deps in requires.items():
        for dep in deps:
            if dep in needed_by:
                needed_by[dep].append(pkg)
                waiting[pkg] += 1
    ready = sorted(n for n in nodes if waiting[n] == 0)
    order = []
    while ready:
        n = ready.pop(0)
        order.append(n)
        for pkg in needed_by[n]:
            waiting[pkg] -= 1
            if waiting[pkg] == 0:
                ready.append(pkg)
                ready.sort()
    if len(order) != len(nodes):
        raise CycleError("dependency cycle among: " + ", ".join(sorted(n for n in nodes if waiting[n])))
    return order
"""),
        "deps/install.py": src(r"""
from deps.graph import topological_order


def install_order(requires, installed=()):
    return [pkg for pkg in topological_order(requires) if pkg not in installed]
"""),
        "tests/__init__.py": "",
        "tests/test_deps.py": src(r"""
import unittest

from deps.graph import CycleError, topological_order
from deps.install import install_order


class OrderTest(unittest.TestCase):
    def test_chain(self):
        self.assertEqual(topological_order({"c": ["b"], "b": ["a"], "a": []}), ["a", "b", "c"])

    def test_leaves_only_as_dependencies(self):
        order = install_order({"app": ["web", "db"], "web": ["http"]})
        self.assertEqual(order, ["db", "http", "web", "app"])

    def test_installed(self):
        self.assertEqual(install_order({"b": ["a"]}, installed={"a"}), ["b"])

    def test_cycle(self):
        with self.assertRaises(CycleError):
            topological_order({"a": ["b"], "b": ["a"]})
"""),
    },
    fix=(Fix("deps/graph.py", "    nodes = set(requires)\n",
             "    nodes = set(requires) | {dep for deps in requires.values() for dep in deps}\n"),),
)

INVENTORY = SweRepo(
    name="inventory-exact-stock",
    tags=TAGS,
    issue="""
We cannot sell the last item in stock. With 3 units of SKU-1 on hand, reserve("SKU-1", 3) raises OutOfStock, and an
order that takes exactly what is left is refused at checkout. Asking for more than what is on hand must still fail.
""",
    files={
        "stock/__init__.py": "",
        "stock/inventory.py": src(r"""
class OutOfStock(Exception):
    pass


class Inventory:
    def __init__(self, on_hand=None):
        self.on_hand = dict(on_hand or {})
        self.reserved = {}

    def available(self, sku):
        return self.on_hand.get(sku, 0) - self.reserved.get(sku, 0)

    def reserve(self, sku, qty):
        if qty <= 0:
            raise ValueError("quantity must be positive")
        if qty >= self.available(sku):
            raise OutOfStock(f"{sku}: {qty} wanted, {self.available(sku)} available")
        self.reserved[sku] = self.reserved.get(sku, 0) + qty

    def release(self, sku, qty):
        self.reserved[sku] = max(0, self.reserved.get(sku, 0) - qty)
"""),
        "stock/orders.py": src(r"""
from stock.inventory import OutOfStock


def checkout(inventory, lines):
    '''Reserve every line or none: (True, "") or (False, why).'''
    done = []
    try:
        for sku, qty in lines:
            inventory.reserve(sku, qty)
            done.append((sku, qty))
    except OutOfStock as err:
        for sku, qty in done:
            inventory.release(sku, qty)
        return False, str(err)
    return True, ""
"""),
        "tests/__init__.py": "",
        "tests/test_stock.py": src(r"""
import unittest

from stock.inventory import Inventory, OutOfStock
from stock.orders import checkout


class InventoryTest(unittest.TestCase):
    def test_reserve_some(self):
        inv = Inventory({"SKU-1": 3})
        inv.reserve("SKU-1", 2)
        self.assertEqual(inv.available("SKU-1"), 1)

    def test_reserve_all(self):
        inv = Inventory({"SKU-1": 3})
        inv.reserve("SKU-1", 3)
        self.assertEqual(inv.available("SKU-1"), 0)

    def test_too_many(self):
        with self.assertRaises(OutOfStock):
            Inventory({"SKU-1": 3}).reserve("SKU-1", 4)


class CheckoutTest(unittest.TestCase):
    def test_exact(self):
        inv = Inventory({"a": 1, "b": 2})
        self.assertEqual(checkout(inv, [("a", 1), ("b", 2)]), (True, ""))

    def test_all_or_nothing(self):
        inv = Inventory({"a": 5, "b": 1})
        ok, why = checkout(inv, [("a", 2), ("b", 3)])
        self.assertFalse(ok)
        self.assertEqual(inv.available("a"), 5)
"""),
    },
    fix=(Fix("stock/inventory.py", "if qty >= self.available(sku):", "if qty > self.available(sku):"),),
)

REPOS = [PAGINATION, INTERVALS, LRU, TOPO, INVENTORY]
