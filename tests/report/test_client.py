"""gpu_eta_report.client against a real ProgressListener on loopback."""

from __future__ import annotations

import collections
import itertools
import json
import logging
import os
import subprocess
import sys
import time
import warnings

import pytest

from gpu_eta.common import progress_bound
from gpu_eta.common.retry_after import parse_retry_after
from gpu_eta.exporter import progress
from gpu_eta.exporter.progress_runs import RUN_BURST
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from gpu_eta_report import ProgressReporter, client, exporter_url, start
from gpu_eta_report.client import LOCAL_RANK_VARIABLES
from tests.support.net import dead_port, post_progress
from tests.support.report_listener import journaled, journaling_store, listening_for, url

POD = PodMeta("ml", "nb-1", "uid-1", ip="127.0.0.5", container_ids={"notebook": "c"})


@pytest.fixture
def listener():
    with listening_for(POD) as lst:
        yield lst


def test_client_imports_with_the_standard_library_only():
    code = (
        "import sys, sysconfig\n"
        "before = set(sys.modules)\n"
        "import gpu_eta_report, gpu_eta_report.client\n"
        "site = sysconfig.get_paths()['purelib']\n"
        "bad = sorted(n for n, m in list(sys.modules.items()) if n not in before\n"
        "    if getattr(m, '__file__', None) and m.__file__.startswith(site) and not n.startswith('exporter'))\n"
        "print(bad)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


def test_two_line_loop_reports_every_epoch_and_the_end(listener):
    r = start(epochs=3, steps_per_epoch=20, batch_size=16, url=url(listener), source_address=POD.ip)
    for epoch in range(3):
        for i in range(20):
            r.step(epoch * 20 + i + 1)
        r.epoch_end(epoch + 1, loss=1.0 / (epoch + 1))
    r.end()
    assert r.stats["sent"] >= 5 and r.stats["failed"] == 0 and r.stats["rejected"] == 0
    (p,) = listener.store.snapshot()
    assert (p.pod, p.container, p.run_id) == ("nb-1", "notebook", r.run_id)
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (3, 3, 60, 60, 16)
    assert p.metrics["loss"] == pytest.approx(1 / 3)
    assert p.run_start_timestamp == pytest.approx(r.run_start, abs=0.01)


def test_second_training_in_the_same_pod_is_a_new_run(listener):
    first = start(epochs=2, url=url(listener), source_address=POD.ip)
    first.epoch_end(2)
    first.end()
    second = start(epochs=5, url=url(listener), source_address=POD.ip)
    second.epoch_end(1)
    second.end()
    (p,) = listener.store.snapshot()
    assert p.run_id == second.run_id != first.run_id and (p.epoch, p.epochs) == (1, 5)


def test_a_run_without_a_plan_that_ends_has_the_totals_it_reached(listener):
    r = start(batch_size=8, url=url(listener), source_address=POD.ip)  # until a target
    for epoch in range(1, 4):
        r.epoch_end(epoch, step=epoch * 10)
    r.end()
    (p,) = listener.store.snapshot()
    # it reported steps: its steps are its total (exporter.progress._reached_totals)
    assert (p.run_id, p.epoch, p.epochs, p.step, p.steps) == (r.run_id, 3, None, 30, 30)


def test_the_context_manager_ends_the_run_only_when_its_block_finished(listener):
    with pytest.raises(RuntimeError), start(url=url(listener), source_address=POD.ip) as r:
        r.epoch_end(2)
        raise RuntimeError("out of memory")
    (p,) = listener.store.snapshot()  # the epoch reached is sent, but no end:
    assert (p.run_id, p.epoch, p.epochs) == (r.run_id, 2, None)  # not taken as completed
    assert r.stats["sent"] == 2  # start and epoch: what was queued still left
    with start(url=url(listener), source_address=POD.ip) as r:
        r.epoch_end(2)
    (p,) = listener.store.snapshot()
    assert (p.run_id, p.epoch, p.epochs) == (r.run_id, 2, 2)


def test_exporter_down_never_raises_nor_blocks():
    port = dead_port()  # nothing listens here
    r = start(
        epochs=100, steps_per_epoch=1000, url=f"http://127.0.0.1:{port}/progress", queue_size=4
    )
    t0 = time.perf_counter()
    for step in range(1, 20001):
        r.step(step)
        if step % 1000 == 0:
            r.epoch_end(step // 1000)
    elapsed = time.perf_counter() - t0
    r.end(flush_timeout_seconds=0.5)
    stats = r.stats
    assert stats["sent"] == 0 and stats["failed"] >= 1
    assert stats["failed"] + stats["dropped"] >= 2
    assert elapsed < 5.0  # 20k calls: a loose bound, only to catch blocking sends


def test_refused_sender_is_counted_not_raised(listener):
    r = start(epochs=2, url=url(listener))  # from 127.0.0.1: not a pod
    r.end()
    assert r.stats["rejected"] == 2 and listener.counts()["forbidden"] == 2


def test_a_run_over_the_containers_cap_is_held_for_its_retry_after_never_retried(listener, caplog):
    """The exporter answers 429 ``too_many_runs`` with ``Retry-After: 30`` to a run its
    container starts beyond the cap: the refused report is counted rejected and not
    sent again (the wait outlasts the flush timeout), the reason logged once; the
    reports after it are held for the wait, and ``end()`` still returns within its
    flush timeout (they are dropped then)."""
    for i in range(RUN_BURST):  # the notebook's quick restarts took the whole burst
        body = json.dumps({"run_id": f"r{i}", "event": "start"}).encode()
        assert post_progress("127.0.0.1", listener.port, body, POD.ip).startswith(b"HTTP/1.1 200")
    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.epoch_end(1)
    t0 = time.monotonic()
    r.end(flush_timeout_seconds=1.0)
    assert time.monotonic() - t0 < 2.0  # training waits for its flush timeout, no longer
    assert r.stats == {"sent": 0, "rejected": 1, "failed": 0, "dropped": 2, "ignored": 0}
    assert listener.counts()["too_many_runs"] == 1  # start only: epoch_end and end held
    refusals = [m for m in caplog.messages if "refused a progress report" in m]
    assert len(refusals) == 1 and "(429): too_many_runs: run " in refusals[0]


def test_after_a_retry_after_only_the_newest_report_is_sent(tmp_path):
    """A pod over its report rate (0.5/s here) is answered 429 ``Retry-After: 2``: the
    client sends nothing for 2 s, then the newest report it holds (the end, carrying
    the whole state), the others superseded and counted dropped: one 429, no burst."""
    with listening_for(POD, rate_per_second=0.5, burst=1) as lst:
        r = start(epochs=2, url=url(lst), source_address=POD.ip, min_interval_seconds=0)
        r.epoch_end(1)  # the bucket's one token went to the start: refused
        for step in range(1, 6):
            r.step(step)
        r.epoch_end(2, loss=0.5)
        t0 = time.monotonic()
        r.end(flush_timeout_seconds=10)
        waited = time.monotonic() - t0
        counts = lst.counts()
        (p,) = lst.store.snapshot()
    assert r.stats == {"sent": 2, "rejected": 1, "failed": 0, "dropped": 6, "ignored": 0}
    assert (counts["accepted"], counts["rate_limited"]) == (2, 1)
    assert (p.run_id, p.epoch, p.epochs, p.metrics["loss"]) == (r.run_id, 2, 2, 0.5)
    assert 1.0 < waited < 5.0  # held about the 2 s asked, not the 10 s allowed


def test_a_refused_final_report_is_sent_again_after_the_hold():
    """``end()``'s report (its final loss and accuracy) answered 429 ``Retry-After: 2``
    with nothing queued after it: it is still the whole current state, so it is sent
    again when the hold is over, within ``end()``'s flush timeout, and accepted."""
    with listening_for(POD, rate_per_second=0.5, burst=3) as lst:
        r = start(epochs=2, url=url(lst), source_address=POD.ip)
        r.epoch_end(1, loss=0.5)
        r.epoch_end(2, loss=0.3)
        time.sleep(0.3)  # three accepted: the bucket is empty
        t0 = time.monotonic()
        r.end(flush_timeout_seconds=10, loss=0.01, accuracy=0.99)
        waited = time.monotonic() - t0
        counts = lst.counts()
        (p,) = lst.store.snapshot()
    assert (counts["accepted"], counts["rate_limited"]) == (4, 1)
    assert r.stats == {"sent": 4, "rejected": 1, "failed": 0, "dropped": 0, "ignored": 0}
    assert (p.epoch, p.metrics["loss"], p.metrics["accuracy"]) == (2, 0.01, 0.99)
    assert 1.0 < waited < 5.0  # the 2 s asked, not the 10 s allowed


class PostServer:
    """A real HTTP/1.1 server on loopback answering every POST with what ``answer``
    returns for its body: (status, headers, body). With ``close_after_answer`` it
    closes each connection after answering without saying so (as the exporter closes
    an idle kept-alive one)."""

    close_after_answer = False

    def __init__(self) -> None:
        import http.server
        import threading

        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # the body written after the headers is not held for their ACK (~40 ms)
            disable_nagle_algorithm = True

            def do_POST(self) -> None:
                status, headers, body = outer.answer(
                    self.rfile.read(int(self.headers["Content-Length"]))
                )
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.close_connection = outer.close_after_answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class AnsweringServer(PostServer):
    """Answers every POST with ``status``, ``body`` and the given ``Retry-After``: a
    proxy in front of the exporter, or another server; ``posts`` are their times."""

    def __init__(
        self,
        status: int,
        retry_after: str | None = None,
        body: bytes = b"no",
        close_after_answer: bool = False,
    ):
        self.status, self.retry_after, self.body = status, retry_after, body
        self.close_after_answer = close_after_answer
        self.posts: list[float] = []
        super().__init__()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        self.posts.append(time.monotonic())
        headers = {} if self.retry_after is None else {"Retry-After": self.retry_after}
        return self.status, headers, self.body


class SlowServer(PostServer):
    """Answers every POST 200 after ``seconds``, keeping each body in arrival order: an
    exporter on a node whose disk is slow to sync its journal."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.bodies: list[dict] = []
        super().__init__()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        time.sleep(self.seconds)
        self.bodies.append(json.loads(body))
        return 200, {}, b"ok\n"


def test_the_end_goes_next_past_a_backlog_and_what_it_supersedes_is_counted_dropped():
    """An exporter answering in 0.5 s, three epoch ends queued behind the start when
    ``end()`` is called: sent in order, the backlog outlasted the 2 s ``end()`` waits,
    and the end, which carries the whole state, never arrived nor was counted. The
    end now goes next; what it supersedes is counted dropped."""
    server = SlowServer(0.5)
    try:
        r = start(epochs=3, url=f"http://127.0.0.1:{server.port}/progress")
        for epoch in (1, 2, 3):
            r.epoch_end(epoch, loss=0.1 * epoch)
        r.end(accuracy=0.9)
    finally:
        server.close()
    assert [b["event"] for b in server.bodies] == ["start", "end"]
    assert (server.bodies[-1]["epoch"], server.bodies[-1]["metrics"]) == (
        3,
        {"loss": 0.30000000000000004, "accuracy": 0.9},
    )
    assert r.stats == {"sent": 2, "rejected": 0, "failed": 0, "dropped": 3, "ignored": 0}


def test_what_close_could_not_send_is_counted_dropped_when_it_returns():
    """An exporter slower than the flush timeout: the report still queued when
    ``close()`` returns is counted dropped then, not later by the sender thread (or
    never, when the process exits first)."""
    server = SlowServer(1.0)
    try:
        r = start(epochs=3, url=f"http://127.0.0.1:{server.port}/progress")
        r.epoch_end(1)
        r.close(0.3)  # the start in flight, the epoch end behind it
        stats = r.stats
    finally:
        server.close()
    assert (stats["sent"], stats["dropped"]) == (0, 1)


class HoldingRelay(PostServer):
    """A slow way to the exporter for one reporter: each POST is forwarded to the
    listener on ``target_port`` from ``source`` (the pod's address) and its answer sent
    back, but an ``end`` is held until ``release`` is set (``holding`` is set once one
    waits): an exporter slower than the reporter's flush timeout."""

    def __init__(self, target_port: int, source: str):
        import threading

        self.target = ("127.0.0.1", target_port)
        self.source = (source, 0)
        self.holding = threading.Event()
        self.release = threading.Event()
        super().__init__()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        import http.client

        if json.loads(body).get("event") == "end":
            self.holding.set()
            self.release.wait(10)
        conn = http.client.HTTPConnection(*self.target, timeout=10, source_address=self.source)
        try:
            conn.request("POST", "/progress", body=body)
            resp = conn.getresponse()
            return resp.status, {}, resp.read()
        finally:
            conn.close()

    def close(self) -> None:
        self.release.set()
        super().close()


def test_a_new_reporters_start_overtaking_the_old_ones_end_is_a_new_run(listener, caplog):
    """A notebook cell runs ``ProgressReporter(run_id="exp")`` again while the old
    reporter's end is still on its way (``end()`` returned at its flush timeout, the
    exporter slow). Every report of the old reporter carries its own ``run_start`` and
    the new one's a later one: the new start replaces the run, and the old end,
    arriving after it, is refused (409) instead of ending the new training."""
    relay = HoldingRelay(listener.port, POD.ip)
    try:
        old_url = f"http://127.0.0.1:{relay.port}/progress"
        old = start(epochs=10, run_id="exp", url=old_url, timeout_seconds=10)
        old.epoch_end(9)
        old.end(flush_timeout_seconds=0.2)  # the end is held: end() returns without it
        assert relay.holding.wait(5)
        new = start(epochs=10, run_id="exp", url=url(listener), source_address=POD.ip)
        new.epoch_end(1)
        wait_for(lambda: listener.store.snapshot()[0].epoch == 1)
        relay.release.set()
        wait_for(lambda: old.stats["rejected"] == 1)  # the old end, answered at last
        new.end()
    finally:
        relay.close()
    (p,) = listener.store.snapshot()
    assert (p.run_id, p.epoch, p.epochs) == ("exp", 1, 10)
    assert p.run_start_timestamp == round(new.run_start, 3) > round(old.run_start, 3)
    assert p.ended_timestamp is not None  # by the new run's own end
    assert listener.counts()["superseded"] == 1
    assert old.stats == {"sent": 2, "rejected": 1, "failed": 0, "dropped": 0, "ignored": 0}
    assert any("(409): superseded: run exp" in r.getMessage() for r in caplog.records)


def test_a_long_retry_after_is_capped(monkeypatch):
    """``Retry-After: 3600`` holds the reports ``MAX_RETRY_AFTER_SECONDS`` at most (made
    0.5 s here), then the newest is sent; refused again with nothing newer, that one is
    sent again after each hold until ``end()``'s flush timeout, and no sooner."""
    monkeypatch.setattr(client, "MAX_RETRY_AFTER_SECONDS", 0.5)
    server = AnsweringServer(429, "3600")
    try:
        r = start(epochs=2, url=f"http://127.0.0.1:{server.port}/progress")
        time.sleep(0.2)  # the start is answered: the hold begins
        r.epoch_end(1)
        t0 = time.monotonic()
        r.end(flush_timeout_seconds=2)
        waited = time.monotonic() - t0
        posts = list(server.posts)
    finally:
        server.close()
    gaps = [b - a for a, b in itertools.pairwise(posts)]
    assert 3 <= len(posts) <= 6 and all(0.4 < gap < 1.5 for gap in gaps), gaps
    assert r.stats == {"sent": 0, "rejected": len(posts), "failed": 0, "dropped": 1, "ignored": 0}
    assert 1.5 < waited < 3.0  # the flush timeout, and no hold past it


def test_a_503_without_retry_after_holds_nothing(tmp_path):
    """The exporter's 503 ``not_persisted`` carries no ``Retry-After`` (its report was
    applied in memory): the client goes on sending each report as it comes."""
    store = ProgressStore(tmp_path / "state" / "progress.json")
    store.journal.close()  # a journal that writes nothing: every report is answered 503
    with listening_for(POD, store=store) as lst:
        r = start(epochs=2, url=url(lst), source_address=POD.ip)
        r.epoch_end(1)
        r.end()
        counts = lst.counts()
    assert r.stats == {"sent": 0, "rejected": 3, "failed": 0, "dropped": 0, "ignored": 0}
    assert counts["not_persisted"] == 3


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, None),
        ("", None),
        ("soon", None),
        ("-5", None),
        ("0", 0.0),
        ("7", 7.0),
        (" 12 ", 12.0),
        ("120", client.MAX_RETRY_AFTER_SECONDS),
        ("9" * 400, client.MAX_RETRY_AFTER_SECONDS),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),  # 10 s after ``now`` below
        ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # already past
        ("Wed, 21 Oct 2015 08:28:00 GMT", client.MAX_RETRY_AFTER_SECONDS),
    ],
)
def test_retry_after_values(value, expected):
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT
    assert client.retry_after_seconds(value, now=now) == expected
    # the client keeps its own copy (it installs alone): it reads as the project's
    # reader does, but for its cap
    shared = parse_retry_after(value, now)
    if shared is not None:
        assert expected == min(shared, client.MAX_RETRY_AFTER_SECONDS)
    else:
        assert expected is None or value == "9" * 400  # beyond the shared 9 digits


