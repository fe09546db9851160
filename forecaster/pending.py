"""Predicted starts of pending GPU pods and of requests made now, for one cycle.

Pure glue between ``kube_state`` (what the cluster looks like), the cycle's job
forecasts (when the running jobs end) and ``queue_replay`` (the replay). ``publish``
renders the result; ``top`` and the spawner hook read it back from Prometheus.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from gpu_eta.common.text import first_of
from gpu_eta.forecaster.kube_state import MAX_SELECTOR_CHARS, MAX_SELECTOR_KEYS, ClusterQueue
from gpu_eta.forecaster.queue_replay import (
    BLOCKED_ELSEWHERE,
    GATED,
    NO_SCHEDULABLE_NODE,
    PLACEMENTS,
    PREDICTED,
    REQUEST_SIZES,
    SCHEDULED,
    Holder,
    Node,
    PendingPod,
    ReplayError,
    Request,
    StartCalibrator,
    StartPrediction,
    Toleration,
    default_requests,
    fits_somewhere,
    newest_by_name,
    nodes_fitting_now,
    queue_key,
    replay,
    request_tolerations,
)
from gpu_eta.forecaster.runs import Run

_V = TypeVar("_V")  # what ``_from_siblings`` lends: a forecast, a run's end


@dataclass(frozen=True, slots=True)
class PendingSettings:
    """Knobs of the pending-pod prediction (CLI ``--pending.*``; docs/forecaster.md)."""

    enabled: bool = True
    n_samples: int = 100
    horizon_seconds: float = 7 * 86400.0
    placement: str = "spread"
    arrivals_seconds: float = 3600.0
    max_pods: int = 500
    request_sizes: tuple[int, ...] = REQUEST_SIZES
    priorities: Mapping[str, int] = field(default_factory=dict)
    # what a request made now tolerates; None: the ExtendedResourceToleration plugin's
    # toleration of its own resource's taint (queue_replay.request_tolerations)
    request_tolerations: tuple[Toleration, ...] | None = None
    # the device plugin refuses a container more than one time-sliced replica
    # (failRequestsGreaterThanOne, checked per container; off by default upstream)
    one_replica_per_pod: bool = False
    # GPU resources beside the built-in ones (Kubernetes names, a time-slicing rename:
    # nvidia.com/a100-shared); checked by the CLI (common.gpu_resources)
    gpu_resources: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ReplayError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.n_samples < 1 or self.max_pods < 1:
            raise ReplayError("n_samples and max_pods must be >= 1")
        if not (self.horizon_seconds > 0 and self.arrivals_seconds > 0):
            raise ReplayError("horizon and arrival window must be > 0 seconds")


@dataclass(frozen=True, slots=True)
class PodStart:
    """A pending pod's predicted start (``prediction.starts``: P10/P50/P90 timestamps)."""

    namespace: str
    pod: str
    resource: str
    units: int
    created: float
    prediction: StartPrediction
    # the nodes ``predict_queue`` kept it off (a ``blocked_elsewhere`` pod's), which
    # ``StartTracker`` keeps it off in the cycles after
    excluded_nodes: frozenset[str] = frozenset()
    # the nodes a ``blocked_elsewhere`` pod fits now and is not kept off yet: their grace
    # runs (``StartTracker`` keeps it off each once it has fit there the grace through)
    grace_nodes: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PendingSet:
    """Everything about the queue one cycle publishes."""

    pods: tuple[PodStart, ...] = ()
    # none while pods are skipped: a request queues behind every pending pod
    requests: Mapping[Request, StartPrediction] = field(default_factory=dict)
    skipped: int = 0  # pending pods past max_pods (no prediction)
    rejected: Mapping[str, int] = field(default_factory=dict)
    interval_scale: float = 1.0  # applied by StartTracker (1: raw replay intervals)
    # ClusterQueue's: GPU nodes with taints that keep pods off, and the namespaces of
    # pending pods without / with toleration series (publish.ServiceState keeps the
    # first per namespace across cycles)
    tainted_nodes: int = 0
    tolerations_missing: tuple[str, ...] = ()
    tolerations_read: tuple[str, ...] = ()
    # ClusterQueue's: nodeSelector keys no GPU node's labels show → pending pods selecting
    # each (not held against any node), and the keys held (publish.ServiceState keeps the
    # first across cycles)
    selectors_unchecked: Mapping[str, int] = field(default_factory=dict)
    selectors_checked: tuple[str, ...] = ()
    # ClusterQueue's: nodeSelector keys past the cap of the node labels' read → pending
    # pods selecting each (those pods get no prediction: rejected selector_not_read)
    selectors_not_read: Mapping[str, int] = field(default_factory=dict)
    # ClusterQueue's: pending pods without kube_pod_created, queued by when Prometheus
    # first saw them Pending
    created_missing: int = 0
    # ClusterQueue's: priority class names no --pending.priority-class gives a value →
    # pending pods of each (queued at 0)
    priorities_unknown: Mapping[str, int] = field(default_factory=dict)
    # (resource, GPU type: "" for nodes of unknown type) → the largest request a node
    # could hold (``largest_requests``), while pods are skipped too
    largest_requests: Mapping[tuple[str, str], int] = field(default_factory=dict)


