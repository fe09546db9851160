"""Pure: the query results of one refresh → ``View`` (jobs, idle holders, GPUs).

Tests drive ``build_view`` with fixed query results; no I/O here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from gpu_eta.forecaster.prom_clock import MAX_OFFSET_SECONDS
from gpu_eta.forecaster.series import Sample, unexported
from gpu_eta.top.queries import QUANTILE_KEYS


@dataclass(frozen=True, slots=True)
class Band:
    """P10 / P50 / P90 of a clock time (unix seconds); any may be missing."""

    p10: float | None = None
    p50: float | None = None
    p90: float | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    """One training run in progress, with its GPUs and forecast."""

    namespace: str
    pod: str
    container: str
    run_id: str
    node: str
    gpus: tuple[str, ...]
    epoch: float | None  # progress done, in ``unit``
    epochs: float | None  # progress planned, in ``unit``; None: no planned total
    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    start_timestamp: float | None
    elapsed_seconds: float | None
    last_report_timestamp: float | None
    eta: Band
    method: str
    stalled: bool
    idle: bool
    unit: str = "epochs"  # "steps" for a run followed by its steps (no epochs planned)
    # its ETA is a stale forecaster's (``ForecasterState.stale``): shown marked
    forecast_stale: bool = False


@dataclass(frozen=True, slots=True)
class HolderRow:
    """A pod holding a GPU that it (nearly) does not use over the idle window."""

    namespace: str
    pod: str
    container: str
    node: str
    gpu: str
    utilization_ratio: float | None
    memory_used_bytes: float | None
    held_seconds: float | None
    training: bool


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One device: who holds it and when it is predicted to be free."""

    node: str
    gpu: str
    uuid: str
    model: str
    holders: tuple[str, ...]
    # "free", "busy", "idle" (held, unused), "unknown" (no pod holds it as far as the
    # exporter knows, but its node's podresources collector failed: holders unknown)
    state: str
    free_at: Band
    note: str = ""
    # its free time is a stale forecaster's (``ForecasterState.stale``): shown marked
    forecast_stale: bool = False


@dataclass(frozen=True, slots=True)
class PendingRow:
    """A pod waiting for GPUs and its predicted start (docs/pending.md)."""

    namespace: str
    pod: str
    resource: str
    gpus: str
    status: str  # predicted, scheduled, never_fits, beyond_horizon, no_schedulable_node,
    # blocked_elsewhere, gated; NO_PREDICTION for a pod KSM shows and no forecaster does
    created_timestamp: float | None
    start: Band
    # the end of the forecaster cycle that made the prediction (None: not known): a
    # start no later than it is that cycle's "now" (the pod fits now), since a cycle
    # never predicts a start before its own now
    cycle_timestamp: float | None = None
    # its start is a stale forecaster's (``ForecasterState.stale``): shown marked
    forecast_stale: bool = False


# the status of a pending GPU pod kube-state-metrics shows and no forecaster publishes
# (``pending_rows``)
NO_PREDICTION = "no_prediction"


@dataclass(frozen=True, slots=True)
class ForecasterState:
    """One forecaster as its series tell it apart: by their scrape identity, ``job``
    and ``instance``, which its self-monitoring series and the forecasts it publishes
    both carry (a forecaster scraped by two jobs is two of them, alike)."""

    job: str
    instance: str
    # the end of its last good cycle (None: it has not said)
    last_success_timestamp: float | None
    failed: bool  # it reports its last cycle failed (gpu_eta_forecaster_stale 1)
    stale: bool  # its forecasts are stale (``forecaster_states``)


@dataclass(frozen=True, slots=True)
class View:
    """Everything one snapshot shows."""

    timestamp: float
    prometheus_url: str
    jobs: tuple[JobRow, ...] = ()
    idle: tuple[HolderRow, ...] = ()
    gpus: tuple[GpuRow, ...] = ()
    errors: tuple[str, ...] = field(default_factory=tuple)
    alerts: tuple[tuple[str, int], ...] = ()  # firing gpu-eta alerts: (alertname, count)
    pending: tuple[PendingRow, ...] = ()
    namespaces: tuple[str, ...] = ()  # runs, idle holders and pending pods only of these
    # the server's own warnings: its answer is partial (a Thanos store, a remote-read
    # source down), cleaned and bounded (``promparse.clean_warning``), each once
    warnings: tuple[str, ...] = ()
    # the server's clock minus the workstation's when the answers came (``timestamp`` is
    # the server's): how old a view is, asked later on the workstation's clock
    clock_offset_seconds: float = 0.0
    # why no device's holders are known (the allocation query refused); empty: known as
    # far as the answers go. Then ``idle`` is empty for want of holders, not for want of
    # idle ones (``idle_unknown`` says so too)
    allocations_unknown: str = ""
    # why no holder's idleness is known: the allocations (no holder known) or the idle
    # window's averages (``pod_util_avg``) refused; empty: known. Then ``idle`` is empty
    # for want of an answer, and the renderers say "unknown", never "none" or 0. (The
    # utilisation now is no stand-in: a time-sliced GPU's holders have a sample only
    # when the device reads 0 %, so busy ones read idle.)
    idle_unknown: str = ""
    # why no holder's allocation time is known (the ``since`` query refused); empty:
    # known where the exporter publishes it. Idle holders are then judged on their
    # utilisation alone (a pod seconds old may be listed), and their HELD says unknown,
    # not "-" (which says the exporter runs without the kube collector)
    held_unknown: str = ""
    # why the firing alerts, the training runs or the pending pods are not known (their
    # query refused or left out by the refresh's deadline); empty: known. Then an empty
    # list is no answer, and the renderers say "unknown", never "none"
    alerts_unknown: str = ""
    training_unknown: str = ""
    pending_unknown: str = ""
    # the end of the newest forecaster's last good cycle (None: no forecaster series),
    # whether one reports its last cycle failed (``judged_together``), and whether any
    # forecaster's forecasts are stale: each row says whether its own are
    # (``forecast_stale``). With one forecaster: its cycle, its failure, its staleness
    forecast_timestamp: float | None = None
    forecaster_failed: bool = False
    forecasts_stale: bool = False
    # each forecaster the cycle query tells apart, by (job, instance)
    forecasters: tuple[ForecasterState, ...] = ()


