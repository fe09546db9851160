"""Exposition: the metric contract rendered from snapshots; golden file + real promtool.

Regenerate the golden file after an intended change with
``GPU_ETA_UPDATE_GOLDEN=1 python -m pytest tests/exporter/test_exposition.py`` and
review the diff (node_exporter's ``-u`` habit).
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from gpu_eta.exporter.collectors.kube import KubeStatus
from gpu_eta.exporter.exposition import (
    FamiliesError,
    SnapshotExposition,
    builtin_family_names,
    checked_families,
    encode_text,
    pod_label_name,
    render,
)
from gpu_eta.exporter.readings import (
    CollectorStatus,
    DeviceFailure,
    DeviceReading,
    PodGpuRow,
    PodMeta,
    Progress,
)
from gpu_eta.exporter.scheduler import Scheduler, Sources
from gpu_eta.exporter.simulated_node import SimulatedNode
from gpu_eta.exporter.snapshot import CollectorFamilies, Snapshot, SnapshotHolder
from gpu_eta.launch.prometheus import find_binary

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "fixtures" / "metrics" / "exporter.prom"
SCENARIO = ROOT / "tests" / "fixtures" / "scenarios" / "small.yaml"
METRICS_DOC = ROOT / "docs" / "metrics.md"
NOW = 1000.0 + 60  # 60 s after the fixture scenario's anchor


def _exposition(snapshot: Snapshot, pod_labels=("team",), now: float = NOW) -> str:
    holder = SnapshotHolder(snapshot, clock=lambda: now)
    return SnapshotExposition(holder, pod_labels=pod_labels, version="1.2.3").exposition().decode()


def _scenario_snapshot() -> Snapshot:
    """The whole pipeline on the fixture scenario at a fixed time: sources → attribution."""
    node = SimulatedNode(SCENARIO, clock=lambda: NOW)
    holder = SnapshotHolder(Snapshot(node="test-node", timestamp=0))
    progress = Progress(
        namespace="ml",
        pod="train-a",
        container="trainer",
        run_id="r1",
        run_start_timestamp=1001.0,
        last_report_timestamp=1055.5,
        source="http",
        epoch=3,
        epochs=10,
        step=300,
        steps=1000,
        batch_size=64,
        epoch_end_timestamp=1050.0,
        metrics={"loss": 0.25, "accuracy": 0.875},
    )

    class Store:
        def snapshot(self):
            return (progress,)

        def retain(self, live, now, started=None):
            pass

        def end_finished(self, finished, now):
            return 0

    class Listener:
        def poll(self):
            return {"accepted": 4, "forbidden": 1}

        def skipped_fields(self):
            return 2

    class WatchedPods:
        """The scenario's pods behind a watch that reports its freshness, as
        ``KubePodSource.status()`` does (connected, last sync)."""

        def poll(self):
            return node.pods.poll()

        def status(self):
            return KubeStatus(True, False, NOW - 30, "ConnectionRefusedError", 3)

    sched = Scheduler(
        "test-node",
        Sources(
            gpu=node.gpus,
            allocations=node.allocations,
            pods=WatchedPods(),
            processes=node.processes,
            host_memory=node.host_memory,
            progress_store=Store(),
            progress_listener=Listener(),
        ),
        holder,
        clock=lambda: NOW - 2,
    )
    snap = sched.collect_once()
    sched.stop()
    # durations are wall-clock: pin them for a stable file
    return Snapshot(
        **{
            **{f: getattr(snap, f) for f in snap.__dataclass_fields__},
            "collectors": tuple(
                CollectorStatus(s.name, s.success, 0.001, s.last_success_timestamp, s.errors_total)
                for s in snap.collectors
            ),
        }
    )


def test_golden_exposition() -> None:
    text = _exposition(_scenario_snapshot())
    if os.environ.get("GPU_ETA_UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), "exposition changed: see the module docstring to regenerate"


def test_fast_text_encoder_equals_prometheus_client() -> None:
    """``exposition()`` (own encoder, cached per snapshot) is byte-identical to
    prometheus_client's ``generate_latest`` over ``render()``, odd values included."""

    class Reference:  # prometheus_client's collector protocol over the pure render()
        def __init__(self, snapshot: Snapshot) -> None:
            self.snapshot = snapshot

        def collect(self):
            return render(self.snapshot, age_seconds=0.0, pod_labels=("team",), version="1.2.3")

    snap = _scenario_snapshot()
    odd = PodMeta(
        "ns",
        "p",
        "u",
        ip=None,
        owner_name='quo"te\\back\nline ünï',
        labels={"team": 'a\\b"c\nd'},
        start_timestamp=1e10 + 0.5,
    )
    for snapshot in (
        snap,
        Snapshot(**{**{f: getattr(snap, f) for f in snap.__dataclass_fields__}, "pods": (odd,)}),
    ):
        holder = SnapshotHolder(snapshot, clock=lambda t=snapshot.timestamp: t)
        collector = SnapshotExposition(holder, pod_labels=("team",), version="1.2.3")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(Reference(snapshot))
        assert collector.exposition() == generate_latest(registry)
        assert collector.exposition() == generate_latest(registry)  # from the cache


