"""Scripts: small bash and Python programs, written, run and saved; checksums and loops."""

from __future__ import annotations

import hashlib
import random

from envs.terminal.checks import OUTPUTS, STEMS, all_of, exists, expect_lines, expect_text
from envs.terminal.families import Spec, families


def _fib(n: int) -> list[str]:
    a, b, out = 0, 1, []
    for _ in range(n):
        out.append(str(a))
        a, b = b, a + b
    return out


def _fizzbuzz(n: int, fizz: int = 3, buzz: int = 5) -> list[str]:
    return [("Fizz" if i % fizz == 0 else "") + ("Buzz" if i % buzz == 0 else "") or str(i) for i in range(1, n + 1)]


def make_fib_script(rng: random.Random) -> Spec:
    n = rng.randrange(8, 31)
    script, out = rng.choice(["fib.sh", "fibonacci.sh", "fibs.sh", "seq.sh"]), rng.choice(["fib.txt", *OUTPUTS])
    return Spec(f"Write a bash script {script} that prints the first {n} Fibonacci numbers (0 1 1 2 ...), one per "
                f"line. Run it and save its output to {out}.", {}, all_of(exists(script), expect_lines(out, _fib(n))),
                [f"printf '%s\\n' 'a=0; b=1' 'for i in $(seq {n}); do echo $a; t=$((a + b)); a=$b; b=$t; done' "
                 f"> {script}", f"bash {script} > {out}"])


def make_fizzbuzz(rng: random.Random) -> Spec:
    n = rng.randrange(15, 61)
    fizz, buzz = rng.choice([(3, 5), (3, 5), (2, 7), (3, 7), (4, 5), (2, 5)])
    script, out = rng.choice(["fizzbuzz.sh", "fb.sh", "game.sh"]), rng.choice(["fizzbuzz.txt", *OUTPUTS])
    return Spec(f"Write a script {script} that prints FizzBuzz for the numbers 1 to {n} (Fizz for multiples of {fizz}, "
                f"Buzz for multiples of {buzz}, FizzBuzz for multiples of both, else the number), one per line. Run it "
                f"and save its output to {out}.", {},
                all_of(exists(script), expect_lines(out, _fizzbuzz(n, fizz, buzz))),
                [f"""printf '%s\\n' 'for i in $(seq {n}); do s=""; [ $((i % {fizz})) -eq 0 ] && s=Fizz; """
                 f"""[ $((i % {buzz})) -eq 0 ] && s="${{s}}Buzz"; echo "${{s:-$i}}"; done' > {script}""",
                 f"bash {script} > {out}"])


def make_python_squares(rng: random.Random) -> Spec:
    power, what = rng.choice([(2, "squares"), (3, "cubes")])
    n = rng.randrange(5, 26)
    script = rng.choice([f"{what}.py", "powers.py", "numbers.py", "calc.py"])
    out = rng.choice([f"{what}.txt", *OUTPUTS])
    return Spec(f"Write a Python script {script} that prints the {what} of the numbers 1 to {n}, one per line. Run it "
                f"with python3 and save its output to {out}.", {},
                all_of(exists(script), expect_lines(out, [str(i ** power) for i in range(1, n + 1)])),
                [f"echo 'for i in range(1, {n + 1}): print(i ** {power})' > {script}", f"python3 {script} > {out}"])


def make_sum_script(rng: random.Random) -> Spec:
    script = rng.choice(["sum.sh", "add.sh", "total.sh", "sumfile.sh"])
    data, out = f"{rng.choice(STEMS)}.txt", rng.choice(["total.txt", *OUTPUTS])
    nums = [rng.randrange(-50, 200) for _ in range(rng.randrange(10, 30))]
    return Spec(f"Write a script {script} that prints the sum of the numbers (one per line) in the file given as its "
                f"first argument. Run it on {data} and save the output to {out}.",
                {data: "\n".join(map(str, nums)) + "\n"}, all_of(exists(script), expect_text(out, str(sum(nums)))),
                [f"""echo 'awk "{{s += \\$1}} END {{print s}}" "$1"' > {script}""", f"bash {script} {data} > {out}"])


def make_checksum(rng: random.Random) -> Spec:
    tool, label, algo = rng.choice([("sha256sum", "SHA-256", "sha256"), ("md5sum", "MD5", "md5"),
                                    ("sha1sum", "SHA-1", "sha1")])
    name, out = f"{rng.choice(STEMS)}.{rng.choice(['bin', 'dat', 'img'])}", rng.choice(OUTPUTS)
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1024, 8192)))
    return Spec(f"Write the {label} checksum of {name} (the hex digits only) to {out}.", {name: data},
                expect_text(out, hashlib.new(algo, data).hexdigest()), [f"{tool} {name} | cut -d' ' -f1 > {out}"])


def make_loop_files(rng: random.Random) -> Spec:
    word = rng.choice(["day", "week", "part", "chapter", "step", "level", "page"])
    n, ext = rng.randrange(4, 13), rng.choice(["txt", "md", "log"])
    return Spec(f"Create the files {word}1.{ext} to {word}{n}.{ext}; each {word}N.{ext} must contain the single line: "
                f"{word} N", {}, all_of(*(expect_text(f"{word}{i}.{ext}", f"{word} {i}") for i in range(1, n + 1))),
                [f'for i in $(seq {n}); do echo "{word} $i" > "{word}$i.{ext}"; done'])


FAMILIES = families("scripts")(make_fib_script, make_fizzbuzz, make_python_squares, make_sum_script, make_checksum,
                               make_loop_files)
