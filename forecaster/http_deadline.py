"""The forecaster's HTTP transport pieces: one deadline for a whole request, and gzip.

``PromClient`` (``promapi``) sets ``REQUEST_DEADLINE`` around each request; a session
with ``DeadlineAdapter`` mounted then reads the status line, the headers and the body
through ``DeadlineReader``, each socket read given at most what is left of it, so no
server pacing its bytes can hold a query past the deadline; and looks the server's name
up within it (``resolve``), which no socket timeout bounds, and through a SOCKS proxy
the proxy's name too (``DeadlineSocksLookup``). ``Gunzip`` undoes a gzip body of any
number of members within a size cap. Apart from ``promapi`` because these
are requests/urllib3/http.client plumbing, not the Prometheus API: the client reads as
what it asks and how it retries, this as how bytes are read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import http.client
import io
import ipaddress
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import requests.adapters
import urllib3.connection
import urllib3.exceptions
import urllib3.util.connection


class Deadline:
    """The monotonic time by which the current part of a request must be read
    (``at``); its owner moves it on (headers, then body), and every read of the
    response sees the move: the reader holds this object, not a copy of the time."""

    def __init__(self, at: float) -> None:
        self.at = at


# The deadline of the request being sent; set by ``PromClient._fetch`` around the
# request, picked up when its response is created.
REQUEST_DEADLINE: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "promapi_deadline", default=None
)
# A read timeout this close to the deadline is the deadline (poll rounds to 1 ms).
DEADLINE_SLACK_SECONDS = 0.01


def deadline_passed(deadline: float) -> bool:
    """Whether a failed read was the deadline's doing (then the error names it)."""
    return time.monotonic() >= deadline - DEADLINE_SLACK_SECONDS


