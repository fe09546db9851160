"""The history file under the faults a cluster gives it: another process holding its
lock, a full disk, failing I/O, text SQLite cannot store, a damaged running row.

Real parts only: real SQLite files; the lock is held by a real second process (an
admin's ``sqlite3`` shell or a backup tool does the same); I/O errors come from a
real file-size limit (``RLIMIT_FSIZE``) in a forked child; the full disk is a real
1 MiB tmpfs, mounted in a private mount namespace (root only; skipped elsewhere).
What each test guards: nothing already stored is lost or moved aside, the error is a
``HistoryError`` with the reason, and the next attempt stores everything.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import math
import os
import random
import resource
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from gpu_eta.forecaster import history_file
from gpu_eta.forecaster.cycle_meta import LAST_QUERY_KEY
from gpu_eta.forecaster.history import HistoryConflict, HistoryError, HistoryStore
from gpu_eta.forecaster.runs import Run, RunUpdate
from tests.support.child import in_child
from tests.support.read_only import read_only_directory, run_unprivileged
from tests.support.tmpfs import run_on_tmpfs

# A second process on the file: takes the lock ``how`` asks, says "held", and keeps
# it until its stdin closes or ``seconds`` pass.
HOLDER = """
import select, sqlite3, sys
path, how, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
conn = sqlite3.connect(path, isolation_level=None)
if how == "write":
    conn.execute("BEGIN IMMEDIATE")
elif how == "exclusive":
    conn.execute("BEGIN EXCLUSIVE")
else:  # a reader in a transaction: a long SELECT, sqlite3 .backup
    conn.execute("BEGIN")
    conn.execute("SELECT count(*) FROM runs").fetchone()
print("held", flush=True)
select.select([sys.stdin], [], [], seconds)
conn.execute("ROLLBACK")
"""


@contextmanager
def lock_held(db: Path, how: str, seconds: float = 120.0) -> Iterator[subprocess.Popen]:
    """Another process holding ``how`` ("write", "exclusive", "read") on ``db`` for
    the ``with`` block (or ``seconds``, whichever ends first)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), how, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        assert proc.wait(60) == 0


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def finished_runs(n: int) -> list[Run]:
    return [
        Run(f"r{i}", 2, ((0, 100.0 * i), (1, 100.0 * i + 10), (2, 100.0 * i + 20)), completed=True)
        for i in range(n)
    ]


def update(run_id: str, ends=(), **kw: Any) -> RunUpdate:
    kw.setdefault("start_timestamp", 1000.0)
    kw.setdefault("seen_timestamp", 2000.0)
    return RunUpdate(run_id=run_id, epochs_planned=4, epoch_ends=tuple(ends), **kw)


def key(run_id: str, pod: str = "") -> tuple[str, str, str, str]:
    return ("", pod, "", run_id)


def history_of(db: Path, n: int = 50, probe_row: bool = True) -> str:
    """A healthy history of ``n`` finished runs at ``db``; its digest. ``probe_row``
    False: without the start's write-probe row (any start then writes a new one, as
    every start does since the probe writes its time)."""
    store = HistoryStore.open(db)
    store.import_finished(finished_runs(n))
    if not probe_row:
        store._conn.execute("DELETE FROM meta WHERE key = 'write_probe'")
    store.close()
    return digest(db)


def set_aside(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".corrupt-" in p.name)


def limit_file_size(size: int) -> None:
    """Writes past ``size`` bytes of any file fail (EFBIG), as on a failing disk."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))


def unlimit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def outcome(call: Callable[[], object]) -> str:
    try:
        call()
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "ok"


# -- an index that no longer matches its table ----------------------------------------


def behind_index(db: Path, indexes: tuple[str, ...], *statements: str) -> None:
    """Run ``statements`` on ``db`` while SQLite does not know ``indexes`` (their schema
    rows taken out, their pages left as they are), then put the rows back: the indexes
    then disagree with their table, as after a torn write, and every page is still well
    formed, so ``quick_check`` passes (only ``integrity_check`` compares the two)."""
    conn = sqlite3.connect(db, isolation_level=None)
    marks = ", ".join("?" * len(indexes))
    rows = conn.execute(
        f"SELECT type, name, tbl_name, rootpage, sql FROM sqlite_master WHERE name IN ({marks})",
        indexes,
    ).fetchall()
    assert len(rows) == len(indexes)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(f"DELETE FROM sqlite_master WHERE name IN ({marks})", indexes)
    conn.close()
    conn = sqlite3.connect(db, isolation_level=None)
    for statement in statements:
        conn.execute(statement)
    conn.execute("PRAGMA writable_schema = ON")
    conn.executemany("INSERT INTO sqlite_master VALUES (?, ?, ?, ?, ?)", rows)
    conn.close()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA quick_check").fetchall() == [("ok",)]
    assert conn.execute("PRAGMA integrity_check").fetchall() != [("ok",)]
    conn.close()


# the newest finished run deleted behind ``runs_finished``: a read along it fails
# "database disk image is malformed" at the entry left for the row that is gone
LAST_RUN_GONE = "DELETE FROM runs WHERE id = (SELECT MAX(id) FROM runs WHERE state != 'running')"


def test_a_damaged_index_is_rebuilt_and_every_stored_run_read(tmp_path: Path, caplog) -> None:
    db = tmp_path / "h.sqlite"
    history_of(db, 50)
    behind_index(db, ("runs_finished",), LAST_RUN_GONE)
    store = HistoryStore.open(db)  # quick_check passes: the damage shows at the first read
    try:
        assert len(store.finished()) == 49  # every run the table holds
        assert store.count_finished() == 49
    finally:
        store.close()
    assert set_aside(tmp_path) == []
    assert "rebuilding its indexes (REINDEX)" in caplog.text
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def _reindex_cannot_repair(db: Path, n: int = 20) -> None:
    """A history at ``db`` whose ``runs_finished`` index misses a row and whose
    ``runs_run_id`` index is declared UNIQUE over two equal run ids: the first read
    fails as damaged and ``REINDEX`` cannot rebuild it, so the file is set aside."""
    history_of(db, n)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(
        "INSERT INTO runs (run_id, pod, epochs_planned, start_timestamp, state, last_seen) "
        "VALUES ('r0', 'another', 2, 0, 'running', 0)"
    )
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(
        "UPDATE sqlite_master SET sql = 'CREATE UNIQUE INDEX runs_run_id ON runs(run_id)' "
        "WHERE name = 'runs_run_id'"
    )
    conn.close()
    behind_index(db, ("runs_finished",), LAST_RUN_GONE)


def test_a_damaged_index_reindex_cannot_rebuild_sets_the_file_aside(tmp_path: Path, caplog) -> None:
    db = tmp_path / "h.sqlite"
    _reindex_cannot_repair(db, 50)
    store = HistoryStore.open(db)
    try:
        assert store.finished() == []  # a new, empty history: the service goes on
        assert store.import_finished(finished_runs(3)) == 3
    finally:
        store.close()
    assert len(set_aside(tmp_path)) == 1
    assert "moved to h.sqlite.corrupt-" in caplog.text
    store = HistoryStore.open(db)  # the new history is the file at the same path
    assert len(store.finished()) == 3
    store.close()


# child scripts' helper: the volume at ``d`` filled to its last byte by ``d/filler``
FILL_VOLUME = """
import os


