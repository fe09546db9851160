"""The fast per-run paths of ``EtaModel.predict`` compute what the numpy paths compute.

Why: ``own_rate`` on Python floats (``_own_rate_small``), the prior's design row built
without arrays (``PooledRegression.design_row``), the analogs read with ``interp`` instead of
``np.interp`` and ``PredictLinear`` on Python floats (``_predict_small``, a candidate of
every forecast) exist only for speed (bench/predict_speed.py); a change of the maths in
one path and not in the other must fail here. Each fast part is compared with its
numpy reference (the array path kept in the module, or the former numpy code kept
below as ``numpy_estimate``) on a few hundred varied runs, and whole forecasts with
every fast part swapped for its reference: P10/P50/P90 equal to 1e-9 relative.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import random
from pathlib import Path

import numpy as np
import pytest

from gpu_eta.forecaster.estimators import analog as analog_mod
from gpu_eta.forecaster.estimators import baselines as baselines_mod
from gpu_eta.forecaster.estimators import rate as rate_mod
from gpu_eta.forecaster.estimators.analog import (
    MID_RUN_SHARES,
    MIN_SPREAD,
    SHRINK,
    AnalogEstimate,
    AnalogEstimator,
    interp,
    pace_weight,
)
from gpu_eta.forecaster.estimators.base import (
    Z90,
    InsufficientData,
    intervals,
    remaining_epochs,
)
from gpu_eta.forecaster.estimators.baselines import PredictLinear, numpy_sum
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.pooled import PooledRegression
from gpu_eta.forecaster.estimators.prior import PriorEstimator
from gpu_eta.forecaster.runs import Run, counts_steps
from gpu_eta.forecaster.runs_csv import read_runs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"
REL = 1e-9


@functools.cache
def fixture_runs() -> tuple[Run, ...]:
    """The MLPerf fixture's runs, read once: four tests read the same file (runs are
    frozen, and a tuple cannot be changed by one test for the next)."""
    return tuple(read_runs(FIXTURE))


def close(a: float, b: float) -> bool:
    """Equal to ``REL`` relative (exactly equal for 0 and non-finite values)."""
    if a == b:
        return True
    return abs(a - b) <= REL * max(abs(a), abs(b))


def varied_run(rng: random.Random, i: int) -> Run:
    """A running job with what real ones show: a slow first epoch, evaluation spikes,
    missed epoch ends (gaps), a neighbour changing the speed part-way, fractional
    (step-derived) progress, repeated identical epochs; 1 to ~70 intervals."""
    n = rng.choice([1, 2, 3, 4, 5, 8, 13, 21, 40, 64, 65, 70])
    per = rng.uniform(0.5, 600.0)
    frac = rng.random() < 0.2
    steady = rng.random() < 0.1  # identical epochs: ties everywhere
    shift_at = rng.randrange(n) if rng.random() < 0.4 else -1
    shift = rng.choice([0.4, 0.6, 1.5, 2.5])
    period = rng.choice([2, 3, 5]) if rng.random() < 0.2 else 0  # an evaluation pass
    e, t = 0.0, 1.7e9 + rng.uniform(0, 1e6)
    times = [(e, t)]
    for k in range(n):
        width = rng.choice([1.0, 1.0, 1.0, 2.0, 3.0]) * (0.37 if frac else 1.0)
        width = 1.0 if period else width  # periodic passes show on epoch-by-epoch reports
        speed = per * (shift if 0 <= shift_at <= k else 1.0)
        d = speed if steady else speed * math.exp(rng.gauss(0, 0.05))
        if k == 0:
            d *= rng.choice([1.0, 1.5, 4.0])
        if not steady and rng.random() < 0.1:
            d *= rng.uniform(2, 5)  # evaluation / checkpoint spike
        if period and (k + 1) % period == 0:
            d *= 1.6
        e, t = e + width, t + d * width
        times.append((round(e, 6), t))
    planned = e * rng.choice([1.05, 1.5, 3.0])
    feats = {"job_name": f"job{i % 7}", "batch_size": float(2 ** (4 + i % 3))}
    return Run(f"v{i}", planned, tuple(times), feats)


def drifting_run(rng: random.Random, i: int) -> Run:
    """A running job late in its plan whose speed creeps (a neighbour's load growing):
    what the horizon memory (``rate.half_life``) reads; 12 to 200 intervals."""
    n = rng.choice([12, 20, 30, 48, 64, 65, 120, 200])
    slower = rng.uniform(1.2, 1.6)
    e, t = 0.0, 1.7e9
    times = [(e, t)]
    for k in range(n):
        e, t = e + 1.0, t + 10.0 * (1 + (slower - 1) * k / n) * math.exp(rng.gauss(0, 0.02))
        times.append((e, t))
    return Run(f"d{i}", e / rng.uniform(0.8, 0.95), tuple(times), {"job_name": "creep"})


RUNS = [varied_run(random.Random(seed), seed) for seed in range(400)] + [
    drifting_run(random.Random(seed), seed) for seed in range(40)
]
STEP_RUNS = [
    dataclasses.replace(
        r, run_id=f"{r.run_id}-steps", features={**r.features, "progress_unit": "steps"}
    )
    for r in RUNS
]
"""The same runs counted in steps: the rate's step rules (its mean term, three slow
steps for a period) run on both paths too."""
PARAMS = [
    {},
    {"huber_c": 1.0, "half_life_ratio": 0.5},
    {"warmup_excess": 0.3, "min_half_life": 4.0},
    {"follow_changes": False, "huber_c": 3.0},
]


@pytest.mark.parametrize("params", PARAMS)
def test_own_rate_small_path_equals_numpy_path(monkeypatch, params):
    runs = RUNS + STEP_RUNS
    fast = [rate_mod.own_rate(run, **params) for run in runs]
    monkeypatch.setattr(rate_mod, "SMALL_INTERVALS", 0)  # every run through numpy
    slow = [rate_mod.own_rate(run, **params) for run in runs]
    small = 0
    for run, a, b in zip(runs, fast, slow, strict=True):
        small += len(run.epoch_times) - 1 <= 64
        assert a[3] == b[3]
        assert all(close(x, y) for x, y in zip(a[:3], b[:3], strict=True)), (run.run_id, a, b)
    assert small > 600  # the fast path was the one compared
    # the step rules changed something on both paths: the runs are not read as epochs
    steps = {r.run_id: v for r, v in zip(runs, fast, strict=True) if counts_steps(r)}
    epochs = {f"{r.run_id}-steps": v for r, v in zip(runs, fast, strict=True)}
    differ = [k for k, v in steps.items() if v != epochs[k]]
    assert len(differ) > 200


def test_the_varied_runs_reach_every_branch_of_the_rate():
    """The comparison above means something only if the runs exercise the branches."""
    changed = [rate_mod.change_point(np.log(intervals(r)[0])) for r in RUNS]
    assert sum(c > 0 for c in changed) >= 20  # a neighbour's change of speed believed
    lengths = {len(r.epoch_times) - 1 for r in RUNS}
    assert {1, 2, 3} <= lengths and max(lengths) > rate_mod.SMALL_INTERVALS
    periodic = [r for r in RUNS if own_rate_is_periodic(r)]
    assert len(periodic) >= 10  # the periodic passes' branch taken on both paths
    horizon = [r for r in RUNS if own_rate_reads_the_horizon(r)]
    assert sum(len(r.epoch_times) - 1 <= rate_mod.SMALL_INTERVALS for r in horizon) >= 3
    assert any(len(r.epoch_times) - 1 > rate_mod.SMALL_INTERVALS for r in horizon)


def own_rate_is_periodic(run: Run) -> bool:
    """Whether ``own_rate`` counted periodic passes for ``run`` (it differs from the
    rate with the period detection switched off)."""
    est = rate_mod.own_rate(run)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rate_mod, "periodic_spikes", lambda *a, **k: None)
        plain = rate_mod.own_rate(run)
    return est is not None and plain is not None and est[0] != plain[0]


def own_rate_reads_the_horizon(run: Run) -> bool:
    """Whether the horizon memory (``rate.half_life`` on a drifting run) moved
    ``own_rate`` for ``run``."""
    est = rate_mod.own_rate(run)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rate_mod, "drifts", lambda *a, **k: False)
        mp.setattr(rate_mod, "drifts_list", lambda *a, **k: False)
        plain = rate_mod.own_rate(run)
    return est is not None and plain is not None and est[0] != plain[0]


def test_median_list_is_numpys_median():
    rng = random.Random(3)
    for n in range(1, 30):
        values = [rng.choice([1.0, 2.0, rng.uniform(-5, 5)]) for _ in range(n)]
        assert rate_mod.median_list(values) == float(np.median(values))


def test_weighted_median_list_is_the_array_version():
    rng = random.Random(4)
    for n in range(1, 40):
        values = [rng.choice([0.5, rng.gauss(0, 1)]) for _ in range(n)]
        weights = [rng.uniform(0.01, 3.0) for _ in range(n)]
        assert rate_mod._weighted_median_list(values, weights) == rate_mod.weighted_median(
            np.array(values), np.array(weights)
        )


def test_interp_is_numpys_interp():
    rng = random.Random(5)
    for _ in range(300):
        n = rng.randint(2, 25)
        xp = sorted({rng.uniform(0, 1) for _ in range(n)} | {0.0})
        fp = sorted(rng.uniform(0, 1000) for _ in xp)
        for x in (*(rng.uniform(-0.2, 1.2) for _ in range(5)), xp[0], xp[-1], xp[len(xp) // 2]):
            assert interp(x, tuple(xp), tuple(fp)) == float(np.interp(x, xp, fp))
    assert math.isnan(interp(math.nan, (0.0, 1.0), (0.0, 5.0)))


def test_numpy_sum_is_numpys_pairwise_sum_bit_for_bit():
    rng = random.Random(6)
    for trial in range(1500):
        n = rng.randint(1, 300)
        values = [rng.uniform(1.6e9, 1.8e9) if trial % 2 else rng.gauss(0, 1) for _ in range(n)]
        column = np.array([[0.0, v] for v in values])[:, 1]  # strided, as a run's times
        assert numpy_sum(values) == float(np.sum(values)) == float(np.sum(column))


def linear_answers(est: PredictLinear, runs: list[Run]) -> list[tuple[float, int] | str]:
    """``est``'s P50 and n_obs per run at a few moments, or the refusal's message."""
    out: list[tuple[float, int] | str] = []
    for run in runs:
        for wait in (0.0, 7.0, 3600.0):
            try:
                f = est.predict(run, run.last_timestamp + wait)
            except InsufficientData as err:
                out.append(str(err))
            else:
                out.append((f.p50, f.n_obs))
    return out


@pytest.mark.parametrize("window", [{}, {"window_ratio": 0.2}, {"window_seconds": 600.0}])
def test_predict_linear_small_path_equals_numpy_path(monkeypatch, window):
    runs = [*RUNS, *(cut(r, k, "c") for r in fixture_runs()[:60] for k in (2, 5, 12))]
    est = PredictLinear(**window).fit([])
    fast = linear_answers(est, runs)
    monkeypatch.setattr(baselines_mod, "SMALL_SAMPLES", 0)
    slow = linear_answers(est, runs)
    assert sum(isinstance(a, tuple) for a in fast) > 500
    for a, b in zip(fast, slow, strict=True):
        if isinstance(a, str) or isinstance(b, str):
            assert a == b
        else:
            assert a == b  # bit for bit: the same sums in the same order


def test_design_row_is_the_design_matrix_row():
    runs = list(fixture_runs())
    prior = PriorEstimator(random_state=0).fit(runs[:100])
    regression = prior.regression_
    assert regression.numeric_ and regression.levels_  # a regression with both kinds of column
    odd = Run("odd", 3.0, ((0.0, 1.0e9),), {"batch_size": -1.0, "gpu_model": 7, "gpus": "x"})
    for run in [*runs, odd]:
        row = regression.design_row(run)
        ref = regression.design([run])[0]
        assert row.shape == ref.shape
        assert all(close(a, b) for a, b in zip(row, ref, strict=True))


def numpy_estimate(
    self: AnalogEstimator, run: Run, before: float | None = None, target: float | None = None
) -> AnalogEstimate | None:
    """``AnalogEstimator.estimate`` as it was written with numpy (the reference)."""
    curves = self.analogs(run, before)
    if not curves or remaining_epochs(run) <= 0:
        return None
    frac = run.epochs_done / run.epochs_planned
    spent = run.last_timestamp - run.start_timestamp
    if frac <= 0 or spent <= 0:
        if target is not None:
            return None
        # the start-up (to the first progress point) as it was, the rest scaled by
        # the work after it; the plain ratio without such a point; whole in another unit
        unit = str(run.features.get("progress_unit", "") or "")
        totals = np.array([c.total for c in curves])
        planned = np.array([c.planned for c in curves])
        first = np.array([c.fractions[1] for c in curves]) * planned
        startup = np.array([c.elapsed[1] for c in curves])
        same_unit = np.array([c.unit == unit for c in curves])
        P = run.epochs_planned
        inside = (first > 0) & (first < planned)
        kept = startup + (totals - startup) * (P - first) / np.where(inside, planned - first, 1.0)
        # a plan that ends in the start-up: the analog's curve up to it
        early = np.array(
            [np.interp(P / c.planned, c.fractions, c.elapsed) for c in curves], dtype=float
        )
        kept = np.where(first >= P, early, kept)
        est_logs = np.log(np.where(same_unit, np.where(inside, kept, totals * P / planned), totals))
        center = paced = weighed = float(np.median(est_logs))
    else:
        planned = np.array([c.planned for c in curves])
        done = run.epochs_done
        unit = str(run.features.get("progress_unit", "") or "")
        same_unit = np.array([c.unit == unit for c in curves])
        # read at the same progress where the analog got there (and to the target) in
        # the same unit, else at the same fraction
        same = same_unit & (done < planned) & (target is None or np.array(target <= planned))
        scale = np.where(same, planned, run.epochs_planned)  # progress → analog fraction
        if target is None:
            goal = np.ones(len(curves))
            work = np.where(
                same, (run.epochs_planned - done) / np.maximum(planned - done, 1e-300), 1.0
            )
        else:
            goal = np.where(same, target / planned, min(1.0, target / run.epochs_planned))
            work = np.ones(len(curves))
        # from the later of the two first progress points (a two-point analog's is its
        # end), as fractions of each analog's curve; the start where the run has shown
        # one point only or that reference is not before its progress
        progress = np.array([e for e, _t in run.epoch_times])
        elapsed = np.array([t for _e, t in run.epoch_times]) - run.start_timestamp
        theirs_first = np.array([c.fractions[1] for c in curves])
        if len(progress) > 2:
            ref_frac = np.maximum(progress[1] / scale, theirs_first)
            ref = np.where(progress[1] / scale >= theirs_first, progress[1], ref_frac * scale)
            late = ref_frac >= done / scale
            ref_frac, ref = np.where(late, 0.0, ref_frac), np.where(late, 0.0, ref)
        else:
            ref_frac = ref = np.zeros(len(curves))
        at = np.array(
            [
                np.interp(done / x, c.fractions, c.elapsed)
                for x, c in zip(scale, curves, strict=True)
            ]
        )
        theirs = at - np.array(
            [np.interp(r, c.fractions, c.elapsed) for r, c in zip(ref_frac, curves, strict=True)]
        )
        ours = elapsed[-1] - np.interp(ref, progress, elapsed)
        ends = np.array(
            [np.interp(g, c.fractions, c.elapsed) for g, c in zip(goal, curves, strict=True)]
        )
        ok = (theirs > 0) & (ours > 0)
        if not ok.any():
            return None
        left = ours[ok] * np.maximum((ends[ok] - at[ok]) / theirs[ok] * work[ok], 1e-9)
        est_logs = np.log(left)
        center = float(np.median(est_logs))
        # at the analogs' own pace: their seconds still to go, the work scaled
        # read at the same fraction in one unit, the run's work is P / P_c of theirs
        their_work = np.where(same, work, np.where(same_unit, run.epochs_planned / planned, 1.0))
        rest = np.maximum((ends[ok] - at[ok]) * their_work[ok], 1e-9 * theirs[ok])
        paced = float(np.median(np.log(rest))) if target is None else None
        job = str(run.features.get("job_name", ""))
        mid = self.typical("mid", job, before)[0]
        if paced is not None and len(progress) > 3:
            # the run's own pace where it is unlike theirs over the whole stretch and
            # over each of its last two intervals, all beyond their spread, one way
            own = np.where(same, planned, run.epochs_planned)
            theirs_work = np.where(
                same, 1.0, np.where(same_unit, run.epochs_planned / planned, 1.0)
            )
            whole = beyond(np.log(left) - np.log(rest), mid)
            unlike = whole != 0
            for end in (len(progress) - 2, len(progress) - 1):
                (e0, t0), (e1, t1) = run.epoch_times[end - 1], run.epoch_times[end]
                span = np.array(
                    [
                        np.interp(e1 / x, c.fractions, c.elapsed)
                        - np.interp(e0 / x, c.fractions, c.elapsed)
                        for x, c in zip(own, curves, strict=True)
                    ]
                )
                kept = ok & (span > 0)
                step = np.log(t1 - t0) - np.log(span[kept] * theirs_work[kept]) if t1 > t0 else []
                unlike = unlike and beyond(np.asarray(step), mid) * whole > 0
            if unlike:
                paced = center
        # the two weighed by the record of the analogs that answered, shrunk toward
        # the usual weight of the job's configurations
        weighed = None
        if paced is not None:
            usual_at = self.typical("pace", job, before)
            usual = float(np.interp(done / run.epochs_planned, MID_RUN_SHARES, usual_at))
            answering = [c for c, k in zip(curves, ok, strict=True) if k]
            weight = pace_weight(answering, done, run.epochs_planned, unit, usual)
            weighed = weight * center + (1.0 - weight) * paced
    measured = 1.4826 * float(np.median(np.abs(est_logs - center)))
    # shrunk by n - 1 dof toward the job's typical spread at the start or mid-run (or
    # everyone's), widened as a new run's distance from the median of n
    n = len(est_logs)
    job = str(run.features.get("job_name", ""))
    typical = self.typical("start" if frac <= 0 or spent <= 0 else "mid", job, before)[0]
    shrunk = ((n - 1) * measured**2 + SHRINK * typical**2) / (n - 1 + SHRINK)
    spread = max(MIN_SPREAD, float(np.sqrt(shrunk))) * float(np.sqrt(1 + np.pi / (2 * n)))
    return AnalogEstimate(center, spread, n, paced, weighed)


def beyond(ratios: np.ndarray, typical: float) -> float:
    """The median log ratio where it lies beyond Z90 of the analogs' shrunk, widened
    scale, else 0."""
    n = len(ratios)
    if n == 0:
        return 0.0
    med = float(np.median(ratios))
    measured = 1.4826 * float(np.median(np.abs(ratios - med)))
    shrunk = ((n - 1) * measured**2 + SHRINK * typical**2) / (n - 1 + SHRINK)
    spread = max(MIN_SPREAD, float(np.sqrt(shrunk))) * float(np.sqrt(1 + np.pi / (2 * n)))
    return med if abs(med) > Z90 * spread else 0.0


def cut(run: Run, keep: int, suffix: str) -> Run:
    """``run`` running, with its first ``keep`` points."""
    return Run(f"{run.run_id}-{suffix}", run.epochs_planned, run.epoch_times[:keep], run.features)


@pytest.fixture(scope="module")
def fitted() -> tuple[EtaModel, list[Run]]:
    """A model fitted on the older half of the MLPerf fixture, and running jobs cut from
    all its runs at every few points (analogs, job priors and new jobs all occur)."""
    runs = sorted(fixture_runs(), key=lambda r: r.last_timestamp)
    model = EtaModel(random_state=0).fit(runs[: len(runs) // 2])
    jobs = [cut(run, keep, str(keep)) for run in runs for keep in range(1, len(run.epoch_times), 4)]
    return model, jobs


def test_analog_estimate_equals_numpy_reference(fitted):
    model, jobs = fitted
    answered = 0
    for run in jobs:
        targets = (None, run.epochs_done, 0.5 * run.epochs_done, run.epochs_planned)
        for target in targets:
            a = model.analog_.estimate(run, target=target)
            b = numpy_estimate(model.analog_, run, target=target)
            assert (a is None) == (b is None)
            if a is not None:
                answered += 1
                assert a.n == b.n
                assert close(a.log_remaining, b.log_remaining) and close(a.spread, b.spread)
                if target is None:
                    assert close(a.log_at_their_pace, b.log_at_their_pace)
                    assert close(a.log_weighed, b.log_weighed)
                else:
                    assert a.log_at_their_pace is None and a.log_weighed is None
    assert answered > 200


def test_whole_forecasts_equal_with_every_reference_swapped_in(fitted, monkeypatch):
    model, jobs = fitted
    assert len(jobs) > 300

    def forecasts() -> list[tuple[float, float, float]]:
        out = []
        for run in jobs:
            for now, stalled in (
                (run.last_timestamp + 30.0, False),
                (run.last_timestamp + 1e4, True),
            ):
                f = model.predict(run, now, stalled)
                out.append((f.p10, f.p50, f.p90))
        return out

    fast = forecasts()
    monkeypatch.setattr(rate_mod, "SMALL_INTERVALS", 0)
    monkeypatch.setattr(baselines_mod, "SMALL_SAMPLES", 0)
    monkeypatch.setattr(PooledRegression, "design_row", lambda self, run: self.design([run])[0])
    monkeypatch.setattr(analog_mod.AnalogEstimator, "estimate", numpy_estimate)
    slow = forecasts()
    for a, b in zip(fast, slow, strict=True):
        assert all(close(x, y) for x, y in zip(a, b, strict=True)), (a, b)
    assert len({f[1] for f in fast}) > 100  # varied forecasts, not one repeated value
