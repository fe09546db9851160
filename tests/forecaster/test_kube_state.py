"""kube-state-metrics series → the queue: parsing, and the queries against a real Prometheus."""

from __future__ import annotations

import dataclasses
import math
import re
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.forecast import ForecastSet
from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSettings, describe, error_counts, predict
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.promparse import Skipped
from gpu_eta.forecaster.publish import Exposition, ServiceState
from gpu_eta.forecaster.queue_replay import (
    NEVER_FITS,
    NO_SCHEDULABLE_NODE,
    PREDICTED,
    SCHEDULED,
    Arrival,
    Node,
    PendingPod,
    Toleration,
    default_requests,
    replay,
    selects,
)
from gpu_eta.forecaster.series import Sample
from gpu_eta.launch.prometheus import ScrapeJob, promtool
from gpu_eta.simulation.ksm import (
    DEFAULT_LABEL_ALLOWLIST,
    GPU,
    KsmNode,
    KsmPod,
    KsmToleration,
    exposition,
)

NOW = time.time()


def sample(**labels: str) -> Sample:
    value = float(labels.pop("value", "1"))
    return Sample(labels, value, NOW)


def test_parse_builds_nodes_holders_pending_and_skips_bad_series():
    samples = {
        "ksm_nodes": [
            sample(
                node="n1",
                resource="nvidia_com_gpu",
                label_nvidia_com_gpu_product="NVIDIA-A100",
                value="4",
            ),
            sample(
                node="n2", resource="nvidia_com_gpu", label_nvidia_com_gpu_replicas="3", value="3"
            ),
            sample(node="", resource="nvidia_com_gpu", value="4"),  # bad
        ],
        "ksm_pods": [
            sample(
                namespace="ml",
                pod="run",
                uid="u1",
                node="n1",
                resource="nvidia_com_gpu",
                phase="Running",
                value="2",
            ),
            sample(
                namespace="ml",
                pod="wait",
                uid="u2",
                resource="nvidia_com_gpu",
                phase="Pending",
                value="1",
            ),
            sample(
                namespace="ml",
                pod="bound",
                uid="u3",
                node="n2",
                resource="nvidia_com_gpu",
                phase="Pending",
                value="1",
            ),
            sample(
                namespace="ml",
                pod="huge",
                uid="u4",
                resource="nvidia_com_gpu",
                phase="Pending",
                value="1e9",
            ),
            sample(
                namespace="ml", pod="x", uid="u5", resource="cpu", phase="Pending", value="1"
            ),  # bad
        ],
        "ksm_pod_times": [
            sample(uid="u2", time="created", value=str(NOW - 60)),
            sample(uid="u4", time="created", value=str(NOW - 30)),
            sample(uid="u1", time="started", value=str(NOW - 600)),
        ],
        "ksm_pod_meta": [
            sample(uid="u2", meta="info", priority_class="high"),
            sample(
                uid="u2", meta="nodeselectors", nodeselector_nvidia_com_gpu_product="NVIDIA-A100"
            ),
        ],
        "ksm_arrivals": [
            sample(uid="u1", resource="nvidia_com_gpu", arrival="request", value="2"),
            sample(uid="u2", resource="nvidia_com_gpu", arrival="request", value="1"),
            series(uid="u1", arrival="tolerations", key="nvidia.com/gpu", operator="Exists"),
        ],
    }
    q = kube_state.parse(samples, NOW, {"n2": "T4"}, {"high": 1000}, arrivals_seconds=100)
    assert [(n.name, n.allocatable, n.product, dict(n.shared)) for n in q.nodes] == [
        ("n1", {"nvidia_com_gpu": 4}, "NVIDIA-A100", {}),
        ("n2", {"nvidia_com_gpu": 3}, "T4", {"nvidia_com_gpu": 3}),
    ]
    assert [(h.pod, h.node, h.units, h.started, h.shared) for h in q.holders] == [
        ("run", "n1", 2, NOW - 600, False),
        ("bound", "n2", 1, None, True),
    ]
    # "huge" asks more than any node has: kept, the replay says never_fits
    assert [(p.pod, p.units, p.priority, p.product) for p in q.pending] == [
        ("wait", 1, 1000, "NVIDIA-A100"),
        ("huge", 10**9, 0, ""),
    ]
    assert q.scheduled == (("ml", "bound"),)
    # each arrival with the tolerations of the pods it was measured on (u2: none shown)
    assert {(a.units, a.rate_per_second, a.tolerations) for a in q.arrivals} == {
        (1, 0.01, None),
        (2, 0.01, (Toleration("nvidia.com/gpu", "Exists"),)),
    }
    assert q.rejected == {"bad_node_series": 1, "bad_pod_series": 1}


def test_a_pod_holding_a_replica_holds_it_in_the_shared_pool():
    """Replicas advertised as ``nvidia.com/gpu.shared`` (the plugin's ``renameByDefault``)
    are shared whatever KSM shows of the node's labels: the pods running there hold
    them, so a pod waiting for one waits. Before, without the replicas label, the
    holders were taken from the (empty) pool of whole GPUs and every replica looked
    free. A MIG slice on a node labelled with replicas is not a replica."""
    shared = "nvidia_com_gpu_shared"
    mig = "nvidia_com_mig_1g_5gb"
    running = [
        Sample(
            {"namespace": "ml", "pod": f"run{i}", "uid": f"u{i}", "node": "n1"}
            | {"resource": shared, "phase": "Running"},
            1,
            NOW,
        )
        for i in range(4)
    ]
    samples = {
        "ksm_nodes": [
            sample(node="n1", resource=shared, label_nvidia_com_gpu_product="NVIDIA-L4", value="4"),
            sample(
                node="n2", resource="nvidia_com_gpu", label_nvidia_com_gpu_replicas="2", value="2"
            ),
            sample(node="n2", resource=mig, label_nvidia_com_gpu_replicas="2", value="1"),
        ],
        "ksm_pods": [
            *running,
            sample(namespace="ml", pod="slice", uid="m", node="n2", resource=mig, phase="Running"),
            sample(namespace="ml", pod="wait", uid="w", resource=shared, phase="Pending"),
        ],
        "ksm_pod_times": [sample(uid="w", time="created", value=str(NOW - 60))]
        + [sample(uid=f"u{i}", time="started", value=str(NOW - 600)) for i in range(4)],
    }
    q = kube_state.parse(samples, NOW)
    assert {h.pod: h.shared for h in q.holders} == {
        **{f"run{i}": True for i in range(4)},
        "slice": False,
    }
    result = replay(q.nodes, q.holders, q.pending, NOW, durations=[86400.0], n_samples=20)
    starts = result.pods[("ml", "wait")].starts
    assert starts is not None and starts[0] == pytest.approx(NOW + 86400 - 600, abs=1)


