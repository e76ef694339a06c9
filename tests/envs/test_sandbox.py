"""The bubblewrap sandbox, for real: no network to the host, no writes outside the work dir, fork bombs and memory hogs
contained (with the machine's cgroups, and with rlimits alone), a clean next episode, clear errors when it cannot start.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from envs.sandbox import (
    Sandbox,
    SandboxConfig,
    SandboxError,
    SandboxLimits,
    WorkDir,
    cgroup_plan,
    processes_of_uid,
)
from tests.loopback import loopback_server

SH = "/bin/bash"


def config(cgroups: bool = True, **limits: int) -> SandboxConfig:
    return SandboxConfig(cgroups=cgroups, limits=SandboxLimits(**limits))


def need_cgroups(cgroups: bool) -> None:
    if cgroups and cgroup_plan().mode == "none":
        pytest.skip(f"no usable cgroups on this machine: {cgroup_plan().note}")


def test_loopback_server_on_the_host_is_unreachable():
    with loopback_server() as (port, accepted):
        with socket.create_connection(("127.0.0.1", port), timeout=2):  # the host itself reaches it
            pass
        with Sandbox() as sb:
            rc, out, _ = sb.run([SH, "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED; "
                                           "echo ---; cat /proc/net/dev"], timeout=10)
    text = out.decode()
    assert "CONNECTED" not in text and "Connection refused" in text
    assert len(accepted) == 1  # only the host's own connection
    devices = text.split("---", 1)[1].splitlines()[3:]  # /proc/net/dev: two header lines
    interfaces = [line.split(":")[0].strip() for line in devices]
    assert interfaces == ["lo"]


def test_no_writes_outside_the_work_dir(tmp_path):
    with Sandbox() as sb:
        marker = f"marker-{sb.id}"
        script = "; ".join(f"touch {p}/{marker} 2>/dev/null && echo WROTE {p}"
                           for p in ("/", "/usr", "/etc", "/usr/local", "/var", "/tmp", "/workspace", "/dev/shm"))
        rc, out, _ = sb.run([SH, "-c", script + "; ls /root /work /home 2>&1; cat /etc/shadow 2>&1; id -u"])
        text = out.decode()
        assert sb.workdir.is_file(marker)  # the work dir is writable ...
        wrote = set(re.findall(r"WROTE (\S+)", text))
        assert wrote <= {"/tmp", "/workspace", "/dev/shm"}  # ... and the private /tmp and /dev, nothing else
        assert "/workspace" in wrote
        for host in ("/", "/usr", "/etc", "/usr/local", "/var", "/tmp", "/dev/shm"):
            assert not os.path.exists(f"{host}/{marker}")
        assert "No such file or directory" in text  # the host's /root, /work, /home are not there at all
        assert "Permission denied" in text  # /etc/shadow stays unreadable
        assert text.strip().splitlines()[-1] == "1000"
        assert sb.uid >= SandboxConfig().uid_base  # on the host: a uid of its own, never root


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "rlimits-only"])
def test_fork_bomb_is_contained(cgroups):
    need_cgroups(cgroups)
    limit = 24
    with Sandbox(config(cgroups=cgroups, pids=limit)) as sb:
        assert sb.cgroup_mode != "none" if cgroups else sb.cgroup_mode == "none"
        peak, stop = [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], len(processes_of_uid(sb.uid)))
                time.sleep(0.005)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            rc, out, timed_out = sb.run([SH, "-c", ":(){ :|:& };:; sleep 30"], timeout=2)
        finally:
            stop.set()
            watcher.join()
        assert timed_out
        assert b"Resource temporarily unavailable" in out
        assert 4 < peak[0] <= limit  # it ran, and hit the wall
        if cgroups:
            assert int(re.search(r"max (\d+)", sb.cgroups.stat("pids.events")).group(1)) > 0
        rc, out, _ = sb.run([SH, "-c", "echo still here"], timeout=10)  # the sandbox is usable again
        assert out.decode().strip() == "still here"
        uid = sb.uid
    assert processes_of_uid(uid) == []
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork


@pytest.mark.parametrize("cgroups", [True, False], ids=["cgroup", "rlimits-only"])
def test_memory_hog_is_contained(cgroups):
    need_cgroups(cgroups)
    limit = 128 << 20
    with Sandbox(config(cgroups=cgroups, memory_bytes=limit)) as sb:
        # tail must hold a 1.5 GB line in memory
        rc, out, timed_out = sb.run([SH, "-c", "head -c 1500M /dev/zero | tail -n 1 | wc -c; "
                                               "echo status ${PIPESTATUS[1]}"], timeout=60)
        text = out.decode()
        assert not timed_out
        status = int(re.search(r"status (\d+)", text).group(1))
        if cgroups:
            assert status == 137  # SIGKILL from the OOM killer, inside the sandbox's cgroup
            events = sb.cgroups.stat("memory.events") or sb.cgroups.stat("memory.oom_control")
            assert int(re.search(r"oom_kill (\d+)", events).group(1)) >= 1
            peak = sb.cgroups.stat("memory.max_usage_in_bytes") or sb.cgroups.stat("memory.peak")
            if peak:
                assert int(peak) <= limit
        else:
            assert status != 0 and "memory exhausted" in text
        rc, out, _ = sb.run([SH, "-c", "echo alive"], timeout=10)
        assert out.decode().strip() == "alive"


def test_next_episode_starts_clean():
    with Sandbox() as first:
        rc, out, _ = first.run([SH, "-c", "echo secret > /workspace/left.txt; echo t > /tmp/left.txt; "
                                          "setsid nohup sleep 300 >/dev/null 2>&1 & echo started"], timeout=10)
        assert out.decode().strip() == "started"
        assert first.workdir.is_file("left.txt")
        uid, work = first.uid, first.work_dir
    assert not work.exists()
    assert processes_of_uid(uid) == []  # the escaped sleep died with the sandbox
    with Sandbox() as second:
        rc, out, _ = second.run([SH, "-c", "ls -A /workspace /tmp; echo ---; cat /proc/[0-9]*/comm"], timeout=10)
        files, procs = out.decode().split("---")
        assert files.split() == ["/tmp:", "/workspace:"]  # both empty
        assert "bwrap" in procs.split() and "sleep" not in procs.split()  # nothing left over from the first


def test_missing_bwrap_is_a_clear_error(tmp_path):
    with pytest.raises(SandboxError, match="bubblewrap not found"):
        Sandbox(SandboxConfig(bwrap=str(tmp_path / "no-such-bwrap"), root=tmp_path / "root"))
    # a bwrap that cannot create namespaces (as in a container whose seccomp profile forbids them)
    with tempfile.TemporaryDirectory() as d:
        fake = Path(d) / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
        fake.chmod(0o755)
        os.chmod(d, 0o755)
        with pytest.raises(SandboxError, match="user namespaces look unavailable"):
            Sandbox(SandboxConfig(bwrap=str(fake)))


def test_unreachable_root_is_a_clear_error(tmp_path):
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    with pytest.raises(SandboxError, match="not reachable by the sandbox's uid"):
        Sandbox(SandboxConfig(root=hidden / "sandboxes"))


def test_workdir_reads_never_follow_links_out(tmp_path):
    with Sandbox() as sb:
        sb.run([SH, "-c", "ln -s /etc/hostname answer.txt; ln -s ../.. up; echo hi > real.txt; ln -s real.txt ok"])
        wd = sb.workdir
        assert Path("/etc/hostname").exists()
        assert wd.read_text("answer.txt") is None and not wd.exists("up")
        # no link is followed, not even one inside the dir: a link is a name the agent can point anywhere later
        assert wd.read_text("ok") is None and wd.is_symlink("ok") and wd.readlink("ok") == "real.txt"
        assert wd.read_text("real.txt") == "hi\n" and wd.files() == ["real.txt"]
        with pytest.raises(ValueError):
            wd.path("../x")
    assert isinstance(WorkDir(tmp_path).files(), list)


def test_workdir_reads_race_a_file_swapped_for_a_link_and_never_read_the_host(tmp_path):
    """The agent keeps swapping a file and a link to a host file while the host reads: a read opens each component
    once, without following links, and reads the fd it checked, so the host file never comes back."""
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET\n")
    with Sandbox() as sb:
        proc = sb.spawn([SH, "-c", f"while :; do echo ok > t; mv -f t data.txt; ln -sfn {secret} l; mv -fT l data.txt;"
                         f" mkdir -p d; ln -sfn {tmp_path} d2; mv -fT d2 d 2>/dev/null; done"],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen = set()
        try:
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                seen.add(sb.workdir.read_text("data.txt"))
                seen.add(sb.workdir.read_text("d/secret.txt"))
                for rel in sb.workdir.files():
                    seen.add(sb.workdir.read_text(rel))
        finally:
            sb.kill()
            proc.wait(10)
    assert "HOST-SECRET\n" not in seen and "ok\n" in seen


def test_a_very_deep_tree_is_listed_and_removed_and_the_uid_slot_freed():
    """1,200 folders deep: deeper than shutil.rmtree's recursion allows."""
    sb = Sandbox()
    work = sb.work_dir
    rc, _, _ = sb.run([SH, "-c", "i=0; while [ $i -lt 1200 ]; do mkdir d && cd d || exit 1; i=$((i+1)); done; "
                                 "echo deep > f"], timeout=60)
    assert rc == 0
    listed = sb.workdir.files()
    assert len(listed) == 1 and listed[0].count("d/") == 1200 and sb.workdir.read_text(listed[0]) == "deep\n"
    slot = sb._slot
    sb.close()  # raises nothing
    assert not work.exists() and (slot is None or slot._fd == -1)


