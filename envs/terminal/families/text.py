"""Text processing: counting, filtering, sorting, extracting and rewriting the lines, words and fields of files."""

from __future__ import annotations

import json
import random
import re
from collections import Counter

from envs.terminal.checks import DIRS, NAMES, OUTPUTS, STEMS, WORDS, expect_lines, expect_text, pick
from envs.terminal.families import Spec, families


def _listed(items: list[str]) -> str:
    """``a, b and c``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


def make_count_lines(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(STEMS)}.{rng.choice(['txt', 'log', 'md'])}", rng.choice(OUTPUTS)
    lines = [" ".join(rng.choices(WORDS, k=rng.randrange(1, 4))) for _ in range(rng.randrange(20, 120))]
    return Spec(f"Write the number of lines in {src} to {out}.", {src: "\n".join(lines) + "\n"},
                expect_text(out, str(len(lines))), [f"wc -l < {src} > {out}"])


def make_grep_errors(rng: random.Random) -> Spec:
    log = f"{rng.choice(['app', 'server', 'worker', 'api', 'build', 'cron'])}.log"
    level = rng.choice(["ERROR", "WARN", "DEBUG", "FATAL"])
    out = rng.choice([f"{level.lower()}s.txt", f"{level.lower()}.txt", *OUTPUTS])
    levels, verbs = ["INFO", "INFO", "WARN", "ERROR", "DEBUG", "FATAL"], ["event", "started", "stopped", "failed"]
    lines = [f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d} {rng.choice(levels)} {rng.choice(WORDS)} "
             f"{rng.choice(verbs)}" for _ in range(rng.randrange(30, 80))]
    lines[rng.randrange(len(lines))] = f"2024-06-01 {level} {rng.choice(WORDS)} failed"
    return Spec(f"Write every line of {log} that contains {level} to {out}, in their original order.",
                {log: "\n".join(lines) + "\n"}, expect_lines(out, [x for x in lines if level in x]),
                [f"grep {level} {log} > {out}"])


def make_sort_unique(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(['names', 'people', 'users', 'guests', 'members'])}.txt", rng.choice(
        ["sorted.txt", "unique.txt", *OUTPUTS])
    names = rng.choices(pick(rng, NAMES, rng.randrange(5, 11)), k=rng.randrange(20, 50))
    reverse = rng.random() < 0.4
    order = "in reverse alphabetical order (z first)" if reverse else "sorted alphabetically"
    return Spec(f"Write the distinct lines of {src}, {order}, to {out}.", {src: "\n".join(names) + "\n"},
                expect_lines(out, sorted(set(names), reverse=reverse)),
                [f"sort -u{'r' if reverse else ''} {src} > {out}"])


def make_top_word(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(STEMS)}.txt", rng.choice(OUTPUTS)
    vocab = pick(rng, WORDS, rng.randrange(5, 9))
    counts = {w: rng.randrange(5, 20) for w in vocab[1:]}
    counts[vocab[0]] = max(counts.values()) + rng.randrange(1, 6)  # strictly the most frequent: no tie
    words = [w for w, n in counts.items() for _ in range(n)]
    rng.shuffle(words)
    per = rng.randrange(6, 12)
    text = "\n".join(" ".join(words[i:i + per]) for i in range(0, len(words), per)) + "\n"
    top = Counter(words).most_common(1)[0][0]
    return Spec(f"Write the most frequent word in {src} to {out}.", {src: text}, expect_text(out, top),
                [f"tr -s ' ' '\\n' < {src} | sort | uniq -c | sort -rn | head -n 1 | awk '{{print $2}}' > {out}"])


def make_csv_sum(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(['sales', 'orders', 'invoices', 'expenses', 'stock'])}.csv", rng.choice(OUTPUTS)
    key = rng.choice(["region", "store", "city", "team"])
    numeric = pick(rng, ["amount", "quantity", "price", "cost", "units"], rng.randrange(2, 4))
    col = rng.choice(numeric)
    header = [key, *numeric]
    rows = [[rng.choice(["north", "south", "east", "west"]), *(str(rng.randrange(1, 500)) for _ in numeric)]
            for _ in range(rng.randrange(10, 40))]
    i = header.index(col)
    text = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    return Spec(f"Write the sum of the {col} column of {src} to {out}.", {src: text},
                expect_text(out, str(sum(int(r[i]) for r in rows))),
                [f"awk -F, 'NR > 1 {{s += ${i + 1}}} END {{print s}}' {src} > {out}"])


def make_replace_word(rng: random.Random) -> Spec:
    conf = rng.choice(["config.ini", "settings.ini", "app.conf", "setup.cfg", "service.conf"])
    old, new, other = pick(rng, WORDS, 3)
    text = (f"[main]\nname = {old}\npath = /srv/{old}/data\n{old}_mode = {rng.choice(['on', 'off'])}\n"
            f"backup = /srv/{other}/{rng.randrange(10, 99)}\n# {old} is the default\n")
    return Spec(f"In {conf}, replace every occurrence of {old} with {new} (edit the file in place).", {conf: text},
                expect_text(conf, text.replace(old, new)), [f"sed -i 's/{old}/{new}/g' {conf}"])


def make_uppercase(rng: random.Random) -> Spec:
    stem = rng.choice(STEMS)
    src, out = f"{stem}.txt", rng.choice(["upper.txt", f"{stem}_upper.txt", "caps.txt", *OUTPUTS])
    text = "\n".join(" ".join(rng.choices(WORDS, k=rng.randrange(3, 7))) for _ in range(rng.randrange(4, 12))) + "\n"
    return Spec(f"Write the contents of {src} converted to upper case to {out}.", {src: text},
                expect_text(out, text.upper()), [f"tr a-z A-Z < {src} > {out}"])


def make_extract_emails(rng: random.Random) -> Spec:
    src = f"{rng.choice(['contacts', 'people', 'directory', 'team', 'notes', 'signups', 'staff', 'inbox'])}.txt"
    out = rng.choice(["emails.txt", "addresses.txt", *OUTPUTS])
    domains = pick(rng, ["example.com", "mail.org", "corp.net", "acme.io", "shop.co", "uni.edu"], 3)
    emails = [f"{n}.{rng.choice(WORDS)}@{rng.choice(domains)}" for n in pick(rng, NAMES, rng.randrange(4, 9))]
    lines = [f"Contact {e.split('.')[0].title()} at {e} for {rng.choice(WORDS)} questions." for e in emails]
    lines += [f"Reminder: {rng.choice(emails)} again", "No address on this line."]
    rng.shuffle(lines)
    return Spec(f"Write every email address in {src} to {out}: one per line, sorted, no duplicates.",
                {src: "\n".join(lines) + "\n"}, expect_lines(out, sorted(set(emails))),
                [f"grep -oE '[a-z0-9._]+@[a-z0-9.]+[.][a-z]+' {src} | sort -u > {out}"])


def make_line_range(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(STEMS)}.txt", rng.choice(["slice.txt", *OUTPUTS])
    first = rng.randrange(2, 25)
    last = first + rng.randrange(2, 15)
    nums = [str(n) for n in rng.sample(range(1000), last + rng.randrange(5, 30))]
    return Spec(f"Write lines {first} to {last} (inclusive) of {src} to {out}.", {src: "\n".join(nums) + "\n"},
                expect_lines(out, nums[first - 1:last]), [f"sed -n '{first},{last}p' {src} > {out}"])


def make_concat_parts(rng: random.Random) -> Spec:
    prefix, out = rng.choice(["part", "chunk", "piece", "section"]), rng.choice(["full.txt", "all.txt", "merged.txt"])
    n = rng.randrange(2, 6)
    files = {f"{prefix}{i}.txt": " ".join(rng.choices(WORDS, k=4)) + "\n" for i in range(1, n + 2)}
    names = [f"{prefix}{i}.txt" for i in range(1, n + 1)]  # the last part on disk is not asked for
    if rng.random() < 0.5:
        rng.shuffle(names)
    return Spec(f"Concatenate {_listed(names)}, in that order, into {out}.", files,
                expect_text(out, "".join(files[f] for f in names)), [f"cat {' '.join(names)} > {out}"])


def make_json_version(rng: random.Random) -> Spec:
    src, out = rng.choice(["package.json", "manifest.json", "app.json", "meta.json"]), rng.choice(OUTPUTS)
    doc = {"name": f"{rng.choice(WORDS)}-{rng.choice(['app', 'tool', 'lib', 'cli'])}",
           "version": f"{rng.randrange(1, 9)}.{rng.randrange(20)}.{rng.randrange(50)}",
           "license": rng.choice(["MIT", "Apache-2.0", "BSD-3-Clause", "ISC", "GPL-3.0"]),
           "main": f"{rng.choice(['index', 'main', 'server', 'cli'])}.js",
           "dependencies": {"left-pad": "1.3.0", rng.choice(WORDS): f"^{rng.randrange(1, 5)}.0.0"}, "private": True}
    key = rng.choice(["version", "name", "license", "main"])
    return Spec(f'Write the value of the "{key}" field of {src} to {out}.', {src: json.dumps(doc, indent=2) + "\n"},
                expect_text(out, doc[key]), [f"""grep -o '"{key}": *"[^"]*"' {src} | cut -d'"' -f4 > {out}"""])


def make_reverse_lines(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(STEMS)}.txt", rng.choice(["reversed.txt", *OUTPUTS])
    items = pick(rng, WORDS, rng.randrange(6, 16))
    return Spec(f"Write the lines of {src} in reverse order to {out}.", {src: "\n".join(items) + "\n"},
                expect_lines(out, items[::-1]), [f"tac {src} > {out}"])


def make_csv_column(rng: random.Random) -> Spec:
    src = f"{rng.choice(['users', 'people', 'staff', 'members', 'customers'])}.csv"
    header = ["name", "email", "age", "city"]
    rng.shuffle(header)
    col = rng.choice(header)
    out = rng.choice([f"{col}.txt", *OUTPUTS])
    domain = rng.choice(["example.com", "mail.org", "corp.net"])
    rows = [{"name": n, "email": f"{n}@{domain}", "age": str(rng.randrange(18, 80)),
             "city": rng.choice(["paris", "lima", "oslo", "cairo", "tokyo", "quito", "dublin"])}
            for n in pick(rng, NAMES, rng.randrange(5, 11))]
    i = header.index(col)
    text = ",".join(header) + "\n" + "".join(",".join(r[h] for h in header) + "\n" for r in rows)
    return Spec(f"Write the {col} column of {src} (without the header line) to {out}.", {src: text},
                expect_lines(out, [r[col] for r in rows]), [f"tail -n +2 {src} | cut -d, -f{i + 1} > {out}"])


def make_count_word(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(['story', 'tale', 'chapter', 'book', 'saga'])}.txt", rng.choice(OUTPUTS)
    word = rng.choice(["dragon", "knight", "castle", "wizard", "sword", "crown", "tower", "ghost"])
    pool = [word, word.title(), word.upper(), f"{word},", f"{word}s", f"{word}ling", f"mini{word}",
            "the", "a", "flew", "over", "dark", "old", "king"]
    words = rng.choices(pool, k=rng.randrange(80, 180))
    words[rng.randrange(len(words))] = word
    per = rng.randrange(8, 15)
    text = "\n".join(" ".join(words[i:i + per]) for i in range(0, len(words), per)) + "\n"
    n = len(re.findall(rf"(?<![A-Za-z0-9_]){word}(?![A-Za-z0-9_])", text, re.IGNORECASE))  # as grep -oiw counts
    return Spec(f"Write how many times the word {word} occurs in {src} (any case, whole words only) to {out}.",
                {src: text}, expect_text(out, str(n)), [f"grep -oiw {word} {src} | wc -l > {out}"])


def make_dedupe_order(rng: random.Random) -> Spec:
    src, out = f"{rng.choice(STEMS)}.txt", rng.choice(["unique.txt", "deduped.txt", *OUTPUTS])
    items = rng.choices(pick(rng, WORDS, rng.randrange(5, 10)), k=rng.randrange(20, 40))
    return Spec(f"Write {src} without its repeated lines to {out}: keep the first occurrence of each line, in the "
                "original order.", {src: "\n".join(items) + "\n"}, expect_lines(out, list(dict.fromkeys(items))),
                [f"awk '!seen[$0]++' {src} > {out}"])


def make_env_file(rng: random.Random) -> Spec:
    src = rng.choice(["settings.txt", "config.txt", "params.txt", "vars.txt"])
    out = rng.choice([".env", "app.env", "prod.env", "local.env"])
    sep = rng.choice([": ", " = ", "="])
    prefix = rng.choice(["", "", "APP_", "SVC_"])
    keys = pick(rng, ["host", "port", "user", "mode", "region", "timeout", "level", "db_name", "cache_dir"],
                rng.randrange(3, 7))
    pairs = [(k, f"{rng.choice(WORDS)}{rng.randrange(100)}") for k in keys]
    form = f"{prefix}KEY=value" if prefix else "KEY=value"
    extra = f", with the key in upper case and prefixed with {prefix}" if prefix else ", with the key in upper case"
    return Spec(f"{src} has lines 'key{sep}value'. Write them to {out} as lines {form}{extra}, in the same order.",
                {src: "".join(f"{k}{sep}{v}\n" for k, v in pairs)},
                expect_lines(out, [f"{prefix}{k.upper()}={v}" for k, v in pairs]),
                [f"""awk -F'{sep}' '{{print "{prefix}" toupper($1) "=" $2}}' {src} > {out}"""])


def make_find_todo(rng: random.Random) -> Spec:
    root, sub = pick(rng, ["src", "lib", "app", "pkg", *DIRS], 2)
    marker = rng.choice(["TODO", "FIXME", "XXX", "HACK"])
    out = rng.choice([f"{marker.lower()}.txt", *OUTPUTS])
    decoys = [m for m in ["TODO", "FIXME", "XXX", "HACK"] if m != marker]
    files, hits = {}, []
    for i, w in enumerate(pick(rng, WORDS, rng.randrange(5, 9))):
        path = f"{root}/{f'{sub}/' if rng.random() < 0.5 else ''}{w}.py"
        has = i == 0 or (i > 1 and rng.random() < 0.5)  # at least one file with the marker and one without
        note = f"# {marker}: finish" if has else f"# {rng.choice(decoys)}: check" if rng.random() < 0.5 else "pass"
        files[path] = f"def {w}():\n    {note}\n    return {i}\n"
        hits += [path] if has else []
    return Spec(f"Write the paths (relative to /workspace, like {root}/x.py) of the files under {root}/ that contain "
                f"{marker} to {out}, one per line, sorted.", files, expect_lines(out, sorted(hits)),
                [f"grep -rl {marker} {root} | sort > {out}"])


FAMILIES = families("text")(make_count_lines, make_grep_errors, make_sort_unique, make_top_word, make_csv_sum,
                            make_replace_word, make_uppercase, make_extract_emails, make_line_range,
                            make_concat_parts, make_json_version, make_reverse_lines, make_csv_column,
                            make_count_word, make_dedupe_order, make_env_file, make_find_todo)
