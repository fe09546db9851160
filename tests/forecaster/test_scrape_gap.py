"""gpu_eta.forecaster.scrape_gap: the runs a failed scrape hid stay forecast.

The rule's PromQL half (``up``, staleness markers) is checked against a real
exporter and Prometheus in tests/integration/test_forecaster_scrape_gap.py; here the
pure half, and the cycle's use of it through canned answers: which runs are asked for,
with which set matches, and that the query count stays within
``queries.QUERIES_PER_CYCLE``.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from gpu_eta.forecaster import queries, scrape_gap
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promparse import PromAPIError
from gpu_eta.forecaster.publish import forecast_families
from tests.forecaster.test_cycle import NOW, CannedClient, job, labels_of, make_cycle, merge, s
from tests.forecaster.test_cycle import store as store  # the fixture

# what marks the gap read: the runs of targets not answering (up == 0, or removed)
GAP = "unless on (job, instance) (up == 1)"
A = ("ml", "pod-a", "c", "a")
B = ("ml", "pod-b", "c", "b")


def _allocated(run_id: str, gpu: str) -> list:
    return [s(1, gpu=gpu, UUID=f"GPU-{gpu}", **labels_of(run_id))]


def test_missing_leaves_out_present_runs() -> None:
    present = [s(NOW, **labels_of("a"))]
    assert scrape_gap.missing({A, B}, present) == [B]
    assert scrape_gap.missing({A}, present) == []


def test_parts_set_match_the_runs_and_their_pods() -> None:
    named = scrape_gap.parts([A, B])
    assert 'run_id=~"a|b"' in named["held_present"]
    assert 'pod=~"pod-a|pod-b"' in named["held_allocated"]
    assert 'exported_pod=~"pod-a|pod-b"' in named["held_allocated"]
    assert all(GAP in q for q in named.values())
    # too many runs for one set match: every run's (a heavier answer, still one query)
    many = [("ml", f"pod-{i}", "c", f"run-{i}") for i in range(queries.MAX_UNKNOWN_RUNS + 1)]
    every = {n: queries.render(t, 0, 0) for n, t in queries.SCRAPE_GAP.items()}
    assert scrape_gap.parts(many) == every
    assert "=~" not in "".join(every.values())


def test_held_puts_back_the_gone_runs_and_their_allocations_only() -> None:
    instant = {"present": [s(NOW, **labels_of("c"))], "allocated": _allocated("c", "2")}
    gap = {
        "held_present": [s(NOW - 20, **labels_of("a")), s(NOW - 30, **labels_of("b"))],
        "held_allocated": [*_allocated("a", "0"), *_allocated("b", "1")],
    }
    out = scrape_gap.held([A], instant, gap)
    assert [x.labels["run_id"] for x in out["present"]] == ["c", "a"]
    assert [x.labels["gpu"] for x in out["allocated"]] == ["2", "0"]
    # a container that holds its GPU in the plain answer is not given it twice
    instant["allocated"] += _allocated("a", "0")
    assert len(scrape_gap.held([A], instant, gap)["allocated"]) == 2


def test_a_run_hidden_by_a_failed_scrape_stays_forecast(store: HistoryStore) -> None:
    answers = merge(
        job("a", 10, [(1, NOW - 200)], NOW - 300),
        job("b", 10, [(1, NOW - 200)], NOW - 300),
        {"allocated": [*_allocated("a", "0"), *_allocated("b", "1")]},
    )
    client = CannedClient(answers)
    cycle = make_cycle(client, store)
    fs = cycle.run()
    assert {j.run.run_id for j in fs.jobs} == {"a", "b"} and len(fs.gpus) == 2
    steady = len(client.seen)
    fs = cycle.run()  # nothing missing: no scrape-gap query
    assert fs.queries < steady and not any(GAP in q for q in client.seen[steady:])

    # a's exporter fails its scrape: its plain series are stale, its last report held
    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] != "a"]
    client.answers["allocated"] = _allocated("b", "1")
    client.answers["held_present"] = [s(NOW - 20, **labels_of("a"))]
    client.answers["held_allocated"] = _allocated("a", "0")
    for name, new in job("n", 10, [(1, NOW - 100)], NOW - 150).items():  # a new run
        client.answers[name] = [*client.answers.get(name, []), *new]
    before = len(client.seen)
    fs = cycle.run()
    assert {j.run.run_id for j in fs.jobs} == {"a", "b", "n"}
    assert {g.gpu for g in fs.gpus} == {"0", "1"}
    (gap,) = [q for q in client.seen[before:] if GAP in q]  # one, for run a only
    assert 'run_id=~"a"' in gap and 'pod=~"pod-a"' in gap
    # with the unchanging series of the new run, and of a: gone, its plan is read again
    assert 'epochs_planned{run_id=~"a|n"}' in gap
    # still missing in the next read: held again (the runs held count as present)
    assert {j.run.run_id for j in cycle.run().jobs} == {"a", "b", "n"}
    # past Prometheus' lookback (or its pod deleted): no longer held, not forecast
    client.answers["held_present"] = []
    assert {j.run.run_id for j in cycle.run().jobs} == {"b", "n"}
    before = len(client.seen)
    assert {j.run.run_id for j in cycle.run().jobs} == {"b", "n"}
    assert not any(GAP in q for q in client.seen[before:])  # not asked again


def test_a_new_process_holds_the_runs_its_history_holds_running(store: HistoryStore) -> None:
    """``once`` (a new process every run) or a restart, the first read with an
    exporter's scrape failing: the runs the history holds running stand for the previous
    read, so the run it hid stays forecast (it used to be treated as away: no previous
    read to hold it from). A run the history finished is not among them."""
    answers = merge(
        job("a", 10, [(1, NOW - 200)], NOW - 300),
        job("b", 10, [(1, NOW - 200)], NOW - 300),
        job("done", 10, [(1, NOW - 500)], NOW - 600, present=False),
        {"allocated": [*_allocated("a", "0"), *_allocated("b", "1")]},
    )
    client = CannedClient(dict(answers))
    fs = make_cycle(client, store).run()  # the previous process
    assert {j.run.run_id for j in fs.jobs} == {"a", "b"}
    assert {r.run.run_id for r in store.running()} == {"a", "b"}

    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] != "a"]
    client.answers["allocated"] = _allocated("b", "1")
    client.answers["held_present"] = [s(NOW - 20, **labels_of("a"))]
    client.answers["held_allocated"] = _allocated("a", "0")
    before = len(client.seen)
    fs = make_cycle(client, store).run()  # a new process, a's scrape failing
    assert {j.run.run_id for j in fs.jobs} == {"a", "b"} and fs.n_held == 1
    assert {g.gpu for g in fs.gpus} == {"0", "1"}
    (gap,) = [q for q in client.seen[before:] if GAP in q]
    assert 'run_id=~"a"' in gap  # the run missing only, not the finished one
    # a new process with nothing missing asks no gap
    client.answers = dict(answers)
    before = len(client.seen)
    assert {j.run.run_id for j in make_cycle(client, store).run().jobs} == {"a", "b"}
    assert not any(GAP in q for q in client.seen[before:])


def test_the_gap_rides_on_the_full_read_within_the_query_count(store: HistoryStore) -> None:
    """In the cycle that sends every query (the full read of the unchanging series, the
    GPU models, the steps, the stall check, the queue's second round), a run hidden by
    a failed scrape is asked for within that cycle's queries: none is added."""
    many = merge(*(job(f"r{i}", 10, [(1, NOW - 60)], NOW - 120) for i in range(30)))
    steps_only = {"namespace": "ml", "pod": "pod-tqdm", "container": "c", "run_id": "tqdm"}
    many["steps_planned"] = [s(1000, **steps_only)]
    many["last_report"] = [s(NOW - 5, **steps_only)]
    many = merge(many, job("overdue", 10, [(1, NOW - 3600)], NOW - 4000))
    many["ksm_pod_meta"] = [s(1, uid="u9", meta="nodeselectors", nodeselector_pool="a")]
    client = CannedClient(many)
    cycle = make_cycle(client, store, static_full_every=1)
    first = cycle.run().queries
    client.answers["present"] = [x for x in many["present"] if x.labels["run_id"] != "r0"]
    client.answers["held_present"] = [s(NOW - 20, **labels_of("r0", pod="pod-r0"))]
    before = len(client.seen)
    fs = cycle.run()
    assert "r0" in {j.run.run_id for j in fs.jobs}
    # the gap asked with the GPU models of the full read, no query more than without it
    (gap,) = [q for q in client.seen[before:] if GAP in q]
    assert "gpu_eta_gpu_info" in gap
    client.answers["present"] = many["present"]
    assert fs.queries == cycle.run().queries <= first == queries.QUERIES_PER_CYCLE


class _LengthCapped(CannedClient):
    """A CannedClient that refuses a query over ``cap`` characters, as VictoriaMetrics
    refuses one over ``-search.maxQueryLen`` (16,384: HTTP 422)."""

    cap = 16_384

    def instant(self, query, at=None, *, warnings=None, skipped=None):
        if len(query) > self.cap:
            self._count(query)
            raise PromAPIError(f"too long query; len(query)={len(query)}")
        return super().instant(query, at, warnings=warnings, skipped=skipped)


def _sweep(n: int) -> dict:
    """``n`` runs of long ids (UUIDs) in long pod names, and one run that stays."""
    ids = [str(uuid.uuid5(uuid.NAMESPACE_DNS, str(i))) for i in range(n)]
    runs = (
        job(r, 10, [(1, NOW - 200)], NOW - 300, pod=f"old-sweep-{i:04d}-worker-0")
        for i, r in enumerate(ids)
    )
    return merge(*runs, job("keep", 10, [(1, NOW - 200)], NOW - 300))


def test_many_runs_gone_at_once_keep_every_query_within_the_cap(store: HistoryStore) -> None:
    """44 runs leaving at once: their unchanging series read again and the gap's parts
    made one 16,490-character query, refused by VictoriaMetrics in every cycle after.
    The gap's parts ride on that read only while the two fit ``MAX_QUERY_CHARS``."""
    answers = _sweep(44)
    t = [NOW]
    client = _LengthCapped(answers)
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    cycle.run()
    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] == "keep"]
    before = len(client.seen)
    for i in range(1, 4):
        t[0] = NOW + 60 * i
        cycle.run()  # raises PromAPIError before the fix
    assert max(map(len, client.seen[before:])) <= queries.MAX_QUERY_CHARS
    assert any(GAP in q for q in client.seen[before:])


