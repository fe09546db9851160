"""The queue replay on hand-built queues: order, whole nodes, GPU types, taints, never-fits."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from gpu_eta.forecaster.queue_replay import (
    BEYOND_HORIZON,
    BLOCKED_ELSEWHERE,
    NEVER_FITS,
    NO_SCHEDULABLE_NODE,
    PREDICTED,
    Arrival,
    Holder,
    Node,
    PendingPod,
    ReplayError,
    Request,
    StartCalibrator,
    StartPrediction,
    Toleration,
    default_requests,
    end_after,
    naive_start,
    nodes_fitting_now,
    parse_toleration,
    quantile_cdf,
    quantile_draw,
    replay,
)

NOW = 1_000_000.0
G = "nvidia_com_gpu"


def node(name: str, gpus: int, product: str = "A100") -> Node:
    return Node(name, {G: gpus}, product)


def job(pod: str, node_name: str, end: float, units: int = 1, spread: float = 0.0) -> Holder:
    """A running job ending at NOW + end (± spread at P10/P90)."""
    t = NOW + end
    return Holder("ml", pod, node_name, G, units, (t - spread, t, t + spread), NOW - 100)


def pending(pod: str, units: int = 1, created: float = 0.0, **kw) -> PendingPod:
    return PendingPod("ml", pod, G, units, NOW - 1000 + created, **kw)


def starts(result, pod: str) -> tuple[float, float, float]:
    pred = result.pods[("ml", pod)]
    assert pred.status == PREDICTED, pred
    return tuple(t - NOW for t in pred.starts)


# Exact ends and a fixed 500 s duration for every started pod: the replay is deterministic.
EXACT = {"durations": [500.0], "n_samples": 5}


def test_fits_now_starts_now():
    r = replay([node("n1", 2)], [job("a", "n1", 100)], [pending("p")], NOW, **EXACT)
    assert starts(r, "p") == (0.0, 0.0, 0.0)


def test_fifo_within_priority_and_each_waits_for_the_one_before():
    nodes = [node("n1", 1)]
    holders = [job("a", "n1", 100)]
    q = [pending("second", created=20), pending("first", created=10)]
    r = replay(nodes, holders, q, NOW, **EXACT)
    assert starts(r, "first") == (100.0, 100.0, 100.0)
    assert starts(r, "second") == (600.0, 600.0, 600.0)  # after first's 500 s


def test_priority_goes_before_older_pods():
    nodes = [node("n1", 1)]
    q = [pending("old", created=0), pending("urgent", created=50, priority=1000)]
    r = replay(nodes, [job("a", "n1", 100)], q, NOW, **EXACT)
    assert starts(r, "urgent")[1] == 100.0
    assert starts(r, "old")[1] == 600.0


def test_of_two_pods_sharing_a_name_the_newest_is_the_names_prediction():
    """A pod deleted and created again under its name while KSM still shows the old one
    is two pods in the queue, both replayed; the name's prediction is the newest's, the
    one ``pending.predict`` publishes, even when the new pod is ahead of the old one in
    the queue (a higher priority here)."""
    old = pending("worker-0", units=1, created=0)
    new = pending("worker-0", units=8, created=500, priority=100)
    r = replay([node("n1", 8)], [], [old, new], NOW, **EXACT)
    assert [p.starts[1] - NOW for p in r.pending] == [500.0, 0.0]  # new first, then old
    assert r.pods == {("ml", "worker-0"): r.pending[1]}


def test_multi_gpu_pod_waits_for_a_whole_node_and_small_pods_go_past_it():
    # two 2-GPU nodes, each with one GPU free at 100 s and the other at 300 s / 400 s
    nodes = [node("n1", 2), node("n2", 2)]
    holders = [
        job("a", "n1", 100),
        job("b", "n1", 300),
        job("c", "n2", 100),
        job("d", "n2", 400),
    ]
    q = [pending("big", units=2, created=0), pending("small", units=1, created=10)]
    r = replay(nodes, holders, q, NOW, durations=[1000.0], n_samples=3)
    # small takes a GPU freed at 100 s (big does not fit then, and reserves nothing)
    assert starts(r, "small")[1] == 100.0
    # big needs both GPUs of one node: small sits on one node's freed GPU for 1000 s,
    # so big gets the other node when its second job ends (300 s on n1, 400 s on n2)
    big = starts(r, "big")[1]
    assert big in (300.0, 400.0)
    # the naive answer (earliest end on a suitable node) says 100 s for big
    assert naive_start(nodes, holders, q[0], NOW) == NOW + 100


def test_gpu_type_constraint():
    nodes = [node("fast", 1, "A100"), node("slow", 1, "T4")]
    holders = [job("a", "fast", 500), job("b", "slow", 50)]
    q = [pending("wants-a100", product="A100"), pending("any", created=5)]
    r = replay(nodes, holders, q, NOW, **EXACT)
    assert starts(r, "wants-a100")[1] == 500.0  # not the T4 that frees at 50 s
    assert starts(r, "any")[1] == 50.0  # goes past it on the T4


def test_a_node_selector_holds_a_pod_to_the_nodes_labelled_so():
    """kube-scheduler starts a pod only on a node whose labels hold every pair of its
    nodeSelector: a pod pinned to pool b waits for pool b while pool a is idle, one
    selecting a pool no node is in never fits, and a node whose labels are not known
    (None) is not held against the pod (the naive answer agrees)."""
    pool_a = Node("a", {G: 2}, "A100", labels={"pool": "a"})
    pool_b = Node("b", {G: 2}, "A100", labels={"pool": "b", "team": "ml"})
    holders = [job("b-run", "b", 500, units=2)]
    q = [
        pending("wants-b", selector=(("pool", "b"),)),
        pending("wants-b-ml", selector=(("pool", "b"), ("team", "ml")), created=1),
        pending("wants-c", selector=(("pool", "c"),), created=2),
        pending("any", created=3),
    ]
    r = replay([pool_a, pool_b], holders, q, NOW, **EXACT)
    assert starts(r, "wants-b")[1] == starts(r, "wants-b-ml")[1] == 500.0
    assert starts(r, "any")[1] == 0.0  # on pool a
    assert r.pods[("ml", "wants-c")].status == NEVER_FITS
    assert naive_start([pool_a, pool_b], holders, q[0], NOW) == NOW + 500
    unknown = Node("u", {G: 2}, "A100")  # no kube_node_labels series: labels None
    r = replay([pool_b, unknown], holders, q[2:3], NOW, **EXACT)
    assert starts(r, "wants-c")[1] == 0.0


def test_never_fits_says_so():
    nodes = [node("n1", 4), node("n2", 2, "T4")]
    q = [
        pending("too-big", units=8),
        pending("no-such-type", product="H100"),
        pending("mig", created=3),
    ]
    q[2] = PendingPod("ml", "mig", "nvidia_com_mig_1g_5gb", 1, NOW)
    r = replay(nodes, [], q, NOW, **EXACT)
    for name in ("too-big", "no-such-type", "mig"):
        pred = r.pods[("ml", name)]
        assert pred.status == NEVER_FITS and pred.starts is None


def test_a_cordoned_or_not_ready_node_takes_no_new_pod():
    """A cordoned node's free GPUs and the GPUs its pods free go to nobody: the pod
    waits for the schedulable node; a pod only the closed node could hold says why;
    arrivals and requests are not placed there either; the naive answer skips it."""
    closed = Node("drained", {G: 8}, "A100", schedulable=False)
    nodes = [closed, node("open", 2)]
    holders = [job("a", "drained", 50), job("b", "open", 200), job("c", "open", 300)]
    q = [pending("one"), pending("eight", units=8, created=5)]
    r = replay(nodes, holders, q, NOW, requests=[Request("A100", G, 1)], **EXACT)
    assert starts(r, "one") == (200.0, 200.0, 200.0)  # not the 7 free on "drained" now
    eight = r.pods[("ml", "eight")]
    assert (eight.status, eight.starts, eight.started_share) == (NO_SCHEDULABLE_NODE, None, 0.0)
    # the request queues behind "one" (which takes the GPU freed at 200 s)
    assert r.requests[Request("A100", G, 1)].starts[1] == NOW + 300
    assert naive_start(nodes, holders, q[0], NOW) == NOW + 200
    # open again: "one" starts at once on it, "eight" once "one" (500 s) and "a" are done
    reopened = [Node("drained", {G: 8}, "A100"), node("open", 2)]
    r = replay(reopened, holders, q, NOW, **EXACT)
    assert starts(r, "one")[1] == 0.0 and starts(r, "eight")[1] == 500.0
    # arrivals land only where pods may: with "open" full for good, a steady stream
    # of new 1-GPU pods takes nothing from a pod waiting for it
    forever = [Holder("hub", f"nb{i}", "open", G, 1, None, NOW) for i in range(2)]
    r = replay(
        nodes,
        forever,
        [pending("waits")],
        NOW,
        durations=[],
        arrivals=[Arrival(G, 1, 1.0, "A100")],
        n_samples=3,
        horizon_seconds=3600.0,
    )
    assert r.pods[("ml", "waits")].status == BEYOND_HORIZON


TEAM = ("dedicated", "team-a", "NoSchedule")
MEMBER = (Toleration("dedicated", "Equal", "team-a", "NoSchedule"),)


def test_a_tainted_nodes_gpus_start_only_pods_that_tolerate_its_taints():
    """The team pool's GPU frees at 100 s: the older pod without the toleration waits
    for the open node (300 s) and the team's pod behind it takes the pool's GPU; a pod
    only the pool could hold never fits; one tolerating it but the pool cordoned waits
    for an admin."""
    nodes = [Node("pool", {G: 2}, "A100", taints=(TEAM,)), node("open", 1)]
    holders = [job("a", "pool", 100), job("b", "pool", 1000), job("c", "open", 300)]
    q = [
        pending("outsider", created=0, tolerations=()),
        pending("member", created=10, tolerations=MEMBER),
        pending("two-outsider", units=2, created=20, tolerations=()),
        pending("two-member", units=2, created=30, tolerations=MEMBER),
    ]
    r = replay(nodes, holders, q, NOW, **EXACT)
    assert starts(r, "outsider")[1] == 300.0
    assert starts(r, "member")[1] == 100.0
    assert (r.pods[("ml", "two-outsider")].status, r.pods[("ml", "two-outsider")].starts) == (
        NEVER_FITS,
        None,
    )
    assert starts(r, "two-member")[1] == 1000.0  # both pool GPUs: after "b" and member's 500 s
    assert naive_start(nodes, holders, q[0], NOW) == NOW + 300
    assert naive_start(nodes, holders, q[1], NOW) == NOW + 100
    cordoned = [Node("pool", {G: 2}, "A100", taints=(TEAM,), schedulable=False), node("open", 1)]
    r = replay(cordoned, holders, q, NOW, **EXACT)
    assert r.pods[("ml", "two-member")].status == NO_SCHEDULABLE_NODE
    assert r.pods[("ml", "two-outsider")].status == NEVER_FITS


def test_arrivals_take_gpus_only_where_the_pods_they_were_measured_on_could():
    """The team's 2-GPU pod waits for both pool GPUs (free at 100 s and 200 s) while the
    open node stays full. New 1-GPU pods from outside the team (no tolerations) cannot
    take the GPU freed at 100 s: the team's pod starts at 200 s. Arrivals that tolerate
    the pool (the team's own, or ones whose tolerations are not known) take it and hold
    it past the horizon (no history), and the team's pod waits beyond it."""
    nodes = [Node("pool", {G: 2}, "A100", taints=(TEAM,)), node("open", 1)]
    holders = [
        job("a", "pool", 100),
        job("b", "pool", 200),
        Holder("hub", "nb", "open", G, 1, None, NOW),  # no forecast, no history: for good
    ]
    q = [pending("member", units=2, tolerations=MEMBER)]

    def member_with(tolerations) -> StartPrediction:
        arrivals = [Arrival(G, 1, 1.0, tolerations=tolerations)]
        r = replay(nodes, holders, q, NOW, arrivals=arrivals, n_samples=3, horizon_seconds=3600.0)
        return r.pods[("ml", "member")]

    assert Arrival(G, 1, 1.0).tolerations == ()
    assert member_with(()).starts == (NOW + 200,) * 3
    assert member_with(MEMBER).status == BEYOND_HORIZON
    assert member_with(None).status == BEYOND_HORIZON


def test_arrivals_of_a_higher_priority_go_ahead_of_a_low_priority_pod():
    """kube-scheduler's queue sorts by priority before creation time: priority-0 pods
    arriving while a backfill pod (priority -100) waits go ahead of it. Six such pods an
    hour arrive on a 1-GPU node whose job ends in an hour: the backfill pod waits for
    every one of them (each runs the history's hour), past the 6-hour horizon. Arrivals
    without a priority queued behind every known pod, so it was given the next GPU
    (+0.92/+1.01/+1.08 h). Arrivals of its priority or below still queue behind it."""
    hour = 3600.0
    holders = [Holder("ml", "job", "n1", G, 1, (NOW + 3300, NOW + 3600, NOW + 3900), NOW - 600)]
    low = PendingPod("batch", "backfill", G, 1, NOW - 60, priority=-100)

    def backfill(priority: int) -> StartPrediction:
        r = replay(
            [node("n1", 1)],
            holders,
            [low],
            NOW,
            durations=[hour],
            arrivals=[Arrival(G, 1, 6 / hour, priority=priority)],
            n_samples=200,
            horizon_seconds=6 * hour,
        )
        return r.pods[("batch", "backfill")]

    assert Arrival(G, 1, 1.0).priority == 0
    assert backfill(0).status == BEYOND_HORIZON
    for behind in (-100, -1000):  # the job's end, drawn: +3300/+3600/+3900 s
        p10, p50, p90 = (t - NOW for t in backfill(behind).starts)
        assert 3200 < p10 < 3400 and 3500 < p50 < 3700 and 3800 < p90 < 4000


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("", "Exists"), ("anything", "x", "NoExecute"), True),  # tolerates all
        (Toleration("", "Exists", effect="NoSchedule"), ("k", "v", "NoSchedule"), True),
        (Toleration("", "Exists", effect="NoSchedule"), ("k", "v", "NoExecute"), False),
        (Toleration("k", "Exists"), ("k", "any-value", "NoSchedule"), True),
        (Toleration("k", "Exists"), ("other", "", "NoSchedule"), False),
        (Toleration("k", "Equal", "v", "NoSchedule"), ("k", "v", "NoSchedule"), True),
        (Toleration("k", "", "v"), ("k", "v", "NoExecute"), True),  # unset: Equal, every effect
        (Toleration("k", "Equal", "v"), ("k", "w", "NoSchedule"), False),
        (Toleration("k", "Equal", ""), ("k", "", "NoSchedule"), True),  # a taint without value
        (Toleration("k", "Equal", "v", "NoExecute"), ("k", "v", "NoSchedule"), False),
        (Toleration("k", "Sometimes", "5"), ("k", "5", "NoSchedule"), False),  # unknown
        # Lt / Gt (TaintTolerationComparisonOperators): the taint's value compared with
        # the toleration's, as int64 in Kubernetes' canonical form
        (Toleration("k", "Lt", "5"), ("k", "3", "NoSchedule"), True),  # taint 3 < 5
        (Toleration("k", "Lt", "5"), ("k", "5", "NoSchedule"), False),
        (Toleration("k", "Lt", "5"), ("k", "9", "NoSchedule"), False),
        (Toleration("k", "Gt", "5"), ("k", "9", "NoSchedule"), True),  # taint 9 > 5
        (Toleration("k", "Gt", "5"), ("k", "5", "NoSchedule"), False),
        (Toleration("k", "Gt", "-5"), ("k", "0", "NoSchedule"), True),
        (Toleration("k", "Lt", "0"), ("k", "-9223372036854775808", "NoSchedule"), True),
        (Toleration("k", "Gt", "5"), ("other", "9", "NoSchedule"), False),  # key first
        (Toleration("k", "Gt", "5", "NoExecute"), ("k", "9", "NoSchedule"), False),
        (Toleration("k", "Gt", "5"), ("k", "", "NoSchedule"), False),  # not integers:
        (Toleration("k", "Gt", "5"), ("k", "09", "NoSchedule"), False),  # no match
        (Toleration("k", "Gt", "5"), ("k", "+9", "NoSchedule"), False),
        (Toleration("k", "Lt", "5"), ("k", "-0", "NoSchedule"), False),
        (Toleration("k", "Gt", "x"), ("k", "9", "NoSchedule"), False),
        (Toleration("k", "Gt", "5"), ("k", "9223372036854775808", "NoSchedule"), False),
        (Toleration("k", "Lt", "9223372036854775807"), ("k", "1", "NoSchedule"), True),
    ],
)
def test_toleration_matching_follows_kubernetes(toleration, taint, expected):
    assert toleration.tolerates(taint) is expected


