"""``bench/demo_startup.py``: it times the stack ``./demo.sh`` starts, not another one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpu_eta.demo.main import cluster_config, parse_args
from gpu_eta.demo.stack import StackConfig
from tests.bench.bench_module import load_bench

demo_startup = load_bench("demo_startup")


class _Measured(Exception):
    """Raised by the recording stand-in for ``Stack``: the configuration is all we want."""


def test_the_stack_timed_is_the_demos_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench timed a stack scraped every 1 s with a forecaster cycle of 3 s, on a
    cluster without the demo's planted alert causes (a notebook's 26 h of backfilled
    series among them): the start-up docs/demo.md reports as the demo's was another
    stack's. The stack it starts is the demo's at its defaults, ports aside (any free
    one, so the bench runs beside a demo), and so is the history's cluster."""
    seen: dict[str, object] = {}

    def history(cluster, end, span, jobs):  # simulate_history's signature
        seen["history"] = cluster
        raise _Measured

    monkeypatch.setattr(demo_startup, "simulate_history", history)
    with pytest.raises(_Measured):
        demo_startup.main([])
    demo = parse_args([])
    assert seen["history"] == cluster_config(demo)

    def stack(config: StackConfig, say=None):  # Stack's signature
        seen["stack"] = config
        raise _Measured

    monkeypatch.setattr(demo_startup, "measure_history", lambda *a: None)
    monkeypatch.setattr(demo_startup, "Stack", stack)
    with pytest.raises(_Measured):
        demo_startup.main([])
    want = StackConfig(
        cluster=cluster_config(demo),
        history_days=demo.history_days,
        history_jobs=demo.history_jobs,
        tsdb=demo.tsdb,
        alert_for=demo.alert_for,
        scrape_interval=demo.scrape_interval,
    )
    want = replace(want, prometheus_port=0, forecaster_port=0, alertmanager_port=0)
    assert seen["stack"] == want


def test_the_history_timed_is_written_as_the_stack_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bench wrote the history every 15 s without kube-state-metrics' series or the
    targets' labels, 45 MB where the stack writes 33: its write and promtool figures were
    another history's. It writes at the stack's step, with every node's exporter labels
    and kube-state-metrics'."""
    from gpu_eta.demo.stack import EXPORTER_JOB, HISTORY_STEP_SECONDS, KSM_JOB

    seen: dict[str, object] = {}

    def write(history, path, step_seconds=15.0, node_labels=None, since=None, ksm_labels=None):
        seen.update(history=history, step=step_seconds, nodes=node_labels, ksm=ksm_labels)
        raise _Measured

    monkeypatch.setattr(demo_startup, "write_openmetrics", write)
    with pytest.raises(_Measured):
        demo_startup.measure_history(demo_startup.demo_config(0.02, 5))
    assert seen["step"] == HISTORY_STEP_SECONDS
    assert seen["ksm"]["job"] == KSM_JOB
    nodes = seen["nodes"]
    assert sorted(nodes) == sorted(n.index for n in seen["history"].nodes)
    assert {labels["job"] for labels in nodes.values()} == {EXPORTER_JOB}
