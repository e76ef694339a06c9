"""Systems-flavoured repos: config files, retry schedules, accounts, rate limiting, durations, periodic jobs."""

from __future__ import annotations

from envs.swe.repo import Fix, SweRepo, src

TAGS = ("systems",)

CONFIG = SweRepo(
    name="config-equals-in-value",
    tags=TAGS,
    issue="""
Loading our service config fails with "ValueError: too many values to unpack" as soon as a value contains "=", e.g.
`dsn = postgres://db/app?sslmode=require`. Everything after the first "=" on a line is the value.
""",
    files={
        "confkit/__init__.py": "",
        "confkit/parser.py": src(r"""
class ConfigError(ValueError):
    pass


def parse(text):
    '''INI-style text -> {section: {key: value}}; keys before any [section] go in "default".'''
    config, section = {"default": {}}, "default"
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.setdefault(section, {})
            continue
        if "=" not in line:
            raise ConfigError(f"line {number}: expected key = value")
        key, value = line.split("=")
        config[section][key.strip().lower()] = value.strip()
    return config
"""),
        "confkit/access.py": src(r"""
from confkit.parser import parse

TRUE = {"1", "yes", "true", "on"}


class Config:
    def __init__(self, text):
        self.data = parse(text)

    def get(self, section, key, default=None):
        return self.data.get(section, {}).get(key.lower(), default)

    def get_bool(self, section, key, default=False):
        value = self.get(section, key)
        return default if value is None else value.lower() in TRUE

    def get_int(self, section, key, default=0):
        value = self.get(section, key)
        return default if value is None else int(value)
"""),
        "tests/__init__.py": "",
        "tests/test_config.py": src(r"""
import unittest

from confkit.access import Config
from confkit.parser import ConfigError, parse

TEXT = '''
# service settings
name = api
[db]
DSN = postgres://db/app?sslmode=require
pool = 4
[flags]
debug = yes
'''


class ParserTest(unittest.TestCase):
    def test_sections(self):
        data = parse("a = 1\n[s]\nb = 2\n")
        self.assertEqual(data, {"default": {"a": "1"}, "s": {"b": "2"}})

    def test_equals_in_value(self):
        self.assertEqual(parse("q = a=b=c")["default"]["q"], "a=b=c")

    def test_bad_line(self):
        with self.assertRaises(ConfigError):
            parse("just words")


class AccessTest(unittest.TestCase):
    def test_typed(self):
        c = Config(TEXT)
        self.assertEqual(c.get("db", "dsn"), "postgres://db/app?sslmode=require")
        self.assertEqual(c.get_int("db", "pool"), 4)
        self.assertTrue(c.get_bool("flags", "debug"))
        self.assertEqual(c.get("default", "name"), "api")
"""),
    },
    fix=(Fix("confkit/parser.py", 'key, value = line.split("=")', 'key, value = line.split("=", 1)'),),
)

