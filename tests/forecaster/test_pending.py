"""gpu_eta.forecaster.pending: one cycle's queue prediction from the parsed queue."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import (
    SIBLING_START_WINDOW_SECONDS,
    PendingSettings,
    describe,
    holder_ends,
    predict,
    run_followers,
    with_run_ends,
)
from gpu_eta.forecaster.publish import pending_families
from gpu_eta.forecaster.queue_replay import (
    BEYOND_HORIZON,
    GATED,
    PREDICTED,
    Holder,
    Node,
    PendingPod,
    Toleration,
)

G = "nvidia_com_gpu"
NOW = 1_700_000_000.0


def full_node_and_queue(n_pending: int) -> ClusterQueue:
    """One 8-GPU node, every GPU held; ``n_pending`` 1-GPU pods waiting, oldest first."""
    nodes = (Node("n1", {G: 8}, "A100"),)
    holders = tuple(Holder("ml", f"h{i}", "n1", G, 1, None, NOW - 10) for i in range(8))
    pending = tuple(PendingPod("ml", f"p{i:03d}", G, 1, NOW - 1000 + i) for i in range(n_pending))
    return ClusterQueue(nodes, holders, pending)


def test_no_request_is_predicted_while_pods_are_left_out():
    """A request made now queues behind every pending pod: with the queue cut at
    --pending.max-pods the pods left out would not be ahead of it and it would be
    predicted hours early (13 h instead of 16 h here). It is not published then; the
    log line says why."""
    queue = full_node_and_queue(120)
    whole = predict(queue, {}, [3600.0], NOW, PendingSettings(max_pods=120, n_samples=20))
    assert whole.skipped == 0 and whole.requests
    cut = predict(queue, {}, [3600.0], NOW, PendingSettings(max_pods=100, n_samples=20))
    assert cut.skipped == 20 and len(cut.pods) == 100
    assert cut.requests == {}
    assert "none for a request made now" in describe(cut)


def test_gated_pods_are_bounded_apart_from_the_pods_replayed():
    """``--pending.max-pods`` bounds the replay's work; gated pods are not replayed, so
    they take no place among the pods it replays (120 gated pods older than the 100
    waiting ones would have left every waiting pod without a prediction), and a request
    made now, which queues behind the pods replayed only, is still predicted. They are
    published up to the same bound of their own, the oldest first, the rest counted
    skipped."""
    queue = full_node_and_queue(100)
    gated = tuple(
        PendingPod("ml", f"g{i:03d}", G, 1, NOW - 5000 + i, gated=True) for i in range(120)
    )
    queue = ClusterQueue(queue.nodes, queue.holders, gated + queue.pending)
    got = predict(queue, {}, [3600.0], NOW, PendingSettings(max_pods=100, n_samples=20))
    assert Counter(p.prediction.status for p in got.pods)[GATED] == 100
    waiting = [p for p in got.pods if p.pod.startswith("p")]
    assert len(waiting) == 100 and all(p.prediction.status != GATED for p in waiting)
    assert got.skipped == 20 and got.requests
    assert {p.pod for p in got.pods if p.prediction.status == GATED} == {
        f"g{i:03d}" for i in range(100)
    }


def test_a_pod_created_again_under_its_name_is_published_once_as_the_new_one():
    """A StatefulSet's ``worker-0`` deleted and created again (asking 8 GPUs now) while
    KSM still shows the old one (asking 1): two pods in the queue, both replayed, one
    name published, the newest. Before, both were published under one name (a
    duplicate series) with the same prediction, the one of whichever came last."""
    nodes = (Node("n1", {G: 8}, "A100"),)
    old = PendingPod("ml", "worker-0", G, 1, NOW - 600)
    new = PendingPod("ml", "worker-0", G, 8, NOW - 5)
    queue = ClusterQueue(nodes, (), (new, old))
    result = predict(queue, {}, [3600.0], NOW, PendingSettings(n_samples=5))
    (pod,) = result.pods
    assert (pod.pod, pod.units, pod.created) == ("worker-0", 8, NOW - 5)
    # the old one (first in the queue) takes a GPU now: the new one waits for its hour
    assert pod.prediction.starts == (NOW + 3600,) * 3
    families = pending_families(result)
    info = [s for f in families for s in f.samples if s.name.endswith("prediction_info")]
    assert [(s.labels["pod"], s.labels["gpus"]) for s in info] == [("worker-0", "8")]


DURATIONS = [1800.0, 3600.0, 7200.0]  # finished runs' durations: none past 2 h


def notebook_queue(ends_with_run: bool | None) -> ClusterQueue:
    """One A100, held for 2 h by ``jhub/jupyter-alice``; a 1-GPU pod waits for it."""
    holder = Holder(
        "jhub", "jupyter-alice", "n1", G, 1, None, NOW - 7200, ends_with_run=ends_with_run
    )
    pending = (PendingPod("ml", "train-0", G, 1, NOW - 300),)
    return ClusterQueue((Node("n1", {G: 1}, "A100"),), (holder,), pending)


def test_a_notebooks_gpus_stay_held_when_the_run_in_its_cell_ends():
    """A notebook server (a JupyterHub pod, a Kubeflow Notebook's StatefulSet pod) keeps
    its GPUs after a training run started in a cell ends: its run's forecast (+600 s)
    is no release time. It is predicted as a holder without a forecast is (its age
    drawn against the history: 2 h old, past every recorded run, it holds past the
    horizon), so the prediction does not jump from +600 s to beyond the horizon the
    moment the run ends. A Job's pod, and a pod whose kind is not known (no
    ``kube_pod_owner``), still free with their run."""
    ends = {("jhub", "jupyter-alice"): (NOW + 500, NOW + 600, NOW + 700)}
    settings = PendingSettings(n_samples=50)
    (notebook,) = predict(notebook_queue(False), ends, DURATIONS, NOW, settings).pods
    (after_run,) = predict(notebook_queue(False), {}, DURATIONS, NOW, settings).pods
    assert notebook.prediction.status == after_run.prediction.status == BEYOND_HORIZON
    for ends_with_run in (True, None):
        (job,) = predict(notebook_queue(ends_with_run), ends, DURATIONS, NOW, settings).pods
        assert job.prediction.status == PREDICTED
        assert NOW + 500 <= job.prediction.starts[1] <= NOW + 700


def test_a_young_notebook_frees_at_the_later_of_its_run_and_the_history():
    """A notebook 10 min old whose run ends in 10 min, on a cluster whose runs last 2 h:
    it frees when the history says (+6600 s), not when its run ends; with a 15 min
    history it frees no earlier than its run's end."""
    holder = Holder("jhub", "jupyter-bob", "n1", G, 1, None, NOW - 600, ends_with_run=False)
    queue = ClusterQueue(
        (Node("n1", {G: 1}, "A100"),), (holder,), (PendingPod("ml", "p", G, 1, NOW - 60),)
    )
    ends = {("jhub", "jupyter-bob"): (NOW + 500, NOW + 600, NOW + 700)}
    settings = PendingSettings(n_samples=50)
    (pod,) = predict(queue, ends, [7200.0], NOW, settings).pods
    assert pod.prediction.starts == (NOW + 6600,) * 3
    (pod,) = predict(queue, ends, [900.0], NOW, settings).pods
    assert NOW + 500 <= pod.prediction.starts[1] <= NOW + 700


