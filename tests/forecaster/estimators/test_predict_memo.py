"""``EtaModel`` reuses a run's costly parts only for the same run content and model.

Why: the cycle predicts every running job each minute and most show nothing new, so
``EtaModel.predict`` keeps each run's components, analog forecast, trust and rate
candidates (``EtaModel._known``). A forecast from kept parts must be exactly what a
fresh one would be: these tests compare every reuse with the forecast computed from
scratch (the memo dropped), and check that a changed run, a changed feature,
``update`` (for the runs it concerns) and a refit recompute, and that choices changed
on the fitted model are followed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpu_eta.forecaster.estimators import blend as blend_mod
from gpu_eta.forecaster.estimators import eta_model as eta_mod
from gpu_eta.forecaster.estimators.analog import identity
from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.estimators.prior import group_key, hardware_key
from gpu_eta.forecaster.runs import Run
from gpu_eta.forecaster.runs_csv import read_runs
from tests.forecaster.estimators.runs_factory import make_run

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"


def running(run: Run, keep: int, suffix: str = "") -> Run:
    """A new ``Run`` object for ``run``'s first ``keep`` points (as each cycle builds)."""
    return Run(
        run.run_id + suffix,
        run.epochs_planned,
        tuple(tuple(p) for p in run.epoch_times[:keep]),
        dict(run.features),
    )


@pytest.fixture(scope="module")
def data() -> tuple[list[Run], list[Run]]:
    runs = sorted(read_runs(FIXTURE), key=lambda r: r.last_timestamp)
    half = len(runs) // 2
    return runs[:half], runs[half:]


@pytest.fixture(scope="module")
def model(data) -> EtaModel:
    return EtaModel(random_state=0).fit(data[0])


def fresh(model: EtaModel, run: Run, now: float, stalled: bool = False):
    """The forecast computed from scratch: the memo dropped first."""
    model.__dict__.pop("_memo", None)
    return model.predict(run, now, stalled)


def counting_own_rate(monkeypatch) -> list[int]:
    """Count the blend's own-rate computations (one per forecast computed)."""
    calls = [0]
    real = blend_mod.own_rate

    def own_rate(*args, **kwargs):
        calls[0] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(blend_mod, "own_rate", own_rate)
    return calls


def test_an_unchanged_run_reuses_its_forecast_and_it_equals_a_fresh_one(model, data, monkeypatch):
    jobs = [running(r, k, f"-{k}") for r in data[1] for k in (2, 5, 9) if k < len(r.epoch_times)]
    assert len(jobs) > 100
    model.__dict__.pop("_memo", None)
    for run in jobs:
        model.predict(run, run.last_timestamp + 5.0)
    calls = counting_own_rate(monkeypatch)
    again = [running(r, len(r.epoch_times)) for r in jobs]  # new objects, same content
    reused = [model.predict(r, r.last_timestamp + 50.0) for r in again]
    assert calls[0] == 0  # nothing recomputed
    for run, got in zip(again, reused, strict=True):
        assert got == fresh(model, run, run.last_timestamp + 50.0)
    # stalled runs too: the memo holds the estimate, ``now`` and the stall apply after
    for run in again[:20]:
        model.predict(run, run.last_timestamp)
        got = model.predict(run, run.last_timestamp + 1e4, stalled=True)
        assert got == fresh(model, run, run.last_timestamp + 1e4, stalled=True)


def test_a_changed_run_is_recomputed(model, data, monkeypatch):
    base = next(r for r in data[1] if len(r.epoch_times) >= 8)
    run = running(base, 5)
    now = run.last_timestamp + 5.0
    first = model.predict(run, now)
    changes = [
        running(base, 6),  # a new epoch end
        dataclasses.replace(run, epochs_planned=run.epochs_planned * 2),  # a longer plan
        dataclasses.replace(  # a feature the prior reads
            run, features={**run.features, "batch_size": 2 * float(run.features["batch_size"])}
        ),
        dataclasses.replace(  # an epoch end moved, count and last point unchanged
            run,
            epoch_times=(
                *run.epoch_times[:2],
                (run.epoch_times[2][0], run.epoch_times[2][1] + 1.0),
                *run.epoch_times[3:],
            ),
        ),
    ]
    calls = counting_own_rate(monkeypatch)
    for changed in changes:
        before = calls[0]
        got = model.predict(changed, now)
        assert calls[0] == before + 1  # computed, not reused
        assert got == fresh(model, changed, now)
        model.predict(run, now)  # back to the original content: recomputed too
    assert [model.predict(c, now) for c in changes[:2]] != [first, first]


