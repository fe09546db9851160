"""Every PromQL expression the forecaster sends, as named templates.

Each query returns the series of every job at once and the join happens in Python
(``gpu_eta.forecaster.runs_from_series``). One cycle sends the ``INSTANT`` and
``RANGE`` queries (the latter and the ``SPAN`` means for every run one cycle in
``range_every``, in the other cycles only for the runs that end:
``Cycle._range_span``; ``ON_DEMAND`` when some run shows no progress),
``STEP_RANGE`` when some run reports only steps, and the kube-state-metrics queries
of the GPU queue (``PENDING``) folded into one (``fold``: each part tagged with a
``forecaster_query`` label, joined with ``or``, split again by ``unfold``), and one
more folded query when the pods' answers call for it (``kube_state.second_round``: the
GPU nodes' labels when pending pods select keys beyond the GPU type, when pods without
``kube_pod_created`` were first seen Pending, and where KSM exports it for no pod the GPU
pods first seen in the arrival window): ``QUERIES_PER_CYCLE`` (20) with one query
of each kind, whatever the number of jobs and pods. That keeps the load on Prometheus
flat as the cluster grows, and makes the count checkable by a test. A few reads are cut
into several queries, each extra query on top, each bounded by the configuration, not
by the cluster (``MOST_QUERIES_PER_CYCLE``, 50 in all): a first cycle's range read of
more than ``MAX_CHANGES_RUNS`` runs, in up to ``MAX_RANGE_WINDOWS`` time windows per
template (``range_windows``: 18 more); the ending runs' GPU-use and memory means, in up
to ``MAX_POD_QUERIES`` each (6 more, never with the windows); a round of the queue
that does not fit one query of ``MAX_QUERY_CHARS`` for a site whose own GPU resource
names (``--pending.gpu-resource``) are many and long (``kube_state.batches``: at most
``len(PENDING) - 1`` more for the first round and 3 for the second, whose node labels
may come in two parts, ``kube_state.SECOND_ROUND_PARTS``; 32 names of 65
characters: 4, the first round in 5); the step query and the start step's, folded
into one, sent apart when the restarted runs they name make them too long for one
(``step_reads``: 1 more); and the first query sent again when the cycle starts over at
Prometheus' time (``Cycle.run``).
(Folding the per-run queries the same way would save queries, not TSDB time:
Prometheus' ``or`` over 90,000 series cost a third more than the nine queries it
replaced.)

What the TSDB spends is mostly encoding the answers (docs/scrape-tuning.md): the
per-run, per-container and inventory queries keep only the labels the forecaster
reads (``max by``: the run key, the node, their ``exported_*`` forms for a scrape
that did not honour labels), and the step queries only runs without planned epochs.

Templates take ``{window}`` (the span since the previous cycle, or the first-cycle
lookback) and ``{idle}`` (the span over which a GPU must have been idle for a job
to count as stalled), both rendered as ``<n>s``, and in their selectors ``{runs}`` or
``{pods}``: empty, or a set match restricting them to some runs or pods (``matcher``).
The per-run templates of a series a restarted run may no longer send take the
restarted runs' clause (``AGAIN_SERIES``): empty, or the runs found restarted within the
window left without their earlier attempt's last samples (``render``'s ``again``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from gpu_eta.common.gpu_use import ALLOCATED_SINCE, UTIL, use_max, use_mean, use_mean_of
from gpu_eta.forecaster import kube_state
from gpu_eta.forecaster.series import Sample, Series
from gpu_eta.forecaster.set_match import matcher

# The labels of a run's series the forecaster reads; the others (instance, job,
# cluster, ...) are dropped by the TSDB before encoding.
RUN_LABELS = (
    "namespace, pod, container, run_id, node, "
    "exported_namespace, exported_pod, exported_container, exported_node"
)
# Those that make the run key (``runs.RunKey``), in either form: a run's series on
# another node (its pod rescheduled under its name) are the same run's.
RUN_KEY_LABELS = (
    "namespace, pod, container, run_id, exported_namespace, exported_pod, exported_container"
)


def _per_run(expr: str) -> str:
    return f"max by ({RUN_LABELS}) ({expr})"


# Runs whose series exist right now (Prometheus' 5-minute lookback): running. The
# last-report series exists for every run, whether it reports epochs or only steps.
PRESENT = _per_run("gpu_eta_training_last_report_timestamp_seconds")
# Runs whose run ended in the window (the end series: their sender said ``end``, or a
# plan-less run's pod succeeded), whether their pod lives on or went since: done at
# what they reached (runs_from_series.assemble). Never a query of its own: asked folded
# with PRESENT (``PRESENT_PARTS``), so the cycle's count does not grow.
ENDED = _per_run("last_over_time(gpu_eta_training_run_end_timestamp_seconds[{window}])")
# A run restarted under its key (a named run trained again in its pod: Cycle._query
# finds it) leaves its earlier attempt's last samples in the window. Its exporter stops
# sending a series the new attempt lacks (trained again without a plan, or in steps
# only), and its next scrape marks that series stale; ``last_over_time`` skips the
# marker, so the new attempt read the old one's plan, epoch or batch size until they
# left the window (and held them between full reads: static_series): forecast to the
# old plan, stored completed at it, or finished at once as a run past its plan. So the
# templates reading those series (``AGAIN_SERIES``) carry a clause ``render`` fills for
# the runs its ``again`` set match names (those found restarted within the window):
# ``unless on (R) ((last_over_time(S{again}[W]) unless on (R) S{again}) and on (K)
# <last report>{again})``. Of a run named that is present now (its last report,
# PRESENT's series, answers a plain selector), every series S no longer present now (a
# plain selector honours the marker) is left out: the run's own, and the earlier
# attempt's under another ``node`` (a pod rescheduled under its name), K being the run
# key's labels without the node. A run named that is gone (its last report stale too),
# and every run not named, read as before. Without ``again`` the clause is empty and
# the query is as it was: its cost is only the named runs' series, looked up in the
# index.
AGAIN_SERIES = ("epochs_planned", "epoch", "steps_planned", "step", "batch_size", "start_step")
_TRAINING = "gpu_eta_training_"
_LAST_REPORT = f"{_TRAINING}last_report_timestamp_seconds"


def _lately(name: str, runs: str = "") -> str:
    """``last_over_time`` of the training series ``name`` over the window (with ``runs``:
    the ``{runs}`` placeholder) and the restarted runs' clause for it (``AGAIN_SERIES``)."""
    return f"last_over_time({_TRAINING}{name}{runs}[{{window}}]){{again_{name}}}"


