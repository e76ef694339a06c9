"""The terminal suite: files, text processing, archives and small scripts, each checked host-side from the work dir.

Every task's inputs are generated from its id (the same bytes on every reset), its check reads only the work dir
(through ``WorkDir``, which never follows a symlink out of it) and returns None when the task is done or a sentence
saying what is wrong, and its ``solution`` is a list of commands that solves it (the reference; the tests run every
one of them and check that doing nothing fails). About a quarter of the tasks are held out (``split="eval"``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import random
import stat
import tarfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from envs.base import Task, TaskSuite
from envs.sandbox import WorkDir

Check = Callable[[WorkDir], "str | None"]


@dataclass(frozen=True)
class TerminalTask:
    files: dict[str, bytes | str]
    check: Check
    solution: list[str]
    modes: dict[str, int] = field(default_factory=dict)


_TASKS: list[Task] = []


def _task(task_id: str, instruction: str, files: dict[str, bytes | str], check: Check, solution: list[str],
          tags: tuple[str, ...], modes: dict[str, int] | None = None) -> None:
    split = "eval" if len(_TASKS) % 4 == 3 else "train"
    _TASKS.append(Task(task_id=task_id, instruction=instruction, split=split, tags=tags,
                       data=TerminalTask(files=files, check=check, solution=solution, modes=modes or {})))


def _rng(task_id: str) -> random.Random:
    return random.Random(f"terminal:{task_id}")


WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "lemon", "piano", "ocean", "candle", "forest", "pepper",
         "rocket", "silver", "window", "garden", "planet", "violet", "copper", "meadow"]
NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "oscar"]


def _lines(text: str | None) -> list[str] | None:
    return None if text is None else text.rstrip("\n").split("\n") if text.strip() else []


def expect_text(path: str, expected: str) -> Check:
    """The file holds ``expected`` (surrounding whitespace ignored)."""
    def check(wd: WorkDir) -> str | None:
        got = wd.read_text(path)
        if got is None:
            return f"{path} is missing"
        return None if got.strip() == expected.strip() else f"{path} holds {got.strip()[:80]!r}, not the answer"
    return check


def expect_lines(path: str, expected: list[str]) -> Check:
    def check(wd: WorkDir) -> str | None:
        got = _lines(wd.read_text(path))
        if got is None:
            return f"{path} is missing"
        got = [g.rstrip("\r") for g in got]
        return None if got == expected else f"{path} has {len(got)} lines, not the {len(expected)} expected ones"
    return check


def all_of(*checks: Check) -> Check:
    def check(wd: WorkDir) -> str | None:
        for c in checks:
            why = c(wd)
            if why is not None:
                return why
        return None
    return check


def exists(path: str) -> Check:
    return lambda wd: None if wd.is_file(path) else f"{path} is missing"


def _gz(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as f:
        f.write(data)
    return buf.getvalue()


def _tar(files: dict[str, str], compress: bool) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return _gz(buf.getvalue()) if compress else buf.getvalue()


def _tar_members(data: bytes | None) -> dict[str, bytes] | None:
    """name -> content of the regular files of a (possibly gzipped) tar, read in memory; None if unreadable."""
    if data is None:
        return None
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            out = {}
            for m in tar.getmembers():
                if m.isfile() and m.size <= 1 << 20:
                    f = tar.extractfile(m)
                    out[m.name.removeprefix("./")] = f.read() if f else b""
            return out
    except (tarfile.TarError, OSError, EOFError):
        return None


# ---------------------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------------------

_task("create_file", "Create a file named hello.txt that contains exactly the line: hello world", {},
      expect_text("hello.txt", "hello world"), ["echo 'hello world' > hello.txt"], ("files",))

_task("make_dirs", "Create the directory project/src/utils and, inside it, an empty file named __init__.py.", {},
      lambda wd: None if wd.is_file("project/src/utils/__init__.py") and wd.read_bytes(
          "project/src/utils/__init__.py") == b"" else "project/src/utils/__init__.py is missing or not empty",
      ["mkdir -p project/src/utils && touch project/src/utils/__init__.py"], ("files",))


def _copy_file() -> None:
    rng = _rng("copy_file")
    text = "\n".join(" ".join(rng.choices(WORDS, k=6)) for _ in range(12)) + "\n"
    _task("copy_file", "Copy data/input.txt to backup/input.txt (create the backup folder). Keep the original.",
          {"data/input.txt": text},
          all_of(expect_text("backup/input.txt", text), expect_text("data/input.txt", text)),
          ["mkdir -p backup && cp data/input.txt backup/input.txt"], ("files",))


def _rename_ext() -> None:
    files = {f"docs/{w}.txt": f"{w}\n" for w in WORDS[:4]} | {"docs/readme.md": "readme\n"}

    def check(wd: WorkDir) -> str | None:
        if any(f.endswith(".txt") for f in wd.files("docs")):
            return "docs/ still holds .txt files"
        for w in WORDS[:4]:
            if wd.read_text(f"docs/{w}.md") != f"{w}\n":
                return f"docs/{w}.md is missing or changed"
        return None if wd.read_text("docs/readme.md") == "readme\n" else "docs/readme.md changed"
    _task("rename_ext", "Rename every .txt file in docs/ to the same name with the extension .md instead.", files,
          check, ['cd docs && for f in *.txt; do mv "$f" "${f%.txt}.md"; done'], ("files",))


def _delete_tmp() -> None:
    rng = _rng("delete_tmp")
    files = {}
    for d in ("cache", "cache/a", "cache/a/b", "cache/c"):
        for _ in range(3):
            w = rng.choice(WORDS) + str(rng.randrange(100))
            files[f"{d}/{w}.tmp"] = "junk\n"
            files[f"{d}/{w}.keep"] = "keep\n"
    keep = sorted(f for f in files if f.endswith(".keep"))

    def check(wd: WorkDir) -> str | None:
        got = wd.files("cache")
        if any(f.endswith(".tmp") for f in got):
            return "some .tmp files are still there"
        return None if got == keep else "files other than .tmp ones were removed or added"
    _task("delete_tmp", "Delete every file whose name ends in .tmp anywhere under cache/, and nothing else.", files,
          check, ["find cache -name '*.tmp' -type f -delete"], ("files",))


def _make_executable() -> None:
    script = "#!/bin/sh\necho ok\n"
    _task("make_executable", "Make the script run.sh executable by its owner.", {"run.sh": script},
          lambda wd: None if wd.mode("run.sh") & stat.S_IXUSR and wd.read_text("run.sh") == script
          else "run.sh is not executable (or was changed)", ["chmod u+x run.sh"], ("files",), modes={"run.sh": 0o644})


def _symlink() -> None:
    files = {"releases/v1/app.txt": "v1\n", "releases/v2/app.txt": "v2\n"}

    def check(wd: WorkDir) -> str | None:
        if not wd.is_symlink("current"):
            return "current is not a symbolic link"
        target = wd.readlink("current").rstrip("/")
        ok = target in ("releases/v2", "./releases/v2", "/workspace/releases/v2")
        return None if ok else f"current points to {target!r}, not releases/v2"
    _task("symlink", "Create a symbolic link named current that points to the directory releases/v2.", files, check,
          ["ln -s releases/v2 current"], ("files",))


def _largest_file() -> None:
    rng = _rng("largest_file")
    sizes = rng.sample(range(100, 5000), 6)
    files = {f"data/{w}.bin": "x" * n for w, n in zip(WORDS[4:10], sizes)}
    largest = max(files, key=lambda k: len(files[k])).split("/")[1]
    _task("largest_file", "Write the name of the largest file in data/ (just the file name) to answer.txt.", files,
          expect_text("answer.txt", largest), ["ls -S data | head -n 1 > answer.txt"], ("files",))


def _count_logs() -> None:
    rng = _rng("count_logs")
    files, n = {}, 0
    for d in ("logs", "logs/web", "logs/web/old", "logs/db"):
        for i in range(rng.randrange(2, 6)):
            ext = rng.choice([".log", ".log", ".txt", ".gz"])
            files[f"{d}/f{i}{ext}"] = "line\n"
            n += ext == ".log"
    _task("count_logs", "Count the files ending in .log under logs/ (subfolders included) and write the number to "
          "answer.txt.", files, expect_text("answer.txt", str(n)),
          ["find logs -type f -name '*.log' | wc -l > answer.txt"], ("files",))


def _total_size() -> None:
    rng = _rng("total_size")
    files = {f"assets/{w}.dat": "z" * rng.randrange(10, 900) for w in WORDS[:5]}
    total = sum(len(v) for v in files.values())
    _task("total_size", "Write the total size in bytes of all files in assets/ to answer.txt.", files,
          expect_text("answer.txt", str(total)), ["cat assets/* | wc -c > answer.txt"], ("files",))


for _make in (_copy_file, _rename_ext, _delete_tmp, _make_executable, _symlink, _largest_file, _count_logs,
              _total_size):
    _make()

# ---------------------------------------------------------------------------------------------------------------------
# text processing
# ---------------------------------------------------------------------------------------------------------------------


def _count_lines() -> None:
    rng = _rng("count_lines")
    lines = [rng.choice(WORDS) for _ in range(rng.randrange(40, 90))]
    _task("count_lines", "Write the number of lines in words.txt to answer.txt.",
          {"words.txt": "\n".join(lines) + "\n"},
          expect_text("answer.txt", str(len(lines))), ["wc -l < words.txt > answer.txt"], ("text",))


def _grep_errors() -> None:
    rng = _rng("grep_errors")
    lines = [f"2024-01-{i % 28 + 1:02d} {rng.choice(['INFO', 'WARN', 'ERROR', 'INFO'])} {rng.choice(WORDS)} event"
             for i in range(60)]
    _task("grep_errors", "Write every line of app.log that contains ERROR to errors.txt, in their original order.",
          {"app.log": "\n".join(lines) + "\n"}, expect_lines("errors.txt", [x for x in lines if "ERROR" in x]),
          ["grep ERROR app.log > errors.txt"], ("text",))


def _sort_unique() -> None:
    rng = _rng("sort_unique")
    names = [rng.choice(NAMES) for _ in range(40)]
    _task("sort_unique", "Write the distinct lines of names.txt, sorted alphabetically, to sorted.txt.",
          {"names.txt": "\n".join(names) + "\n"}, expect_lines("sorted.txt", sorted(set(names))),
          ["sort -u names.txt > sorted.txt"], ("text",))


def _top_word() -> None:
    rng = _rng("top_word")
    words = rng.choices(WORDS[:8], k=120) + ["pepper"] * 40
    rng.shuffle(words)
    top = Counter(words).most_common(1)[0][0]
    text = "\n".join(" ".join(words[i:i + 10]) for i in range(0, len(words), 10)) + "\n"
    _task("top_word", "Write the most frequent word in text.txt to answer.txt.", {"text.txt": text},
          expect_text("answer.txt", top),
          ["tr -s ' ' '\\n' < text.txt | sort | uniq -c | sort -rn | head -n 1 | awk '{print $2}' > answer.txt"],
          ("text",))


def _csv_sum() -> None:
    rng = _rng("csv_sum")
    rows = [(rng.choice(["north", "south", "east", "west"]), rng.randrange(1, 500)) for _ in range(25)]
    text = "region,amount\n" + "".join(f"{r},{a}\n" for r, a in rows)
    _task("csv_sum", "Write the sum of the amount column of sales.csv to answer.txt.", {"sales.csv": text},
          expect_text("answer.txt", str(sum(a for _, a in rows))),
          ["awk -F, 'NR > 1 {s += $2} END {print s}' sales.csv > answer.txt"], ("text",))


def _replace_word() -> None:
    text = "[main]\nname = foo\npath = /srv/foo/data\nfoo_mode = on\n# foo is the default\n"
    _task("replace_word", "In config.ini, replace every occurrence of foo with bar (edit the file in place).",
          {"config.ini": text}, expect_text("config.ini", text.replace("foo", "bar")),
          ["sed -i 's/foo/bar/g' config.ini"], ("text",))


def _uppercase() -> None:
    rng = _rng("uppercase")
    text = "\n".join(" ".join(rng.choices(WORDS, k=5)) for _ in range(8)) + "\n"
    _task("uppercase", "Write the contents of lower.txt converted to upper case to upper.txt.", {"lower.txt": text},
          expect_text("upper.txt", text.upper()), ["tr a-z A-Z < lower.txt > upper.txt"], ("text",))


def _extract_emails() -> None:
    rng = _rng("extract_emails")
    emails = [f"{n}.{rng.choice(WORDS)}@{rng.choice(['example.com', 'mail.org', 'corp.net'])}" for n in NAMES[:7]]
    lines = [f"Contact {e.split('.')[0].title()} at {e} for {rng.choice(WORDS)} questions." for e in emails]
    lines += [f"Reminder: {emails[0]} again", "No address on this line."]
    _task("extract_emails", "Write every email address in contacts.txt to emails.txt: one per line, sorted, no "
          "duplicates.", {"contacts.txt": "\n".join(lines) + "\n"}, expect_lines("emails.txt", sorted(set(emails))),
          ["grep -oE '[a-z0-9._]+@[a-z0-9.]+[.][a-z]+' contacts.txt | sort -u > emails.txt"], ("text",))


def _line_range() -> None:
    rng = _rng("line_range")
    nums = [str(n) for n in rng.sample(range(1000), 50)]
    _task("line_range", "Write lines 5 to 10 (inclusive) of numbers.txt to slice.txt.",
          {"numbers.txt": "\n".join(nums) + "\n"}, expect_lines("slice.txt", nums[4:10]),
          ["sed -n '5,10p' numbers.txt > slice.txt"], ("text",))


def _concat_parts() -> None:
    rng = _rng("concat_parts")
    parts = {f"part{i}.txt": " ".join(rng.choices(WORDS, k=4)) + "\n" for i in (1, 2, 3)}
    _task("concat_parts", "Concatenate part1.txt, part2.txt and part3.txt, in that order, into full.txt.", parts,
          expect_text("full.txt", "".join(parts[f"part{i}.txt"] for i in (1, 2, 3))),
          ["cat part1.txt part2.txt part3.txt > full.txt"], ("text",))


def _json_version() -> None:
    rng = _rng("json_version")
    version = f"{rng.randrange(1, 9)}.{rng.randrange(20)}.{rng.randrange(50)}"
    doc = {"name": "demo-app", "version": version, "dependencies": {"left-pad": "1.3.0"}, "private": True}
    _task("json_version", 'Write the value of the "version" field of package.json to answer.txt.',
          {"package.json": json.dumps(doc, indent=2) + "\n"}, expect_text("answer.txt", version),
          ["""grep -o '"version": *"[^"]*"' package.json | cut -d'"' -f4 > answer.txt"""], ("text",))


def _reverse_lines() -> None:
    rng = _rng("reverse_lines")
    items = rng.sample(WORDS, 10)
    _task("reverse_lines", "Write the lines of list.txt in reverse order to reversed.txt.",
          {"list.txt": "\n".join(items) + "\n"}, expect_lines("reversed.txt", items[::-1]),
          ["tac list.txt > reversed.txt"], ("text",))


def _csv_column() -> None:
    rng = _rng("csv_column")
    rows = [(n, f"{n}@example.com", rng.randrange(18, 80)) for n in NAMES[:8]]
    text = "name,email,age\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
    _task("csv_column", "Write the email column of users.csv (without the header line) to emails.txt.",
          {"users.csv": text}, expect_lines("emails.txt", [b for _, b, _ in rows]),
          ["tail -n +2 users.csv | cut -d, -f2 > emails.txt"], ("text",))


def _count_word() -> None:
    rng = _rng("count_word")
    pool = ["dragon", "Dragon", "DRAGON", "dragons", "dragonfly", "knight", "castle", "the", "a", "flew"]
    words = rng.choices(pool, k=150)
    n = sum(w.lower() == "dragon" for w in words)
    text = "\n".join(" ".join(words[i:i + 12]) for i in range(0, len(words), 12)) + "\n"
    _task("count_word", "Write how many times the word dragon occurs in story.txt (any case, whole words only) to "
          "answer.txt.", {"story.txt": text}, expect_text("answer.txt", str(n)),
          ["grep -oiw dragon story.txt | wc -l > answer.txt"], ("text",))


def _dedupe_order() -> None:
    rng = _rng("dedupe_order")
    items = rng.choices(WORDS[:9], k=30)
    unique = list(dict.fromkeys(items))
    _task("dedupe_order", "Write items.txt without its repeated lines to unique.txt: keep the first occurrence of each "
          "line, in the original order.", {"items.txt": "\n".join(items) + "\n"}, expect_lines("unique.txt", unique),
          ["awk '!seen[$0]++' items.txt > unique.txt"], ("text",))


def _env_file() -> None:
    rng = _rng("env_file")
    pairs = [(k, f"{rng.choice(WORDS)}{rng.randrange(100)}") for k in ("host", "port", "user", "mode")]
    _task("env_file", "settings.txt has lines 'key: value'. Write them to .env as lines KEY=value, with the key in "
          "upper case, in the same order.", {"settings.txt": "".join(f"{k}: {v}\n" for k, v in pairs)},
          expect_lines(".env", [f"{k.upper()}={v}" for k, v in pairs]),
          ["""awk -F': ' '{print toupper($1) "=" $2}' settings.txt > .env"""], ("text",))


def _find_todo() -> None:
    rng = _rng("find_todo")
    files, todo = {}, []
    for i, w in enumerate(WORDS[:7]):
        path = f"src/{'pkg/' if i % 2 else ''}{w}.py"
        has = rng.random() < 0.5 or i == 0
        files[path] = f"def {w}():\n    {'# TODO: finish' if has else 'pass'}\n    return 1\n"
        todo += [path] if has else []
    _task("find_todo", "Write the paths (relative to /workspace, like src/x.py) of the files under src/ that contain "
          "TODO to todo.txt, one per line, sorted.", files, expect_lines("todo.txt", sorted(todo)),
          ["grep -rl TODO src | sort > todo.txt"], ("text",))


for _make in (_count_lines, _grep_errors, _sort_unique, _top_word, _csv_sum, _replace_word, _uppercase,
              _extract_emails, _line_range, _concat_parts, _json_version, _reverse_lines, _csv_column, _count_word,
              _dedupe_order, _env_file, _find_todo):
    _make()

# ---------------------------------------------------------------------------------------------------------------------
# archives
# ---------------------------------------------------------------------------------------------------------------------


def _make_tar() -> None:
    files = {f"src/{w}.py": f"print('{w}')\n" for w in WORDS[:3]} | {"src/lib/util.py": "X = 1\n"}

    def check(wd: WorkDir) -> str | None:
        data = wd.read_bytes("backup.tar.gz")
        members = _tar_members(data)
        if data is None or members is None:
            return "backup.tar.gz is missing or not a readable tar archive"
        if data[:2] != b"\x1f\x8b":
            return "backup.tar.gz is not gzip-compressed"
        for name, text in files.items():
            if members.get(name) != text.encode():
                return f"{name} is not in the archive (or differs)"
        return None
    _task("make_tar", "Create a gzip-compressed tar archive named backup.tar.gz that contains the src/ directory.",
          files, check, ["tar czf backup.tar.gz src"], ("archives",))


def _extract_tar() -> None:
    inner = {"config/app.conf": "port=8080\n", "config/db.conf": "host=db\n", "README": "bundle\n"}
    _task("extract_tar", "Extract the archive bundle.tar.gz into a new directory named out.",
          {"bundle.tar.gz": _tar(inner, compress=True)},
          all_of(*(expect_text(f"out/{k}", v) for k, v in inner.items())),
          ["mkdir -p out && tar xzf bundle.tar.gz -C out"], ("archives",))


def _archive_secret() -> None:
    rng = _rng("archive_secret")
    secret = "".join(rng.choices("abcdefghjkmnpqrstuvwxyz23456789", k=12))
    inner = {f"logs/{w}.log": f"{w} started\n{w} stopped\n" for w in WORDS[:4]}
    inner["logs/cloud.log"] += f"KEY={secret}\n"
    _task("archive_secret", "One of the files inside logs.tar.gz has a line KEY=<value>. Write the value to "
          "answer.txt.", {"logs.tar.gz": _tar(inner, compress=True)}, expect_text("answer.txt", secret),
          ["tar xzf logs.tar.gz -O | grep -o 'KEY=.*' | cut -d= -f2 > answer.txt"], ("archives",))


def _gzip_file() -> None:
    rng = _rng("gzip_file")
    text = "".join(f"{i} {rng.choice(WORDS)}\n" for i in range(300))

    def check(wd: WorkDir) -> str | None:
        data = wd.read_bytes("big.txt.gz")
        if data is None:
            return "big.txt.gz is missing"
        try:
            return None if gzip.decompress(data) == text.encode() else "big.txt.gz does not hold big.txt"
        except (OSError, EOFError):
            return "big.txt.gz is not gzip data"
    _task("gzip_file", "Compress big.txt with gzip so that big.txt.gz exists (the original may go).",
          {"big.txt": text}, check, ["gzip big.txt"], ("archives",))


def _list_tar() -> None:
    inner = {f"{d}/{w}.txt": w for d, w in zip(["docs", "docs", "img", "src", "src"], WORDS[10:15])}
    _task("list_tar", "Write the names of the files inside archive.tar, one per line, sorted, to listing.txt.",
          {"archive.tar": _tar(inner, compress=False)}, expect_lines("listing.txt", sorted(inner)),
          ["tar tf archive.tar | sort > listing.txt"], ("archives",))


def _gunzip_csv() -> None:
    rng = _rng("gunzip_csv")
    text = "id,value\n" + "".join(f"{i},{rng.randrange(1000)}\n" for i in range(40))
    _task("gunzip_csv", "Decompress data.csv.gz so that data.csv holds its contents.",
          {"data.csv.gz": _gz(text.encode())}, expect_text("data.csv", text), ["gunzip data.csv.gz"], ("archives",))


for _make in (_make_tar, _extract_tar, _archive_secret, _gzip_file, _list_tar, _gunzip_csv):
    _make()

# ---------------------------------------------------------------------------------------------------------------------
# small scripts
# ---------------------------------------------------------------------------------------------------------------------


def _fib(n: int) -> list[str]:
    a, b, out = 0, 1, []
    for _ in range(n):
        out.append(str(a))
        a, b = b, a + b
    return out


def _fizzbuzz(n: int) -> list[str]:
    return ["FizzBuzz" if i % 15 == 0 else "Fizz" if i % 3 == 0 else "Buzz" if i % 5 == 0 else str(i)
            for i in range(1, n + 1)]


_task("fib_script", "Write a bash script fib.sh that prints the first 15 Fibonacci numbers (0 1 1 2 ...), one per "
      "line. Run it and save its output to fib.txt.", {},
      all_of(exists("fib.sh"), expect_lines("fib.txt", _fib(15))),
      ["printf '%s\\n' 'a=0; b=1' 'for i in $(seq 15); do echo $a; t=$((a + b)); a=$b; b=$t; done' > fib.sh",
       "bash fib.sh > fib.txt"], ("scripts",))

_task("fizzbuzz", "Write a script fizzbuzz.sh that prints FizzBuzz for the numbers 1 to 30 (Fizz for multiples of 3, "
      "Buzz of 5, FizzBuzz of both), one per line. Run it and save its output to fizzbuzz.txt.", {},
      all_of(exists("fizzbuzz.sh"), expect_lines("fizzbuzz.txt", _fizzbuzz(30))),
      ["""printf '%s\\n' 'for i in $(seq 30); do s=""; [ $((i % 3)) -eq 0 ] && s=Fizz; """
       """[ $((i % 5)) -eq 0 ] && s="${s}Buzz"; echo "${s:-$i}"; done' > fizzbuzz.sh""",
       "bash fizzbuzz.sh > fizzbuzz.txt"], ("scripts",))

