"""SIGTERM and SIGINT as a stop a service's main loop polls. Pure of I/O but the handlers.

Why not ``threading.Event.set()`` in the handler: a Python signal handler runs in the
main thread between two bytecodes, and ``Event.set`` takes the event's lock, which the
main thread holds at that moment if it is inside ``Event.wait`` (its entry or exit);
the lock is not reentrant, so the handler waits for itself for ever. A DaemonSet pod's
SIGTERM landing there left the exporter running until the kubelet's SIGKILL, its
progress state unsaved (seen: a demo exporter alive two hours after its SIGTERM). The
handler here only stores the signal's number, which takes no lock; the loop reads it
at least once a second (``stopped``).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The stop signal caught (0 until one is), and the handlers it replaced."""

    def __init__(self) -> None:
        self.caught = 0
        self._previous: dict[int, Any] = {}

    def handle(self, signum: int, frame: Any) -> None:
        """The handler: an attribute store, no lock (see the module docstring)."""
        self.caught = signum

    def install(self) -> StopSignals:
        """Handle ``STOP_SIGNALS`` here; nothing outside the main thread, where Python
        lets no handler be set (a test running the service in a thread stops it by its
        ``stop`` event instead)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self.handle)
        return self

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()

    def stopped(self, stop: threading.Event | None = None, seconds: float = 1.0) -> bool:
        """Wait up to ``seconds`` for ``stop`` (another thread's, a test's; None: only
        the signals stop the loop); True once it is set or a stop signal was caught. A
        signal arriving during the wait is seen when it ends, within ``seconds``."""
        if self.caught:
            return True
        if stop is None:
            time.sleep(seconds)
            return bool(self.caught)
        return stop.wait(seconds) or bool(self.caught)
