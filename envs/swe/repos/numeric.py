"""Numeric repos: roman numerals, unit conversion, money rounding, histograms, medians, versions, matrices."""

from __future__ import annotations

from envs.swe.repo import Fix, SweRepo, src

TAGS = ("numeric",)

ROMAN = SweRepo(
    name="roman-subtractive",
    tags=TAGS,
    issue="""
from_roman() misreads numerals with a smaller symbol before a larger one: "IV" gives 6, "XC" gives 110 and "MCMXC"
gives 2210 instead of 1990. to_roman() is fine, so round trips fail for every year with a 4 or a 9 in it.
""",
    files={
        "numerals/__init__.py": "",
        "numerals/symbols.py": src(r"""
VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
          (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
SYMBOL_VALUE = {s: v for v, s in VALUES if len(s) == 1}
"""),
        "numerals/roman.py": src(r"""
from numerals.symbols import SYMBOL_VALUE, VALUES


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError(f"{n} has no roman numeral")
    out = []
    for value, symbol in VALUES:
        count, n = divmod(n, value)
        out.append(symbol * count)
    return "".join(out)


def from_roman(text):
    text = text.strip().upper()
    if not text or any(ch not in SYMBOL_VALUE for ch in text):
        raise ValueError(f"not a roman numeral: {text!r}")
    total = 0
    for ch in text:
        total += SYMBOL_VALUE[ch]
    return total
"""),
        "tests/__init__.py": "",
        "tests/test_roman.py": src(r"""
import unittest

from numerals.roman import from_roman, to_roman


class RomanTest(unittest.TestCase):
    def test_to_roman(self):
        self.assertEqual(to_roman(1990), "MCMXC")
        self.assertEqual(to_roman(2024), "MMXXIV")

    def test_from_roman_additive(self):
        self.assertEqual(from_roman("MMXXIII"), 2023)

    def test_from_roman_subtractive(self):
        self.assertEqual(from_roman("IV"), 4)
        self.assertEqual(from_roman("mcmxc"), 1990)

    def test_round_trip(self):
        for n in range(1, 400):
            self.assertEqual(from_roman(to_roman(n)), n)

    def test_invalid(self):
        with self.assertRaises(ValueError):
            from_roman("XIZ")
"""),
    },
    fix=(Fix("numerals/roman.py", "    for ch in text:\n        total += SYMBOL_VALUE[ch]\n",
             "    for ch, nxt in zip(text, text[1:] + \" \"):\n"
             "        value = SYMBOL_VALUE[ch]\n"
             "        total += -value if value < SYMBOL_VALUE.get(nxt, 0) else value\n"),),
)

TEMPERATURE = SweRepo(
    name="units-fahrenheit",
    tags=TAGS,
    issue="""
Temperatures converted from Fahrenheit are way off: fahrenheit_to_celsius(212) gives 194.2 (water boils at 100 C),
and convert(98.6, "F", "K") is nonsense too. Celsius to Fahrenheit looks right.
""",
    files={
        "units/__init__.py": "",
        "units/temperature.py": src(r"""
ABSOLUTE_ZERO_C = -273.15


def celsius_to_fahrenheit(c):
    return c * 9 / 5 + 32


def fahrenheit_to_celsius(f):
    return f - 32 * 5 / 9


def celsius_to_kelvin(c):
    if c < ABSOLUTE_ZERO_C:
        raise ValueError("below absolute zero")
    return c - ABSOLUTE_ZERO_C
"""),
        "units/convert.py": src(r"""
from units.temperature import celsius_to_fahrenheit, celsius_to_kelvin, fahrenheit_to_celsius

TO_C = {"C": lambda x: x, "F": fahrenheit_to_celsius, "K": lambda x: x - 273.15}
FROM_C = {"C": lambda x: x, "F": celsius_to_fahrenheit, "K": celsius_to_kelvin}


def convert(value, unit_from, unit_to):
    return round(FROM_C[unit_to](TO_C[unit_from](value)), 2)
"""),
        "tests/__init__.py": "",
        "tests/test_temperature.py": src(r"""
import unittest

from units.convert import convert
from units.temperature import celsius_to_fahrenheit, fahrenheit_to_celsius


class TemperatureTest(unittest.TestCase):
    def test_c_to_f(self):
        self.assertAlmostEqual(celsius_to_fahrenheit(100), 212)

    def test_f_to_c(self):
        self.assertAlmostEqual(fahrenheit_to_celsius(212), 100)
        self.assertAlmostEqual(fahrenheit_to_celsius(-40), -40)

    def test_convert(self):
        self.assertEqual(convert(98.6, "F", "K"), 310.15)
        self.assertEqual(convert(0, "K", "C"), -273.15)

    def test_below_absolute_zero(self):
        with self.assertRaises(ValueError):
            convert(-300, "C", "K")
"""),
    },
    fix=(Fix("units/temperature.py", "return f - 32 * 5 / 9", "return (f - 32) * 5 / 9"),),
)

