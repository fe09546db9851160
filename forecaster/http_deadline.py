"""The forecaster's HTTP transport pieces: one deadline for a whole request, and gzip.

``PromClient`` (``promapi``) sets ``REQUEST_DEADLINE`` around each request; a session
with ``DeadlineAdapter`` mounted then reads the status line, the headers and the body
through ``DeadlineReader``, each socket read given at most what is left of it, so no
server pacing its bytes can hold a query past the deadline. ``Gunzip`` undoes a gzip
body of any number of members within a size cap. Apart from ``promapi`` because these
are requests/urllib3/http.client plumbing, not the Prometheus API: the client reads as
what it asks and how it retries, this as how bytes are read.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import http.client
import io
import time
import zlib
from typing import Any

import requests.adapters


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


@functools.cache
def deadline_connection(cls: type) -> type:
    """``cls`` (a urllib3 connection class) answering with ``DeadlineHTTPResponse``."""
    if cls.response_class is DeadlineHTTPResponse:  # type: ignore[attr-defined]
        return cls
    return type(cls.__name__, (cls,), {"response_class": DeadlineHTTPResponse})


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
