"""``simulation.ksm.from_sim``: the simulated cluster as kube-state-metrics sees it."""

from __future__ import annotations

from gpu_eta.forecaster.kube_state import NO_OWNER
from gpu_eta.simulation import ksm
from gpu_eta.simulation.cluster import ClusterConfig, warm_start


def test_a_pod_placed_to_start_later_is_pending_on_its_node() -> None:
    """The demo's simulation runs a few seconds ahead of the clock: a queued pod is
    placed with its start still ahead. It was then neither queued nor alive, missing
    from kube-state-metrics for those seconds (``top``: pending, no wait, "due"). It
    is Pending on its node, without a start time; once started, Running; a pod that
    arrives after ``t`` is not there yet."""
    sim, _ = warm_start(ClusterConfig())
    placed = None
    for until in range(10, 3000, 10):
        sim.advance(until)
        placed = next(
            (
                p
                for p in sim.pods
                if p.kind == "training"
                and p.node >= 0
                and p.created is not None
                and p.created < p.start - 1
                and p.start > until - 10
            ),
            None,
        )
        if placed is not None:
            break
    assert placed is not None, "no queued pod was placed in 50 simulated minutes"

    def seen(t: float) -> ksm.KsmPod | None:
        _, pods = ksm.from_sim(sim, t, 1000.0)
        return next(
            (p for p in pods if (p.namespace, p.pod) == (placed.namespace, placed.name)), None
        )

    before = seen(placed.start - 0.5)
    assert before is not None and before.phase == "Pending"
    assert before.node == sim.nodes[placed.node].name and before.start_time is None
    assert before.created == 1000.0 + placed.created
    after = seen(placed.start + 0.5)
    assert (
        after is not None and after.phase == "Running" and after.start_time == 1000.0 + placed.start
    )
    assert seen(placed.created - 0.5) is None


def test_nodes_export_their_capacity_as_kube_state_metrics_does() -> None:
    """Real kube-state-metrics always exports ``kube_node_status_capacity`` (``node,
    resource, unit``; an extended resource's unit ``integer``), which
    GpuEtaExporterMissing and the forecaster's closed-node check read: the simulated
    one had none, so that alert could never evaluate in the demo. The device plugin
    advertises every device (or replica) as capacity; an unhealthy one leaves the
    allocatable alone."""
    sim, _ = warm_start(ClusterConfig(nodes=2))
    nodes, pods = ksm.from_sim(sim, 0.0, 1000.0)
    text = ksm.exposition(nodes, pods)
    assert (
        "# HELP kube_node_status_capacity The capacity for different resources of a node." in text
    )
    assert "# TYPE kube_node_status_capacity gauge" in text
    for spec in sim.nodes:
        units = float(sum(g.replicas for g in spec.gpus))
        line = (
            f'kube_node_status_capacity{{node="{spec.name}",resource="nvidia_com_gpu",'
            f'unit="integer"}} {units!r}'
        )
        assert line in text.splitlines()
    broken = ksm.KsmNode("n", {ksm.GPU: 3}, capacity={ksm.GPU: 4})
    lines = ksm.exposition([broken], []).splitlines()
    assert (
        'kube_node_status_capacity{node="n",resource="nvidia_com_gpu",unit="integer"} 4.0' in lines
    )
    assert (
        'kube_node_status_allocatable{node="n",resource="nvidia_com_gpu",unit="integer"} 3.0'
        in lines
    )


