"""Pods that fit free GPUs and stay Pending: blocked by something other than GPUs.

The reviewer's case: a 2-GPU node with one GPU free; ``stuck`` (created 3 h ago) waits
for an unbound PVC, CPU or a scheduling gate, which no replay models, and ``next``
(10 min ago) really takes the free GPU at once. Predicted "now" cycle after cycle,
``stuck`` hid the alert on it and pushed ``next`` an hour later."""

from __future__ import annotations

import dataclasses
import json

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import (
    BLOCKED_GRACE_SECONDS,
    PendingSet,
    PendingSettings,
    StartTracker,
    predict_queue,
)
from gpu_eta.forecaster.pending_state import parse_predictions, predictions_json
from gpu_eta.forecaster.publish import pending_families
from gpu_eta.forecaster.queue_replay import (
    BLOCKED_ELSEWHERE,
    GATED,
    PREDICTED,
    STATUSES,
    Holder,
    Node,
    PendingPod,
)

G = "nvidia_com_gpu"
NOW = 1_700_000_000.0
ENDS = {
    ("ml", "job"): (NOW + 6000, NOW + 7200, NOW + 8400),
    ("ml", "other"): (NOW + 50, NOW + 100, NOW + 150),
}
SETTINGS = PendingSettings(n_samples=20)
CYCLE = 60.0  # the forecaster's default --cycle.interval


def queue(*holders: Holder) -> ClusterQueue:
    return ClusterQueue(
        (Node("n1", {G: 2}, "A100"),),
        (Holder("ml", "job", "n1", G, 1, None, NOW - 600, uid="uj"), *holders),
        (
            PendingPod("ml", "stuck", G, 1, NOW - 3 * 3600, uid="us"),
            PendingPod("ml", "next", G, 1, NOW - 600, uid="un"),
        ),
    )


def cycle(tracker: StartTracker, q: ClusterQueue, now: float) -> dict[str, object]:
    """One forecaster cycle as ``cycle.Cycle`` runs it: pod → its prediction."""
    result = tracker.update(
        q, predict_queue(q, ENDS, [3600.0], now, SETTINGS, tracker.blocked(q, now)), now
    )
    return {p.pod: p.prediction for p in result.pods}


def offsets(pred, now: float) -> list[float]:
    assert pred.status == PREDICTED, pred
    return [t - now for t in pred.starts]


def test_a_pod_fitting_free_gpus_and_still_pending_is_blocked_elsewhere():
    tracker = StartTracker()
    q = queue()
    t = NOW
    first = cycle(tracker, q, t)
    # at first it is taken to start now (kube-scheduler binds a fitting pod in seconds)
    assert offsets(first["stuck"], t) == [0.0, 0.0, 0.0]
    assert offsets(first["next"], t)[1] == 3600.0
    while t + CYCLE - NOW < BLOCKED_GRACE_SECONDS:
        t += CYCLE
        assert cycle(tracker, q, t)["stuck"].status == PREDICTED
    # still Pending, unbound, a grace after it first fit: blocked by something else
    t += CYCLE
    assert t - NOW == BLOCKED_GRACE_SECONDS
    later = cycle(tracker, q, t)
    assert later["stuck"].status == BLOCKED_ELSEWHERE
    assert later["stuck"].starts is None
    # left out of the replay: the pod behind it takes the free GPU now
    assert offsets(later["next"], t) == [0.0, 0.0, 0.0]
    # published without a start time, so GpuEtaPodPendingNoStart is not silenced
    families = {f.name: f for f in pending_families(PendingSet(tuple(_pods(tracker, q, t))))}
    starts = families["gpu_eta_pod_predicted_start_timestamp_seconds"].samples
    assert {s.labels["pod"] for s in starts} == {"next"}
    info = families["gpu_eta_pod_start_prediction_info"].samples
    assert {(s.labels["pod"], s.labels["status"]) for s in info} == {
        ("stuck", BLOCKED_ELSEWHERE),
        ("next", PREDICTED),
    }
    assert BLOCKED_ELSEWHERE in STATUSES