def _value(sample: Sample) -> float | None:
    """The sample's value, ``None`` for NaN/±Inf (no number to show)."""
    return sample.value if math.isfinite(sample.value) else None


def _finite_sum(values: Sequence[float]) -> float | None:
    """The sum of ``values`` (each finite), ``None`` when there are none or it is not
    finite: two GPUs reporting 1e308 bytes each sum to ``inf``, no number to show, and
    ``--json`` printed ``Infinity``, which strict JSON parsers refuse."""
    total = sum(values)
    return total if values and math.isfinite(total) else None


def _container_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))


def _run_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    return (*_container_key(labels), labels.get("run_id", ""))


def _gpu_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    """A device as top lists it: a whole GPU ``(node, "3", UUID)``, or one MIG instance
    of it ``(node, "7/5", UUID)`` (DCGM's labels: the parent's ``gpu`` and ``UUID`` plus
    ``GPU_I_ID``)."""
    gpu = labels.get("gpu", "")
    if labels.get("GPU_I_ID"):
        gpu = f"{gpu}/{labels['GPU_I_ID']}"
    return (labels.get("node", ""), gpu, labels.get("UUID", ""))


def _physical(gkey: tuple[str, str, str]) -> tuple[str, str, str]:
    """The physical GPU of a device key: a MIG instance's parent, a whole GPU itself.
    The forecaster's free time is per physical GPU (no ``GPU_I_ID``, docs/metrics.md)."""
    return (gkey[0], gkey[1].split("/", 1)[0], gkey[2])


def _physical_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("node", ""), labels.get("gpu", ""), labels.get("UUID", ""))


def _by_run(results: Sequence[Sample]) -> dict[tuple[str, str, str, str], float]:
    out: dict[tuple[str, str, str, str], float] = {}
    for s in results:
        v = _value(s)
        if v is not None:
            out[_run_key(s.labels)] = v
    return out


def _highest(results: Sequence[Sample]) -> dict[tuple[str, str, str, str], Sample]:
    """Per run, its sample of the highest value (a run scraped twice: the scrape
    furthest on, as the forecaster reads progress); one without a value (NaN) only
    when the run has no other."""
    out: dict[tuple[str, str, str, str], Sample] = {}
    for s in results:
        key = _run_key(s.labels)
        held = out.get(key)
        v, best = _value(s), (None if held is None else _value(held))
        if held is None or (v is not None and (best is None or v > best)):
            out[key] = s
    return out


Source = tuple[str, str]  # a series' scrape identity: (job, instance)


def _source(labels: Mapping[str, str]) -> Source:
    return (labels.get("job", ""), labels.get("instance", ""))


@dataclass(frozen=True, slots=True)
class Forecasters:
    """Whose forecasts are stale: each forecaster's state by its (job, instance), and
    the whole view's judgement (``judged_together``) for a forecast whose job and
    instance no forecaster series carries."""

    by_source: Mapping[Source, ForecasterState]
    cycle: float | None  # the newest last good cycle's end
    stale: bool  # the whole view's judgement

    def stale_of(self, source: Source) -> bool:
        known = self.by_source.get(source)
        return self.stale if known is None else known.stale

    def cycle_of(self, source: Source) -> float | None:
        known = self.by_source.get(source)
        return self.cycle if known is None else known.last_success_timestamp


class ForecastBand(NamedTuple):
    """A forecast band and whether it is stale forecasters' (every one it came from
    is). A tuple: one per run, GPU and pod of a refresh (12,800 at 6,400 GPUs), made
    faster than a dataclass."""

    band: dict[str, float]
    stale: bool


def _staleness(forecasters: Forecasters) -> Callable[[Mapping[str, str]], bool]:
    """Whether a series' forecaster is stale, by its labels: each (job, instance)
    looked up once (a refresh reads one per forecast sample, 12,800 bands' worth)."""
    judged: dict[Source, bool] = {}

    def stale_of(labels: Mapping[str, str]) -> bool:
        src = _source(labels)
        stale = judged.get(src)
        if stale is None:
            stale = judged[src] = forecasters.stale_of(src)
        return stale

    return stale_of