def test_update_recomputes_the_runs_it_concerns_and_a_refit_all(data, monkeypatch):
    """``update`` (the live cycle calls it whenever a run finished) gives new analogs
    and job runs to some configurations, and may move a job's typical analog spread:
    exactly their running jobs are recomputed, and each forecast equals a fresh one."""
    history, later = data
    model = EtaModel(random_state=0).fit(history)
    jobs = [running(r, 3) for r in later[40:] if len(r.epoch_times) > 3]
    for run in jobs:
        model.predict(run, run.last_timestamp)
    finished = later[:40]
    concerned = {identity(r) for r in finished} - {None}
    prior = model.blend_.prior_
    groups = {group_key(r) for r in finished} - {""}
    hardware = {hardware_key(r) for r in finished} - {""}

    def reads(r: Run) -> bool:  # its job level reads a group a finished run joins
        if group_key(r) in prior.groups_ or group_key(r) in groups:
            return group_key(r) in groups
        return hardware_key(r) in hardware

    typicals = [model.analog_.typicals(r) for r in jobs]
    calls = counting_own_rate(monkeypatch)
    model.update(finished)
    # ... or the typical spread its analogs' spread is shrunk toward (its job's)
    moved = [model.analog_.typicals(r) != t for r, t in zip(jobs, typicals, strict=True)]
    expected = sum(
        identity(r) in concerned or reads(r) or m for r, m in zip(jobs, moved, strict=True)
    )
    assert 0 < expected < len(jobs)  # some jobs concerned, some not
    after = [model.predict(r, r.last_timestamp) for r in jobs]
    assert calls[0] == expected
    assert after == [fresh(model, r, r.last_timestamp) for r in jobs]
    model.fit(history)  # a refit of the same object: everything again
    calls[0] = 0
    for run in jobs:
        model.predict(run, run.last_timestamp)
    assert calls[0] == len(jobs)


def test_choices_changed_after_the_fit_are_followed(model, data):
    run = running(next(r for r in data[1] if len(r.epoch_times) >= 8), 5)
    now = run.last_timestamp
    first = model.predict(run, now)
    saved = dict(model.choice_), dict(model.weights_)
    try:
        for name in model.choice_:
            model.choice_[name] = {p: (("linear", 1.0),) for p in model.choice_[name]}
        model.weights_ = {p: (1.0, 0.8, 1000.0) for p in model.weights_}
        changed = model.predict(run, now)
        assert changed != first
        assert changed == fresh(model, run, now)
    finally:
        model.choice_.update(saved[0])
        model.weights_ = saved[1]
    assert model.predict(run, now) == first


def test_drifting_utilisation_recomputes_only_where_the_regression_reads_it(monkeypatch):
    """The cycle's utilisation means drift every minute: a run with a job prior keeps
    its parts (nothing kept reads them), a job new here's regression prior is recomputed."""
    start = 1_700_000_000.0
    history = [
        make_run(
            f"h{i}",
            [10.0 * (1 + i % 3) * (1 + 2.0 * (0.2 + 0.013 * i))] * 6,
            start=start + 1000.0 * i,
            job_name=f"job{i % 3}",
            batch_size=64.0,
            gpu_utilization_ratio=0.2 + 0.013 * i,
        )
        for i in range(60)
    ]
    model = EtaModel(random_state=0).fit(history)
    assert (
        "gpu_utilization_ratio" in model.blend_.prior_.regression_.numeric_
    )  # the regression reads it
    later = start + 1e5
    known = make_run("k", [10.0] * 3, planned=6.0, start=later, job_name="job0", batch_size=64.0)
    new = make_run(  # a job new here: the regression's row (a new job name takes the jobs' centre)
        "n", [10.0] * 3, planned=6.0, start=later, job_name="job0", namespace="x", batch_size=64.0
    )
    calls = counting_own_rate(monkeypatch)
    for run, recomputed in ((known, False), (new, True)):
        now = run.last_timestamp
        a = dataclasses.replace(run, features={**run.features, "gpu_utilization_ratio": 0.3})
        b = dataclasses.replace(run, features={**run.features, "gpu_utilization_ratio": 0.9})
        model.predict(a, now)
        before = calls[0]
        got = model.predict(b, now)
        assert calls[0] == before + recomputed
        assert got == fresh(model, b, now)
        # what the memo relies on: with a job prior the utilisation changes no part
        parts_a, parts_b = model.blend_.components(a), model.blend_.components(b)
        assert (parts_a == parts_b) is not recomputed
        assert model.analog_.estimate(a) == model.analog_.estimate(b)


def test_the_memo_is_bounded(model, data, monkeypatch):
    monkeypatch.setattr(eta_mod, "MEMO_MAX", 5)
    model.__dict__.pop("_memo", None)
    for i, r in enumerate(data[1][:20]):
        model.predict(dataclasses.replace(running(r, 2), run_id=f"m{i}"), r.epoch_times[1][1])
    assert len(model.__dict__["_memo"][1]) <= 5
