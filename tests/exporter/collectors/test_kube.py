"""KubePodSource with the real kubernetes client against a local API server fake (list + watch)."""

from __future__ import annotations

import gc
import http.client
import json
import logging
import math
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_eta.exporter.attribution import attribute, finished_pods
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.collectors import kube as kube_module
from gpu_eta.exporter.collectors.kube import (
    KubePodSource,
    PodObjectError,
    _listed,
    job_deadline_from_object,
    job_owner,
    parse_deadline,
    pod_meta_from_object,
)
from gpu_eta.exporter.collectors.kube import build as kube_build
from gpu_eta.exporter.collectors.registry import BuildContext
from gpu_eta.exporter.config import config_from_mapping
from gpu_eta.exporter.exposition import SnapshotExposition
from gpu_eta.exporter.progress import Report
from gpu_eta.exporter.progress_http import ProgressListener
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import Allocation, DeviceReading, GpuPoll
from gpu_eta.exporter.scheduler import Scheduler, Sources
from gpu_eta.exporter.snapshot import Snapshot, SnapshotHolder
from tests.support.doc_signatures import code_defaults, documented_defaults
from tests.support.kubeapi import FakeKubeAPI, make_job, make_pod

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kube"
NODE = "node-a"
U0 = "GPU-11111111-2222-3333-4444-555555555555"


def uid(n: int) -> str:
    return f"0000{n:04d}-1111-4222-8333-444455556666"


def wait_for(check: Callable[[], bool], timeout_seconds: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            if check():
                return
        except CollectorError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    fake = FakeKubeAPI().start()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def source_factory() -> Iterator[Callable[..., KubePodSource]]:
    started: list[KubePodSource] = []

    def factory(url: str, **kwargs) -> KubePodSource:
        kwargs.setdefault("backoff_initial_seconds", 0.05)
        kwargs.setdefault("backoff_max_seconds", 0.5)
        kwargs.setdefault("request_timeout_seconds", 5.0)
        src = KubePodSource(NODE, api_url=url, **kwargs).start()
        started.append(src)
        return src

    yield factory
    for src in started:
        src.stop()


def names(src: KubePodSource) -> list[str]:
    return [p.name for p in src.poll()]


# --- pure parsing --------------------------------------------------------------------


def test_pod_meta_from_a_real_training_pod() -> None:
    meta = pod_meta_from_object(json.loads((FIXTURES / "pod-training.json").read_text()))
    assert (meta.namespace, meta.name, meta.uid) == (
        "ml-vision",
        "resnet50-imagenet-x7k2p",
        "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d",
    )
    assert meta.ip == "10.244.7.23" and not meta.host_network and meta.phase == "Running"
    assert (meta.owner_kind, meta.owner_name) == ("Job", "resnet50-imagenet")
    assert meta.labels["team"] == "vision"
    assert dict(meta.container_ids) == {
        "trainer": "3f2c1b0a9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d3c2b",
        "log-shipper": "7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c",
    }
    # the spec's names, in the spec's order (a report may name them before any runtime id)
    spec = json.loads((FIXTURES / "pod-training.json").read_text())["spec"]["containers"]
    assert meta.containers == tuple(c["name"] for c in spec) and "trainer" in meta.containers
    start = 1795237202.0  # 2026-11-21T05:00:02Z
    assert meta.start_timestamp == start
    # annotation 12:00Z is earlier than start + 86400 s: the earliest deadline wins
    assert meta.deadline_timestamp == 1795262400.0


def test_invalid_deadline_annotation_is_ignored_with_a_debug_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.kube")
    meta = pod_meta_from_object(json.loads((FIXTURES / "pod-notebook.json").read_text()))
    assert meta.deadline_timestamp is None
    assert meta.container_ids == {
        "notebook": "5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9c8b7a6f5e4d"
    }
    assert meta.owner_kind == "" and meta.labels["app"] == "jupyterhub"
    assert any(
        "gpu-eta.io/deadline" in r.getMessage() and r.levelno == logging.DEBUG
        for r in caplog.records
    )


def test_gpu_etas_own_labels_and_annotations_outlast_the_cap() -> None:
    """A pod with more labels or annotations than the collector keeps (sidecar
    injectors and operators add dozens) still has gpu-eta's own: its deadline and its
    opt-out of the occupancy alerts, whatever their place in the object."""
    obj = json.loads((FIXTURES / "pod-training.json").read_text())
    meta_obj = obj["metadata"]
    deadline = meta_obj["annotations"]["gpu-eta.io/deadline"]
    meta_obj["labels"] = {
        **{f"injected.example.com/l{i}": "x" for i in range(kube_module.MAX_LABELS + 10)},
        "gpu-eta.io/long-running": "true",
    }
    meta_obj["annotations"] = {
        **{f"injected.example.com/a{i}": "x" for i in range(kube_module.MAX_ANNOTATIONS + 10)},
        "gpu-eta.io/deadline": deadline,
    }
    meta = pod_meta_from_object(obj)
    assert len(meta.labels) == kube_module.MAX_LABELS
    assert meta.labels["gpu-eta.io/long-running"] == "true"
    assert "injected.example.com/l0" in meta.labels  # the rest in their order
    assert meta.deadline_timestamp == 1795262400.0


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("1795262400", 1795262400.0),
        (" 1795262400.5 ", 1795262400.5),
        ("2026-11-21T12:00:00Z", 1795262400.0),
        ("2026-11-21T13:00:00+01:00", 1795262400.0),
        ("2026-11-21T12:00:00", None),  # no zone: ambiguous
        ("nan", None),
        ("-5", None),
        ("1e300", None),
        ("x" * 100, None),
        ("", None),
    ],
)
def test_parse_deadline(text: str, want: float | None) -> None:
    assert parse_deadline(text) == want


def test_sizes_are_bounded() -> None:
    pod = make_pod(
        "big",
        uid=uid(1),
        labels={**{f"l{i}": "v" for i in range(200)}, "long": "v" * 64},
        annotations={"huge": "x" * 100_000, "small": "ok"},
    )
    meta = pod_meta_from_object(pod)
    assert len(meta.labels) == 64 and "long" not in meta.labels
    assert "huge" not in meta.annotations and meta.annotations["small"] == "ok"


@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        {},
        {"metadata": "x"},
        {"metadata": {"name": "a", "namespace": "b"}},
        {"metadata": {"name": "", "namespace": "b", "uid": "c"}},
    ],
)
def test_malformed_pod_objects_raise_pod_object_error(obj) -> None:
    with pytest.raises(PodObjectError):
        pod_meta_from_object(obj)


def test_absurd_active_deadline_is_ignored() -> None:
    pod = make_pod("odd", uid=uid(2), active_deadline_seconds=10**400)
    assert pod_meta_from_object(pod).deadline_timestamp is None


def test_odd_field_types_are_dropped_not_fatal() -> None:
    pod = make_pod("odd", uid=uid(2))
    pod["status"]["startTime"] = 12
    pod["status"]["containerStatuses"] = [{"name": "main", "containerID": 5}, "junk"]
    pod["spec"]["activeDeadlineSeconds"] = "soon"
    pod["metadata"]["labels"] = ["not", "a", "map"]
    pod["metadata"]["ownerReferences"] = "nope"
    meta = pod_meta_from_object(pod)
    assert meta.start_timestamp is None and meta.container_ids == {} and meta.labels == {}
    assert meta.deadline_timestamp is None and meta.owner_kind == ""


# --- list + watch against the fake API server -----------------------------------------


def test_no_configuration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="cannot load client configuration"):
        KubePodSource(NODE, kubeconfig=str(tmp_path / "missing")).start()