def test_cached_text_follows_the_holder_and_the_age() -> None:
    now = [NOW]
    holder = SnapshotHolder(_snap(timestamp=NOW), clock=lambda: now[0])
    collector = SnapshotExposition(holder)  # the age comes from the holder's clock
    first = collector.exposition().decode()
    now[0] += 3
    second = collector.exposition().decode()
    assert 'gpu_eta_exporter_snapshot_age_seconds{node="n1"} 0.0' in first
    assert 'gpu_eta_exporter_snapshot_age_seconds{node="n1"} 3.0' in second
    holder.set(_snap(node="n2", timestamp=now[0]))
    assert 'node="n2"' in collector.exposition().decode()


def test_golden_passes_promtool_check_metrics() -> None:
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=GOLDEN.read_bytes(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()


def test_promtool_would_catch_a_bad_name() -> None:
    """The check above can fail: promtool rejects a counter without _total."""
    bad = "# HELP x_errors errors\n# TYPE x_errors counter\nx_errors 1\n"
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"],
        input=bad.encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode != 0


def test_every_rendered_metric_is_in_the_contract() -> None:
    doc = METRICS_DOC.read_text()
    names = set(re.findall(r"^# TYPE (\S+) ", GOLDEN.read_text(), re.M))
    assert len(names) > 25
    missing = sorted(n for n in names if f"`{n}`" not in doc)
    assert not missing, f"not documented in docs/metrics.md: {missing}"


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            labels, _, value = line.rpartition(" ")
            out[labels[len(name) :]] = float(value)
    return out


def test_time_sliced_gpu_gives_each_pod_its_share() -> None:
    text = _exposition(_scenario_snapshot())
    util = _samples(text, "gpu_eta_pod_gpu_utilization_ratio")
    sliced = {k: v for k, v in util.items() if 'UUID="GPU-11111111' in k}
    pods = {re.search(r'pod="([^"]+)"', k).group(1): v for k, v in sliced.items()}
    assert pods == {"late": 0.25, "idle-holder": 0.0, "sharer": 0.5}
    npods = _samples(text, "gpu_eta_gpu_pods")
    assert next(v for k, v in npods.items() if 'UUID="GPU-11111111' in k) == 3


def test_idle_holder_series_present_with_zero() -> None:
    text = _exposition(_scenario_snapshot())
    for name in (
        "gpu_eta_pod_gpu_allocated",
        "gpu_eta_pod_gpu_utilization_ratio",
        "gpu_eta_pod_gpu_memory_used_bytes",
    ):
        rows = {k: v for k, v in _samples(text, name).items() if 'pod="idle-holder"' in k}
        assert len(rows) == 1, name
        assert next(iter(rows.values())) == (1.0 if name.endswith("allocated") else 0.0)


def test_mig_rows_carry_gpu_i_id_and_plain_index_allocation_resolves() -> None:
    text = _exposition(_scenario_snapshot())
    alloc = _samples(text, "gpu_eta_pod_gpu_allocated")
    mig = [k for k in alloc if 'pod="mig-user"' in k]
    assert len(mig) == 1 and 'GPU_I_ID="2"' in mig[0]
    plain = [k for k in alloc if 'pod="train-a"' in k]
    assert len(plain) == 1 and 'UUID="GPU-00000000-0000-0000-0000-000000000000"' in plain[0]


def _snap(**kw) -> Snapshot:
    base = {"node": "n1", "timestamp": 100.0}
    base.update(kw)
    return Snapshot(**base)


def test_failing_device_reports_read_success_zero() -> None:
    snap = _snap(
        devices=(DeviceReading(0, "GPU-a", "T4", 0.5, 1, 2),),
        failures=(
            DeviceFailure(1, "GPU-b", "gpu_lost"),  # lost: keeps the UUID read before
            DeviceFailure(2, None, "unknown"),  # never read since NVML came up
        ),
    )
    ok = _samples(_exposition(snap), "gpu_eta_gpu_read_success")
    assert ok == {
        '{UUID="GPU-a",gpu="0",node="n1"}': 1.0,
        '{UUID="GPU-b",gpu="1",node="n1"}': 0.0,
        '{UUID="",gpu="2",node="n1"}': 0.0,
    }


def test_unknown_and_non_finite_values_are_left_out() -> None:
    snap = _snap(
        devices=(DeviceReading(0, "GPU-a", "T4", None, math.nan, math.inf),),
        pod_gpus=(PodGpuRow(0, "GPU-a", None, "ns", "p", "c", True, None, None, None),),
    )
    text = _exposition(snap)
    assert _samples(text, "gpu_eta_gpu_utilization_ratio") == {}
    assert _samples(text, "gpu_eta_gpu_memory_used_bytes") == {}
    assert _samples(text, "gpu_eta_gpu_memory_total_bytes") == {}
    assert len(_samples(text, "gpu_eta_pod_gpu_allocated")) == 1
    assert _samples(text, "gpu_eta_pod_gpu_allocated_since_timestamp_seconds") == {}


def test_process_only_row_has_no_allocated_series() -> None:
    row = PodGpuRow(0, "GPU-a", None, "ns", "p", "c", False, 0.3, 5, None)
    text = _exposition(_snap(pod_gpus=(row,)))
    assert _samples(text, "gpu_eta_pod_gpu_allocated") == {}
    assert list(_samples(text, "gpu_eta_pod_gpu_utilization_ratio").values()) == [0.3]


def test_pod_labels_allow_list_and_sanitising() -> None:
    pod = PodMeta(
        "ns", "p", "u1", labels={"app.kubernetes.io/name": "x", "secret": "s", "team": "t"}
    )
    text = _exposition(_snap(pods=(pod,)), pod_labels=("app.kubernetes.io/name", "team", "absent"))
    (labels,) = _samples(text, "gpu_eta_pod_info")
    assert 'label_app_kubernetes_io_name="x"' in labels
    assert 'label_team="t"' in labels
    assert "secret" not in labels and "absent" not in labels
    assert pod_label_name("a-b/c.d") == "label_a_b_c_d"


def test_long_running_label_is_exported_without_the_allow_list() -> None:
    """The occupancy alerts' opt-out (docs/alerts.md) reads
    ``label_gpu_eta_io_long_running`` on ``gpu_eta_pod_info``: a pod labelled
    ``gpu-eta.io/long-running`` carries it whatever ``--pod-labels`` lists."""
    serving = PodMeta("ns", "srv", "u1", labels={"gpu-eta.io/long-running": "true", "x": "y"})
    plain = PodMeta("ns", "job", "u2")
    for allow in ((), ("team",), ("gpu-eta.io/long-running",)):
        samples = _samples(
            _exposition(_snap(pods=(serving, plain)), pod_labels=allow), "gpu_eta_pod_info"
        )
        (srv,) = [labels for labels in samples if 'pod="srv"' in labels]
        (job,) = [labels for labels in samples if 'pod="job"' in labels]
        assert srv.count('label_gpu_eta_io_long_running="true"') == 1, allow
        assert "label_x" not in srv and "long_running" not in job


def test_training_values_capped_at_16() -> None:
    run = Progress(
        "ns", "p", "c", "r", 1.0, 2.0, "log", metrics={f"m{i:02d}": float(i) for i in range(40)}
    )
    text = _exposition(_snap(progress=(run,)))
    assert len(_samples(text, "gpu_eta_training_value")) == 16
    assert 'source="log"' in next(iter(_samples(text, "gpu_eta_training_info")))


@pytest.mark.parametrize(("unit", "reached", "begun"), [("step", 8100, 8000), ("epoch", 51, 50)])
def test_a_resumed_runs_start_is_published_and_a_fresh_runs_is_not(
    unit: str, reached: float, begun: float
) -> None:
    """``gpu_eta_training_start_step``: the step a run started at (resumed from a
    checkpoint at 8,000), the forecaster's origin for a run followed in steps;
    ``gpu_eta_training_start_epoch``: the epochs a run started with (resumed at epoch
    50), which the stall rule and the dashboard's mean epoch leave out. A run started
    from 0 has no such series (no series added for it)."""
    resumed = Progress(
        "ns", "p", "c", "r", 1.0, 2.0, "http", **{unit: reached, f"start_{unit}": begun}
    )
    fresh = Progress("ns", "p", "c", "f", 1.0, 2.0, "http", **{unit: 1.0})
    text = _exposition(_snap(progress=(resumed, fresh)))
    assert _samples(text, f"gpu_eta_training_start_{unit}") == {
        '{container="c",namespace="ns",node="n1",pod="p",run_id="r"}': begun
    }
    assert f"# TYPE gpu_eta_training_start_{unit} gauge" in text


def test_snapshot_age_is_computed_at_scrape_time() -> None:
    age = _samples(
        _exposition(_snap(timestamp=100.0), now=107.5), "gpu_eta_exporter_snapshot_age_seconds"
    )
    assert age == {'{node="n1"}': 7.5}


def test_render_is_total_on_an_empty_snapshot() -> None:
    families = render(_snap(), age_seconds=0)
    names = {f.name for f in families}
    assert "gpu_eta_exporter_build_info" in names
    assert "gpu_eta_exporter_progress_reports" not in names  # the collector is not running


def test_kube_watch_series_only_for_a_watch() -> None:
    connected = "gpu_eta_exporter_kube_watch_connected"
    synced = "gpu_eta_exporter_kube_last_sync_timestamp_seconds"
    plain = _exposition(_snap())
    assert connected not in plain and synced not in plain  # no watch (simulator, off)
    up = _exposition(_snap(kube_watch=(True, 1234.5)))
    assert _samples(up, connected) == {'{node="n1"}': 1.0}
    assert _samples(up, synced) == {'{node="n1"}': 1234.5}
    never = _exposition(_snap(kube_watch=(False, None)))  # never listed yet
    assert _samples(never, connected) == {'{node="n1"}': 0.0}
    assert _samples(never, synced) == {}


def test_a_rendering_bug_never_fails_the_scrape(monkeypatch: pytest.MonkeyPatch) -> None:
    import gpu_eta.exporter.exposition as exposition

    def broken(*args, **kwargs):
        raise RuntimeError("bug")

    monkeypatch.setattr(exposition, "_devices", broken)
    snap = _snap(devices=(DeviceReading(0, "GPU-a", "T4", 0.5, 1, 2),))
    for text in (_exposition(snap), _exposition(snap)):  # rendered, then from the cache
        assert "gpu_eta_exporter_snapshot_age_seconds" in text
        assert "gpu_eta_exporter_build_info" in text
        assert "gpu_eta_gpu_info" not in text


def _family(name: str = "gpu_eta_test_temperature_celsius", gpu: object = "0", typ: str = "gauge"):
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    family = Metric(name, "A test series", typ)
    sample = name + "_total" if typ == "counter" else name
    family.samples.append(Sample(sample, {"node": "n", "gpu": gpu}, 42.0))
    return family


def _mistyped():
    """A family whose type was set after prometheus_client checked it (a typo)."""
    family = _family()
    family.type = "histgram"
    return family


def test_a_collectors_family_that_does_not_encode_never_fails_the_scrape() -> None:
    """The net behind the scheduler's check: the rest of the snapshot is served."""
    snap = _snap(
        devices=(DeviceReading(0, "GPU-a", "T4", 0.5, 1, 2),),
        # the gpu index as NVML gives it; text None: encoded by the exposition
        families=(CollectorFamilies("temperature", (_family(gpu=0),)),),
    )
    text = _exposition(snap)
    assert 'gpu_eta_gpu_utilization_ratio{UUID="GPU-a",gpu="0",node="n1"} 0.5' in text
    assert "gpu_eta_exporter_build_info" in text
    assert "A test series" not in text


@pytest.mark.parametrize(
    ("families", "problem"),
    [
        (None, "returned NoneType"),
        (_family(), "returned Metric"),  # one family, not a sequence of them
    ],
)
def test_checked_families_refuses_output_that_is_no_families(families, problem: str) -> None:
    with pytest.raises(FamiliesError, match=problem):
        checked_families(families, builtin_family_names())


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("gpu_eta_x 1", "str is not a metric family"),
        (_family(gpu=0), "does not encode: TypeError"),
        (_family("gpu_eta_gpu_info"), "gpu_eta_gpu_info is exported already"),
        (_family("gpu_eta_exporter_collector_errors"), "collector_errors is exported"),
        (_family("gpu_eta_exporter_collector_errors", typ="counter"), "is exported"),
        (_family("gpu_eta_test_fan_ratio"), "fan_ratio is exported already"),  # twice
        (_family("process_open_fds"), "not one this exporter can export"),
        (_family("gpu-eta-x"), "not one this exporter can export"),
        (_mistyped(), "type histgram is not in the text format"),
    ],
)
def test_checked_families_skips_a_family_that_would_break_the_scrape(bad, problem: str) -> None:
    """One bad family is skipped with its reason; the collector's other families pass
    (one bug cost every family of the collector)."""
    good = [_family("gpu_eta_test_fan_ratio"), _family("gpu_eta_test_pump_ratio")]
    checked = checked_families([good[0], bad, good[1]], builtin_family_names())
    assert checked.families == tuple(good)
    assert len(checked.skipped) == 1 and problem in checked.skipped[0], checked.skipped


