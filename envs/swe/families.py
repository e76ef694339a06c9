"""The SWE suite's bug families: each a generator that makes one small buggy repo from a seeded ``random.Random``.

A hand-written repo is one bug a model can only learn by heart; an instance of a family is one bug SHAPE (a bound that
should be included, a range that stops one short, a swapped pair of arguments, ...) in a package it has not seen: other
package, module, function and variable names, other constants and test values, another wording of the issue. So what
carries over from one instance to the next is the reading (the failing test, the module) and the kind of fix, not the
text of one. Each instance is a package of one short module (and an empty ``__init__.py``) with a ``tests/`` module of
three unittest tests, at least one of which fails because of the bug; the issue says what a user sees, never the fix.
The module is kept to a dozen lines so that an episode with its test output fits the tiny model's rows.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from envs.swe.repo import Fix, SweRepo

PACKAGES = ["shop", "ledger", "tally", "depot", "clinic", "garden", "fleet", "school", "studio", "harbor", "bakery",
            "archive", "venue", "kiosk", "orchard", "atlas", "payroll", "transit", "pantry", "gallery", "market"]
NAMES = ["ann", "bob", "cleo", "dev", "eva", "finn", "gus", "hana", "ivan", "jo", "kim", "lena", "max", "nora"]
WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "coral", "frost", "olive", "amber", "cedar", "delta"]
Test = tuple[str, list[str]]  # (test name, its body's lines)


@dataclass(frozen=True)
class Family:
    name: str
    tag: str  # numeric | data | text
    make: Callable[[random.Random], SweRepo]


def _module(rng: random.Random, modules: list[str], code: str, imports: list[str], tests: list[Test], issue: str,
            old: str, new: str) -> SweRepo:
    """A repo of ``<pkg>/__init__.py``, ``<pkg>/<mod>.py`` and ``tests/test_<mod>.py`` (one TestCase)."""
    pkg, mod = rng.choice(PACKAGES), rng.choice(modules)
    cls = "".join(w.title() for w in mod.split("_")) + "Test"
    methods = "\n".join(f"    def test_{name}(self):\n" + "".join(f"        {line}\n" for line in body)
                          for name, body in tests)
    test = (f"import unittest\n\nfrom {pkg}.{mod} import {', '.join(imports)}\n\n\n"
            f"class {cls}(unittest.TestCase):\n{methods}")
    files = {f"{pkg}/__init__.py": "", f"{pkg}/{mod}.py": code, "tests/__init__.py": "", f"tests/test_{mod}.py": test}
    return SweRepo(name="", issue=issue, files=files, fix=(Fix(f"{pkg}/{mod}.py", old, new),))


def _call(code: str, fn: str, *args: object) -> object:
    """What the buggy module returns for ``fn(*args)``: the issue quotes what a user saw."""
    ns: dict = {}
    exec(code, ns)  # noqa: S102 - the families' own code
    return ns[fn](*args)


def make_inclusive_bound(rng: random.Random) -> SweRepo:
    at_least = rng.random() < 0.55
    themes = ([("can_vote", "age", "VOTING_AGE", [16, 18, 21], "people aged {v} or older may vote"),
               ("has_free_shipping", "total", "FREE_SHIPPING_FROM", [25, 50, 75], "orders of {v} or more ship free"),
               ("is_passing", "score", "PASS_MARK", [40, 50, 60], "a score of {v} or above passes"),
               ("gets_bulk_price", "quantity", "BULK_QUANTITY", [6, 10, 12], "{v} items or more get the bulk price")]
              if at_least else
              [("fits_carry_on", "weight", "MAX_WEIGHT", [7, 8, 10], "bags of up to {v} kg may go on board"),
               ("is_short_title", "length", "MAX_TITLE", [40, 60, 80], "titles of up to {v} characters are fine"),
               ("within_budget", "cost", "BUDGET", [100, 250, 500], "anything costing {v} or less is in budget"),
               ("rides_free", "age", "FREE_RIDE_AGE", [4, 5, 6], "children aged {v} and under ride free")])
    fn, param, const, values, rule = rng.choice(themes)
    v, d = rng.choice(values), rng.randrange(1, 4)
    inside, outside = (v + d, v - d) if at_least else (v - d, v + d)
    op = ">" if at_least else "<"
    code = f"{const} = {v}\n\n\ndef {fn}({param}):\n    return {param} {op} {const}\n"
    rule = rule.format(v=v)
    issue = rng.choice([f"{fn}({v}) returns False, but {rule}.",
                        f"The limit itself is handled wrong: {rule}, yet {fn}() says no to exactly {v}.",
                        f"{rule[0].upper()}{rule[1:]}. With {param} = {v} {fn}() gives False; {inside} works."])
    tests = [("at_the_limit", [f"self.assertTrue({fn}({v}))"]), ("inside", [f"self.assertTrue({fn}({inside}))"]),
             ("outside", [f"self.assertFalse({fn}({outside}))"])]
    rng.shuffle(tests)
    return _module(rng, ["rules", "limits", "policy", "checks"], code, [fn], tests, issue,
                   f"{param} {op} {const}", f"{param} {op}= {const}")


def make_range_end(rng: random.Random) -> SweRepo:
    k, letter = rng.randrange(2, 10), rng.choice("ABCDEFGH")
    fn, param, expr, what = rng.choice([
        ("squares", "n", "i * i", "the squares of 1 to n"), ("page_numbers", "pages", "i", "the numbers 1 to pages"),
        ("seat_labels", "seats", f'f"{letter}{{i}}"', "a label for each of the seats"),
        (f"multiples_of_{k}", "count", f"i * {k}", f"the first count multiples of {k}"),
        ("odd_numbers", "count", "2 * i - 1", "the first count odd numbers")])
    code = f"def {fn}({param}):\n    return [{expr} for i in range(1, {param})]\n"
    n, m = rng.randrange(3, 6), rng.randrange(6, 12)
    want = [eval(expr, {"i": i}) for i in range(1, n + 1)]  # noqa: S307 - the family's own expression
    got = _call(code, fn, n)
    issue = rng.choice([f"{fn}({n}) should give {what} ({n} items) but returns {got!r}.",
                        f"The last item is always missing: {fn}({n}) ends at {got[-1]!r}, not {want[-1]!r}.",
                        f"{fn}() comes up one short. Asking for {m} gives {m - 1} items."])
    tests = [("values", [f"self.assertEqual({fn}({n}), {want!r})"]), ("none", [f"self.assertEqual({fn}(0), [])"]),
             ("length", [f"self.assertEqual(len({fn}({m})), {m})"])]
    return _module(rng, ["sequences", "numbering", "series", "listing"], code, [fn], tests, issue,
                   f"range(1, {param})", f"range(1, {param} + 1)")


def make_top_n(rng: random.Random) -> SweRepo:
    fn, param = rng.choice([("top_scores", "scores"), ("largest_orders", "amounts"), ("highest_bids", "bids"),
                            ("best_ratings", "ratings"), ("longest_runs", "distances")])
    code = (f"def {fn}({param}, n):\n    ranked = sorted({param}, reverse=True)\n    return ranked[:n - 1]\n")
    values = rng.sample(range(1, 100), rng.randrange(5, 8))
    n = rng.randrange(2, 4)
    want = sorted(values, reverse=True)[:n]
    issue = rng.choice([f"{fn}(values, {n}) returns only {n - 1} values; I asked for the top {n}.",
                        f"Asking {fn}() for the best {n} of {values} gives {_call(code, fn, values, n)!r}.",
                        f"{fn}() leaves out one value: with n={n} the {n}th largest of {values} never shows up."])
    tests = [("top", [f"self.assertEqual({fn}({values!r}, {n}), {want!r})"]),
             ("empty", [f"self.assertEqual({fn}([], {n}), [])"]),
             ("input_unchanged", [f"values = {values!r}", f"{fn}(values, {n})",
                                  f"self.assertEqual(values, {values!r})"])]
    rng.shuffle(tests)
    return _module(rng, ["ranking", "stats", "leaders", "report"], code, [fn], tests, issue,
                   "ranked[:n - 1]", "ranked[:n]")


def make_wrong_operator(rng: random.Random) -> SweRepo:
    fn, a, b, c, noun = rng.choice([
        ("order_total", "price", "quantity", "shipping", "the order total"),
        ("trip_cost", "distance", "rate", "toll", "the trip cost"), ("weekly_pay", "hours", "wage", "bonus", "the pay"),
        ("parcel_weight", "items", "item_weight", "packaging", "the parcel weight"),
        ("invoice_amount", "units", "unit_price", "fee", "the invoice amount")])
    times = rng.random() < 0.5  # which of the two operators is the wrong one
    old, new = (f"{a} + {b}", f"{a} * {b}") if times else (f"subtotal - {c}", f"subtotal + {c}")
    code = (f"def {fn}({a}, {b}, {c}):\n    subtotal = {a} {'+' if times else '*'} {b}\n"
            f"    return subtotal {'+' if times else '-'} {c}\n")
    x, y, z = rng.randrange(2, 10), rng.randrange(3, 20), rng.randrange(1, 10)
    got = _call(code, fn, x, y, z)
    issue = rng.choice([f"{fn}({x}, {y}, {z}) returns {got}, but {noun} should be {x * y + z}.",
                        f"{noun[0].upper()}{noun[1:]} is wrong: {x} x {y} plus {z} should come to {x * y + z}, "
                        f"{fn}() says {got}.",
                        f"Wrong {noun.removeprefix('the ')} from {fn}(): expected {x * y + z} for "
                        f"{a}={x}, {b}={y}, {c}={z}; got {got}."])
    w = rng.randrange(2, 9)
    tests = [("total", [f"self.assertEqual({fn}({x}, {y}, {z}), {x * y + z})"]),
             ("without_extra", [f"self.assertEqual({fn}({w}, {y}, 0), {w * y})"]),
             ("nothing", [f"self.assertEqual({fn}(0, {y}, {z}), {z})"])]
    return _module(rng, ["pricing", "costs", "billing", "totals"], code, [fn], tests, issue, old, new)


def make_integer_division(rng: random.Random) -> SweRepo:
    fn, param = rng.choice([("mean_score", "scores"), ("average_rating", "ratings"), ("mean_delay", "delays"),
                            ("average_price", "prices"), ("mean_speed", "speeds")])
    code = (f"def {fn}({param}):\n    if not {param}:\n        return 0.0\n"
            f"    return sum({param}) // len({param})\n")
    a, b = rng.randrange(1, 40), rng.randrange(1, 40)
    whole = [a, a + 2 * b]
    half = [a, a + 2 * b + 1]
    want = (2 * a + 2 * b + 1) / 2
    issue = rng.choice([f"{fn}({half!r}) returns {_call(code, fn, half)} instead of {want}.",
                        f"{fn}() drops the fraction: the mean of {half!r} is {want}, not a whole number.",
                        f"Averages from {fn}() are rounded down, so {half!r} comes out as {_call(code, fn, half)}."])
    tests = [("whole", [f"self.assertEqual({fn}({whole!r}), {a + b})"]),
             ("fraction", [f"self.assertEqual({fn}({half!r}), {want})"]),
             ("empty", [f"self.assertEqual({fn}([]), 0.0)"])]
    rng.shuffle(tests)
    return _module(rng, ["averages", "stats", "metrics", "summary"], code, [fn], tests, issue,
                   f"sum({param}) // len({param})", f"sum({param}) / len({param})")


def make_wrong_default(rng: random.Random) -> SweRepo:
    if rng.random() < 0.5:
        fn = rng.choice(["batches", "chunked", "pages_of", "split_rows"])
        right, wrong = rng.sample([3, 4, 5, 8, 10, 20], 2)
        code = (f"def {fn}(items, size={wrong}):\n"
                f"    return [items[i:i + size] for i in range(0, len(items), size)]\n")
        count = right * rng.randrange(2, 4) + rng.randrange(0, right)
        issue = rng.choice([f"{fn}() without a size should make groups of {right}, but they hold {wrong}.",
                            f"The default group size of {fn}() is wrong: the docs promise {right} items per group.",
                            f"{fn}(list(range({count}))) gives groups of {wrong}; the default is meant to be {right}."])
        tests = [("default_size", [f"self.assertEqual(len({fn}(list(range({count})))[0]), {right})"]),
                 ("explicit_size", [f"self.assertEqual({fn}([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])"]),
                 ("empty", [f"self.assertEqual({fn}([]), [])"])]
        old, new = f"size={wrong}", f"size={right}"
    else:
        fn = rng.choice(["format_price", "price_label", "money", "show_amount"])
        right, wrong = rng.sample(["EUR", "USD", "GBP", "CHF", "SEK", "NOK"], 2)
        code = f'def {fn}(amount, currency="{wrong}"):\n    return f"{{amount:.2f}} {{currency}}"\n'
        x = rng.randrange(1, 500)
        issue = rng.choice([f"{fn}({x}) shows {_call(code, fn, x)!r}; the shop's default currency is {right}.",
                            f"{fn}({x}) comes out in {wrong} instead of {right}; no currency was given.",
                            f"{fn}() picks the wrong currency when none is given: expected '{x:.2f} {right}'."])
        tests = [("default_currency", [f'self.assertEqual({fn}({x}), "{x:.2f} {right}")']),
                 ("explicit_currency", [f'self.assertEqual({fn}(2.5, "{wrong}"), "2.50 {wrong}")']),
                 ("rounding", [f'self.assertTrue({fn}(1.005).startswith("1.0"))'])]
        old, new = f'currency="{wrong}"', f'currency="{right}"'
    rng.shuffle(tests)
    return _module(rng, ["helpers", "formatting", "paging", "utils"], code, [fn], tests, issue, old, new)


def make_missing_normalize(rng: random.Random) -> SweRepo:
    fn, param, same, samples = rng.choice([
        ("normalize_email", "email", "same_email", [f"{n}@{w}.org" for n in NAMES[:6] for w in WORDS[:3]]),
        ("clean_username", "username", "same_user", NAMES), ("tag_key", "tag", "same_tag", WORDS),
        ("city_key", "city", "same_city", ["paris", "oslo", "lima", "quito", "cairo", "dublin", "porto"])])
    strip_missing = rng.random() < 0.5
    old = f"return {param}.lower()" if strip_missing else f"return {param}.strip()"
    code = f"def {fn}({param}):\n    {old}\n\n\ndef {same}(a, b):\n    return {fn}(a) == {fn}(b)\n"
    a, b = rng.sample(samples, 2)
    messy = f"  {a.title()} " if strip_missing else f" {a.upper()}"
    issue = rng.choice([f"{fn}({messy!r}) returns {_call(code, fn, messy)!r}; it should be {a!r}.",
                        f"{same}() says {messy!r} and {a!r} differ, but they are the same {param}.",
                        f"Duplicates slip through: {messy!r} is not treated as {a!r}."])
    tests = [("messy", [f"self.assertEqual({fn}({messy!r}), {a!r})"]),
             ("clean", [f"self.assertEqual({fn}({b!r}), {b!r})"]),
             ("same", [f"self.assertTrue({same}({messy!r}, {a!r}))", f"self.assertFalse({same}({a!r}, {b!r}))"])]
    rng.shuffle(tests)
    return _module(rng, ["keys", "cleaning", "normalize", "identity"], code, [fn, same], tests, issue,
                   old, f"return {param}.strip().lower()")


def make_swapped_arguments(rng: random.Random) -> SweRepo:
    fn, a, b = rng.choice([("progress", "done", "total"), ("hit_rate", "hits", "shots"),
                           ("pass_rate", "passed", "taken"), ("occupancy", "booked", "rooms"),
                           ("completion", "finished", "assigned")])
    helper = rng.choice(["percent", "percentage", "share_of"])
    code = (f"def {helper}(part, whole):\n    return round(100 * part / whole, 1)\n\n\n"
            f"def {fn}({a}, {b}):\n    return {helper}({b}, {a})\n")
    x, whole = rng.choice([(1, 4), (1, 2), (3, 4), (1, 5), (2, 5), (1, 8), (3, 8), (1, 10)])
    scale = rng.randrange(1, 5)
    x, whole = x * scale, whole * scale
    want = round(100 * x / whole, 1)
    issue = rng.choice([f"{fn}({x}, {whole}) reports {_call(code, fn, x, whole)}% instead of {want}%.",
                        f"{fn}() gives numbers over 100: {x} {a} out of {whole} should be {want}%.",
                        f"Wrong {fn.replace('_', ' ')}: expected {want} for {a}={x}, {b}={whole}."])
    n = rng.randrange(2, 30)
    tests = [("part", [f"self.assertEqual({fn}({x}, {whole}), {want})"]),
             ("all", [f"self.assertEqual({fn}({n}, {n}), 100.0)"]),
             (helper, [f"self.assertEqual({helper}(1, 4), 25.0)"])]
    return _module(rng, ["rates", "progress", "ratios", "stats"], code, [fn, helper], tests, issue,
                   f"{helper}({b}, {a})", f"{helper}({a}, {b})")


def make_wrong_key(rng: random.Random) -> SweRepo:
    fn, coll, item, right, wrong, values = rng.choice([
        ("emails", "users", "user", "email", "mail", [f"{n}@{w}.org" for n in NAMES[:5] for w in WORDS[:2]]),
        ("titles", "books", "book", "title", "name", [w.title() for w in WORDS]),
        ("prices", "products", "product", "price", "cost", list(range(3, 90))),
        ("cities", "addresses", "address", "city", "town", ["Paris", "Oslo", "Lima", "Quito", "Cairo"]),
        ("phone_numbers", "contacts", "contact", "phone", "tel", [f"555-{i:04d}" for i in range(100, 140)])])
    code = (f"def {fn}({coll}):\n    return [{item}[\"{wrong}\"] for {item} in {coll}]\n\n\n"
            f"def find({coll}, value):\n    for {item} in {coll}:\n        if {item}[\"{right}\"] == value:\n"
            f"            return {item}\n    return None\n")
    picked = rng.sample(values, 2)
    records = [{"id": i + 1, right: v} for i, v in enumerate(picked)]
    issue = rng.choice([f"{fn}() raises KeyError for {coll} like {records!r}, though find() works on them.",
                        f"{fn}({records!r}) crashes instead of returning {picked!r}.",
                        f"Listing the {right} of each of the {coll} fails with a KeyError; expected {picked!r}."])
    tests = [(fn, [f"self.assertEqual({fn}({records!r}), {picked!r})"]),
             ("find", [f"self.assertEqual(find({records!r}, {picked[1]!r})['id'], 2)"]),
             ("empty", [f"self.assertEqual({fn}([]), [])"])]
    rng.shuffle(tests)
    return _module(rng, ["records", "lookup", "directory", "catalog"], code, [fn, "find"], tests, issue,
                   f'{item}["{wrong}"]', f'{item}["{right}"]')


def make_wrong_return(rng: random.Random) -> SweRepo:
    if rng.random() < 0.5:
        fn, param = rng.choice([("unique_tags", "tags"), ("dedupe_emails", "emails"), ("distinct_names", "names"),
                                ("first_visits", "visitors")])
        body = ("    seen = set()\n    out = []\n    for x in {p}:\n        if x not in seen:\n"
                "            seen.add(x)\n            out.append(x)\n").format(p=param)
        pool = {"tags": WORDS, "emails": [f"{n}@{w}.org" for n in NAMES for w in WORDS[:2]]}.get(param, NAMES)
        a, b, c = rng.sample(pool, 3)
        given, want, plain = [a, b, a, c, b], [a, b, c], [c, a]
        what = "keeps the duplicates"
    else:
        fn, param = rng.choice([("running_total", "amounts"), ("cumulative_sales", "sales"),
                                ("balance_history", "deposits")])
        body = f"    total = 0\n    out = []\n    for x in {param}:\n        total += x\n        out.append(total)\n"
        given = [rng.randrange(1, 20) for _ in range(3)]
        want, plain = [sum(given[:i + 1]) for i in range(3)], [rng.randrange(1, 20)]
        what = "returns the input unchanged"
    code = f"def {fn}({param}):\n{body}    return {param}\n"
    issue = rng.choice([f"{fn}({given!r}) should be {want!r}; it returns {given!r}.",
                        f"{fn}() {what}: for {given!r} I expect {want!r}.",
                        f"{fn}() looks like it does nothing. Try it with {given!r}."])
    tests = [("result", [f"self.assertEqual({fn}({given!r}), {want!r})"]),
             ("single", [f"self.assertEqual({fn}({plain!r}), {plain!r})"]),
             ("empty", [f"self.assertEqual({fn}([]), [])"])]
    rng.shuffle(tests)
    return _module(rng, ["lists", "history", "collect", "sequence"], code, [fn], tests, issue,
                   f"return {param}\n", "return out\n")


def make_sort_order(rng: random.Random) -> SweRepo:
    fn, coll, field, descending, first = rng.choice([
        ("cheapest_first", "products", "price", False, "the cheapest"),
        ("by_deadline", "tasks", "due", False, "the one due soonest"),
        ("shortest_first", "tracks", "length", False, "the shortest"),
        ("leaderboard", "players", "score", True, "the highest score"),
        ("most_popular", "posts", "likes", True, "the most liked"),
        ("biggest_first", "files", "size", True, "the biggest")])
    buggy, fixed = f'item["{field}"], reverse=True)', f'item["{field}"])'
    if descending:
        buggy, fixed = fixed, buggy
    code = f"def {fn}({coll}):\n    return sorted({coll}, key=lambda item: {buggy}\n"
    names, nums = rng.sample(WORDS, 3), rng.sample(range(1, 100), 3)
    items = [{"name": n, field: v} for n, v in zip(names, nums)]
    want = [d["name"] for d in sorted(items, key=lambda d: d[field], reverse=descending)]
    issue = rng.choice([f"{fn}() puts {first} last instead of first ({want[0]!r} in my list).",
                        f"The order from {fn}() is backwards: for these {coll} I expect {want!r}.",
                        f"{fn}() should start with {first} ({want[0]!r}), but the list comes out the other way round."])
    tests = [("order", [f"ordered = {fn}({items!r})", f"self.assertEqual([x['name'] for x in ordered], {want!r})"]),
             ("single", [f"self.assertEqual(len({fn}([{items[0]!r}])), 1)"]),
             ("empty", [f"self.assertEqual({fn}([]), [])"])]
    rng.shuffle(tests)
    return _module(rng, ["sorting", "views", "ordering", "listing"], code, [fn], tests, issue, buggy, fixed)


def make_unit_factor(rng: random.Random) -> SweRepo:
    fn, const, factor = rng.choice([
        ("minutes_to_seconds", "SECONDS_PER_MINUTE", 60), ("hours_to_minutes", "MINUTES_PER_HOUR", 60),
        ("days_to_hours", "HOURS_PER_DAY", 24), ("feet_to_inches", "INCHES_PER_FOOT", 12),
        ("kilograms_to_grams", "GRAMS_PER_KILOGRAM", 1000), ("weeks_to_days", "DAYS_PER_WEEK", 7),
        ("meters_to_centimeters", "CENTIMETERS_PER_METER", 100)])
    wrong = rng.choice([w for w in (10, 12, 24, 60, 100, 1000) if w != factor])
    bad_constant = rng.random() < 0.5
    code = (f"{const} = {wrong if bad_constant else factor}\n\n\n"
            f"def {fn}(value):\n    return value {'*' if bad_constant else '/'} {const}\n")
    x = rng.randrange(2, 10)
    got = _call(code, fn, x)
    issue = rng.choice([f"{fn}({x}) gives {got}; it should be {x * factor}.",
                        f"Conversions from {fn}() are off: {x} should convert to {x * factor}, not {got}.",
                        f"{fn}() is wrong for every value but 0: {x} gives {got}."])
    y = rng.randrange(11, 40)
    tests = [("one", [f"self.assertEqual({fn}(1), {factor})"]), ("zero", [f"self.assertEqual({fn}(0), 0)"]),
             ("many", [f"self.assertEqual({fn}({y}), {y * factor})"])]
    rng.shuffle(tests)
    old, new = ((f"{const} = {wrong}", f"{const} = {factor}") if bad_constant
                else (f"value / {const}", f"value * {const}"))
    return _module(rng, ["units", "convert", "measures", "time_units"], code, [fn], tests, issue, old, new)


def make_join_separator(rng: random.Random) -> SweRepo:
    fn, param, right, what = rng.choice([
        ("breadcrumb", "parts", " > ", "a > between the parts"), ("slug", "words", "-", "a dash between words"),
        ("join_path", "parts", "/", "a slash between the parts"), ("tag_line", "tags", ", ", "a comma and a space"),
        ("csv_row", "cells", ",", "a plain comma between cells"), ("title_line", "words", " ", "one space")])
    wrong = rng.choice([s for s in (" > ", "-", "/", ", ", ",", " ", "_", " | ") if s != right])
    code = (f'SEPARATOR = "{wrong}"\n\n\ndef {fn}({param}):\n'
            f"    return SEPARATOR.join(p.strip() for p in {param} if p.strip())\n")
    words = rng.sample(WORDS, 3)
    want = right.join(words)
    issue = rng.choice([f"{fn}({words!r}) returns {_call(code, fn, words)!r}, expected {want!r}.",
                        f"{fn}({words!r}) joins with the wrong separator; it should put {what}.",
                        f"Output of {fn}() looks wrong: I want {want!r} for {words!r}."])
    tests = [("joined", [f"self.assertEqual({fn}({words!r}), {want!r})"]),
             ("single", [f"self.assertEqual({fn}([' {words[0]} ']), {words[0]!r})"]),
             ("blank_parts", [f"self.assertEqual({fn}(['', '  ']), '')"])]
    rng.shuffle(tests)
    return _module(rng, ["text", "joining", "labels", "format"], code, [fn], tests, issue,
                   f'SEPARATOR = "{wrong}"', f'SEPARATOR = "{right}"')


_TAGS = {"inclusive_bound": "numeric", "range_end": "numeric", "wrong_operator": "numeric",
         "integer_division": "numeric", "unit_factor": "numeric", "top_n": "data", "wrong_default": "data",
         "swapped_arguments": "data", "wrong_key": "data", "wrong_return": "data", "sort_order": "data",
         "missing_normalize": "text", "join_separator": "text"}
FAMILIES: tuple[Family, ...] = tuple(
    Family(m.__name__.removeprefix("make_"), _TAGS[m.__name__.removeprefix("make_")], m) for m in (
        make_inclusive_bound, make_range_end, make_top_n, make_wrong_operator, make_integer_division,
        make_wrong_default, make_missing_normalize, make_swapped_arguments, make_wrong_key, make_wrong_return,
        make_sort_order, make_unit_factor, make_join_separator))
