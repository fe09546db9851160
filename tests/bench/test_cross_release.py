"""bench/cross_release.py: the newer runs' moments replayed after the older and alone,
parted by whether their configuration ran among the older (figures reported, not asserted)."""

from __future__ import annotations

from gpu_eta.forecaster.calibration import POINTS
from tests.bench.bench_module import load_bench
from tests.forecaster.estimators.runs_factory import make_run

cr = load_bench("cross_release")
DAY = 86400.0


def _runs(job: str, speed: float, start: float, n: int, tag: str) -> list:
    return [
        make_run(
            f"{tag}{job}{i}",
            [30.0 + 10 * speed] + [10.0 * speed] * 9,
            start=start + i * 3600.0,
            job_name=job,
            namespace="team",
            node_type="8xA100",
        )
        for i in range(n)
    ]


def test_the_newer_runs_are_parted_by_whether_their_configuration_ran_before() -> None:
    old = _runs("a", 2.0, 1e9, 8, "o") + _runs("b", 1.0, 1e9 + 1800.0, 8, "o")
    later = 1e9 + 90 * DAY
    new = _runs("a", 1.0, later, 6, "n") + _runs("c", 1.0, later + 1800.0, 6, "n")
    parts = cr.replays(old, new)
    assert list(parts) == [
        (cr.AFTER, cr.BOTH),
        (cr.AFTER, cr.OTHERS),
        (cr.ALONE, cr.BOTH),
        (cr.ALONE, cr.OTHERS),
    ]
    for replay in (cr.AFTER, cr.ALONE):
        assert {s.run_id for s in parts[replay, cr.BOTH]} == {f"na{i}" for i in range(6)}
        assert {s.run_id for s in parts[replay, cr.OTHERS]} == {f"nc{i}" for i in range(6)}
    # the same moments, but those the newer runs alone cannot answer yet (the first
    # run's start, with nothing finished): only what the model knew differs
    after = {(s.run_id, s.point) for s in parts[cr.AFTER, cr.BOTH]}
    alone = {(s.run_id, s.point) for s in parts[cr.ALONE, cr.BOTH]}
    assert alone < after and ("na0", 0.0) in after - alone
    lines = cr.table(parts)
    assert len(lines) == 2 + 4 and lines[2].startswith(f"| {cr.AFTER} | {cr.BOTH} | ")
    assert cr.summary([]) == ["–"] * len(POINTS)


def test_newer_runs_sharing_run_ids_with_older_ones_stay_apart() -> None:
    """Two releases may number their runs alike; in the replay after the older runs,
    the newer ones are named namespace/run_id (evaluate.run_labels), never dropped."""
    from dataclasses import replace

    old = [replace(r, namespace="v1") for r in _runs("a", 2.0, 1e9, 8, "")]
    new = [replace(r, namespace="v2") for r in _runs("a", 1.0, 1e9 + 90 * DAY, 6, "")]
    parts = cr.replays(old, new)
    # another namespace: another configuration (cross_release.identity)
    assert {s.run_id for s in parts[cr.AFTER, cr.OTHERS]} == {f"v2/a{i}" for i in range(6)}
    assert {s.run_id for s in parts[cr.ALONE, cr.OTHERS]} == {f"a{i}" for i in range(6)}