def fill_volume(d):
    fd = os.open(d / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\\0" * 4096)
    except OSError:
        pass
    os.close(fd)
"""

AFRESH_ON_FULL_VOLUME_CHILD = (
    FILL_VOLUME
    + """
import json, os, shutil, sys
from pathlib import Path
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.runs import Run, RunUpdate

d, damaged, when = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
db = d / "h.sqlite"
shutil.copyfile(damaged, db)
store = HistoryStore.open(db) if when == "in-service" else None
fill_volume(d)


def outcome(call):
    try:
        return call()
    except Exception as err:
        return f"{type(err).__name__}: {err}"


if store is None:
    store = outcome(lambda: HistoryStore.open(db))
    if isinstance(store, str):  # the start refused
        print(json.dumps([store, None, None, sorted(os.listdir(d)), None, None]))
        sys.exit(0)
first = outcome(lambda: len(store.finished()))
persistent = store.persistent
os.remove(d / "filler")  # room again
runs = [Run(f"n{i}", 2, ((1, 100.0), (2, 200.0)), completed=True) for i in range(3)]
later = outcome(lambda: (store.import_finished(runs), store.count_finished()))
files = sorted(os.listdir(d))
# the next cycle's write creates the file, with what the memory history holds
wrote = outcome(lambda: store.record([RunUpdate("a", 2, 250.0, ((1, 300.0),))]) == [])
store.close()
reopened = HistoryStore.open(db)
on_file = [store.persistent, reopened.count_finished(), [s.run.run_id for s in reopened.running()]]
reopened.close()
print(json.dumps([first, persistent, later, files, wrote, on_file]))
"""
)


@pytest.mark.parametrize("when", ["in-service", "at-start"])
def test_a_damaged_file_set_aside_on_a_full_volume_goes_on_in_memory(
    tmp_path: Path, when: str
) -> None:
    """The damaged file is moved aside, and the new one cannot be created (a real full
    tmpfs). The store closed the old connection first and raised: every later call
    failed *"Cannot operate on a closed database"*, even once room came back, until
    the pod restarted. Now it goes on in memory, not persisted, and keeps working; once
    there is room, the next write creates the file from what memory holds."""
    damaged = tmp_path / "damaged.sqlite"
    if when == "in-service":
        _reindex_cannot_repair(damaged)
    else:  # not SQLite at all: set aside at open
        damaged.write_bytes(b"not a database" * 100)
    proc = run_on_tmpfs(tmp_path, AFRESH_ON_FULL_VOLUME_CHILD, [str(damaged), when], "1m")
    assert proc.returncode == 0, proc.stderr
    first, persistent, later, files, wrote, on_file = json.loads(proc.stdout.splitlines()[-1])
    assert first == 0, first  # a new, empty history
    assert persistent is False  # published as history_persisted 0
    assert later == [3, 3], later  # it keeps working once room is back
    assert len([f for f in files if ".corrupt-" in f]) == 1, files
    assert "cannot be created" in proc.stderr and "in memory" in proc.stderr, proc.stderr
    # the next write creates the file from the memory history: persisted again
    assert wrote is True, wrote
    assert on_file == [True, 3, ["a"]], on_file
    assert "created" in proc.stderr.split("cannot be created", 1)[1], proc.stderr


def _afresh_then_another_writer(path: str) -> list[object]:
    """At start, a damaged file set aside and no new file creatable (every write past
    0 bytes fails, ``RLIMIT_FSIZE``); then, with writes possible again, another
    process makes a history at the path before this store's next write."""
    limit_file_size(0)
    store = HistoryStore.open(path)
    unlimit_file_size()
    other = HistoryStore.open(path)
    other.import_finished(finished_runs(2))
    other.close()
    store.record([update("a", [(1, 1100.0)])])
    got = [store.persistent, [s.run.run_id for s in store.running()]]
    store.close()
    other = HistoryStore.open(path)
    got += [other.count_finished(), len(other.running())]
    other.close()
    return got


def test_a_history_file_another_writer_made_meanwhile_is_not_written_over(
    tmp_path: Path, caplog
) -> None:
    """The store in memory after a set-aside creates the file at its next write only
    where nothing (or an empty file) is at the path: a file with content there is
    another writer's and is left as it is; this store stays in memory."""
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"not a database" * 100)
    assert in_child(_afresh_then_another_writer, str(db)) == [False, ["a"], 2, 0]
    assert len(set_aside(tmp_path)) == 1


def _another_writer_during_create(path: str, room: bool) -> list[object]:
    """As ``_afresh_then_another_writer``, but the other process makes its history at
    the path *during* this store's next write, after that write looked and found
    nothing there (the first file this store opens then); without ``room`` every write
    fails from then on (``RLIMIT_FSIZE``), so this store's copy fails half-way. What
    is at the path afterwards, and what is beside it."""
    limit_file_size(0)
    store = HistoryStore.open(path)
    unlimit_file_size()
    directory = Path(path).parent
    before = sorted(p.name for p in directory.iterdir())
    opened = HistoryStore._open.__func__  # type: ignore[attr-defined]
    calls = []

    def racing(cls: type[HistoryStore], spath: str) -> HistoryStore:
        if not calls:
            calls.append(spath)
            other = opened(cls, path)
            other.import_finished(finished_runs(5))
            other.close()
            made = opened(cls, spath)
            if not room:
                limit_file_size(0)
            return made
        return opened(cls, spath)

    HistoryStore._open = classmethod(racing)  # type: ignore[method-assign, assignment]
    try:
        store.record([update("a", [(1, 1100.0)])])
    finally:
        HistoryStore._open = classmethod(opened)  # type: ignore[method-assign, assignment]
        unlimit_file_size()
    got: list[object] = [store.persistent, [s.run.run_id for s in store.running()]]
    store.record([update("a", [(1, 1100.0), (2, 1200.0)])])  # tried again: still left alone
    store.close()
    other = HistoryStore.open(path)
    got += [other.count_finished(), len(other.running())]
    other.close()
    got.append(sorted(set(p.name for p in directory.iterdir()) - set(before) - {"h.sqlite"}))
    return got


@pytest.mark.parametrize("room", [True, False])
def test_a_history_file_another_writer_makes_during_the_create_is_kept(
    tmp_path: Path, caplog, room: bool
) -> None:
    """Another writer's history made between this store's look at the path and its
    copy: the copy (SQLite's backup, which replaces the whole destination) wrote over
    it, and a copy that failed half-way deleted it. Now the copy is made in a file of
    this store's own and linked into place only where the path is still free; the
    other writer's file is left as it is, this store stays in memory, and nothing of
    its own is left beside it."""
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"not a database" * 100)
    got = in_child(_another_writer_during_create, str(db), room)
    assert got == [False, ["a"], 5, 0, []], got