def test_prefer_no_schedule_and_node_state_taints_keep_no_pod_off():
    """PreferNoSchedule is a preference: the pod starts there. The taints Kubernetes
    sets from a node's state are ``Node.schedulable``'s: a NotReady node's not-ready
    taint leaves the pod ``no_schedulable_node`` (it waits for the node), and a cordon
    taint still shown after the node was uncordoned keeps nobody off."""
    prefer = [Node("n1", {G: 1}, "A100", taints=(("dedicated", "x", "PreferNoSchedule"),))]
    r = replay(prefer, [], [pending("p", tolerations=())], NOW, **EXACT)
    assert starts(r, "p")[1] == 0.0
    not_ready = (("node.kubernetes.io/not-ready", "", "NoSchedule"),)
    down = [Node("n1", {G: 1}, "A100", schedulable=False, taints=not_ready)]
    r = replay(down, [], [pending("p", tolerations=())], NOW, **EXACT)
    assert r.pods[("ml", "p")].status == NO_SCHEDULABLE_NODE
    lagging = (("node.kubernetes.io/unschedulable", "", "NoSchedule"),)
    reopened = [Node("n1", {G: 1}, "A100", taints=lagging)]
    r = replay(reopened, [], [pending("p", tolerations=())], NOW, **EXACT)
    assert starts(r, "p")[1] == 0.0