def predict(
    queue: ClusterQueue,
    job_ends: Mapping[tuple[str, str], tuple[float, float, float]],
    durations: Sequence[float],
    now: float,
    settings: PendingSettings,
    random_state: int | None = 0,
    release_seconds: Sequence[float] = (),
    run_ends: Mapping[tuple[str, str], tuple[float, str]] | None = None,
) -> PendingSet:
    """The queue's predicted starts: running jobs end as forecast, then the replay runs.

    ``job_ends``: (namespace, pod) → the latest P10/P50/P90 completion timestamps of
    its runs (``holder_ends`` gives them to the holders). ``durations``: finished
    runs' durations (seconds), drawn for pods without a forecast, for pods that
    outlive their run (``Holder.ends_with_run``) and for pods once they start.
    ``release_seconds``: the lags observed from a completed run's end to its pod's
    GPUs being free (``release_lags``), for the replay to draw from. ``run_ends``: the
    pods whose run has completed and which still hold their GPUs, in their release lag
    (``ReleaseLags.lingering``: (namespace, pod) → (the run's end, the pod's uid or ""));
    ``with_run_ends`` gives them to the holders.

    Only the first ``settings.max_pods`` pending pods (queue order) are replayed, which
    bounds a cycle's work; while more are pending no request made now is predicted. A
    request queues behind every pending pod and takes nothing, so the pods left out
    could only make it later (those ahead of it take GPUs first; those behind take
    what frees while it waits for more): predicted without them it would be too early.
    Replaying them anyway would make the bound no bound (a controller gone wrong can
    leave thousands of pods pending). Pods kept off nodes (``blocked_elsewhere``:
    ``PendingPod.excluded_nodes``) fill the bound after the others (``capped``).

    A pod its scheduling gates hold (``PendingPod.gated``) is not replayed: kube-scheduler
    does not try it, so it takes no GPU from the pods behind it until what holds the
    gate (Kueue's admission, a controller) lifts it, which no replay times. It is
    published ``gated``, without a start. Such pods count neither among the pods
    replayed nor ahead of a request; the first ``settings.max_pods`` of them (queue
    order) are published, the others counted skipped, as the pods past the bound are.
    """
    holders = with_run_ends(holder_ends(queue.holders, job_ends), run_ends or {}, job_ends)
    ordered = sorted(queue.pending, key=queue_key)
    waiting = [p for p in ordered if not p.gated]
    gated = [p for p in ordered if p.gated][: settings.max_pods]
    kept = capped(waiting, settings.max_pods)
    requests = (
        default_requests(
            queue.nodes,
            settings.request_sizes,
            settings.request_tolerations,
            settings.one_replica_per_pod,
        )
        if len(kept) == len(waiting)
        else []
    )
    result = replay(
        queue.nodes,
        holders,
        kept,
        now,
        durations,
        requests=requests,
        arrivals=queue.arrivals,
        n_samples=settings.n_samples,
        horizon_seconds=settings.horizon_seconds,
        placement=settings.placement,
        random_state=random_state,
        request_tolerations=settings.request_tolerations,
        one_replica_per_pod=settings.one_replica_per_pod,
        release_seconds=release_seconds,
    )
    # one per (namespace, pod): the pod that stands for the name, as in ``result.pods``
    published = [*kept, *gated]
    held = StartPrediction(GATED, None, 0.0)
    preds = [*result.pending, *(held for _ in gated)]
    pods: list[PodStart] = []
    for i in newest_by_name(published).values():
        p = published[i]
        pods.append(PodStart(p.namespace, p.pod, p.resource, p.units, p.created, preds[i]))
    by_key = {(h.namespace, h.pod): h for h in holders}
    for ns, pod in queue.scheduled:
        h = by_key[(ns, pod)]
        pods.append(
            PodStart(
                ns, pod, h.resource, h.units, math.nan, StartPrediction(SCHEDULED, (now,) * 3, 1.0)
            )
        )
    return PendingSet(
        tuple(pods),
        result.requests,
        len(ordered) - len(published),
        queue.rejected,
        tainted_nodes=queue.tainted_nodes,
        tolerations_missing=queue.tolerations_missing,
        tolerations_read=queue.tolerations_read,
        selectors_unchecked=queue.selectors_unchecked,
        selectors_checked=queue.selectors_checked,
        selectors_not_read=queue.selectors_not_read,
        created_missing=queue.created_missing,
        priorities_unknown=queue.priorities_unknown,
        largest_requests=largest_requests(
            queue.nodes, settings.request_tolerations, settings.one_replica_per_pod
        ),
    )


def largest_requests(
    nodes: Sequence[Node],
    tolerations: Sequence[Toleration] | None = None,
    one_replica_per_pod: bool = False,
) -> dict[tuple[str, str], int]:
    """(resource, GPU type) → the most units a request made now could get on one node of
    that type, with nothing else on it: 0 where every such node has a taint the request
    does not tolerate (``request_tolerations``, ``tolerations`` the configured ones).
    Nodes of unknown type are their own entry, type "". A node closed now (cordoned,
    not Ready, its device plugin away, being removed) counts, as in ``replay``'s
    ``never_fits``: a request only it holds waits for it (``no_schedulable_node``).

    Why: a request size no node holds is simply not published
    (``default_requests``), as is one whose prediction failed, so the spawner hook
    showed "no estimate" for a profile that can never start (16 GPUs where nodes have
    8, a type the cluster lacks) as for a Prometheus that is down. This says which."""
    tolerated: dict[str, tuple[Toleration, ...]] = {}
    out: dict[tuple[str, str], int] = {}
    for node in nodes:
        for resource, units in node.allocatable.items():
            if units <= 0:
                continue
            if resource not in tolerated:
                tolerated[resource] = request_tolerations(nodes, resource, tolerations)
            most = _largest_on(node, resource, tolerated[resource], one_replica_per_pod)
            key = (resource, node.product)
            out[key] = max(out.get(key, 0), most)
    return out


def _largest_on(
    node: Node, resource: str, tolerations: Sequence[Toleration], one_replica_per_pod: bool
) -> int:
    """The most units of ``resource`` a request (one container) could get on ``node``
    alone, by the replay's own fit rule (``fits_somewhere``), searched by halves: a node
    that holds n units holds fewer too (a pool holding n holds n - 1)."""
    lo, hi = 0, node.allocatable.get(resource, 0)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits_somewhere((node,), resource, node.product, mid, tolerations, one_replica_per_pod):
            lo = mid
        else:
            hi = mid - 1
    return lo


