"""The queue's start-time calibration, kept in the history file across restarts.

Why: ``StartCalibrator`` learns how far real pod starts fall from the predicted
P10–P90 only when a pod it predicted has started — tens of observations take hours
on a real cluster. Lost at every restart, the published start intervals would fall
back to the raw replay's (too narrow) after each rollout. So the calibrator's
errors are saved beside the rest of the forecaster's state: one row of the history
file's ``meta`` table (``START_CALIBRATION_KEY``), written in the same SQLite
transaction discipline as the history, backed up with it, and in memory only when
the history is (a read-only history file is used through an in-memory copy).

Reading follows the rules for every file we read: bounded and validated
(``queue_replay.parse_calibration``); a value unusable as a whole is moved aside to
``START_CALIBRATION_KEY + ".corrupt"`` with one ERROR line and the calibration
starts over; damaged errors inside a usable value are skipped and counted in one
ERROR line. Writing never fails the cycle: an error is one ERROR line (then one
INFO line when it works again).

The pods' raw predictions not yet scored (``StartTracker.waiting``) are kept the same
way, in a second row (``START_PREDICTIONS_KEY``), written when they change, at most every
``PREDICTIONS_SAVE_SECONDS`` after a process' first write. Why: a
``once`` CronJob is a new process every cycle; with the predictions in memory only,
none would ever be scored against its pod's start, and its start intervals would
never be calibrated. A restarted ``serve`` keeps scoring the waits it saw begin too.
Read the same way (``parse_predictions``: bounded, a damaged pod skipped and counted,
an unusable value set aside), but logged as a WARNING naming what is lost
(``load_predictions``), and readable across releases (``PREDICTIONS_VERSION``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from gpu_eta.common.versioned_json import load_versioned
from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import NodeMark, PendingSet, SavedWait, StartTracker
from gpu_eta.forecaster.queue_replay import (
    MAX_CALIBRATION_CHARS,
    ReplayError,
    StartCalibrator,
    parse_calibration,
)

log = logging.getLogger(__name__)

START_CALIBRATION_KEY = "pending_start_calibration"
START_PREDICTIONS_KEY = "pending_start_predictions"
# The predictions row's format. Kept at 1 while a change only adds: a key of the object
# (every release reads ``pods`` and ignores other keys), or an item a release reads as
# optional. A pod's list is read as 5 to 7 items by this release and 5 or 6 by those
# before the nodes kept off, so what a pod gains goes under a key of its own
# (``KEPT_OFF``), not at a pod's end. Raised only for a change an older release would
# misread: it then refuses the row by its version (set aside, WARNING), as this release
# refuses a later one.
PREDICTIONS_VERSION = 1
# the row's keys of the nodes blocked pods are kept off, and of those they fit within
# their grace (``saved_predictions``)
KEPT_OFF = "kept_off"
IN_GRACE = "in_grace"
# at most this many pods' predictions are saved or read (``--pending.max-pods`` is 500 by
# default; pods out of the reads are kept for the vanish grace): the most recently
# read waiting are kept
MAX_SAVED_PODS = 5000
MAX_SAVED_PER_POD = 20  # StartTracker's per_pod
# 5,000 pods × 20 predictions of three 12-character times: ~4 MB
MAX_PREDICTIONS_CHARS = 8 * 1024 * 1024
MAX_NAME_CHARS = 253  # a namespace or pod name (a DNS subdomain at most)
MAX_UID_CHARS = 128  # a pod's uid (a UUID: 36)
MAX_TIMESTAMP = 1e11  # unix seconds, past year 5000: not a time we predicted
# nodes a blocked pod is kept off, saved per pod (the first by name; a pod kept off more
# is kept off the others again only while it fits free GPUs there): ~40 characters each
MAX_SAVED_EXCLUDED_NODES = 256
MAX_COUNT = 1_000_000  # GPU pods on a node, or its allocatable GPU units
# the predictions row is written at the first update of a process (a ``once`` run's only
# one) and then at most this often: every pending pod adds a prediction each cycle, so
# it changes every cycle (0.4 MB at 500 pending pods), and a ``serve`` restarted
# between two writes loses at most this much of its waits' predictions
PREDICTIONS_SAVE_SECONDS = 300.0


_T = TypeVar("_T")


class MetaStore(Protocol):
    """The face of ``HistoryStore`` used here: its small key/value table."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


