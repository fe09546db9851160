"""The counters ``once`` pushes, carried from run to run in the history file.

Why: each ``once`` run (the CronJob variant) is a new process whose counters start at
0, and a good run replaces its Pushgateway group. An error that happens in every run
was pushed at the same value each time, so ``rate()`` and ``increase()`` (the
Forecaster quality dashboard's "Job errors by reason", GpuEtaQueuePredictionFailing)
read 0. So ``once`` loads the totals of the runs before it from one row of the
history file's ``meta`` table (``COUNTERS_KEY``; the CronJob's history file is on its
PVC), adds its own increments and saves the totals after its cycle: the pushed
``gpu_eta_forecaster_job_errors_total``, ``…_queries_total``,
``…_skipped_series_total`` and ``…_partial_answers_total`` keep increasing.
``serve`` is one process: its counters need none of this.

Reading follows the rules for every file we read (``load_versioned``): a value that is
unusable as a whole, or an entry that is not a non-negative integer, is left out with
one ERROR line and the counters start from what is left (from 0 at worst: Prometheus
takes that as a counter reset). Neither reading nor writing ever fails a run.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpu_eta.common.versioned_json import load_versioned
from gpu_eta.forecaster.series import QueryStats

log = logging.getLogger(__name__)

COUNTERS_KEY = "once_counters"
VERSION = 1
MAX_CHARS = 64 * 1024  # a few dozen reasons take under 2 KiB
MAX_REASON_CHARS = 128
_QUERY_FIELDS = ("success", "error", "skipped_series", "partial")


class CountersError(ValueError):
    """The saved counters cannot be used as a whole."""


class MetaStore(Protocol):
    """The face of ``HistoryStore`` used here: its small key/value table."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


@dataclass
class SavedCounters:
    """Totals of the counters ``once`` pushes: ``job_errors`` by reason and the
    ``QueryStats`` fields; ``skipped``: entries left out as damaged when read."""

    job_errors: Counter[str] = field(default_factory=Counter)
    queries: dict[str, int] = field(default_factory=dict)
    skipped: int = 0


def _count(value: object) -> int | None:
    """``value`` as a counter total, or None (a bool, a negative, a float, a string)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def parse_counters(text: str) -> SavedCounters:
    """The counters in ``text`` (``dump_counters``' format). Damaged entries are left
    out and counted in ``skipped``; raises ``CountersError`` when nothing is usable."""
    doc = load_versioned(text, version=VERSION, max_size=MAX_CHARS, error=CountersError)
    errors, queries = doc.get("job_errors", {}), doc.get("queries", {})
    if not isinstance(errors, dict) or not isinstance(queries, dict):
        raise CountersError("job_errors or queries is not an object")
    out = SavedCounters()
    for reason, value in errors.items():
        n = _count(value)
        if n is None or not reason or len(reason) > MAX_REASON_CHARS:
            out.skipped += 1
        elif n:
            out.job_errors[reason] = n
    for name, value in queries.items():
        n = _count(value)
        if n is None or name not in _QUERY_FIELDS:
            out.skipped += 1
        else:
            out.queries[name] = n
    return out


def dump_counters(job_errors: Mapping[str, int], queries: QueryStats) -> str:
    """The text saved under ``COUNTERS_KEY``: the totals to push next time."""
    return json.dumps(
        {
            "version": VERSION,
            "job_errors": {r: int(n) for r, n in sorted(job_errors.items())},
            "queries": {f: int(getattr(queries, f)) for f in _QUERY_FIELDS},
        },
        separators=(",", ":"),
    )


def load_counters(store: MetaStore) -> SavedCounters:
    """The totals saved by the runs before this one (none: all 0). Never raises for
    damage: an unreadable or unusable value is one ERROR line and counts from 0."""
    try:
        text = store.get_meta(COUNTERS_KEY)
    except Exception as err:  # HistoryError, sqlite3 errors: none is worth a run
        log.error("once counters: cannot read them from the history file: %s; from 0", err)
        return SavedCounters()
    if text is None:
        return SavedCounters()
    try:
        saved = parse_counters(text)
    except CountersError as err:
        log.error(
            "once counters in the history file (meta key %r) are unusable (%s); the "
            "pushed counters start from 0 (Prometheus reads a counter reset)",
            COUNTERS_KEY,
            err,
        )
        return SavedCounters()
    if saved.skipped:
        log.error(
            "once counters: %d damaged entries (meta key %r) left out: those start from 0",
            saved.skipped,
            COUNTERS_KEY,
        )
    return saved


def start_from(saved: SavedCounters, job_errors: Counter[str], queries: QueryStats) -> None:
    """Add the saved totals to this run's counters (before its cycle)."""
    job_errors.update(saved.job_errors)
    for name, n in saved.queries.items():
        setattr(queries, name, getattr(queries, name) + n)


def save_counters(store: MetaStore, job_errors: Mapping[str, int], queries: QueryStats) -> bool:
    """Save the totals for the next run; False (one ERROR line, never raised) when the
    store refuses: the next run then starts from the totals saved before this one."""
    try:
        store.set_meta(COUNTERS_KEY, dump_counters(job_errors, queries))
    except Exception as err:  # as in load_counters
        log.error("once counters: cannot save them in the history file: %s", err)
        return False
    return True
