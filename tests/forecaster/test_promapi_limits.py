"""gpu_eta.forecaster.promapi's bounds on one answer: one deadline for the whole request
(headers included), every member of a gzip body within the size cap, and the memory
a large answer holds while it is parsed.

Real loopback HTTP(S) servers (``http_server`` from test_promapi) pace their bytes as
a server wedged mid-answer, or a proxy compressing each flush on its own, does.
"""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import socket
import threading
import time
import tracemalloc
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import urllib3.util.connection

from gpu_eta.forecaster import http_deadline, promparse
from gpu_eta.forecaster.promapi import PromAPIError
from tests.forecaster.test_promapi import (  # noqa: F401
    VECTOR,
    client,
    http_server,
    reply,
    self_signed,
)

BODY = json.dumps(VECTOR).encode()
STATUS = b"HTTP/1.1 200 OK\r\n"
HEADERS = b"Content-Type: application/json\r\nConnection: close\r\n"


def _paced(stop: threading.Event, *parts: tuple[bytes, float]) -> Callable[..., None]:
    """A handler writing each ``(data, pace)`` part: at once when pace is 0, else one
    byte every ``pace`` seconds (each byte its own write, and its own TLS record)."""

    def handle(req: BaseHTTPRequestHandler) -> None:
        try:
            for data, pace in parts:
                if not pace:
                    req.wfile.write(data)
                    continue
                for i in range(len(data)):
                    req.wfile.write(data[i : i + 1])
                    if stop.wait(pace):
                        return
        except OSError:
            pass

    return handle


# -- 1. one deadline for the whole request ----------------------------------------------


@pytest.mark.parametrize(
    ("tls", "before", "dripped"),
    [
        (False, b"", b"HTTP/1.1 200 " + b"O" * 50 + b"K\r\n"),  # a long reason phrase
        (False, STATUS + HEADERS, b"X-Padding: " + b"." * 60 + b"\r\n"),
        (True, STATUS + HEADERS, b"X-Padding: " + b"." * 60 + b"\r\n"),
    ],
    ids=["status-line", "header", "header-over-tls"],
)
def test_headers_dripped_just_inside_the_timeout_fail_at_the_deadline(
    http_server,  # noqa: F811
    tmp_path: Path,
    tls: bool,
    before: bytes,
    dripped: bytes,
) -> None:
    """A byte every 0.8 × the 0.3 s timeout: no read times out, and the whole answer
    would arrive after 16 to 18 s (past the 2.4 s bound however loaded the machine).
    It must fail at 0.6 s (2 × the timeout: the server's
    evaluation, then the network), naming the server, the query and what was late.
    Only the body had a deadline: it started after the headers, however long they
    took."""
    stop = threading.Event()
    rest = (b"" if before else HEADERS) + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY
    handle = _paced(stop, (before, 0), (dripped, 0.24), (rest, 0))
    cert_key = self_signed(tmp_path) if tls else None
    url, _ = http_server(handle, tls=cert_key)
    c = client(url, timeout_seconds=0.3, ca_file=str(cert_key[0]) if cert_key else None)
    started = time.monotonic()
    try:
        with pytest.raises(PromAPIError) as info:
            c.instant("up")
    finally:
        stop.set()
    elapsed = time.monotonic() - started
    assert str(info.value) == (
        f"{url}: query 'up' failed after 1 attempt: response headers too slow: not "
        "complete 0.6s after the request started (2 × --prometheus.timeout)"
    )
    assert 0.55 < elapsed < 2.4, elapsed  # not 16 s
    assert c.stats.error == 1


def _named(url: str) -> str:
    """``url`` (a loopback server's) with the host name ``localhost`` for its address."""
    return url.replace("127.0.0.1", "localhost")


