"""kube-state-metrics-shaped series for the simulated cluster (and for tests).

Why: the forecaster reads the GPU queue from kube-state-metrics (forecaster/kube_state.py);
the demo has no Kubernetes, so it serves what kube-state-metrics would serve for its
simulated pods and nodes, with the real exporter's names, label names and types
(upstream docs/metrics/workload/pod-metrics.md and docs/metrics/cluster/node-metrics.md):
``kube_pod_status_phase`` (one series per phase, 1 for the current one),
``kube_pod_container_resource_requests`` (``resource`` sanitised as KSM does,
``nvidia.com/gpu`` → ``nvidia_com_gpu``, ``unit="integer"``, ``node`` empty until bound),
``kube_pod_init_container_resource_requests`` (the same labels, for init containers)
and ``kube_pod_init_container_info`` (``container, image_spec, image, image_id,
container_id, restart_policy``, the last ``Always`` for a sidecar; only
once the pod is bound, as KSM writes it only for init containers with a status),
``kube_pod_created``, ``kube_pod_start_time``, ``kube_pod_info`` (with
``priority_class``; ``created_by_kind``/``created_by_name`` its controller's;
``pod_ip``/``host_ip`` once it runs), ``kube_pod_owner`` (``owner_kind, owner_name,
owner_is_controller``; a pod is a Job's unless told; for a pod without an owner
``<none>`` in these and in ``created_by_*``, as KSM's earlier v2 releases write it,
later ones "": the forecaster reads either),
``kube_pod_restart_policy`` (``type``), ``kube_pod_nodeselectors`` (opt-in upstream),
``kube_node_status_allocatable`` and ``kube_node_status_capacity`` (``node, resource,
unit``; KSM writes both for every node, the capacity counting unhealthy devices too:
GpuEtaExporterMissing reads it), ``kube_node_labels`` (only allow-listed labels, as
``label_<sanitised key>``), ``kube_node_spec_unschedulable``,
``kube_node_status_condition`` (the conditions a kubelet reports, ``Ready``,
``MemoryPressure``, ``DiskPressure`` and ``PIDPressure``, one series per status),
``kube_node_spec_taint`` (one series per taint: ``key, value, effect``) and
``kube_pod_tolerations`` (one series per distinct toleration: ``key, operator, value,
effect, toleration_seconds``) and ``kube_pod_status_reason`` (``reason``; KSM 2.19 and
later list ``SchedulingGated``, 1 while the pod's ``PodScheduled`` condition has that
reason, i.e. its scheduling gates hold it: kubernetes/kube-state-metrics#2880; before
2.20 one series per reason KSM knows, 0 or 1, from 2.20 only the reason set, #3089).
Every label a family has is written, empty values too,
as KSM writes them (``pkg/metric/metric.go`` writes each label key with its value):
an unbound pod's requests carry ``node=""``. Prometheus drops empty labels when it
stores a sample, but an empty one still counts at scrape time: under ``honor_labels``
it keeps a target label of the same name (a ``node`` relabelled from the KSM pod's
``__meta_kubernetes_pod_node_name``) off the series.

Pure: records in, exposition text out; ``from_sim`` reads a ``ClusterSim``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpu_eta.common.k8s_names import ksm_label
from gpu_eta.exporter.exposition import escape_label_value
from gpu_eta.forecaster.kube_state import NO_OWNER
from gpu_eta.simulation.cluster import ClusterSim, NodeSpec, Pod, Taint

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# the reasons ``kube_pod_status_reason`` writes a series for (KSM ``pod.go``
# ``podStatusReasons``; docs/metrics/workload/pod-metrics.md): 2.19 added
# ``SchedulingGated`` (#2880), ``PreemptionByScheduler`` and ``TerminationByKubelet``
# (#2892); 2.10-2.18 wrote the others only
STATUS_REASONS = (
    "Evicted",
    "NodeAffinity",
    "NodeLost",
    "PreemptionByScheduler",
    "SchedulingGated",
    "Shutdown",
    "TerminationByKubelet",
    "UnexpectedAdmissionError",
)
STATUS_REASONS_2_10 = (
    "Evicted",
    "NodeAffinity",
    "NodeLost",
    "Shutdown",
    "UnexpectedAdmissionError",
)
GPU = "nvidia.com/gpu"
DEFAULT_LABEL_ALLOWLIST = ("nvidia.com/gpu.product",)


@dataclass(frozen=True, slots=True)
class KsmNode:
    """A node: allocatable resources (Kubernetes names), its labels and taints;
    ``capacity`` None: the same as ``allocatable`` (no device unhealthy)."""

    name: str
    allocatable: Mapping[str, int]
    labels: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False  # cordoned
    ready: bool = True
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    capacity: Mapping[str, int] | None = None
    memory_pressure: bool = False  # its ``MemoryPressure`` condition True


@dataclass(frozen=True, slots=True)
class KsmToleration:
    """A pod's toleration as the Kubernetes spec writes it ("" for a field left unset)."""

    key: str = ""
    operator: str = ""
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class KsmPod:
    """A pod as kube-state-metrics sees it (times in unix seconds)."""

    namespace: str
    pod: str
    uid: str
    phase: str
    created: float
    requests: Mapping[str, int]  # resource (Kubernetes name) → amount
    container: str = "main"
    node: str = ""
    start_time: float | None = None
    priority_class: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # other containers of the pod: name → their requests (``requests`` is ``container``'s)
    more_containers: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    tolerations: tuple[KsmToleration, ...] = ()
    # init containers: name → their requests; ``sidecars`` names the restartable ones
    init_containers: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    sidecars: tuple[str, ...] = ()
    # its owner (``metadata.ownerReferences``): a Job's pod unless told, named as the pod
    # when ``owner_name`` is ""; ``NO_OWNER`` for a bare pod
    owner_kind: str = "Job"
    owner_name: str = ""
    restart_policy: str = "Never"  # ``spec.restartPolicy``
    # ``spec.schedulingGates`` not empty (Kueue's admission gate): the API server sets its
    # ``PodScheduled`` condition False with reason ``SchedulingGated``
    scheduling_gated: bool = False
    # ``status.podIP`` and ``status.hostIP``: "" until the kubelet has started the pod
    pod_ip: str = ""
    host_ip: str = ""


