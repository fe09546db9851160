"""The only Prometheus collector of the forecaster: ``ServiceState`` → metric families.

Families are built from the last good ``ForecastSet`` (the exporter guide's advice:
no global gauges, so series of finished jobs disappear instead of lingering):
``ForecastCollector`` on each scrape (``once``, tests), ``Exposition`` once per set
and format (``serve``). Rendering is total: it does no I/O and never raises.

``gpu_eta_job_predicted_remaining_seconds`` is computed at scrape time from the
fixed predicted completion (``max(0, completion - now)``), so both series agree.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from gpu_eta.common.text import utf8_encodable
from gpu_eta.forecaster.calibration import BINS
from gpu_eta.forecaster.forecast import QUANTILES, ForecastSet
from gpu_eta.forecaster.history_space import HistorySpace
from gpu_eta.forecaster.methods import PLANLESS_METHODS
from gpu_eta.forecaster.pending import PendingSet, describe, error_counts, left_out
from gpu_eta.forecaster.release_lags import ReleaseSummary
from gpu_eta.forecaster.series import QueryStats

log = logging.getLogger(__name__)


def _version() -> str:
    """The installed gpu-eta version (``unknown`` when run from a bare checkout)."""
    try:
        return importlib.metadata.version("gpu-eta")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


VERSION = _version()
_JOB_LABELS = ["namespace", "pod", "container", "run_id"]
# gpu_eta_forecaster_job_errors_total{reason}: a series left out because a label value
# cannot be encoded (``publishable``)
UNENCODABLE = "unencodable_label"
# namespaces remembered as showing no toleration series (pending pods come from a few),
# and how long one is remembered without a pod of it pending (its pods gone, or the
# namespace: a pipeline's or a user's that is deleted must not stay named for ever)
MAX_NAMESPACES_MARKED = 256
NAMESPACE_MARK_SECONDS = 3600.0


def _marked(
    marks: dict[str, float], seen: Iterable[str], cleared: Iterable[str], now: float
) -> list[str]:
    """Update ``marks`` (name → when last seen) with one cycle's names ``seen``, drop those
    ``cleared`` and those not seen for ``NAMESPACE_MARK_SECONDS``, keep at most
    ``MAX_NAMESPACES_MARKED`` (the least recently seen go first); the names left, sorted.
    A cycle that says nothing of a name (no pod of it pending) leaves its mark."""
    for name in cleared:
        marks.pop(name, None)
    for name in seen:
        marks[name] = now
    for name in [n for n, at in marks.items() if at < now - NAMESPACE_MARK_SECONDS]:
        del marks[name]
    excess = len(marks) - MAX_NAMESPACES_MARKED
    for name in sorted(marks, key=marks.__getitem__)[: max(excess, 0)]:
        del marks[name]
    return sorted(marks)


@dataclass
class ServiceState:
    """What the service knows between cycles; written by the cycle thread only."""

    forecasts: ForecastSet | None = None
    stale: bool = False
    cycle_duration_seconds: float | None = None
    last_success_timestamp: float | None = None
    job_errors: Counter[str] = field(default_factory=Counter)
    query_stats: QueryStats = field(default_factory=QueryStats)
    last_error: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # the queue's pods left out as last logged (pending.left_out)
    _queue_left_out: tuple[tuple[str, int], ...] = field(default=(), repr=False)
    # namespaces whose pending pods were last seen without toleration series → when
    _tolerations_missing: dict[str, float] = field(default_factory=dict, repr=False)
    # nodeSelector keys last seen not checked against node labels → when
    _selectors_unchecked: dict[str, float] = field(default_factory=dict, repr=False)
    _unencodable: int = field(default=0, repr=False)  # as last logged
    # the history file's size and its volume's room, read after the last cycle (a failed
    # one too: a full volume fails every cycle); None before the first or without a file
    _history_space: HistorySpace | None = field(default=None, repr=False)

    def note_history(self, space: HistorySpace | None) -> None:
        """Keep the history's space as read after a cycle (``Service``)."""
        with self._lock:
            self._history_space = space

    def history_space(self) -> HistorySpace | None:
        """The history's space as last noted."""
        with self._lock:
            return self._history_space

    def success(self, fs: ForecastSet, duration_seconds: float, at: float) -> None:
        """Record a good cycle: its set replaces the old one, stale clears.

        The set is kept without the rows whose labels cannot be encoded
        (``publishable``): one such row would otherwise fail the encoding of every
        forecast. Those rows and the queue's pods left without a prediction (past
        ``--pending.max-pods``, or unusable series) are counted in ``job_errors``, and
        logged when what is left out changes, not every cycle.
        """
        try:
            fs, unencodable = publishable(fs)
        except Exception as err:  # the set is published anyway (render falls back)
            log.warning("cannot check the forecasts' label values: %s", err)
            unencodable = 0
        with self._lock:
            self.forecasts = fs
            self.stale = False
            self.cycle_duration_seconds = duration_seconds
            self.last_success_timestamp = at
            self.job_errors.update(fs.job_errors)
            self.job_errors.update(error_counts(fs.pending))
            if unencodable:
                self.job_errors[UNENCODABLE] += unencodable
            self.last_error = ""
        if unencodable != self._unencodable:
            self._unencodable = unencodable
            if unencodable:
                log.warning(
                    "%d %s not published: a label value is not valid Unicode (counted as "
                    "job_errors reason %s)",
                    unencodable,
                    "job, GPU or pending pod" if unencodable == 1 else "jobs, GPUs or pending pods",
                    UNENCODABLE,
                )
        if fs.pending is not None:
            self._log_queue(fs.pending, at)

    def _log_queue(self, pending: PendingSet, now: float) -> None:
        """Log what the queue leaves out when it changed (``pending.left_out``).

        Whether toleration series are missing is known per namespace, and only from
        that namespace's pending pods (series are often dropped for some namespaces
        only): a namespace is marked when a pod of it shows none and cleared when one
        shows its tolerations; a cycle without its pods leaves it as it was. So a queue
        that empties and refills, or whose pods come from other namespaces for a while,
        does not log the WARNING again each time nor say "back" without evidence. No
        tainted GPU node: nothing is ignored, every mark cleared. A mark not renewed for
        ``NAMESPACE_MARK_SECONDS`` (no pod of it pending without tolerations since) is
        forgotten: its pods, or the namespace, are gone. At most
        ``MAX_NAMESPACES_MARKED`` are kept, the least recently renewed forgotten first.
        The nodeSelector keys not checked against node labels are kept the same way, by
        key: marked while a pending pod selects one, cleared once a pod's is checked.
        """
        marked = self._tolerations_missing
        if not pending.tainted_nodes:
            marked.clear()
        else:
            _marked(marked, pending.tolerations_missing, pending.tolerations_read, now)
        keys = _marked(
            self._selectors_unchecked, pending.selectors_unchecked, pending.selectors_checked, now
        )
        pending = replace(
            pending,
            tolerations_missing=tuple(sorted(marked)),
            selectors_unchecked={k: pending.selectors_unchecked.get(k, 0) for k in keys},
        )
        if left_out(pending) != self._queue_left_out:
            self._queue_left_out = left_out(pending)
            line = describe(pending)
            if line:
                log.warning("GPU queue: %s", line)
            else:
                log.info("GPU queue: no pending pod or series is left out any more")

    def failure(self, message: str, duration_seconds: float) -> None:
        """Record a failed cycle: the previous set stays, marked stale."""
        with self._lock:
            self.stale = self.forecasts is not None
            self.cycle_duration_seconds = duration_seconds
            self.job_errors["cycle_failed"] += 1
            self.last_error = message

    def snapshot(
        self,
    ) -> tuple[ForecastSet | None, bool, float | None, float | None, dict, QueryStats]:
        """A consistent copy for one scrape."""
        with self._lock:
            return (
                self.forecasts,
                self.stale,
                self.cycle_duration_seconds,
                self.last_success_timestamp,
                dict(self.job_errors),
                replace(self.query_stats),
            )