def capped(waiting: Sequence[PendingPod], max_pods: int) -> list[PendingPod]:
    """The ``max_pods`` of ``waiting`` (in queue order) to replay, in queue order: the
    pods not kept off any node first, then those kept off nodes (``excluded_nodes``:
    found ``blocked_elsewhere``) with the room left.

    Why not the first ``max_pods`` in queue order: blocked pods are the oldest of the
    queue (they do not start), and where something holds many (a namespace's storage
    class gone, a quota of CPU), they took the whole bound, and the pods that can start,
    the ones whose start a user waits on, got no prediction. A blocked pod takes GPUs
    only on nodes it was not seen blocked on, and often gets no start at all, so it
    matters least to the pods behind it; left out, it makes them look early by what it
    would have taken elsewhere. A request made now is not predicted either way while
    any pod is left out.
    """
    free = [i for i, p in enumerate(waiting) if not p.excluded_nodes][:max_pods]
    held = [i for i, p in enumerate(waiting) if p.excluded_nodes][: max_pods - len(free)]
    return [waiting[i] for i in sorted([*free, *held])]


# How far apart two pods of one owner may have started and still be taken for one run
# (``holder_ends``). A distributed job's operator creates its pods in one reconcile and
# kube-scheduler binds each as soon as it is tried (within seconds, a minute with a
# gang scheduler's admission); ``kube_pod_start_time`` is set when the kubelet accepts
# the pod, before any image pull. A sweep's pods (a parallel or indexed Job, an Argo
# Workflow fan-out) start as GPUs free up: minutes to hours apart. Five minutes takes
# in the first and is kube-scheduler's longest retry wait (``BLOCKED_GRACE_SECONDS``),
# so a worker placed at the scheduler's next retry is still one run with rank 0.
SIBLING_START_WINDOW_SECONDS = 300.0


def holder_ends(
    holders: Sequence[Holder], job_ends: Mapping[tuple[str, str], tuple[float, float, float]]
) -> tuple[Holder, ...]:
    """``holders`` with their runs' forecasts (``job_ends``: (namespace, pod) → P10/P50/
    P90 end timestamps); a holder without one takes the latest forecast, quantile by
    quantile, of the pods of its owner (``Holder.owner``, same namespace) that started
    within ``SIBLING_START_WINDOW_SECONDS`` of it.

    Why: in a distributed job only rank 0 reports progress, so a worker has no forecast
    of its own and its end was drawn from the history, where a worker older than every
    recorded run never frees, though it ends with its job as rank 0 does. ``owner`` is
    set only for kinds whose pods end with their run (a Job's, a training operator's):
    the replicas of a Deployment are not one run. Nor are the pods of a sweep under one
    Job or Workflow: they start apart, and a pod started a minute ago does not end with
    a sibling started an hour ago, so only siblings started with the pod lend their
    forecast. A pod whose start is not known (``Holder.started`` None) is not known to
    be a sibling: it neither borrows nor lends.
    """
    borrowed = _from_siblings(holders, job_ends, _later)
    return tuple(
        replace(h, ends=job_ends.get((h.namespace, h.pod), lent))
        for h, lent in zip(holders, borrowed, strict=True)
    )


def with_run_ends(
    holders: Sequence[Holder],
    run_ends: Mapping[tuple[str, str], tuple[float, str]],
    job_ends: Collection[tuple[str, str]] = (),
) -> tuple[Holder, ...]:
    """``holders`` with ``Holder.run_ended`` set from ``run_ends`` ((namespace, pod) →
    (its completed run's end, its uid or "")), for a pod of that name whose uid is not
    known to differ: a pod recreated under the name is another pod, whose run has not
    ended. A holder without one takes the latest run end of the pods of its owner that
    started with it, as ``holder_ends`` lends forecasts, unless a run of its own runs
    (``job_ends``: the pods with a forecast of their own).

    Why: ``run_ends`` (``ReleaseLags.lingering``) holds the pods whose run was read
    completed, and only rank 0 reports a distributed job's run; its workers took its
    forecast while it ran (``holder_ends``), and with that forecast gone once it
    completed they were drawn a whole run from the history (never freeing, for a job
    older than every recorded run), though they free with rank 0, a lag after its run.
    """
    own: dict[tuple[str, str], float] = {}
    for h in holders:
        ended = run_ends.get((h.namespace, h.pod))
        if ended is not None and not _other_pod(ended[1], h.uid):
            own[(h.namespace, h.pod)] = ended[0]
    running = set(job_ends)
    borrowed = _from_siblings(holders, own, max)
    out = []
    for h, lent in zip(holders, borrowed, strict=True):
        key = (h.namespace, h.pod)
        ended = own.get(key, None if key in running else lent)
        out.append(h if ended is None else replace(h, run_ended=ended))
    return tuple(out)


def run_followers(
    holders: Sequence[Holder],
    before: Sequence[Holder],
    ended: Mapping[tuple[str, str], float],
    running: Collection[tuple[str, str]],
) -> dict[tuple[str, str], float]:
    """The pods of ``holders`` (a read's) that end with a run completed now without
    reporting it: (namespace, pod) → the run's end, the latest of the runs ``ended``
    ((namespace, pod) → end) in the pods of its owner started with it, as
    ``with_run_ends`` lends (its siblings looked up in ``holders``, or in ``before``,
    the read before, for one gone since). Not a pod with a run of its own completed
    now (``ended``) or running (``running``).

    Why: ``ReleaseLags`` watches the pods whose runs were read completed, only rank 0
    of a distributed job, until it is gone; ``with_run_ends`` lends its run's end to its
    workers only while it is watched. Workers stuck after rank 0 exits (a collective
    waiting for its timeout) were drawn a whole run from the history once it was gone:
    watched themselves (``ReleaseLags.observe``'s ``followers``), they keep its end
    until each is gone.
    """
    here = {(h.namespace, h.pod) for h in holders}
    gone = [h for h in before if (h.namespace, h.pod) not in here and (h.namespace, h.pod) in ended]
    lent = _from_siblings([*holders, *gone], ended, max)
    return {
        (h.namespace, h.pod): end
        for h, end in zip(holders, lent[: len(holders)], strict=True)
        if end is not None and (h.namespace, h.pod) not in running
    }


