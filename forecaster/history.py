"""Durable history of training runs in one SQLite file (a PVC in the cluster).

Why SQLite: the models must learn from more finished runs than Prometheus keeps
(retention is days; a cluster's history is months), the forecaster is a single
writer, and one file is easy to back up. Two kinds of rows:

* running runs, with every epoch end seen so far (``epoch_ends``), so a restart of
  the forecaster or a missed scrape does not lose them;
* finished runs, ``state`` ``completed`` (reached ``epochs_planned``) or
  ``incomplete`` (vanished before: cancelled or crashed, never a "short job"),
  with their epoch list frozen as packed float64 pairs (fast to load 50,000 of them).

A run is identified by ``(namespace, pod, container, run_id)`` (``RunKey``), never by
``run_id`` alone: run ids can be hand-written (``my-run-1``) and reused by two pods or
two containers of one pod, and those are two runs (issue 3: the forecaster never
splices two runs into one). Runs seeded from a CSV have no pod; see
``import_finished`` and ``record`` for how they meet live runs with the same id.

Every write is one transaction. The file is tagged with ``PRAGMA application_id``
and a schema version (``PRAGMA user_version``): a corrupt file, another program's
database or a newer schema gives ``HistoryError`` and is never overwritten. An older
schema is migrated in place in one transaction that keeps every row (schema 1 keyed
runs by ``run_id`` alone; schema 2 by the run key; schema 2 stored a run that reports
only steps in percent of them, schema 3 in its steps).

Runs stored in percent of their steps (feature ``progress_unit="percent"``, set by the
migration to schema 3) are kept and used, but as a job of their own: to the models a
finished one's ``job_name`` reads ``<name> (percent)``, since its time per unit is not
comparable with the same job's runs counted in steps. A running one is converted to
steps, losslessly, at its first update (which carries the steps planned).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import sqlite3
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.runs import (
    Feature,
    Run,
    RunError,
    RunKey,
    RunUpdate,
    run_key,
    thinned,
    validate_run,
)

log = logging.getLogger(__name__)

APPLICATION_ID = 0x67457461  # "gEta"
SCHEMA_VERSION = 3
_MAX_FEATURE_TEXT = 256
# Schema 2 followed a run that reports only steps in percent of them (plan 100); those
# rows are marked with this unit by the migration to schema 3 (see the module doc).
PERCENT_UNIT = "percent"
_JOB_SUFFIX = " (percent)"

# Schema 2: ``runs.id`` is a surrogate key (epoch_ends refer to it), the run's identity
# is UNIQUE (namespace, pod, container, run_id); ``runs_run_id`` serves the seed
# de-duplication by run_id.
_RUNS_TABLE = """
CREATE TABLE {name} (
    id INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL,
    namespace TEXT NOT NULL DEFAULT '',
    pod TEXT NOT NULL DEFAULT '',
    container TEXT NOT NULL DEFAULT '',
    node TEXT NOT NULL DEFAULT '',
    epochs_planned REAL NOT NULL,
    start_timestamp REAL NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'completed', 'incomplete')),
    features TEXT NOT NULL DEFAULT '{{}}',
    util_sum REAL NOT NULL DEFAULT 0,
    util_weight REAL NOT NULL DEFAULT 0,
    memory_sum REAL NOT NULL DEFAULT 0,
    memory_weight REAL NOT NULL DEFAULT 0,
    last_seen REAL NOT NULL,
    finished_timestamp REAL,
    epoch_times BLOB,
    UNIQUE (namespace, pod, container, run_id)
);
"""
_EPOCH_ENDS_TABLE = """
CREATE TABLE {name} (
    run INTEGER NOT NULL,
    epoch REAL NOT NULL,
    timestamp REAL NOT NULL,
    PRIMARY KEY (run, epoch)
) WITHOUT ROWID;
"""
_INDEXES = """
CREATE INDEX runs_state ON runs(state);
CREATE INDEX runs_run_id ON runs(run_id);
"""
_SCHEMA = (
    _RUNS_TABLE.format(name="runs")
    + _EPOCH_ENDS_TABLE.format(name="epoch_ends")
    + """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
    + _INDEXES
)
_COLUMNS = (
    "run_id, namespace, pod, container, node, epochs_planned, start_timestamp, state, "
    "features, util_sum, util_weight, memory_sum, memory_weight, last_seen, "
    "finished_timestamp, epoch_times"
)
# Schema 1 → 2: copy every run (its rowid becomes ``id``) and re-point epoch_ends,
# whose run_id was unique in schema 1. Runs inside the caller's transaction.
_MIGRATE_1_TO_2 = (
    _RUNS_TABLE.format(name="runs_v2")
    + _EPOCH_ENDS_TABLE.format(name="epoch_ends_v2")
    + f"""
INSERT INTO runs_v2 (id, {_COLUMNS}) SELECT rowid, {_COLUMNS} FROM runs;
INSERT INTO epoch_ends_v2 (run, epoch, timestamp)
    SELECT r.id, e.epoch, e.timestamp FROM epoch_ends e JOIN runs_v2 r ON r.run_id = e.run_id;
DROP TABLE epoch_ends;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
ALTER TABLE epoch_ends_v2 RENAME TO epoch_ends;
"""
    + _INDEXES
)
# A stored run with no pod and no container (seeded from a CSV) is the same run as
# any run with its run_id in a compatible namespace (equal, or either one unknown).
_SAME_SEEDED = (
    """run_id = :run_id AND (namespace = :namespace OR namespace = '' OR :namespace = '')"""
)


