"""The GPU queue's queries as the cycle sends them, against a real Prometheus holding a
fixed history of what kube-state-metrics serves, answer what they answered when the
folded first round was one query: the answers of every part, first and second round,
are compared with ``tests/fixtures/kube/queue_answers.json``, written by the one-query
read (``GPU_ETA_UPDATE_GOLDEN=1`` rewrites it: review the diff, it is the contract).

Why a golden file and not two reads in one test: what is compared is the queries'
shape before and after a change to it, and the "before" is no code any more. The
history is backfilled at fixed times and read at a fixed time, so every answer is the
same in each run. The cluster holds each case a query part exists for: the site's own
resource (``nvidia.com/a100-shared``, given with ``--pending.gpu-resource`` beside MIG
profiles the built-in regex already matches), MIG slices, init containers and a
sidecar, tolerations and taints, a node selector beyond the GPU type (a pending pod's,
an arriving pod's), a gated pod, a
pod being deleted, a pod finished on a node the read lacks, a node whose device plugin
is away, a cordoned node, a pod asking ``nvidia.com/gpu: 0``, a CPU pod, and pods
created in the arrival window; and the same cluster without ``kube_pod_created``
(OpenShift's KSM), which asks the first-seen parts of the second round.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import pytest

from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.series import Sample
from gpu_eta.simulation.ksm import GPU, KsmNode, KsmPod, KsmToleration, exposition

GOLDEN = Path(__file__).parent.parent / "fixtures" / "kube" / "queue_answers.json"
AT = 1_790_000_040.0  # the read's time; the history is one sample a minute up to it
HISTORY_SECONDS = 2 * 3600
ARRIVALS_SECONDS = 3600.0
PRIORITIES = {"high": 1000}  # --pending.priority-class high=1000
PRODUCT = "nvidia.com/gpu.product"
HOSTNAME = "kubernetes.io/hostname"
SHARED = "nvidia.com/a100-shared"  # a time-slicing rename: the site's own resource
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
# what a site with MIG nodes passes: its renamed replicas, and MIG profiles (matched by
# the built-in nvidia_com_mig_.+ already)
GPU_RESOURCES = (
    SHARED,
    MIG_1G,
    "nvidia.com/mig-2g.20gb",
    MIG_3G,
    "nvidia.com/mig-4g.40gb",
    "nvidia.com/mig-7g.80gb",
)
# more of the site's own, long (a vendor's domain): the first round then takes several
# queries; none is a resource of the history, so the answers stay the same
LONG_NAMES = tuple(
    f"example-gpu-vendor.cluster.local/a100-80gb-shared-replica-pool-{i:02d}" for i in range(26)
)
TAINT = ("nvidia.com/gpu", "present", "NoSchedule")

NODES = [
    KsmNode("a100", {GPU: 8}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "a"}, taints=(TAINT,)),
    KsmNode("mig", {MIG_1G: 7, MIG_3G: 2}, {PRODUCT: "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}),
    KsmNode("shared", {SHARED: 16}, {PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "b"}),
    KsmNode("cordoned", {GPU: 4}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, unschedulable=True),
    KsmNode("notready", {GPU: 4}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, ready=False),
    KsmNode("upgrading", {GPU: 0}, {PRODUCT: "NVIDIA-H100-80GB-HBM3"}, capacity={GPU: 8}),
    KsmNode("cpu", {"cpu": 64}),
]
_TOLERATE = (KsmToleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),)
_START = AT - HISTORY_SECONDS + 60  # the first sample's time


def _running(pod: str, requests: dict[str, int], node: str, started: float, **more) -> KsmPod:
    """A pod of namespace ml (uid ``u-<pod>``) Running on ``node`` since ``started``,
    created at the history's start unless ``created`` says otherwise."""
    created = more.pop("created", _START)
    return KsmPod("ml", pod, f"u-{pod}", "Running", created, requests, node=node,
                  start_time=started, **more)  # fmt: skip


def _pending(pod: str, created: float, requests: dict[str, int], **more) -> KsmPod:
    """A pod of namespace ml (uid ``u-<pod>``) Pending since ``created``."""
    return KsmPod("ml", pod, f"u-{pod}", "Pending", created, requests, **more)


