"""gpu_eta.forecaster.once_counters: totals carried between ``once`` runs in a real
history file; damage counts from 0, logged, never raised."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from gpu_eta.forecaster.history import HistoryStore
from gpu_eta.forecaster.once_counters import (
    COUNTERS_KEY,
    CountersError,
    dump_counters,
    load_counters,
    parse_counters,
    save_counters,
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
