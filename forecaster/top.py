"""``gpu-eta top``: who holds each GPU, how far their training is, when it frees up.

Reads only Prometheus' HTTP API (any server speaking it: the demo's, a cluster's,
Thanos...), with a fixed set of instant queries per refresh, so it costs the same
whatever the cluster size. It talks to Prometheus through the forecaster's own client
(``forecaster.promapi``) with the forecaster's ``--prometheus.*`` flags, so a
Prometheus behind auth or TLS is reached the same way and every answer is bounded and
checked in one place. The queries' results go through pure functions (``build_view``
→ ``View`` → ``render_plain`` / ``render_json`` / ``render_rich``), which the tests
drive with fixed query results; only ``fetch`` and ``main`` do I/O.

``rich`` draws the tables when stdout is a terminal (and refreshes them in place);
otherwise the output is plain text, one snapshot after the other, so it pipes and
logs well. ``--json`` prints one machine-readable snapshot.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone, tzinfo
from typing import Any

from forecaster.cli import add_prometheus_flags, prometheus_connection
from forecaster.config import ConfigError
from forecaster.promapi import PromAPIError, PromClient, Sample
from forecaster.runs import ExitCode

QUANTILE_KEYS = {"0.1": "p10", "0.5": "p50", "0.9": "p90"}

# Prometheus' duration syntax (model.ParseDuration): units in this order, each once.
_DURATION = re.compile(
    r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$"
)
_DURATION_UNITS = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def parse_duration(text: str) -> float:
    """A Prometheus duration (``5m``, ``1h30m``, ``90s``) in seconds, > 0.

    Checked here rather than by Prometheus, so that ``--idle-window abc`` is a usage
    error (exit 2) instead of a query error; top also needs the seconds for the idle
    holders' age guard. ``ValueError`` with the reason otherwise."""
    m = _DURATION.match(text.strip()) if len(text) <= 32 else None
    if m is None or not any(m.groups()):
        raise ValueError(f"not a Prometheus duration (like 5m, 1h30m, 90s): {text!r}")
    seconds = sum(int(g) * unit for g, unit in zip(m.groups(), _DURATION_UNITS, strict=True) if g)
    if seconds <= 0:
        raise ValueError(f"must be > 0: {text!r}")
    return float(seconds)


def queries(idle_window: str = "5m") -> dict[str, str]:
    """Every PromQL query one refresh issues, by name (a fixed number, ~14)."""
    return {
        "epoch": "gpu_eta_training_epoch",
        "epochs": "gpu_eta_training_epochs_planned",
        "run_start": "gpu_eta_training_run_start_timestamp_seconds",
        "last_report": "gpu_eta_training_last_report_timestamp_seconds",
        "completion": "gpu_eta_job_predicted_completion_timestamp_seconds",
        "method": "gpu_eta_job_forecast_info",
        "stalled": "gpu_eta_job_stalled",
        "allocated": "gpu_eta_pod_gpu_allocated",
        "since": "gpu_eta_pod_gpu_allocated_since_timestamp_seconds",
        "pod_util": "gpu_eta_pod_gpu_utilization_ratio",
        "pod_util_avg": f"avg_over_time(gpu_eta_pod_gpu_utilization_ratio[{idle_window}])",
        "pod_memory": "gpu_eta_pod_gpu_memory_used_bytes",
        "gpu_info": "gpu_eta_gpu_info",
        "gpu_memory_total": "gpu_eta_gpu_memory_total_bytes",
        "gpu_free": "gpu_eta_gpu_predicted_free_timestamp_seconds",
    }


# ---------------------------------------------------------------- the view (pure)


@dataclass(frozen=True, slots=True)
class Band:
    """P10 / P50 / P90 of a clock time (unix seconds); any may be missing."""

    p10: float | None = None
    p50: float | None = None
    p90: float | None = None


@dataclass(frozen=True, slots=True)
class JobRow:
    """One training run in progress, with its GPUs and forecast."""

    namespace: str
    pod: str
    container: str
    run_id: str
    node: str
    gpus: tuple[str, ...]
    epoch: float | None
    epochs: float | None
    utilization_ratio: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    start_timestamp: float | None
    elapsed_seconds: float | None
    last_report_timestamp: float | None
    eta: Band
    method: str
    stalled: bool
    idle: bool


