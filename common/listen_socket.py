"""The one way every listener binds its TCP socket (the metrics servers of every
program, the exporter's progress port). Apart from ``listen`` because that parser is
pure and the config modules import it; this module does I/O."""

from __future__ import annotations

import errno
import logging
import socket

log = logging.getLogger(__name__)


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
