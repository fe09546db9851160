"""gpu_eta.forecaster.server: the cycle loop's stale handling and the HTTP endpoints."""

from __future__ import annotations

import threading
import time

import pytest
import requests

from gpu_eta.common import metrics_http
from gpu_eta.forecaster.forecast import ForecastSet
from gpu_eta.forecaster.promapi import PromAPIError
from gpu_eta.forecaster.publish import ServiceState, make_registry
from gpu_eta.forecaster.server import Service, metrics_server
from tests.support.net import dribble_until_cut


class ScriptedCycle:
    """Returns or raises what the script says, one entry per call."""

    def __init__(self, script: list) -> None:
        self.script = list(script)
        self.calls = 0
        self.ran = threading.Event()

    def run(self) -> ForecastSet:
        self.calls += 1
        self.ran.set()
        item = self.script.pop(0) if self.script else ForecastSet(timestamp=time.time())
        if isinstance(item, Exception):
            raise item
        return item


def test_stale_while_failing_then_recovers() -> None:
    state = ServiceState()
    first = ForecastSet(timestamp=1.0, n_history=5)
    cycle = ScriptedCycle([PromAPIError("down"), first, PromAPIError("down"), RuntimeError("bug")])
    svc = Service(cycle, state, 60, clock=lambda: 123.0)
    assert svc.run_once() is False
    assert state.stale is False and state.forecasts is None  # nothing to be stale about yet
    assert svc.run_once() is True
    assert state.forecasts is first and state.last_success_timestamp == 123.0
    assert svc.run_once() is False
    assert state.stale is True and state.forecasts is first  # last good set kept
    assert svc.run_once() is False  # an unexpected exception does not kill the loop
    assert "RuntimeError: bug" in state.last_error
    assert svc.run_once() is True
    assert state.stale is False
    assert state.job_errors["cycle_failed"] == 3


def test_a_good_cycles_end_is_on_the_time_its_set_was_made_at() -> None:
    """A cycle run at Prometheus' time, its clock 400 s behind the forecaster's
    (prom_clock): the end of the good cycle is on that time, so that GpuEtaForecasterStale
    (``time()`` minus it) reads its age, not 400 s less."""
    state = ServiceState()
    behind = ForecastSet(timestamp=123.0 - 400, clock_offset_seconds=-400.0)
    assert Service(ScriptedCycle([behind]), state, 60, clock=lambda: 123.0).run_once()
    assert state.last_success_timestamp == 123.0 - 400


def test_loop_runs_on_its_interval_and_stops() -> None:
    cycle = ScriptedCycle([])
    svc = Service(cycle, ServiceState(), 0.05)
    svc.start()
    deadline = time.monotonic() + 20
    while cycle.calls < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    svc.stop()
    assert cycle.calls >= 3
    calls = cycle.calls
    time.sleep(0.2)
    assert cycle.calls == calls


def test_http_endpoints() -> None:
    state = ServiceState()
    srv = metrics_server(make_registry(state), "127.0.0.1", 0).serve()
    try:
        base = f"http://127.0.0.1:{srv.port}"
        resp = requests.get(base + "/metrics", timeout=10)
        assert resp.status_code == 200
        assert "gpu_eta_forecaster_stale 0.0" in resp.text
        assert resp.headers["Content-Type"].startswith("text/plain")
        om = requests.get(
            base + "/metrics", headers={"Accept": "application/openmetrics-text"}, timeout=10
        )
        assert om.text.rstrip().endswith("# EOF")
        assert requests.get(base + "/healthz", timeout=10).text == "ok\n"
        assert requests.get(base + "/nope", timeout=10).status_code == 404
    finally:
        srv.stop()