def _line(name: str, labels: Mapping[str, str], value: float) -> str:
    """One sample line, every label written, empty ones too (as KSM writes them)."""
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels.items())
    return f"{name}{{{body}}} {value!r}" if body else f"{name} {value!r}"


_HELP = {
    "kube_pod_info": "Information about pod.",
    "kube_pod_created": "Unix creation timestamp",
    "kube_pod_start_time": "Start time in unix timestamp for a pod.",
    "kube_pod_status_phase": "The pods current phase.",
    "kube_pod_nodeselectors": "Describes the Pod nodeSelectors.",
    "kube_pod_owner": "Information about the Pod's owner.",
    "kube_pod_restart_policy": "Describes the restart policy in use by this pod.",
    "kube_pod_container_resource_requests": (
        "The number of requested request resource by a container. It is recommended to use "
        "the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is "
        "more precise."
    ),
    "kube_pod_tolerations": "Information about the pod tolerations",
    "kube_pod_status_reason": "The pod status reasons",
    "kube_pod_init_container_info": "Information about an init container in a pod.",
    "kube_pod_init_container_resource_requests": (
        "The number of requested request resource by an init container."
    ),
    "kube_node_labels": "Kubernetes labels converted to Prometheus labels.",
    "kube_node_spec_unschedulable": "Whether a node can schedule new pods.",
    "kube_node_spec_taint": "The taint of a cluster node.",
    "kube_node_status_condition": "The condition of a cluster node.",
    "kube_node_status_allocatable": (
        "The allocatable for different resources of a node that are available for scheduling."
    ),
    "kube_node_status_capacity": "The capacity for different resources of a node.",
}


