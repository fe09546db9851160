"""What the progress store may read and write, and how the port frames requests.

Defects a fuzz audit found: loads that needed more memory than the exporter's limit
(384Mi) before a damaged file could be set aside, a journal growing without bound
while the state file cannot be written, a half-closing client left without its
answer, a ``GET /healthz`` body read as a second request, and rows the store kept
that its own loader refuses. Real files in ``tmp_path``, real restarts (a new
``ProgressStore`` on the same files), a real listener on loopback sockets.
"""

from __future__ import annotations

import json
import logging
import socket
import time
import tracemalloc
from pathlib import Path

import pytest

from gpu_eta.exporter import progress_journal
from gpu_eta.exporter.progress import InvalidReport, Report
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_journal import encode_line, read_journal
from gpu_eta.exporter.progress_state_file import (
    MAX_STATE_BYTES,
    MAX_STATE_VALUES,
    StateError,
    parse_state,
)
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.support.child import in_child
from tests.support.clock import Clock
from tests.support.net import read_answer

NOW = time.time()  # run_start and timestamps are checked against it: a real "now"
POD = PodMeta("ns", "sender", "uid-s", ip="127.0.0.2", container_ids={"main": "c1"})
ROW = {
    "namespace": "ns",
    "pod": "p",
    "container": "main",
    "run_id": "r",
    "source": "http",
    "run_start_timestamp": NOW,
    "last_report_timestamp": NOW,
    "epoch": 1,
    "epochs": 2,
    "step": None,
    "steps": None,
    "batch_size": None,
    "epoch_end_timestamp": None,
    "metrics": {f"m{i}": 0.5 for i in range(16)},
}


def journal_path(path: Path) -> Path:
    return path.with_name(path.name + ".journal")


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


# -- A. a load fits in the exporter's memory --------------------------------------------


