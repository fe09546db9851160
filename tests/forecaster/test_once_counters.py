"""gpu_eta.forecaster.once_counters: totals carried between ``once`` runs in a real
history file; damage counts from 0, logged, never raised."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpu_eta.forecaster import once_counters
from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.once_counters import (
    COUNTERS_KEY,
    MAX_KEY_PART_CHARS,
    STALLED_KEY,
    CountersError,
    dump_counters,
    dump_stalled,
    load_counters,
    load_stalled,
    parse_counters,
    parse_stalled,
    save_counters,
    save_stalled,
    start_from,
)
from gpu_eta.forecaster.series import QueryStats


def test_totals_saved_by_one_run_are_where_the_next_starts(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        errors = Counter({"pending_failed": 1, "cycle_failed": 0})
        stats = QueryStats(success=12, error=1, skipped_series=2, partial=3)
        assert save_counters(store, errors, stats)
    finally:
        store.close()
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        errors, stats = Counter(), QueryStats()
        start_from(load_counters(store), errors, stats)
        errors["pending_failed"] += 1  # this run's own
        stats.success += 12
    finally:
        store.close()
    assert errors == Counter({"pending_failed": 2})
    assert stats == QueryStats(success=24, error=1, skipped_series=2, partial=3)


def test_nothing_saved_starts_from_zero(tmp_path: Path) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        saved = load_counters(store)
    finally:
        store.close()
    assert (saved.job_errors, saved.queries, saved.skipped) == (Counter(), {}, 0)


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        json.dumps({"version": 99, "job_errors": {"x": 1}}),
        json.dumps({"version": 1, "job_errors": [1]}),
        "x" * 70_000,
        "[" * 5000,
    ],
)
def test_an_unusable_value_starts_from_zero_with_one_error_line(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        store.set_meta(COUNTERS_KEY, text)
        saved = load_counters(store)
    finally:
        store.close()
    assert (saved.job_errors, saved.queries) == (Counter(), {})
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "start from 0" in errors[0].getMessage()


def test_damaged_entries_are_left_out_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = json.dumps(
        {
            "version": 1,
            "job_errors": {"ok": 3, "neg": -1, "flt": 1.5, "bool": True, "": 2, "r" * 200: 1},
            "queries": {"success": 7, "error": "2", "other": 1},
        }
    )
    saved = parse_counters(text)
    assert saved.job_errors == Counter({"ok": 3})
    assert saved.queries == {"success": 7}
    assert saved.skipped == 7
    with pytest.raises(CountersError):
        parse_counters(json.dumps({"version": 1, "queries": 3}))


def test_dump_then_parse_is_the_same_totals() -> None:
    text = dump_counters(Counter({"b": 2, "a": 1}), QueryStats(3, 4, 5, 6))
    saved = parse_counters(text)
    assert saved.job_errors == Counter({"a": 1, "b": 2}) and saved.skipped == 0
    assert saved.queries == {"success": 3, "error": 4, "skipped_series": 5, "partial": 6}


class _Refusing:
    """A store whose every call fails, as a broken history file's does."""

    def get_meta(self, key: str) -> str | None:
        raise OSError("disk I/O error")

    def set_meta(self, key: str, value: str) -> None:
        raise OSError("disk I/O error")


def test_a_refusing_store_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    assert load_counters(_Refusing()).job_errors == Counter()
    assert save_counters(_Refusing(), Counter({"x": 1}), QueryStats()) is False
    assert len([r for r in caplog.records if r.levelname == "ERROR"]) == 2


def test_stall_verdicts_saved_by_one_run_are_those_the_next_keeps(tmp_path: Path) -> None:
    keys = {("ml", "pod-a", "c", "run-1"), ("ml", "pod-b", "c", 'r\u00e9"2')}
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        assert load_stalled(store) == frozenset()  # nothing saved: none kept
        assert save_stalled(store, keys)
    finally:
        store.close()
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        assert load_stalled(store) == keys
    finally:
        store.close()


@pytest.mark.parametrize(
    "text",
    ["{not json", json.dumps({"version": 99, "stalled": []}), json.dumps({"version": 1})],
)
def test_unusable_stall_verdicts_keep_none_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    store = HistoryStore.open(tmp_path / "h.sqlite")
    try:
        store.set_meta(STALLED_KEY, text)
        with caplog.at_level("WARNING"):
            assert load_stalled(store) == frozenset()
    finally:
        store.close()
    assert [r.levelname for r in caplog.records] == ["WARNING"], caplog.text


def test_damaged_stall_verdicts_are_left_out_and_the_others_kept(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = ["ml", "p", "c", "r"]
    entries = [good, ["ml", "p", "c"], ["ml", "p", "c", 7], "x", ["a", "b", "c", "d" * 2000]]
    text = json.dumps({"version": 1, "stalled": entries})
    assert parse_stalled(text) == (frozenset({tuple(good)}), 4)

    class Meta:
        def get_meta(self, key: str) -> str | None:
            return text

        def set_meta(self, key: str, value: str) -> None:
            raise AssertionError("not written")

    with caplog.at_level("WARNING"):
        assert load_stalled(Meta()) == {tuple(good)}
    assert len(caplog.records) == 1 and "4 damaged entries" in caplog.text


def test_saved_stall_verdicts_are_bounded_and_read_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many runs are stalled, the saved value is one ``parse_stalled`` reads:
    at most ``MAX_STALLED_RUNS`` keys within ``MAX_STALLED_CHARS``; a key part too long
    to read back is left out rather than spoiling the whole value."""
    monkeypatch.setattr(once_counters, "MAX_STALLED_RUNS", 5)
    many = {("ml", f"pod-{i:02d}", "c", "r") for i in range(20)}
    long = ("ml", "p" * (MAX_KEY_PART_CHARS + 1), "c", "r")
    keys, skipped = parse_stalled(dump_stalled([*many, long]))
    assert keys == set(sorted(many)[:5]) and skipped == 0
    monkeypatch.setattr(once_counters, "MAX_STALLED_RUNS", 10_000)
    monkeypatch.setattr(once_counters, "MAX_STALLED_CHARS", 200)
    text = dump_stalled(many)
    assert len(text) <= 200
    keys, skipped = parse_stalled(text)
    assert 0 < len(keys) < len(many) and skipped == 0
