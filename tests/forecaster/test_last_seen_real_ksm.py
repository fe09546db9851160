"""Re-review of the queue's "kept as last read" nodes (last_seen) and the nodeSelector
match against real Prometheus scraping kube-state-metrics-shaped series.

Each test holds a case found in review: a node read with no GPU, a pod read finished,
an autoscaler's scale-down, a key only a kept node shows, hostname pinning, nodes with
many labels.
"""

from __future__ import annotations

import time

import pytest

from gpu_eta.forecaster import kube_state
from gpu_eta.forecaster.last_seen import LastSeen
from gpu_eta.forecaster.pending import PendingSettings, predict
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.queue_replay import PREDICTED
from gpu_eta.launch.prometheus import ScrapeJob
from gpu_eta.simulation.ksm import GPU, KsmNode, KsmPod, exposition
from tests.forecaster.test_kube_state import ksm_samples

PRODUCT = "nvidia.com/gpu.product"
T4 = "Tesla-T4"


def test_a_node_read_with_no_allocatable_gpu_is_not_kept_with_its_old_gpus(
    prometheus_factory, ksm_target
):
    """Two single-T4 nodes (the most common small GPU node). t4-2 is busy for 2 h; t4-1
    is free, then its GPU falls off the bus (XID 79): the device plugin marks it
    unhealthy and the kubelet sets allocatable nvidia.com/gpu to 0. KSM keeps serving
    the node, ``kube_node_status_allocatable{resource="nvidia_com_gpu"} 0`` included:
    the read says plainly that the node has no GPU to give. A pod waiting for a T4 can
    only start when t4-2 frees (+2 h); last_seen fills t4-1 back in as last read (1
    free GPU), and the pod is predicted to start now."""
    target, body = ksm_target
    t0 = time.time()
    busy = KsmPod(
        "ml", "run", "u1", "Running", t0 - 900, {GPU: 1}, node="t4-2", start_time=t0 - 890
    )
    waiting = KsmPod("ml", "wants-t4", "u2", "Pending", t0 - 60, {GPU: 1})
    healthy = [
        KsmNode("t4-1", {GPU: 1}, {PRODUCT: T4}),
        KsmNode("t4-2", {GPU: 1}, {PRODUCT: T4}),
    ]
    body[0] = exposition(healthy, [busy], label_allowlist=(PRODUCT,))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_node_status_allocatable{node="t4-1"} == 1', min_results=1)
    client = PromClient(prom.url)
    seen = LastSeen(600.0)
    now = time.time()
    seen.fill(kube_state.parse(ksm_samples(client, now), now), now)

    unhealthy = [KsmNode("t4-1", {GPU: 0}, {PRODUCT: T4}), healthy[1]]
    body[0] = exposition(unhealthy, [busy, waiting], label_allowlist=(PRODUCT,))
    prom.wait_for('kube_node_status_allocatable{node="t4-1"} == 0', min_results=1)
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    now = time.time()
    read = kube_state.parse(ksm_samples(client, now), now)
    assert [n.name for n in read.nodes] == ["t4-2"]  # the read: t4-1 has no GPU
    queue, kept = seen.fill(read, now)
    ends = {("ml", "run"): (now + 7200,) * 3}
    result = predict(queue, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 7200, abs=120)
    assert kept.nodes == ()