RETRY = SweRepo(
    name="retry-backoff-count",
    tags=TAGS,
    issue="""
backoff_delays(retries=3) returns [2.0, 4.0]: one delay short, and the first retry already waits twice the base.
With base 1 we expect [1.0, 2.0, 4.0] (the first retry waits `base`), each capped at `cap`. call_with_retry()
therefore retries one time too few.
""",
    files={
        "retrykit/__init__.py": "",
        "retrykit/backoff.py": src(r"""
def backoff_delays(retries, base=1.0, cap=30.0):
    '''The wait before each retry: base, 2*base, 4*base, ... each at most `cap`.'''
    return [min(cap, base * 2 ** n) for n in range(1, retries)]
"""),
        "retrykit/call.py": src(r"""
from retrykit.backoff import backoff_delays


class GaveUp(Exception):
    pass


def call_with_retry(fn, retries=3, base=1.0, cap=30.0, sleep=None, retry_on=(ConnectionError,)):
    '''Call fn(); on a retryable error wait and try again, up to `retries` more times.'''
    waited = []
    for delay in backoff_delays(retries, base, cap) + [None]:
        try:
            return fn()
        except retry_on as err:
            if delay is None:
                raise GaveUp(f"gave up after {len(waited) + 1} attempts") from err
            waited.append(delay)
            if sleep is not None:
                sleep(delay)
"""),
        "tests/__init__.py": "",
        "tests/test_retry.py": src(r"""
import unittest

from retrykit.backoff import backoff_delays
from retrykit.call import GaveUp, call_with_retry


class BackoffTest(unittest.TestCase):
    def test_delays(self):
        self.assertEqual(backoff_delays(3), [1.0, 2.0, 4.0])

    def test_cap(self):
        self.assertEqual(backoff_delays(5, base=2, cap=10), [2, 4, 8, 10, 10])

    def test_none(self):
        self.assertEqual(backoff_delays(0), [])


class CallTest(unittest.TestCase):
    def test_succeeds_on_last_retry(self):
        attempts, slept = [], []

        def flaky():
            attempts.append(1)
            if len(attempts) < 4:
                raise ConnectionError("down")
            return "ok"

        self.assertEqual(call_with_retry(flaky, retries=3, sleep=slept.append), "ok")
        self.assertEqual(slept, [1.0, 2.0, 4.0])

    def test_gives_up(self):
        def down():
            raise ConnectionError("down")

        with self.assertRaises(GaveUp):
            call_with_retry(down, retries=2)
"""),
    },
    fix=(Fix("retrykit/backoff.py", "for n in range(1, retries)]", "for n in range(retries)]"),),
)

ACCOUNTS = SweRepo(
    name="accounts-shared-history",
    tags=TAGS,
    issue="""
Accounts see each other's transactions. Open two accounts, deposit into one, and statement() of the other lists the
deposit as well; with many accounts every statement grows with every transaction in the bank. Balances are right,
only the histories are mixed up.
""",
    files={
        "ledger/__init__.py": "",
        "ledger/account.py": src(r"""
class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0, history=[]):
        self.owner = owner
        self.balance = balance
        self.history = history

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit must be positive")
        self.balance += amount
        self.history.append(("deposit", amount))

    def withdraw(self, amount):
        if amount > self.balance:
            raise InsufficientFunds(f"{self.owner}: balance {self.balance}, asked {amount}")
        self.balance -= amount
        self.history.append(("withdraw", amount))
"""),
        "ledger/bank.py": src(r"""
from ledger.account import Account


class Bank:
    def __init__(self):
        self.accounts = {}

    def open(self, owner, balance=0):
        self.accounts[owner] = Account(owner, balance)
        return self.accounts[owner]

    def transfer(self, source, target, amount):
        self.accounts[source].withdraw(amount)
        self.accounts[target].deposit(amount)

    def statement(self, owner):
        return [f"{kind} {amount}" for kind, amount in self.accounts[owner].history]
"""),
        "tests/__init__.py": "",
        "tests/test_ledger.py": src(r"""
import unittest

from ledger.account import Account, InsufficientFunds
from ledger.bank import Bank


class AccountTest(unittest.TestCase):
    def test_deposit_withdraw(self):
        a = Account("ann", 10)
        a.deposit(5)
        a.withdraw(3)
        self.assertEqual(a.balance, 12)
        self.assertEqual(a.history, [("deposit", 5), ("withdraw", 3)])

    def test_overdraw(self):
        with self.assertRaises(InsufficientFunds):
            Account("bob").withdraw(1)

    def test_fresh_history(self):
        Account("x").deposit(1)
        self.assertEqual(Account("y").history, [])


class BankTest(unittest.TestCase):
    def test_statements_are_separate(self):
        bank = Bank()
        bank.open("ann", 100)
        bank.open("bob")
        bank.transfer("ann", "bob", 30)
        self.assertEqual(bank.statement("ann"), ["withdraw 30"])
        self.assertEqual(bank.statement("bob"), ["deposit 30"])
"""),
    },
    fix=(Fix("ledger/account.py", "def __init__(self, owner, balance=0, history=[]):",
             "def __init__(self, owner, balance=0, history=None):"),
         Fix("ledger/account.py", "        self.history = history\n", "        self.history = list(history or [])\n")),
)