def test_unknown_tolerations_pass_every_taint():
    """A pod whose tolerations KSM does not export (None) is placed as if the node had
    no taint: on the tainted node's GPU at 100 s, not predicted to fit nowhere."""
    nodes = [Node("pool", {G: 1}, "A100", taints=(("nvidia.com/gpu", "present", "NoSchedule"),))]
    r = replay(nodes, [job("a", "pool", 100)], [pending("p")], NOW, **EXACT)
    assert pending("p").tolerations is None
    assert starts(r, "p")[1] == 100.0
    r = replay(nodes, [job("a", "pool", 100)], [pending("p", tolerations=())], NOW, **EXACT)
    assert r.pods[("ml", "p")].status == NEVER_FITS


def test_requests_made_now_use_untainted_nodes_and_the_gpu_resource_taint():
    """A request tolerates only what the ExtendedResourceToleration plugin adds: the
    ``nvidia.com/gpu:NoSchedule`` pool takes it, a dedicated H100 pool does not (no
    H100 request at all), nor a ``nvidia.com/gpu:NoExecute`` one."""
    gpu_taint = ("nvidia.com/gpu", "present", "NoSchedule")
    nodes = [
        Node("a100", {G: 2}, "A100", taints=(gpu_taint,)),
        Node("h100", {G: 8}, "H100", taints=(TEAM, gpu_taint)),
        Node("t4", {G: 1}, "T4", taints=(("nvidia.com/gpu", "", "NoExecute"),)),
    ]
    reqs = default_requests(nodes)
    assert {(q.product, q.units) for q in reqs} == {("A100", 1), ("A100", 2)}
    r = replay(nodes, [job("a", "a100", 100)], [], NOW, requests=reqs, **EXACT)
    by = {(k.product, k.units): v for k, v in r.requests.items()}
    assert by[("A100", 1)].starts[1] == NOW and by[("A100", 2)].starts[1] == NOW + 100
    t4 = replay(nodes, [], [], NOW, requests=[Request("T4", G, 1)], **EXACT)
    assert t4.requests[Request("T4", G, 1)].status == NEVER_FITS
    assert naive_start(nodes, [], Request("H100", G, 1), NOW) == math.inf


def test_requests_tolerate_the_taint_of_their_own_resource_only():
    """A MIG request tolerates the taint named after its MIG resource
    (``nvidia.com/mig-1g.5gb``, KSM's ``nvidia_com_mig_1g_5gb``), not
    ``nvidia.com/gpu``: a MIG node tainted ``nvidia.com/gpu`` gets no MIG request."""
    mig = "nvidia_com_mig_1g_5gb"
    nodes = [
        Node("mig-own", {mig: 7}, "A100", taints=(("nvidia.com/mig-1g.5gb", "", "NoSchedule"),)),
        Node("mig-gpu", {mig: 7}, "H100", taints=(("nvidia.com/gpu", "", "NoSchedule"),)),
    ]
    assert {(q.product, q.resource, q.units) for q in default_requests(nodes)} == {
        ("A100", mig, u) for u in (1, 2, 4)
    }
    # replayed beside a whole-GPU request: each resource's requests its own toleration
    gpu_node = Node("gpu", {G: 1}, "A100", taints=(("nvidia.com/gpu", "", "NoSchedule"),))
    asked = [Request("A100", G, 1), Request("A100", mig, 1), Request("H100", mig, 1)]
    r = replay([gpu_node, *nodes], [], [], NOW, requests=asked, **EXACT)
    assert {(q.product, q.resource): p.status for q, p in r.requests.items()} == {
        ("A100", G): PREDICTED,
        ("A100", mig): PREDICTED,
        ("H100", mig): NEVER_FITS,
    }


def test_a_configured_request_toleration_replaces_the_resource_taint_guess():
    """GPU pools tainted by a site convention (``sku=gpu:NoSchedule``, AKS style) and
    no ExtendedResourceToleration plugin (off by default upstream): by default no
    request at all; told what a request tolerates, the requests come back and start on
    those nodes, and the configured list replaces the guess (the ``nvidia.com/gpu``
    node is then closed to requests unless listed too)."""
    sku = ("sku", "gpu", "NoSchedule")
    nodes = [Node(f"aks-gpu-{i}", {G: 4}, "Tesla-V100", taints=(sku,)) for i in range(3)]
    assert default_requests(nodes) == []
    configured = (parse_toleration("sku=gpu:NoSchedule"),)
    reqs = default_requests(nodes, tolerations=configured)
    assert {(q.product, q.units) for q in reqs} == {("Tesla-V100", u) for u in (1, 2, 4)}
    r = replay(nodes, [], [], NOW, requests=reqs, request_tolerations=configured, **EXACT)
    assert all(p.status == PREDICTED and p.starts[1] == NOW for p in r.requests.values())
    assert naive_start(nodes, [], reqs[0], NOW, configured) == NOW
    gpu_tainted = [Node("g", {G: 1}, "A100", taints=(("nvidia.com/gpu", "", "NoSchedule"),))]
    assert default_requests(gpu_tainted, tolerations=configured) == []
    both = (*configured, parse_toleration("nvidia.com/gpu:NoSchedule"))
    assert len(default_requests(gpu_tainted + nodes, tolerations=both)) == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("sku=gpu:NoSchedule", Toleration("sku", "Equal", "gpu", "NoSchedule")),
        ("nvidia.com/gpu:NoSchedule", Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule")),
        ("dedicated", Toleration("dedicated", "Exists", "", "")),
        ("k=", Toleration("k", "Equal", "", "")),  # a taint without value
        (
            "example.com/pool=a.b_c-1:NoExecute",
            Toleration("example.com/pool", "Equal", "a.b_c-1", "NoExecute"),
        ),
        ("*", Toleration("", "Exists", "", "")),  # every taint
        ("*:NoSchedule", Toleration("", "Exists", "", "NoSchedule")),
        ("example.com/gen<4", Toleration("example.com/gen", "Lt", "4", "")),
        ("gen>-2:NoExecute", Toleration("gen", "Gt", "-2", "NoExecute")),
    ],
)
def test_parse_toleration(text, expected):
    assert parse_toleration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "=gpu",
        ":NoSchedule",
        "k:",
        "k:Never",
        "a b",
        "k=v=w",
        "-k",
        "k/",
        "k=" + "v" * 64,
        "k" * 401,
        "**",
        "*=v",
        "<4",
        "k<four",
        "k>04",  # not canonical
        "k<1<2",
        "k<" + "9" * 20,  # beyond int64
    ],
)
def test_parse_toleration_refuses_what_kubernetes_would(text):
    with pytest.raises(ReplayError):
        parse_toleration(text)