def publishable(fs: ForecastSet) -> tuple[ForecastSet, int]:
    """``fs`` without the jobs, GPUs, pending pods, requests and largest requests that
    carry a label value the exposition cannot encode, and how many were left out (``fs``
    itself when none).

    Why: label values come from Prometheus' JSON, where an escape such as ``"\\ud800"``
    decodes to a lone surrogate that UTF-8 cannot encode; the encoder then fails the
    whole body, and one such pod name left every forecast unpublished. Such a value
    cannot be a Kubernetes name, so the row is skipped (and counted), not repaired.
    """
    jobs = tuple(
        j
        for j in fs.jobs
        if _encodable(j.run.namespace, j.run.pod, j.run.container, j.run.run_id, j.forecast.method)
    )
    gpus = tuple(g for g in fs.gpus if _encodable(g.node, g.gpu, g.uuid))
    bad = len(fs.jobs) - len(jobs) + len(fs.gpus) - len(gpus)
    pending = fs.pending
    if pending is not None:
        pods = tuple(p for p in pending.pods if _encodable(p.namespace, p.pod, p.resource))
        requests = {
            r: pred for r, pred in pending.requests.items() if _encodable(r.product, r.resource)
        }
        largest = {k: n for k, n in pending.largest_requests.items() if _encodable(*k)}
        dropped = (
            len(pending.pods)
            - len(pods)
            + len(pending.requests)
            - len(requests)
            + len(pending.largest_requests)
            - len(largest)
        )
        if dropped:
            bad += dropped
            pending = replace(pending, pods=pods, requests=requests, largest_requests=largest)
    if not bad:
        return fs, 0
    return replace(fs, jobs=jobs, gpus=gpus, pending=pending), bad


