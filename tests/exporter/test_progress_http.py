"""gpu_eta.exporter.progress_http: the sender is its source address; every refusal is counted.

Real sockets: requests are sent from several loopback source addresses
(127.0.0.x, as the simulated backend gives its pods) to a listener on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
from collections.abc import Callable, Iterator

import pytest

from gpu_eta.exporter import progress_http
from gpu_eta.exporter.collectors import CollectorError
from gpu_eta.exporter.progress_http import HOST_NETWORK_ANNOTATION, ProgressListener
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.exporter.readings import PodMeta, pod_finished
from tests.support.clock import Clock

POD_A = PodMeta(
    "team-a", "trainer-a", "uid-a", ip="127.0.0.2", container_ids={"main": "c1", "sidecar": "c2"}
)
POD_B = PodMeta("team-b", "trainer-b", "uid-b", ip="127.0.0.3", container_ids={"main": "c3"})
NODE_IP = "127.0.0.9"


class Pods:
    """A pod cache as the exporter keeps it (by IP), mutable per test."""

    def __init__(self, *pods: PodMeta):
        self.pods = list(pods)

    def by_ip(self, ip: str) -> PodMeta | None:
        # as the real caches (kube.py, simulated_node.py): hostNetwork pods are not indexed
        return next((p for p in self.pods if p.ip == ip and not p.host_network), None)

    def __call__(self) -> list[PodMeta]:
        return list(self.pods)


@pytest.fixture
def pods() -> Pods:
    return Pods(POD_A, POD_B)


@pytest.fixture
def listener(pods) -> Iterator[ProgressListener]:
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, burst=5, rate_per_second=1
    )
    lst.start()
    try:
        yield lst
    finally:
        lst.stop()


def post(listener: ProgressListener, body: bytes | dict, source: str = "127.0.0.2", headers=None):
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    conn = http.client.HTTPConnection(
        "127.0.0.1", listener.port, timeout=10, source_address=(source, 0)
    )
    try:
        conn.request("POST", "/progress", body=data, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def test_accepted_report_is_stored_under_the_sender_pod(listener):
    status, text = post(
        listener, {"epoch": 2, "epochs": 5, "step": 20, "container": "sidecar", "loss": 0.3}
    )
    assert status == 200 and text.startswith("accepted: team-a/trainer-a") and text.count("\n") == 1
    (p,) = listener.store.snapshot()
    assert (p.namespace, p.pod, p.container, p.source, p.epoch, p.epochs) == (
        "team-a",
        "trainer-a",
        "sidecar",
        "http",
        2,
        5,
    )
    assert p.metrics["loss"] == 0.3
    assert listener.counts()["accepted"] == 1


def test_handle_decides_a_request_without_sockets(pods):
    """The decision is plain code: address, declared length and buffered body in,
    (status, reason) out; the listener need not be started."""
    lst = ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods)
    body = json.dumps({"epoch": 1, "epochs": 4}).encode()
    status, text, retry_after = lst.handle("127.0.0.3", len(body), body)
    assert status == 200 and text.startswith("accepted: team-b/trainer-b") and retry_after is None
    assert lst.store.get("team-b", "trainer-b", "main", "http").epochs == 4
    assert lst.handle("127.0.0.3", 5000, b"")[0] == 413  # by the declared length
    assert lst.handle("127.0.0.3", None, b"")[0] == 411
    assert lst.handle("127.0.0.77", len(body), body)[0] == 403
    assert lst.handle("127.0.0.3", 4, b"{no}")[0] == 400
    counts = lst.counts()
    assert [counts[r] for r in ("accepted", "too_large", "malformed", "forbidden")] == [1, 1, 2, 1]


def test_spoofing_pod_b_from_a_lands_in_a(listener):
    # the body names pod B's container and namespace-ish fields: ignored, address decides
    status, _ = post(
        listener, {"epoch": 1, "container": "main", "pod": 7, "namespace": 1}, source="127.0.0.2"
    )
    assert status == 200
    status, _ = post(listener, {"epoch": 4, "epochs": 9}, source="127.0.0.3")
    assert status == 200
    got = {(p.namespace, p.pod): p.epoch for p in listener.store.snapshot()}
    assert got == {("team-a", "trainer-a"): 1, ("team-b", "trainer-b"): 4}


def test_unknown_container_falls_back_to_the_pods_first(listener):
    post(listener, {"epoch": 1, "container": "not-mine"})
    assert listener.store.snapshot()[0].container == "main"


def test_unknown_address_is_forbidden_and_nothing_stored(listener):
    status, text = post(listener, {"epoch": 1}, source="127.0.0.77")
    assert status == 403 and "127.0.0.77 is not a pod" in text
    assert listener.store.snapshot() == ()
    assert listener.counts()["forbidden"] == 1


def test_oversize_body_is_413(listener):
    status, text = post(listener, b'{"epoch": 1, "pad": "' + b"x" * 5000 + b'"}')
    assert status == 413 and text.startswith("too_large")
    assert listener.counts()["too_large"] == 1


def test_malformed_and_invalid_bodies_are_400_and_keep_stored_progress(listener):
    assert post(listener, {"epoch": 3, "epochs": 10})[0] == 200
    status, text = post(listener, b"{not json")
    assert status == 400 and text.startswith("malformed: not JSON")
    status, text = post(listener, {"epoch": 12, "epochs": 10})
    assert status == 400 and text.strip() == "invalid: epoch 12 > epochs 10"
    status, text = post(listener, {"epoch": -1})
    assert status == 400 and "negative" in text
    (p,) = listener.store.snapshot()
    assert (p.epoch, p.epochs) == (3, 10)
    counts = listener.counts()
    assert (counts["malformed"], counts["invalid"], counts["accepted"]) == (1, 2, 1)


def test_a_late_end_of_a_run_a_later_start_replaced_is_409_and_counted(listener, caplog):
    """A notebook cell ran ``ProgressReporter(run_id="exp")`` again while the old
    reporter's end was still on its way: the new start replaces the run, and the old
    end, arriving after it, is refused in one line and counted; it ended the new run."""
    old_start = round(time.time() - 600, 3)
    new_start = round(time.time() - 1, 3)
    exp = {"run_id": "exp", "epochs": 10}
    assert post(listener, {**exp, "event": "start", "run_start": old_start, "epoch": 0})[0] == 200
    assert post(listener, {**exp, "run_start": old_start, "epoch": 9})[0] == 200
    assert post(listener, {**exp, "event": "start", "run_start": new_start, "epoch": 0})[0] == 200
    status, text = post(listener, {**exp, "event": "end", "run_start": old_start, "epoch": 10})
    assert status == 409 and text.startswith("superseded: run exp") and text.count("\n") == 1
    (p,) = listener.store.snapshot()
    assert (p.run_id, p.run_start_timestamp, p.epoch, p.ended_timestamp) == (
        "exp",
        new_start,
        0,
        None,
    )
    assert (listener.counts()["superseded"], listener.counts()["accepted"]) == (1, 3)
    assert all(r.exc_info is None for r in caplog.records)


def test_a_running_run_goes_on_after_the_clock_is_stepped_back(pods):
    """NTP steps the node's clock back an hour while a named run trains. Its reporter
    took ``run_start`` before the step, so every later report states a start an hour
    ahead of the exporter's clock: they were refused 400 ``run_start is in the future``
    until the clock caught up. They continue the stored run (its ``run_id`` and the
    start its sender stated) and are taken; a start not stored yet is still held to
    the clock, a new run's and a later start of the same ``run_id`` alike."""
    clock = Clock(1_790_000_000.0)
    start = clock.now
    lst = ProgressListener(
        "127.0.0.1",
        0,
        ProgressStore(),
        pods.by_ip,
        pods,
        burst=100,
        rate_per_second=100,
        clock=clock,
    )
    lst.start()
    try:
        run = {"run_id": "job-1", "run_start": start, "epochs": 10}
        assert post(lst, {**run, "event": "start", "epoch": 0})[0] == 200
        clock.now += 600
        assert post(lst, {**run, "epoch": 1})[0] == 200
        clock.now -= 3600  # stepped back an hour
        assert post(lst, {**run, "epoch": 2}) == (200, "accepted: team-a/trainer-a run job-1\n")
        assert post(lst, {**run, "run_start": start + 0.0004, "epoch": 3})[0] == 200  # rounded
        p = lst.store.get("team-a", "trainer-a", "main", "http")
        # taken, but none of the run's times goes back: the epochs reached while the
        # clock is behind are held at its latest report's time (docs/progress.md)
        assert (p.run_id, p.run_start_timestamp, p.epoch, p.held_epoch) == ("job-1", start, 1, 3)
        assert p.held_epoch_timestamp == p.epoch_end_timestamp == start + 600
        other = {"run_id": "job-2", "run_start": start, "epoch": 1}
        assert post(lst, other) == (400, "invalid: run_start is in the future\n")
        later = {**run, "event": "start", "run_start": start + 60, "epoch": 0}
        assert post(lst, later) == (400, "invalid: run_start is in the future\n")
        assert post(lst, {**run, "event": "end", "epoch": 10})[0] == 200
        p = lst.store.get("team-a", "trainer-a", "main", "http")
        assert (p.run_id, p.epoch, p.ended_timestamp) == ("job-1", 10, start + 600)
        assert p.epoch_end_timestamp == start + 600 > p.run_start_timestamp
        assert (lst.counts()["accepted"], lst.counts()["invalid"]) == (5, 2)
    finally:
        lst.stop()


