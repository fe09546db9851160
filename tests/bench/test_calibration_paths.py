"""bench/calibration_paths.py: every forecast is tallied under the calibration that
``EtaModel.predict`` really applied (the figures themselves are reported, not asserted)."""

from __future__ import annotations

import pytest

from gpu_eta.forecaster.calibration import Calibrator, Residual, progress_point
from gpu_eta.forecaster.estimators.choice import SITUATIONS
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.replay import truncate
from gpu_eta.forecaster.evaluate import backtest
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import job_history, make_run, pairs_history

cp = load_bench("calibration_paths")


def test_every_forecast_is_tallied_under_the_calibration_it_took() -> None:
    runs = job_history(40, seed=3)
    tallies = cp.tally_paths(runs)
    result = backtest(runs, model_factory=lambda: EtaModel(random_state=0))
    assert sum(t.n for t in tallies.values()) == len(result.predictions)
    assert {path for _p, _s, path in tallies} <= {cp.OWN, cp.EVERYONE, cp.ENVELOPE}
    assert {s for _p, s, _path in tallies} <= {*SITUATIONS, cp.ONE_ANALOG}
    # the same forecasts: the tallied hits are backtest's coverage hits
    hits = sum(p.p10 <= p.actual <= p.p90 for p in result.predictions)
    assert sum(t.hits for t in tallies.values()) == hits
    for t in tallies.values():
        assert t.hits + t.below + t.above == t.n
    # a history of three repeated jobs: most forecasts have their situation's own
    # calibration, and none of those rests on fewer residuals than min_samples
    own = [t for (_p, _s, path), t in tallies.items() if path == cp.OWN]
    assert sum(t.n for t in own) > 0.5 * len(result.predictions)
    assert min(n for t in own for n in t.own_n) >= EtaModel().min_samples


def test_the_path_is_the_one_predict_used() -> None:
    model = cp.Counting(random_state=0).fit(job_history(60, seed=8))
    run = truncate(job_history(61, seed=8)[-1], 0.5)  # a run half done
    model.predict(run, run.last_timestamp)
    assert model.last is not None
    name, path, own_n = model.last
    point = progress_point(run.progress_ratio)
    calibrator, own = EtaModel._calibration(model, name, point)
    assert (path == cp.OWN) == (calibrator is own)
    # the situation's own residuals at the point, also where predict did not use them
    situation = model.calibrators_.get(name)
    assert own_n == (0 if situation is None else situation.n_.get(point, 0))


def test_a_run_with_analogs_short_of_residuals_counts_its_situations_own() -> None:
    """A run with analogs whose situation has fewer than ``min_samples`` residuals at
    its point takes everyone's calibration with no envelope; the tally still reports
    how many of its own situation's residuals there were (not 0)."""
    model = cp.Counting(random_state=0).fit(job_history(60, seed=8))
    run = truncate(job_history(61, seed=8)[-1], 0.5)
    point = progress_point(run.progress_ratio)
    model.predict(run, run.last_timestamp)
    assert model.last is not None and model.last[0] == "analog"
    few = [Residual(point, 0.0, 0.1, 0.01 * i, float(i)) for i in range(3)]
    model.calibrators_["analog"] = Calibrator().fit(few)
    model.predict(run, run.last_timestamp)
    assert model.last == ("analog", cp.EVERYONE, 3)


def test_refit_fraction_is_refused_or_taken_as_the_replay_refuses_or_takes_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--refit-fraction``: ``refit_sizes``' rule (a finite share ≥ 0), a usage error
    before any corpus is read; 0 and 2 get past it (to the absent corpus named)."""
    errors = {}
    for fraction in ("-1", "0", "2"):
        with pytest.raises(SystemExit):
            cp.main(["--refit-fraction", fraction, "--mlperf", "/absent", "--corpus", "absent"])
        errors[fraction] = capsys.readouterr().err.splitlines()[-1]
    assert errors["-1"].endswith(
        "--refit-fraction: refit_fraction must be >= 0 and finite, got -1.0"
    )
    for taken in ("0", "2"):
        assert "error: unknown or absent corpus absent; have " in errors[taken], errors[taken]


def test_a_forecast_resting_on_one_earlier_run_is_tallied_under_its_own_kind() -> None:
    """A run whose configuration ran once before takes the calibration of such forecasts
    (``ONE_ANALOG``), and the tally says so, with that calibration's residuals."""
    runs = pairs_history(seed=4)
    model = cp.Counting(random_state=0).fit(runs)
    end = runs[-1].last_timestamp
    model.update([make_run("once", [6.0] * 10, start=end + 10, job_name="solo", batch_size=64)])
    run = truncate(
        make_run("again", [6.0] * 10, start=end + 200, job_name="solo", batch_size=64), 0.5
    )
    model.predict(run, run.last_timestamp)
    one = model.calibrators_[cp.ONE_ANALOG]
    assert model.last == (cp.ONE_ANALOG, cp.OWN, one.n_[0.5])
