"""Text-handling repos: slugs, word wrapping, markdown anchors, query strings, CSV lines."""

from __future__ import annotations

from envs.swe.repo import Fix, SweRepo, src

TAGS = ("text",)

SLUGIFY = SweRepo(
    name="slugify-edges",
    tags=TAGS,
    issue="""
Slugs come out with stray dashes: `slugify("Hello, World!")` gives "hello-world-" and `slugify("  Intro")` gives
"-intro", so our URLs end in "-" and unique_slug numbers them oddly ("hello-world--2"). A slug should never start or
end with the separator.
""",
    files={
        "textkit/__init__.py": src(r"""
from textkit.slug import slugify
from textkit.titles import unique_slug

__all__ = ["slugify", "unique_slug"]
"""),
        "textkit/slug.py": src(r"""
import re
import unicodedata


def ascii_fold(text):
    # "Café" -> "Cafe": drop accents, keep the base letters
    normalized = unicodedata.normalize("NFKD", text)
    return normalized.encode("ascii", "ignore").decode("ascii")


def slugify(text, sep="-"):
    text = ascii_fold(text).lower()
    return re.sub(r"[^a-z0-9]+", sep, text)
"""),
        "textkit/titles.py": src(r"""
from textkit.slug import slugify


def unique_slug(title, taken, sep="-"):
    base = slugify(title, sep)
    if base not in taken:
        return base
    n = 2
    while f"{base}{sep}{n}" in taken:
        n += 1
    return f"{base}{sep}{n}"
"""),
        "tests/__init__.py": "",
        "tests/test_slug.py": src(r"""
import unittest

from textkit import slugify, unique_slug


class SlugifyTest(unittest.TestCase):
    def test_simple(self):
        self.assertEqual(slugify("hello world"), "hello-world")

    def test_accents(self):
        self.assertEqual(slugify("Café Crème"), "cafe-creme")

    def test_punctuation_at_the_ends(self):
        self.assertEqual(slugify("Hello, World!"), "hello-world")
        self.assertEqual(slugify("  Intro"), "intro")

    def test_custom_separator(self):
        self.assertEqual(slugify("A  B  C!", sep="_"), "a_b_c")


class UniqueSlugTest(unittest.TestCase):
    def test_free(self):
        self.assertEqual(unique_slug("Post", set()), "post")

    def test_numbered(self):
        self.assertEqual(unique_slug("Hello, World!", {"hello-world", "hello-world-2"}), "hello-world-3")
"""),
    },
    fix=(Fix("textkit/slug.py", 'return re.sub(r"[^a-z0-9]+", sep, text)',
             'return re.sub(r"[^a-z0-9]+", sep, text).strip(sep)'),),
)

WORDWRAP = SweRepo(
    name="wordwrap-last-line",
    tags=TAGS,
    issue="""
wrap() loses text. `wrap("the quick brown fox", 10)` returns ["the quick"] and the rest of the sentence is gone;
justify() of the result is then missing the last line as well. Short inputs that fit on one line come back empty.
""",
    files={
        "wrapper/__init__.py": "",
        "wrapper/wrap.py": src(r"""
def wrap(text, width):
    '''Greedy word wrap: lines of at most `width` characters (a longer word gets a line of its own).'''
    lines, current = [], ""
    for word in text.split():
        candidate = f"{current} {word}" if current else word
        if len(candidate) <= width:
            current = candidate
        else:
            if current:
                lines.append(current)
            current = word
    return lines
"""),
        "wrapper/justify.py": src(r"""
from wrapper.wrap import wrap


def justify_line(line, width):
    words = line.split()
    if len(words) == 1:
        return line.ljust(width)
    gaps = len(words) - 1
    spaces = width - sum(len(w) for w in words)
    out = ""
    for i, word in enumerate(words[:-1]):
        out += word + " " * (spaces // gaps + (1 if i < spaces % gaps else 0))
    return out + words[-1]


def justify(text, width):
    lines = wrap(text, width)
    return [justify_line(line, width) for line in lines[:-1]] + lines[-1:]
"""),
        "tests/__init__.py": "",
        "tests/test_wrap.py": src(r"""
import unittest

from wrapper.justify import justify, justify_line
from wrapper.wrap import wrap


class WrapTest(unittest.TestCase):
    def test_sentence(self):
        self.assertEqual(wrap("the quick brown fox", 10), ["the quick", "brown fox"])

    def test_fits_on_one_line(self):
        self.assertEqual(wrap("hello", 10), ["hello"])

    def test_long_word(self):
        self.assertEqual(wrap("a extraordinarily b", 5), ["a", "extraordinarily", "b"])

    def test_empty(self):
        self.assertEqual(wrap("", 10), [])


class JustifyTest(unittest.TestCase):
    def test_line(self):
        self.assertEqual(justify_line("a b c", 7), "a  b  c")

    def test_paragraph(self):
        self.assertEqual(justify("aa bb cc dd", 6), ["aa  bb", "cc dd"])
"""),
    },
    fix=(Fix("wrapper/wrap.py", "            current = word\n    return lines\n",
             "            current = word\n    if current:\n        lines.append(current)\n    return lines\n"),),
)