def test_flood_is_rate_limited_per_pod(listener):
    statuses = [post(listener, {"step": i + 1})[0] for i in range(12)]
    assert statuses[:5] == [200] * 5 and 429 in statuses[5:]
    # another pod has its own bucket
    assert post(listener, {"step": 1}, source="127.0.0.3")[0] == 200
    assert listener.counts()["rate_limited"] >= 5


def test_a_rate_limited_report_is_told_when_to_retry(pods):
    """The 429 carries ``Retry-After``: the whole seconds until the pod's bucket has a
    token again (rounded up), the same number its line says. Other answers carry none."""
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, burst=1, rate_per_second=0.1
    )
    lst.start()
    try:
        conn = http.client.HTTPConnection(
            "127.0.0.1", lst.port, timeout=10, source_address=("127.0.0.2", 0)
        )
        answers = []
        for body in (b'{"step": 1}', b'{"step": 2}'):
            conn.request("POST", "/progress", body=body)
            resp = conn.getresponse()
            answers.append((resp.status, resp.getheader("Retry-After"), resp.read().decode()))
        conn.close()
        bad = http.client.HTTPConnection(
            "127.0.0.1", lst.port, timeout=10, source_address=("127.0.0.3", 0)
        )
        bad.request("POST", "/progress", body=b"{no}")
        resp = bad.getresponse()
        invalid = (resp.status, resp.getheader("Retry-After"))
        bad.close()
    finally:
        lst.stop()
    (ok, _, _), (status, retry_after, text) = answers
    assert ok == 200 and answers[0][1] is None and invalid == (400, None)
    # a token every 10 s, the last taken a moment ago: 10 s, rounded up
    assert status == 429 and retry_after == "10"
    assert text.startswith("rate_limited: ") and text.endswith("(next in 10 s)\n")


