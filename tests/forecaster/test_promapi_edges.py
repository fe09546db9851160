"""gpu_eta.forecaster.promapi at the protocol's edges: slow and compressed bodies, bytes
that are not UTF-8, one bad series among good ones, Retry-After, redirects.

Real loopback HTTP servers (``http_server`` from test_promapi) answer as the servers
and proxies the review caught them answering. The module is reached as ``promapi.X``
inside each test, so every test fails on its own against a client without the fix.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler

import pytest

from gpu_eta.common.retry_after import parse_http_date, parse_retry_after
from gpu_eta.forecaster import promapi, promparse
from gpu_eta.forecaster.http_deadline import Deadline
from gpu_eta.forecaster.promapi import PromAPIError, PromClient
from gpu_eta.launch.victoria import start_victoriametrics
from tests.forecaster.test_promapi import VECTOR, client, http_server, reply  # noqa: F401

BODY = json.dumps(VECTOR).encode()


def _vector(*items: bytes) -> bytes:
    """A vector answer whose elements are given as raw JSON bytes (any bytes at all)."""
    return (
        b'{"status":"success","data":{"resultType":"vector","result":[' + b",".join(items) + b"]}}"
    )


def _sample(pod: bytes, value: bytes = b'"1"') -> bytes:
    return b'{"metric":{"namespace":"ml","pod":"' + pod + b'"},"value":[1700000000,' + value + b"]}"


# -- 1. the body deadline holds whatever the server's pace ----------------------------


def _drip(
    body: bytes, every: float, piece: int, stop: threading.Event, *, chunked: bool, gz: bool
) -> Callable[[BaseHTTPRequestHandler], None]:
    """A handler sending ``body`` ``piece`` bytes every ``every`` seconds."""
    payload = gzip.compress(body) if gz else body

    def handle(req: BaseHTTPRequestHandler) -> None:
        head = [b"HTTP/1.1 200 OK", b"Content-Type: application/json", b"Connection: close"]
        head.append(
            b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(payload)
        )
        if gz:
            head.append(b"Content-Encoding: gzip")
        try:
            req.wfile.write(b"\r\n".join(head) + b"\r\n\r\n")
            for i in range(0, len(payload), piece):
                part = payload[i : i + piece]
                req.wfile.write(b"%x\r\n%s\r\n" % (len(part), part) if chunked else part)
                req.wfile.flush()
                if stop.wait(every):
                    return
            if chunked:
                req.wfile.write(b"0\r\n\r\n")
        except OSError:
            pass

    return handle


@pytest.mark.parametrize(
    ("chunked", "gz"),
    [(False, False), (True, False), (False, True)],
    ids=["content-length", "chunked", "gzip"],
)
def test_a_dripping_body_fails_at_its_deadline_not_when_it_ends(
    http_server,  # noqa: F811
    chunked: bool,
    gz: bool,
) -> None:
    """10 bytes every 0.1 s of a 4 KB body (2 KB in gzip): 20 s or more to arrive; the
    bound is 3 × 0.3 s.

    Awaiting whole 64 KiB chunks, a body with a Content-Length (plain or gzip) was read
    to its end before the deadline was looked at (the review: 48 s against 6 s).
    """
    stop = threading.Event()
    body = json.dumps({**VECTOR, "pad": os.urandom(2000).hex()}).encode()  # gzip: ~2 KB
    url, _ = http_server(_drip(body, 0.1, 10, stop, chunked=chunked, gz=gz))
    started = time.monotonic()
    try:
        with pytest.raises(PromAPIError, match="response body too slow"):
            client(url, timeout_seconds=0.3).instant("up")
    finally:
        stop.set()
    assert time.monotonic() - started < 2.0


@pytest.fixture
def read_deadlines(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Every time ``promapi`` sets a request's deadline to, in order (the headers', then
    the body's): what each socket read of the request is given at most
    (``http_deadline.DeadlineReader`` reads ``at`` as each read starts).

    Why: the limit a read was handed is exact, where the wall time a query took also
    holds the machine's scheduling; a test reading it cannot flake on a loaded machine.
    Recorded through ``promapi.Deadline``, the one name ``_fetch`` makes them by."""
    seen: list[float] = []

    class Recorded(Deadline):
        @property  # type: ignore[override]
        def at(self) -> float:
            return self._at

        @at.setter
        def at(self, value: float) -> None:
            seen.append(value)
            self._at = value

    monkeypatch.setattr(promapi, "Deadline", Recorded)
    return seen


