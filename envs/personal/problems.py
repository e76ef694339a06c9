"""GSM8K-style word problems generated from the project's own templates.

Every problem is drawn from one of ``TEMPLATES`` with a seeded ``random.Random``: a name, objects and small numbers,
1-3 arithmetic steps, an integer answer. A problem's id names its template and a hash of everything drawn for it; that
hash fixes its split once and for all (``split_of``), so the held-out problems are never seen while building the model
or during RL, whatever the seed or the order they are drawn in.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Split = Literal["train", "heldout"]
HELDOUT_PERCENT = 10


class Step(NamedTuple):
    expression: str  # "4 * 5", operands as they appear in the question or earlier steps
    value: int
    description: str  # a lower-case noun phrase: "money Sara earns from babysitting"


@dataclass(frozen=True)
class Problem:
    id: str
    question: str
    answer: int
    steps: list[Step] = field(default_factory=list)
    unit: str = ""  # "apples", or "$" for money (written before the number)
    template: str = ""

    @property
    def split(self) -> Split:
        return split_of(self.id)

    def fmt(self, value: int) -> str:
        """``value`` with the problem's unit: "$12" or "12 apples"."""
        if self.unit == "$":
            return f"${value}"
        return f"{value} {self.unit}".strip()


def split_of(problem_id: str) -> Split:
    digest = hashlib.sha256(problem_id.encode()).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") % 100 < HELDOUT_PERCENT else "train"


NAMES = [("Mia", "she"), ("Liam", "he"), ("Sara", "she"), ("Noah", "he"), ("Emma", "she"), ("Omar", "he"),
         ("Ava", "she"), ("Lucas", "he"), ("Zoe", "she"), ("Ethan", "he"), ("Lily", "she"), ("Mason", "he"),
         ("Chloe", "she"), ("Leo", "he"), ("Nora", "she"), ("Ben", "he"), ("Ella", "she"), ("Sam", "he"),
         ("Grace", "she"), ("Jack", "he"), ("Ruby", "she"), ("Owen", "he"), ("Maya", "she"), ("Eli", "he"),
         ("Hana", "she"), ("Ravi", "he"), ("Ines", "she"), ("Tom", "he"), ("Priya", "she"), ("Kai", "he"),
         ("Julia", "she"), ("Diego", "he"), ("Fatima", "she"), ("Yuki", "he"), ("Anna", "she"), ("Max", "he")]
FRUITS = ["apples", "oranges", "pears", "peaches", "plums", "lemons", "bananas", "mangoes"]
SMALL_THINGS = ["stickers", "marbles", "pencils", "cards", "stamps", "beads", "crayons", "buttons"]
PACKED = [("packs", "stickers"), ("boxes", "crayons"), ("bags", "marbles"), ("packs", "cards"),
          ("boxes", "pencils"), ("bags", "candies"), ("jars", "beads"), ("cartons", "eggs")]
CLOTHES = ["shirts", "books", "notebooks", "toy cars", "puzzles", "mugs", "scarves", "plants"]
BAKED = ["cookies", "muffins", "cupcakes", "brownies", "rolls", "biscuits"]


