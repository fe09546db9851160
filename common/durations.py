"""Prometheus durations (``5m``, ``1h30m``, ``1500ms``): the one parser every flag uses.

Pure. Prometheus' own syntax (``model.ParseDuration``): units in this order, each at
most once; checked by us so that a typo is a usage error rather than a query or
config error from Prometheus later.
"""

from __future__ import annotations

import re

# [0-9], not \d: \d matches any Unicode digit (fullwidth ５, Arabic-Indic ١), which int()
# reads and Prometheus refuses, so "５m" passed the flag's check and failed every query
_DURATION = re.compile(
    r"^(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
    r"(?:([0-9]+)ms)?$"
)
_UNIT_SECONDS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)
MAX_DURATION_CHARS = 32


def duration_seconds(text: str) -> float | None:
    """The seconds ``text`` spells as a Prometheus duration (0 allowed), or None when it
    is not one (empty, unknown unit, units out of order, longer than 32 characters)."""
    text = text.strip()
    m = _DURATION.match(text) if 0 < len(text) <= MAX_DURATION_CHARS else None
    if m is None or not any(m.groups()):
        return None
    return float(sum(int(g) * unit for g, unit in zip(m.groups(), _UNIT_SECONDS, strict=True) if g))


def parse_duration(text: str) -> float:
    """A Prometheus duration in seconds, > 0; ``ValueError`` with the reason otherwise."""
    seconds = duration_seconds(text)
    if seconds is None:
        raise ValueError(f"not a Prometheus duration (like 5m, 1h30m, 90s): {text!r}")
    if seconds <= 0:
        raise ValueError(f"must be > 0: {text!r}")
    return seconds