def exposition(
    nodes: Iterable[KsmNode],
    pods: Iterable[KsmPod],
    label_allowlist: Sequence[str] = DEFAULT_LABEL_ALLOWLIST,
    status_reasons: Sequence[str] = STATUS_REASONS,
    only_set_reasons: bool = False,
) -> str:
    """The Prometheus text exposition KSM would serve for these nodes and pods.

    ``status_reasons``: the reasons ``kube_pod_status_reason`` knows (KSM 2.19's by
    default, ``STATUS_REASONS_2_10`` for 2.10-2.18, which cannot show a gated pod);
    ``only_set_reasons``: KSM 2.20 and later, a series only for the reason set."""
    families: dict[str, list[str]] = {name: [] for name in _HELP}
    for n in nodes:
        labels = {"node": n.name}
        labels.update(
            {
                f"label_{ksm_label(k)}": v
                for k, v in sorted(n.labels.items())
                if k in label_allowlist
            }
        )
        families["kube_node_labels"].append(_line("kube_node_labels", labels, 1.0))
        families["kube_node_spec_unschedulable"].append(
            _line("kube_node_spec_unschedulable", {"node": n.name}, float(n.unschedulable))
        )
        for key, value, effect in n.taints:
            families["kube_node_spec_taint"].append(
                _line(
                    "kube_node_spec_taint",
                    {"node": n.name, "key": key, "value": value, "effect": effect},
                    1.0,
                )
            )
        for condition, true in (
            ("Ready", n.ready),
            ("MemoryPressure", n.memory_pressure),
            ("DiskPressure", False),
            ("PIDPressure", False),
        ):
            for status in ("true", "false", "unknown"):
                families["kube_node_status_condition"].append(
                    _line(
                        "kube_node_status_condition",
                        {"node": n.name, "condition": condition, "status": status},
                        float(status == ("true" if true else "false")),
                    )
                )
        capacity = n.allocatable if n.capacity is None else n.capacity
        for family, amounts in (
            ("kube_node_status_allocatable", n.allocatable),
            ("kube_node_status_capacity", capacity),
        ):
            for res, amount in sorted(amounts.items()):
                families[family].append(
                    _line(
                        family,
                        {"node": n.name, "resource": ksm_label(res), "unit": "integer"},
                        float(amount),
                    )
                )
    for p in pods:
        base = {"namespace": p.namespace, "pod": p.pod, "uid": p.uid}
        # a pod without an owner reference: "<none>" in every owner label of both
        # families, as KSM's earlier v2 releases write it (later ones write ""; the
        # forecaster reads either: kube_state._release)
        owner = (
            (NO_OWNER,) * 3
            if p.owner_kind == NO_OWNER
            else (p.owner_kind, p.owner_name or p.pod, "true")
        )
        families["kube_pod_info"].append(
            _line(
                "kube_pod_info",
                {
                    **base,
                    "host_ip": p.host_ip,
                    "pod_ip": p.pod_ip,
                    "node": p.node,
                    # its controller (every owner here is one), as kube_pod_owner's
                    "created_by_kind": owner[0],
                    "created_by_name": owner[1],
                    "priority_class": p.priority_class,
                    "host_network": "false",
                },
                1.0,
            )
        )
        families["kube_pod_created"].append(_line("kube_pod_created", base, float(p.created)))
        families["kube_pod_owner"].append(
            _line(
                "kube_pod_owner",
                {
                    **base,
                    "owner_kind": owner[0],
                    "owner_name": owner[1],
                    "owner_is_controller": owner[2],
                },
                1.0,
            )
        )
        families["kube_pod_restart_policy"].append(
            _line("kube_pod_restart_policy", {**base, "type": p.restart_policy}, 1.0)
        )
        if p.start_time is not None:
            families["kube_pod_start_time"].append(
                _line("kube_pod_start_time", base, float(p.start_time))
            )
        for reason in status_reasons:
            is_set = reason == "SchedulingGated" and p.scheduling_gated
            if is_set or not only_set_reasons:
                families["kube_pod_status_reason"].append(
                    _line("kube_pod_status_reason", {**base, "reason": reason}, float(is_set))
                )
        for phase in PHASES:
            families["kube_pod_status_phase"].append(
                _line(
                    "kube_pod_status_phase",
                    {**base, "phase": phase},
                    1.0 if phase == p.phase else 0.0,
                )
            )
        families["kube_pod_nodeselectors"].append(
            _line(
                "kube_pod_nodeselectors",
                {**base, **{f"nodeselector_{ksm_label(k)}": v for k, v in p.node_selector.items()}},
                1.0,
            )
        )
        for t in dict.fromkeys(p.tolerations):  # KSM writes each distinct toleration once
            seconds = "" if t.toleration_seconds is None else str(t.toleration_seconds)
            families["kube_pod_tolerations"].append(
                _line(
                    "kube_pod_tolerations",
                    {
                        **base,
                        "key": t.key,
                        "operator": t.operator,
                        "value": t.value,
                        "effect": t.effect,
                        "toleration_seconds": seconds,
                    },
                    1.0,
                )
            )
        for container, requests in ((p.container, p.requests), *p.more_containers.items()):
            for res, amount in sorted(requests.items()):
                families["kube_pod_container_resource_requests"].append(
                    _line(
                        "kube_pod_container_resource_requests",
                        {
                            **base,
                            "container": container,
                            "node": p.node,
                            "resource": ksm_label(res),
                            "unit": "integer",
                        },
                        float(amount),
                    )
                )
        for container, requests in p.init_containers.items():
            if p.node:  # KSM: only init containers with a status, which a bound pod has
                families["kube_pod_init_container_info"].append(
                    _line(
                        "kube_pod_init_container_info",
                        {
                            **base,
                            "container": container,
                            "image_spec": "",
                            "image": "",
                            "image_id": "",
                            "container_id": "",
                            "restart_policy": "Always" if container in p.sidecars else "",
                        },
                        1.0,
                    )
                )
            for res, amount in sorted(requests.items()):
                families["kube_pod_init_container_resource_requests"].append(
                    _line(
                        "kube_pod_init_container_resource_requests",
                        {
                            **base,
                            "container": container,
                            "node": p.node,
                            "resource": ksm_label(res),
                            "unit": "integer",
                        },
                        float(amount),
                    )
                )
    out = []
    for name, lines in families.items():
        out.append(f"# HELP {name} {_HELP[name]}")
        out.append(f"# TYPE {name} gauge")
        out.extend(lines)
    return "\n".join(out) + "\n"