def test_checked_families_passes_good_families_and_a_bad_label_name_is_refused() -> None:
    good = [_family(), _family("gpu_eta_test_fan_failures", typ="counter")]
    checked = checked_families(iter(good), builtin_family_names())
    assert checked == (tuple(good), (), tuple(encode_text([f]) for f in good))
    bad = _family()
    bad.samples[0] = bad.samples[0]._replace(labels={"bad-label": "v"})
    checked = checked_families([bad])
    assert checked.families == () and "label name" in checked.skipped[0]


def _client_python_families() -> list:
    """One family of each type prometheus_client builds beyond the text format's own,
    and one relayed through its parser (an ``untyped`` line, which it reads as
    ``unknown``)."""
    from prometheus_client.core import (
        GaugeHistogramMetricFamily,
        InfoMetricFamily,
        StateSetMetricFamily,
        UnknownMetricFamily,
    )
    from prometheus_client.parser import text_string_to_metric_families

    info = InfoMetricFamily("gpu_eta_test_build", "Build", value={"version": "1"})
    unknown = UnknownMetricFamily("gpu_eta_test_thing", "A thing", labels=["gpu"])
    unknown.add_metric(["0"], 1.0)
    state = StateSetMetricFamily("gpu_eta_test_mode", "Mode", value={"a": True, "b": False})
    queue = GaugeHistogramMetricFamily(
        "gpu_eta_test_queue", "Queue", buckets=[("1", 1.0), ("+Inf", 2.0)], gsum_value=3.0
    )
    relayed = text_string_to_metric_families(
        "# HELP ext_temp_celsius Relayed\n# TYPE ext_temp_celsius untyped\next_temp_celsius 3\n"
        "# HELP ext_load Relayed with its time\n# TYPE ext_load gauge\n"
        "ext_load 0.5 1700000000000\n"  # a relayed sample's own timestamp (ms) is kept
    )
    return [info, unknown, state, queue, *relayed]


