"""One forecast cycle: query Prometheus → runs → (re)fit → predictions → ``ForecastSet``.

No HTTP serving and no globals: ``server`` runs cycles on a timer and ``cli once``
runs one. A cycle either returns a complete ``ForecastSet`` or raises (Prometheus
unreachable or answering garbage: ``PromAPIError``), so the caller can keep serving
the previous set marked stale. Per-job problems never fail the cycle: the job is
skipped and counted under ``gpu_eta_forecaster_job_errors_total{reason}``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from typing import TypeVar

from gpu_eta.common.text import first_of
from gpu_eta.forecaster import kube_state, queries, scrape_gap
from gpu_eta.forecaster.config import CycleSettings
from gpu_eta.forecaster.cycle_meta import (
    CLOCK_OFFSET_KEY,
    LAST_QUERY_KEY,
    LAST_RANGE_KEY,
    MEANS_UNTIL_KEY,
    PARTIAL_LAST_KEY,
    PARTIAL_SINCE_KEY,
    decode_means_until,
    encode_means_until,
    float_or_none,
)
from gpu_eta.forecaster.errors import ForecasterError
from gpu_eta.forecaster.estimators.base import stall_widen_since
from gpu_eta.forecaster.finished_present import FinishedPresent
from gpu_eta.forecaster.forecast import Forecast, ForecastSet, GpuFree, JobForecast
from gpu_eta.forecaster.history import HistoryConflict, HistoryStore, StoredRun
from gpu_eta.forecaster.last_seen import Kept, LastSeen
from gpu_eta.forecaster.pending import (
    PendingSet,
    job_end_times,
    predict_queue,
    run_durations,
    run_followers,
)
from gpu_eta.forecaster.pending_state import SavedStartTracker
from gpu_eta.forecaster.planless import DurationsFit, Spread, fit_durations
from gpu_eta.forecaster.planless import stub as planless_run
from gpu_eta.forecaster.prom_clock import measured_offset, offset_to_apply
from gpu_eta.forecaster.promapi import PromClient
from gpu_eta.forecaster.promparse import PromAPIError, PromQueryError, Skipped
from gpu_eta.forecaster.queue_replay import Holder
from gpu_eta.forecaster.refit import (
    Model,
    ModelError,
    appended_since,
    default_model_factory,
    fit_in_child,
    gc_switched,
)
from gpu_eta.forecaster.release_lags import RELEASE_LAGS_KEY, Ended, ReleaseLags
from gpu_eta.forecaster.release_lags import decode as decode_release_lags
from gpu_eta.forecaster.release_lags import encode as encode_release_lags
from gpu_eta.forecaster.runs import STATED_PLAN, Run, RunKey, RunUpdate, own_work, run_key
from gpu_eta.forecaster.runs_from_series import (
    RUN_FAILED,
    Allocation,
    CycleView,
    PlanlessRun,
    PodKey,
    assemble,
    ending_runs,
    pod_values,
    run_keys,
    sample_run_key,
)
from gpu_eta.forecaster.series import Sample, Series, joined
from gpu_eta.forecaster.static_series import StaticSeries

log = logging.getLogger(__name__)
_T = TypeVar("_T", RunUpdate, PlanlessRun)


class _ClockMoved(Exception):
    """Internal: the cycle's first answer gives an offset to Prometheus' clock more than
    the bound from the one the cycle started at; ``offset``: the new one (``Cycle.run``)."""

    def __init__(self, offset: float) -> None:
        super().__init__(f"Prometheus' clock offset moved to {offset:.0f}s")
        self.offset = offset


class Cycle:
    """Runs cycles against one Prometheus and one history store, keeping the model."""

    def __init__(
        self,
        client: PromClient,
        store: HistoryStore,
        settings: CycleSettings | None = None,
        model_factory: Callable[[], Model] = default_model_factory,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.store = store
        self.settings = settings or CycleSettings()
        self.model_factory = model_factory
        self.clock = clock
        # the clock the client stamps its answers' arrival with (``QueryStats.date``)
        self.monotonic = monotonic
        self.model: Model | None = None
        self._model_version = -1
        self._last_fit = -math.inf
        self._refit_thread: threading.Thread | None = None
        self._learned_version = -1  # store version the model has learned up to (fit or update)
        # a refit's outcome for the next cycle to install: its model (None: the fit
        # failed), store version, history and the durations built from that history
        self._pending: tuple[Model | None, int, Sequence[Run], DurationsFit] | None = None
        # the latest finished run the model has seen (``appended_since``), and how many
        # it has been given since its fit (at most ``fit_runs``, ``_learn_since_fit``)
        self._learnt_last: list[Run] = []
        self._learnt_count = 0
        # the store version after the latest revive: a model fitted on a history older
        # than that learns nothing incrementally (``_fitted``)
        self._relearn_from = 0
        # the runs whose revive forced a refit, with when (``revive_refit``)
        self._revive_refits: dict[RunKey, float] = {}
        # Persisted: after a restart (or in `once` mode) the next cycle reads only
        # since the previous one instead of the whole lookback (``_load_state``).
        self._stored_query: str | None = None  # the stored query time as read or written
        self._durations: tuple[float, ...] = ()  # finished runs' durations, for the queue
        # completed runs' durations by configuration, for runs without a planned total;
        # built with each fit (in the refit's thread), then given the runs that finish
        # (``_learn_since_fit``)
        self._planless = DurationsFit()
        self._planless_seen: list[Run] = []  # the last run it was given (appended_since)
        # calibrates the queue's intervals on real starts; kept in the history file
        self._starts = SavedStartTracker(store, forget_seconds=self.settings.vanish_grace_seconds)
        self._queue_warned: str | None = None  # the queue answer's first warning said
        # GPU nodes missing from a KSM read (a shard down, KSM restarting) kept as last
        # read for the vanish grace; in memory only (last_seen)
        self._last_seen = LastSeen(self.settings.vanish_grace_seconds)
        # the lags from completed runs' ends to their pods' GPUs being free, learned
        # from the queue's reads for its replay; the most recent kept in the history
        # file (release_lags)
        self._release = ReleaseLags(decode_release_lags(store.get_meta(RELEASE_LAGS_KEY)))
        self._release_failing = False  # the last write of them failed (logged once)
        # the GPU pods of the queue's last read, as answered: a completed run's pod gone
        # since tells its workers (pending.run_followers)
        self._holders_before: tuple[Holder, ...] = ()
        self._kept_said: tuple[str, ...] = ()  # the kept open nodes the log last warned of
        self._kept_closed_said: tuple[str, ...] = ()  # ... the closed ones (debug)
        # runs' plans, starts, batch sizes, pod labels, GPU models: read in full now
        # and then, otherwise only for runs not seen yet (static_series)
        self._static = StaticSeries(self.settings.static_full_every)
        if self.settings.range_every < 1:
            raise ValueError("range_every must be >= 1")
        # The range queries and the means read every run one cycle in ``range_every``,
        # over the span since the previous such read (persisted like the query time),
        # else only the runs that end (_range_span).
        self._last_range_time: float | None = None
        self._cycles_since_range: int | None = None
        # runs finished whose series are still answered (their last samples in the
        # window, a Job's Succeeded pod, a notebook's for days): which of them are read
        # as ending, and which are frozen, neither read by name nor stored again
        self._finished_present = FinishedPresent(store.completed_starts)
        # each run's latest epoch, last epoch end and step as the previous cycle read
        # them (went_back)
        self._marks: dict[RunKey, tuple[float, ...]] = {}
        # the runs running in the previous read (present, not done), those a failed
        # scrape hid kept (scrape_gap): only they are kept while their exporter's
        # scrapes fail. None before this process's first read: the runs the history
        # holds running stand for it (``once``, a restart), so a scrape failing as the
        # process starts hides no run the previous process forecast
        self._present: frozenset[RunKey] | None = None
        # the runs the last cycle forecast from a scrape gap: held and running (logged
        # when the set changes; ``n_held``)
        self._held: frozenset[RunKey] = frozenset()
        # whether the stall check's last query failed: one WARNING when it starts to
        # fail, not one per cycle while a stuck run keeps asking (_read_util_recent)
        self._util_recent_failing = False
        # the runs the last cycle forecast stalled: while the stall check's query fails,
        # a run still silent keeps its verdict (``_stalled_now``), so that one failed
        # query does not publish 0 and reset the stalled alert's ``for:``
        self._stalled: frozenset[RunKey] = frozenset()
        # the time of the latest cycle whose Prometheus read failed, until a cycle
        # records again (uncovered_since, unseen_seconds)
        self._failed_at: float | None = None
        # the first read of the current run of partial reads (answers with warnings: a
        # store down), None after a whole read; persisted, so that the bound holds for
        # ``once`` and across restarts (partial_hold)
        self._partial_since: float | None = None
        self._partial_last: float | None = None  # the latest partial read of that run
        # runs whose means were read since the last full read, as ending runs: the time
        # their stored means reach (later reads weigh only the seconds after it);
        # persisted, like the range time it completes
        self._means_until: dict[RunKey, float] = {}
        # each run's features as last read, for the cycle that reads it without some
        # (``_keep_features``): the runs seen in the previous cycle only
        self._features: dict[RunKey, Mapping[str, float | str]] = {}
        # runs whose assembly raised in the previous cycle (``_log_failed``)
        self._failed_runs: frozenset[RunKey] = frozenset()
        # the offset to Prometheus' clock the cycle's time takes (0: its own clock), and
        # the one the log last said (``_note_offset``), kept in the history file as
        # read or written (``_stored_offset``): a new process starts at it
        self._offset = 0.0
        self._offset_said = 0.0
        self._stored_offset = 0.0
        self._load_state()

    def _load_state(self) -> None:
        """The cycle's state as the history file holds it: at start, and after another
        process wrote the file (``HistoryConflict``), whose state then reads on."""
        self._stored_query = self.store.get_meta(LAST_QUERY_KEY)
        self._last_range_time = float_or_none(self.store.get_meta(LAST_RANGE_KEY))
        self._means_until = decode_means_until(self.store.get_meta(MEANS_UNTIL_KEY))
        self._partial_since = float_or_none(self.store.get_meta(PARTIAL_SINCE_KEY))
        self._partial_last = float_or_none(self.store.get_meta(PARTIAL_LAST_KEY))
        self._stored_offset = float_or_none(self.store.get_meta(CLOCK_OFFSET_KEY)) or 0.0
        # following Prometheus' clock turned off (an infinite bound): an offset kept from
        # before is not applied (nothing would ever measure it away: every `once` run
        # read at it, found no run and finished them all as cancelled), and the next
        # cycle writes the one it uses, 0
        following = math.isfinite(self.settings.clock_offset_bound_seconds)
        self._offset = self._offset_said = self._stored_offset if following else 0.0

    @property
    def kept_stalled(self) -> frozenset[RunKey]:
        """The runs the last cycle forecast stalled, whose verdict a run still silent
        keeps while the stall check's query fails (``_stalled_now``). Set by ``once``
        from the run before it (``once_counters.load_stalled``): a new process has no
        last cycle of its own."""
        return self._stalled

    @kept_stalled.setter
    def kept_stalled(self, keys: frozenset[RunKey]) -> None:
        self._stalled = frozenset(keys)

    @property
    def _last_query_time(self) -> float | None:
        """The previous cycle's query time: the stored text this process read or wrote
        (one value, so the two cannot disagree)."""
        return float_or_none(self._stored_query)

    def run(self) -> ForecastSet:
        """One cycle; raises PromAPIError/ModelError/HistoryError, never per-job errors.

        The cyclic garbage collector is paused meanwhile (``gc_switched``), except
        during a model fit.

        The cycle's time is the clock's, or Prometheus' when the two are more than
        ``clock_offset_bound_seconds`` apart (``prom_clock``: the queries would find no
        sample, every run would look gone). The offset is the one the latest answer's
        ``Date`` gave (in a new process, the one the history file keeps); the cycle's
        first answer measures it again, and when it moved by more than the bound (a
        clock stepped since, a new process's first cycle without the offset kept) the
        cycle starts over at the time it gives: one query more, that cycle only.
        """
        before = self.client.stats.success + self.client.stats.error
        offset = self._clock_offset(self._offset)
        now = self.clock() + offset
        with gc_switched(False):
            try:
                try:
                    return self._run(now, offset, before, check_clock=True)
                except _ClockMoved as moved:
                    offset = moved.offset
                    now = self.clock() + offset
                    return self._run(now, offset, before, check_clock=False)
            except PromAPIError:
                # the seconds up to this read are not covered by a read (_run)
                self._failed_at = now
                # no previous read to hold runs from: the next cycle asks no scrape gap
                # (nor rereads the gone runs), so a read that failed because of them
                # is not sent again every cycle (scrape_gap)
                self._present = frozenset()
                raise

    def _clock_offset(self, applied: float) -> float:
        """The offset to Prometheus' clock the cycle's time takes, from the latest
        answer's ``Date`` (``prom_clock.offset_to_apply``; ``applied``: the one in force
        until now)."""
        return offset_to_apply(
            self._measured_offset(), applied, self.settings.clock_offset_bound_seconds
        )

    def _measured_offset(self) -> float | None:
        """Prometheus' clock minus ``self.clock`` as the latest answer's ``Date`` says
        (``prom_clock.measured_offset``); None before any answer carried one."""
        date = self.client.stats.date
        if date is None:
            return None
        seconds, received = date
        return measured_offset(seconds, self.clock() - (self.monotonic() - received))

    def _note_offset(self, offset: float) -> None:
        """Keep ``offset`` as the one in force, and say when it starts, moves by more
        than the bound, or ends: one WARNING each time it is taken or moved, one INFO
        when the clocks agree again; not one per cycle (a node's clock can stay off for
        days)."""
        said = self._offset_said
        self._offset = offset
        if offset == said or (
            offset != 0.0
            and said != 0.0
            and abs(offset - said) <= self.settings.clock_offset_bound_seconds
        ):
            return
        self._offset_said = offset
        if offset == 0.0:
            log.info(
                "this forecaster's clock agrees with Prometheus' again: cycles read at "
                "their own time"
            )
            return
        log.warning(
            "Prometheus' clock is %.0fs %s this forecaster's (the Date of its answers): "
            "cycles read and forecast at Prometheus' time while they are more than %.0fs "
            "apart (gpu_eta_forecaster_prometheus_clock_offset_seconds); check NTP on "
            "this node, or on Prometheus'",
            abs(offset),
            "ahead of" if offset > 0 else "behind",
            self.settings.clock_offset_bound_seconds,
        )

    def _run(self, now: float, offset: float, before: int, check_clock: bool) -> ForecastSet:
        """The cycle at ``now`` (the clock plus ``offset``); ``before``: the client's
        query count when the cycle began. ``check_clock``: raise ``_ClockMoved`` when its
        first answer gives an offset more than the bound from ``offset`` (``run``)."""
        s = self.settings
        if self._last_query_time is None:
            window = s.lookback_seconds
        else:
            window = min(s.lookback_seconds, now - self._last_query_time + s.overlap_seconds)
        window = max(window, s.min_step_seconds)
        said: list[str] = []  # the read's answers' warnings: a partial read
        instant, ranges, span, ending, held_keys, frozen = self._query(
            now, window, said, offset if check_clock else None
        )
        self._note_offset(offset)
        full = span is not None and ending is None
        # the seconds the means add: since the previous full read (or the whole span)
        new_seconds = 0.0 if span is None else span
        if span is not None and self._last_range_time is not None:
            new_seconds = min(span, now - self._last_range_time)
        means_for = None if ending is None else frozenset(ending)
        view = assemble(instant, ranges, now, new_seconds, means_for, self._means_until)
        if frozen:  # finished in the history, nothing to store (FinishedPresent)
            view.updates = [u for u in view.updates if run_key(u) not in frozen]
            view.done -= frozen
        self._keep_features(view)
        self._log_failed(view.failed)
        errors: Counter[str] = Counter(view.rejected.values())

        # the cycle's state after this read, stored with its means in one transaction
        # (``HistoryStore.record``): a failure or a restart anywhere after it reads on
        # from this state, and one before it finds neither, so no window counts twice
        meta = {LAST_QUERY_KEY: repr(now)}
        means_until = {} if full else {**self._means_until, **view.means_until}
        if full:
            meta[LAST_RANGE_KEY] = repr(now)
        if means_until != self._means_until:
            meta[MEANS_UNTIL_KEY] = encode_means_until(means_until)
        if self._offset_said != self._stored_offset:
            meta[CLOCK_OFFSET_KEY] = repr(self._offset_said)
        previous = self._last_query_time
        uncovered = uncovered_since(previous, now, self._failed_at, s.vanish_grace_seconds)
        unseen = unseen_seconds(previous, self._failed_at)
        partial_since, partial_last, held = partial_hold(
            (self._partial_since, self._partial_last),
            now,
            said,
            s.partial_hold_seconds,
            s.vanish_grace_seconds,
        )
        if partial_since != self._partial_since:
            meta[PARTIAL_SINCE_KEY] = "" if partial_since is None else repr(partial_since)
        if partial_last != self._partial_last:
            meta[PARTIAL_LAST_KEY] = "" if partial_last is None else repr(partial_last)
        if held and previous is not None:
            # as after a failed read at ``now``: a run absent from a partial answer may be
            # in the part missing, so no second since the previous read counts as gone
            uncovered, unseen = previous, now - previous
        try:
            # only if the file's state is still the one this read started from: else
            # another forecaster stored these seconds' means already
            revived = self.store.record(
                view.updates,
                state=meta,
                expect={LAST_QUERY_KEY: self._stored_query},
                uncovered_since=uncovered,
                unseen_seconds=unseen,
                now=now,
                lingering=frozen,  # a completed run's series still answered
            )
        except HistoryConflict:
            self._load_state()
            raise
        self._failed_at = None
        self._finished_present.note_ended(run_keys(instant.get("ended", ())))
        self._log_partial(said, partial_since, held, now)
        self._partial_since, self._partial_last = partial_since, partial_last
        self._finished_present.note_running_again(revived)  # read as any running run
        if revived:  # the model learnt them as cancelled runs: refitted without them now
            self._relearn_from = self.store.version
            lately = revived_lately(self._revive_refits, now, s.refit_seconds)
            self._log_revived(revived, lately)
            force, self._revive_refits = revive_refit(
                self._revive_refits, revived, now, s.refit_seconds
            )
            if force:
                self._last_fit = -math.inf
        self._stored_query = meta[LAST_QUERY_KEY]
        self._stored_offset = self._offset_said
        self._means_until = means_until  # with a full read, every run's means reach now
        if full:
            self._cycles_since_range = 0
            self._last_range_time = now
        else:
            self._cycles_since_range = (self._cycles_since_range or 0) + 1
        if self.store.skipped_updates:  # text SQLite cannot store: skipped, counted here
            errors["unencodable_label"] += self.store.skipped_updates
        if self.store.seeded_updates:  # a run seeded from the CSV: already in the history
            errors["seeded_run"] += self.store.seeded_updates
        if self.store.dropped_updates:  # a start its key's finished run cannot place
            errors["finished_key"] += self.store.dropped_updates
        stored_running = self.store.running()
        to_finish = set(view.done) | vanished(
            stored_running, view.present, now, s.vanish_grace_seconds
        )
        newly_finished = self.store.finish(sorted(to_finish), now)
        # runs finished more than a window ago have left the answers: forgotten; those
        # finished now linger in them
        self._finished_present.prune(now, window)
        self._finished_present.note_finished(newly_finished, now)

        # The finished history is read only when a fit needs it (tens of thousands of
        # runs: reading them every cycle was most of a steady cycle's time).
        with gc_switched(True):  # a fit's temporaries may hold cycles around large arrays
            model = self._fitted(now)
        # done and present are disjoint, and finish() only removes: what is still
        # running and present is the list read above, filtered.
        running = [r for r in stored_running if run_key(r.run) in view.present]
        planless = [(p, planless_stub(p)) for p in view.planless]
        # the runs a scrape gap may hold in the next read: those running now only, not
        # one that ended or reached its plan while its pod lives on (a notebook, a Job's
        # Succeeded pod): held, its end and plan gone from the window's reads, it would
        # be read as running again, revived and forecast (scrape_gap)
        self._present = frozenset(run_key(r.run) for r in running) | {p.key for p, _ in planless}
        # the runs held that are forecast (one held may be read done in this read: its end
        # or last epoch is still in the window's answers)
        self._note_held(held_keys & self._present)
        if any(progress_overdue(stored.run, view, now, s) for stored in running) or any(
            progress_overdue(stub, view, now, s) for _, stub in planless
        ):
            # the stall check's GPU use, asked only when some run may be stalled
            util_recent = self._read_util_recent(window, now, errors)
            util_failed = util_recent is None
            view.set_util_recent(util_recent or {})
        else:
            util_failed = False
        jobs: list[JobForecast] = []
        for stored in running:
            run = stored.run
            try:
                stalled = self._stalled_now(run, view, now, util_failed)
                fc = sanitize(model.predict(run, now, stalled=stalled))
            except Exception as err:  # a bad job must not fail the cycle
                errors["predict_failed"] += 1
                log.debug("predict failed for %s: %s", run_key(run), err)
                continue
            if fc is None:
                errors["invalid_forecast"] += 1
                continue
            if stalled and not fc.stalled:  # the metric follows our detection
                fc = dataclasses.replace(fc, stalled=True)
            ends = (now + fc.p10, now + fc.p50, now + fc.p90)
            jobs.append(JobForecast(run, stored.node, fc, ends))
        spread = self._planless.spread() if planless else Spread({})
        for found, stub in planless:
            try:
                stalled = self._stalled_now(stub, view, now, util_failed)
                fc = self._forecast_planless(stub, last_progress(stub, view), now, stalled, spread)
            except Exception as err:  # a bad job must not fail the cycle
                errors["predict_failed"] += 1
                log.debug("plan-less forecast failed for %s: %s", found.key, err)
                continue
            if fc is None:  # no completed run of its groups outlasts it
                errors["no_plan"] += 1
                continue
            ends = (now + fc.p10, now + fc.p50, now + fc.p90)
            jobs.append(JobForecast(stub, found.node, fc, ends))
        self._stalled = frozenset(run_key(j.run) for j in jobs if j.forecast.stalled)
        # completed runs (a cancelled one's last report is not its end), and the pods
        # with a run running, for the release lags (release_lags)
        ended = [Ended(r.namespace, r.pod, r.last_timestamp) for r in newly_finished if r.completed]
        busy = {(r.run.namespace, r.run.pod) for r in running}
        busy |= {(stub.namespace, stub.pod) for _, stub in planless}
        queue = self._queue_starts(now, instant, jobs, errors, bool(said), (ended, busy))
        n_queries = self.client.stats.success + self.client.stats.error - before
        return ForecastSet(
            timestamp=now,
            jobs=tuple(jobs),
            gpus=tuple(gpu_free_times(view.allocations, jobs)),
            quality=dict(getattr(model, "quality_", {}) or {}),
            n_history=self.store.count_finished(),
            n_running=len(running) + len(view.planless),
            n_finished=len(newly_finished),
            job_errors=dict(errors),
            queries=n_queries,
            pending=queue,
            history_persisted=self.store.persistent,
            history_rows_skipped=self.store.skipped_rows,
            history_updates_skipped={
                "text": self.store.skipped_updates,
                "number": self.store.invalid_updates,
            },
            history_future_runs=self.store.future_rows,
            n_held=len(self._held),
            clock_offset_seconds=offset,
            prometheus_clock_offset_seconds=self._measured_offset(),
            release=self._release.summary() if self.settings.pending.enabled else None,
        )

    def _stalled_now(self, run: Run, view: CycleView, now: float, util_failed: bool) -> bool:
        """The run's stall verdict this cycle: ``is_stalled``, or, when the stall
        check's GPU-use query failed and the run is still silent too long for it, the
        verdict the last cycle published (``_stalled``).

        Why carry it: with the GPU use unknown, ``is_stalled`` says no; publishing that
        0 for one failed query resets GpuEtaTrainingStalled's ``for:``, whose fallback
        branch stays suppressed by the published series, so on a flaky server a hung
        run would never alert. A run with no earlier verdict is not stalled on silence
        alone, nor is one that has made progress since.
        """
        if util_failed and silent_too_long(run, view, now, self.settings):
            return run_key(run) in self._stalled
        return is_stalled(run, view, now, self.settings)

    def _read_util_recent(
        self, window: float, now: float, errors: Counter[str]
    ) -> dict[PodKey, float] | None:
        """The stall check's recent GPU use per container; None when its query fails.

        Why not fail the cycle: the query is sent after this cycle's read was stored
        (``store.record``, ``store.finish``), and only while some run made no progress,
        so a failure would drop every forecast of a cycle whose history already moved
        on, and a stuck run on a flaky server would fail every cycle. None: each run
        keeps its last verdict while still silent (``_stalled_now``). Counted
        ``stall_check_failed``; one WARNING when it starts failing, DEBUG after.
        """
        query = queries.render(queries.UTIL_RECENT, window, self.settings.idle_window_seconds)
        try:
            values = pod_values(self.client.instant(query, at=now))
        except PromAPIError as err:
            errors["stall_check_failed"] += 1
            level = logging.DEBUG if self._util_recent_failing else logging.WARNING
            log.log(
                level,
                "stall check skipped, its GPU-use query failed (each run still silent "
                "keeps its last stall verdict): %s",
                err,
            )
            self._util_recent_failing = True
            return None
        self._util_recent_failing = False
        return values

    def _note_held(self, held: frozenset[RunKey]) -> None:
        """Keep ``held``, the runs forecast from a scrape gap (``n_held``); one INFO line
        when that set changes."""
        if held != self._held:
            log.info(
                "scrape gap: %d runs held from their last samples (exporter scrape failed): %s",
                len(held),
                ", ".join(sorted(k[3] for k in held))[:500] or "none",
            )
            self._held = held

    def _log_failed(self, failed: Mapping[RunKey, str]) -> None:
        """One WARNING when runs start to fail assembly (``assemble``'s guard: counted as
        ``RUN_FAILED``), not every cycle while they do; no traceback. It names how many
        started to, and the first of them with its error: a bug that fails every run
        gives one line, not one per run of the cluster (again after each restart). Why
        a WARNING and not a debug line: no input should reach it, so it is a bug to
        report, and the runs are missing from the forecasts meanwhile."""
        new = sorted(failed.keys() - self._failed_runs)
        if new:
            log.warning(
                "%d run(s) skipped: reading their series raised (counted in "
                'gpu_eta_forecaster_job_errors_total{reason="%s"}; please report it); '
                "the first, %s: %s",
                len(new),
                RUN_FAILED,
                "/".join(new[0]),
                failed[new[0]],
            )
        self._failed_runs = frozenset(failed)

    def _keep_features(self, view: CycleView) -> None:
        """Give each run of ``view`` the features it had in the previous cycle that this
        one did not read (newer values win), and remember them for the next.

        Why: a run's GPU count and model come from its pod's GPU allocation, which is
        gone as soon as the pod completes, often in the very cycle that reads the run's
        end. Stored with that cycle's features the run would lose them (the history
        keeps a run's latest), and with them its configuration: a run without a planned
        total is stored only then, so the job's next runs, whose pods hold their GPUs,
        would find no earlier run like them (``planless``)."""
        known: Mapping[RunKey, Mapping[str, float | str]] = self._features
        kept: dict[RunKey, Mapping[str, float | str]] = {}

        def merged(item: _T, key: RunKey) -> _T:
            features = {**_carried(known.get(key)), **item.features}
            kept[key] = features
            return (
                item if features == item.features else dataclasses.replace(item, features=features)
            )

        view.updates = [merged(up, run_key(up)) for up in view.updates]
        view.planless = [merged(run, run.key) for run in view.planless]
        self._features = kept

    def _log_partial(
        self, said: Sequence[str], partial_since: float | None, held: bool, now: float
    ) -> None:
        """One log line when reads turn partial, when they have been partial past the
        hold, and when they are whole again; never one per cycle (a store can stay down
        for hours, or flap). Read from the run of partial reads as stored before this
        read and after it, not from what this process logged: a ``once`` CronJob is a
        new process every read. ``said``: the read's warnings, already cleaned and
        bounded (``promparse.decode_answer``); the first is named."""
        hold = self.settings.partial_hold_seconds
        before, last = self._partial_since, self._partial_last
        if partial_since is None:
            if before is not None:
                log.info(
                    "Prometheus answers whole again after %.0fs of partial answers",
                    (last if last is not None else now) - before,
                )
            return
        if not said:
            return  # a whole read inside a run of partial ones (a flapping store)
        first = list(dict.fromkeys(said))
        if before is None and held:
            log.warning(
                "Prometheus answers are partial (%d warning(s), first: %s): runs absent "
                "from them are not counted as vanished for up to %.0fs",
                len(first),
                first[0],
                hold,
            )
        was_held = before is None or (hold > 0 and last is not None and last - before <= hold)
        if not held and was_held:
            log.warning(
                "Prometheus answers partial for %.0fs, over %.0fs (first warning: %s): "
                "runs absent from them are counted as vanished again",
                now - partial_since,
                hold,
                first[0],
            )

    def _queue_starts(
        self,
        now: float,
        instant: Mapping[str, Sequence[Sample]],
        jobs: Sequence[JobForecast],
        errors: Counter[str],
        read_partial: bool = False,
        ended: tuple[Sequence[Ended], Set[tuple[str, str]]] = ((), frozenset()),
    ) -> PendingSet | None:
        """Predicted starts of the GPU queue (docs/pending.md); None when turned off.

        Its queries are sent after the cycle's read was stored: their failure, whether
        Prometheus is away or refuses them on this cluster's data (``PromQueryError``: a
        kube-state-metrics setup the query does not expect), or a failure of the replay
        itself, only loses this cycle's queue predictions (counted ``pending_failed``,
        logged): the jobs' forecasts do not depend on it.

        ``ended``: the runs completed in this cycle, and the pods with a run running:
        with the GPU pods read, how long a completed run's pod kept its GPUs
        (``_learn_release``), which the replay adds to a run's end; a completed run's pod
        still holding its GPUs (``ReleaseLags.lingering``) frees them a lag after its
        run's end in the replay (``Holder.run_ended``).
        """
        ps = self.settings.pending
        if not ps.enabled:
            return None
        said: list[str] = []
        try:
            samples = self._ask_queue(kube_state.first_round(ps.priorities), now, said)
            # what the pods' answers call for (a second query, only when some pod
            # selects a node label beyond the GPU type or lacks kube_pod_created: with
            # it for none, the arrivals too)
            second = kube_state.second_round(samples, ps.priorities)
            if second:
                samples.update(self._ask_queue(second, now, said))
        except PromQueryError as err:  # refused on this cluster's data: not Prometheus away
            errors["pending_failed"] += 1
            log.warning("pending-pod queries refused by the server on its data: %s", err)
            return None
        except PromAPIError as err:  # away, timing out, overloaded: after the read was stored
            errors["pending_failed"] += 1
            log.warning("pending-pod queries failed (the jobs are forecast): %s", err)
            return None
        except kube_state.QueryTooLong as err:  # not sent: no server takes it
            errors["pending_failed"] += 1
            log.warning(
                "pending-pod queries not sent: %s (fewer or shorter --pending.gpu-resource "
                "names make the queue's queries shorter)",
                err,
            )
            return None
        self._log_queue_partial(said, read_partial)
        try:
            node_models = {
                s.labels["node"]: s.labels["model"]
                for s in instant.get("gpu_info", ())
                if s.labels.get("node") and s.labels.get("model")
            }
            queue = kube_state.parse(
                samples,
                now,
                node_models,
                ps.priorities,
                ps.arrivals_seconds,
                ps.gpu_resources,
            )
            read = queue  # as answered: fill adds nodes' last-read holders as holding now
            queue, kept = self._last_seen.fill(queue, now)
            self._log_kept(kept, now)
            ends = job_end_times(
                [(j.run.namespace, j.run.pod, j.completion_timestamps) for j in jobs]
            )
            # pods that fit free GPUs and stayed unbound wait for something else: not
            # replayed (pending.predict_queue)
            self._learn_release(read, ended, now, complete=not kept.nodes and not said)
            blocked = self._starts.blocked(queue, now)
            result = predict_queue(
                queue,
                ends,
                self._durations,
                now,
                ps,
                blocked,
                release_seconds=self._release.lags,
                run_ends=self._release.lingering,
            )
            return self._starts.update(queue, result, now)
        except Exception as err:  # the queue must not fail the cycle
            errors["pending_failed"] += 1
            log.warning("pending-pod prediction failed: %s", err)
            return None

    @property
    def release_lags(self) -> tuple[float, ...]:
        """The lags from completed runs' ends to their pods' GPUs being free that the
        replay draws from, in quantile order (none: a run's end frees its GPUs)."""
        return self._release.lags

    def _learn_release(
        self,
        queue: kube_state.ClusterQueue,
        ended: tuple[Sequence[Ended], Set[tuple[str, str]]],
        now: float,
        complete: bool = True,
    ) -> None:
        """The release lags given this cycle's GPU pods (``queue.holders``: those
        kube-scheduler counts as holding), and written to the history file when some
        were learned; a failed write is one ERROR line (then kept in memory).
        ``queue`` is the read as answered, before ``LastSeen.fill``: a node's last-read
        holders added back are no sighting now (a KSM shard away for 3 minutes read as
        240 s of lag); ``complete`` False (nodes kept from an earlier read, or a partial
        answer) leaves the pods missing from it watched rather than freed. A completed
        run's workers (``pending.run_followers``: same owner, started with its pod, no
        run of their own) are watched with it, each until gone."""
        runs, busy = ended
        holding = {(h.namespace, h.pod): h.ends_with_run for h in queue.holders}
        uids = {(h.namespace, h.pod): h.uid for h in queue.holders if h.uid}
        ends = {(r.namespace, r.pod): r.end_timestamp for r in runs}
        followers = run_followers(queue.holders, self._holders_before, ends, busy)
        self._holders_before = queue.holders
        dropped = self._release.n_outliers
        learned = self._release.observe(
            runs,
            holding,
            busy,
            now,
            uids,
            complete,
            [Ended(ns, pod, end) for (ns, pod), end in followers.items()],
        )
        if not learned:
            if self._release.n_outliers > dropped:
                log.debug("release lag above %.0fs dropped", self._release.max_seconds)
            return
        try:
            self.store.set_meta(RELEASE_LAGS_KEY, encode_release_lags(self._release.brackets))
        except Exception as err:  # HistoryError, sqlite3 errors: not worth a cycle
            if not self._release_failing:
                log.error("release lags: cannot save them in the history file: %s", err)
            self._release_failing = True
        else:
            self._release_failing = False

    def _ask_queue(
        self, parts: Mapping[str, str], now: float, said: list[str]
    ) -> dict[str, list[Sample]]:
        """The queue's ``parts`` (``kube_state`` templates) answered by name, asked folded
        in as few queries of at most ``queries.MAX_QUERY_CHARS`` as they fit in
        (``kube_state.batches``): one, unless the site's own GPU resource names are many
        and long (every GPU matcher of every part holds them)."""
        ps = self.settings.pending
        parts = kube_state.rendered(parts, ps.arrivals_seconds, ps.gpu_resources)
        samples: dict[str, list[Sample]] = {}
        for batch in kube_state.batches(parts, queries.fold, queries.MAX_QUERY_CHARS):
            skipped = Skipped(keep=(queries.TAG, *kube_state.SKIPPED_LABELS))
            folded = queries.fold(batch)
            answer = self.client.instant(folded, at=now, warnings=said, skipped=skipped)
            samples.update(queries.unfold(answer, batch))
            left = [Sample(labels, math.nan, now) for labels in skipped.kept]
            for name, series in queries.unfold(left, batch).items():
                if series:
                    samples[kube_state.skipped_name(name)] = series
        return samples

    def _log_kept(self, kept: Kept, now: float) -> None:
        """One WARNING when GPU nodes that were open when last read go missing from the
        queue's read and are kept as last read (``last_seen``), again when which ones
        changes; one INFO when none such is kept any more (read again, or past the
        grace). Not one line per cycle: a shard can stay down for the whole grace.

        Nodes that were closed when last read (cordoned, not Ready, tainted by an
        autoscaler removing them) are kept the same way, said at DEBUG only: such a
        node leaving is what a scale-down looks like (an autoscaler taints, then
        deletes; a drain cordons, then deletes), every few minutes on a spot pool, and
        blaming KSM for each would bury the warning meant for a shard down. A shard
        down takes open nodes too, unless every node it serves was closed."""
        if kept.closed != self._kept_closed_said:
            if kept.closed:
                log.debug(
                    "kube-state-metrics read lacks %d GPU node(s) closed when last read "
                    "(%s): removed (an autoscaler's scale-down, a drain)? Kept closed as "
                    "last read, with their pods, for up to %.0fs",
                    len(kept.closed),
                    first_of(kept.closed),
                    self._last_seen.grace_seconds,
                )
            self._kept_closed_said = kept.closed
        loud = kept.open
        if loud == self._kept_said:
            return
        if loud:
            log.warning(
                "kube-state-metrics read lacks %d GPU node(s) it showed open %.0fs ago "
                "(%s): a KSM shard or replica down, or KSM restarting? They are kept "
                "as last read, with their pods, for up to %.0fs (docs/pending.md)",
                len(loud),
                now - (kept.since if kept.since is not None else now),
                first_of(loud),
                self._last_seen.grace_seconds,
            )
        else:
            log.info("kube-state-metrics read: no GPU node kept as last read any more")
        self._kept_said = loud

    def _log_queue_partial(self, said: Sequence[str], read_partial: bool) -> None:
        """Say once that the queue's answer is partial (kube-state-metrics series of a
        store that is away: pending pods or GPU nodes missing, so starts are predicted
        on part of the queue), when the runs' read was whole and so said nothing
        (``_log_partial``); again only when what it says changes. Counted in
        ``gpu_eta_forecaster_partial_answers_total`` either way."""
        first = said[0] if said else None
        if first is not None and not read_partial and first != self._queue_warned:
            log.warning(
                "pending-pod answer is partial (first warning: %s): starts are predicted "
                "on the pods and GPU nodes it holds",
                first,
            )
        self._queue_warned = first

    def _range_span(
        self, now: float, window: float, static_full: bool = False
    ) -> tuple[float, bool]:
        """The span the range queries cover (since the previous full range read, plus
        the overlap) and whether this cycle reads them for every run.

        Why not every run every cycle: they are the cycle's largest answers (every
        sample of every running run's epoch and epoch end in the window: 10 MB and
        0.8 s of the TSDB's time per cycle at 10,000 runs, docs/scrape-tuning.md), and
        what they add to the instant queries (each run's latest epoch and its end
        time) is the epoch ends *between* two cycles, which a forecast does not need
        at once: a run's rate reads an interval spanning several epochs with its
        width. So they are read for every run one cycle in ``range_every`` (and in the
        first), over the span since the previous such read: every epoch end the
        scrapes saw is still recovered, at most ``range_every`` + 1 cycles late. In the
        other cycles they are read only for the runs that may not be seen again
        (``ending_runs``: a set match on their ``run_id``), so that a finished run is
        stored with all its epochs. A read for every run due in a cycle that also reads
        the unchanging series in full (``static_full``) waits one cycle, so that the two
        heaviest reads do not add up.

        The GPU-use and memory means (``queries.SPAN``) go with either read, over the
        same span: for every run, or for the ending runs' pods (``_ending_means``), so
        that a finished run's lifetime means cover its whole life, a run shorter than
        ``range_every`` cycles included. Each read adds to a run's lifetime means with
        the weight of the seconds of its life not counted yet (``assemble``): since the
        previous full read, or since a later read of its own (``_means_until``: a run
        read as ending that goes on, e.g. one missing from a scrape, is not counted
        twice by the next read), from its start, until now or until its last report
        when it is gone. The overlap is read, never weighted. ``_means_until`` is kept
        in the history file beside the range time, so a restart does not count such a
        run's seconds twice either.
        """
        s = self.settings
        since_range = self._cycles_since_range
        full = since_range is None or since_range + 1 >= s.range_every
        if full and static_full and since_range is not None and s.range_every > 1:
            full = since_range + 1 > s.range_every  # waited once already: read now
        if self._last_range_time is None:
            return window, full
        since = now - self._last_range_time + s.overlap_seconds
        return max(window, min(s.lookback_seconds, since)), full

    def _query(
        self, now: float, window: float, said: list[str], offset: float | None = None
    ) -> tuple[
        dict[str, list[Sample]],
        dict[str, list[Series]],
        float | None,
        tuple[RunKey, ...] | None,
        frozenset[RunKey],
    ]:
        """Every answer ``assemble`` reads but the stall check's (``_run``), the
        unchanging ones from ``self._static``; the span of this cycle's range read and
        GPU-use and memory means, None without one; and the runs they were read for:
        None for every run (a full read), the ending runs otherwise (``_range_span``);
        and the runs a scrape gap held (``scrape_gap``). Every answer's warnings go to
        ``said`` (``partial_hold``). ``offset``: the one ``now`` took from the clock,
        checked against the first answer's, ``_ClockMoved`` when it moved (``run``);
        None: not checked."""
        s = self.settings

        static = self._static
        # the runs restarted within the window, named in the reads' restarted runs'
        # clause (queries.AGAIN_SERIES): their earlier attempt's last samples are in it
        again = ""

        def ask(name: str, runs: str = "", pods: str = "", over: float = window) -> list[Sample]:
            idle = s.idle_window_seconds
            query = queries.render(queries.INSTANT[name], over, idle, runs, pods, again)
            return self.client.instant(query, at=now, warnings=said)

        def ask_steps() -> dict[str, list[Sample]]:
            """The runs' steps and the step each started at, in one query
            (queries.STEP_PARTS)."""
            out: dict[str, list[Sample]] = {}
            for parts in queries.step_reads(window, s.idle_window_seconds, again):
                folded = self.client.instant(queries.fold(parts), at=now, warnings=said)
                out.update(queries.unfold(folded, parts))
            return out

        # presence and the runs' end in one query (queries.PRESENT_PARTS)
        presence = {
            name: queries.render(tpl, window, s.idle_window_seconds)
            for name, tpl in queries.PRESENT_PARTS.items()
        }
        instant = queries.unfold(
            self.client.instant(queries.fold(presence), at=now, warnings=said), presence
        )
        if offset is not None:
            fresh = self._clock_offset(offset)
            if abs(fresh - offset) > s.clock_offset_bound_seconds:
                raise _ClockMoved(fresh)
        # a run restarted under its key, found from this answer (below): named in the
        # progress reads too, so that its earlier attempt's epoch is not read as its own
        found = static.started_again(instant.get("started_again", ())) | (
            self._finished_present.trained_again(
                run_keys(instant.get("ended", ())), run_keys(instant["present"])
            )
        )
        again = self._again(found, now - window, now)
        instant.update({name: ask(name) for name in queries.DYNAMIC if name not in instant})
        # runs present at the previous read and absent now: their exporter's scrape may
        # have failed. Their last report and allocations are asked of targets whose
        # scrape failed, folded into the unchanging series' or GPU models' read when one
        # goes out (the query count stays bounded), else alone (scrape_gap)
        previous = self._present
        if previous is None:
            previous = frozenset(run_key(r.run) for r in self.store.running())
        gone = scrape_gap.missing(previous, instant["present"])
        gap_parts = scrape_gap.parts(gone) if gone else {}
        gap: dict[str, list[Sample]] = {}
        seen = {
            key
            for name in queries.SEEN
            for sample in instant[name]
            if (key := sample_run_key(sample)) is not None
        }
        # the step of the runs that report only steps, when some were held: read before
        # the unchanging series, so that such a run restarted is found as an epoch run is
        steps_read = static.steps_only()
        if steps_read:
            instant.update(ask_steps())
        # a run restarted under its key: its start and plan are read again in this cycle,
        # not up to ``static_full_every`` later. Found three ways: its epoch, last end or
        # step went back; its start changed in the window (its new attempt may have
        # passed the old one's epoch and last end by now, so that nothing went back);
        # or, read ended, its end is no longer answered while it is present (trained
        # again under its name: a new start, no end; its old start with the old end
        # lingering in the window reads it done), which holds where the start's change
        # was not seen (a cycle more than the window after it, a partial answer). Until
        # the window no longer reaches back to when it was found, its reads leave out the
        # earlier attempt's last samples of the series it does not send (``again``: a
        # plan, an epoch, a batch size), which the window's ``last_over_time`` answers
        marks = progress_marks(instant)
        static.forget(went_back(self._marks, marks) | found, now)
        again = self._again((), now - window, now)
        # a run at (or past) the plan held for it may have raised its plan since the
        # last full read: read again before it is judged finished, what is held kept
        # should the read not answer it (``refresh``). Only where its progress moved
        # since the last cycle: a finished run whose pod lives on (a Job's Succeeded
        # pod) stays at its plan and is not read again every cycle; one this process
        # finished already stays frozen, nothing to ask
        static.refresh(
            k
            for k in static.reached_plan(instant)
            if not self._finished_present.finished_lately(k) and marks.get(k) != self._marks.get(k)
        )
        # a run gone from ``present`` since the previous read (not one finished) is judged
        # from now on by the plan held for it, which may have been lowered since the last
        # full read (8 epochs, then 4, ending at 4): read again, as above, so that it is
        # finished completed at the plan it reported last, not stored cancelled short of
        # the old one (it shares the read of new runs, and the scrape gap's parts)
        static.refresh(gone)
        self._marks = marks
        full = static.full_due()
        parts = None
        if not full:
            unknown = static.unknown(seen)
            parts = self._unknown_runs_parts(unknown, window, again)
            if parts is None:
                # too many to ask for: the runs without a plan (read before, found none)
                # wait for the next full read, so that they never make every cycle one
                fresh = static.never_read(seen)
                if len(fresh) < len(unknown):
                    parts = self._unknown_runs_parts(fresh, window, again)
        if full or parts is None:
            full = True
            answers = {name: ask(name) for name in (*queries.STATIC_RUN, queries.STATIC_POD)}
        elif parts:
            # the gap's parts ride along only while the two fit one query together
            # (VictoriaMetrics refuses a query over 16 KiB: HTTP 422); else they go
            # with the GPU models, or alone, below
            riding = bool(gap_parts) and queries.fits({**parts, **gap_parts})
            if riding:
                parts = {**parts, **gap_parts}
            folded = self.client.instant(queries.fold(parts), at=now, warnings=said)
            answers = queries.unfold(folded, parts)
            answers[queries.STATIC_POD] += answers.pop(queries.STATIC_POD_EXPORTED, [])
            if riding:
                gap = {name: answers.pop(name) for name in gap_parts}
                gap_parts = {}
        else:
            answers = {}
        static.store(answers, full)
        gpus_due = full or static.gpus_unknown(instant["allocated"])
        if gap_parts:  # not sent with the unchanging series: with the GPU models, or alone
            asked = {**({"gpu_info": queries.GPU_INFO} if gpus_due else {}), **gap_parts}
            gap = queries.unfold(
                self.client.instant(queries.fold(asked), at=now, warnings=said), asked
            )
            if gpus_due:
                static.store_gpus(gap.pop("gpu_info"))
        elif gpus_due:
            static.store_gpus(ask("gpu_info"))
        instant["gpu_info"] = static.gpus()
        held = scrape_gap.held(gone, instant, gap)
        # the runs held are seen: their plan and start are kept for as long as the gap
        # holds them, not only while their last sample is in the window
        held_keys = run_keys(held["present"]) - run_keys(instant["present"])
        seen |= held_keys
        instant.update(static.answers(seen))
        instant.update(held)
        steps_only = static.steps_only()  # some run reports only steps
        # a run without a plan may report only steps: its latest step shows it running
        # (runs_from_series.PlanlessRun); no range read, it is not stored
        if not steps_read:
            wanted = steps_only or static.without_plan(seen)
            instant.update(ask_steps() if wanted else {n: [] for n in queries.STEP_PARTS})
            self._marks = progress_marks(instant)  # with the steps, for the next cycle
        # once, with every run's steps read (a run followed in steps at its plan is one)
        may_end = ending_runs(instant)
        # a completed run's series lingering with its pod: not read by name, not stored
        starts = {k: s.value for s in instant.get("start", ()) if (k := sample_run_key(s))}
        frozen = self._finished_present.completed_present(may_end, starts)
        span, full = self._range_span(now, window, static_full=full)
        runs = ""  # every run
        ending: tuple[RunKey, ...] | None = None  # every run
        if not full:
            ending = self._finished_present.to_read_as_ending(may_end, frozen)
            if not ending:
                return instant, {}, None, (), held_keys, frozen
            read = self._ending_queries(ending)
            if read is None:
                full, ending = True, None
            else:
                runs, pods = read
                instant.update(self._ending_means(pods, span, now, said))
        if full:
            instant.update({name: ask(name, over=span) for name in queries.SPAN})
        # every epoch end the scrapes saw, also over a long span (queries.range_reads);
        # a run's steps are kept one per cell anyway: read at a coarser step there
        read_runs = len(seen) if ending is None else len(ending)
        templates, step = queries.range_reads(span, s.min_step_seconds, s.max_points, read_runs)
        steps: dict[str, str] = {}
        if steps_only:
            # its plans with the restarted runs' clause (queries.step_range), naming the
            # runs found restarted within its reach, not only within the window
            reach = self._step_range_since(now, span)
            keep = self._step_range_since(now, s.lookback_seconds)
            named = queries.again_match(k[3] for k in static.restarted(reach, keep_since=keep))
            steps = {"step_range": queries.step_range(runs, named)}
        coarse = queries.range_step(span, s.min_step_seconds, s.max_points)
        fine = read_runs if step < coarse else 0  # a long read at the fine step: windows
        ranges = {
            name: self._range(tpl.format(runs=runs), now - span, now, step, fine, said)
            for name, tpl in templates.items()
        }
        for name, query in steps.items():  # step_range: already a query, not a template
            ranges[name] = self.client.range(query, now - span, now, coarse, warnings=said)
        return instant, ranges, span, ending, held_keys, frozen

    def _range(
        self, query: str, start: float, end: float, step: float, runs: int, said: list[str]
    ) -> list[Series]:
        """An epoch range read of ``runs`` runs, in the time windows that keep each query
        within ``queries.MAX_CHANGES_RUNS`` runs' cost (``queries.range_windows``; one
        window almost always), joined into the one answer."""
        windows = queries.range_windows(start, end, step, runs)
        answers = [self.client.range(query, a, b, step, warnings=said) for a, b in windows]
        return answers[0] if len(answers) == 1 else joined(answers)

    def _ending_queries(self, keys: Sequence[RunKey]) -> tuple[str, list[str]] | None:
        """For the runs ``keys`` only: the set match on their ``run_id`` the range queries
        take and their pods (whose means ``_ending_means`` reads); None when a full read
        is needed instead (too many runs for one query, a run id a set match cannot
        name, a match over ``queries.MAX_QUERY_CHARS``). Runs without a pod have none."""
        if len(keys) > queries.MAX_UNKNOWN_RUNS:
            return None
        runs = queries.matcher("run_id", [k[3] for k in keys])
        if runs is None or len(runs) > queries.MAX_QUERY_CHARS:
            return None
        return runs, [k[1] for k in keys if k[1]]

    def _ending_means(
        self, pods: Sequence[str], span: float, at: float, said: list[str]
    ) -> dict[str, list[Sample]]:
        """The GPU-use and memory means over ``span`` (``queries.SPAN``) of ``pods``
        (named by ``pod`` or ``exported_pod``), in up to ``queries.MAX_POD_QUERIES``
        queries each, or of every pod when the pods cannot be named or need more (a
        heavier answer; only the ending runs' means are counted from it: ``assemble``'s
        ``means_for``); none without pods.

        GPU use (``queries.pods_use_queries``): ``UTIL_MEAN`` by set match, or, where that
        takes more queries, the raw samples of the series it reads (the pods' set match
        written once per query, about 310 37-character names each, a query per pod
        label) with its answer computed from them (``queries.util_mean_of``). Why:
        ``UTIL_MEAN`` carries the match on each of its six selectors in both pod labels,
        so only about 22 such pods fit a query and more than about 88 made a read of
        every pod's. Where the raw samples would be too many
        (``queries.MAX_RAW_SAMPLES``: a hundred pods over an hour), ``UTIL_MEAN`` is
        read. Memory: its query per set of pods (``queries.for_pods_split``).
        docs/forecaster.md, "GPU-use and memory means". Answers' warnings go to
        ``said``."""
        if not pods:
            return {}
        idle = self.settings.idle_window_seconds
        limit, most = queries.MAX_QUERY_CHARS, queries.MAX_POD_QUERIES

        def ask(template: str, parts: list[str] | None) -> list[Sample]:
            parts = parts or [queries.render(template, span, idle)]
            return [x for q in parts for x in self.client.instant(q, at=at, warnings=said)]

        raw, use = queries.pods_use_queries(pods, span, idle, self.settings.min_step_seconds)
        if raw:
            series = [x for q in use or () for x in self.client.samples(q, at=at, warnings=said)]
            util = queries.util_mean_of(series, at)
        else:  # UTIL_MEAN itself: by set match, or every pod's
            util = ask(queries.UTIL_MEAN, use)
        memory = queries.for_pods_split(queries.MEMORY_RATIO, span, idle, pods, limit, most)
        return {"util_mean": util, "memory_ratio": ask(queries.MEMORY_RATIO, memory)}

    def _log_revived(self, revived: Sequence[RunKey], lately: Set[RunKey]) -> None:
        """Say the runs finished as vanished that the history revived (present again
        with the same start): INFO for those not revived within the last refit interval
        (``lately``, ``revived_lately``), DEBUG for the others. Why: a run that keeps
        coming back (an exporter flapping past the vanish grace, a run finished each
        cycle by a plan not its own) said so every cycle; once per revival is enough,
        its next revives are as many refits it no longer forces (``revive_refit``)."""
        back = [k for k in revived if k not in lately]
        for level, keys in (
            (logging.INFO, back),
            (logging.DEBUG, [k for k in revived if k in lately]),
        ):
            if keys:
                log.log(
                    level,
                    "history file %s: %d run(s) finished as vanished are present again with "
                    "the same start, running again (first: %s)",
                    self.store.path,
                    len(keys),
                    ascii("/".join(keys[0])),
                )

    def _again(self, found: Set[RunKey], since: float, now: float) -> str:
        """The set match naming the runs restarted since ``since`` (the read window's
        start: ``StaticSeries.restarted``) and ``found`` restarted by this read, for
        the restarted runs' clause (``queries.again_match``; empty: none). Those found
        within the step range query's reach (``_step_range_since``) are kept for it."""
        keep = self._step_range_since(now, self.settings.lookback_seconds)
        keys = {*self._static.restarted(since, keep_since=keep), *found}
        return queries.again_match(k[3] for k in keys)

    @staticmethod
    def _step_range_since(now: float, span: float) -> float:
        """The earliest time a run found restarted matters to the step range query over
        ``span`` before ``now``: at each step it looks back ``STEP_RANGE_PLAN_LOOKBACK``
        for a plan, so a run restarted that long before the span's start still has its
        earlier attempt's plan there (a run is found restarted at or after its
        restart)."""
        return now - span - queries.STEP_RANGE_PLAN_SECONDS

    def _unknown_runs_parts(
        self, keys: Sequence[RunKey], window: float, again: str = ""
    ) -> dict[str, str] | None:
        """The unchanging series of ``keys`` only, as parts of one folded query, the runs
        ``again`` names read as restarted (``queries.render``); {} when there is none to
        read, None when a full read is needed instead (too many runs for one query, or a
        label a set match cannot name)."""
        if not keys:
            return {}
        if len(keys) > queries.MAX_UNKNOWN_RUNS:
            return None
        idle = self.settings.idle_window_seconds
        runs = queries.matcher("run_id", [k[3] for k in keys])
        if runs is None:
            return None
        parts = {
            name: queries.render(queries.INSTANT[name], window, idle, runs=runs, again=again)
            for name in queries.STATIC_RUN
        }
        pods = [k[1] for k in keys if k[1]]
        if pods:
            for name, label in (
                (queries.STATIC_POD, "pod"),
                (queries.STATIC_POD_EXPORTED, "exported_pod"),
            ):
                match = queries.matcher(label, pods)
                if match is None:
                    return None
                parts[name] = queries.render(queries.POD_INFO, window, idle, pods=match)
        return parts if queries.fits(parts) else None

    def _fitted(self, now: float) -> Model:
        """The model to predict with; refits when the history changed and the period passed.

        The first fit is synchronous (nothing to predict with before it). Later refits
        run in the background when ``background_refit`` is set (fitting on tens of
        thousands of runs takes seconds; a cycle must not): a thread waits for a
        forked child doing the fit (``refit_in_process``), or fits itself. The new
        model is swapped in by the first cycle after it is ready. A failed refit keeps the
        previous model (logged); a failed first fit fails the cycle.
        """
        self._swap_refit()
        if self.model is None:
            self._last_fit = now
            history = self._history()
            self._durations = run_durations(history)
            self._install(self._fit(history), self.store.version, history, fit_durations(history))
        elif (
            self.store.version != self._model_version
            and now - self._last_fit >= self.settings.refit_seconds
            and self._refit_thread is None
        ):
            self._last_fit = now
            version = self.store.version
            history = self._history()
            self._durations = run_durations(history)
            if self.settings.background_refit:
                self._refit_thread = threading.Thread(
                    target=self._refit_job, args=(history, version), daemon=True
                )
                self._refit_thread.start()
            else:
                self._refit_job(history, version)
                self._swap_refit()
        assert self.model is not None
        # a model fitted before the latest revive learnt runs that have since left the
        # finished history: ``appended_since`` could not find where it left off and
        # would hand every finished run again; the refit the revive forced learns them
        fitted_before_revive = self._learned_version < self._relearn_from
        if not fitted_before_revive and self.store.version != self._learned_version:
            self._learn_since_fit()
        return self.model

    def _learn_since_fit(self) -> None:
        """Hand runs that finished since the model's fit to its ``update`` (if it has one).

        Why: a configuration is often re-run right after its previous run ends, and that
        run is its best analog; waiting for the next refit (``refit_seconds``) would
        forecast the re-run without it. ``update`` is given only the runs appended after
        the last one it has seen (``history.finished`` keeps that order); the
        regression, weights and calibration wait for the refit. A failed update keeps
        the model as it was.

        At most ``fit_runs`` runs (0: no limit) are given between two fits. Why: each
        one stays in the model (an analog, a job group), and only a refit forgets runs;
        while refits fail (a child killed for its memory, the refit timeout, an error
        each time) the model would grow by every run that finishes. A model that has
        learnt as many runs as it fits on waits for a refit to learn more.
        """
        update = getattr(self.model, "update", None)
        self._learned_version = self.store.version
        history = self._history()
        self._learn_durations(history)
        if update is None:
            return
        limit = self.settings.fit_runs
        if limit and self._learnt_count >= limit:
            return
        added = appended_since(self._learnt_last, history)
        if limit:
            added = added[: limit - self._learnt_count]
        if not added:
            return
        try:
            update(added)
        except Exception as err:  # the model keeps forecasting from its fit
            log.warning("model update with newly finished runs failed: %s", err)
            return
        self._learnt_last = added[-1:]
        self._learnt_count += len(added)
        if limit and self._learnt_count >= limit:
            log.warning(
                "the model has learnt %d finished runs since its fit (--model.fit-runs); "
                "it learns the next ones after a refit",
                limit,
            )

    def _learn_durations(self, history: Sequence[Run]) -> None:
        """Give the plan-less forecasts' durations the runs of ``history`` (the store's
        finished list, oldest first) they have not seen: those finished since they were
        built (``_install``, with each refit, failed or not)."""
        added = appended_since(self._planless_seen, history)
        if not added:
            return
        for run in added:
            self._planless.add(run)
        self._planless_seen = [added[-1]]

    def _forecast_planless(
        self,
        stub: Run,
        last: float,
        now: float,
        stalled: bool,
        spread: Spread,
    ) -> Forecast | None:
        """A run without a planned total (``planless_stub``), forecast from the completed
        durations of its configuration, else its job's, else the cluster's
        (``planless``); None when they say nothing (none, or all shorter). A stalled one
        (no progress since ``last``, its GPU idle) holds the forecast it had at
        ``last``, widened as a stalled run with a plan is (``stall_widen_since``): its
        GPU shows a free time and its pods a stall, as any run's would. ``spread``:
        ``DurationsFit.spread``, read once a cycle."""
        at = min(now, last) if stalled else now
        # a start a little ahead of this clock (another node's, within the skew the
        # reading allows) is a run just started, not one without a forecast
        fc = self._planless.forecast(stub, max(0.0, at - stub.start_timestamp), spread)
        if fc is None:
            return None
        if stalled:
            p10, p50, p90 = stall_widen_since((fc.p10, fc.p50, fc.p90), at, now)
            fc = dataclasses.replace(fc, p10=p10, p50=p50, p90=p90, stalled=True)
        return sanitize(fc)

    def _history(self) -> list[Run]:
        """The finished runs the model fits on: the most recent ``fit_runs`` (0: all)
        holding at most ``fit_points`` progress points (0: any number)."""
        return self.store.finished(self.settings.fit_runs or None, self.settings.fit_points or None)

    def wait_for_refit(self, timeout: float | None = None) -> None:
        """Block until a background refit (if any) is done; for tests and shutdown."""
        thread = self._refit_thread
        if thread is not None:
            thread.join(timeout)

    def _fit(self, history: Sequence[Run]) -> Model:
        started = time.monotonic()
        try:
            model = self.model_factory().fit(history)
        except ForecasterError:
            raise
        except Exception as err:
            raise ModelError(f"model fit failed on {len(history)} runs: {err}") from err
        n = len(history)
        log.info(
            "model fitted on %d run%s in %.2fs",
            n,
            "" if n == 1 else "s",
            time.monotonic() - started,
        )
        return model

    def _refit_job(self, history: Sequence[Run], version: int) -> None:
        """Fit a model on ``history`` (store ``version``) and build the plan-less
        durations from it, for the next cycle to install (``_pending``). A failed fit
        keeps the previous model (logged), but its durations are still installed. Why:
        they need no model, and only a rebuild forgets configurations; while refits
        fail, the durations would learn one configuration more with each run that
        finishes (a sweep's unique job names) and never drop one."""
        try:
            if self.settings.background_refit and self.settings.refit_in_process:
                started = time.monotonic()
                model = fit_in_child(
                    self.model_factory, history, self.settings.refit_timeout_seconds
                )
                log.info(
                    "model refitted on %d runs in a child process in %.2fs",
                    len(history),
                    time.monotonic() - started,
                )
            else:
                model = self._fit(history)
            # built here, not in the cycle: 100,000 runs take over a second
            self._pending = (model, version, history, fit_durations(history))
        except Exception as err:  # keep the previous model
            log.warning("model refit failed, keeping the previous model: %s", err)
            try:
                self._pending = (None, version, history, fit_durations(history))
            except Exception as durations_err:  # keep the previous durations too
                log.warning("plan-less durations rebuild failed: %s", durations_err)
                self._pending = None

    def _swap_refit(self) -> None:
        if self._refit_thread is not None and self._refit_thread.is_alive():
            return
        if self._pending is not None:
            self._install(*self._pending)
        self._pending = None
        self._refit_thread = None

    def _install(
        self, model: Model | None, version: int, history: Sequence[Run], durations: DurationsFit
    ) -> None:
        """Install a fit of ``history`` (store ``version``): its ``model`` (None: the fit
        failed, the previous model stays) and ``durations``."""
        self._planless = durations
        self._planless_seen = list(history[-1:])
        if model is None:
            return
        self.model = model
        self._model_version = version
        self._learned_version = version
        self._learnt_last = list(history[-1:])
        self._learnt_count = 0


_READ_EACH_CYCLE = frozenset({"progress_unit", STATED_PLAN})


def _carried(features: Mapping[str, float | str] | None) -> Mapping[str, float | str]:
    """What of a run's previous features is carried into a cycle that lacks them: all
    but ``progress_unit`` and ``epochs_planned_stated`` (``runs.STATED_PLAN``), which
    are what this cycle's read says (a run followed in steps that gets planned epochs
    counts epochs from then on; a run that ended short of its plan and starts again under
    its key is a new attempt, which stated no shorter end). Pure."""
    if not features:
        return {}
    return {k: v for k, v in features.items() if k not in _READ_EACH_CYCLE}


def planless_stub(run: PlanlessRun) -> Run:
    """The ``Run`` a forecast of a run without a planned total is published for: its
    identity, start and features; no progress points and an infinite plan (nothing
    reads a fraction of it, ``planless.stub``). Pure."""
    return planless_run(run.key, run.start_timestamp, run.features)


# The instant answers ``progress_marks`` reads, in the order of its tuples: each goes
# only up while a run lives (a step: a run that reports only steps)
PROGRESS_MARKS = ("epoch", "last_end", "step")


def progress_marks(
    instant: Mapping[str, Sequence[Sample]],
) -> dict[RunKey, tuple[float, ...]]:
    """Each run's latest epoch, last epoch end and latest step in ``instant``
    (``PROGRESS_MARKS``; NaN when not answered), by run key. Pure."""
    marks: dict[RunKey, list[float]] = {}
    for i, name in enumerate(PROGRESS_MARKS):
        for sample in instant.get(name, ()):
            key = sample_run_key(sample)
            if key is not None:
                marks.setdefault(key, [math.nan] * len(PROGRESS_MARKS))[i] = sample.value
    return {key: tuple(mark) for key, mark in marks.items()}


def went_back(
    previous: Mapping[RunKey, tuple[float, ...]], current: Mapping[RunKey, tuple[float, ...]]
) -> set[RunKey]:
    """The runs whose latest epoch, last epoch end or latest step is below what
    ``previous`` read (``progress_marks``): restarted under their key (a named run
    trained again in its pod, a job whose sender kept its run id). Pure; a mark not
    answered in either read (NaN) compares as not below.

    Why it matters: their start is an unchanging series (``static_series``), read for a
    known run only at the next full read; until then the new attempt would be forecast
    from the old one's start, and its first epochs stored against the old attempt's
    ends (an epoch keeps its first stored time) and lost. A run that reports only steps
    has no epoch: its step is what goes back.
    """
    out = set()
    for key, mark in current.items():
        before = previous.get(key)
        if before is not None and any(now < then for now, then in zip(mark, before, strict=True)):
            out.add(key)
    return out


def revived_lately(
    forced: Mapping[RunKey, float], now: float, refit_seconds: float
) -> frozenset[RunKey]:
    """The runs whose revive forced a refit within the last ``refit_seconds`` before
    ``now`` (``revive_refit``'s ``forced``): coming back again, they force none and are
    not said again at INFO (``Cycle._log_revived``). Pure."""
    return frozenset(k for k, t in forced.items() if now - t < refit_seconds)


def revive_refit(
    forced: Mapping[RunKey, float], revived: Sequence[RunKey], now: float, refit_seconds: float
) -> tuple[bool, dict[RunKey, float]]:
    """Whether reviving ``revived`` at ``now`` forces a refit, and the runs whose revive
    forced one within the last ``refit_seconds`` after it (``forced``: the same before).
    Pure.

    A revive forces a refit (the model learnt the run as cancelled: refitted without it
    at once, not after ``refit_seconds``), unless every run revived forced one within
    the last ``refit_seconds``. Why: a run that keeps coming back (finished again each
    cycle by a plan or epoch that is not its own, an exporter flapping past the vanish
    grace) forced a full refit every cycle, seconds of a core each at scale; the regular
    refit, due ``refit_seconds`` after the one it forced, learns it as it is then."""
    lately = revived_lately(forced, now, refit_seconds)
    kept = {k: t for k, t in forced.items() if k in lately}
    force = any(k not in kept for k in revived)
    if force:
        kept.update((k, now) for k in revived)
    return force, kept


def uncovered_since(
    previous: float | None, now: float, failed_at: float | None, grace_seconds: float
) -> float | None:
    """The previous successful read's time when the seconds since it are not covered
    by this process's reads (a read failed after it, at ``failed_at``, or they are more
    than the vanish grace), else None. Pure.

    Why: a run's absence must be seen by reads, not inferred from a Prometheus outage.
    After one (a restart, an unreachable server) the first reads may come before its
    first scrape of the exporters, and every run would look gone for as long as the
    outage lasted: finished as cancelled, and frozen. The runs seen at that read count
    their absence from this one instead (``HistoryStore.record``); a run already gone
    before it keeps counting, without the seconds the failed reads left unseen
    (``unseen_seconds``), so that a ``once`` CronJob whose period exceeds the grace
    still finishes vanished runs (one period later).
    """
    if previous is None:
        return None
    if (failed_at is not None and failed_at > previous) or now - previous > grace_seconds:
        return previous
    return None


def unseen_seconds(previous: float | None, failed_at: float | None) -> float:
    """The seconds from the previous successful read to the latest failed one after it
    (0: none failed): no read covered them, so a run already absent at the previous read
    does not count them towards the vanish grace (``HistoryStore.record``). Pure.

    Why only up to the failed read: the read that succeeds after it covers the seconds
    since that attempt, as any read covers those since the one before it. So with
    Prometheus answering every other cycle (timeouts at a large site) a vanished run's
    absence still adds up, a cycle's seconds per successful read, and it is finished;
    while outages, however long, add only the cycle after each of them.
    """
    if previous is None or failed_at is None:
        return 0.0
    return max(0.0, failed_at - previous)


def partial_hold(
    partial: tuple[float | None, float | None],
    now: float,
    said: Sequence[str],
    hold_seconds: float,
    settle_seconds: float,
) -> tuple[float | None, float | None, bool]:
    """The current run of partial reads after this read, as (its first read, its
    latest read; None, None: none), and whether this read's absences are held (not
    counted). ``partial``: the same pair before this read. Pure.

    Why: a server that answers with warnings (Thanos Query with a store down, a
    Prometheus whose remote-read source is away, a VictoriaMetrics cluster with a
    storage node down) answers ``success`` with only what the others hold, and the
    runs of the missing part look gone: finished as cancelled after the vanish grace,
    learnt so, revived (refitted twice) when the part is back, and without a forecast
    meanwhile. So a partial read counts absences as a failed read does
    (``uncovered_since``, ``unseen_seconds``), while what it shows is recorded and
    forecast. Why a bound (``hold_seconds``): a setup partial for good (a store removed
    but still listed, a broken remote_read) would otherwise never finish a vanished
    run; past it (or with none, 0), a partial read counts absences as a whole one.
    Why a run ends only ``settle_seconds`` (the vanish grace) after its latest partial
    read: a flapping store answers whole now and then, and a run restarted by each
    whole read never reached the bound (a run gone for good, one read in ten whole,
    was finished after 100 min instead of 40); a whole read inside the run counts its
    absences as any whole read does.
    """
    since, last = partial
    if said:
        since = now if since is None or since > now else since
        return since, now, hold_seconds > 0 and now - since <= hold_seconds
    if since is not None and last is not None and 0.0 <= now - last < settle_seconds:
        return since, last, False
    return None, None, False


def vanished(
    stored: Sequence[StoredRun], present: Set[RunKey], now: float, grace_seconds: float
) -> set[RunKey]:
    """The running runs of ``stored`` absent from ``present`` for ``grace_seconds``:
    since last present, or since their start for a run never seen present (its start
    read by one query of the cycle, its last report not yet by the one before: both
    ask ``now``). Pure. An exporter restart gets the grace period."""
    out = set()
    for run in stored:
        key = run_key(run.run)
        seen = max(run.last_seen, run.run.start_timestamp)
        if key not in present and now - seen >= grace_seconds:
            out.add(key)
    return out


def last_progress(run: Run, view: CycleView) -> float:
    """Time of the run's latest progress: an epoch end or a report of any kind. Pure."""
    return max(run.last_timestamp, view.last_progress.get(run_key(run), -math.inf))


def progress_overdue(run: Run, view: CycleView, now: float, s: CycleSettings) -> bool:
    """No progress for ``stall_after_seconds``: the first condition of ``is_stalled``,
    the one that needs no GPU data. Pure."""
    return now - last_progress(run, view) > s.stall_after_seconds


def silent_too_long(run: Run, view: CycleView, now: float, s: CycleSettings) -> bool:
    """No progress for ``max(stall_after, 3 × median epoch)``: the part of
    ``is_stalled`` that needs no GPU data. Pure. The epochs are those the run did
    (``runs.own_work``): the epochs a resumed run ended at its start are no 0 s epochs."""
    last = last_progress(run, view)
    if now - last <= s.stall_after_seconds:  # recent progress (not progress_overdue)
        return False
    times = own_work(run).epoch_times
    durations = [b[1] - a[1] for a, b in itertools.pairwise(times)]
    typical = statistics.median(durations) if durations else 0.0
    return now - last > max(s.stall_after_seconds, 3 * typical)


def is_stalled(run: Run, view: CycleView, now: float, s: CycleSettings) -> bool:
    """No progress for ``max(stall_after, 3 × median epoch)`` AND the GPU idle meanwhile.

    Pure. Unknown GPU use (no utilisation series for the pod) never counts as idle:
    a run without GPU data is not declared stalled on silence alone.
    """
    if not silent_too_long(run, view, now, s):
        return False
    util = view.util_recent.get((run.namespace, run.pod, run.container))
    if util is None:  # the GPU series may name another container of the pod
        util = view.pod_util_recent().get((run.namespace, run.pod))
    return util is not None and util < s.idle_ratio


def sanitize(fc: Forecast) -> Forecast | None:
    """Sorted, non-negative quantiles; None when any is not a finite number."""
    values = (fc.p10, fc.p50, fc.p90)
    if not all(isinstance(v, int | float) and math.isfinite(v) for v in values):
        return None
    p10, p50, p90 = sorted(max(0.0, float(v)) for v in values)
    if (p10, p50, p90) == values:
        return fc
    return dataclasses.replace(fc, p10=p10, p50=p50, p90=p90)


def gpu_free_times(allocations: Sequence[Allocation], jobs: Sequence[JobForecast]) -> list[GpuFree]:
    """Per GPU, the latest predicted end of the pods on it, quantile by quantile.

    Pure. A GPU held by any pod without a forecast (an idle notebook, a job that
    reports no progress) has an unknown free time and is left out. A pod's GPUs are
    released when the pod ends, so its end is the latest of its containers' and is
    unknown while a container holding one of its GPUs has no forecast (a notebook
    beside the training container). A run whose container holds none of the pod's GPUs
    (its report named no container, or the pod's first: docs/progress.md) counts for
    the pod's only GPU-holding container, and for none when there are several.
    """
    holders: dict[tuple[str, str], set[str]] = {}
    for alloc in allocations:
        holders.setdefault((alloc.namespace, alloc.pod), set()).add(alloc.container)
    ends: dict[tuple[str, str], tuple[float, float, float]] = {}
    forecast: dict[tuple[str, str], set[str]] = {}
    for job in jobs:
        key = (job.run.namespace, job.run.pod)
        prev = ends.get(key)
        ends[key] = (
            job.completion_timestamps
            if prev is None
            else tuple(max(a, b) for a, b in zip(prev, job.completion_timestamps, strict=True))  # type: ignore[assignment]
        )
        held = holders.get(key, set())
        covered = {job.run.container} & held or (held if len(held) == 1 else set())
        forecast.setdefault(key, set()).update(covered)
    per_gpu: dict[tuple[str, str, str], list[tuple[float, float, float] | None]] = {}
    for alloc in allocations:
        pod = (alloc.namespace, alloc.pod)
        known = forecast.get(pod, set()) >= holders[pod]
        per_gpu.setdefault((alloc.node, alloc.gpu, alloc.uuid), []).append(
            ends.get(pod) if known else None
        )
    out = []
    for (node, gpu, uuid), pod_ends in sorted(per_gpu.items()):
        if any(e is None for e in pod_ends):
            continue
        stamps = tuple(max(e[i] for e in pod_ends if e is not None) for i in range(3))
        out.append(GpuFree(node, gpu, uuid, stamps))  # type: ignore[arg-type]
    return out
