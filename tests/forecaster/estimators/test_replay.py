"""The calibration replay: the moments a past run is replayed at, and what each knew."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from gpu_eta.forecaster.calibration import BINS, END, FIRST, POINTS, progress_point, run_point
from gpu_eta.forecaster.estimators.analog import AnalogEstimator
from gpu_eta.forecaster.estimators.blend import BlendEstimator
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.prior import NEW_JOB_LEVEL, job_key
from gpu_eta.forecaster.estimators.replay import (
    calibration_moments,
    recent_completed,
    replay_moments,
    replay_samples,
    run_bin,
    samples_in_order,
)
from gpu_eta.forecaster.estimators.tuning import blend_residuals
from gpu_eta.forecaster.runs import (
    HISTORY_POINTS,
    STATED_PLAN,
    STEPS_UNIT,
    Run,
    as_seen_live,
    thinned,
)
from tests.forecaster.estimators.runs_factory import make_run, runs_in_fractions, scaled


def test_calibration_moments_add_the_middle_of_the_last_interval() -> None:
    steps = make_run("steps", [10.0] * 200)  # step-level: nine points past 95 %
    moments = list(calibration_moments(steps))
    assert moments[:-2] == list(replay_moments(steps))  # then the first point's, then END
    point, part = moments[-1]
    assert point == END == progress_point(part.progress_ratio)
    assert part.epochs_done == 195  # the middle of 191..199, not the last step
    short = make_run("short", [10.0] * 10)  # its last point before the end is at 90 %
    assert list(calibration_moments(short)) == list(replay_moments(short))
    # the middle of the points with time left (196..199 end when the run does: 191..195)
    end = steps.epoch_times[196][1]
    tied = dataclasses.replace(
        steps, epoch_times=(*steps.epoch_times[:196], *((float(e), end) for e in range(196, 201)))
    )
    point, part = list(calibration_moments(tied))[-1]
    assert point == END and part.epochs_done == 193
    # labelled as progress_point files it (the calibration relabels with it), in percent too
    percent = dataclasses.replace(
        steps, epochs_planned=100.0, epoch_times=tuple((e / 2, t) for e, t in steps.epoch_times)
    )
    point, part = list(calibration_moments(percent))[-1]
    assert point == END == progress_point(part.progress_ratio) and part.epochs_done == 97.5


def test_calibration_moments_add_the_first_point_before_ten_percent() -> None:
    steps = make_run("steps", [10.0] * 200)  # first point at 0.5 %, the 0.1 bin's at 10 %
    moments = list(calibration_moments(steps))
    first = [(p, part) for p, part in moments if p == FIRST]
    assert len(first) == 1 and first[0][1].epoch_times == steps.epoch_times[:2]
    assert run_point(first[0][1].progress_ratio, 2) == FIRST
    # a run with analogs keeps the 0.1 bin there: they read it from its start
    assert run_bin(first[0][1], has_analogs=False) == FIRST
    assert run_bin(first[0][1], has_analogs=True) == 0.1
    # a first point at 5-10 % is mostly the 0.1 bin's own moment: no first bin there
    for n in (10, 12, 20):  # first points at 10, 8.3 and 5 %
        run = make_run("short", [10.0] * n)
        assert not any(p == FIRST for p, _part in calibration_moments(run))


def test_a_thinned_step_run_keeps_its_first_report_and_gives_its_first_point_moment() -> None:
    """A run counted in steps keeps 50 of its 200 points in the history (``thinned``),
    its first report (0.5 % of the plan) among them: replayed from the history it gives
    the same ``FIRST`` moment, start-up included, as the whole run, which is the moment a
    live step run at its first report is in."""
    whole = make_run("steps", [10.0] * 200, progress_unit=STEPS_UNIT)
    kept = thinned(whole)
    assert len(kept.epoch_times) == HISTORY_POINTS and kept.epoch_times[1] == whole.epoch_times[1]
    first = [part for p, part in calibration_moments(kept) if p == FIRST]
    assert [part.epoch_times for part in first] == [whole.epoch_times[:2]]
    assert first == [part for p, part in calibration_moments(whole) if p == FIRST]
    # reported epoch by epoch, a long run is never thinned: its first point is its own
    assert thinned(make_run("epochs", [10.0] * 200)).epoch_times[1][0] == 1.0


def test_recent_completed_keeps_the_latest_finished_runs_oldest_first() -> None:
    runs = [
        make_run(f"r{i}", [10.0] * 5, start=1_700_000_000.0 + 1000.0 * (9 - i)) for i in range(10)
    ]
    unfinished = make_run("live", [10.0] * 2, planned=5.0, start=1_700_100_000.0)
    failed = dataclasses.replace(make_run("failed", [10.0] * 5), completed=False)
    one_point = make_run("one", [], planned=5.0, completed=True)
    got = recent_completed([*runs, unfinished, failed, one_point], 3, 2)
    assert [r.run_id for r in got] == ["r2", "r1", "r0"]  # the three that ended last
    assert recent_completed(runs, 0, 2) == []


def test_each_replayed_moment_knows_only_runs_that_ended_before_it() -> None:
    """Two runs of one configuration back to back, then a third: the first has no
    analogs at any of its moments, the third has both earlier runs'."""
    config = {"job_name": "j", "namespace": "ns", "node_type": "n1", "batch_size": 64.0}
    runs = [
        make_run(f"r{i}", [20.0] + [10.0] * 39, start=1_700_000_000.0 + 1000.0 * i, **config)
        for i in range(3)
    ]
    blend, analog = BlendEstimator().fit(runs), AnalogEstimator().fit(runs)
    samples = replay_samples(blend, analog, runs, max_runs=600, huber_grid=(2.0,))
    # every point and the last interval (epoch 39 of 40); the first point (2.5 %) of
    # the run without analogs alone; not the first run's start, with nothing ended
    # before it (the default prior alone, ``prior.DEFAULT_LEVEL``)
    assert len(samples) == 3 * (len(POINTS) + 1) + 1 - 1
    assert min(s.timestamp for s in samples if s.point == 0.0) == runs[1].start_timestamp
    assert [s.timestamp for s in samples if s.point == FIRST] == [runs[0].epoch_times[1][1]]
    assert sum(s.point == END for s in samples) == 3
    first = [s for s in samples if s.timestamp < runs[1].epoch_times[0][1]]
    assert first and all(s.analog is None for s in first)
    last = [s for s in samples if s.timestamp > runs[1].last_timestamp]
    assert last and all(s.analog is not None and s.analog.n == 2 for s in last)
    # the analogs at their own pace too, for the choice to score
    assert all(s.analog.log_at_their_pace is not None for s in last)
    assert {s.job for s in samples} == {job_key(runs[0])}
    # the job prior is temporal too: none for the first run, the job's for the last
    assert all(s.parts[0].prior_level not in ("job_batch", "job") for s in first)
    assert all(s.parts[0].prior_level == "job_batch" for s in last if s.point > 0)
    # the analogs checked on the run's own past where it has epochs enough to check
    checked = [s for s in last if s.trust is not None]
    assert checked and all(0.0 < s.trust <= 1.0 for s in checked)
    assert all(s.trust is None for s in first)
    # in the order the tuned blend's residuals come in (EtaModel.fit zips the two)
    ordered = samples_in_order(samples)
    weights = {p: (2.0, 0.1, 8.0) for p in BINS}
    residuals = blend_residuals(samples, weights, (2.0,), lambda scale: scale / 8.0)
    assert [(s.point, s.actual, s.timestamp) for s in ordered] == [
        (r.point, r.actual, r.timestamp) for r in residuals
    ]