def test_bad_metric_values_are_dropped_not_sent(listener):
    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.epoch_end(1, loss=float("nan"), acc=0.5, name="text", **{"bad name": 1.0})
    r.end()
    (p,) = listener.store.snapshot()
    assert dict(p.metrics) == {"acc": 0.5, "bad_name": 1.0}
    assert listener.counts()["invalid"] == 0


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"GPU_ETA_URL": "http://10.1.2.3:9843/progress"}, "http://10.1.2.3:9843/progress"),
        ({"GPU_ETA_URL": "10.1.2.3:9999"}, "http://10.1.2.3:9999/progress"),
        # no scheme: the exporter's port; a scheme: the port it says, else the scheme's
        ({"GPU_ETA_URL": "10.1.2.3"}, "http://10.1.2.3:9843/progress"),
        ({"GPU_ETA_URL": "exporter.ns.svc/report"}, "http://exporter.ns.svc:9843/report"),
        ({"GPU_ETA_URL": "[fd00::7]"}, "http://[fd00::7]:9843/progress"),
        ({"GPU_ETA_URL": "10.1.2.3:"}, "http://10.1.2.3:9843/progress"),
        ({"GPU_ETA_URL": "http://10.1.2.3"}, "http://10.1.2.3/progress"),
        ({"HOST_IP": "10.0.0.7"}, "http://10.0.0.7:9843/progress"),
        ({"NODE_IP": "fd00::7", "GPU_ETA_PORT": "9000"}, "http://[fd00::7]:9000/progress"),
        ({}, None),
    ],
)
def test_exporter_url_from_environment(env, expected):
    assert exporter_url(env) == expected


@pytest.mark.parametrize(
    ("value", "target"),
    [
        ("http://127.0.0.1/progress", ("127.0.0.1", 80, "/progress")),
        ("http://exporter", ("exporter", 80, "/progress")),
        ("http://exporter:/p", ("exporter", 80, "/p")),
        ("http://[fd00::7]/progress", ("fd00::7", 80, "/progress")),
        ("HTTP://Exporter:9000/x", ("exporter", 9000, "/x")),
        ("http://10.0.0.5:9843/progress", ("10.0.0.5", 9843, "/progress")),
    ],
)
def test_an_http_url_without_a_port_means_port_80(value, target):
    """As for curl, requests and browsers: only a ``GPU_ETA_URL`` without a scheme
    (``exporter_url``) is given the exporter's port 9843."""
    assert client.exporter_target(value) == target