MDTOC = SweRepo(
    name="mdtoc-duplicate-anchors",
    tags=TAGS,
    issue="""
The table of contents links to the wrong anchors when two headings have the same text. For a document with two
"## Usage" sections the second link is "#usage-2", but the rendered page (GitHub style) calls it "#usage-1", so the
link goes nowhere.
""",
    files={
        "mdtoc/__init__.py": "",
        "mdtoc/headings.py": src(r"""
import re

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def headings(markdown):
    '''(level, text) of every ATX heading outside fenced code blocks.'''
    out, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        m = HEADING.match(line)
        if m and not fenced:
            out.append((len(m.group(1)), m.group(2)))
    return out
"""),
        "mdtoc/anchors.py": src(r"""
import re


def anchor(text):
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(texts):
    '''GitHub-style anchors: a repeated anchor gets -1, -2, ... in order.'''
    seen, out = {}, []
    for text in texts:
        a = anchor(text)
        seen[a] = seen.get(a, 0) + 1
        if seen[a] > 1:
            a = f"{a}-{seen[a]}"
        out.append(a)
    return out
"""),
        "mdtoc/toc.py": src(r"""
from mdtoc.anchors import anchors
from mdtoc.headings import headings


def toc(markdown, max_level=3):
    found = [(level, text) for level, text in headings(markdown) if level <= max_level]
    links = anchors([text for _, text in found])
    return "\n".join(f"{'  ' * (level - 1)}- [{text}](#{a})" for (level, text), a in zip(found, links))
"""),
        "tests/__init__.py": "",
        "tests/test_toc.py": src(r"""
import unittest

from mdtoc.anchors import anchor, anchors
from mdtoc.headings import headings
from mdtoc.toc import toc

DOC = '''# Guide
## Install
## Usage
```
# not a heading
```
## Usage
### Notes!
'''


class AnchorTest(unittest.TestCase):
    def test_anchor(self):
        self.assertEqual(anchor("Notes & Tips!"), "notes--tips")

    def test_duplicates(self):
        self.assertEqual(anchors(["Usage", "Usage", "Usage"]), ["usage", "usage-1", "usage-2"])


class TocTest(unittest.TestCase):
    def test_headings_skip_code(self):
        self.assertEqual(len(headings(DOC)), 5)

    def test_toc(self):
        self.assertEqual(toc(DOC, max_level=2).splitlines(), [
            "- [Guide](#guide)", "  - [Install](#install)", "  - [Usage](#usage)", "  - [Usage](#usage-1)"])
"""),
    },
    fix=(Fix("mdtoc/anchors.py", '        seen[a] = seen.get(a, 0) + 1\n        if seen[a] > 1:\n'
             '            a = f"{a}-{seen[a]}"\n',
             '        count = seen.get(a, 0)\n        seen[a] = count + 1\n        if count:\n'
             '            a = f"{a}-{count}"\n'),),
)