class HistoryError(ForecasterError):
    """The history file cannot be used (corrupt, foreign, newer schema, unwritable)."""


class DamagedHistory(HistoryError):
    """The file is ours (or no database at all) but damaged: set aside, start afresh."""


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as stored: the Run record plus where it ran."""

    run: Run
    node: str
    last_seen: float


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
        self.skipped_rows = 0  # damaged rows left out of the last read (kept in the file)
        # Running runs' epoch ends as stored, by run key (None: not read yet). Why: a
        # cycle reads every running run, and re-reading their epoch ends from the file
        # each time (a million rows for 10,000 runs of a hundred epochs) was most of
        # the cycle's history time. Only ``record`` and ``finish`` change them; both
        # keep this in step after their transaction commits.
        self._running_ends: dict[RunKey, _StoredEnds] | None = None
        # Running runs still stored in percent of their steps (only after a migration
        # from schema 2; empty ever after): converted at their first update.
        self._percent_running: set[RunKey] = {
            (ns, pod, container, rid)
            for rid, ns, pod, container, feats in conn.execute(
                "SELECT run_id, namespace, pod, container, features FROM runs "
                "WHERE state = 'running' AND features LIKE ?",
                (f'%"progress_unit": "{PERCENT_UNIT}"%',),  # _dump_features' own text
            )
            if _load_features(feats).get("progress_unit") == PERCENT_UNIT
        }

    @classmethod
    def open(cls, path: str | Path) -> HistoryStore:
        """Open or create the store; refuse anything that is not ours.

        A damaged file (not SQLite, failing ``quick_check``, tables missing) is moved
        aside to ``<name>.corrupt-<unix time>`` with one ERROR line and a new history
        starts: a forecaster that refused to start would restart for ever. Another
        program's database and a newer schema are refused (``HistoryError``), never
        touched. A file that cannot be written (read-only volume) is used through an
        in-memory copy, with one ERROR line: forecasts go on, new history is not kept.
        """
        spath = str(path)
        if spath != ":memory:":
            p = Path(spath)
            if p.exists() and p.is_dir():
                raise HistoryError(f"history file {spath} is a directory")
            if not p.parent.exists():
                raise HistoryError(f"history directory {p.parent} does not exist")
        try:
            return cls._open(spath)
        except DamagedHistory as err:
            aside = _set_aside(spath)
            log.error(
                "%s; moved to %s, starting a new history (re-seeded if --history.seed-csv)",
                err,
                aside,
            )
            return cls._open(spath)

    @classmethod
    def _open(cls, spath: str) -> HistoryStore:
        try:
            conn = sqlite3.connect(spath, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as err:
            raise HistoryError(f"cannot open history file {spath}: {err}") from None
        try:
            _prepare(conn, spath)
            if spath != ":memory:":
                _probe_write(conn)
        except HistoryError:
            conn.close()
            raise
        except sqlite3.OperationalError as err:
            if _read_only(err):
                memory = _memory_copy(conn)
                conn.close()
                # the file passed _prepare's checks; an older schema is migrated in the copy
                version = memory.execute("PRAGMA user_version").fetchone()[0]
                if version < SCHEMA_VERSION:
                    try:
                        _migrate(memory, spath, version)
                    except HistoryError:
                        memory.close()
                        raise
                log.error(
                    "history file %s is not writable (%s): forecasting from an in-memory copy; "
                    "history learned from now on is lost at restart",
                    spath,
                    err,
                )
                store = cls(memory, spath)
                store.persistent = False
                return store
            conn.close()
            raise DamagedHistory(f"history file {spath} is not usable ({err})") from None
        except sqlite3.DatabaseError as err:
            conn.close()
            raise DamagedHistory(
                f"history file {spath} is not a usable SQLite database ({err})"
            ) from None
        return cls(conn, spath)

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self._conn.close()

    # -- writes ---------------------------------------------------------------

    def record(self, updates: Iterable[RunUpdate]) -> None:
        """Upsert running runs and add their epoch ends, all in one transaction.

        Runs are matched by their full key. A finished run stays frozen. A live run
        whose run_id belongs to a finished run seeded without a pod (a CSV import,
        namespace equal or unknown) is that run already in the history and is not
        recorded again (the demo backfills the same runs into Prometheus and a CSV).
        """
        rows = []
        ends = []
        known = self._running_ends or {}
        updates = list(updates)
        to_steps: dict[RunKey, float] = {}
        if self._percent_running:  # only after a migration from schema 2
            to_steps = {
                run_key(up): float(up.epochs_planned)
                for up in updates
                if run_key(up) in self._percent_running
                and up.features.get("progress_unit") == "steps"
            }
        for up in updates:
            rows.append(
                {
                    "run_id": up.run_id,
                    "namespace": up.namespace,
                    "pod": up.pod,
                    "container": up.container,
                    "node": up.node,
                    "epochs_planned": float(up.epochs_planned),
                    "start_timestamp": float(up.start_timestamp),
                    "features": _dump_features(up.features),
                    "util_sum": _finite_or_zero(up.util_mean) * up.weight_seconds,
                    "util_weight": up.weight_seconds if _finite(up.util_mean) else 0.0,
                    "memory_sum": _finite_or_zero(up.memory_mean) * up.weight_seconds,
                    "memory_weight": up.weight_seconds if _finite(up.memory_mean) else 0.0,
                    "last_seen": up.seen_timestamp,
                }
            )
            key = run_key(up)
            stored = None if key in to_steps else known.get(key)
            # an epoch already stored keeps its first time (INSERT OR IGNORE): skip it
            ends.extend(
                (float(e), float(t), *key)
                for e, t in up.epoch_ends
                if stored is None or float(e) not in stored.ends
            )
        with self._lock:
            with self._tx():
                for key, steps in to_steps.items():
                    self._percent_to_steps(key, steps)
                self._conn.executemany(
                    f"""
                    INSERT INTO runs (run_id, namespace, pod, container, node, epochs_planned,
                        start_timestamp, state, features, util_sum, util_weight, memory_sum,
                        memory_weight, last_seen)
                    SELECT :run_id, :namespace, :pod, :container, :node, :epochs_planned,
                        :start_timestamp, 'running', :features, :util_sum, :util_weight,
                        :memory_sum, :memory_weight, :last_seen
                    WHERE NOT EXISTS (SELECT 1 FROM runs WHERE {_SAME_SEEDED}
                        AND pod = '' AND container = '' AND state != 'running')
                    ON CONFLICT(namespace, pod, container, run_id) DO UPDATE SET
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
            self._percent_running -= set(to_steps)
            if self._running_ends is not None:  # committed: the same ends in memory
                for key in to_steps:
                    self._running_ends.pop(key, None)  # re-read in steps
                for epoch, ts, *key in ends:
                    stored = self._running_ends.get(tuple(key))  # type: ignore[arg-type]
                    if stored is not None and epoch not in stored.ends:
                        stored.add(epoch, ts)

    def _percent_to_steps(self, key: RunKey, steps_planned: float) -> None:
        """Rescale a running run's stored ends from percent of its steps to steps (the
        caller's transaction). Negated first: the (run, epoch) key must never collide
        while the rows are rewritten one by one."""
        found = self._conn.execute(
            "SELECT id, epochs_planned FROM runs WHERE namespace = ? AND pod = ? "
            "AND container = ? AND run_id = ? AND state = 'running'",
            key,
        ).fetchone()
        if found is None or not _finite(found[1]) or found[1] <= 0:
            return
        scale = steps_planned / float(found[1])
        self._conn.execute(
            "UPDATE epoch_ends SET epoch = -epoch * ? WHERE run = ?", (scale, found[0])
        )
        self._conn.execute("UPDATE epoch_ends SET epoch = -epoch WHERE run = ?", (found[0],))

    def finish(self, keys: Iterable[RunKey], finished_timestamp: float) -> list[Run]:
        """Freeze running runs as finished (completed or not, by their last epoch).

        ``keys`` are ``run_key`` tuples; unknown or already finished keys are skipped.
        """
        wanted = list(dict.fromkeys(keys))
        for key in wanted:
            if not (isinstance(key, tuple) and len(key) == 4):
                raise TypeError(f"finish() takes (namespace, pod, container, run_id), got {key!r}")
        if not wanted:
            return []
        done: list[Run] = []
        with self._lock, self._tx():
            for key in wanted:
                found = self._load_running_key(key)
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
                        _dump_features(final.features),
                        row_id,
                    ),
                )
                self._conn.execute("DELETE FROM epoch_ends WHERE run = ?", (row_id,))
                done.append(final)
                self._percent_running.discard(key)
            if done:
                self._finished_changed(done)
        if self._running_ends is not None:
            with self._lock:
                for run in done:
                    self._running_ends.pop(run_key(run), None)
        return done

    def import_finished(self, runs: Sequence[Run]) -> int:
        """Add finished runs (a seed CSV) that are not stored yet; idempotent.

        A run is already stored when a stored run has its key, or when either of
        the two has no pod and no container (a CSV run) and they share the run_id in
        a compatible namespace (equal, or either one unknown): CSV runs keep their
        run_id uniqueness, and a CSV of runs the forecaster already saw live adds
        nothing.
        """
        added: list[Run] = []
        with self._lock, self._tx():
            for run in runs:
                completed = (
                    run.completed
                    if run.completed is not None
                    else run.epochs_done >= run.epochs_planned
                )
                cur = self._conn.execute(
                    f"""INSERT OR IGNORE INTO runs (run_id, namespace, pod, container,
                       epochs_planned, start_timestamp, state, features, last_seen,
                       finished_timestamp, epoch_times)
                       SELECT :run_id, :namespace, :pod, :container, :epochs_planned,
                       :start, :state, :features, :last, :last, :times
                       WHERE NOT EXISTS (SELECT 1 FROM runs WHERE {_SAME_SEEDED}
                           AND ((pod = '' AND container = '')
                                OR (:pod = '' AND :container = '')))""",
                    {
                        "run_id": run.run_id,
                        "namespace": run.namespace,
                        "pod": run.pod,
                        "container": run.container,
                        "epochs_planned": float(run.epochs_planned),
                        "start": run.start_timestamp,
                        "state": "completed" if completed else "incomplete",
                        "features": _dump_features(run.features),
                        "last": run.last_timestamp,
                        "times": pack_epoch_times(run.epoch_times),
                    },
                )
                if cur.rowcount:
                    added.append(
                        dataclasses.replace(
                            run, epoch_times=tuple(run.epoch_times), completed=completed
                        )
                    )
            if added:
                self._finished_changed(added)
        return len(added)

    def set_meta(self, key: str, value: str) -> None:
        """Store a small service value (e.g. the last query time), atomically."""
        self.set_metas({key: value})

    def set_metas(self, values: Mapping[str, str]) -> None:
        """Store several service values in one transaction (one commit, one sync: a
        cycle's state is written together, and either all of it or none)."""
        with self._lock, self._tx():
            self._conn.executemany(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                list(values.items()),
            )

    def get_meta(self, key: str) -> str | None:
        """A value stored with ``set_meta``, or None."""
        with self._lock:
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    # -- reads ----------------------------------------------------------------

    def running(self) -> list[StoredRun]:
        """Every run still marked running, with its stored epoch ends.

        The rows are read every time (their utilisation sums change every cycle); the
        epoch ends and the epoch list built from them are kept in memory and read from
        the file only for runs not held yet (``_running_ends``).
        """
        with self._lock:
            rows = self._conn.execute(
                f"SELECT {_RUNNING_COLUMNS} FROM runs WHERE state = 'running' "
                "ORDER BY namespace, pod, container, run_id"
            ).fetchall()
            held = self._held_ends(rows)
            out: list[StoredRun] = []
            bad: list[str] = []
            for row in rows:
                stored = held[(row[2], row[3], row[4], row[1])]
                try:
                    out.append(_running_from_row(row, stored))
                except (HistoryError, RunError, TypeError, ValueError) as err:
                    bad.append(str(err))
            self._skipped("running", bad)
            return out

    def _held_ends(self, rows: list[tuple]) -> dict[RunKey, _StoredEnds]:
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
            out[by_id[row_id]] = _StoredEnds(dict(fresh.get(row_id, ())))
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
        """
        with self._lock:
            if self._finished_cache is None or self._cache_limit != (limit, points):
                query = """SELECT run_id, namespace, pod, container, epochs_planned, state,
                       features, epoch_times FROM runs WHERE state != 'running'
                       ORDER BY finished_timestamp DESC, id DESC"""
                params: tuple = ()
                if limit is not None:
                    query += " LIMIT ?"
                    params = (max(0, int(limit)),)
                features_cache: dict[str, Mapping[str, Feature]] = {}
                runs: list[Run] = []  # newest first until reversed
                bad: list[str] = []
                held = 0
                for row in self._conn.execute(query, params):
                    try:
                        run = _finished_from_row(row, features_cache)
                    except (HistoryError, RunError, TypeError, ValueError) as err:
                        bad.append(str(err))
                        continue
                    if points is not None and held + len(run.epoch_times) > points:
                        break
                    held += len(run.epoch_times)
                    runs.append(run)
                runs.reverse()
                self._skipped("finished", bad)
                self._finished_cache = runs
                self._cache_limit = (limit, points)
                self._cache_points = held
            return list(self._finished_cache)

    def count_finished(self) -> int:
        """Number of finished runs stored."""
        with self._lock:
            return int(
                self._conn.execute("SELECT COUNT(*) FROM runs WHERE state != 'running'").fetchone()[
                    0
                ]
            )

    # -- internals --------------------------------------------------------------

    def _skipped(self, what: str, bad: list[str]) -> None:
        """Count damaged rows left out of a read; one ERROR line when the count changes.

        The rows stay in the file untouched (a human may repair them); one bad row
        must not stop every fit, as it did when it reached the model.
        """
        if bad and len(bad) != self.skipped_rows:
            log.error(
                "history file %s: %d damaged %s run row(s) skipped (first: %s)",
                self.path,
                len(bad),
                what,
                bad[0][:200],
            )
        self.skipped_rows = len(bad)

    def _finished_changed(self, added: list[Run]) -> None:
        cache = self._finished_cache
        if cache is not None:  # as a read of the file would give them
            learn = [_to_learn_from(run) for run in added]
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
            f"""SELECT {_RUNNING_COLUMNS} FROM runs WHERE namespace = ? AND pod = ?
               AND container = ? AND run_id = ? AND state = 'running'""",
            key,
        ).fetchone()
        if row is None:
            return None
        ends = self._conn.execute(
            "SELECT epoch, timestamp FROM epoch_ends WHERE run = ?", (row[0],)
        ).fetchall()
        return row[0], _running_from_row(row, _StoredEnds(dict(ends)))

    def _tx(self) -> _Transaction:
        return _Transaction(self._conn, self.path)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error (atomic writes)."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self._path = path

    def __enter__(self) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise HistoryError(f"history file {self._path}: cannot write: {err}") from None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return False
            except sqlite3.Error as err:
                self._conn.execute("ROLLBACK")
                raise HistoryError(f"history file {self._path}: commit failed: {err}") from None
        self._conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.Error):
            raise HistoryError(f"history file {self._path}: write failed: {exc}") from None
        return False


def monotone_epoch_times(
    start: float, ends: Iterable[tuple[float, float]], planned: float
) -> tuple[tuple[float, float], ...]:
    """``(0, start)`` then the epoch ends that keep epochs and times strictly consistent.

    Pure. Drops non-finite values, epochs beyond ``planned``, ends before the start
    and any end whose time goes backwards (an exporter restart can replay an older
    snapshot): what remains always passes ``validate_run``.
    """
    out = [(0.0, float(start))]
    for epoch, ts in sorted(ends):
        if not (_finite(epoch) and _finite(ts)):
            continue
        if epoch <= out[-1][0] or epoch > planned or ts < out[-1][1]:
            continue
        out.append((float(epoch), float(ts)))
    return tuple(out)


def _prepare(conn: sqlite3.Connection, path: str) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    if app_id == 0 and not tables and version == 0:
        # One script, one transaction: a crash leaves either nothing or the whole schema.
        conn.executescript(
            "BEGIN IMMEDIATE;"
            + _SCHEMA
            + f"PRAGMA application_id = {APPLICATION_ID};"
            + f"PRAGMA user_version = {SCHEMA_VERSION};"
            + "COMMIT;"
        )
        return
    if app_id != APPLICATION_ID:
        raise HistoryError(
            f"history file {path} belongs to another program (SQLite application_id "
            f"{app_id}, tables {', '.join(tables[:5]) or 'none'}); refusing to touch it"
        )
    if version > SCHEMA_VERSION:
        raise HistoryError(
            f"history file {path} has schema version {version}, newer than this "
            f"forecaster's {SCHEMA_VERSION}; upgrade gpu-eta"
        )
    if version < 1 or not {"runs", "epoch_ends", "meta"} <= set(tables):
        raise DamagedHistory(f"history file {path} is damaged (schema {version}, tables {tables})")
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise DamagedHistory(f"history file {path} fails SQLite's quick_check ({str(check)[:120]})")
    if version < SCHEMA_VERSION:
        _migrate(conn, path, version)


def _migrate(conn: sqlite3.Connection, path: str, version: int) -> None:
    """Upgrade an older schema in place, in one transaction: all rows or no change."""
    steps: dict[int, Callable[[sqlite3.Connection], None]] = {
        1: _run_script(_MIGRATE_1_TO_2),
        2: _mark_percent_runs,
    }
    try:
        conn.execute("BEGIN IMMEDIATE")
        for step in range(version, SCHEMA_VERSION):
            steps[step](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except sqlite3.Error as err:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if isinstance(err, sqlite3.OperationalError) and _read_only(err):
            raise  # the caller works on a memory copy, migrated there
        raise HistoryError(
            f"history file {path}: migrating schema {version} to {SCHEMA_VERSION} failed "
            f"({err}); the file was not modified"
        ) from None


def _read_only(err: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused a write because the file or its directory is read-only."""
    text = str(err)
    return "readonly" in text or "read-only" in text or "unable to open" in text