def _without_hard_links(path: str, code: int) -> list[object]:
    """A damaged file set aside on a volume whose file system refuses hard links with
    ``code``: first with no room for the new file at the path (from the refused link
    on, every write past 0 bytes fails, ``RLIMIT_FSIZE``), then with room at the next
    write; then the path already taken
    by another writer. Why ``os.link`` is replaced: no file system without hard links
    mounts here (this kernel has no vfat; FUSE would need a server), and the errno is
    all the store sees of one."""

    room = False

    def refused(src: str, dst: str) -> None:
        if not room:  # the copy beside the path was made; the one at the path fails
            limit_file_size(0)
        raise OSError(code, os.strerror(code))

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("gpu_eta.forecaster.history").addHandler(handler)
    os.link = refused  # type: ignore[assignment]
    directory = Path(path).parent
    store = HistoryStore.open(path)
    unlimit_file_size()
    room = True
    got: list[object] = [store.persistent, sorted(p.name for p in directory.iterdir())]
    got.append(any(f"has no hard links: {os.strerror(code)}" in m for m in said))
    store.record([update("a", [(1, 1100.0)])])
    got.append(store.persistent)
    store.close()
    reopened = HistoryStore.open(path)
    got.append([s.run.run_id for s in reopened.running()])
    reopened.close()
    got.append(sorted(p.name for p in directory.iterdir() if ".corrupt-" not in p.name))
    mine = HistoryStore._open(":memory:")
    try:
        HistoryStore._made_in_place(path, mine._conn)
    except FileExistsError:
        got.append("left alone")
    return got


@pytest.mark.parametrize("code", [errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV, errno.ENOSYS])
def test_a_volume_without_hard_links_still_gets_its_history_file(tmp_path: Path, code: int) -> None:
    """The new file is made beside the path and hard-linked into place; on a volume
    without hard links (Azure Files over SMB, gcsfuse, s3fs, vfat) the link failed
    every time, and a damaged file once set aside left the history in memory for
    good. Now the file is created at the path itself with ``O_EXCL`` (only where the
    path is free) and filled there; a fill that fails deletes it again; another
    writer's file at the path is left alone."""
    db = tmp_path / "h.sqlite"
    db.write_bytes(b"not a database" * 100)
    got = in_child(_without_hard_links, str(db), code)
    assert got[0] is False and [n for n in got[1] if ".corrupt-" not in n] == [], got
    assert got[2:] == [True, True, ["a"], ["h.sqlite"], "left alone"], got


def test_without_hard_links_the_copy_beside_the_path_is_gone_before_the_one_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a volume without hard links the copy made beside the path is deleted before
    the history is copied again at the path itself: kept until the end, the volume
    needed room for two copies, and one with room for one refused the file at every
    write."""
    path = tmp_path / "h.sqlite"
    source = HistoryStore.open(":memory:")
    source.record([update("a", [(1, 1100.0)])])

    def refused(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, os.strerror(errno.EPERM))

    seen: list[list[str]] = []
    fill = HistoryStore._fill.__func__  # type: ignore[attr-defined]

    def watched(cls: type, target: str, conn: object) -> None:
        seen.append(sorted(p.name for p in tmp_path.iterdir()))
        fill(cls, target, conn)

    monkeypatch.setattr(os, "link", refused)
    monkeypatch.setattr(HistoryStore, "_fill", classmethod(watched))
    store = HistoryStore._made_in_place(str(path), source._conn)
    try:
        assert [s.run.run_id for s in store.running()] == ["a"]
    finally:
        store.close()
        source.close()
    assert len(seen) == 2 and seen[1] == ["h.sqlite"], seen  # the first copy gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["h.sqlite"]


# A forecaster killed (OOM, eviction) after making its copy, before linking it.
KILLED_MID_COPY_CHILD = """
import os, signal, sys
from gpu_eta.forecaster.history import HistoryStore
source = HistoryStore.open(":memory:")
os.link = lambda src, dst: os.kill(os.getpid(), signal.SIGKILL)
HistoryStore._made_in_place(sys.argv[1], source._conn)
"""


def test_a_copy_left_by_a_forecaster_killed_mid_create_is_removed_at_open(
    tmp_path: Path, caplog
) -> None:
    """A forecaster killed between making its new history file beside the path and
    linking it into place left ``.<name>.new-<pid>-<random>`` there for ever, a whole
    history's size each time. The next open removes such a copy whose process is
    gone, or that is older than a copy takes; a live process's fresh copy and every
    other name are left as they are."""
    db = tmp_path / "h.sqlite"
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_MID_COPY_CHILD, str(db)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    killed = [p.name for p in tmp_path.iterdir()]
    assert len(killed) == 1 and killed[0].startswith(".h.sqlite.new-"), killed
    (tmp_path / (killed[0] + "-journal")).write_bytes(b"")
    live = f".h.sqlite.new-{os.getpid()}-0123abcd"
    old = f".h.sqlite.new-{os.getpid()}-89abcdef"
    others = [".h.sqlite.new-1-xyz", ".other.sqlite.new-999999-0123abcd", "h.sqlite.new-1-0123abcd"]
    for name in [live, old, *others]:
        (tmp_path / name).write_bytes(b"x")
    os.utime(tmp_path / old, (0, 0))
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        HistoryStore.open(db).close()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([live, *others, "h.sqlite"]), left
    assert "removed 3 unfinished copies" in caplog.text, caplog.text


# -- another process holds the file's lock ------------------------------------------


@pytest.mark.parametrize("how", ["write", "read"])
def test_a_lock_held_past_the_busy_timeout_refuses_the_start_and_moves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """It used to be "damage": the healthy file was renamed *.corrupt-* and an empty
    history started. A writer blocks the start's write probe at once, a reader (a
    backup) at its commit."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.5)
    db = tmp_path / "h.sqlite"
    before = history_of(db)
    with lock_held(db, how), pytest.raises(HistoryError) as caught:
        HistoryStore.open(db)
    message = str(caught.value)
    assert "database is locked" in message and "another process" in message
    assert "not changed or moved" in message and "\n" not in message
    assert set_aside(tmp_path) == [] and digest(db) == before
    store = HistoryStore.open(db)  # the restart once the lock is gone: all there
    assert store.count_finished() == 50
    store.close()


def _without_finish_index(db: Path) -> str:
    """A history of 50 finished runs at ``db`` without ``runs_finished`` (an earlier
    release made it); its digest."""
    history_of(db)
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX runs_finished")
    return digest(db)


def _has_finish_index(db: Path) -> bool:
    with sqlite3.connect(db) as conn:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'runs_finished'")
        return found.fetchone() is not None