def _from_siblings(
    holders: Sequence[Holder],
    values: Mapping[tuple[str, str], _V],
    later: Callable[[_V, _V], _V],
) -> list[_V | None]:
    """For each of ``holders`` without a value of its own in ``values`` ((namespace,
    pod) → value), the ``later`` of the values of the holders of its owner
    (``Holder.owner``, same namespace) that started within
    ``SIBLING_START_WINDOW_SECONDS`` of it; None for a holder with its own, without an
    owner or a known start, or with no such sibling. A holder whose start is unknown
    lends nothing either: it is not known to be a sibling."""
    by_owner: dict[tuple[str, str, str], list[tuple[float, _V]]] = {}
    for h in holders:
        value = values.get((h.namespace, h.pod))
        if h.owner is not None and value is not None and h.started is not None:
            by_owner.setdefault((h.namespace, *h.owner), []).append((h.started, value))
    starts: dict[tuple[str, str, str], list[float]] = {}
    for key, lenders in by_owner.items():
        lenders.sort(key=lambda lender: lender[0])
        starts[key] = [started for started, _ in lenders]
    out: list[_V | None] = []
    for h in holders:
        lent = None
        if (h.namespace, h.pod) not in values and h.owner is not None and h.started is not None:
            key = (h.namespace, *h.owner)
            lo = bisect.bisect_left(starts.get(key, []), h.started - SIBLING_START_WINDOW_SECONDS)
            hi = bisect.bisect_right(starts.get(key, []), h.started + SIBLING_START_WINDOW_SECONDS)
            for _, value in by_owner.get(key, [])[lo:hi]:
                lent = value if lent is None else later(lent, value)
        out.append(lent)
    return out


def _later(
    a: tuple[float, float, float], b: tuple[float, float, float]
) -> tuple[float, float, float]:
    """The later of two P10/P50/P90 end forecasts, quantile by quantile."""
    return (max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2]))


# How long a pod may fit free GPUs and stay Pending and unbound before it is taken to
# wait for something else: kube-scheduler's podMaxInUnschedulablePodsDuration (5 min by
# default), the longest a pod it could not place waits before it is tried again, even
# when no cluster event (a pod deleted, a node added) moves it sooner. A pod that fit
# the free GPUs all that time was tried, and refused for another reason.
BLOCKED_GRACE_SECONDS = 300.0


def predict_queue(
    queue: ClusterQueue,
    job_ends: Mapping[tuple[str, str], tuple[float, float, float]],
    durations: Sequence[float],
    now: float,
    settings: PendingSettings,
    blocked: Collection[tuple[str, str]] | Mapping[tuple[str, str], Collection[str]] = (),
    random_state: int | None = 0,
    release_seconds: Sequence[float] = (),
    run_ends: Mapping[tuple[str, str], tuple[float, str]] | None = None,
) -> PendingSet:
    """``predict``, with each pod of ``blocked`` (namespace, pod: ``StartTracker.blocked``)
    kept off the nodes ``blocked`` maps it to (the nodes it was kept off before, whose
    GPU pods and allocatable have not changed since, and those it has fit the grace
    through since), or, the first cycle it is blocked (mapped to none), off the nodes it
    fits on now (``PendingPod.excluded_nodes``), and published ``blocked_elsewhere``: with the start
    the replay gives it on the other nodes, or without one when it gets none there (no
    other node suits it, or none frees for it within the horizon).

    Why: such a pod waits for something the replay does not model (CPU or memory short
    on those nodes, an unbound PVC, a scheduling gate). Replayed as it is, it is
    predicted to start "now" every cycle and takes, in every sample, a GPU the pods
    behind it really get. Left out of the replay, it took no GPU anywhere, though a pod
    kept off a node by that node's CPU or memory starts on another node once GPUs free
    there, before the pods behind it, which were predicted that much too early. Kept off
    only the nodes where it was seen to fit and not start, it is replayed on the others
    by the same rules as every pod. Its status stays ``blocked_elsewhere``, start or
    not: what holds it may hold it on every node (a gate, a PVC), which only a start
    elsewhere would tell, so that start silences no alert (``GpuEtaPodPendingNoStart``)
    and none of its predictions is scored (``StartTracker``).

    Once kept off a node, it stays off it when it fits no free GPU there any more (others
    took them): what kept it off (that node's CPU or memory) is still there. Read again
    each cycle from the nodes it fits now, it was replayed on that node as soon as the
    free GPU was taken, predicted to start when the GPU freed again (and "now", and
    blocked again, every 5 minutes), so the alert never fired on it and the pods behind
    it were predicted a run late.

    A node it starts to fit once kept off others (a GPU pod left it, or it joined) is
    not taken off at once: nothing was seen to keep the pod off it yet. It gets the
    grace a new pod gets (``PodStart.grace_nodes``; ``StartTracker`` keeps the pod off
    it once it has fit there the grace through, unbound), and meanwhile the pod is
    replayed on it, predicted to start now. Taken off at once, a pod predicted to start
    on a node when its GPU frees lost that start the moment the GPU freed, and the pods
    behind it took the GPU in the replay before the scheduler had tried it there.

    ``StartTracker.blocked`` stops keeping it off the
    nodes when a GPU pod leaves one of them or one's allocatable changes (what held it
    may be gone); it is then replayed as any pod, and given the grace again. A blocked
    pod kept off no node (it fits no free GPU and was kept off none) is replayed as any
    pod too. Whether it fits free GPUs is read from the cluster now
    (``nodes_fitting_now``: the units every running pod holds taken), not drawn: a pod
    whose forecast end has passed still holds its GPUs (one past its deletion timestamp
    does not, as in the replay)."""
    pending = []
    kept_off: dict[tuple[str, str], frozenset[str]] = {}
    in_grace: dict[tuple[str, str], frozenset[str]] = {}
    for p in queue.pending:
        key = (p.namespace, p.pod)
        if key in blocked and not p.gated:
            before = frozenset(blocked[key]) if isinstance(blocked, Mapping) else frozenset()
            fitting = frozenset(
                nodes_fitting_now(
                    queue.nodes,
                    queue.holders,
                    p,
                    now,
                    one_replica_per_pod=settings.one_replica_per_pod,
                )
            )
            # first blocked: the nodes it fit the grace through; then those ``blocked``
            # names, a node it starts to fit given its own grace
            off = before or fitting
            if off:
                p = replace(p, excluded_nodes=p.excluded_nodes | off)
                kept_off[key] = off
                if fitting - off:
                    in_grace[key] = fitting - off
        pending.append(p)
    result = predict(
        replace(queue, pending=tuple(pending)) if kept_off else queue,
        job_ends,
        durations,
        now,
        settings,
        random_state,
        release_seconds,
        run_ends,
    )
    if not kept_off:
        return result
    pods = tuple(
        _blocked_elsewhere(p, kept_off[key], in_grace.get(key, frozenset()))
        if (key := (p.namespace, p.pod)) in kept_off
        else p
        for p in result.pods
    )
    return replace(result, pods=pods)


