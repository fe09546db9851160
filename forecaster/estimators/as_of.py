"""Medians of per-configuration values as they stood at a past moment.

Why: the analogs' typical spreads and usual pace weights are medians over the
configurations with enough runs, each value measured on a configuration's latest
runs. A calibration replays past moments with the whole history fitted, so a median
over every configuration reads runs that ended after the moment replayed — the
replayed run itself among them, and its future. ``AsOf`` answers for a moment with
the configurations whose latest run ended before it (no value of theirs reads a later
run), and live with all of them, in one lookup: the medians of every prefix by end
are kept once, when the index changes.
"""

from __future__ import annotations

import bisect
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
    prefix's is read off sorted lists kept by insertion, so building costs one pass.
    """
    ordered = sorted(entries, key=lambda e: e[0])
    if not ordered:
        return AsOf((), ())
    width = len(ordered[0][1])
    columns: list[list[float]] = [[] for _ in range(width)]
    medians = []
    for _end, values in ordered:
        if len(values) != width:
            raise ValueError(f"as_of: values of {len(values)} components, expected {width}")
        for column, value in zip(columns, values, strict=True):
            bisect.insort(column, value)
        k, odd = divmod(len(columns[0]), 2)
        medians.append(tuple(c[k] if odd else (c[k - 1] + c[k]) / 2.0 for c in columns))
    return AsOf(tuple(e for e, _v in ordered), tuple(medians))