def test_poll_fails_until_the_first_list(source_factory) -> None:
    src = source_factory("http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(CollectorError, match="no pod list"):
        src.poll()
    assert not src.status().listed


def test_cache_fills_follows_updates_and_filters_the_node(api: FakeKubeAPI, source_factory) -> None:
    api.add_pod(make_pod("train-a", uid=uid(1), ip="10.0.0.1"))
    api.add_pod(make_pod("elsewhere", uid=uid(2), node="node-b"))
    src = source_factory(api.url)
    wait_for(lambda: names(src) == ["train-a"])
    assert api.count(watch=False) == 1
    wait_for(lambda: src.status().connected)

    api.add_pod(make_pod("train-b", uid=uid(3), ip="10.0.0.3"))
    wait_for(lambda: names(src) == ["train-a", "train-b"])
    assert src.by_ip("10.0.0.3").name == "train-b"

    api.update_pod(make_pod("train-a", uid=uid(1), ip="10.0.0.1", phase="Succeeded"))
    wait_for(lambda: src.poll()[0].phase == "Succeeded")
    assert src.by_ip("10.0.0.1") is None  # finished pods do not own their old IP

    api.delete_pod("default", "train-b")
    wait_for(lambda: names(src) == ["train-a"])
    assert src.by_ip("10.0.0.3") is None
    # all of that came over one watch, without relisting
    assert api.count(watch=False) == 1


def test_host_network_pods_never_claim_an_ip(api: FakeKubeAPI, source_factory) -> None:
    api.add_pod(make_pod("ds", uid=uid(4), ip="192.168.1.10", host_network=True))
    src = source_factory(api.url)
    wait_for(lambda: names(src) == ["ds"])
    assert src.poll()[0].host_network and src.by_ip("192.168.1.10") is None


def test_a_reused_ip_is_the_pod_not_being_deleted_then_the_latest_started(
    api: FakeKubeAPI, source_factory
) -> None:
    """A deleted pod's API object stays Running through its grace period while the CNI
    may already have given its IP to a new pod, another namespace's: the IP is the new
    pod's, whatever their names sort as (the old pod sorting last took its reports).
    Among pods not being deleted the latest started holds it; pods alike on both counts
    hold none, and a report from there is refused as ambiguous, never filed under one."""
    old = make_pod(
        "trainer", "team-z", uid=uid(1), ip="10.0.0.10", start_time="2026-11-21T01:00:00Z"
    )
    api.add_pod(old)
    src = source_factory(api.url)
    wait_for(lambda: names(src) == ["trainer"])
    assert src.by_ip("10.0.0.10").uid == uid(1)  # terminating alone: still its (its end)
    old["metadata"]["deletionTimestamp"] = "2026-11-21T05:00:30Z"
    api.update_pod(old)
    api.add_pod(
        make_pod("trainer", "team-a", uid=uid(2), ip="10.0.0.10", start_time="2026-11-21T05:00:05Z")
    )
    # not being deleted wins over a later start; the earlier started wins over none
    api.add_pod(
        make_pod("a", "team-y", uid=uid(3), ip="10.0.0.11", start_time="2026-11-21T02:00:00Z")
    )
    api.add_pod(
        make_pod("b", "team-b", uid=uid(4), ip="10.0.0.11", start_time="2026-11-21T03:00:00Z")
    )
    api.add_pod(make_pod("c", "team-x", uid=uid(5), ip="10.0.0.11", start_time=None))
    # alike: neither being deleted, started the same second
    api.add_pod(make_pod("d", "team-c", uid=uid(6), ip="10.0.0.12"))
    api.add_pod(make_pod("e", "team-d", uid=uid(7), ip="10.0.0.12"))
    wait_for(lambda: len(src.poll()) == 7)
    relisted = source_factory(api.url)  # the same from one list
    wait_for(lambda: len(relisted.poll()) == 7)
    for cache in (src, relisted):
        assert cache.by_ip("10.0.0.10").uid == uid(2)
        assert cache.by_ip("10.0.0.11").uid == uid(4)
        assert cache.by_ip("10.0.0.12") is None
    listener = ProgressListener("127.0.0.1", 0, ProgressStore(), src.by_ip, src.poll)
    body = json.dumps({"epoch": 1, "epochs": 4}).encode()
    status, text, _ = listener.handle("10.0.0.12", len(body), body)
    assert (status, text) == (403, "forbidden: 10.0.0.12 is the address of 2 pods on this node")
    assert listener.handle("10.0.0.10", len(body), body)[:2] == (
        200,
        "accepted: team-a/trainer run " + listener.store.snapshot()[0].run_id,
    )
    # the old pod gone, a tie broken: the remaining pod holds the address again
    api.delete_pod("team-z", "trainer")
    api.delete_pod("team-d", "e")
    wait_for(lambda: src.by_ip("10.0.0.12") is not None)
    assert src.by_ip("10.0.0.12").uid == uid(6) and src.by_ip("10.0.0.10").uid == uid(2)


def test_a_fake_left_by_its_with_gives_its_port_up() -> None:
    """Leaving ``with FakeKubeAPI()`` is ``close()``: the port held while stopped is
    given up, not left bound until the fake is collected."""
    with FakeKubeAPI() as fake:
        port = fake.port
    with socket.socket() as other:  # nothing connected: no TIME_WAIT to refuse it
        other.bind(("127.0.0.1", port))


def test_a_stopped_api_server_refuses_and_keeps_its_port(api: FakeKubeAPI) -> None:
    """The fake's outage is a dead server's: connections refused, and its port not
    handed to another test's server meanwhile (with five workers binding ports, one
    once answered a stopped API's clients 404, so the outage tests saw a stranger)."""
    api.stop()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", api.port)) != 0  # refused
    with socket.socket() as other, pytest.raises(OSError):
        other.bind(("127.0.0.1", api.port))  # as a server picking this port would
    api.start()
    with socket.create_connection(("127.0.0.1", api.port), timeout=10):
        pass


def test_cache_survives_the_api_server_going_away_and_resumes(
    api: FakeKubeAPI, source_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """While the API is away the cache is served whole, a running pod's Job deadline
    included: the Job re-reads go on through the outage and fail, and a failed one
    keeps the deadline last read (through the relist after it too). Its warning says
    the API server did not answer, not that a permission is missing."""
    api.add_job(make_job("train", "default"))
    api.add_pod(make_pod("train-a", uid=uid(1)))
    src = source_factory(api.url, job_cache_seconds=0.5)
    wait_for(lambda: src.status().connected and names(src) == ["train-a"])
    assert src.poll()[0].deadline_timestamp == JOB_START + 3600

    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        api.stop()
        wait_for(lambda: not src.status().connected and src.status().last_error != "")
        before = src.status().last_sync_timestamp
        # a re-read of the Job failed (0.5 s after the last, at most 1 s a pass)
        wait_for(lambda: any("cannot read Job" in r.getMessage() for r in caplog.records), 10)
        time.sleep(0.3)
        assert names(src) == ["train-a"]  # served from the cache
        assert src.poll()[0].deadline_timestamp == JOB_START + 3600
        assert src.status().listed and src.status().last_sync_timestamp == before

        api.add_pod(make_pod("train-b", uid=uid(2)))  # happens while we cannot see
        api.start()
        wait_for(lambda: names(src) == ["train-a", "train-b"])
        wait_for(lambda: src.status().connected and src.status().last_error == "")
    assert src.status().last_sync_timestamp > before
    assert api.count(watch=False) == 2  # the start's list and one after the error
    assert [p.deadline_timestamp for p in src.poll()] == [JOB_START + 3600] * 2
    warning = next(r.getMessage() for r in caplog.records if "cannot read Job" in r.getMessage())
    assert "no answer" in warning and "jobs.batch" not in warning


def _watch_versions(api: FakeKubeAPI) -> list[str]:
    """The resourceVersion each pod watch served so far was asked from."""
    return [
        q.get("resourceVersion", "")
        for path, q in api.requests
        if path == "/api/v1/pods" and q.get("watch") == "true"
    ]


def _stored_version(api: FakeKubeAPI, name: str) -> str:
    """The resourceVersion of pod ``name`` as the API server stores it."""
    with api._cond:
        return api._pods[("default", name)]["metadata"]["resourceVersion"]


def _next_watch(api: FakeKubeAPI) -> None:
    """Wait until the API serves one more pod watch than now (the last one ended)."""
    watches = api.count(watch=True)
    wait_for(lambda: api.count(watch=True) > watches, timeout_seconds=30)


def test_a_long_running_watch_sends_no_list(api: FakeKubeAPI, source_factory) -> None:
    """Watches that end on their server timeout are resumed from the last
    resourceVersion seen, never by a list: a list of one node's pods is a consistent
    read the API server sends to etcd, which has no index on spec.nodeName and reads
    every pod of the cluster for it. A relist every 5 minutes from every node was a
    full scan of the pod keyspace per node per 5 minutes (1,000 nodes: ~3 a second)."""
    api.add_pod(make_pod("train-1", uid=uid(1)))
    src = source_factory(api.url, watch_timeout_seconds=1, job_deadlines=False)
    wait_for(lambda: src.status().connected and names(src) == ["train-1"])
    for n in (2, 3, 4):
        _next_watch(api)  # the one before timed out
        api.add_pod(make_pod(f"train-{n}", uid=uid(n)))
        wait_for(lambda want=n: len(src.poll()) == want)
    _next_watch(api)
    assert api.count(watch=False) == 1, "a list was sent while the watch ran"
    assert api.count(watch=True) >= 5
    # the watch after the last event resumed from that event's version
    assert _watch_versions(api)[-1] == _stored_version(api, "train-4")


def test_a_watch_resumes_from_a_bookmark_past_compaction(api: FakeKubeAPI, source_factory) -> None:
    """A bookmark carries the server's current resourceVersion: a watch that ends on
    its timeout after etcd compacted every version the cache saw (other objects of
    the cluster moved it on) resumes from the bookmark's, not refused 410 and listed."""
    api.add_pod(make_pod("train-a", uid=uid(1)))
    src = source_factory(api.url, job_deadlines=False)
    wait_for(lambda: src.status().connected and names(src) == ["train-a"])
    synced = src.status().last_sync_timestamp
    api.compact()
    time.sleep(0.05)
    api.bookmark()
    wait_for(lambda: src.status().last_sync_timestamp > synced)
    api.end_watches()  # its server timeout
    wait_for(lambda: api.count(watch=True) == 2 and src.status().connected)
    assert int(_watch_versions(api)[-1]) == api.current_version()
    assert api.count(watch=False) == 1 and api.expired_watches == 0


def test_expired_resource_version_relists(api: FakeKubeAPI, source_factory) -> None:
    api.add_pod(make_pod("train-a", uid=uid(1)))
    src = source_factory(api.url)
    wait_for(lambda: src.status().connected)
    lists = api.count(watch=False)
    api.compact()
    api.add_pod(make_pod("train-b", uid=uid(2)))
    wait_for(lambda: names(src) == ["train-a", "train-b"])
    api.compact()
    api.end_watches()  # rewatch from a compacted version → ERROR 410 Expired
    wait_for(lambda: api.count(watch=False) == lists + 1)
    wait_for(lambda: src.status().connected)
    assert src.status().last_error == ""  # 410 is routine, not an error
    api.add_pod(make_pod("train-c", uid=uid(3)))
    wait_for(lambda: names(src) == ["train-a", "train-b", "train-c"])


def test_a_watch_refused_410_relists(
    api: FakeKubeAPI, source_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """The API server may refuse a watch from a compacted resourceVersion before it
    starts: HTTP 410 with a ``Status`` (reason Expired), which the client raises as
    ``ApiException``, not the stream's ERROR event. Routine as that event is: one relist
    at once (a backoff longer than the wait shows none), no WARNING, no error in status,
    and the pods, changed while the watch ran and after the relist, are right."""
    api.expire_watch_status = True
    api.add_pod(make_pod("train-a", uid=uid(1)))
    with caplog.at_level(logging.DEBUG, logger="gpu_eta.exporter.collectors.kube"):
        src = source_factory(api.url, backoff_initial_seconds=120, job_deadlines=False)
        wait_for(lambda: src.status().connected and names(src) == ["train-a"])
        lists = api.count(watch=False)
        api.add_pod(make_pod("train-b", uid=uid(2)))
        api.delete_pod("default", "train-a")
        wait_for(lambda: names(src) == ["train-b"])
        time.sleep(1.1)  # a watch ended within 1 s is followed by a backoff (no spinning)
        api.compact()
        api.end_watches()  # rewatch from a compacted version → HTTP 410 Expired
        wait_for(lambda: api.count(watch=False) == lists + 1, timeout_seconds=30)
        wait_for(lambda: src.status().connected)
        api.add_pod(make_pod("train-c", uid=uid(3)))
        wait_for(lambda: names(src) == ["train-b", "train-c"])
    assert api.expired_watches == 1 and api.count(watch=False) == lists + 1
    assert src.status().last_error == ""
    records = [r for r in caplog.records if r.name == "gpu_eta.exporter.collectors.kube"]
    assert [r.getMessage() for r in records if r.levelno >= logging.WARNING] == []
    assert not [r for r in records if r.exc_info]
    assert "kube: watch resourceVersion expired (410); relisting" in [
        r.getMessage() for r in records
    ]


def test_a_server_expiring_every_watch_is_not_listed_in_a_tight_loop(
    api: FakeKubeAPI, source_factory
) -> None:
    """A server whose every watch is refused 410, a freshly listed version's too: the
    first 410 relists at once, a second in a row (each within a second of its watch's
    start) waits the backoff first, doubling, so the lists stay few; the pods still
    follow the store, through the relists."""
    api.expire_every_watch = True
    api.add_pod(make_pod("train-a", uid=uid(1)))
    src = source_factory(api.url, backoff_initial_seconds=0.2, backoff_max_seconds=0.4)
    wait_for(lambda: names(src) == ["train-a"])
    lists = api.count(watch=False)
    time.sleep(2.0)
    # about 2 s / 0.4 s backoffs; without them, hundreds of list-and-watch rounds
    assert api.count(watch=False) - lists <= 10
    api.add_pod(make_pod("train-b", uid=uid(2)))
    wait_for(lambda: names(src) == ["train-a", "train-b"])
    assert src.status().last_error == ""


def test_the_fake_refuses_an_expired_watch_as_the_api_server_does(api: FakeKubeAPI) -> None:
    """A watch from a compacted resourceVersion: by default 200 and the ERROR event,
    with ``expire_watch_status`` the same ``Status`` as an HTTP 410 answer."""
    api.add_pod(make_pod("p0", uid=uid(0)))
    api.compact()
    query = {"watch": "true", "resourceVersion": "101", "timeoutSeconds": "1"}
    url = f"{api.url}/api/v1/pods?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=10) as response:
        (line,) = response.read().splitlines()
    event = json.loads(line)
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    api.expire_watch_status = True
    code, answer = _get(api, **query)
    assert code == 410
    assert {k: answer[k] for k in ("kind", "status", "reason", "code")} == {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    assert answer["message"] == event["object"]["message"] == "too old resource version: 101 (102)"
    assert api.expired_watches == 2


def test_the_fake_expiring_every_watch_still_serves_one_from_any_version(
    api: FakeKubeAPI,
) -> None:
    """``expire_every_watch`` refuses every watch from a resourceVersion, a freshly
    listed one's too, but not one from "0" ("any version", served from the watch
    cache, never too old): that one starts with the current pods, is not counted
    expired, and is not answered 410 with ``expire_watch_status`` either."""
    api.add_pod(make_pod("p0", uid=uid(0)))
    api.expire_every_watch = True
    query = {"watch": "true", "timeoutSeconds": "1"}
    for expire_watch_status in (False, True):
        api.expire_watch_status = expire_watch_status
        url = f"{api.url}/api/v1/pods?{urllib.parse.urlencode(query | {'resourceVersion': '0'})}"
        with urllib.request.urlopen(url, timeout=10) as response:
            (line,) = response.read().splitlines()
        event = json.loads(line)
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "p0")
    assert api.expired_watches == 0
    listed = _get(api)[1]["metadata"]["resourceVersion"]
    code, answer = _get(api, **query, resourceVersion=listed)
    assert (code, answer["reason"], api.expired_watches) == (410, "Expired", 1)


def _timed_watch(api: FakeKubeAPI, **query: str) -> float:
    """Seconds until the fake ends a watch from "0" asked with ``query``, cleanly."""
    url = f"{api.url}/api/v1/pods?{urllib.parse.urlencode({'watch': 'true', **query})}"
    started = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as response:
        response.read()  # to the final chunk: a clean end
    return time.monotonic() - started


def test_the_fake_times_watches_out_as_the_api_server_does(api: FakeKubeAPI) -> None:
    """The API server ends a watch after its ``timeoutSeconds``; without one, or with
    0, after a random time between its ``--min-request-timeout`` (1800 s by default)
    and twice that (apiserver ``GetTimeoutForWatch``): the timeout the source asks
    for is what ends its watches, the server's flag is not."""
    # the server's flag at 30 s: a watch ending by it instead (30-60 s) is far past
    # the 4 s bound on the asked 1 s however loaded the machine
    api.min_request_timeout_seconds = 30.0
    assert 0.9 <= _timed_watch(api, timeoutSeconds="1") < 4.0
    # at 0.25 s: the server's pick (0.25-0.5 s) well inside 2 s; no end at all is cut
    # by the read's 30 s timeout
    api.min_request_timeout_seconds = 0.25
    for query in ({}, {"timeoutSeconds": "0"}):
        assert 0.2 <= _timed_watch(api, **query) < 2.0, query


def test_every_watch_asks_for_the_documented_timeout(api: FakeKubeAPI, source_factory) -> None:
    """``timeoutSeconds`` is sent with every watch, ``WATCH_TIMEOUT_SECONDS`` (300) by
    default, the figure docs/attribution.md and docs/alerts.md give; never 0 or
    absent, which would leave the watch's length to the server's flag (30-60 min)."""
    assert kube_module.WATCH_TIMEOUT_SECONDS == 300
    src = source_factory(api.url, job_deadlines=False)
    wait_for(lambda: src.status().connected)
    api.end_watches()
    wait_for(lambda: api.count(watch=True) == 2 and src.status().connected)
    asked = [q.get("timeoutSeconds") for path, q in api.requests if q.get("watch") == "true"]
    assert asked == ["300", "300"]


@pytest.mark.parametrize("seconds", [0.5, math.inf, math.nan, -1])
def test_a_watch_timeout_the_server_cannot_take_is_a_clear_error(seconds: float) -> None:
    with pytest.raises(CollectorError, match="watch_timeout_seconds"):
        KubePodSource(NODE, api_url="http://127.0.0.1:9", watch_timeout_seconds=seconds)


@pytest.mark.parametrize("seconds", [0, -1, math.inf, math.nan])
def test_a_job_cache_time_that_is_not_a_finite_positive_number_is_a_clear_error(
    seconds: float,
) -> None:
    """inf killed the re-read thread (``Event.wait`` overflows), NaN re-read every Job
    every second; 0 or less would re-read them on every pass."""
    with pytest.raises(CollectorError, match="job_cache_seconds"):
        KubePodSource(NODE, api_url="http://127.0.0.1:9", job_cache_seconds=seconds)


def test_threads_a_stop_could_not_wait_for_end_after_the_next_start(
    api: FakeKubeAPI, source_factory
) -> None:
    """``stop()`` that times out waiting (a Job GET in flight: 2 s here, 0.2 s allowed)
    leaves its threads to end on their own: a ``start()`` after it must not set them
    running again beside the new ones, nor may they touch the new ones' watch."""
    api.add_job(make_job("train", "ml"))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    src = source_factory(api.url, job_cache_seconds=0.5)
    wait_for(lambda: src.status().connected)
    api.job_delay_seconds = 2.0
    stopped = []
    for _ in range(2):
        gets = api.job_gets()
        wait_for(lambda gets=gets: api.job_gets() > gets, timeout_seconds=10)  # a GET in flight
        stopped += [src._thread, src._refresher]
        src.stop(timeout_seconds=0.2)
        src.start()
    api.job_delay_seconds = 0.0
    wait_for(lambda: not any(t.is_alive() for t in stopped), timeout_seconds=15)
    wait_for(lambda: src.status().connected and src._thread.is_alive())
    src.stop(timeout_seconds=15)
    assert not any(t.is_alive() for t in stopped) and not src.status().connected


def test_bookmarks_refresh_the_sync_time(api: FakeKubeAPI, source_factory) -> None:
    src = source_factory(api.url)
    wait_for(lambda: src.status().connected)
    before = src.status().last_sync_timestamp
    time.sleep(0.05)
    api.bookmark()
    wait_for(lambda: src.status().last_sync_timestamp > before)


def test_stop_closes_the_watch(api: FakeKubeAPI, source_factory) -> None:
    src = source_factory(api.url)
    # the client's side of the watch is open, not only the server's
    wait_for(lambda: api.open_watches() == 1 and src.status().connected)
    thread = src._thread
    # generous: on a loaded 2-core machine the thread may wait long for the CPU; a
    # stop that does not close the watch would still hang past this
    src.stop(timeout_seconds=60)
    assert thread is not None and not thread.is_alive()
    assert not src.status().connected

    def server_saw_close() -> bool:
        api.bookmark()  # a server notices a closed stream only when it writes to it
        return api.open_watches() == 0

    wait_for(server_saw_close)


def test_watch_outage_shows_in_the_exposition(api: FakeKubeAPI, source_factory) -> None:
    """While the API is away the cache is served and collector_success stays 1:
    only ``kube_watch_connected`` (0) and the held last-sync time show the outage."""
    api.add_pod(make_pod("train-a", uid=uid(1)))
    src = source_factory(api.url)
    wait_for(lambda: src.status().connected and names(src) == ["train-a"])
    holder = SnapshotHolder(Snapshot(node=NODE, timestamp=0))
    sched = Scheduler(NODE, Sources(pods=src), holder, timeout_seconds=30)
    collector = SnapshotExposition(holder)

    def scrape() -> dict[str, float]:
        sched.collect_once()
        out = {}
        for line in collector.exposition().decode().splitlines():
            if line.startswith("gpu_eta_exporter_") and 'collector="' not in line:
                out[line.split("{")[0]] = float(line.rsplit(" ", 1)[1])
            elif line.startswith('gpu_eta_exporter_collector_success{collector="kube"'):
                out["kube_success"] = float(line.rsplit(" ", 1)[1])
        return out

    try:
        before = scrape()
        assert before["gpu_eta_exporter_kube_watch_connected"] == 1
        synced = before["gpu_eta_exporter_kube_last_sync_timestamp_seconds"]
        assert synced == src.status().last_sync_timestamp
        assert abs(synced - time.time()) < 120

        api.stop()
        wait_for(lambda: not src.status().connected)
        during = scrape()
        assert during["gpu_eta_exporter_kube_watch_connected"] == 0
        assert during["gpu_eta_exporter_kube_last_sync_timestamp_seconds"] == synced
        assert during["kube_success"] == 1  # the cache is served: success alone hides it
        assert [p.name for p in holder.get().pods] == ["train-a"]

        api.start()
        wait_for(lambda: src.status().connected)
        after = scrape()
        assert after["gpu_eta_exporter_kube_watch_connected"] == 1
        assert after["gpu_eta_exporter_kube_last_sync_timestamp_seconds"] > synced
    finally:
        sched.stop()


def test_a_container_that_exits_0_ends_its_plan_less_run(
    api: FakeKubeAPI, source_factory, tmp_path: Path
) -> None:
    """The scheduler's wiring, pod watch to store: a Job's container whose HTTP
    progress has no plan (steps only) ends that run with the steps it reached as its
    plan once the pod succeeded, kept across a restart; a crash (exit 1, the container
    restarted by its Job) ends nothing, nor does its exit 0 while another container of
    the pod still runs (an HTTP report naming no container is filed under the pod's
    first), and a run with a plan in another container of the pod stays unended."""
    containers = {"train": "containerd://" + "ab" * 32, "eval": "containerd://" + "cd" * 32}
    api.add_pod(make_pod("train-a", uid=uid(1), containers=containers))
    src = source_factory(api.url)
    wait_for(lambda: names(src) == ["train-a"])
    state = tmp_path / "progress.json"
    store = ProgressStore(state)
    now = time.time()
    store.merge("default", "train-a", "train", "http", Report(run_id="r1", step=1230), now - 5)
    store.merge("default", "train-a", "eval", "http", Report(epoch=1, epochs=3), now - 5)
    holder = SnapshotHolder(Snapshot(node=NODE, timestamp=0))
    sched = Scheduler(NODE, Sources(pods=src, progress_store=store), holder, timeout_seconds=30)

    def progress(container: str):
        return next(p for p in sched.collect_once().progress if p.container == container)

    try:
        assert progress("train").ended_timestamp is None
        api.update_pod(
            make_pod("train-a", uid=uid(1), containers=containers, exit_codes={"train": 1})
        )
        wait_for(lambda: "train" not in src.poll()[0].container_ids)
        crashed = progress("train")
        assert (crashed.steps, crashed.ended_timestamp) == (None, None)
        api.update_pod(  # exit 0, the other container still running: the pod goes on
            make_pod("train-a", uid=uid(1), containers=containers, exit_codes={"train": 0})
        )
        wait_for(lambda: "train" not in src.poll()[0].container_ids)
        going = progress("train")
        assert (going.steps, going.ended_timestamp) == (None, None)
        api.update_pod(
            make_pod(
                "train-a",
                uid=uid(1),
                containers=containers,
                phase="Succeeded",
                exit_codes={"train": 0, "eval": 0},
            )
        )
        wait_for(lambda: src.poll()[0].phase == "Succeeded")
        done = progress("train")
        assert (done.step, done.steps, done.epochs) == (1230, 1230, None)
        assert done.ended_timestamp is not None and done.ended_timestamp >= now
        assert progress("eval").epochs == 3 and progress("eval").ended_timestamp is None
    finally:
        sched.stop()
        store.close()
    reopened = ProgressStore(state)
    try:
        (again,) = (p for p in reopened.snapshot() if p.container == "train")
        assert (again.steps, again.ended_timestamp) == (1230, done.ended_timestamp)
    finally:
        reopened.close()


def test_max_pods_bounds_the_cache(api: FakeKubeAPI, source_factory) -> None:
    for n in range(5):
        api.add_pod(make_pod(f"p{n}", uid=uid(n)))
    src = source_factory(api.url, max_pods=3)
    wait_for(lambda: len(src.poll()) == 3)
    api.add_pod(make_pod("p9", uid=uid(9)))
    time.sleep(0.3)
    assert len(src.poll()) == 3


def test_finished_pods_give_way_to_running_ones_at_the_cap(
    api: FakeKubeAPI, source_factory
) -> None:
    """Job pods without a TTL stay in the API after they finish: on a batch node they
    fill the cache, and a new running pod must still get in (metadata, progress)."""
    for n in range(3):
        api.add_pod(make_pod(f"done{n}", uid=uid(n), phase="Succeeded", ip=None))
    api.add_pod(make_pod("failed", uid=uid(3), phase="Failed", ip=None))
    api.add_pod(make_pod("early", uid=uid(4), ip="10.0.0.4"))
    src = source_factory(api.url, max_pods=3)
    # the relist keeps the running pod first, then finished ones up to the cap
    wait_for(lambda: len(src.poll()) == 3)
    assert "early" in names(src)
    # a new running pod from the watch takes a finished pod's slot
    api.add_pod(make_pod("train", uid=uid(9), ip="10.0.0.77"))
    wait_for(lambda: "train" in names(src))
    assert len(src.poll()) == 3
    assert src.by_ip("10.0.0.77") is not None
    # a finished pod never takes a running pod's slot
    api.add_pod(make_pod("train2", uid=uid(10), ip="10.0.0.78"))
    wait_for(lambda: "train2" in names(src))
    api.add_pod(make_pod("train3", uid=uid(11), ip="10.0.0.79"))
    api.add_pod(make_pod("done9", uid=uid(12), phase="Succeeded", ip=None))
    time.sleep(0.5)
    assert sorted(names(src)) == ["early", "train", "train2"]


def _finished_job_pods(api: FakeKubeAPI, count: int) -> None:
    """``count`` finished Job pods as a batch node keeps them (no TTL), each with the
    managedFields every pod the API serves carries."""
    managed = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {f"f:c{n}": {"f:x": {}, "f:y": {}} for n in range(60)}},
        }
    ]
    for n in range(count):
        pod = make_pod(f"sweep-{n}", uid=uid(n), phase="Succeeded", ip=None)
        pod["metadata"]["managedFields"] = managed
        api.add_pod(pod)