RATE_LIMIT = SweRepo(
    name="ratelimit-bucket-cap",
    tags=TAGS,
    split="eval",
    issue="""
The rate limiter lets huge bursts through after a quiet period. A bucket with capacity 5 refilling 1 token per second
allows 60 requests in a row after a minute idle; it should never allow more than its capacity at once.
""",
    files={
        "throttle/__init__.py": "",
        "throttle/bucket.py": src(r"""
class TokenBucket:
    '''`capacity` tokens at most, `rate` tokens added per second; `clock` returns seconds.'''

    def __init__(self, capacity, rate, clock):
        self.capacity, self.rate, self.clock = capacity, rate, clock
        self.tokens = capacity
        self.updated = clock()

    def _refill(self):
        now = self.clock()
        self.tokens = self.tokens + (now - self.updated) * self.rate
        self.updated = now

    def allow(self, cost=1):
        self._refill()
        if self.tokens >= cost:
            self.tokens -= cost
            return True
        return False
"""),
        "throttle/limiter.py": src(r"""
from throttle.bucket import TokenBucket


class Limiter:
    '''One bucket per client key.'''

    def __init__(self, capacity, rate, clock):
        self.capacity, self.rate, self.clock = capacity, rate, clock
        self.buckets = {}

    def allow(self, key, cost=1):
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = TokenBucket(self.capacity, self.rate, self.clock)
        return bucket.allow(cost)
"""),
        "tests/__init__.py": "",
        "tests/test_throttle.py": src(r"""
import unittest

from throttle.bucket import TokenBucket
from throttle.limiter import Limiter


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class BucketTest(unittest.TestCase):
    def test_burst_then_refill(self):
        clock = FakeClock()
        b = TokenBucket(3, 1, clock)
        self.assertEqual([b.allow() for _ in range(4)], [True, True, True, False])
        clock.now = 1.0
        self.assertTrue(b.allow())

    def test_idle_does_not_exceed_capacity(self):
        clock = FakeClock()
        b = TokenBucket(5, 1, clock)
        clock.now = 60.0
        self.assertEqual(sum(b.allow() for _ in range(60)), 5)


class LimiterTest(unittest.TestCase):
    def test_per_key(self):
        clock = FakeClock()
        lim = Limiter(1, 0.5, clock)
        self.assertTrue(lim.allow("a"))
        self.assertTrue(lim.allow("b"))
        self.assertFalse(lim.allow("a"))
        clock.now = 100.0
        self.assertEqual([lim.allow("a"), lim.allow("a")], [True, False])
"""),
    },
    fix=(Fix("throttle/bucket.py", "self.tokens = self.tokens + (now - self.updated) * self.rate",
             "self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)"),),
)

