"""bench/queue_start.py: the heterogeneous scenario (GPU types, a tainted pool, a node
under pressure) scored per population and beside the same replay given no types and
taints."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import ClassVar

import pytest

from gpu_eta.forecaster.queue_replay import EQUAL, GPU_RESOURCE, Node, PendingPod, Toleration
from gpu_eta.simulation.cluster import POOL_TAINT
from tests.bench.bench_module import load_bench

qs = load_bench("queue_start")

A100, RTX = "NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4080"
TEAM = (Toleration(*POOL_TAINT[:1], EQUAL, *POOL_TAINT[1:]),)


def test_arrivals_keep_each_shape_the_blind_inputs_none() -> None:
    created = {
        "a": (100.0, (1, A100, ())),
        "b": (200.0, (1, A100, ())),
        "c": (300.0, (1, "", TEAM)),
        "d": (400.0, (2, RTX, ())),
        "old": (-1000.0, (1, RTX, ())),  # before the window
    }
    arrivals = qs.arrival_rates(created, 500.0, 450.0)
    assert [(a.units, a.product, a.tolerations, a.rate_per_second) for a in arrivals] == [
        (1, "", TEAM, pytest.approx(1 / 450)),
        (1, A100, (), pytest.approx(2 / 450)),
        (2, RTX, (), pytest.approx(1 / 450)),
    ]
    nodes = [Node("n", {GPU_RESOURCE: 4}, A100, taints=(POOL_TAINT,))]
    pending = [PendingPod("team-a", "p", GPU_RESOURCE, 1, 10.0, product=A100, tolerations=TEAM)]
    bare_nodes, bare_pending, bare_arrivals = qs.without_types_and_taints(nodes, pending, arrivals)
    assert bare_nodes[0].taints == () and bare_nodes[0].allocatable == nodes[0].allocatable
    assert (bare_pending[0].product, bare_pending[0].tolerations) == ("", ())
    assert [(a.units, a.product, a.tolerations) for a in bare_arrivals] == [
        (1, "", ()),
        (2, "", ()),
    ]
    assert bare_arrivals[0].rate_per_second == pytest.approx(3 / 450)


def test_mixed_scenario_prints_each_population_beside_the_blind_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--scenario", "mixed", "--seeds", "4", "--live-seconds", "900", "--samples", "10"]
    assert qs.main(argv) == 0
    out = capsys.readouterr().out
    table = out.split("by population; blind: the same replay given no types and taints:\n")[1]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:6]}
    assert list(rows) == ["all", "typed", "untyped", "pool", "kept_off"]
    n = {name: int(row[1]) for name, row in rows.items()}
    assert n["all"] == n["typed"] + n["untyped"] + n["pool"] and n["typed"] and n["pool"]
    # the blind replay answers the same observations; its error ratio is printed
    assert rows["all"][5] == "|" and int(rows["all"][6]) == n["all"]
    assert float(rows["all"][-1]) > 0


def test_demo_scenario_has_one_population_and_no_blind_replay() -> None:
    config = qs.ClusterConfig(warm_start_seconds=0.0)
    obs, actual = qs.run_seed(1, config, 600.0, 60.0, 10)
    assert obs and {o.population for o in obs} == {"untyped"}
    assert all(o.blind is None for o in obs)
    assert qs.score(obs, {(1, k): v for k, v in actual.items()}, 10.0, blind=True) == {"n": 0}


def test_the_snapshot_tells_notebooks_that_keep_their_gpus() -> None:
    """As kube-state-metrics shows the simulator's pods (a Job's training pods, a
    StatefulSet's notebooks: ``kube_pod_owner``), a notebook outlives its run and a
    training pod ends with it; given every pod's real end (``--exact-ends``), that end is
    the pod's own, notebooks' too."""
    config = qs.ClusterConfig(warm_start_seconds=0.0, seed=1)
    sim = qs.ClusterSim(config, stream="live", start=0.0)
    sim.advance(600.0)
    kinds = {p.name: p.kind for p in sim.pods}
    history = qs.simulate_history(config, end_timestamp=0.0, seconds=2400.0, jobs=12)
    model = qs.EtaModel(random_state=0).fit(list(qs.finished_runs(history.pods)))
    _, holders, _ = qs.snapshot(sim, model, 600.0)
    got = {kinds[h.pod]: set() for h in holders}
    for h in holders:
        got[kinds[h.pod]].add(h.ends_with_run)
    assert got == {"notebook": {False}, "training": {True}}
    _, exact, _ = qs.snapshot(sim, model, 600.0, {p.uid: 9999.0 for p in sim.pods})
    assert {h.ends_with_run for h in exact} == {True}


def test_the_snapshot_tells_a_training_pod_in_its_release_lag_its_runs_end() -> None:
    """A training pod whose run has completed and which still holds its GPU (the
    simulator's pods linger 5 s) is in its release lag: its holder says when its run
    ended (``Holder.run_ended``, the run's last report), as the service's watch does; a
    pod whose run runs says nothing of it."""
    config = qs.ClusterConfig(warm_start_seconds=0.0, seed=1)
    played = qs.ClusterSim(config, stream="live", start=0.0)
    played.advance(1800.0)
    done = next(
        p for p in played.pods if p.completed and p.end is not None and p.end > p.epoch_ends[-1]
    )
    t = (done.epoch_ends[-1] + done.end) / 2
    sim = qs.ClusterSim(config, stream="live", start=0.0)
    sim.advance(t)
    history = qs.simulate_history(config, end_timestamp=0.0, seconds=2400.0, jobs=12)
    model = qs.EtaModel(random_state=0).fit(list(qs.finished_runs(history.pods)))
    _, holders, _ = qs.snapshot(sim, model, t)
    ended = {h.pod: h.run_ended for h in holders if h.run_ended is not None}
    assert ended == {done.name: done.epoch_ends[-1]}
    assert all(h.ends is not None for h in holders if h.run_ended is None and h.ends_with_run)


def test_the_targets_line_says_pass_or_miss_for_each_target() -> None:
    met = {"n": 9, "median_error_ratio": 0.2, "coverage": 0.8, "naive_median_error_ratio": 0.9}
    assert qs.verdict(met) == (
        "targets: median_error_ratio 0.200 <= 0.25 PASS; coverage 0.800 in 0.70-0.90 PASS;"
        " clearly below naive (<= 0.5 x 0.900) PASS"
    )
    missed = {
        "n": 9,
        "median_error_ratio": 0.268,
        "coverage": 0.92,
        "naive_median_error_ratio": 0.5,
    }
    assert qs.verdict(missed) == (
        "targets: median_error_ratio 0.268 <= 0.25 MISS; coverage 0.920 in 0.70-0.90 MISS;"
        " clearly below naive (<= 0.5 x 0.500) MISS"
    )
    assert qs.verdict({"n": 0}) == "targets: no observation scored: MISS"


def test_the_history_gives_the_release_lags_of_completed_runs_only() -> None:
    done = qs.Pod("ml", "a", "u", "10.0.0.1", 0, "training", ((0, 0),), 0.0, end=105.0)
    done.epochs, done.epoch_ends = 2, [50.0, 100.0]
    cut = qs.Pod("ml", "b", "u", "10.0.0.2", 0, "training", ((1, 0),), 0.0, end=80.0)
    cut.epochs, cut.epoch_ends, cut.cancelled = 2, [50.0], True
    running = qs.Pod("ml", "c", "u", "10.0.0.3", 0, "training", ((2, 0),), 0.0)
    assert qs.release_lags([done, cut, running]) == (5.0,)


def test_the_service_learns_the_history_lags_from_its_cycles_reads() -> None:
    """Completed pods each holding their GPU 5 s after their run's end, read by cycles
    every 30 s (``learned_release_lags``, as the service's ReleaseLags reads them): the
    lags learned centre on 5 s, not on half a cycle; a cancelled run's pod adds none."""
    pods = []
    for i in range(60):
        start = 1000.0 * i
        end = start + 500 + 30 * (i * 0.37 % 1)  # its run's end, somewhere in a cycle
        p = qs.Pod("ml", f"p{i}", "u", "10.0.0.1", 0, "training", ((i, 0),), start, end=end + 5)
        p.epochs, p.epoch_ends = 2, [start + 250, end]
        pods.append(p)
    cut = qs.Pod("ml", "cut", "u", "10.0.0.2", 0, "training", ((99, 0),), 0.0, end=900.0)
    cut.epochs, cut.epoch_ends, cut.cancelled = 2, [100.0], True
    lags = sorted(qs.learned_release_lags([*pods, cut], 30.0))
    assert len(lags) == 60
    assert lags[30] == pytest.approx(5.0, abs=1.0)


def reused_notebook(config: qs.ClusterConfig) -> tuple[qs.ClusterSim, qs.Pod, float]:
    """The mixed site played 90 minutes, its first notebook whose name KubeSpawner gives
    a later server again (``jupyter-<user>`` once the old pod is gone), and a time it
    runs."""
    played = qs.ClusterSim(config, stream="live", start=0.0)
    played.advance(5400.0)
    names = Counter(p.name for p in played.pods)
    first = min((p for p in played.pods if names[p.name] > 1), key=lambda p: p.start)
    assert first.end is not None
    return played, first, (first.start + first.end) / 2


def test_exact_ends_are_each_pods_own_when_a_notebook_name_comes_again() -> None:
    """``--exact-ends`` gives every running pod its real end, read from the same seeded
    run played to the end. Two notebooks of one user are two pods of one name, one after
    the other: each holder gets its own pod's end (by uid), not that of the last pod of
    its name, a later server ending up to an hour after, which held the GPU that long in
    the replay."""
    config = qs.ClusterConfig(warm_start_seconds=0.0, seed=0, **qs.MIXED)
    played, first, t = reused_notebook(config)
    sim = qs.ClusterSim(config, stream="live", start=0.0)
    sim.advance(t)
    history = qs.simulate_history(config, end_timestamp=0.0, seconds=2400.0, jobs=12)
    model = qs.EtaModel(random_state=0).fit(list(qs.finished_runs(history.pods)))
    _, holders, _ = qs.snapshot(sim, model, t, qs.real_ends(played.pods))
    (held,) = [h for h in holders if h.pod == first.name]
    assert held.ends == (first.end,) * 3


def test_each_pod_created_counts_as_an_arrival_whatever_its_name() -> None:
    """Pods arriving are counted as the forecaster reads them, one per pod (``topk by
    (uid)``): a notebook spawned under the name of one gone earlier is an arrival too."""
    config = qs.ClusterConfig(warm_start_seconds=0.0, seed=0, **qs.MIXED)
    played, _, _ = reused_notebook(config)
    created: dict = {}
    qs.note_created(created, played.pods)
    assert len(created) == len(played.pods)


# two training pods of the mixed site's seed 0, queued one after the other: the first the
# pool team's, the second an untyped pod of another namespace
FIRST, SECOND = "mnist-mlp-qfmjz", "mnist-mlp-g6qkv"


class SecondNamedAsFirst(qs.ClusterSim):
    """The simulator, its pod ``SECOND`` named ``FIRST``: a pod name is unique in its
    namespace only, and a bare pod submitted again takes its old name."""

    def advance(self, t: float) -> None:
        super().advance(t)
        for pod in (*self.queued_pods(), *self.pods):
            if pod.name == SECOND:
                pod.name = FIRST


class RecordingCalibrator(qs.StartCalibrator):
    """The real calibrator, keeping each (raw P10/P50/P90, real start) it learns from."""

    seen: ClassVar[list[tuple[qs.Starts, float]]] = []

    def observe(self, starts: qs.Starts, actual: float) -> None:
        RecordingCalibrator.seen.append((tuple(starts), actual))
        super().observe(starts, actual)


def test_two_pods_of_one_name_keep_their_own_population_and_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each queued pod is its own by uid: its population, the start its predictions are
    scored against and the start its raw predictions teach the calibration, not those of
    another pod of its name (another namespace's, or one submitted again)."""
    config = qs.ClusterConfig(warm_start_seconds=0.0, **qs.MIXED)
    played = qs.ClusterSim(replace(config, seed=0), stream="live", start=0.0)
    played.advance(2700.0)
    first, second = (next(p for p in played.pods if p.name == n) for n in (FIRST, SECOND))
    assert qs.population_of(first) == "pool" and qs.population_of(second) == "untyped"
    assert first.start < second.created < second.start < 900.0
    monkeypatch.setattr(qs, "ClusterSim", SecondNamedAsFirst)
    monkeypatch.setattr(qs, "StartCalibrator", RecordingCalibrator)
    RecordingCalibrator.seen = []
    obs, actual = qs.run_seed(0, config, 900.0, 30.0, 10, calibrate=False)
    mine = [o for o in obs if o.pod == FIRST]
    waits = {"first": [o for o in mine if o.t < first.start]}
    waits["second"] = [o for o in mine if second.created <= o.t < second.start]
    assert waits["first"] and waits["second"]
    assert {o.population for o in waits["second"]} == {"untyped"}
    # uncalibrated, an observation's starts are the raw prediction the calibration learns
    assert [(o.starts, second.start) for o in waits["second"]] == [
        s for s in RecordingCalibrator.seen if s[0] in {o.starts for o in waits["second"]}
    ]
    keyed = {(0, k): v for k, v in actual.items()}
    for o in waits["first"]:
        error = qs.score([o], keyed, 0.0)["median_error_ratio"]
        assert error == pytest.approx(abs(o.p50 - first.start) / (first.start - o.t))
