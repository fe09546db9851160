"""Hostile and damaged input on the exporter's progress path (issue 15).

Each test is a defect seen in an adversarial run: a huge integer, a damaged state
file, log lines storing what HTTP refuses, slow clients holding the port, loose
Content-Length parsing, answers not counted. Real sockets on loopback source
addresses, real files; nothing mocked.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import socket
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter import progress_http
from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.logformats import parse_line
from gpu_eta.exporter.progress import InvalidReport, Report, check_report, parse_report
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_journal import encode_line, read_journal
from gpu_eta.exporter.progress_state_file import StateError, parse_state
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from gpu_eta.exporter.snapshot import PROGRESS_RESULTS
from tests.support.net import read_answer

POD = PodMeta("team-a", "trainer-a", "uid-a", ip="127.0.0.2", container_ids={"main": "c1"})
NOW = 1_790_000_000.0
HUGE = "1" + "0" * 400  # a JSON integer float() cannot hold


class Pods:
    def __init__(self, *pods: PodMeta):
        self.pods = list(pods)

    def by_ip(self, ip: str) -> PodMeta | None:
        return next((p for p in self.pods if p.ip == ip), None)

    def __call__(self) -> list[PodMeta]:
        return list(self.pods)


@pytest.fixture
def listener():
    pods = Pods(POD)
    lst = ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, burst=100)
    lst.start()
    yield lst
    lst.stop()


def exchange(port: int, raw: bytes, source: str = "127.0.0.2", timeout: float = 10) -> bytes:
    """Send raw bytes, read until the server closes or one answer is complete."""
    with socket.create_connection(("127.0.0.1", port), timeout, source_address=(source, 0)) as s:
        if raw:
            s.sendall(raw)
        return read_answer(s)


def post_raw(length_header: str, body: bytes) -> bytes:
    return b"POST /progress HTTP/1.1\r\n%s\r\n\r\n%s" % (length_header.encode(), body)


# -- 1 and 2: a huge integer is "too large", never a 500 or an escaped exception ---------


def test_huge_integer_in_a_report_is_400_too_large_and_counted(listener):
    body = (f'{{"epoch": {HUGE}}}').encode()
    answer = exchange(listener.port, post_raw(f"Content-Length: {len(body)}", body))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert b"too large" in answer
    assert listener.counts()["invalid"] == 1 and listener.counts()["error"] == 0


def test_huge_integer_in_a_log_line_is_ignored_and_the_next_line_applies(tmp_path):
    assert parse_line(f'GPU_ETA_PROGRESS {{"epoch": {HUGE}}}') is None
    pod = PodMeta("ml", "train-1", "uid-1", ip="127.0.0.5")
    directory = tmp_path / "ml_train-1_uid-1" / "trainer"
    directory.mkdir(parents=True)
    lines = [
        f'GPU_ETA_PROGRESS {{"epoch": {HUGE}, "epochs": 10}}',
        'GPU_ETA_PROGRESS {"epoch": 2, "epochs": 10}',
    ]
    (directory / "0.log").write_text(
        "".join(f"2026-11-21T06:00:0{i}.0Z stdout F {line}\n" for i, line in enumerate(lines))
    )
    col = LogProgressCollector(tmp_path, ProgressStore(), lambda: [pod])
    col.poll()
    (p,) = col.store.snapshot()
    assert (p.epoch, p.epochs) == (2, 10)


# -- 3: damaged state files never stop the exporter -------------------------------------

DAMAGED_STATE = {
    "random bytes": os.urandom(512),
    "non-UTF-8 byte": b'{"version": 1, "progress": [\xff]}',
    "400-digit integer": b'{"version": 1, "journal_seq": %s, "progress": []}' % HUGE.encode(),
    "deep nesting": b'{"version": 1, "progress": ' + b"[" * 1000 + b"]" * 1000 + b"}",
}


@pytest.mark.parametrize("name", sorted(DAMAGED_STATE))
def test_damaged_state_file_is_set_aside_and_the_store_starts_empty(tmp_path, caplog, name):
    path = tmp_path / "progress.json"
    path.write_bytes(DAMAGED_STATE[name])
    with caplog.at_level(logging.ERROR):
        store = ProgressStore(path)
    assert store.snapshot() == ()
    (aside,) = tmp_path.glob("progress.json.corrupt-*")
    assert aside.read_bytes() == DAMAGED_STATE[name]  # kept for a human, unchanged
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "\n" not in errors[0].getMessage()
    store.merge("ns", "a", "main", "http", Report(epoch=1), NOW)
    store.close()
    assert [p.pod for p in ProgressStore(path).snapshot()] == ["a"]  # and it works again


def test_huge_number_inside_a_state_row_skips_only_that_row(tmp_path):
    good = ProgressStore(tmp_path / "good.json")
    for i in range(10):
        good.merge("ns", f"p{i}", "main", "http", Report(epoch=1, epochs=3), NOW)
    good.close()
    data = json.loads((tmp_path / "good.json").read_text())
    data["progress"].append(dict(data["progress"][0], pod="bad", epoch=int(HUGE)))
    assert len(parse_state(json.dumps(data).encode()).rows) == 10


def saved_state(path: Path, n_pods: int) -> dict:
    """The state file a store writes for ``n_pods`` pods (``p0``…), as JSON."""
    store = ProgressStore(path)
    for i in range(n_pods):
        store.merge("ns", f"p{i}", "main", "http", Report(epoch=1, epochs=3), NOW)
    store.close()
    return json.loads(path.read_text())


def test_an_integer_beyond_pythons_digit_limit_skips_only_its_row(tmp_path, caplog):
    """Python's json refuses an integer of over 4,300 digits (``ValueError``, the
    whole document); the loader reads it as a number no row check accepts, so only
    its row is skipped, as for any damaged row."""
    path = tmp_path / "progress.json"
    data = saved_state(path, 5)
    data["progress"].append(dict(data["progress"][0], pod="bad", epoch=-7))
    path.write_text(json.dumps(data).replace('"epoch": -7', '"epoch": 1' + "0" * 5000))
    Path(f"{path}.journal").unlink(missing_ok=True)  # the rows come from the file alone
    with caplog.at_level(logging.ERROR):
        again = ProgressStore(path)
    assert sorted(p.pod for p in again.snapshot()) == [f"p{i}" for i in range(5)]
    assert "1 damaged row(s) skipped, 5 loaded" in caplog.text
    again.close()


# -- 4 and 9: what HTTP refuses is refused from logs and from disk too --------------------


@pytest.mark.parametrize(
    "line",
    [
        "{'loss': 0.5, 'epoch': -4.0}",  # HF Trainer log dict with a negative epoch
        # a marker line with a step over the wire format's 1e15 (a bar whose run steps
        # pass it gives its epoch alone: test_logformats)
        'GPU_ETA_PROGRESS {"step": 1.8e16, "steps": 1.8e16}',
    ],
)
def test_log_lines_cannot_store_what_http_refuses(tmp_path, line):
    pod = PodMeta("ml", "train-1", "uid-1", ip="127.0.0.5")
    directory = tmp_path / "ml_train-1_uid-1" / "trainer"
    directory.mkdir(parents=True)
    (directory / "0.log").write_text(f"2026-11-21T06:00:00.0Z stdout F {line}\n")
    col = LogProgressCollector(tmp_path, ProgressStore(), lambda: [pod])
    col.poll()
    assert col.store.snapshot() == ()
    assert col.counts()["invalid"] == 1


def test_check_report_is_the_one_rule_for_every_source():
    with pytest.raises(InvalidReport):
        check_report(Report(epoch=-4))
    with pytest.raises(InvalidReport):
        check_report(Report(step=1.8e16, steps=1.8e16))
    with pytest.raises(InvalidReport):
        check_report(Report(epoch=1, container="Not_A_Label"))
    assert parse_report('{"epoch": 1, "epochs": 3}') == check_report(Report(epoch=1, epochs=3))


def test_one_bad_state_row_does_not_discard_ten_good_ones(tmp_path, caplog):
    path = tmp_path / "progress.json"
    data = saved_state(path, 10)
    row = data["progress"][0]
    data["progress"] += [
        dict(row, pod="bad-container", container="NOT a label"),
        dict(row, pod="bad-run", run_id="../../etc"),
        dict(row, pod="bad-epoch", epoch=-4.0),
    ]
    path.write_text(json.dumps(data))
    again = ProgressStore(path)
    assert sorted(p.pod for p in again.snapshot()) == [f"p{i}" for i in range(10)]
    assert "3 damaged row(s) skipped, 10 loaded" in caplog.text
    assert len(list(tmp_path.glob("progress.json.corrupt-*"))) == 1


# -- 5: connection hygiene ---------------------------------------------------------------


def test_non_pod_sender_is_refused_at_accept_before_sending_anything(listener):
    with socket.create_connection(
        ("127.0.0.1", listener.port), 10, source_address=("127.0.0.77", 0)
    ) as s:
        answer = read_answer(s)  # nothing sent: the 403 comes at accept
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert listener.counts()["forbidden"] == 1


def test_header_deadline_is_not_reset_by_each_byte(listener, monkeypatch):
    monkeypatch.setattr(progress_http, "HEADER_TIMEOUT_SECONDS", 1.0)
    with socket.create_connection(
        ("127.0.0.1", listener.port), 10, source_address=("127.0.0.2", 0)
    ) as s:
        started = time.monotonic()
        answer = b""
        for byte in b"POST /progress HTTP/1.1\r\n":  # a byte every 0.2 s
            try:
                s.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(0.2)
            s.setblocking(False)
            try:
                answer += s.recv(4096)
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
            if answer:
                break
        answer += read_answer(s) if not answer.endswith(b"\n") else b""
        elapsed = time.monotonic() - started
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert elapsed < 3.0
    assert listener.counts()["timeout"] == 1


def test_whole_request_deadline(listener, monkeypatch):
    monkeypatch.setattr(progress_http, "REQUEST_TIMEOUT_SECONDS", 1.0)
    with socket.create_connection(
        ("127.0.0.1", listener.port), 10, source_address=("127.0.0.2", 0)
    ) as s:
        s.sendall(b"POST /progress HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")  # body never ends
        started = time.monotonic()
        answer = read_answer(s)
    assert answer.startswith(b"HTTP/1.1 408 ") and time.monotonic() - started < 3.0


def test_slow_strangers_cannot_starve_real_reports(listener):
    """Hundreds of non-pod connections trickling bytes: every real report still lands."""
    strangers = []
    for i in range(300):
        s = socket.socket()
        s.setblocking(False)
        s.bind((f"127.0.{10 + i // 200}.{1 + i % 200}", 0))
        with contextlib.suppress(BlockingIOError):
            s.connect(("127.0.0.1", listener.port))
        strangers.append(s)
    try:
        time.sleep(0.3)
        for s in strangers:
            with contextlib.suppress(OSError):
                s.send(b"P")
        for epoch in range(1, 7):
            body = json.dumps({"epoch": epoch, "epochs": 10}).encode()
            answer = exchange(listener.port, post_raw(f"Content-Length: {len(body)}", body))
            assert answer.startswith(b"HTTP/1.1 200 "), answer
    finally:
        for s in strangers:
            s.close()
    assert listener.counts()["accepted"] == 6
    assert listener.counts()["forbidden"] >= 1


def test_per_address_connection_cap_holds_for_a_pod(listener):
    held = [
        socket.create_connection(("127.0.0.1", listener.port), 10, source_address=("127.0.0.2", 0))
        for _ in range(progress_http.MAX_CONNECTIONS_PER_ADDRESS + 2)
    ]
    try:
        time.sleep(0.3)
        over = held[-1]
        over.settimeout(5)
        assert over.recv(1) == b""  # the ninth from one address is closed at once
    except ConnectionResetError:
        pass
    finally:
        for s in held:
            s.close()


# -- 9: strict Content-Length, every answer counted --------------------------------------


@pytest.mark.parametrize(
    "header",
    ["Content-Length: +12", "Content-Length: 1_2", "Content-Length: 12\r\nContent-Length: 12"],
)
def test_loose_content_length_is_refused(listener, header):
    body = b'{"epoch": 1}'  # 12 bytes
    answer = exchange(listener.port, post_raw(header, body))
    assert answer.startswith(b"HTTP/1.1 400 "), answer
    assert listener.counts()["malformed"] == 1 and listener.counts()["accepted"] == 0


def test_every_answer_is_counted(listener):
    port = listener.port
    exchange(port, b"GET /progress HTTP/1.1\r\n\r\n")  # 405
    exchange(port, b"POST /other HTTP/1.1\r\nContent-Length: 0\r\n\r\n")  # 404
    exchange(port, b"POST /progress HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n")  # 431
    exchange(port, b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n")  # 200
    counts = listener.counts()
    assert (counts["method_not_allowed"], counts["not_found"]) == (1, 1)
    assert (counts["headers_too_large"], counts["health"]) == (1, 1)
    assert set(counts) == set(PROGRESS_RESULTS)


def post_once(store: ProgressStore, body: bytes = b'{"epoch": 1}') -> tuple[bytes, dict]:
    """One report from POD to a fresh listener on ``store``: (raw answer, counts)."""
    pods = Pods(POD)
    lst = ProgressListener("127.0.0.1", 0, store, pods.by_ip, pods)
    lst.start()
    try:
        answer = exchange(lst.port, post_raw(f"Content-Length: {len(body)}", body))
    finally:
        lst.stop()
    return answer, dict(lst.counts())


def test_internal_error_is_500_and_counted():
    class BrokenStore(ProgressStore):
        def merge(self, *args, **kwargs):
            raise RuntimeError("bug")

    answer, counts = post_once(BrokenStore())
    assert answer.startswith(b"HTTP/1.1 500 ") and counts["error"] == 1


# -- 8: acknowledged means on disk -------------------------------------------------------


def test_answer_waits_for_the_journal_and_a_fresh_store_replays_it(tmp_path):
    path = tmp_path / "progress.json"
    pods = Pods(POD)
    store = ProgressStore(path, save_interval_seconds=3600)
    lst = ProgressListener("127.0.0.1", 0, store, pods.by_ip, pods, burst=100)
    lst.start()
    try:
        for epoch in range(1, 6):
            body = json.dumps({"run_id": "r1", "epoch": epoch, "epochs": 10}).encode()
            answer = exchange(lst.port, post_raw(f"Content-Length: {len(body)}", body))
            assert answer.startswith(b"HTTP/1.1 200 ")
        # no save ran (interval 1 h): what a kill would leave is the journal alone
        assert not path.exists()
        (p,) = ProgressStore(path, durable=False).snapshot()
        assert (p.run_id, p.epoch) == ("r1", 5.0)
    finally:
        lst.stop()
        store.journal.close()
    assert lst.counts()["accepted"] == 5


def test_journal_write_failure_is_503_not_persisted(tmp_path):
    store = ProgressStore(tmp_path / "state" / "progress.json")
    store.journal.close()  # a journal that writes nothing: every report's write fails
    answer, counts = post_once(store)
    assert answer.startswith(b"HTTP/1.1 503 ") and counts["not_persisted"] == 1


def test_journal_damage_is_skipped_and_counted(tmp_path):
    good = encode_line(1, {"a": 1}) + encode_line(2, {"a": 2})
    flipped = bytearray(encode_line(3, {"a": 3}))
    flipped[20] ^= 0x01
    rows, damaged, torn = read_journal(good + bytes(flipped) + b"0000 {torn")
    assert [seq for seq, _ in rows] == [1, 2] and damaged == 1 and torn


def test_replay_never_puts_an_older_row_over_the_state_file(tmp_path):
    """A crash between the state write and the journal truncation replays nothing old."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path)
    store.merge("ns", "a", "main", "http", Report(run_id="r", epoch=1, epochs=9), NOW)
    store.journal.close()  # writes the queued row
    old_journal = (tmp_path / "progress.json.journal").read_bytes()
    store.journal = None
    store.merge("ns", "a", "main", "http", Report(run_id="r", epoch=2), NOW + 1)
    store.save()
    (tmp_path / "progress.json.journal").write_bytes(old_journal)  # truncation "lost"
    (p,) = ProgressStore(path, durable=False).snapshot()
    assert p.epoch == 2.0