def _run_script(script: str) -> Callable[[sqlite3.Connection], None]:
    def run(conn: sqlite3.Connection) -> None:
        for statement in _statements(script):
            conn.execute(statement)

    return run


def _mark_percent_runs(conn: sqlite3.Connection) -> None:
    """Schema 2 → 3: every run schema 2 followed in percent of its steps (feature
    ``progress_unit="steps"``, plan 100) is marked ``progress_unit="percent"``; its
    rows are otherwise untouched (the module doc says how they are used). A run with
    that feature and another plan came from a CSV counting real steps and is left as
    it is."""
    rows = conn.execute(
        "SELECT id, features FROM runs WHERE features LIKE '%progress_unit%' "
        "AND epochs_planned = 100"
    ).fetchall()
    for row_id, text in rows:
        features = dict(_load_features(text))
        if features.get("progress_unit") == "steps":
            features["progress_unit"] = PERCENT_UNIT
            conn.execute(
                "UPDATE runs SET features = ? WHERE id = ?", (_dump_features(features), row_id)
            )


def _statements(script: str) -> list[str]:
    """A schema script split into statements (ours contain no ';' inside literals)."""
    return [part.strip() for part in script.split(";") if part.strip()]


def pack_epoch_times(times: Sequence[tuple[float, float]]) -> bytes:
    """Epoch list → little-endian float64 pairs (loading 50,000 runs stays well under a second)."""
    flat = array("d", (float(v) for pair in times for v in pair))
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def unpack_epoch_times(blob: bytes) -> tuple[tuple[float, float], ...]:
    """Inverse of ``pack_epoch_times``; raises ValueError on a damaged blob."""
    if not isinstance(blob, bytes) or len(blob) % 16:
        raise ValueError("epoch list is not float64 pairs")
    flat = array("d")
    flat.frombytes(blob)
    if sys.byteorder != "little":
        flat.byteswap()
    return tuple(zip(flat[0::2], flat[1::2], strict=True))


