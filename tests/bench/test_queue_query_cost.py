"""bench/queue_query_cost.py measures what it says: on its drawn cluster, backfilled
into a real Prometheus, the second round names exactly the pending GPU pods (those
without ``kube_pod_created``), asks for the GPU pods first seen in the arrival window
with them, and is not asked when every pod has the series; a site's many long GPU
resource names cut the first round into several queries answering the same."""

from __future__ import annotations

import time

import pytest

from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.series import Sample
from tests.bench.bench_module import load_bench

qc = load_bench("queue_query_cost")


@pytest.mark.integration
@pytest.mark.parametrize("created", [True, False])
def test_the_second_round_names_the_pending_gpu_pods_without_created(
    tmp_path, prometheus_factory, created
) -> None:
    now = time.time()
    pods = qc.draw(300, 0.3, 0.3, now, seed=4)
    om = tmp_path / "ksm.om"
    om.write_text(qc.openmetrics(pods, 10, created, now))
    prom = prometheus_factory([], backfill_files=[om])
    one, samples = qc.first_round(prom.url, now)
    waiting = {p.ids["uid"] for p in pods if p.gpu and not p.node and p.born <= now - 60}
    assert len(waiting) > 10
    # every pending GPU pod is read, created or not
    assert {s.labels["uid"] for s in samples["ksm_pods"] if s.labels["phase"] == "Pending"} == (
        waiting
    )
    second = kube_state.second_round(samples)
    if created:
        assert second == {}
        # a site's 32 long own names: the first round in several queries, the same answers
        long = [
            f"example-gpu-vendor.cluster.local/a100-80gb-shared-pool-{i:02d}" for i in range(32)
        ]
        folded, more = qc.first_round(prom.url, now, long)
        assert len(one) == 1 < len(folded) and max(map(len, folded)) <= queries.MAX_QUERY_CHARS
        assert _answers(more) == _answers(samples)
    else:
        assert list(second) == [kube_state.PENDING_SINCE_PART, kube_state.ARRIVALS_SEEN_PART]
        assert kube_state.uncreated(samples) == tuple(sorted(waiting))


def _answers(samples: dict[str, list[Sample]]) -> dict[str, list[tuple]]:
    """Each part's answer, sorted, without the fold's tag."""
    return {
        name: sorted(
            (sorted((k, v) for k, v in s.labels.items() if k != queries.TAG), s.value)
            for s in answer
        )
        for name, answer in samples.items()
    }


def _cycle_first_round(priorities: dict[str, int]) -> list[str]:
    """The first round's folded queries as ``Cycle._ask_queue`` builds them."""
    parts = kube_state.rendered(kube_state.first_round(priorities), 3600, ())
    return [
        queries.fold(b) for b in kube_state.batches(parts, queries.fold, queries.MAX_QUERY_CHARS)
    ]


@pytest.mark.integration
def test_the_timed_first_round_is_the_one_the_cycle_sends(tmp_path, prometheus_factory) -> None:
    """The bench times what a cycle sends (``kube_state.first_round`` for the priority
    mapping), not ``kube_state.QUERIES``: without a mapping the cycle leaves out the
    arrivals' priority classes, a shorter query."""
    now = time.time()
    om = tmp_path / "ksm.om"
    om.write_text(qc.openmetrics(qc.draw(50, 0.3, 0.3, now, seed=4), 10, True, now))
    prom = prometheus_factory([], backfill_files=[om])
    plain, _ = qc.first_round(prom.url, now)
    assert plain == _cycle_first_round({})
    mapped, _ = qc.first_round(prom.url, now, (), {"high": 1000})
    assert mapped == _cycle_first_round({"high": 1000})
    assert sum(map(len, plain)) < sum(map(len, mapped))
