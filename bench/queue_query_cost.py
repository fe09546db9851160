"""What the GPU queue's kube-state-metrics queries cost a real Prometheus, per cycle.

Why a bench of its own: the forecaster sends the queue's queries every cycle
(``kube_state.first_round`` folded into one), and a second folded query only when the pods
read call for it (``kube_state.second_round``). The costly parts of that second round
are its subqueries (1 min steps over the arrival window) asked where KSM exports no
``kube_pod_created`` (OpenShift's KSM denylists it): the first-seen one that places
pending pods (``kube_state.PENDING_SINCE``) and the GPU pods first seen in the window
that give the arrival rates (``kube_state.ARRIVALS_SEEN``). This prints, on a cluster
of ``--pods`` pods (``--gpu-share`` of them asking for a GPU, ``--pending-share`` of
those pending) backfilled over ``--minutes`` into a real Prometheus:

* with ``kube_pod_created`` (the usual cluster): the folded query (queries, when
  ``--gpu-resource`` names are many and long: ``kube_state.batches``) as a cycle
  without ``--pending.priority-class`` sends it, its length, the same with a priority
  mapping (the arrivals' classes read too), its arrivals part alone (every GPU pod's
  ``kube_pod_nodeselectors`` over the window among them: half the pods select a GPU
  type, the others nothing), and that no second round is asked;
* without it (OpenShift): the folded query, the second round naming the pods by uid,
  each of its parts alone, and, as the peer in the same run, the first-seen subquery
  over every pending pod of the cluster (what the second round asks when naming
  the uids would make it too long).

Each query is sent ``--repeat`` times; the median is printed, and the ratios to the
folded query of the same cluster (machines here are shared: ratios move less).

    python bench/queue_query_cost.py                 # 5,000 pods, 60 min (~1 min)
    python bench/queue_query_cost.py --pods 20000
    python bench/queue_query_cost.py --gpu-resource example.com/a100-shared ...
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import requests
from flag_types import at_least, share

from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.series import Sample
from gpu_eta.launch.prometheus import start_prometheus

GPU = {"resource": "nvidia_com_gpu", "unit": "integer"}
# a ``--pending.priority-class`` mapping: with one, the first round also reads the
# arrivals' priority classes (``kube_state.first_round``)
PRIORITIES = {"high": 1000}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


@dataclass(frozen=True)
class Pod:
    """One pod of the drawn cluster: ids, whether it asks for a GPU, pending or bound."""

    ids: dict[str, str]
    gpu: bool
    node: str  # "" while pending
    born: float


def draw(pods: int, gpu_share: float, pending_share: float, now: float, seed: int = 1) -> list[Pod]:
    """``pods`` pods (seeded): ``gpu_share`` ask for a GPU, ``pending_share`` of those
    pending (5 % of the others), created up to 3 h before ``now``, on nodes of 8 GPUs."""
    rng = random.Random(seed)
    nodes = max(1, int(pods * gpu_share) // 8)
    out = []
    for i in range(pods):
        uid = f"{i:08x}-0000-4000-8000-{i:012x}"
        gpu = rng.random() < gpu_share
        pending = rng.random() < (pending_share if gpu else 0.05)
        node = "" if pending else f"n{rng.randrange(nodes)}"
        ids = {"namespace": f"ns{i % 40}", "pod": f"p{i}", "uid": uid}
        out.append(Pod(ids, gpu, node, now - rng.uniform(60, 3 * 3600)))
    return out


def selects(pod: Pod) -> dict[str, str]:
    """The pod's ``kube_pod_nodeselectors`` labels: every other pod selects a GPU type,
    the rest nothing (KSM writes the series for every pod, one selecting nothing with
    its ids alone). No other key: one would call for the second round's node labels."""
    if int(pod.ids["pod"][1:]) % 2:
        return {"nodeselector_nvidia_com_gpu_product": "NVIDIA-A100-SXM4-80GB"}
    return {}


def openmetrics(pods: list[Pod], minutes: int, created: bool, now: float) -> str:
    """The pods' KSM series (and their nodes' GPUs), one sample a minute up to ``now``;
    ``kube_pod_created`` only when ``created``."""
    lines: dict[str, list[str]] = {}

    def add(name: str, labels: dict[str, str], value: float, ts: float) -> None:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.setdefault(name, []).append(f"{name}{{{lab}}} {value!r} {ts:.3f}")

    steps = [now - 60 * k for k in range(minutes, 0, -1)]
    for pod in pods:
        node = {"node": pod.node} if pod.node else {}
        req = GPU if pod.gpu else {"resource": "cpu", "unit": "core"}
        for ts in (t for t in steps if t >= pod.born):
            for phase in PHASES:
                value = float(phase == ("Running" if pod.node else "Pending"))
                add("kube_pod_status_phase", {**pod.ids, "phase": phase}, value, ts)
            add(
                "kube_pod_container_resource_requests",
                {**pod.ids, "container": "c", **node, **req},
                1.0,
                ts,
            )
            add("kube_pod_nodeselectors", {**pod.ids, **selects(pod)}, 1.0, ts)
            if created:
                add("kube_pod_created", pod.ids, pod.born, ts)
            if pod.node:
                add("kube_pod_start_time", pod.ids, pod.born + 30, ts)
    for node in sorted({p.node for p in pods if p.node}):
        for ts in steps:
            add("kube_node_status_allocatable", {"node": node, **GPU}, 8.0, ts)
    out = []
    for name, samples in lines.items():
        out.append(f"# TYPE {name} gauge")
        out.extend(sorted(samples, key=lambda s: (s.split(" ")[0], float(s.rsplit(" ", 1)[1]))))
    out.append("# EOF")
    return "\n".join(out) + "\n"


