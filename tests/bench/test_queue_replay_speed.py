"""bench/queue_replay_speed.py: the cluster it builds, and one small run end to end.

The figures are reported, not asserted; tested is that the cluster is what the module
docstring says and that a small run prints a row per queue length, the replay agreeing
with its peer.
"""

from __future__ import annotations

from collections import Counter

from tests.bench.bench_module import load_bench

qs = load_bench("queue_replay_speed")


def test_the_cluster_is_full_and_mixed() -> None:
    queue, durations = qs.cluster(50, 30)
    assert len(queue.nodes) == 50 and len(queue.holders) == 400 and len(queue.pending) == 30
    assert sum(1 for n in queue.nodes if not n.schedulable) == 1  # one in fifty
    assert sum(1 for n in queue.nodes if n.taints) == 30  # odd ones, and one in ten
    assert 0.4 < sum(h.ends is not None for h in queue.holders) / 400 < 0.8
    assert Counter(p.units for p in queue.pending).most_common(1)[0][0] == 1
    assert len(durations) == 5000 and queue.arrivals


def test_a_small_run_prints_every_figure(capsys) -> None:
    assert qs.main(["--nodes", "20", "--pending", "10,40", "--samples", "5"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["10", "40"]
    assert all(float(r[1]) >= 0 and float(r[2]) >= 0 and float(r[3]) > 0 for r in rows)