def test_a_dripping_body_fails_at_the_callers_deadline_not_at_the_attempts(
    http_server,  # noqa: F811
    read_deadlines: list[float],
) -> None:
    """``instant(deadline=)``: an attempt given 0.6 s of it may take its headers 2 × and
    its body 3 × 0.6 s to come (``_HEADER_TIMEOUTS``, ``_BODY_TIMEOUTS``), but no part of
    it goes past the caller's deadline (``_fetch``'s ``until``).

    Checked on the deadlines the reads were given, each the caller's at the latest:
    without ``until`` the headers' was 1.2 s and the body's 1.8 s after the attempt
    began. The query then ended at 1.8 s instead of 0.6 whatever the client's timeout
    (``_get`` already cuts the attempt's to what is left), so a clock can only tell
    them apart by what a loaded machine's scheduling leaves of the 1.2 s between; the
    deadlines handed to the reads differ whatever the load."""
    stop = threading.Event()
    url, _ = http_server(_drip(BODY, 0.1, 1, stop, chunked=False, gz=False))
    deadline = time.monotonic() + 0.6
    try:
        with pytest.raises(promapi.PromDeadlineError, match="deadline"):
            client(url, timeout_seconds=5.0).instant("up", deadline=deadline)
    finally:
        stop.set()
    assert read_deadlines, "no request made"
    assert max(read_deadlines) <= deadline, [at - deadline for at in read_deadlines]
    assert time.monotonic() < deadline + 10  # ended by a deadline: the body takes 18.7 s


def test_the_deadline_holds_when_each_pause_is_under_the_timeout(
    http_server,  # noqa: F811
    read_deadlines: list[float],
) -> None:
    """A byte every 0.7 s with a 1 s timeout: no single read times out, yet the body
    fails at its deadline, 3 s after its headers, not at the first byte after it.

    A read is given at most what is left of the deadline (``DeadlineReader``); a read
    given the whole timeout, the deadline only looked at between reads, waited for the
    byte at 3.5 s: 0.5 s past it. So what is measured is the time past the body's
    deadline (as ``_fetch`` set it: the headers' arrival, the connection's set-up and a
    loaded machine's scheduling before it are not in it), not the query's: that is
    3.0 against 3.5 s, which a busy machine can blur."""
    stop = threading.Event()
    url, _ = http_server(_drip(BODY, 0.7, 1, stop, chunked=False, gz=False))
    started = time.monotonic()
    try:
        with pytest.raises(PromAPIError, match="response body too slow"):
            client(url, timeout_seconds=1.0).instant("up")
    finally:
        stop.set()
    late = time.monotonic() - read_deadlines[-1]
    # only that the last deadline set is the body's (3 timeouts after its headers came,
    # which came after ``started``), not the headers' (2 timeouts after the request)
    assert read_deadlines[-1] >= started + 3 * 1.0
    assert -0.02 < late < 0.25, late


def test_a_gzip_answer_is_decoded_and_a_gzip_bomb_refused(http_server) -> None:  # noqa: F811
    """The bomb is compressed before it is asked for: compressed in the handler, its
    50 MB took 0.7 s on a busy machine and past the client's 2 s timeout under load,
    where the test failed on "timed out", not on the cap."""

    def gz(req: BaseHTTPRequestHandler, data: bytes) -> None:
        req.send_response(200)
        req.send_header("Content-Encoding", "gzip")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    url, seen = http_server(lambda r: gz(r, gzip.compress(BODY)))
    assert len(client(url).instant("up")) == 2
    assert seen[0].headers["Accept-Encoding"] == "gzip"  # the one encoding decoded here
    bomb = gzip.compress(b'{"status":"success","pad":"' + b"0" * 50_000_000 + b'"}')  # 49 KB
    url, _ = http_server(lambda r: gz(r, bomb))
    with pytest.raises(PromAPIError, match="exceeds the 1000000-byte limit"):
        client(url, max_response_bytes=1_000_000).instant("up")