def test_keep_alive_connection_serves_many_reports(pods):
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, rate_per_second=1000, burst=1000
    )
    lst.start()
    try:
        conn = http.client.HTTPConnection(
            "127.0.0.1", lst.port, timeout=10, source_address=("127.0.0.2", 0)
        )
        for i in range(50):
            conn.request("POST", "/progress", body=json.dumps({"step": i + 1}))
            resp = conn.getresponse()
            assert resp.status == 200
            resp.read()
        conn.close()
        assert lst.store.snapshot()[0].step == 50
    finally:
        lst.stop()


def test_host_network_pods_need_opt_in_annotation_and_uniqueness():
    plain = PodMeta("ns", "hostnet", "u1", ip=NODE_IP, host_network=True)
    annotated = PodMeta(
        "ns",
        "agent",
        "u2",
        ip=NODE_IP,
        host_network=True,
        annotations={HOST_NETWORK_ANNOTATION: "true"},
    )
    pods = Pods(plain, annotated)
    store = ProgressStore()
    off = ProgressListener("127.0.0.1", 0, store, pods.by_ip, pods)
    pod, reason = off.sender(NODE_IP)
    assert pod is None and "not a pod" in reason
    on = ProgressListener("127.0.0.1", 0, store, pods.by_ip, pods, allow_host_network=True)
    pod, _ = on.sender(NODE_IP)
    assert pod is not None and pod.name == "agent"  # the annotated one, never the plain one
    pods.pods.append(
        PodMeta(
            "ns",
            "agent2",
            "u3",
            ip=NODE_IP,
            host_network=True,
            annotations={HOST_NETWORK_ANNOTATION: "true"},
        )
    )
    pod, reason = on.sender(NODE_IP)
    assert pod is None and "need exactly one" in reason


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_annotated_host_network_pod_is_no_candidate(phase):
    """A finished pod stays listed (a Job without ``ttlSecondsAfterFinished``) but runs
    nothing: the one running annotated pod is the sender, not "two candidates"."""
    annotations = {HOST_NETWORK_ANNOTATION: "true"}
    done = PodMeta(
        "hpc", "bench-1", "u1", ip=NODE_IP, host_network=True, annotations=annotations, phase=phase
    )
    running = PodMeta(
        "hpc", "bench-2", "u2", ip=NODE_IP, host_network=True, annotations=annotations
    )
    pods = Pods(done, running)
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, allow_host_network=True
    )
    pod, reason = lst.sender(NODE_IP)
    assert pod is not None and pod.name == "bench-2", reason
    pods.pods.remove(running)  # only the finished one: refused, as no pod at all
    pod, reason = lst.sender(NODE_IP)
    assert pod is None and "not a pod on this node" in reason


