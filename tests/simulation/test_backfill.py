"""History: OpenMetrics that promtool accepts, a runs CSV the forecaster reads, and a
past at the live cluster's load."""

from __future__ import annotations

import io
import itertools
import statistics
import time
from dataclasses import replace
from pathlib import Path

import pytest

from gpu_eta.forecaster.runs_csv import parse_runs
from gpu_eta.simulation.backfill import (
    live_load_seconds,
    openmetrics_lines,
    render_runs_csv,
    simulate_history,
    write_history,
)
from gpu_eta.simulation.cluster import ALERT_CAUSES, ClusterConfig
from gpu_eta.simulation.epochs import FAMILIES, JobMix

END = 1_763_700_000.0


@pytest.fixture(scope="module")
def history():
    return simulate_history(ClusterConfig(seed=2), END, 6 * 3600, jobs=150)


def test_history_is_finished_and_inside_its_window(history) -> None:
    assert 100 <= len(history.pods) <= 220
    assert history.completed
    for pod in history.pods:
        assert pod.start >= END - 6 * 3600 and pod.end is not None and pod.end <= END


def test_runs_csv_round_trips_through_the_forecasters_reader(history) -> None:
    runs = parse_runs(io.StringIO(render_runs_csv(history.pods)))
    assert len(runs) == len(history.completed)
    by_id = {p.run_id: p for p in history.completed}
    for run in runs:
        pod = by_id[run.run_id]
        assert run.completed is True and run.epochs_planned == pod.epochs
        assert len(run.epoch_times) == pod.epochs + 1
        assert run.features["job_name"] == pod.job_name


def test_openmetrics_families_are_contiguous_and_end_with_eof(history) -> None:
    lines = list(openmetrics_lines(history, step_seconds=30))
    assert lines[-1] == "# EOF"
    families = [line.split()[2] for line in lines if line.startswith("# TYPE")]
    assert len(families) == len(set(families))
    current = None
    for line in lines[:-1]:
        if line.startswith("# TYPE"):
            current = line.split()[2]
        elif not line.startswith("#"):
            assert line.startswith(current + "{")
            ts = float(line.rsplit(" ", 1)[1])
            assert history.start <= ts < END


@pytest.mark.integration
def test_promtool_backfills_it_and_prometheus_serves_it(tmp_path: Path, prometheus_factory) -> None:
    hist = simulate_history(ClusterConfig(seed=2), time.time() - 400, 3 * 3600, jobs=60)
    om, _runs = write_history(hist, tmp_path / "h")
    prom = prometheus_factory([], backfill_files=[om], data_dir=tmp_path / "prom")
    run = hist.completed[0]
    result = prom.query(f'max_over_time(gpu_eta_training_epoch{{run_id="{run.run_id}"}}[4h])')
    assert result and float(result[0]["value"][1]) >= run.epochs - 1


