"""``at_now``: a forecast made at a progress report, moved to a later moment."""

from __future__ import annotations

import math

import pytest

from gpu_eta.forecaster.estimators.base import at_now, interval_left
from gpu_eta.forecaster.runs import Run
from tests.forecaster.estimators.runs_factory import make_run

LAST = make_run("last", [1000.0] * 9, planned=10)  # one 1000 s epoch to go
HALF = make_run("half", [500.0] * 8, planned=10)  # two 500 s epochs to go


def test_at_the_report_the_quantiles_are_returned_as_given() -> None:
    q = (900.0, 1000.0, 1100.0)
    assert at_now(q, LAST, LAST.last_timestamp) == q
    assert at_now(q, LAST, LAST.last_timestamp - 5) == q  # a clock behind the report


def test_while_the_report_is_not_due_the_time_waited_counts() -> None:
    q = (900.0, 1000.0, 1100.0)
    p10, p50, p90 = at_now(q, HALF, HALF.last_timestamp + 200)
    assert p10 == pytest.approx(700.0, abs=0.5)
    assert p50 == pytest.approx(800.0, abs=1e-3)
    assert p90 == pytest.approx(900.0, abs=1e-3)


def test_a_moment_after_the_report_of_a_long_run_moves_it_by_that_moment() -> None:
    q = (0.9e7, 1e7, 1.1e7)  # four months left, asked a millisecond after the report
    p10, p50, p90 = at_now(q, LAST, LAST.last_timestamp + 1e-3)
    assert (p10, p50, p90) == pytest.approx((0.9e7, 1e7, 1.1e7), rel=1e-9)


def test_late_in_an_interval_p10_is_not_above_a_run_that_ends_on_time() -> None:
    """99 % of the way through an on-time interval the truth is the rest of the run
    plus 5 s; P10 keeps moving down with P50 instead of stopping at a share of the
    interval (a floor of a tenth of the next report's 500 s held P10 at 522.5 s)."""
    q = (950.0, 1000.0, 1050.0)
    waited = 495.0
    truth = 1000.0 - waited
    p10, p50, p90 = at_now(q, HALF, HALF.last_timestamp + waited)
    assert p10 <= truth <= p90
    assert p50 == pytest.approx(truth, rel=0.02)


def _irregular_run() -> Run:
    """100 s a unit, reported after 1, 2, 1, 2, 1 units (a read thinned to a few points
    a run lands between them): 13 units of 20 left, the usual next report 1 unit on."""
    units = (0.0, 1.0, 3.0, 4.0, 6.0, 7.0)
    start = 1_700_000_000.0
    return Run("irregular", 20.0, tuple((u, start + 100.0 * u) for u in units))


@pytest.mark.parametrize(
    ("run", "q"),
    [
        (_irregular_run(), (1235.0, 1300.0, 1365.0)),  # the next report 2 units on
        (make_run("even", [100.0] * 6, planned=20), (1330.0, 1400.0, 1470.0)),  # one missed
    ],
)
def test_a_report_late_for_the_usual_increment_but_on_time_for_a_longer_one_counts_down(
    run: Run, q: tuple[float, float, float]
) -> None:
    """99 % of the way to a report that comes 2 units on, at the run's pace: the truth
    is the rest after those 2 units. Read as an overdue 1-unit interval, the rest after
    1 unit held and P10 stayed above the truth (P10 1,140 s against 1,102 s, 1,235
    against 1,202 s); a 2-unit report, seen before or a missed one, is the likelier
    case by then."""
    waited = 198.0
    truth = q[1] - waited
    p10, p50, p90 = at_now(q, run, run.last_timestamp + waited)
    assert p10 <= truth <= p90
    assert p50 == pytest.approx(truth, rel=0.01)


def test_a_run_overdue_on_its_last_epoch_keeps_a_width_that_grows_with_lateness() -> None:
    """A tight forecast (P10–P90 of 900–1100 s) long overdue: the band does not
    shrink to a tenth of the forecast's (20 s), it widens as the run gets later."""
    q = (900.0, 1000.0, 1100.0)
    bands = []
    for waited in (1500.0, 3000.0, 6000.0):
        p10, p50, p90 = at_now(q, LAST, LAST.last_timestamp + waited)
        assert 0.0 < p10 < p50 < p90
        bands.append(p90 - p10)
        assert p90 - p10 > 0.05 * (waited - 1000.0)
    assert bands[0] < bands[1] < bands[2]