def _encodable(*values: str) -> bool:
    """True when every value is a str that encodes as UTF-8 (no lone surrogate)."""
    return all(isinstance(v, str) and utf8_encodable(v) for v in values)


class ForecastCollector(Collector):
    """Renders a ``ServiceState`` as the forecaster metrics of docs/metrics.md."""

    def __init__(
        self,
        state: ServiceState,
        clock: Callable[[], float] = time.time,
        self_only: bool = False,
        for_push: bool = False,
    ) -> None:
        self.state = state
        self.clock = clock
        self.self_only = self_only
        self.for_push = for_push

    def collect(self) -> Iterator[Metric]:
        try:
            yield from render(self.state, self.clock(), self.self_only, self.for_push)
        except Exception:  # rendering must never fail a scrape
            return

    def describe(self) -> Iterator[Metric]:
        return iter(())


class QuantileFamily(Metric):
    """Quantiles of a predicted distribution, exposed with ``TYPE summary``.

    Prometheus reserves the ``quantile`` label for summaries (``promtool check
    metrics`` rejects it on gauges), and P10/P50/P90 of a predicted end time are
    exactly quantiles of a distribution. There is no ``_sum``/``_count`` (both
    optional in the exposition formats): PromQL sees plain series
    ``name{quantile="0.5"}``, as the contract in docs/metrics.md says.

    What is pushed to a Pushgateway is typed ``untyped`` instead (``untyped_quantiles``).
    """

    def __init__(self, name: str, documentation: str, labels: Sequence[str]) -> None:
        super().__init__(name, documentation, "summary")
        self._labelnames = (*labels, "quantile")

    def add_metric(self, labels: Sequence[str], quantile: str, value: float) -> None:
        """One quantile sample; ``labels`` in the order given at construction."""
        values = (*labels, quantile)
        self.add_sample(self.name, dict(zip(self._labelnames, values, strict=True)), value)


def render(
    state: ServiceState, now: float, self_only: bool = False, for_push: bool = False
) -> list[Metric]:
    """All families for one scrape; ``self_only`` keeps the self-monitoring ones;
    ``for_push``: the quantile families untyped (``untyped_quantiles``), and without the
    release observations' counter: a ``once`` run is a new process whose one cycle
    learns no lag (it takes two reads of a pod), so its counts start from 0 each run,
    which pushed would read as a counter reset every run."""
    fs, stale, duration, last_ok, errors, queries = state.snapshot()
    families: list[Metric] = []
    if not self_only:
        head, remaining, tail = forecast_families(fs, now)
        families += [*head, remaining, *tail]
    families += self_families(stale, duration, last_ok, errors, queries, state.history_space())
    if not for_push:
        return families
    return untyped_quantiles([f for f in families if f.name != RELEASE_OBSERVATIONS])