MONEY = SweRepo(
    name="money-half-up",
    tags=TAGS,
    issue="""
Invoice totals are a cent short now and then. An item at 0.125 with no discount is billed as 12 cents, and a 2.675
line is billed as 267 cents; accounting rounds half a cent up (half away from zero), always. Totals should be the sum
of the rounded lines.
""",
    files={
        "billing/__init__.py": "",
        "billing/money.py": src(r"""
from decimal import Decimal


def to_cents(amount):
    '''A Decimal amount in currency units -> whole cents, half a cent rounded away from zero.'''
    return int(round(Decimal(amount) * 100))


def format_cents(cents):
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100}.{abs(cents) % 100:02d}"
"""),
        "billing/invoice.py": src(r"""
from decimal import Decimal

from billing.money import format_cents, to_cents


def line_cents(price, quantity, discount_percent=0):
    amount = Decimal(price) * quantity * (100 - Decimal(discount_percent)) / 100
    return to_cents(amount)


def invoice_total(lines):
    '''lines: (price as a string, quantity, discount percent).'''
    return format_cents(sum(line_cents(*line) for line in lines))
"""),
        "tests/__init__.py": "",
        "tests/test_invoice.py": src(r"""
import unittest
from decimal import Decimal

from billing.invoice import invoice_total, line_cents
from billing.money import format_cents, to_cents


class MoneyTest(unittest.TestCase):
    def test_whole(self):
        self.assertEqual(to_cents(Decimal("12.34")), 1234)

    def test_half_cent_rounds_up(self):
        self.assertEqual(to_cents(Decimal("0.125")), 13)
        self.assertEqual(to_cents(Decimal("2.675")), 268)
        self.assertEqual(to_cents(Decimal("-0.125")), -13)

    def test_format(self):
        self.assertEqual(format_cents(-705), "-7.05")


class InvoiceTest(unittest.TestCase):
    def test_discount(self):
        self.assertEqual(line_cents("19.99", 3, 10), 5397)

    def test_total(self):
        self.assertEqual(invoice_total([("0.125", 1, 0), ("2.675", 1, 0), ("10", 2, 50)]), "12.81")
"""),
    },
    fix=(Fix("billing/money.py", "from decimal import Decimal\n", "from decimal import ROUND_HALF_UP, Decimal\n"),
         Fix("billing/money.py", "return int(round(Decimal(amount) * 100))",
             'return int((Decimal(amount) * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))')),
)