_RUNNING_COLUMNS = (
    "id, run_id, namespace, pod, container, node, epochs_planned, start_timestamp, "
    "features, util_sum, util_weight, memory_sum, memory_weight, last_seen"
)


@dataclass(slots=True)
class _StoredEnds:
    """A running run's stored epoch ends (epoch → time) and the epoch list last built
    from them with its (start, planned), kept until either changes."""

    ends: dict[float, float]
    times: tuple[tuple[float, float], ...] | None = None
    basis: tuple[object, object] = (None, None)

    def add(self, epoch: float, ts: float) -> None:
        """A new stored end; the epoch list grows by it when it follows the list's last
        pair (what ``monotone_epoch_times`` would give), else is rebuilt when next read."""
        self.ends[epoch] = ts
        times = self.times
        if (
            times is not None
            and _finite(epoch)
            and _finite(ts)
            and times[-1][0] < epoch <= self.basis[1]  # type: ignore[operator]
            and ts >= times[-1][1]
        ):
            self.times = (*times, (float(epoch), float(ts)))
        else:
            self.times = None

    def epoch_times(self, start: float, planned: float) -> tuple[tuple[float, float], ...]:
        if self.times is None or self.basis != (start, planned):
            self.times = monotone_epoch_times(start, self.ends.items(), planned)
            self.basis = (start, planned)
        return self.times