def test_time_sliced_mig_replicas_renamed_by_default_are_replicas():
    """With MIG and time-slicing under ``renameByDefault`` the device plugin advertises
    a slice's replicas as ``nvidia.com/mig-1g.10gb.shared`` (KSM:
    ``nvidia_com_mig_1g_10gb_shared``, which the built-in regex reads). They are
    replicas like ``nvidia_com_gpu_shared``'s: with ``failRequestsGreaterThanOne`` the
    plugin refuses a container asking 2, so the pod never fits (it was predicted to
    start now); a pod asking 1 starts now, and a pod running there holds a replica."""
    res = "nvidia_com_mig_1g_10gb_shared"
    samples = {
        "ksm_nodes": [sample(node="n1", resource=res, value="4")],
        "ksm_pods": [
            sample(namespace="ml", pod="run", uid="r", node="n1", resource=res, phase="Running"),
            pod_request("two", 2, resource=res),
            pod_request("one", 1, resource=res),
        ],
        "ksm_pod_times": [
            sample(uid=f"uid-{p}", time="created", value=str(NOW - 60)) for p in ("two", "one")
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert dict(q.nodes[0].shared) == {res: 4}
    assert [h.shared for h in q.holders] == [True]
    settings = PendingSettings(n_samples=5, one_replica_per_pod=True)
    got = {p.pod: p.prediction.status for p in predict(q, {}, [3600.0], NOW, settings).pods}
    assert got == {"two": NEVER_FITS, "one": PREDICTED}


def test_a_node_typed_from_the_exporter_matches_pods_selecting_the_gfd_spelling():
    """Without KSM's label allow-list a node's type is the NVML name gpu-eta's exporter
    reports (``NVIDIA A100-SXM4-80GB``); pods and the JupyterHub profiles select GPU
    feature discovery's spelling (``NVIDIA-A100-SXM4-80GB``). The node takes the latter:
    the pod fits, and the request series carry the spelling profiles look up."""
    gfd = "NVIDIA-A100-SXM4-80GB"
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="8")],
        "ksm_pods": [pod_request("waiter", 1)],
        "ksm_pod_times": [sample(uid="uid-waiter", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [
            sample(uid="uid-waiter", meta="nodeselectors", nodeselector_nvidia_com_gpu_product=gfd)
        ],
    }
    q = kube_state.parse(samples, NOW, node_models={"n1": "NVIDIA A100-SXM4-80GB"})
    assert q.nodes[0].product == q.pending[0].product == gfd
    result = replay(q.nodes, q.holders, q.pending, NOW, durations=[3600.0], n_samples=5)
    assert result.pods[("ml", "waiter")].status == PREDICTED
    assert {r.product for r in default_requests(q.nodes)} == {gfd}
    # a label KSM does export wins, as GPU feature discovery wrote it
    labelled = {
        **samples,
        "ksm_nodes": [
            sample(
                node="n1",
                resource="nvidia_com_gpu",
                label_nvidia_com_gpu_product="Tesla-T4-SHARED",
                value="8",
            )
        ],
    }
    assert kube_state.parse(labelled, NOW, {"n1": "Tesla T4"}).nodes[0].product == (
        "Tesla-T4-SHARED"
    )


@pytest.mark.parametrize(
    ("model", "selected", "fits"),
    [
        ("Tesla T4", "Tesla-T4-SHARED", True),  # time-sliced, not renamed
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", True),  # MIG single
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED", True),
        ("Tesla T4", "Tesla-T4-SHARED-X", False),
        ("Tesla T4", "Tesla-T4X", False),
        ("Tesla T4", "Tesla-T4-MIG", False),
        ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", False),
    ],
)
def test_a_node_typed_from_the_exporter_matches_the_gfd_shared_and_mig_spellings(
    model: str, selected: str, fits: bool
):
    """GPU feature discovery labels a time-sliced GPU (``nvidia.com/gpu`` not renamed)
    ``<model>-SHARED`` and a MIG single-strategy node's ``<model>-MIG-<profile>`` (the
    device plugin's ``internal/lm/resource.go``, ``productLabel``). A node typed from
    gpu-eta's exporter (the NVML name, no label) may be either, so pods selecting those
    spellings fit it; they were ``never_fits``, though they start there."""
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="4")],
        "ksm_pods": [pod_request("waiter", 1)],
        "ksm_pod_times": [sample(uid="uid-waiter", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [
            sample(
                uid="uid-waiter", meta="nodeselectors", nodeselector_nvidia_com_gpu_product=selected
            )
        ],
    }
    q = kube_state.parse(samples, NOW, node_models={"n1": model})
    (got,) = predict(q, {}, [3600.0], NOW, PendingSettings(n_samples=5)).pods
    assert got.prediction.status == (PREDICTED if fits else NEVER_FITS)
    # a product label KSM exports is the node's type as written: no other spelling fits
    labelled = {
        **samples,
        "ksm_nodes": [
            sample(
                node="n1",
                resource="nvidia_com_gpu",
                label_nvidia_com_gpu_product=kube_state.gfd_product(model),
                value="4",
            )
        ],
    }
    q = kube_state.parse(labelled, NOW, node_models={"n1": model})
    (got,) = predict(q, {}, [3600.0], NOW, PendingSettings(n_samples=5)).pods
    assert got.prediction.status == NEVER_FITS


def test_a_pods_node_selector_is_held_to_the_node_labels_ksm_shows():
    """A pending pod's nodeSelector keys beyond the GPU type are read
    (``kube_pod_nodeselectors``) and held against the GPU nodes' labels
    (``kube_node_labels``, allow-listed keys only, read once whatever the number of KSM
    replicas). A key no GPU node's labels show (``team``: not allow-listed, most likely)
    is not held against any node, so the pod is not made ``never_fits`` for it: it is
    counted per key (``selectors_unchecked``) for the log. A node without any
    ``kube_node_labels`` series has labels not known: every selector passes there."""
    gpu = "nvidia_com_gpu"
    meta = "nodeselectors"
    samples = {
        "ksm_nodes": [sample(node=n, resource=gpu, value="4") for n in ("a-1", "b-1", "c-1")],
        "ksm_node_labels": [
            sample(node="a-1", instance="ksm-0", label_pool="team-a"),
            sample(node="b-1", instance="ksm-0", label_pool="team-b"),
            sample(node="b-1", instance="ksm-1", label_pool="team-b"),  # a second replica
        ],
        "ksm_pods": [pod_request("wants-b", 1), pod_request("wants-ml", 1)],
        "ksm_pod_times": [
            sample(uid=f"uid-{p}", time="created", value=str(NOW - 60))
            for p in ("wants-b", "wants-ml")
        ],
        "ksm_pod_meta": [
            sample(
                uid="uid-wants-b",
                meta=meta,
                nodeselector_pool="team-b",
                nodeselector_team="ml",
                nodeselector_nvidia_com_gpu_product="NVIDIA-A100-SXM4-80GB",
            ),
            sample(uid="uid-wants-ml", meta=meta, nodeselector_team="ml"),
        ],
    }
    q = kube_state.parse(samples, NOW)
    host = kube_state.HOSTNAME_KEY  # not exported: the series' node label
    assert {n.name: n.labels for n in q.nodes} == {
        "a-1": {"pool": "team-a", host: "a-1"},
        "b-1": {"pool": "team-b", host: "b-1"},
        "c-1": None,
    }
    assert {p.pod: (p.product, p.selector) for p in q.pending} == {
        "wants-b": ("NVIDIA-A100-SXM4-80GB", (("pool", "team-b"),)),
        "wants-ml": ("", ()),
    }
    assert q.selectors_unchecked == {"team": 2} and q.selectors_checked == ("pool",)
    assert q.rejected == {}
    wants_b = next(p for p in q.pending if p.pod == "wants-b")
    assert [n.name for n in q.nodes if selects(n, wants_b.selector)] == ["b-1", "c-1"]
    # no kube_node_labels at all (the series dropped): no key checked, every one named
    q = kube_state.parse({**samples, "ksm_node_labels": []}, NOW)
    assert {p.selector for p in q.pending} == {()}
    assert q.selectors_unchecked == {"pool": 1, "team": 2} and q.selectors_checked == ()


def test_a_nodes_hostname_is_its_name_unless_ksm_exports_another():
    """``kubernetes.io/hostname`` pins a pod to one node; KSM's default allow-list does
    not export it, but every ``kube_node_labels`` series names its node, which the
    kubelet's hostname label equals: a pod pinned to ``b-1`` is held there. An exported
    hostname (a kubelet with ``--hostname-override``) wins over the node's name."""
    gpu, host = "nvidia_com_gpu", kube_state.HOSTNAME_KEY
    samples = {
        "ksm_nodes": [sample(node=n, resource=gpu, value="1") for n in ("a-1", "b-1")],
        "ksm_node_labels": [
            sample(node="a-1", label_kubernetes_io_hostname="a-1.internal"),
            sample(node="b-1"),
        ],
        "ksm_pods": [pod_request("pinned", 1)],
        "ksm_pod_times": [sample(uid="uid-pinned", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [
            sample(
                uid="uid-pinned", meta="nodeselectors", nodeselector_kubernetes_io_hostname="b-1"
            )
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert {n.name: n.labels for n in q.nodes} == {
        "a-1": {host: "a-1.internal"},
        "b-1": {host: "b-1"},
    }
    (pinned,) = q.pending
    assert pinned.selector == ((host, "b-1"),) and q.selectors_unchecked == {}
    assert [n.name for n in q.nodes if selects(n, pinned.selector)] == ["b-1"]


def test_selector_keys_are_held_against_the_nodes_the_queue_ends_with():
    """Which nodeSelector keys are held is decided from the queue's nodes whenever a
    queue is made, so nodes added after ``parse`` (``last_seen``'s, through
    ``dataclasses.replace``) count: a key only such a node shows is held, not logged
    as unchecked."""
    gpu = "nvidia_com_gpu"
    pod = PendingPod("ml", "p", gpu, 1, NOW, node_selector=(("pool", "x"),))
    read = ClusterQueue(nodes=(Node("g-1", {gpu: 4}, "T4", labels={}),), pending=(pod,))
    assert read.pending[0].selector == () and read.selectors_unchecked == {"pool": 1}
    kept = Node("d-1", {gpu: 4}, "T4", labels={"pool": "x"})
    filled = dataclasses.replace(read, nodes=(*read.nodes, kept))
    assert filled.pending[0].selector == (("pool", "x"),)
    assert filled.selectors_unchecked == {} and filled.selectors_checked == ("pool",)


def test_arrivals_ask_for_the_gpu_type_their_pods_selected():
    """An H100 pod waits for both H100 GPUs (free at +100 s and +200 s) while the A100
    node stays full. 360 one-GPU pods created in the last hour selected A100s: the pods
    arriving later wait for an A100 too, so the GPU freed at +100 s stays for the H100
    pod, which starts at +200 s. Taken as any type, they would take that GPU (held past
    the horizon) and the H100 pod would never be predicted to start. A recent pod that
    selected no type arrives asking for any."""
    h100, a100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"

    def node(name: str, product: str, units: int) -> Sample:
        return sample(
            node=name,
            resource="nvidia_com_gpu",
            label_nvidia_com_gpu_product=product,
            value=str(units),
        )

    recent = [f"a{k}" for k in range(360)]
    samples = {
        "ksm_nodes": [node("h100", h100, 2), node("a100", a100, 1)],
        "ksm_pods": [
            pod_request("h-1", 1, "Running", "h100"),
            pod_request("h-2", 1, "Running", "h100"),
            pod_request("a-1", 1, "Running", "a100"),
            pod_request("waiter", 2),
        ],
        "ksm_pod_times": [sample(uid="uid-waiter", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [
            sample(uid="uid-waiter", meta="nodeselectors", nodeselector_nvidia_com_gpu_product=h100)
        ],
        "ksm_arrivals": [
            *(sample(uid=u, resource="nvidia_com_gpu", arrival="request") for u in recent),
            *(
                series(uid=u, arrival="nodeselectors", nodeselector_nvidia_com_gpu_product=a100)
                for u in recent
            ),
            sample(uid="any", resource="nvidia_com_gpu", arrival="request", value="8"),
        ],
    }
    q = kube_state.parse(samples, NOW, arrivals_seconds=3600)
    assert {(a.units, a.product, round(a.rate_per_second * 3600)) for a in q.arrivals} == {
        (1, a100, 360),
        (8, "", 1),
    }
    ends = {"h-1": NOW + 100, "h-2": NOW + 200, "a-1": NOW + 10**6}
    holders = [dataclasses.replace(h, ends=(ends[h.pod],) * 3) for h in q.holders]
    result = replay(
        q.nodes, holders, q.pending, NOW, durations=[10**6], arrivals=q.arrivals, n_samples=5
    )
    assert result.pods[("ml", "waiter")].starts == (NOW + 200,) * 3


def test_arrivals_carry_their_pods_priority():
    """The pods created in the arrival window arrive later with their priority class's
    value (``--pending.priority-class``; a class without one, or none, is 0), so the
    replay queues them ahead of waiting pods of lower priority."""
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="1")],
        "ksm_arrivals": [
            *(sample(uid=u, resource="nvidia_com_gpu", arrival="request") for u in "abcd"),
            series(uid="a", arrival="info", priority_class="high"),
            series(uid="b", arrival="info", priority_class="high"),
            series(uid="c", arrival="info", priority_class="unmapped"),
        ],
    }
    q = kube_state.parse(samples, NOW, priorities={"high": 1000}, arrivals_seconds=3600)
    assert {(a.priority, round(a.rate_per_second * 3600)) for a in q.arrivals} == {
        (1000, 2),
        (0, 2),
    }


def test_the_first_round_asks_arrivals_priority_classes_only_with_a_mapping():
    """``first_round``: ``QUERIES`` whole with a ``--pending.priority-class`` mapping;
    without one, ``ARRIVALS`` without its ``kube_pod_info`` part (every class is 0 then),
    the other parts as they are."""
    assert kube_state.first_round({"high": 1000}) == kube_state.QUERIES
    plain = kube_state.first_round({})
    assert plain.keys() == kube_state.QUERIES.keys()
    assert "kube_pod_info" in kube_state.QUERIES["ksm_arrivals"]
    assert "kube_pod_info" not in plain["ksm_arrivals"]
    assert {k: v for k, v in plain.items() if k != "ksm_arrivals"} == {
        k: v for k, v in kube_state.QUERIES.items() if k != "ksm_arrivals"
    }


def pod_request(
    pod: str,
    value: float,
    phase: str = "Pending",
    node: str = "",
    resource: str = "nvidia_com_gpu",
    **labels: str,
) -> Sample:
    return Sample(
        {
            "namespace": "ml",
            "pod": pod,
            "uid": f"uid-{pod}",
            "resource": resource,
            **labels,
            "phase": phase,
            **({"node": node} if node else {}),
        },
        value,
        NOW,
    )


def test_no_pod_vanishes_unseen():
    """A pending pod asking more than any node has is kept (never_fits); one whose
    request is no count of GPUs (NaN, negative, or a bound pod beyond MAX_UNITS) is
    counted as ``invalid_request``; a pod with one usable request is placed on it (a
    request of 0 is no GPU asked: neither queued nor counted)."""
    pods = [
        pod_request("fits", 1),
        pod_request("huge", 2000),
        pod_request("nan", float("nan")),
        pod_request("zero", 0),
        pod_request("negative", -1),
        pod_request("bound-huge", 5000, "Running", "n1"),
        pod_request("mixed", 0),
        Sample({**pod_request("mixed", 1).labels, "resource": "nvidia_com_mig_1g_5gb"}, 1, NOW),
    ]
    names = ("fits", "huge", "nan", "zero", "negative", "mixed")
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="8")],
        "ksm_pods": pods,
        "ksm_pod_times": [
            Sample({"uid": f"uid-{p}", "time": "created"}, NOW - 100 + i, NOW)
            for i, p in enumerate(names)
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert [(p.pod, p.resource, p.units) for p in q.pending] == [
        ("fits", "nvidia_com_gpu", 1),
        ("huge", "nvidia_com_gpu", 2000),
        ("mixed", "nvidia_com_mig_1g_5gb", 1),
    ]
    assert q.holders == ()
    assert q.rejected == {"invalid_request": 3}  # nan, negative, bound-huge
    by = {p.pod: p for p in predict(q, {}, [600.0], NOW, PendingSettings(n_samples=5)).pods}
    assert (by["huge"].prediction.status, by["huge"].units) == (NEVER_FITS, 2000)
    assert by["fits"].prediction.status == PREDICTED


def test_a_pending_pod_being_deleted_is_not_queued_but_counted():
    """An unbound Pending pod with a deletion timestamp (a Job's pod held by the
    job-tracking finalizer, a suspended Kueue workload's) is never scheduled:
    kube-scheduler skips pods being deleted. Queued, it took the free GPU ahead of the
    live pod, which was predicted a run late. It is left out and counted
    (``being_deleted``); a bound pod being deleted still holds its GPUs until it is gone."""
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="1")],
        "ksm_pods": [pod_request("dying", 1), pod_request("live", 1)],
        "ksm_pod_times": [
            sample(uid="uid-dying", time="created", value=str(NOW - 600)),
            sample(uid="uid-live", time="created", value=str(NOW - 60)),
            sample(uid="uid-dying", time="deleted", value=str(NOW + 30)),
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert [p.pod for p in q.pending] == ["live"]
    assert q.rejected == {"being_deleted": 1}
    (live,) = predict(q, {}, [3600.0], NOW, PendingSettings(n_samples=5)).pods
    assert live.prediction.starts == (NOW, NOW, NOW)
    bound = {**samples, "ksm_pods": [pod_request("dying", 1, "Pending", "n1")]}
    q = kube_state.parse(bound, NOW)
    assert [(h.pod, h.deletion_timestamp) for h in q.holders] == [("dying", NOW + 30)]
    assert q.rejected == {}


def test_priority_classes_without_a_value_are_counted_and_logged_once(caplog):
    """KSM exports a pod's priority class name, not its value; a name not given with
    ``--pending.priority-class`` is read as 0. Silently so, a site that forgot one saw
    its high-priority pods queued behind the rest with no hint why: the names are
    counted per class (pods) and named in one WARNING line with the flag, repeated only
    when the names change; no error is counted (the pods are predicted)."""
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="1")],
        "ksm_pods": [pod_request(p, 1) for p in ("a", "b", "c", "d")],
        "ksm_pod_times": [
            sample(uid=f"uid-{p}", time="created", value=str(NOW - 60 + i))
            for i, p in enumerate("abcd")
        ],
        "ksm_pod_meta": [
            sample(uid="uid-a", meta="info", priority_class="research-high"),
            sample(uid="uid-b", meta="info", priority_class="research-high"),
            sample(uid="uid-c", meta="info", priority_class="known"),
            sample(uid="uid-d", meta="info", priority_class=""),
        ],
    }
    q = kube_state.parse(samples, NOW, priorities={"known": 10})
    assert [(p.pod, p.priority) for p in q.pending] == [("a", 0), ("b", 0), ("c", 10), ("d", 0)]
    assert q.priorities_unknown == {"research-high": 2}
    pending = predict(q, {}, [3600.0], NOW, PendingSettings(n_samples=5))
    assert pending.priorities_unknown == {"research-high": 2}
    assert error_counts(pending) == {}
    caplog.set_level("INFO", logger="gpu_eta.forecaster.publish")
    state = ServiceState()
    for _ in range(2):
        state.success(ForecastSet(timestamp=NOW, pending=pending), 0.5, NOW)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "research-high (2 pods)" in lines[0] and "--pending.priority-class" in lines[0]


def test_a_pod_asking_zero_gpus_is_no_gpu_pod_and_no_error():
    """``nvidia.com/gpu: 0`` is a request Kubernetes accepts (a CPU-only JupyterHub
    profile overriding a GPU default with ``extra_resource_limits: {nvidia.com/gpu:
    "0"}``), and KSM exports it as a series of value 0: the pod asks for no GPU. It is
    neither queued nor a holder, and not counted in ``pending_rejected`` (every such
    running notebook added one to the error counter each cycle, and the queue's WARNING
    named it ``invalid_request``); its init containers' zeros likewise."""
    init_zero = Sample({**pod_request("init-zero", 0).labels, "container": "setup"}, 0, NOW)
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="8")],
        "ksm_pods": [
            pod_request("fits", 1),
            pod_request("cpu-waiting", 0),
            pod_request("cpu-notebook", 0, "Running", "n1"),
        ],
        "ksm_init_requests": [init_zero],
        "ksm_pod_times": [
            Sample({"uid": f"uid-{p}", "time": "created"}, NOW - 100, NOW)
            for p in ("fits", "cpu-waiting", "init-zero")
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert [p.pod for p in q.pending] == ["fits"]
    assert q.holders == ()
    assert q.rejected == {}


def series(**labels: str) -> Sample:
    """A series of value 1 (``sample`` reads its ``value`` label as the value)."""
    return Sample(labels, 1.0, NOW)


def _pending_gpu_pod(uid: str) -> list[Sample]:
    return [
        sample(namespace="ml", pod=uid, uid=uid, resource="nvidia_com_gpu", phase="Pending"),
    ]


NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}


def _pods_on_a_tainted_node(
    node: str, taint: dict[str, str], uids: tuple[str, ...], tolerations: list[Sample]
) -> dict[str, list[Sample]]:
    """KSM answers for one 2-GPU node with ``taint`` and pending 1-GPU pods ``uids``
    created a minute ago, their ``tolerations`` series as given."""
    return {
        "ksm_nodes": [sample(node=node, resource="nvidia_com_gpu", value="2")],
        "ksm_node_state": [series(node=node, state="taint", **taint)],
        "ksm_pods": [s for uid in uids for s in _pending_gpu_pod(uid)],
        "ksm_pod_times": [sample(uid=uid, time="created", value=str(NOW - 60)) for uid in uids],
        "ksm_pod_meta": tolerations,
    }