@pytest.mark.parametrize(
    ("encoding", "payload", "says"),
    [
        ("gzip", b"\x1f\x8b\x08\x00garbage-not-deflate", "damaged gzip body"),
        ("gzip", gzip.compress(BODY)[:-12], "truncated gzip body"),
        ("br", BODY, "unsupported Content-Encoding 'br'"),
    ],
    ids=["damaged", "truncated", "unasked"],
)
def test_a_body_in_a_bad_or_unasked_encoding_is_a_clear_error(
    http_server,  # noqa: F811
    encoding: str,
    payload: bytes,
    says: str,
) -> None:
    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Encoding", encoding)
        req.send_header("Content-Length", str(len(payload)))
        req.end_headers()
        req.wfile.write(payload)

    url, _ = http_server(handle)
    with pytest.raises(PromAPIError, match=says):
        client(url).instant("up")


# -- 2./3. one bad series costs only itself ---------------------------------------------


def test_labels_that_are_not_utf8_skip_only_their_series(http_server, caplog) -> None:  # noqa: F811
    """VictoriaMetrics returns label bytes as stored: one \\xff made the whole answer
    'not JSON' every cycle; a \\ud800 escape or CESU bytes reached the history."""
    body = _vector(
        _sample(b"bad\xff\xfe"),  # not UTF-8 at all
        _sample(b"cesu\xed\xa0\x80"),  # a surrogate encoded as UTF-8 bytes
        _sample(b"escaped\\ud800"),  # a lone surrogate as a JSON escape
        _sample("gut-\u00fc".encode()),  # valid UTF-8, not ASCII: kept
        _sample(b"good"),
    )
    url, _ = http_server(lambda r: reply(r, 200, body))
    c = client(url)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.forecaster.promapi"):
        samples = c.instant("up")
    assert [s.labels["pod"] for s in samples] == ["gut-\u00fc", "good"]
    assert (c.stats.success, c.stats.error, c.stats.skipped_series) == (1, 0, 3)
    (record,) = caplog.records
    assert "skipped 3 of 5 series" in record.getMessage()
    assert "label 'pod' is not valid UTF-8 in {namespace='ml', pod='bad\\udcff\\udcfe'}" in (
        record.getMessage()
    )
    record.getMessage().encode("utf-8")  # loggable: no lone surrogate left in it


BAD_ELEMENTS = {
    "long-value": (
        {"metric": {"run_id": "r" * 5000}},
        "malformed label 'run_id' (longer than 4096",
    ),
    "long-name": ({"metric": {"n" * 5000: "x"}}, "malformed label name 'nnnn"),
    "not-a-string": ({"metric": {"pod": ["x"]}}, "malformed label 'pod' (not a string)"),
    "not-an-object": ({"metric": "pod=x"}, "malformed label set"),
    "too-many": (
        {"metric": {f"l{i}": "v" for i in range(200)}},
        "malformed label set (more than 128 labels)",
    ),
    "surrogate": ({"metric": {"pod": "a\udcff"}}, "label 'pod' is not valid UTF-8"),
    "surrogate-name": ({"metric": {"p\ud800": "a"}}, "label name 'p\\ud800' is not valid UTF-8"),
    "bad-timestamp": ({"metric": {"pod": "q"}, "ts": "abc"}, "malformed sample ['abc', '1']"),
    "huge-timestamp": ({"metric": {"pod": "q"}, "ts": 10**400}, "malformed sample"),
    "nan-timestamp": ({"metric": {"pod": "q"}, "ts": "NaN"}, "non-finite timestamp"),
}


@pytest.mark.parametrize(("bad", "says"), BAD_ELEMENTS.values(), ids=BAD_ELEMENTS.keys())
def test_one_bad_series_is_skipped_and_counted_not_the_answer(bad: dict, says: str) -> None:
    """The reviewer's 5,000-character run_id failed every cycle; so did one bad point."""
    ts = bad.get("ts", 1700000000)
    good_v = {"metric": {"pod": "p"}, "value": [1700000000, "1"]}
    skipped = promparse.Skipped()
    data = {
        "resultType": "vector",
        "result": [good_v, {"metric": bad["metric"], "value": [ts, "1"]}],
    }
    samples = promparse.parse_vector(data, "q", skipped)
    assert [dict(s.labels) for s in samples] == [{"pod": "p"}]
    assert skipped.count == 1 and skipped.first.startswith(says), skipped.first
    assert len(skipped.first) <= 200

    good_m = {"metric": {"pod": "p"}, "values": [[1700000000, "1"]]}
    bad_m = {"metric": bad["metric"], "values": [[1700000000, "1"], [ts, "1"]]}
    skipped = promparse.Skipped()
    series = promparse.parse_matrix(
        {"resultType": "matrix", "result": [bad_m, good_m, 7]}, "q", skipped
    )
    assert [dict(s.labels) for s in series] == [{"pod": "p"}]
    assert skipped.count == 2 and skipped.first.startswith(says), skipped.first