def test_the_pod_list_is_read_in_pages(api: FakeKubeAPI, source_factory) -> None:
    """The list asks for ``LIST_PAGE_PODS`` pods at a time and follows ``continue`` to
    the last page: every pod arrives, and no answer holds more than one page."""
    _finished_job_pods(api, 2 * kube_module.LIST_PAGE_PODS + 7)
    api.add_pod(make_pod("train", uid=uid(9999), ip="10.0.0.77"))
    src = source_factory(api.url, max_pods=5000)
    wait_for(lambda: len(src.poll()) == 2 * kube_module.LIST_PAGE_PODS + 8)
    assert src.by_ip("10.0.0.77") is not None
    lists = [q for path, q in api.requests if path == "/api/v1/pods" and "watch" not in q]
    assert [q.get("limit") for q in lists] == [str(kube_module.LIST_PAGE_PODS)] * 3
    assert ["continue" in q for q in lists] == [False, True, True]
    # a consistent read: resourceVersion=0 is served from the watch cache, which may
    # ignore limit (the whole list in one answer)
    assert all("resourceVersion" not in q for q in lists)
    assert api.list_pages == [kube_module.LIST_PAGE_PODS] * 2 + [8]


def test_an_expired_continue_token_relists(
    api: FakeKubeAPI, source_factory, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The API server forgets a list's continue token after compaction (410 Expired):
    the list starts again from its first page, and the cache fills. It is routine (the
    410 ``_Gone``, as for a watch), not a failure: no WARNING, no error in status, no
    backoff. The client raises ``ApiException`` for a 410 list answer, which the list
    once turned into a general error that the loop logged and backed off."""
    monkeypatch.setattr(kube_module, "LIST_PAGE_PODS", 2)
    _finished_job_pods(api, 5)
    compacted: list[bool] = []
    original = kube_module.KubePodSource._list_page

    def list_page(self, token, budget):  # etcd compacts once, between two pages
        if token is not None and not compacted:
            compacted.append(True)
            api.compact()
        return original(self, token, budget)

    monkeypatch.setattr(kube_module.KubePodSource, "_list_page", list_page)
    errors: list[str] = []
    set_error = kube_module.KubePodSource._set_error

    def record_error(self, message: str) -> bool:
        errors.append(message)
        return set_error(self, message)

    monkeypatch.setattr(kube_module.KubePodSource, "_set_error", record_error)
    with caplog.at_level(logging.INFO, logger="gpu_eta.exporter.collectors.kube"):
        # a backoff longer than the wait: a 410 taken as an error cannot relist in time
        src = source_factory(
            api.url, max_pods=100, backoff_initial_seconds=120, job_deadlines=False
        )
        wait_for(lambda: len(src.poll()) == 5, timeout_seconds=30)
    lists = [q for path, q in api.requests if path == "/api/v1/pods" and "watch" not in q]
    assert sum("continue" not in q for q in lists) == 2  # listed again from the start
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert src.status().last_error == "" and not any(errors)


def test_continue_tokens_that_keep_expiring_back_off(
    api: FakeKubeAPI, source_factory, monkeypatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A list slower than the API server's compaction window has every continue token
    expire. Each expiry restarting the list at once was an unthrottled stream of first
    pages to the API server: the list starts again at most twice, then fails as any
    error does (one WARNING, the error in status, the loop's backoff) and, once a list
    can finish again, fills the cache."""
    monkeypatch.setattr(kube_module, "LIST_PAGE_PODS", 2)
    _finished_job_pods(api, 5)
    api.expire_continue = True
    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        src = source_factory(api.url, backoff_initial_seconds=2.0, job_deadlines=False)
        wait_for(lambda: src.status().last_error != "", timeout_seconds=10)
        assert "continue token expired" in src.status().last_error
        time.sleep(0.5)  # within the backoff: no list at all
        lists = [q for path, q in api.requests if path == "/api/v1/pods" and "watch" not in q]
        # three tries, each a first page and a second one whose token has expired
        assert ["continue" in q for q in lists] == [False, True] * 3
        api.expire_continue = False
        wait_for(lambda: len(src.poll()) == 5, timeout_seconds=30)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "continue token expired" in warnings[0], warnings
    assert src.status().last_error == ""


def test_a_410_on_a_first_page_is_an_error_not_a_relist(monkeypatch) -> None:
    """A first page carries no continue token to expire: its 410 is no routine relist
    (which the loop would start at once, unthrottled) but an error, backed off."""
    src = KubePodSource(NODE, api_url="http://127.0.0.1:9")  # not started
    tokens: list[str | None] = []

    def gone(self, token, budget):
        tokens.append(token)
        raise kube_module._Gone()

    monkeypatch.setattr(kube_module.KubePodSource, "_list_page", gone)
    with pytest.raises(CollectorError, match="410 on a first page"):
        src._list()
    assert tokens == [None]


@pytest.mark.parametrize("token", [5, ["a"], "x" * (64 * 1024 + 1)])
def test_an_invalid_continue_token_keeps_the_cache(token, monkeypatch) -> None:
    """A page whose ``continue`` is there but unusable (not a string, over 64 KiB) does
    not end the list: the pods of the pages not read would count as deleted (dropped
    from the cache, finished ones from the record attribution relies on). The list
    fails and the cache stays as the last whole list left it."""
    src = KubePodSource(NODE, api_url="http://127.0.0.1:9")  # not started
    src._replace_listed(_listed([make_pod("old", uid=uid(1))]))
    page = make_pod("new", uid=uid(2))

    def list_page(self, token_in, budget):
        return kube_module._listed([page]), {"resourceVersion": "7", "continue": token}, 100

    monkeypatch.setattr(kube_module.KubePodSource, "_list_page", list_page)
    with pytest.raises(CollectorError, match="invalid continue token"):
        src._list()
    assert names(src) == ["old"]


def _get(api: FakeKubeAPI, **query: str) -> tuple[int, dict]:
    """One ``GET /api/v1/pods`` of the fake: (HTTP status, JSON answer)."""
    url = f"{api.url}/api/v1/pods?{urllib.parse.urlencode(query)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_the_fake_pages_lists_as_the_api_server_does(api: FakeKubeAPI) -> None:
    """The list answers the exporter's paging is tested against are the real server's:
    ``remainingItemCount`` only without a selector (the server cannot count what a
    selector would keep without reading it all), 400 for a resourceVersion with a
    continue token and for a token that is not one, 410 for a compacted one."""
    for n in range(3):
        api.add_pod(make_pod(f"p{n}", uid=uid(n)))
    code, first = _get(api, limit="1")
    assert code == 200 and first["metadata"]["remainingItemCount"] == 2
    code, first = _get(api, limit="1", fieldSelector=f"spec.nodeName={NODE}")
    assert code == 200 and "remainingItemCount" not in first["metadata"]
    token = first["metadata"]["continue"]
    code, answer = _get(
        api, limit="1", fieldSelector=f"spec.nodeName={NODE}", **{"continue": token}
    )
    assert code == 200 and [p["metadata"]["name"] for p in answer["items"]] == ["p1"]
    code, answer = _get(api, limit="1", resourceVersion="0", **{"continue": token})
    assert code == 200  # "0" is allowed with a token
    code, answer = _get(api, limit="1", resourceVersion="101", **{"continue": token})
    assert (code, answer["reason"]) == (400, "BadRequest")
    assert "resource version is not allowed when using continue" in answer["message"]
    for junk in ("not-base64!", "bm90IGpzb24=", "WzFd"):  # not base64, not JSON, a list
        code, answer = _get(api, limit="1", **{"continue": junk})
        assert (code, answer["reason"]) == (400, "BadRequest"), junk
        assert answer["message"].startswith("invalid continue token")
    api.compact()
    code, answer = _get(api, limit="1", **{"continue": token})
    assert (code, answer["reason"]) == (410, "Expired")


def test_the_fake_keeps_a_connection_alive_after_a_watch_ends(api: FakeKubeAPI) -> None:
    """A watch the server ends cleanly (its timeout) leaves the HTTP/1.1 connection open
    for the next request, as the API server's Go HTTP server does; a client re-watching
    at once on it got the connection closed under it instead (a failed watch, logged
    and backed off, where the real server answers). ``stop()`` still drops it."""
    api.add_pod(make_pod("p0", uid=uid(0)))
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=10)
    try:
        query = urllib.parse.urlencode({"watch": "true", "timeoutSeconds": "1"})
        for _ in range(2):  # the second watch goes over the first one's connection
            connection.request("GET", f"/api/v1/pods?{query}")
            response = connection.getresponse()
            assert response.status == 200 and not response.will_close
            (line,) = response.read().splitlines()
            assert json.loads(line)["type"] == "ADDED"
        api.stop()
        with pytest.raises((http.client.HTTPException, OSError)):
            connection.request("GET", "/api/v1/pods")
            connection.getresponse()
    finally:
        connection.close()


