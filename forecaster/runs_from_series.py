"""Pure: one cycle's query results → what is known about each training run.

Input is the answers to ``gpu_eta.forecaster.queries`` (series of every run at once); output
is a ``CycleView``: per-run updates for the history store, which runs are running
now, which have finished, each pod's recent GPU use and the GPU allocations. No I/O.

Decisions (documented in docs/forecaster.md):

* A run is keyed by ``(namespace, pod, container, run_id)`` (``RunKey``), never by
  ``run_id`` alone: a hand-written run id reused by two pods, or by two containers
  of one pod, is two runs (the exporter gives a notebook that trains again a new
  id). Series whose ``run_id`` is longer than ``MAX_RUN_ID`` or whose
  ``namespace``/``pod``/``container`` is longer than ``MAX_LABEL`` are ignored.
* A run is *done* when it reached ``epochs_planned``, or when it *ended* (its end
  series, ``ended``, at or after its start: its sender said ``end``, or a plan-less
  run's pod succeeded) whatever its plan: a run stopped early (early stopping, a
  quality target) is done at what it reached, its plan lowered to that (``ended_plan``;
  not under ``MIN_PLANNED``: one that ended before a whole epoch keeps its plan and is
  stored not completed), so it is stored completed there, as the exporter does for a run without a plan, the
  plan it stated kept as its feature ``epochs_planned_stated`` (``runs.STATED_PLAN``:
  the calibration replays it to that plan, as it was forecast live). Its
  pod may live on (a notebook, a Job's sidecar): it is not running (``present``), and
  its means stop at its last progress. A run whose series are no
  longer present (Prometheus' lookback) is absent from ``present``, and the cycle
  finishes it once it has been away longer than a grace period. Whether it
  *completed* is decided by its last epoch: one that vanished before its last epoch
  is ``completed=False``, never a short job.
* Epoch ends come from the range pairs ``(epoch, epoch_end_timestamp)`` sampled at
  the same instants (in the cycles that send the range queries) plus the latest pair;
  the store accumulates them across cycles.
* A run with ``steps_planned`` but no ``epochs_planned`` (a tqdm bar in the logs, a
  ``max_steps`` trainer) is followed in its steps: ``epochs_planned`` = the steps
  planned, each new step value at the first instant the range query saw it, and the
  latest step at the last report's time, at most ``STEP_CELLS`` points per run;
  feature ``progress_unit="steps"``. Steps, not percent of them: a job re-run with
  another ``max_steps`` keeps one time per unit, which its prior and analogs read.
  A run whose epochs are not whole numbers (Hugging Face's fractional
  ``state.epoch``) keeps at most as many (``kept_by_cell``).
* Untrusted values cost their run alone: a plan outside [``MIN_PLANNED``,
  ``MAX_PROGRESS``] (``progress_bound.plausible_plan``, a runs CSV's rule too) or a
  latest epoch or step outside [0, ``MAX_PROGRESS``] rejects the run
  (``CycleView.rejected``); an error no check foresaw in one run's arithmetic rejects
  it as ``RUN_FAILED`` with the error in ``CycleView.failed``. Why a broad
  catch in a pure module: the cycle sees one call for every run, and a run's series
  are read again after a restart, so one raising run failed every cycle, restarts too.
* A present run with progress (epochs or steps) but no planned total is a
  ``PlanlessRun``: not stored (no plan, no fraction done), forecast from its
  configuration's completed durations (``planless``). When it ends its sender's
  ``end`` report sets its plan to what it reached (the exporter), and it is stored as
  any run that reached its plan.
* Features: ``batch_size``; ``gpu_utilization_ratio`` (ours, else DCGM's
  ``DCGM_FI_DEV_GPU_UTIL``/100 for the pod, accepting ``exported_pod``);
  ``memory_utilization_ratio`` (working set / limit); ``gpu_model`` and ``gpus`` from
  the run's container's allocations (the pod's when its container holds none) joined
  with ``gpu_eta_gpu_info`` on (node, UUID, GPU_I_ID), a MIG instance's model with its
  profile (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``); ``namespace``; ``job_name``.
* ``job_name``: the pod label ``job-name`` (Kubernetes Jobs) without a CronJob's
  scheduled time or a generated suffix, else ``app.kubernetes.io/name``, else ``app``,
  else the owner's name (a ReplicaSet's pod-template hash or a Job's suffix stripped),
  else the pod name without a trailing random suffix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from gpu_eta.common.progress_bound import (
    MAX_PROGRESS,
    MIN_PLANNED,
    plausible_plan,
    step_cell,
)
from gpu_eta.forecaster.runs import STATED_PLAN, STEPS_UNIT, RunKey, RunUpdate
from gpu_eta.forecaster.series import Sample, Series, unexported

MAX_RUN_ID = 256
MAX_LABEL = 256  # namespace, pod, container (Kubernetes allows at most 253)
# A run that reports only steps, or epochs that are not whole (``kept_by_cell``), keeps
# at most ``progress_bound.STEP_CELLS`` points (one per cell of its plan, plus the
# latest): bounded storage for a run of millions of steps. A cycle thins its own points
# (_thin_steps), the history the stored ones across cycles (history.crowded_steps).
# A run whose assembly raised what no check foresaw is skipped with this reason (its
# error in ``CycleView.failed``, logged by the cycle): the cycle goes on without it.
RUN_FAILED = "assemble_failed"
_MAX_FAILURE = 300  # characters of such an error kept
# Timestamps outside [now - 1 year, now + 5 minutes] are treated as garbage.
_PAST_LIMIT_SECONDS = 366 * 86400
_FUTURE_SLACK_SECONDS = 300
_HASH_SUFFIX = re.compile(r"-(?:[0-9a-f]{8,10}|[bcdfghjklmnpqrstvwxz2456789]{5})$")
# What makes a Job's name unique run after run: a CronJob's scheduled minute (decimal,
# 8 digits until the 22nd century) or generateName's five characters (Kubernetes'
# alphabet, at least one letter, so that "sweep-24567" stays a name of its own).
_JOB_SUFFIX = re.compile(
    r"-(?:[0-9]{8,}|(?=[2456789]*[bcdfghjklmnpqrstvwxz])[bcdfghjklmnpqrstvwxz2456789]{5})$"
)
_JOB_LABELS = ("label_job_name", "label_batch_kubernetes_io_job_name")
_NAME_LABELS = ("label_app_kubernetes_io_name", "label_app")

PodKey = tuple[str, str, str]  # namespace, pod, container
_S = TypeVar("_S", Sample, Series)


@dataclass(frozen=True, slots=True)
class Allocation:
    """A GPU held by a container (``gpu_eta_pod_gpu_allocated``)."""

    node: str
    gpu: str
    uuid: str
    namespace: str
    pod: str
    container: str
    gpu_instance: str = ""


@dataclass(frozen=True, slots=True)
class PlanlessRun:
    """A running run that reports progress but no planned total: not stored, forecast
    from its configuration's completed durations (``planless``)."""

    key: RunKey
    node: str
    start_timestamp: float
    features: Mapping[str, float | str]


