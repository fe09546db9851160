"""The cap on new runs per container (gpu_eta.exporter.progress_runs) on both paths.

A client sending a fresh ``run_id`` with every report made a new series set (and a new
run in the forecaster's history) per report. Real listener on loopback sockets, real
CRI log files, real state files; the reports' time is a hand-set clock, the one the
cap judges by (a log line's own timestamp on the log path).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import logging
from collections.abc import Iterator

import pytest

from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.progress import Report, TooManyRuns
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_runs import (
    CLOCK_STEP_SECONDS,
    RUN_BURST,
    RUN_REFILL_SECONDS,
    TokenBuckets,
)
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from tests.support.clock import Clock

POD = PodMeta("team-a", "trainer-a", "uid-a", ip="127.0.0.2", container_ids={"main": "c1"})
OTHER = PodMeta("team-b", "trainer-b", "uid-b", ip="127.0.0.3", container_ids={"main": "c2"})
NOW = 1_800_000_000.0


class Sender:
    """One pod's kept-alive connection to the listener (as the client keeps one)."""

    def __init__(self, listener: ProgressListener, pod: PodMeta = POD):
        self.conn = http.client.HTTPConnection(
            "127.0.0.1", listener.port, timeout=10, source_address=(pod.ip, 0)
        )

    def post(self, body: dict) -> tuple[int, str]:
        self.conn.request("POST", "/progress", body=json.dumps(body).encode())
        resp = self.conn.getresponse()
        self.retry_after = resp.getheader("Retry-After")
        return resp.status, resp.read().decode()

    def close(self) -> None:
        self.conn.close()


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def listener(clock) -> Iterator[ProgressListener]:
    pods = {POD.ip: POD, OTHER.ip: OTHER}
    # the per-pod rate limit out of the way: these tests send hundreds of reports at once
    lst = ProgressListener(
        "127.0.0.1",
        0,
        ProgressStore(),
        pods.get,
        lambda: list(pods.values()),
        rate_per_second=1e6,
        burst=10**6,
        clock=clock,
    )
    lst.start()
    try:
        yield lst
    finally:
        lst.stop()


@pytest.fixture
def sender(listener) -> Iterator[Sender]:
    s = Sender(listener)
    try:
        yield s
    finally:
        s.close()


def stored(listener: ProgressListener, pod: PodMeta = POD):
    return listener.store.get(pod.namespace, pod.name, "main", "http")


def test_a_fresh_run_id_on_every_report_is_refused_after_the_burst_and_counted(
    listener, sender, clock
):
    answers = []
    for _ in range(60):  # a timestamp as run id, a report every 10 s, for 10 minutes
        before = stored(listener)
        status, text = sender.post({"run_id": f"t{int(clock.now)}", "step": 1, "steps": 9})
        answers.append(status)
        if status == 429:
            assert text.startswith(f"too_many_runs: run t{int(clock.now)} not started: ")
            assert "one run_id is for all reports of a training run" in text
            assert stored(listener) == before  # nothing stored changed
        else:
            assert status == 200 and stored(listener).run_id == f"t{int(clock.now)}"
        clock.now += 10
    assert answers[:RUN_BURST] == [200] * RUN_BURST
    refused = answers.count(429)
    assert answers.count(200) + refused == 60
    # at most the burst and one run per refill interval got through: 10 + 590/30
    assert answers.count(200) <= RUN_BURST + 1 + 590 / RUN_REFILL_SECONDS
    assert refused >= 30 and 429 in answers[RUN_BURST : RUN_BURST + 6]
    counts = listener.counts()
    assert (counts["too_many_runs"], counts["accepted"]) == (refused, 60 - refused)
    assert counts["rate_limited"] == counts["invalid"] == 0
    # another container has a bucket of its own
    other = Sender(listener, OTHER)
    try:
        assert other.post({"run_id": "x1", "step": 1})[0] == 200
    finally:
        other.close()


def test_a_refused_run_is_told_when_its_container_may_start_one(listener, sender, clock):
    """The 429 ``too_many_runs`` carries ``Retry-After``: whole seconds until the
    container's bucket has a token (by the reports' clock), as its line says."""
    for i in range(RUN_BURST):
        assert sender.post({"run_id": f"r{i}", "event": "start"})[0] == 200
        assert sender.retry_after is None
    waits = []
    for elapsed in (0.0, 12.5, 29.5):
        clock.now = NOW + elapsed
        status, text = sender.post({"run_id": "late", "event": "start"})
        assert status == 429 and f"(next in {sender.retry_after} s)" in text
        waits.append(sender.retry_after)
    assert waits == ["30", "18", "1"]  # 30 s, 17.5 s and 0.5 s, each rounded up
    clock.now = NOW + RUN_REFILL_SECONDS
    assert sender.post({"run_id": "late", "event": "start"})[0] == 200