def test_parse_reads_taints_and_tolerations_and_skips_bad_ones():
    """Taints per GPU node (deduplicated, sorted), tolerations per pending pod; a
    malformed taint is skipped and counted, a malformed toleration makes its pod's
    tolerations unknown (None: every taint passes) and is counted; a pod showing only
    the not-ready toleration tolerates none of the GPU node's taints."""
    team = {"key": "dedicated", "value": "team-a", "effect": "NoSchedule"}
    samples = {
        "ksm_nodes": [
            sample(node="n1", resource="nvidia_com_gpu", value="2"),
            sample(node="n2", resource="nvidia_com_gpu", value="2"),
        ],
        "ksm_node_state": [
            series(node="n1", state="taint", **team),
            series(node="n1", state="taint", **team),  # a second KSM replica's
            series(node="n1", state="taint", key="nvidia.com/gpu", effect="NoExecute"),
            series(node="n1", state="taint", value="x", effect="NoSchedule"),  # no key: bad
            series(node="n1", state="taint", key="k", effect="Sometimes"),  # bad
            series(node="n1", state="taint", key="k", value="v" * 64, effect="NoSchedule"),  # bad
            series(node="", state="taint", **team),  # bad
            sample(node="n2", state="cordoned"),
        ],
        "ksm_pods": [s for uid in ("u1", "u2", "u3") for s in _pending_gpu_pod(uid)],
        "ksm_pod_times": [
            sample(uid=uid, time="created", value=str(NOW - 60)) for uid in ("u1", "u2", "u3")
        ],
        "ksm_pod_meta": [
            series(uid="u1", meta="tolerations", operator="Equal", **team),
            series(uid="u1", meta="tolerations", operator="Exists"),  # every taint
            series(uid="u2", meta="tolerations", operator="Exists", **NOT_READY),
            series(uid="u3", meta="tolerations", key="k", operator="Often", value="5"),  # bad
            series(uid="u3", meta="tolerations", key="k", operator="Exists"),
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert {n.name: (n.taints, n.schedulable) for n in q.nodes} == {
        "n1": (
            (("dedicated", "team-a", "NoSchedule"), ("nvidia.com/gpu", "", "NoExecute")),
            True,
        ),
        "n2": ((), False),
    }
    assert {p.pod: p.tolerations for p in q.pending} == {
        "u1": (Toleration("", "Exists"), Toleration("dedicated", "Equal", "team-a", "NoSchedule")),
        "u2": (Toleration(operator="Exists", **NOT_READY),),
        "u3": None,
    }
    assert q.rejected == {"bad_taint_series": 4, "bad_toleration_series": 1}
    assert q.tolerations_missing == ()  # u3's series malformed (counted), not missing
    by = {p.pod: p.prediction.status for p in predict(q, {}, [600.0], NOW, FEW).pods}
    # u2 does not tolerate n1's taints: it fits only the cordoned n2
    assert by == {"u1": PREDICTED, "u2": NO_SCHEDULABLE_NODE, "u3": PREDICTED}


FEW = PendingSettings(n_samples=5)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("ToBeDeletedByClusterAutoscaler", "1733300000"),
        ("karpenter.sh/disrupted", ""),
        ("karpenter.sh/disruption", "disrupting"),
    ],
)
def test_a_node_an_autoscaler_removes_is_closed_not_a_toleration_to_wait_for(
    key: str, value: str
) -> None:
    """The removal taint closes the node as a cordon does: a pod only it could hold
    waits for a node (``no_schedulable_node``), it does not ``never_fits``."""
    taint = {"key": key, "effect": "NoSchedule", **({"value": value} if value else {})}
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="2")],
        "ksm_node_state": [series(node="n1", state="taint", **taint)],
        "ksm_pods": _pending_gpu_pod("u1"),
        "ksm_pod_times": [sample(uid="u1", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [series(uid="u1", meta="tolerations", operator="Exists", **NOT_READY)],
    }
    q = kube_state.parse(samples, NOW)
    ((node),) = q.nodes
    assert (node.schedulable, node.taints) == (False, ((key, value, "NoSchedule"),))
    assert q.tainted_nodes == 0  # not a standing policy
    (pod,) = predict(q, {}, [600.0], NOW, FEW).pods
    assert pod.prediction.status == NO_SCHEDULABLE_NODE


@pytest.mark.parametrize(
    ("key", "effect", "closed"),
    [
        ("node.kubernetes.io/memory-pressure", "NoSchedule", True),
        ("node.kubernetes.io/disk-pressure", "NoSchedule", True),
        ("node.kubernetes.io/pid-pressure", "NoSchedule", True),
        ("node.kubernetes.io/network-unavailable", "NoSchedule", True),
        ("node.kubernetes.io/out-of-service", "NoExecute", True),
        ("node.cloudprovider.kubernetes.io/uninitialized", "NoSchedule", True),
        ("node.cloudprovider.kubernetes.io/shutdown", "NoSchedule", True),
        # read from the node's spec and Ready condition, not from the taint
        ("node.kubernetes.io/not-ready", "NoSchedule", False),
        ("node.kubernetes.io/unreachable", "NoExecute", False),
        ("node.kubernetes.io/unschedulable", "NoSchedule", False),
    ],
)
def test_a_node_under_pressure_takes_only_pods_tolerating_it_until_the_condition_clears(
    key: str, effect: str, closed: bool
) -> None:
    """kube-scheduler keeps a pod off a node tainted from its state (it filters on
    taints, not conditions) unless the pod tolerates the taint: a pod only that node
    could hold waits for the node (``no_schedulable_node``), and one tolerating it (as
    PodTolerationRestriction makes every Burstable or Guaranteed pod tolerate memory pressure)
    is predicted there; one whose tolerations are unknown waits like the first;
    not-ready, unreachable and cordon are the node's Ready condition and spec (absent
    here: the node is open to all)."""
    samples = _pods_on_a_tainted_node(
        "n1",
        {"key": key, "effect": effect},
        ("u1", "u2", "unknown"),
        [
            series(uid="u1", meta="tolerations", operator="Exists", **NOT_READY),
            series(uid="u2", meta="tolerations", operator="Exists", **NOT_READY),
            series(uid="u2", meta="tolerations", operator="Exists", key=key, effect=effect),
        ],
    )
    q = kube_state.parse(samples, NOW)
    ((node),) = q.nodes
    assert (node.schedulable, node.taints) == (True, ((key, "", effect),))
    assert q.tainted_nodes == 0  # not a standing policy
    by = {p.pod: p.prediction.status for p in predict(q, {}, [600.0], NOW, FEW).pods}
    # unknown shows no toleration (its series dropped): unknown, kept off a node under
    # pressure (DaemonSet pods alone usually tolerate it), as one not tolerating it
    waits = NO_SCHEDULABLE_NODE if closed else PREDICTED
    assert by == {"u1": waits, "u2": PREDICTED, "unknown": waits}


def test_a_pod_without_toleration_series_among_pods_with_some_is_unknown_not_intolerant():
    """``kube_pod_tolerations`` dropped at scrape time for one namespace only: its pod
    shows no toleration while another pod shows its own. It is read as unknown (every
    taint passes) and predicted on the ``nvidia.com/gpu`` node, not ``never_fits``;
    its namespace named apart (not an error). Before, it got () and was
    ``never_fits``."""
    gpu = {"key": "nvidia.com/gpu", "effect": "NoSchedule"}
    samples = _pods_on_a_tainted_node(
        "gpu1",
        {**gpu, "value": "present"},
        ("kept", "dropped"),
        [
            series(uid="kept", meta="tolerations", operator="Exists", **gpu),
            series(uid="kept", meta="tolerations", operator="Exists", **NOT_READY),
        ],
    )
    q = kube_state.parse(samples, NOW)
    assert {p.pod: p.tolerations for p in q.pending} == {
        "kept": (
            Toleration(operator="Exists", **NOT_READY),
            Toleration(operator="Exists", **gpu),
        ),
        "dropped": None,
    }
    assert q.rejected == {} and q.tainted_nodes == 1
    assert (q.tolerations_missing, q.tolerations_read) == (("ml",), ("ml",))
    result = predict(q, {}, [600.0], NOW, FEW)
    assert {p.pod: p.prediction.status for p in result.pods} == {
        "kept": PREDICTED,
        "dropped": PREDICTED,
    }
    assert (result.tainted_nodes, result.tolerations_missing) == (1, ("ml",))
    assert error_counts(result) == {}
    # no tainted node: nothing to tolerate (the log ignores the missing series then)
    untainted = kube_state.parse({**samples, "ksm_node_state": []}, NOW)
    assert untainted.tainted_nodes == 0


def test_the_tainted_node_count_follows_the_queues_nodes():
    """``ClusterQueue.tainted_nodes`` is what its nodes say, however the queue was made:
    built directly, or with nodes added through ``dataclasses.replace`` (``last_seen``'s
    kept nodes), and ``predict`` publishes that count. A state taint (memory pressure) is
    not a policy and is not counted. A count stored beside the nodes disagreed with them
    wherever nodes were added without recounting."""
    gpu = "nvidia_com_gpu"
    team = Node("team-1", {gpu: 2}, "A100", taints=(SKU,))
    pressed = Node(
        "p-1", {gpu: 2}, "A100", taints=(("node.kubernetes.io/memory-pressure", "", "NoSchedule"),)
    )
    queue = ClusterQueue(nodes=(Node("free-1", {gpu: 2}, "A100"), pressed, team))
    assert queue.tainted_nodes == 1
    grown = dataclasses.replace(queue, nodes=(*queue.nodes, dataclasses.replace(team, name="t-2")))
    assert grown.tainted_nodes == 2
    assert predict(grown, {}, [600.0], NOW, FEW).tainted_nodes == 2


def test_the_configured_request_toleration_reaches_the_requests():
    """``PendingSettings.request_tolerations`` (``--pending.request-toleration``): a
    cluster tainting its GPU pool ``sku=gpu:NoSchedule`` gets request predictions."""
    queue = ClusterQueue(nodes=(Node("gpu", {"nvidia_com_gpu": 2}, "A100", taints=(SKU,)),))
    assert predict(queue, {}, [600.0], NOW, FEW).requests == {}
    told = dataclasses.replace(FEW, request_tolerations=(Toleration("sku", "Equal", "gpu"),))
    assert {r.units for r in predict(queue, {}, [600.0], NOW, told).requests} == {1, 2}


SKU = ("sku", "gpu", "NoSchedule")


def test_lt_and_gt_tolerations_are_read_and_compare_taint_values():
    """Kubernetes 1.35's comparison operators (TaintTolerationComparisonOperators): the
    taint's value is compared with the toleration's, so ``cost`` Lt 5 may use the node
    tainted cost=3 and Gt 5 the one tainted cost=9, while Lt 2 and Gt 10 fit neither.
    Before, Lt and Gt were malformed series (counted every cycle) and the pods'
    tolerations unknown (every taint passing)."""
    pods = {"lt5": ("Lt", "5"), "gt5": ("Gt", "5"), "lt2": ("Lt", "2"), "gt10": ("Gt", "10")}
    samples = {
        "ksm_nodes": [sample(node=n, resource="nvidia_com_gpu") for n in ("cheap", "pricey")],
        "ksm_node_state": [
            series(node="cheap", state="taint", key="cost", value="3", effect="NoSchedule"),
            series(node="pricey", state="taint", key="cost", value="9", effect="NoSchedule"),
        ],
        "ksm_pods": [s for uid in pods for s in _pending_gpu_pod(uid)],
        "ksm_pod_times": [sample(uid=uid, time="created", value=str(NOW - 60)) for uid in pods],
        "ksm_pod_meta": [
            series(uid=uid, meta="tolerations", key="cost", operator=op, value=value)
            for uid, (op, value) in pods.items()
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert q.rejected == {} and q.tolerations_missing == ()
    assert {p.pod: p.tolerations for p in q.pending} == {
        uid: (Toleration("cost", op, value),) for uid, (op, value) in pods.items()
    }
    by = {p.pod: p.prediction.status for p in predict(q, {}, [600.0], NOW, FEW).pods}
    assert by == {"lt5": PREDICTED, "gt5": PREDICTED, "lt2": NEVER_FITS, "gt10": NEVER_FITS}


def test_no_toleration_at_all_means_unknown_not_tolerating_nothing():
    """KSM without ``kube_pod_tolerations`` (dropped, or before 2.6) while GPU nodes
    carry ``nvidia.com/gpu:NoSchedule``: every pending pod's tolerations are unknown
    and it is predicted as if the nodes had no taints, not ``never_fits``; its namespace
    is named for the log, and the tainted nodes counted (a node with only a not-ready
    taint is not)."""
    samples = {
        "ksm_nodes": [
            sample(node=n, resource="nvidia_com_gpu", value="1") for n in ("n1", "n2", "n3")
        ],
        "ksm_node_state": [
            series(node="n1", state="taint", key="nvidia.com/gpu", effect="NoSchedule"),
            series(node="n2", state="taint", key="nvidia.com/gpu", effect="NoSchedule"),
            sample(
                node="n3", state="taint", key="node.kubernetes.io/not-ready", effect="NoExecute"
            ),
            sample(node="n3", state="not_ready"),
        ],
        "ksm_pods": _pending_gpu_pod("u1"),
        "ksm_pod_times": [sample(uid="u1", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": [sample(uid="u1", meta="info", priority_class="")],
    }
    q = kube_state.parse(samples, NOW)
    assert [p.tolerations for p in q.pending] == [None]
    assert (q.tainted_nodes, q.tolerations_missing) == (2, ("ml",)) and q.rejected == {}
    result = predict(q, {}, [600.0], NOW, FEW)
    assert [p.prediction.status for p in result.pods] == [PREDICTED]
    assert (result.tainted_nodes, result.tolerations_missing) == (2, ("ml",))
    # no pending pod: nothing is said of any namespace
    idle = kube_state.parse({**samples, "ksm_pods": []}, NOW)
    assert (idle.tolerations_missing, idle.tolerations_read) == ((), ())


def test_a_node_or_pod_beyond_the_bounds_keeps_no_taint_or_toleration():
    many = [
        series(node="n1", state="taint", key=f"k{i}", effect="NoSchedule")
        for i in range(kube_state.MAX_TAINTS + 1)
    ]
    tols = [
        series(uid="u1", meta="tolerations", key=f"k{i}", operator="Exists")
        for i in range(kube_state.MAX_TOLERATIONS + 1)
    ]
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="1")],
        "ksm_node_state": many,
        "ksm_pods": _pending_gpu_pod("u1"),
        "ksm_pod_times": [sample(uid="u1", time="created", value=str(NOW - 60))],
        "ksm_pod_meta": tols,
    }
    q = kube_state.parse(samples, NOW)
    assert q.nodes[0].taints == () and q.pending[0].tolerations is None
    assert q.rejected == {"too_many_taints": 1, "too_many_tolerations": 1}


def test_query_count_is_fixed():
    assert len(kube_state.QUERIES) == 8
    for template in kube_state.QUERIES.values():
        assert "{arrivals}" not in kube_state.render(template, 600)


RENAMED = "nvidia.com/a100-shared"  # a time-slicing config's ``rename: a100-shared``
RENAMED_KSM = "nvidia_com_a100_shared"  # KSM's resource label for it


def test_every_query_reads_the_sites_gpu_resources():
    """``--pending.gpu-resource``: each of the queries' GPU matchers (app and init
    requests, node allocatable, now and over the arrival window) asks for the built-in
    resources and the site's, and only those (without any, the built-in ones alone)."""
    matcher = re.compile(r'resource=~"([^"]*)"')
    built_in = "nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+"
    n_matchers = 0
    labels = kube_state.node_labels_query(("pool",))
    since = kube_state.pending_since_query(("u1",))
    assert labels is not None and since is not None
    second = {
        kube_state.NODE_LABELS_PART: labels,
        kube_state.PENDING_SINCE_PART: since,
        kube_state.ARRIVALS_SEEN_PART: kube_state.ARRIVALS_SEEN,
    }
    for name, template in {**kube_state.QUERIES, **second}.items():
        plain = kube_state.render(template, 600)
        extended = kube_state.render(template, 600, (RENAMED, "example.com/gpu"))
        assert "{gpu_resources}" not in extended, name
        assert set(matcher.findall(plain)) <= {built_in}, name
        found = matcher.findall(extended)
        assert set(found) <= {f"{built_in}|{RENAMED_KSM}|example_com_gpu"}, name
        assert extended.count(built_in) == len(found) == len(matcher.findall(plain)), name
        n_matchers += len(found)
    assert n_matchers >= 10  # every query but the node taints' and states' joins (7 kinds)


def test_the_sites_gpu_resources_are_read_as_nvidia_com_gpu_is():
    """A renamed time-sliced resource: a node offering it and labelled with replicas
    shares it (its holders hold replicas), its pods pend and arrive; without
    ``gpu_resources`` its series are no GPU's (counted, not read)."""
    samples = {
        "ksm_nodes": [
            sample(node="n1", resource=RENAMED_KSM, label_nvidia_com_gpu_replicas="4", value="4")
        ],
        "ksm_pods": [
            sample(
                namespace="ml", pod="run", uid="r", node="n1", resource=RENAMED_KSM, phase="Running"
            ),
            sample(namespace="ml", pod="wait", uid="w", resource=RENAMED_KSM, phase="Pending"),
        ],
        "ksm_pod_times": [sample(uid="w", time="created", value=str(NOW - 60))],
        "ksm_arrivals": [sample(uid="w", resource=RENAMED_KSM, arrival="request")],
    }
    q = kube_state.parse(samples, NOW, gpu_resources=(RENAMED,))
    assert [(n.name, n.allocatable, n.shared) for n in q.nodes] == [
        ("n1", {RENAMED_KSM: 4}, {RENAMED_KSM: 4})
    ]
    assert [(h.pod, h.resource, h.shared) for h in q.holders] == [("run", RENAMED_KSM, True)]
    assert [(p.pod, p.resource) for p in q.pending] == [("wait", RENAMED_KSM)]
    assert [a.resource for a in q.arrivals] == [RENAMED_KSM]
    q = kube_state.parse(samples, NOW)
    assert (q.nodes, q.holders, q.pending, q.arrivals) == ((), (), (), ())
    assert q.rejected == {"bad_node_series": 1, "bad_pod_series": 2}


def test_a_built_in_gpu_resource_named_again_is_read_as_built_in():
    """A site listing its MIG slice in ``--pending.gpu-resource`` (or the chart's
    ``gpuResources``) beside its renamed replicas: the slice stays what it is without
    the name, never a time-sliced replica, even on a node whose whole GPUs are shared
    (``nvidia.com/gpu.replicas`` is GPU feature discovery's label of ``nvidia.com/gpu``)."""
    samples = {
        "ksm_nodes": [
            sample(
                node="n1", resource="nvidia_com_gpu", label_nvidia_com_gpu_replicas="4", value="8"
            ),
            sample(
                node="n1",
                resource="nvidia_com_mig_1g_10gb",
                label_nvidia_com_gpu_replicas="4",
                value="7",
            ),
        ]
    }
    plain = kube_state.parse(samples, NOW)
    named = kube_state.parse(samples, NOW, gpu_resources=("nvidia.com/mig-1g.10gb", RENAMED))
    assert [n.shared for n in plain.nodes] == [{"nvidia_com_gpu": 8}]
    assert [n.shared for n in named.nodes] == [n.shared for n in plain.nodes]


# --- against a real Prometheus -------------------------------------------------------


def ksm_samples(client: PromClient, now: float) -> dict[str, list[Sample]]:
    """Every queue query's answer at ``now``, as the cycle reads them (unfolded), and
    their second round's when they call for one (``kube_state.second_round``)."""
    out: dict[str, list[Sample]] = {}

    def ask(name: str, tpl: str) -> None:
        # the series the parser left out, by the labels parse needs (as the cycle)
        skipped = Skipped(keep=kube_state.SKIPPED_LABELS)
        out[name] = client.instant(kube_state.render(tpl, 3600), at=now, skipped=skipped)
        if skipped.kept:
            left = [Sample(labels, math.nan, now) for labels in skipped.kept]
            out[kube_state.skipped_name(name)] = left

    for name, tpl in kube_state.QUERIES.items():
        ask(name, tpl)
    for name, tpl in kube_state.second_round(out).items():
        ask(name, tpl)
    return out


def scraped(
    prometheus_factory,
    ksm_target,
    nodes: list,
    pods: list,
    pending: int,
    label_allowlist: tuple[str, ...] = DEFAULT_LABEL_ALLOWLIST,
) -> tuple[dict[str, list[Sample]], float]:
    """``nodes`` and ``pods`` served as KSM (exporting the node labels
    ``label_allowlist``) and scraped by a real Prometheus until ``pending`` pods show
    Pending: every queue query's answer then (``ksm_samples``), and that moment."""
    target, body = ksm_target
    body[0] = exposition(nodes, pods, label_allowlist)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=pending)
    now = time.time()
    return ksm_samples(PromClient(prom.url), now), now


def cluster(now: float) -> str:
    return exposition(*cluster_parts(now))


def cluster_parts(now: float, extra: list[KsmPod] | None = None) -> tuple[list, list]:
    """The nodes and pods of ``cluster`` (``extra`` pods appended)."""
    nodes = [
        KsmNode(
            "a100-node", {GPU: 2, "cpu": 64}, {"nvidia.com/gpu.product": "NVIDIA-A100", "zone": "x"}
        ),
        KsmNode("t4-node", {GPU: 4}, {"nvidia.com/gpu.product": "Tesla-T4"}),
    ]
    pods = [
        KsmPod(
            "ml",
            "train-a",
            "u1",
            "Running",
            now - 900,
            {GPU: 2},
            node="a100-node",
            start_time=now - 890,
        ),
        KsmPod(
            "ml",
            "train-t",
            "u2",
            "Running",
            now - 900,
            {GPU: 4},
            node="t4-node",
            start_time=now - 890,
        ),
        KsmPod(
            "ml",
            "waits-a100",
            "u3",
            "Pending",
            now - 300,
            {GPU: 1},
            node_selector={"nvidia.com/gpu.product": "NVIDIA-A100"},
        ),
        KsmPod("ml", "any-gpu", "u4", "Pending", now - 200, {GPU: 1}, priority_class="low"),
        KsmPod("ml", "too-big", "u5", "Pending", now - 100, {GPU: 8}),
        KsmPod("hub", "starting", "u6", "Pending", now - 5, {"cpu": 1}),  # no GPU: ignored
    ]
    return nodes, pods + (extra or [])


def assert_cluster_queue(q, more_pending: dict | None = None) -> None:
    """``cluster``'s nodes, pending pods (plus ``more_pending``) and holders, as parsed:
    no unit counted twice, none lost."""
    assert {n.name: (n.allocatable, n.product) for n in q.nodes} == {
        "a100-node": ({"nvidia_com_gpu": 2}, "NVIDIA-A100"),
        "t4-node": ({"nvidia_com_gpu": 4}, "Tesla-T4"),
    }
    assert {p.pod: (p.units, p.product, p.priority) for p in q.pending} == {
        "waits-a100": (1, "NVIDIA-A100", 0),
        "any-gpu": (1, "", -10),
        "too-big": (8, "", 0),
        **(more_pending or {}),
    }
    assert sorted((h.pod, h.units) for h in q.holders) == [("train-a", 2), ("train-t", 4)]


def test_exposition_passes_promtool():
    proc = promtool("check", "metrics", stdin=cluster(NOW))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_queries_against_real_prometheus(prometheus_factory, ksm_target):
    target, body = ksm_target
    body[0] = cluster(time.time())
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=4)
    client = PromClient(prom.url)
    now = time.time()
    samples = ksm_samples(client, now)
    q = kube_state.parse(samples, now, priorities={"low": -10})
    assert_cluster_queue(q)
    assert sum(a.rate_per_second for a in q.arrivals) * 3600 == pytest.approx(5)
    # any-gpu's class is "low": the pods like it arrive at its priority
    assert {(a.units, a.priority) for a in q.arrivals if a.priority} == {(1, -10)}

    ends = {
        ("ml", "train-a"): (now + 500, now + 600, now + 700),
        ("ml", "train-t"): (now + 100,) * 3,
    }
    result = predict(q, ends, [1000.0], now, PendingSettings(n_samples=50))
    by = {p.pod: p.prediction for p in result.pods}
    assert by["too-big"].status == NEVER_FITS
    assert by["waits-a100"].status == PREDICTED
    assert by["waits-a100"].starts[1] == pytest.approx(now + 600, abs=60)
    # any-gpu (low priority, behind waits-a100) takes a T4 at +100 s
    assert by["any-gpu"].starts[1] == pytest.approx(now + 100, abs=1)
    sizes = {(r.product, r.units): v for r, v in result.requests.items()}
    assert set(sizes) == {
        ("NVIDIA-A100", 1),
        ("NVIDIA-A100", 2),
        ("Tesla-T4", 1),
        ("Tesla-T4", 2),
        ("Tesla-T4", 4),
    }
    assert all(v.status in (PREDICTED, SCHEDULED) for v in sizes.values())


