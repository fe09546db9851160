"""Runs finished but still present: which runs a cycle reads as ending, of those whose
series Prometheus still answers after the run is over. Pure (no I/O): the history is
asked through one callable.

A run's series outlive it: its last samples stay in every answer over a read window
after its exporter stops reporting it, and its pod may live on for days with the run's
end and plan series (a Job's Succeeded pod until its TTL, a notebook after ``end()``).
``ending_runs`` names such a run among those that may end, whose progress and means a
cycle reads by name before the store freezes them (``Cycle._range_span``). But the
history keeps a finished run frozen: read and stored again it changes nothing, and at a
site with hundreds of such pods every cycle would read them all by name. Three memories
tell such a run, each where the others cannot:

- finished lately (``note_finished``, ``prune``): the runs this process finished, for a
  read window, the time their last samples linger in the window's answers;
- ended recorded (``note_ended``): the runs whose end series the latest recorded read
  answered. A run is read as ending in the cycle that first records it ended, not in
  every cycle its pod lives on; and one whose end is no longer answered while it is
  present was trained again under its name (``trained_again``);
- completed (``completed_present``): the stored start of the runs the history holds
  finished completed whose series are still answered, which covers the runs finished
  more than a window ago, before a restart or by another process, and those retention
  deleted since (the history keeps their key and start while their series are read:
  ``HistoryStore.completed_starts``; the cycle renews that mark with each read that
  finds them, ``HistoryStore.record``'s ``lingering``). Present with that
  start (``same_run_start``) such a run is frozen, neither read by name nor stored
  again; a new run under its key, with a later start, is read as any.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from types import MappingProxyType

from gpu_eta.forecaster.runs import Run, RunKey, run_key, same_run_start

# The history's stored start of each of the keys given whose latest run is finished
# completed, the others left out (``HistoryStore.completed_starts``).
CompletedStarts = Callable[[Sequence[RunKey]], Mapping[RunKey, float]]


class FinishedPresent:
    """The memories of runs finished but present, and the rules that read them.

    A cycle writes them in this order: ``note_ended`` once its read is recorded,
    ``note_running_again`` with the runs the store revived, then, every cycle after the
    store's finish, ``prune`` and ``note_finished``. Its next read asks ``trained_again``
    and ``finished_lately`` (which runs' unchanging series to read again), then, unless
    it is a full read, ``completed_present`` and ``to_read_as_ending`` (which runs to
    read by name).
    """

    def __init__(self, completed_starts: CompletedStarts) -> None:
        self._completed_starts = completed_starts
        # runs this process finished lately, with the time it finished them
        self._finished_at: dict[RunKey, float] = {}
        # the runs whose end series the latest recorded read answered
        self._ended: frozenset[RunKey] = frozenset()
        # the stored start of runs the history holds finished completed, of those that
        # may end (``completed_present``)
        self._completed: dict[RunKey, float] = {}

    @property
    def finished_at(self) -> Mapping[RunKey, float]:
        """The runs this process finished within the last read window (``prune``), with
        the time it finished them; read-only."""
        return MappingProxyType(self._finished_at)

    def note_ended(self, ended: frozenset[RunKey]) -> None:
        """Remember ``ended``, the runs whose end series the read just recorded
        answered, in place of the previous read's."""
        self._ended = ended

    def note_running_again(self, keys: Iterable[RunKey]) -> None:
        """Forget that this process finished ``keys``: the store revived them (present
        again with their start), and a running run is read as any."""
        for key in keys:
            self._finished_at.pop(key, None)

    def prune(self, now: float, window: float) -> None:
        """Forget the runs this process finished more than ``window`` before ``now``:
        their last samples have left the window's answers. One completed whose pod
        lives on is still known by its start (``completed_present``)."""
        self._finished_at = {k: t for k, t in self._finished_at.items() if t >= now - window}

    def note_finished(self, runs: Sequence[Run], now: float) -> None:
        """Remember ``runs``, finished by this process at ``now``, for a read window
        (``prune``); and the start of those that completed, so that their series still
        answered after it are known as theirs without asking the history."""
        self._finished_at.update((run_key(r), now) for r in runs)
        self._completed.update((run_key(r), r.start_timestamp) for r in runs if r.completed)

    def finished_lately(self, key: RunKey) -> bool:
        """Whether this process finished ``key`` within the last read window: frozen in
        the store, so nothing of it needs reading again (a plan raised since, say)."""
        return key in self._finished_at

    def trained_again(self, ended: Set[RunKey], present: Set[RunKey]) -> frozenset[RunKey]:
        """The runs the latest recorded read answered ended that this read's ``ended``
        no longer holds while they are ``present``: trained again under their name (the
        exporter began a new run: a new start, no end), so their start is to be read
        again now (its old start with the old end lingering in the window reads it
        done)."""
        return (self._ended - ended) & present

    def completed_present(
        self, may_end: Sequence[RunKey], starts: Mapping[RunKey, float]
    ) -> frozenset[RunKey]:
        """The runs of ``may_end`` (``ending_runs``: at their plan or ended) whose key
        the history holds finished completed with the start this read answered
        (``starts``; the same within ``SAME_START_SECONDS`` or an earlier one:
        ``same_run_start``): that run's series lingering with its pod, frozen. A new run
        under the key, with a later start, is not one; nor is a run without a start read.

        The history is asked only of the keys with a start read that are not held. A
        key is held while it may end, so the memory lasts as long as the lingering pods
        and no longer; a key the history does not hold completed is not remembered, as
        the run may yet finish (by this process: held from then on; by another: found
        at the next read)."""
        self._completed = {k: self._completed[k] for k in may_end if k in self._completed}
        ask = [k for k in may_end if k not in self._completed and k in starts]
        if ask:
            self._completed.update(self._completed_starts(ask))
        return frozenset(
            k
            for k in may_end
            if k in self._completed
            and k in starts
            and same_run_start(starts[k], self._completed[k])
        )

    def to_read_as_ending(
        self, may_end: Sequence[RunKey], frozen: Set[RunKey]
    ) -> tuple[RunKey, ...]:
        """The runs of ``may_end`` to read by name as ending runs (``Cycle._range_span``),
        in its order: neither finished lately, nor answered ended by the latest recorded
        read, nor ``frozen`` (``completed_present``)."""
        done = self._finished_at.keys() | self._ended | frozen
        return tuple(k for k in may_end if k not in done)