def test_holder_without_forecast_and_no_history_holds_past_the_horizon():
    nodes = [node("n1", 1)]
    notebook = Holder("hub", "jupyter-x", "n1", G, 1, None, NOW - 3600)
    r = replay(nodes, [notebook], [pending("p")], NOW, durations=[600.0], n_samples=10)
    pred = r.pods[("ml", "p")]
    assert pred.status == BEYOND_HORIZON and pred.starts is None and pred.started_share == 0


def test_holder_without_forecast_uses_history_conditioned_on_age():
    nodes = [node("n1", 1)]
    young = Holder("ml", "starting", "n1", G, 1, None, NOW - 100)
    r = replay(nodes, [young], [pending("p")], NOW, durations=[50.0, 400.0], n_samples=10)
    # only the 400 s run outlived 100 s: 300 s left
    assert starts(r, "p") == (300.0, 300.0, 300.0)


def test_a_holder_being_deleted_frees_its_gpus_by_its_deletion_timestamp():
    """A pod being deleted is gone by its deletion timestamp at the latest: a job
    forecast to end in 3 h, a notebook with no forecast and no history (held past the
    horizon otherwise), a job already past its timestamp (stuck terminating: now); a job
    forecast to end before its timestamp frees at its end."""
    nodes = [node("n1", 1), node("n2", 1), node("n3", 1), node("n4", 1)]
    cancelled = Holder(
        "ml", "cancelled", "n1", G, 1, (NOW + 3 * 3600,) * 3, NOW - 900, False, NOW + 60
    )
    notebook = Holder("hub", "jupyter-x", "n2", G, 1, None, NOW - 3600, False, NOW + 30)
    stuck = Holder("ml", "stuck", "n3", G, 1, (NOW + 3600,) * 3, NOW - 900, False, NOW - 600)
    early = Holder("ml", "early", "n4", G, 1, (NOW + 20,) * 3, NOW - 900, False, NOW + 3600)
    for holder, at in ((cancelled, 60.0), (notebook, 30.0), (stuck, 0.0), (early, 20.0)):
        others = [n for n in nodes if n.name == holder.node]
        r = replay(others, [holder], [pending("p")], NOW, durations=[], n_samples=5)
        assert starts(r, "p") == (at, at, at), holder.pod
        assert naive_start(others, [holder], pending("p"), NOW) == NOW + at


def test_intervals_come_from_the_holders_intervals():
    nodes = [node("n1", 1)]
    r = replay(
        nodes,
        [job("a", "n1", 1000, spread=400)],
        [pending("p")],
        NOW,
        durations=[500.0],
        n_samples=2000,
        random_state=1,
    )
    p10, p50, p90 = starts(r, "p")
    assert p10 == pytest.approx(600, abs=40)
    assert p50 == pytest.approx(1000, abs=40)
    assert p90 == pytest.approx(1400, abs=40)


def test_workers_sharing_their_runs_forecast_end_together():
    """The 8 workers of one distributed job share rank 0's forecast (``holder_ends``
    lends it) and end when the run does: one end is drawn for the run, not one per
    worker. Drawn apart, a pod waiting for all 8 GPUs waited for the latest of 8 draws:
    P10/P50/P90 +2.65/+3.06/+3.22 h for a run forecast to end at +1/+2/+3 h. Two runs of
    one owner with other forecasts (a sweep's) still end apart."""
    hour = 3600.0
    ends = (NOW + hour, NOW + 2 * hour, NOW + 3 * hour)
    workers = [
        Holder("ml", f"w-{i}", "n1", G, 1, ends, NOW - 600, owner=("Job", "train"))
        for i in range(8)
    ]
    r = replay([node("n1", 8)], workers, [pending("big", 8)], NOW, n_samples=2000)
    p10, p50, p90 = starts(r, "big")
    assert p10 == pytest.approx(hour, rel=0.05)
    assert p50 == pytest.approx(2 * hour, rel=0.05)
    assert p90 == pytest.approx(3 * hour, rel=0.05)
    # a sweep's two pods under one Job, each with its own forecast: the first GPU to
    # free is the earlier of two draws, before the P50 of either
    other = (NOW + hour + 1, NOW + 2 * hour + 1, NOW + 3 * hour + 1)
    sweep = [
        dataclasses.replace(workers[0], ends=ends),
        dataclasses.replace(workers[1], ends=other),
    ]
    r = replay([node("n1", 2)], sweep, [pending("p")], NOW, n_samples=2000)
    assert starts(r, "p")[1] < 1.9 * hour


def test_workers_past_their_runs_whole_forecast_end_together():
    """Workers of one run past its whole forecast end at one draw from the history of
    finished runs (conditioned on the run's age), as they do inside the forecast: a pod
    waiting for all 8 GPUs starts as behind one 8-GPU holder of that age, not at the
    latest of 8 draws (+9,200 s at P50 here, against +5,200 s)."""
    ends = (NOW - 3000, NOW - 2000, NOW - 1000)  # the whole forecast is past
    durations = [4000.0 + 100.0 * i for i in range(1, 101)]  # 4,100 .. 14,000 s
    owner = ("Job", "train")
    workers = [Holder("ml", f"w-{i}", "n1", G, 1, ends, NOW - 4000, owner=owner) for i in range(8)]
    one = [Holder("ml", "w", "n1", G, 8, ends, NOW - 4000)]
    got = replay([node("n1", 8)], workers, [pending("big", 8)], NOW, durations, n_samples=2000)
    alone = replay([node("n1", 8)], one, [pending("big", 8)], NOW, durations, n_samples=2000)
    assert starts(got, "big") == starts(alone, "big")
    assert starts(alone, "big")[1] == pytest.approx(5000, rel=0.1)


def test_time_sliced_replicas_are_units():
    # one GPU with 3 replicas: allocatable 3; two pods hold one replica each
    nodes = [node("n1", 3)]
    holders = [job("a", "n1", 100), job("b", "n1", 200)]
    q = [pending("p1", created=1), pending("p2", created=2)]
    r = replay(nodes, holders, q, NOW, **EXACT)
    assert starts(r, "p1")[1] == 0.0
    assert starts(r, "p2")[1] == 100.0