def _hung_lookups(monkeypatch: pytest.MonkeyPatch, release: threading.Event) -> list[str]:
    """``socket.getaddrinfo`` hanging (until ``release``) for ``localhost``, as a
    resolver whose DNS servers do not answer does; the names asked are listed."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "localhost":
            asked.append(host)
            release.wait(30)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def test_a_name_lookup_that_never_answers_fails_at_the_deadline(
    http_server,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The lookup is a libc call no socket timeout reaches: with the resolver hung,
    the query fails at 2 × the 0.3 s timeout, naming the lookup, and at most
    ``MAX_LOOKUPS`` lookup threads wait however many queries ask meanwhile. (No real
    resolver can be hung here without changing the machine's, so ``getaddrinfo``
    stands in; the server and the client are real.)"""
    url, seen = http_server(lambda r: reply(r, 200, BODY))
    release = threading.Event()
    asked = _hung_lookups(monkeypatch, release)
    c = client(_named(url), timeout_seconds=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(PromAPIError) as info:
            c.instant("up")
        elapsed = time.monotonic() - started
        assert str(info.value) == (
            f"{_named(url)}: query 'up' failed after 1 attempt: cannot connect (DNS "
            "lookup of localhost not answered by the request deadline)"
        )
        assert 0.55 < elapsed < 2.4, elapsed  # not the 30 s the lookup hangs
        for _ in range(2 * http_deadline.MAX_LOOKUPS):
            with pytest.raises(PromAPIError):
                c.instant("up")
        lookups = [t for t in threading.enumerate() if t.name.startswith("dns-lookup")]
        assert len(lookups) == len(asked) == http_deadline.MAX_LOOKUPS
        assert all(t.daemon for t in lookups) and not seen
    finally:
        release.set()
    # answered again: the next query connects
    deadline = time.monotonic() + 5
    while any(t.name.startswith("dns-lookup") for t in threading.enumerate()):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert [s.labels["run_id"] for s in c.instant("up")] == ["a", "b"]


def test_each_address_of_the_name_is_tried_in_turn(
    http_server,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A name with several addresses, the first refusing (the server listens on
    127.0.0.1 only): the next is dialled, as ``create_connection`` does; over TLS the
    certificate is still checked against the name."""
    cert_key = self_signed(tmp_path, names="DNS:localhost")
    url, seen = http_server(lambda r: reply(r, 200, BODY), tls=cert_key)
    port = int(url.rsplit(":", 1)[1])
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "localhost":
            tcp = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
            return [(*tcp, ("127.0.0.2", port)), (*tcp, ("127.0.0.1", port))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    samples = client(_named(url), ca_file=str(cert_key[0])).instant("up")
    assert [s.labels["run_id"] for s in samples] == ["a", "b"] and len(seen) == 1


def _unanswering(addresses: list[str], port: int) -> list[socket.socket]:
    """Listeners on ``addresses`` at ``port`` that answer no connection (with what
    holds them so): a backlog of none, filled by one connection never accepted, so the
    kernel drops every SYN after it and a connect waits its whole timeout, as a host
    that is down does. ``OSError`` (nothing left open) when ``port`` is taken on one of
    them: a parallel test worker's socket may hold it (a connection's source port from
    that address, a listener on every address)."""
    held: list[socket.socket] = []
    try:
        for address in addresses:
            listener = socket.socket()
            held.append(listener)
            listener.bind((address, port))
            listener.listen(0)
            held.append(socket.create_connection((address, port), timeout=1.0))
    except OSError:
        for sock in held:
            sock.close()
        raise
    return held


def test_addresses_that_do_not_answer_share_one_deadline(
    http_server,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each address of a name is dialled in turn, each within what is left of the
    request's deadline (2 × the 0.3 s timeout), not a connect timeout each: with ten
    that never answer before the server's and a lookup taking 0.1 s, the first is
    given the 0.3 s timeout, the second what is left (0.2 s), the others none, and
    the query fails at the deadline naming it; with one, the next address connects.
    Why ten: a timeout each would take 3 s, so the bound (2 s) is far from both that
    and the deadline (0.6 s), however loaded the machine."""
    down = [f"127.0.0.{i}" for i in range(3, 13)]
    for _attempt in range(5):  # a server whose port is free on the ten addresses too
        url, seen = http_server(lambda r: reply(r, 200, BODY))
        port = int(url.rsplit(":", 1)[1])
        try:
            held = _unanswering(down, port)
            break
        except OSError:
            continue
    else:
        pytest.fail("no port free on 127.0.0.1 and the ten unanswering addresses")
    listed: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "localhost":
            time.sleep(0.1)
            tcp = (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "")
            return [(*tcp, (address, port)) for address in [*listed, "127.0.0.1"]]
        return real(host, *args, **kwargs)

    dialled: list[tuple[str, float]] = []
    connect = urllib3.util.connection.create_connection

    def create_connection(address, timeout, *args, **kwargs):  # type: ignore[no-untyped-def]
        dialled.append((address[0], timeout))
        return connect(address, timeout, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(urllib3.util.connection, "create_connection", create_connection)
    c = client(_named(url), timeout_seconds=0.3, retries=0)
    with contextlib.ExitStack() as stack:
        for sock in held:
            stack.callback(sock.close)
        listed[:] = down
        started = time.monotonic()
        with pytest.raises(PromAPIError) as info:
            c.instant("up")
        elapsed = time.monotonic() - started
        assert str(info.value) == (
            f"{_named(url)}: query 'up' failed after 1 attempt: cannot connect: no "
            "address answered within 0.6s (2 × --prometheus.timeout)"
        )
        assert [a for a, _t in dialled] == down[:2]
        assert dialled[0][1] == 0.3 and 0.1 < dialled[1][1] < 0.25
        assert 0.55 < elapsed < 2.0, elapsed
        assert not seen
        listed[:] = down[:1]
        dialled.clear()
        assert [s.labels["run_id"] for s in c.instant("up")] == ["a", "b"]
        assert [a for a, _t in dialled] == [down[0], "127.0.0.1"] and len(seen) == 1


def test_a_name_that_does_not_resolve_is_named_in_the_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resolver's own answer reaches the message (not an empty address list)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "prometheus.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    with pytest.raises(PromAPIError) as info:
        client("http://prometheus.invalid:9090").instant("up")
    assert str(info.value) == (
        "http://prometheus.invalid:9090: query 'up' failed after 1 attempt: cannot "
        "connect (Name or service not known)"
    )


def test_a_real_lookup_of_the_loopback_name_connects(http_server) -> None:  # noqa: F811
    """The machine's own resolver (``localhost`` from /etc/hosts, on whichever
    addresses it lists first) and an address literal, which needs no lookup."""
    url, seen = http_server(lambda r: reply(r, 200, BODY))
    assert [s.labels["run_id"] for s in client(_named(url)).instant("up")] == ["a", "b"]
    assert http_deadline.resolve("127.0.0.1", 80, 0.0)[0][4] == ("127.0.0.1", 80)
    assert http_deadline.resolve("[::1]", 80, 0.0)[0][4][:2] == ("::1", 80)
    assert len(seen) == 1


def _late(stop: threading.Event, wait: float, pieces: list[bytes], pace: float):
    """A handler that answers after ``wait`` seconds (the server evaluating the
    query), then writes the headers and ``pieces`` of the body, ``pace`` apart."""
    size = sum(len(p) for p in pieces)

    def handle(req: BaseHTTPRequestHandler) -> None:
        try:
            if stop.wait(wait):
                return
            req.wfile.write(STATUS + HEADERS + b"Content-Length: %d\r\n\r\n" % size)
            for piece in pieces:
                req.wfile.write(piece)
                req.wfile.flush()
                if stop.wait(pace):
                    return
        except OSError:
            pass

    return handle


def test_a_slow_query_then_a_slow_large_body_is_read_whole(http_server) -> None:  # noqa: F811
    """The server evaluates for 0.9 × the 1 s timeout, then streams the body over
    2.4 s in 12 pieces, each well inside the timeout: a heavy range query's
    legitimate answer. The body has its 3 s from its headers, so it is read whole
    (one deadline over both failed it on every attempt)."""
    stop = threading.Event()
    step = -(-len(BODY) // 12)
    pieces = [BODY[i : i + step] for i in range(0, len(BODY), step)]
    url, _ = http_server(_late(stop, 0.9, pieces, 2.4 / len(pieces)))
    try:
        samples = client(url, timeout_seconds=1.0).instant("up")
    finally:
        stop.set()
    assert samples


def test_a_body_has_its_own_deadline_after_its_headers(http_server) -> None:  # noqa: F811
    """Headers after 0.4 s, then a body dripped byte by byte within the 0.5 s
    timeout: the attempt fails 1.5 s (3 × 0.5 s) after the headers, about 1.9 s in."""
    stop = threading.Event()
    pieces = [BODY[i : i + 1] for i in range(len(BODY))]
    url, _ = http_server(_late(stop, 0.4, pieces, 0.4))
    started = time.monotonic()
    try:
        with pytest.raises(PromAPIError, match=r"response body too slow: not complete 1\.5s"):
            client(url, timeout_seconds=0.5).instant("up")
    finally:
        stop.set()
    elapsed = time.monotonic() - started
    # one deadline from the request: 1.5 s; no deadline on the body: 75 s
    assert 1.8 < elapsed < 8.0, elapsed


def test_a_fast_answer_on_a_kept_alive_connection_is_unaffected(http_server) -> None:  # noqa: F811
    """The deadline's file is what every response is read with: many answers over one
    pooled connection, with and without gzip, still read whole."""

    def handle(req: BaseHTTPRequestHandler) -> None:
        req.protocol_version, req.close_connection = "HTTP/1.1", False  # keep-alive
        gz = "gzip" in req.path
        data = gzip.compress(BODY) if gz else BODY
        req.send_response(200)
        if gz:
            req.send_header("Content-Encoding", "gzip")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    url, seen = http_server(handle)
    c = client(url, timeout_seconds=0.5)
    for i in range(6):
        assert len(c.instant("up" if i % 2 else "gzip")) == 2
    assert len(seen) == 6 and len({id(r.connection) for r in seen}) == 1  # one connection


# -- 2. every gzip member, within the cap ------------------------------------------------


def _members(payload: bytes, *cuts: int) -> list[bytes]:
    """``payload`` cut at ``cuts``, each piece gzip-compressed on its own."""
    bounds = [0, *cuts, len(payload)]
    return [gzip.compress(payload[a:b]) for a, b in itertools.pairwise(bounds)]


def _gzip_chunks(chunks: list[bytes], pause: float = 0.0) -> Callable[..., None]:
    """A handler sending a chunked gzip body, one chunk per write, ``pause`` apart."""

    def handle(req: BaseHTTPRequestHandler) -> None:
        req.send_response(200)
        req.send_header("Content-Encoding", "gzip")
        req.send_header("Transfer-Encoding", "chunked")
        req.end_headers()
        with contextlib.suppress(OSError):  # the client may give up first
            for chunk in chunks:
                req.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                time.sleep(pause)
            req.wfile.write(b"0\r\n\r\n")

    return handle


@pytest.mark.parametrize(
    "chunks",
    [
        [b"".join(_members(BODY, len(BODY) // 2))],  # two members in one piece
        _members(BODY, 7, 40, len(BODY) - 3),  # one member per flush
        [b"".join(_members(BODY, 60))[:30], b"".join(_members(BODY, 60))[30:]],  # split mid-member
    ],
    ids=["one-write", "one-per-chunk", "split-member"],
)
def test_a_gzip_body_of_several_members_is_read_to_its_end(
    http_server,  # noqa: F811
    chunks: list[bytes],
) -> None:
    """zlib stops at the end of the first member: the rest was dropped, and the
    answer read as 'not JSON' (or, cut at the wrong place, as fewer series)."""
    url, _ = http_server(_gzip_chunks(chunks, pause=0.02))
    samples = client(url).instant("up")
    assert [s.labels["run_id"] for s in samples] == ["a", "b"]


def test_the_size_cap_counts_every_member(http_server) -> None:  # noqa: F811
    """40 members of 30 kB each: 1.2 MB decompressed against a 1 MB cap."""
    member = gzip.compress(b" " * 30_000)
    url, _ = http_server(_gzip_chunks([member] * 40))
    with pytest.raises(PromAPIError, match="exceeds the 1000000-byte limit"):
        client(url, max_response_bytes=1_000_000).instant("up")


def test_a_last_member_cut_short_is_a_truncated_body(http_server) -> None:  # noqa: F811
    """A body whose end was lost must not read as complete."""
    tail = gzip.compress(b"   ")[:-4]
    url, _ = http_server(_gzip_chunks([gzip.compress(BODY) + tail]))
    with pytest.raises(PromAPIError, match="truncated gzip body"):
        client(url).instant("up")


@pytest.mark.parametrize(
    "tail",
    [b"\0" * 8, b"\n", b"trailing garbage"],
    ids=["zero-padding", "newline", "garbage"],
)
def test_bytes_after_the_last_member_that_start_none_are_ignored(
    http_server,  # noqa: F811
    tail: bytes,
) -> None:
    """As ``gzip -d`` and Python's gzip module ignore them."""
    for chunks in ([gzip.compress(BODY) + tail], [gzip.compress(BODY), tail]):
        url, _ = http_server(_gzip_chunks(chunks))
        assert client(url).instant("up")


# -- 3. memory while a large answer is parsed -------------------------------------------


def _matrix(n_series: int, n_points: int) -> dict:
    return {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"__name__": "gpu_eta_training_epoch", "run_id": f"run-{i}"},
                "values": [[1700000000.5 + 15 * k, str(k // 10)] for k in range(n_points)],
            }
            for i in range(n_series)
        ],
    }


def test_a_consumed_answer_is_freed_while_its_series_are_built() -> None:
    """The decoded JSON and the series built from it were both held whole: for a
    62 MiB answer, 472 + 272 MiB at the peak. Consumed (as the client does), each
    series' JSON is freed once read, and parsing adds next to nothing to the peak."""
    text = json.dumps({"status": "success", "data": _matrix(200, 240)})
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        data = promparse.decode_response(promparse.decode_text(text.encode()), 200)
        tree = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        series = promparse.parse_matrix(data, "q", consume=True)
        added = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert len(series) == 200 and series[-1].points[-1] == (1700000000.5 + 15 * 239, 23.0)
    assert data["result"] == [None] * 200
    assert added < 0.1 * tree, (added, tree)


def test_an_answer_is_not_consumed_unless_asked() -> None:
    data = _matrix(2, 3)
    vector = json.loads(BODY)["data"]
    assert len(promparse.parse_matrix(data, "q")) == 2
    assert len(promparse.parse_vector(vector, "q")) == 2
    assert data == _matrix(2, 3) and vector == json.loads(BODY)["data"]
    assert len(promparse.parse_vector(vector, "q", consume=True)) == 2
    assert vector["result"] == [None, None]


def test_decode_response_takes_the_text_as_well_as_the_bytes() -> None:
    """The client hands over text (its bytes freed first); both read alike."""
    raw = b"\xef\xbb\xbf" + BODY.replace(b'"a"', b'"a\xff"')  # a BOM, a byte not UTF-8
    text = promparse.decode_text(raw)
    assert promparse.decode_response(text, 200) == promparse.decode_response(raw, 200)
    with pytest.raises(PromAPIError, match="not JSON \\(starts with '<html>\ufffd'\\)"):
        promparse.decode_response(promparse.decode_text(b"<html>\xff"), 200)


def _answer(data: dict) -> bytes:
    return json.dumps({"status": "success", "data": data}).encode()


def test_a_series_with_more_points_than_the_range_asks_is_skipped(http_server) -> None:  # noqa: F811
    """A range query from t to t + 60 s every 15 s has at most 5 points a series; a
    series of more is no answer to it (and one of a million points held its JSON and
    its tuples at once: 29 times the answer's size). Skipped and counted, not parsed;
    the other series are kept."""
    data = _matrix(2, 5)
    data["result"][1]["values"] = [[1700000000 + k, "1"] for k in range(50)]
    url, _ = http_server(lambda r: reply(r, 200, _answer(data)))
    prom = client(url)
    series = prom.range("up", 1700000000.0, 1700000060.0, 15.0)
    assert [s.labels["run_id"] for s in series] == ["run-0"]
    assert prom.stats.skipped_series == 1


def test_an_answer_of_more_json_values_than_the_cap_holds_is_refused_undecoded(
    http_server,  # noqa: F811
) -> None:
    """``[{},{},…]`` decodes to 72 bytes of Python per 3 bytes of answer (22 times its
    size; under the 64 MiB cap, 1.4 GiB in a pod of 1 GiB): an answer with more objects,
    arrays and strings than one per 8 bytes of the cap is refused as too large, as one
    beyond the cap is, before it is decoded."""
    cap = 1_000_000
    body = (
        b'{"status":"success","data":{"resultType":"vector","result":['
        + b",".join([b"{}"] * 200_000)
        + b"]}}"
    )
    url, _ = http_server(lambda r: reply(r, 200, body))
    tracemalloc.start()
    try:
        with pytest.raises(PromAPIError, match="too many JSON values"):
            client(url, max_response_bytes=cap).instant("up")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5 * len(body), peak  # decoded: about 22 times
    # the densest real answer (Prometheus' compact JSON, integer times, one-digit
    # values: 8.5 bytes a value) at exactly the cap is read
    dense = {
        "resultType": "matrix",
        "result": [
            {
                "metric": {"run_id": f"r{i}"},
                "values": [[1700000000 + 15 * k, "1"] for k in range(240)],
            }
            for i in range(30)
        ],
    }
    real = json.dumps({"status": "success", "data": dense}, separators=(",", ":")).encode()
    url, _ = http_server(lambda r: reply(r, 200, real))
    got = client(url, max_response_bytes=len(real)).range("q", 0.0, 239 * 15.0, 15.0)
    assert len(got) == 30