@dataclass(frozen=True, slots=True)
class HolderRow:
    """A pod holding a GPU that it (nearly) does not use over the idle window."""

    namespace: str
    pod: str
    container: str
    node: str
    gpu: str
    utilization_ratio: float | None
    memory_used_bytes: float | None
    held_seconds: float | None
    training: bool


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One device: who holds it and when it is predicted to be free."""

    node: str
    gpu: str
    uuid: str
    model: str
    holders: tuple[str, ...]
    state: str  # "free", "busy", "idle" (held, unused)
    free_at: Band
    note: str = ""


@dataclass(frozen=True, slots=True)
class View:
    """Everything one snapshot shows."""

    timestamp: float
    prometheus_url: str
    jobs: tuple[JobRow, ...] = ()
    idle: tuple[HolderRow, ...] = ()
    gpus: tuple[GpuRow, ...] = ()
    errors: tuple[str, ...] = field(default_factory=tuple)


def _value(sample: Sample) -> float | None:
    """The sample's value, ``None`` for NaN/±Inf (no number to show)."""
    return sample.value if math.isfinite(sample.value) else None


def _container_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("namespace", ""), labels.get("pod", ""), labels.get("container", ""))


def _run_key(labels: Mapping[str, str]) -> tuple[str, str, str, str]:
    return (*_container_key(labels), labels.get("run_id", ""))


def _gpu_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    """A device as top lists it: a whole GPU ``(node, "3", UUID)``, or one MIG instance
    of it ``(node, "7/5", UUID)`` (DCGM's labels: the parent's ``gpu`` and ``UUID`` plus
    ``GPU_I_ID``)."""
    gpu = labels.get("gpu", "")
    if labels.get("GPU_I_ID"):
        gpu = f"{gpu}/{labels['GPU_I_ID']}"
    return (labels.get("node", ""), gpu, labels.get("UUID", ""))


def _physical(gkey: tuple[str, str, str]) -> tuple[str, str, str]:
    """The physical GPU of a device key: a MIG instance's parent, a whole GPU itself.
    The forecaster's free time is per physical GPU (no ``GPU_I_ID``, docs/metrics.md)."""
    return (gkey[0], gkey[1].split("/", 1)[0], gkey[2])


def _physical_key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    return (labels.get("node", ""), labels.get("gpu", ""), labels.get("UUID", ""))


def _by_run(results: Sequence[Sample]) -> dict[tuple[str, str, str, str], float]:
    out: dict[tuple[str, str, str, str], float] = {}
    for s in results:
        v = _value(s)
        if v is not None:
            out[_run_key(s.labels)] = v
    return out


def _bands(results: Sequence[Sample], key_fn) -> dict[Any, dict[str, float]]:
    out: dict[Any, dict[str, float]] = {}
    for s in results:
        labels = s.labels
        q = QUANTILE_KEYS.get(labels.get("quantile", ""))
        v = _value(s)
        if q is not None and v is not None:
            out.setdefault(key_fn(labels), {})[q] = v
    return out


