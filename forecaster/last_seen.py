"""GPU nodes missing from one kube-state-metrics read, kept as last seen for a grace.

Why: Prometheus marks every series of a target stale at its first failed scrape, so a
kube-state-metrics (KSM) shard that is down (``--shard``/``--total-shards``, or its
StatefulSet autosharding), one of two replicas serving different data, or a single
KSM restarting takes its nodes out of the queue's read at once, with no warning from
Prometheus. A pod whose GPU type only those nodes offer would then be published
``never_fits`` (and the alert ``GpuEtaPodPendingNoStart`` would fire) for as long as
the shard is away. A node that really leaves the cluster (an autoscaler's scale-down)
looks the same in one read; told apart only by time, it is kept for the grace too
(closed when last read, as an autoscaler's taint or a drain leaves it, it is named in
``Kept.closed``, which the cycle logs at DEBUG only).

So a GPU node read before and absent now is given to the replay as it was last read,
with the GPU pods last read running on it that are absent now too (a node without its
holders would look free: every pod waiting for it predicted to start at once), for
``grace_seconds`` after it was last read (the forecaster's ``--history.vanish-grace``,
which the runs' series get for the same reasons). A node read again is as read. A node
the read shows with no GPU to give (every GPU 0 allocatable and no capacity, so not
among the read's nodes: ``ClusterQueue.nodes_read``) is not missing: its shard is up
and says so, and it is not given back its old GPUs (pods waiting for them would be
predicted to start there at once). Pods
of a missing shard on nodes still read are not kept (a pod that ends looks the same,
every few minutes on a busy cluster): their GPUs look free until the shard is back.

In memory only: ``once`` (a new process every cycle) keeps nothing, and reads what
it reads (docs/pending.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.queue_replay import Holder, Node


@dataclass(frozen=True, slots=True)
class Kept:
    """The nodes one ``LastSeen.fill`` added, by name; ``closed``: those of them that took
    no new pod when last read (cordoned, not Ready, tainted by an autoscaler removing
    them, their device plugin away); ``since``: the last read of the node read longest ago among the others (the
    ones missing while open), or among all when every one was closed. For the cycle's
    log: a node that was closed and then leaves the read is most likely removed (an
    autoscaler's scale-down, a drain then a delete), one that was open most likely
    served by a KSM shard that is away."""

    nodes: tuple[str, ...] = ()
    since: float | None = None
    closed: tuple[str, ...] = ()

    @property
    def open(self) -> tuple[str, ...]:
        """The kept nodes that were open (took new pods) when last read."""
        return tuple(n for n in self.nodes if n not in self.closed)


class LastSeen:
    """Remembers each GPU node's latest read, with its holders; fills reads missing it."""

    def __init__(self, grace_seconds: float = 600.0) -> None:
        self.grace_seconds = grace_seconds
        # node name → (the node as last read, its holders then, when)
        self._seen: dict[str, tuple[Node, tuple[Holder, ...], float]] = {}

    def fill(self, queue: ClusterQueue, now: float) -> tuple[ClusterQueue, Kept]:
        """``queue`` with the GPU nodes read within the grace and missing from it added
        as last read, and their holders missing from it; what was added."""
        on: dict[str, list[Holder]] = {}
        for h in queue.holders:
            on.setdefault(h.node, []).append(h)
        for n in queue.nodes:
            self._seen[n.name] = (n, tuple(on.get(n.name, ())), now)
        read = {n.name for n in queue.nodes}
        # read without a GPU to give (allocatable 0: a GPU unhealthy, its device plugin
        # down, a MIG reconfiguration): present, and its last GPUs are not its GPUs now
        for name in set(queue.nodes_read) - read:
            self._seen.pop(name, None)
        read.update(queue.nodes_read)
        for name in [k for k, (_, _, t) in self._seen.items() if now - t > self.grace_seconds]:
            del self._seen[name]
        missing = sorted(name for name in self._seen if name not in read)
        if not missing:
            return queue, Kept()
        present = {(h.namespace, h.pod) for h in queue.holders}
        present.update((p.namespace, p.pod) for p in queue.pending)
        # read finished (the pod's KSM shard up, the node's down): its GPUs are free
        present.update(queue.finished)
        nodes = [self._seen[name][0] for name in missing]
        holders = [
            h
            for name in missing
            for h in self._seen[name][1]
            if (h.namespace, h.pod) not in present
        ]
        filled = replace(
            queue,
            nodes=(*queue.nodes, *nodes),
            holders=(*queue.holders, *holders),
        )
        closed = tuple(name for name in missing if not self._seen[name][0].schedulable)
        loud = [name for name in missing if name not in closed] or missing
        return filled, Kept(tuple(missing), min(self._seen[name][2] for name in loud), closed)