_task("python_squares", "Write a Python script squares.py that prints the squares of 1 to 10, one per line. Run it "
      "with python3 and save its output to squares.txt.", {},
      all_of(exists("squares.py"), expect_lines("squares.txt", [str(i * i) for i in range(1, 11)])),
      ["echo 'for i in range(1, 11): print(i * i)' > squares.py", "python3 squares.py > squares.txt"], ("scripts",))


def _sum_script() -> None:
    rng = _rng("sum_script")
    nums = [rng.randrange(-50, 200) for _ in range(20)]
    _task("sum_script", "Write a script sum.sh that prints the sum of the numbers (one per line) in the file given as "
          "its first argument. Run it on nums.txt and save the output to total.txt.",
          {"nums.txt": "\n".join(map(str, nums)) + "\n"},
          all_of(exists("sum.sh"), expect_text("total.txt", str(sum(nums)))),
          ["""echo 'awk "{s += \\$1} END {print s}" "$1"' > sum.sh""", "bash sum.sh nums.txt > total.txt"],
          ("scripts",))


def _checksum() -> None:
    data = bytes(_rng("checksum").randrange(256) for _ in range(4096))
    _task("checksum", "Write the SHA-256 checksum of data.bin (the hex digits only) to answer.txt.", {"data.bin": data},
          expect_text("answer.txt", hashlib.sha256(data).hexdigest()),
          ["sha256sum data.bin | cut -d' ' -f1 > answer.txt"], ("scripts",))


def _loop_files() -> None:
    _task("loop_files", "Create the files day1.txt to day7.txt; each dayN.txt must contain the single line: day N", {},
          all_of(*(expect_text(f"day{i}.txt", f"day {i}") for i in range(1, 8))),
          ['for i in $(seq 7); do echo "day $i" > "day$i.txt"; done'], ("scripts",))


for _make in (_sum_script, _checksum, _loop_files):
    _make()

SUITE = TaskSuite("terminal", _TASKS)
