"""Turns the simulation's events into what real training pods would do.

- Scenario files: rewritten (atomically) whenever a node's pods change, a few
  seconds ahead of time, so the exporter knows a pod before it reports.
- HTTP pods: ``POST /progress`` to their node's exporter **from the pod's own
  loopback address** (the socket is bound to the pod IP), the same wire format as
  ``gpu_eta_report`` sends (docs/progress.md). The exporter identifies the sender by
  that address, exactly as on a real node.
- Log pods: Keras-style lines (``Epoch 3/15`` and the end-of-epoch step bar) in CRI
  format under ``<root>/<ns>_<pod>_<uid>/<container>/0.log``, which the exporter's
  log collector follows.

Body and line construction are pure functions (tested on their own); the I/O is in
``ProgressSender``, ``LogWriter`` and ``Driver.tick``.
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gpu_eta.common.retry_after import parse_retry_after
from gpu_eta.exporter.progress import Report, derived_run_id, parse_report
from gpu_eta.exporter.progress_store import ProgressStore
from gpu_eta.simulation.cluster import ClusterSim, Event, Pod
from gpu_eta.simulation.scenarios import node_scenario, write_scenario

log = logging.getLogger("gpu_eta.demo")

SAMPLES_PER_EPOCH = 50_000  # the simulated data set size (steps = samples / batch)
RETRY_SECONDS = 15.0  # a 403 right after a pod appears is retried this long


def loss_at(epoch: int) -> float:
    """A plausible training loss curve (for the free-form ``loss`` value)."""
    return round(2.3 * math.exp(-0.35 * epoch) + 0.12, 4)


def reported_values(pod: Pod, epoch: int) -> dict[str, float]:
    """The free-form values (``gpu_eta_training_value``) a run reports at the end of
    ``epoch``: its loss; a Keras log's line its accuracy too. One definition for the
    reports and log lines the driver makes and for the backfill."""
    if pod.report == "log" and pod.log_format == "keras":
        return {"loss": loss_at(epoch), "accuracy": accuracy_at(epoch)}
    return {"loss": loss_at(epoch)}


def accuracy_at(epoch: int) -> float:
    """The accuracy a Keras log line prints with ``loss_at(epoch)``."""
    return round(1 - loss_at(epoch) / 2.6, 4)


def steps_per_epoch(pod: Pod) -> int:
    """Optimizer steps per epoch for the pod's batch size."""
    return max(1, SAMPLES_PER_EPOCH // max(1, pod.batch_size))


def report_body(pod: Pod, event: Event, anchor: float) -> dict[str, Any]:
    """The JSON a training process posts for ``event`` (docs/progress.md wire format).

    A pod that reports no plan (``Pod.reports_plan``: a loop trained to a quality
    target) sends neither ``epochs`` nor ``steps``; its report at the last epoch is an
    ``end``, as every run's is, so the exporter makes what it reached its totals.
    """
    spe = steps_per_epoch(pod)
    body: dict[str, Any] = {
        "run_id": pod.run_id,
        "run_start": round(anchor + (pod.run_start if pod.run_start is not None else pod.start), 3),
    }
    if pod.reports_plan:
        body.update(epochs=pod.epochs, steps=pod.epochs * spe)
    body.update(batch_size=pod.batch_size, container=pod.container)
    if event.kind == "run_start":
        body.update(event="start", epoch=0, step=0)
    else:
        body.update(epoch=event.epoch, step=event.epoch * spe, **reported_values(pod, event.epoch))
        body["event"] = "end" if event.epoch >= pod.epochs else "progress"
    return body


def log_run_start(pod: Pod, anchor: float) -> float:
    """The run start a log-reporting pod's first line carries (unix seconds, to the ms)."""
    return round(anchor + (pod.run_start if pod.run_start is not None else pod.start), 3)


def log_run_id(pod: Pod, anchor: float) -> str:
    """The ``run_id`` the exporter derives for a log-reporting pod's run.

    Log lines carry no run id: the exporter derives one from the pod and the time of
    the run's first line (``gpu_eta.exporter.progress.derived_run_id``). The warm-up
    backfill labels its series with the same id, so Prometheus sees one run.
    """
    return derived_run_id(pod.namespace, pod.name, pod.container, "log", log_run_start(pod, anchor))


def warm_up_reports(pod: Pod, anchor: float) -> list[tuple[float, Report]]:
    """The reports an HTTP pod still running at the anchor sent during the warm-up.

    Each is ``(unix time it arrived, Report)``: the body the driver would have posted
    (``report_body``), validated by the listener's own ``parse_report``, in order: the
    run's start, then one per epoch ended by the anchor. Empty for pods that report
    otherwise, are gone by the anchor, or have not started training yet.
    """
    if pod.kind != "training" or pod.report != "http" or pod.run_start is None:
        return []
    if pod.run_start > 0 or (pod.end is not None and pod.end <= 0):
        return []
    events = [Event(pod.run_start, "run_start", pod)] + [
        Event(t, "epoch_end", pod, epoch=k) for k, t in enumerate(pod.epoch_ends, 1) if t <= 0
    ]
    reports = []
    for event in events:
        now = anchor + event.t
        body = json.dumps(report_body(pod, event, anchor))
        reports.append((now, parse_report(body, now=now)))
    return reports


def write_progress_state(path: Path, pods: list[Pod], anchor: float) -> int:
    """The exporter's state file (docs/progress.md) as it would be after the warm-up.

    The exporter "has been running" through the warm-up: each HTTP pod's reports so far
    (``warm_up_reports``) go through ``ProgressStore.merge`` with the time they
    arrived, the path real reports take, so run id, run start, epoch, epoch end and
    last report time are what the exporter itself would have saved (and match the
    backfilled series). Written before the exporter starts (``--progress.state-file``),
    so its series are live from the first scrape and Prometheus marks them stale when
    the pod goes. Returns how many pods it holds.
    """
    store = ProgressStore(state_path=path, durable=False)  # written once, before start
    count = 0
    for pod in pods:
        reports = warm_up_reports(pod, anchor)
        for now, report in reports:
            store.merge(pod.namespace, pod.name, pod.container, "http", report, now=now)
        count += bool(reports)
    store.save()
    return count


def cri_line(ts: float, message: str, stream: str = "stdout") -> str:
    """One line as containerd writes it: RFC 3339 nanoseconds, stream, F(ull), text.

    The time is rounded to the millisecond so that the run start the exporter reads
    back is exactly ``log_run_start`` (the derived run id hashes it to the ms).
    """
    ts = round(ts, 3)
    when = datetime.fromtimestamp(ts, timezone.utc)
    nanos = round((ts % 1) * 1e9) % 1_000_000_000
    return f"{when.strftime('%Y-%m-%dT%H:%M:%S')}.{nanos:09d}Z {stream} F {message}\n"


def _epoch_seconds(pod: Pod, k: int) -> float:
    """How long epoch ``k`` (1-based) took: from the previous epoch's end (or the run's
    start) to its own, at least 1 ms so the rates printed in the logs stay finite."""
    ends = pod.epoch_ends
    return max(0.001, ends[k - 1] - (ends[k - 2] if k >= 2 else (pod.run_start or pod.start)))


def keras_lines(pod: Pod, event: Event) -> list[str]:
    """What Keras' ``model.fit(verbose=1)`` prints at this point of the run."""
    spe = steps_per_epoch(pod)
    if event.kind == "run_start":
        return [f"Epoch 1/{pod.epochs}"]
    if event.kind != "epoch_end":
        return []
    k = event.epoch
    took = _epoch_seconds(pod, k)
    lines = [
        f"{spe}/{spe} [==============================] - {max(1, round(took))}s "
        f"{max(1, round(1000 * took / spe))}ms/step - loss: {loss_at(k):.4f}"
        f" - accuracy: {accuracy_at(k):.4f}"
    ]
    if k < pod.epochs:
        lines.append(f"Epoch {k + 1}/{pod.epochs}")
    return lines


def tqdm_lines(pod: Pod, event: Event) -> list[str]:
    """What a PyTorch loop wrapped in ``tqdm(desc=f"Epoch {k}/{n}")`` leaves in the log.

    tqdm redraws with ``\r``; containerd keeps the redraws of one line together,
    and what the log collector needs is the bar's final state, so each epoch's bar
    is written as its start and its end, joined by ``\r`` like the real output.
    """
    spe = steps_per_epoch(pod)
    if event.kind == "run_start":
        return [f"Epoch 1/{pod.epochs}:   0%|          | 0/{spe} [00:00<?, ?it/s]"]
    if event.kind != "epoch_end":
        return []
    k = event.epoch
    took = _epoch_seconds(pod, k)
    mm, ss = divmod(int(took), 60)
    done = (
        f"Epoch {k}/{pod.epochs}:   0%|          | 0/{spe} [00:00<?, ?it/s]\r"
        f"Epoch {k}/{pod.epochs}: 100%|██████████| {spe}/{spe} "
        f"[{mm:02d}:{ss:02d}<00:00, {spe / took:.2f}it/s, loss={loss_at(k):.4f}]"
    )
    return [done]


class ProgressSender:
    """POSTs reports to a node's exporter from a pod's own loopback address."""

    def __init__(self, progress_ports: Mapping[int, int], timeout_seconds: float = 2.0):
        self.progress_ports = dict(progress_ports)
        self.timeout_seconds = timeout_seconds
        self.counts: dict[str, int] = {}
        # the last answer's Retry-After in seconds (a 429 or 503's), None without one
        self.retry_after: float | None = None

    def post(self, pod: Pod, body: Mapping[str, Any]) -> int:
        """Send one report; returns the HTTP status (0 when the exporter is unreachable)
        and keeps the answer's ``Retry-After`` in ``retry_after``."""
        self.retry_after = None
        try:
            status, self.retry_after = _post(
                self.progress_ports[pod.node], pod.ip, body, self.timeout_seconds
            )
        except OSError:
            status = 0
        key = str(status)
        self.counts[key] = self.counts.get(key, 0) + 1
        return status


def post_progress(
    port: int, source_ip: str, body: Mapping[str, Any], timeout_seconds: float = 10.0
) -> int:
    """POST one report to ``127.0.0.1:port/progress`` from ``source_ip`` (a pod's own
    loopback address, as training code in that pod would); returns the HTTP status,
    raises ``OSError`` when the exporter is unreachable."""
    return _post(port, source_ip, body, timeout_seconds)[0]


def _post(
    port: int, source_ip: str, body: Mapping[str, Any], timeout_seconds: float
) -> tuple[int, float | None]:
    """``post_progress``, with the seconds the answer's ``Retry-After`` asks to wait
    (None when absent or unreadable)."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=timeout_seconds, source_address=(source_ip, 0)
    )
    try:
        conn.request(
            "POST", "/progress", body=json.dumps(body), headers={"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        resp.read(4096)
        return resp.status, parse_retry_after(resp.getheader("Retry-After"), time.time())
    finally:
        conn.close()


class LogWriter:
    """Appends CRI lines to ``<root>/<ns>_<pod>_<uid>/<container>/0.log``."""

    def __init__(self, root: Path):
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, pod: Pod) -> Path:
        return self.root / f"{pod.namespace}_{pod.name}_{pod.uid}" / pod.container / "0.log"

    def write(self, pod: Pod, lines: list[str], ts: float) -> None:
        if not lines:
            return
        path = self.path(pod)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.writelines(cri_line(ts, line) for line in lines)


@dataclass
class DriverStats:
    """What the driver did so far (printed at the end of the demo)."""

    reports_sent: int = 0
    reports_failed: int = 0
    # reports whose pod had ended before the driver could send them, or before the
    # exporter's refusal came back: the driver fell behind (the demo's first seconds,
    # before its exporters listen; a loaded machine)
    reports_skipped: int = 0
    log_lines: int = 0
    epochs: int = 0
    finished: int = 0
    cancelled: int = 0


def _posts(event: Event) -> bool:
    """Whether the driver POSTs a report for ``event`` (it may then be retried)."""
    pod = event.pod
    return (
        pod.kind == "training"
        and pod.report not in ("real", "log")
        and event.kind in ("run_start", "epoch_end")
    )


def _described(event: Event) -> str:
    """A progress report as the driver's log lines name it."""
    pod = event.pod
    return f"progress report of {pod.namespace}/{pod.name} ({event.kind}, epoch {event.epoch})"


class Driver:
    """Keeps scenario files, progress reports and log files in step with the wall clock."""

    def __init__(
        self,
        sim: ClusterSim,
        anchor: float,
        scenario_paths: Mapping[int, Path],
        sender: ProgressSender,
        logs: LogWriter,
        lookahead_seconds: float = 5.0,
        seed: int = 0,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        """``monotonic`` measures how long a tick has run (``_clock``): a test gives
        its own to make a slow machine deterministic."""
        self.sim = sim
        self.anchor = anchor
        self.scenario_paths = dict(scenario_paths)
        self.sender = sender
        self.logs = logs
        self.lookahead_seconds = lookahead_seconds
        self.seed = seed
        self.stats = DriverStats()
        self._due: list[Event] = []
        # first try, event, the exporter's last refusal (HTTP status; 0: none yet), and
        # when it may be tried again (its Retry-After; the next tick without one); in
        # the order they came due. A pod's report that comes due while an earlier one
        # waits for its retry waits behind it (due at once, with its refusal), so the
        # pod's reports reach the exporter in order (``tick``).
        self._retry: list[tuple[float, Event, int, float]] = []
        self.lock = threading.RLock()
        self._monotonic = monotonic
        # the running tick's ``now`` and the monotonic clock's reading then (``_clock``)
        self._tick_start = (anchor, monotonic())
        self._written: dict[int, dict[str, Any]] = {}  # node -> its scenario last written

    def write_scenarios(self, rel_now: float) -> None:
        """Rewrite each node's scenario if it changed since this driver last wrote it.

        Why compare the scenarios and not their YAML: rendering them was nearly all of
        a tick (~60 ms for 3 nodes on an idle core, 4 s seen on a loaded one, which
        made reports late), while a node's scenario is the one of the previous tick
        at 95 % of ticks (seed 22). Comparing the data costs well under a millisecond.
        """
        pods = list(self.sim.alive(rel_now - 15))
        for node in self.sim.nodes:
            scenario = node_scenario(node, pods, self.anchor, rel_now, self.seed)
            if self._written.get(node.index) == scenario:
                continue
            write_scenario(self.scenario_paths[node.index], scenario)
            self._written[node.index] = scenario

    def replay(self, past: list[Event]) -> int:
        """Write the log lines of the warm-up (events before t = 0) for pods still alive.

        A log-reporting pod that started before the anchor printed its earlier epochs
        then; the exporter, following the file from its start, reads them with their
        own timestamps (so the same derived run id and epoch ends as the backfill).
        HTTP pods need nothing: their past is in the backfill, and their next report
        carries the same ``run_id`` and ``run_start``. Returns the lines written.
        """
        written = 0
        with self.lock:
            for event in past:
                pod = event.pod
                if pod.kind != "training" or pod.report != "log":
                    continue
                if pod.end is not None and pod.end <= 0:
                    continue
                if event.kind not in ("run_start", "epoch_end"):
                    continue
                lines = (
                    keras_lines(pod, event) if pod.log_format == "keras" else tqdm_lines(pod, event)
                )
                self.logs.write(pod, lines, self.anchor + event.t)
                written += len(lines)
            self.stats.log_lines += written
        return written

    def queue(self, events: list[Event]) -> None:
        """Events the simulation already produced (it ran ahead), to fire when due."""
        with self.lock:
            self._due.extend(events)

    def tick(self, now: float | None = None) -> None:
        """Advance the simulation to now + lookahead, update files, fire due events."""
        with self.lock:
            now = time.time() if now is None else now
            self._tick_start = (now, self._monotonic())
            rel = now - self.anchor
            self._due.extend(self.sim.advance(rel + self.lookahead_seconds))
            self.write_scenarios(rel)
            due = [e for e in self._due if e.t <= rel]
            self._due = [e for e in self._due if e.t > rel]
            for event in due:
                self._count(event)
            retry, self._retry = self._retry, []
            # pods with a report still to be retried, and its refusal: a report held
            # behind one counts as refused with it (a failure, should the pod end)
            waiting: dict[str, int] = {}
            for first, event, refused, not_before in [
                *retry,
                *((now, event, 0, now) for event in due),
            ]:
                pod = event.pod.uid
                if _posts(event) and (pod in waiting or not_before > now):
                    # not yet, or behind the pod's report waiting for its retry
                    refused = refused or waiting.get(pod, 0)
                    self._retry.append((first, event, refused, not_before))
                    waiting.setdefault(pod, refused)
                    continue
                self._fire(event, first, now, refused)
                if self._retry and self._retry[-1][1] is event:  # refused: to retry
                    waiting[pod] = self._retry[-1][2]
            self.sim.forget_before(rel - 120)

    def _clock(self) -> float:
        """The time now, on the running tick's clock: its ``now`` plus how long the tick
        has run. Why not the tick's ``now``: on a loaded machine writing the scenarios
        and POSTing the reports before this one take seconds (4.1 s seen: seed 22's
        stack beside two others and 5 busy processes on 2 cores), and a pod judged
        alive at the tick's start may have ended by the time its report goes out."""
        now, started = self._tick_start
        return now + (self._monotonic() - started)

    def _count(self, event: Event) -> None:
        """Count ``event`` in the stats, once, when it comes due."""
        pod = event.pod
        if pod.kind != "training" or pod.report == "real":
            return
        if event.kind == "epoch_end":
            self.stats.epochs += 1
            self.stats.finished += event.epoch >= pod.epochs
        if event.kind == "pod_end" and pod.cancelled:
            self.stats.cancelled += 1

    def _fire(self, event: Event, first_try: float, now: float, refused: int = 0) -> None:
        """Act on ``event`` (first tried at ``first_try``); ``refused``: the HTTP status
        with which the exporter turned away an earlier try while the pod lived (0: none)."""
        pod = event.pod
        if pod.kind != "training" or pod.report == "real":
            return
        if event.kind not in ("run_start", "epoch_end"):
            return
        if pod.report == "log":
            lines = keras_lines(pod, event) if pod.log_format == "keras" else tqdm_lines(pod, event)
            self.logs.write(pod, lines, self.anchor + event.t)
            self.stats.log_lines += len(lines)
            return
        self._post(event, first_try, now, refused)

    def _post(self, event: Event, first_try: float, now: float, refused: int) -> None:
        """POST ``event``'s report, or retry it, fail it, or skip it.

        A real pod sends its report while it runs, when it is due; the exporter refuses
        one from a pod that is gone when it looks. So the pod is judged alive when the
        report goes out and when its answer comes (``_clock``), not at the tick's
        ``now``: a report the driver comes to after the pod ended is not sent, and one
        refused with the answer after the pod ended may have been refused because it
        had (the exporter looks somewhere between): both are the driver's lateness
        (``reports_skipped``). A refusal answered while the pod still ran is the
        exporter refusing a live pod: retried, and a failure if it lasts.
        """
        pod = event.pod
        sent_at = self._clock()
        if not pod.alive_at(sent_at - self.anchor):
            ended = sent_at - self.anchor - (pod.end or 0.0)
            self._gone(event, refused, f"not sent: the pod ended {ended:.1f}s before")
            return
        status = self.sender.post(pod, report_body(pod, event, self.anchor))
        # a 429 or 503 says when to try again: not before (nor, past the retries, at all)
        wait = (self.sender.retry_after or 0.0) if status in (429, 503) else 0.0
        if status == 200 or status == 202 or status == 204:
            self.stats.reports_sent += 1
        elif status not in (0, 403, 429, 503):
            self._failed(event, f"refused: HTTP {status}")
        elif not pod.alive_at(self._clock() - self.anchor):
            late = sent_at - self.anchor - event.t
            self._gone(
                event,
                refused,
                f"sent {late:.1f}s after it was due, answered (HTTP {status}) once the pod ended",
            )
        elif now + wait - first_try < RETRY_SECONDS:
            # the exporter has not seen the pod yet (or is not listening yet): retry
            self._retry.append((first_try, event, status or refused, now + wait))
        else:
            self._failed(event, f"refused: HTTP {status}")

    def _gone(self, event: Event, refused: int, what: str) -> None:
        """Account for a report whose pod ended before the driver got it to the
        exporter (``what`` says how far it got): a failure when an earlier try was
        refused while the pod ran (``refused``), else skipped: the driver fell behind
        (the demo's first seconds, before its exporters listen; a loaded machine)."""
        if refused:
            self._failed(event, f"refused (HTTP {refused}) while the pod ran, and the pod is gone")
            return
        self.stats.reports_skipped += 1
        log.info("%s %s: the driver fell behind", _described(event), what)

    def _failed(self, event: Event, why: str) -> None:
        """Count and name a report the exporter would not take."""
        self.stats.reports_failed += 1
        log.warning("%s %s", _described(event), why)

    def run(self, stop: threading.Event, interval_seconds: float = 0.5) -> None:
        """Tick until ``stop`` is set (the demo runs this in a thread)."""
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # keep the demo alive; the cause is logged once per tick
                log.exception("demo driver tick failed")
            stop.wait(interval_seconds)