def _current_first(
    results: Sequence[Sample], forecasters: Forecasters, value_fn: Callable[[Sample], Any]
) -> dict[tuple[str, str, str, str], Any]:
    """Per run, the value (``value_fn``; None skips the sample) of its last answered
    sample of current forecasters where the run has any, else of its last stale one:
    the split ``_bands`` makes. Why: a run's stalled flag and method belong with its
    band; taken from whichever sample came last, a stale forecaster's
    ``stalled,from past runs`` sat beside the current one's band, unmarked."""
    current: dict[tuple[str, str, str, str], Any] = {}
    old: dict[tuple[str, str, str, str], Any] = {}
    stale_of = _staleness(forecasters)
    for s in results:
        v = value_fn(s)
        if v is not None:
            (old if stale_of(s.labels) else current)[_run_key(s.labels)] = v
    return old | current


def _bands(results: Sequence[Sample], key_fn, forecasters: Forecasters) -> dict[Any, ForecastBand]:
    """Per key, its band (P10/P50/P90: the last answered sample of each quantile) of
    the samples of current forecasters where the key has any, else of all its samples.

    Why: a forecaster that stopped beside its replacement (or in another cluster whose
    pod names meet) still publishes its last forecasts; mixed in, a stale quantile
    could sit in a current band, unmarked."""
    # per key, its band of current forecasters, and of stale ones
    bands: tuple[dict[Any, dict[str, float]], ...] = ({}, {})
    stale_of = _staleness(forecasters)
    for s in results:
        labels = s.labels
        q = QUANTILE_KEYS.get(labels.get("quantile", ""))
        v = _value(s)
        if q is None or v is None:
            continue
        bands[stale_of(labels)].setdefault(key_fn(labels), {})[q] = v
    current, old = bands[False], bands[True]
    out = {
        key: ForecastBand(band, True)
        for key, band in old.items()
        if key not in current  # else a current forecaster forecasts the key too
    }
    out.update((key, ForecastBand(band, False)) for key, band in current.items())
    return out


# the queries saying whether a device no pod holds is free (``build_view``'s ``refused``)
HOLDER_QUERIES = ("allocated", "holders_unknown")
# the query saying whether a device no pod holds is in use all the same
UTIL_QUERY = "gpu_util"
# the query saying which holders are idle (their average over the idle window)
AVERAGE_QUERY = "pod_util_avg"