def untyped_quantiles(families: list[Metric]) -> list[Metric]:
    """``families``, every ``QuantileFamily`` among them retyped ``untyped`` in place
    (each ``render`` builds its families anew: nothing else holds them).

    Why: the Pushgateway re-exposes a summary with ``<name>_sum 0`` and
    ``<name>_count 0`` added to each label set when they were not pushed, so Prometheus
    would store two zero series per job, GPU and pending pod and family that
    docs/metrics.md does not have. Pushed untyped, the gateway passes the quantile
    samples through as they are. ``serve`` keeps ``summary``, which ``promtool check
    metrics`` takes with the ``quantile`` label.
    """
    for fam in families:
        if isinstance(fam, QuantileFamily):
            fam.type = "unknown"
    return families


def forecast_families(
    fs: ForecastSet | None, now: float
) -> tuple[list[Metric], QuantileFamily, list[Metric]]:
    """The families that follow from one ``ForecastSet``: (before, remaining, after).

    Only ``gpu_eta_job_predicted_remaining_seconds`` depends on ``now`` (the clock; the
    remaining seconds count from it plus the set's ``clock_offset_seconds``, on the
    time the completions are on); the others are fixed for a set, so ``Exposition``
    encodes them once per set.
    """
    completion = QuantileFamily(
        "gpu_eta_job_predicted_completion_timestamp_seconds",
        "Predicted end of a training run (unix seconds) at P10/P50/P90; never in the past when fresh.",
        _JOB_LABELS,
    )
    remaining = QuantileFamily(
        "gpu_eta_job_predicted_remaining_seconds",
        "Seconds until the predicted end of a training run at P10/P50/P90 (computed at scrape time).",
        _JOB_LABELS,
    )
    info = GaugeMetricFamily(
        "gpu_eta_job_forecast_info",
        "Which estimator produced the run's forecast (rate, prior, blend; for a run that "
        "reports no planned total, from completed runs' durations: "
        + ", ".join(PLANLESS_METHODS)
        + ").",
        labels=[*_JOB_LABELS, "method"],
    )
    stalled = GaugeMetricFamily(
        "gpu_eta_job_stalled",
        "1 when the run made no progress with its GPU idle: ETA held, interval widened.",
        labels=_JOB_LABELS,
    )
    gpu_free = QuantileFamily(
        "gpu_eta_gpu_predicted_free_timestamp_seconds",
        "When every pod on the GPU is predicted to be done (unix seconds); absent when a pod on it, or a GPU-holding container of such a pod, has no forecast.",
        ["node", "gpu", "UUID"],
    )
    mape = GaugeMetricFamily(
        "gpu_eta_model_median_absolute_percentage_error_ratio",
        "Median absolute percentage error of remaining time, measured on finished jobs, by progress point.",
        labels=["progress"],
    )
    coverage = GaugeMetricFamily(
        "gpu_eta_model_interval_coverage_ratio",
        "Share of finished jobs whose real end fell inside P10-P90 (target 0.8), by progress point.",
        labels=["progress"],
    )
    history = GaugeMetricFamily("gpu_eta_model_history_jobs", "Finished jobs in the history store.")
    persisted = GaugeMetricFamily(
        "gpu_eta_forecaster_history_persisted",
        "1 while the history file is written; 0 when it cannot be (read-only) and the forecaster works on an in-memory copy whose new history is lost at restart.",
    )
    skipped_rows = GaugeMetricFamily(
        "gpu_eta_forecaster_history_rows_skipped",
        "Rows of the history file the last reads and the last write left out as damaged (kept in the file as they are; the log names the first).",
    )
    skipped_updates = GaugeMetricFamily(
        "gpu_eta_forecaster_history_updates_skipped",
        "Run updates the last history write left out, by reason: text SQLite cannot store (a label with a lone surrogate), a number no run can hold (a plan not finite and above 0, a start or time seen not finite); the log names the first.",
        labels=["reason"],
    )
    future_runs = GaugeMetricFamily(
        "gpu_eta_forecaster_history_future_runs",
        "Finished runs of the history file the last read left out as finishing after the cycle's time by more than 5 minutes (stamped by a clock that was ahead); kept in the file, read once that time comes.",
    )
    jobs_g = GaugeMetricFamily(
        "gpu_eta_forecaster_jobs", "Jobs seen in the last good cycle by state.", labels=["state"]
    )
    held = GaugeMetricFamily(
        "gpu_eta_forecaster_runs_held",
        "Runs of the last good cycle forecast from a scrape gap: hidden by a failed scrape of their exporter (up == 0) or its target's removal (no up), held from their last samples for up to 5 minutes.",
    )
    clock = GaugeMetricFamily(
        "gpu_eta_forecaster_prometheus_clock_offset_seconds",
        "Prometheus' clock minus the forecaster's, from the Date header of the last good cycle's answers (within about a second); beyond 30 s the cycle reads and forecasts at Prometheus' time.",
    )
    if fs is not None:
        now += fs.clock_offset_seconds
        for job in fs.jobs:
            run = job.run
            base = [run.namespace, run.pod, run.container, run.run_id]
            for q, ts in zip(QUANTILES, job.completion_timestamps, strict=True):
                completion.add_metric(base, _q(q), ts)
                remaining.add_metric(base, _q(q), max(0.0, ts - now))
            info.add_metric([*base, job.forecast.method], 1.0)
            stalled.add_metric(base, 1.0 if job.forecast.stalled else 0.0)
        for gpu in fs.gpus:
            for q, ts in zip(QUANTILES, gpu.timestamps, strict=True):
                gpu_free.add_metric([gpu.node, gpu.gpu, gpu.uuid], _q(q), ts)
        for point in BINS:
            measured = _lookup(fs.quality, point)
            if measured is None:
                continue
            err, cov = measured
            if err == err:  # NaN where too few runs: leave the series out
                mape.add_metric([_q(point)], float(err))
            if cov == cov:
                coverage.add_metric([_q(point)], float(cov))
        history.add_metric([], float(fs.n_history))
        persisted.add_metric([], 1.0 if fs.history_persisted else 0.0)
        skipped_rows.add_metric([], float(fs.history_rows_skipped))
        for reason, count in sorted(fs.history_updates_skipped.items()):
            skipped_updates.add_metric([reason], float(count))
        future_runs.add_metric([], float(fs.history_future_runs))
        jobs_g.add_metric(["running"], float(fs.n_running))
        jobs_g.add_metric(["finished"], float(fs.n_finished))
        held.add_metric([], float(fs.n_held))
        if fs.prometheus_clock_offset_seconds is not None:
            clock.add_metric([], float(fs.prometheus_clock_offset_seconds))
    tail: list[Metric] = [info, stalled, gpu_free, mape, coverage]
    tail += pending_families(fs.pending if fs is not None else None)
    tail += release_families(fs.release if fs is not None else None)
    if fs is not None:
        tail.append(history)
        tail.append(persisted)
        tail.append(skipped_rows)
        tail.append(skipped_updates)
        tail.append(future_runs)
    tail.append(jobs_g)
    if fs is not None:
        tail.append(held)
        if clock.samples:
            tail.append(clock)
    return [completion], remaining, tail


