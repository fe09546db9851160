"""Medians of per-configuration values as they stood at a past moment.

Why: the analogs' typical spreads and usual pace weights are medians over the
configurations with enough runs, each value measured on a configuration's latest
runs. A calibration replays past moments with the whole history fitted, so a median
over every configuration reads runs that ended after the moment replayed — the
replayed run itself among them, and its future. ``AsOf`` answers for a moment with
the configurations whose latest run ended before it (no value of theirs reads a later
run), and live with all of them, in one lookup: the medians of every prefix by end
are built once per change of the configurations' values (``AnalogEstimator.typical``).
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class AsOf:
    """Per-configuration values (tuples of one length) ordered by their latest run's
    end, with the componentwise median of every prefix of that order."""

    ends: tuple[float, ...]
    medians: tuple[tuple[float, ...], ...]

    def at(self, before: float | None = None) -> tuple[float, ...] | None:
        """The medians over the configurations whose latest run ended before
        ``before`` (every one with None), or None where there is none."""
        k = len(self.ends) if before is None else bisect.bisect_left(self.ends, before)
        return self.medians[k - 1] if k > 0 else None


def as_of(entries: Iterable[tuple[float, tuple[float, ...]]]) -> AsOf:
    """The ``AsOf`` of ``(latest end, values)`` pairs, one per configuration.

    The median is ``np.median``'s (the mean of the two middle values if even); each
    prefix's is kept by a running median (``_RunningMedian``), so building costs
    O(n log n) for n configurations.
    """
    ordered = sorted(entries, key=lambda e: e[0])
    if not ordered:
        return AsOf((), ())
    width = len(ordered[0][1])
    running = [_RunningMedian() for _ in range(width)]
    medians = []
    for _end, values in ordered:
        if len(values) != width:
            raise ValueError(f"as_of: values of {len(values)} components, expected {width}")
        medians.append(tuple(r.add(value) for r, value in zip(running, values, strict=True)))
    return AsOf(tuple(e for e, _v in ordered), tuple(medians))


class _RunningMedian:
    """The median of the values added so far: the lower half on a max-heap (negated),
    the upper half on a min-heap, the lower never smaller by count nor larger by one."""

    def __init__(self) -> None:
        self._low: list[float] = []
        self._high: list[float] = []

    def add(self, value: float) -> float:
        """Add ``value``; the median of every value added."""
        if self._low and value > -self._low[0]:
            heapq.heappush(self._high, value)
        else:
            heapq.heappush(self._low, -value)
        if len(self._low) > len(self._high) + 1:
            heapq.heappush(self._high, -heapq.heappop(self._low))
        elif len(self._high) > len(self._low):
            heapq.heappush(self._low, -heapq.heappop(self._high))
        if len(self._low) > len(self._high):
            return -self._low[0]
        return (-self._low[0] + self._high[0]) / 2.0