QUERYSTRING = SweRepo(
    name="querystring-plus",
    tags=TAGS,
    split="eval",
    issue="""
Search terms arrive with plus signs in them. A form posts `q=red+shoes&size=42`, and parse_query gives
{"q": ["red+shoes"], ...}: in a query string a "+" stands for a space. Percent escapes like %2B (a literal plus)
must keep working. Round trips through build_query should give back what went in.
""",
    files={
        "qs/__init__.py": "",
        "qs/parse.py": src(r"""
from urllib.parse import unquote


def parse_query(query):
    '''"a=1&b=x&a=2" -> {"a": ["1", "2"], "b": ["x"]}; a key without "=" gets "".'''
    out = {}
    for pair in query.lstrip("?").split("&"):
        if not pair:
            continue
        key, _, value = pair.partition("=")
        out.setdefault(unquote(key), []).append(unquote(value))
    return out


def first(query, key, default=None):
    return parse_query(query).get(key, [default])[0]
"""),
        "qs/build.py": src(r"""
from urllib.parse import quote_plus


def build_query(params):
    pairs = []
    for key, values in params.items():
        if isinstance(values, str):
            values = [values]
        for value in values:
            pairs.append(f"{quote_plus(key)}={quote_plus(value)}")
    return "&".join(pairs)
"""),
        "tests/__init__.py": "",
        "tests/test_qs.py": src(r"""
import unittest

from qs.build import build_query
from qs.parse import first, parse_query


class ParseTest(unittest.TestCase):
    def test_repeated(self):
        self.assertEqual(parse_query("?a=1&b=x&a=2&c"), {"a": ["1", "2"], "b": ["x"], "c": [""]})

    def test_plus_is_space(self):
        self.assertEqual(parse_query("q=red+shoes&size=42"), {"q": ["red shoes"], "size": ["42"]})

    def test_percent(self):
        self.assertEqual(first("x=1%2B1%3D2", "x"), "1+1=2")

    def test_round_trip(self):
        params = {"name": ["Ada Lovelace"], "expr": ["a+b & c"]}
        self.assertEqual(parse_query(build_query(params)), params)
"""),
    },
    fix=(Fix("qs/parse.py", "from urllib.parse import unquote\n", "from urllib.parse import unquote_plus as unquote\n"),),
)

CSVLINE = SweRepo(
    name="csvline-trailing-field",
    tags=TAGS,
    issue="""
Rows that end in an empty column are one field short. `split_line("a,b,")` returns ["a", "b"] instead of
["a", "b", ""], and read_rows then rejects the row ("expected 3 fields, got 2") although the file is fine. An empty
line should be one empty field, as in Python's csv module.
""",
    files={
        "csvkit/__init__.py": "",
        "csvkit/line.py": src(r"""
def split_line(line, sep=","):
    '''Split one CSV line: double quotes group, "" inside quotes is a literal quote.'''
    fields, current, quoted, i = [], [], False, 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"' and line[i + 1:i + 2] == '"':
                current.append('"')
                i += 1
            elif ch == '"':
                quoted = False
            else:
                current.append(ch)
        elif ch == '"':
            quoted = True
        elif ch == sep:
            fields.append("".join(current))
            current = []
        else:
            current.append(ch)
        i += 1
    if current:
        fields.append("".join(current))
    return fields
"""),
        "csvkit/rows.py": src(r"""
from csvkit.line import split_line


class RowError(ValueError):
    pass


def read_rows(text, sep=","):
    lines = text.splitlines()
    header = split_line(lines[0], sep)
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        fields = split_line(line, sep)
        if len(fields) != len(header):
            raise RowError(f"line {number}: expected {len(header)} fields, got {len(fields)}")
        rows.append(dict(zip(header, fields)))
    return rows
"""),
        "tests/__init__.py": "",
        "tests/test_csv.py": src(r"""
import unittest

from csvkit.line import split_line
from csvkit.rows import RowError, read_rows


class SplitTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(split_line("a,b,c"), ["a", "b", "c"])

    def test_quotes(self):
        self.assertEqual(split_line('"x, y","say ""hi""' + '"'), ["x, y", 'say "hi"'])

    def test_empty_fields(self):
        self.assertEqual(split_line("a,b,"), ["a", "b", ""])
        self.assertEqual(split_line(",,"), ["", "", ""])
        self.assertEqual(split_line(""), [""])


class RowsTest(unittest.TestCase):
    def test_rows(self):
        rows = read_rows("name,city,note\nann,oslo,\nbob,rome,hi\n")
        self.assertEqual(rows[0], {"name": "ann", "city": "oslo", "note": ""})

    def test_bad_row(self):
        with self.assertRaises(RowError):
            read_rows("a,b\n1,2,3\n")
"""),
    },
    fix=(Fix("csvkit/line.py", "    if current:\n        fields.append", "    fields.append"),),
)

REPOS = [SLUGIFY, WORDWRAP, MDTOC, QUERYSTRING, CSVLINE]