@pytest.mark.parametrize(
    "q",
    [
        (1000.0, 1000.0, 1000.0),  # no width at all
        (999.999, 1000.0, 1000.001),  # almost none
        (0.0, 1e-9, 1e9),  # as wide as a forecast goes
        (0.0, 0.0, 0.0),  # nothing left
    ],
)
@pytest.mark.parametrize("waited", [1e-9, 1.0, 999.0, 1001.0, 1e6, 1e12, math.inf])
def test_any_quantiles_and_wait_give_ordered_finite_values(
    q: tuple[float, float, float], waited: float
) -> None:
    p10, p50, p90 = at_now(q, LAST, LAST.last_timestamp + waited)
    assert all(math.isfinite(v) for v in (p10, p50, p90))
    assert 0.0 <= p10 <= p50 <= p90


def test_what_is_left_of_an_interval_never_goes_negative() -> None:
    for waited in (1.0, 899.0, 900.0, 1000.0, 1100.0, 1e5):
        left = interval_left((900.0, 1000.0, 1100.0), waited)
        assert 0.0 <= left[0] <= left[1] <= left[2]


@pytest.mark.parametrize("q", [(0.0, 1000.0, 2000.0), (0.00105, 1.904, 3459.7)])
def test_a_millisecond_after_the_report_a_wide_lower_side_moves_nothing_but_p10(q) -> None:
    """A P10 of 0 (a clamp) or far under P50 gave the interval's lower side a slope of
    0.05: the end "any moment now" had a large share, and conditioned on a
    millisecond every quantile jumped. P50 and P90 hardly move now (the second case's
    upper side, 1,800× its median, still conditions as the heavy tail it is); P10 is
    read as at least a ninth of P50."""
    p10, p50, p90 = at_now(q, LAST, LAST.last_timestamp + 1e-3)
    assert p50 == pytest.approx(q[1], rel=1e-2)  # was 1.904 → 3.746 s, 1000 → 1172 s
    assert p90 == pytest.approx(q[2], rel=1e-2)
    assert q[0] <= p10 <= q[1] / 9 + 1e-3


@pytest.mark.parametrize("planned", [1.0, 10.0, 1000.0, 1e6])
def test_before_the_first_report_the_time_waited_counts_whatever_the_unit(planned: float) -> None:
    """A run at its start, no report yet (data loading, compilation), forecast to end
    in an hour: 10 minutes later the same end stands, whether the run counts 1 or 10
    epochs, 1,000 steps or 10⁶ samples. Read as due one unit on, the first report was
    overdue within seconds for a run counting steps or samples, the whole forecast held
    as the rest after it, and the end slid later with the clock (P50 3,675 s left after
    600 s for 1,000 steps, 3,088 s for 10 epochs)."""
    start = 1_700_000_000.0
    run = Run("start", planned, ((0.0, start),))
    q = (2400.0, 3600.0, 5400.0)
    p10, p50, p90 = at_now(q, run, start + 600.0)
    assert p50 == pytest.approx(3000.0, abs=1.0)
    assert p10 == pytest.approx(1800.0, abs=15.0)
    assert p90 == pytest.approx(4800.0, abs=15.0)


def test_before_the_first_report_a_start_up_past_the_forecast_moves_the_end_later() -> None:
    """Once the time waited passes the forecast's median with no report, the run is
    later than foreseen: the end moves past the first forecast's, P50 keeps a width."""
    start = 1_700_000_000.0
    run = Run("start", 1000.0, ((0.0, start),))
    q = (2400.0, 3600.0, 5400.0)
    ends = []
    for waited in (3600.0, 5400.0, 9000.0):
        p10, p50, p90 = at_now(q, run, start + waited)
        assert 0.0 < p10 < p50 < p90
        ends.append(waited + p50)
    assert 3600.0 < ends[0] < ends[1] < ends[2]


@pytest.mark.parametrize(
    "q", [(1028.0, 1031.0, 1036.0), (120.0, 120.0, 120.0), (2400.0, 3600.0, 5400.0)]
)
@pytest.mark.parametrize("planned", [10.0, 1000.0])
def test_a_run_late_for_its_whole_start_forecast_still_has_its_plan_ahead(
    q: tuple[float, float, float], planned: float
) -> None:
    """A run with no report well past its whole start forecast has done none of its
    plan: what is left never falls to seconds (a narrow band, 1028–1031–1036 s, read
    1.5 s left 1,100 s after the start, 5.5 s after 4,000 s, with all 10 epochs to
    do), but is at least the forecast again (its pace for the whole plan); while the
    start-up is not due, the end stays put."""
    start = 1_700_000_000.0
    run = Run("start", planned, ((0.0, start),))
    early = at_now(q, run, start + 0.1 * q[0])
    assert early[1] == pytest.approx(q[1] - 0.1 * q[0], rel=1e-3)
    previous_end = 0.0
    for late in (2.0, 4.0, 40.0):
        waited = late * q[2]
        p10, p50, p90 = at_now(q, run, start + waited)
        assert p10 >= 0.85 * q[0]
        assert p50 >= 0.85 * q[1]
        assert p90 >= 0.85 * q[2]
        assert waited + p50 >= previous_end
        previous_end = waited + p50