def build_view(
    results: Mapping[str, Sequence[Sample]],
    now: float,
    prometheus_url: str = "",
    idle_threshold: float = 0.05,
    idle_window_seconds: float = 300.0,
) -> View:
    """Join the query results (name → ``promapi`` samples) into one ``View``.

    A run is shown while ``epoch < epochs_planned`` (or the plan is unknown). A
    holder is idle when its average utilisation over the idle window is below
    ``idle_threshold`` *and* it has held the GPU for at least that window (like the
    idle alert's age guard): a pod seconds old (pulling its image, loading data) has
    no window to average over. A holder whose start is unknown (no
    ``..._allocated_since_...`` series: the exporter runs without the kube collector)
    is judged on utilisation alone. Joins use DCGM's label names: runs meet their
    GPUs on (namespace, pod, container), GPUs are (node, gpu, UUID[, GPU_I_ID]).
    """
    get = lambda name: results.get(name) or ()  # noqa: E731
    epochs = _by_run(get("epochs"))
    run_start = _by_run(get("run_start"))
    last_report = _by_run(get("last_report"))
    stalled = _by_run(get("stalled"))
    eta = _bands(get("completion"), _run_key)
    methods = {_run_key(s.labels): s.labels.get("method", "") for s in get("method")}

    # Per container: its allocated GPUs with utilisation and memory.
    container_gpus: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
    holders: set[tuple[tuple[str, str, str], tuple[str, str, str]]] = set()
    for s in get("allocated"):
        labels = s.labels
        if _value(s) != 1:
            continue
        ckey = _container_key(labels)
        gkey = _gpu_key(labels)
        container_gpus.setdefault(ckey, []).append(gkey)
        holders.add((gkey, ckey))

    def per_holder(name: str) -> dict[tuple, float]:
        out: dict[tuple, float] = {}
        for s in get(name):
            labels = s.labels
            v = _value(s)
            if v is not None:
                out[(_gpu_key(labels), _container_key(labels))] = v
        return out

    util = per_holder("pod_util")
    util_avg = per_holder("pod_util_avg")
    memory = per_holder("pod_memory")
    since = per_holder("since")
    gpu_total = {
        _gpu_key(s.labels): v for s in get("gpu_memory_total") if (v := _value(s)) is not None
    }
    idle_holders = {
        hk
        for hk in holders
        if (avg := util_avg.get(hk, util.get(hk))) is not None
        and avg < idle_threshold
        and (hk not in since or now - since[hk] >= idle_window_seconds)
    }

    jobs: list[JobRow] = []
    training_containers: set[tuple[str, str, str]] = set()
    for s in get("epoch"):
        labels = s.labels
        key = _run_key(labels)
        epoch = _value(s)
        planned = epochs.get(key)
        if epoch is not None and planned is not None and epoch >= planned:
            continue  # finished: its pod may linger, its GPU shows in the GPU list
        ckey = key[:3]
        training_containers.add(ckey)
        gkeys = sorted(container_gpus.get(ckey, []))
        node = labels.get("node", "") or (gkeys[0][0] if gkeys else "")

        def total(values: Mapping[tuple, float], gks=gkeys, ck=ckey) -> float | None:
            found = [values[(g, ck)] for g in gks if (g, ck) in values]
            return sum(found) if found else None

        n_util = [util[(g, ckey)] for g in gkeys if (g, ckey) in util]
        mem_total = [gpu_total[g] for g in gkeys if g in gpu_total]
        start = run_start.get(key)
        band = eta.get(key, {})
        jobs.append(
            JobRow(
                namespace=key[0],
                pod=key[1],
                container=key[2],
                run_id=key[3],
                node=node,
                gpus=tuple(g[1] for g in gkeys),
                epoch=epoch,
                epochs=planned,
                utilization_ratio=(sum(n_util) / len(n_util)) if n_util else None,
                memory_used_bytes=total(memory),
                memory_total_bytes=sum(mem_total) if mem_total else None,
                start_timestamp=start,
                elapsed_seconds=max(0.0, now - start) if start is not None else None,
                last_report_timestamp=last_report.get(key),
                eta=Band(band.get("p10"), band.get("p50"), band.get("p90")),
                method=methods.get(key, ""),
                stalled=stalled.get(key, 0.0) >= 1,
                idle=any((g, ckey) in idle_holders for g in gkeys),
            )
        )
    jobs.sort(key=lambda j: (j.eta.p50 is None, j.eta.p50 or 0.0, j.namespace, j.pod))

    idle_rows = [
        HolderRow(
            namespace=ckey[0],
            pod=ckey[1],
            container=ckey[2],
            node=gkey[0],
            gpu=gkey[1],
            utilization_ratio=util_avg.get((gkey, ckey), util.get((gkey, ckey))),
            memory_used_bytes=memory.get((gkey, ckey)),
            held_seconds=max(0.0, now - since[(gkey, ckey)]) if (gkey, ckey) in since else None,
            training=ckey in training_containers,
        )
        for (gkey, ckey) in sorted(idle_holders)
    ]

    # The forecaster's free time is per physical GPU; under MIG each instance is its own
    # row, and the GPU's time applies to its busy instances. A band is only the GPU's
    # free time while it describes the current holders: the forecaster publishes one
    # only when every pod on the GPU has a forecast, so a band next to a holder without
    # one is left over from an earlier holder set (a pod that just replaced a finished
    # one) and is not shown; a band for a GPU nobody holds is not shown either.
    free = _bands(get("gpu_free"), _physical_key)
    forecast_pods = {(k[0], k[1]) for k, b in eta.items() if "p50" in b}
    holders_of: dict[tuple[str, str, str], set[tuple[str, str, str]]] = {}
    for g, ck in holders:
        holders_of.setdefault(_physical(g), set()).add(ck)
    gpus: list[GpuRow] = []
    info = {_gpu_key(s.labels): s.labels.get("model", "") for s in get("gpu_info")}
    for gkey in sorted(set(info) | {g for g, _ in holders}, key=_gpu_order):
        held_by = sorted(ck for g, ck in holders if g == gkey)
        names = tuple(f"{ns}/{pod}" for ns, pod, _ in held_by)
        siblings = holders_of.get(_physical(gkey), set())
        unforecast = {ck for ck in siblings if ck[:2] not in forecast_pods}
        band = free.get(_physical(gkey), {}) if held_by and not unforecast else {}
        if not held_by:
            state, note = "free", "free now"
        elif all((gkey, ck) in idle_holders for ck in held_by):
            state = "idle"
            note = "held, unused"
        else:
            state, note = "busy", ""
        if held_by and not band and state != "idle":
            # an idle holder (a notebook) never has a forecast: "held, unused" says it all
            if any(ck in unforecast for ck in held_by):
                why = "no forecast for a holder"
            elif unforecast:
                why = "no forecast for a holder of another MIG instance"
            else:
                why = "no GPU forecast yet"
            note = (note + "; " if note else "") + why
        gpus.append(
            GpuRow(
                node=gkey[0],
                gpu=gkey[1],
                uuid=gkey[2],
                model=info.get(gkey, ""),
                holders=names,
                state=state,
                free_at=Band(band.get("p10"), band.get("p50"), band.get("p90")),
                note=note,
            )
        )
    return View(
        timestamp=now,
        prometheus_url=prometheus_url,
        jobs=tuple(jobs),
        idle=tuple(idle_rows),
        gpus=tuple(gpus),
    )


