"""gpu_eta.forecaster.promapi against local HTTP servers that misbehave like real ones do."""

from __future__ import annotations

import base64
import contextlib
import json
import math
import re
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_eta.common.text import masked_credentials
from gpu_eta.forecaster import promapi, promparse
from gpu_eta.forecaster.promapi import PromAPIError, PromClient
from gpu_eta.forecaster.promparse import VM_PARTIAL, decode_response, parse_matrix, parse_vector
from gpu_eta.launch.prometheus import free_port

VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [
            {"metric": {"run_id": "a"}, "value": [1700000000.5, "3"]},
            {"metric": {"run_id": "b"}, "value": [1700000000.5, "NaN"]},
        ],
    },
}

Handler = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture
def http_server() -> Iterator[Callable[..., tuple[str, list[BaseHTTPRequestHandler]]]]:
    """Start loopback servers running ``handle(request)``; all are shut down after the test."""
    servers: list[ThreadingHTTPServer] = []

    def start(
        handle: Handler, tls: tuple[Path, Path] | None = None
    ) -> tuple[str, list[BaseHTTPRequestHandler]]:
        """``tls``: (certificate, key) files to serve https with (``self_signed``)."""
        seen: list[BaseHTTPRequestHandler] = []

        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self)
                handle(self)

            do_POST = do_GET

            def log_message(self, *args: object) -> None:
                pass

        srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        scheme = "https" if tls is not None else "http"
        return f"{scheme}://127.0.0.1:{srv.server_address[1]}", seen

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def reply(
    req: BaseHTTPRequestHandler, code: int, body: bytes, ctype: str = "application/json"
) -> None:
    req.send_response(code)
    req.send_header("Content-Type", ctype)
    req.send_header("Content-Length", str(len(body)))
    req.end_headers()
    with contextlib.suppress(OSError):
        req.wfile.write(body)


def client(url: str, **kw) -> PromClient:
    kw.setdefault("timeout_seconds", 2.0)
    kw.setdefault("retries", 0)
    return PromClient(url, sleep=lambda _s: None, **kw)


def test_instant_query_parses_vector_and_keeps_nan(http_server) -> None:
    url, seen = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
    samples = client(url).instant("up", at=1700000000.5)
    assert [s.labels["run_id"] for s in samples] == ["a", "b"]
    assert samples[0].value == 3.0 and math.isnan(samples[1].value)
    assert "time=1700000000.500" in seen[0].path and "query=up" in seen[0].path


def test_a_long_query_is_posted_as_a_form_a_short_one_sent_in_the_url(http_server) -> None:
    bodies: list[tuple[str, str, bytes]] = []

    def handle(req: BaseHTTPRequestHandler) -> None:
        length = int(req.headers.get("Content-Length") or 0)
        bodies.append((req.command, req.path, req.rfile.read(length)))
        reply(req, 200, json.dumps(VECTOR).encode())

    url, _ = http_server(handle)
    long = 'up{run_id=~"' + "|".join(f"run-{i:05d}" for i in range(600)) + '"}'
    assert len(long) > promapi.POST_OVER_CHARS
    assert len(client(url).instant(long, at=1700000000.0)) == 2
    client(url).instant("up", at=1700000000.0)
    (post_cmd, post_path, form), (get_cmd, get_path, _) = bodies
    assert post_cmd == "POST" and post_path == "/api/v1/query"
    assert urllib.parse.parse_qs(form.decode())["query"] == [long]
    assert get_cmd == "GET" and "query=up" in get_path


def test_range_query_parses_matrix(http_server) -> None:
    body = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"x": "1"}, "values": [[10, "1"], [25, "2"]]}],
        },
    }
    url, seen = http_server(lambda r: reply(r, 200, json.dumps(body).encode()))
    series = client(url).range("x", 10, 25, 15)
    assert series[0].points == ((10.0, 1.0), (25.0, 2.0))
    assert "step=15.000" in seen[0].path


