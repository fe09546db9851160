"""The history's SQLite file itself: opening, checking, migrating and setting it aside;
transactions and what an SQLite error means for the file.

The schema and its migrations, ``prepare`` (create, or check that an existing file is
ours, sound and of a schema this code reads, migrating an older one), the write probe
and in-memory copy of a read-only file, ``set_aside`` for a damaged one, and
``Transaction`` with the error classification (``corrupt``, ``why``). Why separate
from ``history``: this is the file's lifecycle and failure handling, which ``HistoryStore``
only calls; the store's own queries stay with it.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress

from gpu_eta.common.text import lenient_utf8, utf8_encodable
from gpu_eta.forecaster.history_rows import (
    PERCENT_UNIT,
    HistoryError,
    dump_features,
    load_features,
)
from gpu_eta.forecaster.runs import STEPS_UNIT

APPLICATION_ID = 0x67457461  # "gEta"
SCHEMA_VERSION = 4
# How long a statement waits for another process's lock on the file before it fails
# (SQLite's busy timeout; Python's default is 5 s). Why 30 s: an admin's ``sqlite3``
# shell or a backup tool (``sqlite3 .backup``, a volume snapshot reading the file) may
# hold a read or write transaction for seconds, and a start or cycle that waits it out
# loses nothing; 30 s is still well under the chart's 60 s liveness delay and a tenth
# of the wedged-cycle limit (600 s), so a lock held for good still fails visibly.
BUSY_TIMEOUT_SECONDS = 30.0
# SQLite's primary result codes (``sqlite3.Error.sqlite_errorcode & 0xFF``, Python
# >= 3.11) that this module tells apart: only the last two mean a damaged file.
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
_SQLITE_IOERR = 10
_SQLITE_CORRUPT = 11
_SQLITE_FULL = 13
_SQLITE_NOTADB = 26

# Schema 2: ``runs.id`` is a surrogate key (epoch_ends refer to it), the run's identity
# is UNIQUE (namespace, pod, container, run_id); ``runs_run_id`` serves the seed
# de-duplication by run_id. Schema 4 adds ``attempt`` to that identity: a key's latest
# run has attempt 0, an earlier finished run under the same key (a StatefulSet pod or
# a named run trained again) is moved to the next free attempt when a new run starts
# under its key (``HistoryStore.record``).
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
    attempt INTEGER NOT NULL DEFAULT 0,
    UNIQUE (namespace, pod, container, run_id, attempt)
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
# ``runs_finished``: SQLite walks it to read the finished runs newest first
# (``HistoryStore.finished``) instead of sorting them, with their progress blobs, in a
# temporary file the size of the history. Not part of the schema version: an earlier
# release reads and writes a file that has it (SQLite updates every index on every
# write), and refuses a newer ``user_version``, so a version raised for an index would
# make a rolled-back Deployment refuse its file. ``prepare`` builds it where missing; a
# build that fails (``IndexNotBuilt``) does not stop the start (``HistoryStore.open``).
_FINISHED_INDEX = """
CREATE INDEX IF NOT EXISTS runs_finished ON runs(finished_timestamp, id);
"""
# ``runs_retainable``: the finished runs retention may delete (not seeded), in the
# order a pass takes them (``HistoryStore._delete_old``). Why apart from
# ``runs_finished``: along that one a pass read the row of every seeded run before the
# first it may delete, and seeded runs are never deleted, so a pass with nothing to
# delete read them all, every cycle (50,000 seeded runs: 31-40 ms a pass). Partial:
# only the rows a pass may delete are in it. Not in ``_INDEXES``: the migrations build
# those before ``runs.seeded`` exists; ``add_indexes`` builds it, where missing, for
# the reasons ``runs_finished`` is built there (no schema version).
_RETAINABLE_INDEX = """
CREATE INDEX IF NOT EXISTS runs_retainable ON runs(finished_timestamp, id)
    WHERE seeded = 0 AND state != 'running';