def _pods(tracker: StartTracker, q: ClusterQueue, now: float):
    return tracker.update(
        q, predict_queue(q, ENDS, [3600.0], now, SETTINGS, tracker.blocked(q, now)), now
    ).pods


def test_a_blocked_pod_is_not_scored_when_it_starts():
    """The predictions of a pod found blocked elsewhere are dropped: ``stuck`` was first
    predicted to take the GPU ``other`` frees at about NOW + 100 s; it did not, for a
    reason no replay models, and started hours later. Scored, that prediction would
    count the hours as the queue's miss and widen every interval published after."""
    tracker = StartTracker()
    other = Holder("ml", "other", "n1", G, 1, None, NOW - 600, uid="uo")
    first = cycle(tracker, queue(other), NOW)
    p10, p50, p90 = offsets(first["stuck"], NOW)
    assert 0 < p10 < p50 < p90 < 200
    q = queue()  # ``other`` ended: its GPU is free
    t = NOW + CYCLE
    while cycle(tracker, q, t)["stuck"].status != BLOCKED_ELSEWHERE:
        assert t - NOW <= CYCLE + BLOCKED_GRACE_SECONDS
        t += CYCLE
    started = t + 3 * 3600
    ran = ClusterQueue(
        q.nodes,
        (*q.holders, Holder("ml", "stuck", "n1", G, 1, None, started, uid="us")),
        (),
    )
    cycle(tracker, ran, started + CYCLE)
    assert tracker.calibrator.n_obs == 0


def _blocked_then_next_bound(tracker: StartTracker) -> tuple[ClusterQueue, float]:
    """Cycles until ``stuck`` is ``blocked_elsewhere``, then ``next`` bound on n1's free
    GPU: the queue then, and the time of the next cycle."""
    q = queue()
    t = NOW
    while cycle(tracker, q, t)["stuck"].status != BLOCKED_ELSEWHERE:
        assert t - NOW <= BLOCKED_GRACE_SECONDS
        t += CYCLE
    t += CYCLE
    full = dataclasses.replace(
        q,
        holders=(*q.holders, Holder("ml", "next", "n1", G, 1, None, t - 10, uid="un")),
        pending=(q.pending[0], PendingPod("ml", "later", G, 1, t - 5, uid="ul")),
    )
    return full, t


def test_a_blocked_pod_stays_off_its_node_once_the_free_gpu_is_taken():
    """Once the free GPU is taken (``next`` bound on it), ``stuck`` fits no free GPU, but
    what kept it off n1 (n1's CPU or memory, say) has not moved: no pod left n1. It stays
    kept off n1, ``blocked_elsewhere`` without a start (no other node), and ``later``
    takes the first GPU to free. Kept off only while it fit free GPUs, it was replayed on
    n1 again ("starts in ~20 min", then "now", then blocked again, every 5 minutes), the
    alert never fired on it and ``later`` was predicted an hour late."""
    tracker = StartTracker()
    full, t = _blocked_then_next_bound(tracker)
    next_started = full.holders[-1].started
    for _ in range(3):
        got = cycle(tracker, full, t)
        assert got["stuck"].status == BLOCKED_ELSEWHERE and got["stuck"].starts is None
        p10, _, p90 = offsets(got["later"], t)
        # the GPU that frees first (``next``'s, the history's hour after it started),
        # not ``job``'s (ENDS: from +6000 s), which is left if ``stuck`` takes the first
        assert p10 == p90 == next_started + 3600 - t
        t += CYCLE
    # kept across a restart (a ``once`` CronJob is a new process every cycle)
    rows, skipped = parse_predictions(predictions_json(tracker.waiting()))
    fresh = StartTracker()
    fresh.restore(rows)
    assert skipped == 0 and fresh.blocked(full, t) == tracker.blocked(full, t) == {
        ("ml", "stuck"): frozenset({"n1"})
    }
    assert cycle(fresh, full, t)["stuck"].status == BLOCKED_ELSEWHERE


