"""The cluster's past: finished simulated jobs, so forecasts are useful from the first minute.

The same cluster simulation as the live demo runs over a past window and is written
two ways:

- OpenMetrics text (ending in ``# EOF``) for ``promtool tsdb create-blocks-from
  openmetrics``: the exporter's series as Prometheus would have scraped them (every
  ``step_seconds``), so dashboards and range queries see history;
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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import format_runs
from gpu_eta.simulation.cluster import ClusterConfig, ClusterSim, NodeSpec, Pod
from gpu_eta.simulation.driver import log_run_id, log_run_start

FEATURE_COLUMNS = ("batch_size", "gpu_model", "gpus", "framework", "job_name", "namespace")


@dataclass(frozen=True, slots=True)
class History:
    """The finished past: the nodes, their pods, and the window it covers (unix seconds)."""

    nodes: tuple[NodeSpec, ...]
    pods: tuple[Pod, ...]
    start: float
    end: float

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
    return History(sim.nodes, tuple(pods), anchor, end_timestamp)


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
    return History(sim.nodes, tuple(pods), anchor - warm, anchor)


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


def _labels(**labels: object) -> str:
    inner = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
        for k, v in labels.items()
    )
    return "{" + inner + "}"


def _grid(start: float, end: float, step: float) -> Iterator[float]:
    """Sample times: multiples of ``step`` in [start, end)."""
    t = math.ceil(start / step) * step
    while t < end:
        yield t
        t += step


def _util_at(steps: Sequence[tuple[float, float]], t: float) -> float:
    value = steps[0][1] if steps else 0.0
    for ts, u in steps:
        if ts <= t:
            value = u
        else:
            break
    return value


_HELP = {
    "gpu_eta_training_epoch": "Epochs completed (backfilled demo history).",
    "gpu_eta_training_epochs_planned": "Epochs planned (backfilled demo history).",
    "gpu_eta_training_step": "Steps completed (backfilled demo history).",
    "gpu_eta_training_steps_planned": "Steps planned (backfilled demo history).",
    "gpu_eta_training_batch_size": "Batch size (backfilled demo history).",
    "gpu_eta_training_run_start_timestamp_seconds": "Run start (backfilled demo history).",
    "gpu_eta_training_epoch_end_timestamp_seconds": "Latest epoch end (backfilled demo history).",
    "gpu_eta_training_last_report_timestamp_seconds": "Last report (backfilled demo history).",
    "gpu_eta_training_info": "Progress source (backfilled demo history).",
    "gpu_eta_pod_gpu_allocated": "Device allocated to the container (backfilled demo history).",
    "gpu_eta_pod_gpu_allocated_since_timestamp_seconds": "Start of occupancy (backfilled demo history).",
    "gpu_eta_pod_gpu_utilization_ratio": "Container's share of the device (backfilled demo history).",
    "gpu_eta_pod_gpu_memory_used_bytes": "Device memory of the container (backfilled demo history).",
    "gpu_eta_gpu_utilization_ratio": "Device busy ratio (backfilled demo history).",
    "gpu_eta_gpu_info": "Device metadata (backfilled demo history).",
}


def openmetrics_lines(
    history: History,
    step_seconds: float = 15.0,
    node_labels: Mapping[int, Mapping[str, str]] | None = None,
    since: float | None = None,
) -> Iterator[str]:
    """The history as OpenMetrics text lines, family by family, ending with ``# EOF``.

    ``node_labels`` adds labels to every series of a node (by node index): the
    ``job`` and ``instance`` Prometheus gives that node's exporter, so a warm-up
    run's backfilled series and its live ones are the same series. ``since``: no pod
    sample before it (a window's later part, written apart from its earlier one).
    """
    first = -math.inf if since is None else since
    families: dict[str, list[str]] = {name: [] for name in _HELP}
    nodes = {n.index: n for n in history.nodes}
    extra = {i: dict(node_labels.get(i, {})) if node_labels else {} for i in nodes}
    gpu_util: dict[tuple[int, int], dict[float, float]] = {}
    for pod in history.pods:
        node = nodes[pod.node]
        end = min(pod.end, history.end) if pod.end is not None else history.end
        if pod.kind == "training" and pod.run_start is not None:
            spe = max(1, 50_000 // max(1, pod.batch_size))
            run = _labels(
                node=node.name,
                namespace=pod.namespace,
                pod=pod.name,
                container=pod.container,
                run_id=pod.run_id,
                **extra[pod.node],
            )
            source = "log" if pod.report == "log" else "http"
            ends = pod.epoch_ends
            for t in _grid(max(pod.run_start, first), end, step_seconds):
                done = sum(1 for e in ends if e <= t)
                last = ends[done - 1] if done else pod.run_start
                families["gpu_eta_training_epoch"].append(
                    f"gpu_eta_training_epoch{run} {done} {t:.3f}"
                )
                families["gpu_eta_training_step"].append(
                    f"gpu_eta_training_step{run} {done * spe} {t:.3f}"
                )
                # a run without a plan has totals only from its end (what it reached), as
                # the exporter exports it. For a finished run its plan over its whole
                # life would be the same to the forecaster's history (completed, with its
                # duration, either way); one still running at the anchor would hand the
                # forecaster its plan (last_over_time) and get a model forecast
                # (its step: the steps only, exporter.progress._reached_totals)
                if pod.reports_plan:
                    families["gpu_eta_training_epochs_planned"].append(
                        f"gpu_eta_training_epochs_planned{run} {pod.epochs} {t:.3f}"
                    )
                if pod.reports_plan or done >= pod.epochs:
                    families["gpu_eta_training_steps_planned"].append(
                        f"gpu_eta_training_steps_planned{run} {pod.epochs * spe} {t:.3f}"
                    )
                families["gpu_eta_training_batch_size"].append(
                    f"gpu_eta_training_batch_size{run} {pod.batch_size} {t:.3f}"
                )
                families["gpu_eta_training_run_start_timestamp_seconds"].append(
                    f"gpu_eta_training_run_start_timestamp_seconds{run} {pod.run_start:.3f} {t:.3f}"
                )
                if done:
                    families["gpu_eta_training_epoch_end_timestamp_seconds"].append(
                        f"gpu_eta_training_epoch_end_timestamp_seconds{run} {last:.3f} {t:.3f}"
                    )
                families["gpu_eta_training_last_report_timestamp_seconds"].append(
                    f"gpu_eta_training_last_report_timestamp_seconds{run} {last:.3f} {t:.3f}"
                )
                info = run[:-1] + f',source="{source}"}}'
                families["gpu_eta_training_info"].append(f"gpu_eta_training_info{info} 1 {t:.3f}")
        for g, _replica in pod.gpus:
            spec = node.gpus[g]
            lab = _labels(
                node=node.name,
                gpu=g,
                UUID=spec.uuid,
                namespace=pod.namespace,
                pod=pod.name,
                container=pod.container,
                **extra[pod.node],
            )
            memory = min(pod.memory_bytes, int(spec.memory_total_bytes * 0.9))
            for t in _grid(max(pod.start, first), end, step_seconds):
                u = _util_at(pod.util_steps, t)
                families["gpu_eta_pod_gpu_allocated"].append(
                    f"gpu_eta_pod_gpu_allocated{lab} 1 {t:.3f}"
                )
                families["gpu_eta_pod_gpu_allocated_since_timestamp_seconds"].append(
                    f"gpu_eta_pod_gpu_allocated_since_timestamp_seconds{lab} {pod.start:.3f} {t:.3f}"
                )
                families["gpu_eta_pod_gpu_utilization_ratio"].append(
                    f"gpu_eta_pod_gpu_utilization_ratio{lab} {u:.4f} {t:.3f}"
                )
                families["gpu_eta_pod_gpu_memory_used_bytes"].append(
                    f"gpu_eta_pod_gpu_memory_used_bytes{lab} {memory} {t:.3f}"
                )
                slot = gpu_util.setdefault((pod.node, g), {})
                slot[t] = min(1.0, slot.get(t, 0.0) + u)
    gpu_step = max(step_seconds, 60.0)
    for node in history.nodes:
        for spec in node.gpus:
            more = extra[node.index]
            lab = _labels(node=node.name, gpu=spec.index, UUID=spec.uuid, **more)
            info = _labels(node=node.name, gpu=spec.index, UUID=spec.uuid, model=spec.model, **more)
            busy = gpu_util.get((node.index, spec.index), {})
            for t in _grid(history.start, history.end, gpu_step):
                families["gpu_eta_gpu_utilization_ratio"].append(
                    f"gpu_eta_gpu_utilization_ratio{lab} {busy.get(t, 0.0):.4f} {t:.3f}"
                )
                families["gpu_eta_gpu_info"].append(f"gpu_eta_gpu_info{info} 1 {t:.3f}")
    for name, lines in families.items():
        if not lines:
            continue
        yield f"# HELP {name} {_HELP[name]}"
        yield f"# TYPE {name} gauge"
        yield from lines
    yield "# EOF"


def write_openmetrics(
    history: History,
    path: Path,
    step_seconds: float = 15.0,
    node_labels: Mapping[int, Mapping[str, str]] | None = None,
    since: float | None = None,
) -> Path:
    """Write ``history``'s series (``openmetrics_lines``) to ``path`` for promtool; returns it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for line in openmetrics_lines(history, step_seconds, node_labels, since):
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
