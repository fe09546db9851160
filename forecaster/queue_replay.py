"""When will a pending GPU pod start? A forward replay of the scheduler's queue.

Pure: no I/O, no clock. The caller hands over the cluster as kube-state-metrics
shows it (nodes and their allocatable GPU units, running pods and what they hold,
pending pods in the queue) plus the forecaster's predicted end of each running job,
and gets back, per pending pod, P10/P50/P90 of its start time, and per GPU type
and request size, when a request made now would start.

How (a Monte Carlo replay, ``n_samples`` times):

1. Every running pod's end is drawn: from its forecast's P10/P50/P90 when it has one
   (the quantile function interpolated between them, extended linearly past them),
   given that it ends after now, as it runs now (``end_after``: a job past its P50
   ends after now in every sample, not "now" in half of them), else, and for a job
   past its whole forecast, from the history of finished runs' durations, conditioned
   on having already run ``now - started`` (a holder that has outlived every recorded
   run holds its GPUs past the horizon; one draw per run, as inside the forecast). A pod that outlives its run
   (``Holder.ends_with_run`` False: a notebook server) ends at the later of the two.
2. Pending pods are taken in the scheduler's order (priority, then creation time).
   At ``now`` and then at every moment GPUs free up, each pod still waiting is tried
   in that order and starts on the first node that has enough free units of its
   resource (and its GPU type, when it asks for one: a node of unknown type only when
   no node of known type offers it, ``_offers``; and whose labels hold its other
   nodeSelector pairs,
   ``PendingPod.selector``), best fit first. A pod that does
   not fit does not block the pods behind it (kube-scheduler moves on to the next pod;
   it reserves nothing for a large pod), so a 1-GPU pod can start before an older
   2-GPU pod that waits for a whole node.
3. A pod that started holds its units for a duration drawn from the history.
4. A new request "made now" is a pod queued behind every pending pod of its priority:
   its start is the first moment it would fit in that sweep. It is not placed, so it
   changes nobody else's start.
5. A pod that ends with its run frees its units some time after the run's end: it
   writes its last files, its container exits, the kubelet reports it, and
   kube-scheduler drops it from its cache. ``release_seconds`` are those lags as
   observed on finished pods (from a run's last report to its pod's end); one is drawn
   and added to the end of each holder that ends with its run (not a notebook server:
   it outlives its run) and to the hold of each pod started in the replay. None given,
   a run's end frees its units at once. A holder whose run has already ended and whose
   pod still holds its units (``Holder.run_ended``: in its lag now) frees them at its
   run's end plus a lag longer than it has lingered so far, drawn from the observed
   lags that are; past every one of them (or with none observed), its lingering so far
   plus ``linger_rest``.

Across samples the start times give P10/P50/P90. A pod asking more units than any
suitable node has can never fit and gets no time (``never_fits``); a pod that starts
after the horizon in half the samples or more gets none either (``beyond_horizon``).
A closed node takes no new pod: cordoned or not Ready (``Node.schedulable`` False),
its device plugin away (kept with its capacity: ``kube_state``), being removed by an
autoscaler (``leaving``), or under a pressure taint the pod does not tolerate
(``pressure_taints``). Its pods run on and free their units there for nobody. A pod
that would fit only on closed nodes gets no time (``no_schedulable_node``): it waits
for an admin or the node's recovery, not for GPUs.

Taints and tolerations: a pod may land on a node only if it tolerates each of the
node's taints whose effect is ``NoSchedule`` or ``NoExecute`` (``PreferNoSchedule`` is
a preference of the scoring: ignored), matched as kube-scheduler does
(``Toleration.tolerates``). A node whose taints a pod does not tolerate is not
suitable for it, as a node of another GPU type is not: a pod that fits no node it
tolerates is ``never_fits`` (the pod's tolerations or the node pool must change: a
standing policy, not a wait), and ``no_schedulable_node`` stays for a pod that fits
only tolerated nodes that are cordoned, not Ready or under a state taint it does not
tolerate. The taints Kubernetes and the cloud provider set from a node's state (keys
under ``node.kubernetes.io/`` and ``node.cloudprovider.kubernetes.io/``) are left out
of that policy check (``policy_taints``): a pod kept off a node by them waits for the
node, not for a toleration. Cordon (``unschedulable``) and not-ready/unreachable are
read from the node's spec and Ready condition (``Node.schedulable``); the others
(memory, disk and PID pressure, ``network-unavailable``, ``out-of-service``, the cloud
provider's ``uninitialized`` and ``shutdown``) from the taint itself, checked against
each pod's tolerations (``pressure_taints``), as kube-scheduler filters on it: a pod
tolerating memory pressure (the PodTolerationRestriction admission plugin, where a
cluster enables it, adds that toleration to every Burstable or Guaranteed pod) starts
there; a pod whose tolerations are unknown does not. A node
an autoscaler is removing (``leaving``) is not schedulable either.

Whose tolerations are known: a ``PendingPod`` with ``tolerations`` None (KSM exports
none for it: ``kube_pod_tolerations`` dropped, for every namespace or for its own, or
KSM before 2.6) is placed as if it tolerated
every taint. Predicting instead that such pods fit no tainted node would be wrong on
the clusters whose GPU nodes carry ``nvidia.com/gpu:NoSchedule`` and whose pods get
the matching toleration from the ``ExtendedResourceToleration`` admission plugin. Pods
arriving later (``Arrival``) tolerate what the recent pods they were measured on did,
and select the node labels those did (``Arrival.selector``), one arrival shape per
distinct set: they take GPUs only where those pods could (a team's pool, tainted or
chosen by nodeSelector, goes to the team's arrivals, not to everyone's); an arrival without
tolerations tolerates nothing (untainted nodes only), one measured on pods whose
tolerations are not known (None) every taint. A request made now tolerates what ``replay``'s
``request_tolerations`` says (the site's convention, ``--pending.request-toleration``),
by default only the toleration that plugin would add (``Exists`` on the taint named
after its own resource, ``NoSchedule``; the plugin is off by default upstream, so this
is a guess): it starts only on nodes whose other ``NoSchedule``/``NoExecute`` taints it
tolerates, and a GPU type offered only by nodes it does not (a team's dedicated pool)
gets no request.

Time-sliced GPUs: the NVIDIA device plugin advertises each replica as one
``nvidia.com/gpu`` unit in the node's allocatable, and a pod holds as many units as
it requests. ``Node.shared`` says how many of those units are replicas of a shared
device: a pod takes them after whole GPUs, as many as it asks (the plugin hands out
replicas to anyone who asks, its ``failRequestsGreaterThanOne`` being off by
default), or, with ``one_replica_per_pod`` (that setting on), only when none of its
containers asks more than one (the plugin checks each container's request:
``PendingPod.largest_container_units``).
MIG slices are resources of their own (``nvidia_com_mig_1g_5gb``...): each is a
separate pool.

Not modelled (each shows as an error of the prediction, not as a failure):
preemption (a high-priority pod that evicts a running one starts earlier than
predicted, and the evicted pod's neighbours' predictions are late), batch queueing and
gang scheduling (Kueue's quotas, all-or-nothing groups start later than the sum of
their pods), a pod tolerating ``unschedulable`` or ``not-ready`` (or every taint, a
bare ``Exists``), which may start on a cordoned or NotReady node the replay closes to
everyone (rare for GPU jobs), the
node an autoscaler adds for a pod (it is not there yet; a node it removes, tainted
``ToBeDeletedByClusterAutoscaler`` or ``karpenter.sh/disrupted``, is closed as a
cordoned one is: ``leaving``), the taints a
pod whose tolerations are unknown does not tolerate (it is placed as if it tolerated
every taint), node affinity (a ``nodeSelector`` is matched: its GPU product, and
its other keys on the nodes whose labels are known, ``Node.labels``; a key no node
label shows is left out by ``kube_state``, the pod then matched as if it did not
select it), CPU/memory shortages (a pod seen passing over free GPUs is kept off the
nodes it fits: ``PendingPod.excluded_nodes``), and pods arriving after now (they can
only take GPUs from pods behind them in the order, or from later requests). A ``ResourceQuota`` holds
no pod here: it refuses a pod over it when the pod is created, so such a pod never
queues.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
import random
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from gpu_eta.common.k8s_names import ksm_label
from gpu_eta.common.versioned_json import load_versioned

QUANTILES = (0.1, 0.5, 0.9)
GPU_RESOURCE = "nvidia_com_gpu"
REQUEST_SIZES = (1, 2, 4, 8)
PLACEMENTS = ("spread", "pack")

# status of a prediction
PREDICTED = "predicted"
SCHEDULED = "scheduled"  # bound to a node, containers starting
NEVER_FITS = "never_fits"
BEYOND_HORIZON = "beyond_horizon"
NO_SCHEDULABLE_NODE = "no_schedulable_node"  # fits only on closed nodes (module doc)
# fits free GPUs now, yet stayed Pending and unbound past a grace: it waits for something
# no replay models (a PVC, CPU or memory, a scheduling gate); found by pending.StartTracker,
# published by pending.predict_queue with the start it is given on the other nodes, if any
BLOCKED_ELSEWHERE = "blocked_elsewhere"
# held by its scheduling gates (``PendingPod.gated``: Kueue's admission gate, a
# controller's): kube-scheduler does not try it until they are removed, so it is not
# replayed and gets no start; published by pending.predict
GATED = "gated"
STATUSES = (
    PREDICTED,
    SCHEDULED,
    NEVER_FITS,
    BEYOND_HORIZON,
    NO_SCHEDULABLE_NODE,
    BLOCKED_ELSEWHERE,
    GATED,
)

# taint effects (Kubernetes' spelling); only the first two keep a pod off a node
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
EFFECTS = (NO_SCHEDULE, NO_EXECUTE, PREFER_NO_SCHEDULE)
BLOCKING_EFFECTS = (NO_SCHEDULE, NO_EXECUTE)
# toleration operators; "" (unset) is Equal. Lt and Gt (alpha in Kubernetes 1.35, feature
# gate ``TaintTolerationComparisonOperators``) compare the taint's value with the
# toleration's as integers
EQUAL = "Equal"
EXISTS = "Exists"
LESS_THAN = "Lt"
GREATER_THAN = "Gt"
OPERATORS = ("", EQUAL, EXISTS, LESS_THAN, GREATER_THAN)
# Kubernetes' canonical decimal integer (apimachinery ``content.IsDecimalInteger``): no
# leading zero, no plus sign, no "-0"; then it must fit an int64
_DECIMAL_INTEGER = re.compile(r"(?:0|-?[1-9][0-9]{0,18})")
_INT64 = (-(2**63), 2**63 - 1)
# taints Kubernetes and the cloud provider set from a node's state: cordon and not-ready
# are ``Node.schedulable``, the others ignored (module docstring)
NODE_STATE_TAINT_PREFIXES = ("node.kubernetes.io/", "node.cloudprovider.kubernetes.io/")
# node-state taints whose state the replay reads from the node itself rather than from
# the taint (``Node.schedulable``: ``kube_node_spec_unschedulable``, the Ready condition);
# every other blocking node-state taint is checked against each pod's tolerations
# (``pressure_taints``)
SPEC_STATE_TAINT_KEYS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
)
# taints an autoscaler puts on a node it is about to remove (the cluster autoscaler's,
# Karpenter's since v1 and before it): the node takes no new pod, as if cordoned
# (``leaving``), rather than a standing policy a toleration would answer
REMOVAL_TAINT_KEYS = (
    "ToBeDeletedByClusterAutoscaler",
    "karpenter.sh/disrupted",
    "karpenter.sh/disruption",
)

Taint = tuple[str, str, str]  # key, value, effect
# a pod's nodeSelector pairs (key in KSM's spelling, value), sorted
Selector = tuple[tuple[str, str], ...]


# the calibrator's saved form (``StartCalibrator.to_json`` / ``parse_calibration``)
CALIBRATION_VERSION = 1
MAX_CALIBRATION_CHARS = 256 * 1024  # 500 errors are ~10 KB: anything near this is not ours
MAX_CALIBRATION_ERRORS = 10_000
MAX_START_ERROR = 1e9  # half-intervals; a real error past this is decades off
# a half-interval narrower than this is zero for the calibration: kube_pod_start_time,
# the start it is scored against, is in whole seconds
MIN_HALF_SECONDS = 1.0


class ReplayError(ValueError):
    """An input of the replay is out of range."""


@dataclass(frozen=True, slots=True)
class Node:
    """A node's allocatable GPU units per resource, and its GPU product when known.

    ``schedulable`` False: cordoned (``kubectl cordon``, a drain), not Ready or being
    removed (``leaving``), so the scheduler places no new pod on it (kube-scheduler
    skips unschedulable nodes, and a NotReady node carries a ``NoSchedule`` taint from
    its state). Its pods run on. A node under pressure stays schedulable: its state
    taints keep off only the pods not tolerating them (``pressure_taints``).
    """

    name: str
    allocatable: Mapping[str, int]  # resource (KSM spelling, nvidia_com_gpu) → units
    product: str = ""  # nvidia.com/gpu.product label value; "" when not exposed
    shared: Mapping[str, int] = field(default_factory=dict)  # of which time-sliced replicas
    schedulable: bool = True
    taints: tuple[Taint, ...] = ()  # (key, value, effect), as ``kube_node_spec_taint``
    # its labels as ``kube_node_labels`` shows them (keys in KSM's spelling, no ``label_``
    # prefix: ``pool``, ``nvidia_com_gpu_family``); None: not known, every selector passes
    labels: Mapping[str, str] | None = None
    # ``product`` was spelt from the GPU model gpu-eta's exporter reports (no product
    # label read): the label GPU feature discovery writes may be that spelling with a
    # sharing suffix (``product_spellings``)
    product_from_model: bool = False

    def whole(self, resource: str) -> int:
        """Units of ``resource`` that are whole devices (a multi-unit pod can use them)."""
        return self.allocatable.get(resource, 0) - self.shared.get(resource, 0)


@dataclass(frozen=True, slots=True)
class Holder:
    """A pod holding GPU units on a node.

    ``ends``: the forecast's P10/P50/P90 completion timestamps, or None (no forecast:
    an idle notebook, a job that reports no progress, a pod still starting).
    ``started``: when it started, for conditioning a drawn duration on its age.
    ``deletion_timestamp``: set while the pod is being deleted (cancelled, preempted,
    drained): its ``metadata.deletionTimestamp``, the deletion's time plus its grace
    period, by which the kubelet has killed it; its units free then at the latest,
    whatever its run's forecast says. ``uid``: the pod's Kubernetes UID ("" when not
    read), which tells a pod recreated under the same name from the one predicted
    while it waited (``pending.StartTracker``).

    ``ends_with_run``: whether the pod ends when its run does (a Job's, a training
    operator's pod: True), or outlives it (a notebook server, a Deployment's pod:
    False; it frees no earlier than its run's end, then as a holder without a
    forecast does), or None when not known (taken as True). ``owner``: its owner's
    (kind, name) when it is a run-ending kind (``kube_state.RUN_OWNER_KINDS``), by
    which a pod without a forecast of its own (a distributed job's worker) takes the
    forecast of a pod of the same owner started with it (``pending.holder_ends``).

    ``run_ended``: when its run completed (its last report, unix seconds), for a pod
    still holding its GPUs after its run ended, in its release lag (a Job's pod writing
    its last files, its container exiting: step 5 of the module docstring); None while
    its run runs or when not known. Such a holder frees its units a release lag after
    that, one longer than it has lingered so far (``_Durations.release_after``), not
    after a whole run drawn from the history: it has no forecast any more.
    """

    namespace: str
    pod: str
    node: str
    resource: str
    units: int
    ends: tuple[float, float, float] | None = None
    started: float | None = None
    shared: bool = False  # holds replicas of a time-sliced device
    deletion_timestamp: float | None = None
    uid: str = ""
    ends_with_run: bool | None = None
    owner: tuple[str, str] | None = None
    run_ended: float | None = None


@dataclass(frozen=True, slots=True, order=True)
class Toleration:
    """One toleration of a pod, as ``kube_pod_tolerations`` shows it; ordered by its
    fields (key, operator, value, effect), so a pod's set sorts into one tuple.

    ``operator`` "" (unset) means ``Equal``; ``key`` "" (with ``Exists``) matches every
    key; ``effect`` "" matches every effect.
    """

    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' ``Toleration.ToleratesTaint``: effect and key match when set,
        then ``Exists`` matches any value, ``Equal`` the same value, ``Lt`` a taint value
        below the toleration's and ``Gt`` one above (``_compare``); any other operator
        tolerates nothing."""
        key, value, effect = taint
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == EXISTS:
            return True
        if self.operator in (LESS_THAN, GREATER_THAN):
            return _compare(self.operator, value, self.value)
        return self.operator in ("", EQUAL) and self.value == value


def _int64(text: str) -> int | None:
    """``text`` as Kubernetes reads an integer taint or toleration value; None when it
    is not one (not canonical, or outside int64)."""
    if not _DECIMAL_INTEGER.fullmatch(text):
        return None
    number = int(text)
    return number if _INT64[0] <= number <= _INT64[1] else None


def _compare(operator: str, taint_value: str, toleration_value: str) -> bool:
    """Upstream ``compareNumericValues``: ``Lt`` tolerates a taint whose value is below
    the toleration's, ``Gt`` one above; either value not an integer: no match (the
    scheduler logs it and the toleration tolerates nothing)."""
    taint_number, toleration_number = _int64(taint_value), _int64(toleration_value)
    if taint_number is None or toleration_number is None:
        return False
    if operator == LESS_THAN:
        return taint_number < toleration_number
    return operator == GREATER_THAN and taint_number > toleration_number


# a toleration as ``--pending.request-toleration`` takes it: KEY[=VALUE][:EFFECT], the key
# a Kubernetes qualified name (an optional DNS-subdomain prefix and "/", a name of 63),
# the value a label value
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_TOLERATION_KEY = re.compile(rf"(?:[a-z0-9](?:[-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_NAME}")
_TOLERATION_VALUE = re.compile(rf"(?:{_NAME})?")
MAX_TOLERATION_CHARS = 400  # key 317, "=", value 63, ":", the longest effect 16


def parse_toleration(text: str) -> Toleration:
    """``KEY[=VALUE][:EFFECT]`` → a toleration: ``Exists`` on KEY without a value,
    ``Equal`` to VALUE with one (``KEY=`` matches a taint without value); ``KEY<N`` and
    ``KEY>N`` (N a canonical integer) are ``Lt`` and ``Gt``; ``*`` for KEY is
    ``Exists`` on every key (a toleration without a key); no EFFECT: every effect.
    Pure; ``ReplayError`` naming what is wrong (no key, a key or value Kubernetes
    would refuse, a bound that is not an integer, an unknown effect)."""
    if len(text) > MAX_TOLERATION_CHARS:
        raise ReplayError(f"longer than {MAX_TOLERATION_CHARS} characters")
    rest, colon, effect = text.rpartition(":") if ":" in text else (text, "", "")
    if colon and effect not in EFFECTS:
        raise ReplayError(f"effect must be one of {', '.join(EFFECTS)}, got {effect!r}")
    if rest == "*":
        return Toleration("", EXISTS, "", effect)
    for sign, operator in (("<", LESS_THAN), (">", GREATER_THAN)):
        if sign in rest:
            key, _, bound = rest.partition(sign)
            _check_key(key)
            if _int64(bound) is None:
                raise ReplayError(f"{bound!r} is not an integer (Lt and Gt compare integers)")
            return Toleration(key, operator, bound, effect)
    key, equals, value = rest.partition("=")
    _check_key(key)
    if not _TOLERATION_VALUE.fullmatch(value):
        raise ReplayError(f"{value!r} is not a taint value (a Kubernetes label value)")
    return Toleration(key, EQUAL if equals else EXISTS, value, effect)


def _check_key(key: str) -> None:
    """``ReplayError`` unless ``key`` is a taint key (a Kubernetes qualified name)."""
    if not _TOLERATION_KEY.fullmatch(key):
        raise ReplayError(f"{key!r} is not a taint key (a Kubernetes qualified name)")


@dataclass(frozen=True, slots=True)
class PendingPod:
    """A pod waiting for GPUs; ``product`` "" means any GPU type will do.

    ``tolerations`` None: not known (kube-state-metrics exports none), so every taint
    is taken as tolerated (module docstring); () : the pod tolerates nothing.

    ``selector``: its nodeSelector's other pairs (a pool, ``nvidia.com/gpu.family``), key
    in KSM's spelling and value, sorted: only nodes whose labels hold every pair suit it
    (``selects``), as kube-scheduler's NodeAffinity filter requires. ``node_selector``:
    every such pair the pod selects, of which ``kube_state.ClusterQueue`` keeps in
    ``selector`` those whose key some node's labels show (a key no node shows is most
    likely not exported); () : ``selector`` is taken as given.

    ``excluded_nodes``: nodes it is not placed on, whatever they offer. Not read from
    the cluster: ``pending.predict_queue`` sets it for a pod that has fit free GPUs on
    those nodes past a grace without being bound there (it waits for something there
    the replay does not model, CPU or memory, say), so the replay starts it on the other
    nodes only.

    ``largest_container_units``: the largest request one of its containers makes (app or
    init), which the device plugin's ``failRequestsGreaterThanOne`` holds to one
    time-sliced replica (it checks each container, not the pod: ``_pools``); 0 when not
    read, taken as ``units`` (a pod of one container).

    ``gated``: its scheduling gates (``spec.schedulingGates``: Kueue's
    ``kueue.x-k8s.io/admission`` for a plain pod, a controller's own) are not all
    removed yet, as kube-state-metrics shows (``kube_state``). kube-scheduler does not
    try such a pod (its PreEnqueue check keeps it out of the queue), so it takes no GPU
    until whatever holds the gate lifts it: ``pending.predict`` replays it not, and
    publishes it ``gated``, without a start.
    """

    namespace: str
    pod: str
    resource: str
    units: int
    created: float
    priority: int = 0
    product: str = ""
    tolerations: tuple[Toleration, ...] | None = None
    selector: Selector = ()
    node_selector: Selector = ()
    uid: str = ""  # its Kubernetes UID ("" when not read), as ``Holder.uid``
    excluded_nodes: frozenset[str] = frozenset()
    gated: bool = False
    largest_container_units: int = 0


@dataclass(frozen=True, slots=True)
class Request:
    """A request made now: ``units`` of ``resource`` on a ``product`` GPU.

    ``selector`` and ``excluded_nodes`` (class constants, not fields): a request selects
    no node label and no node is closed to it alone, so the replay reads a pending
    pod's, a request's and an arrival's alike, without telling them apart."""

    product: str
    resource: str
    units: int
    priority: int = 0
    selector: ClassVar[Selector] = ()
    excluded_nodes: ClassVar[frozenset[str]] = frozenset()


@dataclass(frozen=True, slots=True)
class Arrival:
    """New pods of one shape arriving at ``rate_per_second`` (measured on recent pods).

    Why: a pod waiting for a whole node loses every single GPU that frees to pods
    created after it that fit at once; without arrivals the replay would start it
    as soon as the queue ahead of it drains.

    ``product``: the GPU type the recent pods of this shape selected ("" any), as for a
    ``PendingPod``: on a cluster of several types, A100 pods arriving take no H100 GPU
    from the H100 pods waiting.

    ``tolerations``: what the recent pods of this shape tolerated; they land only on
    nodes whose taints that tolerates, as those pods could. () (the default): they
    tolerate nothing, so only untainted nodes; None: not known (the pods they were
    measured on showed no toleration series), every taint passes, as for a
    ``PendingPod``. So pods arriving from outside a team's tainted pool take none of
    its GPUs from the pods waiting for it.

    ``priority``: the recent pods' priority (their class's value). A pod arriving joins
    the queue behind the waiting pods of its priority and above, ahead of those below,
    as kube-scheduler's queue sorts by priority before creation time: priority-0 pods
    arriving while a backfill pod (a negative priority) waits take the GPUs that free
    before it does.

    ``selector``, ``node_selector``: the recent pods' other nodeSelector pairs (a pool,
    ``kubernetes.io/hostname``), as for a ``PendingPod``: they land only on nodes whose
    labels hold every pair of ``selector`` (``selects``), which ``kube_state.ClusterQueue``
    keeps from ``node_selector`` (every pair those pods selected) for the keys some
    node's labels show. So pods arriving pinned to team a's pool take none of the GPUs
    that free in team b's, which a team-b pod waits for.
    """

    resource: str
    units: int
    rate_per_second: float
    product: str = ""
    tolerations: tuple[Toleration, ...] | None = ()
    priority: int = 0
    selector: Selector = ()
    node_selector: Selector = ()


@dataclass(frozen=True, slots=True)
class StartPrediction:
    """Start of one pending pod or request: P10/P50/P90 timestamps or why there is none.

    ``starts`` holds only finite values: a quantile past the horizon is ``math.inf``
    and ``status`` says ``beyond_horizon`` when the median is. ``started_share``: the
    share of samples in which it started within the horizon.
    """

    status: str
    starts: tuple[float, float, float] | None
    started_share: float


@dataclass(frozen=True)
class ReplayResult:
    """Predictions per pending pod and per request.

    ``pending``: one per pod of ``replay``'s ``pending``, in that order. ``pods``: the
    same by (namespace, pod); where two pods share a name (one re-created while KSM
    still shows the other), the newest's (``newest_by_name``, the rule
    ``pending.predict`` publishes by).
    """

    pods: Mapping[tuple[str, str], StartPrediction] = field(default_factory=dict)
    requests: Mapping[Request, StartPrediction] = field(default_factory=dict)
    n_samples: int = 0
    pending: tuple[StartPrediction, ...] = ()


# --------------------------------------------------------------------- sampling


def quantile_draw(q: tuple[float, float, float], u: float) -> float:
    """The value at probability ``u`` of the distribution with P10/P50/P90 ``q``.

    Linear between the three quantiles, extended with the slope of the nearest
    segment below P10 and above P90 (never below 0 seconds of remaining time is
    the caller's business).
    """
    p10, p50, p90 = q
    if u <= 0.5:
        return p50 - (p50 - p10) * (0.5 - u) / 0.4
    return p50 + (p90 - p50) * (u - 0.5) / 0.4


def quantile_cdf(q: tuple[float, float, float], x: float) -> float:
    """The probability that the distribution ``quantile_draw`` draws from (P10/P50/P90
    ``q``, u in [0, 1]) is at most ``x``: its quantile function inverted, 0 below its
    support and 1 above it. A half of no spread (P10 = P50, P50 = P90) holds its
    probability at P50."""
    p10, p50, p90 = q
    if x < p50:
        if not p50 > p10:
            return 0.0
        return max(0.0, 0.5 - 0.4 * (p50 - x) / (p50 - p10))
    if not p90 > p50:
        return 1.0
    return min(1.0, 0.5 + 0.4 * (x - p50) / (p90 - p50))


# a forecast whose probability of ending after now is below this has nothing to draw a
# running holder's end from: it is past its whole forecast (``end_after``)
_LEFT_AFTER_NOW = 1e-9


def end_after(q: tuple[float, float, float], now: float, u: float) -> float | None:
    """A running holder's end at probability ``u`` of its forecast ``q`` (P10/P50/P90)
    given that it ends after ``now``: ``quantile_draw`` at ``F(now) + (1 - F(now)) u``,
    ``F`` being ``quantile_cdf``. None when the forecast leaves no probability after now
    (the holder has outrun its whole forecast).

    Why conditioned: the holder is running at ``now``, so every end the forecast puts
    before now is wrong. Drawn from the whole forecast and then clamped to now, a job
    past its P50 freed its GPUs "now" in half the samples or more, so the pod behind it
    was predicted to start now (every cycle, past the forecast's P90), which kept
    ``GpuEtaPodPendingNoStart`` quiet and had the spawn page say "free now".
    """
    left = 1.0 - quantile_cdf(q, now)
    if left < _LEFT_AFTER_NOW:
        return None
    return max(now, quantile_draw(q, 1.0 - left + left * u))


# the most a pod is taken to linger after its run (``linger_rest``): past it the service
# stops watching the pod as in its release lag (an outlier; ``release_lags`` takes it
# from here, as this module, which ``top`` imports, needs nothing but the standard
# library: no numpy without the forecaster extra)
MAX_LINGER_SECONDS = 3600.0


def linger_rest(lingered: float, u: float) -> float:
    """The seconds left, at probability ``u`` in [0, 1), of a release lag that has
    lasted ``lingered`` seconds and is longer than every lag observed (or none was):
    ``lingered * u / (1 - u)``, the survival ``P(rest > x) = lingered / (lingered + x)``,
    at most what keeps the whole lag within ``MAX_LINGER_SECONDS``.

    Why this one: nothing observed says how much longer such a pod holds its GPUs, only
    that it has held them ``lingered`` seconds. Taking no time scale as likelier than
    another (a scale-invariant prior; Gott's "delta t" argument, 1993), the rest is as
    likely shorter as longer than what has passed: its median is ``lingered``, half of it
    within a third to three times that. So a pod 30 s past every lag seen frees in about
    30 s more, not a whole run later (the history's durations say how long runs last,
    not how long a finished one's pod lingers), and not now either (it is still seen
    holding). Pure."""
    rest = lingered * u / (1.0 - u) if u < 1.0 else math.inf
    return min(rest, max(0.0, MAX_LINGER_SECONDS - lingered))


class _Durations:
    """Finished runs' durations, drawn from conditioned on a minimum age, and the release
    lags observed after them (``release``, ``release_after``)."""

    def __init__(self, durations: Sequence[float], release_seconds: Sequence[float] = ()) -> None:
        self.sorted = sorted(d for d in durations if d > 0 and math.isfinite(d))
        self.release_seconds = tuple(release_seconds)
        self._release_sorted = sorted(self.release_seconds)

    def release(self, rng: random.Random) -> float:
        """Seconds from a run's end to its pod's GPUs being free, drawn from those
        observed (``replay``'s ``release_seconds``); 0 and no draw when none was."""
        lags = self.release_seconds
        return lags[int(rng.random() * len(lags))] if lags else 0.0

    def release_after(self, rng: random.Random, lingered: float) -> float:
        """A release lag longer than ``lingered`` (a pod still holding that long after
        its run: ``Holder.run_ended``), drawn from those observed that are; when none is
        (or none was observed), ``lingered`` plus ``linger_rest``. One draw either way."""
        lingered = max(0.0, lingered)
        longer = _longer_than(self._release_sorted, lingered, rng)
        return longer if longer is not None else lingered + linger_rest(lingered, rng.random())

    def draw(self, rng: random.Random, older_than: float = 0.0) -> float:
        """A duration longer than ``older_than``; inf when none is (or no history)."""
        longer = _longer_than(self.sorted, older_than, rng)
        return math.inf if longer is None else longer


def _longer_than(ascending: Sequence[float], bound: float, rng: random.Random) -> float | None:
    """One of ``ascending``'s values above ``bound``, each as likely (one draw); None
    and no draw when none is above it."""
    lo = bisect.bisect_right(ascending, bound)
    if lo >= len(ascending):
        return None
    return ascending[lo + int(rng.random() * (len(ascending) - lo))]


# --------------------------------------------------------------------- the replay


def queue_key(pod: PendingPod) -> tuple[int, float, str, str]:
    """The scheduler's order: higher priority first, then older first."""
    return (-pod.priority, pod.created, pod.namespace, pod.pod)


def newest_by_name(pods: Sequence[PendingPod]) -> dict[tuple[str, str], int]:
    """Per (namespace, pod), the index in ``pods`` of the pod that stands for the name:
    the newest (latest ``created``; of equally new ones, the later in queue order).

    Why: a pod deleted and created again under its name (a StatefulSet's, a notebook's)
    while KSM still shows the old one is two pods in the queue, both replayed, but one
    name to publish, and the pod Kubernetes has now is the newest. The names come in the
    queue order of their first pod.
    """
    newest: dict[tuple[str, str], int] = {}
    for i in sorted(range(len(pods)), key=lambda i: queue_key(pods[i])):
        key = (pods[i].namespace, pods[i].pod)
        kept = newest.get(key)
        if kept is None or pods[i].created >= pods[kept].created:
            newest[key] = i
    return newest


def policy_taints(node: Node) -> tuple[Taint, ...]:
    """The taints of ``node`` that keep off pods not tolerating them: effect
    ``NoSchedule`` or ``NoExecute``, and not one Kubernetes sets from the node's state
    (``NODE_STATE_TAINT_PREFIXES``; cordon and not-ready are ``Node.schedulable``) nor
    an autoscaler's on a node it removes (``REMOVAL_TAINT_KEYS``: ``leaving``)."""
    return tuple(
        t
        for t in node.taints
        if t[2] in BLOCKING_EFFECTS
        and not t[0].startswith(NODE_STATE_TAINT_PREFIXES)
        and t[0] not in REMOVAL_TAINT_KEYS
    )


def leaving(taints: Sequence[Taint]) -> bool:
    """Whether ``taints`` mark a node an autoscaler is removing (``REMOVAL_TAINT_KEYS``,
    blocking): it takes no new pod while it goes, like a cordoned node, and a pod only
    it could hold waits for a node rather than for a toleration (``no_schedulable_node``,
    not ``never_fits``, which a few cycles of a node's removal used to show)."""
    return any(t[0] in REMOVAL_TAINT_KEYS and t[2] in BLOCKING_EFFECTS for t in taints)


def pressure_taints(taints: Sequence[Taint]) -> tuple[Taint, ...]:
    """The blocking ones of ``taints`` Kubernetes or the cloud provider set from a node's
    state other than cordon and not-ready (``SPEC_STATE_TAINT_KEYS``, read from the
    node's spec and Ready condition): ``memory-pressure``, ``disk-pressure``,
    ``pid-pressure``, ``network-unavailable``, ``out-of-service``, the cloud provider's
    ``uninitialized`` and ``shutdown``.

    Why: kube-scheduler filters on these taints (it reads taints, not conditions), so
    while one lasts the node takes no new pod that does not tolerate it. They are
    checked against each pod's tolerations (``_open_to``), not closing the node to
    all: where the PodTolerationRestriction admission plugin is on, every pod of QoS
    class Burstable or Guaranteed (most training pods) carries a ``memory-pressure``
    toleration, which kube-state-metrics exports, and kube-scheduler places it on a
    node under memory pressure. A pod kept off only by them waits for the node
    (``no_schedulable_node``), since the state is transient, not a policy a toleration
    would answer (``never_fits``)."""
    return tuple(
        t
        for t in taints
        if t[2] in BLOCKING_EFFECTS
        and t[0].startswith(NODE_STATE_TAINT_PREFIXES)
        and t[0] not in SPEC_STATE_TAINT_KEYS
    )


def tolerated(node: Node, tolerations: Sequence[Toleration] | None) -> bool:
    """Whether a pod with ``tolerations`` may land on ``node`` as far as taints go
    (None: tolerations unknown, every taint passes)."""
    if tolerations is None or not node.taints:
        return True
    return _tolerates_all(tolerations, policy_taints(node))


def _tolerates_all(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    """Every one of ``taints`` is tolerated by one of ``tolerations``."""
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints)


def selects(node: Node, selector: Selector) -> bool:
    """``node``'s labels hold every (key, value) of ``selector``; a node whose labels are
    not known (``Node.labels`` None) passes, as one of unknown product does not fail."""
    labels = node.labels
    return labels is None or all(labels.get(k) == v for k, v in selector)


TypeKey = tuple[str, str]  # (resource, GPU product)


@dataclass(frozen=True)
class TypedOffers:
    """What the nodes of known type offer (``typed_offers``).

    ``keys``: each (resource, GPU type) some node of known type (``Node.product`` set)
    has units of: the requests made now (``default_requests``). ``from_model``: those
    of nodes typed from the exporter's model (``Node.product_from_model``), which offer
    the label's shared and MIG spellings of their type too (``product_spellings``)."""

    keys: frozenset[TypeKey]
    from_model: frozenset[TypeKey]

    def offer(self, resource: str, product: str) -> bool:
        """Whether some node of known type may take a pod selecting ``product``: in
        its own spelling or, typed from the model, in a shared or MIG one. Why: a node
        of unknown type takes a pod only when none does (``_offers``); checked against
        ``keys`` alone, a pod selecting ``Tesla-T4-SHARED`` was predicted to start
        "now" on a typeless node though a T4 node typed from the model offers it."""
        return (resource, product) in self.keys or any(
            r == resource and product_spellings(p, product) for r, p in self.from_model
        )


def typed_offers(nodes: Sequence[Node]) -> TypedOffers:
    """What the nodes of known type have units of (``TypedOffers``): the types a pod
    may be placed on knowingly."""
    keys = [
        ((r, n.product), n.product_from_model)
        for n in nodes
        if n.product
        for r, v in n.allocatable.items()
        if v > 0
    ]
    return TypedOffers(frozenset(k for k, _ in keys), frozenset(k for k, m in keys if m))


def _offers(
    node: Node, resource: str, product: str, selector: Selector, typed: TypedOffers
) -> bool:
    """``node`` has units of ``resource``, may be of ``product`` ("": any) and its labels
    hold ``selector``; ``typed`` is ``typed_offers`` of the cluster's nodes.

    A node whose type is not known (``Node.product`` "") may be of ``product`` only when
    no node of known type offers it (``typed``, in any spelling it takes:
    ``TypedOffers.offer``): then it is the pod's only candidate (a
    new GPU node has no type until its label is exported or gpu-eta's exporter on it has
    been read, and the pod would be ``never_fits`` meanwhile, a verdict that tells the
    user to change the request). Where the type is offered by known nodes, a typeless
    node does not take the pod: its type may stay unknown for good (a pool without
    gpu-eta's exporter and without the label allowlist), and taken as every type it
    would predict each typed pod to start "now" on GPUs kube-scheduler never gives it.
    A node typed from the exporter's model (``Node.product_from_model``) offers the
    label's shared and MIG spellings too (``product_spellings``)."""
    return (
        node.allocatable.get(resource, 0) > 0
        and (
            not product
            or node.product == product
            or (not node.product and not typed.offer(resource, product))
            or (node.product_from_model and product_spellings(node.product, product))
        )
        and (not selector or selects(node, selector))
    )


def product_spellings(node_product: str, product: str) -> bool:
    """Whether ``product``, a pod's ``nvidia.com/gpu.product`` selector, is a label GPU
    feature discovery writes for GPUs of ``node_product`` (its spelling of the model)
    when they are shared: ``<model>-SHARED`` for a time-sliced ``nvidia.com/gpu`` not
    renamed, ``<model>-MIG-<profile>`` (``-SHARED`` after it when time-sliced too) on a
    MIG node under the single strategy (the device plugin's ``internal/lm/resource.go``,
    ``productLabel``: the parts joined by hyphens, ``SHARED`` last).

    Why: a node whose type is spelt from the model gpu-eta's exporter reports
    (``Node.product_from_model``) carries no sign of either, and a pod selecting the
    label its node really has was ``never_fits``, though it starts there."""
    return product == f"{node_product}-SHARED" or (
        product.startswith(f"{node_product}-MIG-") and len(product) > len(node_product) + 5
    )


Pool = tuple[str, bool]  # (resource, time-sliced replicas)


def _pools(
    resource: str, units: int, one_replica_per_pod: bool = False, largest: int = 0
) -> tuple[Pool, ...]:
    """Where a pod asking ``units`` of ``resource`` draws them from, in that order: whole
    devices, then time-sliced replicas, unless the device plugin gives a container at
    most one replica (``one_replica_per_pod``, its ``failRequestsGreaterThanOne``) and
    the pod's largest container (``largest``; 0: not known, ``units``) asks more. Why
    the container: the plugin's ``Allocate`` refuses a ``ContainerRequest`` of more than
    one device, and the kubelet sends one per container, so two containers asking one
    replica each start. A pod takes its units from one pool: the plugin shares every
    device of a resource on a node or none, so a node has units of one kind."""
    if not one_replica_per_pod or (largest or units) <= 1:
        return ((resource, False), (resource, True))
    return ((resource, False),)


def container_units(item: PendingPod | Request | Arrival) -> int:
    """The largest request one container of ``item`` makes, for ``_pools``: a pending
    pod's as read (``PendingPod.largest_container_units``), else its units (a request
    made now, a pod arriving later, a pod whose containers were not read: one
    container)."""
    if isinstance(item, PendingPod) and item.largest_container_units > 0:
        return item.largest_container_units
    return item.units


def _holds(node: Node, units: int, pools: Sequence[Pool]) -> bool:
    """``node`` could hold ``units`` from one of ``pools`` (``_pools``) with nothing
    else on it."""
    return any(
        (node.shared.get(resource, 0) if replicas else node.whole(resource)) >= units
        for resource, replicas in pools
    )


def request_tolerations(
    nodes: Sequence[Node], resource: str, configured: Sequence[Toleration] | None = None
) -> tuple[Toleration, ...]:
    """What a request made now for ``resource`` tolerates: ``configured`` when given
    (``--pending.request-toleration``: the site's own convention, whatever the
    resource), else what Kubernetes' ``ExtendedResourceToleration`` admission plugin
    adds to a pod asking for an extended resource, ``Exists`` on the taint named after
    it with ``NoSchedule`` (``nvidia.com/gpu`` for ``nvidia_com_gpu``: the taint keys on
    ``nodes`` whose KSM-sanitised form is ``resource``). Nothing else: a request has no
    tolerations of its own. The plugin is off by default upstream (GKE turns it on), so
    the default is a guess that fails on clusters tainting GPU pools otherwise."""
    if configured is not None:
        return tuple(configured)
    keys = {t[0] for n in nodes for t in n.taints if ksm_label(t[0]) == resource}
    return tuple(Toleration(k, EXISTS, "", NO_SCHEDULE) for k in sorted(keys))


def _suitable(
    node: Node,
    resource: str,
    product: str,
    tolerations: Sequence[Toleration] | None,
    selector: Selector,
    typed: TypedOffers,
) -> bool:
    return _offers(node, resource, product, selector, typed) and tolerated(node, tolerations)


def _open_to(node: Node, tolerations: Sequence[Toleration] | None) -> bool:
    """Whether ``node`` takes a new pod with ``tolerations`` now: schedulable, and each
    of its pressure taints (``pressure_taints``) tolerated.

    Tolerations unknown (None: ``kube_pod_tolerations`` not exported for the pod) pass
    the policy taints (``tolerated``) but not these: the GPU pools' policy taints come
    with tolerations most pods are given, the node-state ones are tolerated by
    DaemonSet pods and seldom by others, so a pod of unknown tolerations waits for the
    node rather than be predicted to start where kube-scheduler keeps it off."""
    if not node.schedulable:
        return False
    if not node.taints:
        return True
    pressure = pressure_taints(node.taints)
    if tolerations is None:
        return not pressure
    return _tolerates_all(tolerations, pressure)


def _placeable(
    node: Node,
    resource: str,
    product: str,
    tolerations: Sequence[Toleration] | None,
    selector: Selector,
    typed: TypedOffers,
) -> bool:
    """Whether a new pod of this resource, product, tolerations and node selector may
    land on ``node`` now (``typed``: ``typed_offers`` of the cluster's nodes)."""
    return _open_to(node, tolerations) and _suitable(
        node, resource, product, tolerations, selector, typed
    )


def fits_somewhere(
    nodes: Sequence[Node],
    resource: str,
    product: str,
    units: int,
    tolerations: Sequence[Toleration] | None = None,
    one_replica_per_pod: bool = False,
    selector: Selector = (),
    largest: int = 0,
) -> bool:
    """True when some suitable node (of the type, whose taints are tolerated, whose
    labels hold ``selector``) could hold ``units`` with nothing else on it (``largest``:
    its largest container's, as ``_pools`` takes it)."""
    pools = _pools(resource, units, one_replica_per_pod, largest)
    typed = typed_offers(nodes)
    return any(
        _suitable(n, resource, product, tolerations, selector, typed) and _holds(n, units, pools)
        for n in nodes
    )


def _tolerations_of(
    item: PendingPod | Request,
    nodes: Sequence[Node],
    configured: Sequence[Toleration] | None = None,
) -> tuple[Toleration, ...] | None:
    if isinstance(item, Request):
        return request_tolerations(nodes, item.resource, configured)
    return item.tolerations


# resource, product, tolerations, node selector, nodes excluded
SuitableKey = tuple[str, str, tuple[Toleration, ...] | None, Selector, frozenset[str]]


class _NodeLists:
    """Which nodes suit pods of one (resource, product, tolerations, node selector), computed once per
    distinct key rather than per pod and node: pods of a queue share a few keys, and a
    cluster of thousands of tainted nodes made the per-pod checks most of a replay's
    setup. Each node's blocking taints (``policy_taints``) are read once too.

    The replay reads ``one_replica_per_pod`` here only (``pools``, which the fit checks
    and the sweep's ``_QueuePlan`` take), so no later step carries the flag."""

    def __init__(self, nodes: Sequence[Node], one_replica_per_pod: bool = False) -> None:
        self.nodes = nodes
        self._one_replica_per_pod = one_replica_per_pod
        self._blocking = [policy_taints(n) if n.taints else () for n in nodes]
        self.typed = typed_offers(nodes)
        self._lists: dict[SuitableKey, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._fits: dict[tuple[tuple[int, ...], str, int, int], bool] = {}

    def of(
        self,
        resource: str,
        product: str,
        tolerations: Sequence[Toleration] | None,
        selector: Selector = (),
        excluded: frozenset[str] = frozenset(),
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(the suitable nodes' indices, of which those that take new pods now), each
        in ``nodes`` order (as ``_suitable`` and ``_placeable`` would select them), the
        nodes named in ``excluded`` (``PendingPod.excluded_nodes``) left out of both."""
        tols = None if tolerations is None else tuple(tolerations)
        key = (resource, product, tols, selector, excluded)
        got = self._lists.get(key)
        if got is None:
            suitable = tuple(
                k
                for k, n in enumerate(self.nodes)
                if _offers(n, resource, product, selector, self.typed)
                and (tols is None or _tolerates_all(tols, self._blocking[k]))
                and n.name not in excluded
            )
            got = (suitable, tuple(k for k in suitable if _open_to(self.nodes[k], tols)))
            self._lists[key] = got
        return got

    def pools(self, resource: str, units: int, largest: int = 0) -> tuple[Pool, ...]:
        """Where a pod asking ``units`` of ``resource``, ``largest`` of them in one
        container, takes them from (``_pools``)."""
        return _pools(resource, units, self._one_replica_per_pod, largest)

    def fits(self, indices: tuple[int, ...], resource: str, units: int, largest: int = 0) -> bool:
        """``fits_somewhere`` over the nodes at ``indices`` (already suitable)."""
        key = (indices, resource, units, largest)
        got = self._fits.get(key)
        if got is None:
            pools = self.pools(resource, units, largest)
            got = any(_holds(self.nodes[k], units, pools) for k in indices)
            self._fits[key] = got
        return got


def default_requests(
    nodes: Sequence[Node],
    sizes: Sequence[int] = REQUEST_SIZES,
    tolerations: Sequence[Toleration] | None = None,
    one_replica_per_pod: bool = False,
) -> list[Request]:
    """One request per (GPU product, resource) seen on the nodes and per size that fits
    a node the request may use (``request_tolerations``, ``tolerations`` the configured
    ones; ``one_replica_per_pod`` as in ``replay``)."""
    configured = tolerations
    lists = _NodeLists(nodes, one_replica_per_pod)
    out = []
    for resource, product in sorted(lists.typed.keys, key=lambda k: (k[1], k[0])):
        suitable, _ = lists.of(resource, product, request_tolerations(nodes, resource, configured))
        for size in sizes:
            if lists.fits(suitable, resource, size):
                out.append(Request(product, resource, size))
    return out


def replay(
    nodes: Sequence[Node],
    holders: Sequence[Holder],
    pending: Sequence[PendingPod],
    now: float,
    durations: Sequence[float] = (),
    requests: Sequence[Request] = (),
    arrivals: Sequence[Arrival] = (),
    max_arrivals: int = 200,
    placement: str = "spread",
    n_samples: int = 100,
    horizon_seconds: float = 7 * 86400.0,
    random_state: int | None = 0,
    request_tolerations: Sequence[Toleration] | None = None,
    one_replica_per_pod: bool = False,
    release_seconds: Sequence[float] = (),
) -> ReplayResult:
    """Predicted starts of ``pending`` and ``requests`` (see the module docstring);
    ``request_tolerations``: what a request tolerates, when not the default guess
    (``request_tolerations``, the function); ``one_replica_per_pod``: the device plugin
    refuses a container more than one time-sliced replica (its ``failRequestsGreaterThanOne``,
    off by default; checked per container: ``_pools``), so a pod of such a container
    fits only whole devices; ``release_seconds``: the lags observed from a finished run's
    end to its pod's GPUs being free (step 5 of the module docstring), none by default."""
    if placement not in PLACEMENTS:
        raise ReplayError(f"placement must be one of {PLACEMENTS}, got {placement!r}")
    if n_samples < 1:
        raise ReplayError(f"n_samples must be >= 1, got {n_samples}")
    if not horizon_seconds > 0:
        raise ReplayError(f"horizon_seconds must be > 0, got {horizon_seconds}")
    if any(not (a.rate_per_second >= 0 and math.isfinite(a.rate_per_second)) for a in arrivals):
        raise ReplayError("arrival rates must be finite and >= 0")
    if any(not (0 <= lag < math.inf) for lag in release_seconds):
        raise ReplayError("release lags must be finite and >= 0 seconds")
    rng = random.Random(random_state)
    hist = _Durations(durations, release_seconds)
    node_index = {n.name: i for i, n in enumerate(nodes)}
    ordered = sorted(range(len(pending)), key=lambda i: queue_key(pending[i]))
    # requests sit behind every pending pod of their priority (created "now"); each item
    # with its index in ``pending`` (-1: a request)
    queue: list[tuple[tuple, int, PendingPod | Request, int]] = []
    for rank, i in enumerate(ordered):
        p = pending[i]
        queue.append(((-p.priority, p.created), rank, p, i))
    for j, r in enumerate(requests):
        queue.append(((-r.priority, math.inf), len(ordered) + j, r, -1))
    queue.sort(key=lambda e: (e[0], e[1]))
    items = [e[2] for e in queue]
    origin = [e[3] for e in queue]
    # which nodes suit each item: once per distinct (resource, product, tolerations), a
    # request's tolerations once per resource
    lists = _NodeLists(nodes, one_replica_per_pod)
    by_resource: dict[str, tuple[Toleration, ...] | None] = {}
    fit_ok: list[bool] = []
    # fits a node that takes new pods now: only these wait for GPUs (the others wait for
    # a node to be uncordoned or Ready again, which no replay can time)
    place_ok: list[bool] = []
    shapes = _Shapes()
    candidates: list[Sequence[int]] = []
    shape_of: list[Shape] = []
    for it in items:
        if isinstance(it, Request):
            if it.resource not in by_resource:
                by_resource[it.resource] = _tolerations_of(it, nodes, request_tolerations)
            tol = by_resource[it.resource]
        else:
            tol = it.tolerations
        suitable, cand = lists.of(it.resource, it.product, tol, it.selector, it.excluded_nodes)
        largest = container_units(it)
        fit_ok.append(lists.fits(suitable, it.resource, it.units, largest))
        place_ok.append(lists.fits(cand, it.resource, it.units, largest))
        candidates.append(cand)
        shape_of.append(shapes.of(it.resource, it.units, cand, largest))
    horizon = now + horizon_seconds
    # arrivals land where the recent pods they were measured on could (their GPU type,
    # node selector and tolerations)
    future: list[ArrivalShape] = []
    for a in arrivals:
        _, cand = lists.of(a.resource, a.product, a.tolerations, a.selector)
        if a.rate_per_second > 0 and lists.fits(cand, a.resource, a.units, a.units):
            future.append((a, cand, shapes.of(a.resource, a.units, cand, a.units)))
    plan = _queue_plan(items, candidates, shape_of, place_ok, future, lists)
    starts: list[list[float]] = [[] for _ in items]
    for _ in range(n_samples):
        for k, t in enumerate(
            _one_sample(
                nodes, node_index, holders, plan, max_arrivals, placement, now, horizon, hist, rng
            )
        ):
            starts[k].append(t)
    reqs: dict[Request, StartPrediction] = {}
    by_input: list[StartPrediction] = [StartPrediction(NEVER_FITS, None, 0.0)] * len(pending)
    for k, it in enumerate(items):
        pred = _summarise(starts[k], fit_ok[k], place_ok[k])
        if isinstance(it, Request):
            reqs[it] = pred
        else:
            by_input[origin[k]] = pred
    pods = {key: by_input[i] for key, i in newest_by_name(pending).items()}
    return ReplayResult(pods, reqs, n_samples, tuple(by_input))


# resource, units, id of the nodes it may land on, its largest container's units
Shape = tuple[str, int, int, int]


class _Shapes:
    """Pods of one shape (resource, units, the nodes they may land on, their largest
    container's units: ``_pools``) fit or fail alike in a sweep: one id per distinct
    node list (type and tolerations make them)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, ...], int] = {}
        self._by_object: dict[int, tuple[tuple[int, ...], int]] = {}

    def of(self, resource: str, units: int, candidates: Sequence[int], largest: int) -> Shape:
        # the same list object (``_NodeLists``) comes back for every pod of a key: its
        # id is looked up first, sparing a hash of thousands of node indices per pod
        known = self._by_object.get(id(candidates))
        if known is not None and known[0] is candidates:
            return (resource, units, known[1], largest)
        key = tuple(candidates)
        shape_id = self._ids.setdefault(key, len(self._ids))
        if isinstance(candidates, tuple):
            self._by_object[id(candidates)] = (candidates, shape_id)
        return (resource, units, shape_id, largest)


ArrivalShape = tuple[Arrival, Sequence[int], Shape]  # the nodes its pods may land on


@dataclass(frozen=True, slots=True)
class _QueuePlan:
    """The queue as every sample of a replay starts it (``_queue_plan``).

    Why apart: none of it depends on a sample's draws, so it is worked out once per
    replay rather than once for each of its ``n_samples`` samples.

    ``items``: the pending pods and requests in queue order, ``shapes`` the shape of
    each. ``waiting``: those that may start (a node open to new pods could hold them),
    in queue order; ``queues``: the same, one queue per shape. ``arrivals``: the shapes
    new pods arrive in (``Arrival``). ``nodes_of``, ``pools``: per shape of a waiting
    item or an arrival, the nodes (ascending) and the pools (``_pools``, in order) its
    pods take units from; ``node_sets``: those nodes as a set, by the node list's id
    (``Shape``'s third), for ``_Nearby``. ``by_node``: node → the shapes that may use
    it, to find the shapes worth trying again when the node's units free.
    """

    items: tuple[PendingPod | Request, ...]
    shapes: tuple[Shape, ...]
    waiting: tuple[int, ...]
    queues: Mapping[Shape, tuple[int, ...]]
    arrivals: tuple[ArrivalShape, ...]
    nodes_of: Mapping[Shape, Sequence[int]]
    pools: Mapping[Shape, tuple[Pool, ...]]
    node_sets: Mapping[int, frozenset[int]]
    by_node: Mapping[int, tuple[Shape, ...]]


def _queue_plan(
    items: Sequence[PendingPod | Request],
    candidates: Sequence[Sequence[int]],
    shapes: Sequence[Shape],
    place_ok: Sequence[bool],
    arrivals: Sequence[ArrivalShape],
    lists: _NodeLists,
) -> _QueuePlan:
    """The ``_QueuePlan`` of ``items`` (queue order), each with the nodes it may land on
    (``candidates``), its shape and whether it may start (``place_ok``), and of the
    ``arrivals``; ``lists`` says where each shape takes its units from."""
    waiting = tuple(i for i, ok in enumerate(place_ok) if ok)
    queues: dict[Shape, list[int]] = {}
    nodes_of: dict[Shape, Sequence[int]] = {}
    for i in waiting:
        queues.setdefault(shapes[i], []).append(i)
        nodes_of.setdefault(shapes[i], candidates[i])
    for _, cand, shape in arrivals:
        nodes_of.setdefault(shape, cand)
    by_node: dict[int, list[Shape]] = {}
    for shape, cand in nodes_of.items():
        for k in cand:
            by_node.setdefault(k, []).append(shape)
    return _QueuePlan(
        items=tuple(items),
        shapes=tuple(shapes),
        waiting=waiting,
        queues={shape: tuple(queue) for shape, queue in queues.items()},
        arrivals=tuple(arrivals),
        nodes_of=nodes_of,
        pools={shape: lists.pools(shape[0], shape[1], shape[3]) for shape in nodes_of},
        node_sets={shape[2]: frozenset(cand) for shape, cand in nodes_of.items()},
        by_node={k: tuple(v) for k, v in by_node.items()},
    )


def _summarise(samples: list[float], fits: bool, placeable: bool = True) -> StartPrediction:
    if not fits:
        return StartPrediction(NEVER_FITS, None, 0.0)
    if not placeable:
        return StartPrediction(NO_SCHEDULABLE_NODE, None, 0.0)
    samples.sort()
    n = len(samples)
    started = sum(1 for t in samples if math.isfinite(t)) / n
    q = tuple(_quantile(samples, p) for p in QUANTILES)
    if not math.isfinite(q[1]):
        return StartPrediction(BEYOND_HORIZON, None, started)
    return StartPrediction(PREDICTED, q, started)  # type: ignore[arg-type]


def _quantile(sorted_values: list[float], p: float) -> float:
    """Linear-interpolated quantile; inf when it falls among infinite values."""
    pos = p * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    a, b = sorted_values[lo], sorted_values[hi]
    if pos == lo:
        return a
    if math.isinf(b):
        return math.inf
    return a + (b - a) * (pos - lo)


Free = list[dict[tuple[str, bool], int]]  # per node: (resource, shared) → free units
Event = tuple[float, int, int, tuple[str, bool], int]  # time, seq, node, pool, units freed


def _running_now(
    nodes: Sequence[Node],
    node_index: Mapping[str, int],
    holders: Sequence[Holder],
    now: float,
    horizon: float,
    hist: _Durations,
    rng: random.Random,
) -> tuple[Free, list[Event]]:
    """The free units per node and pool once the holders are placed (``_free_now``), and
    when each holder's units free (drawn; past the horizon: never).

    The holders of one owner with one forecast (``Holder.owner``, the ``ends`` that
    ``pending.holder_ends`` lends a distributed job's workers from its rank 0) are one
    run: one quantile is drawn for it and every one of them ends then. Why: drawn apart,
    a pod waiting for all of a run's GPUs waited for the latest of their draws (the
    latest of 8 draws from a +1/+2/+3 h forecast is +2.65/+3.06/+3.22 h at P10/P50/P90),
    though the workers end together with their run. So does a run past its whole
    forecast: one end from the history of finished runs, not the latest of 8."""
    free = _free_now(nodes, node_index, holders)
    events: list[Event] = []
    run_draws: dict[tuple[str, tuple[str, str], tuple[float, float, float]], float] = {}
    # a run past its whole forecast: its end from the history, drawn for its first
    # worker (conditioned on that one's age) and shared by the others
    run_past: dict[tuple[str, tuple[str, str], tuple[float, float, float]], float] = {}
    for h in holders:
        k = node_index.get(h.node)
        if k is None or h.units <= 0:
            continue
        pool = (h.resource, h.shared)
        if h.run_ended is not None and h.ends_with_run is not False:
            # its run is over, its pod still holds: it frees a lag after the run's end
            # longer than it has lingered (``Holder.run_ended``), one draw
            end = h.run_ended + hist.release_after(rng, now - h.run_ended)
            _push_end(events, end, now, horizon, h, k, pool)
            continue
        age = max(0.0, now - h.started) if h.started is not None else 0.0
        # it runs now: its end is drawn from the part of its forecast after now, at its
        # run's draw (one per owner and forecast)
        end = None
        run = None if h.ends is None or h.owner is None else (h.namespace, h.owner, h.ends)
        if h.ends is not None:
            if run is None:
                u = rng.random()
            else:
                u = run_draws.get(run, -1.0)
                if u < 0:
                    u = run_draws[run] = rng.random()
            end = end_after(h.ends, now, u)
        if end is None and run is not None:  # a run past its whole forecast: one draw
            end = run_past.get(run)
            if end is None:
                end = run_past[run] = now + hist.draw(rng, age) - age
        elif end is None:  # no forecast, or past its whole forecast: the history's
            end = now + hist.draw(rng, age) - age
        elif h.ends_with_run is False:  # a notebook server: it outlives its run
            end = max(end, now + hist.draw(rng, age) - age)
        if h.ends_with_run is not False:  # its pod goes a release lag after its run
            end += hist.release(rng)
        _push_end(events, end, now, horizon, h, k, pool)
    return free, events


def _push_end(
    events: list[Event],
    end: float,
    now: float,
    horizon: float,
    h: Holder,
    k: int,
    pool: tuple[str, bool],
) -> None:
    """Queue the freeing of ``h``'s units (on node ``k``, from ``pool``) at ``end``, or
    by its deletion timestamp when that is earlier, never before ``now`` (a pod past its
    deletion timestamp frees its units now); not at all past the horizon."""
    if h.deletion_timestamp is not None:  # being deleted: gone by then at the latest
        end = min(end, h.deletion_timestamp)
    end = max(now, end)
    if end <= horizon:
        heapq.heappush(events, (end, len(events), k, pool, h.units))


def _free_now(
    nodes: Sequence[Node], node_index: Mapping[str, int], holders: Sequence[Holder]
) -> Free:
    """The free units per node and pool now: each node's whole devices and time-sliced
    replicas, less what every holder on it holds (no draw: a holder holds its units
    until it has ended, whatever its forecast says)."""
    free: Free = []
    for n in nodes:
        pools = {(r, False): n.whole(r) for r in n.allocatable}
        pools.update({(r, True): v for r, v in n.shared.items()})
        free.append(pools)
    for h in holders:
        k = node_index.get(h.node)
        if k is not None and h.units > 0:
            pool = (h.resource, h.shared)
            free[k][pool] = free[k].get(pool, 0) - h.units
    return free


def _one_sample(
    nodes: Sequence[Node],
    node_index: Mapping[str, int],
    holders: Sequence[Holder],
    plan: _QueuePlan,
    max_arrivals: int,
    placement: str,
    now: float,
    horizon: float,
    hist: _Durations,
    rng: random.Random,
) -> list[float]:
    """One draw of the future: the start timestamp of each of ``plan.items`` (inf: not
    within the horizon).

    At ``now`` and at every moment units free, every waiting pod is tried in queue
    order on every node it may use (``_choose``). Done literally that is most of a
    replay's time for a long queue, so a sweep tries only the pods that can start:

    - pods of one shape (resource, units, nodes it may use, largest container) fit or fail alike, so they
      wait in one queue per shape, and a shape's first pod that does not fit ends the
      shape's sweep (units only shrink during a sweep); its pods start in their order;
    - a pod that already failed (not ``fresh``: waiting since an earlier sweep) can only
      fit where units freed since (``changed``): elsewhere units only shrank. Its
      shape is tried in a sweep only when one of those nodes fits it (``_Nearby``);
    - the shapes tried are merged in queue order (``(-priority, index)``: items are in
      queue order, a pod arriving later joins behind the pods of its priority and above,
      ahead of those below).

    Every pod that starts does so at the same moment, on the same node and with the
    same draws as when every pod is tried on every node
    (``tests/forecaster/replay_reference.py``; the test compares both).
    """
    free, events = _running_now(nodes, node_index, holders, now, horizon, hist, rng)
    seq = len(events)
    n_items = len(plan.items)
    start = [math.inf] * n_items
    # every waiting pod, known ones first (index < n_items), then future ones (numbered
    # on from ``n_items`` as they arrive), in one queue per shape (each in queue order);
    # the first fresh index of a shape's queue (pods not tried yet: all at first, then
    # arrivals, always at its end)
    queues = {shape: deque(queue) for shape, queue in plan.queues.items()}
    fresh_from = {shape: queue[0] for shape, queue in plan.queues.items()}
    # each waiting pod's place in the queue: (-priority, index)
    order = [-it.priority for it in plan.items]

    def rank(i: int) -> tuple[int, int]:
        return order[i], i

    real_waiting = len(plan.waiting)
    total_rate = sum(a.rate_per_second for a, _, _ in plan.arrivals)
    next_arrival = now + rng.expovariate(total_rate) if total_rate > 0 else math.inf
    n_future = 0
    t = now
    changed: set[int] = set()
    nearby = _Nearby(plan.node_sets)
    while real_waiting:
        nearby.start(changed)
        # the shapes to try: those with a pod not tried yet, those that may use a node
        # whose units freed; each only when it fits somewhere now
        heads = []  # (index of the shape's first waiting pod, shape)
        maybe = set(fresh_from)
        for k in changed:
            maybe.update(plan.by_node.get(k, ()))
        for shape in maybe:
            queue = queues.get(shape)
            if not queue:
                continue
            nodes_now = plan.nodes_of[shape] if shape in fresh_from else nearby.of(shape[2])
            if _fits(free, nodes_now, plan.pools[shape], shape[1]):
                heads.append((rank(queue[0]), shape))
        heapq.heapify(heads)
        while heads:
            (_, i), shape = heapq.heappop(heads)
            fresh = i >= fresh_from.get(shape, math.inf)
            nodes_now = plan.nodes_of[shape] if fresh else nearby.of(shape[2])
            best, pool = _choose(free, nodes_now, plan.pools[shape], shape[1], placement, rng)
            if best < 0:
                continue  # nor will the shape's next pods in this sweep
            queue = queues[shape]
            queue.popleft()
            if queue:
                heapq.heappush(heads, (rank(queue[0]), shape))
            else:
                del queues[shape]
            if i < n_items:
                start[i] = t
                real_waiting -= 1
                if isinstance(plan.items[i], Request):
                    continue  # a request made now takes nothing from anyone
            free[best][pool] -= shape[1]
            end = t + hist.draw(rng) + hist.release(rng)
            if end <= horizon:
                heapq.heappush(events, (end, seq, best, pool, shape[1]))
                seq += 1
        fresh_from = {}
        changed = set()
        t = min(events[0][0] if events else math.inf, next_arrival)
        if t > horizon:
            break
        if next_arrival <= t:  # a new pod joins the queue behind those of its priority
            arrival, _, shape = _pick(plan.arrivals, rng.random() * total_rate)
            order.append(-arrival.priority)
            bisect.insort(queues.setdefault(shape, deque()), n_items + n_future, key=rank)
            fresh_from.setdefault(shape, n_items + n_future)
            n_future += 1
            next_arrival = t + rng.expovariate(total_rate)
            if n_future >= max_arrivals:
                next_arrival = math.inf
        while events and events[0][0] == t:
            _, _, k, pool, units = heapq.heappop(events)
            free[k][pool] = free[k].get(pool, 0) + units
            changed.add(k)
    return start


def _fits(free: Free, nodes: Sequence[int], pools: Sequence[Pool], units: int) -> bool:
    """Whether ``_choose`` would find a node among ``nodes`` (no draw)."""
    return any(free[k].get(pool, 0) >= units for pool in pools for k in nodes)


class _Nearby:
    """Where a pod that waited since the last sweep may start now: its candidate nodes
    among those whose GPUs just freed (``changed``; the others only lost units since it
    failed there), in node order, as ``_choose`` reads them.

    Why: filtering each pod's candidates (hundreds of nodes) against the few changed
    ones, for every pod at every event, is most of a long queue's replay
    (``bench/queue_replay_speed.py``). Pods of one shape share a candidate list, so the
    changed ones among them are found once per shape and sweep, from the few changed
    nodes rather than from the long list.
    """

    def __init__(self, members: Mapping[int, frozenset[int]]) -> None:
        self._members = members  # id of a node list (``Shape``'s third) → its nodes
        self._changed: Sequence[int] = ()
        self._found: dict[int, list[int]] = {}

    def start(self, changed: set[int]) -> None:
        """A new sweep, after the GPUs of ``changed`` nodes freed."""
        self._changed = sorted(changed)
        self._found = {}

    def of(self, nodes_id: int) -> list[int]:
        """The changed nodes among those of the list ``nodes_id``, ascending."""
        got = self._found.get(nodes_id)
        if got is None:
            members = self._members[nodes_id]
            got = self._found[nodes_id] = [k for k in self._changed if k in members]
        return got


def _pick(arrivals: Sequence[ArrivalShape], x: float) -> ArrivalShape:
    """The arrival shape at ``x`` in [0, total rate): shapes drawn in proportion to rate."""
    for entry in arrivals:
        x -= entry[0].rate_per_second
        if x < 0:
            return entry
    return arrivals[-1]


def _choose(
    free: Free,
    nodes: Sequence[int],
    pools: Sequence[Pool],
    units: int,
    placement: str,
    rng: random.Random,
) -> tuple[int, Pool]:
    """The node a pod lands on, and the pool it takes its units from: the first of
    ``pools`` (``_pools``: whole GPUs, then time-sliced replicas) with a node that fits.

    ``pack``: the fitting node with the fewest free units (bin-packing scoring);
    ``spread``: any fitting node, at random (kube-scheduler's default scoring weighs
    CPU and memory only, so GPU placement is as good as random). (-1, pool) when
    nothing fits.
    """
    for pool in pools:
        fitting = [k for k in nodes if free[k].get(pool, 0) >= units]
        if not fitting:
            continue
        if placement == "pack":
            return min(fitting, key=lambda k: free[k][pool]), pool
        return fitting[int(rng.random() * len(fitting))], pool
    return -1, pools[0]


# --------------------------------------------------------------------- the naive answer


def nodes_fitting_now(
    nodes: Sequence[Node],
    holders: Sequence[Holder],
    pod: PendingPod,
    now: float,
    one_replica_per_pod: bool = False,
) -> tuple[str, ...]:
    """The nodes ``pod`` could start on at ``now``, by the rules the replay places it by
    then: open to it (its GPU type, node selector and tolerations; schedulable, state
    taints tolerated) with enough units free in one of the pools it may take them from
    (``_pools``: whole devices, then time-sliced replicas), the units of every running
    pod held (``_free_now``) but those of a pod past its deletion timestamp (the replay
    frees them at ``now`` in every sample). ``one_replica_per_pod`` as in ``replay``.

    Why apart from the replay: whether GPUs are free now is a fact of the cluster as
    read, not a draw. Every sample of the replay frees the same units at ``now`` (a
    running pod's end is drawn after now, ``end_after``), but a sample also places the
    pods ahead in the queue, which says where this pod starts, not what is free.
    """
    lists = _NodeLists(nodes, one_replica_per_pod)
    _, fitting = _fitting_now(lists, holders, pod, now, pod.tolerations)
    return tuple(nodes[k].name for k in fitting)


def _fitting_now(
    lists: _NodeLists,
    holders: Sequence[Holder],
    pod: PendingPod | Request,
    now: float,
    tolerations: Sequence[Toleration] | None,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the indices of the nodes of ``lists`` open to ``pod`` with ``tolerations`` now,
    of which those it fits now), as ``nodes_fitting_now`` reads them."""
    _, open_nodes = lists.of(
        pod.resource, pod.product, tolerations, pod.selector, pod.excluded_nodes
    )
    holding = [h for h in holders if h.deletion_timestamp is None or h.deletion_timestamp > now]
    free = _free_now(lists.nodes, {n.name: k for k, n in enumerate(lists.nodes)}, holding)
    pools = lists.pools(pod.resource, pod.units, container_units(pod))
    return open_nodes, tuple(k for k in open_nodes if _fits(free, (k,), pools, pod.units))


def naive_start(
    nodes: Sequence[Node],
    holders: Sequence[Holder],
    pod: PendingPod | Request,
    now: float,
    request_tolerations: Sequence[Toleration] | None = None,
    one_replica_per_pod: bool = False,
) -> float:
    """The naive answer: "when the earliest running job on a suitable node ends" (its
    median end given that it runs now), or now if it fits now (``nodes_fitting_now``:
    the replay's own rule).

    The answer people give by hand from what gpu-eta shows, without the queue ahead;
    the bench compares the replay with it. A pod that outlives its run
    (``Holder.ends_with_run`` False: a notebook server) frees nothing at its run's end,
    as in the replay, so it counts as a holder without a forecast does. Why the same
    rule: the yardstick measures what the replay adds to the same reads (the queue),
    and which pods keep their GPUs is one of those reads. For the same reason a job's
    end is the median of its forecast's part after now (``end_after`` at 0.5, as the
    replay draws it: its P50 while that is well ahead), never "now" for a job still
    running past its P50, and a job past its whole forecast counts as one without a
    forecast. A pod whose run has ended (``Holder.run_ended``, in its release lag) frees
    its GPUs now: no lag is added to it, as none is to a job's forecast end. inf when no
    suitable node (of its type, taints tolerated, open) has a holder with a forecast of
    its own end left, a run ended or being deleted (gone by its deletion timestamp).
    """
    lists = _NodeLists(nodes, one_replica_per_pod)
    tolerations = _tolerations_of(pod, nodes, request_tolerations)
    open_nodes, fitting = _fitting_now(lists, holders, pod, now, tolerations)
    if fitting:
        return now
    names = {nodes[k].name for k in open_nodes}
    best = math.inf
    for h in holders:
        if h.node in names and h.resource == pod.resource:
            end = None
            if h.run_ended is not None and h.ends_with_run is not False:
                end = now  # its run has ended: no lag added, as to a job's forecast end
            elif h.ends is not None and h.ends_with_run is not False:
                end = end_after(h.ends, now, 0.5)  # its median end, given it runs now
            end = math.inf if end is None else end
            if h.deletion_timestamp is not None:
                end = min(end, h.deletion_timestamp)
            best = min(best, max(now, end))
    return best


# --------------------------------------------------------------------- calibration


class StartCalibrator:
    """Widens predicted start intervals to the coverage measured on pods that started.

    Why: the replay's spread comes from the running jobs' intervals and the history's
    durations; what it does not model (preemption, quotas, jobs slowing down when a
    time-sliced GPU gets busier) makes real starts fall outside P10–P90 more often than
    20 %. Conformal, online: each prediction of a pod that has since started gives the
    error ``(actual − P50)`` in units of the interval's half on that side
    (``P90 − P50`` above, ``P50 − P10`` below); the scale is the ``coverage`` quantile
    of those errors' sizes (1 when the intervals already cover as promised), applied to
    both halves of new intervals. Before ``min_obs`` observations nothing changes.

    A prediction whose half on the side the start fell is zero (under
    ``MIN_HALF_SECONDS``) is not an observation: no scale widens a zero half, so its
    miss says nothing of the scale. Such predictions are the pods the replay fits at
    once (P10 = P50 = P90 = now); they start some seconds later (the scheduler binds
    them, the kubelet starts them, KSM is scraped every 30 s or so), and each of
    those seconds counted as a half-interval drove the scale to its cap of 10,
    widening every other interval tenfold.
    """

    def __init__(self, coverage: float = 0.8, window: int = 500, min_obs: int = 30) -> None:
        if not 0 < coverage < 1:
            raise ReplayError(f"coverage must be in (0, 1), got {coverage}")
        self.coverage = coverage
        self.window = window
        self.min_obs = min_obs
        self._errors: list[float] = []
        self.changes = 0  # bumped by every observation: when to save again

    def observe(self, starts: tuple[float, float, float], actual: float) -> None:
        """One prediction (P10/P50/P90 timestamps) of a pod that started at ``actual``;
        left out when the half on the start's side is zero (class docstring)."""
        p10, p50, p90 = starts
        half = (p90 - p50) if actual >= p50 else (p50 - p10)
        if not half >= MIN_HALF_SECONDS:
            return
        err = abs(actual - p50) / half
        if math.isfinite(err):
            self._errors.append(min(err, MAX_START_ERROR))
            del self._errors[: -self.window]
            self.changes += 1

    def to_json(self) -> str:
        """What it learned, to be saved (``parse_calibration`` reads it back).

        The errors themselves, not the scale: the scale is their quantile, and new
        observations must join the old ones after a restart.
        """
        return json.dumps({"version": CALIBRATION_VERSION, "errors": self._errors})

    def restore(self, errors: Sequence[float]) -> None:
        """Take saved errors (from ``parse_calibration``) as if observed; the latest
        ``window`` are kept."""
        self._errors = [float(e) for e in errors][-self.window :]

    @property
    def n_obs(self) -> int:
        """Observations kept (at most ``window``, the latest)."""
        return len(self._errors)

    @property
    def scale(self) -> float:
        """Factor on both halves of an interval: 1 until ``min_obs``, then in [0.5, 10]."""
        if len(self._errors) < self.min_obs:
            return 1.0
        errors = sorted(self._errors)
        return min(10.0, max(0.5, _quantile(errors, self.coverage)))

    def widen(
        self, pred: StartPrediction, now: float, scale: float | None = None
    ) -> StartPrediction:
        """``pred`` with its interval scaled around P50 (P10 never before ``now``): a
        predicted start, or a ``blocked_elsewhere`` pod's start on other nodes."""
        if pred.starts is None or pred.status not in (PREDICTED, BLOCKED_ELSEWHERE):
            return pred
        s = self.scale if scale is None else scale
        p10, p50, p90 = pred.starts
        lo = max(min(now, p50), p50 - s * (p50 - p10))
        hi = p50 + s * (p90 - p50)
        return StartPrediction(pred.status, (lo, p50, hi), pred.started_share)


def parse_calibration(text: str) -> tuple[tuple[float, ...], int]:
    """A saved ``StartCalibrator.to_json`` → (the usable errors, how many were skipped).

    Pure; ``ReplayError`` when the text is unusable as a whole (too long, not JSON,
    nested too deeply, another version, no list of errors). An error that is not a
    finite number in [0, ``MAX_START_ERROR``] is skipped and counted: one bad value
    is no reason to forget the others.
    """
    loaded = load_versioned(
        text, version=CALIBRATION_VERSION, max_size=MAX_CALIBRATION_CHARS, error=ReplayError
    )
    errors = loaded.get("errors")
    if not isinstance(errors, list) or len(errors) > MAX_CALIBRATION_ERRORS:
        raise ReplayError(f"errors is not a list of at most {MAX_CALIBRATION_ERRORS}")
    good = tuple(
        float(e)
        for e in errors
        if isinstance(e, int | float)
        and not isinstance(e, bool)
        and 0 <= e <= MAX_START_ERROR  # also false for NaN; an int too large for a float
    )
    return good, len(errors) - len(good)