def test_a_skipped_series_keeps_only_the_usable_labels_asked_for_and_boundedly() -> None:
    """``Skipped.keep``: of each series left out, the labels named that are short valid
    strings, so a caller can tell whose series it was (a pod's ``uid``); a hostile
    value (too long, not a string, not UTF-8) is not kept, nor more than
    ``_MAX_KEPT`` series."""
    wide = {f"nodeselector_f{i:03d}": "true" for i in range(130)}
    result = [
        {"metric": {"uid": "u1", "meta": "nodeselectors", **wide}, "value": [1, "1"]},
        {"metric": {"uid": "u" * 300, "meta": ["x"], **wide}, "value": [1, "1"]},
        {"metric": {"uid": "u3\udcff", "pod": "p"}, "value": [1, "1"]},
        {"metric": {"uid": "u4"}, "value": [1, "1"]},
    ]
    skipped = promparse.Skipped(keep=("uid", "meta"))
    samples = promparse.parse_vector({"resultType": "vector", "result": result}, "q", skipped)
    assert [dict(s.labels) for s in samples] == [{"uid": "u4"}]
    assert skipped.count == 3
    assert [dict(k) for k in skipped.kept] == [{"uid": "u1", "meta": "nodeselectors"}]
    many = [{"metric": {"uid": f"u{i}", **wide}, "value": [1, "1"]} for i in range(10_010)]
    bounded = promparse.Skipped(keep=("uid",))
    promparse.parse_vector({"resultType": "vector", "result": many}, "q", bounded)
    assert bounded.count == 10_010 and len(bounded.kept) == promparse._MAX_KEPT
    unasked = promparse.Skipped()
    promparse.parse_vector({"resultType": "vector", "result": many[:3]}, "q", unasked)
    assert unasked.kept == []


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"resultType": "matrix", "result": []}, "expected a vector"),
        ({"resultType": "vector", "result": {"a": 1}}, "no result list"),
        ({"resultType": "scalar", "result": ["x", "1"]}, "malformed sample"),
    ],
)
def test_an_answer_of_the_wrong_shape_is_still_refused(data: dict, says: str) -> None:
    with pytest.raises(PromAPIError, match=says):
        promparse.parse_vector(data, "q", promparse.Skipped())


def test_an_answer_refused_by_parsing_counts_as_an_error(http_server) -> None:  # noqa: F811
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(matrix).encode()))
    c = client(url)
    with pytest.raises(
        PromAPIError, match=r"^http://127\.0\.0\.1:\d+: query 'up': expected a vector"
    ):
        c.instant("up")
    assert (c.stats.success, c.stats.error) == (0, 1)


def test_skips_are_one_warning_per_query_and_not_repeated_every_cycle(
    http_server,  # noqa: F811
    caplog,
) -> None:
    bad = [_sample(b"x\xff")] * 3
    answers = [_vector(*bad, _sample(b"ok"))] * 2 + [_vector(_sample(b"ok"))] + [_vector(*bad)]
    url, _ = http_server(lambda r: reply(r, 200, answers.pop(0)))
    c = client(url)
    with caplog.at_level(logging.DEBUG, logger="gpu_eta.forecaster.promapi"):
        for _ in range(4):
            c.instant("up")
    levels = [
        (r.levelname, r.getMessage().split(": ", 2)[-1][:25])
        for r in caplog.records
        if r.name == "gpu_eta.forecaster.promapi"
    ]
    assert levels == [
        ("WARNING", "skipped 3 of 4 series (fi"),
        ("DEBUG", "skipped 3 of 4 series (fi"),  # the same news: not a warning again
        ("WARNING", "skipped 3 of 3 series (fi"),  # it had gone (a clean answer) and is back
    ]
    assert c.stats.skipped_series == 9 and c.stats.success == 4


