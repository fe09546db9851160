"""gpu_eta.forecaster.promapi through a SOCKS proxy: the names PySocks would look up
(the proxy's; the server's with ``socks5://`` and ``socks4://``) are looked up within
the request deadline, as the server's name is without a proxy, for the address
families PySocks would ask for.

Real parts: a loopback Prometheus-shaped HTTP server (``http_server``), a SOCKS5 proxy
on loopback (``Socks5Proxy``, the protocol's CONNECT, relaying bytes both ways), PySocks
and urllib3's SOCKS connections. Only a resolver that never answers is stood in for
(``_hung_lookups``: no real one can be hung here without changing the machine's), and
a dual-stack name (``_dual_stack``: which addresses a real name has depends on the
machine's resolver and interfaces). ``Socks4Proxy`` is the SOCKS4/4a counterpart.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from gpu_eta.forecaster.promapi import PromAPIError
from tests.forecaster.test_promapi import VECTOR, client, http_server, reply  # noqa: F401
from tests.forecaster.test_promapi_limits import BODY, _hung_lookups

pytest.importorskip("socks", reason="PySocks (urllib3's SOCKS support) is not installed")


def _exactly(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


class Socks5Proxy:
    """A SOCKS5 proxy on loopback: no authentication, CONNECT only, relaying bytes.

    ``asked`` lists each CONNECT's destination as sent, ``("name", host)`` or
    ``("address", ip)``; names are resolved on the proxy's side from ``names`` (as a
    proxy in another network would, with its own DNS), so a test's hung local lookup
    does not reach them.
    """

    def __init__(self, names: dict[str, str]) -> None:
        self.names = names
        self.asked: list[tuple[str, str]] = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError, ConnectionError):
            _version, methods = _exactly(conn, 2)
            _exactly(conn, methods)
            conn.sendall(b"\x05\x00")  # no authentication
            _version, _command, _reserved, kind = _exactly(conn, 4)
            if kind == 1:
                asked = ("address", socket.inet_ntoa(_exactly(conn, 4)))
            elif kind == 3:
                asked = ("name", _exactly(conn, _exactly(conn, 1)[0]).decode())
            else:
                asked = ("address", socket.inet_ntop(socket.AF_INET6, _exactly(conn, 16)))
            (port,) = struct.unpack(">H", _exactly(conn, 2))
            self.asked.append(asked)
            upstream = socket.create_connection((self.names.get(asked[1], asked[1]), port), 5)
            with upstream:
                conn.sendall(b"\x05\x00\x00\x01" + socket.inet_aton("127.0.0.1") + b"\x00\x00")
                back = threading.Thread(target=_relay, args=(upstream, conn), daemon=True)
                back.start()
                _relay(conn, upstream)
                back.join(5)

    def close(self) -> None:
        self.sock.close()


class Socks4Proxy(Socks5Proxy):
    """A SOCKS4 proxy on loopback (SOCKS4a's names too): CONNECT only, relaying bytes.

    ``asked`` as ``Socks5Proxy``'s: SOCKS4 carries an IPv4 address, SOCKS4a a name
    after the address 0.0.0.x."""

    def _handle(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError, ConnectionError):
            _version, _command, port = struct.unpack(">BBH", _exactly(conn, 4))
            address = socket.inet_ntoa(_exactly(conn, 4))
            while _exactly(conn, 1) != b"\0":  # the user id
                pass
            asked = ("address", address)
            if address.startswith("0.0.0.") and address != "0.0.0.0":
                name = b""
                while (byte := _exactly(conn, 1)) != b"\0":
                    name += byte
                asked = ("name", name.decode())
            self.asked.append(asked)
            upstream = socket.create_connection((self.names.get(asked[1], asked[1]), port), 5)
            with upstream:
                conn.sendall(b"\x00\x5a" + b"\0" * 6)
                back = threading.Thread(target=_relay, args=(upstream, conn), daemon=True)
                back.start()
                _relay(conn, upstream)
                back.join(5)


def _relay(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while chunk := src.recv(65536):
            dst.sendall(chunk)
        dst.shutdown(socket.SHUT_WR)


@pytest.fixture
def proxy() -> Iterator[Socks5Proxy]:
    p = Socks5Proxy({"prometheus.example": "127.0.0.1"})
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def proxy4() -> Iterator[Socks4Proxy]:
    p = Socks4Proxy({"prometheus.example": "127.0.0.1"})
    try:
        yield p
    finally:
        p.close()


# an address no proxy here can reach: a server's address picked from IPv6 fails
UNREACHABLE_V6 = "fd00::5"


def _dual_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """``socket.getaddrinfo`` answering for ``dual.example`` as for a dual-stack
    Service on a host with no IPv6 address of its own (an IPv4-only pod): an IPv6
    address sorted first, then 127.0.0.1. As glibc's, ``AF_INET`` asks for IPv4 only,
    and ``AI_ADDRCONFIG`` leaves out IPv6 (this host having none, whatever the
    machine running the test has)."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):  # type: ignore[no-untyped-def]
        if host != "dual.example":
            return real(host, port, family, type, proto, flags)
        v4 = real("127.0.0.1", port, socket.AF_INET, type, proto)
        if family == socket.AF_INET or flags & socket.AI_ADDRCONFIG:
            return v4
        return [(socket.AF_INET6, socket.SOCK_STREAM, 6, "", (UNREACHABLE_V6, port, 0, 0)), *v4]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set after the test: hung lookups answer, and their threads are waited for (a
    slot of ``MAX_LOOKUPS`` held past the test would slow the next one's lookups)."""
    event = threading.Event()
    try:
        yield event
    finally:
        event.set()
        deadline = time.monotonic() + 5
        while any(t.name.startswith("dns-lookup") for t in threading.enumerate()):
            assert time.monotonic() < deadline
            time.sleep(0.01)


def _fails_at_the_deadline(c) -> str:  # type: ignore[no-untyped-def]
    """Query through ``c`` (timeout 0.3 s): it fails at 2 × the timeout, not before and
    not much after; the error's text."""
    started = time.monotonic()
    with pytest.raises(PromAPIError) as info:
        c.instant("up")
    elapsed = time.monotonic() - started
    assert 0.55 < elapsed < 2.4, elapsed  # not the 30 s a hung lookup waits
    return str(info.value)


def _through(c, proxy_url: str):  # type: ignore[no-untyped-def]
    c._session.proxies = {"http": proxy_url, "https": proxy_url}
    return c


@pytest.mark.parametrize(
    ("scheme", "server", "asked"),
    [
        # socks5h/socks4a: the proxy resolves the server's name (one the forecaster
        # cannot)
        ("socks5h", "prometheus.example", ("name", "prometheus.example")),
        ("socks4a", "prometheus.example", ("name", "prometheus.example")),
        # socks5: the name is looked up here and the proxy handed an address of the
        # families this host has (AI_ADDRCONFIG, as PySocks asks): the IPv4 one
        ("socks5", "dual.example", ("address", "127.0.0.1")),
        # socks4: the protocol carries IPv4 only, so only IPv4 is asked for (as
        # PySocks' gethostbyname), the name's first address being IPv6 or not
        ("socks4", "dual.example", ("address", "127.0.0.1")),
    ],
)
def test_a_query_through_a_socks_proxy_named_by_a_name(
    http_server,  # noqa: F811
    proxy: Socks5Proxy,
    proxy4: Socks4Proxy,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
    server: str,
    asked: tuple[str, str],
) -> None:
    url, seen = http_server(lambda r: reply(r, 200, BODY))
    _dual_stack(monkeypatch)
    via = proxy4 if scheme.startswith("socks4") else proxy
    c = _through(client(url.replace("127.0.0.1", server)), f"{scheme}://localhost:{via.port}")
    assert [s.labels["run_id"] for s in c.instant("up")] == ["a", "b"]
    assert via.asked == [asked] and len(seen) == 1


def test_a_proxy_name_whose_lookup_never_answers_fails_at_the_deadline(
    http_server,  # noqa: F811
    proxy: Socks5Proxy,
    release: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """PySocks looks the proxy's name up with a plain ``getaddrinfo``: with the
    resolver hung, the query fails at 2 × the 0.3 s timeout naming the lookup, as a
    direct one does, instead of waiting for the resolver."""
    url, seen = http_server(lambda r: reply(r, 200, BODY))
    asked = _hung_lookups(monkeypatch, release)
    c = _through(client(url, timeout_seconds=0.3), f"socks5h://localhost:{proxy.port}")
    assert _fails_at_the_deadline(c) == (
        f"{url}: query 'up' failed after 1 attempt: cannot connect (DNS lookup of "
        "localhost not answered by the request deadline)"
    )
    assert asked == ["localhost"] and not proxy.asked and not seen


def test_with_socks5_the_servers_name_is_looked_up_within_the_deadline(
    http_server,  # noqa: F811
    proxy: Socks5Proxy,
    release: threading.Event,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``socks5://`` (not ``socks5h``): the server's name is looked up on this side,
    by PySocks with a plain ``getaddrinfo`` unless done here first, within the
    deadline."""
    url, seen = http_server(lambda r: reply(r, 200, BODY))
    named = url.replace("127.0.0.1", "localhost")
    asked = _hung_lookups(monkeypatch, release)
    c = _through(client(named, timeout_seconds=0.3), f"socks5://127.0.0.1:{proxy.port}")
    assert "cannot connect (DNS lookup of localhost not answered by the request deadline)" in (
        _fails_at_the_deadline(c)
    )
    assert asked == ["localhost"] and not proxy.asked and not seen


def test_each_address_of_the_proxys_name_is_tried_in_turn(
    http_server,  # noqa: F811
    proxy: Socks5Proxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The proxy's name with two addresses, the first refusing (nothing listens on
    127.0.0.2 at the proxy's port): the next is dialled, as PySocks itself would."""
    url, _ = http_server(lambda r: reply(r, 200, BODY))
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # type: ignore[no-untyped-def]
        if host == "socks.example":
            return [
                *real("127.0.0.2", port, *args, **kwargs),
                *real("127.0.0.1", port, *args, **kwargs),
            ]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    c = _through(client(url), f"socks5h://socks.example:{proxy.port}")
    assert [s.labels["run_id"] for s in c.instant("up")] == ["a", "b"]
    assert proxy.asked == [("address", "127.0.0.1")]