# Last values of every run seen in the window, including runs that vanished in it.
PLANNED = _per_run(_lately("epochs_planned", "{runs}"))
EPOCH = _per_run(_lately("epoch"))
# Steps are read only for runs without planned epochs (followed in percent of their
# steps); a run that reports both is followed by its epochs.
_NO_EPOCHS = f"unless ({_lately('epochs_planned', '{runs}')})"
STEPS_PLANNED = _per_run(f"{_lately('steps_planned', '{runs}')} {_NO_EPOCHS}")
STEP = _per_run(f"{_lately('step')} {_NO_EPOCHS}")
# The step a run followed in steps started at (a resume from a checkpoint; no series
# from step 0, nor from an exporter that does not publish it): steps carry no time on the
# wire, so this is where the run's work begins (runs_from_series.assemble). Never a query
# of its own: asked folded with STEP (``STEP_PARTS``), so the cycle's count does not grow,
# but where the two do not fit one query (``step_reads``). Read only for runs followed in
# steps (``assemble``), so it needs no ``_NO_EPOCHS``: a run with both answers a series
# nothing reads, and the restarted runs' match is in it three times, not six.
START_STEP = _per_run(_lately("start_step"))
START = _per_run("last_over_time(gpu_eta_training_run_start_timestamp_seconds{runs}[{window}])")
# The latest start of the runs whose start changed in the window: restarted under their
# key since the previous read (a named run trained again in its pod). The start itself is
# held between full reads (static_series), and a run restarted whose new attempt has
# passed its old epoch by the next cycle shows no progress going back (``went_back``);
# this finds it. Selects every run's start series but answers only the restarted ones
# (VictoriaMetrics' ``changes`` also counts a series' first sample in the window: it
# answers runs new in the window too, whose start is not held or is the one held);
# asked folded with PRESENT (``PRESENT_PARTS``), so the cycle's query count is unchanged.
STARTED_AGAIN = _per_run(
    "last_over_time(gpu_eta_training_run_start_timestamp_seconds[{window}]) "
    "and (changes(gpu_eta_training_run_start_timestamp_seconds[{window}]) > 0)"
)
LAST_END = _per_run("last_over_time(gpu_eta_training_epoch_end_timestamp_seconds[{window}])")
LAST_REPORT = _per_run("last_over_time(gpu_eta_training_last_report_timestamp_seconds[{window}])")
BATCH_SIZE = _per_run(_lately("batch_size", "{runs}"))


# GPU use per container: ours, or else DCGM's (0..100, per device, with pod labels
# as `pod`/`namespace`/`container` or `exported_*` when the scrape did not honour
# labels). Either side's series name their holder by the `exported_*` labels where a
# scrape without honor_labels set them (the `namespace`/`pod`/`container` then being
# the scraped exporter's own), else by the plain ones: both are keyed by the holder's
# names (``_as_holder``) before they are aggregated per container, so `or` keeps a
# DCGM series only where ours has none for the same container, whichever label form
# each came in (GPU Operator's ServiceMonitor scrapes DCGM without honorLabels by
# default; grouped by the labels as scraped, DCGM's exported series would never meet
# ours and both would come back, the one read last winning), and each holder on an
# exporter of ours scraped without honor_labels is its own, not averaged under the
# exporter's pod. The answers carry only `namespace`/`pod`/`container`.
# ``{pods}``: empty (every pod), or a set match on ``pod`` or ``exported_pod`` (for_pods).
# Ours counts a scrape of the allocation without a utilisation sample as fully busy
# (gpu_eta.common.gpu_use): a time-sliced GPU's holders have samples only at the
# device's 0 % moments, and over those alone a busy run read idle, its mean GPU use 0
# and, with no progress for a while, stalled. The stall check's max is then 1 after
# any scrape without a sample in ``{idle}``: a run is declared stalled on GPU evidence
# only where every scrape of its allocation says idle.
DCGM_UTIL = "DCGM_FI_DEV_GPU_UTIL"
# the labels that name a GPU holder; each has its ``exported_`` form (util_mean_of reads
# them as ``_as_holder`` rewrites them)
_HOLDER_LABELS = ("namespace", "pod", "container")


def _as_holder(expr: str) -> str:
    """``expr`` with each of ``_HOLDER_LABELS`` set to its ``exported_`` label's value
    where that is set (``label_replace`` leaves a series whose source label is empty
    as it is): the holder's names, however the series was scraped. The ``exported_``
    labels stay until the aggregation, so the series stay distinct (a function's answer
    with two equal label sets is an error) unless two differed in a target's own
    names alone, which the target's ``instance`` rules out."""
    for label in _HOLDER_LABELS:
        expr = f'label_replace({expr}, "{label}", "$1", "exported_{label}", "(.+)")'
    return expr


def _ours_or_dcgm(agg: str, ours: str, span: str, pods: str) -> tuple[str, str]:
    """``ours`` aggregated per holder container with ``agg``, and DCGM's ``agg`` over
    ``span`` the same way: the parts of an ``or``, in the order they take precedence."""
    by = ", ".join(_HOLDER_LABELS)
    dcgm = f"{agg}_over_time({DCGM_UTIL}{pods}[{span}])"
    return f"{agg} by ({by}) ({_as_holder(ours)})", f"{agg} by ({by}) ({_as_holder(dcgm)}) / 100"


