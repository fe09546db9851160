"""Reports and log lines as real training emits them, sent from the pod's own address."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_eta.exporter.logformats import last_segment, parse_line
from gpu_eta.exporter.progress import parse_report
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.launch.prometheus import free_port
from gpu_eta.simulation import driver as driver_module
from gpu_eta.simulation.cluster import ClusterConfig, ClusterSim, Event
from gpu_eta.simulation.driver import (
    Driver,
    LogWriter,
    ProgressSender,
    cri_line,
    keras_lines,
    report_body,
    steps_per_epoch,
    tqdm_lines,
)
from gpu_eta.simulation.epochs import FAMILIES, JobMix
from gpu_eta.simulation.scenarios import node_scenario

ANCHOR = 1_763_700_000.0
# the U-Net trained to a quality target: its HTTP pods report no planned total
UNET_TO_TARGET = JobMix(
    families=tuple(replace(f, reports_plan=f.job_name != "unet-seg") for f in FAMILIES)
)


@contextmanager
def _progress_endpoint(respond: Callable[[str, bytes], int | tuple[int, str]]) -> Iterator[int]:
    """A real HTTP server on a free port standing in for the exporter's progress port:
    each POST's (client address, body) goes to ``respond``, whose status is answered
    (with a ``Retry-After`` when it returns (status, seconds))."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            answer = respond(self.client_address[0], body)
            status, wait = answer if isinstance(answer, tuple) else (answer, None)
            self.send_response(status)
            if wait is not None:
                self.send_header("Retry-After", wait)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    port = free_port()
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        server.shutdown()
        server.server_close()


def _events(seed: int = 0, until: float = 900) -> list[Event]:
    sim = ClusterSim(ClusterConfig(seed=seed))
    return sim.advance(until)


def test_report_bodies_pass_the_exporters_validator() -> None:
    events = [
        e for e in _events() if e.kind in ("run_start", "epoch_end") and e.pod.report == "http"
    ]
    assert events
    for e in events:
        report = parse_report(json.dumps(report_body(e.pod, e, ANCHOR)), now=ANCHOR + e.t + 1)
        assert report.run_id == e.pod.run_id
        assert report.epochs == (e.pod.epochs if e.pod.reports_plan else None)
        assert report.epoch == (0 if e.kind == "run_start" else e.epoch)
        assert report.event == (
            "start" if e.kind == "run_start" else "end" if e.epoch == e.pod.epochs else "progress"
        )


def test_a_run_without_a_plan_reports_none_and_ends_at_its_last_epoch() -> None:
    """A pod of a family trained to a target sends no epochs or steps, and its last
    report is an end; folded in as the exporter's listener does, that end makes what
    it reached its totals, so the run is stored completed (docs/progress.md)."""
    sim = ClusterSim(ClusterConfig(seed=0, mix=UNET_TO_TARGET))
    events = sim.advance(3000)
    pod = next(p for p in sim.pods if not p.reports_plan and p.completed)
    assert pod.report == "http" and pod.job_name == "unet-seg"
    mine = [e for e in events if e.pod is pod and e.kind in ("run_start", "epoch_end")]
    assert [e.epoch for e in mine] == list(range(pod.epochs + 1))
    bodies = [report_body(pod, e, ANCHOR) for e in mine]
    assert all("epochs" not in b and "steps" not in b for b in bodies)
    assert [b["event"] for b in bodies] == ["start"] + ["progress"] * (pod.epochs - 1) + ["end"]
    assert all(b["batch_size"] == pod.batch_size and b["run_id"] == pod.run_id for b in bodies)
    store = ProgressStore()
    for e, body in zip(mine, bodies, strict=True):
        now = ANCHOR + e.t
        report = parse_report(json.dumps(body), now=now)
        got = store.merge(pod.namespace, pod.name, "trainer", "http", report, now=now)
        if e.epoch < pod.epochs:
            assert got.epochs is None and got.steps is None
    # it reports steps: its steps are its total (exporter.progress._reached_totals)
    assert (got.epoch, got.epochs) == (pod.epochs, None)
    assert got.steps == got.step == pod.epochs * steps_per_epoch(pod)
    # a pod of a family with a plan states it in every report
    other = next(e for e in events if e.pod.report == "http" and e.pod.reports_plan)
    assert report_body(other.pod, other, ANCHOR)["epochs"] == other.pod.epochs


