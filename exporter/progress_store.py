"""Latest training progress per container, from both sources; survives restarts.

The HTTP listener and the log collector write here, the scheduler reads
``snapshot()`` into each exposition snapshot, ``retain()`` drops pods that are
gone, ``save()`` writes the small state file on the node.

Source precedence, per (namespace, pod, container): an explicit HTTP report wins
over what the log parser inferred, because the training code knows its plan
(epochs, steps, batch size) and logs are a guess. The log-derived progress is shown
only while the container has no HTTP progress, or when its HTTP progress is older
than ``HTTP_PRECEDENCE_SECONDS`` than the latest log progress and its run has not
ended (a reporter that died while the job keeps printing; ``_winner``). Both are
kept, so the log view is ready the moment HTTP reports stop.

This module is the in-memory store and its orchestration (merge, eviction, save,
journal replay at start); reading the state file and journal back, parsing them and
keeping damaged files aside is plain file handling, in ``progress_state_file``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from gpu_eta.common.atomic_file import remove_leftovers, write_atomically
from gpu_eta.exporter import progress_journal
from gpu_eta.exporter.progress import (
    GONE_GRACE_SECONDS,
    Report,
    TooManyRuns,
    advance,
    check_progress,
    check_report,
    ended_by_exit,
    starts_new_run,
)
from gpu_eta.exporter.progress_journal import (
    Ack,
    Journal,
    Removal,
    encode_line,
    encode_removal,
    is_torn,
    iter_journal,
)
from gpu_eta.exporter.progress_runs import (
    DERIVED_RUN_BURST,
    DERIVED_RUN_REFILL_SECONDS,
    RUN_BURST,
    RUN_REFILL_SECONDS,
    TokenBuckets,
    retry_after,
)
from gpu_eta.exporter.progress_state_file import (
    SOURCES,
    STATE_VERSION,
    StateError,
    StateFile,
    Stored,
    clear_path,
    parse_state,
    progress_from_row,
    progress_to_row,
    read_stored,
    set_aside,
)
from gpu_eta.exporter.readings import Progress

log = logging.getLogger(__name__)

HTTP_PRECEDENCE_SECONDS = 600.0
DEFAULT_MAX_ENTRIES = 4096
DEFAULT_GONE_GRACE_SECONDS = GONE_GRACE_SECONDS  # defined beside the config's bounds
# While not persisting, going back to the files is tried at most this often
RECOVER_INTERVAL_SECONDS = 30.0
# While the state file cannot be written, its ERROR line is repeated this often (the
# first failure and the recovery are always logged)
SAVE_ERROR_REPEAT_SECONDS = 600.0

Key = tuple[str, str, str, str]  # namespace, pod, container, source
Pair = tuple[str, str]  # namespace, pod


class ProgressStore:
    """Thread-safe, bounded map (namespace, pod, container, source) → ``Progress``.

    At most ``max_entries`` entries: beyond that the entry with the oldest report is
    evicted (a node never runs thousands of training containers; the bound only
    guards memory against a flood of distinct senders). The progress of a pod that
    left the pod list is dropped ``gone_grace_seconds`` after it left (``retain``).

    Each key may start only so many runs (``exporter.progress_runs``: ``RUN_BURST`` at
    once, then one every ``RUN_REFILL_SECONDS`` of report time); a report that would
    start one more is refused with ``TooManyRuns`` and changes nothing. That
    bookkeeping is bounded by ``max_entries`` too.

    With a ``state_path`` every merge is also appended to a journal beside it
    (``<state>.journal``, see ``exporter.progress_journal``) unless ``durable`` is
    False; ``merge(..., on_durable=ack)`` calls ``ack(True)`` once the merged row is
    on disk, which is when the HTTP listener answers 200.

    The rule at start: a file under ``state_path`` (or its journal) is never written
    over unless its bytes were loaded or kept. One that cannot be read, parsed or
    fully used is moved (or copied) aside to ``<name>.<why>-<time>``; when even that
    fails, the store runs in memory only (``not_persisting``): nothing is written at
    all and every ``on_durable`` is called with False (the listener answers 503).

    Not until a restart: the cause often goes away (a read-only mount remounted, an
    admin removes the file), and a node's exporter runs for months. At most every
    ``recover_interval_seconds``, on the next merge or save, the store tries again
    (``_recover``): each file it could not use is moved aside now (or found gone),
    so the rule above still holds; then it writes all it holds in memory as the
    state file, opens its journal and answers normally again. A merge runs the
    attempt on a thread of its own, so the HTTP path never waits for the disk.
    """

    def __init__(
        self,
        state_path: Path | None = None,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        save_interval_seconds: float = 30.0,
        durable: bool = True,
        recover_interval_seconds: float = RECOVER_INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        gone_grace_seconds: float = DEFAULT_GONE_GRACE_SECONDS,
        run_burst: int = RUN_BURST,
    ):
        self._lock = threading.Lock()
        self._gone_grace = gone_grace_seconds
        # when each pod with progress here was first found not listed (``retain``'s
        # ``now``), and the uid each pod listed or held was last listed under; memory
        # only, bounded by the pod list and ``max_entries``
        self._gone_since: dict[Pair, float] = {}
        self._uids: dict[Pair, str] = {}
        self._clock = clock
        self._save_interval = save_interval_seconds
        self._last_save = clock()
        self._entries: dict[Key, Progress] = {}
        self._max_entries = max_entries
        # new runs per key (under the lock), and those read out of progress bars;
        # ``run_burst`` is the runs a container may start at once (``progress_runs``)
        self._runs = TokenBuckets(run_burst, RUN_REFILL_SECONDS, max_entries)
        self._derived_runs = TokenBuckets(
            DERIVED_RUN_BURST, DERIVED_RUN_REFILL_SECONDS, max_entries
        )
        self._state_path = Path(state_path) if state_path is not None else None
        self._dirty = False
        self._seq = 0
        self.journal: Journal | None = None
        # why nothing may be written (a file could be neither read nor kept), or None
        self.not_persisting: str | None = None
        # the files behind it: (path, why), why naming their set-aside copy
        self._blocked: list[tuple[Path, str]] = []
        self._recover_interval = recover_interval_seconds
        self._recover_due = 0.0
        self._recovering = False  # an attempt runs (one at a time)
        self._recovery: threading.Thread | None = None  # the last one a merge started
        self._closing = False
        self._durable = durable
        self._save_failures = 0  # state writes failed in a row
        self._save_error_logged = 0.0  # when the last ERROR line about it was logged
        if self._state_path is not None:
            # a save killed mid-write (SIGKILL, OOM) left its temporary file: never used
            files, size = remove_leftovers(self._state_path)
            if files:
                log.info(
                    "progress state: removed %d temporary file(s) (%d bytes) of a save "
                    "interrupted beside %s",
                    files,
                    size,
                    self._state_path,
                )
            self._load(self._state_path)
            if self.not_persisting is not None:
                self._recover_due = clock() + recover_interval_seconds
                log.error(
                    "%s; progress is kept in memory only: nothing is written and reports "
                    "are answered 503 until it can be (tried again every %gs)",
                    self.not_persisting,
                    recover_interval_seconds,
                )
            elif durable:
                self.journal = Journal(_journal_path(self._state_path))
            if self._dirty:
                self.save()  # fold what was replayed into the state file now

    @property
    def journaled(self) -> bool:
        """Whether ``on_durable`` callbacks will be called: merges are made durable,
        or (``not_persisting``) were meant to be and are answered False at once.

        Fixed for the store's life, so it cannot change between the listener's
        question and its merge while the store goes back to persisting."""
        return self._durable and self._state_path is not None

    @property
    def persisted(self) -> bool | None:
        """Whether what the store holds is on disk as promised: False while
        ``not_persisting``, while the last state write failed, or while the journal
        cannot be written (failing or ``full``); None without a state file.

        For a gauge (docs/metrics.md): a state file that keeps failing is otherwise
        seen only in the log, and reports keep being answered 200 until the journal
        is full."""
        if self._state_path is None:
            return None
        if self.not_persisting is not None or self._save_failures:
            return False
        journal = self.journal
        return not (journal is not None and journal.failing)

    @property
    def journal_bytes(self) -> int | None:
        """The journal's size as its writer knows it; None without a journal."""
        journal = self.journal
        return None if journal is None else journal.size

    # -- writing ---------------------------------------------------------------------

    def merge(
        self,
        namespace: str,
        pod: str,
        container: str,
        source: str,
        report: Report,
        now: float,
        on_durable: Ack | None = None,
        derived: bool = False,
    ) -> Progress:
        """Fold ``report`` into the stored progress atomically and return the result.

        ``derived``: the report is the exporter's reading of a log line in a known
        format (a progress bar, a Keras line), not a report its sender wrote; the runs
        it starts are capped by ``DERIVED_RUN_BURST`` and ``DERIVED_RUN_REFILL_SECONDS``.

        Raises ``InvalidReport`` (from ``check_report``, ``advance`` or
        ``check_progress``: a namespace, pod or container that is no Kubernetes name,
        a timestamp before 1970), or ``TooManyRuns`` when the report would start a
        run beyond the key's cap (``exporter.progress_runs``), without changing
        anything. With a journal,
        ``on_durable`` is called (from the journal's thread) once the result is on
        disk, with False if writing failed;
        while ``not_persisting`` it is called with False before this returns; else
        it is never called. While ``not_persisting``, a merge may also start an attempt
        to persist again (on a thread: this never waits for the disk).

        ``now`` is the report's time (the listener's clock, a log line's timestamp):
        ``check_report`` gets it with the stored run, so a ``run_start`` in the future
        is refused here whatever the source (a log marker line must not store what a
        POST would be refused for), unless it is the stored run's own start (the
        clock stepped back while the run went on).
        """
        if source not in SOURCES:
            raise ValueError(f"unknown progress source {source!r}")
        key = (namespace, pod, container, source)
        with self._lock:
            previous = self._entries.get(key)
            check_report(report, now=now, previous=previous)
            new = advance(
                previous,
                report,
                namespace=namespace,
                pod=pod,
                container=container,
                source=source,
                now=now,
            )
            # the loader's rule (``progress_from_row`` ends with it): a row the next
            # start would skip as damaged is refused here, not saved and set aside then
            check_progress(new)
            # last of the checks: a report refused for another reason takes no token
            runs = self._derived_runs if derived else self._runs
            if starts_new_run(previous, report) and not runs.take(key, now):
                wait = retry_after(runs.wait_seconds(key, now))
                raise TooManyRuns(_too_many_runs(new, report.run_id is not None, runs, wait), wait)
            self._entries[key] = new
            self._dirty = True
            journal = self.journal
            if journal is not None:
                self._seq += 1
                journal.append(key, encode_line(self._seq, progress_to_row(new)), on_durable)
            self._evict()  # after the row: an evicted new entry is journaled as removed
            # decided under the lock: the store may go back to persisting any moment
            refused = on_durable is not None and journal is None and self.journaled
            recover = self.not_persisting is not None and self._claim_recovery()
        if refused and on_durable is not None:
            on_durable(False)  # not_persisting: applied in memory, not on disk yet
        if recover:
            thread = threading.Thread(
                target=self._recover, name="gpu-eta-progress-recover", daemon=True
            )
            self._recovery = thread
            thread.start()
        return new

    def get(self, namespace: str, pod: str, container: str, source: str) -> Progress | None:
        """The stored progress of one container from one source."""
        with self._lock:
            return self._entries.get((namespace, pod, container, source))

    def retain(
        self,
        live: Mapping[Pair, str],
        now: float,
        wait_seconds: float = 1.0,
        started: Mapping[Pair, float] | None = None,
    ) -> None:
        """Keep the progress of the listed pods, and of gone pods for a grace.

        ``live``: the node's pods now, (namespace, pod) → uid (``""`` when unknown);
        ``now``: the caller's clock, the wall clock reports are timed by. The entries
        of a pod that is not listed are dropped once it has been missing for
        ``gone_grace_seconds`` (counted from the first call that did not list it; 0
        drops them at once).

        Why a grace: a pod is often deleted seconds after its last report (a Job with
        ``ttlSecondsAfterFinished: 0``, Argo's ``podGC: OnPodCompletion``, a user's
        ``kubectl delete``), and Prometheus scrapes every 15-60 s. Dropped at once,
        the run's final report (epoch N of N, its ``end``) was served to no scrape,
        and the forecaster, which learns a vanished run as completed only from its
        last scraped progress, learnt it as cancelled. Why a fixed grace rather than
        "until a scrape served it": a response written is not a sample stored (a
        scrape can time out or fail to be ingested), and HA pairs of Prometheus
        scrape independently; a time covering two scrape intervals holds for all of
        them, and the store stays unaware of the HTTP server.

        ``started``: each listed pod's start (its ``status.startTime``, set by the
        kubelet of this node: the clock reports are timed by). An entry last reported
        before its listed pod started is a predecessor's under the same name and is
        dropped: the rule needs no memory, so it holds across an exporter restart
        during a grace (the uids below are memory only, and a recreated pod's first
        listing would otherwise keep its predecessor's entries on show until its own
        first report replaced them).

        A pod listed again under another uid (a StatefulSet pod recreated under the
        same name) ends its predecessor's grace: entries last reported when the name
        was first found gone, or before, are the predecessor's and are dropped now,
        so the new pod never shows them as its own (its own reports came later; with
        no call between the two pods, that is all of them, the new pod's first
        reports of those seconds included). Only the entries linger: the pod is not
        in the pod list, so it has no pod series and holds no GPU meanwhile. After a
        restart a gone pod's grace starts again (the times are memory only); a pod
        whose progress was dropped never comes back (the removal is journaled).

        Returns once the removals are on disk (at most ``wait_seconds``; a journal
        that cannot write answers at once). Why wait: the caller serves a snapshot
        read next, without the removed pods; a kill before the journal's ``fsync``
        would otherwise bring a removed pod's progress back after a restart, after it
        had been shown gone.
        """
        with self._lock:
            held: dict[Pair, list[Key]] = {}
            for key in self._entries:
                held.setdefault(key[:2], []).append(key)
            drop: list[Key] = []
            for pair, keys in held.items():
                uid = live.get(pair)
                if uid is None:  # not listed: gone, since the first call that saw it so
                    since = self._gone_since.setdefault(pair, now)
                    if now < since:  # the wall clock stepped back: count from here
                        since = self._gone_since[pair] = now
                    if now - since >= self._gone_grace:
                        drop.extend(keys)
                    continue
                since = self._gone_since.pop(pair, now)
                known = self._uids.get(pair)
                start = started.get(pair) if started else None
                if start is not None and (not known or uid != known):
                    # a pod this process has not seen under this uid (after a restart:
                    # none); one it has seen cannot be a predecessor, whatever the
                    # clock did since its start
                    drop.extend(k for k in keys if self._entries[k].last_report_timestamp < start)
                if uid and known and uid != known:  # a new pod under the same name
                    drop.extend(
                        key for key in keys if self._entries[key].last_report_timestamp <= since
                    )
            durable = self._remove(list(dict.fromkeys(drop)), wait=True)  # each key once
            # every listed pod's uid, reported yet or not: a pod replaced between two
            # calls right after its first report is told from its successor too
            uids = {pair: uid for pair, uid in live.items() if uid}
            still = {key[:2] for key in self._entries}
            for pair in still - uids.keys():  # gone, lingering: the uid it left under
                if pair in self._uids:
                    uids[pair] = self._uids[pair]
            self._uids = uids
            self._gone_since = {p: t for p, t in self._gone_since.items() if p in still}
        if durable is not None:
            durable.wait(wait_seconds)

    def note_epochs_from_zero(
        self, namespace: str, pod: str, container: str, epochs: int | None
    ) -> None:
        """Keep with a container's log row the N of the ``Epoch 0/N`` bar its log
        counts epochs from 0 by (None: it counts from 1), journaled like a merge.

        Why: the log reader's memory of it (``logformats.LogState.from_zero``) is
        rebuilt after a restart only by reading that line again, and a rotation takes
        it away (the reader never opens the kubelet's compressed rotations): the rest
        was read counting from 1, a new run that never reached its plan."""
        value = None if epochs is None else float(epochs)
        self._note_log_row((namespace, pod, container, "log"), epochs_from_zero=value)

    def note_held_end(
        self, namespace: str, pod: str, container: str, epoch: float, timestamp: float
    ) -> None:
        """Keep with a container's log row the end of its last epoch that the log
        reader holds back (``logformats._held_last``: the row shows epoch N-1 of N) and
        the time of its line, journaled like a merge; the next merge into the row
        drops it (``progress.advance``).

        Why: the reader applies it when the pod exits, and after a restart rebuilt it
        only by reading that line again; a rotation took it away and the finished run
        stayed at N-1 of N for good."""
        self._note_log_row(
            (namespace, pod, container, "log"),
            held_end_epoch=float(epoch),
            held_end_timestamp=timestamp,
        )

    def held_ends(self) -> list[tuple[str, str, str]]:
        """The (namespace, pod, container) of the log rows keeping a held end
        (``note_held_end``): what the log reader applies once their pod is gone,
        whether or not it saw the pod go."""
        with self._lock:
            return [
                key[:3]
                for key, progress in self._entries.items()
                if key[3] == "log" and progress.held_end_epoch is not None
            ]

    def forget_log_counts(self, namespace: str, pod: str, before: float | None = None) -> None:
        """Clear the count from 0 and the held end kept with a pod name's log rows
        last reported before ``before`` (None: all), journaled like a merge.

        Why: the rows are kept by pod name, and a pod recreated under it (another uid)
        was read in its predecessor's count: a training counting from 1 read as one
        counting from 0, an epoch ahead, ended one epoch too many."""
        with self._lock:
            keys = [
                k
                for k, progress in self._entries.items()
                if k[:2] == (namespace, pod)
                and k[3] == "log"
                and (before is None or progress.last_report_timestamp < before)
            ]
        for key in keys:
            self._note_log_row(
                key, epochs_from_zero=None, held_end_epoch=None, held_end_timestamp=None
            )

    def _note_log_row(self, key: tuple[str, str, str, str], **fields: float | None) -> None:
        """Set ``fields`` of the row ``key`` (no such row: nothing), checked and journaled as
        a merge is, so that the state file and the journal alone both keep them."""
        with self._lock:
            progress = self._entries.get(key)
            if progress is None or all(getattr(progress, k) == v for k, v in fields.items()):
                return
            new = replace(progress, **fields)
            check_progress(new)
            self._entries[key] = new
            self._dirty = True
            if self.journal is not None:
                self._seq += 1
                self.journal.append(key, encode_line(self._seq, progress_to_row(new)), None)

    def end_finished(self, succeeded: Iterable[tuple[str, str]], now: float) -> int:
        """End the plan-less HTTP runs of pods that succeeded; how many.

        ``succeeded``: (namespace, pod) of each pod in phase ``Succeeded`` (every
        container terminated, exit code 0: the scheduler passes them every cycle while
        the pod list is known). Each stored HTTP entry of such a pod that has no
        planned total and has not ended ends as ``ended_by_exit`` says; the others are
        left as they are, so calling it again changes nothing.

        Why HTTP only: a log entry may not have been read to its end (the collector
        reads a few MiB of a file per poll, and every file again from its start after
        an exporter restart); ended on what was read so far, the run would be learnt
        short and the lines read later would start a run after its end. An HTTP
        sender's reports arrive before its process exits. Why a whole pod: an HTTP
        report that names no container is filed under the pod's first one, which may
        be a helper that exits while training goes on in another.

        Journaled like a merge (a restart replays it), without waiting for the disk:
        a kill before the write loses nothing, as the pod still says it exited and
        the next start's first cycle ends the run again.
        """
        done = set(succeeded)
        if not done:
            return 0
        ended = 0
        with self._lock:
            for key, progress in list(self._entries.items()):
                if key[:2] not in done or progress.source != "http":
                    continue
                # no check_progress as in merge: every stored row passed it (merge,
                # load), and ended_by_exit keeps such a row valid (its docstring says why)
                new = ended_by_exit(progress, now)
                if new is None:
                    continue
                self._entries[key] = new
                self._dirty = True
                ended += 1
                if self.journal is not None:
                    self._seq += 1
                    self.journal.append(key, encode_line(self._seq, progress_to_row(new)), None)
        return ended

    def _evict(self) -> None:
        excess = len(self._entries) - self._max_entries
        if excess > 0:
            oldest = sorted(self._entries, key=lambda k: self._entries[k].last_report_timestamp)
            self._remove(oldest[:excess])

    def _remove(self, keys: list[Key], wait: bool = False) -> threading.Event | None:
        """Drop ``keys`` (the caller holds the lock) and journal each removal; with
        ``wait``, an event set once the last of them is written and synced (None
        when nothing was journaled).

        Journaled, because a restart rebuilds the store from the state file and the
        journal: a removal known only in memory would be undone by replaying the
        container's last row (or by a state file written before the removal). One
        event suffices: the journal writes its lines in the order they were queued.
        """
        durable = threading.Event() if wait and keys and self.journal is not None else None
        for key in keys:
            del self._entries[key]
            if self.journal is not None:
                self._seq += 1
                last = durable is not None and key == keys[-1]
                ack = (lambda _ok: durable.set()) if last else None
                self.journal.append(key, encode_removal(self._seq, key), ack)
        if keys:
            self._dirty = True
        return durable

    # -- reading ---------------------------------------------------------------------

    def snapshot(self) -> tuple[Progress, ...]:
        """One ``Progress`` per container, the winning source applied, sorted by key.

        Also saves the state file when it is due (every ``save_interval_seconds``
        while something changed, or when the journal grew large): the scheduler
        reads the snapshot every cycle, so this needs no timer thread of its own.
        """
        # an oversized journal asks for a save at once, but not while saves fail: the
        # state file would be serialised again every cycle for nothing
        if self._state_path is not None and (
            self._clock() - self._last_save >= self._save_interval
            or (self.journal is not None and self.journal.oversized and not self._save_failures)
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

    def save(self, final: bool = False) -> None:
        """Write the state file atomically (temp file + rename) and empty the journal.
        ``final``: the last save before the exporter exits (``close``).

        Errors are logged, never raised: the journal still holds what the state file
        misses, and a crash would cost the node's exporter. Nothing is written over
        while ``not_persisting`` (the file there could be neither read nor kept
        aside): a save then only tries to persist again, when that is due.
        """
        if self._state_path is None:
            return
        if self.not_persisting is not None:
            with self._lock:
                due = self.not_persisting is not None and self._claim_recovery()
            if due:
                self._recover()
            return
        self._last_save = self._clock()
        journal = self.journal
        if journal is None:
            self._save_state(final)
            return
        with journal.io_lock:  # no journal batch between the state write and the truncate
            if self._save_state(final):
                try:
                    journal.truncate()
                except OSError as err:
                    log.error("progress state: cannot truncate %s: %s", journal.path, err)

    def close(self, timeout: float = 5.0) -> None:
        """Save, then stop the journal's writer; for shutdown. An attempt to persist
        again that a merge started is waited for (at most ``timeout``) first."""
        recovery = self._recovery
        if recovery is not None:
            recovery.join(timeout)
        self.save(final=True)
        with self._lock:
            self._closing = True  # a recovery still running opens no journal now
            journal = self.journal
        if journal is not None:
            journal.close()

    # -- going back to persisting --------------------------------------------------------

    def _claim_recovery(self) -> bool:
        """Whether the caller runs the next attempt to persist again (it is due and
        none runs); the caller holds the lock and has seen ``not_persisting``."""
        now = self._clock()
        if self._recovering or self._closing or now < self._recover_due:
            return False
        self._recovering = True
        self._recover_due = now + self._recover_interval
        return True

    def _recover(self) -> None:
        """One attempt to leave ``not_persisting`` (the caller claimed it).

        First each file that could be neither used nor kept at start is cleared
        (``clear_path``: moved aside now, or found gone; nothing is written over it);
        then everything in memory is written as the state file. Only once that
        write succeeded does the store persist again: it opens its journal, and
        merges are journaled and answered normally. Reports merged during the write
        were answered 503; they are saved right after it. A failed attempt is logged
        at DEBUG only (the ERROR at start said what is wrong, the INFO line on
        success says it is over); the next is due in ``recover_interval_seconds``.
        """
        path = self._state_path
        assert path is not None
        try:
            done: list[str] = []
            for blocked, why in list(self._blocked):
                cleared, what = clear_path(blocked, why)
                if not cleared:
                    log.debug("progress state: still not persisting: %s", what)
                    return
                self._blocked.remove((blocked, why))
                done.append(what)
            with self._lock:
                self._dirty = True  # all of it: the state file may be gone or set aside
            try:
                self._write_state()
            except OSError as err:
                log.debug("progress state: still not persisting: cannot write %s: %s", path, err)
                return
            with self._lock:
                if self._closing:
                    return  # shut down meanwhile: the state file is written, that is all
                if self._durable:
                    self.journal = Journal(_journal_path(path))
                was, self.not_persisting = self.not_persisting, None
                held = len(self._entries)
                dirty = self._dirty
            log.info(
                "progress state: persisting again (%s%s): %d entr%s held in memory written "
                "to %s; reports are answered normally",
                was,
                "".join(f"; {what}" for what in done),
                held,
                "y" if held == 1 else "ies",
                path,
            )
            if dirty and not self._closing:
                # merged or removed while the file was written: on disk now too, so a
                # removal answered before cannot come back from the file after a kill
                # (not once ``close`` began: it saves itself, and a journal it closed
                # would be opened again by a truncate)
                self.save()
        finally:
            with self._lock:
                self._recovering = False

    def _save_state(self, final: bool = False) -> bool:
        """Write the state file if anything changed; False when writing failed.
        ``final``: the last save, at shutdown (``_unsaved_note`` says why it matters).

        A failure is an ERROR line the first time and then every
        ``SAVE_ERROR_REPEAT_SECONDS`` (saves are retried every save interval: a line
        each would flood the log); the first success after it is an INFO line.
        """
        try:
            self._write_state()
        except OSError as err:
            self._save_failures += 1
            now = self._clock()
            if self._save_failures == 1 or now - self._save_error_logged >= (
                SAVE_ERROR_REPEAT_SECONDS
            ):
                self._save_error_logged = now
                log.error(
                    "progress state: cannot write %s: %s (%d attempt(s) in a row)%s",
                    self._state_path,
                    err,
                    self._save_failures,
                    _unsaved_note(self.journal, final),
                )
            return False
        if self._save_failures:
            log.info(
                "progress state: %s written again after %d failed attempt(s)",
                self._state_path,
                self._save_failures,
            )
            self._save_failures = 0
        return True

    def _write_state(self) -> None:
        """Write the state file if anything changed; ``OSError`` when that failed (the
        store stays dirty, so the next save tries again)."""
        with self._lock:
            if not self._dirty:
                return
            rows = [progress_to_row(p) for p in self._entries.values()]
            seq = self._seq
            self._dirty = False
        path = self._state_path
        assert path is not None
        state = {"version": STATE_VERSION, "journal_seq": seq, "progress": rows}

        def dump(tmp: Path) -> None:
            with open(tmp, "w") as fh:
                json.dump(state, fh)

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # private (0600): it names every pod's runs; durable: it replaces the journal;
            # a symlink there is replaced, not written through (a dangling one would fail
            # every save while the journal grows)
            write_atomically(path, dump, durable=True, mode=0o600, follow_symlinks=False)
        except OSError:
            with self._lock:
                self._dirty = True
            raise

    def _load(self, path: Path) -> None:
        """State file, then the journal's newer rows; damage is set aside, never fatal."""
        state = StateFile((), 0, 0)
        data = self._read(path, "progress state")
        if data is not None:
            try:
                state = parse_state(data)
            except StateError as err:
                aside = self._keep_aside(path, move=True, why="corrupt")
                if aside is not None:
                    log.error(
                        "progress state: %s is unusable (%s); moved to %s, starting empty",
                        path,
                        err,
                        aside,
                    )
            else:
                if state.damaged:
                    aside = self._keep_aside(path, move=False, why="corrupt")
                    if aside is not None:
                        log.error(
                            "progress state: %s: %d damaged row(s) skipped, %d loaded; a "
                            "copy of the file is kept as %s",
                            path,
                            state.damaged,
                            len(state.rows),
                            aside,
                        )
                    self._dirty = True
        for progress in state.rows:
            self._entries[_key(progress)] = progress
        self._seq = state.journal_seq
        self._replay(_journal_path(path), state.journal_seq)
        self._evict()

    def _read(self, path: Path, what: str) -> bytes | None:
        """``read_stored``: the bytes of ``path``, or None (nothing there, or it could
        not be read and was kept aside); when it could be neither read nor kept aside,
        nothing may be written any more (``not_persisting``)."""
        return self._read_stored(path, what).data

    def _read_stored(
        self, path: Path, what: str, *, limit: int | None = None, newest: bool = False
    ) -> Stored:
        """``_read`` with ``read_stored``'s bounds, returning what it found."""
        stored = read_stored(path, what, limit=limit, newest=newest)
        if stored.not_persisting is not None:
            self._blocked.append((path, "unreadable"))
            # a file left in place (no regular file) states the reason; otherwise the
            # first reason found stands
            if stored.in_place or self.not_persisting is None:
                self.not_persisting = stored.not_persisting
        return stored

    def _keep_aside(self, path: Path, *, move: bool, why: str) -> str | None:
        """``set_aside``; if it fails, nothing may be written any more
        (``not_persisting``): the next save would destroy the only copy."""
        aside = set_aside(path, move=move, why=why)
        if aside is None:
            self._blocked.append((path, why))
            if self.not_persisting is None:
                self.not_persisting = (
                    f"progress state: {path} is damaged, and it cannot be kept aside"
                )
        return aside

    def _replay(self, path: Path, after: int) -> None:
        """Apply the journal's lines newer than the state file (``after``), one at a
        time as they are parsed (a list of them all cost 11 bytes per byte).

        A journal larger than ``MAX_JOURNAL_BYTES`` was not written by this exporter
        (its writer stops there, answering 503) but by an older one, or by hand. Its
        newest ``MAX_JOURNAL_BYTES`` are replayed and the whole file is moved aside,
        with one ERROR line. Why the newest part rather than the oldest: each row is
        its container's whole state, so the newest lines hold the latest acknowledged
        progress of every container that reported lately, the oldest only rows
        superseded since or of containers long quiet; and nothing is lost silently:
        the skipped bytes are kept in the set-aside file, named in that line.
        """
        limit = progress_journal.MAX_JOURNAL_BYTES  # the most its writer lets it hold
        stored = self._read_stored(path, "progress journal", limit=limit, newest=True)
        data = stored.data
        if data is None:
            return
        applied = damaged = 0
        crowded = 2 * self._max_entries  # rows of many containers: evict on the way
        for parsed in iter_journal(data, stored.start):
            if parsed is None:
                damaged += 1
                continue
            seq, row = parsed
            self._seq = max(self._seq, seq)
            if seq <= after:
                continue  # already in the state file
            if isinstance(row, Removal):
                self._entries.pop(row.key, None)
                applied += 1
                continue
            try:
                progress = progress_from_row(row)
            except ValueError:
                damaged += 1
                continue
            self._entries[_key(progress)] = progress
            applied += 1
            if len(self._entries) > crowded:
                self._evict()
        torn = is_torn(data)
        skipped = stored.skipped
        del data, stored
        if applied:
            self._dirty = True
        if skipped:
            # the save would empty it: what was not replayed is kept, not dropped
            aside = self._keep_aside(path, move=True, why="oversized")
            if aside is not None:
                log.error(
                    "progress journal: %s is over %d bytes: its newest part replayed (%d "
                    "report(s) and removal(s)), its oldest %d bytes not; moved to %s "
                    "(kept whole for a human)",
                    path,
                    limit,
                    applied,
                    skipped,
                    aside,
                )
        elif damaged:
            aside = self._keep_aside(path, move=False, why="corrupt")
            if aside is not None:
                log.error(
                    "progress journal: %s: %d damaged line(s) skipped, %d replayed; a copy "
                    "is kept as %s",
                    path,
                    damaged,
                    applied,
                    aside,
                )
        elif applied or torn:
            log.info(
                "progress journal: %d report(s) and removal(s) replayed from %s%s",
                applied,
                path,
                " (an unacknowledged torn last line dropped)" if torn else "",
            )


def _unsaved_note(journal: Journal | None, final: bool) -> str:
    """What a failed state save's ERROR line says of the changes it did not write.

    The journal holds them only while it can be written: a state path whose folder
    cannot be made (a file in its way, a read-only mount) fails the journal too, every
    report is answered 503, and what the save misses is nowhere on disk (at shutdown:
    lost). Saying the journal holds it would send whoever reads the line to the wrong
    file. Without a journal (``durable`` False) nothing else holds them either.
    """
    where = "lost at exit" if final else "held in memory only"
    if journal is None:
        return f"; what changed since the last save is {where}"
    if journal.full:
        return (
            f"; the journal is full ({journal.size} of {journal.full_bytes} bytes): reports "
            f"since are answered 503 and {where}"
        )
    if journal.failing:
        return (
            "; the journal cannot be written either: what changed since the last save is "
            f"{where} (those reports were answered 503)"
        )
    return (
        f"; the journal holds what it misses ({journal.size} of {journal.full_bytes} bytes; "
        "reports are answered 503 once it is full)"
    )


def _too_many_runs(new: Progress, named: bool, runs: TokenBuckets, wait: int) -> str:
    """The one-line reason a run was not started, for its sender (or the log); with
    a ``run_id`` the sender ``named``, what it most likely does wrong. ``wait``: whole
    seconds until the container may start one (the answer's ``Retry-After`` too)."""
    hint = "; one run_id is for all reports of a training run" if named else ""
    return (
        f"run {new.run_id} not started: this container may start {runs.burst} runs at "
        f"once, then 1 every {runs.refill_seconds:g} s (next in {wait} s){hint}"
    )


def _key(progress: Progress) -> Key:
    return (progress.namespace, progress.pod, progress.container, progress.source)


def _journal_path(state: Path) -> Path:
    return state.with_name(state.name + ".journal")


def _winner(a: Progress, b: Progress) -> Progress:
    """The progress shown of one container's HTTP and log entries. Pure.

    HTTP wins, unless the log's last line is over ``HTTP_PRECEDENCE_SECONDS`` newer
    than the last HTTP report of a run that has not ended: a reporter that died while
    the job keeps printing. An ended run's reporter did not die: what the job prints
    after it (an evaluation or test bar, read as a run of its own with no end) must not
    replace it as a training going on, with an ETA. The container's next HTTP run
    (``ended_timestamp`` None again) is judged by the same rule.
    """
    http, logs = (a, b) if a.source == "http" else (b, a)
    if (
        http.ended_timestamp is None
        and logs.last_report_timestamp > http.last_report_timestamp + HTTP_PRECEDENCE_SECONDS
    ):
        return logs
    return http