def _running_from_row(row: tuple, stored: _StoredEnds) -> StoredRun:
    (_, rid, ns, pod, container, node, planned, start, feats, us, uw, ms, mw, last_seen) = row
    _check_planned(rid, planned)
    for value in (start, us, uw, ms, mw, last_seen):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise HistoryError(f"stored run {rid!r}: a number column holds {value!r}")
    features = dict(_load_features(feats))
    if uw > 0:
        features["gpu_utilization_ratio"] = us / uw
    if mw > 0:
        features["memory_utilization_ratio"] = ms / mw
    run = Run(
        run_id=rid,
        epochs_planned=planned,
        epoch_times=stored.epoch_times(start, planned),
        features=MappingProxyType(features),
        completed=None,
        namespace=ns,
        pod=pod,
        container=container,
    )
    return StoredRun(run=run, node=node, last_seen=last_seen)


def _finished_from_row(row: tuple, features_cache: dict[str, Mapping[str, Feature]]) -> Run:
    run_id, ns, pod, container, planned, state, feats, times = row
    _check_planned(run_id, planned)
    try:
        epoch_times = unpack_epoch_times(times)
    except ValueError:
        raise HistoryError(f"stored run {run_id!r} has a damaged epoch list") from None
    features = features_cache.get(feats)
    if features is None:
        features = features_cache[feats] = _as_own_job(MappingProxyType(_load_features(feats)))
    return thinned(  # to learn from: at most runs.HISTORY_POINTS points (the file keeps all)
        validate_run(
            Run(
                run_id=str(run_id),
                epochs_planned=float(planned),
                epoch_times=epoch_times,
                features=features,
                completed=state == "completed",
                namespace=str(ns),
                pod=str(pod),
                container=str(container),
            )
        )
    )


