"""``gpu_eta.launch.prometheus.start_prometheus`` with the real Debian Prometheus: ready, or a
clear error that leaves nothing behind."""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest
import requests

from gpu_eta.launch.processes import LaunchError
from gpu_eta.launch.prometheus import UI_PAGES, ScrapeJob, backfill, start_prometheus, ui_url


def test_prometheus_starts_ready_and_stops(tmp_path: Path) -> None:
    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        assert server.process.poll() is None
        assert server.query("vector(1)")[0]["value"][1] == "1"
    finally:
        server.stop()
    assert server.process.returncode is not None


def test_ui_urls_answer_without_a_redirect(tmp_path: Path) -> None:
    """The UI pages the demo prints open on the installed Prometheus: Debian's 2.42
    build has only the classic UI (``/alerts`` is 404 there, ``/classic/alerts`` 200)."""
    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        for page in ("graph", "alerts"):
            url = ui_url(server.url, page)
            assert url.startswith(server.url) and url.endswith(page)
            assert url.removeprefix(server.url) in UI_PAGES[page]
            resp = requests.get(url, allow_redirects=False, timeout=5)
            assert resp.status_code == 200, (url, resp.status_code)
            assert "Prometheus" in resp.text
    finally:
        server.stop()


class Prometheus3Ui(BaseHTTPRequestHandler):
    """Prometheus 3.x's UI routes (web/web.go): ``/graph`` redirects to ``/query``, the
    classic UI is gone. 3.x cannot run here (Debian ships 2.42): only these routes."""

    ROUTES: ClassVar[dict[str, int]] = {"/query": 200, "/alerts": 200, "/graph": 302}

    def do_GET(self) -> None:
        status = self.ROUTES.get(self.path, 404)
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/query")
        body = b"<title>Prometheus</title>" if status == 200 else b""
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def served(
    handler: type[BaseHTTPRequestHandler], closing: threading.Event | None = None
) -> Iterator[str]:
    """The URL of ``handler`` served from a thread; at the end ``closing`` is set (a
    handler waiting on it stops waiting), the server stopped and its handlers joined,
    so that none outlives its test."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = False  # server_close() joins the handlers
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if closing is not None:
            closing.set()
        server.shutdown()
        server.server_close()
        serving.join()


@pytest.fixture
def prometheus3_ui() -> Iterator[str]:
    with served(Prometheus3Ui) as url:
        yield url


def test_ui_urls_of_prometheus_3_answer_without_a_redirect(prometheus3_ui: str) -> None:
    assert ui_url(prometheus3_ui, "graph") == prometheus3_ui + "/query"
    assert ui_url(prometheus3_ui, "alerts") == prometheus3_ui + "/alerts"


def test_ui_url_of_a_server_that_does_not_answer_is_the_first_path() -> None:
    assert ui_url("http://127.0.0.1:9", "alerts") == "http://127.0.0.1:9/alerts"


@contextlib.contextmanager
def slow_proxy(
    target: str, first_delay: float, delaying: threading.Event | None = None
) -> Iterator[str]:
    """The URL of a proxy to ``target`` whose first answer comes ``first_delay`` seconds
    late, as a loaded Prometheus's may (one did so past the 5 s a query waited, in a CI
    run whose demo test then failed at its first wait).

    Closed, it cuts a delay short and waits for its handlers: one left sleeping past its
    test once woke to a stopped Prometheus and printed a traceback while the next test
    in its worker ran (tests/support/serial_ast.py says what that broke). ``delaying``
    is set when the delayed request starts its wait."""
    delays = [first_delay]
    closing = threading.Event()

    class Proxy(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if delays:
                delay = delays.pop()
                if delaying is not None:
                    delaying.set()
                closing.wait(delay)
            try:
                if closing.is_set():
                    raise requests.ConnectionError("the proxy is closing")
                upstream = requests.get(target + self.path, timeout=30)
            except requests.RequestException:
                self.send_error(502)
                return
            self.send_response(upstream.status_code)
            self.send_header("Content-Type", upstream.headers["Content-Type"])
            self.send_header("Content-Length", str(len(upstream.content)))
            self.end_headers()
            self.wfile.write(upstream.content)

        def log_message(self, *args: object) -> None:
            pass

    with served(Proxy, closing) as url:
        yield url


def test_a_closed_slow_proxy_leaves_no_handler_running(tmp_path: Path) -> None:
    """A request still in its delay when the proxy closes is answered 502 at once, not
    after its 30 s, and its thread is gone when the ``with`` ends (daemon handlers:
    still sleeping then)."""
    before = set(threading.enumerate())
    answers: list[int] = []
    delaying = threading.Event()
    with slow_proxy("http://127.0.0.1:9", first_delay=30.0, delaying=delaying) as url:
        client = threading.Thread(
            target=lambda: answers.append(requests.get(url + "/x", timeout=60).status_code)
        )
        client.start()
        assert delaying.wait(10)  # the request is in its delay
        closed = time.monotonic()
    assert time.monotonic() - closed < 10  # the delay was cut short
    client.join(10)
    assert answers == [502]
    assert set(threading.enumerate()) <= before


def test_wait_for_outlasts_one_slow_answer(tmp_path: Path) -> None:
    """``wait_for`` waits its whole ``timeout`` for the answer, not a query's 5 s: a
    query answered 7 s late is the answer, not the end of a 30 s wait."""
    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        with slow_proxy(server.url, first_delay=7.0) as url:
            slow = dataclasses.replace(server, url=url)
            started = time.monotonic()
            assert slow.wait_for("vector(1)", timeout=30)[0]["value"][1] == "1"
            assert time.monotonic() - started >= 7.0  # the slow answer was the one waited for
            with pytest.raises(TimeoutError, match="after 1"):  # and a wait still ends
                slow.wait_for("absent_metric_name", timeout=1)
    finally:
        server.stop()


def test_wait_for_ends_at_its_timeout_while_a_query_hangs(tmp_path: Path) -> None:
    """A query is cut at what is left of the wait: an answer 5 s late does not hold a
    2 s wait for the query's own 30 s, and the wait ends as waits do (TimeoutError)."""
    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        with slow_proxy(server.url, first_delay=5.0) as url:
            slow = dataclasses.replace(server, url=url)
            started = time.monotonic()
            with pytest.raises(TimeoutError, match="after 2"):
                slow.wait_for("vector(1)", timeout=2)
            assert time.monotonic() - started < 4.5  # not the 5 s the answer took
    finally:
        server.stop()