class _ReleaseOnWarning(logging.Handler):
    """Ends the lock holder ``proc`` when the index's WARNING is logged: the lock is
    held while the index is built, and gone by the start's write probe."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(logging.WARNING)
        self.proc = proc
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if "runs_finished" in record.getMessage():
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            assert self.proc.wait(60) == 0


def test_a_lock_held_while_the_finish_index_is_built_starts_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file without ``runs_finished`` whose lock another process holds past the busy
    timeout while the index is built, and lets go before the start's write probe: the
    start goes on without the index (it only speeds reads) with one WARNING line, every
    run read; the next start builds it. The index's failure used to stop the start as a
    failed migration does, though nothing was wrong with the file."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.5)
    db = tmp_path / "h.sqlite"
    _without_finish_index(db)
    logger = logging.getLogger("gpu_eta.forecaster.history")
    with lock_held(db, "write") as proc:
        release = _ReleaseOnWarning(proc)
        logger.addHandler(release)
        try:
            store = HistoryStore.open(db)
        finally:
            logger.removeHandler(release)
    (line,) = release.messages
    assert "building index runs_finished failed" in line and "database is locked" in line
    assert "started without it" in line and "next start" in line and "\n" not in line
    assert store.persistent and not _has_finish_index(db)
    assert store.count_finished() == 50 and len(store.finished()) == 50
    store.close()
    assert set_aside(tmp_path) == []
    HistoryStore.open(db).close()  # the next start, nobody holding the lock
    assert _has_finish_index(db)


def test_a_lock_held_through_the_whole_start_refuses_it_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same file under a lock held for good: the index is given up (WARNING) and
    the write probe refuses the start, the file neither changed nor moved; once the
    lock is gone the start builds the index."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.5)
    db = tmp_path / "h.sqlite"
    before = _without_finish_index(db)
    with (
        caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"),
        lock_held(db, "write"),
        pytest.raises(HistoryError) as caught,
    ):
        HistoryStore.open(db)
    message = str(caught.value)
    assert "database is locked" in message and "not changed or moved" in message, message
    assert [r.getMessage() for r in caplog.records if "runs_finished" in r.getMessage()]
    assert set_aside(tmp_path) == [] and digest(db) == before
    store = HistoryStore.open(db)
    assert store.count_finished() == 50
    store.close()
    assert _has_finish_index(db)


def test_a_backup_reading_the_file_for_seconds_is_waited_out_at_start(tmp_path: Path) -> None:
    """A read transaction held 6.5 s (Python's default busy timeout is 5 s): the start
    waits for it (``BUSY_TIMEOUT_SECONDS``) and opens the same file."""
    db = tmp_path / "h.sqlite"
    history_of(db)
    with lock_held(db, "read", seconds=6.5):
        store = HistoryStore.open(db)
    assert store.count_finished() == 50 and set_aside(tmp_path) == []
    store.close()


def test_a_lock_held_during_cycles_fails_them_clearly_and_the_next_one_stores_everything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads and writes under another process's lock give ``HistoryError`` (reads
    used to raise ``sqlite3.OperationalError``); a failed commit leaves the store's
    memory as the file is (``finish`` used to add the run to the finished list
    before its commit failed, and again when it was retried); retried, all is stored."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.3)
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(finished_runs(3))
    store.record([update("a", [(1, 1100.0)])])
    assert len(store.finished()) == 3 and len(store.running()) == 1  # held in memory
    with lock_held(db, "exclusive"):  # nobody else may even read
        calls: dict[str, Callable[[], object]] = {
            "running": store.running,
            "count_finished": store.count_finished,
            "get_meta": lambda: store.get_meta("k"),
            "record": lambda: store.record([update("a", [(2, 1200.0)])]),
            "finish": lambda: store.finish([key("a")], 5000.0),
            "set_meta": lambda: store.set_meta("k", "v"),
        }
        for name, call in calls.items():
            got = outcome(call)
            assert got.startswith("HistoryError: ") and "database is locked" in got, (name, got)
    with lock_held(db, "read"):  # reads go on; a commit cannot
        for name in ("record", "finish", "set_meta"):
            got = outcome(calls[name])
            assert got.startswith("HistoryError: ") and "rolled back" in got, (name, got)
        assert [r.run_id for r in store.finished()] == ["r0", "r1", "r2"]
        (running,) = store.running()
        assert running.run.epoch_times == ((0.0, 1000.0), (1.0, 1100.0))
    store.record([update("a", [(2, 1200.0)])])  # the next cycle
    (done,) = store.finish([key("a")], 5000.0)
    assert done.epoch_times == ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0))
    assert [r.run_id for r in store.finished()] == ["r0", "r1", "r2", "a"]
    store.close()
    fresh = HistoryStore.open(db)
    assert [r.run_id for r in fresh.finished()] == ["r0", "r1", "r2", "a"]
    assert fresh.running() == []
    fresh.close()


# -- failing I/O, a full disk ---------------------------------------------------------


def _open_with_failing_writes(path: str) -> str:
    limit_file_size(1)
    try:
        return outcome(lambda: HistoryStore.open(path))
    finally:
        unlimit_file_size()


@pytest.mark.parametrize("probe_row", [True, False], ids=["probe-row", "no-probe-row"])
def test_an_io_error_at_start_refuses_and_moves_nothing(tmp_path: Path, probe_row: bool) -> None:
    """The old probe rewrote the row it wrote before (SQLite then writes nothing) and
    missed the failing disk; without that row it wrote, failed, and the healthy file
    was set aside."""
    db = tmp_path / "h.sqlite"
    before = history_of(db, probe_row=probe_row)
    got = in_child(_open_with_failing_writes, str(db))
    assert set_aside(tmp_path) == [] and digest(db) == before
    assert got.startswith("HistoryError: ") and "disk I/O error" in got, got
    assert "not changed or moved" in got


def _cycle_writes_on_a_failing_disk(path: str) -> tuple[list[str], tuple, list[str]]:
    store = HistoryStore.open(path)
    store.record([update("a", [(1, 1100.0)])])
    limit_file_size(1)
    try:
        failed = [
            outcome(lambda: store.record([update("a", [(2, 1200.0)])])),
            outcome(lambda: store.finish([key("a")], 5000.0)),
            outcome(lambda: store.set_meta("k", "v")),
        ]
    finally:
        unlimit_file_size()
    store.record([update("a", [(2, 1200.0)])])  # the next cycle, the disk back
    (done,) = store.finish([key("a")], 5000.0)
    store.close()
    return failed, done.epoch_times, [r.run_id for r in HistoryStore.open(path).finished()]


def test_an_io_error_during_a_cycle_is_a_history_error_and_the_retry_stores_all(
    tmp_path: Path,
) -> None:
    """SQLite rolls the transaction back itself after an I/O error; the ROLLBACK that
    followed used to raise "cannot rollback - no transaction is active", a traceback
    that hid the reason."""
    failed, times, finished = in_child(_cycle_writes_on_a_failing_disk, str(tmp_path / "h.sqlite"))
    for got in failed:
        assert got.startswith("HistoryError: ") and "disk I/O error" in got, got
        assert "rolled back" in got
    assert times == ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0))
    assert finished == ["a"]


def test_a_full_disk_during_a_cycle_is_a_history_error_and_the_retry_stores_all(
    tmp_path: Path,
) -> None:
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("a", [(1, 1100.0)])])
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count = {pages}")  # the volume is full
    many = [update(f"n{i}", [(1, 1100.0)], node="x" * 200) for i in range(200)]
    got = outcome(lambda: store.record(many))
    # VolumeFull: the HistoryError of a full volume (a retention pass halves its batch)
    assert got.startswith("VolumeFull: ") and "full" in got and "rolled back" in got, got
    assert issubclass(history_file.VolumeFull, HistoryError)
    assert [s.run.run_id for s in store.running()] == ["a"]
    store._conn.execute("PRAGMA max_page_count = 1073741823")  # space freed
    store.record(many)
    assert len(store.running()) == 201
    store.close()


FULL_DISK_CHILD = (
    FILL_VOLUME
    + """
import json, os, sqlite3, sys
from pathlib import Path
from gpu_eta.forecaster.history import HistoryError, HistoryStore
from gpu_eta.forecaster.runs import Run

d = Path(sys.argv[1])
db = d / "h.sqlite"
store = HistoryStore.open(db)
store.import_finished(
    [Run(f"r{i}", 10, tuple((k, 100.0 * k) for k in range(11)), completed=True)
     for i in range(300)]
)
if sys.argv[2] == "no-probe-row":
    store._conn.execute("DELETE FROM meta WHERE key = 'write_probe'")
store.close()
fill_volume(d)
try:
    HistoryStore.open(db).close()
    got = "ok"
except HistoryError as err:
    got = f"HistoryError: {err}"
files = sorted(os.listdir(d))
os.remove(d / "filler")
store = HistoryStore.open(db)
print(json.dumps([got, files, store.count_finished()]))
store.close()
"""
)


@pytest.mark.parametrize("probe_row", ["probe-row", "no-probe-row"])
def test_a_full_disk_at_start_refuses_and_moves_nothing(tmp_path: Path, probe_row: str) -> None:
    """The start's write probe on a full volume (a real 1 MiB tmpfs). The old probe
    rewrote the row it wrote before (SQLite then writes nothing) and missed it;
    without that row, it failed and the healthy file was set aside."""
    proc = run_on_tmpfs(tmp_path, FULL_DISK_CHILD, [probe_row], "1m")
    assert proc.returncode == 0, proc.stderr
    got, files, runs_after = json.loads(proc.stdout.splitlines()[-1])
    assert files == ["filler", "h.sqlite"]  # nothing set aside
    assert runs_after == 300  # space freed: the same history
    assert got.startswith("HistoryError: ") and "full" in got and "not changed or moved" in got


def _start_and_write(path: str) -> tuple[bool, str]:
    store = HistoryStore.open(path)
    try:
        return store.persistent, outcome(lambda: store.record([update("a", [(1, 1100.0)])]))
    finally:
        store.close()


def test_a_directory_made_read_only_is_found_at_a_later_start_too() -> None:
    """The start's write probe wrote the same value each time, which SQLite does not
    write at all: from the second start on, a file that cannot be written (here its
    directory, where the journal goes) was taken for a writable one and every cycle's
    write failed. Found, the service works on its in-memory copy."""
    with read_only_directory(lambda d: HistoryStore.open(d / "h.sqlite").close()) as directory:
        db = directory / "h.sqlite"
        os.chmod(db, 0o666)  # the file writable, its directory not: no journal
        before = digest(db)
        assert run_unprivileged(_start_and_write, str(db)) == (False, "ok")
        assert digest(db) == before


def test_only_corruption_sets_a_file_aside_also_without_sqlite_error_codes() -> None:
    """Python 3.10 (``requires-python``) has no ``sqlite_errorcode``: SQLite's own
    messages decide. Exceptions made here carry no code, as there."""
    corrupt = history_file.corrupt
    assert corrupt(sqlite3.DatabaseError("file is not a database"))
    assert corrupt(sqlite3.DatabaseError("database disk image is malformed"))
    assert corrupt(sqlite3.OperationalError("malformed database schema (runs)"))
    for text in (
        "database is locked",
        "database or disk is full",
        "disk I/O error",
        "unable to open database file",
    ):
        assert not corrupt(sqlite3.OperationalError(text)), text


# -- text SQLite cannot store ---------------------------------------------------------


def test_an_update_with_text_that_is_not_unicode_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A lone surrogate (a label decoded from JSON "\\ud800") cannot be UTF-8: binding
    it raised UnicodeEncodeError through the transaction, every cycle."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("old", [(1, 1100.0)], pod="p")])
    bad_pod = update("x", [(1, 1100.0)], pod="train-\ud800")
    bad_feature = update("y", [(1, 1100.0)], pod="p", features={"job_name": "j\udcff"})
    batch = [update("a", [(1, 1100.0)], pod="p"), bad_pod, bad_feature]
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        store.record(batch)
        store.record([*batch, update("a", [(2, 1200.0)], pod="p")])  # the next cycle
    assert store.skipped_updates == 2
    lines = [r.getMessage() for r in caplog.records if "not valid Unicode" in r.getMessage()]
    assert len(lines) == 1 and "\\ud800" in lines[0], lines  # once, printable
    got = {s.run.run_id: s.run.epoch_times for s in store.running()}
    assert got == {
        "a": ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0)),
        "old": ((0.0, 1000.0), (1.0, 1100.0)),
    }
    # the bad run completes: finishing it (never stored) must not fail the others
    done = store.finish([("", "train-\ud800", "", "x"), key("a", pod="p")], 5000.0)
    assert [r.run_id for r in done] == ["a"]
    store.record([update("old", [(2, 1200.0)], pod="p")])
    assert store.skipped_updates == 0
    store.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"start_timestamp": math.nan},
        {"epochs_planned": math.nan},
        {"seen_timestamp": math.nan},
        {"epochs_planned": math.inf},
        {"epochs_planned": -3.0},
        {"start_timestamp": math.inf},
        {"seen_timestamp": math.inf},
    ],
    ids=repr,
)
def test_an_update_with_a_number_the_file_cannot_hold_is_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: dict[str, float]
) -> None:
    """A start, plan or time seen that is not finite (or a plan not > 0), from a
    caller that did not check it: NaN binds as NULL and failed the whole transaction
    (every run's write and the cycle's state lost, every cycle), and an infinite or
    negative value was stored, then read as a damaged row at every cycle and never
    finished (an infinite time seen never vanishes). The update is left out, counted
    and said once; the others are recorded."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    odd = dataclasses.replace(update("x", [(1, 1100.0)], pod="q"), **bad)
    batch = [update("a", [(1, 1100.0)], pod="p"), odd]
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        store.record(batch)
        store.record([*batch, update("a", [(2, 1200.0)], pod="p")])  # the next cycle
    got = {s.run.run_id: s.run.epoch_times for s in store.running()}
    assert got == {"a": ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0))}
    assert store.skipped_rows == 0
    assert store.invalid_updates == 1
    lines = [r.getMessage() for r in caplog.records if "out of range" in r.getMessage()]
    assert len(lines) == 1 and "/q//x" in lines[0] and next(iter(bad)) in lines[0], lines
    assert [r.run_id for r in store.finish([key("a", pod="p"), key("x", pod="q")], 5000.0)] == ["a"]
    store.record([update("b", [(1, 1100.0)], pod="p")])
    assert store.invalid_updates == 0
    store.close()