def self_families(
    stale: bool,
    duration: float | None,
    last_ok: float | None,
    errors: Mapping[str, int],
    queries: QueryStats,
    history: HistorySpace | None = None,
) -> list[Metric]:
    """The ``gpu_eta_forecaster_*`` self-monitoring families (a handful of series);
    ``history``: the history file's space (``history_families``)."""
    families: list[Metric] = history_families(history)
    stale_g = GaugeMetricFamily(
        "gpu_eta_forecaster_stale",
        "1 while serving forecasts of an earlier cycle because the last cycle failed "
        "(Prometheus away, slow or answering garbage; a history write failing).",
    )
    stale_g.add_metric([], 1.0 if stale else 0.0)
    families.append(stale_g)
    if duration is not None:
        dur = GaugeMetricFamily(
            "gpu_eta_forecaster_cycle_duration_seconds", "Duration of the last cycle."
        )
        dur.add_metric([], duration)
        families.append(dur)
    if last_ok is not None:
        ok = GaugeMetricFamily(
            "gpu_eta_forecaster_last_success_timestamp_seconds", "End of the last good cycle."
        )
        ok.add_metric([], last_ok)
        families.append(ok)
    queries_c = CounterMetricFamily(
        "gpu_eta_forecaster_queries",
        "Queries to Prometheus by result.",
        labels=["result"],
    )
    queries_c.add_metric(["success"], float(queries.success))
    queries_c.add_metric(["error"], float(queries.error))
    families.append(queries_c)
    skipped_c = CounterMetricFamily(
        "gpu_eta_forecaster_skipped_series",
        "Series left out of Prometheus answers that were otherwise used (a label that is "
        "not valid UTF-8 or too long, a malformed sample); the log names the first.",
    )
    skipped_c.add_metric([], float(queries.skipped_series))
    families.append(skipped_c)
    partial_c = CounterMetricFamily(
        "gpu_eta_forecaster_partial_answers",
        "Prometheus answers that carried warnings (a partial answer: a Thanos store or a "
        "VictoriaMetrics storage node away, series may be missing); the log names the first.",
    )
    partial_c.add_metric([], float(queries.partial))
    families.append(partial_c)
    errors_c = CounterMetricFamily(
        "gpu_eta_forecaster_job_errors",
        "Jobs skipped or cycles failed, by reason (invalid series, predict failure, cycle failure).",
        labels=["reason"],
    )
    for reason, n in sorted(errors.items()):
        errors_c.add_metric([reason], float(n))
    families.append(errors_c)
    build = GaugeMetricFamily(
        "gpu_eta_forecaster_build_info", "Forecaster version.", labels=["version"]
    )
    build.add_metric([VERSION], 1.0)
    families.append(build)
    return families


