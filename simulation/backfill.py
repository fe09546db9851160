"""The cluster's past: finished simulated jobs, so forecasts are useful from the first minute.

The same cluster simulation as the live demo runs over a past window and is written
two ways:

- OpenMetrics text (ending in ``# EOF``) for ``promtool tsdb create-blocks-from
  openmetrics``: the series the exporters (``gpu_eta.simulation.exports``: the
  exporter's own exposition) and kube-state-metrics (``gpu_eta.simulation.ksm``)
  publish live, with their names and labels, as Prometheus would have scraped them,
  so dashboards and range queries see the past as they see the present;
- a runs CSV (``run_id,epoch,epochs_planned,timestamp_seconds,batch_size,gpu_model,
  gpus,framework,job_name``, one row per epoch end, epoch 0 = training start) for the
  forecaster's ``--history.seed-csv``. The same ``run_id`` appears in both, so a
  forecaster that also reads the backfilled series can deduplicate.

Only completed runs go into the CSV (a cancelled run is not a short job); all runs go
into the OpenMetrics. Rendering is pure; ``write_history`` does the file I/O.

Runs that report no planned total (``Pod.reports_plan``) are written as the exporter
would have exported them: no ``*_planned`` series until their last epoch, whose
``end`` report made what they reached their totals (their steps: they report steps); in the CSV a completed one has
``epochs_planned`` = the epochs it reached, the run the forecaster stores from the
live series after that ``end``: completed, with its duration.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from prometheus_client.metrics_core import Metric

from gpu_eta.exporter.exposition import escape_label_value
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import format_runs
from gpu_eta.simulation import ksm
from gpu_eta.simulation.cluster import (
    ClusterConfig,
    ClusterSim,
    NodeSpec,
    Pod,
    containers_started,
    taints_at,
    under_pressure,
)
from gpu_eta.simulation.driver import log_run_id, log_run_start
from gpu_eta.simulation.exports import node_families, node_snapshot, pod_state

FEATURE_COLUMNS = ("batch_size", "gpu_model", "gpus", "framework", "job_name", "namespace")


@dataclass(frozen=True, slots=True)
class History:
    """The finished past: the nodes, their pods, and the window it covers (unix seconds)."""

    nodes: tuple[NodeSpec, ...]
    pods: tuple[Pod, ...]
    start: float
    end: float
    # the cluster simulated, and the unix time of its sim time 0 (its pods' times are
    # unix seconds): what the nodes' taints and the pods' phases follow
    config: ClusterConfig = field(default_factory=ClusterConfig)
    clock: float = 0.0

    @property
    def completed(self) -> tuple[Pod, ...]:
        return tuple(p for p in self.pods if p.completed)


def live_load_seconds(config: ClusterConfig, seconds: float, jobs: int) -> float:
    """The span of a history of ~``jobs`` arrivals at ``config``'s own arrival rate, at
    most ``seconds``: what the demo passes ``simulate_history``, so its past runs at the
    live cluster's load.

    Why: ``simulate_history`` fits ``jobs`` into whatever span it is given by slowing
    the arrivals, and a day of 1,000 jobs at the defaults arrives 8.6 times more
    slowly than the live cluster's jobs. On such a quiet cluster every job finds an
    exclusive GPU, so none of the 819 finished runs of the default demo's day had
    shared a time-sliced GPU, while at the anchor a third of the live runs share one
    three ways and go ~3 times slower. The forecaster learns from its past which
    estimate to publish and how wide to make it: on that past it published its
    configuration's earlier runs' pace and the job prior of unshared runs, and the
    time-sliced runs' ETAs came out at half their real remaining time, P10–P90 holding
    19 % of their ends (seed 0). A past at the live load holds time-sliced runs as the
    present does (docs/demo.md, "History").
    """
    if seconds <= 0 or jobs < 1:
        raise ValueError("history needs seconds > 0 and jobs >= 1")
    return min(seconds, jobs * config.arrival_seconds / config.time_scale)


PROGRESS_PARTS = 20  # simulate_history reports its progress this many times


def simulate_history(
    config: ClusterConfig,
    end_timestamp: float,
    seconds: float,
    jobs: int = 1000,
    progress: Callable[[float], None] | None = None,
) -> History:
    """Run the simulation over ``[end - seconds, end)``, ~``jobs`` arrivals; keep finished pods.

    More ``seconds`` than ``jobs`` fill at ``config``'s arrival rate slow the arrivals
    down to fit: a quieter cluster than the live one (``live_load_seconds``).
    ``progress``: called with the share of the span simulated (up to 1.0), as it goes.
    Why: thousands of jobs take a minute or more (the simulation slows with its pod
    count), which the demo would otherwise spend without a word.
    """
    if seconds <= 0 or jobs < 1:
        raise ValueError("history needs seconds > 0 and jobs >= 1")
    arrival = max(config.arrival_seconds, seconds * config.time_scale / jobs)
    quiet = replace(config, arrival_seconds=arrival, notebooks_at_start=0)
    sim = ClusterSim(quiet, stream="history", start=0.0)
    if progress is None:
        sim.advance(seconds)
    else:
        for part in range(1, PROGRESS_PARTS + 1):
            sim.advance(seconds if part == PROGRESS_PARTS else seconds * part / PROGRESS_PARTS)
            progress(part / PROGRESS_PARTS)
    anchor = end_timestamp - seconds
    pods = []
    for pod in sim.pods:
        if pod.end is None or pod.end > seconds:
            continue  # still running at the window's end: the live demo starts clean
        pods.append(_shift(pod, anchor))
    return History(sim.nodes, tuple(pods), anchor, end_timestamp, config, anchor)


def warm_history(sim: ClusterSim, anchor: float) -> History:
    """The live cluster's warm-up (``gpu_eta.simulation.cluster.warm_start``) as history up to the anchor.

    Every pod that existed before t = 0 (finished ones and those still running), in
    unix seconds, with the window ``[anchor - warm_start_seconds, anchor)``. Runs still
    going keep their ``run_id``, so these series and the exporter's later ones are one
    run; a log-reporting pod gets the id the exporter derives from its log
    (``gpu_eta.simulation.driver.log_run_id``) and the run start its first line carries.
    """
    warm = sim.config.warm_start_seconds
    pods = []
    for pod in sim.pods:
        if pod.start >= 0 or pod.report == "real":
            continue
        shifted = _shift(pod, anchor)
        if pod.report == "log" and pod.run_start is not None:
            shifted = replace(
                shifted, run_id=log_run_id(pod, anchor), run_start=log_run_start(pod, anchor)
            )
        pods.append(shifted)
    return History(sim.nodes, tuple(pods), anchor - warm, anchor, sim.config, anchor)


LOOKBACK_SECONDS = 300.0  # Prometheus' default query lookback


def without_lingering(history: History, settle_seconds: float) -> History:
    """``history`` without the pods whose backfilled series would linger as if current.

    Why: Prometheus marks a series stale when a scrape no longer has it; a backfilled
    series has no such marker, so an instant query keeps returning its last sample
    for the 5-minute lookback. A pod that ended less than that before the anchor, or
    that ends before the live exporter's first scrapes (``settle_seconds`` after it),
    would show in ``top`` as still holding its GPU. Such pods are left out of the
    OpenMetrics (their finished runs still go into the runs CSV); pods still running
    after ``settle_seconds`` are kept: the live exporter continues their series.
    """
    keep = tuple(
        p
        for p in history.pods
        if p.end is None
        or p.end > history.end + settle_seconds
        or p.end <= history.end - LOOKBACK_SECONDS
    )
    return replace(history, pods=keep)


def _shift(pod: Pod, by: float) -> Pod:
    """A copy of ``pod`` with every time moved to unix seconds."""
    return replace(
        pod,
        start=pod.start + by,
        created=None if pod.created is None else pod.created + by,
        end=None if pod.end is None else pod.end + by,
        run_start=None if pod.run_start is None else pod.run_start + by,
        epoch_ends=[t + by for t in pod.epoch_ends],
        util_steps=[(t + by, u) for t, u in pod.util_steps],
        stalled_between=None
        if pod.stalled_between is None
        else (pod.stalled_between[0] + by, pod.stalled_between[1] + by),
    )


# ---------------------------------------------------------------- runs CSV


def finished_runs(pods: Iterable[Pod]) -> Iterator[Run]:
    """Each completed run as the forecaster's ``Run`` (epoch 0 = its start).

    A run without a planned total is completed with ``epochs_planned`` = the epochs it
    reached: what its ``end`` made its plan in the exporter, so the forecaster holds
    it as it would have stored it from the live series (its duration is what the
    job's later plan-less runs are forecast from: ``forecaster/planless.py``).
    """
    for pod in pods:
        if not pod.completed or pod.run_start is None:
            continue
        framework = "keras" if (pod.report == "log" and pod.log_format == "keras") else "pytorch"
        yield Run(
            run_id=pod.run_id,
            epochs_planned=float(pod.epochs),
            epoch_times=tuple(
                (float(k), t) for k, t in enumerate([pod.run_start, *pod.epoch_ends])
            ),
            features={
                "batch_size": float(pod.batch_size),
                "gpu_model": pod.gpu_model,
                "gpus": float(len(pod.gpus)),
                "framework": framework,
                "job_name": pod.job_name,
                "namespace": pod.namespace,
            },
            completed=True,
        )


def render_runs_csv(pods: Iterable[Pod]) -> str:
    """The runs CSV (forecaster/runs_csv.py's format) of the completed runs."""
    return format_runs(finished_runs(pods), feature_columns=FEATURE_COLUMNS)


# ---------------------------------------------------------------- OpenMetrics

# seconds between the samples of the devices' series and of the kube-state-metrics
# series: within Prometheus' 5-minute lookback, so instant queries and range panels
# see them whole, at a fraction of the samples (the backfill's size and promtool's
# time grow with them: docs/demo.md, "History")
DEVICE_STEP_SECONDS = 60.0
KSM_STEP_SECONDS = 240.0


def _labels(labels: Mapping[str, object]) -> str:
    """Labels as the text formats write them, empty values too, as the live targets
    write them (promtool, as a scrape, stores a label with an empty value as none)."""
    return "{" + ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in labels.items()) + "}"


def _grid(start: float, end: float, step: float) -> Iterator[float]:
    """Sample times: multiples of ``step`` in [start, end)."""
    t = math.ceil(start / step) * step
    while t < end:
        yield t
        t += step


def _value(value: float) -> str:
    return repr(float(value))


class _Families:
    """OpenMetrics families being filled: each family's HELP, TYPE and samples kept
    together, and each series' samples together within it, as the format wants them."""

    def __init__(self) -> None:
        self.meta: dict[str, tuple[str, str]] = {}
        self.series: dict[str, dict[str, list[str]]] = {}

    def of(self, family: str, doc: str, kind: str, series: str) -> list[str]:
        """The sample lines of ``series`` of ``family``, to append to (made on first use)."""
        if family not in self.meta:
            self.meta[family] = (doc, kind)
            self.series[family] = {}
        return self.series[family].setdefault(series, [])

    def text(self) -> Iterator[str]:
        for family, (doc, kind) in self.meta.items():
            yield f"# HELP {family} {doc}"
            yield f"# TYPE {family} {kind}"
            for lines in self.series[family].values():
                yield from lines


# what one rendering gives: each sample as its series' line list and its line without
# the timestamp, to write at every instant until what it shows changes
Rendered = list[tuple[list[str], str]]


def _exporter_samples(
    history: History,
    families: _Families,
    step_seconds: float,
    node_labels: Mapping[int, Mapping[str, str]],
    first: float,
) -> None:
    """Each node's exporter's series (``gpu_eta.simulation.exports``): a pod's own
    every ``step_seconds`` of its life (from ``first`` on; before the window too: the
    notebook held since yesterday), its node's devices every ``DEVICE_STEP_SECONDS``
    in the window. Why each pod's series are rendered again only when its state
    changes, those of the pods that changed at an instant in one snapshot: rendering
    is most of the time this takes, and the demo waits for it."""
    # a series written once (its line list, name and labels): thousands of instants
    written: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[str], str]] = {}

    def render(
        metrics: Iterable[Metric], extra: Mapping[str, str]
    ) -> dict[tuple[str, str], Rendered]:
        """The samples of ``metrics`` by the pod they are of (("", "") for a device's)."""
        out: dict[tuple[str, str], Rendered] = {}
        for metric in metrics:
            for sample in metric.samples:
                labels = sample.labels
                key = (sample.name, tuple(labels.items()))
                if (known := written.get(key)) is None:
                    series = f"{sample.name}{_labels({**labels, **extra})}"
                    lines = families.of(metric.name, metric.documentation, metric.type, series)
                    known = written[key] = (lines, series)
                pod = (labels.get("namespace", ""), labels.get("pod", ""))
                out.setdefault(pod, []).append((known[0], f"{known[1]} {_value(sample.value)}"))
        return out

    for node in history.nodes:
        pods = sorted((p for p in history.pods if p.node == node.index), key=lambda p: p.start)
        extra = node_labels.get(node.index, {})
        earliest = max(first, min((p.start for p in pods), default=history.start))
        shown: dict[str, tuple[tuple[bool, int, float], Rendered]] = {}  # by pod uid
        alive: list[Pod] = []
        k = 0
        for t in _grid(earliest, history.end, step_seconds):
            while k < len(pods) and pods[k].start <= t:
                alive.append(pods[k])
                k += 1
            gone = [p for p in alive if p.end is not None and t >= p.end]
            if gone:
                alive = [p for p in alive if p.end is None or t < p.end]
                _last_state(node, gone, shown, render, extra, first)
            states = {p.uid: pod_state(p, t) for p in alive}
            changed = [p for p in alive if p.uid not in shown or shown[p.uid][0] != states[p.uid]]
            if changed:
                snapshot = node_snapshot(node, changed, t, devices=False)
                by_pod = render(node_families(snapshot, False), extra)
                for p in changed:
                    shown[p.uid] = (states[p.uid], by_pod.get((p.namespace, p.name), []))
            for p in alive:
                _write(shown[p.uid][1], t)
            if len(shown) > 2 * len(alive) + 64:  # forget the pods gone
                shown = {p.uid: shown[p.uid] for p in alive}
        _last_state(
            node,
            [p for p in alive if p.end is not None and p.end <= history.end],
            shown,
            render,
            extra,
            first,
        )
        alive = []
        k = 0
        for t in _grid(max(history.start, first), history.end, DEVICE_STEP_SECONDS):
            while k < len(pods) and pods[k].start <= t:
                alive.append(pods[k])
                k += 1
            alive = [p for p in alive if p.end is None or t < p.end]
            snapshot = node_snapshot(node, alive, t, holders=False)
            for rendered in render(node_families(snapshot, True), extra).values():
                _write(rendered, t)