def test_runs_without_a_plan_have_totals_only_from_their_end() -> None:
    """As the exporter exports them: a plan-less run's ``steps_planned`` starts at its
    last epoch (its ``end`` made what it reached its total: its steps, as it reports
    steps) and it has no ``epochs_planned``, so a run still going shows none;
    completed, it is in the runs CSV with the epochs it reached."""
    mix = JobMix(
        families=tuple(replace(f, reports_plan=f.job_name != "unet-seg") for f in FAMILIES)
    )
    history = simulate_history(ClusterConfig(seed=2, mix=mix), END, 6 * 3600, jobs=150)
    lines = list(openmetrics_lines(history, step_seconds=5))
    planless = [p for p in history.pods if p.kind == "training" and not p.reports_plan]
    planless = [p for p in planless if p.run_start is not None]
    assert any(p.completed for p in planless) and any(p.cancelled for p in planless)
    for pod in planless:
        run = f'run_id="{pod.run_id}"'
        for name in ("epochs_planned", "steps_planned"):
            times = [
                float(line.rsplit(" ", 1)[1])
                for line in lines
                if line.startswith(f"gpu_eta_training_{name}{{") and run in line
            ]
            if pod.completed and name == "steps_planned":
                assert times and min(times) >= pod.epoch_ends[-1], pod.name
            else:  # no epochs total; stopped before it reached its target: none at all
                assert times == [], pod.name
        assert any(line.startswith("gpu_eta_training_epoch{") and run in line for line in lines)
    csv = {r.run_id: r for r in parse_runs(io.StringIO(render_runs_csv(history.pods)))}
    for pod in planless:
        if pod.completed:
            assert csv[pod.run_id].completed is True
            assert csv[pod.run_id].epochs_planned == pod.epochs
        else:
            assert pod.run_id not in csv
    # runs with a plan state it from their first sample
    planned = next(p for p in history.completed if p.reports_plan)
    first = next(
        line
        for line in lines
        if line.startswith("gpu_eta_training_epochs_planned{") and planned.run_id in line
    )
    assert float(first.rsplit(" ", 1)[1]) < planned.epoch_ends[0]


def test_live_load_seconds_is_the_span_of_the_jobs_at_the_live_rate() -> None:
    cluster = ClusterConfig()  # a job every 200 simulated s, 20 of them a wall second
    assert live_load_seconds(cluster, 86400.0, 1000) == 10_000.0
    assert live_load_seconds(cluster, 3600.0, 1000) == 3600.0  # at most the span asked
    with pytest.raises(ValueError):
        live_load_seconds(cluster, 0.0, 1000)


def test_the_demos_history_holds_time_sliced_runs_as_its_live_cluster_does() -> None:
    """The demo's default history (1,000 jobs at the live load: ``live_load_seconds``)
    has runs that shared a time-sliced GPU, about as many as the live cluster has
    (a third of its runs), and they went about three times slower than the same
    job alone on the same GPU model. A day of the same 1,000 jobs had none at all:
    a cluster that quiet always has an exclusive GPU free."""
    cluster = ClusterConfig(**ALERT_CAUSES)  # the demo's defaults
    span = live_load_seconds(cluster, 86400.0, 1000)
    history = simulate_history(cluster, END, span, 1000)

    def sliced(pod) -> bool:
        return any(history.nodes[pod.node].gpus[g].replicas > 1 for g, _ in pod.gpus)

    def epoch_seconds(pod) -> float:
        return statistics.median(b - a for a, b in itertools.pairwise(pod.epoch_ends))

    runs = [p for p in history.completed if p.kind == "training" and len(p.epoch_ends) >= 3]
    shared = [p for p in runs if sliced(p)]
    assert len(shared) >= 0.15 * len(runs), (len(shared), len(runs))
    alone = {}
    for pod in runs:
        if not sliced(pod):
            alone.setdefault((pod.job_name, pod.batch_size, pod.gpu_model), []).append(pod)
    slowdowns = [
        epoch_seconds(pod) / statistics.median(epoch_seconds(q) for q in peers)
        for pod in shared
        if (peers := alone.get((pod.job_name, pod.batch_size, pod.gpu_model)))
    ]
    assert len(slowdowns) >= 20 and statistics.median(slowdowns) >= 2.0, slowdowns
    quiet = simulate_history(cluster, END, 86400.0, 1000)  # the same jobs over a day
    assert not [p for p in quiet.completed if p.kind == "training" and sliced(p)]


def test_a_long_history_says_how_far_it_got_and_stays_the_same(history) -> None:
    """A long history (thousands of jobs) took minutes to simulate without a word: the
    simulation reports the share of its span done, in order, up to 1, and the history
    is the one simulated without reports (the same pods, the same times)."""
    shares: list[float] = []
    again = simulate_history(ClusterConfig(seed=2), END, 6 * 3600, jobs=150, progress=shares.append)
    assert len(shares) >= 10 and shares == sorted(shares) and shares[-1] == 1.0
    assert 0 < shares[0] < 1
    assert [(p.name, p.start, p.end, p.epoch_ends) for p in again.pods] == [
        (p.name, p.start, p.end, p.epoch_ends) for p in history.pods
    ]


