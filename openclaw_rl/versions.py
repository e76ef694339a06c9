"""Policy versions on the wire: engines report a ``weight_version`` string (SGLang starts at ``"default"``), the
gateway tells clients the version in ``system_fingerprint`` as ``"policy-<version>"``, records and samples carry it
as an integer. One format and one parse for each."""

from __future__ import annotations

import re

FINGERPRINT_PREFIX = "policy-"
_TRAILING_DIGITS = re.compile(r"(\d+)\s*$")


def policy_version_of(weight_version: str | int | None) -> int:
    """An engine's ``weight_version`` as an integer policy version; one without a number (``"default"``) is 0."""
    try:
        return int(weight_version)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 0


def policy_fingerprint(weight_version: str | int | None) -> str:
    """The ``system_fingerprint`` the gateway sends with a reply: ``"policy-<version>"``."""
    return f"{FINGERPRINT_PREFIX}{policy_version_of(weight_version)}"


def version_of_fingerprint(fingerprint: str | None) -> int | None:
    """``"policy-3"`` -> 3; a fingerprint without a number (from an engine's ``"default"``) is 0; none is None."""
    if not fingerprint:
        return None
    match = _TRAILING_DIGITS.search(fingerprint)
    return int(match.group(1)) if match else 0
