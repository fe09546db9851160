"""gpu_eta.forecaster.pending: one cycle's queue prediction from the parsed queue."""

from __future__ import annotations

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSettings, describe, predict
from gpu_eta.forecaster.publish import pending_families
from gpu_eta.forecaster.queue_replay import Holder, Node, PendingPod

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
