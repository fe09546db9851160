"""Which earlier runs of a job still speak for it: those of its latest campaign.

Why: a job is re-run in campaigns (a submission round, a paper's experiments, a
term's course work) and between campaigns its software changes: another image,
framework or driver under the same job name on the same node type. The runs of an
older campaign then differ in speed and shape by more than a campaign's own runs
differ from one another: replayed after MLPerf v0.5–v1.1, the v2.0–v2.1 runs of the
configurations that ran in both rounds were forecast several times worse than with
v2.0–v2.1 alone, their job levels and analogs mixing both releases
(docs/forecasting-evidence.md, "A configuration that outlives a software release").

A campaign ends where no run of the job ended for ``CAMPAIGN_GAP_SECONDS``. The
runs' end times of one MLPerf configuration are minutes to days apart (99 % of the
7,527 gaps under 5 days, none between 30 and 120 days) and months apart between
rounds, so the rule does not depend on where in that empty range the gap is put; a
cluster's weekly or nightly job never meets it. The latest campaign is used alone
from its first finished run on: one run of the new software forecast those moments
better than the ten of the old (also better than waiting for three: 1.84 → 1.05 %
at 10 %); before it, the older runs are all there is.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

CAMPAIGN_GAP_SECONDS = 30 * 86400.0


def latest_runs(
    ends: Sequence[float], limit: int, now: float, before: float | None = None
) -> tuple[int, int]:
    """``(start, stop)``: of a job's runs by end time (``ends``, in order), the at most
    ``limit`` most recent that ended before ``before`` (all of them live, with None),
    of the latest campaign of a run starting at ``now`` (``campaign_start``). What the
    analogs and the job level both read."""
    stop = len(ends) if before is None else bisect.bisect_left(ends, before)
    start = max(0, stop - limit)
    return campaign_start(ends, start, stop, now), stop


def campaign_start(ends: Sequence[float], start: int, stop: int, now: float) -> int:
    """The index in ``start..stop`` from which ``ends[start:stop]`` (end times, in
    order) are the latest campaign of a run starting at ``now``; ``start`` when that
    campaign has no finished run yet (``now`` is ``CAMPAIGN_GAP_SECONDS`` past the
    last end) or holds them all."""
    i = stop
    after = now
    while i > start and after - ends[i - 1] <= CAMPAIGN_GAP_SECONDS:
        i -= 1
        after = ends[i]
    return i if i < stop else start