def distributed_queue(owner: tuple[str, str] | None, worker_ns: str = "ml") -> ClusterQueue:
    """A PyTorchJob ``llm`` 5 h old: its master (rank 0, the only pod reporting
    progress) holds n1's 8 H100s, its worker n2's; two 8-GPU pods wait."""
    nodes = (Node("n1", {G: 8}, "H100"), Node("n2", {G: 8}, "H100"))
    holders = (
        Holder("ml", "llm-master-0", "n1", G, 8, None, NOW - 5 * 3600, owner=owner),
        Holder(worker_ns, "llm-worker-0", "n2", G, 8, None, NOW - 5 * 3600, owner=owner),
    )
    pending = (PendingPod("ml", "a", G, 8, NOW - 600), PendingPod("ml", "b", G, 8, NOW - 300))
    return ClusterQueue(nodes, holders, pending)


def test_a_worker_without_a_forecast_frees_with_its_jobs_forecast():
    """Only rank 0 reports progress: the worker has no forecast of its own, and its end
    was drawn from the history, where a pod 5 h old outlives every run (the second
    pending pod waited for the first to finish on the master's node, +7842 s). It takes the
    forecast of a pod of the same owner (``kube_pod_owner``: kind and name, same
    namespace): both pending pods start about +600 s."""
    ends = {("ml", "llm-master-0"): (NOW + 500, NOW + 600, NOW + 700)}
    durations = [3600.0, 7200.0, 4 * 3600.0]
    settings = PendingSettings(n_samples=50)
    result = predict(distributed_queue(("PyTorchJob", "llm")), ends, durations, NOW, settings)
    for pod in result.pods:
        assert pod.prediction.status == PREDICTED
        assert NOW + 500 <= pod.prediction.starts[1] <= NOW + 700
    # no owner known, or the same owner name in another namespace: no forecast shared
    for queue in (distributed_queue(None), distributed_queue(("PyTorchJob", "llm"), "other")):
        b = predict(queue, ends, durations, NOW, settings).pods[1]
        assert b.prediction.starts[1] > NOW + 3600


