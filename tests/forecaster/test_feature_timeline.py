"""A run's features as its rows up to each moment gave them, and a replayed moment's."""

from __future__ import annotations

import dataclasses
import math

from gpu_eta.forecaster.estimators.replay import truncate
from gpu_eta.forecaster.feature_timeline import FeatureTimeline, seen_at, timeline
from gpu_eta.forecaster.runs import STATED_PLAN
from tests.forecaster.estimators.runs_factory import make_run


def test_each_prefix_reads_as_the_whole_run_does() -> None:
    """Per prefix by time: a configuration column its latest value, a number the mean
    of its finite values, a text its first; rows given in any order, a later row at one
    time replacing what an earlier one at that time said."""
    rows = [
        (30.0, 4, (("batch_size", 256.0), ("util", 0.2))),
        (10.0, 2, (("job_name", "a"), ("batch_size", 64.0), ("util", 0.8))),
        (20.0, 3, (("job_name", "b"), ("util", math.nan))),
        (10.0, 1, (("batch_size", 32.0),)),
    ]
    found = timeline(rows, {"batch_size"})
    assert found.times == (10.0, 30.0)  # the row at 20 changed nothing
    assert found.at(9.9) == {}
    assert found.at(10.0) == found.at(29.0) == {"batch_size": 64.0, "job_name": "a", "util": 0.8}
    assert found.at(1e12) == {"batch_size": 256.0, "job_name": "a", "util": 0.5}


def test_a_replayed_moment_gets_the_features_its_rows_had_by_then() -> None:
    run = make_run("r", [10.0] * 10, job_name="j", batch_size=256.0, gpu_utilization_ratio=0.5)
    run = dataclasses.replace(run, features={**run.features, STATED_PLAN: 12.0})
    part = truncate(run, 0.1)  # no measured mean: only the whole run's is known
    assert "gpu_utilization_ratio" not in part.features
    start = run.start_timestamp
    changed = FeatureTimeline(
        (start, start + 60.0),
        (
            {"job_name": "j", "batch_size": 64.0, "gpu_utilization_ratio": 0.9, STATED_PLAN: 12.0},
            {"job_name": "j", "batch_size": 256.0, "gpu_utilization_ratio": 0.5},
        ),
    )
    then = seen_at(part, run, changed, part.last_timestamp)
    assert dict(then.features) == {
        "job_name": "j",
        "batch_size": 64.0,
        "gpu_utilization_ratio": 0.9,
    }
    assert then.epoch_times == part.epoch_times and then.epochs_planned == 12.0
    # features that held from the run's first row: the whole run's, its mean among them
    same = seen_at(part, run, None, part.last_timestamp)
    assert dict(same.features) == {
        "job_name": "j",
        "batch_size": 256.0,
        "gpu_utilization_ratio": 0.5,
    }
    plain = truncate(make_run("p", [10.0] * 10, job_name="j"), 0.5)
    assert seen_at(plain, plain, None, plain.last_timestamp) is plain