def test_log_lines_parse_as_the_epochs_they_stand_for() -> None:
    events = [e for e in _events(until=1500) if e.kind in ("run_start", "epoch_end")]
    formats = set()
    for e in events:
        for fmt, lines in (("keras", keras_lines(e.pod, e)), ("tqdm", tqdm_lines(e.pod, e))):
            matches = [parse_line(last_segment(line)) for line in lines]
            assert all(m is not None for m in matches), lines
            if e.kind == "epoch_end":
                done = [m.epoch_done for m in matches if m.epoch_done is not None or m.complete]
                if fmt == "tqdm":
                    assert matches[0].epoch_done == e.epoch and matches[0].epochs == e.pod.epochs
                else:
                    assert matches[0].complete and matches[0].bar_total == matches[0].bar
                    if e.epoch < e.pod.epochs:
                        assert matches[1].epoch_current == e.epoch + 1
                assert done is not None
            formats.add(fmt)
    assert formats == {"keras", "tqdm"}


def test_cri_line_format() -> None:
    line = cri_line(1_700_000_000.25, "Epoch 1/3")
    assert re.fullmatch(r"2023-11-14T22:13:20\.250000000Z stdout F Epoch 1/3\n", line)


def test_log_writer_uses_the_kubelet_layout(tmp_path: Path) -> None:
    event = next(e for e in _events() if e.kind == "run_start")
    writer = LogWriter(tmp_path)
    writer.write(event.pod, keras_lines(event.pod, event), ANCHOR)
    pod = event.pod
    path = tmp_path / f"{pod.namespace}_{pod.name}_{pod.uid}" / pod.container / "0.log"
    assert path.read_text().endswith(f"stdout F Epoch 1/{pod.epochs}\n")


def test_sender_posts_from_the_pods_own_address() -> None:
    seen: list[tuple[str, bytes]] = []

    def respond(client_ip: str, body: bytes) -> int:
        seen.append((client_ip, body))
        return 200

    with _progress_endpoint(respond) as port:
        event = next(e for e in _events() if e.kind == "run_start" and e.pod.node == 1)
        sender = ProgressSender({1: port})
        assert sender.post(event.pod, {"epoch": 0}) == 200
        assert seen == [(event.pod.ip, b'{"epoch": 0}')]
        assert event.pod.ip.startswith("127.0.2.")
        sender.progress_ports[1] = free_port()  # nobody listens: 0, counted, no exception
        assert sender.post(event.pod, {"epoch": 0}) == 0
        assert sender.counts == {"200": 1, "0": 1}


def _driver_on(port: int, tmp_path: Path, **kwargs: Any) -> tuple[ClusterSim, Driver]:
    """A one-node simulation and its driver (``Driver`` options ``kwargs``), posting to
    ``port``."""
    config = ClusterConfig(seed=0, nodes=1, log_share=0.0, notebooks_at_start=0)
    sim = ClusterSim(config)
    paths = {0: tmp_path / "node.yaml"}
    sender = ProgressSender({0: port})
    return sim, Driver(sim, ANCHOR, paths, sender, LogWriter(tmp_path / "logs"), **kwargs)


def test_driver_retries_a_report_the_exporter_refused_until_it_knows_the_pod(
    tmp_path: Path,
) -> None:
    """Right after a pod appears the exporter may not have reloaded its scenario: 403, retry."""
    statuses = [403, 403, 200]
    seen: list[str] = []

    def respond(client_ip: str, body: bytes) -> int:
        seen.append(client_ip)
        return statuses.pop(0) if statuses else 200

    with _progress_endpoint(respond) as port:
        sim, driver = _driver_on(port, tmp_path)
        first_run = None
        t = 0.0
        while first_run is None and t < 600:
            t += 1.0
            driver.tick(ANCHOR + t)
            first_run = next(
                (p for p in sim.pods if p.run_start is not None and p.run_start <= t), None
            )
        assert first_run is not None
        assert len(seen) == 1 and driver.stats.reports_sent == 0  # refused once, kept for retry
        driver.tick(ANCHOR + t + 1)
        driver.tick(ANCHOR + t + 2)
        assert driver.stats.reports_sent >= 1 and driver.stats.reports_failed == 0
        assert set(seen) == {first_run.ip}
        assert driver.scenario_paths[0].exists()