def cri_line(seconds: int, text: str) -> str:
    stamp = dt.datetime(2026, 11, 21, 6, 0, seconds, tzinfo=dt.timezone.utc)
    return f"{stamp.strftime('%Y-%m-%dT%H:%M:%S')}.0Z stdout F {text}\n"


def test_journal_rows_from_logs_are_durable_too(tmp_path):
    pod = PodMeta("ml", "train-1", "uid-1", ip="127.0.0.5")
    directory = tmp_path / "logs" / "ml_train-1_uid-1" / "trainer"
    directory.mkdir(parents=True)
    (directory / "0.log").write_text(cri_line(1, "Epoch 3/15"))
    store = ProgressStore(tmp_path / "progress.json", save_interval_seconds=3600)
    LogProgressCollector(tmp_path / "logs", store, lambda: [pod]).poll()
    store.journal.close()
    (p,) = ProgressStore(tmp_path / "progress.json", durable=False).snapshot()
    assert (p.epoch, p.epochs) == (2.0, 15.0)


def test_unreadable_state_path_is_one_line_not_a_crash(tmp_path, caplog):
    path = tmp_path / "progress.json"
    path.mkdir()  # a directory where the file should be
    store = ProgressStore(Path(path))
    assert store.snapshot() == ()
    assert "cannot read" in caplog.text