class SavedStartTracker(StartTracker):
    """A ``StartTracker`` whose calibrator and kept predictions are loaded from
    ``store`` and saved back to it after every update that changed them."""

    def __init__(
        self,
        store: MetaStore,
        calibrator: StartCalibrator | None = None,
        forget_seconds: float = 600.0,
    ) -> None:
        super().__init__(calibrator, forget_seconds=forget_seconds)
        self._store = store
        self._saved = self.calibrator.changes
        self._failing = False
        self._trimming = False  # the last predictions row left something out
        load_calibration(store, self.calibrator)
        self._saved_waits = load_predictions(store, self)
        self._waits_saved_at: float | None = None  # the cycle time of the last write

    def update(self, queue: ClusterQueue, result: PendingSet, now: float) -> PendingSet:
        """``StartTracker.update``, then what changed saved."""
        out = super().update(queue, result, now)
        if self.calibrator.changes != self._saved:
            self.save()
        due = self._waits_saved_at is None or now - self._waits_saved_at >= PREDICTIONS_SAVE_SECONDS
        if due:
            saved = saved_predictions(self.waiting())
            self._log_trimmed(saved)
            waits = saved.text
            if waits != self._saved_waits and self._write(START_PREDICTIONS_KEY, waits):
                self._saved_waits, self._waits_saved_at = waits, now
        return out

    def _log_trimmed(self, saved: SavedPredictions) -> None:
        """One WARNING line when the predictions row starts leaving things out to stay
        within ``MAX_PREDICTIONS_CHARS`` (then one INFO line when it no longer must):
        every write of a large queue would repeat it."""
        trimmed = bool(saved.n_node_lists_dropped or saved.n_pods_dropped)
        if trimmed and not self._trimming:
            log.warning(
                "pending start predictions: the saved row would pass %d characters; the "
                "nodes kept off of the %d pod(s) read longest ago and %d pod(s) are not "
                "saved",
                MAX_PREDICTIONS_CHARS,
                saved.n_node_lists_dropped,
                saved.n_pods_dropped,
            )
        elif self._trimming and not trimmed:
            log.info("pending start predictions: saved whole again")
        self._trimming = trimmed

    def save(self) -> bool:
        """Write the calibrator's errors now; False (logged, never raised) on failure."""
        if not self._write(START_CALIBRATION_KEY, self.calibrator.to_json()):
            return False
        self._saved = self.calibrator.changes
        return True

    def _write(self, key: str, text: str) -> bool:
        """One meta row written; a failure is one ERROR line until a write works again
        (then one INFO line), never raised."""
        try:
            self._store.set_meta(key, text)
        except Exception as err:  # HistoryError, sqlite3 errors: none is worth a cycle
            if not self._failing:
                log.error(
                    "pending start calibration: cannot save it in the history file: %s; "
                    "it is kept in memory and saved again with the next change",
                    err,
                )
            self._failing = True
            return False
        if self._failing:
            log.info("pending start calibration: saved again")
        self._failing = False
        return True


class SavedPredictions(NamedTuple):
    """``saved_predictions``' row and what it left out to stay within its bound."""

    text: str
    n_node_lists_dropped: int  # pods saved without the nodes they are kept off
    n_pods_dropped: int  # pods not saved (beyond those past ``MAX_SAVED_PODS``)