# -- 5. Retry-After ---------------------------------------------------------------------


def _busy_then_ok(code: int, retry_after: str | None, busy: int = 1):
    calls: list[int] = []

    def handle(req: BaseHTTPRequestHandler) -> None:
        calls.append(1)
        if len(calls) <= busy:
            req.send_response(code)
            if retry_after is not None:
                req.send_header("Retry-After", retry_after)
            req.send_header("Content-Length", "4")
            req.end_headers()
            req.wfile.write(b"busy")
        else:
            reply(req, 200, BODY)

    return handle


@pytest.mark.parametrize("code", [429, 503])
def test_retry_after_in_seconds_is_waited_for(http_server, code: int) -> None:  # noqa: F811
    url, _ = http_server(_busy_then_ok(code, "3"))
    delays: list[float] = []
    c = PromClient(url, timeout_seconds=5, retries=2, backoff_seconds=0.1, sleep=delays.append)
    assert len(c.instant("up")) == 2
    assert delays == [3.0]


def test_retry_after_longer_than_the_timeout_is_not_retried(http_server) -> None:  # noqa: F811
    url, seen = http_server(_busy_then_ok(429, "120", busy=10))
    delays: list[float] = []
    c = PromClient(url, timeout_seconds=5, retries=2, sleep=delays.append)
    with pytest.raises(
        PromAPIError,
        match=r"HTTP 429 \(Retry-After 120s\): busy: not retried, that is longer than the 5s",
    ):
        c.instant("up")
    assert len(seen) == 1 and delays == [] and c.stats.error == 1


@pytest.mark.parametrize("skew", [60.0, -3600.0])
def test_a_retry_after_date_is_read_against_the_answers_own_date(http_server, skew: float) -> None:  # noqa: F811
    """A server whose clock is ``skew`` seconds off this host's asks for a retry at its
    now + 2 s as an HTTP-date: read against this host's clock that was 62 s (not
    retried at all) or a past date (the backoff instead of the wait asked). Read
    against the answer's ``Date``, it is the 2 s asked."""
    calls: list[int] = []

    def handle(req: BaseHTTPRequestHandler) -> None:
        calls.append(1)
        if len(calls) > 1:
            reply(req, 200, BODY)
            return
        server_now = time.time() + skew
        req.send_response_only(503)  # no Date of this host's clock (send_response adds one)
        req.send_header(
            "Date", format_datetime(datetime.fromtimestamp(server_now, timezone.utc), usegmt=True)
        )
        at = datetime.fromtimestamp(server_now + 2, timezone.utc)
        req.send_header("Retry-After", format_datetime(at, usegmt=True))
        req.send_header("Content-Length", "4")
        req.end_headers()
        req.wfile.write(b"busy")

    url, _ = http_server(handle)
    delays: list[float] = []
    c = PromClient(url, timeout_seconds=5, retries=2, backoff_seconds=0.1, sleep=delays.append)
    assert len(c.instant("up")) == 2
    assert len(delays) == 1 and 1.0 <= delays[0] <= 3.0, delays


@pytest.mark.parametrize("header", ["soon", "Wed, 21 Oct 2015 07:28:00 GMT", "-5", "9" * 80])
def test_an_unusable_or_past_retry_after_keeps_the_backoff(http_server, header: str) -> None:  # noqa: F811
    url, _ = http_server(_busy_then_ok(503, header, busy=2))
    delays: list[float] = []
    c = PromClient(url, retries=2, backoff_seconds=0.5, sleep=delays.append)
    assert len(c.instant("up")) == 2
    assert delays == [0.5, 1.0]


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    soon = format_datetime(datetime.fromtimestamp(now + 30, timezone.utc), usegmt=True)
    assert parse_retry_after(" 7 ", now) == 7.0
    assert parse_retry_after(soon, now) == pytest.approx(30.0)
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now) == 0.0
    for unusable in (None, "", "1.5", "-1", "\u00b2", "soon", "9" * 80, "Sun, 99 Nov 1994"):
        assert parse_retry_after(unusable, now) is None, unusable


