"""Network facts of the machine the tests run on, a raw progress POST, a request
dribbled a byte at a time, and a loopback HTTP server for a handler class."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def has_ipv6_loopback() -> bool:
    """Whether ``::1`` can be bound here. ``socket.has_dualstack_ipv6()`` is not
    enough: it stays True where IPv6 is disabled by sysctl (Docker's default)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


def dead_port() -> int:
    """A port on 127.0.0.1 nothing listens on, for a test that needs one to stay dead.

    Below the range the kernel hands out for port 0 (``ip_local_port_range``; what
    ``launch.prometheus.free_port`` picks from): another test worker's server, started
    on a ``free_port``, cannot take it while the test relies on it being dead. Checked
    free by binding it (a service on the machine may hold some of those)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), max(1025, low))
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port found below {low}")


def post_progress(host: str, port: int, body: bytes, source: str) -> bytes:
    """One raw ``POST /progress`` of ``body`` from ``source`` (the sender's address:
    the exporter knows a pod by it) to ``host:port``; the whole answer, bytes as sent."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.bind((source, 0))
        conn.connect((host, port))
        conn.sendall(
            b"POST /progress HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


def read_answer(sock: socket.socket) -> bytes:
    """One HTTP answer read whole (by its Content-Length), or what came before the
    server closed or reset the connection."""
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(body) >= length:
                return data


def dribble_until_cut(
    host: str, port: int, for_seconds: float, every_seconds: float, source: str = "127.0.0.1"
) -> float | None:
    """Send a request that never ends (``GET /metrics`` then one header that grows by a
    byte every ``every_seconds``) from ``source`` to ``host:port`` for at most
    ``for_seconds``: how long after connecting the server closed or reset the
    connection, else None (it still read on). What a client holding a server's threads
    with half-sent requests does; the bytes keep any per-read timeout from expiring."""
    request = b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 100_000
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.bind((source, 0))
        conn.connect((host, port))
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < for_seconds:
            try:
                conn.sendall(request[sent : sent + 1])
                sent += 1
                conn.settimeout(every_seconds)
                if conn.recv(4096) == b"":  # closed (an answer would be a refusal too)
                    return time.monotonic() - started
            except TimeoutError:
                continue  # nothing from the server: the next byte
            except OSError:  # reset
                return time.monotonic() - started
            else:
                return time.monotonic() - started  # answered: the server gave up on it
    return None


@contextlib.contextmanager
def loopback_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 (a thread per request) while the block runs: its
    base URL. Shut down and closed after, whatever the block raised."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
