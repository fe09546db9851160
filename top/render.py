"""Pure: a ``View`` → plain text, JSON, or rich tables (rich imported only there)."""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, tzinfo
from typing import Any

from gpu_eta.forecaster.methods import PLANLESS_METHODS
from gpu_eta.forecaster.promparse import printable
from gpu_eta.top.view import (
    NO_PREDICTION,
    Band,
    GpuRow,
    HolderRow,
    JobRow,
    PendingRow,
    View,
    elapsed,
    fmt_ratio,
)

# How old a forecaster cycle may be and its "fits now" still read ``now`` (``_fits_now``):
# the alert rules' pending_prediction_past_seconds (rules/gpu-eta.rules.yaml,
# docs/alerts.md), as the JupyterHub hook has it (spawner_profiles.PAST_LIMIT_SECONDS).
# Copied, not imported: the hook's module does network I/O and this one is pure;
# tests/forecaster/test_spawner_profiles.py holds every copy equal to the rule.
PAST_LIMIT_SECONDS = 900.0


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


def local_time(ts: float, tz: tzinfo | None = None) -> datetime:
    """``ts`` in ``tz``; with ``None``, in the local time zone at that moment (its own
    UTC offset). Why per timestamp: one offset taken now (``datetime.now().astimezone()
    .tzinfo``) is an hour off for every time across a daylight-saving change, and a
    forecast is often weeks ahead."""
    if tz is None:
        return datetime.fromtimestamp(ts).astimezone()
    return datetime.fromtimestamp(ts, tz)


def fmt_clock(ts: float | None, now: float, tz: tzinfo | None = None) -> str:
    """A clock time that cannot be misread; ``-`` when unknown.

    ``14:05:09`` today; ``11-15 22:13`` on another day less than a day away (tomorrow
    morning, last night); the full date ``2028-08-03 19:42`` beyond that, so a band
    spanning months or years never reads like this year's dates."""
    if ts is None or not math.isfinite(ts):
        return "-"
    try:
        when = local_time(ts, tz)
    except (OverflowError, OSError, ValueError):  # beyond year 9999: no calendar date
        return "far future" if ts > now else "-"
    try:
        today = local_time(now, tz).date()
    except (OverflowError, OSError, ValueError):
        return "-"
    if when.date() == today:
        return when.strftime("%H:%M:%S")
    if abs(ts - now) <= 86400:
        return when.strftime("%m-%d %H:%M")
    return when.strftime("%Y-%m-%d %H:%M")


def fmt_bytes(n: float | None) -> str:
    """GiB with one decimal (MiB below 1 GiB, TiB from 1 TiB); ``-`` when unknown or no
    memory size (negative, or a PiB and more: no device or process holds that, and 1e300
    bytes printed a 291-digit figure)."""
    if n is None or not 0 <= n < 1 << 50:
        return "-"
    if n >= 1 << 40:
        return f"{n / (1 << 40):.1f}T"
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f}G"
    return f"{n / (1 << 20):.0f}M"


def progress_bar(epoch: float | None, epochs: float | None, width: int = 20) -> str:
    """``[#######.............]``; unknown plan → a bar of ``?``."""
    if epoch is None or not epochs or epochs <= 0:
        return "[" + "?" * width + "]"
    filled = round(width * min(1.0, max(0.0, epoch / epochs)))
    return "[" + "#" * filled + "." * (width - filled) + "]"


_SI = ((10**15, "P"), (10**12, "T"), (10**9, "G"), (10**6, "M"))


