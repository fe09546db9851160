"""``top.live.Signals``: which signals it takes over and when it raises.

The display code itself runs on a pseudo-terminal in tests/top/test_top.py and
tests/demo/test_main.py; these are the rules that decide what an ignored signal or one
arriving mid-draw does, checked in-process.
"""

from __future__ import annotations

import signal

import pytest

from gpu_eta.top.live import Signals, Terminated


def test_an_ignored_signal_stays_ignored_and_the_others_are_restored() -> None:
    """nohup ignores SIGHUP, a non-interactive shell SIGINT for a background job: the
    view must not end on them. The handlers before ``caught`` are back after it."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    # whatever this process inherited (a background job of a script ignores SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        signals = Signals()
        with signals.caught():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signals.handle
            assert signal.getsignal(signal.SIGINT) == signals.handle
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.default_int_handler
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_signal_while_drawing_is_held_until_the_draw_ends() -> None:
    signals = Signals()
    with pytest.raises(KeyboardInterrupt), signals.drawing():
        signals.handle(signal.SIGINT, None)  # held: the draw goes on
        drew = True
    assert drew


def test_the_servers_now_is_the_latest_stamp_of_the_refresh() -> None:
    """Answers evaluated a moment apart (one refresh's queries run one after the other)
    carry different stamps: "now" is the latest, not the first answer's or the
    earliest; no sample at all leaves it to the caller (the workstation's clock)."""
    from gpu_eta.forecaster.series import Sample
    from gpu_eta.top.view import evaluation_time

    answers = {
        "epoch": [Sample({}, 1.0, 1_700_000_001.5), Sample({}, 2.0, 1_700_000_001.5)],
        "gpu_info": [Sample({}, 1.0, 1_700_000_003.0)],
        "completion": [Sample({}, 1.0, 1_700_000_000.0)],
        "pending": [],
    }
    assert evaluation_time(answers) == 1_700_000_003.0
    assert evaluation_time({"epoch": [], "gpu_info": []}) is None


class _Live:
    """rich's Live as LiveTop drives it: ``stop`` shows the cursor again."""

    def __init__(self, signals: Signals) -> None:
        self.signals = signals
        self.stopped = 0

    def stop(self) -> None:
        self.stopped += 1


def test_a_signal_as_the_display_stops_leaves_it_to_stop_again() -> None:
    """A signal arriving as ``stop`` begins (before its signals are held) unwinds out of
    it: the display must still be there for the next ``stop`` (the caller's cleanup) to
    show the cursor, not forgotten with the cursor hidden."""
    from gpu_eta.top.live import LiveTop

    signals = Signals()
    top = LiveTop.__new__(LiveTop)
    top.signals = signals
    live = _Live(signals)
    top._live = live
    real_drawing = signals.drawing

    def signal_first():  # the signal lands as stop enters its held block
        signals.drawing = real_drawing
        signals.handle(signal.SIGTERM, None)
        return real_drawing()

    signals.drawing = signal_first
    with pytest.raises(Terminated):
        top.stop()
    assert live.stopped == 0
    signals.pending = None
    top.stop()  # the cleanup's second stop: the cursor is shown
    assert live.stopped == 1
    top.stop()  # idempotent
    assert live.stopped == 1