def history_families(space: HistorySpace | None) -> list[Metric]:
    """The history file's size and its volume's room (docs/metrics.md), each only when
    known: nothing without a file, no volume figures where ``statvfs`` fails."""
    if space is None:
        return []
    values = (
        (
            "gpu_eta_forecaster_history_bytes",
            "Size of the history file, read after each cycle.",
            space.file_bytes,
        ),
        (
            "gpu_eta_forecaster_history_free_bytes",
            "Free pages inside the history file (runs deleted by --history.retention): "
            "reused before the file grows.",
            space.free_bytes,
        ),
        (
            "gpu_eta_forecaster_history_volume_available_bytes",
            "Bytes the forecaster may still write on the history file's volume.",
            space.available_bytes,
        ),
        (
            "gpu_eta_forecaster_history_volume_capacity_bytes",
            "Size of the history file's volume.",
            space.capacity_bytes,
        ),
    )
    families: list[Metric] = []
    for name, text, value in values:
        if value is not None:
            family = GaugeMetricFamily(name, text)
            family.add_metric([], float(value))
            families.append(family)
    return families


def pending_families(pending: PendingSet | None) -> list[Metric]:
    """The GPU queue's families (docs/pending.md): starts per pod, per request size."""
    start = QuantileFamily(
        "gpu_eta_pod_predicted_start_timestamp_seconds",
        "Predicted start of a pod waiting for GPUs (unix seconds) at P10/P50/P90, from a replay of the queue.",
        ["namespace", "pod"],
    )
    info = GaugeMetricFamily(
        "gpu_eta_pod_start_prediction_info",
        "One per pending GPU pod predicted (none past --pending.max-pods or with unusable series: counted in gpu_eta_forecaster_job_errors_total): its request and the prediction's status (predicted, scheduled, never_fits, beyond_horizon, no_schedulable_node, blocked_elsewhere, gated).",
        labels=["namespace", "pod", "resource", "gpus", "status"],
    )
    request = QuantileFamily(
        "gpu_eta_request_predicted_start_timestamp_seconds",
        "When a request for `gpus` units of `resource` on a `model` GPU made now would start (unix seconds), P10/P50/P90.",
        ["model", "resource", "gpus"],
    )
    largest = GaugeMetricFamily(
        "gpu_eta_request_max_gpus",
        'The most units of `resource` a request made now could get on one `model` node (model "": of unknown type) with nothing else on it; 0 where every such node has a taint the request does not tolerate. Cordoned and not-Ready nodes count.',
        labels=["model", "resource"],
    )
    if pending is not None:
        for (resource, product), units in sorted(pending.largest_requests.items()):
            largest.add_metric([product, resource], float(units))
        for p in pending.pods:
            pred = p.prediction
            info.add_metric([p.namespace, p.pod, p.resource, str(p.units), pred.status], 1.0)
            for q, ts in zip(QUANTILES, pred.starts or (), strict=False):
                if math.isfinite(ts):
                    start.add_metric([p.namespace, p.pod], _q(q), ts)
        for r, pred in sorted(
            pending.requests.items(), key=lambda kv: (kv[0].product, kv[0].resource, kv[0].units)
        ):
            for q, ts in zip(QUANTILES, pred.starts or (), strict=False):
                if math.isfinite(ts):
                    request.add_metric([r.product, r.resource, str(r.units)], _q(q), ts)
    return [start, info, request, largest]