def test_a_blocked_pod_is_given_the_grace_again_when_a_pod_leaves_its_node():
    """A pod leaving n1 (``job`` ended) may free the CPU or memory ``stuck`` waited for:
    it is kept off n1 no more, fits the GPU ``job`` freed, is predicted to start now, and
    is given the grace again."""
    tracker = StartTracker()
    full, t = _blocked_then_next_bound(tracker)
    cycle(tracker, full, t)
    t += CYCLE
    ended = dataclasses.replace(full, holders=full.holders[1:])
    assert tracker.blocked(ended, t) == {}
    again = cycle(tracker, ended, t)["stuck"]
    assert again.status == PREDICTED and offsets(again, t) == [0.0, 0.0, 0.0]
    assert tracker.blocked(ended, t + BLOCKED_GRACE_SECONDS - 1) == {}
    assert tracker.blocked(ended, t + BLOCKED_GRACE_SECONDS) == {("ml", "stuck"): frozenset()}


def test_fitting_since_is_saved_with_the_predictions():
    """A ``once`` CronJob is a new process every cycle: when a pod first fit now is
    saved with its predictions, or no such run would ever see the grace pass."""
    tracker = StartTracker()
    q = queue()
    cycle(tracker, q, NOW)
    rows, skipped = parse_predictions(predictions_json(tracker.waiting()))
    assert skipped == 0
    fresh = StartTracker()
    fresh.restore(rows)
    assert set(fresh.blocked(q, NOW + BLOCKED_GRACE_SECONDS)) == {("ml", "stuck")}
    assert fresh.blocked(q, NOW + BLOCKED_GRACE_SECONDS - 1) == {}
    # a row saved before (five fields) still reads: not fitting since any time
    old = [
        [ns, pod, uid, seen, [list(s) for s in starts]] for ns, pod, uid, seen, starts, *_ in rows
    ]
    text = json.dumps({"version": 1, "pods": old})
    back, skipped = parse_predictions(text)
    assert skipped == 0 and all(r[5] is None for r in back)


def test_whether_a_blocked_pod_fits_free_gpus_is_read_not_drawn():
    """A GPU a running pod holds is held now, whatever its run's forecast says: ``late``'s
    run was forecast to end between 5 min ago and 7 min from now (P10 overdue). Blocked
    ``stuck`` fits no free GPU, so it waits for GPUs and is replayed, for every
    ``random_state``. Decided by one draw of the replay, it was ``blocked_elsewhere`` in
    the draws ending ``late`` before now (about 43 % of them)."""
    late = Holder("ml", "late", "n1", G, 1, None, NOW - 3600, uid="ul")
    q = ClusterQueue(
        (Node("n1", {G: 1}, "A100"),),
        (late,),
        (PendingPod("ml", "stuck", G, 1, NOW - 3 * 3600, uid="us"),),
    )
    ends = {("ml", "late"): (NOW - 300, NOW + 60, NOW + 420)}
    statuses = {
        predict_queue(q, ends, [3600.0], NOW, SETTINGS, {("ml", "stuck")}, seed)
        .pods[0]
        .prediction.status
        for seed in range(30)
    }
    assert statuses == {PREDICTED}