HISTOGRAM = SweRepo(
    name="histogram-top-edge",
    tags=TAGS,
    split="eval",
    issue="""
histogram() crashes with IndexError when a value equals the upper bound: histogram([0, 5, 10], lo=0, hi=10, bins=2)
raises instead of giving [1, 2]. The last bin is closed ([5, 10]); values outside [lo, hi] are ignored.
""",
    files={
        "binning/__init__.py": "",
        "binning/edges.py": src(r"""
def bin_edges(lo, hi, bins):
    if bins < 1 or hi <= lo:
        raise ValueError("need bins >= 1 and hi > lo")
    width = (hi - lo) / bins
    return [lo + i * width for i in range(bins)] + [hi]


def bin_index(value, lo, hi, bins):
    '''The bin of `value`, or None when it is outside [lo, hi].'''
    if value < lo or value > hi:
        return None
    return int((value - lo) / (hi - lo) * bins)
"""),
        "binning/histogram.py": src(r"""
from binning.edges import bin_index


def histogram(values, lo, hi, bins):
    counts = [0] * bins
    for v in values:
        i = bin_index(v, lo, hi, bins)
        if i is not None:
            counts[i] += 1
    return counts


def render(counts, width=20):
    top = max(counts) or 1
    return ["#" * round(c / top * width) for c in counts]
"""),
        "tests/__init__.py": "",
        "tests/test_histogram.py": src(r"""
import unittest

from binning.edges import bin_edges, bin_index
from binning.histogram import histogram, render


class HistogramTest(unittest.TestCase):
    def test_edges(self):
        self.assertEqual(bin_edges(0, 10, 4), [0, 2.5, 5, 7.5, 10])

    def test_index(self):
        self.assertEqual(bin_index(2.4, 0, 10, 4), 0)
        self.assertEqual(bin_index(10, 0, 10, 4), 3)
        self.assertIsNone(bin_index(10.5, 0, 10, 4))

    def test_histogram(self):
        self.assertEqual(histogram([0, 5, 10], lo=0, hi=10, bins=2), [1, 2])
        self.assertEqual(histogram([-1, 0.5, 1.5, 3, 11], lo=0, hi=3, bins=3), [1, 1, 1])

    def test_render(self):
        self.assertEqual(render([1, 2], width=4), ["##", "####"])
"""),
    },
    fix=(Fix("binning/edges.py", "    return int((value - lo) / (hi - lo) * bins)",
             "    return min(int((value - lo) / (hi - lo) * bins), bins - 1)"),),
)

MEDIAN = SweRepo(
    name="stats-even-median",
    tags=TAGS,
    issue="""
summary() reports the wrong median for an even number of values: median([1, 2, 3, 4]) is 3, it should be 2.5 (the
mean of the two middle values). The IQR in the summary is wrong for the same inputs since it uses median().
""",
    files={
        "numstats/__init__.py": "",
        "numstats/center.py": src(r"""
def mean(values):
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("median of no values")
    s = sorted(values)
    return s[len(s) // 2]
"""),
        "numstats/summary.py": src(r"""
from numstats.center import mean, median


def quartiles(values):
    s = sorted(values)
    half = len(s) // 2
    lower, upper = s[:half], s[half + len(s) % 2:]
    return median(lower), median(s), median(upper)


def summary(values):
    q1, q2, q3 = quartiles(values)
    return {"n": len(values), "mean": mean(values), "median": q2, "iqr": q3 - q1,
            "min": min(values), "max": max(values)}
"""),
        "tests/__init__.py": "",
        "tests/test_summary.py": src(r"""
import unittest

from numstats.center import mean, median
from numstats.summary import quartiles, summary


class CenterTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 6]), 3)

    def test_median_odd(self):
        self.assertEqual(median([5, 1, 3]), 3)

    def test_median_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_empty(self):
        with self.assertRaises(ValueError):
            median([])


class SummaryTest(unittest.TestCase):
    def test_quartiles(self):
        self.assertEqual(quartiles([1, 2, 3, 4, 5, 6, 7, 8]), (2.5, 4.5, 6.5))

    def test_summary(self):
        self.assertEqual(summary([1, 3, 5, 7, 9])["iqr"], 6)
"""),
    },
    fix=(Fix("numstats/center.py", "    return s[len(s) // 2]\n",
             "    mid = len(s) // 2\n    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2\n"),),
)

