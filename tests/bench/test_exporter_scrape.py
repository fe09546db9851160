"""bench/exporter_scrape.py: the per-snapshot cost it times is of the snapshot it
scrapes (every pod's progress in it), beside its peer encoding the same text."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.bench.bench_module import load_bench

es = load_bench("exporter_scrape")


def test_the_timed_snapshot_holds_every_pods_run_and_its_peer_writes_the_same_text(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bench.yaml"
    path.write_text(yaml.safe_dump(es.scenario(), sort_keys=False))
    cost = es.snapshot_cost(path, rounds=3)
    pods = es.N_GPUS * es.PODS_PER_GPU
    assert cost.runs == pods
    # per run at least its info, its 2 free-form values and 7 fields it reported
    assert cost.series > 10 * pods
    assert cost.same_text
    assert cost.encode_ms > 0 and cost.peer_ms > 0 and cost.collection_ms > 0