def _pod_objects(excluded: set[int]) -> int:
    """Pod objects (JSON objects with metadata, spec and status) alive in this
    process, but those whose ids are ``excluded``."""
    return sum(
        1
        for o in gc.get_objects()
        if type(o) is dict
        and "metadata" in o
        and "spec" in o
        and "status" in o
        and id(o) not in excluded
    )


def test_a_relist_holds_one_page_of_pods_not_the_whole_list(api: FakeKubeAPI, monkeypatch) -> None:
    """A batch node keeps every finished Job pod without a TTL in the API. Parsed whole,
    a list of 6,000 of them took the exporter past the DaemonSet's 384Mi memory limit
    (OOMKilled at start and at every 5-minute relist; 659 MB at 10,700 pods, within
    MAX_LIST_BYTES): the pod objects of the answer are what costs. Read a page at a
    time, while each page is parsed the pod objects alive are that page's, not the
    list's: counted at each parse (the fake serves its stored pods, which are not
    counted, and leaves no copy behind)."""
    page = kube_module.LIST_PAGE_PODS
    _finished_job_pods(api, 3 * page)
    src = KubePodSource(NODE, api_url=api.url, max_pods=10_000, job_deadlines=False)
    src._api = src._make_api()
    stored = {id(pod) for pod in api._pods.values()}
    alive_at_parse: list[int] = []
    parse = kube_module._listed

    def counted(items: list) -> list:
        alive_at_parse.append(_pod_objects(stored) - before)
        return parse(items)

    monkeypatch.setattr(kube_module, "_listed", counted)
    gc.collect()
    before = _pod_objects(stored)
    src._list()
    assert len(src.poll()) == 3 * page
    # parsed whole: [3 * page]; a page kept after its parse: [page, 2 * page, 3 * page]
    assert alive_at_parse == [page] * 3


