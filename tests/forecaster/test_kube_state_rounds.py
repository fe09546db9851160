"""The GPU queue's queries stay within ``queries.MAX_QUERY_CHARS`` whatever GPU resource
names a site gives (``--pending.gpu-resource``): names the built-in regex matches add
nothing, many long names cut the first round into several queries
(``kube_state.batches``), and names too long for one part are refused at start and,
given past the CLI, cost the queue only. What the split queries answer is checked
against a real Prometheus in ``test_kube_state_rounds_real.py``, and against a real
VictoriaMetrics in ``tests/integration/test_victoriametrics.py``."""

from __future__ import annotations

import re

import pytest

from gpu_eta.common.gpu_resources import beyond_built_in
from gpu_eta.forecaster import kube_state, queries
from gpu_eta.forecaster.config import Config, ConfigError, CycleSettings
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.pending import PendingSettings
from tests.forecaster.test_cycle import NOW, CannedClient, job, make_cycle, merge, s
from tests.forecaster.test_cycle import store as store  # the fixture

# MIG profiles of A100 40 GB and 80 GB nodes, and the names every site has: all matched
# by the built-in regex (nvidia_com_gpu|nvidia_com_gpu_shared|nvidia_com_mig_.+)
MIG = (
    "nvidia.com/mig-1g.5gb",
    "nvidia.com/mig-2g.10gb",
    "nvidia.com/mig-3g.20gb",
    "nvidia.com/mig-4g.20gb",
    "nvidia.com/mig-7g.40gb",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-2g.20gb",
    "nvidia.com/mig-3g.40gb",
    "nvidia.com/mig-4g.40gb",
    "nvidia.com/mig-7g.80gb",
)
BUILT_IN = ("nvidia.com/gpu", "nvidia.com/gpu.shared", *MIG[:5])
# 32 renamed time-sliced pools under a long vendor domain (68 characters each)
LONG = tuple(
    f"example-gpu-vendor.cluster.local/a100-80gb-shared-replica-pool-{i:02d}" for i in range(32)
)
# names no part can hold: 32 names of 134 characters (a long domain and name)
TOO_LONG = tuple(f"{'d' * 60}.example.com/{'n' * 60}{i:02d}" for i in range(32))


def _queue_client(resource: str = "nvidia_com_gpu") -> CannedClient:
    """One node of 2 GPUs of ``resource``, one held by a forecast run, one pod waiting."""
    gpu = {"resource": resource}
    ksm = {
        "ksm_nodes": [s(2, node="n1", label_nvidia_com_gpu_product="A100", **gpu)],
        "ksm_pods": [
            s(1, namespace="ml", pod="pod-run", uid="u1", node="n1", phase="Running", **gpu),
            s(2, namespace="ml", pod="waits", uid="u2", phase="Pending", **gpu),
        ],
        "ksm_pod_times": [s(NOW - 50, uid="u2", time="created")],
    }
    return CannedClient(merge(job("run", 10, [(1, NOW - 200), (2, NOW - 100)], NOW - 300), ksm))


def _pending_queries(client: CannedClient) -> list[str]:
    """The queries ``client`` was sent that hold a part of the queue's first round."""
    return [q for q in client.seen if {n for _, n in _parts(q)} & set(kube_state.QUERIES)]


def test_names_the_built_in_regex_matches_change_no_query() -> None:
    """A site listing its MIG profiles (and ``nvidia.com/gpu``) asks what it asks without
    them: each is matched by ``nvidia_com_mig_.+`` already. Written into the regex, five
    took the first round past 12,000 characters, ten past the 16 KiB VictoriaMetrics
    takes."""
    parts = {**kube_state.QUERIES, kube_state.ARRIVALS_SEEN_PART: kube_state.ARRIVALS_SEEN}
    assert kube_state.rendered(parts, 3600, (*BUILT_IN, *MIG)) == kube_state.rendered(parts, 3600)
    assert beyond_built_in((*MIG, "nvidia.com/a100-shared", "nvidia.com/gpu")) == (
        "nvidia.com/a100-shared",
    )
    # a name beyond them is still read: in every GPU matcher
    own = kube_state.render(kube_state.PODS, 3600, ("nvidia.com/a100-shared", *MIG))
    assert '|nvidia_com_a100_shared"' in own and "mig_1g" not in own


