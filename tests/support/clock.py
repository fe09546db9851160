"""A clock a test sets by hand, for code that reads time only through a callable."""

from __future__ import annotations


class Clock:
    """``clock()`` answers ``clock.now``; a test moves it (schedules, retries,
    timestamps) without waiting."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