def test_a_range_selectors_raw_samples_come_as_series_within_the_size_cap(http_server) -> None:
    """``samples``: an instant query answering a matrix (a range selector's raw samples)
    is read as series with their points, its warnings collected; an answer over
    ``max_response_bytes`` is refused as any other."""
    body = {
        "status": "success",
        "warnings": ["store away"],
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": {"__name__": "x", "pod": "p"}, "values": [[10, "1"], [25, "0.5"]]}
            ],
        },
    }
    raw = json.dumps(body).encode()
    url, seen = http_server(lambda r: reply(r, 200, raw))
    said: list[str] = []
    (series,) = client(url).samples('x{pod=~"p"}[30s]', at=25.0, warnings=said)
    assert dict(series.labels) == {"__name__": "x", "pod": "p"}
    assert series.points == ((10.0, 1.0), (25.0, 0.5))
    assert said == ["store away"] and "time=25.000" in seen[0].path
    assert "/api/v1/query?" in seen[0].path
    with pytest.raises(PromAPIError, match=r"limit|too large"):
        client(url, max_response_bytes=len(raw) - 1).samples('x{pod=~"p"}[30s]', at=25.0)
    with pytest.raises(promparse.PromAPIError, match="expected a matrix"):
        url2, _ = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
        client(url2).samples("up", at=25.0)


def test_a_range_answers_warnings_are_collected_cleaned(http_server) -> None:
    """A partial range answer (a store down) says so in ``warnings``, as an instant one:
    the caller is told, with the server's text cleaned as ``decode_answer`` cleans it."""
    body = {
        "status": "success",
        "warnings": [
            "remote_read: \x1b[2Jconnection\nrefused",
            "remote_read: \x1b[2Jconnection\nrefused",
        ],
        "data": {"resultType": "matrix", "result": [{"metric": {"x": "1"}, "values": [[10, "1"]]}]},
    }
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(body).encode()))
    said: list[str] = []
    (series,) = client(url).range("x", 10, 25, 15, warnings=said)
    assert series.points == ((10.0, 1.0),)
    assert said == ["remote_read: connection refused"]
    assert client(url).range("x", 10, 25, 15) == [series]  # not asked: dropped


def test_a_victoriametrics_partial_answer_is_said_as_a_warning(http_server) -> None:
    """A VictoriaMetrics cluster with a vmstorage node away answers ``"isPartial": true``
    and no ``warnings``: read as whole, the runs of that node were finished as gone."""
    body = {"status": "success", "isPartial": True, "data": VECTOR["data"]}
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(body).encode()))
    said: list[str] = []
    assert len(client(url).instant("up", warnings=said)) == 2
    assert said == [VM_PARTIAL]


def test_partial_answers_are_counted_whether_or_not_the_caller_asks(http_server) -> None:
    """``gpu_eta_forecaster_partial_answers_total``: the stall check's GPU use asks
    for no warnings, yet its partial answer is one an admin must be able to see."""
    partial = {"status": "success", "warnings": ["store down"], "data": VECTOR["data"]}
    answers = iter([partial, VECTOR, partial])
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(next(answers)).encode()))
    c = client(url)
    c.instant("up")
    c.instant("up")
    c.instant("up", warnings=[])
    assert (c.stats.success, c.stats.partial) == (3, 2)


def test_garbage_body_is_a_clear_error(http_server) -> None:
    url, _ = http_server(lambda r: reply(r, 200, b"<html>login page</html>", "text/html"))
    c = client(url)
    with pytest.raises(PromAPIError, match="not JSON"):
        c.instant("up")
    assert c.stats.error == 1 and c.stats.success == 0


def test_json_of_the_wrong_shape_is_a_clear_error(http_server) -> None:
    """The answer's structure is checked as a whole (one bad series only costs itself)."""
    bad = {"status": "success", "data": {"resultType": "vector", "result": {"a": 1}}}
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(bad).encode()))
    c = client(url)
    with pytest.raises(PromAPIError, match=r"no data\.result list"):
        c.instant("up")
    assert c.stats.error == 1 and c.stats.success == 0