def test_a_pod_read_succeeded_is_not_kept_as_holder_of_a_node_missing_from_the_read(
    prometheus_factory, ksm_target
):
    """KSM sharded in two (uid hash): node h-1 is served by shard 1, its pod ``run`` by
    shard 0. Shard 1 goes down (h-1 missing from the read, kept by last_seen). Shard 0,
    up, shows ``run`` finished: ``kube_pod_status_phase{phase="Succeeded"} 1`` (a Job's
    pod stays so until its TTL). The pod waiting for an H100 can start once h-1's GPUs
    are free, that is now; the kept holder makes it wait for ``run``'s forecast end."""
    target, body = ksm_target
    t0 = time.time()
    h100 = "NVIDIA-H100-80GB-HBM3"
    node = KsmNode("h-1", {GPU: 8}, {PRODUCT: h100})
    running = KsmPod(
        "ml", "run", "u1", "Running", t0 - 900, {GPU: 8}, node="h-1", start_time=t0 - 890
    )
    body[0] = exposition([node], [running], label_allowlist=(PRODUCT,))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Running"} == 1', min_results=1)
    client = PromClient(prom.url)
    seen = LastSeen(600.0)
    now = time.time()
    seen.fill(kube_state.parse(ksm_samples(client, now), now), now)

    done = KsmPod(
        "ml", "run", "u1", "Succeeded", t0 - 900, {GPU: 8}, node="h-1", start_time=t0 - 890
    )
    waiting = KsmPod("ml", "wants-h100", "u2", "Pending", t0 - 30, {GPU: 8})
    body[0] = exposition([], [done, waiting], label_allowlist=(PRODUCT,))  # shard 1 down
    prom.wait_for('kube_pod_status_phase{phase="Succeeded"} == 1', min_results=1)
    prom.wait_for("absent(kube_node_labels)", min_results=1)
    now = time.time()
    queue, kept = seen.fill(kube_state.parse(ksm_samples(client, now), now), now)
    assert kept.nodes == ("h-1",)  # the node itself is rightly kept
    ends = {("ml", "run"): (now + 7200,) * 3}  # the run's last forecast, before it ended
    result = predict(queue, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now, abs=120)


def test_a_selector_key_only_a_kept_node_shows_is_still_held(prometheus_factory, ksm_target):
    """A dedicated node d-1 (``dedicated=team-x``, allow-listed) busy for 2 h, and a
    general node g-1 without that label, idle; a pod pinned by ``nodeSelector:
    {dedicated: team-x}`` waits (the nodes' ``dedicated`` label is read for it). The KSM
    shard serving d-1 (and its running pod) goes down: d-1 is kept as last read, labels
    included. The pinned pod can still only start on d-1 (+2 h); read, its key is
    unknown to every node of the read, so it is not held, and the pod is predicted to
    start now on g-1. (The node labels read are the keys pending pods select: a key
    first selected while d-1's shard is away is not known on d-1, docs/pending.md.)"""
    target, body = ksm_target
    t0 = time.time()
    allow = (PRODUCT, "dedicated")
    nodes = [
        KsmNode("d-1", {GPU: 4}, {PRODUCT: T4, "dedicated": "team-x"}),
        KsmNode("g-1", {GPU: 4}, {PRODUCT: T4}),
    ]
    run = KsmPod("ml", "run", "u1", "Running", t0 - 900, {GPU: 4}, node="d-1", start_time=t0 - 890)
    pinned = KsmPod(
        "ml", "pinned", "u2", "Pending", t0 - 30, {GPU: 1}, node_selector={"dedicated": "team-x"}
    )
    body[0] = exposition(nodes, [run, pinned], label_allowlist=allow)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_node_labels{label_dedicated="team-x"}', min_results=1)
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    seen = LastSeen(600.0)
    now = time.time()
    seen.fill(kube_state.parse(ksm_samples(client, now), now), now)

    body[0] = exposition(nodes[1:], [pinned], label_allowlist=allow)  # d-1's shard down
    prom.wait_for('absent(kube_node_labels{node="d-1"})', min_results=1)
    now = time.time()
    queue, kept = seen.fill(kube_state.parse(ksm_samples(client, now), now), now)
    assert kept.nodes == ("d-1",)
    ends = {("ml", "run"): (now + 7200,) * 3}
    result = predict(queue, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 7200, abs=120)
    assert dict(queue.selectors_unchecked) == {}


def test_a_pod_pinned_by_hostname_waits_for_its_node_on_default_allowlist(
    prometheus_factory, ksm_target
):
    """KSM's default allow-list exports no node label; the docs ask for the GPU product
    only. ``kubernetes.io/hostname`` is set by the kubelet to the node's name on every
    managed Kubernetes (EKS, GKE, AKS) and kubeadm. A pod pinned to the busy node
    ``t4-2`` (``nodeSelector: {kubernetes.io/hostname: t4-2}``) starts when its run ends
    (+2 h); it is predicted to start now on ``t4-1``."""
    target, body = ksm_target
    t0 = time.time()
    host = "kubernetes.io/hostname"
    nodes = [
        KsmNode("t4-1", {GPU: 1}, {PRODUCT: T4, host: "t4-1"}),
        KsmNode("t4-2", {GPU: 1}, {PRODUCT: T4, host: "t4-2"}),
    ]
    run = KsmPod("ml", "run", "u1", "Running", t0 - 900, {GPU: 1}, node="t4-2", start_time=t0 - 890)
    pinned = KsmPod(
        "ml", "pinned", "u2", "Pending", t0 - 30, {GPU: 1}, node_selector={host: "t4-2"}
    )
    body[0] = exposition(nodes, [run, pinned], label_allowlist=(PRODUCT,))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    assert client.instant(
        'kube_pod_nodeselectors{nodeselector_kubernetes_io_hostname="t4-2"}', at=now
    )
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 7200, abs=120)