def test_a_request_dribbled_a_byte_at_a_time_is_cut_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The forecaster's port (``serve``'s server) gives a request's line and headers
    ``IO_TIMEOUT_SECONDS`` in all, not per byte: 32 connections sending a byte every
    few seconds held every thread, and /healthz failing got the pod restarted."""
    monkeypatch.setattr(metrics_http, "IO_TIMEOUT_SECONDS", 1.0)
    srv = metrics_server(make_registry(ServiceState()), "127.0.0.1", 0).serve()
    try:
        cut_after = dribble_until_cut("127.0.0.1", srv.port, 4.0, 0.25)
        assert cut_after is not None and cut_after < 1.8, cut_after
        assert requests.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=5).text == "ok\n"
    finally:
        srv.stop()


def test_real_cycle_goes_stale_on_a_slow_or_garbage_api_and_recovers(tmp_path) -> None:
    """A Prometheus-API server that answers, then sleeps, then sends junk, then answers."""
    import json
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gpu_eta.forecaster.config import CycleSettings
    from gpu_eta.forecaster.cycle import Cycle
    from gpu_eta.forecaster.history import HistoryStore
    from gpu_eta.forecaster.promapi import PromClient

    mode = {"now": "ok"}
    release = threading.Event()

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if mode["now"] == "slow":
                release.wait(10)
            if mode["now"] == "garbage":
                body = b"\x00\xffnot json at all" * 1000
            else:
                rtype = "matrix" if "query_range" in self.path else "vector"
                body = json.dumps(
                    {"status": "success", "data": {"resultType": rtype, "result": []}}
                ).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass

        def do_POST(self) -> None:  # a long query (the queue's), as the real API takes it
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()

    class EmptyModel:
        def fit(self, history):
            self.quality_: dict = {}
            self.n_history_ = len(history)
            return self

        def predict(self, run, now, stalled=False):
            raise AssertionError("no runs expected")

    client = PromClient(f"http://127.0.0.1:{srv.server_address[1]}", timeout_seconds=0.3, retries=0)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    state = ServiceState(query_stats=client.stats)
    svc = Service(Cycle(client, store, CycleSettings(), model_factory=EmptyModel), state, 60)
    try:
        assert svc.run_once() and state.stale is False
        mode["now"] = "slow"
        assert not svc.run_once() and state.stale is True
        assert "timed out" in state.last_error
        mode["now"] = "garbage"
        assert not svc.run_once() and "not JSON" in state.last_error
        mode["now"] = "ok"
        assert svc.run_once() and state.stale is False
        assert client.stats.error == 2
    finally:
        release.set()
        store.close()
        client.close()
        srv.shutdown()
        srv.server_close()


def test_the_wedged_limit_covers_every_query_of_a_cycle_at_its_deadlines() -> None:
    """A cycle whose every query takes as long as the client allows (each attempt 5 ×
    --prometheus.timeout: headers within 2 ×, body within 3 ×; every retry and its
    wait) is slow, not wedged: liveness restarting it would restart it for ever, on a
    slow server the next cycle is as slow. With the defaults (10 s, 2 retries, 0.5 s
    backoff) and the most queries a cycle sends (48: a first cycle's range windows, the
    queue's split rounds, a start over) that is 48 × (3 × 50 + 10 + 10) = 8,160 s, past
    the fixed 600 s limit."""
    from gpu_eta.forecaster import queries
    from gpu_eta.forecaster.promapi import PromClient
    from gpu_eta.forecaster.server import wedged_limit_seconds

    worst = queries.MOST_QUERIES_PER_CYCLE * (3 * 5 * 10 + 10 + 10)
    limit = wedged_limit_seconds(60, timeout_seconds=10, retries=2, backoff_seconds=0.5)
    assert limit >= worst + 600  # and the room a fit had before
    # a long backoff counts as such; a cycle interval still sets the floor
    assert wedged_limit_seconds(60, 1, 1, 100) >= queries.MOST_QUERIES_PER_CYCLE * (10 + 100) + 600
    assert wedged_limit_seconds(600, 1, 0, 0.5) >= 6000

    class WithClient(ScriptedCycle):
        client = PromClient("http://127.0.0.1:9", timeout_seconds=10, retries=2)

    svc = Service(WithClient([]), ServiceState(), 60)
    assert svc.wedged_after_seconds == limit
    assert (
        Service(WithClient([]), ServiceState(), 60, wedged_after_seconds=5).wedged_after_seconds
        == 5
    )