def test_a_multi_gpu_pod_takes_replicas_unless_the_plugin_refuses_more_than_one():
    """The NVIDIA device plugin hands a pod as many time-sliced replicas as it asks
    (``failRequestsGreaterThanOne`` is off by default): a 2-unit pod starts on a
    time-sliced node as a 1-unit pod does. With that setting on, the plugin refuses it,
    so it fits only whole GPUs: ``never_fits`` here, and no request for 2 is published.
    Before, the replay always assumed the setting on."""
    nodes = [Node("ts", {G: 8}, "T4", {G: 8})]  # 2 GPUs x 4 replicas
    holders = [
        Holder("ml", f"h{i}", "ts", G, 1, (NOW + 100,) * 3, NOW - 100, True) for i in range(7)
    ]
    q = [pending("two", units=2)]
    r = replay(nodes, holders, q, NOW, requests=default_requests(nodes), **EXACT)
    assert starts(r, "two")[1] == 100.0  # the second replica frees at 100 s
    assert {(k.units, v.starts[1] - NOW) for k, v in r.requests.items()} == {
        (1, 0.0),
        (2, 100.0),  # behind "two", beside it on the 6 replicas left
        (4, 100.0),
        (8, 600.0),  # once "two" has run its 500 s
    }
    reqs = default_requests(nodes, one_replica_per_pod=True)
    assert [k.units for k in reqs] == [1]
    r = replay(nodes, holders, q, NOW, requests=reqs, one_replica_per_pod=True, **EXACT)
    assert r.pods[("ml", "two")].status == NEVER_FITS


def test_the_plugins_one_replica_setting_holds_each_container_not_the_pod():
    """``failRequestsGreaterThanOne`` is checked per container (the device plugin's
    ``Allocate`` gets one ``ContainerRequest`` per container): a pod of two containers
    asking 1 each takes two replicas and starts as a 2-unit pod does without the
    setting, beside a pod whose one container asks 2, which fits only whole GPUs (none
    here). Its largest container not read (0): the pod's units, as a pod of one
    container."""
    nodes = [Node("ts", {G: 8}, "T4", {G: 8})]
    holders = [
        Holder("ml", f"h{i}", "ts", G, 1, (NOW + 100,) * 3, NOW - 100, True) for i in range(7)
    ]
    q = [
        pending("two-of-one", units=2, largest_container_units=1),
        pending("one-of-two", units=2, created=1, largest_container_units=2),
        pending("unknown", units=2, created=2),
    ]
    r = replay(nodes, holders, q, NOW, one_replica_per_pod=True, **EXACT)
    assert starts(r, "two-of-one")[1] == 100.0
    assert r.pods[("ml", "one-of-two")].status == NEVER_FITS
    assert r.pods[("ml", "unknown")].status == NEVER_FITS
    assert nodes_fitting_now(nodes, [], q[0], NOW, one_replica_per_pod=True) == ("ts",)
    assert nodes_fitting_now(nodes, [], q[1], NOW, one_replica_per_pod=True) == ()


def test_requests_made_now_queue_behind_pending_pods_and_take_nothing():
    nodes = [node("n1", 2, "A100"), node("n2", 1, "T4")]
    holders = [job("a", "n1", 100, units=2), job("b", "n2", 1000)]
    q = [pending("p", units=1)]
    reqs = default_requests(nodes)
    assert {(r.product, r.units) for r in reqs} == {("A100", 1), ("A100", 2), ("T4", 1)}
    r = replay(nodes, holders, q, NOW, requests=reqs, **EXACT)
    assert starts(r, "p")[1] == 100.0
    by = {(k.product, k.units): v for k, v in r.requests.items()}
    assert by[("A100", 1)].starts[1] - NOW == 100.0  # the second freed GPU
    assert by[("A100", 2)].starts[1] - NOW == 600.0  # after p's 500 s
    assert by[("T4", 1)].starts[1] - NOW == 1000.0


def test_request_does_not_delay_pending_pods():
    nodes = [node("n1", 1)]
    q = [pending("p")]
    with_req = replay(
        nodes, [job("a", "n1", 100)], q, NOW, requests=[Request("A100", G, 1)], **EXACT
    )
    without = replay(nodes, [job("a", "n1", 100)], q, NOW, **EXACT)
    assert with_req.pods == without.pods


def test_quantile_draw_interpolates_and_extends():
    q = (10.0, 20.0, 40.0)
    assert quantile_draw(q, 0.1) == pytest.approx(10)
    assert quantile_draw(q, 0.5) == 20
    assert quantile_draw(q, 0.9) == pytest.approx(40)
    assert quantile_draw(q, 0.7) == pytest.approx(30)
    assert quantile_draw(q, 1.0) == pytest.approx(45)


def test_quantile_cdf_inverts_quantile_draw():
    """The CDF ``end_after`` conditions on is the one ``quantile_draw`` draws from: linear
    between the quantiles, and 0 or 1 past the ends of its support (P10 - 1.25 (P50 -
    P10), P90 + 1.25 (P90 - P50)); a forecast of no spread is all at its P50."""
    q = (10.0, 20.0, 40.0)
    for u in (0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0):
        assert quantile_cdf(q, quantile_draw(q, u)) == pytest.approx(u)
    assert quantile_cdf(q, 7.4) == 0.0 and quantile_cdf(q, 45.1) == 1.0
    assert quantile_cdf((20.0, 20.0, 20.0), 19.9) == 0.0
    assert quantile_cdf((20.0, 20.0, 20.0), 20.0) == 1.0


def test_a_running_holders_end_is_drawn_after_now():
    """A holder past its forecast P10 or P50 still runs: its end is drawn from the part of
    the forecast after now (u in [F(now), 1]), never before now. Past its whole forecast
    there is no such part (None: the caller draws from the history)."""
    q = (NOW - 300, NOW + 100, NOW + 500)  # F(now) = 0.4
    assert end_after(q, NOW, 0.0) == pytest.approx(NOW)
    assert end_after(q, NOW, 0.5) == pytest.approx(quantile_draw(q, 0.7))  # NOW + 300
    assert end_after(q, NOW, 0.999) == pytest.approx(quantile_draw(q, 0.9994))
    # not yet at its support: the forecast as it is
    assert end_after(q, NOW - 900, 0.25) == pytest.approx(quantile_draw(q, 0.25))
    overdue = (NOW - 900, NOW - 600, NOW - 300)
    assert end_after(overdue, NOW, 0.5) is None
    assert end_after((NOW - 1.0,) * 3, NOW, 0.5) is None


def test_a_pod_behind_a_holder_past_its_p50_is_not_predicted_to_start_now():
    """The job ahead is past its forecast P10 and P50 (overrunning, or a forecast of an
    earlier cycle): it still holds the GPU, so the pod behind it starts when a draw after
    now ends it, never "now". Drawn from the whole forecast, every draw before now was a
    start now: 70 % of the samples here, P10 and P50 of the pod's start now."""
    q = (NOW - 600, NOW - 200, NOW + 200)  # F(now) = 0.5 + 0.4 * 200 / 400 = 0.7
    holder = Holder("ml", "a", "n1", G, 1, q, NOW - 3600)
    r = replay([node("n1", 1)], [holder], [pending("p")], NOW, durations=[500.0], n_samples=400)
    p10, p50, p90 = starts(r, "p")
    assert p10 == pytest.approx(30, abs=15)  # quantile 0.73 of the forecast
    assert p50 == pytest.approx(150, abs=25)  # the conditional median: quantile 0.85
    assert p90 <= 300  # the end of the forecast's support
    # the naive answer takes the same conditional median, not "now"
    assert naive_start([node("n1", 1)], [holder], pending("p"), NOW) == pytest.approx(NOW + 150)