def _stopped_early(run_id: str, durations: list[float], **kw: float | str) -> Run:
    """A run that stated a plan of 10 and ended early at ``len(durations)``: stored
    completed at what it reached, its stated plan kept as a feature (``ended_plan``)."""
    return make_run(run_id, durations, epochs_planned_stated=10.0, **kw)


def test_a_run_that_stopped_early_is_replayed_to_the_plan_it_stated() -> None:
    """Plan 10, ended after 6: replayed as live saw it (plan 10 at every cut, cut at
    fractions of 10, none past 60 % and no END moment), its truth its realised end."""
    run = _stopped_early("es", [10.0] * 6, job_name="es")
    assert as_seen_live(run).epochs_planned == 10.0
    assert STATED_PLAN not in as_seen_live(run).features  # live, the run had none
    moments = list(calibration_moments(run))
    assert moments == list(replay_moments(run))  # never past 95 % of 10
    assert [(p, part.epochs_done) for p, part in moments] == [
        (0.0, 0.0),
        (0.1, 1.0),
        (0.25, 2.0),
        (0.5, 5.0),
    ]
    assert all(part.epochs_planned == 10.0 and part.completed is None for _p, part in moments)
    samples = replay_samples(
        BlendEstimator().fit([]), AnalogEstimator().fit([]), [run], max_runs=10, huber_grid=(1.345,)
    )
    # by the stated plan; not its start, forecast from nothing (no run had ended)
    assert [s.point for s in samples] == [0.1, 0.25, 0.5]
    assert [round(math.exp(s.actual)) for s in samples] == [50, 40, 10]  # to its end at 6
    # a run without it, or with one not past what it reached, replays exactly as before
    plain = make_run("plain", [10.0] * 6, job_name="es")
    for same in (plain, dataclasses.replace(plain, features={STATED_PLAN: 6.0})):
        assert as_seen_live(same) is same
        assert [p.epochs_planned for _q, p in calibration_moments(same)] == [6.0] * 5
    for bad in ("10", True, math.inf, math.nan, -1.0):
        odd = dataclasses.replace(plain, features={STATED_PLAN: bad})
        assert as_seen_live(odd) is odd