class _Draw:
    """Seeded picks that remember what was drawn: the drawn values name the problem."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.drawn: list[object] = []

    def int(self, lo: int, hi: int) -> int:
        v = self.rng.randint(lo, hi)
        self.drawn.append(v)
        return v

    def pick(self, seq):  # noqa: ANN001, ANN201 - any sequence
        v = self.rng.choice(seq)
        self.drawn.append(v)
        return v

    def person(self) -> tuple[str, str]:
        return self.pick(NAMES)

    def other(self, name: str) -> str:
        return self.pick([n for n, _ in NAMES if n != name])


def _step(a: int, op: str, b: int, description: str) -> Step:
    value = {"+": a + b, "-": a - b, "*": a * b, "/": a // b if b and a % b == 0 else None}[op]
    if value is None or value < 0:
        raise ValueError(f"not a clean step: {a} {op} {b}")
    return Step(f"{a} {op} {b}", value, description)


Made = tuple[str, list[Step], str]  # question, steps, unit
TEMPLATES: dict[str, Callable[[_Draw], Made]] = {}


def _template(fn: Callable[[_Draw], Made]) -> Callable[[_Draw], Made]:
    TEMPLATES[fn.__name__.lstrip("_")] = fn
    return fn


@_template
def _buy_more(d: _Draw) -> Made:
    (n, p), f, a, b = d.person(), d.pick(FRUITS), d.int(3, 40), d.int(2, 30)
    q = f"{n} has {a} {f}. At the market {p} buys {b} more. How many {f} does {n} have now?"
    return q, [_step(a, "+", b, f"{f} {n} has now")], f


@_template
def _give_away(d: _Draw) -> Made:
    (n, p), t, a = d.person(), d.pick(SMALL_THINGS), d.int(12, 60)
    b, m = d.int(2, a - 2), d.other(n)
    q = f"{n} had {a} {t}. {p.capitalize()} gave {b} of them to {m}. How many {t} does {n} have left?"
    return q, [_step(a, "-", b, f"{t} {n} has left")], t


@_template
def _packs(d: _Draw) -> Made:
    (n, _), (box, t), a, b = d.person(), d.pick(PACKED), d.int(2, 9), d.int(3, 12)
    q = f"{n} buys {a} {box} of {t}. Each of the {box} holds {b} {t}. How many {t} did {n} buy in all?"
    return q, [_step(a, "*", b, f"total number of {t}")], t


@_template
def _share(d: _Draw) -> Made:
    (n, p), t, k, each = d.person(), d.pick(SMALL_THINGS), d.int(2, 8), d.int(2, 12)
    q = f"{n} has {k * each} {t} and shares them equally among {k} friends. How many {t} does each friend get?"
    return q, [_step(k * each, "/", k, f"{t} each friend gets")], t


@_template
def _box_up(d: _Draw) -> Made:
    (n, _), t, per, boxes = d.person(), d.pick(BAKED), d.int(2, 9), d.int(2, 10)
    q = f"{n} baked {per * boxes} {t} and packs them into boxes of {per}. How many boxes does {n} fill?"
    return q, [_step(per * boxes, "/", per, "number of boxes")], "boxes"


@_template
def _pages(d: _Draw) -> Made:
    (n, p), per, days = d.person(), d.int(5, 20), d.int(2, 7)
    total = per * days + d.int(5, 60)
    q = (f"{n}'s book has {total} pages. {p.capitalize()} reads {per} pages a day for {days} days. "
         f"How many pages are left to read?")
    s1 = _step(per, "*", days, "pages read so far")
    return q, [s1, _step(total, "-", s1.value, "pages left to read")], "pages"


@_template
def _savings(d: _Draw) -> Made:
    (n, p), per, weeks = d.person(), d.int(3, 15), d.int(2, 8)
    spend = d.int(2, per * weeks - 1)
    q = (f"{n} saves ${per} every week for {weeks} weeks. Then {p} spends ${spend} on a game. "
         f"How much money does {n} have left?")
    s1 = _step(per, "*", weeks, "money saved")
    return q, [s1, _step(s1.value, "-", spend, "money left after the game")], "$"


@_template
def _bake_eat(d: _Draw) -> Made:
    (n, _), t, trays, per = d.person(), d.pick(BAKED), d.int(2, 5), d.int(4, 12)
    eaten = d.int(1, trays * per - 1)
    q = (f"{n} bakes {trays} trays of {t} with {per} {t} on each tray. The family eats {eaten} of them. "
         f"How many {t} are left?")
    s1 = _step(trays, "*", per, f"{t} baked")
    return q, [s1, _step(s1.value, "-", eaten, f"{t} left")], t


@_template
def _shop_total(d: _Draw) -> Made:
    (n, _), t, k, price, extra = d.person(), d.pick(CLOTHES), d.int(2, 6), d.int(3, 15), d.int(2, 20)
    q = f"{n} buys {k} {t} for ${price} each and a hat for ${extra}. How much does {n} spend in total?"
    s1 = _step(k, "*", price, f"cost of the {t}")
    return q, [s1, _step(s1.value, "+", extra, "total cost")], "$"


@_template
def _change(d: _Draw) -> Made:
    (n, _), t, k, price = d.person(), d.pick(CLOTHES), d.int(2, 5), d.int(2, 9)
    bill = next(b for b in (20, 50, 100) if b > k * price)
    d.drawn.append(bill)
    q = f"{n} buys {k} {t} at ${price} each and pays with a ${bill} bill. How much change does {n} get?"
    s1 = _step(k, "*", price, f"cost of the {t}")
    return q, [s1, _step(bill, "-", s1.value, "change")], "$"


@_template
def _desks(d: _Draw) -> Made:
    rows, per = d.int(3, 8), d.int(3, 7)
    empty = d.int(2, rows * per - 1)
    q = (f"A classroom has {rows} rows of desks with {per} desks in each row. {empty} desks are empty. "
         f"How many students are sitting at desks?")
    s1 = _step(rows, "*", per, "number of desks")
    return q, [s1, _step(s1.value, "-", empty, "students sitting at desks")], "students"


@_template
def _bus(d: _Draw) -> Made:
    start = d.int(15, 45)
    off, on = d.int(2, start - 3), d.int(2, 20)
    q = (f"A bus has {start} passengers. At the first stop {off} people get off and {on} people get on. "
         f"How many passengers are on the bus now?")
    s1 = _step(start, "-", off, "passengers after some get off")
    return q, [s1, _step(s1.value, "+", on, "passengers now")], "passengers"


@_template
def _more_than(d: _Draw) -> Made:
    (n, _), t, a, more = d.person(), d.pick(SMALL_THINGS), d.int(5, 30), d.int(2, 15)
    m = d.other(n)
    q = f"{n} has {a} {t}. {m} has {more} more {t} than {n}. How many {t} do they have together?"
    s1 = _step(a, "+", more, f"{t} {m} has")
    return q, [s1, _step(a, "+", s1.value, f"{t} together")], t


@_template
def _times_as_many(d: _Draw) -> Made:
    (n, _), t, a, k = d.person(), d.pick(SMALL_THINGS), d.int(3, 12), d.int(2, 5)
    m = d.other(n)
    q = f"{n} has {a} {t}. {m} has {k} times as many {t} as {n}. How many more {t} does {m} have than {n}?"
    s1 = _step(a, "*", k, f"{t} {m} has")
    return q, [s1, _step(s1.value, "-", a, "difference")], t


@_template
def _running(d: _Draw) -> Made:
    (n, p), per, days, weekend = d.person(), d.int(2, 9), d.int(3, 6), d.int(5, 15)
    q = (f"{n} runs {per} km every weekday for {days} days and then {weekend} km on the weekend. "
         f"How many km does {p} run in total?")
    s1 = _step(per, "*", days, "km on weekdays")
    return q, [s1, _step(s1.value, "+", weekend, "total distance")], "km"


@_template
def _pizza(d: _Draw) -> Made:
    pizzas, slices, people = d.int(2, 6), d.pick([4, 6, 8]), d.pick([2, 3, 4, 6])
    while (pizzas * slices) % people:
        pizzas += 1
    d.drawn.append(pizzas)
    q = (f"A family orders {pizzas} pizzas, each cut into {slices} slices. {people} people share them equally. "
         f"How many slices does each person get?")
    s1 = _step(pizzas, "*", slices, "number of slices")
    return q, [s1, _step(s1.value, "/", people, "slices per person")], "slices"


@_template
def _wages(d: _Draw) -> Made:
    (n, p), rate, h1, h2 = d.person(), d.int(5, 15), d.int(2, 8), d.int(2, 8)
    q = (f"{n} earns ${rate} an hour. {p.capitalize()} works {h1} hours on Monday and {h2} hours on Tuesday. "
         f"How much does {n} earn in total?")
    s1 = _step(h1, "+", h2, "hours worked")
    return q, [s1, _step(rate, "*", s1.value, "total earnings")], "$"


@_template
def _fish(d: _Draw) -> Made:
    (n, _), fish, bought = d.person(), d.int(4, 20), d.int(2, 12)
    gave = d.int(1, fish + bought - 1)
    q = (f"{n} has {fish} fish in a tank and buys {bought} more. Later {n} gives {gave} fish to a neighbour. "
         f"How many fish are in the tank now?")
    s1 = _step(fish, "+", bought, "fish after buying")
    return q, [s1, _step(s1.value, "-", gave, "fish now")], "fish"


@_template
def _pencils_class(d: _Draw) -> Made:
    boxes, per, kids, each = d.int(3, 8), d.pick([10, 12]), d.int(3, 9), d.int(2, 4)
    while kids * each > boxes * per:
        kids -= 1
    d.drawn.append(kids)
    q = (f"A teacher has {boxes} boxes of pencils with {per} pencils in each box. She gives {each} pencils to each "
         f"of her {kids} students. How many pencils does she have left?")
    s1 = _step(boxes, "*", per, "pencils in all")
    s2 = _step(each, "*", kids, "pencils given out")
    return q, [s1, s2, _step(s1.value, "-", s2.value, "pencils left")], "pencils"


@_template
def _lemonade(d: _Draw) -> Made:
    (n, p), cups, price = d.person(), d.int(8, 30), d.int(1, 3)
    cost = d.int(2, cups * price - 1)
    q = (f"{n} sells {cups} cups of lemonade for ${price} each. {p.capitalize()} spent ${cost} on lemons and sugar. "
         f"How much profit does {n} make?")
    s1 = _step(cups, "*", price, "money from sales")
    return q, [s1, _step(s1.value, "-", cost, "profit")], "$"


@_template
def _half_away(d: _Draw) -> Made:
    (n, _), t, half = d.person(), d.pick(SMALL_THINGS), d.int(4, 25)
    more = d.int(2, 15)
    q = (f"{n} has {2 * half} {t}. {n} gives half of them to a younger brother and then buys {more} more. "
         f"How many {t} does {n} have now?")
    s1 = _step(2 * half, "/", 2, f"{t} left after giving half away")
    return q, [s1, _step(s1.value, "+", more, f"{t} now")], t


@_template
def _ages(d: _Draw) -> Made:
    (n, _), age, older, years = d.person(), d.int(5, 14), d.int(2, 9), d.int(2, 10)
    q = f"{n} is {age} years old. {n}'s cousin is {older} years older. How old will the cousin be in {years} years?"
    s1 = _step(age, "+", older, "cousin's age now")
    return q, [s1, _step(s1.value, "+", years, "cousin's age later")], "years old"


@_template
def _library(d: _Draw) -> Made:
    books, boxes, per = d.int(40, 120), d.int(2, 6), d.pick([5, 10, 12])
    lent = d.int(5, 40)
    q = (f"A library has {books} books. It gets {boxes} boxes of new books with {per} books in each box, "
         f"and then lends out {lent} books. How many books are on the shelves now?")
    s1 = _step(boxes, "*", per, "new books")
    s2 = _step(books, "+", s1.value, "books after the delivery")
    return q, [s1, s2, _step(s2.value, "-", lent, "books on the shelves")], "books"


@_template
def _balloons(d: _Draw) -> Made:
    guests, each, extra = d.int(4, 15), d.int(2, 4), d.int(3, 12)
    q = (f"There are {guests} guests at a party. Each guest gets {each} balloons and {extra} balloons are kept "
         f"for decoration. How many balloons are needed?")
    s1 = _step(guests, "*", each, "balloons for the guests")
    return q, [s1, _step(s1.value, "+", extra, "balloons needed")], "balloons"


@_template
def _candy_jar(d: _Draw) -> Made:
    red, blue, green = d.int(3, 25), d.int(3, 25), d.int(3, 25)
    q = f"A jar has {red} red candies, {blue} blue candies and {green} green candies. How many candies are in the jar?"
    s1 = _step(red, "+", blue, "red and blue candies")
    return q, [s1, _step(s1.value, "+", green, "candies in the jar")], "candies"


@_template
def _tickets(d: _Draw) -> Made:
    adults, ap, kids, kp = d.int(1, 4), d.int(8, 15), d.int(1, 5), d.int(3, 7)
    q = (f"A family buys {adults} adult tickets at ${ap} each and {kids} child tickets at ${kp} each. "
         f"How much do the tickets cost altogether?")
    s1 = _step(adults, "*", ap, "cost of the adult tickets")
    s2 = _step(kids, "*", kp, "cost of the child tickets")
    return q, [s1, s2, _step(s1.value, "+", s2.value, "total cost")], "$"


@_template
def _walking(d: _Draw) -> Made:
    (n, p), minutes, weeks = d.person(), d.pick([10, 15, 20, 25, 30]), d.int(2, 4)
    q = f"{n} walks the dog for {minutes} minutes every day. How many minutes does {p} walk in {weeks} weeks?"
    s1 = _step(7, "*", weeks, "number of days")
    return q, [s1, _step(minutes, "*", s1.value, "minutes walked")], "minutes"


@_template
def _eggs(d: _Draw) -> Made:
    (n, _), hens, per, days = d.person(), d.int(2, 9), d.int(1, 2), d.int(3, 7)
    q = f"{n} keeps {hens} hens. Each hen lays {per} eggs a day. How many eggs do the hens lay in {days} days?"
    s1 = _step(hens, "*", per, "eggs per day")
    return q, [s1, _step(s1.value, "*", days, "eggs in all")], "eggs"


@_template
def _test_scores(d: _Draw) -> Made:
    (n, p), a, b, c = d.person(), d.int(60, 95), d.int(60, 95), d.int(60, 95)
    q = (f"{n} needs {a + b + c} points in total from three tests. {p.capitalize()} scored {a} and {b} on the "
         f"first two. What does {n} need on the third test?")
    s1 = _step(a, "+", b, "points from the first two tests")
    return q, [s1, _step(a + b + c, "-", s1.value, "points needed")], "points"


@_template
def _stamps(d: _Draw) -> Made:
    (n, _), per, weeks, bought = d.person(), d.int(2, 9), d.int(2, 6), d.int(3, 20)
    q = (f"{n} collects {per} stamps each week for {weeks} weeks and then buys {bought} stamps at a fair. "
         f"How many stamps does {n} have?")
    s1 = _step(per, "*", weeks, "stamps collected")
    return q, [s1, _step(s1.value, "+", bought, "stamps in all")], "stamps"


@_template
def _trip(d: _Draw) -> Made:
    first, second, left = d.int(20, 90), d.int(20, 90), d.int(10, 80)
    q = (f"A family drives {first} km before lunch and {second} km after lunch. The trip is {first + second + left} "
         f"km long. How many km do they still have to drive?")
    s1 = _step(first, "+", second, "km driven so far")
    return q, [s1, _step(first + second + left, "-", s1.value, "km still to drive")], "km"


@_template
def _bookshelf(d: _Draw) -> Made:
    shelves, per = d.int(3, 6), d.int(6, 15)
    removed = d.int(2, per - 1)
    q = (f"A bookcase has {shelves} shelves with {per} books on each. {removed} books are taken off every shelf. "
         f"How many books are left on the bookcase?")
    s1 = _step(per, "-", removed, "books left on each shelf")
    return q, [s1, _step(shelves, "*", s1.value, "books left")], "books"


def make_problem(template: str, rng: random.Random) -> Problem:
    d = _Draw(rng)
    question, steps, unit = TEMPLATES[template](d)
    key = "|".join(map(str, d.drawn))
    pid = f"{template}-{hashlib.sha256(f'{template}|{key}'.encode()).hexdigest()[:12]}"
    return Problem(pid, question, steps[-1].value, steps, unit, template)


def iter_problems(split: Split | None = "train", seed: int = 0) -> Iterator[Problem]:
    """An endless stream of distinct problems of one split (None: both), reproducible from ``seed``."""
    rng, seen, names = random.Random(seed), set(), sorted(TEMPLATES)
    while True:
        p = make_problem(rng.choice(names), rng)
        if p.id in seen or (split is not None and p.split != split):
            continue
        seen.add(p.id)
        yield p


def generate(n: int, split: Split | None = "train", seed: int = 0) -> list[Problem]:
    it = iter_problems(split, seed)
    return [next(it) for _ in range(n)]
