"""The queue replay on hand-built queues: order, whole nodes, GPU types, never-fits."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.queue_replay import (
    BEYOND_HORIZON,
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
    default_requests,
    naive_start,
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


def test_time_sliced_replicas_are_units():
    # one GPU with 3 replicas: allocatable 3; two pods hold one replica each
    nodes = [node("n1", 3)]
    holders = [job("a", "n1", 100), job("b", "n1", 200)]
    q = [pending("p1", created=1), pending("p2", created=2)]
    r = replay(nodes, holders, q, NOW, **EXACT)
    assert starts(r, "p1")[1] == 0.0
    assert starts(r, "p2")[1] == 100.0


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


def test_calibrator_keeps_a_window_and_bounds_the_scale():
    cal = StartCalibrator(window=5, min_obs=1)
    for _ in range(10):
        cal.observe((0.0, 100.0, 101.0), 1e9)  # far off: a huge error
    assert cal.n_obs == 5 and cal.scale == 10.0
    with pytest.raises(ReplayError):
        StartCalibrator(coverage=1.0)