def test_driver_retries_a_429_not_before_its_retry_after(tmp_path: Path) -> None:
    """A 429 (or 503) with ``Retry-After: 3`` is retried 3 s later, not at each tick;
    one asking longer than the retries last (15 s) is a failure at once."""
    answers: list[int | tuple[int, str]] = [(429, "3"), 200, (429, "60")]
    seen: list[tuple[float, bytes]] = []

    def respond(client_ip: str, body: bytes) -> int | tuple[int, str]:
        seen.append((clock, body))
        return answers.pop(0) if answers else 200

    with _progress_endpoint(respond) as port:
        _sim, driver = _driver_on(port, tmp_path)
        clock = 0.0
        while not seen and clock < 600:
            clock += 1.0
            driver.tick(ANCHOR + clock)
        first, refused = seen[0]
        for _ in range(5):
            clock += 1.0
            driver.tick(ANCHOR + clock)
        assert [t for t, body in seen if body == refused] == [first, first + 3]
        assert driver.stats.reports_sent >= 1 and driver.stats.reports_failed == 0
        while len(seen) < 3 and clock < 1200:
            clock += 1.0
            driver.tick(ANCHOR + clock)
        assert driver.stats.reports_failed == 1  # the third post, at once


def test_a_pods_later_report_waits_behind_its_refused_one(tmp_path: Path) -> None:
    """A pod's report refused 429 ``Retry-After: 4`` while its next report comes due
    (an epoch ending a second later): the next one waits for the retry, so the
    exporter sees the pod's reports in order, its progress never going back."""
    answers: list[int | tuple[int, str]] = [(429, "4")]
    seen: list[tuple[float, str, bytes]] = []

    def respond(client_ip: str, body: bytes) -> int | tuple[int, str]:
        seen.append((clock, client_ip, body))
        return answers.pop(0) if answers else 200

    with _progress_endpoint(respond) as port:
        _sim, driver = _driver_on(port, tmp_path)
        clock = 0.0
        while not seen and clock < 600:
            clock += 1.0
            driver.tick(ANCHOR + clock)
        refused_at, ip, _body = seen[0]
        (_first, event, _status, _not_before), *_ = driver._retry
        assert event.kind == "run_start" and event.pod.ip == ip
        # the pod's first epoch, due a second after its refused start
        driver.queue([Event(clock + 1.0 - 0.5, "epoch_end", event.pod, 1)])
        for _ in range(6):
            clock += 1.0
            driver.tick(ANCHOR + clock)
    mine = [(t, json.loads(body)) for t, client, body in seen if client == ip]
    assert [(b["event"], b["epoch"]) for _t, b in mine] == [
        ("start", 0),
        ("start", 0),
        ("progress", 1),
    ]
    assert [t for t, _b in mine] == [refused_at, refused_at + 4, refused_at + 4]
    assert driver.stats.reports_sent == 2 and driver.stats.reports_failed == 0
    assert driver.stats.epochs == 1  # counted once, when it came due


def test_a_report_whose_pod_ended_before_the_driver_ran_is_skipped_not_failed(
    tmp_path: Path,
) -> None:
    """The demo's first seconds: the clock runs from the anchor, but the driver first
    ticks later. A real pod sent those reports while it ran; the exporter rightly refuses
    a report from a pod that is gone, so the driver does not send it and says so."""
    seen: list[str] = []
    late = 3600.0

    def respond(client_ip: str, body: bytes) -> int:
        """As the exporter: a report from an address no live pod holds is refused."""
        seen.append(client_ip)
        alive = {p.ip for p in sim.pods if p.alive_at(late)}
        return 200 if client_ip in alive else 403

    with _progress_endpoint(respond) as port:
        sim, driver = _driver_on(port, tmp_path)
        driver.tick(ANCHOR + late)  # the first tick, an hour after the anchor
        ended = [p for p in sim.pods if p.kind == "training" and p.end is not None]
        assert any(p.end <= late for p in ended), "the first hour ends some training pods"
        assert driver.stats.reports_skipped > 0
        assert driver.stats.reports_failed == 0
        assert driver.stats.reports_sent == len(seen)  # every report sent was accepted


