"""gpu_eta.forecaster.release_lags: the lags from a completed run's end to its pod's
GPUs being free, learned from the cycles' reads (pure: cycles built in the test)."""

from __future__ import annotations

import pytest

from gpu_eta.forecaster.release_lags import MAX_LAGS, Ended, ReleaseLags, decode, encode

T = 1_700_000_000.0
POD = ("ml", "train-0")


def test_a_pod_holding_past_its_runs_end_gives_the_middle_of_its_release_bracket() -> None:
    """Read holding at T (run running), at T+60 (run ended at T+30, pod still holding),
    free at T+120: its GPUs went free in (T+60, T+120], lag 90 - 30 = 60."""
    lags = ReleaseLags()
    assert lags.observe([], {POD: True}, {POD}, T) == ()
    assert lags.observe([Ended(*POD, T + 30)], {POD: True}, set(), T + 60) == ()
    assert lags.observe([], {}, set(), T + 120) == (pytest.approx(60.0),)
    assert lags.lags == (pytest.approx(60.0),)


def test_a_pod_gone_by_the_cycle_that_reads_its_run_ended() -> None:
    """Run ended at T+50, pod free by T+60 (the cycle finishing the run): lag 5."""
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD}, T)
    assert lags.observe([Ended(*POD, T + 50)], {}, set(), T + 60) == (pytest.approx(5.0),)


def test_a_run_read_ended_late_gives_the_bracket_since_the_cycle_before() -> None:
    """The run ended at T+10, read finished only at T+120 (its end in the range read):
    at T+60 its pod was already gone, so it went free in (T+10, T+60]."""
    lags = ReleaseLags()
    lags.observe([], {POD: True}, {POD}, T)
    lags.observe([], {}, {POD}, T + 60)
    assert lags.observe([Ended(*POD, T + 10)], {}, set(), T + 120) == (pytest.approx(25.0),)


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
    # a first cycle finding a run that ended 20 minutes ago, its pod gone: no bracket
    first = ReleaseLags()
    assert first.observe([Ended(*POD, T - 1200)], {}, set(), T) == ()
    assert first.n_unbracketed == 1


def test_only_the_most_recent_lags_are_kept() -> None:
    lags = ReleaseLags(lags=[float(i) for i in range(MAX_LAGS + 50)])
    assert len(lags.lags) == MAX_LAGS and lags.lags[0] == 50.0


def test_the_stored_lags_round_trip_and_damaged_values_are_skipped() -> None:
    assert decode(encode([1.25, 60.0])) == (pytest.approx(1.2), 60.0)
    assert decode('[5, -1, "x", null, 1e9, true, 7.5]') == (5.0, 7.5)
    for bad in (None, "", "{", '{"a": 1}', "[" + "1," * 20_000 + "1]"):
        assert decode(bad) == ()
