"""``simulation.ksm.from_sim``: the simulated cluster as kube-state-metrics sees it."""

from __future__ import annotations

from gpu_eta.forecaster.kube_state import NO_OWNER
from gpu_eta.simulation import ksm
from gpu_eta.simulation.cluster import ClusterConfig, ClusterSim, Pod, warm_start


def test_a_pod_placed_to_start_later_is_pending_on_its_node() -> None:
    """The demo's simulation runs a few seconds ahead of the clock: a queued pod is
    placed with its start still ahead. It was then neither queued nor alive, missing
    from kube-state-metrics for those seconds (``top``: pending, no wait, "due"). It
    is Pending on its node, without a start time (bound, its kubelet has not accepted
    it yet); once its containers run, Running with its start time; a pod that arrives
    after ``t`` is not there yet."""
    sim, _ = warm_start(ClusterConfig())
    placed = _placed_from_queue(sim)

    def seen(t: float) -> ksm.KsmPod | None:
        _, pods = ksm.from_sim(sim, t, 1000.0)
        return next(
            (p for p in pods if (p.namespace, p.pod) == (placed.namespace, placed.name)), None
        )

    before = seen(placed.start - 0.5)
    assert before is not None and before.phase == "Pending"
    assert before.node == sim.nodes[placed.node].name and before.start_time is None
    assert before.created == 1000.0 + placed.created
    after = seen(sim.containers_started(placed) + 0.01)
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


def _placed_from_queue(sim: ClusterSim) -> Pod:
    """A training pod that waited in the queue and was then placed (advancing ``sim``)."""
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
            return placed
    raise AssertionError("no queued pod was placed in 50 simulated minutes")


def test_a_pod_its_kubelet_accepted_has_its_start_time_while_its_containers_start() -> None:
    """The kubelet sets ``status.startTime`` (and ``hostIP``) when it accepts a pod,
    before it pulls images and starts containers; KSM's ``kube_pod_start_time`` reads
    ``p.Status.StartTime`` (``internal/store/pod.go``), so a pod is Pending on its node
    with a start time while its containers are created. The simulated pod went from
    bound without a start time straight to Running: kube-state-metrics never showed the
    order the forecaster reads from a real cluster."""
    sim, _ = warm_start(ClusterConfig())
    placed = _placed_from_queue(sim)

    def seen(t: float) -> ksm.KsmPod:
        _, pods = ksm.from_sim(sim, t, 1000.0)
        return next(p for p in pods if (p.namespace, p.pod) == (placed.namespace, placed.name))

    node = sim.nodes[placed.node]
    states = [seen(placed.start + k / 100) for k in range(200)]
    creating = [s for s in states if s.phase == "Pending"]
    assert creating, "never Pending on its node after the kubelet accepted it"
    for s in creating:
        assert s.node == node.name and s.start_time == 1000.0 + placed.start
        assert (s.host_ip, s.pod_ip) == (f"{node.ip_prefix}.1", placed.ip)
    assert states[-1].phase == "Running" and states[-1].start_time == 1000.0 + placed.start
    # Pending while created, then Running for good
    phases = [s.phase for s in states]
    assert phases == sorted(phases, key=lambda ph: ph == "Running")


def test_notebook_pods_are_kubespawners_bare_pods() -> None:
    """JupyterHub's KubeSpawner creates each server as a bare pod (no
    ``ownerReferences``) named from ``pod_name_template``, ``jupyter-{username}--
    {servername}`` with the trailing ``-`` stripped: ``jupyter-<user>`` for a user's
    default server, ``jupyter-<user>--<server>`` for a named one. The simulated
    notebooks were a StatefulSet's, named ``jupyter-<user>-<random>``: no KubeSpawner
    pod looks like that, and the forecaster read their end from the StatefulSet rule,
    not from the bare-pod one it applies to a real hub's (``kube_state._release``)."""
    import re

    from gpu_eta.simulation.scenarios import node_scenario

    sim, _ = warm_start(ClusterConfig(notebook_share=0.5, nodes=4))
    names = re.compile(r"^jupyter-[a-z]+(--[a-z0-9]+)?$")
    for t in range(0, 3000, 100):
        sim.advance(t + 10)
        _, pods = ksm.from_sim(sim, t, 0.0)
        notebooks = [p for p in pods if p.namespace == "jupyterhub"]
        assert notebooks
        assert all(names.match(p.pod) for p in notebooks), [p.pod for p in notebooks]
        assert all(p.owner_kind == NO_OWNER for p in notebooks)
        keys = [(p.namespace, p.pod) for p in notebooks]
        assert len(keys) == len(set(keys)), keys  # a name is unique while its pod lives
    every = [p for p in sim.pods if p.kind == "notebook"]
    assert any("--" not in p.name for p in every) and any("--" in p.name for p in every)
    nb = every[-1]
    (entry,) = node_scenario(sim.nodes[nb.node], [nb], 0.0, nb.start)["pods"]
    assert (entry["owner_kind"], entry["owner_name"]) == ("", "")
    text = ksm.exposition(*ksm.from_sim(sim, nb.start, 0.0))
    owner = next(
        line
        for line in text.splitlines()
        if line.startswith("kube_pod_owner{") and f'pod="{nb.name}"' in line
    )
    assert f'owner_kind="{NO_OWNER}"' in owner