def test_parse_http_date() -> None:
    """The dates an answer's ``Date`` carries (prom_clock reads Prometheus' clock from
    them): the preferred form, a ``-0000`` zone, the obsolete RFC 850 form."""
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777.0
    assert parse_http_date(" Sun, 06 Nov 1994 08:49:37 -0000 ") == 784111777.0
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == 784111777.0
    for unusable in (None, "", "soon", "9" * 80, "Sun, 99 Nov 1994 08:49:37 GMT"):
        assert parse_http_date(unusable) is None, unusable


# -- a retried status's body --------------------------------------------------------


def test_a_retried_status_says_what_its_body_said(http_server) -> None:  # noqa: F811
    """A 502/503 body (a proxy's text, Prometheus' JSON) is read, at most 4 KiB of it,
    and shown: "HTTP 503" alone left the cause to guesswork."""
    big = b"upstream connect error: connection refused " + b"x" * 50_000
    bodies = iter([(b"no healthy upstream\n", "text/plain"), (big, "text/plain")])
    url, _ = http_server(lambda r: reply(r, 503, *next(bodies)))
    c = client(url, retries=1)
    with pytest.raises(PromAPIError) as err:
        c.instant("up")
    text = str(err.value)
    assert "failed after 2 attempts: HTTP 503: upstream connect error" in text
    assert len(text) < 600  # the body cut, never 50 KB in a log line

    said = json.dumps({"status": "error", "errorType": "unavailable", "error": "TSDB not ready"})
    url, seen = http_server(lambda r: reply(r, 503, said.encode()))
    with pytest.raises(PromAPIError, match="HTTP 503: unavailable: TSDB not ready"):
        client(url, retries=1).instant("up")
    assert len(seen) == 2  # still retried: the server may be back


@pytest.mark.integration
def test_a_query_prometheus_times_out_is_not_retried_and_says_so(prometheus_factory) -> None:
    """Prometheus stopping a query at its --query.timeout answers 503 errorType
    ``timeout``: the same query would cost as much again and time out again, so it is
    not retried, and the error is Prometheus' own.

    Prometheus does not cut this subquery's 2.6 million steps short at its timeout:
    the 503 came 1.5 to 6 s after the request on a busy machine, and past 10 s under
    load, where a client timeout of 10 s ended the attempt first and it was retried
    for that. The client waits 60 s: what is tested is what it does with the answer."""
    prom = prometheus_factory([], extra_args=["--query.timeout=100ms"])
    slept: list[float] = []
    c = PromClient(prom.url, timeout_seconds=60, retries=2, sleep=slept.append)
    with pytest.raises(PromAPIError) as err:
        c.instant("count(count_over_time(vector(1)[30d:1s]))")
    assert "HTTP 503: timeout: query timed out" in str(err.value)
    assert (c.stats.error, c.stats.success, slept) == (1, 0, [])


# -- the answer's Date: Prometheus' clock ------------------------------------------


def _dated(date: str, code: int = 200) -> Callable[[BaseHTTPRequestHandler], None]:
    """A handler answering a vector dated ``date`` (the ``Date`` header) with ``code``."""

    def handle(req: BaseHTTPRequestHandler) -> None:
        body = json.dumps(VECTOR).encode()
        req.send_response_only(code)  # no Date of the handler's own
        req.send_header("Date", date)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)

    return handle


def test_the_client_keeps_the_latest_answers_date(http_server) -> None:  # noqa: F811
    url, _ = http_server(_dated("Sun, 06 Nov 1994 08:49:37 GMT"))
    c = client(url)
    assert c.stats.date is None  # before any answer
    before = time.monotonic()
    c.instant("up")
    date, received = c.stats.date  # type: ignore[misc]
    assert date == 784111777.0
    assert before <= received <= time.monotonic()


def test_an_unreadable_or_retried_answers_date_is_not_kept(http_server) -> None:  # noqa: F811
    """A 503, 500, 401 or 403 (often a proxy's own answer, on its own clock: an
    authenticating proxy refusing, a gateway failing) and a Date that is no date leave
    the Date last read as it was. Prometheus' own answers are 2xx, 400 and 422."""
    url, _ = http_server(_dated("Sun, 06 Nov 1994 08:49:37 GMT"))
    c = client(url)
    c.instant("up")
    kept = c.stats.date
    for handle in (
        _dated("soon"),
        *(_dated("Mon, 07 Nov 1994 08:49:37 GMT", code=code) for code in (503, 500, 401, 403)),
    ):
        c.url, _ = http_server(handle)
        with contextlib.suppress(PromAPIError):
            c.instant("up")
        assert c.stats.date == kept


