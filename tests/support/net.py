"""Network facts of the machine the tests run on."""

from __future__ import annotations

import socket


def has_ipv6_loopback() -> bool:
    """Whether ``::1`` can be bound here. ``socket.has_dualstack_ipv6()`` is not
    enough: it stays True where IPv6 is disabled by sysctl (Docker's default)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False