def test_a_blocked_pod_is_kept_off_the_nodes_it_fits_and_starts_elsewhere():
    """``stuck`` has fit n1's free GPU for the grace without being bound there (n1's CPU
    or memory is short, say). It is kept off n1, not out of the queue: first in it, it
    takes n2's GPU when ``other`` frees it at +100 s, published ``blocked_elsewhere``
    with that start; ``a`` takes n1's free GPU now, and ``b`` waits for the next GPU to
    free (``a``'s, after the history's 3600 s), not n2's at +100 s as if ``stuck`` were
    gone."""
    q = ClusterQueue(
        (Node("n1", {G: 2}, "A100"), Node("n2", {G: 1}, "A100")),
        (
            Holder("ml", "job", "n1", G, 1, None, NOW - 600, uid="uj"),
            Holder("ml", "other", "n2", G, 1, None, NOW - 600, uid="uo"),
        ),
        (
            PendingPod("ml", "stuck", G, 1, NOW - 3 * 3600, uid="us"),
            PendingPod("ml", "a", G, 1, NOW - 1200, uid="ua"),
            PendingPod("ml", "b", G, 1, NOW - 600, uid="ub"),
        ),
    )
    ends = {("ml", "job"): (NOW + 7200,) * 3, ("ml", "other"): (NOW + 100,) * 3}
    result = predict_queue(q, ends, [3600.0], NOW, SETTINGS, {("ml", "stuck")})
    got = {p.pod: p.prediction for p in result.pods}
    assert got["stuck"].status == BLOCKED_ELSEWHERE
    assert [t - NOW for t in got["stuck"].starts] == [100.0, 100.0, 100.0]
    assert offsets(got["a"], NOW) == [0.0, 0.0, 0.0]
    assert offsets(got["b"], NOW) == [3600.0, 3600.0, 3600.0]
    # its start elsewhere is published beside its status
    families = {f.name: f for f in pending_families(result)}
    starts = families["gpu_eta_pod_predicted_start_timestamp_seconds"].samples
    assert {s.value for s in starts if s.labels["pod"] == "stuck"} == {NOW + 100}
    # the tracker keeps it blocked, and keeps none of its predictions to score
    tracker = StartTracker()
    tracker.restore([("ml", "stuck", "us", NOW - CYCLE, [], NOW - BLOCKED_GRACE_SECONDS, {}, {})])
    tracker.update(q, result, NOW)
    assert tracker.blocked(q, NOW + CYCLE) == {("ml", "stuck"): frozenset({"n1"})}
    assert [w[4] for w in tracker.waiting() if w[1] == "stuck"] == [[]]


def test_a_pod_past_its_deletion_timestamp_has_freed_its_gpus_for_the_check_too():
    """The replay takes a pod stuck terminating past its deletion timestamp to have
    freed its GPUs (docs/pending.md, step 1): it starts ``stuck`` now in every sample.
    Whether ``stuck`` fits free GPUs is read by the same rule, or, predicted to start
    now cycle after cycle, it would never be found blocked, and would hide the alert."""
    gone = Holder("ml", "gone", "n1", G, 1, None, NOW - 3600, deletion_timestamp=NOW - 600)
    q = ClusterQueue(
        (Node("n1", {G: 1}, "A100"),),
        (gone,),
        (PendingPod("ml", "stuck", G, 1, NOW - 3 * 3600, uid="us"),),
    )
    (first,) = predict_queue(q, ENDS, [3600.0], NOW, SETTINGS).pods
    assert offsets(first.prediction, NOW) == [0.0, 0.0, 0.0]
    (later,) = predict_queue(q, ENDS, [3600.0], NOW, SETTINGS, {("ml", "stuck")}).pods
    assert later.prediction.status == BLOCKED_ELSEWHERE