RELEASE_OBSERVATIONS = "gpu_eta_forecaster_release_observations"


def release_families(release: ReleaseSummary | None) -> list[Metric]:
    """The release lags the queue replay adds to a run's end (docs/pending.md, step 3):
    what was learned, the pods in their lag now, and what completed runs gave; none
    while the queue's prediction is off (``release`` None)."""
    if release is None:
        return []
    families: list[Metric] = []
    if release.quantiles is not None:
        lag = QuantileFamily(
            "gpu_eta_forecaster_release_lag_seconds",
            "Seconds from a completed run's last report to its pod's GPUs being free, at P10/P50/P90 of the lags learned from the forecaster's own reads, which the queue replay adds to a run's end.",
            [],
        )
        for q, value in zip(QUANTILES, release.quantiles, strict=True):
            lag.add_metric([], _q(q), value)
        families.append(lag)
    for name, text, value in (
        (
            "gpu_eta_forecaster_release_lag_brackets",
            "Brackets of observed release lags kept (the most recent 200, restored from the history file at start), from which the lags are estimated.",
            release.n_brackets,
        ),
        (
            "gpu_eta_forecaster_release_pods_lingering",
            "Completed runs' pods still holding their GPUs at the last cycle (in their release lag): the queue replay frees each a lag after its run's end.",
            release.n_lingering,
        ),
    ):
        gauge = GaugeMetricFamily(name, text)
        gauge.add_metric([], float(value))
        families.append(gauge)
    observed = CounterMetricFamily(
        RELEASE_OBSERVATIONS,
        "Completed runs' pods by what their release gave since the forecaster started: bracketed (a lag learned), outlier (still holding an hour after its run), unbracketed (freed between reads over 10 minutes apart), unseen (no read around its run's end showed it holding GPUs).",
        labels=["result"],
    )
    for result, n in (
        ("bracketed", release.n_bracketed),
        ("outlier", release.n_outliers),
        ("unbracketed", release.n_unbracketed),
        ("unseen", release.n_unseen),
    ):
        observed.add_metric([result], float(n))
    families.append(observed)
    return families


_EOF = b"# EOF\n"


