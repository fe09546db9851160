"""Listen addresses (``HOST:PORT``, ``:PORT``, ``[v6]:PORT``): the one parser every
program's ``--web.listen-address`` (and the exporter's progress listener) uses (pure),
and the one way each of them binds (``listening_socket``)."""

from __future__ import annotations

import errno
import logging
import re
import socket
from dataclasses import dataclass

log = logging.getLogger(__name__)

_V6 = re.compile(r"^\[([0-9a-fA-F:.]+)\]:(\d{1,5})$")
_HOST = re.compile(r"^([A-Za-z0-9.\-]*):(\d{1,5})$")


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """``HOST:PORT``; an empty host (``:9842``) means every interface."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_listen_address(value: object) -> ListenAddress:
    """``HOST:PORT``, ``:PORT`` or ``[v6]:PORT`` with a port in 0..65535;
    ``ValueError`` saying what was expected otherwise."""
    if not isinstance(value, str):
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    text = value.strip()
    match = _V6.match(text) or _HOST.match(text)
    if match is None:
        raise ValueError(f"expected HOST:PORT (e.g. :9842 or 127.0.0.1:9842), got {value!r}")
    port = int(match.group(2))
    if port > 65535:
        raise ValueError(f"port {port} out of range")
    return ListenAddress(match.group(1), port)


def listening_socket(
    host: str, port: int, backlog: int = 256, name: str = "listener"
) -> socket.socket:
    """A bound, listening TCP socket for ``host:port``.

    An empty host or ``::`` means every address: one dual-stack IPv6 socket where
    the node has IPv6 (IPv4 peers arrive as ``::ffff:a.b.c.d``), else IPv4 only. Why:
    an IPv4-only default refused every client of an IPv6 or dual-stack cluster (a pod
    reporting progress, a Prometheus scraping). A node without IPv6 (module not loaded,
    ``ipv6.disable=1``) falls back to IPv4 with one info line naming ``name``; a port
    in use is an error either way (``OSError``, the caller's one-line start-up error).
    """
    if host in ("", "::") and socket.has_dualstack_ipv6():
        try:
            return socket.create_server(
                (host, port), family=socket.AF_INET6, backlog=backlog, dualstack_ipv6=True
            )
        except OSError as err:
            if err.errno == errno.EADDRINUSE or host == "::":
                raise
            log.info("%s: cannot listen on IPv6 (%s); listening on IPv4 only", name, err)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