def _gpu_order(gkey: tuple[str, str, str]) -> tuple:
    """Node, then GPU index, then MIG instance id, numerically (2 < 10, 7/5 < 7/13)."""
    gpu, _, instance = gkey[1].partition("/")

    def num(text: str) -> tuple[int, str]:
        return (int(text), "") if text.isdigit() else (1 << 30, text)

    return (gkey[0], num(gpu), num(instance) if instance else (-1, ""), gkey[2])


# ---------------------------------------------------------------- formatting (pure)


def fmt_duration(seconds: float | None) -> str:
    """``2h05m``, ``4m07s``, ``12s``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "-"
    s = round(max(0.0, seconds))
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def fmt_clock(ts: float | None, now: float, tz: tzinfo | None = None) -> str:
    """A clock time that cannot be misread; ``-`` when unknown.

    ``14:05:09`` today; ``11-15 22:13`` on another day less than a day away (tomorrow
    morning, last night); the full date ``2028-08-03 19:42`` beyond that, so a band
    spanning months or years never reads like this year's dates."""
    if ts is None or not math.isfinite(ts):
        return "-"
    zone = tz or timezone.utc
    try:
        when = datetime.fromtimestamp(ts, zone)
    except (OverflowError, OSError, ValueError):  # beyond year 9999: no calendar date
        return "far future" if ts > now else "-"
    if when.date() == datetime.fromtimestamp(now, zone).date():
        return when.strftime("%H:%M:%S")
    if abs(ts - now) <= 86400:
        return when.strftime("%m-%d %H:%M")
    return when.strftime("%Y-%m-%d %H:%M")


def fmt_bytes(n: float | None) -> str:
    """GiB with one decimal (MiB below 1 GiB); ``-`` when unknown."""
    if n is None:
        return "-"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}G"
    return f"{n / (1 << 20):.0f}M"


def fmt_ratio(r: float | None) -> str:
    """A 0..1 ratio as a whole percentage."""
    return "-" if r is None else f"{100 * r:.0f}%"