def _check_planned(run_id: object, planned: object) -> None:
    """SQLite keeps any value in a REAL column (a hand edit can store text there)."""
    if isinstance(planned, bool) or not isinstance(planned, int | float):
        raise HistoryError(f"stored run {run_id!r}: epochs_planned {planned!r} is not a number")
    if not (math.isfinite(planned) and planned > 0):
        raise HistoryError(f"stored run {run_id!r}: epochs_planned {planned!r} is not > 0")


def _to_learn_from(run: Run) -> Run:
    """A finished run as ``finished`` reads it back: thinned, a run in percent of its
    steps as a job of its own."""
    features = _as_own_job(run.features)
    if features is not run.features:
        run = dataclasses.replace(run, features=features)
    return thinned(run)


def _as_own_job(features: Mapping[str, Feature]) -> Mapping[str, Feature]:
    """A finished run counted in percent of its steps is a job of its own to the models
    (``<job_name> (percent)``): its time per unit is 1/100 of the run where the same
    job's runs in steps have 1/steps, and pooled they would read as noise. Any other
    run's features are returned as they are."""
    job = features.get("job_name")
    if features.get("progress_unit") != PERCENT_UNIT or not (isinstance(job, str) and job):
        return features
    return MappingProxyType({**features, "job_name": job + _JOB_SUFFIX})