@dataclass
class CycleView:
    """Everything one cycle's queries say about runs and GPUs."""

    updates: list[RunUpdate] = field(default_factory=list)
    present: set[RunKey] = field(default_factory=set)
    done: set[RunKey] = field(default_factory=set)  # reached their planned epochs/steps
    ended: set[RunKey] = field(default_factory=set)  # ended (their end series), done too
    last_progress: dict[RunKey, float] = field(default_factory=dict)
    # filled by the cycle after ``assemble`` when the stall check needs it (set_util_recent)
    util_recent: dict[PodKey, float] = field(default_factory=dict)
    allocations: list[Allocation] = field(default_factory=list)
    rejected: dict[RunKey, str] = field(default_factory=dict)  # run key -> reason
    # runs rejected as ``RUN_FAILED``: their error, for the cycle to log (pure: no log here)
    failed: dict[RunKey, str] = field(default_factory=dict)
    # per run whose GPU-use and memory means were read: the time its means reach now
    means_until: dict[RunKey, float] = field(default_factory=dict)
    # present runs with progress but no planned total, in the answers' order
    planless: list[PlanlessRun] = field(default_factory=list)
    _pod_util: dict[tuple[str, str], float] | None = None

    def set_util_recent(self, values: dict[PodKey, float]) -> None:
        """Recent GPU use per container, read after ``assemble`` (``queries.ON_DEMAND``)."""
        self.util_recent = values
        self._pod_util = None

    def pod_util_recent(self) -> dict[tuple[str, str], float]:
        """Highest recent GPU use per (namespace, pod) over its containers (cached)."""
        if self._pod_util is None:
            self._pod_util = {}
            for (ns, pod, _), value in self.util_recent.items():
                self._pod_util[ns, pod] = max(value, self._pod_util.get((ns, pod), value))
        return self._pod_util


