"""The queue read against what a real kube-state-metrics (v2.10-v2.13) serves.

Each test holds a case where the queue predictor read less than KSM exposes, or read
it differently, on a cluster run with the NVIDIA GPU Operator (OpenShift's denylist, a
shard down, a driver upgrade, deletion timestamps, KSM 2.10 sidecars, pools); the
source each was checked against is named in its docstring.
"""

from __future__ import annotations

import time

import pytest

from gpu_eta.common.k8s_names import ksm_label
from gpu_eta.common.metrics_http import TEXT_FORMAT, MetricsServer
from gpu_eta.forecaster import kube_state
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.kube_state import NO_OWNER
from gpu_eta.forecaster.pending import PendingSettings, predict
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.queue_replay import (
    BEYOND_HORIZON,
    GATED,
    NEVER_FITS,
    NO_SCHEDULABLE_NODE,
    PREDICTED,
)
from gpu_eta.launch.prometheus import ScrapeJob
from gpu_eta.simulation.ksm import (
    GPU,
    STATUS_REASONS,
    STATUS_REASONS_2_10,
    KsmNode,
    KsmPod,
    exposition,
)
from tests.forecaster.test_kube_state import ksm_samples, scraped

PRODUCT = "nvidia.com/gpu.product"


def test_a_pod_pinned_to_a_pool_by_node_selector_waits_for_that_pool(
    prometheus_factory, ksm_target
):
    """Two pools of the same GPU type, told apart by a node label KSM is allowed to export
    (``--metric-labels-allowlist=nodes=[nvidia.com/gpu.product,pool]``). Pool b is full
    until +2 h, pool a idle. A pod with ``nodeSelector: {pool: team-b}`` cannot start on
    pool a (kube-scheduler's NodeAffinity filter matches every nodeSelector key), so
    its P50 start is when pool b frees.

    Checked against KSM ``internal/store/pod.go`` (``kube_pod_nodeselectors``:
    ``kubeMapToPrometheusLabels("nodeselector", p.Spec.NodeSelector)``, every key, opt-in)
    and ``node.go`` (``kube_node_labels``, allow-listed keys as ``label_<sanitised>``).
    Reading ``nodeselector_nvidia_com_gpu_product`` alone (``kube_state.SELECTOR_LABEL``)
    predicts a start now, on pool a."""
    target, body = ksm_target
    now = time.time()
    nodes = [
        KsmNode("a-1", {GPU: 4}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "team-a"}),
        KsmNode("b-1", {GPU: 4}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "team-b"}),
    ]
    pods = [
        KsmPod(
            "ml", "b-run", "u1", "Running", now - 900, {GPU: 4}, node="b-1", start_time=now - 890
        ),
        KsmPod(
            "ml", "wants-b", "u2", "Pending", now - 60, {GPU: 1}, node_selector={"pool": "team-b"}
        ),
    ]
    body[0] = exposition(nodes, pods, label_allowlist=(PRODUCT, "pool"))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    # Prometheus holds both sides of the match: the pod's selector and the pool's label
    assert client.instant('kube_pod_nodeselectors{nodeselector_pool="team-b"}', at=now)
    assert client.instant('kube_node_labels{label_pool="team-b"}', at=now)
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "b-run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 7200, abs=60)


def two_pools(
    now: float, other: KsmPod, more_keys: dict[str, str] | None = None
) -> tuple[list[KsmNode], list[KsmPod]]:
    """Pools a and b of one GPU type told apart by ``pool``, b full until its run ends
    (``b-run``); ``wants-b`` pending 120 s selecting ``pool: team-b`` (and
    ``more_keys``), then ``other``."""
    nodes = [
        KsmNode("a-1", {GPU: 4}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "team-a"}),
        KsmNode("b-1", {GPU: 4}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "team-b"}),
    ]
    selects = {"pool": "team-b", **(more_keys or {})}
    pods = [
        KsmPod(
            "ml", "b-run", "u1", "Running", now - 900, {GPU: 4}, node="b-1", start_time=now - 890
        ),
        KsmPod("ml", "wants-b", "u2", "Pending", now - 120, {GPU: 1}, node_selector=selects),
        other,
    ]
    return nodes, pods