def test_checked_families_passes_what_client_python_exports_as_it_writes_it() -> None:
    """info, unknown (UnknownMetricFamily, or an untyped line read by
    prometheus_client's parser), stateset and gaugehistogram families pass, encoded
    byte for byte as ``generate_latest`` writes them (info: a gauge ``<name>_info``;
    unknown: untyped; stateset: a gauge; gaugehistogram: a histogram, its ``_gsum`` and
    ``_gcount`` gauges of their own), which Prometheus' parser (promtool) takes."""
    families = _client_python_families()
    checked = checked_families(families, builtin_family_names())
    assert checked[:2] == (tuple(families), ())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(type("Relay", (), {"collect": lambda self: families})())
    text = encode_text(checked.families)
    assert text == generate_latest(registry)
    assert b"".join(checked.text) == text  # the check's text is what is served
    assert b"# TYPE gpu_eta_test_build_info gauge\n" in text
    assert b"# TYPE ext_temp_celsius untyped\n" in text
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    # an info family's exposition name is <name>_info: a gauge of that name clashes
    clash = checked_families([_family("gpu_eta_test_build_info"), families[0]])
    assert "gpu_eta_test_build_info is exported already" in clash.skipped[0], clash


def test_openmetrics_samples_are_written_as_generate_latest_writes_them() -> None:
    """A family with a ``_created`` sample (prometheus_client's counters, histograms and
    summaries have one by default): ``generate_latest`` writes it as a gauge family of
    its own after its family, and so does ``encode_text``. Inline under the counter,
    it was a series with no HELP (promtool: "no help text"), and its name was claimed
    by no family: a gauge of that name elsewhere was a second family."""
    from prometheus_client.core import CounterMetricFamily, SummaryMetricFamily

    jobs = CounterMetricFamily("gpu_eta_test_jobs", "Jobs", labels=["q"])
    jobs.add_metric(["a"], 3.0, created=1700000000.0)
    wait = SummaryMetricFamily("gpu_eta_test_wait_seconds", "Wait", labels=["q"])
    wait.add_metric(["a"], count_value=2, sum_value=1.5, timestamp=None)
    wait.samples.append(wait.samples[0]._replace(name="gpu_eta_test_wait_seconds_created"))
    checked = checked_families([jobs, wait], builtin_family_names())
    assert checked[:2] == ((jobs, wait), ())
    registry = CollectorRegistry(auto_describe=False)
    registry.register(type("Relay", (), {"collect": lambda self: [jobs, wait]})())
    text = encode_text(checked.families)
    assert text == generate_latest(registry)
    assert b"".join(checked.text) == text  # the check's text is what is served
    proc = subprocess.run(
        [find_binary("promtool"), "check", "metrics"], input=text, capture_output=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout.decode() + proc.stderr.decode()
    clash = checked_families([_family("gpu_eta_test_jobs_created"), jobs])
    assert "gpu_eta_test_jobs_created is exported already" in clash.skipped[0], clash


def test_builtin_family_names_hold_every_family_the_exposition_writes() -> None:
    golden = set(re.findall(r"^# TYPE (\S+) ", GOLDEN.read_text(), re.M))
    assert golden <= builtin_family_names()
    assert "gpu_eta_exporter_kube_watch_connected" in builtin_family_names()  # optional
    assert "gpu_eta_exporter_collector_errors" in builtin_family_names()  # a counter's base


def test_help_says_cached() -> None:
    text = GOLDEN.read_text()
    helps = dict(re.findall(r"^# HELP (gpu_eta_(?:gpu|pod|training)_\S+) (.*)$", text, re.M))
    assert helps and all("cached" in h for h in helps.values())
    assert not re.search(r"^\S+\{.*\} \S+ \d+$", text, re.M), "no sample timestamps"


def test_deadline_help_says_a_jobs_deadline_counts_only_while_the_pod_runs() -> None:
    """A finished pod's Job is not read (collectors/kube.py), so its deadline is its
    own: the HELP says so, as the metric's row in docs/metrics.md does."""
    text = GOLDEN.read_text()
    help_text = re.search(r"^# HELP gpu_eta_pod_deadline_timestamp_seconds (.*)$", text, re.M)
    row = next(
        line
        for line in (ROOT / "docs" / "metrics.md").read_text().splitlines()
        if line.startswith("| `gpu_eta_pod_deadline_timestamp_seconds`")
    )
    assert help_text and "while the pod runs" in row
    assert re.search(r"while the pod runs,? its Job", help_text[1]), help_text[1]


def test_pod_info_says_the_pods_phase() -> None:
    """The stall alert's fallback read "its pod still runs" off ``gpu_eta_pod_info``,
    which a Succeeded or Failed pod keeps (its API object stays until its Job goes): it
    fired 30 minutes after a run stopped short of its plan in a pod that had exited.
    The phase lets rules keep to pods that can still run."""
    pods = (
        PodMeta("ns", "run", "u1", phase="Running"),
        PodMeta("ns", "done", "u2", phase="Succeeded"),
        PodMeta("ns", "oom", "u3", phase="Failed"),
    )
    samples = _samples(_exposition(_snap(pods=pods)), "gpu_eta_pod_info")
    phases = {
        re.search(r'pod="([^"]+)"', s).group(1): re.search(r'phase="([^"]*)"', s).group(1)
        for s in samples
    }
    assert phases == {"run": "Running", "done": "Succeeded", "oom": "Failed"}
