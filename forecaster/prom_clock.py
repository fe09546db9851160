"""Prometheus' clock beside the forecaster's, read from its answers' ``Date`` header. Pure.

Why it matters: every query of a cycle is evaluated at the cycle's time (``time=``),
and an instant selector finds only samples at most Prometheus' lookback (5 min) older
than that time, stamped by Prometheus' clock at each scrape. A forecaster whose clock
is ahead of Prometheus' by more than the lookback (a node with NTP off, a VM restored
from a snapshot) reads every running run as absent: none is forecast, and after
``--history.vanish-grace`` each is finished as cancelled and learnt so. One behind reads
the past: runs that started since are missing, runs that ended are forecast.

How it is measured: Prometheus, VictoriaMetrics, Thanos and Mimir (Go's HTTP server)
stamp every answer with ``Date``, their clock in whole seconds when the answer left.
``PromClient`` keeps the latest (``QueryStats.date``) with the monotonic time its
headers came in, so the offset costs no query: Date + 0.5 s minus the cycle's clock at
that moment, within about a second plus the network's one-way time.

What the cycle does with it (``Cycle.run``): beyond ``OFFSET_BOUND_SECONDS`` it takes
Prometheus' time as its own (its clock plus the offset), for the queries and for
everything it derives and stores. Why not only refuse to count absences while the
clocks disagree: the runs would be kept, but a cycle reading at the wrong time finds
none of them present, so every forecast would still be gone. Why Prometheus' time for
everything and not only the queries: the runs' samples are on its clock, the
dashboards and alerts compare the published times with PromQL's ``time()``, its clock
too, and the runs' own timestamps (start, epoch ends) come from nodes whose clocks
agree with it in any cluster where scraping works; a forecaster on one node with its
clock off is the one thing out of step. Limit: a proxy that stamps its own ``Date``
(nginx does) is measured instead of Prometheus; its clock is normally as good.
"""

from __future__ import annotations

import math

# Within this the cycle keeps its own clock (the default of
# ``CycleSettings.clock_offset_bound_seconds``). Why 30 s: well above what the
# measurement can be off by (a second of the Date's resolution, a query's network time),
# so a healthy clock never trips it; and 30 s off shifts forecasts by 30 s and leaves a
# presence read well inside Prometheus' 5-minute lookback with any scrape interval the
# chart allows (2 min at most), so nothing is lost by not correcting it.
OFFSET_BOUND_SECONDS = 30.0
# A Date (or, to `top`, a sample's stamp) further than this from the reader's clock is
# no clock's (a placeholder, a proxy's garbage, milliseconds taken for seconds): a clock
# off by years is still a clock (a VM restored from an old snapshot, a dead RTC).
MAX_OFFSET_SECONDS = 10 * 366 * 86400.0


def measured_offset(date_seconds: float, received_at: float) -> float | None:
    """Prometheus' clock minus the forecaster's: ``date_seconds`` (an answer's ``Date``,
    whole seconds, so its clock was within the second after it) plus half a second,
    minus ``received_at`` (the forecaster's clock when that answer's headers came in).
    None for a date more than ``MAX_OFFSET_SECONDS`` away, or not finite. Pure."""
    offset = date_seconds + 0.5 - received_at
    if not math.isfinite(offset) or abs(offset) > MAX_OFFSET_SECONDS:
        return None
    return offset


def offset_to_apply(measured: float | None, applied: float, bound: float) -> float:
    """The offset the cycle's time takes (its clock plus this): ``measured`` when it is
    beyond ``bound``, or beyond half of it while an offset is applied (``applied``
    non-zero), else 0: within the bound the cycle keeps its own clock, unchanged. Why
    the half: a clock that hovers at the bound is not moved back and forth by the
    measurement's second of noise, each move a query asked again. ``measured`` None (no
    answer carried a readable ``Date``): ``applied`` stays. Pure."""
    if measured is None:
        return applied
    if abs(measured) > bound or (applied != 0.0 and abs(measured) > bound / 2):
        return measured
    return 0.0
