"""The demo starts "already running": a warm-up before the anchor, backfilled, then resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_eta.exporter.collectors.logs import LogProgressCollector
from gpu_eta.exporter.progress import parse_report
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta
from gpu_eta.simulation.backfill import (
    LOOKBACK_SECONDS,
    openmetrics_lines,
    render_runs_csv,
    warm_history,
    without_lingering,
)
from gpu_eta.simulation.cluster import ClusterConfig, ClusterSim, warm_start
from gpu_eta.simulation.driver import (
    Driver,
    LogWriter,
    ProgressSender,
    log_run_id,
    log_run_start,
    loss_at,
    report_body,
    steps_per_epoch,
    warm_up_reports,
    write_progress_state,
)

ANCHOR = 1_763_700_000.0
SNAPSHOT = 88.0  # `./demo.sh --seconds 75`: ~13 s of start-up, then 75 s


def _done(pod, t: float) -> int:
    return sum(1 for e in pod.epoch_ends if e <= t)


def _training_at(sim: ClusterSim, t: float) -> list:
    return [p for p in sim.pods if p.kind == "training" and p.report != "real" and p.alive_at(t)]


@pytest.fixture(scope="module")
def warm():
    """The default demo cluster (seed 0) at its anchor, and its first minute and a half."""
    sim, past = warm_start(ClusterConfig())
    future = sim.advance(SNAPSHOT)
    return sim, past, future


def test_default_cluster_is_busy_at_the_anchor(warm) -> None:
    sim, past, _ = warm
    assert past and all(e.t <= 0 for e in past)
    running = _training_at(sim, 0.0)
    # several jobs at different stages, all started before the anchor
    mid_run = [p for p in running if p.run_start is not None and 1 <= _done(p, 0.0) < p.epochs]
    assert len(mid_run) >= 6
    assert all(p.start < 0 and p.run_start < 0 for p in mid_run)
    assert len({round(_done(p, 0.0) / p.epochs, 1) for p in mid_run}) >= 4  # various stages
    # a time-sliced GPU shared by at least two trainers
    shared: dict[tuple[int, int], int] = {}
    for p in running:
        for g, _r in p.gpus:
            if sim.nodes[p.node].gpus[g].replicas > 1:
                shared[(p.node, g)] = shared.get((p.node, g), 0) + 1
    assert max(shared.values(), default=0) >= 2
    # idle notebooks, held since before the anchor; most GPUs held
    notebooks = [p for p in sim.pods if p.kind == "notebook" and p.alive_at(0.0)]
    assert len(notebooks) >= 3 and all(p.start < 0 for p in notebooks)
    held = {(p.node, g) for p in sim.pods if p.alive_at(0.0) for g, _ in p.gpus}
    assert len(held) >= 0.8 * sum(len(n.gpus) for n in sim.nodes)


def test_default_cluster_changes_in_the_first_minute(warm) -> None:
    sim, _, future = warm
    assert all(0 < e.t <= SNAPSHOT for e in future)
    finished = [e for e in future if e.kind == "epoch_end" and e.epoch == e.pod.epochs]
    arrived = [e for e in future if e.kind == "pod_start" and e.pod.kind == "training"]
    assert finished and arrived
    stalls = [p for p in sim.pods if p.stalled_between and 0 < p.stalled_between[0] <= SNAPSHOT]
    assert stalls


def test_warm_start_is_seeded() -> None:
    def signature(seed: int) -> list[tuple]:
        sim, _ = warm_start(ClusterConfig(seed=seed))
        return [(p.name, p.node, p.gpus, round(p.start, 6), len(p.epoch_ends)) for p in sim.pods]

    assert signature(4) == signature(4)
    assert signature(4) != signature(5)


def test_no_warm_start_is_the_empty_cluster() -> None:
    sim, past = warm_start(ClusterConfig(warm_start_seconds=0))
    assert all(e.kind == "pod_start" and e.pod.kind == "notebook" for e in past)
    assert not [p for p in sim.pods if p.kind == "training"]


def test_keep_free_leaves_a_gpu_for_real_training_on_a_full_cluster() -> None:
    config = ClusterConfig(arrival_seconds=60)  # saturated: a long queue
    sim, _ = warm_start(config)
    with pytest.raises(ValueError):
        [sim.reserve_pod(0) for _ in range(20)]
    sim, _ = warm_start(config, keep_free=[0, 1])
    assert sim.queued > 0
    pods = [sim.reserve_pod(0), sim.reserve_pod(1)]
    assert [p.node for p in pods] == [0, 1] and all(p.start == 0.0 for p in pods)


def test_advancing_to_the_past_only_hands_out_planned_events() -> None:
    a = ClusterSim(ClusterConfig(seed=2))
    b = ClusterSim(ClusterConfig(seed=2))
    ahead = a.advance(30.0)
    early = a.advance(5.0)  # already simulated: nothing new, state untouched
    assert early == []
    rest_a = a.advance(200.0)
    rest_b = b.advance(200.0)
    key = [(round(e.t, 6), e.kind, e.pod.name, e.epoch) for e in ahead + rest_a]
    assert key == [(round(e.t, 6), e.kind, e.pod.name, e.epoch) for e in rest_b]


def _om_samples(lines: list[str], family: str) -> dict[str, list[tuple[float, float, str]]]:
    """run_id -> [(timestamp, value, labels)] of one family."""
    out: dict[str, list[tuple[float, float, str]]] = {}
    for line in lines:
        if not line.startswith(family + "{"):
            continue
        labels, value, ts = line.rsplit(" ", 2)
        run = labels.split('run_id="', 1)[1].split('"', 1)[0]
        out.setdefault(run, []).append((float(ts), float(value), labels))
    return out


def test_backfill_holds_the_earlier_epochs_of_running_jobs(warm) -> None:
    sim, _, _ = warm
    history = warm_history(sim, ANCHOR)
    labels = {
        n.index: {"job": "gpu-eta-exporter", "instance": f"127.0.0.1:{9100 + n.index}"}
        for n in sim.nodes
    }
    lines = list(openmetrics_lines(without_lingering(history, 30.0), 15.0, labels))
    assert lines[-1] == "# EOF"
    epochs = _om_samples(lines, "gpu_eta_training_epoch")
    ends = _om_samples(lines, "gpu_eta_training_epoch_end_timestamp_seconds")
    starts = _om_samples(lines, "gpu_eta_training_run_start_timestamp_seconds")
    planned = _om_samples(lines, "gpu_eta_training_epochs_planned")
    checked = planless = 0
    for pod in _training_at(sim, 30.0):
        if pod.run_start is None or pod.run_start >= -30 or _done(pod, -15.0) < 1:
            continue
        run_id = log_run_id(pod, ANCHOR) if pod.report == "log" else pod.run_id
        samples = epochs[run_id]
        assert all(ts < ANCHOR for ts, _, _ in samples)
        # the series is the live exporter's: same node, pod, run id, job and instance
        assert f'instance="127.0.0.1:{9100 + pod.node}"' in samples[0][2]
        assert f'pod="{pod.name}"' in samples[0][2] and 'job="gpu-eta-exporter"' in samples[0][2]
        assert max(v for _, v, _ in samples) == _done(pod, samples[-1][0] - ANCHOR) >= 1
        # every epoch end sampled at least once is the simulated one
        seen_ends = {round(v, 3) for _, v, _ in ends[run_id]}
        last_before = max(e for e in pod.epoch_ends if e <= -15.0)
        want_start = (
            log_run_start(pod, ANCHOR) if pod.report == "log" else round(ANCHOR + pod.run_start, 3)
        )
        if pod.report == "http":
            assert round(ANCHOR + last_before, 3) in seen_ends
        else:
            assert any(abs(v - (ANCHOR + last_before)) < 0.002 for v in seen_ends)
        assert {round(v, 3) for _, v, _ in starts[run_id]} == {want_start}
        # a run without a plan has none before its end: the forecaster must not read one
        assert (run_id in planned) == pod.reports_plan
        checked += 1
        planless += not pod.reports_plan
    assert checked >= 5 and planless >= 1


def test_backfill_leaves_out_pods_that_would_linger(warm) -> None:
    sim, _, _ = warm
    history = warm_history(sim, ANCHOR)
    ended_recently = [
        p for p in history.pods if p.end is not None and p.end > ANCHOR - LOOKBACK_SECONDS
    ]
    assert ended_recently
    kept = without_lingering(history, 30.0)
    names = {p.name for p in kept.pods}
    for p in ended_recently:
        assert (p.name in names) == (p.end > ANCHOR + 30.0)
    # finished runs of the warm-up still reach the forecaster's seed CSV
    done = [p for p in history.pods if p.completed and p.end <= ANCHOR]
    csv = render_runs_csv(done)
    assert done and all(p.run_id in csv for p in done)


def test_driver_resumes_running_jobs_with_their_run_id_and_start(warm) -> None:
    _, _, future = warm
    resumed = [
        e
        for e in future
        if e.kind == "epoch_end"
        and e.pod.report == "http"
        and e.pod.run_start < 0
        and _done(e.pod, 0.0) >= 1
    ]
    assert len(resumed) >= 3
    for e in resumed:
        body = report_body(e.pod, e, ANCHOR)
        report = parse_report(json.dumps(body), now=ANCHOR + e.t)
        assert report.run_id == e.pod.run_id
        assert report.run_start == pytest.approx(ANCHOR + e.pod.run_start, abs=1e-3)
        assert report.run_start < ANCHOR and report.epoch == e.epoch >= 2


def test_replayed_logs_give_the_exporter_the_backfills_run(warm, tmp_path: Path) -> None:
    """The real log collector reads the replayed warm-up and arrives at the same run."""
    sim, past, _ = warm
    root = tmp_path / "pod-logs"
    driver = Driver(sim, ANCHOR, {}, ProgressSender({}), LogWriter(root))
    assert driver.replay(past) > 0
    log_pods = [
        p
        for p in _training_at(sim, 0.0)
        if p.report == "log" and p.run_start is not None and p.run_start < 0
    ]
    assert log_pods
    metas = [PodMeta(p.namespace, p.name, p.uid, ip=p.ip) for p in log_pods]
    store = ProgressStore()
    LogProgressCollector(root, store, lambda: metas, clock=lambda: ANCHOR).poll()
    history = {p.name: p for p in warm_history(sim, ANCHOR).pods}
    for pod in log_pods:
        got = store.get(pod.namespace, pod.name, "trainer", "log")
        assert got is not None, pod.name
        assert got.run_id == history[pod.name].run_id == log_run_id(pod, ANCHOR)
        assert got.run_start_timestamp == pytest.approx(log_run_start(pod, ANCHOR), abs=1e-6)
        assert got.epoch == _done(pod, 0.0) and got.epochs == pod.epochs


def test_exporter_state_file_resumes_http_runs_where_the_backfill_ends(warm, tmp_path) -> None:
    """Each exporter starts with the progress it would hold after the warm-up, so its
    series are live (and go stale when the pod goes) from the first scrape."""
    sim, _, future = warm
    path = tmp_path / "state.json"
    count = write_progress_state(path, sim.pods, ANCHOR)
    loaded = ProgressStore(state_path=path)  # the exporter's own loader
    runs = [p for p in _training_at(sim, 0.0) if p.report == "http" and p.run_start is not None]
    runs = [p for p in runs if p.run_start <= 0]
    assert count == len(runs) >= 5
    for pod in runs:
        got = loaded.get(pod.namespace, pod.name, "trainer", "http")
        assert got is not None and got.run_id == pod.run_id
        assert got.run_start_timestamp == pytest.approx(ANCHOR + pod.run_start, abs=1e-3)
        done = _done(pod, 0.0)
        spe = steps_per_epoch(pod)
        assert got.epoch == done and got.step == done * spe
        if pod.reports_plan:
            assert got.epochs == pod.epochs and got.steps == pod.epochs * spe
        else:  # a loop trained to a target: no totals until its end
            assert got.epochs is None and got.steps is None
        assert got.batch_size == pod.batch_size
        last = max((e for e in pod.epoch_ends if e <= 0), default=None)
        if last is None:
            assert got.epoch_end_timestamp is None and dict(got.metrics) == {}
            assert got.last_report_timestamp == pytest.approx(ANCHOR + pod.run_start, abs=1e-6)
        else:
            assert got.epoch_end_timestamp == pytest.approx(ANCHOR + last, abs=1e-6)
            assert got.last_report_timestamp == pytest.approx(ANCHOR + last, abs=1e-6)
            assert dict(got.metrics) == {"loss": loss_at(done)}
        # the reports it was built from: the run's start, then one per epoch ended
        assert len(warm_up_reports(pod, ANCHOR)) == 1 + done
    # each resumed run's next live report continues it: same run, one more epoch, ended now
    continued = 0
    for e in future:
        if e.kind != "epoch_end" or e.pod not in runs or e.epoch != _done(e.pod, 0.0) + 1:
            continue
        pod = e.pod
        before = loaded.get(pod.namespace, pod.name, "trainer", "http")
        now = ANCHOR + e.t
        report = parse_report(json.dumps(report_body(pod, e, ANCHOR)), now=now)
        after = loaded.merge(pod.namespace, pod.name, "trainer", "http", report, now=now)
        assert after.run_id == before.run_id
        assert after.run_start_timestamp == before.run_start_timestamp
        assert after.epoch == before.epoch + 1 and after.epoch_end_timestamp == now
        continued += 1
    assert continued >= 3
    # notebooks, log pods, pods gone by the anchor and runs not started yet are not in it
    assert all(warm_up_reports(p, ANCHOR) == [] for p in sim.pods if p.report != "http")
    assert all(
        warm_up_reports(p, ANCHOR) == []
        for p in sim.pods
        if p.run_start is None or p.run_start > 0 or (p.end is not None and p.end <= 0)
    )