def test_a_cycle_failing_on_the_gap_read_does_not_send_it_again(store: HistoryStore) -> None:
    """A read that fails with the gap's parts in it (a refused or timed-out query)
    leaves no previous read to hold runs from: the next cycle sends plain reads."""
    answers = _sweep(3)
    t = [NOW]
    client = _LengthCapped(answers)
    cycle = make_cycle(client, store, clock=lambda: t[0])
    cycle.run()
    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] == "keep"]
    client.cap = 0  # every query refused in this cycle
    t[0] = NOW + 60
    with pytest.raises(PromAPIError):
        cycle.run()
    client.cap = 16_384
    t[0] = NOW + 120
    before = len(client.seen)
    cycle.run()
    assert not any(GAP in q for q in client.seen[before:])


def test_a_run_is_held_past_the_read_window_up_to_the_lookback(store: HistoryStore) -> None:
    """The hold lasts as long as the gap read answers (Prometheus' 5-minute lookback),
    not one read window: once the held run's last samples leave ``last_over_time`` of
    the window (its plan and start too), what is held of it is kept, as it is seen."""
    answers = merge(
        job("a", 10, [(1, NOW - 200)], NOW - 300),
        job("b", 10, [(1, NOW - 200)], NOW - 300),
        {"allocated": [*_allocated("a", "0"), *_allocated("b", "1")]},
    )
    t = [NOW]
    client = CannedClient(answers)
    cycle = make_cycle(client, store, clock=lambda: t[0])
    assert {j.run.run_id for j in cycle.run().jobs} == {"a", "b"}
    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] != "a"]
    client.answers["allocated"] = _allocated("b", "1")
    client.answers["held_present"] = [s(NOW - 20, **labels_of("a"))]
    client.answers["held_allocated"] = _allocated("a", "0")
    t[0] = NOW + 60
    assert {j.run.run_id for j in cycle.run().jobs} == {"a", "b"}
    # a minute on: a's series have left every window read (plan and start included)
    for name in ("epoch", "last_end", "last_report", *queries.STATIC_RUN):
        client.answers[name] = [
            x for x in client.answers.get(name, []) if x.labels["run_id"] != "a"
        ]
    for i in (2, 3, 4):
        t[0] = NOW + 60 * i
        fs = cycle.run()
        assert {j.run.run_id for j in fs.jobs} == {"a", "b"}, i
        assert {g.gpu for g in fs.gpus} == {"0", "1"}
    # the gap read no longer answers (past the lookback): away
    client.answers["held_present"] = []
    t[0] = NOW + 300
    assert {j.run.run_id for j in cycle.run().jobs} == {"b"}