def test_a_cycle_with_a_label_that_is_not_unicode_forecasts_the_other_runs(
    tmp_path: Path,
) -> None:
    """The whole cycle (canned Prometheus answers, a label the API client let through):
    it used to fail every time with UnicodeEncodeError; now the other run is recorded
    and forecast, and the odd run, finished by Prometheus, does not fail the finish."""
    from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, merge

    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        client = CannedClient(
            merge(
                job("good", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300),
                job("odd", 10, [(1, NOW - 200)], NOW - 300, pod="train-x\ud800"),
            )
        )
        forecasts = make_cycle(client, store).run()
        assert [j.run.run_id for j in forecasts.jobs] == ["good"]
        assert [s.run.run_id for s in store.running()] == ["good"]
        assert store.skipped_updates == 1
        assert forecasts.job_errors == {"unencodable_label": 1}  # counted where it shows
        client.answers = merge(
            job("good", 10, [(2, NOW - 100)], NOW - 300),
            job("odd", 10, [(10, NOW - 50)], NOW - 300, pod="train-x\ud800"),  # done
        )
        make_cycle(client, store).run()
    finally:
        store.close()


def test_text_that_is_not_unicode_anywhere_else_is_a_history_error(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    with pytest.raises(HistoryError, match="not valid Unicode"):
        store.set_meta("k", "\ud800")
    added = store.import_finished([*finished_runs(2), Run("bad\ud800", 1, ((0, 0.0), (1, 5.0)))])
    assert added == 2
    assert store.count_finished() == 2
    store.close()


# -- a damaged running row ---------------------------------------------------------------


def test_a_damaged_running_row_does_not_stop_finishing_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``running`` leaves such a row out; ``finish`` used to fail whole on it, every
    cycle, while Prometheus still said the run was done."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("bad", [(1, 1100.0)]), update("good", [(1, 1100.0)])])
    store._conn.execute("UPDATE runs SET epochs_planned = 'abc' WHERE run_id = 'bad'")
    done = store.finish([key("bad"), key("good")], 5000.0)
    assert [r.run_id for r in done] == ["good"]
    assert "1 damaged running run row(s) not finished" in caplog.text
    row = store._conn.execute("SELECT state, epochs_planned FROM runs WHERE run_id = 'bad'")
    assert row.fetchone() == ("running", "abc")  # kept as it is, for a human
    store.close()


def steps_update(run_id: str, n: int) -> RunUpdate:
    """A run counting steps (thinned by cell: ``HistoryStore._thin_step_ends``) that
    reached step ``10 * n``."""
    return RunUpdate(
        run_id=run_id,
        epochs_planned=1000,
        start_timestamp=1000.0,
        epoch_ends=tuple((float(s), 1000.0 + s) for s in range(10, 10 * n + 1, 10)),
        features={"progress_unit": "steps"},
        seen_timestamp=1000.0 + 10 * n,
    )


def test_a_stored_step_that_is_text_does_not_stop_recording_the_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Thinning a run's stored steps did arithmetic on a step a ``sqlite3`` shell set to
    text: ``record`` failed whole, every cycle, for every run."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([steps_update("bad", 3), steps_update("good", 3)])
    store.close()
    shell_edit(
        db,
        "UPDATE epoch_ends SET epoch = 'abc' WHERE epoch = 20.0 "
        "AND run = (SELECT id FROM runs WHERE run_id = 'bad')",
    )
    store = HistoryStore.open(db)
    try:
        store.record([steps_update("bad", 4), steps_update("good", 4)])  # the file's steps
        assert [r.run.run_id for r in store.running()] == ["good"]
        store.record([steps_update("bad", 5), steps_update("good", 5)])  # the steps held
        (good,) = store.running()
        assert good.run.epoch_times[-1] == (50.0, 1050.0)  # the good run's steps recorded
        assert store.skipped_rows == 2  # the damaged step: left out of a read and a write
        assert "1 stored run row(s) left out of the write" in caplog.text
        bad = store._conn.execute("SELECT COUNT(*) FROM epoch_ends WHERE epoch = 'abc'")
        assert bad.fetchone() == (1,)  # kept as it is, for a human
    finally:
        store.close()


def test_a_finished_run_whose_start_is_text_does_not_stop_recording_the_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A completed run's series linger with its pod, so its key is updated again; the
    check whether that is a new attempt, and ``completed_starts``, did arithmetic on a
    start a ``sqlite3`` shell set to text: every cycle failed."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    done = update("done", [(e, 1000.0 + 100 * e) for e in range(1, 5)])
    store.record([done])
    store.finish([key("done")], 1500.0)
    store.close()
    shell_edit(db, "UPDATE runs SET start_timestamp = 'oops' WHERE run_id = 'done'")
    store = HistoryStore.open(db)
    try:
        assert store.completed_starts([key("done")]) == {}
        store.record([done, update("live", [(1, 1100.0)])])
        assert [r.run.run_id for r in store.running()] == ["live"]
        assert "1 completed run row(s) left out of the read of starts" in caplog.text
        assert "1 stored run row(s) left out of the write" in caplog.text
        row = store._conn.execute("SELECT state, start_timestamp FROM runs WHERE run_id = 'done'")
        assert row.fetchone() == ("completed", "oops")  # kept as it is, for a human
    finally:
        store.close()


# -- a cycle that fails between its record and its finish ----------------------------------


class _LockAtBegin:
    """The store's connection, except that its ``nth`` ``BEGIN IMMEDIATE`` meets a write
    lock a real second process takes just then (``lock_held``): a lock appearing
    between two of the store's transactions, as an admin's ``sqlite3`` shell does."""

    def __init__(self, conn: sqlite3.Connection, db: Path, nth: int) -> None:
        self._real = conn
        self._db = db
        self._left = nth

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "BEGIN IMMEDIATE":
            self._left -= 1
            if self._left == 0:
                with lock_held(self._db, "write"):
                    return self._real.execute(sql, *args)
        return self._real.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _means_after_cycles(
    db: Path, fail: str | None, restart: bool = False
) -> dict[str, tuple[float, float]]:
    """Three full-read cycles 60 s apart on a new history at ``db`` (run "a" runs on,
    run "b" reaches its plan in the second); with ``fail`` the second cycle's
    ``record`` or its ``finish`` (after its ``record`` committed) meets another
    process's lock, and the third cycle is its retry, by the same process or, with
    ``restart``, by a new one reading the same file (the process killed there). Each
    run's stored (GPU use, memory) means."""
    from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, means_of, merge

    t = [NOW]
    client = CannedClient({})
    store = HistoryStore.open(db)

    def new_cycle() -> Any:
        return make_cycle(client, store, clock=lambda: t[0], range_every=1, lookback_seconds=600)

    cycle = new_cycle()
    b_ends = [[(1, NOW - 30)], [(1, NOW - 30), (2, NOW + 50)], [(1, NOW - 30), (2, NOW + 50)]]
    try:
        for n, (util_a, memory_a) in enumerate([(0.25, 0.5), (0.75, 0.25), (0.75, 0.25)]):
            t[0] = NOW + 60 * n
            client.answers = merge(
                job("a", 100, [(1, NOW - 30)], NOW - 100, pod="p-a"),
                job("b", 2, b_ends[n], NOW - 100, pod="p-b"),
                means_of("p-a", util_a, memory_a),
                means_of("p-b", 0.5, 0.5),
            )
            if n == 1 and fail is not None:
                nth = {"record": 1, "finish": 2}[fail]
                store._conn = _LockAtBegin(store._conn, db, nth=nth)  # type: ignore[assignment]
                with pytest.raises(HistoryError, match="database is locked"):
                    cycle.run()
                store._conn = store._conn._real  # type: ignore[attr-defined]
                assert [s.run.run_id for s in store.running()] == ["a", "b"]
                if restart:
                    store.close()
                    store = HistoryStore.open(db)
                    cycle = new_cycle()
                continue  # the next cycle is the retry
            cycle.run()
        runs = [s.run for s in store.running()] + store.finished()
        return {
            r.run_id: (
                float(r.features["gpu_utilization_ratio"]),
                float(r.features["memory_utilization_ratio"]),
            )
            for r in runs
        }
    finally:
        store.close()


@pytest.mark.parametrize("fail", ["record", "finish"])
@pytest.mark.parametrize("restart", [False, True], ids=["retried", "restarted"])
def test_a_cycle_failing_at_its_record_or_after_does_not_weigh_the_window_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restart: bool, fail: str
) -> None:
    """The cycle records the means of the seconds since its previous read, then
    finishes; when ``finish`` fails, the next cycle must read on from after those
    seconds. Their means used to be added a second time (run "a": 0.25 for 100 s, then
    0.75 for 60 + 120 s, where it ran 120 s at 0.75): by the same process until the
    store withdrew them, by a restarted one until the cycle's state was stored in the
    same transaction as the means. A ``record`` that fails stores neither, and its
    retry reads the same seconds once."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.3)
    expected = _means_after_cycles(tmp_path / "ok.sqlite", fail=None)
    assert expected["a"] == pytest.approx(
        ((0.25 * 100 + 0.75 * 120) / 220, (0.5 * 100 + 0.25 * 120) / 220)
    )
    got = _means_after_cycles(tmp_path / "failed.sqlite", fail=fail, restart=restart)
    assert got.keys() == {"a", "b"}
    assert got["a"] == pytest.approx(expected["a"], rel=1e-12)
    assert got["b"] == pytest.approx(expected["b"], rel=1e-12)


def _means_of_forecasters(
    db: Path, schedule: list[tuple[float, int, float]]
) -> tuple[float, list[str]]:
    """Run "a"'s stored GPU-use mean after full-read cycles by forecasters sharing the
    history file ``db``: ``schedule`` lists (seconds after NOW, forecaster 0 or 1, the
    run's GPU use over that cycle's window). Forecaster 1 starts after the first
    entry, as a second replica would. Run "a"'s stored mean, and the messages of the
    cycles that met ``HistoryConflict`` (left failed, as the service leaves them)."""
    from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, means_of, merge

    t = [NOW]
    client = CannedClient({})
    stores = [HistoryStore.open(db), HistoryStore.open(db)]
    cycles: list[Any] = []
    failed: list[str] = []
    try:
        for n, (after, which, util) in enumerate(schedule):
            t[0] = NOW + after
            while len(cycles) <= which and len(cycles) <= n:
                cycles.append(
                    make_cycle(
                        client,
                        stores[len(cycles)],
                        clock=lambda: t[0],
                        range_every=1,
                        lookback_seconds=600,
                    )
                )
            client.answers = merge(
                job("a", 100, [(1, NOW - 30)], NOW - 100, pod="p-a"), means_of("p-a", util, 0.5)
            )
            try:
                cycles[which].run()
            except HistoryConflict as err:
                failed.append(str(err))
        (a,) = [s.run for s in stores[0].running()]
        return float(a.features["gpu_utilization_ratio"]), failed
    finally:
        for store in stores:
            store.close()


def test_a_second_forecaster_on_the_same_file_does_not_count_a_window_twice(
    tmp_path: Path,
) -> None:
    """Two forecasters on one history file (a second replica started by mistake) used
    to add the same seconds' means twice: each read on from the query time it held in
    memory. Forecaster 0 reads at 0 s, 1 at 60 s, 0 again at 120 s: its read spans the
    60 s the other stored, so its write is refused (``HistoryConflict``, nothing
    written, a message naming the likely cause), and at 180 s it reads on from the
    file's state. Run "a" (0.25 for 100 s, then 0.75) then holds what one forecaster
    reading at 0, 60 and 180 s stores: (0.25·100 + 0.75·180) / 280 = 0.571; the old
    code stored (0.25·100 + 0.75·(60 + 120 + 60)) / 340 = 0.603."""
    one, failed = _means_of_forecasters(
        tmp_path / "one.sqlite", [(0, 0, 0.25), (60, 0, 0.75), (180, 0, 0.75)]
    )
    assert one == pytest.approx((0.25 * 100 + 0.75 * 180) / 280) and failed == []
    two, failed = _means_of_forecasters(
        tmp_path / "two.sqlite", [(0, 0, 0.25), (60, 1, 0.75), (120, 0, 0.75), (180, 0, 0.75)]
    )
    assert two == pytest.approx(one, rel=1e-12)
    (message,) = failed
    assert "another process wrote it since this one read it" in message
    assert "a second forecaster on the same file?" in message and "Nothing was written" in message


def test_a_record_expecting_another_state_writes_nothing(tmp_path: Path) -> None:
    """``record(expect=...)`` checks the stored values under the write lock: a value
    that differs (or is absent where one is expected, or present where none is)
    refuses the whole write, runs and state alike."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    try:
        store.record([update("r0", [(1, 1100.0)])], state={"k": "1"}, expect={"k": None})
        before = digest(db)
        for expect in ({"k": None}, {"k": "2"}, {"k": "1", "other": "x"}):
            with pytest.raises(HistoryConflict, match="another process wrote it"):
                store.record([update("r1", [(1, 1100.0)])], state={"k": "3"}, expect=expect)
            assert digest(db) == before
        assert store.get_meta("k") == "1"
        assert [s.run.run_id for s in store.running()] == ["r0"]
        store.record([update("r1", [(1, 1100.0)])], state={"k": "3"}, expect={"k": "1"})
        assert store.get_meta("k") == "3"
        assert [s.run.run_id for s in store.running()] == ["r0", "r1"]
    finally:
        store.close()