def _outside(src: KubePodSource) -> list[str]:
    return [name for _, name, _ in src.finished_outside()]


def test_finished_pods_the_cap_lets_go_are_remembered(monkeypatch) -> None:
    """The kubelet keeps listing a finished pod's allocations until the pod is deleted:
    a finished pod evicted from (or refused by) a full cache is remembered, so that
    attribution still knows it finished, until it is deleted or enters the cache."""
    src = KubePodSource(NODE, api_url="http://127.0.0.1:9", max_pods=2)  # not started
    done0 = make_pod("done0", uid=uid(0), phase="Succeeded", ip=None)
    done1 = make_pod("done1", uid=uid(1), phase="Failed", ip=None)
    run = make_pod("run", uid=uid(2))
    src._replace_listed(_listed([done0, done1, run]))
    assert sorted(names(src)) == ["done0", "run"] and _outside(src) == ["done1"]
    src._apply("ADDED", make_pod("new", uid=uid(3)))  # evicts done0
    assert sorted(names(src)) == ["new", "run"] and _outside(src) == ["done1", "done0"]
    src._apply("ADDED", make_pod("done9", uid=uid(9), phase="Succeeded", ip=None))  # refused
    assert _outside(src) == ["done1", "done0", "done9"]
    assert src.finished_outside()[0] == ("default", "done1", uid(1))
    src._apply("DELETED", done1)
    assert _outside(src) == ["done0", "done9"]
    src._apply("DELETED", make_pod("run", uid=uid(2)))
    src._apply("MODIFIED", done0)  # room again: back in the cache, out of the record
    assert sorted(names(src)) == ["done0", "new"] and _outside(src) == ["done9"]
    # a relist names every pod: those absent were deleted
    src._replace_listed(_listed([done0, make_pod("new", uid=uid(3)), make_pod("x", uid=uid(4))]))
    assert _outside(src) == ["done0"]
    # bounded: the latest ones
    monkeypatch.setattr(kube_module, "MAX_FINISHED_OUTSIDE", 3)
    for n in range(10, 15):
        src._apply("ADDED", make_pod(f"d{n}", uid=uid(n), phase="Succeeded", ip=None))
    assert _outside(src) == ["d12", "d13", "d14"]


