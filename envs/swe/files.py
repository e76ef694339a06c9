"""The agent's file edits, run inside the sandbox (never host-side: the agent controls the work dir, and a symlink
there must not let an edit write a host file), and the host-side view of what it changed.

``EDIT_SCRIPT`` runs under the sandbox's python3 with one JSON request on stdin and prints one JSON answer: the
observation, and whether the edit was made. A path counts as inside the repo when its real path (symlinks followed)
is under /workspace.
"""

from __future__ import annotations

import difflib
import json

from envs.sandbox import Sandbox, WorkDir

EDIT_TIMEOUT_S = 10.0
MAX_DIFF_CHARS = 16 << 10
MAX_READ_BYTES = 1 << 20
SKIP_PARTS = ("__pycache__",)

EDIT_SCRIPT = r'''
import json, os, sys
req = json.load(sys.stdin)
root, path = "/workspace", req["path"]
def done(ok, message):
    print(json.dumps({"ok": ok, "message": message}))
    sys.exit(0)
full = os.path.realpath(os.path.join(root, path))
if not full.startswith(root + "/"):
    done(False, f"{path} is outside the repository ({root})")
try:
    if req["op"] == "write_file":
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(req["content"])
        done(True, f"Wrote {path} ({len(req['content'])} characters).")
    if not os.path.isfile(full):
        done(False, f"{path}: no such file" + (" (a directory)" if os.path.isdir(full) else ""))
    with open(full, encoding="utf-8") as f:
        text = f.read()
    old, new = req["old"], req["new"]
    n = text.count(old)
    if n == 0:
        done(False, f"{path}: the old text was not found (it must match exactly, whitespace included); nothing changed")
    if n > 1:
        done(False, f"{path}: the old text occurs {n} times; give more context so it is unique; nothing changed")
    at = text.index(old)
    text = text[:at] + new + text[at + len(old):]
    with open(full, "w", encoding="utf-8") as f:
        f.write(text)
    lines = text.split("\n")
    first = text[:at].count("\n")
    last = first + new.count("\n")
    lo, hi = max(0, first - 3), min(len(lines), last + 4)
    shown = "\n".join(f"{i + 1:4d}  {lines[i]}" for i in range(lo, hi))
    done(True, f"Edited {path}; lines {lo + 1}-{hi} now read:\n{shown}")
except UnicodeDecodeError:
    done(False, f"{path} is not a UTF-8 text file; nothing changed")
except OSError as err:
    done(False, f"{path}: {err.strerror or err}")
'''


def apply_edit(sandbox: Sandbox, op: str, args: dict[str, str]) -> tuple[bool, str]:
    """Run an edit or write_file inside the sandbox: (made, observation)."""
    request = json.dumps({"op": op, **args}).encode()
    rc, out, timed_out = sandbox.run(["python3", "-I", "-c", EDIT_SCRIPT], timeout=EDIT_TIMEOUT_S, input=request)
    if timed_out:
        return False, f"{op} timed out; nothing is known to have changed"
    try:
        answer = json.loads(out.decode("utf-8", errors="replace").strip().splitlines()[-1])
        return bool(answer["ok"]), str(answer["message"])
    except (ValueError, IndexError, KeyError, TypeError):
        return False, f"{op} failed (exit status {rc}): {out.decode(errors='replace')[-500:]}"


def snapshot(workdir: WorkDir) -> dict[str, bytes]:
    """The work dir's regular files (symlinks and caches left out), up to ``MAX_READ_BYTES`` each."""
    out = {}
    for rel in workdir.files():
        if any(part in SKIP_PARTS for part in rel.split("/")) or rel.endswith(".pyc"):
            continue
        data = workdir.read_bytes(rel, MAX_READ_BYTES)
        if data is not None:
            out[rel] = data
    return out


def unified_diff(original: dict[str, str], now: dict[str, bytes]) -> str:
    """The agent's changes against the original repo, as one unified diff (git-style a/ b/ names), truncated."""
    chunks = []
    for path in sorted(set(original) | set(now)):
        before = original.get(path)
        try:
            after = now[path].decode("utf-8") if path in now else None
        except UnicodeDecodeError:
            chunks.append(f"Binary files {'a/' + path if before is not None else '/dev/null'} and b/{path} differ\n")
            continue
        if before == after:
            continue
        for line in difflib.unified_diff(
                (before or "").splitlines(keepends=True), (after or "").splitlines(keepends=True),
                fromfile=f"a/{path}" if before is not None else "/dev/null",
                tofile=f"b/{path}" if after is not None else "/dev/null"):
            chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    diff = "".join(chunks)
    if len(diff) > MAX_DIFF_CHARS:
        diff = diff[:MAX_DIFF_CHARS] + f"\n[... {len(diff) - MAX_DIFF_CHARS} more characters of diff ...]\n"
    return diff
