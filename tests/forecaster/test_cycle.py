"""gpu_eta.forecaster.cycle: the cycle's logic against canned query answers and a stand-in model.

The wire (real Prometheus, real queries) is covered in
tests/integration/test_forecaster_prometheus.py; here the answers are Samples
built in the test, so each rule (stall, never in the past, refit, GPU free time,
fixed query count) is checked on its own.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar

import pytest

from gpu_eta.common.gpu_use import UTIL
from gpu_eta.forecaster import cycle as cycle_rules
from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle, gpu_free_times, sanitize
from gpu_eta.forecaster.cycle_meta import decode_means_until, encode_means_until
from gpu_eta.forecaster.forecast import Forecast, ForecastSet
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from gpu_eta.forecaster.planless import fit_durations
from gpu_eta.forecaster.promapi import PromAPIError
from gpu_eta.forecaster.refit import ModelError, fit_in_child
from gpu_eta.forecaster.runs import Run, run_key
from gpu_eta.forecaster.runs_from_series import Allocation, CycleView
from gpu_eta.forecaster.series import QueryStats, Sample, Series

NOW = 1_700_000_000.0


def _shape(q: str) -> str:
    return re.sub(r"offset \S+", "offset X", re.sub(r"\[[^\]]*\]", "[X]", q))


_INSTANT = {_shape(queries.render(t, 60, 300)): name for name, t in queries.INSTANT.items()}
_PART = re.compile(r'label_replace\(\((.*?)\), "forecaster_query", "(\w+)", "__name__", "\.\*"\)')
_SET_MATCH = re.compile(r'\b(run_id|exported_pod|pod)=~"([^"]*)"')
# the restarted runs' clause (queries.AGAIN_SERIES): answered as the query without it
# (the canned answers are the new attempt's; a real TSDB's: test_cycle_restart_prometheus)
AGAIN_CLAUSE = re.compile(
    r" unless on \([^)]*\) \(\(last_over_time\(gpu_eta_training_\w+\{[^}]*\}\[\w+\]\) "
    r"unless on \([^)]*\) gpu_eta_training_\w+\{[^}]*\}\) and on \([^)]*\) "
    r"gpu_eta_training_last_report_timestamp_seconds\{[^}]*\}\)"
)
_FOLDED = {
    _shape(
        queries.fold(
            {
                name: kube_state.render(t, PendingSettings().arrivals_seconds)
                for name, t in queries.PENDING.items()
            }
        )
    ): tuple(queries.PENDING)
}
_SECOND_ROUND = (
    *(kube_state.node_label_part(i) for i in range(kube_state.MAX_LABEL_PARTS)),
    kube_state.PENDING_SINCE_PART,
    kube_state.ARRIVALS_SEEN_PART,
)
# a long first read's change-only form (queries.range_reads) is answered as the plain one
_RANGE = {
    _shape(t.format(runs="", offset="1s")): name
    for templates in (queries.RANGE, queries.CHANGES_RANGE, {"step_range": queries.STEP_RANGE})
    for name, t in templates.items()
}
# the step range query with restarted runs named (queries.step_range), their clause taken out
_RANGE[_shape(AGAIN_CLAUSE.sub("", queries.step_range("", '{run_id=~"x"}')))] = "step_range"
# the raw samples the GPU-use mean of some pods is computed from (queries.util_samples)
_RAW_MARK = '{__name__=~"gpu_eta_pod_gpu_utilization_ratio|'
_RAW_MATCH = re.compile(r'\{__name__=~"[^"]*",((?:exported_)?pod)=~"([^"]*)"\}\[\d+s\]')
# the GPU-use and memory means of some pods (queries.for_pods), matchers taken out
_POD_MATCH = re.compile(r'\{(?:exported_)?pod=~"([^"]*)"\}')
_SOME_PODS = {
    _shape(_POD_MATCH.sub("", q)): name
    for name in queries.SPAN
    if (q := queries.for_pods(queries.INSTANT[name], 60, 300, ["p"]))
}


class CannedClient:
    """Answers each query by its name in gpu_eta.forecaster.queries (the parts of a
    folded query tagged as in a real answer); counts like PromClient."""

    def __init__(self, instant: dict[str, list[Sample]], ranges: dict | None = None) -> None:
        self.answers = instant
        self.ranges = ranges or {}
        self.stats = QueryStats()
        self.fail = False
        # what each answer says in ``warnings`` (a partial answer: a store down)
        self.warnings: list[str] = []
        self.range_warnings: list[str] = []
        self.seen: list[str] = []
        self.range_spans: list[tuple[str, float, float]] = []  # (name, start, end)

    def instant(
        self,
        query: str,
        at: float | None = None,
        *,
        warnings: list[str] | None = None,
        skipped: object = None,
    ) -> list[Sample]:
        """The canned answer (``skipped``: nothing is, the answers are parsed already)."""
        self._count(query)
        if warnings is not None:
            warnings.extend(self.warnings)
        query = AGAIN_CLAUSE.sub("", query)
        if _shape(query) in _INSTANT:
            return list(self.answers.get(_INSTANT[_shape(query)], []))
        second = dict((name, part) for part, name in _PART.findall(query) if name in _SECOND_ROUND)
        if second:  # the queue's second round (kube_state.second_round), folded
            return self._second_round(second)
        pods = _POD_MATCH.findall(query)
        name = _SOME_PODS.get(_shape(_POD_MATCH.sub("", query)), "")
        if pods and name:  # some pods' means, either pod label
            wanted = set(pods[0].split("|"))
            return [
                x
                for x in self.answers.get(name, [])
                if wanted & {x.labels.get("pod"), x.labels.get("exported_pod")}
            ]
        if _shape(query) not in _FOLDED:  # the unchanging series of runs not seen yet
            out = []
            for part, name in _PART.findall(query):
                # a part without a set match (the GPU models, a scrape gap's for every
                # run) is answered whole
                label, values = m.groups() if (m := _SET_MATCH.search(part)) else ("", "")
                for s in self.answers.get(name.removesuffix("_exported"), []):
                    if not label or s.labels.get(label) in values.split("|"):
                        out.append(Sample({**s.labels, queries.TAG: name}, s.value, s.timestamp))
            return out
        return [
            Sample({**s.labels, queries.TAG: name}, s.value, s.timestamp)
            for name in _FOLDED[_shape(query)]
            for s in self.answers.get(name, [])
        ]

    def _second_round(self, parts: dict[str, str]) -> list[Sample]:
        """The node labels of the keys asked; when the pods asked by uid were first
        seen Pending, those pods' only when it names them (as the TSDB would answer)."""
        out = []
        for name, part in parts.items():
            named = re.search(r'uid=~"([^"]*)"', part)
            for x in self.answers.get(name, []):
                if named is None or x.labels.get("uid") in named.group(1).split("|"):
                    out.append(Sample({**x.labels, queries.TAG: name}, x.value, x.timestamp))
        return out

    def range(
        self,
        query: str,
        start: float,
        end: float,
        step_seconds: float,
        *,
        warnings: list[str] | None = None,
    ) -> list[Series]:
        """The canned series of the query's name, only the set-matched runs' if it has
        a set match (as the TSDB would answer)."""
        self._count(query)
        if warnings is not None:
            warnings.extend(self.range_warnings)
        query = AGAIN_CLAUSE.sub("", query)  # as the instant queries' (queries.step_range)
        match = _SET_MATCH.search(query)
        name = _RANGE[_shape(re.sub(r'\{run_id=~"[^"]*"\}', "", query))]
        self.range_spans.append((name, start, end))
        series = self.ranges.get(name, [])
        if match is not None:
            label, values = match.groups()
            series = [x for x in series if x.labels.get(label) in values.split("|")]
        return list(series)

    def samples(
        self, selector: str, at: float | None = None, *, warnings: list[str] | None = None
    ) -> list[Series]:
        """The raw samples the GPU-use mean of some pods is computed from
        (``queries.util_samples``), made of the canned ``util_mean`` answers of the pods
        named: ours, one sample and no allocation start, for plain labels; DCGM's (0..100)
        for ``exported_*`` ones, as a scrape without honor_labels leaves them."""
        self._count(selector)
        if warnings is not None:
            warnings.extend(self.warnings)
        label, names = _RAW_MATCH.fullmatch(selector).groups()  # type: ignore[union-attr]
        out = []
        for x in self.answers.get("util_mean", []):
            if x.labels.get(label) not in names.split("|"):
                continue
            exported = any(k.startswith("exported_") for k in x.labels)
            name, value = ("DCGM_FI_DEV_GPU_UTIL", x.value * 100) if exported else (UTIL, x.value)
            out.append(Series({"__name__": name, **x.labels}, ((x.timestamp, value),)))
        return out

    def _count(self, query: str) -> None:
        self.seen.append(query)
        if self.fail:
            self.stats.error += 1
            raise PromAPIError("cannot connect")
        self.stats.success += 1


class StandInModel:
    """Mean epoch time × epochs left, ±30 %; records what it was asked."""

    fits: ClassVar[list[int]] = []

    def __init__(self) -> None:
        self.calls: list[tuple[str, bool]] = []

    def fit(self, history: Sequence[Run]) -> StandInModel:
        StandInModel.fits.append(len(history))
        self.n_history_ = len(history)
        self.quality_ = {0.0: (0.3, 0.8), 0.5: (math.nan, math.nan)}
        return self

    def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
        self.calls.append((run.run_id, stalled))
        d = [b[1] - a[1] for a, b in zip(run.epoch_times, run.epoch_times[1:], strict=False)]
        per = sum(d) / len(d) if d else 60.0
        left = max(0.0, (run.epochs_planned - run.epochs_done) * per - (now - run.last_timestamp))
        return Forecast(0.7 * left, left, 1.3 * left, "rate", n_obs=len(d), stalled=stalled)


def s(value: float, **labels: str) -> Sample:
    return Sample(labels, value, NOW)


def job(
    run_id: str,
    planned: float,
    ends: list[tuple[float, float]],
    start: float,
    present: bool = True,
    pod: str | None = None,
    container: str = "c",
) -> dict[str, list[Sample]]:
    lab = {
        "node": "n1",
        "namespace": "ml",
        "pod": pod or f"pod-{run_id}",
        "container": container,
        "run_id": run_id,
    }
    epoch, last = ends[-1] if ends else (0.0, math.nan)
    out = {
        "planned": [s(planned, **lab)],
        "epoch": [s(epoch, **lab)],
        "start": [s(start, **lab)],
        "last_end": [s(last, **lab)] if ends else [],
        "present": [s(planned, **lab)] if present else [],
    }
    return out


def merge(*parts: dict) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for p in parts:
        for k, v in p.items():
            out.setdefault(k, []).extend(v)
    return out


@pytest.fixture
def store(tmp_path: Path):
    st = HistoryStore.open(tmp_path / "h.sqlite")
    yield st
    st.close()


def make_cycle(client, store, clock=lambda: NOW, **settings) -> Cycle:
    StandInModel.fits = []
    settings.setdefault("background_refit", False)
    return Cycle(client, store, CycleSettings(**settings), model_factory=StandInModel, clock=clock)


def test_one_cycle_forecasts_running_and_records_vanished(store: HistoryStore) -> None:
    client = CannedClient(
        merge(
            job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300),
            job("gone", 10, [(1, NOW - 500)], NOW - 600, present=False),
        )
    )
    fs = make_cycle(client, store).run()
    assert isinstance(fs, ForecastSet)
    (jf,) = fs.jobs
    assert jf.run.run_id == "run" and jf.node == "n1"
    assert jf.completion_timestamps == pytest.approx((NOW + 560, NOW + 800, NOW + 1040))
    assert fs.n_running == 1 and fs.n_finished == 1 and fs.n_history == 1
    assert [r.completed for r in store.finished()] == [False]
    # no run reports only steps and none is overdue: neither step query, no util_recent;
    # no pending pod selects a node label: no node labels' query
    assert fs.queries == queries.QUERIES_PER_CYCLE - 4 == len(client.seen) <= 20
    assert queries.STEP_RANGE.format(runs="") not in client.seen


def test_query_count_does_not_grow_with_jobs(store: HistoryStore) -> None:
    many = merge(*(job(f"r{i}", 10, [(1, NOW - 60)], NOW - 120) for i in range(300)))
    steps_only = {"namespace": "ml", "pod": "pod-tqdm", "container": "c", "run_id": "tqdm"}
    many["steps_planned"] = [s(1000, **steps_only)]
    many["last_report"] = [s(NOW - 5, **steps_only)]  # every run has a last report
    many = merge(many, job("overdue", 10, [(1, NOW - 3600)], NOW - 4000))  # may be stalled
    # a pending pod selecting a pool: the node labels' query too
    many["ksm_pod_meta"] = [s(1, uid="u9", meta="nodeselectors", nodeselector_pool="a")]
    client = CannedClient(many)
    fs = make_cycle(client, store).run()
    assert len(fs.jobs) == 301
    assert len(client.seen) == fs.queries == queries.QUERIES_PER_CYCLE <= 20  # all of them
    assert queries.STEP_RANGE.format(runs="") in client.seen