def test_pods_left_out_are_published_or_counted_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM-shaped series, through to /metrics: a pod asking
    2000 GPUs is ``never_fits``, a NaN request is ``pending_rejected``, a request of 0
    is no GPU pod (neither published nor counted), a pod past --pending.max-pods is
    ``pending_skipped``; all pass promtool."""
    now = time.time()
    pods = [
        KsmPod("ml", "fits", "u1", "Pending", now - 400, {GPU: 1}),
        KsmPod("ml", "huge", "u2", "Pending", now - 300, {GPU: 2000}),
        KsmPod("ml", "nan-req", "u3", "Pending", now - 250, {GPU: float("nan")}),  # type: ignore[dict-item]
        KsmPod("ml", "zero", "u4", "Pending", now - 220, {GPU: 0}),
        KsmPod("ml", "later", "u5", "Pending", now - 200, {GPU: 1}),
    ]
    samples, now = scraped(prometheus_factory, ksm_target, [KsmNode("n1", {GPU: 4})], pods, 5)
    q = kube_state.parse(samples, now)
    result = predict(q, {}, [600.0], now, PendingSettings(n_samples=10, max_pods=2))
    state = ServiceState()
    state.success(ForecastSet(timestamp=now, pending=result), 0.1, now)
    text = Exposition(state, clock=lambda: now).render("text/plain")[0].decode()
    info = {
        (s.labels["pod"], s.labels["gpus"], s.labels["status"])
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "gpu_eta_pod_start_prediction_info"
    }
    assert info == {("fits", "1", PREDICTED), ("huge", "2000", NEVER_FITS)}
    errors = {
        s.labels["reason"]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "gpu_eta_forecaster_job_errors_total"
    }
    assert errors == {"pending_rejected": 1, "pending_skipped": 1}
    proc = promtool("check", "metrics", stdin=text)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_pods_asking_zero_gpus_are_not_read_as_gpu_pods_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM-shaped series: ``nvidia.com/gpu: 0`` (a CPU-only
    profile overriding a GPU default, exported as a series of value 0) asks no GPU, so
    the queries that read GPU pods' times and metadata (``POD_TIMES``, ``POD_META``)
    leave such pods out, app or init container, pending or running: a cluster's CPU
    notebooks are not read every cycle, and a pending one without ``kube_pod_created``
    sends no second round (``uncreated``). A request of 1, app or init, is read."""
    now = time.time()
    tolerates = (KsmToleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    selects_a100 = {"nvidia.com/gpu.product": "NVIDIA-A100"}
    gpu = {"node_selector": selects_a100, "tolerations": tolerates, "priority_class": "p"}
    # the same three pods asking 1 GPU (ml, uids u-*) and 0 (hub, uids z-*): from the
    # app container, from an init container, and running
    pods = [
        KsmPod(ns, f"{kind}-{shape}", f"{tag}-{shape}", phase, now - 60, app, **gpu, **more)
        for units, ns, kind, tag in ((1, "ml", "gpu", "u"), (0, "hub", "cpu", "z"))
        for shape, phase, app, more in (
            ("app", "Pending", {GPU: units}, {}),
            ("init", "Pending", {"cpu": 1}, {"init_containers": {"setup": {GPU: units}}}),
            ("run", "Running", {GPU: units}, {"node": "n1", "start_time": now - 590}),
        )
    ]
    samples, now = scraped(prometheus_factory, ksm_target, [KsmNode("n1", {GPU: 4})], pods, 4)

    def read(part: str, tag: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for s in samples[part]:
            out.setdefault(s.labels[tag], set()).add(s.labels["uid"])
        return out

    assert read("ksm_pod_times", "time") == {
        "created": {"u-app", "u-init"},  # pending GPU pods only
        "started": {"u-run"},
    }
    pending_gpu = {"u-app", "u-init"}
    gpu_pods = {"u-app", "u-init", "u-run"}
    assert read("ksm_pod_meta", "meta") == {
        "info": pending_gpu,
        "nodeselectors": pending_gpu,
        "tolerations": pending_gpu,
        "owner": gpu_pods,  # every GPU pod's: a pod pending now holds GPUs next
        "restart_policy": gpu_pods,
    }
    # the GPU pods created in the window: their tolerations and GPU type (each pod here
    # was created in it; the running ones too)
    arrivals = read("ksm_arrivals", "arrival")
    assert (arrivals["tolerations"], arrivals["nodeselectors"]) == (gpu_pods, gpu_pods)
    # the zero requests' pods asked nothing more (none is a GPU pod without created)
    assert kube_state.uncreated(samples) == ()
    assert kube_state.second_round(samples) == {}
    q = kube_state.parse(samples, now)
    assert sorted(p.pod for p in q.pending) == ["gpu-app", "gpu-init"]
    assert [h.pod for h in q.holders] == ["gpu-run"]
    assert q.rejected == {}


def init_request(pod: str, container: str, value: float, **labels: str) -> Sample:
    """An ``INIT_REQUESTS`` series of ``pod_request``'s pod (``sidecar="true"``, ``node``,
    ``phase`` through ``labels``)."""
    base = {"namespace": "ml", "pod": pod, "uid": f"uid-{pod}", "resource": "nvidia_com_gpu"}
    return Sample({**base, "container": container, "phase": "Pending", **labels}, value, NOW)


def test_a_pod_asks_what_the_scheduler_counts_for_its_init_containers():
    """The effective request: the larger of the app containers' sum and the largest
    plain init container, sidecars added to both; a pod whose GPUs are all in init
    containers holds them; a NaN init request leaves the pod on its usable one; two KSM
    replicas disagreeing on a bound pod's node: the series with the node wins."""
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="8")],
        "ksm_pods": [
            pod_request("warmup", 1),  # a 4-GPU check before a 1-GPU job
            pod_request("sidecar", 1, "Running", "n1"),
            pod_request("nan-init", 2),
            pod_request("moved", 1, "Running"),  # one replica shows no node yet
            pod_request("moved", 1, "Running", "n1"),
        ],
        "ksm_init_requests": [
            init_request("warmup", "check", 4),
            init_request("warmup", "fetch", 2),
            init_request("sidecar", "proxy", 1, sidecar="true", node="n1", phase="Running"),
            init_request("sidecar", "setup", 1, node="n1", phase="Running"),
            init_request("init-only", "burn-in", 2),  # its app containers ask no GPU
            init_request("nan-init", "check", float("nan")),
        ],
        "ksm_pod_times": [
            sample(uid=f"uid-{p}", time="created", value=str(NOW - 60))
            for p in ("warmup", "init-only", "nan-init")
        ],
    }
    q = kube_state.parse(samples, NOW)
    assert {p.pod: p.units for p in q.pending} == {"warmup": 4, "init-only": 2, "nan-init": 2}
    assert {h.pod: (h.node, h.units) for h in q.holders} == {
        "sidecar": ("n1", 2),  # 1 + its sidecar's 1; the plain init's 1 runs before
        "moved": ("n1", 1),
    }
    assert q.rejected == {}