SEMVER = SweRepo(
    name="semver-numeric-compare",
    tags=TAGS,
    split="eval",
    issue="""
latest() picks the wrong release: from ["1.9.0", "1.10.0", "1.2.3"] it returns "1.9.0". Versions must compare part by
part as numbers (1.10.0 is newer than 1.9.0). satisfies(">=1.10", "1.9.5") is True as well, which is wrong.
""",
    files={
        "versions/__init__.py": "",
        "versions/semver.py": src(r"""
def parse(version):
    '''"1.2.3" -> a key that orders versions; missing parts count as 0 ("1.2" == "1.2.0").'''
    parts = version.strip().lstrip("v").split(".")
    while len(parts) < 3:
        parts.append("0")
    return tuple(parts)


def compare(a, b):
    pa, pb = parse(a), parse(b)
    return (pa > pb) - (pa < pb)
"""),
        "versions/select.py": src(r"""
import operator

from versions.semver import compare

OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}


def satisfies(spec, version):
    for op in sorted(OPS, key=len, reverse=True):
        if spec.startswith(op):
            return OPS[op](compare(version, spec[len(op):]), 0)
    return compare(version, spec) == 0


def latest(versions, spec=None):
    best = None
    for v in versions:
        if spec is not None and not satisfies(spec, v):
            continue
        if best is None or compare(v, best) > 0:
            best = v
    return best
"""),
        "tests/__init__.py": "",
        "tests/test_semver.py": src(r"""
import unittest

from versions.select import latest, satisfies
from versions.semver import compare


class CompareTest(unittest.TestCase):
    def test_equal(self):
        self.assertEqual(compare("1.2", "v1.2.0"), 0)

    def test_numeric_parts(self):
        self.assertEqual(compare("1.10.0", "1.9.0"), 1)
        self.assertEqual(compare("2.0.0", "10.0.0"), -1)


class SelectTest(unittest.TestCase):
    def test_latest(self):
        self.assertEqual(latest(["1.9.0", "1.10.0", "1.2.3"]), "1.10.0")

    def test_spec(self):
        self.assertFalse(satisfies(">=1.10", "1.9.5"))
        self.assertEqual(latest(["1.9.0", "1.10.0", "2.0.0"], "<2"), "1.10.0")
"""),
    },
    fix=(Fix("versions/semver.py", "    return tuple(parts)", "    return tuple(int(p) for p in parts)"),),
)

MATRIX = SweRepo(
    name="matrix-transpose-shape",
    tags=TAGS,
    issue="""
transpose() only works for square matrices. transpose([[1, 2, 3], [4, 5, 6]]) returns [[1, 4], [2, 5]] and drops the
last column; matmul() built on it then gives wrong products or an IndexError for non-square inputs.
""",
    files={
        "linalg/__init__.py": "",
        "linalg/shape.py": src(r"""
def shape(m):
    rows = len(m)
    cols = len(m[0]) if rows else 0
    if any(len(r) != cols for r in m):
        raise ValueError("ragged matrix")
    return rows, cols


def transpose(m):
    rows, _ = shape(m)
    return [[m[i][j] for i in range(rows)] for j in range(rows)]
"""),
        "linalg/ops.py": src(r"""
from linalg.shape import shape, transpose


def dot(u, v):
    return sum(a * b for a, b in zip(u, v))


def matmul(a, b):
    if shape(a)[1] != shape(b)[0]:
        raise ValueError("shapes do not match")
    cols = transpose(b)
    return [[dot(row, col) for col in cols] for row in a]
"""),
        "tests/__init__.py": "",
        "tests/test_matrix.py": src(r"""
import unittest

from linalg.ops import matmul
from linalg.shape import shape, transpose


class MatrixTest(unittest.TestCase):
    def test_shape(self):
        self.assertEqual(shape([[1, 2, 3], [4, 5, 6]]), (2, 3))
        with self.assertRaises(ValueError):
            shape([[1], [2, 3]])

    def test_transpose_square(self):
        self.assertEqual(transpose([[1, 2], [3, 4]]), [[1, 3], [2, 4]])

    def test_transpose_wide(self):
        self.assertEqual(transpose([[1, 2, 3], [4, 5, 6]]), [[1, 4], [2, 5], [3, 6]])

    def test_matmul(self):
        self.assertEqual(matmul([[1, 2, 3]], [[1], [2], [3]]), [[14]])
        self.assertEqual(matmul([[1], [2]], [[3, 4]]), [[3, 4], [6, 8]])
"""),
    },
    fix=(Fix("linalg/shape.py", "    rows, _ = shape(m)\n    return [[m[i][j] for i in range(rows)] for j in range(rows)]",
             "    rows, cols = shape(m)\n    return [[m[i][j] for i in range(rows)] for j in range(cols)]"),),
)

REPOS = [ROMAN, TEMPERATURE, MONEY, HISTOGRAM, MEDIAN, SEMVER, MATRIX]
