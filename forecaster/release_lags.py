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
the run's end, if later) and the first that did not. Each pod gives that bracket of
its lag (seconds after its run's end), a bracket wider than ``max_bracket_seconds``
none (a run read as finished long after its end, as by the first cycle of a process
that did not see the cycles before; the queue's read failing for a while).

Why not each bracket's middle: lags are often seconds and cycles a minute apart, so
most pods free within the cycle their run ends in, bracket (0, time to the next
cycle], whose middle is half a cycle whatever the lag (5 s lags read by 30 s cycles:
~10 s; the bench's median error with those was no better than with no lag). The
brackets together pin the lags down: ``turnbull`` gives the distribution most likely
to have produced them (the nonparametric maximum likelihood estimate for
interval-censored data, Turnbull 1976), and the replay draws from its quantiles.

Left out: a cancelled run's pod (its last report is not its run's end), a pod that
outlives its run (``ends_with_run`` False: a notebook server), a pod whose next run
starts in it (it was never released) and a pod neither this read nor the one before
shows holding GPUs (a CPU run's: read as freed at once it would pull every lag toward
0; or one gone before the read before, when is not known). A lag above ``max_seconds``, or a pod still
holding that long after its run, is an outlier: dropped and counted. The most recent
``max_lags`` are kept, and in the history file's meta (``encode``/``decode``), so a
restart and ``once`` start from them. Pure: no I/O.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpu_eta.forecaster.queue_replay import MAX_LINGER_SECONDS

PodKey = tuple[str, str]  # (namespace, pod)

RELEASE_LAGS_KEY = "release_lag_brackets"  # the history file's meta row
# a pod held longer after its run did not end with it
MAX_RELEASE_SECONDS = MAX_LINGER_SECONDS
MAX_BRACKET_SECONDS = 600.0  # ten one-minute cycles; wider says little of a lag
MAX_LAGS = 200
MAX_WATCHED = 10_000  # pods awaiting their release; beyond, new ones are not watched
MAX_ENCODED_CHARS = 20_000  # 200 brackets as "[1234.5, 1294.5]," are ~3,400; larger: not ours
TURNBULL_ITERATIONS = 500  # EM steps; 200 brackets take ~10 ms, once per new bracket


@dataclass(frozen=True, slots=True)
class ReleaseSummary:
    """What ``ReleaseLags`` knows after a cycle, as the forecaster publishes it
    (docs/metrics.md, ``gpu_eta_forecaster_release_*``).

    Why published: the lags change every queue prediction (a pod's start moves by
    them), and nothing else shows what was learned or why a completed run gave no lag.
    ``quantiles``: P10/P50/P90 of the lags the replay draws from (None: no bracket
    kept); ``n_brackets``: brackets kept; ``n_lingering``: completed runs' pods still
    holding GPUs now (``ReleaseLags.lingering``); the counts since the process started:
    brackets learned, and completed runs that gave none (``ReleaseLags``'s
    ``n_outliers``, ``n_unbracketed``, ``n_unseen``)."""

    quantiles: tuple[float, float, float] | None = None
    n_brackets: int = 0
    n_lingering: int = 0
    n_bracketed: int = 0
    n_outliers: int = 0
    n_unbracketed: int = 0
    n_unseen: int = 0


@dataclass(frozen=True, slots=True)
class Ended:
    """A completed run's pod and the run's end (its last report, unix seconds)."""

    namespace: str
    pod: str
    end_timestamp: float


class ReleaseLags:
    """The lags observed from completed runs' ends to their pods' GPUs being free.

    ``brackets``: the most recent (low, high] bounds of a lag, oldest first (at most
    ``max_lags``); ``lags``: what the replay draws from; ``n_outliers``: pods dropped
    as holding over ``max_seconds`` after their run; ``n_unbracketed``: releases seen
    too coarsely (``max_bracket_seconds``) to give a bracket; ``n_unseen``: completed
    runs whose pod no read around their end showed holding GPUs; ``n_bracketed``:
    brackets learned (the counts since this object was made, not those restored).
    """

    def __init__(
        self,
        brackets: Iterable[tuple[float, float]] = (),
        max_seconds: float = MAX_RELEASE_SECONDS,
        max_bracket_seconds: float = MAX_BRACKET_SECONDS,
        max_lags: int = MAX_LAGS,
        max_watched: int = MAX_WATCHED,
    ) -> None:
        self.max_seconds = max_seconds
        self.max_bracket_seconds = max_bracket_seconds
        self.max_watched = max_watched
        self._brackets: deque[tuple[float, float]] = deque(
            (b for b in brackets if plausible(b, max_seconds, max_bracket_seconds)),
            maxlen=max_lags,
        )
        self._lags: tuple[float, ...] | None = None  # turnbull's, until a bracket comes
        # pod → (its run's end, the latest time it was found holding since, or the end,
        # its uid when known: a pod recreated under the name is another pod, whether its
        # release is learned: not a follower's)
        self._watched: dict[PodKey, tuple[float, float, str, bool]] = {}
        self._previous: tuple[float, Mapping[PodKey, bool | None]] | None = None
        self.n_outliers = 0
        self.n_unbracketed = 0
        self.n_unseen = 0
        self.n_bracketed = 0

    @property
    def brackets(self) -> tuple[tuple[float, float], ...]:
        """The (low, high] bounds kept of each observed lag, oldest first."""
        return tuple(self._brackets)

    @property
    def lingering(self) -> dict[PodKey, tuple[float, str]]:
        """The pods watched now: completed runs' pods the last ``observe`` found still
        holding GPUs (or could not say of: a partial read) → (their run's end, their
        uid or ""). Why: the replay frees such a pod a lag after its run's end
        (``queue_replay.Holder.run_ended``), not a whole run later."""
        return {key: (end, uid) for key, (end, _, uid, _) in self._watched.items()}

    def summary(self) -> ReleaseSummary:
        """What is known now, to publish (``ReleaseSummary``)."""
        lags = self.lags
        quantiles = None
        if lags:
            p10, p50, p90 = np.quantile(np.array(lags), (0.1, 0.5, 0.9))
            quantiles = (float(p10), float(p50), float(p90))
        return ReleaseSummary(
            quantiles,
            len(self._brackets),
            len(self._watched),
            self.n_bracketed,
            self.n_outliers,
            self.n_unbracketed,
            self.n_unseen,
        )

    @property
    def lags(self) -> tuple[float, ...]:
        """``replay``'s ``release_seconds``: one value per bracket kept, spread over
        the quantiles of ``turnbull``'s distribution (none: no bracket yet)."""
        if self._lags is None:
            self._lags = turnbull_quantiles(self.brackets)
        return self._lags

    def observe(
        self,
        ended: Iterable[Ended],
        holding: Mapping[PodKey, bool | None],
        running: Collection[PodKey],
        now: float,
        uids: Mapping[PodKey, str] | None = None,
        complete: bool = True,
        followers: Iterable[Ended] = (),
    ) -> tuple[float, ...]:
        """One cycle's reading: ``ended``, the runs completed since the last call;
        ``holding``, the pods holding GPUs now → whether each ends with its run
        (``Holder.ends_with_run``); ``running``, the pods with a run running now;
        ``uids``: the holding pods' uids (a watched pod found under another uid was
        deleted and its name reused: freed, not holding); ``complete``: whether the read
        covered every node (when not, a watched pod missing from it may be on a node not
        read: it is neither holding nor freed this cycle, and waits for a complete read);
        ``followers``: pods holding now that end with one of ``ended`` without reporting
        it (a distributed job's workers: ``pending.run_followers``), watched and
        ``lingering`` as its pod is, until each is gone, but not learned from: one run,
        one observation (a 64-pod job's release would push 63 other runs' brackets out
        of the ``max_lags`` kept, and the counts are of completed runs).
        Returns the brackets learned by it (already kept)."""
        uids = uids or {}
        new: list[tuple[float, float]] = []
        previous = self._previous
        for e, learn in itertools.chain(
            ((e, True) for e in ended), ((e, False) for e in followers)
        ):
            key = (e.namespace, e.pod)
            if not (math.isfinite(e.end_timestamp) and e.end_timestamp <= now) or not e.pod:
                continue
            before: Mapping[PodKey, bool | None] = {} if previous is None else previous[1]
            if not learn and key not in holding:
                continue  # a follower is one the read shows holding
            if key not in holding and key not in before:
                # never seen holding GPUs around its end: a CPU run's pod, or one gone
                # before the read before this one (unknown when), or a process's first
                self.n_unseen += 1
                continue
            if False in (holding.get(key), before.get(key)) or key in running:
                continue  # it outlives its run, or runs another: never released by it
            held_since = e.end_timestamp
            if previous is not None and previous[0] > e.end_timestamp:
                if key not in before:  # not holding then, holding now: not its release
                    continue
                held_since = previous[0]
            watched = self._watched.get(key)
            if watched is not None and watched[0] >= e.end_timestamp:
                continue  # the pod's later run ended first: it frees after that one
            if watched is not None or len(self._watched) < self.max_watched:
                self._watched[key] = (e.end_timestamp, held_since, uids.get(key, ""), learn)
        for key, (end, held_since, uid, learn) in list(self._watched.items()):
            same = not uid or uids.get(key, uid) == uid  # not another pod under the name
            if same and (key in running or holding.get(key, True) is False):
                del self._watched[key]  # a new run in it, or it outlives its runs
            elif same and key in holding:
                if now - end > self.max_seconds:
                    del self._watched[key]
                    if learn:
                        self.n_outliers += 1
                else:
                    self._watched[key] = (end, now, uid, learn)
            elif complete or not same:
                del self._watched[key]
                if learn:
                    self._settle(end, held_since, now, new)
        self._previous = (now, dict(holding))
        return tuple(new)

    def _settle(
        self, end: float, held_until: float, freed_by: float, new: list[tuple[float, float]]
    ) -> None:
        """The lag bracket of a pod found holding at ``held_until`` and free at
        ``freed_by``, kept when narrow enough and not all above ``max_seconds``."""
        if freed_by - held_until > self.max_bracket_seconds:
            self.n_unbracketed += 1
            return
        bracket = (held_until - end, max(freed_by - end, held_until - end + 0.001))
        if bracket[0] > self.max_seconds:
            self.n_outliers += 1
            return
        self._brackets.append(bracket)
        self._lags = None
        self.n_bracketed += 1
        new.append(bracket)


def turnbull_quantiles(brackets: Sequence[tuple[float, float]]) -> tuple[float, ...]:
    """``len(brackets)`` lags at the mid-quantiles of the distribution most likely to
    have given these (low, high] brackets (Turnbull's self-consistency EM over the
    innermost intervals, each represented by its middle). Pure."""
    if not brackets:
        return ()
    lows = np.array([lo for lo, _ in brackets])
    highs = np.array([hi for _, hi in brackets])
    # innermost intervals: a low endpoint followed, among all endpoints, by a high one
    points = sorted([(lo, 1) for lo in lows] + [(hi, 0) for hi in highs])
    inner = [
        (a, b)
        for (a, kind_a), (b, kind_b) in itertools.pairwise(points)
        if kind_a == 1 and kind_b == 0
    ]
    left = np.array([a for a, _ in inner])
    right = np.array([b for _, b in inner])
    # bracket i holds innermost interval j when it contains it
    member = (lows[:, None] <= left[None, :]) & (right[None, :] <= highs[:, None])
    mass = np.full(len(inner), 1.0 / len(inner))
    for _ in range(TURNBULL_ITERATIONS):
        likelihood = member @ mass
        updated = mass * (member / likelihood[:, None]).mean(axis=0)
        if np.abs(updated - mass).max() < 1e-9:
            mass = updated
            break
        mass = updated
    cumulative = np.cumsum(mass) / mass.sum()
    middles = (left + right) / 2
    n = len(brackets)
    at = np.searchsorted(cumulative, (np.arange(n) + 0.5) / n)
    return tuple(float(middles[min(i, len(middles) - 1)]) for i in at)


def encode(brackets: Iterable[tuple[float, float]]) -> str:
    """The brackets as the history file keeps them: a JSON list of [low, high]
    seconds after the run's end, widened to whole tenths of a second (so each stays a
    bracket: low < high)."""
    return json.dumps([[math.floor(lo * 10) / 10, math.ceil(hi * 10) / 10] for lo, hi in brackets])


def decode(
    text: str | None, max_seconds: float = MAX_RELEASE_SECONDS
) -> tuple[tuple[float, float], ...]:
    """The brackets ``encode`` wrote; one that is not two numbers 0 <= low < high
    with low within ``max_seconds`` is skipped, an unreadable or oversized text reads
    as none (the replay then frees a run's GPUs at its end, as before any lag is
    observed): never a failed start."""
    if not text or len(text) > MAX_ENCODED_CHARS:
        return ()
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        return ()
    if not isinstance(values, list):
        return ()
    kept = []
    for x in values[-MAX_LAGS:]:
        if not (isinstance(x, list) and len(x) == 2):
            continue
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x):
            continue
        try:
            bracket = (float(x[0]), float(x[1]))
        except OverflowError:  # an integer of 400 digits: no float holds it
            continue
        if plausible(bracket, max_seconds, MAX_BRACKET_SECONDS):
            kept.append(bracket)
    return tuple(kept)


def plausible(bracket: tuple[float, float], max_seconds: float, max_bracket_seconds: float) -> bool:
    """Whether ``bracket`` is one ``ReleaseLags`` could have learned: finite, 0 <=
    low < high, low within ``max_seconds``, no wider than ``max_bracket_seconds`` (and
    the second ``encode`` adds). Why: a stored bracket of (0, 1e300] read as it is made
    every queue prediction ``beyond_horizon``."""
    lo, hi = bracket
    return (
        math.isfinite(lo)
        and math.isfinite(hi)
        and 0 <= lo < hi
        and lo <= max_seconds
        and hi - lo <= max_bracket_seconds + 1.0
    )