def progress_bar(epoch: float | None, epochs: float | None, width: int = 20) -> str:
    """``[#######.............]``; unknown plan → a bar of ``?``."""
    if epoch is None or not epochs or epochs <= 0:
        return "[" + "?" * width + "]"
    filled = round(width * min(1.0, max(0.0, epoch / epochs)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


def fmt_epoch(epoch: float | None, epochs: float | None) -> str:
    """``7/20`` (fractional epochs rounded down, as "completed")."""
    e = "-" if epoch is None else str(int(epoch))
    n = "?" if epochs is None else str(int(epochs))
    return f"{e}/{n}"


def fmt_band(band: Band, now: float, tz: tzinfo | None = None) -> tuple[str, str]:
    """(P50 cell, ``P10–P90`` clocks) for a job or GPU.

    A P50 already past when the view is drawn is not shown as a past clock time: it is
    ``due`` while the P90 is still ahead (inside the band: any moment now) and
    ``overdue`` once the P90 has passed too (or is unknown). The forecaster never
    publishes a past time, but a view is drawn between its cycles; the band keeps its
    clock times, so how late it is stays readable."""
    if band.p50 is None:
        return "-", "-"
    lo, hi = fmt_clock(band.p10, now, tz), fmt_clock(band.p90, now, tz)
    if band.p50 <= now:
        p50 = "due" if band.p90 is not None and band.p90 > now else "overdue"
    else:
        p50 = fmt_clock(band.p50, now, tz)
    return p50, f"{lo}–{hi}"


def _job_cells(job: JobRow, now: float, tz: tzinfo | None) -> list[str]:
    eta, rng = fmt_band(job.eta, now, tz)
    flags = ",".join(f for f, on in (("stalled", job.stalled), ("idle", job.idle)) if on)
    mem = f"{fmt_bytes(job.memory_used_bytes)}/{fmt_bytes(job.memory_total_bytes)}"
    return [
        f"{job.namespace}/{job.pod}",
        f"{job.node}/{','.join(job.gpus) or '-'}",
        progress_bar(job.epoch, job.epochs),
        fmt_epoch(job.epoch, job.epochs),
        fmt_ratio(job.utilization_ratio),
        mem,
        fmt_duration(job.elapsed_seconds),
        eta,
        rng,
        flags,
    ]


JOB_HEADERS = [
    "POD",
    "NODE/GPU",
    "PROGRESS",
    "EPOCH",
    "UTIL",
    "MEM",
    "ELAPSED",
    "ETA",
    "P10–P90",
    "",
]
IDLE_HEADERS = ["POD", "NODE/GPU", "UTIL(avg)", "MEM", "HELD", ""]
GPU_HEADERS = ["NODE/GPU", "MODEL", "STATE", "HELD BY", "FREE AT", "P10–P90", ""]


def _idle_cells(h: HolderRow) -> list[str]:
    return [
        f"{h.namespace}/{h.pod}",
        f"{h.node}/{h.gpu}",
        fmt_ratio(h.utilization_ratio),
        fmt_bytes(h.memory_used_bytes),
        fmt_duration(h.held_seconds),
        "training, stalled?" if h.training else "",
    ]


def _gpu_cells(g: GpuRow, now: float, tz: tzinfo | None) -> list[str]:
    free, rng = fmt_band(g.free_at, now, tz)
    if g.state == "free":
        free = "now"
    return [
        f"{g.node}/{g.gpu}",
        g.model or "-",
        g.state,
        " ".join(g.holders) or "-",
        free,
        rng,
        g.note,
    ]


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return [line(headers), *(line(r) for r in rows)]


def summary_line(view: View, tz: tzinfo | None = None) -> str:
    """One header line: where, when, and counts."""
    when = datetime.fromtimestamp(view.timestamp, tz or timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S %Z"
    )
    counts = {state: sum(g.state == state for g in view.gpus) for state in ("busy", "idle", "free")}
    # each row is a device: a whole GPU or a MIG instance, so busy + idle + free = seen
    return (
        f"gpu-eta top  {view.prometheus_url}  {when}  |  {len(view.jobs)} training, "
        f"{len(view.idle)} idle holders, GPUs: {len(view.gpus)} seen, {counts['busy']} busy, "
        f"{counts['idle']} idle, {counts['free']} free"
    )


def render_plain(view: View, tz: tzinfo | None = None) -> str:
    """The whole snapshot as aligned plain text (for pipes, logs, CI)."""
    now = view.timestamp
    out = [summary_line(view, tz), ""]
    out.extend(f"error: {e}" for e in view.errors)
    out.append("TRAINING")
    if view.jobs:
        out.extend(_table(JOB_HEADERS, [_job_cells(j, now, tz) for j in view.jobs]))
    else:
        out.append("  (no training run reporting progress)")
    out += ["", "IDLE GPU HOLDERS"]
    if view.idle:
        out.extend(_table(IDLE_HEADERS, [_idle_cells(h) for h in view.idle]))
    else:
        out.append("  (none)")
    out += ["", "GPUS"]
    if view.gpus:
        out.extend(_table(GPU_HEADERS, [_gpu_cells(g, now, tz) for g in view.gpus]))
    else:
        out.append("  (no gpu_eta_gpu_info series: is the exporter scraped?)")
    return "\n".join(out) + "\n"


def render_json(view: View) -> dict[str, Any]:
    """The snapshot for machines: unix seconds, ratios 0..1, bytes; remaining seconds too."""
    data = asdict(view)
    for job in data["jobs"]:
        band = job["eta"]
        job["remaining_seconds"] = {
            k: (max(0.0, v - view.timestamp) if v is not None else None) for k, v in band.items()
        }
    return data


def render_rich(view: View, tz: tzinfo | None = None):
    """The snapshot as ``rich`` tables (imported lazily: rich is the ``top`` extra)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    now = view.timestamp
    parts: list[Any] = [Text(summary_line(view, tz), style="bold")]
    parts.extend(Text(f"error: {e}", style="red") for e in view.errors)
    styles = {"free": "green", "idle": "yellow", "busy": None}
    tables = (
        (
            "Training",
            JOB_HEADERS,
            [
                (_job_cells(j, now, tz), "yellow" if (j.stalled or j.idle) else None)
                for j in view.jobs
            ],
        ),
        ("Idle GPU holders", IDLE_HEADERS, [(_idle_cells(h), "yellow") for h in view.idle]),
        ("GPUs", GPU_HEADERS, [(_gpu_cells(g, now, tz), styles.get(g.state)) for g in view.gpus]),
    )
    for title, headers, rows in tables:
        table = Table(title=title, title_justify="left")
        for i, h in enumerate(headers):
            # identity columns (pod, node/gpu) never shrink: the rest may on narrow terminals
            width = max([len(h), *(len(r[0][i]) for r in rows)]) if i < 2 else None
            table.add_column(h, no_wrap=True, min_width=width)
        for cells, style in rows:
            table.add_row(*cells, style=style)
        parts.append(table)
    return Group(*parts)


# ---------------------------------------------------------------- I/O


def fetch(client: PromClient, idle_window: str = "5m") -> dict[str, list[Sample]]:
    """Run every query (one instant query each); ``PromAPIError`` with one clear line
    on failure (unreachable, refused, not Prometheus, too large, not a vector)."""
    return {name: client.instant(expr) for name, expr in queries(idle_window).items()}


def refresh(
    client: PromClient,
    idle_window: str = "5m",
    idle_threshold: float = 0.05,
    keep_errors: bool = False,
) -> View:
    """One refresh: fetch, then build the view now. ``keep_errors``: a failed fetch gives
    a view carrying the error instead of raising (live views try again next time).
    ``idle_window`` is a Prometheus duration (``ValueError`` otherwise)."""
    idle_seconds = parse_duration(idle_window)  # before any query: the caller's error
    try:
        results = fetch(client, idle_window)
    except PromAPIError as err:
        if not keep_errors:
            raise
        return View(timestamp=time.time(), prometheus_url=client.safe_url, errors=(str(err),))
    return build_view(results, time.time(), client.safe_url, idle_threshold, idle_seconds)


def fetch_view(
    url: str,
    timeout_seconds: float = 10.0,
    idle_window: str = "5m",
    idle_threshold: float = 0.05,
    keep_errors: bool = False,
) -> View:
    """``refresh`` for a bare URL without auth (the demo's live view; a URL that is not
    http(s) raises ``PromAPIError`` whatever ``keep_errors``)."""
    client = PromClient(url, timeout_seconds=timeout_seconds)
    try:
        return refresh(client, idle_window, idle_threshold, keep_errors)
    finally:
        client.close()


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``gpu-eta top: …``, exit 2 (the usage
    text is ``--help``'s job), like the forecaster's commands."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(ExitCode.USAGE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line (see docs/top.md)."""
    p = _Parser(
        prog="gpu-eta top",
        description=(
            "Training runs, their progress and predicted completion, idle GPU holders and "
            "when each GPU frees up, read from Prometheus only."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--once", action="store_true", help="print one snapshot and exit")
    p.add_argument("--json", action="store_true", help="print one JSON snapshot and exit")
    p.add_argument(
        "--interval",
        type=float,
        default=5.0,
        help="seconds between refreshes",
    )
    p.add_argument(
        "--idle-threshold",
        type=float,
        default=0.05,
        help="a holder whose average GPU utilisation is below this ratio is idle",
    )
    p.add_argument(
        "--idle-window",
        type=_duration_flag,
        default="5m",
        help="Prometheus duration: the average's range, and how long a pod must have held "
        "its GPU before it can be called idle",
    )
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal (no rich)")
    p.add_argument("--utc", action="store_true", help="clock times in UTC instead of local time")
    p.add_argument("--debug", action="store_true", help="tracebacks on errors")
    add_prometheus_flags(p, default_url="http://127.0.0.1:9090")
    # the flag's name before top shared the forecaster's flags; kept so scripts still work
    p.add_argument("--timeout", dest="timeout_seconds", type=float, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.interval <= 0:
        p.error("--interval must be > 0")
    if not 0 <= args.idle_threshold <= 1:
        p.error("--idle-threshold must be a ratio in 0..1")
    return args  # the --prometheus.* values: prometheus_connection (make_client)


def _duration_flag(text: str) -> str:
    """argparse type: a valid Prometheus duration, kept as text for the query."""
    try:
        parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text.strip()


def make_client(args: argparse.Namespace) -> PromClient:
    """The Prometheus client of the command line (``ConfigError``/``PromAPIError`` on
    bad values: a usage error); says once when TLS is not verified, as ``serve`` does."""
    client = PromClient(args.prometheus_url, **prometheus_connection(args))
    if args.insecure_skip_verify:
        print(
            f"gpu-eta top: TLS certificates of {client.safe_url} are not verified", file=sys.stderr
        )
    return client


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m forecaster top`` (exit 0 ok, 1 Prometheus error, 2 usage)."""
    try:
        args = parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        client = make_client(args)
    except (ConfigError, PromAPIError) as err:
        print(f"gpu-eta top: {err}", file=sys.stderr)
        return ExitCode.USAGE
    tz = timezone.utc if args.utc else datetime.now().astimezone().tzinfo
    try:
        if args.json:
            view = refresh(client, args.idle_window, args.idle_threshold)
            print(json.dumps(render_json(view), indent=2))
            sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
            return ExitCode.OK
        use_rich = sys.stdout.isatty() and not args.plain and _has_rich()
        if args.once:
            view = refresh(client, args.idle_window, args.idle_threshold)
            if use_rich:
                from rich.console import Console

                Console().print(render_rich(view, tz))
            else:
                sys.stdout.write(render_plain(view, tz))
            sys.stdout.flush()
            return ExitCode.OK
        return _loop(client, args, tz, use_rich)
    except BrokenPipeError:
        return _reader_gone()
    except PromAPIError as err:
        if args.debug:
            raise
        print(f"gpu-eta top: {err}", file=sys.stderr)
        return ExitCode.RUNTIME
    except KeyboardInterrupt:
        return ExitCode.OK
    finally:
        client.close()


def _reader_gone() -> int:
    """stdout's reader closed the pipe (``top | head``): that is how pipes end, not an
    error, so exit 0 quietly. stdout is pointed at /dev/null first, or Python's own
    flush at exit would print a second BrokenPipeError."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # stdout without a file descriptor (tests, embedding)
        pass
    return ExitCode.OK


def _has_rich() -> bool:
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


def _loop(client: PromClient, args: argparse.Namespace, tz: tzinfo | None, use_rich: bool) -> int:
    """Refresh until Ctrl-C: in place with rich on a terminal, appended otherwise."""

    def view() -> View:
        return refresh(client, args.idle_window, args.idle_threshold, keep_errors=True)

    if use_rich:
        from rich.live import Live

        with Live(render_rich(view(), tz), auto_refresh=False, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(render_rich(view(), tz), refresh=True)
    while True:
        sys.stdout.write(render_plain(view(), tz) + "\n")
        sys.stdout.flush()
        time.sleep(args.interval)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