def build_view(
    results: Mapping[str, Sequence[Sample]],
    now: float,
    prometheus_url: str = "",
    idle_threshold: float = 0.05,
    idle_window_seconds: float = 300.0,
    refused: Collection[str] = (),
    late: Collection[str] = (),
) -> View:
    """Join the query results (name → ``promapi`` samples) into one ``View``.

    A run is shown while ``epoch < epochs_planned`` and ``step < steps_planned``
    (each where known: a Hugging Face run planned in both ends at ``max_steps``,
    maybe before its last epoch). A run with an epoch series is shown in epochs
    unless it plans steps and no epochs; a run without one (a tqdm bar, a run
    reporting only steps) in steps. A
    holder is idle when its average utilisation over the idle window (``pod_util_avg``:
    a scrape of its allocation without a sample counts busy, ``common.gpu_use``) is below
    ``idle_threshold`` (a GPU no pod holds is in use from it, ``free_state``) *and* it has held the GPU for at least that window (like the
    idle alert's age guard): a pod seconds old (pulling its image, loading data) has
    no window to average over. A holder whose start is unknown (no
    ``..._allocated_since_...`` series: the exporter runs without the kube collector)
    is judged on utilisation alone. Joins use DCGM's label names: runs meet their
    GPUs on (namespace, pod, container), GPUs are (node, gpu, UUID[, GPU_I_ID]);
    ``exported_*`` labels count as the plain ones.

    ``refused``: the names of the queries Prometheus refused (``main.fetch``). Without
    the answer of ``allocated`` (who holds each device) or ``holders_unknown`` (on which
    nodes that is not known), a device no pod holds as far as the answers go is
    "unknown", saying which query is missing, never "free": every GPU read free. Without
    ``allocated`` no holder is known at all, so neither is an idle one
    (``View.allocations_unknown``). Without ``gpu_util`` (a device's own utilisation)
    a device no pod holds says its use is unknown, not "free now" (``free_state``).
    Without ``pod_util_avg`` (each holder's average over the idle window) no holder is
    listed idle, as none is known to be (``View.idle_unknown``); the utilisation now is
    no stand-in (a time-sliced GPU's holders read 0 % at the device's idle moments
    only). Without ``since`` (when each holder got its device) the idle holders are
    judged on utilisation alone, as without the kube collector, and say so
    (``View.held_unknown``).

    ``late``: the names of the queries a refresh's deadline left out (``main.fetch``):
    unknown as a refused one is, said as ``not answered in time``.
    """
    # ``exported_*`` labels read as the plain ones (a scrape that did not honour the
    # exporter's labels: its own namespace and pod would name every run), as the
    # forecaster reads them
    results = {name: [unexported(s) for s in items] for name, items in results.items()}
    get = lambda name: results.get(name) or ()  # noqa: E731
    epochs = _by_run(get("epochs"))
    latest_steps = _highest(get("step"))
    steps_done = {k: v for k, s in latest_steps.items() if (v := _value(s)) is not None}
    steps = _by_run(get("steps"))
    run_start = _by_run(get("run_start"))
    last_report = _by_run(get("last_report"))
    forecasters = _forecasters(get("forecaster_cycle"), now)
    eta = _bands(get("completion"), _run_key, forecasters)
    # a run's flags from the forecasters its band is of: current ones over stale ones
    stalled = _current_first(get("stalled"), forecasters, _value)
    methods = _current_first(get("method"), forecasters, lambda s: s.labels.get("method", ""))

    # Per container: its allocated GPUs with utilisation and memory. A set: an exporter
    # scraped twice (two jobs, two replicas) answers each allocation twice, and a run's
    # GPUs were listed, and their memory summed, twice
    container_gpus: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
    holders: set[tuple[tuple[str, str, str], tuple[str, str, str]]] = set()
    for s in get("allocated"):
        labels = s.labels
        if _value(s) != 1:
            continue
        ckey = _container_key(labels)
        gkey = _gpu_key(labels)
        container_gpus.setdefault(ckey, set()).add(gkey)
        holders.add((gkey, ckey))

    def per_holder(name: str) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for s in get(name):
            labels = s.labels
            v = _value(s)
            if v is not None:
                out[(_gpu_key(labels), _container_key(labels))] = v
        return out

    util = per_holder("pod_util")
    util_avg = per_holder("pod_util_avg")
    memory = per_holder("pod_memory")
    # a start no clock gives (``plausible_stamp``: -1e18 read as 11574074094867 days
    # held) is unknown, as when the exporter publishes none
    since = {hk: t for hk, t in per_holder("since").items() if plausible_stamp(t, now)}
    gpu_total = {
        _gpu_key(s.labels): v for s in get("gpu_memory_total") if (v := _value(s)) is not None
    }
    idle_unknown = refused_cause(refused, "allocated", AVERAGE_QUERY, late=late)
    idle_holders = {
        hk
        for hk in (() if AVERAGE_QUERY in refused or AVERAGE_QUERY in late else holders)
        if (avg := util_avg.get(hk, util.get(hk))) is not None
        and avg < idle_threshold
        and (hk not in since or now - since[hk] >= idle_window_seconds)
    }

    jobs: list[JobRow] = []
    training_containers: set[tuple[str, str, str]] = set()
    # each run once, by its epoch series where it has one (else its step series); of a
    # run scraped twice, the scrape furthest on
    progress = {key: (s, False) for key, s in latest_steps.items()}
    progress.update({key: (s, True) for key, s in _highest(get("epoch")).items()})
    for key, (s, by_epoch) in progress.items():
        labels = s.labels
        done_steps, planned_steps = steps_done.get(key), steps.get(key)
        if done_steps is not None and planned_steps is not None and done_steps >= planned_steps:
            continue  # finished by its steps (HF's max_steps before its last epoch, too)
        if by_epoch and (key in epochs or planned_steps is None):
            epoch, planned, unit = _value(s), epochs.get(key), "epochs"
        else:  # no epoch series, or no epochs planned but steps: shown in steps
            epoch, planned, unit = done_steps, planned_steps, "steps"
        if epoch is not None and planned is not None and epoch >= planned:
            continue  # finished: its pod may linger, its GPU shows in the GPU list
        ckey = key[:3]
        training_containers.add(ckey)
        gkeys = sorted(container_gpus.get(ckey, ()))
        node = labels.get("node", "") or (gkeys[0][0] if gkeys else "")

        def total(values: Mapping[tuple, float], gks=gkeys, ck=ckey) -> float | None:
            return _finite_sum([values[(g, ck)] for g in gks if (g, ck) in values])

        n_util = [util[(g, ckey)] for g in gkeys if (g, ckey) in util]
        util_sum = _finite_sum(n_util)
        start = run_start.get(key)
        forecast = eta.get(key)
        band = {} if forecast is None else forecast.band
        jobs.append(
            JobRow(
                namespace=key[0],
                pod=key[1],
                container=key[2],
                run_id=key[3],
                node=node,
                gpus=tuple(g[1] for g in gkeys),
                epoch=epoch,
                epochs=planned,
                utilization_ratio=None if util_sum is None else util_sum / len(n_util),
                memory_used_bytes=total(memory),
                memory_total_bytes=_finite_sum([gpu_total[g] for g in gkeys if g in gpu_total]),
                start_timestamp=start,
                elapsed_seconds=elapsed(start, now),
                last_report_timestamp=last_report.get(key),
                eta=Band(band.get("p10"), band.get("p50"), band.get("p90")),
                method=methods.get(key, ""),
                stalled=stalled.get(key, 0.0) >= 1,
                idle=any((g, ckey) in idle_holders for g in gkeys),
                unit=unit,
                forecast_stale=forecast is not None and forecast.stale,
            )
        )
    jobs.sort(key=lambda j: (j.eta.p50 is None, j.eta.p50 or 0.0, j.namespace, j.pod))

    idle_rows = [
        HolderRow(
            namespace=ckey[0],
            pod=ckey[1],
            container=ckey[2],
            node=gkey[0],
            gpu=gkey[1],
            utilization_ratio=util_avg.get((gkey, ckey), util.get((gkey, ckey))),
            memory_used_bytes=memory.get((gkey, ckey)),
            held_seconds=elapsed(since.get((gkey, ckey)), now),
            training=ckey in training_containers,
        )
        # by node and GPU index as numbers, as the GPU list (as text, n1/10 came before n1/2)
        for (gkey, ckey) in sorted(idle_holders, key=lambda hk: (_gpu_order(hk[0]), hk[1]))
    ]

    # The forecaster's free time is per physical GPU; under MIG each instance is its own
    # row, and the GPU's time applies to its busy instances. A band is only the GPU's
    # free time while it describes the current holders: the forecaster publishes one
    # only when every pod on the GPU has a forecast, so a band next to a holder without
    # one is left over from an earlier holder set (a pod that just replaced a finished
    # one) and is not shown; a band for a GPU nobody holds is not shown either.
    free = _bands(get("gpu_free"), _physical_key, forecasters)
    forecast_pods = {(k[0], k[1]) for k, b in eta.items() if "p50" in b.band}
    holders_of: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
    # each device's holders, gathered once: asked per device of the whole holder set,
    # a refresh took seconds on a large cluster (4,000 GPUs, 5,000 pods: 2 s)
    held_by_device: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    for g, ck in holders:
        holders_of.setdefault(_physical(g), set()).add(ck)
        held_by_device.setdefault(g, []).append(ck)
    gpus: list[GpuRow] = []
    info = {_gpu_key(s.labels): s.labels.get("model", "") for s in get("gpu_info")}
    unknown_nodes = holders_unknown(get("holders_unknown"))
    unanswered_cause = refused_cause(refused, *HOLDER_QUERIES, late=late)
    util_unknown = refused_cause(refused, UTIL_QUERY, late=late)
    device_util: dict[tuple[str, str, str], float] = {}
    for s in get("gpu_util"):
        if (v := _value(s)) is not None:
            gk = _gpu_key(s.labels)
            device_util[gk] = max(v, device_util.get(gk, v))
    # pods whose processes run on a device with no allocation there (the exporter's
    # per-pod series without gpu_eta_pod_gpu_allocated, docs/attribution.md)
    unallocated: dict[tuple[str, str, str], set[str]] = {}
    for g, ck in (*util, *memory):
        if (g, ck) not in holders:
            unallocated.setdefault(g, set()).add(f"{ck[0]}/{ck[1]}")
    for gkey in sorted(set(info) | set(held_by_device), key=_gpu_order):
        held_by = sorted(held_by_device.get(gkey, ()))
        names = tuple(f"{ns}/{pod}" for ns, pod, _ in held_by)
        siblings = holders_of.get(_physical(gkey), set())
        unforecast = {ck for ck in siblings if ck[:2] not in forecast_pods}
        free_band = free.get(_physical(gkey)) if held_by and not unforecast else None
        band = {} if free_band is None else free_band.band
        if not held_by:
            causes = [c for c in (unknown_nodes.get(gkey[0], ""), unanswered_cause) if c]
            state, note = free_state(
                " and ".join(causes),
                device_util.get(gkey),
                sorted(unallocated.get(gkey, ())),
                idle_threshold,
                util_unknown,
            )
        elif all((gkey, ck) in idle_holders for ck in held_by):
            state = "idle"
            note = "held, unused"
        else:
            state, note = "busy", ""
        if held_by and not band and state != "idle":
            # an idle holder (a notebook) never has a forecast: "held, unused" says it all
            if any(ck in unforecast for ck in held_by):
                why = "no forecast for a holder"
            elif unforecast:
                why = "no forecast for a holder of another MIG instance"
            else:
                why = "no GPU forecast yet"
            note = (note + "; " if note else "") + why
        gpus.append(
            GpuRow(
                node=gkey[0],
                gpu=gkey[1],
                uuid=gkey[2],
                model=info.get(gkey, ""),
                holders=names,
                state=state,
                free_at=Band(band.get("p10"), band.get("p50"), band.get("p90")),
                note=note,
                forecast_stale=free_band is not None and free_band.stale,
            )
        )
    return View(
        timestamp=now,
        prometheus_url=prometheus_url,
        jobs=tuple(jobs),
        idle=tuple(idle_rows),
        gpus=tuple(gpus),
        alerts=_firing(get("alerts")),
        pending=pending_rows(results, forecasters),
        allocations_unknown=refused_cause(refused, "allocated", late=late),
        idle_unknown=idle_unknown,
        held_unknown=refused_cause(refused, "since", late=late),
        alerts_unknown=refused_cause(refused, "alerts", late=late),
        training_unknown=refused_cause(refused, "epoch", "step", late=late),
        pending_unknown=refused_cause(refused, "pending_info", late=late),
        forecast_timestamp=forecasters.cycle,
        forecaster_failed=any(f.failed for f in forecasters.by_source.values()),
        forecasts_stale=any(f.stale for f in forecasters.by_source.values()),
        forecasters=tuple(forecasters.by_source.values()),
    )