def test_a_holder_past_its_whole_forecast_is_drawn_from_the_history():
    """A job past its forecast's P90 (and past the end of its support) still holds its
    GPU: its end is drawn as a holder without a forecast, from the finished runs longer
    than its age, not "now" in every sample (which silenced GpuEtaPodPendingNoStart for
    the pod behind it for good). Older than every recorded run, it holds its GPU past
    the horizon, as such a holder does; the naive answer counts it as a holder without
    a forecast (no end known) and takes the next one."""
    overdue = Holder("ml", "a", "n1", G, 1, (NOW - 900, NOW - 600, NOW - 300), NOW - 1000)
    r = replay([node("n1", 1)], [overdue], [pending("p")], NOW, durations=[5000.0], n_samples=5)
    assert starts(r, "p") == (4000.0, 4000.0, 4000.0)
    r = replay([node("n1", 1)], [overdue], [pending("p")], NOW, durations=[500.0], n_samples=5)
    assert r.pods[("ml", "p")].status == BEYOND_HORIZON
    assert naive_start([node("n1", 1)], [overdue], pending("p"), NOW) == math.inf
    nodes = [node("n1", 1), node("n2", 1)]
    holders = [overdue, job("b", "n2", 700)]
    assert naive_start(nodes, holders, pending("p"), NOW) == NOW + 700


def test_bad_settings_are_a_clear_error():
    with pytest.raises(ReplayError, match="n_samples"):
        replay([], [], [], NOW, n_samples=0)
    with pytest.raises(ReplayError, match="horizon"):
        replay([], [], [], NOW, horizon_seconds=0)


def test_unknown_node_and_empty_queue():
    r = replay([node("n1", 1)], [job("x", "gone", 10)], [], NOW, **EXACT)
    assert r.pods == {} and r.requests == {}
    assert naive_start([node("n1", 1)], [], pending("p"), NOW) == NOW
    assert math.isinf(
        naive_start([node("n1", 1)], [Holder("a", "b", "n1", G, 1)], pending("p"), NOW)
    )


def test_calibrator_learns_the_scale_that_covers_80_percent():
    cal = StartCalibrator(min_obs=10)
    pred = StartPrediction(PREDICTED, (NOW + 50, NOW + 100, NOW + 150), 1.0)
    assert cal.scale == 1.0 and cal.widen(pred, NOW) == pred  # nothing learned yet
    # real starts 0..200 s past P50 in units of the 50 s upper half: errors 0..4
    for k in range(100):
        cal.observe(pred.starts, NOW + 100 + 2 * k)
    assert cal.n_obs == 100
    assert cal.scale == pytest.approx(0.8 * 99 * 2 / 50, rel=0.01)  # 80th percentile
    wide = cal.widen(pred, NOW)
    assert wide.starts[1] == NOW + 100
    assert wide.starts[2] == pytest.approx(NOW + 100 + cal.scale * 50)
    assert wide.starts[0] == NOW  # never before now
    never = StartPrediction(NEVER_FITS, None, 0.0)
    assert cal.widen(never, NOW) is never
    # a blocked pod's start on other nodes is published with the same scale
    elsewhere = StartPrediction(BLOCKED_ELSEWHERE, pred.starts, 1.0)
    assert cal.widen(elsewhere, NOW) == StartPrediction(BLOCKED_ELSEWHERE, wide.starts, 1.0)


def test_calibrator_keeps_a_window_and_bounds_the_scale():
    cal = StartCalibrator(window=5, min_obs=1)
    for _ in range(10):
        cal.observe((0.0, 100.0, 101.0), 1e9)  # far off: a huge error
    assert cal.n_obs == 5 and cal.scale == 10.0
    with pytest.raises(ReplayError):
        StartCalibrator(coverage=1.0)


def test_a_pod_predicted_to_start_now_leaves_the_calibration_alone():
    """Pods the replay fits at once (P10 = P50 = P90 = now) that start 20 s later (the
    scheduler, the kubelet, KSM's scrape): no scale widens a zero half, so these are
    no observations. Before, each second of the lag counted as a half-interval and 30
    such pods drove the scale to 10, every published interval ten times wider."""
    from gpu_eta.forecaster.kube_state import ClusterQueue
    from gpu_eta.forecaster.pending import PendingSettings, StartTracker, predict

    tracker = StartTracker()
    nodes = (node("n1", 8),)
    for i in range(40):
        t = NOW + 60 * i
        queue = ClusterQueue(nodes, (), (PendingPod("ml", f"nb{i}", G, 1, t - 5),))
        result = predict(queue, {}, [3600.0], t, PendingSettings(n_samples=20))
        assert result.pods[0].prediction.starts == (t, t, t)
        tracker.update(queue, result, t)
        started = ClusterQueue(nodes, (Holder("ml", f"nb{i}", "n1", G, 1, None, t + 20),), ())
        tracker.update(started, predict(started, {}, [3600.0], t + 30, PendingSettings()), t + 30)
    assert tracker.calibrator.n_obs == 0 and tracker.calibrator.scale == 1.0
    # a half of zero on one side only: the start on the other side is observed
    cal = StartCalibrator(min_obs=1)
    cal.observe((NOW, NOW, NOW + 100), NOW + 50)
    cal.observe((NOW, NOW, NOW + 100), NOW - 5)  # before P50, where the half is zero
    assert cal.n_obs == 1 and cal.scale == pytest.approx(0.5)


def test_node_lists_select_the_nodes_the_per_node_checks_do():
    """The replay's per-key node lists (computed once per resource, product,
    tolerations and node selector) pick exactly the nodes ``_suitable`` / ``_placeable``
    and ``fits_somewhere`` pick node by node, on a mixed pool."""
    from gpu_eta.forecaster import queue_replay as qr

    mig = "nvidia_com_mig_1g_5gb"
    taints = [
        (),
        (TEAM,),
        (("nvidia.com/gpu", "", "NoSchedule"),),
        (("x", "1", "NoExecute"),),
        (("node.kubernetes.io/memory-pressure", "", "NoSchedule"),),
    ]
    nodes = []
    for i in range(60):
        units = 1 + i % 8
        # every third node time-sliced: all its units, or some, replicas of shared devices
        shared = {G: units if i % 2 else max(units - 1, 1)} if i % 3 == 0 else {}
        nodes.append(
            Node(
                f"n{i}",
                {G: units, **({mig: 7} if i % 4 == 1 else {})},
                # type not known on every third node: it may be of a type no known node offers
                ("A100", "H100", "")[i % 3],
                shared,
                schedulable=i % 5 != 0,
                taints=taints[i % 5],
                # labels not known on every seventh node: every selector passes there
                labels=None if i % 7 == 0 else {"pool": "abc"[i % 3]},
            )
        )
    selectors = ((), (("pool", "a"),), (("pool", "z"),), (("pool", "b"), ("team", "x")))
    for one_replica in (False, True):
        lists = qr._NodeLists(nodes, one_replica)
        for resource in (G, mig):
            tolerations = (
                None,
                (),
                MEMBER,
                (Toleration("", "Exists"),),
                (Toleration("x", "Gt", "0"),),
                (Toleration("node.kubernetes.io/memory-pressure", "Exists", "", "NoSchedule"),),
            )
            for tol in tolerations:
                for product, sel in itertools.product(("", "A100", "H100", "T4"), selectors):
                    suitable, open_ = lists.of(resource, product, tol, sel)
                    assert suitable == tuple(
                        k
                        for k, n in enumerate(nodes)
                        if qr._suitable(n, resource, product, tol, sel, lists.typed)
                    )
                    assert open_ == tuple(
                        k
                        for k, n in enumerate(nodes)
                        if qr._placeable(n, resource, product, tol, sel, lists.typed)
                    )
                    for units in (1, 2, 4, 8, 9):
                        assert lists.fits(suitable, resource, units) == qr.fits_somewhere(
                            nodes, resource, product, units, tol, one_replica, sel
                        )
    # a 1-unit pod fits a node whose units are all replicas; a 2-unit pod too, unless
    # the device plugin gives a pod one replica at most
    only_shared = [Node("s", {G: 4}, "A100", {G: 4})]
    for one_replica, two_fits in ((False, True), (True, False)):
        one = qr._NodeLists(only_shared, one_replica)
        assert one.fits(one.of(G, "", None)[0], G, 1)
        assert one.fits(one.of(G, "", None)[0], G, 2) == two_fits