def test_wrong_path_and_missing_length(listener):
    conn = http.client.HTTPConnection(
        "127.0.0.1", listener.port, timeout=10, source_address=("127.0.0.2", 0)
    )
    conn.request("POST", "/other", body=b"{}")
    assert conn.getresponse().status == 404
    conn.close()
    conn = http.client.HTTPConnection(
        "127.0.0.1", listener.port, timeout=10, source_address=("127.0.0.2", 0)
    )
    conn.putrequest("POST", "/progress")
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 411
    conn.close()


def test_poll_counts_while_serving_and_fails_when_stopped(pods):
    """The ``progress`` collector's run: counts while the endpoint serves, a
    CollectorError before start and after stop."""
    lst = ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods)
    with pytest.raises(CollectorError, match="not serving"):
        lst.poll()
    lst.start()
    try:
        assert post(lst, {"epoch": 1})[0] == 200
        assert lst.poll()["accepted"] == 1
    finally:
        lst.stop()
    with pytest.raises(CollectorError, match="not serving"):
        lst.poll()


def test_start_binds_before_returning_and_stop_frees_the_port(pods):
    lst = ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods)
    lst.start()
    port = lst.port
    assert post(lst, {"epoch": 1})[0] == 200
    lst.stop()
    lst.stop()  # idempotent
    with pytest.raises(OSError):
        post(lst, {"epoch": 1})
    assert port > 0


def test_one_address_cannot_hold_all_connections(listener):
    import socket

    from gpu_eta.exporter.progress_http import MAX_CONNECTIONS_PER_ADDRESS

    held = []
    try:
        for _ in range(MAX_CONNECTIONS_PER_ADDRESS):
            s = socket.create_connection(
                ("127.0.0.1", listener.port), timeout=10, source_address=("127.0.0.2", 0)
            )
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            held.append(s)
        extra = socket.create_connection(
            ("127.0.0.1", listener.port), timeout=10, source_address=("127.0.0.2", 0)
        )
        try:  # refused: closed (reset) at once, never answered
            extra.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
            assert extra.recv(100) == b""
        except ConnectionResetError:
            pass
        finally:
            extra.close()
        # another pod still gets in
        assert post(listener, {"epoch": 1}, source="127.0.0.3")[0] == 200
    finally:
        for s in held:
            s.close()


def refused_at_accept(port: int, source: str) -> bool:
    """Whether a new connection from ``source`` is closed or reset before any answer."""
    import socket

    s = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    try:
        s.sendall(b"GET /healthz HTTP/1.1\r\n\r\n")
        return s.recv(100) == b""
    except ConnectionResetError:
        return True
    finally:
        s.close()


