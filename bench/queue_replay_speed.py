"""Cost of one queue replay on a large cluster, beside the per-pod node scan it replaced.

Why a bench of its own: the forecaster replays the whole GPU queue every cycle
(``pending.predict``, 100 samples by default), so the replay must stay well inside the
60 s cycle at ``--pending.max-pods`` (500) pending pods on a big cluster. The peer, run
on the same cluster in the same process, is the sweep that visits every waiting pod at
every moment, a pod that waited trying only its candidate nodes whose GPUs just freed
(``tests/forecaster/replay_reference.pod_by_pod_sample``; each pod filters its own
list of nodes: O(events × pods × nodes)). Both give identical results (checked here,
and on random queues by ``tests/forecaster/test_queue_replay.py``); their ratio says
what the replay's shortcuts are worth and moves little with the load of the machine.

Cluster (seeded): ``--nodes`` nodes of 8 GPUs of three types, every GPU held (60 % of
the holders with a forecast, the others drawn from 5,000 finished runs' durations), one
node in two tainted ``nvidia.com/gpu:NoSchedule``, one in ten also kept for a team,
one in fifty cordoned; the pending pods ask 1, 2, 4 or 8 GPUs (mostly 1), a third of
them for a GPU type, with three priorities and three sets of tolerations; new pods
arrive at 25 an hour. Usage::

    python bench/queue_replay_speed.py                       # 500 nodes, 500 and 2,000 pods
    python bench/queue_replay_speed.py --pending 500 --no-peer
    python bench/queue_replay_speed.py --nodes 100 --pending 200 --samples 20
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the peer lives in tests/

from flag_types import at_least, counts

from gpu_eta.forecaster import queue_replay
from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSet, PendingSettings, predict
from gpu_eta.forecaster.queue_replay import (
    Arrival,
    Holder,
    Node,
    PendingPod,
    Toleration,
)
from tests.forecaster.replay_reference import pod_by_pod_sample

GPU = "nvidia_com_gpu"
NOW = 1_700_000_000.0
PRODUCTS = ("NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L4")
SEED = 1


def cluster(n_nodes: int, n_pending: int, seed: int = SEED) -> tuple[ClusterQueue, list[float]]:
    """The cluster described in the module docstring, and the history's durations."""
    rng = random.Random(seed)
    nodes, holders = [], []
    for i in range(n_nodes):
        taints: tuple[tuple[str, str, str], ...] = (
            (("nvidia.com/gpu", "", "NoSchedule"),) if i % 2 else ()
        )
        if i % 10 == 0:
            taints += (("dedicated", f"team{i % 3}", "NoSchedule"),)
        nodes.append(Node(f"n{i}", {GPU: 8}, PRODUCTS[i % 3], {}, i % 50 != 0, taints))
        for j in range(8):
            end = NOW + rng.uniform(60, 86400)
            ends = (end - 600, end, end + 1800) if rng.random() < 0.6 else None
            holders.append(
                Holder("ns", f"h{i}-{j}", f"n{i}", GPU, 1, ends, NOW - rng.uniform(0, 40000))
            )
    gpu = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
    team = (*gpu, Toleration("dedicated", "Equal", "team1", ""))
    pending = [
        PendingPod(
            f"ns{k % 40}",
            f"p{k}",
            GPU,
            rng.choice((1, 1, 1, 1, 2, 4, 8)),
            NOW - rng.uniform(0, 86400),
            rng.choice((0, 0, 100)),
            rng.choice(("", "", PRODUCTS[k % 3])),
            rng.choice((None, gpu, team)),
        )
        for k in range(n_pending)
    ]
    # tolerations not known (None): every taint passes, the arrivals the figures in
    # docs/pending.md were measured with
    arrivals = tuple(
        Arrival(GPU, units, rate, tolerations=None)
        for units, rate in ((1, 20 / 3600), (2, 4 / 3600), (8, 1 / 3600))
    )
    durations = [rng.lognormvariate(9, 1) for _ in range(5000)]
    return ClusterQueue(tuple(nodes), tuple(holders), tuple(pending), (), arrivals), durations


def timed(
    queue: ClusterQueue, durations: list[float], settings: PendingSettings, peer: bool
) -> tuple[float, PendingSet]:
    """(seconds, result) of one ``predict`` as the cycle runs it (the peer's sweep when
    ``peer``)."""
    kept = queue_replay._one_sample
    queue_replay._one_sample = pod_by_pod_sample if peer else kept  # type: ignore[assignment]
    try:
        begun = time.perf_counter()
        result = predict(queue, {}, durations, NOW, settings)
        return time.perf_counter() - begun, result
    finally:
        queue_replay._one_sample = kept  # type: ignore[assignment]


def same(a: PendingSet, b: PendingSet) -> bool:
    return a.pods == b.pods and a.requests == b.requests


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=at_least(1), default=500)
    parser.add_argument(
        "--pending", type=counts, default="500,2000", help="comma-separated pod counts"
    )
    parser.add_argument("--samples", type=at_least(1), default=100)
    parser.add_argument("--no-peer", dest="peer", action="store_false")
    args = parser.parse_args(argv)
    print(
        f"{args.nodes} nodes x 8 GPUs, {args.nodes * 8} running pods, "
        f"{args.samples} samples (python {sys.version.split()[0]})"
    )
    print(f"{'pending':>8} {'replay s':>9} {'peer s':>8} {'ratio':>6}  statuses")
    for n in args.pending:
        queue, durations = cluster(args.nodes, n)
        settings = PendingSettings(n_samples=args.samples, max_pods=n)
        seconds, result = timed(queue, durations, settings, peer=False)
        statuses = Counter(p.prediction.status for p in result.pods)
        peer_text, ratio_text = "-", "-"
        if args.peer:
            peer_seconds, peer_result = timed(queue, durations, settings, peer=True)
            if not same(result, peer_result):
                print(f"{n}: the replay and its peer disagree", file=sys.stderr)
                return 1
            peer_text, ratio_text = f"{peer_seconds:.1f}", f"{peer_seconds / seconds:.1f}"
        print(f"{n:>8} {seconds:>9.1f} {peer_text:>8} {ratio_text:>6}  {dict(statuses)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
