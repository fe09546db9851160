"""What the progress store keeps when its files misbehave: nothing stored is lost.

Real state files and journals in ``tmp_path``, real restarts (a new ``ProgressStore``
on the same files), a real listener on a loopback socket where the answer matters.
Read errors other than "not found" (EIO, EACCES) cannot be produced on demand as
root on a healthy disk, so those tests make the store's ``open`` of one chosen
file raise ``OSError(EIO)``; everything else about the files is real.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_eta.exporter import progress_journal, progress_state_file
from gpu_eta.exporter.collectors import StartupError
from gpu_eta.exporter.progress import InvalidReport, Report, parse_report
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_journal import read_journal
from gpu_eta.exporter.progress_state_file import parse_state
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.integration.helpers import wait_until
from tests.support.clock import Clock
from tests.support.net import post_progress

NOW = time.time()  # run_start is checked against it: keep it a real "now"
POD = PodMeta("ns", "sender", "uid-s", ip="127.0.0.2", container_ids={"main": "c1"})


def merge(store: ProgressStore, pod: str, epoch: float = 1.0) -> bool:
    """One report as the listener makes it: returns once the store says it is
    durable (True) or not (False); True at once for a store without a journal."""
    done = threading.Event()
    result: list[bool] = []

    def ack(ok: bool) -> None:
        result.append(ok)
        done.set()

    store.merge("ns", pod, "main", "http", Report(run_id="r", epoch=epoch, epochs=9), NOW, ack)
    if not store.journaled:
        return True
    assert done.wait(10), "never acknowledged"
    return result[0]


def pods(store: ProgressStore) -> list[str]:
    return sorted(p.pod for p in store.snapshot())


def fail_reads(monkeypatch: pytest.MonkeyPatch, path: Path, times: int | None) -> list[int]:
    """Make the store's ``open(path)`` for reading raise EIO ``times`` times (None:
    always); returns a one-item list counting the failures."""
    failed = [0]

    def flaky_open(file: object, mode: str = "r", *args: object, **kwargs: object):
        if str(file) == str(path) and "r" in mode and (times is None or failed[0] < times):
            failed[0] += 1
            raise OSError(errno.EIO, "Input/output error", str(file))
        return open(file, mode, *args, **kwargs)  # the store closes it

    monkeypatch.setattr(progress_state_file, "open", flaky_open, raising=False)
    return failed


def saved_store(path: Path, names: str = "abc") -> bytes:
    """A state file holding one row per pod name (then closed cleanly); its bytes."""
    store = ProgressStore(path)
    for name in names:
        assert merge(store, name)
    store.close()
    return path.read_bytes()


def journal_only_store(path: Path, names: str = "abc") -> bytes:
    """Reports answered 200 that only the journal holds (killed before any save);
    the journal's bytes."""
    store = ProgressStore(path, save_interval_seconds=3600)
    for name in names:
        assert merge(store, name)
    store.journal.close()  # flushed; then "killed": no save, no close
    assert not path.exists()
    return journal_path(path).read_bytes()


def journal_path(path: Path) -> Path:
    return path.with_name(path.name + ".journal")


def restart_and_report(path: Path) -> ProgressStore:
    """A restart that saves as soon as it can, a new report, the scheduler's read,
    a clean stop: every chance to write over what the restart could not read."""
    store = ProgressStore(path, save_interval_seconds=0)
    merge(store, "d")
    store.snapshot()
    store.close()
    return store


# -- 1. a read error other than "not found" never leads to a write over the file ------


def test_one_failed_read_of_the_state_file_loses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    saved_store(path)
    failed = fail_reads(monkeypatch, path, times=1)
    restart_and_report(path)
    assert failed == [1]
    monkeypatch.undo()
    assert pods(ProgressStore(path)) == ["a", "b", "c", "d"]
    assert sorted(f.name for f in tmp_path.iterdir()) == ["progress.json", "progress.json.journal"]


