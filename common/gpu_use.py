"""A GPU holder's use over a window, in PromQL, where a scrape without a sample is busy.

The exporter publishes a holder's ``gpu_eta_pod_gpu_utilization_ratio`` only while
its share is known. On a time-sliced GPU without per-process data that is only while
the whole device reads exactly 0 % (every holder's share is then 0;
``exporter.attribution``), so the samples that exist are the device's dips, and a
mean or max over them reads a busy holder as idle after one dip. The allocation's
``gpu_eta_pod_gpu_allocated_since_timestamp_seconds`` is exported on every allocation
row with the same labels by the same scrapes, so each of its scrapes that brought no
utilisation sample is a scrape whose use is unknown: counted as fully busy, the
window's use is an upper bound, and with no gap it is the samples' own mean or max.
The alert GpuEtaGpuAllocatedIdle (rules/gpu-eta.rules.yaml) counts the same way;
``gpu-eta top``'s idle holders and the forecaster's GPU-use mean and stall check use
these. Pure: strings only.

A holder without an allocated-since series in the window (an exporter without the
kube collector, which knows no pod start; a process on a device its pod was not
allocated) keeps the plain mean or max of its samples. One whose allocated-since
series began inside the window (its pod's metadata came after its allocation) has
more samples than allocation scrapes; its own samples are then all there is, so it
too gets the plain mean or max (the rule's form would take the extra samples for
gaps of negative size and read it below its mean).

``use_mean_of`` is the same mean computed in Python from one holder's samples, for a
reader that fetches the raw samples instead (the forecaster's ending pods:
``gpu_eta.forecaster.queries.util_mean_of``).
"""

from __future__ import annotations

from collections.abc import Sequence

UTIL = "gpu_eta_pod_gpu_utilization_ratio"
ALLOCATED_SINCE = "gpu_eta_pod_gpu_allocated_since_timestamp_seconds"


def use_mean(span: str, match: str = "") -> str:
    """Each holder's mean use over ``span`` (a PromQL duration, or a template's
    placeholder), a scrape of its allocation without a sample counting 1; ``match``: a
    selector's label matchers (``{pod=~"a|b"}``) put on every selector, or empty.

    Written as 1 − (the known samples' idle mass) / (scrapes): the scrapes are the
    allocation's where they are at least as many as the samples, else the samples. A
    holder with no sample in ``span`` has no answer (unknown), as before.
    """
    u = f"{UTIL}{match}[{span}]"
    a = f"{ALLOCATED_SINCE}{match}[{span}]"
    return (
        f"(1 - (count_over_time({u}) - sum_over_time({u})) / "
        f"(count_over_time({a}) >= count_over_time({u}) or count_over_time({u})))"
    )


def use_mean_of(utilization: Sequence[float], allocation_scrapes: int) -> float | None:
    """``use_mean``'s rule for one holder, from its samples: the same rule, computed here.

    ``utilization``: the values of its utilisation samples in the window;
    ``allocation_scrapes``: how many samples its allocated-since series has there (0
    without one). A scrape of the allocation without a utilisation sample counts 1
    where the allocation's scrapes are at least as many as the samples, else the
    samples are all there is. None without a sample (unknown), as ``use_mean`` answers
    no series then.

    Why a second form: a query of ``use_mean`` for some holders repeats their set match
    on every selector, so a reader naming many holders fetches their raw samples with
    the match written once and computes the mean here; the two must not disagree, and
    the integration tests compare them on Prometheus and VictoriaMetrics.
    """
    n = len(utilization)
    if not n:
        return None
    scrapes = allocation_scrapes if allocation_scrapes >= n else n
    return 1 - (n - sum(utilization)) / scrapes


def use_max(span: str, match: str = "") -> str:
    """Each holder's highest use over ``span``: 1 where a scrape of its allocation in
    ``span`` brought no sample, else its samples' max (``use_mean`` for the arguments).
    A holder with no sample in ``span`` has no answer (unknown), as before."""
    u = f"{UTIL}{match}[{span}]"
    a = f"{ALLOCATED_SINCE}{match}[{span}]"
    return (
        f"(clamp_max(max_over_time({u}) + (count_over_time({a}) > bool count_over_time({u})), 1)"
        f" or max_over_time({u}))"
    )