class DeadlineReader(io.RawIOBase):
    """A socket's reads, each waiting at most what is left until ``deadline``.

    The socket's own timeout (the per-read ``timeout_seconds`` urllib3 set) is used
    while it ends before the deadline; nearer to it, the timeout is cut for the one
    read and put back after, because a kept-alive connection is reused with it.
    """

    def __init__(self, sock: Any, deadline: Deadline) -> None:
        super().__init__()
        self._sock = sock
        self._raw = sock.makefile("rb", buffering=0)
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._raw.fileno()

    def readinto(self, buffer: Any) -> int | None:
        left = self._deadline.at - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        timeout = self._sock.gettimeout()
        if timeout is not None and timeout <= left:
            return self._raw.readinto(buffer)
        self._sock.settimeout(left)
        try:
            return self._raw.readinto(buffer)
        finally:
            with contextlib.suppress(OSError):
                self._sock.settimeout(timeout)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class DeadlineHTTPResponse(http.client.HTTPResponse):
    """An http.client response whose every socket read ends by the request's deadline.

    http.client reads the status line and each header with ``readline`` on a
    buffered file over the socket: every network read may wait the socket's
    timeout, and a line takes as many reads as the server likes. requests' and
    urllib3's timeouts (``Timeout(total=)`` included) are set on the socket before
    the response is read, so they bound each read, not the headers: a header sent
    a byte every 0.8 × timeout held the query for as long as the server went on,
    and the body's deadline only started after it. The file is swapped for one
    whose reads are cut to what is left of the deadline (``REQUEST_DEADLINE``, captured
    here; its owner moves it on for the body). No deadline set (the
    session used outside ``PromClient._fetch``): the plain http.client file.
    """

    def __init__(self, sock: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        deadline = REQUEST_DEADLINE.get()
        if deadline is not None:
            plain = self.fp
            self.fp = io.BufferedReader(DeadlineReader(sock, deadline))
            plain.close()  # after: the socket's file count must not drop to 0 between


MAX_LOOKUPS = 4
"""Name lookups in flight at once (``resolve``): a resolver that never answers holds
at most this many threads, whatever the number of queries asking meanwhile."""
_LOOKUPS = threading.BoundedSemaphore(MAX_LOOKUPS)


def resolve(
    host: str, port: int, deadline: float, family: int = socket.AF_UNSPEC, flags: int = 0
) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo(host, port, family, flags=flags)`` for a TCP connection,
    given up at ``deadline`` (monotonic) with ``socket.gaierror(EAI_AGAIN)`` naming the
    wait.

    Why: a lookup is a blocking libc call that no socket timeout reaches. Where the
    cluster's DNS is slow or down, glibc waits 5 s a try, two tries a server, for each
    name its search list makes (a Kubernetes pod's ``ndots:5`` tries the cluster's
    search domains first), so a query given a deadline waited the resolver's. The lookup
    runs on a daemon thread (one that never answers cannot keep the process from
    exiting) and at most ``MAX_LOOKUPS`` run at once; the caller waits what is left.
    An address literal needs no lookup and is answered at once (``flags`` unused: it
    is the address asked for).
    """
    with contextlib.suppress(ValueError):
        ipaddress.ip_address(host.strip("[]"))
        return socket.getaddrinfo(host.strip("[]"), port, family, socket.SOCK_STREAM)
    late = socket.gaierror(
        socket.EAI_AGAIN, f"DNS lookup of {host} not answered by the request deadline"
    )
    left = deadline - time.monotonic()
    if left <= 0 or not _LOOKUPS.acquire(timeout=left):
        raise late  # (a lookup started now would only hold a slot for nobody)
    answer: list[Any] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            answer.append(socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, flags))
        except BaseException as err:  # handed to the waiting caller, if still waiting
            answer.append(err)
        finally:
            _LOOKUPS.release()
            done.set()

    try:
        threading.Thread(target=look_up, name=f"dns-lookup {host}", daemon=True).start()
    except BaseException:  # no thread (the process at its limit): the slot is free again
        _LOOKUPS.release()
        raise
    if not done.wait(max(deadline - time.monotonic(), 0.0)):
        raise late
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def _lookup_failed(conn: Any, host: str, err: socket.gaierror) -> Exception:
    """What urllib3 raises for a failed lookup of ``host`` by ``conn``."""
    if hasattr(urllib3.exceptions, "NameResolutionError"):  # urllib3 ≥ 2
        return urllib3.exceptions.NameResolutionError(host, conn, err)
    return urllib3.exceptions.NewConnectionError(  # what urllib3 1.26 raises
        conn, f"Failed to establish a new connection: {err}"
    )


class _DialWithin:
    """``_dial_within`` for the two lookup mixins below: ``super()._new_conn()`` is the
    connection class's own dial, one attempt."""

    def _dial_within(self, deadline: float, timeout: Any) -> socket.socket:
        """One connection attempt, its connect timeout cut to what is left until
        ``deadline``: each address of a name is given the connect timeout, so a name
        with several unreachable addresses (a headless Service's pods, IPv6 and IPv4)
        would otherwise hold a query that many timeouts. Through a SOCKS proxy this cut
        timeout is also the socket's during PySocks' handshake: each of its reads waits
        at most that, the handshake as a whole is not cut to the deadline
        (``DeadlineSocksLookup``)."""
        left = deadline - time.monotonic()
        if left <= 0:
            raise urllib3.exceptions.ConnectTimeoutError(
                self,
                f"Connection to {self.host} not made by the request deadline",  # type: ignore[attr-defined]
            )
        number = isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
        self.timeout = min(timeout, left) if number else left
        return super()._new_conn()  # type: ignore[misc]

    def _dial_each(
        self, addresses: Sequence[str], aim: Callable[[str], None], deadline: float, timeout: Any
    ) -> socket.socket:
        """Dial ``addresses`` in turn (``aim`` points the next attempt at one), as
        ``create_connection`` and PySocks do: the first that connects is kept, each
        attempt within what is left of ``deadline``; the last one's error is the
        attempt's (``getaddrinfo`` answers one address at least, or raises)."""
        for address in addresses[:-1]:
            aim(address)
            with contextlib.suppress(
                urllib3.exceptions.NewConnectionError, urllib3.exceptions.ConnectTimeoutError
            ):
                return self._dial_within(deadline, timeout)
        aim(addresses[-1])
        return self._dial_within(deadline, timeout)


class DeadlineLookup(_DialWithin):
    """A urllib3 connection mixin looking its host up within ``REQUEST_DEADLINE``.

    The name is resolved by ``resolve``, then each address is connected to in turn as
    ``create_connection`` would (its own lookup of an address literal is immediate),
    the first that connects kept, each attempt within what is left of the deadline
    (``_dial_within``). TLS still checks the certificate against the name (``host``);
    only the address dialled (``_dns_host``) changes. No deadline set: the
    connection's own ``_new_conn``.
    """

    def _new_conn(self) -> socket.socket:
        deadline = REQUEST_DEADLINE.get()
        if deadline is None:
            return super()._new_conn()  # type: ignore[misc]
        name = self._dns_host  # type: ignore[attr-defined]
        try:
            name.encode("idna")  # as create_connection checks it: an empty or long label
        except UnicodeError:
            raise urllib3.exceptions.LocationParseError(
                f"'{name}', label empty or too long"
            ) from None
        try:
            found = resolve(
                name,
                self.port,  # type: ignore[attr-defined]
                deadline.at,
                urllib3.util.connection.allowed_gai_family(),  # IPv4 only without IPv6
            )
        except socket.gaierror as err:
            raise _lookup_failed(self, self.host, err) from err  # type: ignore[attr-defined]
        timeout = self.timeout  # type: ignore[has-type]
        try:
            return self._dial_each(
                [a[4][0] for a in found],
                lambda address: setattr(self, "_dns_host", address),
                deadline.at,
                timeout,
            )
        finally:
            self._dns_host = name
            self.timeout = timeout


# PySocks' default port, for the proxy's lookup when its URL names none
SOCKS_DEFAULT_PORT = 1080


class DeadlineSocksLookup(_DialWithin):
    """A urllib3 SOCKS connection mixin: the names PySocks would look up with a plain
    ``getaddrinfo`` (no socket timeout reaches it) are looked up within
    ``REQUEST_DEADLINE`` by ``resolve`` instead, and PySocks is handed addresses,
    whose lookups are immediate.

    Those names: the proxy's, always; the server's where the proxy does not resolve it
    (``socks5://``, ``socks4://``; with ``socks5h://`` and ``socks4a://`` the name goes
    to the proxy, which looks it up on its side: nothing is looked up here). The
    proxy's addresses are dialled in turn, as PySocks would, each attempt within
    what is left of the deadline; of the server's, the first, the one PySocks would
    take, asked for as PySocks asks: IPv4 only for ``socks4://`` (the protocol carries
    no other), of the families this host has an address of (``AI_ADDRCONFIG``) for
    ``socks5://``. TLS still checks the certificate against the server's name. No
    deadline set: the connection's own ``_new_conn``.

    Not bounded by the deadline: the SOCKS handshake. PySocks reads the proxy's
    replies on the socket it made, with the connect timeout ``_dial_within`` cut
    (at most what was left of the deadline when the dial began) as each read's
    timeout, and a reply may come in as many reads as it has bytes (SOCKS4's 8,
    SOCKS5's 12 or more). A proxy dripping its replies a byte at a time within the
    timeout holds the attempt up to one timeout per byte; the response's reads that
    follow are held to the deadline again and fail at once. Cutting each handshake
    read would mean building PySocks' socket here instead of in urllib3.
    """

    def _new_conn(self) -> socket.socket:
        deadline = REQUEST_DEADLINE.get()
        if deadline is None:
            return super()._new_conn()  # type: ignore[misc]
        options = self._socks_options  # type: ignore[has-type]
        proxy = str(options["proxy_host"])
        name = self._dns_host  # type: ignore[has-type]
        try:
            proxies = resolve(proxy, int(options["proxy_port"] or SOCKS_DEFAULT_PORT), deadline.at)
        except socket.gaierror as err:
            raise _lookup_failed(self, proxy, err) from err
        if not options["rdns"]:
            # as PySocks would look it up: SOCKS4 carries an IPv4 address only
            # (gethostbyname); SOCKS5 either, of the families this host has addresses
            # of (AI_ADDRCONFIG: an IPv4-only pod sends no IPv6 address)
            socks4 = options["socks_version"] == sys.modules["socks"].SOCKS4
            try:
                found = resolve(
                    name,
                    self.port,  # type: ignore[attr-defined]
                    deadline.at,
                    socket.AF_INET if socks4 else socket.AF_UNSPEC,
                    0 if socks4 else socket.AI_ADDRCONFIG,
                )
            except socket.gaierror as err:
                raise _lookup_failed(self, self.host, err) from err  # type: ignore[attr-defined]
            self._dns_host = found[0][4][0]
        timeout = self.timeout  # type: ignore[has-type]
        try:
            return self._dial_each(
                [a[4][0] for a in proxies],
                lambda address: setattr(self, "_socks_options", {**options, "proxy_host": address}),
                deadline.at,
                timeout,
            )
        finally:
            self._socks_options = options
            self._dns_host = name
            self.timeout = timeout


@functools.cache
def deadline_connection(cls: type) -> type:
    """``cls`` (a urllib3 connection class) answering with ``DeadlineHTTPResponse``,
    and looking names up within the deadline: its host (``DeadlineLookup``) where it
    dials as ``HTTPConnection`` does, the proxy's and maybe its host's
    (``DeadlineSocksLookup``) for urllib3's SOCKS connections. Any other dial is left
    as it is."""
    if cls.response_class is DeadlineHTTPResponse:  # type: ignore[attr-defined]
        return cls
    own_dial = cls._new_conn is urllib3.connection.HTTPConnection._new_conn  # type: ignore[attr-defined]
    # imported only by a SOCKS pool (it needs PySocks): loaded if cls can be one
    socks = sys.modules.get("urllib3.contrib.socks")
    via_socks = socks is not None and issubclass(cls, socks.SOCKSConnection)
    if own_dial:
        bases: tuple[type, ...] = (DeadlineLookup, cls)
    elif via_socks and cls._new_conn is socks.SOCKSConnection._new_conn:
        bases = (DeadlineSocksLookup, cls)
    else:
        bases = (cls,)
    return type(cls.__name__, bases, {"response_class": DeadlineHTTPResponse})


class DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' adapter whose connections read responses with ``DeadlineHTTPResponse``.

    The connection class is swapped on each pool it hands out, direct or through a
    proxy (a SOCKS pool's own class is derived from), before the pool opens a
    connection with it: connections are made lazily, per request.
    """

    def get_connection_with_tls_context(self, *args: Any, **kwargs: Any) -> Any:
        pool = super().get_connection_with_tls_context(*args, **kwargs)
        pool.ConnectionCls = deadline_connection(pool.ConnectionCls)
        return pool

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:  # what requests < 2.32 calls
        pool = super().get_connection(*args, **kwargs)
        pool.ConnectionCls = deadline_connection(pool.ConnectionCls)
        return pool


class Gunzip:
    """A gzip body of one or more members (RFC 1952, 2.2), undone within a size cap.

    ``zlib``'s decompressor stops at the end of the first member and keeps what
    follows as ``unused_data``: a body sent as several members (a server or proxy
    compressing each flush on its own) was cut at the first, a truncated answer or,
    worse, a valid prefix of one. Each member is decompressed in turn. Bytes after a
    member that do not start another (gzip's magic ``1f 8b``) are ignored, as
    ``gzip -d`` and Python's ``gzip`` module ignore them: zero padding, a stray
    newline a proxy appended.
    """

    def __init__(self) -> None:
        self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._trailing = False  # past the last member: what follows is ignored

    @property
    def complete(self) -> bool:
        """Whether the last member read so far has ended (checksum and length checked)."""
        return self._member.eof

    def feed(self, data: bytes, max_length: int) -> bytes:
        """What ``data`` decompresses to, at most ``max_length`` bytes (> 0)."""
        out: list[bytes] = []
        made = 0
        while data and not self._trailing:
            if self._member.eof:
                if not (data.startswith(b"\x1f\x8b") or data == b"\x1f"):
                    self._trailing = True  # not another member (b"\x1f": one split)
                    break
                self._member = zlib.decompressobj(16 + zlib.MAX_WBITS)
            piece = self._member.decompress(data, max_length - made)
            out.append(piece)
            made += len(piece)
            if made >= max_length or not self._member.eof:
                break  # at the cap (the caller refuses the body) or all of data taken in
            data = self._member.unused_data
        return b"".join(out)