def assemble(
    instant: Mapping[str, Sequence[Sample]],
    ranges: Mapping[str, Sequence[Series]],
    now: float,
    span_seconds: float,
    means_for: Collection[RunKey] | None = None,
    covered: Mapping[RunKey, float] | None = None,
) -> CycleView:
    """Join the per-query answers into a ``CycleView`` (see the module docstring).

    The GPU-use and memory means (util_mean, memory_ratio) were read for the runs
    ``means_for`` (None: every run) and add the ``span_seconds`` before ``now`` to their
    lifetime means (0: none read); ``covered``: per run, the time its stored means
    already reach, when a read of its own came later than that span's start. Each read
    is weighted (history.record) by the seconds of the run's life it adds: from the
    latest of the span's start, the run's start and its ``covered`` time, to ``now``, or
    to its last progress or report when it is no longer present (none after it).
    ``CycleView.means_until`` holds, per run read, the time its means then reach."""
    covered = covered or {}
    view = CycleView()
    # progress and its time are paired on the labels as they came (_twins), so a run
    # scraped twice never gets one scrape's epoch with the other's end time
    pairs = _range_pairs(ranges.get("epoch_range", ()), ranges.get("epoch_end_range", ()))
    latest_epochs = _latest_pairs(instant.get("epoch", ()), instant.get("last_end", ()))
    latest_steps = _latest_pairs(instant.get("step", ()), instant.get("last_report", ()))
    instant = {k: [unexported(x) for x in v] for k, v in instant.items()}
    ranges = {k: [unexported(x) for x in v] for k, v in ranges.items()}
    planned = _by_run(instant.get("planned", ()))
    present = _by_run(instant.get("present", ()))
    # progress of a run scraped twice: the scrape furthest on
    epoch = _by_run(instant.get("epoch", ()), highest=True)
    steps_planned = _by_run(instant.get("steps_planned", ()))
    step = _by_run(instant.get("step", ()), highest=True)
    start = _by_run(instant.get("start", ()))
    last_report = _by_run(instant.get("last_report", ()), highest=True)
    batch = _by_run(instant.get("batch_size", ()))
    end = _by_run(instant.get("ended", ()), highest=True)
    step_firsts = _first_seen(ranges.get("step_range", ()))
    start_step = _by_run(instant.get("start_step", ()))

    util_mean = _by_pod(instant.get("util_mean", ()))
    memory = _by_pod(instant.get("memory_ratio", ()))
    view.allocations = _allocations(instant.get("allocated", ()))
    models = _gpu_models(instant.get("gpu_info", ()))
    jobs = _job_names(instant.get("pod_info", ()))
    # each pod's GPUs and each container's (_features)
    pod_gpus: dict[tuple[str, ...], list[Allocation]] = {}
    for alloc in view.allocations:
        pod_gpus.setdefault((alloc.namespace, alloc.pod), []).append(alloc)
        pod_gpus.setdefault((alloc.namespace, alloc.pod, alloc.container), []).append(alloc)

    lo, hi = now - _PAST_LIMIT_SECONDS, now + _FUTURE_SLACK_SECONDS
    for run in dict.fromkeys([*planned, *steps_planned]):
        try:  # one run's unforeseen error costs that run alone (module docstring)
            sample = planned.get(run)
            steps_sample = steps_planned.get(run)
            by_steps = sample is None and steps_sample is not None
            if by_steps:
                sample = steps_sample
            assert sample is not None
            n_planned = sample.value
            if not plausible_plan(n_planned):
                view.rejected[run] = (
                    "invalid_steps_planned" if by_steps else "invalid_epochs_planned"
                )
                continue
            cur = step.get(run) if by_steps else epoch.get(run)
            if not _plausible_progress(cur):
                view.rejected[run] = "invalid_progress"
                continue
            labels = sample.labels
            start_s = start.get(run)
            if start_s is None or not (_finite(start_s.value) and lo <= start_s.value <= hi):
                view.rejected[run] = "invalid_start"
                continue
            t0 = start_s.value
            end_s = end.get(run)
            ended = end_s is not None and _finite(end_s.value) and end_s.value >= t0
            if by_steps:
                candidates = _thin_steps(
                    _from_start_step(
                        [(v, t) for t, v in step_firsts.get(run, ())] + latest_steps.get(run, []),
                        start_step.get(run),
                        t0,
                        n_planned,
                    ),
                    n_planned,
                )
            else:
                candidates = [*pairs.get(run, ()), *latest_epochs.get(run, ())]
                if kept_by_cell((e for e, _t in candidates), counts_steps=False):
                    candidates = _thin_steps(candidates, n_planned)
            done = cur is not None and _finite(cur.value) and cur.value >= n_planned
            stated = n_planned
            if ended:
                n_planned, done = ended_plan(n_planned, cur), True
            ends: dict[float, float] = {}  # duplicates of one epoch: its earliest end
            for e, t in candidates:
                if _finite(e) and _finite(t) and 0 < e <= n_planned and t0 <= t <= hi:
                    ends[e] = min(t, ends.get(e, math.inf))
            key: PodKey = run[:3]
            features = _features(run, batch.get(run), jobs, pod_gpus, models, by_steps)
            if n_planned < stated:  # ended short of it: the replay forecasts it to this
                features[STATED_PLAN] = stated
            util = _ratio(util_mean.get(key))
            running_now = run in present and not ended
            progress_ts = _progress_time(t0, ends.values(), last_report.get(run), hi)
            weight, reach = 0.0, None
            if span_seconds > 0 and (means_for is None or run in means_for):
                since = max(now - span_seconds, t0, covered.get(run, -math.inf))
                until = now if running_now else min(now, progress_ts)
                weight, reach = max(0.0, until - since), max(since, until)
            update = RunUpdate(
                run_id=run[3],
                epochs_planned=n_planned,
                start_timestamp=t0,
                epoch_ends=tuple(sorted(ends.items())),
                namespace=key[0],
                pod=key[1],
                container=key[2],
                node=labels.get("node", ""),
                features=features,
                util_mean=util,
                memory_mean=_ratio(memory.get(key), upper=4.0),
                weight_seconds=weight,
                seen_timestamp=now if running_now else 0.0,
            )
            # the view changes only once nothing of this run can fail
            view.updates.append(update)
            if ended:
                view.ended.add(run)
            if reach is not None:
                view.means_until[run] = reach
            view.last_progress[run] = progress_ts
            if running_now and not done:
                view.present.add(run)
            elif done:
                view.done.add(run)
        except Exception as err:
            view.rejected[run] = RUN_FAILED
            view.failed[run] = _failure(err)
    for run in dict.fromkeys([*epoch, *step]):
        if run in planned or run in steps_planned or run not in present:
            continue
        if _ended(end.get(run), start.get(run)):
            continue
        try:  # as above
            by_steps = run not in epoch
            sample = step[run] if by_steps else epoch[run]
            if not _plausible_progress(sample):
                view.rejected[run] = "invalid_progress"
                continue
            start_s = start.get(run)
            if start_s is None or not (_finite(start_s.value) and lo <= start_s.value <= hi):
                view.rejected[run] = "invalid_start"
                continue
            ends_seen = (t for _, t in latest_epochs.get(run, ()) if _finite(t) and t <= hi)
            progress_ts = _progress_time(start_s.value, ends_seen, last_report.get(run), hi)
            found = PlanlessRun(
                key=run,
                node=sample.labels.get("node", ""),
                start_timestamp=start_s.value,
                features=_features(run, batch.get(run), jobs, pod_gpus, models, by_steps),
            )
            view.last_progress[run] = progress_ts
            view.planless.append(found)
        except Exception as err:
            view.rejected[run] = RUN_FAILED
            view.failed[run] = _failure(err)
    return view


