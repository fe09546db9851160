"""The refit's direct builds (``runs.running_prefix``, ``tuning.with_floors``,
``replay.with_parts`` and ``Residual.moved``) are ``dataclasses.replace``'s
values: every field is carried, and a field added later fails here until they carry it."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from gpu_eta.forecaster.calibration import Residual
from gpu_eta.forecaster.estimators.analog import AnalogEstimate
from gpu_eta.forecaster.estimators.blend import Components
from gpu_eta.forecaster.estimators.choice import with_option
from gpu_eta.forecaster.estimators.replay import Sample, with_parts
from gpu_eta.forecaster.estimators.tuning import Floors, floored, with_floors
from gpu_eta.forecaster.runs import Run, running_prefix

RUN = Run(
    "r1",
    10.0,
    ((0.0, 100.0), (1.0, 110.0), (2.0, 121.0)),
    MappingProxyType({"job_name": "a", "gpu_utilization_ratio": 0.5}),
    True,
    "ns",
    "pod",
    "container",
)
PARTS = Components(1.0, 0.2, 3, (0.5, 0.1, 2.0, 2), 8.0, 2.0, "job_batch", 0.01, 0.02, 0.3)


def names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def test_the_builders_know_every_field() -> None:
    # a new field must be carried by the builders below (then listed here)
    assert names(Run) == [
        "run_id",
        "epochs_planned",
        "epoch_times",
        "features",
        "completed",
        "namespace",
        "pod",
        "container",
    ]
    assert names(Components)[-3:] == ["rate_floor", "prior_floor", "prior_mix"]
    assert len(names(Components)) == 10
    assert names(Sample) == [
        "point",
        "parts",
        "actual",
        "timestamp",
        "analog",
        "rates",
        "trust",
        "job",
        "configuration",
    ]
    assert names(Residual) == ["point", "center", "sigma", "actual", "timestamp", "shift_cap"]


def test_a_running_prefix_is_replaces_value() -> None:
    times = RUN.epoch_times[:2]
    assert running_prefix(RUN, times) == dataclasses.replace(RUN, epoch_times=times, completed=None)
    features = {"job_name": "a"}
    assert running_prefix(RUN, times, features) == dataclasses.replace(
        RUN, epoch_times=times, completed=None, features=features
    )


def test_floors_and_parts_are_replaces_values() -> None:
    assert with_floors(PARTS, 0.1, 0.2, None) == dataclasses.replace(
        PARTS, rate_floor=0.1, prior_floor=0.2, prior_mix=None
    )
    floors = Floors({0.5: 0.07}, {0.5: 0.09})
    assert floored(PARTS, 0.5, floors, 0.4) == dataclasses.replace(
        PARTS, rate_floor=0.07, prior_floor=0.09, prior_mix=0.4
    )
    other = dataclasses.replace(PARTS, prior_level="job")  # no same-job prior: no floor
    assert floored(other, 0.5, floors).prior_floor == 0.0
    sample = Sample(
        0.5,
        (PARTS,),
        2.0,
        110.0,
        AnalogEstimate(1.0, 0.1, 3, 1.1, 1.05),
        {"keras": 1.0},
        0.7,
        "job",
        "conf",
    )
    new = (other, PARTS)
    assert with_parts(sample, new) == dataclasses.replace(sample, parts=new)


def test_an_option_keeps_every_other_field_of_the_residual() -> None:
    r = Residual(0.5, 1.0, 0.2, 1.3, 110.0, 0.05)
    moved = with_option(r, (("keras", 1.0),), {"blend": 1.0, "keras": 1.2}, None)
    assert moved == dataclasses.replace(r, center=1.2)


def test_a_moved_residual_is_replaces_value() -> None:
    r = Residual(0.5, 1.0, 0.2, 1.3, 110.0, 0.05)
    assert r.moved(1.1, 0.3, None) == dataclasses.replace(r, center=1.1, sigma=0.3, shift_cap=None)