@pytest.mark.parametrize(
    "value",
    [
        "https://10.0.0.5/progress",
        "10.0.0.5:9843",
        "http:///progress",
        "http://h:0/p",
        "http://a..b/",
    ],
)
def test_an_exporter_url_that_cannot_be_posted_to_is_refused(value):
    with pytest.raises(ValueError):
        client.exporter_target(value)


def test_a_url_naming_its_port_reaches_the_listener_there(monkeypatch):
    """End to end through both forms: a URL argument without a path, and
    ``GPU_ETA_URL`` as ``host:port``; each reaches the listener on the port it names."""
    with listening_for(POD) as lst:
        for url_argument, env in ((f"http://127.0.0.1:{lst.port}", None), (None, lst.port)):
            if env is not None:
                monkeypatch.setenv("GPU_ETA_URL", f"127.0.0.1:{env}")
            r = start(epochs=1, url=url_argument, source_address=POD.ip)
            r.epoch_end(1)
            r.end()
            assert r.stats["sent"] == 3, (url_argument, env, r.stats)


def test_no_address_means_disabled_quietly(monkeypatch):
    for name in ("GPU_ETA_URL", "GPU_ETA_HOST_IP", "HOST_IP", "NODE_IP"):
        monkeypatch.delenv(name, raising=False)
    r = ProgressReporter(epochs=3)
    assert not r.enabled
    r.step(1)
    r.epoch_end(1)
    r.end()
    assert r.stats == {"sent": 0, "rejected": 0, "failed": 0, "dropped": 0, "ignored": 0}


def test_wire_body_is_the_documented_format(listener):
    r = ProgressReporter(
        url(listener), epochs=4, steps_per_epoch=10, batch_size=8, container="notebook"
    )
    body = json.loads(r._body("progress"))
    assert set(body) == {
        "run_id",
        "run_start",
        "event",
        "epoch",
        "step",
        "epochs",
        "steps",
        "batch_size",
        "container",
    }
    r.close(0.1)


def test_the_client_copies_of_the_wire_rules_match_the_parser() -> None:
    """The client is one vendorable file, so it cannot import ``gpu_eta.exporter.progress``;
    its copies of the wire rules must stay the parser's, its progress bound the one the
    exporter and the forecaster share (``common.progress_bound``)."""
    assert client._RESERVED == progress._KNOWN
    assert client.MAX_METRICS == progress.MAX_METRICS
    assert client.MAX_NUMBER == progress_bound.MAX_PROGRESS
    assert client.MIN_PLANNED == progress_bound.MIN_PLANNED
    assert client._METRIC_NAME.pattern == progress._METRIC_NAME.pattern
    assert client._RUN_ID.pattern == progress._RUN_ID.pattern
    assert client._CONTAINER.pattern == progress._CONTAINER.pattern


# -- the send timeout: argument, GPU_ETA_TIMEOUT_SECONDS, default 2 s -------------------


class SilentExporter:
    """A real TCP server that accepts and reads but never answers: a hung exporter.

    Records when each connection arrives, so a test sees the client give up on one
    connection (its timeout) and retry on a new one.
    """

    def __init__(self) -> None:
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted: list[float] = []
        self._held: list = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted.append(time.monotonic())
            self._take(conn)

    def _take(self, conn) -> None:
        self._held.append(conn)  # read nothing back, answer nothing

    def close(self) -> None:
        self.sock.close()
        for conn in self._held:
            conn.close()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_the_send_timeout_is_configurable(how, monkeypatch):
    silent = SilentExporter()
    try:
        if how == "environment":
            monkeypatch.setenv("GPU_ETA_TIMEOUT_SECONDS", "0.25")
            options = {}
        else:
            monkeypatch.setenv("GPU_ETA_TIMEOUT_SECONDS", "30")  # the argument wins
            options = {"timeout_seconds": 0.25}
        r = start(epochs=2, url=f"http://127.0.0.1:{silent.port}/progress", **options)
        assert r.timeout_seconds == 0.25
        r.end(flush_timeout_seconds=10)
        # the start timed out; the end, tried at once on a new connection, timed out too
        assert r.stats["failed"] >= 1 and r.stats["sent"] == 0
        first, second = silent.accepted[:2]
        assert second - first < 1.5  # the 2 s default would be at least 2 s apart
    finally:
        silent.close()


@pytest.mark.parametrize("value", ["abc", "-1", "0", "nan", "inf", "1e9", "2s", " "])
def test_a_bad_timeout_in_the_environment_is_the_default_with_a_warning(value, monkeypatch, caplog):
    monkeypatch.setenv("GPU_ETA_TIMEOUT_SECONDS", value)
    assert client.timeout_setting() == client.DEFAULT_TIMEOUT_SECONDS
    assert caplog.text.count("GPU_ETA_TIMEOUT_SECONDS") == (0 if value == " " else 1)


@pytest.mark.parametrize(
    ("given", "meant"),
    [
        ("GPU_ETA_TIMEOUT", "GPU_ETA_TIMEOUT_SECONDS"),
        ("GPU_ETA_ULR", "GPU_ETA_URL"),
        ("gpu_eta_url", "GPU_ETA_URL"),
        ("GPU_ETA_ANYRANK", "GPU_ETA_ANY_RANK"),
        ("GPUETA_URL", "GPU_ETA_URL"),
        ("GPU_ETA_HOSTIP", "GPU_ETA_HOST_IP"),
    ],
)
def test_a_misspelt_environment_variable_is_named_with_the_one_meant(
    given, meant, monkeypatch, caplog
):
    """A setting misspelt in a pod spec is not read: said once, with the name meant,
    as a misspelt keyword is (``check_options``). Unsaid, ``GPU_ETA_TIMEOUT=30`` left
    the 2 s timeout, and ``GPU_ETA_ULR`` left only "no exporter address"."""
    monkeypatch.setattr(client, "_WARNED_SETTINGS", set())
    monkeypatch.setenv(given, "30")
    with caplog.at_level(logging.WARNING, logger="gpu_eta.report"):
        for _ in range(2):  # a second reporter (a sweep's next trial) says it no more
            ProgressReporter(url=f"http://127.0.0.1:{dead_port()}/progress").close(0)
    said = [m for m in caplog.messages if given in m]
    assert said == [f"gpu-eta: environment variable {given} is not read; did you mean {meant}?"]
    assert "30" not in said[0]  # a value is never logged: it may be a token


def test_other_environment_variables_are_not_taken_for_misspelt_settings():
    env = {n: "1" for n in ("GPU_ETA_URL", "GPU_ETA_TIMEOUT_SECONDS", "HOST_IP", "PATH")}
    env |= {n: "1" for n in ("GPU_ETA_PROGRESS", "GPU_ETA_RUN_ID", "GPU_ETA_DEMO_PROG")}
    env[client.RANK_AT_IMPORT_VARIABLE] = "1:0"
    assert client.misspelt_settings(env) == []


@pytest.mark.parametrize("value", ["x", -1, 0, float("nan"), True, [1], 61])
def test_a_bad_timeout_argument_never_raises(value, monkeypatch, caplog):
    monkeypatch.delenv("GPU_ETA_TIMEOUT_SECONDS", raising=False)
    r = ProgressReporter(url=f"http://127.0.0.1:{dead_port()}/progress", timeout_seconds=value)
    try:
        assert r.timeout_seconds == client.DEFAULT_TIMEOUT_SECONDS
        assert "timeout_seconds=" in caplog.text
    finally:
        r.close(0.1)


def test_the_timeout_default_and_a_good_environment_value(monkeypatch):
    monkeypatch.delenv("GPU_ETA_TIMEOUT_SECONDS", raising=False)
    assert client.timeout_setting() == 2.0
    assert client.timeout_setting(env={"GPU_ETA_TIMEOUT_SECONDS": "7.5"}) == 7.5
    assert client.timeout_setting(3, env={"GPU_ETA_TIMEOUT_SECONDS": "7.5"}) == 3.0


@pytest.mark.parametrize("wait", ["x", float("nan"), -1, [1]])
def test_a_bad_flush_timeout_never_raises(wait, listener):
    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.close(wait)  # waits the send timeout instead
    assert r.stats["sent"] == 1


def test_a_flush_timeout_too_large_for_a_float_still_stops_the_sender(listener, caplog):
    """``float(10**400)`` raises ``OverflowError``: it once escaped the parse, and
    ``close`` returned with the sender thread still running."""
    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.close(10**400)  # waits the send timeout instead
    assert r._thread is None and r.stats["ignored"] == 0
    assert "flush_timeout_seconds=" in caplog.text


def test_metrics_as_a_mapping_may_hold_any_name(listener):
    """A framework's logs passed whole (``metrics=logs``): names that clash with the
    parameters (``step``, ``epoch``) or are no identifiers are no error, and only the
    progress arguments set the progress."""
    r = start(epochs=3, url=url(listener), source_address=POD.ip, min_interval_seconds=0)
    logs = {"step": 99.0, "epoch": 7.0, "eval/loss": 0.25}
    r.step(4, metrics=logs, acc=0.5)
    r.epoch_end(1, metrics=logs)
    r.end(metrics={"loss": 0.1})
    assert r.stats["rejected"] == 0 and r.stats["sent"] == 4
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.step) == (1, 4)
    assert dict(p.metrics) == {"eval_loss": 0.25, "acc": 0.5, "loss": 0.1}


# -- nothing the training script passes makes the reporter raise ----------------------


@pytest.mark.parametrize("value", ["http://[::1", "http://10.0.0.5:9843\u2100/progress"])
def test_an_unparsable_exporter_url_disables_quietly(value, monkeypatch, caplog):
    monkeypatch.setenv("GPU_ETA_URL", value)
    assert exporter_url() == value  # passed on as given: the reporter says it is bad
    r = start(epochs=3)
    r.step(1)
    r.end()
    assert not r.enabled and "bad exporter URL" in caplog.text