def test_a_pod_borrows_only_from_siblings_that_started_with_it():
    """A sweep (a parallel or indexed Job, an Argo Workflow's fan-out) is one owner of
    separate runs started as GPUs free up: a pod started 60 s ago does not end with a
    sibling started 55 min ago (``holder_ends``). It borrows the latest forecast of the
    siblings started within ``SIBLING_START_WINDOW_SECONDS`` of it, as a distributed
    job's workers, created and started together, do; none, and its end is drawn."""
    sweep = ("Job", "sweep")

    def sweeper(pod: str, started: float | None) -> Holder:
        return Holder("ml", pod, "n1", G, 1, None, started, ends_with_run=True, owner=sweep)

    ends = {
        ("ml", "old-0"): (NOW + 200, NOW + 300, NOW + 400),
        ("ml", "new-0"): (NOW + 3000, NOW + 3300, NOW + 3600),
        ("ml", "new-1"): (NOW + 2900, NOW + 3400, NOW + 3500),
    }
    window = SIBLING_START_WINDOW_SECONDS
    holders = (
        sweeper("old-0", NOW - 3300),
        sweeper("old-1", NOW - 3300 + window),  # at the window's edge: borrows old-0's
        sweeper("new-0", NOW - 120),
        sweeper("new-1", NOW - 100),
        sweeper("new-2", NOW - 60),  # the latest of new-0's and new-1's, not old-0's
        sweeper("lone", NOW - 3300 + window + 200),  # none within the window
        sweeper("unknown", None),  # start not known: not known to be a sibling
    )
    got = {h.pod: h.ends for h in holder_ends(holders, ends)}
    assert got["old-1"] == ends[("ml", "old-0")]
    assert got["new-2"] == (NOW + 3000, NOW + 3400, NOW + 3600)
    assert got["lone"] is None and got["unknown"] is None
    # the reviewer's case: a 1-GPU pod waiting behind the sweep's fresh pod is not
    # predicted at +300 s, when the old sibling ends, but with the fresh pod's history
    nodes = (Node("n1", {G: 2}, "A100"),)
    queue = ClusterQueue(
        nodes,
        (sweeper("old-0", NOW - 3300), sweeper("new-2", NOW - 60)),
        (PendingPod("ml", "p1", G, 1, NOW - 10), PendingPod("ml", "p2", G, 1, NOW - 5)),
    )
    settings = PendingSettings(n_samples=20)
    p1, p2 = predict(queue, ends, [3600.0] * 5, NOW, settings).pods
    assert NOW + 200 <= p1.prediction.starts[1] <= NOW + 400
    assert p2.prediction.starts[1] == NOW + 3540


def test_a_pod_in_its_release_lag_is_told_its_runs_end_unless_recreated_under_its_name() -> None:
    """``run_ends`` (``ReleaseLags.lingering``) marks the holders whose run completed:
    by name, and not a pod whose uid says it was recreated under the name since."""
    holders = (
        Holder("ml", "a", "n1", G, 1, None, NOW - 300, uid="ua"),
        Holder("ml", "b", "n1", G, 1, None, NOW - 300, uid="ub2"),
        Holder("ml", "c", "n1", G, 1, None, NOW - 300),
    )
    ends = {("ml", "a"): (NOW - 5, "ua"), ("ml", "b"): (NOW - 5, "ub"), ("ml", "c"): (NOW - 9, "")}
    assert [h.run_ended for h in with_run_ends(holders, ends)] == [NOW - 5, None, NOW - 9]
    queue = ClusterQueue(
        (Node("n1", {G: 3}, "A100"),), holders, (PendingPod("ml", "p", G, 1, NOW),)
    )
    settings = PendingSettings(n_samples=20)
    lagged = predict(queue, {}, [3000.0], NOW, settings, release_seconds=[20.0], run_ends=ends)
    whole = predict(queue, {}, [3000.0], NOW, settings, release_seconds=[20.0])
    (p,) = lagged.pods
    (q,) = whole.pods
    assert p.prediction.starts == (NOW + 11, NOW + 11, NOW + 11)  # c: 9 s + 20 s lag
    assert q.prediction.starts[1] == NOW + 2700 + 20  # a run of 3,000 s, 300 s of it run


