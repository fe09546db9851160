"""Durable history of training runs in one SQLite file (a PVC in the cluster).

Why SQLite: the models must learn from more finished runs than Prometheus keeps
(retention is days; a cluster's history is months), the forecaster is a single
writer, and one file is easy to back up. Two kinds of rows:

* running runs, with every epoch end seen so far (``epoch_ends``), so a restart of
  the forecaster or a missed scrape does not lose them;
* finished runs, ``state`` ``completed`` (reached ``epochs_planned``) or
  ``incomplete`` (vanished before: cancelled or crashed, never a "short job"),
  with their epoch list frozen as packed float64 pairs (fast to load 50,000 of them).

A live run is identified by ``(namespace, pod, container, run_id)`` (``RunKey``), never by
``run_id`` alone: run ids can be hand-written (``my-run-1``) and reused by two pods or
two containers of one pod, and those are two runs (issue 3: the forecaster never
splices two runs into one). Runs seeded from a CSV may have no pod; see
``import_finished`` and ``record`` for how they meet live runs with the same id.

Every write is one transaction. The file is tagged with ``PRAGMA application_id``
and a schema version (``PRAGMA user_version``): a corrupt file, another program's
database or a newer schema gives ``HistoryError`` and is never overwritten. Only a
file SQLite itself calls corrupt (or not a database) is set aside; a file that is
busy (another process holds its lock), on a full disk or failing I/O is refused with
``HistoryError`` and left exactly where it is (``HistoryStore.open``). An older
schema is migrated in place in one transaction that keeps every row (schema 1 keyed
runs by ``run_id`` alone; schema 2 by the run key; schema 2 stored a run that reports
only steps in percent of them, schema 3 in its steps; schema 4 keys runs by the run
key and an attempt number, so that a key can hold a new run after a finished one).
The index ``finished`` reads along is built at open where it is missing, with no new
schema version (``history_file``: an earlier release must still open the file); a build
that fails is a WARNING, retried at the next open (``HistoryStore.open``).

Runs stored in percent of their steps (feature ``progress_unit="percent"``, set by the
migration to schema 3) are kept and used, but as a job of their own: to the models a
finished one's ``job_name`` reads ``<name> (percent)``, since its time per unit is not
comparable with the same job's runs counted in steps. A running one is converted to
steps, losslessly, at its first update (which carries the steps planned).

Finished runs do not stay for ever: ``retain`` deletes those older than the retention
(``--history.retention``), never the most recent ones the model reads, and younger
ones beyond those too while the volume runs short of room, so that the file stops
growing before the volume is full (``history_space``; docs/forecaster.md,
"Retention"). ``record`` runs a pass first. A completed run deleted leaves its key and
start (table ``retired``) while its series are still read, so that a later process
does not store it again (``completed_starts``).

This module is the store (``HistoryStore``: its queries, caches and rules). The file's
own handling (schema, opening and checking, migrations, setting a damaged file aside,
transactions, what an SQLite error means) is in ``history_file``; the conversions
between rows and ``Run`` objects, pure, in ``history_rows``.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import logging
import math
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from gpu_eta.common.progress_bound import step_cell
from gpu_eta.common.text import readable
from gpu_eta.forecaster.history_file import (
    DamagedHistory,
    IndexNotBuilt,
    Transaction,
    VolumeFull,
    aside_copies,
    connect,
    corrupt,
    create_new,
    memory_copy,
    prepare,
    probe_write,
    read_only,
    remove_unfinished_copies,
    rolled_back_copy,
    set_aside,
    unfinished_copy_name,
    upgrade,
    why,
)
from gpu_eta.forecaster.history_rows import (
    PERCENT_UNIT,
    RUNNING_COLUMNS,
    HistoryConflict,
    HistoryError,
    StoredEnds,
    StoredRun,
    dump_features,
    finished_from_row,
    finite,
    finite_or_zero,
    is_number,
    load_features,
    pack_epoch_times,
    running_from_row,
    to_learn_from,
    unencodable,
    unholdable_number,
    unpack_epoch_times,
)
from gpu_eta.forecaster.history_space import (
    LINGER_SECONDS,
    HistorySpace,
    Retention,
    low_room_bytes,
    space_of,
)
from gpu_eta.forecaster.runs import (
    AT_START_SECONDS,
    SAME_START_SECONDS,
    Feature,
    Run,
    RunError,
    RunKey,
    RunUpdate,
    counts_steps,
    file_names,
    run_key,
    same_run_start,
)
from gpu_eta.forecaster.runs_from_series import kept_by_cell

# The store's public API. HistoryError and StoredRun are defined in history_rows,
# RunUpdate and run_key in runs; they are re-exported here, where docs/forecaster.md
# and the callers of HistoryStore find them.
__all__ = ["HistoryConflict", "HistoryError", "HistoryStore", "RunUpdate", "StoredRun", "run_key"]

log = logging.getLogger(__name__)

# A finish time later than the time a store was last given (the cycle's ``now``:
# ``record``, ``finish``, ``retain``; the import's, ``import_finished``) by more than
# this is no finish yet (``_horizon``). Why 5 min: above the steps back a healthy clock
# takes (NTP; the cycle moving between its own clock and Prometheus' while they agree
# within ``prom_clock.OFFSET_BOUND_SECONDS``) and a seed CSV's times from nodes a few
# minutes off, far below the years a clock taken from a wrong Date header may be ahead.
FUTURE_SECONDS = 300.0

# A stored run with no pod and no container (seeded from a CSV) is the same run as
# any run with its run_id in a compatible namespace (equal, or either one unknown).
_SAME_SEEDED = (
    """run_id = :run_id AND (namespace = :namespace OR namespace = '' OR :namespace = '')"""
)
# A live run is the seeded run with its run_id (``_SAME_SEEDED``) only when their starts
# are this close: a CSV's times may be rounded, but a run started more than a minute
# apart is another run that reuses the id (``record``).
SEEDED_START_SECONDS = 60.0
_IS_SEEDED = f"""{_SAME_SEEDED} AND pod = '' AND container = '' AND state != 'running'
    AND ABS(start_timestamp - :start_timestamp) <= {SEEDED_START_SECONDS!r}"""


def _same_seeded(run: Run, stored_id: str, stored_start: float, stored_features: str) -> bool:
    """Whether a stored run found under one of ``run``'s ``file_names`` is ``run``:
    their ``job_name`` features agree (equal, or either one absent), and it has the
    run's own name or starts within ``SEEDED_START_SECONDS`` of it
    (``import_finished``)."""
    job = run.features.get("job_name")
    stored_job = load_features(stored_features).get("job_name")
    if job and stored_job and job != stored_job:
        return False
    return (
        stored_id == run.run_id or abs(stored_start - run.start_timestamp) <= SEEDED_START_SECONDS
    )


# A new run under a finished run's key may start this much before the finished run's
# last epoch end and still follow it: the two report their times from different nodes'
# clocks (a StatefulSet pod re-created on another node seconds after the run ended).
# Why not more: a start that moved further inside the finished run is more likely
# that run's own start re-derived (an exporter restart) than another node's clock.
NEW_ATTEMPT_SKEW_SECONDS = 10.0
# A run held at a read whose seconds before were not covered (``record``'s
# ``uncovered_since``) counts its absence from that read's time less this.
HELD_OFFSET_SECONDS = 0.001
# what ``os.link`` raises on a file system without hard links (SMB, FUSE, vfat)
_NO_HARD_LINKS = frozenset(
    {errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS}
)

_KEY_FIELDS = ("namespace", "pod", "container", "run_id")  # a RunKey's order
_KEY_MATCH = "namespace = ?1 AND pod = ?2 AND container = ?3 AND run_id = ?4"
# The start of a key's latest run finished completed, or of the completed run retention
# deleted from a key that holds no run since (``completed_starts``).
_COMPLETED_START = f"""
    SELECT start_timestamp FROM runs WHERE {_KEY_MATCH} AND attempt = 0 AND state = 'completed'
    UNION ALL
    SELECT start_timestamp FROM retired WHERE {_KEY_MATCH}
        AND NOT EXISTS (SELECT 1 FROM runs WHERE {_KEY_MATCH} AND attempt = 0)"""
_MEANS = ("util_sum", "util_weight", "memory_sum", "memory_weight")  # a row's means
_Means = tuple[float, float, float, float]  # util_sum, util_weight, memory_sum, memory_weight


def _added_means(up: RunUpdate) -> _Means:
    """What ``up`` adds to its run's means: (util_sum, util_weight, memory_sum,
    memory_weight), a mean that is not finite adding nothing."""
    return (
        finite_or_zero(up.util_mean) * up.weight_seconds,
        up.weight_seconds if finite(up.util_mean) else 0.0,
        finite_or_zero(up.memory_mean) * up.weight_seconds,
        up.weight_seconds if finite(up.memory_mean) else 0.0,
    )


def _without_index(err: IndexNotBuilt) -> None:
    """One WARNING line for an index the start could not build (``HistoryStore.open``)."""
    log.warning(
        "%s; started without it (the reads along it sort or scan instead: slower, the "
        "same runs), built at the next start",
        err,
    )


def _row_key(row: Mapping[str, object]) -> RunKey:
    """The run key of one of ``record``'s rows."""
    return tuple(row[name] for name in _KEY_FIELDS)  # type: ignore[return-value]


def _insertable(epoch: float, ts: float) -> bool:
    """Whether ``record``'s INSERT OR IGNORE stores this epoch end: SQLite binds NaN as
    NULL, and ``epoch_ends`` holds neither a NULL epoch nor a NULL time."""
    return not (math.isnan(epoch) or math.isnan(ts))


def crowded_steps(
    steps: Iterable[float], planned: float, keep: Collection[float] = ()
) -> set[float]:
    """Of a run's stored ``steps`` (or epochs, ``runs_from_series.kept_by_cell``), those
    that are not the newest (highest) of their 1/``STEP_CELLS`` of ``planned``: the
    points to drop (``_thin_step_ends``). A step in
    no cell (``progress_bound.step_cell``: stored steps, then a plan near zero) is not
    dropped, nor one of ``keep``: the run's origin (``at_start``), which a later step
    of its cell would otherwise replace, the run then read as starting from 0. Pure."""
    newest: dict[int, float] = {}
    drop: set[float] = set()
    for step in steps:
        cell = step_cell(step, planned)
        if cell is None or step in keep:
            continue
        held = newest.get(cell)
        if held is None:
            newest[cell] = step
        elif step > held:
            drop.add(held)
            newest[cell] = step
        else:
            drop.add(step)
    return drop


def at_start(points: Iterable[tuple[object, object]], start: float) -> set[float]:
    """The progress of the ``(progress, time)`` ``points`` stamped at their run's
    ``start`` (``runs.AT_START_SECONDS``): what the run started with (a resume from a
    checkpoint, ``runs.resume_point``); points that are not numbers left out. Pure."""
    return {
        float(p)  # type: ignore[arg-type]
        for p, t in points
        if is_number(p) and is_number(t) and float(t) - start < AT_START_SECONDS  # type: ignore[arg-type]
    }


def _numbers(epochs: Iterable[object], key: RunKey, bad: list[str]) -> list[float]:
    """The stored ``epochs`` of run ``key`` that are numbers; each one that is not (text
    a ``sqlite3`` shell wrote) named in ``bad``, for the caller to count and leave in
    the file as it is (``_thin_step_ends``)."""
    good: list[float] = []
    for epoch in epochs:
        if is_number(epoch):
            good.append(epoch)  # type: ignore[arg-type]
        else:
            bad.append(f"stored run {key[3]!r}: epoch {epoch!r} is not a number")
    return good