def test_init_containers_are_read_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM-shaped series: a pending pod whose init container
    asks 4 GPUs waits for a node with 4 free although its app asks 1; a running pod's
    GPU sidecar (``kube_pod_init_container_info{restart_policy="Always"}``) holds its GPU
    beside the app's (and beside its plain init container's, the larger); a pod arriving
    asks its largest init container's when larger than its app's (sidecars left out)."""
    target, body = ksm_target
    now = time.time()
    pods = [
        KsmPod(
            "ml",
            "serve",
            "u1",
            "Running",
            now - 600,
            {GPU: 1},
            node="n1",
            start_time=now - 590,
            init_containers={"proxy": {GPU: 1}, "setup": {GPU: 2}},
            sidecars=("proxy",),
        ),
        KsmPod(
            "ml", "warmup", "u2", "Pending", now - 60, {GPU: 1}, init_containers={"check": {GPU: 4}}
        ),
    ]
    body[0] = exposition([KsmNode("n1", {GPU: 4})], pods)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for("kube_pod_init_container_info == 1", min_results=2)
    now = time.time()
    q = kube_state.parse(ksm_samples(PromClient(prom.url), now), now)
    # its plain init container's 2 beside the sidecar started before it: 3 held
    assert [(h.pod, h.units) for h in q.holders] == [("serve", 3)]
    assert [(p.pod, p.units) for p in q.pending] == [("warmup", 4)]
    assert {(a.units, round(a.rate_per_second * 3600)) for a in q.arrivals} == {(2, 1), (4, 1)}
    result = predict(q, {("ml", "serve"): (now + 900,) * 3}, [600.0], now, PendingSettings())
    (warmup,) = result.pods
    assert warmup.units == 4 and warmup.prediction.starts[1] == pytest.approx(now + 900, abs=1)


def test_on_ksm_2_10_only_a_running_pods_running_init_container_is_a_sidecar(
    prometheus_factory, ksm_target
):
    """KSM 2.10 (no ``restart_policy`` label): an init container running while its pod is
    Running is a sidecar (added), one running while its pod is still Pending on its
    node is a plain init container (the larger of it and the app, not added)."""
    from tests.forecaster.test_kube_state_real_ksm import as_ksm_2_10

    target, body = ksm_target
    now = time.time()
    pods = [
        KsmPod(
            "ml",
            "run",
            "u1",
            "Running",
            now - 600,
            {GPU: 1},
            node="n1",
            start_time=now - 590,
            init_containers={"proxy": {GPU: 1}},
            sidecars=("proxy",),
        ),
        KsmPod(
            "ml",
            "starting",
            "u2",
            "Pending",
            now - 60,
            {GPU: 1},
            node="n1",
            init_containers={"setup": {GPU: 2}},
        ),
    ]
    running = {("ml", "run", "u1"): "proxy", ("ml", "starting", "u2"): "setup"}
    body[0] = as_ksm_2_10(exposition([KsmNode("n1", {GPU: 8})], pods), running)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for("kube_pod_init_container_status_running == 1", min_results=2)
    now = time.time()
    q = kube_state.parse(ksm_samples(PromClient(prom.url), now), now)
    assert sorted((h.pod, h.units) for h in q.holders) == [("run", 2), ("starting", 2)]


def test_the_sites_gpu_resources_are_read_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM-shaped series of a site whose time-slicing config
    renames the replicas (``nvidia.com/a100-shared``): with ``--pending.gpu-resource``
    its node, its holders, its pending pods (a GPU in an app or only in an init
    container) and its arrivals are the queue; without, the queue is empty."""
    target, body = ksm_target
    now = time.time()
    node = KsmNode(
        "a100-node",
        {RENAMED: 4, "cpu": 64},
        {"nvidia.com/gpu.product": "NVIDIA-A100", "nvidia.com/gpu.replicas": "4"},
    )
    pods = [
        KsmPod("ml", f"run{i}", f"r{i}", "Running", now - 600, {RENAMED: 1}, node="a100-node")
        for i in range(4)
    ]
    pods += [
        KsmPod("ml", "waits", "w1", "Pending", now - 60, {RENAMED: 1}),
        KsmPod("ml", "init", "w2", "Pending", now - 30, {}, init_containers={"c": {RENAMED: 1}}),
    ]
    allowlist = ("nvidia.com/gpu.product", "nvidia.com/gpu.replicas")
    body[0] = exposition([node], pods, label_allowlist=allowlist)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=2)
    client, now = PromClient(prom.url), time.time()

    def read(gpu_resources: tuple[str, ...]) -> ClusterQueue:
        samples = {
            name: client.instant(kube_state.render(tpl, 3600, gpu_resources), at=now)
            for name, tpl in kube_state.QUERIES.items()
        }
        return kube_state.parse(samples, now, gpu_resources=gpu_resources)

    q = read((RENAMED,))
    assert [(n.name, n.shared, n.product) for n in q.nodes] == [
        ("a100-node", {RENAMED_KSM: 4}, "NVIDIA-A100")
    ]
    assert sorted((h.pod, h.shared) for h in q.holders) == [(f"run{i}", True) for i in range(4)]
    assert sorted((p.pod, p.resource, p.units) for p in q.pending) == [
        ("init", RENAMED_KSM, 1),
        ("waits", RENAMED_KSM, 1),
    ]
    assert sum(a.rate_per_second for a in q.arrivals) * 3600 == pytest.approx(6)
    ends = {("ml", f"run{i}"): (now + 100 * (i + 1),) * 3 for i in range(4)}
    result = predict(q, ends, [1000.0], now, PendingSettings(n_samples=20))
    assert {p.pod: p.prediction.status for p in result.pods} == {
        "waits": PREDICTED,
        "init": PREDICTED,
    }
    empty = read(())
    assert (empty.nodes, empty.holders, empty.pending, empty.arrivals) == ((), (), (), ())


MEMORY_PRESSURE = ("node.kubernetes.io/memory-pressure", "", "NoSchedule")


def test_cordoned_and_not_ready_nodes_take_no_new_pod_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM's node series: a cordoned GPU node and a NotReady
    one are read as closed (a CPU node cordoned is not asked about), as is one tainted
    ``memory-pressure`` for pods not tolerating it; their free GPUs start nobody else,
    and a pod only they could hold is ``no_schedulable_node``. A pod tolerating memory
    pressure (PodTolerationRestriction's toleration of a Burstable pod) starts on that node."""
    target, body = ksm_target
    now = time.time()
    nodes = [
        KsmNode("open", {GPU: 1}),
        KsmNode("cordoned", {GPU: 4}, unschedulable=True),
        KsmNode("down", {GPU: 4}, ready=False),
        KsmNode("pressed", {GPU: 4}, taints=(MEMORY_PRESSURE,)),
        KsmNode("cpu-only", {"cpu": 64}, unschedulable=True),
    ]
    pods = [
        KsmPod(
            "ml", "run", "u1", "Running", now - 900, {GPU: 1}, node="open", start_time=now - 890
        ),
        KsmPod("ml", "one", "u2", "Pending", now - 300, {GPU: 1}, tolerations=DEFAULT_TOLERATIONS),
        KsmPod("ml", "four", "u3", "Pending", now - 200, {GPU: 4}, tolerations=DEFAULT_TOLERATIONS),
        KsmPod(
            "ml",
            "burstable",
            "u4",
            "Pending",
            now - 100,
            {GPU: 4},
            tolerations=(
                KsmToleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),
                *DEFAULT_TOLERATIONS,
            ),
        ),
    ]
    body[0] = exposition(nodes, pods)
    assert promtool("check", "metrics", stdin=body[0]).returncode == 0
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=2)
    prom.wait_for("kube_node_spec_unschedulable == 1", min_results=2)
    client = PromClient(prom.url)
    now = time.time()
    samples = ksm_samples(client, now)
    assert {(s.labels["node"], s.labels["state"]) for s in samples["ksm_node_state"]} == {
        ("cordoned", "cordoned"),
        ("down", "not_ready"),
        ("pressed", "taint"),
    }
    q = kube_state.parse(samples, now)
    assert {n.name: n.schedulable for n in q.nodes} == {
        "open": True,
        "cordoned": False,
        "down": False,
        "pressed": True,  # closed by its taint, to pods not tolerating it
    }
    ends = {("ml", "run"): (now + 100,) * 3}
    by = {
        p.pod: p.prediction
        for p in predict(q, ends, [1000.0], now, PendingSettings(n_samples=20)).pods
    }
    assert by["one"].status == PREDICTED
    assert by["one"].starts[1] == pytest.approx(now + 100, abs=1)  # not the 8 idle GPUs now
    assert (by["four"].status, by["four"].starts) == (NO_SCHEDULABLE_NODE, None)
    assert by["burstable"].status == PREDICTED
    assert by["burstable"].starts[1] == pytest.approx(now, abs=1)  # the pressed node's 4


# what the DefaultTolerationSeconds admission plugin gives every pod
DEFAULT_TOLERATIONS = tuple(
    KsmToleration(f"node.kubernetes.io/{k}", "Exists", "", "NoExecute", 300)
    for k in ("not-ready", "unreachable")
)


def test_a_tainted_pool_starts_only_pods_tolerating_it_end_to_end(prometheus_factory, ksm_target):
    """Real Prometheus scraping KSM's taints and tolerations: the team pool's taint is
    read (its PreferNoSchedule one and a CPU node's taint are not asked for), the GPU
    the pool frees at +100 s goes to the team's pod, and the older pod without the
    toleration waits for the open node's at +300 s. Served without
    ``kube_pod_tolerations`` (dropped, or KSM before 2.6), the taints are taken as
    tolerated by every pod rather than predicting it fits nowhere."""
    target, body = ksm_target
    now = time.time()
    team = ("dedicated", "team-a", "NoSchedule")
    nodes = [
        KsmNode("pool", {GPU: 2}, taints=(team, ("dedicated", "team-a", "PreferNoSchedule"))),
        KsmNode("open", {GPU: 1}),
        KsmNode("cpu-only", {"cpu": 64}, taints=(("dedicated", "infra", "NoSchedule"),)),
    ]
    member = (KsmToleration("dedicated", "Equal", "team-a", "NoSchedule"), *DEFAULT_TOLERATIONS)

    def running(pod: str, uid: str, node: str) -> KsmPod:
        return KsmPod("ml", pod, uid, "Running", now - 900, {GPU: 1}, node=node, start_time=now)

    def pods(with_tolerations: bool) -> list[KsmPod]:
        return [
            running("a", "u1", "pool"),
            running("b", "u2", "pool"),
            running("c", "u3", "open"),
            KsmPod(
                "ml",
                "outsider",
                "u4",
                "Pending",
                now - 300,
                {GPU: 1},
                tolerations=DEFAULT_TOLERATIONS if with_tolerations else (),
            ),
            KsmPod(
                "ml",
                "member",
                "u5",
                "Pending",
                now - 200,
                {GPU: 1},
                tolerations=member if with_tolerations else (),
            ),
        ]

    body[0] = exposition(nodes, pods(with_tolerations=True))
    assert promtool("check", "metrics", stdin=body[0]).returncode == 0
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=2)
    prom.wait_for("kube_pod_tolerations", min_results=len(DEFAULT_TOLERATIONS) * 2 + 1)
    client = PromClient(prom.url)
    ends = {("ml", "a"): (now + 100,) * 3, ("ml", "b"): (now + 5000,) * 3}
    ends[("ml", "c")] = (now + 300,) * 3
    settings = PendingSettings(n_samples=20)

    now = time.time()
    samples = ksm_samples(client, now)
    assert {
        (s.labels["node"], s.labels["key"], s.labels["value"], s.labels["effect"])
        for s in samples["ksm_node_state"]
        if s.labels.get("state") == "taint"
    } == {("pool", *team)}
    q = kube_state.parse(samples, now)
    assert {n.name: n.taints for n in q.nodes} == {"pool": (team,), "open": ()}
    assert q.rejected == {} and q.tolerations_missing == ()
    # pods arriving later tolerate what the pods created in the window did: one shape
    # per distinct set (the running pods show none: unknown)
    defaults = tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in DEFAULT_TOLERATIONS)
    member_tolerations = (Toleration("dedicated", "Equal", "team-a", "NoSchedule"), *defaults)
    shown = {tuple(sorted(defaults, key=str)), tuple(sorted(member_tolerations, key=str))}
    assert {(a.tolerations, round(a.rate_per_second * 3600)) for a in q.arrivals} == {
        *((tols, 1) for tols in shown),
        (None, 3),
    }
    by = {p.pod: p.prediction for p in predict(q, ends, [1000.0], now, settings).pods}
    assert by["member"].starts[1] == pytest.approx(ends[("ml", "a")][1], abs=1)
    assert by["outsider"].starts[1] == pytest.approx(ends[("ml", "c")][1], abs=1)

    body[0] = exposition(nodes, pods(with_tolerations=False))
    prom.wait_for("absent(kube_pod_tolerations)")
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    assert q.tainted_nodes == 1 and q.tolerations_missing == ("ml",)
    assert {p.tolerations for p in q.pending} == {None}
    # the window still holds the tolerations the pods showed before (last_over_time)
    assert {a.tolerations for a in q.arrivals} == {None, *shown}
    by = {p.pod: p.prediction for p in predict(q, ends, [1000.0], now, settings).pods}
    assert by["outsider"].starts[1] == pytest.approx(ends[("ml", "a")][1], abs=1)
    assert by["member"].status == PREDICTED