@pytest.mark.parametrize(
    "value",
    ["http://alice:s3cret@10.0.0.5:9843/progress", "http://alice:s3/cret@10.0.0.5:9843"],
)
def test_an_exporter_url_with_a_password_is_refused_without_showing_it(value, monkeypatch, caplog):
    """The exporter takes no credentials (the reporter never sent them): such a URL
    disables the reporter, and the training job's log shows neither URL nor password."""
    monkeypatch.setenv("GPU_ETA_URL", value)
    r = start(epochs=3)
    r.end()
    assert not r.enabled and "bad exporter URL" in caplog.text
    assert "s3" not in caplog.text and "alice" not in caplog.text, caplog.text


def test_numpy_and_torch_scalars_are_reported_as_numbers(listener):
    """Plans and counters straight from array code (``np.int64``, a 0-d tensor):
    ``json`` cannot encode them, which once raised from ``start()`` and lost every
    later report, uncounted, and left ``end()`` without stopping the sender."""
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    r = start(
        epochs=np.int64(2),
        steps_per_epoch=np.int32(5),
        batch_size=torch.tensor(32),
        url=url(listener),
        source_address=POD.ip,
        min_interval_seconds=0,
    )
    for i in range(1, 11):
        r.step(np.int64(i))
        if i % 5 == 0:
            r.epoch_end(torch.tensor(i // 5), loss=np.float32(0.5))
    r.end()
    assert r._thread is None  # end() stopped the sender
    assert r.stats == {"sent": 14, "rejected": 0, "failed": 0, "dropped": 0, "ignored": 0}
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps, p.batch_size) == (2, 2, 10, 10, 32)


def test_a_loss_tensor_still_in_its_graph_is_reported_without_a_warning(listener):
    """``r.step(i, loss=loss)`` with the loss just backpropagated: ``float()`` of a
    tensor that requires grad makes torch print a UserWarning into the user's training
    output, every run. The client detaches such a tensor first (it imports no torch)."""
    torch = pytest.importorskip("torch")
    weight = torch.tensor(2.0, requires_grad=True)
    loss = weight * 3
    step = (weight * 0 + 4).squeeze()  # a progress value in the graph too
    r = start(epochs=1, steps=4, url=url(listener), source_address=POD.ip, min_interval_seconds=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r.step(step, loss=loss)
        r.epoch_end(1, loss=loss, metrics={"grad_norm": weight * 1})
        r.end()
    assert [str(w.message) for w in caught] == []
    assert loss.requires_grad and loss.grad_fn is not None  # the caller's tensor untouched
    (p,) = listener.store.snapshot()
    assert (p.step, p.metrics["loss"], p.metrics["grad_norm"]) == (4, 6.0, 2.0)


def test_a_run_counting_tokens_is_reported_exactly(listener):
    """A language model's pretraining counts tokens as its steps: 15 trillion (1.5e13,
    Llama 3's scale) planned. Sent and stored exactly, none ignored or refused; the
    wire format's bound, 1e15, is accepted, 1 % over it left out as unusable."""
    r = start(
        steps=15_000_000_000_000, url=url(listener), source_address=POD.ip, min_interval_seconds=0
    )
    r.step(12_000_000_000_000, tokens_per_second=2.5e6, seen=1.2e13)
    r.end()
    assert r.stats["sent"] == 3 and r.stats["ignored"] == r.stats["rejected"] == 0
    (p,) = listener.store.snapshot()
    assert (p.step, p.steps, p.metrics["seen"]) == (1.2e13, 1.5e13, 1.2e13)
    assert client._count(1e15, 0) == 1e15 and client._count(1e15 * 1.01, 0) is None
    assert client.merge_metrics({}, {"a": -1e15, "b": 1e15 * 1.01}) == (
        {"a": -1e15},
        [("b", "beyond 1e+15")],
    )


def test_an_unusable_progress_value_is_left_out_not_the_report(listener, caplog):
    """Values the exporter would refuse the whole report for (a plan over 1e15, as HF
    gives for streamed data, a NaN step, a negative epoch, a string) are left out and
    counted ``ignored``, each field logged once; the rest of the report is sent."""
    r = start(
        epochs=sys.maxsize,
        steps=float("inf"),
        batch_size=True,
        url=url(listener),
        source_address=POD.ip,
        min_interval_seconds=0,
    )
    assert (r.epochs, r.steps, r.batch_size) == (None, None, None)
    r.step(5)
    r.step(float("nan"))
    r.step("six")
    r.epoch_end(-1, loss=0.5)
    r.epoch_end(1)
    r.end()
    assert r.stats["ignored"] == 6 and r.stats["rejected"] == 0 and r.stats["sent"] == 7
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.step, p.metrics["loss"]) == (1, 5, 0.5)
    assert listener.counts()["invalid"] == 0
    for name in ("epochs", "steps", "batch_size", "step", "epoch"):
        assert caplog.text.count(f"gpu-eta: {name}=") == 1


def test_progress_beyond_the_plan_is_reported_at_the_plan_with_one_warning(listener, caplog):
    """A loop training past the plan it stated (``epochs=2, steps_per_epoch=5``, four
    epochs trained): the exporter refuses an epoch beyond the planned epochs, so the
    client sends the plan's values (2 of 2, 10 of 10), which read as finished while the
    loop trains on. That was silent; the first value beyond the plan is warned of once,
    naming what was clamped and how to state the new plan."""
    caplog.set_level("WARNING", logger="gpu_eta.report")
    r = start(
        epochs=2,
        steps_per_epoch=5,
        url=url(listener),
        source_address=POD.ip,
        min_interval_seconds=0,
    )
    for epoch in range(1, 5):
        r.step(5 * epoch)
        r.epoch_end(epoch)
    r.end()
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 10, 10)
    assert r.stats["rejected"] == 0
    clamped = [m for m in caplog.messages if "beyond the plan" in m]
    assert clamped == [
        "gpu-eta: step 15 is beyond the plan (10 steps), reported as 10: the run looks "
        "finished while it trains on (state its plan with plan()); not logged again"
    ]


def test_a_step_beyond_a_plan_the_caller_restates_is_logged_at_debug(listener, caplog):
    """A framework callback that states the steps again when an epoch ends longer than
    the plan assumed (Keras on a dataset without a length) clamps the steps meanwhile:
    the warning told its user to call ``plan()``, which a callback user cannot and
    need not do. Told so (``_restates_plan``), the reporter logs that clamp at DEBUG,
    once; an epoch beyond its plan, which the callback does not restate, is still
    warned of."""
    caplog.set_level("DEBUG", logger="gpu_eta.report")
    r = start(epochs=2, steps=14, url=url(listener), source_address=POD.ip)
    r._restates_plan("step")
    for step in (15, 16):
        r.step(step)
    r.epoch_end(2, step=16)
    r.plan(steps=16)
    r.epoch_end(3, step=16)
    r.end()
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs, p.step, p.steps) == (2, 2, 16, 16)
    clamped = [(rec.levelname, rec.getMessage()) for rec in caplog.records if "beyond" in rec.msg]
    assert clamped == [
        (
            "DEBUG",
            "gpu-eta: step 15 is beyond the plan (14 steps), reported as 14: until the "
            "callback states the plan again; not logged again",
        ),
        (
            "WARNING",
            "gpu-eta: epoch 3 is beyond the plan (2 epochs), reported as 2: the run looks "
            "finished while it trains on (state its plan with plan()); not logged again",
        ),
    ]


@pytest.mark.parametrize("value", [float("nan"), "1s", -1, None, [1]])
def test_a_bad_min_interval_is_the_default_with_a_warning(value, listener, caplog):
    """NaN once meant no step report at all (every comparison false), a string one
    TypeError per ``step()``, swallowed: the run looked stuck at its start."""
    r = start(epochs=2, url=url(listener), source_address=POD.ip, min_interval_seconds=value)
    assert r.min_interval_seconds == client.DEFAULT_MIN_INTERVAL_SECONDS
    r.step(3)
    r.end()
    (p,) = listener.store.snapshot()
    assert p.step == 3 and r.stats["ignored"] == 0
    assert "min_interval_seconds=" in caplog.text


def test_a_failing_constructor_gives_a_disabled_reporter(listener, caplog):
    class Unprintable:
        def __str__(self) -> str:
            raise RuntimeError("no")

    r = start(epochs=2, url=url(listener), run_id=Unprintable(), queue_size="x")
    r.step(1)
    r.end()
    assert not r.enabled and "reporter not started" in caplog.text
    r = start(epochs=2, url=url(listener), source_address=POD.ip, queue_size="x")
    r.end()
    assert r.enabled and r.stats["sent"] == 2


# -- network failures: backoff thins step reports only --------------------------------


def wait_for(condition, seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_an_exporter_back_from_a_restart_gets_the_epoch_end_and_the_end():
    """Three failed sends in a row (an exporter restarting) put the sender in a 2 s
    backoff. The exporter is back: a step report is still dropped, but the epoch end
    and the end are tried and stored; they were dropped untried, and a run without a
    plan was then never ended."""
    port = dead_port()  # nothing listens here yet
    r = start(
        url=f"http://127.0.0.1:{port}/progress", source_address=POD.ip, min_interval_seconds=0
    )
    for failures, step in ((1, 1), (2, 2), (3, None)):
        wait_for(lambda n=failures: r.stats["failed"] == n)
        if step is not None:
            time.sleep(0.5 * 2 ** (failures - 1) + 0.1)  # past this failure's backoff
            r.step(step)
    with listening_for(POD, port=port) as lst:
        r.step(3)  # within the 2 s backoff: dropped
        r.epoch_end(1)
        r.end()
        (p,) = lst.store.snapshot()
    assert r.stats == {"sent": 2, "rejected": 0, "failed": 3, "dropped": 1, "ignored": 0}
    assert (p.run_id, p.epoch, p.step) == (r.run_id, 1, 3)  # the dropped step's, too
    assert (p.epochs, p.steps) == (None, 3)  # ended: its totals are what it reached


def _report_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "gpu_eta.report"]


