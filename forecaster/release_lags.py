"""How long a finished run's pod keeps its GPUs, learned from what the cycle reads.

Why: a pod that ends with its run does not free its GPUs at the run's last report. It
writes its last files, its container exits, the kubelet reports it done, and only then
does kube-scheduler count its GPUs free. The queue replay adds one such lag, drawn
from those observed, to each run-ending holder's end and to each started pod's hold
(``queue_replay.replay``'s ``release_seconds``); without them its starts come early.

What is observed, at no query cost: each cycle finishes runs (their end, the last
report, known) and reads the GPU pods kube-scheduler counts as holding (the queue's
holders). A completed run's pod is watched from its run's end until a cycle no longer
finds it holding; its GPUs went free between the last cycle that found it holding (or
the run's end, if later) and the first that did not, and the lag kept is that
bracket's middle minus the run's end. So a lag is known to the cycle interval: a
bracket wider than ``max_bracket_seconds`` gives none (a run read as finished long
after its end, as by the first cycle of a process that did not see the cycles
before; the queue's read failing for a while).

Left out: a cancelled run's pod (its last report is not its run's end), a pod that
outlives its run (``ends_with_run`` False: a notebook server) and a pod whose next
run starts in it (it was never released). A lag above ``max_seconds``, or a pod still
holding that long after its run, is an outlier: dropped and counted. The most recent
``max_lags`` are kept, and in the history file's meta (``encode``/``decode``), so a
restart and ``once`` start from them. Pure: no I/O.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

PodKey = tuple[str, str]  # (namespace, pod)

RELEASE_LAGS_KEY = "release_lags_seconds"  # the history file's meta row
MAX_RELEASE_SECONDS = 3600.0  # a pod held longer after its run did not end with it
MAX_BRACKET_SECONDS = 600.0  # ten one-minute cycles; wider says little of a lag
MAX_LAGS = 200
MAX_WATCHED = 10_000  # pods awaiting their release; beyond, new ones are not watched
MAX_ENCODED_CHARS = 20_000  # 200 lags as "1234.5," are ~1,400; a larger value is not ours


@dataclass(frozen=True, slots=True)
class Ended:
    """A completed run's pod and the run's end (its last report, unix seconds)."""

    namespace: str
    pod: str
    end_timestamp: float


class ReleaseLags:
    """The lags observed from completed runs' ends to their pods' GPUs being free.

    ``lags``: the most recent, oldest first (at most ``max_lags``); ``n_outliers``:
    lags dropped as above ``max_seconds``; ``n_unbracketed``: releases seen too
    coarsely (``max_bracket_seconds``) to give a lag.
    """

    def __init__(
        self,
        lags: Iterable[float] = (),
        max_seconds: float = MAX_RELEASE_SECONDS,
        max_bracket_seconds: float = MAX_BRACKET_SECONDS,
        max_lags: int = MAX_LAGS,
        max_watched: int = MAX_WATCHED,
    ) -> None:
        self.max_seconds = max_seconds
        self.max_bracket_seconds = max_bracket_seconds
        self.max_watched = max_watched
        self._lags: deque[float] = deque(
            (x for x in lags if 0 <= x <= max_seconds), maxlen=max_lags
        )
        # pod → (its run's end, the latest time it was found holding since, or the end)
        self._watched: dict[PodKey, tuple[float, float]] = {}
        self._previous: tuple[float, Mapping[PodKey, bool | None]] | None = None
        self.n_outliers = 0
        self.n_unbracketed = 0

    @property
    def lags(self) -> tuple[float, ...]:
        """The lags kept, oldest first: ``replay``'s ``release_seconds``."""
        return tuple(self._lags)

    def observe(
        self,
        ended: Iterable[Ended],
        holding: Mapping[PodKey, bool | None],
        running: Collection[PodKey],
        now: float,
    ) -> tuple[float, ...]:
        """One cycle's reading: ``ended``, the runs completed since the last call;
        ``holding``, the pods holding GPUs now → whether each ends with its run
        (``Holder.ends_with_run``); ``running``, the pods with a run running now.
        Returns the lags learned by it (already kept)."""
        new: list[float] = []
        previous = self._previous
        for e in ended:
            key = (e.namespace, e.pod)
            if not (math.isfinite(e.end_timestamp) and e.end_timestamp <= now) or not e.pod:
                continue
            if holding.get(key, True) is False or key in running:
                continue  # it outlives its run, or runs another: never released by it
            held_since = e.end_timestamp
            if previous is not None and previous[0] > e.end_timestamp:
                if key not in previous[1]:  # gone by the cycle before: freed in between
                    self._settle(e.end_timestamp, e.end_timestamp, previous[0], new)
                    continue
                if previous[1][key] is False:
                    continue
                held_since = previous[0]
            if key in self._watched or len(self._watched) < self.max_watched:
                self._watched[key] = (e.end_timestamp, held_since)
        for key, (end, held_since) in list(self._watched.items()):
            if key in running or holding.get(key, True) is False:
                del self._watched[key]  # a new run in it, or it outlives its runs
            elif key in holding:
                if now - end > self.max_seconds:
                    del self._watched[key]
                    self.n_outliers += 1
                else:
                    self._watched[key] = (end, now)
            else:
                del self._watched[key]
                self._settle(end, held_since, now, new)
        self._previous = (now, dict(holding))
        return tuple(new)

    def _settle(self, end: float, held_until: float, freed_by: float, new: list[float]) -> None:
        """The lag of a pod found holding at ``held_until`` and free at ``freed_by``,
        kept when the bracket is narrow enough and the lag within bounds."""
        if freed_by - held_until > self.max_bracket_seconds:
            self.n_unbracketed += 1
            return
        lag = (held_until + freed_by) / 2 - end
        if lag > self.max_seconds:
            self.n_outliers += 1
            return
        self._lags.append(lag)
        new.append(lag)


def encode(lags: Iterable[float]) -> str:
    """The lags as the history file keeps them: a JSON list, to a tenth of a second."""
    return json.dumps([round(x, 1) for x in lags])


def decode(text: str | None, max_seconds: float = MAX_RELEASE_SECONDS) -> tuple[float, ...]:
    """The lags ``encode`` wrote; a value that is not a number within 0..``max_seconds``
    is skipped, an unreadable or oversized text reads as none (the replay then frees a
    run's GPUs at its end, as before any lag is observed): never a failed start."""
    if not text or len(text) > MAX_ENCODED_CHARS:
        return ()
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        return ()
    if not isinstance(values, list):
        return ()
    return tuple(
        float(x)
        for x in values[-MAX_LAGS:]
        if isinstance(x, (int, float))
        and not isinstance(x, bool)
        and math.isfinite(x)
        and 0 <= x <= max_seconds
    )