# How old the forecaster's last good cycle may be before its forecasts are stale: the
# alert rules' forecaster_stale_seconds (GpuEtaForecasterStale, rules/gpu-eta.rules.yaml),
# copied (top works without the rules; tests/top/test_top.py holds the two equal).
FORECASTER_STALE_SECONDS = 900.0


def forecaster_states(samples: Sequence[Sample], now: float) -> tuple[ForecasterState, ...]:
    """Each forecaster of the ``forecaster_cycle`` query's answer (one ``last_success``
    and one ``stale`` series per job and instance), sorted by (job, instance), with its
    own judgement: its forecasts are stale when its last good cycle ended more than
    ``FORECASTER_STALE_SECONDS`` before ``now`` or it reports
    ``gpu_eta_forecaster_stale 1``, as GpuEtaForecasterStale judges. Pure.

    Why: a forecaster whose cycles fail keeps serving its last set, and its ETAs and
    free times looked as current as a healthy one's. Why each alone: judged together,
    a forecaster that stopped hours ago hid behind a healthy one's newer success, and
    one reporting a failed cycle made every other's forecasts stale."""
    cycles: dict[Source, float | None] = {}
    failed: dict[Source, bool] = {}
    for s in samples:
        v = _value(s)
        if v is None:
            continue
        src = _source(s.labels)
        cycles.setdefault(src, None)
        failed.setdefault(src, False)
        series = s.labels.get("series")
        if series == "stale":
            failed[src] = failed[src] or v == 1
        elif series == "last_success":
            held = cycles[src]
            cycles[src] = v if held is None else max(held, v)
    return tuple(
        ForecasterState(*src, cycle, failed[src], _stale(cycle, failed[src], now))
        for src, cycle in sorted(cycles.items())
    )