def test_a_workers_run_ends_with_its_rank_0_s_in_its_release_lag() -> None:
    """Only rank 0 reports progress, so only it is in ``run_ends`` once its run
    completes; its worker (same owner, started with it) took its forecast while it ran
    (``holder_ends``) and now takes its run's end: the 2-GPU pod waiting for both
    starts a lag after that end (5 s ago + 20 s), not a whole run from the history
    later (+2720 s), nor never for a job older than every recorded run. As in
    ``holder_ends``: no other owner or namespace, no pod started more than
    ``SIBLING_START_WINDOW_SECONDS`` apart, no pod whose start is unknown (neither
    borrows nor lends), and not a pod with a forecast of its own (a run running in it)."""
    own = ("PyTorchJob", "ddp")

    def pod(name: str, started: float | None, ns: str = "ml", owner=own, uid: str = "") -> Holder:
        return Holder(ns, name, "n1", G, 1, None, started, uid=uid, owner=owner)

    window = SIBLING_START_WINDOW_SECONDS
    holders = (
        pod("ddp-master-0", NOW - 300, uid="u0"),
        pod("ddp-worker-0", NOW - 300, uid="u1"),
        pod("ddp-worker-1", NOW - 300 + window),  # at the window's edge
        pod("ddp-worker-2", NOW - 300 + window + 1),  # past it: another run
        pod("ddp-worker-3", None),  # start unknown: not known to be a sibling
        pod("ddp-worker-4", NOW - 300, ns="other"),
        pod("ddp-worker-5", NOW - 300, owner=("PyTorchJob", "other")),
        pod("ddp-worker-6", NOW - 300),  # its own run runs (a forecast of its own)
        pod("ddp-worker-7", NOW - 300, owner=None),
    )
    run_ends = {("ml", "ddp-master-0"): (NOW - 5, "u0")}
    own_ends = {("ml", "ddp-worker-6"): (NOW + 100, NOW + 200, NOW + 300)}
    got = {h.pod: h.run_ended for h in with_run_ends(holders, run_ends, own_ends)}
    assert got == {
        "ddp-master-0": NOW - 5,
        "ddp-worker-0": NOW - 5,
        "ddp-worker-1": NOW - 5,
        "ddp-worker-2": None,
        "ddp-worker-3": None,
        "ddp-worker-4": None,
        "ddp-worker-5": None,
        "ddp-worker-6": None,
        "ddp-worker-7": None,
    }
    # a rank 0 whose start is unknown, or recreated under its name, lends nothing
    unknown = (replace(holders[0], started=None), holders[1])
    assert [h.run_ended for h in with_run_ends(unknown, run_ends)] == [NOW - 5, None]
    recreated = (replace(holders[0], uid="u0b"), holders[1])
    assert [h.run_ended for h in with_run_ends(recreated, run_ends)] == [None, None]
    # the reviewer's case: master-0 and worker-0 hold n1's 2 GPUs, a 2-GPU pod waits
    settings = PendingSettings(n_samples=50)
    for age in (300.0, 3500.0):  # 3,500 s: older than every recorded run
        pair = tuple(replace(h, started=NOW - age) for h in holders[:2])
        queue = ClusterQueue(
            (Node("n1", {G: 2}, "A100"),), pair, (PendingPod("ml", "p", G, 2, NOW),)
        )
        lagged = predict(
            queue, {}, [3000.0], NOW, settings, release_seconds=[20.0], run_ends=run_ends
        )
        (p,) = lagged.pods
        assert p.prediction.status == PREDICTED
        assert p.prediction.starts == (NOW + 15,) * 3  # 5 s ago + a 20 s lag