# -- text another tool wrote that is not UTF-8 ---------------------------------------------


def shell_edit(db: Path, *statements: str) -> None:
    """``statements`` run on ``db`` as an admin's ``sqlite3`` shell runs them: SQLite
    does not check what they store (``CAST(x'ff' AS TEXT)``: text columns holding bytes
    that are not UTF-8; text in a REAL column)."""
    conn = sqlite3.connect(db)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()


def test_a_row_whose_text_is_not_utf8_is_skipped_and_counted_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Every read of the history used to fail ("Could not decode to UTF-8 column"), so
    one such row lost the forecaster its whole history. Now that row is left out of the
    read and counted, one WARNING line per read names the count, the other runs are
    read, and the read changes nothing in the file."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.import_finished(finished_runs(4))
    store.record([update("live0", [(1, 1100.0)]), update("live1", [(1, 1100.0)])])
    store.close()
    shell_edit(
        db,
        "UPDATE runs SET node = CAST(x'ff' AS TEXT) WHERE run_id = 'live1'",
        "UPDATE runs SET run_id = CAST(x'72ff31' AS TEXT) WHERE run_id = 'r1'",
        "UPDATE runs SET features = CAST(x'7b226a6f625f6e616d65223a2022ff227d' AS TEXT)"
        " WHERE run_id = 'r2'",  # {"job_name": "\xff"}
    )
    store = HistoryStore.open(db)
    before = digest(db)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.history"):
        assert [s.run.run_id for s in store.running()] == ["live0"]
        assert store.skipped_rows == 1
        assert [r.run_id for r in store.finished()] == ["r0", "r3"]
        assert store.skipped_rows == 3  # rows left out now: 1 running, 2 finished
        assert [s.run.run_id for s in store.running()] == ["live0"]  # the same: not logged
    lines = [r for r in caplog.records if "left out" in r.getMessage()]
    assert [(r.levelname, r.getMessage().split(": ", 1)[1].split(" (")[0]) for r in lines] == [
        ("WARNING", "1 running run row(s) left out of the read"),
        ("WARNING", "2 finished run row(s) left out of the read"),
    ]
    assert "not valid UTF-8" in lines[0].getMessage() and "'node'" in lines[0].getMessage()
    assert digest(db) == before  # nothing stored is lost, nothing rewritten
    assert store.count_finished() == 4
    store.record([update("live1", [(2, 1200.0)])])  # the run's next update repairs it
    assert [s.run.run_id for s in store.running()] == ["live0", "live1"]
    assert store.skipped_rows == 2
    (done,) = store.finish([key("live1")], 5000.0)
    assert done.epoch_times == ((0.0, 1000.0), (1.0, 1100.0), (2.0, 1200.0))
    store.close()