def test_connections_over_the_caps_are_counted(listener, monkeypatch):
    """A connection over the per-address or the total cap gets no answer (reset at
    accept): it is counted, so the metric shows pods that cannot get in."""
    import socket

    held = []
    try:
        for _ in range(progress_http.MAX_CONNECTIONS_PER_ADDRESS):
            s = socket.create_connection(
                ("127.0.0.1", listener.port), timeout=10, source_address=("127.0.0.2", 0)
            )
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 200")
            held.append(s)
        assert listener.counts()["too_many_connections"] == 0  # admitted: not counted
        assert refused_at_accept(listener.port, "127.0.0.2")  # over the per-address cap
        assert refused_at_accept(listener.port, "127.0.0.2")
        assert listener.counts()["too_many_connections"] == 2
        # over the total cap: another pod, under its own per-address cap
        monkeypatch.setattr(progress_http, "MAX_CONNECTIONS", len(held))
        assert refused_at_accept(listener.port, "127.0.0.3")
        assert listener.counts()["too_many_connections"] == 3
        # under the caps again, the other pod gets in, and nothing more is counted
        monkeypatch.undo()
        assert post(listener, {"epoch": 1}, source="127.0.0.3")[0] == 200
    finally:
        for s in held:
            s.close()
    counts = listener.counts()
    assert (counts["too_many_connections"], counts["forbidden"]) == (3, 0)


def test_pipelined_requests_on_one_connection(listener):
    import socket

    body = b'{"step": 1}'
    req = b"POST /progress HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    s = socket.create_connection(
        ("127.0.0.1", listener.port), timeout=10, source_address=("127.0.0.2", 0)
    )
    try:
        s.sendall(req * 3)
        data = b""
        while data.count(b"HTTP/1.1 200") < 3:
            chunk = s.recv(4096)
            assert chunk
            data += chunk
    finally:
        s.close()
    assert listener.counts()["accepted"] == 3


def test_host_network_opt_in_works_with_the_real_pod_cache(tmp_path):
    """The simulated cache (like kube.py) does not index hostNetwork pods by IP; the
    opt-in must still find the annotated one."""
    from gpu_eta.exporter.simulated_node import SimulatedNode

    scenario = tmp_path / "hostnet.yaml"
    scenario.write_text(
        "version: 1\nnode: n\nstart_timestamp: 0\n"
        "gpus: [{index: 0, uuid: GPU-00000000-0000-0000-0000-000000000000, model: T4,"
        " memory_total: 16GiB}]\n"
        "pods:\n"
        "  - {namespace: ns, name: agent, ip: 127.0.0.9, host_network: true,"
        f" annotations: {{{HOST_NETWORK_ANNOTATION}: 'true'}}, containers: [{{name: main}}]}}\n"
        "  - {namespace: ns, name: trainer, ip: 127.0.0.2, containers: [{name: main}]}\n"
    )
    node = SimulatedNode(scenario, clock=lambda: 10.0)
    pods = node.pods
    assert pods.by_ip(NODE_IP) is None  # what made the opt-in unreachable before
    on = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods.poll, allow_host_network=True
    )
    pod, reason = on.sender(NODE_IP)
    assert pod is not None and pod.name == "agent", reason
    off = ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods.poll)
    assert off.sender(NODE_IP)[0] is None
    assert on.sender("127.0.0.2")[0].name == "trainer"


@pytest.fixture
def refusal_log(caplog, monkeypatch) -> tuple[Clock, Callable[..., list[str]]]:
    """The listener's log lines (``lines(prefix)``) on a hand-set monotonic clock."""
    caplog.set_level("WARNING", logger="gpu_eta.exporter.progress_http")
    clock = Clock(1000.0)
    monkeypatch.setattr(progress_http.time, "monotonic", clock)

    def lines(prefix: str = "progress: ") -> list[str]:
        return [r.getMessage() for r in caplog.records if prefix in r.getMessage()]

    return clock, lines