def judged_together(
    states: Sequence[ForecasterState], now: float
) -> tuple[float | None, bool, bool]:
    """(the end of the newest last good cycle, whether one reports its last cycle
    failed, whether forecasts are stale) of every forecaster of ``states`` taken as
    one: how a forecast is judged whose forecaster is not known (its job and instance
    are no forecaster's). (None, False, False) without any. Pure."""
    cycles = [f.last_success_timestamp for f in states if f.last_success_timestamp is not None]
    cycle = max(cycles, default=None)
    failed = any(f.failed for f in states)
    return cycle, failed, _stale(cycle, failed, now)


def _stale(cycle: float | None, failed: bool, now: float) -> bool:
    """Forecasts are stale when their forecaster reports its last cycle failed or its
    last good cycle ended more than ``FORECASTER_STALE_SECONDS`` before ``now``."""
    return failed or (cycle is not None and now - cycle > FORECASTER_STALE_SECONDS)


def _forecasters(samples: Sequence[Sample], now: float) -> Forecasters:
    """``Forecasters`` of the ``forecaster_cycle`` query's answer. Pure."""
    states = forecaster_states(samples, now)
    cycle, _, stale = judged_together(states, now)
    return Forecasters({(f.job, f.instance): f for f in states}, cycle, stale)


def refused_cause(refused: Collection[str], *names: str, late: Collection[str] = ()) -> str:
    """Why what ``names`` answer is unknown, ``query a, b refused``, naming those of
    them Prometheus refused, and ``query c not answered in time`` those a refresh's
    deadline left out (``late``), joined by ``; ``; empty when neither. Pure."""
    said = [name for name in names if name in refused]
    slow = [name for name in names if name in late and name not in refused]
    causes = [
        f"query {', '.join(which)} {why}"
        for which, why in ((said, "refused"), (slow, "not answered in time"))
        if which
    ]
    return "; ".join(causes)


# How far from the workstation's clock a sample's stamp may be and still be the server's
# time (the forecaster's bound on Prometheus' Date): a stamp in milliseconds (1000 times
# as far) or past year 9999 is no time at all, and as "now" it ended top in a traceback.
MAX_CLOCK_OFFSET_SECONDS = MAX_OFFSET_SECONDS


def plausible_stamp(stamp: float, clock: float | None) -> bool:
    """Whether ``stamp`` can be the server's time, seen from a workstation whose clock
    reads ``clock`` (``None``: any finite stamp). Pure."""
    if clock is None:
        return math.isfinite(stamp)
    return abs(stamp - clock) <= MAX_CLOCK_OFFSET_SECONDS


def elapsed(start: float | None, now: float) -> float | None:
    """Seconds from a run's ``start`` to ``now``: 0 for a start ahead of ``now`` (a
    node's clock a little ahead), None for one no clock could give
    (``plausible_stamp``: a start of -1e18 read as 11574074094867 days). Pure."""
    if start is None or not plausible_stamp(start, now):
        return None
    return max(0.0, now - start)


def evaluation_time(
    results: Mapping[str, Sequence[Sample]], clock: float | None = None
) -> float | None:
    """The server's "now" of one refresh: the latest evaluation time its answers carry
    (each sample of an instant vector is stamped with the time the query was evaluated
    at); ``None`` when no answer has a sample. ``clock``: the workstation's, and stamps
    too far from it to be a clock's (``plausible_stamp``) are not read. Pure.

    Why: run starts, forecasts and allocation starts are the server's times; measured
    against a workstation whose clock is off (a laptop, a VM), elapsed times, the
    countdowns and ``due``/``overdue`` were off by as much. The stamps come with the
    answers: no extra query."""
    return max(
        (
            s.timestamp
            for items in results.values()
            for s in items
            if plausible_stamp(s.timestamp, clock)
        ),
        default=None,
    )