def random_queue(seed: int) -> dict:
    """A seeded random cluster and queue for ``replay``: mixed node sizes, time-sliced
    and MIG units, GPU types, taints, closed nodes; holders with and without forecasts
    (ends shared by several, so units free at the same moments); pending pods of every
    shape with priorities, types and tolerations; requests; arrivals with and without
    tolerations and types, of priorities above, among and below the pods'; either
    placement.
    Durations come from a few values, so started pods end together too."""
    import random

    rng = random.Random(seed)
    mig = "nvidia_com_mig_1g_5gb"
    taints = [(), (TEAM,), (("nvidia.com/gpu", "", "NoSchedule"),)]
    nodes, holders = [], []
    for i in range(rng.randint(1, 25)):
        units = rng.choice((1, 2, 4, 8))
        shared = {G: rng.choice((units, max(units - 1, 1)))} if rng.random() < 0.3 else {}
        allocatable = {G: units, **({mig: 7} if rng.random() < 0.2 else {})}
        product = rng.choice(("A100", "H100"))
        closed = rng.random() < 0.1
        nodes.append(Node(f"n{i}", allocatable, product, shared, not closed, rng.choice(taints)))
        for j in range(rng.randint(0, units + 1)):
            end = NOW + rng.choice((60.0, 300.0, 900.0, rng.uniform(0, 5000)))
            ends = (end - 50, end, end + 50) if rng.random() < 0.6 else None
            res = mig if mig in allocatable and rng.random() < 0.3 else G
            shared_unit = res == G and bool(shared) and rng.random() < 0.5
            holders.append(Holder("ml", f"h{i}-{j}", f"n{i}", res, 1, ends, NOW - 100, shared_unit))
    pods = [
        PendingPod(
            "ml",
            f"p{k}",
            rng.choice((G, G, G, mig)),
            rng.choice((1, 1, 1, 2, 3, 4, 8, 9)),
            NOW - rng.choice((10.0, 20.0, rng.uniform(0, 1000))),
            rng.choice((0, 0, 100)),
            rng.choice(("", "", "A100", "H100", "T4")),
            rng.choice((None, (), MEMBER)),
        )
        for k in range(rng.randint(0, 40))
    ]
    arrivals = [
        Arrival(
            G,
            u,
            rng.uniform(0, 0.01),
            rng.choice(("", "", "A100", "H100")),
            rng.choice((None, (), MEMBER)),
            rng.choice((0, 0, 100, -100)),  # ahead of, among or behind the pods'
        )
        for u in (1, 2)
        if rng.random() < 0.5
    ]
    return {
        "nodes": nodes,
        "holders": holders,
        "pending": pods,
        "now": NOW,
        "durations": [rng.choice((100.0, 600.0, 3000.0)) for _ in range(5)],
        "requests": default_requests(nodes),
        "arrivals": arrivals,
        "max_arrivals": rng.choice((3, 50)),
        "placement": rng.choice(("spread", "pack")),
        "n_samples": 8,
        "random_state": seed,
        "one_replica_per_pod": rng.random() < 0.5,
    }


@pytest.mark.parametrize("seed", range(120))
def test_the_replay_starts_every_pod_as_trying_each_on_every_node_would(monkeypatch, seed):
    """The sweep tries only the pods that can start (one queue per shape, pods that
    waited only on the nodes whose units freed); the plain reference tries every
    waiting pod on every node it may use at every moment. Same starts, same draws."""
    from gpu_eta.forecaster import queue_replay as qr
    from tests.forecaster import replay_reference

    kwargs = random_queue(seed)
    fast = replay(**kwargs)
    for reference in (replay_reference.one_sample, replay_reference.pod_by_pod_sample):
        monkeypatch.setattr(qr, "_one_sample", reference)
        plain = replay(**kwargs)
        assert fast.pods == plain.pods
        assert fast.requests == plain.requests


@pytest.mark.parametrize("spelling", ["Tesla-T4-SHARED", "Tesla-T4-MIG-1g.5gb"])
def test_a_node_typed_from_the_model_offers_the_shared_spellings_to_typeless_nodes_too(
    spelling: str,
) -> None:
    """A node typed from the exporter's model offers the label's shared and MIG
    spellings (``product_spellings``), so a typeless node does not take a pod selecting
    one of them: it would start "now" on GPUs kube-scheduler never gives it. A node
    whose label is the plain model (GFD writes ``-SHARED`` into the label itself when
    shared) offers no such spelling: the typeless node stays the pod's only candidate."""
    from_model = Node("t4", {G: 4}, "Tesla-T4", product_from_model=True)
    r = replay(
        [from_model, node("new", 8, "")],
        [job("busy", "t4", 3600, units=4)],
        [pending("plain", product="Tesla-T4"), pending("shared", created=1.0, product=spelling)],
        NOW,
        **EXACT,
    )
    assert starts(r, "plain") == (3600.0, 3600.0, 3600.0)
    assert starts(r, "shared") == (3600.0, 3600.0, 3600.0)
    labelled = replay(
        [node("t4", 4, "Tesla-T4"), node("new", 8, "")],
        [job("busy", "t4", 3600, units=4)],
        [pending("shared", product=spelling)],
        NOW,
        **EXACT,
    )
    assert starts(labelled, "shared") == (0.0, 0.0, 0.0)


def test_node_of_unknown_type_takes_a_typed_pod_only_where_no_known_node_offers_the_type():
    """A node whose GPU type is not known (no ``nvidia.com/gpu.product`` label and no
    exporter model: a new node in its first minutes, or a pool without gpu-eta's
    exporter for good) may be of the type a pod selects only when no node of known type
    offers that type: it is then the pod's only candidate and the pod starts there
    rather than being ``never_fits``. Where a known node offers the type, the typeless
    node does not take the pod (it may be of any other type, for ever)."""
    a100 = "NVIDIA-A100-SXM4-80GB"
    # the new node is the only one that may be of the type: the pod starts there
    typeless = replay([node("n1", 8, "")], [], [pending("p", product=a100)], NOW, **EXACT)
    assert starts(typeless, "p") == (0.0, 0.0, 0.0)
    only = replay(
        [node("n1", 8, "NVIDIA-H100-80GB-HBM3"), node("n2", 8, "")],
        [],
        [pending("p", product=a100)],
        NOW,
        **EXACT,
    )
    assert starts(only, "p") == (0.0, 0.0, 0.0)
    other = replay(
        [node("n1", 8, "NVIDIA-H100-80GB-HBM3")], [], [pending("p", product=a100)], NOW, **EXACT
    )
    assert other.pods[("ml", "p")].status == NEVER_FITS
    # a known A100 node full for 100 s and a typeless node with a free GPU: the pod
    # selecting A100 waits for the A100 node; a pod selecting no type starts now
    nodes = [node("n1", 1, a100), node("n2", 2, "")]
    both = replay(
        nodes,
        [job("a", "n1", 100), job("nb", "n2", 3600)],
        [pending("p", product=a100), pending("any", created=1.0)],
        NOW,
        **EXACT,
    )
    assert starts(both, "p") == (100.0, 100.0, 100.0)
    assert starts(both, "any") == (0.0, 0.0, 0.0)
    assert naive_start(nodes, [job("a", "n1", 100)], pending("p", product=a100), NOW) == NOW + 100
    # a request made now for A100 is not predicted on the typeless node, nor a size
    # only the typeless node holds
    reqs = replay(
        nodes, [job("a", "n1", 100)], [], NOW, requests=default_requests(nodes), **EXACT
    ).requests
    assert {(q.product, q.units): p.starts for q, p in reqs.items()} == {
        (a100, 1): (NOW + 100, NOW + 100, NOW + 100)
    }


