"""bench/ending_means.py measures what it says: on its holders, backfilled into a real
Prometheus, the cycle's read of the ending pods' means and its peer (``UTIL_MEAN`` by set
match, or every pod's) answer the same means, the raw samples' read of every pod is
``UTIL_MEAN``'s, and the forms it names are the ones the cycle sends."""

from __future__ import annotations

import time

import pytest

from gpu_eta.forecaster import queries
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle import Cycle
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.runs_from_series import pod_values
from tests.bench.bench_module import load_bench

em = load_bench("ending_means")


def test_the_holders_are_of_every_kind_with_37_character_names() -> None:
    hs = em.holders(200, 0.1, 0.1)
    assert {len(h.pod) for h in hs} == {37}
    assert {h.kind: sum(x.kind == h.kind for x in hs) for h in hs} == {
        "dedicated": 160,
        "shared": 20,
        "dcgm": 20,
    }


@pytest.mark.integration
def test_the_cycles_read_and_its_peer_answer_the_same_means(tmp_path, prometheus_factory) -> None:
    hs = em.holders(200, 0.1, 0.1)
    now = float(int(time.time()))
    at = now - 5
    om = tmp_path / "holders.om"
    om.write_text(em.openmetrics(hs, now, 10))
    prom = prometheus_factory([], backfill_files=[om])
    client = PromClient(prom.url)
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        cycle = Cycle(client, store, CycleSettings())
        for n in (20, 100):
            pods = [h.pod for h in hs][:: 200 // n]
            assert em.use_form(pods, 420, True).startswith("UTIL_MEAN" if n == 20 else "raw")
            now_read = cycle._ending_means(pods, 420, at, [])
            peer = em.read_before(client, pods, 420, at)
            for name in queries.SPAN:
                got = {k: v for k, v in pod_values(now_read[name]).items() if k[1] in pods}
                want = {k: v for k, v in pod_values(peer[name]).items() if k[1] in pods}
                assert len(got) == n and got == pytest.approx(want), (n, name)
        shared = next(h.pod for h in hs if h.kind == "shared")
        full = {k[1]: v for k, v in pod_values(em.full_raw(client, 420, at)).items()}
        whole = client.instant(queries.render(queries.UTIL_MEAN, 420, 300), at=at)
        assert full == pytest.approx({k[1]: v for k, v in pod_values(whole).items()})
        assert len(full) == 200 and full[shared] == pytest.approx(1 - 3 / 28, abs=0.04)
    finally:
        store.close()
        client.close()


def test_dcgm_holders_carry_the_labels_dcgm_exporter_writes() -> None:
    """dcgm-exporter labels each device's series ``gpu, UUID, device, modelName,
    Hostname`` and, in its Kubernetes mode, the holder's ``namespace, pod, container``
    (NVIDIA/dcgm-exporter README's sample; ``Hostname``, not ``node``: docs/dashboards.md
    joins on ``UUID, gpu`` for that reason). The bench's DCGM series carried our
    exporter's ``node`` instead, a label DCGM never writes: its read proved nothing
    about DCGM's own series."""
    from prometheus_client.parser import text_string_to_metric_families

    dcgm = next(h for h in em.holders(20, 0.1, 0.1) if h.kind == "dcgm")
    text = em.openmetrics([dcgm], 1_800_000_000.0, 1).replace("# EOF\n", "")
    (family,) = [f for f in text_string_to_metric_families(text) if f.name.startswith("DCGM_")]
    labels = family.samples[0].labels
    assert set(labels) == {
        *("gpu", "UUID", "device", "modelName", "Hostname"),
        *("namespace", "pod", "container"),
    }
    assert labels["device"] == f"nvidia{labels['gpu']}" and labels["pod"] == dcgm.pod
