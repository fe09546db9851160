"""The GPU queue as kube-state-metrics shows it: queries, and their samples → replay inputs.

The forecaster stays a pure Prometheus reader: everything about pods and nodes comes
from kube-state-metrics (KSM) series a kube-prometheus-stack already scrapes, with the
names, labels and types KSM documents (docs/metrics/workload/pod-metrics.md and
docs/metrics/cluster/node-metrics.md upstream):

- ``kube_pod_container_resource_requests`` (gauge; ``namespace, pod, uid, container,
  node, resource, unit``): extended resources are sanitised (``nvidia.com/gpu`` →
  ``resource="nvidia_com_gpu"``, ``unit="integer"``); ``node`` is absent until the pod
  is bound. MIG slices appear as ``nvidia_com_mig_<profile>``. The GPU resources read
  are those and the site's own given with ``--pending.gpu-resource`` (a time-slicing
  ``rename:``, ``nvidia.com/a100-shared`` → ``nvidia_com_a100_shared``:
  ``gpu_eta.common.gpu_resources``), in every query below (``render``).
- ``kube_pod_init_container_resource_requests`` (gauge; the same labels): the init
  containers' requests, and ``kube_pod_init_container_info`` (gauge 1; ``restart_policy``
  ``Always`` for a sidecar, KSM 2.11 and later) for which of them are sidecars; KSM 2.10
  has no ``restart_policy`` label, so an init container of a Running pod that
  ``kube_pod_init_container_status_running`` shows running is a sidecar too (a plain
  one has terminated before its pod's phase turns Running; OpenShift's KSM drops that
  series but has the label). The
  scheduler places a pod on its effective request (Kubernetes' "effective Pod requests
  and limits"): the largest of the plain init containers' (each runs alone, beside
  the sidecars started before it) and the sum of the app containers' and sidecars'
  (they run together). KSM does not show the order of init containers, so every
  sidecar is taken to start before every plain init container (the usual layout: a
  pod is predicted to need more GPUs than it does when a GPU sidecar is listed after
  a larger GPU init container). KSM writes ``kube_pod_init_container_info`` only for
  init containers with a status, which a pod not yet bound has none of: a pending
  pod's sidecars count as plain init containers (their GPUs as the largest init
  request, not added). A pod whose GPUs are all in init containers holds them too
  (the node keeps the effective request for the pod's life): it is read as any GPU
  pod is. The requests of pods that arrive later (``ARRIVALS``) are the larger of
  their app containers' sum and their largest init container's.
- ``kube_pod_status_phase`` (gauge, 1 for the current ``phase``). Pods Pending or
  Running are the queue; a GPU pod Succeeded or Failed is read only on a node whose
  allocatable the read lacks (``POD_TIMES``' ``finished``, ``ClusterQueue.finished``):
  with KSM sharded, the node's shard down and the pod's up, it tells ``last_seen`` not
  to keep the pod as a holder of the node it keeps (KSM writes a finished pod's
  requests, with its node, until the pod is deleted).
- ``kube_pod_created`` and ``kube_pod_start_time`` (gauges, unix seconds). A pending
  pod's creation time is its place in the queue. OpenShift's KSM runs with
  ``--metric-denylist=^kube_.+_created$`` and exports no other time for a pod not yet
  bound (its scheduled and start times come with the node), so a pending GPU pod
  without ``kube_pod_created`` is placed by when Prometheus first saw its
  ``kube_pod_status_phase{phase="Pending"}`` at 1 in the arrival window
  (``PENDING_SINCE``: a subquery at 1 min resolution over ``{arrivals}``, asked in a
  second query only when some pending pod lacks ``kube_pod_created``, and only for
  those pods: ``second_round``). Stateless, so the same for ``serve`` and a
  ``once`` CronJob, across restarts and replicas; pods pending longer than the window
  all take its start, their order among themselves then the namespace's and name's
  (``queue_replay.queue_key``). Counted in ``ClusterQueue.created_missing`` (one log
  line, ``pending.describe``), not as rejected. Pods arriving later (``ARRIVALS``) are
  the GPU pods ``kube_pod_created`` shows created in the window; where KSM exports it
  for no pod at all (``denylisted``: pending GPU pods and none with it, no GPU pod
  known created in the window), the second round asks instead for the GPU pods first
  seen in the window (``ARRIVALS_SEEN``: a request in the window, no
  ``kube_pod_status_phase`` series at its start), and ``_arrivals`` counts those with
  the tolerations and GPU types ``ARRIVALS`` read for them. A cluster with the series,
  one pending pod without it included, never asks it.
- ``kube_pod_deletion_timestamp`` (gauge, unix seconds; a default pod metric, present
  only while a pod is being deleted): its ``metadata.deletionTimestamp``, the deletion's
  time plus the pod's grace period. A running GPU pod being deleted (cancelled,
  preempted, drained) keeps its phase until the kubelet has stopped it, so it is still
  a holder; its GPUs free by that time at the latest (``Holder.deletion_timestamp``),
  whatever its run's forecast says. A pod stuck terminating past it (a finalizer, an
  unreachable node) is taken to free its GPUs now. A Pending pod not bound to a node
  that is being deleted (a Job's pod kept by the ``batch.kubernetes.io/job-tracking``
  finalizer, a suspended Kueue workload's) is left out of the queue and counted
  (``being_deleted``): kube-scheduler skips a pod being deleted, so it takes no GPU.
- ``kube_pod_owner`` (gauge 1 per owner reference; ``owner_kind, owner_name,
  owner_is_controller``, each ``<none>`` for a pod without one; a default STABLE pod
  metric) and ``kube_pod_restart_policy`` (gauge 1, ``type``; also default, but
  denylisted by OpenShift's KSM and kube-prometheus' ``ksm-lite``), read for every GPU
  pod: whether a holder frees its GPUs when its run ends, and the job it shares a run
  with (``_release``, ``Holder.ends_with_run``, ``Holder.owner``). One series more per
  GPU pod and owner reference, one per GPU pod, in the same query.
- ``kube_pod_status_reason`` (gauge; ``namespace, pod, uid, reason``) with
  ``reason="SchedulingGated"``: 1 while a pod's scheduling gates hold it
  (``spec.schedulingGates``: Kueue's ``kueue.x-k8s.io/admission`` for a plain pod, a
  controller's own), as the API server sets its ``PodScheduled`` condition False with
  that reason and KSM reads the conditions' reasons (``pod.go``
  ``getPodStatusReasonValue``). KSM 2.19 and later (kubernetes/kube-state-metrics#2880;
  a series per known reason, 0 or 1, for every pod until 2.20 writes only the reason
  set, #3089): read ``== 1``, for GPU pods, into ``PendingPod.gated``. Nothing
  older tells such a pod from one short of CPU (KSM's unschedulable and
  scheduled-condition pod series are 1 whenever ``PodScheduled`` is False, whatever
  its reason: docs/pending.md); there it is read as any pod (``pending.StartTracker``
  finds it ``blocked_elsewhere`` once it has fit free GPUs for a while).
- ``kube_pod_info`` (gauge 1, ``priority_class`` among its labels). KSM exposes the
  class name, not its value: ``--pending.priority-class NAME=VALUE`` maps names to
  values (unknown names count as 0, the default priority;
  ``ClusterQueue.priorities_unknown`` names them for the log). Read for pending GPU
  pods, and over the arrival window for the GPU pods created in it (``ARRIVALS``,
  ``arrival="info"``): pods arriving later keep their priority. That part only where
  a mapping is given (``first_round``): without one every class is 0.
- ``kube_pod_nodeselectors`` (opt-in in KSM: ``--metric-opt-in-list``) with
  ``nodeselector_nvidia_com_gpu_product``: a pod that selects a GPU type. Read for
  pending GPU pods, and for the GPU pods created in the arrival window (``ARRIVALS``,
  over the window), so pods arriving later ask for the types those did
  (``_arrivals``). A pod's other nodeSelector keys (every key is a label,
  ``nodeselector_<key>`` in KSM's spelling: a pool, ``nvidia.com/gpu.family``) are read
  too (``_selections``) and held against the GPU nodes' labels (``NODE_LABELS``,
  ``_checkable``), a pending pod's and an arriving one's alike: pods arriving pinned
  to a pool land in that pool only. The metric is opt-in since KSM
  v2.5.0. Node affinity is not exposed by KSM at all; a pod that asks for a
  type through affinity is predicted, and counted among arrivals, as if any type would
  do.
- ``kube_node_status_allocatable`` (``node, resource, unit``): GPU units per node
  (time-sliced replicas included, as the device plugin advertises them). Where every
  GPU resource of a node is 0 allocatable, ``kube_node_status_capacity`` (the same
  labels, a default node metric) is read instead (``NODE_CAPACITY``): the device plugin
  is away (a GPU Operator driver upgrade, which also cordons the node, restarts it) and
  the kubelet marks its devices unhealthy, capacity kept (for 5 min, then the resource
  goes from both). Such a node is kept with its capacity, closed: its pods wait
  (``no_schedulable_node``), they do not turn ``never_fits``.
- ``kube_node_spec_unschedulable`` (1 while cordoned) and ``kube_node_status_condition``
  (``condition, status``: ``condition="Ready", status="true"`` is 0 while the node is
  not Ready): a GPU node that is either takes no new pod (``Node.schedulable``). Both
  are among KSM's default node metrics.
- ``kube_node_spec_taint`` (gauge 1 per taint; ``node, key, value, effect``; ``value``
  absent when empty): one of KSM's default node metrics (STABLE; KSM's node metrics
  table lists no opt-in for it, and its generator is a plain family). Read for GPU
  nodes only, effects ``NoSchedule`` and ``NoExecute`` only (the replay ignores
  ``PreferNoSchedule``), into ``Node.taints``. The taints Kubernetes and the cloud
  provider set from a node's state (``node.kubernetes.io/not-ready``,
  ``.../unschedulable``, ``.../memory-pressure``...) are read too, but not as a policy
  (``queue_replay.policy_taints``): a pod only such a node could hold stays
  ``no_schedulable_node``. Cordon and not-ready are read from the spec and the Ready
  condition (a NotReady node is closed once, by its condition: ``Node.schedulable``);
  the others, memory, disk or PID pressure and the like, from the taint, which keeps
  off the pods not tolerating it (``queue_replay.pressure_taints``). A node an
  autoscaler is removing (``ToBeDeletedByClusterAutoscaler``,
  ``karpenter.sh/disrupted``, ``karpenter.sh/disruption``) is closed the same way
  (``queue_replay.leaving``).
- ``kube_pod_tolerations`` (gauge 1 per toleration; ``namespace, pod, uid, key,
  operator, value, effect, toleration_seconds``, each absent when the field is unset:
  ``operator`` absent is Equal, ``effect`` absent every effect): a default pod metric
  (EXPERIMENTAL, not opt-in) since KSM v2.6.0 (CHANGELOG "Add metric for pod
  tolerations #1769"; KSM's ``createPodTolerationsFamilyGenerator``, a plain family,
  not ``NewOptInFamilyGenerator`` as ``kube_pod_nodeselectors`` is). Read for pending
  GPU pods only into ``PendingPod.tolerations``, per pod: a pending pod without any
  toleration series gets ``tolerations`` None (unknown: every taint passes, as if the
  nodes had none), not () (``toleration_seconds`` is dropped: it bounds how long a
  running pod stays after a ``NoExecute`` taint, not where a pod may start). Why: with
  the metric present every pod shows some (the ``DefaultTolerationSeconds`` admission
  plugin, on by default, gives each the not-ready and unreachable ones), so a pod with
  none has its series missing: the metric turned off, KSM before 2.6, or series dropped
  at scrape time to save them, for every namespace or for some. Taking missing data for
  "tolerates nothing" would predict ``never_fits`` for such pods on the common clusters
  whose GPU nodes are tainted ``nvidia.com/gpu:NoSchedule`` and whose pods get the
  toleration from the ``ExtendedResourceToleration`` admission plugin. Such pods are
  not an error (they are predicted): ``ClusterQueue.tolerations_missing`` names their
  namespaces (and ``tolerations_read`` those whose pods showed theirs), which the
  service keeps per namespace for one log line while it lasts (``publish.ServiceState``,
  docs/pending.md): series dropped for one namespace are known missing only from that
  namespace's pods, and known back only when one of them shows its tolerations. Read
  too for the GPU pods created in the arrival window (``ARRIVALS``, over the window),
  so pods arriving later tolerate what those did (``_arrivals``).
- ``kube_node_labels``: only labels allow-listed with KSM's
  ``--metric-labels-allowlist=nodes=[nvidia.com/gpu.product,nvidia.com/gpu.replicas]``
  appear, as ``label_nvidia_com_gpu_product`` and ``label_nvidia_com_gpu_replicas``
  (GPU feature discovery sets both). Without them the GPU type falls back to the model
  gpu-eta's own exporter reports for the node (``gpu_eta_gpu_info``), spelt as GPU
  feature discovery spells it (``gfd_product``), and only replicas
  renamed with a ``.shared`` suffix (``nvidia.com/gpu.shared``,
  ``nvidia.com/mig-1g.10gb.shared``: ``SHARED_SUFFIX``) count as time-sliced. Those
  are replicas with the label too. A running pod holds a
  replica when its resource is one of its node's shared ones (``Node.shared``). The
  GPU nodes' labels the pending pods' nodeSelectors name are read too, those keys only,
  in a second query once the pods are read and only when some pod selects one
  (``selector_plan``, ``node_label_parts``, ``Node.labels``), and, while some GPU pod
  waits, those of the pods arriving, with what the pending pods' leave of the cap
  below: a key some GPU node shows is matched as
  kube-scheduler does (every pair on the node's labels); a key none shows is not
  allow-listed as far as can be told, and is not held against any node
  (``ClusterQueue.selectors_unchecked`` names it for the log, docs/pending.md). Every
  key selected is read up to a cap (``MAX_SELECTOR_KEYS``, ``MAX_SELECTOR_CHARS``); a
  pod selecting a key past it is not predicted (``ClusterQueue.selectors_not_read``).

Every query covers all pods at once, so the number of queries per cycle is fixed
whatever the number of pods: the cycle sends the ``QUERIES`` folded into one
(``gpu_eta.forecaster.queries.fold``; into as few as fit ``queries.MAX_QUERY_CHARS``
each where the site's own GPU resource names are many and long: ``batches``), then,
only when their answers call for it, the ``second_round`` folded into one more (as
few as fit, ``SECOND_ROUND_PARTS`` at most; the
node labels pending and arriving pods select beyond the GPU type, when pods without
``kube_pod_created`` were first seen Pending, and where KSM exports it for no pod, the
GPU pods first seen in the arrival window). The reads of
pods' times, metadata and arrivals are limited to pods that ask for a GPU resource
above 0 (``nvidia.com/gpu: 0`` asks for none); the requests themselves (``PODS``,
``INIT_REQUESTS``, the arrivals' requests) are read as KSM exports them, 0 and invalid
values included, and ``parse`` drops a 0 and counts an invalid one.

Each query also holds when KSM runs as two or more replicas that Prometheus scrapes
apart (every series twice, ``instance`` apart): the series a ``group_left`` join
matches on are first made one per pod or node (``max by``, ``topk by (1)``), and a
request is not summed across replicas. Without that Prometheus refuses the join
("found duplicate series for the match group") and the queue got no prediction at all.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

from gpu_eta.common.gpu_resources import (
    is_built_in,
    ksm_gpu_resources,
    ksm_resource_regex,
)
from gpu_eta.forecaster.queue_replay import (
    EFFECTS,
    OPERATORS,
    Arrival,
    Holder,
    Node,
    PendingPod,
    Selector,
    Taint,
    Toleration,
    leaving,
    policy_taints,
)
from gpu_eta.forecaster.series import Sample
from gpu_eta.forecaster.set_match import matcher

T = TypeVar("T")

# The templates hold ``{gpu_resources}``: the built-in GPU resources
# (``common.gpu_resources.KSM_GPU_RESOURCES``) and the site's own (``render``). Each
# holds it as few times as it can (the GPU filters are applied once to a union of
# tagged series, not to each): a site's own names are written in every place it
# stands, and the first round must stay within ``queries.MAX_QUERY_CHARS`` (``batches``)
_REQ = 'kube_pod_container_resource_requests{resource=~"{gpu_resources}"}'
_INIT_REQ = 'kube_pod_init_container_resource_requests{resource=~"{gpu_resources}"}'
# pods asking a GPU: a request above 0, app or init container (KSM exports
# ``nvidia.com/gpu: 0``, a CPU-only profile overriding a GPU default, as a series of
# value 0: no GPU asked, as ``_requested`` reads it); a comparison keeps every label.
# One selector for both metrics, so the regex is written once: the same series as
# ``_REQ > 0 or _INIT_REQ > 0`` (Kubernetes names a pod's app and init containers
# apart, so no two of them share a label set once a server drops the name)
_GPU_REQUESTS = (
    '({__name__=~"kube_pod_container_resource_requests|kube_pod_init_container_resource_requests",'
    'resource=~"{gpu_resources}"} > 0)'
)
_GPU_PODS = f"and on (uid) {_GPU_REQUESTS}"
_PENDING = 'and on (uid) (kube_pod_status_phase{phase="Pending"} == 1)'
_ALLOCATABLE = 'kube_node_status_allocatable{resource=~"{gpu_resources}"}'
_GPU_NODES = f"and on (node) {_ALLOCATABLE}"


def _tagged(label: str, parts: Mapping[str, str]) -> str:
    """``a or b``, each series tagged with ``label="<name>"`` (label_replace)."""
    return " or ".join(
        f'label_replace({expr}, "{label}", "{name}", "__name__", ".*")'
        for name, expr in parts.items()
    )


# one phase per pod even while two replicas disagree for a scrape (topk)
_PHASE = (
    "* on (uid) group_left (phase) topk by (uid) (1, max by (uid, phase) "
    '(kube_pod_status_phase{phase=~"Pending|Running"} == 1))'
)
# GPU pods Pending or Running: units of their GPU resource per container (each
# container's once whatever the number of KSM replicas), with phase and node (if bound).
# Per container, not summed: ``_PodRequests`` sums them, and keeps the largest, which
# the device plugin's ``failRequestsGreaterThanOne`` holds (it checks each container);
# a pod's GPU containers are few, so the answer is about as many series, and the
# query shorter
PODS = f"max by (namespace, pod, uid, container, node, resource) ({_REQ}) {_PHASE}"
# their init containers' GPU requests, one series per container (whatever the number of
# KSM replicas), a sidecar's tagged sidecar="true", with the pod's phase
_INIT_ONE = f"max by (namespace, pod, uid, container, node, resource) ({_INIT_REQ})"
# sidecars: restart_policy Always (KSM 2.11 and later), or an init container running
# while its pod is Running (KSM 2.10 has no restart_policy label; a plain init container
# has terminated before its pod's phase turns Running)
_SIDECARS = (
    '(kube_pod_init_container_info{restart_policy="Always"} == 1) or on (uid, container) '
    "(kube_pod_init_container_status_running == 1 "
    'and on (uid) (kube_pod_status_phase{phase="Running"} == 1))'
)
INIT_REQUESTS = (
    f"(label_replace({_INIT_ONE} and on (uid, container) ({_SIDECARS}), "
    '"sidecar", "true", "", "") '
    f"or on (uid, container, resource) {_INIT_ONE}) {_PHASE}"
)
# a pending GPU pod's creation, a GPU pod's start, and a GPU pod being deleted (gone by
# its deletionTimestamp at the latest): the GPU filter once for the three
POD_TIMES = (
    "("
    + _tagged(
        "time",
        {
            "created": f"kube_pod_created {_PENDING}",
            "started": "kube_pod_start_time",
            "deleted": "max by (uid) (kube_pod_deletion_timestamp)",
        },
    )
    + f") {_GPU_PODS} or "
    # a GPU pod finished (Succeeded, Failed) on a node the read does not show (its KSM
    # shard down, the pod's up): not a holder of the node kept as last read
    # (last_seen); no series while every GPU node is read
    + _tagged(
        "time",
        {
            "finished": (
                "max by (namespace, pod, uid) "
                '(kube_pod_status_phase{phase=~"Succeeded|Failed"} == 1) '
                f"and on (uid) ({_GPU_REQUESTS} unless on (node) {_ALLOCATABLE})"
            ),
        },
    )
)
# the pending GPU pods' priority class, node selectors and tolerations (one series per
# toleration whatever the number of KSM replicas); every GPU pod's owners and restart
# policy: whether a holder ends with its run, and which holders are one job's
# (``_release``); GPU pods their scheduling gates hold (KSM 2.19 and later; before
# 2.20 a 0 series for every other pod), not replayed (``PendingPod.gated``). A gated
# pod is Pending (gates are set at creation and only removed, and a pod is bound once
# they are all gone): no phase join, which would only add to its cost. The GPU filter
# once for all of them
POD_META = (
    "(("
    + _tagged(
        "meta",
        {
            "info": "kube_pod_info",
            "nodeselectors": "kube_pod_nodeselectors",
            "tolerations": "max by (uid, key, operator, value, effect) (kube_pod_tolerations)",
        },
    )
    + f") {_PENDING} or "
    + _tagged(
        "meta",
        {
            "owner": "max by (uid, owner_kind, owner_name, owner_is_controller) (kube_pod_owner)",
            "restart_policy": "max by (uid, type) (kube_pod_restart_policy)",
            "gated": 'max by (uid) (kube_pod_status_reason{reason="SchedulingGated"} == 1)',
        },
    )
    + f") {_GPU_PODS}"
)
# GPU units per node, with the GPU feature discovery labels when KSM exposes them
_NODE_UNITS = f"max by (node, resource) ({_ALLOCATABLE})"
NODES = (
    f"({_NODE_UNITS} * on (node) group_left (label_nvidia_com_gpu_product, "
    "label_nvidia_com_gpu_replicas) topk by (node) (1, max by (node, "
    "label_nvidia_com_gpu_product, label_nvidia_com_gpu_replicas) (kube_node_labels))) "
    f"or on (node, resource) {_NODE_UNITS}"
)
# GPU units per node whose allocatable is 0 for every GPU resource but whose capacity
# is not: its device plugin is away (a GPU Operator driver upgrade restarts it), the
# kubelet marks the devices unhealthy; the node is kept, closed (``parse``)
NODE_CAPACITY = (
    'max by (node, resource) (kube_node_status_capacity{resource=~"{gpu_resources}"}) > 0 '
    f"unless on (node) (max by (node) ({_ALLOCATABLE}) > 0)"
)
# GPU nodes that take no new pod: cordoned, or not Ready; and GPU nodes' taints that keep
# off pods not tolerating them (tagged ``state``)
NODE_STATE = (
    "("
    + _tagged(
        "state",
        {
            "cordoned": "max by (node) (kube_node_spec_unschedulable) == 1",
            "not_ready": (
                'max by (node) (kube_node_status_condition{condition="Ready",status="true"}) == 0'
            ),
            "taint": (
                "max by (node, key, value, effect) "
                '(kube_node_spec_taint{effect=~"NoSchedule|NoExecute"})'
            ),
        },
    )
    + f") {_GPU_NODES}"
)
# GPU nodes' labels for the pending and arriving pods' nodeSelector keys beyond the GPU
# type (``_node_labels``, ``_selections``): only those keys (``node_labels_query``), asked
# in a second query once the pods are read, and only when some GPU pod waits and it or a
# pod arriving selects one (``selector_plan``)
NODE_LABELS = "max by (node, {label_keys}) (kube_node_labels) " + _GPU_NODES
NODE_LABELS_PART = "ksm_node_labels"
# Of a series the answer parser left out (``promparse.Skipped``: more than 128 labels,
# a label not valid UTF-8), the labels ``parse`` needs to tell whose it was: passed
# under ``skipped_name(part)``, as samples of those labels alone. A pending pod's
# ``kube_pod_nodeselectors`` series left out (it selects some 120 keys or more) is not a
# pod selecting nothing: it is rejected ``selector_not_read``
SKIPPED_LABELS = ("uid", "meta")


def skipped_name(part: str) -> str:
    """The name under which the series of ``part`` the answer parser left out are
    given to ``parse`` (``SKIPPED_LABELS``)."""
    return f"{part}/skipped"


# When Prometheus first saw a pending GPU pod without ``kube_pod_created`` (OpenShift's
# KSM denylists ``^kube_.+_created$``) Pending in the arrival window: the subquery's
# 1 min steps, or now for a pod newer than the last step. Per series, not ``max by
# (uid)`` inside: an aggregation at each of a subquery's steps cost four times the rest
# of the queue's query. Asked in the second round, only for those pods by uid
# (``uncreated``, ``pending_since_query``): the subquery over every pending pod of the
# cluster cost ~100 ms a cycle at 5,000 pods on the clusters that have the series too
_PENDING_OF = 'kube_pod_status_phase{phase="Pending"{uids}} == 1'
PENDING_SINCE = (
    f"min by (uid) (min_over_time(timestamp({_PENDING_OF})[{{arrivals}}:1m]) "
    f"or timestamp({_PENDING_OF}))"
)
PENDING_SINCE_PART = "ksm_pending_since"
# the longest first-seen query that names its uids (each twice: ~74 characters a uid);
# longer, it asks for every pending pod and ``parse`` takes the ones it needs. Why:
# VictoriaMetrics refuses a query over 16 KiB (``-search.maxQueryLen``), and the second
# round folds this with the other parts that fit (``batches``): each query stays within
# ``queries.MAX_QUERY_CHARS`` (12,000), the bound every other query keeps. ~120 uids.
MAX_SINCE_QUERY_CHARS = 9_000
# pods created in the window (still present or not)
_CREATED_IN_WINDOW = (
    "(max by (uid) (last_over_time(kube_pod_created[{arrivals}])) > time() - {arrivals_seconds})"
)
# keeps the series of GPU pods (a request above 0, as ``_GPU_PODS``) seen in the
# window; which of them were created in it is the ``request`` part's filter alone
# (``_arrivals`` reads only those uids), so that ``kube_pod_created`` over every pod of
# the cluster is read once, not three times
_GPU_IN_WINDOW = (
    f"and on (uid) (last_over_time({_REQ}[{{arrivals}}]) > 0 "
    f"or last_over_time({_INIT_REQ}[{{arrivals}}]) > 0)"
)
# GPU pods created in the window: the arrival rate per shape (tagged ``arrival``): each
# pod's request (``request``: its containers' sum, each container's once per replica,
# or its largest init container's when larger), its tolerations (``tolerations``,
# one series per toleration whatever the number of KSM replicas) and its nodeSelector
# (``nodeselectors``: every key, the GPU type and a pool alike, one series a pod
# whatever the number of KSM replicas, ``topk``; the metric name dropped, ``max``, as
# Prometheus keeps it through ``last_over_time`` and VictoriaMetrics does not, and the
# pod's names with it, the ``request`` part's and ``uid`` telling whose it is; a pod
# selecting nothing has one too, its ids alone, which no matcher can leave out: KSM
# writes the keys as label names)
_ARRIVAL_REQUEST = (
    "max by (namespace, pod, uid, resource) ("
    "label_replace(sum by (namespace, pod, uid, resource) (max by (namespace, pod, "
    f"uid, container, resource) (last_over_time({_REQ}[{{arrivals}}]))), "
    '"part", "app", "", "") '
    "or label_replace(max by (namespace, pod, uid, resource) "
    f'(last_over_time({_INIT_REQ}[{{arrivals}}])), "part", "init", "", ""))'
)
_ARRIVAL_META = {
    "tolerations": (
        "max by (uid, key, operator, value, effect) "
        "(last_over_time(kube_pod_tolerations[{arrivals}]))"
    ),
    "nodeselectors": (
        "topk by (uid) (1, max without (instance, namespace, pod) "
        "(last_over_time(kube_pod_nodeselectors[{arrivals}])))"
    ),
}
# and their priority class (``info``), asked only with a ``--pending.priority-class``
# mapping (``first_round``)
_ARRIVAL_INFO = (
    'max by (uid, priority_class) (last_over_time(kube_pod_info{priority_class!=""}[{arrivals}]))'
)


def _arrivals_query(meta: Mapping[str, str]) -> str:
    """The ``ARRIVALS`` query reading ``meta`` (by ``arrival`` tag) for the GPU pods
    of the window beside their requests."""
    return (
        _tagged("arrival", {"request": f"{_ARRIVAL_REQUEST} and on (uid) {_CREATED_IN_WINDOW}"})
        + " or ("
        + _tagged("arrival", meta)
        + f") {_GPU_IN_WINDOW}"
    )


ARRIVALS = _arrivals_query({**_ARRIVAL_META, "info": _ARRIVAL_INFO})
ARRIVALS_UNPRIORITISED = _arrivals_query(_ARRIVAL_META)
# Where KSM exports no ``kube_pod_created`` at all (OpenShift): the GPU pods first seen
# in the arrival window, with their requests as ``ARRIVALS`` reads them (tagged
# ``arrival="request"``: ``_arrivals`` takes them with the first round's tolerations and
# GPU types, which ``ARRIVALS`` reads for every GPU pod seen in the window). First seen
# in it: a pod with a request in the window that had no phase series at its start
# (``_THERE_AT_START``: KSM writes ``kube_pod_status_phase{phase="Pending"}``, 0 or 1,
# for every pod from its creation, so a pod there then, whatever its phase, is no
# arrival). An instant lookup at the window's start, not the earliest 1 min step of a
# subquery over every pod's phase (the first try): at 5,000 pods that cost 1.25 times
# the whole folded queue query, this 0.29 (bench/queue_query_cost.py, 2026-12-05).
# None at all while Prometheus has no phase series at the window's start
# (``_HISTORY_AT_START``: a Prometheus younger than the window, a gap in its data then),
# which would take every pod for one first seen in the window: no arrival then, as
# before the fallback, rather than the whole cluster arriving within the hour. Asked in
# the second round only (``denylisted``): a cluster with the series never pays for it
_THERE_AT_START = 'kube_pod_status_phase{phase="Pending"} offset {arrivals}'
_HISTORY_AT_START = "(count(kube_pod_status_phase offset {arrivals}) > 0)"
ARRIVALS_SEEN = _tagged(
    "arrival",
    {
        "request": (
            f"{_ARRIVAL_REQUEST} unless on (uid) ({_THERE_AT_START}) and on () {_HISTORY_AT_START}"
        )
    },
)
ARRIVALS_SEEN_PART = "ksm_arrivals_seen"

QUERIES: Mapping[str, str] = {
    "ksm_pods": PODS,
    "ksm_init_requests": INIT_REQUESTS,
    "ksm_pod_times": POD_TIMES,
    "ksm_pod_meta": POD_META,
    "ksm_nodes": NODES,
    "ksm_node_capacity": NODE_CAPACITY,
    "ksm_node_state": NODE_STATE,
    "ksm_arrivals": ARRIVALS,
}


def first_round(priorities: Mapping[str, int]) -> Mapping[str, str]:
    """The queue's first round (``QUERIES``) for ``--pending.priority-class``'s
    ``priorities``: without any, ``ARRIVALS`` leaves out the arrivals' priority classes
    (``ARRIVALS_UNPRIORITISED``).

    Why: a class without a value is read as 0 (``parse``), so without a mapping every
    pod arriving has priority 0 whatever its class, and ``kube_pod_info`` of every GPU
    pod created over the window, read each cycle, would change no prediction."""
    if priorities:
        return QUERIES
    return {**QUERIES, "ksm_arrivals": ARRIVALS_UNPRIORITISED}


# owner kinds whose pods end with their run: a Job's (batch, Volcano's), the training
# operators' (Kubeflow's, the MPI operator's: they own their pods directly), an Argo
# Workflow's step. ``kube_pod_owner`` names the direct owner: a JobSet's (Kubeflow
# Trainer's) pods are its Jobs'
RUN_OWNER_KINDS = frozenset(
    {
        "Job",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "PaddleJob",
        "JAXJob",
        "MXJob",
        "Workflow",
    }
)
NO_OWNER = "<none>"  # KSM's owner_kind and owner_name for a pod without an owner
PRODUCT_LABEL = "label_nvidia_com_gpu_product"
REPLICAS_LABEL = "label_nvidia_com_gpu_replicas"
SELECTOR_LABEL = "nodeselector_nvidia_com_gpu_product"
# how a GPU resource of time-sliced replicas ends in KSM's spelling: the device plugin's
# ``renameByDefault`` appends ``.shared`` to the resource it shares
SHARED_SUFFIX = "_shared"
# KSM's prefixes of a pod's nodeSelector keys and a node's label keys (the key in its
# spelling after them: ``nodeselector_pool``, ``label_pool``)
SELECTOR_PREFIX = "nodeselector_"
NODE_LABEL_PREFIX = "label_"
# ``kubernetes.io/hostname`` in KSM's spelling: the kubelet sets it to the node's name,
# which every ``kube_node_labels`` series carries (``node``), exported or not
HOSTNAME_KEY = "kubernetes_io_hostname"
# The nodeSelector keys the pending pods select are read from kube_node_labels up to a
# cap on the second round's cost (``selector_plan``): at most this many keys, and this
# many characters of their labels in the queries (``label_<key>, `` each), asked in
# parts of at most ``MAX_LABEL_PART_CHARS`` (``node_label_parts``). So at most
# ``MAX_LABEL_PARTS`` parts (two closed parts hold more than the cap's characters), each
# a series per GPU node of at most 120 keys' labels, the node's and the fold's tag:
# within the 128 labels the answer parser takes (``promparse``). About 120 keys of
# node-feature-discovery's length (``feature_node_kubernetes_io_cpu_cpuid_avx512f``)
MAX_SELECTOR_KEYS = 120
MAX_SELECTOR_CHARS = 7_000
MAX_LABEL_PART_CHARS = 4_000
MAX_LABEL_PARTS = 2
# the second round's parts at most: the node labels', the first-seen one, the arrivals
# first seen (``second_round``); each may be a query of its own (``batches``)
SECOND_ROUND_PARTS = MAX_LABEL_PARTS + 2
_LABEL_KEY = re.compile(r"^[a-zA-Z0-9_]+$")
MAX_UNITS = 1024  # a request or allocatable beyond this is not a real GPU count
# Kubernetes' bounds: a taint or toleration key is a qualified name (a DNS subdomain
# prefix of 253, "/", a name of 63), its value a label value (63)
MAX_KEY_CHARS = 317
MAX_VALUE_CHARS = 63
# per node and per pod; beyond, the node's taints or the pod's tolerations are not used
# (counted): no real node or pod has that many
MAX_TAINTS = 64
MAX_TOLERATIONS = 64


def render(template: str, arrivals_seconds: float, gpu_resources: Sequence[str] = ()) -> str:
    """Fill a query's arrival window and its GPU resources: the built-in ones and
    ``gpu_resources``, the site's own (Kubernetes names, ``--pending.gpu-resource``;
    ``common.gpu_resources.ksm_resource_regex``: those the built-in regex matches
    already are left out, ``beyond_built_in``)."""
    seconds = max(1, round(arrivals_seconds))
    return (
        template.replace("{arrivals}", f"{seconds}s")
        .replace("{arrivals_seconds}", str(seconds))
        .replace("{gpu_resources}", ksm_resource_regex(gpu_resources))
    )


def rendered(
    templates: Mapping[str, str], arrivals_seconds: float, gpu_resources: Sequence[str] = ()
) -> dict[str, str]:
    """Each of ``templates`` (by part name) filled by ``render``."""
    return {name: render(tpl, arrivals_seconds, gpu_resources) for name, tpl in templates.items()}


class QueryTooLong(ValueError):
    """A query part alone makes a folded query longer than the bound (``batches``).

    ``part``: its name; ``chars``: the length of its fold alone; ``limit``: the bound."""

    def __init__(self, part: str, chars: int, limit: int) -> None:
        super().__init__(
            f"the query part {part} alone is {chars:,} characters, over the {limit:,} "
            "one query may take"
        )
        self.part = part
        self.chars = chars
        self.limit = limit


def batches(
    parts: Mapping[str, str], fold: Callable[[Mapping[str, str]], str], max_chars: int
) -> list[dict[str, str]]:
    """``parts`` (rendered, by name) cut, in order, into runs whose ``fold`` (the
    cycle's ``queries.fold``) is at most ``max_chars`` long: a new run begins where the
    next part would not fit. One run where all fit (every site whose own GPU resource
    names are few or short: the first round is one query then). ``QueryTooLong`` for a
    part that does not fit alone (the site's names too many or too long: raised before
    any query is sent, the CLI refuses such names at start, ``config.Config``).

    Why cut rather than send one query however long: VictoriaMetrics refuses a query
    over 16 KiB (``-search.maxQueryLen``), and every other read keeps to
    ``queries.MAX_QUERY_CHARS``. Each part is asked whole in one query, so its answer
    is the one it has folded with the others (``queries.unfold`` by its name)."""
    out: list[dict[str, str]] = []
    run: dict[str, str] = {}
    for name, expr in parts.items():
        if run and len(fold({**run, name: expr})) <= max_chars:
            run[name] = expr
            continue
        chars = len(fold({name: expr}))
        if chars > max_chars:
            raise QueryTooLong(name, chars, max_chars)
        if run:
            out.append(run)
        run = {name: expr}
    if run:
        out.append(run)
    return out


@dataclass(frozen=True)
class SelectorPlan:
    """Which nodeSelector keys of the pending pods the second round reads
    (``selector_plan``). ``read``: the keys asked (KSM's spelling, sorted). ``not_read``:
    the keys past the cap, each with the number of pending pods selecting it (empty on
    any real queue)."""

    read: tuple[str, ...] = ()
    not_read: Mapping[str, int] = field(default_factory=dict)


def _label_chars(key: str) -> int:
    """What reading ``key`` adds to a node-label query (``label_<key>, ``)."""
    return len(NODE_LABEL_PREFIX) + len(key) + 2


def _waiting(samples: Mapping[str, Sequence[Sample]]) -> set[str]:
    """The uids of the pending GPU pods not yet bound in ``QUERIES``' answers (a request
    above 0, app or init container)."""
    return {
        s.labels.get("uid", "")
        for name in ("ksm_pods", "ksm_init_requests")
        for s in samples.get(name, ())
        if s.labels.get("phase") == "Pending" and not s.labels.get("node") and s.value > 0
    } - {""}


def _scheduler_order(
    samples: Mapping[str, Sequence[Sample]],
    uids: Collection[str],
    priorities: Mapping[str, int],
) -> list[str]:
    """``uids`` in the order kube-scheduler (and ``pending.predict``'s replay) takes
    them: the pods not yet bound and not held by a scheduling gate by priority, then
    creation (a pod without ``kube_pod_created`` after those with one); then the gated
    ones, then any other (a bound pod still Pending), each by the same key."""
    created = {
        s.labels.get("uid", ""): s.value
        for s in samples.get("ksm_pod_times", ())
        if s.labels.get("time") == "created" and math.isfinite(s.value)
    }
    meta = _by_tag(samples.get("ksm_pod_meta", ()), "meta")
    gated = {s.labels.get("uid", "") for s in meta.get("gated", ())}
    klass = {
        s.labels.get("uid", ""): s.labels.get("priority_class", "") for s in meta.get("info", ())
    }
    waiting = _waiting(samples)

    def rank(uid: str) -> tuple[int, int, float, str]:
        behind = 0 if uid in waiting and uid not in gated else 1 if uid in waiting else 2
        priority = -priorities.get(klass.get(uid, ""), 0)
        return (behind, priority, created.get(uid, math.inf), uid)

    return sorted(uids, key=rank)


def _readable(keys: Collection[str]) -> set[str]:
    """Of a pod's nodeSelector ``keys`` (KSM's spelling), those KSM could have written as
    a node label too (``[a-zA-Z0-9_]``, no longer than Kubernetes allows): the others no
    node shows, so they are not asked."""
    return {k for k in keys if len(k) <= MAX_KEY_CHARS and _LABEL_KEY.match(k)}


def _arriving_keys(samples: Mapping[str, Sequence[Sample]]) -> list[frozenset[str]]:
    """The nodeSelector key sets beyond the GPU type of the GPU pods arriving, each once,
    those of the most pods first (then by their keys): the pods ``ARRIVALS`` shows
    created in the window, or where KSM exports no ``kube_pod_created`` (``denylisted``:
    their ``ARRIVALS_SEEN`` comes in the second round, with the node labels) every GPU
    pod it shows in the window, those first seen in it among them."""
    series = samples.get("ksm_arrivals", ())
    _, selects = _selections(series, ("arrival", "nodeselectors"))
    if not denylisted(samples):
        arriving = {s.labels.get("uid") for s in series if s.labels.get("arrival") == "request"}
        selects = {uid: pairs for uid, pairs in selects.items() if uid in arriving}
    count = Counter(frozenset(_readable(pairs)) for pairs in selects.values())
    count.pop(frozenset(), None)
    return sorted(count, key=lambda keys: (-count[keys], sorted(keys)))


def selector_plan(
    samples: Mapping[str, Sequence[Sample]],
    priorities: Mapping[str, int] | None = None,
) -> SelectorPlan:
    """The nodeSelector keys beyond the GPU type that the pending GPU pods of
    ``QUERIES``' answers select, which ``node_label_parts`` asks: every one, up to
    ``MAX_SELECTOR_KEYS`` keys and ``MAX_SELECTOR_CHARS`` characters. The pods are gone
    through in the scheduler's order (``_scheduler_order``, ``priorities`` valuing
    their classes: the first ``--pending.max-pods`` the replay predicts, then the rest;
    gated pods last), and a pod's keys are taken only if all of those not yet taken fit
    what is left of the cap; a pod whose keys do not is passed over (it will be rejected
    ``selector_not_read`` whatever else is read), and the pods behind it still get
    their keys. The keys left are ``not_read``. Then, with what is left of the cap and
    while some GPU pod waits, the keys of the pods arriving (``_arriving_keys``: the
    most pods' first, each pod's all or none), so that arrivals pinned to a pool land in
    that pool only (``queue_replay.Arrival.selector``); a key of theirs not read is not
    held against any node (those arrivals may land anywhere), and is not ``not_read``
    (no pending pod is rejected for it). Nothing waiting, the arrivals delay no pod, and
    no query is asked for them. Pure: ``parse`` makes the same plan from the same
    answers.

    Why so, rather than ranking keys: a pod selecting many keys (node-feature
    discovery's ``feature.node.kubernetes.io/...``) took places it could not fill, and
    the keys of the pods before it in the queue were not read: a pod pinned to a busy
    pool got no prediction, or one to start now on another pool. A key KSM could not
    have written (not ``[a-zA-Z0-9_]``, longer than Kubernetes allows) is not asked (no
    node shows it)."""
    _, selects = _selections(samples.get("ksm_pod_meta", ()), ("meta", "nodeselectors"))
    count: Counter[str] = Counter()
    wanted: dict[str, set[str]] = {}
    for uid, pairs in selects.items():
        wanted[uid] = _readable(pairs)
        count.update(wanted[uid])
    ordered = [wanted[uid] for uid in _scheduler_order(samples, wanted, priorities or {})]
    arriving = _arriving_keys(samples) if _waiting(samples) else []
    read: set[str] = set()
    chars = 0
    for keys in [*ordered, *arriving]:
        new = keys - read
        more = sum(_label_chars(k) for k in new)
        if len(read) + len(new) <= MAX_SELECTOR_KEYS and chars + more <= MAX_SELECTOR_CHARS:
            read |= new
            chars += more
    return SelectorPlan(tuple(sorted(read)), {k: n for k, n in count.items() if k not in read})


def uncreated(samples: Mapping[str, Sequence[Sample]]) -> tuple[str, ...]:
    """The uids (sorted) of the pending GPU pods not yet bound that ``QUERIES``' answers
    show without ``kube_pod_created``: those ``pending_since_query`` places.

    A GPU pod here asks above 0, as ``POD_TIMES`` reads them (``_GPU_PODS``): a pod
    asking 0 (``PODS`` keeps it, ``parse`` leaves it out) has no ``created`` sample to
    show, and taken for one without the series it would send a second round each cycle
    (and, alone, ``denylisted``'s expensive fallback)."""
    created = {
        s.labels.get("uid", "")
        for s in samples.get("ksm_pod_times", ())
        if s.labels.get("time") == "created"
    }
    return tuple(sorted(_waiting(samples) - created))


def pending_since_query(uids: Collection[str]) -> str | None:
    """The query of when Prometheus first saw the pending pods ``uids`` (``uncreated``)
    Pending (a template for ``render``), answered as ``PENDING_SINCE_PART`` for
    ``parse``; None without uids (every pending pod has ``kube_pod_created``: the usual
    cluster, which then never pays for the subquery). Named by uid up to
    ``MAX_SINCE_QUERY_CHARS``; more pods (or a uid no set match can name) ask for every
    pending pod."""
    if not uids:
        return None
    match = matcher("uid", uids)  # {uid=~"a|b"}, escaped; None for an unprintable uid
    if match is not None:
        named = PENDING_SINCE.replace("{uids}", "," + match[1:-1])
        if len(named) <= MAX_SINCE_QUERY_CHARS:
            return named
    return PENDING_SINCE.replace("{uids}", "")


def denylisted(
    samples: Mapping[str, Sequence[Sample]], waiting: Collection[str] | None = None
) -> bool:
    """Whether ``QUERIES``' answers show KSM exporting no ``kube_pod_created`` at all (its
    ``--metric-denylist=^kube_.+_created$``, OpenShift's): some pending GPU pod not yet
    bound lacks it (``uncreated``), no pending GPU pod has it (no ``created`` sample),
    and no GPU pod is known created in the arrival window (no ``ARRIVALS`` ``request``).

    Why all three, not one pod without it: the fallback it calls for (``ARRIVALS_SEEN``)
    reads every GPU pod's requests over the window again and every pod's phase at its
    start (0.29 times the folded queue query at 5,000 pods), which a cluster with the
    series must never pay, and its arrivals would be counted beside ``ARRIVALS``' own. One pending
    pod can lack the series on such a cluster too (its namespace's series dropped at
    scrape time, a KSM shard serving it down); that pod is placed by ``PENDING_SINCE``
    alone, while the other pods' ``created`` samples, or those of the GPU pods created
    in the window, show the series is exported. No pending GPU pod: nothing is asked (no
    queue to delay). ``waiting``: ``uncreated(samples)`` when the caller has it."""
    if not (uncreated(samples) if waiting is None else waiting):
        return False
    created = any(s.labels.get("time") == "created" for s in samples.get("ksm_pod_times", ()))
    arrived = any(s.labels.get("arrival") == "request" for s in samples.get("ksm_arrivals", ()))
    return not created and not arrived


def second_round(
    samples: Mapping[str, Sequence[Sample]],
    priorities: Mapping[str, int] | None = None,
) -> dict[str, str]:
    """The queries to ask once ``QUERIES``' answers are read, by part name (templates
    for ``render``; the cycle folds them into as few queries as hold them, ``batches``):
    the node labels the pending and arriving pods select (``selector_plan`` with ``priorities``, as
    ``parse`` is given them; ``node_label_parts``), when the pods without ``kube_pod_created`` were first seen
    Pending (``pending_since_query``) and, where KSM exports no ``kube_pod_created`` at
    all (``denylisted``), the GPU pods first seen in the arrival window
    (``ARRIVALS_SEEN``). Empty on the usual cluster; ``SECOND_ROUND_PARTS`` at most."""
    parts = node_label_parts(selector_plan(samples, priorities).read)
    waiting = uncreated(samples)
    since = pending_since_query(waiting)
    if since is not None:
        parts[PENDING_SINCE_PART] = since
    if denylisted(samples, waiting):
        parts[ARRIVALS_SEEN_PART] = ARRIVALS_SEEN
    return parts


def node_label_part(index: int) -> str:
    """The name of the ``index``-th (from 0) part of the node labels' read."""
    return NODE_LABELS_PART if index == 0 else f"{NODE_LABELS_PART}_{index + 1}"


def node_label_parts(keys: Sequence[str]) -> dict[str, str]:
    """The node-label queries of ``keys`` (``selector_plan``'s ``read``; templates for
    ``render``) by part name (``node_label_part``): the keys in order, a new part where
    the next key's label would take the part's past ``MAX_LABEL_PART_CHARS``. Empty
    without keys; within the plan's cap, ``MAX_LABEL_PARTS`` at most."""
    runs: list[list[str]] = []
    chars = 0
    for key in keys:
        if not runs or chars + _label_chars(key) > MAX_LABEL_PART_CHARS:
            runs.append([])
            chars = 0
        runs[-1].append(key)
        chars += _label_chars(key)
    out = {}
    for i, run in enumerate(runs):
        query = node_labels_query(run)
        if query is not None:
            out[node_label_part(i)] = query
    return out


def node_labels_query(keys: Collection[str]) -> str | None:
    """The query of the GPU nodes' labels ``keys`` (a part of ``node_label_parts``; a
    template for ``render``), answered under its part's name for ``parse``; None without
    keys.

    Why not ``kube_node_labels`` whole: a site allow-listing every node label
    (``nodes=[*]``) on nodes labelled by node-feature-discovery (the GPU Operator
    installs it: 100-200 ``feature.node.kubernetes.io`` keys) gets series of more
    labels than the answer's parser takes (``promparse``: 128), every one skipped, and
    a 19 MB answer every cycle for 1000 such nodes and two KSM replicas. Read after the
    pods, as the keys are the pods', and not at all while no pending or arriving pod
    selects one, or no pod waits (the usual queue): one more query in the cycles that
    need it."""
    if not keys:
        return None
    labels = ", ".join(NODE_LABEL_PREFIX + key for key in sorted(keys))
    return NODE_LABELS.replace("{label_keys}", labels)


def is_gpu_resource(resource: str, extra: Collection[str] = ()) -> bool:
    """Whether a ``resource`` label (KSM spelling) is a GPU resource: a built-in one, or
    one of ``extra`` (``common.gpu_resources.ksm_gpu_resources`` of the site's names).
    The queries already ask for these only: this keeps a label no GPU count comes from
    (a relabelling gone wrong) out of the queue, counted."""
    return is_built_in(resource) or resource in extra


@dataclass(frozen=True)
class ClusterQueue:
    """The queue and the cluster it waits on, from one cycle's KSM samples.

    ``scheduled``: pods bound to a node whose containers are still starting (phase
    Pending with a node); they hold their GPUs and start about now. ``rejected``
    counts samples skipped as malformed, by reason. ``tainted_nodes`` (a property, from
    ``nodes``): GPU nodes with a taint that keeps pods off. ``tolerations_missing``:
    the namespaces (sorted) of pending pods KSM showed no toleration series for, taken
    to tolerate every taint (module docstring); ``tolerations_read``: those of pending
    pods whose series were there. A namespace with no pod pending is in neither: this
    cycle says nothing of it. ``created_missing``: pending pods without
    ``kube_pod_created``, queued by when Prometheus first saw them Pending within the
    arrival window (module docstring). ``nodes_read``: the GPU nodes (sorted) whose
    allocatable the read shows, those left out of ``nodes`` (every GPU 0 allocatable
    without a capacity, or malformed) too: present in the read, so not kept as last
    read by ``last_seen`` (the read says they have no GPU to give). ``finished``: the
    GPU pods (namespace, pod; sorted) the read shows Succeeded or Failed on a node whose
    allocatable it does not show: ``last_seen`` does not keep them as holders of that
    node (their GPUs are free).

    Which nodeSelector keys are held is decided here, from ``nodes``, each time a queue
    is made (``__post_init__``), not by ``parse`` from the nodes it read: a queue with
    nodes added (``last_seen``'s nodes kept as last read, through
    ``dataclasses.replace``) holds the keys those show too. Each pending pod's
    ``selector`` is the pairs of its ``node_selector`` whose key some GPU node's labels
    show (``_checkable``); a pod with no ``node_selector`` keeps its ``selector`` as
    given. Each arrival's ``selector`` likewise, from its ``node_selector``; its keys are
    not counted below. ``selectors_unchecked``: the nodeSelector keys (KSM's spelling) of pending
    pods that no GPU node's labels show, each with the number of pending pods selecting
    it; not held against any node. ``selectors_checked``: the keys (sorted) that were.
    ``priorities_unknown``: the priority class names of pending pods that
    ``--pending.priority-class`` gives no value, each with the number of pending pods of
    it; they are queued at 0, Kubernetes' default, and named in the log.
    ``selectors_not_read``: the nodeSelector keys past the cap of the node labels' read
    (``selector_plan``), each with the number of pending pods selecting it; the pods
    selecting one are not in ``pending`` (``rejected``: ``selector_not_read``) but when
    gated.
    """

    nodes: tuple[Node, ...] = ()
    holders: tuple[Holder, ...] = ()
    pending: tuple[PendingPod, ...] = ()
    scheduled: tuple[tuple[str, str], ...] = ()
    arrivals: tuple[Arrival, ...] = ()
    rejected: Mapping[str, int] = field(default_factory=dict)
    tolerations_missing: tuple[str, ...] = ()
    tolerations_read: tuple[str, ...] = ()
    created_missing: int = 0
    nodes_read: tuple[str, ...] = ()
    finished: tuple[tuple[str, str], ...] = ()
    priorities_unknown: Mapping[str, int] = field(default_factory=dict)
    selectors_not_read: Mapping[str, int] = field(default_factory=dict)
    selectors_unchecked: Mapping[str, int] = field(default_factory=dict, init=False)
    selectors_checked: tuple[str, ...] = field(default=(), init=False)

    def __post_init__(self) -> None:
        known = {key for n in self.nodes if n.labels for key in n.labels}
        unchecked: Counter[str] = Counter()
        checked: set[str] = set()
        pending = tuple(
            replace(p, selector=_checkable(dict(p.node_selector), known, unchecked, checked))
            if p.node_selector
            else p
            for p in self.pending
        )
        # the arrivals' pairs alike, their keys not counted: the log names the pending
        # pods' keys
        arrivals = tuple(
            replace(a, selector=tuple(sorted(kv for kv in a.node_selector if kv[0] in known)))
            if a.node_selector
            else a
            for a in self.arrivals
        )
        object.__setattr__(self, "pending", pending)
        object.__setattr__(self, "arrivals", arrivals)
        object.__setattr__(self, "selectors_unchecked", dict(unchecked))
        object.__setattr__(self, "selectors_checked", tuple(sorted(checked)))

    @property
    def tainted_nodes(self) -> int:
        """GPU nodes with a taint that keeps pods off (``queue_replay.policy_taints``).

        Derived from ``nodes`` rather than stored, so a queue with nodes added
        (``last_seen``'s, through ``dataclasses.replace``) counts theirs too: a count kept
        beside the nodes had to be redone by hand wherever nodes were added."""
        return sum(1 for n in self.nodes if policy_taints(n))


def _units(value: float) -> int | None:
    """Units of a node's allocatable or of an arrival; None when not a real count."""
    if not math.isfinite(value) or value <= 0 or value > MAX_UNITS:
        return None
    return math.ceil(value)


def _requested(value: float) -> int | None:
    """Units a pod asks for; None when NaN, infinite or negative.

    A request of 0 (``nvidia.com/gpu: 0``, which Kubernetes accepts and KSM exports as
    a series of value 0: a CPU-only profile overriding a GPU default) is 0 units, no GPU
    asked, not a malformed request: ``_PodRequests.add`` leaves it out, so the pod is
    neither queued nor counted as ``invalid_request``.

    Unlike ``_units`` there is no upper bound: a pending pod asking more than
    ``MAX_UNITS`` (more than any node has) stays in the queue, where the replay finds
    it fits nowhere and publishes it as ``never_fits`` (docs/pending.md), rather than
    vanishing from the queue's metrics.
    """
    if not math.isfinite(value) or value < 0:
        return None
    return math.ceil(value)


def _text(labels: Mapping[str, str], name: str, limit: int) -> str | None:
    """A label's value ("" when absent); None when longer than Kubernetes allows."""
    value = labels.get(name, "")
    return value if len(value) <= limit else None


def _taint(labels: Mapping[str, str]) -> Taint | None:
    """A ``kube_node_spec_taint`` series → (key, value, effect); None when malformed
    (no key, a key or value longer than Kubernetes allows, an unknown effect)."""
    key = _text(labels, "key", MAX_KEY_CHARS)
    value = _text(labels, "value", MAX_VALUE_CHARS)
    effect = labels.get("effect", "")
    if not key or value is None or effect not in EFFECTS:
        return None
    return (key, value, effect)


def _toleration(labels: Mapping[str, str]) -> Toleration | None:
    """A ``kube_pod_tolerations`` series → its toleration; None when malformed (an
    operator other than Equal, Exists, Lt or Gt, an unknown effect, a key or value
    longer than Kubernetes allows). An empty key (with Exists) is valid: it tolerates
    every key. An Lt or Gt toleration whose value is no integer is kept: it tolerates
    nothing, as in the scheduler (``Toleration.tolerates``)."""
    key = _text(labels, "key", MAX_KEY_CHARS)
    value = _text(labels, "value", MAX_VALUE_CHARS)
    operator = labels.get("operator", "")
    effect = labels.get("effect", "")
    if key is None or value is None or operator not in OPERATORS or effect not in ("", *EFFECTS):
        return None
    return Toleration(key, operator or "Equal", value, effect)


def _grouped(
    series: Sequence[Sample],
    tag: tuple[str, str],
    owner: str,
    read: Callable[[Mapping[str, str]], T | None],
    bad: str,
    rejected: Counter[str],
) -> tuple[dict[str, set[T]], set[str]]:
    """The series tagged ``tag`` (label, value) read by ``read`` and grouped by their
    ``owner`` label (a node, a pod's uid); one that cannot be read is skipped and
    counted as ``bad``, and its owner, when it names one, returned apart."""
    found: dict[str, set[T]] = {}
    damaged: set[str] = set()
    label, value = tag
    for s in series:
        if s.labels.get(label) != value:
            continue
        key, item = s.labels.get(owner, ""), read(s.labels)
        if not key or item is None:
            rejected[bad] += 1
            if key:
                damaged.add(key)
            continue
        found.setdefault(key, set()).add(item)
    return found, damaged


def _node_taints(series: Sequence[Sample], rejected: Counter[str]) -> dict[str, tuple[Taint, ...]]:
    """Each node's taints from the ``state="taint"`` series of the node-state query;
    malformed ones skipped and counted (``bad_taint_series``; the node keeps its other
    taints), and a node showing more than ``MAX_TAINTS`` keeps none (``too_many_taints``)."""
    found, _damaged = _grouped(
        series, ("state", "taint"), "node", _taint, "bad_taint_series", rejected
    )
    out = {}
    for node, taints in found.items():
        if len(taints) > MAX_TAINTS:
            rejected["too_many_taints"] += 1
            continue
        out[node] = tuple(sorted(taints))
    return out


def _pod_tolerations(
    series: Sequence[Sample],
    rejected: Counter[str],
    tag: tuple[str, str] = ("meta", "tolerations"),
) -> dict[str, tuple[Toleration, ...] | None]:
    """Each pod's tolerations (by uid) from the series tagged ``tag`` (label, value); a
    pod without any is absent. A pod with a malformed toleration
    (``bad_toleration_series``) or more than ``MAX_TOLERATIONS``
    (``too_many_tolerations``) gets None: unknown, every taint passes, rather than
    predicted to fit nowhere for want of the toleration skipped."""
    found, unknown = _grouped(series, tag, "uid", _toleration, "bad_toleration_series", rejected)
    out: dict[str, tuple[Toleration, ...] | None] = {uid: None for uid in unknown}
    for uid, tols in found.items():
        if uid in unknown:
            continue
        if len(tols) > MAX_TOLERATIONS:
            rejected["too_many_tolerations"] += 1
            out[uid] = None
            continue
        out[uid] = tuple(sorted(tols))
    return out


class _PodRequests:
    """A cycle's GPU requests per pod, app and init containers, → each pod's effective
    request (module docstring): collected series by series, then ``effective``."""

    def __init__(self, extra: Collection[str] = ()) -> None:
        self.extra = extra  # the site's GPU resources, KSM spelling (is_gpu_resource)
        self.who: dict[str, tuple[str, str]] = {}  # uid → namespace, pod
        self.node: dict[str, str] = {}  # uid → node, "" until bound
        self.phase: dict[str, str] = {}
        self.unusable: set[str] = set()  # pods with a request that is no count of units
        # (uid, resource, container) → an app container's units ("" for a series
        # without a container label: a pod's sum, taken as one container)
        self._app: dict[tuple[str, str, str], int] = {}
        # (uid, resource, container) → an init container's units, and whether a sidecar
        self._init: dict[tuple[str, str, str], tuple[int, bool]] = {}

    def add(self, s: Sample, rejected: Counter[str], init: bool = False) -> None:
        """One series of ``PODS`` (or of ``INIT_REQUESTS`` when ``init``): a container's
        request; malformed ones
        are counted (``bad_pod_series``), a request that is no count of units (NaN,
        negative) marks its pod (``unusable``), a request of 0 is left out (no GPU
        asked). A series with a node wins over one without: two KSM replicas disagree
        for a scrape on a pod just bound, and a bound pod holds its GPUs."""
        lab = s.labels
        uid, res = lab.get("uid", ""), lab.get("resource", "")
        if (
            not uid
            or not lab.get("namespace")
            or not lab.get("pod")
            or not is_gpu_resource(res, self.extra)
        ):
            rejected["bad_pod_series"] += 1
            return
        units = _requested(s.value)
        if units is None:
            self.unusable.add(uid)
            return
        if not units:  # ``nvidia.com/gpu: 0``: valid, and no GPU asked
            return
        self.who.setdefault(uid, (lab["namespace"], lab["pod"]))
        self.phase.setdefault(uid, lab.get("phase", ""))
        if lab.get("node") or uid not in self.node:
            self.node[uid] = lab.get("node", "")
        key = (uid, res, lab.get("container", ""))
        if not init:  # two series, node apart, are the same container's
            self._app[key] = max(self._app.get(key, 0), units)
            return
        before, was_sidecar = self._init.get(key, (0, False))
        self._init[key] = (max(before, units), was_sidecar or lab.get("sidecar") == "true")

    def effective(self) -> dict[str, tuple[str, str, str, str, int, int]]:
        """uid → (namespace, pod, node, resource, units, largest) of its largest effective
        request: ``max(app + sidecars, largest plain init container + sidecars)`` per
        resource (the first resource by name among equal ones), and the largest request
        one of its containers (app or init) makes of that resource."""
        app: dict[tuple[str, str], int] = {}
        plain: dict[tuple[str, str], int] = {}
        sidecars: dict[tuple[str, str], int] = {}
        largest: dict[tuple[str, str], int] = {}
        for (uid, res, _container), units in self._app.items():
            app[(uid, res)] = app.get((uid, res), 0) + units
            largest[(uid, res)] = max(largest.get((uid, res), 0), units)
        for (uid, res, _container), (units, sidecar) in self._init.items():
            if sidecar:
                sidecars[(uid, res)] = sidecars.get((uid, res), 0) + units
            else:
                plain[(uid, res)] = max(plain.get((uid, res), 0), units)
            largest[(uid, res)] = max(largest.get((uid, res), 0), units)
        out: dict[str, tuple[str, str, str, str, int, int]] = {}
        for uid, res in sorted(largest):
            side = sidecars.get((uid, res), 0)
            units = max(app.get((uid, res), 0), plain.get((uid, res), 0)) + side
            if uid not in out or units > out[uid][4]:
                out[uid] = (*self.who[uid], self.node[uid], res, units, largest[(uid, res)])
        return out


# resource, units, tolerations, product, priority, node selector
ArrivalKey = tuple[str, int, tuple[Toleration, ...] | None, str, int, Selector]


def _arrival_order(key: ArrivalKey) -> tuple:
    """A sort key for arrival shapes: by resource, units, then tolerations (unknown
    ones last), then product, then priority, then node selector."""
    res, units, tols, product, priority, selector = key
    return (res, units, tols is None, tols or (), product, priority, selector)


def _selections(
    series: Sequence[Sample], tag: tuple[str, str]
) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """Each pod's nodeSelector (by uid) from the ``kube_pod_nodeselectors`` series tagged
    ``tag`` (a pending pod's ``meta``, an arrival's), in one walk: (its selected GPU
    type, ``SELECTOR_LABEL``; its other pairs, key in KSM's spelling with
    ``nodeselector_`` cut off → value). A pod that selected no type is absent from the
    first, one selecting nothing else from the second. Kubernetes only lets a pod's
    ``nodeSelector`` grow (while scheduling-gated), so a pod shows one type at most;
    should two replicas disagree, the first value by name is kept, deterministically,
    for a pending pod and an arrival alike."""
    label, value = tag
    products: dict[str, str] = {}
    others: dict[str, dict[str, str]] = {}
    for s in series:
        uid = s.labels.get("uid", "")
        if s.labels.get(label) != value or not uid:
            continue
        for name, wanted in s.labels.items():
            if not wanted or not name.startswith(SELECTOR_PREFIX):
                continue
            if name == SELECTOR_LABEL:
                if uid not in products or wanted < products[uid]:
                    products[uid] = wanted
                continue
            pairs = others.setdefault(uid, {})
            key = name[len(SELECTOR_PREFIX) :]
            if key not in pairs or wanted < pairs[key]:
                pairs[key] = wanted
    return products, others


def _by_tag(series: Sequence[Sample], label: str) -> dict[str, list[Sample]]:
    """``series`` split by their ``label`` (the tag ``_tagged`` gives each part of a
    query), in one walk, so each part's reader walks its own series only."""
    out: dict[str, list[Sample]] = {}
    for s in series:
        out.setdefault(s.labels.get(label, ""), []).append(s)
    return out


def _node_labels(series: Sequence[Sample]) -> dict[str, dict[str, str]]:
    """Each GPU node's labels from ``kube_node_labels`` (``NODE_LABELS``): key in KSM's
    spelling (``label_`` cut off) → value. A node with a series and no allow-listed
    label gets its hostname alone (below); one without any series is absent (not
    known). Two KSM replicas disagreeing for a scrape on a label just changed: the first
    value by name is kept.

    ``kubernetes.io/hostname`` (``HOSTNAME_KEY``), the usual way to pin a pod to one
    node, is taken from the series' ``node`` label where KSM does not export it: the
    kubelet sets it to the node's name (EKS, GKE, AKS, kubeadm), and KSM's default
    allow-list exports no node label. An exported value wins (a kubelet run with
    ``--hostname-override``)."""
    out: dict[str, dict[str, str]] = {}
    for s in series:
        node = s.labels.get("node", "")
        if not node:
            continue
        labels = out.setdefault(node, {})
        for name, value in s.labels.items():
            if name.startswith(NODE_LABEL_PREFIX) and value:
                key = name[len(NODE_LABEL_PREFIX) :]
                if key not in labels or value < labels[key]:
                    labels[key] = value
    for node, labels in out.items():
        labels.setdefault(HOSTNAME_KEY, node)
    return out


def _checkable(
    wanted: Mapping[str, str], known: Collection[str], unchecked: Counter[str], checked: set[str]
) -> Selector:
    """The pairs of a pod's nodeSelector ``wanted`` whose key some GPU node's labels show
    (``known``), sorted, their keys added to ``checked``; each other key counted in
    ``unchecked``. Why not hold the pod to those too: KSM exports only the allow-listed
    node labels, so a key no node shows is most likely one the site did not allow-list,
    not one no node carries; requiring it would make the pod ``never_fits`` on every
    cluster that selects a pool without allow-listing its label. The pod is matched as
    if it did not select that key, and the key named in the queue's log line
    (docs/pending.md)."""
    pairs = []
    for key, value in sorted(wanted.items()):
        if key in known:
            pairs.append((key, value))
            checked.add(key)
        else:
            unchecked[key] += 1
    return tuple(pairs)


def _arrivals(
    series: Sequence[Sample],
    arrivals_seconds: float,
    extra: Collection[str] = (),
    priorities: Mapping[str, int] | None = None,
    read: Collection[str] = (),
) -> tuple[Arrival, ...]:
    """GPU pods created in the window (``ARRIVALS``), or first seen in it where KSM
    exports no ``kube_pod_created`` (``ARRIVALS_SEEN``, the same ``request`` series) →
    one ``Arrival`` per (resource, units, tolerations, product, priority, node
    selector), at the rate such pods were created.

    Each pod's tolerations come with it (``arrival="tolerations"``), so pods arriving
    later land only where the recent pods of their shape could: pods from outside a
    team's tainted pool take none of its GPUs. A pod without toleration series gets
    None (unknown, every taint passes), as a pending pod does (module docstring): with
    ``kube_pod_tolerations`` dropped, arrivals tolerating nothing would fit no GPU node
    of a cluster tainting them all ``nvidia.com/gpu``. Malformed series are skipped
    uncounted (the pending pods' own are counted once, from ``POD_META``); a pod with a
    malformed toleration is unknown.

    Each pod's GPU type comes with it too (``arrival="nodeselectors"``,
    ``nodeselector_nvidia_com_gpu_product`` as for a pending pod), so on a cluster of
    several types the A100 pods arriving later take only A100 GPUs, not the H100s a
    queued H100 pod waits for. A pod that selected no type (or whose selectors KSM
    does not show: ``kube_pod_nodeselectors`` is opt-in) gets "": any type. Its other
    nodeSelector pairs (``Arrival.node_selector``: a pool, ``kubernetes.io/hostname``)
    come with it too, those of the keys whose node labels the second round read
    (``read``, ``selector_plan``), which ``ClusterQueue`` holds against the nodes as it
    does a pending pod's: pods arriving pinned to team a's pool land there only, not in
    team b's where a team-b pod waits. A key not read (past the cap, or nothing waiting)
    is not held: a node read without it would otherwise be closed to them.

    And its priority (``arrival="info"``, ``kube_pod_info``'s ``priority_class``, valued
    by ``priorities``; none, or a class without a value: 0), by which the replay queues
    the pods arriving later ahead of waiting pods of lower priority (``Arrival``)."""
    tolerations = _pod_tolerations(series, Counter(), ("arrival", "tolerations"))
    products, others = _selections(series, ("arrival", "nodeselectors"))
    values = priorities or {}
    priority = {
        s.labels.get("uid", ""): values.get(s.labels.get("priority_class", ""), 0)
        for s in series
        if s.labels.get("arrival") == "info"
    }
    shapes: Counter[ArrivalKey] = Counter()
    seen = set()
    for s in series:
        if s.labels.get("arrival") != "request":
            continue
        uid, res = s.labels.get("uid", ""), s.labels.get("resource", "")
        units = _units(s.value)
        if not uid or units is None or not is_gpu_resource(res, extra) or uid in seen:
            continue
        seen.add(uid)
        pairs = tuple(sorted((k, v) for k, v in others.get(uid, {}).items() if k in read))
        product = products.get(uid, "")
        shapes[(res, units, tolerations.get(uid), product, priority.get(uid, 0), pairs)] += 1
    return tuple(
        Arrival(res, units, n / arrivals_seconds, product, tols, prio, node_selector=pairs)
        for (res, units, tols, product, prio, pairs), n in sorted(
            shapes.items(), key=lambda kv: _arrival_order(kv[0])
        )
    )


def _release(
    owners: Collection[tuple[str, str]], policy: str | None
) -> tuple[bool | None, tuple[str, str] | None]:
    """Whether a GPU pod ends with its run, and the owner (kind, name) it shares a
    run with, from its ``kube_pod_owner`` series (``owners``: (kind, name) each) and its
    restart policy (None: no ``kube_pod_restart_policy`` series).

    Why: a forecast is a run's end, which frees the GPUs of a Job's pod but not of a
    notebook server's. A pod owned by a ``RUN_OWNER_KINDS`` kind ends with its run
    (that owner returned: its other pods end with the same run); one owned by anything
    else (a StatefulSet: a Kubeflow Notebook; a ReplicaSet: a Deployment) outlives it; a
    bare pod ends with its run only with ``restartPolicy: Never`` (``kubectl run
    --restart=Never``), not ``OnFailure`` (KubeSpawner's notebook servers) nor
    ``Always``, nor an unknown one (OpenShift's KSM and kube-prometheus' ``ksm-lite``
    denylist ``kube_pod_restart_policy``). No owner series at all: not known (None, a
    run's end as before: ``kube_pod_owner`` dropped)."""
    if not owners:
        return None, None
    for kind, name in sorted(owners):
        if kind in RUN_OWNER_KINDS and name:
            return True, (kind, name)
    if all(kind in (NO_OWNER, "") for kind, _ in owners):
        return policy == "Never", None
    return False, None


def gfd_product(model: str) -> str:
    """The ``nvidia.com/gpu.product`` label GPU feature discovery writes for a GPU whose
    NVML name is ``model``: spaces become hyphens, nothing else changes
    (``NVIDIA A100-SXM4-80GB`` → ``NVIDIA-A100-SXM4-80GB``; the device plugin's
    ``internal/lm/resource.go``, ``productLabel``). Pods select that spelling, so a node
    typed from gpu-eta's exporter (the NVML name) must carry it to match them."""
    return model.replace(" ", "-")


def parse(
    samples: Mapping[str, Sequence[Sample]],
    now: float,
    node_models: Mapping[str, str] | None = None,
    priorities: Mapping[str, int] | None = None,
    arrivals_seconds: float = 3600.0,
    gpu_resources: Sequence[str] = (),
) -> ClusterQueue:
    """Pure: one cycle's answers to ``QUERIES`` → nodes, holders, pending pods, arrivals.

    ``node_models``: node → GPU model from gpu-eta's exporter (the NVML name), used
    where KSM has no product label, in GPU feature discovery's spelling
    (``gfd_product``). ``priorities``: priority class name → value. ``gpu_resources``:
    the site's own GPU resources (Kubernetes names, those ``render`` was given), read as
    ``nvidia_com_gpu`` is: a time-slicing rename's replicas are shared on a node
    labelled with replicas, as ``nvidia_com_gpu``'s are. A pod asking for
    several GPU resources at once (rare) is placed on its largest request.
    ``priorities`` also say which nodeSelector keys the second round read
    (``selector_plan``), as ``second_round`` was given them.

    Nothing is dropped unseen: a malformed sample or a pod that cannot be placed is
    counted in ``ClusterQueue.rejected`` by reason (``invalid_allocatable``: a node's
    GPU units NaN, negative or beyond ``MAX_UNITS``, the node left out as one with none;
    a node whose GPUs are all 0 allocatable with a capacity is kept closed, its capacity
    its units;
    ``invalid_request``: a pod whose
    GPU request is NaN or negative, or a bound pod asking more than ``MAX_UNITS`` (a
    request of 0 is no GPU asked: the pod is no GPU pod, not counted);
    ``bad_taint_series``, ``too_many_taints``: a node taint skipped, a node's taints
    all; ``bad_toleration_series``, ``too_many_tolerations``: a pod whose tolerations
    are then unknown, every taint passing for it; ``selector_not_read``: a pending pod
    selecting a nodeSelector key past the cap of the node labels' read, which might
    keep it off any node: no node is known to hold it, so it gets no prediction; one
    its scheduling gates hold is kept, gated); a pending pod asking more units than
    any node has is kept (``never_fits``). A pending pod without any toleration series
    is predicted as if it tolerated every taint and counted apart, not as rejected
    (its namespace in ``ClusterQueue.tolerations_missing``): its series are missing,
    none is malformed.
    """
    rejected: Counter[str] = Counter()
    priorities = priorities or {}
    node_models = node_models or {}
    extra = frozenset(ksm_gpu_resources(gpu_resources))

    def get(name: str) -> Sequence[Sample]:
        return samples.get(name, ())

    # nodes
    node_labels = _node_labels([s for i in range(MAX_LABEL_PARTS) for s in get(node_label_part(i))])
    labels: dict[str, Mapping[str, str]] = {}
    alloc: dict[str, dict[str, int]] = {}
    down: dict[str, dict[str, int]] = {}  # nodes with their device plugin away
    # every GPU node's allocatable series, 0 included: the other node parts are read
    # for those nodes only
    nodes_read: set[str] = set()
    for s in get("ksm_nodes"):
        node, res = s.labels.get("node", ""), s.labels.get("resource", "")
        if node:
            nodes_read.add(node)
        units = _units(s.value)
        if not node or not is_gpu_resource(res, extra):
            rejected["bad_node_series"] += 1
            continue
        if PRODUCT_LABEL in s.labels or REPLICAS_LABEL in s.labels:
            labels[node] = s.labels
        if units is None:
            if s.value != 0:  # 0: a GPU node with its plugin down, nothing wrong
                rejected["invalid_allocatable"] += 1
            continue
        alloc.setdefault(node, {})[res] = units
    # cordoned, not Ready or being removed by an autoscaler: the node takes no new pod
    # (its pods run on); one under pressure takes those tolerating it (pressure_taints)
    closed = {
        s.labels.get("node", "")
        for s in get("ksm_node_state")
        if s.labels.get("state") in ("cordoned", "not_ready")
    }
    taints = _node_taints(get("ksm_node_state"), rejected)
    closed |= {node for node, held in taints.items() if leaving(held)}
    # a GPU node whose every GPU resource is 0 allocatable with a capacity: its device
    # plugin is away (NODE_CAPACITY); it keeps its GPUs and its pods, and takes no new
    # pod until the plugin is back (its pods wait: no_schedulable_node, not never_fits)
    for s in get("ksm_node_capacity"):
        node, res = s.labels.get("node", ""), s.labels.get("resource", "")
        units = _units(s.value)
        if not node or not is_gpu_resource(res, extra):
            rejected["bad_node_series"] += 1
        elif units is None:
            rejected["invalid_allocatable"] += 1
        elif node not in alloc:  # else its plugin came back between two scrapes
            down.setdefault(node, {})[res] = units
    for node, resources in down.items():
        alloc[node] = resources
        closed.add(node)
    nodes = []
    for name, resources in sorted(alloc.items()):
        lab = labels.get(name, {})
        from_model = not lab.get(PRODUCT_LABEL) and bool(node_models.get(name))
        product = lab.get(PRODUCT_LABEL) or gfd_product(node_models.get(name, ""))
        try:
            replicas = int(lab.get(REPLICAS_LABEL, "1") or "1")
        except ValueError:
            replicas = 1
        shared = {}
        if replicas > 1:
            # whole GPUs and the site's own names (a time-slicing rename) are the replicas
            # the label counts; a built-in resource named again (a MIG slice) stays built-in
            shared = {
                r: v
                for r, v in resources.items()
                if r == "nvidia_com_gpu" or (r in extra and not is_built_in(r))
            }
        # replicas renamed (the plugin's ``renameByDefault``: ``nvidia.com/gpu.shared``,
        # ``nvidia.com/mig-1g.10gb.shared``; a site's ``rename: ...-shared``) are known
        # by their name, with or without the replicas label
        shared.update({r: v for r, v in resources.items() if r.endswith(SHARED_SUFFIX)})
        nodes.append(
            Node(
                name,
                dict(resources),
                product,
                shared,
                name not in closed,
                taints.get(name, ()),
                node_labels.get(name),
                product_from_model=from_model,
            )
        )

    # pods: their largest effective GPU request (app and init containers), phase, node
    pods = _PodRequests(extra)
    for s in get("ksm_pods"):
        pods.add(s, rejected)
    for s in get("ksm_init_requests"):
        pods.add(s, rejected, init=True)
    requests = pods.effective()
    phase, unusable = pods.phase, pods.unusable
    created: dict[str, float] = {}
    started: dict[str, float] = {}
    deleted: dict[str, float] = {}
    finished: set[tuple[str, str]] = set()
    for s in get("ksm_pod_times"):
        time_of = s.labels.get("time", "")
        if time_of == "finished":
            finished.add((s.labels.get("namespace", ""), s.labels.get("pod", "")))
            continue
        target = {"created": created, "started": started, "deleted": deleted}.get(time_of)
        if target is not None:
            target[s.labels.get("uid", "")] = s.value
    since = {s.labels.get("uid", ""): s.value for s in get(PENDING_SINCE_PART)}
    meta = _by_tag(get("ksm_pod_meta"), "meta")
    tolerations = _pod_tolerations(meta.get("tolerations", ()), rejected)
    selector, selects = _selections(meta.get("nodeselectors", ()), ("meta", "nodeselectors"))
    klass = {
        s.labels.get("uid", ""): s.labels.get("priority_class", "") for s in meta.get("info", ())
    }
    # a pod's controller among its owner references decides (a Job's pod may also carry
    # a non-controller reference to something else); no controller named: every one
    every: dict[str, set[tuple[str, str]]] = {}
    controlling: dict[str, set[tuple[str, str]]] = {}
    for s in meta.get("owner", ()):
        owner = (s.labels.get("owner_kind", ""), s.labels.get("owner_name", ""))
        uid = s.labels.get("uid", "")
        every.setdefault(uid, set()).add(owner)
        if s.labels.get("owner_is_controller") == "true":
            controlling.setdefault(uid, set()).add(owner)
    owners = {uid: controlling.get(uid) or refs for uid, refs in every.items()}
    policy = {
        s.labels.get("uid", ""): s.labels.get("type", "") for s in meta.get("restart_policy", ())
    }
    gated = {s.labels.get("uid", "") for s in meta.get("gated", ())}
    plan = selector_plan(samples, priorities)
    not_read = plan.not_read
    # pods whose nodeSelector series the answer parser left out: what they select is
    # not known (SKIPPED_LABELS)
    unreadable = {
        s.labels.get("uid", "")
        for s in get(skipped_name("ksm_pod_meta"))
        if s.labels.get("meta") == "nodeselectors"
    }

    # a pod whose every GPU request is NaN or negative; one with another usable
    # request is placed on that one
    if unusable - requests.keys():
        rejected["invalid_request"] += len(unusable - requests.keys())

    # which of each node's resources are time-sliced replicas: a pod holding one holds a
    # replica (a resource ending in ``_shared`` always, ``nvidia_com_gpu`` and the site's
    # own on a node labelled with replicas), whatever else the node offers (a MIG slice
    # not renamed never)
    shared_of = {n.name: n.shared for n in nodes}
    holders, pending, scheduled = [], [], []
    missing_in: set[str] = set()  # namespaces of pending pods without toleration series
    read_in: set[str] = set()  # ... and of those with
    first_seen = 0  # pending pods without kube_pod_created, placed by PENDING_SINCE
    unknown: Counter[str] = Counter()  # priority class names without a value → pods
    for uid, (ns, pod, node, res, units, largest) in sorted(requests.items()):
        ph = phase.get(uid)
        if ph == "Running" or (ph == "Pending" and node):
            if not node:
                rejected["running_without_node"] += 1
                continue
            if units > MAX_UNITS:  # no node holds that many: a garbage value
                rejected["invalid_request"] += 1
                continue
            start = started.get(uid)
            start = start if start is not None and math.isfinite(start) else None
            shared = res in shared_of.get(node, {})
            gone = deleted.get(uid)
            gone = gone if gone is not None and math.isfinite(gone) else None
            ends_with_run, owner = _release(owners.get(uid, ()), policy.get(uid))
            holders.append(
                Holder(
                    ns, pod, node, res, units, None, start, shared, gone, uid, ends_with_run, owner
                )
            )
            if ph == "Pending":
                scheduled.append((ns, pod))
        elif ph == "Pending":
            if deleted.get(uid) is not None:
                # being deleted (a Job's pod held by the job-tracking finalizer, a
                # suspended Kueue workload's): kube-scheduler skips such a pod, so it
                # takes no GPU from the pods behind it (module docstring)
                rejected["being_deleted"] += 1
                continue
            wanted = selects.get(uid, {})
            if uid not in gated and (uid in unreadable or not_read.keys() & wanted.keys()):
                # a key whose node labels were not read (past the cap), or keys not
                # known at all: which nodes hold them is not known, so where the pod may
                # start is not either
                rejected["selector_not_read"] += 1
                continue
            c = created.get(uid)
            if c is None and uid in since:  # kube_pod_created missing (module docstring)
                c = since[uid]
                first_seen += 1
            if c is None or not math.isfinite(c) or c > now + 300:
                rejected["bad_created"] += 1
                continue
            name = klass.get(uid, "")
            if name and name not in priorities:
                unknown[name] += 1
            pending.append(
                PendingPod(
                    ns,
                    pod,
                    res,
                    units,
                    c,
                    priorities.get(name, 0),
                    selector.get(uid, ""),
                    # no series: missing, not tolerating nothing (module docstring)
                    tolerations.get(uid),
                    # held against the nodes by ClusterQueue (its docstring)
                    node_selector=tuple(
                        sorted((k, v) for k, v in wanted.items() if k not in not_read)
                    ),
                    uid=uid,
                    gated=uid in gated,
                    largest_container_units=largest,
                )
            )
            (read_in if uid in tolerations else missing_in).add(ns)

    # without kube_pod_created, the GPU pods first seen in the window (denylisted)
    arrivals = _arrivals(
        [*get("ksm_arrivals"), *get(ARRIVALS_SEEN_PART)],
        arrivals_seconds,
        extra,
        priorities,
        frozenset(plan.read),
    )
    return ClusterQueue(
        tuple(nodes),
        tuple(holders),
        tuple(pending),
        tuple(scheduled),
        arrivals,
        dict(rejected),
        tuple(sorted(missing_in)),
        tuple(sorted(read_in)),
        first_seen,
        nodes_read=tuple(sorted(nodes_read)),
        finished=tuple(sorted(finished)),
        priorities_unknown=dict(unknown),
        selectors_not_read=dict(not_read),
    )