def test_arrivals_ask_for_the_gpu_type_their_pods_selected_end_to_end(
    prometheus_factory, ksm_target
):
    """Real Prometheus scraping KSM's node selectors: 30 one-GPU pods that selected an
    A100 finished in the last hour (and a two-GPU one that selected nothing), so the
    pods arriving later ask for an A100 (those of two GPUs, for any type). The H100 pod
    waiting for both H100 GPUs takes the one freed at +100 s and the one at +200 s,
    however fast A100 pods keep arriving."""
    target, body = ksm_target
    now = time.time()
    h100, a100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"
    nodes = [
        KsmNode("h100", {GPU: 2}, {"nvidia.com/gpu.product": h100}),
        KsmNode("a100", {GPU: 1}, {"nvidia.com/gpu.product": a100}),
    ]

    def running(pod: str, node: str) -> KsmPod:
        # created before the arrival window
        return KsmPod("ml", pod, pod, "Running", now - 7200, {GPU: 1}, node=node, start_time=now)

    done = [
        KsmPod(
            "ml",
            f"done-{k}",
            f"d{k}",
            "Succeeded",
            now - 600,
            {GPU: 1},
            node="a100",
            node_selector={"nvidia.com/gpu.product": a100, "zone": "x"},
        )
        for k in range(30)
    ]
    pods = [
        running("h-1", "h100"),
        running("h-2", "h100"),
        running("a-1", "a100"),
        KsmPod(
            "ml",
            "waiter",
            "w",
            "Pending",
            now - 60,
            {GPU: 2},
            node_selector={"nvidia.com/gpu.product": h100},
        ),
        KsmPod("ml", "any", "x", "Succeeded", now - 600, {GPU: 2}, node="h100"),
        *done,
    ]
    body[0] = exposition(nodes, pods)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for("kube_pod_nodeselectors", min_results=len(pods))
    now = time.time()
    q = kube_state.parse(ksm_samples(PromClient(prom.url), now), now)
    # the waiting pod was created in the window too
    shapes = {(a.units, a.product, round(a.rate_per_second * 3600)) for a in q.arrivals}
    assert shapes == {(1, a100, 30), (2, "", 1), (2, h100, 1)}
    ends = {
        ("ml", "h-1"): (now + 100,) * 3,
        ("ml", "h-2"): (now + 200,) * 3,
        ("ml", "a-1"): (now + 10**6,) * 3,
    }
    settings = PendingSettings(n_samples=10, arrivals_seconds=3600)
    by = {p.pod: p.prediction for p in predict(q, ends, [10**6], now, settings).pods}
    assert by["waiter"].starts == pytest.approx((now + 200,) * 3, abs=1)


def test_start_tracker_learns_from_pods_that_started():
    """Predictions of a pod that later runs calibrate the intervals published after."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import PendingSet, PodStart, StartTracker
    from gpu_eta.forecaster.queue_replay import (
        Holder,
        PendingPod,
        StartCalibrator,
        StartPrediction,
    )

    tracker = StartTracker(StartCalibrator(min_obs=3))
    pred = StartPrediction(PREDICTED, (NOW + 90, NOW + 100, NOW + 110), 1.0)
    for i in range(3):
        waiting = tuple(PendingPod("ml", f"p{j}", "nvidia_com_gpu", 1, NOW - 10) for j in range(3))
        queue = ClusterQueue(pending=waiting)
        out = tracker.update(
            queue, PendingSet(pods=(PodStart("ml", f"p{i}", "nvidia_com_gpu", 1, NOW, pred),)), NOW
        )
        assert out.interval_scale == 1.0
    # all three started 30 s after their P50: errors of 3 half-intervals
    running = tuple(
        Holder("ml", f"p{i}", "n1", "nvidia_com_gpu", 1, None, NOW + 130) for i in range(3)
    )
    out = tracker.update(
        ClusterQueue(holders=running),
        PendingSet(pods=(PodStart("ml", "next", "nvidia_com_gpu", 1, NOW, pred),)),
        NOW,
    )
    assert out.interval_scale == pytest.approx(3.0)
    assert out.pods[0].prediction.starts == pytest.approx((NOW + 70, NOW + 100, NOW + 130))


def test_a_pod_waiting_out_a_drain_does_not_widen_every_interval():
    """Five 8-GPU pods predicted while their node was open, then ``no_schedulable_node``
    through 4 h of maintenance, then started: their old predictions are not scored (a
    cordon is an admin's, not the queue's), so the published intervals stay as they
    were; scored, they took the scale to its 10x cap for every pod after."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import StartTracker
    from gpu_eta.forecaster.queue_replay import Holder, Node, PendingPod, StartCalibrator

    gpu, now = "nvidia_com_gpu", 1_000_000.0
    tracker = StartTracker(StartCalibrator(min_obs=3))
    settings = PendingSettings(n_samples=20)
    pods = tuple(PendingPod("ml", f"p{i}", gpu, 8, now - 100 - i) for i in range(5))
    open_q = ClusterQueue(
        nodes=(Node("n8", {gpu: 8}, "A100"),),
        holders=(Holder("ml", "big", "n8", gpu, 8, None, now - 10),),
        pending=pods,
    )
    ends = {("ml", "big"): (now + 500, now + 600, now + 700)}
    t = now
    for _ in range(20):
        tracker.update(open_q, predict(open_q, ends, [3600.0], t, settings), t)
        t += 10
    closed = ClusterQueue(nodes=(Node("n8", {gpu: 8}, "A100", schedulable=False),), pending=pods)
    for _ in range(10):
        out = tracker.update(closed, predict(closed, {}, [3600.0], t, settings), t)
        assert {p.prediction.status for p in out.pods} == {NO_SCHEDULABLE_NODE}
        t += 1440
    started = ClusterQueue(
        nodes=(Node("n8", {gpu: 8}, "A100"),),
        holders=tuple(Holder("ml", p.pod, "n8", gpu, 8, None, t) for p in pods),
    )
    tracker.update(started, predict(started, {}, [3600.0], t, settings), t)
    assert tracker.calibrator.n_obs == 0 and tracker.calibrator.scale == 1.0


def test_start_tracker_forgets_a_pod_only_after_the_grace():
    """A pod missing from reads that show GPU nodes (a KSM shard down) is remembered for
    ``forget_seconds``: started after a 60 s gap, its prediction is scored. One missing
    longer (deleted, then a pod of the same name runs) is forgotten and not scored."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import PendingSet, PodStart, StartTracker
    from gpu_eta.forecaster.queue_replay import (
        Holder,
        Node,
        PendingPod,
        StartCalibrator,
        StartPrediction,
    )

    gpu, node = "nvidia_com_gpu", Node("n1", {"nvidia_com_gpu": 1}, "A100")
    tracker = StartTracker(StartCalibrator(min_obs=1), forget_seconds=600.0)
    pred = StartPrediction(PREDICTED, (NOW + 90, NOW + 100, NOW + 110), 1.0)
    pods = tuple(PendingPod("ml", name, gpu, 1, NOW - 10) for name in ("short", "long"))
    tracker.update(
        ClusterQueue(nodes=(node,), pending=pods),
        PendingSet(pods=tuple(PodStart("ml", p.pod, gpu, 1, NOW, pred) for p in pods)),
        NOW,
    )
    tracker.update(ClusterQueue(nodes=(node,)), PendingSet(), NOW + 60)  # both unread
    running = (Holder("ml", "short", "n1", gpu, 1, None, NOW + 100),)
    tracker.update(ClusterQueue(nodes=(node,), holders=running), PendingSet(), NOW + 120)
    assert tracker.calibrator.n_obs == 1
    tracker.update(ClusterQueue(nodes=(node,)), PendingSet(), NOW + 601)  # "long" gone
    running = (Holder("ml", "long", "n1", gpu, 1, None, NOW + 700),)
    tracker.update(ClusterQueue(nodes=(node,), holders=running), PendingSet(), NOW + 720)
    assert tracker.calibrator.n_obs == 1


def test_two_ksm_replicas_scraped_apart_read_as_one(prometheus_factory):
    """KSM run as two replicas, each scraped (every series twice, ``instance`` apart):
    every query still answers, a pod's request is not doubled and a node's GPUs are
    not either. Before, the joins failed ("duplicate series for the match group") and
    the whole fold with them."""
    now = time.time()
    # the same exposition from both; one pending pod with a GPU in each of two containers
    two = KsmPod(
        "ml",
        "two-containers",
        "u9",
        "Pending",
        now - 50,
        {GPU: 1},
        more_containers={"aux": {GPU: 1}},
        tolerations=(KsmToleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),),
    )
    heavy = KsmPod(
        "ml", "init-heavy", "u10", "Pending", now - 40, {GPU: 1}, init_containers={"a": {GPU: 4}}
    )
    nodes, pods = cluster_parts(now, extra=[two, heavy])
    gpu_taint = ("nvidia.com/gpu", "present", "NoSchedule")
    nodes[0] = dataclasses.replace(nodes[0], taints=(gpu_taint,))
    body = exposition(nodes, pods)
    servers = [
        MetricsServer("127.0.0.1", 0, lambda _accept: (body.encode(), TEXT_FORMAT)).serve()
        for _ in range(2)
    ]
    try:
        prom = prometheus_factory(
            [ScrapeJob("kube-state-metrics", [f"127.0.0.1:{s.port}" for s in servers])]
        )
        prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=10)
        now = time.time()
        samples = ksm_samples(PromClient(prom.url), now)
        folded = queries.fold(
            {name: kube_state.render(tpl, 3600) for name, tpl in queries.PENDING.items()}
        )
        assert PromClient(prom.url).instant(folded, at=now)  # the fold answers too
    finally:
        for s in servers:
            s.stop()
    q = kube_state.parse(samples, now, priorities={"low": -10})
    assert_cluster_queue(q, {"two-containers": (2, "", 0), "init-heavy": (4, "", 0)})
    # a taint and a toleration read once each, the pods without one unknown
    assert {n.name: n.taints for n in q.nodes} == {"a100-node": (gpu_taint,), "t4-node": ()}
    assert {p.pod: p.tolerations for p in q.pending} == {
        "waits-a100": None,
        "any-gpu": None,
        "too-big": None,
        "two-containers": (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),),
        "init-heavy": None,
    }
    assert q.rejected == {} and q.tainted_nodes == 1 and len(q.tolerations_missing) == 1
    # arrivals: the two-container pod's 2 GPUs counted as 2, the init container's 4 once
    # (summed over the toleration sets the pods of a size showed)
    per_size: dict[int, float] = {}
    for a in q.arrivals:
        per_size[a.units] = per_size.get(a.units, 0.0) + a.rate_per_second * 3600
    assert {(units, round(n)) for units, n in per_size.items()} == {(1, 2), (2, 2), (4, 2), (8, 1)}
    # the A100 pod's selector read once, for its arrivals
    typed = [a for a in q.arrivals if a.product]
    assert [(a.units, a.product, round(a.rate_per_second * 3600)) for a in typed] == [
        (1, "NVIDIA-A100", 1)
    ]


# a join whose one side holds two series of one match group: refused by the engine
_DUPLICATE_JOIN = (
    'vector(1) * on () group_left () (label_replace(vector(1), "z", "1", "", "") '
    'or label_replace(vector(1), "z", "2", "", ""))'
)


def test_a_query_refused_on_its_data_is_a_query_error_through_the_client(
    prometheus_factory, tmp_path
):
    """Real Prometheus answers such a join ``execution`` (HTTP 422), VictoriaMetrics
    ``"422"``: through the real client both are ``PromQueryError`` (the class the
    cycle lets cost only the queue), while a server away stays a plain error."""
    from gpu_eta.forecaster.promparse import PromAPIError, PromQueryError
    from gpu_eta.launch.victoria import start_victoriametrics

    prom = prometheus_factory([])
    vm = start_victoriametrics([], data_dir=tmp_path / "vm")
    try:
        for url in (prom.url, vm.url):
            client = PromClient(url, retries=0)
            try:
                with pytest.raises(PromQueryError):
                    client.instant(_DUPLICATE_JOIN)
            finally:
                client.close()
    finally:
        vm.stop()
    away = PromClient("http://127.0.0.1:9", retries=0, timeout_seconds=2)
    try:
        with pytest.raises(PromAPIError) as err:
            away.instant("vector(1)")
        assert not isinstance(err.value, PromQueryError)
    finally:
        away.close()


def test_a_node_whose_gpu_count_is_no_count_is_counted_not_dropped_unseen():
    """Allocatable NaN, infinite, negative or beyond MAX_UNITS: the node is left out
    (as one with no GPU) and the series counted (``invalid_allocatable``, summed into
    ``pending_rejected``); 0 (a GPU node whose device plugin is down) is no error."""
    values = ("nan", "inf", "-1", "1e6", "0", "4")
    samples = {
        "ksm_nodes": [
            sample(node=f"n{i}", resource="nvidia_com_gpu", value=v) for i, v in enumerate(values)
        ]
    }
    q = kube_state.parse(samples, NOW)
    assert [n.name for n in q.nodes] == ["n5"]
    assert q.rejected == {"invalid_allocatable": 4}
    assert error_counts(predict(q, {}, [], NOW, PendingSettings())) == {"pending_rejected": 4}


def _denylisted_created_history(now: float) -> str:
    """Pending GPU pods as OpenShift's KSM shows them (no ``kube_pod_created``), every
    60 s since each was created: ``a-late`` (10 min ago), ``b-early`` (40 min), ``c-old``
    (3 h: before the arrival window); ``d-created`` (since 20 min, but KSM shows it
    created 5000 s ago) has its ``kube_pod_created``. One GPU, held by ``run``."""
    from tests.integration.test_forecaster_prometheus import om_add, om_text

    fams: dict[str, list[str]] = {}
    gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}
    pods = {"a-late": 600, "b-early": 2400, "c-old": 3 * 3600, "d-created": 1200, "run": 900}
    for pod, age in pods.items():
        ids = {"namespace": "ml", "pod": pod, "uid": f"u-{pod}"}
        bound = {"node": "n1"} if pod == "run" else {}
        ts = now - age
        while ts <= now - 5:
            for phase in ("Pending", "Running"):
                value = float((phase == "Running") == (pod == "run"))
                om_add(fams, "kube_pod_status_phase", {**ids, "phase": phase}, value, ts)
            om_add(
                fams,
                "kube_pod_container_resource_requests",
                {**ids, "container": "c", **bound, **gpu},
                1.0,
                ts,
            )
            if pod == "d-created":
                om_add(fams, "kube_pod_created", ids, now - 5000, ts)
            if pod == "run":
                om_add(fams, "kube_pod_start_time", ids, now - age, ts)
                om_add(fams, "kube_node_status_allocatable", {"node": "n1", **gpu}, 1.0, ts)
            ts += 60
    return om_text(fams)


def test_pending_pods_without_created_series_queue_by_when_first_seen_pending(
    tmp_path, prometheus_factory, caplog
):
    """OpenShift's KSM denylists ``^kube_.+_created$``: a pending GPU pod without
    ``kube_pod_created`` is queued by when Prometheus first saw it Pending (1 min
    steps), one pending longer than the arrival window (1 h) from its start; a pod
    with the series keeps its creation time. They are counted (``created_missing``),
    not rejected, and the service logs that once, not every cycle."""
    from gpu_eta.forecaster.queue_replay import queue_key

    now = time.time()
    om = tmp_path / "ksm.om"
    om.write_text(_denylisted_created_history(now))
    prom = prometheus_factory([], backfill_files=[om])
    client = PromClient(prom.url)
    samples = ksm_samples(client, now)
    uids = ("u-a-late", "u-b-early", "u-c-old")
    assert kube_state.uncreated(samples) == uids
    # too many uids to name: the query asks for every pending pod, the same times for these
    since = kube_state.pending_since_query([_uuid(i) for i in range(1000)])
    assert since is not None and "uid=~" not in since
    whole = {
        x.labels["uid"]: x.value for x in client.instant(kube_state.render(since, 3600), at=now)
    }
    named = samples[kube_state.PENDING_SINCE_PART]
    assert {x.labels["uid"]: x.value for x in named} == {u: whole[u] for u in uids}
    q = kube_state.parse(samples, now)
    created = {p.pod: p.created - now for p in q.pending}
    assert [p.pod for p in sorted(q.pending, key=queue_key)] == [
        "d-created",
        "c-old",
        "b-early",
        "a-late",
    ]
    assert created["d-created"] == pytest.approx(-5000, abs=1)
    for pod, age in (("a-late", 600), ("b-early", 2400), ("c-old", 3600)):
        assert created[pod] == pytest.approx(-age, abs=61), pod
    assert (q.created_missing, q.rejected) == (3, {})
    ends = {("ml", "run"): (now + 600,) * 3}
    result = predict(q, ends, [500.0], now, PendingSettings(n_samples=5))
    p50 = {p.pod: p.prediction.starts[1] - now for p in result.pods}
    assert [p50[p] for p in ("d-created", "c-old", "b-early", "a-late")] == pytest.approx(
        [600, 1100, 1600, 2100], abs=1
    )
    state = ServiceState()
    with caplog.at_level("WARNING", logger="gpu_eta.forecaster.publish"):
        for _ in range(3):
            state.success(ForecastSet(timestamp=now, pending=result), 0.1, now)
    lines = [r.getMessage() for r in caplog.records if "no creation time" in r.getMessage()]
    assert len(lines) == 1 and "first saw them Pending" in lines[0]


def _uuid(i: int) -> str:
    """A Kubernetes-like pod uid (a UUID), distinct per ``i``."""
    return f"{i:08x}-0000-4000-8000-{i:012x}"


def test_the_second_round_stays_within_the_query_bound_however_many_pods() -> None:
    """VictoriaMetrics refuses a query over 16 KiB: the second round, the node labels of
    the most keys read (``selector_plan``'s cap, in keys of Kubernetes' longest, 317
    characters, and in keys of 20) with the first-seen query of 1 to 5,000 pods without
    ``kube_pod_created`` and the arrivals first seen in the window, is sent in queries
    within ``queries.MAX_QUERY_CHARS`` (``batches``), ``SECOND_ROUND_PARTS`` at most;
    pods are named while that holds (some 100), then every pending pod is asked for."""
    from gpu_eta.forecaster import queries

    long_keys = [f"k{k:03d}_" + "x" * (kube_state.MAX_KEY_CHARS - 5) for k in range(40)]
    short_keys = [f"key_{k:03d}_" + "x" * 12 for k in range(kube_state.MAX_SELECTOR_KEYS + 10)]
    named = 0
    for keys in (long_keys, short_keys):
        # one pod per key: each pod's key is read while it fits
        meta = [
            sample(uid=f"uid-p{i}", meta="nodeselectors", **{f"nodeselector_{k}": "1"})
            for i, k in enumerate(keys)
        ]
        pods = [pod_request(f"p{i}", 1) for i in range(len(keys))]
        plan = kube_state.selector_plan({"ksm_pods": pods, "ksm_pod_meta": meta})
        assert plan.read and plan.not_read  # the cap is reached
        labels = kube_state.node_label_parts(plan.read)
        assert 1 <= len(labels) <= kube_state.MAX_LABEL_PARTS
        assert sorted(k for q in labels.values() for k in re.findall(r"label_(\w+)", q)) == list(
            plan.read
        )
        for n in (1, 10, 100, 150, 1000, 5000):
            since = kube_state.pending_since_query([_uuid(i) for i in range(n)])
            assert since is not None
            parts = kube_state.rendered(
                {
                    **labels,
                    kube_state.PENDING_SINCE_PART: since,
                    kube_state.ARRIVALS_SEEN_PART: kube_state.ARRIVALS_SEEN,
                },
                3600,
            )
            sent = kube_state.batches(parts, queries.fold, queries.MAX_QUERY_CHARS)
            assert len(sent) <= kube_state.SECOND_ROUND_PARTS, n
            named += "uid=~" in since
    assert named >= 6  # 1, 10, 100 pods are named


def _selecting(pod: str, created_ago: float, keys: dict[str, str], **meta: str) -> dict:
    """A pending pod's request, creation and nodeSelector series (``meta`` more of its
    ``ksm_pod_meta`` series' kinds: ``gated="1"``)."""
    uid = f"uid-{pod}"
    return {
        "ksm_pods": [pod_request(pod, 1)],
        "ksm_pod_times": [sample(uid=uid, time="created", value=str(NOW - created_ago))],
        "ksm_pod_meta": [
            sample(
                uid=uid, meta="nodeselectors", **{f"nodeselector_{k}": v for k, v in keys.items()}
            ),
            *(sample(uid=uid, meta=kind) for kind in meta),
        ],
    }