"""
# ``runs_podless``: the runs without a pod and container (seeded from a CSV) by run_id,
# which ``record`` asks for every update of every cycle (``history._IS_SEEDED``). Why
# not ``runs_run_id``: along it each update read the row of every run with its run_id,
# and a named run (a notebook's ``run_id="exp"``) run again in pod after pod piles them
# up: 50,000 of them and 200 live made a ``record`` take 17 s, where it takes 20 ms.
# Partial: only the pod-less rows are in it (none in a history never seeded). Not part
# of the schema version, for the reasons ``runs_finished`` is not; ``add_indexes``
# builds it where missing.
_PODLESS_INDEX = """
CREATE INDEX IF NOT EXISTS runs_podless ON runs(run_id) WHERE pod = '' AND container = '';
"""
_INDEXES = (
    """
CREATE INDEX runs_state ON runs(state);
CREATE INDEX runs_run_id ON runs(run_id);
"""
    + _FINISHED_INDEX
)
# ``runs.seeded``: 1 for a run imported from a seed CSV (``HistoryStore.import_finished``),
# which retention never deletes (the next start would import it again). Why a mark:
# a seed CSV may give a run its pod and container, so "no pod" did not tell a seeded
# run. Not part of the schema version, for the reason ``runs_finished`` is not (an
# earlier release reads and writes a file that has it; its inserts take the default);
# ``add_seeded_mark`` adds it where missing. Not in ``_RUNS_TABLE``: the migrations'
# copies would create it unmarked, and the mark is set where the column is added.
_SEEDED_COLUMN = "ALTER TABLE runs ADD COLUMN seeded INTEGER NOT NULL DEFAULT 0;"
# ``retired``: the key and start of each completed run retention deleted that was its
# key's latest (attempt 0), until ``until_timestamp``. Why: such a run's pod may live
# on with its series (a Job's Succeeded pod without a TTL, a notebook after
# ``end()``), and with its row gone the next process read the run as ending and
# stored it again, finished at its own time (``HistoryStore.completed_starts``). A
# mark lasts ``Retention.linger_seconds`` (the service: ``--history.retention``)
# past the last cycle that read its run's series (``HistoryStore.record``'s
# ``lingering``). Not part of the schema version, for the reason ``runs.seeded`` is not (an
# earlier release reads and writes a file that has it, and ignores it);
# ``add_retired_table`` adds it where missing.
_RETIRED_TABLE = """
CREATE TABLE IF NOT EXISTS retired (
    namespace TEXT NOT NULL,
    pod TEXT NOT NULL,
    container TEXT NOT NULL,
    run_id TEXT NOT NULL,
    start_timestamp REAL NOT NULL,
    until_timestamp REAL NOT NULL,
    PRIMARY KEY (namespace, pod, container, run_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS retired_until ON retired(until_timestamp);
"""
_SCHEMA = (
    _RUNS_TABLE.format(name="runs")
    + _SEEDED_COLUMN
    + _EPOCH_ENDS_TABLE.format(name="epoch_ends")
    + """
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
"""
    + _INDEXES
    + _RETAINABLE_INDEX
    + _PODLESS_INDEX
    + _RETIRED_TABLE
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

# Schema 3 → 4: the runs copied into the table with ``attempt`` (0 for every run: one
# run per key until then), ids kept so that epoch_ends still point at them.
_MIGRATE_3_TO_4 = (
    _RUNS_TABLE.format(name="runs_v4")
    + f"""
INSERT INTO runs_v4 (id, {_COLUMNS}) SELECT id, {_COLUMNS} FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v4 RENAME TO runs;
"""
    + _INDEXES
)


class DamagedHistory(HistoryError):
    """The file is ours (or no database at all) but damaged: set aside, start afresh.
    Raised by a read or write SQLite failed as damaged, too (``corrupt``): the store
    then rebuilds the indexes first (``HistoryStore._recover``)."""


class VolumeFull(HistoryError):
    """A write failed because the volume holding the file is full (SQLITE_FULL): rolled
    back; a smaller write may still fit (``HistoryStore.retain`` halves its batch)."""


class IndexNotBuilt(HistoryError):
    """``runs_finished`` could not be built (a lock held past ``BUSY_TIMEOUT_SECONDS``,
    a full disk): the file is unchanged, checked and migrated, and usable without it."""


def connect(path: str) -> sqlite3.Connection:
    """An autocommit connection to ``path`` (transactions are explicit), usable from any
    thread (the store serialises access), waiting ``BUSY_TIMEOUT_SECONDS`` for a lock,
    reading text that is not UTF-8 without failing (``lenient_utf8``: SQLite does not
    check the text another tool writes, and one such row failed every read; the row
    is then rejected alone by ``history_rows``)."""
    conn = sqlite3.connect(
        path,
        timeout=BUSY_TIMEOUT_SECONDS,
        check_same_thread=False,
        isolation_level=None,
    )
    conn.text_factory = lenient_utf8
    return conn


def prepare(conn: sqlite3.Connection, path: str) -> None:
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
    upgrade(conn, path, version)


def upgrade(conn: sqlite3.Connection, path: str, version: int) -> None:
    """Bring a checked file of schema ``version`` to this release: migrated where older,
    then indexed (``add_indexes``). Why one function: a read-only file is used through a
    memory copy (``HistoryStore.open``), which must end up as a writable file would."""
    if version < SCHEMA_VERSION:
        migrate(conn, path, version)
    add_seeded_mark(conn, path)
    add_retired_table(conn, path)
    add_indexes(conn, path)


def add_seeded_mark(conn: sqlite3.Connection, path: str) -> None:
    """Add ``runs.seeded`` where it is missing (a file an earlier release wrote), in a
    transaction of its own, marking the runs that release seeded by the rule it kept
    them by (finished, no pod, no container); nothing written where it exists. A
    read-only file raises SQLite's error (the caller adds it in the memory copy); any
    other failure is a ``HistoryError``, the file unchanged: the store's queries need
    the column, so the start fails as a failed migration does."""
    if any(row[1] == "seeded" for row in conn.execute("PRAGMA table_info(runs)")):
        return
    _write_once(
        conn,
        path,
        "adding column runs.seeded",
        _run_script(
            _SEEDED_COLUMN
            + "UPDATE runs SET seeded = 1 WHERE pod = '' AND container = '' "
            + "AND state != 'running';"
        ),
    )


def add_retired_table(conn: sqlite3.Connection, path: str) -> None:
    """Add the table ``retired`` where it is missing (a file an earlier release wrote),
    in a transaction of its own; nothing written where it exists. A read-only file
    raises SQLite's error (the caller adds it in the memory copy); any other failure is
    a ``HistoryError``, the file unchanged: the store's reads of completed runs need
    it, so the start fails as a failed migration does."""
    if conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'retired'"
    ).fetchone():
        return
    _write_once(conn, path, "adding table retired", _run_script(_RETIRED_TABLE))


def add_indexes(conn: sqlite3.Connection, path: str) -> None:
    """Build ``runs_finished``, ``runs_retainable`` and ``runs_podless`` where missing (a
    file an earlier release created, or rebuilt by a tool without them), each in a
    transaction of its own; nothing to do, and nothing written, where they exist. A
    read-only file raises SQLite's error (the caller builds them in the memory copy);
    any other failure is ``IndexNotBuilt``, the file unchanged by that build.
    ``prepare`` calls this last: when it raises that, everything else ``prepare`` does
    is done."""
    for name, script in (
        ("runs_finished", _FINISHED_INDEX),
        ("runs_retainable", _RETAINABLE_INDEX),
        ("runs_podless", _PODLESS_INDEX),
    ):
        if conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
        ).fetchone():
            continue
        _write_once(
            conn,
            path,
            f"building index {name}",
            _run_script(script),  # IF NOT EXISTS: another process may have won
            IndexNotBuilt,
        )


def migrate(conn: sqlite3.Connection, path: str, version: int) -> None:
    """Upgrade an older schema in place, in one transaction: all rows or no change."""
    steps: dict[int, Callable[[sqlite3.Connection], None]] = {
        1: _run_script(_MIGRATE_1_TO_2),
        2: _mark_percent_runs,
        3: _run_script(_MIGRATE_3_TO_4),
    }

    def all_steps(conn: sqlite3.Connection) -> None:
        for step in range(version, SCHEMA_VERSION):
            steps[step](conn)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    _write_once(conn, path, f"migrating schema {version} to {SCHEMA_VERSION}", all_steps)


def _write_once(
    conn: sqlite3.Connection,
    path: str,
    what: str,
    write: Callable[[sqlite3.Connection], None],
    error: type[HistoryError] = HistoryError,
) -> None:
    """``write`` in one transaction of its own at open: all of it or no change. A
    read-only file raises SQLite's error (the caller works on a memory copy and writes
    there); any other failure is ``error`` saying ``what`` failed and why."""
    try:
        conn.execute("BEGIN IMMEDIATE")
        write(conn)
        conn.execute("COMMIT")
    except sqlite3.Error as err:
        _rollback(conn)  # never raises: the caller needs this error, not the rollback's
        if isinstance(err, sqlite3.OperationalError) and read_only(err):
            raise
        raise error(
            f"history file {path}: {what} failed ({why(err)}); the file was not modified"
        ) from None


def read_only(err: sqlite3.OperationalError) -> bool:
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
    rows are otherwise untouched (``history``'s module doc says how they are used). A run with
    that feature and another plan came from a CSV counting real steps and is left as
    it is."""
    rows = conn.execute(
        "SELECT id, features FROM runs WHERE features LIKE '%progress_unit%' "
        "AND epochs_planned = 100"
    ).fetchall()
    for row_id, text in rows:
        if isinstance(text, str) and not utf8_encodable(text):
            continue  # another tool's bytes, not UTF-8: left as they are, for a human
        features = dict(load_features(text))
        if features.get("progress_unit") == STEPS_UNIT:
            features["progress_unit"] = PERCENT_UNIT
            conn.execute(
                "UPDATE runs SET features = ? WHERE id = ?", (dump_features(features), row_id)
            )


def _statements(script: str) -> list[str]:
    """A schema script split into statements (ours contain no ';' inside literals)."""
    return [part.strip() for part in script.split(";") if part.strip()]


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any error (atomic writes).

    Every SQLite error becomes a ``HistoryError`` saying why (a lock held past
    ``BUSY_TIMEOUT_SECONDS``, a full disk, an I/O error) and that the write was rolled
    back: the caller's cycle fails and the next one writes it again, since the cycle
    stores the query time its next read starts from in the same transaction as the
    means it read (``HistoryStore.record``).
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self._path = path

    def __enter__(self) -> None:
        _rollback(self._conn)  # a transaction left open by a failed ROLLBACK
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as err:
            raise _failed(err)(
                f"history file {self._path}: cannot write ({why(err)}); nothing was written"
            ) from None

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            try:
                self._conn.execute("COMMIT")
                return False
            except sqlite3.Error as err:
                _rollback(self._conn)
                raise _failed(err)(
                    f"history file {self._path}: commit failed ({why(err)}); "
                    "this write was rolled back"
                ) from None
        _rollback(self._conn)
        if isinstance(exc, sqlite3.Error):
            raise _failed(exc)(
                f"history file {self._path}: write failed ({why(exc)}); this write was rolled back"
            ) from None
        if isinstance(exc, UnicodeEncodeError):  # text no caller checked (HistoryStore._storable)
            raise HistoryError(
                f"history file {self._path}: write failed (text that is not valid Unicode: "
                f"{exc.reason}); this write was rolled back"
            ) from None
        return False


def _failed(err: sqlite3.Error) -> type[HistoryError]:
    """The error a failed write raises: ``VolumeFull`` for SQLITE_FULL,
    ``DamagedHistory`` for an error SQLite reports as a damaged file (``corrupt``: the
    store repairs or sets the file aside, ``HistoryStore._recover``)."""
    code = _error_code(err)
    full = code == _SQLITE_FULL or (code is None and "disk is full" in str(err).lower())
    if full:
        return VolumeFull
    return DamagedHistory if corrupt(err) else HistoryError


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back an open transaction, if any; never raises. Why: after a full disk or
    an I/O error SQLite may have rolled back already, and a ROLLBACK then fails with
    "no transaction is active", which used to hide the real error behind a traceback."""
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")


def _error_code(err: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``err`` (Python >= 3.11), else None."""
    code = getattr(err, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None


def corrupt(err: sqlite3.Error) -> bool:
    """Whether ``err`` says the file is damaged (SQLITE_CORRUPT) or no database at all
    (SQLITE_NOTADB): the only errors for which the file is set aside. By the result
    code where Python gives it (>= 3.11), else by SQLite's own messages (3.10)."""
    code = _error_code(err)
    if code is not None:
        return code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(err).lower()
    return "file is not a database" in text or "malformed" in text


def why(err: sqlite3.Error) -> str:
    """``err`` with what it means for the history file, one line."""
    code = _error_code(err)
    text = str(err)
    low = text.lower()
    if code in (_SQLITE_BUSY, _SQLITE_LOCKED) or (
        code is None and ("locked" in low or "busy" in low)
    ):
        return (
            f"{text}: another process (a second forecaster, a sqlite3 shell, a backup) held "
            f"its lock for longer than {BUSY_TIMEOUT_SECONDS:g} s"
        )
    if code == _SQLITE_FULL or (code is None and "full" in low):
        return f"{text}: the volume holding it is full"
    if code == _SQLITE_IOERR or (code is None and "i/o error" in low):
        return f"{text}: the disk or file system failed a read or write"
    return text


def set_aside(path: str) -> str:
    """Move a damaged history file (and its journal) to ``<name>.corrupt-<unix time>``,
    or ``…-<unix time>-<n>`` when that is taken; the name it got.

    The name is one no file has yet, reserved by creating it exclusively before the
    file replaces it: two set-asides in the same second (a damaged file, a restart, a
    damaged file again) must not overwrite each other's copy, as ``os.replace`` onto a
    name with only the second in it did (``exporter/progress_store.py`` does the same).
    """
    aside = _reserve_aside(path)
    for suffix in _FILE_SUFFIXES:
        try:
            os.replace(path + suffix, aside + suffix)
        except FileNotFoundError:
            if not suffix:  # nothing to set aside: the reserved name goes again
                with suppress(OSError):
                    os.unlink(aside)
            continue
        except OSError as err:
            if not suffix:
                with suppress(OSError):
                    os.unlink(aside)
            raise HistoryError(
                f"history file {path} is damaged and cannot be moved aside: {err}"
            ) from None
    return os.path.basename(aside)


# the database file and the files SQLite keeps beside it (rollback journal, WAL)
_FILE_SUFFIXES = ("", "-journal", "-wal", "-shm")


def aside_copies(path: str) -> tuple[int, int]:
    """How many damaged copies of the history at ``path`` lie beside it as
    ``set_aside`` left them (``<name>.corrupt-<unix time>[-<n>]``), and the bytes they
    hold with their journals; (0, 0) where the directory cannot be read. Why ask: they
    stay for a human and take the volume's room (as big as the history was), which
    retention cannot free (``HistoryStore._note_room`` names them)."""
    directory, name = os.path.split(path)
    copy = re.compile(re.escape(name) + r"\.corrupt-\d+(?:-\d+)?")
    copies: set[str] = set()
    total = 0
    try:
        with os.scandir(directory or ".") as entries:
            for entry in entries:
                base = entry.name
                for suffix in _FILE_SUFFIXES[1:]:
                    base = base.removesuffix(suffix)
                if not copy.fullmatch(base):
                    continue
                with suppress(OSError):
                    total += entry.stat(follow_symlinks=False).st_size
                    if base == entry.name:
                        copies.add(base)
    except OSError:
        return 0, 0
    return len(copies), total


def _reserve_aside(path: str) -> str:
    """``<path>.corrupt-<unix time>[-<n>]``, the first such name free for the file and
    its journals, created empty with ``O_EXCL`` so that no other set-aside takes it."""
    stamp = f"{path}.corrupt-{int(time.time())}"
    n = 0
    while True:
        aside = f"{stamp}-{n}" if n else stamp
        n += 1
        if any(os.path.lexists(aside + suffix) for suffix in _FILE_SUFFIXES[1:]):
            continue
        try:
            create_new(aside, 0o600)
        except FileExistsError:
            continue
        except OSError as err:
            raise HistoryError(
                f"history file {path} is damaged and cannot be moved aside: {err}"
            ) from None
        return aside


def create_new(path: str, mode: int = 0o666) -> None:
    """An empty file created at ``path`` only where nothing is there (``O_EXCL``):
    ``FileExistsError`` otherwise, ``OSError`` where it cannot be made. Why: a file
    made so is this process's own, never another writer's, and only such a file is
    ever written over or deleted."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))


def probe_write(conn: sqlite3.Connection) -> None:
    """One small write transaction: a read-only file or directory, a full disk or
    failing I/O fails here, at start. The value is the start's time: SQLite skips
    rewriting a row to what it already holds, so a constant value wrote nothing
    (no journal, no page) from the second start on, and those went unnoticed."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES ('write_probe', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (repr(time.time()),),
        )
        conn.execute("COMMIT")
    except BaseException:
        _rollback(conn)  # the caller needs the first error, not the rollback's
        raise


def memory_copy(conn: sqlite3.Connection) -> sqlite3.Connection:
    """The whole database copied into memory (SQLite's backup API), for reading and
    writing when the file cannot be written."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    memory = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
    memory.text_factory = lenient_utf8
    conn.backup(memory)
    return memory


def rolled_back_copy(path: str) -> sqlite3.Connection:
    """The database at ``path`` copied into memory after its leftover rollback journal
    (``<path>-journal``) is rolled back in a temporary copy of both (``tempfile``'s
    directory: $TMPDIR, else /tmp), which is then removed; ``path`` is not written.

    Why: a writer killed mid-transaction leaves a hot journal, and SQLite must roll it
    back before any read; beside a file it cannot write (a volume remounted read-only
    after the same fault) it cannot, and the backup into memory failed, so every start
    exited 1. The temporary directory needs room for the file and its journal while
    this runs."""
    with tempfile.TemporaryDirectory(prefix="gpu-eta-history-") as scratch:
        copy = os.path.join(scratch, "history.sqlite")
        shutil.copyfile(path, copy)
        shutil.copyfile(path + "-journal", copy + "-journal")
        conn = connect(copy)
        try:
            return memory_copy(conn)  # its first read rolls the journal back
        finally:
            conn.close()


# An unfinished copy a killed forecaster left beside the history file is removed at
# the next open once it is this old, even where its pid is alive (a restarted pod's
# new pid namespace reuses the small pids). Why 5 minutes: a copy takes seconds, so a
# file this old is no one's copy in progress.
UNFINISHED_COPY_SECONDS = 300.0


def unfinished_copy_name(history_name: str, pid: int, token: str) -> str:
    """The name a new history file is made under beside ``history_name`` before it is
    linked into place (``HistoryStore._made_in_place``). Pure."""
    return f".{history_name}.new-{pid}-{token}"


def unfinished_copy_pid(name: str, history_name: str) -> int | None:
    """The pid in ``name`` where it is an unfinished copy beside ``history_name``
    (``unfinished_copy_name``, 8 lowercase hex digits, optionally ``-journal``); else
    None. Pure. Why this exact pattern: only names this code makes are ever removed."""
    prefix = f".{history_name}.new-"
    if not name.startswith(prefix):
        return None
    rest = name[len(prefix) :].removesuffix("-journal")
    pid, _, token = rest.partition("-")
    if not (pid.isascii() and pid.isdigit() and len(pid) <= 10):
        return None
    if len(token) != 8 or any(c not in "0123456789abcdef" for c in token):
        return None
    return int(pid)


def _pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists in this pid namespace."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, another user's
        return True
    return True


def remove_unfinished_copies(path: str, now: float | None = None) -> list[str]:
    """Remove the unfinished copies (``unfinished_copy_pid``) beside the history file
    ``path`` whose process is gone or that are older than ``UNFINISHED_COPY_SECONDS``;
    the names removed. Why: a forecaster killed between making its copy and linking
    it into place (OOM, eviction) cannot delete it, and each such copy is a whole
    history's size left on the volume for ever. Files that cannot be read or removed
    are left as they are."""
    directory, history_name = os.path.split(path)
    now = time.time() if now is None else now
    try:
        names = os.listdir(directory or ".")
    except OSError:
        return []
    removed = []
    for name in sorted(names):
        pid = unfinished_copy_pid(name, history_name)
        if pid is None:
            continue
        full = os.path.join(directory, name)
        try:
            old = now - os.lstat(full).st_mtime > UNFINISHED_COPY_SECONDS
            if old or not _pid_alive(pid):
                os.unlink(full)
                removed.append(name)
        except OSError:
            continue
    return removed