def _last_state(
    node: NodeSpec,
    gone: Iterable[Pod],
    shown: Mapping[str, tuple[tuple[bool, int, float], Rendered]],
    render: Callable[[Iterable[Metric], Mapping[str, str]], dict[tuple[str, str], Rendered]],
    extra: Mapping[str, str],
    first: float,
) -> None:
    """Each pod of ``gone`` in its last state, a millisecond before it went, when no
    instant of the grid showed that state (and that is not before ``first``). Why: a completed run's pod goes 5 s after
    its last epoch, so a grid of 15 or 30 s showed most runs' ends
    (``gpu_eta_training_run_end_timestamp_seconds``) not at all, while the live
    exporter shows every one until its pod goes."""
    for pod in gone:
        assert pod.end is not None  # gone: it ended
        t = pod.end - 0.001
        state = pod_state(pod, t)
        if t < first or (pod.uid in shown and shown[pod.uid][0] == state):
            continue
        snapshot = node_snapshot(node, [pod], t, devices=False)
        _write(render(node_families(snapshot, False), extra).get((pod.namespace, pod.name), []), t)


def _write(rendered: Rendered, t: float) -> None:
    """Each rendered sample at ``t``."""
    stamp = f" {t:.3f}"
    for lines, line in rendered:
        lines.append(line + stamp)