def first_round_batches(
    gpu_resources: Sequence[str] = (), priorities: Mapping[str, int] | None = None
) -> list[dict[str, str]]:
    """The queue's first round in the batches the cycle asks (``kube_state.first_round``
    for ``--pending.priority-class``'s ``priorities``, then ``kube_state.batches``).

    Why not ``kube_state.QUERIES``: without a priority mapping the cycle asks the
    arrivals without their priority classes, a shorter and cheaper query; timing
    ``QUERIES`` would time a query no cycle sends."""
    parts = kube_state.rendered(kube_state.first_round(priorities or {}), 3600, gpu_resources)
    return kube_state.batches(parts, queries.fold, queries.MAX_QUERY_CHARS)


def first_round(
    url: str,
    at: float,
    gpu_resources: Sequence[str] = (),
    priorities: Mapping[str, int] | None = None,
) -> tuple[list[str], dict[str, list[Sample]]]:
    """The queue's first round as the cycle sends it (``first_round_batches``: one folded
    query, several where the site's own ``gpu_resources`` are many and long), and its
    answer by part (as the cycle unfolds it)."""
    batches = first_round_batches(gpu_resources, priorities)
    client = PromClient(url, timeout_seconds=300, max_response_bytes=1 << 30)
    samples: dict[str, list[Sample]] = {}
    try:
        for batch in batches:
            samples.update(queries.unfold(client.instant(queries.fold(batch), at), batch))
    finally:
        client.close()
    return [queries.fold(batch) for batch in batches], samples


def timed(url: str, query: str, at: float, repeat: int) -> tuple[float, int]:
    """Median seconds of ``repeat`` answers to ``query`` (POST), and its series count."""
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        answer = requests.post(
            f"{url}/api/v1/query", data={"query": query, "time": f"{at:.3f}"}, timeout=300
        )
        times.append(time.perf_counter() - start)
        body = answer.json()
        if body.get("status") != "success":
            sys.exit(f"query refused: {body.get('error')}")
        size = len(body["data"]["result"])
    return statistics.median(times), size


def run(args: argparse.Namespace, created: bool) -> None:
    now = time.time()
    pods = draw(args.pods, args.gpu_share, args.pending_share, now)
    with tempfile.TemporaryDirectory() as tmp:
        om = Path(tmp) / "ksm.om"
        om.write_text(openmetrics(pods, args.minutes, created, now))
        prom = start_prometheus([], data_dir=Path(tmp) / "prom", backfill_files=[om])
        try:
            folded, samples = first_round(prom.url, now, args.gpu_resources)
            base = sum(timed(prom.url, query, now, args.repeat)[0] for query in folded)
            mapped = first_round(prom.url, now, args.gpu_resources, PRIORITIES)[0]
            with_classes = sum(timed(prom.url, query, now, args.repeat)[0] for query in mapped)
            arrivals = kube_state.render(
                kube_state.ARRIVALS_UNPRIORITISED, 3600, args.gpu_resources
            )
            t_arrivals, n_arrivals = timed(prom.url, arrivals, now, args.repeat)
            second = kube_state.second_round(samples)
            kind = "with kube_pod_created" if created else "without kube_pod_created (OpenShift)"
            print(f"\n{args.pods} pods, {kind}:")
            print(
                f"  folded queue query        {base * 1000:8.1f} ms  ({len(folded)} "
                f"quer{'y' if len(folded) == 1 else 'ies'}, {sum(map(len, folded)):,} characters)"
            )
            print(
                f"    with priority classes   {with_classes * 1000:8.1f} ms  "
                f"({with_classes / base:.2f}x; {sum(map(len, mapped)):,} characters)"
            )
            print(
                f"    its arrivals part alone {t_arrivals * 1000:8.1f} ms  "
                f"({t_arrivals / base:.2f}x; {n_arrivals} series, {len(arrivals):,} characters)"
            )
            if not second:
                print("  second round              not asked")
                return
            uids = kube_state.uncreated(samples)
            t, n = timed(prom.url, kube_state.render(queries.fold(second), 3600), now, args.repeat)
            print(
                f"  second round ({len(uids)} uids)  {t * 1000:8.1f} ms  "
                f"({t / base:.2f}x the folded query; {n} series)"
            )
            for name, part in second.items():
                tp, n_part = timed(prom.url, kube_state.render(part, 3600), now, args.repeat)
                print(
                    f"    {name:<22}  {tp * 1000:8.1f} ms  "
                    f"({tp / base:.2f}x the folded query; {n_part} series)"
                )
            whole = kube_state.pending_since_query([f"x{i:040d}" for i in range(1000)])
            assert whole is not None
            t2, n2 = timed(prom.url, kube_state.render(whole, 3600), now, args.repeat)
            print(
                f"  peer: every pending pod   {t2 * 1000:8.1f} ms  "
                f"({t2 / base:.2f}x the folded query; {n2} series)"
            )
        finally:
            prom.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=at_least(1), default=5000)
    parser.add_argument("--gpu-share", type=share, default=0.3)
    parser.add_argument("--pending-share", type=share, default=0.3)
    parser.add_argument("--minutes", type=at_least(1), default=60)
    parser.add_argument("--repeat", type=at_least(1), default=7)
    parser.add_argument(
        "--gpu-resource",
        dest="gpu_resources",
        action="append",
        default=[],
        help="a site's own GPU resource name (the forecaster's --pending.gpu-resource)",
    )
    args = parser.parse_args(argv)
    for created in (True, False):
        run(args, created)


if __name__ == "__main__":
    main()