def test_a_finished_pod_the_cap_evicted_is_no_phantom_holder() -> None:
    """At --kube.max-pods a running pod takes the slot of the finished pod whose stale
    allocation the kubelet still lists (kubernetes#119423): attribution must still
    drop that allocation, so the running pod is the GPU's sole holder, not a sharer."""
    src = KubePodSource(NODE, api_url="http://127.0.0.1:9", max_pods=2)
    src._replace_listed(
        _listed(
            [
                make_pod("old-job", uid=uid(0), phase="Succeeded", ip=None),
                make_pod("other", uid=uid(1)),
            ]
        )
    )
    src._apply("ADDED", make_pod("new-train", uid=uid(2)))
    gpu = GpuPoll(devices=(DeviceReading(0, U0, "A100", 0.9, 30 << 30, 80 << 30),))
    allocs = [
        Allocation("default", "old-job", "main", "nvidia.com/gpu", U0),
        Allocation("default", "new-train", "main", "nvidia.com/gpu", U0),
    ]
    listed = src.poll()
    rows = attribute(gpu, allocs, listed, None, finished_pods(listed, src.finished_outside()))
    assert [(r.pod, r.utilization_ratio) for r in rows] == [("new-train", 0.9)]


# --- property: any JSON-shaped object is a PodMeta or a PodObjectError -----------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)
pod_like = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {
                "name": st.text(max_size=20),
                "namespace": st.text(max_size=20),
                "uid": st.text(max_size=40),
            },
            optional={
                "labels": json_values,
                "annotations": json_values,
                "ownerReferences": json_values,
            },
        ),
    },
    optional={
        "spec": st.dictionaries(
            st.sampled_from(["hostNetwork", "activeDeadlineSeconds", "nodeName"]), json_values
        ),
        "status": st.dictionaries(
            st.sampled_from(["podIP", "podIPs", "phase", "startTime", "containerStatuses"]),
            json_values,
        ),
    },
)