def test_wait_for_runs_between_polls_after_each_short_answer(tmp_path: Path) -> None:
    """``between_polls`` (a VictoriaMetrics flush, tests/support/tsdb_wait.py) runs after
    a short answer with the seconds left, never after the answer waited for."""
    server = start_prometheus([ScrapeJob("x", ["127.0.0.1:9"])], data_dir=tmp_path / "p")
    try:
        left: list[float] = []
        with pytest.raises(TimeoutError, match="after 1"):
            server.wait_for("absent_metric_name", timeout=1, between_polls=left.append)
        assert len(left) >= 2 and all(0 < s <= 1 for s in left)
        assert left == sorted(left, reverse=True)  # what is left shrinks
        assert left[-1] < left[0] < 1  # the time left, not the whole timeout
        answered: list[float] = []
        server.wait_for("vector(1)", timeout=10, between_polls=answered.append)
        assert answered == []
    finally:
        server.stop()


@pytest.fixture
def own_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temp root (other test runs share /tmp), to see what is left in it."""
    root = tmp_path / "tmp"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root


def test_a_prometheus_that_exits_says_why_and_leaves_no_directory(own_tmp: Path) -> None:
    with pytest.raises(LaunchError) as info:
        start_prometheus([], extra_args=["--no-such-flag"], ready_timeout=60)
    text = str(info.value)
    assert text.startswith("prometheus exited with code ")
    assert "no-such-flag" in text  # the log's last lines say why
    assert list(own_tmp.iterdir()) == []


def test_a_failed_backfill_leaves_no_directory(own_tmp: Path) -> None:
    bad = own_tmp / "bad.om"
    bad.write_text("not openmetrics\n")
    with pytest.raises(RuntimeError, match="promtool backfill failed"):
        start_prometheus([], backfill_files=[bad])
    assert list(own_tmp.iterdir()) == [bad]


def test_backfill_stages_its_blocks_beside_the_tsdb_not_in_tmpdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """promtool stages a backfill's head in $TMPDIR and leaves it there when stopped
    (Ctrl-C during the demo's backfill reaches promtool too): its scratch directory is
    beside the TSDB, removed afterwards, so $TMPDIR is never touched (here it does not
    exist, and the backfill works all the same)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path / "no-such-tmpdir"))
    history = tmp_path / "history.om"
    history.write_text("# TYPE x gauge\nx 1 1700000000\nx 2 1700000060\n# EOF\n")
    data = tmp_path / "prometheus" / "data"
    backfill(history, data)
    assert [p.name for p in (tmp_path / "prometheus").iterdir()] == ["data"]
    assert any((block / "meta.json").is_file() for block in data.iterdir())
    assert not (tmp_path / "no-such-tmpdir").exists()