def test_no_user_namespace_can_be_made_inside():
    """uid 0 of a nested user namespace would bring mount and network configuration with it."""
    with Sandbox() as sb:
        for argv in (["unshare", "-U", "true"], ["unshare", "-r", "id", "-u"],
                     ["python3", "-c", "import os; os.unshare(os.CLONE_NEWUSER)"]):
            rc, out, _ = sb.run(argv)
            assert rc != 0, (argv, out)


def test_sandboxes_under_different_roots_never_share_a_uid():
    """Uids are host-wide, so their locks are too, whatever root (TMPDIR) each sandbox uses. A range of two uids of
    its own: two roots take both, a third root finds none free."""
    top = Path(tempfile.mkdtemp(prefix="roots-", dir="/tmp"))
    os.chmod(top, 0o755)
    config = {"uid_base": 300_000, "uid_count": 2}
    boxes = [Sandbox(SandboxConfig(root=top / f"root{i}", **config)) for i in range(2)]
    try:
        assert boxes[0].uid != boxes[1].uid
        with pytest.raises(SandboxError, match="in use"):
            Sandbox(SandboxConfig(root=top / "root2", **config))
    finally:
        for box in boxes:
            box.close()
        shutil.rmtree(top, ignore_errors=True)


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_what_a_dead_holder_left_is_swept_by_the_next_sandbox_of_its_uid():
    cfg = SandboxConfig(uid_base=250_000, uid_count=1)  # one uid: the next sandbox must get the same one
    dead = Sandbox(cfg)
    sleeper = dead.spawn(["/bin/sleep", "300"])
    (dead.work_dir / "left.txt").write_text("from the dead episode")
    deadline = time.monotonic() + 10
    while "sleep" not in [_comm(p) for p in processes_of_uid(dead.uid)]:
        assert time.monotonic() < deadline, "the sleeper did not start"
        time.sleep(0.05)
    dead._slot.release()  # its worker died: the lock goes, nothing was closed
    with Sandbox(cfg) as fresh:
        assert fresh.uid == dead.uid and fresh.work_dir == dead.work_dir
        assert list(fresh.work_dir.iterdir()) == []
        assert processes_of_uid(fresh.uid) == []
        assert fresh.cgroups.pids() == set()
        rc, out, _ = fresh.run([SH, "-c", "ls -A /workspace; echo ok"])
        assert out.decode() == "ok\n"
    sleeper.wait(timeout=5)
    assert not dead.work_dir.exists()


def test_a_read_only_bind_under_tmp_is_visible_and_read_only() -> None:
    # a checkout (and its venv) may live under /tmp, which the sandbox replaces with a private tmpfs
    import shutil
    import tempfile

    shared = Path(tempfile.mkdtemp(prefix="ro-bind-", dir="/tmp"))
    shared.chmod(0o755)  # readable by the sandbox's own host uid, as a checkout is
    (shared / "page.html").write_text("hello")
    box = Sandbox(SandboxConfig(ro_binds=("/usr", "/etc", str(shared))))
    try:
        script = f"cat {shared}/page.html; echo; (echo x > {shared}/new) 2>/dev/null || echo refused"
        rc, out, timed_out = box.run(["/bin/sh", "-c", script])
    finally:
        box.close()
        written = (shared / "new").exists()
        shutil.rmtree(shared)
    assert (rc, timed_out) == (0, False) and out.decode().split() == ["hello", "refused"]
    assert not written
