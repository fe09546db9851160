"""Pure: the runs a failed scrape hid, kept present for the cycle.

A failed scrape of an exporter makes Prometheus write a staleness marker for every
series of its target, so the cycle's plain selectors (``present``, ``allocated``) miss
that node's runs until its next good scrape. Read as absent, each such run would leave
``/metrics`` for a cycle (dashboards flicker, alerts computed from the forecasts reset)
and its GPU would lose its free time. A run whose pod is deleted looks the same to
those selectors, and so does one whose exporter's target was removed (a DaemonSet's
rolling update gives the new exporter pod a new address: a new target). What differs
is ``up``: 0 when the scrape failed, none (marked stale) for a removed target, 1 for an
exporter answering without the deleted pod. So the cycle asks, only when some run
running at its previous read is absent now, for the runs and allocations of the
targets not answering (no ``up == 1``), as last scraped within Prometheus' lookback
(``queries.SCRAPE_GAP``), and ``held`` puts back those of the runs that were running at
the previous read (present and not done: a run that ended or reached its plan is never
held, its pod may live on). Bounded: a target down or removed for longer than the
lookback (a deleted node's) loses its runs as before (then the vanish grace runs), and
a run whose pod was deleted before the failure is not brought back: absent at the
previous read, or (deleted since) not seen at its target's last good scrape
(``queries.SCRAPE_GAP``'s subqueries); nor is a run of a target that had no ``up == 1``
within the lookback (series written from elsewhere).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence, Set

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.runs import RunKey
from gpu_eta.forecaster.runs_from_series import run_keys, sample_run_key
from gpu_eta.forecaster.series import Sample, unexported


def missing(previous: Set[RunKey], present: Sequence[Sample]) -> list[RunKey]:
    """The runs running at the previous read (``previous``: never one that finished,
    ``Cycle._present``) that ``present`` lacks, in key order."""
    return sorted(previous - run_keys(present))


def parts(keys: Sequence[RunKey]) -> dict[str, str]:
    """The ``queries.SCRAPE_GAP`` parts for the runs ``keys``: set matches on their
    ``run_id`` and their pods (``pod`` or ``exported_pod``), which the TSDB answers from
    its index (12 ms where the same parts for every run of 5,000 took 170-220 ms,
    docs/forecaster.md); every run's when a set match cannot name them or the parts,
    folded with the GPU models' (the read they may ride on), grow past
    ``queries.MAX_QUERY_CHARS`` (more than ``queries.MAX_UNKNOWN_RUNS`` runs)."""
    present, allocated = queries.SCRAPE_GAP["held_present"], queries.SCRAPE_GAP["held_allocated"]
    if len(keys) <= queries.MAX_UNKNOWN_RUNS:
        runs = queries.matcher("run_id", [k[3] for k in keys])
        pods = queries.for_pods(allocated, 0, 0, [k[1] for k in keys])
        if runs is not None and pods is not None:
            named = {
                "held_present": queries.render(present, 0, 0, runs=runs),
                "held_allocated": pods,
            }
            # folded with the GPU models, the query stays within MAX_QUERY_CHARS
            if queries.fits({**named, "gpu_info": queries.GPU_INFO}):
                return named
    return {name: queries.render(t, 0, 0) for name, t in queries.SCRAPE_GAP.items()}


def held(
    gone: Collection[RunKey],
    instant: Mapping[str, Sequence[Sample]],
    gap: Mapping[str, Sequence[Sample]],
) -> dict[str, list[Sample]]:
    """``instant``'s ``present`` and ``allocated`` answers with what ``gap`` (the
    ``queries.SCRAPE_GAP`` answers, by part) holds of the runs ``gone`` (``missing``):
    their last reports, and their containers' allocations where a container has none
    now; a run filed under a container that holds no GPU (its report named no
    container, the pod's first a sidecar) holds its pod's, as it counts for the pod's
    GPU-holding container in ``cycle.gpu_free_times``. One sample per run (its series
    can come from two targets: an HA pair)."""
    wanted = set(gone)
    kept = {key: s for s in gap.get("held_present", ()) if (key := sample_run_key(s)) in wanted}
    containers = {key[:3] for key in kept}
    held_allocated = list(gap.get("held_allocated", ()))
    holding = {_container(s) for s in held_allocated}
    pods = {c[:2] for c in containers if c not in holding}
    allocated = list(instant.get("allocated", ()))
    now_allocated = {_container(s) for s in allocated}
    allocated += [
        s
        for s in held_allocated
        if ((c := _container(s)) in containers or c[:2] in pods) and c not in now_allocated
    ]
    return {"present": [*instant.get("present", ()), *kept.values()], "allocated": allocated}


def _container(sample: Sample) -> tuple[str, str, str]:
    """``(namespace, pod, container)`` of a sample, ``exported_*`` labels honoured."""
    labels = unexported(sample).labels
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))