def fmt_count(value: float) -> str:
    """A completed count, rounded down: whole below a million, else three significant
    digits and a prefix (``1.23M``, ``999M``, ``12.0T``). Why: a run counting tokens or
    samples reports up to 10¹⁵, and ``12000000000000/15000000000000 steps`` took a
    35-column cell; why three: with two, 1,550,000 of 1,590,000 steps read
    ``1.5M/1.5M``, done. Integers, so rounding down never rounds up a float's 1.59."""
    n = int(value)
    for scale, prefix in _SI:
        if n >= scale:
            digits = 2 if n < 10 * scale else 1 if n < 100 * scale else 0
            whole, frac = divmod(n * 10**digits // scale, 10**digits)
            return (f"{whole}.{frac:0{digits}d}" if digits else f"{whole}") + prefix
    return str(n)


def fmt_epoch(epoch: float | None, epochs: float | None, unit: str = "epochs") -> str:
    """``7/20`` (fractional epochs rounded down, as "completed"); ``400/1000 steps`` for
    a run followed by its steps; ``1.55M/1.59M steps`` for counts of a million or more."""
    e = "-" if epoch is None else fmt_count(epoch)
    n = "?" if epochs is None else fmt_count(epochs)
    return f"{e}/{n}" + (" steps" if unit == "steps" else "")


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


# after a forecast cell (ETA, START, FREE AT) of a stale forecaster (``stale_line``)
STALE_MARK = "*"


def job_cells(job: JobRow, now: float, tz: tzinfo | None, stale: bool = False) -> list[str]:
    """A training run's cells, under ``JOB_HEADERS``: every layout (plain, rich, the
    live view's compact one, ``top.compact``) says a run with these, so none says it
    differently. ``stale``: its ETA is marked (``STALE_MARK``)."""
    eta, rng = fmt_band(job.eta, now, tz)
    if stale and job.eta.p50 is not None:
        eta += STALE_MARK
    flags = ",".join(
        f
        for f, on in (
            ("stalled", job.stalled),
            ("idle", job.idle),
            # no planned total: the ETA is completed runs' durations
            ("from past runs", job.method in PLANLESS_METHODS),
        )
        if on
    )
    mem = f"{fmt_bytes(job.memory_used_bytes)}/{fmt_bytes(job.memory_total_bytes)}"
    return _shown(
        f"{job.namespace}/{job.pod}",
        f"{job.node}/{','.join(job.gpus) or '-'}",
        progress_bar(job.epoch, job.epochs),
        fmt_epoch(job.epoch, job.epochs, job.unit),
        fmt_ratio(job.utilization_ratio),
        mem,
        fmt_duration(job.elapsed_seconds),
        eta,
        rng,
        flags,
    )


def _shown(*cells: str) -> list[str]:
    """A row's cells as the terminal shows them (``promparse.printable``): each label a
    cell holds (a pod, a node, a model) is whatever a scraped pod set, escapes and line
    breaks included. Every cell of plain and rich output is made here; ``--json`` keeps
    the values as they are (JSON escapes them)."""
    return [printable(cell) for cell in cells]


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
PENDING_HEADERS = ["POD", "GPUS", "WAITED", "START", "P10–P90", ""]
# pending pods that will not start whatever the queue does: an admin or the request must act
_NO_START = ("never_fits", "no_schedulable_node")
_PENDING_NOTES = {
    "never_fits": "never fits: more GPUs (or a type) than any node it may use has",
    "beyond_horizon": "no start within the horizon",
    "no_schedulable_node": "fits only nodes cordoned, not Ready, under pressure or being removed",
    "scheduled": "starting (bound to a node)",
    "blocked_elsewhere": "fits free GPUs, not bound: waits for something else (PVC, CPU, memory)",
    "gated": "gated: waits for its queue's admission (scheduling gates, e.g. Kueue)",
    # no series says which: past --pending.max-pods (counted pending_skipped) or rejected
    # (pending_rejected); the forecaster's "GPU queue:" WARNING names both
    NO_PREDICTION: "no prediction: past --pending.max-pods or rejected (forecaster log 'GPU queue:')",
}


def pending_cells(p: PendingRow, now: float, tz: tzinfo | None, stale: bool = False) -> list[str]:
    """A pending pod's cells. Its START is ``starting`` once it is bound to a node and
    ``now`` when it fits now (``_fits_now``): both are published at the cycle's time,
    which has passed when the view is drawn, and are not ``overdue``. ``stale``: a
    predicted START is marked (``STALE_MARK``)."""
    waited = elapsed(p.created_timestamp, now)  # none for a stamp no clock gives
    start, rng = fmt_band(p.start, now, tz)
    note = _PENDING_NOTES.get(p.status, "")
    if p.status == "scheduled":
        start, rng = "starting", "-"
    elif _fits_now(p, now):
        start, note = "now", "fits now"
    if stale and p.status != "scheduled" and p.start.p50 is not None:
        start += STALE_MARK
    gpus = p.gpus if p.resource in ("", "nvidia_com_gpu") else f"{p.gpus} {p.resource}"
    gpus = gpus or "-"  # not published (NO_PREDICTION): not known here
    return _shown(
        f"{p.namespace}/{p.pod}",
        gpus,
        fmt_duration(waited),
        start,
        rng,
        note,
    )


def _fits_now(p: PendingRow, now: float) -> bool:
    """Whether ``p`` was predicted to start at its cycle's own time (its P50 no later
    than the end of the cycle that made it, ``PendingRow.cycle_timestamp``), by a cycle
    that ended less than ``PAST_LIMIT_SECONDS`` before ``now``.

    Why the age: a forecaster that stopped cycling, or a Pushgateway still serving a
    stopped CronJob's last push, keeps its last success and its "fits now" P50 as they
    were, and the pod would read ``now`` for ever; past the limit the alerts and the
    JupyterHub hook already take such a start for a frozen one (docs/alerts.md,
    ``pending_prediction_past_seconds``), and here it reads ``due``/``overdue`` as any
    passed start does."""
    return (
        p.status == "predicted"
        and p.start.p50 is not None
        and p.cycle_timestamp is not None
        and p.start.p50 <= p.cycle_timestamp
        and now - p.cycle_timestamp < PAST_LIMIT_SECONDS
    )


def _idle_cells(h: HolderRow, held_unknown: bool = False) -> list[str]:
    """An idle holder's cells; HELD ``unknown`` where the ``since`` query was refused
    (``View.held_unknown``): ``-`` says the exporter publishes no allocation time."""
    held = "unknown" if held_unknown and h.held_seconds is None else fmt_duration(h.held_seconds)
    return _shown(
        f"{h.namespace}/{h.pod}",
        f"{h.node}/{h.gpu}",
        fmt_ratio(h.utilization_ratio),
        fmt_bytes(h.memory_used_bytes),
        held,
        "training, stalled?" if h.training else "",
    )


# each GPU state's rich style (a busy GPU none), in every rich layout
GPU_STYLES = {"free": "green", "idle": "yellow", "unknown": "red"}


def job_style(job: JobRow) -> str | None:
    """A run's rich style in every rich layout: yellow when stalled or idle."""
    return "yellow" if (job.stalled or job.idle) else None


def gpu_cells(g: GpuRow, now: float, tz: tzinfo | None, stale: bool = False) -> list[str]:
    """A device's cells, under ``GPU_HEADERS`` (every layout's, as ``job_cells``);
    FREE AT ``now`` for a free one. ``stale``: a predicted FREE AT is marked."""
    free, rng = fmt_band(g.free_at, now, tz)
    if g.state == "free":
        free = "now"
    elif stale and g.free_at.p50 is not None:
        free += STALE_MARK
    return _shown(
        f"{g.node}/{g.gpu}",
        g.model or "-",
        g.state,
        " ".join(g.holders) or "-",
        free,
        rng,
        g.note,
    )


def aligned_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """Aligned columns, each cell padded to its column's width on the terminal
    (``display_width``), two spaces apart: the first line the headers'. Pure."""
    sized = [[(c, display_width(c)) for c in r] for r in (headers, *rows)]
    widths = [max(row[i][1] for row in sized) for i in range(len(headers))]

    def line(cells: list[tuple[str, int]]) -> str:
        padded = (c + " " * (w - n) for (c, n), w in zip(cells, widths, strict=True))
        return "  ".join(padded).rstrip()

    return [line(r) for r in sized]


def display_width(text: str) -> int:
    """The terminal columns ``text`` (printable, ``promparse.printable``) takes: two for
    each wide East Asian character, none for a combining mark or a zero-width format
    character, one for the others. Pure, stdlib only (``--plain`` needs no rich). Why:
    padded by its length, a CJK model name shifted every column after it on its row."""
    if text.isascii():  # nearly every cell: a flag read
        return len(text)
    width = 0
    for c in text:
        if unicodedata.combining(c) or unicodedata.category(c) in ("Mn", "Me", "Cf"):
            continue
        width += 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1
    return width


def summary_line(view: View, tz: tzinfo | None = None) -> str:
    """One header line: where, when, and counts."""
    try:
        when = local_time(view.timestamp, tz).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (OverflowError, OSError, ValueError):  # no calendar date (refresh never makes one)
        when = "-"
    counts = gpu_counts(view)
    # each row is a device: a whole GPU or a MIG instance, so busy + idle + free
    # (+ holders unknown) = seen
    only = f"  namespace {','.join(view.namespaces)}" if view.namespaces else ""
    unknown = f", {counts['unknown']} holders unknown" if counts["unknown"] else ""
    # no holder's idleness known (View.idle_unknown): 0 would say none sits idle on a GPU
    idle = "idle holders unknown" if view.idle_unknown else f"{len(view.idle)} idle holders"
    # the runs' query unanswered (View.training_unknown): 0 would say none trains, and
    # the runs shown (by another progress series) are some of them
    training = f"{len(view.jobs)} training"
    if view.training_unknown:
        training = f"{len(view.jobs)}+ training" if view.jobs else "training unknown"
    return printable(
        f"gpu-eta top  {view.prometheus_url}{only}  {when}  |  {training}, "
        f"{idle}, GPUs: {counts['seen']} seen, {counts['busy']} busy, "
        f"{counts['idle']} idle, {counts['free']} free{unknown}"
    )


def gpu_counts(view: View) -> dict[str, int]:
    """Devices seen and per state; busy + idle + free + unknown = seen. Pure."""
    counts = {"seen": len(view.gpus)}
    for state in GPU_STATES:
        counts[state] = sum(g.state == state for g in view.gpus)
    return counts


GPU_STATES = ("busy", "idle", "free", "unknown")


def alerts_line(view: View) -> str:
    """``ALERTS firing: GpuEtaGpuAllocatedIdle ×2, …`` or ``ALERTS firing: none``; with
    the alerts' query unanswered (``View.alerts_unknown``), ``unknown (…)``, not none."""
    unknown = f"unknown ({view.alerts_unknown})" if view.alerts_unknown else "none"
    body = ", ".join(f"{name} ×{count}" for name, count in view.alerts) or unknown
    return printable(f"ALERTS firing: {body}")  # an alertname is a label value


def error_lines(view: View) -> list[str]:
    """``error: …``, one line per error of ``view``: each one line (``printable``), as a
    refused query's reason or a stale view's failure quotes the server."""
    return [printable(f"error: {e}") for e in view.errors]


SHOWN_WARNINGS = 3  # of a view's warnings, in its one line


def warning_line(view: View) -> str | None:
    """``warning: partial answer from Prometheus: w1; w2; w3 (+2 more)``, or ``None``
    without warnings. One line whatever their number (each is one line already,
    ``promparse.clean_warning``); ``--json`` has them all."""
    if not view.warnings:
        return None
    shown = "; ".join(view.warnings[:SHOWN_WARNINGS])
    more = len(view.warnings) - SHOWN_WARNINGS
    return f"warning: partial answer from Prometheus: {shown}" + (
        f" (+{more} more)" if more > 0 else ""
    )


def stale_line(view: View) -> str | None:
    """``warning: forecasts from 2h05m ago …`` when the forecaster's forecasts are stale
    (``View.forecasts_stale``: its last good cycle older than the alerts' 15 minutes,
    or it reports its last cycle failed), else ``None``. Why: its ETAs and free times
    looked current, a stopped forecaster's as a healthy one's. Of several forecasters
    (``View.forecasters``), how many are stale: ``stale_forecasters_line``."""
    if not view.forecasts_stale:
        return None
    if len(view.forecasters) > 1:
        return stale_forecasters_line(view)
    if view.forecast_timestamp is None:
        when = "an earlier cycle"
    else:
        when = f"{fmt_duration(view.timestamp - view.forecast_timestamp)} ago"
    why = (
        "the forecaster says its last cycle failed"
        if view.forecaster_failed
        else "the forecaster's last good cycle"
    )
    return (
        f"warning: forecasts from {when} ({why}): ETA, START and FREE AT marked "
        f"{STALE_MARK} may be out of date"
    )


def stale_forecasters_line(view: View) -> str | None:
    """``warning: 1 of 2 forecasters' forecasts from 2h05m ago (its last good cycle) …``:
    how many of the view's forecasters are stale, and how old the oldest of their
    cycles is (``up to`` when several are); ``None`` when none is. Only their rows are
    marked (``forecast_stale``). Pure."""
    stale = [f for f in view.forecasters if f.stale]
    if not stale:
        return None
    ends = [f.last_success_timestamp for f in stale if f.last_success_timestamp is not None]
    failed = sum(f.failed for f in stale)
    when = "an earlier cycle"
    if ends:
        when = f"{fmt_duration(view.timestamp - min(ends))} ago"
    if len(stale) == 1:
        why = "it says its last cycle failed" if failed else "its last good cycle"
    else:
        when = f"up to {when}" if ends else when
        why = "the oldest one's last good cycle"
        if failed == 1:
            why += "; 1 says its last cycle failed"
        elif failed:
            why += f"; {failed} say their last cycle failed"
    return (
        f"warning: {len(stale)} of {len(view.forecasters)} forecasters' forecasts from "
        f"{when} ({why}): ETA, START and FREE AT marked {STALE_MARK} may be out of date"
    )


def _header_warnings(view: View) -> list[str]:
    """The header's ``warning:`` lines: a partial answer's, a stale forecaster's."""
    return [line for line in (warning_line(view), stale_line(view)) if line is not None]


def render_plain(view: View, tz: tzinfo | None = None) -> str:
    """The whole snapshot as aligned plain text (for pipes, logs, CI)."""
    now = view.timestamp
    out = [summary_line(view, tz), alerts_line(view), ""]
    out.extend(error_lines(view))
    out.extend(_header_warnings(view))
    out.append("TRAINING")
    if view.jobs:
        out.extend(
            aligned_table(JOB_HEADERS, [job_cells(j, now, tz, j.forecast_stale) for j in view.jobs])
        )
    else:
        out.append(f"  ({empty_text(view, 'Training')})")
    out += ["", "IDLE GPU HOLDERS"]
    if view.idle:
        out.extend(
            aligned_table(
                IDLE_HEADERS, [_idle_cells(h, bool(view.held_unknown)) for h in view.idle]
            )
        )
    else:
        out.append(f"  ({empty_text(view, 'Idle GPU holders')})")
    out += ["", "PENDING"]
    if view.pending:
        out.extend(
            aligned_table(
                PENDING_HEADERS,
                [pending_cells(p, now, tz, p.forecast_stale) for p in view.pending],
            )
        )
    else:
        out.append(f"  ({empty_text(view, 'Pending')})")
    out += ["", "GPUS"]
    if view.gpus:
        out.extend(
            aligned_table(GPU_HEADERS, [gpu_cells(g, now, tz, g.forecast_stale) for g in view.gpus])
        )
    else:
        out.append(f"  ({empty_text(view, 'GPUs')})")
    return "\n".join(out) + "\n"


def render_json(view: View) -> dict[str, Any]:
    """The snapshot for machines: unix seconds, ratios 0..1, bytes; remaining seconds too."""
    data = asdict(view)
    data["alerts"] = [{"alertname": name, "firing": count} for name, count in view.alerts]
    data["gpu_counts"] = gpu_counts(view)
    for job in data["jobs"]:
        band = job["eta"]
        job["remaining_seconds"] = {
            k: (max(0.0, v - view.timestamp) if v is not None else None) for k, v in band.items()
        }
    return data


# Columns whose text is long and open-ended (holders of a time-sliced GPU, a model
# name, the notes): on a narrow terminal these wrap onto more lines. Every other
# column keeps the width of its content: rich shrinks every column of a table that
# does not fit, and squeezed STATE, FREE AT, EPOCH or UTIL to nothing while HELD BY
# kept its full width (a GPU with three holders at 120 columns).
_WRAPPING = frozenset({"MODEL", "HELD BY", ""})
_WRAP_MIN_WIDTH = 12


# Per table, the columns left out first when it is wider than the terminal, least
# important first. What is never left out: who (POD, NODE/GPU of the GPU list), how far
# (EPOCH), when (ETA, START, FREE AT) and the notes. Why: rich cuts a table too wide at
# the right edge, and there sit the ETA, its band and the flags (at 80 columns the
# Training table showed the bar and the memory, not when the run ends).
_LEAVE_OUT = {
    "Training": ("PROGRESS", "MEM", "ELAPSED", "NODE/GPU", "UTIL", "P10–P90"),
    "Idle GPU holders": ("MEM", "HELD"),
    "Pending": ("WAITED", "P10–P90"),
    "GPUs": ("MODEL", "P10–P90"),
}


def table_width(widths: Sequence[int]) -> int:
    """Characters a rich table (the default box, one space of padding each side) needs
    for columns of these widths: each column its width, 2 of padding and a border,
    plus the closing border."""
    return sum(widths) + 3 * len(widths) + 1


def fitting_columns(
    headers: Sequence[str], widths: Sequence[int], leave_out: Sequence[str], max_width: int
) -> list[int]:
    """The indexes of the columns shown in ``max_width`` characters: all, or all but the
    first of ``leave_out`` until the rest fits (or ``leave_out`` is used up: then rich
    cuts what is still too wide). ``widths``: each column's narrowest width. Pure."""
    kept = list(range(len(headers)))
    for name in leave_out:
        if table_width([widths[i] for i in kept]) <= max_width:
            break
        if name in headers:
            kept.remove(headers.index(name))
    return kept


# The tables of a refreshing view taller than the terminal lose rows in this order, least
# important first, from the end of each list (each is sorted most important first:
# Training by ETA, Pending by start, the other two by node/GPU; the GPUs keep their free
# ones first, ``kept_rows``). Why this order: a GPU's
# row repeats what the Training and idle-holder rows say of its pods, and the header
# counts busy, idle and free GPUs; the idle holders are counted in the header and
# alerted on; the pending pods are few and each one's start is asked for; the runs
# and when they end are what ``top`` is for. Why at all: rich's Live crops what is
# taller than the terminal at the bottom, silently but for a "...": the GPUs, the
# pending pods and the notes under the tables were lost without a word.
CUT_ORDER = ("GPUs", "Idle GPU holders", "Pending", "Training")
KEEP_ROWS = 3  # rows each table keeps before any table goes down to its one line
_ROW_NOUNS = {  # (one, more)
    "Training": ("run", "runs"),
    "Idle GPU holders": ("holder", "holders"),
    "Pending": ("pod", "pods"),
    "GPUs": ("GPU", "GPUs"),
}
_EMPTY = {
    "Training": "no training run reporting progress",
    "Idle GPU holders": "none",
    "Pending": "no pod waiting for GPUs",
    "GPUs": "no gpu_eta_gpu_info series: is the exporter scraped?",
}
_TALLER = "--once or a taller terminal shows them"


def empty_text(view: View, title: str) -> str:
    """What the table ``title`` of ``view`` says when it has no row: ``_EMPTY``'s text,
    but "unknown" and why while what the table lists is not known (``View``'s
    ``idle_unknown``, ``training_unknown``, ``pending_unknown``): "none" would say no
    pod sits idle on a GPU, no run trains, no pod waits. Pure."""
    unknown = {
        "Idle GPU holders": view.idle_unknown,
        "Training": view.training_unknown,
        "Pending": view.pending_unknown,
    }.get(title)
    return f"unknown: {unknown}" if unknown else _EMPTY[title]


def fitting_rows(
    rows: Sequence[int],
    frames: Sequence[int],
    height: int,
    cut_order: Sequence[int],
    keep: int = KEEP_ROWS,
    more: Sequence[int] | None = None,
) -> list[int | None]:
    """How many rows of each table a view of ``height`` lines shows: ``n`` rows of the
    table, or ``None`` for one line instead of the table (``Training: 40 runs not
    shown``, or ``Pending: no pod waiting for GPUs`` for an empty one). ``rows[i]``:
    table i's rows; ``frames[i]``: the lines it takes besides its rows (title, borders,
    header, the notes under it). A table shown cut takes ``more[i]`` lines more (one
    each without ``more``), its ``… N more``: why a list, that line wraps below ~55
    columns, and counted as one it made each table a line taller than it is whole.

    Tables give up lines in ``cut_order`` (least important first): the empty ones their
    frame first, then each its last rows down to ``keep``, then, in the same order, each
    down to 1 row, then each down to its one line; the lines the last cut freed go back
    to the tables that can take a row (a table too tall for one is passed over), up to
    ``keep`` rows each first, the most important table first; a table one more row of
    which does not fit is shown whole where that fits (a ``… N more`` on several lines
    takes as many as the rows it hides). What still does not fit
    (a terminal shorter than the one-line tables) is cut by the terminal. Pure."""
    shown: list[int | None] = list(rows)
    more_lines = [1] * len(rows) if more is None else more

    def lines() -> int:
        return sum(
            1 if n is None else frames[i] + n + (more_lines[i] if n < rows[i] else 0)
            for i, n in enumerate(shown)
        )

    for i in cut_order:  # an empty table's frame says no more than "none"
        if lines() > height and rows[i] == 0:
            shown[i] = None
    for floor in (keep, 1):
        for i in cut_order:
            while lines() > height and (n := shown[i]) is not None and n > floor:
                shown[i] = n - 1
    for i in cut_order:  # a frame around no row says no more than "N not shown"
        if lines() > height:
            shown[i] = None
    # lines the last cut freed go back: up to ``keep`` rows each, then the rest, each
    # time to the most important table first; a table one line (None) takes its frame
    # and a row, and one that cannot take a row is passed over, not the end of it (one
    # run folding onto more lines than there are left every table one line); a table
    # one more row of which does not fit may still fit whole, its "… N more" gone
    for ceiling in (keep, max(rows, default=0)):
        for i in reversed(cut_order):
            while rows[i] and (n := shown[i] or 0) < (target := min(rows[i], ceiling)):
                held = shown[i]
                shown[i] = n + 1
                if lines() > height:
                    shown[i] = rows[i] if target == rows[i] else held
                    if lines() > height:
                        shown[i] = held
                    break
    return shown


def _most_more_lines() -> int:
    """The most lines a ``… N more`` line may take: its longest text (N of five digits,
    the longest noun) over ``MIN_WIDTH`` columns, rounded up (61 characters: 4 lines;
    rich folds it onto 3)."""
    longest = max(len(f"… {_count(99_999, title, 'more ')} ({_TALLER})") for title in _ROW_NOUNS)
    return math.ceil(longest / MIN_WIDTH)


def given_back(
    shown: Sequence[int | None],
    rows: Sequence[int],
    room: int,
    cut_order: Sequence[int],
    table_lines: Callable[[int, int | None], int],
    keep: int = KEEP_ROWS,
) -> list[int | None]:
    """``shown`` (``fitting_rows``' answer; ``table_lines(i, n)``: the lines table i
    takes with ``n`` rows, ``None`` its one line, as drawn) with the lines it leaves
    unused in ``room`` given to the tables that can take rows: up to ``keep`` rows
    each, then the rest, the most important table first (``cut_order`` reversed); a
    table that cannot take one more row is passed over, unless it fits whole: its
    ``… N more`` line, on two or three lines when narrow, takes as many as the rows it
    hides. Each table's rows are found by
    halving, so a table of hundreds costs a few counts. When no line is left only the
    tables that could be shown whole are counted. Pure but for ``table_lines``.

    Why: ``fitting_rows`` counts a row as one line, and the fit lowers its budget by
    what wrapped rows take beyond that, for every table: one run folding onto 35 lines
    (a 400-character pod name at 40 columns) made every table one line, 12 of 60 lines
    drawn."""
    out = list(shown)
    used = sum(table_lines(i, n) for i, n in enumerate(out))
    most_more = _most_more_lines()
    for ceiling in (keep, max(rows, default=0)):
        for i in reversed(cut_order):
            have, target = out[i] or 0, min(rows[i], ceiling)
            # with no line left, only a table its "… N more" line's lines can show whole
            whole = target == rows[i]
            if have >= target or (used >= room and not (whole and target - have <= most_more)):
                continue
            others = used - table_lines(i, out[i])
            # whole is at least a line a row: a table of hundreds is not counted
            if whole and target <= room - others and others + table_lines(i, target) <= room:
                out[i] = target  # whole: its "… N more" line, maybe several, is gone too
                used = others + table_lines(i, target)
                continue
            if used >= room or others + table_lines(i, have + 1) > room:
                continue  # not one more row: the next table may take one
            low, high = have + 1, target  # low fits; the most rows that fit
            while low < high:
                mid = (low + high + 1) // 2
                if others + table_lines(i, mid) <= room:
                    low = mid
                else:
                    high = mid - 1
            out[i] = low
            used = others + table_lines(i, low)
    return out


def kept_rows(states: Sequence[str], n: int) -> list[int]:
    """The indexes of the ``n`` rows a GPU list cut to ``n`` rows shows, in its order
    (by node): its free GPUs first, then its first others. Why: cut from the end of
    the node-ordered list, the free GPUs of the last nodes were left out, and a free
    GPU is what someone looking at the list looks for; a GPU whose holders are unknown
    ("unknown") is not one. Pure."""
    free = [k for k, state in enumerate(states) if state == "free"]
    others = [k for k, state in enumerate(states) if state != "free"]
    return sorted((free + others)[:n])


@dataclass(frozen=True)
class _RichView:
    """The rich snapshot: its lines, then its tables, each built at render time for the
    size rich gives (``__rich_console__``), so a Live view fits a resized terminal.
    ``fit_height``: the tables lose rows to fit the terminal's height
    (``fitting_rows``), for a view refreshed in place; a printed one scrolls instead."""

    lines: tuple[Any, ...]
    tables: tuple[tuple[str, Sequence[str], list[tuple[list[str], str | None]]], ...]
    empty: Mapping[str, str]  # what each table, by title, says with no row: ``empty_text``
    fit_height: bool = False

    def __rich_console__(self, console, options):
        if not self.fit_height:
            yield from self.lines
            for title, headers, rows in self.tables:
                yield from _rich_table(title, headers, rows, options.max_width)
            return
        yield from self._fitted(console, options)

    def _fitted(self, console, options) -> list[Any]:
        """``fit``'s parts: what the refreshing view draws."""
        return self.fit(console, options)[0]

    def fit(self, console: Any, options: Any) -> tuple[list[Any], bool]:
        """The lines, then the tables cut to the height left under them; and whether
        that shows every row of every table, no line cut at the right edge (the live
        view's rule for this layout or the compact one: ``top.compact.LiveView``).

        Why counted, not drawn: the rows that fit were found by drawing the whole view
        up to six times a refresh (a table of 500 nodes' GPUs, each time); ``_lines_of``
        counts the lines rich would draw, so the view is drawn once, by the caller.

        Never taller than the terminal: when even one line per table does not fit under
        the wrapped lines (a terminal of ~14 lines at 60 columns, where the header and
        each table's one line wrap), the tables' lines are cut at the right edge instead
        of wrapped (``_cut``) and the tables fitted again, then the header's too; still
        too tall, the view is cut at the bottom with one line saying how many it left
        out. Below ``MIN_WIDTH`` × ``MIN_HEIGHT`` it says so, in one line."""
        width, height = options.max_width, options.max_height
        if width < MIN_WIDTH or height < MIN_HEIGHT:
            small = f"{width}×{height}: too small, gpu-eta top needs {MIN_WIDTH}×{MIN_HEIGHT}"
            return [_cut(small)], False
        counted: dict[tuple[int, int | None, bool], int] = {}

        def section(i: int, n: int | None, cut: bool) -> list[Any]:
            title, headers, r = self.tables[i]
            if n is None:
                parts = [_one_line(title, len(r), self.empty[title])]
            else:
                parts = _rich_table(title, headers, r, width, shown=n)
            return [_cut(p) for p in parts] if cut else parts

        def lines(i: int, n: int | None, cut: bool) -> int:
            if (i, n, cut) not in counted:
                counted[i, n, cut] = sum(_lines_of(console, options, p) for p in section(i, n, cut))
            return counted[i, n, cut]

        def more_lines(i: int, cut: bool) -> int:
            # the "… N more" line of table i shown without a row: its longest (most
            # digits), so a table shown cut is never counted shorter than it is
            title, _, r = self.tables[i]
            more = _more_line(title, len(r))
            return _lines_of(console, options, _cut(more) if cut else more) if r else 0

        titles = [title for title, _, _ in self.tables]
        rows = [len(r) for _, _, r in self.tables]
        order = [titles.index(t) for t in CUT_ORDER if t in titles]
        for cut_head, cut in ((False, False), (False, True), (True, True)):
            head = [_cut(p) for p in self.lines] if cut_head else list(self.lines)
            # besides the rows: a table of none, less its "… N more" line (or lines)
            more = [more_lines(i, cut) for i in range(len(rows))]
            frames = [lines(i, 0, cut) - more[i] for i in range(len(rows))]
            room = height - sum(_lines_of(console, options, p) for p in head)
            budget = room
            for _ in range(5):  # rows that wrap take more than a line: fit again, less room
                shown = fitting_rows(rows, frames, budget, order, more=more)
                excess = sum(lines(i, n, cut) for i, n in enumerate(shown)) - room
                if excess <= 0:
                    # the lines a lowered budget left unused, to the tables that can
                    # take rows (``given_back``)
                    shown = given_back(shown, rows, room, order, lambda i, n, c=cut: lines(i, n, c))
                    parts = [p for i, n in enumerate(shown) for p in section(i, n, cut)]
                    # an empty table's one line (None) leaves out no row
                    kept = [0 if n is None else n for n in shown]
                    return head + parts, not cut and kept == rows
                budget -= excess
        view = head + [p for i in range(len(rows)) for p in section(i, None, True)]
        if len(view) <= height:  # each part is one line now
            return view, False
        kept = height - 1
        more = _cut(f"… {len(view) - kept} more lines ({_TALLER})", "dim")
        return [*view[:kept], more], False


# Below this the watch view only says the terminal is too small: under 20 columns a cut
# line reads as nothing, under 5 lines the summary and the alerts leave no line for the
# tables but the one saying they are cut.
MIN_WIDTH = 20
MIN_HEIGHT = 5


def _cut(part: Any, style: str | None = None) -> Any:
    """``part`` on one line, cut at the right edge with "…" (a ``Text``; a ``str`` made
    one in ``style``); anything else as it is."""
    from rich.text import Text

    if isinstance(part, str):
        return Text(part, style=style or "", no_wrap=True, overflow="ellipsis")
    if not isinstance(part, Text):
        return part
    one = part.copy()
    one.no_wrap, one.overflow = True, "ellipsis"
    return one


def _lines_of(console: Any, options: Any, part: Any) -> int:
    """The lines ``part`` (one of ``_RichView``'s: a ``Text`` or a ``Table`` of ``Text``
    cells) takes when rich draws it in ``options``, counted without drawing it: what
    rich's ``Text`` wraps, and for a table its title, borders and each row's tallest
    cell in the column widths rich gives it. Anything else is drawn to be counted."""
    from rich.table import Table
    from rich.text import Text

    if isinstance(part, Text):
        return _text_lines(console, part, options.max_width, options.justify, options.overflow)
    plain = isinstance(part, Table) and part.box is not None and part.show_edge
    if (
        not plain
        or not part.show_header
        or part.show_footer
        or part.show_lines
        or part.leading
        or part.caption
    ):
        return len(console.render_lines(part, options, pad=False))
    extra = part._extra_width
    widths = part._calculate_column_widths(console, options.update_width(options.max_width - extra))
    n = 2  # its top and bottom borders
    if part.title:
        title = console.render_str(part.title, highlight=False)
        n += _text_lines(console, title, sum(widths) + extra, part.title_justify, None)
    cells = [
        [console.render_str(c.header) if isinstance(c.header, str) else c.header, *c.cells]
        for c in part.columns
    ]
    pad = part.padding[1] + part.padding[3]
    for k, row in enumerate(zip(*cells, strict=True)):
        n += (k == 0) + max(  # the header's row and the rule under it
            1,
            *(
                _text_lines(console, cell, w - pad, c.justify, c.overflow, c.no_wrap)
                for cell, w, c in zip(row, widths, part.columns, strict=True)
            ),
        )
    return n


def _text_lines(
    console: Any,
    text: Any,
    width: int,
    justify: Any,
    overflow: Any,
    no_wrap: bool | None = None,
) -> int:
    """Lines rich draws ``text`` on at ``width`` (what ``Text.__rich_console__`` wraps:
    its own justify, overflow and no_wrap before the ones given)."""
    if isinstance(text, str):
        text = console.render_str(text)
    wrapped = text.wrap(
        console,
        width,
        justify=text.justify or justify or "default",
        overflow=text.overflow or overflow or "fold",
        tab_size=(console.tab_size if text.tab_size is None else text.tab_size) or 8,
        no_wrap=text.no_wrap if text.no_wrap is not None else bool(no_wrap),
    )
    return max(1, len(wrapped))


def _count(n: int, title: str, more: str = "") -> str:
    """``1 more run``, ``37 more runs``: ``n`` rows of the table ``title``."""
    one, many = _ROW_NOUNS[title]
    return f"{n} {more}{one if n == 1 else many}"


def _more_line(title: str, n: int) -> Any:
    """``… 37 more runs (--once or a taller terminal shows them)``: under the table
    ``title`` shown without its last ``n`` rows."""
    from rich.text import Text

    return Text(f"… {_count(n, title, 'more ')} ({_TALLER})")


def _one_line(title: str, n_rows: int, empty: str) -> Any:
    """A table left out for its height (``fitting_rows``' ``None``): one line saying so,
    or, of a table with no row, what it says then (``empty``, ``empty_text``'s: no
    default, as ``_EMPTY`` alone says "none" of idle holders that are unknown)."""
    from rich.text import Text

    if n_rows:
        return Text(f"{title}: {_count(n_rows, title)} not shown ({_TALLER})", style="dim")
    return Text(f"{title}: {empty}", style="dim")


def _rich_table(
    title: str,
    headers: Sequence[str],
    rows: Sequence[tuple[list[str], str | None]],
    max_width: int,
    shown: int | None = None,
) -> list[Any]:
    """One rich table in ``max_width`` and the notes under it: the columns of
    ``_LEAVE_OUT[title]`` left out as needed, named; a table still too wide said to be
    cut at the right edge. ``shown``: its first rows only, then ``… N more`` (``None``:
    every row): its first, but a GPU list keeps its free GPUs first (``kept_rows``). The
    columns are chosen for every row, so cutting rows never changes them."""
    from rich.table import Table
    from rich.text import Text

    n_shown = len(rows) if shown is None else shown
    full = [max([len(h), *(len(r[0][i]) for r in rows)]) for i, h in enumerate(headers)]
    narrowest = [
        min(w, _WRAP_MIN_WIDTH) if h in _WRAPPING else w for h, w in zip(headers, full, strict=True)
    ]
    kept = fitting_columns(headers, narrowest, _LEAVE_OUT.get(title, ()), max_width)
    # the last resort, once every column that may go is gone: the pod name folds onto
    # more lines (a Kubeflow-style name of 60-70 characters pushed ETA and the flags
    # past the right edge, where rich cut them off)
    folding = _WRAPPING
    if "POD" in headers and table_width([narrowest[i] for i in kept]) > max_width:
        folding = _WRAPPING | {"POD"}
        narrowest[headers.index("POD")] = min(full[headers.index("POD")], _WRAP_MIN_WIDTH)
    left_out = [h for i, h in enumerate(headers) if i not in kept]
    # below ~50 columns even that is too wide: rich cuts the table's right edge, so say so
    cut = table_width([narrowest[i] for i in kept]) > max_width
    table = Table(title=title, title_justify="left")
    for i in kept:
        h = headers[i]
        if h in folding:
            table.add_column(h, overflow="fold", min_width=narrowest[i])
        else:
            table.add_column(h, no_wrap=True, min_width=full[i])
    parts: list[Any] = [table]
    if shown is None and _plain_cells(rows, kept):
        # every row listed (--once): drawn by _ListedRows, not laid out by rich cell by
        # cell; the table gets the rows it is measured on, no more
        for probe in _probe_rows(rows, kept):
            table.add_row(*map(Text, probe))
        parts[0] = _ListedRows(table, tuple(rows), tuple(kept))
    else:
        states = [r[0][headers.index("STATE")] for r in rows] if "STATE" in headers else []
        for k in kept_rows(states, n_shown) if states else range(n_shown):
            cells, style = rows[k]
            # Text, not str: rich reads a str as console markup, so the progress bar
            # "[####....]" was a tag and vanished, and a label from outside (a pod
            # name, a GPU model) could style the table or end it with a MarkupError
            table.add_row(*(Text(cells[i]) for i in kept), style=style)
    if n_shown < len(rows):
        parts.append(_more_line(title, len(rows) - n_shown))
    # under the table, not its caption: a caption is as wide as the table, so it was
    # cut with a table too wide
    notes = []
    if left_out:
        notes.append(f"not shown at {max_width} columns: {', '.join(left_out)}")
    if cut:
        notes.append(
            "the rest cut at the right edge"
            if left_out
            else f"cut at the right edge at {max_width} columns"
        )
    if notes:
        parts.append(
            Text("; ".join(notes) + " (a wider terminal or --plain shows them)", style="dim")
        )
    return parts


def _plain_cells(rows: Sequence[tuple[list[str], str | None]], kept: Sequence[int]) -> bool:
    """Every cell of the ``kept`` columns is plain text on one line (no newline, tab or
    control character: rich lays those out its own way)."""
    return all(r[0][i].isprintable() for r in rows for i in kept)


def _probe_rows(
    rows: Sequence[tuple[list[str], str | None]], kept: Sequence[int]
) -> list[list[str]]:
    """Two rows rich measures the ``kept`` columns on as on all of ``rows``: in each
    column, the cell of the longest line (rich's widest measure of a cell) and the cell
    of the longest word (its narrowest). A column's measure is the widest and the
    narrowest of its cells', so these two rows give the widths all of them give."""
    if not rows:
        return []
    widest = [max((r[0][i] for r in rows), key=_cells) for i in kept]
    narrowest = [max((r[0][i] for r in rows), key=_longest_word) for i in kept]
    return [widest, narrowest]


def _longest_word(text: str) -> int:
    """The cells of ``text``'s longest word (all of it without one): what rich's
    ``Text`` measures as the narrowest it can fold to."""
    return max(map(_cells, text.split()), default=_cells(text))


def _cells(text: str) -> int:
    """The terminal cells ``text`` takes (rich's ``cell_len``; ASCII: its length)."""
    from rich.cells import cell_len

    return len(text) if text.isascii() else cell_len(text)


# rich's Table method that gives each column's width (private: rich has no public one)
_RICH_COLUMN_WIDTHS = "_calculate_column_widths"


@dataclass(frozen=True)
class _ListedRows:
    """A table of every row, drawn as rich draws it, byte for byte, styles included
    (``tests/top/test_render.py``), without rich laying out each cell: rich gives the
    column widths (measured on ``table``'s rows, ``_probe_rows``), the title, the borders
    and the header (the same table without rows, its columns of those widths); a cell
    that fits its column on one line is its text padded to the width, in the row's
    style; one that does not (a fold, a cut) is laid out by rich, as in its table. Why:
    rich laid out every cell on its own (a padding, a wrap, a crop, a measure), and the
    listing ``--once`` prints of 6,400 GPUs and 8,000 runs took 7 to 14 s, ~50 times the
    plain text (``bench/top_render.py --cluster-gpus``)."""

    table: Any  # rich's Table with the columns and the probe rows
    rows: tuple[tuple[list[str], str | None], ...]
    kept: tuple[int, ...]  # the columns shown, as indexes of each row's cells

    def laid_out_by_rich(self) -> Any:
        """The table with every row, laid out by rich cell by cell (the slow way)."""
        from rich.table import Table
        from rich.text import Text

        probe = self.table
        table = Table(title=probe.title, title_justify=probe.title_justify)
        for column in probe.columns:
            table.add_column(
                column.header,
                no_wrap=column.no_wrap,
                overflow=column.overflow,
                min_width=column.min_width,
            )
        for cells, style in self.rows:
            table.add_row(*(Text(cells[i]) for i in self.kept), style=style)
        return table

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.padding import Padding
        from rich.segment import Segment
        from rich.style import Style
        from rich.table import Table
        from rich.text import Text

        probe = self.table
        try:
            # rich's own column widths: a private method (rich has no public one), so a
            # rich that renamed it gets every row laid out by rich below, as before
            extra = probe._extra_width
            widths = getattr(probe, _RICH_COLUMN_WIDTHS)(
                console, options.update_width(options.max_width - extra)
            )
        except (AttributeError, TypeError):
            yield self.laid_out_by_rich()
            return
        if sum(widths) + extra > options.max_width:
            # wider than the terminal (cut at its right edge): rich's widths are not the
            # same when given again, so rich lays the table out, every row
            yield self.laid_out_by_rich()
            return
        frame = Table(title=probe.title, title_justify=probe.title_justify)
        for column, width in zip(probe.columns, widths, strict=True):
            frame.add_column(
                column.header, width=width - 2, no_wrap=column.no_wrap, overflow=column.overflow
            )
        drawn = list(console.render(frame, options))
        yield from drawn[:-2]  # all but the bottom border and its new line
        box = frame.box.substitute(
            options, safe=console.safe_box if frame.safe_box is None else frame.safe_box
        )
        columns = list(zip(self.kept, widths, probe.columns, strict=True))
        line = Segment.line()
        null = Style.null()
        folded: dict[tuple[str, int, str | None], list[list[Any]]] = {}
        for k, (cells, style) in enumerate(self.rows):
            last = k == len(self.rows) - 1
            left, vertical, right = (
                Segment(box.foot_left, null), Segment(box.foot_vertical, null),
                Segment(box.foot_right, null),
            ) if last else (
                Segment(box.mid_left, null), Segment(box.mid_vertical, null),
                Segment(box.mid_right, null),
            )  # fmt: skip
            row_style = null + console.get_style(style) if style else null
            pad = Segment(" ", row_style)
            shaped = []
            by_rich = False
            for i, width, column in columns:
                cell = cells[i]
                room = width - 2 - _cells(cell)
                if room >= 0 and width > 2:
                    shaped.append([[pad, Segment(cell + " " * room, row_style or None), pad]])
                elif room >= 0:  # a column of empty cells: rich pads an empty line
                    shaped.append([[Segment(" " * width, row_style)]])
                else:
                    if (cell, i, style) not in folded:
                        folded[cell, i, style] = console.render_lines(
                            Padding(Text(cell), (0, 1)),
                            options.update(
                                width=width,
                                justify=column.justify,
                                no_wrap=column.no_wrap,
                                overflow=column.overflow,
                                height=None,
                                highlight=column.highlight,
                            ),
                            style=row_style,
                        )
                    shaped.append(folded[cell, i, style])
                    by_rich = True
            height = max(len(lines) for lines in shaped)
            if by_rich:  # as rich's table shapes each cell: top-aligned, to the width
                shaped = [
                    Segment.set_shape(Segment.align_top(lines, width, height, row_style), width)
                    for lines, (_, width, _) in zip(shaped, columns, strict=True)
                ]
            for n in range(height):
                segments = [left]
                for j, lines in enumerate(shaped):
                    if j:
                        segments.append(vertical)
                    segments.extend(lines[n])
                segments.append(right)
                if any(segment.style for segment in segments):
                    yield from segments
                else:  # no style: one plain segment, as it prints
                    yield Segment("".join(segment.text for segment in segments))
                yield line
        yield from drawn[-2:]


def render_rich(view: View, tz: tzinfo | None = None, fit_height: bool = False) -> Any:
    """The snapshot as ``rich`` tables (imported lazily: rich is the ``top`` extra), each
    fitted to the terminal's width when drawn (``fitting_columns``). ``fit_height``: also
    to its height (``fitting_rows``), for a view refreshed in place (rich's Live cuts
    what is taller at the bottom); a printed view (``--once``) keeps every row. Its
    ``fit(console, options)`` gives the fitted parts and whether they show every row."""
    from rich.text import Text

    now = view.timestamp
    parts: list[Any] = [
        Text(summary_line(view, tz), style="bold"),
        Text(alerts_line(view), style="red" if view.alerts else None),
    ]
    parts.extend(Text(line, style="red") for line in error_lines(view))
    parts.extend(Text(line, style="yellow") for line in _header_warnings(view))
    tables = (
        (
            "Training",
            JOB_HEADERS,
            [(job_cells(j, now, tz, j.forecast_stale), job_style(j)) for j in view.jobs],
        ),
        (
            "Idle GPU holders",
            IDLE_HEADERS,
            [(_idle_cells(h, bool(view.held_unknown)), "yellow") for h in view.idle],
        ),
        (
            "Pending",
            PENDING_HEADERS,
            [
                (
                    pending_cells(p, now, tz, p.forecast_stale),
                    "red" if p.status in _NO_START else None,
                )
                for p in view.pending
            ],
        ),
        (
            "GPUs",
            GPU_HEADERS,
            [(gpu_cells(g, now, tz, g.forecast_stale), GPU_STYLES.get(g.state)) for g in view.gpus],
        ),
    )
    empty = {title: empty_text(view, title) for title, _, _ in tables}
    return _RichView(tuple(parts), tables, empty, fit_height)
