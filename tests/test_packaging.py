"""A wheel of the project holds every file its packages track (code, prompt templates, env data, the shipped
weights), and the ``openclaw-rl`` command: what ``pip install .`` gives a host without the checkout."""
import configparser
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_the_wheel_holds_every_tracked_file_of_the_packages(tmp_path: Path) -> None:
    # built from a copy of the tracked files alone: a checkout's build/ or egg-info left by an earlier build can
    # list files that the package data misses
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    src = tmp_path / "src"
    for name in tracked:
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-w", str(tmp_path), str(src)], check=True, timeout=600)
    [wheel] = tmp_path.glob("openclaw_rl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {p.rstrip("*") for p in patterns["include"]}
    wanted = [f for f in tracked if f.split("/")[0] in packages]
    assert len(wanted) > 100
    assert [f for f in wanted if f not in names] == []
    assert "tinymodel/weights/default/model.safetensors" in names and "prompts/" in {n[:8] for n in names}
    [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    scripts = configparser.ConfigParser()
    scripts.read_string(zipfile.ZipFile(wheel).read(entry_points).decode())
    assert scripts["console_scripts"]["openclaw-rl"] == "cli.main:main"