def test_refusals_are_logged_per_sender_and_reason_once_per_window(
    listener, refusal_log, monkeypatch
):
    """A refused report is logged naming the pod (or the address) and why, once per
    sender and result in ``REFUSAL_LOG_SECONDS``; the sender's text is logged as a
    bounded repr (no line of its own); the memory of what was logged is bounded."""
    clock, lines_with = refusal_log

    def refusals() -> list[str]:
        return lines_with("progress: refused")

    for _ in range(3):
        assert post(listener, {"epoch": -1})[0] == 400
    assert post(listener, b'{"epoch": "x\\n\\u001b[31mforged line"}')[0] == 400
    assert post(listener, {"epoch": 1}, source="127.0.0.77")[0] == 403
    assert post(listener, {"epoch": -1}, source="127.0.0.3")[0] == 400
    lines = refusals()
    assert len(lines) == 3, lines  # one per (sender, result): the 2nd-4th from A repeat it
    assert "team-a/trainer-a (invalid)" in lines[0] and "negative" in lines[0]
    assert "127.0.0.77 (forbidden)" in lines[1] and "not a pod on this node" in lines[1]
    assert "team-b/trainer-b (invalid)" in lines[2]
    assert all("\n" not in line and "\x1b" not in line for line in lines)
    assert listener.counts()["invalid"] == 5  # every refusal counted, logged or not
    clock.now += progress_http.REFUSAL_LOG_SECONDS
    assert post(listener, {"epoch": -1})[0] == 400
    assert len(refusals()) == 4  # the window passed: logged again
    monkeypatch.setattr(progress_http, "MAX_REFUSAL_KEYS", 2)
    bounded = ProgressListener("127.0.0.1", 0, ProgressStore(), lambda _ip: None, lambda: [])
    for i in range(5):
        bounded._refused(f"10.0.0.{i}", "forbidden", 403, "forbidden: x")
    assert len(bounded._refusal_keys) == 2


def test_the_rate_limit_remembers_pods_up_to_its_bound_oldest_forgotten(pods, monkeypatch):
    """The per-pod buckets are bounded (``MAX_RATE_KEYS``) by forgetting the pod that
    reported least recently, not by wiping every pod's bucket at once (which handed a
    flooding pod a fresh burst whenever the map filled)."""
    monkeypatch.setattr(progress_http, "MAX_RATE_KEYS", 2)
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, burst=2, rate_per_second=1e-6
    )
    flood = PodMeta("ml", "flood", "u1")

    def allow(pod: PodMeta) -> bool:
        return lst._over_rate(pod) is None

    assert [allow(flood) for _ in range(3)] == [True, True, False]
    allow(PodMeta("ml", "other", "u2"))  # a second pod fills the map
    assert allow(flood) is False  # still remembered: no fresh burst
    allow(PodMeta("ml", "third", "u3"))  # forgets "other" (least recent), not flood
    assert allow(flood) is False


def test_refusal_lines_have_a_budget_over_all_senders_and_name_the_pod(listener, refusal_log):
    """Many senders cost log lines at a fixed rate (``REFUSAL_LOG_BURST``, then one per
    ``REFUSAL_LOG_REFILL_SECONDS``), the next line saying how many were not logged; a
    pod's refusal at the protocol level (a wrong path) names the pod, not its address."""
    clock, lines = refusal_log

    for i in range(100):
        listener._refused(f"10.1.{i // 250}.{i % 250}", "forbidden", 403, "forbidden: x")
    assert len(lines()) == progress_http.REFUSAL_LOG_BURST
    assert listener.counts()["forbidden"] == 100  # every one counted
    clock.now += progress_http.REFUSAL_LOG_REFILL_SECONDS
    listener._refused("10.2.0.1", "forbidden", 403, "forbidden: x")
    assert "; 80 refusals from addresses not logged before this (log budget)" in lines()[-1]
    # a pod's refusal is never kept from the log by strangers using up the budget
    for i in range(30):
        listener._refused(f"10.3.0.{i}", "forbidden", 403, "forbidden: x")
    listener._refused("team-a/trainer-a", "invalid", 400, "invalid: y", pod=True)
    assert "team-a/trainer-a (invalid)" in lines()[-1]
    # what the budget left unlogged is said on the next poll once a line is allowed,
    # even with no later refusal
    assert not any("not logged (log budget" in line for line in lines())
    clock.now += progress_http.REFUSAL_LOG_REFILL_SECONDS
    listener.poll()
    assert "progress: 30 refusals from addresses that are no pod not logged" in lines()[-1]
    listener.poll()  # said once
    assert sum("that are no pod not logged" in line for line in lines()) == 1

    clock.now += progress_http.REFUSAL_LOG_SECONDS  # the budget full again
    conn = http.client.HTTPConnection(
        "127.0.0.1", listener.port, timeout=10, source_address=("127.0.0.2", 0)
    )
    try:
        conn.request("POST", "/elsewhere", body=b"{}")
        assert conn.getresponse().status == 404
    finally:
        conn.close()
    assert "team-a/trainer-a (not_found)" in lines()[-1]