def test_a_first_cycle_over_many_runs_stays_within_the_most_queries(store: HistoryStore) -> None:
    """A new forecaster's first cycle over 10,000 runs and a 6 h lookback reads the epoch
    ranges at the fine step in ``MAX_RANGE_WINDOWS`` time windows each: 18 queries
    beyond one of each kind, still within ``MOST_QUERIES_PER_CYCLE``, the count the
    liveness probe's wedged limit allows a cycle (server.wedged_limit_seconds)."""
    many = merge(*(job(f"r{i}", 10, [(1, NOW - 60)], NOW - 120) for i in range(9_998)))
    steps_only = {"namespace": "ml", "pod": "pod-tqdm", "container": "c", "run_id": "tqdm"}
    many["steps_planned"] = [s(1000, **steps_only)]
    many["last_report"] = [s(NOW - 5, **steps_only)]
    many = merge(many, job("overdue", 10, [(1, NOW - 3600)], NOW - 4000))  # may be stalled
    many["ksm_pod_meta"] = [s(1, uid="u9", meta="nodeselectors", nodeselector_pool="a")]
    client = CannedClient(many)
    fs = make_cycle(client, store, lookback_seconds=6 * 3600).run()
    windows = [q for q in client.seen if q.startswith("gpu_eta_training_epoch")]
    assert len(windows) == len(queries.RANGE) * queries.MAX_RANGE_WINDOWS
    assert fs.queries == queries.QUERIES_PER_CYCLE + len(windows) - len(queries.RANGE)
    assert fs.queries <= queries.MOST_QUERIES_PER_CYCLE


def test_empty_prometheus_and_empty_history(store: HistoryStore) -> None:
    fs = make_cycle(CannedClient({}), store).run()
    assert fs.jobs == () and fs.n_history == 0
    assert StandInModel.fits == [0]  # the model is still fitted (on nothing)


def test_one_epoch_job_forecast_then_completed(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(job("one", 1, [], NOW - 30))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=0)
    fs = cycle.run()
    (jf,) = fs.jobs
    assert jf.run.epoch_times == ((0.0, NOW - 30),) and min(jf.completion_timestamps) >= NOW
    t[0] = NOW + 60
    client.answers = job("one", 1, [(1, NOW + 40)], NOW - 30)
    fs = cycle.run()
    assert fs.jobs == () and fs.n_finished == 1
    (done,) = store.finished()
    assert done.completed is True and done.epoch_times[-1] == (1.0, NOW + 40)
    assert StandInModel.fits == [0, 1]  # refit because the history changed


def test_a_run_just_started_and_not_yet_present_is_not_finished(store: HistoryStore) -> None:
    """A cycle's queries all ask ``now``, one after another: a run whose first report
    was scraped between them has its plan and start in the answers but not its last
    report (``present``). It used to be stored as never seen and finished at once as
    vanished ("incomplete"), then never forecast (the live integration test's trainer,
    once in three CI runs). It gets the vanish grace from its start, like a run seen."""
    t = [NOW]
    client = CannedClient(job("new", 10, [], NOW - 1, present=False))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    fs = cycle.run()
    assert fs.n_finished == 0 and [s.run.run_id for s in store.running()] == ["new"]
    t[0] += 5
    client.answers = job("new", 10, [(1, NOW + 3)], NOW - 1)
    fs = cycle.run()
    assert [jf.run.run_id for jf in fs.jobs] == ["new"] and store.count_finished() == 0
    # one that started longer ago than the grace and is not present: finished at once
    client.answers = merge(
        job("new", 10, [(1, NOW + 3)], NOW - 1), job("old", 10, [], NOW - 700, present=False)
    )
    fs = cycle.run()
    assert fs.n_finished == 1 and [r.run_id for r in store.finished()] == ["old"]


def test_refit_only_when_history_changed_and_period_passed(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 1000, present=False))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=600)
    cycle.run()  # the store is updated before the fit: "a" is already history
    assert StandInModel.fits == [1]
    client.answers = job("b", 10, [(1, NOW - 10)], NOW - 1000, present=False)
    t[0] += 60
    cycle.run()
    assert StandInModel.fits == [1]  # history changed but the period has not passed
    t[0] += 600
    cycle.run()
    assert StandInModel.fits == [1, 2]
    t[0] += 6000
    cycle.run()
    assert StandInModel.fits == [1, 2]  # period passed but nothing changed


class _LearningModel(StandInModel):
    """Records how many runs each ``update`` was given, and the runs it learns."""

    updates: ClassVar[list[int]] = []
    learnt: ClassVar[list[str]] = []

    def update(self, new_runs: Sequence[Run]) -> None:
        _LearningModel.updates.append(len(new_runs))
        _LearningModel.learnt.extend(run.run_id for run in new_runs)
        self.n_history_ += len(new_runs)


def test_runs_finished_between_refits_reach_the_model_by_update(store: HistoryStore) -> None:
    _LearningModel.updates = []
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 1000, present=False))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=600)
    cycle.model_factory = _LearningModel
    cycle.run()
    assert StandInModel.fits == [1] and _LearningModel.updates == []  # the fit saw "a"
    client.answers = job("b", 10, [(1, NOW - 10)], NOW - 1000, present=False)
    t[0] += 60
    cycle.run()
    assert StandInModel.fits == [1]  # no refit yet (the period has not passed) ...
    assert _LearningModel.updates == [1]  # ... but "b" reached the model
    t[0] += 60
    cycle.run()
    assert _LearningModel.updates == [1]  # nothing new, no update


def test_runs_finished_between_refits_reach_the_model_when_the_history_is_full(
    store: HistoryStore,
) -> None:
    """At ``fit_runs`` the store's list stays as long as a run finishes (the oldest
    makes room): the model must still be handed the new run after what it saw."""
    t = [NOW]
    client, cycle = _learning_cycle(store, t, fit_runs=2)
    assert StandInModel.fits == [1]
    _finish_one_a_cycle(client, cycle, t, ("b", "c"))  # after "c" the list is full
    assert StandInModel.fits == [1]  # no refit: "b" and "c" came by update
    assert _LearningModel.learnt == ["b", "c"]
    t[0] += 600
    cycle.run()  # the refit, on the most recent two runs only
    assert StandInModel.fits == [1, 2] and _LearningModel.learnt == ["b", "c"]


def test_between_two_fits_the_model_learns_at_most_fit_runs_runs(store: HistoryStore) -> None:
    """Each run given to ``update`` stays in the model until a refit: at most
    ``fit_runs`` of them between two fits (while refits fail it would grow with every
    run that finishes); the next ones are learnt after the refit."""
    t = [NOW]
    client, cycle = _learning_cycle(store, t, fit_runs=2)
    _finish_one_a_cycle(client, cycle, t, ("b", "c", "d"))
    assert StandInModel.fits == [1] and _LearningModel.learnt == ["b", "c"]  # "d" waits
    t[0] += 600
    cycle.run()  # the refit sees "d"
    assert StandInModel.fits == [1, 2]
    _finish_one_a_cycle(client, cycle, t, ("e",))
    assert _LearningModel.learnt == ["b", "c", "e"]


def _learning_cycle(
    store: HistoryStore, t: list[float], fit_runs: int
) -> tuple[CannedClient, Cycle]:
    """A cycle whose ``_LearningModel`` was fitted on one finished run, "a" (refits
    every 600 s of ``t``)."""
    _LearningModel.updates, _LearningModel.learnt = [], []
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 1000, present=False))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=600, fit_runs=fit_runs)
    cycle.model_factory = _LearningModel
    cycle.run()
    return client, cycle


def _finish_one_a_cycle(
    client: CannedClient, cycle: Cycle, t: list[float], names: Sequence[str]
) -> None:
    """Each run of ``names`` finishes in a cycle of its own, a minute after the last."""
    for name in names:
        client.answers = job(name, 10, [(1, t[0] - 10)], t[0] - 1000, present=False)
        t[0] += 60
        cycle.run()


def test_the_fit_sees_only_the_most_recent_fit_runs(store: HistoryStore) -> None:
    """``fit_runs`` and ``fit_points`` bound what the model is fitted on (memory and fit
    time at scale)."""
    runs = [
        Run(f"h{i}", 2, ((0, 100.0 * i), (1, 100.0 * i + 10), (2, 100.0 * i + 20)))
        for i in range(5)
    ]
    store.import_finished(runs)
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    make_cycle(client, store, fit_runs=2).run()
    assert StandInModel.fits == [2]
    make_cycle(client, store, fit_runs=0).run()  # 0: all of them
    assert StandInModel.fits == [5]
    make_cycle(client, store, fit_points=7).run()  # 3 points a run: the newest two
    assert StandInModel.fits == [2]
    make_cycle(client, store, fit_runs=0, fit_points=0).run()
    assert StandInModel.fits == [5]


def test_stalled_needs_no_progress_and_an_idle_gpu(store: HistoryStore) -> None:
    old = NOW - 3600
    parts = merge(
        job("idle", 10, [(1, old - 60), (2, old)], old - 120, pod="p-idle"),
        job("busy", 10, [(1, old - 60), (2, old)], old - 120, pod="p-busy"),
        job("unknown", 10, [(1, old - 60), (2, old)], old - 120, pod="p-unknown"),
        job("fresh", 10, [(1, NOW - 60), (2, NOW - 10)], NOW - 120, pod="p-fresh"),
        {
            "util_recent": [
                s(0.0, namespace="ml", pod="p-idle", container="c"),
                s(0.9, namespace="ml", pod="p-busy", container="c"),
                s(0.0, namespace="ml", pod="p-fresh", container="c"),
            ]
        },
    )
    cycle = make_cycle(CannedClient(parts), store, stall_after_seconds=900)
    fs = cycle.run()
    stalled = {j.run.run_id: j.forecast.stalled for j in fs.jobs}
    assert stalled == {"idle": True, "busy": False, "unknown": False, "fresh": False}
    assert ("idle", True) in cycle.model.calls  # the model was asked to hold the ETA


def test_prometheus_failure_raises_and_changes_nothing(store: HistoryStore) -> None:
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store)
    cycle.run()
    client.fail = True
    with pytest.raises(PromAPIError):
        cycle.run()
    assert [r.run.run_id for r in store.running()] == ["a"]


def test_bad_model_output_is_skipped_and_counted(store: HistoryStore) -> None:
    class Broken(StandInModel):
        def predict(self, run: Run, now: float, stalled: bool = False) -> Forecast:
            if run.run_id == "nan":
                return Forecast(math.nan, 1, 2, "rate")
            if run.run_id == "boom":
                raise RuntimeError("boom")
            return Forecast(-50, 30, 10, "rate")  # unsorted and negative

    parts = merge(*(job(r, 10, [(1, NOW - 10)], NOW - 100) for r in ("nan", "boom", "neg")))
    cycle = Cycle(
        CannedClient(parts), store, CycleSettings(), model_factory=Broken, clock=lambda: NOW
    )
    fs = cycle.run()
    assert fs.job_errors == {"invalid_forecast": 1, "predict_failed": 1}
    (jf,) = fs.jobs
    assert (jf.forecast.p10, jf.forecast.p50, jf.forecast.p90) == (0.0, 10, 30)
    assert jf.completion_timestamps[0] == NOW  # never in the past


def test_a_run_whose_assembly_raises_is_skipped_counted_and_logged_once(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An error no check foresaw in one run's arithmetic (``assemble``'s guard) costs
    that run: the cycle goes on, the run is counted as ``assemble_failed`` and named in
    one WARNING while it keeps failing, not one per cycle."""

    class Exploding(float):  # a value whose arithmetic raises, as a bug would
        def __rtruediv__(self, other: object) -> float:
            raise ArithmeticError("boom")

    lab = {"node": "n1", "namespace": "ml", "pod": "p", "container": "c", "run_id": "bug"}
    parts = merge(
        job("good", 10, [(1, NOW - 10)], NOW - 100),
        {
            "steps_planned": [s(Exploding(1000), **lab)],
            "step": [s(10, **lab)],
            "start": [s(NOW - 100, **lab)],
            "last_report": [s(NOW - 5, **lab)],
            "present": [s(NOW - 5, **lab)],
        },
    )
    seen = Series(lab, ((NOW - 60, 5.0), (NOW - 30, 8.0)))
    cycle = make_cycle(CannedClient(parts, {"step_range": [seen]}), store, range_every=1)
    with caplog.at_level("WARNING"):
        for _ in range(2):
            fs = cycle.run()
            assert fs.job_errors == {"assemble_failed": 1}
            assert [j.run.run_id for j in fs.jobs] == ["good"]
    said = [r.getMessage() for r in caplog.records if "bug" in r.getMessage()]
    assert len(said) == 1 and "ArithmeticError: boom" in said[0], said


def test_runs_that_start_failing_together_are_one_warning(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug that fails every run's assembly is one WARNING with the count and the first
    run's error, not one line per run of the cluster; runs failing later get theirs."""
    cycle = make_cycle(CannedClient({}, {}), store)
    failed = {("n", "ml", f"p{i}", f"r{i}"): "ArithmeticError: boom" for i in range(500)}
    with caplog.at_level("WARNING"):
        cycle._log_failed(failed)
        cycle._log_failed(failed)
        cycle._log_failed({**failed, ("n", "ml", "q", "late"): "KeyError: x"})
    said = [r.getMessage() for r in caplog.records if "skipped: reading" in r.getMessage()]
    assert len(said) == 2, said
    assert said[0].startswith("500 run(s)") and "n/ml/p0/r0: ArithmeticError: boom" in said[0]
    assert said[1].startswith("1 run(s)") and "late: KeyError: x" in said[1]