def _ended(end: Sample | None, start: Sample | None) -> bool:
    """Whether a run without a plan has ended: its end series answered, unless at a time
    before its start. Why the exception: a run trained again under its key (a notebook
    cell run again) leaves its earlier attempt's end in the window's answers
    (``last_over_time``) while its new attempt runs; as for a run with a plan
    (``assemble``), such an end is not the run's."""
    if end is None:
        return False
    if start is None or not (_finite(end.value) and _finite(start.value)):
        return True
    return end.value >= start.value


def ended_plan(planned: float, reached: Sample | None) -> float:
    """The plan of a run that ended: what it reached (``reached``: its latest epoch, or
    step for a run followed in steps) when that is short of ``planned``, else ``planned``.
    Pure.

    Why what it reached: a run stopped early (early stopping, a quality target) ended
    where its job ends; its duration is what an identical next run may take, and its
    speed over it is real. Stored with its plan kept it would count as cancelled: left
    out of the analogs and of the plan-less runs' durations, which learn only completed
    runs, and its whole-run time read by the prior as its speed times a plan it never
    ran. A run that ended before one whole epoch or step (nothing reached, or 0.37 of
    an epoch: a Hugging Face run early-stopped in its first) keeps its plan: it is
    stored not completed. Why not lowered to a fraction: a plan under ``MIN_PLANNED``
    is not a run's plan anywhere else (the live path rejects it, the exporter gives a
    plan-less run that ended there no total), and a run that did not get through one
    epoch has no duration worth learning. The caller keeps the plan it lowered as the
    run's feature ``runs.STATED_PLAN``: every live forecast of the run was made to it,
    and the calibration replay must see the same (``runs.as_seen_live``)."""
    if reached is None or not (_finite(reached.value) and MIN_PLANNED <= reached.value < planned):
        return planned
    return reached.value