def test_a_sweep_starting_a_run_every_minute_passes(listener, sender, clock):
    """A notebook's sweep of short runs, each started a little under a minute after
    the last (its runs plus the notebook's own time), for over two hours: never
    refused, and it leaves the whole burst for a few quick restarts after it."""
    answers = []
    for i in range(150):  # a run started every 55 s: 35 s of it, 20 s between runs
        clock.now += 20
        run = f"sweep-{i}"
        answers.append(sender.post({"run_id": run, "event": "start", "steps": 100})[0])
        clock.now += 35
        answers.append(sender.post({"run_id": run, "step": 100, "event": "end"})[0])
    for i in range(RUN_BURST):  # a crash, a fix, a rerun...: all at once
        answers.append(sender.post({"run_id": f"retry-{i}", "event": "start"})[0])
    assert set(answers) == {200}
    assert stored(listener).run_id == f"retry-{RUN_BURST - 1}"
    assert listener.counts()["too_many_runs"] == 0


def test_reports_continuing_the_run_are_never_refused(listener, sender, clock):
    for i in range(RUN_BURST):
        assert sender.post({"run_id": f"r{i}", "step": 1, "steps": 500})[0] == 200
    status, _ = sender.post({"run_id": "late", "run_start": NOW, "step": 1, "steps": 500})
    assert status == 429  # the cap is reached
    # the current run goes on: named, and without a run id (folded into the stored run)
    for step in range(2, 202):
        assert sender.post({"run_id": f"r{RUN_BURST - 1}", "step": step})[0] == 200
    assert sender.post({"step": 250})[0] == 200
    p = stored(listener)
    assert (p.run_id, p.step, p.steps) == (f"r{RUN_BURST - 1}", 250, 500)
    # the refused run's next report after a refill starts it, with its own start time
    clock.now += RUN_REFILL_SECONDS
    assert sender.post({"run_id": "late", "run_start": NOW, "step": 40, "steps": 500})[0] == 200
    p = stored(listener)
    assert (p.run_id, p.run_start_timestamp, p.step) == ("late", NOW, 40)
    assert listener.counts()["too_many_runs"] == 1


def test_a_refused_run_is_not_journaled(tmp_path):
    """Nothing stored changes: not in memory, and not on disk (a restart replays the
    journal; a refused run there would come back as the stored one)."""
    path = tmp_path / "progress.json"
    store = ProgressStore(path, save_interval_seconds=3600)
    for i in range(RUN_BURST):
        store.merge("ns", "p", "main", "http", Report(run_id=f"r{i}", epoch=1), NOW)
    last = store.get("ns", "p", "main", "http")
    with pytest.raises(TooManyRuns, match="not started"):
        store.merge("ns", "p", "main", "http", Report(run_id="over", epoch=1), NOW)
    assert store.get("ns", "p", "main", "http") == last
    store.journal.close()  # flushed, then "killed": the files alone
    (p,) = ProgressStore(path, durable=False).snapshot()
    assert p.run_id == f"r{RUN_BURST - 1}"


def test_the_bookkeeping_is_bounded_and_keeps_the_busiest_containers():
    runs = TokenBuckets(burst=1, refill_seconds=60, max_keys=3)
    assert runs.take("churner", 0) and not runs.take("churner", 0)  # its one run taken
    for i in range(100):  # a hundred other containers start a run each, within 10 s
        assert runs.take(f"c{i}", i / 10)
        assert not runs.take("churner", i / 10)  # still refused: it keeps being used
    assert len(runs) == 3
    assert not runs.take("c99", 10)  # still tracked
    assert runs.take("c0", 10)  # forgotten (least recently used): a full bucket again
    # the store bounds it by its own max_entries
    store = ProgressStore(max_entries=4)
    for i in range(50):
        store.merge("ns", f"p{i}", "main", "http", Report(run_id="r", epoch=1), NOW + i)
    assert len(store._runs) == 4