def test_a_meta_value_that_is_not_utf8_reads_with_replacement_characters(
    tmp_path: Path,
) -> None:
    """The cycle's stored state is read at every start: such a value used to stop the
    start; its callers read what is left (an unreadable time is no time)."""
    db = tmp_path / "h.sqlite"
    HistoryStore.open(db).close()
    shell_edit(db, "INSERT INTO meta (key, value) VALUES ('k', CAST(x'31ff32' AS TEXT))")
    store = HistoryStore.open(db)
    assert store.get_meta("k") == "1\ufffd2"
    store.set_meta("k", store.get_meta("k") or "")  # and can be written back
    store.close()


def test_a_record_that_fails_stores_neither_its_means_nor_the_callers_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cycle's state says where its next read starts; stored without the means of
    the seconds before it, those seconds would be lost, and the means stored without
    it would be read again. A record that meets a lock stores neither; its retry both."""
    monkeypatch.setattr(history_file, "BUSY_TIMEOUT_SECONDS", 0.3)
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    store.record([update("a", util_mean=0.25, weight_seconds=100.0)], state={"t": "1000.0"})
    read = [update("a", util_mean=0.75, weight_seconds=60.0)]
    with lock_held(db, "write"), pytest.raises(HistoryError, match="database is locked"):
        store.record(read, state={"t": "1060.0"})
    store.close()
    store = HistoryStore.open(db)
    assert store.get_meta("t") == "1000.0"
    assert store.running()[0].run.features["gpu_utilization_ratio"] == pytest.approx(0.25)
    store.record(read, state={"t": "1060.0"})
    store.close()
    store = HistoryStore.open(db)
    assert store.get_meta("t") == "1060.0"
    assert store.running()[0].run.features["gpu_utilization_ratio"] == pytest.approx(
        (0.25 * 100 + 0.75 * 60) / 160
    )
    store.close()


def _scramble_pages(db: Path, seed: int = 7) -> None:
    """Random bytes over every page of ``db`` but the first, written by another
    process's hand while a store has it open (a disk returning garbage), and the
    header's change counter bumped so that the store's connection reads them."""
    rng = random.Random(seed)
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        header = fh.read(100)
        page = int.from_bytes(header[16:18], "big") or 65536
        counter = int.from_bytes(header[24:28], "big")
        fh.seek(24)
        fh.write(((counter + 1) % 2**32).to_bytes(4, "big"))
        for offset in range(page, size, page):
            fh.seek(offset)
            fh.write(rng.randbytes(page))


def test_a_file_set_aside_during_service_takes_the_retried_write(tmp_path: Path, caplog) -> None:
    """A damaged file set aside by a cycle's ``record``: the retry runs on a new, empty
    history (docs/forecaster.md). It expected the state this process read from the old
    file (``expect``), which the new file cannot hold: the retry failed as a second
    forecaster (``HistoryConflict``: "last_query_timestamp is None, this process read
    '1060.0'") and the cycle's write was lost. A new file holds no state, so the retry
    expects none, and the write is kept."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    try:
        store.record(
            [update(f"r{i}", [(1, 1100.0)]) for i in range(2000)], state={LAST_QUERY_KEY: "1060.0"}
        )
        _scramble_pages(db)
        store.record(
            [update("after", [(1, 1150.0)])],
            state={LAST_QUERY_KEY: "1120.0"},
            expect={LAST_QUERY_KEY: "1060.0"},
        )
        assert store.get_meta(LAST_QUERY_KEY) == "1120.0"
        assert [s.run.run_id for s in store.running()] == ["after"]
    finally:
        store.close()
    assert len(set_aside(tmp_path)) == 1 and "moved to h.sqlite.corrupt-" in caplog.text
    reopened = HistoryStore.open(db)
    try:
        assert reopened.get_meta(LAST_QUERY_KEY) == "1120.0"
        assert [s.run.run_id for s in reopened.running()] == ["after"]
    finally:
        reopened.close()


def test_a_new_file_another_forecaster_wrote_still_refuses_the_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry on a new history expects no state, not any: a new file another
    forecaster made and wrote meanwhile (it set the same damaged file aside) still
    refuses the write as a second forecaster's."""
    db = tmp_path / "h.sqlite"
    store = HistoryStore.open(db)
    real_new_history = HistoryStore._new_history

    def other_wrote_first(spath: str, err: HistoryError) -> HistoryStore:
        fresh = real_new_history(spath, err)
        fresh.set_meta(LAST_QUERY_KEY, "1090.0")  # the other forecaster's cycle
        return fresh

    try:
        store.record(
            [update(f"r{i}", [(1, 1100.0)]) for i in range(2000)], state={LAST_QUERY_KEY: "1060.0"}
        )
        _scramble_pages(db)
        monkeypatch.setattr(HistoryStore, "_new_history", staticmethod(other_wrote_first))
        with pytest.raises(HistoryConflict, match=r"'1090\.0', this process read None"):
            store.record(
                [update("after", [(1, 1150.0)])],
                state={LAST_QUERY_KEY: "1120.0"},
                expect={LAST_QUERY_KEY: "1060.0"},
            )
        assert store.get_meta(LAST_QUERY_KEY) == "1090.0" and store.running() == []
    finally:
        store.close()