def _ksm_samples(
    history: History,
    families: _Families,
    labels: Mapping[str, str],
    first: float,
) -> None:
    """What kube-state-metrics served for the history's nodes and pods
    (``gpu_eta.simulation.ksm``) every ``KSM_STEP_SECONDS`` in the window. A pod
    created before its start waited unbound in the queue; queued jobs that never
    started are not in the history, nor in its past. A pod's series are rendered
    again only when what KSM shows of it changes (phase, node, start)."""
    config = history.config
    extra = _labels(labels)[1:-1]
    doc = {}

    def render(text: str) -> Rendered:
        out: Rendered = []
        for line in text.splitlines():
            if line.startswith("# HELP "):
                _, _, name, help_text = line.split(" ", 3)
                doc[name] = help_text
                continue
            if line.startswith("#"):
                continue
            series, value = line.rsplit(" ", 1)
            name, _, inner = series.partition("{")
            series = f"{name}{{{','.join(p for p in (inner.rstrip('}'), extra) if p)}}}"
            out.append((families.of(name, doc[name], "gauge", series), f"{series} {value}"))
        return out

    pods_seen: dict[tuple[str, str, str, bool], Rendered] = {}
    nodes_seen: dict[tuple[tuple[tuple[tuple[str, str, str], ...], bool], ...], Rendered] = {}
    for t in _grid(max(history.start, first), history.end, KSM_STEP_SECONDS):
        sim_t = t - history.clock
        nodes = tuple(
            ksm.ksm_node(n, taints_at(config, n, sim_t), under_pressure(config, n.index, sim_t))
            for n in history.nodes
        )
        node_state = tuple((n.taints, n.memory_pressure) for n in nodes)
        if (rendered := nodes_seen.get(node_state)) is None:
            rendered = nodes_seen[node_state] = render(ksm.exposition(nodes, []))
        _write(rendered, t)
        for pod in history.pods:
            record = ksm.ksm_pod(
                pod, history.nodes, t, 0.0, containers_started(config, pod), queued_until_start=True
            )
            if record is None:
                continue
            key = (record.uid, record.phase, record.node, record.start_time is None)
            if (rendered := pods_seen.get(key)) is None:
                rendered = pods_seen[key] = render(ksm.exposition([], [record]))
            _write(rendered, t)


