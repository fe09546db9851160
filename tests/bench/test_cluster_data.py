"""``bench/cluster_data.py``: the scale benchmarks' synthetic cluster, and its share of
jobs that report only steps (``--steps-only-share``)."""

from __future__ import annotations

import dataclasses
import io
from collections import defaultdict

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from tests.bench.bench_module import load_bench

cluster_data = load_bench("cluster_data")
NOW = 1_800_000_000.0
EPOCH_SERIES = {
    "gpu_eta_training_epochs_planned",
    "gpu_eta_training_epoch",
    "gpu_eta_training_epoch_end_timestamp_seconds",
}
STEP_SERIES = {"gpu_eta_training_steps_planned", "gpu_eta_training_step"}


def run_series(shape) -> dict[str, set[str]]:
    """Per run id, the names of the training series written for it."""
    out = io.StringIO()
    cluster_data.write_openmetrics(out, shape, NOW, minutes=3, step=60.0)
    names: dict[str, set[str]] = defaultdict(set)
    for family in text_string_to_metric_families(out.getvalue()):
        for sample in family.samples:
            if "run_id" in sample.labels:
                names[sample.labels["run_id"]].add(sample.name)
    return names


def test_jobs_reporting_only_steps_have_no_epoch_series() -> None:
    shape = cluster_data.ClusterShape(nodes=5, gpus_per_node=8, running=30, notebooks=4)
    half = dataclasses.replace(shape, steps_only_share=0.5)
    every = run_series(shape)
    some = run_series(half)
    assert set(every) == set(some) and len(every) == 30
    assert all(names >= EPOCH_SERIES | STEP_SERIES for names in every.values())
    steps_only = {run for run, names in some.items() if not names & EPOCH_SERIES}
    assert len(steps_only) == 15
    assert all(some[run] >= STEP_SERIES for run in steps_only)
    # the share is laid out by index: the default cluster's pods are drawn unchanged
    base, other = cluster_data.pods(shape, NOW), cluster_data.pods(half, NOW)
    assert [dataclasses.replace(p, steps_only=False) for p in other] == base


def test_a_share_outside_0_1_is_refused() -> None:
    with pytest.raises(ValueError, match="steps_only_share"):
        cluster_data.ClusterShape(nodes=1, running=1, notebooks=0, steps_only_share=1.5).check()