def test_sanitize_keeps_good_forecasts_identical() -> None:
    fc = Forecast(1, 2, 3, "blend")
    assert sanitize(fc) is fc
    assert sanitize(Forecast(1, math.inf, 3, "blend")) is None
    # a repaired forecast keeps everything but its quantiles
    bad = Forecast(-5, 9, 4, "prior", n_obs=7, stalled=True, converged=False, warnings=("w",))
    assert sanitize(bad) == Forecast(0.0, 4.0, 9.0, "prior", 7, True, False, ("w",))


def test_gpu_free_times_need_every_holder_forecast() -> None:
    from gpu_eta.forecaster.forecast import JobForecast

    run = Run("r", 10, ((0, 0.0),), namespace="ml", pod="train")
    jf = JobForecast(run, "n1", Forecast(1, 2, 3, "rate"), (10.0, 20.0, 30.0))
    run2 = Run("r2", 10, ((0, 0.0),), namespace="ml", pod="train2")
    jf2 = JobForecast(run2, "n1", Forecast(1, 2, 3, "rate"), (15.0, 18.0, 40.0))
    allocs = [
        Allocation("n1", "0", "GPU-0", "ml", "train", "c"),
        Allocation("n1", "1", "GPU-1", "ml", "train", "c"),
        Allocation("n1", "1", "GPU-1", "ml", "notebook", "c"),  # idle holder: unknown
        Allocation("n1", "2", "GPU-2", "ml", "train", "c"),
        Allocation("n1", "2", "GPU-2", "ml", "train2", "c"),  # time-sliced: latest end wins
    ]
    got = {g.uuid: g.timestamps for g in gpu_free_times(allocs, [jf, jf2])}
    assert got == {"GPU-0": (10.0, 20.0, 30.0), "GPU-2": (15.0, 20.0, 40.0)}


def test_a_pods_gpus_need_a_forecast_for_each_container_holding_one() -> None:
    """A pod's GPUs are released when the pod ends, so with two containers holding
    GPUs each needs a forecast: a notebook beside the training container (no run) leaves
    the pod's GPUs without a free time; with both forecast, the later end wins. A run
    whose report named no GPU-holding container counts for the pod's only one."""
    from gpu_eta.forecaster.forecast import JobForecast

    def forecast(container: str, ends: tuple[float, float, float]) -> JobForecast:
        run = Run(f"r-{container}", 10, ((0, 0.0),), namespace="ml", pod="p", container=container)
        return JobForecast(run, "n1", Forecast(1, 2, 3, "rate"), ends)

    train, eval_ = forecast("train", (10.0, 20.0, 30.0)), forecast("eval", (5.0, 25.0, 28.0))
    two = [
        Allocation("n1", "0", "GPU-0", "ml", "p", "train"),
        Allocation("n1", "1", "GPU-1", "ml", "p", "notebook"),
    ]
    assert gpu_free_times(two, [train]) == []
    both = [two[0], dataclasses.replace(two[1], container="eval")]
    got = {g.uuid: g.timestamps for g in gpu_free_times(both, [train, eval_])}
    assert got == {"GPU-0": (10.0, 25.0, 30.0), "GPU-1": (10.0, 25.0, 30.0)}
    # the run filed under the pod's first container, a sidecar without GPUs
    (free,) = gpu_free_times(two[:1], [forecast("sidecar", (10.0, 20.0, 30.0))])
    assert free.timestamps == (10.0, 20.0, 30.0)
    assert gpu_free_times(two, [forecast("sidecar", (10.0, 20.0, 30.0))]) == []


def test_background_refit_never_blocks_a_cycle(store: HistoryStore) -> None:
    release = threading.Event()
    fitted: list[int] = []

    class Slow(StandInModel):
        def fit(self, history: Sequence[Run]) -> Slow:
            if fitted:  # the first fit is synchronous; refits wait for the test
                assert release.wait(30)
            fitted.append(len(history))
            return super().fit(history)

    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    settings = CycleSettings(
        refit_seconds=0, background_refit=True, refit_in_process=False, vanish_grace_seconds=0
    )
    cycle = Cycle(client, store, settings, model_factory=Slow, clock=lambda: t[0])
    cycle.run()
    first = cycle.model
    client.answers = job("a", 10, [(1, NOW - 10)], NOW - 100, present=False)  # a finishes
    t[0] += 60
    fs = cycle.run()  # starts the refit in the background and returns at once
    assert fs.n_history == 1 and cycle.model is first
    release.set()
    cycle.wait_for_refit(30)
    cycle.run()
    assert cycle.model is not first and fitted == [0, 1]


def test_vanished_run_is_finished_only_after_the_grace_period(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    cycle.run()
    client.answers = {}  # the exporter restarts: series gone for a while
    t[0] += 300
    fs = cycle.run()
    assert fs.jobs == () and fs.n_finished == 0 and store.count_finished() == 0
    client.answers = job("a", 10, [(1, NOW - 10), (2, NOW + 250)], NOW - 100)  # back
    t[0] += 60
    fs = cycle.run()
    assert [j.run.run_id for j in fs.jobs] == ["a"]
    assert fs.jobs[0].run.epoch_times[-1] == (2.0, NOW + 250)
    client.answers = {}  # gone for good
    t[0] += 599
    assert cycle.run().n_finished == 0
    t[0] += 2
    assert cycle.run().n_finished == 1
    (done,) = store.finished()
    assert done.completed is False and done.epochs_done == 2


def test_a_restarted_cycle_reads_only_since_the_previous_one(store: HistoryStore) -> None:
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    make_cycle(client, store).run()
    assert "[21600s]" in client.seen[1]  # first ever: the whole lookback
    client.seen.clear()
    make_cycle(client, store, clock=lambda: NOW + 60).run()  # a new process, same file
    assert "[180s]" in client.seen[1]  # 60 s since the last query + 120 s overlap


def _exit_factory() -> StandInModel:
    os._exit(3)


class _SleepyModel(StandInModel):
    def fit(self, history: Sequence[Run]) -> _SleepyModel:
        time.sleep(30)
        return self


class _FailingModel(StandInModel):
    def fit(self, history: Sequence[Run]) -> _FailingModel:
        raise ValueError("singular matrix")


def test_fit_in_child_returns_the_fitted_model() -> None:
    history = [Run("a", 1, ((0, 0.0), (1, 10.0)), completed=True)]
    model = fit_in_child(StandInModel, history, 60)
    assert isinstance(model, StandInModel) and model.n_history_ == 1


def test_fit_in_child_failures_are_model_errors() -> None:
    with pytest.raises(ModelError, match="ValueError: singular matrix"):
        fit_in_child(_FailingModel, [], 60)
    with pytest.raises(ModelError, match="child died"):
        fit_in_child(_exit_factory, [], 60)
    started = time.monotonic()
    with pytest.raises(ModelError, match=r"longer than 0\.5s"):
        fit_in_child(_SleepyModel, [], 0.5)
    assert time.monotonic() - started < 20  # the child was killed, not waited for


def test_background_refit_in_a_child_process(store: HistoryStore) -> None:
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 10)], NOW - 100))
    settings = CycleSettings(refit_seconds=0, vanish_grace_seconds=0)  # process is the default
    cycle = Cycle(client, store, settings, model_factory=StandInModel, clock=lambda: t[0])
    cycle.run()
    first = cycle.model
    client.answers = {}
    t[0] += 60
    cycle.run()  # "a" vanished: history changed, refit starts in a child
    cycle.wait_for_refit(60)
    fs = cycle.run()
    assert cycle.model is not first and cycle.model.n_history_ == 1 == fs.n_history


def test_one_run_id_in_two_pods_and_two_containers_is_never_spliced(
    store: HistoryStore,
) -> None:
    """Issue 3: a hand-written run id reused elsewhere gives separate runs and forecasts."""
    t = [NOW]
    old = NOW - 3600

    def answers(b_present: bool = True) -> dict[str, list[Sample]]:
        return merge(
            job("my-run-1", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300, pod="a"),
            job("my-run-1", 4, [(1, old - 500)], old - 1000, pod="b", present=b_present),
            job("my-run-1", 20, [(5, NOW - 50)], NOW - 500, pod="b", container="side"),
            {
                "util_recent": [s(0.0, namespace="ml", pod="b", container="c")],
                "allocated": [
                    s(1, node="n1", gpu="0", UUID="GPU-0", namespace="ml", pod="a", container="c"),
                    s(1, node="n1", gpu="1", UUID="GPU-1", namespace="ml", pod="b", container="c"),
                ],
            },
        )

    client = CannedClient(answers())
    cycle = make_cycle(client, store, clock=lambda: t[0], vanish_grace_seconds=600)
    fs = cycle.run()
    jobs = {run_key(j.run): j for j in fs.jobs}
    a, b, side = (
        ("ml", "a", "c", "my-run-1"),
        ("ml", "b", "c", "my-run-1"),
        ("ml", "b", "side", "my-run-1"),
    )
    assert set(jobs) == {a, b, side} and fs.n_running == 3
    assert jobs[a].run.epoch_times == ((0, NOW - 300), (2, NOW - 100))
    assert jobs[b].run.epoch_times == ((0, old - 1000), (1, old - 500))
    assert jobs[side].run.epoch_times == ((0, NOW - 500), (5, NOW - 50))
    assert jobs[a].run.epochs_planned == 10 and jobs[b].run.epochs_planned == 4
    assert jobs[a].completion_timestamps == pytest.approx((NOW + 1050, NOW + 1500, NOW + 1950))
    # stall is judged per run: b made no progress for an hour on an idle GPU, a did
    assert (jobs[a].forecast.stalled, jobs[b].forecast.stalled) == (False, True)
    assert not jobs[side].forecast.stalled  # no GPU series for its container: b's says idle
    # each GPU's free time follows the runs of the pod holding it
    gpus = {g.uuid: g.timestamps for g in fs.gpus}
    assert gpus["GPU-0"] == jobs[a].completion_timestamps
    assert gpus["GPU-1"] == tuple(
        max(x, y)
        for x, y in zip(
            jobs[b].completion_timestamps, jobs[side].completion_timestamps, strict=True
        )
    )
    # pod b's run vanishes: only it is finished, after the grace period
    client.answers = answers(b_present=False)
    for _ in range(2):  # reads within the grace of each other (else the gap is uncovered)
        t[0] += 301
        fs = cycle.run()
    assert {run_key(j.run) for j in fs.jobs} == {a, side} and fs.n_finished == 1
    (done,) = store.finished()
    assert run_key(done) == b and done.completed is False and done.epochs_planned == 4
    assert {run_key(r.run) for r in store.running()} == {a, side}


def test_pending_pods_get_predicted_starts_from_the_running_jobs_forecasts(
    store: HistoryStore,
) -> None:
    """One node with 1 GPU held by a forecast job; a pod waits for it, another never fits."""
    gpu = {"resource": "nvidia_com_gpu"}
    ksm = {
        "ksm_nodes": [s(1, node="n1", label_nvidia_com_gpu_product="A100", **gpu)],
        "ksm_pods": [
            s(1, namespace="ml", pod="pod-run", uid="u1", node="n1", phase="Running", **gpu),
            s(1, namespace="ml", pod="waits", uid="u2", phase="Pending", **gpu),
            s(2, namespace="ml", pod="too-big", uid="u3", phase="Pending", **gpu),
        ],
        "ksm_pod_times": [
            s(NOW - 50, uid="u2", time="created"),
            s(NOW - 40, uid="u3", time="created"),
        ],
    }
    client = CannedClient(merge(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300), ksm))
    fs = make_cycle(client, store).run()
    assert fs.pending is not None
    by = {p.pod: p.prediction for p in fs.pending.pods}
    assert by["too-big"].status == "never_fits" and by["too-big"].starts is None
    assert by["waits"].status == "predicted"
    # the GPU frees when the run ends: the start's P10..P90 follow its completion's
    ends = fs.jobs[0].completion_timestamps
    for got, want in zip(by["waits"].starts, ends, strict=True):
        assert got == pytest.approx(want, abs=0.1 * (ends[2] - ends[0]))
    assert {(r.product, r.units) for r in fs.pending.requests} == {("A100", 1)}