# -- scenario and config files: damage is one line, never a traceback --------------------

DAMAGED_YAML = {
    "deep nesting": b"version: 1\nnode: x\npods: " + b"[" * 5000 + b"]" * 5000 + b"\n",
    "5000-digit integer": b"version: 1\nnode: x\nseed: 1" + b"0" * 5000 + b"\n",
    "recursive alias": b"version: 1\nnode: x\npods: &a [*a]\n",
    "random bytes": bytes(range(256)) * 4,
}


@pytest.mark.parametrize("name", sorted(DAMAGED_YAML))
def test_damaged_scenario_and_config_files_are_one_line_errors(tmp_path, name):
    from gpu_eta.exporter.config import ConfigError, config_from_mapping
    from gpu_eta.exporter.main import load_config_file
    from gpu_eta.exporter.scenario import ScenarioError, load_scenario

    path = tmp_path / "file.yaml"
    path.write_bytes(DAMAGED_YAML[name])
    with pytest.raises(ScenarioError) as scenario_err:
        load_scenario(path)
    assert "\n" not in str(scenario_err.value)
    with pytest.raises(ConfigError) as config_err:
        config_from_mapping(load_config_file(str(path)))
    assert "\n" not in str(config_err.value)


def test_scenario_damaged_while_running_keeps_the_previous_one(tmp_path, caplog):
    from gpu_eta.exporter.simulated_node import SimulatedNode

    path = tmp_path / "node.yaml"
    path.write_text("version: 1\nnode: n1\ngpus:\n  - {index: 0}\n")
    node = SimulatedNode(path)
    assert len(node.gpus.poll().devices) == 1
    path.write_bytes(DAMAGED_YAML["deep nesting"])
    os.utime(path, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert len(node.gpus.poll().devices) == 1  # the last good scenario goes on
    assert "keeping the previous one" in caplog.text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_fuzz_state_and_journal_bytes_never_escape(data: bytes) -> None:
    with contextlib.suppress(StateError):
        parse_state(data)
    read_journal(data)


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
        ),
        max_leaves=20,
    )
)
def test_fuzz_state_rows_are_loaded_or_skipped(row) -> None:
    parsed = parse_state(json.dumps({"version": 1, "progress": [row]}).encode())
    assert len(parsed.rows) + parsed.damaged == 1