def test_a_node_under_memory_pressure_shows_its_condition_and_taint() -> None:
    """Under memory pressure the kubelet sets the node's ``MemoryPressure`` condition
    True and the node lifecycle controller taints it ``node.kubernetes.io/
    memory-pressure:NoSchedule``; KSM writes every condition the node reports
    (``kube_node_status_condition``: Ready, MemoryPressure, DiskPressure, PIDPressure)
    and each taint (``kube_node_spec_taint``), and each pod's tolerations
    (``kube_pod_tolerations``: those it asked for, and the not-ready and unreachable
    ones the DefaultTolerationSeconds admission adds to every pod). The simulation kept
    pods off the pressured node, but kube-state-metrics showed no taint, no condition
    but Ready and no toleration: the forecaster, which reads the taint, predicted
    starts on a node that took none of the pods."""
    from gpu_eta.simulation.cluster import PRESSURE_TAINT

    config = ClusterConfig(
        nodes=3,
        pressure_node=1,
        pressure_cycle_seconds=(300.0, 100.0),
        pressure_tolerating_share=0.5,
        warm_start_seconds=0.0,
    )
    sim, _ = warm_start(config)
    sim.advance(1800.0)
    nodes, pods = ksm.from_sim(sim, 650.0, 0.0)  # 650 % 300 = 50: under pressure
    by_name = {n.name: n for n in nodes}
    assert PRESSURE_TAINT in by_name["gpu-node-1"].taints
    assert by_name["gpu-node-1"].memory_pressure and not by_name["gpu-node-0"].memory_pressure
    lines = ksm.exposition(nodes, pods).splitlines()
    for node, status in (("gpu-node-1", "true"), ("gpu-node-0", "false")):
        assert (
            f'kube_node_status_condition{{node="{node}",condition="MemoryPressure",'
            f'status="{status}"}} 1.0'
        ) in lines
    assert (
        'kube_node_spec_taint{node="gpu-node-1",key="node.kubernetes.io/memory-pressure",'
        'value="",effect="NoSchedule"} 1.0'
    ) in lines
    assert not ksm.from_sim(sim, 750.0, 0.0)[0][1].taints  # 750 % 300 = 150: over
    tolerating = [p for p in sim.pods if PRESSURE_TAINT in p.tolerations and p.alive_at(650.0)]
    assert tolerating
    seen = {p.pod: p for p in pods}
    for p in tolerating:
        keys = {(t.key, t.operator, t.effect) for t in seen[p.name].tolerations}
        assert ("node.kubernetes.io/memory-pressure", "Exists", "NoSchedule") in keys
    for p in pods:
        keys = {(t.key, t.effect, t.toleration_seconds) for t in p.tolerations}
        assert ("node.kubernetes.io/not-ready", "NoExecute", 300) in keys
        assert ("node.kubernetes.io/unreachable", "NoExecute", 300) in keys


def test_a_pod_selecting_a_gpu_type_shows_its_node_selector() -> None:
    """A pod that asks for a GPU model (``Pod.product``: a pool's, or a typed one) is
    kept to nodes of that model by its node selector; kube-state-metrics writes it as
    ``kube_pod_nodeselectors{nodeselector_nvidia_com_gpu_product=...}``, the value the
    node's own label has (``kube_node_labels``). The simulation placed such pods by
    their type, but every pod's series had no selector: the forecaster, which reads
    it, took them to start on any node."""
    config = ClusterConfig(
        nodes=3, gpu_types=("NVIDIA A2", "NVIDIA GeForce RTX 3070"), typed_share=1.0
    )
    sim, _ = warm_start(config)
    nodes, pods = ksm.from_sim(sim, 0.0, 0.0)
    typed = {p.name: p.product for p in sim.pods if p.product and p.alive_at(0.0)}
    assert typed, "no pod selects a GPU type"
    lines = ksm.exposition(nodes, pods).splitlines()
    for pod in pods:
        if pod.pod not in typed:
            continue
        value = typed[pod.pod].replace(" ", "-")
        assert pod.node_selector == {"nvidia.com/gpu.product": value}
        assert any(
            line.startswith("kube_pod_nodeselectors{")
            and f'pod="{pod.pod}"' in line
            and f'nodeselector_nvidia_com_gpu_product="{value}"' in line
            for line in lines
        )
        node = next(n for n in nodes if n.name == pod.node) if pod.node else None
        assert node is None or node.labels["nvidia.com/gpu.product"] == value


def test_a_past_pod_waits_unbound_until_its_start() -> None:
    """The backfill knows when a past pod arrived and when it started: in between it
    waited in the queue, Pending and bound to no node (``queued_until_start``), while
    the live cluster's pod placed ahead of the clock is Pending on its node."""
    sim, _ = warm_start(ClusterConfig())
    placed = _placed_from_queue(sim)
    waiting = placed.created + (placed.start - placed.created) / 2
    started = sim.containers_started(placed)
    past = ksm.ksm_pod(placed, sim.nodes, waiting, 0.0, started, queued_until_start=True)
    live = ksm.ksm_pod(placed, sim.nodes, waiting, 0.0, started)
    assert past is not None and past.phase == "Pending" and past.node == ""
    assert live is not None and live.node == sim.nodes[placed.node].name
    running = ksm.ksm_pod(placed, sim.nodes, started, 0.0, started, queued_until_start=True)
    assert running is not None and running.phase == "Running" and running.node == live.node
