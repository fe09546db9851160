"""A cap on how often one container may start a new run.

Why: ``run_id`` is a label of every ``gpu_eta_training_*`` series, so each new run is
a new set of series in Prometheus and a new run in the forecaster's history. A client
that sends a fresh ``run_id`` with every report (a timestamp as id, a new reporter per
step) made one series set per report per container: churn in the TSDB without bound
and a history of one-point runs. The store keeps a token bucket per key (namespace,
pod, container, source): a report that would start a run takes a token,
and without one it is refused (``progress.TooManyRuns``: 429 on the wire, a skipped
and counted line in the log collector). Reports that continue the stored run never
take one, so a refusal costs the buggy sender only its new runs.

Time is the report's (``now`` of ``ProgressStore.merge``: the listener's clock, a log
line's CRI timestamp), not the exporter's: a log read from behind (at start, after a
burst) is judged by when its runs started, not by how fast the collector reads them.

``TokenBuckets`` is the bounded bucket map itself, also the progress port's per-pod
rate limit and its refusal log's.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable

from gpu_eta.exporter.progress import CLOCK_STEP_SECONDS

# A container may start RUN_BURST runs at once, then one more every RUN_REFILL_SECONDS.
# Why these: a notebook sweep starting a short run every minute must pass whatever its
# runs' lengths jitter, so the refill is twice that rate (at exactly one a minute, a
# sweep a little faster than that drains any burst in some hours); a burst of 10 lets
# a notebook's quick restarts through (a crash, a fix, a rerun). A fresh id every 10 s
# (6 a minute) is refused from its 15th report on, 2 of every 3 after that; one per
# report at 1 a second, 29 of every 30. Worst case left per container: 2 new runs a
# minute, where a fresh id per report made 60.
RUN_BURST = 10
RUN_REFILL_SECONDS = 30.0
# The same for runs the exporter reads out of one container's progress bars
# (``ProgressStore.merge(derived=True)``): 10 at once, then one every 5 s. Why looser: such
# runs are the exporter's split where a bar's counter goes back, and a job that runs
# `for epoch: for batch in tqdm(loader)` restarts its bar every epoch; epochs of 5 s or
# more pass. Why a cap at all: two processes writing bars into one container (DDP ranks)
# go back on every other line, a new run each without one.
DERIVED_RUN_BURST = 10
DERIVED_RUN_REFILL_SECONDS = 5.0
# Containers tracked at most (the store's own bound by default): past it the one that
# last started (or tried to start) a run longest ago is forgotten (its next run finds a
# full bucket), so a churning container stays tracked. The keys are real containers of
# pods on this node, so this only guards memory.
DEFAULT_MAX_KEYS = 4096


class _Bucket:
    __slots__ = ("stamp", "tokens")

    def __init__(self, tokens: float, stamp: float):
        self.tokens = tokens
        self.stamp = stamp


class TokenBuckets:
    """Token buckets per key: ``burst`` takes at once, one more every
    ``refill_seconds``; at most ``max_keys`` keys, the least recently used dropped
    first. Not thread-safe: callers hold their own lock.

    Also the progress port's per-pod rate limit and the once-per-window of its refusal
    log (``progress_http``): one bounded, tested bucket map rather than several.
    """

    def __init__(self, burst: float, refill_seconds: float, max_keys: int = DEFAULT_MAX_KEYS):
        self.burst = burst
        self.refill_seconds = refill_seconds
        self._max_keys = max(1, max_keys)
        self._buckets: OrderedDict[Hashable, _Bucket] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: Hashable, now: float) -> bool:
        """Whether ``key`` may take one now (start a run, send a report); if so it does."""
        bucket = self._refilled(key, now)
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def wait_seconds(self, key: Hashable, now: float) -> float:
        """Seconds from ``now`` until ``key`` may take one (0 when it may now).

        Counted from ``now``: a bucket whose time is still ahead of it (a clock stepped
        back by less than ``CLOCK_STEP_SECONDS``) refills from its own time on."""
        bucket = self._refilled(key, now)
        if bucket.tokens >= 1.0:
            return 0.0
        return (1.0 - bucket.tokens) * self.refill_seconds + max(0.0, bucket.stamp - now)

    def _refilled(self, key: Hashable, now: float) -> _Bucket:
        """``key``'s bucket topped up to ``now``, made the most recently used.

        A ``now`` before the bucket's last time adds nothing. Less than
        ``CLOCK_STEP_SECONDS`` before it (log lines read out of order) the bucket's
        time stays, so the same seconds never refill it twice; by more (a wall clock
        stepped back) its time becomes ``now``, since kept it would refill nothing
        until the clock caught up, and every wait told meanwhile would be wrong.
        """
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
            return bucket
        self._buckets.move_to_end(key)
        if now > bucket.stamp:
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.stamp) / self.refill_seconds
            )
            bucket.stamp = now
        elif now <= bucket.stamp - CLOCK_STEP_SECONDS:
            bucket.stamp = now
        return bucket


def retry_after(wait_seconds: float) -> int:
    """A wait as HTTP's ``Retry-After`` gives it (RFC 9110 10.2.3: whole seconds):
    rounded up, so a sender that waits that long finds a token, and at least 1, since
    a refused sender's ``0`` would read as "again at once"."""
    return max(1, math.ceil(wait_seconds))