@pytest.mark.parametrize("priorities", [{}, {"high": 1000}])
def test_the_arrivals_priority_classes_are_read_only_with_a_mapping(
    store: HistoryStore, priorities: dict[str, int]
) -> None:
    """Without ``--pending.priority-class`` every class reads 0, so the queue's first
    round leaves out the arrivals' ``kube_pod_info`` (``kube_state.first_round``): the
    GPU pods created over the window, read each cycle for nothing. With a mapping it
    reads them."""
    gpu = {"resource": "nvidia_com_gpu"}
    ksm = {"ksm_nodes": [s(1, node="n1", label_nvidia_com_gpu_product="A100", **gpu)]}
    client = CannedClient(merge(job("run", 10, [(1, NOW - 200)], NOW - 300), ksm))
    pending = PendingSettings(priorities=priorities)
    assert make_cycle(client, store, pending=pending).run().pending is not None
    (first,) = [q for q in client.seen if "ksm_arrivals" in q]
    assert ('kube_pod_info{priority_class!=""}[' in first) == bool(priorities)


def test_the_nodes_labels_pending_pods_select_are_read_in_a_second_query(
    store: HistoryStore,
) -> None:
    """A pending pod selects ``pool: b``: once the folded query shows it, one more query
    reads the GPU nodes' ``kube_node_labels`` for that key only (not every allow-listed
    label: ``kube_state.node_labels_query``), and the pod waits for pool b's node, held
    by a forecast run, though pool a's node is free."""
    gpu = {"resource": "nvidia_com_gpu"}
    ksm = {
        "ksm_nodes": [s(1, node=n, label_nvidia_com_gpu_product="A100", **gpu) for n in "ab"],
        "ksm_pods": [
            s(1, namespace="ml", pod="pod-run", uid="u1", node="b", phase="Running", **gpu),
            s(1, namespace="ml", pod="waits", uid="u2", phase="Pending", **gpu),
        ],
        "ksm_pod_times": [s(NOW - 50, uid="u2", time="created")],
        "ksm_pod_meta": [s(1, uid="u2", meta="nodeselectors", nodeselector_pool="b")],
        kube_state.NODE_LABELS_PART: [
            s(1, node="a", label_pool="a"),
            s(1, node="b", label_pool="b"),
        ],
    }
    client = CannedClient(merge(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300), ksm))
    fs = make_cycle(client, store).run()
    (asked,) = [q for q in client.seen if kube_state.NODE_LABELS_PART in q]
    assert "max by (node, label_pool) (kube_node_labels)" in asked
    assert kube_state.PENDING_SINCE_PART not in asked  # the pod has kube_pod_created
    assert fs.queries == len(client.seen)
    assert fs.pending is not None and fs.pending.selectors_checked == ("pool",)
    (waits,) = fs.pending.pods
    assert waits.prediction.status == "predicted"
    assert waits.prediction.starts == pytest.approx(fs.jobs[0].completion_timestamps, abs=60)


def test_node_labels_of_many_keys_are_read_in_parts_and_all_held(store: HistoryStore) -> None:
    """Another pod selects 100 node-feature-discovery keys, more than one part of the
    node labels' read holds (``kube_state.MAX_LABEL_PART_CHARS``): the keys are asked in
    two parts, ``pool`` (last by name) in the second, whose answer is held as the
    first's: the pod selecting ``pool: b`` waits for pool b's node."""
    gpu = {"resource": "nvidia_com_gpu"}
    features = {f"nodeselector_feature_node_kubernetes_io_f{i:03d}_x": "true" for i in range(100)}
    second = kube_state.node_label_part(1)
    ksm = {
        "ksm_nodes": [s(1, node=n, label_nvidia_com_gpu_product="A100", **gpu) for n in "ab"],
        "ksm_pods": [
            s(1, namespace="ml", pod="pod-run", uid="u1", node="b", phase="Running", **gpu),
            s(1, namespace="ml", pod="waits", uid="u2", phase="Pending", **gpu),
            s(1, namespace="ml", pod="nfd", uid="u3", phase="Pending", **gpu),
        ],
        "ksm_pod_times": [s(NOW - 50, uid=u, time="created") for u in ("u2", "u3")],
        "ksm_pod_meta": [
            s(1, uid="u2", meta="nodeselectors", nodeselector_pool="b"),
            s(1, uid="u3", meta="nodeselectors", **features),
        ],
        kube_state.NODE_LABELS_PART: [s(1, node="a"), s(1, node="b")],
        second: [s(1, node="a", label_pool="a"), s(1, node="b", label_pool="b")],
    }
    client = CannedClient(merge(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300), ksm))
    fs = make_cycle(client, store).run()
    asked = "".join(q for q in client.seen if kube_state.NODE_LABELS_PART in q)
    assert f'"{second}"' in asked and "label_pool" in asked
    assert asked.count("label_feature_node_kubernetes_io_f") == 100
    assert fs.queries == len(client.seen)
    assert fs.pending is not None and fs.pending.selectors_checked == ("pool",)
    waits = next(p for p in fs.pending.pods if p.pod == "waits")
    assert waits.prediction.starts == pytest.approx(fs.jobs[0].completion_timestamps, abs=60)


def test_pods_without_created_series_are_placed_by_a_second_query_naming_them(
    store: HistoryStore,
) -> None:
    """OpenShift's KSM exports no ``kube_pod_created``: once the folded query shows a
    pending GPU pod without it, one more query asks when Prometheus first saw that pod
    (by uid, ``kube_state.pending_since_query``) Pending, and the pod is queued by that
    time, behind the one pending longer; no pod having the series at all, the same
    query asks for the GPU pods first seen in the arrival window (the arrivals,
    ``kube_state.ARRIVALS_SEEN``). A cluster whose pods all have the series asks no
    second query (nothing selects a node label either)."""
    gpu = {"resource": "nvidia_com_gpu"}
    ksm = {
        "ksm_nodes": [s(1, node="a", label_nvidia_com_gpu_product="A100", **gpu)],
        "ksm_pods": [
            s(1, namespace="ml", pod="pod-run", uid="u1", node="a", phase="Running", **gpu),
            s(1, namespace="ml", pod="late", uid="u2", phase="Pending", **gpu),
            s(1, namespace="ml", pod="early", uid="u3", phase="Pending", **gpu),
        ],
        kube_state.PENDING_SINCE_PART: [
            s(NOW - 60, uid="u2"),
            s(NOW - 600, uid="u3"),
            s(NOW - 900, uid="u9"),  # another pod's, not asked: not answered
        ],
        kube_state.ARRIVALS_SEEN_PART: [
            s(1, namespace="ml", pod="late", uid="u2", arrival="request", **gpu),
        ],
    }
    base = job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300)
    client = CannedClient(merge(base, ksm))
    fs = make_cycle(client, store).run()
    (asked,) = [q for q in client.seen if kube_state.PENDING_SINCE_PART in q]
    assert 'uid=~"u2|u3"' in asked and kube_state.NODE_LABELS_PART not in asked
    # no pod has the series at all: the pods first seen in the window, in the same query
    assert kube_state.ARRIVALS_SEEN_PART in asked
    assert fs.queries == len(client.seen)
    assert fs.pending is not None and fs.pending.created_missing == 2
    # the one GPU frees when the run ends: the pod first seen Pending takes it; no
    # finished run tells how long that pod will hold it, so the other's start is unknown
    by = {p.pod: p.prediction for p in fs.pending.pods}
    assert (by["early"].status, by["late"].status) == ("predicted", "beyond_horizon")

    created = {"ksm_pod_times": [s(NOW - 60, uid=u, time="created") for u in ("u2", "u3")]}
    plain = CannedClient(merge(base, {**ksm, **created}))
    fs = make_cycle(plain, store).run()
    assert not [
        q
        for q in plain.seen
        if kube_state.PENDING_SINCE_PART in q or kube_state.ARRIVALS_SEEN_PART in q
    ]
    assert fs.queries == len(plain.seen) == len(client.seen) - 1
    assert fs.pending is not None and fs.pending.created_missing == 0


def test_pending_prediction_can_be_turned_off(store: HistoryStore) -> None:
    client = CannedClient(job("run", 10, [(1, NOW - 200)], NOW - 300))
    fs = make_cycle(client, store, pending=PendingSettings(enabled=False)).run()
    assert fs.pending is None
    # neither the pending queries (folded, node labels) nor the step queries nor util_recent
    assert fs.queries == queries.QUERIES_PER_CYCLE - 5