def saved_predictions(
    rows: Sequence[SavedWait], max_chars: int = MAX_PREDICTIONS_CHARS
) -> SavedPredictions:
    """``StartTracker.waiting``'s rows as saved (times to 0.1 s): the most recently
    read ``MAX_SAVED_PODS`` in ``pods``, each pod's latest ``MAX_SAVED_PER_POD``
    predictions and since when it has fit now (a sixth item, only when it has:
    ``StartTracker.blocked`` needs it in a ``once`` run); the nodes a pod is kept off in
    ``kept_off`` (``KEPT_OFF``), one ``[namespace, pod, nodes]`` per pod kept off any,
    each node ``[node, since, pods, units]``, its ``MAX_SAVED_EXCLUDED_NODES`` first by
    name; the nodes it fits within their grace in ``in_grace`` (``IN_GRACE``), one
    ``[namespace, pod, nodes]`` likewise, each node ``[node, since]``.

    Why the nodes under a key of their own rather than as a seventh item of the pod:
    every release reads ``pods`` and ignores keys it does not know, while one that
    takes pods of 5 or 6 items skips a pod of 7 as damaged (an ERROR line), losing
    since when it fit now: rolled back, a forecaster gave every blocked pod the grace
    again. Kept apart, a rolled-back release reads each pod and keeps it blocked.

    At most ``max_chars`` characters (``parse_predictions`` refuses longer rows, and a
    refused row starts the state over, at every run of a ``once`` CronJob): the count of
    pods and of nodes per pod is bounded, their total is not (600 pods kept off 300
    nodes of 60-character names: 11 M characters). Past the bound, the nodes kept off
    of the pods read longest ago are left out first (their predictions are kept), then
    those pods themselves.
    """
    kept = sorted(rows, key=lambda r: r[3])[-MAX_SAVED_PODS:]
    pods: dict[int, str] = {}  # ``kept``'s index → the pod as written
    offs: dict[int, str] = {}  # ``kept``'s index → its nodes kept off as written
    graces: dict[int, str] = {}  # ``kept``'s index → its nodes within their grace
    for i, (ns, pod, uid, seen, starts, fits_since, excluded, grace) in enumerate(kept):
        since = () if fits_since is None else (round(fits_since, 1),)
        saved = [[round(t, 1) for t in s] for s in starts[-MAX_SAVED_PER_POD:]]
        pods[i] = _dumps([ns, pod, uid, round(seen, 1), saved, *since])
        if excluded:
            offs[i] = _dumps([ns, pod, _marks(excluded)])
        if grace:
            first = sorted(grace.items())[:MAX_SAVED_EXCLUDED_NODES]
            graces[i] = _dumps([ns, pod, [[name, round(t, 1)] for name, t in first]])
    empty = {"version": PREDICTIONS_VERSION, "pods": [], KEPT_OFF: [], IN_GRACE: []}
    frame = len(_dumps(empty))

    def joined(parts: dict[int, str]) -> int:
        return sum(map(len, parts.values())) + max(len(parts) - 1, 0)

    total, n_lists, n_pods = frame + joined(pods) + joined(offs) + joined(graces), 0, 0
    for key in range(len(kept)):  # read longest ago first
        if total <= max_chars:
            break
        if key in offs or key in graces:
            for parts in (offs, graces):
                if key in parts:
                    total -= len(parts.pop(key)) + (1 if parts else 0)
            n_lists += 1
    for key in range(len(kept)):
        if total <= max_chars:
            break
        total -= len(pods.pop(key)) + (1 if pods else 0)
        n_pods += 1

    def listed(parts: dict[int, str]) -> str:
        return ",".join(parts[i] for i in sorted(parts, key=lambda i: kept[i][:4]))

    # the nodes only when a pod is kept off any: rows of before read byte for byte
    nodes = "".join(
        f',"{name}":[{listed(parts)}]'
        for name, parts in ((KEPT_OFF, offs), (IN_GRACE, graces))
        if parts
    )
    text = f'{{"version":{PREDICTIONS_VERSION},"pods":[{listed(pods)}]{nodes}}}'
    return SavedPredictions(text, n_lists, n_pods)


def predictions_json(rows: Sequence[SavedWait], max_chars: int = MAX_PREDICTIONS_CHARS) -> str:
    """``saved_predictions``' row alone."""
    return saved_predictions(rows, max_chars).text


def _dumps(value: object) -> str:
    """JSON as the predictions row is written: compact, ``Infinity`` for a P90 beyond
    the horizon."""
    return json.dumps(value, separators=(",", ":"))


def _marks(excluded: dict[str, NodeMark]) -> list[list[object]]:
    """A pod's nodes kept off as saved (``saved_predictions``), the first
    ``MAX_SAVED_EXCLUDED_NODES`` by name."""
    return [
        [name, round(since, 1), n_held, units]
        for name, (since, n_held, units) in sorted(excluded.items())[:MAX_SAVED_EXCLUDED_NODES]
    ]