def new_attempt(
    start: float, stored_start: float, stored_times: Sequence[tuple[float, float]]
) -> bool | None:
    """Whether an update with ``start`` is a new run under the key of a finished run
    (its start and epoch list as stored): None when it is that run (the same start
    within ``SAME_START_SECONDS``, or an earlier one: an older snapshot); True when it
    starts at or after that run's last epoch end, less ``NEW_ATTEMPT_SKEW_SECONDS`` of
    the nodes' clocks (it can only follow it); False when it starts well inside that
    run (a start that moved while the run was away: neither). Pure."""
    if same_run_start(start, stored_start):
        return None
    last_end = max((ts for _, ts in stored_times), default=stored_start)
    return start >= last_end - NEW_ATTEMPT_SKEW_SECONDS


def _sift(
    updates: Iterable[RunUpdate], fault: Callable[[RunUpdate], str | None]
) -> tuple[list[RunUpdate], list[tuple[RunKey, str]]]:
    """``updates`` split into those ``fault`` finds nothing wrong with and the others'
    (key, what is wrong). Pure."""
    good: list[RunUpdate] = []
    bad: list[tuple[RunKey, str]] = []
    for up in updates:
        wrong = fault(up)
        if wrong is None:
            good.append(up)
        else:
            bad.append((run_key(up), wrong))
    return good, bad


def _unencodable_update(up: RunUpdate) -> str | None:
    """The name of an update's first text SQLite cannot store (``unencodable``), or None."""
    names = (
        ("run_id", up.run_id),
        ("namespace", up.namespace),
        ("pod", up.pod),
        ("container", up.container),
        ("node", up.node),
    )
    return unencodable(names, up.features)


def _unholdable_update(up: RunUpdate) -> str | None:
    """An update's first number no run can have (``unholdable_number``), or None."""
    return unholdable_number(up.epochs_planned, up.start_timestamp, up.seen_timestamp)


_P = ParamSpec("_P")
_T = TypeVar("_T")


