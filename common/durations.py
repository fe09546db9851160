"""Prometheus durations (``5m``, ``1h30m``, ``1500ms``): the one parser every flag uses.

Pure. Prometheus' own syntax (``model.ParseDuration``): units in this order, each at
most once, and at most its longest duration, a Go ``time.Duration`` (2^63-1 ns, about
292 years); checked by us so that a typo or a ``300y`` is a usage error rather than a
query or config error from Prometheus later.
"""

from __future__ import annotations

import re

# [0-9], not \d: \d matches any Unicode digit (fullwidth ５, Arabic-Indic ١), which int()
# reads and Prometheus refuses, so "５m" passed the flag's check and failed every query
_DURATION = re.compile(
    r"^(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?"
    r"(?:([0-9]+)ms)?$"
)
# each unit in milliseconds, Prometheus' finest: integers, so the bound is exact
_UNIT_MILLISECONDS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1000, 1)
MAX_DURATION_CHARS = 32
# Prometheus' longest duration: a range or flag past it is refused ("duration out of
# range"); the longest it spells, 292y24w3d23h47m16s854ms
MAX_DURATION_NANOSECONDS = 2**63 - 1
_MAX_MILLISECONDS = MAX_DURATION_NANOSECONDS // 1_000_000


def _milliseconds(text: str) -> int | None:
    """The milliseconds ``text`` spells in Prometheus' syntax, whatever its size; None
    when it is not that syntax (empty, unknown unit, units out of order, too long)."""
    m = _DURATION.match(text) if 0 < len(text) <= MAX_DURATION_CHARS else None
    if m is None or not any(m.groups()):
        return None
    return sum(int(g) * unit for g, unit in zip(m.groups(), _UNIT_MILLISECONDS, strict=True) if g)


def duration_seconds(text: str) -> float | None:
    """The seconds ``text`` spells as a Prometheus duration (0 allowed), or None when it
    is not one Prometheus reads (empty, unknown unit, units out of order, longer than 32
    characters, past its longest duration: ``parse_duration`` says which)."""
    ms = _milliseconds(text.strip())
    return None if ms is None or ms > _MAX_MILLISECONDS else ms / 1000


def parse_duration(text: str) -> float:
    """A Prometheus duration in seconds, > 0; ``ValueError`` with the reason otherwise."""
    ms = _milliseconds(text.strip())
    if ms is None:
        raise ValueError(f"not a Prometheus duration (like 5m, 1h30m, 90s): {text!r}")
    if ms > _MAX_MILLISECONDS:
        raise ValueError(
            "longer than Prometheus' longest duration, 292y24w3d23h47m16s854ms "
            f"(2^63-1 ns): {text!r}"
        )
    if ms <= 0:
        raise ValueError(f"must be > 0: {text!r}")
    return ms / 1000