def _blocked_elsewhere(start: PodStart, off: frozenset[str], grace: frozenset[str]) -> PodStart:
    """A pod's ``start`` (``predict_queue``) kept off the nodes ``off``, fitting ``grace``
    within their grace, as published: ``blocked_elsewhere``, with its start on the
    other nodes when the replay predicted one."""
    pred = start.prediction
    starts = pred.starts if pred.status == PREDICTED else None
    return replace(
        start,
        prediction=StartPrediction(BLOCKED_ELSEWHERE, starts, pred.started_share),
        excluded_nodes=off,
        grace_nodes=grace,
    )


# ``gpu_eta_forecaster_job_errors_total{reason}`` values for the queue's pods left
# without a prediction (``PendingSet.skipped``, ``PendingSet.rejected``)
SKIPPED_REASON = "pending_skipped"
REJECTED_REASON = "pending_rejected"
# not an error counted: kube-state-metrics shows no toleration for some pending pods,
# taints are not applied to them
TAINTS_IGNORED = "taints_ignored"
# not an error counted either: nodeSelector keys of pending pods that no node label shows
SELECTORS_UNCHECKED = "selectors_unchecked"
# nodeSelector keys past the cap of the node labels' read (their pods are counted
# rejected, selector_not_read)
SELECTORS_NOT_READ = "selectors_not_read"
# not an error counted: no kube_pod_created for some pending pods, queued by when
# Prometheus first saw them Pending
CREATED_MISSING = "created_missing"
# nor this: priority class names of pending pods without a --pending.priority-class value
PRIORITIES_UNKNOWN = "priorities_unknown"


def error_counts(pending: PendingSet | None) -> dict[str, int]:
    """What one cycle's queue adds to the forecaster's error counter, by reason.

    Why: a pending pod that gets no prediction must not vanish unseen. Pods past
    ``--pending.max-pods`` are ``pending_skipped``; series and pods ``kube_state.parse``
    could not use (a NaN or 0 GPU request, no creation time, ...) are
    ``pending_rejected``, their own reasons summed (``describe`` names them). Counted
    per cycle, as the jobs skipped are. Only non-zero counts.
    """
    if pending is None:
        return {}
    out = {REJECTED_REASON: sum(pending.rejected.values()), SKIPPED_REASON: pending.skipped}
    return {k: v for k, v in out.items() if v > 0}


def describe(pending: PendingSet | None) -> str:
    """One line on the queue's pods and series left without a prediction ("" when none),
    with ``kube_state``'s reasons, on taints not applied for want of tolerations and on
    nodeSelector keys not checked for want of node labels, on those not read past the
    cap of the node labels' read (``kube_state.selector_plan``: not "not allow-listed",
    which they may well be) and on priority classes without a value: what an operator
    reads in the log."""
    if pending is None:
        return ""
    parts = []
    if pending.tainted_nodes and pending.tolerations_missing:
        parts.append(
            "kube-state-metrics shows no toleration for pending GPU pods of "
            f"{_namespaces(pending.tolerations_missing)} (kube_pod_tolerations missing, or "
            "dropped for those namespaces): GPU nodes' taints are taken as tolerated by "
            "them (docs/pending.md)"
        )
    if pending.selectors_unchecked:
        keys = _per_pods(pending.selectors_unchecked)
        parts.append(
            f"pending GPU pods select nodes by {keys}, which no GPU node's kube_node_labels "
            "shows (not in kube-state-metrics' --metric-labels-allowlist=nodes=[...], or "
            "dropped by VictoriaMetrics' -maxLabelsPerTimeseries, 30 by default, from nodes "
            "with many labels): those keys are not held against any node (docs/pending.md)"
        )
    if pending.selectors_not_read:
        keys = _per_pods(pending.selectors_not_read)
        parts.append(
            f"pending GPU pods select nodes by {keys}, not read (more than "
            f"{MAX_SELECTOR_KEYS} keys or {MAX_SELECTOR_CHARS:,} "
            "characters of node labels a cycle, read pod by pod in queue order, a pod's "
            "keys only if they all fit): those pods get no prediction (docs/pending.md)"
        )
    if pending.priorities_unknown:
        names = _per_pods(pending.priorities_unknown)
        parts.append(
            f"pending GPU pods have priority classes {names} whose values are not known "
            "(kube-state-metrics exports the name only): they are queued at priority 0; "
            "give each with --pending.priority-class NAME=VALUE (docs/pending.md)"
        )
    if pending.created_missing:
        parts.append(
            "kube-state-metrics shows no creation time for pending GPU pods "
            "(kube_pod_created missing: OpenShift's KSM denylists ^kube_.+_created$): they "
            "are queued by when Prometheus first saw them Pending, within "
            "--pending.arrivals-window (docs/pending.md)"
        )
    if pending.skipped:
        parts.append(
            f"{pending.skipped} pending pods past --pending.max-pods (no prediction, and none "
            "for a request made now: it would queue behind them)"
        )
    if pending.rejected:
        why = ", ".join(f"{k} {v}" for k, v in sorted(pending.rejected.items()))
        parts.append(
            f"{sum(pending.rejected.values())} kube-state-metrics series or pods skipped ({why})"
        )
    return "; ".join(parts)