def test_huge_body_is_refused_without_reading_it_all(http_server) -> None:
    def huge(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.end_headers()
        chunk = b"x" * 65536
        try:
            for _ in range(200):  # 13 MB, never Content-Length
                req.wfile.write(chunk)
        except OSError:
            pass

    url, _ = http_server(huge)
    with pytest.raises(PromAPIError, match="exceeds the 1000000-byte limit"):
        client(url, max_response_bytes=1_000_000).instant("up")


def test_declared_huge_length_is_refused(http_server) -> None:
    def declared(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Length", str(10**10))
        req.end_headers()

    url, _ = http_server(declared)
    with pytest.raises(PromAPIError, match="exceeds"):
        client(url, max_response_bytes=1_000_000).instant("up")


@pytest.mark.parametrize("declared", ["\xb2", "12abc", "-1", "12, 1\xb2"])
def test_a_content_length_that_is_no_length_is_one_clear_error(http_server, declared) -> None:
    """``"²".isdigit()`` is true (and the header is read as Latin-1), but ``int("²")``
    raises: a server sending ``Content-Length: \\xb2`` ended the forecaster's cycle and
    ``top`` in a traceback. A Content-Length that is not a length (or two that differ)
    frames no body (RFC 9112, 6.3): one error line naming it (urllib3 ignored those it
    could not read, and the body was read to the connection's close, or its deadline)."""
    body = json.dumps(VECTOR).encode()

    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", declared)
        req.end_headers()
        with contextlib.suppress(OSError):
            req.wfile.write(body)

    url, _ = http_server(handle)
    with pytest.raises(PromAPIError, match="invalid Content-Length") as err:
        client(url).instant("up")
    assert "\n" not in str(err.value) and url in str(err.value)


def test_a_content_length_given_twice_alike_is_read(http_server) -> None:
    """``Content-Length: 12, 12`` (a proxy joining a repeated header) is one length."""
    body = json.dumps(VECTOR).encode()

    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Length", f"{len(body)}, {len(body)}")
        req.end_headers()
        req.wfile.write(body)

    url, _ = http_server(handle)
    assert len(client(url).instant("up")) == 2


def test_slow_server_times_out_after_retries(http_server) -> None:
    release = threading.Event()

    def slow(req: BaseHTTPRequestHandler) -> None:
        release.wait(10)
        reply(req, 200, json.dumps(VECTOR).encode())

    url, seen = http_server(slow)
    c = client(url, timeout_seconds=0.3, retries=1)
    started = time.monotonic()
    try:
        with pytest.raises(PromAPIError, match="failed after 2 attempts: timed out"):
            c.instant("up")
    finally:
        release.set()
    assert time.monotonic() - started < 8
    assert len(seen) == 2


def test_503_is_retried_then_succeeds(http_server) -> None:
    calls = []

    def flaky(req: BaseHTTPRequestHandler) -> None:
        calls.append(1)
        if len(calls) < 3:
            reply(req, 503, b"overloaded", "text/plain")
        else:
            reply(req, 200, json.dumps(VECTOR).encode())

    url, _ = http_server(flaky)
    delays: list[float] = []
    c = PromClient(url, retries=2, backoff_seconds=0.5, sleep=delays.append)
    assert len(c.instant("up")) == 2
    assert delays == [0.5, 1.0]
    assert c.stats.success == 1


def test_bad_query_is_not_retried_and_shows_prometheus_message(http_server) -> None:
    err = {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"}
    url, seen = http_server(lambda r: reply(r, 400, json.dumps(err).encode()))
    with pytest.raises(PromAPIError, match="bad_data: parse error at char 3"):
        client(url, retries=3).instant("up{")
    assert len(seen) == 1


def test_nothing_listening_is_a_clear_error() -> None:
    port = free_port()
    with pytest.raises(PromAPIError, match="cannot connect"):
        client(f"http://127.0.0.1:{port}", retries=1).instant("up")


def test_bearer_token_and_basic_auth_are_sent(http_server) -> None:
    url, seen = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
    client(url, bearer_token="s3cret").instant("up")
    assert seen[0].headers["Authorization"] == "Bearer s3cret"
    client(url, basic_auth=("me", "pw")).instant("up")
    assert seen[1].headers["Authorization"] == "Basic " + base64.b64encode(b"me:pw").decode()


def test_credentials_never_appear_in_errors() -> None:
    port = free_port()
    c = client(f"http://user:pw@127.0.0.1:{port}/prom")
    assert c.safe_url == f"http://127.0.0.1:{port}/prom"
    with pytest.raises(PromAPIError) as info:
        c.instant("up")
    assert "pw" not in str(info.value)


@pytest.mark.parametrize(
    "proxy",
    [
        "http://gpu-eta:S3cretProxyPass@proxy.corp:99999",  # requests: "Failed to parse: <url>"
        "http://gpu-eta:S3cretProxyPass@127.0.0.1:1",  # cannot connect to the proxy
        "socks6://gpu-eta:S3cretProxyPass@p:1",  # urllib3's ValueError quotes the URL
        "http://gpu-eta:S3cret@Proxy@Pass@proxy.corp:99999",  # '@' in the password
    ],
)
def test_a_proxys_credentials_never_appear_in_errors(
    proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy URL from the environment is quoted by requests and urllib3 in their
    errors, with its user and password: the client's errors are logged by ``serve``,
    shown in /readyz and /healthz and printed by ``top``."""
    monkeypatch.setenv("HTTP_PROXY", proxy)
    monkeypatch.setenv("NO_PROXY", "")
    with pytest.raises(PromAPIError) as info:
        client("http://prometheus.monitoring.svc:9090", timeout_seconds=1).instant("up")
    text = str(info.value)
    assert "S3cret" not in text and "Pass" not in text and "gpu-eta" not in text, text
    assert "//***@" in text or "proxy" not in text.lower(), text


def test_masked_credentials() -> None:
    """Every URL's user:password in a text, a password holding '@' too; not a mail
    address or a path. Pure."""
    text = "Failed to parse: http://u:p@ss@proxy:99999/x and 'https://a@b' (mail a@b.c)"
    assert masked_credentials(text) == (
        "Failed to parse: http://***@proxy:99999/x and 'https://***@b' (mail a@b.c)"
    )


def test_tls_against_plain_http_is_a_clear_error(http_server) -> None:
    url, _ = http_server(lambda r: reply(r, 200, b"{}"))
    with pytest.raises(PromAPIError, match=r"TLS error|cannot connect"):
        client(url.replace("http://", "https://"), insecure_skip_verify=True).instant("up")


def self_signed(tmp_path: Path, names: str = "IP:127.0.0.1") -> tuple[Path, Path]:
    """A fresh self-signed certificate for ``names`` (subjectAltName; 127.0.0.1) and its
    key (openssl)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            f"subjectAltName={names}",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An https server on 127.0.0.1 with a fresh self-signed certificate."""
    cert, key = self_signed(tmp_path)

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            reply(self, 200, json.dumps(VECTOR).encode())

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}", cert
    finally:
        srv.shutdown()
        srv.server_close()


def test_tls_with_ca_file_verifies_and_without_it_fails(tls_server) -> None:
    url, cert = tls_server
    assert len(client(url, ca_file=str(cert)).instant("up")) == 2
    with pytest.raises(PromAPIError, match="TLS error"):
        client(url).instant("up")
    assert len(client(url, insecure_skip_verify=True).instant("up")) == 2


@pytest.mark.parametrize(
    "url",
    [
        "localhost:9090",
        "ftp://x",
        "http://",
        "http://bad..name:9090",
        f"http://{'a' * 64}.svc",
        "http://127.0.0.1:99999",  # urlsplit's port: ValueError out of range
        "http://prom:abc",  # ... not a number
        "http://[::1",  # urlsplit itself: ValueError Invalid IPv6 URL
    ],
)
def test_bad_url_is_refused(url: str) -> None:
    """At start-up, with a message: an empty or over-long label in the host name made
    urllib3 raise its own error from every query, past the client's; a port or IPv6
    host urlsplit cannot read is the client's error too, not a bare ValueError."""
    with pytest.raises(PromAPIError, match="URL"):
        PromClient(url)


@pytest.mark.parametrize(
    "url",
    [
        "http://prom:9090/?partial_response=false",
        "http://prom:9090/prefix?access_token=s3cr3t",
        "http://prom:9090/#x",
        "http://prom:9090?",
        "https://u:pw@prom:9090/p#",
    ],
)
def test_a_url_with_a_query_string_or_fragment_is_refused(url: str) -> None:
    """The API path is appended to the URL: one with '?…' or '#…' sent every query to
    '<url>?…/api/v1/query' (the path inside the query string), answered with the base
    path's page or 404, never a reason that says why. The message does not show what
    follows the '?' (it may be a token) nor a password."""
    with pytest.raises(PromAPIError, match="query string or fragment") as err:
        PromClient(url)
    text = str(err.value)
    assert "s3cr3t" not in text and "pw" not in text and "partial_response" not in text
    assert "http" in text and "prom:9090" in text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout_seconds": float("inf")}, "timeout"),
        ({"timeout_seconds": float("nan")}, "timeout"),
        ({"backoff_seconds": float("nan")}, "backoff"),
        ({"backoff_seconds": -1.0}, "backoff"),
    ],
)
def test_a_timeout_or_backoff_that_no_sleep_takes_is_refused(kwargs, message: str) -> None:
    """At start-up: an infinite or NaN value got past the checks and failed at the
    first request (urllib3's timeout) or retry (``time.sleep``) with a bare error."""
    with pytest.raises(PromAPIError, match=message):
        PromClient("http://127.0.0.1:9090", **kwargs)


def test_safe_url_never_raises_and_hides_credentials() -> None:
    """``safe_url`` is what error messages are built from: a URL set after the checks
    that urlsplit cannot read still gives a line, without its password."""
    c = PromClient("http://[::1]:9090/prom")
    assert c.safe_url == "http://[::1]:9090/prom"
    c.url = "http://me:pw@[::1:99999"
    assert c.safe_url == "http://***@[::1:99999"


def test_pure_decoders() -> None:
    assert decode_response(json.dumps(VECTOR).encode(), 200)["resultType"] == "vector"
    with pytest.raises(PromAPIError, match="not a Prometheus API response"):
        decode_response(b"[1,2]", 200)
    with pytest.raises(PromAPIError, match="expected a vector"):
        parse_vector({"resultType": "matrix", "result": []})
    with pytest.raises(PromAPIError, match="expected a matrix"):
        parse_matrix({"resultType": "vector", "result": []})
    scalar = parse_vector({"resultType": "scalar", "result": [5, "2.5"]})
    assert scalar[0].value == 2.5 and dict(scalar[0].labels) == {}
    skipped = promparse.Skipped()
    bad_label = {"metric": {"a": 1}, "value": [1, "1"]}
    assert parse_vector({"resultType": "vector", "result": [bad_label]}, "q", skipped) == []
    assert skipped.count == 1 and skipped.first.startswith("malformed label 'a' (not a string)")


@pytest.mark.parametrize(
    "point",
    [[1, 2], "12", [1], [1, "2", 3], ["x", "1"], ["inf", "1"], [1e400, "1"], None, [[1], "1"]],
)
def test_a_malformed_point_skips_its_series_in_vectors_and_matrices(point) -> None:
    """One bad point costs its own series (counted, with the reason), never the answer's rest;
    a malformed scalar is the whole answer and stays an error."""
    good_sample = {"metric": {"pod": "p"}, "value": [1, "1"]}
    bad_sample = {"metric": {"pod": "q"}, "value": point}
    skipped = promparse.Skipped()
    samples = parse_vector(
        {"resultType": "vector", "result": [bad_sample, good_sample]}, "", skipped
    )
    assert [dict(s.labels) for s in samples] == [{"pod": "p"}]
    assert skipped.count == 1
    assert re.match(r"(malformed sample|non-finite timestamp).* in \{pod='q'\}$", skipped.first)

    good = {"metric": {"pod": "p"}, "values": [[1, "1"], [2, "2"]]}
    bad = {"metric": {"pod": "q"}, "values": [[1, "1"], point]}
    skipped = promparse.Skipped()
    (series,) = parse_matrix({"resultType": "matrix", "result": [good, bad]}, "", skipped)
    assert series.points == ((1.0, 1.0), (2.0, 2.0)) and dict(series.labels) == {"pod": "p"}
    assert skipped.count == 1 and skipped.first.endswith("in {pod='q'}")

    with pytest.raises(PromAPIError, match=r"malformed sample|non-finite timestamp"):
        parse_vector({"resultType": "scalar", "result": point})


@pytest.mark.parametrize(
    ("status", "doc", "refused"),
    [
        (422, {"errorType": "execution", "error": "found duplicate series"}, True),
        (400, {"errorType": "bad_data", "error": "parse error"}, True),
        # VictoriaMetrics spells the type as the status, for a refused query...
        (422, {"errorType": "422", "error": 'error when executing query="x": duplicate'}, True),
        # ...and for a timeout or an overload, which are the server's, not the query's
        (422, {"errorType": "422", "error": "timeout exceeded during query execution"}, False),
        (422, {"errorType": "422", "error": "cannot execute: too many concurrent requests"}, False),
        (503, {"errorType": "timeout", "error": "query timed out"}, False),
        # a proxy's own error in the same JSON shape is its setup, not the query
        (400, {"errorType": "prom-label-proxy", "error": "missing tenant"}, False),
    ],
)
def test_a_refused_query_is_told_from_a_server_that_cannot_answer(status, doc, refused):
    from gpu_eta.forecaster.promparse import PromQueryError, decode_response

    body = json.dumps({"status": "error", **doc}).encode()
    with pytest.raises(PromAPIError) as err:
        decode_response(body, status)
    assert isinstance(err.value, PromQueryError) is refused


def test_a_long_error_keeps_its_cause() -> None:
    """VictoriaMetrics begins with the whole query and ends with why: both ends kept."""
    from gpu_eta.forecaster.promparse import decode_response

    error = 'error when executing query="' + "x" * 3000 + '": duplicate time series on the right'
    body = json.dumps({"status": "error", "errorType": "422", "error": error}).encode()
    with pytest.raises(PromAPIError) as err:
        decode_response(body, 422)
    text = str(err.value)
    assert "error when executing query" in text and text.endswith(
        "duplicate time series on the right"
    )
    assert len(text) < 400


def test_a_ca_file_removed_after_start_is_a_clear_error(tls_server, tmp_path: Path) -> None:
    """requests checks the CA bundle's path at every request and raises a bare OSError:
    a file removed after start (a Secret unmounted) escaped as a traceback."""
    url, cert = tls_server
    ca = tmp_path / "ca.pem"
    ca.write_bytes(cert.read_bytes())
    c = client(url, ca_file=str(ca))
    assert len(c.instant("up")) == 2
    ca.unlink()
    with pytest.raises(PromAPIError, match=r"request failed: .*ca\.pem"):
        c.instant("up")
    assert c.stats.error == 1


def test_a_proxy_variable_requests_cannot_use_is_a_clear_error(
    http_server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unknown proxy scheme (``socks6://``) makes urllib3 raise a bare ValueError."""
    url, _ = http_server(lambda r: reply(r, 200, json.dumps(VECTOR).encode()))
    monkeypatch.setenv("HTTP_PROXY", "socks6://p:1")
    monkeypatch.setenv("NO_PROXY", "")
    with pytest.raises(PromAPIError, match=r"request failed: .*socks6"):
        client(url).instant("up")
