"""gpu_eta.forecaster.release_lags: the lags from a completed run's end to its pod's
GPUs being free, learned from the cycles' reads (pure: cycles built in the test)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_eta.forecaster.release_lags import MAX_LAGS, Ended, ReleaseLags, decode, encode

T = 1_700_000_000.0
POD = ("ml", "train-0")


def test_a_pod_holding_past_its_runs_end_gives_its_release_bracket() -> None:
    """Read holding at T (run running), at T+60 (run ended at T+30, pod still holding),
    free at T+120: its GPUs went free in (T+60, T+120], lag in (30, 90]; one bracket
    alone: its middle, 60."""
    lags = ReleaseLags()
    assert lags.observe([], {POD: True}, {POD}, T) == ()
    assert lags.observe([Ended(*POD, T + 30)], {POD: True}, set(), T + 60) == ()
    assert lags.observe([], {}, set(), T + 120) == ((30.0, 90.0),)
    assert lags.lags == (pytest.approx(60.0),)


def test_a_pod_gone_by_the_cycle_that_reads_its_run_ended() -> None:
    """Run ended at T+50, pod free by T+60 (the cycle finishing the run): (0, 10]."""
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD}, T)
    assert lags.observe([Ended(*POD, T + 50)], {}, set(), T + 60) == ((0.0, 10.0),)


def test_a_pod_not_seen_holding_gpus_around_its_runs_end_gives_nothing() -> None:
    """A CPU run's pod is never among the GPU pods: read as freed at once it would pull
    every lag toward 0. Nor does a run recorded finished only after its pod was gone
    (no read saw the pod at the previous cycle), nor the first read of a process."""
    cpu = ("ml", "cpu-run")
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD, cpu}, T)
    assert lags.observe([Ended(*cpu, T + 50)], {POD: True}, {POD}, T + 60) == ()
    lags.observe([], {}, {POD}, T + 120)  # POD's run ended at T+70, recorded late
    assert lags.observe([Ended(*POD, T + 70)], {}, set(), T + 180) == ()
    assert ReleaseLags().observe([Ended(*POD, T - 5)], {}, set(), T) == ()
    assert lags.lags == ()


def test_notebooks_new_runs_and_cancelled_runs_feed_nothing() -> None:
    nb, again = ("ml", "jupyter-ann"), ("ml", "loop")
    lags = ReleaseLags()
    lags.observe([], {nb: False, again: True}, {nb, again}, T)
    # a notebook's run ended, and a pod whose next run started in it
    lags.observe(
        [Ended(*nb, T + 10), Ended(*again, T + 10)], {nb: False, again: True}, {again}, T + 60
    )
    assert lags.observe([], {}, set(), T + 120) == ()
    assert lags.lags == () and lags.n_outliers == 0


def test_outliers_and_coarse_brackets_are_dropped_and_counted() -> None:
    lags = ReleaseLags(max_seconds=3600.0, max_bracket_seconds=600.0)
    lags.observe([], {POD: True}, {POD}, T)
    lags.observe([Ended(*POD, T + 10)], {POD: True}, set(), T + 60)
    lags.observe([], {POD: True}, set(), T + 3700)  # still holding an hour after its run
    assert lags.lags == () and lags.n_outliers == 1
    # found holding after its run, then no read for 15 minutes, then gone: too coarse
    coarse = ReleaseLags(max_bracket_seconds=600.0)
    coarse.observe([], {POD: True}, {POD}, T)
    coarse.observe([Ended(*POD, T + 10)], {POD: True}, set(), T + 60)
    assert coarse.observe([], {}, set(), T + 960) == ()
    assert coarse.n_unbracketed == 1


def test_only_the_most_recent_brackets_are_kept() -> None:
    lags = ReleaseLags([(float(i), i + 1.0) for i in range(MAX_LAGS + 50)])
    assert len(lags.brackets) == MAX_LAGS and lags.brackets[0] == (50.0, 51.0)
    assert len(lags.lags) == MAX_LAGS


def test_the_stored_brackets_round_trip_widened_and_damaged_ones_are_skipped() -> None:
    assert decode(encode([(1.25, 1.26), (0.0, 60.0)])) == ((1.2, 1.3), (0.0, 60.0))
    text = '[[0, 5], [-1, 2], [3, 3], ["x", 4], [1, null], [1e9, 2e9], [true, 2], [1], [2, 7.5]]'
    assert decode(text) == ((0.0, 5.0), (2.0, 7.5))
    for bad in (None, "", "{", '{"a": 1}', "[" + "[0, 1]," * 5_000 + "[0, 1]]"):
        assert decode(bad) == ()


def test_a_fixed_lag_read_by_coarse_cycles_is_learned_near_its_value() -> None:
    """Pods each free 5 s after their run's end, read by 30 s cycles at every phase: a
    bracket's middle says ~10 s on average (most runs end and free within one cycle,
    bracket (end, next cycle]); taken together the brackets pin the lag (``turnbull``)."""
    lags = ReleaseLags()
    for i in range(100):
        pod = ("ml", f"p{i}")
        t0 = T + 1000 * i
        end = t0 + 30 * (i * 0.37 % 1)  # the run's end, somewhere in a cycle
        lags.observe([], {pod: True}, {pod}, t0)
        t = t0 + 30
        ended = [Ended(*pod, end)]
        lags.observe(ended, {pod: True} if t < end + 5 else {}, set(), t)
        lags.observe([], {}, set(), t + 30)
    learned = sorted(lags.lags)
    assert len(learned) == 100
    assert learned[50] == pytest.approx(5.0, abs=1.0)


def test_a_stored_value_of_a_huge_number_or_a_wide_bracket_is_skipped() -> None:
    """A 400-digit integer raised OverflowError in ``decode`` (the forecaster did not
    start), and (0, 1e300] was kept, making every queue prediction beyond the horizon:
    neither is a bracket the service learns (at most 600 s wide)."""
    huge = "[[0, 1" + "0" * 400 + "]]"
    assert decode(huge) == ()
    assert decode("[[0, 1e300], [10.0, 70.0]]") == ((10.0, 70.0),)
    assert ReleaseLags([(0.0, 1e300), (10.0, 70.0)]).brackets == ((10.0, 70.0),)


def test_a_read_missing_nodes_leaves_their_watched_pods_watched() -> None:
    """Run ended at T+30, pod read holding at T+60; its node's shard away at T+120 to
    T+240 (the cycle adds the node's last-read holders back, not a sighting); read again
    without the pod at T+300: the lag is in (30, 270], not (210, 270]."""
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD}, T)
    lags.observe([Ended(*POD, T + 30)], {POD: True}, set(), T + 60)
    for t in (T + 120, T + 180, T + 240):
        assert lags.observe([], {}, set(), t, complete=False) == ()
    assert lags.observe([], {}, set(), T + 300) == ((30.0, 270.0),)


def test_a_pod_recreated_under_its_name_is_another_pod() -> None:
    """Run ended at T+50, pod (uid a) read holding at T+60; at T+120 a new pod of the
    name (uid b, still loading, no run) holds: uid a was free by then, (10, 70]."""
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD}, T, {POD: "a"})
    lags.observe([Ended(*POD, T + 50)], {POD: True}, set(), T + 60, {POD: "a"})
    assert lags.observe([], {POD: True}, set(), T + 120, {POD: "b"}) == ((10.0, 70.0),)


def test_two_runs_of_one_pod_ending_in_one_cycle_free_it_after_the_later() -> None:
    """Two GPU containers' runs ended at T+100 and T+110, recorded in one cycle in
    either order: the pod frees after the later end, (10, 70] both ways."""
    for order in ((T + 110, T + 100), (T + 100, T + 110)):
        lags = ReleaseLags()
        lags.observe([], {POD: True}, {POD}, T + 60)
        ended = [Ended(*POD, t) for t in order]
        lags.observe(ended, {POD: True}, set(), T + 120)
        assert lags.observe([], {}, set(), T + 180) == ((10.0, 70.0),), order


def test_the_summary_says_what_was_learned_and_which_pods_linger_now() -> None:
    """What the forecaster publishes: the pod in its lag while it is (with its run's end
    and uid, for the replay), then the lag learned at P10/P50/P90, the bracket kept,
    and the completed runs by what they gave."""
    lags = ReleaseLags([(0.0, 10.0)] * 9)
    lags.observe([], {POD: True}, {POD}, T)
    lags.observe([Ended(*POD, T + 30)], {POD: True}, set(), T + 60, {POD: "u1"})
    assert lags.lingering == {POD: (T + 30, "u1")}
    assert lags.summary().n_lingering == 1
    lags.observe([Ended("ml", "cpu", T + 70)], {}, set(), T + 120)
    got = lags.summary()
    assert lags.lingering == {}
    assert (got.n_brackets, got.n_lingering, got.n_bracketed, got.n_unseen) == (10, 0, 1, 1)
    assert (got.n_outliers, got.n_unbracketed) == (0, 0)
    assert got.quantiles == pytest.approx(
        tuple(float(x) for x in np.quantile(lags.lags, (0.1, 0.5, 0.9)))
    )
    assert got.quantiles[0] < 10 < got.quantiles[2]
    assert ReleaseLags().summary().quantiles is None


def test_a_runs_followers_linger_until_each_is_gone_and_teach_no_lag() -> None:
    """Rank 0 (POD) reports run a, ended at T+30; its worker (a follower) still holds at
    T+60 and T+120, after rank 0's pod was gone at T+120 (bracket (30, 90] learned from
    rank 0 alone): the worker lingers with the run's end and its uid until gone, is
    counted lingering, and gives no bracket, no outlier and no count of its own (one
    run, one observation). A follower the read does not show holding is not watched,
    and one still holding an hour after the run is dropped, uncounted."""
    worker = ("ml", "train-worker-0")
    lags = ReleaseLags()
    lags.observe([], {POD: True, worker: True}, {POD}, T)
    ended = [Ended(*POD, T + 30)]
    both = {POD: True, worker: True}
    uids = {POD: "u0", worker: "u1"}
    lags.observe(ended, both, set(), T + 60, uids, followers=[Ended(*worker, T + 30)])
    assert lags.lingering == {POD: (T + 30, "u0"), worker: (T + 30, "u1")}
    assert lags.observe([], {worker: True}, set(), T + 120, uids) == ((30.0, 90.0),)
    assert lags.lingering == {worker: (T + 30, "u1")}
    assert lags.summary().n_lingering == 1
    assert lags.observe([], {}, set(), T + 180) == ()  # the worker gone: no bracket
    assert lags.lingering == {} and lags.brackets == ((30.0, 90.0),)
    assert (lags.n_bracketed, lags.n_outliers, lags.n_unseen, lags.n_unbracketed) == (1, 0, 0, 0)
    # not holding: not watched (nor counted unseen); an hour on: dropped, uncounted
    for seen_before in (True, False):
        late = ReleaseLags()
        late.observe([], {POD: True, worker: True} if seen_before else {POD: True}, {POD}, T)
        late.observe(ended, {POD: True}, set(), T + 60, followers=[Ended(*worker, T + 30)])
        assert worker not in late.lingering and late.n_unseen == 0
    stuck = ReleaseLags()
    stuck.observe([], {worker: True}, set(), T)
    stuck.observe([], {worker: True}, set(), T + 60, followers=[Ended(*worker, T + 30)])
    stuck.observe([], {worker: True}, set(), T + 3700)
    assert stuck.lingering == {} and stuck.n_outliers == 0
