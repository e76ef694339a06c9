"""Regression tests for the sandbox's security review: each test makes the attack through the project's own API and
asserts that it is blocked.

1. host-side reads through agent-controlled paths (symlink swaps racing the reads, the SWE env's diff);
2. tool-call state carrying over between calls and episodes;
3. host resources (disk quota, caps before reading, deep trees);
4. kernel surface (nested user namespaces, the seccomp filter);
5. uid collisions between sandbox roots.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from envs.sandbox import Sandbox, SandboxConfig, SandboxLimits, processes_of_uid, uid_lock_dir
from envs.swe.actions import format_action
from envs.swe.env import SweConfig, SweEnv
from envs.swe.tasks import SUITE as SWE_SUITE
from envs.toolcall.actions import python_call
from envs.toolcall.env import ToolCallConfig, ToolCallEnv
from envs.toolcall.tasks import SUITE as TOOLCALL_SUITE

SH = "/bin/bash"
SECRET = "ROOT-ONLY-HOST-SECRET"


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    """A host file readable by root only, in a folder the sandbox's uid may pass through (as /etc/shadow)."""
    os.chmod(tmp_path, 0o755)
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\n")
    os.chmod(secret, 0o600)
    return secret


def _swapper(secret: Path) -> str:
    """Swap names between a file and a link to the secret, a folder and a link to the secret's folder, forever."""
    return (f"while :; do echo ok > t; mv -f t data.txt; ln -sfn {secret} l; mv -fT l data.txt; "
            f"mkdir -p d/e; echo ok > d/secret.txt; ln -sfn {secret.parent} d2; mv -fT d2 d 2>/dev/null; "
            f"rm -rf d 2>/dev/null; done")


# ---------------------------------------------------------------------------------------------------------------------
# 1. host-side reads
# ---------------------------------------------------------------------------------------------------------------------