def test_the_calibration_covers_the_overshoot_of_jobs_that_stop_early() -> None:
    """A job whose runs state 10 epochs and early-stop after 5 to 7, among two that run
    their plans. Live, a new run of it is forecast to 10 until it stops; replayed to the
    plan it reached (6, known from the start) the calibration never saw that overshoot
    and not one P10–P90 interval held the live truth (0 of 33). Replayed to the stated
    plan, the job's shift and widths learn it (30 of 33, the analogs reading each run
    to their own stops: ``analog.Curve``)."""
    rng = np.random.default_rng(0)
    history, t = [], 1_700_000_000.0
    for i in range(90):
        job = ("es", "a", "b")[i % 3]
        per = {"es": 60.0, "a": 40.0, "b": 90.0}[job] * float(np.exp(rng.normal(0, 0.05)))
        if job == "es":
            durations = list(per * np.exp(rng.normal(0, 0.05, int(rng.integers(5, 8)))))
            history.append(_stopped_early(f"r{i}", durations, start=t, job_name=job))
        else:
            durations = list(per * np.exp(rng.normal(0, 0.05, 10)))
            history.append(make_run(f"r{i}", durations, start=t, job_name=job))
        t += sum(durations) + 10
    model = EtaModel(random_state=0).fit(history)
    live_rng = np.random.default_rng(7)
    held = []
    for j in range(6):
        per = 60.0 * float(np.exp(live_rng.normal(0, 0.05)))
        durations = list(per * np.exp(live_rng.normal(0, 0.05, int(live_rng.integers(5, 8)))))
        live = make_run(f"live{j}", durations, planned=10.0, start=t, job_name="es")
        for k in range(1, len(durations)):  # forecast to 10 at each epoch end until it stops
            part = dataclasses.replace(live, epoch_times=live.epoch_times[: k + 1])
            forecast = model.predict(part, part.last_timestamp)
            held.append(forecast.p10 <= live.last_timestamp - part.last_timestamp <= forecast.p90)
        t = live.last_timestamp + 10
    assert len(held) == 33
    assert sum(held) >= 0.8 * len(held)  # 30 (0 replayed to the plan reached)


def _cuts(run: Run) -> list[tuple[float, int]]:
    """Each replayed moment of ``run``: its point and how many progress points it saw."""
    return [(p, len(part.epoch_times)) for p, part in replay_moments(run)]


def test_the_moments_a_run_is_replayed_at_do_not_depend_on_its_units() -> None:
    """Progress counted in samples (1e9 times an epoch) or in a billionth of one, and
    time in other units: the same cuts. An absolute 1e-9 tolerance on the cut took
    later points at a billionth's scale (the second of two epochs at the start) and, at
    a billion's, missed a point a rounding above the cut (3 × 0.1 of a plan of 4 × 0.1,
    at 75 %)."""
    for run in runs_in_fractions():
        cuts = _cuts(run)
        assert len(cuts) >= 2, run.run_id
        for k in (1e-9, 1e9):
            assert _cuts(scaled(run, k)) == cuts, (run.run_id, k)


def test_a_replayed_moment_leaves_out_the_whole_runs_measured_means() -> None:
    """A finished run keeps only its whole-run mean GPU and memory use (the history
    store's), which a moment part-way did not know: a run whose GPU idled in its second
    half replayed at 10 % with its whole-run mean read its future. Each moment leaves
    them out (the pooled regression imputes them); its configuration and identity,
    known from its start, stay; the finished run itself keeps them as history."""
    run = make_run(
        "r",
        [10.0] * 40,
        job_name="j",
        batch_size=64.0,
        gpus=2.0,
        gpu_utilization_ratio=0.6,
        memory_utilization_ratio=0.4,
    )
    moments = list(calibration_moments(run))
    assert {p for p, _part in moments} >= {0.0, FIRST, 0.1, END}  # every kind of moment
    for _point, part in moments:
        assert dict(part.features) == {"job_name": "j", "batch_size": 64.0, "gpus": 2.0}
    assert run.features["gpu_utilization_ratio"] == 0.6


def test_a_start_whose_job_name_was_never_seen_is_no_calibration_sample() -> None:
    """Four jobs whose epochs take 1 to 1000 s, one after the other, each run twice:
    every job's first start had only other jobs' runs before it (the regression's
    answer for a job it never saw, ``prior.NEW_JOB_LEVEL``). Its miss is how far that
    job is from the others, which the prior's spread measures from every job of the
    history; kept, its huge miss over that wide spread narrowed the interval of every
    other start of situation "new". Its later moments (own rate) stay."""
    runs, t = [], 1_700_000_000.0
    for j, speed in enumerate((1.0, 10.0, 100.0, 1000.0)):
        for rep in range(2):
            run = make_run(f"j{j}-{rep}", [speed] * 10, start=t, job_name=f"job{j}", namespace="ns")
            runs.append(run)
            t = run.last_timestamp + 1.0
    blend, analog = BlendEstimator().fit(runs), AnalogEstimator().fit(runs)
    samples = replay_samples(blend, analog, runs, max_runs=600, huber_grid=(2.0,))
    new_job = [s for s in samples if s.parts[0].prior_level == NEW_JOB_LEVEL]
    assert new_job and all(s.point > 0 for s in new_job)
    starts = {s.timestamp for s in samples if s.point == 0.0}
    assert starts == {r.start_timestamp for r in runs if r.run_id.endswith("-1")}