# fmt: off
PODS = [
    _running("train", {GPU: 4}, "a100", _START + 30, tolerations=_TOLERATE),
    _running("cancelled", {GPU: 2}, "a100", _START + 40, tolerations=_TOLERATE),
    KsmPod("hub", "jupyter-ann", "u-nb", "Running", _START, {SHARED: 1}, node="shared",
           start_time=_START + 20, owner_kind="<none>", restart_policy="Always"),
    _running("slice", {MIG_1G: 1}, "mig", _START + 20,
             init_containers={"fetch": {MIG_1G: 1}, "proxy": {MIG_1G: 1}}, sidecars=("proxy",)),
    _pending("wants-a", _START + 600, {GPU: 8}, priority_class="high", tolerations=_TOLERATE,
             node_selector={PRODUCT: "NVIDIA-A100-SXM4-80GB", "pool": "a"}),
    _pending("wants-3g", _START + 900, {MIG_3G: 1}),
    _pending("wants-shared", _START + 1200, {SHARED: 2}, more_containers={"side": {SHARED: 1}}),
    _pending("gated", _START + 1500, {GPU: 1}, scheduling_gated=True),
    KsmPod("ml", "cpu-profile", "u-zero", "Pending", _START + 1500, {GPU: 0, "cpu": 4}),
    KsmPod("ml", "cpu-only", "u-cpu", "Pending", _START + 1500, {"cpu": 4}),
    KsmPod("ml", "done", "u-done", "Succeeded", _START, {GPU: 1}, node="gone",
           start_time=_START + 10),
    # created in the arrival window: the arrivals (new-run pinned to its node by a key
    # no pending pod selects: the second round reads it for the arrivals alone)
    _running("new-run", {GPU: 2}, "a100", AT - 1790, created=AT - 1800, tolerations=_TOLERATE,
             node_selector={PRODUCT: "NVIDIA-A100-SXM4-80GB", HOSTNAME: "a100"}),
    _pending("new-wait", AT - 600, {MIG_1G: 2}),
]
# fmt: on


def _extras() -> str:
    """The family ``simulation.ksm.exposition`` does not write: the cancelled pod's
    deletion timestamp."""
    return (
        "# TYPE kube_pod_deletion_timestamp gauge\n"
        'kube_pod_deletion_timestamp{namespace="ml",pod="cancelled",uid="u-cancelled"} '
        f"{AT + 60!r}\n"
    )


def history(created: bool) -> str:
    """OpenMetrics of what KSM served for ``NODES`` and ``PODS`` once a minute up to
    ``AT`` (a pod from its creation on), ``kube_pod_created`` left out unless
    ``created``."""
    series: dict[str, dict[str, list[str]]] = {}
    steps = [AT - HISTORY_SECONDS + 60 * k for k in range(1, HISTORY_SECONDS // 60 + 1)]
    for t in steps:
        text = exposition(
            NODES, [p for p in PODS if p.created <= t], label_allowlist=(PRODUCT, "pool")
        )
        for line in (text + _extras()).splitlines():
            if not line or line.startswith("#"):
                continue
            key, value = line.rsplit(" ", 1)
            family = key.split("{", 1)[0]
            if family == "kube_pod_created" and not created:
                continue
            series.setdefault(family, {}).setdefault(key, []).append(f"{key} {value} {t:.3f}")
    out = []
    for family, by_key in series.items():
        out.append(f"# TYPE {family} gauge")
        for lines in by_key.values():
            out.extend(lines)
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _ask(
    client: PromClient, parts: Mapping[str, str], gpu_resources: Sequence[str]
) -> tuple[dict[str, list[Sample]], list[int]]:
    """``parts`` (templates) answered as the cycle asks them (``Cycle._ask_queue``:
    folded in as few queries within ``queries.MAX_QUERY_CHARS`` as they fit), and the
    length of each query sent."""
    out: dict[str, list[Sample]] = {}
    lengths = []
    for batch in kube_state.batches(
        kube_state.rendered(parts, ARRIVALS_SECONDS, gpu_resources),
        queries.fold,
        queries.MAX_QUERY_CHARS,
    ):
        folded = queries.fold(batch)
        out.update(queries.unfold(client.instant(folded, at=AT), batch))
        lengths.append(len(folded))
    return out, lengths


def read_queue(
    client: PromClient,
    gpu_resources: Sequence[str] = GPU_RESOURCES,
    priorities: Mapping[str, int] = PRIORITIES,
) -> tuple[dict[str, list[Sample]], list[int], list[int]]:
    """Both rounds' answers by part, and the length of each query of each round
    (``priorities``: ``--pending.priority-class``'s, as the cycle gives them)."""
    samples, first = _ask(client, kube_state.first_round(priorities), gpu_resources)
    second = kube_state.second_round(samples)
    lengths: list[int] = []
    if second:
        more, lengths = _ask(client, second, gpu_resources)
        samples.update(more)
    return samples, first, lengths


def summed(answer: Iterable[Sample]) -> list[Sample]:
    """``PODS``' answer (a series per container) summed over each pod's containers, as
    the golden file holds it: the per-container read must add up to the pod's request
    the one-query read summed in PromQL (``kube_state._PodRequests`` sums it)."""
    sums: dict[tuple, float] = {}
    for s in answer:
        key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "container"))
        sums[key] = sums.get(key, 0.0) + s.value
    return [Sample(dict(key), value, AT) for key, value in sums.items()]