def _dump_features(features: Mapping[str, Feature]) -> str:
    clean: dict[str, Feature] = {}
    for key, value in features.items():
        if isinstance(value, str):
            clean[str(key)[:64]] = value[:_MAX_FEATURE_TEXT]
        elif isinstance(value, int | float) and math.isfinite(value):
            clean[str(key)[:64]] = float(value)
    return json.dumps(clean, sort_keys=True)


def _load_features(text: str) -> Mapping[str, Feature]:
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _finite_or_zero(value: float | None) -> float:
    return float(value) if _finite(value) else 0.0  # type: ignore[arg-type]


def _set_aside(path: str) -> str:
    """Move a damaged history file (and its journal) to ``<name>.corrupt-<unix time>``."""
    aside = f"{path}.corrupt-{int(time.time())}"
    for suffix in ("", "-journal", "-wal", "-shm"):
        try:
            os.replace(path + suffix, aside + suffix)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise HistoryError(
                f"history file {path} is damaged and cannot be moved aside: {err}"
            ) from None
    return os.path.basename(aside)


def _probe_write(conn: sqlite3.Connection) -> None:
    """One empty write transaction: a read-only file or directory fails here, at start."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('write_probe', '1') "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _memory_copy(conn: sqlite3.Connection) -> sqlite3.Connection:
    """The whole database copied into memory (SQLite's backup API), for reading and
    writing when the file cannot be written."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    memory = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    conn.backup(memory)
    return memory
