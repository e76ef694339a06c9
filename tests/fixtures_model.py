"""``tiny_model_path``: the ``test`` preset of the tiny model, built once (then cached on disk) per session."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_path() -> Path:
    from tinymodel.build import ensure_tiny

    return ensure_tiny("test")
