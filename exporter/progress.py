"""Progress reports: validate a wire body, fold a report into the latest progress.

Pure functions only (no I/O, no clock: callers pass ``now``), shared by the HTTP
listener and the log collector so both sources obey the same rules:

- ``parse_report(body)`` turns an untrusted ``POST /progress`` body (or the JSON of a
  ``GPU_ETA_PROGRESS`` log marker) into a ``Report`` or raises ``MalformedReport``
  (not JSON / not an object) or ``InvalidReport`` (a field that defines progress is
  wrong: type, negative, non-finite, epoch > epochs, run_id, container, ...) whose
  message is one line, safe to send back to the sender. A bad *free-form* number
  (loss, accuracy, ...) is no reason to refuse the epoch and step beside it: it is
  left out and named in ``Report.skipped``, for the caller to count and tell.
- ``advance(previous, report, ...)`` folds a report into the container's previous
  ``Progress``: it decides when a new run starts (so two trainings in one notebook
  never become one series), carries known fields forward, stamps epoch ends (at
  most one per 1/400 of the run's plan: ``stamps_epoch_end``) and gives a run that
  ends without a planned total the totals it reached.
- ``ended_by_exit(progress, now)`` applies that end to a plan-less HTTP run whose pod
  succeeded without its sender saying ``end``.

The wire format is documented in ``docs/progress.md``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from gpu_eta.common.k8s_names import DNS_LABEL, DNS_SUBDOMAIN
from gpu_eta.common.progress_bound import (
    MAX_PROGRESS,
    MIN_PLANNED,
    STEP_CELLS,
    plausible_plan,
    step_cell,
)
from gpu_eta.exporter.readings import Progress

MAX_BODY_BYTES = 4096
MAX_METRICS = 16
# How long the progress of a pod that left the pod list is still served: twice
# Prometheus' default scrape interval (1 m), so two scrapes see a Job's final report
# however soon its pod is deleted (``ProgressStore.retain`` says why a fixed time)
GONE_GRACE_SECONDS = 120.0
# The most ``--progress.gone-grace`` may be: meanwhile the forecaster and ``top`` see
# the run present, so a run cancelled with its pod would look alive that long
MAX_GONE_GRACE_SECONDS = 3600.0
# gpu_eta_report.client keeps copies of MAX_METRICS, MAX_PROGRESS and the name patterns
# (it installs alone in training images); tests/report/test_client.py checks they match.
_EMPTY: Mapping[str, float] = MappingProxyType({})
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_CONTAINER = DNS_LABEL
_EARLIEST_TIMESTAMP = 946_684_800.0  # 2000-01-01: anything older is a unit mistake
_FUTURE_SKEW_SECONDS = 300.0
EVENTS = ("start", "progress", "end")
_COUNTERS = ("epoch", "epochs", "step", "steps", "batch_size")
_KNOWN = frozenset({*_COUNTERS, "run_id", "run_start", "container", "event", "metrics"})
# identity the sender may state but never decides (the source address does): ignored
_IGNORED = frozenset({"pod", "namespace", "node", "uid"})


class ReportError(ValueError):
    """A report that cannot be used; ``str(err)`` is one line naming the problem.

    ``result`` is what it is counted as, ``status`` the HTTP answer it gets,
    ``retry_after`` the whole seconds its answer's ``Retry-After`` says (None: the
    same report is refused again whenever it comes)."""

    result = "invalid"
    status = 400
    retry_after: int | None = None

    def __init__(self, reason: str, logged: str | None = None):
        super().__init__(reason)
        self._logged = logged

    @property
    def logged(self) -> str:
        """The reason as the exporter's log says it: ``str(err)`` unless it names what
        the sender wrote (a free-form key: its length only, as bodies are never logged)."""
        return str(self) if self._logged is None else self._logged


class MalformedReport(ReportError):
    """Not a JSON object at all (counted as ``malformed``)."""

    result = "malformed"


class InvalidReport(ReportError):
    """Well-formed JSON with a bad value (counted as ``invalid``)."""

    result = "invalid"


class TooManyRuns(ReportError):
    """A valid report that would start a run beyond its container's cap on new runs
    (``exporter.progress_runs``; counted as ``too_many_runs``, answered 429).

    Not ``invalid``: the same report is accepted once the cap allows a run again, so
    the sender is told to wait, as for the per-pod rate limit: ``retry_after`` is that
    wait in whole seconds (the answer's ``Retry-After``)."""

    result = "too_many_runs"
    status = 429

    def __init__(self, reason: str, retry_after: int):
        super().__init__(reason)
        self.retry_after = retry_after


class SupersededReport(ReportError):
    """A report of a named run that a later start under its ``run_id`` replaced
    (``superseded``; counted as ``superseded``, answered 409): it changes nothing.

    Not ``invalid``: the report is well-formed, only late (the old reporter's queue
    still sending after the new one started), and the same report is refused again
    whenever it comes, so the sender is told why rather than asked to wait."""

    result = "superseded"
    status = 409


@dataclass(frozen=True, slots=True)
class Report:
    """One validated progress report; ``None`` means "not stated in this report".

    ``epoch`` counts completed epochs (1 after the first epoch ended), ``step`` counts
    completed steps of the whole run (global step), ``steps`` the run's planned total.
    """

    epoch: float | None = None
    epochs: float | None = None
    step: float | None = None
    steps: float | None = None
    batch_size: float | None = None
    run_id: str | None = None
    run_start: float | None = None
    container: str | None = None
    event: str = "progress"
    metrics: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    # names the sender says have no current value (``null`` in ``metrics``: its value
    # turned NaN, say): removed from the run, not kept at their last value
    removed: frozenset[str] = frozenset()
    # one-line reasons for the free-form fields ``parse_report`` left out (a value over
    # MAX_PROGRESS, a bad name, beyond MAX_METRICS): the report is used without them
    skipped: tuple[str, ...] = ()


def _number(name: str, value: object, *, allow_negative: bool = False) -> float:
    """A finite JSON number (bool is not a number here), or InvalidReport."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidReport(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:  # a JSON integer of hundreds of digits
        raise InvalidReport(f"{name} is too large") from None
    if not math.isfinite(number):
        raise InvalidReport(f"{name} must be finite")
    if number < 0 and not allow_negative:
        raise InvalidReport(f"{name} must not be negative")
    if abs(number) > MAX_PROGRESS:
        raise InvalidReport(f"{name} is too large")
    return number


# A ``null`` in ``metrics``: the name has no current value (``parse_report``)
_REMOVE = object()


def _free_form(
    items: Mapping[str, object],
) -> tuple[Mapping[str, float], frozenset[str], tuple[str, ...], tuple[str, ...]]:
    """The usable free-form numbers of a report, the names it removes, a reason for each
    field left out, and the same reasons for a log line.

    A bad free-form field is skipped, not a reason to refuse the report: these are
    numbers a framework logs beside the progress (HF Trainer's ``total_flos`` is
    1e17 and more for a large model), and refusing the whole report for one of them froze the
    epoch and step a sender reported with it. When more than ``MAX_METRICS`` usable
    names remain, the first ones in sorted (code point) order are kept: the same
    choice whatever order the sender's JSON library writes keys in, so the same
    series are exported report after report (the client applies the same rule). The
    removals (``_REMOVE``) are bounded alike, apart: a null never takes a number's place.

    The log's reasons give a name's length, never the name: a key is the sender's
    text (a token pasted as a key), and bodies are never logged.
    """
    usable: dict[str, float] = {}
    removed: list[str] = []
    skipped: list[str] = []
    logged: list[str] = []
    for name, value in items.items():
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            skipped.append(f"bad field name {str(name)[:40]!r}")
            logged.append(f"bad field name ({len(str(name))} characters)")
            continue
        if value is _REMOVE:
            removed.append(name)
            continue
        try:
            usable[name] = _number(name, value, allow_negative=True)
        except InvalidReport as err:
            skipped.append(str(err))
            # ``_number``'s reasons begin with the name
            logged.append(f"a name of {len(name)} characters{str(err)[len(name) :]}")
    kept: list[frozenset[str]] = []
    for kind in (usable, removed):
        first = frozenset(sorted(kind)[:MAX_METRICS])  # all of them, up to MAX_METRICS
        beyond = [name for name in kind if name not in first]
        skipped.extend(f"{name} beyond {MAX_METRICS} free-form fields" for name in beyond)
        logged.extend(
            f"a name of {len(name)} characters beyond {MAX_METRICS} free-form fields"
            for name in beyond
        )
        kept.append(first)
    if len(usable) > MAX_METRICS:
        usable = {name: value for name, value in usable.items() if name in kept[0]}
    return (MappingProxyType(usable) if usable else _EMPTY), kept[1], tuple(skipped), tuple(logged)


def skipped_note(report: Report, limit: int = 160) -> str:
    """`` (skipped N free-form fields: reason; reason)``, or "" when none was skipped.

    For the one-line answer to the sender (who would otherwise never learn why a
    number it sent is missing), bounded so a body of hundreds of bad names still
    gets a short line.
    """
    if not report.skipped:
        return ""
    count = len(report.skipped)
    reasons = "; ".join(report.skipped)
    if len(reasons) > limit:
        reasons = reasons[: limit - 3].rstrip() + "..."
    noun = "field" if count == 1 else "fields"
    return f" (skipped {count} free-form {noun}: {reasons})"


def _no_constant(name: str) -> object:
    raise MalformedReport(f"not JSON: {name} is not a JSON value")


# One decoder for every report: ``json.loads`` with any keyword builds a new
# JSONDecoder (and its scanner) per call, ~15 % of a report's handling time in the
# listener (bench/progress_ingest.py). Decoding keeps no state between calls.
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def _loads_strict(text: str) -> object:
    """json.loads that refuses NaN/Infinity literals (not JSON) and deep nesting."""
    return _DECODER.decode(text)


def parse_report(body: bytes | str, *, now: float | None = None) -> Report:
    """Validate an untrusted report body (≤ ``MAX_BODY_BYTES``) into a ``Report``.

    ``now`` (unix seconds) bounds ``run_start`` from above when given, so a sender
    cannot claim a run that starts next year.

    Refused: a bad field that defines progress or the run (epoch, epochs, step,
    steps, batch_size, run_id, run_start, container, event). Skipped and named in
    ``Report.skipped``: a bad free-form field (see ``_free_form``).
    """
    if len(body) > MAX_BODY_BYTES:
        raise InvalidReport(f"body larger than {MAX_BODY_BYTES} bytes")
    try:
        text = body.decode("utf-8") if isinstance(body, bytes) else body
        data = _loads_strict(text)
    except MalformedReport:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        reason = str(err).splitlines()[0][:80] if str(err) else type(err).__name__
        raise MalformedReport(f"not JSON: {reason}") from None
    if not isinstance(data, dict):
        raise MalformedReport(f"expected a JSON object, got {type(data).__name__}")

    values: dict[str, float | None] = {}
    for name in _COUNTERS:
        raw = data.get(name)
        values[name] = None if raw is None else _number(name, raw)
    run_start = data.get("run_start")
    if run_start is not None:
        run_start = _number("run_start", run_start)
    run_id = data.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        raise InvalidReport("run_id must be 1-64 characters of [A-Za-z0-9._-]")
    container = data.get("container")
    if container is not None and not isinstance(container, str):
        raise InvalidReport("container must be a DNS-1123 label")
    event = data.get("event", "progress")
    if not isinstance(event, str):
        raise InvalidReport("event must be one of start, progress, end")
    extra: dict[str, object] = {
        k: v for k, v in data.items() if k not in _KNOWN and k not in _IGNORED
    }
    nested = data.get("metrics")
    bad_nested: list[str] = []
    if isinstance(nested, dict):
        # a null there removes the name (the client's value turned NaN); at the top
        # level a null is skipped like any value that is not a number
        extra.update({k: _REMOVE if v is None else v for k, v in nested.items()})
    elif nested is not None:  # only free-form numbers lost: skipped like a bad one
        bad_nested.append("metrics must be an object of numbers")
    metrics, removed, skipped, logged = _free_form(extra)
    skipped = (*bad_nested, *skipped)
    logged = (*bad_nested, *logged)
    # an end may say nothing more: the run's counters are already known
    if (
        event not in ("start", "end")
        and not metrics
        and not removed
        and all(v is None for v in values.values())
    ):
        note = f"; skipped: {'; '.join(skipped)}"[:160] if skipped else ""
        said = f"; skipped: {'; '.join(logged)}"[:160] if logged else ""
        raise InvalidReport(
            f"no progress fields (epoch, step, ...){note}",
            logged=f"no progress fields (epoch, step, ...){said}",
        )
    report = Report(
        epoch=values["epoch"],
        epochs=values["epochs"],
        step=values["step"],
        steps=values["steps"],
        batch_size=values["batch_size"],
        run_id=run_id,
        run_start=run_start,
        container=container,
        event=event,
        metrics=metrics,
        removed=removed,
        skipped=skipped,
    )
    return check_report(report, now=now)


def check_report(
    report: Report, *, now: float | None = None, previous: Progress | None = None
) -> Report:
    """``report`` unchanged if it obeys the wire format's rules, else ``InvalidReport``.

    ``now`` (the report's time) bounds ``run_start`` from above, by
    ``_FUTURE_SKEW_SECONDS``, except in a report that continues ``previous`` (the
    container's stored run) under the start its sender stated (``continues_stated_run``):
    that start was held to the clock when it was first stored, and is ahead of ``now``
    only when the node's clock was stepped back since (NTP correcting a clock that ran
    ahead), which refused every report of the running run until the clock caught up.
    Why not clamp such a start to ``now`` instead: the start is the run's identity
    (``superseded``), and a clamped one, earlier than the start stored, would refuse the
    run's reports as late ones of a replaced run.

    The one definition of a valid report, whatever built it: ``parse_report`` for
    HTTP bodies and marker lines, ``logformats.fold`` for recognised log lines (whose
    numbers come from regexes, not JSON), and the store before every merge. So a log
    line can never store what an HTTP report would be refused for.

    Free-form metrics are checked strictly here: the builders leave bad ones out
    before (``parse_report`` skips them, ``logformats`` never reads them), so one
    reaching this point is a bug in its builder, not the sender's mistake.
    """
    for name in _COUNTERS:
        value = getattr(report, name)
        if value is not None:
            _number(name, value)
    epoch, epochs = report.epoch, report.epochs
    step, steps = report.step, report.steps
    # a total is a plan the forecaster reads: one rule for both (``plausible_plan``)
    if epochs is not None and not plausible_plan(epochs):
        raise InvalidReport(f"epochs must be at least {MIN_PLANNED:g}")
    if epoch is not None and epochs is not None and epoch > epochs:
        raise InvalidReport(f"epoch {epoch:g} > epochs {epochs:g}")
    if steps is not None and not plausible_plan(steps):
        raise InvalidReport(f"steps must be at least {MIN_PLANNED:g}")
    if step is not None and steps is not None and step > steps:
        raise InvalidReport(f"step {step:g} > steps {steps:g}")
    if report.batch_size is not None and report.batch_size < 1:
        raise InvalidReport("batch_size must be at least 1")
    run_id = report.run_id
    if run_id is not None and (not isinstance(run_id, str) or not _RUN_ID.match(run_id)):
        raise InvalidReport("run_id must be 1-64 characters of [A-Za-z0-9._-]")
    if report.run_start is not None:
        run_start = _number("run_start", report.run_start)
        if run_start < _EARLIEST_TIMESTAMP:
            raise InvalidReport("run_start must be unix seconds")
        if (
            now is not None
            and run_start > now + _FUTURE_SKEW_SECONDS
            and not continues_stated_run(previous, report)
        ):
            raise InvalidReport("run_start is in the future")
    container = report.container
    if container is not None and (
        not isinstance(container, str) or not _CONTAINER.match(container)
    ):
        raise InvalidReport("container must be a DNS-1123 label")
    if report.event not in EVENTS:
        raise InvalidReport("event must be one of start, progress, end")
    if len(report.metrics) > MAX_METRICS:
        raise InvalidReport(f"at most {MAX_METRICS} free-form fields, got {len(report.metrics)}")
    for name, value in report.metrics.items():
        if not isinstance(name, str) or not _METRIC_NAME.match(name):
            raise InvalidReport(f"bad field name {str(name)[:40]!r}")
        _number(name, value, allow_negative=True)
    if len(report.removed) > MAX_METRICS:
        raise InvalidReport(f"at most {MAX_METRICS} removed names, got {len(report.removed)}")
    for name in report.removed:
        if not isinstance(name, str) or not _METRIC_NAME.match(name) or name in report.metrics:
            raise InvalidReport(f"bad removed name {str(name)[:40]!r}")
    return report


def derived_run_id(
    namespace: str, pod: str, container: str, source: str, start: float, after: str = ""
) -> str:
    """A stable run id for runs whose sender named none (logs, plain curl).

    Derived, not random, so a restarted exporter re-reading the same log lines
    arrives at the same id. ``after``: the id of the run before, for a run whose start
    alone would give that run's id (``unnamed_run_id``).
    """
    key = f"{namespace}/{pod}/{container}/{source}/{start:.3f}".encode()
    if after:
        key += f"/after/{after}".encode()
    return hashlib.blake2b(key, digest_size=6).hexdigest()


def unnamed_run_id(
    previous: Progress | None, namespace: str, pod: str, container: str, source: str, start: float
) -> str:
    """The id of a new run whose sender named none (``starts_new_run`` decided it): its
    start's (``derived_run_id``), or, when that start is not after the start the run
    before stated (``_sender_start``, within 1 ms), one derived from it and the run
    before's id. Pure.

    Why: a sender that states its ``run_start`` but no ``run_id`` (curl, a script)
    keeps that start while the rules begin new runs (its counter goes back, its plan
    changes, a start after the end), and an id of the start alone was the run before's:
    two trainings under one id, the epoch going back within it, read by the forecaster
    as one run. Chained on the id before, every such run differs from the one before
    it and from the earlier ones of the chain, and folding the same reports again (a
    restart: the state file and journal keep the run before) gives the same ids.
    """
    if _chained(previous, start):
        assert previous is not None
        return derived_run_id(namespace, pod, container, source, start, after=previous.run_id)
    return derived_run_id(namespace, pod, container, source, start)


def _chained(previous: Progress | None, start: float) -> bool:
    """Whether a new unnamed run stating ``start`` follows ``previous`` under the same
    stated start (not after the one ``previous``'s sender stated, within 1 ms): its id
    is chained on ``previous``'s, and it begins when it is seen, not at that start."""
    return previous is not None and start <= _sender_start(previous) + _SAME_START_SECONDS


# Two start times this close are one start: the client sends its start rounded to 1 ms.
_SAME_START_SECONDS = 0.001


def _sender_start(progress: Progress) -> float:
    """The start ``progress``'s sender states, which its reports are matched by: the
    one it stated when the run began, else (none stated, or a row stored before it was
    kept) the run's start."""
    stated = progress.sender_start_timestamp
    return progress.run_start_timestamp if stated is None else stated


def continues_stated_run(previous: Progress | None, report: Report) -> bool:
    """Whether ``report`` names ``previous``'s run by its ``run_id`` and by the start
    its sender stated (``_sender_start``), within the client's 1 ms rounding. Pure.

    Such a report states no start of its own: the start is the stored run's, so
    ``check_report`` does not hold it to the report's time (``starts_new_run`` is
    False for it too).
    """
    return (
        previous is not None
        and report.run_id is not None
        and report.run_id == previous.run_id
        and report.run_start is not None
        and abs(report.run_start - _sender_start(previous)) <= _SAME_START_SECONDS
    )


def superseded(previous: Progress | None, report: Report) -> bool:
    """Whether ``report`` is of a named run that a later start under its ``run_id``
    replaced: its ``run_start`` is before the start the current run's sender stated,
    by more than the client's 1 ms rounding.

    Only under the same ``run_id``: there a late report would be merged into the new
    training (an old ``end`` ending it for good). A late report under another id (the
    client's random ids: a cell run again while the old reporter's end is on its way)
    starts a run of its own, which the new training's next report replaces again; and
    an older start under another id is as often a sender still training beside the
    newer one (two notebook kernels in one container), which must not be refused.

    A named run is (``run_id``, ``run_start``): the client takes its start once, when
    the reporter is made, and sends it in every report, the ones still queued after
    ``end()`` timed out too, while a new reporter (the same notebook cell run again)
    states a later one. The sender runs on this node, on its clock, so an earlier start
    is an older run; it is gone (``starts_new_run`` replaced it), and its late end would
    end the new training with the new reports in it. Only against a start its sender
    stated: one the exporter chose (a run begun again at its end, a row stored before
    the sender's was kept) may be later than the start that sender states.
    """
    return (
        previous is not None
        and report.run_id is not None
        and report.run_id == previous.run_id
        and report.run_start is not None
        and previous.sender_start_timestamp is not None
        and report.run_start < previous.sender_start_timestamp - _SAME_START_SECONDS
    )


# A time this much or more before a run's latest report is the node's clock stepped
# back (NTP correcting a clock that ran ahead: a node booted with its RTC in local
# time), not lines read out of order (two streams of one container). Why 60 s: a
# smaller step leaves a bucket or a run's times at most 60 s behind, while a step of
# hours held every container's new runs for hours (``progress_runs``) and stamped a
# run's epoch ends before its start.
CLOCK_STEP_SECONDS = 60.0


def starts_new_run(previous: Progress | None, report: Report) -> bool:
    """Whether ``report`` begins a run rather than continuing ``previous``.

    A named run id decides alone, with its ``run_start``: a named run is (``run_id``,
    ``run_start``), so a report naming the current run with a later ``run_start`` (by
    more than the client's 1 ms rounding; a ``start``, or any report when the start was
    lost: a failed send, a start refused and dropped after a hold) is a new run, with
    its own start and no end,
    whether the current one ended (a notebook cell re-running
    ``ProgressReporter(run_id="exp")`` after ``end()``) or not (the same, while the old
    reporter's end is still on its way: the old run is replaced, and its late reports
    are refused, ``superseded``). A repeated ``start`` of the current run changes
    nothing: a copy of its start (within 1 ms: a retried or reordered POST, a proxy's
    retry; begun again after the end it would be a run at epoch 0 that never ends), or
    one without a ``run_start`` while the run has not ended (curl; after the end it
    is a new training). The start compared is the one the run's sender stated
    (``_sender_start``): a run begun again at the end keeps the end as its start, later
    than its sender's. The sender runs on this node, on its clock: a new training's
    start is after the last one's. Kept ended, with the old start, the forecaster
    would read a new training done at once (its end after its start) and never forecast
    it. Without a run id (logs, curl) a ``start`` is a new run, but a copy of the
    running run's stated start (within 1 ms, as for a named run); a run restarts when the
    epoch or step counter goes back or the planned totals change (but one epoch more
    planned from the plan's last epoch on in a log's run, ``_one_epoch_more``): the signature of
    a notebook that trains again; and any report with a counter or total but another
    ``end`` after the run's ``end`` (its next training may go on from where it stopped:
    a single-epoch run ended at epoch 1, the next one's first report is epoch 1 again).
    """
    if previous is None:
        return True
    if report.run_id is not None:
        if report.run_id != previous.run_id:
            return True
        if report.run_start is not None:
            # a later start is a later training, whatever the event: its ``start`` may
            # be lost (a failed send, a start refused and dropped after the hold)
            return report.run_start > _sender_start(previous) + _SAME_START_SECONDS
        return report.event == "start" and previous.ended_timestamp is not None
    if report.event == "start":
        # as for a named run: a copy of the running run's start (a retried POST) is no
        # new run; without a run_start, or after the end, it is
        return not (
            report.run_start is not None
            and previous.ended_timestamp is None
            and abs(report.run_start - _sender_start(previous)) <= _SAME_START_SECONDS
        )
    if previous.ended_timestamp is not None and report.event != "end":
        # a counter or total says a training goes on; free-form numbers alone (a test
        # score logged after the end) still belong to the run that ended
        return any(v is not None for v in (report.epoch, report.step, report.epochs, report.steps))
    if (
        report.epochs is not None
        and previous.epochs is not None
        and report.epochs != previous.epochs
    ):
        return not _one_epoch_more(previous, report)
    if report.epoch is not None and previous.epoch is not None and report.epoch < previous.epoch:
        return True
    if (
        report.epoch is None
        and report.step is not None
        and previous.step is not None
        and report.step < previous.step
    ):
        return True
    return bool(
        report.epochs is None
        and previous.epochs is None
        and report.steps is not None
        and previous.steps is not None
        and report.steps != previous.steps
    )


def _one_epoch_more(previous: Progress, report: Report) -> bool:
    """Whether ``report`` plans one epoch more than ``previous`` from the end of its
    plan's last epoch on: ``previous`` at its last epoch begun (N-1 of N done), the
    report at N or beyond of N + 1. Pure.

    Why a run goes on there: a log's ``Epoch k/M`` bars counted from 0 plan M epochs
    until an ``Epoch M/M`` bar shows the loop ran over 0..M (``logformats``): its
    (M+1)-th epoch is the same training's. A new training starts from its first
    epochs, so its counter goes back (a new run, as ever). Only a log's run: a sender
    states its plan, and one a report longer is another training (its first reports
    may be lost: a 4-epoch training first heard at epoch 3 was spliced onto the
    3-epoch one before it)."""
    return (
        previous.source == "log"
        and report.epochs == previous.epochs + 1
        and previous.epoch is not None
        and report.epoch is not None
        and previous.epoch >= previous.epochs - 1
        and report.epoch >= previous.epochs
    )


def merged_metrics(
    old: Mapping[str, float], old_removed: frozenset[str], report: Report
) -> tuple[Mapping[str, float], frozenset[str]]:
    """A run's free-form numbers and removed names after ``report``.

    A run's name set (its numbers and its removed names) is frozen once it holds
    ``MAX_METRICS`` names: a later new name is left out (``beyond_run_names`` says
    which, for the answer and the counter), however many reports bring new ones. Why:
    docs/metrics.md promises at most 16 ``gpu_eta_training_value`` series per run and
    docs/scrape-tuning.md sizes Prometheus on it; keeping the newest names instead let
    each report retire 16 series and create 16 new ones. Room left is filled in sorted
    order, as ``parse_report`` keeps a report's first 16 names. A removed name (a null:
    no current value) keeps its slot, so removals cannot churn the set either; a value
    for it later brings it back. A null for a name the run does not hold does nothing.
    """
    if not report.metrics and not report.removed:
        return old, old_removed
    merged = dict(old)
    removed = set(old_removed)
    for name in sorted(report.metrics):
        if name in merged or name in removed or len(merged) + len(removed) < MAX_METRICS:
            merged[name] = report.metrics[name]
            removed.discard(name)
    for name in report.removed:
        if merged.pop(name, None) is not None:
            removed.add(name)
    return (MappingProxyType(merged) if merged else _EMPTY), frozenset(removed)


def beyond_run_names(progress: Progress, report: Report) -> tuple[str, ...]:
    """One-line reasons for the numbers of ``report`` its run had no room for: its name
    set was frozen at ``MAX_METRICS`` names (``merged_metrics``). ``progress`` is the
    run after ``report`` was folded in."""
    held = len(progress.metrics) + len(progress.removed_metrics)
    if held < MAX_METRICS:
        return ()
    return tuple(
        f"{name} beyond {MAX_METRICS} names of this run"
        for name in sorted(report.metrics)
        if name not in progress.metrics
    )


def _reached_totals(epoch: float | None, step: float | None) -> tuple[float | None, float | None]:
    """The planned totals an ended plan-less run is given: the counters it reached.

    With a step, the steps only: the forecaster then follows the run by its steps,
    whose last point is its last report, so the duration it learns runs to the end;
    with epochs fixed it would follow the epochs and learn the time to the last whole
    epoch (a run stopped by a quality check in its second epoch would be learnt as one
    epoch long). Without a step, the epochs.

    A counter that is no plan (``progress_bound.plausible_plan``: None, 0, a fraction
    of a first epoch) gives no total: the wire format's totals are plans
    (``check_report``, the same rule), and a row breaking that would be refused by the
    store (``check_progress``), so the ``end`` itself would be answered 400; a run
    that did not get through one epoch or step has no duration worth learning either.
    """
    if step is not None and plausible_plan(step):
        return None, step
    return (epoch if epoch is not None and plausible_plan(epoch) else None), None


def stamps_epoch_end(last: float, epoch: float, planned: float | None) -> bool:
    """Whether a run whose published epoch ended at ``last`` publishes a new epoch end
    when it reports ``epoch`` (above ``last``), ``planned`` its planned epochs. Pure.

    True when the run reaches its plan, is one epoch on from ``last`` (reported epoch
    by epoch), or enters another 1/``STEP_CELLS`` of its plan than ``last``'s
    (``progress_bound.step_cell``, the cells the forecaster keeps a run's points by).
    A run without a plan (none, or no ``plausible_plan``) is divided as if its plan
    were what it has reached (``last``, at least ``MIN_PLANNED``). Else the report is
    held: the run keeps publishing ``last`` and its end time (``advance``).

    Why: an epoch that moves on at every report (a fractional epoch: Hugging Face's
    raw ``state.epoch``; samples counted in the epoch field) made every report an
    epoch end, a point the forecaster reads and stores, so a run that never reached
    its plan grew by one per report. Now a planned run publishes at most
    ``STEP_CELLS`` + 1 of them whatever its number of reports. A run of whole epochs,
    each reported once, keeps all of them: up to ``STEP_CELLS`` planned epochs each is
    a cell of its own, and a longer one reported epoch by epoch shows its evaluation
    passes only with every epoch (``forecaster.runs.thinned``). Why the epoch is held
    with its end: the forecaster pairs the two series (``runs_from_series``), and an
    epoch published beside an earlier end time would be read as reached then, one new
    pair per report again.

    Why a run without a plan is divided by what it has reached: its plan is unknown
    until it ends, and then it is what it reached (``_reached_totals``), never less
    than anything published before. Cells of 1/``STEP_CELLS`` of the epoch reached so
    far are never wider than the cells of that final plan, so the forecaster, keeping
    the ended run's points one per cell, still finds a point in every cell; whole-epoch
    crossings alone would leave a run of two epochs three points. The count is bounded
    by the run's progress, not by its reports: ``STEP_CELLS`` below ``MIN_PLANNED``,
    then one each time the epoch grows by 1/``STEP_CELLS`` of itself, about
    ``STEP_CELLS`` × ln(reached) more (at most 14,235 up to ``MAX_PROGRESS``), where
    every increase was one before. Measured over 200,000 reports: 1,593 ends for a
    fractional epoch reaching 20, 2,720 for 32 samples a report (both 200,000 before)."""
    if planned is not None and plausible_plan(planned):
        if epoch >= planned:
            return True
        scale, last_cell = planned, step_cell(last, planned)
    else:
        scale = max(last, MIN_PLANNED)
        # ``last`` is the whole of that plan: its cell is STEP_CELLS, not what
        # last * STEP_CELLS / last rounds to (at times just under: an end too soon)
        last_cell = STEP_CELLS if last >= MIN_PLANNED else step_cell(last, scale)
    if epoch - last == 1.0:
        return True
    cell = step_cell(epoch, scale)
    return cell is None or cell != last_cell


def advance(
    previous: Progress | None,
    report: Report,
    *,
    namespace: str,
    pod: str,
    container: str,
    source: str,
    now: float,
) -> Progress:
    """Fold ``report`` into ``previous`` (the container's latest progress from ``source``).

    Raises ``InvalidReport`` when the merged state is impossible (epoch above the
    planned epochs of the same run); the caller then keeps ``previous`` unchanged.

    An ``end`` of a run that has no planned total at all (neither ``epochs`` nor
    ``steps``, after the merge: a loop that trains until a quality target) makes its
    totals what it reached (``_reached_totals``). Why: the forecaster stores a
    finished run as completed only when its progress reached its planned total, so
    such a run would never enter history, and the job's next runs, which report no
    plan either, would have no earlier durations to be forecast from. A run that has
    a plan keeps it: an early-stopped run is not completed. An ``end`` that starts a
    new run (``starts_new_run``) is no finish seen, only a first report, so nothing
    is fixed there, nor for a run that reached no whole epoch or step.

    After such an end the fixed totals are the run's plan like any other. A report
    naming the same run id is checked against them: one with the same counters
    changes nothing (a repeated ``end`` is idempotent), one that omits the totals
    keeps them, one whose epoch or step goes beyond them is refused as any
    ``epoch > epochs``: the sender called ``end`` before it had finished; a ``start``
    naming it is a new run (``starts_new_run``), whose start is the report's
    ``run_start``, or ``now`` when that is not after the end (the ended run's). A report
    without a run id after an end (logs, curl, a marker line) that carries a counter
    or total is a new run, whatever its counters, except another ``end``
    (``starts_new_run``): such a sender's next training may go on from where the last
    one stopped. An ``end`` that would start a run and carries no counter is refused:
    there is nothing to end. Every run's ``end`` is kept
    as ``ended_timestamp`` for that rule, in the state file and journal too.

    An epoch above the run's stamps an epoch end (``epoch_end_timestamp`` = ``now``)
    when it is the run's first, comes with an ``end``, or ``stamps_epoch_end`` says so;
    else it is held: checked against the plan, but the run keeps its epoch and end, so
    the two published series stay a true pair and a run gets at most one end per
    1/``STEP_CELLS`` of its plan, whatever its number of reports. The held epoch and
    its report time are kept (``held_epoch``, ``held_epoch_timestamp``): checked
    against a changed plan as the run's epoch, and published as they are by an ``end``
    that names no epoch (a bare ``end``, one with a step only) and taken into the
    totals a plan-less run reaches. Why: the run's last reports are often held, and
    without them the run ended at the end of the cell before, under 1/``STEP_CELLS``
    of its plan behind what it reported; an unthinned run would publish that epoch
    with that time. The ``start`` that begins a run and already counts epochs (a run
    resumed from a checkpoint: the client's ``initial_epoch``) has them ended at the
    run's start, not ``now``: they were done before it, and an end stamped when the
    start arrived would read as all of them done in that moment. The forecaster reads
    epochs ended at a run's start as its origin (``forecaster.runs.resume_point``).

    Raises ``SupersededReport`` for a report of a run a later start replaced
    (``superseded``), before anything else: its counters are another training's.
    """
    if superseded(previous, report):
        assert previous is not None and report.run_start is not None
        raise SupersededReport(
            f"run {report.run_id} of run_start {report.run_start:.3f} was replaced by its "
            f"start of run_start {_sender_start(previous):.3f}; nothing stored"
        )
    new_run = starts_new_run(previous, report)
    counters = (report.epoch, report.step, report.epochs, report.steps)
    if new_run and report.event == "end" and all(v is None for v in counters):
        # a bare end of a run not known here (another container's, one the exporter
        # lost): nothing to end, and a run of nothing would take a run-start allowance
        raise InvalidReport("end of no run known here: send it with its epoch or step")
    if report.event == "start" and not new_run:
        # a repeated start of the current run (a retried or reordered POST, curl) changes
        # nothing: its counters are the run's first ones (epoch 0), not where it is now
        assert previous is not None
        return previous
    if new_run:
        start = report.run_start if report.run_start is not None else now
        if (
            previous is not None
            and previous.ended_timestamp is not None
            and report.run_id == previous.run_id
            and start <= previous.ended_timestamp
        ):
            # a start not after the end (another reporter, its clock behind the
            # node's): the new run starts at the end at the earliest
            start = max(now, previous.ended_timestamp)
        run_id = report.run_id or unnamed_run_id(previous, namespace, pod, container, source, start)
        if report.run_id is None and _chained(previous, start):
            # chained on the run before (its stated start is not after that run's): it
            # began now, at that run's end or last report at the earliest. Kept at the
            # stated start, its first epoch read as lasting since the run before began
            assert previous is not None
            start = max(now, previous.ended_timestamp or previous.last_report_timestamp)
        base = Progress(
            namespace=namespace,
            pod=pod,
            container=container,
            run_id=run_id,
            run_start_timestamp=start,
            last_report_timestamp=now,
            source=source,
            sender_start_timestamp=report.run_start,
        )
        prev_epoch = None
    else:
        assert previous is not None
        base = previous
        prev_epoch = previous.epoch

    def pick(new: float | None, old: float | None) -> float | None:
        return old if new is None else new

    ends = report.event == "end" and not new_run
    # a run's times never go back: the node's clock stepped back (NTP correcting one
    # that ran ahead) stamps at the run's latest report; an epoch reached while the
    # clock is that far behind is held (``stepped_back``)
    stamp = max(now, base.last_report_timestamp)
    stepped_back = now <= base.last_report_timestamp - CLOCK_STEP_SECONDS
    reported = _epoch_beyond(base, report.epoch)
    epoch = pick(reported, base.epoch)
    epoch_end = base.epoch_end_timestamp
    # the epoch held back (none in a new run's base), kept until a report names an
    # epoch beyond it, or a plan below it with the epoch the run stands at
    held_epoch, held_at = base.held_epoch, base.held_epoch_timestamp
    if reported is not None or (
        report.epoch is not None
        and report.epochs is not None
        and held_epoch is not None
        and held_epoch > report.epochs
    ):
        held_epoch = held_at = None
    if ends and held_epoch is not None:
        epoch, epoch_end = held_epoch, held_at  # the run ends at it, as it was reported
        held_epoch = held_at = None
    epochs = pick(report.epochs, base.epochs)
    step = pick(report.step, base.step)
    steps = pick(report.steps, base.steps)
    if ends and epochs is None and steps is None:
        epochs, steps = _reached_totals(epoch, step)
    latest = epoch if held_epoch is None else held_epoch
    if latest is not None and epochs is not None and latest > epochs:
        raise InvalidReport(f"epoch {latest:g} > epochs {epochs:g} of run {base.run_id}")
    if step is not None and steps is not None and step > steps:
        raise InvalidReport(f"step {step:g} > steps {steps:g} of run {base.run_id}")
    metrics, removed_metrics = merged_metrics(base.metrics, base.removed_metrics, report)
    # the epoch the run started at (the ``start_epoch`` field says why), set below
    begun_epoch = base.start_epoch
    if reported is not None and prev_epoch is not None and reported > prev_epoch:
        if (
            epoch_end is None  # the run's first end
            or report.event == "end"  # its last progress, published as it is
            or (not stepped_back and stamps_epoch_end(prev_epoch, reported, epochs))
        ):
            epoch_end = stamp
        else:  # held: the published epoch stays the one its end time is of
            epoch = prev_epoch
            held_epoch, held_at = reported, stamp
    elif reported is not None and prev_epoch is None and reported > 0 and epoch_end is None:
        # first word we hear of this run already counts an epoch: a start's counters are
        # where the run starts (a resume from a checkpoint), ended at its start, which
        # the forecaster reads as the run's origin; any other report's, by its time
        epoch_end = base.run_start_timestamp if report.event == "start" else stamp
        if epoch_end == base.run_start_timestamp:
            # ended at the run's start: no epoch of the run's own time (``start_epoch``)
            begun_epoch = reported
    begun = start_step(report, base.run_start_timestamp, stamp) if new_run else base.start_step
    begun = start_within(begun, step, steps)
    return Progress(
        namespace=namespace,
        pod=pod,
        container=container,
        run_id=base.run_id,
        run_start_timestamp=base.run_start_timestamp,
        last_report_timestamp=stamp,
        source=source,
        epoch=epoch,
        epochs=epochs,
        step=step,
        steps=steps,
        batch_size=pick(report.batch_size, base.batch_size),
        epoch_end_timestamp=epoch_end,
        ended_timestamp=stamp if report.event == "end" else base.ended_timestamp,
        sender_start_timestamp=base.sender_start_timestamp,
        metrics=metrics,
        removed_metrics=removed_metrics,
        held_epoch=held_epoch,
        held_epoch_timestamp=held_at,
        start_step=begun,
        start_epoch=start_within(begun_epoch, epoch, epochs),
        epochs_from_zero=base.epochs_from_zero,
    )


def start_step(report: Report, run_start: float, stamp: float) -> float | None:
    """The step a run begun by ``report`` started at: the report's step when it is the
    run's ``start`` (a resume from a checkpoint: the client's ``initial_step``) or
    starts the run at its own time (``run_start`` ``stamp``: no ``run_start`` stated,
    curl, a log line), else None, and None for step 0. Pure.

    Why: steps carry no time on the wire, so the forecaster times a step when a scrape
    first shows it. A run resumed at step 8,000 of 10,000 read as 8,000 steps done in
    its first scrape interval: its forecast was seconds, and stored so, the job's next
    runs were forecast a fraction of their length. Published
    (``gpu_eta_training_start_step``), it is the run's origin, as epochs ended at its
    start are (``advance``). A first report that is no start made after the run's
    start (its start lost) counts steps done in the run's time: none."""
    step = report.step
    if step is None or not step > 0:
        return None
    return step if report.event == "start" or run_start >= stamp else None


def start_within(begun: float | None, count: float | None, planned: float | None) -> float | None:
    """``begun`` (a run's start step or start epoch) while the run's step and planned
    steps (its epoch and planned epochs) are not below it, else None. Pure.

    Why drop it rather than refuse the report: a run's step may go back under its
    start step and stay in the run (a named run's counter reset for a new phase); the
    start step then says nothing of where the run's work began, and refused, the run's
    ``end`` was lost, and a row saved so (ended by its pod's exit at the step it
    reached) was discarded as damaged at the next start, the run lost with it. A
    stored start epoch above the row's epoch (hand-edited, damaged) is dropped alike:
    the row's progress is kept."""
    if begun is None:
        return None
    if (count is not None and count < begun) or (planned is not None and planned < begun):
        return None
    return begun


def _epoch_beyond(base: Progress, epoch: float | None) -> float | None:
    """``epoch`` when it is beyond the epoch ``base`` reached (its epoch held back, else
    its published one), else None: the report leaves the run's epoch as it was. Pure.

    Why: an epoch not beyond what the run reached says nothing new of its progress
    (a retried POST arriving late, an ``end`` naming the epoch last reported, a loop
    that reports its evaluation pass by an earlier epoch). Taken, a lower epoch would
    be published beside the end time of a later one (a pair the forecaster reads as
    reached then), and a repeated held epoch would move its time to the repeat's.
    A run whose counter really goes back is a new run when it names none
    (``starts_new_run``); a named run keeps the epoch it reached until it passes it.
    """
    if epoch is None:
        return None
    reached = base.held_epoch if base.held_epoch is not None else base.epoch
    return epoch if reached is None or epoch > reached else None


def ended_by_exit(progress: Progress, now: float) -> Progress | None:
    """``progress`` ended because its pod succeeded (exit code 0), or None when
    that changes nothing: the run has a planned total (``epochs`` or ``steps``: an
    early stop is no completion, whatever the exit code) or has ended already.

    For HTTP senders that forgot ``end()``: their pod succeeding (a Job's pod
    completing, every container exited 0) is the end they did not send, so it is
    applied as ``advance`` applies an ``end`` of the run: its epoch held back is
    published, the totals become what it reached (``_reached_totals``, none for a run
    short of one whole epoch or step) and ``ended_timestamp`` is ``now`` (at least its
    last report). The caller (the
    store, from the scheduler) decides which runs: HTTP entries of pods that
    succeeded (``ProgressStore.end_finished`` says why not log entries); this is the
    rule only.

    Unlike an ``end`` report, ``last_report_timestamp`` stays the run's last report:
    no report came. Why it matters: it is when the forecaster places the run's last
    step, so the duration learnt is the run's own, not up to the moment the exporter
    noticed the exit (an exporter down or a watch cut while the Job completed would
    stretch it).

    A row ``check_progress`` accepts stays one it accepts, so the store saves the
    result unchecked: the totals are counters the row already held (each a plan,
    ``plausible_plan``, as the wire format's totals must be), and ``ended_timestamp``
    is ``now`` (the caller's clock) or the row's own last report.
    """
    if progress.epochs is not None or progress.steps is not None:
        return None
    if progress.ended_timestamp is not None:
        return None
    epoch, epoch_end = progress.epoch, progress.epoch_end_timestamp
    if progress.held_epoch is not None:  # the run's last epoch, held back: as ``advance``
        epoch, epoch_end = progress.held_epoch, progress.held_epoch_timestamp
    epochs, steps = _reached_totals(epoch, progress.step)
    return replace(
        progress,
        start_step=start_within(progress.start_step, progress.step, steps),
        epoch=epoch,
        epoch_end_timestamp=epoch_end,
        held_epoch=None,
        held_epoch_timestamp=None,
        epochs=epochs,
        steps=steps,
        ended_timestamp=max(now, progress.last_report_timestamp),
    )


def _check_held(progress: Progress) -> None:
    """``InvalidReport`` unless ``progress``'s held epoch is one ``advance`` could have
    kept: none, or a number with its report time, above the published epoch and within
    the planned epochs."""
    held, at = progress.held_epoch, progress.held_epoch_timestamp
    if held is None and at is None:
        return
    if held is None or at is None:
        raise InvalidReport("held_epoch and held_epoch_timestamp go together")
    _number("held_epoch", held)
    if progress.epoch is None or held <= progress.epoch:
        raise InvalidReport("held_epoch must be above epoch")
    if progress.epochs is not None and held > progress.epochs:
        raise InvalidReport(f"held_epoch {held:g} > epochs {progress.epochs:g}")


def _check_held_end(progress: Progress) -> None:
    """``InvalidReport`` unless ``progress``'s held end of a log's last epoch is one the
    log reader could have kept (``ProgressStore.note_held_end``): none, or a whole
    epoch above the shown one and within the plan, with its line's time."""
    held, at = progress.held_end_epoch, progress.held_end_timestamp
    if held is None and at is None:
        return
    if held is None or at is None:
        raise InvalidReport("held_end_epoch and held_end_timestamp go together")
    if progress.source != "log":
        raise InvalidReport("held_end_epoch is a log row's")
    _number("held_end_epoch", held)
    _number("held_end_timestamp", at)
    if held != int(held) or progress.epoch is None or held <= progress.epoch:
        raise InvalidReport("held_end_epoch must be a whole epoch above epoch")
    if progress.epochs is not None and held > progress.epochs:
        raise InvalidReport(f"held_end_epoch {held:g} > epochs {progress.epochs:g}")


def _check_start_step(progress: Progress) -> None:
    """``InvalidReport`` unless ``progress``'s start step is one ``advance`` could have
    kept: none, or a step within the planned steps."""
    begun = progress.start_step
    if begun is None:
        return
    _number("start_step", begun)
    if progress.steps is not None and begun > progress.steps:
        raise InvalidReport(f"start_step {begun:g} > steps {progress.steps:g}")


def _check_start_epoch(progress: Progress) -> None:
    """``InvalidReport`` unless ``progress``'s start epoch is one ``advance`` could have
    kept: none, or an epoch not above the run's epoch nor its planned epochs."""
    begun = progress.start_epoch
    if begun is None:
        return
    _number("start_epoch", begun)
    if progress.epoch is None:
        raise InvalidReport("start_epoch without an epoch")
    if begun > progress.epoch:
        raise InvalidReport(f"start_epoch {begun:g} > epoch {progress.epoch:g}")
    if progress.epochs is not None and begun > progress.epochs:
        raise InvalidReport(f"start_epoch {begun:g} > epochs {progress.epochs:g}")


_POD_NAME = DNS_SUBDOMAIN
_SOURCES = ("http", "log")


def check_progress(progress: Progress) -> Progress:
    """``progress`` unchanged if a store could have built it, else ``InvalidReport``.

    For rows read back from disk (state file, journal), which may be damaged or
    hand-edited: the same bounds as a report, plus the identity fields the listener
    derives from the pod cache (DNS names), so nothing is published from disk that
    could not have been published from the wire.
    """
    for name in ("namespace", "pod"):
        value = getattr(progress, name)
        if not isinstance(value, str) or not _POD_NAME.match(value):
            raise InvalidReport(f"{name} is not a Kubernetes name")
    container = progress.container
    if not isinstance(container, str) or (container and not _CONTAINER.match(container)):
        raise InvalidReport("container must be a DNS-1123 label")
    if not isinstance(progress.run_id, str) or not _RUN_ID.match(progress.run_id):
        raise InvalidReport("run_id must be 1-64 characters of [A-Za-z0-9._-]")
    if progress.source not in _SOURCES:
        raise InvalidReport("source must be http or log")
    for name in (
        "run_start_timestamp",
        "last_report_timestamp",
        "epoch_end_timestamp",
        "ended_timestamp",
        "sender_start_timestamp",
        "held_epoch_timestamp",
    ):
        value = getattr(progress, name)
        if value is not None:
            _number(name, value)
    _check_held(progress)
    _check_held_end(progress)
    _check_start_step(progress)
    _check_start_epoch(progress)
    if progress.epochs_from_zero is not None:
        _number("epochs_from_zero", progress.epochs_from_zero)
        if not progress.epochs_from_zero >= 1 or progress.epochs_from_zero != int(
            progress.epochs_from_zero
        ):
            raise InvalidReport("epochs_from_zero must be a whole number of epochs")
    check_report(
        Report(
            epoch=progress.epoch,
            epochs=progress.epochs,
            step=progress.step,
            steps=progress.steps,
            batch_size=progress.batch_size,
            metrics=progress.metrics,
            removed=progress.removed_metrics,
        )
    )
    if len(progress.metrics) + len(progress.removed_metrics) > MAX_METRICS:
        raise InvalidReport(f"over {MAX_METRICS} free-form names")
    return progress