def test_the_naive_answer_fits_now_by_the_replays_pools():
    """A node of one whole GPU and two time-sliced replicas, one replica held: two units
    free, yet a 2-unit pod takes its units from one pool (whole devices, or replicas), so
    it does not fit now, for the replay nor for the naive answer; a 1-unit pod does."""
    n1 = Node("n1", {G: 3}, "A100", {G: 2})
    held = Holder("ml", "a", "n1", G, 1, (NOW + 100,) * 3, NOW - 100, shared=True)
    two, one = pending("two", units=2), pending("one", created=1)
    r = replay([n1], [held], [two, one], NOW, **EXACT)
    assert starts(r, "two")[1] == 100.0 and starts(r, "one")[1] == 0.0
    assert naive_start([n1], [held], two, NOW) == NOW + 100
    assert naive_start([n1], [held], one, NOW) == NOW
    assert nodes_fitting_now([n1], [held], two, NOW) == ()
    assert nodes_fitting_now([n1], [held], one, NOW) == ("n1",)


def test_gpus_free_now_are_read_not_drawn():
    """A pod past its forecast end still holds its GPU now, for ``nodes_fitting_now`` and
    for every sample of the replay (its end is drawn after now, ``end_after``: here from
    the history, at +400 s). A pod past its deletion timestamp has freed its GPU
    for both (every sample frees it at now); one being deleted later holds it until
    then."""
    nodes = [node("n1", 1), node("n2", 1)]
    overdue = job("a", "n1", -60)
    terminating = Holder("ml", "b", "n2", G, 1, None, NOW - 900, deletion_timestamp=NOW + 10)
    r = replay(nodes, [overdue, terminating], [pending("p")], NOW, **EXACT)
    assert starts(r, "p") == (10.0, 10.0, 10.0)
    assert nodes_fitting_now(nodes, [overdue, terminating], pending("p"), NOW) == ()
    assert nodes_fitting_now(nodes, [overdue], pending("p"), NOW) == ("n2",)
    stuck = dataclasses.replace(terminating, deletion_timestamp=NOW - 10)
    assert nodes_fitting_now(nodes, [overdue, stuck], pending("p"), NOW) == ("n2",)


def test_the_naive_answer_frees_a_notebook_by_its_owner_not_its_run():
    """A notebook server (``ends_with_run`` False: a StatefulSet's pod) keeps its GPU
    when its training run ends, as the replay holds it: the naive answer does not free it
    at its run's forecast end, but at its deletion timestamp when it is being deleted,
    and otherwise takes the earliest end of a pod that ends with its run."""
    nodes = [node("n1", 1), node("n2", 1)]
    notebook = Holder("hub", "jupyter-a", "n1", G, 1, (NOW + 100,) * 3, NOW - 900)
    notebook = dataclasses.replace(notebook, ends_with_run=False)
    holders = [notebook, job("train", "n2", 500)]
    assert naive_start(nodes, holders, pending("p"), NOW) == NOW + 500
    r = replay(nodes, holders, [pending("p")], NOW, durations=[5000.0], n_samples=5)
    assert starts(r, "p")[1] == 500.0
    deleted = dataclasses.replace(notebook, deletion_timestamp=NOW + 50)
    assert naive_start(nodes, [deleted, holders[1]], pending("p"), NOW) == NOW + 50
    # a pod whose ownership is not known (None) ends with its run, as in the replay
    unknown = dataclasses.replace(notebook, ends_with_run=None)
    assert naive_start(nodes, [unknown, holders[1]], pending("p"), NOW) == NOW + 100


def test_a_pod_frees_its_gpus_a_release_lag_after_its_run_ends():
    """A finished run's pod holds its GPUs until the pod is gone (final writes, container
    exit, the kubelet's status, the scheduler's cache): ``release_seconds``, the lags
    observed on finished pods, come after every run-ending holder's forecast end and
    after every pod started in the replay. A notebook server frees nothing at its run's
    end, so no lag is added to its end; no lag observed, none is added."""
    nodes = [node("n1", 1)]
    q = [pending("first", created=10), pending("second", created=20)]
    lagged = replay(nodes, [job("a", "n1", 100)], q, NOW, release_seconds=[5.0], **EXACT)
    assert starts(lagged, "first") == (105.0, 105.0, 105.0)
    assert starts(lagged, "second") == (610.0, 610.0, 610.0)  # 105 + 500 s run + 5 s
    plain = replay(nodes, [job("a", "n1", 100)], q, NOW, **EXACT)
    assert starts(plain, "first")[1] == 100.0 and starts(plain, "second")[1] == 600.0
    notebook = dataclasses.replace(job("nb", "n1", 100), ends_with_run=False)
    kept = replay(nodes, [notebook], q[:1], NOW, release_seconds=[5.0], **EXACT)
    assert starts(kept, "first")[1] == 400.0  # its history draw: 500 s, 100 s of it run


def test_release_lags_are_drawn_from_those_observed():
    nodes = [node("n1", 1)]
    r = replay(
        nodes,
        [job("a", "n1", 100)],
        [pending("p")],
        NOW,
        durations=[500.0],
        release_seconds=[2.0, 40.0],
        n_samples=200,
    )
    p10, _, p90 = starts(r, "p")
    assert (p10, p90) == (102.0, 140.0)


def in_its_lag(lingered: float) -> Holder:
    """``a`` on n1: its run completed ``lingered`` seconds ago, its pod still holds the
    GPU (no forecast: its run is over); it started 300 s ago."""
    return Holder("ml", "a", "n1", G, 1, None, NOW - 300, run_ended=NOW - lingered)


def behind(holder: Holder, **kw) -> tuple[float, float, float]:
    """The start of a 1-GPU pod waiting for ``holder``'s GPU on n1 (runs of 3,000 s)."""
    return starts(replay([node("n1", 1)], [holder], [pending("p")], NOW, [3000.0], **kw), "p")


def test_a_pod_in_its_release_lag_frees_a_lag_longer_than_it_has_lingered():
    """Its run ended 10 s ago: it frees at its run's end plus a lag drawn from those
    observed longer than 10 s (20 or 40 s: at NOW+10 or NOW+30), not after a whole run
    drawn from the history (3,000 s runs: 2,700 s from now) plus a lag."""
    p10, p50, p90 = behind(in_its_lag(10.0), release_seconds=[2.0, 5.0, 20.0, 40.0], n_samples=200)
    assert (p10, p90) == (10.0, 30.0)
    assert p50 in (10.0, 30.0)


def test_a_pod_lingering_past_every_lag_observed_frees_about_as_long_again():
    """Its run ended 60 s ago and every lag observed is shorter (5 s), or none was: the
    rest of its lag is ``linger_rest``'s (as long again as it has lingered at the
    median), never a whole run; a pod being deleted goes by its deletion timestamp."""
    for lags in ([5.0], []):
        p10, p50, p90 = behind(in_its_lag(60.0), release_seconds=lags, n_samples=400)
        assert 0 < p10 < p50 < p90 < 3600
        assert p50 == pytest.approx(60.0, rel=0.25)
    deleted = dataclasses.replace(in_its_lag(60.0), deletion_timestamp=NOW + 5)
    assert behind(deleted, n_samples=50)[2] <= 5.0


def test_a_notebook_servers_run_end_frees_nothing():
    """A pod that outlives its run (a notebook server) is not in a release lag when its
    run ends: its end is drawn as a holder's without a forecast, whatever ``run_ended``."""
    server = dataclasses.replace(in_its_lag(10.0), ends_with_run=False)
    assert behind(server, n_samples=5) == (2700.0, 2700.0, 2700.0)


def test_the_naive_answer_takes_a_pod_in_its_release_lag_as_free_when_its_run_ended():
    """As for a job at its forecast end, the naive answer adds no lag: a pod whose run
    has ended frees its GPU now."""
    assert naive_start([node("n1", 1)], [in_its_lag(10.0)], pending("p"), NOW) == NOW