def test_a_completed_runs_followers_are_its_owners_pods_started_with_it() -> None:
    """``run_followers``: the pods of a read that end with a run completed now without
    reporting it (rank 0's workers), its rank 0 found in the read or, gone since, in
    the read before; not a pod whose own run completed now or runs, nor one started
    apart, of another owner, or gone itself."""
    own = ("PyTorchJob", "ddp")

    def pod(name: str, started: float | None = NOW - 300, owner=own) -> Holder:
        return Holder("ml", name, "n1", G, 1, None, started, owner=owner)

    master, worker = pod("ddp-master-0"), pod("ddp-worker-0")
    others = (
        pod("ddp-worker-1"),  # its own run completed now too
        pod("ddp-worker-2"),  # a run of its own runs
        pod("ddp-worker-3", NOW - 300 + SIBLING_START_WINDOW_SECONDS + 1),
        pod("ddp-worker-4", owner=("PyTorchJob", "other")),
        pod("ddp-worker-5", None),
    )
    ended = {("ml", "ddp-master-0"): NOW - 5, ("ml", "ddp-worker-1"): NOW - 7}
    running = {("ml", "ddp-worker-2")}
    expected = {("ml", "ddp-worker-0"): NOW - 5}
    assert run_followers((master, worker, *others), (), ended, running) == expected
    # rank 0 gone since the read before, a worker gone too: the one left follows
    gone = pod("ddp-worker-6")
    before = (master, worker, gone, *others)
    assert run_followers((worker, *others), before, ended, running) == expected
    # rank 0 in neither read: nothing tells its owner or start
    master_only = {("ml", "ddp-master-0"): NOW - 5}
    assert run_followers((worker, *others), (), master_only, running) == {}


MIG = "nvidia_com_mig_1g_5gb"


def inventory_queue() -> ClusterQueue:
    """Nodes of every kind a request's largest size is read from: an 8-GPU A100 node, a
    16-GPU A100 node cordoned, a T4 node of 4 time-sliced replicas, a node kept for a
    team by a taint, a node of unknown type, and an A100 node of 7 MIG slices."""
    nodes = (
        Node("a8", {G: 8}, "A100"),
        Node("a16", {G: 16}, "A100", schedulable=False),
        Node("t4", {G: 4}, "T4", shared={G: 4}),
        Node("pool", {G: 8}, "RTX", taints=(("dedicated", "team-a", "NoSchedule"),)),
        Node("new", {G: 2}),
        Node("mig", {MIG: 7}, "A100"),
    )
    return ClusterQueue(nodes, (), ())


def test_the_largest_request_each_gpu_type_can_hold_is_published_with_the_requests():
    """Per (resource, GPU type) the largest request a node of that type, that a request
    may use, could hold with nothing else on it: a cordoned node counts (it is closed
    for now, not gone: ``no_schedulable_node``, not ``never_fits``), a node whose taint
    a request does not tolerate holds none of it, a node of unknown type is its own
    entry (model ""), time-sliced replicas count unless the device plugin gives a
    container one at most. What the spawn page tells "never fits on this cluster" from
    "no estimate" by (docs/pending.md, JupyterHub)."""
    got = predict(inventory_queue(), {}, [3600.0], NOW, PendingSettings(n_samples=5))
    assert dict(got.largest_requests) == {
        (G, "A100"): 16,
        (G, "T4"): 4,
        (G, "RTX"): 0,
        (G, ""): 2,
        (MIG, "A100"): 7,
    }
    one = predict(
        inventory_queue(), {}, [3600.0], NOW, PendingSettings(n_samples=5, one_replica_per_pod=True)
    )
    assert one.largest_requests[(G, "T4")] == 1
    # the pool's taint tolerated (--pending.request-toleration dedicated=team-a)
    tolerating = PendingSettings(
        n_samples=5, request_tolerations=(Toleration("dedicated", "Equal", "team-a", ""),)
    )
    assert (
        predict(inventory_queue(), {}, [3600.0], NOW, tolerating).largest_requests[(G, "RTX")] == 8
    )


def test_the_largest_requests_are_published_while_no_request_is():
    """Pods past --pending.max-pods leave every request unpublished (they would be
    predicted early), not what a node can hold: that does not depend on the queue."""
    queue = full_node_and_queue(120)
    cut = predict(queue, {}, [3600.0], NOW, PendingSettings(max_pods=100, n_samples=5))
    assert cut.requests == {}
    assert dict(cut.largest_requests) == {(G, "A100"): 8}
    published = [
        (s.labels, s.value)
        for f in pending_families(cut)
        for s in f.samples
        if s.name == "gpu_eta_request_max_gpus"
    ]
    assert published == [({"model": "A100", "resource": G}, 8.0)]