def as_json(samples: Mapping[str, Iterable[Sample]]) -> dict[str, list[list]]:
    """Answers by part, each sorted, without the fold's tag (which query carried a part
    is no part of its answer); the pods' requests summed over their containers
    (``summed``)."""
    return {
        name: sorted(
            [sorted((k, v) for k, v in s.labels.items() if k != queries.TAG), s.value]
            for s in (summed(answer) if name == "ksm_pods" else answer)
        )
        for name, answer in sorted(samples.items())
    }


def _normal(data: Sequence) -> list:
    return json.loads(json.dumps(data))


def check_answers(got: Mapping[str, list], created: bool) -> None:
    """``got`` (``as_json``) is the golden answer of the history ``created`` or not;
    ``GPU_ETA_UPDATE_GOLDEN=1`` writes it instead."""
    key = "created" if created else "no_created"
    if os.environ.get("GPU_ETA_UPDATE_GOLDEN"):
        golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
        golden[key] = got
        GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
    want = json.loads(GOLDEN.read_text())[key]
    assert _normal(got) == want


@pytest.mark.parametrize("created", [True, False], ids=["created", "no-created"])
@pytest.mark.parametrize("names", ["given", "long"])
def test_the_queue_reads_answer_as_the_one_query_read_did(
    prometheus_factory, tmp_path: Path, created: bool, names: str
) -> None:
    """The answers are the golden ones, the site's names given as in ``GPU_RESOURCES``
    (the first round one query) or with 26 long names more (in several)."""
    resources = GPU_RESOURCES if names == "given" else (*GPU_RESOURCES, *LONG_NAMES)
    om = tmp_path / "ksm.om"
    om.write_text(history(created))
    prom = prometheus_factory([], backfill_files=[om], retention="100y")
    client = PromClient(prom.url)
    try:
        samples, first, second = read_queue(client, resources)
    finally:
        client.close()
    assert max(first + second) <= queries.MAX_QUERY_CHARS
    assert len(first) == (1 if names == "given" else 4) and len(second) == 1
    got = as_json(samples)
    if names == "given":
        check_answers(got, created)
    else:
        assert (
            _normal(got) == json.loads(GOLDEN.read_text())["created" if created else "no_created"]
        )
    # the history holds what each part is for: no part answers empty by mistake
    asked = {kube_state.NODE_LABELS_PART}
    if not created:
        asked |= {kube_state.PENDING_SINCE_PART, kube_state.ARRIVALS_SEEN_PART}
    assert {name for name, answer in got.items() if answer} == {*kube_state.QUERIES, *asked}
    # the per-container read: wants-shared's two containers (2 and 1), each its own
    assert sorted(
        (s.labels["container"], s.value)
        for s in samples["ksm_pods"]
        if s.labels["pod"] == "wants-shared"
    ) == [("main", 2.0), ("side", 1.0)]
    queue = kube_state.parse(samples, AT, {}, PRIORITIES, ARRIVALS_SECONDS, resources)
    assert {p.pod: p.largest_container_units for p in queue.pending}["wants-shared"] == 2
    assert {p.pod for p in queue.pending} == {
        "wants-a",
        "wants-3g",
        "wants-shared",
        "gated",
        "new-wait",
    }
    assert {n.name for n in queue.nodes} >= {"a100", "mig", "shared", "upgrading"}
    # the pods arriving select what new-run and new-wait did, node labels beyond the GPU
    # type included
    assert sorted((a.resource, a.units, a.selector) for a in queue.arrivals) == [
        ("nvidia_com_gpu", 2, (("kubernetes_io_hostname", "a100"),)),
        ("nvidia_com_mig_1g_10gb", 2, ()),
    ]


def test_without_a_priority_mapping_the_arrivals_read_no_pod_info(
    prometheus_factory, tmp_path: Path
) -> None:
    """Without ``--pending.priority-class`` every pod arriving is queued at priority 0
    whatever its class (a class without a value is 0), so the arrivals' priority
    classes (``arrival="info"``: ``kube_pod_info`` of every GPU pod of the window, each
    cycle) are not asked: the answers are the golden ones without those series, and
    the arrivals are those the whole read gives without a mapping."""
    om = tmp_path / "ksm.om"
    om.write_text(history(True))
    prom = prometheus_factory([], backfill_files=[om], retention="100y")
    client = PromClient(prom.url)
    try:
        plain, _, _ = read_queue(client, priorities={})
        whole, _, _ = read_queue(client)
    finally:
        client.close()
    golden = json.loads(GOLDEN.read_text())["created"]
    info = ["arrival", "info"]
    assert any(info in labels for labels, _ in golden["ksm_arrivals"])
    want = {name: [s for s in answer if info not in s[0]] for name, answer in golden.items()}
    assert _normal(as_json(plain)) == want

    def arrivals(samples: Mapping[str, list[Sample]]) -> tuple:
        return kube_state.parse(samples, AT, {}, {}, ARRIVALS_SECONDS, GPU_RESOURCES).arrivals

    assert arrivals(plain) == arrivals(whole) != ()