def _progress_time(start: float, ends: Iterable[float], report: Sample | None, hi: float) -> float:
    """A run's latest progress for the stall check: its start, its latest epoch end
    (``ends``: already checked) or its last report of any kind within [start, hi] (a
    step report shows the run alive inside a long epoch)."""
    latest = max([start, *ends])
    if report is not None and _finite(report.value) and start <= report.value <= hi:
        latest = max(latest, report.value)
    return latest


def _features(
    run: RunKey,
    batch: Sample | None,
    jobs: Mapping[tuple[str, str], str],
    pod_gpus: Mapping[tuple[str, ...], Sequence[Allocation]],
    models: Mapping[tuple[str, str, str], str],
    by_steps: bool,
) -> dict[str, float | str]:
    """A run's features (module docstring) from its batch-size sample, its pod's job
    name, its container's GPUs (``pod_gpus`` by ``(namespace, pod, container)``; by
    ``(namespace, pod)``: the pod's, for a run whose container holds none) and whether
    it is followed in steps.

    Why per container: GPUs are allocated per container, so two one-GPU training
    containers of a pod are two one-GPU runs, not two two-GPU ones; a run's report may
    name no container (filed under the pod's first, docs/progress.md), and then the
    pod's GPUs are the best guess."""
    features: dict[str, float | str] = {}
    if run[0]:
        features["namespace"] = run[0]
    if batch is not None and _finite(batch.value) and 0 < batch.value < 1e9:
        features["batch_size"] = batch.value
    job_name = jobs.get(run[:2]) or _strip_suffix(run[1])
    if job_name:
        features["job_name"] = job_name
    gpus = pod_gpus.get(run[:3]) or pod_gpus.get(run[:2], ())
    if gpus:
        features["gpus"] = float(len(gpus))
        keys = ((g.node, g.uuid, g.gpu_instance) for g in gpus)
        model = next((models[k] for k in keys if k in models), None)
        if model:
            features["gpu_model"] = model
    if by_steps:
        features["progress_unit"] = STEPS_UNIT
    return features


def pod_values(samples: Sequence[Sample]) -> dict[PodKey, float]:
    """Per-container answers (``util_recent``) by ``(namespace, pod, container)``,
    ``exported_*`` labels read as the plain ones."""
    return _by_pod([unexported(x) for x in samples])


def ending_runs(instant: Mapping[str, Sequence[Sample]]) -> list[RunKey]:
    """Runs whose progress series may not be read again, in key order: at their plan
    (epochs, or steps for a run that reports only steps), ended (``ended``), or seen in
    the window but no longer present. Their epoch ends between two full range reads are
    read before the store freezes them (``Cycle._range_span``)."""
    present = run_keys(instant.get("present", ()))
    out: set[RunKey] = set(run_keys(instant.get("ended", ())))
    for progress, plan in (("epoch", "planned"), ("step", "steps_planned")):
        planned = {
            k: s.value for s in instant.get(plan, ()) if (k := sample_run_key(s)) is not None
        }
        for s in instant.get(progress, ()):
            key = sample_run_key(s)
            if key is None:
                continue
            limit = planned.get(key)
            if key not in present or (limit is not None and s.value >= limit):
                out.add(key)
    return sorted(out)


def run_keys(samples: Iterable[Sample]) -> frozenset[RunKey]:
    """The runs of ``samples`` (those with a usable run key, ``sample_run_key``)."""
    return frozenset(k for s in samples if (k := sample_run_key(s)) is not None)


def sample_run_key(sample: Sample) -> RunKey | None:
    """The run a sample belongs to, as ``assemble`` reads it (``exported_*`` labels
    honoured); None without a usable run key."""
    return _run_key(unexported(sample).labels)


def sample_pod(sample: Sample) -> tuple[str, str]:
    """``(namespace, pod)`` of a sample, as ``assemble`` reads it."""
    labels = unexported(sample).labels
    return (labels.get("namespace", ""), labels.get("pod", ""))