@pytest.mark.parametrize("rate", [0, -1, float("inf"), float("nan")])
def test_a_rate_that_is_no_rate_is_refused_at_construction(pods, rate):
    with pytest.raises(ValueError, match="rate_per_second must be > 0"):
        ProgressListener("127.0.0.1", 0, ProgressStore(), pods.by_ip, pods, rate_per_second=rate)


def test_the_lookup_cache_forgets_the_oldest_address_not_all(pods, monkeypatch):
    """Past ``MAX_LOOKUPS`` addresses the oldest looked up is forgotten; the pods that
    report are still answered from the cache (a scan used to empty it whole)."""
    monkeypatch.setattr(progress_http, "MAX_LOOKUPS", 3)
    asked: list[str] = []

    def by_ip(ip: str):
        asked.append(ip)
        return pods.by_ip(ip)

    lst = ProgressListener("127.0.0.1", 0, ProgressStore(), by_ip, pods, lookup_ttl_seconds=60)
    for address in ("127.0.0.2", "127.0.0.3", "10.0.0.1", "10.0.0.2"):
        lst.sender(address)
    assert len(lst._lookups) == 3 and "127.0.0.2" not in lst._lookups
    asked.clear()
    assert lst.sender("127.0.0.3")[0] == POD_B and asked == []  # still cached
    lst.sender("127.0.0.2")
    assert asked == ["127.0.0.2"]  # the oldest was the one forgotten


def test_a_refusal_line_never_carries_a_key_of_the_body(listener, refusal_log):
    """Bodies are never logged (docs/progress.md): a key is the sender's text, a token
    pasted as one among them. The 400 answer names it, for the sender to find; the log
    line gives its length only, for a bad name and for a good name with a bad value."""
    _clock, lines_with = refusal_log
    secret = "Bearer-ghp_s3cr3tT0kenABCDEFGH"
    status, text = post(listener, {secret: 1})
    assert status == 400 and secret in text
    status, text = post(listener, {"ghp_s3cr3tT0kenIJKLMN": "x"}, source="127.0.0.3")
    assert status == 400 and "ghp_s3cr3tT0kenIJKLMN must be a number" in text
    lines = lines_with("progress: refused")
    assert len(lines) == 2, lines
    assert f"bad field name ({len(secret)} characters)" in lines[0]
    assert "a name of 21 characters must be a number, got str" in lines[1]
    assert not any("s3cr3t" in line for line in lines)


class CountedPods(tuple):
    """A pod list (immutable, as the exporter's pod caches hand it out) that counts
    how often it is read through."""

    reads = 0

    def __iter__(self):
        CountedPods.reads += 1
        return super().__iter__()


def test_a_pod_list_is_read_through_once_for_many_senders_it_does_not_index():
    """The senders the pod cache has no own-IP pod for (a hostNetwork pod, an
    address of no pod) are looked up in an index of the pod list made once per list
    it hands out, not by reading all of it again for every request."""
    agent = PodMeta(
        "ns",
        "agent",
        "u1",
        ip=NODE_IP,
        host_network=True,
        annotations={HOST_NETWORK_ANNOTATION: "true"},
    )
    others = [PodMeta("ns", f"p{i}", f"v{i}", ip=f"10.0.0.{i}") for i in range(500)]
    pods = CountedPods([agent, *others])
    by_ip = {p.ip: p for p in others}
    lst = ProgressListener(
        "127.0.0.1", 0, ProgressStore(), by_ip.get, lambda: pods, allow_host_network=True
    )
    CountedPods.reads = 0
    for _ in range(100):
        assert lst.sender(NODE_IP) == (agent, "")
        assert lst.sender("10.9.9.9") == (None, "10.9.9.9 is not a pod on this node")
    assert CountedPods.reads == 1
    fewer = CountedPods(others)  # a new list: the agent has gone
    pods = fewer
    assert lst.sender(NODE_IP) == (None, f"{NODE_IP} is not a pod on this node")
    assert CountedPods.reads == 2