def _either(parts: Sequence[str]) -> str:
    """``parts`` joined by ``or``: each series of a part whose labels no earlier part
    answered."""
    return " or ".join(f"({part})" for part in parts)


UTIL_MEAN_PARTS = _ours_or_dcgm("avg", use_mean("{window}", "{pods}"), "{window}", "{pods}")
UTIL_MEAN = _either(UTIL_MEAN_PARTS)
UTIL_RECENT = _either(_ours_or_dcgm("max", use_max("{idle}"), "{idle}", ""))
# Templates that are an ``or`` of parts, and their parts in precedence order: ``for_pods``
# keeps the order across its two pod labels.
_PARTS: Mapping[str, Sequence[str]] = MappingProxyType({UTIL_MEAN: UTIL_MEAN_PARTS})
# The series UTIL_MEAN reads, asked as raw samples for the ending runs' pods
# (util_samples): util_mean_of computes UTIL_MEAN's answer from them.
UTIL_SAMPLES = (UTIL, ALLOCATED_SINCE, DCGM_UTIL)


def util_mean_of(series: Iterable[Series], at: float) -> list[Sample]:
    """``UTIL_MEAN``'s answer at ``at``, computed from the raw samples of the series it
    reads over its window (``util_samples``). Pure.

    The same rule and grouping as ``UTIL_MEAN``: each holder's mean by
    ``gpu_use.use_mean_of`` (its utilisation samples, and the samples of its
    allocation's start with the same labels), averaged per container (``_holder``);
    DCGM's series' mean, averaged per container and over 100, where ours answered no
    container with the same names (PromQL's ``or``), whichever label form either came
    in. A series met twice (asked by ``pod`` and by ``exported_pod``) counts once. The
    integration tests hold it to the PromQL's answer on Prometheus and
    VictoriaMetrics.
    """
    util: dict[frozenset[tuple[str, str]], list[float]] = {}
    since: dict[frozenset[tuple[str, str]], int] = {}
    dcgm: dict[frozenset[tuple[str, str]], list[float]] = {}
    for item in series:
        key = frozenset((k, v) for k, v in item.labels.items() if k != "__name__")
        values = [value for _ts, value in item.points]
        name = item.labels.get("__name__")
        if name == UTIL:
            util[key] = values
        elif name == ALLOCATED_SINCE:
            since[key] = len(values)
        elif name == DCGM_UTIL and values:
            dcgm[key] = values
    ours = _avg_by_holder(
        (key, use_mean_of(values, since.get(key, 0))) for key, values in util.items()
    )
    theirs = _avg_by_holder((key, sum(v) / len(v)) for key, v in dcgm.items())
    out = [Sample(_named(key), mean, at) for key, mean in ours.items()]
    out += [Sample(_named(key), mean / 100, at) for key, mean in theirs.items() if key not in ours]
    return out