def test_a_pod_selecting_many_feature_keys_does_not_unpin_another_pods_pool(
    prometheus_factory, ksm_target
):
    """The pool case above, beside a pod of another tenant selecting 32
    node-feature-discovery keys (``feature.node.kubernetes.io/...``, which sort before
    ``pool``). Every key the pending pods select is read from ``kube_node_labels`` (up
    to ``kube_state.MAX_SELECTOR_KEYS``), so ``pool`` is still held: ``wants-b`` waits
    for pool b (+2 h). Read as the first 32 keys by name, ``pool`` was never asked, was
    logged as not allow-listed, and ``wants-b`` was predicted to start now on pool a."""
    now = time.time()
    features = {f"feature.node.kubernetes.io/f{i:02d}": "true" for i in range(32)}
    nodes, pods = two_pools(
        now,
        KsmPod("other", "nfd", "u3", "Pending", now - 30, {GPU: 1}, node_selector=features),
    )
    samples, now = scraped(prometheus_factory, ksm_target, nodes, pods, 2, (PRODUCT, "pool"))
    q = kube_state.parse(samples, now)
    assert "pool" in q.selectors_checked and "pool" not in q.selectors_unchecked
    ends = {("ml", "b-run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    got = {p.pod: p.prediction for p in result.pods}
    assert got["wants-b"].status == PREDICTED
    assert got["wants-b"].starts[1] == pytest.approx(now + 7200, abs=60)
    # the feature keys no node label shows are not held: that pod starts now, on pool a
    assert got["nfd"].starts[1] == pytest.approx(now, abs=60)


def test_a_pod_whose_keys_overflow_the_cap_leaves_the_pods_before_it_their_pool(
    prometheus_factory, ksm_target
):
    """The pool case above, beside a pod created later selecting 121
    node-feature-discovery keys: one more than the node labels' read takes
    (``kube_state.MAX_SELECTOR_KEYS``). The pods are gone through in the scheduler's
    order and a pod's keys are read only if all of them fit, so ``pool`` (``wants-b``,
    first in the queue) is read and ``wants-b`` waits for pool b (+2 h), and only
    ``nfd`` goes unpredicted (``selector_not_read``). Ranked by key, the feature keys
    took every place, ``pool`` was not read and both pods got no prediction."""
    now = time.time()
    n = kube_state.MAX_SELECTOR_KEYS + 1
    features = {f"feature.node.kubernetes.io/f{i:03d}": "true" for i in range(n)}
    nodes, pods = two_pools(
        now,
        KsmPod("other", "nfd", "u3", "Pending", now - 30, {GPU: 1}, node_selector=features),
    )
    samples, now = scraped(prometheus_factory, ksm_target, nodes, pods, 2, (PRODUCT, "pool"))
    q = kube_state.parse(samples, now)
    assert "pool" in q.selectors_checked
    assert q.rejected == {"selector_not_read": 1}
    # none of nfd's keys is read: they fit only all together
    assert q.selectors_not_read == {ksm_label(k): 1 for k in features}
    ends = {("ml", "b-run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    got = {p.pod: p.prediction for p in result.pods}
    assert list(got) == ["wants-b"]
    assert got["wants-b"].status == PREDICTED
    assert got["wants-b"].starts[1] == pytest.approx(now + 7200, abs=60)


def test_a_pod_whose_selector_series_is_too_wide_to_read_is_not_predicted_anywhere(
    prometheus_factory, ksm_target, tmp_path
):
    """A pod selecting ``pool: team-b`` and 130 node-feature-discovery keys: its
    ``kube_pod_nodeselectors`` series carries more labels than the answer parser takes
    (``promparse._MAX_LABELS``, 128), so the series is skipped. Which nodes the pod may
    start on is then not known: it is rejected ``selector_not_read`` and gets no
    prediction. Read as a pod selecting nothing, it was predicted to start now on pool
    a ([0, 0, 0] s), though kube-scheduler holds it for pool b, busy 2 h."""
    now = time.time()
    wide = {f"feature.node.kubernetes.io/f{i:03d}": "true" for i in range(130)}
    nodes, pods = two_pools(now, KsmPod("ml", "plain", "u3", "Pending", now - 60, {GPU: 1}), wide)
    target, body = ksm_target
    body[0] = exposition(nodes, pods, label_allowlist=(PRODUCT, "pool"))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=2)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    assert q.rejected == {"selector_not_read": 1}
    ends = {("ml", "b-run"): (now + 7200,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    got = {p.pod: p.prediction for p in result.pods}
    assert list(got) == ["plain"]  # starts now on pool a; wants-b is not said to
    assert got["plain"].starts[1] == pytest.approx(now, abs=60)
    # the cycle's own read (folded queries) rejects it alike
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        cycle = Cycle(client, store, CycleSettings(background_refit=False))
        pending = cycle.run().pending
    finally:
        store.close()
    assert pending is not None
    assert [p.pod for p in pending.pods] == ["plain"]
    assert pending.rejected == {"selector_not_read": 1}


def deletion_timestamps(deleted: dict[tuple[str, str, str], float]) -> str:
    """``kube_pod_deletion_timestamp`` as KSM writes it (``namespace, pod, uid``; the
    value is ``metadata.deletionTimestamp``: the deletion's time plus the pod's grace
    period), one series per pod being deleted."""
    lines = ["# HELP kube_pod_deletion_timestamp Unix deletion timestamp"]
    lines.append("# TYPE kube_pod_deletion_timestamp gauge")
    for (ns, pod, uid), at in deleted.items():
        lines.append(
            f'kube_pod_deletion_timestamp{{namespace="{ns}",pod="{pod}",uid="{uid}"}} {at}'
        )
    return "\n".join(lines) + "\n"


def test_gpus_of_a_pod_being_deleted_free_by_its_deletion_timestamp(prometheus_factory, ksm_target):
    """A training pod cancelled a minute ago with a 120 s grace period: the API server set
    its ``deletionTimestamp`` to now + 60 s, and KSM exports it
    (``kube_pod_deletion_timestamp``, a default ALPHA pod metric, ``pod.go``
    ``createPodDeletionTimestampFamilyGenerator``; docs/metrics/workload/pod-metrics.md).
    Its phase stays Running until the kubelet has stopped it, so the queue reads it as a
    holder, and its run's forecast still says +3 h. The pod waiting for its 4 GPUs (a
    scheduler preemption, a Kueue cancel, a user freeing them) starts within a minute;
    the forecaster predicts +3 h."""
    target, body = ksm_target
    now = time.time()
    nodes = [KsmNode("n1", {GPU: 4}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"})]
    pods = [
        KsmPod(
            "ml", "cancelled", "u1", "Running", now - 900, {GPU: 4}, node="n1", start_time=now - 890
        ),
        KsmPod("ml", "waits", "u2", "Pending", now - 60, {GPU: 4}),
    ]
    body[0] = exposition(nodes, pods) + deletion_timestamps({("ml", "cancelled", "u1"): now + 60})
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for("kube_pod_deletion_timestamp", min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "cancelled"): (now + 3 * 3600,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] <= now + 60 + 1


def without_family(text: str, name: str) -> str:
    """``text`` without the metric family ``name``: what KSM serves when the family is on
    its ``--metric-denylist`` (its generator is left out; no HELP, no TYPE, no sample)."""
    return "".join(
        line + "\n"
        for line in text.splitlines()
        if not (line.startswith(f"{name}{{") or line.startswith(f"{name} "))
        and not line.startswith((f"# HELP {name} ", f"# TYPE {name} "))
    )


def test_pending_pods_are_predicted_where_ksm_denylists_created_series(
    prometheus_factory, ksm_target
):
    """OpenShift's cluster-monitoring-operator runs KSM with
    ``--metric-denylist=^kube_.+_created$,...`` (openshift/cluster-monitoring-operator
    ``assets/kube-state-metrics/deployment.yaml``; a live OCP cluster's Deployment shows
    the same flag), and the NVIDIA GPU Operator is certified there: ``kube_pod_created``
    is absent while the phase, requests and start times are there. The queue reads a
    pending pod's creation time from ``kube_pod_created`` alone
    (``kube_state.POD_TIMES``), so ``parse`` rejects every pending pod
    (``bad_created``) and nothing is predicted, with only a count to show for it."""
    target, body = ksm_target
    now = time.time()
    nodes = [KsmNode("n1", {GPU: 2}, {PRODUCT: "NVIDIA-A100-SXM4-80GB"})]
    pods = [
        KsmPod("ml", "run", "u1", "Running", now - 900, {GPU: 2}, node="n1", start_time=now - 890),
        KsmPod("ml", "waits", "u2", "Pending", now - 300, {GPU: 1}),
    ]
    body[0] = without_family(exposition(nodes, pods), "kube_pod_created")
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    assert not client.instant("kube_pod_created", at=now)  # as on OpenShift
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "run"): (now + 600,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    assert result.rejected == {}, result.rejected  # today: {"bad_created": 1}
    assert [(p.pod, p.prediction.status) for p in result.pods] == [("waits", PREDICTED)]


def test_a_ksm_shard_down_does_not_turn_a_waiting_pod_into_never_fits(prometheus_factory, tmp_path):
    """KSM sharded in two (``--shard``/``--total-shards``, or its StatefulSet
    autosharding: each shard exports the objects whose uid hashes to it, README
    "Horizontal sharding"), scraped as one job. Shard 1 serves the H100 node and the
    run holding it, shard 0 a pod waiting for an H100. While both answer, the pod waits
    for the run (``beyond_horizon`` here: no finished run to draw its end from). When shard 1's scrape fails (OOM-killed,
    restarting: ``up`` 0, its series marked stale at once), the H100 node is gone from
    the read and the cycle publishes the pod ``never_fits``, a verdict the alert
    ``GpuEtaPodPendingNoStart`` and ``gpu-eta top`` show as such. Two replicas each
    serving everything do not lose data so; shards do."""
    from gpu_eta.forecaster.config import CycleSettings
    from gpu_eta.forecaster.cycle import Cycle
    from gpu_eta.forecaster.history import HistoryStore

    now = time.time()
    h100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    shards = [
        exposition(
            [KsmNode("a100-1", {GPU: 8}, {PRODUCT: "NVIDIA-A100-SXM4-80GB"})],
            [KsmPod("ml", "waits-h100", "u2", "Pending", now - 300, {GPU: 1}, node_selector=h100)],
        ),
        exposition(
            [KsmNode("h100-1", {GPU: 8}, h100)],
            [
                KsmPod(
                    "ml",
                    "h-run",
                    "u1",
                    "Running",
                    now - 900,
                    {GPU: 8},
                    node="h100-1",
                    start_time=now - 890,
                )
            ],
        ),
    ]
    servers = [
        MetricsServer("127.0.0.1", 0, lambda _a, i=i: (shards[i].encode(), TEXT_FORMAT)).serve()
        for i in range(2)
    ]
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        prom = prometheus_factory(
            [ScrapeJob("kube-state-metrics", [f"127.0.0.1:{s.port}" for s in servers])]
        )
        prom.wait_for("kube_pod_status_phase == 1", min_results=2)
        cycle = Cycle(PromClient(prom.url), store, CycleSettings(background_refit=False))
        before = cycle.run().pending
        assert before is not None
        # no history of runs here: the run holds the H100s past the horizon, a wait
        assert [(p.pod, p.prediction.status) for p in before.pods] == [
            ("waits-h100", BEYOND_HORIZON)
        ]
        shards[1] = "not { a metric\n"  # shard 1's scrape fails from now on
        prom.wait_for('up{job="kube-state-metrics"} == 0', min_results=1)
        after = cycle.run().pending
    finally:
        store.close()
        for s in servers:
            s.stop()
    statuses = {p.pod: p.prediction.status for p in after.pods} if after else {}
    assert statuses.get("waits-h100") != NEVER_FITS
    # the node is kept with the run last read on it: the pod still waits for the run
    # (kept without it, the node would look free and the pod start now)
    assert statuses.get("waits-h100") == BEYOND_HORIZON


def test_a_ksm_restart_does_not_forget_the_predictions_of_pods_still_waiting():
    """KSM is commonly a single replica; when its pod restarts (a rollout, an OOM kill:
    KSM's memory grows with the cluster), Prometheus marks every series of the target
    stale at its first failed scrape, so one cycle reads no node and no pod at all.
    ``StartTracker.update`` then drops every remembered prediction (``pending.py``:
    "deleted before it started: nothing to learn"), and the pod that starts while KSM
    is back is scored on nothing."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import PendingSet, PodStart, StartTracker
    from gpu_eta.forecaster.queue_replay import (
        Holder,
        Node,
        PendingPod,
        StartCalibrator,
        StartPrediction,
    )

    now = time.time()
    node = Node("n1", {"nvidia_com_gpu": 1}, "NVIDIA-A100-SXM4-80GB")
    tracker = StartTracker(StartCalibrator(min_obs=1))
    pred = StartPrediction(PREDICTED, (now + 90, now + 100, now + 110), 1.0)
    waiting = ClusterQueue(
        nodes=(node,), pending=(PendingPod("ml", "p0", "nvidia_com_gpu", 1, now - 10),)
    )
    tracker.update(
        waiting, PendingSet(pods=(PodStart("ml", "p0", "nvidia_com_gpu", 1, now, pred),)), now
    )
    tracker.update(ClusterQueue(), PendingSet(), now + 60)  # KSM restarting: nothing read
    started = ClusterQueue(
        nodes=(node,), holders=(Holder("ml", "p0", "n1", "nvidia_com_gpu", 1, None, now + 100),)
    )
    tracker.update(started, PendingSet(), now + 120)
    assert tracker.calibrator.n_obs == 1


def as_ksm_2_10(text: str, running_init: dict[tuple[str, str, str], str]) -> str:
    """``text`` as KSM v2.10 serves it: ``kube_pod_init_container_info`` has no
    ``restart_policy`` label (added by kubernetes/kube-state-metrics#2240, merged
    2023-12-19, after v2.10.1), plus ``kube_pod_init_container_status_running`` (STABLE
    in every v2 release) for the given init containers, (namespace, pod, uid) →
    container."""
    lines = [line.replace(',restart_policy="Always"', "") for line in text.splitlines()]
    lines.append(
        "# HELP kube_pod_init_container_status_running Describes whether the init "
        "container is currently in running state."
    )
    lines.append("# TYPE kube_pod_init_container_status_running gauge")
    for (ns, pod, uid), container in running_init.items():
        lines.append(
            f'kube_pod_init_container_status_running{{namespace="{ns}",pod="{pod}",'
            f'uid="{uid}",container="{container}"}} 1'
        )
    return "\n".join(lines) + "\n"


def test_a_running_pods_gpu_sidecar_is_held_on_ksm_2_10(prometheus_factory, ksm_target):
    """A Running pod with a 1-GPU app container and a 1-GPU native sidecar
    (``restartPolicy: Always`` init container) holds both GPUs of its node for its
    life. KSM v2.10 has no ``restart_policy`` label (``pod.go`` at v2.10: labels
    ``container, image_spec, image, image_id, container_id``; the label came with
    #2240, in v2.11.0), so the read takes the sidecar for a plain init container (max,
    not sum) and sees one GPU free: a 1-GPU pod is predicted to start now instead of
    when the pod ends. An init container still running while its pod is Running is a
    sidecar (plain ones have all terminated before the app starts), and KSM v2.10
    exports that (``kube_pod_init_container_status_running``)."""
    target, body = ksm_target
    now = time.time()
    nodes = [KsmNode("n1", {GPU: 2}, {PRODUCT: "NVIDIA-L4"})]
    pods = [
        KsmPod(
            "ml",
            "with-sidecar",
            "u1",
            "Running",
            now - 900,
            {GPU: 1},
            node="n1",
            start_time=now - 890,
            init_containers={"sidecar": {GPU: 1}},
            sidecars=("sidecar",),
        ),
        KsmPod("ml", "waits", "u2", "Pending", now - 60, {GPU: 1}),
    ]
    body[0] = as_ksm_2_10(exposition(nodes, pods), {("ml", "with-sidecar", "u1"): "sidecar"})
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for("kube_pod_init_container_status_running == 1", min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    assert not client.instant('kube_pod_init_container_info{restart_policy!=""}', at=now)
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("ml", "with-sidecar"): (now + 3600,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    assert pod.prediction.starts[1] == pytest.approx(now + 3600, abs=60)


def test_the_ksm_fixture_reads_as_real_ksm_under_a_node_target_label(prometheus_factory):
    """prometheus-community/prometheus's ``kubernetes-service-endpoints`` job (which
    scrapes its kube-state-metrics) sets ``honor_labels: true`` and relabels
    ``__meta_kubernetes_pod_node_name`` to ``node``. KSM writes every label key, empty
    values too (``pkg/metric/metric.go`` ``labelsToString``), so an unbound pod's request
    carries ``node=""`` and Prometheus adds no target ``node`` to it (checked against
    Prometheus 2.42 here). The fixture omits ``node`` instead, so the same job binds
    every pending pod of the fixture to KSM's own node: tests on the fixture cannot see
    what this scrape set-up does to the real read."""
    now = time.time()
    nodes = [KsmNode("n1", {GPU: 2}, {PRODUCT: "NVIDIA-L4"})]
    pods = [KsmPod("ml", "waits", "u2", "Pending", now - 60, {GPU: 1})]
    body = exposition(nodes, pods)
    server = MetricsServer("127.0.0.1", 0, lambda _a: (body.encode(), TEXT_FORMAT)).serve()
    try:
        job = ScrapeJob("kubernetes-service-endpoints", [f"127.0.0.1:{server.port}"])
        job.labels.update(namespace="monitoring", service="prometheus-kube-state-metrics")
        job.labels["node"] = "cpu-node-1"  # where the KSM pod runs
        prom = prometheus_factory([job])
        prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
        now = time.time()
        q = kube_state.parse(ksm_samples(PromClient(prom.url), now), now)
    finally:
        server.stop()
    assert [p.pod for p in q.pending] == ["waits"] and q.holders == ()


def test_a_node_under_driver_upgrade_keeps_its_pods_waiting_not_never_fits(
    prometheus_factory, ksm_target
):
    """The GPU Operator's upgrade controller cordons a node, then restarts its driver
    and device plugin pods. While the plugin is away the kubelet marks its devices
    unhealthy: ``allocatable`` ``nvidia.com/gpu`` 0, ``capacity`` still 8 (device
    manager ``GetCapacity``; after 5 min the resource goes from both). KSM exports both
    (``node.go``: ``kube_node_status_allocatable`` and ``kube_node_status_capacity``,
    ``resource="nvidia_com_gpu"``). ``parse`` drops a node whose units are 0
    ("a GPU node with its plugin down, nothing wrong"), so the H100 pod waiting for
    the only H100 node is ``never_fits`` (its pool must change: a standing policy)
    instead of ``no_schedulable_node`` (it waits for the node), and the alert
    ``GpuEtaPodPendingNoStart`` reads it as a pod that will not start."""
    target, body = ksm_target
    now = time.time()
    h100 = {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    nodes = [
        KsmNode("h100-1", {GPU: 0}, h100, unschedulable=True, capacity={GPU: 8}),
        KsmNode("a100-1", {GPU: 8}, {PRODUCT: "NVIDIA-A100-SXM4-80GB"}),
    ]
    pods = [KsmPod("ml", "waits-h100", "u2", "Pending", now - 300, {GPU: 1}, node_selector=h100)]
    body[0] = exposition(nodes, pods)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    now = time.time()
    q = kube_state.parse(ksm_samples(PromClient(prom.url), now), now)
    result = predict(q, {}, [3600.0], now, PendingSettings(n_samples=20))
    assert [(p.pod, p.prediction.status) for p in result.pods] == [
        ("waits-h100", NO_SCHEDULABLE_NODE)
    ]


def test_finished_gpu_pods_are_read_only_on_nodes_the_read_lacks(prometheus_factory, ksm_target):
    """``ClusterQueue.finished`` (``POD_TIMES``' ``finished``): a GPU pod Failed on a node
    the read shows is not read at all (no answer while every GPU node is read, however
    many finished pods the cluster keeps); one Succeeded on a node whose series are
    missing (its KSM shard down) is, so ``last_seen`` does not keep it as a holder."""
    target, body = ksm_target
    now = time.time()
    node = KsmNode("g-1", {GPU: 1}, {PRODUCT: "Tesla-T4"})
    pods = [
        KsmPod("ml", "failed", "u1", "Failed", now - 900, {GPU: 1}, node="g-1"),
        KsmPod("ml", "done", "u2", "Succeeded", now - 900, {GPU: 8}, node="h-1"),
    ]
    body[0] = exposition([node], pods, label_allowlist=(PRODUCT,))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Succeeded"} == 1', min_results=1)
    prom.wait_for("kube_node_status_allocatable", min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    assert q.finished == (("ml", "done"),)
    assert q.holders == () and [n.name for n in q.nodes] == ["g-1"]


def test_a_notebook_keeps_its_gpus_and_a_worker_frees_with_its_job(prometheus_factory, ksm_target):
    """Two holders whose release is not their own run's end, told apart by the owner KSM
    exports (``kube_pod_owner``: ``owner_kind``, ``owner_name``, ``<none>`` in each for
    a pod without an owner reference; ``pod.go`` ``createPodOwnerFamilyGenerator``, a
    default STABLE pod metric) and the restart policy (``kube_pod_restart_policy``
    ``type``).

    - ``jhub/jupyter-alice``, a JupyterHub server: KubeSpawner (7.1) makes a bare pod
      with ``restartPolicy: OnFailure`` (``kubespawner/objects.py`` ``make_pod``). A run
      in one of its cells ends in 10 min; the server keeps its A100 after, so the pod
      waiting for it is not predicted to start then (it was: +600 s, then beyond the
      horizon once the run had ended).
    - a PyTorchJob ``llm`` 5 h old: master and worker each hold 8 H100s, both owned by
      the PyTorchJob (the training operator sets itself as their controller). Only rank
      0 reports progress; the worker, older than every recorded run, never freed, and
      the second pod waiting for 8 H100s waited for the first to finish (+2 h)."""
    target, body = ksm_target
    now = time.time()
    a100, h100 = {PRODUCT: "NVIDIA-A100-SXM4-80GB"}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}
    nodes = [KsmNode("n1", {GPU: 1}, a100), KsmNode("n2", {GPU: 8}, h100)]
    nodes.append(KsmNode("n3", {GPU: 8}, h100))
    job = {"owner_kind": "PyTorchJob", "owner_name": "llm", "restart_policy": "OnFailure"}
    began = now - 5 * 3600
    pods = [
        KsmPod(
            "jhub", "jupyter-alice", "u1", "Running", now - 7200, {GPU: 1}, node="n1",
            start_time=now - 7200, owner_kind=NO_OWNER, restart_policy="OnFailure",
        ),
        KsmPod("ml", "llm-master-0", "u2", "Running", began, {GPU: 8}, node="n2",
               start_time=began, **job),
        KsmPod("ml", "llm-worker-0", "u3", "Running", began, {GPU: 8}, node="n3",
               start_time=began, **job),
        KsmPod("ml", "train-0", "u4", "Pending", now - 300, {GPU: 1},
               node_selector={PRODUCT: a100[PRODUCT]}),
        KsmPod("ml", "a", "u5", "Pending", now - 600, {GPU: 8}),
        KsmPod("ml", "b", "u6", "Pending", now - 300, {GPU: 8}),
    ]  # fmt: skip
    body[0] = exposition(nodes, pods)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=3)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {
        ("jhub", "jupyter-alice"): (now + 500, now + 600, now + 700),
        ("ml", "llm-master-0"): (now + 500, now + 600, now + 700),
    }
    result = predict(q, ends, [1800.0, 3600.0, 7200.0], now, PendingSettings(n_samples=50))
    starts = {p.pod: p.prediction for p in result.pods}
    assert starts["train-0"].status == BEYOND_HORIZON
    for pod in ("a", "b"):
        assert starts[pod].status == PREDICTED
        assert now + 450 <= starts[pod].starts[1] <= now + 750


@pytest.mark.parametrize(
    ("ksm", "reasons", "only_set", "gated"),
    [
        ("2.19", STATUS_REASONS, False, True),
        ("2.20", STATUS_REASONS, True, True),
        ("2.18", STATUS_REASONS_2_10, False, False),
    ],
)
def test_a_pod_its_scheduling_gate_holds_is_read_gated(
    prometheus_factory, ksm_target, ksm, reasons, only_set, gated
):
    """Kueue gates a plain pod at admission (``spec.schedulingGates``:
    ``kueue.x-k8s.io/admission``) until its workload is admitted: the pod is Pending,
    unbound, and kube-scheduler does not try it. ``kube_pod_status_unschedulable`` and
    ``kube_pod_status_scheduled{condition="false"}`` cannot tell it from a pod short of
    CPU (KSM ``pod.go``: 1 whenever the ``PodScheduled`` condition is False, whatever its
    reason); ``kube_pod_status_reason{reason="SchedulingGated"}`` can (KSM 2.19 and
    later, kubernetes/kube-state-metrics#2880: 1 when a condition has that reason, as
    the API server sets ``PodScheduled`` for a gated pod; a series per known reason, 0
    or 1, until 2.20 writes only the reason set, #3089; docs/metrics/workload/
    pod-metrics.md). On a 2-GPU node with one GPU free, the gated pod, the older, is
    read ``gated`` and ``next`` takes the free GPU now; on KSM 2.18 nothing shows the
    gate, and the gated pod is predicted to take it (``blocked_elsewhere`` 5 min on)."""
    target, body = ksm_target
    now = time.time()
    nodes = [KsmNode("n1", {GPU: 2}, {PRODUCT: "NVIDIA-A100-SXM4-80GB"})]
    pods = [
        KsmPod("ml", "run", "u1", "Running", now - 900, {GPU: 1}, node="n1", start_time=now - 890),
        KsmPod("ml", "held", "u2", "Pending", now - 600, {GPU: 1}, scheduling_gated=True),
        KsmPod("ml", "next", "u3", "Pending", now - 60, {GPU: 1}),
    ]
    body[0] = exposition(nodes, pods, status_reasons=reasons, only_set_reasons=only_set)
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=2)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    assert {p.pod: p.gated for p in q.pending} == {"held": gated, "next": False}, ksm
    ends = {("ml", "run"): (now + 3600,) * 3}
    result = predict(q, ends, [3600.0], now, PendingSettings(n_samples=20))
    got = {p.pod: p.prediction for p in result.pods}
    if gated:
        assert got["held"].status == GATED and got["held"].starts is None
        assert got["next"].starts == (now, now, now)
    else:
        assert got["held"].starts == (now, now, now)
        assert got["next"].starts[1] == pytest.approx(now + 3600)


def test_one_replica_per_container_lets_a_pod_of_two_one_gpu_containers_start(
    prometheus_factory, ksm_target
):
    """A T4 time-sliced into 4 replicas (GPU feature discovery labels it
    ``nvidia.com/gpu.replicas=4``), the device plugin set ``failRequestsGreaterThanOne``.
    The plugin checks each container: its ``Allocate`` refuses a ``ContainerRequest``
    of more than one device id (k8s-device-plugin ``server.go``), and the kubelet
    calls it once per container. A pod whose containers ``main`` and ``helper`` ask 1
    each starts (it was ``never_fits``: the pod's sum, 2, was held to the setting); a pod
    whose one container asks 2 does not, nor one whose init container asks 2.

    Checked against KSM ``pod.go`` (``kube_pod_container_resource_requests``, one
    series per container, ``container`` label) served to a real Prometheus."""
    now = time.time()
    nodes = [
        KsmNode("ts-1", {GPU: 4}, {PRODUCT: "Tesla-T4-SHARED", "nvidia.com/gpu.replicas": "4"})
    ]
    pods = [
        KsmPod(
            "ml",
            "two-containers",
            "u1",
            "Pending",
            now - 90,
            {GPU: 1},
            more_containers={"helper": {GPU: 1}},
        ),
        KsmPod("ml", "one-container", "u2", "Pending", now - 60, {GPU: 2}),
        KsmPod(
            "ml",
            "init-two",
            "u3",
            "Pending",
            now - 30,
            {GPU: 1},
            init_containers={"prep": {GPU: 2}},
        ),
    ]
    allowlist = (PRODUCT, "nvidia.com/gpu.replicas")
    samples, now = scraped(prometheus_factory, ksm_target, nodes, pods, 3, allowlist)
    q = kube_state.parse(samples, now)
    assert {p.pod: p.units for p in q.pending} == {
        "two-containers": 2,
        "one-container": 2,
        "init-two": 2,
    }
    settings = PendingSettings(n_samples=5, one_replica_per_pod=True)
    got = {p.pod: p.prediction.status for p in predict(q, {}, [3600.0], now, settings).pods}
    assert got == {"two-containers": PREDICTED, "one-container": NEVER_FITS, "init-two": NEVER_FITS}


def test_pods_arriving_pinned_to_one_pool_take_no_gpu_of_another(prometheus_factory, ksm_target):
    """Pools a and b of one GPU type (4 A100 each), told apart by ``pool``. Pool b: four
    1-GPU team-b jobs created 2 h ago (before the arrival window), ending at +1/+2/+3/+4
    h. Pool a: 20 1-GPU team-a pods with ``nodeSelector: {pool: team-a}`` created in the
    last hour (4 running, the rest Succeeded). ``b/wants-b`` asks 4 GPUs with
    ``nodeSelector: {pool: team-b}``: no pod arriving like team-a's may use pool b
    (kube-scheduler's NodeAffinity filter), so it starts when pool b's last job ends,
    about +4 h.

    Checked against KSM ``pod.go`` (``kube_pod_nodeselectors``, every key). With the
    arrivals' selector read as the GPU type alone, team-a's arrivals took each pool-b GPU
    as it freed until the replay's 200-arrival cap: P10/P50/P90 +9.1/+24.7/+29.1 h."""
    target, body = ksm_target
    now = time.time()
    a100 = "NVIDIA-A100-SXM4-80GB"
    nodes = [
        KsmNode("a-1", {GPU: 4}, {PRODUCT: a100, "pool": "team-a"}),
        KsmNode("b-1", {GPU: 4}, {PRODUCT: a100, "pool": "team-b"}),
    ]

    def pinned(ns: str, name: str, phase: str, created: float, pool: str, node: str) -> KsmPod:
        return KsmPod(ns, name, f"u-{name}", phase, created, {GPU: 1}, node=node,
                      start_time=created + 10, node_selector={"pool": pool})  # fmt: skip

    pool_b = [pinned("b", f"b-run-{i}", "Running", now - 7200, "team-b", "b-1") for i in range(4)]
    # created 150 s apart over the last hour, the last 4 still running
    phases = ["Succeeded"] * 16 + ["Running"] * 4
    pool_a = [
        pinned("a", f"a-job-{i}", phase, now - 3500 + i * 150, "team-a", "a-1")
        for i, phase in enumerate(phases)
    ]
    wants = KsmPod(
        "b", "wants-b", "uw", "Pending", now - 60, {GPU: 4}, node_selector={"pool": "team-b"}
    )
    body[0] = exposition(nodes, [*pool_b, *pool_a, wants], label_allowlist=(PRODUCT, "pool"))
    prom = prometheus_factory([ScrapeJob("kube-state-metrics", [target])])
    prom.wait_for('kube_pod_status_phase{phase="Pending"} == 1', min_results=1)
    client = PromClient(prom.url)
    now = time.time()
    q = kube_state.parse(ksm_samples(client, now), now)
    ends = {("b", f"b-run-{i}"): (now + 3600 * (i + 1),) * 3 for i in range(4)}
    ends.update({("a", f"a-job-{i}"): (now + 1800,) * 3 for i in range(16, 20)})
    # finished runs lasted 40 to 80 min (one length alone frees the GPUs of runs
    # started together at one moment, which would hide the arrivals' share of them)
    result = predict(q, ends, [2400.0, 3600.0, 4800.0], now, PendingSettings(n_samples=20))
    (pod,) = result.pods
    assert pod.prediction.status == PREDICTED
    hours = [round((t - now) / 3600, 1) for t in pod.prediction.starts]
    assert hours == [4.0, 4.0, 4.0]
    # team-a's 20 pods arrive at 20 an hour pinned to their pool; wants-b, created in the
    # window too, arrives behind itself
    assert [(a.units, a.selector, round(a.rate_per_second * 3600)) for a in q.arrivals] == [
        (1, (("pool", "team-a"),), 20),
        (4, (("pool", "team-b"),), 1),
    ]