def test_a_gated_pod_waits_for_its_gate_not_for_gpus():
    """``stuck`` is held by a scheduling gate (Kueue's admission gate: kube-state-metrics
    shows ``kube_pod_status_reason{reason="SchedulingGated"}``), so kube-scheduler does
    not try it. It is published ``gated`` from its first cycle, without a start, and
    left out of the replay: ``next`` takes the free GPU now, as it really does. It never
    turns ``blocked_elsewhere`` (it is not predicted to start now), and none of its
    predictions is kept to be scored. Read as any pod, it was predicted to start now for
    5 minutes, then ``blocked_elsewhere``, and ``next`` was predicted an hour late
    meanwhile. Once its gate is lifted (admitted), it is predicted as any pod."""
    tracker = StartTracker()
    q = queue()
    gated = dataclasses.replace(
        q, pending=(dataclasses.replace(q.pending[0], gated=True), q.pending[1])
    )
    assert offsets(cycle(tracker, gated, NOW)["next"], NOW) == [0.0, 0.0, 0.0]
    t = NOW + CYCLE
    while t - NOW <= 2 * BLOCKED_GRACE_SECONDS:  # ("next", never bound here, is blocked)
        got = cycle(tracker, gated, t)
        assert got["stuck"].status == GATED and got["stuck"].starts is None, t - NOW
        assert ("ml", "stuck") not in tracker.blocked(gated, t)
        t += CYCLE
    assert [w[1] for w in tracker.waiting() if w[4]] == []  # nothing kept for "stuck"
    families = {f.name: f for f in pending_families(PendingSet(tuple(_pods(tracker, gated, t))))}
    starts = families["gpu_eta_pod_predicted_start_timestamp_seconds"].samples
    assert "stuck" not in {s.labels["pod"] for s in starts}
    info = families["gpu_eta_pod_start_prediction_info"].samples
    assert ("stuck", GATED) in {(s.labels["pod"], s.labels["status"]) for s in info}
    assert GATED in STATUSES
    # admitted: its gate lifted, it is the oldest pod and takes the free GPU now
    assert offsets(cycle(tracker, q, t)["stuck"], t) == [0.0, 0.0, 0.0]


def _kept_off_n1_waiting_for_n2(
    tracker: StartTracker,
) -> tuple[ClusterQueue, dict[tuple[str, str], tuple[float, float, float]]]:
    """``stuck`` fits n1's free GPU from NOW, never bound: found blocked after the grace
    and kept off n1, it waits for n2's GPU, which ``other`` holds until NOW + 1200 s.
    The queue and the job forecasts."""
    nodes = (Node("n1", {G: 2}, "A100"), Node("n2", {G: 1}, "A100"))
    job = Holder("ml", "job", "n1", G, 1, None, NOW - 600, uid="uj")
    other = Holder("ml", "other", "n2", G, 1, None, NOW - 600, uid="uo")
    stuck = PendingPod("ml", "stuck", G, 1, NOW - 3 * 3600, uid="us")
    ends = {("ml", "job"): (NOW + 7200,) * 3, ("ml", "other"): (NOW + 1200,) * 3}
    q = ClusterQueue(nodes, (job, other), (stuck,))
    t = NOW
    while t <= NOW + BLOCKED_GRACE_SECONDS:
        tracker.update(q, predict_queue(q, ends, [3600.0], t, SETTINGS, tracker.blocked(q, t)), t)
        t += CYCLE
    assert tracker.blocked(q, t) == {("ml", "stuck"): frozenset({"n1"})}
    return q, ends


def test_a_node_a_blocked_pod_starts_to_fit_is_given_the_grace():
    """``stuck`` is kept off n1 and predicted to start on n2 when ``other`` ends there. When
    it does (n2 changed: a GPU pod left it), ``stuck`` fits n2 for the first time: n2 is
    given the grace a new pod gets, so ``stuck`` is predicted to start now, not taken off
    n2 at once (its start flipped from "at 20 min" to none at the moment it came). Still
    unbound there a grace later, it is kept off n2 too. The grace's start is saved for
    the next process (a ``once`` CronJob)."""
    tracker = StartTracker()
    q, ends = _kept_off_n1_waiting_for_n2(tracker)

    def run(queue: ClusterQueue, t: float):
        blocked = tracker.blocked(queue, t)
        result = predict_queue(queue, ends, [3600.0], t, SETTINGS, blocked)
        return {p.pod: p.prediction for p in tracker.update(queue, result, t).pods}["stuck"]

    t = NOW + 1200 - CYCLE
    before = run(q, t)
    assert before.status == BLOCKED_ELSEWHERE and [s - t for s in before.starts] == [CYCLE] * 3
    t += CYCLE
    ended = dataclasses.replace(q, holders=q.holders[:1])  # ``other`` ended: n2's GPU free
    came = t
    while t < came + BLOCKED_GRACE_SECONDS:
        got = run(ended, t)
        assert got.status == BLOCKED_ELSEWHERE and got.starts == (t, t, t), t - came
        if t == came + 2 * CYCLE:
            rows, skipped = parse_predictions(predictions_json(tracker.waiting()))
            fresh = StartTracker()
            fresh.restore(rows)
        t += CYCLE
    assert skipped == 0
    last = came + BLOCKED_GRACE_SECONDS
    assert fresh.blocked(ended, last - 1) == {("ml", "stuck"): frozenset({"n1"})}
    assert fresh.blocked(ended, last) == {("ml", "stuck"): frozenset({"n1", "n2"})}
    got = run(ended, last)
    assert got.status == BLOCKED_ELSEWHERE and got.starts is None
    assert tracker.blocked(ended, last + CYCLE) == {("ml", "stuck"): frozenset({"n1", "n2"})}