def off_clock(results: Mapping[str, Sequence[Sample]], clock: float) -> tuple[str, ...]:
    """An error line when some samples' stamps are too far from the workstation's
    ``clock`` to be the server's time (``plausible_stamp``): how many and one of them;
    none when all are. Pure."""
    bad = [s.timestamp for items in results.values() for s in items]
    bad = [t for t in bad if not plausible_stamp(t, clock)]
    if not bad:
        return ()
    years = MAX_CLOCK_OFFSET_SECONDS / (366 * 86400)
    noun = "sample" if len(bad) == 1 else "samples"
    return (
        f"{len(bad)} {noun} stamped {bad[0]:g}, more than {years:g} years from this "
        "workstation's clock: not read as the server's time (a proxy's answer, or "
        "milliseconds)",
    )


def holders_unknown(samples: Sequence[Sample]) -> dict[str, str]:
    """Node -> why the holders of its devices are unknown, from the ``holders_unknown``
    query (top/queries.py: one sample per scrape and cause). ``podresources``: no
    collector success in 5 min, so its allocations are old or none (never succeeded).
    ``unresolved`` (value: how many): kubelet allocations whose device id names no
    device NVML lists give their pods no allocation rows, so a device they hold looks
    held by no pod. Any scrape of the node is enough (two jobs answer alike); the
    largest count is said. A node not in the answer has known holders. Pure."""
    failing: set[str] = set()
    unresolved: dict[str, int] = {}
    for s in samples:
        node, cause, v = s.labels.get("node", ""), s.labels.get("cause"), _value(s)
        if cause == "podresources":
            failing.add(node)
        elif cause == "unresolved" and v is not None and v > 0:
            unresolved[node] = max(int(v), unresolved.get(node, 0))
    out = {}
    for node in sorted(failing | set(unresolved)):
        causes = ["podresources collector failing on this node"] if node in failing else []
        if n := unresolved.get(node):
            noun = "allocation on this node names" if n == 1 else "allocations on this node name"
            causes.append(f"{n} kubelet {noun} no device")
        out[node] = " and ".join(causes)
    return out


def fmt_ratio(r: float | None) -> str:
    """A 0..1 ratio as a percentage rounded down: one decimal below 10 % (``4.6%``), a
    whole one from there (``97%``); ``0%`` for none at all; ``-`` for a negative one
    and ``>100%`` above 1, neither a share of a device. Why down, and the decimal:
    the idle threshold (5 %) lies there, and a holder at 0.046, idle, read ``5%``."""
    if r is None or not math.isfinite(r * 1000) or r < 0:
        return "-"
    if r > 1:  # no share of a device is more than all of it: 1e300 printed 301 digits
        return ">100%"
    if r == 0:
        return "0%"
    tenths = math.floor(round(r * 1000, 6))  # round first: 0.29 * 100 is 28.999…
    if abs(tenths) < 100:
        return f"{tenths / 10:.1f}%"
    return f"{math.floor(round(r * 100, 6))}%"


def free_state(
    holders_unknown: str,
    utilization_ratio: float | None,
    users: Sequence[str],
    in_use_ratio: float = 0.05,
    utilization_unknown: str = "",
) -> tuple[str, str]:
    """(state, note) of a device no pod holds. ``holders_unknown``: why its node's
    holders are unknown (``holders_unknown()``; empty: known), so "no holder" may be
    "not known": without any good List the exporter has no allocation at all, and an
    allocation naming no device gives its pod no row, so every device it holds looked
    free. A device whose own utilisation is at least ``in_use_ratio`` is used by
    something that was not allocated it as far as known (``users``: the pods whose
    processes the exporter saw on it; a process outside Kubernetes has none), a free
    GPU that is not.

    Why ``in_use_ratio`` (top's ``--idle-threshold``, 5 %): below it a held GPU is
    idle, unused, and GpuEtaGpuUsedWithoutAllocation (``idle_utilization_ratio``,
    docs/alerts.md) calls a free one unused too: a driver check or a process ending
    after its pod released the device is a few percent, nobody working there.

    ``utilization_unknown``: why the device's own utilisation is not known (the
    ``gpu_util`` query refused; empty: answered, so no reading means unused). Then the
    note says "use unknown", not "free now": that a free device is unused is a reading
    too, and without it a device a pod uses without an allocation read as unused."""
    in_use = ""
    if utilization_ratio is not None and utilization_ratio >= in_use_ratio:
        in_use = f"in use: util {fmt_ratio(utilization_ratio)}"  # as UTIL is
        if users:
            in_use += f" by {', '.join(users)}"
    elif utilization_ratio is None and utilization_unknown:
        in_use = f"use unknown: {utilization_unknown}"
    if holders_unknown:
        note = f"holders unknown: {holders_unknown}"
        return "unknown", note + (f"; {in_use}" if in_use else "")
    return "free", f"free to Kubernetes, {in_use}" if in_use else "free now"


# The most series of one alert ``top`` believes firing: a count Prometheus makes of its
# own ALERTS series, so anything near it is no count (1e300 printed 301 digits).
MAX_FIRING = 1_000_000


def _firing(samples: Sequence[Sample]) -> tuple[tuple[str, int], ...]:
    """(alertname, how many firing), sorted by name; malformed samples (no name, not a
    count from 1 to ``MAX_FIRING``) skipped."""
    out = {}
    for s in samples:
        name = s.labels.get("alertname", "")
        value = _value(s)
        if name and value is not None and 0 < value <= MAX_FIRING:
            out[name[:128]] = int(value)
    return tuple(sorted(out.items()))


