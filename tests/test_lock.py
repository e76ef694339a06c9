"""The installed set equals requirements.lock, and the check names the package when it does not."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "scripts" / "check_lock.py"
LOCK = ROOT / "requirements.lock"


def _check(lock: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECK), "--lock", str(lock)], capture_output=True, text=True)


def test_environment_matches_lock():
    result = _check(LOCK)
    assert result.returncode == 0, result.stderr
    assert "environment matches" in result.stdout


def test_lock_pins_every_package_with_hashes():
    text = LOCK.read_text()
    pins = re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", text, flags=re.M)
    assert len(pins) > 100  # the whole transitive set, not only the direct dependencies
    blocks = re.split(r"^(?=[A-Za-z0-9])", text, flags=re.M)[1:]
    assert all("--hash=sha256:" in block for block in blocks)
    assert ("torch", "2.13.0+cpu") in pins  # the CPU wheel, never the CUDA build


def test_a_changed_transitive_version_is_named(tmp_path):
    # httpx2 comes in through openai only: a transitive dependency.
    text = LOCK.read_text()
    changed = re.sub(r"^httpx2==\S+", "httpx2==0.0.1", text, count=1, flags=re.M)
    assert changed != text
    (tmp_path / "requirements.lock").write_text(changed)
    result = _check(tmp_path / "requirements.lock")
    assert result.returncode == 1
    assert "httpx2: installed" in result.stderr and "the lock says 0.0.1" in result.stderr


def test_a_missing_and_an_extra_package_are_named(tmp_path):
    text = LOCK.read_text()
    without_six = re.sub(r"^six==.*?(?=^[A-Za-z0-9])", "", text, count=1, flags=re.M | re.S)
    with_extra = without_six + "not-a-real-package==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    (tmp_path / "requirements.lock").write_text(with_extra)
    result = _check(tmp_path / "requirements.lock")
    assert result.returncode == 1
    assert "six==" in result.stderr and "installed but not in the lock" in result.stderr
    assert "not-a-real-package==1.0 is in the lock but not installed" in result.stderr