def test_mig_profiles_leave_the_cycle_one_queue_query_within_the_bound(store) -> None:
    client = _queue_client("nvidia_com_mig_1g_10gb")
    settings = PendingSettings(gpu_resources=(*BUILT_IN, *MIG))
    fs = make_cycle(client, store, pending=settings).run()
    assert max(len(q) for q in client.seen) <= queries.MAX_QUERY_CHARS
    assert len(_pending_queries(client)) == 1
    assert fs.pending is not None and not fs.job_errors.get("pending_failed")
    (waits,) = fs.pending.pods
    assert waits.prediction.status == "predicted"  # when the run ends: its slice frees


def test_long_own_names_cut_the_first_round_within_the_bound(store) -> None:
    """32 long names of the site's own: every part still holds them, so the first round
    is asked in several folded queries, each within ``MAX_QUERY_CHARS``; the queue is
    predicted from their answers as from one query's."""
    plain = make_cycle(_queue_client(), store).run()
    client = _queue_client()
    fs = make_cycle(client, store, pending=PendingSettings(gpu_resources=LONG)).run()
    sent = _pending_queries(client)
    assert max(len(q) for q in client.seen) <= queries.MAX_QUERY_CHARS
    assert len(sent) == 5  # the number docs/forecaster.md and queries.py give
    # each part asked once
    tags = [name for q in sent for _, name in _parts(q)]
    assert sorted(tags) == sorted(kube_state.QUERIES)
    assert fs.pending is not None and plain.pending is not None
    assert [p.prediction for p in fs.pending.pods] == [p.prediction for p in plain.pending.pods]
    assert fs.pending.pods[0].prediction.status == "predicted"
    assert fs.queries == plain.queries + len(sent) - 1


def _parts(query: str) -> list[tuple[str, str]]:
    """The (tag, part name) pairs of a folded query."""
    return re.findall(rf'"({queries.TAG})", "(\w+)"', query)


def test_batches_keep_the_order_and_each_part_once() -> None:
    parts = {f"p{i}": "x" * n for i, n in enumerate((100, 5000, 5000, 5000, 100, 11_000))}
    got = kube_state.batches(parts, queries.fold, queries.MAX_QUERY_CHARS)
    assert [list(b) for b in got] == [["p0", "p1", "p2"], ["p3", "p4"], ["p5"]]
    assert all(len(queries.fold(b)) <= queries.MAX_QUERY_CHARS for b in got)
    assert all(b[k] == parts[k] for b in got for k in b)
    assert kube_state.batches({}, queries.fold, 100) == []
    assert kube_state.batches(dict(list(parts.items())[:2]), queries.fold, 6000) == [
        {"p0": parts["p0"], "p1": parts["p1"]}
    ]
    with pytest.raises(kube_state.QueryTooLong) as err:
        kube_state.batches({**parts, "big": "x" * 12_000}, queries.fold, queries.MAX_QUERY_CHARS)
    assert err.value.part == "big" and err.value.chars > err.value.limit == 12_000
    assert "big alone is 12,0" in str(err.value)


def test_names_no_part_can_hold_are_refused_at_start() -> None:
    """Refused once, at start, naming the flag (the CLI's exit 2), not a queue lost each
    cycle; 32 long names (``LONG``) and the MIG profiles are taken."""
    with pytest.raises(ConfigError, match=r"^--pending\.gpu-resource: with these 32 names the"):
        Config(cycle=CycleSettings(pending=PendingSettings(gpu_resources=TOO_LONG)))
    for fine in (LONG, (*BUILT_IN, *MIG), ()):
        Config(cycle=CycleSettings(pending=PendingSettings(gpu_resources=fine)))
    # the queue turned off reads nothing: no names to check
    off = PendingSettings(enabled=False, gpu_resources=TOO_LONG)
    Config(cycle=CycleSettings(pending=off))


def test_names_too_long_given_past_the_cli_cost_the_queue_only(
    store: HistoryStore, caplog: pytest.LogCaptureFixture
) -> None:
    """Settings built without ``Config`` (a program of its own): no queue query is sent,
    the queue is counted failed and the log names the flag; the jobs are forecast."""
    client = _queue_client()
    with caplog.at_level("WARNING"):
        fs = make_cycle(client, store, pending=PendingSettings(gpu_resources=TOO_LONG)).run()
    assert not _pending_queries(client)
    assert fs.pending is None and len(fs.jobs) == 1
    assert fs.job_errors.get("pending_failed") == 1
    (said,) = [r.getMessage() for r in caplog.records if "pending-pod queries" in r.getMessage()]
    assert "not sent" in said and "--pending.gpu-resource" in said