def test_an_unreachable_exporter_is_logged_once_not_per_report(caplog):
    """A notebook that cannot reach its exporter loses all its progress: it is told
    so in one WARNING naming the URL and the cause, not one line per report."""
    target = f"http://127.0.0.1:{dead_port()}/progress"
    with caplog.at_level(logging.INFO, logger="gpu_eta.report"):
        r = start(epochs=5, url=target, min_interval_seconds=0)
        for epoch in range(1, 4):
            r.step(epoch * 10)
            r.epoch_end(epoch)
        r.end()
    assert r.stats["failed"] >= 5  # the start, 3 epoch ends and the end: always tried
    ((level, line),) = _report_lines(caplog)
    assert level == logging.WARNING and "\n" not in line
    assert target in line and "Connection refused" in line


def test_an_exporter_reached_again_is_logged_once_at_info(caplog):
    port = dead_port()  # nothing listens here yet
    target = f"http://127.0.0.1:{port}/progress"
    with caplog.at_level(logging.INFO, logger="gpu_eta.report"):
        r = start(url=target, source_address=POD.ip, min_interval_seconds=0)
        wait_for(lambda: r.stats["failed"] == 1)
        with listening_for(POD, port=port):
            r.epoch_end(1)
            r.epoch_end(2)
            r.end()
    assert r.stats["sent"] == 3
    (warning, info) = _report_lines(caplog)
    assert warning[0] == logging.WARNING and target in warning[1]
    assert info[0] == logging.INFO and target in info[1] and "again" in info[1]


def test_failures_are_warned_of_at_most_once_per_interval_and_on_recovery():
    """``FailureWarnings`` decides; the clock is passed in. A first failure warns at
    once; failures go on being counted, and the next warning names how many came
    since the last; a recovery after a warning is said once; an exporter that fails
    every other report still gives at most a warning and a recovery per interval."""
    warnings = client.FailureWarnings(interval_seconds=600)
    assert warnings.failed(now=0.0) == 1
    assert [warnings.failed(now=t) for t in (1.0, 2.0, 599.0)] == [None] * 3
    assert warnings.failed(now=600.0) == 4  # the three left quiet, and this one
    assert warnings.reached() and not warnings.reached()
    lines = 0
    for t in range(601, 1201):  # fails, answers, fails, answers...
        lines += warnings.failed(now=float(t)) is not None
        lines += warnings.reached()
    assert lines == 2  # at 1200 s: a warning of the 600 failures since, and the recovery
    assert not client.FailureWarnings(interval_seconds=600).reached()  # nothing failed


def test_the_first_backoff_is_half_a_second():
    port = dead_port()
    r = start(url=f"http://127.0.0.1:{port}/progress", min_interval_seconds=0)
    wait_for(lambda: r.stats["failed"] == 1)
    time.sleep(0.75)
    r.step(1)  # past 0.5 s: tried
    wait_for(lambda: r.stats["failed"] + r.stats["dropped"] == 2)
    r.close(0)
    assert (r.stats["failed"], r.stats["dropped"]) == (2, 0)


@pytest.mark.parametrize(
    ("initial", "first"),
    [({"initial_epoch": 3}, (3, 15)), ({"initial_epoch": 3, "initial_step": 17}, (3, 17))],
)
def test_a_resumed_run_is_announced_where_it_resumes(initial, first, tmp_path):
    with listening_for(POD, store=journaling_store(tmp_path)) as lst:
        r = start(epochs=10, steps_per_epoch=5, url=url(lst), source_address=POD.ip, **initial)
        r.epoch_end(4)
        r.end()
        rows = journaled(lst.store)
    assert [(row["epoch"], row["step"]) for row in rows] == [first, (4, 20), (4, 20)]


def test_a_plan_changed_while_the_run_trains_is_stored_at_once(tmp_path):
    """``plan()``: a plan stated late, raised with its steps following ``steps_per_epoch``,
    lowered, and kept where a total is left out (the wire keeps it: none can be taken
    back); a bad total is ignored, not the report. The exporter accepts every one."""
    with listening_for(POD, store=journaling_store(tmp_path)) as lst:
        r = start(url=url(lst), source_address=POD.ip)
        r.epoch_end(1, step=5)
        r.plan(epochs=4)  # no steps_per_epoch: the steps stay unplanned
        r.plan(steps=20)
        r.plan(epochs=2, steps=None)
        r.plan(epochs=float("nan"), steps=0)
        r.end()
        rows = journaled(lst.store)
        resized = start(epochs=2, steps_per_epoch=5, url=url(lst), source_address=POD.ip)
        resized.plan(epochs=3)
        resized.close()
    assert [(row["epochs"], row["steps"]) for row in rows] == [
        (None, None),
        (None, None),
        (4, None),
        (4, 20),
        (2, 20),
        (2, 20),
        (2, 20),
    ]
    assert r.stats["rejected"] == 0 and r.stats["ignored"] == 1
    assert (resized.epochs, resized.steps) == (3, 15)


# -- one reporting process per job ----------------------------------------------------


