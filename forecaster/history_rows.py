"""Row conversions of the history file: pure (no SQLite, no I/O).

How a run's parts are written to and read back from ``runs`` and ``epoch_ends`` rows:
the packed float64 epoch lists, the features' JSON, a running row with its stored
epoch ends (``StoredEnds``) and a finished row as the models learn from it (a run in
percent of its steps as a job of its own). Why separate from ``history``: these are
pure and can be read and tested without a database; the store (``history``) and the file handling
(``history_file``) both use them. ``HistoryError`` is defined here, the lowest of the
three modules, so that all of them raise it; ``history`` re-exports it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from gpu_eta.common.text import utf8_encodable
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.runs import Feature, Run, thinned, validate_run

_MAX_FEATURE_TEXT = 256
# Schema 2 followed a run that reports only steps in percent of them (plan 100); those
# rows are marked with this unit by the migration to schema 3 (see ``history``'s module doc).
PERCENT_UNIT = "percent"
_JOB_SUFFIX = " (percent)"


class HistoryError(ForecasterError):
    """The history file cannot be used (corrupt, foreign, newer schema, unwritable)."""


class HistoryConflict(HistoryError):
    """Another process wrote the state a write was conditional on (``record``'s
    ``expect``): a second forecaster on the same file. Nothing was written."""


@dataclass(frozen=True, slots=True)
class StoredRun:
    """A run as stored: the Run record plus where it ran."""

    run: Run
    node: str
    last_seen: float


def monotone_epoch_times(
    start: float, ends: Iterable[tuple[float, float]], planned: float
) -> tuple[tuple[float, float], ...]:
    """``(0, start)`` then the epoch ends that keep epochs and times strictly consistent.

    Pure. Drops non-finite values, epochs beyond ``planned``, ends before the start
    and any end whose time goes backwards (an exporter restart can replay an older
    snapshot): what remains always passes ``validate_run``.
    """
    out = [(0.0, float(start))]
    for epoch, ts in sorted(ends):
        if not (finite(epoch) and finite(ts)):
            continue
        if epoch <= out[-1][0] or epoch > planned or ts < out[-1][1]:
            continue
        out.append((float(epoch), float(ts)))
    return tuple(out)


def pack_epoch_times(times: Sequence[tuple[float, float]]) -> bytes:
    """Epoch list → little-endian float64 pairs (loading 50,000 runs stays well under a second)."""
    flat = array("d", (float(v) for pair in times for v in pair))
    if sys.byteorder != "little":
        flat.byteswap()
    return flat.tobytes()


def unpack_epoch_times(blob: bytes) -> tuple[tuple[float, float], ...]:
    """Inverse of ``pack_epoch_times``; raises ValueError on a damaged blob."""
    if not isinstance(blob, bytes) or len(blob) % 16:
        raise ValueError("epoch list is not float64 pairs")
    flat = array("d")
    flat.frombytes(blob)
    if sys.byteorder != "little":
        flat.byteswap()
    return tuple(zip(flat[0::2], flat[1::2], strict=True))


def unencodable(
    fields: Iterable[tuple[str, object]], features: Mapping[str, Feature] | None = None
) -> str | None:
    """The name of the first text among ``fields`` (name, value) and ``features``
    (keys and text values) that UTF-8 cannot encode (a lone surrogate), or None.
    SQLite stores text as UTF-8: such text fails the write it is in."""
    for name, value in fields:
        if isinstance(value, str) and not utf8_encodable(value):
            return name
    for key, value in (features or {}).items():
        if not utf8_encodable(str(key)) or (isinstance(value, str) and not utf8_encodable(value)):
            return "feature " + ascii(str(key))
    return None


def unholdable_number(
    epochs_planned: float, start_timestamp: float, seen_timestamp: float
) -> str | None:
    """The name of the first of a run update's numbers the file cannot hold as a run's,
    or None: a plan that is not finite and > 0, a start or a time seen that is not
    finite. Why refuse them at the write: SQLite binds NaN as NULL, which the columns
    refuse, failing the whole transaction (every run's write with it); an infinite or
    negative plan was stored and read back as a damaged row at every cycle, never
    finished; an infinite time seen never lets its run vanish. Pure."""
    if not (finite(epochs_planned) and epochs_planned > 0):
        return f"epochs_planned {epochs_planned!r}"
    if not finite(start_timestamp):
        return f"start_timestamp {start_timestamp!r}"
    if not finite(seen_timestamp):
        return f"seen_timestamp {seen_timestamp!r}"
    return None


RUNNING_COLUMNS = (
    "id, run_id, namespace, pod, container, node, epochs_planned, start_timestamp, "
    "features, util_sum, util_weight, memory_sum, memory_weight, last_seen"
)


@dataclass(slots=True)
class StoredEnds:
    """A running run's stored epoch ends (epoch → time) and the epoch list last built
    from them with its (start, planned), kept until either changes."""

    ends: dict[float, float]
    times: tuple[tuple[float, float], ...] | None = None
    basis: tuple[object, object] = (None, None)
    # ends added since ``times`` was last read, each following the one before: joined
    # to it at the next read (``epoch_times``). Why not a new tuple per end: that copied
    # the whole list at every end, O(k·n) for k ends onto n (10,000 onto 20,000: 2.5 s
    # against 0.04 s to rebuild the list)
    appended: list[tuple[float, float]] = field(init=False, default_factory=list)
    # the earliest end's time (inf: none): ``record`` asks the file about ends before
    # a run's start only when this is before it or unknown (a restarted run,
    # ``_drop_ends_before_start``); in the steady state it asks nothing
    earliest: float = field(init=False, default=math.inf)

    def __post_init__(self) -> None:
        try:
            self.earliest = float(min(self.ends.values(), default=math.inf))
        except (TypeError, ValueError):  # text in the file (a hand edit): always ask
            self.earliest = -math.inf

    def add(self, epoch: float, ts: float) -> None:
        """A new stored end; the epoch list grows by it when it follows the list's last
        pair (what ``monotone_epoch_times`` would give), else is rebuilt when next read."""
        self.ends[epoch] = ts
        if not ts >= self.earliest:
            self.earliest = ts if finite(ts) else -math.inf
        if self.times is None:
            return
        last = self.appended[-1] if self.appended else self.times[-1]
        if (
            finite(epoch)
            and finite(ts)
            and last[0] < epoch <= self.basis[1]  # type: ignore[operator]
            and ts >= last[1]
        ):
            self.appended.append((float(epoch), float(ts)))
        else:
            self.times = None
            self.appended.clear()

    def drop(self, epochs: Iterable[float]) -> None:
        """Stored ends deleted from the file (thinned): gone here too, the epoch list
        rebuilt when next read."""
        for epoch in epochs:
            self.ends.pop(epoch, None)
        self.times = None
        self.appended.clear()
        self.__post_init__()

    def epoch_times(self, start: float, planned: float) -> tuple[tuple[float, float], ...]:
        if self.times is None or self.basis != (start, planned):
            self.times = monotone_epoch_times(start, self.ends.items(), planned)
            self.basis = (start, planned)
        elif self.appended:
            self.times = (*self.times, *self.appended)
        self.appended.clear()
        return self.times


def running_from_row(row: tuple, stored: StoredEnds) -> StoredRun:
    (_, rid, ns, pod, container, node, planned, start, feats, us, uw, ms, mw, last_seen) = row
    _check_text(
        rid, run_id=rid, namespace=ns, pod=pod, container=container, node=node, features=feats
    )
    _check_planned(rid, planned)
    for value in (start, us, uw, ms, mw, last_seen):
        if not is_number(value):
            raise HistoryError(f"stored run {rid!r}: a number column holds {value!r}")
    features = dict(load_features(feats))
    if uw > 0:
        features["gpu_utilization_ratio"] = us / uw
    if mw > 0:
        features["memory_utilization_ratio"] = ms / mw
    run = Run(
        run_id=rid,
        epochs_planned=planned,
        epoch_times=stored.epoch_times(start, planned),
        features=MappingProxyType(features),
        completed=None,
        namespace=ns,
        pod=pod,
        container=container,
    )
    return StoredRun(run=run, node=node, last_seen=last_seen)


def finished_from_row(row: tuple, features_cache: dict[str, Mapping[str, Feature]]) -> Run:
    run_id, ns, pod, container, planned, state, feats, times = row
    _check_text(run_id, run_id=run_id, namespace=ns, pod=pod, container=container, features=feats)
    _check_planned(run_id, planned)
    try:
        epoch_times = unpack_epoch_times(times)
    except ValueError:
        raise HistoryError(f"stored run {run_id!r} has a damaged epoch list") from None
    features = features_cache.get(feats)
    if features is None:
        features = features_cache[feats] = as_own_job(MappingProxyType(load_features(feats)))
    return thinned(  # to learn from: at most runs.HISTORY_POINTS points (the file keeps all)
        validate_run(
            Run(
                run_id=str(run_id),
                epochs_planned=float(planned),
                epoch_times=epoch_times,
                features=features,
                completed=state == "completed",
                namespace=str(ns),
                pod=str(pod),
                container=str(container),
            )
        )
    )


def _check_text(run: object, /, **columns: object) -> None:
    """Text another tool wrote that is not UTF-8 (read by ``common.text.lenient_utf8``): the row is
    damaged for this run only, like a number column holding text."""
    for name, value in columns.items():
        if isinstance(value, str) and not utf8_encodable(value):
            raise HistoryError(f"stored run {run!r}: column {name!r} is not valid UTF-8 text")


def _check_planned(run_id: object, planned: object) -> None:
    """SQLite keeps any value in a REAL column (a hand edit can store text there)."""
    if isinstance(planned, bool) or not isinstance(planned, int | float):
        raise HistoryError(f"stored run {run_id!r}: epochs_planned {planned!r} is not a number")
    if not (math.isfinite(planned) and planned > 0):
        raise HistoryError(f"stored run {run_id!r}: epochs_planned {planned!r} is not > 0")


def to_learn_from(run: Run) -> Run:
    """A finished run as ``finished`` reads it back: thinned, a run in percent of its
    steps as a job of its own."""
    features = as_own_job(run.features)
    if features is not run.features:
        run = dataclasses.replace(run, features=features)
    return thinned(run)


def as_own_job(features: Mapping[str, Feature]) -> Mapping[str, Feature]:
    """A finished run counted in percent of its steps is a job of its own to the models
    (``<job_name> (percent)``): its time per unit is 1/100 of the run where the same
    job's runs in steps have 1/steps, and pooled they would read as noise. Any other
    run's features are returned as they are."""
    job = features.get("job_name")
    if features.get("progress_unit") != PERCENT_UNIT or not (isinstance(job, str) and job):
        return features
    return MappingProxyType({**features, "job_name": job + _JOB_SUFFIX})


def dump_features(features: Mapping[str, Feature]) -> str:
    clean: dict[str, Feature] = {}
    for key, value in features.items():
        if isinstance(value, str):
            clean[str(key)[:64]] = value[:_MAX_FEATURE_TEXT]
        elif isinstance(value, int | float) and math.isfinite(value):
            clean[str(key)[:64]] = float(value)
    return json.dumps(clean, sort_keys=True)


def load_features(text: str) -> Mapping[str, Feature]:
    try:
        raw = json.loads(text or "{}")
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def finite_or_zero(value: float | None) -> float:
    return float(value) if finite(value) else 0.0  # type: ignore[arg-type]


def is_number(value: object) -> bool:
    """Whether a value SQLite handed back is a number (an int or a float, not a bool).
    Why ask: a REAL column keeps the text or blob another tool wrote into it (a
    ``sqlite3`` shell's ``UPDATE``), and arithmetic on it raised. Pure."""
    return isinstance(value, int | float) and not isinstance(value, bool)