DURATION = SweRepo(
    name="duration-default-unit",
    tags=TAGS,
    issue="""
A bare number in a timeout setting is read as minutes: parse_duration("90") returns 5400, so `timeout = 90` in the
job file waits an hour and a half. The documented default unit is seconds; "90s", "2m" and "1h30m" work as
expected.
""",
    files={
        "timing/__init__.py": "",
        "timing/duration.py": src(r"""
import re

UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")


def parse_duration(text):
    '''"1h30m" -> 5400.0 seconds; a bare number is seconds.'''
    text = text.strip().lower().replace(" ", "")
    if not text:
        raise ValueError("empty duration")
    total, pos = 0.0, 0
    while pos < len(text):
        m = PART.match(text, pos)
        if not m:
            raise ValueError(f"bad duration: {text!r}")
        number, unit = m.groups()
        total += float(number) * UNITS[unit or "m"]
        pos = m.end()
    return total
"""),
        "timing/format.py": src(r"""
def format_duration(seconds):
    seconds = int(round(seconds))
    parts = []
    for unit, size in (("h", 3600), ("m", 60), ("s", 1)):
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"
"""),
        "tests/__init__.py": "",
        "tests/test_duration.py": src(r"""
import unittest

from timing.duration import parse_duration
from timing.format import format_duration


class ParseTest(unittest.TestCase):
    def test_units(self):
        self.assertEqual(parse_duration("90s"), 90)
        self.assertEqual(parse_duration("1h30m"), 5400)
        self.assertEqual(parse_duration("250ms"), 0.25)

    def test_bare_number_is_seconds(self):
        self.assertEqual(parse_duration("90"), 90)
        self.assertEqual(parse_duration("1m30"), 90)

    def test_bad(self):
        for text in ("", "abc", "5x"):
            with self.assertRaises(ValueError):
                parse_duration(text)


class FormatTest(unittest.TestCase):
    def test_round_trip(self):
        self.assertEqual(format_duration(parse_duration("2h5s")), "2h5s")
        self.assertEqual(format_duration(parse_duration("45")), "45s")
"""),
    },
    fix=(Fix("timing/duration.py", 'UNITS[unit or "m"]', 'UNITS[unit or "s"]'),),
)

SCHEDULE = SweRepo(
    name="schedule-hour-rollover",
    tags=TAGS,
    split="eval",
    issue="""
Periodic jobs near the end of an hour get impossible run times. next_run(10, 50, every=15) returns (10, 60) instead
of (11, 0), and at 23:55 the scheduler says (23, 60) rather than (0, 0) on the next day. Runs are on the multiples
of `every` minutes since midnight, strictly after the given time.
""",
    files={
        "cronish/__init__.py": "",
        "cronish/next.py": src(r"""
def next_run(hour, minute, every):
    '''The next (hour, minute) strictly after hour:minute on a multiple of `every` minutes since midnight.'''
    if not (0 <= hour < 24 and 0 <= minute < 60) or every < 1:
        raise ValueError("bad time or interval")
    slot = (minute // every + 1) * every
    return hour, slot
"""),
        "cronish/plan.py": src(r"""
from cronish.next import next_run


def upcoming(hour, minute, every, count):
    runs = []
    for _ in range(count):
        hour, minute = next_run(hour, minute, every)
        runs.append(f"{hour:02d}:{minute:02d}")
    return runs
"""),
        "tests/__init__.py": "",
        "tests/test_schedule.py": src(r"""
import unittest

from cronish.next import next_run
from cronish.plan import upcoming


class NextRunTest(unittest.TestCase):
    def test_within_hour(self):
        self.assertEqual(next_run(10, 7, 15), (10, 15))
        self.assertEqual(next_run(10, 15, 15), (10, 30))

    def test_rolls_over_hour(self):
        self.assertEqual(next_run(10, 50, 15), (11, 0))

    def test_rolls_over_day(self):
        self.assertEqual(next_run(23, 55, 10), (0, 0))

    def test_bad(self):
        with self.assertRaises(ValueError):
            next_run(24, 0, 5)


class PlanTest(unittest.TestCase):
    def test_upcoming(self):
        self.assertEqual(upcoming(9, 40, 20, 3), ["10:00", "10:20", "10:40"])
"""),
    },
    fix=(Fix("cronish/next.py", "    slot = (minute // every + 1) * every\n    return hour, slot\n",
             "    now = hour * 60 + minute\n    slot = (now // every + 1) * every % (24 * 60)\n"
             "    return divmod(slot, 60)\n"),),
)

REPOS = [CONFIG, RETRY, ACCOUNTS, RATE_LIMIT, DURATION, SCHEDULE]