def test_the_runs_held_are_counted_and_logged_when_they_change(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``gpu_eta_forecaster_runs_held``: the runs forecast from a scrape gap; one INFO
    line when that set changes, none while it stays."""
    answers = merge(
        job("a", 10, [(1, NOW - 200)], NOW - 300), job("b", 10, [(1, NOW - 200)], NOW - 300)
    )
    client = CannedClient(answers)
    cycle = make_cycle(client, store)
    assert cycle.run().n_held == 0
    client.answers["present"] = [x for x in answers["present"] if x.labels["run_id"] != "a"]
    client.answers["held_present"] = [s(NOW - 20, **labels_of("a"))]
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        fs = cycle.run()
        assert fs.n_held == 1 and cycle.run().n_held == 1
        client.answers["held_present"] = []
        assert cycle.run().n_held == 0
    said = [r.getMessage() for r in caplog.records if "scrape gap" in r.getMessage()]
    assert len(said) == 2 and said[0].endswith(
        "1 runs held from their last samples (exporter scrape failed): a"
    )
    _, _, tail = forecast_families(fs, NOW)
    (family,) = [f for f in tail if f.name == "gpu_eta_forecaster_runs_held"]
    assert [x.value for x in family.samples] == [1.0]


def _without(answers: dict, run_id: str) -> dict:
    return {k: [x for x in v if x.labels.get("run_id") != run_id] for k, v in answers.items()}


def _ended_then_gap(store: HistoryStore, ends: list, planned: float = 10) -> list:
    """Run a ends at NOW + 30 (its pod lives on, its end series with it) and is read
    done; later its exporter fails its scrapes for longer than the read window (< 5
    min): the window's ``last_over_time`` no longer answers a (end, epoch, plan), the
    gap read does. The ForecastSets of the three cycles in the gap."""
    t = [NOW]
    base = merge(
        job("a", planned, ends, NOW - 300),
        job("b", 10, [(1, NOW - 40)], NOW - 100),
        {"allocated": [*_allocated("a", "0"), *_allocated("b", "1")]},
    )
    client = CannedClient(merge(base, {"ended": [s(NOW + 30, **labels_of("a"))]}))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    for later in (60, 120, 180, 240, 300, 360, 420):
        t[0] = NOW + later
        assert [j.run.run_id for j in cycle.run().jobs] == ["b"]
    client.answers = _without(base, "a")
    client.answers["held_present"] = [s(NOW + 400, **labels_of("a"))]
    client.answers["held_allocated"] = _allocated("a", "0")
    out = []
    for later in (480, 540, 600):
        t[0] = NOW + later
        out.append(cycle.run())
    return out


def test_an_ended_run_is_not_brought_back_by_a_scrape_gap(store: HistoryStore) -> None:
    """A notebook run that called end() before its first epoch (stored not completed),
    its pod alive: a later scrape gap held it as running (it was present at the previous
    read), its row revived, forecast to its plan. Only the runs running are held."""
    for fs in _ended_then_gap(store, []):
        assert [j.run.run_id for j in fs.jobs] == ["b"]
        assert "a" not in {r.run.run_id for r in store.running()}
    assert [(r.run_id, r.completed) for r in store.finished()] == [("a", False)]


def test_runs_held_does_not_count_an_ended_run(store: HistoryStore) -> None:
    """Early-stopped (2 of 10, stored completed at 2): never forecast again, so not a
    run forecast from a scrape gap (``gpu_eta_forecaster_runs_held``)."""
    for fs in _ended_then_gap(store, [(1, NOW - 200), (2, NOW + 20)]):
        assert [j.run.run_id for j in fs.jobs] == ["b"]
        assert fs.n_held == 0


@pytest.mark.parametrize("ended", [True, False], ids=["ended", "at_plan"])
def test_a_run_held_and_read_done_is_not_counted_held(
    store: HistoryStore, caplog: pytest.LogCaptureFixture, ended: bool
) -> None:
    """Running at the previous read, then its last samples (its end, or its last epoch
    at its plan) and its exporter's failed scrape: held, and read done from the window's
    answers, so finished and not forecast; it is not among the runs held (the metric,
    the INFO line)."""
    t = [NOW]
    client = CannedClient(merge(job("a", 10, [(1, NOW - 200)], NOW - 300), job("b", 10, [], NOW)))
    cycle = make_cycle(client, store, clock=lambda: t[0])
    assert cycle.run().n_held == 0
    ends = [(1, NOW - 200)] if ended else [(1, NOW - 200), (10, NOW + 30)]
    later = merge(job("a", 10, ends, NOW - 300), job("b", 10, [], NOW))
    if ended:
        later["ended"] = [s(NOW + 30, **labels_of("a"))]
    client.answers = _without(later, "a") | {
        name: later[name] for name in ("epoch", "last_end", "ended") if name in later
    }
    client.answers["held_present"] = [s(NOW + 30, **labels_of("a"))]
    t[0] = NOW + 60
    with caplog.at_level(logging.INFO, logger="gpu_eta.forecaster.cycle"):
        fs = cycle.run()
    assert [j.run.run_id for j in fs.jobs] == ["b"] and fs.n_held == 0
    assert not [r for r in caplog.records if "scrape gap" in r.getMessage()]


def test_named_gap_parts_too_long_fall_back_to_every_runs() -> None:
    """``parts``' own length guard: 150 runs of 64-character ids in long pod names make
    named parts of ~40,000 characters (the run matcher appears twice in
    ``held_present``, the pods twice in ``held_allocated``), over VictoriaMetrics'
    16,384 even sent alone: every run's parts instead, which fit with the GPU models."""
    keys = [("ml", f"pod-{i:03d}-" + "x" * 50, "c", f"{i:03d}" + "r" * 61) for i in range(150)]
    assert len(keys) <= queries.MAX_UNKNOWN_RUNS
    got = scrape_gap.parts(keys)
    assert got == {n: queries.render(t, 0, 0) for n, t in queries.SCRAPE_GAP.items()}
    assert queries.fits({**got, "gpu_info": queries.GPU_INFO}), len(queries.fold(got))


def test_a_run_under_a_gpu_less_container_holds_its_pods_allocations() -> None:
    """A run filed under a container that holds no GPU (its report named no container
    and the pod's first is a sidecar) counts for the pod's GPU-holding container
    (cycle.gpu_free_times); held without that container's allocation, the GPU lost its
    free time for the whole gap."""
    from gpu_eta.forecaster.series import Sample

    run = {"node": "n1", "namespace": "ml", "pod": "p", "container": "sidecar", "run_id": "r1"}
    alloc = {"node": "n1", "namespace": "ml", "pod": "p", "container": "train", "gpu": "0"}
    other = {**alloc, "pod": "q", "gpu": "1"}  # another pod's: not held
    gap = {
        "held_present": [Sample({**run, "job": "e", "instance": "a"}, NOW - 20, NOW)],
        "held_allocated": [Sample(alloc, 1.0, NOW), Sample(other, 1.0, NOW)],
    }
    out = scrape_gap.held([("ml", "p", "sidecar", "r1")], {"present": [], "allocated": []}, gap)
    assert [(x.labels["pod"], x.labels["container"]) for x in out["allocated"]] == [("p", "train")]
