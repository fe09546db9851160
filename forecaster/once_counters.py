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

The runs the last cycle forecast stalled ride along (``STALLED_KEY``): while the stall
check's GPU-use query fails, a run still silent keeps its last verdict
(``Cycle.kept_stalled``), and a ``once`` run has no earlier cycle in its process. Without
them every ``once`` run whose query failed pushed ``gpu_eta_job_stalled`` 0 and reset
GpuEtaTrainingStalled's ``for:``. A damaged value, or entry, is left out with one
WARNING: a run then loses a kept verdict, as after a restart.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from gpu_eta.common.versioned_json import load_versioned
from gpu_eta.forecaster.runs import RunKey
from gpu_eta.forecaster.series import QueryStats

log = logging.getLogger(__name__)

COUNTERS_KEY = "once_counters"
VERSION = 1
MAX_CHARS = 64 * 1024  # a few dozen reasons take under 2 KiB
MAX_REASON_CHARS = 128
_QUERY_FIELDS = ("success", "error", "skipped_series", "partial")
STALLED_KEY = "once_stalled"
# Runs whose verdict is kept at most, and the text they may take: a cluster's stalled
# runs are a handful; past these the rest lose a kept verdict (as after a restart).
MAX_STALLED_RUNS = 10_000
MAX_KEY_PART_CHARS = 1024  # a Kubernetes name is at most 253; a run id is free text
MAX_STALLED_CHARS = 2_000_000


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
    text = _read_meta(store, COUNTERS_KEY, "once counters", "from 0")
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
    return _write_meta(store, COUNTERS_KEY, dump_counters(job_errors, queries), "once counters")


def _read_meta(store: MetaStore, key: str, what: str, fallback: str) -> str | None:
    """The text saved under ``key``; None when absent, or (one ERROR line naming
    ``what`` and the ``fallback`` taken) when the store cannot be read."""
    try:
        return store.get_meta(key)
    except Exception as err:  # HistoryError, sqlite3 errors: none is worth a run
        log.error("%s: cannot read them from the history file: %s; %s", what, err, fallback)
        return None


def _write_meta(store: MetaStore, key: str, text: str, what: str) -> bool:
    """Save ``text`` under ``key``; False (one ERROR line naming ``what``, never raised)
    when the store refuses."""
    try:
        store.set_meta(key, text)
    except Exception as err:  # as in _read_meta
        log.error("%s: cannot save them in the history file: %s", what, err)
        return False
    return True


def _run_key(entry: object) -> RunKey | None:
    """``entry`` as a run key (four strings, none longer than ``MAX_KEY_PART_CHARS``),
    or None."""
    if not isinstance(entry, list) or len(entry) != 4:
        return None
    if not all(isinstance(p, str) and len(p) <= MAX_KEY_PART_CHARS for p in entry):
        return None
    ns, pod, container, run_id = entry
    return (ns, pod, container, run_id)


def parse_stalled(text: str) -> tuple[frozenset[RunKey], int]:
    """The run keys in ``text`` (``dump_stalled``' format) and how many entries were
    left out as damaged (or past ``MAX_STALLED_RUNS``). Raises ``CountersError`` when
    the value is unusable as a whole. Pure."""
    doc = load_versioned(text, version=VERSION, max_size=MAX_STALLED_CHARS, error=CountersError)
    entries = doc.get("stalled")
    if not isinstance(entries, list):
        raise CountersError("stalled is not a list")
    keys = [k for k in map(_run_key, entries[:MAX_STALLED_RUNS]) if k is not None]
    return frozenset(keys), len(entries) - len(keys)


def dump_stalled(keys: Iterable[RunKey]) -> str:
    """The text saved under ``STALLED_KEY``: ``keys`` sorted, as many as
    ``parse_stalled`` reads back (``MAX_STALLED_RUNS``, ``MAX_STALLED_CHARS``; a key
    with a part over ``MAX_KEY_PART_CHARS`` is left out). Pure."""
    entries: list[str] = []
    room = MAX_STALLED_CHARS - 64  # the version and brackets
    for key in sorted(keys):
        if len(entries) == MAX_STALLED_RUNS:
            break
        if any(len(part) > MAX_KEY_PART_CHARS for part in key):
            continue
        entry = json.dumps(list(key), separators=(",", ":"))
        room -= len(entry) + 1
        if room < 0:
            break
        entries.append(entry)
    return f'{{"version":{VERSION},"stalled":[{",".join(entries)}]}}'


def load_stalled(store: MetaStore) -> frozenset[RunKey]:
    """The runs the previous ``once`` run's cycle forecast stalled (none saved: none).
    Never raises: a damaged value or entry is left out with one WARNING line."""
    text = _read_meta(store, STALLED_KEY, "once stall verdicts", "none kept")
    if text is None:
        return frozenset()
    try:
        keys, skipped = parse_stalled(text)
    except CountersError as err:
        log.warning(
            "once stall verdicts in the history file (meta key %r) are unusable (%s): "
            "no run keeps an earlier stall verdict",
            STALLED_KEY,
            err,
        )
        return frozenset()
    if skipped:
        log.warning(
            "once stall verdicts: %d damaged entries (meta key %r) left out: those runs "
            "keep no earlier stall verdict",
            skipped,
            STALLED_KEY,
        )
    return keys


def save_stalled(store: MetaStore, keys: Iterable[RunKey]) -> bool:
    """Save the runs this run's cycle forecast stalled, for the next run; False (one
    ERROR line, never raised) when the store refuses."""
    return _write_meta(store, STALLED_KEY, dump_stalled(keys), "once stall verdicts")