def _recovering(
    method: Callable[Concatenate[HistoryStore, _P], _T],
) -> Callable[Concatenate[HistoryStore, _P], _T]:
    """``method`` of ``HistoryStore``, called again when SQLite calls the file damaged
    (``DamagedHistory``): once after its indexes are rebuilt, and once more on a new
    history after the file is set aside (``HistoryStore._recover``).

    Why: ``quick_check`` at open does not compare an index with its table, so a file
    whose index is damaged (a torn write, a bit flip) opens cleanly and every read along
    that index then fails; the service exited at every start and the file was never set
    aside. REINDEX rebuilds the indexes from the tables and keeps every run. Arguments
    that are iterators are made lists first, so that a second call gets what the first
    one got.

    A call on a new history expects it to hold none of the service values its
    ``expect`` names (``record``): the values the caller read were the old file's, and a
    new file holds no state, so expecting them refused the retry as a second
    forecaster's and the cycle's write was lost. A value found there after all was
    written by another process (a second forecaster that made the new file), and
    still refuses the write."""

    @functools.wraps(method)
    def call(self: HistoryStore, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        args = tuple(list(a) if isinstance(a, Iterator) else a for a in args)  # type: ignore[assignment]
        for name, value in kwargs.items():
            if isinstance(value, Iterator):
                kwargs[name] = list(value)
        for rebuilt in (False, True):
            try:
                return method(self, *args, **kwargs)
            except DamagedHistory as err:
                if self._recover(err, rebuilt) and kwargs.get("expect"):
                    kwargs["expect"] = dict.fromkeys(kwargs["expect"])  # type: ignore[arg-type]
        return method(self, *args, **kwargs)

    return call


def _remove_own(made: str) -> None:
    """Delete a file this store made (and its rollback journal), if still there."""
    for own in (made, made + "-journal"):
        with suppress(OSError):
            os.unlink(own)


class HistoryStore:
    """The SQLite file; open with ``HistoryStore.open(path)``, ``close()`` when done.

    Thread-safe for the forecaster's use (one cycle thread writes, the HTTP thread
    never touches it): a lock serialises access to the one connection.
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self.path = path
        self._lock = threading.Lock()
        self._finished_cache: list[Run] | None = None
        # the cache holds the most recent this many runs and, of them, this many points
        self._cache_limit: tuple[int | None, int | None] = (None, None)
        self._cache_points = 0  # progress points held by the cache
        self.version = 0  # bumps whenever the finished history changes
        self.persistent = True  # False: a read-only file, used through a memory copy
        # a damaged file was set aside and the new one could not be created: the store
        # is in memory and ``record`` tries to create the file (``_create_file``)
        self._file_wanted = False
        # what ``retain`` deletes (None: nothing; the CLI sets --history.retention)
        self.retention: Retention | None = None
        # Finished runs stored (None: not counted yet). Counted once, then kept in step
        # by this store's writes: the cycle asks every time, and a count is a scan of
        # the ``runs_state`` index (22 ms for 450,000 runs).
        self._n_finished: int | None = None
        # (finished_timestamp, id) of the last run ``retain`` deleted: every finished
        # row before it is one retention keeps (seeded), so a pass starts after it
        self._retained_after: tuple[float, int] | None = None
        # The latest time this store was given (a cycle's ``now``, an import's): finishes
        # beyond it by more than ``FUTURE_SECONDS`` are left out (``_horizon``). None
        # until the first: the read at start reads every run, as no horizon is known.
        self._now: float | None = None
        # finished rows the last read left out as finishing after the horizon (said once
        # per count), and the earliest such finish: the read is renewed when it comes
        self.future_rows = 0
        self._future_from = math.inf
        self._cache_newest = -math.inf  # the latest finish time the cache holds
        self._room_low = False  # the room was low at the last pass (logged on change)
        self._retain_error = ""  # the last pass's failure, logged when it changes
        # runs a pass deletes at most: halved when a delete does not fit the volume,
        # doubled back (up to ``Retention.batch_runs``) after one that does
        self._retain_batch: int | None = None
        self._retained_runs = 0  # finished runs ``retain`` deleted since the start
        # damaged rows the last read of each kind ("running", "finished") left out
        self._skipped_by: dict[str, int] = {}
        # run updates the last ``record`` left out: text SQLite cannot store (not valid
        # Unicode, e.g. a lone surrogate decoded from a label's JSON); the rest are kept
        self.skipped_updates = 0
        self._unstorable: frozenset[RunKey] = frozenset()  # their keys, logged once
        # run updates the last ``record`` left out: a number the file cannot hold as a
        # run's (``history_rows.unholdable_number``); the rest are kept
        self.invalid_updates = 0
        self._invalid: frozenset[RunKey] = frozenset()  # their keys, logged once
        # run updates the last ``record`` left out because their key holds a finished
        # run they can be neither (``_retire_finished``)
        self.dropped_updates = 0
        # run updates the last ``record`` left out as a run seeded from a CSV (the same
        # run_id, a compatible namespace, a start within ``SEEDED_START_SECONDS``)
        self.seeded_updates = 0
        # Running runs' epoch ends as stored, by run key (None: not read yet). Why: a
        # cycle reads every running run, and re-reading their epoch ends from the file
        # each time (a million rows for 10,000 runs of a hundred epochs) was most of
        # the cycle's history time. Only ``record`` and ``finish`` change them; both
        # keep this in step after their transaction commits.
        self._running_ends: dict[RunKey, StoredEnds] | None = None
        # Running runs still stored in percent of their steps (only after a migration
        # from schema 2; empty ever after): converted at their first update.
        self._percent_running: set[RunKey] = {
            (ns, pod, container, rid)
            for rid, ns, pod, container, feats in conn.execute(
                "SELECT run_id, namespace, pod, container, features FROM runs "
                "WHERE state = 'running' AND features LIKE ?",
                (f'%"progress_unit": "{PERCENT_UNIT}"%',),  # dump_features' own text
            )
            if load_features(feats).get("progress_unit") == PERCENT_UNIT
        }

    @classmethod
    def open(cls, path: str | Path, retention: Retention | None = None) -> HistoryStore:
        """Open or create the store; refuse anything that is not ours. ``retention``:
        what ``retain`` deletes (None: nothing).

        A damaged file (not SQLite, failing ``quick_check``, tables missing, an error
        SQLite reports as corruption) is moved aside to ``<name>.corrupt-<unix time>[-<n>]``
        with one ERROR line and a new history starts: a forecaster that refused to
        start would restart for ever. Where the new file cannot be created (a full
        volume), the new history is in memory (``_new_history``). Another program's database and a newer schema
        are refused (``HistoryError``), never touched. A file that cannot be written
        (read-only volume) is used through an in-memory copy, with one ERROR line:
        forecasts go on, new history is not kept.

        The index ``finished`` reads along (``history_file.add_indexes``) is built here
        where missing; a build that fails (a lock held past ``BUSY_TIMEOUT_SECONDS``, a
        full disk) is one WARNING line and the start goes on without it, to build it at
        the next start. Why not refuse the start as a failed migration does: the index
        only speeds reads (without it SQLite sorts the finished runs), the file is as it
        was, and a forecaster that would forecast, only slower, must not restart for
        ever on a volume with room for a cycle's writes but not for an index.

        Any other failure is refused with ``HistoryError`` and the file is neither
        changed nor moved: a lock another process holds for longer than
        ``BUSY_TIMEOUT_SECONDS``, a full disk, an I/O error. Why not set it aside: the
        file is healthy, and a new empty history would drop months of runs for a
        condition that passes; the service exits and is restarted, and opens the same
        file once the lock is released or space freed.
        """
        spath = str(path)
        if spath != ":memory:":
            p = Path(spath)
            if p.exists() and p.is_dir():
                raise HistoryError(f"history file {spath} is a directory")
            if not p.parent.exists():
                raise HistoryError(f"history directory {p.parent} does not exist")
            removed = remove_unfinished_copies(spath)
            if removed:
                log.warning(
                    "removed %d unfinished cop%s of a new history file a forecaster was "
                    "killed while making, beside %s: %s",
                    len(removed),
                    "y" if len(removed) == 1 else "ies",
                    spath,
                    ", ".join(removed),
                )
        try:
            store = cls._open(spath)
        except DamagedHistory as err:
            store = cls._new_history(spath, err)
        store.retention = retention
        return store

    @classmethod
    def _new_history(cls, spath: str, err: HistoryError) -> HistoryStore:
        """A new, empty history in place of the damaged file at ``spath`` (``err`` says
        how it is damaged), with one ERROR line: the file moved aside and a new one
        opened at its path; or a history in memory where the file cannot be moved (a
        read-only volume: the file is left as it is for a human) or the new file cannot
        be created (a full volume, one just remounted read-only). Why not refuse: a
        forecaster that refused to start would restart for ever, forecasting nothing,
        and a store that raised here mid-service had closed its connection and failed
        every later call until the pod restarted. ``record`` creates the file once it can
        (``_create_file``)."""
        if spath != ":memory:":
            try:
                aside = set_aside(spath)
            except HistoryError as failed:
                log.error(
                    "%s; %s: forecasting from a new, empty history in memory, lost at "
                    "restart (the file is left as it is)",
                    err,
                    failed,
                )
            else:
                try:
                    store = cls._new_file(spath)
                except HistoryError as failed:
                    log.error(
                        "%s; moved to %s, and a new history file cannot be created (%s): "
                        "forecasting from a new, empty history in memory until a write can "
                        "create the file",
                        err,
                        aside,
                        failed,
                    )
                    store = cls._open(":memory:")
                    store.path, store.persistent, store._file_wanted = spath, False, True
                    return store
                else:
                    log.error(
                        "%s; moved to %s, starting a new history (re-seeded if --history.seed-csv)",
                        err,
                        aside,
                    )
                    return store
        store = cls._open(":memory:")
        store.path, store.persistent = spath, spath == ":memory:"
        return store

    @classmethod
    def _new_file(cls, spath: str) -> HistoryStore:
        """The store on a new, empty history file at ``spath`` (``_made_in_place``), or on
        the file another writer made there meanwhile (a second forecaster that set the
        same damaged file aside). Why not open ``spath`` directly: a file that cannot be
        filled (a full volume) stayed there empty, and ``_create_file`` must take the
        path only where it is free."""
        try:
            return cls._made_in_place(spath, None)
        except FileExistsError:
            return cls._open(spath)

    @classmethod
    def _open(cls, spath: str) -> HistoryStore:
        try:
            conn = connect(spath)
        except sqlite3.Error as err:
            raise HistoryError(f"cannot open history file {spath}: {why(err)}") from None
        try:
            try:
                prepare(conn, spath)
            except IndexNotBuilt as err:  # prepare's last step: the file is ready
                _without_index(err)
            if spath != ":memory:":
                probe_write(conn)
            return cls(conn, spath)
        except HistoryError:
            conn.close()
            raise
        except sqlite3.Error as err:
            if isinstance(err, sqlite3.OperationalError) and read_only(err):
                return cls._open_copy(conn, spath, err)
            conn.close()
            if corrupt(err):
                raise DamagedHistory(
                    f"history file {spath} is not a usable SQLite database ({err})"
                ) from None
            raise HistoryError(
                f"history file {spath} cannot be used now ({why(err)}); it was not changed or moved"
            ) from None

    @classmethod
    def _open_copy(cls, conn: sqlite3.Connection, spath: str, cause: sqlite3.Error) -> HistoryStore:
        """The store on an in-memory copy of a file that cannot be written (closes
        ``conn``); a failure to copy is a ``HistoryError``, the file untouched. A file
        with a leftover journal SQLite cannot roll back in place is copied with it and
        rolled back in a temporary directory first (``rolled_back_copy``)."""
        checked = True  # whether the file passed prepare's checks before it failed
        try:
            try:
                memory = memory_copy(conn)
            except sqlite3.OperationalError as err:
                if not (read_only(err) and Path(spath + "-journal").exists()):
                    raise
                memory = rolled_back_copy(spath)
                checked = False
        except (sqlite3.Error, OSError) as err:
            reason = why(err) if isinstance(err, sqlite3.Error) else str(err)
            raise HistoryError(
                f"history file {spath} is not writable ({cause}) and cannot be copied into "
                f"memory ({reason}); it was not changed"
            ) from None
        finally:
            conn.close()
        try:
            try:
                if checked:  # the copy is upgraded as the file would be
                    upgrade(memory, spath, memory.execute("PRAGMA user_version").fetchone()[0])
                else:
                    prepare(memory, spath)
            except IndexNotBuilt as err:  # upgrade's last step, as in prepare
                _without_index(err)
            store = cls(memory, spath)
        except HistoryError:
            memory.close()
            raise
        except sqlite3.Error as err:
            memory.close()
            raise HistoryError(f"history file {spath}: its in-memory copy failed ({err})") from None
        log.error(
            "history file %s is not writable (%s): forecasting from an in-memory copy; "
            "history learned from now on is lost at restart",
            spath,
            cause,
        )
        store.persistent = False
        return store

    def _create_file(self) -> None:
        """Under the caller's lock: the history file created at ``path`` with what this
        in-memory store holds, and the store moved onto it, with one WARNING line;
        where it still cannot be created, nothing changes (tried again at the next
        write).

        Why: the in-memory history ``_new_history`` falls back to after it set a
        damaged file aside on a full volume would otherwise last until the pod
        restarts, and every run learnt meanwhile would be lost then. Only a free path
        is taken (``_made_in_place``): a file at the path is another writer's (a second
        forecaster), never overwritten nor deleted; this store then stays in memory,
        with one ERROR line."""
        try:
            fresh = type(self)._made_in_place(self.path, self._conn)
        except FileExistsError:
            self._file_wanted = False
            log.error(
                "history file %s appeared while this forecaster worked from memory: "
                "left as it is; the history in memory is lost at restart",
                self.path,
            )
            return
        except HistoryError:
            return  # the volume still has no room: the ERROR line said so already
        old, self._conn = self._conn, fresh._conn
        old.close()
        self.persistent, self._file_wanted = True, False
        log.warning(
            "history file %s created: the history kept in memory since the damaged file "
            "was set aside is stored there from now on",
            self.path,
        )

    @classmethod
    def _made_in_place(cls, spath: str, source: sqlite3.Connection | None) -> HistoryStore:
        """The store on a new history file at ``spath``, holding what ``source`` holds
        (SQLite's backup API; None: empty), made in a file of its own beside ``spath``
        and hard-linked into place. ``FileExistsError`` where anything is at ``spath``
        (left as it is), ``HistoryError`` where the file cannot be made (this call's
        own file deleted, nothing left behind).

        Why not open ``spath`` and copy into it: another writer (a second forecaster)
        may make its history there between a look at the path and the copy, and the
        backup replaces the whole destination; a copy failing half-way left a file to
        delete that could be that writer's. ``os.link`` takes the path only where it is
        free, in one step, and this store deletes only names it made."""
        directory, name = os.path.split(spath)
        made = os.path.join(
            directory, unfinished_copy_name(name, os.getpid(), secrets.token_hex(4))
        )
        try:
            create_new(made)
        except OSError as err:
            raise HistoryError(f"cannot create history file {made}: {err.strerror}") from None
        try:
            cls._fill(made, source)
            try:
                os.link(made, spath)
            except FileExistsError:
                raise
            except OSError as err:
                if err.errno not in _NO_HARD_LINKS:
                    raise HistoryError(
                        f"cannot link history file {made} to {spath}: {err.strerror}"
                    ) from None
                _remove_own(made)  # before the copy in place: room for one copy, not two
                return cls._filled_in_place(spath, source, err)
        finally:
            _remove_own(made)
        return cls._open(spath)

    @classmethod
    def _filled_in_place(
        cls, spath: str, source: sqlite3.Connection | None, link_error: OSError
    ) -> HistoryStore:
        """The store on a new history file created at ``spath`` itself and filled
        there (``source``: as ``_made_in_place``), for a volume whose file system has
        no hard links (``link_error``: Azure Files over SMB, gcsfuse, s3fs, vfat).
        ``FileExistsError`` where anything is at ``spath``; ``HistoryError`` naming
        the cause where the file cannot be made or filled (then deleted).

        Why ``O_EXCL``: the file is created only where the path is free, so it is
        this store's and no other writer's; a file at the path is left as it is. The
        copy is not atomic as a link is: a second forecaster opening the path during
        the copy could see it half-made, which a single-writer deployment never does."""
        try:
            create_new(spath)
        except FileExistsError:
            raise
        except OSError as err:
            raise HistoryError(
                f"cannot create history file {spath}: {err.strerror} (its volume has no "
                f"hard links: {link_error.strerror})"
            ) from None
        try:
            cls._fill(spath, source)
            return cls._open(spath)
        except HistoryError as err:
            _remove_own(spath)
            raise HistoryError(
                f"{err} (its volume has no hard links: {link_error.strerror})"
            ) from None

    @classmethod
    def _fill(cls, spath: str, source: sqlite3.Connection | None) -> None:
        """The new, empty file at ``spath`` made a history holding what ``source``
        holds (SQLite's backup API; None: empty), and closed; ``HistoryError`` where it
        cannot be."""
        store = cls._open(spath)
        try:
            if not store.persistent:
                raise HistoryError(f"history file {spath} is not writable")
            if source is not None:
                source.backup(store._conn)
        except sqlite3.Error as err:
            raise HistoryError(f"cannot fill history file {spath}: {why(err)}") from None
        finally:
            store._conn.close()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    # -- writes ---------------------------------------------------------------

    @_recovering
    def record(
        self,
        updates: Iterable[RunUpdate],
        state: Mapping[str, str] | None = None,
        *,
        expect: Mapping[str, str | None] | None = None,
        uncovered_since: float | None = None,
        now: float | None = None,
        unseen_seconds: float = 0.0,
        lingering: Collection[RunKey] = (),
    ) -> list[RunKey]:
        """Upsert running runs, add their epoch ends and store the caller's ``state``
        (service values, as ``set_metas``), all in one transaction — and only if the
        stored service values are still those in ``expect`` (None: absent), else
        ``HistoryConflict`` and nothing is written.

        Runs are matched by their full key. A live run that is a finished run seeded from a
        CSV without a pod (the same run_id, a compatible namespace and a start within
        ``SEEDED_START_SECONDS``) is left out, counted in ``seeded_updates``: the demo
        backfills the same runs into Prometheus and a CSV. A live run with the seeded run's
        id and another start is another run, recorded as any. A finished run stays frozen;
        an update of its key with a later start, at or after the finished run's last epoch
        end, is a new run under the same key (a StatefulSet pod ``trainer-0``, a PyTorchJob
        resubmitted under its name, a named run trained again): the finished run keeps its
        row under the next attempt number (``runs.attempt``) and the new one is recorded
        (``_retire_finished``). An update with yet another start (after the finished run's,
        before its last epoch end) cannot be placed: it is left out and counted in
        ``dropped_updates``. Why not fold it into the finished run: a frozen run is what the
        models learn from, and splicing two runs is never done.

        A run that reports a start no earlier than the stored one loses its stored
        epoch ends from before that start (``_drop_ends_before_start``). An update
        whose text SQLite cannot store (not valid Unicode) is skipped and counted in
        ``skipped_updates``, the others are recorded (``_storable``).

        A run finished as ``incomplete`` (vanished) that is present again in an update
        (``seen_timestamp`` after its finish) with the same start, within ``SAME_START_SECONDS``, is
        running again: its epoch list goes back to ``epoch_ends``, its finish is undone
        (``_revive``). Why: it was never gone, only unseen (a Prometheus outage or a
        scrape gap longer than the vanish grace), and a frozen row would keep it from
        being forecast for the rest of its life, and the models would learn it as a
        cancelled run. The keys revived are returned.

        ``uncovered_since`` (with ``now``): the caller's previous successful read, when
        the seconds since it are not covered by its reads (a failed cycle since, or a
        gap longer than the vanish grace). A running run seen at or after it (or started
        then) counts its absence from ``now`` (``last_seen`` set to ``now`` less
        ``HELD_OFFSET_SECONDS``): no read saw it gone, so the grace starts with this one
        (``Cycle._run``). Why the offset: a run seen present at this read stores ``now``
        exactly, and the next uncovered read must hold only those, not a run held here
        and still gone (else reads farther apart than the grace, a ``once`` CronJob,
        would hold a vanished run for ever). A running run already absent then (seen
        last before it) keeps counting, less ``unseen_seconds``: the seconds since that
        read no read covered (up to a failed read after it, ``cycle.unseen_seconds``),
        by which its ``last_seen`` (or its start, if never seen) moves on, never past
        ``now`` less the offset. Why: the grace counts seconds reads saw the run gone,
        so that outages alone never finish it, however often Prometheus comes back for
        a read before its first scrape; and the seconds between the failed reads do add
        up, so that a vanished run is finished while every other read fails.

        An update's GPU-use and memory means (``util_mean``, ``memory_mean`` weighted by
        ``weight_seconds``) add to the run's. Why ``state`` is written here: it says which
        seconds the caller's next read starts from (the cycle's query and range times),
        so means stored without it would be read and added again after a failure or a
        restart, and a state stored without its means would lose those seconds. One
        transaction makes both or neither happen.

        ``lingering`` (with ``now``): the keys of completed runs whose series the
        caller's read still answered (``FinishedPresent.completed_present``). The mark
        a key keeps of its run retention deleted (``retired``) lasts
        ``Retention.linger_seconds`` past this ``now``, and marks no read has renewed
        for that long are deleted, in the same transaction (``_keep_retired``).

        Why ``expect``: the caller read its means for the seconds after the state it
        holds; a second process writing the same file (a forecaster started by mistake)
        has stored those seconds' means already if the stored state moved on, and
        adding them again would count them twice. The check is made after ``BEGIN
        IMMEDIATE``, under the write lock, so no writer can come between it and the
        write.
        """
        if self._file_wanted:
            with self._lock:
                self._create_file()
        if now is not None:
            self._retain_before_write(now)
        updates = self._storable(updates)
        rows = []
        ends = []
        recheck: list[dict[str, object]] = []  # rows whose old ends may predate the start
        known = self._running_ends or {}
        to_steps: dict[RunKey, float] = {}
        if self._percent_running:  # only after a migration from schema 2
            to_steps = {
                run_key(up): float(up.epochs_planned)
                for up in updates
                if run_key(up) in self._percent_running and counts_steps(up)
            }
        for up in updates:
            row = {
                "run_id": up.run_id,
                "namespace": up.namespace,
                "pod": up.pod,
                "container": up.container,
                "node": up.node,
                "epochs_planned": float(up.epochs_planned),
                "start_timestamp": float(up.start_timestamp),
                "features": dump_features(up.features),
                "last_seen": up.seen_timestamp,
            }
            key = run_key(up)
            row.update(zip(_MEANS, _added_means(up), strict=True))
            rows.append(row)
            stored = None if key in to_steps else known.get(key)
            # Held ends all at or after the start: the file has none before it, nothing
            # to drop (the steady state: no statement). Else the file is asked, and
            # every end is sent, since those of the same epochs may be dropped.
            if stored is None or not stored.earliest >= row["start_timestamp"]:
                recheck.append(row)
                stored = None
            # an epoch already stored keeps its first time (INSERT OR IGNORE): skip it
            ends.extend(
                (float(e), float(t), *key)
                for e, t in up.epoch_ends
                if stored is None or float(e) not in stored.ends
            )
        # a present update of a key not held as running may be of a run finished as
        # vanished that is back (``_revive``); held keys are running, nothing to ask
        maybe_back = [row for row in rows if row["last_seen"] and _row_key(row) not in known]
        revived: list[RunKey] = []
        bad: list[str] = []  # damaged stored rows the write left as they are
        with self._lock:
            with self._tx():
                if expect:
                    self._check_expected(expect)
                if now is not None:
                    self._keep_retired(lingering, now)
                revived = self._revive(maybe_back)
                fresh = [row for row in rows if _row_key(row) not in known]
                self.dropped_updates = self._retire_finished(fresh, bad)
                self.seeded_updates = sum(
                    self._conn.execute(f"SELECT 1 FROM runs WHERE {_IS_SEEDED}", row).fetchone()
                    is not None
                    for row in fresh
                )
                if uncovered_since is not None and now is not None:
                    self._conn.execute(
                        "UPDATE runs SET last_seen = :held WHERE state = 'running' "
                        "AND MAX(last_seen, start_timestamp) >= :since AND last_seen < :held",
                        {"held": now - HELD_OFFSET_SECONDS, "since": uncovered_since},
                    )
                    if unseen_seconds > 0:  # after the hold: a run held is not also moved
                        self._conn.execute(
                            "UPDATE runs SET last_seen = MIN(:held, "
                            "MAX(last_seen, start_timestamp) + :unseen) WHERE state = 'running' "
                            "AND MAX(last_seen, start_timestamp) < :since",
                            {
                                "held": now - HELD_OFFSET_SECONDS,
                                "since": uncovered_since,
                                "unseen": unseen_seconds,
                            },
                        )
                for key, steps in to_steps.items():
                    self._percent_to_steps(key, steps)
                dropped = self._drop_ends_before_start(recheck)
                self._conn.executemany(
                    f"""
                    INSERT INTO runs (run_id, namespace, pod, container, node, epochs_planned,
                        start_timestamp, state, features, util_sum, util_weight, memory_sum,
                        memory_weight, last_seen)
                    SELECT :run_id, :namespace, :pod, :container, :node, :epochs_planned,
                        :start_timestamp, 'running', :features, :util_sum, :util_weight,
                        :memory_sum, :memory_weight, :last_seen
                    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE {_IS_SEEDED})
                    ON CONFLICT(namespace, pod, container, run_id, attempt) DO UPDATE SET
                        node = excluded.node,
                        epochs_planned = excluded.epochs_planned,
                        start_timestamp = excluded.start_timestamp,
                        features = excluded.features,
                        util_sum = util_sum + excluded.util_sum,
                        util_weight = util_weight + excluded.util_weight,
                        memory_sum = memory_sum + excluded.memory_sum,
                        memory_weight = memory_weight + excluded.memory_weight,
                        last_seen = MAX(last_seen, excluded.last_seen)
                    WHERE runs.state = 'running'
                    """,
                    rows,
                )
                self._conn.executemany(
                    """
                    INSERT OR IGNORE INTO epoch_ends (run, epoch, timestamp)
                    SELECT id, ?, ? FROM runs WHERE namespace = ? AND pod = ? AND container = ?
                        AND run_id = ? AND state = 'running'
                    """,
                    ends,
                )
                thin = self._thin_step_ends(updates, ends, known, recheck, bad)
                if state:
                    self._write_metas(state)
            self._skipped("stored", bad, "write")
            self._percent_running -= set(to_steps)
            if revived:  # committed: they left the finished history
                self._finished_revived(revived)
            if dropped:
                log.info(
                    "history file %s: %d epoch end(s) from before their run's new start "
                    "dropped (a run restarted under the same key; its new ends are kept)",
                    self.path,
                    dropped,
                )
            if self._running_ends is not None:  # committed: the same ends in memory
                for key in to_steps:
                    self._running_ends.pop(key, None)  # re-read in steps
                for row in recheck:  # re-read: some of their ends may be gone
                    self._running_ends.pop(_row_key(row), None)
                for epoch, ts, *key in ends:
                    if not _insertable(epoch, ts):  # not stored (NOT NULL): not held
                        continue
                    stored = self._running_ends.get(tuple(key))  # type: ignore[arg-type]
                    if stored is not None and epoch not in stored.ends:
                        stored.add(epoch, ts)
                for key, epochs in thin.items():
                    stored = self._running_ends.get(key)
                    if stored is not None:
                        stored.drop(epochs)
        return revived

    def _keep_retired(self, lingering: Collection[RunKey], now: float) -> None:
        """The marks of runs retention deleted (``retired``) whose key is in
        ``lingering`` kept for ``Retention.linger_seconds`` after ``now``; those past
        their time deleted (the caller's transaction). Why renewed by reads and not
        kept for a fixed time: a Job's Succeeded pod may live for months, and its
        series with it. Why ``linger_seconds`` is the retention period in the service,
        not the lookback: the series may be away longer than a read reaches back and
        come back (the node's exporter crash-looping, publishing the pod's row again
        from its state file), so the marks are bounded by the runs a period deletes.
        Why after the renewal: a forecaster down for longer than that finds the marks
        of the pods still there, and keeps them. Keys whose text SQLite cannot store were
        never stored (``_storable``)."""
        rule = self.retention
        linger = LINGER_SECONDS if rule is None else rule.linger_seconds
        self._conn.executemany(
            f"UPDATE retired SET until_timestamp = MAX(until_timestamp, ?5) WHERE {_KEY_MATCH}",
            [
                (*key, now + linger)
                for key in lingering
                if unencodable(zip(_KEY_FIELDS, key, strict=True)) is None
            ],
        )
        self._conn.execute("DELETE FROM retired WHERE until_timestamp < ?", (now,))

    def _thin_step_ends(
        self,
        updates: Sequence[RunUpdate],
        ends: Sequence[tuple],
        held: Mapping[RunKey, StoredEnds],
        recheck: Sequence[Mapping[str, object]],
        bad: list[str],
    ) -> dict[RunKey, set[float]]:
        """Keep at most the newest stored point per 1/``STEP_CELLS`` of its plan of each
        run in ``updates`` that got new points (``ends``) and is kept by cell
        (``runs_from_series.kept_by_cell``: it counts steps, or its update has an epoch
        that is not whole), in the caller's transaction; the points deleted, by run key.

        Why: a cycle thins its own points (``runs_from_series``), but the latest step or
        fractional epoch is always new, so a run's stored points grew by one every cycle
        (a week at one cycle a minute: 10,000 rows per run). One per cell across cycles
        bounds a run to ``STEP_CELLS`` + 1 points; the newest of a cell carries the
        freshest rate. Why the update's epochs decide: they are the same whether the
        run's ends are held or read, so both thin alike.

        A run whose ends are ``held`` in memory (``_running_ends``, as committed) and
        not re-read in this ``record`` (not in ``recheck``: no ends dropped before its
        start, no conversion from percent) is thinned from those ends and its new ones,
        without reading the file. Why: reading every step-counting run's few hundred
        points each cycle (4 million rows for 10,000 runs) was what the memory held
        ends exist to avoid. Else its points are read from the file.

        A stored point that is not a number (text a ``sqlite3`` shell wrote) is neither
        thinned nor dropped: it is named in ``bad`` and left in the file as it is, the
        run's other points thinned as usual (``_numbers``).
        """
        touched = {tuple(key) for _e, _t, *key in ends}
        reread = {_row_key(row) for row in recheck}
        new_ends: dict[RunKey, set[float]] = {}
        for epoch, ts, *key in ends:
            if _insertable(epoch, ts):  # else INSERT OR IGNORE left it out
                new_ends.setdefault(tuple(key), set()).add(epoch)  # type: ignore[arg-type]
        # the epochs stored now, of held runs, as this call's deletes leave them
        stored_now: dict[RunKey, set[float]] = {}
        out: dict[RunKey, set[float]] = {}
        for up in updates:
            key = run_key(up)
            if key not in touched or not up.epochs_planned > 0:
                continue
            if not kept_by_cell((e for e, _t in up.epoch_ends), counts_steps(up)):
                continue
            origin = at_start(up.epoch_ends, up.start_timestamp)
            if key in held and key not in reread:
                epochs = stored_now.get(key)
                if epochs is None:
                    epochs = stored_now[key] = set(_numbers(held[key].ends, key, bad))
                    epochs |= new_ends.get(key, set())
                origin |= at_start(held[key].ends.items(), up.start_timestamp)
                drop = crowded_steps(epochs, float(up.epochs_planned), origin)
                if drop:
                    self._conn.executemany(
                        """DELETE FROM epoch_ends WHERE epoch = ? AND run = (
                           SELECT id FROM runs WHERE namespace = ? AND pod = ?
                           AND container = ? AND run_id = ? AND state = 'running')""",
                        [(epoch, *key) for epoch in drop],
                    )
                    epochs -= drop
                    out.setdefault(key, set()).update(drop)
                continue
            rows = self._conn.execute(
                """SELECT e.run, e.epoch, e.timestamp FROM epoch_ends e JOIN runs r
                   ON r.id = e.run WHERE r.namespace = ? AND r.pod = ? AND r.container = ?
                   AND r.run_id = ? AND r.state = 'running'""",
                key,
            ).fetchall()
            origin |= at_start(((e, t) for _run, e, t in rows), up.start_timestamp)
            drop = crowded_steps(
                _numbers([epoch for _run, epoch, _t in rows], key, bad),
                float(up.epochs_planned),
                origin,
            )
            if drop:
                self._conn.executemany(
                    "DELETE FROM epoch_ends WHERE run = ? AND epoch = ?",
                    [(rows[0][0], epoch) for epoch in drop],
                )
                out.setdefault(key, set()).update(drop)
        return out

    def _retire_finished(self, rows: list[dict[str, object]], bad: list[str]) -> int:
        """Move a finished run whose key a new run of ``rows`` takes (``new_attempt``)
        to the key's next attempt number (the caller's transaction), so that the new
        run is recorded under attempt 0. Returns how many of ``rows`` have a start
        that is neither their finished run's nor a new run's: those are left out.

        A finished run whose stored start is not a number (text a ``sqlite3`` shell
        wrote) cannot be told from a new run: it stays as it is, named in ``bad``, and
        the update under its key is left out, as for the finished run's own series."""
        dropped = 0
        for row in rows:
            found = self._conn.execute(
                """SELECT id, start_timestamp, epoch_times FROM runs WHERE namespace = :namespace
                   AND pod = :pod AND container = :container AND run_id = :run_id
                   AND attempt = 0 AND state != 'running'""",
                row,
            ).fetchone()
            if found is None:
                continue
            row_id, stored_start, blob = found
            if not is_number(stored_start):
                bad.append(f"stored run {row['run_id']!r}: start {stored_start!r} is not a number")
                continue
            try:
                times = unpack_epoch_times(blob) if blob is not None else ()
            except ValueError:
                times = ((0.0, math.inf),)  # a damaged list: no run can follow it
            verdict = new_attempt(float(row["start_timestamp"]), stored_start, times)  # type: ignore[arg-type]
            if verdict is None:
                continue  # the finished run's own series, still in the window
            if not verdict:
                dropped += 1
                continue
            self._conn.execute(
                """UPDATE runs SET attempt = 1 + (SELECT MAX(attempt) FROM runs
                   WHERE namespace = :namespace AND pod = :pod AND container = :container
                   AND run_id = :run_id) WHERE id = :id""",
                {**row, "id": row_id},
            )
        return dropped

    def _revive(self, rows: list[dict[str, object]]) -> list[RunKey]:
        """Turn back to running the ``incomplete`` runs of ``rows`` (present updates)
        seen after their finish whose stored start is theirs within ``SAME_START_SECONDS`` (the caller's
        transaction): their epoch list back into ``epoch_ends``, the finish undone.
        Returns their keys. A completed run stays frozen: it reached its plan.

        Any attempt of the key is revived, not only its latest (attempt 0): a run moved
        to an earlier attempt by a run that followed it (``_retire_finished``) is the
        same run when it is back with its start. It becomes the key's attempt 0 again,
        the run that followed it takes its attempt number (``_make_latest``). Why: a
        run's updates are written to attempt 0 (``record``'s upsert), so a revived run
        left under another attempt would take none and vanish again. Not while the key
        holds a running run: the update is that run's (an older snapshot of it).
        """
        revived: list[RunKey] = []
        for row in rows:
            found = self._conn.execute(
                """SELECT id, attempt, epoch_times FROM runs WHERE namespace = :namespace
                   AND pod = :pod AND container = :container AND run_id = :run_id
                   AND state = 'incomplete' AND finished_timestamp < :last_seen
                   AND ABS(start_timestamp - :start_timestamp) <= :tolerance
                   AND NOT EXISTS (SELECT 1 FROM runs WHERE namespace = :namespace
                       AND pod = :pod AND container = :container AND run_id = :run_id
                       AND state = 'running')
                   ORDER BY attempt LIMIT 1""",
                {**row, "tolerance": SAME_START_SECONDS},
            ).fetchone()
            if found is None:
                continue
            row_id, attempt, blob = found
            try:
                times = unpack_epoch_times(blob) if blob is not None else ()
            except ValueError:
                continue  # a damaged list: the row stays as it is, for a human
            if attempt != 0:
                self._make_latest(row, row_id, attempt)
            self._conn.execute(
                """UPDATE runs SET state = 'running', finished_timestamp = NULL,
                   epoch_times = NULL WHERE id = ?""",
                (row_id,),
            )
            self._conn.executemany(
                "INSERT OR IGNORE INTO epoch_ends (run, epoch, timestamp) VALUES (?, ?, ?)",
                [(row_id, e, ts) for e, ts in times if e > 0],
            )
            revived.append(_row_key(row))
        return revived

    def _make_latest(self, row: Mapping[str, object], row_id: int, attempt: int) -> None:
        """Swap the attempt numbers of the run ``row_id`` (``attempt``) and its key's
        attempt 0 (the caller's transaction), through -1: the key's attempts stay
        unique at every statement."""
        self._conn.execute("UPDATE runs SET attempt = -1 WHERE id = ?", (row_id,))
        self._conn.execute(
            """UPDATE runs SET attempt = :attempt WHERE namespace = :namespace AND pod = :pod
               AND container = :container AND run_id = :run_id AND attempt = 0""",
            {**row, "attempt": attempt},
        )
        self._conn.execute("UPDATE runs SET attempt = 0 WHERE id = ?", (row_id,))

    def _drop_ends_before_start(self, rows: list[dict[str, object]]) -> int:
        """Delete a running run's stored epoch ends older than the start in its update
        ``row``, when that start is not earlier than the stored one (the caller's
        transaction); returns how many went.

        Why: a run that keeps its key but starts again (its exporter lost its state
        and the job restarted, or a named run re-run in the same pod) reports its new
        start and epochs from 1 again. Its old attempt's ends are all before the new
        start, so they are never shown (an epoch list starts at its start:
        ``monotone_epoch_times``), but they would keep the new attempt's ends out (an
        epoch keeps its first stored time): the run would show no progress at all.
        Ends at or after the start are kept, so a start that moves later by a little
        (re-read, rounded) loses nothing shown. An EARLIER start deletes nothing: it
        is a corrected start or an exporter replaying an older snapshot of the run,
        and the ends stored since are still the run's.
        """
        if not rows:
            return 0
        before = self._conn.total_changes
        self._conn.executemany(
            """
            DELETE FROM epoch_ends WHERE timestamp < :start_timestamp AND run = (
                SELECT id FROM runs WHERE namespace = :namespace AND pod = :pod
                    AND container = :container AND run_id = :run_id AND state = 'running'
                    AND start_timestamp <= :start_timestamp)
            """,
            rows,
        )
        return self._conn.total_changes - before

    def _storable(self, updates: Iterable[RunUpdate]) -> list[RunUpdate]:
        """``updates`` without those whose text SQLite cannot store, counted in
        ``skipped_updates``, and without those with a number the file cannot hold as
        a run's (``history_rows.unholdable_number``: a plan not finite and > 0, a start
        or a time seen not finite), counted in ``invalid_updates``; one WARNING line
        for each kind whenever the set of such runs changes.

        Why: Python strings may hold lone surrogates (a label decoded from JSON
        ``"\\ud800"``) that UTF-8 cannot encode; binding one fails the whole
        transaction, so one odd label used to fail every cycle. A NaN binds as NULL,
        which the columns refuse, failing it too; an infinite or negative number was
        stored and read back as a damaged row at every cycle. A run's key cannot be
        repaired without risking it meeting another run's, so the update is left out
        (nothing stored is touched); the run is forecast again once its labels (its
        numbers) are valid.
        """
        good, numbers = _sift(updates, _unholdable_update)
        good, text = _sift(good, _unencodable_update)
        self.invalid_updates, self.skipped_updates = len(numbers), len(text)
        self._invalid = self._say_skipped(
            numbers,
            self._invalid,
            "a number out of range (first: namespace/pod/container/run_id {key}: {why})",
        )
        self._unstorable = self._say_skipped(
            text,
            self._unstorable,
            "their {why} is not valid Unicode (first: namespace/pod/container/run_id {key})",
        )
        return good

    def _say_skipped(
        self, bad: Sequence[tuple[RunKey, str]], said: frozenset[RunKey], reason: str
    ) -> frozenset[RunKey]:
        """One WARNING line for the updates ``_storable`` left out (``bad``: key, why),
        ``reason`` filled with the first one's key and why, unless they are the runs
        ``said`` last time; the keys said now."""
        keys = frozenset(key for key, _ in bad)
        if bad and keys != said:
            key, why_left = bad[0]
            log.warning(
                "history file %s: %d run update(s) skipped, %s; the others were recorded",
                self.path,
                len(bad),
                reason.format(key=ascii("/".join(key))[:300], why=why_left),
            )
        return keys

    def _percent_to_steps(self, key: RunKey, steps_planned: float) -> None:
        """Rescale a running run's stored ends from percent of its steps to steps (the
        caller's transaction). Negated first: the (run, epoch) key must never collide
        while the rows are rewritten one by one."""
        found = self._conn.execute(
            "SELECT id, epochs_planned FROM runs WHERE namespace = ? AND pod = ? "
            "AND container = ? AND run_id = ? AND state = 'running'",
            key,
        ).fetchone()
        if found is None or not finite(found[1]) or found[1] <= 0:
            return
        scale = steps_planned / float(found[1])
        self._conn.execute(
            "UPDATE epoch_ends SET epoch = -epoch * ? WHERE run = ?", (scale, found[0])
        )
        self._conn.execute("UPDATE epoch_ends SET epoch = -epoch WHERE run = ?", (found[0],))

    @_recovering
    def finish(self, keys: Iterable[RunKey], finished_timestamp: float) -> list[Run]:
        """Freeze running runs as finished (completed or not, by their last epoch).

        ``keys`` are ``run_key`` tuples; unknown or already finished keys are skipped,
        and so are keys with text SQLite cannot store (never recorded: ``_storable``)
        and a damaged running row (one ERROR line; the row stays in the file as it
        is, like the rows ``running`` leaves out): one such run must not fail every
        cycle that finishes runs.
        """
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            if not (isinstance(key, tuple) and len(key) == 4):
                raise TypeError(f"finish() takes (namespace, pod, container, run_id), got {key!r}")
        wanted = [key for key in wanted if unencodable(zip(_KEY_FIELDS, key, strict=True)) is None]
        if not wanted:
            return []
        done: list[Run] = []
        damaged: list[str] = []
        with self._lock:
            self._told(finished_timestamp)
            with self._tx():
                done = self._finish_keys(wanted, finished_timestamp, damaged)
            # committed: the memory follows (a failed commit leaves it as the file is)
            for run in done:
                self._percent_running.discard(run_key(run))
                if self._running_ends is not None:
                    self._running_ends.pop(run_key(run), None)
            if done:
                self._finished_changed(done, [finished_timestamp])
                after = self._retained_after
                if after is not None and finished_timestamp < after[0]:
                    # finished before the last run retention deleted (a clock that
                    # stepped back): the next pass starts from the oldest again
                    self._retained_after = None
        if damaged:
            log.error(
                "history file %s: %d damaged running run row(s) not finished, kept as they "
                "are (first: %s)",
                self.path,
                len(damaged),
                damaged[0][:200],
            )
        return done

    def _finish_keys(
        self, wanted: list[RunKey], finished_timestamp: float, damaged: list[str]
    ) -> list[Run]:
        """``finish``'s writes, in the caller's transaction; damaged rows go to ``damaged``."""
        done: list[Run] = []
        for key in wanted:
            try:
                found = self._load_running_key(key)
            except (HistoryError, RunError, TypeError, ValueError) as err:
                damaged.append(str(err))
                continue
            if found is None:
                continue
            row_id, stored = found
            run = stored.run
            completed = run.epochs_done >= run.epochs_planned
            final = dataclasses.replace(run, completed=completed)
            self._conn.execute(
                """UPDATE runs SET state = ?, finished_timestamp = ?, epoch_times = ?,
                   features = ? WHERE id = ?""",
                (
                    "completed" if completed else "incomplete",
                    finished_timestamp,
                    pack_epoch_times(final.epoch_times),
                    dump_features(final.features),
                    row_id,
                ),
            )
            self._conn.execute("DELETE FROM epoch_ends WHERE run = ?", (row_id,))
            done.append(final)
        return done

    @_recovering
    def import_finished(self, runs: Sequence[Run], now: float | None = None) -> int:
        """Add finished runs (a seed CSV) that are not stored yet; idempotent.

        A run is already stored when a stored run has its key and its start within
        ``SEEDED_START_SECONDS``, or when either of the two has no pod and no container (a CSV run), their namespaces are
        compatible (equal, or either one unknown), their ``job_name`` features too,
        and the stored one has the run's name, or another name a runs file gives it
        (``runs.file_names``: ``1`` or ``resnet/tpu/1``) with a start within
        ``SEEDED_START_SECONDS``. Why by name and start: a runs file names a run
        ``job/node_type/run_id`` only where another of its runs shares the run_id, so
        one run comes from two seeds under two names, and only its start tells it
        from another job's run of that id; a CSV of runs the forecaster already saw
        live adds nothing. A run not stored whose name is taken by another run goes
        under its other name; one whose key (with its pod and container) holds another
        run, with another start, goes under the key's next attempt (``_free_attempt``).
        A run whose text SQLite cannot store (not valid
        Unicode) is left out with one WARNING line, the others are added.

        ``now`` (the import's time): a run ending after it by more than
        ``FUTURE_SECONDS`` is no finished run (a typo, a clock far ahead) and is left
        out, the first named in one WARNING line. Why: stored, it would be the newest
        run until that time came, and retention would measure the others against it.
        """
        storable = [
            run
            for run in runs
            if unencodable(zip(_KEY_FIELDS, run_key(run), strict=True), run.features) is None
        ]
        if len(storable) < len(runs):
            log.warning(
                "history file %s: %d of %d finished runs to import left out, their text is "
                "not valid Unicode",
                self.path,
                len(runs) - len(storable),
                len(runs),
            )
        if now is not None:
            late = [run for run in storable if not run.last_timestamp <= now + FUTURE_SECONDS]
            if late:
                log.warning(
                    "history file %s: %d of %d finished runs to import left out, they end "
                    "after the import's time by more than %g s (first: %s ending at %.0f)",
                    self.path,
                    len(late),
                    len(runs),
                    FUTURE_SECONDS,
                    ascii(late[0].run_id)[:200],
                    late[0].last_timestamp,
                )
                storable = [run for run in storable if run.last_timestamp <= now + FUTURE_SECONDS]
        added: list[Run] = []
        with self._lock:
            if now is not None:
                self._told(now)
            with self._tx():
                added = self._import_runs(storable)
            if added:  # committed: the cache follows (a failed commit leaves it as the file)
                self._finished_changed(added, [run.last_timestamp for run in added])
        return len(added)

    def _import_runs(self, runs: Sequence[Run]) -> list[Run]:
        """``import_finished``'s writes, in the caller's transaction: the runs added."""
        added: list[Run] = []
        for run in runs:
            names = file_names(run)
            stored = self._conn.execute(
                f"""SELECT run_id, start_timestamp, features FROM runs
                   WHERE run_id IN ({", ".join("?" * len(names))})
                   AND (namespace = ? OR namespace = '' OR ? = '')
                   AND ((pod = '' AND container = '') OR (? = '' AND ? = ''))""",
                (*names, run.namespace, run.namespace, run.pod, run.container),
            ).fetchall()
            if any(_same_seeded(run, *row) for row in stored):
                continue
            taken = {row[0] for row in stored}
            name = next((n for n in names if n not in taken), None)
            if name is None:  # both names held by other runs: nothing to store it under
                continue
            attempt = self._free_attempt((run.namespace, run.pod, run.container, name), run)
            if attempt is None:  # the key holds this run, recorded live
                continue
            completed = (
                run.completed
                if run.completed is not None
                else run.epochs_done >= run.epochs_planned
            )
            cur = self._conn.execute(
                """INSERT OR IGNORE INTO runs (run_id, namespace, pod, container,
                   epochs_planned, start_timestamp, state, features, last_seen,
                   finished_timestamp, epoch_times, seeded, attempt)
                   VALUES (:run_id, :namespace, :pod, :container, :epochs_planned,
                   :start, :state, :features, :last, :last, :times, 1, :attempt)""",
                {
                    "attempt": attempt,
                    "run_id": name,
                    "namespace": run.namespace,
                    "pod": run.pod,
                    "container": run.container,
                    "epochs_planned": float(run.epochs_planned),
                    "start": run.start_timestamp,
                    "state": "completed" if completed else "incomplete",
                    "features": dump_features(run.features),
                    "last": run.last_timestamp,
                    "times": pack_epoch_times(run.epoch_times),
                },
            )
            if cur.rowcount:
                added.append(
                    dataclasses.replace(
                        run, run_id=name, epoch_times=tuple(run.epoch_times), completed=completed
                    )
                )
        return added

    def _free_attempt(self, key: RunKey, run: Run) -> int | None:
        """The attempt number a seeded ``run`` is stored under at ``key`` (the caller's
        transaction): 0 where the key holds no run, None where it holds this run (a
        start within ``SEEDED_START_SECONDS``: the run seen live, or seeded before),
        else the key's next free attempt, as ``_retire_finished`` gives a finished run
        whose key a new run takes. Why: a seed CSV may give its runs the pod and
        container of a key a live run holds (a StatefulSet pod ``trainer-0``, a run id
        reused), and the insert at attempt 0 was dropped by the key's UNIQUE
        constraint, silently. A stored start that is not a number (a hand edit) is
        not this run."""
        held = self._conn.execute(
            """SELECT start_timestamp, attempt FROM runs WHERE namespace = ? AND pod = ?
               AND container = ? AND run_id = ?""",
            key,
        ).fetchall()
        if any(
            is_number(start) and abs(start - run.start_timestamp) <= SEEDED_START_SECONDS
            for start, _ in held
        ):
            return None
        return 1 + max((int(attempt) for _, attempt in held), default=-1)

    def set_meta(self, key: str, value: str) -> None:
        """Store a small service value (e.g. the last query time), atomically."""
        self.set_metas({key: value})

    @_recovering
    def set_metas(self, values: Mapping[str, str]) -> None:
        """Store several service values in one transaction (one commit, one sync:
        either all of them or none). A cycle's state goes with its means (``record``)."""
        with self._lock, self._tx():
            self._write_metas(values)

    def _write_metas(self, values: Mapping[str, str]) -> None:
        """Upsert ``values`` into ``meta`` (the caller's lock and transaction)."""
        self._conn.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    def _check_expected(self, expect: Mapping[str, str | None]) -> None:
        """Raise ``HistoryConflict`` unless each stored service value is the expected
        one (the caller's lock and transaction, which the raise rolls back)."""
        for key, wanted in expect.items():
            if (stored := self._meta_value(key)) != wanted:
                raise HistoryConflict(
                    f"history file {self.path}: another process wrote it since this one "
                    f"read it ({key} is {stored!r}, this process read {wanted!r}); a second "
                    "forecaster on the same file? Nothing was written; the next cycle reads "
                    "on from the file's state"
                )

    @_recovering
    def get_meta(self, key: str) -> str | None:
        """A value stored with ``set_meta``, or None."""
        with self._lock, self._reading():
            return self._meta_value(key)

    def _meta_value(self, key: str) -> str | None:
        """``key``'s stored value (the caller's lock; text another tool wrote that is not
        UTF-8 reads as what can be read, never a failed start), or None."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else readable(str(row[0]))

    @property
    def skipped_rows(self) -> int:
        """Rows left out as damaged (kept in the file): the last read of running runs,
        of finished ones, and of completed runs' starts, plus the last ``record``'s
        write, the rows the forecaster does not use now (published as
        ``gpu_eta_forecaster_history_rows_skipped``). A row is counted once per kind
        of use that left it out: a running run whose stored step is text is left out
        of the read and of the write, and counts twice."""
        return sum(self._skipped_by.values())

    # -- reads ----------------------------------------------------------------

    @_recovering
    def running(self) -> list[StoredRun]:
        """Every run still marked running, with its stored epoch ends.

        The rows are read every time (their utilisation sums change every cycle); the
        epoch ends and the epoch list built from them are kept in memory and read from
        the file only for runs not held yet (``_running_ends``).
        """
        with self._lock, self._reading():
            rows = self._conn.execute(
                f"SELECT {RUNNING_COLUMNS} FROM runs WHERE state = 'running' "
                "ORDER BY namespace, pod, container, run_id"
            ).fetchall()
            held = self._held_ends(rows)
            out: list[StoredRun] = []
            bad: list[str] = []
            for row in rows:
                stored = held[(row[2], row[3], row[4], row[1])]
                try:
                    out.append(running_from_row(row, stored))
                except (HistoryError, RunError, TypeError, ValueError) as err:
                    bad.append(str(err))
            self._skipped("running", bad)
            return out

    def _held_ends(self, rows: list[tuple]) -> dict[RunKey, StoredEnds]:
        """The epoch ends of the running ``rows``, read from the file only where not held.

        Keeps exactly the running runs (a finished or vanished key is dropped).
        """
        keys = {(row[2], row[3], row[4], row[1]): row[0] for row in rows}
        held = self._running_ends or {}
        missing = [row_id for key, row_id in keys.items() if key not in held]
        if self._running_ends is None or len(missing) > len(keys) // 2:
            fresh = self._all_running_ends()
        else:
            fresh = self._running_ends_of(missing)
        by_id = {row_id: key for key, row_id in keys.items()}
        out = {key: held[key] for key in keys if key in held}
        for row_id in missing:
            out[by_id[row_id]] = StoredEnds(dict(fresh.get(row_id, ())))
        self._running_ends = out
        return out

    def _running_ends_of(self, row_ids: list[int]) -> dict[int, list[tuple[float, float]]]:
        ends: dict[int, list[tuple[float, float]]] = {}
        for chunk in range(0, len(row_ids), 500):
            part = row_ids[chunk : chunk + 500]
            marks = ",".join("?" * len(part))
            for row_id, epoch, ts in self._conn.execute(
                f"SELECT run, epoch, timestamp FROM epoch_ends WHERE run IN ({marks})", part
            ):
                ends.setdefault(row_id, []).append((epoch, ts))
        return ends

    @_recovering
    def finished(self, limit: int | None = None, points: int | None = None) -> list[Run]:
        """Finished runs, oldest first (cached in memory after the first call), as the
        models learn from them: a run not reported epoch by epoch thinned to
        ``runs.HISTORY_POINTS`` points (the file keeps all), a run stored in percent of
        its steps as a job of its own (the module doc).

        ``limit``: only the most recent ``limit`` (by finish time). ``points``: of
        those, only the most recent whose progress points (as learnt from) add up to
        at most ``points``. Why: the model learns from recent runs (its regression and
        calibration take the newest few thousand, job groups weigh old runs down),
        while a cluster's history grows without end; one million runs held as ``Run``
        objects are gigabytes. A run's size is its points (~110 bytes each in memory)
        and runs reported epoch by epoch keep them all, so a count of runs alone does
        not bound the memory: 100,000 runs of 300 epochs are ~3.4 GB.

        Runs finishing after the latest time given (``_horizon``) are left out, counted
        in ``future_rows``.
        """
        with self._lock, self._reading():
            if self._finished_cache is None or self._cache_limit != (limit, points):
                # Newest first along the index ``runs_finished`` (history_file): SQLite
                # hands the rows over one at a time and sorts nothing. Without that
                # index it sorted the selected rows, progress blobs and all, in a
                # temporary file about the size of the history (469 MB for 100,000
                # runs) under ``/tmp``, which is the forecaster's 64 MiB ``emptyDir``.
                query = """SELECT run_id, namespace, pod, container, epochs_planned, state,
                       features, epoch_times, finished_timestamp FROM runs
                       WHERE state != 'running' ORDER BY finished_timestamp DESC, id DESC"""
                # ``limit`` counts the runs kept, not the rows read: a damaged row is
                # skipped and the next one read in its place (no SQL LIMIT)
                most = None if limit is None else max(0, int(limit))
                features_cache: dict[str, Mapping[str, Feature]] = {}
                runs: list[Run] = []  # newest first until reversed
                bad: list[str] = []
                held = 0
                # Rows finishing after the horizon are no finish yet (``_horizon``): they
                # come first, newest first, and are counted and passed over, the last
                # one passed the earliest. Text in the column (a hand edit) is no time.
                horizon = self._horizon()
                future: list[tuple] = []
                newest = -math.inf
                rows = self._conn.execute(query)
                try:
                    for row in rows:
                        if most is not None and len(runs) >= most:
                            break
                        if is_number(row[8]) and row[8] > horizon:
                            future.append(row)
                            continue
                        if newest == -math.inf and is_number(row[8]):
                            newest = float(row[8])
                        try:
                            run = finished_from_row(row[:8], features_cache)
                        except (HistoryError, RunError, TypeError, ValueError) as err:
                            bad.append(str(err))
                            continue
                        if points is not None and held + len(run.epoch_times) > points:
                            break
                        held += len(run.epoch_times)
                        runs.append(run)
                finally:
                    rows.close()  # a read the budget stopped ends its statement here
                runs.reverse()
                self._skipped("finished", bad)
                self._count_future(future)
                self._cache_newest = newest
                self._finished_cache = runs
                self._cache_limit = (limit, points)
                self._cache_points = held
            return list(self._finished_cache)

    @_recovering
    def completed_starts(self, keys: Iterable[RunKey]) -> dict[RunKey, float]:
        """The stored start of each of ``keys`` whose latest run (attempt 0) is finished
        completed, or was until retention deleted it (``retired``, while the key holds no
        run since): a present run with that start (``new_attempt`` None) is that run's
        series lingering with its pod, frozen here (``FinishedPresent.completed_present``).
        Why the deleted ones: a process that had not finished the run itself (a restart;
        every ``once`` is one) read it as ending, stored it again and finished it at its
        own time, a month-old run back as the newest.
        Keys whose text SQLite cannot store are left out (never recorded: ``_storable``),
        and so is a run whose stored start is not a number (counted as a damaged row,
        ``_skipped``)."""
        wanted = [
            k for k in dict.fromkeys(keys) if unencodable(zip(_KEY_FIELDS, k, strict=True)) is None
        ]
        out: dict[RunKey, float] = {}
        if not wanted:
            return out
        bad: list[str] = []
        with self._lock, self._reading():
            for key in wanted:
                found = self._conn.execute(_COMPLETED_START, key).fetchone()
                if found is None:
                    continue
                if is_number(found[0]):
                    out[key] = float(found[0])
                else:
                    bad.append(f"stored run {key[3]!r}: start {found[0]!r} is not a number")
            self._skipped("completed", bad, "read of starts")
        return out

    @_recovering
    def count_finished(self) -> int:
        """Number of finished runs stored: counted at the first call, then kept in step
        by this store's writes (``finish``, ``import_finished``, a revival in
        ``record``, ``retain``), so that the cycle's count is no scan. A second process
        writing the same file (refused by ``record``'s check) shows after a restart."""
        with self._lock, self._reading():
            return self._finished_count()

    def _finished_count(self) -> int:
        """``count_finished`` under the caller's lock."""
        if self._n_finished is None:
            self._n_finished = int(
                self._conn.execute("SELECT COUNT(*) FROM runs WHERE state != 'running'").fetchone()[
                    0
                ]
            )
        return self._n_finished

    def _count_finished_by(self, change: int) -> None:
        """A committed write added (or removed, ``change`` < 0) finished runs."""
        if self._n_finished is not None:
            self._n_finished += change

    # -- retention ------------------------------------------------------------------

    def space(self) -> HistorySpace | None:
        """The file's size and free pages and its volume's room (``history_space``);
        None for a store without a file. The free pages are those of the file the
        store writes: none for the in-memory copy of a read-only file."""
        with self._lock:
            return self._space()

    def _space(self) -> HistorySpace | None:
        """``space`` under the caller's lock."""
        free = 0
        if self.persistent:
            try:
                pages = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
                free = int(pages) * int(self._conn.execute("PRAGMA page_size").fetchone()[0])
            except sqlite3.Error:
                free = 0  # a read that fails here fails the cycle's own reads too
        return space_of(self.path, free)

    @_recovering
    def retain(self, now: float) -> int:
        """One pass of ``retention``; the finished runs deleted (0 without retention).

        Deletes, in one transaction, at most ``batch_runs`` of the oldest finished
        runs that finished before ``now`` less ``max_age_seconds`` and are not among
        the most recent ``keep_runs`` finished runs (by finish time, then id: the
        order the model reads them in), nor seeded from a CSV (``runs.seeded``, set by
        ``import_finished``). A run finishing after ``now`` by more than
        ``FUTURE_SECONDS`` is neither deleted nor counted in that floor (``_horizon``):
        the age is measured against ``now``, never against such a run.
        While the room is low (``HistorySpace.low``: the volume's available bytes and
        the file's free pages below ``history_space.low_room_bytes``) the age does not
        protect a run: the oldest beyond the floor go, a batch a pass, until the file
        holds that room free. Why: deleting frees pages SQLite reuses before it grows
        the file, and a volume that fills fails every write, deletes included (their
        rollback journal needs room too), so the file must stop growing while the
        volume still has room. A WARNING line when the room turns low, INFO when it
        is back.

        Runs the model reads are kept when ``keep_runs`` is at least the number it
        reads (the CLI's floor is ``--model.fit-runs``; the floor reaches past the
        damaged rows that read left out, ``_kept_rows``): the finished runs held in
        memory stay as they are and the version does not change. Otherwise the memory
        is dropped and the version bumps, so that the next fit reads what is left.

        The in-memory copy of a read-only file is retained by age and floor alike, not
        by room (its size is memory, not the volume's). Why: a read-only episode may
        last weeks, and the copy grew by every run that finished until the forecaster
        was OOM-killed.
        """
        rule = self.retention
        with self._lock:
            self._told(now)
        if rule is None:
            return 0
        with self._lock:
            low = False  # the in-memory copy's size is not the volume's room
            if self.persistent:
                space = self._space()
                low = space is not None and space.low
                self._note_room(low, space, rule)
            # a run finishing after the horizon is no finish yet: never deleted
            cutoff = min(math.inf if low else now - rule.max_age_seconds, self._horizon())
            with self._reading():
                if self._finished_count() <= self._kept_rows(rule):
                    return 0
            gone = self._delete_fitting(cutoff, rule, now + rule.linger_seconds)
            if not gone:
                return 0
            # committed: the memory follows
            self._retained_after = gone[-1]
            self._count_finished_by(-len(gone))
            if self._retained_runs == 0:
                log.info(
                    "history file %s: deleting finished runs older than %.4g days beyond "
                    "the most recent %d (--history.retention), %d at most a cycle; the "
                    "first pass deleted %d",
                    self.path,
                    rule.max_age_seconds / 86400.0,
                    rule.keep_runs,
                    rule.batch_runs,
                    len(gone),
                )
            self._retained_runs += len(gone)
            limit = self._cache_limit[0]
            if limit is None or rule.keep_runs < limit:  # runs the model read may be gone
                self._finished_cache = None
                self.version += 1
            return len(gone)

    def _delete_fitting(
        self, cutoff: float, rule: Retention, until: float
    ) -> list[tuple[float, int]]:
        """``_delete_old`` in a transaction of its own (the caller's lock), its batch
        halved while the delete does not fit the volume (``VolumeFull``), down to one
        run. Why: a delete's rollback journal holds the first image of every page it
        changes (two index pages a run, ~8 KiB), so on a volume nearly full a smaller
        batch still frees pages where a full one fails. A batch that fits lets the next
        pass double it back."""
        batch = min(self._retain_batch or rule.batch_runs, rule.batch_runs)
        while True:
            try:
                with self._tx():
                    gone = self._delete_old(cutoff, self._kept_rows(rule), batch, until)
            except VolumeFull:
                if batch == 1:
                    raise
                batch //= 2
                continue
            self._retain_batch = min(batch * 2, rule.batch_runs)
            return gone

    def _kept_rows(self, rule: Retention) -> int:
        """The most recent finished rows a pass keeps: ``rule.keep_runs`` (0: no floor),
        and as many more as the last read of finished runs left out as damaged
        (``_skipped``). Why: that read takes the next older run in place of each damaged
        row (``finished``), so a floor of ``keep_runs`` rows deleted runs the model read;
        the rows left out are those among the most recent the read went through."""
        if not rule.keep_runs:
            return 0
        return rule.keep_runs + self._skipped_by.get("finished read", 0)

    def _delete_old(
        self, cutoff: float, keep_rows: int, batch: int, until: float
    ) -> list[tuple[float, int]]:
        """``retain``'s deletes of at most ``batch`` runs, in the caller's transaction:
        the (finish time, id) of the runs deleted, oldest first. Each completed run
        deleted that is its key's latest (attempt 0) leaves its key and start in
        ``retired`` until ``until`` (``completed_starts``).

        The candidates come first, along the index ``runs_retainable`` from the oldest
        (after ``_retained_after``); only when there are some is the floor's boundary
        read, the ``keep_rows``-th most recent finish (``_kept_rows``: a walk of that
        many entries of ``runs_finished``)."""
        where = [
            "finished_timestamp IS NOT NULL",
            "finished_timestamp < :cutoff",
            "state != 'running'",
            "seeded = 0",
        ]
        params: dict[str, object] = {"cutoff": cutoff, "batch": batch}
        if self._retained_after is not None:
            where.append("(finished_timestamp, id) > (:after_ts, :after_id)")
            params["after_ts"], params["after_id"] = self._retained_after
        found = self._conn.execute(
            f"SELECT finished_timestamp, id FROM runs WHERE {' AND '.join(where)} "
            "ORDER BY finished_timestamp, id LIMIT :batch",
            params,
        ).fetchall()
        if found and keep_rows:
            # the floor is of the runs the model reads: none finishing after the horizon
            bound = self._conn.execute(
                "SELECT finished_timestamp, id FROM runs WHERE finished_timestamp IS NOT NULL "
                "AND NOT (typeof(finished_timestamp) IN ('integer', 'real') "
                "AND finished_timestamp > ?) "
                "ORDER BY finished_timestamp DESC, id DESC LIMIT 1 OFFSET ?",
                (self._horizon(), keep_rows - 1),
            ).fetchone()
            found = [] if bound is None else [row for row in found if tuple(row) < tuple(bound)]
        gone = [(float(ts), int(row_id)) for ts, row_id in found]
        self._conn.executemany(
            """INSERT OR REPLACE INTO retired (namespace, pod, container, run_id,
               start_timestamp, until_timestamp)
               SELECT namespace, pod, container, run_id, start_timestamp, ? FROM runs
               WHERE id = ? AND state = 'completed' AND attempt = 0""",
            [(until, row_id) for _, row_id in gone],
        )
        self._conn.executemany("DELETE FROM runs WHERE id = ?", [(row_id,) for _, row_id in gone])
        return gone

    def _note_room(self, low: bool, space: HistorySpace | None, rule: Retention) -> None:
        """One WARNING line when the room turns low (naming the damaged copies set
        aside beside the file, ``aside_copies``: room no pass can free), one INFO line
        when the volume has that room again by itself (not counting the file's free
        pages: while they are what keeps it going, the volume is still tight)."""
        if space is None:
            return
        mib = 1024 * 1024
        if low and not self._room_low:
            self._room_low = True
            n_aside, aside_bytes = aside_copies(self.path)
            aside = (
                f"; {n_aside} damaged cop{'y' if n_aside == 1 else 'ies'} set aside beside "
                f"it hold {aside_bytes / mib:.1f} MiB (delete them once inspected)"
                if n_aside
                else ""
            )
            log.warning(
                "history file %s: little room left on its volume (%.1f MiB available, "
                "%.1f MiB free in the file, of %.1f MiB): deleting the oldest finished runs "
                "beyond the most recent %d whatever their age (--history.retention), so "
                "that the file stops growing; grow the volume or shorten the retention%s",
                self.path,
                (space.available_bytes or 0) / mib,
                space.free_bytes / mib,
                (space.capacity_bytes or 0) / mib,
                rule.keep_runs,
                aside,
            )
        elif (
            self._room_low
            and space.available_bytes is not None
            and space.available_bytes >= low_room_bytes(space.capacity_bytes)
        ):
            self._room_low = False
            log.info(
                "history file %s: room on its volume is back (%.1f MiB available)",
                self.path,
                space.available_bytes / mib,
            )

    def _retain_before_write(self, now: float) -> None:
        """``retain`` at the start of a cycle's write; its failure fails nothing (the
        write goes on, and fails by itself on a full volume), one WARNING line when
        the reason changes. Why here: the cycle's first write is ``record``, and the
        room a pass frees is then there for it."""
        try:
            self.retain(now)
        except HistoryError as err:
            if str(err) != self._retain_error:
                log.warning("history retention failed, retried at the next write: %s", err)
            self._retain_error = str(err)
        else:
            self._retain_error = ""

    # -- internals --------------------------------------------------------------

    def _skipped(self, what: str, bad: list[str], use: str = "read") -> None:
        """Count damaged rows left out of a ``use`` ("read", "write", "read of starts")
        of ``what`` runs ("running", "finished", "stored", "completed"; text that is not
        UTF-8 included); one WARNING line, naming the count, when that count changes
        (not every cycle for the same rows).

        The rows stay in the file untouched (a human may repair them); one bad row
        must not stop every fit, as it did when it reached the model, nor every read,
        as text that is not UTF-8 did (``common.text.lenient_utf8``).
        """
        kind = f"{what} {use}"
        if bad and len(bad) != self._skipped_by.get(kind, 0):
            log.warning(
                "history file %s: %d %s run row(s) left out of the %s (damaged, or text "
                "that is not valid UTF-8), kept in the file as they are (first: %s)",
                self.path,
                len(bad),
                what,
                use,
                bad[0][:200],
            )
        self._skipped_by[kind] = len(bad)

    def _finished_changed(self, added: list[Run], finished_at: Sequence[float]) -> None:
        """Runs ``added`` to the finished history, finishing at ``finished_at``:
        appended to the cache where a read of the file would put them last, else the
        cache is read again. Why: a read sorts by finish time, and the model takes the
        runs after the last one it learnt as the new ones (``refit.appended_since``):
        two orders would hand it a run twice."""
        self._count_finished_by(len(added))
        if min(finished_at) < self._cache_newest:
            self._finished_cache = None
        cache = self._finished_cache
        if cache is not None:  # as a read of the file would give them
            self._cache_newest = max(self._cache_newest, *finished_at)
            learn = [to_learn_from(run) for run in added]
            cache.extend(learn)
            self._cache_points += sum(len(run.epoch_times) for run in learn)
            limit, points = self._cache_limit
            drop = 0 if limit is None else max(0, len(cache) - limit)
            held = self._cache_points - sum(len(run.epoch_times) for run in cache[:drop])
            while points is not None and held > points and drop < len(cache):
                held -= len(cache[drop].epoch_times)
                drop += 1
            del cache[:drop]
            self._cache_points = held
        self.version += 1

    def _horizon(self) -> float:
        """The latest finish time a read takes as a finish: the time last given plus
        ``FUTURE_SECONDS`` (infinite before any). Why: a run finishing after the time
        the cycle runs at was stamped by a clock that was ahead (a Prometheus clock
        adopted, ``prom_clock``, then corrected; a clock that stepped back since). Read,
        it is the newest run until that time comes, the floor of retention counts it,
        and the model learns it as the latest; left out, it is kept in the file and
        read as any once that time comes (docs/forecaster.md, "Finish times")."""
        return math.inf if self._now is None else self._now + FUTURE_SECONDS

    def _told(self, now: float) -> None:
        """The cycle's (or the import's) time, under the caller's lock. The finished
        runs cached are read again (the version bumps: the model refits) when the
        horizon moved past a run they hold (a clock that stepped back) or reached a run
        the read left out (its time came)."""
        if not math.isfinite(now):
            return
        self._now = now
        horizon = self._horizon()
        if self._finished_cache is not None and (
            self._cache_newest > horizon or self._future_from <= horizon
        ):
            self._finished_cache = None
            self.version += 1

    def _count_future(self, future: Sequence[tuple]) -> None:
        """The finished rows a read passed over as finishing after the horizon
        (``future``, newest first) counted in ``future_rows``, one WARNING line naming
        the earliest whenever that count changes; its time in ``_future_from``."""
        first = future[-1] if future else None
        if first is not None and len(future) != self.future_rows:
            log.warning(
                "history file %s: %d finished run(s) finish after this cycle's time by more "
                "than %g s (a clock that was ahead), left out of the model's reads and of "
                "retention until that time comes, kept in the file (first: "
                "namespace/pod/container/run_id %s at %s)",
                self.path,
                len(future),
                FUTURE_SECONDS,
                ascii("/".join(str(part) for part in first[1:4] + first[:1]))[:300],
                first[8],
            )
        self.future_rows = len(future)
        self._future_from = float(first[8]) if first is not None else math.inf

    def _finished_revived(self, keys: list[RunKey]) -> None:
        """Runs that left the finished history (``_revive``): the cache is read again,
        and the version bumps so that the model is refitted without them."""
        self._count_finished_by(-len(keys))
        self._finished_cache = None
        self.version += 1
        if self._running_ends is not None:
            for key in keys:
                self._running_ends.pop(key, None)
        # said by the caller, which knows whether they keep coming back (Cycle._run)

    def _all_running_ends(self) -> dict[int, list[tuple[float, float]]]:
        ends: dict[int, list[tuple[float, float]]] = {}
        for row_id, epoch, ts in self._conn.execute(
            """SELECT e.run, e.epoch, e.timestamp FROM epoch_ends e
               JOIN runs r ON r.id = e.run WHERE r.state = 'running'
               ORDER BY e.run, e.epoch"""
        ):
            ends.setdefault(row_id, []).append((epoch, ts))
        return ends

    def _load_running_key(self, key: RunKey) -> tuple[int, StoredRun] | None:
        row = self._conn.execute(
            f"""SELECT {RUNNING_COLUMNS} FROM runs WHERE namespace = ? AND pod = ?
               AND container = ? AND run_id = ? AND state = 'running'""",
            key,
        ).fetchone()
        if row is None:
            return None
        ends = self._conn.execute(
            "SELECT epoch, timestamp FROM epoch_ends WHERE run = ?", (row[0],)
        ).fetchall()
        return row[0], running_from_row(row, StoredEnds(dict(ends)))

    def _tx(self) -> Transaction:
        return Transaction(self._conn, self.path)

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """SQLite errors of a read as ``HistoryError`` with the reason (a lock held
        past ``BUSY_TIMEOUT_SECONDS``, an I/O error): a clear message for the cycle's
        log and the probes, not an ``OperationalError`` from deep inside."""
        try:
            yield
        except sqlite3.Error as err:
            failed = DamagedHistory if corrupt(err) else HistoryError  # ``_recovering``
            raise failed(f"history file {self.path}: read failed ({why(err)})") from None

    def _recover(self, err: DamagedHistory, rebuilt: bool) -> bool:
        """After SQLite called the file damaged (``err``, see ``_recovering``): its
        indexes rebuilt (REINDEX), unless that was done for this call already
        (``rebuilt``) or fails; else the file set aside and a new history opened in its
        place, with one ERROR line, as ``open`` does for a file damaged at start (in
        memory where the file cannot be moved: ``_new_history``). Whether the store is
        on a new history now."""
        with self._lock:
            if not rebuilt:
                log.warning("%s; rebuilding its indexes (REINDEX) and trying again", err)
                try:
                    with self._tx():
                        self._conn.execute("REINDEX")
                    return False
                except HistoryError as failed:
                    err = DamagedHistory(f"{err}; REINDEX failed too ({failed})")
            else:
                err = DamagedHistory(f"{err}, again after REINDEX")
            self._start_afresh(err)
            return True

    def _start_afresh(self, err: DamagedHistory) -> None:
        """A new history in place of the damaged one (``_new_history``: the file set
        aside, or a history in memory where it cannot be), under the caller's lock,
        every cache and count of the old one dropped and the version bumped (the model
        is refitted).

        The old connection is closed only once the new history is open: should that
        raise, the store is still on the old one (the next call tries again) instead of
        on a closed connection that fails every later call."""
        old = self._conn
        fresh = type(self)._new_history(self.path, err)
        old.close()
        path, retention, version, lock = self.path, self.retention, self.version, self._lock
        vars(self).update(vars(fresh))
        self.path, self.retention, self.version, self._lock = path, retention, version + 1, lock