@given(json_values | pod_like)
@settings(max_examples=200, deadline=None)
def test_pod_meta_from_any_json_is_total(obj) -> None:
    try:
        meta = pod_meta_from_object(obj)
    except PodObjectError:
        return
    assert meta.name and meta.namespace and meta.uid
    assert all(isinstance(v, str) for v in meta.container_ids.values())
    assert meta.deadline_timestamp is None or math.isfinite(meta.deadline_timestamp)


def test_finished_containers_are_not_listed() -> None:
    """A completed init container has no processes and no cgroup; listing its id made
    host memory scan all of /proc for it on every cycle."""
    pod = make_pod("train-x", uid="u-x", containers={"main": "containerd://" + "ab" * 32})
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-data",
            "containerID": "containerd://" + "cd" * 32,
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
        }
    ]
    assert dict(pod_meta_from_object(pod).container_ids) == {"main": "ab" * 32}


@pytest.mark.parametrize(
    "state",
    [
        {"waiting": {"reason": "CrashLoopBackOff"}},
        {"waiting": {"reason": "ContainerCreating"}},
        {},  # the API's default: waiting
    ],
)
def test_only_running_containers_are_listed(state: dict) -> None:
    """A container waiting to start again (CrashLoopBackOff) keeps the dead container's
    id in its status: it has no process and no cgroup either, and listing it made
    host memory scan all of /proc for it on every cycle."""
    pod = make_pod("train-x", uid="u-x", containers={"main": "containerd://" + "ab" * 32})
    dead = "containerd://" + "cd" * 32
    pod["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    pod["status"]["containerStatuses"].append(
        {
            "name": "sidecar",
            "containerID": dead,
            "restartCount": 4,
            "state": state,
            "lastState": {"terminated": {"exitCode": 1, "containerID": dead}},
        }
    )
    meta = pod_meta_from_object(pod)
    assert dict(meta.container_ids) == {"main": "ab" * 32}
    assert meta.containers == ("main", "sidecar")  # still a name progress may give


# --- Job-level deadlines (REVIEW2 item 9) --------------------------------------------

JOB_UID = "99999999-0000-4000-8000-000000000000"  # make_pod's default owner reference
JOB_START = 1795237190.0  # 2026-11-21T04:59:50Z, make_job's startTime
POD_START = 1795237200.0  # 2026-11-21T05:00:00Z, make_pod's startTime