def test_host_reads_never_follow_a_link_swapped_in_while_they_read(secret_file: Path) -> None:
    with Sandbox() as sb:
        proc = sb.spawn([SH, "-c", _swapper(secret_file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen: set[str | None] = set()
        snapshots = 0
        try:
            deadline = time.monotonic() + 3.0
            while time.monotonic() < deadline:
                wd = sb.workdir
                seen.add(wd.read_text("data.txt"))
                seen.add(wd.read_text("d/secret.txt"))
                seen |= {wd.read_text(rel) for rel in wd.files()}
                snap = sb.workdir.snapshot()
                seen |= {data.decode() for data in snap.files.values()}
                snapshots += 1
        finally:
            sb.kill()
            proc.wait(10)
    assert snapshots > 10
    assert not any(SECRET in text for text in seen if text), "a host file was read through a link"
    assert "ok\n" in seen  # the reads did run, and do read the agent's real files


def test_the_swe_diff_never_carries_a_host_file(secret_file: Path) -> None:
    """The agent leaves a swapper running and submits: the diff taken at the end (and diffs taken meanwhile) hold
    no byte of the root-only host file."""
    env = SweEnv(SweConfig(command_timeout_s=5.0, max_steps=20))
    try:
        task = SWE_SUITE.tasks()[0]
        env.reset(task)
        source = next(p for p in task.data.files if p.endswith(".py") and not task.data.is_test(p))
        swap = (f"while :; do cp {source} t; ln -sfn {secret_file} l; mv -fT l {source}; mv -fT t {source}; "
                f"ln -sfn {secret_file} new.txt; echo x > n2; mv -fT n2 new.txt; done")
        r = env.step(format_action("bash", command=f"cp {source} keep; ( {swap} ) >/dev/null 2>&1 & echo started"))
        assert "started" in r.observation
        diffs = [env.diff() for _ in range(30)]
        r = env.step(format_action("submit"))
        diffs.append(r.info["diff"])
        outcome = env.evaluate()
    finally:
        env.close()
    assert not any(SECRET in d for d in diffs) and SECRET not in outcome.detail


def test_a_frozen_sandbox_holds_still_and_goes_on_after() -> None:
    with Sandbox() as sb:
        proc = sb.spawn([SH, "-c", "i=0; while :; do i=$((i+1)); echo $i > n.tmp; mv n.tmp n; done"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while sb.workdir.read_text("n") is None:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with sb.frozen():
            first = sb.workdir.read_text("n")
            time.sleep(0.3)
            assert sb.workdir.read_text("n") == first
        time.sleep(0.3)
        assert sb.workdir.read_text("n") != first
        sb.kill()
        proc.wait(10)


# ---------------------------------------------------------------------------------------------------------------------
# 2. tool-call state
# ---------------------------------------------------------------------------------------------------------------------

@pytest.fixture
def toolcall():
    env = ToolCallEnv(ToolCallConfig(call_timeout_s=5.0, max_steps=16))
    env.reset(TOOLCALL_SUITE.tasks("train")[0])
    yield env
    env.close()


def _call(env: ToolCallEnv, code: str) -> str:
    return env.step(python_call(code)).observation


LOOK = ("import os\nprint(sorted(os.listdir('/dev/shm')), sorted(os.listdir('/tmp')), sorted(os.listdir('.')), "
        "oct(os.stat('/workspace').st_mode & 0o777), oct(os.stat('/tmp').st_mode & 0o777))\n"
        "open('/workspace/w', 'w').write('w'); open('/tmp/w', 'w').write('w'); print('writable')")


def _next_episode(env: ToolCallEnv) -> None:
    env.reset(TOOLCALL_SUITE.tasks("train")[1])


@pytest.mark.parametrize("attack", [
    "open('/dev/shm/state', 'w').write('x'); os.mkdir('/dev/shm/d'); open('/dev/shm/d/f', 'w').write('x')",
    "os.makedirs('/tmp/locked/inner'); open('/tmp/locked/inner/f', 'w').write('x'); os.chmod('/tmp/locked/inner', 0);"
    " os.chmod('/tmp/locked', 0); os.chmod('/tmp', 0o500)",
    "open('/workspace/f', 'w').write('x'); os.makedirs('/workspace/d'); os.chmod('/workspace/d', 0);"
    " os.chmod('/workspace', 0o500)",
], ids=["dev-shm", "locked-tmp", "read-only-workspace"])
@pytest.mark.parametrize("then_kill_server", [False, True], ids=["server-sweeps", "server-killed"])
def test_no_state_reaches_the_next_call_nor_the_next_episode(toolcall, attack: str, then_kill_server: bool) -> None:
    code = f"import os, signal\n{attack}\nprint('set', flush=True)\n"
    if then_kill_server:  # the server dies before it can clean up: the host must
        code += "os.kill(os.getppid(), signal.SIGKILL)\n"
    out = _call(toolcall, code)
    assert "set" in out or "a new one was started" in out
    clean = "[] [] [] 0o700 0o755\nwritable\n[exit status 0]"
    assert _call(toolcall, LOOK) == clean  # the next call
    out = _call(toolcall, "import os\n" + attack + "\nprint('again')")
    assert "again" in out
    _next_episode(toolcall)
    assert _call(toolcall, LOOK) == clean  # the next episode


def test_a_deep_tree_xattrs_times_and_ipc_do_not_carry_over(toolcall) -> None:
    code = ("import os, ctypes\n"
            "os.chdir('/tmp')\nfor _ in range(3000):\n    os.mkdir('d'); os.chdir('d')\n"
            "os.chdir('/workspace')\n"
            "os.setxattr('/tmp', 'user.state', b'x')\nos.utime('/workspace', (12345, 12345))\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print('shm', libc.shmget(0x1234, 4096, 0o1600) >= 0, 'msg', libc.msgget(0x1234, 0o1600) >= 0)")
    assert _call(toolcall, code) == "shm True msg True\n[exit status 0]"
    look = ("import os\nprint(os.listdir('/tmp'), os.listxattr('/tmp'), os.stat('/workspace').st_mtime != 12345,\n"
            "[len(open('/proc/sysvipc/' + k).read().splitlines()) for k in ('shm', 'msg', 'sem')])")
    assert _call(toolcall, look) == "[] [] True [1, 1, 1]\n[exit status 0]"


def test_a_call_cannot_change_the_servers_limits_for_the_next_call(toolcall) -> None:
    """prlimit(2) on the parent needs only the same uid: the lowered limit must not reach the next call."""
    before = _call(toolcall, "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))")
    out = _call(toolcall, "import os, resource\n"
                          "resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (16, 16)); print('lowered')")
    assert out.startswith("lowered") or "Operation not permitted" in out
    assert _call(toolcall, "import resource\nprint(resource.getrlimit(resource.RLIMIT_NOFILE))") == before


# ---------------------------------------------------------------------------------------------------------------------
# 3. host resources
# ---------------------------------------------------------------------------------------------------------------------

def _need_quota(sb: Sandbox) -> None:
    if sb.quota != "tmpfs":
        pytest.skip("no tmpfs can be mounted for the work dir here (the host does not run as root)")


def test_writing_past_the_disk_quota_fails_inside_and_the_host_stays_under_it() -> None:
    quota = 16 << 20
    with Sandbox(SandboxConfig(limits=SandboxLimits(disk_bytes=quota, tmp_bytes=8 << 20))) as sb:
        _need_quota(sb)
        rc, out, _ = sb.run([SH, "-c", "for i in $(seq 1 40); do head -c 1M /dev/zero > f$i || break; done; "
                                       "for d in /tmp /dev/shm; do head -c 20M /dev/zero > $d/big; done; "
                                       "touch /dev/x; ls | wc -l"], timeout=60)
        text = out.decode()
        assert text.count("No space left on device") >= 3  # the work dir, /tmp and /dev/shm
        assert "Read-only file system" in text  # the rest of /dev
        assert int(text.split()[-1]) < 40
        st = os.statvfs(sb.work_dir)
        assert (st.f_blocks - st.f_bfree) * st.f_frsize <= quota
        used = sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(sb.work_dir) for f in fs)
        assert used <= quota
    with Sandbox(SandboxConfig(limits=SandboxLimits(inodes=1000))) as sb:
        _need_quota(sb)
        rc, out, _ = sb.run(["python3", "-c", "import os\ntry:\n    for i in range(5000): os.mkdir(f'd{i}')\n"
                                              "except OSError as err: print(i, err.strerror)"], timeout=60)
        made, _, why = out.decode().strip().partition(" ")
        assert int(made) < 1000 and why == "No space left on device"  # files and folders are bounded too


def test_caps_apply_before_anything_is_read() -> None:
    with Sandbox() as sb:
        rc, _, _ = sb.run([SH, "-c", "mkdir many && cd many && seq 1 3000 | xargs touch && cd .. && "
                                     "head -c 3M /dev/zero > big && echo small > small"], timeout=60)
        assert rc == 0
        assert len(sb.workdir.files(limit=100)) <= 100
        snap = sb.workdir.snapshot(max_files=100)
        assert len(snap.files) <= 100 and not snap.complete
        snap = sb.workdir.snapshot(max_files=10_000, max_file_bytes=1 << 20)
        assert "big" in snap.skipped and snap.files["small"] == b"small\n" and snap.complete
        snap = sb.workdir.snapshot(max_files=10_000, max_file_bytes=4 << 20, max_total_bytes=1 << 20)
        assert "big" not in snap.files and "big" in snap.skipped
        assert sum(len(v) for v in snap.files.values()) <= 1 << 20


@pytest.mark.parametrize("quota", [True, False], ids=["tmpfs", "plain-dir"])
def test_a_2000_deep_tree_is_listed_and_closed_and_its_uid_slot_freed(quota: bool) -> None:
    # one uid: the next sandbox gets it only if it was freed
    config = SandboxConfig(uid_base=320_000, uid_count=1, disk_quota=quota)
    sb = Sandbox(config)
    uid, work = sb.uid, sb.work_dir
    rc, _, _ = sb.run(["python3", "-c", "import os\nfor _ in range(2000):\n    os.mkdir('d'); os.chdir('d')\n"
                                        "open('f', 'w').write('deep\\n')"], timeout=120)
    assert rc == 0
    listed = sb.workdir.files()
    assert len(listed) == 1 and listed[0].count("d/") == 2000 and sb.workdir.read_text(listed[0]) == "deep\n"
    snap = sb.workdir.snapshot()
    assert list(snap.files.values()) == [b"deep\n"] and snap.complete
    sb.close()  # raises nothing
    assert not work.exists()
    if sb.as_root:
        with Sandbox(config) as again:
            assert again.uid == uid


def test_host_side_writes_never_follow_links(secret_file: Path) -> None:
    """seal() and put_files() walk the tree by fd: a link planted where they go changes nothing on the host."""
    with Sandbox() as sb:
        sb.run([SH, "-c", f"mkdir -p t/sub && ln -s {secret_file} t/sub/link && ln -s {secret_file.parent} t/dir && "
                          f"ln -s {secret_file.parent} out"])
        before = os.stat(secret_file)
        sb.seal("t")
        with pytest.raises(OSError):
            sb.put_files({"out/planted.txt": "x"})
        after = os.stat(secret_file)
        assert (after.st_mode, after.st_uid) == (before.st_mode, before.st_uid)
        assert not (secret_file.parent / "planted.txt").exists()
        assert sb.workdir.is_symlink("t/sub/link")


# ---------------------------------------------------------------------------------------------------------------------
# 4. kernel surface
# ---------------------------------------------------------------------------------------------------------------------

# syscall numbers the probe below uses (x86_64, aarch64)
_NR = {"mount": (165, 40), "keyctl": (250, 219), "bpf": (321, 280), "perf_event_open": (298, 241),
       "userfaultfd": (323, 282), "io_uring_setup": (425, 425), "unshare": (272, 97), "clone": (56, 220),
       "ptrace": (101, 117), "setns": (308, 268), "process_vm_readv": (310, 270)}

PROBE = r"""
import ctypes, errno, json, os, platform, signal, sys, time
nr = {k: v[0 if platform.machine() == "x86_64" else 1] for k, v in json.loads(sys.argv[1]).items()}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(name, *args):
    r = libc.syscall(ctypes.c_long(nr[name]), *[ctypes.c_long(a) for a in args])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
out = {}
out["mount"] = call("mount", 0, 0, 0, 0, 0)
out["keyctl"] = call("keyctl", 0, -3, 0)  # KEYCTL_GET_KEYRING_ID of the session keyring
out["bpf"] = call("bpf", 0, 0, 0)
out["perf_event_open"] = call("perf_event_open", 0, 0, -1, -1, 0)
out["userfaultfd"] = call("userfaultfd", 0)
out["io_uring_setup"] = call("io_uring_setup", 1, 0)
out["setns"] = call("setns", 0, 0)
for flag, name in ((0x10000000, "user"), (0x40000000, "net"), (0x20000, "mnt"), (0x20000000, "pid")):
    if sys.argv[2] == "nested":  # allowed there: a clone would run the rest of this script twice
        break
    out["unshare_" + name] = call("unshare", flag)
    out["clone_" + name] = call("clone", flag | signal.SIGCHLD, 0, 0, 0, 0)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
out["ptrace_attach_child"] = call("ptrace", 16, child, 0, 0)
out["process_vm_readv"] = call("process_vm_readv", child, 0, 0, 0, 0, 0)
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
tracee = os.fork()  # a child that asks to be traced (gdb's way) still may be
if tracee == 0:
    os._exit(0 if libc.ptrace(0, 0, 0, 0) == 0 else 1)
out["traceme"] = "ok" if os.waitpid(tracee, 0)[1] == 0 else "denied"
import subprocess, threading
out["fork_exec"] = subprocess.run(["/bin/echo", "x"], capture_output=True).stdout.decode().strip()
t = threading.Thread(target=lambda: None); t.start(); t.join(); out["threads"] = "ok"
print(json.dumps(out))
"""


def _probe(sb: Sandbox) -> dict[str, str]:
    import json
    mode = "nested" if sb.config.nested_userns else "strict"
    rc, out, _ = sb.run(["python3", "-I", "-c", PROBE, json.dumps(_NR), mode], timeout=30)
    assert rc == 0, out.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter knows x86_64 and aarch64")
def test_the_seccomp_filter_refuses_the_kernel_surface() -> None:
    with Sandbox() as sb:
        got = _probe(sb)
    refused = {k: v for k, v in got.items() if k not in ("traceme", "fork_exec", "threads")}
    assert all(v == "EPERM" for v in refused.values()), got
    assert (got["traceme"], got["fork_exec"], got["threads"]) == ("ok", "x", "ok")  # ordinary work still works


def test_no_user_namespace_can_be_made_inside() -> None:
    """uid 0 of a nested user namespace would bring mount and network configuration with it."""
    tries = ("import ctypes, os\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "print('libc', 'made' if libc.unshare(0x10000000) == 0 else os.strerror(ctypes.get_errno()))\n"
             "if hasattr(os, 'unshare'):\n"
             "    try:\n        os.unshare(os.CLONE_NEWUSER); print('os made')\n"
             "    except OSError as err:\n        print('os', err.strerror)\n")
    with Sandbox() as sb:
        for argv in (["unshare", "-U", "true"], ["unshare", "-r", "id", "-u"], ["unshare", "-n", "true"]):
            rc, out, _ = sb.run(argv)
            assert rc != 0 and re.search(rb"Operation not permitted|No space left on device", out), (argv, out)
        rc, out, _ = sb.run(["python3", "-I", "-c", tries])
    lines = out.decode().splitlines()  # EPERM from the seccomp filter (ENOSPC from --disable-userns alone)
    assert rc == 0 and lines and all(line.split(" ", 1)[1] != "made" for line in lines), lines


@pytest.mark.skipif(platform.machine() not in ("x86_64", "aarch64"), reason="the filter knows x86_64 and aarch64")
def test_nested_user_namespaces_are_a_per_sandbox_choice() -> None:
    """What the GUI env gets (for Chromium's own sandbox): user namespaces, the rest of the filter still on."""
    with Sandbox(SandboxConfig(nested_userns=True)) as sb:
        rc, out, _ = sb.run(["unshare", "-U", "-r", "id", "-u"])
        assert (rc, out.decode().strip()) == (0, "0"), out
        got = _probe(sb)
    for name in ("mount", "keyctl", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
                 "ptrace_attach_child", "process_vm_readv"):
        assert got[name] == "EPERM", (name, got)
    assert got["setns"] != "EPERM" and got["traceme"] == "ok"  # setns is Chromium's to use there


# ---------------------------------------------------------------------------------------------------------------------
# 5. uid collisions
# ---------------------------------------------------------------------------------------------------------------------

def test_sandboxes_under_different_tmpdirs_get_different_uids(monkeypatch) -> None:
    if os.geteuid() != 0:
        pytest.skip("uid slots are handed out only when the host runs as root")
    monkeypatch.delenv("OPENCLAW_SANDBOX_ROOT", raising=False)
    boxes = []
    tops = [Path(tempfile.mkdtemp(prefix="tmpdir-", dir="/tmp")) for _ in range(2)]
    try:
        for top in tops:
            os.chmod(top, 0o755)
            monkeypatch.setenv("TMPDIR", str(top))
            monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
            boxes.append(Sandbox(SandboxConfig(uid_base=330_000, uid_count=2)))
        assert boxes[0].root != boxes[1].root and str(boxes[0].root).startswith(str(tops[0]))
        assert boxes[0].uid != boxes[1].uid
        cgroup_dirs = [set(b.cgroups.dirs.values()) for b in boxes]
        assert not cgroup_dirs[0] & cgroup_dirs[1]
        lock_dir = uid_lock_dir()
        assert (lock_dir / f"{boxes[0].uid}.lock").exists() and (lock_dir / f"{boxes[1].uid}.lock").exists()
        st = os.lstat(lock_dir)
        assert st.st_uid == 0 and st.st_mode & 0o777 == 0o700
        # one sandbox's kill never touches the other's processes
        sleeper = boxes[1].spawn(["/bin/sleep", "60"])
        deadline = time.monotonic() + 10
        while not any(re.search(r"sleep", Path(f"/proc/{p}/comm").read_text()) for p in processes_of_uid(boxes[1].uid)
                      if Path(f"/proc/{p}/comm").exists()):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        boxes[0].kill()
        assert sleeper.poll() is None
    finally:
        for box in boxes:
            box.close()
        for top in tops:
            subprocess.run(["rm", "-rf", str(top)], check=False)