def left_out(pending: PendingSet) -> tuple[tuple[str, int], ...]:
    """What changes the queue's log line (``describe``): the rejections by reason and
    whether any pod is past ``--pending.max-pods``, taints are not applied, which
    nodeSelector keys are not checked or not read, or which priority classes have no
    value (each set of names by a digest, ``_digest``: thousands of keys would be kept
    joined between cycles). Not the number skipped, nor of pods selecting a key, which
    move with the queue every cycle (the counter has the former): one line per change,
    not per cycle; likewise whether creation times are missing, not for how many pods."""
    rejected = tuple(sorted((k, v) for k, v in pending.rejected.items() if v > 0))
    skipped = ((SKIPPED_REASON, 1),) if pending.skipped > 0 else ()
    ignored = (
        ((f"{TAINTS_IGNORED} {' '.join(pending.tolerations_missing)}", 1),)
        if pending.tainted_nodes and pending.tolerations_missing
        else ()
    )
    unchecked = (
        ((f"{SELECTORS_UNCHECKED} {_digest(pending.selectors_unchecked)}", 1),)
        if pending.selectors_unchecked
        else ()
    )
    missing = ((CREATED_MISSING, 1),) if pending.created_missing > 0 else ()
    unknown = (
        ((f"{PRIORITIES_UNKNOWN} {_digest(pending.priorities_unknown)}", 1),)
        if pending.priorities_unknown
        else ()
    )
    not_read = (
        ((f"{SELECTORS_NOT_READ} {_digest(pending.selectors_not_read)}", 1),)
        if pending.selectors_not_read
        else ()
    )
    return (*rejected, *skipped, *ignored, *unchecked, *missing, *unknown, *not_read)


def _per_pods(counts: Mapping[str, int], shown: int = 5) -> str:
    """``a (3 pods), b (1 pod)``: names by the pending pods each counts (most first,
    then by name), a name alone where the count is 0 (not known, a ``ServiceState``
    mark kept); past ``shown``, ``and N more`` (``first_of``): a queue selecting
    thousands of keys made one line of hundreds of thousands of characters."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return first_of(
        [f"{name} ({n} pod{'s' if n > 1 else ''})" if n else name for name, n in ranked],
        shown,
    )


def _digest(names: Iterable[str]) -> str:
    """A short fingerprint of a set of names: what ``left_out`` remembers a list that
    can hold thousands of keys by, rather than the names joined."""
    joined = "\0".join(sorted(names)).encode("utf-8", "surrogateescape")
    return hashlib.sha256(joined).hexdigest()[:16]


def _namespaces(names: Sequence[str], shown: int = 5) -> str:
    """``namespace a``, ``namespaces a, b``, or the first ``shown`` and how many more."""
    return f"namespace{'s' if len(names) > 1 else ''} {first_of(names, shown)}"


def run_durations(history: Sequence[Run], limit: int = 5000) -> tuple[float, ...]:
    """Wall seconds from start to last epoch of the latest ``limit`` finished runs.

    Cancelled runs count too: they held their GPUs as long.
    """
    out = []
    for run in history[-limit:]:
        d = run.last_timestamp - run.start_timestamp
        if d > 0 and math.isfinite(d):
            out.append(d)
    return tuple(out)


def job_end_times(
    jobs: Sequence[tuple[str, str, tuple[float, float, float]]],
) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(namespace, pod, ends) per run → per pod the latest end, quantile by quantile."""
    out: dict[tuple[str, str], tuple[float, float, float]] = {}
    for ns, pod, ends in jobs:
        prev = out.get((ns, pod))
        out[(ns, pod)] = ends if prev is None else _later(prev, ends)
    return out


# a node a blocked pod is kept off, as ``StartTracker`` remembers it: (when it was first
# kept off it, how many GPU pods were on the node then, the node's allocatable GPU units)
NodeMark = tuple[float, int, int]
# a pod's kept predictions as saved: (namespace, pod, its uid or "", when last read
# waiting, its raw (P10, P50, P90) start predictions, oldest first, since when every
# prediction of it has been a start now or ``blocked_elsewhere``: None when not, the
# nodes it is kept off: node → its mark, the nodes it fits within their grace: node →
# since when it has fit there)
SavedWait = tuple[
    str,
    str,
    str,
    float,
    list[tuple[float, float, float]],
    float | None,
    dict[str, NodeMark],
    dict[str, float],
]


@dataclass(slots=True)
class _Waiting:
    """What ``StartTracker`` keeps of one pod: its raw predictions (the latest
    ``per_pod``, oldest first) and when it was last read waiting. One record, so the two
    cannot be kept for different pods (predictions without a time were never forgotten)."""

    seen: float
    starts: list[tuple[float, float, float]] = field(default_factory=list)
    uid: str = ""  # the pod's, when read: another uid under its name is another pod
    # the cycle from which every prediction of it has started it now (its P50 the
    # cycle's time: it fits free GPUs) or found it ``blocked_elsewhere``; None: not so
    fits_since: float | None = None
    # the nodes it was kept off (``blocked_elsewhere``) → their marks (``NodeMark``)
    excluded: dict[str, NodeMark] = field(default_factory=dict)
    # the nodes it has fit since it was kept off others, not kept off yet → since when
    # it has fit there (each node's grace: ``PodStart.grace_nodes``)
    grace: dict[str, float] = field(default_factory=dict)


def _units(node: Node) -> int:
    """All of ``node``'s allocatable GPU units, of every resource."""
    return sum(node.allocatable.values())