def _scanned_sender(pod_by_ip, pods, allow_host_network: bool, address: str):
    """The sender rule read off the whole pod list for each request (the reference
    the listener's index must agree with)."""
    pod = pod_by_ip(address)
    if pod is not None and not pod.host_network:
        return pod, ""
    if pod is None:
        sharing = sum(
            1 for p in pods if p.ip == address and not p.host_network and not pod_finished(p)
        )
        if sharing > 1:
            return None, f"{address} is the address of {sharing} pods on this node"
    if not allow_host_network:
        if pod is None:
            return None, f"{address} is not a pod on this node"
        return None, "hostNetwork pods may not report (exporter option off)"
    on_address = [p for p in pods if p.host_network and p.ip == address and not pod_finished(p)]
    if pod is None and not on_address:
        return None, f"{address} is not a pod on this node"
    candidates = [
        p for p in on_address if p.annotations.get(HOST_NETWORK_ANNOTATION, "").lower() == "true"
    ]
    if len(candidates) != 1:
        return None, (
            f"hostNetwork: {len(candidates)} pods annotated {HOST_NETWORK_ANNOTATION}"
            " on this node (need exactly one)"
        )
    return candidates[0], ""


@pytest.mark.parametrize("allow_host_network", [False, True])
def test_the_index_gives_the_answers_of_reading_the_whole_pod_list(allow_host_network: bool):
    """Every kind of address: a pod's own, one several pods share (the pod cache names
    none), finished pods', hostNetwork pods' (annotated, "True", not, several, finished),
    none; answered as a read of the whole list answers, also after the list changes."""
    import random

    rng = random.Random(7)
    addresses = [f"10.0.0.{i}" for i in range(12)]
    annotations = ({}, {HOST_NETWORK_ANNOTATION: "true"}, {HOST_NETWORK_ANNOTATION: "True"})
    for _round in range(20):
        pods = tuple(
            PodMeta(
                "ns",
                f"p{i}",
                f"u{i}",
                ip=rng.choice([*addresses, None]),
                host_network=rng.random() < 0.4,
                phase=rng.choice(["Running", "Running", "Pending", "Succeeded", "Failed"]),
                annotations=rng.choice(annotations),
            )
            for i in range(rng.randrange(0, 30))
        )
        owners: dict[str, list[PodMeta]] = {}
        for p in pods:
            if p.ip and not p.host_network and not pod_finished(p):
                owners.setdefault(p.ip, []).append(p)
        # as kube._address_owners: an address several pods share names none of them
        by_ip = {ip: ps[0] for ip, ps in owners.items() if len(ps) == 1}
        lst = ProgressListener(
            "127.0.0.1",
            0,
            ProgressStore(),
            by_ip.get,
            lambda p=pods: p,
            allow_host_network=allow_host_network,
        )
        for address in [*addresses, "10.9.9.9"]:
            expected = _scanned_sender(by_ip.get, pods, allow_host_network, address)
            assert lst.sender(address) == expected, (address, pods)


@pytest.mark.parametrize("reset", [False, True], ids=["close", "reset"])
def test_a_refused_client_gone_before_its_answer_logs_no_error(listener, caplog, reset):
    """A client from no pod that connects and goes at once (a port scan, a liveness
    probe on the wrong port, a load balancer's TCP check) is refused at accept, whose
    answer and half-close find the peer gone (``ENOTCONN``): that is no error of the
    exporter's, and must not log asyncio's 10-line traceback per connection."""
    import socket
    import struct

    caplog.set_level(logging.WARNING)
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", listener.port), timeout=10)
        if reset:  # closed with an RST: the peer is gone before the accept is handled
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    assert post(listener, {"epoch": 1})[0] == 200  # every one handled meanwhile
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert errors == [], errors[0].getMessage()


def test_a_sender_without_run_id_going_back_under_one_run_start_gets_a_new_run_id(listener):
    """From one pod, ``{"epoch": 3, "epochs": 5, "run_start": T}`` then ``{"epoch": 1,
    ...}`` with the same T: a new run (the counter went back), under an id of its own,
    so the epoch series of the first run never goes back."""
    start = time.time() - 60
    ids = []
    for epoch in (3, 1):
        status, text = post(listener, {"epoch": epoch, "epochs": 5, "run_start": start})
        assert status == 200
        (p,) = listener.store.snapshot()
        assert text.rstrip().endswith(f"run {p.run_id}") and p.epoch == epoch
        ids.append(p.run_id)
    assert ids[0] != ids[1]