def test_gc_is_paused_during_a_cycle_and_restored_after(store: HistoryStore) -> None:
    import gc

    from gpu_eta.forecaster.refit import gc_switched

    seen = []

    class Probe(CannedClient):
        def instant(self, query: str, at: float | None = None, **kw) -> list[Sample]:
            seen.append(gc.isenabled())
            return super().instant(query, at, **kw)

    class FitProbe(StandInModel):
        def fit(self, history):
            seen_fit.append(gc.isenabled())
            return super().fit(history)

    seen_fit: list[bool] = []
    assert gc.isenabled()
    client = Probe(job("a", 10, [(1, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store)
    cycle.model_factory = FitProbe
    cycle.run()
    assert seen and not any(seen) and gc.isenabled()
    assert seen_fit == [True]  # the fit runs with the collector on
    client.fail = True
    with pytest.raises(PromAPIError):
        make_cycle(client, store).run()
    assert gc.isenabled()  # restored after a failed cycle too
    gc.disable()
    try:
        with gc_switched(False):
            pass
        assert not gc.isenabled()  # left as it was found
    finally:
        gc.enable()


_UNCHANGING = (
    "gpu_eta_training_epochs_planned",
    "gpu_eta_training_steps_planned",
    "gpu_eta_training_run_start_timestamp_seconds",
    "gpu_eta_training_batch_size",
    "gpu_eta_pod_info",
    "gpu_eta_gpu_info",
)


def unchanging(seen: list[str]) -> list[str]:
    """The queries of a cycle that ask for runs' unchanging series or the GPU models
    (not the present query, whose ``started_again`` part names the start series to
    find the runs whose start changed, nor the step query, whose parts leave out runs
    with planned epochs: queries.STEP_PARTS)."""
    return [
        q
        for q in seen
        if any(name in q for name in _UNCHANGING)
        and '"started_again"' not in q
        and '"start_step"' not in q
    ]


def labels_of(run_id: str, **more: str) -> dict[str, str]:
    return {
        "node": "n1",
        "namespace": "ml",
        "pod": f"pod-{run_id}",
        "container": "c",
        "run_id": run_id,
        **more,
    }


def test_unchanging_series_are_read_in_full_every_nth_cycle_else_only_for_new_runs(
    store: HistoryStore,
) -> None:
    t = [NOW]
    a = merge(
        job("a", 10, [(1, NOW - 10)], NOW - 100),
        {
            "batch_size": [s(64, **labels_of("a"))],
            "pod_info": [s(1, namespace="ml", pod="pod-a", label_job_name="train-a")],
            "allocated": [s(1, gpu="0", UUID="GPU-0", **labels_of("a"))],
            "gpu_info": [s(1, node="n1", UUID="GPU-0", model="A100")],
        },
    )
    client = CannedClient(a)
    # the range queries every cycle: this test counts the unchanging series' reads
    cycle = make_cycle(client, store, clock=lambda: t[0], static_full_every=3, range_every=1)
    fs = cycle.run()  # the first cycle reads them all
    assert len(unchanging(client.seen)) == 6 and fs.queries == len(client.seen) == 16

    def again(answers: dict[str, list[Sample]]) -> dict[str, Run]:
        client.answers, client.seen = answers, []
        t[0] += 60
        fs = cycle.run()
        assert fs.queries == len(client.seen)
        return {j.run.run_id: j.run for j in fs.jobs}

    runs = again(a)  # nothing new: none of them, the runs as before
    # 5 instant, GPU use and memory means, 2 range, pending
    assert unchanging(client.seen) == [] and len(client.seen) == 5 + 2 + 2 + 1
    assert runs["a"].epochs_planned == 10
    assert runs["a"].features["batch_size"] == 64 and runs["a"].features["job_name"] == "train-a"
    assert runs["a"].features["gpu_model"] == "A100"
    # a new run, its pod labelled only as exported_pod (a scrape without honor_labels):
    # one query for its series alone, matched on its run id and pod
    b = merge(
        a,
        job("b", 20, [], NOW - 50),
        {
            "batch_size": [s(32, **labels_of("b"))],
            "pod_info": [s(1, exported_namespace="ml", exported_pod="pod-b", label_app="bee")],
        },
    )
    runs = again(b)
    (read,) = unchanging(client.seen)
    assert 'run_id=~"b"' in read and 'pod=~"pod-b"' in read and '"a"' not in read
    assert runs["b"].epochs_planned == 20 and runs["b"].start_timestamp == NOW - 50
    assert runs["b"].features["batch_size"] == 32 and runs["b"].features["job_name"] == "bee"
    assert runs["a"].features["batch_size"] == 64
    # the third cycle since the full read reads them all again: a changed plan is seen
    changed = {**b, "planned": [s(12, **labels_of("a")), s(20, **labels_of("b"))]}
    runs = again(changed)
    assert len(unchanging(client.seen)) == 6 and runs["a"].epochs_planned == 12


def test_a_gpu_not_read_before_or_too_many_new_runs_mean_a_full_read(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    t = [NOW]
    a = merge(
        job("a", 10, [(1, NOW - 10)], NOW - 100),
        {
            "allocated": [s(1, gpu="0", UUID="GPU-0", **labels_of("a"))],
            "gpu_info": [s(1, node="n1", UUID="GPU-0", model="A100")],
        },
    )
    client = CannedClient(a)
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    # a new run on a GPU not read before: the GPU models are read in full again
    new_gpu = merge(
        a,
        job("b", 10, [], NOW),
        {
            "allocated": [s(1, gpu="1", UUID="GPU-1", **labels_of("b"))],
            "gpu_info": [s(1, node="n1", UUID="GPU-1", model="H100")],
        },
    )
    client.answers, client.seen = new_gpu, []
    t[0] += 60
    fs = cycle.run()
    assert sum("gpu_eta_gpu_info" in q for q in client.seen) == 1
    assert {j.run.run_id: j.run.features["gpu_model"] for j in fs.jobs} == {
        "a": "A100",
        "b": "H100",
    }
    # more new runs than one query should name: read in full instead
    monkeypatch.setattr(queries, "MAX_UNKNOWN_RUNS", 1)
    client.answers = merge(new_gpu, job("c", 10, [], NOW), job("d", 10, [], NOW))
    client.seen = []
    t[0] += 60
    fs = cycle.run()
    assert len(unchanging(client.seen)) == 6
    assert {j.run.run_id for j in fs.jobs} == {"a", "b", "c", "d"}


def test_a_run_stopped_early_whose_pod_lives_on_is_finished_once_completed_at_its_epoch(
    store: HistoryStore,
) -> None:
    """Its end series read with ``present`` (no query more): finished in that cycle,
    completed at its 2 epochs of 10, no forecast; its epoch ends read as an ending run's
    in that cycle only, not in each later one its pod (and end series) lives on."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)
    ended = [s(NOW + 50, node="n1", namespace="ml", pod="pod-a", container="c", run_id="a")]

    def at(now: float, end: bool) -> ForecastSet:
        t[0] = now
        client.answers = merge(
            job("a", 10, [(1, NOW - 30), (2, NOW + 40)], NOW - 100),
            job("b", 10, [(1, NOW - 40)], NOW - 100),
            {"ended": ended if end else []},
        )
        client.seen = []
        return cycle.run()

    at(NOW, False)
    assert len(at(NOW + 60, False).jobs) == 2 and store.finished() == []
    fs = at(NOW + 120, True)
    assert [j.run.run_id for j in fs.jobs] == ["b"] and fs.n_finished == 1
    assert fs.queries == len(queries.DYNAMIC) + 1 + 2 + 2  # its ranges and pod's means
    (done,) = store.finished()
    assert done.completed and (done.epochs_done, done.epochs_planned) == (2, 2)
    assert any('run_id=~"a"' in q for q in client.seen)
    for later in range(180, 720, 60):  # its pod lives on: not read again, not finished again
        fs = at(NOW + later, True)
        assert [j.run.run_id for j in fs.jobs] == ["b"] and fs.n_finished == 0
        assert not any('run_id=~"a"' in q for q in client.seen)
        assert [r.run.run_id for r in store.running()] == ["b"]


def test_a_run_completed_at_its_plan_whose_pod_lives_on_is_read_only_once(
    store: HistoryStore,
) -> None:
    """A Job's Succeeded pod keeps the series of a run at its plan for hours: the cycle
    that finishes it reads its epoch ends as an ending run's; later cycles, once the
    cycle's memory of what it finished (a read window) lets it go, find it completed
    with its start in the history and neither read it by name nor store it again.
    Another run under its key, with a later start, is read and recorded."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)
    start_a, plan = NOW - 100, 2
    stored: list[str] = []  # the runs each cycle hands the history
    record = store.record
    store.record = lambda updates, **kw: record(  # type: ignore[method-assign]
        [stored.append(u.run_id) or u for u in updates], **kw
    )

    def at(now: float, a: dict) -> ForecastSet:
        t[0] = now
        client.answers = merge(a, job("b", 10, [(1, NOW - 40)], NOW - 100))
        client.seen = []
        return cycle.run()

    at(NOW, job("a", plan, [(1, NOW - 30)], start_a))
    fs = at(NOW + 60, job("a", plan, [(1, NOW - 30), (2, NOW + 40)], start_a))
    assert [j.run.run_id for j in fs.jobs] == ["b"] and fs.n_finished == 1
    assert any('run_id=~"a"' in q for q in client.seen)
    (done,) = store.finished()
    assert done.completed and done.epochs_done == 2
    named = restored = 0
    for later in range(120, 1320, 60):  # its pod lives on, its series too
        stored.clear()
        fs = at(NOW + later, job("a", plan, [(1, NOW - 30), (2, NOW + 40)], start_a))
        restored += "a" in stored
        named += any('run_id=~"a"' in q for q in client.seen)
        assert [j.run.run_id for j in fs.jobs] == ["b"] and fs.n_finished == 0
        assert fs.queries <= 20
        assert [r.run.run_id for r in store.running()] == ["b"]
    assert (named, restored) == (0, 0)
    assert [(r.run_id, r.epochs_done) for r in store.finished()] == [("a", 2)]
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)  # a restart
    for later in (1320, 1380, 1440):  # the history says so: its first read is a full one
        stored.clear()
        fs = at(NOW + later, job("a", plan, [(1, NOW - 30), (2, NOW + 40)], start_a))
        assert "a" not in stored and not any('run_id=~"a"' in q for q in client.seen)
    # trained again under its name: a new run, read (its start anew) and forecast
    fs = at(NOW + 1500, job("a", plan, [(1, NOW + 1480)], NOW + 1450))
    assert sorted(j.run.run_id for j in fs.jobs) == ["a", "b"]
    assert {r.run.start_timestamp for r in store.running() if r.run.run_id == "a"} == {NOW + 1450}


def test_epoch_ends_between_cycles_are_read_one_cycle_in_range_every(
    store: HistoryStore,
) -> None:
    """The range queries go out in the first cycle and then one cycle in ``range_every``,
    over the span since the previous range read plus the overlap; in between, each
    run's latest epoch end (the instant queries) keeps its forecast current, and the
    ends in between arrive with the next range read."""
    t = [NOW]
    lab = labels_of("a")
    client = CannedClient(job("a", 10, [(1, NOW - 30)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=3, overlap_seconds=120)

    def at(now: float, ends: list[tuple[float, float]]) -> Run:
        """A cycle at ``now`` where the scrapes saw epochs ``ends``; its run ``a``."""
        t[0] = now
        client.answers = job("a", 10, ends, NOW - 100)
        client.ranges = {
            "epoch_range": [Series(lab, tuple((ts, e) for e, ts in ends))],
            "epoch_end_range": [Series(lab, tuple((ts, ts) for _e, ts in ends))],
        }
        client.range_spans = []
        (jf,) = cycle.run().jobs
        return jf.run

    run = at(NOW, [(1, NOW - 30)])  # the first cycle: ranges over the first window
    assert [name for name, *_ in client.range_spans] == ["epoch_range", "epoch_end_range"]
    assert run.epoch_times[-1] == (1, NOW - 30)
    # two cycles without range queries: the latest end is current, epoch 2 is not read
    run = at(NOW + 60, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 50)])
    assert client.range_spans == [] and run.epoch_times == (
        (0, NOW - 100),
        (1, NOW - 30),
        (3, NOW + 50),
    )
    run = at(NOW + 120, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 50), (4, NOW + 110)])
    assert client.range_spans == [] and [e for e, _ in run.epoch_times] == [0, 1, 3, 4]
    # the third cycle since: the range read covers everything since the last one
    run = at(NOW + 180, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 50), (4, NOW + 110)])
    assert {(start, end) for _name, start, end in client.range_spans} == {(NOW - 120, NOW + 180)}
    assert [e for e, _ in run.epoch_times] == [0, 1, 2, 3, 4]
    assert dict(run.epoch_times)[2] == NOW + 10


def test_the_range_read_resumes_after_a_restart_from_the_stored_time(
    store: HistoryStore,
) -> None:
    t = [NOW]
    client = CannedClient(job("a", 10, [(1, NOW - 30)], NOW - 100))
    make_cycle(client, store, clock=lambda: t[0], range_every=5).run()
    t[0] = NOW + 600  # a new process on the same history file, ten minutes later
    client.range_spans = []
    make_cycle(client, store, clock=lambda: t[0], range_every=5).run()
    # its first cycle reads the ranges since the last read before the restart
    assert {(start, end) for _n, start, end in client.range_spans} == {
        (NOW - CycleSettings().overlap_seconds, NOW + 600)
    }


def test_a_run_ending_between_range_reads_is_stored_with_every_epoch(
    store: HistoryStore,
) -> None:
    """A run that reaches its plan in a cycle without the full range read gets its own
    range read (set match on its run id), so the history keeps all its epoch ends."""
    t = [NOW]
    runs = {"a": [(1, NOW - 30)], "b": [(1, NOW - 40)]}
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float) -> None:
        t[0] = now
        client.answers = merge(*(job(r, 3, ends, NOW - 100) for r, ends in runs.items()))
        client.ranges = {
            "epoch_range": [
                Series(labels_of(r), tuple((ts, e) for e, ts in ends)) for r, ends in runs.items()
            ],
            "epoch_end_range": [
                Series(labels_of(r), tuple((ts, ts) for _e, ts in ends)) for r, ends in runs.items()
            ],
        }
        client.range_spans, client.seen = [], []
        cycle.run()

    at(NOW)  # the first cycle: every run's ranges
    runs["a"] += [(2, NOW + 10), (3, NOW + 50)]  # "a" ends; "b" goes on
    runs["b"] += [(2, NOW + 20)]
    at(NOW + 60)
    ranged = [q for q in client.seen if "run_id=~" in q and "[" not in q]
    assert len(ranged) == 2 and all('run_id=~"a"' in q for q in ranged)
    assert {(start, end) for _n, start, end in client.range_spans} == {
        (NOW - CycleSettings().overlap_seconds, NOW + 60)
    }
    (done,) = store.finished()
    assert done.run_id == "a" and done.completed
    assert done.epoch_times == ((0, NOW - 100), (1, NOW - 30), (2, NOW + 10), (3, NOW + 50))
    # the next cycle: "a" is still in the window's answers but already stored as
    # finished, "b" goes on: no range query at all
    at(NOW + 120)
    assert client.range_spans == []


