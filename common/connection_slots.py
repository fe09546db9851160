"""Open connections of a server, counted in all and per client address, so that a
connection over either cap is refused as it is accepted.

Why per address as well as in all: a cap in all alone lets one client take every
slot (connections held open with half a request each), and then nobody else gets an
answer; with a share per address, one client cannot, while clients from other
addresses (several Prometheus replicas, the kubelet's probes) still get in. Used by
the exporter's progress endpoint and by the metrics server of every program.
"""

from __future__ import annotations

import threading


class ConnectionSlots:
    """Counts of open connections; ``admit`` takes a slot, ``release`` gives it back.

    The caps are given to each ``admit`` (read where the server keeps them, so a
    change of them applies to the next connection). Safe to call from any thread: the
    threaded metrics server admits in its accept loop and releases in each
    connection's thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_address: dict[str, int] = {}
        self._total = 0

    def admit(self, address: str, most: int, most_per_address: int) -> bool:
        """Take a slot for a connection from ``address``: False (nothing taken) when
        ``most`` are open in all or ``most_per_address`` from that address."""
        with self._lock:
            if self._total >= most or self._by_address.get(address, 0) >= most_per_address:
                return False
            self._total += 1
            self._by_address[address] = self._by_address.get(address, 0) + 1
            return True

    def release(self, address: str) -> None:
        """Give back a slot ``admit`` gave for ``address``."""
        with self._lock:
            self._total -= 1
            left = self._by_address.get(address, 1) - 1
            if left > 0:
                self._by_address[address] = left
            else:
                self._by_address.pop(address, None)

    def by_address(self) -> dict[str, int]:
        """Open connections per address (addresses with none left out): a copy."""
        with self._lock:
            return dict(self._by_address)