@pytest.mark.integration
def test_prometheus_and_victoriametrics_answers_carry_their_clock(
    tmp_path, prometheus_factory
) -> None:
    """Both stamp every answer with a Date (the cycle reads Prometheus' clock from it,
    prom_clock): on a clock in step, the second the answer left."""
    prom = prometheus_factory([])
    vm = start_victoriametrics([], data_dir=tmp_path / "vm")
    try:
        for url in (prom.url, vm.url):
            c = client(url)
            c.instant("vector(1)")
            date, received = c.stats.date  # type: ignore[misc]
            # whole seconds, stamped as the answer left: within the second before now
            assert -1.5 < date - (time.time() - (time.monotonic() - received)) < 0.5, url
    finally:
        vm.stop()


# -- 6. redirects ---------------------------------------------------------------------


def _redirect(
    code: int, location: Callable[[str], str]
) -> Callable[[BaseHTTPRequestHandler], None]:
    def handle(req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        req.rfile.read(length)
        if req.path.startswith("/new/"):
            reply(req, 200, BODY)
            return
        req.send_response(code)
        req.send_header("Location", location(req.path))
        req.send_header("Content-Length", "0")
        req.end_headers()

    return handle


@pytest.mark.parametrize("long", [False, True], ids=["get", "post"])
@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_a_redirect_is_one_clear_error_naming_the_url_to_configure(
    http_server,  # noqa: F811
    code: int,
    long: bool,
) -> None:
    """A 301/302 made the POST of a long query a GET without its body ("bad_data"):
    redirects are never followed, whatever the code, and the error says what to set."""
    url, seen = http_server(_redirect(code, lambda path: "/new" + path))
    query = "up or " + "x" * 7000 if long else "up"
    c = client(url, retries=2)
    with pytest.raises(PromAPIError) as info:
        c.instant(query)
    assert f"answered HTTP {code}, a redirect to '{url}/new/api/v1/query'" in str(info.value)
    assert f"set --prometheus.url to '{url}/new'" in str(info.value)
    assert len(seen) == 1 and c.stats.error == 1  # not followed, not retried


def test_a_redirect_to_a_login_page_says_so_without_its_query_string(http_server) -> None:  # noqa: F811
    login = "https://user:pw@sso.example/oauth2/start?rd=%2Fapi%2Fv1%2Fquery&token=s3cret"
    url, _ = http_server(_redirect(302, lambda _path: login))
    with pytest.raises(PromAPIError, match="not the query API") as info:
        client(url).instant("up")
    assert "'https://sso.example/oauth2/start'" in str(info.value)
    assert "s3cret" not in str(info.value) and "pw" not in str(info.value)


def test_redirect_message_resolves_relative_locations_and_bounds_them() -> None:
    at = "http://me:pw@prom:9090/prefix/api/v1/query_range?query=up"
    said = promapi.redirect_message(
        308, "../../v2/api/v1/query_range?x=1", at, "/api/v1/query_range"
    )
    assert said.endswith("set --prometheus.url to 'http://prom:9090/prefix/v2'")
    assert "pw" not in said and "x=1" not in said
    assert "without a Location" in promapi.redirect_message(301, None, at, "/api/v1/query")
    assert "unreadable" in promapi.redirect_message(301, "http://[::1", at, "/api/v1/query")
    assert len(promapi.redirect_message(301, "/" + "a" * 10_000, at, "/api/v1/query")) < 500


def test_error_said_reads_prometheus_errors_and_any_other_text() -> None:
    said = '{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}'
    assert promparse.error_said(said) == ("timeout", "query timed out in expression evaluation")
    cut = said[:40]  # only the body's start is read: a cut JSON is text
    assert promparse.error_said(cut) == ("", cut)
    assert promparse.error_said("<html>\n<b>502</b>\x1b[2J Bad Gateway", 20) == (
        "",
        "<html> <b>502</b> B…",
    )
    assert promparse.error_said("") == ("", "")