# the tolerations the DefaultTolerationSeconds admission plugin adds to every pod that
# has none of these keys: 300 s on a not-ready or unreachable node before eviction
DEFAULT_TOLERATIONS = tuple(
    KsmToleration(f"node.kubernetes.io/{key}", "Exists", "", "NoExecute", 300)
    for key in ("not-ready", "unreachable")
)


def _controller(pod: Pod) -> dict[str, str]:
    """A simulated pod's owner and restart policy, as ``KsmPod`` keywords; a bare pod's
    owner ``NO_OWNER`` (a notebook server's: KubeSpawner sets no owner reference)."""
    kind, name = pod.owner
    policy = "OnFailure" if pod.kind == "training" else "Always"
    if not kind:
        kind = name = NO_OWNER
    return {"owner_kind": kind, "owner_name": name, "restart_policy": policy}


def _tolerations(tolerated: Sequence[Taint]) -> tuple[KsmToleration, ...]:
    """A pod's spec tolerations: one per taint it tolerates (``Exists`` for a taint
    without a value), then the admission's defaults."""
    own = tuple(
        KsmToleration(key, "Equal" if value else "Exists", value, effect)
        for key, value, effect in tolerated
    )
    return own + DEFAULT_TOLERATIONS


def from_sim(sim: ClusterSim, t: float, anchor: float) -> tuple[list[KsmNode], list[KsmPod]]:
    """The simulated cluster at sim time ``t`` as KSM records (unix = anchor + sim time).

    Nodes advertise one ``nvidia.com/gpu`` unit per device, or per replica on a
    time-sliced device, as NVIDIA's device plugin does; their product label is the GPU
    model. Queued jobs are Pending pods without a node; running pods are Running; a
    pod placed on a node that starts after ``t`` is Pending there, as a scheduled pod
    whose containers are being created is (a pod created after ``t`` is not there yet).

    Why the last: the demo's simulation runs a few seconds ahead of the clock, so a
    queued pod was often placed with its start still ahead; it was then neither queued
    nor alive, missing from kube-state-metrics for those seconds, and ``top`` showed
    it pending with no wait and its start "due".
    From its start (its kubelet accepted it: ``status.startTime``, ``hostIP``, and its
    sandbox's ``podIP``) until its containers run (``ClusterSim.containers_started``) a
    pod is Pending on its node with its start time, as a real one is while its image is
    pulled. Training pods are a Job's (``restartPolicy: OnFailure``), notebooks bare
    pods (``Always``), as JupyterHub's KubeSpawner creates them. A node carries its
    taints at ``t`` (``ClusterSim.taints_at``) and its ``MemoryPressure`` condition
    while under pressure; a pod its tolerations and the admission's defaults.
    """
    nodes = [
        ksm_node(n, sim.taints_at(n.index, t), sim.under_pressure(n.index, t)) for n in sim.nodes
    ]
    pods = [
        record
        for pod in tuple(sim.pods)
        if (record := ksm_pod(pod, sim.nodes, t, anchor, sim.containers_started(pod)))
    ]
    for pod in sim.queued_pods():
        if pod.start > t:  # arrives after t: not created yet
            continue
        pods.append(_queued(pod, anchor + pod.start))
    return nodes, pods


