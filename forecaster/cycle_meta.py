"""What a cycle keeps in the history file's meta table between restarts, and how.

Why a file of its own: these values outlive the process (a restarted forecaster, or
``cli once`` run by cron, reads only since the previous cycle instead of the whole
lookback), so their encoding is a small format of its own; reading one back must
never stop the forecaster from starting. Pure but for a log line.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping

from gpu_eta.forecaster.runs import RunKey

log = logging.getLogger(__name__)

LAST_QUERY_KEY = "last_query_timestamp"
LAST_RANGE_KEY = "last_range_query_timestamp"
MEANS_UNTIL_KEY = "means_until"
# when the current run of partial reads began ("" or absent: the last read was whole)
PARTIAL_SINCE_KEY = "partial_since_timestamp"
# the latest partial read of that run (a whole read ends the run only a grace after it)
PARTIAL_LAST_KEY = "partial_last_timestamp"
# the offset to Prometheus' clock the cycles run at, as the log last said it (absent or
# "0.0": their own clock; prom_clock): a new process (a ``once`` CronJob's) starts at it
# and says it again only when it moves
CLOCK_OFFSET_KEY = "clock_offset_seconds"
MAX_MEANS_UNTIL_CHARS = 4_000_000  # about 20,000 runs; a larger value is not ours


def float_or_none(text: str | None) -> float | None:
    """A stored time, or None when absent or not a finite number."""
    try:
        value = float(text) if text is not None else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None


def encode_means_until(until: Mapping[RunKey, float]) -> str:
    """``Cycle._means_until`` as the JSON text kept in the history file. Pure."""
    return json.dumps([[*key, t] for key, t in sorted(until.items())])


def decode_means_until(text: str | None) -> dict[RunKey, float]:
    """The mapping ``encode_means_until`` wrote; entries that are not four strings and
    a finite number are skipped, and an unreadable value reads as empty (logged): the
    cost is counting a few runs' seconds twice once, never a failed start. Pure but
    for the log line."""
    if not text:
        return {}
    try:
        rows = json.loads(text) if len(text) <= MAX_MEANS_UNTIL_CHARS else None
    except (ValueError, RecursionError):
        rows = None
    if not isinstance(rows, list):
        log.warning("stored %s unreadable: ignored", MEANS_UNTIL_KEY)
        return {}
    until: dict[RunKey, float] = {}
    for row in rows:
        if (
            isinstance(row, list)
            and len(row) == 5
            and all(isinstance(part, str) for part in row[:4])
            and isinstance(row[4], (int, float))
            and not isinstance(row[4], bool)
            and math.isfinite(row[4])
        ):
            until[(row[0], row[1], row[2], row[3])] = float(row[4])
    return until