def test_every_completed_run_shows_its_end_as_the_live_exporter_does(history) -> None:
    """The live exporter shows a completed run's end
    (``gpu_eta_training_run_end_timestamp_seconds``) until its pod goes, 5 s after the
    last epoch; the past had no such series, and sampled every 15 or 30 s it would
    have shown most runs' ends not at all. Each completed run has it, at its last
    epoch's end, before its pod went."""
    lines = list(openmetrics_lines(history, step_seconds=30))
    ends: dict[str, tuple[float, float]] = {}
    for line in lines:
        if line.startswith("gpu_eta_training_run_end_timestamp_seconds{"):
            run_id = line.split('run_id="', 1)[1].split('"', 1)[0]
            value, at = (float(x) for x in line.rsplit(" ", 2)[1:])
            ends[run_id] = (value, at)
    for pod in history.completed:
        assert pod.run_id in ends, pod.name
        value, at = ends[pod.run_id]
        assert value == pytest.approx(pod.epoch_ends[-1], abs=1e-3)
        assert pod.epoch_ends[-1] <= at < pod.end


def test_the_past_has_the_exporters_labels_on_every_series(history) -> None:
    """Every series of the past is one the exporter renders (its own exposition of
    the node's snapshot) with the target labels given, and kube-state-metrics' with
    its target's: the same names and labels as the live series."""
    exporter = {0: {"job": "gpu-eta-exporter", "instance": "127.0.0.1:1"}}
    ksm_target = {"job": "kube-state-metrics", "instance": "127.0.0.1:2"}
    labels = {i: exporter[0] for i in range(len(history.nodes))}
    lines = [
        line
        for line in openmetrics_lines(history, 60, node_labels=labels, ksm_labels=ksm_target)
        if not line.startswith("#")
    ]
    names = {line.split("{", 1)[0] for line in lines}
    assert {
        "gpu_eta_gpu_memory_used_bytes",
        "gpu_eta_gpu_memory_total_bytes",
        "gpu_eta_pod_info",
        "gpu_eta_pod_memory_working_set_bytes",
        "gpu_eta_training_value",
        "kube_pod_info",
        "kube_pod_status_phase",
    } <= names
    for line in lines:
        wanted = (
            'job="kube-state-metrics"' if line.startswith("kube_") else 'job="gpu-eta-exporter"'
        )
        assert wanted in line, line


def test_a_later_part_has_no_sample_before_its_start(history) -> None:
    """The warm-up's last 5 minutes are written apart (``since``): no sample of that
    part is before it, a run's last state (written a millisecond before its pod
    went) included, or the two parts would hold the same sample twice."""
    since = history.start + (history.end - history.start) / 2
    times = [
        float(line.rsplit(" ", 1)[1])
        for line in openmetrics_lines(history, step_seconds=30, since=since)
        if not line.startswith("#")
    ]
    assert times and min(times) >= since


def test_label_values_are_escaped_as_the_text_formats_want() -> None:
    """A backslash, a quote and a newline in a label value (a site's pod label or node
    name may hold any): the backfill escaped the first two only, so a newline ended the
    sample line and promtool refused the whole file. Escaped as the exporter's
    exposition and the simulated kube-state-metrics escape them: one rule."""
    from gpu_eta.exporter.exposition import escape_label_value
    from gpu_eta.simulation.backfill import _labels

    value = 'a\\b"c\nd'
    assert _labels({"k": value}) == '{k="' + escape_label_value(value) + '"}'
    assert "\n" not in _labels({"k": value})
    assert escape_label_value(value) == 'a\\\\b\\"c\\nd'
