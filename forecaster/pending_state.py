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
"""

from __future__ import annotations

import logging
from typing import Protocol

from gpu_eta.forecaster.kube_state import ClusterQueue
from gpu_eta.forecaster.pending import PendingSet, StartTracker
from gpu_eta.forecaster.queue_replay import (
    MAX_CALIBRATION_CHARS,
    ReplayError,
    StartCalibrator,
    parse_calibration,
)

log = logging.getLogger(__name__)

START_CALIBRATION_KEY = "pending_start_calibration"
CORRUPT_KEY = START_CALIBRATION_KEY + ".corrupt"


class MetaStore(Protocol):
    """The face of ``HistoryStore`` used here: its small key/value table."""

    def get_meta(self, key: str) -> str | None: ...

    def set_meta(self, key: str, value: str) -> None: ...


class SavedStartTracker(StartTracker):
    """A ``StartTracker`` whose calibrator is loaded from ``store`` and saved back to it
    after every update that taught it something."""

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
        load_calibration(store, self.calibrator)

    def update(self, queue: ClusterQueue, result: PendingSet, now: float) -> PendingSet:
        """``StartTracker.update``, then the calibrator saved if it learned something."""
        out = super().update(queue, result, now)
        if self.calibrator.changes != self._saved:
            self.save()
        return out

    def save(self) -> bool:
        """Write the calibrator's errors now; False (logged, never raised) on failure."""
        try:
            self._store.set_meta(START_CALIBRATION_KEY, self.calibrator.to_json())
        except Exception as err:  # HistoryError, sqlite3 errors: none is worth a cycle
            if not self._failing:
                log.error(
                    "pending start calibration: cannot save it in the history file: %s; "
                    "it is kept in memory and saved again with the next pod start",
                    err,
                )
            self._failing = True
            return False
        if self._failing:
            log.info("pending start calibration: saved again")
        self._failing = False
        self._saved = self.calibrator.changes
        return True


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
        kept = _set_aside(store, text)
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


def _set_aside(store: MetaStore, text: str) -> str:
    """Keep the damaged value (its first ``MAX_CALIBRATION_CHARS``) for a human."""
    try:
        store.set_meta(CORRUPT_KEY, text[:MAX_CALIBRATION_CHARS])
        store.set_meta(START_CALIBRATION_KEY, StartCalibrator().to_json())
    except Exception as err:  # as in load_calibration
        return f"it could not be moved aside ({err})"
    return f"moved to meta key {CORRUPT_KEY!r}"