def test_a_clock_stepped_back_leaves_the_cap_as_it_was_by_the_new_clock():
    """A node booted with its clock 8 h ahead (an RTC kept in local time), then NTP
    stepped it back: the bucket's last time was 8 h ahead of every report after the
    step, so it refilled nothing for 8 h and each 429 said "next in 30 s". Now a report
    earlier than the bucket's time by more than ``CLOCK_STEP_SECONDS`` is a clock
    stepped back: the bucket goes on from the new time, with no token added."""
    store = ProgressStore()

    def start(run_id: str, now: float) -> int | None:
        try:
            store.merge("ns", "nb", "main", "http", Report(run_id=run_id, event="start"), now)
        except TooManyRuns as err:
            return err.retry_after
        return None

    ahead = NOW + 8 * 3600
    for i in range(RUN_BURST):  # the burst taken while the clock was ahead
        assert start(f"ahead-{i}", ahead) is None
    assert start("over", ahead) == RUN_REFILL_SECONDS
    # stepped back 8 h: no token came with the step, and the wait is counted from now
    assert start("after-step", NOW) == RUN_REFILL_SECONDS
    assert start("after-step", NOW + RUN_REFILL_SECONDS - 1) == 1
    assert start("after-step", NOW + RUN_REFILL_SECONDS) is None
    assert start("next", NOW + RUN_REFILL_SECONDS) == RUN_REFILL_SECONDS
    assert start("next", NOW + 2 * RUN_REFILL_SECONDS) is None


def test_times_a_little_out_of_order_never_refill_the_same_seconds_twice():
    """A time earlier than the bucket's by less than ``CLOCK_STEP_SECONDS`` (log lines
    read a little out of order) adds nothing and leaves the bucket's time where it is;
    the wait it is told runs from the bucket's time."""
    runs = TokenBuckets(burst=1, refill_seconds=30)
    assert runs.take("c", 100.0)
    assert not runs.take("c", 100.0 - CLOCK_STEP_SECONDS + 1)
    assert runs.wait_seconds("c", 100.0 - CLOCK_STEP_SECONDS + 1) == CLOCK_STEP_SECONDS - 1 + 30
    assert not runs.take("c", 129.0)  # the seconds 41..100 were not counted again
    assert runs.take("c", 130.0)


# -- the log path: the same cap, a refused line skipped and counted ----------------------


T0 = dt.datetime(2026, 11, 21, 6, 0, 0, tzinfo=dt.timezone.utc)


def cri(seconds: float, text: str) -> str:
    stamp = T0 + dt.timedelta(seconds=seconds)
    return f"{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')}000Z stdout F {text}\n"


def marker(body: dict) -> str:
    return "GPU_ETA_PROGRESS " + json.dumps(body)


def test_log_lines_over_the_cap_are_skipped_and_counted(tmp_path, caplog):
    pod = PodMeta("ml", "train-1", "uid-1", ip="127.0.0.5")
    directory = tmp_path / "ml_train-1_uid-1" / "trainer"
    directory.mkdir(parents=True)
    # a fresh run id every 10 s for 5 minutes; then the last one started goes on
    lines = [cri(10 * i, marker({"run_id": f"t{i}", "step": 1, "steps": 9})) for i in range(30)]
    store = ProgressStore()
    collector = LogProgressCollector(
        tmp_path, store, lambda: [pod], clock=lambda: T0.timestamp() + 3600
    )
    (directory / "0.log").write_text("".join(lines))
    collector.poll()
    counts = collector.counts()
    started = counts["matched"]
    assert counts["too_many_runs"] == 30 - started and counts["invalid"] == 0
    assert RUN_BURST <= started <= RUN_BURST + 1 + 290 / RUN_REFILL_SECONDS
    current = store.get("ml", "train-1", "trainer", "log")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ml/train-1/trainer" in warnings[0]
    assert "too_many_runs" in warnings[0]
    # lines continuing the stored run are applied, a new run id is still refused (under
    # a second after the last line: no token came back meanwhile)
    more = [
        cri(290.1 + i / 10, marker({"run_id": current.run_id, "step": 2 + i})) for i in range(5)
    ]
    more.append(cri(290.6, marker({"run_id": "t99", "step": 1})))
    with open(directory / "0.log", "a") as fh:
        fh.write("".join(more))
    collector.poll()
    counts = collector.counts()
    assert (counts["matched"], counts["too_many_runs"]) == (started + 5, 30 - started + 1)
    p = store.get("ml", "train-1", "trainer", "log")
    assert (p.run_id, p.step) == (current.run_id, 6)


def _plain_tqdm_job(root, pod: PodMeta, epochs: int, steps: int = 10, step_s: float = 0.5):
    """A job's log as `for epoch: for batch in tqdm(loader)` writes it: a bar of
    ``steps`` that restarts every epoch, no epoch in the line; the exporter reads each
    restart as a new run (the step goes back)."""
    directory = root / f"{pod.namespace}_{pod.name}_{pod.uid}" / "trainer"
    directory.mkdir(parents=True)
    lines, t = [], 0.0
    for _ in range(epochs):
        for k in range(1, steps + 1):
            bar = "#" * k + " " * (steps - k)
            lines.append(cri(t, f"{k * 100 // steps}%|{bar}| {k}/{steps} [00:01<00:01]"))
            t += step_s
    (directory / "0.log").write_text("".join(lines))
    return directory