def test_a_report_refused_while_the_pod_lived_fails_once_the_pod_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A live pod's report the exporter keeps refusing is a real failure, still counted
    when the retries outlast the pod. Many pods report their last epoch 5 s before they
    end, inside the 15 s of retries; ticking every second, every report is first tried
    while its pod lives, so none may count as not sent."""
    with _progress_endpoint(lambda _ip, _body: 403) as port:
        sim, driver = _driver_on(port, tmp_path)
        for t in range(1, 301):
            driver.tick(ANCHOR + t)
        assert any(p.end is not None and p.end < 300 for p in sim.pods if p.kind == "training")
        assert driver.stats.reports_failed > 0
        assert driver.stats.reports_sent == 0
        assert driver.stats.reports_skipped == 0
        assert "refused (HTTP 403) while the pod ran, and the pod is gone" in caplog.text


@pytest.mark.parametrize(
    ("last_tick", "what"),
    [(130.2, "answered after its pod ended"), (130.0, "sent after its pod ended")],
)
def test_a_report_the_driver_comes_to_too_late_for_its_pod_is_skipped_not_failed(
    tmp_path: Path, last_tick: float, what: str
) -> None:
    """A loaded machine (CI's, 5 test workers on 2 cores): the driver stalls, then its
    tick's POSTs take seconds each, so a report due while its pod lived is sent, or
    answered, only after the pod ended. The exporter rightly refuses a pod that is gone
    when it looks; a real pod sends its report while it runs (here 5 s before it ends),
    so that is the driver's lateness (skipped), not a live pod refused (failed).

    Time is a number the test moves (the driver's ``monotonic`` too). Seed 0's
    bert-finetune-ll8sd reports its last epoch at 130.36 s and ends at 135.36 s. The
    driver ticks each second to ``last_tick``, stalls to 134.5 s, and in that tick
    each POST takes 1.5 s, the stand-in exporter deciding at its end. After a tick at
    130.2 s the pod's report is the stalled tick's first (sent at 134.5 s, answered at
    136.0 s); after one at 130.0 s unet-seg-dzmpw's (due at 130.12 s) goes first, and
    the pod's would go out at 136.0 s."""
    wall = [ANCHOR]
    latency = [0.0]
    posts: list[tuple[str, float, float]] = []  # (address, sent, answered)

    def alive(ip: str, t: float) -> bool:
        return any(p.ip == ip and p.alive_at(t - ANCHOR) for p in sim.pods)

    def respond(client_ip: str, body: bytes) -> int:
        sent = wall[0]
        wall[0] += latency[0]
        posts.append((client_ip, sent, wall[0]))
        return 200 if alive(client_ip, wall[0]) else 403

    def tick(t: float) -> None:
        wall[0] = max(wall[0], ANCHOR + t)
        driver.tick(wall[0])

    with _progress_endpoint(respond) as port:
        sim, driver = _driver_on(port, tmp_path, monotonic=lambda: wall[0])
        for t in [*range(1, 131), last_tick]:
            tick(t)
        (pod,) = [p for p in sim.pods if p.name == "bert-finetune-ll8sd"]
        assert pod.end is not None and last_tick < pod.epoch_ends[-1] < pod.end - 1 < 134.5
        latency[0] = 1.5
        tick(134.5)
        latency[0] = 0.0
        for t in range(135, 160):
            tick(t)
    late = [
        (sent, answered) for ip, sent, answered in posts if ip == pod.ip and sent > ANCHOR + 134
    ]
    if what == "answered after its pod ended":
        assert late == [(ANCHOR + 134.5, ANCHOR + 136.0)]
    else:  # never sent: the pod had ended when the driver came to it
        assert late == []
        (first,) = [ip for ip, sent, _a in posts if sent == ANCHOR + 134.5]
        assert first != pod.ip  # another pod's report went first, and took 1.5 s
    assert driver.stats.reports_failed == 0
    assert driver.stats.reports_skipped == 1


def test_a_tick_renders_only_the_scenarios_that_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rendering a node's scenario as YAML is nearly all of a tick (~60 ms for seed 22's
    3 nodes, seconds on a loaded machine, which made the driver late: the test above),
    and a node's scenario is the same as at the previous tick at 95 % of ticks. A tick
    renders and writes only those that changed, each file holding its node's scenario
    of the moment as before."""
    rendered: list[str] = []
    real_write = driver_module.write_scenario

    def counting_write(path: Path, scenario: dict[str, Any]) -> bool:
        """The driver's only way to a scenario file, which renders it each call."""
        rendered.append(scenario["node"])
        return real_write(path, scenario)

    # the driver's own name for it: nothing else in the process renders through it
    monkeypatch.setattr(driver_module, "write_scenario", counting_write)
    config = ClusterConfig(seed=22, notebooks_at_start=0)
    sim = ClusterSim(config)
    paths = {n.index: tmp_path / f"{n.name}.yaml" for n in sim.nodes}
    sender = ProgressSender({n.index: free_port() for n in sim.nodes})
    driver = Driver(sim, ANCHOR, paths, sender, LogWriter(tmp_path / "logs"), seed=22)
    monkeypatch.setattr(driver, "_fire", lambda *args: None)  # reports: not this test's
    ticks = 200
    for t in range(1, ticks + 1):
        driver.tick(ANCHOR + t * 0.5)
        rel = t * 0.5
        pods = list(sim.alive(rel - 15))
        for node in sim.nodes:  # each file holds the node's scenario now
            want = node_scenario(node, pods, ANCHOR, rel, 22)
            assert yaml.safe_load(paths[node.index].read_text()) == want
    assert len(sim.nodes) <= len(rendered) < len(sim.nodes) * ticks / 4