class _Families:
    """A fixed list of families in the shape the encoders take (``collect()``)."""

    def __init__(self, families: Sequence[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def _encode(encoder: Callable[[_Families], bytes], families: Sequence[Metric]) -> bytes:
    """The families' exposition without OpenMetrics' closing ``# EOF`` (added once at the end)."""
    body = encoder(_Families(families))
    return body[: -len(_EOF)] if body.endswith(_EOF) else body


@dataclass(frozen=True)
class _Encoded:
    """One ``ForecastSet`` in one exposition format, ready to serve.

    ``remaining`` keeps each sample line without its value, beside the completion
    time it counts down to, so a scrape only formats numbers.
    """

    head: bytes
    remaining_header: bytes
    remaining: tuple[tuple[bytes, float], ...]
    tail: bytes
    clock_offset_seconds: float = 0.0  # the set's (``forecast_families``)

    def body(self, now: float) -> bytes:
        now += self.clock_offset_seconds
        lines = [
            prefix + floatToGoString(max(0.0, ts - now)).encode() + b"\n"
            for prefix, ts in self.remaining
        ]
        return b"".join((self.head, self.remaining_header, *lines, self.tail))


def _encoded(fs: ForecastSet | None, encoder: Callable[[_Families], bytes]) -> _Encoded:
    head, remaining, tail = forecast_families(fs, 0.0)
    ends = [ts for job in (fs.jobs if fs is not None else ()) for ts in job.completion_timestamps]
    # split on newlines only: a label value may hold a raw \r, never a raw \n
    lines = [line + b"\n" for line in _encode(encoder, [remaining]).split(b"\n")[:-1]]
    header = [line for line in lines if line.startswith(b"#")]
    samples = [line for line in lines if not line.startswith(b"#")]
    if len(samples) != len(ends):  # cannot happen: one line per sample, in order
        raise RuntimeError("remaining-time family encoded to an unexpected number of lines")
    return _Encoded(
        head=_encode(encoder, head),
        remaining_header=b"".join(header),
        remaining=tuple(
            (line.rstrip(b"\n").rsplit(b" ", 1)[0] + b" ", ts)
            for line, ts in zip(samples, ends, strict=True)
        ),
        tail=_encode(encoder, tail),
        clock_offset_seconds=fs.clock_offset_seconds if fs is not None else 0.0,
    )


class Exposition:
    """``/metrics`` of ``serve``: the forecast families encoded once per published set.

    Why: at 10,000 running jobs the forecaster publishes about 105,000 series, and
    building and encoding them on every scrape took seconds of CPU (8–20 s on a
    loaded machine while a cycle ran). Here the families of a ``ForecastSet`` are
    encoded at its first scrape in each format asked for (OpenMetrics, text 0.0.4)
    and kept; later scrapes of the same set reformat only the remaining-time values
    (computed at scrape time, as ``render`` does) and re-encode the handful of
    self-monitoring series. The body equals ``render``'s encoding.
    """

    def __init__(self, state: ServiceState, clock: Callable[[], float] = time.time) -> None:
        self.state = state
        self.clock = clock
        self._lock = threading.Lock()
        self._fs: ForecastSet | None = None
        self._by_type: dict[str, _Encoded] = {}

    def render(self, accept: str) -> tuple[bytes, str]:
        """Body and content type for a request's ``Accept`` header."""
        encoder, content_type = choose_encoder(accept)
        with self._lock:  # one encoding per set and format, even with scrapes in parallel
            # the snapshot inside the lock: taken before it, a scrape that waited could put
            # back the set a cycle had just replaced, encoded again at the next scrape
            fs, stale, duration, last_ok, errors, queries = self.state.snapshot()
            if fs is not self._fs:
                self._fs, self._by_type = fs, {}
            enc = self._by_type.get(content_type)
            if enc is None:
                try:
                    enc = _encoded(fs, encoder)
                except Exception:  # a scrape never fails: serve the self-monitoring alone
                    log.exception("cannot encode the forecasts; serving self-monitoring only")
                    enc = _Encoded(b"", b"", (), b"")
                self._by_type[content_type] = enc
        own = _encode(
            encoder,
            self_families(stale, duration, last_ok, errors, queries, self.state.history_space()),
        )
        closing = _EOF if encoder(_Families(())).endswith(_EOF) else b""
        return enc.body(self.clock()) + own + closing, content_type


def make_registry(
    state: ServiceState,
    clock: Callable[[], float] = time.time,
    self_only: bool = False,
    for_push: bool = False,
) -> CollectorRegistry:
    """A registry of our own (not the global one) holding only the forecaster collector.

    ``self_only``: just the ``gpu_eta_forecaster_*`` families, for ``once`` after a
    failed cycle, so a Pushgateway keeps the forecasts it holds and only learns they
    are stale. ``for_push``: what ``once`` pushes to a Pushgateway, the quantile
    families untyped (``untyped_quantiles``).
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ForecastCollector(state, clock, self_only, for_push))
    return registry


def _q(value: float) -> str:
    return f"{value:g}"


def _lookup(quality, point: float) -> tuple[float, float] | None:
    """The (error, coverage) pair measured at ``point``; None when absent or malformed
    (a malformed entry for another point does not hide this one)."""
    for key, value in dict(quality).items():
        try:
            if abs(float(key) - point) < 1e-9:
                return (float(value[0]), float(value[1]))
        except (TypeError, ValueError, IndexError):
            continue
    return None