def test_a_node_that_stops_fitting_within_its_grace_starts_it_over():
    """As a pod's own grace: ``stuck`` fit n2 for two cycles, then another pod took n2's
    GPU. When n2 frees again it gets the whole grace again, from then."""
    tracker = StartTracker()
    q, ends = _kept_off_n1_waiting_for_n2(tracker)
    free = dataclasses.replace(q, holders=q.holders[:1])
    taken = dataclasses.replace(
        q, holders=(q.holders[0], Holder("ml", "b", "n2", G, 1, None, NOW + 1300, uid="ub"))
    )
    t = NOW + 1200
    for queue in (free, free, taken, free):
        tracker.update(
            queue, predict_queue(queue, ends, [3600.0], t, SETTINGS, tracker.blocked(queue, t)), t
        )
        t += CYCLE
    again = t - CYCLE
    assert tracker.blocked(free, again + BLOCKED_GRACE_SECONDS - 1) == {
        ("ml", "stuck"): frozenset({"n1"})
    }
    assert tracker.blocked(free, again + BLOCKED_GRACE_SECONDS) == {
        ("ml", "stuck"): frozenset({"n1", "n2"})
    }


def test_blocked_pods_fill_max_pods_after_the_pods_that_can_start():
    """``--pending.max-pods`` 2; the two oldest pods are blocked (kept off n1, the only
    node) and ``fresh``, behind them, fits n1's free GPU. The limit takes ``fresh``
    first and the oldest blocked pod with the room left: ``fresh`` is predicted to
    start now, the younger blocked pod is the one skipped. Counted in queue order, the
    blocked pods took the limit and ``fresh``, which can start, got no prediction."""
    q = ClusterQueue(
        (Node("n1", {G: 4}, "A100"),),
        (Holder("ml", "job", "n1", G, 1, None, NOW - 600, uid="uj"),),
        (
            PendingPod("ml", "b1", G, 1, NOW - 3 * 3600, uid="u1"),
            PendingPod("ml", "b2", G, 1, NOW - 2 * 3600, uid="u2"),
            PendingPod("ml", "fresh", G, 1, NOW - 60, uid="uf"),
        ),
    )
    capped = dataclasses.replace(SETTINGS, max_pods=2)
    blocked = {("ml", "b1"): frozenset({"n1"}), ("ml", "b2"): frozenset({"n1"})}
    result = predict_queue(q, ENDS, [3600.0], NOW, capped, blocked)
    got = {p.pod: p.prediction for p in result.pods}
    assert set(got) == {"b1", "fresh"} and result.skipped == 1
    assert offsets(got["fresh"], NOW) == [0.0, 0.0, 0.0]
    assert got["b1"].status == BLOCKED_ELSEWHERE and got["b1"].starts is None
    # no pod blocked: the limit is in queue order, as ever
    plain = predict_queue(q, ENDS, [3600.0], NOW, capped)
    assert [p.pod for p in plain.pods] == ["b1", "b2"] and plain.skipped == 1