def _holder(labels: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    """The holder a series names, as ``_as_holder`` rewrites it: each of
    ``_HOLDER_LABELS``' ``exported_`` value where set, else its own (empty: missing)."""
    named = dict(labels)
    return tuple(named.get(f"exported_{k}") or named.get(k, "") for k in _HOLDER_LABELS)


def _named(key: tuple[str, ...]) -> dict[str, str]:
    """A holder key as an aggregation's labels: the empty ones left out."""
    return {k: v for k, v in zip(_HOLDER_LABELS, key, strict=True) if v}


def _avg_by_holder(
    values: Iterable[tuple[Iterable[tuple[str, str]], float | None]],
) -> dict[tuple[str, ...], float]:
    """PromQL's ``avg by (namespace, pod, container)`` of ``(labels, value)`` after
    ``_as_holder``: the mean per holder container (``_holder``); None values (no answer)
    left out."""
    groups: dict[tuple[str, ...], list[float]] = {}
    for labels, value in values:
        if value is not None:
            groups.setdefault(_holder(labels), []).append(value)
    return {key: sum(vs) / len(vs) for key, vs in groups.items()}


_CONTAINER = "namespace, pod, container, exported_namespace, exported_pod, exported_container"
MEMORY_RATIO = (
    f"max by ({_CONTAINER}) "
    "(avg_over_time(gpu_eta_pod_memory_working_set_bytes{pods}[{window}]) "
    "/ avg_over_time(gpu_eta_pod_memory_limit_bytes{pods}[{window}]))"
)
# Inventory, with only the labels read (runs_from_series, kube_state): the GPU a
# container holds, each GPU's model, the pod labels that name its job.
ALLOCATED = (
    f"max by ({_CONTAINER}, node, exported_node, gpu, UUID, GPU_I_ID) (gpu_eta_pod_gpu_allocated)"
)
# Per device: a MIG GPU instance (``GPU_I_ID``) is a device of its own, its profile
# part of its model (runs_from_series._gpu_models).
GPU_INFO = "max by (node, exported_node, UUID, GPU_I_ID, model, mig_profile) (gpu_eta_gpu_info)"
POD_INFO = (
    "max by (namespace, pod, exported_namespace, exported_pod, owner_kind, owner_name, "
    "label_job_name, label_batch_kubernetes_io_job_name, label_app_kubernetes_io_name, "
    "label_app) (gpu_eta_pod_info{pods})"
)


# Range queries: epoch and epoch-end time sampled together give (epoch, end) pairs,
# so every epoch end seen in the window is recovered, not only the latest. Plain
# selectors: asking only for the steps where a value changed (``x != x offset
# step``) shrank the answer but tripled the TSDB's time (0.3 s → 0.9 s at 10,000 runs).
# ``{runs}``: empty (every run), or a set match on the runs read (Cycle._range_span).
EPOCH_RANGE = "gpu_eta_training_epoch{runs}"
EPOCH_END_RANGE = "gpu_eta_training_epoch_end_timestamp_seconds{runs}"
# A span longer than ``max_points`` scrape-like steps (a new forecaster's first cycle
# over its lookback: 6 h at 15 s is 1,440 steps) is read at the scrape-like step all the
# same, but only at the steps where a run's epoch end changed (``{offset}``: one step),
# its epoch beside it: about one point per epoch, where the plain selectors at a step
# of span / 239 (90 s over 6 h) kept one epoch end per step and lost the others.
# ``unless … == … offset``, not ``!= … offset``: the step of a run's first epoch end,
# whose series did not exist a step before, is kept too (range_reads).
EPOCH_END_CHANGES = (
    "gpu_eta_training_epoch_end_timestamp_seconds{runs} unless "
    "gpu_eta_training_epoch_end_timestamp_seconds{runs} == "
    "gpu_eta_training_epoch_end_timestamp_seconds{runs} offset {offset}"
)
EPOCH_AT_END_CHANGES = "gpu_eta_training_epoch{runs} and (" + EPOCH_END_CHANGES + ")"
# Prometheus refuses a range answer of more than 11,000 points per series.
PROMETHEUS_MAX_POINTS = 11_000
# Runs that report only steps (a tqdm bar in the logs, max_steps trainers); sent
# only when the instant queries found such a run. ``last_over_time(…[5m])``, not the
# bare selector: VictoriaMetrics looks back about one step in a range query, so a
# sparsely sampled epochs_planned would exclude nothing there (Prometheus: 5 min).
STEP_RANGE_PLAN_LOOKBACK = "5m"
STEP_RANGE_PLAN_SECONDS = 5 * 60  # the same, in seconds
_STEP_RANGE_PLANS = f"last_over_time({_TRAINING}epochs_planned[{STEP_RANGE_PLAN_LOOKBACK}])"
STEP_RANGE = "gpu_eta_training_step{runs} unless " + _STEP_RANGE_PLANS


def step_range(runs: str = "", again: str = "") -> str:
    """``STEP_RANGE`` for the runs ``runs`` matches (``matcher``; empty: every run), its
    plans read with the restarted runs' clause (``AGAIN_SERIES``) for the runs ``again``
    names, over the same 5 minutes; without ``again``, ``STEP_RANGE`` as it is.

    Why: a run trained again in steps after an epochs run has its earlier attempt's
    plan in those 5 minutes, so every step of its first 5 minutes was left out at every
    step of the range (only each cycle's latest step was kept, and those between
    cycles were lost for good). Evaluated at each step, the clause leaves the plan out
    at the steps where the run, present, no longer sends it (its staleness marker): the
    earlier attempt's steps, while it sent its plan, stay out."""
    if not again:
        return STEP_RANGE.format(runs=runs)
    clause = _again_clause("epochs_planned", STEP_RANGE_PLAN_LOOKBACK, again)
    return f"gpu_eta_training_step{runs} unless ({_STEP_RANGE_PLANS}{clause})"


# A failed scrape makes Prometheus mark every series of its target stale at once, so
# the plain selectors above (present, allocated) lose the target's runs until its next
# good scrape, as they lose a deleted pod's; so does a target removed from service
# discovery (a DaemonSet's rolling update: the new exporter pod is a new target), its
# ``up`` marked stale with the rest. ``up == 1`` tells them apart: the runs
# (``{runs}``) and allocations (``{pods}``) of targets not answering now (``up == 0``,
# or no ``up``: removed), as last scraped within Prometheus' own lookback (5 min: what
# the plain selector would see without the marker). A target that never had ``up``
# (series remote-written or federated from elsewhere) holds nothing: ``_SEEN_LAST_GOOD``
# asks for its ``up == 1`` within the lookback. Nor is anything held of a node whose
# exporter answers now (its ``gpu_eta_exporter_build_info``, from any target: the new
# pod of a rollout): what it does not show is gone (a pod deleted during the rollout). Asked only for the runs present at the previous read and absent
# now, folded into a query the cycle sends anyway where it can (Cycle._scrape_gap,
# gpu_eta.forecaster.scrape_gap).
#
# A range selector skips staleness markers, so a run whose pod was deleted before the
# failure (its series marked stale by a good scrape) would come back from its last real
# sample. Held is only a run seen at its target's last good scrape: the last step of a
# ``HELD_STEP`` grid at which the run's series was visible with ``up == 1`` is the last
# step at which ``up`` was 1 (``timestamp`` of an expression is the step's time, the
# same grid on both sides). A grid no coarser than the scrape interval puts a step
# between a deleted pod's last good scrape and the failure; 1 s serves any interval of
# 1 s or more. Cost: ``up`` of every target and the named runs' series, 300 steps each
# (docs/forecaster.md, "Scrape gaps").
_SCRAPE_FAILED = (
    "unless on (job, instance) (up == 1) "
    "unless on (node) group by (node) (gpu_eta_exporter_build_info)"
)
HELD_LOOKBACK = "5m"
HELD_STEP = "1s"
_REPORT = "gpu_eta_training_last_report_timestamp_seconds{runs}"
_SEEN_LAST_GOOD = (
    f"(max_over_time(timestamp({_REPORT} and on (job, instance) (up == 1))"
    f"[{HELD_LOOKBACK}:{HELD_STEP}]) >= on (job, instance) group_left () "
    f"max_over_time(timestamp(up == 1)[{HELD_LOOKBACK}:{HELD_STEP}]))"
)
SCRAPE_GAP: Mapping[str, str] = MappingProxyType(
    {
        "held_present": _per_run(
            f"last_over_time({_REPORT}[{HELD_LOOKBACK}]) {_SCRAPE_FAILED} and {_SEEN_LAST_GOOD}"
        ),
        "held_allocated": (
            f"max by ({_CONTAINER}, node, exported_node, gpu, UUID, GPU_I_ID) "
            f"(last_over_time(gpu_eta_pod_gpu_allocated{{pods}}[{HELD_LOOKBACK}]) {_SCRAPE_FAILED})"
        ),
    }
)

INSTANT: Mapping[str, str] = MappingProxyType(
    {
        "present": PRESENT,
        "planned": PLANNED,
        "epoch": EPOCH,
        "steps_planned": STEPS_PLANNED,
        "step": STEP,
        "start": START,
        "last_end": LAST_END,
        "last_report": LAST_REPORT,
        "batch_size": BATCH_SIZE,
        "util_mean": UTIL_MEAN,
        "util_recent": UTIL_RECENT,
        "memory_ratio": MEMORY_RATIO,
        "allocated": ALLOCATED,
        "gpu_info": GPU_INFO,
        "pod_info": POD_INFO,
    }
)
RANGE: Mapping[str, str] = MappingProxyType(
    {"epoch_range": EPOCH_RANGE, "epoch_end_range": EPOCH_END_RANGE}
)
CHANGES_RANGE: Mapping[str, str] = MappingProxyType(
    {"epoch_range": EPOCH_AT_END_CHANGES, "epoch_end_range": EPOCH_END_CHANGES}
)
# The kube-state-metrics queries of the GPU queue (gpu_eta.forecaster.kube_state),
# sent folded into one, or into as few as fit MAX_QUERY_CHARS each where the site's
# own GPU resource names are many and long (kube_state.batches).
PENDING: Mapping[str, str] = kube_state.QUERIES
# One query of each kind: + step range + pending + its second round
# (kube_state.second_round). What a cycle sends that reads each in one query (tests
# hold cycles to it); a read cut into several adds its extra queries on top
# (MOST_QUERIES_PER_CYCLE, module docstring).
QUERIES_PER_CYCLE = len(INSTANT) + len(RANGE) + 1 + 1 + 1

# Answers that do not change while a run lives: its plan, start and batch size (per
# run, matched by ``{runs}``) and the pod labels that name its job (per pod, ``{pods}``).
# The cycle reads them in full only now and then, and otherwise for the runs it has not
# seen yet, folded into one query (``gpu_eta.forecaster.static_series``).
STATIC_RUN = ("planned", "steps_planned", "start", "batch_size")
STATIC_POD = "pod_info"
# The pod-info part for series scraped without honouring labels (``exported_pod``).
STATIC_POD_EXPORTED = "pod_info_exported"
# ``present`` is sent folded with the runs' end (``ENDED``), split again by ``unfold``.
PRESENT_PARTS: Mapping[str, str] = MappingProxyType(
    {"present": PRESENT, "ended": ENDED, "started_again": STARTED_AGAIN}
)
# ``step`` is sent folded with the step each run started at (``START_STEP``).
STEP_PARTS: Mapping[str, str] = MappingProxyType({"step": STEP, "start_step": START_STEP})
# Read in full every cycle: progress, presence (with the runs' end), allocations.
# ``step`` only when some run reports only steps (as ``STEP_RANGE``), ``gpu_info`` when
# an allocation names a GPU not read before (static_series).
DYNAMIC = ("present", "epoch", "last_end", "last_report", "allocated")
# Means over a span, read with the range queries over the same span since the previous
# read for every run: for every run one cycle in ``range_every``, in the other cycles
# for the pods of the runs that end (``for_pods``; the GPU use of many from their raw
# samples, ``util_samples_split``), so that a finished run's means
# cover its whole life. Each run's GPU use and memory are averaged over its life, each
# read weighted by the seconds of the run's life it adds (Cycle._range_span).
SPAN = ("util_mean", "memory_ratio")
# The labels that name a series' pod: its own, or the renamed one of a scrape that did
# not honour labels.
POD_LABELS = ("pod", "exported_pod")
_LONGEST_POD_LABEL = max(POD_LABELS, key=len)  # what a batch of util_samples is cut by
# Read only in a cycle where some running run has shown no progress for
# ``stall_after_seconds``: the stall check is the only reader (cycle.is_stalled).
ON_DEMAND = ("util_recent",)
# The answers whose run keys are the runs seen in a cycle.
SEEN = ("present", "epoch", "last_end", "last_report")
# A read of unknown runs' unchanging series stays one query of at most this many
# characters (VictoriaMetrics refuses queries over 16 KiB by default,
# ``-search.maxQueryLen``) for at most this many runs; beyond, a full read.
MAX_QUERY_CHARS = 12_000
MAX_UNKNOWN_RUNS = 200
# The restarted runs' set match (``again_match``): six of it and a template fit one
# query of ``MAX_QUERY_CHARS`` (nine do not: ``step_reads``).
MAX_AGAIN_CHARS = 1_500
# the ending runs' pods' means are read in at most this many queries each (beyond, every
# pod's: one heavier answer)
MAX_POD_QUERIES = 4
# The raw samples the ending runs' pods' GPU use may bring (util_samples_split), estimated
# as this many series per pod (ours and its allocation's start; DCGM's one) sampled every
# ``--query.step``: about 0.2 s to parse (3.5 µs a sample); beyond, UTIL_MEAN itself.
RAW_SERIES_PER_POD = 2
MAX_RAW_SAMPLES = 50_000

# The label ``fold`` tags each part's series with (a name no exporter uses).
TAG = "forecaster_query"


def fold(parts: Mapping[str, str]) -> str:
    """One query answering every part: each tagged ``forecaster_query="<name>"``, joined by ``or``.

    The tag makes every part's label sets distinct, so ``or`` keeps all of them; the
    parts are rendered expressions (Prometheus and VictoriaMetrics alike).
    """
    return " or ".join(
        f'label_replace(({expr}), "{TAG}", "{name}", "__name__", ".*")'
        for name, expr in parts.items()
    )


def fits(parts: Mapping[str, str]) -> bool:
    """Whether ``parts`` folded (``fold``) make a query of at most ``MAX_QUERY_CHARS``."""
    return len(fold(parts)) <= MAX_QUERY_CHARS


def step_reads(window_seconds: float, idle_seconds: float, again: str = "") -> list[dict[str, str]]:
    """``STEP_PARTS`` rendered (``render``, the runs ``again`` names read as restarted),
    as the groups of parts each sent as one folded query: one, or one per part where the
    folded query would pass ``MAX_QUERY_CHARS`` (``EXTRA_STEP_QUERIES``). Pure.

    Why: STEP holds the restarted runs' match six times and START_STEP three; folded,
    34 restarted runs of 36-character ids made a query of 17,298 characters, which
    VictoriaMetrics refuses (HTTP 422 over ``-search.maxQueryLen``, 16,384), so every
    cycle failed while they stayed in the lookback."""
    parts = {
        name: render(tpl, window_seconds, idle_seconds, again=again)
        for name, tpl in STEP_PARTS.items()
    }
    if fits(parts):
        return [parts]
    # with many restarted runs named, each part alone (``again_match`` bounds one)
    return [{name: expr} for name, expr in parts.items()]


def unfold(samples: Sequence[Sample], names: Iterable[str]) -> dict[str, list[Sample]]:
    """A folded query's answer → the answer of each part.

    The samples keep their ``forecaster_query`` label (nothing reads it; copying
    100,000 label sets to drop it cost seconds per cycle). Samples without a known
    tag (a server that mangled the query) are left out.
    """
    out: dict[str, list[Sample]] = {name: [] for name in names}
    for sample in samples:
        part = out.get(sample.labels.get(TAG, ""))
        if part is not None:
            part.append(sample)
    return out


def duration(seconds: float) -> str:
    """A PromQL duration in whole seconds, at least 1 s."""
    return f"{max(1, round(seconds))}s"


def render(
    template: str,
    window_seconds: float,
    idle_seconds: float,
    runs: str = "",
    pods: str = "",
    again: str = "",
) -> str:
    """Fill a template's ``{window}`` and ``{idle}``, its selectors' ``{runs}`` and
    ``{pods}`` matchers (``matcher``; empty: every run and pod), and the restarted runs'
    clause of each of ``AGAIN_SERIES`` for the runs ``again`` names (``again_match``;
    empty: none)."""
    window = duration(window_seconds)
    clauses = {f"again_{name}": _again_clause(name, window, again) for name in AGAIN_SERIES}
    return template.format(
        window=window,
        idle=duration(idle_seconds),
        runs=runs,
        pods=pods,
        **clauses,
    )


def _again_clause(name: str, window: str, again: str) -> str:
    """The clause that leaves the earlier attempt's last ``name`` samples out of the
    answers of the runs ``again`` names (``AGAIN_SERIES``); nothing without ``again``."""
    if not again:
        return ""
    series = f"{_TRAINING}{name}{again}"
    gone = f"last_over_time({series}[{window}]) unless on ({RUN_LABELS}) {series}"
    return f" unless on ({RUN_LABELS}) (({gone}) and on ({RUN_KEY_LABELS}) {_LAST_REPORT}{again})"


def again_match(run_ids: Iterable[str]) -> str:
    """The set match on ``run_id`` naming runs found restarted for ``render``'s
    ``again``; empty (no clause: those runs read as any) when there are none, one cannot
    be named (``matcher``), or it is longer than ``MAX_AGAIN_CHARS``. Why a bound: a
    template holds it up to six times (``STEPS_PLANNED``, ``STEP``), and every query
    must fit ``MAX_QUERY_CHARS``; more runs found restarted within one window than
    fit (about 40 of 36-character ids) are read as before. The step query folded with
    the start step's holds it nine times: the two are sent apart when they do not fit
    one query (``step_reads``)."""
    match = matcher("run_id", run_ids)
    return match if match is not None and len(match) <= MAX_AGAIN_CHARS else ""


def for_pods(
    template: str, window_seconds: float, idle_seconds: float, pods: Iterable[str]
) -> str | None:
    """``template`` for the series of ``pods`` only, whichever label names them: rendered
    once with a set match on ``pod`` and once on ``exported_pod`` in its ``{pods}``, the
    two joined with ``or``: for those pods, the series the template rendered for every
    pod returns (checked on Prometheus and VictoriaMetrics, tests/integration). None when
    ``matcher`` cannot name a pod.

    A template that is an ``or`` of parts (``_PARTS``: ``UTIL_MEAN``, ours before DCGM's)
    is rendered part by part, each in both labels before the next: rendered whole in
    each label, a pod's DCGM series matched by ``pod`` came before its ours matched by
    ``exported_pod`` and hid it.
    """
    names = list(pods)
    matches = []
    for label in POD_LABELS:
        match = matcher(label, names)
        if match is None:
            return None
        matches.append(match)
    return " or ".join(
        f"({render(part, window_seconds, idle_seconds, pods=match)})"
        for part in _PARTS.get(template, (template,))
        for match in matches
    )


def for_pods_split(
    template: str,
    window_seconds: float,
    idle_seconds: float,
    pods: Iterable[str],
    max_chars: int,
    max_queries: int,
) -> list[str] | None:
    """``for_pods`` over ``pods`` cut into as few queries of at most ``max_chars`` as
    the sorted pods allow; None when a pod cannot be named, one pod alone makes too
    long a query, or more than ``max_queries`` would be needed (then a read of every
    pod costs less).

    Why: the pods of the runs ending in one cycle (about 75 of them fit one memory
    query, 37-character names) are many at cluster scale, where reading every pod's
    means instead weighs as much as a full read. Each pod is in one query only, so no
    series is answered twice.
    """
    batches = _pack(
        pods, lambda names: for_pods(template, window_seconds, idle_seconds, names), max_chars
    )
    if batches is None or len(batches) > max_queries:
        return None
    return [query for _names, query in batches]


def util_samples(label: str, pods: Iterable[str], window_seconds: float) -> str | None:
    """The raw samples over the window of every series ``util_mean_of`` reads (ours,
    the allocations' start, DCGM's) of ``pods`` named by ``label`` (``pod`` or
    ``exported_pod``): one selector, so the set match is written once. None when
    ``matcher`` cannot name a pod."""
    match = matcher(label, pods)
    if match is None:
        return None
    names = "|".join(UTIL_SAMPLES)
    return f'{{__name__=~"{names}",{match[1:-1]}}}[{duration(window_seconds)}]'


def util_samples_split(
    pods: Iterable[str],
    window_seconds: float,
    scrape_seconds: float,
    max_chars: int,
    max_queries: int,
) -> list[str] | None:
    """``util_samples`` of ``pods``, by ``pod`` and by ``exported_pod``, cut into batches
    whose queries are at most ``max_chars`` each: two queries per batch (a range selector
    takes one set match; Prometheus has no "either label" matcher), at most
    ``max_queries`` in all. None when a pod cannot be named, one pod alone makes too
    long a query, more queries would be needed, or the answers would hold more than
    ``MAX_RAW_SAMPLES`` samples (``RAW_SERIES_PER_POD`` series per pod, one sample per
    ``scrape_seconds`` of the window).

    Why not ``for_pods_split`` of ``UTIL_MEAN``: that carries the pods' set match on
    each of its six selectors in each pod label (twelve times), so only about 22
    37-character names fit a query of 12,000 characters, where a query here names
    about 310 (docs/forecaster.md, "GPU-use and memory means"). Why the bound on
    samples: each is parsed here, where ``UTIL_MEAN`` answers one number per container;
    over a long window (a forecaster run as a CronJob every 15 minutes reads about 80)
    many pods' samples cost more than reading every pod's mean.
    """
    names = sorted(set(pods))
    per_pod = RAW_SERIES_PER_POD * window_seconds / max(scrape_seconds, 0.001)
    if len(names) * per_pod > MAX_RAW_SAMPLES:
        return None
    batches = _pack(
        names, lambda some: util_samples(_LONGEST_POD_LABEL, some, window_seconds), max_chars
    )
    if batches is None or len(batches) * len(POD_LABELS) > max_queries:
        return None
    out = []
    for batch, _query in batches:
        for label in POD_LABELS:
            query = util_samples(label, batch, window_seconds)
            if query is None:  # named by the longest label already: not seen
                return None
            out.append(query)
    return out


def pods_use_queries(
    pods: Iterable[str], window_seconds: float, idle_seconds: float, scrape_seconds: float
) -> tuple[bool, list[str] | None]:
    """How the GPU use of some pods is read: ``(True, queries)`` of their raw samples
    (``util_samples_split``, answered by ``util_mean_of``) where those take fewer queries
    than ``UTIL_MEAN`` by set match; else ``(False, queries)`` of ``UTIL_MEAN`` by set
    match (``for_pods_split``), None for a read of every pod's. At most
    ``MAX_POD_QUERIES`` of ``MAX_QUERY_CHARS`` each. Why both: for a few pods the set
    match on ``UTIL_MEAN`` is one query where the raw samples take one per pod label."""
    names = sorted(set(pods))
    limit, most = MAX_QUERY_CHARS, MAX_POD_QUERIES
    matched = for_pods_split(UTIL_MEAN, window_seconds, idle_seconds, names, limit, most)
    raw = util_samples_split(names, window_seconds, scrape_seconds, limit, most)
    if raw is not None and (matched is None or len(raw) < len(matched)):
        return True, raw
    return False, matched


def _pack(
    names: Iterable[str], render: Callable[[Sequence[str]], str | None], max_chars: int
) -> list[tuple[list[str], str]] | None:
    """The sorted distinct ``names`` cut into runs whose ``render`` is at most ``max_chars``
    long, each run with its rendered query; None when a name cannot be named (``render``
    answers None) or alone makes too long a query.

    A set match's length is a constant plus each name's escaped length plus one
    separator, and a query holds its set matches a fixed number of times: so a query's
    length is the sum of its names' queries alone less the part that is not repeated
    per name (measured once on two names). Why not render each candidate run: that
    re-escapes every name of the run for each name added (0.1 s for 280 pods' memory
    query, growing with their square). Each run's query is rendered once and checked.
    """
    ordered = sorted(set(names))
    alone: list[int] = []
    for name in ordered:
        query = render([name])
        if query is None or len(query) > max_chars:
            return None
        alone.append(len(query))
    if not ordered:
        return []
    shared = 0
    if len(ordered) > 1:
        pair = render(ordered[:2])
        if pair is None:
            return None
        shared = alone[0] + alone[1] - len(pair)
    cuts = [0]
    length = alone[0]
    for i in range(1, len(ordered)):
        length += alone[i] - shared
        if length > max_chars:
            cuts.append(i)
            length = alone[i]
    cuts.append(len(ordered))
    out = []
    for a, b in itertools.pairwise(cuts):
        run = ordered[a:b]
        query = render(run)
        if query is None or len(query) > max_chars:
            return None
        out.append((run, query))
    return out


def range_step(window_seconds: float, min_step_seconds: float, max_points: int) -> float:
    """Step for the range queries: the scrape-like ``min_step`` unless that gives too many points.

    Prometheus refuses more than 11,000 points per series; a first cycle with a long
    lookback samples coarser (epoch ends shorter than the step are then seen only
    as the latest one of each step; gaps are allowed in a run's epoch list).
    """
    if max_points < 2:
        raise ValueError("max_points must be >= 2")
    return max(min_step_seconds, window_seconds / (max_points - 1))


# The most runs one query of a long read takes at the fine step (``range_reads``): its
# cost grows with the runs times the steps it evaluates (1.45 s of Prometheus' time a
# query at 1,000 runs over 6 h, measured), and near 10,000 it would pass
# --prometheus.timeout (10 s) at every first cycle. More runs are read in as many time
# windows (``range_windows``), each about as costly as 1,000 runs over the whole span.
MAX_CHANGES_RUNS = 1000
# The most windows a long read is cut into: 10,000 runs read at the fine step in ten
# queries per range template (about 15 s of Prometheus' time each at 6 h, once, at a
# new forecaster's first cycle). Why a bound: the first cycle's time grows with the
# windows, and a cluster past it still gets every run read, at the coarse step.
MAX_RANGE_WINDOWS = 10

# The queries beyond one of each kind that a cycle may send (module docstring), each
# bounded by the configuration, not by the cluster:
# - a long read of more than MAX_CHANGES_RUNS runs (a first cycle) cut into time
#   windows: up to MAX_RANGE_WINDOWS queries per range template (range_windows);
# - the ending runs' GPU-use and memory means, up to MAX_POD_QUERIES queries each
#   (Cycle._ending_means). Never in the same cycle as the windows: they are read for
#   at most MAX_UNKNOWN_RUNS runs (more make a full read), one window's worth, and a
#   full read's means are one query each; so the larger of the two counts;
# - the queue's rounds split for long resource names: at most len(PENDING) - 1 more
#   for the first round and 3 for the second (kube_state.batches; its parts at most
#   kube_state.SECOND_ROUND_PARTS: the node labels in two, since, arrivals seen);
# - the step query and the start step's sent apart when many restarted runs named make
#   them too long for one (step_reads): one more;
# - the cycle started over once its first answer shows the clocks apart (Cycle.run):
#   that first query sent again.
EXTRA_RANGE_WINDOWS = len(RANGE) * (MAX_RANGE_WINDOWS - 1)
EXTRA_POD_QUERIES = len(SPAN) * (MAX_POD_QUERIES - 1)
EXTRA_PENDING_QUERIES = len(PENDING) - 1 + kube_state.SECOND_ROUND_PARTS - 1
EXTRA_STEP_QUERIES = len(STEP_PARTS) - 1
# The most queries one cycle sends: what the liveness probe's "wedged" limit allows
# a cycle's queries (server.wedged_limit_seconds); docs/forecaster.md states it.
MOST_QUERIES_PER_CYCLE = (
    QUERIES_PER_CYCLE
    + max(EXTRA_RANGE_WINDOWS, EXTRA_POD_QUERIES)
    + EXTRA_PENDING_QUERIES
    + EXTRA_STEP_QUERIES
    + 1
)


def range_reads(
    window_seconds: float, min_step_seconds: float, max_points: int, runs: int = 0
) -> tuple[dict[str, str], float]:
    """The epoch and epoch-end range queries (templates of ``{runs}``) over a span of
    ``window_seconds``, and their step.

    Within ``max_points`` steps of ``min_step`` (every cycle but a long first one):
    ``RANGE``'s plain selectors at ``min_step``. Beyond: ``CHANGES_RANGE`` at
    ``min_step`` (no finer than Prometheus' 11,000 points allow, to the millisecond):
    only the steps where an epoch end changed, so every epoch end the scrapes saw is
    recovered as by the later cycles' reads, in an answer of about one point per
    epoch instead of ``max_points`` per series. Why not the plain selectors at a
    coarser step (``range_step``): every epoch end but the latest of each step was
    lost, so a forecaster started while runs were in progress stored them with gaps
    (a run of 20 s epochs: 40 of its 179 epochs over a 6 h lookback, 90 s apart).
    Above ``MAX_CHANGES_RUNS`` runs read, the fine read is cut into time windows
    (``range_windows``); above ``MAX_CHANGES_RUNS`` × ``MAX_RANGE_WINDOWS``: the plain
    selectors at the coarse step, with their gaps (the fine read's cost grows with the
    runs).
    """
    coarse = range_step(window_seconds, min_step_seconds, max_points)
    if coarse <= min_step_seconds:
        return dict(RANGE), min_step_seconds
    if runs > MAX_CHANGES_RUNS * MAX_RANGE_WINDOWS:  # ``runs``: how many it covers
        return dict(RANGE), coarse
    fine = max(min_step_seconds, window_seconds / (PROMETHEUS_MAX_POINTS - 1))
    millis = math.ceil(round(fine * 1000, 6))  # as sent (promapi: to the millisecond)
    offset = f"{millis}ms"
    return {n: t.replace("{offset}", offset) for n, t in CHANGES_RANGE.items()}, millis / 1000


def range_windows(
    start: float, end: float, step_seconds: float, runs: int
) -> list[tuple[float, float]]:
    """``start`` to ``end`` at ``step_seconds`` cut into consecutive windows (each a range
    query's start and end) so that none evaluates more than ``MAX_CHANGES_RUNS`` runs'
    worth of the whole span's steps: one window up to ``MAX_CHANGES_RUNS`` runs, at most
    ``MAX_RANGE_WINDOWS``. Every window's steps lie on the whole range's grid
    (``start + i · step``) and no step is in two, so the windows' answers joined
    (``series.joined``) are the one query's answer. Why windows and not fewer runs a
    query: the long read names no runs (a first cycle reads every run, ``{runs}``
    empty), and a time cut needs no names. Pure."""
    if not end >= start or not step_seconds > 0:
        raise ValueError(f"bad range: {start}..{end} step {step_seconds}")
    steps = int((end - start) // step_seconds) + 1  # evaluation times, as the server counts
    parts = min(MAX_RANGE_WINDOWS, max(1, math.ceil(runs / MAX_CHANGES_RUNS)))
    per = math.ceil(steps / parts)
    out = []
    for first in range(0, steps, per):
        last = min(first + per, steps) - 1
        out.append((start + first * step_seconds, start + last * step_seconds))
    out[-1] = (out[-1][0], end)  # the last window ends where the whole range does
    return out