def _info_labels(text: str, pod: str) -> dict[str, str]:
    """The labels of ``pod``'s ``kube_pod_info`` line in ``text`` (parsed as exposition)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "kube_pod_info" and sample.labels["pod"] == pod:
                return sample.labels
    raise AssertionError(f"no kube_pod_info for {pod}")


def test_pod_info_names_its_controller_and_addresses_as_kube_state_metrics_does() -> None:
    """KSM's ``kube_pod_info`` (``internal/store/pod.go``, ``createPodInfoFamilyGenerator``)
    writes ``created_by_kind``/``created_by_name`` from the pod's controller reference
    (``metav1.GetControllerOf``), and ``pod_ip``/``host_ip`` from the pod's status once
    it runs. The simulated one wrote all four empty: a Job's pod with no Job, and a
    running pod without the address the demo's own exporter reports for it
    (``gpu_eta_pod_info``'s ``pod_ip``: the one its progress reports come from). A pod
    without a controller has the empty value KSM's ``kube_pod_owner`` has for it here:
    ``<none>`` (KSM's earlier v2 releases, in both families; later ones write "" in
    both)."""
    sim, _ = warm_start(ClusterConfig())
    nodes, pods = ksm.from_sim(sim, 0.0, 1000.0)
    text = ksm.exposition(nodes, pods)
    running = next(p for p in sim.alive(0.0) if p.kind == "training" and p.start <= 0.0)
    labels = _info_labels(text, running.name)
    assert (labels["created_by_kind"], labels["created_by_name"]) == running.owner
    assert labels["pod_ip"] == running.ip
    node = sim.nodes[running.node]
    assert labels["host_ip"] == f"{node.ip_prefix}.1"
    assert labels["node"] == node.name
    queued = sim.queued_pods()[0]
    labels = _info_labels(text, queued.name)
    assert (labels["created_by_kind"], labels["created_by_name"]) == queued.owner
    # not bound, not started: no node, no addresses (KSM writes the empty values)
    assert (labels["node"], labels["pod_ip"], labels["host_ip"]) == ("", "", "")
    bare = ksm.KsmPod("ml", "bare", "u1", "Pending", 1.0, {ksm.GPU: 1}, owner_kind=NO_OWNER)
    labels = _info_labels(ksm.exposition([], [bare]), "bare")
    assert (labels["created_by_kind"], labels["created_by_name"]) == (NO_OWNER, NO_OWNER)


def test_each_training_pod_is_its_own_jobs() -> None:
    """A Job's name is unique in its namespace while it exists (the API server refuses a
    second), and its pods are its run's. The simulated pods of one user and job family
    all named the same Job (``cifar10-cnn`` in ``ml-erin``), so at every moment of the
    default demo independent runs were one Job to kube-state-metrics: the forecaster lent
    one run's forecast end to another's pod as a sibling's (``pending._from_siblings``)
    and drew one end for both (``queue_replay``). Each training pod is now a Job of its
    own, its ``job-name`` label that Job's name, as the Job controller writes it; the
    forecaster still reads the family from it (``runs_from_series._job_of``)."""
    from collections import Counter

    from gpu_eta.forecaster.runs_from_series import _job_of
    from gpu_eta.simulation.cluster import ALERT_CAUSES
    from gpu_eta.simulation.scenarios import node_scenario

    sim, _ = warm_start(ClusterConfig(**ALERT_CAUSES))
    for t in range(0, 600, 60):
        sim.advance(t + 10)
        _, pods = ksm.from_sim(sim, t, 0.0)
        jobs = Counter((p.namespace, p.owner_name) for p in pods if p.owner_kind == "Job")
        assert jobs and max(jobs.values()) == 1, [k for k, n in jobs.items() if n > 1]
    training = [p for p in sim.pods if p.kind == "training"]
    # a suffix of digits alone is kept by _job_of (a name of its own, "sweep-24567")
    named = [p for p in training if any(c.isalpha() for c in p.name[-5:])]
    assert named and all(_job_of(p.owner[1]) == p.job_name for p in named)
    node = sim.nodes[training[-1].node]
    scenario = node_scenario(node, [training[-1]], 0.0, training[-1].start)
    (entry,) = scenario["pods"]
    assert entry["labels"]["job-name"] == entry["owner_name"] == training[-1].owner[1]


def test_init_container_info_has_kube_state_metrics_labels() -> None:
    """KSM's ``kube_pod_init_container_info`` (``pod.go``, v2.11 on) labels each init
    container with a status ``container, image_spec, image, image_id, container_id,
    restart_policy``; the simulated one wrote ``container, image, restart_policy``
    only, a label set no KSM release serves."""
    from prometheus_client.parser import text_string_to_metric_families

    pod = ksm.KsmPod(
        "ml",
        "p",
        "u1",
        "Running",
        1.0,
        {ksm.GPU: 1},
        node="n1",
        start_time=2.0,
        init_containers={"side": {ksm.GPU: 1}},
        sidecars=("side",),
    )
    text = ksm.exposition([], [pod])
    (sample,) = [
        s
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "kube_pod_init_container_info"
    ]
    assert list(sample.labels) == [
        *("namespace", "pod", "uid", "container", "image_spec", "image", "image_id"),
        *("container_id", "restart_policy"),
    ]
    assert sample.labels["restart_policy"] == "Always"
