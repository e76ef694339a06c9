"""Archives: tar and gzip, made, extracted, listed and searched."""

from __future__ import annotations

import gzip
import random

from envs.sandbox import WorkDir
from envs.terminal.checks import DIRS, OUTPUTS, STEMS, WORDS, all_of, expect_lines, expect_text, pick, tar, tar_members
from envs.terminal.families import Spec, families

ARCHIVES = ["backup", "bundle", "snapshot", "release", "project", "export", "package", "site"]


def _secret(rng: random.Random, k: int = 12) -> str:
    return "".join(rng.choices("abcdefghjkmnpqrstuvwxyz23456789", k=k))


def make_make_tar(rng: random.Random) -> Spec:
    src, name = rng.choice(DIRS), f"{rng.choice(ARCHIVES)}.tar.gz"
    a, b, c, sub, var = pick(rng, WORDS, 5)
    files = {f"{src}/{w}.py": f"print('{w} {rng.randrange(1000)}')\n" for w in (a, b, c)}
    files[f"{src}/{sub}/util.py"] = f"{var.upper()} = {rng.randrange(100)}\n"

    def check(wd: WorkDir) -> str | None:
        data = wd.read_bytes(name)
        members = tar_members(data)
        if data is None or members is None:
            return f"{name} is missing or not a readable tar archive"
        if data[:2] != b"\x1f\x8b":
            return f"{name} is not gzip-compressed"
        for path, text in files.items():
            if members.get(path) != text.encode():
                return f"{path} is not in the archive (or differs)"
        return None
    return Spec(f"Create a gzip-compressed tar archive named {name} that contains the {src}/ directory.", files, check,
                [f"tar czf {name} {src}"])


def make_extract_tar(rng: random.Random) -> Spec:
    name = f"{rng.choice(ARCHIVES)}.tar.gz"
    out = rng.choice(["out", "extracted", "unpacked", "restored", "release", "deploy"])
    conf = rng.choice(["config", "conf", "settings", "etc"])
    a, b = pick(rng, WORDS, 2)
    inner = {f"{conf}/{a}.conf": f"port={rng.randrange(1024, 9999)}\n", f"{conf}/{b}.conf": f"host={b}\n",
             "README": f"{rng.choice(WORDS)} bundle\n"}
    return Spec(f"Extract the archive {name} into a new directory named {out}.", {name: tar(inner, compress=True)},
                all_of(*(expect_text(f"{out}/{k}", v) for k, v in inner.items())),
                [f"mkdir -p {out} && tar xzf {name} -C {out}"])


def make_archive_secret(rng: random.Random) -> Spec:
    key = rng.choice(["KEY", "TOKEN", "SECRET", "PASSWORD", "API_KEY", "ACCESS_TOKEN"])
    out = rng.choice([*OUTPUTS, "value.txt", f"{key.lower()}.txt"])
    folder = rng.choice(["logs", "var", "service", "app", "jobs"])
    name = f"{rng.choice([folder, *ARCHIVES])}.tar.gz"
    secret = _secret(rng)
    words = pick(rng, WORDS, rng.randrange(3, 7))
    inner = {f"{folder}/{w}.log": f"{w} started\n{w} stopped\n" for w in words}
    inner[f"{folder}/{rng.choice(words)}.log"] += f"{key}={secret}\n"
    return Spec(f"One of the files inside {name} has a line {key}=<value>. Write the value to {out}.",
                {name: tar(inner, compress=True)}, expect_text(out, secret),
                [f"tar xzf {name} -O | grep '^{key}=' | cut -d= -f2 > {out}"])


def make_gzip_file(rng: random.Random) -> Spec:
    name = f"{rng.choice(STEMS)}.{rng.choice(['txt', 'log', 'csv'])}"
    text = "".join(f"{i} {rng.choice(WORDS)}\n" for i in range(rng.randrange(100, 500)))
    keep = rng.random() < 0.5

    def check(wd: WorkDir) -> str | None:
        data = wd.read_bytes(f"{name}.gz")
        if data is None:
            return f"{name}.gz is missing"
        try:
            if gzip.decompress(data) != text.encode():
                return f"{name}.gz does not hold {name}"
        except (OSError, EOFError):
            return f"{name}.gz is not gzip data"
        return expect_text(name, text)(wd) if keep else None
    rest = "keep the original file too" if keep else "the original may go"
    return Spec(f"Compress {name} with gzip so that {name}.gz exists ({rest}).", {name: text}, check,
                [f"gzip {'-k ' if keep else ''}{name}"])


def make_list_tar(rng: random.Random) -> Spec:
    # dirs and words are prefix-free lowercase, so sort orders them the same in any locale
    name, out = f"{rng.choice(ARCHIVES)}.tar", rng.choice(["listing.txt", "contents.txt", "files.txt", *OUTPUTS])
    dirs = pick(rng, DIRS, rng.randrange(2, 4))
    inner = {f"{rng.choice(dirs)}/{w}.{rng.choice(['txt', 'md', 'py'])}": f"{w}\n"
             for w in pick(rng, WORDS, rng.randrange(4, 8))}
    return Spec(f"Write the names of the files inside {name}, one per line, sorted, to {out}.",
                {name: tar(inner, compress=False)}, expect_lines(out, sorted(inner)), [f"tar tf {name} | sort > {out}"])


def make_gunzip_csv(rng: random.Random) -> Spec:
    name = f"{rng.choice(STEMS)}.csv"
    col = rng.choice(["value", "price", "count", "score", "amount"])
    text = f"id,{col}\n" + "".join(f"{i},{rng.randrange(1000)}\n" for i in range(rng.randrange(20, 60)))
    return Spec(f"Decompress {name}.gz so that {name} holds its contents.",
                {f"{name}.gz": gzip.compress(text.encode(), mtime=0)}, expect_text(name, text), [f"gunzip {name}.gz"])


FAMILIES = families("archives")(make_make_tar, make_extract_tar, make_archive_secret, make_gzip_file, make_list_tar,
                                make_gunzip_csv)
