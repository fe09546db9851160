"""gpu_eta.common.stop_signals: the exporter's and the forecaster's SIGTERM handler
takes no lock, so a signal landing while the main thread is inside ``Event.wait``
cannot deadlock the service (it did: an exporter ran on two hours after SIGTERM)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from gpu_eta.common.stop_signals import StopSignals


def test_the_handler_returns_while_the_stop_events_lock_is_held() -> None:
    """The moment of the deadlock: the stop event's lock held (by the main thread in
    ``Event.wait``, here by another thread) when the handler runs. It returns at once,
    and the loop's next poll sees the signal."""
    stop = threading.Event()
    signals = StopSignals().install()
    try:
        handler = signal.getsignal(signal.SIGTERM)
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with stop._cond:  # what Event.wait holds at its entry and exit
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        held.wait(5)
        runner = threading.Thread(target=handler, args=(signal.SIGTERM, None), daemon=True)
        runner.start()
        runner.join(2)
        blocked = runner.is_alive()
        release.set()
        holder.join(5)
        assert not blocked, "the handler waited for the stop event's lock"
        assert signals.stopped(stop, 0.0)
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) is not handler


def test_another_threads_stop_still_ends_the_wait_at_once() -> None:
    """A test stopping a service by its event: ``stopped`` returns as soon as it is set."""
    stop, signals = threading.Event(), StopSignals()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    assert signals.stopped(stop, 30.0)  # a wait run out would be 30 s
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_polling_loop_within_a_second(sig: int) -> None:
    """The real signal, to a process polling as the services do."""
    code = (
        "import sys\n"
        "from gpu_eta.common.stop_signals import StopSignals\n"
        "s = StopSignals().install()\n"
        "print('ready', flush=True)\n"
        "while not s.stopped():\n"
        "    pass\n"
        "print(s.caught, flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=10)
    assert (proc.returncode, out) == (0, f"{int(sig)}\n")
