"""gpu_eta.forecaster.pending: one cycle's queue prediction from the parsed queue."""

from __future__ import annotations

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSettings, describe, predict
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