def test_job_owner_and_job_deadline_are_pure() -> None:
    pod = make_pod("train-x", "ml", uid=uid(1))
    assert job_owner(pod) == ("ml", "train", JOB_UID)
    assert job_owner(make_pod("nb", uid=uid(2), owner=("StatefulSet", "nb"))) is None
    assert job_owner(make_pod("bare", uid=uid(3), owner=None)) is None
    not_batch = make_pod("cr", uid=uid(4))
    not_batch["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert job_owner(not_batch) is None
    assert job_deadline_from_object(make_job("train")) == JOB_START + 3600
    assert job_deadline_from_object(make_job("t", active_deadline_seconds=None)) is None
    assert job_deadline_from_object(make_job("t", start_time=None)) is None  # not started
    for junk in (None, [], {"spec": "x"}, make_job("t", active_deadline_seconds=True)):
        assert job_deadline_from_object(junk) is None


def test_a_jobs_active_deadline_becomes_its_pods_deadline(api: FakeKubeAPI, source_factory) -> None:
    api.add_job(make_job("train", "ml", active_deadline_seconds=7200))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    api.add_pod(make_pod("train-b", "ml", uid=uid(2), active_deadline_seconds=600))
    api.add_pod(make_pod("nb", "ml", uid=uid(3), owner=("StatefulSet", "nb")))
    src = source_factory(api.url)
    wait_for(lambda: len(src.poll()) == 3)
    deadlines = {p.name: p.deadline_timestamp for p in src.poll()}
    assert deadlines == {
        "train-a": JOB_START + 7200,
        "train-b": POD_START + 600,  # the pod's own, earlier deadline wins
        "nb": None,
    }
    assert api.job_gets() == 1  # one GET for the two pods of one Job
    # a new pod of the same Job over the watch: served from the cache
    api.add_pod(make_pod("train-c", "ml", uid=uid(4)))
    wait_for(lambda: len(src.poll()) == 4)
    assert {p.name: p.deadline_timestamp for p in src.poll()}["train-c"] == JOB_START + 7200
    assert api.job_gets() == 1


def test_a_running_pods_job_is_read_again_while_the_watch_stays_open(
    api: FakeKubeAPI, source_factory
) -> None:
    """The Job controller writes a Job's status (its ``startTime``, whence the deadline
    counts) after creating its pods: a Job read at its pod's first sight may have no
    deadline yet. Its GET is used for ``job_cache_seconds``; then the Job of each cached
    pod that still runs is read again, on its own thread, so the pod gets its deadline
    with no list sent and with the watch left open (one watch in all, its timeout far
    off). A finished pod's Job is never read."""
    api.add_job(make_job("train", "ml", start_time=None))  # not started yet
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    done = make_pod("done-a", "ml", uid=uid(2), owner=("Job", "done"), phase="Succeeded")
    done["metadata"]["ownerReferences"][0]["uid"] = uid(102)
    api.add_job(make_job("done", "ml", uid=uid(102)))
    api.add_pod(done)
    src = source_factory(api.url, watch_timeout_seconds=120, job_cache_seconds=0.5)
    wait_for(lambda: len(src.poll()) == 2 and src.status().connected)
    assert {p.name: p.deadline_timestamp for p in src.poll()} == {
        "done-a": None,
        "train-a": None,
    }
    api.add_job(make_job("train", "ml"))  # the controller's status write
    wait_for(lambda: src.poll()[1].deadline_timestamp == JOB_START + 3600, timeout_seconds=10)
    assert api.count(watch=False) == 1 and api.count(watch=True) == 1
    assert api.open_watches() == 1
    gets = [path.rsplit("/", 1)[1] for path, _ in api.requests if path.startswith("/apis/")]
    assert gets.count("done") == 0 and gets.count("train") >= 2


def test_pod_events_are_seen_while_jobs_are_read_again(api: FakeKubeAPI, source_factory) -> None:
    """Reading the Jobs of 30 running pods again takes 30 round trips (1.5 s at the 50 ms
    each this fake is told to take; about 4.7 s for 100 pods against it unslowed): a
    pod event sent meanwhile shows at once, not once the last Job is read, and the watch
    stays open through the pass."""
    api.job_delay_seconds = 0.05
    n = 30
    for k in range(n):
        pod = make_pod(f"p{k:02d}", "ml", uid=uid(k), owner=("Job", f"j{k}"))
        pod["metadata"]["ownerReferences"][0]["uid"] = uid(100 + k)
        api.add_pod(pod)
        api.add_job(make_job(f"j{k}", "ml", uid=uid(100 + k)))
    src = source_factory(api.url, watch_timeout_seconds=5, job_cache_seconds=0.5)
    wait_for(lambda: len(src.poll()) == n and src.status().connected)
    # the list read each Job once; a pass reads them all again, 0.5 s after
    wait_for(lambda: api.job_gets() > n + 1, timeout_seconds=30)
    open_during_pass = []
    for _ in range(3):
        open_during_pass.append(api.open_watches())
        time.sleep(0.02)
    api.add_pod(make_pod("late", "ml", uid=uid(99), owner=("StatefulSet", "late")))
    wait_for(lambda: "late" in names(src), timeout_seconds=30)
    gets = api.job_gets() - n
    assert gets < n, f"the pod showed after {gets} of the pass's {n} Job GETs"
    assert max(open_during_pass) == 1


def test_a_pod_that_finishes_during_a_pass_keeps_what_the_watch_gave_it(
    api: FakeKubeAPI, source_factory
) -> None:
    """The re-reads run beside the watch: a pod that finishes while its Job is being
    read again keeps what the watch gave it (its own deadline, here none), not the
    deadline the pass computed for the pod as it was (its Job's)."""
    api.add_job(make_job("train", "ml"))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    api.job_delay_seconds = 1.0
    src = source_factory(api.url, watch_timeout_seconds=120, job_cache_seconds=1.5)
    wait_for(lambda: src.status().connected)
    assert src.poll()[0].deadline_timestamp == JOB_START + 3600
    wait_for(lambda: api.job_gets() == 2, timeout_seconds=30)  # the pass's GET: 1 s
    done = make_pod("train-a", "ml", uid=uid(1), phase="Succeeded", exit_codes={"main": 0})
    api.update_pod(done)
    wait_for(lambda: src.poll()[0].phase == "Succeeded", timeout_seconds=0.5)
    time.sleep(1.5)  # the pass's GET answered, its result folded in
    assert src.poll()[0].deadline_timestamp is None


def test_a_finished_pods_job_is_never_read(api: FakeKubeAPI, source_factory) -> None:
    """A batch node keeps its finished Job pods (no TTL), each of its own Job, and a
    finished pod is forecast no run: its Job's deadline changes nothing published
    that anyone reads. No list, relist or event of a finished pod GETs its Job (5
    finished pods and 1 running one: 1 GET a list, not 6); a finished pod's deadline
    is its own (here none), a running one's its Job's."""
    api.add_job(make_job("train", "ml"))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    for k in range(5):
        pod = make_pod(
            f"done-{k}", "ml", uid=uid(10 + k), owner=("Job", f"done-{k}"), phase="Succeeded"
        )
        pod["metadata"]["ownerReferences"][0]["uid"] = uid(110 + k)
        api.add_pod(pod)
        api.add_job(make_job(f"done-{k}", "ml", uid=uid(110 + k)))
    src = source_factory(api.url, job_cache_seconds=0.2)
    wait_for(lambda: len(src.poll()) == 6 and src.status().connected)
    assert api.job_gets() == 1
    time.sleep(0.3)  # every GET older than job_cache_seconds: a list would ask again
    lists = api.count(watch=False)
    api.compact()
    api.end_watches()  # rewatch from a compacted version → 410 → relist
    wait_for(lambda: api.count(watch=False) == lists + 1 and src.status().connected)
    finished = make_pod(
        "done-0",
        "ml",
        uid=uid(10),
        owner=("Job", "done-0"),
        phase="Succeeded",
        labels={"seen": "yes"},
    )
    finished["metadata"]["ownerReferences"][0]["uid"] = uid(110)
    api.update_pod(finished)
    wait_for(lambda: src.poll()[0].labels.get("seen") == "yes")
    gets = [path.rsplit("/", 1)[1] for path, _ in api.requests if path.startswith("/apis/")]
    assert [g for g in gets if g.startswith("done-")] == []
    assert gets.count("train") >= 2  # the running pod's Job was read again
    assert {p.name: p.deadline_timestamp for p in src.poll()} == {
        **{f"done-{k}": None for k in range(5)},
        "train-a": JOB_START + 3600,
    }


def test_forbidden_or_missing_jobs_leave_the_pod_deadline_and_log_once(
    api: FakeKubeAPI, source_factory, caplog: pytest.LogCaptureFixture
) -> None:
    api.jobs_forbidden = True
    api.add_pod(make_pod("a", "ml", uid=uid(1), active_deadline_seconds=600))
    for n, job in ((2, "j2"), (3, "j3")):
        pod = make_pod(f"p{n}", "ml", uid=uid(n), owner=("Job", job))
        pod["metadata"]["ownerReferences"][0]["uid"] = uid(100 + n)
        api.add_pod(pod)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        src = source_factory(api.url)
        wait_for(lambda: len(src.poll()) == 3)
    assert {p.name: p.deadline_timestamp for p in src.poll()} == {
        "a": POD_START + 600,
        "p2": None,
        "p3": None,
    }
    warnings = [r.getMessage() for r in caplog.records if "cannot read Job" in r.getMessage()]
    assert len(warnings) == 1 and "HTTP 403" in warnings[0] and "gpu-eta.io/deadline" in warnings[0]
    assert src.status().last_error == ""  # the pod watch itself never failed


@pytest.mark.parametrize("status", [403, 429, 500, 503])
def test_a_refused_job_read_keeps_the_deadline_last_read(
    api: FakeKubeAPI, source_factory, caplog: pytest.LogCaptureFixture, status: int
) -> None:
    """One refused answer to a re-read of a running pod's Job (an RBAC rule removed, a
    throttled or overloaded API server) leaves the pod the deadline last read, not
    none for ``job_cache_seconds``; the warning names the status and asks for the
    ``get`` on ``jobs.batch`` only when that is what is missing (403)."""
    api.add_job(make_job("train", "ml"))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    src = source_factory(api.url, job_cache_seconds=0.5)
    wait_for(lambda: src.status().connected and len(src.poll()) == 1)
    assert src.poll()[0].deadline_timestamp == JOB_START + 3600
    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        gets = api.job_gets()
        api.job_failures.append(status)
        wait_for(lambda: api.job_gets() > gets, timeout_seconds=10)  # the refused GET
        seen = set()
        for _ in range(30):  # 1.5 s: the refusal folded in, more than job_cache_seconds
            seen.add(src.poll()[0].deadline_timestamp)
            time.sleep(0.05)
    assert seen == {JOB_START + 3600}
    warning = next(r.getMessage() for r in caplog.records if "cannot read Job" in r.getMessage())
    assert f"HTTP {status}" in warning
    assert ("jobs.batch" in warning) == (status == 403)


def test_a_failed_job_read_is_asked_again_soon_not_after_job_cache_seconds(
    api: FakeKubeAPI, source_factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Job GET that failed is asked again after ``JOB_RETRY_SECONDS`` (60 s; 0.5 s
    here), not after a whole ``job_cache_seconds`` (here 60 s): one 503 at a pod's first
    sight must not leave it without its Job's deadline for five minutes."""
    monkeypatch.setattr(kube_module, "JOB_RETRY_SECONDS", 0.5)
    api.add_job(make_job("train", "ml"))
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    api.job_failures.append(503)
    src = source_factory(api.url, job_cache_seconds=60)
    wait_for(lambda: src.status().connected and len(src.poll()) == 1)
    assert src.poll()[0].deadline_timestamp is None  # its one GET was refused
    wait_for(lambda: src.poll()[0].deadline_timestamp == JOB_START + 3600, timeout_seconds=10)
    assert api.job_gets() == 2


def test_a_deleted_job_is_nothing_to_resolve_not_a_permission_to_grant(
    api: FakeKubeAPI, source_factory, caplog: pytest.LogCaptureFixture
) -> None:
    """A finished Job deleted while its pod is still listed (a TTL controller, a user's
    ``kubectl delete job``): the API answers 404 and the pod has no Job deadline. The
    client raises that 404 as it raises a 403: read as one, it logged a warning asking
    the admin to grant ``get`` on ``jobs.batch``, which the exporter has."""
    pod = make_pod("p", "ml", uid=uid(1), owner=("Job", "gone"))
    pod["metadata"]["ownerReferences"][0]["uid"] = uid(101)
    api.add_pod(pod)
    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        src = source_factory(api.url)
        wait_for(lambda: len(src.poll()) == 1)
    assert src.poll()[0].deadline_timestamp is None and api.job_gets() == 1
    assert not [r for r in caplog.records if "cannot read Job" in r.getMessage()]


def test_a_job_recreated_under_the_same_name_is_not_this_pods(
    api: FakeKubeAPI, source_factory
) -> None:
    api.add_job(make_job("train", "ml", uid=uid(77)))  # same name, another uid
    api.add_pod(make_pod("train-a", "ml", uid=uid(1)))
    src = source_factory(api.url)
    wait_for(lambda: len(src.poll()) == 1)
    assert src.poll()[0].deadline_timestamp is None


def test_an_unreachable_jobs_api_is_not_asked_once_per_job(caplog) -> None:
    class Unreachable:
        calls = 0

        def read_namespaced_job(self, name: str, namespace: str, **kw) -> None:
            Unreachable.calls += 1
            raise ConnectionRefusedError("connection refused")

    src = KubePodSource(NODE, api_url="http://127.0.0.1:9")  # not started: no thread
    src._batch = Unreachable()
    pods = [make_pod(f"p{n}", "ml", uid=uid(n), owner=("Job", f"j{n}")) for n in range(5)]
    with caplog.at_level(logging.WARNING, logger="gpu_eta.exporter.collectors.kube"):
        metas = [src._with_job_deadline(pod_meta_from_object(p), job_owner(p), set()) for p in pods]
    assert [m.deadline_timestamp for m in metas] == [None] * 5
    assert Unreachable.calls == 1  # then paused: a relist does not wait 5 timeouts
    assert sum("cannot read Job" in r.getMessage() for r in caplog.records) == 1


def test_the_documented_signature_has_the_codes_defaults() -> None:
    """docs/attribution.md shows ``KubePodSource``'s defaults: the ones it has."""
    assert documented_defaults("attribution.md", "KubePodSource") == code_defaults(KubePodSource)


def test_kube_max_pods_flag_reaches_the_source(api: FakeKubeAPI) -> None:
    cfg = config_from_mapping(
        {"node-name": "node-a", "kube.api-url": api.url, "kube.max-pods": "7"}
    )
    ctx = BuildContext(cfg=cfg, node="node-a")
    src = kube_build(ctx)
    try:
        assert src.max_pods == 7
    finally:
        for close in ctx.closers:
            close()