@pytest.mark.parametrize(
    ("env", "reports"),
    [
        ({}, True),
        ({"RANK": "0", "LOCAL_RANK": "0"}, True),
        ({"LOCAL_RANK": "-1"}, True),  # HF's "not distributed"
        ({"RANK": "1"}, True),  # a Kubeflow PyTorchJob's second pod: one process a pod
        ({"HOROVOD_LOCAL_RANK": "1", "RANK": "1"}, False),
        ({"RANK": "0", "LOCAL_RANK": "2"}, False),
        ({"RANK": "3", "GPU_ETA_ANY_RANK": "1"}, True),
        ({"RANK": "8", "LOCAL_RANK": "0"}, True),  # the first process of a second pod
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "1", "RANK": "0"}, False),
        ({"SLURM_LOCALID": "0", "RANK": "5"}, True),
        ({"MPI_LOCALRANKID": "3"}, False),
    ],
)
def test_only_each_pods_first_process_reports(env, reports, listener, monkeypatch):
    """Two ranks of one pod each with a reporter were two runs in turn: every report
    started the other's run anew, and the container's run cap refused them. Each pod of
    a multi-node job reports (its node-local rank 0), so every pod's GPUs get a
    forecast."""
    for name in ("RANK", *LOCAL_RANK_VARIABLES, "GPU_ETA_ANY_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.epoch_end(1)
    r.end()
    assert r.enabled is reports
    assert len(listener.store.snapshot()) == int(reports)


def test_a_misspelt_keyword_is_a_type_error_at_the_call_naming_the_right_one(listener):
    """``start(epochs=3, timeout=5)``: a keyword ``start`` does not take is a programming
    error, raised at the call (before any training) as by any Python function, and
    naming the keyword meant; every value of a keyword it takes is still taken without
    raising."""
    with pytest.raises(TypeError, match=r"'timeout'.*'timeout_seconds'"):
        start(epochs=3, timeout=5, url=url(listener))
    with pytest.raises(TypeError, match=r"'nonsense'"):
        start(epochs=3, nonsense=1, url=url(listener))
    r = start(epochs=3, timeout_seconds="5s", url=url(listener), source_address=POD.ip)
    r.end()
    assert r.timeout_seconds == client.DEFAULT_TIMEOUT_SECONDS and r.stats["sent"] == 2


def test_any_rank_argument_overrides_the_environment(listener, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("GPU_ETA_ANY_RANK", "1")
    assert not start(url=url(listener), any_rank=False).enabled
    monkeypatch.delenv("GPU_ETA_ANY_RANK")
    r = start(epochs=2, url=url(listener), source_address=POD.ip, any_rank=True)
    r.end()
    (p,) = listener.store.snapshot()
    assert p.run_id == r.run_id


# -- interpreter exit -----------------------------------------------------------------


def test_a_closed_reporter_is_not_kept_alive(listener):
    import gc
    import weakref

    r = start(epochs=2, url=url(listener), source_address=POD.ip)
    r.end()
    ref = weakref.ref(r)
    del r
    gc.collect()
    assert ref() is None  # an exit hook per reporter once kept every one


def test_open_reporters_hold_the_exit_one_second_in_all():
    """Ten reporters left open towards an exporter that never answers: the exit
    waits 1 s for their reports in all, not 1 s (and more) for each (10 s: ten so that
    this is far from the 1 s right, however loaded the machine)."""
    silent = SilentExporter()
    code = f"""
import atexit, time
started = []
atexit.register(lambda: print("exit took %.2f" % (time.monotonic() - started[0])))
from gpu_eta_report import start
reporters = [
    start(epochs=3, url="http://127.0.0.1:{silent.port}/progress", timeout_seconds=30)
    for _ in range(10)
]
for r in reporters:
    r.epoch_end(1)
started.append(time.monotonic())
"""
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        silent.close()
    took = float(out.stdout.split()[-1])
    assert 0.9 < took < 4.0, out.stdout


@pytest.mark.parametrize("sender", ["running", "idle"])
def test_a_forked_child_neither_reports_the_parents_run_nor_waits_at_exit(sender):
    """A child forked from a training process (a helper of its own, ``os.fork``)
    inherits the reporter but not its sender thread: a report it queued (it touched
    the reporter) held its exit for the whole second given to flush, and nothing could
    send it. The child's copies are disabled: it exits at once, sends nothing, and the
    parent's run goes on. So too when the parent's sender had ended idle: the child's
    report would start a sender of its own there."""
    server = RecordingServer()
    idle = sender == "idle"
    code = f"""
import os, sys, time
from gpu_eta_report import client, start
client.SENDER_IDLE_SECONDS = {0.05 if idle else 5.0}
client.EXIT_FLUSH_SECONDS = 10.0  # a child waiting to flush is 10 s, not the load's noise
r = start(epochs=2, url="http://127.0.0.1:{server.port}/progress", min_interval_seconds=0)
r.step(1)
while {idle} and r._thread is not None:
    time.sleep(0.01)
t0 = time.monotonic()
pid = os.fork()
if pid == 0:
    r.step(999)
    sys.exit(0)
os.waitpid(pid, 0)
print("CHILD", round(time.monotonic() - t0, 2))
r.epoch_end(1, step=2)
r.end()
"""
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
    finally:
        server.close()
    assert float(out.stdout.split("CHILD")[1].split()[0]) < 5, out.stdout  # not 10 s
    assert [b["step"] for b in server.bodies] == [0, 1, 2, 2]


def test_reporters_open_side_by_side_all_report():
    """A sweep's reporter stays open while each trial starts and ends one of its own
    (same exporter, same container): the sweep's epoch ends and its end are sent, and
    no reporter is disabled because another started."""
    server = RecordingServer()
    address = dict(url=f"http://127.0.0.1:{server.port}/progress", min_interval_seconds=0)
    try:
        outer = start(epochs=3, run_id="outer-sweep", **address)
        for trial in range(3):
            inner = start(epochs=1, steps_per_epoch=2, run_id=f"trial{trial}", **address)
            inner.step(1)
            inner.end()
            outer.epoch_end(trial + 1)
        assert outer.enabled
        outer.end()
    finally:
        server.close()
    sweep = [(b["event"], b["epoch"]) for b in server.bodies if b["run_id"] == "outer-sweep"]
    assert sweep == [("start", 0), ("progress", 1), ("progress", 2), ("progress", 3), ("end", 3)]
    assert outer.stats["sent"] == 5


def _senders() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "gpu-eta-report"]


def test_a_reporter_left_open_costs_no_thread_once_idle(monkeypatch):
    """A notebook cell interrupted mid-training never calls ``end()``: its reporter's
    sender thread ended once idle, so runs again leave no thread behind; a report
    queued later starts one again and is sent."""
    monkeypatch.setattr(client, "SENDER_IDLE_SECONDS", 0.2)
    server = RecordingServer()
    try:
        before = len(_senders())
        left = [start(epochs=10, url=f"http://127.0.0.1:{server.port}/progress") for _ in range(5)]
        wait_for(lambda: len(_senders()) == before)
        assert all(r._thread is None for r in left)
        left[0].epoch_end(1)  # the sender again
        left[0].end()
    finally:
        server.close()
    first = [b["event"] for b in server.bodies if b["run_id"] == left[0].run_id]
    assert first == ["start", "progress", "end"]
    assert left[0].stats["sent"] == 3 and len(server.bodies) == 7


def test_a_kept_sender_outlives_its_idle_time_and_idles_out_once_released(monkeypatch):
    """``_keep_sender`` (the Keras callback's, while it holds a run's end back): the
    sender stays past its idle time, started again if it had gone, so a report queued at
    exit needs no new thread (CPython 3.12.0-3.12.1 refuse one there); released, it
    idles out as before."""
    monkeypatch.setattr(client, "SENDER_IDLE_SECONDS", 0.2)
    server = RecordingServer()
    try:
        r = start(epochs=10, url=f"http://127.0.0.1:{server.port}/progress")
        wait_for(lambda: r._thread is None)  # gone idle
        r._keep_sender()
        kept = r._thread
        time.sleep(0.6)  # three idle times
        assert kept is not None and kept.is_alive() and r._thread is kept
        r._keep_sender(False)
        wait_for(lambda: r._thread is None and not kept.is_alive())
        r._keep_sender()
        r.end()  # queued on the kept sender, which close() stops
    finally:
        server.close()
    assert [b["event"] for b in server.bodies] == ["start", "end"]
    assert r._thread is None and r.stats["sent"] == 2


def test_a_steady_slow_reporter_keeps_its_sender_and_connection(monkeypatch, listener):
    """A loop reporting less often than the least idle wait (an epoch every 6 s against
    5 s): the sender ended before each report and the next started a new thread and a
    new connection, a thread and a connect per report. The wait follows the reporter's
    own gaps, so a steady one keeps one thread and one connection once it has seen a
    gap (the start's sender, with none seen yet, ends before the first epoch); left
    open, its thread still ends (here within the 1 s bound) and leaves nothing behind."""
    monkeypatch.setattr(client, "SENDER_IDLE_SECONDS", 0.2)
    monkeypatch.setattr(client, "MAX_SENDER_IDLE_SECONDS", 1.0)
    connects = []

    def counting(*args, **kwargs):
        connects.append(time.monotonic())
        return deadline_connection(*args, **kwargs)

    deadline_connection = client.deadline_connection
    monkeypatch.setattr(client, "deadline_connection", counting)
    before = set(_senders())
    senders = set()
    r = start(epochs=8, url=url(listener), source_address=POD.ip)
    senders.update(_senders())  # each report's sender, while it is sure to run
    for epoch in range(1, 7):
        time.sleep(0.3)
        r.epoch_end(epoch)
        senders.update(_senders())
    wait_for(lambda: r.stats["sent"] == 7)
    left_at = time.monotonic()
    wait_for(lambda: set(_senders()) <= before, seconds=3)
    idle = time.monotonic() - left_at
    r.close()
    assert (len(senders - before), len(connects)) == (2, 2)  # 7 and 7 when it restarted
    assert 0.2 < idle < 1.5 and r.stats["failed"] == 0


@pytest.mark.parametrize(
    ("gaps", "seconds"),
    [
        ([], 5.0),  # nothing seen yet: the least
        ([0.5, 1.0], 5.0),  # a busy loop: the least
        ([6.0, 0.0, 6.1], 12.2),  # an epoch end and a step together every 6 s
        ([70.0], 120.0),  # at most 2 min
        ([3.0, 600.0], 6.0),  # a gap no wait would bridge (a notebook left for lunch)
    ],
)
def test_the_senders_idle_wait_follows_the_reporters_gaps(gaps, seconds):
    assert client.sender_idle_seconds(gaps) == seconds


def _epoch_end_after(r: ProgressReporter, epoch: int, seconds: float) -> None:
    time.sleep(seconds)
    r.epoch_end(epoch)


def test_no_report_is_stranded_while_the_sender_ends_idle(monkeypatch):
    """A report queued just as the sender thread gives up waiting is sent: the thread
    ends, and the next report starts another, under one lock. Rounds of threads queue
    epoch ends (always sent) while the sender ends idle at every empty queue; each
    round's reports are all sent with no later report to start a sender for them."""
    import threading

    monkeypatch.setattr(client, "SENDER_IDLE_SECONDS", 0.0)
    monkeypatch.setattr(client, "MAX_SENDER_IDLE_SECONDS", 0.0)  # not the rounds' gaps
    server = RecordingServer()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave as often as they can
    try:
        r = start(url=f"http://127.0.0.1:{server.port}/progress", queue_size=100_000)
        for round_ in range(60):
            threads = [
                threading.Thread(target=_epoch_end_after, args=(r, 8 * round_ + i + 1, i * 2e-4))
                for i in range(8)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            sent = 1 + 8 * (round_ + 1)  # the start and every epoch end so far
            wait_for(lambda: r.stats["sent"] == sent, 3.0)  # noqa: B023 - waited for here
        sys.setswitchinterval(switch)
        r.end(flush_timeout_seconds=30)
    finally:
        sys.setswitchinterval(switch)
        server.close()
    assert r.stats == {"sent": 482, "rejected": 0, "failed": 0, "dropped": 0, "ignored": 0}
    assert sorted(b["epoch"] for b in server.bodies if b["event"] == "progress") == list(
        range(1, 481)
    )


def test_an_ended_senders_last_step_leaves_the_next_senders_connection(monkeypatch):
    """A sender ending idle dropped the connection once more after leaving the lock; by
    then a report queued meanwhile had started another sender, mid-send on that
    connection, whose answer was then read from None (AttributeError) and the report
    counted failed (1 in ~60 rounds of the test above, on a loaded CI machine). Here the
    ended thread is held 0.1 s on its way out and the next sender's connect takes
    0.4 s: the report is sent."""
    monkeypatch.setattr(client, "SENDER_IDLE_SECONDS", 0.0)
    monkeypatch.setattr(client, "MAX_SENDER_IDLE_SECONDS", 0.0)
    drop, connect = ProgressReporter._drop_connection, client.deadline_connection

    def late_drop(self: ProgressReporter) -> None:
        if not self._cond._is_owned():  # type: ignore[attr-defined]  # after the lock
            time.sleep(0.1)
        drop(self)

    def slow_connect(*args, **kwargs):
        time.sleep(0.4)
        return connect(*args, **kwargs)

    monkeypatch.setattr(ProgressReporter, "_drop_connection", late_drop)
    server = RecordingServer()
    try:
        r = start(epochs=2, url=f"http://127.0.0.1:{server.port}/progress")
        wait_for(lambda: r.stats["sent"] == 1 and r._thread is None)
        monkeypatch.setattr(client, "deadline_connection", slow_connect)
        r.epoch_end(1)  # a new sender, while the first may still be on its way out
        wait_for(lambda: r.stats["sent"] + r.stats["failed"] == 2)
        assert r.stats["failed"] == 0
        r.close(5)
    finally:
        server.close()
    assert [b["event"] for b in server.bodies][:2] == ["start", "progress"]


def test_a_report_that_timed_out_is_not_sent_again():
    """The exporter may have received a report whose answer timed out (a slow disk):
    sending it again on a new connection doubled the wait, and maybe the report."""
    silent = SilentExporter()
    try:
        r = start(epochs=2, url=f"http://127.0.0.1:{silent.port}/progress", timeout_seconds=0.25)
        wait_for(lambda: r.stats["failed"] == 1)
        time.sleep(0.4)
        r.close(0)
        assert len(silent.accepted) == 1
    finally:
        silent.close()


class DribblingServer(SilentExporter):
    """A real TCP server that answers each request a byte every ``gap`` seconds, the
    status line and headers (``part="headers"``) or the body (``part="body"``): each
    read returns well within a send timeout, the whole answer takes long past it."""

    def __init__(self, part: str, gap: float = 0.2) -> None:
        self.part, self.gap = part, gap
        super().__init__()

    def _take(self, conn) -> None:
        import threading

        threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        # 100 bytes of body: 20 s (headers first: 28 s) a byte every 0.2 s
        head, body = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", b"x" * 100
        try:
            while b"\r\n\r\n" not in conn.recv(65536):
                pass
            if self.part == "body":
                conn.sendall(head)
            for byte in head + body if self.part == "headers" else body:
                conn.sendall(bytes([byte]))
                time.sleep(self.gap)
        except OSError:
            pass
        finally:
            conn.close()


@pytest.mark.parametrize("part", ["headers", "body"])
def test_the_send_timeout_bounds_the_whole_answer_not_each_read(part):
    """An answer dribbled a byte every 0.2 s (a proxy, an overloaded node): with the
    timeout applied to each socket read, one report held the sender for as long as the
    answer took (20 s here, minutes from a slower one) while every report after it was
    dropped. The send timeout bounds connect, send and answer together."""
    server = DribblingServer(part)
    try:
        r = start(epochs=2, url=f"http://127.0.0.1:{server.port}/progress", timeout_seconds=0.5)
        t0 = time.monotonic()
        wait_for(lambda: r.stats["failed"] == 1, seconds=4)
        took = time.monotonic() - t0
        r.close(0)
    finally:
        server.close()
    assert 0.4 < took < 2.5  # not the 20 s the answer takes


def test_a_kept_alive_connection_the_exporter_closed_is_retried_once():
    """What the retry is for: the exporter closes a kept-alive connection after 10 s
    idle; the next report finds it closed, unsent, and goes on a new one."""
    server = AnsweringServer(200, body=b"accepted", close_after_answer=True)
    try:
        r = start(epochs=2, url=f"http://127.0.0.1:{server.port}/progress")
        wait_for(lambda: r.stats["sent"] == 1)
        time.sleep(0.2)  # the server has closed it by now
        r.epoch_end(1)
        r.end()
        posts = len(server.posts)
    finally:
        server.close()
    assert r.stats["sent"] == 3 and r.stats["failed"] == 0 and posts == 3


def test_a_long_answer_is_read_whole_and_each_report_sent_once():
    """An answer longer than the first 1024 bytes the client read (another server's
    page) left the rest on the kept-alive connection: the next report then failed
    after it was sent, and was sent again on a new connection."""
    server = AnsweringServer(200, body=b"x" * 5000)
    try:
        r = start(epochs=3, url=f"http://127.0.0.1:{server.port}/progress")
        r.epoch_end(1)
        r.epoch_end(2)
        r.end()
        posts = len(server.posts)
    finally:
        server.close()
    assert r.stats["sent"] == 4 and r.stats["failed"] == 0 and posts == 4


def test_a_host_name_that_cannot_resolve_disables_the_reporter(caplog):
    """``a..b`` fails to encode when connecting (a UnicodeError, no OSError): it went
    past the network error handling, never backing off."""
    r = start(epochs=2, url="http://a..b:9843/progress")
    r.end()
    assert not r.enabled and "bad exporter URL" in caplog.text


def test_a_plan_that_is_no_scalar_is_ignored_not_the_reporter(listener):
    np = pytest.importorskip("numpy")
    r = start(epochs=np.array([1, 2]), steps=0.5, url=url(listener), source_address=POD.ip)
    r.end()
    assert r.enabled and (r.epochs, r.steps) == (None, None) and r.stats["ignored"] == 2


def _rank_in_child(rank: int | None, out) -> None:
    if rank is not None:
        os.environ["RANK"] = str(rank)  # as an mp.spawn script sets it for its worker
    out.put((rank, client.other_rank()))


def test_ranks_a_spawn_script_sets_itself_are_one_pods() -> None:
    """``torch.multiprocessing.spawn`` scripts start the ranks of one pod and set
    ``RANK`` themselves (no local rank): read in such a child, the global rank still
    keeps all but rank 0 silent, while a process that is its container's own (a
    Kubeflow PyTorchJob's) is never silenced by ``RANK`` alone."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank_in_child, args=(rank, out)) for rank in (0, 1)]
    for p in procs:
        p.start()
    got = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert got == {0: None, 1: ("RANK", "1")}
    assert client.other_rank({"RANK": "1"}) is None  # this test's process: no parent


def _rank_set_by_parent(out) -> None:
    out.put((os.environ.get("RANK"), client.other_rank()))


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_ranks_a_parent_sets_after_importing_are_one_pods(monkeypatch, method) -> None:
    """A script that imported ``gpu_eta_report`` and then starts its workers with
    ``multiprocessing``, setting each one's ``RANK`` before starting it: under
    ``spawn`` the child imports the module again, after its RANK was set, so the RANK
    its parent had at import travels in the environment (``RANK_AT_IMPORT_VARIABLE``);
    read from the child's own import, every worker reported. (``forkserver`` children
    get the environment the server started with, not the RANK set since: not read.)"""
    import multiprocessing

    ctx = multiprocessing.get_context(method)
    got = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))  # after this process imported the client
        out = ctx.Queue()
        proc = ctx.Process(target=_rank_set_by_parent, args=(out,))
        proc.start()
        got.append(out.get(timeout=30))
        proc.join(timeout=60)
    assert got == [("0", None), ("1", ("RANK", "1"))]


def _spawned_trainer(out) -> None:
    out.put(client.other_rank())


def _forked_worker(rank: int, out) -> None:
    import multiprocessing

    os.environ["RANK"] = str(rank)  # the worker numbers itself, then spawns its trainer
    proc = multiprocessing.get_context("spawn").Process(target=_spawned_trainer, args=(out,))
    proc.start()
    proc.join(timeout=60)


def test_a_trainer_a_forked_worker_spawns_after_numbering_itself_is_that_rank() -> None:
    """A worker forked after the client was imported sets its RANK (2), then spawns its
    trainer: the trainer is rank 2 of the pod, silenced as the worker would be. The
    forked worker never imports the module again, so it leaves the RANK at import under
    its own pid when it forks (read against the top process's pid, the trainer took
    its inherited RANK for its own and reported)."""
    import multiprocessing

    out = multiprocessing.get_context("spawn").Queue()
    worker = multiprocessing.get_context("fork").Process(target=_forked_worker, args=(2, out))
    worker.start()
    got = out.get(timeout=60)
    worker.join(timeout=60)
    assert got == ("RANK", "2")


# A training program a wrapper started (not a multiprocessing child), RANK given by the
# wrapper; it trains in a spawn child, which prints what other_rank says of it.
WRAPPED_TRAINING = """
import multiprocessing as mp

def train():
    from gpu_eta_report import client
    print("OTHER", client.other_rank())

if __name__ == "__main__":
    import gpu_eta_report.client
    p = mp.get_context("spawn").Process(target=train)
    p.start()
    p.join()
"""


SPAWNED_HELPERS = """
import multiprocessing as mp, sys
from gpu_eta_report import start

r = start(epochs=2, url=sys.argv[1], min_interval_seconds=0)  # at the top: no main guard

def work(i):
    return i

def train():
    child = start(epochs=1, url=sys.argv[1], run_id="spawned-trainer")
    child.end()

if __name__ == "__main__":
    for epoch in (1, 2):
        with mp.get_context(sys.argv[2]).Pool(2) as pool:  # a DataLoader's workers
            pool.map(work, range(4))
        r.epoch_end(epoch)
    trainer = mp.get_context(sys.argv[2]).Process(target=train)
    trainer.start()
    trainer.join()
    r.end()
"""


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_spawned_helper_rerunning_the_script_reports_no_run(method, tmp_path) -> None:
    """A script starting its reporter at the top, outside a main guard, whose helpers
    are ``spawn`` or ``forkserver`` children (a DataLoader's workers, a Pool): each
    child re-runs the script to find its functions, and each one's reporter announced
    a run of its own, never ended, from the same container, every epoch a DataLoader
    spawns its workers anew. The exporter's current run was then a phantom at 0 epochs
    while the real one trained (and with a ``run_id`` given, the real run's next
    reports were refused as superseded). A child re-running its parent's script is
    not training: its reporter is disabled; one the child trains in still reports."""
    script = tmp_path / "train.py"
    script.write_text(SPAWNED_HELPERS)
    server = RecordingServer()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "GPU_ETA_TIMEOUT": "5"}
    try:
        out = subprocess.run(
            [sys.executable, str(script), f"http://127.0.0.1:{server.port}/progress", method],
            env=env, capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
    finally:
        server.close()
    runs = collections.Counter(b["run_id"] for b in server.bodies)
    parent = server.bodies[0]["run_id"]
    assert set(runs) == {parent, "spawned-trainer"}, server.bodies
    assert [b.get("epoch") for b in server.bodies if b["run_id"] == parent] == [0, 1, 2, 2]
    # nor does a helper say what the script's process says: the parent and the trainer
    # each warn of the misspelt variable once, the 5 children re-running the script not
    assert out.stderr.count("GPU_ETA_TIMEOUT is not read") == 2, out.stderr


def test_a_program_a_wrapper_started_reads_its_own_rank(tmp_path, monkeypatch) -> None:
    """A pod's entrypoint imports the client (RANK unset), then runs the training as
    another program with ``RANK=1`` (its pod's rank), which trains in a ``spawn``
    child: the RANK the entrypoint had at import is not the trainer's parent's, so the
    child is its pod's only trainer and reports (read against the entrypoint's, it was
    silenced as another rank)."""
    script = tmp_path / "train.py"
    script.write_text(WRAPPED_TRAINING)
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "2", "PYTHONPATH": os.pathsep.join(sys.path)}
    assert env[client.RANK_AT_IMPORT_VARIABLE].startswith(f"{os.getpid()}:")  # left by this import
    out = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert "OTHER None" in out.stdout, out.stdout + out.stderr


def test_a_rank_a_child_inherited_is_its_pods_own(monkeypatch) -> None:
    """A PyTorchJob worker pod (``RANK=1``, no local rank) whose script trains in a
    ``multiprocessing`` child: the child inherits ``RANK`` unchanged and is the pod's
    only trainer, so it reports (read as one pod's ranks, it was silenced)."""
    import multiprocessing

    monkeypatch.setenv("RANK", "1")
    # as the pod's process had it when it imported the client (RANK set by the operator)
    monkeypatch.setenv(client.RANK_AT_IMPORT_VARIABLE, f"{os.getpid()}:1")
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_rank_in_child, args=(None, out))
    proc.start()
    got = out.get(timeout=30)
    proc.join(timeout=60)
    assert got == (None, None)


# A spawned worker's training, given its global ``rank``, ``world_size`` and
# ``before_init``: a reporter started before or after ``init_process_group``, two epochs
# of three steps, then "RANK <rank> <reporter enabled>" printed.
SPAWN_WORKER_TRAINING = """
    if before_init:
        r = start(epochs=2, steps_per_epoch=3, run_id=f"before-{rank}", min_interval_seconds=0)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if not before_init:
        r = start(epochs=2, steps_per_epoch=3, run_id=f"after-{rank}", min_interval_seconds=0)
    # all_reduce, as DDP's backward does (a DDP module itself made gloo abort at exit
    # now and then on this 2-core machine, with or without a reporter)
    grad = torch.ones(4)
    for step in range(1, 7):
        dist.all_reduce(grad)
        r.step(step)
        if step % 3 == 0:
            r.epoch_end(step // 3)
    r.end()
    # one write (atomic on a pipe): print's pieces from two ranks interleaved ("RANKRANK")
    os.write(1, f"RANK {rank} {r.enabled}\\n".encode())
    dist.barrier()  # rank 1 leaving the group while rank 0 ends its run aborts gloo
    dist.destroy_process_group()
"""

SPAWN_SCRIPT = (
    """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from gpu_eta_report import start

def worker(rank, world_size, before_init):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", sys.argv[1]
"""
    + SPAWN_WORKER_TRAINING
    + """
if __name__ == "__main__":
    mp.spawn(worker, args=(2, sys.argv[2] == "before"), nprocs=2, join=True)
"""
)


def _spawn_job(script: str, tmp_path) -> tuple[str, RecordingServer, dict[str, str], int]:
    """``script`` written to a file (its path), a server recording the reports, the
    environment reporting to it with no rank variable set, and a free port for the
    process group's master."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        master_port = sock.getsockname()[1]
    path = tmp_path / "spawn_job.py"
    path.write_text(script)
    server = RecordingServer()
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("RANK", *LOCAL_RANK_VARIABLES)},
        "GPU_ETA_URL": f"http://127.0.0.1:{server.port}/progress",
    }
    env.pop("GPU_ETA_ANY_RANK", None)
    return str(path), server, env, master_port


@pytest.mark.torch
@pytest.mark.parametrize("when", ["after", "before"])
def test_ranks_of_a_torch_spawn_script_without_rank_variables_report_once(when, tmp_path):
    """The PyTorch DDP tutorial's pattern: ``torch.multiprocessing.spawn`` passes each
    worker its rank, and ``init_process_group(rank=rank)`` sets no ``RANK`` nor
    ``LOCAL_RANK``: every rank reported a run of its own, each report starting the
    other's anew. The initialized default group's rank decides then: reporters started
    after ``init_process_group`` send nothing from rank 1; started before it, rank 1's
    announces its run and stops at its first report after the group is up."""
    pytest.importorskip("torch.distributed")
    script, server, env, master_port = _spawn_job(SPAWN_SCRIPT, tmp_path)
    try:
        out = subprocess.run(
            [sys.executable, script, str(master_port), when],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    finally:
        server.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(line for line in out.stdout.splitlines() if line.startswith("RANK")) == [
        "RANK 0 True",
        "RANK 1 False",
    ]
    events = [(b["run_id"], b["event"]) for b in server.bodies]
    rank0 = [e for run_id, e in events if run_id == f"{when}-0"]
    assert rank0[0] == "start" and rank0[-1] == "end" and len(rank0) == 10
    rank1 = [e for run_id, e in events if run_id == f"{when}-1"]
    # before: its start, unless the group came up before the sender sent it (dropped)
    assert rank1 == [] if when == "after" else set(rank1) <= {"start"}


def test_a_spawned_workers_index_is_its_rank_in_its_pod() -> None:
    """With ``RANK`` set and no local rank, a ``torch.multiprocessing.spawn`` worker's
    index decides, not ``RANK``: inherited, it is the pod's (a PyTorchJob), and set by
    the script it is the global rank (2 for a second pod's first of two workers). A
    launcher's local rank still wins; without ``RANK`` the process group decides."""
    assert client.other_rank({"RANK": "0"}, index=1) == (client.SPAWN_INDEX, "1")
    assert client.other_rank({"RANK": "1"}, index=0) is None
    assert client.other_rank({"RANK": "2"}, index=0) is None
    assert client.other_rank({"RANK": "1", "LOCAL_RANK": "1"}, index=0) == ("LOCAL_RANK", "1")
    assert client.other_rank({}, index=1) is None
    assert client.spawn_index() is None  # this test's process: no spawn worker


PYTORCHJOB_SPAWN_SCRIPT = (
    """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
from gpu_eta_report import start

NPROCS = 2  # processes in each pod, one a GPU

def worker(local_rank, node_rank, before_init):
    # the usual script for a PyTorchJob: RANK and WORLD_SIZE name the pod and the pods,
    # the process's global rank is the pod's times NPROCS plus its own index
    rank = node_rank * NPROCS + local_rank
    world_size = int(os.environ["WORLD_SIZE"]) * NPROCS
"""
    + SPAWN_WORKER_TRAINING
    + """
if __name__ == "__main__":
    mp.spawn(worker, args=(int(os.environ["RANK"]), sys.argv[1] == "before"), nprocs=NPROCS)
"""
)


@pytest.mark.torch
@pytest.mark.parametrize("when", ["before"])  # "after" is decided alike, at start()
def test_each_pytorchjob_pod_spawning_its_workers_reports_from_its_first_only(when, tmp_path):
    """Two pods of a Kubeflow PyTorchJob (``RANK`` 0 and 1, ``WORLD_SIZE=2``: the pod's
    rank and the pods), each spawning two workers with ``torch.multiprocessing.spawn``:
    every worker inherited its pod's ``RANK``, so both workers of a pod reported, two
    runs in turn. The spawn index is the worker's rank in its pod: global ranks 0 and 2
    (each pod's first) report, 1 and 3 send nothing, whether they start their reporter
    before ``init_process_group`` or after."""
    pytest.importorskip("torch.distributed")
    script, server, base, master_port = _spawn_job(PYTORCHJOB_SPAWN_SCRIPT, tmp_path)
    # what the training operator sets in each pod, but its RANK
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(master_port), WORLD_SIZE="2")
    pods: list[subprocess.Popen] = []
    try:
        pods += [
            subprocess.Popen(
                [sys.executable, script, when],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**base, "RANK": str(pod)},
            )
            for pod in (0, 1)
        ]
        outs = [pod.communicate(timeout=180) for pod in pods]
    finally:
        for pod in pods:
            pod.kill()
        server.close()
    for pod, (_, err) in zip(pods, outs, strict=True):
        assert pod.returncode == 0, err[-3000:]
    printed = sorted(
        line for out, _ in outs for line in out.splitlines() if line.startswith("RANK")
    )
    assert printed == ["RANK 0 True", "RANK 1 False", "RANK 2 True", "RANK 3 False"]
    runs = collections.Counter(b["run_id"] for b in server.bodies)
    assert runs == {f"{when}-0": 10, f"{when}-2": 10}


class RecordingServer(PostServer):
    """Answers every POST 200 and keeps its body, in the order they arrived."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        super().__init__()

    def answer(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        self.bodies.append(json.loads(body))
        return 200, {}, b"ok\n"


def test_a_step_reported_from_many_threads_never_goes_back():
    """Keras 3 runs batch callbacks on a thread pool (``async_safe``): ``step()`` is
    called from several threads, in order of submission but not of running. The latest
    call won, so a later report could carry an earlier step (4000 batches: steps went
    back dozens of times). The highest step is kept, and reports are queued in the
    order their step was taken."""
    from concurrent.futures import ThreadPoolExecutor

    server = RecordingServer()
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave as often as they can
    try:
        r = start(
            url=f"http://127.0.0.1:{server.port}/progress",
            min_interval_seconds=0,
            queue_size=100_000,
        )
        with ThreadPoolExecutor(8) as pool:
            for i in range(1, 1001):
                pool.submit(r.step, i)
        sys.setswitchinterval(switch)
        # every step sent before the end: with a backlog that would outlast end()'s
        # flush at the last send's pace, the end goes next and supersedes it (on a
        # loaded machine: start, 1, end)
        wait_for(lambda: r.stats["sent"] == 1001, 120)
        r.end(flush_timeout_seconds=30)
    finally:
        sys.setswitchinterval(switch)
        server.close()
    steps = [body["step"] for body in server.bodies]
    assert len(steps) > 100 and server.bodies[-1]["event"] == "end" and steps[-1] == 1000
    assert [(a, b) for a, b in itertools.pairwise(steps) if b < a] == []