def test_the_largest_state_the_store_can_hold_loads_back_under_both_bounds(tmp_path, caplog):
    """4,096 rows (the store's bound) with every name, id and metric as long as the
    rules allow: written, then read back whole, so the caps refuse nothing of ours."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, durable=False, save_interval_seconds=3600)
    metrics = {f"m{i:02d}" + "x" * 61: -1.2345678901234567e-05 for i in range(16)}
    for i in range(4096):
        report = Report(
            run_id="r" * 64,
            epoch=999_999_999_999_999.5,
            epochs=1e15,
            step=999_999_999_999_999.5,
            steps=1e15,
            batch_size=999_999_999_999_999.5,
            metrics=metrics,
            event="end",  # every field set: ended_timestamp too
        )
        store.merge("n" * 253, "p" * 243 + f"{i:010d}", "c" * 63, "http", report, NOW + 0.123456)
    store.save()
    data = path.read_bytes()
    assert all(p.ended_timestamp is not None for p in store.snapshot())
    assert len(data) <= MAX_STATE_BYTES
    assert data.count(b",") + data.count(b"{") + data.count(b"[") <= MAX_STATE_VALUES // 2
    again = ProgressStore(path, durable=False)
    assert len(again.snapshot()) == 4096 and not errors(caplog)


def test_a_state_file_over_the_cap_is_set_aside_without_being_parsed(tmp_path, caplog):
    """Valid JSON, padded past 12 MiB: a file this large is not ours (the store
    writes at most 8.9 MiB, above), and parsing files like it is what ran the
    exporter out of memory at the old 64 MiB cap."""
    path = tmp_path / "progress.json"
    head = json.dumps({"version": 1, "journal_seq": 0, "progress": [ROW]})[:-1].encode()
    path.write_bytes(head + b" " * ((12 << 20) - len(head)) + b"}")
    store = ProgressStore(path, durable=False)
    assert store.snapshot() == ()
    (aside,) = tmp_path.glob("progress.json.corrupt-*")
    assert aside.stat().st_size == (12 << 20) + 1
    (line,) = errors(caplog)
    assert f"larger than {MAX_STATE_BYTES} bytes" in line


def test_a_state_file_of_many_tiny_values_is_refused_before_parsing():
    """Under the byte cap, ``{},{},...`` is millions of dicts (350 MB at 12 MiB):
    refused by counting, with memory for the bytes alone."""
    data = b'{"version": 1, "progress": [' + b",".join([b"{}"] * MAX_STATE_VALUES) + b"]}"
    assert len(data) < MAX_STATE_BYTES
    tracemalloc.start()
    try:
        with pytest.raises(StateError, match="JSON values"):
            parse_state(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) // 4, peak


def test_a_journal_replay_holds_one_parsed_line_at_a_time(tmp_path):
    """A replay's memory is the file's bytes and the rows kept, not every line parsed
    at once (63 MiB of journal peaked at 711 MB before)."""
    path = tmp_path / "progress.json"
    lines = [encode_line(i, dict(ROW, pod=f"p-{i % 100}")) for i in range(1, 8001)]
    journal_path(path).write_bytes(b"".join(lines))
    size = journal_path(path).stat().st_size
    tracemalloc.start()
    try:
        store = ProgressStore(path, durable=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(store.snapshot()) == 100
    assert peak < 1.5 * size, (peak, size)


def test_a_journal_of_many_containers_is_evicted_while_it_replays(tmp_path):
    path = tmp_path / "progress.json"
    lines = [encode_line(i, dict(ROW, pod=f"p-{i}")) for i in range(1, 2001)]
    journal_path(path).write_bytes(b"".join(lines))
    store = ProgressStore(path, durable=False, max_entries=100)
    served = store.snapshot()
    assert len(served) == 100 and {p.pod for p in served} >= {"p-2000"}


# -- B. a journal that cannot be emptied stops at what a restart reads back --------------


def unwritable_state(path: Path) -> None:
    """The state path becomes a directory with a file in it: no save can replace it."""
    path.unlink(missing_ok=True)
    path.mkdir()
    (path / "x").touch()


def usable_state(path: Path) -> None:
    (path / "x").unlink()
    path.rmdir()


def http_post(port: int, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), 10, source_address=(POD.ip, 0)) as s:
        s.sendall(b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        return read_answer(s)


def test_a_full_journal_is_answered_503_until_a_save_empties_it(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO)
    path = tmp_path / "progress.json"
    cap = 4096
    monkeypatch.setattr(progress_journal, "MAX_JOURNAL_BYTES", cap)
    clock = Clock()
    store = ProgressStore(path, save_interval_seconds=30, clock=clock)
    unwritable_state(path)
    listener = ProgressListener(
        "127.0.0.1", 0, store, {POD.ip: POD}.get, lambda: [POD], burst=1000, rate_per_second=1000
    )
    listener.start()
    try:
        answers = []
        for step in range(1, 41):
            answers.append(http_post(listener.port, b'{"step": %d}' % step)[:12])
            clock.now += 1
            store.snapshot()  # the scheduler's read: a save every 30 s, failing
        assert answers[0] == b"HTTP/1.1 200" and answers[-1] == b"HTTP/1.1 503"
        first_503 = answers.index(b"HTTP/1.1 503")
        assert set(answers[first_503:]) == {b"HTTP/1.1 503"}  # full stays full
        assert journal_path(path).stat().st_size <= cap
        assert store.persisted is False and store.journal_bytes <= cap
        assert store.get("ns", "sender", "main", "http").step == 40  # applied in memory
        # every 200 is on disk (the last one answered 200 was step first_503): a kill
        # now loses none of them
        rows, damaged, torn = read_journal(journal_path(path).read_bytes())
        assert (rows[-1][1]["step"], damaged, torn) == (first_503, 0, False)
        # once a save succeeds the journal is emptied and reports are answered 200
        usable_state(path)
        clock.now += 30
        store.snapshot()
        assert http_post(listener.port, b'{"step": 41}').startswith(b"HTTP/1.1 200")
        assert store.persisted is True
    finally:
        listener.stop()
        store.close()
    full = [m for m in errors(caplog) if m.startswith("progress journal:")]
    assert len(full) == 1 and f"{cap}, the most a restart reads back" in full[0]
    assert any("emptied by a save" in r.getMessage() for r in caplog.records)
    assert listener.counts()["not_persisted"] == 40 - first_503


def test_a_full_journal_stays_full_until_a_save_even_for_a_report_that_would_fit(tmp_path):
    """Once a batch did not fit, the journal is ``full`` (``Journal``'s rule): a later,
    smaller report that would fit in what is left is answered 503 too, until a save
    empties the journal; then reports are answered 200 again."""
    small = PodMeta("ns", "small", "uid-m", ip="127.0.0.3", container_ids={"main": "c2"})
    pods = {POD.ip: POD, small.ip: small}
    store = ProgressStore(tmp_path / "progress.json", save_interval_seconds=3600)
    listener = ProgressListener(
        "127.0.0.1",
        0,
        store,
        pods.get,
        lambda: list(pods.values()),
        burst=1000,
        rate_per_second=1000,
        clock=Clock(NOW),  # one report time: a report sent again is a row of the same size
    )
    listener.start()
    big_body = json.dumps({"run_id": "big", "step": 1, "metrics": ROW["metrics"]}).encode()
    small_body = b'{"run_id": "s", "step": 1}'

    def post(pod: PodMeta, body: bytes) -> bytes:
        with socket.create_connection(
            ("127.0.0.1", listener.port), 10, source_address=(pod.ip, 0)
        ) as s:
            s.sendall(
                b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            return read_answer(s)[:12]

    try:
        assert post(POD, big_body) == b"HTTP/1.1 200"
        before_small = store.journal_bytes
        assert post(small, small_body) == b"HTTP/1.1 200"
        small_row = store.journal_bytes - before_small
        # room for exactly one more small row, not for a big one
        store.journal.full_bytes = store.journal_bytes + small_row
        on_disk = journal_path(tmp_path / "progress.json").read_bytes()
        assert post(POD, big_body.replace(b'"step": 1', b'"step": 2')) == b"HTTP/1.1 503"
        assert store.journal.full and store.persisted is False
        assert post(small, small_body) == b"HTTP/1.1 503"  # it would fit: still refused
        assert journal_path(tmp_path / "progress.json").read_bytes() == on_disk
        assert store.get("ns", "sender", "main", "http").step == 2  # applied in memory
        store.save()  # the state file written, the journal emptied
        assert not store.journal.full and store.persisted is True
        assert post(small, small_body) == b"HTTP/1.1 200"
        assert post(POD, big_body.replace(b'"step": 1', b'"step": 3')) == b"HTTP/1.1 200"
    finally:
        listener.stop()
        store.close()
    assert listener.counts()["not_persisted"] == 2
    again = ProgressStore(tmp_path / "progress.json", durable=False)
    assert again.get("ns", "sender", "main", "http").step == 3


def _journal_fails_then_recovers(directory: str) -> dict:
    """In a forked child (the limit is per process): three reports, each with its
    acknowledgement and ``persisted`` after it, while the journal's file may grow (1),
    may not (2: the kernel's EFBIG from RLIMIT_FSIZE, as on a volume that is full),
    may again (3); then the epochs the journal holds."""
    import resource
    import signal
    import threading

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an EFBIG error, not the signal
    path = Path(directory) / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    answers: list[tuple[bool, bool | None]] = []

    def report(epoch: int) -> None:
        done = threading.Event()
        acked: list[bool] = []
        sent = Report(run_id="r", epoch=epoch, epochs=9)
        store.merge("ns", "a", "main", "http", sent, NOW, lambda ok: (acked.append(ok), done.set()))
        assert done.wait(10), "never acknowledged"
        answers.append((acked[0], store.persisted))

    report(1)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (store.journal_bytes, hard))  # not a byte more
    try:
        report(2)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    report(3)
    store.journal.close()
    rows, damaged, torn = read_journal(journal_path(path).read_bytes())
    epochs = [row["epoch"] for _, row in rows]
    return {"answers": answers, "journal": epochs, "damaged": damaged, "torn": torn}


def test_persisted_follows_a_journal_that_fails_and_recovers(tmp_path):
    """``persisted`` (the gauge ``gpu_eta_exporter_progress_persisted``) is False while
    the journal cannot be written, though the state file could be, and True again once
    a write succeeds; the report acknowledged False is not on disk, the next one is."""
    got = in_child(_journal_fails_then_recovers, str(tmp_path), timeout=60)
    assert got == {
        "answers": [(True, True), (False, False), (True, True)],
        "journal": [1, 3],  # the failed batch was cut back: no torn or damaged line
        "damaged": 0,
        "torn": False,
    }


def test_a_state_file_that_keeps_failing_is_one_error_and_not_rewritten_every_cycle(
    tmp_path, monkeypatch, caplog
):
    caplog.set_level(logging.INFO)
    path = tmp_path / "progress.json"
    clock = Clock()
    store = ProgressStore(path, save_interval_seconds=30, clock=clock)
    store.journal.max_bytes = 0  # oversized at once: asks for a save every cycle
    unwritable_state(path)
    writes = []
    real = store._write_state
    monkeypatch.setattr(store, "_write_state", lambda: (writes.append(clock.now), real())[1])
    for step in range(1, 61):  # 60 cycles, 5 s apart (5 minutes)
        store.merge("ns", "a", "main", "http", Report(run_id="r", step=step), NOW)
        store.snapshot()
        clock.now += 5
    assert store.persisted is False
    assert len(writes) <= 12, writes  # every 30 s, not every cycle
    (line,) = errors(caplog)
    assert "cannot write" in line and "the journal holds what it misses" in line
    usable_state(path)
    clock.now += 30
    store.snapshot()
    store.close()
    assert store.persisted is True
    assert any("written again after" in r.getMessage() for r in caplog.records)
    assert ProgressStore(path, durable=False).get("ns", "a", "main", "http").step == 60


# -- C. a client that half-closes gets the answer it is owed -----------------------------


def journaled_listener(tmp_path: Path) -> tuple[ProgressStore, ProgressListener]:
    store = ProgressStore(tmp_path / "progress.json", save_interval_seconds=3600)
    listener = ProgressListener("127.0.0.1", 0, store, {POD.ip: POD}.get, lambda: [POD])
    listener.start()
    return store, listener


def test_a_half_closed_connection_gets_the_answer_that_waits_for_the_journal(tmp_path):
    store, listener = journaled_listener(tmp_path)
    body = b'{"epoch": 1, "epochs": 3}'
    request = b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    try:
        with socket.create_connection(
            ("127.0.0.1", listener.port), 10, source_address=(POD.ip, 0)
        ) as s:
            s.sendall(request * 2)  # two pipelined reports, then "done sending"
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(4096):  # ends: the server closes once both are out
                data += chunk
    finally:
        listener.stop()
        store.close()
    assert data.count(b"HTTP/1.1 200 ") == 2, data
    assert listener.counts()["accepted"] == 2


# -- D. a GET /healthz body is never read as a request -----------------------------------


def test_a_healthz_body_is_refused_and_never_read_as_a_second_request(tmp_path):
    store, listener = journaled_listener(tmp_path)
    inner = b'POST /progress HTTP/1.1\r\nContent-Length: 22\r\n\r\n{"epoch":7,"epochs":9}'
    smuggled = b"GET /healthz HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(inner), inner)
    chunked = b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    try:
        answers = []
        for raw in (smuggled, chunked):
            with socket.create_connection(
                ("127.0.0.1", listener.port), 10, source_address=(POD.ip, 0)
            ) as s:
                s.sendall(raw)
                data = b""
                while chunk := s.recv(4096):  # closed after the one answer
                    data += chunk
                answers.append(data)
        # Content-Length: 0 is no body: answered, and the connection kept alive
        with socket.create_connection(
            ("127.0.0.1", listener.port), 10, source_address=(POD.ip, 0)
        ) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
            ok = read_answer(s)
            s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            again = read_answer(s)
    finally:
        listener.stop()
        store.close()
    for data in answers:
        assert data.startswith(b"HTTP/1.1 400 ") and data.count(b"HTTP/1.1") == 1, data
        assert b"GET /healthz takes no body" in data
    assert ok.startswith(b"HTTP/1.1 200 ") and again.startswith(b"HTTP/1.1 200 ")
    assert store.snapshot() == ()
    counts = listener.counts()
    assert (counts["malformed"], counts["accepted"], counts["health"]) == (2, 0, 2)


# -- E. the store keeps no row its loader would skip --------------------------------------


@pytest.mark.parametrize(
    ("namespace", "pod", "container", "now"),
    [
        ("ns", "p", 'we"ird\na\nme', NOW),
        ("ns", "p", "ünï-çödé", NOW),
        ("ns", "p", "x" * 250, NOW),
        ("ns", "P_Q", "main", NOW),
        ("n" * 254, "p", "main", NOW),
        ("ns", "p", "main", -5.0),  # a log line stamped before 1970
    ],
    # fixed ids: every pytest-xdist worker must collect the same names (NOW differs)
    ids=[
        "quote-newline",
        "non-ascii",
        "long-container",
        "pod-not-dns",
        "long-namespace",
        "before-1970",
    ],
)
def test_the_store_refuses_what_its_loader_would_skip(
    tmp_path, caplog, namespace, pod, container, now
):
    path = tmp_path / "progress.json"
    store = ProgressStore(path)
    with pytest.raises(InvalidReport):
        store.merge(namespace, pod, container, "log", Report(epoch=1, epochs=3), now)
    store.merge("ns", "ok", "main", "log", Report(epoch=1, epochs=3), NOW)
    store.close()
    again = ProgressStore(path)
    assert [p.pod for p in again.snapshot()] == ["ok"]
    again.close()
    assert not errors(caplog) and not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.parametrize("version", ["1.1", "1.0"])
def test_expect_100_continue_is_answered_before_the_body(tmp_path, version):
    """curl sends ``Expect: 100-continue`` and waits up to 1 s for it before the body:
    on HTTP/1.1 the listener says ``100 Continue`` once the headers are in, so the
    report is not delayed (a second report on the connection gets its own); HTTP/1.0
    has none (RFC 9110, 10.1.1): nothing is sent before the body."""
    store, listener = journaled_listener(tmp_path)
    body = b'{"epoch":1,"epochs":9}'
    head = b"POST /progress HTTP/%s\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n"
    try:
        with socket.create_connection(
            ("127.0.0.1", listener.port), 10, source_address=(POD.ip, 0)
        ) as s:
            for _ in range(2 if version == "1.1" else 1):
                s.sendall(head % (version.encode(), len(body)))
                s.settimeout(0.5 if version == "1.1" else 0.3)
                if version == "1.1":
                    assert s.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
                else:
                    with pytest.raises(TimeoutError):
                        s.recv(64)
                s.settimeout(10)
                s.sendall(body)
                assert read_answer(s).startswith(b"HTTP/1.1 200 ")
    finally:
        listener.stop()
        store.close()


def test_a_save_that_empties_the_journal_ends_a_journal_failure(tmp_path):
    """A journal write failed (the last report before the disk came back): the next
    successful save truncates and syncs the file, so it is writable, and progress is
    persisted again without waiting for another report."""
    store = ProgressStore(tmp_path / "progress.json", save_interval_seconds=3600)
    try:
        assert store.journal is not None and store.persisted is True
        store.journal._failing = True  # as a write that raised EFBIG leaves it
        assert store.persisted is False
        store.save()
        assert store.persisted is True
    finally:
        store.close()