def test_one_failed_read_of_the_journal_loses_nothing(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    journal_only_store(path)
    failed = fail_reads(monkeypatch, journal_path(path), times=1)
    restart_and_report(path)
    assert failed == [1]
    monkeypatch.undo()
    assert pods(ProgressStore(path)) == ["a", "b", "c", "d"]


def test_a_state_file_that_stays_unreadable_is_moved_aside_unchanged(tmp_path, monkeypatch, caplog):
    path = tmp_path / "progress.json"
    before = saved_store(path)
    fail_reads(monkeypatch, path, times=None)
    with caplog.at_level(logging.ERROR):
        restarted = restart_and_report(path)
    monkeypatch.undo()
    (aside,) = tmp_path.glob("progress.json.unreadable-*")
    assert aside.read_bytes() == before  # kept for a human, byte for byte
    assert sorted(p.pod for p in parse_state(aside.read_bytes()).rows) == ["a", "b", "c"]
    assert pods(ProgressStore(path)) == ["d"]
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "cannot read" in line and aside.name in line and "\n" not in line
    assert restarted.not_persisting is None  # it goes on persisting new progress


def test_a_journal_that_stays_unreadable_is_moved_aside_unchanged(tmp_path, monkeypatch):
    path = tmp_path / "progress.json"
    before = journal_only_store(path)
    fail_reads(monkeypatch, journal_path(path), times=None)
    restart_and_report(path)
    monkeypatch.undo()
    (aside,) = tmp_path.glob("progress.json.journal.unreadable-*")
    assert aside.read_bytes() == before
    rows, damaged, torn = read_journal(aside.read_bytes())
    assert sorted(row["pod"] for _, row in rows) == ["a", "b", "c"] and not damaged and not torn
    assert pods(ProgressStore(path)) == ["d"]


def http_post(port: int, body: bytes, source: str = "127.0.0.2") -> bytes:
    return post_progress("127.0.0.1", port, body, source)


def test_an_unreadable_file_that_cannot_be_moved_aside_is_never_written_over(
    tmp_path, monkeypatch, caplog
):
    """The double fault: unreadable, and the rename fails too. Then nothing is
    written at all: reports are applied in memory and answered 503, not 200."""
    path = tmp_path / "progress.json"
    before = saved_store(path)
    fail_reads(monkeypatch, path, times=None)
    refuse_renames(monkeypatch, path)
    with caplog.at_level(logging.ERROR):
        store = ProgressStore(path, save_interval_seconds=0)
    listener = ProgressListener("127.0.0.1", 0, store, {POD.ip: POD}.get, lambda: [POD])
    listener.start()
    try:
        answer = http_post(listener.port, b'{"epoch": 2, "epochs": 9}')
    finally:
        listener.stop()
    assert answer.startswith(b"HTTP/1.1 503 "), answer
    # no Retry-After: the report is applied, and the next one is as welcome as ever
    assert b"retry-after" not in answer.lower()
    assert [p.pod for p in store.snapshot()] == ["sender"]  # applied, shown
    store.close()
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert not journal_path(path).exists() or journal_path(path).read_bytes() == b""
    assert store.not_persisting and "cannot read" in store.not_persisting
    assert "memory only" in caplog.text


def test_a_directory_at_the_state_path_is_left_alone_and_nothing_is_written(tmp_path):
    path = tmp_path / "progress.json"
    path.mkdir()
    (path / "keep").write_text("x")
    store = ProgressStore(path, save_interval_seconds=0)
    assert merge(store, "a") is False  # answered 503 by the listener
    assert store.not_persisting and "directory" in store.not_persisting
    assert pods(store) == ["a"]
    store.close()
    assert (path / "keep").read_text() == "x"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["progress.json"]  # no journal


# -- memory-only mode ends once the cause is gone, without writing over anything -----


def refuse_renames(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``os.rename`` of ``path`` fails (read-only mount): it cannot be moved aside."""
    real_rename = os.rename

    def no_rename(src: object, dst: object, *args: object, **kwargs: object) -> None:
        if str(src) == str(path):
            raise OSError(errno.EROFS, "Read-only file system")
        real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", no_rename)


def test_the_store_persists_again_once_the_unreadable_file_can_be_moved_aside(
    tmp_path, monkeypatch, caplog
):
    path = tmp_path / "progress.json"
    before = saved_store(path)  # a, b, c: never loaded by the store below
    fail_reads(monkeypatch, path, times=None)
    refuse_renames(monkeypatch, path)
    clock = Clock()
    store = ProgressStore(path, save_interval_seconds=0, clock=clock)
    assert merge(store, "x") is False  # 503: in memory only
    clock.now += 30
    store.save()  # retried: still neither readable nor movable, so nothing is written
    assert merge(store, "y") is False
    assert path.read_bytes() == before and not list(tmp_path.glob("*.unreadable-*"))
    monkeypatch.undo()  # the mount is writable again
    clock.now += 29
    store.save()  # not due: at most one attempt per 30 s
    assert store.not_persisting is not None
    clock.now += 1
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.progress_store"):
        store.save()
    assert store.not_persisting is None
    (aside,) = tmp_path.glob("progress.json.unreadable-*")
    assert aside.read_bytes() == before  # kept for a human, byte for byte, never written over
    (line,) = [r.getMessage() for r in caplog.records if "persisting again" in r.getMessage()]
    assert aside.name in line and "2 entries" in line and "\n" not in line
    assert merge(store, "z") is True  # 200 again: journaled and synced
    store.journal.close()  # killed: no save, no close
    assert pods(ProgressStore(path)) == ["x", "y", "z"]  # what memory held, and the new one


def test_a_damaged_state_file_that_could_not_be_kept_aside_is_kept_aside_on_retry(
    tmp_path, monkeypatch
):
    path = tmp_path / "progress.json"
    path.write_bytes(b"\x00 not a state file")
    refuse_renames(monkeypatch, path)
    clock = Clock()
    store = ProgressStore(path, clock=clock)
    assert store.not_persisting and "damaged" in store.not_persisting
    assert merge(store, "a") is False
    monkeypatch.undo()
    clock.now += 30
    store.save()
    assert store.not_persisting is None
    (aside,) = tmp_path.glob("progress.json.corrupt-*")
    assert aside.read_bytes() == b"\x00 not a state file"
    assert [p.pod for p in parse_state(path.read_bytes()).rows] == ["a"]
    store.close()


def test_a_merge_retries_on_its_own_thread_without_waiting_for_the_disk(tmp_path, monkeypatch):
    """The listener merges on its event loop: an attempt a report starts must not
    hold it while the disk is slow. Reports merged meanwhile are answered 503 and
    still saved."""
    path = tmp_path / "progress.json"
    path.mkdir()  # a directory at the state path: memory only
    clock = Clock()
    store = ProgressStore(path, save_interval_seconds=3600, clock=clock)
    assert merge(store, "a") is False
    path.rmdir()  # an admin removed it
    gate, writing = threading.Event(), threading.Event()
    real_replace = os.replace

    def slow_replace(src: object, dst: object, *args: object, **kwargs: object) -> None:
        if str(dst) == str(path):
            writing.set()
            assert gate.wait(10)
        real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", slow_replace)
    clock.now += 30
    start = time.monotonic()
    assert merge(store, "b") is False  # starts the attempt; not durable itself
    assert time.monotonic() - start < 2.0  # not the 10 s the held write waits
    assert writing.wait(10)  # the attempt is writing the state file, held there
    assert merge(store, "c") is False  # meanwhile: in memory, answered 503
    gate.set()
    wait_until(lambda: store.not_persisting is None, 10, interval=0.01, what="persisting again")
    assert merge(store, "d") is True
    store.close()
    assert pods(ProgressStore(path)) == ["a", "b", "c", "d"]


def test_reports_are_answered_200_again_once_the_state_path_is_usable(tmp_path):
    path = tmp_path / "progress.json"
    path.mkdir()
    clock = Clock()
    store = ProgressStore(path, clock=clock)
    listener = ProgressListener("127.0.0.1", 0, store, {POD.ip: POD}.get, lambda: [POD])
    listener.start()
    try:
        assert http_post(listener.port, b'{"epoch": 1, "epochs": 9}').startswith(b"HTTP/1.1 503 ")
        path.rmdir()
        clock.now += 30
        http_post(listener.port, b'{"epoch": 2, "epochs": 9}')  # starts the attempt
        wait_until(lambda: store.not_persisting is None, 10, interval=0.01, what="persisting again")
        answer = http_post(listener.port, b'{"epoch": 3, "epochs": 9}')
    finally:
        listener.stop()
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    store.journal.close()  # killed: the 200 was on disk
    (row,) = ProgressStore(path).snapshot()
    assert (row.pod, row.epoch) == ("sender", 3)


def simulated_runtime(tmp_path: Path, state: Path):
    """The exporter's runtime on the simulated node with ``state`` as its
    ``--progress.state-file`` (not started)."""
    from gpu_eta.exporter.config import config_from_mapping
    from gpu_eta.exporter.runtime import Runtime

    return Runtime(
        config_from_mapping(
            {
                "simulate": True,
                "web.listen-address": "127.0.0.1:0",
                "progress.listen-address": "127.0.0.1:0",
                "path.pod-logs": str(tmp_path),
                "progress.state-file": str(state),
            }
        )
    )


def test_the_runtime_refuses_a_directory_as_state_file_in_one_line(tmp_path):
    runtime = simulated_runtime(tmp_path, tmp_path)
    try:
        with pytest.raises(StartupError) as err:
            runtime.start()
    finally:
        runtime.stop()
    assert "not a regular file" in str(err.value) and "\n" not in str(err.value)


def test_a_state_path_that_cannot_be_checked_still_starts_the_exporter(tmp_path, monkeypatch):
    """EACCES on the path (a hostPath directory of another owner with capabilities
    dropped, a denied SELinux label: what root here cannot be made to get, so
    ``os.stat`` says it for that path alone). The store deals with an unreadable
    file (it keeps progress in memory and says so); the start must not refuse, and
    GPU metrics are served (the check raised ``PermissionError``: exit 1)."""
    state = tmp_path / "denied" / "progress.json"
    real_stat = os.stat

    def stat(path, *args, **kwargs):
        if str(path).startswith(str(state.parent)):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", stat)
    runtime = simulated_runtime(tmp_path, state)
    try:
        runtime.start()
        assert runtime.store is not None
    finally:
        runtime.stop()


def test_a_fifo_at_the_state_path_does_not_hang_the_start(tmp_path):
    path = tmp_path / "progress.json"
    os.mkfifo(path)
    made: list[ProgressStore] = []
    worker = threading.Thread(target=lambda: made.append(ProgressStore(path)), daemon=True)
    worker.start()
    worker.join(20)
    if worker.is_alive():  # release the blocked open() before failing
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail("opening the state file waited for a writer to the FIFO")
    (store,) = made
    assert store.not_persisting and "not a regular file" in store.not_persisting


# -- 4. a torn journal tail is cut, not completed into a damaged line ----------------


def test_a_torn_journal_tail_is_cut_so_the_next_start_sees_no_damage(tmp_path, caplog):
    path = tmp_path / "progress.json"
    store = ProgressStore(path)
    merge(store, "pod-0")
    store.close()  # clean: state saved, journal empty
    with open(journal_path(path), "ab") as fh:  # a crash in the middle of a line
        fh.write(b'deadbeef {"seq":2,"row":{"namesp')
    store = ProgressStore(path)
    assert merge(store, "pod-1")
    store.journal.close()  # then killed: no save
    data = journal_path(path).read_bytes()
    assert data.endswith(b"\n") and read_journal(data)[1:] == (0, False)
    with caplog.at_level(logging.ERROR):
        again = ProgressStore(path)
    assert pods(again) == ["pod-0", "pod-1"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_journal_of_one_torn_line_is_cut_to_nothing(tmp_path):
    path = tmp_path / "progress.json"
    journal_path(path).write_bytes(b"x" * 200_000)  # no newline at all (longer than a chunk)
    store = ProgressStore(path)
    assert merge(store, "a")
    store.journal.close()
    rows, damaged, torn = read_journal(journal_path(path).read_bytes())
    assert [row["pod"] for _, row in rows] == ["a"] and (damaged, torn) == (0, False)


# A state save that stalls inside its temporary file, in a process of its own: killed there
_STALLED_SAVE = """
import sys, threading, time
from pathlib import Path
from gpu_eta.exporter import progress_store
from gpu_eta.exporter.progress import Report
store = progress_store.ProgressStore(Path(sys.argv[1]))
report = Report(run_id="r", epoch=2, epochs=9)
durable = threading.Event()
store.merge("ns", "sender", "main", "http", report, float(sys.argv[2]), lambda ok: durable.set())
assert durable.wait(10)
def stalled(obj, fh):
    fh.write("{" + " " * 100_000)
    fh.flush()
    print("saving", flush=True)
    time.sleep(60)
progress_store.json.dump = stalled
store.save()
"""


def test_a_save_killed_mid_write_leaves_no_temporary_file_after_the_next_start(tmp_path):
    """kill -9 (the OOM killer, a node drain past its grace) inside a state save leaves
    its temporary file (a whole state's size, on a hostPath kept for months): the next
    start removes it, and only it, while the report the journal holds is kept."""
    path = tmp_path / "progress.json"
    saver = subprocess.Popen(
        [sys.executable, "-c", _STALLED_SAVE, str(path), str(NOW)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert saver.stdout is not None and saver.stdout.readline() == "saving\n"
    finally:
        saver.kill()
        saver.wait(10)
    (left,) = tmp_path.glob(".progress.json.*.tmp")
    assert left.stat().st_size > 100_000
    theirs = [".progress.json.tmp", ".progress.json.mine.tmp", ".other.json.abcd_123.tmp"]
    for name in theirs:
        (tmp_path / name).write_text("not ours")
    store = ProgressStore(path)
    assert [p.epoch for p in store.snapshot()] == [2]  # the journal's report kept
    assert not left.exists()
    assert sorted(p.name for p in tmp_path.glob(".*.tmp")) == sorted(theirs)


# -- 5. set-aside copies never overwrite one another --------------------------------


def test_setting_aside_never_overwrites_an_earlier_copy(tmp_path):
    path = tmp_path / "progress.json"
    now = int(time.time())
    earlier = {
        path.with_name(f"progress.json.corrupt-{t}"): f"copy {t}".encode()
        for t in range(now - 2, now + 60)  # whatever second the set-aside runs in
    }
    for aside, data in earlier.items():
        aside.write_bytes(data)
    path.write_bytes(b"\x00 not a state file")
    assert ProgressStore(path).snapshot() == ()
    for aside, data in earlier.items():
        assert aside.read_bytes() == data, f"{aside.name} was overwritten"
    (new,) = set(tmp_path.glob("progress.json.corrupt-*")) - set(earlier)
    assert new.read_bytes() == b"\x00 not a state file"


# -- a journal over the read limit is kept, not cut at the limit by the next save ----


def test_an_oversized_journal_is_moved_aside_whole_and_its_newest_part_served(
    tmp_path, monkeypatch, caplog
):
    path = tmp_path / "progress.json"
    names = "abcdefghijklmnopqrst"
    before = journal_only_store(path, names=names)
    monkeypatch.setattr(progress_journal, "MAX_JOURNAL_BYTES", len(before) // 2)
    store = ProgressStore(path, save_interval_seconds=0)  # replays, then saves
    served = pods(store)
    store.close()
    (aside,) = tmp_path.glob("progress.json.journal.oversized-*")
    assert aside.read_bytes() == before  # every acknowledged line is still on disk
    assert len(read_journal(aside.read_bytes())[0]) == 20
    # the newest lines (each the latest state of its container) fit under the limit
    assert 0 < len(served) < 20 and served == sorted(names[-len(served) :])
    (line,) = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert "newest part replayed" in line.getMessage() and aside.name in line.getMessage()


@pytest.mark.parametrize(
    ("past_the_line", "first_served"),
    [(0, 8), (-1, 8), (1, 9)],  # the window begins on line 8, just before it, inside it
)
def test_an_oversized_journal_window_starting_on_a_line_replays_that_line(
    tmp_path, monkeypatch, caplog, past_the_line, first_served
):
    """The newest ``MAX_JOURNAL_BYTES`` are replayed from the first whole line in them:
    a window that begins exactly where a line begins must replay that line (its
    container's latest acknowledged state), not drop it as the cut tail of the one
    before; a window that begins inside a line drops that line."""
    path = tmp_path / "progress.json"
    names = "abcdefghijklmnopqrst"
    before = journal_only_store(path, names=names)
    lines = before.splitlines(keepends=True)
    assert len(lines) == len(names)
    start = sum(len(line) for line in lines[:8]) + past_the_line  # where the window begins
    monkeypatch.setattr(progress_journal, "MAX_JOURNAL_BYTES", len(before) - start)
    store = ProgressStore(path, save_interval_seconds=3600)
    served = pods(store)
    store.close()
    assert served == sorted(names[first_served:])
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    skipped = sum(len(line) for line in lines[:first_served])
    assert f"its oldest {skipped} bytes not" in line


# -- 8. a run_start in the future is refused whatever the source --------------------


def test_run_start_in_the_future_is_refused_by_the_store_as_by_http():
    future = NOW + 10 * 365 * 86400
    body = json.dumps({"epoch": 1, "epochs": 5, "run_start": future})
    with pytest.raises(InvalidReport):
        parse_report(body, now=NOW)
    store = ProgressStore()
    for source in ("log", "http"):
        with pytest.raises(InvalidReport, match="future"):
            store.merge("ns", "p", "main", source, Report(epoch=1, epochs=5, run_start=future), NOW)
    assert store.snapshot() == ()
    # the same run_start is fine once it is no longer in the future of the report
    store.merge("ns", "p", "main", "log", Report(epoch=1, epochs=5, run_start=future), future)


def test_a_report_continuing_the_stored_run_is_not_refused_for_its_start():
    """The clock stepped back after a named run was stored: its next report states the
    start it stated (accepted then), now ahead of the report's time. Nothing in it is
    a start to come, so the store takes it, from either source; a start it has not
    stored (another ``run_id``, a later start) is refused as before."""
    store = ProgressStore()
    for source in ("log", "http"):
        run = Report(run_id="r", run_start=NOW, epoch=1, epochs=5)
        store.merge("ns", "p", "main", source, run, NOW + 60)
        back = NOW - 3600  # the clock stepped back an hour
        p = store.merge("ns", "p", "main", source, replace(run, epoch=2), back)
        # taken, held at the run's latest time (its times never go back)
        assert (p.run_id, p.run_start_timestamp, p.epoch, p.held_epoch) == ("r", NOW, 1, 2)
        assert p.held_epoch_timestamp == NOW + 60
        for other in (replace(run, run_id="s"), replace(run, run_start=NOW + 1)):
            with pytest.raises(InvalidReport, match="future"):
                store.merge("ns", "p", "main", source, other, back)
        assert store.get("ns", "p", "main", source) == p


def test_a_log_marker_line_cannot_store_a_future_run_start(tmp_path):
    from gpu_eta.exporter.collectors.logs import LogProgressCollector

    pod = PodMeta("ml", "p", "uid-1", ip="127.0.0.40")
    directory = tmp_path / "ml_p_uid-1" / "main"
    directory.mkdir(parents=True)
    body = json.dumps({"epoch": 1, "epochs": 5, "run_start": NOW + 10 * 365 * 86400})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime(NOW))
    (directory / "0.log").write_text(f"{stamp} stdout F GPU_ETA_PROGRESS {body}\n")
    store = ProgressStore()
    LogProgressCollector(tmp_path, store, lambda: [pod]).poll()
    assert store.snapshot() == ()


# -- 9. the totals an ended plan-less run was given are stored like any plan ----------


def stop_store(store: ProgressStore, path: Path, stop: str) -> None:
    """Stop ``store`` as a restart test asks: ``saved`` (a clean close: the state file)
    or ``killed`` (the journal flushed, no save: the journal alone)."""
    if stop == "saved":
        store.close()
    else:
        store.journal.close()
        assert not path.exists()


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_the_totals_of_an_ended_plan_less_run_survive_a_restart(tmp_path, stop):
    """The forecaster learns such a run's duration from the totals its end gave it:
    a restart, from the state file or from the journal alone, must not lose them."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    for report in (
        Report(run_id="until-target", epoch=2, step=200),
        Report(run_id="until-target", event="end", epoch=3, step=310),
    ):
        store.merge("ns", "sender", "main", "http", report, NOW)
    stop_store(store, path, stop)
    (again,) = ProgressStore(path).snapshot()
    assert (again.run_id, again.epoch, again.epochs, again.step, again.steps) == (
        "until-target",
        3,
        None,  # with a step, the steps (progress.advance)
        310,
        310,
    )
    assert again.ended_timestamp == NOW  # a report without a run id next is a new run


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_an_epoch_held_back_survives_a_restart_and_is_published_at_the_end(tmp_path, stop):
    """A report held inside a cell of the plan (``progress.stamps_epoch_end``) is the
    run's latest epoch: a restart, from the state file or the journal alone, keeps it,
    so a bare end after the restart still publishes it with its report time."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    for report, at in (
        (Report(run_id="r", epoch=0.5, epochs=3), NOW),
        (Report(run_id="r", epoch=0.502), NOW + 10),  # held: inside 0.5's 1/400 of 3
    ):
        store.merge("ns", "sender", "main", "http", report, at)
    stop_store(store, path, stop)
    restarted = ProgressStore(path)
    try:
        (held,) = restarted.snapshot()
        assert (held.epoch, held.epoch_end_timestamp) == (0.5, NOW)
        ended = restarted.merge(
            "ns", "sender", "main", "http", Report(run_id="r", event="end"), NOW + 20
        )
        assert (ended.epoch, ended.epoch_end_timestamp) == (0.502, NOW + 10)
    finally:
        restarted.close()


@pytest.mark.parametrize("stop", ["saved", "killed"])
@pytest.mark.parametrize(
    ("unit", "first", "then", "plan"), [("step", 8000, 8100, 10000), ("epoch", 50, 51, 100)]
)
def test_a_resumed_runs_start_survives_a_restart(tmp_path, stop, unit, first, then, plan):
    """The step a run resumed at (``start_step``) is where the forecaster counts its
    work from, the epoch (``start_epoch``) what the stall rule's mean epoch leaves out:
    a restart, from the state file or the journal alone, keeps them."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    start = Report(run_id="r", run_start=NOW - 1, event="start", **{unit: first, f"{unit}s": plan})
    store.merge("ns", "sender", "main", "http", start, NOW)
    store.merge("ns", "sender", "main", "http", Report(run_id="r", **{unit: then}), NOW + 10)
    stop_store(store, path, stop)
    (again,) = ProgressStore(path).snapshot()
    assert (getattr(again, unit), getattr(again, f"start_{unit}")) == (then, first)


def test_a_stored_start_epoch_beyond_the_epoch_is_dropped_not_the_row(tmp_path):
    """A row whose start epoch is above its epoch (damaged, hand-edited) loads without
    it, its progress kept, as a start step beyond the step is dropped (below)."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    start = Report(run_id="r", run_start=NOW - 1, event="start", epoch=50, epochs=100)
    store.merge("ns", "sender", "main", "http", start, NOW)
    store.merge("ns", "sender", "main", "http", Report(run_id="r", epoch=51), NOW + 10)
    store.close()
    state = json.loads(path.read_text())
    (row,) = state["progress"]
    assert row["start_epoch"] == 50
    row.update(start_epoch=70.0)
    path.write_text(json.dumps(state))
    (loaded,) = ProgressStore(path).snapshot()
    assert (loaded.run_id, loaded.epoch, loaded.start_epoch) == ("r", 51, None)
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_a_stored_start_step_beyond_the_step_is_dropped_not_the_row(tmp_path):
    """A row whose start step is above its step or steps (a plan-less run at step 100
    after starting at 8,000, ended by its pod's exit at steps 100, as an older exporter
    saved it) was skipped as damaged at load and the file set aside: the run lost.
    The row loads, without the start step."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    start = Report(run_id="r", run_start=NOW - 1, event="start", step=8000)
    store.merge("ns", "sender", "main", "http", start, NOW)
    store.close()
    state = json.loads(path.read_text())
    (row,) = state["progress"]
    row.update(step=100.0, steps=100.0, ended_timestamp=NOW + 10)
    path.write_text(json.dumps(state))
    (again,) = ProgressStore(path).snapshot()
    assert (again.run_id, again.step, again.steps, again.start_step) == ("r", 100, 100, None)
    assert not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.parametrize("stop", ["saved", "killed"])
def test_a_logs_held_end_survives_a_restart(tmp_path, stop):
    """The end of a log's last epoch its reader holds back (``note_held_end``) is kept
    with the row, from the state file or the journal alone; the next merge drops it."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    store.merge("ns", "p", "main", "log", Report(epoch=2, epochs=3, step=12, steps=12), NOW)
    store.note_held_end("ns", "p", "main", 3, NOW)
    stop_store(store, path, stop)
    again = ProgressStore(path)
    (p,) = again.snapshot()
    assert (p.epoch, p.held_end_epoch, p.held_end_timestamp) == (2, 3, NOW)
    done = again.merge("ns", "p", "main", "log", Report(epoch=3), NOW)
    assert (done.epoch, done.held_end_epoch, done.held_end_timestamp) == (3, None, None)
    again.close()


@pytest.mark.parametrize(
    "damage",
    [
        {"held_end_epoch": 3.0},  # without its time
        {"held_end_timestamp": NOW},  # a time without its epoch
        {"held_end_epoch": 2.0, "held_end_timestamp": NOW},  # not above the epoch
        {"held_end_epoch": 2.5, "held_end_timestamp": NOW},
        {"held_end_epoch": 4.0, "held_end_timestamp": NOW},  # beyond the plan
        {"held_end_epoch": "3", "held_end_timestamp": NOW},
        {"held_end_epoch": 3.0, "held_end_timestamp": float("nan")},
    ],
)
def test_a_damaged_held_end_is_not_loaded(tmp_path, damage):
    """A held end is validated at load as the reader could have kept it: a whole
    epoch above the row's, within its plan, with a finite time; a row with one that
    is not is skipped as damaged, not loaded."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    store.merge("ns", "p", "main", "log", Report(epoch=2, epochs=3, step=12, steps=12), NOW)
    store.close()
    state = json.loads(path.read_text())
    state["progress"][0].update(damage)
    path.write_text(json.dumps(state))
    assert ProgressStore(path).snapshot() == ()


def test_removed_free_form_names_keep_their_places_across_a_restart(tmp_path):
    """A name removed by a null keeps its place among the run's 16 (docs/progress.md);
    a restart reading the state file must not free it, or a restart would let a
    sender churn the set."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path)
    names = {f"m{j:02d}": 1.0 for j in range(16)}
    now = time.time()
    store.merge("ns", "p", "main", "http", Report(run_id="r", epoch=1, metrics=names), now)
    store.merge("ns", "p", "main", "http", Report(run_id="r", removed=frozenset({"m03"})), now)
    store.close()
    restarted = ProgressStore(path)
    try:
        (p,) = restarted.snapshot()
        assert p.removed_metrics == {"m03"} and "m03" not in p.metrics and len(p.metrics) == 15
        after = restarted.merge(
            "ns", "p", "main", "http", Report(run_id="r", metrics={"new": 2.0}), now + 1
        )
        assert "new" not in after.metrics
    finally:
        restarted.close()


@pytest.mark.parametrize("final", [False, True], ids=["save", "shutdown"])
def test_a_failed_save_says_the_journal_holds_nothing_when_it_cannot_be_written(
    tmp_path, caplog, final
):
    """A state path whose folder cannot be made (a file where the folder should be:
    a mistyped hostPath) fails the state file and the journal alike: the save's ERROR
    line must not promise that the journal holds what the state file misses, and at
    shutdown says that what changed since the last save is lost."""
    (tmp_path / "afile").write_text("")
    store = ProgressStore(tmp_path / "afile" / "sub" / "progress.json")
    assert not merge(store, "pod-0")  # answered 503: the journal cannot be written
    with caplog.at_level(logging.ERROR):
        if final:
            store.close()
        else:
            store.save()
    (line,) = [
        r.getMessage()
        for r in caplog.records
        if "cannot write" in r.getMessage() and r.name.endswith("progress_store")
    ]
    assert "journal holds" not in line
    assert "the journal cannot be written either" in line
    assert ("lost at exit" in line) is final
    if not final:
        store.close()