def pending_rows(
    results: Mapping[str, Sequence[Sample]], forecasters: Forecasters | None = None
) -> tuple[PendingRow, ...]:
    """Pods waiting for GPUs, soonest predicted start first (no prediction last).
    ``forecasters``: whose forecasts are stale, and each one's last good cycle, the
    end of the cycle that made a pod's start (None: none known)."""
    if forecasters is None:
        forecasters = Forecasters({}, None, False)
    pod_key = lambda labels: (labels.get("namespace", ""), labels.get("pod", ""))  # noqa: E731
    start_samples = results.get("pending_start") or ()
    starts = _bands(start_samples, pod_key, forecasters)
    # the end of the cycle that made each start: its forecasters' (the newest)
    made: dict[tuple[str, str], float] = {}
    for s in start_samples:
        key, src = pod_key(s.labels), _source(s.labels)
        start = starts.get(key)
        if start is None or forecasters.stale_of(src) != start.stale:
            continue  # not a forecaster its band is of
        if (c := forecasters.cycle_of(src)) is not None:
            made[key] = max(c, made.get(key, c))
    created = {pod_key(s.labels): _value(s) for s in results.get("pending_created") or ()}
    rows = []
    seen: set[tuple[str, str]] = set()
    # one row per pod: a forecaster scraped twice (a ServiceMonitor and an annotation
    # scrape, two Prometheus replicas behind one endpoint) gives each pod two series,
    # differing in job or instance; a current forecaster's before a stale one's, then
    # the one whose labels sort first is kept, so the row does not flip between
    # refreshes however Prometheus orders its answer
    for s in sorted(
        results.get("pending_info") or (),
        key=lambda s: (forecasters.stale_of(_source(s.labels)), sorted(s.labels.items())),
    ):
        key = pod_key(s.labels)
        if key in seen:
            continue
        seen.add(key)
        forecast = starts.get(key)
        band = {} if forecast is None else forecast.band
        # without a start, the cycle of its status' forecaster
        cycle = made.get(key) if forecast is not None else forecasters.cycle_of(_source(s.labels))
        rows.append(
            PendingRow(
                namespace=key[0],
                pod=key[1],
                resource=s.labels.get("resource", ""),
                gpus=s.labels.get("gpus", ""),
                status=s.labels.get("status", ""),
                created_timestamp=created.get(key),
                start=Band(band.get("p10"), band.get("p50"), band.get("p90")),
                cycle_timestamp=cycle,
                forecast_stale=forecast is not None and forecast.stale,
            )
        )
    # the pending GPU pods KSM shows and no forecaster publishes (rejected, past
    # --pending.max-pods, or no forecaster reading the queue): a row each, not a table
    # saying no pod waits
    for s in results.get("pending_created") or ():
        key = pod_key(s.labels)
        if key in seen or not all(key):
            continue
        seen.add(key)
        rows.append(
            PendingRow(
                namespace=key[0],
                pod=key[1],
                resource="",
                gpus="",
                status=NO_PREDICTION,
                created_timestamp=created.get(key),
                start=Band(None, None, None),
            )
        )
    rows.sort(key=lambda r: (r.start.p50 is None, r.start.p50 or 0.0, r.namespace, r.pod))
    return tuple(rows)


_DIGIT_RUNS = re.compile(r"([0-9]+)")  # ASCII digits: "²".isdigit() is true too


def natural(text: str) -> tuple[tuple[int, int, str, str], ...]:
    """``text``'s sort key with each run of digits read as a number, as a person orders
    names: ``gpu-node-2`` before ``gpu-node-10``. Compared by length, then digits, so a
    run of thousands of digits (a label is up to 4,096 characters) needs no ``int``.
    Pure."""
    return tuple(
        (0, len(p.lstrip("0")), p.lstrip("0"), p) if i % 2 else (1, 0, p, "")
        for i, p in enumerate(_DIGIT_RUNS.split(text))
        if p
    )


def _gpu_order(gkey: tuple[str, str, str]) -> tuple:
    """Node (``natural``: gpu-node-2 < gpu-node-10), then GPU index, then MIG instance
    id, numerically (2 < 10, 7/5 < 7/13). Why the node too: beside GPU indexes in
    numeric order, node-10 listed before node-2 read as a mistake."""
    gpu, _, instance = gkey[1].partition("/")

    def num(text: str) -> tuple[int, str]:
        # ASCII only: "²".isdigit() is true, and int("²") raises
        return (int(text), "") if text.isascii() and text.isdigit() else (1 << 30, text)

    return (natural(gkey[0]), num(gpu), num(instance) if instance else (-1, ""), gkey[2])


def only_namespaces(view: View, namespaces: Collection[str]) -> View:
    """``view`` with its jobs, idle holders and pending pods those of ``namespaces``
    (all when empty). Every GPU stays: when a GPU frees up is everyone's question,
    whoever holds it; a GPU's holders outside ``namespaces`` are still named.

    Why: on a shared cluster a user asks after their own runs and pods ("is my job
    nearly done, when does my pod start"), the way ``kubectl -n`` narrows a listing."""
    if not namespaces:
        return view
    keep = set(namespaces)
    return replace(
        view,
        jobs=tuple(j for j in view.jobs if j.namespace in keep),
        idle=tuple(h for h in view.idle if h.namespace in keep),
        pending=tuple(p for p in view.pending if p.namespace in keep),
        namespaces=tuple(sorted(keep)),
    )
