"""Files: create, copy, move, delete, permissions, links, sizes and counts."""

from __future__ import annotations

import random
import stat

from envs.sandbox import WorkDir
from envs.terminal.checks import DIRS, OUTPUTS, STEMS, WORDS, expect_text, pick
from envs.terminal.families import Spec, families


def make_create_file(rng: random.Random) -> Spec:
    name = f"{rng.choice(STEMS)}.txt"
    line = " ".join(pick(rng, WORDS, 2))
    return Spec(f"Create a file named {name} that contains exactly the line: {line}", {}, expect_text(name, line),
                [f"echo '{line}' > {name}"])


def make_make_dirs(rng: random.Random) -> Spec:
    a, b, c = pick(rng, DIRS + WORDS, 3)
    path = f"{a}/{b}/{c}/__init__.py"

    def check(wd: WorkDir) -> str | None:
        return None if wd.is_file(path) and wd.read_bytes(path) == b"" else f"{path} is missing or not empty"
    return Spec(f"Create the directory {a}/{b}/{c} and, inside it, an empty file named __init__.py.", {}, check,
                [f"mkdir -p {a}/{b}/{c} && touch {path}"])


def make_copy_file(rng: random.Random) -> Spec:
    src_dir, dst_dir = pick(rng, DIRS, 2)
    name = f"{rng.choice(STEMS)}.txt"
    text = "\n".join(" ".join(rng.choices(WORDS, k=6)) for _ in range(12)) + "\n"
    src, dst = f"{src_dir}/{name}", f"{dst_dir}/{name}"

    def check(wd: WorkDir) -> str | None:
        return expect_text(dst, text)(wd) or expect_text(src, text)(wd)
    return Spec(f"Copy {src} to {dst} (create the {dst_dir} folder). Keep the original.", {src: text}, check,
                [f"mkdir -p {dst_dir} && cp {src} {dst}"])


def make_rename_ext(rng: random.Random) -> Spec:
    folder = rng.choice(DIRS)
    old, new = pick(rng, ["txt", "md", "log", "csv", "bak", "dat"], 2)
    stems = pick(rng, WORDS, rng.randrange(3, 6))
    keep = f"{folder}/readme.{'rst' if 'md' in (old, new) else 'md'}"
    files = {f"{folder}/{w}.{old}": f"{w}\n" for w in stems} | {keep: "readme\n"}

    def check(wd: WorkDir) -> str | None:
        if any(f.endswith(f".{old}") for f in wd.files(folder)):
            return f"{folder}/ still holds .{old} files"
        for w in stems:
            if wd.read_text(f"{folder}/{w}.{new}") != f"{w}\n":
                return f"{folder}/{w}.{new} is missing or changed"
        return None if wd.read_text(keep) == "readme\n" else f"{keep} changed"
    return Spec(f"Rename every .{old} file in {folder}/ to the same name with the extension .{new} instead.", files,
                check, [f'cd {folder} && for f in *.{old}; do mv "$f" "${{f%.{old}}}.{new}"; done'])


def make_delete_tmp(rng: random.Random) -> Spec:
    root = rng.choice(["cache", "build", "tmp", "scratch"])
    ext = rng.choice(["tmp", "bak", "swp", "old"])
    files = {}
    for d in (root, f"{root}/a", f"{root}/a/b", f"{root}/c"):
        for _ in range(3):
            w = rng.choice(WORDS) + str(rng.randrange(100))
            files[f"{d}/{w}.{ext}"] = "junk\n"
            files[f"{d}/{w}.keep"] = "keep\n"
    keep = sorted(f for f in files if f.endswith(".keep"))

    def check(wd: WorkDir) -> str | None:
        got = wd.files(root)
        if any(f.endswith(f".{ext}") for f in got):
            return f"some .{ext} files are still there"
        return None if got == keep else f"files other than .{ext} ones were removed or added"
    return Spec(f"Delete every file whose name ends in .{ext} anywhere under {root}/, and nothing else.", files, check,
                [f"find {root} -name '*.{ext}' -type f -delete"])


def make_make_executable(rng: random.Random) -> Spec:
    name = f"{rng.choice(['run', 'build', 'deploy', 'start', 'check', 'backup'])}.sh"
    script = f"#!/bin/sh\necho {rng.choice(WORDS)}\n"

    def check(wd: WorkDir) -> str | None:
        ok = (wd.mode(name) or 0) & stat.S_IXUSR and wd.read_text(name) == script
        return None if ok else f"{name} is not executable (or was changed)"
    return Spec(f"Make the script {name} executable by its owner.", {name: script}, check, [f"chmod u+x {name}"],
                modes={name: 0o644})


def make_symlink(rng: random.Random) -> Spec:
    base = rng.choice(["releases", "versions", "builds"])
    link = rng.choice(["current", "latest", "live", "active"])
    versions = [f"v{i}" for i in range(1, rng.randrange(3, 5))]
    target = f"{base}/{rng.choice(versions)}"
    files = {f"{base}/{v}/app.txt": f"{v}\n" for v in versions}

    def check(wd: WorkDir) -> str | None:
        if not wd.is_symlink(link):
            return f"{link} is not a symbolic link"
        got = wd.readlink(link).rstrip("/")
        ok = got in (target, f"./{target}", f"/workspace/{target}")
        return None if ok else f"{link} points to {got!r}, not {target}"
    return Spec(f"Create a symbolic link named {link} that points to the directory {target}.", files, check,
                [f"ln -s {target} {link}"])


def make_largest_file(rng: random.Random) -> Spec:
    folder, out = rng.choice(DIRS), rng.choice(OUTPUTS)
    sizes = rng.sample(range(100, 5000), rng.randrange(4, 8))
    files = {f"{folder}/{w}.bin": "x" * n for w, n in zip(pick(rng, WORDS, len(sizes)), sizes)}
    largest = max(files, key=lambda k: len(files[k])).split("/")[1]
    return Spec(f"Write the name of the largest file in {folder}/ (just the file name) to {out}.", files,
                expect_text(out, largest), [f"ls -S {folder} | head -n 1 > {out}"])


def make_count_logs(rng: random.Random) -> Spec:
    root, out = rng.choice(["logs", "var", "data", "runs"]), rng.choice(OUTPUTS)
    ext = rng.choice(["log", "txt", "csv"])
    files, n = {}, 0
    for d in (root, f"{root}/web", f"{root}/web/old", f"{root}/db"):
        for i in range(rng.randrange(2, 6)):
            e = rng.choice([ext, ext, "gz", "json"])
            files[f"{d}/f{i}.{e}"] = "line\n"
            n += e == ext
    return Spec(f"Count the files ending in .{ext} under {root}/ (subfolders included) and write the number to {out}.",
                files, expect_text(out, str(n)), [f"find {root} -type f -name '*.{ext}' | wc -l > {out}"])


def make_total_size(rng: random.Random) -> Spec:
    folder, out = rng.choice(DIRS), rng.choice(OUTPUTS)
    files = {f"{folder}/{w}.dat": "z" * rng.randrange(10, 900) for w in pick(rng, WORDS, rng.randrange(3, 7))}
    total = sum(len(v) for v in files.values())
    return Spec(f"Write the total size in bytes of all files in {folder}/ to {out}.", files,
                expect_text(out, str(total)), [f"cat {folder}/* | wc -c > {out}"])


FAMILIES = families("files")(make_create_file, make_make_dirs, make_copy_file, make_rename_ext, make_delete_tmp,
                             make_make_executable, make_symlink, make_largest_file, make_count_logs, make_total_size)