def test_a_node_the_autoscaler_removed_is_not_reported_as_a_ksm_shard_down(
    prometheus_factory, ksm_target, tmp_path, caplog
):
    """A cluster autoscaler scales down g-2: it taints it ``ToBeDeletedByClusterAutoscaler``
    (read so by the cycle), then deletes the node. Its series leave the read because the
    node left the cluster, which the last read announced; the log says KSM may be down."""
    from gpu_eta.forecaster.config import CycleSettings
    from gpu_eta.forecaster.cycle import Cycle
    from gpu_eta.forecaster.history import HistoryStore

    target, body = ksm_target
    t0 = time.time()
    waiting = KsmPod("ml", "wants-t4", "u2", "Pending", t0 - 60, {GPU: 1})
    stays = KsmNode("g-1", {GPU: 1}, {PRODUCT: T4})
    leaving = KsmNode(
        "g-2",
        {GPU: 1},
        {PRODUCT: T4},
        taints=(("ToBeDeletedByClusterAutoscaler", "1733380000", "NoSchedule"),),
    )
    body[0] = exposition([stays, leaving], [waiting], label_allowlist=(PRODUCT,))
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
        prom.wait_for("kube_node_spec_taint", min_results=1)
        prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
        cycle = Cycle(PromClient(prom.url), store, CycleSettings(background_refit=False))
        assert cycle.run().pending is not None
        body[0] = exposition([stays], [waiting], label_allowlist=(PRODUCT,))
        prom.wait_for("absent(kube_node_spec_taint)", min_results=1)
        caplog.clear()
        with caplog.at_level("INFO", logger="gpu_eta"):
            assert cycle.run().pending is not None
    finally:
        store.close()
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert not [m for m in said if "KSM shard" in m], said


def test_a_pool_selector_is_held_on_nodes_with_many_allow_listed_labels(
    prometheus_factory, ksm_target
):
    """The NVIDIA GPU Operator installs node-feature-discovery, which labels a GPU node
    with 100-200 ``feature.node.kubernetes.io/*`` keys; a site that allow-lists
    ``nodes=[*]`` (to select by any label) exports them all in ``kube_node_labels``. Two
    pools as in the pool test above, each node with 130 labels: ``wants-b`` waits for
    pool b (+2 h). Measured beside this test: 1000 such nodes with 150 labels and two
    KSM replicas make a 19 MB answer for ``ksm_node_labels`` every cycle (``ksm_nodes``:
    162 kB), every series of it skipped."""
    target, body = ksm_target
    t0 = time.time()
    features = {f"feature.node.kubernetes.io/cpu-cpuid.F{i:03d}": "true" for i in range(128)}
    allow = (PRODUCT, "pool", *features)
    nodes = [
        KsmNode("a-1", {GPU: 4}, {**features, PRODUCT: T4, "pool": "team-a"}),
        KsmNode("b-1", {GPU: 4}, {**features, PRODUCT: T4, "pool": "team-b"}),
    ]
    pods = [
        KsmPod("ml", "b-run", "u1", "Running", t0 - 900, {GPU: 4}, node="b-1", start_time=t0 - 890),
        KsmPod(
            "ml", "wants-b", "u2", "Pending", t0 - 60, {GPU: 1}, node_selector={"pool": "team-b"}
        ),
    ]
    body[0] = exposition(nodes, pods, label_allowlist=allow)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    assert client.instant('count(kube_node_labels{label_pool="team-b"})', at=now)
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "b-run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 7200, abs=120)
    assert dict(q.selectors_unchecked) == {}