def openmetrics_lines(
    history: History,
    step_seconds: float = 15.0,
    node_labels: Mapping[int, Mapping[str, str]] | None = None,
    since: float | None = None,
    ksm_labels: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """The history as OpenMetrics text lines, family by family, ending with ``# EOF``:
    the series the live exporters and kube-state-metrics publish, with their names
    and labels (docs/demo.md, "What the backfilled past holds").

    ``node_labels`` adds labels to every series of a node (by node index): the
    ``job`` and ``instance`` Prometheus gives that node's exporter, so a warm-up
    run's backfilled series and its live ones are the same series; ``ksm_labels``
    those of the kube-state-metrics target (None: no kube-state-metrics series).
    ``since``: no sample before it (a window's later part, written apart from its
    earlier one).
    """
    first = -math.inf if since is None else since
    families = _Families()
    _exporter_samples(history, families, step_seconds, node_labels or {}, first)
    if ksm_labels is not None:
        _ksm_samples(history, families, ksm_labels, first)
    yield from families.text()
    yield "# EOF"


def write_openmetrics(
    history: History,
    path: Path,
    step_seconds: float = 15.0,
    node_labels: Mapping[int, Mapping[str, str]] | None = None,
    since: float | None = None,
    ksm_labels: Mapping[str, str] | None = None,
) -> Path:
    """Write ``history``'s series (``openmetrics_lines``) to ``path`` for promtool; returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for line in openmetrics_lines(history, step_seconds, node_labels, since, ksm_labels):
            f.write(line + "\n")
    return path


def write_history(
    history: History, directory: Path, step_seconds: float = 15.0
) -> tuple[Path, Path]:
    """Write the OpenMetrics (``history.om``) and the runs CSV (``runs.csv``); returns both."""
    om = write_openmetrics(history, directory / "history.om", step_seconds)
    runs = directory / "runs.csv"
    runs.write_text(render_runs_csv(history.pods))
    return om, runs