def test_the_full_range_read_waits_a_cycle_when_the_unchanging_series_are_read_in_full(
    store: HistoryStore,
) -> None:
    t = [NOW]
    client = CannedClient(job("a", 100, [(1, NOW - 30)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, static_full_every=10)
    kinds = []
    for i in range(31):
        t[0] = NOW + 60 * i
        client.seen, client.range_spans = [], []
        cycle.run()
        kinds.append((len(unchanging(client.seen)) >= 4, bool(client.range_spans)))
    static_full = [i for i, (st, _r) in enumerate(kinds) if st]
    range_full = [i for i, (_s, r) in enumerate(kinds) if r]
    assert static_full == [0, 10, 20, 30]
    # every 5 cycles, the one due in cycle 10 (the static read's) a cycle later
    assert range_full == [0, 5, 11, 16, 21, 26]


def test_the_stall_checks_gpu_use_is_asked_only_when_some_run_may_be_stalled(
    store: HistoryStore,
) -> None:
    t = [NOW]
    fresh = job("fresh", 10, [(1, NOW - 60), (2, NOW - 10)], NOW - 120, pod="p-fresh")
    client = CannedClient(fresh)
    cycle = make_cycle(client, store, clock=lambda: t[0], stall_after_seconds=900)
    cycle.run()
    assert not any("max_over_time(gpu_eta_pod_gpu_utilization_ratio" in q for q in client.seen)
    # twenty minutes later without progress and an idle GPU: asked, and the run is stalled
    t[0] = NOW + 1200
    client.answers = merge(
        fresh, {"util_recent": [s(0.0, namespace="ml", pod="p-fresh", container="c")]}
    )
    client.seen = []
    (jf,) = cycle.run().jobs
    assert sum("max_over_time(gpu_eta_pod_gpu_utilization_ratio" in q for q in client.seen) == 1
    assert jf.forecast.stalled


def test_gpu_use_and_memory_means_are_read_with_the_ranges_over_their_span(
    store: HistoryStore,
) -> None:
    """Read one cycle in ``range_every`` over the span since the previous such read,
    and weighted in the run's lifetime mean by the seconds of its life the read adds
    (since its start, then since the previous read: the overlap is read, not weighted)."""
    t = [NOW]
    base = job("a", 10, [(1, NOW - 30)], NOW - 100, pod="p-a")
    cycle = make_cycle(
        client := CannedClient({}), store, clock=lambda: t[0], range_every=2, lookback_seconds=600
    )

    def at(now: float, util: float) -> list[str]:
        t[0] = now
        pod = {"namespace": "ml", "pod": "p-a", "container": "c"}
        client.answers = merge(
            base, {"util_mean": [s(util, **pod)], "memory_ratio": [s(0.5, **pod)]}
        )
        client.seen = []
        cycle.run()
        return [q for q in client.seen if USE_MEAN_MARK in q]

    assert len(read := at(NOW, 0.2)) == 1 and "[600s]" in read[0]  # the first window
    assert at(NOW + 60, 0.9) == []  # not read: 0.9 never enters the mean
    (read,) = at(NOW + 120, 0.8)  # since the last read, plus the 120 s overlap
    assert "[240s]" in read
    (stored,) = store.running()
    assert stored.run.features["gpu_utilization_ratio"] == pytest.approx(
        (0.2 * 100 + 0.8 * 120) / (100 + 120)
    )
    assert stored.run.features["memory_utilization_ratio"] == pytest.approx(0.5)


def test_finished_runs_are_forgotten_once_out_of_the_window(store: HistoryStore) -> None:
    """The runs kept to skip their range read leave that set a window after they
    finished, whatever ``range_every`` (every cycle here reads the ranges in full)."""
    t = [NOW]
    client = CannedClient(job("a", 2, [(1, NOW - 60), (2, NOW - 10)], NOW - 100))
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=1)
    cycle.run()  # "a" reached its plan: finished
    assert list(cycle._finished_present.finished_at) == [("ml", "pod-a", "c", "a")]
    client.answers = {}
    for minutes in (1, 2, 3, 4):
        t[0] = NOW + 60 * minutes
        cycle.run()
    assert cycle._finished_present.finished_at == {}  # the window is 60 s + 120 s of overlap


# in the GPU-use mean's query only (gpu_eta.common.gpu_use.use_mean; the stall check's
# takes the max)
USE_MEAN_MARK = "sum_over_time(gpu_eta_pod_gpu_utilization_ratio"


def means_read(seen: list[str]) -> list[str]:
    """The queries of a cycle that read GPU-use or memory means (of every pod, or some
    pods' raw samples for the GPU use)."""
    marks = (USE_MEAN_MARK, _RAW_MARK, "gpu_eta_pod_memory_working_set_bytes")
    return [q for q in seen if any(mark in q for mark in marks)]


def means_of(pod: str, util: float, memory: float = 0.5, exported: bool = False) -> dict:
    """The util_mean and memory_ratio answers for container ``c`` of ``pod``."""
    prefix = "exported_" if exported else ""
    labels = {f"{prefix}namespace": "ml", f"{prefix}pod": pod, f"{prefix}container": "c"}
    return {"util_mean": [s(util, **labels)], "memory_ratio": [s(memory, **labels)]}


def test_a_run_ending_between_full_reads_gets_its_means_for_the_tail(
    store: HistoryStore,
) -> None:
    """Between two full reads, a run that ends gets its pod's means read with its range
    read (set match on ``pod`` and ``exported_pod``), weighted by the seconds since the
    full read: its lifetime mean covers its last cycles too. Another run's are not read."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float, a_ends: list[tuple[float, float]], util_a: float, util_b: float) -> None:
        t[0] = now
        client.answers = merge(
            job("a", 3, a_ends, NOW - 100, pod="p-a"),
            job("b", 10, [(1, NOW - 40)], NOW - 100, pod="p-b"),
            means_of("p-a", util_a),
            means_of("p-b", util_b, exported=True),  # a scrape without honor_labels
        )
        client.seen = []
        cycle.run()

    at(NOW, [(1, NOW - 30)], 0.2, 0.3)  # the first cycle: every run's, 100 s of life
    at(NOW + 60, [(1, NOW - 30), (2, NOW + 10)], 0.9, 0.9)
    assert means_read(client.seen) == []  # nothing ends: not read
    at(NOW + 120, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 110)], 0.6, 0.9)  # "a" ends
    util, memory = means_read(client.seen)
    for read in (util, memory):
        assert 'pod=~"p-a"' in read and 'exported_pod=~"p-a"' in read and "p-b" not in read
        assert "[240s]" in read  # since the full read, plus the overlap
    (done,) = store.finished()
    assert done.run_id == "a" and done.completed
    assert done.features["gpu_utilization_ratio"] == pytest.approx((0.2 * 100 + 0.6 * 120) / 220)
    assert done.features["memory_utilization_ratio"] == pytest.approx(0.5)
    (b,) = store.running()
    assert b.run.features["gpu_utilization_ratio"] == pytest.approx(0.3)  # its 0.9 not read


def test_a_run_shorter_than_range_every_cycles_is_stored_with_its_means(
    store: HistoryStore,
) -> None:
    """A run that starts and ends between two full reads (it vanishes: the usual end of
    a pod) gets means at all, weighted from its start to its last report."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5, vanish_grace_seconds=0)
    long = job("a", 100, [(1, NOW - 30)], NOW - 100)

    def at(now: float, short: dict) -> None:
        t[0] = now
        client.answers = merge(long, short, means_of("pod-a", 0.9))
        client.seen = []
        cycle.run()

    at(NOW, {})  # the full read, before the short run
    report = {"last_report": [s(NOW + 55, **labels_of("s"))]}
    at(NOW + 60, merge(job("s", 10, [], NOW + 10), report, means_of("pod-s", 0.1, 0.2)))
    assert means_read(client.seen) == []
    gone = job("s", 10, [(1, NOW + 70)], NOW + 10, present=False)  # left the scrapes
    report = {"last_report": [s(NOW + 100, **labels_of("s"))]}
    at(NOW + 120, merge(gone, report, means_of("pod-s", 0.7, 0.4)))
    assert len(reads := means_read(client.seen)) == 2
    assert all('pod=~"pod-s"' in q and "pod-a" not in q for q in reads)
    (done,) = store.finished()
    assert done.run_id == "s" and not done.completed
    assert done.features["gpu_utilization_ratio"] == pytest.approx(0.7)
    assert done.features["memory_utilization_ratio"] == pytest.approx(0.4)


def test_a_run_read_as_ending_that_goes_on_is_not_counted_twice(store: HistoryStore) -> None:
    """A run missing from a scrape is read as ending (its means up to its last report);
    when it comes back, the next full read weighs only the seconds after that read,
    and a second read while it is still missing adds nothing."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float, util: float, present: bool = True, report: float | None = None) -> None:
        t[0] = now
        client.answers = merge(
            job("a", 10, [(1, NOW - 30)], NOW - 100, present=present),
            {"last_report": [s(now if report is None else report, **labels_of("a"))]},
            means_of("pod-a", util),
        )
        client.seen = []
        cycle.run()

    at(NOW, 0.2)  # the full read: 100 s of life
    at(NOW + 60, 0.5, present=False, report=NOW + 50)  # missing: read up to its report, 50 s
    assert len(means_read(client.seen)) == 2
    at(NOW + 120, 0.9, present=False, report=NOW + 50)  # still missing: read, adds nothing
    assert len(means_read(client.seen)) == 2
    for minutes in (3, 4):  # back: nothing ends, not read
        at(NOW + 60 * minutes, 0.9)
        assert means_read(client.seen) == []
    at(NOW + 300, 0.8)  # the next full read: the 250 s since the run's own read
    assert len(means_read(client.seen)) == 2 and client.range_spans
    (stored,) = store.running()
    assert stored.run.features["gpu_utilization_ratio"] == pytest.approx(
        (0.2 * 100 + 0.5 * 50 + 0.8 * 250) / 400
    )


def test_a_restart_does_not_count_a_run_read_as_ending_twice(store: HistoryStore) -> None:
    """The time a run's own read reached is kept in the history file: a forecaster
    restarted before the next full read (its first cycle is one) weighs only the
    seconds after that read, as the same process would have."""
    t = [NOW]

    def at(cycle: Cycle, now: float, util: float, present: bool, report: float) -> None:
        t[0] = now
        cycle.client.answers = merge(
            job("a", 10, [(1, NOW - 30)], NOW - 100, present=present),
            {"last_report": [s(report, **labels_of("a"))]},
            means_of("pod-a", util),
        )
        cycle.run()

    first = make_cycle(CannedClient({}), store, clock=lambda: t[0], range_every=5)
    at(first, NOW, 0.2, True, NOW)  # the full read: 100 s of life
    at(first, NOW + 60, 0.5, False, NOW + 50)  # missing: read up to its report, 50 s
    restarted = make_cycle(CannedClient({}), store, clock=lambda: t[0], range_every=5)
    assert restarted._means_until == {("ml", "pod-a", "c", "a"): NOW + 50}
    at(restarted, NOW + 180, 0.8, True, NOW + 180)  # a full read: the 130 s after NOW + 50
    (stored,) = store.running()
    assert stored.run.features["gpu_utilization_ratio"] == pytest.approx(
        (0.2 * 100 + 0.5 * 50 + 0.8 * 130) / 280
    )
    assert make_cycle(CannedClient({}), store, clock=lambda: t[0])._means_until == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "not json",
        "{}",
        "[1, 2]",
        '[["ml", "p", "c", "r", "NaN"]]',
        "[" * 100_000,
        "[" * 5_000_000,
    ],
)
def test_an_unreadable_stored_means_until_reads_as_empty(text: str) -> None:
    """Whatever the history file holds under the key, the forecaster starts."""
    assert decode_means_until(text) == {}


def test_means_until_survives_its_encoding_and_skips_bad_entries() -> None:
    until = {("ml", "p", "c", "r"): 12.5, ("ns", "q", "", "1"): 3.0}
    assert decode_means_until(encode_means_until(until)) == until
    mixed = '[["ml", "p", "c", "r", 1.5], ["ml", "p", "c", 7, 2.0], ["x", 1e999], 5]'
    assert decode_means_until(mixed) == {("ml", "p", "c", "r"): 1.5}


def test_a_steady_cycle_sends_the_same_queries_and_an_ending_one_the_means_too(
    store: HistoryStore,
) -> None:
    """Nothing ends: the 5 instant queries whose answers change and the queue's, as
    before. A run ends: its plan read again (it reached the plan held for it), its 2
    range queries and its pod's 2 means besides."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float, ends: list[tuple[float, float]]) -> int:
        t[0] = now
        client.answers = merge(
            job("a", 3, ends, NOW - 100), job("b", 10, [(1, NOW - 40)], NOW - 100)
        )
        client.seen = []
        fs = cycle.run()
        assert fs.queries == len(client.seen)
        return fs.queries

    at(NOW, [(1, NOW - 30)])
    assert at(NOW + 60, [(1, NOW - 30), (2, NOW + 10)]) == len(queries.DYNAMIC) + 1 == 6
    assert at(NOW + 120, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 110)]) == 6 + 1 + 2 + 2
    assert len(means_read(client.seen)) == 2
    assert at(NOW + 180, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 110)]) == 6  # "a" finished