def sample_gpu(sample: Sample) -> tuple[str, str, str] | None:
    """``(node, UUID, GPU_I_ID)`` of a GPU-info or allocation sample (``GPU_I_ID``
    empty for a whole GPU), the key ``assemble`` joins them on; None without a UUID."""
    labels = unexported(sample).labels
    uuid = labels.get("UUID", "")
    return (labels.get("node", ""), uuid, labels.get("GPU_I_ID", "")) if uuid else None


def _run_key(labels: Mapping[str, str]) -> RunKey | None:
    """The run a series belongs to, or None (no run_id, or an oversized label)."""
    run_id = labels.get("run_id", "")
    if not run_id or len(run_id) > MAX_RUN_ID:
        return None
    ns, pod, container = (
        labels.get("namespace", ""),
        labels.get("pod", ""),
        labels.get("container", ""),
    )
    if len(ns) > MAX_LABEL or len(pod) > MAX_LABEL or len(container) > MAX_LABEL:
        return None
    return (ns, pod, container, run_id)


def _by_run(samples: Sequence[Sample], highest: bool = False) -> dict[RunKey, Sample]:
    """Per run, its first sample, or with ``highest`` the one with the highest finite
    value (a run scraped twice: the scrape furthest on)."""
    out: dict[RunKey, Sample] = {}
    for s in samples:
        key = _run_key(s.labels)
        if key is None:
            continue
        prev = out.get(key)
        if prev is None or (
            highest and _finite(s.value) and not (_finite(prev.value) and prev.value >= s.value)
        ):
            out[key] = s
    return out


def _pod_key(labels: Mapping[str, str]) -> PodKey:
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))


def _by_pod(samples: Sequence[Sample]) -> dict[PodKey, float]:
    out: dict[PodKey, float] = {}
    for s in samples:
        if _finite(s.value):
            out[_pod_key(s.labels)] = s.value
    return out


def _range_pairs(
    epochs: Sequence[Series], ends: Sequence[Series]
) -> dict[RunKey, list[tuple[float, float]]]:
    """(epoch, end time) at each instant an epoch series and its own end-time series
    (``_twins``) were both sampled, per run."""
    out: dict[RunKey, list[tuple[float, float]]] = {}
    for key, twins in _twins(epochs, ends).items():
        pairs = out.setdefault(key, [])
        for s, end_series in twins:
            end_at = dict(end_series.points)
            last = None
            for ts, value in s.points:
                end = end_at.get(ts)
                if end is not None and (value, end) != last:
                    pairs.append((value, end))
                    last = (value, end)
    return out


def _latest_pairs(
    progress: Sequence[Sample], times: Sequence[Sample]
) -> dict[RunKey, list[tuple[float, float]]]:
    """The latest ``(progress, time)`` per run and scrape (``_twins``): an epoch at its
    end time, or a step at the last report's time."""
    return {
        key: [(p.value, t.value) for p, t in twins]
        for key, twins in _twins(progress, times).items()
    }


def _twins(firsts: Sequence[_S], seconds: Sequence[_S]) -> dict[RunKey, list[tuple[_S, _S]]]:
    """Per run, each of ``firsts`` with the one of ``seconds`` from the same scrape.

    Why: the same run's series may come twice (the exporter scraped by two jobs or
    through two instances, or once with its labels honoured and once as
    ``exported_*``: the same run key, other labels), each scrape at its own moment, so
    one may be an epoch ahead of the other. Joined on the run key alone, an epoch was
    paired with the other scrape's end time and stored so for good. So a series is
    joined with the one of exactly its labels but the metric name, read as they came
    (before ``exported_*`` are renamed). Without such a twin it takes the run's only
    one (labels that differ otherwise); with several and no twin, none. Duplicates
    then meet in ``assemble``, which keeps each epoch's earliest end time.
    """
    of_run: dict[RunKey, list[_S]] = {}
    for item in seconds:
        key = _run_key(unexported(item).labels)
        if key is not None:
            of_run.setdefault(key, []).append(item)
    # per run with several: its items by labels, built when first needed
    by_labels: dict[RunKey, dict[frozenset[tuple[str, str]], _S]] = {}
    out: dict[RunKey, list[tuple[_S, _S]]] = {}
    for item in firsts:
        key = _run_key(unexported(item).labels)
        if key is None or key not in of_run:
            continue
        candidates = of_run[key]
        if len(candidates) == 1:  # the common case: nothing to compare
            out.setdefault(key, []).append((item, candidates[0]))
            continue
        if key not in by_labels:
            by_labels[key] = {}
            for c in candidates:
                by_labels[key].setdefault(_identity(c.labels), c)
        twin = by_labels[key].get(_identity(item.labels))
        if twin is not None:
            out.setdefault(key, []).append((item, twin))
    return out


