"""GPU nodes missing from a kube-state-metrics read kept as last read (last_seen)."""

from __future__ import annotations

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.last_seen import Kept, LastSeen
from gpu_eta.forecaster.queue_replay import Holder, Node, PendingPod

GPU = "nvidia_com_gpu"
NOW = 1_000_000.0
A100 = Node("a100-1", {GPU: 8}, "NVIDIA-A100-SXM4-80GB")
H100 = Node("h100-1", {GPU: 8}, "NVIDIA-H100-80GB-HBM3", taints=(("team", "b", "NoSchedule"),))
RUN = Holder("ml", "h-run", "h100-1", GPU, 8, None, NOW - 900)
BOTH = ClusterQueue(nodes=(A100, H100), holders=(RUN,))


def test_a_missing_node_is_kept_with_its_missing_holders_for_the_grace():
    seen = LastSeen(grace_seconds=600.0)
    assert seen.fill(BOTH, NOW) == (BOTH, Kept())  # all read: nothing added
    shard_down = ClusterQueue(nodes=(A100,))
    filled, kept = seen.fill(shard_down, NOW + 60)
    assert filled.nodes == (A100, H100) and filled.holders == (RUN,)
    assert filled.tainted_nodes == 1  # the kept node's team taint counts as read
    assert kept.nodes == ("h100-1",) and kept.since == NOW
    filled, kept = seen.fill(shard_down, NOW + 601)  # past the grace: gone
    assert filled == shard_down and kept.nodes == ()


def test_a_node_read_again_is_as_read_and_a_pod_read_elsewhere_is_not_kept():
    """The holder moved (read pending again, or on another node) is as read now, not
    twice; a node read again replaces what was kept."""
    seen = LastSeen(grace_seconds=600.0)
    seen.fill(BOTH, NOW)
    again = PendingPod("ml", "h-run", GPU, 8, NOW - 5)
    filled, _ = seen.fill(ClusterQueue(nodes=(A100,), pending=(again,)), NOW + 30)
    assert filled.nodes == (A100, H100) and filled.holders == ()
    cordoned = Node("h100-1", {GPU: 8}, "NVIDIA-H100-80GB-HBM3", schedulable=False)
    seen.fill(ClusterQueue(nodes=(A100, cordoned)), NOW + 60)
    filled, _ = seen.fill(ClusterQueue(nodes=(A100,)), NOW + 90)
    assert filled.nodes == (A100, cordoned) and filled.holders == ()


def test_an_empty_read_keeps_every_node_and_a_zero_grace_none():
    seen = LastSeen(grace_seconds=600.0)
    seen.fill(BOTH, NOW)
    filled, kept = seen.fill(ClusterQueue(), NOW + 60)  # KSM restarting
    assert filled.nodes == (A100, H100) and filled.holders == (RUN,)
    assert kept.nodes == ("a100-1", "h100-1")
    off = LastSeen(grace_seconds=0.0)
    off.fill(BOTH, NOW)
    assert off.fill(ClusterQueue(), NOW + 60) == (ClusterQueue(), Kept())


def test_a_node_read_without_gpus_is_present_and_forgotten():
    """A node the read shows with every GPU 0 allocatable (``nodes_read``, not among the
    nodes) is not kept with its old GPUs, then or when it leaves the read later."""
    seen = LastSeen(grace_seconds=600.0)
    seen.fill(BOTH, NOW)
    no_gpu = ClusterQueue(nodes=(A100,), holders=(RUN,), nodes_read=("a100-1", "h100-1"))
    assert seen.fill(no_gpu, NOW + 60) == (no_gpu, Kept())
    gone = ClusterQueue(nodes=(A100,))
    assert seen.fill(gone, NOW + 120) == (gone, Kept())


def test_a_holder_read_finished_is_not_kept_on_a_missing_node():
    """The node's KSM shard down, the pod's up showing it Succeeded or Failed
    (``ClusterQueue.finished``): the node is kept, without that pod on it."""
    seen = LastSeen(grace_seconds=600.0)
    seen.fill(BOTH, NOW)
    filled, kept = seen.fill(ClusterQueue(nodes=(A100,), finished=(("ml", "h-run"),)), NOW + 60)
    assert filled.nodes == (A100, H100) and filled.holders == ()
    assert kept.nodes == ("h100-1",)


def test_kept_names_the_nodes_closed_when_last_read():
    """A node cordoned or being removed when last read is kept, named in ``closed``;
    ``since`` is the open ones' last read when any is kept."""
    seen = LastSeen(grace_seconds=600.0)
    leaving = Node("a100-1", {GPU: 8}, "NVIDIA-A100-SXM4-80GB", schedulable=False)
    seen.fill(ClusterQueue(nodes=(leaving, H100)), NOW - 100)
    seen.fill(ClusterQueue(nodes=(H100,)), NOW)
    filled, kept = seen.fill(ClusterQueue(), NOW + 60)
    assert filled.nodes == (leaving, H100)
    assert kept.nodes == ("a100-1", "h100-1") and kept.closed == ("a100-1",)
    assert kept.open == ("h100-1",) and kept.since == NOW