def _merged(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for name, series in part.items():
            out.setdefault(name, []).extend(series)
    return out


def test_node_selector_keys_past_the_cap_are_read_pod_by_pod_in_queue_order():
    """Pods selecting more keys than the node labels' read takes: the pods are gone
    through in the scheduler's order (priority, then creation; gated pods last) and a
    pod's keys are read only if all of them still fit. ``pool`` of the first pod is
    read, though scores of feature keys sort before it; the pod selecting 150 keys
    cannot be read whole and is passed over (``selector_not_read``: no node is known to
    carry its keys), as is one of high priority whose 100 keys fit only before the
    other's 30; the pods behind them still get theirs, a gated pod's last. A key not
    read is named as such, not as missing from the allow-list (``selectors_unchecked``).
    Ranked by key (in front, then by count), the 150 keys took most places and
    the 30 pods behind them lost ``zone``."""
    features = {f"feature_node_kubernetes_io_f{i:03d}": "true" for i in range(150)}
    some = {f"feature_node_kubernetes_io_s{i:03d}": "true" for i in range(30)}
    more = {f"feature_node_kubernetes_io_m{i:03d}": "true" for i in range(100)}
    samples = _merged(
        _selecting("first", 300, {"pool": "team-b"}),
        _selecting("many", 200, features),
        _selecting("urgent", 150, some),
        _selecting("late", 140, more),
        _selecting("two-zones", 100, {"zone": "z1"}),
        _selecting("zone-too", 90, {"zone": "z1"}),
        _selecting("held", 80, {"zz_rare": "x"}, gated="1"),
        {
            "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="4")],
            kube_state.NODE_LABELS_PART: [sample(node="n1", label_pool="team-b")],
            "ksm_pod_meta": [sample(uid="uid-urgent", meta="info", priority_class="high")],
        },
    )
    plan = kube_state.selector_plan(samples)
    assert set(plan.read) == {"pool", *some, "zone", "zz_rare"}
    assert plan.not_read == {k: 1 for k in (*features, *more)}
    # "urgent" ahead of "first": its 30 keys, pool, then "late"'s 100 do not fit
    ahead = kube_state.selector_plan(samples, {"high": 10})
    assert set(ahead.read) == set(plan.read) and ahead.not_read == plan.not_read
    q = kube_state.parse(samples, NOW)
    assert {p.pod: (p.selector, p.gated) for p in q.pending} == {
        "first": ((("pool", "team-b"),), False),
        "urgent": ((), False),
        "two-zones": ((), False),
        "zone-too": ((), False),
        "held": ((), True),
    }
    assert q.rejected == {"selector_not_read": 2}  # "many", "late"
    assert q.selectors_not_read == plan.not_read
    assert q.selectors_unchecked.keys() >= {"zone"}  # read, and no node shows it
    assert not q.selectors_unchecked.keys() & plan.not_read.keys()
    pending = predict(q, {}, [3600.0], NOW, PendingSettings(n_samples=5))
    line = describe(pending)
    assert "not read (more than 120 keys or 7,000 characters" in line
    (allowlist,) = [part for part in line.split("; ") if "allowlist" in part]
    assert "zone (2 pods)" in allowlist and "_f000" not in allowlist
    assert error_counts(pending)["pending_rejected"] == 2
    # a later pod whose keys fit is read though an earlier one's did not: with
    # "late" first, its 100 keys are read and "urgent"'s 30 are not
    swapped = _merged(
        {k: v for k, v in samples.items() if k != "ksm_pod_meta"},
        {"ksm_pod_meta": [s for s in samples["ksm_pod_meta"] if s.labels["uid"] != "uid-urgent"]},
        _selecting("urgent", 130, some),
    )
    assert set(kube_state.selector_plan(swapped).read) == {"pool", *more, "zone", "zz_rare"}


def _arriving(uid: str, keys: dict[str, str], created: bool = True) -> list[Sample]:
    """A GPU pod of the arrival window (``ARRIVALS``): its nodeSelector series, and its
    request when ``created`` in the window (else one seen in it, created before)."""
    selects = series(
        uid=uid, arrival="nodeselectors", **{f"nodeselector_{k}": v for k, v in keys.items()}
    )
    if not created:
        return [selects]
    return [selects, sample(uid=uid, resource="nvidia_com_gpu", arrival="request")]


def test_the_arrivals_node_selector_keys_are_read_after_the_pending_pods():
    """The keys the pods arriving select are read with what the pending pods' leave of
    the cap, the most pods' key sets first and each set all or none, and only while some
    GPU pod waits (nothing waiting, they delay no pod: no query for them). 5 pods created
    in the window select ``rack``, 2 select 119 feature keys (past the cap once
    ``pool`` and ``rack`` are read); one seen in the window but created before it is no
    arrival, its ``zone`` not read. A key of theirs not read is not held against any
    node (the 2 pods arrive anywhere) nor counted ``not_read``: no pending pod selects
    it, none is rejected for it."""
    features = {f"feature_node_kubernetes_io_f{i:03d}": "true" for i in range(119)}
    arrivals = [
        *(s for i in range(5) for s in _arriving(f"r{i}", {"rack": "r1"})),
        *(s for i in range(2) for s in _arriving(f"f{i}", features)),
        *_arriving("older", {"zone": "z1"}, created=False),
    ]
    samples = _merged(
        _selecting("first", 300, {"pool": "team-b"}),
        {
            "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="4")],
            "ksm_arrivals": arrivals,
        },
    )
    plan = kube_state.selector_plan(samples)
    assert plan.read == ("pool", "rack") and plan.not_read == {}
    assert kube_state.node_label_parts(plan.read).keys() == {kube_state.NODE_LABELS_PART}
    labels = sample(node="n1", label_pool="team-b", label_rack="r2", label_zone="z1")
    q = kube_state.parse({**samples, kube_state.NODE_LABELS_PART: [labels]}, NOW)
    assert {(a.selector, round(a.rate_per_second * 3600)) for a in q.arrivals} == {
        ((("rack", "r1"),), 5),
        ((), 2),
    }
    assert q.rejected == {} and q.selectors_unchecked == {}
    # the rack pods arriving fit no node: rack r1 is none's
    assert not [n for a in q.arrivals if a.selector for n in q.nodes if selects(n, a.selector)]
    # nothing waiting: no key of theirs is asked
    idle = {k: v for k, v in samples.items() if k not in ("ksm_pods", "ksm_pod_meta")}
    assert kube_state.selector_plan(idle) == kube_state.SelectorPlan()
    assert kube_state.second_round(idle) == {}
    # without kube_pod_created anywhere (denylisted), every GPU pod seen in the window may
    # be one first seen in it (ARRIVALS_SEEN, asked in the same second round): theirs too
    blind = {
        **samples,
        "ksm_pod_times": [],
        "ksm_arrivals": [s for s in arrivals if s.labels["arrival"] != "request"],
    }
    assert kube_state.denylisted(blind)
    assert kube_state.selector_plan(blind).read == ("pool", "rack", "zone")


def test_arrivals_selector_keys_are_held_against_the_nodes_the_queue_ends_with():
    """As a pending pod's: a key of the pods arriving that only a node kept as last read
    shows (``last_seen``, through ``dataclasses.replace``) is held once it is added."""
    gpu = "nvidia_com_gpu"
    arrival = Arrival(gpu, 1, 1.0, node_selector=(("pool", "x"),))
    read = ClusterQueue(nodes=(Node("g-1", {gpu: 4}, "T4", labels={}),), arrivals=(arrival,))
    assert read.arrivals[0].selector == () and read.selectors_unchecked == {}
    kept = Node("d-1", {gpu: 4}, "T4", labels={"pool": "x"})
    filled = dataclasses.replace(read, nodes=(*read.nodes, kept))
    assert filled.arrivals[0].selector == (("pool", "x"),)
    assert filled.selectors_checked == ()


# (first seen, minutes ago; phase then, and minutes ago it turned Running or
# Succeeded; GPUs; a toleration and a GPU type): pods before the window's start are no
# arrival, however they go on; the CPU pod is none either
_WINDOW_PODS = {
    "old-run": (180, "Running", None, 1, False),
    "old-wait": (180, "Pending", None, 1, False),
    "edge": (65, "Pending", None, 1, False),
    "ran": (50, "Running", (45, 20), 2, False),
    "new-run": (30, "Pending", (28, None), 1, False),
    "new-wait": (10, "Pending", None, 1, True),
    "cpu": (20, "Running", None, 0, False),
}
_A100 = "NVIDIA-A100-SXM4-80GB"
GPU_LABELS = {"resource": "nvidia_com_gpu", "unit": "integer"}


def _arrivals_history(now: float, created: str, kept_minutes: int = 240) -> str:
    """``_WINDOW_PODS`` as KSM shows them every 60 s from their first minute: with
    ``kube_pod_created`` for every pod (``created="all"``), for all but ``old-wait`` (its
    namespace's series dropped at scrape time: ``"one_missing"``) or for none
    (OpenShift's KSM: ``"denylisted"``). ``ran`` Running 45 min ago, Succeeded 20 min
    ago (still exported: not deleted); ``new-run`` Running 28 min ago; ``new-wait``
    tolerates ``dedicated=team-a`` and selects the A100 type. Only the last
    ``kept_minutes`` are written (Prometheus' history starting then)."""
    from tests.integration.test_forecaster_prometheus import om_add, om_text

    fams: dict[str, list[str]] = {}
    for pod, (age, phase, turns, gpus, typed) in _WINDOW_PODS.items():
        ids = {"namespace": "ml", "pod": pod, "uid": f"u-{pod}"}
        req = GPU_LABELS if gpus else {"resource": "cpu", "unit": "core"}
        born = now - 60 * age
        ts = max(born, now - 60 * kept_minutes)
        while ts <= now - 5:
            now_phase = phase
            if turns and ts >= now - 60 * turns[0]:
                now_phase = "Running"
            if turns and turns[1] is not None and ts >= now - 60 * turns[1]:
                now_phase = "Succeeded"
            for ph in ("Pending", "Running", "Succeeded"):
                om_add(
                    fams, "kube_pod_status_phase", {**ids, "phase": ph}, float(ph == now_phase), ts
                )
            bound = {"node": "n1"} if now_phase != "Pending" else {}
            om_add(
                fams,
                "kube_pod_container_resource_requests",
                {**ids, "container": "c", **bound, **req},
                float(gpus or 1),
                ts,
            )
            if created == "all" or (created == "one_missing" and pod != "old-wait"):
                om_add(fams, "kube_pod_created", ids, born, ts)
            if typed:
                toleration = {"key": "dedicated", "operator": "Equal", "value": "team-a"}
                om_add(fams, "kube_pod_tolerations", {**ids, **toleration}, 1.0, ts)
                selector = {kube_state.SELECTOR_LABEL: _A100}
                om_add(fams, "kube_pod_nodeselectors", {**ids, **selector}, 1.0, ts)
            om_add(fams, "kube_node_status_allocatable", {"node": "n1", **GPU_LABELS}, 8.0, ts)
            ts += 60
    return om_text(fams)


@pytest.mark.integration
@pytest.mark.parametrize("created", ["denylisted", "one_missing", "all"])
def test_arrivals_without_created_series_are_the_gpu_pods_first_seen_in_the_window(
    tmp_path, prometheus_factory, created
):
    """OpenShift's KSM exports no ``kube_pod_created``: the replay's arrivals are then
    the GPU pods Prometheus first saw inside the arrival window (1 h), Pending then,
    with their requests, tolerations and GPU type, asked in the second round
    (``ARRIVALS_SEEN``): the same as those ``kube_pod_created`` gives where KSM exports
    it. Pods there at the window's start (``old-*``, ``edge``, first seen 65 min ago)
    are none, whatever they did since; a finished pod first seen in it is one. Where
    the series is exported, even with one pending pod without it (placed by
    ``PENDING_SINCE``), the second round does not ask for them."""
    now = time.time()
    om = tmp_path / "ksm.om"
    om.write_text(_arrivals_history(now, created))
    prom = prometheus_factory([], backfill_files=[om])
    samples = ksm_samples(PromClient(prom.url), now)
    second = kube_state.second_round(samples)
    assert (kube_state.ARRIVALS_SEEN_PART in second) == (created == "denylisted")
    assert (kube_state.PENDING_SINCE_PART in second) == (created != "all")
    q = kube_state.parse(samples, now)
    team = (Toleration("dedicated", "Equal", "team-a"),)
    assert {
        (a.units, a.product, a.tolerations, round(a.rate_per_second * 3600, 6)) for a in q.arrivals
    } == {(2, "", None, 1), (1, "", None, 1), (1, _A100, team, 1)}
    assert {p.pod for p in q.pending} == {"old-wait", "edge", "new-wait"}


@pytest.mark.integration
def test_a_prometheus_younger_than_the_window_counts_no_arrival_without_created(
    tmp_path, prometheus_factory
):
    """Prometheus' history of the pods starts 40 min ago, inside the arrival window:
    every pod there then was first seen at that step, not created then, so without
    ``kube_pod_created`` none is counted an arrival (the whole cluster would arrive
    within the hour) until the history covers the window; the pods still queue."""
    now = time.time()
    om = tmp_path / "ksm.om"
    om.write_text(_arrivals_history(now, "denylisted", kept_minutes=40))
    prom = prometheus_factory([], backfill_files=[om])
    samples = ksm_samples(PromClient(prom.url), now)
    assert kube_state.ARRIVALS_SEEN_PART in kube_state.second_round(samples)
    q = kube_state.parse(samples, now)
    assert q.arrivals == ()
    assert {p.pod for p in q.pending} == {"old-wait", "edge", "new-wait"}


def test_the_second_round_asks_only_what_the_pods_read_call_for():
    """No second query on the usual cluster (every pending pod has ``kube_pod_created``,
    none selects a node label); the first-seen query names the pods without the series
    by uid (bound pods and pods with the series left out), and asks for every pending
    pod when the uids are too many or one cannot be named in a set match. The GPU
    pods first seen in the arrival window are asked only where no pending pod has the
    series and no GPU pod is known created in the window (``denylisted``)."""
    gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}

    def pod(uid: str, phase: str = "Pending", **more: str) -> Sample:
        return Sample(
            {"namespace": "ml", "pod": uid, "uid": uid, "phase": phase, **gpu, **more}, 1, NOW
        )

    created = [Sample({"uid": u, "time": "created"}, NOW - 60, NOW) for u in ("a", "b")]
    samples = {"ksm_pods": [pod("a"), pod("b"), pod("r", "Running", node="n")]}
    assert kube_state.second_round({**samples, "ksm_pod_times": created}) == {}
    samples["ksm_init_requests"] = [pod("c-1")]
    samples["ksm_pods"].append(pod("bound", node="n"))  # Pending on a node: a holder
    second = kube_state.second_round({**samples, "ksm_pod_times": created[:1]})
    assert list(second) == [kube_state.PENDING_SINCE_PART]
    assert kube_state.uncreated({**samples, "ksm_pod_times": created[:1]}) == ("b", "c-1")
    assert (
        'kube_pod_status_phase{phase="Pending",uid=~"b|c-1"} == 1'
        in second[kube_state.PENDING_SINCE_PART]
    )
    # no pending pod with the series, none known created in the window: denylisted
    # (OpenShift), the GPU pods first seen in the window asked too
    assert list(kube_state.second_round(samples)) == [
        kube_state.PENDING_SINCE_PART,
        kube_state.ARRIVALS_SEEN_PART,
    ]
    # ... but a GPU pod created in the window shows the series exported: not asked
    arrived = [Sample({"uid": "z", "arrival": "request", **gpu}, 1, NOW)]
    assert list(kube_state.second_round({**samples, "ksm_arrivals": arrived})) == [
        kube_state.PENDING_SINCE_PART
    ]
    # no pending pod: nothing to place, no queue for arrivals to delay
    assert kube_state.second_round({"ksm_pods": [pod("r", "Running", node="n")]}) == {}
    for uids in (["a\tb", "c"], [_uuid(i) for i in range(1000)]):
        query = kube_state.pending_since_query(uids)
        assert query is not None and 'kube_pod_status_phase{phase="Pending"} == 1' in query
    assert kube_state.pending_since_query(()) is None


