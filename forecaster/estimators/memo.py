"""A bounded memo of the replay's pure computations, kept from one refit to the next.

Why: ``EtaModel.fit`` replays the most recent finished runs at the same moments at
every refit (``replay.replay_samples``), and ``evaluate`` refits ~80 times on 600
runs. What a replayed moment's own rate, rate candidates and analog forecast are
depends only on that truncated run and, for the analogs, on the curves and typical
values they read (``AnalogEstimator.estimate``), all of which most refits give again.
Each caller keys its value on everything the value is computed from, so a hit
returns what a fresh computation would.

Why bounded: the live forecaster runs for months and its history turns over; the
least recently used entries are dropped past ``max_entries``. A hit stores its key
anew (the caller's, equal to the old one), so an entry holds the objects of the
refit that last read it, not those of the first refit that made it.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")
_MISSING = object()
# Every memo alive, for ``clear_all``: a benchmark timing fits one after another
# must start each from what a new process has, or later fits are timed on hits.
_EVERY: weakref.WeakSet[Memo] = weakref.WeakSet()


class Memo(Generic[V]):
    """Values by key, computed on first use, at most ``max_entries`` of them (least
    recently used dropped); None is a value like any other."""

    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._entries: OrderedDict[Hashable, V] = OrderedDict()
        _EVERY.add(self)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The value kept for ``key``, else ``compute()``, kept."""
        entries = self._entries
        value = entries.pop(key, _MISSING)
        if value is _MISSING:
            value = compute()
            if len(entries) >= self.max_entries:
                entries.popitem(last=False)
        entries[key] = value  # the newest, under the caller's key (module docstring)
        return value  # type: ignore[return-value]

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Forget every entry."""
        self._entries.clear()


def clear_all() -> None:
    """Forget every entry of every memo: the next fit computes as a new process's first."""
    for memo in list(_EVERY):
        memo.clear()