def _identity(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """A series' labels but its metric name: what makes two metrics one scrape's."""
    return frozenset((k, v) for k, v in labels.items() if k != "__name__")


def _first_seen(series: Sequence[Series]) -> dict[RunKey, list[tuple[float, float]]]:
    """Per run, ``(t, value)`` at the first sampled instant of each new value."""
    out: dict[RunKey, list[tuple[float, float]]] = {}
    for s in series:
        key = _run_key(s.labels)
        if key is None:
            continue
        firsts = out.setdefault(key, [])
        last = None
        for ts, value in s.points:
            if value != last:
                firsts.append((ts, value))
                last = value
    return out


def kept_by_cell(progress: Iterable[float], counts_steps: bool) -> bool:
    """Whether a run's points are kept one per 1/``STEP_CELLS`` of its plan (this
    cycle's by ``_thin_steps``, the stored ones by ``history.crowded_steps``): a run
    followed in steps, or one with a ``progress`` value that is not a whole number (a
    fractional epoch: Hugging Face's ``state.epoch``, 0.0123 and on). Pure.

    Why: a fractional epoch moves on at every report. The exporter publishes at most
    one epoch end per cell (``exporter.progress.stamps_epoch_end``), but series that
    did not pass through that rule (an exporter of another version, a series written
    by hand) stamp one per report, and a run that never ends then stored one more
    point every cycle (20,160 after 14 days at one cycle a minute), read into memory
    each cycle. Whole epochs are left as they are (Keras, Lightning, the MLPerf
    corpus): the exporter publishes one per cell, or one per epoch for a run reported
    epoch by epoch, and only such a run shows its evaluation passes
    (``runs.thinned``)."""
    return counts_steps or any(math.isfinite(p) and not float(p).is_integer() for p in progress)


def _from_start_step(
    points: list[tuple[float, float]], begun: Sample | None, start: float, planned: float
) -> list[tuple[float, float]]:
    """A run followed in steps: ``points`` (step, time) with the step it started at
    (``begun``, ``gpu_eta_training_start_step``) as a point at its ``start``, the points
    below it left out; ``points`` as they are without one, or with one that is no step
    within the plan. Pure.

    Why: steps carry no time on the wire, and a run resumed from a checkpoint at 8,000
    of 10,000 read its 8,000 steps done by the first read that showed them (its forecast
    seconds, its history a fifth of its length). Stamped at its start it is the run's
    origin, as epochs a resume ended at its start are (``runs.resume_point``,
    ``runs.own_work``). A step below it is not this run's (a named run's counter moved
    back): left out, the points stay in order."""
    if begun is None or not (_finite(begun.value) and 0 < begun.value < planned):
        return points
    return [(begun.value, start), *((v, t) for v, t in points if v >= begun.value)]


def _thin_steps(points: list[tuple[float, float]], planned: float) -> list[tuple[float, float]]:
    """At most one point per 1/``STEP_CELLS`` of the ``planned`` steps: bounded storage
    for long runs.

    The latest point is always kept (it carries the freshest rate). Points outside
    [0, ``MAX_PROGRESS``] are dropped, as ``assemble`` drops any out-of-range point.
    """
    valid = sorted(((u, t) for u, t in points if _in_bound(u) and _finite(t)), key=lambda p: p[1])
    kept: list[tuple[float, float]] = []
    cells: set[int] = set()
    for unit, ts in valid[:-1]:
        cell = step_cell(unit, planned)
        if cell is not None and cell not in cells:
            cells.add(cell)
            kept.append((unit, ts))
    return kept + valid[-1:]


def _allocations(samples: Sequence[Sample]) -> list[Allocation]:
    """The GPUs held, one per GPU (``node``, ``UUID``, MIG instance ``GPU_I_ID``) and
    holder container (``namespace``, ``pod``, ``container``), in the answer's order;
    samples without a pod or UUID left out. ``samples``: already ``unexported``.

    Why one per GPU and holder: an exporter scraped twice (honouring labels, and by a
    pod-level scrape that renames them ``exported_*``) answers each allocation twice
    (``ALLOCATED`` groups by both label forms), the same once renamed; counted twice, a
    one-GPU pod read as ``gpus`` 2, another configuration with another regressor input.
    """
    out: dict[tuple[str, str, str, str, str, str], Allocation] = {}
    for s in samples:
        lab = s.labels
        if not lab.get("pod") or not lab.get("UUID"):
            continue
        alloc = Allocation(
            node=lab.get("node", ""),
            gpu=lab.get("gpu", ""),
            uuid=lab["UUID"],
            namespace=lab.get("namespace", ""),
            pod=lab["pod"],
            container=lab.get("container", ""),
            gpu_instance=lab.get("GPU_I_ID", ""),
        )
        held = (alloc.node, alloc.uuid, alloc.gpu_instance, alloc.namespace, alloc.pod)
        out.setdefault((*held, alloc.container), alloc)
    return list(out.values())


def _gpu_models(samples: Sequence[Sample]) -> dict[tuple[str, str, str], str]:
    """The model of each device by ``(node, UUID, GPU_I_ID)``, ``GPU_I_ID`` empty for a
    whole GPU; a MIG GPU instance's is its GPU's model and profile
    (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``).

    Why the profile: a 1g.10gb slice has a seventh of the GPU's compute, so a run on it
    is not a run on the whole GPU; read as the GPU's model, both would be one node type
    (``<gpus>x<gpu_model>``) to the estimators."""
    out: dict[tuple[str, str, str], str] = {}
    for s in samples:
        lab = s.labels
        if not lab.get("UUID") or not lab.get("model"):
            continue
        model = lab["model"]
        if lab.get("mig_profile"):
            model = f"{model} MIG {lab['mig_profile']}"
        out[lab.get("node", ""), lab["UUID"], lab.get("GPU_I_ID", "")] = model[:128]
    return out


def _job_names(samples: Sequence[Sample]) -> dict[tuple[str, str], str]:
    out: dict[tuple[str, str], str] = {}
    for s in samples:
        lab = s.labels
        key = (lab.get("namespace", ""), lab.get("pod", ""))
        # A Job's name carries what made it: a CronJob's scheduled minute
        # (``nightly-29438760``), a generateName's random tail (``train-x7k2p``). Kept,
        # every run of a nightly retraining would be a job of its own, with no history.
        name = _job_of(next((lab[k] for k in _JOB_LABELS if lab.get(k)), ""))
        name = name or next((lab[k] for k in _NAME_LABELS if lab.get(k)), "")
        if not name and lab.get("owner_name"):
            generated = _OWNER_SUFFIX.get(lab.get("owner_kind", ""), str)
            name = generated(lab["owner_name"])
        if name:
            out[key] = name[:128]
    return out


def _job_of(job: str) -> str:
    """A Job's name without a CronJob's scheduled minute (``nightly-29438760`` →
    ``nightly``) or a generateName suffix (``train-x7k2p`` → ``train``), once; the name
    itself if nothing would be left."""
    return _JOB_SUFFIX.sub("", job) or job


def _strip_suffix(pod: str) -> str:
    """``train-abc12`` → ``train``; ``train-7d9f8c6b5-x2x4z`` → ``train`` (Deployment pods)."""
    name = pod
    for _ in range(2):
        stripped = _HASH_SUFFIX.sub("", name)
        if stripped == name or not stripped:
            break
        name = stripped
    return name[:128]


# An owner's name without what its controller added: a ReplicaSet's pod-template hash,
# a Job's CronJob minute or generateName suffix; other owners' names are chosen.
_OWNER_SUFFIX: dict[str, Callable[[str], str]] = {"ReplicaSet": _strip_suffix, "Job": _job_of}


def _ratio(value: float | None, upper: float = 1.0) -> float | None:
    if value is None or not _finite(value) or value < 0:
        return None
    return min(value, upper)


def _in_bound(value: float) -> bool:
    """Whether a progress value is one the wire format carries: in [0, ``MAX_PROGRESS``]
    (NaN is not)."""
    return 0 <= value <= MAX_PROGRESS


def _plausible_progress(reached: Sample | None) -> bool:
    """Whether a run's latest epoch or step is usable or absent: NaN (no usable value,
    its points dropped one by one) or in [0, ``MAX_PROGRESS``]; anything else (negative,
    beyond the bound, infinite) is not a run's progress."""
    return reached is None or math.isnan(reached.value) or _in_bound(reached.value)


def _failure(err: Exception) -> str:
    """One run's unforeseen error as ``CycleView.failed`` keeps it: its type and text,
    bounded (the text may quote a label value)."""
    return f"{type(err).__name__}: {err}"[:_MAX_FAILURE]


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