def test_a_gpu_node_whose_device_plugin_is_away_is_kept_closed_with_its_capacity():
    """Allocatable 0 for every GPU resource, capacity 8 (``ksm_node_capacity``): the
    device plugin is away. Cordoned or not (a plugin crash leaves the node Ready and
    schedulable), the node is kept with its capacity and takes no new pod, so a pod only
    it can hold waits (no_schedulable_node), and its running pod stays a holder there.
    A capacity series of a node with allocatable GPUs is ignored; a malformed one is
    counted."""
    h100 = "NVIDIA-H100-80GB-HBM3"
    samples = {
        "ksm_nodes": [
            sample(
                node="h1", resource="nvidia_com_gpu", label_nvidia_com_gpu_product=h100, value="0"
            ),
            # of another type (a node of unknown type could be an H100 one)
            sample(
                node="a1",
                resource="nvidia_com_gpu",
                label_nvidia_com_gpu_product="NVIDIA-A100-SXM4-80GB",
                value="8",
            ),
        ],
        "ksm_node_capacity": [
            sample(node="h1", resource="nvidia_com_gpu", value="8"),
            sample(node="a1", resource="nvidia_com_gpu", value="8"),  # plugin back since
            sample(node="x1", resource="nvidia_com_gpu", value="nan"),
            sample(node="", resource="nvidia_com_gpu", value="8"),
        ],
        "ksm_pods": [
            pod_request("run", 2, "Running", "h1"),
            Sample({**pod_request("waits", 1).labels}, 1, NOW),
        ],
        "ksm_pod_meta": [
            series(uid="uid-waits", meta="nodeselectors", **{kube_state.SELECTOR_LABEL: h100})
        ],
        "ksm_pod_times": [Sample({"uid": "uid-waits", "time": "created"}, NOW - 60, NOW)],
    }
    q = kube_state.parse(samples, NOW)
    nodes = {n.name: n for n in q.nodes}
    assert (nodes["h1"].allocatable, nodes["h1"].product, nodes["h1"].schedulable) == (
        {"nvidia_com_gpu": 8},
        h100,
        False,
    )
    assert (nodes["a1"].allocatable, nodes["a1"].schedulable) == ({"nvidia_com_gpu": 8}, True)
    assert [(h.pod, h.node) for h in q.holders] == [("run", "h1")]
    assert q.rejected == {"invalid_allocatable": 1, "bad_node_series": 1}
    result = predict(q, {}, [600.0], NOW, PendingSettings(n_samples=5))
    assert [(p.pod, p.prediction.status) for p in result.pods] == [("waits", NO_SCHEDULABLE_NODE)]


def test_a_pod_deleted_and_recreated_under_its_name_is_scored_on_its_own_predictions():
    """``trainer-master-0`` waits, predicted to start at +100 s (P10-P90 +90..+110 s);
    its job is deleted at +30 s (read gone, GPU nodes read: not a KSM gap) and
    resubmitted at +300 s under the same pod name (a new uid), predicted +600 s, and
    starts at +600 s: a perfect prediction. The deleted pod's predictions, made for a
    pod that never started, are scored too (50 half-intervals late)."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import PendingSet, PodStart, StartTracker
    from gpu_eta.forecaster.queue_replay import (
        Holder,
        Node,
        PendingPod,
        StartCalibrator,
        StartPrediction,
    )

    gpu, node = "nvidia_com_gpu", Node("n1", {"nvidia_com_gpu": 1}, "A100")
    tracker = StartTracker(StartCalibrator(min_obs=1), forget_seconds=600.0)
    name = "trainer-master-0"
    first = PendingPod("ml", name, gpu, 1, NOW - 10)
    early = StartPrediction(PREDICTED, (NOW + 90, NOW + 100, NOW + 110), 1.0)
    tracker.update(
        ClusterQueue(nodes=(node,), pending=(first,)),
        PendingSet(pods=(PodStart("ml", name, gpu, 1, NOW, early),)),
        NOW,
    )
    tracker.update(ClusterQueue(nodes=(node,)), PendingSet(), NOW + 30)  # deleted
    again = PendingPod("ml", name, gpu, 1, NOW + 300)
    late = StartPrediction(PREDICTED, (NOW + 590, NOW + 600, NOW + 610), 1.0)
    tracker.update(
        ClusterQueue(nodes=(node,), pending=(again,)),
        PendingSet(pods=(PodStart("ml", name, gpu, 1, NOW + 300, late),)),
        NOW + 300,
    )
    running = (Holder("ml", name, "n1", gpu, 1, None, NOW + 600),)
    tracker.update(ClusterQueue(nodes=(node,), holders=running), PendingSet(), NOW + 630)
    assert tracker.calibrator.n_obs == 1
    assert tracker.calibrator.scale == 0.5  # one exact prediction: the narrowest scale


def test_a_pods_creation_time_moving_with_the_arrival_window_keeps_its_predictions():
    """Without ``kube_pod_created`` a pod pending longer than the arrival window is
    placed at the window's start, which moves forward every read; it stays before the
    last read, so it is the same pod: both predictions are scored at its start."""
    from gpu_eta.forecaster.pending import PendingSet, PodStart, StartTracker
    from gpu_eta.forecaster.queue_replay import Holder, StartCalibrator, StartPrediction

    gpu, node = "nvidia_com_gpu", Node("n1", {"nvidia_com_gpu": 1}, "A100")
    tracker = StartTracker(StartCalibrator(min_obs=1), forget_seconds=600.0)
    exact = StartPrediction(PREDICTED, (NOW + 590, NOW + 600, NOW + 610), 1.0)
    for t in (NOW, NOW + 60):  # the window's start moves with each read
        tracker.update(
            ClusterQueue(nodes=(node,), pending=(PendingPod("ml", "p", gpu, 1, t - 3600),)),
            PendingSet(pods=(PodStart("ml", "p", gpu, 1, t - 3600, exact),)),
            t,
        )
    running = (Holder("ml", "p", "n1", gpu, 1, None, NOW + 600),)
    tracker.update(ClusterQueue(nodes=(node,), holders=running), PendingSet(), NOW + 630)
    assert tracker.calibrator.n_obs == 2


def test_whether_a_holder_ends_with_its_run_is_read_from_its_owner_and_restart_policy():
    """A forecast is its run's end: the GPUs of a Job's or a training operator's pod
    free then (the owner kept, shared with the job's other pods), a notebook server's
    (a StatefulSet's, a Deployment's, a bare pod KubeSpawner made with ``OnFailure``)
    do not. A bare pod frees with its run only with ``restartPolicy: Never``; without
    ``kube_pod_owner`` it is not known (a run's end, as before)."""
    cases = {
        # pod: (owner series (kind, name), restart policy, expected (ends_with_run, owner))
        "job": ([("Job", "train")], "OnFailure", (True, ("Job", "train"))),
        "worker": ([("PyTorchJob", "llm")], "OnFailure", (True, ("PyTorchJob", "llm"))),
        "kubeflow": ([("StatefulSet", "nb")], "Always", (False, None)),
        "serving": ([("ReplicaSet", "llm-7d4f")], None, (False, None)),
        "jupyter": ([("<none>", "<none>")], "OnFailure", (False, None)),
        "policy-dropped": ([("<none>", "<none>")], None, (False, None)),
        "bare-run": ([("<none>", "<none>")], "Never", (True, None)),
        "unknown": ([], "Never", (None, None)),
        # several references: the controller's decides, whatever the others say
        "job-and-ref": (
            [("ConfigMap", "cfg", "false"), ("Job", "tune", "true")],
            "Never",
            (True, ("Job", "tune")),
        ),
        "ref-to-job": (
            [("Workflow", "wf", "false"), ("StatefulSet", "nb", "true")],
            "Always",
            (False, None),
        ),
    }
    meta = []
    for pod, (owners, policy, _) in cases.items():
        for kind, name, *controller in owners:
            labels = {"owner_is_controller": controller[0]} if controller else {}
            meta.append(
                series(uid=f"uid-{pod}", meta="owner", owner_kind=kind, owner_name=name, **labels)
            )
        if policy is not None:
            meta.append(series(uid=f"uid-{pod}", meta="restart_policy", type=policy))
    samples = {
        "ksm_nodes": [sample(node="n1", resource="nvidia_com_gpu", value="8")],
        "ksm_pods": [pod_request(pod, 1, "Running", "n1") for pod in cases],
        "ksm_pod_meta": meta,
    }
    q = kube_state.parse(samples, NOW)
    read = {h.pod: (h.ends_with_run, h.owner) for h in q.holders}
    assert read == {pod: case[2] for pod, case in cases.items()}