def parse_predictions(text: str) -> tuple[list[SavedWait], int]:
    """A saved ``predictions_json`` → (the usable pods' rows, how many were skipped).

    Pure; ``ReplayError`` when the text is unusable as a whole (too long, not JSON,
    nested too deeply, another version, no list of pods or of nodes kept off, more than
    ``MAX_SAVED_PODS`` of either).
    A pod whose names are not strings of at most ``MAX_NAME_CHARS`` (its uid a string
    of at most ``MAX_UID_CHARS``, "" when not read), whose times (when last read, and
    since when it fit now: an optional sixth item, None when absent) are not
    times, whose nodes kept off (``KEPT_OFF``'s entry of its name, or, as the previous
    release wrote them, an optional seventh item) are not at most
    ``MAX_SAVED_EXCLUDED_NODES`` ``[name, time, count, count]``, or whose predictions
    are not at most ``MAX_SAVED_PER_POD`` ordered
    (P10 ≤ P50 ≤ P90) times is skipped and counted: one damaged pod is no reason to
    forget the others; so is an entry of ``KEPT_OFF`` without a pod's names. A P90 may
    be infinite (JSON's ``Infinity``, as ``json.dumps``
    writes it): a prediction the replay publishes with its P90 beyond
    ``--pending.horizon`` (P50 within it) is kept like any other, scored when the pod
    starts; refused, such a pod was skipped as damaged, with an ERROR line, at every
    ``once`` run, and never scored there.
    """
    loaded = load_versioned(
        text, version=PREDICTIONS_VERSION, max_size=MAX_PREDICTIONS_CHARS, error=ReplayError
    )
    pods = loaded.get("pods")
    if not isinstance(pods, list) or len(pods) > MAX_SAVED_PODS:
        raise ReplayError(f"pods is not a list of at most {MAX_SAVED_PODS}")
    kept_off, unnamed = _by_pod(loaded.get(KEPT_OFF, []), KEPT_OFF, _excluded)
    in_grace, unnamed_too = _by_pod(loaded.get(IN_GRACE, []), IN_GRACE, _in_grace)
    rows = []
    for row in map(_saved_wait, pods):
        if row is None:
            continue
        marks = kept_off.get((row[0], row[1]), {})
        grace = in_grace.get((row[0], row[1]), {})
        if marks is None or grace is None:
            continue
        rows.append((*row[:6], {**row[6], **marks}, grace))
    return rows, len(pods) - len(rows) + unnamed + unnamed_too


def _by_pod(
    entries: object, name: str, parse: Callable[[object], _T | None]
) -> tuple[dict[tuple[str, str], _T | None], int]:
    """A row's list of ``[namespace, pod, value]`` (``KEPT_OFF``, ``IN_GRACE``) → (each
    pod's ``parse``d value, None when damaged; how many entries name no pod).
    ``ReplayError`` when ``entries`` is not a list of at most ``MAX_SAVED_PODS``."""
    if not isinstance(entries, list) or len(entries) > MAX_SAVED_PODS:
        raise ReplayError(f"{name} is not a list of at most {MAX_SAVED_PODS}")
    out: dict[tuple[str, str], _T | None] = {}
    for entry in entries:
        if isinstance(entry, list) and len(entry) == 3 and _names(entry[0], entry[1]):
            out[(entry[0], entry[1])] = parse(entry[2])
    return out, len(entries) - len(out)


def _names(ns: object, pod: object) -> bool:
    """Whether ``ns`` and ``pod`` are a saved pod's names (``parse_predictions``)."""
    return all(isinstance(n, str) and 0 < len(n) <= MAX_NAME_CHARS for n in (ns, pod))


def _in_grace(value: object) -> dict[str, float] | None:
    """A saved pod's nodes within their grace (its ``IN_GRACE`` entry's third item:
    ``[node, since]``), or None when damaged."""
    nodes = _node_list(value, 2)
    if nodes is None or not all(_time(since) for _, since in nodes):
        return None
    return {name: float(since) for name, since in nodes}


def _node_list(value: object, width: int) -> list[list] | None:
    """``value`` when it is a saved pod's list of nodes: 1 to ``MAX_SAVED_EXCLUDED_NODES``
    lists of ``width`` items, each a node's name first; None otherwise."""
    if not (isinstance(value, list) and 0 < len(value) <= MAX_SAVED_EXCLUDED_NODES):
        return None
    for node in value:
        if not (isinstance(node, list) and len(node) == width):
            return None
        if not (isinstance(node[0], str) and 0 < len(node[0]) <= MAX_NAME_CHARS):
            return None
    return value


def _saved_wait(item: object) -> SavedWait | None:
    """One saved pod, or None when damaged (``parse_predictions``)."""
    if not (isinstance(item, list) and len(item) in (5, 6, 7)):
        return None
    ns, pod, uid, seen, starts = item[:5]
    fits_since = item[5] if len(item) >= 6 else None
    if fits_since is not None and not _time(fits_since):
        return None
    excluded = _excluded(item[6]) if len(item) == 7 else {}
    if excluded is None:
        return None
    names_ok = _names(ns, pod)
    uid_ok = isinstance(uid, str) and len(uid) <= MAX_UID_CHARS
    if not (names_ok and uid_ok and _time(seen) and isinstance(starts, list)):
        return None
    if len(starts) > MAX_SAVED_PER_POD:
        return None
    out = []
    for s in starts:
        if not (
            isinstance(s, list)
            and len(s) == 3
            and _time(s[0])
            and _time(s[1])
            and (_time(s[2]) or s[2] == math.inf)  # P90 beyond the horizon: Infinity
            and s[0] <= s[1] <= s[2]
        ):
            return None
        out.append((float(s[0]), float(s[1]), float(s[2])))
    fits = None if fits_since is None else float(fits_since)
    return (ns, pod, uid, float(seen), out, fits, excluded, {})