def end_together(
    store: HistoryStore, pods: dict[str, str], use: dict[str, float], between: Callable[[], None]
) -> list[str]:
    """Runs ``pods`` (run id → pod) and another (``d``): a full read (100 s of their life
    at GPU use 0.3), ``between()``, then a cycle 60 s later where all of ``pods`` end
    at GPU use ``use``; each gets its own pod's (0.3 for 100 s, then its use for 60 s).
    Returns the queries of that cycle."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float, ends: list[tuple[float, float]]) -> None:
        t[0] = now
        client.answers = merge(
            *(job(r, 3, ends, NOW - 100, pod=pod) for r, pod in pods.items()),
            job("d", 10, [(1, NOW - 40)], NOW - 100),
            *(means_of(pod, use[r] if now > NOW else 0.3) for r, pod in pods.items()),
            means_of("pod-d", 0.9),
        )
        client.seen = []
        cycle.run()

    at(NOW, [(1, NOW - 30)])
    between()
    at(NOW + 60, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 50)])
    done = {r.run_id: r.features["gpu_utilization_ratio"] for r in store.finished()}
    assert done == {r: pytest.approx((0.3 * 100 + u * 60) / 160) for r, u in use.items()}
    return client.seen


def sweep_pods(n: int) -> tuple[dict[str, str], dict[str, float]]:
    """``n`` runs with 37-character pod names, and their GPU uses."""
    pods = {f"r{i:03d}": f"ml-train-resnet50-sweep-{i:04d}-worker-0" for i in range(n)}
    assert {len(pod) for pod in pods.values()} == {37}
    return pods, {r: (i % 10) / 10 for i, r in enumerate(pods)}


@pytest.mark.parametrize("short", ["use", "memory"])
def test_many_ending_runs_pods_are_read_in_several_set_matched_queries(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch, short: str
) -> None:
    """More ending runs' pods than one means query can name: several set-matched queries
    (one pod each here: room for one pod's GPU-use samples by ``exported_pod``, or for
    one pod's memory query), never every pod's means of that kind, and each run gets
    its own pod's."""
    util = {"a": 0.1, "b": 0.5, "c": 0.7}
    if short == "use":
        limit = len(queries.util_samples("exported_pod", ["pod-a"], 180) or "")
        monkeypatch.setattr(queries, "MAX_POD_QUERIES", 6)  # 3 pods by either label
    else:
        limit = len(queries.for_pods(queries.MEMORY_RATIO, 180, 300, ["pod-a"]) or "")

    def limited() -> None:
        monkeypatch.setattr(queries, "MAX_QUERY_CHARS", limit)

    reads = means_read(end_together(store, {r: f"pod-{r}" for r in util}, util, limited))
    assert not any("pod-d" in q for q in reads)
    use = [q for q in reads if q.startswith(_RAW_MARK)]
    split = use if short == "use" else [q for q in reads if q not in use]
    # that mean's pods by set match, never every pod's (the other's alone is too long
    # for the limit: read for every pod)
    assert len(split) == (6 if short == "use" else 3)
    assert all('pod=~"' in q and len(q) <= limit for q in split)
    for r in util:  # each pod named in one query (the GPU use's: in each pod label)
        named = [set(re.findall(r'(\w*pod)=~"', q)) for q in split if f'"pod-{r}"' in q]
        assert named == (
            [{"pod"}, {"exported_pod"}] if short == "use" else [{"pod", "exported_pod"}]
        )


def test_a_hundred_and_more_ending_pods_get_their_gpu_use_without_a_read_of_every_pod(
    store: HistoryStore,
) -> None:
    """130 runs ending in one cycle, with 37-character pod names: their pods' GPU use is
    read by set match (the raw samples of ``queries.util_samples``, the match written
    once per query), not by a read of every pod's; each run gets its own pod's. Its
    PromQL form carries the match on six selectors in two pod labels: about 23 such
    pods fit a query, so more than about 90 made a read of every pod's."""
    pods, use = sweep_pods(130)
    seen = end_together(store, pods, use, lambda: None)
    reads = [q for q in means_read(seen) if "memory" not in q]
    assert reads and all(_POD_MATCH.search(q) or _RAW_MATCH.fullmatch(q) for q in reads)
    assert len(reads) <= queries.MAX_POD_QUERIES
    assert all(len(q) <= queries.MAX_QUERY_CHARS for q in reads)


def test_ending_pods_whose_raw_samples_would_be_too_many_get_util_mean_by_set_match(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 ending pods: ``UTIL_MEAN`` by set match takes 3 queries, their raw samples 2;
    where those samples would be more than ``MAX_RAW_SAMPLES`` (many pods over a long
    span), ``UTIL_MEAN`` by set match is read, not every pod's; each run gets its own."""
    pods, use = sweep_pods(50)
    assert queries.util_samples_split(pods.values(), 180, 15, 12_000, 4) is not None

    def bound() -> None:
        monkeypatch.setattr(queries, "MAX_RAW_SAMPLES", 100)

    reads = [q for q in means_read(end_together(store, pods, use, bound)) if "memory" not in q]
    assert len(reads) == 3 and all(USE_MEAN_MARK in q and _POD_MATCH.search(q) for q in reads)


def test_ending_runs_means_too_long_to_set_match_are_read_for_every_pod(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A means query naming the ending runs' pods over ``MAX_QUERY_CHARS``: every pod's
    means are read instead (the ranges stay set-matched), and only the ending run's count."""
    t = [NOW]
    client = CannedClient({})
    cycle = make_cycle(client, store, clock=lambda: t[0], range_every=5)

    def at(now: float, a_ends: list[tuple[float, float]], util_b: float) -> None:
        t[0] = now
        client.answers = merge(
            job("a", 3, a_ends, NOW - 100),
            job("b", 10, [(1, NOW - 40)], NOW - 100),
            means_of("pod-a", 0.2 if now == NOW else 0.6),
            means_of("pod-b", util_b),
        )
        client.seen = []
        cycle.run()

    at(NOW, [(1, NOW - 30)], 0.3)
    monkeypatch.setattr(queries, "MAX_QUERY_CHARS", 100)  # room for the run ids only
    at(NOW + 60, [(1, NOW - 30), (2, NOW + 10), (3, NOW + 50)], 0.9)  # "a" ends
    reads = means_read(client.seen)
    assert len(reads) == 2 and not any("pod=~" in q for q in reads)
    assert sum('run_id=~"a"' in q for q in client.seen) == 2  # the two range queries
    (done,) = store.finished()
    assert done.features["gpu_utilization_ratio"] == pytest.approx((0.2 * 100 + 0.6 * 60) / 160)
    (b,) = store.running()
    assert b.run.features["gpu_utilization_ratio"] == pytest.approx(0.3)  # its 0.9 not counted


@pytest.mark.parametrize("refused", [True, False], ids=["refused", "away"])
def test_a_queue_query_that_fails_loses_only_the_queue(
    store: HistoryStore, caplog: pytest.LogCaptureFixture, refused: bool
) -> None:
    """Prometheus refusing the GPU queue's fold on its data (errorType ``execution``,
    as a join over duplicated kube-state-metrics series once did), or failing it
    (away, timing out, overloaded), costs only the queue's predictions, counted and
    logged as what it was; the jobs are forecast as ever. Why the second too: the
    queue's queries are sent after the cycle's read was stored."""
    from gpu_eta.forecaster.promparse import PromQueryError, decode_response

    refusal = (
        b'{"status":"error","errorType":"execution","error":"found duplicate series for '
        b'the match group {uid=\\"u1\\"} on the right hand-side of the operation"}'
    )
    with pytest.raises(PromQueryError):
        decode_response(refusal, 422)
    with pytest.raises(PromAPIError) as away:
        decode_response(b'{"status":"error","errorType":"unavailable","error":"x"}', 503)
    assert not isinstance(away.value, PromQueryError)

    class Refusing(CannedClient):
        error: PromAPIError = (
            PromQueryError("HTTP 422: execution: duplicate series")
            if refused
            else PromAPIError("http://prom:9090: query failed after 3 attempts: HTTP 503")
        )

        def instant(self, query: str, at: float | None = None, **kw) -> list[Sample]:
            if "kube_pod_status_phase" in query:
                self._count(query)
                raise self.error
            return super().instant(query, at, **kw)

    client = Refusing(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300))
    with caplog.at_level("WARNING"):
        fs = make_cycle(client, store).run()
    assert fs.pending is None and len(fs.jobs) == 1
    assert fs.job_errors.get("pending_failed") == 1
    said = "pending-pod queries refused" if refused else "pending-pod queries failed"
    assert any(
        said in r.getMessage() and str(client.error) in r.getMessage() for r in caplog.records
    )


def _planless(
    run_id: str, pod: str, start: float, epoch: float | None, last: float, **extra: float
) -> dict[str, list[Sample]]:
    """A present run reporting progress but no planned total (``extra``: a ``step``)."""
    lab = {"node": "n1", "namespace": "ml", "pod": pod, "container": "c", "run_id": run_id}
    out = {
        "start": [s(start, **lab)],
        "present": [s(last, **lab)],
        "last_report": [s(last, **lab)],
    }
    if epoch is not None:
        out |= {"epoch": [s(epoch, **lab)], "last_end": [s(last, **lab)]}
    for name, value in extra.items():
        out[name] = [s(value, **lab)]
    return out


def test_a_run_of_a_job_that_never_completed_is_forecast_from_the_clusters_runs(
    store: HistoryStore,
) -> None:
    """Ten jobs each completed once, 1000-1900 s in no order: a plan-less run of an eleventh
    job gets the cluster's durations (``planless.METHODS``) from its first cycle, what
    they leave scaled by the ratios measured on the runs new to the cluster's jobs."""
    names = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
    names += ("india", "juliet")
    durations = [1500.0, 1000.0, 1900.0, 1200.0, 1700.0, 1100.0, 1800.0, 1300.0, 1600.0, 1400.0]
    done = merge(
        *(
            job(
                name,
                10,
                [(10, NOW - 30000 + 2000 * i + d)],
                NOW - 30000 + 2000 * i,
                present=False,
                pod=f"{name}-b2c4d",
            )
            for i, (name, d) in enumerate(zip(names, durations, strict=True))
        )
    )
    ahead = _planless("y", "third-k7m8n", NOW + 60, None, NOW, step=1.0)  # its node's clock ahead
    client = CannedClient(
        merge(done, _planless("x", "other-k7m8n", NOW - 300, 3.0, NOW - 20), ahead)
    )
    fs = make_cycle(client, store, refit_seconds=0).run()
    assert fs.job_errors == {}
    x, y = sorted(fs.jobs, key=lambda j: j.run.run_id)
    spread = fit_durations(store.finished()).spread()
    assert spread.coarser[1] is not None
    lo, mid, hi = spread.coarser[1][False]  # runs of jobs new to the cluster
    assert lo < mid < hi
    centre = statistics.median(durations)
    assert y.forecast.method == "cluster_durations"
    assert y.forecast.p50 == pytest.approx(centre * math.exp(mid))  # just started: elapsed 0
    assert x.forecast.method == "cluster_durations" and x.forecast.n_obs == 10
    left = centre - 300.0
    assert (x.forecast.p10, x.forecast.p50, x.forecast.p90) == (
        pytest.approx(left * math.exp(lo)),
        pytest.approx(left * math.exp(mid)),
        pytest.approx(left * math.exp(hi)),
    )


def test_a_run_without_a_plan_is_forecast_from_its_jobs_completed_durations(
    store: HistoryStore,
) -> None:
    t = [NOW]
    done = merge(  # two completed runs of job "train" (pods train-<5 chars>): 1000 s, 1200 s
        job("a", 10, [(10, NOW - 3000)], NOW - 4000, present=False, pod="train-b2c4d"),
        job("b", 10, [(10, NOW - 1000)], NOW - 2200, present=False, pod="train-f5g6h"),
    )
    running = _planless("c", "train-k7m8n", NOW - 300, 3.0, NOW - 20)
    unknown = _planless("d", "other-k7m8n", NOW - 300, 3.0, NOW - 20)  # no history
    by_steps = _planless("e", "train-p2q4r", NOW - 100, None, NOW - 5, step=40.0)
    client = CannedClient(merge(done, running, unknown, by_steps))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=0)
    fs = cycle.run()
    assert [r.completed for r in store.finished()] == [True, True]
    jobs = {j.run.run_id: j for j in fs.jobs}
    assert set(jobs) == {"c", "e"}  # "d": no completed run of its job
    assert fs.job_errors == {"no_plan": 1}
    assert fs.n_running == 3
    c = jobs["c"]
    assert c.forecast.method == "durations" and c.node == "n1"
    # the median of 1000 and 1200 s, 300 s in; one residual measured: the two durations
    assert (c.forecast.p10, c.forecast.p50, c.forecast.p90) == (700.0, 800.0, 900.0)
    assert c.completion_timestamps == (NOW + 700, NOW + 800, NOW + 900)
    assert jobs["e"].forecast.p50 == 1000.0  # 100 s in
    assert any("gpu_eta_training_step[" in q for q in client.seen)  # its step was read
    assert not store.running()  # plan-less runs are not stored while they run

    # "c" ends: its sender's end report made its plan what it reached (the exporter)
    t[0] = NOW + 60
    ended = job("c", 5, [(5, NOW + 40)], NOW - 300, pod="train-k7m8n")
    client.answers = merge(ended, _planless("f", "train-s2t4v", NOW, 1.0, NOW + 50))
    fs = cycle.run()
    finished = {r.run_id: r for r in store.finished()}
    assert finished["c"].completed is True
    assert finished["c"].last_timestamp - finished["c"].start_timestamp == 340.0
    (f,) = fs.jobs
    # durations 340, 1000, 1200 s: 60 s in, their median; two residuals: bounds from them
    assert f.run.run_id == "f" and f.forecast.p50 == 1000.0 - 60.0
    assert f.forecast.p10 < f.forecast.p50 < f.forecast.p90


def test_a_run_without_a_plan_that_stalls_holds_its_forecast_and_is_flagged(
    store: HistoryStore,
) -> None:
    """Silent for longer than ``stall_after`` with its GPU idle: the forecast it had at
    its last progress, widened as a stalled run's (P90 doubled plus the stall), flagged;
    busy or recent, the usual forecast. Only the stall check reads GPU use."""
    done = merge(  # job "train": 1000 s and 1200 s
        job("a", 10, [(10, NOW - 9000)], NOW - 10000, present=False, pod="train-b2c4d"),
        job("b", 10, [(10, NOW - 8000)], NOW - 9200, present=False, pod="train-f5g6h"),
    )
    # 300 s in when it last reported, 900 s ago; another one as silent but busy
    idle = _planless("idle", "train-k7m8n", NOW - 1200, 3.0, NOW - 900)
    busy = _planless("busy", "train-p2q4r", NOW - 1100, 3.0, NOW - 900)
    fresh = _planless("fresh", "train-s2t4v", NOW - 300, 3.0, NOW - 10)
    util = {
        "util_recent": [
            s(0.0, namespace="ml", pod="train-k7m8n", container="c"),
            s(0.9, namespace="ml", pod="train-p2q4r", container="c"),
        ]
    }
    client = CannedClient(merge(done, idle, busy, fresh, util))
    fs = make_cycle(client, store, stall_after_seconds=600).run()
    jobs = {j.run.run_id: j.forecast for j in fs.jobs}
    assert {k: fc.stalled for k, fc in jobs.items()} == {
        "idle": True,
        "busy": False,
        "fresh": False,
    }
    # as of its last report (300 s in): P10 700, P50 800, P90 900 (the durations' own
    # ranks: one residual); held, the P90 doubled plus the 900 s stall
    held = jobs["idle"]
    assert (held.p10, held.p50, held.p90) == (700.0, 800.0, 2 * 900.0 + 900.0)
    assert jobs["busy"].p50 == 1200.0 - 1100.0  # not held: 1100 s in, only 1200 s is longer
    assert any(
        "gpu_eta_pod_gpu_utilization_ratio" in q and "max_over_time" in q for q in client.seen
    )


def test_runs_without_a_plan_never_make_every_cycle_a_full_read(
    store: HistoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Runs without a plan are asked for again each cycle (their plan appears when they
    end); when they and the new runs are too many for one query, the new runs alone are
    asked for and the plan-less ones wait for the next full read."""
    t = [NOW]
    free = merge(*(_planless(f"f{i}", f"free-{i}", NOW - 100, 1.0, NOW - 5) for i in range(3)))
    client = CannedClient(free)
    cycle = make_cycle(client, store, clock=lambda: t[0], static_full_every=10)
    cycle.run()  # the first cycle reads in full
    client.answers, client.seen = merge(free, job("new", 10, [], NOW)), []
    t[0] += 60
    cycle.run()  # four to ask for, room for them: one folded query names them all
    (folded,) = [q for q in unchanging(client.seen) if "label_replace" in q]
    assert all(run in folded for run in ("f0", "f1", "f2", "new"))
    monkeypatch.setattr(queries, "MAX_UNKNOWN_RUNS", 2)
    client.answers, client.seen = (
        merge(free, job("new", 10, [], NOW), job("newer", 10, [], NOW)),
        [],
    )
    t[0] += 60
    fs = cycle.run()  # four, over the limit: the one new run only, not a full read
    (folded,) = [q for q in unchanging(client.seen) if "label_replace" in q]
    assert "newer" in folded and not any(f"f{i}" in folded for i in range(3))
    assert "new" in {j.run.run_id for j in fs.jobs} and "newer" in {j.run.run_id for j in fs.jobs}


def test_a_run_stored_after_its_pod_let_go_of_its_gpu_keeps_its_gpu_features(
    store: HistoryStore,
) -> None:
    """The GPU allocation is gone in the cycle that reads the run's end (its pod
    completed): the run is stored with the GPU count and model it had the cycle before,
    so the job's next run, which holds a GPU, is of the same configuration."""
    t = [NOW]

    def gpu(pod: str, uuid: str) -> dict[str, list[Sample]]:
        lab = {"namespace": "ml", "pod": pod, "container": "c", "node": "n1"}
        return {
            "allocated": [s(1, gpu="0", UUID=uuid, **lab)],
            "gpu_info": [s(1, node="n1", UUID=uuid, model="A100")],
        }

    running = _planless("a", "train-b2c4d", NOW - 300, 2.0, NOW - 10)
    client = CannedClient(merge(running, gpu("train-b2c4d", "GPU-0")))
    cycle = make_cycle(client, store, clock=lambda: t[0], refit_seconds=0)
    cycle.run()
    t[0] += 60
    ended = job("a", 3, [(3, NOW + 40)], NOW - 300, pod="train-b2c4d")  # its end: no GPU
    client.answers = merge(ended, {"gpu_info": [s(1, node="n1", UUID="GPU-0", model="A100")]})
    cycle.run()
    (done,) = store.finished()
    assert (done.completed, done.features.get("gpus"), done.features.get("gpu_model")) == (
        True,
        1.0,
        "A100",
    )
    t[0] += 60
    nxt = _planless("b", "train-f5g6h", NOW + 100, 1.0, NOW + 110)
    client.answers = merge(nxt, gpu("train-f5g6h", "GPU-0"))
    fs = cycle.run()
    (job_b,) = fs.jobs
    assert job_b.forecast.method == "durations" and job_b.forecast.p50 == 340.0 - 20.0


def test_a_node_leaving_the_read_while_open_warns_and_one_leaving_closed_does_not(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``_log_kept``: a GPU node that was open when last read and leaves the read (a KSM
    shard down) is warned of, once; one closed when last read (cordoned: a drain, an
    autoscaler's scale-down) is kept quietly, at DEBUG, whether alone or several."""
    gpu = {"resource": "nvidia_com_gpu"}

    def ksm(*nodes: str, cordoned: tuple[str, ...] = ()) -> dict[str, list[Sample]]:
        return {
            "ksm_nodes": [s(1, node=n, **gpu) for n in nodes],
            "ksm_node_state": [s(1, node=n, state="cordoned") for n in cordoned],
            "ksm_pods": [s(1, namespace="ml", pod="waits", uid="u2", phase="Pending", **gpu)],
            "ksm_pod_times": [s(NOW - 50, uid="u2", time="created")],
        }

    base = job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300)
    client = CannedClient(merge(base, ksm("n1", "n2", "n3", cordoned=("n2", "n3"))))
    cycle = make_cycle(client, store)
    cycle.run()

    def warned(answer: dict[str, list[Sample]]) -> list[str]:
        client.answers = merge(base, answer)
        caplog.clear()
        with caplog.at_level("DEBUG", logger="gpu_eta"):
            assert cycle.run().pending is not None
        return [r.getMessage() for r in caplog.records if r.levelname in ("WARNING", "INFO")]

    said = warned(ksm("n1"))  # both cordoned nodes removed at once: quiet
    assert not [m for m in said if "lacks" in m], said
    assert any("closed when last read (n2, n3)" in r.getMessage() for r in caplog.records)
    said = warned(ksm())  # the open one goes too: a shard down?
    assert [m for m in said if "lacks" in m] == [
        "kube-state-metrics read lacks 1 GPU node(s) it showed open 0s ago (n1): a KSM "
        "shard or replica down, or KSM restarting? They are kept as last read, with their "
        "pods, for up to 600s (docs/pending.md)"
    ]
    assert warned(ksm()) == []  # said once
    said = warned(ksm("n1"))
    assert said == ["kube-state-metrics read: no GPU node kept as last read any more"]


class StallCheckFailing(CannedClient):
    """Fails the stall check's GPU-use query (util_recent) while ``failing``, as a
    flaky server does: counted as a failed query, like PromClient."""

    failing = True

    def instant(self, query: str, at: float | None = None, **kw) -> list[Sample]:
        if self.failing and "max_over_time(gpu_eta_pod_gpu_utilization_ratio" in query:
            self._count(query)
            self.stats.success -= 1
            self.stats.error += 1
            raise PromAPIError("http://prom:9090: query failed after 3 attempts: HTTP 503")
        return super().instant(query, at, **kw)


def test_a_failed_stall_check_query_loses_only_the_stall_check(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """The stall check's GPU-use query is sent after the read was stored, and only when
    some run made no progress for a while: its failure (a flaky server, every cycle
    while a run is stuck) must not fail the cycle. The runs are forecast with their
    GPU use unknown, which is never idle (not stalled); counted and logged once."""

    old = NOW - 3600
    client = StallCheckFailing(
        merge(
            job("healthy", 10, [(1, NOW - 60), (2, NOW - 10)], NOW - 120),
            job("stuck", 10, [(1, old - 60), (2, old)], old - 120),
            {"util_recent": [s(0.0, namespace="ml", pod="pod-stuck", container="c")]},
        )
    )
    cycle = make_cycle(client, store, stall_after_seconds=900)
    with caplog.at_level("WARNING"):
        fs = cycle.run()
        again = cycle.run()
    assert sorted(j.run.run_id for j in fs.jobs) == ["healthy", "stuck"]
    assert not any(j.forecast.stalled for j in fs.jobs)  # unknown GPU use: not stalled
    assert fs.job_errors.get("stall_check_failed") == 1
    assert again.job_errors.get("stall_check_failed") == 1
    warned = [r for r in caplog.records if "stall check" in r.getMessage()]
    assert len(warned) == 1 and "HTTP 503" in warned[0].getMessage()


def test_a_failed_stall_check_query_keeps_each_runs_last_verdict(store: HistoryStore) -> None:
    """While the stall check's GPU-use query fails, a run stalled in the last good
    cycle stays stalled: publishing 0 for one failed query would reset the 10-minute
    ``for:`` of GpuEtaTrainingStalled (rules/gpu-eta.rules.yaml) and, on a flaky
    server, keep a hung run from ever alerting. A run with no earlier verdict, or one
    that has reported since, is not stalled on an unknown GPU use."""

    old = NOW - 3600
    idle = {
        "util_recent": [
            s(0.0, namespace="ml", pod="pod-stuck", container="c"),
            s(0.0, namespace="ml", pod="pod-late", container="c"),
        ]
    }
    stuck = job("stuck", 10, [(1, old - 60), (2, old)], old - 120)
    healthy = job("healthy", 10, [(1, NOW - 60), (2, NOW - 10)], NOW - 120)
    client = StallCheckFailing(merge(healthy, stuck, idle))
    client.failing = False
    cycle = make_cycle(client, store, stall_after_seconds=900)

    def stalled(fs: ForecastSet) -> dict[str, bool]:
        return {j.run.run_id: j.forecast.stalled for j in fs.jobs}

    assert stalled(cycle.run()) == {"healthy": False, "stuck": True}  # the control
    client.failing = True
    late = job("late", 10, [(1, old - 60), (2, old)], old - 120)  # first seen failing
    client.answers = merge(healthy, stuck, late, idle)
    fs = cycle.run()
    assert fs.job_errors.get("stall_check_failed") == 1
    assert stalled(fs) == {"healthy": False, "stuck": True, "late": False}
    assert stalled(cycle.run()) == {"healthy": False, "stuck": True, "late": False}
    # the stuck run reports again while the query still fails: no longer stalled
    client.answers = merge(
        healthy, job("stuck", 10, [(1, old), (2, NOW - 5)], old - 120), late, idle
    )
    assert stalled(cycle.run()) == {"healthy": False, "stuck": False, "late": False}
    client.failing = False  # answers again: the late run's own verdict
    assert stalled(cycle.run()) == {"healthy": False, "stuck": False, "late": True}


def test_a_resumed_runs_epochs_at_its_start_are_no_epoch_length_for_the_stall_check() -> None:
    """Resumed at epoch 40 (ended at its start), then one 1,000 s epoch: silent 2,000 s
    is two epochs, not the stall of a run whose typical epoch is the mean of 0 and
    1,000 s (silence past 3 × 500 s)."""
    run = Run("r", 50.0, ((0.0, NOW), (40.0, NOW), (41.0, NOW + 1000.0)))
    view = CycleView()
    settings = CycleSettings(stall_after_seconds=900)
    assert not cycle_rules.silent_too_long(run, view, NOW + 3000.0, settings)
    assert cycle_rules.silent_too_long(run, view, NOW + 4100.0, settings)