def ksm_node(node: NodeSpec, taints: tuple[Taint, ...], memory_pressure: bool) -> KsmNode:
    """A simulated node as KSM records it: one ``nvidia.com/gpu`` unit per device (per
    replica on a time-sliced one), its GPU model as its product label, ``taints`` and
    its ``MemoryPressure`` condition as they are at the time asked (``from_sim``, the
    backfill)."""
    return KsmNode(
        node.name,
        {GPU: sum(g.replicas for g in node.gpus)},
        {"nvidia.com/gpu.product": node.gpu_model.replace(" ", "-")},
        taints=taints,
        memory_pressure=memory_pressure,
    )


def ksm_pod(
    pod: Pod,
    nodes: Sequence[NodeSpec],
    t: float,
    anchor: float,
    running_from: float,
    queued_until_start: bool = False,
) -> KsmPod | None:
    """``pod`` as KSM records it at sim time ``t`` (None: not there then).

    ``running_from``: when its containers run (``ClusterSim.containers_started``).
    ``queued_until_start``: a pod created before its start waited in the queue until
    then (unbound Pending), as the backfill knows of a past pod; else it is Pending on
    its node meanwhile, as the live simulation, run a few seconds ahead, placed it.
    One definition of a pod's KSM series for the live cluster (``from_sim``) and its
    past (``gpu_eta.simulation.backfill``).
    """
    created = pod.start if pod.created is None else pod.created
    if pod.kind not in ("training", "notebook") or pod.node < 0 or created > t:
        return None
    if pod.end is not None and t >= pod.end:
        return None
    started = pod.start <= t
    if queued_until_start and not started:
        return _queued(pod, anchor + created)
    return KsmPod(
        pod.namespace,
        pod.name,
        pod.uid,
        "Running" if t >= running_from else "Pending",
        anchor + created,
        {GPU: len(pod.gpus)},
        pod.container,
        nodes[pod.node].name,
        anchor + pod.start if started else None,
        **_controller(pod),
        tolerations=_tolerations(pod.tolerations),
        node_selector=_node_selector(pod),
        # the kubelet's: the pod's own address and its node's (the .1 of the
        # node's pod range), once it accepted the pod
        pod_ip=pod.ip if started else "",
        host_ip=f"{nodes[pod.node].ip_prefix}.1" if started else "",
    )


def _queued(pod: Pod, created: float) -> KsmPod:
    """A pod waiting for a GPU: Pending, bound to no node."""
    return KsmPod(
        pod.namespace,
        pod.name,
        pod.uid,
        "Pending",
        created,
        {GPU: len(pod.gpus)},
        pod.container,
        **_controller(pod),
        tolerations=_tolerations(pod.tolerations),
        node_selector=_node_selector(pod),
    )


def _node_selector(pod: Pod) -> dict[str, str]:
    """The node selector of a pod that asks for a GPU model (``Pod.product``), with the
    node label value ``ksm_node`` gives that model; {} for one that takes any."""
    return {"nvidia.com/gpu.product": pod.product.replace(" ", "-")} if pod.product else {}