def _excluded(value: object) -> dict[str, NodeMark] | None:
    """A saved pod's nodes kept off (its ``KEPT_OFF`` entry's third item, or the seventh
    item of its pod as the previous release wrote it: ``[node, since, pods, units]``),
    or None when damaged."""
    nodes = _node_list(value, 4)
    if nodes is None or not all(_time(t) and _count(n) and _count(u) for _, t, n, u in nodes):
        return None
    return {name: (float(since), n_held, units) for name, since, n_held, units in nodes}


def _count(value: object) -> bool:
    """An int in [0, ``MAX_COUNT``] (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT


def _time(value: object) -> bool:
    """A finite unix time in (0, ``MAX_TIMESTAMP``) (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 < value < MAX_TIMESTAMP
    )


def load_predictions(store: MetaStore, tracker: StartTracker) -> str | None:
    """Give ``tracker`` the predictions saved in ``store``; the saved text (None when
    none was read). A row or pod it cannot use is one WARNING line naming the fallback,
    never raised: an unusable value is set aside and the pods' predictions start over.

    Why a WARNING, not an ERROR: the forecaster goes on as designed without the row
    (the predictions are a cache of waits, rebuilt within ``BLOCKED_GRACE_SECONDS``),
    and the usual cause is a release of another format (a rollback) or a hand edit,
    not a fault to page on. What it costs is said: the pods waiting now are not scored
    on their earlier predictions, and pods found blocked are predicted to start now for
    the grace again. A history file that cannot be read at all stays an ERROR.
    """
    try:
        text = store.get_meta(START_PREDICTIONS_KEY)
    except Exception as err:  # HistoryError, sqlite3 errors: none is worth a crash
        log.error("pending start predictions: cannot read them: %s; starting over", err)
        return None
    if text is None:
        return None
    try:
        rows, skipped = parse_predictions(text)
    except ReplayError as err:
        kept = _set_aside(store, START_PREDICTIONS_KEY, text, predictions_json([]))
        log.warning(
            "pending start predictions in the history file are unusable (%s); %s; "
            "starting over: %s",
            err,
            kept,
            _FALLBACK,
        )
        return None
    if skipped:
        log.warning(
            "pending start predictions: %d damaged pod(s) skipped, %d loaded; for those: %s",
            skipped,
            len(rows),
            _FALLBACK,
        )
    tracker.restore(rows)
    return text


# what reading no saved predictions for a pod costs (``load_predictions``' log lines)
_FALLBACK = (
    "the pods waiting now are scored from their next prediction, and pods blocked by "
    "something other than GPUs are given the 5-minute grace again"
)


def load_calibration(store: MetaStore, calibrator: StartCalibrator) -> int:
    """Restore ``calibrator`` from ``store``; the number of errors loaded (0: none saved,
    or unusable: then set aside, with one ERROR line). Never raises for damage."""
    try:
        text = store.get_meta(START_CALIBRATION_KEY)
    except Exception as err:  # HistoryError, sqlite3 errors: none is worth a crash
        log.error("pending start calibration: cannot read it: %s; starting over", err)
        return 0
    if text is None:
        return 0
    try:
        errors, skipped = parse_calibration(text)
    except ReplayError as err:
        kept = _set_aside(store, START_CALIBRATION_KEY, text, StartCalibrator().to_json())
        log.error(
            "pending start calibration in the history file is unusable (%s); %s, "
            "start intervals are calibrated again from the next pod starts",
            err,
            kept,
        )
        return 0
    if skipped:
        log.error(
            "pending start calibration: %d damaged value(s) skipped, %d loaded",
            skipped,
            len(errors),
        )
    calibrator.restore(errors)
    return calibrator.n_obs


def _set_aside(store: MetaStore, key: str, text: str, fresh: str) -> str:
    """Keep the damaged value of ``key`` (its first ``MAX_CALIBRATION_CHARS``) under
    ``key + ".corrupt"`` for a human, and start ``key`` over as ``fresh``."""
    aside = key + ".corrupt"
    try:
        store.set_meta(aside, text[:MAX_CALIBRATION_CHARS])
        store.set_meta(key, fresh)
    except Exception as err:  # as in load_calibration
        return f"it could not be moved aside ({err})"
    return f"moved to meta key {aside!r}"