def test_runs_read_out_of_progress_bars_are_capped_loosely(tmp_path, caplog):
    """40 epochs of 5 s, each a run of its own as the exporter reads a plain bar that
    restarts every epoch: none of its lines is skipped and nothing is blamed (such runs
    are the exporter's reading: 10 at once, then one every 5 s). Two ranks' bars
    interleaved in one container (a step back every other line) cannot make a run a
    line, nor can marker lines without a run id (the wire format: a sender's cap)."""
    pod = PodMeta("ml", "train-2", "uid-2", ip="127.0.0.6")
    _plain_tqdm_job(tmp_path, pod, epochs=40)
    store = ProgressStore()
    collector = LogProgressCollector(
        tmp_path, store, lambda: [pod], clock=lambda: T0.timestamp() + 3600
    )
    with caplog.at_level(logging.WARNING):
        collector.poll()
    counts = collector.counts()
    assert (counts["matched"], counts["too_many_runs"]) == (400, 0)
    assert not [r for r in caplog.records if "too_many_runs" in r.getMessage()]
    p = store.get("ml", "train-2", "trainer", "log")
    assert (p.step, p.steps) == (10, 10)

    # two ranks, 600 lines over 300 s, each line a step back from the other rank's
    ranks = PodMeta("ml", "ddp", "uid-d", ip="127.0.0.8")
    directory = tmp_path / "ml_ddp_uid-d" / "trainer"
    directory.mkdir(parents=True)
    lines = []
    for i in range(600):
        k = i // 2 % 90 + 1 + 5 * (i % 2)  # rank 1 five steps ahead of rank 0
        lines.append(cri(i / 2, f"{k}%|{'#' * (k // 10):<10}| {k}/100 [00:01<00:01]"))
    (directory / "0.log").write_text("".join(lines))
    markers = PodMeta("ml", "starts", "uid-s", ip="127.0.0.9")
    directory = tmp_path / "ml_starts_uid-s" / "trainer"
    directory.mkdir(parents=True)
    (directory / "0.log").write_text(
        "".join(cri(i, marker({"event": "start", "step": 1, "steps": 9})) for i in range(300))
    )
    collector = LogProgressCollector(
        tmp_path,
        ProgressStore(),
        lambda: [pod, ranks, markers],
        clock=lambda: T0.timestamp() + 3600,
    )
    collector.poll()
    runs_started = collector.counts()
    # at most 10 + 300 s / 5 s bar runs and 10 + 300 s / 30 s marker runs
    assert runs_started["too_many_runs"] >= (300 - 71) + (300 - 21)


def test_a_pod_gone_and_recreated_is_warned_again(tmp_path, monkeypatch, caplog):
    """The once-per-container WARNING is forgotten with the container's log: a pod
    re-created under the same name (a StatefulSet, JupyterHub's jupyter-<user>) that
    goes over the cap again is named again, and the bound (``_MAX_WARNED_CONTAINERS``)
    counts containers present, not every one since start."""
    from gpu_eta.exporter.collectors import logs as logs_module

    monkeypatch.setattr(logs_module, "_MAX_WARNED_CONTAINERS", 1)
    pod = PodMeta("ml", "train-3", "uid-3", ip="127.0.0.7")
    directory = tmp_path / "ml_train-3_uid-3" / "trainer"
    directory.mkdir(parents=True)
    fresh = [cri(i, marker({"run_id": f"t{i}", "step": 1, "steps": 9})) for i in range(20)]
    (directory / "0.log").write_text("".join(fresh))
    pods = [pod]
    collector = LogProgressCollector(
        tmp_path, ProgressStore(), lambda: pods, clock=lambda: T0.timestamp() + 3600
    )

    def warnings() -> int:
        return sum(
            r.levelno == logging.WARNING and "too_many_runs" in r.getMessage()
            for r in caplog.records
        )

    collector.poll()
    assert warnings() == 1
    pods.clear()
    collector.poll()  # gone: its log is read for the grace still
    pods.append(PodMeta("ml", "train-3", "uid-4", ip="127.0.0.7"))  # re-created
    directory = tmp_path / "ml_train-3_uid-4" / "trainer"
    directory.mkdir(parents=True)
    (directory / "0.log").write_text(
        "".join(cri(100 + i, marker({"run_id": f"u{i}", "step": 1})) for i in range(20))
    )
    collector.poll()
    assert warnings() == 2
