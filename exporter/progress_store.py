"""Latest training progress per container, from both sources; survives restarts.

The HTTP listener and the log collector write here, the scheduler reads
``snapshot()`` into each exposition snapshot, ``retain()`` drops pods that are
gone, ``save()`` writes the small state file on the node.

Source precedence, per (namespace, pod, container): an explicit HTTP report wins
over what the log parser inferred, because the training code knows its plan
(epochs, steps, batch size) and logs are a guess. The log-derived progress is shown
only while the container has no HTTP progress, or when its HTTP progress is older
than ``HTTP_PRECEDENCE_SECONDS`` than the latest log progress (a reporter that
died while the job keeps printing). Both are kept, so the log view is ready the
moment HTTP reports stop.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType

from gpu_eta.exporter.progress import Report, advance
from gpu_eta.exporter.readings import Progress

log = logging.getLogger(__name__)

HTTP_PRECEDENCE_SECONDS = 600.0
DEFAULT_MAX_ENTRIES = 4096
STATE_VERSION = 1
_SOURCES = ("http", "log")

Key = tuple[str, str, str, str]  # namespace, pod, container, source


class ProgressStore:
    """Thread-safe, bounded map (namespace, pod, container, source) → ``Progress``.

    At most ``max_entries`` entries: beyond that the entry with the oldest report is
    evicted (a node never runs thousands of training containers; the bound only
    guards memory against a flood of distinct senders).
    """

    def __init__(
        self,
        state_path: Path | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        save_interval_seconds: float = 30.0,
    ):
        self._lock = threading.Lock()
        self._save_interval = save_interval_seconds
        self._last_save = time.monotonic()
        self._entries: dict[Key, Progress] = {}
        self._max_entries = max_entries
        self._state_path = Path(state_path) if state_path is not None else None
        self._dirty = False
        if self._state_path is not None:
            self._load(self._state_path)

    # -- writing ---------------------------------------------------------------------

    def merge(
        self,
        namespace: str,
        pod: str,
        container: str,
        source: str,
        report: Report,
        now: float,
    ) -> Progress:
        """Fold ``report`` into the stored progress atomically and return the result.

        Raises ``InvalidReport`` (from ``advance``) without changing anything.
        """
        if source not in _SOURCES:
            raise ValueError(f"unknown progress source {source!r}")
        key = (namespace, pod, container, source)
        with self._lock:
            new = advance(
                self._entries.get(key),
                report,
                namespace=namespace,
                pod=pod,
                container=container,
                source=source,
                now=now,
            )
            self._entries[key] = new
            self._dirty = True
            self._evict()
        return new

    def get(self, namespace: str, pod: str, container: str, source: str) -> Progress | None:
        """The stored progress of one container from one source."""
        with self._lock:
            return self._entries.get((namespace, pod, container, source))

    def retain(self, live: Iterable[tuple[str, str]]) -> None:
        """Keep only progress of the given (namespace, pod) pairs: the others are gone."""
        alive = set(live)
        with self._lock:
            gone = [key for key in self._entries if (key[0], key[1]) not in alive]
            for key in gone:
                del self._entries[key]
            if gone:
                self._dirty = True

    def _evict(self) -> None:
        excess = len(self._entries) - self._max_entries
        if excess > 0:
            oldest = sorted(self._entries, key=lambda k: self._entries[k].last_report_timestamp)
            for key in oldest[:excess]:
                del self._entries[key]

    # -- reading ---------------------------------------------------------------------

    def snapshot(self) -> tuple[Progress, ...]:
        """One ``Progress`` per container, the winning source applied, sorted by key.

        Also saves the state file when it is due (every ``save_interval_seconds``
        while something changed): the scheduler reads the snapshot every cycle, so
        a crash loses at most that interval, without a timer thread of its own.
        """
        if (
            self._state_path is not None
            and time.monotonic() - self._last_save >= self._save_interval
        ):
            self.save()
        with self._lock:
            entries = dict(self._entries)
        winners: dict[tuple[str, str, str], Progress] = {}
        for (ns, pod, container, _source), progress in entries.items():
            key = (ns, pod, container)
            current = winners.get(key)
            winners[key] = progress if current is None else _winner(current, progress)
        return tuple(winners[key] for key in sorted(winners))

    # -- persistence -----------------------------------------------------------------

    def save(self) -> None:
        """Write the state file atomically (temp file + rename) if anything changed.

        Errors are logged, never raised: losing the state file costs a restart's
        worth of history, a crash would cost the node's exporter.
        """
        if self._state_path is None:
            return
        self._last_save = time.monotonic()
        with self._lock:
            if not self._dirty:
                return
            rows = [_to_json(p) for p in self._entries.values()]
            self._dirty = False
        path = self._state_path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
            try:
                with os.fdopen(fd, "w") as fh:
                    json.dump({"version": STATE_VERSION, "progress": rows}, fh)
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as err:
            with self._lock:
                self._dirty = True
            log.error("progress state: cannot write %s: %s", path, err)

    def _load(self, path: Path) -> None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return
        except OSError as err:
            log.error("progress state: cannot read %s: %s; starting empty", path, err)
            return
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
                raise ValueError("unknown state file version")
            rows = data["progress"]
            if not isinstance(rows, list):
                raise ValueError("progress is not a list")
            loaded = [_from_json(row) for row in rows]
        except (ValueError, KeyError, TypeError) as err:
            aside = path.with_name(f"{path.name}.corrupt-{int(time.time())}")
            log.error(
                "progress state: %s is corrupt (%s); moved to %s, starting empty",
                path,
                str(err)[:200],
                aside.name,
            )
            try:
                os.replace(path, aside)
            except OSError as move_err:
                log.error("progress state: cannot move %s aside: %s", path, move_err)
            return
        for progress in loaded:
            key = (progress.namespace, progress.pod, progress.container, progress.source)
            self._entries[key] = progress
        self._evict()


def _winner(a: Progress, b: Progress) -> Progress:
    http, logs = (a, b) if a.source == "http" else (b, a)
    if logs.last_report_timestamp > http.last_report_timestamp + HTTP_PRECEDENCE_SECONDS:
        return logs
    return http


def _to_json(progress: Progress) -> dict:
    row = {name: getattr(progress, name) for name in (*_STR_FIELDS, *_NUM_FIELDS, *_OPT_FIELDS)}
    row["metrics"] = dict(progress.metrics)
    return row


_STR_FIELDS = ("namespace", "pod", "container", "run_id", "source")
_NUM_FIELDS = ("run_start_timestamp", "last_report_timestamp")
_OPT_FIELDS = ("epoch", "epochs", "step", "steps", "batch_size", "epoch_end_timestamp")


def _from_json(row: object) -> Progress:
    """A state-file row back into ``Progress``, type-checked (the file may be damaged)."""
    if not isinstance(row, dict):
        raise ValueError("row is not an object")
    for name in _STR_FIELDS:
        if not isinstance(row.get(name), str):
            raise ValueError(f"{name} is not a string")
    if row["source"] not in _SOURCES:
        raise ValueError("bad source")
    for name in _NUM_FIELDS:
        if isinstance(row.get(name), bool) or not isinstance(row.get(name), int | float):
            raise ValueError(f"{name} is not a number")
    for name in _OPT_FIELDS:
        value = row.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{name} is not a number")
    metrics = row.get("metrics") or {}
    if not isinstance(metrics, dict) or not all(
        isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool)
        for k, v in metrics.items()
    ):
        raise ValueError("metrics is not an object of numbers")
    base = Progress(
        **{name: row[name] for name in _STR_FIELDS},
        **{name: float(row[name]) for name in _NUM_FIELDS},
    )
    return replace(
        base,
        **{name: None if row.get(name) is None else float(row[name]) for name in _OPT_FIELDS},
        metrics=MappingProxyType({k: float(v) for k, v in metrics.items()}),
    )
