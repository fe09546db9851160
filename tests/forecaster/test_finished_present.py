"""Runs finished but still present (finished_present): which of them a cycle reads again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpu_eta.forecaster.finished_present import FinishedPresent
from gpu_eta.forecaster.runs import SAME_START_SECONDS, Run, RunKey

NOW = 1_000_000.0
WINDOW = 180.0
A: RunKey = ("ml", "pod-a", "c", "a")
B: RunKey = ("ml", "pod-b", "c", "b")
C: RunKey = ("ml", "pod-c", "c", "c")


class History:
    """A history holding ``completed`` (key: stored start), that notes each lookup."""

    def __init__(self, completed: Mapping[RunKey, float] | None = None) -> None:
        self.completed = dict(completed or {})
        self.asked: list[list[RunKey]] = []

    def completed_starts(self, keys: Sequence[RunKey]) -> dict[RunKey, float]:
        self.asked.append(list(keys))
        return {k: self.completed[k] for k in keys if k in self.completed}


def finished(key: RunKey, start: float, completed: bool) -> Run:
    """A finished run of ``key`` started at ``start``, completed or not."""
    namespace, pod, container, run_id = key
    times = ((0.0, start), (1.0, start + 60))
    plan = 1.0 if completed else 2.0
    return Run(
        run_id, plan, times, completed=completed, namespace=namespace, pod=pod, container=container
    )


def test_a_run_finished_here_is_not_read_within_the_window_and_is_after_it() -> None:
    fp = FinishedPresent(History().completed_starts)
    fp.note_finished([finished(A, NOW - 600, completed=False)], NOW)
    assert fp.finished_lately(A) and fp.finished_at == {A: NOW}
    assert fp.to_read_as_ending([A, B], frozenset()) == (B,)
    fp.prune(NOW + WINDOW, WINDOW)  # its last samples may still be in this read
    assert fp.finished_lately(A)
    assert fp.to_read_as_ending([A, B], frozenset()) == (B,)
    fp.prune(NOW + WINDOW + 1, WINDOW)  # gone from the answers: what is seen is a new run
    assert not fp.finished_lately(A) and fp.finished_at == {}
    assert fp.to_read_as_ending([A, B], frozenset()) == (A, B)
    assert fp.to_read_as_ending([B, A], frozenset()) == (B, A)  # in the order asked


def test_a_run_revived_is_read_as_any_running_run() -> None:
    fp = FinishedPresent(History().completed_starts)
    fp.note_finished([finished(A, NOW - 600, completed=False)], NOW)
    fp.note_running_again([A, B])  # B: never finished here, nothing to forget
    assert not fp.finished_lately(A)
    assert fp.to_read_as_ending([A], frozenset()) == (A,)


def test_an_ended_run_is_read_as_ending_only_until_a_read_records_it_ended() -> None:
    fp = FinishedPresent(History().completed_starts)
    # the cycle that first reads it ended reads it by name (its last epochs, its means)
    assert fp.to_read_as_ending([A, B], frozenset()) == (A, B)
    fp.note_ended(frozenset({A}))  # that read recorded
    assert fp.to_read_as_ending([A, B], frozenset()) == (B,)  # its pod lives on: not again
    fp.note_ended(frozenset({A}))
    assert fp.to_read_as_ending([A, B], frozenset()) == (B,)
    fp.note_ended(frozenset())  # its end no longer answered: whatever runs now is read
    assert fp.to_read_as_ending([A, B], frozenset()) == (A, B)


def test_a_run_whose_recorded_end_is_gone_while_present_was_trained_again() -> None:
    fp = FinishedPresent(History().completed_starts)
    fp.note_ended(frozenset({A, B, C}))
    # A: end gone, present (a new run); B: end gone, not present; C: still ended
    assert fp.trained_again(frozenset({C}), frozenset({A, C})) == {A}
    fp.note_ended(frozenset())
    assert fp.trained_again(frozenset(), frozenset({A, B, C})) == frozenset()


def test_a_completed_run_present_with_its_start_is_frozen_and_a_later_start_is_new() -> None:
    start = NOW - 3600
    history = History({A: start, B: start, C: start})
    fp = FinishedPresent(history.completed_starts)
    starts = {
        A: start + SAME_START_SECONDS,  # the same start, re-read or rounded
        B: start + SAME_START_SECONDS + 0.5,  # a new run under the key
        C: start - 30,  # an earlier one: an older snapshot of the run
    }
    frozen = fp.completed_present([A, B, C], starts)
    assert frozen == {A, C}
    assert fp.to_read_as_ending([A, B, C], frozen) == (B,)


def test_a_run_without_a_start_read_is_not_frozen_nor_looked_up() -> None:
    history = History({A: NOW - 3600})
    fp = FinishedPresent(history.completed_starts)
    assert fp.completed_present([A], {}) == frozenset()
    assert history.asked == []


def test_a_key_the_history_holds_completed_is_looked_up_once_while_it_may_end() -> None:
    start = NOW - 3600
    history = History({A: start, B: start})
    fp = FinishedPresent(history.completed_starts)
    starts = {A: start, B: start, C: start}
    for _ in range(3):
        assert fp.completed_present([A, B, C], starts) == {A, B}
    # C, not held completed, may yet finish: asked again; A and B only once
    assert history.asked == [[A, B, C], [C], [C]]
    history.asked = []
    fp.completed_present([B], starts)  # A no longer may end: forgotten
    fp.completed_present([A, B], starts)
    assert history.asked == [[A]]


def test_a_run_finished_here_completed_is_held_without_a_lookup() -> None:
    start = NOW - 3600
    history = History()  # another process's view would not matter: never asked
    fp = FinishedPresent(history.completed_starts)
    fp.note_finished([finished(A, start, completed=True)], NOW)
    fp.note_finished([finished(B, start, completed=False)], NOW)  # cancelled: not held
    fp.prune(NOW + WINDOW + 1, WINDOW)  # past the window, still known completed
    assert fp.completed_present([A, B], {A: start, B: start}) == {A}
    assert history.asked == [[B]]
