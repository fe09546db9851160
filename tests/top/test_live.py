"""``top.live.Signals``: which signals it takes over and how often it raises.

The display code itself runs on a pseudo-terminal in tests/top/test_top.py and
tests/demo/test_main.py; these are the two rules that decide what a user's second
Ctrl-C or an ignored signal does, checked in-process.
"""

from __future__ import annotations

import signal

import pytest

from gpu_eta.top.live import Signals, Terminated


def test_an_ignored_signal_stays_ignored_and_the_others_are_restored() -> None:
    """nohup ignores SIGHUP, a non-interactive shell SIGINT for a background job: the
    view must not end on them. The handlers before ``caught`` are back after it."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        signals = Signals()
        with signals.caught():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signals.handle
            assert signal.getsignal(signal.SIGINT) == signals.handle
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == before[signal.SIGTERM]
        assert signal.getsignal(signal.SIGINT) == before[signal.SIGINT]
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_only_the_first_signal_raises() -> None:
    """A second signal while the first unwinds (the kernel's SIGHUP, then the shell's;
    a double Ctrl-C) must not break off the cleanup the first one runs."""
    signals = Signals()
    with pytest.raises(Terminated):
        signals.handle(signal.SIGHUP, None)
    signals.handle(signal.SIGINT, None)  # no raise
    assert isinstance(signals.pending, Terminated)
    with pytest.raises(Terminated):
        signals.check()


def test_a_signal_while_drawing_is_held_until_the_draw_ends() -> None:
    signals = Signals()
    with pytest.raises(KeyboardInterrupt), signals.drawing():
        signals.handle(signal.SIGINT, None)  # held: the draw goes on
        drew = True
    assert drew