def _held_since(holders: Iterable[Holder], since: float) -> int:
    """How many of ``holders`` started by ``since`` (or when not known)."""
    return sum(1 for h in holders if h.started is None or h.started <= since)


def _still_closed(
    marks: Mapping[str, NodeMark], nodes: Mapping[str, Node], on: Mapping[str, list[Holder]]
) -> bool:
    """Whether every node of ``marks`` is still as it was when the pod was kept off it:
    there, with the same allocatable GPU units, and every GPU pod that was on it then
    still on it (no fewer pods that started by then: one that left may have freed the
    CPU or memory the pod waits for; pods bound since start after it and are not
    counted)."""
    for name, (since, n_held, units) in marks.items():
        node = nodes.get(name)
        if node is None or _units(node) != units or _held_since(on.get(name, ()), since) < n_held:
            return False
    return True


def _holders_by_node(queue: ClusterQueue) -> dict[str, list[Holder]]:
    """``queue``'s GPU pods by the node they are on."""
    on: dict[str, list[Holder]] = {}
    for h in queue.holders:
        on.setdefault(h.node, []).append(h)
    return on


class StartTracker:
    """Remembers each pending pod's raw predictions and calibrates new ones (no I/O).

    When a pod it predicted shows up running with a start time (``kube_pod_start_time``),
    its earlier predictions become observations for a ``StartCalibrator``; the scale it
    learns widens (or narrows) the intervals published from then on. Bounded: at most
    ``per_pod`` predictions per pod (the latest); a pod that vanishes without starting
    is forgotten once it has been out of the reads ``forget_seconds`` (the
    forecaster's vanish grace).

    Why a grace, and why a read without any GPU node forgets nothing: a pod missing
    from one read is not always gone. Prometheus marks a kube-state-metrics target's
    series stale at its first failed scrape, so KSM restarting (a rollout, an OOM kill)
    empties a whole read, and a KSM shard down takes its pods out of it. Forgotten at
    once, the predictions of every pod that starts across such a gap would never be
    scored, and the calibration would learn only from gap-free waits.

    Predictions are kept by (namespace, pod), the names the job forecasts and the
    published series go by, with the pod's uid. A pod read under that name with
    another uid, waiting or already running (it started between two reads), is
    another pod under that name (a JupyterHub server spawned again after a cancelled
    spawn, a Kubeflow job resubmitted, a StatefulSet pod recreated within the grace):
    the predictions kept are the deleted pod's and are dropped, not scored against the
    new pod's start. Without uids (a test's queue), a pod read waiting with a creation
    time later than when its name was last read waiting is taken as another pod. Later,
    not just other: a creation time taken from the arrival window
    (``kube_state.PENDING_SINCE``, without ``kube_pod_created``) moves with the window,
    but stays before the last read.

    A pod predicted to start now (GPUs it may use are free) that is still Pending and
    unbound ``blocked_seconds`` after the first such prediction waits for something
    else (``BLOCKED_GRACE_SECONDS``): ``blocked`` names it for ``predict_queue``, which
    keeps it off the nodes it fits on and publishes it ``blocked_elsewhere``, with the
    start it gets on other nodes if any. It stays blocked while it fits free GPUs. Its
    kept predictions are dropped then, and none is kept while it is blocked: they timed
    a wait that was not for GPUs (or one on other nodes that its block may close too),
    and scored when it starts they would teach the calibrator that zero-width intervals
    miss by hours.

    The nodes a blocked pod was kept off stay closed to it (``blocked`` maps it to
    them) while it waits, fitting free GPUs there or not, until one of them changes in a
    way that may let it fit: a GPU pod that was on it leaves (its CPU and memory free),
    its allocatable GPU units change, or it is gone. Then the pod is kept off none and
    given the grace again. Why: what keeps it off (the node's CPU or memory, an
    affinity) is not seen to lift when another pod takes the free GPU; forgotten then,
    the pod was replayed onto the node again, predicted to start there when the GPU
    freed, every 5 minutes "now" and blocked again. Only GPU pods are read, so a CPU-only
    pod leaving frees nothing here: the pod stays kept off until a GPU pod leaves or it
    starts. A node it starts to fit meanwhile (``PodStart.grace_nodes``) is added to them
    once it has fit there ``blocked_seconds`` through, as a pod is found blocked; a node
    it stops fitting within that time starts its grace over when it fits again.

    ``waiting`` and ``restore`` hand the kept predictions to ``pending_state``, which
    keeps them in the history file: a ``once`` CronJob (a new process every cycle)
    would otherwise never see a pod it predicted start, and never calibrate.
    """

    def __init__(
        self,
        calibrator: StartCalibrator | None = None,
        per_pod: int = 20,
        forget_seconds: float = 600.0,
        blocked_seconds: float = BLOCKED_GRACE_SECONDS,
    ) -> None:
        self.calibrator = calibrator or StartCalibrator()
        self.per_pod = per_pod
        self.forget_seconds = forget_seconds
        self.blocked_seconds = blocked_seconds
        self._kept: dict[tuple[str, str], _Waiting] = {}

    def blocked(self, queue: ClusterQueue, now: float) -> dict[tuple[str, str], frozenset[str]]:
        """The pending pods of ``queue`` (namespace, pod) predicted to start now, or
        found blocked, in every cycle since at least ``blocked_seconds`` ago: they fit
        free GPUs and were not bound, so they wait for something else. Each → the nodes
        it was kept off and that have not changed since (``_still_closed``), and those it
        has fit ``blocked_seconds`` through since; a pod one of whose nodes kept off
        changed is not blocked (it is given the grace again). A pod read under a kept
        name with another uid is another pod, and not blocked."""
        nodes = {n.name: n for n in queue.nodes}
        on = _holders_by_node(queue) if any(k.excluded for k in self._kept.values()) else {}
        out = {}
        for p in queue.pending:
            kept = self._kept.get((p.namespace, p.pod))
            if (
                kept is not None
                and kept.fits_since is not None
                and now - kept.fits_since >= self.blocked_seconds
                and not _other_pod(kept.uid, p.uid)
                and _still_closed(kept.excluded, nodes, on)
            ):
                graced = (n for n, t in kept.grace.items() if now - t >= self.blocked_seconds)
                out[(p.namespace, p.pod)] = frozenset(kept.excluded).union(graced)
        return out

    def update(self, queue: ClusterQueue, result: PendingSet, now: float) -> PendingSet:
        """Learn from pods that started since, remember ``result``'s, return it calibrated."""
        started = {(h.namespace, h.pod): h.started for h in queue.holders}
        for h in queue.holders:
            key = (h.namespace, h.pod)
            kept = self._kept.get(key)
            if kept is None or h.started is None:
                continue
            starts = self._forget(key)
            if not _other_pod(kept.uid, h.uid):  # not recreated since: scored
                for s in starts:
                    self.calibrator.observe(s, h.started)
        uids = {(p.namespace, p.pod): p.uid for p in queue.pending}
        for p in queue.pending:
            key = (p.namespace, p.pod)
            kept = self._kept.get(key)
            if kept is not None and (
                _other_pod(kept.uid, p.uid) or (not (kept.uid and p.uid) and p.created > kept.seen)
            ):
                # another pod under the same name (deleted and recreated); the kept
                # predictions were the old one's, which never started
                self._forget(key)
        waiting = uids.keys()
        for key in waiting & self._kept.keys():
            self._kept[key].seen = now
        if queue.nodes:  # a read without any GPU node (KSM restarting) says nothing
            for key in [
                k
                for k, kept in self._kept.items()
                if k not in waiting and k not in started and now - kept.seen > self.forget_seconds
            ]:
                self._forget(key)  # deleted before it started: nothing to learn
        for p in result.pods:
            key = (p.namespace, p.pod)
            if p.prediction.status in (NO_SCHEDULABLE_NODE, GATED):
                # it waits for an admin (a node cordoned or down) or for its gate to be
                # lifted (a queueing system's admission), which no replay times: what
                # was predicted before is not a miss of the queue's, and scored once it
                # starts it would widen every interval for hours of maintenance or quota
                self._forget(key)
            elif p.prediction.status == BLOCKED_ELSEWHERE:
                # its predictions timed a wait that was not for GPUs: none is scored
                kept = self._kept.setdefault(key, _Waiting(now, uid=uids.get(key, "")))
                kept.starts.clear()
                kept.fits_since = now if kept.fits_since is None else kept.fits_since
                kept.seen = now
                self._keep_off(kept, p.excluded_nodes, queue, now)
                # a node it stopped fitting within its grace starts it over (as a pod's)
                kept.grace = {n: kept.grace.get(n, now) for n in p.grace_nodes}
            elif p.prediction.status == PREDICTED and p.prediction.starts is not None:
                uid = uids.get(key, "")
                kept = self._kept.setdefault(key, _Waiting(now, uid=uid))
                kept.uid = kept.uid or uid
                kept.starts.append(p.prediction.starts)
                del kept.starts[: -self.per_pod]
                kept.seen = now
                fits = p.prediction.starts[1] <= now
                if kept.excluded or kept.grace:  # kept off nodes no more: the grace anew
                    kept.excluded, kept.grace, kept.fits_since = {}, {}, None
                kept.fits_since = (
                    (now if kept.fits_since is None else kept.fits_since) if fits else None
                )
            elif key in self._kept:
                self._kept[key].fits_since = None
                self._kept[key].excluded = {}
                self._kept[key].grace = {}
        scale = self.calibrator.scale
        pods = tuple(
            replace(p, prediction=self.calibrator.widen(p.prediction, now, scale))
            for p in result.pods
        )
        requests = {
            r: self.calibrator.widen(pred, now, scale) for r, pred in result.requests.items()
        }
        return replace(result, pods=pods, requests=requests, interval_scale=scale)

    @staticmethod
    def _keep_off(kept: _Waiting, off: Collection[str], queue: ClusterQueue, now: float) -> None:
        """Mark the nodes of ``off`` in ``kept`` as they are now (``NodeMark``); a node
        already marked keeps its mark (when it was first kept off, the pods then)."""
        nodes = {n.name: n for n in queue.nodes}
        new = [name for name in off if name not in kept.excluded and name in nodes]
        if not new:
            return
        on = _holders_by_node(queue)
        for name in new:
            kept.excluded[name] = (now, _held_since(on.get(name, ()), now), _units(nodes[name]))

    def waiting(self) -> list[SavedWait]:
        """The pods whose predictions are kept, by name: (namespace, pod, uid, when last
        read waiting, its raw predictions oldest first, since when it has fit now, the
        nodes it is kept off, the nodes it fits within their grace)."""
        return [
            (ns, pod, w.uid, w.seen, list(w.starts), w.fits_since, dict(w.excluded), dict(w.grace))
            for (ns, pod), w in sorted(self._kept.items())
        ]

    def restore(self, rows: Iterable[SavedWait]) -> None:
        """Keep ``rows`` (``waiting``'s, as saved) beside what is kept: the latest
        ``per_pod`` predictions of each."""
        for ns, pod, uid, seen, starts, fits_since, excluded, grace in rows:
            self._kept[(ns, pod)] = _Waiting(
                seen, list(starts)[-self.per_pod :], uid, fits_since, dict(excluded), dict(grace)
            )

    def _forget(self, key: tuple[str, str]) -> list[tuple[float, float, float]]:
        """Drop a pod's predictions (returned) and when it was last read."""
        kept = self._kept.pop(key, None)
        return kept.starts if kept is not None else []


def _other_pod(kept_uid: str, read_uid: str) -> bool:
    """Whether a pod read under a kept name is another pod: both uids known, and not
    the same."""
    return bool(kept_uid and read_uid and kept_uid != read_uid)
